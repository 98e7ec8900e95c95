/*
 * Unit tests for src/misc/reduce.c: datatype names and sizes, the
 * narrow float conversions (exhaustive over every fp16/bf16/fp8 pattern,
 * rounding checked against a slow frexp/ldexp reference), and every
 * datatype x op of zcc_reduce / zcc_reduce2 / zcc_reduce_finish_avg against
 * references written independently here. The reduction suites run twice:
 * with the SIMD loops the CPU allows, and with ZCC_REDUCE_SIMD=0.
 */
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include <cmocka.h>

#include "param.h"
#include "reduce.h"

/* ---- helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
  /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

#define FAILF(...)                                                             \
  do {                                                                         \
    print_error(__VA_ARGS__);                                                  \
    fail();                                                                    \
  } while (0)

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- reference formats: sign, ebits exponent bits, mbits mantissa bits ---- */

typedef struct {
  const char *name;
  int ebits, mbits, bias;
  int ieee; /* 1: all-ones exponent is inf/NaN; 0: e4m3fn (only S.1111.111 is NaN) */
} fmt_t;

static const fmt_t FMT_HALF = {"float16", 5, 10, 15, 1};
static const fmt_t FMT_BF16 = {"bfloat16", 8, 7, 127, 1};
static const fmt_t FMT_E4M3 = {"float8e4m3", 4, 3, 7, 0};
static const fmt_t FMT_E5M2 = {"float8e5m2", 5, 2, 15, 1};

static double fmt_max(const fmt_t *f) {
  if (!f->ieee) return 448.0;
  int emax = (1 << f->ebits) - 2 - f->bias;
  return (2.0 - ldexp(1.0, -f->mbits)) * ldexp(1.0, emax);
}

/* Decode by the textbook formula, in double. */
static double ref_decode(const fmt_t *f, uint32_t bits) {
  uint32_t mmask = (1u << f->mbits) - 1, emask = (1u << f->ebits) - 1;
  int sign = (bits >> (f->ebits + f->mbits)) & 1;
  uint32_t e = (bits >> f->mbits) & emask, m = bits & mmask;
  double v;
  if (f->ieee && e == emask)
    v = m ? NAN : INFINITY;
  else if (!f->ieee && e == emask && m == mmask)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  else
    v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
  return sign ? -v : v;
}

/* Encode a finite, representable magnitude (no rounding left to do). */
static uint32_t encode_exact(const fmt_t *f, double val) {
  int emin = 1 - f->bias;
  if (val == 0) return 0;
  int e = ilogb(val);
  if (e < emin) return (uint32_t)ldexp(val, f->mbits - emin);
  uint32_t mant = (uint32_t)ldexp(ldexp(val, -e) - 1.0, f->mbits);
  return ((uint32_t)(e + f->bias) << f->mbits) | mant;
}

/* Round-to-nearest-even from fp32, the slow and obvious way. */
static uint32_t ref_encode(const fmt_t *f, float x) {
  uint32_t s = signbit(x) ? 1u << (f->ebits + f->mbits) : 0;
  uint32_t emask = (1u << f->ebits) - 1;
  uint32_t inf = emask << f->mbits;
  if (isnan(x)) return s | (f->ieee ? inf | (1u << (f->mbits - 1)) : 0x7fu);
  double ax = fabs((double)x);
  if (isinf(ax)) return s | (f->ieee ? inf : encode_exact(f, 448.0));
  if (ax == 0) return s;
  int e;
  frexp(ax, &e); /* ax = m * 2^e, m in [0.5, 1) */
  int E = e - 1, emin = 1 - f->bias;
  double q = ldexp(1.0, (E < emin ? emin : E) - f->mbits);
  double t = ax / q, k = floor(t), rem = t - k;
  if (rem > 0.5 || (rem == 0.5 && fmod(k, 2.0) == 1.0)) k += 1;
  double val = k * q;
  if (val > fmt_max(f))
    return s | (f->ieee ? inf : encode_exact(f, 448.0));
  return s | encode_exact(f, val);
}

static float conv_to_float(const fmt_t *f, uint32_t bits) {
  if (f == &FMT_HALF) return zcc_half_to_float((uint16_t)bits);
  if (f == &FMT_BF16) return zcc_bf16_to_float((uint16_t)bits);
  if (f == &FMT_E4M3) return zcc_e4m3_to_float((uint8_t)bits);
  return zcc_e5m2_to_float((uint8_t)bits);
}

static uint32_t conv_from_float(const fmt_t *f, float x) {
  if (f == &FMT_HALF) return zcc_float_to_half(x);
  if (f == &FMT_BF16) return zcc_float_to_bf16(x);
  if (f == &FMT_E4M3) return zcc_float_to_e4m3(x);
  return zcc_float_to_e5m2(x);
}

static int fmt_is_nan(const fmt_t *f, uint32_t bits) {
  return isnan(ref_decode(f, bits));
}

/* ---- conversion tests ---- */

static void check_decode_all(const fmt_t *f) {
  uint32_t n = 1u << (1 + f->ebits + f->mbits);
  for (uint32_t b = 0; b < n; b++) {
    double want = ref_decode(f, b);
    float got = conv_to_float(f, b);
    if (isnan(want)) {
      if (!isnan(got) || !signbit(got) != !(b >> (f->ebits + f->mbits)))
        FAILF("%s decode 0x%x: want NaN with sign, got %a\n", f->name, b, (double)got);
      continue;
    }
    if ((double)got != want || !signbit(got) != !signbit(want))
      FAILF("%s decode 0x%x: want %a got %a\n", f->name, b, want, (double)got);
    /* Every non-NaN pattern round-trips exactly. */
    uint32_t back = conv_from_float(f, got);
    if (back != b)
      FAILF("%s round trip 0x%x -> %a -> 0x%x\n", f->name, b, (double)got, back);
  }
}

