/*
 * How the ranks start: -np forks them here; mpirun starts them and MPI
 * carries the unique id (when built with MPI); torchrun and friends hand
 * their environment to zccCommInitFromEnv; otherwise one rank. Each
 * process drives one host rank, or -g GPUs (one rank and communicator
 * each); with --compare nccl, NCCL's unique id travels beside zcc's.
 */
#include "perf.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perf_nccl.h"
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

/* The unique ids one rendezvous needs: zcc's, and NCCL's with --compare nccl. */
typedef struct {
  zccUniqueId zcc;
  char nccl[PERF_ID_BYTES];
} ids_t;

/* zcc's id, and NCCL's with --compare nccl (exits on failure). */
static void make_ids(perf_world_t *w, ids_t *ids)
{
  zccResult_t res = zccGetUniqueId(&ids->zcc);

  if (res != zccSuccess)
    perf_zcc_fail(w, "zccGetUniqueId", res);
#ifdef ZCC_PERF_WITH_CUDA
  if (w->opts->compare_nccl)
    perf_nccl_get_unique_id(w, ids->nccl);
#endif
}

static zccConfig_t comm_config(const perf_world_t *w)
{
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;

  cfg.deviceType = w->device == PERF_DEVICE_CUDA ? zccDeviceCuda : zccDeviceHost;
  cfg.commName = w->prog;
  return cfg;
}

/* A whole number from the first of the variables that is set, or -1. */
static long env_long(const char *const *vars)
{
  long v;

  for (; *vars != NULL; vars++) {
    const char *s = getenv(*vars);
    if (s != NULL && perf_parse_long(s, 0, 1l << 30, &v) == 0)
      return v;
  }
  return -1;
}

/* This process's place on its host, from the launcher's environment. */
static void local_place_from_env(perf_world_t *w)
{
  static const char *const index_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                           "SLURM_LOCALID", "LOCAL_RANK", NULL};
  static const char *const size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                          "LOCAL_WORLD_SIZE", NULL};
  long i = env_long(index_vars), n = env_long(size_vars);

  w->local_index = (int)i;
  w->local_size = n > 0 ? (int)n : 0;
}

/*
 * Host or GPU, and which GPUs: --device, or auto (a GPU exists and the
 * benchmarks have CUDA); process i of its host takes GPUs i*g .. i*g+g-1
 * (modulo the device count when its place on the host is unknown).
 * Returns PERF_EXIT_OK, or PERF_EXIT_USAGE after saying why.
 */
static int resolve_device(perf_world_t *w, int proc)
{
  const perf_opts_t *o = w->opts;

  w->device = PERF_DEVICE_HOST;
  w->nlocal = 1;
  w->cuda_dev[0] = -1;
  if (o->device == PERF_DEVICE_HOST)
    return PERF_EXIT_OK;
#ifdef ZCC_PERF_WITH_CUDA
  {
    char why[256] = "";
    int speak = w->local_index <= 0;
    int n = perf_gpu_count(why, sizeof(why));
    int g = o->ngpus, index = w->local_index >= 0 ? w->local_index : proc;

    if (n == 0 && o->device == PERF_DEVICE_AUTO)
      return PERF_EXIT_OK;
    if (n == 0) {
      if (speak)
        fprintf(stderr, "%s: %s needs a GPU: no CUDA device (%s)\n", w->prog,
                o->device_why ? o->device_why : "--device cuda", why);
      return PERF_EXIT_USAGE;
    }
    if (!o->share_gpus && (g > n || (w->local_size > 0 && (long)w->local_size * g > n))) {
      if (speak) {
        int procs = w->local_size > 0 ? w->local_size : 1;
        fprintf(stderr, "%s: %d process%s of %d GPU%s each need %d GPUs on this host; "
                "it has %d; --share-gpus 1 lets ranks share GPUs%s\n", w->prog, procs,
                procs == 1 ? "" : "es", g, g == 1 ? "" : "s", procs * g, n,
                o->device == PERF_DEVICE_AUTO ? " (--device host runs host communicators)" : "");
      }
      return PERF_EXIT_USAGE;
    }
    w->device = PERF_DEVICE_CUDA;
    w->nlocal = g;
    for (int l = 0; l < g; l++)
      w->cuda_dev[l] = (index * g + l) % n;
  }
#endif
  return PERF_EXIT_OK;
}

