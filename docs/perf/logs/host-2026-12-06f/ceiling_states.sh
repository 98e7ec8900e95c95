#!/bin/bash
# The copy ceilings per state: N rounds of membw -t 2 (memcpy and plain
# stores, -p) at 1, 2 and 4 MiB and allreduce_perf -np 2 at 1-4 MiB (30
# calls after 25), each preceded by the cross-core probe's state. Run from
# the repository root with build-host built.
B=build-host/tools
state(){ timeout 5 ${XCORE:-docs/perf/logs/host-2026-12-06f/xcore} 1024 0.3 0.25 | grep core0 | head -1 | grep -o "cross-read med *[0-9.]*" | awk '{print $3}'; }
for i in $(seq 1 ${N:-15}); do
  s=$(state); echo "$(date +%T) x=$s membw-memcpy: $(for b in 1M 2M 4M; do $B/membw -b $b -t 2 -n 20 | tail -n 1 | awk '{printf "%s/%s ", $2, $2}'; done)"
  s=$(state); echo "$(date +%T) x=$s membw-plain: $(for b in 1M 2M 4M; do $B/membw -b $b -t 2 -n 20 -p | tail -n 1 | awk '{printf "%s/%s ", $2, $2}'; done)"
  s=$(state); echo "$(date +%T) x=$s zcc: $($B/allreduce_perf -np 2 -b 1M -e 4M -f 2 -n 30 -w 25 | grep -E '^ +[0-9]' | awk '{printf "%s/%s ", $8, $12}')"
done
