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

static zcc_choice_t gpu_pick(int nranks, size_t bytes, int staged) {
  zcc_select_ctx_t c = {1, nranks, 1, ZCC_PATH_NVL, 0, 0, 0, 0};
  zcc_choice_t ch;
  assert_int_equal(zcc_select(&c, ZCC_COLL_ALLREDUCE, bytes, staged, &ch), zccSuccess);
  return ch;
}

/* The measured kernels: ll is oneshot with the LL protocol. */
enum { M_LL, M_ONESHOT, M_TWOSHOT, M_PUSH };
static int kernel_of(zcc_choice_t ch) {
  if (ch.proto == ZCC_PROTO_LL) return M_LL;
  return ch.algo == ZCC_ALGO_ONESHOT ? M_ONESHOT : ch.algo == ZCC_ALGO_TWOSHOT ? M_TWOSHOT
         : ch.algo == ZCC_ALGO_PUSH  ? M_PUSH : -1;
}

static void test_predicted_vs_measured(void **state) {
  (void)state;
  unsetenv("ZCC_ALGO");
  unsetenv("ZCC_PROTO");
  zcc_param_reload();
  static const char *names[] = {"oneshot/ll", "oneshot/simple", "twoshot/simple", "push/simple"};
  printf("| bytes | algorithm | predicted (us) | measured (us) | predicted / measured |\n");
  printf("|---:|---|---:|---:|---:|\n");
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    const row_t *r = &rows[i];
    zcc_choice_t ch = gpu_pick(2, r->bytes, 1);
    /* the fastest measured */
    int best = M_LL;
    double bt = 1e30;
    const double m[] = {r->ll, r->oneshot, r->twoshot, r->push};
    for (int a = 0; a < 4; a++)
      if (m[a] > 0 && m[a] < bt) {
        bt = m[a];
        best = a;
      }
    double pred = ch.time_us;
    int k = kernel_of(ch);
    assert_true(k >= 0);
    printf("| %zu | %s | %.2f | %.2f | %.2f |\n", r->bytes, names[k], pred, bt, pred / bt);
    assert_int_equal(k, best);
    assert_true(pred / bt > 0.7 && pred / bt < 1.3);
  }
}

static void test_choices(void **state) {
  (void)state;
  zcc_choice_t ch = gpu_pick(2, 1 << 20, 1);
  assert_int_equal(ch.algo, ZCC_ALGO_PUSH);
  /* registered buffers move zero copy, never through staging */
  ch = gpu_pick(2, 1 << 20, 0);
  assert_int_equal(ch.algo, ZCC_ALGO_ONESHOT);
  assert_int_equal(ch.proto, ZCC_PROTO_SIMPLE);
  ch = gpu_pick(2, 1024, 1);
  assert_int_equal(ch.algo, ZCC_ALGO_ONESHOT);
  assert_int_equal(ch.proto, ZCC_PROTO_LL);
  /* more ranks: two-shot moves fewer bytes per GPU for large messages */
  assert_int_equal(gpu_pick(8, (size_t)256 << 20, 1).algo, ZCC_ALGO_TWOSHOT);
  /* the copy-engine pipeline is never picked on its own */
  assert_int_not_equal(gpu_pick(2, (size_t)1 << 30, 1).algo, ZCC_ALGO_CE);
  /* nor the ring and tree kernels, at any size */
  for (size_t b = 8; b <= ((size_t)8 << 30); b *= 4)
    for (int n = 2; n <= 8; n++) {
      zcc_algo_t a = gpu_pick(n, b, 1).algo;
      assert_true(a != ZCC_ALGO_RING && a != ZCC_ALGO_TREE);
    }
}

/*
 * Windows in pinned host memory (the shm transport, link class SYS), 2 ranks
 * sharing one H200 (docs/perf/h200x1.md, 2026-12-02, call 2: allreduce_perf
 * -g 2 --share-gpus 1 with ZCC_P2P_DISABLE=1, graphs, out of place): LL up
 * to 64 KiB, push above (the default), and the ring forced. The model must
 * keep that choice and predict within 30%.
 */
