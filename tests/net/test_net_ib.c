/*
 * The ib network plug-in (src/transport/net_ib.c) between two processes on
 * the fake verbs provider (ZCC_IBV_LIBRARY=libzcc_fakeverbs.so, set by
 * CMake): sizes 0 to 16 MiB, many in flight, in-order matching, receives
 * larger than sends, exact data; every injected fault gives an error within
 * the test's deadline (never a hang); strangers and wrong secrets on the side
 * channel are refused. Each test forks fresh processes: the plug-in and the
 * fake are set up in the children only.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "debug.h"
#include "net.h"
#include "socket.h"
#include "wait.h"

/*
 * Sanitizer builds touch every byte 5-20x slower (the tests fill and check
 * every byte): there the deadlines are longer and messages at most 2 MiB.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLOW_BUILD 1
#else
#define SLOW_BUILD 0
#endif
#define DEADLINE_MS (SLOW_BUILD ? 60000 : 8000)
#define RUN2_LIMIT_S (SLOW_BUILD ? 150 : 20)
#define EXIT_HANG 99

static const zcc_net_ops_t
    *ib; /* the plug-in under test (ZCC_TEST_NET_PLUGIN, default ib) */
static int is_ib;

/* A child's failure: the reason on stderr, and an exit code. */
static int child_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[child %d] ", (int)getpid());
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (last error: %s)\n", zcc_last_error());
  va_end(ap);
  return code;
}

static zcc_net_auth_t auth_of(uint8_t seed) {
  zcc_net_auth_t a;
  for (int i = 0; i < ZCC_SECRET_BYTES; i++)
    a.secret[i] = (uint8_t)(seed * 31 + i);
  a.context = 0x1234abcd0000ull | seed;
  return a;
}

/* ---- two processes ---- */

typedef int (*role_fn)(int in_fd, int out_fd, void *arg);

typedef struct {
  const char *env[4]; /* "NAME=value" set in this child before it starts */
  role_fn fn;
  void *arg;
} role_t;

static pid_t spawn(const role_t *r, int in_fd, int out_fd) {
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 4 && r->env[i]; i++)
      putenv((char *)r->env[i]);
    _exit(r->fn(in_fd, out_fd, r->arg));
  }
  return pid;
}

/* Run a (receiver) and b (sender): a's handle reaches b through a pipe. Exit
 * codes out. */
static void run2(const role_t *a, const role_t *b, int *rc_a, int *rc_b) {
  int p[2], q[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(pipe(q), 0);
  pid_t pa = spawn(a, q[0], p[1]);
  pid_t pb = spawn(b, p[0], q[1]);
  close(p[0]), close(p[1]), close(q[0]), close(q[1]);
  pid_t pids[2] = {pa, pb};
  int *rcs[2] = {rc_a, rc_b};
  int64_t end = zcc_now_ns() + RUN2_LIMIT_S * 1000000000LL;
  for (int i = 0; i < 2; i++) {
    int st = 0;
    for (;;) {
      pid_t w = waitpid(pids[i], &st, WNOHANG);
      if (w == pids[i])
        break;
      if (zcc_now_ns() > end) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &st, 0);
        st = EXIT_HANG << 8;
        break;
      }
      usleep(2000);
    }
    *rcs[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
}

static int write_all(int fd, const void *b, size_t n) {
  return write(fd, b, n) == (ssize_t)n ? 0 : -1;
}

static int read_all(int fd, void *b, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)b + got, n - got);
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

/* Listen, hand the handle over, accept until a comm comes (or the deadline). */
static int do_accept(int out_fd, zcc_net_auth_t auth, void **listen,
                     void **comm, int ncalls_handle) {
  ZCC_NET_HANDLE_ALIGN uint8_t handle[ZCC_NET_HANDLE_BYTES];
  int ndev = 0;
  if (ib->devices(&ndev) != zccSuccess || ndev < 1)
    return child_fail(2, "no ib device (%d)", ndev);
  if (ib->listen(0, &auth, handle, listen) != zccSuccess)
    return child_fail(3, "listen failed");
  for (int i = 0; i < ncalls_handle; i++)
    if (write_all(out_fd, handle, sizeof(handle)) != 0)
      return child_fail(4, "pipe write failed");
  *comm = NULL;
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  while (!*comm) {
    if (ib->accept(*listen, comm) != zccSuccess)
      return child_fail(5, "accept failed");
    if (zcc_now_ns() > end)
      return child_fail(EXIT_HANG, "accept never completed");
  }
  return 0;
}

