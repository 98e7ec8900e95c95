/*
 * Shared host memory (zccMemHostAlloc, and ordinary memory registered with
 * zccCommRegister) and the peers' view of it: see hostmem.h. Regions live in
 * a process-wide list; each communicator keeps the peer regions it mapped,
 * keyed by (peer, region number), until it is destroyed or the cache is full
 * (then the least recently used goes).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
  char *base;       /* where the region's bytes are in this process: a
                       zccMemHostAlloc region's mapping, or the first page of a
                       registered range */
  size_t bytes;
  char *view;       /* the memfd mapped whole (base, for zccMemHostAlloc) */
  /* Registered ordinary memory (refs > 0): the range registered, and its
     whole pages [ilo, ihi), which are now the memfd's own at the user's
     addresses. The edges, [base, ilo) and [ihi, base + bytes), stay the
     process's private pages: an op copies its bytes there into the view
     before the peers read them, and back out after they wrote them. */
  const char *ulo, *uhi;
  char *ilo, *ihi;
  int refs;
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
  r->view = base;
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
  while (*pp && ((*pp)->base != ptr || (*pp)->refs)) pp = &(*pp)->next;
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

/* The region that holds all of [c, c + len) (regions_lock held): for
   registered ordinary memory, inside the range registered. */
static region_t *region_holding(const char *c, size_t len) {
  for (region_t *r = regions; r; r = r->next) {
    const char *lo = r->refs ? r->ulo : r->base, *hi = r->refs ? r->uhi : r->base + r->bytes;
    if (c >= lo && c <= hi && len <= (size_t)(hi - c)) return r;
  }
  return NULL;
}

int zcc_hostmem_find(const void *p, size_t len, zcc_hostmem_ref_t *ref) {
  memset(ref, 0, sizeof(*ref));
  ref->fd = -1;
  const char *c = p;
  pthread_mutex_lock(&regions_lock);
  region_t *r = region_holding(c, len);
  if (r) {
    ref->fd = r->fd;
    ref->id = r->id;
    ref->ino = r->ino;
    ref->bytes = r->bytes;
    ref->off = (uint64_t)(c - r->base);
  }
  pthread_mutex_unlock(&regions_lock);
  return ref->fd >= 0;
}

/* Copies the bytes of [c, c + len) that lie in r's private edges into r's
   view (in) or out of it. */
static void copy_edges(const region_t *r, char *c, size_t len, int in) {
  char *e = c + len;
  char *spans[2][2] = {{c, e < r->ilo ? e : r->ilo}, {c > r->ihi ? c : r->ihi, e}};
  for (int i = 0; i < 2; i++) {
    char *lo = spans[i][0], *hi = spans[i][1];
    if (lo >= hi) continue;
    char *v = r->view + (lo - r->base);
    if (in) memcpy(v, lo, (size_t)(hi - lo));
    else memcpy(lo, v, (size_t)(hi - lo));
  }
}

char *zcc_hostmem_local(const void *p, size_t len, int copy_in) {
  char *c = (char *)p, *out = NULL;
  pthread_mutex_lock(&regions_lock);
  region_t *r = region_holding(c, len);
  if (r) {
    out = r->view + (c - r->base);
    if (r->refs && copy_in) copy_edges(r, c, len, 1);
  }
  pthread_mutex_unlock(&regions_lock);
  return out;
}

void zcc_hostmem_copy_out(void *p, size_t len) {
  char *c = p;
  pthread_mutex_lock(&regions_lock);
  region_t *r = region_holding(c, len);
  if (r && r->refs) copy_edges(r, c, len, 0);
  pthread_mutex_unlock(&regions_lock);
}

/*
 * Whether every page of [lo, hi) is mapped, and each mapping is of the kind
 * asked: ino 0, private anonymous read-write memory (the heap, malloc's own
 * mappings); else the memfd of that inode. 1: yes; 0: no, *why says what
 * is there; -1: /proc/self/maps cannot be read.
 */
static int maps_cover(const char *lo, const char *hi, uint64_t ino, const char **why) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) {
    *why = "/proc/self/maps cannot be read";
    return -1;
  }
  uintptr_t cur = (uintptr_t)lo, end = (uintptr_t)hi;
  char line[512];
  int ok = 1;
  *why = "part of it is not mapped";
  while (cur < end && fgets(line, sizeof(line), f)) {
    uintptr_t a, b;
    unsigned long long off, node;
    char perms[8];
    unsigned dmaj, dmin;
    int at = 0;
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %llu %n", &a, &b, perms, &off,
               &dmaj, &dmin, &node, &at) < 7)
      continue;
    if (b <= cur) continue;
    if (a > cur) {
      ok = 0; /* a hole */
      break;
    }
    const char *path = line + at;
    int anon = node == 0 && (path[0] == '\n' || path[0] == 0 || strncmp(path, "[heap]", 6) == 0 ||
                             strncmp(path, "[anon:", 6) == 0);
    if (strncmp(perms, "rw", 2) != 0) {
      *why = "part of it is not readable and writable";
      ok = 0;
      break;
    }
    if (ino ? node != ino : !anon || perms[3] != 'p') {
      *why = ino ? "part of it is no longer the registration's memory"
                 : "part of it is a file or shared mapping, not private anonymous memory";
      ok = 0;
      break;
    }
    cur = b;
  }
  fclose(f);
  return ok && cur >= end;
}

