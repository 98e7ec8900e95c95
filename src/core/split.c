/*
 * zccCommSplit: ranks exchange (colour, key) over the parent's bootstrap;
 * the first rank of each colour creates a fresh rendezvous (new secret) and
 * sends its id to the other members, which then build the communicator.
 * While they do, a watcher keeps an eye on the members' parent bootstrap
 * connections: a member that leaves (its exchange failed, it was aborted
 * or it died) fails the others' rendezvous at once, not at
 * ZCC_INIT_TIMEOUT.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm.h"
#include "debug.h"

typedef struct split_entry {
  int32_t color, key, rank;
  int32_t status; /* zccSuccess, or why this rank's arguments are refused */
} split_entry_t;

/* What the first rank of a colour sends the others. */
typedef struct split_id {
  int32_t status; /* zccSuccess, or why it could not make the rendezvous */
  int32_t pad;
  zccUniqueId id;
} split_id_t;

static int by_key(const void *a, const void *b) {
  const split_entry_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

#define SPLIT_TAG_BASE 0x5000

typedef struct {
  zcc_bootstrap_t *parent;
  const split_entry_t *members;
  int m, me;
  atomic_int stop; /* set by the watcher (a member left) */
  atomic_int done; /* set by the split (init returned) */
  int gone;        /* the parent rank that left */
} split_watch_t;

static void *split_watch(void *arg) {
  split_watch_t *w = arg;
  struct timespec ts = {0, 5 * 1000 * 1000};
  while (!atomic_load(&w->done)) {
    for (int i = 0; i < w->m; i++) {
      int r = w->members[i].rank;
      if (r == w->me || zcc_bootstrap_peer_check(w->parent, r) == zccSuccess) continue;
      w->gone = r;
      atomic_store(&w->stop, 1);
      return NULL;
    }
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/*
 * Arguments are checked on every rank, and every rank takes part in the
 * exchange even when its own are bad, so that all of them fail at once
 * (rather than wait for the one that left) and the parent stays in step.
 */
zccResult_t zccCommSplit(zccComm_t comm, int color, int key, zccComm_t *newcomm,
                         zccConfig_t *config) {
  const char *fn = "zccCommSplit";
  ZCC_CHECK(zcc_comm_enter_op(comm, fn));
  zccResult_t res = zccSuccess, mine = zccSuccess;
  char why[256] = "";
  zccConfig_t inherited = ZCC_CONFIG_INITIALIZER;
  if (!config) {
    inherited.deviceType = comm->device_type;
    inherited.timeoutMs = (int)(comm->timeout_ms > INT32_MAX ? INT32_MAX : comm->timeout_ms);
    config = &inherited;
  }
  int dt;
  int64_t to;
  const char *nm;
  if (!newcomm) {
    mine = zcc_error(zccInvalidArgument, "%s: newcomm is NULL", fn);
  } else if (color < 0 && color != ZCC_SPLIT_NOCOLOR) {
    mine = zcc_error(zccInvalidArgument,
                     "%s: color %d must be non-negative or ZCC_SPLIT_NOCOLOR", fn, color);
  } else {
    mine = zcc_config_resolve(config, &dt, &to, &nm, fn);
  }
  if (mine != zccSuccess) snprintf(why, sizeof(why), "%s", zcc_last_error());
  int n = comm->nranks;
  split_entry_t *all = calloc((size_t)n, sizeof(*all));
  if (!all) {
    res = zcc_error(zccSystemError, "%s: out of memory", fn);
    goto out;
  }
  all[comm->rank] = (split_entry_t){color, key, comm->rank, (int32_t)mine};
  int64_t timeout = comm->timeout_ms > 0 ? comm->timeout_ms : 0;
  res = zcc_bootstrap_allgather(comm->bootstrap, all, sizeof(*all), timeout);
  if (res != zccSuccess) {
    /* The parent's ranks are out of step now: it cannot be used again. */
    zcc_comm_set_error(comm, res);
    goto free_all;
  }
  int tag = SPLIT_TAG_BASE + comm->split_seq++;
  if (mine != zccSuccess) {
    res = zcc_error(mine, "%s", why);
    goto free_all;
  }
  for (int i = 0; i < n; i++)
    if (all[i].status != zccSuccess) {
      res = zcc_error(zccInvalidArgument,
                      "%s: rank %d passed invalid arguments (color %d, key %d: %s); no "
                      "communicator was made on any rank", fn, i, (int)all[i].color,
                      (int)all[i].key, zccGetErrorString((zccResult_t)all[i].status));
      goto free_all;
    }
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
  split_id_t sid;
  memset(&sid, 0, sizeof(sid));
  if (newrank == 0) {
    zcc_sockaddr_t addr = *zcc_bootstrap_addr(comm->bootstrap);
    zcc_sockaddr_set_port(&addr, 0);
    res = zcc_bootstrap_create_root(&sid.id, &addr, NULL, NULL);
    sid.status = (int32_t)res;
    char cause[256];
    snprintf(cause, sizeof(cause), "%s", zcc_last_error());
    /* The members hear of a failure too, instead of waiting for an id. */
    for (int i = 1; i < m; i++) {
      zccResult_t sres = zcc_bootstrap_send(comm->bootstrap, members[i].rank, tag, &sid,
                                            sizeof(sid), timeout);
      if (sres != zccSuccess && res == zccSuccess) res = sres;
    }
    if (res != zccSuccess) {
      if (sid.status != zccSuccess) zcc_restore_last_error(cause);
      goto free_members;
    }
  } else {
    ZCC_CHECK_GOTO(zcc_bootstrap_recv(comm->bootstrap, members[0].rank, tag, &sid,
                                      sizeof(sid), timeout),
                   res, free_members);
    if (sid.status != zccSuccess) {
      res = zcc_error((zccResult_t)sid.status,
                      "%s: rank %d (rank 0 of colour %d) could not start the new "
                      "communicator's rendezvous", fn, members[0].rank, color);
      goto free_members;
    }
  }
  ZCC_INFO(INIT, "comm %s rank %d splits with color %d key %d into rank %d of %d", comm->name,
           comm->rank, color, key, newrank, m);
  split_watch_t w = {comm->bootstrap, members, m, comm->rank, 0, 0, -1};
  pthread_t wt;
  int watching = m > 1 && pthread_create(&wt, NULL, split_watch, &w) == 0;
  res = zcc_comm_init_watched(newcomm, m, &sid.id, newrank, config, fn, watching ? &w.stop : NULL);
  if (watching) {
    atomic_store(&w.done, 1);
    pthread_join(wt, NULL);
  }
  if (res != zccSuccess && atomic_load(&w.stop))
    res = zcc_error(zccRemoteError, "%s: rank %d of the parent (a member of colour %d) left "
                    "while the new communicator was being made: %s", fn, w.gone, color,
                    zcc_last_error());
free_members:
  free(members);
free_all:
  free(all);
out:
  zcc_comm_leave_op(comm);
  return res;
}