/* 0 connected, 1 refused with an error (res in *res), other: failure codes. */
static int do_connect(int in_fd, zcc_net_auth_t auth, void **comm,
                      zccResult_t *res) {
  ZCC_NET_HANDLE_ALIGN uint8_t handle[ZCC_NET_HANDLE_BYTES];
  if (read_all(in_fd, handle, sizeof(handle)) != 0)
    return child_fail(6, "no handle");
  *comm = NULL;
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  while (!*comm) {
    zccResult_t r = ib->connect(0, &auth, handle, comm);
    if (r != zccSuccess) {
      if (res)
        *res = r;
      return 1;
    }
    if (zcc_now_ns() > end)
      return child_fail(EXIT_HANG, "connect never completed");
  }
  return 0;
}

/* Wait for a request; 0 done, 1 error (res), EXIT_HANG. */
static int wait_req(void *req, size_t *size, zccResult_t *res) {
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  for (;;) {
    int done = 0;
    zccResult_t r = ib->test(req, &done, size);
    if (r != zccSuccess) {
      if (res)
        *res = r;
      return 1;
    }
    if (done)
      return 0;
    sched_yield();
    if (zcc_now_ns() > end)
      return child_fail(EXIT_HANG, "request never completed");
  }
}

static uint8_t pattern(size_t msg, size_t i) {
  return (uint8_t)(msg * 131 + i * 7 + (i >> 9));
}

/* ---- the message exchange: sizes, in flight, exact data ---- */

typedef struct {
  const size_t *sizes;
  int n;          /* messages */
  int window;     /* in flight at once */
  size_t extra;   /* receives this much larger than the sends */
  int expect_err; /* the side expects an error (and a code 10 exit); 2: an
                     error or none (a socket sender, whose messages went) */
  zccResult_t want_res;
  const char *want_text; /* in the error message */
  int report;            /* the sender prints its rate */
} xfer_t;

static size_t xsize(const xfer_t *x, int i) {
  size_t n = x->sizes[i % 16];
  if (SLOW_BUILD && n > ((size_t)2 << 20))
    n = ((size_t)2 << 20) - (n & 0xfff); /* keep the odd ones odd */
  return n;
}

/* Does text hold one of want's alternatives ("a|b")? */
static int has_text(const char *text, const char *want) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", want);
  for (char *save = NULL, *p = strtok_r(buf, "|", &save); p; p = strtok_r(NULL, "|", &save))
    if (strstr(text, p))
      return 1;
  return 0;
}

/* Ends with 0 (all fine), 10 (the expected error), or a failure code. */
static int expect_end(const xfer_t *x, int failed, zccResult_t res) {
  if (!failed)
    return x->expect_err == 1 ? child_fail(11, "expected an error, all succeeded")
                              : 0;
  if (!x->expect_err)
    return child_fail(12, "unexpected error %d", (int)res);
  if (x->want_res && res != x->want_res)
    return child_fail(13, "error %d, expected %d", (int)res, (int)x->want_res);
  if (x->want_text && !has_text(zcc_last_error(), x->want_text))
    return child_fail(14, "error text lacks \"%s\"", x->want_text);
  return 10;
}

static int receiver(int in_fd, int out_fd, void *arg) {
  (void)in_fd;
  const xfer_t *x = arg;
  void *l, *c;
  int rc = do_accept(out_fd, auth_of(1), &l, &c, 1);
  if (rc)
    return rc;
  size_t maxs = 0;
  for (int i = 0; i < x->n; i++)
    if (xsize(x, i) > maxs)
      maxs = xsize(x, i);
  size_t slot = maxs + x->extra + 64;
  uint8_t *buf = malloc(slot * (size_t)x->window);
  void *mh;
  if (ib->reg_mr(c, buf, slot * (size_t)x->window, ZCC_NET_PTR_HOST, &mh) !=
      zccSuccess)
    return expect_end(x, 1, zccSystemError);
  void *reqs[ZCC_NET_MAX_REQUESTS] = {0};
  int posted = 0, finished = 0;
  zccResult_t res = zccSuccess;
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  while (finished < x->n) {
    if (zcc_now_ns() > end)
      return child_fail(EXIT_HANG, "receiver stuck at %d of %d", finished,
                        x->n);
    if (posted < x->n && posted - finished < x->window) {
      uint8_t *b = buf + slot * (size_t)(posted % x->window);
      memset(b, 0xee, slot);
      void *r = NULL;
      if ((res = ib->irecv(c, b, xsize(x, posted) + x->extra, mh, &r)) !=
          zccSuccess)
        return expect_end(x, 1, res);
      if (r)
        reqs[posted++ % x->window] = r;
      continue;
    }
    int done = 0;
    size_t got = 0;
    if ((res = ib->test(reqs[finished % x->window], &done, &got)) != zccSuccess)
      return expect_end(x, 1, res);
    if (!done) {
      sched_yield(); /* the machine may be shared: let the peer run */
      continue;
    }
    size_t want = xsize(x, finished);
    uint8_t *b = buf + slot * (size_t)(finished % x->window);
    if (got != want)
      return child_fail(20, "message %d: %zu bytes, expected %zu", finished,
                        got, want);
    for (size_t i = 0; i < want; i++)
      if (b[i] != pattern((size_t)finished, i))
        return child_fail(
            21, "message %d (%zu bytes): byte %zu is 0x%02x, expected 0x%02x",
            finished, want, i, b[i], pattern((size_t)finished, i));
    for (size_t i = want; i < slot; i++)
      if (b[i] != 0xee)
        return child_fail(22, "message %d: byte %zu past the end was written",
                          finished, i);
    finished++;
  }
  ib->dereg_mr(c, mh);
  /* the sender closes first: wait for that, so its last completions are not cut
   * short */
  char ch;
  (void)!read(in_fd, &ch, 1);
  ib->close_recv(c);
  ib->close_listen(l);
  free(buf);
  return expect_end(x, 0, zccSuccess);
}

