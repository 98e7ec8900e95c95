#!/bin/bash
# Alternating runs of allreduce_perf -np 2 under each environment given
# (e.g. ZCC_RING_SLOT_NT=0 ZCC_RING_SLOT_NT=1), N rounds, sizes BS-ES,
# NI iterations after WI warm-up, each run preceded by the cross-core
# state (xcore's cross-read at 1 MiB: under 30 GB/s the CPUs are apart).
# Run from the repository root with build-host built; XCORE: the probe.
# Output: time x=STATE ENV: out-of-place/in-place busbw per size.
B=build-host/tools
state(){ timeout 5 ${XCORE:-docs/perf/logs/host-2026-12-06f/xcore} 1024 0.3 0.25 | grep core0 | head -1 | grep -o "cross-read med *[0-9.]*" | awk '{print $3}'; }
run(){ env "$@" $B/allreduce_perf -np 2 -b ${BS:-1M} -e ${ES:-4M} -f 2 -n ${NI:-30} -w ${WI:-10} | grep -E "^ +[0-9]" | awk '{printf "%s/%s ", $8, $12}'; }
for i in $(seq 1 ${N:-20}); do
  for v in "$@"; do s=$(state); echo "$(date +%T) x=$s $v: $(run $v)"; done
done
