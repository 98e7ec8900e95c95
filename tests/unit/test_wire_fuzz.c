/*
 * Bounded fuzzing of the parsers of bytes from outside the process (the
 * topology JSON has its own, test_topo_fuzz):
 *   - the transfer record of the host transports (zcc_wire_hdr_check): a
 *     record passes exactly when it is the receiver's call, field by field,
 *     and every refusal has a message;
 *   - the server side of the handshake (zcc_socket_auth_server_step), fed
 *     random bytes in random pieces over a socket pair: never accepts, never
 *     blocks; a real client with the secret is accepted, one without is not;
 *   - unique ids (zcc_bootstrap_id_decode), mutated and random.
 * A few seconds by default; ZCC_FUZZ_ITERS=N multiplies each target's
 * inputs to N (docs/reliability.md records a 10 million input run),
 * ZCC_FUZZ_SEED=S for other inputs.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "bootstrap.h"
#include "coll.h"
#include "comm.h"
#include "debug.h"
#include "opsig.h"
#include "socket.h"
#include "wait.h"

static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

static long iters(long dflt) {
  const char *s = getenv("ZCC_FUZZ_ITERS");
  return s && atol(s) > 0 ? atol(s) : dflt;
}

static int setup(void **state) {
  (void)state;
  const char *s = getenv("ZCC_FUZZ_SEED");
  rng_state = s && *s ? strtoull(s, NULL, 0) : 0x9e3779b97f4a7c15ull;
  if (!rng_state) rng_state = 1;
  return 0;
}

static zcc_op_sig_t random_sig(void) {
  zcc_op_sig_t s;
  memset(&s, 0, sizeof(s));
  s.seq = rnd() % 4;
  s.count = rnd() % 3;
  s.coll = (int32_t)(rnd() % (ZCC_COLL_COUNT + 1)) - (rnd() % 8 == 0);
  s.type = (int32_t)(rnd() % (zccNumTypes + 2)) - 1;
  s.op = (int32_t)(rnd() % 6) - 1;
  s.root = (int32_t)(rnd() % 4) - 1;
  s.algo = (int32_t)(rnd() % 3);
  s.flags = (int32_t)(rnd() % 2);
  s.opno = rnd();
  return s;
}

static int expect_pass(const zcc_wire_hdr_t *h, const zcc_op_sig_t *m, uint64_t bytes,
                       uint64_t pseq) {
  return h->magic == ZCC_WIRE_DATA && h->sig.seq == m->seq && h->sig.count == m->count &&
         h->sig.coll == m->coll && h->sig.type == m->type && h->sig.op == m->op &&
         h->sig.root == m->root && h->sig.flags == m->flags && h->sig.algo == m->algo &&
         h->bytes == bytes && h->pseq == pseq;
}

static void test_wire_record(void **state) {
  (void)state;
  struct zccComm *comm = calloc(1, sizeof(*comm));
  assert_non_null(comm);
  comm->rank = 1;
  comm->nranks = 4;
  long n = iters(300000), passed = 0;
  for (long i = 0; i < n; i++) {
    if (i % 64 == 0) /* the history that out-of-step messages consult */
      for (int k = 0; k < ZCC_SIG_HISTORY; k++) comm->sig_hist[k] = random_sig();
    zcc_op_sig_t mine = random_sig();
    uint64_t bytes = rnd() % 3, pseq = rnd() % 2;
    zcc_wire_hdr_t h;
    switch (rnd() % 4) {
    case 0: /* the right record, one field changed or not */
      zcc_wire_hdr_fill(&h, &mine, bytes, pseq);
      if (rnd() % 2) ((uint8_t *)&h)[rnd() % sizeof(h)] ^= (uint8_t)(1u << (rnd() % 8));
      break;
    case 1: /* another random call */
      h.sig = random_sig();
      zcc_wire_hdr_fill(&h, &h.sig, rnd() % 3, rnd() % 2);
      break;
    case 2: /* raw bytes */
      for (size_t k = 0; k < sizeof(h); k++) ((uint8_t *)&h)[k] = (uint8_t)rnd();
      break;
    default: /* a failure record */
      zcc_wire_hdr_fill(&h, &mine, bytes, pseq);
      h.magic = ZCC_WIRE_FAIL;
      h.code = (uint32_t)rnd();
    }
    zcc_clear_last_error();
    zcc_op_sig_t none;
    memset(&none, 0, sizeof(none));
    const zcc_op_sig_t *mp = rnd() % 16 ? &mine : NULL; /* NULL: an unsigned transfer */
    zccResult_t res = zcc_wire_hdr_check(&h, mp, bytes, pseq, (int)(rnd() % 4), comm);
    int want = expect_pass(&h, mp ? mp : &none, bytes, pseq);
    if ((res == zccSuccess) != want)
      fail_msg("input %ld: result %d but the record %s the call", i, (int)res,
               want ? "matches" : "differs from");
    if (res == zccSuccess) {
      passed++;
    } else {
      if (res != zccInvalidUsage && res != zccRemoteError && res != zccInternalError)
        fail_msg("input %ld: unexpected result %d", i, (int)res);
      if (zcc_last_error()[0] == '\0') fail_msg("input %ld: refused without a message", i);
      if (res == zccRemoteError && h.magic != ZCC_WIRE_FAIL)
        fail_msg("input %ld: zccRemoteError for a data record", i);
    }
  }
  printf("wire records: %ld inputs, %ld passed\n", n, passed);
  assert_true(passed > 0);
  free(comm);
}

