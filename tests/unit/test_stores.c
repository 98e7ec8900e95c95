/*
 * Plain or streaming stores for a staged allreduce's result (stores.h):
 * the trial's schedule and decision, then 2 ranks (threads) running the
 * ring out of place while their classes switch kinds between calls, every
 * result exact, calls in a group and in place not counted.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "param.h"
#include "stores.h"
#include "zcc.h"

/* The kinds of a trial: blocks of ZCC_STORES_BLOCK, streaming first, the
   first call of each block untimed. */
static void test_schedule(void **s) {
  zcc_stores_class_t c;
  memset(&c, 0, sizeof(c));
  const uint64_t retune = 5;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < ZCC_STORES_TRIAL; i++) {
      int timed, decided;
      int k = zcc_stores_next(&c, retune, &timed, &decided);
      int want = (i / ZCC_STORES_BLOCK) % 2 == 0;
      if (k != want || timed != (i % ZCC_STORES_BLOCK != 0) || decided)
        fail_msg("round %d call %d: got kind %d timed %d decided %d, expected kind %d timed %d",
                 round, i, k, timed, decided, want, i % ZCC_STORES_BLOCK != 0);
      /* Plain takes 100 us, streaming 120 (one outlier each: the median ignores it). */
      if (timed) zcc_stores_record(&c, k, k ? (i == 1 ? 10.0 : 120.0) : (i == 4 ? 999.0 : 100.0));
    }
    for (uint64_t i = 0; i < retune; i++) {
      int timed, decided;
      int k = zcc_stores_next(&c, retune, &timed, &decided);
      assert_int_equal(k, 0); /* plain won */
      assert_int_equal(timed, 0);
      assert_int_equal(decided, i == 0);
    }
    assert_int_equal(c.decided, 1);
    assert_true(c.med[0] == 100.0f && c.med[1] == 120.0f);
    assert_int_equal(c.n[0], ZCC_STORES_SAMPLES);
  }
}

/* The first trials come sooner: 64, 128, 256 and 512 calls after the one
   before, then every `retune`. */
static void test_early_trials(void **s) {
  zcc_stores_class_t c;
  memset(&c, 0, sizeof(c));
  const uint64_t want[] = {18, 100, 246, 520, 1050, 2068, 3086};
  size_t got = 0;
  for (uint64_t call = 0; call < 3100; call++) {
    int timed, decided;
    int k = zcc_stores_next(&c, 1000, &timed, &decided);
    if (timed) zcc_stores_record(&c, k, k ? 5.0 : 7.0);
    if (decided) {
      if (got >= sizeof(want) / sizeof(want[0]) || want[got] != call)
        fail_msg("decision %zu at call %llu, expected at %llu", got, (unsigned long long)call,
                 got < sizeof(want) / sizeof(want[0]) ? (unsigned long long)want[got] : 0ull);
      got++;
      assert_int_equal(k, 1);
    }
  }
  assert_int_equal(got, sizeof(want) / sizeof(want[0]));
}

static void run_trial(zcc_stores_class_t *c, double plain_us, double stream_us, int skip) {
  for (int i = 0; i < ZCC_STORES_TRIAL; i++) {
    int timed;
    int k = zcc_stores_next(c, 100, &timed, NULL);
    if (timed && !(skip >= 0 && k == skip)) zcc_stores_record(c, k, k ? stream_us : plain_us);
  }
}

static void test_decisions(void **s) {
  zcc_stores_class_t c;
  int timed, decided;
  /* Streaming faster; then a tie keeps streaming; then plain faster. */
  memset(&c, 0, sizeof(c));
  run_trial(&c, 300, 200, -1);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 1);
  assert_int_equal(decided, 1);
  memset(&c, 0, sizeof(c));
  run_trial(&c, 200, 200, -1);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 1);
  memset(&c, 0, sizeof(c));
  run_trial(&c, 150, 200, -1);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 0);
  assert_int_equal(decided, 1);
  /* A trial without a time of one kind (its calls failed) decides nothing:
     the class keeps the kind it had. */
  assert_true(c.next_trial == ZCC_STORES_TRIAL + 64);
  while (c.calls < c.next_trial) zcc_stores_next(&c, 100, &timed, NULL);
  run_trial(&c, 150, 1, 1);
  assert_int_equal(c.n[0], ZCC_STORES_SAMPLES);
  assert_int_equal(c.n[1], 0);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 0);
  assert_int_equal(decided, 0);
  /* retune 0: always streaming, nothing timed or counted. */
  memset(&c, 0, sizeof(c));
  for (int i = 0; i < 50; i++) {
    assert_int_equal(zcc_stores_next(&c, 0, &timed, &decided), 1);
    assert_int_equal(timed, 0);
  }
  assert_true(c.calls == 0);
  /* Classes: per algorithm and power of two. */
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, 1), 0);
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, (1 << 20) + 5), 20);
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, (2 << 20) - 1), 20);
  assert_int_equal(zcc_stores_class(ZCC_STORES_TWOSHOT, 1 << 20), 64 + 20);
}

