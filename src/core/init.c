/* Communicator lifecycle: init, init-all, finalize, destroy, abort, queries. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#ifdef ZCC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu.h"
#endif
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
    if (config->blocking != ZCC_CONFIG_UNDEF_INT && config->blocking != 1)
      return zcc_error(zccInvalidArgument,
                       "%s: config blocking=%d: only blocking communicators (1) are "
                       "supported", fn, config->blocking);
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
#ifdef ZCC_HAVE_CUDA
                     "no CUDA device is visible"
#else
                     "this build has no CUDA"
#endif
    );
  if (to == ZCC_CONFIG_UNDEF_INT) to = zcc_param_timeout_ms();
  *device_type = dt;
  *timeout_ms = to;
  *name = nm;
  return zccSuccess;
}

/*
 * Host communicators plan with the host link classes (shared memory, TCP);
 * the machine's graph is loaded or detected when ZCC_TOPO_FILE or
 * ZCC_TOPO_DUMP_FILE asks for it, by the first rank of each host.
 */
static zccResult_t comm_topology(struct zccComm *comm) {
  if (!zcc_topo_requested()) return zccSuccess;
  for (int j = 0; j < comm->rank; j++)
    if (comm->peers[j].host_hash == comm->peers[comm->rank].host_hash) return zccSuccess;
  zcc_topo_t *g = NULL;
  ZCC_CHECK(zcc_topo_for_comm(&g));
  ZCC_INFO(TOPO, "comm %s rank %d: topology of %d host(s), %d nodes", comm->name, comm->rank,
           g->nhosts, g->nnodes);
  zcc_topo_free(g);
  return zccSuccess;
}

/*
 * The ring host collectives run on: from the planner, each host's ranks
 * together (zcc_planner_host_ring), so that a ring over several hosts
 * crosses every host boundary once. INFO TUNING prints it.
 */
static zccResult_t comm_ring(struct zccComm *comm) {
  int n = comm->nranks;
  uint64_t *hosts = malloc(sizeof(*hosts) * (size_t)n);
  comm->ring_order = malloc(sizeof(int) * (size_t)n);
  if (!hosts || !comm->ring_order) {
    free(hosts);
    return zcc_error(zccSystemError, "init: out of memory");
  }
  for (int r = 0; r < n; r++) hosts[r] = comm->peers[r].host_hash;
  int crossings = zcc_planner_host_ring(n, hosts, comm->ring_order);
  free(hosts);
  if (crossings < 0) return zcc_error(zccInternalError, "init: cannot plan the host ring");
  for (int i = 0; i < n; i++)
    if (comm->ring_order[i] == comm->rank) comm->ring_pos = i;
  if (zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) {
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
    ZCC_CHECK(zcc_planner_decisions(0, n, comm->nnodes, zcc_log_tuning_line, who));
  }
  return zccSuccess;
}

zccResult_t zcc_comm_init(struct zccComm **out, int nranks, const zccUniqueId *id,
                          int rank, const zccConfig_t *config, const char *fn) {
  zccResult_t res = zccSuccess;
  if (!out) return zcc_error(zccInvalidArgument, "%s: comm is NULL", fn);
  if (nranks < 1)
    return zcc_error(zccInvalidArgument, "%s: nranks %d must be at least 1", fn, nranks);
  if (rank < 0 || rank >= nranks)
    return zcc_error(zccInvalidArgument, "%s: rank %d is out of range [0, %d)", fn,
                     rank, nranks);
  zcc_unique_id_t decoded;
  ZCC_CHECK(zcc_bootstrap_id_decode(id, &decoded));
  int device_type;
  int64_t timeout_ms;
  const char *name;
  ZCC_CHECK(zcc_config_resolve(config, &device_type, &timeout_ms, &name, fn));

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
  zcc_log_rank = rank;

  ZCC_CHECK_GOTO(zcc_bootstrap_init(id, rank, nranks, zcc_bootstrap_init_timeout_ms(),
                                    &comm->abort_flag, &comm->bootstrap),
                 res, fail);
  comm->hash = zcc_bootstrap_hash(comm->bootstrap);
  memcpy(comm->secret, zcc_bootstrap_secret(comm->bootstrap), ZCC_SECRET_BYTES);
  if (name && *name)
    snprintf(comm->name, sizeof(comm->name), "%s", name);
  else
    snprintf(comm->name, sizeof(comm->name), "%016llx", (unsigned long long)comm->hash);
#ifdef ZCC_HAVE_CUDA
  if (device_type == zccDeviceCuda) {
    ZCC_CHECK_GOTO(zcc_gpu_current_device(&comm->device), res, fail);
    char name_buf[64];
    int arch = 0;
    if (zcc_cuda_device_info(comm->device, comm->gpu_bus_id, sizeof(comm->gpu_bus_id), name_buf,
                             sizeof(name_buf), &arch) != 0)
      snprintf(comm->gpu_bus_id, sizeof(comm->gpu_bus_id), "gpu%d", comm->device);
  }
#endif
  ZCC_CHECK_GOTO(zcc_transport_connect_all(comm), res, fail);
  ZCC_CHECK_GOTO(comm_topology(comm), res, fail);
  if (comm->device < 0) ZCC_CHECK_GOTO(comm_ring(comm), res, fail);
  zcc_trace_comm_init(comm);
#ifdef ZCC_HAVE_CUDA
  if (comm->device >= 0) ZCC_CHECK_GOTO(zcc_gpu_comm_setup(comm), res, fail);
#endif
  zcc_comm_register(comm);
  if (comm->device >= 0)
    ZCC_INFO(INIT, "comm %s rank %d nranks %d on GPU %d (%s) ready", comm->name, rank, nranks,
             comm->device, comm->gpu_bus_id);
  else
    ZCC_INFO(INIT, "comm %s rank %d nranks %d on the host ready", comm->name, rank, nranks);
  *out = comm;
  return zccSuccess;
fail:
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
#ifdef ZCC_HAVE_CUDA
  if (a->device_type == zccDeviceCuda && cudaSetDevice(a->device) != cudaSuccess) {
    a->res = zccUnhandledCudaError;
    snprintf(a->err, sizeof(a->err), "cudaSetDevice(%d) failed", a->device);
    return NULL;
  }
#endif
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
  zcc_comm_set_error_msg(comm, zccRemoteError, "the communicator was aborted (zccCommAbort)");
  /* Operations this thread queued in its open group will never run. */
  int dropped = zcc_group_drop_comm(comm);
  if (dropped)
    ZCC_INFO(INIT, "comm %s rank %d: abort drops %d operation(s) queued in the open group",
             comm->name, comm->rank, dropped);
#ifdef ZCC_HAVE_CUDA
  zcc_gpu_comm_stop_kernels(comm);
#endif
  zcc_comm_wait_idle(comm);
  ZCC_INFO(INIT, "comm %s rank %d aborted", comm->name, comm->rank);
  zcc_comm_free(comm);
  return zccSuccess;
}

zccResult_t zccCommGetAsyncError(zccComm_t comm, zccResult_t *asyncError) {
  if (!asyncError)
    return zcc_error(zccInvalidArgument, "zccCommGetAsyncError: asyncError is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommGetAsyncError", 0));
  *asyncError = (zccResult_t)atomic_load(&comm->async_error);
  zcc_comm_leave(comm);
  return zccSuccess;
}

zccResult_t zccCommCount(const zccComm_t comm, int *count) {
  if (!count) return zcc_error(zccInvalidArgument, "zccCommCount: count is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommCount", 0));
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
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommUserRank", 0));
  *rank = comm->rank;
  zcc_comm_leave(comm);
  return zccSuccess;
}