static void check_encode_one(const fmt_t *f, float x) {
  uint32_t want = ref_encode(f, x), got = conv_from_float(f, x);
  if (isnan(x)) {
    if (!fmt_is_nan(f, got) ||
        ((got >> (f->ebits + f->mbits)) & 1) != (uint32_t)!!signbit(x))
      FAILF("%s encode NaN %08x: got 0x%x, not a NaN of that sign\n", f->name,
            fbits(x), got);
    if (!f->ieee && (got & 0x7f) != 0x7f)
      FAILF("e4m3 NaN must be 0x7f/0xff, got 0x%x\n", got);
    return;
  }
  if (got != want)
    FAILF("%s encode %a (%08x): want 0x%x got 0x%x\n", f->name, (double)x,
          fbits(x), want, got);
}

static void check_encode(const fmt_t *f) {
  uint32_t n = 1u << (1 + f->ebits + f->mbits);
  /* Every representable value, the midpoints to the next one (ties), and
   * the floats just either side of each midpoint. */
  for (uint32_t b = 0; b < n; b++) {
    double v = ref_decode(f, b);
    if (isnan(v)) continue;
    check_encode_one(f, (float)v);
    if (isinf(v)) continue;
    /* The next larger magnitude; past the largest finite, one more step. */
    uint32_t smask = 1u << (f->ebits + f->mbits), mag = b & (smask - 1);
    double av = fabs(v), an = mag + 1 < smask ? ref_decode(f, mag + 1) : NAN;
    if (isnan(an) || isinf(an)) an = av + (av - ref_decode(f, mag - 1));
    double nx = v < 0 ? -an : an;
    float mid = (float)((v + nx) / 2); /* exact for these widths */
    check_encode_one(f, mid);
    check_encode_one(f, nextafterf(mid, INFINITY));
    check_encode_one(f, nextafterf(mid, -INFINITY));
  }
  /* Random fp32 patterns over the whole range, NaNs and subnormals included. */
  for (int i = 0; i < 1000000; i++) check_encode_one(f, bitsf((uint32_t)rnd()));
  /* Specials. */
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                      FLT_MIN, 1e-45f, 65504.0f, 65519.99f, 65520.0f, 448.0f, 464.0f,
                      465.0f, 1e6f, 57344.0f, 61439.0f, 61440.0f, 3.3895314e38f};
  for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++) check_encode_one(f, sp[i]);
}

static void test_half_conversions(void **state) {
  (void)state;
  check_decode_all(&FMT_HALF);
  check_encode(&FMT_HALF);
  assert_int_equal(zcc_float_to_half(65520.0f), 0x7c00);
  assert_int_equal(zcc_float_to_half(65519.0f), 0x7bff);
  assert_int_equal(zcc_float_to_half(0x1p-25f), 0x0000);      /* tie to even 0 */
  assert_int_equal(zcc_float_to_half(0x1.8p-24f), 0x0002);    /* tie to even 2 */
  /* A signalling NaN comes back quiet (as F16C does), sign and payload kept. */
  assert_int_equal(fbits(zcc_half_to_float(0xfc01)), 0xffc02000u);
}

static void test_bf16_conversions(void **state) {
  (void)state;
  check_decode_all(&FMT_BF16);
  check_encode(&FMT_BF16);
  assert_int_equal(zcc_float_to_bf16(FLT_MAX), 0x7f80);
  assert_int_equal(zcc_float_to_bf16(1.00390625f), 0x3f80); /* tie to even */
}

static void test_fp8_conversions(void **state) {
  (void)state;
  check_decode_all(&FMT_E4M3);
  check_encode(&FMT_E4M3);
  check_decode_all(&FMT_E5M2);
  check_encode(&FMT_E5M2);
  /* e4m3: saturates, no inf; NaN is 0x7f/0xff. */
  assert_int_equal(zcc_float_to_e4m3(1000.0f), 0x7e);
  assert_int_equal(zcc_float_to_e4m3(-INFINITY), 0xfe);
  assert_int_equal(zcc_float_to_e4m3(NAN), 0x7f);
  assert_true(zcc_e4m3_to_float(0x7e) == 448.0f);
  /* e5m2: overflows to inf. */
  assert_int_equal(zcc_float_to_e5m2(1e6f), 0x7c);
  assert_int_equal(zcc_float_to_e5m2(-61440.0f), 0xfc);
  assert_int_equal(zcc_float_to_e5m2(61439.0f), 0x7b);
}