static int sender(int in_fd, int out_fd, void *arg) {
  const xfer_t *x = arg;
  void *c;
  zccResult_t res = zccSuccess;
  int rc = do_connect(in_fd, auth_of(1), &c, &res);
  if (rc == 1)
    return expect_end(x, 1, res);
  if (rc)
    return rc;
  size_t maxs = 0;
  for (int i = 0; i < x->n; i++)
    if (xsize(x, i) > maxs)
      maxs = xsize(x, i);
  size_t slot = maxs + 64;
  uint8_t *buf = malloc(slot * (size_t)x->window);
  void *mh;
  if ((res = ib->reg_mr(c, buf, slot * (size_t)x->window, ZCC_NET_PTR_HOST,
                        &mh)) != zccSuccess)
    return expect_end(x, 1, res);
  void *reqs[ZCC_NET_MAX_REQUESTS] = {0};
  int posted = 0, finished = 0;
  int64_t start = zcc_now_ns(), end = start + DEADLINE_MS * 1000000LL;
  size_t bytes = 0;
  while (finished < x->n) {
    if (zcc_now_ns() > end)
      return child_fail(EXIT_HANG, "sender stuck at %d of %d", finished, x->n);
    if (posted < x->n && posted - finished < x->window) {
      uint8_t *b = buf + slot * (size_t)(posted % x->window);
      size_t n = xsize(x, posted);
      for (size_t i = 0; i < n; i++)
        b[i] = pattern((size_t)posted, i);
      void *r = NULL;
      if ((res = ib->isend(c, b, n, n ? mh : NULL, &r)) != zccSuccess)
        return expect_end(x, 1, res);
      if (r) {
        reqs[posted++ % x->window] = r;
        continue;
      }
    }
    if (finished == posted)
      continue;
    int done = 0;
    size_t got = 0;
    if ((res = ib->test(reqs[finished % x->window], &done, &got)) != zccSuccess)
      return expect_end(x, 1, res);
    if (!done) {
      sched_yield(); /* the machine may be shared: let the peer run */
      continue;
    }
    if (got != xsize(x, finished))
      return child_fail(23, "send %d reports %zu bytes", finished, got);
    bytes += got;
    finished++;
  }
  if (x->report) {
    double s = (double)(zcc_now_ns() - start) / 1e9;
    printf("test_net_ib: %d messages of %zu bytes, %d in flight: %.1f MB/s, "
           "%.1f us a message (%s)\n",
           x->n, xsize(x, 0), x->window, (double)bytes / s / 1e6,
           s / x->n * 1e6, is_ib ? "ib on the fake verbs provider" : "socket");
    fflush(stdout);
  }
  ib->dereg_mr(c, mh);
  ib->close_send(c);
  (void)!write(out_fd, "x", 1);
  free(buf);
  return expect_end(x, 0, zccSuccess);
}

static const size_t sizes_all[16] = {
    0,       1,        7,       4096,          65535,
    65536,   65537,    1 << 20, 3 << 20,       (3 << 20) + 5,
    8 << 20, 16 << 20, 1000000, (1 << 20) - 1, 12345,
    256};

static void xfer_case(const char *qps, int n, int window, size_t extra) {
  char env[64];
  snprintf(env, sizeof(env), "ZCC_IB_QPS_PER_CONNECTION=%s", qps);
  xfer_t x = {sizes_all, n, window, extra, 0, zccSuccess, NULL, 0};
  role_t a = {{env}, receiver, &x}, b = {{env}, sender, &x};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
}

static void test_sizes_one_at_a_time(void **state) {
  (void)state;
  xfer_case("1", 16, 1, 0);
}

static void test_sizes_in_flight_4qps(void **state) {
  (void)state;
  xfer_case("4", 32, 16, 0);
}

static void test_recv_larger(void **state) {
  (void)state;
  xfer_case("2", 16, 8, 1000);
}

static const size_t sizes_small[16] = {0, 8,   64, 100, 1, 4096, 33, 17,
                                       8, 200, 3,  512, 0, 1024, 9,  77};

