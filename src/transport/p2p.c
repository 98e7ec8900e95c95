/*
 * The p2p transport: a GPU communicator's device window, mapped into every
 * peer GPU. Peers in the same process see it through peer access (one
 * address space); peers in other processes through a CUDA IPC handle sent
 * over the bootstrap. Layout of a window (each part 4 KiB aligned):
 *
 *   flags    ZCC_DEV_FLAGS_BYTES   barrier slots and counters (zeroed)
 *   ce       ZCC_GPU_CE_BYTES      copy-engine pipeline flags (zeroed)
 *   push     ZCC_DEV_PUSH_FLAGS_BYTES  push allreduce flags and counters (zeroed)
 *   ll       ZCC_DEV_LL_BYTES      LL allreduce lines (zeroed)
 *   p2p      ZCC_DEV_P2P_BYTES     send/recv flags (zeroed) and outboxes
 *   staging  ZCC_GPU_BUFFSIZE      where unregistered inputs are copied
 *
 * A watchdog thread per communicator turns a dead peer process (or an abort,
 * or an error) into the abort word that every waiting kernel polls, so a
 * stream never hangs on a peer that is gone.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "debug.h"
#include "cudawrap.h"
#include "gpu.h"
#include "param.h"

ZCC_PARAM_INT(gpu_buffsize, "GPU_BUFFSIZE", 64 << 20,
              "bytes of each GPU rank's staging buffer (unregistered buffers are "
              "copied through it; larger calls run in pieces of it)")

ZCC_PARAM_INT(p2p_disable, "P2P_DISABLE", 0,
              "1: no peer access between GPUs; GPU communicators of more than one "
              "rank are then refused (zcc's GPU path has no other transport yet)")

#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))

static size_t off_ce(void) { return ALIGN_UP((size_t)ZCC_DEV_FLAGS_BYTES, 4096); }
static size_t off_push(void) { return off_ce() + ZCC_GPU_CE_BYTES; }
static size_t off_ll(void) { return off_push() + ALIGN_UP((size_t)ZCC_DEV_PUSH_FLAGS_BYTES, 4096); }
static size_t off_p2p(void) { return off_ll() + ALIGN_UP((size_t)ZCC_DEV_LL_BYTES, 4096); }
static size_t off_staging(void) { return off_p2p() + ALIGN_UP((size_t)ZCC_DEV_P2P_BYTES, 4096); }

static zccResult_t cuda_fail(cudaError_t e, const char *what, struct zccComm *comm) {
  return zcc_error(zccUnhandledCudaError, "comm %s rank %d: %s failed: %s (%s)", comm->name,
                   comm->rank, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_TRY(call, comm)                                                   \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call, comm);                  \
  } while (0)

zccResult_t zcc_gpu_current_device(int *dev) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return zcc_error(zccInvalidUsage, "GPU communicator: no CUDA device (%s)",
                     e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  e = cudaGetDevice(dev);
  if (e != cudaSuccess)
    return zcc_error(zccUnhandledCudaError, "GPU communicator: cudaGetDevice failed: %s",
                     cudaGetErrorString(e));
  return zccSuccess;
}

static int same_process(const zcc_peer_info_t *a, const zcc_peer_info_t *b) {
  return a->host_hash == b->host_hash && a->pidns == b->pidns && a->pid == b->pid;
}

/* What each rank sends the others about its window. */
typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t addr;
  uint64_t staging_bytes; /* every rank must agree: kernels lay slots out in peers' staging */
} win_wire_t;

/* Some peer lives in another process (needs IPC handles). */
static int comm_has_remote(const struct zccComm *comm) {
  for (int r = 0; r < comm->nranks; r++)
    if (!same_process(&comm->peers[comm->rank], &comm->peers[r])) return 1;
  return 0;
}

static int peer_alive(const zcc_peer_info_t *self, const zcc_peer_info_t *p) {
  if (p->pidns != self->pidns || p->host_hash != self->host_hash) return 1; /* can't tell */
  return !(kill(p->pid, 0) != 0 && errno == ESRCH);
}

