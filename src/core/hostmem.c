/*
 * Shared host memory (zccMemHostAlloc) and the peers' view of it: see
 * hostmem.h. Regions live in a process-wide list; each communicator keeps
 * the peer regions it mapped, keyed by (peer, region number), until it is
 * destroyed or the cache is full (then the least recently used goes).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "debug.h"
#include "hostmem.h"

typedef struct region {
  struct region *next;
  char *base;
  size_t bytes;
  int fd;
  uint64_t id;
  uint64_t ino;
} region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static region_t *regions;
static uint64_t next_id = 1;

/* A region whose memfd is named `name` (what /proc/<pid>/maps shows). */
static zccResult_t region_alloc(void **ptr, size_t size, const char *name) {
  if (!ptr) return zcc_error(zccInvalidArgument, "zccMemHostAlloc: ptr is NULL");
  if (size == 0) return zcc_error(zccInvalidArgument, "zccMemHostAlloc: size is 0");
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  if (size > SIZE_MAX - (size_t)page)
    return zcc_error(zccInvalidArgument, "zccMemHostAlloc: size %zu is too large", size);
  size_t bytes = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
  region_t *r = calloc(1, sizeof(*r));
  if (!r) return zcc_error(zccSystemError, "zccMemHostAlloc: out of memory");
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) {
    free(r);
    return zcc_error(zccSystemError, "zccMemHostAlloc: memfd_create failed: %s",
                     strerror(errno));
  }
  struct stat st;
  if (ftruncate(fd, (off_t)bytes) != 0 || fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    free(r);
    return zcc_error(zccSystemError, "zccMemHostAlloc: sizing %zu bytes failed: %s", bytes,
                     strerror(e));
  }
  void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    close(fd);
    free(r);
    return zcc_error(zccSystemError, "zccMemHostAlloc: mmap of %zu bytes failed: %s", bytes,
                     strerror(e));
  }
  r->base = base;
  r->bytes = bytes;
  r->fd = fd;
  r->ino = (uint64_t)st.st_ino;
  pthread_mutex_lock(&regions_lock);
  r->id = next_id++;
  r->next = regions;
  regions = r;
  pthread_mutex_unlock(&regions_lock);
  ZCC_INFO(INIT, "zccMemHostAlloc: %zu bytes at %p (region %llu)", bytes, base,
           (unsigned long long)r->id);
  *ptr = base;
  return zccSuccess;
}

zccResult_t zccMemHostAlloc(void **ptr, size_t size) {
  return region_alloc(ptr, size, "zcc-hostmem");
}

zccResult_t zccMemHostFree(void *ptr) {
  if (!ptr) return zcc_error(zccInvalidArgument, "zccMemHostFree: ptr is NULL");
  pthread_mutex_lock(&regions_lock);
  region_t **pp = &regions;
  while (*pp && (*pp)->base != ptr) pp = &(*pp)->next;
  region_t *r = *pp;
  if (r) *pp = r->next;
  pthread_mutex_unlock(&regions_lock);
  if (!r)
    return zcc_error(zccInvalidArgument,
                     "zccMemHostFree: %p was not returned by zccMemHostAlloc (or was freed "
                     "already)", ptr);
  munmap(r->base, r->bytes);
  close(r->fd);
  free(r);
  return zccSuccess;
}

int zcc_hostmem_find(const void *p, size_t len, zcc_hostmem_ref_t *ref) {
  memset(ref, 0, sizeof(*ref));
  ref->fd = -1;
  const char *c = p;
  pthread_mutex_lock(&regions_lock);
  for (region_t *r = regions; r; r = r->next) {
    if (c >= r->base && c <= r->base + r->bytes && len <= (size_t)(r->base + r->bytes - c)) {
      ref->fd = r->fd;
      ref->id = r->id;
      ref->ino = r->ino;
      ref->bytes = r->bytes;
      ref->off = (uint64_t)(c - r->base);
      break;
    }
  }
  pthread_mutex_unlock(&regions_lock);
  return ref->fd >= 0;
}

/* The peer regions a communicator mapped: room for four per peer (an op
   maps at most two per peer, so the least recently used entry, the one a
   new mapping replaces, is never one the current op holds). */
static int peer_maps(const struct zccComm *comm) { return 4 * (comm->nranks - 1) + 8; }

typedef struct peer_map {
  int peer;      /* -1: free */
  uint64_t id;
  char *base;
  size_t bytes;
  uint64_t used; /* the lookup count when last used */
} peer_map_t;

struct zcc_hostmem_cache {
  int nmaps;
  uint64_t uses;
  int warned;    /* a failed mapping was logged */
  peer_map_t maps[];
};

static void unmap_entry(peer_map_t *m) {
  if (m->peer >= 0 && m->base) munmap(m->base, m->bytes);
  m->peer = -1;
  m->base = NULL;
}

/* The whole region a peer described, mapped here (NULL: cannot; the
   reason is logged when warn is set). */
