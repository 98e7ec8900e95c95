/*
 * Unit tests for src/bootstrap/bootstrap.c: ranks are threads of this
 * process, joined through a root on the loopback interface.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bootstrap.h"
#include "debug.h"
#include "param.h"

#define MAX_RANKS 8

/* Checks inside rank threads cannot use cmocka's asserts (they longjmp). */
#define RANK_CHECK(ctx, cond, ...)                                             \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr,                                                          \
              "rank %d of %d: %s:%d: check '%s' failed: ", (ctx)->rank,        \
              (ctx)->nranks, __FILE__, __LINE__, #cond);                       \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      (ctx)->failures++;                                                       \
    }                                                                          \
  } while (0)

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_body_t)(rank_ctx_t *);

struct rank_ctx {
  zccUniqueId id;
  int rank, nranks;
  int64_t timeout_ms;
  const atomic_int *abort;
  rank_body_t body;
  zccResult_t init_res;
  int64_t init_ns;
  int failures;
  char err[256]; /* the rank thread's last error when init failed */
};

/* The rank thread's bootstrap, for the test bodies. */
static _Thread_local zcc_bootstrap_t *cur_b;

static void *rank_main(void *arg) {
  rank_ctx_t *c = arg;
  zcc_bootstrap_t *b = NULL;
  int64_t t0 = zcc_now_ns();
  c->init_res = zcc_bootstrap_init(&c->id, c->rank, c->nranks, c->timeout_ms,
                                   c->abort, &b);
  c->init_ns = zcc_now_ns() - t0;
  if (c->init_res != zccSuccess) {
    snprintf(c->err, sizeof(c->err), "%s", zcc_last_error());
    return NULL;
  }
  RANK_CHECK(c, zcc_bootstrap_rank(b) == c->rank, "rank %d",
             zcc_bootstrap_rank(b));
  RANK_CHECK(c, zcc_bootstrap_nranks(b) == c->nranks, "nranks %d",
             zcc_bootstrap_nranks(b));
  if (c->body) {
    cur_b = b;
    c->body(c);
  }
  zcc_bootstrap_free(b);
  return NULL;
}

static void make_root(zccUniqueId *id) {
  zcc_sockaddr_t a;
  assert_int_equal(zcc_sockaddr_parse("127.0.0.1:0", &a), zccSuccess);
  assert_int_equal(zcc_bootstrap_create_root(id, &a, NULL, NULL), zccSuccess);
}

/* Start `count` of the ranks listed in `ranks` (all ranks if NULL) and join
 * them. */
static void run_ranks(const zccUniqueId *id, int nranks, const int *ranks,
                      int count, int64_t timeout_ms, rank_body_t body,
                      rank_ctx_t *ctx) {
  pthread_t t[MAX_RANKS * 2];
  for (int i = 0; i < count; i++) {
    memset(&ctx[i], 0, sizeof(ctx[i]));
    ctx[i].id = *id;
    ctx[i].rank = ranks ? ranks[i] : i;
    ctx[i].nranks = nranks;
    ctx[i].timeout_ms = timeout_ms;
    ctx[i].body = body;
    assert_int_equal(pthread_create(&t[i], NULL, rank_main, &ctx[i]), 0);
  }
  for (int i = 0; i < count; i++)
    pthread_join(t[i], NULL);
}

static void expect_all_ok(rank_ctx_t *ctx, int count) {
  for (int i = 0; i < count; i++) {
    if (ctx[i].init_res != zccSuccess)
      fail_msg("rank %d: init returned %d: %s", ctx[i].rank, ctx[i].init_res,
               ctx[i].err);
    assert_int_equal(ctx[i].failures, 0);
  }
}

/* ---- collectives and messages for N ranks -------------------------------- */

static uint8_t pattern(int rank, size_t i, int round) {
  return (uint8_t)(rank * 31 + i * 7 + round * 13 + 1);
}

