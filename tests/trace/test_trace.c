/*
 * Scenarios for the flight recorder and the trace on host communicators;
 * tests/trace/test_trace.py runs them and reads what they write with
 * zcc_trace. Each mode checks what a rank can see itself:
 *
 *   straggler DIR   4 ranks, 49 allreduces; rank 3 then sleeps instead of
 *                   calling op #50. Ranks 0-2 time out in op #50 (ZCC_TIMEOUT
 *                   2000 ms) within ZCC_TIMEOUT + 5 s, and their dumps
 *                   (DIR/fr.R.json) exist when the call returns; the parent
 *                   SIGUSR1s rank 3 (ZCC_FLIGHT_RECORDER_SIGNAL=1), whose dump
 *                   is written by zcc's own thread while the rank sleeps.
 *   summary DIR     straggler without ZCC_FLIGHT_RECORDER_FILE: the caller
 *                   finds the WARN summary of the last operations.
 *   mismatch DIR    4 ranks, 9 allreduces, then rank 2 calls broadcast where
 *                   the others call allreduce (op #10); every rank then
 *                   calls zccCommDump(comm, "DIR/fr.%r.json").
 *   p2p DIR         2 ranks: rank 0 receives from rank 1, which never sends;
 *                   rank 0 times out and its dump has the failed receive.
 *   mix DIR         2 ranks: every collective, a grouped send/recv, step and
 *                   compute markers; ZCC_TRACE_FILE=DIR/trace.%r.json, and
 *                   zccCommDump's argument checks.
 *   fork DIR        one rank traces to DIR/fork.json, forks a child that
 *                   exits through exit() (atexit handlers, stdio flush) in
 *                   the middle; the caller finds 10 ops in valid JSON.
 *   unwritable      ZCC_TRACE_FILE in a directory that does not exist: two
 *                   communicators of one process (zccCommInitAll) compute
 *                   exact allreduces; the warning is counted by the caller.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zcc.h"
#include "ztest.h"

#define TIMEOUT_MS 2000
#define SLACK_S 5.0
#define NFLOAT 1024

typedef struct {
  atomic_int sleeping;
  atomic_int release;
} shared_t;

static shared_t *sh;
static const char *dir;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n)
    n = 0;
  if (s)
    s[n] = '\0';
  fclose(f);
  return s;
}

static void set_paths(int trace) {
  char p[4096];
  snprintf(p, sizeof(p), "%s/fr.%%r.json", dir);
  setenv("ZCC_FLIGHT_RECORDER_FILE", p, 1);
  if (trace) {
    snprintf(p, sizeof(p), "%s/trace.%%r.json", dir);
    setenv("ZCC_TRACE_FILE", p, 1);
  }
  snprintf(p, sizeof(p), "%d", TIMEOUT_MS);
  setenv("ZCC_TIMEOUT", p, 1);
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

/* ---- straggler ---- */

