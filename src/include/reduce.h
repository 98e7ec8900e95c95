/*
 * Host arithmetic on element arrays: datatype sizes, narrow float
 * conversions, and the reduction loops of the host executor.
 *
 * fp16, bf16 and both fp8 formats are reduced with fp32 arithmetic per
 * element: each output element is round-to-nearest-even of (float)a op
 * (float)b. Integer sums and products wrap (two's complement). Avg is a sum
 * on the wire; zcc_reduce_finish_avg divides by nranks at the end (integers:
 * truncating division; floats: fp32 division for the narrow types, fp64 for
 * double, then one rounding to the type). Max/min of floats: if either is
 * NaN the result is NaN.
 */
#ifndef ZCC_REDUCE_H_
#define ZCC_REDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

/* Bytes per element; 0 for an invalid type. */
size_t zcc_type_size(zccDataType_t type);
/* "float32", "bfloat16", ... ; "invalid" otherwise. */
const char *zcc_type_name(zccDataType_t type);
/* "sum", "prod", "max", "min", "avg"; "invalid" otherwise. */
const char *zcc_op_name(zccRedOp_t op);

/* Conversions with round-to-nearest-even; fp8 e4m3 saturates to +-448 (no inf), NaN stays NaN. */
float zcc_half_to_float(uint16_t h);
uint16_t zcc_float_to_half(float f);
float zcc_bf16_to_float(uint16_t b);
uint16_t zcc_float_to_bf16(float f);
float zcc_e4m3_to_float(uint8_t v);
uint8_t zcc_float_to_e4m3(float f);
float zcc_e5m2_to_float(uint8_t v);
uint8_t zcc_float_to_e5m2(float f);

/*
 * dst[i] = a[i] op b[i] for i < count. dst may alias a or b (exactly, not
 * partially). No alignment is required. Avg reduces as sum.
 */
void zcc_reduce(void *dst, const void *a, const void *b, size_t count,
                zccDataType_t type, zccRedOp_t op);

/*
 * Same as zcc_reduce, and also writes the result to dst2 (a second output,
 * e.g. a send slot) in the same pass. dst2 may be NULL.
 */
void zcc_reduce2(void *dst, void *dst2, const void *a, const void *b,
                 size_t count, zccDataType_t type, zccRedOp_t op);

/*
 * zcc_reduce2 whose outputs are written with streaming (non-temporal)
 * stores where they are 16-byte aligned (x86; elsewhere plain stores), then
 * a store fence: for outputs no one reads before the call returns, in
 * memory larger than the caches. dst may alias a or b, as in zcc_reduce.
 */
void zcc_reduce2_nt(void *dst, void *dst2, const void *a, const void *b,
                    size_t count, zccDataType_t type, zccRedOp_t op);

/*
 * zcc_reduce2_nt with streaming stores for dst only: dst2 (a slot a peer
 * reads next) gets plain stores and stays in the cache.
 */
void zcc_reduce2_ntdst(void *dst, void *dst2, const void *a, const void *b,
                       size_t count, zccDataType_t type, zccRedOp_t op);

/*
 * zcc_reduce2_nt with streaming stores for dst2 only (a slot a peer reads
 * next, where its core's copy of the line is slow to take back: stores.h);
 * dst gets plain stores.
 */
void zcc_reduce2_ntdst2(void *dst, void *dst2, const void *a, const void *b,
                        size_t count, zccDataType_t type, zccRedOp_t op);

/* memcpy with streaming stores (x86; elsewhere memcpy), then a store fence:
   dst and src must not overlap. */
void zcc_copy_nt(void *dst, const void *src, size_t n);

/* dst[i] = src[i] / nranks as described above; dst may alias src. */
void zcc_reduce_finish_avg(void *dst, const void *src, size_t count,
                           zccDataType_t type, int nranks);

/*
 * dst[i] = src[i] * scalar, scalar one element of type (pre-multiplied
 * sums): integers wrap, fp16/bf16/fp8 multiply in fp32 and round once.
 * dst may alias src.
 */
void zcc_reduce_scale(void *dst, const void *src, size_t count,
                      zccDataType_t type, const void *scalar);

#endif /* ZCC_REDUCE_H_ */
