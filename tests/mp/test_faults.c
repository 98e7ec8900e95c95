/*
 * Faults on host communicators, each in its own runner process (zcc reads
 * its parameters once per process):
 *   killed   4 ranks loop on 64 MiB allreduces; rank 1 is SIGKILLed; every
 *            survivor returns zccRemoteError or zccTimeout within
 *            ZCC_TIMEOUT (3000 ms) + 2 s of the kill, and
 *            zccCommGetAsyncError reports it.
 *   abort    2 ranks, rank 1 never calls the collective; a second thread
 *            of rank 0 calls zccCommAbort after 1 s; the stuck call (an
 *            allreduce, then a recv) returns zccRemoteError within 2 s.
 *   absent   3 ranks, rank 2 never calls init; ranks 0 and 1 fail with
 *            zccTimeout within ZCC_INIT_TIMEOUT (2000 ms) + 2 s.
 *   strangers  connections to the bootstrap root that send garbage, stall,
 *            reset, or hold a forged id (wrong secret); the real ranks still
 *            initialise; then garbage and stalls on every listening port
 *            of the ranks, which still compute exact allreduces.
 *
 * ZCC_TEST_FAULTS=killed,abort,... runs a subset.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap.h" /* internal: only for the layout of the unique id */
#include "ztest.h"
#include "zcc.h"

#define BIG_FLOATS (16u * 1024 * 1024) /* 64 MiB */
#define KILL_TIMEOUT_MS 3000
#define ABORT_TIMEOUT_MS 8000
#define INIT_TIMEOUT_MS 2000
#define SLACK_S 2.0

/* Shared between a runner and its ranks. */
typedef struct {
  atomic_int iters[ZT_MAX_RANKS];
  atomic_int ready[ZT_MAX_RANKS];
  atomic_int go;
  atomic_int done;
  double kill_time;
  double abort_time;
  int mode;
} fault_shared_t;

static fault_shared_t *sh;

static const char *rc_ok_fault(zccResult_t rc) {
  return (rc == zccRemoteError || rc == zccTimeout) ? "yes" : "no";
}

/* ---- killed: a rank SIGKILLed mid-collective ---- */

static int killed_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  char tmo[32];
  zccComm_t comm = NULL;
  snprintf(tmo, sizeof(tmo), "%d", KILL_TIMEOUT_MS);
  setenv("ZCC_TIMEOUT", tmo, 1);
  zt_set_tag("[killed rank %d]", rank);
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("init: expected zccSuccess, got %s: \"%s\"", zt_rc_name(rc),
            zccGetLastError(NULL));
    return 1;
  }
  float *buf = malloc((size_t)BIG_FLOATS * sizeof(float));
  float *out = malloc((size_t)BIG_FLOATS * sizeof(float));
  if (!buf || !out) {
    zt_fail("out of memory");
    return 1;
  }
  for (size_t i = 0; i < BIG_FLOATS; i++)
    buf[i] = 1.0f;
  double start = zt_now(), t_call = 0;
  rc = zccSuccess;
  while (zt_now() - start < 90) {
    t_call = zt_now();
    rc = zccAllReduce(buf, out, BIG_FLOATS, zccFloat, zccSum, comm, NULL);
    if (rc != zccSuccess)
      break;
    atomic_fetch_add(&sh->iters[rank], 1);
  }
  double t_err = zt_now();
  if (rc == zccSuccess) {
    zt_fail("no error within 90 s after rank 1 was killed");
    return 1;
  }
  double since_kill = t_err - sh->kill_time;
  zt_log("allreduce returned %s (%d) %.2f s after the kill (call began %.2f s "
         "before it): \"%s\"", zt_rc_name(rc), (int)rc, since_kill,
         sh->kill_time - t_call, zccGetLastError(comm));
  ZT_CHECK(sh->kill_time > 0, "allreduce failed with %s before rank 1 was killed",
           zt_rc_name(rc));
  ZT_CHECK(rc == zccRemoteError || rc == zccTimeout,
           "allreduce after a peer died: expected zccRemoteError or zccTimeout, got %s",
           zt_rc_name(rc));
  ZT_CHECK(since_kill <= KILL_TIMEOUT_MS / 1000.0 + SLACK_S,
           "allreduce returned %.2f s after the kill; expected <= %.1f s "
           "(ZCC_TIMEOUT %d ms + %.0f s)", since_kill,
           KILL_TIMEOUT_MS / 1000.0 + SLACK_S, KILL_TIMEOUT_MS, SLACK_S);
  zccResult_t async = zccSuccess;
  rc = zccCommGetAsyncError(comm, &async);
  ZT_CHECK(rc == zccSuccess && async != zccSuccess,
           "zccCommGetAsyncError after the failure: expected an error, got rc %s, "
           "async %s", zt_rc_name(rc), zt_rc_name(async));
  ZT_CHECK(async == zccSuccess || !strcmp(rc_ok_fault(async), "yes"),
           "zccCommGetAsyncError: expected zccRemoteError or zccTimeout, got %s",
           zt_rc_name(async));
  /* A later call must fail at once rather than hang. */
  double t0 = zt_now();
  rc = zccAllReduce(buf, buf, 16, zccFloat, zccSum, comm, NULL);
  ZT_CHECK(rc != zccSuccess && zt_now() - t0 < KILL_TIMEOUT_MS / 1000.0 + SLACK_S,
           "allreduce on a failed comm: expected an error within %.1f s, got %s after %.2f s",
           KILL_TIMEOUT_MS / 1000.0 + SLACK_S, zt_rc_name(rc), zt_now() - t0);
  t0 = zt_now();
  rc = zccCommAbort(comm);
  ZT_CHECK(rc == zccSuccess, "zccCommAbort after the failure: expected zccSuccess, got %s",
           zt_rc_name(rc));
  ZT_CHECK(zt_now() - t0 < SLACK_S, "zccCommAbort took %.2f s", zt_now() - t0);
  free(buf);
  free(out);
  return 0;
}

