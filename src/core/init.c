/* Communicator lifecycle: init, init-all, finalize, destroy, abort, queries. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "devops.h"
#include "debug.h"
#include "group.h"
#include "param.h"
#include "planner.h"
#include "topo.h"
#include "trace.h"
#include "transport.h"

ZCC_PARAM_STR(device, "DEVICE", "auto",
              "where communicators live: host, cuda, or auto (a GPU when one "
              "exists and zcc's GPU path is built, else the host)")
ZCC_PARAM_INT(timeout_ms, "TIMEOUT", 300000,
              "a collective that makes no progress for this many ms fails with "
              "zccTimeout (<= 0: wait forever)")

zccResult_t zcc_config_resolve(const zccConfig_t *config, int *device_type,
                               int64_t *timeout_ms, const char **name,
                               const char *fn) {
  int dt = ZCC_CONFIG_UNDEF_INT;
  int64_t to = ZCC_CONFIG_UNDEF_INT;
  const char *nm = NULL;
  if (config) {
    if (config->magic != ZCC_CONFIG_MAGIC)
      return zcc_error(zccInvalidArgument,
                       "%s: config was not initialised with ZCC_CONFIG_INITIALIZER "
                       "(magic 0x%x)", fn, config->magic);
    if (config->size < offsetof(zccConfig_t, commName) + sizeof(const char *) ||
        config->size > (1u << 20))
      return zcc_error(zccInvalidArgument, "%s: config size %zu is not a zccConfig_t",
                       fn, config->size);
    if (config->blocking != ZCC_CONFIG_UNDEF_INT && config->blocking != 0 &&
        config->blocking != 1)
      return zcc_error(zccInvalidArgument, "%s: config blocking=%d: expected 0 or 1", fn,
                       config->blocking);
    dt = config->deviceType;
    to = config->timeoutMs;
    nm = config->commName;
  }
  if (dt == ZCC_CONFIG_UNDEF_INT) {
    const char *env = zcc_param_device();
    if (!env || !*env || strcasecmp(env, "auto") == 0) dt = zccDeviceAuto;
    else if (strcasecmp(env, "host") == 0 || strcasecmp(env, "cpu") == 0) dt = zccDeviceHost;
    else if (strcasecmp(env, "cuda") == 0 || strcasecmp(env, "gpu") == 0) dt = zccDeviceCuda;
    else
      return zcc_error(zccInvalidArgument, "%s: ZCC_DEVICE=%s: expected host, cuda or auto",
                       fn, env);
  }
  if (dt != zccDeviceAuto && dt != zccDeviceHost && dt != zccDeviceCuda)
    return zcc_error(zccInvalidArgument, "%s: config deviceType %d is not a zccDeviceType_t",
                     fn, dt);
  if (dt == zccDeviceAuto)
    dt = zcc_cuda_gpu_path_available() ? zccDeviceCuda : zccDeviceHost;
  if (dt == zccDeviceCuda && !zcc_cuda_gpu_path_available())
    return zcc_error(zccInvalidUsage,
                     "%s: GPU communicators need a CUDA GPU and a zcc built with CUDA "
                     "(%s); use host communicators (ZCC_DEVICE=host)", fn,
                     zcc_device_cuda() ? "no CUDA device is visible" : "this build has no CUDA");
  if (to == ZCC_CONFIG_UNDEF_INT) to = zcc_param_timeout_ms();
  *device_type = dt;
  *timeout_ms = to;
  *name = nm;
  return zccSuccess;
}

static void log_tuning_plan(void *ctx, const char *line) {
  ZCC_INFO(TUNING, "%s: %s", (const char *)ctx, line);
}

/*
 * The communicator's graph (zcc_topo_acquire: ZCC_TOPO_FILE, or this
 * machine detected once per process) and its plan on it: the ranks placed
 * by host and GPU, the rings, trees and all-pairs islands, logged at INFO
 * TUNING. A bad ZCC_TOPO_FILE is an error; a machine that cannot be
 * detected leaves the communicator without a plan (its choices then come
 * from the link classes alone, zcc_select), with a warning.
 */
