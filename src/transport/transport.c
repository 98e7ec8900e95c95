/* Choosing and connecting a transport for every pair of ranks. */
#include "transport.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "reduce.h"

ZCC_PARAM_INT(connect_timeout_ms, "CONNECT_TIMEOUT", 60000,
              "ms allowed for connecting the ranks' transports during init")

int64_t zcc_transport_connect_timeout_ms(void) { return zcc_param_connect_timeout_ms(); }

/* Priority order: the first that can connect a pair wins (host communicators
   take the host entries, GPU communicators those with a GPU face). */
static const zcc_transport_ops_t *const transports[] = {
#ifdef ZCC_HAVE_CUDA
    &zcc_transport_p2p,
#endif
    &zcc_transport_shm,
    &zcc_transport_net,
    &zcc_transport_socket,
};
#define NTRANSPORTS ((int)(sizeof(transports) / sizeof(transports[0])))
_Static_assert(NTRANSPORTS <= ZCC_MAX_TRANSPORTS, "comm->transport_state has a slot per transport");

void **zcc_transport_slot(struct zccComm *comm, const zcc_transport_ops_t *ops) {
  for (int i = 0; i < ZCC_MAX_TRANSPORTS; i++) {
    if (comm->transport_state[i].ops == ops) return &comm->transport_state[i].state;
    if (!comm->transport_state[i].ops) {
      comm->transport_state[i].ops = ops;
      return &comm->transport_state[i].state;
    }
  }
  return NULL; /* cannot happen: one slot per entry of transports[] */
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t bytes) {
  const unsigned char *p = data;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static uint64_t ns_inode(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Host identity: host name, boot id and network namespace. */
static void fill_self(struct zccComm *comm, zcc_peer_info_t *self) {
  memset(self, 0, sizeof(*self));
  gethostname(self->hostname, sizeof(self->hostname) - 1);
  uint64_t h = fnv1a(0xcbf29ce484222325ULL, self->hostname, strlen(self->hostname));
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof(boot), f)) boot[0] = '\0';
    fclose(f);
  }
  h = fnv1a(h, boot, strlen(boot));
  uint64_t netns = ns_inode("/proc/self/ns/net");
  h = fnv1a(h, &netns, sizeof(netns));
  self->host_hash = h;
  self->pidns = ns_inode("/proc/self/ns/pid");
  self->pid = (int32_t)getpid();
  self->rank = comm->rank;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < 1024 && c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set)) self->cpus[c / 64] |= 1ULL << (c % 64);
  }
  self->device = comm->device;
  memcpy(self->gpu_bus_id, comm->gpu_bus_id, sizeof(self->gpu_bus_id));
}

static int serves(const zcc_transport_ops_t *ops, int gpu) {
  return gpu ? ops->gpu != NULL : ops->progress != NULL;
}

static zccResult_t new_conn(struct zccComm *comm, int j, const zcc_transport_ops_t *ops) {
  zcc_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return zcc_error(zccSystemError, "init: out of memory");
  c->ops = ops;
  c->comm = comm;
  c->peer = j;
  comm->conns[j] = c;
  return zccSuccess;
}

/* "shm: why; socket: why" for the pair (me, j). */
static void refusals(struct zccComm *comm, int j, int gpu, char *why, size_t len) {
  size_t o = 0;
  why[0] = '\0';
  for (int t = 0; t < NTRANSPORTS; t++) {
    if (!serves(transports[t], gpu)) continue;
    char w[400] = "cannot";
    if (transports[t]->can_connect(comm, &comm->peers[comm->rank], &comm->peers[j]))
      snprintf(w, sizeof(w), "connects this pair, but not every pair of the communicator");
    else if (transports[t]->refusal)
      transports[t]->refusal(comm, &comm->peers[comm->rank], &comm->peers[j], w, sizeof(w));
    o += (size_t)snprintf(why + o, o < len ? len - o : 0, "%s%s: %s", o ? "; " : "",
                          transports[t]->name, w);
  }
  if (!o) snprintf(why, len, "none is built");
}

