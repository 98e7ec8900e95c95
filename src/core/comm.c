/* The registry of live communicators, call references, and error state. */
#include "comm.h"
#include "devops.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "coll.h"
#include "planner.h"
#include "topo.h"
#include "trace.h"
#include "transport.h"

/* Live communicators: a small growable array under one lock. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zccComm **registry;
static size_t registry_len, registry_cap;

static int registry_find(const struct zccComm *comm) {
  for (size_t i = 0; i < registry_len; i++)
    if (registry[i] == comm) return (int)i;
  return -1;
}

void zcc_comm_register(struct zccComm *comm) {
  pthread_mutex_lock(&registry_lock);
  if (registry_len == registry_cap) {
    size_t cap = registry_cap ? registry_cap * 2 : 16;
    struct zccComm **grown = realloc(registry, cap * sizeof(*grown));
    if (!grown) abort(); /* a few pointers: out of memory here is fatal */
    registry = grown;
    registry_cap = cap;
  }
  registry[registry_len++] = comm;
  pthread_mutex_unlock(&registry_lock);
}

int zcc_comm_unregister(struct zccComm *comm) {
  pthread_mutex_lock(&registry_lock);
  int i = registry_find(comm);
  if (i >= 0) registry[i] = registry[--registry_len];
  pthread_mutex_unlock(&registry_lock);
  return i >= 0;
}

int zcc_comm_is_live(const struct zccComm *comm) {
  pthread_mutex_lock(&registry_lock);
  int found = registry_find(comm) >= 0;
  pthread_mutex_unlock(&registry_lock);
  return found;
}

zccResult_t zcc_comm_enter(struct zccComm *comm, const char *fn, int check_error) {
  if (!comm) return zcc_error(zccInvalidArgument, "%s: comm is NULL", fn);
  pthread_mutex_lock(&registry_lock);
  int found = registry_find(comm) >= 0;
  if (found) atomic_fetch_add(&comm->busy, 1);
  pthread_mutex_unlock(&registry_lock);
  if (!found)
    return zcc_error(zccInvalidUsage,
                     "%s: comm %p is not a live communicator (destroyed, aborted "
                     "or never created)",
                     fn, (void *)comm);
  zcc_log_rank = comm->rank;
  if (atomic_load(&comm->abort_flag)) {
    atomic_fetch_sub(&comm->busy, 1);
    return zcc_error(zccInvalidUsage, "%s: communicator is being aborted", fn);
  }
  if (check_error) {
    int err = atomic_load(&comm->async_error);
    if (err != zccSuccess) {
      atomic_fetch_sub(&comm->busy, 1);
      return zcc_error((zccResult_t)err,
                       "%s: communicator is in error state after an earlier "
                       "failure (%s); destroy or abort it",
                       fn, zccGetErrorString((zccResult_t)err));
    }
  }
  return zccSuccess;
}

void zcc_comm_leave(struct zccComm *comm) { atomic_fetch_sub(&comm->busy, 1); }

void zcc_comm_foreach(void (*fn)(struct zccComm *comm, void *arg), void *arg) {
  pthread_mutex_lock(&registry_lock);
  for (size_t i = 0; i < registry_len; i++) fn(registry[i], arg);
  pthread_mutex_unlock(&registry_lock);
}

void zcc_comm_set_error(struct zccComm *comm, zccResult_t res) {
  int expected = zccSuccess;
  if (atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res)) {
    ZCC_INFO(COLL, "communicator %s rank %d enters error state: %s", comm->name,
             comm->rank, zccGetErrorString(res));
    zcc_trace_on_error(comm, res); /* from the thread that found the error */
    zcc_transport_fail_all(comm);
  }
}

void zcc_comm_free(struct zccComm *comm) {
  if (!comm) return;
  zcc_plan_release_spare(comm);
  zcc_trace_comm_free(comm);
  if (comm->dev) comm->dev->free(comm);
  zcc_transport_free_all(comm);
  if (comm->bootstrap) zcc_bootstrap_free(comm->bootstrap);
  zcc_reg_t *r = comm->regs;
  while (r) {
    zcc_reg_t *next = r->next;
    free(r);
    r = next;
  }
  pthread_mutex_destroy(&comm->reg_lock);
  zcc_redop_free_all(comm);
  free(comm->peers);
  free(comm->ring_order);
  free(comm->select);
  zcc_planner_free(comm->planner);
  zcc_topo_free(comm->topo_own);
  zcc_topo_release(comm->topo);
  free(comm->conns);
  comm->magic = 0;
  free(comm);
}

/* Wait until no other call holds a reference (their waits see the abort flag). */
void zcc_comm_wait_idle(struct zccComm *comm) {
  while (atomic_load(&comm->busy) > 0) sched_yield();
}