static int straggler_rank(int rank, int nranks, const zccUniqueId *id,
                          void *arg) {
  int summary = arg != NULL;
  set_paths(1);
  setenv("ZCC_FLIGHT_RECORDER_SIGNAL", "1", 1);
  if (summary)
    unsetenv("ZCC_FLIGHT_RECORDER_FILE");
  zt_set_tag("[straggler rank %d]", rank);
  zccComm_t comm;
  if (init(&comm, rank, nranks, id))
    return 1;
  float *buf = calloc(NFLOAT, sizeof(float));
  for (int op = 1; op <= 49; op++) {
    zccResult_t rc =
        zccAllReduce(buf, buf, NFLOAT, zccFloat, zccSum, comm, NULL);
    if (rc != zccSuccess) {
      zt_fail("op #%d: expected zccSuccess, got %s", op, zt_rc_name(rc));
      return 1;
    }
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s/fr.%d.json", dir, rank);
  if (rank == 3) {
    atomic_store(&sh->sleeping, 1);
    double t0 = zt_now();
    while (!atomic_load(&sh->release) && zt_now() - t0 < 60)
      zt_sleep(0.01);
    char *s = slurp(path);
    if (summary) {
      ZT_CHECK(s == NULL, "rank 3: no ZCC_FLIGHT_RECORDER_FILE, yet %s exists",
               path);
      zccCommDestroy(comm);
      free(buf);
      return 0;
    }
    ZT_CHECK(
        s && strstr(s, "\"reason\":\"SIGUSR1\""),
        "rank 3: expected the SIGUSR1 dump %s written while it slept, got %s",
        path, s ? "another file" : "none");
    ZT_CHECK(s && strstr(s, "\"seq\":49,") && !strstr(s, "\"seq\":50,"),
             "rank 3: its dump should end at op #49");
    free(s);
    zccCommDestroy(comm);
    free(buf);
    return 0;
  }
  double t0 = zt_now();
  zccResult_t rc = zccAllReduce(buf, buf, NFLOAT, zccFloat, zccSum, comm, NULL);
  double dt = zt_now() - t0;
  ZT_CHECK(rc == zccTimeout || rc == zccRemoteError,
           "op #50: expected zccTimeout or zccRemoteError, got %s",
           zt_rc_name(rc));
  ZT_CHECK(dt <= TIMEOUT_MS / 1000.0 + SLACK_S,
           "op #50 returned after %.2f s; expected <= %.1f", dt,
           TIMEOUT_MS / 1000.0 + SLACK_S);
  char *s = slurp(path);
  if (summary) {
    ZT_CHECK(s == NULL, "no ZCC_FLIGHT_RECORDER_FILE, yet %s exists", path);
    zccCommDestroy(comm);
    free(buf);
    return 0;
  }
  ZT_CHECK(s != NULL, "the dump %s does not exist when op #50 returns", path);
  ZT_CHECK(s && strstr(s, "\"seq\":50,\"p2p\":0,\"coll\":\"allreduce\","
                          "\"state\":\"failed\""),
           "the dump %s has no failed op #50 allreduce", path);
  if (rank == 0)
    ZT_CHECK(s && strstr(s, "\"wait_peer\":3,"),
             "rank 0's dump does not say it waits on rank 3");
  free(s);
  zt_log("op #50 returned %s after %.2f s", zt_rc_name(rc), dt);
  zccCommDestroy(comm);
  free(buf);
  return 0;
}

static void run_straggler(int summary) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, 4, straggler_rank, summary ? &g : NULL) != 0)
    return;
  if (!zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__,
                    __LINE__))
    return;
  zt_release(&g, &id);
  for (int r = 0; r < 3; r++) {
    int st = zt_wait_rank(&g, r, 60);
    ZT_CHECK(st == 0, "rank %d: exit status 0x%x", r, st);
    g.done[r] = 1;
    g.status[r] = 0;
  }
  ZT_CHECK(atomic_load(&sh->sleeping), "rank 3 never reached its sleep");
  if (summary) {
    atomic_store(&sh->release, 1);
    zt_wait_all(&g, 30, "summary");
    return;
  }
  kill(g.pid[3], SIGUSR1);
  char path[4096];
  snprintf(path, sizeof(path), "%s/fr.3.json", dir);
  double t0 = zt_now();
  struct stat sb;
  while (stat(path, &sb) != 0 && zt_now() - t0 < 10)
    zt_sleep(0.02);
  ZT_CHECK(stat(path, &sb) == 0, "no dump %s 10 s after SIGUSR1", path);
  atomic_store(&sh->release, 1);
  zt_wait_all(&g, 30, "straggler");
}

/* ---- mismatch ---- */

static int mismatch_rank(int rank, int nranks, const zccUniqueId *id,
                         void *arg) {
  (void)arg;
  set_paths(0);
  zt_set_tag("[mismatch rank %d]", rank);
  zccComm_t comm;
  if (init(&comm, rank, nranks, id))
    return 1;
  float *buf = calloc(NFLOAT, sizeof(float));
  for (int op = 1; op <= 9; op++)
    if (zccAllReduce(buf, buf, NFLOAT, zccFloat, zccSum, comm, NULL) !=
        zccSuccess) {
      zt_fail("op #%d failed", op);
      return 1;
    }
  zccResult_t rc =
      rank == 2 ? zccBroadcast(buf, buf, NFLOAT, zccFloat, 0, comm, NULL)
                : zccAllReduce(buf, buf, NFLOAT, zccFloat, zccSum, comm, NULL);
  zt_log("op #10 (%s) returned %s", rank == 2 ? "broadcast" : "allreduce",
         zt_rc_name(rc));
  char path[4096];
  snprintf(path, sizeof(path), "%s/fr.%%r.json", dir);
  ZT_EXPECT_RC(zccSuccess, zccCommDump(comm, path));
  zccCommDestroy(comm);
  free(buf);
  return 0;
}

static void run_mismatch(void) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, 4, mismatch_rank, NULL) != 0)
    return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__,
                   __LINE__))
    zt_release(&g, &id);
  zt_wait_all(&g, 60, "mismatch");
}

/* ---- p2p ---- */

