// Checks and timings of zcc's CUDA kernels (src/device/) on one process's
// GPUs, through the plain-C launch API of device.h and the CUDA runtime.
//
//   test_gpu_kernels [--check] [--time] [--quick] [--blocks N]
//
// --check (default with --time when neither is given):
//   1. zcc_dev_reduce for every datatype x op at counts 0, 1, 7, 4097,
//      1M+3, aligned, at odd byte offsets, at a common offset and in place,
//      and zcc_dev_finish_avg for nranks 2, 3, 8, and zcc_dev_scale (immediate
//      and device scalar): exactly equal to the host
//      loops of misc/reduce.c (bitwise; NaN matches any NaN, since
//      the GPU's default NaN differs from the CPU's), guard bytes around
//      every output untouched. Fresh random inputs, poisoned outputs.
//   2. one-shot and two-shot allreduce on 2 GPUs, 8 B .. 256 MiB, several
//      type/op pairs, out of place and in place: exact against the host
//      reference, and the two GPUs' outputs bitwise identical.
//   3. 1000 replays of a captured two-GPU launch with new inputs copied in
//      before each replay (outside the graph), every 100th checked.
//   4. barrier (a late store before it on one GPU is seen after it on the
//      other); gather as allgather, alltoall and broadcast (out of place and
//      in place), 0 B .. 33 MiB, common and mismatched offsets modulo 16;
//      one-shot with a passive rank (Reduce), root out of place and in
//      place; p2p both ways in one launch, several ops per peer, 0 B ..
//      5 MiB+3, across launches, random interleavings; every byte of the
//      destination areas (guards included) compared.
//   5. 40-120 mixed launches (barrier, gather, one-shot, two-shot, passive,
//      LL, p2p; grids of 1 to 64 blocks) back to back on one flag area, all
//      checked, flag counters equal on both GPUs; 300 replays each of a
//      captured gather and p2p launch with new inputs.
// --time: NVLink copy ceiling, then one-shot, two-shot and ncclAllReduce
//   from 8 B to 1 GiB (float32 sum), eager and graph-replayed.
// Prints "N passed, N failed" and exits nonzero on any failure.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device.h"
extern "C" {
#include "reduce.h"
}

static int g_passed, g_failed;

#define CK(call)                                                              \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,           \
              cudaGetErrorString(e_));                                        \
      exit(2);                                                                \
    }                                                                         \
  } while (0)

#define ZK(call)                                                              \
  do {                                                                        \
    int e_ = (call);                                                          \
    if (e_ != 0) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,           \
              zcc_dev_error_string(e_));                                      \
      exit(2);                                                                \
    }                                                                         \
  } while (0)

#define NK(call)                                                              \
  do {                                                                        \
    ncclResult_t e_ = (call);                                                 \
    if (e_ != ncclSuccess) {                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,           \
              ncclGetErrorString(e_));                                        \
      exit(2);                                                                \
    }                                                                         \
  } while (0)

static void result(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(bool ok, const char *fmt, ...) {
  if (ok) {
    g_passed++;
    return;
  }
  g_failed++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "FAIL: ");
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
}

// ---- random data ----

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

// Fill n elements of type: integers get random bits; floats get a mix of
// random bit patterns (NaN, inf, subnormals included) and moderate values.
static void fill_random(void *buf, size_t n, zccDataType_t type, bool specials) {
  size_t es = zcc_type_size(type);
  unsigned char *p = (unsigned char *)buf;
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    bool isfloat = type >= zccFloat16;
    if (isfloat && !(specials && (r & 7) == 0)) {
      // Moderate value: sign, magnitude 2^-6 .. 2^6 with random mantissa.
      float f = (float)((r >> 8) & 0xffffff) / 16777216.0f + 1.0f;
      f = ldexpf(f, (int)((r >> 40) % 13) - 6);
      if (r & (1ull << 60)) f = -f;
      switch (type) {
      case zccFloat16: { uint16_t h = zcc_float_to_half(f); memcpy(p + i * 2, &h, 2); break; }
      case zccBfloat16: { uint16_t h = zcc_float_to_bf16(f); memcpy(p + i * 2, &h, 2); break; }
      case zccFloat8e4m3: p[i] = zcc_float_to_e4m3(f); break;
      case zccFloat8e5m2: p[i] = zcc_float_to_e5m2(f); break;
      case zccFloat32: memcpy(p + i * 4, &f, 4); break;
      case zccFloat64: { double d = (double)f + ldexp((double)(r & 0xff), -40); memcpy(p + i * 8, &d, 8); break; }
      default: break;
      }
    } else {
      memcpy(p + i * es, &r, es);
    }
  }
}

static bool is_nan(const unsigned char *p, zccDataType_t type) {
  switch (type) {
  case zccFloat16: { uint16_t h; memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00; }
  case zccBfloat16: { uint16_t h; memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80; }
  case zccFloat8e4m3: return (p[0] & 0x7f) == 0x7f;
  case zccFloat8e5m2: return (p[0] & 0x7f) > 0x7c;
  case zccFloat32: { float f; memcpy(&f, p, 4); return f != f; }
  case zccFloat64: { double d; memcpy(&d, p, 8); return d != d; }
  default: return false;
  }
}

// Index of the first element that differs (bitwise, NaN == NaN), or -1.
static long long first_diff(const void *got, const void *want, size_t n, zccDataType_t type) {
  size_t es = zcc_type_size(type);
  if (memcmp(got, want, n * es) == 0) return -1;
  const unsigned char *g = (const unsigned char *)got, *w = (const unsigned char *)want;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(g + i * es, w + i * es, es) == 0) continue;
    if (is_nan(g + i * es, type) && is_nan(w + i * es, type)) continue;
    return (long long)i;
  }
  return -1;
}

static std::string hexel(const void *p, size_t es) {
  char b[40];
  uint64_t v = 0;
  memcpy(&v, p, es);
  snprintf(b, sizeof b, "0x%0*llx", (int)(es * 2), (unsigned long long)v);
  return b;
}

static const zccDataType_t kTypes[] = {zccInt8, zccUint8, zccInt32, zccUint32, zccInt64, zccUint64,
                                       zccFloat16, zccFloat32, zccFloat64, zccBfloat16,
                                       zccFloat8e4m3, zccFloat8e5m2};
static const zccRedOp_t kOps[] = {zccSum, zccProd, zccMax, zccMin, zccAvg};

static const unsigned char kPoison = 0xa5;
static const size_t kGuard = 64;

// ---- 1. elementwise reduce and avg finish ----

