/*
 * The cost of cudaPointerGetAttributes, which a GPU collective asks for each
 * pinned host buffer (exec/gpu.c, gpu_addr_kind): 200000 calls on device
 * memory and on mapped pinned host memory, ns per call.
 * Build: cc -O2 -I/usr/local/cuda/include ptr_attr_probe.c -L/usr/local/cuda/lib64 -lcudart
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static double per_call(const void *p, int n) {
  struct cudaPointerAttributes at;
  double t0 = now_ns();
  for (int i = 0; i < n; i++)
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) return -1;
  return (now_ns() - t0) / n;
}

int main(void) {
  void *d = NULL, *h = NULL;
  if (cudaMalloc(&d, 1 << 20) != cudaSuccess ||
      cudaHostAlloc(&h, 1 << 20, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    fprintf(stderr, "allocation failed\n");
    return 1;
  }
  for (int r = 0; r < 5; r++)
    printf("round %d: device %.1f ns, pinned %.1f ns per call\n", r, per_call(d, 200000),
           per_call(h, 200000));
  return 0;
}