#define COUNT 100003 /* floats: several shm slots, odd tail */
#define CALLS 60

typedef struct {
  zccComm_t comm;
  int rank, inplace, calls, bad;
  float *in, *out;
} rank_arg_t;

static float val(int r, size_t i, int call) {
  return (float)((int)((i * 13 + (size_t)r * 7 + (size_t)call * 3) % 101) - 50);
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  for (int call = 0; call < a->calls && !a->bad; call++) {
    for (size_t i = 0; i < COUNT; i++) a->in[i] = val(a->rank, i, call);
    float *out = a->inplace ? a->in : a->out;
    if (!a->inplace) memset(out, 0xff, COUNT * sizeof(float)); /* NaN poison */
    if (zccAllReduce(a->in, out, COUNT, zccFloat32, zccSum, a->comm, NULL) != zccSuccess) {
      a->bad = 1;
      fprintf(stderr, "rank %d call %d: %s\n", a->rank, call, zccGetLastError(a->comm));
      break;
    }
    for (size_t i = 0; i < COUNT; i++) {
      float e = val(0, i, call) + val(1, i, call);
      if (out[i] != e) {
        fprintf(stderr, "rank %d call %d element %zu: expected %g got %g\n", a->rank, call, i,
                e, out[i]);
        a->bad = 1;
        break;
      }
    }
  }
  return NULL;
}

static void run_ranks(zccComm_t *comms, float **in, float **out, int inplace, int calls) {
  pthread_t th[2];
  rank_arg_t a[2];
  for (int r = 0; r < 2; r++) {
    a[r] = (rank_arg_t){.comm = comms[r], .rank = r, .inplace = inplace, .calls = calls,
                        .in = in[r], .out = out[r]};
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  assert_int_equal(a[0].bad, 0);
  assert_int_equal(a[1].bad, 0);
}

static void test_ring_switching(void **s) {
  setenv("ZCC_ALGO", "ring", 1);
  setenv("ZCC_RING_NT_BYTES", "1", 1);
  setenv("ZCC_NT_TUNE", "4", 1);
  zcc_param_reload();
  zccComm_t comms[2];
  assert_int_equal(zccCommInitAll(comms, 2, NULL), zccSuccess);
  float *in[2], *out[2];
  for (int r = 0; r < 2; r++) {
    in[r] = malloc(COUNT * sizeof(float));
    out[r] = malloc(COUNT * sizeof(float));
    assert_non_null(in[r]);
    assert_non_null(out[r]);
  }
  int cls = zcc_stores_class(ZCC_STORES_RING, COUNT * sizeof(float));
  /* Out of place: 60 calls, three trials of 18 with 4 calls between. */
  run_ranks(comms, in, out, 0, CALLS);
  for (int r = 0; r < 2; r++) {
    assert_non_null(comms[r]->stores);
    zcc_stores_class_t *c = &comms[r]->stores[cls];
    if (c->calls != CALLS || !c->decided)
      fail_msg("rank %d: class %d counted %llu calls (expected %d), decided %d", r, cls,
               (unsigned long long)c->calls, CALLS, c->decided);
    assert_true(c->med[0] > 0 && c->med[1] > 0);
  }
  /* In place: no choice, not counted. */
  run_ranks(comms, in, out, 1, 3);
  /* A group (one thread, both ranks): runs the class's kind, not counted. */
  for (int k = 0; k < 2; k++) {
    for (int r = 0; r < 2; r++) {
      for (size_t i = 0; i < COUNT; i++) in[r][i] = val(r, i, 7);
      memset(out[r], 0xff, COUNT * sizeof(float));
    }
    assert_int_equal(zccGroupStart(), zccSuccess);
    for (int r = 0; r < 2; r++)
      assert_int_equal(
          zccAllReduce(in[r], out[r], COUNT, zccFloat32, zccSum, comms[r], NULL), zccSuccess);
    assert_int_equal(zccGroupEnd(), zccSuccess);
    for (int r = 0; r < 2; r++)
      for (size_t i = 0; i < COUNT; i++)
        if (out[r][i] != val(0, i, 7) + val(1, i, 7))
          fail_msg("group, rank %d element %zu: expected %g got %g", r, i,
                   val(0, i, 7) + val(1, i, 7), out[r][i]);
  }
  for (int r = 0; r < 2; r++) assert_true(comms[r]->stores[cls].calls == CALLS);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(zccCommDestroy(comms[r]), zccSuccess);
    free(in[r]);
    free(out[r]);
  }
  unsetenv("ZCC_ALGO");
  unsetenv("ZCC_RING_NT_BYTES");
  unsetenv("ZCC_NT_TUNE");
  zcc_param_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_decisions),
      cmocka_unit_test(test_early_trials),
      cmocka_unit_test(test_ring_switching),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