static void test_killed(void) {
  zt_group_t g;
  zccUniqueId id;
  const int n = 4, victim = 1;
  if (zt_spawn(&g, n, killed_rank, NULL) != 0)
    return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__))
    zt_release(&g, &id);
  double t0 = zt_now();
  int started = 0;
  while (zt_now() - t0 < 120) {
    started = 1;
    for (int r = 0; r < n; r++)
      if (atomic_load(&sh->iters[r]) < 2)
        started = 0;
    if (started)
      break;
    int dead = 0;
    for (int r = 0; r < n; r++)
      if (zt_wait_rank(&g, r, 0) >= 0)
        dead = 1;
    if (dead)
      break;
    zt_sleep(0.01);
  }
  if (!started) {
    zt_fail("killed: the ranks did not complete 2 allreduces of 64 MiB each in 120 s");
  } else {
    zt_sleep(0.05);
    sh->kill_time = zt_now();
    kill(g.pid[victim], SIGKILL);
    zt_log("killed: SIGKILLed rank %d (pid %d) after %.1f s", victim,
           (int)g.pid[victim], sh->kill_time - t0);
  }
  int st = zt_wait_rank(&g, victim, 30);
  ZT_CHECK(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
           "killed: rank %d: expected death by SIGKILL, got status 0x%x", victim, st);
  g.done[victim] = 1;
  g.status[victim] = 0;
  zt_wait_all(&g, 30, "killed");
}

/* ---- abort: zccCommAbort from another thread ---- */

typedef struct {
  zccComm_t comm;
  zccResult_t rc;
} abort_arg_t;

static void *abort_thread(void *p) {
  abort_arg_t *a = p;
  zt_sleep(1.0);
  sh->abort_time = zt_now();
  a->rc = zccCommAbort(a->comm);
  return NULL;
}

