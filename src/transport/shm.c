/*
 * shm: processes of one machine. Each pair shares one POSIX shared-memory
 * segment holding a FIFO of slots per direction. The sender copies user
 * data into a slot (the one copy), the receiver copies or reduces straight
 * out of it into the destination, slot by slot, so reduction overlaps
 * movement. The segment is unlinked once both sides mapped it.
 */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "reduce.h"
#include "transport.h"

ZCC_PARAM_INT(shm_disable, "SHM_DISABLE", 0,
              "1: never use shared memory between processes of one host (use sockets)")
ZCC_PARAM_INT(shm_slot_size, "SHM_SLOT_SIZE", 131072,
              "bytes per shared-memory FIFO slot (multiple of 64)")
ZCC_PARAM_INT(shm_nslots, "SHM_NSLOTS", 16, "slots per shared-memory FIFO (2 to 256)")

#define SHM_MAGIC 0x7a636373686d3031ULL
#define SHM_MAX_SLOTS 256

typedef struct shm_fifo {
  alignas(64) atomic_uint_least64_t tail; /* written by the sender */
  alignas(64) atomic_uint_least64_t head; /* written by the receiver */
  alignas(64) uint32_t sizes[SHM_MAX_SLOTS];
} shm_fifo_t;

typedef struct shm_header {
  uint64_t magic;
  uint32_t nslots;
  uint32_t slot_size;
  alignas(64) atomic_int failed[2]; /* [0]: lower rank gave up, [1]: higher */
  shm_fifo_t fifo[2];               /* [0]: lower -> higher, [1]: higher -> lower */
} shm_header_t;

typedef struct shm_conn {
  char name[96];
  int lower; /* this side is the lower rank (creator) */
  int linked;
  void *base;
  size_t map_bytes;
  shm_fifo_t *send, *recv;
  char *send_data, *recv_data;
  uint32_t nslots;
  size_t slot_size;
  uint64_t send_tail; /* local copies */
  uint64_t recv_head;
  size_t recv_off; /* bytes consumed of the current receive slot */
  atomic_int *my_failed, *peer_failed;
  pid_t peer_pid;
  int check_pid;
} shm_conn_t;

static int shm_can_connect(const struct zccComm *comm, const zcc_peer_info_t *self,
                           const zcc_peer_info_t *peer) {
  return !zcc_param_shm_disable() && self->host_hash == peer->host_hash;
}

static size_t seg_bytes(uint32_t nslots, size_t slot_size) {
  return sizeof(shm_header_t) + 2 * (size_t)nslots * slot_size;
}

static void bind_views(shm_conn_t *s) {
  shm_header_t *h = s->base;
  char *data = (char *)s->base + sizeof(shm_header_t);
  size_t dir_bytes = (size_t)s->nslots * s->slot_size;
  int out = s->lower ? 0 : 1;
  s->send = &h->fifo[out];
  s->recv = &h->fifo[1 - out];
  s->send_data = data + (size_t)out * dir_bytes;
  s->recv_data = data + (size_t)(1 - out) * dir_bytes;
  s->my_failed = &h->failed[s->lower ? 0 : 1];
  s->peer_failed = &h->failed[s->lower ? 1 : 0];
}

