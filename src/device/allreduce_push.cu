// Push one-shot allreduce (device.h: zcc_dev_allreduce_push): one launch for
// unregistered buffers, no staging copy on the stream.
//
// The grid is B lanes of two blocks each: block 2j pushes, block 2j + 1
// consumes, so the NVLink stores of one chunk overlap the local reduction
// of another (a block that did both in turn left the links idle while it
// reduced: 282 GB/s at 512 MiB on 2x H200, docs/perf/h200x2.md). Lane j
// takes chunks j, j + B, ... of the message. Its chunk n (the lane's
// running count, kept in its flag line across launches) uses slot
// n % ZCC_DEV_PUSH_SLOTS of the lane's region in every peer's staging:
//   pusher:   wait until every peer consumed chunk n - SLOTS (freed[p] >=
//             n - SLOTS + 1), store the own input's chunk into each peer's
//             slot, publish ready = n + 1 into each peer's line (release,
//             system scope, after a __syncthreads so that every thread's
//             stores are ordered before it), and pushed = n + 1 locally;
//   consumer: wait until every peer's ready reaches n + 1 (and, in place,
//             the own pusher's pushed: the output overwrites the input),
//             reduce the own input and the peers' slots in rank order into
//             the own output, publish freed = n + 1 into each peer's line.
// The pushers of two ranks wait only on the other's consumers and the
// consumers only on the other's pushers, so every block of the grid must be
// resident at once: the grid is at most one block per multiprocessor.
// Values compare modulo 2^32 and only grow, so no flag is ever reset.
//
// An input in pinned host memory (local_copy) is read over PCIe once: the
// pusher stores each chunk into the own source's slot of the own staging
// as well, and the consumer reduces that copy instead of reading the input
// again. The consumer always publishes its own freed count ([8 + rank] of
// its own line, a word no peer uses), and a pusher that copies waits for it
// as for its peers'; the choice is each rank's own, peers see no difference.
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

#define ZD_PUSH_THREADS 512
#define ZD_PUSH_U 4                // 16-byte packs per thread in flight (push; consume at 2 ranks)
#define ZD_PUSH_MIN_CHUNK 8192     // bytes: one pass of a block
// Words of a lane's flag line (device.h): [s] ready from source s, [8 + p]
// freed by peer p, then the pusher's and the consumer's chunk counters and
// the pusher's local progress.
#define ZD_PUSH_CTR_PUSH 16
#define ZD_PUSH_CTR_CONS 17
#define ZD_PUSH_PUSHED 18
#define ZD_PUSH_MAX_CHUNK (256 << 10)

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct PushParams {
  const char *in;
  char *out;
  char *stage[ZCC_DEV_MAX_RANKS];
  uint32_t *flags[ZCC_DEV_MAX_RANKS];
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  size_t bytes;   // message bytes
  size_t chunk;   // bytes per chunk, a multiple of 16
  size_t slot;    // bytes between slots, >= chunk, a multiple of 16
  size_t nchunks;
  size_t lanes_max; // lanes the slot layout has room for (any launch: the same)
  int k;
  int rank;
  int avg; // 0, or the avg divisor
  int local_copy; // the input is host memory: read once (see above)
};

ZD_INLINE size_t push_lane() { return blockIdx.x >> 1; }
ZD_INLINE size_t push_lanes() { return gridDim.x >> 1; }
ZD_INLINE uint32_t *push_line(uint32_t *area) { return area + push_lane() * ZCC_DEV_PUSH_LINE; }

// Rank src's slot for chunk counter n of this lane, in rank dst's staging.
template <int MAXK> ZD_INLINE char *push_slot(const PushParams &p, int dst, int src, uint32_t n) {
  size_t idx = ((size_t)src * p.lanes_max + push_lane()) * ZCC_DEV_PUSH_SLOTS + n % ZCC_DEV_PUSH_SLOTS;
  return zd_pick<MAXK>(p.stage, dst) + idx * p.slot;
}