/* Local rank l's zcc communicator is on the GPU it was made for. */
static void check_comm_device(perf_world_t *w, int l)
{
  int dev = -2;
  zccResult_t res;

  if (w->device != PERF_DEVICE_CUDA)
    return;
  res = zccCommCuDevice(w->comms[l], &dev);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommCuDevice", res);
  if (dev != w->cuda_dev[l]) {
    fprintf(stderr, "%s: rank %d: asked for a GPU communicator on CUDA device %d, "
            "zcc made one on %s %d\n", w->prog, w->rank + l, w->cuda_dev[l],
            dev < 0 ? "the host" : "device", dev);
    perf_abort(PERF_EXIT_FAIL);
  }
}

static void init_one(perf_world_t *w, int l, void *arg)
{
  const ids_t *ids = arg;
  zccConfig_t cfg = comm_config(w);
  zccResult_t res = zccCommInitRankConfig(&w->comms[l], w->nranks, ids->zcc, w->rank + l, &cfg);

  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommInitRankConfig", res);
  check_comm_device(w, l);
}

#ifdef ZCC_PERF_WITH_CUDA
static void init_one_nccl(perf_world_t *w, int l, void *arg)
{
  const ids_t *ids = arg;

  perf_nccl_init_rank(w, l, ids->nccl, w->rank + l);
}
#endif

/*
 * Every local rank's communicators: zcc's, then NCCL's with --compare nccl.
 * ids is NULL when one process holds every rank (zccCommInitAll).
 */
static void init_rank(perf_world_t *w, const ids_t *ids)
{
  if (w->device == PERF_DEVICE_HOST) {
    init_one(w, 0, (void *)ids);
    w->comm = w->comms[0];
    return;
  }
#ifdef ZCC_PERF_WITH_CUDA
  if (ids == NULL && w->nlocal > 1) {
    zccResult_t res = zccCommInitAll(w->comms, w->nlocal, w->cuda_dev);
    if (res != zccSuccess)
      perf_zcc_fail(w, "zccCommInitAll", res);
    for (int l = 0; l < w->nlocal; l++)
      check_comm_device(w, l);
  } else {
    perf_gpu_parallel(w, init_one, (void *)ids);
  }
  w->comm = w->comms[0];
  if (!w->opts->compare_nccl)
    return;
  if (ids == NULL)
    perf_nccl_init_all(w);
  else
    perf_gpu_parallel(w, init_one_nccl, (void *)ids);
#endif
}

static void finish_one(perf_world_t *w, int l, void *arg)
{
  zccResult_t res = zccCommFinalize(w->comms[l]);

  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommFinalize", res);
  res = zccCommDestroy(w->comms[l]);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommDestroy", res);
  w->comms[l] = NULL;
}

static void finish_rank(perf_world_t *w)
{
#ifdef ZCC_PERF_WITH_CUDA
  if (w->device == PERF_DEVICE_CUDA) {
    if (w->opts->compare_nccl)
      perf_nccl_destroy_all(w);
    perf_gpu_parallel(w, finish_one, NULL);
    w->comm = NULL;
    return;
  }
#endif
  finish_one(w, 0, NULL);
  w->comm = NULL;
}

/*
 * This process's ranks: the first is proc * nlocal of nprocs * nlocal.
 * Returns PERF_EXIT_OK, or PERF_EXIT_USAGE when the GPUs do not suffice.
 */
static int place(perf_world_t *w, int proc, int nprocs)
{
  int code = resolve_device(w, proc);

  w->rank = proc * w->nlocal;
  w->nranks = nprocs * w->nlocal;
  return code;
}

/* Load NCCL for --compare nccl (after place(): only GPU runs compare). */
static int load_nccl(const perf_world_t *w, int quiet)
{
  if (!w->opts->compare_nccl)
    return PERF_EXIT_OK;
  return perf_nccl_load(w->prog, w->coll, w->opts, quiet);
}

/* A rank's exit code as a process on its own: wrong results exit 1. */
static int process_code(int code)
{
  return code == PERF_EXIT_WRONG ? PERF_EXIT_FAIL : code;
}

static int run_single(perf_world_t *w)
{
  ids_t ids;
  int code;

  w->launcher = "single";
  w->local_index = 0;
  w->local_size = 1;
  code = place(w, 0, 1);
  if (code == PERF_EXIT_OK)
    code = load_nccl(w, 0);
  if (code != PERF_EXIT_OK)
    return code;
  memset(&ids, 0, sizeof(ids));
  if (w->nlocal > 1) {
    /* one process holds every rank: zccCommInitAll, ncclCommInitAll */
    init_rank(w, NULL);
  } else {
    make_ids(w, &ids);
    init_rank(w, &ids);
  }
  code = perf_run(w);
  finish_rank(w);
  return process_code(code);
}

