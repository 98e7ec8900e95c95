/*
 * The fault matrix on host communicators: every case runs over shared
 * memory and over sockets (ZCC_SHM_DISABLE=1), each in its own runner
 * process (zcc reads its parameters once per process), with 2 to 4 forked
 * ranks. Each case asserts the error code, the time to the error, that
 * the survivors destroy cleanly, and that they then build a new
 * communicator that computes an exact allreduce.
 *
 *   mismatch-*  two ranks make different calls (count, datatype, op, root,
 *               collective, send/recv size): zccInvalidUsage within 2 s on
 *               each rank, at that call or at the next one at the latest,
 *               with a message naming both calls; no call returns
 *               zccSuccess with data from another call.
 *   stale       rank 0 times out in an allreduce (ZCC_TIMEOUT 500 ms)
 *               while rank 1 sleeps; rank 1's late allreduce must fail,
 *               not sum rank 0's stale bytes; both stay in error with the
 *               original cause on the next call.
 *   zombie      3 ranks (zombie4: 4); the last SIGKILLs itself mid-allreduce
 *               and is not reaped until the survivors are done: they fail
 *               with zccRemoteError within 2 s although ZCC_TIMEOUT is 60 s.
 *   initdeath   3 ranks; rank 2 is SIGKILLed 0-40 ms after the ranks get the id
 *               (in the rendezvous, in connecting, or after init), and not
 *               reaped until the others are done; they fail in init or in
 *               the next allreduce within ZCC_INIT_TIMEOUT (2 s) + 2 s,
 *               although ZCC_CONNECT_TIMEOUT and ZCC_TIMEOUT are 60 s.
 *   strangers   1000 silent connections on every listening port of both ranks
 *               (bootstrap listeners, and the socket transport's), then a
 *               split; and 1000 on a new id's root, then an init; and 1000
 *               on each port a new communicator opens while it connects
 *               (its socket transport's listener among them; rank 1's
 *               connect calls wait 500 ms each, an interposed connect(2),
 *               so that they land first): each takes under 1 s (the issue's
 *               target is 100 ms over the same step without strangers;
 *               the times are printed as figures).
 *   sigstop     rank 1 stops itself (SIGSTOP) between allreduces: rank 0's
 *               next one is zccTimeout within ZCC_TIMEOUT (1 s) + 2 s.
 *   cycles      200 (ZCC_TEST_CYCLES) split/allreduce/destroy cycles on both ranks leave the
 *               open descriptors, the threads and the /dev/shm entries
 *               as they were.
 *   threads     a second thread's call on a communicator with a call in
 *               flight is refused at once (zccInvalidUsage) and changes
 *               nothing: the first call and the next ones are exact.
 *   split       one rank passes color -5 to zccCommSplit: every rank fails
 *               within 2 s, and a valid split and the parent still work.
 *   destroy     zccCommDestroy from another thread while an allreduce is
 *               blocked returns within 2 s; the blocked call fails; the
 *               peer's next call fails within 2 s.
 *   fullcheck   ZCC_CHECK_MODE=full: broadcast roots 0 and 1 fail on both
 *               ranks at that very call, naming both; the communicator stays
 *               usable (nobody ran it).
 *   group       zccCommDestroy inside an open group with an operation
 *               queued is refused; zccCommAbort drops it and returns; the
 *               peer fails within 2 s.
 *   relay       after an allreduce rank 1 aborts; rank 2's receive from it
 *               fails (zccRemoteError within 2 s) while the others are busy
 *               elsewhere for 1 s and never ask for rank 2's failure record:
 *               rank 2's destroy takes under 0.5 s (the record's 200 ms
 *               deadline, not ZCC_NET_LINGER_MS), and the others' next
 *               allreduce fails within 2 s.
 *   cause       after an allreduce rank 2 receives more from rank 1 than it
 *               sends (zccInvalidUsage naming both sizes) and holds its
 *               communicator 1.5 s; rank 0 (and 3), in a receive from rank
 *               1 that never comes, fails within 0.5 s with rank 2's cause
 *               (its failure record, asked for while the wait drags on),
 *               not at rank 1's close.
 *   abortrace   4 ranks run allreduce, split, a group of sends and receives
 *               and broadcast in turn; 0-35 ms in, a second thread of rank 1
 *               calls zccCommAbort, wherever rank 1 is: the abort returns
 *               within 2 s, rank 1's call in flight fails within 2 s of it
 *               and its next call finds the communicator gone, the other
 *               ranks fail with zccRemoteError within 2 s, every call that
 *               succeeded was exact, and all build a new communicator.
 *
 * Every case of fewer ranks runs again at 4 (named with a 4: mismatch4,
 * stale4, zombie4, ...), where one rank's fault reaches the others through
 * their peers.
 *
 * ZCC_TEST_FAULTS=mismatch,stale,... runs a subset; ZCC_TEST_TRANSPORTS=shm
 * or socket one transport. Lines starting "figure:" are the measured times
 * (docs/reliability.md).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "zcc.h"

#define LIMIT_S 2.0 /* the bound on every time to error */

typedef struct {
  pid_t pids[ZT_MAX_RANKS];
  atomic_int flooded;
  zt_barrier_t bar;
  zt_barrier_t bar2;
  zccUniqueId id2; /* the survivors' new communicator */
  atomic_int id2_ready;
  zccUniqueId id3; /* strangers: a communicator flooded while it connects */
  atomic_int id3_ready;
  atomic_int flag;
  double mark;
  int kind; /* the case's variant */
  int nranks; /* the case's */
  char transport[16];
} shared_t;

static shared_t *sh;

static void figure(const char *what, double seconds, zccResult_t rc) {
  zt_log("figure: %s %s %d ranks %.3f s %s", what, sh->transport, sh->nranks, seconds,
         zt_rc_name(rc));
}

/* The case's communicator (NULL after a failure, reported). */
static zccComm_t case_init(int rank, int nranks, const zccUniqueId *id) {
  zccComm_t comm = NULL;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("init: %s: %s", zt_rc_name(rc), zccGetLastError(NULL));
    return NULL;
  }
  return comm;
}

/* Destroy (within 2 s) and build a new communicator of the survivors. */
static void destroy_and_rebuild(zccComm_t comm, int idx, int nsurv, const char *what) {
  if (comm) {
    double t0 = zt_now();
    zccResult_t rc = zccCommDestroy(comm);
    double dt = zt_now() - t0;
    ZT_CHECK(rc == zccSuccess, "%s: destroy returned %s: %s", what, zt_rc_name(rc),
             zccGetLastError(NULL));
    ZT_CHECK(dt < LIMIT_S, "%s: destroy took %.2f s", what, dt);
  }
  if (idx == 0) {
    if (!ZT_EXPECT_RC(zccSuccess, zccGetUniqueId(&sh->id2))) return;
    atomic_store(&sh->id2_ready, 1);
  } else {
    double t0 = zt_now();
    while (!atomic_load(&sh->id2_ready))
      if (zt_now() - t0 > 20) {
        zt_fail("%s: no id for the new communicator after 20 s", what);
        return;
      } else
        zt_sleep(0.001);
  }
  zccComm_t fresh = NULL;
  zccResult_t rc = zt_comm_init_host(&fresh, nsurv, &sh->id2, idx);
  ZT_CHECK(rc == zccSuccess, "%s: a new communicator after the fault: %s: %s", what,
           zt_rc_name(rc), zccGetLastError(NULL));
  if (rc != zccSuccess) return;
  float v[4] = {1, 2, 3, (float)idx}, out[4];
  rc = zccAllReduce(v, out, 4, zccFloat, zccSum, fresh, NULL);
  float last = (float)(nsurv * (nsurv - 1) / 2);
  ZT_CHECK(rc == zccSuccess && out[0] == nsurv && out[2] == 3 * nsurv && out[3] == last,
           "%s: allreduce on the new communicator: %s, got %g %g %g %g", what, zt_rc_name(rc),
           out[0], out[1], out[2], out[3]);
  ZT_CHECK(zccCommDestroy(fresh) == zccSuccess, "%s: destroy of the new communicator", what);
}

/* ---- mismatch ---- */