static void test_host_windows(void **state) {
  (void)state;
  unsetenv("ZCC_ALGO");
  unsetenv("ZCC_PROTO");
  zcc_param_reload();
  static const struct {
    size_t bytes;
    double us, ring_us; /* the default's time; the forced ring's (0: not measured) */
  } m[] = {{8, 4.51, 0},           {4096, 5.26, 0},        {32768, 9.82, 0},
           {4194304, 283.1, 299.7}, {16777216, 970.1, 1064.2}, {67108864, 3482.3, 3625.0},
           {268435456, 13361.0, 13585.0}};
  zcc_select_ctx_t c = {1, 2, 1, ZCC_PATH_SYS, 0, 0, 0, 2};
  printf("| bytes (host windows) | algorithm | predicted (us) | measured (us) | ratio |\n");
  for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
    zcc_choice_t ch;
    assert_int_equal(zcc_select(&c, ZCC_COLL_ALLREDUCE, m[i].bytes, 1, &ch), zccSuccess);
    int ll = m[i].bytes <= 65536;
    printf("| %zu | %s | %.2f | %.2f | %.2f |\n", m[i].bytes, ll ? "oneshot/ll" : "push",
           ch.time_us, m[i].us, ch.time_us / m[i].us);
    if (ll) {
      assert_int_equal(ch.algo, ZCC_ALGO_ONESHOT);
      assert_int_equal(ch.proto, ZCC_PROTO_LL);
    } else {
      assert_int_equal(ch.algo, ZCC_ALGO_PUSH);
    }
    assert_true(ch.time_us / m[i].us > 0.7 && ch.time_us / m[i].us < 1.3);
    if (m[i].ring_us > 0) {
      double r = zcc_select_predict(&c, ZCC_COLL_ALLREDUCE, ZCC_ALGO_RING, ZCC_PROTO_SIMPLE,
                                    m[i].bytes, 1);
      printf("| %zu | ring (forced) | %.2f | %.2f | %.2f |\n", m[i].bytes, r, m[i].ring_us,
             r / m[i].ring_us);
      assert_true(r / m[i].ring_us > 0.7 && r / m[i].ring_us < 1.3);
    }
  }
  /* the same GPUs' NVLink model is untouched: no host term without class SYS */
  zcc_select_ctx_t nvl = {1, 2, 1, ZCC_PATH_NVL, 0, 0, 0, 2};
  assert_true(zcc_select_predict(&nvl, ZCC_COLL_ALLREDUCE, ZCC_ALGO_PUSH, ZCC_PROTO_SIMPLE,
                                 (size_t)64 << 20, 1) < 400.0);
}

/* ZCC_ALGO=ring|tree force the connector kernels; unknown names are errors. */
static void test_forced(void **state) {
  (void)state;
  zcc_select_ctx_t c3 = {1, 3, 1, ZCC_PATH_SELF, 0, 0, 0, 0}, c4 = {1, 4, 1, ZCC_PATH_SELF, 0, 0, 0, 0};
  zcc_choice_t ch;
  setenv("ZCC_ALGO", "ring", 1);
  zcc_param_reload();
  assert_int_equal(gpu_pick(3, 1 << 20, 1).algo, ZCC_ALGO_RING);
  assert_int_equal(zcc_select(&c3, ZCC_COLL_BROADCAST, 1 << 20, 1, &ch), zccSuccess);
  assert_int_equal(ch.algo, ZCC_ALGO_RING);
  /* all-to-all has no ring: it keeps its kernel */
  assert_int_equal(zcc_select(&c3, ZCC_COLL_ALLTOALL, 1 << 20, 1, &ch), zccSuccess);
  assert_int_equal(ch.algo, ZCC_ALGO_ONESHOT);
  setenv("ZCC_ALGO", "tree", 1);
  zcc_param_reload();
  assert_int_equal(gpu_pick(4, 1 << 20, 1).algo, ZCC_ALGO_TREE);
  assert_int_equal(zcc_select(&c4, ZCC_COLL_REDUCE, 1 << 20, 1, &ch), zccSuccess);
  assert_int_equal(ch.algo, ZCC_ALGO_RING);
  setenv("ZCC_ALGO", "push", 1);
  zcc_param_reload();
  assert_int_equal(zcc_select(&c4, ZCC_COLL_ALLGATHER, 1 << 20, 1, &ch), zccSuccess);
  assert_int_equal(ch.algo, ZCC_ALGO_ONESHOT);
  setenv("ZCC_ALGO", "rung", 1);
  zcc_param_reload();
  assert_int_equal(zcc_select(&c4, ZCC_COLL_ALLREDUCE, 1 << 20, 1, &ch), zccInvalidArgument);
  assert_non_null(strstr(zcc_last_error(), "ring, tree, oneshot"));
  assert_int_equal(zcc_select(&c4, ZCC_COLL_ALLGATHER, 1 << 20, 1, &ch), zccInvalidArgument);
  unsetenv("ZCC_ALGO");
  zcc_param_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predicted_vs_measured),
      cmocka_unit_test(test_choices),
      cmocka_unit_test(test_host_windows),
      cmocka_unit_test(test_forced),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
