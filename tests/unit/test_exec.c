/*
 * Unit tests of the planner and executor over both host transports, with
 * ranks as communicators of one process: one thread driving every rank
 * through a group, and one thread per rank.
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

#include "param.h"
#include "zcc.h"

#define MAXR 4

/* One thread drives all ranks: only possible if the group runs them together. */
static void group_allreduce(int n, size_t count) {
  zccComm_t comms[MAXR];
  assert_int_equal(zccCommInitAll(comms, n, NULL), zccSuccess);
  int32_t *in[MAXR], *out[MAXR];
  for (int r = 0; r < n; r++) {
    in[r] = malloc(count * sizeof(int32_t) + 1);
    out[r] = malloc(count * sizeof(int32_t) + 1);
    for (size_t i = 0; i < count; i++) in[r][i] = (int32_t)(i * 7 + (size_t)r * 1000003);
    memset(out[r], 0xa5, count * sizeof(int32_t));
  }
  assert_int_equal(zccGroupStart(), zccSuccess);
  for (int r = 0; r < n; r++)
    assert_int_equal(zccAllReduce(in[r], out[r], count, zccInt32, zccSum, comms[r], NULL),
                     zccSuccess);
  assert_int_equal(zccGroupEnd(), zccSuccess);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) {
      int64_t e = 0;
      for (int q = 0; q < n; q++) e += (int64_t)(int32_t)(i * 7 + (size_t)q * 1000003);
      if (out[r][i] != (int32_t)e)
        fail_msg("rank %d of %d, count %zu, element %zu: expected %d got %d", r, n, count, i,
                 (int32_t)e, out[r][i]);
    }
  /* Point-to-point ring, every rank sending before anyone receives. */
  assert_int_equal(zccGroupStart(), zccSuccess);
  for (int r = 0; r < n; r++) {
    assert_int_equal(zccSend(in[r], count, zccInt32, (r + 1) % n, comms[r], NULL), zccSuccess);
    assert_int_equal(zccRecv(out[r], count, zccInt32, (r + n - 1) % n, comms[r], NULL),
                     zccSuccess);
  }
  assert_int_equal(zccGroupEnd(), zccSuccess);
  for (int r = 0; r < n; r++)
    assert_memory_equal(out[r], in[(r + n - 1) % n], count * sizeof(int32_t));
  for (int r = 0; r < n; r++) {
    assert_int_equal(zccCommDestroy(comms[r]), zccSuccess);
    free(in[r]);
    free(out[r]);
  }
}

static void test_group_small_shm(void **s) { group_allreduce(3, 1001); }
static void test_group_ring_shm(void **s) { group_allreduce(4, 300001); }
static void test_group_two_ranks(void **s) { group_allreduce(2, 1 << 20); }

static void test_group_socket(void **s) {
  setenv("ZCC_SHM_DISABLE", "1", 1);
  zcc_param_reload();
  group_allreduce(3, 77);
  group_allreduce(3, 400003);
  unsetenv("ZCC_SHM_DISABLE");
  zcc_param_reload();
}

static void test_forced_algorithms(void **s) {
  setenv("ZCC_ALGO", "ring", 1);
  zcc_param_reload();
  group_allreduce(3, 5);
  setenv("ZCC_ALGO", "direct", 1);
  zcc_param_reload();
  group_allreduce(3, 200000);
  setenv("ZCC_ALGO", "tree", 1);
  zcc_param_reload();
  zccComm_t comm;
  assert_int_equal(zccCommInitAll(&comm, 1, NULL), zccSuccess);
  float x = 1, y = 0;
  assert_int_equal(zccAllReduce(&x, &y, 1, zccFloat32, zccSum, comm, NULL), zccInvalidArgument);
  assert_non_null(strstr(zccGetLastError(NULL), "ZCC_ALGO"));
  assert_true(y == 0); /* nothing changed */
  assert_int_equal(zccCommDestroy(comm), zccSuccess);
  unsetenv("ZCC_ALGO");
  zcc_param_reload();
}

static void test_self_sendrecv(void **s) {
  zccComm_t comm;
  assert_int_equal(zccCommInitAll(&comm, 1, NULL), zccSuccess);
  double a[3] = {1, 2, 3}, b[3] = {0};
  assert_int_equal(zccGroupStart(), zccSuccess);
  assert_int_equal(zccSend(a, 3, zccFloat64, 0, comm, NULL), zccSuccess);
  assert_int_equal(zccRecv(b, 3, zccFloat64, 0, comm, NULL), zccSuccess);
  assert_int_equal(zccGroupEnd(), zccSuccess);
  assert_memory_equal(a, b, sizeof(a));
  /* Unpaired: refused at zccGroupEnd; outside a group: refused at once. */
  assert_int_equal(zccGroupStart(), zccSuccess);
  assert_int_equal(zccSend(a, 3, zccFloat64, 0, comm, NULL), zccSuccess);
  assert_int_equal(zccGroupEnd(), zccInvalidUsage);
  assert_int_equal(zccSend(a, 3, zccFloat64, 0, comm, NULL), zccInvalidUsage);
  assert_int_equal(zccGroupEnd(), zccInvalidUsage); /* unbalanced */
  assert_int_equal(zccCommDestroy(comm), zccSuccess);
}

typedef struct split_arg {
  zccComm_t comm;
  int rank, ok;
} split_arg_t;

static void *split_thread(void *p) {
  split_arg_t *a = p;
  zccComm_t sub = NULL;
  a->ok = 0;
  if (zccCommSplit(a->comm, a->rank % 2, -a->rank, &sub, NULL) != zccSuccess) return NULL;
  int n = 0, r = -1;
  zccCommCount(sub, &n);
  zccCommUserRank(sub, &r);
  int64_t v = a->rank, sum = -1;
  if (zccAllReduce(&v, &sum, 1, zccInt64, zccSum, sub, NULL) != zccSuccess) return NULL;
  /* 4 ranks: evens {0,2} sum 2, odds {1,3} sum 4; key -rank reverses order. */
  int64_t expect = a->rank % 2 ? 4 : 2;
  int expect_rank = a->rank >= 2 ? 0 : 1;
  a->ok = n == 2 && sum == expect && r == expect_rank;
  zccCommDestroy(sub);
  return NULL;
}

static void test_split(void **s) {
  zccComm_t comms[4];
  assert_int_equal(zccCommInitAll(comms, 4, NULL), zccSuccess);
  pthread_t th[4];
  split_arg_t args[4];
  for (int r = 0; r < 4; r++) {
    args[r] = (split_arg_t){comms[r], r, 0};
    pthread_create(&th[r], NULL, split_thread, &args[r]);
  }
  for (int r = 0; r < 4; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 4; r++) {
    if (!args[r].ok) fail_msg("split on rank %d gave a wrong communicator or result", r);
    zccCommDestroy(comms[r]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_small_shm),  cmocka_unit_test(test_group_ring_shm),
      cmocka_unit_test(test_group_two_ranks),  cmocka_unit_test(test_group_socket),
      cmocka_unit_test(test_forced_algorithms), cmocka_unit_test(test_self_sendrecv),
      cmocka_unit_test(test_split),
  };
  return cmocka_run_group_tests_name("exec", tests, NULL, NULL);
}