static int abort_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  char tmo[32];
  zccComm_t comm = NULL;
  const char *what = sh->mode == 0 ? "allreduce" : "recv";
  snprintf(tmo, sizeof(tmo), "%d", ABORT_TIMEOUT_MS);
  setenv("ZCC_TIMEOUT", tmo, 1);
  zt_set_tag("[abort/%s rank %d]", what, rank);
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("init: expected zccSuccess, got %s: \"%s\"", zt_rc_name(rc),
            zccGetLastError(NULL));
    return 1;
  }
  if (rank == 1) {
    /* Never join; leave once rank 0 is done. */
    double t0 = zt_now();
    while (!atomic_load(&sh->done) && zt_now() - t0 < 30)
      zt_sleep(0.01);
    t0 = zt_now();
    rc = zccCommDestroy(comm);
    zt_log("zccCommDestroy with the peer gone returned %s after %.2f s",
           zt_rc_name(rc), zt_now() - t0);
    ZT_CHECK(zt_now() - t0 < ABORT_TIMEOUT_MS / 1000.0 + SLACK_S,
             "zccCommDestroy with the peer gone took %.2f s (limit %.1f s)",
             zt_now() - t0, ABORT_TIMEOUT_MS / 1000.0 + SLACK_S);
    return 0;
  }
  size_t count = 1u << 20;
  float *buf = calloc(count, sizeof(float));
  abort_arg_t a = {comm, zccInternalError};
  pthread_t th;
  pthread_create(&th, NULL, abort_thread, &a);
  double t0 = zt_now();
  if (sh->mode == 0)
    rc = zccAllReduce(buf, buf, count, zccFloat, zccSum, comm, NULL);
  else
    rc = zccRecv(buf, count, zccFloat, 1, comm, NULL);
  double t1 = zt_now();
  pthread_join(th, NULL);
  zt_log("%s returned %s %.2f s after the abort (%.2f s after its start)", what,
         zt_rc_name(rc), t1 - sh->abort_time, t1 - t0);
  ZT_CHECK(rc == zccRemoteError,
           "%s stuck when another thread aborts: expected zccRemoteError, got %s",
           what, zt_rc_name(rc));
  ZT_CHECK(t1 >= sh->abort_time && t1 - sh->abort_time <= SLACK_S,
           "%s returned %.2f s after zccCommAbort; expected within 0..%.0f s", what,
           t1 - sh->abort_time, SLACK_S);
  ZT_CHECK(a.rc == zccSuccess, "zccCommAbort from another thread: expected zccSuccess, got %s",
           zt_rc_name(a.rc));
  atomic_store(&sh->done, 1);
  free(buf);
  return 0;
}

static void test_abort(void) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, 2, abort_rank, NULL) != 0)
    return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__))
    zt_release(&g, &id);
  zt_wait_all(&g, 60, sh->mode == 0 ? "abort/allreduce" : "abort/recv");
}

/* ---- absent: a rank never arrives at init ---- */

static int absent_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  char tmo[32];
  zccComm_t sentinel = (zccComm_t)(uintptr_t)0x5e5e5e50, comm = sentinel;
  snprintf(tmo, sizeof(tmo), "%d", INIT_TIMEOUT_MS);
  setenv("ZCC_INIT_TIMEOUT", tmo, 1);
  zt_set_tag("[absent rank %d]", rank);
  double t0 = zt_now();
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  double dt = zt_now() - t0;
  const char *le = zccGetLastError(NULL);
  zt_log("init without rank 2 returned %s after %.2f s: \"%s\"", zt_rc_name(rc), dt,
         le ? le : "(null)");
  ZT_CHECK(rc == zccTimeout, "init with a rank missing: expected zccTimeout, got %s",
           zt_rc_name(rc));
  ZT_CHECK(dt <= INIT_TIMEOUT_MS / 1000.0 + SLACK_S,
           "init with a rank missing took %.2f s; expected <= %.1f s", dt,
           INIT_TIMEOUT_MS / 1000.0 + SLACK_S);
  ZT_CHECK(dt >= INIT_TIMEOUT_MS / 1000.0 * 0.9,
           "init with a rank missing gave up after %.2f s, before ZCC_INIT_TIMEOUT (%d ms)",
           dt, INIT_TIMEOUT_MS);
  ZT_CHECK(comm == sentinel, "failed init wrote *comm");
  ZT_CHECK(le && *le, "failed init left no message in zccGetLastError");
  return 0;
}

static void test_absent(void) {
  zt_group_t g;
  zccUniqueId id;
  /* The root waits longer than the ranks, so that the ranks' own timeout fires. */
  setenv("ZCC_INIT_TIMEOUT", "20000", 1);
  if (zt_spawn(&g, 3, absent_rank, NULL) != 0)
    return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__)) {
    zt_release_rank(&g, 0, &id);
    zt_release_rank(&g, 1, &id);
  }
  /* rank 2's pipe closes unread: it exits without calling init. */
  zt_wait_all(&g, 30, "absent");
}

