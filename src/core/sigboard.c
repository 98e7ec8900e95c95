/*
 * The signature board of a GPU communicator (sigboard.h): every rank posts
 * each collective's signature into a small table in shared memory that its
 * peers on the host map, before the collective is enqueued. The caller
 * compares with what the peers that already made that call posted, and the
 * GPU watchdog compares the rest as peers catch up: a mismatch is
 * zccInvalidUsage naming both calls, and the kernels waiting on it are
 * stopped by the abort word.
 */
#include "sigboard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "param.h"

ZCC_PARAM_INT(gpu_sigboard, "GPU_SIGBOARD", 1,
              "1: GPU communicators compare every collective's signature with the ranks "
              "of the host (a mismatch is zccInvalidUsage naming both calls); 0: they do not "
              "(mismatched collectives then hang until ZCC_TIMEOUT or return wrong data)")

#define SIGB_ENTRIES 1024
#define SIGB_MAGIC 0x7a636362u

/* One entry: seq 0 while it is being written (a seqlock of one writer). */
typedef struct {
  _Atomic uint64_t seq;
  zcc_op_sig_t sig;
} sigb_entry_t;

typedef struct {
  uint32_t magic;
  uint32_t entries;
  uint64_t pad[7];
  sigb_entry_t e[SIGB_ENTRIES];
} sigb_seg_t;

struct zcc_sigboard {
  int n, rank;
  sigb_seg_t *own;
  sigb_seg_t **peer; /* [n]: a rank of this host, mapped; a rank on another host that
                        a network connection reaches, its mirror; NULL: self, or none */
  char *mirror;      /* [n]: 1 where peer[r] is a mirror (private memory, zcc_sigboard_put) */
  uint64_t *checked; /* [n]: the watchdog's last seq compared with that peer */
  /* The proxy's (one thread): per mirrored peer, the last seq its proxy
     covered, and the last seq found equal to this rank's; the gate word. */
  uint64_t *upto, *agreed;
  uint64_t *gate, gate_at;
  _Atomic uint64_t posted; /* the last seq posted here */
  char name[64];
  int unlinked;
};

static void seg_name(char *buf, size_t len, const struct zccComm *comm, int r) {
  snprintf(buf, len, "/zcc-sig-%016llx-%d", (unsigned long long)comm->hash, r);
}

static zccResult_t seg_map(const char *name, int create, sigb_seg_t **out) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0 && !create && errno == ENOENT)
    return zcc_error(zccRemoteError, "signature board %s is gone: its rank left while the "
                     "communicator was being made", name);
  if (fd < 0) return zcc_error(zccSystemError, "shm_open %s failed: %s", name, strerror(errno));
  if (create && ftruncate(fd, (off_t)sizeof(sigb_seg_t)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name);
    return zcc_error(zccSystemError, "%zu bytes of shared memory (%s) failed: %s",
                     sizeof(sigb_seg_t), name, strerror(e));
  }
  void *p = mmap(NULL, sizeof(sigb_seg_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name);
    return zcc_error(zccSystemError, "mmap %s failed: %s", name, strerror(errno));
  }
  *out = p;
  return zccSuccess;
}

