/*
 * Host reduction loops and narrow float conversions (see reduce.h).
 *
 * Layout of the hot loops: every kernel walks its arrays in fixed-size
 * blocks. A block of a and b is read through byte-aligned views (so any
 * byte offset works), combined into a local array (fp32 for the narrow
 * types), and only then stored to dst (and dst2), so dst may alias a or b.
 * Loops with a constant trip count over such blocks are what gcc -O2
 * vectorises without alias checks or scalar epilogues; the final partial
 * block runs the same code with a variable count. Type and op are
 * dispatched once per call through a table.
 *
 * Every kernel is built twice: once for the baseline target and once with
 * AVX2 + F16C (x86 only), chosen at run time by __builtin_cpu_supports and
 * ZCC_REDUCE_SIMD. The AVX2 build converts fp16 with the F16C instructions;
 * all other conversions are the portable bit manipulations below, which give
 * bit-identical results (NaN payloads included) on both builds.
 *
 * Conversions from fp32 round to nearest, ties to even. Values too large
 * for the target format: fp16, bf16 and fp8 e5m2 overflow to +-inf (IEEE
 * behaviour, inf stays inf); fp8 e4m3 ("FN": no infinities) saturates to
 * +-448, and so does an infinite input. NaN stays NaN (quiet, sign kept;
 * e4m3 NaN is 0x7f/0xff). The subnormal paths add a magic constant in fp32
 * and therefore assume the default rounding mode (round to nearest).
 */
#include <string.h>

#include "param.h"
#include "reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZR_HAVE_X86 1
#define ZR_AVX2 __attribute__((target("avx2,f16c")))
#else
#define ZR_HAVE_X86 0
#endif

ZCC_PARAM_INT(reduce_simd, "REDUCE_SIMD", 1,
              "use AVX2/F16C reduction loops where the CPU has them (0: "
              "portable loops only)");

#define ZR_INLINE static inline __attribute__((always_inline))

/* Bytes per operand in one block of a same-type kernel. */
#define ZR_BLOCK_BYTES 256
/* Elements per block of a narrow float kernel (fp32 in between). */
#define ZR_NARROW_BLOCK 64

size_t zcc_type_size(zccDataType_t type) {
  switch (type) {
  case zccInt8:
  case zccUint8:
  case zccFloat8e4m3:
  case zccFloat8e5m2:
    return 1;
  case zccFloat16:
  case zccBfloat16:
    return 2;
  case zccInt32:
  case zccUint32:
  case zccFloat32:
    return 4;
  case zccInt64:
  case zccUint64:
  case zccFloat64:
    return 8;
  default:
    return 0;
  }
}

const char *zcc_type_name(zccDataType_t type) {
  switch (type) {
  case zccInt8: return "int8";
  case zccUint8: return "uint8";
  case zccInt32: return "int32";
  case zccUint32: return "uint32";
  case zccInt64: return "int64";
  case zccUint64: return "uint64";
  case zccFloat16: return "float16";
  case zccFloat32: return "float32";
  case zccFloat64: return "float64";
  case zccBfloat16: return "bfloat16";
  case zccFloat8e4m3: return "float8e4m3";
  case zccFloat8e5m2: return "float8e5m2";
  default: return "invalid";
  }
}

const char *zcc_op_name(zccRedOp_t op) {
  switch (op) {
  case zccSum: return "sum";
  case zccProd: return "prod";
  case zccMax: return "max";
  case zccMin: return "min";
  case zccAvg: return "avg";
  default: return "invalid";
  }
}

/* ---- scalar conversions, written to vectorise (selects, no branches) ---- */

ZR_INLINE uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

ZR_INLINE float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/*
 * Branch-free select: c ? x : y for c in {0, 1}. Written with masks so that
 * gcc computes both sides and keeps the loop free of control flow (a ?:
 * lets it sink the fp32 arithmetic of one side into a branch, which it then
 * may not vectorise because fp32 operations may trap).
 */
ZR_INLINE uint32_t sel(uint32_t c, uint32_t x, uint32_t y) {
  uint32_t m = 0u - c;
  return (x & m) | (y & ~m);
}

ZR_INLINE float half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  /* Normal: move exponent and mantissa into place and rebias (15 -> 127). */
  uint32_t norm = (em << 13) + (112u << 23);
  /* Exponent 31 lands on 143; another 112 makes it 255. NaN: set quiet bit. */
  uint32_t special = (norm + (112u << 23)) | sel(em > 0x7c00u, 0x400000u, 0u);
  /* Subnormal and zero: mantissa * 2^-24, exact in fp32. */
  uint32_t sub = f2u((float)(int32_t)em * 0x1p-24f);
  uint32_t r = sel(em < 0x400u, sub, sel(em >= 0x7c00u, special, norm));
  return u2f(r | s);
}

