/*
 * zcc's libnccl.so.2 through NCCL's own API: written against the CUDA
 * toolkit's nccl.h, linked with -lnccl against the shim, run on host
 * communicators (ZCC_DEVICE=host) so that it needs no GPU.
 *
 *   test_nccl_host [-n RANKS]   every collective, groups, send/recv, gather,
 *                               scatter, pre-multiplied sums, split,
 *                               registration, and the error cases, in
 *                               RANKS forked processes (default 3)
 *   test_nccl_host --env        NCCL_* variables (set by ctest) in the log
 *   test_nccl_host --refuse     a communicator zcc refuses, no fallback
 *   test_nccl_host --fallback   the same with ZCC_NCCL_FALLBACK (set by
 *                               ctest to the fake NCCL): forwarded
 *
 * Exit 0: passed; 1: failed; 77: skipped (the reason is printed).
 */
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_rank = -1;
static int g_failures;

static void failf(const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "test_nccl_host: rank %d: %s:%d: %s\n", g_rank, file, line, msg);
  g_failures++;
}
#define FAIL(...) failf(__FILE__, __LINE__, __VA_ARGS__)

/* A call that must succeed. */
#define NCCL_OK(call)                                                          \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess)                                                     \
      FAIL("%s -> %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_),        \
           ncclGetLastError(NULL));                                            \
  } while (0)

/* A call that must fail with `want`, its message naming `text`. */
#define NCCL_ERR(call, want, text)                                             \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    const char *m_ = ncclGetLastError(NULL);                                   \
    if (r_ != (want))                                                          \
      FAIL("%s -> %d, expected %d (%s); message: %s", #call, (int)r_,          \
           (int)(want), ncclGetErrorString(want), m_);                         \
    else if (!strstr(m_, text))                                                \
      FAIL("%s: message '%s' does not say '%s'", #call, m_, text);             \
  } while (0)

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) FAIL(__VA_ARGS__);                                            \
  } while (0)

/* ---- the multi-rank suite ---- */

enum { N = 1000 };

static void check_f(const char *what, const float *got, size_t n, float (*want)(size_t, void *),
                    void *arg) {
  for (size_t i = 0; i < n; i++) {
    float w = want(i, arg);
    if (memcmp(&got[i], &w, sizeof(w)) != 0) {
      FAIL("%s: element %zu is %.9g, expected %.9g", what, i, got[i], w);
      return;
    }
  }
}

typedef struct {
  int nranks, rank, root;
  float scale;
} ctx_t;

/* Input of rank r at i: small integers, so that sums are exact in fp32. */
static float in_f(int r, size_t i) { return (float)((int)(i % 13) + r + 1); }
static int32_t in_i(int r, size_t i) { return (int32_t)(i % 7) - 3 + 5 * r; }

static float want_sum(size_t i, void *a) {
  ctx_t *c = a;
  float s = 0;
  for (int r = 0; r < c->nranks; r++) s += in_f(r, i);
  return s;
}
static float want_max(size_t i, void *a) {
  ctx_t *c = a;
  return in_f(c->nranks - 1, i);
}
static float want_avg(size_t i, void *a) {
  ctx_t *c = a;
  return want_sum(i, a) / (float)c->nranks;
}
static float want_root(size_t i, void *a) {
  ctx_t *c = a;
  return in_f(c->root, i);
}
static float want_premul(size_t i, void *a) {
  ctx_t *c = a;
  float s = 0;
  for (int r = 0; r < c->nranks; r++) s += in_f(r, i) * c->scale;
  return s;
}

static void fill_f(float *b, int r, size_t n) {
  for (size_t i = 0; i < n; i++) b[i] = in_f(r, i);
}

