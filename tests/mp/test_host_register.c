/*
 * zccCommRegister of ordinary host memory (hostmem.h): the whole pages of a
 * registered range become shared memory that the host's ranks map, so large
 * allreduces on it run in place; its partial end pages stay the process's.
 * 2 and 3 ranks over shared memory:
 *   - buffers from malloc at offsets off every page boundary (each rank its
 *     own), sizes from 1 MiB (the direct path's threshold) to 3 MiB + 4 B,
 *     float sum/max/min/avg and int64 sum, out of place and in place, fresh
 *     inputs and poisoned outputs each round, every element exact; a range
 *     inside a registered one; the log says every call ran in place; the
 *     bytes around the buffers, in the same pages and the same malloc blocks,
 *     stay as the test wrote them; the bytes there before the registration
 *     stay there after it, and after the deregistration;
 *   - after zccCommDeregister: the pages private again (not the memfd's),
 *     every call staged and exact; after destroy nothing stays mapped;
 *   - one rank does not register: every rank stages, exact;
 *   - a rank dies before the call on registered buffers: an error, no hang.
 * In one process (bad input and odd memory):
 *   - unmapped memory: zccInvalidArgument, nothing registered;
 *   - read-only memory, a shared mapping, less than a whole page,
 *     zccMemHostAlloc memory, a range overlapping a registered one: the
 *     registration succeeds and leaves the memory as it was;
 *   - the same range twice: both hold it, the first deregistration leaves it
 *     shared, the second gives it back; a handle deregistered twice:
 *     zccInvalidArgument;
 *   - a registered range unmapped and mapped again before its
 *     deregistration (freed too early): the deregistration leaves the new
 *     memory alone; a communicator destroyed with ranges registered gives
 *     them back.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "ztest_allreduce.h"
#include "zcc.h"

#define MAXN 3
#define BIG ((3u << 20) + 4) /* bytes */
#define SLACK 12288          /* malloc'd beyond each buffer, around it */
#define CANARY 0x5a

typedef struct {
  zt_barrier_t bar;
} shared_t;

static shared_t *sh;

enum { MODE_REGISTERED, MODE_ONE_UNREGISTERED, MODE_DEATH, MODE_NUM };
static const char *mode_names[MODE_NUM] = {"registered malloc buffers",
                                           "one rank does not register", "a rank dies"};

/* Whether addr lies in a mapping of a registered range's memfd. */
static int in_registered(const void *addr) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  int in = 0;
  uintptr_t a = (uintptr_t)addr;
  while (!in && fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi)
      in = strstr(line, "memfd:zcc-registered") != NULL;
  }
  fclose(f);
  return in;
}

/* The memfd mappings of registered ranges in this process (own and peers'). */
static int registered_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "memfd:zcc-registered")) n++;
  fclose(f);
  return n;
}

static char log_dir[64];

static int direct_runs(void) {
  return zt_log_count(log_dir, "reg", "in place on shared host memory");
}

static int sync_ranks(int rank, int nranks) {
  if (zt_barrier_wait(&sh->bar, nranks, 60) == 0) return 0;
  zt_fail("rank %d: barrier timed out", rank);
  return -1;
}

/* Bytes of the block [blk, blk + len) outside [b, b + blen) that are not
   the canary. */
static size_t canary_broken(const char *blk, size_t len, const char *b, size_t blen) {
  size_t bad = 0;
  for (const char *c = blk; c < blk + len; c++)
    if ((c < b || c >= b + blen) && *c != CANARY) bad++;
  return bad;
}