static void *watchdog_main(void *arg) {
  struct zccComm *comm = arg;
  zcc_gpu_t *g = comm->gpu;
  const zcc_peer_info_t *self = &comm->peers[comm->rank];
  struct timespec ts = {0, 20 * 1000 * 1000};
  while (!atomic_load(&g->watchdog_stop)) {
    if (atomic_load(&comm->abort_flag) || atomic_load(&comm->async_error) != zccSuccess) {
      *g->abort_host = 1;
    } else {
      for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank || same_process(self, &comm->peers[r])) continue;
        if (!peer_alive(self, &comm->peers[r])) {
          ZCC_WARN("comm %s rank %d: rank %d (pid %d) died; its collectives fail with "
                   "zccRemoteError",
                   comm->name, comm->rank, r, comm->peers[r].pid);
          zcc_comm_set_error(comm, zccRemoteError);
          *g->abort_host = 1;
          break;
        }
      }
    }
    nanosleep(&ts, NULL);
  }
  return NULL;
}

void zcc_gpu_comm_stop_kernels(struct zccComm *comm) {
  if (comm->gpu && comm->gpu->abort_host) *comm->gpu->abort_host = 1;
}

/*
 * Peer access from the current device (dev) to peer, once per process: zcc
 * never disables it, and enabling it again is an API error that
 * compute-sanitizer reports (cudaErrorPeerAccessAlreadyEnabled, also what
 * another library that enabled it first leaves us, taken as success).
 */
static cudaError_t enable_peer_access(int dev, int peer) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static uint64_t enabled[64]; /* bit peer of enabled[dev] */
  if (dev < 0 || dev >= 64 || peer < 0 || peer >= 64) return cudaErrorInvalidDevice;
  pthread_mutex_lock(&lock);
  cudaError_t e = cudaSuccess;
  if (!(enabled[dev] >> peer & 1)) {
    e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      e = cudaSuccess;
    }
    if (e == cudaSuccess) enabled[dev] |= (uint64_t)1 << peer;
  }
  pthread_mutex_unlock(&lock);
  return e;
}

static zccResult_t map_peers(struct zccComm *comm, zcc_gpu_t *g) {
  int n = comm->nranks, me = comm->rank;
  const zcc_peer_info_t *self = &comm->peers[me];
  if (n > 1 && zcc_param_p2p_disable())
    return zcc_error(zccInvalidUsage,
                     "comm %s: ZCC_P2P_DISABLE=1 (NCCL_P2P_DISABLE=1 through the NCCL "
                     "shim): zcc's GPU communicators move data between GPUs by peer "
                     "access only; use host communicators (ZCC_DEVICE=host)",
                     comm->name);
  for (int r = 0; r < n; r++) {
    const zcc_peer_info_t *p = &comm->peers[r];
    if (p->host_hash != self->host_hash)
      return zcc_error(zccInvalidUsage,
                       "comm %s: GPU communicators need every rank on one host; rank %d is "
                       "on %s and rank %d on %s (use host communicators, ZCC_DEVICE=host)",
                       comm->name, me, self->hostname, r, p->hostname);
    if (r != me && strcmp(p->gpu_bus_id, self->gpu_bus_id) == 0)
      return zcc_error(zccInvalidUsage,
                       "comm %s: ranks %d and %d both use GPU %s; a GPU communicator "
                       "needs one GPU per rank",
                       comm->name, me, r, self->gpu_bus_id);
  }
  win_wire_t *wires = calloc((size_t)n, sizeof(*wires));
  if (!wires) return zcc_error(zccSystemError, "init: out of memory");
  zccResult_t res = zccSuccess;
  cudaError_t e = cudaIpcGetMemHandle(&wires[me].handle, g->win);
  if (e != cudaSuccess) {
    /* In-process peers don't need it; others will fail below with a clear message. */
    memset(&wires[me].handle, 0, sizeof(wires[me].handle));
    (void)cudaGetLastError();
  }
  wires[me].addr = (uint64_t)(uintptr_t)g->win;
  wires[me].staging_bytes = g->staging_bytes;
  res = zcc_bootstrap_allgather(comm->bootstrap, wires, sizeof(*wires), comm->timeout_ms);
  if (res != zccSuccess) goto out;
  for (int r = 0; r < n; r++)
    if (wires[r].staging_bytes != g->staging_bytes) {
      res = zcc_error(zccInvalidUsage,
                      "comm %s: rank %d has a %llu-byte staging buffer and rank %d one of %llu "
                      "bytes; set ZCC_GPU_BUFFSIZE alike on every rank",
                      comm->name, me, (unsigned long long)g->staging_bytes, r,
                      (unsigned long long)wires[r].staging_bytes);
      goto out;
    }
  for (int r = 0; r < n && res == zccSuccess; r++) {
    if (r == me) {
      g->peer_win[r] = g->win;
      continue;
    }
    const zcc_peer_info_t *p = &comm->peers[r];
    if (same_process(self, p)) {
      int can = 0;
      cudaDeviceCanAccessPeer(&can, g->dev, p->device);
      if (!can) {
        res = zcc_error(zccInvalidUsage,
                        "comm %s: GPU %d (rank %d) cannot access GPU %d (rank %d) directly; "
                        "zcc's GPU path needs peer access (NVLink or PCIe P2P)",
                        comm->name, g->dev, me, p->device, r);
        break;
      }
      e = enable_peer_access(g->dev, p->device);
      if (e != cudaSuccess) {
        res = cuda_fail(e, "cudaDeviceEnablePeerAccess", comm);
        break;
      }
      g->peer_win[r] = (char *)(uintptr_t)wires[r].addr;
    } else {
      void *ptr = NULL;
      e = cudaIpcOpenMemHandle(&ptr, wires[r].handle, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        res = zcc_error(zccUnhandledCudaError,
                        "comm %s rank %d: cannot map rank %d's GPU memory (pid %d, GPU %s) "
                        "with cudaIpcOpenMemHandle: %s; the GPUs need peer access",
                        comm->name, me, r, p->pid, p->gpu_bus_id, cudaGetErrorString(e));
        break;
      }
      g->peer_win[r] = ptr;
      g->ipc_opened[r] = 1;
    }
  }
out:
  free(wires);
  return res;
}