static void check_reduce(bool quick) {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t counts[] = {0, 1, 7, 4097, (1u << 20) + 3};
  const size_t maxn = (1u << 20) + 3, maxb = maxn * 8 + 2 * kGuard + 64;
  char *da, *db, *dd;
  CK(cudaMalloc(&da, maxb));
  CK(cudaMalloc(&db, maxb));
  CK(cudaMalloc(&dd, maxb));
  std::vector<unsigned char> ha(maxb), hb(maxb), hd(maxb), ref(maxb);
  // Byte offsets of (dst, a, b) from a 256-aligned base + kGuard.
  struct Off { int d, a, b; bool inplace; const char *name; };
  const Off offs[] = {{0, 0, 0, false, "aligned"},
                      {1, 3, 5, false, "odd offsets 1/3/5"},
                      {8, 8, 8, false, "common offset 8"},
                      {2, 6, 10, false, "offsets 2/6/10"},
                      {4, 4, 4, true, "in place at 4"}};
  for (zccDataType_t type : kTypes) {
    size_t es = zcc_type_size(type);
    for (zccRedOp_t op : kOps) {
      for (size_t n : counts) {
        if (quick && n > 5000) continue;
        for (const Off &o : offs) {
          size_t bytes = n * es;
          fill_random(ha.data(), n, type, op == zccMax || op == zccMin);
          fill_random(hb.data(), n, type, op == zccMax || op == zccMin);
          char *a = da + kGuard + o.a, *b = db + kGuard + o.b;
          char *d = o.inplace ? a : dd + kGuard + o.d;
          CK(cudaMemcpyAsync(a, ha.data(), bytes, cudaMemcpyHostToDevice, s));
          CK(cudaMemcpyAsync(b, hb.data(), bytes, cudaMemcpyHostToDevice, s));
          if (!o.inplace) CK(cudaMemsetAsync(dd, kPoison, maxb, s));
          ZK(zcc_dev_reduce(d, a, b, n, type, op, s));
          CK(cudaStreamSynchronize(s));
          char *dbase = o.inplace ? da : dd;
          size_t doff = (size_t)(d - dbase);
          CK(cudaMemcpy(hd.data(), dbase, doff + bytes + kGuard, cudaMemcpyDeviceToHost));
          if (bytes) zcc_reduce(ref.data(), ha.data(), hb.data(), n, type, op);
          long long i = first_diff(hd.data() + doff, ref.data(), n, type);
          bool guard_ok = true;
          if (!o.inplace) {
            for (size_t j = 0; j < doff; j++) guard_ok &= hd[j] == kPoison;
            for (size_t j = 0; j < kGuard; j++) guard_ok &= hd[doff + bytes + j] == kPoison;
          } else {
            guard_ok = true;
          }
          result(i < 0 && guard_ok, "reduce %s %s n=%zu %s: %s", zcc_type_name(type), zcc_op_name(op), n,
                 o.name,
                 i >= 0 ? ("element " + std::to_string(i) + " got " + hexel(hd.data() + doff + i * es, es) +
                           " want " + hexel(ref.data() + i * es, es) + " (a " + hexel(ha.data() + i * es, es) +
                           ", b " + hexel(hb.data() + i * es, es) + ")").c_str()
                        : "guard bytes written");
        }
      }
    }
    // Avg finish.
    for (int nr : {2, 3, 8}) {
      for (size_t n : counts) {
        if (quick && n > 5000) continue;
        for (int off : {0, 1}) {
          size_t bytes = n * es;
          fill_random(ha.data(), n, type, false);
          char *src = da + kGuard + off * 3, *d = dd + kGuard + off;
          CK(cudaMemcpyAsync(src, ha.data(), bytes, cudaMemcpyHostToDevice, s));
          CK(cudaMemsetAsync(dd, kPoison, maxb, s));
          ZK(zcc_dev_finish_avg(d, src, n, type, nr, s));
          CK(cudaStreamSynchronize(s));
          CK(cudaMemcpy(hd.data(), dd, kGuard + off + bytes + kGuard, cudaMemcpyDeviceToHost));
          if (bytes) zcc_reduce_finish_avg(ref.data(), ha.data(), n, type, nr);
          long long i = first_diff(hd.data() + kGuard + off, ref.data(), n, type);
          bool guard_ok = true;
          for (size_t j = 0; j < kGuard + off; j++) guard_ok &= hd[j] == kPoison;
          for (size_t j = 0; j < kGuard; j++) guard_ok &= hd[kGuard + off + bytes + j] == kPoison;
          result(i < 0 && guard_ok, "finish_avg %s nranks=%d n=%zu off=%d: %s", zcc_type_name(type), nr, n,
                 off, i >= 0 ? ("element " + std::to_string(i)).c_str() : "guard bytes written");
        }
      }
    }    // Pre-multiplied sums' scaling: the scalar by value and from device memory.
    for (int dev_scalar : {0, 1}) {
      for (size_t n : counts) {
        if (quick && n > 5000) continue;
        for (int off : {0, 1}) {
          size_t bytes = n * es;
          fill_random(ha.data(), n, type, false);
          unsigned char sc[8] = {0};
          fill_random(sc, 1, type, false);
          uint64_t bits = 0;
          memcpy(&bits, sc, es);
          char *src = da + kGuard + off * 3, *d = dd + kGuard + off;
          char *dsc = db; // the scalar in device memory
          CK(cudaMemcpyAsync(src, ha.data(), bytes, cudaMemcpyHostToDevice, s));
          CK(cudaMemcpyAsync(dsc, sc, es, cudaMemcpyHostToDevice, s));
          CK(cudaMemsetAsync(dd, kPoison, maxb, s));
          ZK(zcc_dev_scale(d, src, n, type, dev_scalar ? dsc : nullptr, dev_scalar ? 0 : bits, s));
          CK(cudaStreamSynchronize(s));
          CK(cudaMemcpy(hd.data(), dd, kGuard + off + bytes + kGuard, cudaMemcpyDeviceToHost));
          if (bytes) zcc_reduce_scale(ref.data(), ha.data(), n, type, sc);
          long long i = first_diff(hd.data() + kGuard + off, ref.data(), n, type);
          bool guard_ok = true;
          for (size_t j = 0; j < kGuard + off; j++) guard_ok &= hd[j] == kPoison;
          for (size_t j = 0; j < kGuard; j++) guard_ok &= hd[kGuard + off + bytes + j] == kPoison;
          result(i < 0 && guard_ok, "scale %s %s scalar n=%zu off=%d: %s", zcc_type_name(type),
                 dev_scalar ? "device" : "immediate", n, off,
                 i >= 0 ? ("element " + std::to_string(i)).c_str() : "guard bytes written");
        }
      }
    }
  }
  // Bad arguments are refused without launching.
  result(zcc_dev_reduce(dd, da, db, 1, (zccDataType_t)99, zccSum, s) != 0, "reduce accepts a bad type");
  result(zcc_dev_reduce(dd, da, db, 1, zccFloat32, (zccRedOp_t)9, s) != 0, "reduce accepts a bad op");
  result(zcc_dev_finish_avg(dd, da, 1, zccFloat32, 0, s) != 0, "finish_avg accepts nranks 0");
  result(zcc_dev_scale(dd, da, 1, (zccDataType_t)99, nullptr, 0, s) != 0, "scale accepts a bad type");
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dd));
  CK(cudaStreamDestroy(s));
}

// ---- two GPUs ----

struct Pair {
  int ngpu = 0;
  cudaStream_t s[2];
  uint32_t *flags[2];
  void *ll[2];
  void *p2p[2]; // ZCC_DEV_P2P_BYTES each
  char *in[2], *out[2];
  size_t cap = 0; // bytes of each in/out buffer
  cudaEvent_t fork, join;
};

static Pair P;

static bool setup_pair(size_t cap) {
  int n;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) return false;
  int a01, a10;
  CK(cudaDeviceCanAccessPeer(&a01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&a10, 1, 0));
  if (!a01 || !a10) return false;
  P.ngpu = 2;
  P.cap = cap;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    cudaError_t e = cudaDeviceEnablePeerAccess(1 - g, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else CK(e);
    CK(cudaStreamCreateWithFlags(&P.s[g], cudaStreamNonBlocking));
    CK(cudaMalloc(&P.flags[g], ZCC_DEV_FLAGS_BYTES));
    CK(cudaMemset(P.flags[g], 0, ZCC_DEV_FLAGS_BYTES));
    CK(cudaMalloc(&P.ll[g], ZCC_DEV_LL_BYTES));
    CK(cudaMemset(P.ll[g], 0, ZCC_DEV_LL_BYTES));
    CK(cudaMalloc(&P.p2p[g], ZCC_DEV_P2P_BYTES));
    CK(cudaMemset(P.p2p[g], 0, ZCC_DEV_P2P_BYTES));
    CK(cudaMalloc(&P.in[g], cap + 256));
    CK(cudaMalloc(&P.out[g], cap + 256));
  }
  CK(cudaSetDevice(0));
  CK(cudaEventCreateWithFlags(&P.fork, cudaEventDisableTiming));
  CK(cudaSetDevice(1));
  CK(cudaEventCreateWithFlags(&P.join, cudaEventDisableTiming));
  CK(cudaSetDevice(0));
  return true;
}

static void make_args(zcc_dev_allreduce_t *args, char *const *in, char *const *out, size_t count,
                      zccDataType_t type, zccRedOp_t op, int blocks) {
  for (int g = 0; g < 2; g++) {
    zcc_dev_allreduce_t &a = args[g];
    memset(&a, 0, sizeof a);
    for (int r = 0; r < 2; r++) {
      a.inputs[r] = in[r];
      a.outputs[r] = out[r];
      a.flags[r] = P.flags[r];
      a.ll[r] = P.ll[r];
    }
    a.count = count;
    a.type = type;
    a.op = op;
    a.nranks = 2;
    a.rank = g;
    a.max_blocks = blocks;
  }
}

enum Algo { ONESHOT = 0, TWOSHOT = 1, NCCL = 2, LL = 3 };
static const char *algo_name(int a) {
  return a == ONESHOT ? "one-shot" : a == TWOSHOT ? "two-shot" : a == LL ? "one-shot-ll" : "nccl";
}

static void launch_zcc(const zcc_dev_allreduce_t *args, int algo) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    if (algo == ONESHOT) ZK(zcc_dev_allreduce_oneshot(&args[g], P.s[g]));
    else if (algo == LL) ZK(zcc_dev_allreduce_oneshot_ll(&args[g], P.s[g]));
    else ZK(zcc_dev_allreduce_twoshot(&args[g], P.s[g]));
  }
  CK(cudaSetDevice(0));
}

// Capture fn() (which launches on P.s[0] and P.s[1]) into one graph on s[0].
template <typename F> static cudaGraphExec_t capture(F fn) {
  CK(cudaSetDevice(0));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(P.s[0], cudaStreamCaptureModeThreadLocal));
  CK(cudaEventRecord(P.fork, P.s[0]));
  CK(cudaStreamWaitEvent(P.s[1], P.fork, 0));
  fn();
  CK(cudaSetDevice(1));
  CK(cudaEventRecord(P.join, P.s[1]));
  CK(cudaSetDevice(0));
  CK(cudaStreamWaitEvent(P.s[0], P.join, 0));
  CK(cudaStreamEndCapture(P.s[0], &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphDestroy(graph));
  return exec;
}

static void sync_pair() {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaStreamSynchronize(P.s[g]));
  }
  CK(cudaSetDevice(0));
}

// Host reference of the 2-rank allreduce: in0 op in1, then the avg step.
static void host_allreduce(void *ref, const void *in0, const void *in1, size_t n, zccDataType_t type,
                           zccRedOp_t op) {
  if (n == 0) return;
  zcc_reduce(ref, in0, in1, n, type, op);
  if (op == zccAvg) zcc_reduce_finish_avg(ref, ref, n, type, 2);
}