static void test_many_in_flight(void **state) {
  (void)state;
  xfer_t x = {sizes_small, 2000, ZCC_NET_MAX_REQUESTS, 0, 0, zccSuccess,
              NULL,        0};
  role_t a = {{"ZCC_IB_QPS_PER_CONNECTION=2"}, receiver, &x},
         b = {{"ZCC_IB_QPS_PER_CONNECTION=2"}, sender, &x};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
}

/* What the fake moves (no assertion on speed: it says nothing about a real
 * HCA). */
static void test_rate_report(void **state) {
  (void)state;
  static const size_t big[16] = {
      4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20,
      4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20};
  static const size_t tiny[16] = {8, 8, 8, 8, 8, 8, 8, 8,
                                  8, 8, 8, 8, 8, 8, 8, 8};
  xfer_t xb = {big, 32, 8, 0, 0, zccSuccess, NULL, 1},
         xt = {tiny, 500, 1, 0, 0, zccSuccess, NULL, 1};
  int ra, rb;
  role_t a = {{"ZCC_IB_QPS_PER_CONNECTION=4"}, receiver, &xb},
         b = {{"ZCC_IB_QPS_PER_CONNECTION=4"}, sender, &xb};
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
  role_t c = {{NULL}, receiver, &xt}, d = {{NULL}, sender, &xt};
  run2(&c, &d, &ra, &rb);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
}

/* ---- errors ---- */

static void fault_case(const char *env_send, const char *env_recv,
                       zccResult_t want_send, const char *text_send,
                       int recv_must_fail) {
  static const size_t sz[16] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096,
                                4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096};
  xfer_t xs = {sz, 8, 1, 0, 1, want_send, text_send, 0};
  xfer_t xr = {sz, 8, 1, 0, recv_must_fail, zccRemoteError, NULL, 0};
  role_t a = {{env_recv}, receiver, &xr}, b = {{env_send}, sender, &xs};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(rb, 10);
  assert_int_equal(ra, recv_must_fail ? 10 : 0);
}

static void test_fault_wc_error(void **state) {
  (void)state;
  fault_case("ZCC_FAKEVERBS_WC_ERROR=3", NULL, zccRemoteError,
             "remote operation error", 1);
}

static void test_fault_wc_error_status(void **state) {
  (void)state;
  fault_case("ZCC_FAKEVERBS_WC_ERROR=2:12", NULL, zccRemoteError,
             "transport retry counter exceeded", 1);
}

static void test_fault_qp_error(void **state) {
  (void)state;
  /* the flushed completion, or the QP's asynchronous event, whichever is
     seen first */
  fault_case("ZCC_FAKEVERBS_QP_ERROR=4", NULL, zccRemoteError,
             "Flushed|catastrophic error (asynchronous event", 1);
}

static void test_fault_port_down(void **state) {
  (void)state;
  fault_case("ZCC_FAKEVERBS_PORT_DOWN=3", NULL, zccRemoteError,
             "transport retry counter exceeded|the port went down", 1);
}

static void test_fault_port_down_receiver(void **state) {
  (void)state;
  /* the receiver's port goes down as its 3rd receive completes: only its
     asynchronous event can tell it (no work of its own is outstanding on the
     wire); it leaves, and the sender sees it go */
  static const size_t sz[16] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096,
                                4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096};
  xfer_t xs = {sz, 8, 1, 0, 1, zccRemoteError, NULL, 0};
  xfer_t xr = {sz, 8, 1, 0, 1, zccRemoteError,
               "the port went down: port error (asynchronous event 10)", 0};
  role_t a = {{"ZCC_FAKEVERBS_PORT_DOWN_RECV=3"}, receiver, &xr}, b = {{NULL}, sender, &xs};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 10);
  assert_int_equal(rb, 10);
}

static void test_fault_reg_mr(void **state) {
  (void)state;
  /* the connect registers the FIFO (1st), the buffer is the 2nd */
  fault_case("ZCC_FAKEVERBS_FAIL_REG_MR=2", NULL, zccSystemError, "ibv_reg_mr",
             1);
}

static void test_fault_recv_side(void **state) {
  (void)state;
  /* the receiver's clear-to-send writes fail: both sides see an error */
  static const size_t sz[16] = {100, 100, 100, 100, 100, 100, 100, 100,
                                100, 100, 100, 100, 100, 100, 100, 100};
  xfer_t xs = {sz, 8, 1, 0, 1, zccRemoteError, NULL, 0};
  xfer_t xr = {sz, 8, 1, 0, 1, zccRemoteError, "clear-to-send", 0};
  role_t a = {{"ZCC_FAKEVERBS_WC_ERROR=2"}, receiver, &xr},
         b = {{NULL}, sender, &xs};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 10);
  assert_int_equal(rb, 10);
}

/* ib refuses the send (the receive's size came with its clear-to-send);
   socket sends eagerly and the receiver refuses the message. */
