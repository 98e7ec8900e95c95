/*
 * shm's GPU face: a GPU communicator's window in a POSIX shared-memory
 * segment, pinned and mapped into the GPU of every rank that maps it
 * (cuMemHostRegister, portable and device-mapped), so kernels load and
 * store peers' windows directly: no copy engine, no staging copy. It
 * connects the processes of one host when p2p cannot (no peer access,
 * GPUs not visible to each other, ZCC_P2P_DISABLE=1), several processes
 * on one GPU among them. Each rank's segment is unlinked once every rank
 * mapped it; pinning and mappings end with the communicator.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "transport.h"

typedef struct {
  int32_t ok; /* 0: the sender has no window (its log says why) */
  int32_t pid;
  uint64_t bytes;
  char name[64];
} shm_gpu_blob_t;

typedef struct {
  void *base; /* the mapping */
  size_t bytes;
  char *dev;  /* its device address */
} shm_gpu_map_t;

/* The per-communicator state: this rank's own window. */
typedef struct {
  shm_gpu_map_t own;
  char name[64];
  int linked;
} shm_gpu_state_t;

static shm_gpu_state_t *state_of(struct zccComm *comm) {
  return *zcc_transport_slot(comm, &zcc_transport_shm);
}

static void unmap(shm_gpu_map_t *m) {
  if (m->dev) zcc_cuda_host_unregister(m->base);
  if (m->base) munmap(m->base, m->bytes);
  memset(m, 0, sizeof(*m));
}

/* Map the segment `name` of `bytes`, pin it and map it into this GPU. */
static zccResult_t map_segment(const char *name, size_t bytes, int create, shm_gpu_map_t *m,
                               const char *who) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
  /* A peer's segment gone before we mapped it: its owner freed its
     communicator (aborted, gave up or exited) while connecting. */
  if (fd < 0 && !create && errno == ENOENT)
    return zcc_error(zccRemoteError, "%s: shared memory %s is gone: its owner left while the "
                     "communicator was being connected (aborted, gave up or exited)", who, name);
  if (fd < 0)
    return zcc_error(zccSystemError, "%s: shm_open %s failed: %s", who, name, strerror(errno));
  if (create && ftruncate(fd, (off_t)bytes) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name);
    return zcc_error(zccSystemError, "%s: %zu bytes of shared memory (%s) failed: %s; /dev/shm "
                     "may be too small", who, bytes, name, strerror(e));
  }
  struct stat st;
  if (!create && (fstat(fd, &st) != 0 || (size_t)st.st_size != bytes)) {
    close(fd);
    return zcc_error(zccSystemError, "%s: shared memory %s is not the %zu bytes its owner "
                     "announced", who, name, bytes);
  }
  void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    if (create) shm_unlink(name);
    return zcc_error(zccSystemError, "%s: mmap %s (%zu bytes) failed: %s", who, name, bytes,
                     strerror(errno));
  }
  m->base = base;
  m->bytes = bytes;
  void *dev = NULL;
  zccResult_t res = zcc_cuda_host_register(base, bytes, &dev);
  if (res != zccSuccess) {
    char msg[400];
    snprintf(msg, sizeof(msg), "%s", zcc_last_error());
    struct rlimit rl = {0, 0};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    munmap(base, bytes);
    memset(m, 0, sizeof(*m));
    if (create) shm_unlink(name);
    char lim[32];
    if (rl.rlim_cur == RLIM_INFINITY)
      snprintf(lim, sizeof(lim), "unlimited");
    else
      snprintf(lim, sizeof(lim), "%llu KiB", (unsigned long long)(rl.rlim_cur >> 10));
    return zcc_error(zccSystemError, "%s: cannot pin %zu bytes of shared memory for the GPU "
                     "(%s; locked-memory limit %s, ulimit -l)", who, bytes, msg, lim);
  }
  m->dev = dev;
  return zccSuccess;
}

static zccResult_t win_alloc(struct zccComm *comm, size_t bytes, char **dev) {
  void **slot = zcc_transport_slot(comm, &zcc_transport_shm);
  if (*slot) return zcc_error(zccInternalError, "shm: the GPU window exists already");
  shm_gpu_state_t *st = calloc(1, sizeof(*st));
  if (!st) return zcc_error(zccSystemError, "init: out of memory");
  snprintf(st->name, sizeof(st->name), "/zcc-gw-%016llx-%d-%d", (unsigned long long)comm->hash,
           comm->rank, (int)getpid());
  char who[96];
  snprintf(who, sizeof(who), "comm %s rank %d", comm->name, comm->rank);
  zccResult_t res = map_segment(st->name, bytes, 1, &st->own, who);
  if (res != zccSuccess) {
    free(st);
    return res;
  }
  st->linked = 1;
  *slot = st;
  *dev = st->own.dev;
  ZCC_INFO(SHM, "%s: GPU window in pinned shared memory %s, %zu MiB", who, st->name,
           bytes >> 20);
  return zccSuccess;
}

