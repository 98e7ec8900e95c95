/* Harness for the multi-process tests: see ztest.h. */
#include "ztest.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ZT_MAX_MESSAGES 200

zt_counts_t *zt_counts;
static char zt_tag[64];
static const char *zt_program = "test";

void zt_setup(const char *program) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  zt_program = program;
  zt_counts = zt_shared_alloc(sizeof(*zt_counts));
}

int zt_finish(void) {
  long p = atomic_load(&zt_counts->passed);
  long f = atomic_load(&zt_counts->failed);
  long s = atomic_load(&zt_counts->skipped);
  printf("%s: %ld passed, %ld failed, %ld skipped\n", zt_program, p, f, s);
  fflush(stdout);
  return f == 0 ? 0 : 1;
}

void zt_set_tag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(zt_tag, sizeof(zt_tag), fmt, ap);
  va_end(ap);
}

static void vlog(const char *prefix, const char *fmt, va_list ap) {
  char line[2048];
  vsnprintf(line, sizeof(line), fmt, ap);
  /* One write per line, so that lines of concurrent ranks do not mix. */
  printf("%s%s%s%s\n", zt_tag, zt_tag[0] ? " " : "", prefix, line);
  fflush(stdout);
}

void zt_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("", fmt, ap);
  va_end(ap);
}

void zt_pass(void) { atomic_fetch_add(&zt_counts->passed, 1); }

void zt_skip(const char *fmt, ...) {
  va_list ap;
  atomic_fetch_add(&zt_counts->skipped, 1);
  va_start(ap, fmt);
  vlog("SKIP: ", fmt, ap);
  va_end(ap);
}

void zt_fail(const char *fmt, ...) {
  va_list ap;
  atomic_fetch_add(&zt_counts->failed, 1);
  long n = atomic_fetch_add(&zt_counts->messages, 1);
  if (n >= ZT_MAX_MESSAGES) {
    if (n == ZT_MAX_MESSAGES)
      zt_log("FAIL: (more failures; only counting from now on)");
    return;
  }
  va_start(ap, fmt);
  vlog("FAIL: ", fmt, ap);
  va_end(ap);
}

const char *zt_rc_name(zccResult_t rc) {
  switch (rc) {
#define ZT_RC_CASE_(name, value, desc)                                         \
  case name:                                                                   \
    return #name;
    ZCC_RESULT_MAP(ZT_RC_CASE_)
#undef ZT_RC_CASE_
  default:
    return "(not a zccResult_t)";
  }
}

int zt_expect_rc(zccResult_t expected, zccResult_t got, const char *what,
                 const char *file, int line) {
  if (expected == got) {
    zt_pass();
    return 1;
  }
  zt_fail("%s:%d: %s: expected %s, got %s (%d); last error: \"%s\"", file, line,
          what, zt_rc_name(expected), zt_rc_name(got), (int)got,
          zccGetLastError(NULL) ? zccGetLastError(NULL) : "(null)");
  return 0;
}

double zt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void zt_sleep(double seconds) {
  struct timespec ts;
  if (seconds <= 0)
    return;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static uint64_t zt_seed_value;
static int zt_seed_set;

uint64_t zt_seed(void) {
  if (!zt_seed_set) {
    const char *s = getenv("ZCC_TEST_SEED");
    if (s && *s) {
      zt_seed_value = strtoull(s, NULL, 0);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      zt_seed_value = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^
                      ((uint64_t)getpid() << 32);
      zt_seed_value &= 0xffffffffffffull; /* short enough to retype */
    }
    zt_seed_set = 1;
  }
  return zt_seed_value;
}

void zt_seed_print(void) {
  printf("%s: seed %" PRIu64 " (rerun with ZCC_TEST_SEED=%" PRIu64 ")\n",
         zt_program, zt_seed(), zt_seed());
  fflush(stdout);
}

uint64_t zt_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t zt_mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = a * 0x9e3779b97f4a7c15ull ^ b;
  uint64_t h = zt_rand(&s);
  s = h ^ (c * 0xc2b2ae3d27d4eb4full);
  return zt_rand(&s);
}

int zt_quick(int argc, char **argv) {
  const char *q = getenv("ZCC_TEST_QUICK");
  if (q && *q && strcmp(q, "0") != 0)
    return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--quick") == 0)
      return 1;
  return 0;
}

void *zt_shared_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    printf("%s: mmap of %zu shared bytes failed: %s\n", zt_program, bytes,
           strerror(errno));
    exit(2);
  }
  return p;
}

void zt_shared_free(void *p, size_t bytes) {
  if (p)
    munmap(p, bytes ? bytes : 1);
}

static long futex(atomic_uint *addr, int op, unsigned val,
                  const struct timespec *ts) {
  return syscall(SYS_futex, (unsigned *)addr, op, val, ts, NULL, 0);
}

