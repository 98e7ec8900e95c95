/*
 * shm: processes of one machine. Each pair shares one POSIX shared-memory
 * segment holding a FIFO of slots per direction. The sender copies user
 * data into a slot (the one copy), the receiver copies or reduces straight
 * out of it into the destination, slot by slot, so reduction overlaps
 * movement. The segment is unlinked once both sides mapped it.
 *
 * The first slot of every transfer carries the operation's record
 * (opsig.h), which the receiver checks before it takes any byte. A side
 * that gives up says so in the segment (with its error); one that is
 * destroyed says it is gone. A peer's death is seen through a pidfd, which
 * turns readable at exit (also while the process is an unreaped zombie).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "param.h"
#include "reduce.h"
#include "transport.h"

ZCC_PARAM_INT(shm_disable, "SHM_DISABLE", 0,
              "1: never use shared memory between processes of one host (use sockets)")
ZCC_PARAM_INT(shm_slot_size, "SHM_SLOT_SIZE", 131072,
              "bytes per shared-memory FIFO slot (multiple of 64)")
ZCC_PARAM_INT(shm_nslots, "SHM_NSLOTS", 16, "slots per shared-memory FIFO (2 to 256)")

#define SHM_MAGIC 0x7a636373686d3033ULL
#define SHM_MAX_SLOTS 256
#define SHM_DESC_BYTES 256
#define SHM_INLINE (SHM_DESC_BYTES - 16 - (int)sizeof(zcc_wire_hdr_t))
#define SHM_BRIEF_INLINE (SHM_DESC_BYTES - 16 - (int)sizeof(zcc_op_sig_t))
enum { SHM_CONT = 0, SHM_FIRST = 1, SHM_BRIEF = 2 }; /* shm_desc_t.first */

/*
 * What the sender says of a slot. The receiver polls `posted` and finds
 * everything else of a small chunk in the same two cache lines: a chunk of
 * at most SHM_INLINE bytes travels in the descriptor itself, not in the
 * slot's data area, so a small message costs the two cores one pair of
 * adjacent lines each way (no separate tail, data or head lines).
 */
typedef struct shm_desc {
  alignas(128) atomic_uint_least64_t posted; /* the slot's number from 1 once filled */
  uint32_t size;
  /* SHM_FIRST: the first slot of a transfer, full.hdr is its record;
     SHM_BRIEF: a collective's whole transfer in this slot, inline: its
     record is brief.sig alone (the rest follows: data, this size, no
     point-to-point number), so that up to 64 bytes fit the first two
     lines; SHM_CONT: a later slot */
  uint32_t first;
  union {
    struct {
      zcc_wire_hdr_t hdr;
      char inl[SHM_INLINE]; /* the bytes of a chunk of at most SHM_INLINE */
    } full;
    struct {
      zcc_op_sig_t sig;
      char inl[SHM_BRIEF_INLINE];
    } brief;
  } u;
} shm_desc_t;
_Static_assert(sizeof(shm_desc_t) == SHM_DESC_BYTES, "shm descriptor layout");

typedef struct shm_fifo {
  alignas(64) atomic_uint_least64_t head; /* slots the receiver finished */
  alignas(128) shm_desc_t desc[SHM_MAX_SLOTS];
} shm_fifo_t;

enum { SHM_LIVE = 0, SHM_FAILED = 1, SHM_GONE = 2 };