static void test_send_larger_than_recv(void **state) {
  (void)state;
  static const size_t sz[16] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
                                1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
  static const size_t small[16] = {999, 999, 999, 999, 999, 999, 999, 999,
                                   999, 999, 999, 999, 999, 999, 999, 999};
  xfer_t xs = {sz, 2, 1, 0, 1, zccInvalidUsage, "larger than the receive", 0};
  xfer_t xr = {small, 2, 1, 0, 1, zccRemoteError, "closed", 0};
  if (!is_ib) {
    xs = (xfer_t){sz, 2, 1, 0, 2, zccRemoteError, "closed", 0};
    xr = (xfer_t){small, 2, 1, 0, 1, zccInvalidUsage, "larger than the receive", 0};
  }
  role_t a = {{NULL}, receiver, &xr}, b = {{NULL}, sender, &xs};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 10);
  if (is_ib)
    assert_int_equal(rb, 10);
  else
    assert_true(rb == 0 || rb == 10);
}

/* The receiver's process dies in the middle: the sender gets an error, not a
 * hang. */
static int dying_receiver(int in_fd, int out_fd, void *arg) {
  (void)in_fd, (void)arg;
  void *l, *c;
  int rc = do_accept(out_fd, auth_of(1), &l, &c, 1);
  if (rc)
    return rc;
  usleep(100000);
  _exit(0); /* no close: as a killed process */
}

/* The sender has more to send than the sockets hold (socket sends
   eagerly: a few small messages would all go into the kernel's buffers). */
static void test_peer_dies(void **state) {
  (void)state;
  static const size_t sz[16] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096,
                                4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096};
  static const size_t big[16] = {16 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20,
                                 16 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20,
                                 16 << 20, 16 << 20, 16 << 20, 16 << 20};
  xfer_t xs = {sz, 4, 1, 0, 1, zccRemoteError, NULL, 0};
  if (!is_ib)
    xs = (xfer_t){big, 16, 1, 0, 1, zccRemoteError, NULL, 0};
  role_t a = {{NULL}, dying_receiver, NULL}, b = {{NULL}, sender, &xs};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 10);
}

/* ---- the side channel ---- */

/* The handle's layout, as net_ib.c writes it: a magic, then the listener's
 * address. */
typedef struct {
  uint32_t magic;
  zcc_sockaddr_t addr;
} ib_handle_view_t;

/* Listener: the first connections are strangers; then the right peer connects
 * and one message goes through. */
static int guarded_listener(int in_fd, int out_fd, void *arg) {
  (void)in_fd, (void)arg;
  void *l, *c;
  int rc = do_accept(out_fd, auth_of(1), &l, &c, 2);
  if (rc)
    return rc;
  uint8_t buf[256];
  void *mh, *r = NULL;
  if (ib->reg_mr(c, buf, sizeof(buf), ZCC_NET_PTR_HOST, &mh) != zccSuccess)
    return child_fail(30, "reg_mr");
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  while (!r && zcc_now_ns() < end)
    if (ib->irecv(c, buf, sizeof(buf), mh, &r) != zccSuccess)
      return child_fail(31, "irecv");
  size_t got = 0;
  if (!r || wait_req(r, &got, NULL) != 0)
    return child_fail(32, "no message");
  if (got != 5 || memcmp(buf, "hello", 5) != 0)
    return child_fail(33, "wrong message (%zu bytes)", got);
  char ch;
  (void)!read(in_fd, &ch, 1);
  ib->close_recv(c);
  ib->close_listen(l);
  return 0;
}

/* A stranger (raw TCP garbage, a silent socket), a wrong secret, a wrong
 * context, then the right peer. */
