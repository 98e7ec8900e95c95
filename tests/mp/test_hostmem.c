/*
 * zccMemHostAlloc and the direct allreduce on it (hostmem.h), 2, 3 and 4
 * ranks over shared memory:
 *   - bad input to zccMemHostAlloc / zccMemHostFree: a clear error, and the
 *     allocator still works after it;
 *   - buffers at an offset inside their regions, counts from 1 MiB (the
 *     threshold) to 3 MiB + 4 B and odd, float sum/max/min/avg and int64
 *     sum, out of place and in place, fresh inputs and poisoned outputs each
 *     round, every element exact; the same call again runs the kept plan;
 *   - that the direct path ran: every call says so in the log (ZCC_DEBUG=INFO,
 *     COLL, to a file per rank), and this process maps its peers' regions
 *     (/proc/self/maps counts the memfds); a staged run does neither;
 *   - one rank's buffers from malloc: every rank stages (exact, no peer
 *     mapped); ZCC_HOSTMEM_DIRECT=0 stages too;
 *   - new regions after the old ones are freed: the new ones are mapped,
 *     never the old pages;
 *   - a rank that dies before the call: the others get an error, not a hang.
 * And the two-shot allreduce through shared staging regions (ZCC_ALGO=twoshot,
 * ordinary buffers, 4 KiB chunks so that most calls take several):
 *   - exact at counts inside one chunk, at its edge and across many, every
 *     case above, in and out of place; the regions are made and mapped once
 *     (one log line, n memfd mappings) and unmapped at destroy;
 *   - one rank's chunk differs (ZCC_TWOSHOT_CHUNK_BYTES): no rank can use
 *     the peers' regions, every rank says so once and runs the ring, exact,
 *     with nothing left mapped;
 *   - a rank that dies after the regions were set up: an error, not a hang.
 * And, with every rank on two CPUs (more ranks than CPUs), the one-barrier
 * allreduce on the regions' boards for small inputs, between the gather at
 * rank 0 and the two-shot (the default choices, 3 and 4 ranks):
 *   - exact at every case, in and out of place, the board, the gather and
 *     the two-shot interleaved (their plans' INFO lines say each ran);
 *   - a rank that dies after the regions were set up: the board's wait ends
 *     in an error that names it, not a hang;
 *   - a rank that stalls: ZCC_TIMEOUT ends the others' wait with an error
 *     that names the rank waited for;
 *   - one rank's count differs, where both counts run on the board and where
 *     the other count runs the gather (messages): every rank fails at once
 *     with zccInvalidUsage, and the message names both calls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "ztest_allreduce.h"
#include "zcc.h"

#define MAXN 4
#define BIG ((3u << 20) + 4) /* bytes */

typedef struct {
  zt_barrier_t bar;
} shared_t;

static shared_t *sh;

enum {
  MODE_DIRECT,
  MODE_ONE_MALLOC,
  MODE_DISABLED,
  MODE_DEATH,
  MODE_TWOSHOT,
  MODE_TWOSHOT_CHUNKS,
  MODE_TWOSHOT_DEATH,
  MODE_BOARD,
  MODE_BOARD_DEATH,
  MODE_BOARD_STALL,
  MODE_BOARD_MISMATCH,
  MODE_BOARD_MISMATCH_GATHER,
  MODE_NUM
};
static const char *mode_names[MODE_NUM] = {
    "shared buffers",  "one rank's buffers from malloc", "ZCC_HOSTMEM_DIRECT=0", "a rank dies",
    "two-shot",        "two-shot, one rank's chunk differs", "two-shot, a rank dies",
    "2 CPUs: board, gather, two-shot", "2 CPUs: a rank dies", "2 CPUs: a rank stalls",
    "2 CPUs: one rank's count differs (board and board)",
    "2 CPUs: one rank's count differs (board and gather)"};

/* The memfds of zccMemHostAlloc (kind "hostmem") or of the two-shot
   allreduce's regions ("stage") this process maps, its own and its peers'. */
static int mapped(const char *kind) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512], name[64];
  snprintf(name, sizeof(name), "memfd:zcc-%s", kind);
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, name)) n++;
  fclose(f);
  return n;
}
static int mapped_regions(void) { return mapped("hostmem"); }

