/*
 * How the ranks start: -np forks them here; mpirun starts them and MPI
 * carries the unique id (when built with MPI); torchrun and friends hand
 * their environment to zccCommInitFromEnv; otherwise one rank.
 */
#include "perf.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perf_util.h"

#ifdef ZCC_PERF_WITH_MPI
#include <mpi.h>
#endif

/* How long killed ranks get to exit after SIGTERM before SIGKILL, in ms. */
#define PERF_KILL_GRACE_MS 2000

#ifdef ZCC_PERF_WITH_MPI
/* Between MPI_Init and MPI_Finalize: fatal errors go through MPI_Abort. */
static int mpi_active;
#endif

void perf_abort(int code)
{
  fflush(stdout);
  fflush(stderr);
#ifdef ZCC_PERF_WITH_MPI
  if (mpi_active)
    MPI_Abort(MPI_COMM_WORLD, code);
#endif
  exit(code);
}

void perf_zcc_fail(const perf_world_t *w, const char *what, zccResult_t res)
{
  const char *last = zccGetLastError(NULL);
  char who[32] = "";

  if (w->rank >= 0)
    snprintf(who, sizeof(who), "rank %d: ", w->rank);
  fprintf(stderr, "%s: %s%s failed: %s%s%s\n", w->prog, who, what, zccGetErrorString(res),
          last && *last ? ": " : "", last && *last ? last : "");
  perf_abort(PERF_EXIT_FAIL);
}

/* Ranks a launcher started, from its environment; 0 when there is none. */
static long launcher_size(const char **name)
{
  static const struct {
    const char *var, *name;
  } vars[] = {{"OMPI_COMM_WORLD_SIZE", "mpirun"}, {"PMI_SIZE", "mpirun"}};
  const char *v;
  long n;

  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
    v = getenv(vars[i].var);
    if (v != NULL && perf_parse_long(v, 1, 1l << 30, &n) == 0) {
      *name = vars[i].name;
      return n;
    }
  }
  /* torchrun sets all three */
  v = getenv("WORLD_SIZE");
  if (v != NULL && getenv("RANK") != NULL && getenv("MASTER_ADDR") != NULL &&
      perf_parse_long(v, 1, 1l << 30, &n) == 0) {
    *name = "torchrun";
    return n;
  }
  return 0;
}

static zccConfig_t host_config(const perf_world_t *w)
{
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;

  cfg.deviceType = zccDeviceHost;
  cfg.commName = w->prog;
  return cfg;
}

static void init_rank(perf_world_t *w, zccUniqueId id)
{
  zccConfig_t cfg = host_config(w);
  zccResult_t res = zccCommInitRankConfig(&w->comm, w->nranks, id, w->rank, &cfg);

  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommInitRankConfig", res);
}

static void finish_rank(perf_world_t *w)
{
  zccResult_t res = zccCommFinalize(w->comm);

  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommFinalize", res);
  res = zccCommDestroy(w->comm);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommDestroy", res);
  w->comm = NULL;
}

/* A rank's exit code as a process on its own: wrong results exit 1. */
static int process_code(int code)
{
  return code == PERF_EXIT_WRONG ? PERF_EXIT_FAIL : code;
}

static int run_single(perf_world_t *w)
{
  zccUniqueId id;
  zccResult_t res;
  int code;

  w->launcher = "single";
  w->rank = 0;
  w->nranks = 1;
  res = zccGetUniqueId(&id);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccGetUniqueId", res);
  init_rank(w, id);
  code = perf_run(w);
  finish_rank(w);
  return process_code(code);
}

static int run_env(perf_world_t *w, const char *launcher)
{
  zccConfig_t cfg = host_config(w);
  zccResult_t res;
  int code;

  w->launcher = launcher;
  w->rank = -1;
  res = zccCommInitFromEnv(&w->comm, &cfg);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommInitFromEnv", res);
  res = zccCommUserRank(w->comm, &w->rank);
  if (res == zccSuccess)
    res = zccCommCount(w->comm, &w->nranks);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommUserRank/zccCommCount", res);
  code = perf_run(w);
  finish_rank(w);
  return process_code(code);
}

#ifdef ZCC_PERF_WITH_MPI
static int run_mpi(perf_world_t *w)
{
  zccUniqueId id;
  int code;

  w->launcher = "mpi";
  w->rank = -1;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "%s: MPI_Init failed\n", w->prog);
    return PERF_EXIT_FAIL;
  }
  mpi_active = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->nranks);
  memset(&id, 0, sizeof(id));
  if (w->rank == 0) {
    zccResult_t res = zccGetUniqueId(&id);
    if (res != zccSuccess)
      perf_zcc_fail(w, "zccGetUniqueId", res);
  }
  MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  init_rank(w, id);
  code = perf_run(w);
  finish_rank(w);
  MPI_Finalize();
  mpi_active = 0;
  return process_code(code);
}
#endif

