#!/bin/bash
# zcc (this build's defaults) and Open MPI alternating, 2 ranks, float sum,
# sizes BS-ES (x2), NI iterations after WI warm-up, N rounds, each run
# preceded by the cross-core state (xcore's cross-read at 1 MiB, GB/s:
# under 30 the two CPUs do not share a cache). Run from the repository
# root with build-host built. Output: time x=STATE LIB: busbw per size
# (out of place/in place).
B=build-host/tools
state(){ timeout 5 ${XCORE:-docs/perf/logs/host-2026-12-06f/xcore} 1024 0.3 0.25 | grep core0 | head -1 | grep -o "cross-read med *[0-9.]*" | awk '{print $3}'; }
args="-d float -o sum -b ${BS:-1M} -e ${ES:-16M} -f 2 -n ${NI:-30} -w ${WI:-25}"
for i in $(seq 1 ${N:-20}); do
  s=$(state); echo "$(date +%T) x=$s zcc: $($B/allreduce_perf -np 2 $args | grep -E '^ +[0-9]' | awk '{printf "%s/%s ", $8, $12}')"
  s=$(state); echo "$(date +%T) x=$s mpi: $(mpirun --oversubscribe --allow-run-as-root -np 2 $B/mpi_allreduce_ref $args 2>/dev/null | grep -E '^ +[0-9]' | awk '{printf "%s/%s ", $8, $12}')"
done
