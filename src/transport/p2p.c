/*
 * The p2p transport: GPU communicators whose GPUs reach each other's memory
 * (NVLink or PCIe peer access, or one GPU). The window the GPU executor
 * lays out (exec/gpu_comm.c) is device memory here (win_alloc): peers in
 * the same process address it directly (one address space, peer access
 * enabled once per pair of devices), peers in other processes through a
 * CUDA IPC handle carried in the connection's blob. Registered user
 * buffers travel the same way (reg_export / reg_map). Kernels may load
 * from and store into every peer's window.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "debug.h"
#include "param.h"
#include "transport.h"

ZCC_PARAM_INT(p2p_disable, "P2P_DISABLE", 0,
              "1: never connect GPUs through peer access or CUDA IPC (as NCCL_P2P_DISABLE)")

static zccResult_t cuda_fail(cudaError_t e, const char *what, struct zccComm *comm) {
  return zcc_error(zccUnhandledCudaError, "comm %s rank %d: %s failed: %s (%s)", comm->name,
                   comm->rank, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int peer_alive(const zcc_peer_info_t *self, const zcc_peer_info_t *p) {
  if (p->pidns != self->pidns || p->host_hash != self->host_hash) return 1; /* can't tell */
  return !(kill(p->pid, 0) != 0 && errno == ESRCH);
}

