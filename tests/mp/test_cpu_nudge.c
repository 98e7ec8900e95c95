/*
 * Unbound host ranks that the scheduler put on one CPU (exec/host.c's
 * nudge). Two ranks with every CPU in their masks (so "sharing them", not
 * oversubscribed) make a communicator, then each pins itself to the first
 * CPU of its mask for a moment and restores the mask: both now run on that
 * CPU, where the kernel's balancer tends to leave two busy tasks. They run
 * 8 B allreduces (exact), and
 *   - with ZCC_CPU_NUDGE unset (1): the median of the last 2000 of 4000
 *     calls must be under 3 us (two CPUs: about 0.4 us on the 2-core VM;
 *     one CPU, each call two context switches: about 6 us) in one of 3
 *     such rounds, and each rank's mask is what it was;
 *   - with ZCC_CPU_NUDGE=0 the same runs and only reports its median (the
 *     balancer may or may not part them);
 *   - ZCC_CPU_NUDGE=2 is refused at init with zccInvalidArgument naming it.
 * And ranks that outnumber the CPUs (twice as many, unbound: oversubscribed)
 * all put on the mask's first CPU for a moment: their waits take each back
 * to its home CPU (the mask's CPU at its rank, modulo the CPUs), so that
 * after 8 B allreduces (exact) every rank reads its home CPU after at least
 * 90% of the last TAIL calls in one of 3 rounds, its mask unchanged; with
 * ZCC_CPU_NUDGE=0 that is only reported. Up to 8 CPUs (16 ranks).
 * Skipped where the process may use fewer than 2 CPUs; under a sanitizer the
 * time is only reported. Each case in its own
 * runner: zcc reads its variables once per process.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "zcc.h"

#define CALLS 4000
#define TAIL 2000
#define LIMIT_US 3.0
#define ROUNDS 3
/* Sanitizer builds run each call 5-20x slower: there the time is only reported. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLOW_BUILD 1
#else
#define SLOW_BUILD 0
#endif

typedef struct {
  zt_barrier_t bar;
  double median_us[1]; /* rank 0's, each round */
} shared_t;

static shared_t *sh;
static int expect_fast;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int colocated_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[nudge%s rank %d]", expect_fast ? "" : "=0", rank);
  cpu_set_t mask, one;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    zt_fail("sched_getaffinity failed");
    return 1;
  }
  zccComm_t comm;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (!zt_expect_rc(zccSuccess, rc, "init", __FILE__, __LINE__)) return 1;
  /* both onto the mask's first CPU, then the whole mask again */
  int first = 0;
  while (!CPU_ISSET(first, &mask)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0 ||
      zt_barrier_wait(&sh->bar, nranks, 30) != 0 ||
      sched_setaffinity(0, sizeof(mask), &mask) != 0 ||
      zt_barrier_wait(&sh->bar, nranks, 30) != 0) {
    zt_fail("could not put both ranks on CPU %d", first);
    return 1;
  }
  static double t[CALLS];
  float v[2], out[2];
  long wrong = 0;
  double med = 0;
  /* up to ROUNDS rounds (both ranks alike: the first's median decides for
     both through sh), in case a move drew the same other CPU for both */
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < CALLS; i++) {
      v[0] = (float)(rank + i % 7);
      v[1] = (float)(2 * rank - i % 5);
      double t0 = zt_now();
      rc = zccAllReduce(v, out, 2, zccFloat32, zccSum, comm, NULL);
      t[i] = zt_now() - t0;
      if (rc != zccSuccess) break;
      if (out[0] != (float)(1 + 2 * (i % 7)) || out[1] != (float)(2 - 2 * (i % 5))) wrong++;
    }
    if (rc != zccSuccess) break;
    qsort(t + CALLS - TAIL, TAIL, sizeof(double), cmp_double);
    med = t[CALLS - TAIL / 2] * 1e6;
    zt_log("round %d: 8 B allreduce, median of the last %d of %d calls: %.2f us (CPU %d now)",
           round + 1, TAIL, CALLS, med, sched_getcpu());
    if (rank == 0) sh->median_us[0] = med;
    if (zt_barrier_wait(&sh->bar, nranks, 30) != 0) {
      zt_fail("a rank did not finish round %d", round + 1);
      return 1;
    }
    int done = sh->median_us[0] < LIMIT_US || !expect_fast || SLOW_BUILD;
    if (zt_barrier_wait(&sh->bar, nranks, 30) != 0) {
      zt_fail("a rank did not finish round %d", round + 1);
      return 1;
    }
    if (done) break;
  }
  if (zt_expect_rc(zccSuccess, rc, "allreduce", __FILE__, __LINE__)) {
    ZT_CHECK(wrong == 0, "%ld wrong results", wrong);
    if (expect_fast && !SLOW_BUILD)
      ZT_CHECK(med < LIMIT_US,
               "median %.2f us: the ranks stayed on one CPU (two CPUs: well under %.1f us)",
               med, LIMIT_US);
    cpu_set_t after;
    ZT_CHECK(sched_getaffinity(0, sizeof(after), &after) == 0 && CPU_EQUAL(&after, &mask),
             "the rank's affinity mask changed");
  }
  zccCommDestroy(comm);
  return 0;
}