static void test_names(void **state) {
  (void)state;
  static const struct {
    zccDataType_t t;
    size_t size;
    const char *name;
  } types[] = {{zccInt8, 1, "int8"},          {zccUint8, 1, "uint8"},
               {zccInt32, 4, "int32"},        {zccUint32, 4, "uint32"},
               {zccInt64, 8, "int64"},        {zccUint64, 8, "uint64"},
               {zccFloat16, 2, "float16"},    {zccFloat32, 4, "float32"},
               {zccFloat64, 8, "float64"},    {zccBfloat16, 2, "bfloat16"},
               {zccFloat8e4m3, 1, "float8e4m3"}, {zccFloat8e5m2, 1, "float8e5m2"}};
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
    assert_int_equal(zcc_type_size(types[i].t), types[i].size);
    assert_string_equal(zcc_type_name(types[i].t), types[i].name);
  }
  const int bad_types[] = {-1, zccNumTypes, 13, 255, 0x7fffffff};
  for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
    assert_int_equal(zcc_type_size((zccDataType_t)bad_types[i]), 0);
    assert_string_equal(zcc_type_name((zccDataType_t)bad_types[i]), "invalid");
  }
  assert_string_equal(zcc_op_name(zccSum), "sum");
  assert_string_equal(zcc_op_name(zccProd), "prod");
  assert_string_equal(zcc_op_name(zccMax), "max");
  assert_string_equal(zcc_op_name(zccMin), "min");
  assert_string_equal(zcc_op_name(zccAvg), "avg");
  assert_string_equal(zcc_op_name((zccRedOp_t)-1), "invalid");
  assert_string_equal(zcc_op_name(zccNumOps), "invalid");
  assert_string_equal(zcc_op_name((zccRedOp_t)99), "invalid");
  /* Invalid type or op: nothing is written, nothing crashes. */
  unsigned char d[8] = {1, 2, 3, 4, 5, 6, 7, 8}, a[8] = {0}, b[8] = {0};
  zcc_reduce(d, a, b, 1, (zccDataType_t)zccNumTypes, zccSum);
  zcc_reduce(d, a, b, 1, zccInt8, (zccRedOp_t)zccNumOps);
  zcc_reduce_finish_avg(d, a, 1, (zccDataType_t)-1, 2);
  assert_int_equal(d[0], 1);
}

/* ---- reduction references ---- */

static const fmt_t *narrow_fmt(zccDataType_t t) {
  switch (t) {
  case zccFloat16: return &FMT_HALF;
  case zccBfloat16: return &FMT_BF16;
  case zccFloat8e4m3: return &FMT_E4M3;
  case zccFloat8e5m2: return &FMT_E5M2;
  default: return NULL;
  }
}

static uint64_t load_bits(const unsigned char *p, size_t size) {
  uint64_t v = 0;
  memcpy(&v, p, size); /* little-endian host */
  return v;
}

static void store_bits(unsigned char *p, size_t size, uint64_t v) { memcpy(p, &v, size); }

static int64_t sext(uint64_t v, size_t size) {
  int shift = 64 - 8 * (int)size;
  return (int64_t)(v << shift) >> shift; /* arithmetic shift on gcc */
}

static int is_signed_int(zccDataType_t t) {
  return t == zccInt8 || t == zccInt32 || t == zccInt64;
}

/* Floating op in the given precision: NaN if either is NaN for max/min. */
static double fop(double x, double y, zccRedOp_t op) {
  switch (op) {
  case zccSum:
  case zccAvg: return x + y;
  case zccProd: return x * y;
  case zccMax: return (isnan(x) || isnan(y)) ? NAN : (x >= y ? x : y);
  default: return (isnan(x) || isnan(y)) ? NAN : (x <= y ? x : y);
  }
}

static float fopf(float x, float y, zccRedOp_t op) {
  switch (op) {
  case zccSum:
  case zccAvg: return x + y;
  case zccProd: return x * y;
  default: return (float)fop(x, y, op);
  }
}

/*
 * Expected element bits of a op b. Integers: exact result in 128 bits, then
 * reduced modulo 2^(8*size).
 */
static uint64_t ref_elem(zccDataType_t t, zccRedOp_t op, uint64_t a, uint64_t b) {
  size_t size = zcc_type_size(t);
  uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
  const fmt_t *f = narrow_fmt(t);
  if (f) {
    float x = (float)ref_decode(f, (uint32_t)a), y = (float)ref_decode(f, (uint32_t)b);
    return ref_encode(f, fopf(x, y, op));
  }
  if (t == zccFloat32) {
    float r = fopf(bitsf((uint32_t)a), bitsf((uint32_t)b), op);
    return fbits(r);
  }
  if (t == zccFloat64) {
    double x, y, r;
    memcpy(&x, &a, 8);
    memcpy(&y, &b, 8);
    r = fop(x, y, op);
    uint64_t u;
    memcpy(&u, &r, 8);
    return u;
  }
  __int128 x, y, r;
  if (is_signed_int(t)) {
    x = sext(a, size);
    y = sext(b, size);
  } else {
    x = (__int128)a;
    y = (__int128)b;
  }
  switch (op) {
  case zccSum:
  case zccAvg: r = x + y; break;
  case zccProd: r = (__int128)((unsigned __int128)x * (unsigned __int128)y); break;
  case zccMax: r = x > y ? x : y; break;
  default: r = x < y ? x : y; break;
  }
  return (uint64_t)(unsigned __int128)r & mask;
}

/* Is `got` acceptable for expected `want`? NaN: any NaN. Max/min zeros: either sign. */
static int elem_ok(zccDataType_t t, zccRedOp_t op, uint64_t want, uint64_t got) {
  const fmt_t *f = narrow_fmt(t);
  if (f) {
    if (fmt_is_nan(f, (uint32_t)want)) return fmt_is_nan(f, (uint32_t)got);
    if ((op == zccMax || op == zccMin) && ref_decode(f, (uint32_t)want) == 0)
      return ref_decode(f, (uint32_t)got) == 0;
    return want == got;
  }
  if (t == zccFloat32) {
    float w = bitsf((uint32_t)want), g = bitsf((uint32_t)got);
    if (isnan(w)) return isnan(g);
    if ((op == zccMax || op == zccMin) && w == 0) return g == 0;
    return want == got;
  }
  if (t == zccFloat64) {
    double w, g;
    memcpy(&w, &want, 8);
    memcpy(&g, &got, 8);
    if (isnan(w)) return isnan(g);
    if ((op == zccMax || op == zccMin) && w == 0) return g == 0;
    return want == got;
  }
  return want == got;
}