static void test_collectives(ncclComm_t comm, int rank, int nranks) {
  ctx_t c = {nranks, rank, 0, 1};
  size_t blocks = nranks < 2 ? 2 : (size_t)nranks; /* send/recv below use two */
  float *send = malloc(sizeof(float) * N * blocks);
  float *recv = malloc(sizeof(float) * N * blocks);

  /* AllReduce: out of place and in place, float and int32, every op. */
  fill_f(send, rank, N);
  NCCL_OK(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, NULL));
  check_f("allreduce sum", recv, N, want_sum, &c);
  NCCL_OK(ncclAllReduce(send, recv, N, ncclFloat32, ncclMax, comm, NULL));
  check_f("allreduce max", recv, N, want_max, &c);
  NCCL_OK(ncclAllReduce(send, send, N, ncclFloat, ncclAvg, comm, NULL));
  check_f("allreduce avg in place", send, N, want_avg, &c);
  int32_t *is = malloc(sizeof(int32_t) * N), *ir = malloc(sizeof(int32_t) * N);
  for (size_t i = 0; i < N; i++) is[i] = in_i(rank, i);
  NCCL_OK(ncclAllReduce(is, ir, N, ncclInt32, ncclMin, comm, NULL));
  for (size_t i = 0; i < N; i++)
    if (ir[i] != in_i(0, i)) {
      FAIL("allreduce int32 min: element %zu is %d, expected %d", i, ir[i], in_i(0, i));
      break;
    }
  NCCL_OK(ncclAllReduce(is, ir, N, ncclInt32, ncclProd, comm, NULL));
  for (size_t i = 0; i < N; i++) {
    int32_t w = 1;
    for (int r = 0; r < nranks; r++) w *= in_i(r, i);
    if (ir[i] != w) {
      FAIL("allreduce int32 prod: element %zu is %d, expected %d", i, ir[i], w);
      break;
    }
  }

  /* Broadcast from the last rank; ncclBcast in place from rank 0. */
  c.root = nranks - 1;
  fill_f(send, rank, N);
  memset(recv, 0xff, sizeof(float) * N);
  NCCL_OK(ncclBroadcast(send, recv, N, ncclFloat, c.root, comm, NULL));
  check_f("broadcast", recv, N, want_root, &c);
  c.root = 0;
  fill_f(recv, rank, N);
  NCCL_OK(ncclBcast(recv, N, ncclFloat, 0, comm, NULL));
  check_f("bcast", recv, N, want_root, &c);

  /* Reduce to rank 1 (or 0). */
  int root = nranks > 1 ? 1 : 0;
  fill_f(send, rank, N);
  memset(recv, 0, sizeof(float) * N);
  NCCL_OK(ncclReduce(send, recv, N, ncclFloat, ncclSum, root, comm, NULL));
  if (rank == root) check_f("reduce", recv, N, want_sum, &c);

  /* AllGather: block r is rank r's input. */
  fill_f(send, rank, N);
  NCCL_OK(ncclAllGather(send, recv, N, ncclFloat, comm, NULL));
  for (int r = 0; r < nranks; r++) {
    ctx_t cr = c;
    cr.root = r;
    check_f("allgather", recv + (size_t)r * N, N, want_root, &cr);
  }

  /* ReduceScatter: rank r gets the sum of every rank's block r. */
  for (int b = 0; b < nranks; b++) fill_f(send + (size_t)b * N, rank + b, N);
  NCCL_OK(ncclReduceScatter(send, recv, N, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < N; i++) {
    float w = 0;
    for (int r = 0; r < nranks; r++) w += in_f(r + rank, i);
    if (recv[i] != w) {
      FAIL("reducescatter: element %zu is %g, expected %g", i, recv[i], w);
      break;
    }
  }

  /* AlltoAll: block j of rank r goes to rank j's block r. */
  for (int b = 0; b < nranks; b++) fill_f(send + (size_t)b * N, rank * 100 + b, N);
  NCCL_OK(ncclAlltoAll(send, recv, N, ncclFloat, comm, NULL));
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < N; i++)
      if (recv[(size_t)r * N + i] != in_f(r * 100 + rank, i)) {
        FAIL("alltoall: block %d element %zu is %g, expected %g", r, i, recv[(size_t)r * N + i],
             in_f(r * 100 + rank, i));
        r = nranks;
        break;
      }

  /* Gather to the last rank, scatter from rank 0. */
  fill_f(send, rank, N);
  memset(recv, 0, sizeof(float) * N * (size_t)nranks);
  NCCL_OK(ncclGather(send, recv, N, ncclFloat, nranks - 1, comm, NULL));
  if (rank == nranks - 1)
    for (int r = 0; r < nranks; r++) {
      ctx_t cr = c;
      cr.root = r;
      check_f("gather", recv + (size_t)r * N, N, want_root, &cr);
    }
  for (int b = 0; b < nranks; b++) fill_f(send + (size_t)b * N, b + 50, N);
  NCCL_OK(ncclScatter(send, recv, N, ncclFloat, 0, comm, NULL));
  {
    ctx_t cr = c;
    cr.root = rank + 50;
    check_f("scatter", recv, N, want_root, &cr);
  }

  /* Send/recv around the ring, and to self, in one group. */
  fill_f(send, rank, N);
  fill_f(send + N, rank + 7, N);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(send, N, ncclFloat, next, comm, NULL));
  NCCL_OK(ncclRecv(recv, N, ncclFloat, prev, comm, NULL));
  NCCL_OK(ncclSend(send + N, N, ncclFloat, rank, comm, NULL));
  NCCL_OK(ncclRecv(recv + N, N, ncclFloat, rank, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  {
    ctx_t cr = c;
    cr.root = prev;
    check_f("recv from prev", recv, N, want_root, &cr);
    cr.root = rank + 7;
    check_f("recv from self", recv + N, N, want_root, &cr);
  }

  /* Several collectives in one (nested) group. */
  float *a2 = malloc(sizeof(float) * N);
  fill_f(send, rank, N);
  fill_f(a2, rank, N);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclAllReduce(a2, a2, N, ncclFloat, ncclMax, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  check_f("grouped allreduce sum", recv, N, want_sum, &c);
  check_f("grouped allreduce max", a2, N, want_max, &c);
  free(a2);

  /* Zero elements: nothing to move, success. */
  NCCL_OK(ncclAllReduce(send, recv, 0, ncclFloat, ncclSum, comm, NULL));
  free(send);
  free(recv);
  free(is);
  free(ir);
}

static void test_premulsum(ncclComm_t comm, int rank, int nranks) {
  ctx_t c = {nranks, rank, 0, 0.5f};
  float send[N], recv[N];
  fill_f(send, rank, N);
  float half = 0.5f;
  ncclRedOp_t op;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat, ncclScalarHostImmediate, comm));
  EXPECT((int)op >= (int)ncclNumOps, "premulsum op %d is a built-in value", (int)op);
  half = 99; /* copied at creation: this must not matter */
  NCCL_OK(ncclAllReduce(send, recv, N, ncclFloat, op, comm, NULL));
  check_f("allreduce premulsum x0.5", recv, N, want_premul, &c);
  /* In place, and the input is scaled, not the caller's buffer. */
  memcpy(recv, send, sizeof(send));
  NCCL_OK(ncclAllReduce(recv, recv, N, ncclFloat, op, comm, NULL));
  check_f("allreduce premulsum in place", recv, N, want_premul, &c);
  float again[N];
  fill_f(again, rank, N);
  EXPECT(memcmp(again, send, sizeof(send)) == 0, "premulsum changed sendbuff");

  /* Device residence: read at each call. */
  float scale = 2.0f;
  ncclRedOp_t dop;
  NCCL_OK(ncclRedOpCreatePreMulSum(&dop, &scale, ncclFloat, ncclScalarDevice, comm));
  c.scale = 2.0f;
  NCCL_OK(ncclReduce(send, recv, N, ncclFloat, dop, 0, comm, NULL));
  if (rank == 0) check_f("reduce premulsum x2", recv, N, want_premul, &c);
  scale = 0.25f;
  c.scale = 0.25f;
  float rs[N * 4];
  for (int b = 0; b < nranks; b++) fill_f(rs + (size_t)b * 16, rank, 16);
  NCCL_OK(ncclReduceScatter(rs, recv, 16, ncclFloat, dop, comm, NULL));
  check_f("reducescatter premulsum x0.25", recv, 16, want_premul, &c);

  /* Integers: wrap-free small values, scalar 3. */
  int32_t three = 3, is[64], ir[64];
  for (int i = 0; i < 64; i++) is[i] = in_i(rank, (size_t)i);
  ncclRedOp_t iop;
  NCCL_OK(ncclRedOpCreatePreMulSum(&iop, &three, ncclInt32, ncclScalarHostImmediate, comm));
  NCCL_OK(ncclAllReduce(is, ir, 64, ncclInt32, iop, comm, NULL));
  for (int i = 0; i < 64; i++) {
    int32_t w = 0;
    for (int r = 0; r < nranks; r++) w += 3 * in_i(r, (size_t)i);
    if (ir[i] != w) {
      FAIL("allreduce int32 premulsum x3: element %d is %d, expected %d", i, ir[i], w);
      break;
    }
  }

  /* Errors: wrong datatype for the op, destroyed op, built-in op. */
  memcpy(recv, send, sizeof(send));
  NCCL_ERR(ncclAllReduce(is, ir, 64, ncclInt64, iop, comm, NULL), ncclInvalidArgument,
           "pre-multiplied sum of int32");
  NCCL_OK(ncclRedOpDestroy(iop, comm));
  NCCL_ERR(ncclAllReduce(is, ir, 64, ncclInt32, iop, comm, NULL), ncclInvalidArgument,
           "neither a built-in");
  NCCL_ERR(ncclRedOpDestroy(iop, comm), ncclInvalidArgument, "already destroyed");
  NCCL_ERR(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "built-in op");
  NCCL_ERR(ncclRedOpCreatePreMulSum(&iop, NULL, ncclInt32, ncclScalarHostImmediate, comm),
           ncclInvalidArgument, "scalar is NULL");
  NCCL_OK(ncclRedOpDestroy(op, comm));
  NCCL_OK(ncclRedOpDestroy(dop, comm));
  /* Made and freed per call, as PyTorch does: slots are reused. */
  for (int k = 0; k < 3000; k++) {
    ncclRedOp_t t;
    ncclResult_t r = ncclRedOpCreatePreMulSum(&t, &half, ncclFloat, ncclScalarHostImmediate, comm);
    if (r != ncclSuccess || ncclRedOpDestroy(t, comm) != ncclSuccess) {
      FAIL("premulsum create/destroy %d failed: %s", k, ncclGetLastError(NULL));
      break;
    }
  }
}