static zccResult_t comm_topology(struct zccComm *comm) {
  zccResult_t res = zcc_topo_acquire(&comm->topo);
  if (res != zccSuccess) {
    if (zcc_topo_requested()) return res;
    ZCC_WARN("comm %s rank %d: no topology (%s); choosing from link classes only",
             comm->name, comm->rank, zcc_last_error());
    comm->topo = NULL;
    return zccSuccess;
  }
  int n = comm->nranks, me = comm->rank;
  int first_here = 1;
  for (int j = 0; j < me; j++)
    if (comm->peers[j].host_hash == comm->peers[me].host_hash) first_here = 0;
  if (first_here)
    ZCC_INFO(TOPO, "comm %s rank %d: topology of %d host(s), %d nodes", comm->name, me,
             comm->topo->nhosts, comm->topo->nnodes);
  int *host = malloc(sizeof(int) * (size_t)n);
  const char **bus = malloc(sizeof(char *) * (size_t)n);
  if (!host || !bus) {
    free(host);
    free(bus);
    return zcc_error(zccSystemError, "init: out of memory");
  }
  /* comm hosts in the order of their lowest rank */
  int hosts = 0, shared_gpu = 0;
  for (int r = 0; r < n; r++) {
    host[r] = -1;
    for (int q = 0; q < r && host[r] < 0; q++)
      if (comm->peers[q].host_hash == comm->peers[r].host_hash) host[r] = host[q];
    if (host[r] < 0) host[r] = hosts++;
    bus[r] = comm->peers[r].gpu_bus_id;
    for (int q = 0; q < r; q++)
      if (host[q] == host[r] && strcmp(bus[q], bus[r]) == 0) shared_gpu = 1;
  }
  char who[96];
  snprintf(who, sizeof(who), "comm %s rank %d", comm->name, me);
  if (comm->device >= 0 && shared_gpu) {
    /* The graph planner places one rank per GPU; the connectors' rings run
       in rank order and every pair is on one GPU or NVLink. */
    ZCC_INFO(TUNING, "%s: ranks share GPUs: no graph plan, rings in rank order", who);
  } else {
    res = zcc_planner_for_comm(comm->topo, n, comm->nnodes, host,
                               comm->device >= 0 ? bus : NULL, &comm->topo_own, &comm->planner);
    if (res != zccSuccess) {
      ZCC_WARN("%s: no plan on the graph (%s); choosing from link classes only", who,
               zcc_last_error());
      res = zccSuccess;
    } else if (me == 0 && zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) {
      res = zcc_planner_describe(comm->planner, log_tuning_plan, who);
    }
  }
  free(host);
  free(bus);
  return res;
}

/*
 * The planner's view of this communicator, for zcc_select: from its plan
 * on the graph when there is one (as zcc_topo --file sees the same ranks),
 * else from the link classes: host ranks share memory on one host and TCP
 * across hosts; GPU ranks on one GPU share it (ZCC_PATH_SELF), else
 * NVLink or PCIe peer access (charged NVLink's measured costs, cost.c).
 */
ZCC_PARAM_INT(spin_us, "SPIN_US", -1,
              "host communicators: us a waiting rank polls without giving up its core before "
              "it yields or sleeps; -1: 20000 when each rank of the host is bound to CPUs of "
              "its own (mpirun, allreduce_perf --bind core), else 0 (64 polls; none where the "
              "host has more ranks than CPUs)")
ZCC_PARAM_INT(cpu_nudge, "CPU_NUDGE", 1,
              "host communicators: 1: an unbound rank (ranks of the host no more than their "
              "CPUs) whose waits keep handing its core to another task (a peer the scheduler "
              "put on the same CPU) moves itself to another of its CPUs, and one of ranks that "
              "outnumber their CPUs goes back to its home CPU (the mask's CPU at its index on "
              "the host), its affinity mask left as it was; 0: never")
ZCC_PARAM_INT(yield_us, "YIELD_US", -1,
              "host communicators: us a waiting rank then polls with sched_yield before it "
              "sleeps 50 us between polls; -1: 0 for ranks bound to CPUs of their own (a "
              "yield hands the core to any other runnable task for its whole slice), else 2000")

/*
 * The home CPU of an unbound rank where a host's ranks outnumber its CPUs
 * (ZCC_CPU_NUDGE): the CPU of its mask at its local index, modulo the
 * mask's CPUs, so that the host's ranks share the CPUs evenly; -1: none.
 * Its waits go back there when the kernel has put it elsewhere (exec/host.c).
 */
static int home_cpu(int local_index) {
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || CPU_COUNT(&mask) < 2) return -1;
  int want = local_index % CPU_COUNT(&mask);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &mask) && want-- == 0) return c;
  return -1;
}

/*
 * How host ranks wait (exec/host.c). A rank bound to CPUs no other rank of
 * the host may use owns them: it polls, since its peers are running and
 * answer within microseconds, and sleeps only after ZCC_SPIN_US, so a slow
 * peer never costs its core for long. Ranks that share CPUs (unbound, or
 * more ranks than CPUs) poll a few times, then yield, then sleep: the peer
 * a rank waits for may be waiting for its core, and spinning would take
 * the core from it (measured in docs/perf/host.md).
 */