/* Host communicators: a connection to every peer, through the first entry that can. */
static zccResult_t pick_all(struct zccComm *comm) {
  int n = comm->nranks, me = comm->rank;
  const zcc_peer_info_t *self = &comm->peers[me];
  for (int j = 0; j < n; j++) {
    if (j == me) continue;
    const zcc_transport_ops_t *ops = NULL;
    for (int t = 0; t < NTRANSPORTS && !ops; t++)
      if (serves(transports[t], 0) && transports[t]->can_connect(comm, self, &comm->peers[j]))
        ops = transports[t];
    if (!ops) {
      char why[600];
      refusals(comm, j, 0, why, sizeof(why));
      return zcc_error(zccSystemError, "comm %s: no transport can connect rank %d to rank %d (%s)",
                       comm->name, me, j, why);
    }
    ZCC_CHECK(new_conn(comm, j, ops));
  }
  return zccSuccess;
}

/* The entry connects a and b: both sides said so (ok: every rank's answers). */
static int pair_ok(const uint8_t *ok, int n, int a, int b, int t) {
  size_t row = (size_t)n * NTRANSPORTS;
  return ok[a * row + (size_t)b * NTRANSPORTS + t] && ok[b * row + (size_t)a * NTRANSPORTS + t];
}

/* Entry t connects every pair (same_host: of one host; cross: of two); else
   the first pair it does not, in *bad_a, *bad_b. */
static int connects(const struct zccComm *comm, const uint8_t *ok, int t, int same_host,
                    int cross, int *bad_a, int *bad_b) {
  int n = comm->nranks;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      int same = comm->peers[a].host_hash == comm->peers[b].host_hash;
      if ((same && !same_host) || (!same && !cross) || pair_ok(ok, n, a, b, t)) continue;
      if (*bad_a < 0) {
        *bad_a = a;
        *bad_b = b;
      }
      return 0;
    }
  return 1;
}

zccResult_t zcc_transport_pick_gpu(struct zccComm *comm, const zcc_transport_ops_t **out) {
  int n = comm->nranks, me = comm->rank;
  const zcc_peer_info_t *self = &comm->peers[me];
  /* Each rank says which entries connect it to each peer; the answers are
     exchanged, so every rank picks alike (transport.h). */
  size_t row = (size_t)n * NTRANSPORTS;
  uint8_t *ok = calloc((size_t)n, row);
  if (!ok) return zcc_error(zccSystemError, "init: out of memory");
  for (int j = 0; j < n; j++)
    for (int t = 0; t < NTRANSPORTS; t++)
      ok[me * row + (size_t)j * NTRANSPORTS + t] =
          j == me || (serves(transports[t], 1) && transports[t]->can_connect(comm, self, &comm->peers[j]));
  zccResult_t res = n > 1 ? zcc_bootstrap_allgather(comm->bootstrap, ok, row,
                                                    zcc_param_connect_timeout_ms())
                          : zccSuccess;
  if (res != zccSuccess) {
    free(ok);
    return res;
  }
  int win = -1, proxy = -1, all = 0, bad_a = -1, bad_b = -1;
  for (int t = 0; t < NTRANSPORTS && win < 0; t++)
    if (serves(transports[t], 1) && !transports[t]->gpu->conn_only &&
        connects(comm, ok, t, 1, 0, &bad_a, &bad_b))
      win = t;
  all = win >= 0 && connects(comm, ok, win, 1, 1, &bad_a, &bad_b);
  for (int t = 0; t < NTRANSPORTS && !all && proxy < 0; t++)
    if (serves(transports[t], 1) && transports[t]->gpu->conn_only &&
        connects(comm, ok, t, win < 0, 1, &bad_a, &bad_b))
      proxy = t;
  if (proxy >= 0 && win < 0) win = proxy; /* it connects every pair and places the window */
  free(ok);
  if (win < 0 || (!all && proxy < 0)) {
    /* name a pair this rank is in when it has one */
    int j = bad_a == me ? bad_b : bad_b == me ? bad_a : -1;
    int elsewhere = j < 0;
    for (int q = 0; q < n && j < 0; q++)
      if (q != me) j = q;
    char why[600];
    refusals(comm, j, 1, why, sizeof(why));
    if (elsewhere)
      return zcc_error(zccInvalidUsage,
                       "comm %s: no transport can connect GPU rank %d to rank %d, which every "
                       "pair needs (here, to rank %d: %s)", comm->name, bad_a, bad_b, j, why);
    return zcc_error(zccInvalidUsage,
                     "comm %s: no transport can connect GPU rank %d to rank %d (%s)",
                     comm->name, me, j, why);
  }
  for (int j = 0; j < n; j++) {
    if (j == me) continue;
    int same = comm->peers[j].host_hash == self->host_hash;
    int t = all || (same && win != proxy) ? win : proxy;
    ZCC_CHECK(new_conn(comm, j, transports[t]));
  }
  /* What comm_setup made for an entry no pair uses goes now (a listener). */
  for (int t = 0; t < NTRANSPORTS; t++)
    if (t != win && t != proxy && serves(transports[t], 1) && transports[t]->gpu->unused)
      transports[t]->gpu->unused(comm);
  if (proxy >= 0 && all == 0 && win != proxy)
    ZCC_INFO(INIT, "comm %s rank %d: %s between the ranks of a host, %s across hosts",
             comm->name, me, transports[win]->name, transports[proxy]->name);
  *out = transports[win];
  return zccSuccess;
}