static void check_allreduce(bool quick) {
  struct Case { zccDataType_t type; zccRedOp_t op; size_t max_bytes; };
  const Case cases[] = {
      {zccFloat32, zccSum, 256u << 20}, {zccBfloat16, zccSum, 256u << 20}, {zccFloat16, zccSum, 256u << 20},
      {zccFloat32, zccAvg, 16u << 20},  {zccBfloat16, zccAvg, 16u << 20},  {zccInt32, zccMax, 16u << 20},
      {zccUint8, zccProd, 16u << 20},   {zccFloat64, zccMin, 16u << 20},   {zccFloat8e4m3, zccSum, 16u << 20},
      {zccInt64, zccSum, 16u << 20},    {zccFloat8e5m2, zccMax, 1u << 20}, {zccInt8, zccAvg, 1u << 20},
  };
  const size_t sizes[] = {8, 12, 100, 1000, 4100, 65536, 65536 + 48, 1u << 20, (1u << 20) + 6,
                          16u << 20, 256u << 20};
  std::vector<unsigned char> h0, h1, ref, o0, o1;
  for (const Case &c : cases) {
    size_t es = zcc_type_size(c.type);
    for (size_t bytes0 : sizes) {
      if (bytes0 > c.max_bytes || (quick && bytes0 > (1u << 20))) continue;
      size_t n = bytes0 / es;
      if (n == 0) continue;
      size_t bytes = n * es;
      for (int algo : {ONESHOT, TWOSHOT, LL}) {
        if (algo == LL && bytes > ZCC_DEV_LL_MAX_BYTES) continue;
        // Placements: out of place aligned; in place; out of place at odd
        // element offsets (inputs +es, outputs +3*es) for sizes up to 1 MiB.
        for (int place = 0; place < 3; place++) {
          if (place > 0 && bytes > (16u << 20)) continue;
          if (place == 2 && bytes > (1u << 20) + 64) continue;
          size_t ioff = place == 2 ? es : 0, ooff = place == 2 ? 3 * es : 0;
          h0.resize(bytes);
          h1.resize(bytes);
          ref.resize(bytes);
          o0.resize(bytes);
          o1.resize(bytes);
          fill_random(h0.data(), n, c.type, c.op == zccMax || c.op == zccMin);
          fill_random(h1.data(), n, c.type, c.op == zccMax || c.op == zccMin);
          char *in[2] = {P.in[0] + ioff, P.in[1] + ioff};
          char *out[2] = {P.out[0] + ooff, P.out[1] + ooff};
          if (place == 1) {
            out[0] = in[0];
            out[1] = in[1];
          }
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            CK(cudaMemcpyAsync(in[g], g ? h1.data() : h0.data(), bytes, cudaMemcpyHostToDevice, P.s[g]));
            if (place != 1) CK(cudaMemsetAsync(P.out[g], kPoison, bytes + 256, P.s[g]));
          }
          zcc_dev_allreduce_t args[2];
          make_args(args, in, out, n, c.type, c.op, 0);
          launch_zcc(args, algo);
          sync_pair();
          host_allreduce(ref.data(), h0.data(), h1.data(), n, c.type, c.op);
          CK(cudaMemcpy(o0.data(), out[0], bytes, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(o1.data(), out[1], bytes, cudaMemcpyDeviceToHost));
          long long d0 = first_diff(o0.data(), ref.data(), n, c.type);
          long long d1 = first_diff(o1.data(), ref.data(), n, c.type);
          bool same = memcmp(o0.data(), o1.data(), bytes) == 0;
          bool guard_ok = true;
          if (place != 1) {
            unsigned char gb[256];
            for (int g = 0; g < 2; g++) {
              CK(cudaMemcpy(gb, out[g] + bytes, 64, cudaMemcpyDeviceToHost));
              for (int j = 0; j < 64; j++) guard_ok &= gb[j] == kPoison;
              if (ooff) {
                CK(cudaMemcpy(gb, P.out[g], ooff, cudaMemcpyDeviceToHost));
                for (size_t j = 0; j < ooff; j++) guard_ok &= gb[j] == kPoison;
              }
            }
          }
          const char *pn = place == 0 ? "out of place" : place == 1 ? "in place" : "offset";
          result(d0 < 0 && d1 < 0 && same && guard_ok, "allreduce %s %s %s %zu B %s: gpu0 diff %lld, gpu1 diff %lld, %s, %s",
                 algo_name(algo), zcc_type_name(c.type), zcc_op_name(c.op), bytes, pn, d0, d1,
                 same ? "gpus identical" : "gpus differ", guard_ok ? "guards ok" : "guard bytes written");
        }
      }
    }
  }
  // count 0 runs (keeps counters in step) and bad arguments are refused.
  {
    zcc_dev_allreduce_t args[2];
    char *in[2] = {P.in[0], P.in[1]}, *out[2] = {P.out[0], P.out[1]};
    make_args(args, in, out, 0, zccFloat32, zccSum, 0);
    launch_zcc(args, ONESHOT);
    launch_zcc(args, TWOSHOT);
    launch_zcc(args, LL);
    sync_pair();
    result(true, "count 0");
    zcc_dev_allreduce_t bad = args[0];
    bad.count = 16;
    bad.nranks = 9;
    result(zcc_dev_allreduce_oneshot(&bad, P.s[0]) != 0, "oneshot accepts nranks 9");
    bad = args[0];
    bad.count = 16;
    bad.outputs[0] = (char *)bad.inputs[0] + 4;
    result(zcc_dev_allreduce_twoshot(&bad, P.s[0]) != 0, "twoshot accepts partially overlapping buffers");
    bad = args[0];
    bad.count = ZCC_DEV_LL_MAX_BYTES / 4 + 1;
    result(zcc_dev_allreduce_oneshot_ll(&bad, P.s[0]) != 0, "LL accepts more than ZCC_DEV_LL_MAX_BYTES");
  }
}

// 1000 replays of one captured two-GPU launch, inputs replaced before each.
static void check_graph_replays(int algo, zccDataType_t type, zccRedOp_t op, size_t n, bool inplace) {
  const int kReplays = 1000, kStride = 7;
  size_t es = zcc_type_size(type), bytes = n * es, pool_n = n + (size_t)kReplays * kStride;
  std::vector<unsigned char> pool[2], ref(bytes), o0(bytes), o1(bytes);
  char *dpool[2];
  for (int g = 0; g < 2; g++) {
    pool[g].resize(pool_n * es);
    fill_random(pool[g].data(), pool_n, type, op == zccMax || op == zccMin);
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&dpool[g], pool_n * es));
    CK(cudaMemcpy(dpool[g], pool[g].data(), pool_n * es, cudaMemcpyHostToDevice));
  }
  char *in[2] = {P.in[0], P.in[1]};
  char *out[2] = {inplace ? P.in[0] : P.out[0], inplace ? P.in[1] : P.out[1]};
  zcc_dev_allreduce_t args[2];
  make_args(args, in, out, n, type, op, 0);
  cudaGraphExec_t exec = capture([&] { launch_zcc(args, algo); });
  cudaEvent_t copied, done;
  CK(cudaSetDevice(1));
  CK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  CK(cudaSetDevice(0));
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  int bad = 0, checked = 0;
  for (int i = 0; i < kReplays; i++) {
    size_t off = (size_t)i * kStride * es;
    CK(cudaSetDevice(1));
    CK(cudaMemcpyAsync(in[1], dpool[1] + off, bytes, cudaMemcpyDeviceToDevice, P.s[1]));
    CK(cudaEventRecord(copied, P.s[1]));
    CK(cudaSetDevice(0));
    CK(cudaMemcpyAsync(in[0], dpool[0] + off, bytes, cudaMemcpyDeviceToDevice, P.s[0]));
    if (!inplace) {
      CK(cudaMemsetAsync(out[0], kPoison, bytes, P.s[0]));
      CK(cudaSetDevice(1));
      CK(cudaMemsetAsync(out[1], kPoison, bytes, P.s[1]));
      CK(cudaEventRecord(copied, P.s[1]));
      CK(cudaSetDevice(0));
    }
    CK(cudaStreamWaitEvent(P.s[0], copied, 0));
    CK(cudaGraphLaunch(exec, P.s[0]));
    CK(cudaEventRecord(done, P.s[0]));
    CK(cudaStreamWaitEvent(P.s[1], done, 0));
    if (i % 100 == 99) {
      sync_pair();
      host_allreduce(ref.data(), pool[0].data() + off, pool[1].data() + off, n, type, op);
      CK(cudaMemcpy(o0.data(), out[0], bytes, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(o1.data(), out[1], bytes, cudaMemcpyDeviceToHost));
      long long d0 = first_diff(o0.data(), ref.data(), n, type);
      long long d1 = first_diff(o1.data(), ref.data(), n, type);
      checked++;
      if (d0 >= 0 || d1 >= 0 || memcmp(o0.data(), o1.data(), bytes) != 0) {
        bad++;
        printf("  replay %d: gpu0 diff %lld gpu1 diff %lld\n", i, d0, d1);
      }
    }
  }
  sync_pair();
  result(bad == 0 && checked == 10, "graph replays %s %s %s n=%zu%s: %d of %d checked replays wrong",
         algo_name(algo), zcc_type_name(type), zcc_op_name(op), n, inplace ? " in place" : "", bad, checked);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaEventDestroy(done));
  CK(cudaSetDevice(1));
  CK(cudaEventDestroy(copied));
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaFree(dpool[g]));
  }
  CK(cudaSetDevice(0));
}

// ---- 4. barrier, gather, passive one-shot, p2p, interleavings ----

static void fill_bytes(unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t r = rnd();
    memcpy(p + i, &r, 8);
  }
  if (i < n) {
    uint64_t r = rnd();
    memcpy(p + i, &r, n - i);
  }
}

// Offset of the first byte where got and want differ, or -1.
static long long byte_diff(const unsigned char *got, const unsigned char *want, size_t n) {
  if (memcmp(got, want, n) == 0) return -1;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) return (long long)i;
  return -1;
}

// Spin for ns nanoseconds, then store v.
__global__ void delay_store(uint32_t *p, uint32_t v, unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  *(volatile uint32_t *)p = v;
}

__global__ void copy_word(uint32_t *dst, const uint32_t *src) { *dst = *(const volatile uint32_t *)src; }