enum { MM_COUNT, MM_TYPE, MM_OP, MM_ROOT, MM_COLL, MM_P2P, MM_KINDS };
static const char *mm_names[] = {"count", "datatype", "op", "root", "collective", "p2p-size"};
/* Parts of the messages each kind must show (both calls named). */
static const char *mm_expect[][2] = {
    {"count=1000", "count=2000"},        {"float32", "int32"},
    {"sum", "max"},                      {"broadcast(root=0", "broadcast(root=1"},
    {"allreduce(", "allgather("},        {"4000 bytes", "8000 bytes"},
};

#define MM_N 2000

static zccResult_t mm_call(int kind, int rank, int nranks, zccComm_t comm, float *a, float *b) {
  switch (kind) {
  case MM_COUNT:
    return zccAllReduce(a, b, rank ? 2000 : 1000, zccFloat, zccSum, comm, NULL);
  case MM_TYPE:
    return zccAllReduce(a, b, 1000, rank ? zccInt32 : zccFloat, zccSum, comm, NULL);
  case MM_OP:
    return zccAllReduce(a, b, 1000, zccFloat, rank ? zccMax : zccSum, comm, NULL);
  case MM_ROOT:
    return zccBroadcast(a, b, 1000, zccFloat, rank, comm, NULL);
  case MM_COLL:
    return rank ? zccAllGather(a, b, 500, zccFloat, comm, NULL)
                : zccAllReduce(a, b, 1000, zccFloat, zccSum, comm, NULL);
  default:
    /* ranks 0 and 1 disagree; with 4 ranks, 2 and 3 agree (only 0 and 1 see it) */
    if (rank >= 2) {
      int peer = rank ^ 1;
      if (peer >= nranks) return zccSuccess;
      return rank == 2 ? zccSend(a, 1000, zccFloat, peer, comm, NULL)
                       : zccRecv(b, 1000, zccFloat, peer, comm, NULL);
    }
    return rank ? zccRecv(b, 2000, zccFloat, 0, comm, NULL)
                : zccSend(a, 1000, zccFloat, 1, comm, NULL);
  }
}

static int mismatch_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  int kind = sh->kind;
  zt_set_tag("[mismatch-%s %s rank %d]", mm_names[kind], sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float *a = malloc(MM_N * sizeof(float)), *b = malloc(MM_N * sizeof(float));
  for (int i = 0; i < MM_N; i++) a[i] = (float)(rank + 1);
  /* In step first: one exact allreduce. */
  float one = 1, sum = 0;
  ZT_EXPECT_RC(zccSuccess, zccAllReduce(&one, &sum, 1, zccFloat, zccSum, comm, NULL));
  double t0 = zt_now();
  rc = mm_call(kind, rank, nranks, comm, a, b);
  double t1 = zt_now();
  char msg[1024];
  snprintf(msg, sizeof(msg), "%s", zccGetLastError(comm));
  zccResult_t rc2 = zccSuccess;
  float v[8], out[8];
  if (rc == zccSuccess) {
    /* Not seen here (only the sender's bytes differ): the next call sees them. */
    for (int i = 0; i < 8; i++) v[i] = (float)(rank + 1);
    rc2 = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
    if (rc2 != zccSuccess) snprintf(msg, sizeof(msg), "%s", zccGetLastError(comm));
    else
      zt_fail("the allreduce after a mismatched %s call returned zccSuccess (%g, expected 3)",
              mm_names[kind], out[0]);
  }
  zccResult_t first = rc != zccSuccess ? rc : rc2;
  double dt = zt_now() - t0;
  figure(mm_names[kind], dt, first);
  zt_log("%s after %.3f s (%s): \"%s\"", zt_rc_name(first), dt,
         rc != zccSuccess ? "at the mismatched call" : "at the next call", msg);
  /*
   * Rank 0 and rank 1 made different calls and see it. With more ranks,
   * one whose peers all made its own call may learn of it only as their
   * error (zccRemoteError); one that sees a difference names both calls.
   */
  int sees = nranks == 2 || rank < 2 || first == zccInvalidUsage;
  ZT_CHECK(first == (sees ? zccInvalidUsage : zccRemoteError),
           "mismatched %s: expected %s, got %s", mm_names[kind],
           sees ? "zccInvalidUsage" : "zccRemoteError", zt_rc_name(first));
  ZT_CHECK(dt < LIMIT_S, "mismatched %s: error after %.2f s", mm_names[kind], dt);
  if (sees && kind == MM_ROOT && nranks > 2) {
    /* every rank broadcast from a root of its own: two different roots named */
    const char *r1 = strstr(msg, "broadcast(root="), *r2 = r1 ? strstr(r1 + 1, "broadcast(root=") : NULL;
    ZT_CHECK(r1 && r2 && atoi(r1 + 15) != atoi(r2 + 15),
             "mismatched root: the message must name two calls with different roots: \"%s\"",
             msg);
  } else if (sees) {
    ZT_CHECK(strstr(msg, mm_expect[kind][0]) && strstr(msg, mm_expect[kind][1]),
             "mismatched %s: the message must name both calls (\"%s\", \"%s\"): \"%s\"",
             mm_names[kind], mm_expect[kind][0], mm_expect[kind][1], msg);
  }
  (void)t1;
  /* Sticky: the next call fails with the same cause, at once. */
  t0 = zt_now();
  rc = zccAllReduce(&one, &sum, 1, zccFloat, zccSum, comm, NULL);
  ZT_CHECK(rc == first && zt_now() - t0 < 0.1 &&
               strstr(zccGetLastError(comm), "error state"),
           "after the mismatch: expected %s at once (error state), got %s: %s",
           zt_rc_name(first), zt_rc_name(rc), zccGetLastError(comm));
  free(a);
  free(b);
  destroy_and_rebuild(comm, rank, nranks, "mismatch");
  return 0;
}

/* ---- fullcheck: the agreement step ---- */

static int fullcheck_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[fullcheck %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float a[1000], b[1000];
  for (int i = 0; i < 1000; i++) a[i] = (float)rank;
  double t0 = zt_now();
  rc = zccBroadcast(a, b, 1000, zccFloat, rank, comm, NULL);
  double dt = zt_now() - t0;
  const char *msg = zccGetLastError(comm);
  figure("fullcheck-root", dt, rc);
  zt_log("broadcast roots 0/1 with ZCC_CHECK_MODE=full: %s after %.4f s: \"%s\"",
         zt_rc_name(rc), dt, msg);
  /* every rank broadcasts from a root of its own: each names its call and another */
  char mine[32];
  snprintf(mine, sizeof(mine), "broadcast(root=%d", rank);
  const char *other = strstr(msg, "broadcast(root=");
  if (other && strncmp(other, mine, strlen(mine)) == 0) other = strstr(other + 1, "broadcast(root=");
  ZT_CHECK(rc == zccInvalidUsage && dt < LIMIT_S && strstr(msg, mine) && other,
           "expected zccInvalidUsage naming both calls at the call, got %s after %.2f s: %s",
           zt_rc_name(rc), dt, msg);
  float v = 1, s = 0;
  rc = zccAllReduce(&v, &s, 1, zccFloat, zccSum, comm, NULL);
  ZT_CHECK(rc == zccSuccess && s == nranks,
           "the communicator after a refused call: %s, %g (expected %d)", zt_rc_name(rc), s,
           nranks);
  destroy_and_rebuild(comm, rank, nranks, "fullcheck");
  return 0;
}

/* ---- stale: a peer's timed-out call is not summed by a late partner ---- */

