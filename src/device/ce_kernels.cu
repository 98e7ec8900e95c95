// Flags for copy-engine pipelines (see device.h): one thread, stream-ordered.
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

__global__ void flag_signal_kernel(uint32_t *counter, uint32_t *remote, int inc) {
  uint32_t v = *counter;
  if (inc) *counter = ++v;
  // Earlier work on the stream (kernels and copies) completed before this
  // kernel started; the fence orders it, for peers, before the flag.
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(remote), "r"(v) : "memory");
}

__global__ void flag_wait_kernel(uint32_t *counter, const uint32_t *flag, int inc,
                                 const volatile uint32_t *abort_flag, zcc_dev_stamp_t stamp) {
  const zd_stamp_at stamp_at = zd_stamp_enter(stamp);
  uint32_t want = *counter;
  if (inc) *counter = ++want;
  unsigned spins = 0;
  for (;;) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if ((int32_t)(v - want) >= 0) break;
    if (abort_flag && (++spins & 1023u) == 0 && zd_wait_slow(abort_flag, spins)) break;
  }
  __threadfence_system();
  zd_stamp_exit(stamp_at);
}

// Writes %globaltimer into *out over and over until *stop is nonzero or
// `limit_ns` have passed, so the host can pair its clock with the GPU's.
__global__ void clock_probe_kernel(volatile uint64_t *out, const volatile uint32_t *stop,
                                   uint64_t limit_ns) {
  const uint64_t t0 = zd_globaltimer();
  for (;;) {
    uint64_t t = zd_globaltimer();
    *out = t;
    if (*stop || t - t0 > limit_ns) break;
  }
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_flag_signal(
    uint32_t *counter, uint32_t *remote_flag, int inc, struct CUstream_st *stream) {
  if (!counter || !remote_flag) return cudaErrorInvalidValue;
  flag_signal_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(counter, remote_flag, inc);
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_flag_wait(
    uint32_t *counter, const uint32_t *flag, int inc, const volatile uint32_t *abort_flag,
    const zcc_dev_stamp_t *stamp, struct CUstream_st *stream) {
  if (!counter || !flag) return cudaErrorInvalidValue;
  zcc_dev_stamp_t st = {};
  if (stamp) st = *stamp;
  flag_wait_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(counter, flag, inc, abort_flag, st);
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_clock_probe(
    uint64_t *out, const volatile uint32_t *stop, uint64_t limit_ns, struct CUstream_st *stream) {
  if (!out || !stop) return cudaErrorInvalidValue;
  clock_probe_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(out, stop, limit_ns);
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_ce(void) {
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, flag_signal_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, flag_wait_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, clock_probe_kernel);
  return e;
}
