/*
 * The tests' reference arithmetic: see ztest_types.h.
 *
 * Input ranges (n ranks), chosen so that every partial result of any
 * reduction order is exact in the type:
 *   sum, avg  signed ints: [-max/n, max/n]; unsigned: [0, max/n];
 *             floats: integers k with |k| <= L/n, where L is the largest
 *             integer below which every integer is exact (e5m2 8, e4m3 16,
 *             bf16 256, fp16 2048); fp32 and fp64 use k / 16 with
 *             L = 2^24 and 2^53.
 *   prod      floats: {-1, 1, 2, 0.5}; signed ints: {-1, 1, 2};
 *             unsigned: {1, 2}; in int8 (uint8) only ranks below 6 (7) may
 *             draw 2, so that |product| stays representable.
 *   max, min  any bit pattern of the type except NaN, with -0 mapped to +0
 *             (so that equal values have equal bits).
 */
#include "ztest_types.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ztest.h"

typedef enum { K_SINT, K_UINT, K_FLOAT } kind_t;

static float tab_fp16[65536];
static float tab_bf16[65536];
static float tab_e4m3[256];
static float tab_e5m2[256];
#define INT_CACHE 4096
static uint16_t int_fp16[2 * INT_CACHE + 1];
static uint16_t int_bf16[2 * INT_CACHE + 1];
static uint8_t int_e4m3[2 * INT_CACHE + 1];
static uint8_t int_e5m2[2 * INT_CACHE + 1];

typedef struct {
  int ebits, mbits, bias, has_inf;
} mini_fmt_t;

static const mini_fmt_t mini_fmts[4] = {
    [ZT_FP16] = {5, 10, 15, 1},
    [ZT_BF16] = {8, 7, 127, 1},
    [ZT_E4M3] = {4, 3, 7, 0},
    [ZT_E5M2] = {5, 2, 15, 1},
};

double zt_mini_decode(zt_mini_t f, uint32_t bits) {
  const mini_fmt_t *m = &mini_fmts[f];
  uint32_t emask = (1u << m->ebits) - 1, mmask = (1u << m->mbits) - 1;
  int sign = (bits >> (m->ebits + m->mbits)) & 1;
  uint32_t e = (bits >> m->mbits) & emask, mant = bits & mmask;
  double v;
  if (m->has_inf && e == emask)
    v = mant == 0 ? INFINITY : NAN;
  else if (!m->has_inf && e == emask && mant == mmask)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)mant, 1 - m->bias - m->mbits);
  else
    v = ldexp((double)(mant + (1u << m->mbits)), (int)e - m->bias - m->mbits);
  return sign ? -v : v;
}

static double mini_max_finite(const mini_fmt_t *m) {
  int emax_field = m->has_inf ? (1 << m->ebits) - 2 : (1 << m->ebits) - 1;
  /* Without infinity the all-ones mantissa of the top binade is NaN. */
  double top_mant = m->has_inf ? ldexp(1.0, m->mbits + 1) - 1
                               : ldexp(1.0, m->mbits + 1) - 2;
  return ldexp(top_mant, emax_field - m->bias - m->mbits);
}

uint32_t zt_mini_encode(zt_mini_t f, double v) {
  const mini_fmt_t *m = &mini_fmts[f];
  uint32_t emask = (1u << m->ebits) - 1, mmask = (1u << m->mbits) - 1;
  uint32_t sign = signbit(v) ? 1u << (m->ebits + m->mbits) : 0;
  double a = fabs(v), maxfin = mini_max_finite(m);
  int emin = 1 - m->bias;
  if (isnan(v))
    return m->has_inf ? (emask << m->mbits) | (1u << (m->mbits - 1))
                      : (emask << m->mbits) | mmask;
  if (a == 0)
    return sign;
  double r;
  if (isinf(a)) {
    r = INFINITY;
  } else {
    int ex;
    frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
    int e = ex - 1 < emin ? emin : ex - 1;
    double q = ldexp(1.0, e - m->mbits);
    r = nearbyint(a / q) * q; /* default rounding mode: nearest, ties to even */
  }
  if (r > maxfin) {
    if (!m->has_inf)
      r = maxfin;
    else
      return sign | (emask << m->mbits);
  }
  if (r == 0)
    return sign;
  if (r >= ldexp(1.0, emin)) {
    int ex;
    frexp(r, &ex);
    int e = ex - 1;
    uint32_t mant = (uint32_t)(ldexp(r, m->mbits - e) - ldexp(1.0, m->mbits));
    return sign | ((uint32_t)(e + m->bias) << m->mbits) | mant;
  }
  return sign | (uint32_t)ldexp(r, m->bias - 1 + m->mbits);
}

