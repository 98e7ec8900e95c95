/*
 * NCCL's API on one GPU, through whichever libnccl.so.2 the loader picks
 * (zcc's or NCCL's: scripts/gpu_run.sh nccl runs both, LD_PRELOAD choosing).
 *
 *   nccl_gpu --dump FILE   a one-rank communicator: every collective, send
 *                          and receive to self, pre-multiplied sums (host
 *                          and device scalar), and the same captured in a
 *                          CUDA graph, checked against expected values; the
 *                          outputs are written to FILE for a bitwise
 *                          comparison of the two libraries (cmp)
 *   nccl_gpu --overhead    8-byte allreduce on a one-rank communicator,
 *                          through ncclAllReduce (zcc's libnccl.so.2) and
 *                          zccAllReduce (libzcc.so) in one run: host time
 *                          per call while capturing into a CUDA graph, and
 *                          graph replay time per operation; fails if the
 *                          shim adds more than 0.2 us per call
 *
 * Exit 0: passed; 1: failed; 77: no GPU.
 */
#define _GNU_SOURCE /* dladdr */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zcc.h"

static int failures;
#define FAIL(...) (fprintf(stderr, "nccl_gpu: " __VA_ARGS__), fputc('\n', stderr), failures++)
#define NCCL_OK(call)                                                          \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess) {                                                   \
      FAIL("%s -> %s: %s", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      return 1;                                                                \
    }                                                                          \
  } while (0)
#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      FAIL("%s -> %s", #call, cudaGetErrorString(e_));                         \
      return 1;                                                                \
    }                                                                          \
  } while (0)

enum { N = 1 << 16 };

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int which_lib(void) {
  Dl_info info;
  int v = 0;
  ncclGetVersion(&v);
  if (dladdr((void *)ncclAllReduce, &info) && info.dli_fname)
    printf("nccl_gpu: ncclGetVersion %d, ncclAllReduce from %s\n", v, info.dli_fname);
  return v;
}

