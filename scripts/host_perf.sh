#!/usr/bin/env bash
# The host performance report of docs/perf/host.md, in one run: machine and
# versions, the memory-bandwidth ceiling (membw on both cores, memcpy and
# plain stores), and zcc's
# allreduce beside Open MPI's and gloo's (tools/compare_mpi.sh --gloo, gloo
# when /usr/bin/python3 has torch), float32 sum, 8 B to 256 MiB, for each
# rank count of HOST_PERF_NP (default "2 4 8"); then, from 1 MiB, zcc with
# its buffers from zccMemHostAlloc (compare_mpi.sh --hostmem: the allreduce
# runs in place on them) and with its ordinary buffers registered
# (compare_mpi.sh --register: the same, on malloc's memory) beside Open MPI
# again (HOST_PERF_HOSTMEM=0 leaves these out); with more ranks than cores,
# 8 B-64 KiB again over 1000
# iterations. Builds build/ first if needed. Run it on a quiet machine.
# Usage: scripts/host_perf.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
if [ ! -x "$build/tools/allreduce_perf" ] || [ ! -x "$build/tools/mpi_allreduce_ref" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" --target allreduce_perf mpi_allreduce_ref membw >/dev/null
fi
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# host: $(uname -srm), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# compiler: $(cc --version | head -n 1)"
echo "# open mpi: $(mpirun --version 2>/dev/null | head -n 1)"
echo "# zcc: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "## copies on both cores at once (membw -t 2): the ceiling"
echo "# memcpy (streams past a few MiB), and plain stores (membw -p: the cache's rate where the buffers stay in it)"
for b in 1M 2M 4M 8M 16M 32M 64M 128M 256M; do
  m=$("$build/tools/membw" -b "$b" -t 2 -n 20 | tail -n 1 | awk '{print $2}')
  p=$("$build/tools/membw" -b "$b" -t 2 -n 20 -p | tail -n 1 | awk '{print $2}')
  printf "%6s per-core memcpy %6.2f GB/s  plain %6.2f GB/s\n" "$b" "$m" "$p"
done
echo
gloo=
if /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  gloo=--gloo
  echo "# gloo: torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
fi
for np in ${HOST_PERF_NP:-2 4 8}; do
  echo
  echo "## allreduce, $np ranks, float32 sum (compare_mpi.sh $gloo)"
  # where the VM's two cores are placed just now (small messages follow it)
  "$build/tools/membw" -l | tail -n 1 | sed 's/^ */# cache-line latency between the cores: /'
  # 2 ranks: the warm-up holds each size's first timing of its stores (the
  # ring's 24 calls: ZCC_NT_TUNE, src/include/stores.h), as a long job's
  # calls would; the other libraries get the same warm-up.
  iters=50 warm=25
  [ "$np" -gt 2 ] && iters=20 warm=5 # oversubscribed: every library is slow at 256 MiB
  "$build/tools/compare_mpi.sh" -B "$build/tools" -np "$np" -b 8 -e 256M -f 2 -n $iters -w $warm $gloo
  if [ "$np" -gt 2 ]; then
    # With more ranks than cores one run's placement moves either library by
    # up to 2x at small sizes: the same sizes again over 1000 iterations.
    echo
    echo "## allreduce, $np ranks, float32 sum, 8 B-64 KiB over 1000 iterations (compare_mpi.sh)"
    "$build/tools/compare_mpi.sh" -B "$build/tools" -np "$np" -b 8 -e 64K -f 2 -n 1000 -w 50
  fi
  if [ "${HOST_PERF_HOSTMEM:-1}" = 1 ]; then
    echo
    echo "## allreduce, $np ranks, float32 sum, zcc's buffers from zccMemHostAlloc (compare_mpi.sh --hostmem)"
    "$build/tools/compare_mpi.sh" -B "$build/tools" -np "$np" -b 1M -e 256M -f 2 -n $iters -w 5 --hostmem
    echo
    echo "## allreduce, $np ranks, float32 sum, zcc's ordinary buffers registered (compare_mpi.sh --register)"
    "$build/tools/compare_mpi.sh" -B "$build/tools" -np "$np" -b 1M -e 256M -f 2 -n $iters -w 5 --register
  fi
done