typedef struct shm_header {
  uint64_t magic;
  uint32_t nslots;
  uint32_t slot_size;
  alignas(64) atomic_int failed[2]; /* [0]: lower rank, [1]: higher; SHM_* */
  int32_t fail_code[2];             /* SHM_FAILED: the side's error */
  uint64_t fail_opno[2];            /* SHM_FAILED: its first operation that did not
                                       complete; its bytes from there on are void */
  int32_t fail_origin[2];           /* SHM_FAILED: the rank its failure began on */
  char fail_msg[2][ZCC_WIRE_FAIL_TEXT];
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
  uint64_t send_tail; /* slots posted */
  uint64_t send_head; /* the receiver's head as last read (reread when full) */
  uint64_t recv_head; /* slots finished reading */
  size_t send_mapped, recv_mapped; /* bytes of every data slot whose pages are
                                      mapped here, each way (populate_slots) */
  size_t recv_off; /* bytes consumed of the current receive slot */
  atomic_int *my_failed, *peer_failed;
  int32_t *my_code, *peer_code;
  uint64_t *my_fail_opno, *peer_fail_opno;
  int32_t *my_origin, *peer_origin;
  char *my_msg, *peer_msg;
  uint64_t send_pseq, recv_pseq; /* point-to-point messages each way */
  pid_t peer_pid;
  int check_pid;
  int pidfd; /* the peer's pidfd; -1: none (then /proc is read) */
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
  int me = s->lower ? 0 : 1;
  s->my_failed = &h->failed[me];
  s->peer_failed = &h->failed[1 - me];
  s->my_code = &h->fail_code[me];
  s->my_fail_opno = &h->fail_opno[me];
  s->peer_fail_opno = &h->fail_opno[1 - me];
  s->peer_code = &h->fail_code[1 - me];
  s->my_msg = h->fail_msg[me];
  s->my_origin = &h->fail_origin[me];
  s->peer_origin = &h->fail_origin[1 - me];
  s->peer_msg = h->fail_msg[1 - me];
}

/*
 * Map what small and medium transfers touch before any flows: the
 * descriptors and the first page of every slot, both ways, into this
 * side's page tables (each side once, before the first transfer), so that
 * the first operations of each size pay no page faults (with ranks
 * sharing cores a fault could cost a scheduling round). Only where the
 * host has few ranks: 128 KiB per pair stays committed.
 */
#define SHM_PREFAULT_MAX_LOCAL 32
static void prefault(shm_conn_t *s, const struct zccComm *comm, int creator) {
  int local = 0;
  for (int r = 0; r < comm->nranks; r++)
    local += comm->peers[r].host_hash == comm->peers[comm->rank].host_hash;
  if (local > SHM_PREFAULT_MAX_LOCAL) return;
  for (int dir = 0; dir < 2; dir++) {
    shm_fifo_t *f = dir ? s->recv : s->send;
    char *data = dir ? s->recv_data : s->send_data;
    for (uint32_t i = 0; i < s->nslots; i++) {
      volatile char *d = (volatile char *)&f->desc[i], *b = data + (size_t)i * s->slot_size;
      if (creator) { /* no transfer runs yet: these bytes are nobody's */
        *d = 0;
        *b = 0;
      } else { /* the creator made the pages: map them */
        (void)*d;
        (void)*b;
      }
    }
  }
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
  prefault(s, conn->comm, 1);
  ZCC_INFO(SHM, "created %s: %u slots of %zu bytes each way", s->name, s->nslots,
           s->slot_size);
  return zccSuccess;
}

static zccResult_t shm_attach(zcc_conn_t *conn, shm_conn_t *s) {
  int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0600);
  /* Only its maker unlinks it before this rank has mapped it: when it
     frees its communicator (it aborted, gave up or exited). */
  if (fd < 0 && errno == ENOENT)
    return zcc_error(zccRemoteError,
                     "shared memory %s of rank %d is gone: rank %d left while the "
                     "communicator was being connected (aborted, gave up or exited)",
                     s->name, conn->peer, conn->peer);
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
  prefault(s, conn->comm, 0);
  /* Both sides have it mapped now: a creator that dies before its FINISH
     phase leaves no segment behind. */
  shm_unlink(s->name);
  return zccSuccess;
}

/* A pidfd for the peer, so that its death is seen even before it is reaped. */
static int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    int fl = fcntl(fd, F_GETFD);
    if (fl >= 0) fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
  }
  return fd;
#else
  (void)pid;
  return -1;
#endif
}

