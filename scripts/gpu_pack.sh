#!/usr/bin/env bash
# Build zcc here (Release, CUDA on) and pack what scripts/gpu_run.sh needs on
# a GPU host into .devcarry/ (git-ignored; the device tool carries it):
# libzcc.so, zcc's libnccl.so.2 (lib/nccl/), the benchmarks, the GPU test
# programs (nccl_gpu among them), and the shared libraries
# the GPU host may lack (hwloc, json-c, udev), so nothing compiles there.
#
#   scripts/gpu_pack.sh            # build into build-gpu/ and pack
#   ZCC_PACK_BUILD=build scripts/gpu_pack.sh   # pack an existing CUDA build
#   ZCC_PACK_ONLY=nccl scripts/gpu_pack.sh   # only what gpu_run.sh nccl needs
#                                  # (libzcc.so, lib/nccl/libnccl.so.2, nccl_gpu)
#
# The binaries need a glibc no newer than the GPU host's (built on Debian 12,
# glibc 2.36; the H200 hosts run Ubuntu 24.04, glibc 2.39).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ZCC_PACK_BUILD=DIR packs an existing CUDA build instead (not reconfigured).
b=${ZCC_PACK_BUILD:-build-gpu}
if [ -z "${ZCC_PACK_BUILD:-}" ]; then
  cmake -S . -B $b -DCMAKE_BUILD_TYPE=Release -DZCC_ENABLE_CUDA=ON >/dev/null
fi
cmake --build $b -j"$(nproc)" --target zcc allreduce_perf broadcast_perf reduce_perf \
  allgather_perf reducescatter_perf alltoall_perf sendrecv_perf test_gpu_colls test_gpu_kernels \
  gpu_membw zcc_nccl nccl_gpu test_gpu_hostmem test_gpu_shm_limits zcc_topo tcp_pair zcc_fakeverbs
d=.devcarry
rm -rf $d
mkdir -p $d/bin $d/lib
cp -L $b/src/libzcc.so.0 $d/lib/
ln -s libzcc.so.0 $d/lib/libzcc.so
only=${ZCC_PACK_ONLY:-}
for t in allreduce_perf broadcast_perf reduce_perf allgather_perf reducescatter_perf \
         alltoall_perf sendrecv_perf gpu_membw zcc_topo tcp_pair; do
  [ "$only" = nccl ] && break
  cp $b/tools/$t $d/bin/ 2>/dev/null || cp $b/tools/*/$t $d/bin/ 2>/dev/null || true
done
[ "$only" = nccl ] || cp $b/tests/gpu/test_gpu_colls $b/tests/gpu/test_gpu_hostmem $b/tests/gpu/test_gpu_shm_limits $d/bin/
# The NCCL shim in its own folder, as installed (lib/nccl/), and its GPU program.
mkdir -p $d/lib/nccl
cp -L $b/src/nccl/libnccl.so.2 $d/lib/nccl/
cp $b/tests/nccl/nccl_gpu $d/bin/
# test_gpu_kernels (11 MB) only with ZCC_PACK_KERNELS=1: the carry holds 64 MiB.
if [ "${ZCC_PACK_KERNELS:-0}" = 1 ]; then cp $b/tests/gpu/test_gpu_kernels $d/bin/; fi
for l in libhwloc.so.15 libjson-c.so.5 libudev.so.1; do
  p=$(ldconfig -p | awk -v l=$l '$1 == l && !f {print $NF; f = 1}')
  if [ -n "$p" ]; then cp -L "$p" $d/lib/; fi
done
# The fake verbs provider (a test tool) for the net transport's ib plug-in
# without RDMA hardware, and iproute2's ip with the libraries it links
# (the GPU hosts have no ip; tests/net/gpu_hosts.sh makes namespaces).
[ "$only" = nccl ] || cp $b/tests/fakeverbs/libzcc_fakeverbs.so $d/lib/
if [ "$only" != nccl ] && command -v ip >/dev/null; then
  mkdir -p $d/iproute/lib
  cp -L "$(command -v ip)" $d/iproute/lib/ip
  ldd "$(command -v ip)" | awk '/=> \//{print $3}' | grep -vE '/libc\.so|/ld-linux' |
    xargs -r -I{} cp -L {} $d/iproute/lib/
  # its libraries for ip alone (others on the host keep the host's)
  printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")/lib\nLD_LIBRARY_PATH=$d exec "$d/ip" "$@"\n' \
    > $d/iproute/ip
  chmod +x $d/iproute/ip
fi
strip --strip-debug $d/bin/* $d/lib/libzcc.so.0 $d/lib/nccl/libnccl.so.2 2>/dev/null || true
git rev-parse --short HEAD > $d/commit
git diff --quiet && git diff --cached --quiet || echo "+dirty" >> $d/commit
du -sh $d
ls -l $d/bin $d/lib $d/lib/nccl
# One compressed archive as well (device code compresses about 3x): carry
# .devcarry.tgz when .devcarry/ is over what a device call takes (64 MiB);
# scripts/gpu_run.sh unpacks it where .devcarry/ is missing.
if [ "${ZCC_PACK_TAR:-1}" = 1 ]; then
  tar czf .devcarry.tgz .devcarry
  ls -l .devcarry.tgz
fi