static void test_errors(ncclComm_t comm, int rank, int nranks) {
  float buf[16], out[16];
  for (int i = 0; i < 16; i++) buf[i] = out[i] = (float)i;
  /* A communicator this library did not make (another NCCL's, or garbage). */
  struct {
    uint64_t words[64];
  } foreign = {{0x1234}};
  ncclComm_t bad = (ncclComm_t)(void *)&foreign;
  NCCL_ERR(ncclAllReduce(buf, out, 16, ncclFloat, ncclSum, bad, NULL), ncclInvalidUsage,
           "not a communicator of zcc's libnccl.so.2");
  NCCL_ERR(ncclSend(buf, 16, ncclFloat, 0, bad, NULL), ncclInvalidUsage,
           "not a communicator of zcc's libnccl.so.2");
  int n = -1;
  NCCL_ERR(ncclCommCount(bad, &n), ncclInvalidUsage, "not a communicator of zcc's");
  EXPECT(n == -1, "ncclCommCount wrote %d for a foreign comm", n);
  NCCL_ERR(ncclCommDestroy(bad), ncclInvalidUsage, "not a communicator of zcc's");
  for (int i = 0; i < 16; i++)
    if (out[i] != (float)i) {
      FAIL("a refused call wrote recvbuff[%d] = %g", i, out[i]);
      break;
    }
  /* Arguments. */
  NCCL_ERR(ncclAllReduce(buf, out, 16, (ncclDataType_t)77, ncclSum, comm, NULL),
           ncclInvalidArgument, "datatype 77");
  NCCL_ERR(ncclAllReduce(buf, out, 16, ncclFloat, (ncclRedOp_t)42, comm, NULL),
           ncclInvalidArgument, "op 42");
  NCCL_ERR(ncclBroadcast(buf, out, 16, ncclFloat, nranks, comm, NULL), ncclInvalidArgument,
           "root");
  NCCL_ERR(ncclAllReduce(NULL, out, 16, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument,
           "sendbuff is NULL");
  NCCL_ERR(ncclGroupEnd(), ncclInvalidUsage, "no group is open");
  NCCL_ERR(ncclGetVersion(NULL), ncclInvalidArgument, "version is NULL");
  NCCL_ERR(ncclGather(buf, out, 1, ncclFloat, -1, comm, NULL), ncclInvalidArgument, "root -1");
  /* Entries zcc does not serve: named, nothing done. */
  ncclComm_t nc = NULL;
  NCCL_ERR(ncclCommShrink(comm, &rank, 1, &nc, NULL, 0), ncclInvalidUsage, "ncclCommShrink");
  EXPECT(nc == NULL, "ncclCommShrink wrote a communicator");
  NCCL_ERR(ncclCommRevoke(comm, 0), ncclInvalidUsage, "ncclCommRevoke");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_ERR(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "ncclGroupSimulateEnd");
  sim.magic = 1;
  NCCL_ERR(ncclGroupSimulateEnd(&sim), ncclInvalidArgument, "magic");
  extern ncclResult_t ncclDevCommCreate(ncclComm_t, const void *, void *);
  char devcomm[256];
  NCCL_ERR(ncclDevCommCreate(comm, NULL, devcomm), ncclInvalidUsage, "ncclDevCommCreate");
  void *p = NULL;
  ncclResult_t r = ncclMemAlloc(&p, 4096);
  if (r == ncclSuccess) NCCL_OK(ncclMemFree(p));
  else EXPECT(strstr(ncclGetLastError(NULL), "zccMemAlloc") || strlen(ncclGetLastError(NULL)) > 0,
              "ncclMemAlloc failed without a message");
  /* The communicator still works after all of that. */
  ctx_t c = {nranks, rank, 0, 1};
  float s[N], o[N];
  fill_f(s, rank, N);
  NCCL_OK(ncclAllReduce(s, o, N, ncclFloat, ncclSum, comm, NULL));
  check_f("allreduce after the errors", o, N, want_sum, &c);
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, "async error %d after refused calls", (int)async);
}

