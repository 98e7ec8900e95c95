// All-pairs allreduce kernels for up to ZCC_DEV_MAX_RANKS GPUs that address
// each other's memory: one-shot (each GPU reads every input and reduces into
// its own output) and two-shot (rank r reduces slice r of every input and
// writes it into every output).
//
// Synchronisation. Block b of every rank pairs with block b of every peer:
// both ranks derive the same grid and the same chunk partition from the
// arguments, so block b of each rank touches the same chunks. Each rank's
// flag area holds, per block, one 32-bit slot per peer (the last value that
// peer signalled to this block) and the block's own barrier counter. A
// barrier takes the next counter value v, stores v into slot [b][rank] of
// every peer (st.release.sys, after __syncthreads, so the block's earlier
// loads and stores are ordered before it), and waits until its own slots
// [b][peer] reach v (ld.acquire.sys). Values only grow (compared modulo
// 2^32), so a peer already one barrier ahead satisfies a wait too, and no
// slot is ever reset. The counter lives in device memory and advances inside
// the kernel, so the same buffers work for every launch and in graph
// replays; blocks that a small launch leaves idle keep their counters, on
// every rank alike.
//
// A launch: start barrier (every peer has started: its input is ready and
// its output free), the data pass, end barrier (every peer has finished
// reading this rank's input and writing its output). One-shot in place
// (output overlapping the own input, which peers read) reduces a round of
// chunks into registers, passes a barrier, and only then stores that round,
// so in place and out of place differ in their barrier counts: all ranks of
// a launch must agree on which one they run. A passive one-shot rank
// (Reduce's non-roots) runs the barriers alone: start and end, and the
// active ranks' per-round ones when those run in place (passive == 2). The
// grid derives from count alone, so passive ranks launch the same grid. The
// barrier and counter helpers are those of flags.cuh.
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

#define ZD_AR_THREADS 512

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct ArParams {
  const char *in[ZCC_DEV_MAX_RANKS];
  char *out[ZCC_DEV_MAX_RANKS];
  uint32_t *flags[ZCC_DEV_MAX_RANKS];
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  size_t head;   // scalar elements before the chunks
  size_t chunks; // 16-byte chunks after the head
  size_t tail;   // scalar elements after the chunks
  int k;
  int rank;
  int avg;     // 0, or the avg divisor
  int inplace; // one-shot: the output overlaps the own input (passive: the active ranks' do)
  int passive; // one-shot: barriers only
};

template <int MAXK> ZD_INLINE bool ar_barrier(const ArParams &p, uint32_t v) {
  return zd_barrier<MAXK>(p.flags, p.k, p.rank, p.abort_flag, v);
}

template <int MAXK> ZD_INLINE uint32_t ar_counter_load(const ArParams &p) {
  return zd_counter_load<MAXK>(p.flags, p.rank);
}

template <int MAXK> ZD_INLINE void ar_counter_store(const ArParams &p, uint32_t v) {
  zd_counter_store<MAXK>(p.flags, p.rank, v);
}

// Chunks each thread keeps in flight per input.
template <int MAXK> struct ArUnroll { enum { U = MAXK <= 2 ? 4 : 2 }; };

// Reduce chunk c of every input, in rank order, for U chunks c0 + u * stride
// (below limit); the avg step too when asked.
template <typename T, typename Op, int MAXK>
ZD_INLINE void ar_load_reduce(const ArParams &p, const char *const *in, const int *w, size_t c0,
                              size_t stride, size_t limit, uint4 *acc) {
  enum { U = ArUnroll<MAXK>::U };
  uint4 v[MAXK][U];
#pragma unroll
  for (int u = 0; u < U; u++) {
    size_t c = c0 + u * stride;
    if (c < limit) {
#pragma unroll
      for (int r = 0; r < MAXK; r++)
        if (r < p.k) v[r][u] = zd_ld16(in[r] + c * 16, w[r]);
    }
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    acc[u] = v[0][u];
#pragma unroll
    for (int r = 1; r < MAXK; r++)
      if (r < p.k) acc[u] = zd_red_pack<T, Op>(acc[u], v[r][u]);
    if (p.avg) acc[u] = zd_avg_pack<T>(acc[u], p.avg);
  }
}