static int p2p_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  set_paths(0);
  zt_set_tag("[p2p rank %d]", rank);
  zccComm_t comm;
  if (init(&comm, rank, nranks, id))
    return 1;
  float *buf = calloc(NFLOAT, sizeof(float));
  ZT_EXPECT_RC(zccSuccess,
               zccAllReduce(buf, buf, NFLOAT, zccFloat, zccSum, comm, NULL));
  if (rank == 0) {
    zccResult_t rc = zccRecv(buf, NFLOAT, zccFloat, 1, comm, NULL);
    ZT_CHECK(rc == zccTimeout,
             "recv from a rank that never sends: expected zccTimeout, got %s",
             zt_rc_name(rc));
    atomic_store(&sh->release, 1);
  } else {
    double t0 = zt_now();
    while (!atomic_load(&sh->release) && zt_now() - t0 < 30)
      zt_sleep(0.01);
  }
  zccCommDestroy(comm);
  free(buf);
  return 0;
}

static void run_p2p(void) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, 2, p2p_rank, NULL) != 0)
    return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__,
                   __LINE__))
    zt_release(&g, &id);
  zt_wait_all(&g, 60, "p2p");
}

/* ---- mix ---- */

typedef struct {
  zccComm_t comm;
  atomic_int stop;
  int dumps, failures;
} dumper_t;

/* zccCommDump from another thread while the rank's own thread runs ops. */
static void *dumper_thread(void *p) {
  dumper_t *d = p;
  char path[4096];
  snprintf(path, sizeof(path), "%s/concurrent.%%r.json", dir);
  while (!atomic_load(&d->stop)) {
    if (zccCommDump(d->comm, path) != zccSuccess)
      d->failures++;
    d->dumps++;
    zt_sleep(0.001);
  }
  return NULL;
}

static int mix_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  set_paths(1);
  zt_set_tag("[mix rank %d]", rank);
  zccComm_t comm;
  if (init(&comm, rank, nranks, id))
    return 1;
  size_t n = 16384;
  float *a = calloc(n * (size_t)nranks, sizeof(float));
  float *b = calloc(n * (size_t)nranks, sizeof(float));
  dumper_t dumper = {.comm = comm, .dumps = 0, .failures = 0};
  atomic_init(&dumper.stop, 0);
  pthread_t dumper_tid;
  pthread_create(&dumper_tid, NULL, dumper_thread, &dumper);
  for (int step = 0; step < 3; step++) {
    char name[32];
    snprintf(name, sizeof(name), "step %d", step);
    ZT_EXPECT_RC(zccSuccess, zccTraceMark("step", name, 1));
    ZT_EXPECT_RC(zccSuccess, zccTraceMark("compute", "forward", 1));
    zt_sleep(0.005);
    ZT_EXPECT_RC(zccSuccess, zccTraceMark("compute", "forward", 0));
    ZT_EXPECT_RC(zccSuccess,
                 zccAllReduce(a, b, n, zccFloat, zccSum, comm, NULL));
    ZT_EXPECT_RC(zccSuccess, zccBroadcast(a, b, n, zccFloat, 1, comm, NULL));
    ZT_EXPECT_RC(zccSuccess,
                 zccReduce(a, b, n, zccInt32, zccMax, 0, comm, NULL));
    ZT_EXPECT_RC(zccSuccess, zccAllGather(a, b, n, zccFloat, comm, NULL));
    ZT_EXPECT_RC(zccSuccess,
                 zccReduceScatter(a, b, n, zccFloat, zccSum, comm, NULL));
    ZT_EXPECT_RC(zccSuccess, zccAlltoAll(a, b, n, zccFloat, comm, NULL));
    int peer = 1 - rank;
    ZT_EXPECT_RC(zccSuccess, zccGroupStart());
    ZT_EXPECT_RC(zccSuccess, zccSend(a, n, zccFloat, peer, comm, NULL));
    ZT_EXPECT_RC(zccSuccess, zccRecv(b, n, zccFloat, peer, comm, NULL));
    ZT_EXPECT_RC(zccSuccess, zccGroupEnd());
    ZT_EXPECT_RC(zccSuccess, zccTraceMark("step", name, 0));
  }
  atomic_store(&dumper.stop, 1);
  pthread_join(dumper_tid, NULL);
  ZT_CHECK(dumper.dumps > 0 && dumper.failures == 0,
           "zccCommDump from a second thread: %d of %d calls failed",
           dumper.failures, dumper.dumps);
  /* Argument checks of the new entry points. */
  ZT_EXPECT_RC(zccInvalidArgument, zccCommDump(NULL, "/tmp/x"));
  ZT_EXPECT_RC(zccInvalidArgument, zccTraceMark(NULL, "x", 1));
  char bad[4096];
  snprintf(bad, sizeof(bad), "%s/no-such-dir/fr.json", dir);
  ZT_EXPECT_RC(zccSystemError, zccCommDump(comm, bad));
  ZT_EXPECT_RC(zccSuccess,
               zccCommDump(comm, NULL)); /* ZCC_FLIGHT_RECORDER_FILE */
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  ZT_EXPECT_RC(zccInvalidUsage, zccCommDump(comm, bad)); /* destroyed */
  free(a);
  free(b);
  return 0;
}