static void test_config_errors(const ncclUniqueId *id, int rank, int nranks) {
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.size = 8;
  NCCL_ERR(ncclCommInitRankConfig(&comm, nranks, *id, rank, &cfg), ncclInvalidArgument,
           "config size 8");
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0xdeadbeef;
  NCCL_ERR(ncclCommInitRankConfig(&comm, nranks, *id, rank, &cfg), ncclInvalidArgument,
           "config magic 0xdeadbeef");
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.version = 100;
  NCCL_ERR(ncclCommInitRankConfig(&comm, nranks, *id, rank, &cfg), ncclInvalidArgument,
           "config version 100");
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 7;
  NCCL_ERR(ncclCommInitRankConfig(&comm, nranks, *id, rank, &cfg), ncclInvalidArgument,
           "blocking=7");
  EXPECT(comm == NULL, "a refused init wrote the communicator");
  NCCL_ERR(ncclCommInitRank(NULL, nranks, *id, rank), ncclInvalidArgument, "comm is NULL");
}

static int rank_main(int rank, int nranks, const ncclUniqueId *id) {
  g_rank = rank;
  test_config_errors(id, rank, nranks);
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "nccl-host-test";
  cfg.blocking = 0; /* accepted: zcc completes every call before it returns */
  cfg.minCTAs = 4;  /* NCCL's kernel tuning: ignored */
  NCCL_OK(ncclCommInitRankConfig(&comm, nranks, *id, rank, &cfg));
  if (!comm) return 1;
  int n = 0, me = -1, dev = 7;
  NCCL_OK(ncclCommCount(comm, &n));
  NCCL_OK(ncclCommUserRank(comm, &me));
  NCCL_OK(ncclCommCuDevice(comm, &dev));
  EXPECT(n == nranks && me == rank, "count %d rank %d, expected %d and %d", n, me, nranks, rank);
  EXPECT(dev == -1, "ncclCommCuDevice of a host communicator is %d, expected -1", dev);

  test_collectives(comm, rank, nranks);
  test_premulsum(comm, rank, nranks);
  test_errors(comm, rank, nranks);

  /* Registration and windows on host memory. */
  static float reg[4096];
  void *h = NULL;
  NCCL_OK(ncclCommRegister(comm, reg, sizeof(reg), &h));
  NCCL_OK(ncclCommDeregister(comm, h));
  NCCL_ERR(ncclCommDeregister(comm, h), ncclInvalidArgument, "was not registered");
  ncclWindow_t win = NULL;
  NCCL_OK(ncclCommWindowRegister(comm, reg, sizeof(reg), &win, NCCL_WIN_COLL_SYMMETRIC));
  NCCL_OK(ncclCommWindowDeregister(comm, win));
  NCCL_ERR(ncclCommWindowRegister(comm, reg, sizeof(reg), &win, 0x80), ncclInvalidArgument,
           "winFlags");

  /* Split into even and odd ranks; the new communicator works, then aborts. */
  ncclComm_t sub = NULL;
  NCCL_OK(ncclCommSplit(comm, rank % 2, rank, &sub, NULL));
  if (sub) {
    int sn = 0, sr = -1;
    NCCL_OK(ncclCommCount(sub, &sn));
    NCCL_OK(ncclCommUserRank(sub, &sr));
    EXPECT(sn == (nranks + 1 - rank % 2) / 2 && sr == rank / 2, "split: %d ranks, rank %d", sn,
           sr);
    float v = (float)rank, s = -1;
    NCCL_OK(ncclAllReduce(&v, &s, 1, ncclFloat, ncclSum, sub, NULL));
    float w = 0;
    for (int r = rank % 2; r < nranks; r += 2) w += (float)r;
    EXPECT(s == w, "split allreduce %g, expected %g", s, w);
    NCCL_OK(ncclCommAbort(sub));
  }
  ncclComm_t none = (ncclComm_t)(void *)1;
  NCCL_OK(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &none, NULL));
  EXPECT(none == NULL, "a split with NCCL_SPLIT_NOCOLOR gave a communicator");

  /* Scalable init: several ids, zcc's rendezvous at the first one's root. */
  ncclUniqueId ids[2] = {id[1], id[0]}; /* a fresh id first; the second is not used */
  ncclComm_t sc = NULL;
  NCCL_OK(ncclCommInitRankScalable(&sc, nranks, rank, 2, ids, NULL));
  NCCL_ERR(ncclCommInitRankScalable(&sc, nranks, rank, 0, ids, NULL), ncclInvalidArgument,
           "nId 0");
  if (sc) {
    float v = 1, s = 0;
    NCCL_OK(ncclAllReduce(&v, &s, 1, ncclFloat, ncclSum, sc, NULL));
    EXPECT(s == (float)nranks, "scalable-init allreduce %g, expected %d", s, nranks);
    NCCL_OK(ncclCommDestroy(sc));
  }

  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  float x = 1, y;
  NCCL_ERR(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage,
           "not a communicator of zcc's libnccl.so.2");
  NCCL_ERR(ncclCommDestroy(comm), ncclInvalidUsage, "not a communicator of zcc's");
  NCCL_OK(ncclCommDestroy(NULL));
  return g_failures ? 1 : 0;
}