static int stale_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[stale %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float v[8], out[8];
  for (int i = 0; i < 8; i++) v[i] = rank ? 7.0f : 1.0f;
  double t0;
  if (rank == 0) {
    t0 = zt_now();
    rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
    double dt = zt_now() - t0;
    figure("stale-timeout", dt, rc);
    ZT_CHECK(rc == zccTimeout && dt < 0.5 + LIMIT_S,
             "rank 0 alone: expected zccTimeout within 0.5 + 2 s, got %s after %.2f s",
             zt_rc_name(rc), dt);
  } else {
    zt_sleep(1.5);
    t0 = zt_now();
    rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
    double dt = zt_now() - t0;
    figure("stale-late-partner", dt, rc);
    zt_log("late allreduce: %s after %.3f s: \"%s\"", zt_rc_name(rc), dt,
           zccGetLastError(comm));
    ZT_CHECK(rc == zccRemoteError,
             "the late partner of a timed-out allreduce: expected zccRemoteError, got %s "
             "(result %g: 8 is rank 0's stale bytes)", zt_rc_name(rc), out[0]);
    ZT_CHECK(dt < LIMIT_S, "late partner: error after %.2f s", dt);
  }
  zccResult_t first = rc;
  char cause[1024];
  snprintf(cause, sizeof(cause), "%s", zccGetLastError(comm));
  rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
  const char *again = zccGetLastError(comm);
  ZT_CHECK(rc == first && strstr(again, "error state") &&
               strstr(again, rank ? "gave up" : "ZCC_TIMEOUT"),
           "the next call: expected %s with the original cause, got %s: \"%s\" (first: \"%s\")",
           zt_rc_name(first), zt_rc_name(rc), again, cause);
  zccResult_t async = zccSuccess;
  ZT_CHECK(zccCommGetAsyncError(comm, &async) == zccSuccess && async == first,
           "zccCommGetAsyncError: expected %s, got %s", zt_rc_name(first), zt_rc_name(async));
  destroy_and_rebuild(comm, rank, nranks, "stale");
  return 0;
}

/* ---- zombie: a dead, unreaped rank ---- */

static int zombie_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[zombie %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  static float v[1 << 16], out[1 << 16];
  for (int i = 0; i < (1 << 16); i++) v[i] = 1;
  ZT_EXPECT_RC(zccSuccess, zccAllReduce(v, out, 1 << 16, zccFloat, zccSum, comm, NULL));
  if (rank == nranks - 1) {
    zt_sleep(0.3);
    sh->mark = zt_now();
    raise(SIGKILL);
  }
  rc = zccAllReduce(v, out, 1 << 16, zccFloat, zccSum, comm, NULL);
  double dt = zt_now() - sh->mark;
  figure(nranks > 3 ? "zombie-4-ranks" : "zombie", dt, rc);
  zt_log("allreduce with a zombie peer: %s %.3f s after the kill: \"%s\"", zt_rc_name(rc), dt,
         zccGetLastError(comm));
  ZT_CHECK(rc == zccRemoteError, "expected zccRemoteError, got %s", zt_rc_name(rc));
  ZT_CHECK(sh->mark > 0 && dt < LIMIT_S, "error %.2f s after the kill (ZCC_TIMEOUT is 60 s)",
           dt);
  /* Survivors may have to wait for each other's errors before a new comm. */
  destroy_and_rebuild(comm, rank, nranks - 1, "zombie");
  return 0;
}

/* ---- initdeath: a rank killed while the others initialise ---- */

static const int initdeath_ms[] = {0, 3, 4, 5, 6, 8, 12, 40};
#define INITDEATH_KINDS ((int)(sizeof(initdeath_ms) / sizeof(initdeath_ms[0])))

static int initdeath_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[initdeath+%dms %s rank %d]", initdeath_ms[sh->kind], sh->transport, rank);
  zccComm_t comm = NULL;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  const char *where = "init";
  float v[64], out[64];
  for (int i = 0; i < 64; i++) v[i] = 1;
  if (rank == nranks - 1) {
    while (rc == zccSuccess) rc = zccAllReduce(v, out, 64, zccFloat, zccSum, comm, NULL);
    zt_sleep(30); /* the runner kills it before */
    return 0;
  }
  if (rc == zccSuccess) {
    where = "allreduce";
    /* Wait for the kill, so that the error below is the death's. */
    double t0 = zt_now();
    while (sh->mark == 0 && zt_now() - t0 < 10) zt_sleep(0.001);
    /* The victim may have sent its part of the first one before it died:
       then that one completes, exact; a later one must fail. */
    for (int k = 0; k < 3; k++) {
      out[0] = out[63] = 0;
      rc = zccAllReduce(v, out, 64, zccFloat, zccSum, comm, NULL);
      if (rc != zccSuccess) break;
      ZT_CHECK(out[0] == nranks && out[63] == nranks,
               "an allreduce that succeeded after the kill: %g, expected %d (exact)", out[0],
               nranks);
    }
  }
  double dt = zt_now() - sh->mark;
  char what[64];
  snprintf(what, sizeof(what), "initdeath-%dms-%s", initdeath_ms[sh->kind], where);
  figure(what, dt, rc);
  zt_log("%s: %s %.3f s after the kill: \"%s\"", where, zt_rc_name(rc), dt,
         zccGetLastError(comm));
  ZT_CHECK(rc == zccRemoteError || rc == zccTimeout,
           "%s with a rank killed in init: expected zccRemoteError or zccTimeout, got %s",
           where, zt_rc_name(rc));
  ZT_CHECK(dt < 2.0 + LIMIT_S, "%s: error %.2f s after the kill; expected < 4 s", where, dt);
  destroy_and_rebuild(comm, rank, nranks - 1, "initdeath");
  return 0;
}

/* ---- strangers: silent connections on every listening port ---- */

#define STRANGERS 1000

/* Listening TCP sockets of pid, from /proc. Returns how many (at most max). */
static int listening_addrs(pid_t pid, struct sockaddr_storage *out, socklen_t *lens, int max) {
  static unsigned long inodes[16384]; /* the floods' fds are in the process too */
  int ninodes = 0, n = 0;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && ninodes < 16384) {
    char link[PATH_MAX], target[128];
    snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = 0;
    unsigned long ino;
    if (sscanf(target, "socket:[%lu]", &ino) == 1) inodes[ninodes++] = ino;
  }
  closedir(d);
  snprintf(path, sizeof(path), "/proc/%d/net/tcp", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[512];
  if (!fgets(line, sizeof(line), f)) {
    fclose(f);
    return 0;
  }
  while (fgets(line, sizeof(line), f) && n < max) {
    unsigned ip, port, st;
    unsigned long ino;
    if (sscanf(line, "%*d: %x:%x %*s %x %*s %*s %*s %*s %*s %lu", &ip, &port, &st, &ino) != 4 ||
        st != 0x0A)
      continue;
    int mine = 0;
    for (int i = 0; i < ninodes; i++) mine |= inodes[i] == ino;
    if (!mine) continue;
    struct sockaddr_in *sin = (struct sockaddr_in *)&out[n];
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    sin->sin_addr.s_addr = ip ? ip : htonl(INADDR_LOOPBACK);
    lens[n++] = sizeof(*sin);
  }
  fclose(f);
  return n;
}

/* Open `count` connections to each listening port of pid that say nothing. */
static int flood(pid_t pid, int count, int *fds, int maxfds) {
  struct sockaddr_storage addrs[16];
  socklen_t lens[16];
  int na = listening_addrs(pid, addrs, lens, 16), n = 0;
  for (int a = 0; a < na; a++)
    for (int k = 0; k < count && n < maxfds; k++) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) break;
      if (connect(fd, (struct sockaddr *)&addrs[a], lens[a]) != 0 && errno != EINPROGRESS) {
        close(fd);
        continue;
      }
      fds[n++] = fd;
    }
  return n;
}

/*
 * connect(2) as libzcc calls it (this program's definition comes first):
 * while delay_connects is set, each waits CONNECT_DELAY_S before it goes
 * out, so that strangers reach a listener before the rank it waits for.
 */
#define CONNECT_DELAY_S 0.5
static atomic_int delay_connects, connect_delays;
int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  static int (*real)(int, const struct sockaddr *, socklen_t);
  if (!real) real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
  if (atomic_load(&delay_connects)) {
    atomic_fetch_add(&connect_delays, 1);
    zt_sleep(CONNECT_DELAY_S);
  }
  return real(fd, addr, len);
}

typedef struct {
  pid_t pid;
  struct sockaddr_storage known[16];
  socklen_t known_lens[16];
  int nknown, nports, nfds;
  atomic_int stop;
  int fds[4 * STRANGERS];
} flood_arg_t;