zccResult_t zcc_transport_attach_gpu(struct zccComm *comm) {
  int n = comm->nranks, me = comm->rank;
  if (n == 1) return zccSuccess;
  /* One blob per ordered pair: rank r's row holds what it sends each peer
     (each connection's face fills its own). The stride is the widest of
     every GPU face, the same on every rank: a rank's own connections may
     use fewer kinds than another's (the one rank of a host reaches every
     peer through the network; its host's peers some over p2p). */
  size_t bb = 8;
  for (int t = 0; t < NTRANSPORTS; t++)
    if (serves(transports[t], 1) && transports[t]->gpu->blob_bytes > bb)
      bb = transports[t]->gpu->blob_bytes;
  bb = (bb + 7) / 8 * 8;
  char *blobs = calloc((size_t)n * (size_t)n, bb);
  if (!blobs) return zcc_error(zccSystemError, "init: out of memory");
  zccResult_t res = zccSuccess;
  for (int j = 0; j < n && res == zccSuccess; j++) {
    zcc_conn_t *c = comm->conns[j];
    if (c && c->ops->gpu->blob) res = c->ops->gpu->blob(c, blobs + ((size_t)me * n + j) * bb);
  }
  /* Every rank joins the exchange even when its own blob failed, so that
     none waits for it: the failure then travels as an empty row. */
  int64_t to = zcc_param_connect_timeout_ms();
  zccResult_t xres = zcc_bootstrap_allgather(comm->bootstrap, blobs, (size_t)n * bb, to);
  if (res == zccSuccess) res = xres;
  for (int j = 0; j < n && res == zccSuccess; j++) {
    zcc_conn_t *c = comm->conns[j];
    if (c && c->ops->gpu->attach) res = c->ops->gpu->attach(c, blobs + ((size_t)j * n + me) * bb);
  }
  free(blobs);
  if (res != zccSuccess) return res;
  ZCC_CHECK(zcc_bootstrap_barrier(comm->bootstrap, to));
  for (int t = 0; t < NTRANSPORTS; t++) {
    int used = 0;
    for (int j = 0; j < n && !used; j++) used = comm->conns[j] && comm->conns[j]->ops == transports[t];
    if (used && transports[t]->gpu->ready) transports[t]->gpu->ready(comm);
  }
  for (int j = 0; j < n; j++)
    if (comm->conns[j])
      ZCC_INFO(INIT, "comm %s rank %d -> rank %d (GPU %s on %s, pid %d) via %s", comm->name, me,
               j, comm->peers[j].gpu_bus_id, comm->peers[j].hostname, comm->peers[j].pid,
               comm->conns[j]->ops->name);
  return zccSuccess;
}

zccResult_t zcc_transport_start_gpu(struct zccComm *comm) {
  for (int t = 0; t < NTRANSPORTS; t++) {
    if (!serves(transports[t], 1) || !transports[t]->gpu->conn_start) continue;
    int used = 0;
    for (int j = 0; j < comm->nranks && !used; j++)
      used = comm->conns[j] && comm->conns[j]->ops == transports[t];
    if (used) ZCC_CHECK(transports[t]->gpu->conn_start(comm));
  }
  return zccSuccess;
}

