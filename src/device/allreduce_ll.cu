// One-shot LL allreduce for small messages (see device.h): data travels with
// its flag, so a launch costs one one-way NVLink latency and no barrier.
//
// Units of 8 data bytes; unit u of sender s lands in line
//   ll[dst] + ((parity * ZCC_DEV_MAX_RANKS + s) * ZD_LL_UNITS + u) * 16
// as {data.lo, seq, data.hi, seq}. Each 8-byte half carries its own copy of
// the flag, so a reader that sees both flags equal to seq has both halves of
// this launch even if the 16-byte store reached it in two pieces. seq is the
// block's LL counter (word ZD_LL_CTR of the block's flag line) plus one; every
// LL launch runs all ZD_LL_BLOCKS blocks, so the counters of all blocks, on
// every rank, stay equal and parity = seq & 1 is the launch's parity.
// Counters start at 0 in zeroed flag areas and LL areas start zeroed, so no
// line ever holds a matching flag before its data is written (after 2^32 LL
// launches a line untouched since could alias; the planner's sizes make that
// a line rewritten every other launch).
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

#define ZD_LL_THREADS 512
#define ZD_LL_BLOCKS 16
#define ZD_LL_UNITS (ZCC_DEV_LL_MAX_BYTES / 8)
#define ZD_LL_CTR 9
#define ZD_FLAG_STRIDE 16

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct LlParams {
  const char *in; // own input
  char *out;      // own output
  char *ll[ZCC_DEV_MAX_RANKS];
  uint32_t *flags; // own flag area
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  size_t bytes;
  int k;
  int rank;
  int avg;
};