static void barrier_args(zcc_dev_allreduce_t *a, int g) {
  memset(a, 0, sizeof *a);
  for (int r = 0; r < 2; r++) a->flags[r] = P.flags[r];
  a->nranks = 2;
  a->rank = g;
}

static void launch_barrier() {
  for (int g = 0; g < 2; g++) {
    zcc_dev_allreduce_t a;
    barrier_args(&a, g);
    CK(cudaSetDevice(g));
    ZK(zcc_dev_barrier(&a, P.s[g]));
  }
  CK(cudaSetDevice(0));
}

static void gather_args(zcc_dev_gather_t *a, int g, size_t bytes, int blocks) {
  memset(a, 0, sizeof *a);
  for (int r = 0; r < 2; r++) a->flags[r] = P.flags[r];
  a->bytes = bytes;
  a->nranks = 2;
  a->rank = g;
  a->max_blocks = blocks;
}

static void launch_gather(const zcc_dev_gather_t *a) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    ZK(zcc_dev_gather(&a[g], P.s[g]));
  }
  CK(cudaSetDevice(0));
}

static void p2p_args(zcc_dev_p2p_t *a, int g) {
  memset(a, 0, sizeof *a);
  for (int r = 0; r < 2; r++) a->areas[r] = P.p2p[r];
  a->nranks = 2;
  a->rank = g;
}

static void p2p_add(zcc_dev_p2p_t *a, void *buf, size_t bytes, int peer, int is_send) {
  zcc_dev_p2p_op_t *o = &a->ops[a->nops++];
  o->buf = buf;
  o->bytes = bytes;
  o->peer = peer;
  o->is_send = is_send;
}

// Scratch flag areas and a raised abort flag for argument checks: a call
// that wrongly launches gives up at once and leaves P's counters alone.
struct Scratch {
  uint32_t *flags[2];
  uint32_t *abort_flag;
};

static Scratch make_scratch() {
  Scratch x;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&x.flags[g], ZCC_DEV_FLAGS_BYTES));
    CK(cudaMemset(x.flags[g], 0, ZCC_DEV_FLAGS_BYTES));
  }
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&x.abort_flag, ZCC_DEV_ABORT_BYTES));
  CK(cudaMemset(x.abort_flag, 1, 4));
  return x;
}

static void free_scratch(Scratch &x) {
  sync_pair();
  CK(cudaFree(x.abort_flag));
  for (int g = 0; g < 2; g++) CK(cudaFree(x.flags[g]));
}

// The barrier orders the streams: a store made late (2 ms) on one GPU before
// its barrier is seen by a read on the other GPU after its barrier.
static void check_barrier() {
  uint32_t *word[2], *seen[2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&word[g], 4));
    CK(cudaMalloc(&seen[g], 4));
    CK(cudaMemset(word[g], 0, 4));
  }
  const int kIters = 20;
  int bad = 0;
  for (int i = 0; i < kIters; i++) {
    const int slow = i & 1, reader = 1 - slow;
    const uint32_t v = 1000u + (uint32_t)i;
    CK(cudaSetDevice(slow));
    delay_store<<<1, 1, 0, P.s[slow]>>>(word[slow], v, 2000000ull);
    CK(cudaGetLastError());
    launch_barrier();
    CK(cudaSetDevice(reader));
    copy_word<<<1, 1, 0, P.s[reader]>>>(seen[reader], word[slow]);
    CK(cudaGetLastError());
    sync_pair();
    uint32_t got = 0;
    CK(cudaMemcpy(&got, seen[reader], 4, cudaMemcpyDeviceToHost));
    if (got != v) {
      bad++;
      printf("  barrier %d: gpu%d read %u, want %u (gpu%d's store before its barrier)\n", i, reader, got, v,
             slow);
    }
  }
  result(bad == 0, "barrier: %d of %d reads after the barrier missed the peer's store before it", bad, kIters);
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaFree(word[g]));
    CK(cudaFree(seen[g]));
  }
  CK(cudaSetDevice(0));
  Scratch x = make_scratch();
  zcc_dev_allreduce_t a;
  barrier_args(&a, 0);
  a.flags[0] = x.flags[0];
  a.flags[1] = nullptr;
  a.abort_flag = x.abort_flag;
  result(zcc_dev_barrier(&a, P.s[0]) != 0, "barrier accepts a NULL flag area");
  a.flags[1] = x.flags[1];
  a.rank = 2;
  result(zcc_dev_barrier(&a, P.s[0]) != 0, "barrier accepts rank 2 of 2");
  free_scratch(x);
}

enum GatherShape { AG = 0, AG_INPLACE, A2A, BCAST, BCAST_INPLACE };
static const char *shape_name(int s) {
  static const char *n[] = {"allgather", "allgather in place", "alltoall", "broadcast", "broadcast in place"};
  return n[s];
}

// One gather launch on both GPUs in the given shape: sources at
// P.in[g] + soff, destinations at P.out[g] + doff (part r at + r * bytes),
// every byte of P.out[g] up to the guard compared.
static void gather_case(int shape, int root, size_t bytes, size_t soff, size_t doff, int blocks) {
  const bool bcast = shape == BCAST || shape == BCAST_INPLACE;
  const size_t slen = shape == A2A ? 2 * bytes : bytes;
  const size_t dlen = bcast ? bytes : 2 * bytes;
  const size_t span = doff + dlen + kGuard;
  std::vector<unsigned char> hs[2], want[2], got(span);
  for (int g = 0; g < 2; g++) {
    hs[g].resize(slen);
    fill_bytes(hs[g].data(), slen);
    want[g].assign(span, kPoison);
  }
  zcc_dev_gather_t a[2];
  for (int g = 0; g < 2; g++) {
    gather_args(&a[g], g, bytes, blocks);
    char *D = P.out[g] + doff;
    for (int r = 0; r < 2; r++) {
      const char *S = P.in[r] + soff;
      if (shape == AG || shape == AG_INPLACE) {
        memcpy(want[g].data() + doff + r * bytes, hs[r].data(), bytes);
        if (shape == AG_INPLACE && r == g) continue; // already in place
        a[g].src[r] = S;
        a[g].dst[r] = D + r * bytes;
      } else if (shape == A2A) {
        memcpy(want[g].data() + doff + r * bytes, hs[r].data() + g * bytes, bytes);
        a[g].src[r] = S + g * bytes;
        a[g].dst[r] = D + r * bytes;
      } else if (r == root) {
        memcpy(want[g].data() + doff, hs[root].data(), bytes);
        if (shape == BCAST_INPLACE && g == root) continue;
        // In place, the others read the root's destination.
        a[g].src[r] = shape == BCAST_INPLACE ? (const char *)P.out[root] + doff : S;
        a[g].dst[r] = D;
      }
    }
  }
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMemcpyAsync(P.in[g] + soff, hs[g].data(), slen, cudaMemcpyHostToDevice, P.s[g]));
    CK(cudaMemsetAsync(P.out[g], kPoison, span, P.s[g]));
    if (shape == AG_INPLACE)
      CK(cudaMemcpyAsync(P.out[g] + doff + g * bytes, hs[g].data(), bytes, cudaMemcpyHostToDevice, P.s[g]));
    if (shape == BCAST_INPLACE && g == root)
      CK(cudaMemcpyAsync(P.out[g] + doff, hs[g].data(), bytes, cudaMemcpyHostToDevice, P.s[g]));
  }
  CK(cudaSetDevice(0));
  launch_gather(a);
  sync_pair();
  long long d[2];
  for (int g = 0; g < 2; g++) {
    CK(cudaMemcpy(got.data(), P.out[g], span, cudaMemcpyDeviceToHost));
    d[g] = byte_diff(got.data(), want[g].data(), span);
  }
  result(d[0] < 0 && d[1] < 0,
         "gather %s root %d, %zu B, src +%zu, dst +%zu, blocks %d: gpu0 first wrong byte %lld, gpu1 %lld "
         "(destination bytes start at %zu)",
         shape_name(shape), root, bytes, soff, doff, blocks, d[0], d[1], doff);
}

static void check_gather(bool quick) {
  const size_t sizes[] = {0, 1, 7, 15, 16, 17, 100, 4097, 65536 + 5, (1u << 20) + 3, (8u << 20) + 1,
                          (33u << 20) + 7};
  struct Off { size_t s, d; };
  const Off offs[] = {{0, 0}, {3, 3}, {1, 6}, {8, 4}, {0, 12}};
  int i = 0;
  for (size_t bytes : sizes) {
    if (quick && bytes > (1u << 20) + 3) continue;
    for (const Off &o : offs) {
      if (bytes > (1u << 20) + 3 && !((o.s == 0 && o.d == 0) || (o.s == 1 && o.d == 6))) continue;
      for (int shape = AG; shape <= BCAST_INPLACE; shape++) {
        for (int root = 0; root < 2; root++) {
          if (root && shape != BCAST && shape != BCAST_INPLACE) continue;
          int blocks = (i++ % 3 == 2) ? 3 : 0;
          gather_case(shape, root, bytes, o.s, o.d, blocks);
        }
      }
    }
  }
  // Bad arguments are refused without launching.
  Scratch x = make_scratch();
  zcc_dev_gather_t a;
  gather_args(&a, 0, 64, 0);
  a.flags[0] = x.flags[0];
  a.flags[1] = x.flags[1];
  a.abort_flag = x.abort_flag;
  zcc_dev_gather_t b = a;
  b.nranks = 9;
  result(zcc_dev_gather(&b, P.s[0]) != 0, "gather accepts nranks 9");
  b = a;
  b.src[1] = P.in[1];
  result(zcc_dev_gather(&b, P.s[0]) != 0, "gather accepts a source without a destination");
  b = a;
  b.src[0] = P.out[0];
  b.dst[0] = P.out[0] + 8;
  result(zcc_dev_gather(&b, P.s[0]) != 0, "gather accepts a partially overlapping source and destination");
  b = a;
  b.max_blocks = ZCC_DEV_MAX_BLOCKS + 1;
  result(zcc_dev_gather(&b, P.s[0]) != 0, "gather accepts max_blocks above ZCC_DEV_MAX_BLOCKS");
  free_scratch(x);
}