static void body_collectives(rank_ctx_t *c) {
  zcc_bootstrap_t *b = cur_b;
  int n = c->nranks, r = c->rank;
  /* allgather of an odd size, twice, so that rounds cannot mix */
  for (int round = 0; round < 2; round++) {
    size_t bytes = 37 + (size_t)round * 1000;
    uint8_t *buf = calloc((size_t)n, bytes);
    for (size_t i = 0; i < bytes; i++)
      buf[(size_t)r * bytes + i] = pattern(r, i, round);
    zccResult_t res = zcc_bootstrap_allgather(b, buf, bytes, 10000);
    RANK_CHECK(c, res == zccSuccess, "allgather returned %d", res);
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < bytes; i++)
        if (buf[(size_t)p * bytes + i] != pattern(p, i, round)) {
          RANK_CHECK(
              c, 0, "allgather round %d: block %d byte %zu is %u, expected %u",
              round, p, i, buf[(size_t)p * bytes + i], pattern(p, i, round));
          p = n;
          break;
        }
    free(buf);
  }
  zccResult_t res = zcc_bootstrap_barrier(b, 10000);
  RANK_CHECK(c, res == zccSuccess, "barrier returned %d", res);

  /* every pair exchanges large messages in both directions at once */
  size_t big = 3u << 20;
  uint8_t *out = malloc(big), *in = malloc(big);
  for (int p = 0; p < n; p++) {
    if (p == r)
      continue;
    for (size_t i = 0; i < big; i += 4096)
      out[i] = (uint8_t)(r * 16 + p);
    res = zcc_bootstrap_send(b, p, 100 + r, out, big, 10000);
    RANK_CHECK(c, res == zccSuccess, "send to %d returned %d", p, res);
  }
  for (int p = 0; p < n; p++) {
    if (p == r)
      continue;
    res = zcc_bootstrap_recv(b, p, 100 + p, in, big, 10000);
    RANK_CHECK(c, res == zccSuccess, "recv from %d returned %d", p, res);
    RANK_CHECK(c, in[0] == (uint8_t)(p * 16 + r) && in[big - 4096] == in[0],
               "message from %d holds %u", p, in[0]);
  }
  free(out);
  free(in);

  /* tags out of order, and a message to self */
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int tag = 1; tag <= 3; tag++) {
    int v = r * 1000 + tag;
    res = zcc_bootstrap_send(b, next, tag, &v, sizeof(v), 10000);
    RANK_CHECK(c, res == zccSuccess, "send tag %d returned %d", tag, res);
  }
  for (int tag = 3; tag >= 1; tag--) {
    int v = -1;
    res = zcc_bootstrap_recv(b, prev, tag, &v, sizeof(v), 10000);
    RANK_CHECK(c, res == zccSuccess && v == prev * 1000 + tag,
               "tag %d: %d, value %d", tag, res, v);
  }
  /* a receive of the wrong size is refused and leaves the message queued */
  int64_t v64 = 77;
  int32_t v32 = 0;
  res = zcc_bootstrap_send(b, r, 9, &v64, sizeof(v64), 1000);
  RANK_CHECK(c, res == zccSuccess, "send to self returned %d", res);
  res = zcc_bootstrap_recv(b, r, 9, &v32, sizeof(v32), 1000);
  RANK_CHECK(c, res == zccInternalError, "short recv returned %d", res);
  v64 = 0;
  res = zcc_bootstrap_recv(b, r, 9, &v64, sizeof(v64), 1000);
  RANK_CHECK(c, res == zccSuccess && v64 == 77, "self recv returned %d, %lld",
             res, (long long)v64);
  /* zero-byte messages and argument checks */
  res = zcc_bootstrap_send(b, next, 11, NULL, 0, 1000);
  RANK_CHECK(c, res == zccSuccess, "empty send returned %d", res);
  res = zcc_bootstrap_recv(b, prev, 11, NULL, 0, 1000);
  RANK_CHECK(c, res == zccSuccess, "empty recv returned %d", res);
  res = zcc_bootstrap_send(b, n, 1, &v32, sizeof(v32), 1000);
  RANK_CHECK(c, res == zccInvalidArgument, "send to rank n returned %d", res);
  res = zcc_bootstrap_recv(b, -1, 1, &v32, sizeof(v32), 1000);
  RANK_CHECK(c, res == zccInvalidArgument, "recv from rank -1 returned %d",
             res);

  /* every rank learned a consistent identity */
  uint64_t *h = calloc((size_t)n, sizeof(uint64_t));
  h[r] = zcc_bootstrap_hash(b);
  res = zcc_bootstrap_allgather(b, h, sizeof(uint64_t), 10000);
  RANK_CHECK(c, res == zccSuccess, "hash allgather returned %d", res);
  for (int p = 0; p < n; p++)
    RANK_CHECK(c, h[p] == h[r], "rank %d has another hash", p);
  free(h);
  res = zcc_bootstrap_barrier(b, 10000);
  RANK_CHECK(c, res == zccSuccess, "final barrier returned %d", res);
}