ZD_INLINE void st_volatile16(char *p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

ZD_INLINE uint4 ld_volatile16(const char *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// n (<= 8) bytes at p, zero-padded.
ZD_INLINE uint2 ld8(const char *p, size_t n) {
  if (n == 8 && ((uintptr_t)p & 7) == 0) return *(const uint2 *)p;
  union { uint2 v; uint8_t b[8]; } x;
  x.v = make_uint2(0, 0);
  for (size_t i = 0; i < n; i++) x.b[i] = (uint8_t)p[i];
  return x.v;
}

ZD_INLINE void st8(char *p, size_t n, uint2 v) {
  if (n == 8 && ((uintptr_t)p & 7) == 0) {
    *(uint2 *)p = v;
    return;
  }
  union { uint2 v; uint8_t b[8]; } x;
  x.v = v;
  for (size_t i = 0; i < n; i++) p[i] = (char)x.b[i];
}

template <typename T, typename Op> ZD_INLINE uint2 red8(uint2 a, uint2 b) {
  union U { uint2 v; T e[8 / sizeof(T)]; } x, y;
  x.v = a;
  y.v = b;
#pragma unroll
  for (int i = 0; i < (int)(8 / sizeof(T)); i++) x.e[i] = zd_red<T, Op>(x.e[i], y.e[i]);
  return x.v;
}

template <typename T> ZD_INLINE uint2 avg8(uint2 a, int n) {
  union U { uint2 v; T e[8 / sizeof(T)]; } x;
  x.v = a;
#pragma unroll
  for (int i = 0; i < (int)(8 / sizeof(T)); i++) x.e[i] = zd_avg<T>(x.e[i], n);
  return x.v;
}

template <int MAXK> ZD_INLINE char *ll_pick(char *const *arr, int i) {
  char *x = arr[0];
#pragma unroll
  for (int r = 1; r < MAXK; r++)
    if (r == i) x = arr[r];
  return x;
}

template <typename T, typename Op, int MAXK>
ZD_INLINE void oneshot_ll_kernel_body(const LlParams &p) {
  __shared__ uint32_t s_ctr;
  uint32_t *ctr = p.flags + blockIdx.x * ZD_FLAG_STRIDE + ZD_LL_CTR;
  if (threadIdx.x == 0) s_ctr = *ctr;
  __syncthreads();
  const uint32_t seq = s_ctr + 1;
  const size_t parity = seq & 1;
  // At least one unit even for 0 bytes: receiving a peer's line of launch
  // L+1 is what proves that peer has finished launch L.
  const size_t units = p.bytes ? (p.bytes + 7) / 8 : 1;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  char *const mine = ll_pick<MAXK>(p.ll, p.rank);

  // Send: my units into every peer's area.
  for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += nth) {
    size_t n = p.bytes - u * 8 < 8 ? p.bytes - u * 8 : 8;
    uint2 v = ld8(p.in + u * 8, n);
    uint4 line = make_uint4(v.x, seq, v.y, seq);
#pragma unroll
    for (int r = 0; r < MAXK; r++)
      if (r < p.k && r != p.rank)
        st_volatile16(p.ll[r] + ((parity * ZCC_DEV_MAX_RANKS + p.rank) * ZD_LL_UNITS + u) * 16, line);
  }
  // Receive and reduce in rank order. A thread whose wait the abort word
  // ended stores nothing more (the loop's test and the closing barrier stay
  // as they were; with a block-wide vote there 512 B-32 KiB ran 0.05-0.1 us
  // slower, docs/perf/h200x1.md 2026-12-05).
  bool dead = false;
  for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += nth) {
    size_t n = p.bytes - u * 8 < 8 ? p.bytes - u * 8 : 8;
    uint2 own = ld8(p.in + u * 8, n);
    uint2 acc = own;
#pragma unroll
    for (int r = 0; r < MAXK; r++) {
      if (r >= p.k) continue;
      uint2 v = own;
      if (r != p.rank) {
        const char *line = mine + ((parity * ZCC_DEV_MAX_RANKS + r) * ZD_LL_UNITS + u) * 16;
        uint4 x;
        unsigned spins = 0;
        for (;;) {
          x = ld_volatile16(line);
          if (x.y == seq && x.w == seq) break;
          if (p.abort_flag && (++spins & 1023u) == 0 && zd_wait_slow(p.abort_flag, spins)) {
            dead = true;
            break;
          }
        }
        v = make_uint2(x.x, x.z);
      }
      acc = r == 0 ? v : red8<T, Op>(acc, v);
    }
    if (dead) break;
    if (p.avg) acc = avg8<T>(acc, p.avg);
    st8(p.out + u * 8, n, acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) *ctr = seq;
}

template <typename T, typename Op, int MAXK>
__global__ void __launch_bounds__(ZD_LL_THREADS) oneshot_ll_kernel(LlParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  oneshot_ll_kernel_body<T, Op, MAXK>(p);
  zd_stamp_exit(stamp_at);
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_allreduce_oneshot_ll(
    const zcc_dev_allreduce_t *a, struct CUstream_st *stream) {
  if (!a) return cudaErrorInvalidValue;
  size_t elem = zd_type_size(a->type);
  if (elem == 0 || (unsigned)a->op >= (unsigned)zccNumOps) return cudaErrorInvalidValue;
  if (a->nranks < 1 || a->nranks > ZCC_DEV_MAX_RANKS || a->rank < 0 || a->rank >= a->nranks)
    return cudaErrorInvalidValue;
  if (a->count > ZCC_DEV_LL_MAX_BYTES / elem) return cudaErrorInvalidValue;
  LlParams p = {};
  for (int r = 0; r < a->nranks; r++) {
    if (!a->ll[r]) return cudaErrorInvalidValue;
    p.ll[r] = (char *)a->ll[r];
  }
  if (!a->flags[a->rank]) return cudaErrorInvalidValue;
  p.flags = a->flags[a->rank];
  p.bytes = a->count * elem;
  if (p.bytes && (!a->inputs[a->rank] || !a->outputs[a->rank])) return cudaErrorInvalidValue;
  p.in = (const char *)a->inputs[a->rank];
  p.out = (char *)a->outputs[a->rank];
  // Exactly in place works (peers read the LL area); a partial overlap would not.
  uintptr_t o = (uintptr_t)p.out, i = (uintptr_t)p.in;
  if (p.bytes && o != i && o < i + p.bytes && i < o + p.bytes) return cudaErrorInvalidValue;
  p.abort_flag = a->abort_flag;
  p.stamp = a->stamp;
  p.k = a->nranks;
  p.rank = a->rank;
  p.avg = a->op == zccAvg ? a->nranks : 0;
  cudaStream_t s = (cudaStream_t)stream;
  int err = cudaSuccess;
  // count 0 still launches: every LL launch advances every block's counter.
#define ZD_LAUNCH_LL(T, Op)                                                   \
  do {                                                                        \
    if (p.k <= 2) oneshot_ll_kernel<T, Op, 2><<<ZD_LL_BLOCKS, ZD_LL_THREADS, 0, s>>>(p); \
    else oneshot_ll_kernel<T, Op, 8><<<ZD_LL_BLOCKS, ZD_LL_THREADS, 0, s>>>(p); \
  } while (0)
  ZD_DISPATCH(a->type, a->op, ZD_LAUNCH_LL)
#undef ZD_LAUNCH_LL
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_ll(void) {
  int err = cudaSuccess;
  cudaFuncAttributes fa;
#define ZD_LOAD_LL(T, Op)                                                      \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, oneshot_ll_kernel<T, Op, 2>); \
    if (e_ == cudaSuccess) e_ = cudaFuncGetAttributes(&fa, oneshot_ll_kernel<T, Op, 8>); \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
  for (int t = 0; t < zccNumTypes; t++)
    for (int o = 0; o < zccNumOps; o++) {
      if (o == zccAvg) continue;
      ZD_DISPATCH((zccDataType_t)t, (zccRedOp_t)o, ZD_LOAD_LL)
    }
#undef ZD_LOAD_LL
  return err;
}