ZR_INLINE uint16_t float_to_half(float f) {
  uint32_t x = f2u(f);
  uint32_t s = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  /* |f| < 2^-14: adding 0.5 (ulp 2^-24) rounds |f| to a multiple of 2^-24. */
  uint32_t sub = f2u(u2f(a) + 0.5f) - 0x3f000000u;
  /* Normal: rebias (127 -> 15), round the 13 dropped bits to even. */
  uint32_t nb = a - (112u << 23);
  uint32_t norm = (nb + 0xfffu + ((nb >> 13) & 1u)) >> 13;
  norm = sel(norm > 0x7c00u, 0x7c00u, norm);
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t r = sel(a > 0x7f800000u, nan, sel(a < 0x38800000u, sub, norm));
  return (uint16_t)(s | r);
}

ZR_INLINE float bf16_to_float(uint16_t b) { return u2f((uint32_t)b << 16); }

ZR_INLINE uint16_t float_to_bf16(float f) {
  uint32_t x = f2u(f);
  /* Overflow carries into the exponent and yields inf, as IEEE rounding does. */
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  return (uint16_t)sel((x & 0x7fffffffu) > 0x7f800000u, nan, r);
}

ZR_INLINE float e4m3_to_float(uint8_t v) {
  uint32_t s = (uint32_t)(v & 0x80u) << 24;
  uint32_t em = v & 0x7fu;
  uint32_t norm = (em << 20) + (120u << 23);
  uint32_t sub = f2u((float)(int32_t)em * 0x1p-9f);
  uint32_t r = sel(em == 0x7fu, 0x7fc00000u, sel(em < 8u, sub, norm));
  return u2f(r | s);
}

ZR_INLINE uint8_t float_to_e4m3(float f) {
  uint32_t x = f2u(f);
  uint32_t s = (x >> 24) & 0x80u;
  uint32_t a = x & 0x7fffffffu;
  /* |f| < 2^-6: adding 2^14 (ulp 2^-9) rounds to a multiple of 2^-9. */
  uint32_t sub = f2u(u2f(a) + 16384.0f) - 0x46800000u;
  uint32_t nb = a - (120u << 23);
  uint32_t norm = (nb + 0x7ffffu + ((nb >> 20) & 1u)) >> 20;
  /* Saturate: 0x7f is NaN, 0x7e is 448. Infinity saturates too. */
  norm = sel(norm > 0x7eu, 0x7eu, norm);
  uint32_t r = sel(a > 0x7f800000u, 0x7fu, sel(a < 0x3c800000u, sub, norm));
  return (uint8_t)(s | r);
}

ZR_INLINE float e5m2_to_float(uint8_t v) {
  /* e5m2 is the top byte of an fp16. */
  return half_to_float((uint16_t)(v << 8));
}

ZR_INLINE uint8_t float_to_e5m2(float f) {
  uint32_t x = f2u(f);
  uint32_t s = (x >> 24) & 0x80u;
  uint32_t a = x & 0x7fffffffu;
  /* |f| < 2^-14: adding 2^7 (ulp 2^-16) rounds to a multiple of 2^-16. */
  uint32_t sub = f2u(u2f(a) + 128.0f) - 0x43000000u;
  uint32_t nb = a - (112u << 23);
  uint32_t norm = (nb + 0xfffffu + ((nb >> 21) & 1u)) >> 21;
  norm = sel(norm > 0x7cu, 0x7cu, norm); /* overflow: inf */
  uint32_t r = sel(a > 0x7f800000u, 0x7eu, sel(a < 0x38800000u, sub, norm));
  return (uint8_t)(s | r);
}

float zcc_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t zcc_float_to_half(float f) { return float_to_half(f); }
float zcc_bf16_to_float(uint16_t b) { return bf16_to_float(b); }
uint16_t zcc_float_to_bf16(float f) { return float_to_bf16(f); }
float zcc_e4m3_to_float(uint8_t v) { return e4m3_to_float(v); }
uint8_t zcc_float_to_e4m3(float f) { return float_to_e4m3(f); }
float zcc_e5m2_to_float(uint8_t v) { return e5m2_to_float(v); }
uint8_t zcc_float_to_e5m2(float f) { return float_to_e5m2(f); }

