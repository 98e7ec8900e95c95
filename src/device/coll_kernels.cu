// Barrier and gather kernels on the flag areas of the allreduce kernels
// (see flags.cuh): the same per-block lines, counters and barrier, so any
// sequence of barrier, gather, one-shot and two-shot launches, the same on
// every rank, keeps every block's counter in step.
//
// Barrier: one block, block 0's line.
//
// Gather: the grid derives from bytes, nranks and max_blocks only (never
// from which sources a rank copies), so block b of every rank pairs with
// block b of every peer. A launch: start barrier (every rank's sources are
// ready), the copies, end barrier (every rank has finished reading the
// others' sources). The sources a rank copies form one index space of
// 16-byte chunks (source by source), strided over the grid, ZD_GA_UNROLL
// loads in flight per thread; a source whose src and dst share an offset
// modulo 16 starts with up to 15 scalar head bytes and then runs 16-byte
// accesses; otherwise its chunks use the widest accesses each pointer
// allows. Head and tail bytes (up to 15 each per source) are copied by the
// first 32 x nsrc threads of the grid.
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

#define ZD_BAR_THREADS 32
#define ZD_GA_THREADS 512
#define ZD_GA_UNROLL 4

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct BarParams {
  uint32_t *flags[ZCC_DEV_MAX_RANKS];
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  int k;
  int rank;
};

ZD_INLINE void barrier_kernel_body(const BarParams &p) {
  uint32_t seq = zd_counter_load<ZCC_DEV_MAX_RANKS>(p.flags, p.rank);
  zd_barrier<ZCC_DEV_MAX_RANKS>(p.flags, p.k, p.rank, p.abort_flag, ++seq);
  zd_counter_store<ZCC_DEV_MAX_RANKS>(p.flags, p.rank, seq);
}

__global__ void __launch_bounds__(ZD_BAR_THREADS) barrier_kernel(BarParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  barrier_kernel_body(p);
  zd_stamp_exit(stamp_at);
}

// The sources this rank copies, compacted to [0, nsrc).
struct GaParams {
  const char *src[ZCC_DEV_MAX_RANKS]; // past the head bytes
  char *dst[ZCC_DEV_MAX_RANKS];       // past the head bytes
  size_t first[ZCC_DEV_MAX_RANKS];    // first chunk index; SIZE_MAX past nsrc
  size_t chunks[ZCC_DEV_MAX_RANKS];
  uint8_t head[ZCC_DEV_MAX_RANKS];
  uint8_t tail[ZCC_DEV_MAX_RANKS];
  uint8_t ws[ZCC_DEV_MAX_RANKS];      // access widths of the chunks
  uint8_t wd[ZCC_DEV_MAX_RANKS];
  uint32_t *flags[ZCC_DEV_MAX_RANKS];
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  size_t total; // chunks of all sources
  int nsrc;
  int k;
  int rank;
};