int zt_barrier_wait(zt_barrier_t *b, int nranks, double timeout_s) {
  unsigned gen = atomic_load(&b->generation);
  if (atomic_fetch_add(&b->count, 1) + 1 == (unsigned)nranks) {
    atomic_store(&b->count, 0);
    atomic_fetch_add(&b->generation, 1);
    futex(&b->generation, FUTEX_WAKE, INT_MAX, NULL);
    return 0;
  }
  double deadline = zt_now() + timeout_s;
  while (atomic_load(&b->generation) == gen) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    futex(&b->generation, FUTEX_WAIT, gen, &ts);
    if (atomic_load(&b->generation) == gen && zt_now() > deadline)
      return -1;
  }
  return 0;
}

int zt_spawn(zt_group_t *g, int nranks, zt_rank_fn fn, void *arg) {
  memset(g, 0, sizeof(*g));
  g->nranks = nranks;
  if (nranks < 1 || nranks > ZT_MAX_RANKS) {
    zt_fail("zt_spawn: %d ranks is outside 1..%d", nranks, ZT_MAX_RANKS);
    return -1;
  }
  fflush(NULL);
  pid_t parent = getpid();
  for (int r = 0; r < nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) {
      zt_fail("pipe failed: %s", strerror(errno));
      return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      zt_fail("fork failed: %s", strerror(errno));
      close(fds[0]);
      close(fds[1]);
      return -1;
    }
    if (pid == 0) {
      zccUniqueId id;
      size_t got = 0;
      close(fds[1]);
      for (int k = 0; k < r; k++)
        close(g->fd[k]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(3);
      while (got < sizeof(id)) {
        ssize_t n = read(fds[0], (char *)&id + got, sizeof(id) - got);
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0)
          _exit(n == 0 ? 0 : 2); /* parent gave up on this rank */
        got += (size_t)n;
      }
      close(fds[0]);
      int rc = fn(r, nranks, &id, arg);
      fflush(NULL);
      _exit(rc == 1 ? 0 : rc);
    }
    close(fds[0]);
    g->pid[r] = pid;
    g->fd[r] = fds[1];
  }
  return 0;
}

int zt_release_rank(zt_group_t *g, int rank, const zccUniqueId *id) {
  size_t put = 0;
  if (g->fd[rank] < 0)
    return -1;
  while (put < sizeof(*id)) {
    ssize_t n = write(g->fd[rank], (const char *)id + put, sizeof(*id) - put);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    put += (size_t)n;
  }
  close(g->fd[rank]);
  g->fd[rank] = -1;
  return 0;
}

int zt_release(zt_group_t *g, const zccUniqueId *id) {
  int rc = 0;
  for (int r = 0; r < g->nranks; r++)
    if (g->fd[r] >= 0 && zt_release_rank(g, r, id) != 0)
      rc = -1;
  return rc;
}

static int reap(zt_group_t *g, int r, int block) {
  int st;
  pid_t p;
  do {
    p = waitpid(g->pid[r], &st, block ? 0 : WNOHANG);
  } while (p < 0 && errno == EINTR);
  if (p == g->pid[r]) {
    g->status[r] = st;
    g->done[r] = 1;
    return 1;
  }
  return 0;
}

int zt_wait_rank(zt_group_t *g, int rank, double timeout_s) {
  double deadline = zt_now() + timeout_s;
  while (!g->done[rank]) {
    if (reap(g, rank, 0))
      break;
    if (zt_now() > deadline)
      return -1;
    zt_sleep(0.005);
  }
  return g->status[rank];
}

int zt_wait_all(zt_group_t *g, double timeout_s, const char *what) {
  double deadline = zt_now() + timeout_s;
  int bad = 0;
  for (int r = 0; r < g->nranks; r++)
    if (g->fd[r] >= 0) {
      close(g->fd[r]);
      g->fd[r] = -1;
    }
  for (;;) {
    int left = 0;
    for (int r = 0; r < g->nranks; r++)
      if (!g->done[r] && !reap(g, r, 0))
        left++;
    if (left == 0)
      break;
    if (zt_now() > deadline) {
      for (int r = 0; r < g->nranks; r++)
        if (!g->done[r]) {
          zt_fail("%s: rank %d (pid %d) still running after %.0f s; killing it",
                  what, r, (int)g->pid[r], timeout_s);
          kill(g->pid[r], SIGKILL);
          reap(g, r, 1);
          g->status[r] = -1;
          bad++;
        }
      break;
    }
    zt_sleep(0.01);
  }
  for (int r = 0; r < g->nranks; r++) {
    int st = g->status[r];
    if (st == -1)
      continue;
    if (WIFSIGNALED(st)) {
      zt_fail("%s: rank %d (pid %d) killed by signal %d (%s)", what, r,
              (int)g->pid[r], WTERMSIG(st), strsignal(WTERMSIG(st)));
      bad++;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
      zt_fail("%s: rank %d (pid %d) exited with status %d", what, r,
              (int)g->pid[r], WEXITSTATUS(st));
      bad++;
    }
  }
  return bad;
}

zccResult_t zt_comm_init_host(zccComm_t *comm, int nranks, const zccUniqueId *id,
                              int rank) {
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = zccDeviceHost;
  return zccCommInitRankConfig(comm, nranks, *id, rank, &cfg);
}

void zt_setenv_default(const char *name, const char *value) {
  const char *cur = getenv(name);
  if (!cur || !*cur)
    setenv(name, value, 1);
}
