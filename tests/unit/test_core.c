/* Unit tests of src/core: parameters, logging, results, configs, the comm registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "param.h"
#include "sigboard.h"
#include "coll.h"
#include "wait.h"
#include "zcc.h"

ZCC_PARAM_INT(test_int, "TEST_UNIT_INT", 42, "unit-test integer")
ZCC_PARAM_STR(test_str, "TEST_UNIT_STR", "dflt", "unit-test string")

static void test_param_defaults_and_env(void **state) {
  unsetenv("ZCC_TEST_UNIT_INT");
  unsetenv("ZCC_TEST_UNIT_STR");
  zcc_param_reload();
  assert_int_equal(zcc_param_test_int(), 42);
  assert_string_equal(zcc_param_test_str(), "dflt");
  setenv("ZCC_TEST_UNIT_INT", "4k", 1);
  setenv("ZCC_TEST_UNIT_STR", "abc", 1);
  zcc_param_reload();
  assert_int_equal(zcc_param_test_int(), 4096);
  assert_string_equal(zcc_param_test_str(), "abc");
  setenv("ZCC_TEST_UNIT_INT", "0x10", 1);
  zcc_param_reload();
  assert_int_equal(zcc_param_test_int(), 16);
  setenv("ZCC_TEST_UNIT_INT", "12abc", 1);
  zcc_param_reload();
  assert_int_equal(zcc_param_test_int(), 42); /* not an integer: default */
  unsetenv("ZCC_TEST_UNIT_INT");
  unsetenv("ZCC_TEST_UNIT_STR");
  zcc_param_reload();
}

static void test_param_listing(void **state) {
  int found_int = 0, found_timeout = 0, n = 0;
  const char *name, *value, *def, *help;
  while (zccGetParam(n, &name, &value, &def, &help) == zccSuccess) {
    assert_non_null(name);
    assert_non_null(help);
    assert_true(strlen(help) > 5);
    if (strcmp(name, "TEST_UNIT_INT") == 0) {
      found_int = 1;
      assert_string_equal(def, "42");
    }
    if (strcmp(name, "TIMEOUT") == 0) found_timeout = 1;
    n++;
  }
  assert_true(found_int);
  assert_true(found_timeout);
  assert_true(n >= 10);
  assert_int_equal(zccGetParam(n, &name, &value, &def, &help), zccInvalidArgument);
  assert_true(strlen(zccGetLastError(NULL)) > 0);
  assert_int_equal(zccGetParam(-1, &name, &value, &def, &help), zccInvalidArgument);
}

static void test_error_strings(void **state) {
  for (int r = 0; r < zccNumResults; r++) {
    const char *s = zccGetErrorString((zccResult_t)r);
    assert_non_null(s);
    assert_string_not_equal(s, "unknown result code");
  }
  assert_string_equal(zccGetErrorString((zccResult_t)999), "unknown result code");
  assert_string_equal(zccGetErrorString(zccSuccess), "no error");
  zcc_clear_last_error();
  assert_int_equal(zcc_error(zccTimeout, "waited %d ms for rank %d", 5, 3), zccTimeout);
  assert_string_equal(zccGetLastError(NULL), "waited 5 ms for rank 3");
  int v = 0;
  assert_int_equal(zccGetVersion(&v), zccSuccess);
  assert_int_equal(v, ZCC_VERSION_CODE);
  assert_int_equal(zccGetVersion(NULL), zccInvalidArgument);
}