/* Until stopped (or 5 s): flood each listening port of pid not known yet. */
static void *flood_new_ports(void *arg) {
  flood_arg_t *fa = arg;
  double t0 = zt_now();
  while (!atomic_load(&fa->stop) && zt_now() - t0 < 5) {
    struct sockaddr_storage addrs[16];
    socklen_t lens[16];
    int na = listening_addrs(fa->pid, addrs, lens, 16);
    for (int a = 0; a < na && fa->nknown < 16; a++) {
      int seen = 0;
      for (int k = 0; k < fa->nknown; k++)
        seen |= memcmp(&fa->known[k], &addrs[a], lens[a]) == 0;
      if (seen) continue;
      fa->known[fa->nknown] = addrs[a];
      fa->known_lens[fa->nknown++] = lens[a];
      fa->nports++;
      for (int k = 0; k < STRANGERS && fa->nfds < 4 * STRANGERS; k++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) break;
        if (connect(fd, (struct sockaddr *)&addrs[a], lens[a]) != 0 && errno != EINPROGRESS) {
          close(fd);
          continue;
        }
        fa->fds[fa->nfds++] = fd;
      }
    }
    zt_sleep(0.002);
  }
  return NULL;
}

static int strangers_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[strangers %s rank %d]", sh->transport, rank);
  sh->pids[rank] = getpid();
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  static int fds[4 * STRANGERS * ZT_MAX_RANKS];
  int nfds = 0;
  if (nranks > 2 && getenv("ZCC_IBV_LIBRARY")) {
    /* The fake verbs provider listens on TCP ports of its own for each
       queue pair (a test tool; real queue pairs have none): 1000 strangers
       on each of 4 ranks' ports exceed the descriptor limit. The 2-rank
       case floods them. */
    if (rank == 0) zt_skip("strangers at 4 ranks: not over the fake verbs provider");
    zccCommDestroy(comm);
    return 0;
  }
  /* A split without strangers, for the baseline. */
  zccComm_t sub = NULL;
  double t0 = zt_now();
  rc = zccCommSplit(comm, 0, rank, &sub, NULL);
  double base = zt_now() - t0;
  ZT_CHECK(rc == zccSuccess, "split without strangers: %s", zt_rc_name(rc));
  if (sub) zccCommDestroy(sub);
  if (rank == 0) {
    for (int r = 0; r < nranks; r++)
      nfds += flood(sh->pids[r], STRANGERS, fds + nfds, (int)(sizeof(fds) / sizeof(fds[0])) - nfds);
    zt_log("%d silent connections on the ranks' listening ports", nfds);
    ZT_CHECK(nfds >= STRANGERS * nranks, "flood: only %d connections", nfds);
    zt_sleep(0.2); /* let them land in the listeners */
    atomic_store(&sh->flooded, 1);
  } else {
    double tw = zt_now();
    while (!atomic_load(&sh->flooded) && zt_now() - tw < 20) zt_sleep(0.001);
  }
  t0 = zt_now();
  rc = zccCommSplit(comm, 0, rank, &sub, NULL);
  double dt = zt_now() - t0;
  figure("strangers-split-baseline", base, zccSuccess);
  figure("strangers-split", dt, rc);
  ZT_CHECK(rc == zccSuccess && dt < 1.0,
           "split with %d strangers per port: %s after %.3f s (%.3f s without)", STRANGERS,
           zt_rc_name(rc), dt, base);
  if (rc == zccSuccess) {
    float v = 1, o = 0;
    rc = zccAllReduce(&v, &o, 1, zccFloat, zccSum, sub, NULL);
    ZT_CHECK(rc == zccSuccess && o == nranks, "allreduce on the split: %s %g", zt_rc_name(rc), o);
    zccCommDestroy(sub);
  }
  /* A new id whose root gets the strangers first. */
  if (rank == 0) {
    if (ZT_EXPECT_RC(zccSuccess, zccGetUniqueId(&sh->id2))) {
      nfds += flood(getpid(), STRANGERS, fds + nfds, (int)(sizeof(fds) / sizeof(fds[0])) - nfds);
      zt_sleep(0.2);
      atomic_store(&sh->id2_ready, 1);
    }
  } else {
    double tw = zt_now();
    while (!atomic_load(&sh->id2_ready) && zt_now() - tw < 20) zt_sleep(0.001);
  }
  zccComm_t c2 = NULL;
  t0 = zt_now();
  rc = zt_comm_init_host(&c2, nranks, &sh->id2, rank);
  dt = zt_now() - t0;
  figure("strangers-init", dt, rc);
  ZT_CHECK(rc == zccSuccess && dt < 1.0, "init with strangers at the root and every port: %s "
           "after %.3f s", zt_rc_name(rc), dt);
  if (c2) zccCommDestroy(c2);
  for (int i = 0; i < nfds; i++) close(fds[i]);
  nfds = 0;
  /* Strangers on the ports a new communicator opens, while it connects:
     rank 0 floods each new listening port of its own as it appears; rank
     1's connects go out 500 ms late, so that they are there before it. */
  if (getenv("ZCC_IBV_LIBRARY")) {
    /* The fake verbs provider carries its queue pairs over TCP ports that
       it opens as the communicator connects: a test tool, not hardened
       against strangers (real queue pairs have no port to flood). */
    if (rank == 0) zt_skip("strangers while connecting: not over the fake verbs provider");
    for (int i = 0; i < nfds; i++) close(fds[i]);
    zccCommDestroy(comm);
    return 0;
  }
  flood_arg_t fa = {.pid = getpid()};
  pthread_t flooder;
  int flooding = 0;
  if (rank == 0) {
    fa.nknown = listening_addrs(getpid(), fa.known, fa.known_lens, 16);
    if (ZT_EXPECT_RC(zccSuccess, zccGetUniqueId(&sh->id3))) {
      flooding = pthread_create(&flooder, NULL, flood_new_ports, &fa) == 0;
      atomic_store(&sh->id3_ready, 1);
    }
  } else {
    double tw = zt_now();
    while (!atomic_load(&sh->id3_ready) && zt_now() - tw < 20) zt_sleep(0.001);
    if (rank == 1) { /* the one that comes late (with 4 ranks, 2 and 3 do not) */
      atomic_store(&connect_delays, 0);
      atomic_store(&delay_connects, 1);
    }
  }
  zccComm_t c3 = NULL;
  t0 = zt_now();
  rc = zt_comm_init_host(&c3, nranks, &sh->id3, rank);
  dt = zt_now() - t0;
  if (rank == 1) {
    atomic_store(&delay_connects, 0);
    dt -= CONNECT_DELAY_S * atomic_load(&connect_delays);
  }
  if (flooding) {
    atomic_store(&fa.stop, 1);
    pthread_join(flooder, NULL);
    zt_log("%d silent connections on %d port(s) opened by the new communicator", fa.nfds,
           fa.nports);
    ZT_CHECK(fa.nports > 0, "found no new listening port to flood during init");
  }
  if (rank == 1) {
    figure("strangers-connect", dt, rc);
    ZT_CHECK(rc == zccSuccess && dt < 1.0, "init joining a communicator whose ports were "
             "flooded while it connected: %s after %.3f s (less %d connect delays)",
             zt_rc_name(rc), dt, atomic_load(&connect_delays));
  }
  if (rc == zccSuccess) {
    float v = 1, o = 0;
    rc = zccAllReduce(&v, &o, 1, zccFloat, zccSum, c3, NULL);
    ZT_CHECK(rc == zccSuccess && o == nranks, "allreduce on the flooded communicator: %s %g",
             zt_rc_name(rc), o);
    zccCommDestroy(c3);
  }
  for (int i = 0; i < fa.nfds; i++) close(fa.fds[i]);
  for (int i = 0; i < nfds; i++) close(fds[i]);
  zccCommDestroy(comm);
  return 0;
}

/* ---- sigstop: a stopped peer ---- */