/* ---- strangers ---- */

/* Listening TCP sockets of pid, read from /proc. Returns how many. */
static int listening_addrs(pid_t pid, struct sockaddr_storage *out, socklen_t *lens,
                           int max) {
  unsigned long inodes[256];
  int ninodes = 0, n = 0;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (!d)
    return 0;
  struct dirent *e;
  while ((e = readdir(d)) && ninodes < 256) {
    char link[PATH_MAX], target[128];
    snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    if (len <= 0)
      continue;
    target[len] = 0;
    unsigned long ino;
    if (sscanf(target, "socket:[%lu]", &ino) == 1)
      inodes[ninodes++] = ino;
  }
  closedir(d);
  for (int v6 = 0; v6 < 2; v6++) {
    snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, v6 ? "tcp6" : "tcp");
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    char line[512];
    if (!fgets(line, sizeof(line), f)) {
      fclose(f);
      continue;
    }
    while (fgets(line, sizeof(line), f) && n < max) {
      char local[64];
      unsigned st;
      unsigned long ino;
      if (sscanf(line, "%*d: %63[0-9A-Fa-f:] %*s %x %*s %*s %*s %*s %*s %lu", local,
                 &st, &ino) != 3 || st != 0x0A)
        continue;
      int mine = 0;
      for (int i = 0; i < ninodes; i++)
        if (inodes[i] == ino)
          mine = 1;
      if (!mine)
        continue;
      char *colon = strrchr(local, ':');
      unsigned port = (unsigned)strtoul(colon + 1, NULL, 16);
      *colon = 0;
      memset(&out[n], 0, sizeof(out[n]));
      if (!v6) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out[n];
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        sin->sin_addr.s_addr = (uint32_t)strtoul(local, NULL, 16);
        if (sin->sin_addr.s_addr == 0)
          sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        lens[n] = sizeof(*sin);
      } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out[n];
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        for (int w = 0; w < 4; w++) {
          char word[9];
          memcpy(word, local + 8 * w, 8);
          word[8] = 0;
          uint32_t v = (uint32_t)strtoul(word, NULL, 16);
          memcpy(&sin6->sin6_addr.s6_addr[4 * w], &v, 4);
        }
        if (IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr))
          sin6->sin6_addr = in6addr_loopback;
        lens[n] = sizeof(*sin6);
      }
      n++;
    }
    fclose(f);
  }
  return n;
}

static int stranger_connect(const struct sockaddr *sa, socklen_t len) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, sa, len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void send_garbage(int fd, uint64_t seed, size_t bytes, int all_ff) {
  char buf[4096];
  uint64_t s = seed;
  for (size_t i = 0; i < sizeof(buf); i += 8) {
    uint64_t r = all_ff ? ~0ull : zt_rand(&s);
    memcpy(buf + i, &r, 8);
  }
  while (bytes > 0) {
    size_t chunk = bytes < sizeof(buf) ? bytes : sizeof(buf);
    ssize_t w = send(fd, buf, chunk, MSG_NOSIGNAL);
    if (w <= 0)
      return; /* the server may drop us: that is the point */
    bytes -= (size_t)w;
  }
}

/* Open the kinds of bad connections to addr; returns fds to keep open. */
static int attack(const struct sockaddr *sa, socklen_t len, int *keep, int max_keep,
                  uint64_t seed) {
  int nkeep = 0, fd;
  /* garbage then close */
  if ((fd = stranger_connect(sa, len)) >= 0) {
    send_garbage(fd, seed, 4096, 0);
    close(fd);
  }
  /* all-ones (huge sizes) then close */
  if ((fd = stranger_connect(sa, len)) >= 0) {
    send_garbage(fd, seed, 256, 1);
    close(fd);
  }
  /* garbage, kept open */
  if ((fd = stranger_connect(sa, len)) >= 0) {
    send_garbage(fd, seed + 1, 64 * 1024, 0);
    if (nkeep < max_keep)
      keep[nkeep++] = fd;
    else
      close(fd);
  }
  /* stall: connect and send nothing */
  if ((fd = stranger_connect(sa, len)) >= 0) {
    if (nkeep < max_keep)
      keep[nkeep++] = fd;
    else
      close(fd);
  }
  /* partial header, then stall */
  if ((fd = stranger_connect(sa, len)) >= 0) {
    send_garbage(fd, seed + 2, 3, 0);
    if (nkeep < max_keep)
      keep[nkeep++] = fd;
    else
      close(fd);
  }
  /* connect and reset */
  if ((fd = stranger_connect(sa, len)) >= 0) {
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
  }
  return nkeep;
}