static int strangers_then_peer(int in_fd, int out_fd, void *arg) {
  (void)arg;
  ZCC_NET_HANDLE_ALIGN uint8_t handle[ZCC_NET_HANDLE_BYTES], handle2[ZCC_NET_HANDLE_BYTES];
  if (read_all(in_fd, handle, sizeof(handle)) != 0 ||
      read_all(in_fd, handle2, sizeof(handle2)) != 0)
    return child_fail(6, "no handle");
  ib_handle_view_t hv;
  memcpy(&hv, handle, sizeof(hv));
  zcc_wait_t w = zcc_wait_in(2000, NULL, "test");
  int junk = -1, silent = -1;
  if (zcc_socket_connect(&hv.addr, &junk, &w) != zccSuccess)
    return child_fail(40, "raw connect");
  if (zcc_socket_connect(&hv.addr, &silent, &w) != zccSuccess)
    return child_fail(41, "raw connect");
  /* a client that skips checking the listener and sends a made-up proof: the
   * listener hangs up */
  int liar = -1;
  if (zcc_socket_connect(&hv.addr, &liar, &w) != zccSuccess)
    return child_fail(49, "raw connect");
  struct {
    uint32_t magic, version;
    uint8_t nonce[16];
    uint32_t index, count; /* socket (version 2): one connection of one */
    uint8_t token[16];
  } hello = {is_ib ? 0x7a636973u : 0x7a637373u, is_ib ? 1 : 2, {1, 2, 3}, 0, 1, {4}};
  size_t hello_bytes = is_ib ? 24 : sizeof(hello);
  uint8_t chal[48],
      proof[136]; /* ib: a MAC and its queue pair data; socket: a MAC */
  size_t proof_bytes = is_ib ? 136 : 32;
  memset(proof, 0x5a, sizeof(proof));
  if (zcc_socket_send_all(liar, &hello, hello_bytes, &w) != zccSuccess ||
      zcc_socket_recv_all(liar, chal, sizeof(chal), &w) != zccSuccess ||
      zcc_socket_send_all(liar, proof, proof_bytes, &w) != zccSuccess)
    return child_fail(50, "the listener did not answer a hello");
  uint8_t one;
  if (zcc_socket_recv_all(liar, &one, 1, &w) != zccRemoteError)
    return child_fail(51, "the listener kept a connection with a bad proof");
  close(liar);
  char garbage[300];
  memset(garbage, 0x41, sizeof(garbage));
  (void)!send(junk, garbage, sizeof(garbage), MSG_NOSIGNAL);
  /* wrong secret, then wrong context: the listener drops both, connect reports
   * it */
  zcc_net_auth_t bad = auth_of(1);
  bad.secret[3] ^= 1;
  void *c = NULL;
  zccResult_t res = zccSuccess;
  uint8_t h[ZCC_NET_HANDLE_BYTES];
  memcpy(h, handle, sizeof(h));
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  while (!c && (res = ib->connect(0, &bad, h, &c)) == zccSuccess &&
         zcc_now_ns() < end) {
  }
  if (c || res != zccRemoteError)
    return child_fail(42, "a wrong secret connected (res %d)", (int)res);
  bad = auth_of(1);
  bad.context ^= 0x100;
  memcpy(h, handle, sizeof(h));
  while (!c && (res = ib->connect(0, &bad, h, &c)) == zccSuccess &&
         zcc_now_ns() < end) {
  }
  if (c || res != zccRemoteError)
    return child_fail(43, "a wrong context connected (res %d)", (int)res);
  /* the right one */
  memcpy(h, handle2, sizeof(h));
  res = zccSuccess;
  while (!c &&
         (res = ib->connect(0, &(zcc_net_auth_t){0}, h, &c)) == zccSuccess &&
         zcc_now_ns() < end) {
  }
  (void)c;
  if (res != zccRemoteError)
    return child_fail(44, "an all-zero secret was not refused (res %d)",
                      (int)res);
  memcpy(h, handle2, sizeof(h));
  c = NULL;
  zcc_net_auth_t good = auth_of(1);
  while (!c && (res = ib->connect(0, &good, h, &c)) == zccSuccess &&
         zcc_now_ns() < end) {
  }
  if (!c)
    return child_fail(45, "the right peer did not connect (res %d)", (int)res);
  uint8_t msg[8] = "hello";
  void *mh, *r = NULL;
  if (ib->reg_mr(c, msg, sizeof(msg), ZCC_NET_PTR_HOST, &mh) != zccSuccess)
    return child_fail(46, "reg_mr");
  while (!r && zcc_now_ns() < end)
    if (ib->isend(c, msg, 5, mh, &r) != zccSuccess)
      return child_fail(47, "isend");
  if (!r || wait_req(r, NULL, NULL) != 0)
    return child_fail(48, "send did not finish");
  ib->close_send(c);
  (void)!write(out_fd, "x", 1);
  close(junk), close(silent);
  return 0;
}

static void test_side_channel_auth(void **state) {
  (void)state;
  role_t a = {{NULL}, guarded_listener, NULL},
         b = {{NULL}, strangers_then_peer, NULL};
  int ra, rb;
  run2(&a, &b, &ra, &rb);
  assert_int_equal(rb, 0);
  assert_int_equal(ra, 0);
}

/* ---- devices ---- */