/* Some peer lives in another process (needs IPC handles). */
static int comm_has_remote(const struct zccComm *comm) {
  for (int r = 0; r < comm->nranks; r++)
    if (!zcc_peer_same_process(&comm->peers[comm->rank], &comm->peers[r])) return 1;
  return 0;
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


/* What a connection tells the peer about this rank's window. */
typedef struct {
  cudaIpcMemHandle_t handle; /* zero where IPC handles cannot be made (peers in-process only) */
  uint64_t addr;
} win_wire_t;

typedef struct {
  int32_t ok; /* 0: the sender has no window (its log says why) */
  int32_t pad;
  win_wire_t w;
} p2p_blob_t;

typedef struct {
  char *win; /* the peer's window as this GPU addresses it */
  int ipc;   /* win came from cudaIpcOpenMemHandle */
} p2p_conn_t;

/* The transport's per-communicator state: this rank's window. */
typedef struct {
  char *win;
  win_wire_t w;
} p2p_state_t;

static p2p_state_t *p2p_state(struct zccComm *comm) {
  return *zcc_transport_slot(comm, &zcc_transport_p2p);
}

/*
 * The peer's GPU as this process numbers it, or -1 when this process does
 * not see it (another container, CUDA_VISIBLE_DEVICES).
 */
static int local_device_of(const zcc_peer_info_t *peer) {
  int dev = -1;
  if (cudaDeviceGetByPCIBusId(&dev, peer->gpu_bus_id) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return dev;
}

/* Peer access from self's GPU to the peer's, or the same GPU; 0 if either is not a GPU. */
static int p2p_reachable(const zcc_peer_info_t *self, const zcc_peer_info_t *peer) {
  if (self->device < 0 || peer->device < 0 || peer->host_hash != self->host_hash) return 0;
  if (strcmp(self->gpu_bus_id, peer->gpu_bus_id) == 0) return 1;
  int dev = local_device_of(peer);
  if (dev < 0) return 0;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, self->device, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return can;
}

static int p2p_can_connect(const struct zccComm *comm, const zcc_peer_info_t *self,
                           const zcc_peer_info_t *peer) {
  return !zcc_param_p2p_disable() && p2p_reachable(self, peer);
}

static void p2p_refusal(const struct zccComm *comm, const zcc_peer_info_t *self,
                        const zcc_peer_info_t *peer, char *why, size_t len) {
  if (zcc_param_p2p_disable())
    snprintf(why, len, "disabled (ZCC_P2P_DISABLE=1, or NCCL_P2P_DISABLE=1 through the NCCL "
             "shim)");
  else if (peer->host_hash != self->host_hash)
    snprintf(why, len, "rank %d is on %s and rank %d on %s; GPU communicators need every rank "
             "on one host in this version (use host communicators, ZCC_DEVICE=host)",
             self->rank, self->hostname, peer->rank, peer->hostname);
  else if (self->device < 0 || peer->device < 0)
    snprintf(why, len, "not a GPU rank");
  else if (local_device_of(peer) < 0)
    snprintf(why, len, "GPU %s of rank %d is not visible to rank %d (another container, or "
             "CUDA_VISIBLE_DEVICES)", peer->gpu_bus_id, peer->rank, self->rank);
  else
    snprintf(why, len, "GPU %s (rank %d) has no peer access to GPU %s (rank %d)",
             self->gpu_bus_id, self->rank, peer->gpu_bus_id, peer->rank);
}

/* The window in device memory on this rank's GPU, and the handle peers map it by. */
static zccResult_t p2p_win_alloc(struct zccComm *comm, size_t bytes, char **dev) {
  void **slot = zcc_transport_slot(comm, &zcc_transport_p2p);
  if (*slot) return zcc_error(zccInternalError, "p2p: the GPU window exists already");
  p2p_state_t *st = calloc(1, sizeof(*st));
  if (!st) return zcc_error(zccSystemError, "init: out of memory");
  void *win = NULL;
  cudaError_t e = cudaMalloc(&win, bytes);
  if (e != cudaSuccess) {
    free(st);
    return cuda_fail(e, "cudaMalloc of the GPU window", comm);
  }
  st->win = win;
  if (comm_has_remote(comm)) {
    e = cudaIpcGetMemHandle(&st->w.handle, win);
    if (e != cudaSuccess) {
      /* peers in other processes then fail in attach, naming the cause */
      memset(&st->w.handle, 0, sizeof(st->w.handle));
      (void)cudaGetLastError();
    }
  }
  st->w.addr = (uint64_t)(uintptr_t)win;
  *slot = st;
  *dev = win;
  return zccSuccess;
}

/* After every kernel that maps it is done (zcc_gpu_comm_free synchronises first). */
static void p2p_win_free(struct zccComm *comm) {
  void **slot = zcc_transport_slot(comm, &zcc_transport_p2p);
  p2p_state_t *st = *slot;
  if (!st) return;
  if (st->win) cudaFree(st->win);
  (void)cudaGetLastError();
  free(st);
  *slot = NULL;
}

static zccResult_t p2p_blob(zcc_conn_t *conn, void *out) {
  const p2p_state_t *st = p2p_state(conn->comm);
  p2p_blob_t *b = out;
  memset(b, 0, sizeof(*b));
  if (!st) return zcc_error(zccInternalError, "p2p: no GPU window to describe");
  b->w = st->w;
  b->ok = 1;
  return zccSuccess;
}

static zccResult_t p2p_attach(zcc_conn_t *conn, const void *peer_blob) {
  struct zccComm *comm = conn->comm;
  int dev = comm->device;
  int me = comm->rank, r = conn->peer;
  p2p_blob_t b;
  memcpy(&b, peer_blob, sizeof(b));
  if (!b.ok)
    return zcc_error(zccRemoteError, "comm %s rank %d: rank %d could not describe its GPU "
                     "window (its log says why)", comm->name, me, r);
  p2p_conn_t *pc = calloc(1, sizeof(*pc));
  if (!pc) return zcc_error(zccSystemError, "init: out of memory");
  const zcc_peer_info_t *self = &comm->peers[me], *p = &comm->peers[r];
  zccResult_t res = zccSuccess;
  cudaError_t e;
  if (zcc_peer_same_process(self, p) && p->device == dev) {
    pc->win = (char *)(uintptr_t)b.w.addr; /* the same GPU: one address space */
  } else if (zcc_peer_same_process(self, p)) {
    int can = 0;
    cudaDeviceCanAccessPeer(&can, dev, p->device);
    if (!can) {
      res = zcc_error(zccInvalidUsage,
                      "comm %s: GPU %d (rank %d) cannot access GPU %d (rank %d) directly; "
                      "zcc's GPU path needs peer access (NVLink or PCIe P2P)",
                      comm->name, dev, me, p->device, r);
    } else if ((e = enable_peer_access(dev, p->device)) != cudaSuccess) {
      res = cuda_fail(e, "cudaDeviceEnablePeerAccess", comm);
    } else {
      pc->win = (char *)(uintptr_t)b.w.addr;
    }
  } else {
    void *ptr = NULL;
    e = cudaIpcOpenMemHandle(&ptr, b.w.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      res = zcc_error(zccUnhandledCudaError,
                      "comm %s rank %d: cannot map rank %d's GPU memory (pid %d, GPU %s) "
                      "with cudaIpcOpenMemHandle: %s; the GPUs need peer access",
                      comm->name, me, r, p->pid, p->gpu_bus_id, cudaGetErrorString(e));
    } else {
      pc->win = ptr;
      pc->ipc = 1;
    }
  }
  if (res != zccSuccess) {
    free(pc);
    return res;
  }
  conn->priv = pc;
  return zccSuccess;
}

static zccResult_t p2p_view(zcc_conn_t *conn, zcc_dev_peer_t *out) {
  const p2p_conn_t *pc = conn->priv;
  if (!pc) return zcc_error(zccInternalError, "p2p: connection to rank %d is not attached",
                            conn->peer);
  out->win = pc->win;
  out->loads = 1; /* peer access and IPC mappings take loads and stores */
  return zccSuccess;
}

static zccResult_t p2p_check(zcc_conn_t *conn) {
  const struct zccComm *comm = conn->comm;
  if (peer_alive(&comm->peers[comm->rank], &comm->peers[conn->peer])) return zccSuccess;
  return zcc_error(zccRemoteError, "comm %s rank %d: rank %d (pid %d) is gone", comm->name,
                   comm->rank, conn->peer, comm->peers[conn->peer].pid);
}

/* After the device's work is done (zcc_gpu_comm_free ran first). */
static void p2p_free(zcc_conn_t *conn) {
  p2p_conn_t *pc = conn->priv;
  if (!pc) return;
  if (pc->ipc) cudaIpcCloseMemHandle(pc->win);
  (void)cudaGetLastError();
  free(pc);
  conn->priv = NULL;
}

/* ---- registered buffers: their allocation, mapped like the window ---- */

static zccResult_t p2p_reg_export(struct zccComm *comm, void *base, void *blob) {
  memset(blob, 0, sizeof(cudaIpcMemHandle_t));
  if (!comm_has_remote(comm)) return zccSuccess; /* in-process peers take the pointer */
  cudaError_t e = cudaIpcGetMemHandle((cudaIpcMemHandle_t *)blob, base);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return zcc_error(zccInvalidArgument, "cudaIpcGetMemHandle(%p) failed: %s", base,
                     cudaGetErrorString(e));
  }
  return zccSuccess;
}

static zccResult_t p2p_reg_map(zcc_conn_t *conn, const void *peer_blob, uint64_t peer_base,
                               char **out, char **mapped) {
  struct zccComm *comm = conn->comm;
  *mapped = NULL;
  if (zcc_peer_same_process(&comm->peers[comm->rank], &comm->peers[conn->peer])) {
    *out = (char *)(uintptr_t)peer_base; /* one address space, peer access already on */
    return zccSuccess;
  }
  cudaIpcMemHandle_t h;
  memcpy(&h, peer_blob, sizeof(h));
  void *p = NULL;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return zcc_error(zccUnhandledCudaError, "zccCommRegister: cannot map rank %d's buffer: %s",
                     conn->peer, cudaGetErrorString(e));
  }
  *out = p;
  *mapped = p;
  return zccSuccess;
}

static void p2p_reg_unmap(zcc_conn_t *conn, char *mapped) {
  (void)conn;
  cudaIpcCloseMemHandle(mapped);
  (void)cudaGetLastError();
}

static const zcc_transport_gpu_t p2p_face = {
    .blob_bytes = sizeof(p2p_blob_t),
    .win_alloc = p2p_win_alloc,
    .win_free = p2p_win_free,
    .blob = p2p_blob,
    .attach = p2p_attach,
    .view = p2p_view,
    .check = p2p_check,
    .free = p2p_free,
    .reg_blob_bytes = sizeof(cudaIpcMemHandle_t),
    .reg_export = p2p_reg_export,
    .reg_map = p2p_reg_map,
    .reg_unmap = p2p_reg_unmap,
};

const zcc_transport_ops_t zcc_transport_p2p = {
    .name = "p2p",
    .can_connect = p2p_can_connect,
    .refusal = p2p_refusal,
    .gpu = &p2p_face,
};