static void test_config_resolve(void **state) {
  int dt;
  int64_t to;
  const char *nm;
  unsetenv("ZCC_DEVICE");
  zcc_param_reload();
  assert_int_equal(zcc_config_resolve(NULL, &dt, &to, &nm, "t"), zccSuccess);
  /* auto: a GPU when the GPU path is built and a GPU is visible */
  int gpu = zcc_cuda_gpu_path_available();
  assert_int_equal(dt, gpu ? zccDeviceCuda : zccDeviceHost);
  zccConfig_t c = ZCC_CONFIG_INITIALIZER;
  c.timeoutMs = 1234;
  c.commName = "named";
  assert_int_equal(zcc_config_resolve(&c, &dt, &to, &nm, "t"), zccSuccess);
  assert_int_equal(to, 1234);
  assert_string_equal(nm, "named");
  c.magic = 0;
  assert_int_equal(zcc_config_resolve(&c, &dt, &to, &nm, "t"), zccInvalidArgument);
  assert_non_null(strstr(zccGetLastError(NULL), "ZCC_CONFIG_INITIALIZER"));
  zccConfig_t d = ZCC_CONFIG_INITIALIZER;
  d.deviceType = 17;
  assert_int_equal(zcc_config_resolve(&d, &dt, &to, &nm, "t"), zccInvalidArgument);
  d.deviceType = zccDeviceCuda;
  assert_int_equal(zcc_config_resolve(&d, &dt, &to, &nm, "t"),
                   gpu ? zccSuccess : zccInvalidUsage);
  zccConfig_t e = ZCC_CONFIG_INITIALIZER;
  e.blocking = 0;
  assert_int_equal(zcc_config_resolve(&e, &dt, &to, &nm, "t"), zccSuccess);
  e.blocking = 7;
  assert_int_equal(zcc_config_resolve(&e, &dt, &to, &nm, "t"), zccInvalidArgument);
  assert_non_null(strstr(zccGetLastError(NULL), "blocking=7"));
  setenv("ZCC_DEVICE", "tpu", 1);
  zcc_param_reload();
  assert_int_equal(zcc_config_resolve(NULL, &dt, &to, &nm, "t"), zccInvalidArgument);
  setenv("ZCC_DEVICE", "host", 1);
  zcc_param_reload();
  assert_int_equal(zcc_config_resolve(NULL, &dt, &to, &nm, "t"), zccSuccess);
  assert_int_equal(dt, zccDeviceHost);
  unsetenv("ZCC_DEVICE");
  zcc_param_reload();
}

/*
 * zcc_now_ns (misc/clock.c) against clock_gettime(CLOCK_MONOTONIC) for
 * 300 ms in two threads: past the time-stamp counter's calibration and
 * several of its refreshes where the kernel keeps time with the counter.
 * Every read lies between a real read before and one after it (2 us of
 * slack for the line's error) and never goes back within a thread.
 */
static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct clock_run {
  long reads, outside, back;
  int64_t worst_ns;
} clock_run_t;

static void *clock_follow(void *arg) {
  clock_run_t *r = arg;
  int64_t end = mono_ns() + 300000000LL, prev = 0;
  while (mono_ns() < end) {
    int64_t a = mono_ns(), t = zcc_now_ns(), b = mono_ns();
    int64_t off = t < a ? a - t : t > b ? t - b : 0;
    if (off > r->worst_ns) r->worst_ns = off;
    if (off > 2000) r->outside++;
    if (t < prev) r->back++;
    prev = t;
    r->reads++;
  }
  return NULL;
}

static void test_clock_follows_monotonic(void **state) {
  (void)state;
  clock_run_t runs[2] = {{0}};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, clock_follow, &runs[1]), 0);
  clock_follow(&runs[0]);
  assert_int_equal(pthread_join(th, NULL), 0);
  for (int i = 0; i < 2; i++) {
    print_message("clock %s, thread %d: %ld reads, worst %lld ns outside the real "
                  "reads around it, %ld outside 2 us, %ld back\n",
                  zcc_clock_name(), i, runs[i].reads, (long long)runs[i].worst_ns,
                  runs[i].outside, runs[i].back);
    assert_true(runs[i].reads > 1000);
    assert_int_equal(runs[i].outside, 0);
    assert_int_equal(runs[i].back, 0);
  }
}

/* The same in a child forked while another thread of the parent reads
   the clock (its line's state is copied, its writer may not be there). */
static void *clock_spin(void *arg) {
  atomic_int *stop = arg;
  while (!atomic_load(stop)) (void)zcc_now_ns();
  return NULL;
}

static void test_clock_after_fork(void **state) {
  (void)state;
  atomic_int stop = 0;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, clock_spin, &stop), 0);
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      clock_run_t r = {0};
      clock_follow(&r);
      _exit(r.reads > 1000 && r.outside == 0 && r.back == 0 ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  atomic_store(&stop, 1);
  pthread_join(th, NULL);
  assert_int_equal(bad, 0);
}