/* This rank's log (ZCC_DEBUG_FILE, set by the runner): the lines that
   contain what, and those that say an allreduce ran in place on shared host
   memory. */
static char log_dir[64];

static int log_lines(const char *what) { return zt_log_count(log_dir, "hostmem", what); }
static int direct_runs(void) { return log_lines("in place on shared host memory"); }


/* The first ncases cases at every size, out of place and in place, twice
   each (the second call runs the kept plan): the wrong results. */
static long sweep(zccComm_t comm, int rank, int nranks, size_t ncases, const size_t *sizes,
                  size_t nsizes, char *sb, char *rb, int *calls) {
  long wrong = 0;
  for (size_t ci = 0; ci < ncases; ci++)
    for (size_t si = 0; si < nsizes; si++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (int round = 0; round < 2; round++) {
          wrong += zt_ar_call(comm, rank, nranks, &zt_ar_cases[ci], sb, rb, sizes[si], inplace,
                            round + (int)ci);
          (*calls)++;
        }
  return wrong;
}

static int sync_ranks(int rank, int nranks) {
  if (zt_barrier_wait(&sh->bar, nranks, 60) == 0) return 0;
  zt_fail("rank %d: barrier timed out", rank);
  return -1;
}

static void bad_input(void) {
  void *p = NULL;
  ZT_EXPECT_RC(zccInvalidArgument, zccMemHostAlloc(NULL, 4096));
  ZT_EXPECT_RC(zccInvalidArgument, zccMemHostAlloc(&p, 0));
  ZT_CHECK(p == NULL, "zccMemHostAlloc(size 0) wrote the pointer");
  ZT_EXPECT_RC(zccInvalidArgument, zccMemHostAlloc(&p, SIZE_MAX - 10));
  ZT_EXPECT_RC(zccInvalidArgument, zccMemHostFree(NULL));
  char *m = malloc(64);
  ZT_EXPECT_RC(zccInvalidArgument, zccMemHostFree(m));
  free(m);
  if (ZT_EXPECT_RC(zccSuccess, zccMemHostAlloc(&p, 100))) {
    memset(p, 1, 4096); /* a whole page: the size is rounded up */
    ZT_EXPECT_RC(zccInvalidArgument, zccMemHostFree((char *)p + 8));
    ZT_EXPECT_RC(zccSuccess, zccMemHostFree(p));
    ZT_EXPECT_RC(zccInvalidArgument, zccMemHostFree(p)); /* twice */
  }
  ZT_CHECK(mapped_regions() == 0, "regions still mapped after zccMemHostFree: %d",
           mapped_regions());
}

/* The staging modes' end: destroy, after which no region stays mapped. */
static int destroy_unmapped(zccComm_t comm, int rank, int nranks, int mode) {
  if (sync_ranks(rank, nranks)) return 1;
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  ZT_CHECK(mapped("stage") == 0, "rank %d: %s: %d regions mapped after destroy", rank,
           mode_names[mode], mapped("stage"));
  return 0;
}

/* The two-shot modes: ordinary buffers, ZCC_ALGO=twoshot (set by the runner). */
static int twoshot_main(zccComm_t comm, int rank, int nranks, int mode) {
  size_t region = (1u << 20) + 8192;
  char *sb = malloc(region), *rb = malloc(region);
  if (!sb || !rb) return 1;
  /* 4 KiB chunks: inside one, at its edge, just past it, across many */
  static const size_t sizes[] = {8, 24, 4096, 4104, 16392, (1u << 20) + 24};
  size_t ncases = mode == MODE_TWOSHOT ? zt_ar_ncases : 1;
  int calls = 0;
  long wrong = sweep(comm, rank, nranks, ncases, sizes, sizeof(sizes) / sizeof(sizes[0]), sb,
                     rb, &calls);
  ZT_CHECK(!wrong, "rank %d: %s: %ld wrong results in %d calls", rank, mode_names[mode],
           wrong, calls);
  int made = log_lines("two-shot and board allreduces through every rank's");
  int dropped = log_lines("could not map the peers' staging regions");
  int maps = mapped("stage");
  if (mode == MODE_TWOSHOT_CHUNKS) {
    ZT_CHECK(made == 0 && dropped == 1 && maps == 0,
             "rank %d: %s: the regions were kept %d time(s), dropped %d time(s) (expected 0 "
             "and 1), %d mapped (expected 0)", rank, mode_names[mode], made, dropped, maps);
  } else {
    ZT_CHECK(made == 1 && dropped == 0 && maps == nranks,
             "rank %d: %s: the regions were kept %d time(s), dropped %d time(s) (expected 1 "
             "and 0), %d mapped (expected %d: its own and its peers')", rank,
             mode_names[mode], made, dropped, maps, nranks);
  }
  if (mode == MODE_TWOSHOT_DEATH) {
    if (sync_ranks(rank, nranks)) return 1;
    if (rank == nranks - 1) _exit(0); /* gone before the next call */
    double t0 = zt_now();
    zccResult_t got = zccAllReduce(sb, rb, 1u << 16, zccFloat32, zccSum, comm, NULL);
    ZT_CHECK(got != zccSuccess && zt_now() - t0 < 10,
             "rank %d: two-shot allreduce with a dead peer returned %s after %.1f s", rank,
             zt_rc_name(got), zt_now() - t0);
    zccCommAbort(comm);
  } else if (destroy_unmapped(comm, rank, nranks, mode)) {
    return 1;
  }
  free(sb);
  free(rb);
  return 0;
}

/* The board modes: every rank on the same two CPUs (one where the runner has
   only one), the default choices (set by the runner). */
static int pinned;

static int board_main(zccComm_t comm, int rank, int nranks, int mode) {
  size_t region = (1u << 20) + 8192;
  char *sb = malloc(region), *rb = malloc(region);
  if (!sb || !rb) return 1;
  /* The board's limit (2 KiB, nranks x bytes within 16 KiB) and just past
     it (the gather), then the two-shot's sizes (4 KiB chunks). */
  size_t lim = (16384 / (size_t)nranks < 2048 ? 16384 / (size_t)nranks : 2048) / 8 * 8;
  const size_t sizes[] = {8, 24, lim, lim + 8, 16392, (1u << 20) + 24};
  size_t ncases = mode == MODE_BOARD ? zt_ar_ncases : 1;
  int calls = 0;
  long wrong = sweep(comm, rank, nranks, ncases, sizes, sizeof(sizes) / sizeof(sizes[0]), sb,
                     rb, &calls);
  ZT_CHECK(!wrong, "rank %d: %s: %ld wrong results in %d calls", rank, mode_names[mode],
           wrong, calls);
  int board = log_lines("on the staging regions' boards");
  int two = log_lines("through the shared staging regions");
  /* On one CPU the model leaves the two-shot out (no CPU to share its work). */
  ZT_CHECK(board >= 1 && (two >= 1 || pinned < 2) &&
               log_lines("two-shot and board allreduces through") == 1,
           "rank %d: %s: %d board plans, %d two-shot plans, regions kept %d time(s) (expected "
           "at least 1, 1 and exactly 1)", rank, mode_names[mode], board, two,
           log_lines("two-shot and board allreduces through"));
  if (mode == MODE_BOARD_MISMATCH || mode == MODE_BOARD_MISMATCH_GATHER) {
    if (sync_ranks(rank, nranks)) return 1;
    size_t mine = 2, other = mode == MODE_BOARD_MISMATCH ? 3 : 1024;
    size_t count = rank == nranks - 1 ? other : mine;
    double t0 = zt_now();
    zccResult_t got = zccAllReduce(sb, rb, count, zccFloat32, zccSum, comm, NULL);
    double took = zt_now() - t0;
    const char *err = zccGetLastError(comm);
    char a[48], b[48];
    snprintf(a, sizeof(a), "allreduce(count=%zu,", mine);
    snprintf(b, sizeof(b), "allreduce(count=%zu,", other);
    ZT_CHECK(got == zccInvalidUsage && took < 5 && strstr(err, a) && strstr(err, b),
             "rank %d: %s: %s after %.1f s (%s), expected zccInvalidUsage at once naming "
             "%s and %s", rank, mode_names[mode], zt_rc_name(got), took, err, a, b);
    zccCommAbort(comm);
  } else if (mode == MODE_BOARD_DEATH || mode == MODE_BOARD_STALL) {
    int gone = nranks - 1;
    if (sync_ranks(rank, nranks)) return 1;
    if (rank == gone) {
      if (mode == MODE_BOARD_DEATH) _exit(0); /* gone before the next call */
      sleep(8); /* past the others' ZCC_TIMEOUT (2 s) */
      zccCommAbort(comm);
      return 0;
    }
    double t0 = zt_now();
    zccResult_t got = zccAllReduce(sb, rb, 4, zccFloat32, zccSum, comm, NULL);
    double took = zt_now() - t0;
    char want[32];
    snprintf(want, sizeof(want), "rank %d", gone);
    const char *err = zccGetLastError(comm);
    ZT_CHECK(got != zccSuccess && took < 10 && strstr(err, want),
             "rank %d: %s: the board allreduce returned %s after %.1f s (%s), expected an "
             "error naming %s", rank, mode_names[mode], zt_rc_name(got), took, err, want);
    if (mode == MODE_BOARD_STALL)
      ZT_CHECK(got == zccTimeout && took >= 1.5, "rank %d: %s: %s after %.1f s, expected "
               "zccTimeout after ZCC_TIMEOUT (2 s)", rank, mode_names[mode], zt_rc_name(got),
               took);
    zccCommAbort(comm);
  } else if (destroy_unmapped(comm, rank, nranks, mode)) {
    return 1;
  }
  free(sb);
  free(rb);
  return 0;
}

static int rank_main(int rank, int nranks, const zccUniqueId *id, void *arg) {
  int mode = *(int *)arg;
  if (mode == MODE_TWOSHOT_CHUNKS && rank == nranks - 1)
    setenv("ZCC_TWOSHOT_CHUNK_BYTES", "8192", 1);
  zccComm_t comm;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("rank %d: init: %s", rank, zt_rc_name(rc));
    return 1;
  }
  if (mode >= MODE_BOARD) return board_main(comm, rank, nranks, mode);
  if (mode >= MODE_TWOSHOT) return twoshot_main(comm, rank, nranks, mode);
  int shared = !(mode == MODE_ONE_MALLOC && rank == nranks - 1);
  char *sregion = NULL, *rregion = NULL;
  size_t region = BIG + 8192;
  if (shared) {
    if (!ZT_EXPECT_RC(zccSuccess, zccMemHostAlloc((void **)&sregion, region)) ||
        !ZT_EXPECT_RC(zccSuccess, zccMemHostAlloc((void **)&rregion, region)))
      return 1;
  } else {
    sregion = malloc(region);
    rregion = malloc(region);
  }
  /* Not at the regions' starts: the offsets travel too. */
  char *sb = sregion + 4096 + 8, *rb = rregion + 8;
  if (mode == MODE_DEATH) {
    if (rank == nranks - 1) _exit(0); /* gone before the call */
    zt_ar_dead_peer(comm, rank, sb, rb);
    zccCommAbort(comm);
    return 0;
  }
  int calls = 0;
  static const size_t sizes[] = {1u << 20, (1u << 20) + 12, BIG};
  long wrong = sweep(comm, rank, nranks, zt_ar_ncases, sizes,
                     sizeof(sizes) / sizeof(sizes[0]), sb, rb, &calls);
  ZT_CHECK(!wrong, "rank %d: %s: %ld wrong results", rank, mode_names[mode], wrong);
  int runs = direct_runs();
  ZT_CHECK(runs == (mode == MODE_DIRECT ? calls : 0),
           "rank %d: %s: %d of %d allreduces ran in place on shared host memory", rank,
           mode_names[mode], runs, calls);
  /* Peers' regions mapped here only when the direct path ran. */
  int maps = mapped_regions(), own = shared ? 2 : 0;
  int want = mode == MODE_DIRECT ? own + 2 * (nranks - 1) : own;
  ZT_CHECK(maps == want, "rank %d: %s: %d zccMemHostAlloc regions mapped, expected %d", rank,
           mode_names[mode], maps, want);
  if (mode == MODE_DIRECT) {
    /* New regions in place of the old ones: the peers map the new pages. */
    if (sync_ranks(rank, nranks)) return 1;
    ZT_EXPECT_RC(zccSuccess, zccMemHostFree(sregion));
    ZT_EXPECT_RC(zccSuccess, zccMemHostFree(rregion));
    if (!ZT_EXPECT_RC(zccSuccess, zccMemHostAlloc((void **)&sregion, region)) ||
        !ZT_EXPECT_RC(zccSuccess, zccMemHostAlloc((void **)&rregion, region)))
      return 1;
    sb = sregion + 8;
    rb = rregion + 4096;
    wrong = 0;
    for (int round = 0; round < 2; round++)
      wrong += zt_ar_call(comm, rank, nranks, &zt_ar_cases[0], sb, rb, sizes[1], round, 20 + round);
    ZT_CHECK(!wrong, "rank %d: new regions: %ld wrong results", rank, wrong);
    ZT_CHECK(direct_runs() == calls + 2, "rank %d: new regions: %d of %d allreduces in place",
             rank, direct_runs() - calls, 2);
  }
  if (sync_ranks(rank, nranks)) return 1;
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  zt_log_unlink(log_dir, "hostmem");
  if (shared) {
    ZT_EXPECT_RC(zccSuccess, zccMemHostFree(sregion));
    ZT_EXPECT_RC(zccSuccess, zccMemHostFree(rregion));
    /* The communicator unmapped its peers' regions when it was destroyed. */
    ZT_CHECK(mapped_regions() == 0, "rank %d: %d regions mapped after destroy and free", rank,
             mapped_regions());
  } else {
    free(sregion);
    free(rregion);
  }
  return 0;
}