static void check_collectives(int n) {
  zccUniqueId id;
  rank_ctx_t ctx[MAX_RANKS];
  make_root(&id);
  run_ranks(&id, n, NULL, n, 10000, body_collectives, ctx);
  expect_all_ok(ctx, n);
}

static void test_ranks_1(void **state) {
  check_collectives(1);
}
static void test_ranks_2(void **state) {
  check_collectives(2);
}
static void test_ranks_3(void **state) {
  check_collectives(3);
}
static void test_ranks_8(void **state) {
  check_collectives(8);
}

/* ---- strangers at the root ------------------------------------------------
 */

typedef struct stranger {
  zcc_sockaddr_t root;
  int mode; /* 0 garbage, 1 wrong secret, 2 stall */
  int fd;
  zccResult_t res;
} stranger_t;

static void *stranger_main(void *arg) {
  stranger_t *s = arg;
  zcc_wait_t w = zcc_wait_in(5000, NULL, "stranger");
  s->fd = -1;
  s->res = zcc_socket_connect(&s->root, &s->fd, &w);
  if (s->res != zccSuccess)
    return NULL;
  if (s->mode == 0) {
    uint8_t junk[300];
    memset(junk, 0xee, sizeof(junk));
    s->res = zcc_socket_send_all(s->fd, junk, sizeof(junk), &w);
  } else if (s->mode == 1) {
    uint8_t wrong[ZCC_SECRET_BYTES] = {9, 9, 9};
    s->res = zcc_socket_auth_client(s->fd, wrong, 0, &w);
  }
  return NULL;
}

static void test_strangers_at_root(void **state) {
  zccUniqueId id;
  zcc_unique_id_t u;
  make_root(&id);
  assert_int_equal(zcc_bootstrap_id_decode(&id, &u), zccSuccess);
  stranger_t s[6];
  pthread_t t[6];
  for (int i = 0; i < 6; i++) {
    s[i].root = u.root;
    s[i].mode = i % 3;
    assert_int_equal(pthread_create(&t[i], NULL, stranger_main, &s[i]), 0);
  }
  for (int i = 0; i < 6; i++)
    pthread_join(t[i], NULL);
  /* the wrong-secret strangers were refused */
  assert_int_equal(s[1].res, zccRemoteError);
  assert_int_equal(s[4].res, zccRemoteError);
  rank_ctx_t ctx[3];
  int64_t t0 = zcc_now_ns();
  run_ranks(&id, 3, NULL, 3, 10000, body_collectives, ctx);
  expect_all_ok(ctx, 3);
  for (int i = 0; i < 3; i++)
    assert_true(ctx[i].init_ns < 3000000000LL);
  assert_true(zcc_now_ns() - t0 < 6000000000LL);
  for (int i = 0; i < 6; i++)
    zcc_socket_close(&s[i].fd);
}

/* ---- failures ---------------------------------------------------------------
 */

