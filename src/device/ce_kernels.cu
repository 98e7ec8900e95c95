// Flags for copy-engine pipelines (see device.h): one thread, stream-ordered.
#include <cuda_runtime.h>

#include "reduce_ops.cuh"

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
                                 const volatile uint32_t *abort_flag) {
  uint32_t want = *counter;
  if (inc) *counter = ++want;
  unsigned spins = 0;
  for (;;) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if ((int32_t)(v - want) >= 0) break;
    if (abort_flag && (++spins & 1023u) == 0 && *abort_flag) break;
  }
  __threadfence_system();
}

} // namespace

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_flag_signal(
    uint32_t *counter, uint32_t *remote_flag, int inc, struct CUstream_st *stream) {
  if (!counter || !remote_flag) return cudaErrorInvalidValue;
  flag_signal_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(counter, remote_flag, inc);
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_flag_wait(
    uint32_t *counter, const uint32_t *flag, int inc, const volatile uint32_t *abort_flag,
    struct CUstream_st *stream) {
  if (!counter || !flag) return cudaErrorInvalidValue;
  flag_wait_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(counter, flag, inc, abort_flag);
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_ce(void) {
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, flag_signal_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, flag_wait_kernel);
  return e;
}
