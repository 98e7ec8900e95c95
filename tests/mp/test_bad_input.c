/*
 * Every entry point of zcc.h with bad arguments: the exact result code, a
 * specific message in zccGetLastError(NULL), output arguments and buffers
 * left unchanged, and the communicator still usable afterwards. Also
 * destroyed and aborted handles, unbalanced groups, zccMemAlloc without a
 * GPU, bad configurations, zccCommSplit, the error strings, the version and
 * the parameter listing.
 *
 * One process: a 1-rank communicator, and 2 host communicators from
 * zccCommInitAll for the range checks that need 2 ranks. A watchdog alarm
 * turns a hang into a failure that names the call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ztest.h"
#include "zcc.h"

#define NELEM 64
#define WATCHDOG_S 60

static const char *volatile g_current = "start";
static unsigned char sbuf[NELEM * 8], rbuf[NELEM * 8];
static unsigned char sref[NELEM * 8], rref[NELEM * 8];

static void on_alarm(int sig) {
  char line[512];
  int len = snprintf(line, sizeof(line),
                     "test_bad_input: FAIL: no return within %d s from: %s\n",
                     WATCHDOG_S, g_current);
  (void)sig;
  if (write(STDOUT_FILENO, line, (size_t)len) < 0)
    _exit(3);
  _exit(3);
}

static void watch(const char *what) {
  g_current = what;
  alarm(WATCHDOG_S);
}

static void prep_bufs(void) {
  for (size_t i = 0; i < sizeof(sbuf); i++) {
    sbuf[i] = (unsigned char)(i * 7 + 1);
    rbuf[i] = (unsigned char)(0xee ^ i);
  }
  memcpy(sref, sbuf, sizeof(sbuf));
  memcpy(rref, rbuf, sizeof(rbuf));
}

static int contains_any(const char *msg, const char *keywords) {
  char kw[256];
  snprintf(kw, sizeof(kw), "%s", keywords);
  for (char *save = NULL, *k = strtok_r(kw, "|", &save); k;
       k = strtok_r(NULL, "|", &save))
    if (strcasestr(msg, k))
      return 1;
  return 0;
}

/* The last error must be non-empty, not the generic text, and on topic. */
static void check_msg(const char *call, zccResult_t rc, const char *keywords,
                      int line) {
  const char *m = zccGetLastError(NULL);
  if (!m || !*m)
    zt_fail("line %d: %s: zccGetLastError(NULL) is %s after %s", line, call,
            m ? "empty" : "NULL", zt_rc_name(rc));
  else if (strcmp(m, zccGetErrorString(rc)) == 0)
    zt_fail("line %d: %s: zccGetLastError(NULL) is only the generic \"%s\"",
            line, call, m);
  else if (keywords && !contains_any(m, keywords))
    zt_fail("line %d: %s: message \"%s\" mentions none of \"%s\"", line, call,
            m, keywords);
  else {
    zt_pass();
    if (getenv("ZCC_TEST_VERBOSE"))
      zt_log("line %d: %s -> %s: \"%s\"", line, call, zt_rc_name(rc), m);
  }
}

static void bad_call(zccResult_t expected, zccResult_t got, const char *call,
                     const char *keywords, int line) {
  alarm(0);
  if (zt_expect_rc(expected, got, call, __FILE__, line))
    check_msg(call, got, keywords, line);
}

static void bufs_unchanged(const char *call, int line) {
  ZT_CHECK(memcmp(sbuf, sref, sizeof(sbuf)) == 0,
           "line %d: %s: sendbuff changed by a failing call", line, call);
  ZT_CHECK(memcmp(rbuf, rref, sizeof(rbuf)) == 0,
           "line %d: %s: recvbuff changed by a failing call", line, call);
}