static void test_registry_refuses_dead_handles(void **state) {
  /* A handle that never was a communicator is refused without being read. */
  zccComm_t bogus = (zccComm_t)(uintptr_t)0x1000;
  int n = -1;
  assert_int_equal(zccCommCount(bogus, &n), zccInvalidUsage);
  assert_int_equal(n, -1);
  assert_int_equal(zccCommDestroy(bogus), zccInvalidUsage);
  assert_int_equal(zccCommAbort(bogus), zccInvalidUsage);
  assert_int_equal(zccCommCount(NULL, &n), zccInvalidArgument);
}

static void test_single_rank_comm(void **state) {
  zccComm_t comm;
  assert_int_equal(zccCommInitAll(&comm, 1, NULL), zccSuccess);
  int n = 0, r = -1, dev = 0;
  assert_int_equal(zccCommCount(comm, &n), zccSuccess);
  assert_int_equal(zccCommUserRank(comm, &r), zccSuccess);
  assert_int_equal(zccCommCuDevice(comm, &dev), zccSuccess);
  assert_int_equal(n, 1);
  assert_int_equal(r, 0);
  assert_int_equal(dev, -1);
  float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
  assert_int_equal(zccAllReduce(in, out, 5, zccFloat32, zccAvg, comm, NULL), zccSuccess);
  assert_memory_equal(in, out, sizeof(in));
  void *h = NULL;
  assert_int_equal(zccCommRegister(comm, in, sizeof(in), &h), zccSuccess);
  assert_int_equal(zccCommDeregister(comm, h), zccSuccess);
  assert_int_equal(zccCommDeregister(comm, h), zccInvalidArgument);
  zccResult_t async = zccInternalError;
  assert_int_equal(zccCommGetAsyncError(comm, &async), zccSuccess);
  assert_int_equal(async, zccSuccess);
  assert_int_equal(zccCommFinalize(comm), zccSuccess);
  assert_int_equal(zccCommDestroy(comm), zccSuccess);
  assert_int_equal(zccCommCount(comm, &n), zccInvalidUsage);
  assert_int_equal(zccCommDestroy(comm), zccInvalidUsage);
}


static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Poll a non-blocking communicator's state until it is not zccInProgress
   (or `limit` seconds pass); the state. */
static zccResult_t settle(zccComm_t comm, double limit) {
  zccResult_t st = zccInProgress;
  double t0 = now_s();
  while (st == zccInProgress && now_s() - t0 < limit) {
    assert_int_equal(zccCommGetAsyncError(comm, &st), zccSuccess);
    if (st == zccInProgress) usleep(1000);
  }
  return st;
}

static zccConfig_t nonblocking_host(void) {
  zccConfig_t c = ZCC_CONFIG_INITIALIZER;
  c.blocking = 0;
  c.deviceType = zccDeviceHost;
  return c;
}

/* blocking = 0: the call returns zccInProgress with the handle; the state
   says when it is ready; then it works like any other. */
static void test_nonblocking_init_completes(void **state) {
  zccUniqueId id;
  assert_int_equal(zccGetUniqueId(&id), zccSuccess);
  zccConfig_t c = nonblocking_host();
  c.commName = "nb1";
  zccComm_t comm = NULL;
  assert_int_equal(zccCommInitRankConfig(&comm, 1, id, 0, &c), zccInProgress);
  assert_non_null(comm);
  assert_int_equal(settle(comm, 10), zccSuccess);
  float in[3] = {1, 2, 3}, out[3] = {0};
  assert_int_equal(zccAllReduce(in, out, 3, zccFloat32, zccSum, comm, NULL), zccSuccess);
  assert_memory_equal(in, out, sizeof(in));
  assert_int_equal(zccCommDestroy(comm), zccSuccess);
  /* bad arguments are refused at once and make nothing */
  zccComm_t none = NULL;
  assert_int_equal(zccCommInitRankConfig(&none, 2, id, 5, &c), zccInvalidArgument);
  assert_null(none);
  c.blocking = 7;
  assert_int_equal(zccCommInitRankConfig(&none, 1, id, 0, &c), zccInvalidArgument);
  assert_null(none);
  c.blocking = 0;
  assert_int_equal(zccCommInitRankConfig(NULL, 1, id, 0, &c), zccInvalidArgument);
  assert_non_null(strstr(zccGetLastError(NULL), "comm is NULL"));
}