static int run_env(perf_world_t *w, const char *launcher)
{
  static const char *const rank_vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                          "SLURM_PROCID", NULL};
  zccConfig_t cfg;
  zccResult_t res;
  long env_rank = env_long(rank_vars);
  int code;

  w->launcher = launcher;
  local_place_from_env(w);
  code = place(w, env_rank >= 0 ? (int)env_rank : 0, 1);
  w->rank = -1;
  if (code == PERF_EXIT_OK && w->nlocal > 1) {
    if (env_rank <= 0)
      fprintf(stderr, "%s: -g %d under %s: run one process per GPU (-g 1), or use -np or "
              "mpirun\n", w->prog, w->nlocal, launcher);
    code = PERF_EXIT_USAGE;
  }
  if (code == PERF_EXIT_OK)
    code = load_nccl(w, env_rank > 0);
  if (code != PERF_EXIT_OK)
    return code;
#ifdef ZCC_PERF_WITH_CUDA
  if (w->device == PERF_DEVICE_CUDA)
    perf_gpu_set_device(w, w->cuda_dev[0]);
#endif
  cfg = comm_config(w);
  res = zccCommInitFromEnv(&w->comms[0], &cfg);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommInitFromEnv", res);
  w->comm = w->comms[0];
  res = zccCommUserRank(w->comm, &w->rank);
  if (res == zccSuccess)
    res = zccCommCount(w->comm, &w->nranks);
  if (res != zccSuccess)
    perf_zcc_fail(w, "zccCommUserRank/zccCommCount", res);
  check_comm_device(w, 0);
#ifdef ZCC_PERF_WITH_CUDA
  if (w->opts->compare_nccl) {
    ids_t ids;

    memset(&ids, 0, sizeof(ids));
    if (w->rank == 0)
      perf_nccl_get_unique_id(w, ids.nccl);
    perf_gpu_broadcast(w, ids.nccl, sizeof(ids.nccl));
    perf_nccl_init_rank(w, 0, ids.nccl, w->rank);
  }
#endif
  code = perf_run(w);
  finish_rank(w);
  return process_code(code);
}

#ifdef ZCC_PERF_WITH_MPI
static int run_mpi(perf_world_t *w)
{
  ids_t ids;
  int code, proc, nprocs, worst = 0;

  w->launcher = "mpi";
  w->rank = -1;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "%s: MPI_Init failed\n", w->prog);
    return PERF_EXIT_FAIL;
  }
  mpi_active = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &proc);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  local_place_from_env(w);
  code = place(w, proc, nprocs);
  if (code == PERF_EXIT_OK)
    code = load_nccl(w, proc != 0);
  /* every rank leaves when one cannot run */
  MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != PERF_EXIT_OK) {
    MPI_Finalize();
    mpi_active = 0;
    return worst;
  }
  memset(&ids, 0, sizeof(ids));
  if (proc == 0)
    make_ids(w, &ids);
  MPI_Bcast(&ids, (int)sizeof(ids), MPI_BYTE, 0, MPI_COMM_WORLD);
  init_rank(w, &ids);
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

/* Read exactly one set of unique ids from fd; 0 on success, -1 on EOF or error. */
static int read_id(int fd, ids_t *id)
{
  size_t got = 0;

  while (got < sizeof(*id)) {
    ssize_t r = read(fd, (char *)id + got, sizeof(*id) - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_id(int fd, const ids_t *id)
{
  size_t put = 0;

  while (put < sizeof(*id)) {
    ssize_t r = write(fd, (const char *)id + put, sizeof(*id) - put);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    put += (size_t)r;
  }
  return 0;
}

/*
 * --bind core: rank `proc` on the proc-th CPU the launcher may run on, as
 * mpirun binds, when every rank can have one; else (oversubscribed) unbound.
 * Ranks that share a core wait for each other's time slices.
 */
static void bind_rank(const perf_world_t *w, int proc, int nprocs)
{
  cpu_set_t set, one;
  if (!w->opts->bind || sched_getaffinity(0, sizeof(set), &set) != 0)
    return;
  if (CPU_COUNT(&set) < nprocs)
    return;
  int k = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set))
      continue;
    if (k++ == proc) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      if (sched_setaffinity(0, sizeof(one), &one) != 0)
        fprintf(stderr, "%s: rank %d: cannot bind to CPU %d: %s\n", w->prog, proc, c,
                strerror(errno));
      return;
    }
  }
}