zccResult_t zcc_sigboard_setup(struct zccComm *comm, zcc_sigboard_t **out) {
  *out = NULL;
  int64_t on = zcc_param_gpu_sigboard();
  if (on != 0 && on != 1)
    return zcc_error(zccInvalidArgument, "ZCC_GPU_SIGBOARD=%lld: expected 0 or 1",
                     (long long)on);
  if (!on) {
    ZCC_INFO(INIT, "comm %s rank %d: no signature board (ZCC_GPU_SIGBOARD=0)", comm->name,
             comm->rank);
    return zccSuccess;
  }
  int n = comm->nranks, me = comm->rank;
  zcc_sigboard_t *b = calloc(1, sizeof(*b));
  if (!b) return zcc_error(zccSystemError, "init: out of memory");
  b->n = n;
  b->rank = me;
  b->peer = calloc((size_t)n, sizeof(*b->peer));
  b->checked = calloc((size_t)n, sizeof(*b->checked));
  b->mirror = calloc((size_t)n, 1);
  b->upto = calloc((size_t)n, sizeof(*b->upto));
  b->agreed = calloc((size_t)n, sizeof(*b->agreed));
  zccResult_t res = zccSuccess;
  if (!b->peer || !b->checked || !b->mirror || !b->upto || !b->agreed) {
    res = zcc_error(zccSystemError, "init: out of memory");
    goto fail;
  }
  seg_name(b->name, sizeof(b->name), comm, me);
  /* Every board exists before anyone maps a peer's (the allgather), and
     every peer has mapped this one before its name goes (the barrier). A
     host without POSIX shared memory (no /dev/shm) still gets its
     communicator: every rank learns that some board is missing, and the
     communicator goes without (a warning says so). */
  int32_t *made = calloc((size_t)n, sizeof(*made));
  if (!made) {
    res = zcc_error(zccSystemError, "init: out of memory");
    goto fail;
  }
  char why[256] = "";
  if (seg_map(b->name, 1, &b->own) == zccSuccess) {
    b->own->magic = SIGB_MAGIC;
    b->own->entries = SIGB_ENTRIES;
    made[me] = 1;
  } else {
    snprintf(why, sizeof(why), "%s", zcc_last_error());
  }
  res = zcc_bootstrap_allgather(comm->bootstrap, made, sizeof(*made), comm->timeout_ms);
  int missing = -1;
  for (int r = 0; res == zccSuccess && r < n && missing < 0; r++)
    if (!made[r]) missing = r;
  free(made);
  if (res != zccSuccess) goto fail;
  if (missing >= 0) {
    ZCC_WARN("comm %s rank %d: rank %d could not make its signature board%s%s; mismatched "
             "collectives are not detected on this communicator", comm->name, me, missing,
             missing == me ? ": " : "", missing == me ? why : "");
    zcc_sigboard_free(b);
    zcc_clear_last_error();
    return zccSuccess;
  }
  uint64_t host = comm->peers[me].host_hash;
  for (int r = 0; r < n; r++) {
    if (r != me && comm->peers[r].host_hash != host && comm->conns && comm->conns[r]) {
      /* on another host, connected: the network proxy fills its mirror */
      b->peer[r] = calloc(1, sizeof(sigb_seg_t));
      if (!b->peer[r]) {
        res = zcc_error(zccSystemError, "init: out of memory");
        goto fail;
      }
      b->mirror[r] = 1;
      continue;
    }
    if (r == me || comm->peers[r].host_hash != host) continue;
    char name[64];
    seg_name(name, sizeof(name), comm, r);
    ZCC_CHECK_GOTO(seg_map(name, 0, &b->peer[r]), res, fail);
    if (b->peer[r]->magic != SIGB_MAGIC || b->peer[r]->entries != SIGB_ENTRIES) {
      res = zcc_error(zccInternalError, "signature board %s has an unexpected layout", name);
      goto fail;
    }
  }
  ZCC_CHECK_GOTO(zcc_bootstrap_barrier(comm->bootstrap, comm->timeout_ms), res, fail);
  shm_unlink(b->name);
  b->unlinked = 1;
  *out = b;
  return zccSuccess;
fail:
  zcc_sigboard_free(b);
  return res;
}

void zcc_sigboard_free(zcc_sigboard_t *b) {
  if (!b) return;
  if (b->own) {
    if (!b->unlinked) shm_unlink(b->name);
    munmap(b->own, sizeof(sigb_seg_t));
  }
  for (int r = 0; b->peer && r < b->n; r++) {
    if (!b->peer[r]) continue;
    if (b->mirror && b->mirror[r]) free(b->peer[r]);
    else munmap(b->peer[r], sizeof(sigb_seg_t));
  }
  free(b->mirror);
  free(b->peer);
  free(b->checked);
  free(b->upto);
  free(b->agreed);
  free(b);
}

/* A board's signature of call seq: 1 read, 0 not posted yet (or being
   written), -1 overwritten (a whole table ahead: nothing to compare). */
static int read_entry(const sigb_seg_t *s, uint64_t seq, zcc_op_sig_t *out) {
  sigb_entry_t *e = (sigb_entry_t *)&s->e[seq % SIGB_ENTRIES];
  uint64_t a = atomic_load_explicit(&e->seq, memory_order_acquire);
  if (a < seq) return 0;
  if (a > seq) return -1;
  memcpy(out, &e->sig, sizeof(*out));
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&e->seq, memory_order_relaxed) == seq ? 1 : 0;
}

/* The one writer of s: seq 0 while the signature is written. */
static void write_entry(sigb_seg_t *s, const zcc_op_sig_t *sig) {
  sigb_entry_t *e = &s->e[sig->seq % SIGB_ENTRIES];
  atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  memcpy(&e->sig, sig, sizeof(*sig));
  atomic_store_explicit(&e->seq, sig->seq, memory_order_release);
}

