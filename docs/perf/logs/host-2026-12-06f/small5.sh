#!/bin/bash
# Issue 19's small-message check: 5 separate runs of compare_mpi.sh -np 2 at
# 8 B-4 KiB (1000 calls after 50), each preceded by the cross-core probe's
# state. Run from the repository root with build-host built.
B=build-host/tools
state(){ timeout 5 ${XCORE:-docs/perf/logs/host-2026-12-06f/xcore} 1024 0.3 0.25 | grep core0 | head -1 | grep -o "cross-read med *[0-9.]*" | awk '{print $3}'; }
for i in 1 2 3 4 5; do
  echo "## run $i, $(date +%T), state before: x=$(state)"
  $B/compare_mpi.sh -B $B -np 2 -b 8 -e 4K -f 2 -n 1000 -w 50 | grep -E "^ +[0-9]|size"
  echo "# state after: x=$(state)"
done
