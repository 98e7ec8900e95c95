#!/bin/sh
# 2 ranks, ordinary buffers, 1-16 MiB: the store kind timed per size class
# (default, ZCC_NT_TUNE=1000) against always streaming (ZCC_NT_TUNE=0, the
# behaviour before 5053886) and always plain (ZCC_RING_NT_BYTES=-1), and
# Open MPI, in alternating runs. Prints size(MiB):out-of-place/in-place
# busbw in GB/s. Usage: stores_ab.sh BUILD_DIR [ROUNDS] [ITERS] [WARMUP]
set -eu
B=$1/tools
rounds=${2:-3}
n=${3:-40}
w=${4:-5}
row() {
  grep -E '^ +[0-9]+ ' | awk '{printf "%s:%s/%s  ", $1/1048576, $8, $12}'
  echo
}
k=1
while [ "$k" -le "$rounds" ]; do
  date -u +%H:%M:%S
  for mode in timed stream plain; do
    case $mode in
    timed) set -- ;;
    stream) set -- ZCC_NT_TUNE=0 ;;
    plain) set -- ZCC_RING_NT_BYTES=-1 ;;
    esac
    printf '%-7s' "$mode:"
    env "$@" "$B/allreduce_perf" -np 2 -b 1M -e 16M -f 2 -n "$n" -w "$w" 2>&1 | row
  done
  printf '%-7s' "mpi:"
  mpirun --allow-run-as-root -np 2 "$B/mpi_allreduce_ref" -d float -o sum \
    -b 1M -e 16M -f 2 -n "$n" -w "$w" 2>&1 | row
  k=$((k + 1))
done