static int sigstop_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[sigstop %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float v[16], out[16];
  for (int i = 0; i < 16; i++) v[i] = 1;
  ZT_EXPECT_RC(zccSuccess, zccAllReduce(v, out, 16, zccFloat, zccSum, comm, NULL));
  if (rank == 1) {
    sh->mark = zt_now();
    raise(SIGSTOP); /* the runner kills it once rank 0 is done */
    return 0;
  }
  double t0 = zt_now();
  while (sh->mark == 0 && zt_now() - t0 < 10) zt_sleep(0.001);
  t0 = zt_now();
  rc = zccAllReduce(v, out, 16, zccFloat, zccSum, comm, NULL);
  double dt = zt_now() - t0;
  figure(nranks > 2 ? "sigstop-4-ranks" : "sigstop", dt, rc);
  zt_log("allreduce with a stopped peer: %s after %.3f s: \"%s\"", zt_rc_name(rc), dt,
         zccGetLastError(comm));
  /* With more ranks, one whose own peers are running may hear of the
     timeout from a peer (zccRemoteError) before its own ZCC_TIMEOUT. */
  ZT_CHECK((rc == zccTimeout && dt >= 0.9 && dt < 1.0 + LIMIT_S) ||
               (nranks > 2 && rc == zccRemoteError && dt < 1.0 + LIMIT_S),
           "expected zccTimeout after ZCC_TIMEOUT (1 s) and within 3 s, got %s after %.2f s",
           zt_rc_name(rc), dt);
  destroy_and_rebuild(comm, rank ? rank - 1 : 0, nranks - 1, "sigstop");
  return 0;
}

/* ---- cycles: nothing leaks ---- */

static int count_dir(const char *path, const char *prefix) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && (!prefix || strncmp(e->d_name, prefix, strlen(prefix)) == 0)) n++;
  closedir(d);
  return n;
}

static void counts(int *fds, int *threads) {
  *fds = count_dir("/proc/self/fd", NULL);
  *threads = count_dir("/proc/self/task", NULL);
}

#define CYCLES 200

static int cycles_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[cycles %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  int fd0 = 0, th0 = 0, fd1 = 0, th1 = 0, shm0 = -1, shm1 = -1;
  double t0 = 0;
  const char *ce = getenv("ZCC_TEST_CYCLES"); /* more, for a long run */
  int ncycles = ce && atoi(ce) > 0 ? atoi(ce) : CYCLES;
  for (int c = 0; c < ncycles + 5; c++) {
    if (c == 5) { /* warmed up: the counts from here must not grow */
      if (zt_barrier_wait(&sh->bar, nranks, 20) != 0) zt_fail("barrier");
      counts(&fd0, &th0);
      shm0 = count_dir("/dev/shm", "zcc-");
      t0 = zt_now();
    }
    zccComm_t sub = NULL;
    rc = zccCommSplit(comm, 0, rank, &sub, NULL);
    if (rc != zccSuccess) {
      zt_fail("cycle %d: split: %s: %s", c, zt_rc_name(rc), zccGetLastError(comm));
      break;
    }
    float v = 1, o = 0;
    rc = zccAllReduce(&v, &o, 1, zccFloat, zccSum, sub, NULL);
    if (rc != zccSuccess || o != nranks)
      zt_fail("cycle %d: allreduce %s %g: %s", c, zt_rc_name(rc), o, zccGetLastError(sub));
    if (zccCommDestroy(sub) != zccSuccess) zt_fail("cycle %d: destroy", c);
  }
  double dt = zt_now() - t0;
  if (zt_barrier_wait(&sh->bar2, nranks, 20) != 0) zt_fail("barrier");
  /* Threads that serve a finished rendezvous end on their own: give them a moment. */
  for (int k = 0; k < 100; k++) {
    counts(&fd1, &th1);
    shm1 = count_dir("/dev/shm", "zcc-");
    if (fd1 <= fd0 && th1 <= th0 && shm1 <= shm0) break;
    zt_sleep(0.01);
  }
  figure("cycles-per-init-destroy", dt / ncycles, zccSuccess);
  zt_log("%d cycles in %.2f s: fds %d -> %d, threads %d -> %d, /dev/shm zcc-* %d -> %d", ncycles,
         dt, fd0, fd1, th0, th1, shm0, shm1);
  ZT_CHECK(fd1 <= fd0 && th1 <= th0 && shm1 <= shm0,
           "after %d cycles: fds %d -> %d, threads %d -> %d, /dev/shm %d -> %d", ncycles, fd0,
           fd1, th0, th1, shm0, shm1);
  zccCommDestroy(comm);
  return 0;
}

/* ---- threads: a second thread's call is refused ---- */

typedef struct {
  zccComm_t comm;
  float v[8], out[8];
  zccResult_t rc;
  /* thr_end: after delay_s, destroy or abort (abort) the communicator, as
     figure `what`; then set sh->flag if set_flag */
  double delay_s;
  int abort, set_flag;
  const char *what;
} thr_arg_t;

static void *thr_call(void *p) {
  thr_arg_t *a = p;
  a->rc = zccAllReduce(a->v, a->out, 8, zccFloat, zccSum, a->comm, NULL);
  return NULL;
}

static int threads_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[threads %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  thr_arg_t a = {.comm = comm};
  for (int i = 0; i < 8; i++) a.v[i] = (float)(rank + 1);
  if (rank == 0) {
    pthread_t t;
    pthread_create(&t, NULL, thr_call, &a);
    zt_sleep(0.2); /* the thread is blocked: rank 1 has not called yet */
    float w[8] = {5, 5, 5, 5, 5, 5, 5, 5}, o[8];
    double t0 = zt_now();
    rc = zccAllReduce(w, o, 8, zccFloat, zccSum, comm, NULL);
    double dt = zt_now() - t0;
    figure("threads-refusal", dt, rc);
    const char *msg = zccGetLastError(comm);
    zt_log("second thread: %s after %.4f s: \"%s\"", zt_rc_name(rc), dt, msg);
    ZT_CHECK(rc == zccInvalidUsage && strstr(msg, "another thread") && dt < 0.1,
             "a call while another thread's is in flight: expected zccInvalidUsage at once, "
             "got %s after %.3f s: \"%s\"", zt_rc_name(rc), dt, msg);
    atomic_store(&sh->flag, 1);
    pthread_join(t, NULL);
  } else {
    double t0 = zt_now();
    while (!atomic_load(&sh->flag) && zt_now() - t0 < 10) zt_sleep(0.001);
    thr_call(&a);
  }
  float want = (float)(nranks * (nranks + 1) / 2);
  ZT_CHECK(a.rc == zccSuccess && a.out[0] == want && a.out[7] == want,
           "the first thread's allreduce: %s, %g (expected %g)", zt_rc_name(a.rc), a.out[0],
           want);
  /* The refusal changed nothing: the communicator is in step. */
  thr_call(&a);
  ZT_CHECK(a.rc == zccSuccess && a.out[0] == want,
           "the next allreduce: %s, %g (expected %g)", zt_rc_name(a.rc), a.out[0], want);
  destroy_and_rebuild(comm, rank, nranks, "threads");
  return 0;
}

/* ---- split: one rank's bad colour ---- */

static int split_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[split %s rank %d]", sh->transport, rank);
  zccComm_t comm = NULL, sub = (zccComm_t)(void *)1;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("init: %s: %s", zt_rc_name(rc), zccGetLastError(NULL));
    return 1;
  }
  double t0 = zt_now();
  rc = zccCommSplit(comm, rank == 1 ? -5 : 0, rank, &sub, NULL);
  double dt = zt_now() - t0;
  figure("split-bad-color", dt, rc);
  const char *msg = zccGetLastError(comm);
  zt_log("split with rank 1's color -5: %s after %.3f s: \"%s\"", zt_rc_name(rc), dt, msg);
  ZT_CHECK(rc == zccInvalidArgument && dt < LIMIT_S && sub == (zccComm_t)(void *)1,
           "expected zccInvalidArgument within 2 s and newcomm untouched, got %s after "
           "%.2f s", zt_rc_name(rc), dt);
  ZT_CHECK(rank == 1 ? strstr(msg, "color -5") != NULL : strstr(msg, "rank 1") != NULL,
           "the message must name the bad rank or colour: \"%s\"", msg);
  /* A valid split afterwards gives every rank its right communicator. */
  rc = zccCommSplit(comm, rank % 2, rank, &sub, NULL);
  int n = 0, want = rank % 2 ? nranks / 2 : (nranks + 1) / 2;
  if (rc == zccSuccess) zccCommCount(sub, &n);
  ZT_CHECK(rc == zccSuccess && n == want, "the next split: %s, %d ranks (expected %d)",
           zt_rc_name(rc), n, want);
  if (rc == zccSuccess) {
    float v = (float)rank, s = -1, w = 0;
    for (int r = rank % 2; r < nranks; r += 2) w += (float)r;
    rc = zccAllReduce(&v, &s, 1, zccFloat, zccSum, sub, NULL);
    ZT_CHECK(rc == zccSuccess && s == w, "allreduce on the split: %s, %g (expected %g)",
             zt_rc_name(rc), s, w);
    zccCommDestroy(sub);
  }
  float v = 1, s = 0;
  rc = zccAllReduce(&v, &s, 1, zccFloat, zccSum, comm, NULL);
  ZT_CHECK(rc == zccSuccess && s == nranks, "the parent after the failed split: %s, %g",
           zt_rc_name(rc), s);
  destroy_and_rebuild(comm, rank, nranks, "split");
  return 0;
}