static void run_mix(void) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, 2, mix_rank, NULL) != 0)
    return;
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__,
                   __LINE__))
    zt_release(&g, &id);
  zt_wait_all(&g, 60, "mix");
}

/* ---- unwritable ---- */

typedef struct {
  zccComm_t comm;
  int rank;
  int ok;
} thr_arg_t;

static void *unwritable_thread(void *p) {
  thr_arg_t *a = p;
  float buf[64];
  a->ok = 1;
  for (int it = 0; it < 20; it++) {
    for (int i = 0; i < 64; i++)
      buf[i] = (float)(a->rank + 1);
    if (zccAllReduce(buf, buf, 64, zccFloat, zccSum, a->comm, NULL) !=
        zccSuccess)
      a->ok = 0;
    for (int i = 0; i < 64; i++)
      if (buf[i] != 3.0f)
        a->ok = 0;
  }
  return NULL;
}

static void run_unwritable(void) {
  setenv("ZCC_TRACE_FILE", "/nonexistent-zcc-dir/trace.%r.json", 1);
  setenv("ZCC_DEVICE", "host", 1);
  zccComm_t comms[2];
  if (!ZT_EXPECT_RC(zccSuccess, zccCommInitAll(comms, 2, NULL)))
    return;
  pthread_t t[2];
  thr_arg_t a[2];
  for (int r = 0; r < 2; r++) {
    a[r].comm = comms[r];
    a[r].rank = r;
    pthread_create(&t[r], NULL, unwritable_thread, &a[r]);
  }
  for (int r = 0; r < 2; r++) {
    pthread_join(t[r], NULL);
    ZT_CHECK(a[r].ok,
             "rank %d: allreduces with an unwritable trace path failed or were "
             "wrong",
             r);
    zccCommDestroy(comms[r]);
  }
}

/* ---- fork ---- */

static void run_fork(void) {
  char p[4096];
  snprintf(p, sizeof(p), "%s/fork.json", dir);
  setenv("ZCC_TRACE_FILE", p, 1);
  setenv("ZCC_DEVICE", "host", 1);
  zccComm_t comm;
  if (!ZT_EXPECT_RC(zccSuccess, zccCommInitAll(&comm, 1, NULL)))
    return;
  float buf[16] = {0};
  for (int i = 0; i < 5; i++)
    ZT_EXPECT_RC(zccSuccess,
                 zccAllReduce(buf, buf, 16, zccFloat, zccSum, comm, NULL));
  pid_t pid = fork();
  if (pid == 0)
    exit(0); /* flushes stdio and runs atexit handlers in the child */
  int st = 0;
  waitpid(pid, &st, 0);
  ZT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status 0x%x", st);
  for (int i = 0; i < 5; i++)
    ZT_EXPECT_RC(zccSuccess,
                 zccAllReduce(buf, buf, 16, zccFloat, zccSum, comm, NULL));
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
}

int main(int argc, char **argv) {
  zt_setup("test_trace");
  if (argc < 2 || (strcmp(argv[1], "unwritable") != 0 && argc < 3)) {
    fprintf(stderr, "usage: test_trace straggler|summary|mismatch|p2p|mix DIR "
                    "| unwritable\n");
    return 2;
  }
  dir = argc > 2 ? argv[2] : ".";
  sh = zt_shared_alloc(sizeof(*sh));
  if (!strcmp(argv[1], "straggler"))
    run_straggler(0);
  else if (!strcmp(argv[1], "summary"))
    run_straggler(1);
  else if (!strcmp(argv[1], "mismatch"))
    run_mismatch();
  else if (!strcmp(argv[1], "mix"))
    run_mix();
  else if (!strcmp(argv[1], "fork"))
    run_fork();
  else if (!strcmp(argv[1], "p2p"))
    run_p2p();
  else if (!strcmp(argv[1], "unwritable"))
    run_unwritable();
  else {
    fprintf(stderr, "test_trace: unknown mode %s\n", argv[1]);
    return 2;
  }
  return zt_finish();
}