static const char *signal_text(int sig)
{
  const char *s = strsignal(sig);

  return s ? s : "unknown signal";
}

static void sleep_ms(int ms)
{
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Signal every rank still running; returns how many were signalled. */
static int signal_ranks(const pid_t *pids, int n, int sig)
{
  int count = 0;

  for (int i = 0; i < n; i++)
    if (pids[i] > 0 && kill(pids[i], sig) == 0)
      count++;
  return count;
}

/* Record one rank's end; returns 1 when it failed (rather than finished). */
static int rank_ended(const perf_world_t *w, int rank, pid_t pid, int status,
                      int killing, int *result)
{
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == PERF_EXIT_OK)
      return 0;
    if (code == PERF_EXIT_WRONG) {
      *result = PERF_EXIT_FAIL;
      return 0;
    }
    if (code == PERF_EXIT_USAGE) {
      *result = PERF_EXIT_USAGE;
      return 0;
    }
    if (!killing)
      fprintf(stderr, "%s: rank %d (pid %d) exited with status %d\n", w->prog, rank,
              (int)pid, code);
  } else if (WIFSIGNALED(status)) {
    if (!killing)
      fprintf(stderr, "%s: rank %d (pid %d) was killed by signal %d (%s)\n", w->prog, rank,
              (int)pid, WTERMSIG(status), signal_text(WTERMSIG(status)));
  } else {
    return 0;
  }
  *result = PERF_EXIT_FAIL;
  return 1;
}

/* Wait for every rank; when one fails, end the others. */
static int wait_ranks(const perf_world_t *w, pid_t *pids, int n)
{
  int remaining = n, result = PERF_EXIT_OK, killing = 0, waited_ms = 0;

  while (remaining > 0) {
    int status, rank = -1;
    pid_t pid = waitpid(-1, &status, killing ? WNOHANG : 0);

    if (pid < 0) {
      if (errno == EINTR)
        continue;
      fprintf(stderr, "%s: waitpid failed: %s\n", w->prog, strerror(errno));
      signal_ranks(pids, n, SIGKILL);
      return PERF_EXIT_FAIL;
    }
    if (pid == 0) { /* killing, nobody has exited yet */
      sleep_ms(10);
      waited_ms += 10;
      if (waited_ms == PERF_KILL_GRACE_MS)
        signal_ranks(pids, n, SIGKILL);
      continue;
    }
    for (int i = 0; i < n; i++)
      if (pids[i] == pid)
        rank = i;
    if (rank < 0 || !(WIFEXITED(status) || WIFSIGNALED(status)))
      continue;
    pids[rank] = 0;
    remaining--;
    if (rank_ended(w, rank, pid, status, killing, &result) && !killing && remaining > 0) {
      fprintf(stderr, "%s: ending the other %d rank%s\n", w->prog, remaining,
              remaining == 1 ? "" : "s");
      signal_ranks(pids, n, SIGTERM);
      killing = 1;
    }
  }
  return result;
}

