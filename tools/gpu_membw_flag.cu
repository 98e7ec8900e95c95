// gpu_membw -m flag: the round trip of a GPU flag through mapped pinned host
// memory (what the GPU shm transport's flags cost), and the launch costs of
// an empty kernel, for the small-message target of docs/perf/h200x1.md.
//
// Two one-thread kernels on two streams stand for two ranks on one GPU:
// "ping" stores round i into the pong's flag (release, system scope) and
// waits for the pong's answer in its own flag; "pong" waits for round i and
// answers it. Both flags sit in one mapped cudaHostAlloc buffer, each on its
// own 128-byte line. Every value only grows, so no flag is reset between runs.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Gives up after 5 s, so a peer that never runs ends the probe, not the host.
__device__ __forceinline__ int wait_reach(const uint32_t *p, uint32_t want) {
  uint64_t t0 = now_ns();
  for (uint32_t spins = 0; (int32_t)(ld_acquire_sys(p) - want) < 0; spins++)
    if ((spins & 1023) == 0 && now_ns() - t0 > 5000000000ull) return 1;
  return 0;
}

__global__ void ping_kernel(uint32_t *mine, uint32_t *theirs, uint32_t base, int rounds, int *failed) {
  for (int i = 1; i <= rounds; i++) {
    st_release_sys(theirs, base + (uint32_t)i);
    if (wait_reach(mine, base + (uint32_t)i)) {
      *failed = 1;
      return;
    }
  }
}

__global__ void pong_kernel(uint32_t *mine, uint32_t *theirs, uint32_t base, int rounds, int *failed) {
  for (int i = 1; i <= rounds; i++) {
    if (wait_reach(mine, base + (uint32_t)i)) {
      *failed = 1;
      return;
    }
    st_release_sys(theirs, base + (uint32_t)i);
  }
}

__global__ void empty_kernel() {}

} // namespace

// Launch one ping-pong of `rounds` round trips: ping on s0, pong on s1.
// flags: two uint32_t 32 words apart in mapped host memory (device view).
extern "C" int gpu_membw_pingpong(uint32_t *flags, uint32_t base, int rounds, int *failed,
                                  cudaStream_t s0, cudaStream_t s1) {
  // Both kernels loaded first: under lazy loading, loading the second while
  // the first spins waits for the first (which waits for the second).
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, pong_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, ping_kernel);
  if (e != cudaSuccess) return (int)e;
  pong_kernel<<<1, 1, 0, s1>>>(flags + 32, flags, base, rounds, failed);
  ping_kernel<<<1, 1, 0, s0>>>(flags, flags + 32, base, rounds, failed);
  return (int)cudaGetLastError();
}

extern "C" int gpu_membw_empty(cudaStream_t s) {
  empty_kernel<<<1, 1, 0, s>>>();
  return (int)cudaGetLastError();
}
