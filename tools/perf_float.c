/*
 * Narrow-float encoding and decoding from the format's parameters: one
 * generic path for fp16, bf16 and both fp8 formats, exact in double.
 */
#include "perf_float.h"

#include <math.h>

typedef struct {
  int ebits;     /* exponent bits */
  int mbits;     /* mantissa bits */
  int bias;
  int ieee;      /* all-ones exponent means inf (mantissa 0) or NaN */
  uint32_t qnan; /* quiet NaN, sign clear */
} fmt_desc_t;

static const fmt_desc_t fmts[PERF_NUM_FORMATS] = {
    [PERF_FP16] = {.ebits = 5, .mbits = 10, .bias = 15, .ieee = 1, .qnan = 0x7e00},
    [PERF_BF16] = {.ebits = 8, .mbits = 7, .bias = 127, .ieee = 1, .qnan = 0x7fc0},
    [PERF_E4M3] = {.ebits = 4, .mbits = 3, .bias = 7, .ieee = 0, .qnan = 0x7f},
    [PERF_E5M2] = {.ebits = 5, .mbits = 2, .bias = 15, .ieee = 1, .qnan = 0x7e},
};

uint32_t perf_float_sign_bit(perf_format_t fmt)
{
  const fmt_desc_t *d = &fmts[fmt];

  return 1u << (d->ebits + d->mbits);
}

/* Largest finite encoding with the sign clear. */
static uint32_t max_finite(const fmt_desc_t *d)
{
  uint32_t expmax = (1u << d->ebits) - 1;
  uint32_t mantmax = (1u << d->mbits) - 1;

  if (d->ieee)
    return ((expmax - 1) << d->mbits) | mantmax;
  /* e4m3: S.1111.111 is NaN, so the largest is S.1111.110 */
  return (expmax << d->mbits) | (mantmax - 1);
}

static uint32_t overflow_value(const fmt_desc_t *d, uint32_t sign)
{
  if (d->ieee)
    return sign | (((1u << d->ebits) - 1) << d->mbits);
  return sign | d->qnan;
}

uint32_t perf_float_encode(perf_format_t fmt, double x)
{
  const fmt_desc_t *d = &fmts[fmt];
  uint32_t sign = signbit(x) ? perf_float_sign_bit(fmt) : 0;
  int emin = 1 - d->bias, e, k;
  double a = fabs(x), r, hidden = ldexp(1.0, d->mbits);
  uint32_t bits;

  if (isnan(x))
    return d->qnan;
  if (isinf(x))
    return overflow_value(d, sign);
  if (a == 0.0)
    return sign;
  frexp(a, &k);
  e = k - 1; /* a in [2^e, 2^(e+1)) */
  if (e < emin)
    e = emin;
  /* significand in units of the last place; division by a power of two is exact */
  r = rint(a / ldexp(1.0, e - d->mbits));
  if (r >= 2.0 * hidden) {
    r *= 0.5;
    e++;
  }
  if (r < hidden) {
    bits = (uint32_t)r; /* subnormal (or zero after rounding) */
  } else {
    long field = (long)e + d->bias;
    if (field > (long)((1u << d->ebits) - 1))
      return overflow_value(d, sign);
    bits = ((uint32_t)field << d->mbits) | (uint32_t)(r - hidden);
  }
  if (bits > max_finite(d))
    return overflow_value(d, sign);
  return sign | bits;
}

double perf_float_decode(perf_format_t fmt, uint32_t bits)
{
  const fmt_desc_t *d = &fmts[fmt];
  uint32_t expmax = (1u << d->ebits) - 1, mantmask = (1u << d->mbits) - 1;
  uint32_t field = (bits >> d->mbits) & expmax, mant = bits & mantmask;
  double s = (bits & perf_float_sign_bit(fmt)) ? -1.0 : 1.0;

  if (d->ieee && field == expmax)
    return mant ? NAN : s * INFINITY;
  if (!d->ieee && field == expmax && mant == mantmask)
    return NAN;
  if (field == 0)
    return s * ldexp((double)mant, 1 - d->bias - d->mbits);
  return s * ldexp((double)(mant | (1u << d->mbits)), (int)field - d->bias - d->mbits);
}