/* ---- block conversions: narrow array <-> fp32 array ---- */

/* in/out may sit at any byte offset; the fp32 side is a local block. */
#define ZR_DEF_BLOCK_CVT(tag, ST, TOF, FROMF)                                 \
  typedef ST zr_##tag##_u_t __attribute__((aligned(1), may_alias));          \
  ZR_INLINE void ld_##tag##_gen(float *out, const void *in, size_t n) {       \
    const zr_##tag##_u_t *p = in;                                             \
    for (size_t i = 0; i < n; i++) out[i] = TOF(p[i]);                        \
  }                                                                           \
  ZR_INLINE void st_##tag##_gen(void *out, const float *in, size_t n) {       \
    zr_##tag##_u_t *p = out;                                                  \
    for (size_t i = 0; i < n; i++) p[i] = FROMF(in[i]);                       \
  }

ZR_DEF_BLOCK_CVT(h, uint16_t, half_to_float, float_to_half)
ZR_DEF_BLOCK_CVT(b, uint16_t, bf16_to_float, float_to_bf16)
ZR_DEF_BLOCK_CVT(e4, uint8_t, e4m3_to_float, float_to_e4m3)
ZR_DEF_BLOCK_CVT(e5, uint8_t, e5m2_to_float, float_to_e5m2)

#if ZR_HAVE_X86
ZR_AVX2 ZR_INLINE void ld_h_avx2(float *out, const void *in, size_t n) {
  const zr_h_u_t *p = in;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i))));
  for (; i < n; i++) out[i] = half_to_float(p[i]);
}

ZR_AVX2 ZR_INLINE void st_h_avx2(void *out, const float *in, size_t n) {
  zr_h_u_t *p = out;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(p + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++) p[i] = float_to_half(in[i]);
}

#define ld_b_avx2 ld_b_gen
#define st_b_avx2 st_b_gen
#define ld_e4_avx2 ld_e4_gen
#define st_e4_avx2 st_e4_gen
#define ld_e5_avx2 ld_e5_gen
#define st_e5_avx2 st_e5_gen
#endif

/* ---- element operations (u, v: the two operands) ---- */

/* Floats: NaN if either is NaN. */
#define ZR_FMAX(u, v) (((u) > (v) || (u) != (u)) ? (u) : (v))
#define ZR_FMIN(u, v) (((u) < (v) || (u) != (u)) ? (u) : (v))
#define ZR_IMAX(u, v) ((u) > (v) ? (u) : (v))
#define ZR_IMIN(u, v) ((u) < (v) ? (u) : (v))

/* ---- kernel bodies ---- */

/* nt: which outputs are written with streaming stores. */
enum { ZR_NT_NONE = 0, ZR_NT_DST = 1, ZR_NT_DST2 = 2, ZR_NT_BOTH = 3 };

typedef void (*zr_kernel_fn)(void *dst, void *dst2, const void *a,
                             const void *b, size_t n, int nt);

/*
 * One block of results (ZR_BLOCK_BYTES, in r) to dst. nt: with streaming
 * stores where dst is 16-byte aligned, which write the lines without
 * reading them first and leave them out of the cache (for outputs nobody
 * reads before the call returns; zcc_reduce2_nt).
 */
ZR_INLINE void zr_store_block(void *dst, const void *r, int nt) {
#if ZR_HAVE_X86
  if (nt && ((uintptr_t)dst & 15) == 0) {
    for (size_t i = 0; i < ZR_BLOCK_BYTES; i += 16)
      _mm_stream_si128((__m128i *)((char *)dst + i),
                       _mm_loadu_si128((const __m128i *)((const char *)r + i)));
    return;
  }
#endif
  (void)nt;
  memcpy(dst, r, ZR_BLOCK_BYTES);
}
typedef void (*zr_avg_fn)(void *dst, const void *src, size_t n, int nranks);

/*
 * Same type in and out: T holds the element, EXPR combines u and v. Loads
 * read a and b through byte-aligned views of T, the results go to a local
 * block, and a second loop stores the block: the sources are read before
 * dst is written, so dst may alias a or b.
 */