// The scalar element at byte offset o, reduced over every input in rank order.
template <typename T, typename Op, int MAXK>
ZD_INLINE T ar_scalar(const ArParams &p, size_t o) {
  T s = zd_ld1<T>(p.in[0] + o);
#pragma unroll
  for (int r = 1; r < MAXK; r++)
    if (r < p.k) s = zd_red<T, Op>(s, zd_ld1<T>(p.in[r] + o));
  if (p.avg) s = zd_avg<T>(s, p.avg);
  return s;
}

// Byte offset of this thread's scalar element (head or tail), or -1.
template <typename T> ZD_INLINE long long ar_scalar_offset(const ArParams &p, size_t tid) {
  if (tid < p.head) return (long long)(tid * sizeof(T));
  if (tid < p.head + p.tail)
    return (long long)(p.head * sizeof(T) + p.chunks * 16 + (tid - p.head) * sizeof(T));
  return -1;
}

template <typename T, typename Op, int MAXK>
ZD_INLINE void oneshot_kernel_body(const ArParams &p) {
  enum { U = ArUnroll<MAXK>::U };
  uint32_t seq = ar_counter_load<MAXK>(p);
  if (!ar_barrier<MAXK>(p, ++seq)) return; // stopped: nothing written

  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  if (p.passive) {
    // No data pass: only the barriers the active ranks run, their per-round
    // ones too when they run in place.
    if (p.inplace) {
      size_t rounds = (p.chunks + nth * U - 1) / (nth * U);
      if (rounds == 0) rounds = 1;
      for (size_t rd = 0; rd < rounds; rd++) ar_barrier<MAXK>(p, ++seq);
    }
    ar_barrier<MAXK>(p, ++seq);
    ar_counter_store<MAXK>(p, seq);
    return;
  }
  const size_t hb = p.head * sizeof(T);
  const char *in[MAXK];
  int w[MAXK];
#pragma unroll
  for (int r = 0; r < MAXK; r++) {
    in[r] = r < p.k ? p.in[r] + hb : p.in[0];
    w[r] = zd_width(in[r]);
  }
  char *const own = zd_pick<MAXK>(p.out, p.rank);
  char *out = own + hb;
  const int wo = zd_width(out);

  const long long so = ar_scalar_offset<T>(p, tid);
  T sv;
  if (so >= 0) {
    sv = ar_scalar<T, Op, MAXK>(p, (size_t)so);
    if (!p.inplace) zd_st1<T>(own + so, sv);
  }

  const size_t per_round = nth * U;
  size_t rounds = (p.chunks + per_round - 1) / per_round;
  if (p.inplace && rounds == 0) rounds = 1;
  for (size_t rd = 0; rd < rounds; rd++) {
    const size_t c0 = rd * per_round + tid;
    uint4 acc[U];
    ar_load_reduce<T, Op, MAXK>(p, in, w, c0, nth, p.chunks, acc);
    if (p.inplace && !ar_barrier<MAXK>(p, ++seq)) return; // every peer has read this round
    if (p.inplace) {
      if (rd == 0 && so >= 0) zd_st1<T>(own + so, sv);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      size_t c = c0 + u * nth;
      if (c < p.chunks) zd_st16(out + c * 16, wo, acc[u]);
    }
  }

  ar_barrier<MAXK>(p, ++seq);
  ar_counter_store<MAXK>(p, seq);
}

template <typename T, typename Op, int MAXK>
__global__ void __launch_bounds__(ZD_AR_THREADS) oneshot_kernel(ArParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  oneshot_kernel_body<T, Op, MAXK>(p);
  zd_stamp_exit(stamp_at);
}

