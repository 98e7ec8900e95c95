/*
 * gpu_membw: the device-memory ceilings that collectives between ranks on
 * one GPU are measured against. For each size, the median over -n runs
 * (CUDA events, after a warm-up) of cudaMemcpyAsync device to device on one
 * stream: the copy rate in GB/s of bytes copied (each byte read once and
 * written once, as membw counts host copies). Usage:
 *   gpu_membw [-b MINBYTES] [-e MAXBYTES] [-n ITERS] [-d DEVICE]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_util.h"

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "gpu_membw: %s: %s\n", #call, cudaGetErrorString(e_));      \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  size_t lo = (size_t)64 << 20, hi = (size_t)1 << 30;
  int iters = 20, dev = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    size_t n = 0;
    if (!v) {
      fprintf(stderr, "usage: gpu_membw [-b MINBYTES] [-e MAXBYTES] [-n ITERS] [-d DEVICE]\n");
      return 2;
    }
    if (strcmp(a, "-b") == 0 || strcmp(a, "-e") == 0) {
      if (perf_parse_size(v, &n) != 0 || n < 16) {
        fprintf(stderr, "gpu_membw: %s %s: not a size of at least 16 bytes\n", a, v);
        return 2;
      }
      if (a[1] == 'b') lo = n;
      else hi = n;
    } else if (strcmp(a, "-n") == 0) {
      iters = atoi(v);
      if (iters < 1 || iters > 10000) {
        fprintf(stderr, "gpu_membw: -n %s: expected 1 to 10000\n", v);
        return 2;
      }
    } else if (strcmp(a, "-d") == 0) {
      dev = atoi(v);
    } else {
      fprintf(stderr, "gpu_membw: unknown option %s\n", a);
      return 2;
    }
    i++;
  }
  if (lo > hi) {
    fprintf(stderr, "gpu_membw: -b is above -e\n");
    return 2;
  }
  CK(cudaSetDevice(dev));
  void *src = NULL, *dst = NULL;
  CK(cudaMalloc(&src, hi));
  CK(cudaMalloc(&dst, hi));
  CK(cudaMemset(src, 1, hi));
  CK(cudaMemset(dst, 0, hi));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float *ms = calloc((size_t)iters, sizeof(float));
  if (!ms) return 1;
  printf("# gpu_membw: device %d, cudaMemcpyAsync device to device, median of %d after 3 "
         "warm-up copies; GB/s of bytes copied\n", dev, iters);
  printf("%14s %12s %10s\n", "bytes", "time(us)", "GB/s");
  for (size_t b = lo; b <= hi; b *= 2) {
    for (int w = 0; w < 3; w++) CK(cudaMemcpyAsync(dst, src, b, cudaMemcpyDeviceToDevice, s));
    for (int i = 0; i < iters; i++) {
      CK(cudaEventRecord(e0, s));
      CK(cudaMemcpyAsync(dst, src, b, cudaMemcpyDeviceToDevice, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, (size_t)iters, sizeof(float), cmp_float);
    double t = ms[iters / 2] * 1e-3;
    printf("%14zu %12.1f %10.1f\n", b, t * 1e6, (double)b / t / 1e9);
    if (b > hi / 2) break;
  }
  free(ms);
  cudaFree(src);
  cudaFree(dst);
  return 0;
}