/* Every collective on one rank; out[] gets each output in turn. */
static int run_all(ncclComm_t comm, cudaStream_t s, float *d_in, float *d_out, float *d_big,
                   float *h_in, FILE *dump, int graph) {
  float *h = malloc(sizeof(float) * N * 2);
  const char *names[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                         "alltoall", "sendrecv-self", "allreduce-avg", "allreduce-max",
                         "allreduce-premulsum-host", "allreduce-premulsum-device",
                         "reducescatter-premulsum-host", "reduce-premulsum-device"};
  const float factor[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0.5f, 2.0f, 0.5f, 2.0f};
  /* Pre-multiplied sums: a host-immediate scalar, and one in device memory. */
  float half = 0.5f, two = 2.0f, *d_two = NULL;
  ncclRedOp_t op_host, op_dev;
  CUDA_OK(cudaMalloc((void **)&d_two, sizeof(float)));
  CUDA_OK(cudaMemcpy(d_two, &two, sizeof(float), cudaMemcpyHostToDevice));
  NCCL_OK(ncclRedOpCreatePreMulSum(&op_host, &half, ncclFloat, ncclScalarHostImmediate, comm));
  NCCL_OK(ncclRedOpCreatePreMulSum(&op_dev, d_two, ncclFloat, ncclScalarDevice, comm));
  float *want = malloc(sizeof(float) * N);
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  for (int k = 0; k < 13; k++) {
    CUDA_OK(cudaMemsetAsync(d_out, 0xff, sizeof(float) * N, s));
    if (graph) CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    switch (k) {
    case 0: NCCL_OK(ncclAllReduce(d_in, d_out, N, ncclFloat, ncclSum, comm, s)); break;
    case 1: NCCL_OK(ncclBroadcast(d_in, d_out, N, ncclFloat, 0, comm, s)); break;
    case 2: NCCL_OK(ncclReduce(d_in, d_out, N, ncclFloat, ncclSum, 0, comm, s)); break;
    case 3: NCCL_OK(ncclAllGather(d_in, d_out, N, ncclFloat, comm, s)); break;
    case 4: NCCL_OK(ncclReduceScatter(d_in, d_out, N, ncclFloat, ncclSum, comm, s)); break;
    case 5: NCCL_OK(ncclAlltoAll(d_in, d_out, N, ncclFloat, comm, s)); break;
    case 6:
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclSend(d_in, N, ncclFloat, 0, comm, s));
      NCCL_OK(ncclRecv(d_out, N, ncclFloat, 0, comm, s));
      NCCL_OK(ncclGroupEnd());
      break;
    case 7: NCCL_OK(ncclAllReduce(d_in, d_out, N, ncclFloat, ncclAvg, comm, s)); break;
    case 8: NCCL_OK(ncclAllReduce(d_in, d_out, N, ncclFloat, ncclMax, comm, s)); break;
    case 9: NCCL_OK(ncclAllReduce(d_in, d_out, N, ncclFloat, op_host, comm, s)); break;
    case 10: NCCL_OK(ncclAllReduce(d_in, d_out, N, ncclFloat, op_dev, comm, s)); break;
    case 11: NCCL_OK(ncclReduceScatter(d_in, d_out, N, ncclFloat, op_host, comm, s)); break;
    case 12: NCCL_OK(ncclReduce(d_in, d_out, N, ncclFloat, op_dev, 0, comm, s)); break;
    }
    if (graph) {
      CUDA_OK(cudaStreamEndCapture(s, &g));
      CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
      for (int rep = 0; rep < 3; rep++) CUDA_OK(cudaGraphLaunch(ge, s));
    }
    CUDA_OK(cudaMemcpyAsync(h, d_out, sizeof(float) * N, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    if (graph) {
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
    /* One rank: every output is the input (times the pre-multiplied sum's scalar). */
    for (int i = 0; i < N; i++) want[i] = h_in[i] * factor[k];
    if (memcmp(h, want, sizeof(float) * N) != 0) {
      for (int i = 0; i < N; i++)
        if (memcmp(&h[i], &want[i], 4) != 0) {
          FAIL("%s%s: element %d is %g, expected %g", names[k], graph ? " (graph)" : "", i,
               h[i], want[i]);
          break;
        }
    }
    if (dump) fwrite(h, sizeof(float), N, dump);
  }
  (void)d_big;
  NCCL_OK(ncclRedOpDestroy(op_host, comm));
  NCCL_OK(ncclRedOpDestroy(op_dev, comm));
  cudaFree(d_two);
  free(want);
  free(h);
  return 0;
}

static int dump_mode(const char *path) {
  which_lib();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  CUDA_OK(cudaSetDevice(0));
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclCommInitRank(&comm, 1, id, 0));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *d_in, *d_out, *h_in = malloc(sizeof(float) * N);
  uint32_t x = 12345;
  for (int i = 0; i < N; i++) {
    x = x * 1664525u + 1013904223u;
    h_in[i] = (float)(int32_t)x / 65536.0f;
  }
  CUDA_OK(cudaMalloc((void **)&d_in, sizeof(float) * N));
  CUDA_OK(cudaMalloc((void **)&d_out, sizeof(float) * N));
  CUDA_OK(cudaMemcpy(d_in, h_in, sizeof(float) * N, cudaMemcpyHostToDevice));
  FILE *f = fopen(path, "wb");
  if (!f) return FAIL("cannot write %s", path), 1;
  if (run_all(comm, s, d_in, d_out, NULL, h_in, f, 0)) return 1;
  if (run_all(comm, s, d_in, d_out, NULL, h_in, f, 1)) return 1;
  fclose(f);
  ncclResult_t a = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &a));
  if (a != ncclSuccess) FAIL("async error %d", (int)a);
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  printf("nccl_gpu --dump: %s, %s\n", path, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

/* ---- --overhead ---- */

typedef struct {
  double capture_us; /* host time per call while capturing */
  double replay_us;  /* device time per operation in a replay */
} timing_t;

enum { K = 2000, REPLAYS = 10 };

static int time_one(int use_nccl, void *comm, cudaStream_t s, float *d, timing_t *t) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  double t0 = now_us();
  for (int i = 0; i < K; i++) {
    if (use_nccl) {
      if (ncclAllReduce(d, d + 2, 2, ncclFloat, ncclSum, (ncclComm_t)comm, s) != ncclSuccess)
        return FAIL("ncclAllReduce: %s", ncclGetLastError(NULL)), 1;
    } else if (zccAllReduce(d, d + 2, 2, zccFloat, zccSum, (zccComm_t)comm, (zccStream_t)s) !=
               zccSuccess) {
      return FAIL("zccAllReduce: %s", zccGetLastError(NULL)), 1;
    }
  }
  double t1 = now_us();
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_OK(cudaGraphLaunch(ge, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  CUDA_OK(cudaEventRecord(e0, s));
  for (int r = 0; r < REPLAYS; r++) CUDA_OK(cudaGraphLaunch(ge, s));
  CUDA_OK(cudaEventRecord(e1, s));
  CUDA_OK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
  t->capture_us = (t1 - t0) / K;
  t->replay_us = ms * 1e3 / ((double)K * REPLAYS);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int overhead_mode(void) {
  which_lib();
  CUDA_OK(cudaSetDevice(0));
  ncclUniqueId nid;
  ncclComm_t ncomm = NULL;
  NCCL_OK(ncclGetUniqueId(&nid));
  NCCL_OK(ncclCommInitRank(&ncomm, 1, nid, 0));
  zccUniqueId zid;
  zccComm_t zcomm = NULL;
  if (zccGetUniqueId(&zid) != zccSuccess || zccCommInitRank(&zcomm, 1, zid, 0) != zccSuccess)
    return FAIL("zcc init: %s", zccGetLastError(NULL)), 1;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *d;
  CUDA_OK(cudaMalloc((void **)&d, 64));
  CUDA_OK(cudaMemset(d, 0, 64));
  enum { ROUNDS = 7 };
  double cap[2][ROUNDS], rep[2][ROUNDS];
  for (int r = 0; r < ROUNDS; r++)
    for (int w = 0; w < 2; w++) { /* alternate: drift hits both alike */
      timing_t t;
      if (time_one(w == 0, w == 0 ? (void *)ncomm : (void *)zcomm, s, d, &t)) return 1;
      cap[w][r] = t.capture_us;
      rep[w][r] = t.replay_us;
    }
  for (int w = 0; w < 2; w++) {
    qsort(cap[w], ROUNDS, sizeof(double), cmp_double);
    qsort(rep[w], ROUNDS, sizeof(double), cmp_double);
  }
  double added = cap[0][ROUNDS / 2] - cap[1][ROUNDS / 2];
  printf("nccl_gpu --overhead: 8 B allreduce, 1 rank, %d calls per graph, median of %d rounds\n",
         K, ROUNDS);
  printf("  %-28s %10s %12s\n", "entry point", "host us/call", "replay us/op");
  printf("  %-28s %10.3f %12.3f\n", "ncclAllReduce (zcc's shim)", cap[0][ROUNDS / 2],
         rep[0][ROUNDS / 2]);
  printf("  %-28s %10.3f %12.3f\n", "zccAllReduce (libzcc.so)", cap[1][ROUNDS / 2],
         rep[1][ROUNDS / 2]);
  printf("  shim adds %.3f us per call (target: at most 0.2 us): %s\n", added,
         added <= 0.2 ? "ok" : "OVER");
  ncclCommDestroy(ncomm);
  zccCommDestroy(zcomm);
  return added <= 0.2 && !failures ? 0 : 1;
}

int main(int argc, char **argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("nccl_gpu: skipped: no CUDA GPU\n");
    return 77;
  }
  if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump_mode(argv[2]);
  if (argc == 2 && strcmp(argv[1], "--overhead") == 0) return overhead_mode();
  fprintf(stderr, "usage: nccl_gpu --dump FILE | --overhead\n");
  return 2;
}