static int forged_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  int real_nranks = *(int *)arg;
  zccUniqueId forged = *id;
  zccComm_t sentinel = (zccComm_t)(uintptr_t)0x5e5e5e50, comm = sentinel;
  zcc_unique_id_t *u = (zcc_unique_id_t *)forged.internal;
  setenv("ZCC_INIT_TIMEOUT", "3000", 1);
  zt_set_tag("[forged id]");
  if (u->magic != ZCC_UNIQUE_ID_MAGIC) {
    zt_fail("the unique id does not start with zcc_unique_id_t (magic 0x%x, expected 0x%x)",
            u->magic, ZCC_UNIQUE_ID_MAGIC);
    return 1;
  }
  for (int i = 0; i < ZCC_SECRET_BYTES; i++)
    u->secret[i] ^= 0x5a;
  double t0 = zt_now();
  zccResult_t rc = zt_comm_init_host(&comm, real_nranks, &forged, 0);
  double dt = zt_now() - t0;
  zt_log("init with a wrong secret returned %s after %.2f s: \"%s\"", zt_rc_name(rc), dt,
         zccGetLastError(NULL));
  ZT_CHECK(rc == zccRemoteError || rc == zccTimeout,
           "init with a forged id (wrong secret): expected zccRemoteError or zccTimeout, got %s",
           zt_rc_name(rc));
  ZT_CHECK(dt <= 3.0 + SLACK_S, "init with a forged id took %.2f s (limit %.1f s)", dt,
           3.0 + SLACK_S);
  ZT_CHECK(comm == sentinel || rc == zccSuccess, "failed forged init wrote *comm");
  if (rc == zccSuccess)
    zccCommAbort(comm);
  return 0;
}

static int check_allreduce(zccComm_t comm, int rank, int nranks, int iter) {
  enum { N = 4099 };
  int32_t in[N], out[N];
  for (int i = 0; i < N; i++) {
    in[i] = (rank + 1) * (i % 97) - iter;
    out[i] = -7;
  }
  zccResult_t rc = zccAllReduce(in, out, N, zccInt32, zccSum, comm, NULL);
  if (rc != zccSuccess) {
    zt_fail("allreduce #%d: expected zccSuccess, got %s: \"%s\"", iter, zt_rc_name(rc),
            zccGetLastError(comm));
    return 1;
  }
  for (int i = 0; i < N; i++) {
    int32_t e = (nranks * (nranks + 1) / 2) * (i % 97) - nranks * iter;
    if (out[i] != e) {
      zt_fail("allreduce #%d int32 sum nranks=%d count=%d: element %d: expected %d, got %d",
              iter, nranks, N, i, e, out[i]);
      return 1;
    }
  }
  zt_pass();
  return 0;
}

static int stranger_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  zccComm_t comm = NULL;
  zt_set_tag("[strangers rank %d]", rank);
  double t0 = zt_now();
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  double dt = zt_now() - t0;
  if (rc != zccSuccess) {
    zt_fail("init with strangers at the root: expected zccSuccess, got %s after %.2f s: \"%s\"",
            zt_rc_name(rc), dt, zccGetLastError(NULL));
    atomic_store(&sh->ready[rank], -1);
    return 1;
  }
  zt_pass();
  ZT_CHECK(dt < 10, "init with strangers at the root took %.2f s", dt);
  check_allreduce(comm, rank, nranks, 0);
  atomic_store(&sh->ready[rank], 1);
  t0 = zt_now();
  while (!atomic_load(&sh->go) && zt_now() - t0 < 60)
    zt_sleep(0.01);
  for (int it = 1; it <= 20; it++)
    if (check_allreduce(comm, rank, nranks, it))
      break;
  rc = zccCommDestroy(comm);
  ZT_CHECK(rc == zccSuccess, "zccCommDestroy: expected zccSuccess, got %s", zt_rc_name(rc));
  return 0;
}