/* Read exactly one unique id from fd; 0 on success, -1 on EOF or error. */
static int read_id(int fd, zccUniqueId *id)
{
  size_t got = 0;

  while (got < sizeof(*id)) {
    ssize_t r = read(fd, id->internal + got, sizeof(*id) - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_id(int fd, const zccUniqueId *id)
{
  size_t put = 0;

  while (put < sizeof(*id)) {
    ssize_t r = write(fd, id->internal + put, sizeof(*id) - put);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    put += (size_t)r;
  }
  return 0;
}

/* A forked rank: wait for the unique id, run, and exit. */
static void forked_rank(perf_world_t *w, int rank, int nranks, pid_t parent, int idfd)
    __attribute__((noreturn));

static void forked_rank(perf_world_t *w, int rank, int nranks, pid_t parent, int idfd)
{
  zccUniqueId id;
  int code;

  /* a rank must not outlive the parent that watches it */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(PERF_EXIT_FAIL);
  /* EOF: the parent could not make the id, and says why itself */
  if (read_id(idfd, &id) != 0)
    _exit(PERF_EXIT_FAIL);
  close(idfd);
  w->launcher = "fork";
  w->rank = rank;
  w->nranks = nranks;
  init_rank(w, id);
  code = perf_run(w);
  finish_rank(w);
  fflush(stdout);
  exit(code);
}

/* Kill and reap every rank started so far, after a failure in the parent. */
static int abandon_ranks(pid_t *pids, int *idfds, int n)
{
  signal_ranks(pids, n, SIGKILL);
  for (int i = 0; i < n; i++) {
    if (idfds[i] >= 0)
      close(idfds[i]);
    if (pids[i] > 0)
      while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
        ;
  }
  free(idfds);
  free(pids);
  return PERF_EXIT_FAIL;
}

/*
 * -np: fork the ranks first, while this process has no threads (a child
 * forked while the rendezvous thread holds an allocator or library lock
 * could deadlock), then make the unique id here and hand it to each rank
 * through a pipe. This process serves the rendezvous and watches the ranks.
 */
static int run_forked(perf_world_t *w)
{
  int n = w->opts->np, *idfds, code;
  pid_t parent = getpid(), *pids;
  zccUniqueId id;
  zccResult_t res;

  if (w->coll->rooted && w->opts->root >= n) {
    fprintf(stderr, "%s: root %d is out of range for %d ranks\n", w->prog, w->opts->root, n);
    return PERF_EXIT_USAGE;
  }
  pids = calloc((size_t)n, sizeof(*pids));
  idfds = malloc((size_t)n * sizeof(*idfds));
  if (pids == NULL || idfds == NULL) {
    fprintf(stderr, "%s: out of memory for %d process records\n", w->prog, n);
    free(pids);
    free(idfds);
    return PERF_EXIT_FAIL;
  }
  for (int i = 0; i < n; i++)
    idfds[i] = -1;
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < n; i++) {
    int p[2];
    pid_t pid;

    if (pipe(p) != 0) {
      fprintf(stderr, "%s: pipe for rank %d failed: %s\n", w->prog, i, strerror(errno));
      return abandon_ranks(pids, idfds, n);
    }
    pid = fork();
    if (pid < 0) {
      fprintf(stderr, "%s: fork of rank %d failed: %s\n", w->prog, i, strerror(errno));
      close(p[0]);
      close(p[1]);
      return abandon_ranks(pids, idfds, n);
    }
    if (pid == 0) {
      close(p[1]);
      for (int j = 0; j < i; j++)
        close(idfds[j]);
      free(idfds);
      free(pids);
      forked_rank(w, i, n, parent, p[0]);
    }
    close(p[0]);
    idfds[i] = p[1];
    pids[i] = pid;
  }

  /* a rank that died already must not kill this process through SIGPIPE */
  signal(SIGPIPE, SIG_IGN);
  res = zccGetUniqueId(&id);
  if (res != zccSuccess) {
    const char *last = zccGetLastError(NULL);
    fprintf(stderr, "%s: zccGetUniqueId failed: %s%s%s\n", w->prog, zccGetErrorString(res),
            last && *last ? ": " : "", last && *last ? last : "");
    return abandon_ranks(pids, idfds, n);
  }
  for (int i = 0; i < n; i++) {
    if (write_id(idfds[i], &id) != 0 && errno != EPIPE) {
      fprintf(stderr, "%s: sending the unique id to rank %d failed: %s\n", w->prog, i,
              strerror(errno));
      return abandon_ranks(pids, idfds, n);
    }
    /* EPIPE: that rank is gone already; wait_ranks reports it */
    close(idfds[i]);
    idfds[i] = -1;
  }
  free(idfds);
  code = wait_ranks(w, pids, n);
  free(pids);
  return code;
}

int perf_main(const perf_coll_t *coll, int argc, char **argv)
{
  perf_opts_t opts;
  perf_world_t w;
  const char *launcher = NULL;
  const char *slash = argv[0] ? strrchr(argv[0], '/') : NULL;
  long size;

  perf_parse_args(coll, argc, argv, &opts);
  memset(&w, 0, sizeof(w));
  w.coll = coll;
  w.opts = &opts;
  w.prog = slash ? slash + 1 : (argv[0] ? argv[0] : coll->name);
  w.rank = -1;
  size = launcher_size(&launcher);

  if (opts.np > 0) {
    if (size > 1) {
      fprintf(stderr, "%s: -np %d cannot be used inside a %s job of %ld ranks; "
              "let the launcher start the ranks\n", w.prog, opts.np, launcher, size);
      return PERF_EXIT_USAGE;
    }
    return run_forked(&w);
  }
#ifdef ZCC_PERF_WITH_MPI
  if (launcher != NULL && strcmp(launcher, "mpirun") == 0)
    return run_mpi(&w);
#endif
  if (size > 1)
    return run_env(&w, launcher);
  return run_single(&w);
}