// false: the abort word ended a wait (nothing written; the block stops).
template <int MAXK> ZD_INLINE bool push_chunk(const PushParams &p, uint32_t n, size_t off, size_t len) {
  const int t = threadIdx.x;
  // The peers (and, copying, the own consumer) are done with this slot's previous chunk.
  bool ok = true;
  if (t < p.k && (t != p.rank || p.local_copy))
    ok = zd_wait_reach(push_line(zd_pick<MAXK>(p.flags, p.rank)) + 8 + t,
                       n - ZCC_DEV_PUSH_SLOTS + 1, p.abort_flag);
  if (__syncthreads_or(!ok)) return false;
  char *dst[MAXK];
#pragma unroll
  for (int r = 0; r < MAXK; r++) dst[r] = r < p.k ? push_slot<MAXK>(p, r, p.rank, n) : NULL;
  const bool self = p.local_copy != 0; // also into the own slot of the own staging
  const char *src = p.in + off;
  const int w = zd_width(src);
  const size_t packs = len / 16;
  for (size_t q0 = t; q0 < packs; q0 += (size_t)blockDim.x * ZD_PUSH_U) {
    uint4 v[ZD_PUSH_U];
#pragma unroll
    for (int u = 0; u < ZD_PUSH_U; u++) {
      size_t q = q0 + (size_t)u * blockDim.x;
      if (q < packs) v[u] = zd_ld16(src + q * 16, w);
    }
#pragma unroll
    for (int u = 0; u < ZD_PUSH_U; u++) {
      size_t q = q0 + (size_t)u * blockDim.x;
      if (q < packs) {
#pragma unroll
        for (int r = 0; r < MAXK; r++)
          if (r < p.k && (r != p.rank || self)) *(uint4 *)(dst[r] + q * 16) = v[u];
      }
    }
  }
  // The message's last bytes (fewer than 16), byte by byte.
  for (size_t i = packs * 16 + t; i < len; i += blockDim.x) {
    char c = src[i];
#pragma unroll
    for (int r = 0; r < MAXK; r++)
      if (r < p.k && (r != p.rank || self)) dst[r][i] = c;
  }
  __syncthreads();
  if (t < p.k && t != p.rank) zd_st_release_sys(push_line(zd_pick<MAXK>(p.flags, t)) + p.rank, n + 1);
  if (t == 0) zd_st_release_sys(push_line(zd_pick<MAXK>(p.flags, p.rank)) + ZD_PUSH_PUSHED, n + 1);
  return true;
}