zccResult_t zcc_gpu_comm_setup(struct zccComm *comm) {
  int n = comm->nranks, me = comm->rank;
  if (n > ZCC_DEV_MAX_RANKS)
    return zcc_error(zccInvalidUsage,
                     "comm %s: a GPU communicator spans at most %d GPUs in this version "
                     "(asked for %d ranks)", comm->name, ZCC_DEV_MAX_RANKS, n);
  zcc_gpu_t *g = calloc(1, sizeof(*g));
  if (!g) return zcc_error(zccSystemError, "init: out of memory");
  comm->gpu = g;
  g->dev = comm->device;
  g->nranks = n;
  g->rank = me;
  CUDA_TRY(cudaSetDevice(g->dev), comm);
  /* Before any kernel can spin on this GPU (device.h says why). */
  int pe = zcc_dev_preload();
  if (pe != 0) {
    /* Not fatal: kernels then load at first launch, as CUDA does by default. */
    ZCC_WARN("comm %s rank %d: preloading zcc's kernels failed (%s); they load at first use",
             comm->name, me, zcc_dev_error_string(pe));
    (void)cudaGetLastError();
  }
  int64_t sb = zcc_param_gpu_buffsize();
  if (sb < (1 << 20) || sb > ((int64_t)1 << 34))
    return zcc_error(zccInvalidArgument, "ZCC_GPU_BUFFSIZE=%lld: expected 1 MiB to 16 GiB",
                     (long long)sb);
  g->staging_bytes = ALIGN_UP((size_t)sb, 4096);
  g->win_bytes = off_staging() + g->staging_bytes;
  void *win = NULL;
  CUDA_TRY(cudaMalloc(&win, g->win_bytes), comm);
  g->win = win;
  CUDA_TRY(cudaMemset(g->win, 0, off_p2p() + ZCC_DEV_P2P_FLAG_BYTES), comm);
  CUDA_TRY(cudaDeviceSynchronize(), comm);
  void *ab = NULL;
  CUDA_TRY(cudaHostAlloc(&ab, 64, cudaHostAllocMapped | cudaHostAllocPortable), comm);
  g->abort_host = ab;
  *g->abort_host = 0;
  void *abd = NULL;
  CUDA_TRY(cudaHostGetDevicePointer(&abd, ab, 0), comm);
  g->abort_dev = abd;

  ZCC_CHECK(map_peers(comm, g));
  for (int r = 0; r < n; r++) {
    g->flags[r] = (uint32_t *)g->peer_win[r];
    g->ll[r] = g->peer_win[r] + off_ll();
    g->p2p[r] = g->peer_win[r] + off_p2p();
    g->staging[r] = g->peer_win[r] + off_staging();
    g->ce[r] = (uint32_t *)(g->peer_win[r] + off_ce());
    g->push[r] = (uint32_t *)(g->peer_win[r] + off_push());
  }
  cudaStream_t side;
  CUDA_TRY(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), comm);
  g->side = side;
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), comm);
  g->ev_fork = ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), comm);
  g->ev_join = ev;
  for (int i = 0; i < ZCC_GPU_CE_SLOTS; i++) {
    CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), comm);
    g->ev_copy[i] = ev;
  }
  /* Nobody writes into a peer's window before every peer has mapped all. */
  if (n > 1) ZCC_CHECK(zcc_bootstrap_barrier(comm->bootstrap, comm->timeout_ms));

  if (pthread_create(&g->watchdog_thread, NULL, watchdog_main, comm) != 0)
    return zcc_error(zccSystemError, "init: cannot start the GPU watchdog thread");
  g->watchdog_started = 1;
  ZCC_INFO(INIT, "comm %s rank %d: GPU %d (%s), window %zu MiB, staging %zu MiB", comm->name,
           me, g->dev, comm->peers[me].gpu_bus_id, g->win_bytes >> 20, g->staging_bytes >> 20);
  return zccSuccess;
}