static void test_missing_rank_times_out(void **state) {
  zccUniqueId id;
  rank_ctx_t ctx[2];
  make_root(&id);
  int64_t t0 = zcc_now_ns();
  run_ranks(&id, 3, NULL, 2, 800, NULL, ctx);
  int64_t dt = zcc_now_ns() - t0;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ctx[i].init_res, zccTimeout);
    assert_non_null(strstr(ctx[i].err, "ZCC_INIT_TIMEOUT")); /* names what to raise */
  }
  assert_true(dt >= 750000000LL && dt < 3000000000LL);
}

static void test_root_init_timeout(void **state) {
  setenv("ZCC_INIT_TIMEOUT", "700", 1);
  zcc_param_reload();
  zccUniqueId id;
  rank_ctx_t ctx[2];
  make_root(&id);
  unsetenv("ZCC_INIT_TIMEOUT");
  zcc_param_reload();
  int64_t t0 = zcc_now_ns();
  run_ranks(&id, 3, NULL, 2, 20000, NULL, ctx);
  int64_t dt = zcc_now_ns() - t0;
  for (int i = 0; i < 2; i++)
    assert_int_equal(ctx[i].init_res, zccTimeout);
  assert_true(dt < 3000000000LL);
  /* the root is gone (or going): a late rank fails within its own deadline */
  t0 = zcc_now_ns();
  run_ranks(&id, 3, (const int[]){2}, 1, 500, NULL, ctx);
  assert_true(ctx[0].init_res == zccTimeout ||
              ctx[0].init_res == zccRemoteError);
  /* a timeout names the parameter that sets it */
  if (ctx[0].init_res == zccTimeout) assert_non_null(strstr(ctx[0].err, "ZCC_INIT_TIMEOUT"));
  assert_true(zcc_now_ns() - t0 < 1500000000LL);
}

/* Entries of /proc/<this process>/<what> (task: threads, fd: descriptors). */
static int count_entries(const char *what) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "ls /proc/%d/%s | wc -l", (int)getpid(), what);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

/* Ids nobody uses hold their listening sockets only: one thread serves
   every root of the process (none of its own each, no pipes of their
   own); a root that is used still completes, and the thread ends with the
   last root. */
static void test_unused_ids_are_cheap(void **state) {
  setenv("ZCC_INIT_TIMEOUT", "1500", 1);
  zcc_param_reload();
  int64_t t0 = zcc_now_ns();
  /* the roots of the tests before are gone by now or soon */
  int threads0 = count_entries("task"), fds0 = count_entries("fd");
  zccUniqueId ids[20];
  for (int i = 0; i < 20; i++) make_root(&ids[i]);
  unsetenv("ZCC_INIT_TIMEOUT");
  zcc_param_reload();
  int threads = count_entries("task"), fds = count_entries("fd");
  print_message("20 unused ids: threads %d -> %d, fds %d -> %d\n", threads0, threads, fds0, fds);
  assert_true(threads <= threads0 + 1);
  assert_true(fds <= fds0 + 20 + 2); /* the listeners, the service's pipe */
  rank_ctx_t ctx[2];
  run_ranks(&ids[7], 2, NULL, 2, 5000, NULL, ctx);
  expect_all_ok(ctx, 2);
  /* after ZCC_INIT_TIMEOUT: the service ended with the last root */
  while (zcc_now_ns() - t0 < 2500000000LL) usleep(50000);
  int threads2 = count_entries("task");
  print_message("after the timeout: threads %d\n", threads2);
  assert_true(threads2 <= threads0);
}

/*
 * Rank 0 of 3 aborts its init while rank 1 waits and rank 2 never comes.
 * The root is this process's: it ends at once, telling rank 1, and takes
 * its listener and the service thread with it (not after ZCC_INIT_TIMEOUT).
 */
