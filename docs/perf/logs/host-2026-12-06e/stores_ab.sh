#!/bin/sh
# 2 ranks, ordinary buffers, 256 KiB-16 MiB: the store kind timed per size
# class (default, ZCC_NT_TUNE=1000) against always streaming (ZCC_NT_TUNE=0,
# the behaviour before 5053886) and always plain (ZCC_RING_NT_BYTES=-1),
# and Open MPI, in alternating runs. The sweep starts below 1 MiB (where
# the timing starts, ZCC_RING_NT_BYTES) because a run's first size is
# cold. Prints size(KiB):out-of-place/in-place busbw in GB/s.
# Usage: stores_ab.sh BUILD_DIR [ROUNDS] [ITERS] [WARMUP]
set -eu
B=$1/tools
rounds=${2:-3}
n=${3:-40}
w=${4:-5}
row() {
  grep -E '^ +[0-9]+ ' | awk '{printf "%s:%s/%s  ", $1/1024, $8, $12}'
  echo
}
one() {
  printf '%-7s' "$1:"
  case $1 in
  timed) "$B/allreduce_perf" $args 2>&1 | row ;;
  stream) ZCC_NT_TUNE=0 "$B/allreduce_perf" $args 2>&1 | row ;;
  plain) ZCC_RING_NT_BYTES=-1 "$B/allreduce_perf" $args 2>&1 | row ;;
  mpi) mpirun --allow-run-as-root -np 2 "$B/mpi_allreduce_ref" $margs 2>&1 | row ;;
  esac
  sleep 1
}
args="-np 2 -b 256K -e 16M -f 2 -n $n -w $w"
margs="-d float -o sum -b 256K -e 16M -f 2 -n $n -w $w"
# Each round starts with the next of the four: the run after Open MPI's
# read slower at every size in a first try, whichever it was.
set -- timed stream plain mpi timed stream plain
k=0
while [ "$k" -lt "$rounds" ]; do
  date -u +%H:%M:%S
  i=0
  for m in "$@"; do
    if [ "$i" -ge $((k % 4)) ] && [ "$i" -lt $((k % 4 + 4)) ]; then one "$m"; fi
    i=$((i + 1))
  done
  k=$((k + 1))
done
