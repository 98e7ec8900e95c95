/*
 * Plain or streaming stores for a staged allreduce's result and slots
 * (stores.h): the trial's schedule and decision for two and four kinds,
 * then 2 ranks (threads) running the ring out of place and in place while
 * their classes switch kinds between calls, every result exact, calls in a
 * group not counted.
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

/* The kinds of a trial of a class that may stream its result only: blocks
   of ZCC_STORES_BLOCK, streaming first, the first call of each block
   untimed, three rounds. */
static void test_schedule(void **s) {
  zcc_stores_class_t c;
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT;
  const uint64_t retune = 5;
  const int trial = zcc_stores_trial_calls(c.mask);
  assert_int_equal(trial, 18);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < trial; i++) {
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

/* A class that may stream its result and its slots: four kinds, most
   streaming first (both, slots, result, plain), two rounds. */
static void test_schedule_four(void **s) {
  zcc_stores_class_t c;
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT | ZCC_STORES_SLOTS;
  const int order[4] = {3, 2, 1, 0};
  const double us[4] = {95.0, 130.0, 90.0, 140.0}; /* by kind: slots streaming is fastest */
  const int trial = zcc_stores_trial_calls(c.mask);
  assert_int_equal(trial, 24);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < trial; i++) {
      int timed, decided;
      int k = zcc_stores_next(&c, 7, &timed, &decided);
      int want = order[(i / ZCC_STORES_BLOCK) % 4];
      if (k != want || timed != (i % ZCC_STORES_BLOCK != 0) || decided)
        fail_msg("round %d call %d: got kind %d timed %d decided %d, expected kind %d timed %d",
                 round, i, k, timed, decided, want, i % ZCC_STORES_BLOCK != 0);
      /* One outlier in the fastest kind: its median stays lowest. */
      if (timed) zcc_stores_record(&c, k, k == 2 && i == 4 ? 500.0 : us[k]);
    }
    int timed, decided;
    assert_int_equal(zcc_stores_next(&c, 7, &timed, &decided), 2);
    assert_int_equal(decided, 1);
    assert_int_equal(timed, 0);
    for (int k = 0; k < 4; k++) {
      assert_int_equal(c.n[k], 2 * (ZCC_STORES_BLOCK - 1));
      assert_true(c.med[k] == (float)us[k]);
    }
    for (int i = 1; i < 7; i++) {
      assert_int_equal(zcc_stores_next(&c, 7, &timed, &decided), 2);
      assert_int_equal(decided, 0);
    }
  }
  /* Slots only (in place): streaming slots first, then plain, three rounds. */
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_SLOTS;
  assert_int_equal(zcc_stores_trial_calls(c.mask), 18);
  for (int i = 0; i < 18; i++) {
    int timed;
    int k = zcc_stores_next(&c, 100, &timed, NULL);
    assert_int_equal(k, (i / ZCC_STORES_BLOCK) % 2 == 0 ? ZCC_STORES_SLOTS : 0);
    if (timed) zcc_stores_record(&c, k, k ? 50.0 : 80.0);
  }
  int timed;
  assert_int_equal(zcc_stores_next(&c, 100, &timed, NULL), ZCC_STORES_SLOTS);
  /* retune 0: every bit of the mask streams, nothing counted. */
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT | ZCC_STORES_SLOTS;
  assert_int_equal(zcc_stores_next(&c, 0, &timed, NULL), 3);
  assert_true(c.calls == 0);
}

/* The first trials come sooner: 64, 128, 256 and 512 calls after the one
   before, then every `retune`. */