static int devices_child(int in_fd, int out_fd, void *arg) {
  (void)in_fd, (void)out_fd;
  int want = (int)(intptr_t)arg, n = -1;
  if (ib->devices(&n) != zccSuccess)
    return child_fail(50, "devices failed");
  if (n != want)
    return child_fail(51, "%d devices, expected %d", n, want);
  if (n == 0)
    return 0;
  zcc_net_props_t p;
  if (ib->get_properties(0, &p) != zccSuccess)
    return child_fail(52, "get_properties");
  /* dmabuf unless the fake says it has none; peermem when told it is there */
  const char *dmabuf = getenv("ZCC_FAKEVERBS_DMABUF"),
             *peermem = getenv("ZCC_IB_PEERMEM");
  int ptr = ZCC_NET_PTR_HOST | (dmabuf && !strcmp(dmabuf, "0") ? 0 : ZCC_NET_PTR_DMABUF) |
            (peermem && !strcmp(peermem, "1") ? ZCC_NET_PTR_CUDA : 0);
  if (strncmp(p.name, "fakeverbs", 9) != 0 || !strstr(p.name, ":1") ||
      p.speed_mbps != 200000 || p.ptr_support != ptr || p.port != 1)
    return child_fail(53, "properties: %s %d Mb/s ptr %d port %d", p.name,
                      p.speed_mbps, p.ptr_support, p.port);
  if (ib->get_properties(n, &p) != zccInvalidArgument)
    return child_fail(54, "device %d accepted", n);
  return 0;
}