#define ZR_DIRECT_BODY(T, EXPR)                                               \
  {                                                                           \
    typedef T zr_u_t __attribute__((aligned(1), may_alias));                  \
    enum { B = ZR_BLOCK_BYTES / sizeof(T) };                                  \
    zr_u_t *pd = dst, *pd2 = dst2;                                            \
    const zr_u_t *pa = a, *pb = b;                                            \
    T r[B];                                                                   \
    for (; n >= B; n -= B) {                                                  \
      for (size_t i = 0; i < B; i++) {                                        \
        T u = pa[i], v = pb[i];                                               \
        r[i] = (T)(EXPR);                                                     \
      }                                                                       \
      if (nt & ZR_NT_DST) {                                                   \
        zr_store_block(pd, r, 1);                                             \
      } else {                                                                \
        for (size_t i = 0; i < B; i++) pd[i] = r[i];                          \
      }                                                                       \
      if (pd2) {                                                              \
        if (nt & ZR_NT_DST2)                                                  \
          zr_store_block(pd2, r, 1);                                          \
        else                                                                  \
          for (size_t i = 0; i < B; i++) pd2[i] = r[i];                       \
        pd2 += B;                                                             \
      }                                                                       \
      pa += B;                                                                \
      pb += B;                                                                \
      pd += B;                                                                \
    }                                                                         \
    /* the partial block: whole 32-byte vectors, then single elements */     \
    enum { S = 32 / sizeof(T) };                                              \
    for (; n >= S; n -= S) {                                                  \
      for (size_t i = 0; i < S; i++) {                                        \
        T u = pa[i], v = pb[i];                                               \
        r[i] = (T)(EXPR);                                                     \
      }                                                                       \
      for (size_t i = 0; i < S; i++) pd[i] = r[i];                            \
      if (pd2) {                                                              \
        for (size_t i = 0; i < S; i++) pd2[i] = r[i];                         \
        pd2 += S;                                                             \
      }                                                                       \
      pa += S;                                                                \
      pb += S;                                                                \
      pd += S;                                                                \
    }                                                                         \
    for (size_t i = 0; i < n; i++) {                                          \
      T u = pa[i], v = pb[i];                                                 \
      r[i] = (T)(EXPR);                                                       \
    }                                                                         \
    for (size_t i = 0; i < n; i++) pd[i] = r[i];                              \
    if (pd2)                                                                  \
      for (size_t i = 0; i < n; i++) pd2[i] = r[i];                           \
  }

/* Narrow floats: convert a block to fp32, combine, round back. */
#define ZR_NARROW_BODY(ST, LD, STF, EXPR)                                     \
  {                                                                           \
    (void)nt; /* narrow floats store as they convert */                       \
    enum { B = ZR_NARROW_BLOCK };                                             \
    unsigned char *pd = dst, *pd2 = dst2;                                     \
    const unsigned char *pa = a, *pb = b;                                     \
    float x[B], y[B];                                                         \
    for (; n >= B; n -= B) {                                                  \
      LD(x, pa, B);                                                           \
      LD(y, pb, B);                                                           \
      for (size_t i = 0; i < B; i++) {                                        \
        float u = x[i], v = y[i];                                             \
        x[i] = (EXPR);                                                        \
      }                                                                       \
      STF(pd, x, B);                                                          \
      if (pd2) {                                                              \
        memcpy(pd2, pd, B * sizeof(ST));                                      \
        pd2 += B * sizeof(ST);                                                \
      }                                                                       \
      pa += B * sizeof(ST);                                                   \
      pb += B * sizeof(ST);                                                   \
      pd += B * sizeof(ST);                                                   \
    }                                                                         \
    if (n) {                                                                  \
      LD(x, pa, n);                                                           \
      LD(y, pb, n);                                                           \
      for (size_t i = 0; i < n; i++) {                                        \
        float u = x[i], v = y[i];                                             \
        x[i] = (EXPR);                                                        \
      }                                                                       \
      STF(pd, x, n);                                                          \
      if (pd2) memcpy(pd2, pd, n * sizeof(ST));                               \
    }                                                                         \
  }

/* Avg finish on a same-type element: T element, EXPR divides u by nranks. */
#define ZR_AVG_DIRECT_BODY(T, EXPR)                                           \
  {                                                                           \
    typedef T zr_u_t __attribute__((aligned(1), may_alias));                  \
    enum { B = ZR_BLOCK_BYTES / sizeof(T) };                                  \
    zr_u_t *pd = dst;                                                         \
    const zr_u_t *ps = src;                                                   \
    T r[B];                                                                   \
    for (; n >= B; n -= B) {                                                  \
      for (size_t i = 0; i < B; i++) {                                        \
        T u = ps[i];                                                          \
        r[i] = (T)(EXPR);                                                     \
      }                                                                       \
      for (size_t i = 0; i < B; i++) pd[i] = r[i];                            \
      ps += B;                                                                \
      pd += B;                                                                \
    }                                                                         \
    for (size_t i = 0; i < n; i++) {                                          \
      T u = ps[i];                                                            \
      r[i] = (T)(EXPR);                                                       \
    }                                                                         \
    for (size_t i = 0; i < n; i++) pd[i] = r[i];                              \
  }