static void reg_unmap(zcc_gpu_reg_t *r, int n) {
  for (int k = 0; k < n; k++)
    if (r->opened[k]) {
      cudaIpcCloseMemHandle(r->peer[k]);
      r->opened[k] = 0;
    }
}

void zcc_gpu_comm_free(struct zccComm *comm) {
  zcc_gpu_t *g = comm->gpu;
  if (!g) return;
  if (g->watchdog_started) {
    atomic_store(&g->watchdog_stop, 1);
    pthread_join(g->watchdog_thread, NULL);
  }
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(g->dev);
  if (g->abort_host && (atomic_load(&comm->abort_flag) || atomic_load(&comm->async_error)))
    *g->abort_host = 1;
  /* Every kernel that maps a peer's memory has finished before unmapping. */
  cudaDeviceSynchronize();
  while (g->regs) {
    zcc_gpu_reg_t *r = g->regs;
    g->regs = r->next;
    reg_unmap(r, g->nranks);
    free(r);
  }
  for (int r = 0; r < g->nranks; r++)
    if (g->ipc_opened[r]) cudaIpcCloseMemHandle(g->peer_win[r]);
  zcc_gpu_graphs_free(g);
  if (g->cap_stream) cudaStreamDestroy((cudaStream_t)g->cap_stream);
  if (g->side) cudaStreamDestroy((cudaStream_t)g->side);
  if (g->ev_fork) cudaEventDestroy((cudaEvent_t)g->ev_fork);
  if (g->ev_join) cudaEventDestroy((cudaEvent_t)g->ev_join);
  for (int i = 0; i < ZCC_GPU_CE_SLOTS; i++)
    if (g->ev_copy[i]) cudaEventDestroy((cudaEvent_t)g->ev_copy[i]);
  if (g->win) cudaFree(g->win);
  if (g->abort_host) cudaFreeHost((void *)g->abort_host);
  (void)cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
  free(g);
  comm->gpu = NULL;
}

/* ---- registration ---- */

typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t base;
  uint64_t offset; /* of the registered buffer in its allocation */
  uint64_t size;
  int32_t ok;
  int32_t pad;
} reg_wire_t;