static int run1(const char *env1, const char *env2, int want) {
  role_t r = {{env1, env2}, devices_child, (void *)(intptr_t)want};
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = spawn(&r, p[0], p[1]);
  close(p[0]), close(p[1]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_devices(void **state) {
  (void)state;
  assert_int_equal(run1(NULL, NULL, 1), 0);
  assert_int_equal(run1("ZCC_FAKEVERBS_DEVICES=2", NULL, 2), 0);
  assert_int_equal(run1("ZCC_FAKEVERBS_DEVICES=0", NULL, 0), 0);
  assert_int_equal(run1("ZCC_FAKEVERBS_PORT_DOWN=0", NULL, 0),
                   0); /* down ports are skipped */
  assert_int_equal(
      run1("ZCC_IBV_LIBRARY=/nonexistent/libibverbs.so.1", NULL, 0),
      0); /* no library: 0 devices */
  assert_int_equal(run1("ZCC_FAKEVERBS_DEVICES=2", "ZCC_IB_HCA=^fakeverbs0", 1),
                   0);
  assert_int_equal(
      run1("ZCC_FAKEVERBS_DEVICES=2", "ZCC_IB_HCA=fakeverbs1:2", 0), 0);
  assert_int_equal(run1("ZCC_IB_GID_INDEX=0", NULL, 1),
                   0); /* a v1 GID can be forced; the fake refuses it at RTR */
  /* GPUDirect RDMA: dmabuf as probed, peermem as told */
  assert_int_equal(run1("ZCC_FAKEVERBS_DMABUF=0", "ZCC_IB_PEERMEM=0", 1), 0);
  assert_int_equal(run1("ZCC_IB_PEERMEM=1", NULL, 1), 0);
  assert_int_equal(run1("ZCC_IB_PEERMEM=0", NULL, 1), 0);
}

/* The MR cache: a range inside a registration reuses it; the last dereg frees
 * it. */
static int mr_cache_child(int in_fd, int out_fd, void *arg) {
  (void)in_fd, (void)out_fd, (void)arg;
  void *l, *c = NULL, *h1, *h2, *h3, *h4;
  ZCC_NET_HANDLE_ALIGN uint8_t handle[ZCC_NET_HANDLE_BYTES];
  zcc_net_auth_t a = auth_of(1);
  if (ib->listen(0, &a, handle, &l) != zccSuccess)
    return child_fail(60, "listen");
  void *rc = NULL;
  int64_t end = zcc_now_ns() + DEADLINE_MS * 1000000LL;
  while ((!c || !rc) && zcc_now_ns() < end) { /* both ends in one process */
    if (!c && ib->connect(0, &a, handle, &c) != zccSuccess)
      return child_fail(61, "connect");
    if (!rc && ib->accept(l, &rc) != zccSuccess)
      return child_fail(62, "accept");
  }
  if (!c || !rc)
    return child_fail(EXIT_HANG, "no connection in one process");
  char *buf = aligned_alloc(4096, 1 << 20);
  if (ib->reg_mr(c, buf, 1 << 20, ZCC_NET_PTR_HOST, &h1) != zccSuccess ||
      ib->reg_mr(c, buf + 100, 5000, ZCC_NET_PTR_HOST, &h2) != zccSuccess ||
      ib->reg_mr(rc, buf + 4096, 4096, ZCC_NET_PTR_HOST, &h3) != zccSuccess)
    return child_fail(63, "reg_mr");
  if (h1 != h2 || h1 != h3)
    return child_fail(64, "ranges inside a registration were registered again");
  if (ib->reg_mr(c, buf, 1, ZCC_NET_PTR_CUDA, &h4) != zccInvalidArgument)
    return child_fail(65, "CUDA memory accepted");
  /* dmabuf: a descriptor that is not one is the library's error, named;
     wrong types and no descriptor are refused before it */
  int pfd[2];
  if (pipe(pfd) != 0)
    return child_fail(68, "pipe");
  if (ib->reg_mr_dmabuf(c, buf, 4096, ZCC_NET_PTR_DMABUF, 0, pfd[0], &h4) != zccSystemError ||
      !strstr(zcc_last_error(), "ibv_reg_dmabuf_mr") ||
      !strstr(zcc_last_error(), strerror(EINVAL)))
    return child_fail(69, "a pipe taken for a dmabuf (%s)", zcc_last_error());
  if (ib->reg_mr_dmabuf(c, buf, 4096, ZCC_NET_PTR_HOST, 0, pfd[0], &h4) != zccInvalidArgument ||
      ib->reg_mr_dmabuf(c, buf, 4096, ZCC_NET_PTR_DMABUF, 0, -1, &h4) != zccInvalidArgument ||
      ib->reg_mr(c, buf, 4096, ZCC_NET_PTR_DMABUF, &h4) != zccInvalidArgument)
    return child_fail(69, "a bad dmabuf registration accepted");
  close(pfd[0]), close(pfd[1]);
  for (int i = 0; i < 3; i++)
    if (ib->dereg_mr(i == 2 ? rc : c, h1) != zccSuccess)
      return child_fail(66, "dereg %d", i);
  if (ib->dereg_mr(c, h1) != zccInvalidArgument) /* gone after the third */
    return child_fail(67, "a freed registration deregistered again");
  ib->close_send(c);
  ib->close_recv(rc);
  ib->close_listen(l);
  free(buf);
  return 0;
}

static void test_mr_cache(void **state) {
  (void)state;
  role_t r = {{NULL}, mr_cache_child, NULL};
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = spawn(&r, p[0], p[1]);
  close(p[0]), close(p[1]);
  int st = 0;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static int bad_qp_count_child(int in_fd, int out_fd, void *arg) {
  (void)in_fd, (void)out_fd, (void)arg;
  void *l, *c = NULL;
  ZCC_NET_HANDLE_ALIGN uint8_t handle[ZCC_NET_HANDLE_BYTES];
  zcc_net_auth_t a = auth_of(1);
  if (ib->listen(0, &a, handle, &l) != zccSuccess)
    return child_fail(70, "listen");
  if (ib->connect(0, &a, handle, &c) != zccInvalidArgument || c)
    return child_fail(71, "17 queue pairs accepted");
  if (!strstr(zcc_last_error(), "ZCC_IB_QPS_PER_CONNECTION"))
    return child_fail(72, "the error does not name the variable");
  ib->close_listen(l);
  return 0;
}

static void test_bad_qp_count(void **state) {
  (void)state;
  role_t r = {{"ZCC_IB_QPS_PER_CONNECTION=17"}, bad_qp_count_child, NULL};
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = spawn(&r, p[0], p[1]);
  close(p[0]), close(p[1]);
  int st = 0;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_lookup(void **state) {
  (void)state;
  assert_ptr_equal(zcc_net_find("ib"), &zcc_net_ib_ops);
  assert_ptr_equal(zcc_net_find("socket"), &zcc_net_socket_ops);
  assert_null(zcc_net_find("nosuch"));
  assert_ptr_equal(zcc_net_find(NULL), &zcc_net_ib_ops);
}

int main(void) {
  const char *name = getenv("ZCC_TEST_NET_PLUGIN");
  ib = zcc_net_find(name ? name : "ib");
  if (!ib)
    return 1;
  is_ib = ib == &zcc_net_ib_ops;
  if (is_ib && !getenv("ZCC_IBV_LIBRARY")) {
    printf("test_net_ib: ZCC_IBV_LIBRARY is not set (run through ctest): "
           "skipped\n");
    return 77;
  }
  const struct CMUnitTest both[] = {
      cmocka_unit_test(test_sizes_one_at_a_time),
      cmocka_unit_test(test_sizes_in_flight_4qps),
      cmocka_unit_test(test_recv_larger),
      cmocka_unit_test(test_many_in_flight),
      cmocka_unit_test(test_rate_report),
      cmocka_unit_test(test_send_larger_than_recv),
      cmocka_unit_test(test_peer_dies),
      cmocka_unit_test(test_side_channel_auth),
  };
  const struct CMUnitTest ib_only[] = {
      cmocka_unit_test(test_lookup),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_mr_cache),
      cmocka_unit_test(test_bad_qp_count),
      cmocka_unit_test(test_fault_wc_error),
      cmocka_unit_test(test_fault_wc_error_status),
      cmocka_unit_test(test_fault_qp_error),
      cmocka_unit_test(test_fault_port_down),
      cmocka_unit_test(test_fault_port_down_receiver),
      cmocka_unit_test(test_fault_reg_mr),
      cmocka_unit_test(test_fault_recv_side),
  };
  int failed =
      cmocka_run_group_tests_name(is_ib ? "ib" : "socket", both, NULL, NULL);
  if (is_ib)
    failed += cmocka_run_group_tests_name("ib faults and devices", ib_only,
                                          NULL, NULL);
  return failed;
}