/* Wait (up to 10 s) for another rank's mark that its fault happened. */
static void await_flag(void) {
  double t0 = zt_now();
  while (!atomic_load(&sh->flag) && zt_now() - t0 < 10) zt_sleep(0.001);
}

/*
 * A peer's fault is done (await_flag): this rank's next allreduce fails with
 * zccRemoteError within 2 s (figure fig, message "allreduce <with>"); then
 * destroy and rebuild.
 */
static void allreduce_fails(zccComm_t comm, int rank, int nranks, const char *fig,
                            const char *with, const char *what) {
  float v[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
  double t0 = zt_now();
  zccResult_t rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
  double dt = zt_now() - t0;
  figure(fig, dt, rc);
  zt_log("allreduce %s: %s after %.3f s: \"%s\"", with, zt_rc_name(rc), dt,
         zccGetLastError(comm));
  ZT_CHECK(rc == zccRemoteError && dt < LIMIT_S,
           "allreduce %s: expected zccRemoteError within 2 s, got %s after %.2f s: %s", with,
           zt_rc_name(rc), dt, zccGetLastError(comm));
  destroy_and_rebuild(comm, rank, nranks, what);
}

/* ---- destroy from another thread while a call is blocked ---- */

/* Another thread ends the communicator (destroy or abort) within 2 s. */
static void *thr_end(void *p) {
  thr_arg_t *a = p;
  zt_sleep(a->delay_s);
  double t0 = zt_now();
  sh->mark = t0;
  a->rc = a->abort ? zccCommAbort(a->comm) : zccCommDestroy(a->comm);
  double dt = zt_now() - t0;
  figure(a->what, dt, a->rc);
  ZT_CHECK(a->rc == zccSuccess && dt < LIMIT_S, "%s from another thread: %s after %.2f s",
           a->abort ? "abort" : "destroy", zt_rc_name(a->rc), dt);
  if (a->set_flag) atomic_store(&sh->flag, 1);
  return NULL;
}

static int destroy_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[destroy %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float v[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
  if (rank == 0) {
    thr_arg_t d = {.comm = comm, .delay_s = 0.3, .what = "destroy-other-thread"};
    pthread_t t;
    pthread_create(&t, NULL, thr_end, &d);
    rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
    double dt = zt_now() - sh->mark;
    figure("blocked-call-after-destroy", dt, rc);
    ZT_CHECK(rc != zccSuccess && dt < LIMIT_S,
             "the call blocked when another thread destroyed the comm: %s %.2f s later",
             zt_rc_name(rc), dt);
    pthread_join(t, NULL);
    atomic_store(&sh->flag, 1);
    destroy_and_rebuild(NULL, rank, nranks, "destroy");
  } else {
    await_flag();
    allreduce_fails(comm, rank, nranks, "peer-of-destroyed", "with a destroyed peer", "destroy");
  }
  return 0;
}

/* ---- group: destroy and abort with an operation queued ---- */

static int group_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[group %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float v[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
  if (rank == 0) {
    ZT_EXPECT_RC(zccSuccess, zccGroupStart());
    ZT_EXPECT_RC(zccSuccess, zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL));
    double t0 = zt_now();
    rc = zccCommDestroy(comm);
    double dt = zt_now() - t0;
    ZT_CHECK(rc == zccInvalidUsage && dt < 0.1 && strstr(zccGetLastError(NULL), "zccGroupEnd"),
             "destroy inside a group with an op queued: expected zccInvalidUsage at once, "
             "got %s after %.2f s: %s", zt_rc_name(rc), dt, zccGetLastError(NULL));
    t0 = zt_now();
    rc = zccCommAbort(comm);
    dt = zt_now() - t0;
    figure("abort-in-group", dt, rc);
    ZT_CHECK(rc == zccSuccess && dt < LIMIT_S, "abort inside the group: %s after %.2f s",
             zt_rc_name(rc), dt);
    sh->mark = zt_now();
    ZT_EXPECT_RC(zccSuccess, zccGroupEnd());
    atomic_store(&sh->flag, 1);
    destroy_and_rebuild(NULL, rank, nranks, "group");
  } else {
    await_flag();
    allreduce_fails(comm, rank, nranks, "peer-of-aborted", "with an aborted peer", "group");
  }
  return 0;
}

/* ---- relay: a rank that fails because another did does not hold its close ---- */

/* The relay's destroy: its failure record's deadline (200 ms) at most, never
   ZCC_NET_LINGER_MS (1.5 s): ranks waiting on it hear of the failure from
   the close. */
#define RELAY_DESTROY_S 0.5

static int relay_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[relay %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  float v[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
  rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
  ZT_CHECK(rc == zccSuccess && out[0] == nranks, "first allreduce: %s, %g", zt_rc_name(rc),
           out[0]);
  if (rank == 1) {
    /* gone: its peers' connections to it close */
    ZT_EXPECT_RC(zccSuccess, zccCommAbort(comm));
    sh->mark = zt_now();
    atomic_store(&sh->flag, 1);
    destroy_and_rebuild(NULL, rank, nranks, "relay");
    return 0;
  }
  if (rank == 2) {
    /* the relay: a receive from the aborted rank fails; its failure record
       waits for peers that are busy elsewhere and never ask for it */
    await_flag();
    rc = zccRecv(out, 8, zccFloat, 1, comm, NULL);
    double dt = zt_now() - sh->mark;
    figure("relay-call", dt, rc);
    ZT_CHECK(rc == zccRemoteError && dt < LIMIT_S,
             "receive from an aborted rank: expected zccRemoteError within 2 s, got %s after "
             "%.2f s: %s", zt_rc_name(rc), dt, zccGetLastError(comm));
    double t0 = zt_now();
    ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
    dt = zt_now() - t0;
    figure("relay-destroy", dt, zccSuccess);
    ZT_CHECK(dt < RELAY_DESTROY_S,
             "destroy after another rank's failure took %.2f s (at most %.1f: it must not "
             "wait ZCC_NET_LINGER_MS for peers that never ask for its record)", dt,
             RELAY_DESTROY_S);
    destroy_and_rebuild(NULL, rank, nranks, "relay");
    return 0;
  }
  /* The others are busy elsewhere until the relay has left, then find the
     communicator failed. */
  await_flag();
  zt_sleep(1.0);
  allreduce_fails(comm, rank, nranks, "peer-of-relay", "after the abort and the relay", "relay");
  return 0;
}

/* ---- cause: a waiting rank learns a third rank's failure from its record ---- */

/* How long the failed rank and the silent sender keep their communicators
   (the waiting ranks must not learn of the failure from a close), and how
   soon the waiting ranks must fail (the wait asks every 100 ms). */
#define CAUSE_HOLD_S 1.5
#define CAUSE_S 0.5

static int cause_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[cause %s rank %d]", sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  float v[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
  zccResult_t rc = zccAllReduce(v, out, 8, zccFloat, zccSum, comm, NULL);
  ZT_CHECK(rc == zccSuccess && out[0] == nranks, "first allreduce: %s, %g", zt_rc_name(rc),
           out[0]);
  float *a = calloc(2000, sizeof(float)), *b = calloc(2000, sizeof(float));
  if (rank == 1 || rank == 2) {
    /* rank 2 receives 8000 bytes where rank 1 sends 4000: rank 2 fails */
    rc = rank == 1 ? zccSend(a, 1000, zccFloat, 2, comm, NULL)
                   : zccRecv(b, 2000, zccFloat, 1, comm, NULL);
    if (rank == 2) {
      sh->mark = zt_now();
      ZT_CHECK(rc == zccInvalidUsage && strstr(zccGetLastError(comm), "8000 bytes"),
               "a receive larger than the send: expected zccInvalidUsage naming 8000 bytes, "
               "got %s: %s", zt_rc_name(rc), zccGetLastError(comm));
      atomic_store(&sh->flag, 1);
    } else {
      await_flag();
    }
    zt_sleep(CAUSE_HOLD_S);
    destroy_and_rebuild(comm, rank, nranks, "cause");
  } else {
    /* waits on rank 1, which never sends to it */
    rc = zccRecv(out, 8, zccFloat, 1, comm, NULL);
    double dt = zt_now() - sh->mark;
    const char *msg = zccGetLastError(comm);
    figure("cause-waiting", dt, rc);
    zt_log("waiting on rank 1: %s %.3f s after rank 2 failed: \"%s\"", zt_rc_name(rc), dt, msg);
    ZT_CHECK(rc != zccSuccess && atomic_load(&sh->flag) && dt < CAUSE_S &&
                 strstr(msg, "rank 2") && strstr(msg, "8000 bytes"),
             "a receive from a silent rank while rank 2 failed: expected an error naming rank "
             "2's cause (8000 bytes) within %.1f s, got %s after %.2f s: %s", CAUSE_S,
             zt_rc_name(rc), dt, msg);
    destroy_and_rebuild(comm, rank, nranks, "cause");
  }
  free(a);
  free(b);
  return 0;
}

/* ---- abortrace: zccCommAbort from another thread, racing every phase ---- */

/* When the abort comes, after the victim starts its phases: in the first
   allreduce, a split, a group, a broadcast, or between calls. */
static const int abort_ms[] = {0, 1, 2, 4, 7, 12, 20, 35};
#define ABORT_KINDS ((int)(sizeof(abort_ms) / sizeof(abort_ms[0])))
#define ABORT_N 4096

/*
 * One step of the phases every rank runs in turn: an allreduce, a split
 * (and an allreduce on it), a group of sends and receives around the ring,
 * a broadcast. Results are checked where the call succeeds; *what names it.
 */
static zccResult_t abort_step(zccComm_t comm, int rank, int nranks, int step, const char **what) {
  static float v[ABORT_N], out[ABORT_N];
  for (int i = 0; i < ABORT_N; i++) v[i] = (float)(rank + 1);
  zccResult_t rc = zccSuccess;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  switch (step % 4) {
  case 0:
    *what = "allreduce";
    rc = zccAllReduce(v, out, ABORT_N, zccFloat, zccSum, comm, NULL);
    if (rc == zccSuccess)
      ZT_CHECK(out[0] == nranks * (nranks + 1) / 2 && out[ABORT_N - 1] == out[0],
               "allreduce step %d: %g", step, out[0]);
    break;
  case 1: {
    *what = "split";
    zccComm_t sub = NULL;
    rc = zccCommSplit(comm, 0, rank, &sub, NULL);
    if (rc == zccSuccess) {
      float a = 1, b = 0;
      zccResult_t r2 = zccAllReduce(&a, &b, 1, zccFloat, zccSum, sub, NULL);
      /* the split's members are the parent's: a peer's abort can fail this too */
      if (r2 == zccSuccess) ZT_CHECK(b == nranks, "allreduce on the split: %g", b);
      zccCommDestroy(sub);
    }
    break;
  }
  case 2:
    *what = "group";
    rc = zccGroupStart();
    if (rc == zccSuccess) {
      zccResult_t r1 = zccSend(v, ABORT_N, zccFloat, next, comm, NULL);
      zccResult_t r2 = zccRecv(out, ABORT_N, zccFloat, prev, comm, NULL);
      rc = zccGroupEnd();
      if (rc == zccSuccess) rc = r1 != zccSuccess ? r1 : r2;
      if (rc == zccSuccess)
        ZT_CHECK(out[0] == prev + 1 && out[ABORT_N - 1] == prev + 1, "recv step %d: %g", step,
                 out[0]);
    }
    break;
  default:
    *what = "broadcast";
    rc = zccBroadcast(v, out, ABORT_N, zccFloat, step % nranks, comm, NULL);
    if (rc == zccSuccess) ZT_CHECK(out[0] == step % nranks + 1, "broadcast step %d: %g", step, out[0]);
    break;
  }
  return rc;
}

static int abortrace_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[abortrace+%dms %s rank %d]", abort_ms[sh->kind], sh->transport, rank);
  zccComm_t comm = case_init(rank, nranks, id);
  if (!comm) return 1;
  zccResult_t rc = zccSuccess;
  const char *what = "";
  double t0 = zt_now();
  if (rank == 1) {
    thr_arg_t d = {.comm = comm, .delay_s = abort_ms[sh->kind] / 1000.0, .abort = 1,
                   .set_flag = 1, .what = "abort-racing"};
    pthread_t t;
    pthread_create(&t, NULL, thr_end, &d);
    int step = 0;
    /* until a call fails: the one in flight returns within 2 s of the abort,
       and the next one finds the communicator gone */
    for (; step < 100000 && zt_now() - t0 < 10; step++) {
      rc = abort_step(comm, rank, nranks, step, &what);
      if (rc != zccSuccess) break;
    }
    double dt = zt_now() - sh->mark;
    pthread_join(t, NULL);
    figure("aborted-call", sh->mark > 0 ? dt : -1, rc);
    zt_log("%s (step %d) on the aborted comm: %s %.3f s after the abort", what, step,
           zt_rc_name(rc), dt);
    ZT_CHECK(rc != zccSuccess && sh->mark > 0 && dt < LIMIT_S,
             "the call racing the abort: %s %.2f s after it", zt_rc_name(rc), dt);
    const char *w2;
    rc = abort_step(comm, rank, nranks, 0, &w2);
    ZT_CHECK(rc == zccInvalidUsage && strstr(zccGetLastError(NULL), "not a live communicator"),
             "a call after the abort: %s: %s", zt_rc_name(rc), zccGetLastError(NULL));
    destroy_and_rebuild(NULL, rank, nranks, "abortrace");
    return 0;
  }
  /* The others run the same steps until one fails because rank 1 is gone. */
  int step = 0;
  for (; step < 100000 && zt_now() - t0 < 10; step++) {
    rc = abort_step(comm, rank, nranks, step, &what);
    if (rc != zccSuccess) break;
  }
  double dt = zt_now() - (atomic_load(&sh->flag) || sh->mark > 0 ? sh->mark : t0);
  figure("peer-of-aborted-racing", dt, rc);
  zt_log("%s (step %d) with an aborted peer: %s %.3f s after the abort: \"%s\"", what, step,
         zt_rc_name(rc), dt, zccGetLastError(comm));
  ZT_CHECK(rc == zccRemoteError && sh->mark > 0 && dt < LIMIT_S,
           "%s with an aborted peer: expected zccRemoteError within 2 s of the abort, got %s "
           "after %.2f s: %s", what, zt_rc_name(rc), dt, zccGetLastError(comm));
  destroy_and_rebuild(comm, rank, nranks, "abortrace");
  return 0;
}

/* ---- initabort: zccCommAbort racing a non-blocking init ---- */

/* When rank 1 aborts its non-blocking init (ms after the call returned). */
static const int initabort_ms[] = {0, 1, 3, 10, 30, 100};
#define INITABORT_KINDS ((int)(sizeof(initabort_ms) / sizeof(initabort_ms[0])))

static int initabort_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[initabort+%dms %s rank %d]", initabort_ms[sh->kind], sh->transport, rank);
  double t0 = zt_now();
  if (rank == 1) {
    zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
    cfg.deviceType = zccDeviceHost;
    cfg.blocking = 0;
    zccComm_t comm = NULL;
    zccResult_t rc = zccCommInitRankConfig(&comm, nranks, *id, rank, &cfg);
    ZT_CHECK(rc == zccInProgress && comm, "non-blocking init returned %s (comm %p): %s",
             zt_rc_name(rc), (void *)comm, zccGetLastError(NULL));
    if (!comm) return 1;
    zt_sleep(initabort_ms[sh->kind] / 1000.0);
    zccResult_t st = zccInternalError;
    ZT_EXPECT_RC(zccSuccess, zccCommGetAsyncError(comm, &st));
    sh->mark = zt_now();
    rc = zccCommAbort(comm);
    double dt = zt_now() - sh->mark;
    figure(st == zccInProgress ? "abort-during-init" : "abort-after-init", dt, rc);
    ZT_CHECK(rc == zccSuccess && dt < LIMIT_S, "abort of the init (state %s): %s after %.2f s",
             zt_rc_name(st), zt_rc_name(rc), dt);
    int n;
    ZT_EXPECT_RC(zccInvalidUsage, zccCommCount(comm, &n));
    destroy_and_rebuild(NULL, rank, nranks, "initabort");
    return 0;
  }
  zccComm_t comm = NULL;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  const char *what = "init";
  float v = 1, out = 0;
  if (rc == zccSuccess) {
    /* rank 1's init finished before the abort: the abort fails the next call */
    what = "allreduce";
    for (int i = 0; i < 100000 && zt_now() - t0 < 10; i++) {
      rc = zccAllReduce(&v, &out, 1, zccFloat, zccSum, comm, NULL);
      if (rc != zccSuccess) break;
      ZT_CHECK(out == nranks, "allreduce %d: %g", i, out);
    }
  }
  double now = zt_now(), dt = sh->mark > 0 ? now - sh->mark : -1;
  figure(rc == zccTimeout ? "peer-of-aborted-init-timeout" : "peer-of-aborted-init", dt, rc);
  zt_log("%s with a peer that aborted its init: %s %.3f s after the abort (%.3f s after the "
         "start): \"%s\"", what, zt_rc_name(rc), dt, now - t0, zccGetLastError(NULL));
  /* Aborted before the rendezvous completed, rank 1 is like a rank killed
     then: the others learn it at ZCC_INIT_TIMEOUT (2 s here). After it,
     its closed connections tell them at once. */
  ZT_CHECK((rc == zccRemoteError && dt >= 0 && dt < LIMIT_S) ||
               (rc == zccTimeout && strcmp(what, "init") == 0 && now - t0 < 2.0 + 1.0),
           "%s with a peer that aborted its init: %s, %.2f s after the abort, %.2f s after "
           "the start", what, zt_rc_name(rc), dt, now - t0);
  destroy_and_rebuild(comm, rank, nranks, "initabort");
  return 0;
}