int main(int argc, char **argv) {
  zt_setup("test_hostmem");
  sh = zt_shared_alloc(sizeof(*sh));
  int quick = zt_quick(argc, argv);
  for (int mode = 0; mode < MODE_NUM; mode++)
    for (int n = 2; n <= MAXN; n++) {
      if (quick && n == 3 && mode != MODE_DIRECT && mode != MODE_BOARD) continue;
      if (mode >= MODE_BOARD && n == 2) continue; /* the board needs more than 2 ranks */
      memset(sh, 0, sizeof(*sh));
      printf("test_hostmem: --- %d ranks, %s\n", n, mode_names[mode]);
      fflush(NULL);
      /* A runner per set: zcc reads its parameters once per process. */
      pid_t pid = fork();
      if (pid == 0) {
        setenv("ZCC_HOSTMEM_DIRECT", mode == MODE_DISABLED ? "0" : "1", 1);
        if (mode >= MODE_TWOSHOT) {
          if (mode < MODE_BOARD) setenv("ZCC_ALGO", "twoshot", 1);
          setenv("ZCC_TWOSHOT_CHUNK_BYTES", "4096", 1);
        }
        if (mode >= MODE_BOARD) { /* every rank on this runner's first two CPUs */
          cpu_set_t set, two;
          CPU_ZERO(&two);
          if (sched_getaffinity(0, sizeof(set), &set) == 0)
            for (int c = 0; c < CPU_SETSIZE && pinned < 2; c++)
              if (CPU_ISSET(c, &set)) {
                CPU_SET(c, &two);
                pinned++;
              }
          if (sched_setaffinity(0, sizeof(two), &two) != 0) zt_log("cannot pin to two CPUs");
        }
        if (zt_log_dir_make(log_dir, sizeof(log_dir), "hostmem") != 0) _exit(1);
        if (mode == MODE_DEATH || mode == MODE_TWOSHOT_DEATH || mode == MODE_BOARD_DEATH)
          setenv("ZCC_TIMEOUT", "20000", 1);
        if (mode == MODE_BOARD_STALL) setenv("ZCC_TIMEOUT", "2000", 1);
        zt_group_t g;
        zccUniqueId id;
        if (zt_spawn(&g, n, rank_main, &mode) == 0) {
          if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__,
                           __LINE__))
            zt_release(&g, &id);
          zt_wait_all(&g, 240, mode_names[mode]);
        }
        zt_log_dir_remove(log_dir); /* with what the ranks left: the dead rank's log */
        fflush(NULL);
        _exit(0); /* the counts are shared: main's zt_finish reports them */
      }
      int st = 0;
      if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        zt_fail("%d ranks, %s: runner ended with status 0x%x", n, mode_names[mode], st);
    }
  bad_input(); /* last: zcc's parameters and log are read once per process */
  return zt_finish();
}