static void test_abort_during_init(void **state) {
  int threads0 = count_entries("task"), fds0 = count_entries("fd");
  zccUniqueId id;
  make_root(&id);
  atomic_int flag;
  atomic_init(&flag, 0);
  rank_ctx_t c[2];
  memset(c, 0, sizeof(c));
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    c[i].id = id;
    c[i].rank = i;
    c[i].nranks = 3;
    c[i].timeout_ms = 20000;
    c[i].abort = i == 0 ? &flag : NULL;
    assert_int_equal(pthread_create(&t[i], NULL, rank_main, &c[i]), 0);
  }
  usleep(200000);
  atomic_store(&flag, 1);
  int64_t t0 = zcc_now_ns();
  pthread_join(t[0], NULL);
  assert_int_equal(c[0].init_res, zccRemoteError);
  assert_true(zcc_now_ns() - t0 < 1000000000LL);
  pthread_join(t[1], NULL);
  int64_t dt = zcc_now_ns() - t0;
  print_message("rank 1, %.3f s after rank 0's abort: %s\n", dt / 1e9, c[1].err);
  assert_int_equal(c[1].init_res, zccRemoteError);
  assert_non_null(strstr(c[1].err, "rank 0 gave up the rendezvous"));
  assert_true(dt < 1000000000LL);
  int threads = count_entries("task"), fds = count_entries("fd");
  for (int k = 0; k < 20 && (threads > threads0 || fds > fds0); k++) {
    usleep(50000);
    threads = count_entries("task");
    fds = count_entries("fd");
  }
  print_message("threads %d -> %d, fds %d -> %d\n", threads0, threads, fds0, fds);
  assert_true(threads <= threads0 && fds <= fds0);
}

static void test_inconsistent_ranks(void **state) {
  zccUniqueId id;
  rank_ctx_t ctx[2];
  /* two ranks claim to be rank 0 of 2 */
  make_root(&id);
  run_ranks(&id, 2, (const int[]){0, 0}, 2, 5000, NULL, ctx);
  for (int i = 0; i < 2; i++)
    assert_int_equal(ctx[i].init_res, zccInvalidUsage);
  /* two ranks disagree on nranks */
  make_root(&id);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&ctx[i], 0, sizeof(ctx[i]));
    ctx[i].id = id;
    ctx[i].rank = i;
    ctx[i].nranks = 2 + i;
    ctx[i].timeout_ms = 5000;
    assert_int_equal(pthread_create(&t[i], NULL, rank_main, &ctx[i]), 0);
  }
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ctx[i].init_res, zccInvalidUsage);
    assert_true(ctx[i].init_ns < 3000000000LL);
  }
}

static void body_peer_closes(rank_ctx_t *c) {
  zcc_bootstrap_t *b = cur_b;
  zccResult_t res;
  int v = 5;
  if (c->rank == 0) {
    /* say something, then leave without the message rank 1 waits for */
    res = zcc_bootstrap_send(b, 1, 1, &v, sizeof(v), 5000);
    RANK_CHECK(c, res == zccSuccess, "send returned %d", res);
    usleep(200000);
    return;
  }
  int64_t t0 = zcc_now_ns();
  res = zcc_bootstrap_recv(b, 0, 2, &v, sizeof(v), 10000);
  int64_t dt = zcc_now_ns() - t0;
  RANK_CHECK(c, res == zccRemoteError, "recv from a departed peer returned %d",
             res);
  RANK_CHECK(c, dt < 2000000000LL, "took %lld ms", (long long)(dt / 1000000));
  /* what it sent before leaving is still delivered */
  v = 0;
  res = zcc_bootstrap_recv(b, 0, 1, &v, sizeof(v), 1000);
  RANK_CHECK(c, res == zccSuccess && v == 5, "queued recv returned %d, %d", res,
             v);
  /* sending to it now fails (refused until the deadline, or reset) */
  res = zcc_bootstrap_send(b, 0, 3, &v, sizeof(v), 300);
  RANK_CHECK(c, res == zccTimeout || res == zccRemoteError, "send returned %d",
             res);
}

