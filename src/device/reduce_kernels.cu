// Elementwise reduction (dst = a op b), the avg finish step and the
// pre-multiplied sums' scaling (dst = src * scalar) on the GPU.
//
// Layout: a few scalar head elements (only when all pointers share one
// offset modulo 16, to reach a 16-byte boundary), then 16-byte chunks in a
// grid-stride loop, each thread holding ZD_UNROLL chunks in flight, then a
// scalar tail of fewer than 16 bytes. A chunk is loaded and stored with the
// widest access each pointer's alignment allows (16 bytes when aligned), so
// any count and any byte offset work. Every chunk of a and b is read before
// the same chunk of dst is written, so dst may alias a or b exactly.
#include <cuda_runtime.h>

#include "reduce_ops.cuh"

#define ZD_THREADS 512
#define ZD_UNROLL 4

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct ReduceParams {
  char *dst;
  const char *a;
  const char *b;
  size_t head;   // scalar elements before the chunks
  size_t chunks; // 16-byte chunks after the head
  size_t tail;   // scalar elements after the chunks
  int nranks;    // avg finish: divisor
  const char *scalar_ptr; // scale: the scalar in device-readable memory, or NULL:
  uint64_t scalar_bits;   // the scalar's bytes
};

template <typename T, typename Op>
__global__ void __launch_bounds__(ZD_THREADS) reduce_kernel(ReduceParams p) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  const size_t hb = p.head * sizeof(T);
  // Head and tail: one element per thread of the first threads.
  if (tid < p.head) {
    size_t o = tid * sizeof(T);
    zd_st1<T>(p.dst + o, zd_red<T, Op>(zd_ld1<T>(p.a + o), zd_ld1<T>(p.b + o)));
  } else if (tid < p.head + p.tail) {
    size_t o = hb + p.chunks * 16 + (tid - p.head) * sizeof(T);
    zd_st1<T>(p.dst + o, zd_red<T, Op>(zd_ld1<T>(p.a + o), zd_ld1<T>(p.b + o)));
  }
  const char *a = p.a + hb, *b = p.b + hb;
  char *d = p.dst + hb;
  const int wa = zd_width(a), wb = zd_width(b), wd = zd_width(d);
  size_t c = tid;
  for (; c + (ZD_UNROLL - 1) * nth < p.chunks; c += ZD_UNROLL * nth) {
    uint4 x[ZD_UNROLL], y[ZD_UNROLL];
#pragma unroll
    for (int u = 0; u < ZD_UNROLL; u++) {
      x[u] = zd_ld16(a + (c + u * nth) * 16, wa);
      y[u] = zd_ld16(b + (c + u * nth) * 16, wb);
    }
#pragma unroll
    for (int u = 0; u < ZD_UNROLL; u++)
      zd_st16(d + (c + u * nth) * 16, wd, zd_red_pack<T, Op>(x[u], y[u]));
  }
  for (; c < p.chunks; c += nth)
    zd_st16(d + c * 16, wd, zd_red_pack<T, Op>(zd_ld16(a + c * 16, wa), zd_ld16(b + c * 16, wb)));
}

template <typename T>
__global__ void __launch_bounds__(ZD_THREADS) avg_kernel(ReduceParams p) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  const size_t hb = p.head * sizeof(T);
  if (tid < p.head) {
    size_t o = tid * sizeof(T);
    zd_st1<T>(p.dst + o, zd_avg<T>(zd_ld1<T>(p.a + o), p.nranks));
  } else if (tid < p.head + p.tail) {
    size_t o = hb + p.chunks * 16 + (tid - p.head) * sizeof(T);
    zd_st1<T>(p.dst + o, zd_avg<T>(zd_ld1<T>(p.a + o), p.nranks));
  }
  const char *a = p.a + hb;
  char *d = p.dst + hb;
  const int wa = zd_width(a), wd = zd_width(d);
  size_t c = tid;
  for (; c + (ZD_UNROLL - 1) * nth < p.chunks; c += ZD_UNROLL * nth) {
    uint4 x[ZD_UNROLL];
#pragma unroll
    for (int u = 0; u < ZD_UNROLL; u++) x[u] = zd_ld16(a + (c + u * nth) * 16, wa);
#pragma unroll
    for (int u = 0; u < ZD_UNROLL; u++)
      zd_st16(d + (c + u * nth) * 16, wd, zd_avg_pack<T>(x[u], p.nranks));
  }
  for (; c < p.chunks; c += nth) zd_st16(d + c * 16, wd, zd_avg_pack<T>(zd_ld16(a + c * 16, wa), p.nranks));
}

// Pre-multiplied sums: dst = src * scalar, the product as zcc_reduce_scale
// computes it (narrow types in fp32, one rounding; integers wrap).
template <typename T>
__global__ void __launch_bounds__(ZD_THREADS) scale_kernel(ReduceParams p) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  const size_t hb = p.head * sizeof(T);
  T sc;
  if (p.scalar_ptr) sc = zd_ld1<T>(p.scalar_ptr);
  else memcpy(&sc, &p.scalar_bits, sizeof(T));
  if (tid < p.head) {
    size_t o = tid * sizeof(T);
    zd_st1<T>(p.dst + o, zd_red<T, ZdProd>(zd_ld1<T>(p.a + o), sc));
  } else if (tid < p.head + p.tail) {
    size_t o = hb + p.chunks * 16 + (tid - p.head) * sizeof(T);
    zd_st1<T>(p.dst + o, zd_red<T, ZdProd>(zd_ld1<T>(p.a + o), sc));
  }
  ZdPack<T> sp;