/* Fork the ranks first (ncclGetUniqueId starts a thread), rank 0 makes the id. */
static int run_ranks(int nranks) {
  static int pipes[16][2]; /* static: the ranks' LeakSanitizer sees no harness memory */
  for (int r = 1; r < nranks; r++)
    if (pipe(pipes[r]) != 0) return perror("pipe"), 1;
  static pid_t pids[16];
  fflush(NULL); /* the ranks exit(): nothing buffered may print twice */
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    if (pids[r] < 0) return perror("fork"), 1;
    if (pids[r] == 0) {
      ncclUniqueId id[2]; /* one id per communicator made from scratch */
      if (r == 0) {
        g_rank = 0;
        NCCL_OK(ncclGetUniqueId(&id[0]));
        NCCL_OK(ncclGetUniqueId(&id[1]));
        for (int p = 1; p < nranks; p++)
          if (write(pipes[p][1], id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(2);
        if (g_failures) _exit(1);
      } else if (read(pipes[r][0], id, sizeof(id)) != (ssize_t)sizeof(id)) {
        _exit(2);
      }
      exit(rank_main(r, nranks, id)); /* exit, not _exit: LeakSanitizer checks each rank */
    }
  }
  int bad = 0;
  for (int r = 0; r < nranks; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_nccl_host: rank %d %s %d\n", r,
              WIFEXITED(st) ? "exited with" : "died of signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad++;
    }
  }
  if (!bad) printf("test_nccl_host: %d ranks: ok\n", nranks);
  return bad ? 1 : 0;
}

