#!/usr/bin/env bash
# Build and run zcc's GPU kernel checks and timings (tests/gpu) on a GPU host.
#
#   scripts/gpu_check.sh [--quick] [--no-time] [--no-check]
#
# Environment: OUT (log folder), ZCC_GPU_BIN (prebuilt binary),
# ZCC_GPU_BUILD (build folder), ZCC_GPU_CHECK_TIMEOUT / ZCC_GPU_TIME_TIMEOUT
# (seconds per phase, default 900), NVCC.
#
# Builds tests/gpu/test_gpu_kernels with nvcc directly (the kernels of
# src/device/, the host reduction loops as the reference, NCCL for the
# comparison; no cmocka, no hwloc), unless ZCC_GPU_BIN names a binary built
# from the same sources that runs here. Then runs the exact checks, then the
# timings, and prints a short table last. Full logs go to $OUT (default
# ./gpu_check_out). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
quick= ; do_time=1; do_check=1
for a in "$@"; do
  case $a in
    --quick) quick=--quick ;;
    --no-time) do_time= ;;
    --no-check) do_check= ;;
    *) echo "usage: $0 [--quick] [--no-time] [--no-check]" >&2; exit 2 ;;
  esac
done

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cudadir=$(dirname "$(dirname "$NVCC")")

# NCCL: the CUDA toolkit's, the system's, or the nvidia-nccl Python package's.
nccl_inc= ; nccl_lib=
for d in "$cudadir" /usr /usr/local; do
  if [ -f "$d/include/nccl.h" ]; then
    nccl_inc=$d/include
    for l in "$d/lib64" "$d/lib" "$d/lib/x86_64-linux-gnu" /usr/lib/x86_64-linux-gnu; do
      if ls "$l"/libnccl.so* >/dev/null 2>&1; then nccl_lib=$l; break; fi
    done
    [ -n "$nccl_lib" ] && break
  fi
done
if [ -z "$nccl_lib" ]; then
  pyd=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [ -n "$pyd" ] && [ -f "$pyd/include/nccl.h" ]; then nccl_inc=$pyd/include; nccl_lib=$pyd/lib; fi
fi
if [ -z "$nccl_lib" ]; then echo "gpu_check: nccl.h / libnccl not found" >&2; exit 1; fi
[ -e "$nccl_lib/libnccl.so" ] || { mkdir -p /tmp/zcc_nccl_link; ln -sf "$nccl_lib"/libnccl.so.2 /tmp/zcc_nccl_link/libnccl.so; nccl_link=/tmp/zcc_nccl_link; }
nccl_link=${nccl_link:-$nccl_lib}
export LD_LIBRARY_PATH=$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(hostname)  kernel: $(uname -r)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvidia-smi topo -m
  "$NVCC" --version | tail -2
  echo "nccl: $nccl_inc, $nccl_lib"
  echo "git: $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo none)"
} 2>&1 | tee "$OUT/versions.txt"

# Build: the .cu files in parallel (the allreduce kernels take longest).
bin=${ZCC_GPU_BIN:-}
if [ -n "$bin" ] && [[ "$("$bin" --bogus-flag 2>&1)" == *usage* ]]; then
  echo "using prebuilt $bin"
else
  b=${ZCC_GPU_BUILD:-/tmp/zcc_gpu_build}
  mkdir -p "$b"
  inc="-I$root/src/include -I$root/include -I$nccl_inc"
  flags="-O3 -std=c++17 -arch=sm_90 -Xptxas -v"
  t0=$(date +%s)
  pids=()
  for f in src/device/allreduce_kernels src/device/allreduce_ll src/device/reduce_kernels src/device/coll_kernels src/device/p2p_kernels tests/gpu/test_gpu_kernels; do
    o=$b/$(basename $f).o
    "$NVCC" $flags $inc -c "$root/$f.cu" -o "$o" > "$b/$(basename $f).log" 2>&1 & pids+=($!)
  done
  for f in misc/reduce misc/param misc/debug misc/errors; do
    gcc -std=gnu11 -O2 -D_GNU_SOURCE -I"$root/src/include" -I"$root/include" -c "$root/src/$f.c" -o "$b/$(basename $f).o" & pids+=($!)
  done
  fail=0
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  cat "$b"/*.log > "$OUT/build.log"
  if [ $fail -ne 0 ]; then grep -E "error" "$OUT/build.log" | head -20; echo "gpu_check: build failed" >&2; exit 1; fi
  "$NVCC" -arch=sm_90 -o "$b/test_gpu_kernels" "$b"/*.o -L"$nccl_link" -lnccl || exit 1
  echo "built in $(( $(date +%s) - t0 )) s: $b/test_gpu_kernels"
  bin=$b/test_gpu_kernels
fi

rc=0
if [ -n "$do_check" ]; then
  timeout "${ZCC_GPU_CHECK_TIMEOUT:-900}" "$bin" --check $quick > "$OUT/check.log" 2>&1; rc=$?
  [ $rc -eq 124 ] && echo "gpu_check: checks timed out (a hang?)"
  grep -E "^(FAIL|cuda|  gpu|reduce checks|allreduce checks|graph checks|skipped)" "$OUT/check.log" | head -60
  tail -1 "$OUT/check.log"
fi
if [ -n "$do_time" ]; then
  timeout "${ZCC_GPU_TIME_TIMEOUT:-900}" "$bin" --time $quick > "$OUT/time.log" 2>&1 || { rc=1; echo "gpu_check: timing run failed or timed out"; }
  echo
  sed -n '/^copy engine/,$p' "$OUT/time.log"
fi
exit $rc