/* ---- the handshake's server side ---- */

static const uint8_t secret[ZCC_SECRET_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

typedef struct {
  int fd;
  const uint8_t *secret;
  zccResult_t res;
} client_t;

static void *client_main(void *arg) {
  client_t *c = arg;
  zcc_wait_t w = zcc_wait_in(5000, NULL, "fuzz client");
  c->res = zcc_socket_auth_client(c->fd, c->secret, 42, &w);
  if (c->res != zccSuccess) shutdown(c->fd, SHUT_WR); /* as a closing client would */
  return NULL;
}

/* Run the server step on fd until it decides or 2 s pass. */
static int serve(int fd, zcc_auth_server_state_t *st) {
  for (int k = 0; k < 2000; k++) {
    int r = zcc_socket_auth_server_step(fd, st, secret, 42);
    if (r != 0) return r;
    usleep(1000);
  }
  return 0;
}

static void test_auth_server_step(void **state) {
  (void)state;
  /* Controls: the right secret is accepted, a wrong one refused. */
  for (int wrong = 0; wrong < 2; wrong++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    uint8_t other[ZCC_SECRET_BYTES] = {9};
    client_t c = {sv[1], wrong ? other : secret, zccSuccess};
    pthread_t t;
    pthread_create(&t, NULL, client_main, &c);
    zcc_auth_server_state_t st;
    memset(&st, 0, sizeof(st));
    int r = serve(sv[0], &st);
    if (wrong) close(sv[0]); /* the client waits for an answer otherwise */
    pthread_join(t, NULL);
    if (wrong) {
      assert_int_equal(r, -1);
      assert_int_not_equal(c.res, zccSuccess);
    } else {
      assert_int_equal(r, 1);
      assert_int_equal(c.res, zccSuccess);
      close(sv[0]);
    }
    close(sv[1]);
  }
  long n = iters(20000) / 10, refused = 0;
  if (n < 1) n = 1;
  uint8_t buf[256];
  for (long i = 0; i < n; i++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    zcc_auth_server_state_t st;
    memset(&st, 0, sizeof(st));
    int r = 0, pieces = 1 + (int)(rnd() % 4);
    for (int p = 0; p < pieces && r == 0; p++) {
      size_t len = rnd() % sizeof(buf);
      for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)rnd();
      if (len >= 8 && rnd() % 2) { /* a plausible header: the right magic and kind */
        uint32_t magic = htonl(0x7a636361u), kind = htonl(1 + (uint32_t)(rnd() % 3));
        memcpy(buf, &magic, 4);
        memcpy(buf + 4, &kind, 4);
      }
      if (len) assert_true(write(sv[1], buf, len) == (ssize_t)len);
      if (rnd() % 8 == 0) shutdown(sv[1], SHUT_WR);
      r = zcc_socket_auth_server_step(sv[0], &st, secret, 42);
    }
    if (r == 1) fail_msg("input %ld: random bytes passed the handshake", i);
    refused += r < 0;
    close(sv[0]);
    close(sv[1]);
  }
  printf("handshakes: %ld random inputs, %ld refused, the rest waiting for more\n", n,
         refused);
}

/* ---- unique ids ---- */

static void test_id_decode_fuzz(void **state) {
  (void)state;
  zccUniqueId good;
  zcc_sockaddr_t a;
  assert_int_equal(zcc_sockaddr_parse("127.0.0.1:0", &a), zccSuccess);
  assert_int_equal(zcc_bootstrap_create_root(&good, &a, NULL, NULL), zccSuccess);
  /* The root gives up on its own after ZCC_INIT_TIMEOUT; this test never joins it. */
  long n = iters(200000), ok = 0;
  for (long i = 0; i < n; i++) {
    zccUniqueId id = good;
    if (rnd() % 4 == 0) {
      for (size_t k = 0; k < sizeof(id.internal); k++) id.internal[k] = (char)rnd();
    } else {
      int flips = 1 + (int)(rnd() % 4);
      for (int f = 0; f < flips; f++) id.internal[rnd() % sizeof(id.internal)] ^= (char)(1u << (rnd() % 8));
    }
    zcc_unique_id_t u;
    zccResult_t res = zcc_bootstrap_id_decode(&id, &u);
    if (res == zccSuccess) ok++;
    else if (res != zccInvalidArgument && res != zccInvalidUsage) fail_msg("input %ld: unexpected result %d", i, (int)res);
  }
  zcc_unique_id_t u;
  assert_int_equal(zcc_bootstrap_id_decode(&good, &u), zccSuccess);
  printf("unique ids: %ld inputs, %ld decoded\n", n, ok);
}

int main(void) {
  setenv("ZCC_INIT_TIMEOUT", "1000", 0);
  setenv("ZCC_DEBUG", "ERROR", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_wire_record, setup),
      cmocka_unit_test_setup(test_auth_server_step, setup),
      cmocka_unit_test_setup(test_id_decode_fuzz, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
