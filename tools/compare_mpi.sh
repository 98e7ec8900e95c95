#!/bin/sh
# Runs zcc's allreduce_perf and Open MPI's MPI_Allreduce (mpi_allreduce_ref)
# over the same float32-sum sweep on this machine, and prints them side by
# side. speedup = MPI time / zcc time (above 1: zcc is faster).
#
# usage: compare_mpi.sh [-B bindir] [-np N] [-b min] [-e max] [-f factor]
#                       [-n iters] [-w warmup] [--gloo] [--hostmem] [--register]
# Defaults: the directory of this script, -np 2 -b 8 -e 256M -f 2, and the
# benchmarks' own -n and -w. MPIRUN overrides the mpirun command. --gloo
# adds torch.distributed's gloo (gloo_allreduce_ref.py beside this script,
# run by GLOO_PYTHON, default /usr/bin/python3) and MPI time / gloo time.
# --hostmem: zcc's buffers from zccMemHostAlloc (allreduce_perf --buffers
# hostmem). --register: zcc's ordinary buffers registered with
# zccCommRegister (allreduce_perf -R 1).
set -eu

bindir=$(cd "$(dirname "$0")" && pwd)
np=2
minb=8
maxb=256M
factor=2
iters=
warmup=
gloo=0
zccopts=""

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
  case "$1" in
    -B|-np|-b|-e|-f|-n|-w)
      if [ $# -lt 2 ]; then
        echo "compare_mpi.sh: $1 needs a value" >&2
        usage >&2
        exit 2
      fi
      case "$1" in
        -B) bindir=$2 ;;
        -np) np=$2 ;;
        -b) minb=$2 ;;
        -e) maxb=$2 ;;
        -f) factor=$2 ;;
        -n) iters=$2 ;;
        -w) warmup=$2 ;;
      esac
      shift 2
      ;;
    --gloo)
      gloo=1
      shift
      ;;
    --hostmem)
      zccopts="$zccopts --buffers hostmem"
      shift
      ;;
    --register)
      zccopts="$zccopts -R 1"
      shift
      ;;
    -h|--help)
      usage
      exit 0
      ;;
    *)
      echo "compare_mpi.sh: unknown option '$1'" >&2
      usage >&2
      exit 2
      ;;
  esac
done

for tool in allreduce_perf mpi_allreduce_ref; do
  if [ ! -x "$bindir/$tool" ]; then
    echo "compare_mpi.sh: $bindir/$tool not found or not executable (build with MPI, or pass -B bindir)" >&2
    exit 2
  fi
done

# Open MPI refuses root without --allow-run-as-root, and counts slots by cores.
if [ -z "${MPIRUN:-}" ]; then
  MPIRUN=mpirun
  if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    MPIRUN="$MPIRUN --oversubscribe"
    if [ "$(id -u)" = 0 ]; then
      MPIRUN="$MPIRUN --allow-run-as-root"
    fi
  fi
fi

common="-d float -o sum -b $minb -e $maxb -f $factor"
[ -n "$iters" ] && common="$common -n $iters"
[ -n "$warmup" ] && common="$common -w $warmup"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# host communicators, like MPI_Allreduce on host memory (the default is cuda on a GPU machine)
echo "# zcc:  $bindir/allreduce_perf --device host -np $np $common${zccopts:+ $zccopts}"
# shellcheck disable=SC2086
if ! "$bindir/allreduce_perf" --device host -np "$np" $common $zccopts >"$tmp/zcc.txt"; then
  cat "$tmp/zcc.txt"
  echo "compare_mpi.sh: allreduce_perf failed" >&2
  exit 1
fi
echo "# MPI:  $MPIRUN -np $np $bindir/mpi_allreduce_ref $common"
# shellcheck disable=SC2086
if ! $MPIRUN -np "$np" "$bindir/mpi_allreduce_ref" $common >"$tmp/mpi.txt"; then
  cat "$tmp/mpi.txt"
  echo "compare_mpi.sh: mpi_allreduce_ref failed" >&2
  exit 1
fi
if [ "$gloo" = 1 ]; then
  py=${GLOO_PYTHON:-/usr/bin/python3}
  ref=$bindir/gloo_allreduce_ref.py
  [ -f "$ref" ] || ref=$bindir/zcc_gloo_allreduce_ref.py # installed
  echo "# gloo: $py $ref -np $np -b $minb -e $maxb -f $factor${iters:+ -n $iters}${warmup:+ -w $warmup}"
  # shellcheck disable=SC2086
  if ! "$py" "$ref" -np "$np" -b "$minb" -e "$maxb" -f "$factor" \
      ${iters:+-n $iters} ${warmup:+-w $warmup} >"$tmp/gloo.txt"; then
    cat "$tmp/gloo.txt"
    echo "compare_mpi.sh: gloo_allreduce_ref.py failed" >&2
    exit 1
  fi
else
  : >"$tmp/gloo.txt"
fi
grep '^# zcc ' "$tmp/zcc.txt" || true
grep '^# mpi_allreduce_ref' "$tmp/mpi.txt" || true
grep '^# gloo_allreduce_ref' "$tmp/gloo.txt" || true

# Rows: size count type redop root | time algbw busbw #wrong (out-of-place) | in-place.
awk -v gloo="$gloo" '
  FNR == 1 { file = FILENAME }
  /^ *[0-9]/ {
    if (file ~ /zcc.txt$/) { zt[$1] = $6; zb[$1] = $8; order[++n] = $1 }
    else if (file ~ /mpi.txt$/) { mt[$1] = $6; mb[$1] = $8 }
    else { gt[$1] = $6; gb[$1] = $8 }
  }
  END {
    printf "# out-of-place, float32 sum; speedup = MPI time / zcc time\n"
    printf "%12s  %12s  %12s  %10s  %10s  %8s", "size(B)", "zcc time(us)", "MPI time(us)", "zcc busbw", "MPI busbw", "speedup"
    if (gloo) printf "  %13s  %10s  %8s", "gloo time(us)", "gloo busbw", "vs gloo"
    printf "\n"
    for (i = 1; i <= n; i++) {
      s = order[i]
      if (!(s in mt)) continue
      ratio = (zt[s] > 0) ? sprintf("%8.2f", mt[s] / zt[s]) : sprintf("%8s", "-")
      printf "%12s  %12s  %12s  %10s  %10s  %s", s, zt[s], mt[s], zb[s], mb[s], ratio
      if (gloo) {
        if (s in gt) printf "  %13s  %10s  %8.2f", gt[s], gb[s], (zt[s] > 0 ? gt[s] / zt[s] : 0)
        else printf "  %13s  %10s  %8s", "-", "-", "-"
      }
      printf "\n"
    }
  }' "$tmp/zcc.txt" "$tmp/mpi.txt" "$tmp/gloo.txt"