template <typename T, typename Op, int MAXK>
ZD_INLINE bool consume_chunk(const PushParams &p, uint32_t n, size_t off, size_t len) {
  const int t = threadIdx.x;
  uint32_t *mine = push_line(zd_pick<MAXK>(p.flags, p.rank));
  bool ok = true;
  if (t < p.k && t != p.rank) ok = zd_wait_reach(mine + t, n + 1, p.abort_flag);
  if (t == p.k && (p.in == p.out || p.local_copy))
    ok = zd_wait_reach(mine + ZD_PUSH_PUSHED, n + 1, p.abort_flag);
  if (__syncthreads_or(!ok)) return false;
  const char *src[MAXK];
#pragma unroll
  for (int r = 0; r < MAXK; r++)
    src[r] = r >= p.k ? NULL
             : r == p.rank && !p.local_copy ? p.in + off
                                            : push_slot<MAXK>(p, p.rank, r, n);
  char *out = p.out + off;
  const int wi = p.local_copy ? 16 : zd_width(p.in + off), wo = zd_width(out);
  const size_t packs = len / 16;
  enum { U = MAXK <= 2 ? ZD_PUSH_U : 1 }; // registers: MAXK x U packs per thread
  for (size_t q0 = t; q0 < packs; q0 += (size_t)blockDim.x * U) {
    uint4 v[MAXK][U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      size_t q = q0 + (size_t)u * blockDim.x;
      if (q < packs) {
#pragma unroll
        for (int r = 0; r < MAXK; r++)
          if (r < p.k) v[r][u] = zd_ld16(src[r] + q * 16, r == p.rank ? wi : 16);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      size_t q = q0 + (size_t)u * blockDim.x;
      if (q < packs) {
        uint4 acc = v[0][u];
#pragma unroll
        for (int r = 1; r < MAXK; r++)
          if (r < p.k) acc = zd_red_pack<T, Op>(acc, v[r][u]);
        if (p.avg) acc = zd_avg_pack<T>(acc, p.avg);
        zd_st16(out + q * 16, wo, acc);
      }
    }
  }
  // Whole elements after the last full pack (only in the message's last chunk).
  for (size_t i = packs * 16 + (size_t)t * sizeof(T); i < len; i += (size_t)blockDim.x * sizeof(T)) {
    T s = zd_ld1<T>(src[0] + i);
#pragma unroll
    for (int r = 1; r < MAXK; r++)
      if (r < p.k) s = zd_red<T, Op>(s, zd_ld1<T>(src[r] + i));
    if (p.avg) s = zd_avg<T>(s, p.avg);
    zd_st1<T>(out + i, s);
  }
  __syncthreads();
  // Freed into every peer's line, and into the own one for a pusher that copies.
  if (t < p.k) zd_st_release_sys(push_line(zd_pick<MAXK>(p.flags, t)) + 8 + p.rank, n + 1);
  return true;
}

template <typename T, typename Op, int MAXK>
ZD_INLINE void push_kernel_body(const PushParams &p) {
  const size_t j = push_lane(), B = push_lanes();
  if (j >= p.nchunks) return; // a lane with no chunk keeps its counters, on every rank
  const int pusher = (blockIdx.x & 1) == 0;
  __shared__ uint32_t s_base;
  uint32_t *ctr = push_line(zd_pick<MAXK>(p.flags, p.rank)) + (pusher ? ZD_PUSH_CTR_PUSH : ZD_PUSH_CTR_CONS);
  if (threadIdx.x == 0) s_base = *ctr;
  __syncthreads();
  const uint32_t base = s_base;
  const size_t nb = (p.nchunks - 1 - j) / B + 1;
  for (size_t i = 0; i < nb; i++) {
    size_t off = (j + i * B) * p.chunk;
    size_t len = p.bytes - off < p.chunk ? p.bytes - off : p.chunk;
    if (pusher ? !push_chunk<MAXK>(p, base + (uint32_t)i, off, len)
               : !consume_chunk<T, Op, MAXK>(p, base + (uint32_t)i, off, len))
      return; // stopped: nothing more is written
  }
  if (threadIdx.x == 0) *ctr = base + (uint32_t)nb;
}

template <typename T, typename Op, int MAXK>
__global__ void __launch_bounds__(ZD_PUSH_THREADS) push_kernel(PushParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  push_kernel_body<T, Op, MAXK>(p);
  zd_stamp_exit(stamp_at);
}

// Grid and chunk size from the arguments every rank shares. The slot layout
// depends on the largest lane count alone, never on the message: a launch
// with fewer lanes must not write where a peer may still read a slot of the
// previous launch.
int push_grid(const zcc_dev_push_t *a, int *blocks, size_t *chunk, size_t *slot, size_t *lanes_max) {
  size_t es = zd_type_size(a->type);
  if (es == 0 || a->nranks < 1 || a->nranks > ZCC_DEV_MAX_RANKS) return cudaErrorInvalidValue;
  if (a->max_blocks < 0 || a->max_blocks > ZCC_DEV_MAX_BLOCKS) return cudaErrorInvalidValue;
  if (a->count > (SIZE_MAX >> 1) / es) return cudaErrorInvalidValue;
  int sms;
  int err = zd_sm_count(&sms);
  if (err != cudaSuccess) return err;
  // Lanes of two blocks, every block resident: at most one per multiprocessor.
  int cap = a->max_blocks ? a->max_blocks : 2 * ZCC_DEV_DEFAULT_BLOCKS;
  if (cap > sms) cap = sms;
  cap /= 2;
  if (cap < 1) return cudaErrorInvalidValue; // a GPU of one multiprocessor, or max_blocks 1
  size_t bytes = a->count * es;
  size_t g = (bytes + ZD_PUSH_MIN_CHUNK - 1) / ZD_PUSH_MIN_CHUNK;
  if (g > (size_t)cap) g = cap;
  if (g < 1) g = 1;
  // Slots: nranks sources x lanes x SLOTS in every staging buffer.
  size_t s = a->staging_bytes / ((size_t)a->nranks * cap * ZCC_DEV_PUSH_SLOTS) / 16 * 16;
  if (s > ZD_PUSH_MAX_CHUNK) s = ZD_PUSH_MAX_CHUNK;
  if (s < 16) return cudaErrorInvalidValue; // a staging buffer far too small
  // Host windows: at least lane_chunks chunks per lane, so each lane's PCIe
  // stores and loads overlap (one chunk per lane left them in turn).
  if (a->lane_chunks > 1) {
    size_t want = (bytes + (size_t)a->lane_chunks * s - 1) / ((size_t)a->lane_chunks * s);
    if (want < 1) want = 1;
    if (g > want) g = want;
  }
  size_t c = (bytes + g - 1) / g;
  c = (c + 15) / 16 * 16;
  if (c < ZD_PUSH_MIN_CHUNK) c = ZD_PUSH_MIN_CHUNK;
  if (c > s) c = s;
  *blocks = 2 * (int)g;
  *chunk = c;
  *slot = s;
  *lanes_max = (size_t)cap;
  return cudaSuccess;
}

int push_launch(const zcc_dev_push_t *a, cudaStream_t s) {
  if (!a) return cudaErrorInvalidValue;
  int blocks;
  size_t chunk, slot, lanes_max;
  int err = push_grid(a, &blocks, &chunk, &slot, &lanes_max);
  if (err != cudaSuccess) return err;
  if ((unsigned)a->op >= (unsigned)zccNumOps || a->rank < 0 || a->rank >= a->nranks)
    return cudaErrorInvalidValue;
  if (a->count == 0) return cudaSuccess; // nothing moves, no counter changes
  size_t bytes = a->count * zd_type_size(a->type);
  if (!a->input || !a->output) return cudaErrorInvalidValue;
  uintptr_t o = (uintptr_t)a->output, i = (uintptr_t)a->input;
  if (o != i && o < i + bytes && i < o + bytes) return cudaErrorInvalidValue;
  PushParams p = PushParams();
  for (int r = 0; r < a->nranks; r++) {
    if (!a->staging[r] || !a->push[r]) return cudaErrorInvalidValue;
    p.stage[r] = (char *)a->staging[r];
    p.flags[r] = a->push[r];
  }
  p.in = (const char *)a->input;
  p.out = (char *)a->output;
  p.abort_flag = a->abort_flag;
  p.stamp = a->stamp;
  p.bytes = bytes;
  p.chunk = chunk;
  p.slot = slot;
  p.lanes_max = lanes_max;
  p.nchunks = (bytes + chunk - 1) / chunk;
  p.k = a->nranks;
  p.rank = a->rank;
  p.avg = a->op == zccAvg ? a->nranks : 0;
  p.local_copy = a->local_copy ? 1 : 0;
#define ZD_LAUNCH_PUSH(T, Op)                                                 \
  do {                                                                        \
    if (p.k <= 2) push_kernel<T, Op, 2><<<blocks, ZD_PUSH_THREADS, 0, s>>>(p); \
    else push_kernel<T, Op, 8><<<blocks, ZD_PUSH_THREADS, 0, s>>>(p);         \
  } while (0)
  ZD_DISPATCH(a->type, a->op, ZD_LAUNCH_PUSH)
#undef ZD_LAUNCH_PUSH
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_allreduce_push(
    const zcc_dev_push_t *args, struct CUstream_st *stream) {
  return push_launch(args, (cudaStream_t)stream);
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_allreduce_push_grid(
    const zcc_dev_push_t *args, int *blocks, size_t *chunk) {
  size_t slot, lanes_max;
  if (!args || !blocks || !chunk) return cudaErrorInvalidValue;
  return push_grid(args, blocks, chunk, &slot, &lanes_max);
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_push(void) {
  int err = cudaSuccess;
  cudaFuncAttributes fa;
#define ZD_LOAD_PUSH(T, Op)                                                   \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, push_kernel<T, Op, 2>);       \
    if (e_ == cudaSuccess) e_ = cudaFuncGetAttributes(&fa, push_kernel<T, Op, 8>); \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
  for (int t = 0; t < zccNumTypes; t++)
    for (int o = 0; o < zccNumOps; o++) {
      if (o == zccAvg) continue; /* runs as sum */
      ZD_DISPATCH((zccDataType_t)t, (zccRedOp_t)o, ZD_LOAD_PUSH)
    }
#undef ZD_LOAD_PUSH
  return err;
}