static void test_early_trials(void **s) {
  zcc_stores_class_t c;
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT;
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
  for (int i = 0; i < zcc_stores_trial_calls(c->mask); i++) {
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
  c.mask = ZCC_STORES_OUT;
  run_trial(&c, 300, 200, -1);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 1);
  assert_int_equal(decided, 1);
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT;
  run_trial(&c, 200, 200, -1);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 1);
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT;
  run_trial(&c, 150, 200, -1);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 0);
  assert_int_equal(decided, 1);
  /* A trial without a time of one kind (its calls failed) decides nothing:
     the class keeps the kind it had. */
  assert_true(c.next_trial == 18 + 64);
  while (c.calls < c.next_trial) zcc_stores_next(&c, 100, &timed, NULL);
  run_trial(&c, 150, 1, 1);
  assert_int_equal(c.n[0], ZCC_STORES_SAMPLES);
  assert_int_equal(c.n[1], 0);
  assert_int_equal(zcc_stores_next(&c, 100, &timed, &decided), 0);
  assert_int_equal(decided, 0);
  /* retune 0: always streaming, nothing timed or counted. */
  memset(&c, 0, sizeof(c));
  c.mask = ZCC_STORES_OUT;
  for (int i = 0; i < 50; i++) {
    assert_int_equal(zcc_stores_next(&c, 0, &timed, &decided), 1);
    assert_int_equal(timed, 0);
  }
  assert_true(c.calls == 0);
  /* Classes: per algorithm, mask and power of two. */
  const unsigned B = ZCC_STORES_OUT | ZCC_STORES_SLOTS;
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, ZCC_STORES_OUT, 1), 64);
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, B, (1 << 20) + 5), 3 * 64 + 20);
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, B, (2 << 20) - 1), 3 * 64 + 20);
  assert_int_equal(zcc_stores_class(ZCC_STORES_RING, ZCC_STORES_SLOTS, 1 << 20), 2 * 64 + 20);
  assert_int_equal(zcc_stores_class(ZCC_STORES_TWOSHOT, ZCC_STORES_OUT, 1 << 20), 5 * 64 + 20);
  for (unsigned m = 1; m < 4; m++)
    for (int a = 0; a < ZCC_STORES_NALGOS; a++) {
      int cls = zcc_stores_class(a, m, 1ull << 40);
      assert_true(cls >= 0 && cls < ZCC_STORES_CLASSES);
      assert_int_equal(zcc_stores_class_mask(cls), m);
    }
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
  const size_t bytes = COUNT * sizeof(float);
  const int cls = zcc_stores_class(ZCC_STORES_RING, ZCC_STORES_OUT | ZCC_STORES_SLOTS, bytes);
  const int cls_in = zcc_stores_class(ZCC_STORES_RING, ZCC_STORES_SLOTS, bytes);
  /* Out of place: 60 calls, two trials of 24 (four kinds) with 4 calls
     between, then the third begins. */
  run_ranks(comms, in, out, 0, CALLS);
  for (int r = 0; r < 2; r++) {
    assert_non_null(comms[r]->stores);
    zcc_stores_class_t *c = &comms[r]->stores[cls];
    if (c->calls != CALLS || !c->decided)
      fail_msg("rank %d: class %d counted %llu calls (expected %d), decided %d", r, cls,
               (unsigned long long)c->calls, CALLS, c->decided);
    for (int k = 0; k < ZCC_STORES_KINDS; k++)
      if (!(c->med[k] > 0)) fail_msg("rank %d: kind %d has no median", r, k);
    assert_true(comms[r]->stores[cls_in].calls == 0);
  }
  /* In place: the result cannot stream, the slots can: a class of two kinds. */
  run_ranks(comms, in, out, 1, 30);
  for (int r = 0; r < 2; r++) {
    zcc_stores_class_t *c = &comms[r]->stores[cls_in];
    if (c->calls != 30 || !c->decided || !(c->med[0] > 0) || !(c->med[2] > 0))
      fail_msg("rank %d: in place class counted %llu calls, decided %d, medians %g %g", r,
               (unsigned long long)c->calls, c->decided, c->med[0], c->med[2]);
    assert_true(c->med[1] == 0 && c->med[3] == 0);
  }
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
  for (int r = 0; r < 2; r++) {
    assert_true(comms[r]->stores[cls].calls == CALLS);
    assert_true(comms[r]->stores[cls_in].calls == 30);
  }
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
      cmocka_unit_test(test_schedule_four),
      cmocka_unit_test(test_decisions),
      cmocka_unit_test(test_early_trials),
      cmocka_unit_test(test_ring_switching),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
