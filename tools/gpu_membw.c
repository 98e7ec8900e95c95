/*
 * gpu_membw: the device-memory ceilings that collectives between ranks on
 * one GPU are measured against. For each size, the median over -n runs
 * (CUDA events, after a warm-up) of cudaMemcpyAsync device to device on one
 * stream: the copy rate in GB/s of bytes copied (each byte read once and
 * written once, as membw counts host copies). With -m host, the pinned-host
 * ceilings instead (the GPU shm transport and pinned user buffers): the copy
 * engines host to device and device to host, and SM loads and stores of
 * mapped pinned host memory (a kernel reading one side and writing the
 * other), GB/s of bytes moved over PCIe, and "sm both": a kernel reading one
 * mapped host buffer and writing another, so the link carries the bytes in
 * both directions at once (GB/s each way), as it does for two ranks of one
 * GPU that exchange through host memory. With -m flag, the small-message
 * costs instead: the round trip of a GPU flag through mapped host memory
 * (gpu_membw_flag.cu), and an empty kernel's launch, eager (launch to
 * cudaStreamSynchronize, host clock) and as a node of a CUDA graph. Usage:
 *   gpu_membw [-b MINBYTES] [-e MAXBYTES] [-n ITERS] [-d DEVICE] [-m device|host|flag]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

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

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef enum { H2D_CE, D2H_CE, SM_LOAD, SM_STORE, SM_BOTH, NKINDS } kind_t;

/* gpu_membw_flag.cu */
int gpu_membw_pingpong(uint32_t *flags, uint32_t base, int rounds, int *failed, cudaStream_t s0,
                       cudaStream_t s1);
int gpu_membw_empty(cudaStream_t s);

static void issue(kind_t k, void *d, void *h, void *hdev, void *hdev2, size_t b, cudaStream_t s) {
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
  case SM_STORE:
    if (zcc_dev_scale(hdev, d, b / 4, zccFloat32, NULL, 0x3f800000u, s) != 0) {
      fprintf(stderr, "gpu_membw: the store kernel failed\n");
      exit(1);
    }
    break;
  default: /* host to host through the SMs: b bytes each way at once */
    if (zcc_dev_scale(hdev2, hdev, b / 4, zccFloat32, NULL, 0x3f800000u, s) != 0) {
      fprintf(stderr, "gpu_membw: the load-and-store kernel failed\n");
      exit(1);
    }
    break;
  }
}