/* ---- runner ---- */

typedef struct {
  const char *name;
  zt_rank_fn fn;
  int nranks;
  const char *timeout_ms;
  int nkinds;
  const char *check_mode;
} fault_case_t;

static const fault_case_t cases[] = {
    {"mismatch", mismatch_rank, 2, "20000", MM_KINDS, NULL},
    {"stale", stale_rank, 2, "500", 1, NULL},
    {"zombie", zombie_rank, 3, "60000", 1, NULL},
    {"initdeath", initdeath_rank, 3, "60000", INITDEATH_KINDS, NULL},
    {"threads", threads_rank, 2, "20000", 1, NULL},
    {"strangers", strangers_rank, 2, "20000", 1, NULL},
    {"sigstop", sigstop_rank, 2, "1000", 1, NULL},
    {"cycles", cycles_rank, 2, "20000", 1, NULL},
    {"split", split_rank, 3, "20000", 1, NULL},
    {"destroy", destroy_rank, 2, "20000", 1, NULL},
    {"group", group_rank, 2, "20000", 1, NULL},
    {"relay", relay_rank, 3, "20000", 1, NULL},
    {"cause", cause_rank, 3, "20000", 1, NULL},
    {"abortrace", abortrace_rank, 4, "20000", ABORT_KINDS, NULL},
    {"initabort", initabort_rank, 3, "20000", INITABORT_KINDS, NULL},
    {"fullcheck", fullcheck_rank, 2, "20000", 1, "full"},
};
/* Each case of fewer ranks runs again at this many, named with a 4 (mismatch4, zombie4). */
#define WIDE_RANKS 4