/* A peer that never comes: every call but the state's is refused with
   zccInProgress, and abort or destroy stop the init at once. */
static void test_nonblocking_init_stopped(void **state) {
  for (int use_abort = 0; use_abort < 2; use_abort++) {
    zccUniqueId id;
    assert_int_equal(zccGetUniqueId(&id), zccSuccess);
    zccConfig_t c = nonblocking_host();
    zccComm_t comm = NULL;
    assert_int_equal(zccCommInitRankConfig(&comm, 2, id, 0, &c), zccInProgress);
    assert_non_null(comm);
    float v = 1, o = 0;
    assert_int_equal(zccAllReduce(&v, &o, 1, zccFloat32, zccSum, comm, NULL), zccInProgress);
    assert_non_null(strstr(zccGetLastError(NULL), "still being initialised"));
    int n = 0, r = -1;
    assert_int_equal(zccCommCount(comm, &n), zccSuccess);
    assert_int_equal(zccCommUserRank(comm, &r), zccSuccess);
    assert_int_equal(n, 2);
    assert_int_equal(r, 0);
    zccResult_t st = zccSuccess;
    assert_int_equal(zccCommGetAsyncError(comm, &st), zccSuccess);
    assert_int_equal(st, zccInProgress);
    usleep(50000);
    double t0 = now_s();
    assert_int_equal(use_abort ? zccCommAbort(comm) : zccCommDestroy(comm), zccSuccess);
    assert_true(now_s() - t0 < 1.0);
    assert_int_equal(zccCommCount(comm, &n), zccInvalidUsage);
  }
}

/* An init that fails in the background: the state names the failure. */
static void test_nonblocking_init_fails(void **state) {
  setenv("ZCC_INIT_TIMEOUT", "300", 1);
  zcc_param_reload();
  zccUniqueId id;
  assert_int_equal(zccGetUniqueId(&id), zccSuccess);
  zccConfig_t c = nonblocking_host();
  zccComm_t comm = NULL;
  assert_int_equal(zccCommInitRankConfig(&comm, 2, id, 1, &c), zccInProgress);
  zccResult_t st = settle(comm, 10);
  assert_int_equal(st, zccTimeout);
  const char *msg = zccGetLastError(NULL);
  if (!strstr(msg, "timed out")) print_message("the state's message: %s\n", msg);
  assert_non_null(strstr(msg, "timed out"));
  float v = 1, o = 0;
  assert_int_equal(zccAllReduce(&v, &o, 1, zccFloat32, zccSum, comm, NULL), zccTimeout);
  assert_int_equal(zccCommDestroy(comm), zccSuccess);
  unsetenv("ZCC_INIT_TIMEOUT");
  zcc_param_reload();
}


/* ---- the signature board (sigboard.h), on host communicators ---- */

typedef struct {
  zccComm_t comm;
  zcc_sigboard_t *b;
  zccResult_t res;
} board_arg_t;

static void *board_setup_main(void *p) {
  board_arg_t *a = p;
  a->res = zcc_sigboard_setup(a->comm, &a->b);
  return NULL;
}

static void boards_make_n(zccComm_t *comms, board_arg_t *a, int n) {
  pthread_t t[4];
  for (int i = 0; i < n; i++) {
    a[i] = (board_arg_t){comms[i], NULL, zccInternalError};
    assert_int_equal(pthread_create(&t[i], NULL, board_setup_main, &a[i]), 0);
  }
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < n; i++) assert_int_equal(a[i].res, zccSuccess);
}
static void boards_make(zccComm_t *comms, board_arg_t *a) { boards_make_n(comms, a, 2); }

static zcc_op_sig_t sig_of(uint64_t seq, int coll, uint64_t count, int op) {
  zcc_op_sig_t s = {.seq = seq, .count = count, .coll = coll, .type = zccFloat32, .op = op,
                    .root = -1, .algo = 0, .flags = 0, .opno = seq};
  return s;
}