#define ZR_AVG_NARROW_BODY(ST, LD, STF)                                       \
  {                                                                           \
    enum { B = ZR_NARROW_BLOCK };                                             \
    unsigned char *pd = dst;                                                  \
    const unsigned char *ps = src;                                            \
    float x[B];                                                               \
    float div = (float)nranks;                                                \
    while (n) {                                                               \
      size_t m = n < B ? n : B;                                               \
      LD(x, ps, m);                                                           \
      for (size_t i = 0; i < m; i++) x[i] = x[i] / div;                       \
      STF(pd, x, m);                                                          \
      ps += m * sizeof(ST);                                                   \
      pd += m * sizeof(ST);                                                   \
      n -= m;                                                                 \
    }                                                                         \
  }

/*
 * The kernels. Integer sums and products run on the unsigned type (wrap
 * without undefined behaviour) and are shared by the signed and unsigned
 * variants; max and min use the type's own signedness.
 * X(name, element type, expression)
 */
#define ZR_DIRECT_LIST(X)                                                     \
  X(u8_sum, uint8_t, u + v)                                                   \
  X(u8_prod, uint8_t, (unsigned)u * (unsigned)v)                              \
  X(i8_max, int8_t, ZR_IMAX(u, v))                                            \
  X(i8_min, int8_t, ZR_IMIN(u, v))                                            \
  X(u8_max, uint8_t, ZR_IMAX(u, v))                                           \
  X(u8_min, uint8_t, ZR_IMIN(u, v))                                           \
  X(u32_sum, uint32_t, u + v)                                                 \
  X(u32_prod, uint32_t, u * v)                                                \
  X(i32_max, int32_t, ZR_IMAX(u, v))                                          \
  X(i32_min, int32_t, ZR_IMIN(u, v))                                          \
  X(u32_max, uint32_t, ZR_IMAX(u, v))                                         \
  X(u32_min, uint32_t, ZR_IMIN(u, v))                                         \
  X(u64_sum, uint64_t, u + v)                                                 \
  X(u64_prod, uint64_t, u * v)                                                \
  X(i64_max, int64_t, ZR_IMAX(u, v))                                          \
  X(i64_min, int64_t, ZR_IMIN(u, v))                                          \
  X(u64_max, uint64_t, ZR_IMAX(u, v))                                         \
  X(u64_min, uint64_t, ZR_IMIN(u, v))                                         \
  X(f32_sum, float, u + v)                                                    \
  X(f32_prod, float, u * v)                                                   \
  X(f32_max, float, ZR_FMAX(u, v))                                            \
  X(f32_min, float, ZR_FMIN(u, v))                                            \
  X(f64_sum, double, u + v)                                                   \
  X(f64_prod, double, u * v)                                                  \
  X(f64_max, double, ZR_FMAX(u, v))                                           \
  X(f64_min, double, ZR_FMIN(u, v))

/* X(name, storage type, conversion tag, expression) */
#define ZR_NARROW_LIST(X)                                                     \
  X(h_sum, uint16_t, h, u + v)                                                \
  X(h_prod, uint16_t, h, u * v)                                               \
  X(h_max, uint16_t, h, ZR_FMAX(u, v))                                        \
  X(h_min, uint16_t, h, ZR_FMIN(u, v))                                        \
  X(b_sum, uint16_t, b, u + v)                                                \
  X(b_prod, uint16_t, b, u * v)                                               \
  X(b_max, uint16_t, b, ZR_FMAX(u, v))                                        \
  X(b_min, uint16_t, b, ZR_FMIN(u, v))                                        \
  X(e4_sum, uint8_t, e4, u + v)                                               \
  X(e4_prod, uint8_t, e4, u * v)                                              \
  X(e4_max, uint8_t, e4, ZR_FMAX(u, v))                                       \
  X(e4_min, uint8_t, e4, ZR_FMIN(u, v))                                       \
  X(e5_sum, uint8_t, e5, u + v)                                               \
  X(e5_prod, uint8_t, e5, u * v)                                              \
  X(e5_max, uint8_t, e5, ZR_FMAX(u, v))                                       \
  X(e5_min, uint8_t, e5, ZR_FMIN(u, v))