template <int MAXK>
ZD_INLINE void gather_kernel_body(const GaParams &p) {
  enum { U = ZD_GA_UNROLL };
  uint32_t seq = zd_counter_load<MAXK>(p.flags, p.rank);
  if (!zd_barrier<MAXK>(p.flags, p.k, p.rank, p.abort_flag, ++seq)) return; // stopped

  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;

  // Head (byte i < 16) and tail (byte i - 16) of source tid / 32.
  if (tid < 32 * (size_t)p.nsrc) {
    const int s = (int)(tid / 32), i = (int)(tid % 32);
    const int head = zd_pick<MAXK>(p.head, s);
    const char *src = zd_pick<MAXK>(p.src, s);
    char *dst = zd_pick<MAXK>(p.dst, s);
    if (i < head) {
      dst[i - head] = src[i - head];
    } else if (i >= 16 && i - 16 < (int)zd_pick<MAXK>(p.tail, s)) {
      const size_t o = zd_pick<MAXK>(p.chunks, s) * 16 + (i - 16);
      dst[o] = src[o];
    }
  }

  for (size_t j0 = tid; j0 < p.total; j0 += nth * U) {
    uint4 v[U];
    char *d[U];
    int wd[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t j = j0 + u * nth;
      d[u] = nullptr;
      if (j < p.total) {
        const char *sp = p.src[0];
        char *dp = p.dst[0];
        size_t f = 0;
        int ws = p.ws[0], w = p.wd[0];
#pragma unroll
        for (int s = 1; s < MAXK; s++) {
          if (j >= p.first[s]) {
            sp = p.src[s];
            dp = p.dst[s];
            f = p.first[s];
            ws = p.ws[s];
            w = p.wd[s];
          }
        }
        const size_t c = (j - f) * 16;
        v[u] = zd_ld16(sp + c, ws);
        d[u] = dp + c;
        wd[u] = w;
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
      if (d[u]) zd_st16(d[u], wd[u], v[u]);
  }

  zd_barrier<MAXK>(p.flags, p.k, p.rank, p.abort_flag, ++seq);
  zd_counter_store<MAXK>(p.flags, p.rank, seq);
}

template <int MAXK>
__global__ void __launch_bounds__(ZD_GA_THREADS) gather_kernel(GaParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  gather_kernel_body<MAXK>(p);
  zd_stamp_exit(stamp_at);
}

int host_width(uintptr_t a) {
  a &= 15u;
  return a == 0 ? 16 : (int)(a & (0u - a));
}

int gather_prepare(const zcc_dev_gather_t *a, GaParams *p) {
  if (!a) return cudaErrorInvalidValue;
  if (a->nranks < 1 || a->nranks > ZCC_DEV_MAX_RANKS || a->rank < 0 || a->rank >= a->nranks)
    return cudaErrorInvalidValue;
  if (a->max_blocks < 0 || a->max_blocks > ZCC_DEV_MAX_BLOCKS) return cudaErrorInvalidValue;
  if (a->bytes > (SIZE_MAX >> 5)) return cudaErrorInvalidValue;
  *p = GaParams();
  for (int r = 0; r < ZCC_DEV_MAX_RANKS; r++) p->first[r] = SIZE_MAX;
  const size_t n = a->bytes;
  for (int r = 0; r < a->nranks; r++) {
    if (!a->flags[r]) return cudaErrorInvalidValue;
    p->flags[r] = a->flags[r];
    if (!a->src[r] || n == 0) continue;
    if (!a->dst[r]) return cudaErrorInvalidValue;
    uintptr_t si = (uintptr_t)a->src[r], di = (uintptr_t)a->dst[r];
    if (si == di) continue; // already in place
    if (si < di + n && di < si + n) return cudaErrorInvalidValue;
    const int s = p->nsrc++;
    size_t head = 0;
    if ((si & 15u) == (di & 15u)) {
      head = (16 - (si & 15u)) & 15u;
      if (head > n) head = n;
    }
    p->src[s] = (const char *)a->src[r] + head;
    p->dst[s] = (char *)a->dst[r] + head;
    p->head[s] = (uint8_t)head;
    p->chunks[s] = (n - head) / 16;
    p->tail[s] = (uint8_t)((n - head) % 16);
    p->ws[s] = (uint8_t)host_width((uintptr_t)p->src[s]);
    p->wd[s] = (uint8_t)host_width((uintptr_t)p->dst[s]);
    p->first[s] = p->total;
    p->total += p->chunks[s];
  }
  p->abort_flag = a->abort_flag;
  p->stamp = a->stamp;
  p->k = a->nranks;
  p->rank = a->rank;
  return cudaSuccess;
}

// From bytes, nranks and max_blocks (and the SM count, as the allreduce
// kernels): the same on every rank whatever sources it copies.
int gather_blocks(const zcc_dev_gather_t *a, int *blocks) {
  int sms;
  int err = zd_sm_count(&sms);
  if (err != cudaSuccess) return err;
  int cap = a->max_blocks ? a->max_blocks : ZCC_DEV_DEFAULT_BLOCKS;
  if (cap > sms) cap = sms;
  if (cap > ZCC_DEV_MAX_BLOCKS) cap = ZCC_DEV_MAX_BLOCKS;
  const size_t per = (size_t)ZD_GA_THREADS * ZD_GA_UNROLL * 16;
  size_t g = (a->bytes + per - 1) / per * (size_t)a->nranks;
  if (g > (size_t)cap) g = cap;
  if (g < 1) g = 1;
  *blocks = (int)g;
  return cudaSuccess;
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_barrier(const zcc_dev_allreduce_t *a,
                                                                     struct CUstream_st *stream) {
  if (!a) return cudaErrorInvalidValue;
  if (a->nranks < 1 || a->nranks > ZCC_DEV_MAX_RANKS || a->rank < 0 || a->rank >= a->nranks)
    return cudaErrorInvalidValue;
  BarParams p = {};
  for (int r = 0; r < a->nranks; r++) {
    if (!a->flags[r]) return cudaErrorInvalidValue;
    p.flags[r] = a->flags[r];
  }
  p.abort_flag = a->abort_flag;
  p.stamp = a->stamp;
  p.k = a->nranks;
  p.rank = a->rank;
  barrier_kernel<<<1, ZD_BAR_THREADS, 0, (cudaStream_t)stream>>>(p);
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_gather(const zcc_dev_gather_t *a,
                                                                    struct CUstream_st *stream) {
  GaParams p;
  int err = gather_prepare(a, &p);
  if (err != cudaSuccess) return err;
  int blocks;
  err = gather_blocks(a, &blocks);
  if (err != cudaSuccess) return err;
  cudaStream_t s = (cudaStream_t)stream;
  // bytes 0 (or nothing to copy) still launches: the barriers keep every
  // rank's counters in step and order the ranks' streams.
  if (p.k <= 2) gather_kernel<2><<<blocks, ZD_GA_THREADS, 0, s>>>(p);
  else gather_kernel<ZCC_DEV_MAX_RANKS><<<blocks, ZD_GA_THREADS, 0, s>>>(p);
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_coll(void) {
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, barrier_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, gather_kernel<2>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, gather_kernel<ZCC_DEV_MAX_RANKS>);
  return e;
}
