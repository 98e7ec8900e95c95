/*
 * The tests' own arithmetic on zcc's 12 datatypes, written independently of
 * the library: sizes and names, conversions of the narrow floats (fp16,
 * bf16, fp8 e4m3 and e5m2) with round-to-nearest-even, input generation whose
 * exact result is representable, a reference reduction in int64 / uint64 /
 * double, and bitwise comparison with readable reports.
 */
#ifndef ZTEST_TYPES_H_
#define ZTEST_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

/* Call once (before fork is fine) to build the conversion tables. */
void zt_types_init(void);

size_t zt_type_size(zccDataType_t t);
const char *zt_type_name(zccDataType_t t);
const char *zt_op_name(zccRedOp_t op);

/* Narrow float formats: decode to double, encode from double (RNE). */
typedef enum { ZT_FP16 = 0, ZT_BF16 = 1, ZT_E4M3 = 2, ZT_E5M2 = 3 } zt_mini_t;
double zt_mini_decode(zt_mini_t f, uint32_t bits);
/* Overflow gives infinity, except e4m3 (no infinity) which saturates to +-448. */
uint32_t zt_mini_encode(zt_mini_t f, double v);

/* The "no reduction" pseudo-op for data movement collectives: random bits. */
#define ZT_OP_NONE ((zccRedOp_t)-1)

/*
 * Fill buf[0..count) with inputs of rank `rank` of nranks for op: values whose
 * reduction over every rank, in any order, is exact in the type (see the
 * .c file for the ranges). ZT_OP_NONE: any bit pattern.
 */
void zt_gen(zccDataType_t t, zccRedOp_t op, int nranks, int rank,
            uint64_t seed, void *buf, size_t count);

/*
 * out[i] = op over r of in[r][i] for lo <= i < hi, computed in int64, uint64
 * or double and converted to the type (avg: truncating division for
 * integers; (float)sum / (float)nranks rounded to the type for fp32 and
 * narrower; double for float64).
 */
void zt_ref_reduce(zccDataType_t t, zccRedOp_t op, int nranks,
                   const void *const *in, void *out, size_t lo, size_t hi);

/*
 * Compare count elements bitwise. Returns the number of differing elements
 * and the index of the first in *first (if any).
 */
size_t zt_compare(zccDataType_t t, const void *got, const void *expected,
                  size_t count, size_t *first);

/* "3.5 (0x4300)" for element i of buf. */
const char *zt_elem_str(zccDataType_t t, const void *buf, size_t i,
                        char *out, size_t outlen);

/* A 64-bit hash of bytes (for cross-rank identity checks). */
uint64_t zt_hash(const void *buf, size_t bytes);

#endif /* ZTEST_TYPES_H_ */