/* Random element: integers any bits; floats mostly ordinary values with some specials. */
static uint64_t rand_elem(zccDataType_t t) {
  size_t size = zcc_type_size(t);
  uint64_t r = rnd();
  if (t == zccFloat32) {
    uint32_t k = (uint32_t)(r >> 32) % 16;
    if (k == 0) {
      static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, 1e-40f};
      return fbits(sp[(r & 0xffff) % 7]);
    }
    return fbits((float)((int32_t)(r & 0xfffff) - 0x80000) * 0x1p-10f);
  }
  if (t == zccFloat64) {
    double d = (double)(int64_t)(r & 0xffffffffffull) * 0x1p-20 - 5e5;
    if ((r >> 60) == 0) d = (r >> 59) & 1 ? NAN : -INFINITY;
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
  }
  return r & (size == 8 ? ~0ull : (1ull << (8 * size)) - 1);
}

static const zccDataType_t all_types[] = {
    zccInt8,    zccUint8,   zccInt32,    zccUint32,     zccInt64,     zccUint64,
    zccFloat16, zccFloat32, zccFloat64,  zccBfloat16,   zccFloat8e4m3, zccFloat8e5m2};
static const zccRedOp_t all_ops[] = {zccSum, zccProd, zccMax, zccMin, zccAvg};
#define NTYPES (sizeof(all_types) / sizeof(all_types[0]))
#define NOPS (sizeof(all_ops) / sizeof(all_ops[0]))

/* alias: 0 out of place, 1 dst == a, 2 dst == b. with_dst2: 0 zcc_reduce,
   1 zcc_reduce2 (dst2 unaligned), 2 zcc_reduce2_nt (dst2 16-byte aligned),
   3 zcc_reduce2_ntdst (dst2 unaligned), 4 zcc_reduce2_ntdst2 (dst2 16-byte
   aligned). */
static void run_case(zccDataType_t t, zccRedOp_t op, size_t count, size_t offa,
                     size_t offb, size_t offd, int alias, int with_dst2) {
  size_t size = zcc_type_size(t), bytes = count * size, pad = 16;
  unsigned char *A = malloc(bytes + 2 * pad), *Bm = malloc(bytes + 2 * pad);
  unsigned char *D = malloc(bytes + 2 * pad), *D2 = malloc(bytes + 2 * pad);
  uint64_t *ea = malloc((count + 1) * 8), *eb = malloc((count + 1) * 8);
  assert_non_null(A);
  assert_non_null(Bm);
  assert_non_null(D);
  assert_non_null(D2);
  assert_non_null(ea);
  assert_non_null(eb);
  memset(A, 0xa5, bytes + 2 * pad);
  memset(Bm, 0xa5, bytes + 2 * pad);
  memset(D, 0xa5, bytes + 2 * pad);
  memset(D2, 0x5a, bytes + 2 * pad);
  size_t off2 = with_dst2 == 2 || with_dst2 == 4 ? 16 : 3;
  unsigned char *a = A + offa, *b = Bm + offb, *d = D + offd, *d2 = D2 + off2;
  for (size_t i = 0; i < count; i++) {
    ea[i] = rand_elem(t);
    eb[i] = rand_elem(t);
    store_bits(a + i * size, size, ea[i]);
    store_bits(b + i * size, size, eb[i]);
  }
  if (alias == 1) d = a;
  if (alias == 2) d = b;
  if (with_dst2 == 4)
    zcc_reduce2_ntdst2(d, d2, a, b, count, t, op);
  else if (with_dst2 == 3)
    zcc_reduce2_ntdst(d, d2, a, b, count, t, op);
  else if (with_dst2 == 2)
    zcc_reduce2_nt(d, d2, a, b, count, t, op);
  else if (with_dst2)
    zcc_reduce2(d, d2, a, b, count, t, op);
  else
    zcc_reduce(d, a, b, count, t, op);
  for (size_t i = 0; i < count; i++) {
    uint64_t want = ref_elem(t, op, ea[i], eb[i]);
    uint64_t got = load_bits(d + i * size, size);
    if (!elem_ok(t, op, want, got))
      FAILF("%s %s count %zu offs %zu/%zu/%zu alias %d dst2 %d: element %zu of "
            "0x%llx, 0x%llx: want 0x%llx got 0x%llx\n",
            zcc_type_name(t), zcc_op_name(op), count, offa, offb, offd, alias,
            with_dst2, i, (unsigned long long)ea[i], (unsigned long long)eb[i],
            (unsigned long long)want, (unsigned long long)got);
    if (with_dst2 && load_bits(d2 + i * size, size) != got)
      FAILF("%s %s count %zu: dst2 element %zu differs from dst\n", zcc_type_name(t),
            zcc_op_name(op), count, i);
  }
  /* Nothing written outside [d, d + bytes) and [d2, d2 + bytes). */
  unsigned char *base = alias == 1 ? A : alias == 2 ? Bm : D;
  size_t off = (size_t)(d - base);
  for (size_t i = 0; i < off; i++)
    if (base[i] != 0xa5) FAILF("%s %s: byte before dst written\n", zcc_type_name(t), zcc_op_name(op));
  for (size_t i = off + bytes; i < bytes + 2 * pad; i++)
    if (base[i] != 0xa5)
      FAILF("%s %s count %zu: byte %zu past dst written\n", zcc_type_name(t),
            zcc_op_name(op), count, i - off - bytes);
  for (size_t i = 0; i < bytes + 2 * pad; i++) {
    if (i >= off2 && i < off2 + bytes && with_dst2) continue;
    if (D2[i] != 0x5a) FAILF("%s %s: dst2 written outside its range\n", zcc_type_name(t), zcc_op_name(op));
  }
  free(A);
  free(Bm);
  free(D);
  free(D2);
  free(ea);
  free(eb);
}