static int rank_main(int rank, int nranks, const zccUniqueId *id, void *arg) {
  int mode = *(int *)arg;
  zccComm_t comm;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("rank %d: init: %s", rank, zt_rc_name(rc));
    return 1;
  }
  size_t blk = BIG + SLACK;
  char *sblk = malloc(blk), *rblk = malloc(blk);
  if (!sblk || !rblk) {
    zt_fail("rank %d: out of memory", rank);
    return 1;
  }
  memset(sblk, CANARY, blk);
  memset(rblk, CANARY, blk);
  /* Each rank its own offsets, none on a page boundary. */
  char *sb = sblk + 4096 + 24 + 40 * (size_t)rank, *rb = rblk + 100 + 8 * (size_t)rank;
  for (size_t i = 0; i < BIG; i++) sb[i] = (char)(i * 31 + 7);
  int reg = !(mode == MODE_ONE_UNREGISTERED && rank == nranks - 1);
  void *sh_s = NULL, *sh_r = NULL;
  if (reg && (!ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, sb, BIG, &sh_s)) ||
              !ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, rb, BIG, &sh_r))))
    return 1;
  size_t moved = 0;
  for (size_t i = 0; i < BIG; i++) moved += sb[i] != (char)(i * 31 + 7);
  ZT_CHECK(moved == 0, "rank %d: %zu bytes of the buffer changed at its registration", rank,
           moved);
  ZT_CHECK(in_registered(sb + 8192) == reg && in_registered(rb + 8192) == reg,
           "rank %d: %s: the buffers' whole pages are%s the registration's memfd", rank,
           mode_names[mode], reg ? " not" : "");
  ZT_CHECK(!in_registered(sb - 1) && !in_registered(rb + BIG),
           "rank %d: a partial end page of a registered range was mapped over", rank);
  if (mode == MODE_DEATH) {
    if (rank == nranks - 1) _exit(0); /* gone before the call */
    zt_ar_dead_peer(comm, rank, sb, rb);
    zccCommAbort(comm); /* gives the ranges back */
    ZT_CHECK(!in_registered(sb + 8192), "rank %d: abort left the range shared", rank);
    return 0;
  }
  static const size_t sizes[] = {1u << 20, (1u << 20) + 12, BIG};
  int calls = 0;
  long wrong = 0;
  for (size_t ci = 0; ci < zt_ar_ncases; ci++)
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (int round = 0; round < 2; round++, calls++)
          wrong += zt_ar_call(comm, rank, nranks, &zt_ar_cases[ci], sb, rb, sizes[si], inplace,
                            round + (int)ci);
  /* A range inside the registered ones, its ends elsewhere. */
  for (int inplace = 0; inplace < 2; inplace++, calls++)
    wrong += zt_ar_call(comm, rank, nranks, &zt_ar_cases[0], sb + 4100, rb + 12, (1u << 20) + 4,
                      inplace, 9);
  ZT_CHECK(!wrong, "rank %d: %s: %ld wrong results", rank, mode_names[mode], wrong);
  int want = mode == MODE_REGISTERED ? calls : 0;
  ZT_CHECK(direct_runs() == want, "rank %d: %s: %d of %d allreduces ran in place", rank,
           mode_names[mode], direct_runs(), calls);
  size_t bad = canary_broken(sblk, blk, sb, BIG) + canary_broken(rblk, blk, rb, BIG);
  ZT_CHECK(bad == 0, "rank %d: %s: %zu bytes around the buffers changed", rank,
           mode_names[mode], bad);
  if (sync_ranks(rank, nranks)) return 1;
  if (reg) {
    for (size_t i = 0; i < BIG; i++) rb[i] = (char)(i * 17 + 3);
    ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, sh_r));
    ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, sh_s));
    ZT_EXPECT_RC(zccInvalidArgument, zccCommDeregister(comm, sh_s)); /* twice */
    moved = 0;
    for (size_t i = 0; i < BIG; i++) moved += rb[i] != (char)(i * 17 + 3);
    ZT_CHECK(moved == 0, "rank %d: %zu bytes of the buffer changed at its deregistration",
             rank, moved);
    ZT_CHECK(!in_registered(sb + 8192) && !in_registered(rb + 8192),
             "rank %d: the pages are still the memfd's after zccCommDeregister", rank);
  }
  if (sync_ranks(rank, nranks)) return 1;
  /* Deregistered: staged, exact. */
  int before = direct_runs();
  wrong = 0;
  for (int inplace = 0; inplace < 2; inplace++)
    wrong += zt_ar_call(comm, rank, nranks, &zt_ar_cases[0], sb, rb, BIG, inplace, 11);
  ZT_CHECK(!wrong && direct_runs() == before,
           "rank %d: after deregistration: %ld wrong, %d calls in place", rank, wrong,
           direct_runs() - before);
  bad = canary_broken(sblk, blk, sb, BIG) + canary_broken(rblk, blk, rb, BIG);
  ZT_CHECK(bad == 0, "rank %d: after deregistration: %zu bytes around the buffers changed",
           rank, bad);
  if (sync_ranks(rank, nranks)) return 1;
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  ZT_CHECK(registered_maps() == 0, "rank %d: %d registered ranges' mappings after destroy",
           rank, registered_maps());
  zt_log_unlink(log_dir, "reg");
  free(sblk);
  free(rblk);
  return 0;
}

