/*
 * zccRecvAny: a receive from whichever rank's message arrives first, on
 * host communicators. Connections carry bare byte streams, so a message
 * is seen arriving by its first bytes (the transports' `pending`); the
 * receive then runs as a plain zccRecv from that rank. An empty message
 * leaves no bytes, so count must be positive.
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "debug.h"
#include "group.h"
#include "reduce.h"
#include "transport.h"
#include "wait.h"

static const char fn[] = "zccRecvAny";

/* The lowest rank whose connection has bytes waiting, or -1. */
static int first_pending(struct zccComm *comm) {
  for (int p = 0; p < comm->nranks; p++) {
    zcc_conn_t *c = comm->conns[p];
    if (p != comm->rank && c && c->ops->pending(c)) return p;
  }
  return -1;
}

/* Aborts, dead peers and ZCC_TIMEOUT while no message has come. */
static zccResult_t check_wait(struct zccComm *comm, int64_t start) {
  if (atomic_load_explicit(&comm->abort_flag, memory_order_relaxed))
    return zcc_error(zccRemoteError, "%s: communicator %s was aborted", fn, comm->name);
  for (int p = 0; p < comm->nranks; p++) {
    zcc_conn_t *c = comm->conns[p];
    if (p == comm->rank || !c || !c->ops->check) continue;
    zccResult_t res = c->ops->check(c);
    if (res != zccSuccess) {
      char cause[512];
      snprintf(cause, sizeof(cause), "%s", zcc_last_error());
      return zcc_error(res, "%s: %s", fn, cause);
    }
  }
  if (comm->timeout_ms > 0 && zcc_now_ns() - start > comm->timeout_ms * 1000000LL)
    return zcc_error(zccTimeout,
                     "%s on comm %s: no message from any rank for %lld ms (ZCC_TIMEOUT)", fn,
                     comm->name, (long long)comm->timeout_ms);
  return zccSuccess;
}

/* Wait until some rank's message starts arriving; its rank in *peer. */
static zccResult_t wait_any(struct zccComm *comm, int *peer) {
  int64_t start = zcc_now_ns();
  for (unsigned iter = 0;; iter++) {
    int p = first_pending(comm);
    if (p >= 0) {
      *peer = p;
      return zccSuccess;
    }
    if ((iter & 255) == 255) ZCC_CHECK(check_wait(comm, start));
    if (iter < 1024) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

zccResult_t zccRecvAny(void *recvbuff, size_t count, zccDataType_t datatype, int *peer,
                       zccComm_t comm, zccStream_t stream) {
  (void)stream;
  if ((int)datatype < 0 || (int)datatype >= zccNumTypes)
    return zcc_error(zccInvalidArgument, "%s: datatype %d is not a zccDataType_t", fn,
                     (int)datatype);
  if (!peer) return zcc_error(zccInvalidArgument, "%s: peer is NULL", fn);
  ZCC_CHECK(zcc_comm_enter_op(comm, fn));
  zccResult_t res = zccSuccess;
  size_t ts = zcc_type_size(datatype);
  if (comm->device >= 0) {
    res = zcc_error(zccInvalidUsage,
                    "%s: receiving from any source is not supported on GPU communicators "
                    "(host communicators only)", fn);
    goto fail;
  }
  if (zcc_group_active()) {
    res = zcc_error(zccInvalidUsage,
                    "%s: not allowed inside a group (the sender must be known when the "
                    "group is planned)", fn);
    goto fail;
  }
  if (count == 0) {
    res = zcc_error(zccInvalidArgument,
                    "%s: count is 0; an empty message cannot be seen arriving", fn);
    goto fail;
  }
  if (count > SIZE_MAX / ts) {
    res = zcc_error(zccInvalidArgument, "%s: count %zu of %s overflows the address space",
                    fn, count, zcc_type_name(datatype));
    goto fail;
  }
  if (!recvbuff) {
    res = zcc_error(zccInvalidArgument, "%s: recvbuff is NULL", fn);
    goto fail;
  }
  if (comm->nranks < 2) {
    res = zcc_error(zccInvalidUsage, "%s: the communicator has no other rank to receive from",
                    fn);
    goto fail;
  }
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && comm->conns[p] && !comm->conns[p]->ops->pending) {
      res = zcc_error(zccInvalidUsage, "%s: the %s transport to rank %d cannot receive from "
                      "any source", fn, comm->conns[p]->ops->name, p);
      goto fail;
    }
  ZCC_TRACE(CALL, "%s buff %p count %zu type %s", fn, recvbuff, count,
            zcc_type_name(datatype));
  int from = -1;
  res = wait_any(comm, &from);
  if (res != zccSuccess) {
    zcc_comm_set_error(comm, res);
    goto fail;
  }
  zcc_plan_t *plan;
  ZCC_CHECK_GOTO(zcc_plan_new(comm, ZCC_COLL_SENDRECV, &plan), res, fail);
  zcc_opsig_p2p(&plan->sig, comm->op_seq);
  plan->sig.opno = ++comm->op_count;
  res = zcc_plan_p2p(plan, 1, from, recvbuff, count * ts);
  if (res != zccSuccess) {
    zcc_plan_free(plan);
    goto fail;
  }
  res = zcc_run_plan_now(plan); /* leaves comm */
  if (res == zccSuccess) *peer = from;
  return res;
fail:
  zcc_comm_leave_op(comm);
  return res;
}
