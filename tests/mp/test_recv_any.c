/*
 * zccRecvAny on host communicators, over shared memory and over sockets
 * (ZCC_SHM_DISABLE=1), each in its own runner process:
 *   order    4 ranks; rank 2 sends first, alone: rank 0's first receive
 *            from any source must name rank 2 and hold its data; ranks 1
 *            and 3 then send together, and the next two receives name each
 *            once, with their data. Messages span several shm slots. An
 *            allreduce afterwards (once rank 0 took all three: see zcc.h)
 *            is exact (the streams stayed in step),
 *            and a plain zccRecv still pairs with zccSend.
 *   bad      refused with the right code, *peer left alone: NULL peer,
 *            NULL buffer, count 0, bad datatype, NULL comm, inside a group,
 *            a communicator of one rank.
 *   timeout  2 ranks, nobody sends: zccTimeout after ZCC_TIMEOUT (500 ms).
 *   dead     3 ranks, rank 2 exits without sending: zccRemoteError.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "zcc.h"

#define COUNT 300001 /* floats: 1.2 MB, several 128 KiB shm slots, odd */
#define TIMEOUT_MS 500
#define SENTINEL (-77)

typedef struct {
  atomic_int stage; /* order: 1 once rank 0 took the first message, 2 all */
  atomic_int done;
} shared_t;

static shared_t *sh;
static const char *transport = "shm";

static float *filled(size_t n, float v) {
  float *b = malloc(n * sizeof(float));
  if (!b) {
    zt_fail("out of memory");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) b[i] = v;
  return b;
}

/* How many of b's n floats differ from v (first index in *where). */
static size_t wrong(const float *b, size_t n, float v, size_t *where) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (b[i] != v && bad++ == 0) *where = i;
  return bad;
}

static int init(zccComm_t *comm, int rank, int nranks, const zccUniqueId *id) {
  zccResult_t rc = zt_comm_init_host(comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("init: expected zccSuccess, got %s: \"%s\"", zt_rc_name(rc),
            zccGetLastError(NULL));
    return 1;
  }
  return 0;
}

/* ---- order ---- */

static void expect_from(zccComm_t comm, float *buf, int want_peer, const char *what) {
  int peer = SENTINEL;
  memset(buf, 0, COUNT * sizeof(float));
  zccResult_t rc = zccRecvAny(buf, COUNT, zccFloat, &peer, comm, NULL);
  ZT_EXPECT_RC(zccSuccess, rc);
  if (want_peer >= 0)
    ZT_CHECK(peer == want_peer, "%s: zccRecvAny named rank %d, expected %d", what, peer,
             want_peer);
  else
    ZT_CHECK(peer >= 1 && peer <= 3, "%s: zccRecvAny named rank %d, expected 1..3", what,
             peer);
  size_t at = 0, bad = peer >= 0 ? wrong(buf, COUNT, (float)peer, &at) : COUNT;
  ZT_CHECK(bad == 0, "%s: %zu of %d floats differ from rank %d's value (first at %zu: %g)",
           what, bad, COUNT, peer, at, (double)buf[at]);
}