/* All on the mask's first CPU, then the whole mask again (each rank). */
static int pile_up(int nranks, const cpu_set_t *mask) {
  cpu_set_t one;
  int first = 0;
  while (!CPU_ISSET(first, mask)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0 ||
      zt_barrier_wait(&sh->bar, nranks, 30) != 0 ||
      sched_setaffinity(0, sizeof(*mask), mask) != 0 ||
      zt_barrier_wait(&sh->bar, nranks, 30) != 0) {
    zt_fail("could not put the ranks on CPU %d", first);
    return -1;
  }
  return 0;
}

static int homed_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[home%s rank %d of %d]", expect_fast ? "" : " nudge=0", rank, nranks);
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    zt_fail("sched_getaffinity failed");
    return 1;
  }
  int want = rank % CPU_COUNT(&mask), home = -1;
  for (int c = 0; c < CPU_SETSIZE && home < 0; c++)
    if (CPU_ISSET(c, &mask) && want-- == 0) home = c;
  zccComm_t comm;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (!zt_expect_rc(zccSuccess, rc, "init", __FILE__, __LINE__)) return 1;
  if (pile_up(nranks, &mask) != 0) return 1;
  float v[2], out[2];
  long wrong = 0;
  int at_home = 0, calls = CALLS / 4, tail = TAIL / 4, ok = 0;
  for (int round = 0; round < ROUNDS && rc == zccSuccess; round++) {
    at_home = 0;
    for (int i = 0; i < calls; i++) {
      v[0] = (float)(rank + i % 7);
      v[1] = 1.0f;
      rc = zccAllReduce(v, out, 2, zccFloat32, zccSum, comm, NULL);
      if (rc != zccSuccess) break;
      float s0 = 0;
      for (int q = 0; q < nranks; q++) s0 += (float)(q + i % 7);
      if (out[0] != s0 || out[1] != (float)nranks) wrong++;
      if (i >= calls - tail) at_home += sched_getcpu() == home;
    }
    zt_log("round %d: on home CPU %d after %d of the last %d calls", round + 1, home, at_home,
           tail);
    ok = at_home * 10 >= tail * 9;
    /* every rank alike: all must be home for the round to count */
    if (!ok) sh->median_us[0] = 1;
    if (zt_barrier_wait(&sh->bar, nranks, 60) != 0) return 1;
    int all = sh->median_us[0] == 0;
    if (zt_barrier_wait(&sh->bar, nranks, 60) != 0) return 1;
    if (rank == 0) sh->median_us[0] = 0;
    if (zt_barrier_wait(&sh->bar, nranks, 60) != 0) return 1;
    if (all) break;
  }
  if (zt_expect_rc(zccSuccess, rc, "allreduce", __FILE__, __LINE__)) {
    ZT_CHECK(wrong == 0, "%ld wrong results", wrong);
    if (expect_fast && !SLOW_BUILD)
      ZT_CHECK(ok, "on home CPU %d after only %d of the last %d calls", home, at_home, tail);
    cpu_set_t after;
    ZT_CHECK(sched_getaffinity(0, sizeof(after), &after) == 0 && CPU_EQUAL(&after, &mask),
             "the rank's affinity mask changed");
  }
  zccCommDestroy(comm);
  return 0;
}

static int bad_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zt_set_tag("[nudge=2 rank %d]", rank);
  zccComm_t comm = NULL;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (zt_expect_rc(zccInvalidArgument, rc, "init with ZCC_CPU_NUDGE=2", __FILE__, __LINE__))
    ZT_CHECK(strstr(zccGetLastError(NULL), "ZCC_CPU_NUDGE") != NULL,
             "the error does not name ZCC_CPU_NUDGE: \"%s\"", zccGetLastError(NULL));
  return 0;
}

/* The ranks are forked before zccGetUniqueId starts the bootstrap root's
   thread (a sanitizer refuses threads after a multi-threaded fork). */
static void run(zt_rank_fn fn, int nranks) {
  zt_group_t g;
  zccUniqueId id;
  if (zt_spawn(&g, nranks, fn, NULL) != 0) {
    zt_fail("could not start the ranks");
    return;
  }
  if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__))
    zt_release(&g, &id);
  zt_wait_all(&g, 60, "ranks");
}

int main(void) {
  zt_setup("test_cpu_nudge");
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || CPU_COUNT(&mask) < 2) {
    zt_skip("fewer than 2 CPUs in this process's mask");
    return zt_finish();
  }
  sh = zt_shared_alloc(sizeof(*sh));
  int over = CPU_COUNT(&mask) <= 8 ? 2 * CPU_COUNT(&mask) : 0; /* oversubscribed */
  static const struct {
    const char *nudge;
    zt_rank_fn fn;
    int fast, over;
  } cases[] = {{NULL, colocated_rank, 1, 0}, {"0", colocated_rank, 0, 0},
               {"2", bad_rank, 0, 0},        {NULL, homed_rank, 1, 1},
               {"0", homed_rank, 0, 1}};
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    if (cases[k].over && !over) {
      zt_skip("more than 8 CPUs: the oversubscribed case would take too many ranks");
      continue;
    }
    memset(sh, 0, sizeof(*sh));
    pid_t pid = fork();
    if (pid == 0) {
      if (cases[k].nudge)
        setenv("ZCC_CPU_NUDGE", cases[k].nudge, 1);
      else
        unsetenv("ZCC_CPU_NUDGE");
      expect_fast = cases[k].fast;
      run(cases[k].fn, cases[k].over ? over : 2);
      fflush(NULL);
      _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      zt_fail("case ZCC_CPU_NUDGE=%s: runner ended with status 0x%x",
              cases[k].nudge ? cases[k].nudge : "(unset)", st);
  }
  return zt_finish();
}
