#!/usr/bin/env bash
# 4 and 8 ranks (oversubscribed on 2 cores), 8 B-4 KiB over 1000 iterations,
# against Open MPI: five runs each; then 2 ranks, five quiet runs (NPS: the
# rank counts, default "4 8 2").
set -u
b=${1:-build-host}
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'); zcc $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
for np in ${NPS:-4 8 2}; do
  for run in 1 2 3 4 5; do
    echo; echo "## $np ranks, run $run"
    "$b/tools/membw" -l | tail -n 1 | sed 's/^ */# cache-line latency between the cores: /'
    "$b/tools/compare_mpi.sh" -B "$b/tools" -np $np -b 8 -e 4K -f 2 -n 1000 -w 50
  done
done