static int order_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zccComm_t comm;
  zt_set_tag("[%s order rank %d]", transport, rank);
  if (init(&comm, rank, nranks, id)) return 1;
  float *buf = filled(COUNT, (float)rank);
  if (rank == 0) {
    expect_from(comm, buf, 2, "first message");
    atomic_store(&sh->stage, 1);
    int seen[4] = {0};
    for (int k = 0; k < 2; k++) {
      int peer = SENTINEL;
      ZT_EXPECT_RC(zccSuccess, zccRecvAny(buf, COUNT, zccFloat, &peer, comm, NULL));
      size_t at = 0, bad = peer >= 0 && peer < 4 ? wrong(buf, COUNT, (float)peer, &at) : 1;
      ZT_CHECK(bad == 0, "receive %d from any: rank %d's data wrong (%zu floats)", k, peer,
               bad);
      if (peer >= 0 && peer < 4) seen[peer]++;
    }
    ZT_CHECK(seen[1] == 1 && seen[3] == 1,
             "ranks 1 and 3 sent once each; zccRecvAny named rank 1 %d times, rank 3 %d times",
             seen[1], seen[3]);
  } else if (rank == 2) {
    ZT_EXPECT_RC(zccSuccess, zccSend(buf, COUNT, zccFloat, 0, comm, NULL));
  } else {
    double t0 = zt_now();
    while (!atomic_load(&sh->stage) && zt_now() - t0 < 60) zt_sleep(0.001);
    ZT_EXPECT_RC(zccSuccess, zccSend(buf, COUNT, zccFloat, 0, comm, NULL));
  }
  /* No rank may send rank 0 anything else while it waits: the allreduce
     waits for its receives. */
  if (rank == 0) {
    atomic_store(&sh->stage, 2);
  } else {
    double t0 = zt_now();
    while (atomic_load(&sh->stage) < 2 && zt_now() - t0 < 60) zt_sleep(0.001);
  }
  /* The streams are still in step: an exact allreduce (0+1+2+3 = 6). */
  float *ar = filled(1000, (float)rank);
  ZT_EXPECT_RC(zccSuccess, zccAllReduce(ar, ar, 1000, zccFloat, zccSum, comm, NULL));
  size_t at = 0, bad = wrong(ar, 1000, 6.0f, &at);
  ZT_CHECK(bad == 0, "allreduce after receives from any: %zu wrong (first %g)", bad,
           (double)ar[at]);
  /* A plain receive still pairs with a send: rank 3 to rank 1. */
  if (rank == 3) ZT_EXPECT_RC(zccSuccess, zccSend(ar, 1000, zccFloat, 1, comm, NULL));
  if (rank == 1) {
    for (int i = 0; i < 1000; i++) ar[i] = 0;
    ZT_EXPECT_RC(zccSuccess, zccRecv(ar, 1000, zccFloat, 3, comm, NULL));
    bad = wrong(ar, 1000, 6.0f, &at);
    ZT_CHECK(bad == 0, "zccRecv after zccRecvAny: %zu wrong", bad);
  }
  free(ar);
  free(buf);
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  return 0;
}

/* ---- bad input ---- */

static void expect_refused(zccResult_t want, zccResult_t rc, int peer, const char *what,
                           const char *words) {
  const char *le = zccGetLastError(NULL);
  ZT_CHECK(rc == want, "%s: expected %s, got %s", what, zt_rc_name(want), zt_rc_name(rc));
  ZT_CHECK(peer == SENTINEL, "%s: *peer written (%d) on failure", what, peer);
  ZT_CHECK(le && strstr(le, words), "%s: last error \"%s\" does not say \"%s\"", what,
           le ? le : "(null)", words);
}

static int bad_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zccComm_t comm;
  zt_set_tag("[%s bad rank %d]", transport, rank);
  if (init(&comm, rank, nranks, id)) return 1;
  if (rank == 0) {
    float buf[4];
    int peer = SENTINEL;
    expect_refused(zccInvalidArgument, zccRecvAny(buf, 4, zccFloat, NULL, comm, NULL),
                   SENTINEL, "NULL peer", "peer is NULL");
    expect_refused(zccInvalidArgument, zccRecvAny(NULL, 4, zccFloat, &peer, comm, NULL),
                   peer, "NULL buffer", "recvbuff is NULL");
    expect_refused(zccInvalidArgument, zccRecvAny(buf, 0, zccFloat, &peer, comm, NULL), peer,
                   "count 0", "count is 0");
    expect_refused(zccInvalidArgument,
                   zccRecvAny(buf, 4, (zccDataType_t)99, &peer, comm, NULL), peer,
                   "datatype 99", "not a zccDataType_t");
    expect_refused(zccInvalidArgument, zccRecvAny(buf, 4, zccFloat, &peer, NULL, NULL), peer,
                   "NULL comm", "comm is NULL");
    ZT_EXPECT_RC(zccSuccess, zccGroupStart());
    expect_refused(zccInvalidUsage, zccRecvAny(buf, 4, zccFloat, &peer, comm, NULL), peer,
                   "inside a group", "inside a group");
    ZT_EXPECT_RC(zccSuccess, zccGroupEnd());
    /* Still usable after all that. */
    ZT_EXPECT_RC(zccSuccess, zccAllReduce(buf, buf, 4, zccFloat, zccSum, comm, NULL));
    zccUniqueId one;
    zccComm_t solo;
    if (zt_expect_rc(zccSuccess, zccGetUniqueId(&one), "zccGetUniqueId", __FILE__,
                     __LINE__) &&
        !init(&solo, 0, 1, &one)) {
      expect_refused(zccInvalidUsage, zccRecvAny(buf, 4, zccFloat, &peer, solo, NULL), peer,
                     "one rank", "no other rank");
      ZT_EXPECT_RC(zccSuccess, zccCommDestroy(solo));
    }
  } else {
    float buf[4] = {0};
    ZT_EXPECT_RC(zccSuccess, zccAllReduce(buf, buf, 4, zccFloat, zccSum, comm, NULL));
  }
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  return 0;
}