static void test_strangers(void) {
  zt_group_t g, forger;
  zccUniqueId id;
  const int n = 4;
  int keep[256], nkeep = 0;
  struct sockaddr_storage addrs[64];
  socklen_t lens[64];
  int nforged = n;

  setenv("ZCC_INIT_TIMEOUT", "30000", 1);
  if (zt_spawn(&g, n, stranger_rank, NULL) != 0)
    return;
  if (zt_spawn(&forger, 1, forged_rank, &nforged) != 0)
    return;
  if (!zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__)) {
    zt_wait_all(&g, 10, "strangers");
    zt_wait_all(&forger, 10, "forged id");
    return;
  }
  int na = listening_addrs(getpid(), addrs, lens, 64);
  ZT_CHECK(na > 0, "strangers: found no listening TCP socket of the root process");
  for (int i = 0; i < na; i++)
    nkeep += attack((struct sockaddr *)&addrs[i], lens[i], keep + nkeep,
                    (int)(sizeof(keep) / sizeof(keep[0])) - nkeep, 1000 + (uint64_t)i);
  zt_log("strangers: %d bad connections to %d root socket(s), %d held open", na * 6, na,
         nkeep);
  zt_release(&forger, &id);
  zt_sleep(0.3); /* let the forger reach the root first */
  zt_release(&g, &id);

  double t0 = zt_now();
  int all = 0;
  while (zt_now() - t0 < 60 && !all) {
    all = 1;
    for (int r = 0; r < n; r++) {
      int v = atomic_load(&sh->ready[r]);
      if (v < 0)
        t0 = -1e9;
      if (v != 1)
        all = 0;
    }
    zt_sleep(0.01);
  }
  if (all) {
    int total = 0, held0 = nkeep;
    for (int r = 0; r < n; r++) {
      int k = listening_addrs(g.pid[r], addrs, lens, 64);
      total += k;
      for (int i = 0; i < k; i++)
        nkeep += attack((struct sockaddr *)&addrs[i], lens[i], keep + nkeep,
                        (int)(sizeof(keep) / sizeof(keep[0])) - nkeep,
                        2000 + (uint64_t)(r * 64 + i));
    }
    zt_log("strangers: attacked %d listening socket(s) of the ranks, %d held open", total,
           nkeep - held0);
  }
  atomic_store(&sh->go, 1);
  zt_wait_all(&g, 90, "strangers");
  zt_wait_all(&forger, 30, "forged id");
  for (int i = 0; i < nkeep; i++)
    close(keep[i]);
}

/* ---- driver ---- */

typedef struct {
  const char *name;
  void (*fn)(void);
  int mode;
} subtest_t;

static int selected(const char *name) {
  const char *sel = getenv("ZCC_TEST_FAULTS");
  if (!sel || !*sel)
    return 1;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", sel);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (strcmp(t, name) == 0)
      return 1;
  return 0;
}

int main(void) {
  static const subtest_t tests[] = {
      {"killed", test_killed, 0},
      {"abort", test_abort, 0},
      {"abort", test_abort, 1},
      {"absent", test_absent, 0},
      {"strangers", test_strangers, 0},
  };
  zt_setup("test_faults");
  sh = zt_shared_alloc(sizeof(*sh));
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    if (!selected(tests[i].name))
      continue;
    memset(sh, 0, sizeof(*sh));
    sh->mode = tests[i].mode;
    double t0 = zt_now();
    printf("test_faults: --- %s%s\n", tests[i].name,
           tests[i].mode ? " (recv)" : "");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      tests[i].fn();
      fflush(NULL);
      _exit(0);
    }
    int st = 0;
    double deadline = zt_now() + 240;
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (zt_now() > deadline) {
        zt_fail("%s: runner still running after 240 s; killing it", tests[i].name);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        break;
      }
      zt_sleep(0.02);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      zt_fail("%s: runner ended with status 0x%x", tests[i].name, st);
    printf("test_faults: --- %s done in %.1f s\n", tests[i].name, zt_now() - t0);
  }
  return zt_finish();
}
