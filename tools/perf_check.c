/*
 * Exact checks. Every input element is a small integer derived from
 * (seed, rank, index), chosen per type and op so that every partial result
 * of any reduction order is exactly representable in the type:
 *
 *   sum, avg   |value of rank r| <= m_r with sum over ranks of m_r = L
 *   prod       +-1 or +-2 (unsigned: 1 or 2), at most log2(L) factors of 2
 *   max, min,
 *   no op      any integer in [-L, L] ([0, L] unsigned)
 *
 * where L is the type's exact-integer limit (fp8 e4m3 16, e5m2 8, bf16 256,
 * fp16 2048, int8 127, uint8 254, wider types 2^20). Expected results are
 * computed here in double (exact for these magnitudes) and int64, and
 * rounded to the type with perf_float.c, never with zcc's code. Avg is
 * truncating integer division for integer types, fp32 division for float,
 * fp16, bf16 and fp8 (then one rounding to the type), fp64 for double.
 */
#include "perf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "perf_float.h"

/* Mismatch lines a rank prints in all, so that a broken run stays readable. */
#define PERF_MAX_REPORTS 20

static int reports_left = PERF_MAX_REPORTS;

static int is_signed_int(int type)
{
  return type == zccInt8 || type == zccInt32 || type == zccInt64;
}

static int is_unsigned_int(int type)
{
  return type == zccUint8 || type == zccUint32 || type == zccUint64;
}

static int is_float(int type)
{
  return !is_signed_int(type) && !is_unsigned_int(type);
}

/* Format of a narrow float type, or -1. */
static int narrow_format(int type)
{
  switch (type) {
  case zccFloat16:
    return PERF_FP16;
  case zccBfloat16:
    return PERF_BF16;
  case zccFloat8e4m3:
    return PERF_E4M3;
  case zccFloat8e5m2:
    return PERF_E5M2;
  default:
    return -1;
  }
}

/* Largest integer magnitude such that every integer up to it is exact. */
static int64_t type_limit(int type)
{
  switch (type) {
  case zccInt8:
    return 127; /* -128 is the poison value */
  case zccUint8:
    return 254; /* 255 is the poison value */
  case zccFloat16:
    return 2048;
  case zccBfloat16:
    return 256;
  case zccFloat8e4m3:
    return 16;
  case zccFloat8e5m2:
    return 8;
  default:
    return 1 << 20;
  }
}

static int floor_log2(int64_t v)
{
  int k = 0;

  while (v >= 2) {
    v >>= 1;
    k++;
  }
  return k;
}

static uint64_t mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t perf_seed(size_t size, int type, int op, int root, int inplace)
{
  uint64_t s = mix64((uint64_t)size);

  s = mix64(s ^ ((uint64_t)(type + 1) << 8) ^ ((uint64_t)(op + 2) << 16));
  return mix64(s ^ ((uint64_t)(root + 1) << 24) ^ ((uint64_t)inplace << 62));
}

/* Input element idx of rank. */
static int64_t input_value(const perf_data_t *d, int rank, size_t idx)
{
  uint64_t h = mix64(d->seed ^ (((uint64_t)rank << 48) | (uint64_t)idx));
  int64_t lim = type_limit(d->type);
  int n = d->nranks;
  int sign = !is_unsigned_int(d->type);

  switch (d->op) {
  case zccSum:
  case zccAvg: {
    int64_t m = lim / n + (rank < lim % n ? 1 : 0);
    if (sign)
      return (int64_t)(h % (uint64_t)(2 * m + 1)) - m;
    return (int64_t)(h % (uint64_t)(m + 1));
  }
  case zccProd: {
    int64_t twos = floor_log2(lim) < n ? floor_log2(lim) : n;
    int64_t slot = (int64_t)((idx % (size_t)n + (size_t)rank) % (size_t)n);
    int64_t mag = (slot < twos && (h & 1)) ? 2 : 1;
    return (sign && (h & 2)) ? -mag : mag;
  }
  default:
    if (sign)
      return (int64_t)(h % (uint64_t)(2 * lim + 1)) - lim;
    return (int64_t)(h % (uint64_t)(lim + 1));
  }
}

/* Encodings of the integers [-2048, 2048] in each narrow format. */
#define PERF_TABLE_LIM 2048
static uint16_t narrow_table[PERF_NUM_FORMATS][2 * PERF_TABLE_LIM + 1];
static int narrow_table_ready[PERF_NUM_FORMATS];

static uint32_t narrow_encode(int fmt, double v)
{
  if (v == nearbyint(v) && fabs(v) <= PERF_TABLE_LIM) {
    if (!narrow_table_ready[fmt]) {
      for (int i = -PERF_TABLE_LIM; i <= PERF_TABLE_LIM; i++)
        narrow_table[fmt][i + PERF_TABLE_LIM] =
            (uint16_t)perf_float_encode((perf_format_t)fmt, (double)i);
      narrow_table_ready[fmt] = 1;
    }
    if (v == 0.0 && signbit(v))
      return perf_float_sign_bit((perf_format_t)fmt);
    return narrow_table[fmt][(int)v + PERF_TABLE_LIM];
  }
  return perf_float_encode((perf_format_t)fmt, v);
}