// Reduce's shape: the root runs the one-shot kernel, the other rank is
// passive (barriers only, no output). Out of place (also with the root's
// output at an offset that changes its head, not the grid) and in place
// (passive = 2: the root's per-round barriers, several rounds at 16 MiB).
static void check_passive(bool quick) {
  struct Case { zccDataType_t type; zccRedOp_t op; };
  const Case cases[] = {{zccFloat32, zccSum}, {zccBfloat16, zccAvg}, {zccInt32, zccMax}, {zccUint8, zccProd}};
  const size_t sizes[] = {4, 1000, 65536 + 48, (1u << 20) + 6, (4u << 20) + 4, 16u << 20};
  std::vector<unsigned char> h[2], ref, got, pin;
  for (const Case &c : cases) {
    size_t es = zcc_type_size(c.type);
    for (size_t bytes0 : sizes) {
      if (quick && bytes0 > (4u << 20) + 4) continue;
      size_t n = bytes0 / es, bytes = n * es;
      if (n == 0) continue;
      for (int root = 0; root < 2; root++) {
        for (int mode = 0; mode < 3; mode++) { // out of place, out of place at +4, in place
          for (int g = 0; g < 2; g++) {
            h[g].resize(bytes);
            fill_random(h[g].data(), n, c.type, c.op == zccMax || c.op == zccMin);
          }
          char *in[2] = {P.in[0], P.in[1]};
          char *out[2] = {P.out[0], P.out[1]};
          if (mode == 1) out[root] += 4;
          if (mode == 2) out[root] = in[root];
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            CK(cudaMemcpyAsync(in[g], h[g].data(), bytes, cudaMemcpyHostToDevice, P.s[g]));
            CK(cudaMemsetAsync(P.out[g], kPoison, bytes + 256, P.s[g]));
          }
          zcc_dev_allreduce_t args[2];
          make_args(args, in, out, n, c.type, c.op, 0);
          const int pr = 1 - root;
          for (int r = 0; r < 2; r++) args[pr].outputs[r] = nullptr;
          args[pr].passive = mode == 2 ? 2 : 1;
          int b0 = zcc_dev_allreduce_blocks(&args[0], 0), b1 = zcc_dev_allreduce_blocks(&args[1], 0);
          launch_zcc(args, ONESHOT);
          sync_pair();
          ref.resize(bytes);
          got.resize(bytes);
          host_allreduce(ref.data(), h[0].data(), h[1].data(), n, c.type, c.op);
          CK(cudaMemcpy(got.data(), out[root], bytes, cudaMemcpyDeviceToHost));
          long long d = first_diff(got.data(), ref.data(), n, c.type);
          // The passive rank's input is unchanged, its output area untouched.
          pin.resize(bytes + 256);
          CK(cudaMemcpy(pin.data(), in[pr], bytes, cudaMemcpyDeviceToHost));
          bool in_ok = memcmp(pin.data(), h[pr].data(), bytes) == 0;
          CK(cudaMemcpy(pin.data(), P.out[pr], bytes + 256, cudaMemcpyDeviceToHost));
          bool out_ok = true;
          for (size_t j = 0; j < bytes + 256; j++) out_ok &= pin[j] == kPoison;
          bool guard_ok = true;
          if (mode != 2) {
            CK(cudaMemcpy(pin.data(), out[root] + bytes, 64, cudaMemcpyDeviceToHost));
            for (int j = 0; j < 64; j++) guard_ok &= pin[j] == kPoison;
          }
          result(d < 0 && in_ok && out_ok && guard_ok && b0 == b1 && b0 > 0,
                 "passive one-shot %s %s %zu B root %d %s: root diff %lld, passive input %s, passive output "
                 "%s, root guards %s, blocks %d / %d",
                 zcc_type_name(c.type), zcc_op_name(c.op), bytes, root,
                 mode == 0 ? "out of place" : mode == 1 ? "out of place at +4" : "in place", d,
                 in_ok ? "kept" : "changed", out_ok ? "untouched" : "written", guard_ok ? "ok" : "written", b0,
                 b1);
        }
      }
    }
  }
  Scratch x = make_scratch();
  zcc_dev_allreduce_t args[2];
  char *in[2] = {P.in[0], P.in[1]}, *out[2] = {P.out[0], P.out[1]};
  make_args(args, in, out, 16, zccFloat32, zccSum, 0);
  zcc_dev_allreduce_t bad = args[0];
  bad.flags[0] = x.flags[0];
  bad.flags[1] = x.flags[1];
  bad.abort_flag = x.abort_flag;
  bad.passive = 1;
  result(zcc_dev_allreduce_twoshot(&bad, P.s[0]) != 0, "twoshot accepts passive");
  bad.passive = 3;
  result(zcc_dev_allreduce_oneshot(&bad, P.s[0]) != 0, "oneshot accepts passive 3");
  bad.passive = 0;
  bad.outputs[0] = nullptr;
  result(zcc_dev_allreduce_oneshot(&bad, P.s[0]) != 0, "oneshot accepts an active rank without output");
  free_scratch(x);
}

// Point-to-point: a message from rank `from` to 1 - from, read at
// P.in[from] + soff and written to P.out[1 - from] + roff.
struct P2pMsg {
  int from;
  size_t bytes, soff, roff;
};
struct P2pPlan {
  std::vector<P2pMsg> msgs;             // in order: the n-th of a direction pairs with its n-th
  std::vector<std::vector<int>> ln[2]; // per rank: its launches, each a list of message indices
};

// Places the messages with padding and odd offsets; returns the bytes used per rank (in, out).
static void p2p_layout(P2pPlan &pl, size_t used_in[2], size_t used_out[2]) {
  used_in[0] = used_in[1] = used_out[0] = used_out[1] = 0;
  for (size_t i = 0; i < pl.msgs.size(); i++) {
    P2pMsg &m = pl.msgs[i];
    m.soff = used_in[m.from] + (i * 3) % 16;
    used_in[m.from] = m.soff + m.bytes + 32;
    m.roff = used_out[1 - m.from] + (i * 5 + 1) % 16;
    used_out[1 - m.from] = m.roff + m.bytes + kGuard;
  }
}

// One launch list of rank g: its sends and receives in order, randomly
// interleaved, cut into `cuts` + 1 launches.
static void p2p_random_launches(P2pPlan &pl, int g, int cuts) {
  std::vector<int> s, r, seq;
  for (size_t i = 0; i < pl.msgs.size(); i++) (pl.msgs[i].from == g ? s : r).push_back((int)i);
  size_t a = 0, b = 0;
  while (a < s.size() || b < r.size()) {
    bool take_s = b == r.size() || (a < s.size() && (rnd() & 1));
    seq.push_back(take_s ? s[a++] : r[b++]);
  }
  pl.ln[g].assign(1, {});
  for (size_t i = 0; i < seq.size(); i++) {
    if (i && cuts > 0 && rnd() % (seq.size() / (cuts + 1) + 1) == 0) {
      pl.ln[g].push_back({});
      cuts--;
    }
    pl.ln[g].back().push_back(seq[i]);
  }
}

static void p2p_launch_plan(const P2pPlan &pl) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    for (const std::vector<int> &l : pl.ln[g]) {
      zcc_dev_p2p_t a;
      p2p_args(&a, g);
      for (int i : l) {
        const P2pMsg &m = pl.msgs[i];
        if (m.from == g) p2p_add(&a, P.in[g] + m.soff, m.bytes, 1 - g, 1);
        else p2p_add(&a, P.out[g] + m.roff, m.bytes, m.from, 0);
      }
      ZK(zcc_dev_p2p(&a, P.s[g]));
    }
  }
  CK(cudaSetDevice(0));
}

static void p2p_run(P2pPlan &pl, const char *name) {
  size_t used_in[2], used_out[2];
  p2p_layout(pl, used_in, used_out);
  std::vector<unsigned char> hin[2], want[2], got;
  for (int g = 0; g < 2; g++) {
    hin[g].resize(used_in[g] + 1);
    fill_bytes(hin[g].data(), hin[g].size());
    want[g].assign(used_out[g] + 1, kPoison);
  }
  for (const P2pMsg &m : pl.msgs)
    if (m.bytes) memcpy(want[1 - m.from].data() + m.roff, hin[m.from].data() + m.soff, m.bytes);
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMemcpyAsync(P.in[g], hin[g].data(), hin[g].size(), cudaMemcpyHostToDevice, P.s[g]));
    CK(cudaMemsetAsync(P.out[g], kPoison, want[g].size(), P.s[g]));
  }
  p2p_launch_plan(pl);
  sync_pair();
  long long d[2], di[2];
  for (int g = 0; g < 2; g++) {
    got.resize(want[g].size());
    CK(cudaMemcpy(got.data(), P.out[g], got.size(), cudaMemcpyDeviceToHost));
    d[g] = byte_diff(got.data(), want[g].data(), got.size());
    got.resize(hin[g].size());
    CK(cudaMemcpy(got.data(), P.in[g], got.size(), cudaMemcpyDeviceToHost));
    di[g] = byte_diff(got.data(), hin[g].data(), got.size());
  }
  std::string sizes;
  for (const P2pMsg &m : pl.msgs) sizes += (m.from ? " <" : " >") + std::to_string(m.bytes);
  std::string cut = " launches " + std::to_string(pl.ln[0].size()) + "/" + std::to_string(pl.ln[1].size());
  result(d[0] < 0 && d[1] < 0 && di[0] < 0 && di[1] < 0,
         "p2p %s (%s;%s): receive areas first wrong byte gpu0 %lld gpu1 %lld, send buffers changed at %lld / %lld",
         name, sizes.c_str(), cut.c_str(), d[0], d[1], di[0], di[1]);
}