static zccResult_t shm_create(zcc_conn_t *conn, shm_conn_t *s) {
  int64_t nslots = zcc_param_shm_nslots();
  int64_t slot = zcc_param_shm_slot_size();
  if (nslots < 2 || nslots > SHM_MAX_SLOTS)
    return zcc_error(zccInvalidArgument, "ZCC_SHM_NSLOTS=%lld: expected 2 to %d",
                     (long long)nslots, SHM_MAX_SLOTS);
  if (slot < 4096 || slot % 64 || slot > (1 << 30))
    return zcc_error(zccInvalidArgument,
                     "ZCC_SHM_SLOT_SIZE=%lld: expected a multiple of 64 from 4096 to 1G",
                     (long long)slot);
  s->nslots = (uint32_t)nslots;
  s->slot_size = (size_t)slot;
  s->map_bytes = seg_bytes(s->nslots, s->slot_size);
  int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return zcc_error(zccSystemError, "shm_open %s failed: %s", s->name, strerror(errno));
  s->linked = 1;
  if (ftruncate(fd, (off_t)s->map_bytes) != 0) {
    close(fd);
    return zcc_error(zccSystemError, "ftruncate %s to %zu bytes failed: %s", s->name,
                     s->map_bytes, strerror(errno));
  }
  s->base = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s->base == MAP_FAILED) {
    s->base = NULL;
    return zcc_error(zccSystemError, "mmap %s (%zu bytes) failed: %s", s->name,
                     s->map_bytes, strerror(errno));
  }
  shm_header_t *h = s->base;
  h->nslots = s->nslots;
  h->slot_size = (uint32_t)s->slot_size;
  h->magic = SHM_MAGIC;
  bind_views(s);
  ZCC_INFO(SHM, "created %s: %u slots of %zu bytes each way", s->name, s->nslots,
           s->slot_size);
  return zccSuccess;
}

static zccResult_t shm_attach(zcc_conn_t *conn, shm_conn_t *s) {
  int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return zcc_error(zccSystemError, "shm_open %s (made by rank %d) failed: %s", s->name,
                     conn->peer, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(shm_header_t)) {
    close(fd);
    return zcc_error(zccSystemError, "shared memory %s is too small", s->name);
  }
  s->map_bytes = (size_t)st.st_size;
  s->base = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s->base == MAP_FAILED) {
    s->base = NULL;
    return zcc_error(zccSystemError, "mmap %s failed: %s", s->name, strerror(errno));
  }
  shm_header_t *h = s->base;
  if (h->magic != SHM_MAGIC || h->nslots < 2 || h->nslots > SHM_MAX_SLOTS ||
      seg_bytes(h->nslots, h->slot_size) != s->map_bytes)
    return zcc_error(zccSystemError, "shared memory %s has an unexpected layout", s->name);
  s->nslots = h->nslots;
  s->slot_size = h->slot_size;
  bind_views(s);
  return zccSuccess;
}

static zccResult_t shm_connect(zcc_conn_t *conn, zcc_connect_phase_t phase) {
  struct zccComm *comm = conn->comm;
  shm_conn_t *s = conn->priv;
  switch (phase) {
  case ZCC_CONNECT_CREATE:
    s = calloc(1, sizeof(*s));
    if (!s) return zcc_error(zccSystemError, "shm: out of memory");
    conn->priv = s;
    s->lower = comm->rank < conn->peer;
    snprintf(s->name, sizeof(s->name), "/zcc-%016llx-%d-%d-%d",
             (unsigned long long)comm->hash, (int)comm->peers[s->lower ? comm->rank : conn->peer].pid,
             s->lower ? comm->rank : conn->peer, s->lower ? conn->peer : comm->rank);
    s->peer_pid = comm->peers[conn->peer].pid;
    s->check_pid = comm->peers[conn->peer].pidns == comm->peers[comm->rank].pidns;
    return s->lower ? shm_create(conn, s) : zccSuccess;
  case ZCC_CONNECT_ATTACH:
    return s->lower ? zccSuccess : shm_attach(conn, s);
  case ZCC_CONNECT_FINISH:
    if (s->lower && s->linked) {
      shm_unlink(s->name);
      s->linked = 0;
    }
    return zccSuccess;
  default:
    return zcc_error(zccInternalError, "shm: unknown connect phase %d", (int)phase);
  }
}

static zccResult_t peer_gone(zcc_conn_t *conn, shm_conn_t *s) {
  if (atomic_load_explicit(s->peer_failed, memory_order_relaxed))
    return zcc_error(zccRemoteError, "rank %d (pid %d) gave up on the communicator",
                     conn->peer, (int)s->peer_pid);
  if (s->check_pid && kill(s->peer_pid, 0) != 0 && errno == ESRCH)
    return zcc_error(zccRemoteError, "rank %d (pid %d) exited", conn->peer,
                     (int)s->peer_pid);
  return zccSuccess;
}