static void win_free(struct zccComm *comm) {
  void **slot = zcc_transport_slot(comm, &zcc_transport_shm);
  shm_gpu_state_t *st = *slot;
  if (!st) return;
  unmap(&st->own);
  if (st->linked) shm_unlink(st->name);
  free(st);
  *slot = NULL;
}

static zccResult_t blob(zcc_conn_t *conn, void *out) {
  shm_gpu_state_t *st = state_of(conn->comm);
  shm_gpu_blob_t *b = out;
  memset(b, 0, sizeof(*b));
  if (!st) return zcc_error(zccInternalError, "shm: no GPU window to describe");
  b->ok = 1;
  b->pid = (int32_t)getpid();
  b->bytes = st->own.bytes;
  snprintf(b->name, sizeof(b->name), "%s", st->name);
  return zccSuccess;
}

static zccResult_t attach(zcc_conn_t *conn, const void *peer_blob) {
  struct zccComm *comm = conn->comm;
  shm_gpu_blob_t b;
  memcpy(&b, peer_blob, sizeof(b));
  b.name[sizeof(b.name) - 1] = '\0';
  if (!b.ok)
    return zcc_error(zccRemoteError, "comm %s rank %d: rank %d has no GPU window (its log says "
                     "why)", comm->name, comm->rank, conn->peer);
  shm_gpu_state_t *st = state_of(comm);
  if (!st || b.bytes != st->own.bytes)
    return zcc_error(zccInvalidUsage, "comm %s: rank %d's GPU window has %llu bytes, rank %d's "
                     "%zu", comm->name, conn->peer, (unsigned long long)b.bytes, comm->rank,
                     st ? st->own.bytes : (size_t)0);
  shm_gpu_map_t *m = calloc(1, sizeof(*m));
  if (!m) return zcc_error(zccSystemError, "init: out of memory");
  char who[96];
  snprintf(who, sizeof(who), "comm %s rank %d (rank %d's window)", comm->name, comm->rank,
           conn->peer);
  zccResult_t res = map_segment(b.name, (size_t)b.bytes, 0, m, who);
  if (res != zccSuccess) {
    free(m);
    return res;
  }
  conn->priv = m;
  return zccSuccess;
}

/* Every rank mapped every window: the names can go (nothing left in /dev/shm). */
static void ready(struct zccComm *comm) {
  shm_gpu_state_t *st = state_of(comm);
  if (st && st->linked) {
    shm_unlink(st->name);
    st->linked = 0;
  }
}

static zccResult_t view(zcc_conn_t *conn, zcc_dev_peer_t *out) {
  const shm_gpu_map_t *m = conn->priv;
  if (!m) return zcc_error(zccInternalError, "shm: connection to rank %d is not attached",
                           conn->peer);
  out->win = m->dev;
  out->loads = 1; /* mapped host memory takes SM loads and stores */
  return zccSuccess;
}

static zccResult_t check(zcc_conn_t *conn) {
  const struct zccComm *comm = conn->comm;
  const zcc_peer_info_t *self = &comm->peers[comm->rank], *p = &comm->peers[conn->peer];
  if (p->pidns != self->pidns || p->host_hash != self->host_hash) return zccSuccess;
  if (kill(p->pid, 0) != 0 && errno == ESRCH)
    return zcc_error(zccRemoteError, "comm %s rank %d: rank %d (pid %d) is gone", comm->name,
                     comm->rank, conn->peer, p->pid);
  return zccSuccess;
}

static void conn_free(zcc_conn_t *conn) {
  shm_gpu_map_t *m = conn->priv;
  if (!m) return;
  unmap(m);
  free(m);
  conn->priv = NULL;
}

const zcc_transport_gpu_t zcc_shm_gpu_face = {
    .blob_bytes = sizeof(shm_gpu_blob_t),
    .host_memory = 1,
    .win_alloc = win_alloc,
    .win_free = win_free,
    .blob = blob,
    .attach = attach,
    .ready = ready,
    .view = view,
    .check = check,
    .free = conn_free,
};
