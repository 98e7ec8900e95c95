// Element types, conversions and reduction operators of the device kernels,
// written to give the same bits as the host loops in misc/reduce.c
// (the conversions are the same bit manipulations, NaN payloads included).
#ifndef ZCC_DEVICE_REDUCE_OPS_CUH_
#define ZCC_DEVICE_REDUCE_OPS_CUH_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "device.h"

#define ZD_INLINE __device__ __forceinline__

// Narrow float storage types: plain bits, arithmetic in fp32.
struct zd_f16 { uint16_t v; };
struct zd_bf16 { uint16_t v; };
struct zd_e4m3 { uint8_t v; };
struct zd_e5m2 { uint8_t v; };

ZD_INLINE uint32_t zd_sel(uint32_t c, uint32_t x, uint32_t y) { return c ? x : y; }
ZD_INLINE uint32_t zd_f2u(float f) { return __float_as_uint(f); }
ZD_INLINE float zd_u2f(uint32_t u) { return __uint_as_float(u); }

ZD_INLINE float zd_half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t norm = (em << 13) + (112u << 23);
  uint32_t special = (norm + (112u << 23)) | zd_sel(em > 0x7c00u, 0x400000u, 0u);
  uint32_t sub = zd_f2u(__fmul_rn((float)(int32_t)em, 0x1p-24f));
  uint32_t r = zd_sel(em < 0x400u, sub, zd_sel(em >= 0x7c00u, special, norm));
  return zd_u2f(r | s);
}

ZD_INLINE uint16_t zd_float_to_half(float f) {
  uint32_t x = zd_f2u(f);
  uint32_t s = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  uint32_t sub = zd_f2u(__fadd_rn(zd_u2f(a), 0.5f)) - 0x3f000000u;
  uint32_t nb = a - (112u << 23);
  uint32_t norm = (nb + 0xfffu + ((nb >> 13) & 1u)) >> 13;
  norm = zd_sel(norm > 0x7c00u, 0x7c00u, norm);
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t r = zd_sel(a > 0x7f800000u, nan, zd_sel(a < 0x38800000u, sub, norm));
  return (uint16_t)(s | r);
}

ZD_INLINE float zd_bf16_to_float(uint16_t b) { return zd_u2f((uint32_t)b << 16); }