/* The next free send slot of s, or NULL when the FIFO is full. */
static char *send_slot(shm_conn_t *s) {
  uint64_t head = atomic_load_explicit(&s->send->head, memory_order_acquire);
  if (s->send_tail - head >= s->nslots) return NULL;
  return s->send_data + (size_t)(s->send_tail % s->nslots) * s->slot_size;
}

static void send_post(shm_conn_t *s, size_t n) {
  s->send->sizes[s->send_tail % s->nslots] = (uint32_t)n;
  s->send_tail++;
  atomic_store_explicit(&s->send->tail, s->send_tail, memory_order_release);
}

static zccResult_t shm_progress(zcc_conn_t *conn, zcc_xfer_t *x, int *moved) {
  shm_conn_t *s = conn->priv;
  if (!x->is_recv) {
    char *out;
    while (x->done < x->avail && (out = send_slot(s)) != NULL) {
      size_t n = x->avail - x->done;
      if (n > s->slot_size) n = s->slot_size;
      memcpy(out, (const char *)x->src + x->done, n);
      send_post(s, n);
      x->done += n;
      *moved = 1;
    }
    return zccSuccess;
  }
  size_t tsize = x->red ? zcc_type_size(x->type) : 1;
  uint64_t tail = atomic_load_explicit(&s->recv->tail, memory_order_acquire);
  while (x->done < x->bytes && s->recv_head < tail) {
    uint32_t idx = (uint32_t)(s->recv_head % s->nslots);
    const char *slot = s->recv_data + (size_t)idx * s->slot_size + s->recv_off;
    size_t avail = s->recv->sizes[idx] - s->recv_off;
    size_t n = x->bytes - x->done;
    if (n > avail) n = avail;
    if (n % tsize)
      return zcc_error(zccInternalError,
                       "shm: %zu bytes from rank %d are not whole %s elements (message "
                       "sizes differ between ranks?)", n, conn->peer, zcc_type_name(x->type));
    char *dst = (char *)x->dst + x->done;
    /* Forwarding send caught up on a shm connection: write its slot in the
       same pass, while the result is in registers, instead of re-reading
       dst later. */
    zcc_xfer_t *f = x->fwd_ready;
    shm_conn_t *fs = f && f->conn->ops == &zcc_transport_shm ? f->conn->priv : NULL;
    char *out = fs ? send_slot(fs) : NULL;
    if (out && n > fs->slot_size) n = fs->slot_size;
    if (x->red)
      zcc_reduce2(dst, out, (const char *)x->red + x->done, slot, n / tsize, x->type, x->op);
    else {
      memcpy(dst, slot, n);
      if (out) memcpy(out, slot, n);
    }
    if (out) {
      send_post(fs, n);
      f->done += n;
    }
    /* Once a chunk went unforwarded the send is behind: it must copy that
       chunk itself before anything else is forwarded. */
    if (!out || f->done == f->bytes) x->fwd_ready = NULL;
    x->done += n;
    s->recv_off += n;
    if (s->recv_off == s->recv->sizes[idx]) {
      s->recv_off = 0;
      s->recv_head++;
      atomic_store_explicit(&s->recv->head, s->recv_head, memory_order_release);
    }
    *moved = 1;
  }
  return zccSuccess;
}

/* A slot the sender posted that this side has not finished reading. */
static int shm_pending(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  return s && s->base &&
         atomic_load_explicit(&s->recv->tail, memory_order_acquire) != s->recv_head;
}

static zccResult_t shm_check(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  return s && s->base ? peer_gone(conn, s) : zccSuccess;
}

static void shm_fail(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  if (s && s->base) atomic_store(s->my_failed, 1);
}

static void shm_free(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  if (!s) return;
  if (s->linked) shm_unlink(s->name);
  if (s->base) munmap(s->base, s->map_bytes);
  free(s);
  conn->priv = NULL;
}

const zcc_transport_ops_t zcc_transport_shm = {
    .name = "shm",
    .can_connect = shm_can_connect,
    .connect = shm_connect,
    .progress = shm_progress,
    .pending = shm_pending,
    .check = shm_check,
    .fail = shm_fail,
    .free = shm_free,
    .gpu = &zcc_shm_gpu_face,
};