uint64_t zcc_sigboard_posted(const zcc_sigboard_t *b) {
  return b ? atomic_load_explicit(&b->posted, memory_order_acquire) : 0;
}

int zcc_sigboard_own(const zcc_sigboard_t *b, uint64_t seq, zcc_op_sig_t *out) {
  return b ? read_entry(b->own, seq, out) : 0;
}

int zcc_sigboard_mirrors(const zcc_sigboard_t *b, int peer) {
  return b && peer >= 0 && peer < b->n && b->mirror[peer];
}

void zcc_sigboard_put(zcc_sigboard_t *b, int peer, const zcc_op_sig_t *sig) {
  if (zcc_sigboard_mirrors(b, peer) && sig->seq) write_entry(b->peer[peer], sig);
}

void zcc_sigboard_put_upto(zcc_sigboard_t *b, int peer, uint64_t upto) {
  if (zcc_sigboard_mirrors(b, peer) && upto > b->upto[peer]) b->upto[peer] = upto;
}

int zcc_sigboard_gate_set(zcc_sigboard_t *b, uint64_t *word) {
  if (!b) return 0;
  for (int r = 0; r < b->n; r++)
    if (b->mirror[r]) {
      b->gate = word;
      return 1;
    }
  return 0;
}

int zcc_sigboard_gate_advance(zcc_sigboard_t *b) {
  if (!b || !b->gate) return 0;
  uint64_t posted = atomic_load_explicit(&b->posted, memory_order_acquire), v = posted;
  if (posted <= b->gate_at) return 0;
  for (int r = 0; r < b->n; r++) {
    if (!b->peer[r]) continue;
    uint64_t a = b->agreed[r];
    while (a < posted && (!b->mirror[r] || a < b->upto[r])) {
      uint64_t seq = a + 1;
      zcc_op_sig_t theirs, mine;
      int got = read_entry(b->peer[r], seq, &theirs);
      if (got == 0 && !b->mirror[r]) break; /* a rank of this host, not there yet */
      /* else not 1: the peer's proxy skipped it, or this one is a whole
         table behind: nothing to compare, as in zcc_sigboard_check */
      if (got == 1 && read_entry(b->own, seq, &mine) == 1 && !zcc_opsig_same(&mine, &theirs))
        break; /* never: the checks report it and the abort word frees the kernels */
      a = seq;
    }
    b->agreed[r] = a;
    if (a < v) v = a;
  }
  if (v <= b->gate_at) return 0;
  b->gate_at = v;
  __atomic_store_n(b->gate, v, __ATOMIC_RELEASE);
  return 1;
}

zccResult_t zcc_sigboard_post(zcc_sigboard_t *b, const zcc_op_sig_t *sig) {
  if (!b) return zccSuccess;
  write_entry(b->own, sig);
  atomic_store_explicit(&b->posted, sig->seq, memory_order_release);
  /* Before reading the peers' entries: of two ranks posting at once, at
     least one then sees the other's (a store then a load, as Dekker's). */
  atomic_thread_fence(memory_order_seq_cst);
  /* Peers that made this call already: compare now, before it runs. */
  for (int r = 0; r < b->n; r++) {
    if (!b->peer[r]) continue;
    zcc_op_sig_t theirs;
    if (read_entry(b->peer[r], sig->seq, &theirs) == 1 && !zcc_opsig_same(sig, &theirs))
      return zcc_opsig_mismatch(&theirs, 0, r, sig, 0, b->rank);
  }
  return zccSuccess;
}

zccResult_t zcc_sigboard_check(zcc_sigboard_t *b) {
  if (!b) return zccSuccess;
  uint64_t upto = atomic_load_explicit(&b->posted, memory_order_acquire);
  for (int r = 0; r < b->n; r++) {
    if (!b->peer[r]) continue;
    while (b->checked[r] < upto) {
      uint64_t seq = b->checked[r] + 1;
      zcc_op_sig_t theirs;
      int got = read_entry(b->peer[r], seq, &theirs);
      if (got == 0) break; /* not posted yet */
      if (got == 1) {
        zcc_op_sig_t mine;
        if (read_entry(b->own, seq, &mine) == 1 && !zcc_opsig_same(&mine, &theirs))
          return zcc_opsig_mismatch(&theirs, 0, r, &mine, 0, b->rank);
      }
      b->checked[r] = seq;
    }
  }
  return zccSuccess;
}