/* Frees a registered range's region (regions_lock held, r unlinked): its
   pages given back to the range as private memory with their bytes, where
   the range still holds them. */
static void region_unadopt(region_t *r) {
  size_t len = (size_t)(r->ihi - r->ilo);
  const char *why = NULL;
  int intact = maps_cover(r->ilo, r->ihi, r->ino, &why);
  void *fresh = MAP_FAILED;
  if (intact == 1)
    fresh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh != MAP_FAILED) {
    memcpy(fresh, r->view + (r->ilo - r->base), len);
    /* Moves the filled pages over the range at once: no moment where it
       reads anything but its bytes. */
    if (mremap(fresh, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, r->ilo) == MAP_FAILED) {
      ZCC_WARN("zccCommDeregister: cannot give %p (%zu bytes) back its private pages: %s; "
               "it stays shared memory", (void *)r->ilo, len, strerror(errno));
      munmap(fresh, len);
      return; /* the view and the memfd stay: the range still maps them */
    }
  } else if (intact == 1) {
    ZCC_WARN("zccCommDeregister: cannot allocate %zu bytes to give %p back its private "
             "pages: %s; it stays shared memory", len, (void *)r->ilo, strerror(errno));
    return;
  } else {
    ZCC_WARN("zccCommDeregister: the registered range at %p (%zu bytes) changed since it was "
             "registered (%s; freed before zccCommDeregister?): left as it is", (void *)r->ulo,
             (size_t)(r->uhi - r->ulo), why);
  }
  munmap(r->view, r->bytes);
  close(r->fd);
  free(r);
}

zccResult_t zcc_hostmem_register(void *buf, size_t len, void **out) {
  *out = NULL;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), p = (uintptr_t)buf;
  if (page == 0 || page == (uintptr_t)-1) page = 4096;
  char *ubase = (char *)(p / page * page), *uend = (char *)((p + len + page - 1) / page * page);
  char *ilo = (char *)((p + page - 1) / page * page), *ihi = (char *)((p + len) / page * page);
  zccResult_t res = zccSuccess;
  const char *why = NULL;
  pthread_mutex_lock(&regions_lock);
  region_t *have = region_holding(buf, len);
  if (have) {
    if (have->refs) {
      have->refs++;
      *out = have;
    }
    goto unlock; /* zccMemHostAlloc memory, or inside a registration already */
  }
  if (ilo >= ihi) {
    why = "it holds no whole page";
    goto unlock;
  }
  for (region_t *r = regions; r; r = r->next) {
    char *lo = r->refs ? r->ilo : r->base, *hi = r->refs ? r->ihi : r->base + r->bytes;
    if (lo < ihi && ilo < hi) {
      why = "it overlaps another registration";
      goto unlock;
    }
  }
  int cover = maps_cover(ilo, ihi, 0, &why);
  if (cover == 0 && strcmp(why, "part of it is not mapped") == 0) {
    res = zcc_error(zccInvalidArgument, "zccCommRegister: %p (%zu bytes): %s", buf, len, why);
    goto unlock;
  }
  if (cover != 1) goto unlock;
  region_t *r = calloc(1, sizeof(*r));
  int fd = r ? memfd_create("zcc-registered", MFD_CLOEXEC) : -1;
  struct stat st;
  size_t bytes = (size_t)(uend - ubase);
  char *view = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0 && fstat(fd, &st) == 0)
    view = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) {
    res = zcc_error(zccSystemError, "zccCommRegister: cannot make %zu bytes of shared memory "
                    "for %p: %s", bytes, buf, r ? strerror(errno) : "out of memory");
    if (fd >= 0) close(fd);
    free(r);
    goto unlock;
  }
  size_t off = (size_t)(ilo - ubase), ilen = (size_t)(ihi - ilo);
  memcpy(view + off, ilo, ilen);
  if (mmap(ilo, ilen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)off) !=
      (void *)ilo) {
    res = zcc_error(zccSystemError, "zccCommRegister: cannot map shared memory over %p (%zu "
                    "bytes): %s", (void *)ilo, ilen, strerror(errno));
    munmap(view, bytes);
    close(fd);
    free(r);
    goto unlock;
  }
  r->base = ubase;
  r->bytes = bytes;
  r->view = view;
  r->ulo = buf;
  r->uhi = (char *)buf + len;
  r->ilo = ilo;
  r->ihi = ihi;
  r->refs = 1;
  r->fd = fd;
  r->ino = (uint64_t)st.st_ino;
  r->id = next_id++;
  r->next = regions;
  regions = r;
  *out = r;
  ZCC_INFO(INIT, "zccCommRegister: %p (%zu bytes) is shared memory now, pages %p-%p (region "
           "%llu)", buf, len, (void *)ilo, (void *)ihi, (unsigned long long)r->id);
unlock:
  pthread_mutex_unlock(&regions_lock);
  if (why && res == zccSuccess)
    ZCC_INFO(INIT, "zccCommRegister: %p (%zu bytes) stays the process's own memory (%s): "
             "collectives on it are staged", buf, len, why);
  return res;
}

void zcc_hostmem_unregister(void *region) {
  if (!region) return;
  pthread_mutex_lock(&regions_lock);
  region_t *r = region;
  if (--r->refs == 0) {
    region_t **pp = &regions;
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    region_unadopt(r);
  }
  pthread_mutex_unlock(&regions_lock);
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