static zccResult_t comm_wait_policy(struct zccComm *comm) {
  const zcc_peer_info_t *self = &comm->peers[comm->rank];
  /* Every host's ranks and the CPUs they may use, from the peers' records. */
  struct host_cpus {
    uint64_t hash, cpus[16];
    int ranks, ncpu;
  } *hc = calloc((size_t)comm->nnodes, sizeof(*hc));
  if (!hc) return zcc_error(zccSystemError, "init: out of memory");
  int nh = 0, mine = 0;
  for (int r = 0; r < comm->nranks; r++) {
    int h = 0;
    while (h < nh && hc[h].hash != comm->peers[r].host_hash) h++;
    if (h == nh) {
      if (nh == comm->nnodes) break; /* (nnodes counts the same hashes) */
      hc[nh++].hash = comm->peers[r].host_hash;
    }
    if (r == comm->rank) mine = h;
    hc[h].ranks++;
    for (int w = 0; w < 16; w++) hc[h].cpus[w] |= comm->peers[r].cpus[w];
  }
  /* The plans and the model (which charges each round a scheduling turn,
     plan/cost.c) take the most oversubscribed host's ranks per CPU: every
     rank of every host computes the same. */
  double worst = 0;
  for (int h = 0; h < nh; h++) {
    for (int w = 0; w < 16; w++) hc[h].ncpu += __builtin_popcountll(hc[h].cpus[w]);
    if (hc[h].ncpu > 0 && hc[h].ranks > hc[h].ncpu && (double)hc[h].ranks / hc[h].ncpu > worst)
      worst = (double)hc[h].ranks / hc[h].ncpu;
  }
  int local = hc[mine].ranks, ncpu = hc[mine].ncpu;
  free(hc);
  comm->oversub_any = worst > 1;
  if (comm->select) comm->select->ctx.oversub = worst;
  /* bound: every rank of the host has CPUs, and no CPU is in two ranks' masks */
  int bound = ncpu > 0;
  for (int a = 0; a < comm->nranks && bound; a++) {
    const zcc_peer_info_t *pa = &comm->peers[a];
    if (pa->host_hash != self->host_hash) continue;
    uint64_t any = 0;
    for (int w = 0; w < 16; w++) any |= pa->cpus[w];
    if (!any) bound = 0;
    for (int b = a + 1; b < comm->nranks && bound; b++) {
      const zcc_peer_info_t *pb = &comm->peers[b];
      if (pb->host_hash != self->host_hash) continue;
      for (int w = 0; w < 16; w++)
        if (pa->cpus[w] & pb->cpus[w]) bound = 0;
    }
  }
  /* Every rank of the host computes the same from the same records. */
  comm->oversubscribed = ncpu > 0 && local > ncpu;
  int64_t spin = zcc_param_spin_us(), yield = zcc_param_yield_us();
  comm->spin_ns = (spin >= 0 ? spin : bound ? 20000 : 0) * 1000;
  comm->yield_ns = (yield >= 0 ? yield : bound ? 0 : 2000) * 1000;
  /* With more ranks than CPUs the peer waited for is likely waiting for
     this core: 64 polls before the first yield cost 8 ranks 35 us per 8 B
     allreduce against 12-16 us yielding at once (docs/perf/host.md). Such
     a wait yields at its first idle poll and reads the clock every 16th
     (each poll a yield: the move to sleeping comes within microseconds). */
  comm->yield_at_once = comm->oversubscribed && comm->spin_ns == 0;
  comm->wait_polls = comm->oversubscribed ? 16 : 64;
  int64_t nudge = zcc_param_cpu_nudge();
  if (nudge != 0 && nudge != 1)
    return zcc_error(zccInvalidArgument, "ZCC_CPU_NUDGE=%lld: expected 0 or 1", (long long)nudge);
  comm->nudge = nudge && !bound && !comm->oversubscribed && ncpu > 1;
  comm->home_cpu = -1;
  if (nudge && !bound && comm->oversubscribed && ncpu > 1) {
    int index = 0, alone = 1;
    for (int r = 0; r < comm->nranks; r++) {
      const zcc_peer_info_t *pr = &comm->peers[r];
      if (r == comm->rank || pr->host_hash != self->host_hash) continue;
      if (zcc_peer_same_process(pr, self)) alone = 0;
      if (r < comm->rank) index++;
    }
    if (alone) comm->home_cpu = home_cpu(index);
  }
  ZCC_INFO(INIT, "comm %s rank %d: %d rank(s) on this host, %d CPU(s) for them, %s: waits "
           "spin %lld us, yield %lld us, then sleep; the clock read every %u poll(s)%s",
           comm->name, comm->rank, local, ncpu, bound ? "each bound to its own" : "sharing them",
           (long long)(comm->spin_ns / 1000), (long long)(comm->yield_ns / 1000),
           comm->wait_polls, comm->nudge ? "; a rank that shares its CPU moves off it"
                             : comm->home_cpu >= 0 ? "; waits go back to the rank's home CPU"
                                                   : "");
  return zccSuccess;
}

