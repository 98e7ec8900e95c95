/* The registry of live communicators, call references, and error state. */
#include "comm.h"
#include "devops.h"
#include "opsig.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "coll.h"
#include "hostmem.h"
#include "planner.h"
#include "sigboard.h"
#include "stores.h"
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

zccResult_t zcc_comm_enter(struct zccComm *comm, const char *fn, int flags) {
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
  if (!(flags & ZCC_ENTER_DURING_INIT) &&
      atomic_load_explicit(&comm->init_pending, memory_order_acquire)) {
    atomic_fetch_sub(&comm->busy, 1);
    return zcc_error(zccInProgress,
                     "%s: the communicator (rank %d of %d) is still being initialised "
                     "(blocking=0): poll zccCommGetAsyncError until it is not "
                     "zccInProgress", fn, comm->rank, comm->nranks);
  }
  if (flags & ZCC_ENTER_CHECK_ERROR) {
    int err = atomic_load_explicit(&comm->async_error, memory_order_acquire);
    if (err != zccSuccess) {
      atomic_fetch_sub(&comm->busy, 1);
      return zcc_error((zccResult_t)err,
                       "%s: communicator %s is in error state since an earlier failure "
                       "(%s: %s); destroy or abort it",
                       fn, comm->name, zccGetErrorString((zccResult_t)err), comm->error_msg);
    }
  }
  return zccSuccess;
}

/* A token for the calling thread: the address of a thread-local. */
static _Thread_local char thread_token;
static uintptr_t self_token(void) { return (uintptr_t)&thread_token; }

int zcc_comm_held_here(const struct zccComm *comm) {
  return atomic_load_explicit(&comm->owner, memory_order_acquire) == self_token();
}

zccResult_t zcc_comm_enter_op(struct zccComm *comm, const char *fn) {
  ZCC_CHECK(zcc_comm_enter(comm, fn, ZCC_ENTER_CHECK_ERROR));
  uintptr_t me = self_token(), none = 0;
  if (atomic_load_explicit(&comm->owner, memory_order_relaxed) == me) {
    comm->owner_depth++;
    return zccSuccess;
  }
  if (!atomic_compare_exchange_strong(&comm->owner, &none, me)) {
    const char *other = atomic_load(&comm->owner_fn);
    atomic_fetch_sub(&comm->busy, 1);
    return zcc_error(zccInvalidUsage,
                     "%s: communicator %s is in use by another thread (%s in flight or "
                     "queued in its open group); a communicator takes calls from one "
                     "thread at a time", fn, comm->name, other ? other : "a call");
  }
  comm->owner_depth = 1;
  atomic_store_explicit(&comm->owner_fn, fn, memory_order_release); /* for messages only */
  return zccSuccess;
}

void zcc_comm_leave_op(struct zccComm *comm) {
  if (atomic_load_explicit(&comm->owner, memory_order_relaxed) == self_token() &&
      --comm->owner_depth == 0) {
    /* Still the owner: tell the peers what another thread's abort or
       destroy could not while this thread was sending. */
    if (atomic_load_explicit(&comm->fail_deferred, memory_order_acquire) &&
        atomic_exchange(&comm->fail_deferred, 0)) {
      char last[1024];
      snprintf(last, sizeof(last), "%s", zcc_last_error());
      zcc_transport_fail_all(comm);
      zcc_restore_last_error(last);
    }
    atomic_store_explicit(&comm->owner, 0, memory_order_release);
  }
  zcc_comm_leave(comm);
}

void zcc_comm_leave(struct zccComm *comm) { atomic_fetch_sub(&comm->busy, 1); }

void zcc_comm_foreach(void (*fn)(struct zccComm *comm, void *arg), void *arg) {
  pthread_mutex_lock(&registry_lock);
  for (size_t i = 0; i < registry_len; i++) fn(registry[i], arg);
  pthread_mutex_unlock(&registry_lock);
}

void zcc_comm_set_error(struct zccComm *comm, zccResult_t res) {
  zcc_comm_set_error_msg(comm, res, zcc_last_error());
}

void zcc_comm_set_error_msg(struct zccComm *comm, zccResult_t res, const char *msg) {
  int expected = 0;
  if (res == zccSuccess) res = zccInternalError;
  if (atomic_compare_exchange_strong(&comm->error_claim, &expected, 1)) {
    snprintf(comm->error_msg, sizeof(comm->error_msg), "%s", msg && *msg ? msg : "no message");
    int noted = 0;
    if (atomic_compare_exchange_strong(&comm->cause_claim, &noted, 2)) {
      comm->fail_origin = comm->rank;
      /* the wire's text is at most ZCC_WIRE_FAIL_TEXT bytes: the message's start */
      snprintf(comm->fail_text, sizeof(comm->fail_text), "%.*s",
               (int)sizeof(comm->fail_text) - 1, comm->error_msg);
    } else {
      while (atomic_load_explicit(&comm->cause_claim, memory_order_acquire) != 3) sched_yield();
      comm->fail_origin = comm->cause_origin;
      snprintf(comm->fail_text, sizeof(comm->fail_text), "%s", comm->cause_text);
    }
    comm->fail_opno = atomic_load(&comm->ops_done) + 1;
    atomic_store_explicit(&comm->async_error, (int)res, memory_order_release);
    ZCC_INFO(COLL, "communicator %s rank %d enters error state: %s: %s", comm->name,
             comm->rank, zccGetErrorString(res), comm->error_msg);
    /* The caller's last error stays the cause, whatever these meet. */
    char last[1024];
    snprintf(last, sizeof(last), "%s", zcc_last_error());
    zcc_trace_on_error(comm, res); /* from the thread that found the error */
    zcc_transport_fail_all(comm);
    zcc_restore_last_error(last);
  }
}

_Static_assert(sizeof(((struct zccComm *)0)->fail_text) == ZCC_WIRE_FAIL_TEXT,
               "fail_text holds a failure record's text");

void zcc_comm_note_cause(struct zccComm *comm, int origin, const char *text) {
  int expected = 0;
  if (!comm || !atomic_compare_exchange_strong(&comm->cause_claim, &expected, 1)) return;
  comm->cause_origin = origin;
  snprintf(comm->cause_text, sizeof(comm->cause_text), "%s", text ? text : "");
  atomic_store_explicit(&comm->cause_claim, 3, memory_order_release);
}

void zcc_comm_free(struct zccComm *comm) {
  if (!comm) return;
  zcc_plan_release_spare(comm);
  /* The GPU side first: it writes the trace's last GPU spans once the device is idle. */
  if (comm->dev) comm->dev->free(comm);
  zcc_sigboard_free(comm->sigboard); /* after the watchdog that reads it */
  comm->sigboard = NULL;
  zcc_trace_comm_free(comm);
  /* The bootstrap first: a peer waiting in a control operation (a split,
     an init) learns at once that this rank is gone, not after the
     transports' lingering delivery of failure records. */
  if (comm->bootstrap) zcc_bootstrap_free(comm->bootstrap);
  comm->bootstrap = NULL;
  zcc_transport_free_all(comm);
  zcc_reg_t *r = comm->regs;
  while (r) {
    zcc_reg_t *next = r->next;
    zcc_hostmem_unregister(r->region);
    free(r);
    r = next;
  }
  pthread_mutex_destroy(&comm->reg_lock);
  zcc_hostmem_comm_free(comm);
  zcc_redop_free_all(comm);
  free(comm->peers);
  free(comm->ring_order);
  free(comm->hier_local);
  free(comm->hier_rail);
  free(comm->select);
  zcc_stores_free(comm);
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