/* ---- timeout ---- */

static int timeout_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zccComm_t comm;
  char tmo[16];
  snprintf(tmo, sizeof(tmo), "%d", TIMEOUT_MS);
  setenv("ZCC_TIMEOUT", tmo, 1);
  zt_set_tag("[%s timeout rank %d]", transport, rank);
  if (init(&comm, rank, nranks, id)) return 1;
  if (rank == 0) {
    float buf[4];
    int peer = SENTINEL;
    double t0 = zt_now();
    zccResult_t rc = zccRecvAny(buf, 4, zccFloat, &peer, comm, NULL);
    double dt = zt_now() - t0;
    expect_refused(zccTimeout, rc, peer, "nobody sends", "no message from any rank");
    ZT_CHECK(dt >= TIMEOUT_MS / 1000.0 * 0.9 && dt <= TIMEOUT_MS / 1000.0 + 2.0,
             "zccRecvAny gave up after %.2f s; ZCC_TIMEOUT is %d ms", dt, TIMEOUT_MS);
    atomic_store(&sh->done, 1);
  } else {
    double t0 = zt_now();
    while (!atomic_load(&sh->done) && zt_now() - t0 < 30) zt_sleep(0.01);
  }
  zccCommDestroy(comm); /* the communicator is in error state: either result */
  return 0;
}

/* ---- dead peer ---- */

static int dead_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zccComm_t comm;
  setenv("ZCC_TIMEOUT", "20000", 1);
  zt_set_tag("[%s dead rank %d]", transport, rank);
  if (init(&comm, rank, nranks, id)) return 1;
  if (rank == 2) _exit(0); /* gone without a word */
  if (rank == 0) {
    float buf[4];
    int peer = SENTINEL;
    double t0 = zt_now();
    zccResult_t rc = zccRecvAny(buf, 4, zccFloat, &peer, comm, NULL);
    double dt = zt_now() - t0;
    ZT_CHECK(rc == zccRemoteError, "a peer died: expected zccRemoteError, got %s: \"%s\"",
             zt_rc_name(rc), zccGetLastError(NULL));
    ZT_CHECK(peer == SENTINEL, "*peer written (%d) on failure", peer);
    ZT_CHECK(dt < 10, "zccRecvAny took %.1f s to see a dead peer", dt);
    atomic_store(&sh->done, 1);
  } else {
    double t0 = zt_now();
    while (!atomic_load(&sh->done) && zt_now() - t0 < 30) zt_sleep(0.01);
  }
  zccCommDestroy(comm);
  return 0;
}

/* ---- driver ---- */

typedef struct {
  const char *name;
  int nranks;
  zt_rank_fn fn;
} subtest_t;

static void run(const subtest_t *t) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, t->nranks, t->fn, NULL) != 0) return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__))
    zt_release(&g, &id);
  zt_wait_all(&g, 120, t->name);
}

int main(void) {
  static const subtest_t tests[] = {
      {"order", 4, order_rank},
      {"bad", 2, bad_rank},
      {"timeout", 2, timeout_rank},
      {"dead", 3, dead_rank},
  };
  static const char *transports[] = {"shm", "socket"};
  zt_setup("test_recv_any");
  sh = zt_shared_alloc(sizeof(*sh));
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
      memset(sh, 0, sizeof(*sh));
      printf("test_recv_any: --- %s over %s\n", tests[i].name, transports[k]);
      fflush(NULL);
      /* A runner per case: zcc reads ZCC_SHM_DISABLE once per process. */
      pid_t pid = fork();
      if (pid == 0) {
        transport = transports[k];
        setenv("ZCC_SHM_DISABLE", k ? "1" : "0", 1);
        run(&tests[i]);
        fflush(NULL);
        _exit(0);
      }
      int st = 0;
      if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        zt_fail("%s over %s: runner ended with status 0x%x", tests[i].name, transports[k],
                st);
    }
  }
  return zt_finish();
}