// Each rank's channel counters agree with the peer's (every piece sent was
// received): SENT == peer's READY == peer's TAKEN == own FREE.
static void check_p2p_counters(const char *when) {
  std::vector<uint32_t> f[2];
  for (int g = 0; g < 2; g++) {
    f[g].resize(ZCC_DEV_P2P_FLAG_BYTES / 4);
    CK(cudaMemcpy(f[g].data(), P.p2p[g], ZCC_DEV_P2P_FLAG_BYTES, cudaMemcpyDeviceToHost));
  }
  int bad = 0;
  uint32_t total = 0;
  for (int s = 0; s < 2; s++) {
    for (int b = 0; b < ZCC_DEV_P2P_BLOCKS; b++) {
      const uint32_t *sl = &f[s][((1 - s) * ZCC_DEV_P2P_BLOCKS + b) * 16];
      const uint32_t *rl = &f[1 - s][(s * ZCC_DEV_P2P_BLOCKS + b) * 16];
      // words: 0 READY, 4 SENT, 8 FREE, 12 TAKEN
      if (!(sl[4] == rl[0] && rl[0] == rl[12] && rl[12] == sl[8])) {
        bad++;
        printf("  p2p counters %d->%d channel %d: sent %u ready %u taken %u free %u\n", s, 1 - s, b, sl[4], rl[0],
               rl[12], sl[8]);
      }
      total += sl[4];
    }
  }
  result(bad == 0 && total > 0, "p2p counters %s: %d channels out of step (%u pieces in all)", when, bad, total);
}

static void check_p2p(bool quick) {
  const size_t K = 1024;
  // Both directions in one launch per rank, several ops each way.
  {
    P2pPlan pl;
    const size_t s0[] = {0, 1, 7, 256 * K, (5u << 20) + 3, 33 * K + 1, 100000, 16, 256 * K + 1, 2u << 20};
    const size_t s1[] = {7, 0, 2u << 20, 1, 256 * K, 16, (5u << 20) + 3, 100000};
    for (size_t b : s0) pl.msgs.push_back({0, b, 0, 0});
    for (size_t b : s1) pl.msgs.push_back({1, b, 0, 0});
    p2p_random_launches(pl, 0, 0);
    p2p_random_launches(pl, 1, 0);
    p2p_run(pl, "both ways, one launch each");
  }
  // Single ops of each size, both ways at once.
  for (size_t b : {(size_t)0, (size_t)1, (size_t)7, 256 * K, (5u << 20) + (size_t)3}) {
    P2pPlan pl;
    pl.msgs.push_back({0, b, 0, 0});
    pl.msgs.push_back({1, b, 0, 0});
    p2p_random_launches(pl, 0, 0);
    p2p_random_launches(pl, 1, 0);
    p2p_run(pl, "one op each way");
  }
  // One way only (the other rank receives, sends nothing).
  {
    P2pPlan pl;
    pl.msgs.push_back({1, (3u << 20) + 11, 0, 0});
    pl.msgs.push_back({1, 5, 0, 0});
    p2p_random_launches(pl, 0, 0);
    p2p_random_launches(pl, 1, 0);
    p2p_run(pl, "one way");
  }
  // Order across launches: rank 0 sends three messages in one launch, rank 1
  // receives them in three (and sends one back in its first).
  {
    P2pPlan pl;
    pl.msgs = {{0, (5u << 20) + 3, 0, 0}, {0, 1, 0, 0}, {0, 700 * K, 0, 0}, {1, 300 * K, 0, 0}};
    pl.ln[0] = {{0, 3, 1, 2}};
    pl.ln[1] = {{0, 3}, {1}, {2}};
    p2p_run(pl, "across launches");
  }
  // Random messages, interleavings and launch cuts (one rank cuts: the
  // other's single launch serves every cut).
  const size_t pick[] = {0, 1, 7, 16, 4095, 32 * K, 32 * K + 1, 100000, 256 * K, 256 * K + 16, (1u << 20) + 3,
                         (3u << 20) + 5};
  for (int it = 0; it < (quick ? 6 : 25); it++) {
    P2pPlan pl;
    for (int dir = 0; dir < 2; dir++) {
      int nm = 1 + (int)(rnd() % 10);
      for (int i = 0; i < nm; i++) pl.msgs.push_back({dir, pick[rnd() % (sizeof pick / sizeof pick[0])], 0, 0});
    }
    int cutter = (int)(rnd() % 3) - 1; // -1: no one
    for (int g = 0; g < 2; g++) p2p_random_launches(pl, g, g == cutter ? 1 + (int)(rnd() % 3) : 0);
    p2p_run(pl, "random");
  }
  check_p2p_counters("after the p2p checks");
  // Bad arguments are refused without launching.
  zcc_dev_p2p_t a;
  p2p_args(&a, 0);
  p2p_add(&a, P.out[0], 16, 0, 1);
  result(zcc_dev_p2p(&a, P.s[0]) != 0, "p2p accepts a send to self");
  p2p_args(&a, 0);
  p2p_add(&a, P.out[0], 16, 2, 1);
  result(zcc_dev_p2p(&a, P.s[0]) != 0, "p2p accepts peer 2 of 2");
  p2p_args(&a, 0);
  p2p_add(&a, nullptr, 16, 1, 0);
  result(zcc_dev_p2p(&a, P.s[0]) != 0, "p2p accepts a NULL buffer");
  p2p_args(&a, 0);
  a.nops = ZCC_DEV_P2P_MAX_OPS + 1;
  result(zcc_dev_p2p(&a, P.s[0]) != 0, "p2p accepts more than ZCC_DEV_P2P_MAX_OPS ops");
  p2p_args(&a, 0);
  p2p_add(&a, nullptr, 0, 1, 1);
  result(zcc_dev_p2p(&a, P.s[0]) == 0, "p2p refuses a zero-byte op without a buffer");
}