static const size_t counts[] = {0, 1, 2, 3, 7, 17, 31, 32, 33, 63, 64, 65, 127, 129, 255, 1000, 4099};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static void matrix(void) {
  for (size_t ti = 0; ti < NTYPES; ti++)
    for (size_t oi = 0; oi < NOPS; oi++)
      for (size_t ci = 0; ci < NCOUNTS; ci++) {
        size_t c = counts[ci];
        run_case(all_types[ti], all_ops[oi], c, 0, 0, 0, 0, 0);
        run_case(all_types[ti], all_ops[oi], c, 1, 3, 5, 0, 0);
        run_case(all_types[ti], all_ops[oi], c, 7, 2, 1, 0, 1);
        run_case(all_types[ti], all_ops[oi], c, 3, 6, 0, 1, 0);
        run_case(all_types[ti], all_ops[oi], c, 5, 1, 0, 2, 1);
        run_case(all_types[ti], all_ops[oi], c, 0, 0, 0, 0, 2); /* both outputs aligned */
        run_case(all_types[ti], all_ops[oi], c, 3, 0, 0, 1, 2); /* dst == a, unaligned */
        run_case(all_types[ti], all_ops[oi], c, 0, 0, 0, 0, 3); /* streamed dst aligned */
        run_case(all_types[ti], all_ops[oi], c, 2, 1, 5, 0, 3); /* and not */
        run_case(all_types[ti], all_ops[oi], c, 0, 0, 0, 0, 4); /* streamed dst2 aligned */
        run_case(all_types[ti], all_ops[oi], c, 2, 1, 5, 2, 4); /* dst == b, unaligned */
        run_case(all_types[ti], all_ops[oi], c, 0, 4, 0, 1, 3); /* dst == a */
      }
}

/* zcc_copy_nt: every byte of [dst, dst + n) from src, none outside, at each
   alignment of both and sizes around the 16-byte head and the blocks. */
static void test_copy_nt(void **state) {
  (void)state;
  enum { PAD = 32, MAXN = 600 };
  unsigned char src[MAXN + 2 * PAD], dst[MAXN + 2 * PAD];
  for (size_t n = 0; n <= MAXN; n += n < 140 ? 1 : 37)
    for (size_t so = 0; so < 17; so += 3)
      for (size_t d_o = 0; d_o < 17; d_o++) {
        for (size_t i = 0; i < sizeof(src); i++) src[i] = (unsigned char)(rand() | 1);
        memset(dst, 0, sizeof(dst));
        zcc_copy_nt(dst + PAD + d_o, src + so, n);
        for (size_t i = 0; i < sizeof(dst); i++) {
          int in = i >= PAD + d_o && i < PAD + d_o + n;
          unsigned char want = in ? src[so + i - PAD - d_o] : 0;
          if (dst[i] != want)
            FAILF("zcc_copy_nt n %zu src+%zu dst+%zu: byte %zu is 0x%02x, want 0x%02x\n", n,
                  so, d_o, i, dst[i], want);
        }
      }
}

/* Exhaustive narrow pairs: every fp8 pair, and a dense slice of fp16/bf16. */
static void narrow_pairs(void) {
  static const zccDataType_t fp8[] = {zccFloat8e4m3, zccFloat8e5m2};
  uint8_t a8[65536], b8[65536], d8[65536];
  for (uint32_t i = 0; i < 65536; i++) {
    a8[i] = (uint8_t)(i >> 8);
    b8[i] = (uint8_t)i;
  }
  for (int k = 0; k < 2; k++)
    for (size_t oi = 0; oi < 4; oi++) {
      zcc_reduce(d8, a8, b8, 65536, fp8[k], all_ops[oi]);
      for (uint32_t i = 0; i < 65536; i++) {
        uint64_t want = ref_elem(fp8[k], all_ops[oi], a8[i], b8[i]);
        if (!elem_ok(fp8[k], all_ops[oi], want, d8[i]))
          FAILF("%s %s 0x%02x, 0x%02x: want 0x%llx got 0x%02x\n", zcc_type_name(fp8[k]),
                zcc_op_name(all_ops[oi]), a8[i], b8[i], (unsigned long long)want, d8[i]);
      }
    }
  /* Every 16-bit pattern against a set of partners (including -0, which must
   * give the identity for sum, NaN bits included, on every code path). */
  static const zccDataType_t h16[] = {zccFloat16, zccBfloat16};
  static uint16_t a16[65536], b16[65536], d16[65536];
  for (int k = 0; k < 2; k++) {
    const fmt_t *f = narrow_fmt(h16[k]);
    for (uint32_t i = 0; i < 65536; i++) {
      a16[i] = (uint16_t)i;
      b16[i] = 0x8000;
    }
    zcc_reduce(d16, a16, b16, 65536, h16[k], zccSum);
    for (uint32_t i = 0; i < 65536; i++) {
      uint32_t want = conv_from_float(f, conv_to_float(f, i));
      if (d16[i] != want)
        FAILF("%s 0x%04x + -0: want 0x%04x (scalar path) got 0x%04x\n",
              zcc_type_name(h16[k]), i, want, d16[i]);
      if (!fmt_is_nan(f, i) && d16[i] != i)
        FAILF("%s 0x%04x + -0 changed the value: 0x%04x\n", zcc_type_name(h16[k]), i, d16[i]);
    }
    for (int rep = 0; rep < 8; rep++)
      for (size_t oi = 0; oi < 4; oi++) {
        for (uint32_t i = 0; i < 65536; i++) b16[i] = (uint16_t)rnd();
        zcc_reduce(d16, a16, b16, 65536, h16[k], all_ops[oi]);
        for (uint32_t i = 0; i < 65536; i++) {
          uint64_t want = ref_elem(h16[k], all_ops[oi], a16[i], b16[i]);
          if (!elem_ok(h16[k], all_ops[oi], want, d16[i]))
            FAILF("%s %s 0x%04x, 0x%04x: want 0x%llx got 0x%04x\n",
                  zcc_type_name(h16[k]), zcc_op_name(all_ops[oi]), a16[i], b16[i],
                  (unsigned long long)want, d16[i]);
        }
      }
  }
}

