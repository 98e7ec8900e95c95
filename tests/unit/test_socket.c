/* Unit tests for src/misc/sha256.c and src/misc/socket.c. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "param.h"
#include "socket.h"

static void to_hex(const uint8_t *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", p[i]);
}

static void expect_sha256(const void *data, size_t bytes, const char *hex) {
  uint8_t d[32];
  char got[65];
  zcc_sha256(data, bytes, d);
  to_hex(d, 32, got);
  assert_string_equal(got, hex);
}

static void expect_hmac(const uint8_t *key, size_t key_bytes, const void *data,
                        size_t bytes, const char *hex) {
  uint8_t d[32];
  char got[65];
  zcc_hmac_sha256(key, key_bytes, data, bytes, d);
  to_hex(d, 32, got);
  assert_string_equal(got, hex);
}

/* FIPS 180-4 example messages and the NIST long-message vector. */
static void test_sha256_vectors(void **state) {
  expect_sha256(
      "", 0,
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_sha256(
      "abc", 3,
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  expect_sha256(
      m448, strlen(m448),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
      "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  expect_sha256(
      m896, strlen(m896),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  size_t n = 1000000;
  char *a = malloc(n);
  assert_non_null(a);
  memset(a, 'a', n);
  expect_sha256(
      a, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(a);
}

/* RFC 4231 test cases 1, 2, 3, 6 and 7. */
static void test_hmac_vectors(void **state) {
  uint8_t k20[20], aa131[131], dd50[50];
  memset(k20, 0x0b, sizeof(k20));
  expect_hmac(
      k20, 20, "Hi There", 8,
      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const char *d2 = "what do ya want for nothing?";
  expect_hmac(
      (const uint8_t *)"Jefe", 4, d2, strlen(d2),
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(k20, 0xaa, sizeof(k20));
  memset(dd50, 0xdd, sizeof(dd50));
  expect_hmac(
      k20, 20, dd50, 50,
      "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  memset(aa131, 0xaa, sizeof(aa131));
  const char *d6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  expect_hmac(
      aa131, 131, d6, strlen(d6),
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  const char *d7 =
      "This is a test using a larger than block-size key and a larger than "
      "block-size data. The key needs to be hashed before being used by the "
      "HMAC algorithm.";
  expect_hmac(
      aa131, 131, d7, strlen(d7),
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void test_random_bytes(void **state) {
  uint8_t a[32], b[32];
  assert_int_equal(zcc_random_bytes(a, sizeof(a)), zccSuccess);
  assert_int_equal(zcc_random_bytes(b, sizeof(b)), zccSuccess);
  assert_memory_not_equal(a, b, sizeof(a));
  assert_int_equal(zcc_random_bytes(NULL, 4), zccInvalidArgument);
}

static void expect_roundtrip(const char *in, const char *want) {
  zcc_sockaddr_t a;
  char buf[ZCC_SOCKADDR_STRLEN];
  assert_int_equal(zcc_sockaddr_parse(in, &a), zccSuccess);
  assert_string_equal(zcc_sockaddr_str(&a, buf), want);
}

static void test_addr_parse_print(void **state) {
  expect_roundtrip("127.0.0.1:1234", "127.0.0.1:1234");
  expect_roundtrip("10.1.2.3:0", "10.1.2.3:0");
  expect_roundtrip("[::1]:80", "[::1]:80");
  expect_roundtrip("[fd00::2]:65535", "[fd00::2]:65535");
  zcc_sockaddr_t a;
  assert_int_equal(zcc_sockaddr_parse("localhost:5000", &a), zccSuccess);
  assert_int_equal(zcc_sockaddr_port(&a), 5000);
  zcc_sockaddr_set_port(&a, 42);
  assert_int_equal(zcc_sockaddr_port(&a), 42);
  assert_int_equal(zcc_sockaddr_parse("[::1]:7", &a), zccSuccess);
  zcc_sockaddr_set_port(&a, 4242);
  assert_int_equal(zcc_sockaddr_port(&a), 4242);

  const char *bad[] = {"1.2.3.4",       "1.2.3.4:",
                       "1.2.3.4:99999", "1.2.3.4:x",
                       "1.2.3.4:-1",    "::1:80",
                       "[::1:80",       "[::1]80",
                       ":80",           "no.such.host.invalid:1"};
  zcc_sockaddr_t keep;
  memset(&keep, 0x5a, sizeof(keep));
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    zcc_sockaddr_t b = keep;
    assert_int_equal(zcc_sockaddr_parse(bad[i], &b), zccInvalidArgument);
    assert_memory_equal(&b, &keep, sizeof(b)); /* untouched on error */
  }
  assert_int_equal(zcc_sockaddr_parse(NULL, &a), zccInvalidArgument);
}

static void set_env(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
  zcc_param_reload();
}

static void test_pick_addr(void **state) {
  zcc_sockaddr_t a;
  char buf[ZCC_SOCKADDR_STRLEN];
  set_env("ZCC_SOCKET_IFNAME", NULL);
  set_env("ZCC_SOCKET_FAMILY", NULL);
  assert_int_equal(zcc_socket_pick_addr(&a), zccSuccess);
  assert_int_equal(zcc_sockaddr_port(&a), 0);

  set_env("ZCC_SOCKET_IFNAME", "=lo");
  assert_int_equal(zcc_socket_pick_addr(&a), zccSuccess);
  assert_string_equal(zcc_sockaddr_str(&a, buf), "127.0.0.1:0");
  set_env("ZCC_SOCKET_FAMILY", "AF_INET6");
  assert_int_equal(zcc_socket_pick_addr(&a), zccSuccess);
  assert_string_equal(zcc_sockaddr_str(&a, buf), "[::1]:0");
  set_env("ZCC_SOCKET_FAMILY", "AF_UNIX");
  assert_int_equal(zcc_socket_pick_addr(&a), zccInvalidArgument);
  set_env("ZCC_SOCKET_FAMILY", NULL);

  set_env("ZCC_SOCKET_IFNAME", "nosuchif");
  assert_int_equal(zcc_socket_pick_addr(&a), zccSystemError);
  set_env("ZCC_SOCKET_IFNAME", "^lo,nosuch");
  if (zcc_socket_pick_addr(&a) == zccSuccess)
    assert_string_not_equal(zcc_sockaddr_str(&a, buf), "127.0.0.1:0");
  set_env("ZCC_SOCKET_IFNAME", NULL);
}

typedef struct pair {
  int listen_fd, client, server;
} pair_t;

static void make_pair(const char *host, pair_t *p) {
  zcc_sockaddr_t a;
  assert_int_equal(zcc_sockaddr_parse(host, &a), zccSuccess);
  assert_int_equal(zcc_socket_listen(&a, 16, &p->listen_fd), zccSuccess);
  assert_int_not_equal(zcc_sockaddr_port(&a), 0);
  zcc_wait_t w = zcc_wait_in(5000, NULL, "test");
  assert_int_equal(zcc_socket_connect(&a, &p->client, &w), zccSuccess);
  assert_int_equal(zcc_socket_accept(p->listen_fd, &p->server, &w), zccSuccess);
}

static void close_pair(pair_t *p) {
  zcc_socket_close(&p->client);
  zcc_socket_close(&p->server);
  zcc_socket_close(&p->listen_fd);
  assert_int_equal(p->client, -1);
}

typedef struct xfer {
  int fd;
  uint8_t *buf;
  size_t bytes;
  zccResult_t res;
} xfer_t;

static void *send_thread(void *arg) {
  xfer_t *x = arg;
  zcc_wait_t w = zcc_wait_in(10000, NULL, "test send");
  x->res = zcc_socket_send_all(x->fd, x->buf, x->bytes, &w);
  return NULL;
}

static void check_transfer(const char *host) {
  pair_t p;
  make_pair(host, &p);
  size_t n = 8u << 20; /* larger than the socket buffers */
  uint8_t *src = malloc(n), *dst = malloc(n);
  assert_non_null(src);
  assert_non_null(dst);
  for (size_t i = 0; i < n; i++)
    src[i] = (uint8_t)(i * 131 + 7);
  xfer_t x = {p.client, src, n, zccInternalError};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, send_thread, &x), 0);
  zcc_wait_t w = zcc_wait_in(10000, NULL, "test recv");
  assert_int_equal(zcc_socket_recv_all(p.server, dst, n, &w), zccSuccess);
  pthread_join(t, NULL);
  assert_int_equal(x.res, zccSuccess);
  assert_memory_equal(src, dst, n);
  free(src);
  free(dst);
  close_pair(&p);
}

static void test_transfer_v4(void **state) {
  check_transfer("127.0.0.1:0");
}
static void test_transfer_v6(void **state) {
  check_transfer("[::1]:0");
}

static void test_closed_peer(void **state) {
  pair_t p;
  make_pair("127.0.0.1:0", &p);
  uint8_t buf[16] = {0};
  zcc_wait_t w = zcc_wait_in(5000, NULL, "test");
  assert_int_equal(zcc_socket_send_all(p.client, "hi", 2, &w), zccSuccess);
  zcc_socket_close(&p.client);
  int64_t t0 = zcc_now_ns();
  assert_int_equal(zcc_socket_recv_all(p.server, buf, sizeof(buf), &w),
                   zccRemoteError);
  assert_true(zcc_now_ns() - t0 < 1000000000LL);
  /* sending into a closed connection fails too, soon */
  zccResult_t res = zccSuccess;
  for (int i = 0; i < 100 && res == zccSuccess; i++)
    res = zcc_socket_send_all(p.server, buf, sizeof(buf), &w);
  assert_int_equal(res, zccRemoteError);
  size_t done = 0;
  assert_int_equal(zcc_socket_recv_some(p.server, buf, sizeof(buf), &done),
                   zccRemoteError);
  close_pair(&p);
}

static void test_timeouts_and_abort(void **state) {
  pair_t p;
  make_pair("127.0.0.1:0", &p);
  uint8_t buf[4];
  zcc_wait_t w = zcc_wait_in(300, NULL, "test");
  int64_t t0 = zcc_now_ns();
  assert_int_equal(zcc_socket_recv_all(p.server, buf, sizeof(buf), &w),
                   zccTimeout);
  int64_t dt = zcc_now_ns() - t0;
  assert_true(dt >= 290000000LL && dt < 1500000000LL);

  atomic_int abort_flag;
  atomic_init(&abort_flag, 1);
  w = zcc_wait_in(0, &abort_flag, "test");
  t0 = zcc_now_ns();
  assert_int_equal(zcc_socket_recv_all(p.server, buf, sizeof(buf), &w),
                   zccRemoteError);
  assert_true(zcc_now_ns() - t0 < 500000000LL);

  /* non-blocking progress with nothing to read moves nothing */
  size_t done = 0;
  assert_int_equal(zcc_socket_recv_some(p.server, buf, sizeof(buf), &done),
                   zccSuccess);
  assert_int_equal(done, 0);
  close_pair(&p);

  /* connect to a port nobody listens on: retried until the deadline */
  zcc_sockaddr_t a;
  int fd = -1, lfd;
  assert_int_equal(zcc_sockaddr_parse("127.0.0.1:0", &a), zccSuccess);
  assert_int_equal(zcc_socket_listen(&a, 1, &lfd), zccSuccess);
  zcc_socket_close(&lfd);
  w = zcc_wait_in(300, NULL, "test");
  t0 = zcc_now_ns();
  assert_int_equal(zcc_socket_connect(&a, &fd, &w), zccTimeout);
  dt = zcc_now_ns() - t0;
  assert_true(dt >= 290000000LL && dt < 1500000000LL);
  assert_int_equal(fd, -1);
  /* accept with nobody connecting */
  assert_int_equal(zcc_sockaddr_parse("127.0.0.1:0", &a), zccSuccess);
  assert_int_equal(zcc_socket_listen(&a, 1, &lfd), zccSuccess);
  w = zcc_wait_in(200, NULL, "test");
  assert_int_equal(zcc_socket_accept(lfd, &fd, &w), zccTimeout);
  zcc_socket_close(&lfd);
}

typedef struct auth_arg {
  int fd;
  uint8_t secret[ZCC_SECRET_BYTES];
  uint64_t context;
  zccResult_t res;
} auth_arg_t;

static void *auth_server_thread(void *arg) {
  auth_arg_t *a = arg;
  zcc_wait_t w = zcc_wait_in(5000, NULL, "test auth");
  a->res = zcc_socket_auth_server(a->fd, a->secret, a->context, &w);
  return NULL;
}

/* Run the handshake; returns the client's result, *server_res the server's. */
static zccResult_t run_auth(const uint8_t *cs, uint64_t cctx, const uint8_t *ss,
                            uint64_t sctx, zccResult_t *server_res) {
  pair_t p;
  make_pair("127.0.0.1:0", &p);
  auth_arg_t a = {p.server, {0}, sctx, zccInternalError};
  memcpy(a.secret, ss, ZCC_SECRET_BYTES);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, auth_server_thread, &a), 0);
  zcc_wait_t w = zcc_wait_in(5000, NULL, "test auth");
  zccResult_t res = zcc_socket_auth_client(p.client, cs, cctx, &w);
  if (res != zccSuccess)
    zcc_socket_close(&p.client); /* the caller drops it */
  pthread_join(t, NULL);
  *server_res = a.res;
  close_pair(&p);
  return res;
}

static void test_auth(void **state) {
  uint8_t s1[ZCC_SECRET_BYTES], s2[ZCC_SECRET_BYTES];
  zccResult_t sres;
  assert_int_equal(zcc_random_bytes(s1, sizeof(s1)), zccSuccess);
  memcpy(s2, s1, sizeof(s2));
  s2[7] ^= 1;
  assert_int_equal(run_auth(s1, 42, s1, 42, &sres), zccSuccess);
  assert_int_equal(sres, zccSuccess);
  assert_int_equal(run_auth(s1, 42, s2, 42, &sres), zccRemoteError);
  assert_int_equal(sres, zccRemoteError);
  assert_int_equal(run_auth(s2, 42, s1, 42, &sres), zccRemoteError);
  assert_int_equal(sres, zccRemoteError);
  assert_int_equal(run_auth(s1, 42, s1, 43, &sres), zccRemoteError);
  assert_int_equal(sres, zccRemoteError);
}

static void test_auth_garbage(void **state) {
  pair_t p;
  make_pair("127.0.0.1:0", &p);
  auth_arg_t a = {p.server, {1, 2, 3}, 7, zccInternalError};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, auth_server_thread, &a), 0);
  uint8_t junk[256];
  memset(junk, 0x41, sizeof(junk));
  zcc_wait_t w = zcc_wait_in(5000, NULL, "test");
  assert_int_equal(zcc_socket_send_all(p.client, junk, sizeof(junk), &w),
                   zccSuccess);
  pthread_join(t, NULL);
  assert_int_equal(a.res, zccRemoteError);
  close_pair(&p);

  /* a peer that hangs up halfway */
  make_pair("127.0.0.1:0", &p);
  a.fd = p.server;
  assert_int_equal(pthread_create(&t, NULL, auth_server_thread, &a), 0);
  assert_int_equal(zcc_socket_send_all(p.client, junk, 10, &w), zccSuccess);
  zcc_socket_close(&p.client);
  pthread_join(t, NULL);
  assert_int_equal(a.res, zccRemoteError);
  close_pair(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vectors),
      cmocka_unit_test(test_hmac_vectors),
      cmocka_unit_test(test_random_bytes),
      cmocka_unit_test(test_addr_parse_print),
      cmocka_unit_test(test_pick_addr),
      cmocka_unit_test(test_transfer_v4),
      cmocka_unit_test(test_transfer_v6),
      cmocka_unit_test(test_closed_peer),
      cmocka_unit_test(test_timeouts_and_abort),
      cmocka_unit_test(test_auth),
      cmocka_unit_test(test_auth_garbage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
