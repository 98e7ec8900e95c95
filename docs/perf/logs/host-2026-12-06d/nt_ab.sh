#!/bin/bash
# Streaming stores for the staged allreduce's result, on and off in
# alternating runs of one build (2026-12-06, session 5). Run from the repo
# root after building build-host: docs/perf/logs/host-2026-12-06d/nt_ab.sh
B=${B:-build-host/tools/allreduce_perf}
ROUNDS=${ROUNDS:-3}
run() { # label env... -- args
  local label=$1; shift
  echo "== $label"
  env "$@" 2>&1 | grep -E "^ +[0-9]" | awk '{printf "%s %s %s | %s %s\n", $1, $6, $8, $10, $12}'
}
for r in $(seq "$ROUNDS"); do
  echo "#### round $r: 2 ranks, the ring (out of place: time us, busbw | in place: time us, busbw)"
  for nt in -1 1048576; do
    run "ZCC_RING_NT_BYTES=$nt" ZCC_RING_NT_BYTES=$nt \
      $B --device host -np 2 -d float -o sum -b 1M -e 256M -f 2 -n 20 -w 3
  done
  for np in 4 8; do
    echo "#### round $r: $np ranks on 2 CPUs, the two-shot"
    for nt in -1 1048576 16777216; do
      run "ZCC_TWOSHOT_NT_BYTES=$nt" ZCC_TWOSHOT_NT_BYTES=$nt \
        $B --device host -np $np -d float -o sum -b 1M -e 128M -f 2 -n 8 -w 2
    done
  done
done