/* ---- ncclCommInitAll: every rank in one process, a thread each ---- */

typedef struct {
  ncclComm_t comm;
  int rank, nranks;
  float out[N];
  ncclResult_t res;
} initall_rank_t;

static void *initall_thread(void *p) {
  initall_rank_t *a = p;
  float in[N];
  fill_f(in, a->rank, N);
  a->res = ncclAllReduce(in, a->out, N, ncclFloat, ncclSum, a->comm, NULL);
  return NULL;
}

static int initall_child(int nranks) {
  g_rank = 0;
  ncclComm_t comms[8];
  NCCL_OK(ncclCommInitAll(comms, nranks, NULL));
  if (g_failures) return 1;
  initall_rank_t *a = calloc((size_t)nranks, sizeof(*a));
  pthread_t th[8];
  for (int r = 0; r < nranks; r++) {
    a[r].comm = comms[r];
    a[r].rank = r;
    a[r].nranks = nranks;
    pthread_create(&th[r], NULL, initall_thread, &a[r]);
  }
  ctx_t c = {nranks, 0, 0, 1};
  for (int r = 0; r < nranks; r++) {
    pthread_join(th[r], NULL);
    if (a[r].res != ncclSuccess) FAIL("ncclCommInitAll rank %d: allreduce -> %d", r, a[r].res);
    else check_f("ncclCommInitAll allreduce", a[r].out, N, want_sum, &c);
    NCCL_OK(ncclCommDestroy(comms[r]));
  }
  free(a);
  NCCL_ERR(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument, "ndev 0");
  return g_failures ? 1 : 0;
}