static zccResult_t comm_select(struct zccComm *comm) {
  comm->select = calloc(1, sizeof(*comm->select));
  if (!comm->select) return zcc_error(zccSystemError, "init: out of memory");
  zcc_select_ctx_t *c = &comm->select->ctx;
  if (comm->planner) {
    zcc_select_ctx_of_plan(comm->planner, c);
    return zccSuccess;
  }
  c->gpu = comm->device >= 0;
  c->nranks = comm->nranks;
  c->nnodes = comm->nnodes;
  if (!c->gpu) {
    c->link_class = comm->nnodes > 1 ? ZCC_PATH_NET : ZCC_PATH_SELF;
    return zccSuccess;
  }
  c->link_class = ZCC_PATH_SELF;
  for (int r = 0; r < comm->nranks; r++)
    if (strcmp(comm->peers[r].gpu_bus_id, comm->peers[comm->rank].gpu_bus_id) != 0)
      c->link_class = ZCC_PATH_NVL;
  return zccSuccess;
}

/*
 * The groups of hierarchical plans, from the host ring (each host's ranks
 * together, in rank order): hier_local, this host's ranks, and hier_rail,
 * the rank of this rank's local index on every host. Set only where every
 * host has the same number of ranks, 2 or more, and there are several
 * hosts; the select context learns the fewest and most ranks on a host.
 */
static zccResult_t comm_hier(struct zccComm *comm, const uint64_t *hosts) {
  int n = comm->nranks, *order = comm->ring_order;
  int mn = n, mx = 0, h = 0, me_h = 0, me_i = 0;
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && hosts[order[j]] == hosts[order[i]]) j++;
    if (j - i < mn) mn = j - i;
    if (j - i > mx) mx = j - i;
    if (comm->ring_pos >= i && comm->ring_pos < j) {
      me_h = h;
      me_i = comm->ring_pos - i;
    }
    h++;
    i = j;
  }
  comm->select->ctx.min_local = mn;
  comm->select->ctx.max_local = mx;
  if (h < 2 || mn != mx || mx < 2) return zccSuccess;
  comm->hier_local = malloc(sizeof(int) * (size_t)mx);
  comm->hier_rail = malloc(sizeof(int) * (size_t)h);
  if (!comm->hier_local || !comm->hier_rail) return zcc_error(zccSystemError, "init: out of memory");
  comm->hier_m = mx;
  comm->hier_h = h;
  comm->hier_li = me_i;
  comm->hier_hi = me_h;
  for (int i = 0; i < mx; i++) comm->hier_local[i] = order[me_h * mx + i];
  for (int k = 0; k < h; k++) comm->hier_rail[k] = order[k * mx + me_i];
  return zccSuccess;
}

/*
 * The ring host collectives run on: from the planner, each host's ranks
 * together (zcc_planner_host_ring), so that a ring over several hosts
 * crosses every host boundary once. INFO TUNING prints it. The
 * hierarchical groups come from it (comm_hier), for host and GPU
 * communicators alike.
 */
static zccResult_t comm_ring(struct zccComm *comm) {
  int n = comm->nranks;
  uint64_t *hosts = calloc((size_t)n, sizeof(*hosts));
  comm->ring_order = malloc(sizeof(int) * (size_t)n);
  if (!hosts || !comm->ring_order) {
    free(hosts);
    return zcc_error(zccSystemError, "init: out of memory");
  }
  for (int r = 0; r < n; r++) hosts[r] = comm->peers[r].host_hash;
  int crossings = zcc_planner_host_ring(n, hosts, comm->ring_order);
  if (crossings < 0) {
    free(hosts);
    return zcc_error(zccInternalError, "init: cannot plan the host ring");
  }
  for (int i = 0; i < n; i++)
    if (comm->ring_order[i] == comm->rank) comm->ring_pos = i;
  zccResult_t res = comm_hier(comm, hosts);
  free(hosts);
  ZCC_CHECK(res);
  /* A GPU communicator's rings are its connectors' (exec/gpu_comm.c logs
     them and its decisions); it takes only the hierarchical groups. */
  if (comm->device < 0 && zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) {
    char buf[512];
    size_t len = 0;
    for (int i = 0; i < n && len + 16 < sizeof(buf); i++)
      len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%d", i ? " " : "",
                              comm->ring_order[i]);
    if (len + 16 >= sizeof(buf)) snprintf(buf + len, sizeof(buf) - len, " ...");
    ZCC_INFO(TUNING, "comm %s rank %d: host ring %s (%d host crossing(s), %d host(s))",
             comm->name, comm->rank, buf, crossings, comm->nnodes);
    char who[96];
    snprintf(who, sizeof(who), "comm %s rank %d", comm->name, comm->rank);
    ZCC_CHECK(zcc_planner_decisions(&comm->select->ctx, zcc_log_tuning_line, who));
  }
  return zccSuccess;
}