/* Bad input and odd memory, on a communicator of one rank. */
static int local_main(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zccComm_t comm;
  if (!ZT_EXPECT_RC(zccSuccess, zt_comm_init_host(&comm, nranks, id, rank))) return 1;
  long page = sysconf(_SC_PAGESIZE);
  void *h = NULL, *h2 = NULL;
  /* Unmapped memory: an error, nothing registered. */
  char *gone = mmap(NULL, 8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(gone, 8 * page);
  ZT_EXPECT_RC(zccInvalidArgument, zccCommRegister(comm, gone + 10, 6 * page, &h));
  ZT_CHECK(h == NULL && registered_maps() == 0, "unmapped memory: handle %p, %d mappings", h,
           registered_maps());
  /* Memory that stays as it was: registered, not shared. */
  char *ro = mmap(NULL, 8 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *shm = mmap(NULL, 8 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char *small = malloc(3 * page);
  void *hm = NULL;
  ZT_EXPECT_RC(zccSuccess, zccMemHostAlloc(&hm, 4 * page));
  struct {
    const char *what;
    char *p;
    size_t len;
  } stay[] = {{"read-only memory", ro + 5, 6 * page},
              {"a shared mapping", shm + 5, 6 * page},
              {"less than a whole page", small + page + 10, (size_t)page - 20},
              {"zccMemHostAlloc memory", (char *)hm + 8, 3 * page}};
  for (size_t i = 0; i < sizeof(stay) / sizeof(stay[0]); i++) {
    h = NULL;
    if (!ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, stay[i].p, stay[i].len, &h))) continue;
    ZT_CHECK(!in_registered(stay[i].p + stay[i].len / 2), "%s: made shared", stay[i].what);
    ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, h));
  }
  /* The same range twice; a range overlapping it. */
  char *m = mmap(NULL, 16 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (long i = 0; i < 16 * page; i++) m[i] = (char)(i * 13);
  h = h2 = NULL;
  void *h3 = NULL;
  ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, m + 100, 8 * page, &h));
  ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, m + 100, 8 * page, &h2));
  ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, m + 4 * page, 8 * page, &h3));
  ZT_CHECK(in_registered(m + 2 * page) && !in_registered(m + 10 * page),
           "registered twice, then overlapped: shared %d (want 1), overlap shared %d (want 0)",
           in_registered(m + 2 * page), in_registered(m + 10 * page));
  ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, h3));
  ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, h));
  ZT_CHECK(in_registered(m + 2 * page), "the first of two deregistrations gave the range back");
  ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, h2));
  ZT_CHECK(!in_registered(m + 2 * page), "the second deregistration left the range shared");
  long moved = 0;
  for (long i = 0; i < 16 * page; i++) moved += m[i] != (char)(i * 13);
  ZT_CHECK(moved == 0, "registered twice and given back: %ld bytes changed", moved);
  /* Unmapped and mapped again before the deregistration: left alone. */
  h = NULL;
  ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, m + 100, 8 * page, &h));
  munmap(m, 16 * page);
  char *again = mmap(m, 16 * page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again == m) {
    memset(again, 0x33, 16 * page);
    ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, h));
    moved = 0;
    for (long i = 0; i < 16 * page; i++) moved += again[i] != 0x33;
    ZT_CHECK(moved == 0, "a range freed before its deregistration: %ld bytes of the memory "
             "mapped there since changed", moved);
  } else {
    zt_log("could not map the same addresses again; deregistering the freed range");
    ZT_EXPECT_RC(zccSuccess, zccCommDeregister(comm, h));
  }
  ZT_CHECK(registered_maps() == 0, "%d registered mappings left", registered_maps());
  /* Destroy with a range registered: given back, bytes kept. */
  char *d = malloc(64 * page);
  for (long i = 0; i < 64 * page; i++) d[i] = (char)(i * 5);
  h = NULL;
  ZT_EXPECT_RC(zccSuccess, zccCommRegister(comm, d + 3, 60 * page, &h));
  ZT_CHECK(in_registered(d + 8 * page), "malloc'd range not shared after registration");
  ZT_EXPECT_RC(zccSuccess, zccCommDestroy(comm));
  ZT_CHECK(!in_registered(d + 8 * page) && registered_maps() == 0,
           "destroy left a registered range shared (%d mappings)", registered_maps());
  moved = 0;
  for (long i = 0; i < 64 * page; i++) moved += d[i] != (char)(i * 5);
  ZT_CHECK(moved == 0, "destroy with a range registered: %ld bytes changed", moved);
  free(d);
  free(small);
  munmap(ro, 8 * page);
  munmap(shm, 8 * page);
  zccMemHostFree(hm);
  if (again == m) munmap(again, 16 * page);
  return 0;
}

static void run_group(int n, zt_rank_fn fn, void *arg, const char *what) {
  memset(sh, 0, sizeof(*sh));
  printf("test_host_register: --- %d rank(s), %s\n", n, what);
  fflush(NULL);
  pid_t pid = fork(); /* a runner per set: zcc reads its parameters once per process */
  if (pid == 0) {
    if (zt_log_dir_make(log_dir, sizeof(log_dir), "reg") != 0) _exit(1);
    setenv("ZCC_TIMEOUT", "20000", 1);
    zt_group_t g;
    zccUniqueId id;
    if (zt_spawn(&g, n, fn, arg) == 0) {
      if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__, __LINE__))
        zt_release(&g, &id);
      zt_wait_all(&g, 240, what);
    }
    zt_log_dir_remove(log_dir);
    fflush(NULL);
    _exit(0); /* the counts are shared: main's zt_finish reports them */
  }
  int st = 0;
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    zt_fail("%d rank(s), %s: runner ended with status 0x%x", n, what, st);
}

int main(int argc, char **argv) {
  zt_setup("test_host_register");
  sh = zt_shared_alloc(sizeof(*sh));
  int quick = zt_quick(argc, argv);
  for (int mode = 0; mode < MODE_NUM; mode++)
    for (int n = 2; n <= MAXN; n++) {
      if (quick && n == 3 && mode != MODE_REGISTERED) continue;
      run_group(n, rank_main, &mode, mode_names[mode]);
    }
  run_group(1, local_main, NULL, "bad input and odd memory");
  return zt_finish();
}