template <typename T, typename Op, int MAXK>
ZD_INLINE void twoshot_kernel_body(const ArParams &p) {
  enum { U = ArUnroll<MAXK>::U };
  uint32_t seq = ar_counter_load<MAXK>(p);
  if (!ar_barrier<MAXK>(p, ++seq)) return; // stopped: nothing written

  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  const size_t hb = p.head * sizeof(T);
  const char *in[MAXK];
  char *out[MAXK];
  int w[MAXK], wo[MAXK];
#pragma unroll
  for (int r = 0; r < MAXK; r++) {
    in[r] = r < p.k ? p.in[r] + hb : p.in[0];
    out[r] = r < p.k ? p.out[r] + hb : p.out[0];
    w[r] = zd_width(in[r]);
    wo[r] = zd_width(out[r]);
  }

  // Rank 0 also reduces the scalar head and tail elements.
  if (p.rank == 0) {
    const long long so = ar_scalar_offset<T>(p, tid);
    if (so >= 0) {
      T sv = ar_scalar<T, Op, MAXK>(p, (size_t)so);
#pragma unroll
      for (int r = 0; r < MAXK; r++)
        if (r < p.k) zd_st1<T>(p.out[r] + so, sv);
    }
  }

  const size_t per = (p.chunks + p.k - 1) / p.k;
  size_t lo = (size_t)p.rank * per;
  size_t hi = lo + per;
  if (hi > p.chunks) hi = p.chunks;
  if (lo > hi) lo = hi;
  for (size_t c0 = lo + tid; c0 < hi; c0 += nth * U) {
    uint4 acc[U];
    ar_load_reduce<T, Op, MAXK>(p, in, w, c0, nth, hi, acc);
#pragma unroll
    for (int u = 0; u < U; u++) {
      size_t c = c0 + u * nth;
      if (c < hi) {
#pragma unroll
        for (int r = 0; r < MAXK; r++)
          if (r < p.k) zd_st16(out[r] + c * 16, wo[r], acc[u]);
      }
    }
  }

  ar_barrier<MAXK>(p, ++seq);
  ar_counter_store<MAXK>(p, seq);
}

template <typename T, typename Op, int MAXK>
__global__ void __launch_bounds__(ZD_AR_THREADS) twoshot_kernel(ArParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  twoshot_kernel_body<T, Op, MAXK>(p);
  zd_stamp_exit(stamp_at);
}

// Validate args and fill the kernel parameters (everything but the grid).
int ar_prepare(const zcc_dev_allreduce_t *a, int twoshot, ArParams *p, size_t *elem) {
  if (!a) return cudaErrorInvalidValue;
  *elem = zd_type_size(a->type);
  if (*elem == 0 || (unsigned)a->op >= (unsigned)zccNumOps) return cudaErrorInvalidValue;
  if (a->nranks < 1 || a->nranks > ZCC_DEV_MAX_RANKS || a->rank < 0 || a->rank >= a->nranks)
    return cudaErrorInvalidValue;
  if (a->max_blocks < 0 || a->max_blocks > ZCC_DEV_MAX_BLOCKS) return cudaErrorInvalidValue;
  if (a->count > (SIZE_MAX >> 1) / *elem) return cudaErrorInvalidValue;
  if (a->passive < 0 || a->passive > 2 || (a->passive && twoshot)) return cudaErrorInvalidValue;
  *p = ArParams();
  const void *ptrs[2 * ZCC_DEV_MAX_RANKS];
  int n = 0;
  for (int r = 0; r < a->nranks; r++) {
    if (!a->flags[r]) return cudaErrorInvalidValue;
    p->flags[r] = a->flags[r];
    if (a->count == 0) continue;
    if (!a->inputs[r]) return cudaErrorInvalidValue;
    p->in[r] = (const char *)a->inputs[r];
    ptrs[n++] = a->inputs[r];
    if (twoshot || (r == a->rank && !a->passive)) {
      if (!a->outputs[r]) return cudaErrorInvalidValue;
      p->out[r] = (char *)a->outputs[r];
      ptrs[n++] = a->outputs[r];
    }
  }
  p->abort_flag = a->abort_flag;
  p->stamp = a->stamp;
  p->k = a->nranks;
  p->rank = a->rank;
  p->avg = a->op == zccAvg ? a->nranks : 0;
  p->passive = a->passive != 0;
  if (a->count) {
    p->head = zd_head_elems(ptrs, n, *elem, a->count);
    size_t rest = (a->count - p->head) * *elem;
    p->chunks = rest / 16;
    p->tail = (rest % 16) / *elem;
    // Passive: the head comes from the inputs alone, as on in-place ranks.
    if (a->passive) {
      p->inplace = a->passive == 2;
      return cudaSuccess;
    }
    size_t bytes = a->count * *elem;
    uintptr_t o = (uintptr_t)a->outputs[a->rank], i = (uintptr_t)a->inputs[a->rank];
    // Exactly in place works; a partial overlap would clobber unread input.
    if (o != i && o < i + bytes && i < o + bytes) return cudaErrorInvalidValue;
    p->inplace = !twoshot && o == i;
  }
  return cudaSuccess;
}

