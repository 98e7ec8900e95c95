/*
 * Groups. Plans issued in a group are queued per communicator, in issue
 * order; point-to-point operations on one communicator join a single plan
 * whose transfers all run at once. zccGroupEnd runs every communicator's
 * chain concurrently, so a thread can drive several communicators, and
 * send/recv pairs that would deadlock one at a time complete.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "debug.h"
#include "group.h"
#include "stores.h"
#include "wait.h"

typedef struct group_chain {
  struct zccComm *comm;
  zcc_plan_t *head, *tail;
  int nplans;
} group_chain_t;

typedef struct gpu_p2p_list {
  struct zccComm *comm;
  zcc_gpu_p2p_op_t *ops;
  int n, cap;
} gpu_p2p_list_t;
static _Thread_local gpu_p2p_list_t *gpu_lists;
static _Thread_local int ngpu_lists, cap_gpu_lists;

zccResult_t zcc_group_gpu_p2p_add(struct zccComm *comm, const zcc_gpu_p2p_op_t *op, int *kept) {
  *kept = 0;
  gpu_p2p_list_t *l = NULL;
  for (int i = 0; i < ngpu_lists; i++)
    if (gpu_lists[i].comm == comm) l = &gpu_lists[i];
  if (!l) {
    if (ngpu_lists == cap_gpu_lists) {
      int cap = cap_gpu_lists ? cap_gpu_lists * 2 : 4;
      gpu_p2p_list_t *g = realloc(gpu_lists, (size_t)cap * sizeof(*g));
      if (!g) return zcc_error(zccSystemError, "group: out of memory");
      gpu_lists = g;
      cap_gpu_lists = cap;
    }
    l = &gpu_lists[ngpu_lists++];
    memset(l, 0, sizeof(*l));
    l->comm = comm;
    *kept = 1;
  }
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    zcc_gpu_p2p_op_t *o = realloc(l->ops, (size_t)cap * sizeof(*o));
    if (!o) {
      if (*kept) ngpu_lists--;
      *kept = 0;
      return zcc_error(zccSystemError, "group: out of memory");
    }
    l->ops = o;
    l->cap = cap;
  }
  l->ops[l->n++] = *op;
  return zccSuccess;
}

/* Launch every queued GPU point-to-point list; each gives back its comm. */
static zccResult_t gpu_p2p_flush(void) {
  zccResult_t res = zccSuccess;
  for (int i = 0; i < ngpu_lists; i++) {
    gpu_p2p_list_t *l = &gpu_lists[i];
    if (res == zccSuccess) res = l->comm->dev->p2p(l->comm, l->ops, l->n, "zccGroupEnd");
    free(l->ops);
    zcc_comm_leave_op(l->comm);
  }
  free(gpu_lists);
  gpu_lists = NULL;
  ngpu_lists = cap_gpu_lists = 0;
  return res;
}

static _Thread_local int depth;
static _Thread_local group_chain_t *chains;
static _Thread_local int nchains, cap_chains;

int zcc_group_active(void) { return depth > 0; }

static zccResult_t chain_of(struct zccComm *comm, group_chain_t **out) {
  for (int i = 0; i < nchains; i++)
    if (chains[i].comm == comm) {
      *out = &chains[i];
      return zccSuccess;
    }
  if (nchains == cap_chains) {
    int cap = cap_chains ? cap_chains * 2 : 8;
    group_chain_t *g = realloc(chains, (size_t)cap * sizeof(*g));
    if (!g) return zcc_error(zccSystemError, "group: out of memory");
    chains = g;
    cap_chains = cap;
  }
  group_chain_t *c = &chains[nchains++];
  c->comm = comm;
  c->head = c->tail = NULL;
  c->nplans = 0;
  *out = c;
  return zccSuccess;
}

zccResult_t zcc_group_add_plan(zcc_plan_t *plan) {
  group_chain_t *c;
  ZCC_CHECK(chain_of(plan->comm, &c));
  plan->next = NULL;
  if (c->tail) c->tail->next = plan;
  else c->head = plan;
  c->tail = plan;
  c->nplans++;
  return zccSuccess;
}