#pragma unroll
  for (int i = 0; i < ZdPack<T>::N; i++) sp.e[i] = sc;
  const char *a = p.a + hb;
  char *d = p.dst + hb;
  const int wa = zd_width(a), wd = zd_width(d);
  for (size_t c = tid; c < p.chunks; c += nth)
    zd_st16(d + c * 16, wd, zd_red_pack<T, ZdProd>(zd_ld16(a + c * 16, wa), sp.u));
}

// Split count elements of size elem at the given pointers into head, chunks, tail.
void split(ReduceParams *p, const void *const *ptrs, int nptrs, size_t count, size_t elem) {
  p->head = zd_head_elems(ptrs, nptrs, elem, count);
  size_t rest = (count - p->head) * elem;
  p->chunks = rest / 16;
  p->tail = (rest % 16) / elem;
}

// Enough blocks to give each thread ZD_UNROLL chunks, at most 4 per SM
// (queried once per device and cached).
int grid_for(size_t work, cudaStream_t stream, int *blocks) {
  static int sm_count[64];
  int dev;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  (void)stream;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  if (sm_count[dev] == 0) {
    int n;
    err = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    __atomic_store_n(&sm_count[dev], n, __ATOMIC_RELAXED);
  }
  size_t per = (size_t)ZD_THREADS * ZD_UNROLL;
  size_t g = (work + per - 1) / per;
  size_t cap = (size_t)__atomic_load_n(&sm_count[dev], __ATOMIC_RELAXED) * 4;
  if (g > cap) g = cap;
  if (g < 1) g = 1;
  *blocks = (int)g;
  return cudaSuccess;
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) const char *zcc_dev_error_string(int code) {
  return code == 0 ? "no error" : cudaGetErrorString((cudaError_t)code);
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_reduce(
    void *dst, const void *a, const void *b, size_t count, zccDataType_t type,
    zccRedOp_t op, struct CUstream_st *stream) {
  size_t elem = zd_type_size(type);
  if (elem == 0 || (unsigned)op >= (unsigned)zccNumOps) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!dst || !a || !b) return cudaErrorInvalidValue;
  ReduceParams p = {};
  p.dst = (char *)dst;
  p.a = (const char *)a;
  p.b = (const char *)b;
  const void *ptrs[3] = {dst, a, b};
  split(&p, ptrs, 3, count, elem);
  int blocks;
  int err = grid_for(p.chunks > p.head + p.tail ? p.chunks : p.head + p.tail, stream, &blocks);
  if (err != cudaSuccess) return err;
  cudaStream_t s = (cudaStream_t)stream;
#define ZD_LAUNCH_REDUCE(T, Op) reduce_kernel<T, Op><<<blocks, ZD_THREADS, 0, s>>>(p)
  ZD_DISPATCH(type, op, ZD_LAUNCH_REDUCE)
#undef ZD_LAUNCH_REDUCE
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_finish_avg(
    void *dst, const void *src, size_t count, zccDataType_t type, int nranks,
    struct CUstream_st *stream) {
  size_t elem = zd_type_size(type);
  if (elem == 0 || nranks < 1) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  ReduceParams p = {};
  p.dst = (char *)dst;
  p.a = (const char *)src;
  p.nranks = nranks;
  const void *ptrs[2] = {dst, src};
  split(&p, ptrs, 2, count, elem);
  int blocks;
  int err = grid_for(p.chunks > p.head + p.tail ? p.chunks : p.head + p.tail, stream, &blocks);
  if (err != cudaSuccess) return err;
  cudaStream_t s = (cudaStream_t)stream;
#define ZD_LAUNCH_AVG(T) avg_kernel<T><<<blocks, ZD_THREADS, 0, s>>>(p)
  ZD_DISPATCH_TYPE(type, ZD_LAUNCH_AVG)
#undef ZD_LAUNCH_AVG
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_scale(
    void *dst, const void *src, size_t count, zccDataType_t type, const void *scalar_ptr,
    uint64_t scalar_bits, struct CUstream_st *stream) {
  size_t elem = zd_type_size(type);
  if (elem == 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  ReduceParams p = {};
  p.dst = (char *)dst;
  p.a = (const char *)src;
  p.scalar_ptr = (const char *)scalar_ptr;
  p.scalar_bits = scalar_bits;
  const void *ptrs[2] = {dst, src};
  split(&p, ptrs, 2, count, elem);
  int blocks;
  int err = grid_for(p.chunks > p.head + p.tail ? p.chunks : p.head + p.tail, stream, &blocks);
  if (err != cudaSuccess) return err;
  cudaStream_t s = (cudaStream_t)stream;
#define ZD_LAUNCH_SCALE(T) scale_kernel<T><<<blocks, ZD_THREADS, 0, s>>>(p)
  ZD_DISPATCH_TYPE(type, ZD_LAUNCH_SCALE)
#undef ZD_LAUNCH_SCALE
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_reduce(void) {
  int err = cudaSuccess;
  cudaFuncAttributes fa;
#define ZD_LOAD_RED(T, Op)                                                     \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, reduce_kernel<T, Op>);        \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
#define ZD_LOAD_AVG(T)                                                         \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, avg_kernel<T>);               \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
#define ZD_LOAD_SCALE(T)                                                       \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, scale_kernel<T>);             \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
  for (int t = 0; t < zccNumTypes; t++) {
    for (int o = 0; o < zccNumOps; o++) {
      if (o == zccAvg) continue;
      ZD_DISPATCH((zccDataType_t)t, (zccRedOp_t)o, ZD_LOAD_RED)
    }
    ZD_DISPATCH_TYPE((zccDataType_t)t, ZD_LOAD_AVG)
    ZD_DISPATCH_TYPE((zccDataType_t)t, ZD_LOAD_SCALE)
  }
#undef ZD_LOAD_RED
#undef ZD_LOAD_AVG
#undef ZD_LOAD_SCALE
  return err;
}