/* Has process pid exited (dead, or a zombie not yet reaped)? */
static int pid_exited(shm_conn_t *s) {
  if (s->pidfd >= 0) {
    struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
  }
  if (kill(s->peer_pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)s->peer_pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')'); /* the name may hold spaces */
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static zccResult_t shm_connect(zcc_conn_t *conn, zcc_connect_phase_t phase) {
  struct zccComm *comm = conn->comm;
  shm_conn_t *s = conn->priv;
  switch (phase) {
  case ZCC_CONNECT_CREATE:
    s = calloc(1, sizeof(*s));
    if (!s) return zcc_error(zccSystemError, "shm: out of memory");
    conn->priv = s;
    s->pidfd = -1;
    s->lower = comm->rank < conn->peer;
    snprintf(s->name, sizeof(s->name), "/zcc-%016llx-%d-%d-%d",
             (unsigned long long)comm->hash, (int)comm->peers[s->lower ? comm->rank : conn->peer].pid,
             s->lower ? comm->rank : conn->peer, s->lower ? conn->peer : comm->rank);
    s->peer_pid = comm->peers[conn->peer].pid;
    s->check_pid = comm->peers[conn->peer].pidns == comm->peers[comm->rank].pidns;
    s->pidfd = s->check_pid ? open_pidfd(s->peer_pid) : -1;
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

/* The peer's failure, as it recorded it. */
static zccResult_t peer_failed(zcc_conn_t *conn, shm_conn_t *s) {
  char msg[ZCC_WIRE_FAIL_TEXT];
  memcpy(msg, s->peer_msg, sizeof(msg));
  msg[sizeof(msg) - 1] = '\0';
  int origin = *s->peer_origin;
  if (origin < 0 || origin >= conn->comm->nranks) origin = conn->peer;
  return zcc_peer_failed_error(conn->comm, conn->peer, (int)s->peer_pid, *s->peer_code, origin,
                               msg);
}

static const shm_desc_t *recv_desc(shm_conn_t *s);

static zccResult_t peer_gone(zcc_conn_t *conn, shm_conn_t *s) {
  int st = atomic_load_explicit(s->peer_failed, memory_order_acquire);
  if (st == SHM_FAILED) return peer_failed(conn, s);
  /* A peer that completed its sends and then destroyed the communicator
     left them in the FIFO (written before it said so): take them first. */
  if (st == SHM_GONE && recv_desc(s) != NULL) return zccSuccess;
  if (st == SHM_GONE)
    return zcc_error(zccRemoteError, "rank %d (pid %d) destroyed the communicator",
                     conn->peer, (int)s->peer_pid);
  if (s->check_pid && pid_exited(s))
    return zcc_error(zccRemoteError, "rank %d (pid %d) exited", conn->peer,
                     (int)s->peer_pid);
  return zccSuccess;
}

static int is_p2p(const zcc_xfer_t *x) { return x->sig && x->sig->coll == ZCC_COLL_SENDRECV; }

/* x's next chunk of n bytes is all of a collective's transfer: SHM_BRIEF. */
static int brief(const zcc_xfer_t *x, size_t n) {
  return x->done == 0 && n == x->bytes && n <= SHM_BRIEF_INLINE && x->sig && !is_p2p(x);
}

/*
 * The first n bytes of every data slot of one direction mapped in at once
 * (MADV_POPULATE_WRITE for the writer, _READ for the reader; contents are
 * not touched), the first time a chunk that large goes through: otherwise
 * the first nslots chunks of each new size each take page faults, and a
 * short benchmark (20 iterations at 4 KiB on 4 ranks) reads 2x slower than
 * the steady state. Kernels without it (before 5.14) fault as before.
 */
static void populate_slots(shm_conn_t *s, char *data, size_t *mapped, size_t n, int write) {
  if (n <= *mapped) return;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  n = (n + (size_t)page - 1) / (size_t)page * (size_t)page;
  if (n > s->slot_size) n = s->slot_size;
#if defined(MADV_POPULATE_WRITE) && defined(MADV_POPULATE_READ)
  for (uint32_t i = 0; i < s->nslots; i++) {
    uintptr_t from = (uintptr_t)(data + (size_t)i * s->slot_size + *mapped);
    uintptr_t lo = from & ~((uintptr_t)page - 1);
    uintptr_t hi = (uintptr_t)(data + (size_t)i * s->slot_size + n);
    if (hi > lo)
      (void)madvise((void *)lo, hi - lo, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
  }
#else
  (void)data;
  (void)write;
#endif
  *mapped = n;
}

/* Whether x's next chunk of n bytes goes into its slot with streaming
   stores: where the plan asks (slot_nt) and the chunk goes to the slot's
   data area (one inline in the descriptor shares its lines with `posted`). */
static int send_nt(const zcc_xfer_t *x, size_t n) {
  return x->slot_nt && n > SHM_INLINE && !brief(x, n);
}

/* Where x's next chunk of n bytes goes, or NULL when the FIFO is full. */
static char *send_slot(shm_conn_t *s, size_t n, const zcc_xfer_t *x) {
  if (s->send_tail - s->send_head >= s->nslots) {
    s->send_head = atomic_load_explicit(&s->send->head, memory_order_acquire);
    if (s->send_tail - s->send_head >= s->nslots) return NULL;
  }
  uint32_t idx = (uint32_t)(s->send_tail % s->nslots);
  if (brief(x, n)) return s->send->desc[idx].u.brief.inl;
  if (n <= SHM_INLINE) return s->send->desc[idx].u.full.inl;
  populate_slots(s, s->send_data, &s->send_mapped, n, 1);
  return s->send_data + (size_t)idx * s->slot_size;
}

/* Post n bytes of x's next chunk; its first carries x's record. */
static void send_post(shm_conn_t *s, size_t n, const zcc_xfer_t *x) {
  shm_desc_t *d = &s->send->desc[s->send_tail % s->nslots];
  d->size = (uint32_t)n;
  d->first = brief(x, n) ? SHM_BRIEF : x->done == 0 ? SHM_FIRST : SHM_CONT;
  if (d->first == SHM_BRIEF) d->u.brief.sig = *x->sig;
  else if (d->first) zcc_wire_hdr_fill(&d->u.full.hdr, x->sig, x->bytes,
                                       is_p2p(x) ? ++s->send_pseq : 0);
  s->send_tail++;
  atomic_store_explicit(&d->posted, s->send_tail, memory_order_release);
}

/* The descriptor of the next slot to read, or NULL while it is not posted. */
static const shm_desc_t *recv_desc(shm_conn_t *s) {
  const shm_desc_t *d = &s->recv->desc[s->recv_head % s->nslots];
  return atomic_load_explicit(&d->posted, memory_order_acquire) == s->recv_head + 1 ? d : NULL;
}

static zccResult_t shm_progress(zcc_conn_t *conn, zcc_xfer_t *x, int *moved) {
  shm_conn_t *s = conn->priv;
  if (!x->is_recv) {
    char *out;
    if (x->done == 0 && atomic_load_explicit(s->peer_failed, memory_order_acquire) == SHM_FAILED)
      return peer_failed(conn, s); /* it will not take them */
    for (;;) {
      size_t n = x->avail - x->done;
      if (n > s->slot_size) n = s->slot_size;
      if (!n || !(out = send_slot(s, n, x))) break;
      if (send_nt(x, n))
        zcc_copy_nt(out, (const char *)x->src + x->done, n);
      else
        memcpy(out, (const char *)x->src + x->done, n);
      send_post(s, n, x);
      x->done += n;
      *moved = 1;
    }
    return zccSuccess;
  }
  size_t tsize = x->red ? zcc_type_size(x->type) : 1;
  const shm_desc_t *d;
  while (x->done < x->bytes && (d = recv_desc(s)) != NULL) {
    uint32_t idx = (uint32_t)(s->recv_head % s->nslots);
    zcc_wire_hdr_t bh;
    const zcc_wire_hdr_t *h = &d->u.full.hdr;
    if (d->first == SHM_BRIEF) { /* the record, from what the slot implies */
      zcc_wire_hdr_fill(&bh, &d->u.brief.sig, d->size, 0);
      h = &bh;
    }
    if (x->done == 0) {
      /* A new transfer: the peer must be live and sending this very call. */
      if (atomic_load_explicit(s->peer_failed, memory_order_acquire) == SHM_FAILED &&
          h->sig.opno >= *s->peer_fail_opno)
        return peer_failed(conn, s); /* bytes of a call that failed there */
      if (s->recv_off != 0 || !d->first)
        return zcc_error(zccInvalidUsage,
                         "%s: the bytes from rank %d do not begin a transfer (an earlier "
                         "call's sizes differed between the ranks)",
                         x->sig ? zcc_coll_name((zcc_coll_t)x->sig->coll) : "transfer",
                         conn->peer);
      uint64_t pseq = is_p2p(x) ? s->recv_pseq + 1 : 0;
      ZCC_CHECK(zcc_wire_hdr_check(h, x->sig, x->bytes, pseq, conn->peer,
                                   conn->comm));
      if (pseq) s->recv_pseq = pseq;
    } else if (s->recv_off == 0 && d->first) {
      return zcc_error(zccInvalidUsage,
                       "rank %d began a new transfer inside one of %zu bytes (sizes differ "
                       "between the ranks)", conn->peer, x->bytes);
    }
    if (d->first != SHM_BRIEF && d->size > SHM_INLINE)
      populate_slots(s, s->recv_data, &s->recv_mapped, d->size, 0);
    const char *slot = (d->first == SHM_BRIEF    ? d->u.brief.inl
                        : d->size <= SHM_INLINE ? d->u.full.inl
                                                : s->recv_data + (size_t)idx * s->slot_size) +
                       s->recv_off;
    size_t avail = d->size - s->recv_off;
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
    if (fs && n > fs->slot_size) n = fs->slot_size;
    char *out = fs ? send_slot(fs, n, f) : NULL;
    /* The forward's slot streams as its own sends do (send_nt). */
    int out_nt = out && send_nt(f, n);
    if (x->red)
      zcc_xfer_reduce(x, dst, out, out_nt, slot, n / tsize);
    else {
      if (x->nt) zcc_copy_nt(dst, slot, n);
      else memcpy(dst, slot, n);
      if (out_nt) zcc_copy_nt(out, slot, n);
      else if (out) memcpy(out, slot, n);
    }
    if (out) {
      send_post(fs, n, f);
      f->done += n;
    }
    /* Once a chunk went unforwarded the send is behind: it must copy that
       chunk itself before anything else is forwarded. */
    if (!out || f->done == f->bytes) x->fwd_ready = NULL;
    x->done += n;
    s->recv_off += n;
    if (s->recv_off == d->size) {
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
  return s && s->base && recv_desc(s) != NULL;
}

static zccResult_t shm_stray(zcc_conn_t *conn, const zcc_op_sig_t *mine) {
  shm_conn_t *s = conn->priv;
  const shm_desc_t *d = s && s->base ? recv_desc(s) : NULL;
  if (!d) return zccSuccess;
  zcc_wire_hdr_t bh;
  const zcc_wire_hdr_t *h = &d->u.full.hdr;
  if (d->first == SHM_BRIEF) {
    zcc_wire_hdr_fill(&bh, &d->u.brief.sig, d->size, 0);
    h = &bh;
  }
  if (atomic_load_explicit(s->peer_failed, memory_order_acquire) == SHM_FAILED &&
      (!d->first || h->sig.opno >= *s->peer_fail_opno))
    return peer_failed(conn, s);
  if (s->recv_off != 0 || !d->first)
    return zcc_error(zccInvalidUsage,
                     "%s: the bytes from rank %d do not begin a transfer (an earlier call's "
                     "sizes differed between the ranks)",
                     zcc_coll_name((zcc_coll_t)mine->coll), conn->peer);
  ZCC_CHECK(zcc_wire_hdr_check(h, mine, h->bytes, h->pseq, conn->peer, conn->comm));
  return zcc_error(zccInvalidUsage, "%s: rank %d sent bytes for it, where this rank's call "
                   "takes none from it", zcc_coll_name((zcc_coll_t)mine->coll), conn->peer);
}

static zccResult_t shm_check(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  return s && s->base ? peer_gone(conn, s) : zccSuccess;
}

static zccResult_t shm_fail_peek(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  if (!s || !s->base ||
      atomic_load_explicit(s->peer_failed, memory_order_acquire) != SHM_FAILED ||
      *s->peer_code == zccTimeout)
    return zccSuccess;
  return peer_failed(conn, s);
}

static void shm_fail(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  if (!s || !s->base || atomic_load(s->my_failed) != SHM_LIVE) return;
  struct zccComm *comm = conn->comm;
  *s->my_code = atomic_load(&comm->async_error);
  *s->my_fail_opno = comm->fail_opno;
  *s->my_origin = comm->fail_origin;
  snprintf(s->my_msg, ZCC_WIRE_FAIL_TEXT, "%s", comm->fail_text);
  atomic_store_explicit(s->my_failed, SHM_FAILED, memory_order_release);
}

static void shm_free(zcc_conn_t *conn) {
  shm_conn_t *s = conn->priv;
  if (!s) return;
  if (s->base) {
    int live = SHM_LIVE;
    atomic_compare_exchange_strong(s->my_failed, &live, SHM_GONE);
  }
  if (s->pidfd >= 0) close(s->pidfd);
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
    .stray = shm_stray,
    .fail_peek = shm_fail_peek,
    .check = shm_check,
    .fail = shm_fail,
    .free = shm_free,
    .gpu = &zcc_shm_gpu_face,
};
