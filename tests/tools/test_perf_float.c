/*
 * The benchmark checks trust their own narrow-float conversions
 * (tools/perf_float.c); zcc reduces with its own (src/misc/reduce.c).
 * Two independent implementations must agree on every fp16, bf16 and fp8
 * encoding, and on rounding of values between them.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "perf_float.h"
#include "reduce.h"

static int is_nan_bits(perf_format_t f, uint32_t b) {
  return isnan(perf_float_decode(f, b));
}

static void test_decode_agrees(void **s) {
  for (uint32_t b = 0; b < 65536; b++) {
    double p = perf_float_decode(PERF_FP16, b), z = zcc_half_to_float((uint16_t)b);
    if (!(isnan(p) && isnan(z)) && p != z) fail_msg("fp16 0x%04x: perf %g zcc %g", b, p, z);
    p = perf_float_decode(PERF_BF16, b);
    z = zcc_bf16_to_float((uint16_t)b);
    if (!(isnan(p) && isnan(z)) && p != z) fail_msg("bf16 0x%04x: perf %g zcc %g", b, p, z);
  }
  for (uint32_t b = 0; b < 256; b++) {
    double p = perf_float_decode(PERF_E4M3, b), z = zcc_e4m3_to_float((uint8_t)b);
    if (!(isnan(p) && isnan(z)) && p != z) fail_msg("e4m3 0x%02x: perf %g zcc %g", b, p, z);
    p = perf_float_decode(PERF_E5M2, b);
    z = zcc_e5m2_to_float((uint8_t)b);
    if (!(isnan(p) && isnan(z)) && p != z) fail_msg("e5m2 0x%02x: perf %g zcc %g", b, p, z);
  }
}

/* Every representable value, its neighbours' midpoints and points between. */
static void check_encode(perf_format_t f, uint32_t nbits, uint32_t (*zenc)(float)) {
  uint32_t n = 1u << nbits;
  for (uint32_t b = 0; b + 1 < n; b++) {
    if (is_nan_bits(f, b) || is_nan_bits(f, b + 1)) continue;
    double lo = perf_float_decode(f, b), hi = perf_float_decode(f, b + 1);
    if (isinf(lo) || isinf(hi) || lo == hi) continue;
    double probes[3] = {lo, (lo + hi) / 2, lo + (hi - lo) / 4};
    for (int k = 0; k < 3; k++) {
      float x = (float)probes[k];
      if ((double)x != probes[k]) continue; /* only exact fp32 inputs */
      uint32_t pe = perf_float_encode(f, x), ze = zenc(x);
      if (pe != ze) fail_msg("format %d: encode(%.9g): perf 0x%x zcc 0x%x", f, (double)x, pe, ze);
    }
  }
}

static uint32_t z_half(float x) { return zcc_float_to_half(x); }
static uint32_t z_bf16(float x) { return zcc_float_to_bf16(x); }
static uint32_t z_e5m2(float x) { return zcc_float_to_e5m2(x); }
static uint32_t z_e4m3(float x) { return zcc_float_to_e4m3(x); }

static void test_encode_agrees(void **s) {
  check_encode(PERF_FP16, 16, z_half);
  check_encode(PERF_BF16, 16, z_bf16);
  check_encode(PERF_E5M2, 8, z_e5m2);
  /* e4m3 within range (the two differ on overflow by design: the checks
     never produce values past 448). */
  check_encode(PERF_E4M3, 7, z_e4m3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_agrees),
      cmocka_unit_test(test_encode_agrees),
  };
  return cmocka_run_group_tests_name("perf_float", tests, NULL, NULL);
}