/* Integer avg: C division truncates toward zero. */
#define ZR_AVG_DIRECT_LIST(X)                                                 \
  X(avg_i8, int8_t, u / nranks)                                               \
  X(avg_u8, uint8_t, u / nranks)                                              \
  X(avg_i32, int32_t, u / nranks)                                             \
  X(avg_u32, uint32_t, u / (uint32_t)nranks)                                  \
  X(avg_i64, int64_t, u / (int64_t)nranks)                                    \
  X(avg_u64, uint64_t, u / (uint64_t)nranks)                                  \
  X(avg_f32, float, u / (float)nranks)                                        \
  X(avg_f64, double, u / (double)nranks)

#define ZR_AVG_NARROW_LIST(X)                                                 \
  X(avg_h, uint16_t, h)                                                       \
  X(avg_b, uint16_t, b)                                                       \
  X(avg_e4, uint8_t, e4)                                                      \
  X(avg_e5, uint8_t, e5)

#define ZR_KARGS                                                              \
  (void *dst, void *dst2, const void *a, const void *b, size_t n, int nt)
#define ZR_AARGS (void *dst, const void *src, size_t n, int nranks)

/* One build of every kernel: SUF names it, ATTR sets its target. */
#define ZR_DEF_DIRECT(SUF, ATTR, name, T, EXPR)                               \
  ATTR static void name##_##SUF ZR_KARGS ZR_DIRECT_BODY(T, EXPR)