ZD_INLINE uint16_t zd_float_to_bf16(float f) {
  uint32_t x = zd_f2u(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  return (uint16_t)zd_sel((x & 0x7fffffffu) > 0x7f800000u, nan, r);
}

ZD_INLINE float zd_e4m3_to_float(uint8_t v) {
  uint32_t s = (uint32_t)(v & 0x80u) << 24;
  uint32_t em = v & 0x7fu;
  uint32_t norm = (em << 20) + (120u << 23);
  uint32_t sub = zd_f2u(__fmul_rn((float)(int32_t)em, 0x1p-9f));
  uint32_t r = zd_sel(em == 0x7fu, 0x7fc00000u, zd_sel(em < 8u, sub, norm));
  return zd_u2f(r | s);
}

ZD_INLINE uint8_t zd_float_to_e4m3(float f) {
  uint32_t x = zd_f2u(f);
  uint32_t s = (x >> 24) & 0x80u;
  uint32_t a = x & 0x7fffffffu;
  uint32_t sub = zd_f2u(__fadd_rn(zd_u2f(a), 16384.0f)) - 0x46800000u;
  uint32_t nb = a - (120u << 23);
  uint32_t norm = (nb + 0x7ffffu + ((nb >> 20) & 1u)) >> 20;
  norm = zd_sel(norm > 0x7eu, 0x7eu, norm);
  uint32_t r = zd_sel(a > 0x7f800000u, 0x7fu, zd_sel(a < 0x3c800000u, sub, norm));
  return (uint8_t)(s | r);
}

ZD_INLINE float zd_e5m2_to_float(uint8_t v) { return zd_half_to_float((uint16_t)(v << 8)); }

ZD_INLINE uint8_t zd_float_to_e5m2(float f) {
  uint32_t x = zd_f2u(f);
  uint32_t s = (x >> 24) & 0x80u;
  uint32_t a = x & 0x7fffffffu;
  uint32_t sub = zd_f2u(__fadd_rn(zd_u2f(a), 128.0f)) - 0x43000000u;
  uint32_t nb = a - (112u << 23);
  uint32_t norm = (nb + 0xfffffu + ((nb >> 21) & 1u)) >> 21;
  norm = zd_sel(norm > 0x7cu, 0x7cu, norm);
  uint32_t r = zd_sel(a > 0x7f800000u, 0x7eu, zd_sel(a < 0x38800000u, sub, norm));
  return (uint8_t)(s | r);
}

// Compute type C of each storage type T, and the conversions between them.
template <typename T> struct ZdNum {
  typedef T C;
  static ZD_INLINE C up(T x) { return x; }
  static ZD_INLINE T down(C x) { return x; }
};
template <> struct ZdNum<zd_f16> {
  typedef float C;
  static ZD_INLINE C up(zd_f16 x) { return zd_half_to_float(x.v); }
  static ZD_INLINE zd_f16 down(C x) { zd_f16 r; r.v = zd_float_to_half(x); return r; }
};
template <> struct ZdNum<zd_bf16> {
  typedef float C;
  static ZD_INLINE C up(zd_bf16 x) { return zd_bf16_to_float(x.v); }
  static ZD_INLINE zd_bf16 down(C x) { zd_bf16 r; r.v = zd_float_to_bf16(x); return r; }
};
template <> struct ZdNum<zd_e4m3> {
  typedef float C;
  static ZD_INLINE C up(zd_e4m3 x) { return zd_e4m3_to_float(x.v); }
  static ZD_INLINE zd_e4m3 down(C x) { zd_e4m3 r; r.v = zd_float_to_e4m3(x); return r; }
};
template <> struct ZdNum<zd_e5m2> {
  typedef float C;
  static ZD_INLINE C up(zd_e5m2 x) { return zd_e5m2_to_float(x.v); }
  static ZD_INLINE zd_e5m2 down(C x) { zd_e5m2 r; r.v = zd_float_to_e5m2(x); return r; }
};

// Operators on the compute type. Integers: sums and products wrap (done in
// the unsigned type); max/min in the type's own signedness. Floats: NaN if
// either operand is NaN (the host's ZR_FMAX/ZR_FMIN), IEEE RN arithmetic
// with no contraction.
struct ZdSum {};
struct ZdProd {};
struct ZdMax {};
struct ZdMin {};

template <typename C> struct ZdUns { typedef C U; };
template <> struct ZdUns<int8_t> { typedef uint8_t U; };
template <> struct ZdUns<int32_t> { typedef uint32_t U; };
template <> struct ZdUns<int64_t> { typedef uint64_t U; };

template <typename C> ZD_INLINE C zd_apply(ZdSum, C u, C v) {
  typedef typename ZdUns<C>::U U;
  return (C)(U)((U)u + (U)v);
}
template <typename C> ZD_INLINE C zd_apply(ZdProd, C u, C v) {
  typedef typename ZdUns<C>::U U;
  return (C)(U)((U)u * (U)v);
}
template <> ZD_INLINE uint8_t zd_apply(ZdProd, uint8_t u, uint8_t v) {
  return (uint8_t)((unsigned)u * (unsigned)v);
}
template <> ZD_INLINE int8_t zd_apply(ZdProd, int8_t u, int8_t v) {
  return (int8_t)(uint8_t)((unsigned)(uint8_t)u * (unsigned)(uint8_t)v);
}
template <> ZD_INLINE float zd_apply(ZdSum, float u, float v) { return __fadd_rn(u, v); }
template <> ZD_INLINE float zd_apply(ZdProd, float u, float v) { return __fmul_rn(u, v); }
template <> ZD_INLINE double zd_apply(ZdSum, double u, double v) { return __dadd_rn(u, v); }
template <> ZD_INLINE double zd_apply(ZdProd, double u, double v) { return __dmul_rn(u, v); }
template <typename C> ZD_INLINE C zd_apply(ZdMax, C u, C v) { return (u > v || u != u) ? u : v; }
template <typename C> ZD_INLINE C zd_apply(ZdMin, C u, C v) { return (u < v || u != u) ? u : v; }

// The avg finish step on the compute type: integers truncate (C division,
// with the host's operand types), floats divide in their compute type.
template <typename C> ZD_INLINE C zd_div(C u, int n) { return (C)(u / (C)n); }
template <> ZD_INLINE int8_t zd_div(int8_t u, int n) { return (int8_t)(u / n); }
template <> ZD_INLINE uint8_t zd_div(uint8_t u, int n) { return (uint8_t)(u / n); }
template <> ZD_INLINE int32_t zd_div(int32_t u, int n) { return u / n; }
template <> ZD_INLINE float zd_div(float u, int n) { return __fdiv_rn(u, (float)n); }
template <> ZD_INLINE double zd_div(double u, int n) { return __ddiv_rn(u, (double)n); }

// One element step on storage types: down(up(a) op up(b)).
template <typename T, typename Op> ZD_INLINE T zd_red(T a, T b) {
  typedef ZdNum<T> N;
  return N::down(zd_apply(Op(), N::up(a), N::up(b)));
}
template <typename T> ZD_INLINE T zd_avg(T a, int n) {
  typedef ZdNum<T> N;
  return N::down(zd_div(N::up(a), n));
}

// 16 bytes of elements.
template <typename T> union ZdPack {
  enum { N = 16 / sizeof(T) };
  uint4 u;
  T e[N];
};

template <typename T, typename Op> ZD_INLINE uint4 zd_red_pack(uint4 x, uint4 y) {
  ZdPack<T> a, b;
  a.u = x;
  b.u = y;
#pragma unroll
  for (int i = 0; i < ZdPack<T>::N; i++) a.e[i] = zd_red<T, Op>(a.e[i], b.e[i]);
  return a.u;
}

template <typename T> ZD_INLINE uint4 zd_avg_pack(uint4 x, int n) {
  ZdPack<T> a;
  a.u = x;
#pragma unroll
  for (int i = 0; i < ZdPack<T>::N; i++) a.e[i] = zd_avg<T>(a.e[i], n);
  return a.u;
}

// Widest access (16, 8, 4, 2 or 1 bytes) that p's alignment allows.
ZD_INLINE int zd_width(const void *p) {
  uintptr_t a = (uintptr_t)p & 15u;
  return a == 0 ? 16 : (int)(a & (0u - a));
}

// 16 bytes at p through accesses of width w (w divides p's alignment).
ZD_INLINE uint4 zd_ld16(const char *p, int w) {
  uint4 v;
  if (w == 16) {
    v = *(const uint4 *)p;
  } else if (w == 8) {
    uint2 lo = ((const uint2 *)p)[0], hi = ((const uint2 *)p)[1];
    v = make_uint4(lo.x, lo.y, hi.x, hi.y);
  } else if (w == 4) {
    const uint32_t *q = (const uint32_t *)p;
    v = make_uint4(q[0], q[1], q[2], q[3]);
  } else {
    ZdPack<uint8_t> b;
    if (w == 2) {
      ZdPack<uint16_t> h;
#pragma unroll
      for (int i = 0; i < 8; i++) h.e[i] = ((const uint16_t *)p)[i];
      return h.u;
    }
#pragma unroll
    for (int i = 0; i < 16; i++) b.e[i] = (uint8_t)p[i];
    v = b.u;
  }
  return v;
}

ZD_INLINE void zd_st16(char *p, int w, uint4 v) {
  if (w == 16) {
    *(uint4 *)p = v;
  } else if (w == 8) {
    ((uint2 *)p)[0] = make_uint2(v.x, v.y);
    ((uint2 *)p)[1] = make_uint2(v.z, v.w);
  } else if (w == 4) {
    uint32_t *q = (uint32_t *)p;
    q[0] = v.x; q[1] = v.y; q[2] = v.z; q[3] = v.w;
  } else if (w == 2) {
    ZdPack<uint16_t> h;
    h.u = v;
#pragma unroll
    for (int i = 0; i < 8; i++) ((uint16_t *)p)[i] = h.e[i];
  } else {
    ZdPack<uint8_t> b;
    b.u = v;
#pragma unroll
    for (int i = 0; i < 16; i++) p[i] = (char)b.e[i];
  }
}

// One element at any byte address.
template <typename T> ZD_INLINE T zd_ld1(const char *p) {
  if (((uintptr_t)p & (sizeof(T) - 1)) == 0) return *(const T *)p;
  union { T t; uint8_t b[sizeof(T)]; } x;
#pragma unroll
  for (int i = 0; i < (int)sizeof(T); i++) x.b[i] = (uint8_t)p[i];
  return x.t;
}
template <typename T> ZD_INLINE void zd_st1(char *p, T v) {
  if (((uintptr_t)p & (sizeof(T) - 1)) == 0) {
    *(T *)p = v;
    return;
  }
  union { T t; uint8_t b[sizeof(T)]; } x;
  x.t = v;
#pragma unroll
  for (int i = 0; i < (int)sizeof(T); i++) p[i] = (char)x.b[i];
}

// Scalar head: elements before the first 16-byte boundary, when every
// pointer in ptrs sits at the same offset modulo 16 and that offset is a
// whole number of elements; otherwise 0 (the chunks then use narrower
// accesses). Host side.
static inline size_t zd_head_elems(const void *const *ptrs, int n, size_t elem, size_t count) {
  uintptr_t off = (uintptr_t)ptrs[0] & 15u;
  for (int i = 1; i < n; i++)
    if (((uintptr_t)ptrs[i] & 15u) != off) return 0;
  if (off == 0 || off % elem != 0) return 0;
  size_t h = (16 - off) / elem;
  return h < count ? h : count;
}

// Launch a templated kernel for (type, op): MACRO(T, Op) must expand to a
// statement that sets `err`. Avg dispatches as Sum.
#define ZD_DISPATCH_OP(T, op, MACRO)                                          \
  switch (op) {                                                               \
  case zccSum: case zccAvg: MACRO(T, ZdSum); break;                           \
  case zccProd: MACRO(T, ZdProd); break;                                      \
  case zccMax: MACRO(T, ZdMax); break;                                        \
  case zccMin: MACRO(T, ZdMin); break;                                        \
  default: err = cudaErrorInvalidValue; break;                                \
  }

#define ZD_DISPATCH(type, op, MACRO)                                          \
  switch (type) {                                                             \
  case zccInt8: ZD_DISPATCH_OP(int8_t, op, MACRO) break;                      \
  case zccUint8: ZD_DISPATCH_OP(uint8_t, op, MACRO) break;                    \
  case zccInt32: ZD_DISPATCH_OP(int32_t, op, MACRO) break;                    \
  case zccUint32: ZD_DISPATCH_OP(uint32_t, op, MACRO) break;                  \
  case zccInt64: ZD_DISPATCH_OP(int64_t, op, MACRO) break;                    \
  case zccUint64: ZD_DISPATCH_OP(uint64_t, op, MACRO) break;                  \
  case zccFloat16: ZD_DISPATCH_OP(zd_f16, op, MACRO) break;                   \
  case zccFloat32: ZD_DISPATCH_OP(float, op, MACRO) break;                    \
  case zccFloat64: ZD_DISPATCH_OP(double, op, MACRO) break;                   \
  case zccBfloat16: ZD_DISPATCH_OP(zd_bf16, op, MACRO) break;                 \
  case zccFloat8e4m3: ZD_DISPATCH_OP(zd_e4m3, op, MACRO) break;               \
  case zccFloat8e5m2: ZD_DISPATCH_OP(zd_e5m2, op, MACRO) break;               \
  default: err = cudaErrorInvalidValue; break;                                \
  }

#define ZD_DISPATCH_TYPE(type, MACRO)                                         \
  switch (type) {                                                             \
  case zccInt8: MACRO(int8_t); break;                                         \
  case zccUint8: MACRO(uint8_t); break;                                       \
  case zccInt32: MACRO(int32_t); break;                                       \
  case zccUint32: MACRO(uint32_t); break;                                     \
  case zccInt64: MACRO(int64_t); break;                                       \
  case zccUint64: MACRO(uint64_t); break;                                     \
  case zccFloat16: MACRO(zd_f16); break;                                      \
  case zccFloat32: MACRO(float); break;                                       \
  case zccFloat64: MACRO(double); break;                                      \
  case zccBfloat16: MACRO(zd_bf16); break;                                    \
  case zccFloat8e4m3: MACRO(zd_e4m3); break;                                  \
  case zccFloat8e5m2: MACRO(zd_e5m2); break;                                  \
  default: err = cudaErrorInvalidValue; break;                                \
  }

static inline size_t zd_type_size(zccDataType_t type) {
  switch (type) {
  case zccInt8: case zccUint8: case zccFloat8e4m3: case zccFloat8e5m2: return 1;
  case zccFloat16: case zccBfloat16: return 2;
  case zccInt32: case zccUint32: case zccFloat32: return 4;
  case zccInt64: case zccUint64: case zccFloat64: return 8;
  default: return 0;
  }
}

#endif // ZCC_DEVICE_REDUCE_OPS_CUH_