static int host_ceilings(size_t lo, size_t hi, int iters, int dev) {
  void *d = NULL, *h = NULL, *hdev = NULL, *h2 = NULL, *hdev2 = NULL;
  CK(cudaMalloc(&d, hi));
  CK(cudaHostAlloc(&h, hi, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(&hdev, h, 0));
  CK(cudaHostAlloc(&h2, hi, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(&hdev2, h2, 0));
  CK(cudaMemset(d, 0, hi));
  memset(h, 0, hi);
  memset(h2, 0, hi);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float *ms = calloc((size_t)iters, sizeof(float));
  if (!ms) return 1;
  static const char *names[NKINDS] = {"ce h2d", "ce d2h", "sm load", "sm store", "sm both"};
  printf("# gpu_membw -m host: device %d, pinned host memory (cudaHostAlloc, mapped); median "
         "of %d after 3 warm-ups; GB/s of bytes over PCIe (sm both: each way)\n", dev, iters);
  printf("%14s", "bytes");
  for (int k = 0; k < NKINDS; k++) printf(" %10s", names[k]);
  printf("   (GB/s)\n");
  for (size_t b = lo; b <= hi; b *= 2) {
    printf("%14zu", b);
    for (int k = 0; k < NKINDS; k++) {
      for (int w = 0; w < 3; w++) issue((kind_t)k, d, h, hdev, hdev2, b, s);
      for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(e0, s));
        issue((kind_t)k, d, h, hdev, hdev2, b, s);
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
  cudaFreeHost(h2);
  return 0;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* -m flag: the flag round trip through mapped host memory, and launch costs. */
static int flag_costs(int iters, int dev) {
  enum { ROUNDS = 10000, GRAPH_NODES = 20, EAGER = 200 };
  uint32_t *flags = NULL, *dflags = NULL;
  int *failed = NULL, *dfailed = NULL;
  CK(cudaHostAlloc((void **)&flags, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer((void **)&dflags, flags, 0));
  CK(cudaHostAlloc((void **)&failed, sizeof(int), cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer((void **)&dfailed, failed, 0));
  memset(flags, 0, 4096);
  *failed = 0;
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float *ms = calloc((size_t)iters + 1, sizeof(float));
  double *us = calloc(EAGER, sizeof(double));
  if (!ms || !us) return 1;
  printf("# gpu_membw -m flag: device %d; medians of %d runs after a warm-up\n", dev, iters);
  /* The round trip: the first run warms up, the events bracket ping's stream. */
  uint32_t base = 0;
  for (int i = 0; i <= iters; i++) {
    CK(cudaEventRecord(e0, s0));
    if (gpu_membw_pingpong(dflags, base, ROUNDS, dfailed, s0, s1) != 0) {
      fprintf(stderr, "gpu_membw: the ping-pong kernels failed to launch\n");
      return 1;
    }
    CK(cudaEventRecord(e1, s0));
    CK(cudaStreamSynchronize(s1));
    CK(cudaEventSynchronize(e1));
    if (*failed) {
      fprintf(stderr, "gpu_membw: a ping-pong kernel gave up waiting for its peer\n");
      return 1;
    }
    base += ROUNDS;
    CK(cudaEventElapsedTime(&ms[i > 0 ? i - 1 : 0], e0, e1));
  }
  qsort(ms, (size_t)iters, sizeof(float), cmp_float);
  printf("flag round trip through mapped host memory: %.3f us (%d round trips per run, two "
         "one-thread kernels on two streams)\n", ms[iters / 2] * 1e3 / ROUNDS, ROUNDS);
  /* An empty kernel, eager: launch to the end of cudaStreamSynchronize. */
  for (int w = 0; w < 20; w++) {
    CK(gpu_membw_empty(s0));
    CK(cudaStreamSynchronize(s0));
  }
  for (int i = 0; i < EAGER; i++) {
    double t0 = now_us();
    CK(gpu_membw_empty(s0));
    CK(cudaStreamSynchronize(s0));
    us[i] = now_us() - t0;
  }
  qsort(us, EAGER, sizeof(double), cmp_double);
  printf("empty kernel, eager (launch and cudaStreamSynchronize, host clock): %.3f us "
         "(median of %d)\n", us[EAGER / 2], EAGER);
  /* An empty kernel as a graph node: a graph of GRAPH_NODES, events around each replay. */
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
  for (int n = 0; n < GRAPH_NODES; n++) CK(gpu_membw_empty(s0));
  CK(cudaStreamEndCapture(s0, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s0));
  CK(cudaStreamSynchronize(s0));
  for (int i = 0; i < iters; i++) {
    CK(cudaEventRecord(e0, s0));
    CK(cudaGraphLaunch(exec, s0));
    CK(cudaEventRecord(e1, s0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  qsort(ms, (size_t)iters, sizeof(float), cmp_float);
  printf("empty kernel as a graph node: %.3f us (graph of %d, CUDA events)\n",
         ms[iters / 2] * 1e3 / GRAPH_NODES, GRAPH_NODES);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  free(ms);
  free(us);
  CK(cudaStreamDestroy(s0));
  CK(cudaStreamDestroy(s1));
  cudaFreeHost(flags);
  cudaFreeHost(failed);
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
                      "[-m device|host|flag]\n");
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
      if (strcmp(v, "host") != 0 && strcmp(v, "device") != 0 && strcmp(v, "flag") != 0) {
        fprintf(stderr, "gpu_membw: -m %s: expected device, host or flag\n", v);
        return 2;
      }
      host = strcmp(v, "host") == 0 ? 1 : strcmp(v, "flag") == 0 ? 2 : 0;
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
  if (host == 1) return host_ceilings(lo, hi, iters, dev);
  if (host == 2) return flag_costs(iters, dev);
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
