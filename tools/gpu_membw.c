/*
 * gpu_membw: the device-memory ceilings that collectives between ranks on
 * one GPU are measured against. For each size, the median over -n runs
 * (CUDA events, after a warm-up) of cudaMemcpyAsync device to device on one
 * stream: the copy rate in GB/s of bytes copied (each byte read once and
 * written once, as membw counts host copies). With -m host, the pinned-host
 * ceilings instead (the GPU shm transport and pinned user buffers): the copy
 * engines host to device and device to host, and SM loads and stores of
 * mapped pinned host memory (a kernel reading one side and writing the
 * other), GB/s of bytes moved over PCIe. Usage:
 *   gpu_membw [-b MINBYTES] [-e MAXBYTES] [-n ITERS] [-d DEVICE] [-m device|host]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
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

typedef enum { H2D_CE, D2H_CE, SM_LOAD, SM_STORE, NKINDS } kind_t;

static void issue(kind_t k, void *d, void *h, void *hdev, size_t b, cudaStream_t s) {
  switch (k) {
  case H2D_CE: CK(cudaMemcpyAsync(d, h, b, cudaMemcpyHostToDevice, s)); break;
  case D2H_CE: CK(cudaMemcpyAsync(h, d, b, cudaMemcpyDeviceToHost, s)); break;
  /* a kernel reading mapped host memory and writing device memory, and back */
  case SM_LOAD:
    if (zcc_dev_scale(d, hdev, b / 4, zccFloat32, NULL, 0x3f800000u, s) != 0) {
      fprintf(stderr, "gpu_membw: the load kernel failed\n");
      exit(1);
    }
    break;
  default:
    if (zcc_dev_scale(hdev, d, b / 4, zccFloat32, NULL, 0x3f800000u, s) != 0) {
      fprintf(stderr, "gpu_membw: the store kernel failed\n");
      exit(1);
    }
    break;
  }
}

static int host_ceilings(size_t lo, size_t hi, int iters, int dev) {
  void *d = NULL, *h = NULL, *hdev = NULL;
  CK(cudaMalloc(&d, hi));
  CK(cudaHostAlloc(&h, hi, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(&hdev, h, 0));
  CK(cudaMemset(d, 0, hi));
  memset(h, 0, hi);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float *ms = calloc((size_t)iters, sizeof(float));
  if (!ms) return 1;
  static const char *names[NKINDS] = {"ce h2d", "ce d2h", "sm load", "sm store"};
  printf("# gpu_membw -m host: device %d, pinned host memory (cudaHostAlloc, mapped); median "
         "of %d after 3 warm-ups; GB/s of bytes over PCIe\n", dev, iters);
  printf("%14s", "bytes");
  for (int k = 0; k < NKINDS; k++) printf(" %10s", names[k]);
  printf("   (GB/s)\n");
  for (size_t b = lo; b <= hi; b *= 2) {
    printf("%14zu", b);
    for (int k = 0; k < NKINDS; k++) {
      for (int w = 0; w < 3; w++) issue((kind_t)k, d, h, hdev, b, s);
      for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(e0, s));
        issue((kind_t)k, d, h, hdev, b, s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[i], e0, e1));
      }
      qsort(ms, (size_t)iters, sizeof(float), cmp_float);
      printf(" %10.1f", (double)b / (ms[iters / 2] * 1e-3) / 1e9);
    }
    printf("\n");
    if (b > hi / 2) break;
  }
  free(ms);
  cudaFree(d);
  cudaFreeHost(h);
  return 0;
}

int main(int argc, char **argv) {
  size_t lo = (size_t)64 << 20, hi = (size_t)1 << 30;
  int iters = 20, dev = 0, host = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    size_t n = 0;
    if (!v) {
      fprintf(stderr, "usage: gpu_membw [-b MINBYTES] [-e MAXBYTES] [-n ITERS] [-d DEVICE] "
                      "[-m device|host]\n");
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
    } else if (strcmp(a, "-m") == 0) {
      if (strcmp(v, "host") != 0 && strcmp(v, "device") != 0) {
        fprintf(stderr, "gpu_membw: -m %s: expected device or host\n", v);
        return 2;
      }
      host = strcmp(v, "host") == 0;
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
  if (host) return host_ceilings(lo, hi, iters, dev);
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