static void test_sigboard(void **state) {
  setenv("ZCC_DEVICE", "host", 1);
  zcc_param_reload();
  zccComm_t comms[2];
  assert_int_equal(zccCommInitAll(comms, 2, NULL), zccSuccess);
  board_arg_t a[2];
  boards_make(comms, a);
  assert_non_null(a[0].b);
  assert_non_null(a[1].b);
  /* the same call: no word */
  zcc_op_sig_t s0 = sig_of(1, ZCC_COLL_ALLREDUCE, 10, zccSum);
  assert_int_equal(zcc_sigboard_post(a[0].b, &s0), zccSuccess);
  assert_int_equal(zcc_sigboard_post(a[1].b, &s0), zccSuccess);
  assert_int_equal(zcc_sigboard_check(a[0].b), zccSuccess);
  assert_int_equal(zcc_sigboard_check(a[1].b), zccSuccess);
  /* a peer ahead: nothing to compare yet */
  zcc_op_sig_t s1 = sig_of(2, ZCC_COLL_ALLREDUCE, 10, zccSum);
  assert_int_equal(zcc_sigboard_post(a[1].b, &s1), zccSuccess);
  assert_int_equal(zcc_sigboard_check(a[1].b), zccSuccess);
  /* the later caller is refused at the post, naming both calls */
  zcc_op_sig_t s2 = sig_of(2, ZCC_COLL_ALLREDUCE, 20, zccSum);
  assert_int_equal(zcc_sigboard_post(a[0].b, &s2), zccInvalidUsage);
  const char *m = zccGetLastError(NULL);
  assert_non_null(strstr(m, "rank 1 called allreduce(count=10"));
  assert_non_null(strstr(m, "rank 0 called allreduce(count=20"));
  assert_non_null(strstr(m, "op #2"));
  /* ... and the earlier one's check finds it */
  assert_int_equal(zcc_sigboard_check(a[1].b), zccInvalidUsage);
  assert_non_null(strstr(zccGetLastError(NULL), "rank 0 called allreduce(count=20"));
  zcc_sigboard_free(a[0].b);
  zcc_sigboard_free(a[1].b);
  /* without a board on one rank (here its name is taken), no rank has one */
  char name[64];
  snprintf(name, sizeof(name), "/zcc-sig-%016llx-1", (unsigned long long)comms[0]->hash);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  assert_true(fd >= 0);
  close(fd);
  boards_make(comms, a);
  assert_null(a[0].b);
  assert_null(a[1].b);
  shm_unlink(name);
  /* none left behind */
  snprintf(name, sizeof(name), "/dev/shm/zcc-sig-%016llx-0", (unsigned long long)comms[0]->hash);
  assert_int_equal(access(name, F_OK), -1);
  /* off */
  setenv("ZCC_GPU_SIGBOARD", "0", 1);
  zcc_param_reload();
  boards_make(comms, a);
  assert_null(a[0].b);
  unsetenv("ZCC_GPU_SIGBOARD");
  unsetenv("ZCC_DEVICE");
  zcc_param_reload();
  for (int i = 0; i < 2; i++) assert_int_equal(zccCommDestroy(comms[i]), zccSuccess);
}

/* A peer on another host (made so by its host hash here): the board keeps a
   mirror of it, which the GPU network proxy fills (zcc_sigboard_put). */