zccResult_t zcc_transport_connect_all(struct zccComm *comm) {
  int n = comm->nranks, me = comm->rank;
  int64_t to = zcc_param_connect_timeout_ms();
  comm->peers = calloc((size_t)n, sizeof(*comm->peers));
  comm->conns = calloc((size_t)n, sizeof(*comm->conns));
  if (!comm->peers || !comm->conns) return zcc_error(zccSystemError, "init: out of memory");
  zcc_peer_info_t *self = &comm->peers[me];
  fill_self(comm, self);
  int gpu = comm->device >= 0;
  /* per-communicator set-up of the entries that serve this kind of
     communicator (a listener's address travels in the peer info) */
  for (int t = 0; t < NTRANSPORTS; t++)
    if (serves(transports[t], gpu) && transports[t]->comm_setup)
      ZCC_CHECK(transports[t]->comm_setup(comm, self));
  ZCC_CHECK(zcc_bootstrap_allgather(comm->bootstrap, comm->peers, sizeof(*comm->peers), to));
  for (int j = 0; j < n; j++)
    if (comm->peers[j].rank != j)
      return zcc_error(zccInternalError, "init: peer info of rank %d claims rank %d", j,
                       comm->peers[j].rank);
  comm->nnodes = 0;
  for (int j = 0; j < n; j++) {
    int first = 1;
    for (int k = 0; k < j && first; k++)
      if (comm->peers[k].host_hash == comm->peers[j].host_hash) first = 0;
    comm->nnodes += first;
  }
  /* GPU communicators connect in their own set-up (zcc_transport_pick_gpu). */
  if (gpu) return zccSuccess;
  ZCC_CHECK(pick_all(comm));
  for (int phase = 0; phase < ZCC_CONNECT_PHASES; phase++) {
    for (int j = 0; j < n; j++)
      if (comm->conns[j]) ZCC_CHECK(comm->conns[j]->ops->connect(comm->conns[j], phase));
    if (n > 1) ZCC_CHECK(zcc_bootstrap_barrier(comm->bootstrap, to));
  }
  for (int j = 0; j < n; j++)
    if (comm->conns[j])
      ZCC_INFO(INIT, "comm %s rank %d -> rank %d (%s, pid %d) via %s", comm->name, me, j,
               comm->peers[j].hostname, comm->peers[j].pid, comm->conns[j]->ops->name);
  return zccSuccess;
}

void zcc_transport_fail_all(struct zccComm *comm) {
  if (!comm->conns) return;
  for (int j = 0; j < comm->nranks; j++) {
    zcc_conn_t *c = comm->conns[j];
    if (c && c->priv && c->ops->fail && comm->device < 0) c->ops->fail(c);
  }
}

void zcc_transport_free_all(struct zccComm *comm) {
  if (comm->conns) {
    for (int j = 0; j < comm->nranks; j++) {
      zcc_conn_t *c = comm->conns[j];
      if (!c) continue;
      if (comm->device >= 0) {
        if (c->ops->gpu && c->ops->gpu->free) c->ops->gpu->free(c);
      } else if (c->ops->free) {
        c->ops->free(c);
      }
      free(c);
      comm->conns[j] = NULL;
    }
  }
  for (int t = 0; t < NTRANSPORTS; t++) {
    if (transports[t]->comm_free) transports[t]->comm_free(comm);
    if (transports[t]->gpu && transports[t]->gpu->win_free) transports[t]->gpu->win_free(comm);
  }
  memset(comm->transport_state, 0, sizeof(comm->transport_state));
}

void zcc_xfer_reduce(const zcc_xfer_t *x, void *dst, void *dst2, int dst2_nt, const void *in,
                     size_t n) {
  const char *own = (const char *)x->red + x->done;
  const void *a = x->in_first ? in : own, *b = x->in_first ? own : in;
  int nt2 = dst2 && dst2_nt;
  if (x->nt && nt2) zcc_reduce2_nt(dst, dst2, a, b, n, x->type, x->op);
  else if (x->nt) zcc_reduce2_ntdst(dst, dst2, a, b, n, x->type, x->op);
  else if (nt2) zcc_reduce2_ntdst2(dst, dst2, a, b, n, x->type, x->op);
  else zcc_reduce2(dst, dst2, a, b, n, x->type, x->op);
}