/* Fixed cases that name the rules: wrapping, NaN, saturation, overflow. */
static void edge_cases(void) {
  int8_t i8a[3] = {127, -128, 100}, i8b[3] = {1, -1, 100}, i8d[3];
  zcc_reduce(i8d, i8a, i8b, 3, zccInt8, zccSum);
  assert_int_equal(i8d[0], -128);
  assert_int_equal(i8d[1], 127);
  assert_int_equal(i8d[2], -56);
  zcc_reduce(i8d, i8a, i8b, 3, zccInt8, zccProd);
  assert_int_equal(i8d[0], 127);
  assert_int_equal(i8d[1], -128);
  assert_int_equal(i8d[2], 16); /* 10000 mod 256 */
  zcc_reduce(i8d, i8a, i8b, 3, zccInt8, zccMax);
  assert_int_equal(i8d[1], -1);
  uint8_t u8a[2] = {255, 200}, u8b[2] = {1, 100}, u8d[2];
  zcc_reduce(u8d, u8a, u8b, 2, zccUint8, zccSum);
  assert_int_equal(u8d[0], 0);
  assert_int_equal(u8d[1], 44);
  zcc_reduce(u8d, u8a, u8b, 2, zccUint8, zccMax);
  assert_int_equal(u8d[0], 255);
  int32_t i32a[2] = {INT32_MAX, INT32_MIN}, i32b[2] = {1, -1}, i32d[2];
  zcc_reduce(i32d, i32a, i32b, 2, zccInt32, zccSum);
  assert_int_equal(i32d[0], INT32_MIN);
  assert_int_equal(i32d[1], INT32_MAX);
  zcc_reduce(i32d, i32a, i32a, 2, zccInt32, zccProd);
  assert_int_equal(i32d[0], 1);
  assert_int_equal(i32d[1], 0);
  zcc_reduce(i32d, i32a, i32b, 2, zccInt32, zccMin);
  assert_int_equal(i32d[0], 1);
  assert_int_equal(i32d[1], INT32_MIN);
  uint32_t u32a[1] = {0x80000000u}, u32b[1] = {0x7fffffffu}, u32d[1];
  zcc_reduce(u32d, u32a, u32b, 1, zccUint32, zccMax);
  assert_int_equal(u32d[0], 0x80000000u);
  int64_t i64a[2] = {INT64_MAX, INT64_MIN}, i64b[2] = {1, INT64_MIN}, i64d[2];
  zcc_reduce(i64d, i64a, i64b, 2, zccInt64, zccSum);
  assert_true(i64d[0] == INT64_MIN);
  assert_true(i64d[1] == 0);
  zcc_reduce(i64d, i64a, i64b, 2, zccInt64, zccMin);
  assert_true(i64d[0] == 1 && i64d[1] == INT64_MIN);
  uint64_t u64a[1] = {~0ull}, u64b[1] = {1}, u64d[1];
  zcc_reduce(u64d, u64a, u64b, 1, zccUint64, zccMax);
  assert_true(u64d[0] == ~0ull);
  zcc_reduce(u64d, u64a, u64b, 1, zccUint64, zccSum);
  assert_true(u64d[0] == 0);

  float fa[4] = {NAN, 1.0f, NAN, -INFINITY}, fb[4] = {1.0f, NAN, NAN, 5.0f}, fd[4];
  zcc_reduce(fd, fa, fb, 4, zccFloat32, zccMax);
  assert_true(isnan(fd[0]) && isnan(fd[1]) && isnan(fd[2]) && fd[3] == 5.0f);
  zcc_reduce(fd, fa, fb, 4, zccFloat32, zccMin);
  assert_true(isnan(fd[0]) && isnan(fd[1]) && isnan(fd[2]) && fd[3] == -INFINITY);
  double da[2] = {1.0, NAN}, db[2] = {NAN, -1.0}, dd[2];
  zcc_reduce(dd, da, db, 2, zccFloat64, zccMax);
  assert_true(isnan(dd[0]) && isnan(dd[1]));
  zcc_reduce(dd, da, db, 2, zccFloat64, zccMin);
  assert_true(isnan(dd[0]) && isnan(dd[1]));

  uint16_t ha[2] = {0x7bff, 0x7e00}, hb[2] = {0x7bff, 0x3c00}, hd[2];
  zcc_reduce(hd, ha, hb, 2, zccFloat16, zccSum);
  assert_int_equal(hd[0], 0x7c00); /* 65504 + 65504 = inf */
  assert_true(fmt_is_nan(&FMT_HALF, hd[1]));
  zcc_reduce(hd, ha, hb, 2, zccFloat16, zccMin);
  assert_int_equal(hd[0], 0x7bff);
  assert_true(fmt_is_nan(&FMT_HALF, hd[1]));
  uint8_t ea[2] = {0x7e, 0x7f}, eb[2] = {0x7e, 0x38}, ed[2];
  zcc_reduce(ed, ea, eb, 2, zccFloat8e4m3, zccSum);
  assert_int_equal(ed[0], 0x7e); /* 448 + 448 saturates */
  assert_int_equal(ed[1] & 0x7f, 0x7f);
  uint8_t fa5[2] = {0x7b, 0x7c}, fb5[2] = {0x7b, 0xfc}, fd5[2];
  zcc_reduce(fd5, fa5, fb5, 2, zccFloat8e5m2, zccSum);
  assert_int_equal(fd5[0], 0x7c); /* 57344 + 57344 = inf */
  assert_true(fmt_is_nan(&FMT_E5M2, fd5[1])); /* inf + -inf */
}