static void test_sigboard_mirror(void **state) {
  setenv("ZCC_DEVICE", "host", 1);
  zcc_param_reload();
  zccComm_t comms[2];
  assert_int_equal(zccCommInitAll(comms, 2, NULL), zccSuccess);
  uint64_t h0 = comms[0]->peers[1].host_hash, h1 = comms[1]->peers[0].host_hash;
  comms[0]->peers[1].host_hash ^= 1;
  comms[1]->peers[0].host_hash ^= 1;
  board_arg_t a[2];
  boards_make(comms, a);
  assert_true(zcc_sigboard_mirrors(a[0].b, 1));
  assert_true(zcc_sigboard_mirrors(a[1].b, 0));
  assert_false(zcc_sigboard_mirrors(a[0].b, 0));
  assert_false(zcc_sigboard_mirrors(a[0].b, 2));
  /* what this rank posted, for the proxy to send */
  zcc_op_sig_t s1 = sig_of(1, ZCC_COLL_ALLREDUCE, 10, zccSum), got;
  assert_int_equal(zcc_sigboard_posted(a[0].b), 0);
  assert_int_equal(zcc_sigboard_own(a[0].b, 1, &got), 0);
  assert_int_equal(zcc_sigboard_post(a[0].b, &s1), zccSuccess);
  assert_int_equal(zcc_sigboard_posted(a[0].b), 1);
  assert_int_equal(zcc_sigboard_own(a[0].b, 1, &got), 1);
  assert_int_equal(got.count, 10);
  /* the other "host" does not see it until it is put in its mirror */
  assert_int_equal(zcc_sigboard_post(a[1].b, &s1), zccSuccess);
  assert_int_equal(zcc_sigboard_check(a[1].b), zccSuccess);
  zcc_sigboard_put(a[1].b, 0, &s1);
  assert_int_equal(zcc_sigboard_check(a[1].b), zccSuccess);
  /* a different call put there: the check names both */
  zcc_op_sig_t s2 = sig_of(2, ZCC_COLL_ALLREDUCE, 10, zccMax);
  zcc_op_sig_t s2b = sig_of(2, ZCC_COLL_ALLREDUCE, 10, zccSum);
  assert_int_equal(zcc_sigboard_post(a[1].b, &s2b), zccSuccess);
  zcc_sigboard_put(a[1].b, 0, &s2);
  assert_int_equal(zcc_sigboard_check(a[1].b), zccInvalidUsage);
  assert_non_null(strstr(zccGetLastError(NULL), "rank 0 called allreduce(count=10, float32, max)"));
  /* one already put: the later caller is refused at its post */
  zcc_op_sig_t s3 = sig_of(3, ZCC_COLL_BROADCAST, 10, -1);
  zcc_op_sig_t s3b = sig_of(3, ZCC_COLL_ALLREDUCE, 10, zccSum);
  zcc_sigboard_put(a[1].b, 0, &s3);
  assert_int_equal(zcc_sigboard_post(a[1].b, &s3b), zccInvalidUsage);
  assert_non_null(strstr(zccGetLastError(NULL), "op #3"));
  /* puts for a rank without a mirror change nothing */
  zcc_sigboard_put(a[0].b, 0, &s3);
  assert_int_equal(zcc_sigboard_check(a[0].b), zccSuccess);
  zcc_sigboard_free(a[0].b);
  zcc_sigboard_free(a[1].b);
  comms[0]->peers[1].host_hash = h0;
  comms[1]->peers[0].host_hash = h1;
  unsetenv("ZCC_DEVICE");
  zcc_param_reload();
  for (int i = 0; i < 2; i++) assert_int_equal(zccCommDestroy(comms[i]), zccSuccess);
}

/*
 * The kernels' gate (sigboard.h) on rank 0 of three: rank 1 on its host
 * (a mapped board), rank 2 on another (a mirror the proxy fills). The word
 * rises to a collective only when both posted it with rank 0's signature;
 * a signature the far proxy skipped counts as agreed; a rank of the host
 * that made another call (refused at its post) holds it, as does a far one.
 */