static void test_peer_closes_mid_recv(void **state) {
  zccUniqueId id;
  rank_ctx_t ctx[2];
  make_root(&id);
  run_ranks(&id, 2, NULL, 2, 5000, body_peer_closes, ctx);
  expect_all_ok(ctx, 2);
}

/*
 * Rank 0 waits for a message from rank gone = nranks / 2, which leaves
 * without a word. 3 ranks (ring 0 -> 1 -> 2 -> 0): rank 1 never connected
 * to rank 0, whose own connection to it reads its end. 4 ranks (0 -> 1 ->
 * 2 -> 3 -> 0): ranks 0 and 2 have no connection either way; rank 0
 * connects to see, and is refused. Either way the wait fails within 2 s.
 * The others stay until rank 0 is done, so that only that rank leaves.
 */
static void body_peer_leaves_silently(rank_ctx_t *c) {
  zcc_bootstrap_t *b = cur_b;
  int v = 0, gone = c->nranks / 2;
  if (c->rank == gone) {
    usleep(200000);
    return; /* frees the bootstrap without a word to rank 0 */
  }
  if (c->rank != 0) {
    zccResult_t res = zcc_bootstrap_recv(b, 0, 9, &v, sizeof(v), 10000);
    RANK_CHECK(c, res == zccSuccess, "recv from rank 0 returned %d", res);
    return;
  }
  int64_t t0 = zcc_now_ns();
  zccResult_t res = zcc_bootstrap_recv(b, gone, 2, &v, sizeof(v), 10000);
  int64_t dt = zcc_now_ns() - t0;
  char who[32];
  snprintf(who, sizeof(who), "rank %d", gone);
  RANK_CHECK(c, res == zccRemoteError, "recv from a departed peer returned %d", res);
  RANK_CHECK(c, strstr(zcc_last_error(), who) != NULL, "error: %s", zcc_last_error());
  RANK_CHECK(c, dt < 2000000000LL, "took %lld ms", (long long)(dt / 1000000));
  for (int r = 1; r < c->nranks; r++) {
    if (r == gone) continue;
    res = zcc_bootstrap_send(b, r, 9, &v, sizeof(v), 5000);
    RANK_CHECK(c, res == zccSuccess, "send to rank %d returned %d", r, res);
  }
}

static void test_peer_leaves_silently(void **state) {
  for (int n = 3; n <= 4; n++) {
    zccUniqueId id;
    rank_ctx_t ctx[4];
    make_root(&id);
    run_ranks(&id, n, NULL, n, 5000, body_peer_leaves_silently, ctx);
    expect_all_ok(ctx, n);
  }
}

static void body_stranger_at_rank(rank_ctx_t *c) {
  zcc_bootstrap_t *b = cur_b;
  /* a connection that never authenticates must not block messages */
  int fd = -1;
  zcc_wait_t w = zcc_wait_in(2000, NULL, "stranger");
  zccResult_t res = zcc_socket_connect(zcc_bootstrap_addr(b), &fd, &w);
  RANK_CHECK(c, res == zccSuccess, "connect to own listener returned %d", res);
  res = zcc_bootstrap_barrier(b, 5000);
  RANK_CHECK(c, res == zccSuccess, "barrier returned %d", res);
  int v = c->rank;
  int peer = 1 - c->rank;
  res = zcc_bootstrap_send(b, peer, 4, &v, sizeof(v), 5000);
  RANK_CHECK(c, res == zccSuccess, "send returned %d", res);
  res = zcc_bootstrap_recv(b, peer, 4, &v, sizeof(v), 5000);
  RANK_CHECK(c, res == zccSuccess && v == peer, "recv returned %d, %d", res, v);
  res = zcc_bootstrap_barrier(b, 5000);
  RANK_CHECK(c, res == zccSuccess, "barrier returned %d", res);
  zcc_socket_close(&fd);
}

static void test_stranger_at_rank(void **state) {
  zccUniqueId id;
  rank_ctx_t ctx[2];
  make_root(&id);
  int64_t t0 = zcc_now_ns();
  run_ranks(&id, 2, NULL, 2, 5000, body_stranger_at_rank, ctx);
  expect_all_ok(ctx, 2);
  assert_true(zcc_now_ns() - t0 < 3000000000LL);
}