zccResult_t zcc_group_p2p_plan(struct zccComm *comm, zcc_plan_t **plan, int *created) {
  group_chain_t *c;
  ZCC_CHECK(chain_of(comm, &c));
  *created = 0;
  if (c->tail && c->tail->coll == ZCC_COLL_SENDRECV) {
    *plan = c->tail;
    return zccSuccess;
  }
  zcc_plan_t *p;
  ZCC_CHECK(zcc_plan_new(comm, ZCC_COLL_SENDRECV, &p));
  zccResult_t res = zcc_group_add_plan(p);
  if (res != zccSuccess) {
    zcc_plan_free(p);
    return res;
  }
  *plan = p;
  *created = 1;
  return zccSuccess;
}

static void free_chain(zcc_plan_t *p) {
  while (p) {
    zcc_plan_t *next = p->next;
    struct zccComm *comm = p->comm;
    /* The plan goes back to its communicator: leave only afterwards, since
       an abort waiting in another thread frees the communicator then. */
    zcc_plan_free(p);
    zcc_comm_leave_op(comm);
    p = next;
  }
}

int zcc_group_drop_comm(struct zccComm *comm) {
  int dropped = 0;
  for (int i = 0; i < nchains; i++)
    if (chains[i].comm == comm) {
      dropped += chains[i].nplans;
      free_chain(chains[i].head);
      chains[i] = chains[--nchains];
      break;
    }
  for (int i = 0; i < ngpu_lists; i++)
    if (gpu_lists[i].comm == comm) {
      dropped += gpu_lists[i].n;
      free(gpu_lists[i].ops);
      zcc_comm_leave_op(comm);
      gpu_lists[i] = gpu_lists[--ngpu_lists];
      break;
    }
  return dropped;
}

/* A chain ran to its end: its operations count as completed (opsig.h). */
static void chain_done(zcc_plan_t *p) {
  while (p && p->next) p = p->next;
  if (p) atomic_store(&p->comm->ops_done, p->sig.opno);
}

zccResult_t zcc_run_plan_now(zcc_plan_t *plan) {
  zccResult_t res = zccSuccess;
  if (plan->coll == ZCC_COLL_SENDRECV) res = zcc_plan_p2p_finish(plan);
  /* Plain or streaming stores for its result and slots: timed (stores.h). */
  int cls = plan->stores_class - 1, timed = 0, kind = 0;
  int64_t t0 = 0;
  if (cls >= 0 && res == zccSuccess) {
    kind = zcc_stores_begin(plan->comm, cls, 1, &timed);
    zcc_plan_stores(plan, kind);
    if (timed) t0 = zcc_now_ns();
  }
  if (res == zccSuccess) res = zcc_exec_chains(&plan, 1);
  if (res == zccSuccess && timed)
    zcc_stores_end(plan->comm, cls, kind, (double)(zcc_now_ns() - t0) / 1e3);
  if (res == zccSuccess) chain_done(plan);
  free_chain(plan);
  return res;
}

zccResult_t zccGroupStart(void) {
  depth++;
  return zccSuccess;
}

zccResult_t zccGroupEnd(void) {
  if (depth == 0)
    return zcc_error(zccInvalidUsage, "zccGroupEnd: no group is open (missing zccGroupStart)");
  if (--depth > 0) return zccSuccess;
  zccResult_t res = zccSuccess;
  zcc_plan_t **heads = calloc((size_t)(nchains ? nchains : 1), sizeof(*heads));
  if (!heads) res = zcc_error(zccSystemError, "zccGroupEnd: out of memory");
  for (int i = 0; i < nchains && res == zccSuccess; i++) {
    heads[i] = chains[i].head;
    for (zcc_plan_t *p = heads[i]; p && res == zccSuccess; p = p->next) {
      if (p->coll == ZCC_COLL_SENDRECV) res = zcc_plan_p2p_finish(p);
      /* Not timed in a group: the stores its class runs now (stores.h). */
      int unused;
      if (p->stores_class)
        zcc_plan_stores(p, zcc_stores_begin(p->comm, p->stores_class - 1, 0, &unused));
    }
  }
  if (res == zccSuccess && nchains > 0) res = zcc_exec_chains(heads, nchains);
  if (res == zccSuccess)
    for (int i = 0; i < nchains; i++) chain_done(heads[i]);
  zccResult_t gres = gpu_p2p_flush();
  if (res == zccSuccess) res = gres;
  for (int i = 0; i < nchains; i++) free_chain(chains[i].head);
  free(heads);
  free(chains);
  chains = NULL;
  nchains = cap_chains = 0;
  return res;
}
