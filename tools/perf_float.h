/*
 * The benchmarks' own narrow-float conversions (fp16, bf16, fp8 e4m3 and
 * e5m2), written independently of zcc's so that checks do not trust the
 * code they check. Encoding rounds to nearest, ties to even.
 */
#ifndef ZCC_PERF_FLOAT_H_
#define ZCC_PERF_FLOAT_H_

#include <stdint.h>

typedef enum {
  PERF_FP16 = 0,  /* IEEE binary16: 1-5-10, bias 15 */
  PERF_BF16 = 1,  /* bfloat16: 1-8-7, bias 127 */
  PERF_E4M3 = 2,  /* OCP fp8 e4m3fn: 1-4-3, bias 7, no inf, max 448 */
  PERF_E5M2 = 3,  /* OCP fp8 e5m2: 1-5-2, bias 15, IEEE inf and NaN */
  PERF_NUM_FORMATS = 4
} perf_format_t;

/*
 * Nearest value of the format, ties to even. Overflow gives inf (NaN for
 * e4m3, which has no inf); NaN gives the format's quiet NaN.
 */
uint32_t perf_float_encode(perf_format_t fmt, double x);
/* Exact value of an encoding. */
double perf_float_decode(perf_format_t fmt, uint32_t bits);
/* The sign bit of the format. */
uint32_t perf_float_sign_bit(perf_format_t fmt);

#endif /* ZCC_PERF_FLOAT_H_ */