/* ---- avg ---- */

static uint64_t ref_avg(zccDataType_t t, uint64_t x, int n) {
  size_t size = zcc_type_size(t);
  uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
  const fmt_t *f = narrow_fmt(t);
  if (f) return ref_encode(f, (float)ref_decode(f, (uint32_t)x) / (float)n);
  if (t == zccFloat32) return fbits(bitsf((uint32_t)x) / (float)n);
  if (t == zccFloat64) {
    double v;
    memcpy(&v, &x, 8);
    v /= n;
    memcpy(&x, &v, 8);
    return x;
  }
  if (is_signed_int(t)) {
    /* truncation toward zero, computed on magnitudes */
    int64_t v = sext(x, size);
    uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    uint64_t q = mag / (uint64_t)n;
    return (v < 0 ? 0 - q : q) & mask;
  }
  return (x / (uint64_t)n) & mask;
}

static void avg_suite(void) {
  static const int ranks[] = {1, 2, 3, 7, 8, 1000};
  for (size_t ti = 0; ti < NTYPES; ti++) {
    zccDataType_t t = all_types[ti];
    size_t size = zcc_type_size(t);
    for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++)
      for (size_t ci = 0; ci < NCOUNTS; ci++) {
        size_t count = counts[ci];
        for (int inplace = 0; inplace < 2; inplace++) {
          unsigned char *S = malloc(count * size + 8), *D = malloc(count * size + 8);
          uint64_t *e = malloc((count + 1) * 8);
          assert_non_null(S);
          assert_non_null(D);
          assert_non_null(e);
          memset(D, 0xa5, count * size + 8);
          unsigned char *s = S + 1, *d = inplace ? s : D + 3;
          for (size_t i = 0; i < count; i++) {
            e[i] = rand_elem(t);
            store_bits(s + i * size, size, e[i]);
          }
          zcc_reduce_finish_avg(d, s, count, t, ranks[ri]);
          for (size_t i = 0; i < count; i++) {
            uint64_t want = ref_avg(t, e[i], ranks[ri]);
            uint64_t got = load_bits(d + i * size, size);
            if (!elem_ok(t, zccSum, want, got))
              FAILF("avg %s nranks %d count %zu: element %zu of 0x%llx: want 0x%llx got 0x%llx\n",
                    zcc_type_name(t), ranks[ri], count, i, (unsigned long long)e[i],
                    (unsigned long long)want, (unsigned long long)got);
          }
          if (!inplace)
            for (size_t i = count * size + 3; i < count * size + 8; i++)
              if (D[i] != 0xa5) FAILF("avg %s: wrote past dst\n", zcc_type_name(t));
          free(S);
          free(D);
          free(e);
        }
      }
  }
  /* Named cases: signed truncation toward zero. */
  int8_t i8[3] = {-7, 7, -128};
  zcc_reduce_finish_avg(i8, i8, 3, zccInt8, 2);
  assert_int_equal(i8[0], -3);
  assert_int_equal(i8[1], 3);
  assert_int_equal(i8[2], -64);
  int64_t i64[1] = {INT64_MIN};
  zcc_reduce_finish_avg(i64, i64, 1, zccInt64, 3);
  assert_true(i64[0] == INT64_MIN / 3);
  uint16_t h[1] = {0x3c00}; /* 1.0 / 3 */
  zcc_reduce_finish_avg(h, h, 1, zccFloat16, 3);
  assert_int_equal(h[0], zcc_float_to_half(1.0f / 3.0f));
}

/* ---- the suites, on both code paths ---- */

static void set_simd(int on) {
  if (on)
    unsetenv("ZCC_REDUCE_SIMD");
  else
    setenv("ZCC_REDUCE_SIMD", "0", 1);
  zcc_param_reload();
}

static void test_reduce_matrix(void **state) {
  (void)state;
  for (int simd = 1; simd >= 0; simd--) {
    set_simd(simd);
    matrix();
  }
  set_simd(1);
}

static void test_reduce_narrow_pairs(void **state) {
  (void)state;
  for (int simd = 1; simd >= 0; simd--) {
    set_simd(simd);
    narrow_pairs();
  }
  set_simd(1);
}

static void test_reduce_edges(void **state) {
  (void)state;
  for (int simd = 1; simd >= 0; simd--) {
    set_simd(simd);
    edge_cases();
  }
  set_simd(1);
}