zccResult_t zcc_comm_init(struct zccComm **out, int nranks, const zccUniqueId *id,
                          int rank, const zccConfig_t *config, const char *fn) {
  return zcc_comm_init_watched(out, nranks, id, rank, config, fn, NULL);
}

/* The arguments' checks and the communicator's first fields: what every
   init does before it talks to anyone. Nothing is made on an error. */
static zccResult_t comm_shell(struct zccComm **out, int nranks, const zccUniqueId *id, int rank,
                              const zccConfig_t *config, const char *fn, const char **name) {
  if (nranks < 1)
    return zcc_error(zccInvalidArgument, "%s: nranks %d must be at least 1", fn, nranks);
  if (rank < 0 || rank >= nranks)
    return zcc_error(zccInvalidArgument, "%s: rank %d is out of range [0, %d)", fn,
                     rank, nranks);
  zcc_unique_id_t decoded;
  ZCC_CHECK(zcc_bootstrap_id_decode(id, &decoded));
  int device_type;
  int64_t timeout_ms;
  ZCC_CHECK(zcc_config_resolve(config, &device_type, &timeout_ms, name, fn));
  struct zccComm *comm = calloc(1, sizeof(*comm));
  if (!comm) return zcc_error(zccSystemError, "%s: out of memory", fn);
  comm->magic = ZCC_COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = -1;
  comm->device_type = device_type;
  comm->timeout_ms = timeout_ms;
  pthread_mutex_init(&comm->reg_lock, NULL);
  pthread_mutex_init(&comm->redop_lock, NULL);
  *out = comm;
  return zccSuccess;
}

/* Everything else: rendezvous, connections, plan, GPU setup. On an error
   the communicator holds what was made, for zcc_comm_free. */
static zccResult_t comm_build(struct zccComm *comm, const zccUniqueId *id, const char *name,
                              const atomic_int *stop) {
  zcc_log_rank = comm->rank;
  /* Nobody holds a blocking init's communicator yet, so nothing else can
     abort its rendezvous: a caller's stop flag (a split watching its
     parent) may. A non-blocking init's caller aborts through abort_flag. */
  ZCC_CHECK(zcc_bootstrap_init(id, comm->rank, comm->nranks, zcc_bootstrap_init_timeout_ms(),
                               stop ? stop : &comm->abort_flag, &comm->bootstrap));
  comm->hash = zcc_bootstrap_hash(comm->bootstrap);
  memcpy(comm->secret, zcc_bootstrap_secret(comm->bootstrap), ZCC_SECRET_BYTES);
  if (name && *name)
    snprintf(comm->name, sizeof(comm->name), "%s", name);
  else
    snprintf(comm->name, sizeof(comm->name), "%016llx", (unsigned long long)comm->hash);
  if (comm->device_type == zccDeviceCuda) {
    const zcc_device_ops_t *dev = zcc_device_cuda(); /* present: zcc_config_resolve checked */
    ZCC_CHECK(dev->current(&comm->device, comm->gpu_bus_id, sizeof(comm->gpu_bus_id)));
    comm->dev = dev; /* its free undoes what its setup made, even in part */
  }
  ZCC_CHECK(zcc_transport_connect_all(comm));
  ZCC_CHECK(comm_topology(comm));
  ZCC_CHECK(comm_select(comm));
  ZCC_CHECK(comm_wait_policy(comm));
  /* The link probe runs over the connections: a host communicator's exist
     now, a GPU communicator's once its windows are mapped (setup). */
  if (!comm->dev) ZCC_CHECK(zcc_comm_measure(comm));
  ZCC_CHECK(comm_ring(comm));
  zcc_trace_comm_init(comm);
  if (comm->dev) ZCC_CHECK(comm->dev->setup(comm));
  if (comm->dev) ZCC_CHECK(zcc_comm_measure(comm));
  if (comm->device >= 0)
    ZCC_INFO(INIT, "comm %s rank %d nranks %d on GPU %d (%s) ready", comm->name, comm->rank,
             comm->nranks, comm->device, comm->gpu_bus_id);
  else
    ZCC_INFO(INIT, "comm %s rank %d nranks %d on the host ready", comm->name, comm->rank,
             comm->nranks);
  return zccSuccess;
}