static char *map_region(struct zccComm *comm, int peer, const zcc_hostmem_ref_t *ref, int warn) {
  const zcc_peer_info_t *pi = &comm->peers[peer];
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pi->pid, (int)ref->fd);
  const char *why = NULL;
  char *base = NULL;
  int fd = -1;
  struct stat st;
  if (pi->pidns != comm->peers[comm->rank].pidns || pi->host_hash != comm->peers[comm->rank].host_hash)
    why = "the peer is in another pid namespace or on another host";
  else if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
    why = strerror(errno);
  else if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != ref->ino ||
           (uint64_t)st.st_size < ref->bytes)
    why = "the file there is not the region the peer described";
  else if ((base = mmap(NULL, ref->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
           MAP_FAILED) {
    base = NULL;
    why = strerror(errno);
  }
  if (fd >= 0) close(fd);
  if (!base && warn)
    ZCC_WARN("comm %s: cannot map rank %d's zccMemHostAlloc memory (%s: %s); collectives "
             "on it stay staged through shared memory", comm->name, peer, path, why);
  return base;
}

char *zcc_hostmem_peer_ptr(struct zccComm *comm, int peer, const zcc_hostmem_ref_t *ref) {
  if (ref->fd < 0 || ref->off > ref->bytes) return NULL;
  struct zcc_hostmem_cache *c = comm->hostmem;
  if (!c) {
    int n = peer_maps(comm);
    c = calloc(1, sizeof(*c) + (size_t)n * sizeof(peer_map_t));
    if (!c) return NULL;
    c->nmaps = n;
    for (int i = 0; i < n; i++) c->maps[i].peer = -1;
    comm->hostmem = c;
  }
  c->uses++;
  peer_map_t *victim = &c->maps[0];
  for (int i = 0; i < c->nmaps; i++) {
    peer_map_t *m = &c->maps[i];
    if (m->peer == peer && m->id == ref->id && m->bytes == ref->bytes) {
      m->used = c->uses;
      return m->base + ref->off;
    }
    if (m->peer < 0 || (victim->peer >= 0 && m->used < victim->used)) victim = m;
  }
  char *base = map_region(comm, peer, ref, !c->warned);
  if (!base) {
    c->warned = 1;
    return NULL;
  }
  unmap_entry(victim);
  victim->peer = peer;
  victim->id = ref->id;
  victim->base = base;
  victim->bytes = ref->bytes;
  victim->used = c->uses;
  ZCC_INFO(COLL, "comm %s: mapped rank %d's region %llu (%llu bytes)", comm->name, peer,
           (unsigned long long)ref->id, (unsigned long long)ref->bytes);
  return base + ref->off;
}

static void stage_free(struct zccComm *comm) {
  zcc_stage_t *st = comm->stage;
  if (!st) return;
  for (int k = 0; k < comm->nranks && st->peer; k++)
    if (k != comm->rank && st->peer[k]) munmap(st->peer[k], zcc_stage_bytes(st->chunk));
  if (st->mine) zccMemHostFree(st->mine);
  free(st->peer);
  free(st);
  comm->stage = NULL;
}

void zcc_hostmem_comm_free(struct zccComm *comm) {
  stage_free(comm);
  struct zcc_hostmem_cache *c = comm->hostmem;
  if (!c) return;
  for (int i = 0; i < c->nmaps; i++) unmap_entry(&c->maps[i]);
  free(c);
  comm->hostmem = NULL;
}

void zcc_stage_prepare(struct zccComm *comm, size_t chunk, zcc_hostmem_ref_t *ref) {
  memset(ref, 0, sizeof(*ref));
  ref->fd = -1;
  zcc_stage_t *st = comm->stage;
  if (!st) {
    st = calloc(1, sizeof(*st));
    if (st) st->peer = calloc((size_t)comm->nranks, sizeof(*st->peer));
    if (!st || !st->peer) {
      free(st);
      ZCC_WARN("comm %s: out of memory for the allreduce's staging regions; it runs "
               "without them (the ring, the gather at rank 0)", comm->name);
      return;
    }
    comm->stage = st;
  }
  if (!st->mine) {
    void *p = NULL;
    if (region_alloc(&p, zcc_stage_bytes(chunk), "zcc-stage") != zccSuccess) {
      ZCC_WARN("comm %s: cannot make the allreduce's staging region (%s); it runs "
               "without them (the ring, the gather at rank 0)", comm->name, zcc_last_error());
      return;
    }
    st->mine = p;
    st->chunk = chunk;
    st->peer[comm->rank] = p;
  }
  zcc_hostmem_find(st->mine, zcc_stage_bytes(st->chunk), ref);
}

int zcc_stage_map(struct zccComm *comm, const zcc_hostmem_ref_t *refs) {
  zcc_stage_t *st = comm->stage;
  if (!st || !st->mine) return 0;
  for (int k = 0; k < comm->nranks; k++) {
    if (k == comm->rank || st->peer[k]) continue;
    /* Every region has the same layout: the same chunk on every rank. */
    if (refs[k].fd < 0 || refs[k].off != 0 || refs[k].bytes != zcc_stage_bytes(st->chunk))
      return 0;
    if (!(st->peer[k] = map_region(comm, k, &refs[k], 1))) return 0;
  }
  return 1;
}

void zcc_stage_decide(struct zccComm *comm, int ok) {
  if (ok && comm->stage) {
    comm->stage_state = 1;
    ZCC_INFO(COLL, "comm %s: two-shot and board allreduces through every rank's %zu-byte "
             "staging region", comm->name, zcc_stage_bytes(comm->stage->chunk));
    return;
  }
  stage_free(comm);
  comm->stage_state = -1; /* for good: the same on every rank */
  ZCC_INFO(COLL, "comm %s: a rank could not map the peers' staging regions: allreduce "
           "runs without them (the ring, the gather at rank 0)", comm->name);
}
