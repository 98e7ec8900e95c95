/*
 * The GPU allreduce cost model (collectives/cost.c) against measurements:
 * allreduce_perf -g 2 -G 20 on 2x H200 (NV18), float32 sum, unregistered
 * buffers, the time of one CUDA-graph replay (docs/perf/h200x2.md, runs of
 * 2026-11-29). For every size the model must pick the algorithm that
 * measured fastest there and predict its time within 30%. Prints the
 * predicted-versus-measured table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "planner.h"

typedef struct {
  size_t bytes;
  double ll, oneshot, twoshot; /* us, 0: not measured */
} row_t;

/* Out-of-place times: ZCC_PROTO=ll, ZCC_ALGO=oneshot, ZCC_ALGO=twoshot sweeps,
   and the default sweep's one-shot from 64 MiB up (same run, -G 10). */
static const row_t rows[] = {
    {8, 6.43, 0, 0},          {32, 6.48, 0, 0},          {128, 6.40, 0, 0},
    {512, 6.30, 0, 0},        {2048, 6.69, 0, 0},        {8192, 7.20, 0, 0},
    {32768, 7.23, 0, 0},      {65536, 7.14, 0, 0},       {262144, 0, 13.14, 14.64},
    {524288, 0, 14.06, 15.07}, {1048576, 0, 15.78, 16.56}, {2097152, 0, 18.90, 19.94},
    {4194304, 0, 25.63, 26.93}, {8388608, 0, 39.22, 42.75}, {16777216, 0, 70.37, 76.42},
    {33554432, 0, 127.7, 143.6}, {67108864, 0, 242.8, 0},   {134217728, 0, 482.2, 0},
    {268435456, 0, 957.6, 0}, {536870912, 0, 1908.3, 0},  {1073741824, 0, 3811.8, 0},
};

static void test_predicted_vs_measured(void **state) {
  (void)state;
  unsetenv("ZCC_ALGO");
  unsetenv("ZCC_PROTO");
  printf("| bytes | algorithm | predicted (us) | measured (us) | predicted / measured |\n");
  printf("|---:|---|---:|---:|---:|\n");
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    const row_t *r = &rows[i];
    zcc_gpu_algo_t algo;
    assert_int_equal(zcc_planner_pick_gpu(2, r->bytes, 1, &algo), zccSuccess);
    /* the fastest measured */
    zcc_gpu_algo_t best = ZCC_GPU_LL;
    double bt = 1e30;
    const double m[3] = {r->ll, r->oneshot, r->twoshot};
    for (int a = 0; a < 3; a++)
      if (m[a] > 0 && m[a] < bt) {
        bt = m[a];
        best = (zcc_gpu_algo_t)a;
      }
    double pred = zcc_planner_gpu_predict(algo, 2, r->bytes, 1);
    printf("| %zu | %s | %.2f | %.2f | %.2f |\n", r->bytes, zcc_gpu_algo_name(algo), pred, bt,
           pred / bt);
    assert_int_equal(algo, best);
    assert_true(pred / bt > 0.7 && pred / bt < 1.3);
  }
}

static void test_choices(void **state) {
  (void)state;
  zcc_gpu_algo_t algo;
  assert_int_equal(zcc_planner_pick_gpu(2, 1 << 20, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_ONESHOT);
  assert_int_equal(zcc_planner_pick_gpu(2, 1024, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_LL);
  /* more ranks: two-shot moves fewer bytes per GPU for large messages */
  assert_int_equal(zcc_planner_pick_gpu(8, (size_t)256 << 20, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_TWOSHOT);
  /* the copy-engine pipeline is never picked on its own */
  assert_int_equal(zcc_planner_pick_gpu(2, (size_t)1 << 30, 1, &algo), zccSuccess);
  assert_int_not_equal(algo, ZCC_GPU_CE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predicted_vs_measured),
      cmocka_unit_test(test_choices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
