/*
 * The GPU allreduce cost model (plan/cost.c) against measurements on
 * 2x H200 (NV18), float32 sum, unregistered buffers, out of place
 * (docs/perf/h200x2.md, runs of 2026-11-29). For every size the model must
 * pick the algorithm that measured fastest there and predict its time
 * within 30%. Prints the predicted-versus-measured table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "debug.h"
#include "param.h"
#include "planner.h"

typedef struct {
  size_t bytes;
  double ll, oneshot, twoshot, push; /* us, 0: not measured */
} row_t;

/*
 * ll: the default sweep (LL up to 64 KiB), allreduce_perf -G 20 -n 20, time
 * per operation in a graph (22:00 UTC). push: ZCC_GPU_PUSH_BLOCKS=128, -G 10
 * -n 20 (22:25 UTC). oneshot / twoshot: ZCC_ALGO=oneshot|twoshot staged, one
 * replay of a one-operation graph, graph launch included (20:41-21:00 UTC);
 * slower than push at every size both ran.
 */
static const row_t rows[] = {
    {8, 2.31, 0, 0, 0},          {32, 2.31, 0, 0, 0},         {128, 2.35, 0, 0, 0},
    {512, 2.38, 0, 0, 0},        {2048, 2.51, 0, 0, 0},       {8192, 2.83, 0, 0, 0},
    {32768, 3.02, 0, 0, 0},      {65536, 3.15, 0, 0, 0},      {131072, 0, 0, 0, 6.78},
    {524288, 0, 14.06, 15.07, 7.99}, {2097152, 0, 18.90, 19.94, 13.09},
    {8388608, 0, 39.22, 42.75, 33.40}, {33554432, 0, 127.7, 143.6, 109.6},
    {134217728, 0, 482.2, 0, 401.3}, {536870912, 0, 1908.3, 0, 1562.9},
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
    const struct { zcc_gpu_algo_t a; double t; } m[] = {
        {ZCC_GPU_LL, r->ll}, {ZCC_GPU_ONESHOT, r->oneshot}, {ZCC_GPU_TWOSHOT, r->twoshot},
        {ZCC_GPU_PUSH, r->push}};
    for (size_t a = 0; a < sizeof(m) / sizeof(m[0]); a++)
      if (m[a].t > 0 && m[a].t < bt) {
        bt = m[a].t;
        best = m[a].a;
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
  assert_int_equal(algo, ZCC_GPU_PUSH);
  /* registered buffers move zero copy, never through staging */
  assert_int_equal(zcc_planner_pick_gpu(2, 1 << 20, 0, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_ONESHOT);
  assert_int_equal(zcc_planner_pick_gpu(2, 1024, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_LL);
  /* more ranks: two-shot moves fewer bytes per GPU for large messages */
  assert_int_equal(zcc_planner_pick_gpu(8, (size_t)256 << 20, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_TWOSHOT);
  /* the copy-engine pipeline is never picked on its own */
  assert_int_equal(zcc_planner_pick_gpu(2, (size_t)1 << 30, 1, &algo), zccSuccess);
  assert_int_not_equal(algo, ZCC_GPU_CE);
  /* nor the ring and tree kernels, at any size */
  for (size_t b = 8; b <= ((size_t)8 << 30); b *= 4)
    for (int n = 2; n <= 8; n++) {
      assert_int_equal(zcc_planner_pick_gpu(n, b, 1, &algo), zccSuccess);
      assert_true(algo != ZCC_GPU_RING && algo != ZCC_GPU_TREE);
    }
}

/* ZCC_ALGO=ring|tree force the connector kernels; other names stay errors. */
static void test_forced(void **state) {
  (void)state;
  zcc_gpu_algo_t algo;
  int ring = -1;
  setenv("ZCC_ALGO", "ring", 1);
  zcc_param_reload();
  assert_int_equal(zcc_planner_pick_gpu(3, 1 << 20, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_RING);
  assert_int_equal(zcc_planner_pick_gpu_coll(ZCC_COLL_BROADCAST, &ring), zccSuccess);
  assert_int_equal(ring, 1);
  /* all-to-all has no ring: it keeps its kernel */
  assert_int_equal(zcc_planner_pick_gpu_coll(ZCC_COLL_ALLTOALL, &ring), zccSuccess);
  assert_int_equal(ring, 0);
  setenv("ZCC_ALGO", "tree", 1);
  zcc_param_reload();
  assert_int_equal(zcc_planner_pick_gpu(4, 1 << 20, 1, &algo), zccSuccess);
  assert_int_equal(algo, ZCC_GPU_TREE);
  assert_int_equal(zcc_planner_pick_gpu_coll(ZCC_COLL_REDUCE, &ring), zccSuccess);
  assert_int_equal(ring, 1);
  setenv("ZCC_ALGO", "push", 1);
  zcc_param_reload();
  assert_int_equal(zcc_planner_pick_gpu_coll(ZCC_COLL_ALLGATHER, &ring), zccSuccess);
  assert_int_equal(ring, 0);
  setenv("ZCC_ALGO", "rung", 1);
  zcc_param_reload();
  assert_int_equal(zcc_planner_pick_gpu(2, 1 << 20, 1, &algo), zccInvalidArgument);
  assert_non_null(strstr(zcc_last_error(), "ring or tree"));
  assert_int_equal(zcc_planner_pick_gpu_coll(ZCC_COLL_ALLGATHER, &ring), zccInvalidArgument);
  unsetenv("ZCC_ALGO");
  zcc_param_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predicted_vs_measured),
      cmocka_unit_test(test_choices),
      cmocka_unit_test(test_forced),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