/* A call that must fail with `exp`, with a message naming one of `kw`. */
#define BAD(exp, kw, call)                                                     \
  do {                                                                         \
    watch(#call);                                                              \
    bad_call((exp), (call), #call, (kw), __LINE__);                            \
  } while (0)

/* As BAD, and sbuf/rbuf must be unchanged. */
#define BADB(exp, kw, call)                                                    \
  do {                                                                         \
    prep_bufs();                                                               \
    BAD(exp, kw, call);                                                        \
    bufs_unchanged(#call, __LINE__);                                           \
  } while (0)

/* A call that must succeed. */
#define OK(call)                                                               \
  do {                                                                         \
    watch(#call);                                                              \
    zccResult_t r_ = (call);                                                   \
    alarm(0);                                                                  \
    zt_expect_rc(zccSuccess, r_, #call, __FILE__, __LINE__);                   \
  } while (0)

/* A call that may return one of two codes (the API leaves it open). */
#define EITHER(a, b, call)                                                     \
  do {                                                                         \
    watch(#call);                                                              \
    zccResult_t r_ = (call);                                                   \
    alarm(0);                                                                  \
    ZT_CHECK(r_ == (a) || r_ == (b), "line %d: %s: expected %s or %s, got %s", \
             __LINE__, #call, zt_rc_name(a), zt_rc_name(b), zt_rc_name(r_));   \
  } while (0)

#define KW_SEND "sendbuff|send|null|buffer|pointer"
#define KW_RECV "recvbuff|recv|null|buffer|pointer"
#define KW_BUF "buff|null|buffer|pointer"
#define KW_COMM "comm"
#define KW_TYPE "type"
#define KW_OP "op|reduction"
#define KW_ROOT "root"
#define KW_PEER "peer"
#define KW_COUNT "count|overflow|size|bytes"
#define KW_PTR "null|pointer"
#define KW_DEAD "comm|destroy|abort|freed"

static void test_strings_and_version(void) {
  int v = -1;
  OK(zccGetVersion(&v));
  ZT_CHECK(v == ZCC_VERSION_CODE, "zccGetVersion: expected %d, got %d",
           ZCC_VERSION_CODE, v);
  BAD(zccInvalidArgument, "version|null|pointer", zccGetVersion(NULL));

#define ZT_STR_CHECK_(name, value, desc)                                       \
  {                                                                            \
    const char *s = zccGetErrorString(name);                                   \
    ZT_CHECK(s && strcmp(s, desc) == 0,                                        \
             "zccGetErrorString(%s): expected \"%s\", got \"%s\"", #name, desc, \
             s ? s : "(null)");                                                \
  }
  ZCC_RESULT_MAP(ZT_STR_CHECK_)
#undef ZT_STR_CHECK_
  const int odd[] = {zccNumResults, -1, 1000, INT_MAX};
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
    const char *s = zccGetErrorString((zccResult_t)odd[i]);
    ZT_CHECK(s && *s, "zccGetErrorString(%d): expected a non-empty text, got %s",
             odd[i], s ? "\"\"" : "NULL");
  }
  ZT_CHECK(zccGetLastError(NULL) != NULL, "zccGetLastError(NULL) returned NULL");
}

static void test_params(void) {
  const char *name, *value, *def, *help;
  const char *seen[512];
  int count = 0, found_timeout = 0;
  zccResult_t rc = zccSuccess;
  char list[4096] = "";
  size_t pos = 0;

  for (int i = 0; i < 512; i++) {
    name = value = def = help = NULL;
    rc = zccGetParam(i, &name, &value, &def, &help);
    if (rc != zccSuccess)
      break;
    count++;
    ZT_CHECK(name && *name, "zccGetParam(%d): empty name", i);
    if (!name)
      continue;
    ZT_CHECK(strncmp(name, "ZCC_", 4) != 0,
             "zccGetParam(%d): name \"%s\" must exclude the ZCC_ prefix", i, name);
    ZT_CHECK(value != NULL, "zccGetParam(%d) %s: value is NULL", i, name);
    ZT_CHECK(help && *help, "zccGetParam(%d) %s: no help line", i, name);
    int dup = 0;
    for (int j = 0; j < i && j < 512; j++)
      if (seen[j] && strcmp(seen[j], name) == 0)
        dup = 1;
    ZT_CHECK(!dup, "zccGetParam(%d): %s listed twice", i, name);
    seen[i] = name;
    if (strcmp(name, "TIMEOUT") == 0) {
      found_timeout = 1;
      ZT_CHECK(value && strcmp(value, "54321") == 0,
               "zccGetParam TIMEOUT: expected the environment's value \"54321\", got \"%s\"",
               value ? value : "(null)");
    }
    if (pos < sizeof(list) - 64)
      pos += (size_t)snprintf(list + pos, sizeof(list) - pos, " %s", name);
  }
  zt_log("zccGetParam lists %d parameters:%s", count, list);
  ZT_CHECK(count > 0, "zccGetParam lists no parameter");
  ZT_CHECK(rc == zccInvalidArgument,
           "zccGetParam past the end: expected zccInvalidArgument, got %s",
           zt_rc_name(rc));
  ZT_CHECK(found_timeout, "zccGetParam does not list TIMEOUT");
  BAD(zccInvalidArgument, "index|param", zccGetParam(-1, &name, &value, &def, &help));
  BAD(zccInvalidArgument, "index|param", zccGetParam(INT_MAX, &name, &value, &def, &help));
}

static void test_init_args(void) {
  zccUniqueId id, zero;
  zccComm_t sentinel = (zccComm_t)(uintptr_t)0x5e5e5e50;
  zccComm_t c = sentinel;
  zccComm_t comms[2] = {sentinel, sentinel};
  zccConfig_t cfg;

  BAD(zccInvalidArgument, KW_PTR "|id", zccGetUniqueId(NULL));
  OK(zccGetUniqueId(&id));
  memset(&zero, 0, sizeof(zero));

  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommInitRank(NULL, 1, id, 0));
  BAD(zccInvalidArgument, "nranks|ranks", zccCommInitRank(&c, 0, id, 0));
  BAD(zccInvalidArgument, "nranks|ranks", zccCommInitRank(&c, -1, id, 0));
  BAD(zccInvalidArgument, "nranks|ranks", zccCommInitRank(&c, INT_MIN, id, 0));
  BAD(zccInvalidArgument, "rank", zccCommInitRank(&c, 2, id, -1));
  BAD(zccInvalidArgument, "rank", zccCommInitRank(&c, 2, id, 2));
  BAD(zccInvalidArgument, "rank", zccCommInitRank(&c, 2, id, INT_MAX));
  BAD(zccInvalidArgument, "id|magic|unique", zccCommInitRank(&c, 1, zero, 0));
  ZT_CHECK(c == sentinel, "zccCommInitRank wrote *comm although it failed");

  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.magic = 0xdeadbeef;
  BAD(zccInvalidArgument, "config|magic", zccCommInitRankConfig(&c, 1, id, 0, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.size = 0;
  BAD(zccInvalidArgument, "config|size", zccCommInitRankConfig(&c, 1, id, 0, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.size = 3;
  BAD(zccInvalidArgument, "config|size", zccCommInitRankConfig(&c, 1, id, 0, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = 77;
  BAD(zccInvalidArgument, "device", zccCommInitRankConfig(&c, 1, id, 0, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = -3;
  BAD(zccInvalidArgument, "device", zccCommInitRankConfig(&c, 1, id, 0, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.blocking = 7; /* 0 and 1 are valid (0: non-blocking init, test_core) */
  BAD(zccInvalidArgument, "blocking", zccCommInitRankConfig(&c, 1, id, 0, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = zccDeviceHost;
  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommInitRankConfig(NULL, 1, id, 0, &cfg));
  BAD(zccInvalidArgument, "rank", zccCommInitRankConfig(&c, 1, id, 1, &cfg));
  ZT_CHECK(c == sentinel, "zccCommInitRankConfig wrote *comm although it failed");

  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommInitAll(NULL, 2, NULL));
  BAD(zccInvalidArgument, "ndev|count|devices|number", zccCommInitAll(comms, 0, NULL));
  BAD(zccInvalidArgument, "ndev|count|devices|number", zccCommInitAll(comms, -2, NULL));
  ZT_CHECK(comms[0] == sentinel && comms[1] == sentinel,
           "zccCommInitAll wrote comms[] although it failed");

  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommInitFromEnv(NULL, NULL));
  watch("zccCommInitFromEnv without launcher variables");
  double t0 = zt_now();
  zccResult_t rc = zccCommInitFromEnv(&c, NULL);
  alarm(0);
  ZT_CHECK(rc == zccInvalidUsage || rc == zccInvalidArgument,
           "zccCommInitFromEnv without RANK/WORLD_SIZE/...: expected zccInvalidUsage "
           "or zccInvalidArgument, got %s", zt_rc_name(rc));
  if (rc != zccSuccess)
    check_msg("zccCommInitFromEnv without launcher variables", rc,
              "rank|size|environment|launcher|RANK", __LINE__);
  ZT_CHECK(zt_now() - t0 < 10, "zccCommInitFromEnv without launcher took %.1f s",
           zt_now() - t0);
  ZT_CHECK(c == sentinel, "zccCommInitFromEnv wrote *comm although it failed");
}

static void test_queries(zccComm_t c) {
  int v = -77;
  zccResult_t e = (zccResult_t)-77;
  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommCount(NULL, &v));
  BAD(zccInvalidArgument, "count|" KW_PTR, zccCommCount(c, NULL));
  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommCuDevice(NULL, &v));
  BAD(zccInvalidArgument, "device|" KW_PTR, zccCommCuDevice(c, NULL));
  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommUserRank(NULL, &v));
  BAD(zccInvalidArgument, "rank|" KW_PTR, zccCommUserRank(c, NULL));
  ZT_CHECK(v == -77, "a failing query wrote its output (%d)", v);
  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommGetAsyncError(NULL, &e));
  BAD(zccInvalidArgument, "error|" KW_PTR, zccCommGetAsyncError(c, NULL));
  ZT_CHECK((int)e == -77, "a failing zccCommGetAsyncError wrote its output");
  OK(zccCommGetAsyncError(c, &e));
  ZT_CHECK(e == zccSuccess, "zccCommGetAsyncError of a healthy comm: expected zccSuccess, got %s",
           zt_rc_name(e));
  BAD(zccInvalidArgument, KW_COMM "|" KW_PTR, zccCommFinalize(NULL));
  EITHER(zccSuccess, zccInvalidArgument, zccCommDestroy(NULL));
  EITHER(zccSuccess, zccInvalidArgument, zccCommAbort(NULL));
  ZT_CHECK(zccGetLastError(c) != NULL, "zccGetLastError(comm) returned NULL");
}

/* Argument checks of every collective on a communicator of nranks ranks. */
static void test_coll_args(zccComm_t c, int nranks) {
  const void *s = sbuf;
  void *r = rbuf;
  /* bytes overflow size_t: for 1 rank in count * 4, for 2 ranks in count * 4 * 2 */
  size_t ovf = nranks == 1 ? SIZE_MAX / 2 : SIZE_MAX / 8 + 1;
  size_t ovf_any = SIZE_MAX / 2;
  const int bad_types[] = {-1, zccNumTypes, 255, INT_MAX};
  const int bad_ops[] = {-1, zccNumOps, 99, INT_MIN};

  zt_log("argument checks on a %d-rank communicator", nranks);
  if (nranks == 1) {
    BADB(zccInvalidArgument, KW_SEND, zccAllReduce(NULL, r, 4, zccFloat, zccSum, c, NULL));
    BADB(zccInvalidArgument, KW_RECV, zccAllReduce(s, NULL, 4, zccFloat, zccSum, c, NULL));
    BADB(zccInvalidArgument, KW_BUF, zccBroadcast(NULL, r, 4, zccFloat, 0, c, NULL));
    BADB(zccInvalidArgument, KW_RECV, zccBroadcast(s, NULL, 4, zccFloat, 0, c, NULL));
    BADB(zccInvalidArgument, KW_SEND, zccReduce(NULL, r, 4, zccFloat, zccSum, 0, c, NULL));
    BADB(zccInvalidArgument, KW_RECV, zccReduce(s, NULL, 4, zccFloat, zccSum, 0, c, NULL));
  }
  BADB(zccInvalidArgument, KW_SEND, zccAllGather(NULL, r, 4, zccFloat, c, NULL));
  BADB(zccInvalidArgument, KW_RECV, zccAllGather(s, NULL, 4, zccFloat, c, NULL));
  BADB(zccInvalidArgument, KW_SEND, zccReduceScatter(NULL, r, 4, zccFloat, zccSum, c, NULL));
  BADB(zccInvalidArgument, KW_RECV, zccReduceScatter(s, NULL, 4, zccFloat, zccSum, c, NULL));
  BADB(zccInvalidArgument, KW_SEND, zccAlltoAll(NULL, r, 4, zccFloat, c, NULL));
  BADB(zccInvalidArgument, KW_RECV, zccAlltoAll(s, NULL, 4, zccFloat, c, NULL));
  BADB(zccInvalidArgument, KW_BUF, zccSend(NULL, 4, zccFloat, 0, c, NULL));
  BADB(zccInvalidArgument, KW_BUF, zccRecv(NULL, 4, zccFloat, 0, c, NULL));

  BADB(zccInvalidArgument, KW_COMM, zccAllReduce(s, r, 4, zccFloat, zccSum, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccBroadcast(s, r, 4, zccFloat, 0, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccReduce(s, r, 4, zccFloat, zccSum, 0, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccAllGather(s, r, 4, zccFloat, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccReduceScatter(s, r, 4, zccFloat, zccSum, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccAlltoAll(s, r, 4, zccFloat, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccSend(s, 4, zccFloat, 0, NULL, NULL));
  BADB(zccInvalidArgument, KW_COMM, zccRecv(r, 4, zccFloat, 0, NULL, NULL));

  for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
    zccDataType_t t = (zccDataType_t)bad_types[i];
    zt_log("datatype %d", bad_types[i]);
    BADB(zccInvalidArgument, KW_TYPE, zccAllReduce(s, r, 4, t, zccSum, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccBroadcast(s, r, 4, t, 0, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccReduce(s, r, 4, t, zccSum, 0, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccAllGather(s, r, 4, t, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccReduceScatter(s, r, 4, t, zccSum, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccAlltoAll(s, r, 4, t, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccSend(s, 4, t, 0, c, NULL));
    BADB(zccInvalidArgument, KW_TYPE, zccRecv(r, 4, t, 0, c, NULL));
  }
  for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
    zccRedOp_t op = (zccRedOp_t)bad_ops[i];
    zt_log("op %d", bad_ops[i]);
    BADB(zccInvalidArgument, KW_OP, zccAllReduce(s, r, 4, zccFloat, op, c, NULL));
    BADB(zccInvalidArgument, KW_OP, zccReduce(s, r, 4, zccFloat, op, 0, c, NULL));
    BADB(zccInvalidArgument, KW_OP, zccReduceScatter(s, r, 4, zccFloat, op, c, NULL));
  }
  const int bad_roots[] = {-1, nranks, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof(bad_roots) / sizeof(bad_roots[0]); i++) {
    int root = bad_roots[i];
    zt_log("root/peer %d", root);
    BADB(zccInvalidArgument, KW_ROOT, zccBroadcast(s, r, 4, zccFloat, root, c, NULL));
    BADB(zccInvalidArgument, KW_ROOT, zccReduce(s, r, 4, zccFloat, zccSum, root, c, NULL));
    BADB(zccInvalidArgument, KW_PEER, zccSend(s, 4, zccFloat, root, c, NULL));
    BADB(zccInvalidArgument, KW_PEER, zccRecv(r, 4, zccFloat, root, c, NULL));
  }
  zt_log("counts whose bytes overflow size_t");
  BADB(zccInvalidArgument, KW_COUNT, zccAllReduce(s, r, ovf_any, zccFloat, zccSum, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccAllReduce(s, r, SIZE_MAX, zccDouble, zccSum, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccBroadcast(s, r, ovf_any, zccFloat, 0, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccReduce(s, r, ovf_any, zccFloat, zccSum, 0, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccAllGather(s, r, ovf, zccFloat, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccReduceScatter(s, r, ovf, zccFloat, zccSum, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccAlltoAll(s, r, ovf, zccFloat, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccSend(s, ovf_any, zccFloat, 0, c, NULL));
  BADB(zccInvalidArgument, KW_COUNT, zccRecv(r, ovf_any, zccFloat, 0, c, NULL));
}

static void test_register(zccComm_t c) {
  void *h = (void *)(uintptr_t)0x77;
  static char buf[4096];
  BAD(zccInvalidArgument, KW_COMM, zccCommRegister(NULL, buf, sizeof(buf), &h));
  BAD(zccInvalidArgument, KW_BUF, zccCommRegister(c, NULL, sizeof(buf), &h));
  BAD(zccInvalidArgument, "handle|" KW_PTR, zccCommRegister(c, buf, sizeof(buf), NULL));
  ZT_CHECK(h == (void *)(uintptr_t)0x77, "a failing zccCommRegister wrote *handle");
  BAD(zccInvalidArgument, KW_COMM, zccCommDeregister(NULL, h));
  BAD(zccInvalidArgument, "handle|" KW_PTR, zccCommDeregister(c, NULL));
  h = NULL;
  OK(zccCommRegister(c, buf, sizeof(buf), &h));
  ZT_CHECK(h != NULL, "zccCommRegister of host memory on a host comm gave a NULL handle");
  if (h) {
    OK(zccCommDeregister(c, h));
    EITHER(zccInvalidArgument, zccInvalidUsage, zccCommDeregister(c, h));
  }
}

static void test_memalloc(void) {
  void *p = (void *)(uintptr_t)0x99;
  static char not_ours[64];
  BAD(zccInvalidUsage, "gpu|cuda|device|host", zccMemAlloc(&p, 1024));
  ZT_CHECK(p == (void *)(uintptr_t)0x99, "a failing zccMemAlloc wrote *ptr");
  BAD(zccInvalidArgument, KW_PTR, zccMemAlloc(NULL, 1024));
  EITHER(zccSuccess, zccInvalidArgument, zccMemFree(NULL));
  EITHER(zccInvalidArgument, zccInvalidUsage, zccMemFree(not_ours));
}

static void test_group(zccComm_t c) {
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  BAD(zccInvalidUsage, "group", zccGroupEnd());
  OK(zccGroupStart());
  OK(zccGroupStart());
  OK(zccGroupEnd());
  OK(zccGroupEnd());
  BAD(zccInvalidUsage, "group", zccGroupEnd());

  /* A bad call inside a group fails at once; the group still closes. */
  OK(zccGroupStart());
  prep_bufs();
  BAD(zccInvalidArgument, KW_TYPE, zccAllReduce(sbuf, rbuf, 4, (zccDataType_t)99, zccSum, c, NULL));
  bufs_unchanged("bad datatype inside a group", __LINE__);
  watch("zccGroupEnd after a failed call");
  zccResult_t rc = zccGroupEnd();
  alarm(0);
  zt_log("zccGroupEnd after a failed call inside the group returned %s", zt_rc_name(rc));
  BAD(zccInvalidUsage, "group", zccGroupEnd());

  /* A valid deferred call on 1 rank completes at zccGroupEnd. */
  OK(zccGroupStart());
  OK(zccAllReduce(in, out, 4, zccFloat, zccSum, c, NULL));
  OK(zccGroupEnd());
  ZT_CHECK(out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 4,
           "grouped 1-rank allreduce: expected {1,2,3,4}, got {%g,%g,%g,%g}",
           out[0], out[1], out[2], out[3]);
}

static void test_split(zccComm_t c) {
  zccComm_t sentinel = (zccComm_t)(uintptr_t)0x5e5e5e50, nc = sentinel;
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
  int v = 0;
  BAD(zccInvalidArgument, KW_COMM, zccCommSplit(NULL, 0, 0, &nc, NULL));
  BAD(zccInvalidArgument, "newcomm|" KW_PTR, zccCommSplit(c, 0, 0, NULL, NULL));
  BAD(zccInvalidArgument, "color|colour", zccCommSplit(c, -2, 0, &nc, NULL));
  BAD(zccInvalidArgument, "color|colour", zccCommSplit(c, INT_MIN, 0, &nc, NULL));
  cfg.magic = 1;
  BAD(zccInvalidArgument, "config|magic", zccCommSplit(c, 0, 0, &nc, &cfg));
  cfg = (zccConfig_t)ZCC_CONFIG_INITIALIZER;
  cfg.size = 0;
  BAD(zccInvalidArgument, "config|size", zccCommSplit(c, 0, 0, &nc, &cfg));
  ZT_CHECK(nc == sentinel, "a failing zccCommSplit wrote *newcomm");

  OK(zccCommSplit(c, ZCC_SPLIT_NOCOLOR, 0, &nc, NULL));
  ZT_CHECK(nc == NULL, "zccCommSplit with ZCC_SPLIT_NOCOLOR: expected NULL, got %p",
           (void *)nc);
  nc = sentinel;
  OK(zccCommSplit(c, 5, 3, &nc, NULL));
  if (nc != sentinel && nc != NULL) {
    OK(zccCommCount(nc, &v));
    ZT_CHECK(v == 1, "split of a 1-rank comm: expected count 1, got %d", v);
    OK(zccCommDestroy(nc));
  } else {
    zt_fail("zccCommSplit(color 5) succeeded without a communicator");
  }
}

/* Every call on a handle that was destroyed or aborted: zccInvalidUsage. */
static void test_dead_handle(zccComm_t dead, const char *how) {
  int v = -5;
  zccResult_t e;
  zccComm_t nc = NULL;
  void *h = NULL;
  zt_log("calls on a %s communicator", how);
  BADB(zccInvalidUsage, KW_DEAD, zccAllReduce(sbuf, rbuf, 4, zccFloat, zccSum, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccBroadcast(sbuf, rbuf, 4, zccFloat, 0, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccReduce(sbuf, rbuf, 4, zccFloat, zccSum, 0, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccAllGather(sbuf, rbuf, 4, zccFloat, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccReduceScatter(sbuf, rbuf, 4, zccFloat, zccSum, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccAlltoAll(sbuf, rbuf, 4, zccFloat, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccSend(sbuf, 4, zccFloat, 0, dead, NULL));
  BADB(zccInvalidUsage, KW_DEAD, zccRecv(rbuf, 4, zccFloat, 0, dead, NULL));
  BAD(zccInvalidUsage, KW_DEAD, zccCommCount(dead, &v));
  BAD(zccInvalidUsage, KW_DEAD, zccCommCuDevice(dead, &v));
  BAD(zccInvalidUsage, KW_DEAD, zccCommUserRank(dead, &v));
  ZT_CHECK(v == -5, "a query on a %s comm wrote its output (%d)", how, v);
  BAD(zccInvalidUsage, KW_DEAD, zccCommGetAsyncError(dead, &e));
  BAD(zccInvalidUsage, KW_DEAD, zccCommSplit(dead, 0, 0, &nc, NULL));
  BAD(zccInvalidUsage, KW_DEAD, zccCommRegister(dead, sbuf, sizeof(sbuf), &h));
  BAD(zccInvalidUsage, KW_DEAD, zccCommFinalize(dead));
  BAD(zccInvalidUsage, KW_DEAD, zccCommDestroy(dead));
  BAD(zccInvalidUsage, KW_DEAD, zccCommAbort(dead));
  watch("zccGetLastError(dead comm)");
  ZT_CHECK(zccGetLastError(dead) != NULL, "zccGetLastError(%s comm) returned NULL", how);
  alarm(0);
}

static void *destroy_thread(void *arg) {
  zccComm_t c = arg;
  return (void *)(intptr_t)zccCommDestroy(c);
}

static zccComm_t new_comm1(void) {
  zccUniqueId id;
  zccComm_t c = NULL;
  OK(zccGetUniqueId(&id));
  watch("zt_comm_init_host(1 rank)");
  zccResult_t rc = zt_comm_init_host(&c, 1, &id, 0);
  alarm(0);
  if (rc != zccSuccess) {
    zt_fail("1-rank host communicator: expected zccSuccess, got %s: \"%s\"",
            zt_rc_name(rc), zccGetLastError(NULL));
    return NULL;
  }
  return c;
}

int main(void) {
  static const char *launcher_vars[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
      "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "ZCC_COMM_ID", "ZCC_COMM_SECRET"};
  for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++)
    unsetenv(launcher_vars[i]);
  setenv("ZCC_TIMEOUT", "54321", 1);
  setenv("ZCC_DEVICE", "host", 1);
  zt_setenv_default("ZCC_INIT_TIMEOUT", "10000");
  signal(SIGALRM, on_alarm);
  zt_setup("test_bad_input");

  test_strings_and_version();
  test_params();
  test_init_args();
  test_memalloc();

  zccComm_t c = new_comm1();
  if (c) {
    test_queries(c);
    test_coll_args(c, 1);
    test_register(c);
    test_group(c);
    test_split(c);
    /* Still usable after every failed call. */
    float in[5] = {1, -2, 3.5f, 0, 7}, out[5] = {0};
    OK(zccAllReduce(in, out, 5, zccFloat, zccSum, c, NULL));
    ZT_CHECK(memcmp(in, out, sizeof(in)) == 0,
             "1-rank allreduce after the failed calls: expected {1,-2,3.5,0,7}, got "
             "{%g,%g,%g,%g,%g}", out[0], out[1], out[2], out[3], out[4]);
    zccResult_t e = zccInternalError;
    OK(zccCommGetAsyncError(c, &e));
    ZT_CHECK(e == zccSuccess, "bad arguments must not set the async error: got %s",
             zt_rc_name(e));
    OK(zccCommDestroy(c));
  }

  zccComm_t comms[2] = {NULL, NULL};
  watch("zccCommInitAll(2)");
  zccResult_t rc = zccCommInitAll(comms, 2, NULL);
  alarm(0);
  if (zt_expect_rc(zccSuccess, rc, "zccCommInitAll(comms, 2, NULL) with ZCC_DEVICE=host",
                   __FILE__, __LINE__)) {
    int v = -1;
    OK(zccCommCount(comms[1], &v));
    ZT_CHECK(v == 2, "zccCommInitAll(2): expected count 2, got %d", v);
    OK(zccCommUserRank(comms[1], &v));
    ZT_CHECK(v == 1, "zccCommInitAll(2): comms[1]: expected rank 1, got %d", v);
    test_coll_args(comms[0], 2);
    pthread_t th[2];
    watch("zccCommDestroy of the two zccCommInitAll communicators");
    for (int i = 0; i < 2; i++)
      pthread_create(&th[i], NULL, destroy_thread, comms[i]);
    for (int i = 0; i < 2; i++) {
      void *ret;
      pthread_join(th[i], &ret);
      zt_expect_rc(zccSuccess, (zccResult_t)(intptr_t)ret, "zccCommDestroy(InitAll comm)",
                   __FILE__, __LINE__);
    }
    alarm(0);
  }

  zccComm_t d = new_comm1();
  if (d) {
    OK(zccCommDestroy(d));
    test_dead_handle(d, "destroyed");
  }
  zccComm_t a = new_comm1();
  if (a) {
    OK(zccCommAbort(a));
    test_dead_handle(a, "aborted");
  }
  return zt_finish();
}