// Mixed kernels on one flag area, back to back with no host sync: barrier,
// gather, one-shot, two-shot, passive one-shot, LL, p2p, with grids of 1 to
// 64 blocks; every result checked at the end, then the flag lines compared.
static void check_interleave(bool quick) {
  enum { BAR, GATHER, ONE, TWO, PASSIVE, LLK, P2P, NKINDS };
  struct Step {
    int kind, blocks, root;
    size_t n; // float32 elements (gather, p2p: bytes)
    size_t in_off, out_off;
  };
  const int kSteps = quick ? 40 : 120;
  const size_t counts[] = {0, 1, 13, 1000, 4096 + 3, 65536 + 5, 300000};
  const int blocks[] = {0, 1, 5, 64};
  std::vector<Step> steps;
  std::vector<unsigned char> hin[2];
  size_t in_used = 0, out_used = 0;
  for (int i = 0; i < kSteps; i++) {
    Step st;
    st.kind = (int)(rnd() % NKINDS);
    st.blocks = blocks[rnd() % 4];
    st.root = (int)(rnd() % 2);
    st.n = counts[rnd() % (sizeof counts / sizeof counts[0])];
    if (st.kind == LLK && st.n * 4 > ZCC_DEV_LL_MAX_BYTES) st.n = 1000;
    size_t bytes = st.kind == GATHER || st.kind == P2P ? st.n : st.n * 4;
    st.in_off = in_used + 4 * (size_t)(i % 4);
    st.out_off = out_used + 4 * (size_t)(i % 3);
    in_used = (st.in_off + bytes + 255) & ~(size_t)255;
    out_used = (st.out_off + (st.kind == GATHER ? 2 : 1) * bytes + kGuard + 255) & ~(size_t)255;
    steps.push_back(st);
  }
  if (out_used > P.cap || in_used > P.cap) {
    result(false, "interleave: buffers too small");
    return;
  }
  for (int g = 0; g < 2; g++) {
    hin[g].resize(in_used);
    fill_random(hin[g].data(), in_used / 4, zccFloat32, false);
    CK(cudaSetDevice(g));
    CK(cudaMemcpyAsync(P.in[g], hin[g].data(), in_used, cudaMemcpyHostToDevice, P.s[g]));
    CK(cudaMemsetAsync(P.out[g], kPoison, out_used, P.s[g]));
  }
  CK(cudaSetDevice(0));
  for (const Step &st : steps) {
    char *in[2] = {P.in[0] + st.in_off, P.in[1] + st.in_off};
    char *out[2] = {P.out[0] + st.out_off, P.out[1] + st.out_off};
    zcc_dev_allreduce_t args[2];
    make_args(args, in, out, st.n, zccFloat32, zccSum, st.blocks);
    switch (st.kind) {
    case BAR: launch_barrier(); break;
    case GATHER: {
      zcc_dev_gather_t a[2];
      for (int g = 0; g < 2; g++) {
        gather_args(&a[g], g, st.n, st.blocks);
        for (int r = 0; r < 2; r++) {
          a[g].src[r] = in[r];
          a[g].dst[r] = out[g] + r * st.n;
        }
      }
      launch_gather(a);
      break;
    }
    case ONE: launch_zcc(args, ONESHOT); break;
    case TWO: launch_zcc(args, TWOSHOT); break;
    case LLK: launch_zcc(args, LL); break;
    case PASSIVE: {
      const int pr = 1 - st.root;
      args[pr].outputs[0] = args[pr].outputs[1] = nullptr;
      args[pr].passive = 1;
      launch_zcc(args, ONESHOT);
      break;
    }
    case P2P: {
      for (int g = 0; g < 2; g++) {
        zcc_dev_p2p_t a;
        p2p_args(&a, g);
        p2p_add(&a, in[g], st.n, 1 - g, 1);
        p2p_add(&a, out[g], st.n, 1 - g, 0);
        CK(cudaSetDevice(g));
        ZK(zcc_dev_p2p(&a, P.s[g]));
      }
      CK(cudaSetDevice(0));
      break;
    }
    }
  }
  sync_pair();
  int bad = 0;
  std::vector<unsigned char> got, ref;
  for (size_t i = 0; i < steps.size(); i++) {
    const Step &st = steps[i];
    const bool bytewise = st.kind == GATHER || st.kind == P2P;
    const size_t bytes = bytewise ? st.n : st.n * 4;
    const size_t olen = st.kind == GATHER ? 2 * bytes : bytes;
    for (int g = 0; g < 2; g++) {
      got.resize(olen + kGuard);
      CK(cudaMemcpy(got.data(), P.out[g] + st.out_off, olen + kGuard, cudaMemcpyDeviceToHost));
      ref.assign(olen + kGuard, kPoison);
      const unsigned char *i0 = hin[0].data() + st.in_off, *i1 = hin[1].data() + st.in_off;
      bool want_out = st.kind == ONE || st.kind == TWO || st.kind == LLK || (st.kind == PASSIVE && g == st.root);
      if (want_out && st.n) host_allreduce(ref.data(), i0, i1, st.n, zccFloat32, zccSum);
      if (st.kind == GATHER && bytes) {
        memcpy(ref.data(), i0, bytes);
        memcpy(ref.data() + bytes, i1, bytes);
      }
      if (st.kind == P2P && bytes) memcpy(ref.data(), g ? i0 : i1, bytes);
      long long d = bytewise || !want_out ? byte_diff(got.data(), ref.data(), olen + kGuard)
                                          : first_diff(got.data(), ref.data(), st.n, zccFloat32);
      if (d < 0 && !bytewise && want_out) d = byte_diff(got.data() + bytes, ref.data() + bytes, kGuard);
      if (d >= 0) {
        bad++;
        printf("  interleave step %zu (kind %d, n %zu, blocks %d, root %d): gpu%d differs at %lld\n", i, st.kind,
               st.n, st.blocks, st.root, g, d);
      }
    }
  }
  result(bad == 0, "interleave: %d of %d mixed launches wrong", bad, kSteps);
  // Every block's counters (barrier, LL) equal on both GPUs.
  std::vector<uint32_t> f[2];
  for (int g = 0; g < 2; g++) {
    f[g].resize(ZCC_DEV_FLAGS_BYTES / 4);
    CK(cudaMemcpy(f[g].data(), P.flags[g], ZCC_DEV_FLAGS_BYTES, cudaMemcpyDeviceToHost));
  }
  int off = 0;
  for (int b = 0; b < ZCC_DEV_MAX_BLOCKS; b++)
    for (int w : {8, 9})
      if (f[0][b * 16 + w] != f[1][b * 16 + w]) off++;
  result(off == 0, "interleave: %d flag-line counters differ between the GPUs (block 0: %u / %u)", off, f[0][8],
         f[1][8]);
  check_p2p_counters("after the interleaving");
}

// A few hundred replays of one captured two-GPU launch (gather, or p2p
// both ways) with new inputs copied in before each replay, every 30th
// checked.
static void check_graph_gather_p2p(bool p2p) {
  const int kReplays = 300;
  const size_t bytes = (1u << 20) + 3, soff = 3, doff = 5;
  const size_t bytes_back = 300 * 1024 + 7; // p2p: 1 -> 0
  zcc_dev_gather_t ga[2];
  P2pPlan pl;
  if (p2p) {
    pl.msgs = {{0, bytes, 0, 0}, {1, bytes_back, 0, 0}, {0, 0, 0, 0}, {0, 7, 0, 0}};
    pl.ln[0] = {{0, 1, 2, 3}};
    pl.ln[1] = {{1, 0, 2, 3}};
  } else {
    for (int g = 0; g < 2; g++) {
      gather_args(&ga[g], g, bytes, 0);
      for (int r = 0; r < 2; r++) {
        ga[g].src[r] = P.in[r] + soff;
        ga[g].dst[r] = P.out[g] + doff + r * bytes;
      }
    }
  }
  size_t used_in[2] = {soff + bytes, soff + bytes}, used_out[2] = {doff + 2 * bytes, doff + 2 * bytes};
  if (p2p) p2p_layout(pl, used_in, used_out);
  cudaGraphExec_t exec = capture([&] {
    if (p2p) p2p_launch_plan(pl);
    else launch_gather(ga);
  });
  cudaEvent_t copied, done;
  CK(cudaSetDevice(1));
  CK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  CK(cudaSetDevice(0));
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  std::vector<unsigned char> hin[2], want, got;
  int bad = 0, checked = 0;
  for (int i = 0; i < kReplays; i++) {
    for (int g = 1; g >= 0; g--) {
      hin[g].resize(used_in[g]);
      fill_bytes(hin[g].data(), used_in[g]);
      CK(cudaSetDevice(g));
      CK(cudaMemcpyAsync(P.in[g], hin[g].data(), used_in[g], cudaMemcpyHostToDevice, P.s[g]));
      CK(cudaMemsetAsync(P.out[g], kPoison, used_out[g] + kGuard, P.s[g]));
      if (g == 1) CK(cudaEventRecord(copied, P.s[1]));
    }
    CK(cudaStreamWaitEvent(P.s[0], copied, 0));
    CK(cudaGraphLaunch(exec, P.s[0]));
    CK(cudaEventRecord(done, P.s[0]));
    CK(cudaSetDevice(1));
    CK(cudaStreamWaitEvent(P.s[1], done, 0));
    CK(cudaSetDevice(0));
    if (i % 30 == 29) {
      sync_pair();
      checked++;
      for (int g = 0; g < 2; g++) {
        want.assign(used_out[g] + kGuard, kPoison);
        if (p2p) {
          for (const P2pMsg &m : pl.msgs)
            if (m.bytes && m.from != g) memcpy(want.data() + m.roff, hin[m.from].data() + m.soff, m.bytes);
        } else {
          for (int r = 0; r < 2; r++) memcpy(want.data() + doff + r * bytes, hin[r].data() + soff, bytes);
        }
        got.resize(want.size());
        CK(cudaMemcpy(got.data(), P.out[g], got.size(), cudaMemcpyDeviceToHost));
        long long d = byte_diff(got.data(), want.data(), got.size());
        if (d >= 0) {
          bad++;
          printf("  %s replay %d: gpu%d first wrong byte %lld\n", p2p ? "p2p" : "gather", i, g, d);
        }
      }
    }
  }
  sync_pair();
  result(bad == 0 && checked == kReplays / 30, "graph replays %s: %d wrong in %d checked replays",
         p2p ? "p2p both ways" : "gather (allgather)", bad, checked);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaEventDestroy(done));
  CK(cudaSetDevice(1));
  CK(cudaEventDestroy(copied));
  CK(cudaSetDevice(0));
}

// ---- timing ----

__global__ void fill_kernel(float *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 0x2c1b3c6dU;
    x ^= x >> 12;
    p[i] = (float)(x & 0xffff) / 65536.0f - 0.5f;
  }
}

static ncclComm_t g_comms[2];

static void launch_nccl(size_t n) {
  NK(ncclGroupStart());
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    NK(ncclAllReduce(P.in[g], P.out[g], n, ncclFloat, ncclSum, g_comms[g], P.s[g]));
  }
  NK(ncclGroupEnd());
  CK(cudaSetDevice(0));
}

// Microseconds per operation: median over trials of (events around iters
// back-to-back operations, slower GPU) / iters.
template <typename F> static double time_eager(F op, int iters, int trials) {
  cudaEvent_t ev[2][2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaEventCreate(&ev[g][0]));
    CK(cudaEventCreate(&ev[g][1]));
  }
  for (int w = 0; w < 3; w++) op();
  sync_pair();
  std::vector<double> t;
  for (int k = 0; k < trials; k++) {
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaEventRecord(ev[g][0], P.s[g]));
    }
    for (int i = 0; i < iters; i++) op();
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaEventRecord(ev[g][1], P.s[g]));
    }
    sync_pair();
    double worst = 0;
    for (int g = 0; g < 2; g++) {
      float ms;
      CK(cudaEventElapsedTime(&ms, ev[g][0], ev[g][1]));
      worst = std::max(worst, (double)ms);
    }
    t.push_back(worst * 1000.0 / iters);
  }
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaEventDestroy(ev[g][0]));
    CK(cudaEventDestroy(ev[g][1]));
  }
  CK(cudaSetDevice(0));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Graph of iters operations, replayed: median over trials of one replay / iters.
