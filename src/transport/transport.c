/* Choosing and connecting a transport for every pair of ranks. */
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"

ZCC_PARAM_INT(connect_timeout_ms, "CONNECT_TIMEOUT", 60000,
              "ms allowed for connecting the ranks' transports during init")

int64_t zcc_transport_connect_timeout_ms(void) { return zcc_param_connect_timeout_ms(); }

/* Priority order: the first that can connect a pair wins. */
static const zcc_transport_ops_t *const transports[] = {
    &zcc_transport_shm,
    &zcc_transport_socket,
};
#define NTRANSPORTS ((int)(sizeof(transports) / sizeof(transports[0])))

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
  self->device = comm->device;
  memcpy(self->gpu_bus_id, comm->gpu_bus_id, sizeof(self->gpu_bus_id));
}

zccResult_t zcc_transport_connect_all(struct zccComm *comm) {
  int n = comm->nranks, me = comm->rank;
  int64_t to = zcc_param_connect_timeout_ms();
  comm->peers = calloc((size_t)n, sizeof(*comm->peers));
  comm->conns = calloc((size_t)n, sizeof(*comm->conns));
  if (!comm->peers || !comm->conns) return zcc_error(zccSystemError, "init: out of memory");
  zcc_peer_info_t *self = &comm->peers[me];
  fill_self(comm, self);
  if (comm->device < 0)
    for (int t = 0; t < NTRANSPORTS; t++)
      if (transports[t]->comm_setup) ZCC_CHECK(transports[t]->comm_setup(comm, self));
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
  /* GPU communicators move data through the p2p transport (gpu.h) only. */
  if (comm->device >= 0) return zccSuccess;
  for (int j = 0; j < n; j++) {
    if (j == me) continue;
    const zcc_transport_ops_t *ops = NULL;
    for (int t = 0; t < NTRANSPORTS && !ops; t++)
      if (transports[t]->can_connect(comm, self, &comm->peers[j])) ops = transports[t];
    if (!ops)
      return zcc_error(zccSystemError, "init: no transport can connect rank %d to rank %d",
                       me, j);
    zcc_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return zcc_error(zccSystemError, "init: out of memory");
    c->ops = ops;
    c->comm = comm;
    c->peer = j;
    comm->conns[j] = c;
  }
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
    if (c && c->priv && c->ops->fail) c->ops->fail(c);
  }
}

void zcc_transport_free_all(struct zccComm *comm) {
  if (comm->conns) {
    for (int j = 0; j < comm->nranks; j++) {
      zcc_conn_t *c = comm->conns[j];
      if (!c) continue;
      if (c->ops->free) c->ops->free(c);
      free(c);
      comm->conns[j] = NULL;
    }
  }
  for (int t = 0; t < NTRANSPORTS; t++)
    if (transports[t]->comm_free) transports[t]->comm_free(comm);
}