#define ZR_DEF_NARROW(SUF, ATTR, name, ST, tag, EXPR)                         \
  ATTR static void name##_##SUF ZR_KARGS                                      \
      ZR_NARROW_BODY(ST, ld_##tag##_##SUF, st_##tag##_##SUF, EXPR)
#define ZR_DEF_AVG_DIRECT(SUF, ATTR, name, T, EXPR)                           \
  ATTR static void name##_##SUF ZR_AARGS ZR_AVG_DIRECT_BODY(T, EXPR)
#define ZR_DEF_AVG_NARROW(SUF, ATTR, name, ST, tag)                           \
  ATTR static void name##_##SUF ZR_AARGS                                      \
      ZR_AVG_NARROW_BODY(ST, ld_##tag##_##SUF, st_##tag##_##SUF)

#define ZR_GEN_DIRECT(name, T, EXPR) ZR_DEF_DIRECT(gen, , name, T, EXPR)
#define ZR_GEN_NARROW(name, ST, tag, EXPR)                                    \
  ZR_DEF_NARROW(gen, , name, ST, tag, EXPR)
#define ZR_GEN_AVG_DIRECT(name, T, EXPR) ZR_DEF_AVG_DIRECT(gen, , name, T, EXPR)
#define ZR_GEN_AVG_NARROW(name, ST, tag) ZR_DEF_AVG_NARROW(gen, , name, ST, tag)

ZR_DIRECT_LIST(ZR_GEN_DIRECT)
ZR_NARROW_LIST(ZR_GEN_NARROW)
ZR_AVG_DIRECT_LIST(ZR_GEN_AVG_DIRECT)
ZR_AVG_NARROW_LIST(ZR_GEN_AVG_NARROW)

#if ZR_HAVE_X86
#define ZR_X86_DIRECT(name, T, EXPR) ZR_DEF_DIRECT(avx2, ZR_AVX2, name, T, EXPR)
#define ZR_X86_NARROW(name, ST, tag, EXPR)                                    \
  ZR_DEF_NARROW(avx2, ZR_AVX2, name, ST, tag, EXPR)
#define ZR_X86_AVG_DIRECT(name, T, EXPR)                                      \
  ZR_DEF_AVG_DIRECT(avx2, ZR_AVX2, name, T, EXPR)
#define ZR_X86_AVG_NARROW(name, ST, tag)                                      \
  ZR_DEF_AVG_NARROW(avx2, ZR_AVX2, name, ST, tag)

ZR_DIRECT_LIST(ZR_X86_DIRECT)
ZR_NARROW_LIST(ZR_X86_NARROW)
ZR_AVG_DIRECT_LIST(ZR_X86_AVG_DIRECT)
ZR_AVG_NARROW_LIST(ZR_X86_AVG_NARROW)
#endif

/* Dispatch tables, [type][op]; avg reduces as sum. */
#define ZR_TABLE(SUF)                                                         \
  {                                                                           \
    [zccInt8] = {u8_sum_##SUF, u8_prod_##SUF, i8_max_##SUF, i8_min_##SUF,     \
                 u8_sum_##SUF},                                               \
    [zccUint8] = {u8_sum_##SUF, u8_prod_##SUF, u8_max_##SUF, u8_min_##SUF,    \
                  u8_sum_##SUF},                                              \
    [zccInt32] = {u32_sum_##SUF, u32_prod_##SUF, i32_max_##SUF,               \
                  i32_min_##SUF, u32_sum_##SUF},                              \
    [zccUint32] = {u32_sum_##SUF, u32_prod_##SUF, u32_max_##SUF,              \
                   u32_min_##SUF, u32_sum_##SUF},                             \
    [zccInt64] = {u64_sum_##SUF, u64_prod_##SUF, i64_max_##SUF,               \
                  i64_min_##SUF, u64_sum_##SUF},                              \
    [zccUint64] = {u64_sum_##SUF, u64_prod_##SUF, u64_max_##SUF,              \
                   u64_min_##SUF, u64_sum_##SUF},                             \
    [zccFloat16] = {h_sum_##SUF, h_prod_##SUF, h_max_##SUF, h_min_##SUF,      \
                    h_sum_##SUF},                                             \
    [zccFloat32] = {f32_sum_##SUF, f32_prod_##SUF, f32_max_##SUF,             \
                    f32_min_##SUF, f32_sum_##SUF},                            \
    [zccFloat64] = {f64_sum_##SUF, f64_prod_##SUF, f64_max_##SUF,             \
                    f64_min_##SUF, f64_sum_##SUF},                            \
    [zccBfloat16] = {b_sum_##SUF, b_prod_##SUF, b_max_##SUF, b_min_##SUF,     \
                     b_sum_##SUF},                                            \
    [zccFloat8e4m3] = {e4_sum_##SUF, e4_prod_##SUF, e4_max_##SUF,             \
                       e4_min_##SUF, e4_sum_##SUF},                           \
    [zccFloat8e5m2] = {e5_sum_##SUF, e5_prod_##SUF, e5_max_##SUF,             \
                       e5_min_##SUF, e5_sum_##SUF},                           \
  }

#define ZR_AVG_TABLE(SUF)                                                     \
  {                                                                           \
    [zccInt8] = avg_i8_##SUF, [zccUint8] = avg_u8_##SUF,                      \
    [zccInt32] = avg_i32_##SUF, [zccUint32] = avg_u32_##SUF,                  \
    [zccInt64] = avg_i64_##SUF, [zccUint64] = avg_u64_##SUF,                  \
    [zccFloat16] = avg_h_##SUF, [zccFloat32] = avg_f32_##SUF,                 \
    [zccFloat64] = avg_f64_##SUF, [zccBfloat16] = avg_b_##SUF,                \
    [zccFloat8e4m3] = avg_e4_##SUF, [zccFloat8e5m2] = avg_e5_##SUF,           \
  }

static const zr_kernel_fn kernels_gen[zccNumTypes][zccNumOps] = ZR_TABLE(gen);
static const zr_avg_fn avg_gen[zccNumTypes] = ZR_AVG_TABLE(gen);
#if ZR_HAVE_X86
static const zr_kernel_fn kernels_avx2[zccNumTypes][zccNumOps] =
    ZR_TABLE(avx2);
static const zr_avg_fn avg_avx2[zccNumTypes] = ZR_AVG_TABLE(avx2);
#endif

/* 1 when the AVX2/F16C build may run: the CPU has it and ZCC_REDUCE_SIMD allows. */
static int use_avx2(void) {
#if ZR_HAVE_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
         zcc_param_reduce_simd() != 0;
#else
  return 0;
#endif
}

static void reduce2(void *dst, void *dst2, const void *a, const void *b, size_t count,
                    zccDataType_t type, zccRedOp_t op, int nt) {
  /* Callers validate; an invalid type or op writes nothing. */
  if (count == 0 || (unsigned)type >= zccNumTypes || (unsigned)op >= zccNumOps)
    return;
#if ZR_HAVE_X86
  if (use_avx2()) {
    kernels_avx2[type][op](dst, dst2, a, b, count, nt);
    return;
  }
#endif
  (void)use_avx2;
  kernels_gen[type][op](dst, dst2, a, b, count, nt);
}

void zcc_reduce2(void *dst, void *dst2, const void *a, const void *b,
                 size_t count, zccDataType_t type, zccRedOp_t op) {
  reduce2(dst, dst2, a, b, count, type, op, ZR_NT_NONE);
}

/* After streaming stores: they reach memory before any store that follows. */
static void stream_fence(void) {
#if ZR_HAVE_X86
  _mm_sfence();
#endif
}

void zcc_reduce2_nt(void *dst, void *dst2, const void *a, const void *b,
                    size_t count, zccDataType_t type, zccRedOp_t op) {
  reduce2(dst, dst2, a, b, count, type, op, ZR_NT_BOTH);
  stream_fence();
}

void zcc_reduce2_ntdst(void *dst, void *dst2, const void *a, const void *b,
                       size_t count, zccDataType_t type, zccRedOp_t op) {
  reduce2(dst, dst2, a, b, count, type, op, ZR_NT_DST);
  stream_fence();
}

void zcc_reduce2_ntdst2(void *dst, void *dst2, const void *a, const void *b,
                        size_t count, zccDataType_t type, zccRedOp_t op) {
  reduce2(dst, dst2, a, b, count, type, op, ZR_NT_DST2);
  stream_fence();
}

void zcc_copy_nt(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
#if ZR_HAVE_X86
  size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* to zr_store_block's alignment */
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= ZR_BLOCK_BYTES; n -= ZR_BLOCK_BYTES, d += ZR_BLOCK_BYTES, s += ZR_BLOCK_BYTES)
    zr_store_block(d, s, 1);
#endif
  memcpy(d, s, n);
  stream_fence();
}

void zcc_reduce(void *dst, const void *a, const void *b, size_t count,
                zccDataType_t type, zccRedOp_t op) {
  zcc_reduce2(dst, NULL, a, b, count, type, op);
}

void zcc_reduce_finish_avg(void *dst, const void *src, size_t count,
                           zccDataType_t type, int nranks) {
  if (count == 0 || (unsigned)type >= zccNumTypes) return;
  /* nranks < 1 cannot come from a communicator; treat it as 1 (a copy). */
  if (nranks < 1) nranks = 1;
#if ZR_HAVE_X86
  if (use_avx2()) {
    avg_avx2[type](dst, src, count, nranks);
    return;
  }
#endif
  avg_gen[type](dst, src, count, nranks);
}

/* Scaling for pre-multiplied sums: plain loops, one conversion per element. */
#define ZR_SCALE_LOOP(T, MUL)                                                 \
  do {                                                                        \
    T s_;                                                                     \
    memcpy(&s_, scalar, sizeof(T));                                           \
    for (size_t i = 0; i < count; i++) {                                      \
      T x_;                                                                   \
      memcpy(&x_, (const char *)src + i * sizeof(T), sizeof(T));              \
      x_ = (T)(MUL);                                                          \
      memcpy((char *)dst + i * sizeof(T), &x_, sizeof(T));                    \
    }                                                                         \
  } while (0)

#define ZR_SCALE_NARROW(T, TO_F, FROM_F)                                      \
  do {                                                                        \
    T s_;                                                                     \
    memcpy(&s_, scalar, sizeof(T));                                           \
    float fs_ = TO_F(s_);                                                     \
    for (size_t i = 0; i < count; i++) {                                      \
      T x_;                                                                   \
      memcpy(&x_, (const char *)src + i * sizeof(T), sizeof(T));              \
      x_ = FROM_F(TO_F(x_) * fs_);                                            \
      memcpy((char *)dst + i * sizeof(T), &x_, sizeof(T));                    \
    }                                                                         \
  } while (0)

void zcc_reduce_scale(void *dst, const void *src, size_t count,
                      zccDataType_t type, const void *scalar) {
  if (count == 0) return;
  switch (type) {
  case zccInt8:
  case zccUint8: ZR_SCALE_LOOP(uint8_t, (unsigned)x_ * (unsigned)s_); break;
  case zccInt32:
  case zccUint32: ZR_SCALE_LOOP(uint32_t, x_ * s_); break;
  case zccInt64:
  case zccUint64: ZR_SCALE_LOOP(uint64_t, x_ * s_); break;
  case zccFloat32: ZR_SCALE_LOOP(float, x_ * s_); break;
  case zccFloat64: ZR_SCALE_LOOP(double, x_ * s_); break;
  case zccFloat16: ZR_SCALE_NARROW(uint16_t, zcc_half_to_float, zcc_float_to_half); break;
  case zccBfloat16: ZR_SCALE_NARROW(uint16_t, zcc_bf16_to_float, zcc_float_to_bf16); break;
  case zccFloat8e4m3: ZR_SCALE_NARROW(uint8_t, zcc_e4m3_to_float, zcc_float_to_e4m3); break;
  case zccFloat8e5m2: ZR_SCALE_NARROW(uint8_t, zcc_e5m2_to_float, zcc_float_to_e5m2); break;
  default: break; /* callers validate */
  }
}