int ar_blocks(const zcc_dev_allreduce_t *a, const ArParams &p, int twoshot, int *blocks) {
  int sms;
  int err = zd_sm_count(&sms);
  if (err != cudaSuccess) return err;
  int cap = a->max_blocks ? a->max_blocks : ZCC_DEV_DEFAULT_BLOCKS;
  if (cap > sms) cap = sms;
  if (cap > ZCC_DEV_MAX_BLOCKS) cap = ZCC_DEV_MAX_BLOCKS;
  // From count alone (not p.chunks, which depends on this rank's pointers),
  // so every rank, passive ones too, derives the same grid.
  size_t all = a->count * zd_type_size(a->type) / 16;
  size_t work = twoshot ? (all + p.k - 1) / p.k : all;
  size_t per = (size_t)ZD_AR_THREADS * (p.k <= 2 ? (int)ArUnroll<2>::U : (int)ArUnroll<8>::U);
  size_t g = (work + per - 1) / per;
  if (g > (size_t)cap) g = cap;
  if (g < 1) g = 1;
  *blocks = (int)g;
  return cudaSuccess;
}

int ar_launch(const zcc_dev_allreduce_t *a, int twoshot, struct CUstream_st *stream) {
  ArParams p;
  size_t elem;
  int err = ar_prepare(a, twoshot, &p, &elem);
  if (err != cudaSuccess) return err;
  int blocks;
  err = ar_blocks(a, p, twoshot, &blocks);
  if (err != cudaSuccess) return err;
  cudaStream_t s = (cudaStream_t)stream;
  // count 0 still launches: the barriers keep every rank's counters in step.
#define ZD_LAUNCH_AR(T, Op)                                                   \
  do {                                                                        \
    if (p.k <= 2) {                                                           \
      if (twoshot) twoshot_kernel<T, Op, 2><<<blocks, ZD_AR_THREADS, 0, s>>>(p); \
      else oneshot_kernel<T, Op, 2><<<blocks, ZD_AR_THREADS, 0, s>>>(p);      \
    } else {                                                                  \
      if (twoshot) twoshot_kernel<T, Op, 8><<<blocks, ZD_AR_THREADS, 0, s>>>(p); \
      else oneshot_kernel<T, Op, 8><<<blocks, ZD_AR_THREADS, 0, s>>>(p);      \
    }                                                                         \
  } while (0)
  ZD_DISPATCH(a->type, a->op, ZD_LAUNCH_AR)
#undef ZD_LAUNCH_AR
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_allreduce_oneshot(
    const zcc_dev_allreduce_t *args, struct CUstream_st *stream) {
  return ar_launch(args, 0, stream);
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_allreduce_twoshot(
    const zcc_dev_allreduce_t *args, struct CUstream_st *stream) {
  return ar_launch(args, 1, stream);
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_allreduce_blocks(
    const zcc_dev_allreduce_t *args, int twoshot) {
  ArParams p;
  size_t elem;
  if (ar_prepare(args, twoshot, &p, &elem) != cudaSuccess) return -1;
  int blocks;
  if (ar_blocks(args, p, twoshot, &blocks) != cudaSuccess) return -1;
  return blocks;
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_allreduce(void) {
  int err = cudaSuccess;
  cudaFuncAttributes fa;
#define ZD_LOAD_AR(T, Op)                                                      \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, oneshot_kernel<T, Op, 2>);    \
    if (e_ == cudaSuccess) e_ = cudaFuncGetAttributes(&fa, oneshot_kernel<T, Op, 8>); \
    if (e_ == cudaSuccess) e_ = cudaFuncGetAttributes(&fa, twoshot_kernel<T, Op, 2>); \
    if (e_ == cudaSuccess) e_ = cudaFuncGetAttributes(&fa, twoshot_kernel<T, Op, 8>); \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
  for (int t = 0; t < zccNumTypes; t++)
    for (int o = 0; o < zccNumOps; o++) {
      if (o == zccAvg) continue; /* runs as sum */
      ZD_DISPATCH((zccDataType_t)t, (zccRedOp_t)o, ZD_LOAD_AR)
    }
#undef ZD_LOAD_AR
  return err;
}
