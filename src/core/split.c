/*
 * zccCommSplit: ranks exchange (colour, key) over the parent's bootstrap;
 * the first rank of each colour creates a fresh rendezvous (new secret) and
 * sends its id to the other members, which then build the communicator.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "debug.h"

typedef struct split_entry {
  int32_t color, key, rank;
} split_entry_t;

static int by_key(const void *a, const void *b) {
  const split_entry_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

#define SPLIT_TAG_BASE 0x5000

zccResult_t zccCommSplit(zccComm_t comm, int color, int key, zccComm_t *newcomm,
                         zccConfig_t *config) {
  const char *fn = "zccCommSplit";
  if (!newcomm) return zcc_error(zccInvalidArgument, "%s: newcomm is NULL", fn);
  if (color < 0 && color != ZCC_SPLIT_NOCOLOR)
    return zcc_error(zccInvalidArgument,
                     "%s: color %d must be non-negative or ZCC_SPLIT_NOCOLOR", fn, color);
  ZCC_CHECK(zcc_comm_enter(comm, fn, 1));
  zccResult_t res = zccSuccess;
  zccConfig_t inherited = ZCC_CONFIG_INITIALIZER;
  if (!config) {
    inherited.deviceType = comm->device_type;
    inherited.timeoutMs = (int)(comm->timeout_ms > INT32_MAX ? INT32_MAX : comm->timeout_ms);
    config = &inherited;
  }
  int dt;
  int64_t to;
  const char *nm;
  ZCC_CHECK_GOTO(zcc_config_resolve(config, &dt, &to, &nm, fn), res, out);
  int n = comm->nranks;
  split_entry_t *all = calloc((size_t)n, sizeof(*all));
  if (!all) {
    res = zcc_error(zccSystemError, "%s: out of memory", fn);
    goto out;
  }
  all[comm->rank] = (split_entry_t){color, key, comm->rank};
  int64_t timeout = comm->timeout_ms > 0 ? comm->timeout_ms : 0;
  ZCC_CHECK_GOTO(zcc_bootstrap_allgather(comm->bootstrap, all, sizeof(*all), timeout), res,
                 free_all);
  int tag = SPLIT_TAG_BASE + comm->split_seq++;
  if (color == ZCC_SPLIT_NOCOLOR) {
    *newcomm = NULL;
    goto free_all;
  }
  split_entry_t *members = calloc((size_t)n, sizeof(*members));
  if (!members) {
    res = zcc_error(zccSystemError, "%s: out of memory", fn);
    goto free_all;
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (all[i].color == color) members[m++] = all[i];
  qsort(members, (size_t)m, sizeof(*members), by_key);
  int newrank = 0;
  while (members[newrank].rank != comm->rank) newrank++;
  zccUniqueId id;
  if (newrank == 0) {
    zcc_sockaddr_t addr = *zcc_bootstrap_addr(comm->bootstrap);
    zcc_sockaddr_set_port(&addr, 0);
    ZCC_CHECK_GOTO(zcc_bootstrap_create_root(&id, &addr, NULL, NULL), res, free_members);
    for (int i = 1; i < m; i++)
      ZCC_CHECK_GOTO(zcc_bootstrap_send(comm->bootstrap, members[i].rank, tag, &id,
                                        sizeof(id), timeout),
                     res, free_members);
  } else {
    ZCC_CHECK_GOTO(zcc_bootstrap_recv(comm->bootstrap, members[0].rank, tag, &id, sizeof(id),
                                      timeout),
                   res, free_members);
  }
  ZCC_INFO(INIT, "comm %s rank %d splits with color %d key %d into rank %d of %d", comm->name,
           comm->rank, color, key, newrank, m);
  res = zcc_comm_init(newcomm, m, &id, newrank, config, fn);
free_members:
  free(members);
free_all:
  free(all);
out:
  zcc_comm_leave(comm);
  return res;
}