static int selected(const char *list_env, const char *name) {
  const char *list = getenv(list_env);
  if (!list || !*list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return 1;
  return 0;
}

static void run_case(const fault_case_t *c, int nranks, int kind, const char *transport) {
  pid_t pid = fork();
  if (pid < 0) {
    zt_fail("fork: %s", strerror(errno));
    return;
  }
  if (pid == 0) {
    memset(sh, 0, sizeof(*sh));
    sh->kind = kind;
    sh->nranks = nranks;
    snprintf(sh->transport, sizeof(sh->transport), "%s", transport);
    setenv("ZCC_SHM_DISABLE", strcmp(transport, "socket") == 0 ? "1" : "0", 1);
    setenv("ZCC_TIMEOUT", c->timeout_ms, 1);
    setenv("ZCC_CHECK_MODE", c->check_mode ? c->check_mode : "cheap", 1);
    setenv("ZCC_INIT_TIMEOUT", "2000", 1);
    setenv("ZCC_CONNECT_TIMEOUT", "60000", 1);
    zt_group_t g;
    zccUniqueId id;
    if (zt_spawn(&g, nranks, c->fn, NULL) != 0) _exit(1);
    if (ZT_EXPECT_RC(zccSuccess, zccGetUniqueId(&id))) zt_release(&g, &id);
    if (c->fn == initdeath_rank) {
      zt_sleep(initdeath_ms[kind] / 1000.0);
      sh->mark = zt_now();
      kill(g.pid[nranks - 1], SIGKILL);
    }
    if (c->fn == sigstop_rank) {
      for (int r = 0; r < nranks; r++)
        if (r != 1 && zt_wait_rank(&g, r, 60) < 0) zt_fail("sigstop: rank %d did not finish", r);
      kill(g.pid[1], SIGKILL);
      int st = zt_wait_rank(&g, 1, 10);
      ZT_CHECK(st >= 0 && WIFSIGNALED(st), "sigstop: the stopped rank's status 0x%x", st);
      g.status[1] = 0;
    }
    if (c->fn == zombie_rank || c->fn == initdeath_rank) {
      /* Reap the survivors first: the victim stays a zombie meanwhile. */
      for (int r = 0; r < nranks - 1; r++)
        if (zt_wait_rank(&g, r, 60) < 0) zt_fail("zombie: rank %d did not finish", r);
      int st = zt_wait_rank(&g, nranks - 1, 10);
      ZT_CHECK(st >= 0 && WIFSIGNALED(st), "zombie: the victim's status 0x%x", st);
      g.status[nranks - 1] = 0;
    }
    zt_wait_all(&g, 60, c->name);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ZT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s runner: status 0x%x", c->name, st);
}

int main(int argc, char **argv) {
  (void)argc;
  zt_setup(argv[0]);
  sh = zt_shared_alloc(sizeof(*sh));
  static const char *transports[] = {"shm", "socket"};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) * 2; i++) {
    const fault_case_t *c = &cases[i % (sizeof(cases) / sizeof(cases[0]))];
    int wide = i >= sizeof(cases) / sizeof(cases[0]), nranks = wide ? WIDE_RANKS : c->nranks;
    char name[64];
    snprintf(name, sizeof(name), "%s%s", c->name, wide ? "4" : "");
    if ((wide && c->nranks >= WIDE_RANKS) || !selected("ZCC_TEST_FAULTS", name)) continue;
    for (int t = 0; t < 2; t++) {
      if (!selected("ZCC_TEST_TRANSPORTS", transports[t])) continue;
      for (int k = 0; k < c->nkinds; k++) {
        double t0 = zt_now();
        run_case(c, nranks, k, transports[t]);
        char kind[32] = "";
        if (c->fn == mismatch_rank) snprintf(kind, sizeof(kind), "-%s", mm_names[k]);
        if (c->fn == initdeath_rank) snprintf(kind, sizeof(kind), "+%dms", initdeath_ms[k]);
        if (c->fn == abortrace_rank) snprintf(kind, sizeof(kind), "+%dms", abort_ms[k]);
        if (c->fn == initabort_rank) snprintf(kind, sizeof(kind), "+%dms", initabort_ms[k]);
        printf("case %s%s over %s (%d ranks): %.2f s\n", name, kind, transports[t], nranks,
               zt_now() - t0);
      }
    }
  }
  zt_shared_free(sh, sizeof(*sh));
  return zt_finish();
}