/* Store v, already a value of the type (integer types: in range), at element i. */
static void store(int type, void *buf, size_t i, double v)
{
  switch (type) {
  case zccInt8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case zccUint8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case zccInt32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case zccUint32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  case zccInt64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  case zccUint64:
    ((uint64_t *)buf)[i] = (uint64_t)v;
    break;
  case zccFloat32:
    ((float *)buf)[i] = (float)v;
    break;
  case zccFloat64:
    ((double *)buf)[i] = v;
    break;
  case zccFloat16:
  case zccBfloat16:
    ((uint16_t *)buf)[i] = (uint16_t)narrow_encode(narrow_format(type), v);
    break;
  case zccFloat8e4m3:
  case zccFloat8e5m2:
    ((uint8_t *)buf)[i] = (uint8_t)narrow_encode(narrow_format(type), v);
    break;
  }
}

/* The element as a double, for messages. */
static double load(int type, const void *buf, size_t i)
{
  switch (type) {
  case zccInt8:
    return ((const int8_t *)buf)[i];
  case zccUint8:
    return ((const uint8_t *)buf)[i];
  case zccInt32:
    return ((const int32_t *)buf)[i];
  case zccUint32:
    return ((const uint32_t *)buf)[i];
  case zccInt64:
    return (double)((const int64_t *)buf)[i];
  case zccUint64:
    return (double)((const uint64_t *)buf)[i];
  case zccFloat32:
    return ((const float *)buf)[i];
  case zccFloat64:
    return ((const double *)buf)[i];
  case zccFloat16:
  case zccBfloat16:
    return perf_float_decode(narrow_format(type), ((const uint16_t *)buf)[i]);
  default:
    return perf_float_decode(narrow_format(type), ((const uint8_t *)buf)[i]);
  }
}

void perf_fill(const perf_data_t *d, int rank, void *buf, size_t n)
{
  for (size_t i = 0; i < n; i++)
    store(d->type, buf, i, (double)input_value(d, rank, i));
}

void perf_poison(int type, void *buf, size_t n)
{
  size_t i;

  switch (type) {
  case zccInt8:
    memset(buf, 0x80, n);
    break;
  case zccInt32:
    for (i = 0; i < n; i++)
      ((int32_t *)buf)[i] = INT32_MIN;
    break;
  case zccInt64:
    for (i = 0; i < n; i++)
      ((int64_t *)buf)[i] = INT64_MIN;
    break;
  default:
    /* unsigned: the maximum, beyond every expected value; floats: NaN */
    memset(buf, 0xff, n * perf_type_size(type));
    break;
  }
}

/* The exact result of reducing element idx over all ranks. */
static double expected_reduced(const perf_data_t *d, size_t idx)
{
  int n = d->nranks;
  int64_t acc = input_value(d, 0, idx);

  for (int r = 1; r < n; r++) {
    int64_t v = input_value(d, r, idx);
    switch (d->op) {
    case zccProd:
      acc *= v;
      break;
    case zccMax:
      acc = v > acc ? v : acc;
      break;
    case zccMin:
      acc = v < acc ? v : acc;
      break;
    default: /* sum, avg */
      acc += v;
      break;
    }
  }
  if (d->op != zccAvg)
    return (double)acc;
  if (!is_float(d->type))
    return (double)(acc / n); /* C division truncates toward zero */
  if (d->type == zccFloat64)
    return (double)acc / (double)n;
  return (double)((float)acc / (float)n);
}

int64_t perf_verify(const perf_data_t *d, const perf_coll_t *coll,
                    const perf_counts_t *c, int rank, int root,
                    const void *out, const char *label)
{
  size_t n = coll->out_count(c, rank, d->nranks, root);
  size_t ts = perf_type_size(d->type);
  uint64_t zero_mask = 0;
  int64_t wrong = 0;

  if (is_float(d->type)) {
    /* +0 and -0 compare equal: mask the sign bit */
    zero_mask = ~(1ull << (8 * ts - 1));
  }
  for (size_t i = 0; i < n; i++) {
    perf_source_t s = coll->source(c, i, rank, d->nranks, root);
    double e = s.src_rank < 0 ? expected_reduced(d, s.src_index)
                              : (double)input_value(d, s.src_rank, s.src_index);
    uint64_t want = 0, got = 0;

    store(d->type, &want, 0, e);
    memcpy(&got, (const char *)out + i * ts, ts);
    if (want == got)
      continue;
    if (zero_mask && ((want | got) & zero_mask) == 0)
      continue;
    wrong++;
    if (reports_left > 0) {
      double w = load(d->type, &want, 0), g = load(d->type, out, i);
      fprintf(stderr, "%s: element %zu: expected %.9g, got %.9g (bits 0x%0*" PRIx64
              ")\n", label, i, w, g, (int)(2 * ts), got);
      if (--reports_left == 0)
        fprintf(stderr, "%s: further mismatches are counted, not shown\n", label);
    }
  }
  return wrong;
}