zccResult_t zcc_comm_init_watched(struct zccComm **out, int nranks, const zccUniqueId *id,
                                  int rank, const zccConfig_t *config, const char *fn,
                                  const atomic_int *stop) {
  if (!out) return zcc_error(zccInvalidArgument, "%s: comm is NULL", fn);
  struct zccComm *comm = NULL;
  const char *name = NULL;
  ZCC_CHECK(comm_shell(&comm, nranks, id, rank, config, fn, &name));
  zccResult_t res = comm_build(comm, id, name, stop);
  if (res != zccSuccess) {
    zcc_comm_free(comm);
    return res;
  }
  zcc_comm_register(comm);
  *out = comm;
  return zccSuccess;
}

/* ---- non-blocking init (config blocking = 0) ---- */

typedef struct init_job {
  struct zccComm *comm;
  zccUniqueId id;
  char name[64];
  int has_name;
  int device; /* the caller's current CUDA device, for a GPU communicator */
} init_job_t;

static void *init_job_main(void *arg) {
  init_job_t *j = arg;
  struct zccComm *comm = j->comm;
  zccResult_t res = zccSuccess;
  if (comm->device_type == zccDeviceCuda) res = zcc_device_cuda()->bind(j->device);
  if (res == zccSuccess) res = comm_build(comm, &j->id, j->has_name ? j->name : NULL, NULL);
  if (res != zccSuccess) {
    /* Only the state: the peers learn from this rank's bootstrap closing
       (the caller's destroy or abort frees what was made). */
    snprintf(comm->error_msg, sizeof(comm->error_msg), "%s", zcc_last_error());
    atomic_store(&comm->error_claim, 1);
    atomic_store_explicit(&comm->async_error, (int)res, memory_order_release);
    ZCC_INFO(INIT, "non-blocking init of rank %d failed: %s", comm->rank, comm->error_msg);
  }
  free(j);
  atomic_store_explicit(&comm->init_pending, 0, memory_order_release);
  return NULL;
}

/* Wait for a non-blocking init's thread (once; any caller). */
void zcc_comm_init_join(struct zccComm *comm) {
  if (atomic_exchange(&comm->init_thread_live, 0)) pthread_join(comm->init_thread, NULL);
}

static zccResult_t comm_init_nonblocking(struct zccComm **out, int nranks,
                                         const zccUniqueId *id, int rank,
                                         const zccConfig_t *config, const char *fn) {
  if (!out) return zcc_error(zccInvalidArgument, "%s: comm is NULL", fn);
  struct zccComm *comm = NULL;
  const char *name = NULL;
  ZCC_CHECK(comm_shell(&comm, nranks, id, rank, config, fn, &name));
  init_job_t *j = calloc(1, sizeof(*j));
  zccResult_t res = zccSuccess;
  if (!j) {
    res = zcc_error(zccSystemError, "%s: out of memory", fn);
    goto fail;
  }
  j->comm = comm;
  j->id = *id;
  if (name && *name) {
    snprintf(j->name, sizeof(j->name), "%s", name);
    j->has_name = 1;
  }
  if (comm->device_type == zccDeviceCuda) {
    char bus[32];
    ZCC_CHECK_GOTO(zcc_device_cuda()->current(&j->device, bus, sizeof(bus)), res, fail);
  }
  snprintf(comm->name, sizeof(comm->name), "(rank %d, initialising)", rank);
  atomic_store(&comm->init_pending, 1);
  zcc_comm_register(comm);
  int rc = pthread_create(&comm->init_thread, NULL, init_job_main, j);
  if (rc != 0) {
    zcc_comm_unregister(comm);
    res = zcc_error(zccSystemError, "%s: cannot start the init thread: %s", fn, strerror(rc));
    goto fail;
  }
  atomic_store(&comm->init_thread_live, 1);
  ZCC_INFO(INIT, "%s: rank %d of %d initialises in the background (blocking=0)", fn, rank,
           nranks);
  *out = comm;
  return zcc_error(zccInProgress, "%s: the communicator is being initialised (blocking=0): "
                   "poll zccCommGetAsyncError until it is not zccInProgress", fn);
fail:
  free(j);
  zcc_comm_free(comm);
  return res;
}

