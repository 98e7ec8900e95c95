/*
 * Harness for the multi-process and multi-host tests: pass/fail counters
 * that forked ranks share, checks that print both sides, a clock, the run's
 * seed, a process-shared barrier, and a spawner that forks ranks which wait
 * for the unique id before they start.
 *
 * Every test program ends with zt_finish(), which prints
 * "N passed, N failed, N skipped" and gives the exit code.
 */
#ifndef ZTEST_H_
#define ZTEST_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "zcc.h"

#define ZT_MAX_RANKS 16

/* Counters in shared memory: children forked after zt_setup add to them. */
typedef struct zt_counts {
  atomic_long passed;
  atomic_long failed;
  atomic_long skipped;
  atomic_long messages; /* failure lines printed, to cap the noise */
} zt_counts_t;

extern zt_counts_t *zt_counts;

/* Line-buffered stdout, shared counters; call first in main(). */
void zt_setup(const char *program);
/* Print the closing line; exit code 0 if nothing failed, else 1. */
int zt_finish(void);

void zt_pass(void);
void zt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Count a failure and print its line (after 200 lines only count). */
void zt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print a line prefixed with the process's tag (e.g. "[n=4 rank 2]"). */
void zt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The tag printed before each line of this process. */
void zt_set_tag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Count a pass or a failure for cond; the message says what was expected. */
#define ZT_CHECK(cond, ...)                                                    \
  do {                                                                         \
    if (cond)                                                                  \
      zt_pass();                                                               \
    else                                                                       \
      zt_fail(__VA_ARGS__);                                                    \
  } while (0)

/* A zcc call must return `expected`; prints both codes and the last error. */
#define ZT_EXPECT_RC(expected, call)                                           \
  zt_expect_rc((expected), (call), #call, __FILE__, __LINE__)
int zt_expect_rc(zccResult_t expected, zccResult_t got, const char *what,
                 const char *file, int line);

/* "zccSuccess", "zccTimeout", ... (not the description). */
const char *zt_rc_name(zccResult_t rc);

/* Seconds on CLOCK_MONOTONIC (one clock for every process of the machine). */
double zt_now(void);
/* Sleep for `seconds`. */
void zt_sleep(double seconds);

/* The run's seed: ZCC_TEST_SEED or the time; printed once by zt_seed_print. */
uint64_t zt_seed(void);
void zt_seed_print(void);
/* splitmix64 step. */
uint64_t zt_rand(uint64_t *state);
/* A well mixed 64-bit hash of three words. */
uint64_t zt_mix(uint64_t a, uint64_t b, uint64_t c);

/* Non-zero if ZCC_TEST_QUICK is set to a value other than 0, or argv has --quick. */
int zt_quick(int argc, char **argv);

/* Anonymous MAP_SHARED memory, zeroed; exits on failure. */
void *zt_shared_alloc(size_t bytes);
void zt_shared_free(void *p, size_t bytes);

/*
 * A barrier across processes in shared memory (futex based). Waits at most
 * timeout_s seconds, then returns -1 (the caller reports and exits).
 */
typedef struct zt_barrier {
  atomic_uint count;
  atomic_uint generation;
} zt_barrier_t;
int zt_barrier_wait(zt_barrier_t *b, int nranks, double timeout_s);

/*
 * Forked ranks. zt_spawn forks nranks children; each blocks until the parent
 * hands it the unique id with zt_release (or zt_release_rank), then runs
 * fn. fn returns 0 (fine) or 1 (failures already counted): the child then
 * exits with 0. Any other exit status (a sanitizer's report exits with 1
 * from inside fn) or a signal the parent counts as a failure.
 */
typedef int (*zt_rank_fn)(int rank, int nranks, const zccUniqueId *id,
                          void *arg);
typedef struct zt_group {
  int nranks;
  pid_t pid[ZT_MAX_RANKS];
  int fd[ZT_MAX_RANKS];
  int status[ZT_MAX_RANKS];
  int done[ZT_MAX_RANKS];
} zt_group_t;

int zt_spawn(zt_group_t *g, int nranks, zt_rank_fn fn, void *arg);
/* Hand one rank the id; returns 0 or -1. */
int zt_release_rank(zt_group_t *g, int rank, const zccUniqueId *id);
/* Hand every rank the id. */
int zt_release(zt_group_t *g, const zccUniqueId *id);
/*
 * Reap the children, SIGKILLing those still running after timeout_s.
 * Counts a failure for each child that did not exit with 0 and returns how
 * many those were.
 */
int zt_wait_all(zt_group_t *g, double timeout_s, const char *what);
/* Reap one child (as zt_wait_all) without counting; returns its wait status or -1 on timeout. */
int zt_wait_rank(zt_group_t *g, int rank, double timeout_s);

/* zccCommInitRankConfig with deviceType zccDeviceHost. */
zccResult_t zt_comm_init_host(zccComm_t *comm, int nranks, const zccUniqueId *id,
                              int rank);

/* setenv(name, value) unless the user already set name. */
void zt_setenv_default(const char *name, const char *value);

#endif /* ZTEST_H_ */