/* A forked process: wait for the unique ids, run, and exit. */
static void forked_rank(perf_world_t *w, int proc, int nprocs, pid_t parent, int idfd)
    __attribute__((noreturn));

static void forked_rank(perf_world_t *w, int proc, int nprocs, pid_t parent, int idfd)
{
  ids_t ids;
  int code;

  /* a rank must not outlive the parent that watches it */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(PERF_EXIT_FAIL);
  /* EOF: the parent could not make the ids, and says why itself */
  if (read_id(idfd, &ids) != 0)
    _exit(PERF_EXIT_FAIL);
  close(idfd);
  w->launcher = "fork";
  w->local_index = proc;
  w->local_size = nprocs;
  bind_rank(w, proc, nprocs);
  /* no CUDA call before this point: the parent never initialises CUDA before forking */
  code = place(w, proc, nprocs);
  if (code == PERF_EXIT_OK)
    code = load_nccl(w, 1);
  if (code != PERF_EXIT_OK)
    exit(code);
  init_rank(w, &ids);
  code = perf_run(w);
  finish_rank(w);
  fflush(stdout);
  exit(code);
}

/* Kill and reap every rank started so far, after a failure in the parent; returns code. */
static int abandon_ranks(pid_t *pids, int *idfds, int n, int code)
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
  return code;
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
  ids_t ids;
  zccResult_t res;

  if (w->coll->rooted && w->opts->root >= n * w->opts->ngpus) {
    fprintf(stderr, "%s: root %d is out of range for %d ranks\n", w->prog, w->opts->root,
            n * w->opts->ngpus);
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
      return abandon_ranks(pids, idfds, n, PERF_EXIT_FAIL);
    }
    pid = fork();
    if (pid < 0) {
      fprintf(stderr, "%s: fork of rank %d failed: %s\n", w->prog, i, strerror(errno));
      close(p[0]);
      close(p[1]);
      return abandon_ranks(pids, idfds, n, PERF_EXIT_FAIL);
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
  memset(&ids, 0, sizeof(ids));
  res = zccGetUniqueId(&ids.zcc);
  if (res != zccSuccess) {
    const char *last = zccGetLastError(NULL);
    fprintf(stderr, "%s: zccGetUniqueId failed: %s%s%s\n", w->prog, zccGetErrorString(res),
            last && *last ? ": " : "", last && *last ? last : "");
    return abandon_ranks(pids, idfds, n, PERF_EXIT_FAIL);
  }
#ifdef ZCC_PERF_WITH_CUDA
  /* NCCL's id is made here too, after the fork: the ranks never inherit CUDA state */
  if (w->opts->compare_nccl) {
    code = perf_nccl_load(w->prog, w->coll, w->opts, 0);
    if (code != PERF_EXIT_OK)
      return abandon_ranks(pids, idfds, n, code);
    perf_nccl_get_unique_id(w, ids.nccl);
  }
#endif
  for (int i = 0; i < n; i++) {
    if (write_id(idfds[i], &ids) != 0 && errno != EPIPE) {
      fprintf(stderr, "%s: sending the unique id to rank %d failed: %s\n", w->prog, i,
              strerror(errno));
      return abandon_ranks(pids, idfds, n, PERF_EXIT_FAIL);
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
  w.local_index = -1;
  size = launcher_size(&launcher);
  /* NCCL must never make NVLink multicast objects here; set before any rank loads it */
  if (opts.compare_nccl && getenv("NCCL_NVLS_ENABLE") == NULL) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    w.nvls_env_set = 1;
  }
  /* More ranks of this process on one GPU than CUDA's default 8 hardware queues
     for streams: zcc refuses them unless each rank's stream has a queue of its
     own (set before CUDA starts) */
  if (opts.ngpus > 8 && getenv("CUDA_DEVICE_MAX_CONNECTIONS") == NULL)
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  /* zccCommInitAll takes no config: the device type comes from ZCC_DEVICE */
  if (opts.device == PERF_DEVICE_CUDA)
    setenv("ZCC_DEVICE", "cuda", 1);

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