zccResult_t zccGetUniqueId(zccUniqueId *uniqueId) {
  if (!uniqueId) return zcc_error(zccInvalidArgument, "zccGetUniqueId: uniqueId is NULL");
  return zcc_bootstrap_create_root(uniqueId, NULL, NULL, NULL);
}

zccResult_t zccCommInitRank(zccComm_t *comm, int nranks, zccUniqueId commId, int rank) {
  return zcc_comm_init(comm, nranks, &commId, rank, NULL, "zccCommInitRank");
}

zccResult_t zccCommInitRankConfig(zccComm_t *comm, int nranks, zccUniqueId commId,
                                  int rank, zccConfig_t *config) {
  if (config && config->magic == ZCC_CONFIG_MAGIC && config->blocking == 0)
    return comm_init_nonblocking(comm, nranks, &commId, rank, config, "zccCommInitRankConfig");
  return zcc_comm_init(comm, nranks, &commId, rank, config, "zccCommInitRankConfig");
}

typedef struct init_all_arg {
  zccUniqueId id;
  int nranks, rank;
  int device_type, device;
  struct zccComm *comm;
  zccResult_t res;
  char err[256];
} init_all_arg_t;

static void *init_all_thread(void *p) {
  init_all_arg_t *a = p;
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = a->device_type;
  const zcc_device_ops_t *dev = zcc_device_cuda();
  if (a->device_type == zccDeviceCuda && dev && (a->res = dev->bind(a->device)) != zccSuccess) {
    snprintf(a->err, sizeof(a->err), "%s", zcc_last_error());
    return NULL;
  }
  a->res = zcc_comm_init(&a->comm, a->nranks, &a->id, a->rank, &cfg, "zccCommInitAll");
  if (a->res != zccSuccess) snprintf(a->err, sizeof(a->err), "%s", zcc_last_error());
  return NULL;
}

zccResult_t zccCommInitAll(zccComm_t *comms, int ndev, const int *devlist) {
  if (!comms) return zcc_error(zccInvalidArgument, "zccCommInitAll: comms is NULL");
  if (ndev < 1)
    return zcc_error(zccInvalidArgument, "zccCommInitAll: ndev %d must be at least 1", ndev);
  int dt;
  int64_t to;
  const char *nm;
  ZCC_CHECK(zcc_config_resolve(NULL, &dt, &to, &nm, "zccCommInitAll"));
  if (dt == zccDeviceCuda) {
    int ndevs = zcc_cuda_device_count();
    /* A device may be listed more than once: its ranks share the GPU. */
    for (int i = 0; i < ndev; i++) {
      int d = devlist ? devlist[i] : i;
      if (d < 0 || d >= ndevs)
        return zcc_error(zccInvalidArgument,
                         "zccCommInitAll: device %d (entry %d) does not exist: %d CUDA "
                         "device(s) are visible", d, i, ndevs);
    }
  }
  /* Host communicators: devlist does not apply. */
  init_all_arg_t *args = calloc((size_t)ndev, sizeof(*args));
  pthread_t *threads = calloc((size_t)ndev, sizeof(*threads));
  zccResult_t res = zccSuccess;
  if (!args || !threads) {
    res = zcc_error(zccSystemError, "zccCommInitAll: out of memory");
    goto out;
  }
  zccUniqueId id;
  ZCC_CHECK_GOTO(zcc_bootstrap_create_root(&id, NULL, NULL, NULL), res, out);
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    args[i].id = id;
    args[i].nranks = ndev;
    args[i].rank = i;
    args[i].device_type = dt;
    args[i].device = devlist ? devlist[i] : i;
    if (pthread_create(&threads[i], NULL, init_all_thread, &args[i]) != 0) {
      res = zcc_error(zccSystemError, "zccCommInitAll: cannot start thread %d", i);
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i < started && res == zccSuccess; i++)
    if (args[i].res != zccSuccess)
      res = zcc_error(args[i].res, "zccCommInitAll: rank %d: %s", i, args[i].err);
  if (res != zccSuccess) {
    for (int i = 0; i < started; i++)
      if (args[i].comm) {
        zcc_comm_unregister(args[i].comm);
        zcc_comm_free(args[i].comm);
      }
    goto out;
  }
  for (int i = 0; i < ndev; i++) comms[i] = args[i].comm;
out:
  free(args);
  free(threads);
  return res;
}

zccResult_t zccCommFinalize(zccComm_t comm) {
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommFinalize", 0));
  /* Host collectives complete before they return: nothing is outstanding. */
  zcc_comm_leave(comm);
  return zccSuccess;
}

