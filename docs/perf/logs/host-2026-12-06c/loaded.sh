#!/usr/bin/env bash
# 2 ranks, 8 B-4 KiB over 1000 iterations against Open MPI, five runs beside
# a busy process (`yes > /dev/null`) that competes for a core, then five
# quiet runs.
set -u
b=${1:-build-host}
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'); zcc $(git rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
yes > /dev/null &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
sleep 1
for run in 1 2 3 4 5; do
  echo; echo "## 2 ranks, loaded, run $run"
  "$b/tools/compare_mpi.sh" -B "$b/tools" -np 2 -b 8 -e 4K -f 2 -n 1000 -w 50
done
kill $busy; wait $busy 2>/dev/null
sleep 2
for run in 1 2 3 4 5; do
  echo; echo "## 2 ranks, quiet, run $run"
  "$b/tools/membw" -l | tail -n 1 | sed 's/^ */# cache-line latency between the cores: /'
  "$b/tools/compare_mpi.sh" -B "$b/tools" -np 2 -b 8 -e 4K -f 2 -n 1000 -w 50
done