zccResult_t zcc_gpu_register(struct zccComm *comm, void *buf, size_t size, void **handle) {
  zcc_gpu_t *g = comm->gpu;
  int n = comm->nranks, me = comm->rank;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(g->dev);
  reg_wire_t *w = calloc((size_t)n, sizeof(*w));
  zcc_gpu_reg_t *reg = calloc(1, sizeof(*reg));
  zccResult_t res = zccSuccess;
  if (!w || !reg) {
    res = zcc_error(zccSystemError, "zccCommRegister: out of memory");
    goto out;
  }
  /* The allocation holding buf: IPC handles name allocations, not pointers. */
  struct cudaPointerAttributes at;
  char err[200] = "";
  cudaError_t e = cudaPointerGetAttributes(&at, buf);
  if (e != cudaSuccess || at.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    snprintf(err, sizeof(err), "%p is not device memory from cudaMalloc/zccMemAlloc", buf);
  } else if (at.device != g->dev) {
    snprintf(err, sizeof(err), "%p is on GPU %d, the communicator on GPU %d", buf, at.device,
             g->dev);
  }
  char *base = buf;
  size_t range = size;
  if (!err[0] && zcc_cuda_mem_range(buf, (void **)&base, &range) != 0)
    snprintf(err, sizeof(err), "cannot find the allocation holding %p", buf);
  if (!err[0] && (char *)buf + size > base + range)
    snprintf(err, sizeof(err), "%p + %zu runs past the end of its allocation (%zu bytes)", buf,
             size, range);
  /* IPC handles name allocations: a peer maps the allocation from its base. */
  if (!err[0] && comm_has_remote(comm)) {
    e = cudaIpcGetMemHandle(&w[me].handle, base);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(err, sizeof(err), "cudaIpcGetMemHandle(%p) failed: %s", (void *)base,
               cudaGetErrorString(e));
    }
  }
  w[me].ok = err[0] == 0;
  w[me].base = (uint64_t)(uintptr_t)base;
  w[me].offset = (uint64_t)((char *)buf - base);
  w[me].size = size;
  /* Every rank learns whether every rank could register: all succeed or none. */
  res = zcc_bootstrap_allgather(comm->bootstrap, w, sizeof(*w), comm->timeout_ms);
  if (res != zccSuccess) goto out;
  for (int r = 0; r < n; r++)
    if (!w[r].ok) {
      res = r == me ? zcc_error(zccInvalidArgument, "zccCommRegister: %s", err)
                    : zcc_error(zccInvalidUsage,
                                "zccCommRegister: rank %d could not register its buffer", r);
      goto out;
    }
  reg->base = buf;
  reg->size = size;
  for (int r = 0; r < n && res == zccSuccess; r++) {
    if (r == me || same_process(&comm->peers[me], &comm->peers[r])) {
      reg->peer[r] = (char *)(uintptr_t)(w[r].base + w[r].offset);
      continue;
    }
    void *p = NULL;
    e = cudaIpcOpenMemHandle(&p, w[r].handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      res = zcc_error(zccUnhandledCudaError,
                      "zccCommRegister: cannot map rank %d's buffer: %s", r,
                      cudaGetErrorString(e));
      break;
    }
    reg->opened[r] = 1;
    /* The handle maps the allocation holding the peer's buffer, from its base. */
    reg->peer[r] = (char *)p + w[r].offset;
  }
  if (res != zccSuccess) {
    reg_unmap(reg, n);
    goto out;
  }
  zcc_gpu_graphs_free(g);
  reg->index = g->nregs++;
  reg->next = g->regs;
  g->regs = reg;
  ZCC_INFO(COLL, "comm %s rank %d: registered %p (%zu bytes) as window %d", comm->name, me,
           buf, size, reg->index);
  *handle = reg;
  reg = NULL;
out:
  free(w);
  free(reg);
  if (prev >= 0) cudaSetDevice(prev);
  return res;
}

zccResult_t zcc_gpu_deregister(struct zccComm *comm, void *handle) {
  zcc_gpu_t *g = comm->gpu;
  zcc_gpu_reg_t **pp = &g->regs;
  while (*pp && *pp != handle) pp = &(*pp)->next;
  if (!*pp)
    return zcc_error(zccInvalidArgument,
                     "zccCommDeregister: handle %p was not registered with this communicator",
                     handle);
  zcc_gpu_reg_t *r = *pp;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(g->dev);
  /* Work that reads peers' registered buffers finishes before they go. */
  cudaDeviceSynchronize();
  *pp = r->next;
  zcc_gpu_graphs_free(g);
  reg_unmap(r, g->nranks);
  (void)cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
  free(r);
  return zccSuccess;
}