/* Wait for the calls still holding comm (their waits see the abort flag). */
static void stop_calls(struct zccComm *comm) {
  if (atomic_load(&comm->busy) > 0) {
    /* A call in flight in another thread (a usage error, but it must not
       make destroy wait for that call's timeout): it gives up now. */
    atomic_store(&comm->abort_flag, 1);
    zcc_comm_set_error_msg(comm, zccRemoteError,
                           "the communicator was destroyed while a call was in flight");
  }
  zcc_comm_wait_idle(comm);
}

zccResult_t zccCommDestroy(zccComm_t comm) {
  if (!comm) return zcc_error(zccInvalidArgument, "zccCommDestroy: comm is NULL");
  if (zcc_comm_is_live(comm) && zcc_comm_held_here(comm))
    return zcc_error(zccInvalidUsage,
                     "zccCommDestroy: comm %s has operations queued in this thread's open "
                     "group; call zccGroupEnd first (or zccCommAbort to drop them)",
                     comm->name);
  if (!zcc_comm_unregister(comm))
    return zcc_error(zccInvalidUsage,
                     "zccCommDestroy: comm %p is not a live communicator (destroyed, "
                     "aborted or never created)", (void *)comm);
  if (atomic_load(&comm->init_pending)) {
    /* A non-blocking init still running: it is stopped, not waited for. */
    atomic_store(&comm->abort_flag, 1);
    ZCC_INFO(INIT, "rank %d: destroy stops the communicator's non-blocking init", comm->rank);
  }
  zcc_comm_init_join(comm);
  stop_calls(comm);
  ZCC_INFO(INIT, "comm %s rank %d destroyed", comm->name, comm->rank);
  zcc_comm_free(comm);
  return zccSuccess;
}

zccResult_t zccCommAbort(zccComm_t comm) {
  if (!comm) return zcc_error(zccInvalidArgument, "zccCommAbort: comm is NULL");
  if (!zcc_comm_unregister(comm))
    return zcc_error(zccInvalidUsage,
                     "zccCommAbort: comm %p is not a live communicator (destroyed, "
                     "aborted or never created)", (void *)comm);
  atomic_store(&comm->abort_flag, 1);
  /* A non-blocking init still running gives up at its next wait. */
  zcc_comm_init_join(comm);
  zcc_comm_set_error_msg(comm, zccRemoteError, "the communicator was aborted (zccCommAbort)");
  /* Operations this thread queued in its open group will never run. */
  int dropped = zcc_group_drop_comm(comm);
  if (dropped)
    ZCC_INFO(INIT, "comm %s rank %d: abort drops %d operation(s) queued in the open group",
             comm->name, comm->rank, dropped);
  if (comm->dev) comm->dev->stop(comm);
  zcc_comm_wait_idle(comm);
  ZCC_INFO(INIT, "comm %s rank %d aborted", comm->name, comm->rank);
  zcc_comm_free(comm);
  return zccSuccess;
}

zccResult_t zccCommGetAsyncError(zccComm_t comm, zccResult_t *asyncError) {
  if (!asyncError)
    return zcc_error(zccInvalidArgument, "zccCommGetAsyncError: asyncError is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommGetAsyncError", ZCC_ENTER_DURING_INIT));
  if (atomic_load_explicit(&comm->init_pending, memory_order_acquire)) {
    *asyncError = zccInProgress;
    zcc_comm_leave(comm);
    return zccSuccess;
  }
  zcc_comm_init_join(comm);
  *asyncError = (zccResult_t)atomic_load_explicit(&comm->async_error, memory_order_acquire);
  /* The cause, for zccGetLastError in this thread (it may have come from another). */
  if (*asyncError != zccSuccess) zcc_restore_last_error(comm->error_msg);
  zcc_comm_leave(comm);
  return zccSuccess;
}

zccResult_t zccCommCount(const zccComm_t comm, int *count) {
  if (!count) return zcc_error(zccInvalidArgument, "zccCommCount: count is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommCount", ZCC_ENTER_DURING_INIT));
  *count = comm->nranks;
  zcc_comm_leave(comm);
  return zccSuccess;
}

zccResult_t zccCommCuDevice(const zccComm_t comm, int *device) {
  if (!device) return zcc_error(zccInvalidArgument, "zccCommCuDevice: device is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommCuDevice", 0));
  *device = comm->device;
  zcc_comm_leave(comm);
  return zccSuccess;
}

zccResult_t zccCommUserRank(const zccComm_t comm, int *rank) {
  if (!rank) return zcc_error(zccInvalidArgument, "zccCommUserRank: rank is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommUserRank", ZCC_ENTER_DURING_INIT));
  *rank = comm->rank;
  zcc_comm_leave(comm);
  return zccSuccess;
}