void zt_types_init(void) {
  for (uint32_t b = 0; b < 65536; b++) {
    tab_fp16[b] = (float)zt_mini_decode(ZT_FP16, b);
    tab_bf16[b] = (float)zt_mini_decode(ZT_BF16, b);
  }
  for (uint32_t b = 0; b < 256; b++) {
    tab_e4m3[b] = (float)zt_mini_decode(ZT_E4M3, b);
    tab_e5m2[b] = (float)zt_mini_decode(ZT_E5M2, b);
  }
  for (int k = -INT_CACHE; k <= INT_CACHE; k++) {
    int_fp16[k + INT_CACHE] = (uint16_t)zt_mini_encode(ZT_FP16, k);
    int_bf16[k + INT_CACHE] = (uint16_t)zt_mini_encode(ZT_BF16, k);
    int_e4m3[k + INT_CACHE] = (uint8_t)zt_mini_encode(ZT_E4M3, k);
    int_e5m2[k + INT_CACHE] = (uint8_t)zt_mini_encode(ZT_E5M2, k);
  }
}

#define ZT_INLINE static inline __attribute__((always_inline))

ZT_INLINE size_t tsize(zccDataType_t t) {
  switch (t) {
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

size_t zt_type_size(zccDataType_t t) { return tsize(t); }

const char *zt_type_name(zccDataType_t t) {
  static const char *names[] = {"int8",    "uint8",   "int32",   "uint32",
                                "int64",   "uint64",  "float16", "float32",
                                "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return (unsigned)t < zccNumTypes ? names[t] : "invalid";
}

const char *zt_op_name(zccRedOp_t op) {
  static const char *names[] = {"sum", "prod", "max", "min", "avg"};
  if (op == ZT_OP_NONE)
    return "none";
  return (unsigned)op < zccNumOps ? names[op] : "invalid";
}

ZT_INLINE kind_t kind_of(zccDataType_t t) {
  switch (t) {
  case zccInt8:
  case zccInt32:
  case zccInt64:
    return K_SINT;
  case zccUint8:
  case zccUint32:
  case zccUint64:
    return K_UINT;
  default:
    return K_FLOAT;
  }
}

ZT_INLINE int64_t smax_of(zccDataType_t t) {
  return t == zccInt8 ? INT8_MAX : t == zccInt32 ? INT32_MAX : INT64_MAX;
}

ZT_INLINE uint64_t umax_of(zccDataType_t t) {
  return t == zccUint8 ? UINT8_MAX : t == zccUint32 ? UINT32_MAX : UINT64_MAX;
}

ZT_INLINE uint64_t ld_bits(zccDataType_t t, const void *p, size_t i) {
  const char *c = p;
  switch (tsize(t)) {
  case 1: {
    uint8_t v;
    memcpy(&v, c + i, 1);
    return v;
  }
  case 2: {
    uint16_t v;
    memcpy(&v, c + 2 * i, 2);
    return v;
  }
  case 4: {
    uint32_t v;
    memcpy(&v, c + 4 * i, 4);
    return v;
  }
  default: {
    uint64_t v;
    memcpy(&v, c + 8 * i, 8);
    return v;
  }
  }
}

ZT_INLINE void st_bits(zccDataType_t t, void *p, size_t i, uint64_t bits) {
  char *c = p;
  switch (tsize(t)) {
  case 1: {
    uint8_t v = (uint8_t)bits;
    memcpy(c + i, &v, 1);
    break;
  }
  case 2: {
    uint16_t v = (uint16_t)bits;
    memcpy(c + 2 * i, &v, 2);
    break;
  }
  case 4: {
    uint32_t v = (uint32_t)bits;
    memcpy(c + 4 * i, &v, 4);
    break;
  }
  default:
    memcpy(c + 8 * i, &bits, 8);
    break;
  }
}

ZT_INLINE int64_t ld_s(zccDataType_t t, const void *p, size_t i) {
  uint64_t b = ld_bits(t, p, i);
  switch (t) {
  case zccInt8:
    return (int8_t)(uint8_t)b;
  case zccInt32:
    return (int32_t)(uint32_t)b;
  default:
    return (int64_t)b;
  }
}

ZT_INLINE uint64_t ld_u(zccDataType_t t, const void *p, size_t i) {
  return ld_bits(t, p, i);
}

ZT_INLINE double ld_f(zccDataType_t t, const void *p, size_t i) {
  uint64_t b = ld_bits(t, p, i);
  switch (t) {
  case zccFloat16:
    return tab_fp16[b];
  case zccBfloat16:
    return tab_bf16[b];
  case zccFloat8e4m3:
    return tab_e4m3[b];
  case zccFloat8e5m2:
    return tab_e5m2[b];
  case zccFloat32: {
    uint32_t w = (uint32_t)b;
    float f;
    memcpy(&f, &w, 4);
    return f;
  }
  default: {
    double d;
    memcpy(&d, &b, 8);
    return d;
  }
  }
}

ZT_INLINE uint64_t enc_f(zccDataType_t t, double v) {
  int small = v >= -INT_CACHE && v <= INT_CACHE && v == (double)(int)v;
  int k = small ? (int)v + INT_CACHE : 0;
  switch (t) {
  case zccFloat16:
    return small ? int_fp16[k] : zt_mini_encode(ZT_FP16, v);
  case zccBfloat16:
    return small ? int_bf16[k] : zt_mini_encode(ZT_BF16, v);
  case zccFloat8e4m3:
    return small ? int_e4m3[k] : zt_mini_encode(ZT_E4M3, v);
  case zccFloat8e5m2:
    return small ? int_e5m2[k] : zt_mini_encode(ZT_E5M2, v);
  case zccFloat32: {
    float f = (float)v;
    uint32_t w;
    memcpy(&w, &f, 4);
    return w;
  }
  default: {
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
  }
  }
}

/* Encoding of an integer |k| <= INT_CACHE in a narrow float type. */
ZT_INLINE uint64_t enc_small_int(zccDataType_t t, int k) {
  switch (t) {
  case zccFloat16:
    return int_fp16[k + INT_CACHE];
  case zccBfloat16:
    return int_bf16[k + INT_CACHE];
  case zccFloat8e4m3:
    return int_e4m3[k + INT_CACHE];
  default:
    return int_e5m2[k + INT_CACHE];
  }
}

/* Small negative zero fix: +0 for -0 so that equal values have equal bits. */
ZT_INLINE uint64_t fix_float_bits(zccDataType_t t, uint64_t bits, int *nan) {
  size_t sz = tsize(t);
  double v;
  uint64_t signbit = 1ull << (8 * sz - 1);
  char tmp[8];
  memcpy(tmp, &bits, 8);
  v = ld_f(t, tmp, 0);
  *nan = isnan(v);
  if (v == 0 && (bits & signbit))
    bits = 0;
  return bits;
}

/* splitmix64, as zt_rand, inlined into the generators. */
ZT_INLINE uint64_t rnd(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ZT_INLINE int64_t rand_range_s(uint64_t *s, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* 0: the full 2^64 */
  uint64_t r = rnd(s);
  /* multiply-high range reduction: no division per element */
  return (int64_t)((uint64_t)lo + (span ? (uint64_t)(((unsigned __int128)r * span) >> 64) : r));
}

ZT_INLINE void gen_impl(zccDataType_t t, zccRedOp_t op, int nranks, int rank,
                        uint64_t seed, void *buf, size_t count) {
  uint64_t s = seed;
  size_t sz = tsize(t);
  kind_t k = kind_of(t);
  if (op == ZT_OP_NONE) {
    char *c = buf;
    size_t bytes = count * sz, i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t r = rnd(&s);
      memcpy(c + i, &r, 8);
    }
    if (i < bytes) {
      uint64_t r = rnd(&s);
      memcpy(c + i, &r, bytes - i);
    }
    return;
  }
  if (op == zccMax || op == zccMin) {
    for (size_t i = 0; i < count; i++) {
      uint64_t b = rnd(&s);
      if (k == K_FLOAT) {
        int nan;
        if (sz < 8)
          b &= (1ull << (8 * sz)) - 1;
        b = fix_float_bits(t, b, &nan);
        while (nan) {
          b = rnd(&s);
          if (sz < 8)
            b &= (1ull << (8 * sz)) - 1;
          b = fix_float_bits(t, b, &nan);
        }
      }
      st_bits(t, buf, i, b);
    }
    return;
  }
  if (op == zccProd) {
    for (size_t i = 0; i < count; i++) {
      uint64_t r = rnd(&s) % 4;
      if (k == K_FLOAT) {
        static const double vals[4] = {-1.0, 1.0, 2.0, 0.5};
        st_bits(t, buf, i, enc_f(t, vals[r]));
      } else if (k == K_SINT) {
        int cap = t == zccInt8 ? 6 : 64;
        int64_t v = r == 0 ? -1 : (r == 3 && rank < cap) ? 2 : 1;
        st_bits(t, buf, i, (uint64_t)v);
      } else {
        int cap = t == zccUint8 ? 7 : 64;
        st_bits(t, buf, i, (r >= 2 && rank < cap) ? 2 : 1);
      }
    }
    return;
  }
  /* sum and avg */
  if (k == K_SINT) {
    int64_t m = smax_of(t) / nranks;
    for (size_t i = 0; i < count; i++)
      st_bits(t, buf, i, (uint64_t)rand_range_s(&s, -m, m));
  } else if (k == K_UINT) {
    uint64_t m = umax_of(t) / (uint64_t)nranks;
    for (size_t i = 0; i < count; i++) {
      uint64_t r = rnd(&s);
      st_bits(t, buf, i, m == UINT64_MAX ? r : (uint64_t)(((unsigned __int128)r * (m + 1)) >> 64));
    }
  } else {
    int64_t lim;
    double scale = 1.0;
    switch (t) {
    case zccFloat8e5m2:
      lim = 8;
      break;
    case zccFloat8e4m3:
      lim = 16;
      break;
    case zccBfloat16:
      lim = 256;
      break;
    case zccFloat16:
      lim = 2048;
      break;
    case zccFloat32:
      lim = 1ll << 24;
      scale = 1.0 / 16;
      break;
    default:
      lim = 1ll << 53;
      scale = 1.0 / 16;
      break;
    }
    int64_t m = lim / nranks;
    if (scale == 1.0) {
      /* narrow floats: |v| <= 2048, straight from the integer table */
      for (size_t i = 0; i < count; i++) {
        int64_t v = rand_range_s(&s, -m, m);
        st_bits(t, buf, i, enc_small_int(t, (int)v));
      }
    } else {
      for (size_t i = 0; i < count; i++) {
        int64_t v = rand_range_s(&s, -m, m);
        st_bits(t, buf, i, enc_f(t, (double)v * scale));
      }
    }
  }
}

ZT_INLINE void ref_impl(zccDataType_t t, zccRedOp_t op, int nranks,
                        const void *const *in, void *out, size_t lo, size_t hi) {
  kind_t k = kind_of(t);
  for (size_t i = lo; i < hi; i++) {
    if (k == K_SINT) {
      int64_t acc = ld_s(t, in[0], i);
      for (int r = 1; r < nranks; r++) {
        int64_t v = ld_s(t, in[r], i);
        switch (op) {
        case zccProd:
          acc *= v;
          break;
        case zccMax:
          acc = v > acc ? v : acc;
          break;
        case zccMin:
          acc = v < acc ? v : acc;
          break;
        default:
          acc += v;
          break;
        }
      }
      if (op == zccAvg)
        acc /= nranks;
      st_bits(t, out, i, (uint64_t)acc);
    } else if (k == K_UINT) {
      uint64_t acc = ld_u(t, in[0], i);
      for (int r = 1; r < nranks; r++) {
        uint64_t v = ld_u(t, in[r], i);
        switch (op) {
        case zccProd:
          acc *= v;
          break;
        case zccMax:
          acc = v > acc ? v : acc;
          break;
        case zccMin:
          acc = v < acc ? v : acc;
          break;
        default:
          acc += v;
          break;
        }
      }
      if (op == zccAvg)
        acc /= (uint64_t)nranks;
      st_bits(t, out, i, acc);
    } else if (op == zccMax || op == zccMin) {
      int best = 0;
      double bv = ld_f(t, in[0], i);
      for (int r = 1; r < nranks; r++) {
        double v = ld_f(t, in[r], i);
        if (op == zccMax ? v > bv : v < bv) {
          bv = v;
          best = r;
        }
      }
      st_bits(t, out, i, ld_bits(t, in[best], i));
    } else {
      double acc = ld_f(t, in[0], i);
      for (int r = 1; r < nranks; r++) {
        double v = ld_f(t, in[r], i);
        acc = op == zccProd ? acc * v : acc + v;
      }
      if (op == zccAvg) {
        if (t == zccFloat64) {
          acc = acc / (double)nranks;
        } else {
          float q = (float)acc / (float)nranks;
          acc = q;
        }
      }
      st_bits(t, out, i, enc_f(t, acc));
    }
  }
}

/* Instantiate an always-inline body once per datatype, so that the
 * per-element switches on the type fold away. */
#define ZT_FOR_EACH_TYPE_(X)                                                    \
  X(zccInt8) X(zccUint8) X(zccInt32) X(zccUint32) X(zccInt64) X(zccUint64)      \
  X(zccFloat16) X(zccFloat32) X(zccFloat64) X(zccBfloat16) X(zccFloat8e4m3)     \
  X(zccFloat8e5m2)

void zt_gen(zccDataType_t t, zccRedOp_t op, int nranks, int rank,
            uint64_t seed, void *buf, size_t count) {
  switch (t) {
#define ZT_GEN_CASE_(T)                                                        \
  case T:                                                                      \
    gen_impl(T, op, nranks, rank, seed, buf, count);                           \
    break;
    ZT_FOR_EACH_TYPE_(ZT_GEN_CASE_)
#undef ZT_GEN_CASE_
  default:
    break;
  }
}

void zt_ref_reduce(zccDataType_t t, zccRedOp_t op, int nranks,
                   const void *const *in, void *out, size_t lo, size_t hi) {
  switch (t) {
#define ZT_REF_CASE_(T)                                                        \
  case T:                                                                      \
    switch (op) {                                                              \
    case zccSum:                                                               \
      ref_impl(T, zccSum, nranks, in, out, lo, hi);                            \
      break;                                                                   \
    case zccProd:                                                              \
      ref_impl(T, zccProd, nranks, in, out, lo, hi);                           \
      break;                                                                   \
    case zccMax:                                                               \
      ref_impl(T, zccMax, nranks, in, out, lo, hi);                            \
      break;                                                                   \
    case zccMin:                                                               \
      ref_impl(T, zccMin, nranks, in, out, lo, hi);                            \
      break;                                                                   \
    default:                                                                   \
      ref_impl(T, zccAvg, nranks, in, out, lo, hi);                            \
      break;                                                                   \
    }                                                                          \
    break;
    ZT_FOR_EACH_TYPE_(ZT_REF_CASE_)
#undef ZT_REF_CASE_
  default:
    break;
  }
}

size_t zt_compare(zccDataType_t t, const void *got, const void *expected,
                  size_t count, size_t *first) {
  size_t sz = zt_type_size(t), bad = 0;
  if (memcmp(got, expected, count * sz) == 0)
    return 0;
  for (size_t i = 0; i < count; i++)
    if (ld_bits(t, got, i) != ld_bits(t, expected, i)) {
      if (bad == 0 && first)
        *first = i;
      bad++;
    }
  return bad;
}

const char *zt_elem_str(zccDataType_t t, const void *buf, size_t i,
                        char *out, size_t outlen) {
  uint64_t b = ld_bits(t, buf, i);
  int hexw = (int)zt_type_size(t) * 2;
  switch (kind_of(t)) {
  case K_SINT:
    snprintf(out, outlen, "%" PRId64 " (0x%0*" PRIx64 ")", ld_s(t, buf, i),
             hexw, b);
    break;
  case K_UINT:
    snprintf(out, outlen, "%" PRIu64 " (0x%0*" PRIx64 ")", b, hexw, b);
    break;
  default:
    snprintf(out, outlen, "%.17g (0x%0*" PRIx64 ")", ld_f(t, buf, i), hexw, b);
    break;
  }
  return out;
}

uint64_t zt_hash(const void *buf, size_t bytes) {
  const unsigned char *c = buf;
  uint64_t h = 0xcbf29ce484222325ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    memcpy(&w, c + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; i++)
    h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}