static void test_reduce_avg(void **state) {
  (void)state;
  for (int simd = 1; simd >= 0; simd--) {
    set_simd(simd);
    avg_suite();
  }
  set_simd(1);
}

static void test_reduce_count_zero(void **state) {
  (void)state;
  unsigned char d[16], d2[16], a[16] = {1}, b[16] = {2};
  memset(d, 0x11, sizeof(d));
  memset(d2, 0x22, sizeof(d2));
  for (size_t ti = 0; ti < NTYPES; ti++) {
    for (size_t oi = 0; oi < NOPS; oi++) zcc_reduce2(d, d2, a, b, 0, all_types[ti], all_ops[oi]);
    zcc_reduce_finish_avg(d, a, 0, all_types[ti], 4);
  }
  for (size_t i = 0; i < sizeof(d); i++) {
    assert_int_equal(d[i], 0x11);
    assert_int_equal(d2[i], 0x22);
  }
}

/* ---- pre-multiplied sums: zcc_reduce_scale ---- */

/* dst = src * scalar for every type, against plain arithmetic here; in place too. */
static void test_reduce_scale(void **state) {
  (void)state;
  enum { M = 37 };
  /* Integers wrap: int8 100 * 3 = 300 -> 44; uint32 and int64 likewise. */
  int8_t i8[M], i8o[M], i8s = 3;
  uint32_t u32[M], u32s = 0x80000001u;
  int64_t i64[M], i64s = -7;
  double f64[M], f64s = 0.1;
  float f32[M], f32o[M], f32s = -1.5f;
  uint16_t h[M], ho[M], hs = zcc_float_to_half(0.5f);
  uint16_t b[M], bo[M], bs = zcc_float_to_bf16(3.0f);
  uint8_t e4[M], e4o[M], e4s = zcc_float_to_e4m3(2.0f);
  for (int i = 0; i < M; i++) {
    i8[i] = (int8_t)(i * 10 - 100);
    u32[i] = (uint32_t)i * 0x10001u;
    i64[i] = (int64_t)i * 1000000007LL;
    f64[i] = i * 1.25;
    f32[i] = (float)i / 3.0f;
    h[i] = zcc_float_to_half((float)i * 0.75f);
    b[i] = zcc_float_to_bf16((float)i - 10.0f);
    e4[i] = zcc_float_to_e4m3((float)i * 8.0f); /* 2x saturates at 448 */
  }
  zcc_reduce_scale(i8o, i8, M, zccInt8, &i8s);
  zcc_reduce_scale(f32o, f32, M, zccFloat32, &f32s);
  zcc_reduce_scale(ho, h, M, zccFloat16, &hs);
  zcc_reduce_scale(bo, b, M, zccBfloat16, &bs);
  zcc_reduce_scale(e4o, e4, M, zccFloat8e4m3, &e4s);
  uint32_t u32o[M];
  int64_t i64o[M];
  double f64o[M];
  zcc_reduce_scale(u32o, u32, M, zccUint32, &u32s);
  zcc_reduce_scale(i64o, i64, M, zccInt64, &i64s);
  memcpy(f64o, f64, sizeof(f64));
  zcc_reduce_scale(f64o, f64o, M, zccFloat64, &f64s); /* in place */
  for (int i = 0; i < M; i++) {
    if (i8o[i] != (int8_t)(uint8_t)((unsigned)(uint8_t)i8[i] * 3u))
      FAILF("int8 %d * 3: got %d\n", i8[i], i8o[i]);
    if (u32o[i] != u32[i] * u32s) FAILF("uint32 element %d: got %u\n", i, u32o[i]);
    if (i64o[i] != (int64_t)((uint64_t)i64[i] * (uint64_t)i64s))
      FAILF("int64 element %d: got %lld\n", i, (long long)i64o[i]);
    double wd = f64[i] * f64s;
    if (memcmp(&f64o[i], &wd, 8) != 0) FAILF("float64 element %d: got %g, expected %g\n", i, f64o[i], wd);
    float wf = f32[i] * f32s;
    if (fbits(f32o[i]) != fbits(wf)) FAILF("float32 element %d: got %g, expected %g\n", i, f32o[i], wf);
    if (ho[i] != zcc_float_to_half(zcc_half_to_float(h[i]) * 0.5f))
      FAILF("float16 element %d: got 0x%04x\n", i, ho[i]);
    if (bo[i] != zcc_float_to_bf16(zcc_bf16_to_float(b[i]) * 3.0f))
      FAILF("bfloat16 element %d: got 0x%04x\n", i, bo[i]);
    if (e4o[i] != zcc_float_to_e4m3(zcc_e4m3_to_float(e4[i]) * 2.0f))
      FAILF("e4m3 element %d: got 0x%02x\n", i, e4o[i]);
  }
  /* Spot values that do not depend on the conversions above. */
  assert_int_equal(i8o[0], (int8_t)-300 /* -100 * 3 wraps to -44 */);
  assert_int_equal(e4o[M - 1], zcc_float_to_e4m3(448.0f));
  assert_true(zcc_half_to_float(ho[4]) == 1.5f); /* 3.0 * 0.5 */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_half_conversions),
      cmocka_unit_test(test_bf16_conversions),
      cmocka_unit_test(test_fp8_conversions),
      cmocka_unit_test(test_reduce_count_zero),
      cmocka_unit_test(test_reduce_edges),
      cmocka_unit_test(test_reduce_matrix),
      cmocka_unit_test(test_copy_nt),
      cmocka_unit_test(test_reduce_narrow_pairs),
      cmocka_unit_test(test_reduce_avg),
      cmocka_unit_test(test_reduce_scale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