/* ---- ids and arguments ----------------------------------------------------
 */

static void test_id_decode(void **state) {
  zccUniqueId id;
  zcc_unique_id_t u;
  memset(&id, 0, sizeof(id));
  assert_int_equal(zcc_bootstrap_id_decode(&id, &u), zccInvalidArgument);
  memset(&id, 0xa5, sizeof(id));
  assert_int_equal(zcc_bootstrap_id_decode(&id, &u), zccInvalidArgument);
  assert_int_equal(zcc_bootstrap_id_decode(NULL, &u), zccInvalidArgument);

  make_root(&id);
  assert_int_equal(zcc_bootstrap_id_decode(&id, &u), zccSuccess);
  assert_int_equal(u.magic, ZCC_UNIQUE_ID_MAGIC);
  assert_int_not_equal(zcc_sockaddr_port(&u.root), 0);
  /* a valid magic with a broken address is still refused */
  zccUniqueId bad = id;
  zcc_unique_id_t ub = u;
  ub.root.u.sa.sa_family = AF_UNIX;
  memcpy(bad.internal, &ub, sizeof(ub));
  assert_int_equal(zcc_bootstrap_id_decode(&bad, &u), zccInvalidArgument);

  /* a given secret lands in the id; each root gets its own port */
  uint8_t secret[ZCC_SECRET_BYTES] = {1, 2, 3, 4, 5};
  zccUniqueId id2;
  zcc_sockaddr_t a;
  assert_int_equal(zcc_sockaddr_parse("127.0.0.1:0", &a), zccSuccess);
  assert_int_equal(zcc_bootstrap_create_root(&id2, &a, NULL, secret), zccSuccess);
  assert_int_equal(zcc_bootstrap_id_decode(&id2, &ub), zccSuccess);
  assert_memory_equal(ub.secret, secret, ZCC_SECRET_BYTES);
  assert_int_not_equal(zcc_sockaddr_port(&ub.root), zcc_sockaddr_port(&u.root));

  /* bad arguments change nothing */
  zcc_bootstrap_t *b = (zcc_bootstrap_t *)0x1;
  assert_int_equal(zcc_bootstrap_init(&id, 2, 2, 100, NULL, &b),
                   zccInvalidArgument);
  assert_int_equal(zcc_bootstrap_init(&id, 0, 0, 100, NULL, &b),
                   zccInvalidArgument);
  memset(&bad, 0, sizeof(bad));
  assert_int_equal(zcc_bootstrap_init(&bad, 0, 1, 100, NULL, &b),
                   zccInvalidArgument);
  assert_ptr_equal(b, (zcc_bootstrap_t *)0x1);
  assert_int_equal(zcc_bootstrap_create_root(NULL, NULL, NULL, NULL),
                   zccInvalidArgument);
  assert_int_equal(zcc_bootstrap_allgather(NULL, NULL, 0, 0),
                   zccInvalidArgument);
  assert_int_equal(zcc_bootstrap_barrier(NULL, 0), zccInvalidArgument);
  zcc_bootstrap_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_id_decode),
      cmocka_unit_test(test_ranks_1),
      cmocka_unit_test(test_ranks_2),
      cmocka_unit_test(test_ranks_3),
      cmocka_unit_test(test_ranks_8),
      cmocka_unit_test(test_strangers_at_root),
      cmocka_unit_test(test_stranger_at_rank),
      cmocka_unit_test(test_missing_rank_times_out),
      cmocka_unit_test(test_root_init_timeout),
      cmocka_unit_test(test_unused_ids_are_cheap),
      cmocka_unit_test(test_abort_during_init),
      cmocka_unit_test(test_inconsistent_ranks),
      cmocka_unit_test(test_peer_closes_mid_recv),
      cmocka_unit_test(test_peer_leaves_silently),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