static void test_sigboard_gate(void **state) {
  setenv("ZCC_DEVICE", "host", 1);
  zcc_param_reload();
  zccComm_t comms[3];
  assert_int_equal(zccCommInitAll(comms, 3, NULL), zccSuccess);
  uint64_t saved[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) saved[i][j] = comms[i]->peers[j].host_hash;
  for (int i = 0; i < 3; i++) comms[i]->peers[2].host_hash ^= 1; /* rank 2: another host */
  comms[2]->peers[2].host_hash ^= 1;
  for (int j = 0; j < 2; j++) comms[2]->peers[j].host_hash ^= 1;
  board_arg_t a[3];
  boards_make_n(comms, a, 3);
  zcc_sigboard_t *b0 = a[0].b, *b1 = a[1].b;
  assert_true(zcc_sigboard_mirrors(b0, 2));
  assert_false(zcc_sigboard_mirrors(b0, 1));
  uint64_t word = 0, word1 = 0;
  assert_int_equal(zcc_sigboard_gate_set(NULL, &word), 0);
  assert_int_equal(zcc_sigboard_gate_set(b0, &word), 1);
  assert_int_equal(zcc_sigboard_gate_set(b1, &word1), 1);
  assert_int_equal(zcc_sigboard_gate_advance(b0), 0);
  assert_int_equal(word, 0);
  /* op 1: rank 0 alone, then rank 1, then rank 2's arrives */
  zcc_op_sig_t s1 = sig_of(1, ZCC_COLL_ALLREDUCE, 10, zccSum);
  assert_int_equal(zcc_sigboard_post(b0, &s1), zccSuccess);
  zcc_sigboard_gate_advance(b0);
  assert_int_equal(word, 0);
  assert_int_equal(zcc_sigboard_post(b1, &s1), zccSuccess);
  zcc_sigboard_gate_advance(b0);
  assert_int_equal(word, 0); /* rank 2's not here */
  zcc_sigboard_put(b0, 2, &s1);
  zcc_sigboard_gate_advance(b0);
  assert_int_equal(word, 0); /* put, but its proxy has not said it covered 1 */
  zcc_sigboard_put_upto(b0, 2, 1);
  assert_int_equal(zcc_sigboard_gate_advance(b0), 1);
  assert_int_equal(word, 1);
  zcc_sigboard_put(b1, 2, &s1);
  zcc_sigboard_put_upto(b1, 2, 1);
  zcc_sigboard_gate_advance(b1);
  assert_int_equal(word1, 1);
  /* op 2: the far proxy skipped it (a table behind): agreed */
  zcc_op_sig_t s2 = sig_of(2, ZCC_COLL_ALLGATHER, 5, -1);
  assert_int_equal(zcc_sigboard_post(b0, &s2), zccSuccess);
  assert_int_equal(zcc_sigboard_post(b1, &s2), zccSuccess);
  zcc_sigboard_put_upto(b0, 2, 2);
  zcc_sigboard_gate_advance(b0);
  assert_int_equal(word, 2);
  /* op 3: rank 1 on this host made another call (refused there): held,
     although rank 2 agrees */
  zcc_op_sig_t s3 = sig_of(3, ZCC_COLL_ALLREDUCE, 10, zccSum);
  zcc_op_sig_t s3b = sig_of(3, ZCC_COLL_ALLREDUCE, 10, zccMax);
  assert_int_equal(zcc_sigboard_post(b0, &s3), zccSuccess);
  assert_int_equal(zcc_sigboard_post(b1, &s3b), zccInvalidUsage);
  zcc_sigboard_put(b0, 2, &s3);
  zcc_sigboard_put_upto(b0, 2, 3);
  assert_int_equal(zcc_sigboard_gate_advance(b0), 0);
  assert_int_equal(word, 2);
  /* rank 1's board: rank 2's proxy covered up to 3 (2 skipped: agreed),
     and at 3 rank 2's sum differs from rank 1's max: held at 2 */
  zcc_sigboard_put(b1, 2, &s3);
  zcc_sigboard_put_upto(b1, 2, 3);
  zcc_sigboard_gate_advance(b1);
  assert_int_equal(word1, 2);
  for (int i = 0; i < 3; i++) zcc_sigboard_free(a[i].b);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) comms[i]->peers[j].host_hash = saved[i][j];
  unsetenv("ZCC_DEVICE");
  zcc_param_reload();
  for (int i = 0; i < 3; i++) assert_int_equal(zccCommDestroy(comms[i]), zccSuccess);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_param_defaults_and_env),
      cmocka_unit_test(test_param_listing),
      cmocka_unit_test(test_error_strings),
      cmocka_unit_test(test_config_resolve),
      cmocka_unit_test(test_registry_refuses_dead_handles),
      cmocka_unit_test(test_clock_follows_monotonic),
      cmocka_unit_test(test_clock_after_fork),
      cmocka_unit_test(test_single_rank_comm),
      cmocka_unit_test(test_nonblocking_init_completes),
      cmocka_unit_test(test_nonblocking_init_stopped),
      cmocka_unit_test(test_nonblocking_init_fails),
      cmocka_unit_test(test_sigboard),
      cmocka_unit_test(test_sigboard_mirror),
      cmocka_unit_test(test_sigboard_gate),
  };
  return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