template <typename F> static double time_graph(F op, int iters, int trials) {
  cudaGraphExec_t exec = capture([&] {
    for (int i = 0; i < iters; i++) op();
  });
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(exec, P.s[0]));
  CK(cudaStreamSynchronize(P.s[0]));
  std::vector<double> t;
  for (int k = 0; k < trials; k++) {
    CK(cudaEventRecord(e0, P.s[0]));
    CK(cudaGraphLaunch(exec, P.s[0]));
    CK(cudaEventRecord(e1, P.s[0]));
    CK(cudaStreamSynchronize(P.s[0]));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1000.0 / iters);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static void time_copy_ceiling() {
  size_t bytes = 1u << 30;
  cudaEvent_t e0, e1, f0, f1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaSetDevice(1));
  CK(cudaEventCreate(&f0));
  CK(cudaEventCreate(&f1));
  CK(cudaSetDevice(0));
  for (int bidir = 0; bidir < 2; bidir++) {
    std::vector<double> t;
    for (int k = 0; k < 6; k++) {
      CK(cudaSetDevice(0));
      CK(cudaEventRecord(e0, P.s[0]));
      CK(cudaMemcpyPeerAsync(P.out[1], 1, P.in[0], 0, bytes, P.s[0]));
      CK(cudaEventRecord(e1, P.s[0]));
      if (bidir) {
        CK(cudaSetDevice(1));
        CK(cudaEventRecord(f0, P.s[1]));
        CK(cudaMemcpyPeerAsync(P.out[0], 0, P.in[1], 1, bytes, P.s[1]));
        CK(cudaEventRecord(f1, P.s[1]));
      }
      sync_pair();
      float ms, ms1 = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (bidir) CK(cudaEventElapsedTime(&ms1, f0, f1));
      if (k) t.push_back(std::max(ms, ms1));
    }
    std::sort(t.begin(), t.end());
    double ms = t[t.size() / 2];
    printf("copy engine GPU0->GPU1 1 GiB%s: %.3f ms, %.1f GB/s per direction\n",
           bidir ? " (both directions at once)" : "", ms, bytes / (ms * 1e6));
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaSetDevice(1));
  CK(cudaEventDestroy(f0));
  CK(cudaEventDestroy(f1));
  CK(cudaSetDevice(0));
}

static void run_timing(bool quick, int blocks_override) {
  NK(ncclCommInitAll(g_comms, 2, nullptr));
  time_copy_ceiling();
  std::vector<size_t> sizes;
  const size_t kSizes[] = {8, 64, 512, 4096, 16384, 65536, 262144, 1u << 20, 2u << 20, 4u << 20, 8u << 20,
                           16u << 20, 32u << 20, 64u << 20, 128u << 20, 256u << 20, 512u << 20, 1u << 30};
  for (size_t b : kSizes)
    if (b <= (quick ? (64u << 20) : P.cap)) sizes.push_back(b);
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    size_t n = P.cap / 4;
    fill_kernel<<<1024, 256, 0, P.s[g]>>>((float *)P.in[g], n, 1234u + g);
    CK(cudaGetLastError());
  }
  sync_pair();
  printf("\nallreduce float32 sum, 2 GPUs; time in us (median), busbw in GB/s (= algbw for 2 ranks)\n");
  printf("%10s | %8s %8s %8s %8s | %8s %8s %8s %8s | %7s %7s | %5s %5s\n", "bytes", "nccl", "1shot", "2shot",
         "ll", "ncclG", "1shotG", "2shotG", "llG", "bwNCCL", "bwZCC", "eager", "graph");
  for (size_t bytes : sizes) {
    size_t n = bytes / 4;
    int iters = bytes <= (1u << 20) ? 200 : bytes <= (32u << 20) ? 50 : 10;
    int giters = bytes <= (1u << 20) ? 100 : bytes <= (32u << 20) ? 20 : 5;
    int trials = bytes <= (32u << 20) ? 9 : 5;
    zcc_dev_allreduce_t args[2];
    char *in[2] = {P.in[0], P.in[1]}, *out[2] = {P.out[0], P.out[1]};
    make_args(args, in, out, n, zccFloat32, zccSum, blocks_override);
    const bool ll = bytes <= ZCC_DEV_LL_MAX_BYTES;
    double t[2][4];
    t[0][NCCL] = time_eager([&] { launch_nccl(n); }, iters, trials);
    t[1][NCCL] = time_graph([&] { launch_nccl(n); }, giters, trials);
    double best[2] = {1e30, 1e30};
    for (int algo : {ONESHOT, TWOSHOT, LL}) {
      if (algo == LL && !ll) {
        t[0][LL] = t[1][LL] = 0;
        continue;
      }
      t[0][algo] = time_eager([&] { launch_zcc(args, algo); }, iters, trials);
      t[1][algo] = time_graph([&] { launch_zcc(args, algo); }, giters, trials);
      best[0] = std::min(best[0], t[0][algo]);
      best[1] = std::min(best[1], t[1][algo]);
    }
    char lle[16] = "-", llg[16] = "-";
    if (ll) {
      snprintf(lle, sizeof lle, "%.2f", t[0][LL]);
      snprintf(llg, sizeof llg, "%.2f", t[1][LL]);
    }
    printf("%10zu | %8.2f %8.2f %8.2f %8s | %8.2f %8.2f %8.2f %8s | %7.1f %7.1f | %5.2f %5.2f\n", bytes,
           t[0][NCCL], t[0][ONESHOT], t[0][TWOSHOT], lle, t[1][NCCL], t[1][ONESHOT], t[1][TWOSHOT], llg,
           bytes / (t[0][NCCL] * 1e3), bytes / (best[0] * 1e3), best[0] / t[0][NCCL], best[1] / t[1][NCCL]);
    fflush(stdout);
  }
  printf("(bwNCCL, bwZCC: busbw of NCCL and of the best zcc kernel, eager; eager, graph: best zcc time / NCCL time,\n"
         " < 1 means zcc is faster)\n");
  // Block-count sweep at a few sizes (eager), for the notes.
  printf("\nblocks sweep, eager us: size | blocks: one-shot two-shot\n");
  for (size_t bytes : {(size_t)1 << 20, (size_t)32 << 20, (size_t)256 << 20}) {
    if (bytes > P.cap || (quick && bytes > (32u << 20))) continue;
    printf("%12zu |", bytes);
    for (int b : {16, 32, 64, 96, 132}) {
      zcc_dev_allreduce_t args[2];
      char *in[2] = {P.in[0], P.in[1]}, *out[2] = {P.out[0], P.out[1]};
      make_args(args, in, out, bytes / 4, zccFloat32, zccSum, b);
      int it = bytes <= (1u << 20) ? 200 : 20;
      printf(" %d: %.1f %.1f |", b, time_eager([&] { launch_zcc(args, ONESHOT); }, it, 5),
             time_eager([&] { launch_zcc(args, TWOSHOT); }, it, 5));
      fflush(stdout);
    }
    printf("\n");
  }
  for (int g = 0; g < 2; g++) NK(ncclCommDestroy(g_comms[g]));
}

int main(int argc, char **argv) {
  bool check = false, timing = false, quick = false;
  int blocks = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--check")) check = true;
    else if (!strcmp(argv[i], "--time")) timing = true;
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--blocks") && i + 1 < argc) blocks = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--check] [--time] [--quick] [--blocks N]\n", argv[0]);
      return 2;
    }
  }
  if (!check && !timing) check = timing = true;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    printf("0 passed, 0 failed, 1 skipped\n");
    return 77; /* ctest's SKIP_RETURN_CODE: reported as skipped, never as passed */
  }
  int rt, drv, nv;
  CK(cudaRuntimeGetVersion(&rt));
  CK(cudaDriverGetVersion(&drv));
  NK(ncclGetVersion(&nv));
  printf("cuda runtime %d, driver api %d, nccl %d, %d device(s)\n", rt, drv, nv, ndev);
  for (int g = 0; g < ndev; g++) {
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, g));
    printf("  gpu %d: %s, %d SMs, cc %d.%d\n", g, pr.name, pr.multiProcessorCount, pr.major, pr.minor);
  }
  if (check) {
    check_reduce(quick);
    printf("reduce checks: %d passed, %d failed\n", g_passed, g_failed);
    fflush(stdout);
  }
  size_t cap = timing && !quick ? (1u << 30) : (256u << 20);
  bool pair = setup_pair(cap);
  if (!pair) printf("skipped: allreduce checks and timings need 2 GPUs with peer access\n");
  if (pair && check) {
    check_allreduce(quick);
    printf("allreduce checks: %d passed, %d failed so far\n", g_passed, g_failed);
    fflush(stdout);
    check_graph_replays(ONESHOT, zccFloat32, zccSum, (1u << 20) + 3, false);
    check_graph_replays(TWOSHOT, zccFloat32, zccSum, (1u << 20) + 3, false);
    check_graph_replays(ONESHOT, zccBfloat16, zccSum, 4099, true);
    check_graph_replays(TWOSHOT, zccBfloat16, zccAvg, (4u << 20) + 1, true);
    check_graph_replays(ONESHOT, zccInt32, zccMax, 6, false);
    check_graph_replays(LL, zccFloat32, zccSum, 16381, false);
    check_graph_replays(LL, zccBfloat16, zccAvg, 1001, true);
    printf("graph checks: %d passed, %d failed so far\n", g_passed, g_failed);
    fflush(stdout);
    check_barrier();
    check_gather(quick);
    check_passive(quick);
    printf("collective checks (barrier, gather, passive one-shot): %d passed, %d failed so far\n", g_passed,
           g_failed);
    fflush(stdout);
    check_p2p(quick);
    printf("p2p checks: %d passed, %d failed so far\n", g_passed, g_failed);
    fflush(stdout);
    check_interleave(quick);
    check_graph_gather_p2p(false);
    check_graph_gather_p2p(true);
    printf("graph checks (interleaving, gather, p2p): %d passed, %d failed so far\n", g_passed, g_failed);
    fflush(stdout);
  }
  if (pair && timing) run_timing(quick, blocks);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
