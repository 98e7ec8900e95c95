#!/usr/bin/env bash
# Registered ordinary buffers (zccCommRegister) against Open MPI, 2 ranks
# three times, 4 and 8 ranks once; the ceiling (membw -t 2) first.
set -u
b=${1:-build-host}
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'); zcc $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
for s in 1M 2M 4M 8M 16M 32M 64M 128M 256M; do
  "$b/tools/membw" -b "$s" -t 2 -n 20 | tail -n 1 | awk -v s="$s" '{printf "# membw -t 2 %5s per-core %6.2f GB/s\n", s, $2}'
done
for run in 1 2 3; do
  echo; echo "## 2 ranks, ordinary buffers registered (-R 1), run $run"
  "$b/tools/compare_mpi.sh" -B "$b/tools" -np 2 -b 1M -e 256M -f 2 -n 50 -w 5 --register
done
echo; echo "## 2 ranks, ordinary buffers, not registered"
"$b/tools/compare_mpi.sh" -B "$b/tools" -np 2 -b 1M -e 256M -f 2 -n 50 -w 5
for np in 4 8; do
  echo; echo "## $np ranks, ordinary buffers registered (-R 1)"
  "$b/tools/compare_mpi.sh" -B "$b/tools" -np $np -b 1M -e 256M -f 2 -n 20 -w 5 --register
done