static int run_initall(int nranks) {
  if (nranks > 8) nranks = 8;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return perror("fork"), 1;
  if (pid == 0) exit(initall_child(nranks));
  int st = 0;
  waitpid(pid, &st, 0);
  int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (ok) printf("test_nccl_host: ncclCommInitAll, %d ranks in one process: ok\n", nranks);
  else fprintf(stderr, "test_nccl_host: the ncclCommInitAll process failed (status 0x%x)\n", st);
  return ok ? 0 : 1;
}

/* ---- version and strings (one process, before any communicator) ---- */

static void test_version(void) {
  int v = 0;
  NCCL_OK(ncclGetVersion(&v));
  EXPECT(v == NCCL_VERSION_CODE, "ncclGetVersion %d, expected NCCL_VERSION_CODE %d", v,
         NCCL_VERSION_CODE);
  EXPECT(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "ncclSuccess's string");
  EXPECT(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage") != NULL,
         "ncclInvalidUsage's string");
  EXPECT(strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code") == 0,
         "an unknown result's string");
}

/* ---- --env: the log that NCCL_* variables make (ctest sets them) ---- */

static int env_mode(void) {
  const char *pat = getenv("NCCL_DEBUG_FILE");
  if (!pat || !getenv("NCCL_DEBUG")) {
    printf("test_nccl_host --env: NCCL_DEBUG and NCCL_DEBUG_FILE must be set (ctest does)\n");
    return 77;
  }
  char path[4096];
  size_t o = 0;
  for (const char *p = pat; *p && o + 16 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  unlink(path);
  g_rank = 0;
  test_version();
  /* A one-rank communicator: init logs at INFO. */
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclCommInitRank(&comm, 1, id, 0));
  float v = 3, s = 0;
  NCCL_OK(ncclAllReduce(&v, &s, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(s == 3, "one-rank allreduce %g", s);
  NCCL_OK(ncclCommDestroy(comm));
  FILE *f = fopen(path, "r");
  if (!f) {
    FAIL("no log at %s (NCCL_DEBUG_FILE=%s): %s", path, pat, strerror(errno));
    return 1;
  }
  static char log[1 << 16];
  size_t n = fread(log, 1, sizeof(log) - 1, f);
  log[n] = '\0';
  fclose(f);
  unlink(path);
  static const char *const want[] = {
      "answers as libnccl.so.2: NCCL ABI 2.28.9 (NCCL_VERSION_CODE 22809)",
      "NCCL_SHM_DISABLE=1 read as ZCC_SHM_DISABLE=1",
      "NCCL_ALGO=Ring read as ZCC_ALGO=ring",
      "NCCL_PROTO=LL ignored: ZCC_PROTO=simple wins",
      "NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH read as ZCC_DEBUG_SUBSYS=INIT,ENV,TOPO",
      "NCCL_IB_HCA=mlx5_0 has no zcc meaning; ignored",
      "on the host ready",
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    if (!strstr(log, want[i])) FAIL("the log does not say '%s'; it reads:\n%s", want[i], log);
  if (!g_failures) printf("test_nccl_host --env: ok\n");
  return g_failures ? 1 : 0;
}

/* ---- --refuse / --fallback: a communicator zcc refuses ---- */

/*
 * ZCC_DEVICE=cuda without a usable GPU (this test's machines): zcc refuses
 * the communicator. Without a fallback that is a clear error; with
 * ZCC_NCCL_FALLBACK (the fake NCCL of fake_nccl.c) the communicator and
 * every call on it go there.
 */
static int refuse_mode(int with_fallback) {
  g_rank = 0;
  setenv("ZCC_DEVICE", "cuda", 1);
  const char *fb = getenv("ZCC_NCCL_FALLBACK");
  if (with_fallback && (!fb || !*fb)) {
    printf("test_nccl_host --fallback: ZCC_NCCL_FALLBACK is not set (ctest sets it)\n");
    return 77;
  }
  if (!with_fallback) unsetenv("ZCC_NCCL_FALLBACK");
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
  if (!with_fallback) {
    if (r == ncclSuccess) {
      printf("test_nccl_host --refuse: skipped: a GPU is usable here, so zcc does not refuse "
             "ZCC_DEVICE=cuda\n");
      ncclCommDestroy(comm);
      return 77;
    }
    EXPECT(r == ncclInvalidUsage, "refused init -> %d, expected ncclInvalidUsage", (int)r);
    const char *m = ncclGetLastError(NULL);
    EXPECT(strstr(m, "GPU communicators need a CUDA GPU") && strstr(m, "ZCC_NCCL_FALLBACK"),
           "the refusal's message '%s' does not say why and how to fall back", m);
    EXPECT(comm == NULL, "a refused init wrote the communicator");
    if (!g_failures) printf("test_nccl_host --refuse: ok\n");
    return g_failures ? 1 : 0;
  }
  void *fake = dlopen(fb, RTLD_NOW | RTLD_NOLOAD);
  int (*fake_calls)(const char *) = fake ? (int (*)(const char *))dlsym(fake, "fake_nccl_calls")
                                         : NULL;
  if (!fake_calls) {
    FAIL("the fallback %s is not loaded (or is not the fake NCCL): %s", fb, dlerror());
    return 1;
  }
  if (r == ncclSuccess && fake_calls("ncclCommInitRank") == 0) {
    printf("test_nccl_host --fallback: skipped: a GPU is usable here, so zcc does not refuse "
           "ZCC_DEVICE=cuda\n");
    ncclCommDestroy(comm);
    return 77;
  }
  NCCL_OK(r);
  if (!comm) return 1;
  EXPECT(fake_calls("ncclGetUniqueId") == 1, "the fallback's ncclGetUniqueId ran %d times",
         fake_calls("ncclGetUniqueId"));
  EXPECT(fake_calls("ncclCommInitRank") == 1, "the fallback's init ran %d times",
         fake_calls("ncclCommInitRank"));
  float v[4] = {1, 2, 3, 4}, s[4] = {0};
  NCCL_OK(ncclAllReduce(v, s, 4, ncclFloat, ncclSum, comm, NULL));
  EXPECT(fake_calls("ncclAllReduce") == 1 && s[3] == 4, "allreduce did not go to the fallback");
  int n = 0;
  NCCL_OK(ncclCommCount(comm, &n));
  EXPECT(n == 1, "forwarded ncclCommCount %d", n);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupEnd());
  EXPECT(fake_calls("ncclGroupEnd") == 1, "ncclGroupEnd did not reach the fallback");
  /* A call the fallback lacks: named. */
  NCCL_ERR(ncclBcast(v, 4, ncclFloat, 0, comm, NULL), ncclInvalidUsage, "has no ncclBcast");
  /* The fallback's errors come back with its message. */
  NCCL_ERR(ncclAllReduce(v, s, 4, ncclFloat, ncclSum + 77, comm, NULL), ncclInvalidArgument,
           "fake NCCL: bad op");
  NCCL_OK(ncclCommDestroy(comm));
  EXPECT(fake_calls("ncclCommDestroy") == 1, "destroy did not reach the fallback");
  /* A destroyed forwarded comm is nobody's. */
  NCCL_ERR(ncclAllReduce(v, s, 4, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage,
           "not a communicator of zcc's");
  if (!g_failures) printf("test_nccl_host --fallback: ok\n");
  return g_failures ? 1 : 0;
}

int main(int argc, char **argv) {
  int nranks = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--env") == 0) return env_mode();
    if (strcmp(argv[i], "--refuse") == 0) return refuse_mode(0);
    if (strcmp(argv[i], "--fallback") == 0) return refuse_mode(1);
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      nranks = atoi(argv[++i]);
      continue;
    }
    fprintf(stderr, "usage: test_nccl_host [-n RANKS | --env | --refuse | --fallback]\n");
    return 2;
  }
  if (nranks < 1 || nranks > 16) {
    fprintf(stderr, "test_nccl_host: -n %d: 1 to 16 ranks\n", nranks);
    return 2;
  }
  const char *dev = getenv("ZCC_DEVICE");
  if (!dev || strcmp(dev, "host") != 0) {
    printf("test_nccl_host: skipped: set ZCC_DEVICE=host (ctest does): this suite passes "
           "host memory\n");
    return 77;
  }
  g_rank = -1;
  test_version();
  if (g_failures) return 1;
  int res = run_ranks(nranks);
  return run_initall(nranks) || res;
}
