/*
 * The collective and point-to-point entry points: argument checks, then a
 * plan that runs now or joins the open group.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "coll.h"
#include "sigboard.h"
#include "comm.h"
#include "debug.h"
#include "group.h"
#include "param.h"
#include "reduce.h"
#include "trace.h"
#include "devops.h"

ZCC_PARAM_STR(check_mode, "CHECK_MODE", "cheap",
              "host collectives: cheap (each transfer carries its call's signature, "
              "checked by the receiver) or full (also an agreement step over the "
              "bootstrap before every collective outside a group, so that a "
              "mismatch fails on every rank at that call; for debugging)")

/* ZCC_CHECK_MODE=full: 1; cheap: 0; else -1. */
static int check_full(void) {
  static atomic_int mode = -2;
  int m = atomic_load_explicit(&mode, memory_order_relaxed);
  if (m == -2) {
    const char *s = zcc_param_check_mode();
    m = !s || !*s || strcasecmp(s, "cheap") == 0 ? 0 : strcasecmp(s, "full") == 0 ? 1 : -1;
    atomic_store_explicit(&mode, m, memory_order_relaxed);
  }
  return m;
}

/*
 * The agreement step of ZCC_CHECK_MODE=full: every rank's signature of
 * this call, compared before anything moves. A mismatch fails the call on
 * every rank and leaves the communicator in step (nobody ran it).
 */
static zccResult_t agree(struct zccComm *comm, const zcc_op_sig_t *mine, const char *fn) {
  int n = comm->nranks;
  if (n == 1) return zccSuccess;
  zcc_op_sig_t *all = calloc((size_t)n, sizeof(*all));
  if (!all) return zcc_error(zccSystemError, "%s: out of memory", fn);
  all[comm->rank] = *mine;
  zccResult_t res = zcc_bootstrap_allgather(comm->bootstrap, all, sizeof(*all),
                                            comm->timeout_ms > 0 ? comm->timeout_ms : 0);
  if (res != zccSuccess) {
    zcc_comm_set_error(comm, res);
  } else {
    for (int i = 0; i < n; i++) {
      all[i].opno = mine->opno;
      if (zcc_opsig_same(&all[i], mine)) continue;
      char theirs_s[128], mine_s[128];
      zcc_opsig_describe(&all[i], 0, theirs_s, sizeof(theirs_s));
      zcc_opsig_describe(mine, 0, mine_s, sizeof(mine_s));
      res = zcc_error(zccInvalidUsage,
                      "%s: rank %d called %s as op #%llu (algorithm %s) where rank %d called "
                      "%s as op #%llu (algorithm %s) (ZCC_CHECK_MODE=full)",
                      fn, i, theirs_s, (unsigned long long)all[i].seq,
                      zcc_algo_name((zcc_algo_t)all[i].algo), comm->rank, mine_s,
                      (unsigned long long)mine->seq, zcc_algo_name((zcc_algo_t)mine->algo));
      break;
    }
  }
  free(all);
  return res;
}

static zccResult_t check_type(zccDataType_t t, const char *fn) {
  if ((int)t < 0 || (int)t >= zccNumTypes)
    return zcc_error(zccInvalidArgument, "%s: datatype %d is not a zccDataType_t", fn, (int)t);
  return zccSuccess;
}

/* Built-in ops here; pre-multiplied sums are the communicator's (zcc_redop_resolve). */
static zccResult_t check_op(zccRedOp_t op, const char *fn) {
  if ((int)op < 0)
    return zcc_error(zccInvalidArgument, "%s: op %d is not a zccRedOp_t", fn, (int)op);
  return zccSuccess;
}

/* count elements of type, times `mult`, in bytes; error if it overflows. */
static zccResult_t check_bytes(size_t count, size_t mult, zccDataType_t t, const char *fn,
                               size_t *bytes) {
  size_t ts = zcc_type_size(t);
  if (mult && count > SIZE_MAX / mult / ts)
    return zcc_error(zccInvalidArgument, "%s: count %zu x %zu of %s overflows the address space",
                     fn, count, mult, zcc_type_name(t));
  *bytes = count * (mult ? mult : 1) * ts;
  return zccSuccess;
}

static int overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return abytes && bbytes && x < y + bbytes && y < x + abytes;
}

static zccResult_t check_buffers(const zcc_coll_args_t *a, int rank, int nranks,
                                 const char *fn) {
  size_t one = 0, all = 0;
  int blocks = a->coll == ZCC_COLL_ALLGATHER || a->coll == ZCC_COLL_REDUCESCATTER ||
               a->coll == ZCC_COLL_ALLTOALL;
  ZCC_CHECK(check_bytes(a->count, 1, a->type, fn, &one));
  ZCC_CHECK(check_bytes(a->count, blocks ? (size_t)nranks : 1, a->type, fn, &all));
  if (a->count == 0) return zccSuccess;
  int need_send = a->coll != ZCC_COLL_BROADCAST || rank == a->root;
  int need_recv = a->coll != ZCC_COLL_REDUCE || rank == a->root;
  if (need_send && !a->sendbuf) return zcc_error(zccInvalidArgument, "%s: sendbuff is NULL", fn);
  if (need_recv && !a->recvbuf) return zcc_error(zccInvalidArgument, "%s: recvbuff is NULL", fn);
  if (!need_send || !need_recv) return zccSuccess;
  size_t sbytes = one, rbytes = one;
  const char *inplace_send = a->recvbuf; /* where sendbuff must be for in-place */
  switch (a->coll) {
  case ZCC_COLL_ALLGATHER:
    rbytes = all;
    inplace_send = (const char *)a->recvbuf + (size_t)rank * one;
    break;
  case ZCC_COLL_REDUCESCATTER:
    sbytes = all;
    inplace_send = (const char *)a->recvbuf - (size_t)rank * one;
    break;
  case ZCC_COLL_ALLTOALL: sbytes = rbytes = all; break;
  default: break;
  }
  if (a->sendbuf != inplace_send && overlap(a->sendbuf, sbytes, a->recvbuf, rbytes))
    return zcc_error(zccInvalidArgument,
                     "%s: sendbuff %p and recvbuff %p overlap but are not in place", fn,
                     a->sendbuf, a->recvbuf);
  return zccSuccess;
}

static zccResult_t run_coll(zcc_coll_args_t *a, zccComm_t comm, zccStream_t stream,
                            const char *fn) {
  ZCC_CHECK(check_type(a->type, fn));
  int reduces = a->coll == ZCC_COLL_ALLREDUCE || a->coll == ZCC_COLL_REDUCE ||
                a->coll == ZCC_COLL_REDUCESCATTER;
  if (reduces) ZCC_CHECK(check_op(a->op, fn));
  else a->op = zccSum;
  ZCC_CHECK(zcc_comm_enter_op(comm, fn));
  zccResult_t res = zccSuccess;
  if (reduces)
    ZCC_CHECK_GOTO(zcc_redop_resolve(comm, a->op, a->type, fn, &a->op, &a->scale, &a->scalar,
                                     &a->scalar_ptr),
                   res, fail);
  int rooted = a->coll == ZCC_COLL_BROADCAST || a->coll == ZCC_COLL_REDUCE;
  if (rooted && (a->root < 0 || a->root >= comm->nranks)) {
    res = zcc_error(zccInvalidArgument, "%s: root %d is out of range [0, %d)", fn, a->root,
                    comm->nranks);
    goto fail;
  }
  ZCC_CHECK_GOTO(check_buffers(a, comm->rank, comm->nranks, fn), res, fail);
  ZCC_TRACE(CALL, "%s sendbuff %p recvbuff %p count %zu type %s op %s root %d", fn,
            a->sendbuf, a->recvbuf, a->count, zcc_type_name(a->type), zcc_op_name(a->op),
            a->root);
  int trace_root = rooted ? a->root : -1;
  if (comm->dev) {
    if (comm->dev->check) ZCC_CHECK_GOTO(comm->dev->check(comm, a, stream, fn), res, fail);
    /* Enqueued on the stream now, also inside a group: nothing waits on the host.
       The record holds what the host knows (the enqueue); the GPU's start and
       end times are for the device side to add. */
    /* Its number and signature go on the host's signature board first
       (sigboard.h): a peer that made another call at this number already
       refuses this one here, before anything is enqueued. (No algorithm:
       the GPU path picks it alike on every rank from these fields.) */
    zcc_op_sig_t sig = {.seq = ++comm->op_seq, .count = a->count, .coll = a->coll,
                        .type = a->type, .op = reduces ? (int32_t)a->op : -1,
                        .root = rooted ? a->root : -1, .algo = 0,
                        .flags = a->scale ? ZCC_SIG_PREMUL : 0, .opno = ++comm->op_count};
    comm->sig_hist[sig.seq % ZCC_SIG_HISTORY] = sig;
    res = zcc_sigboard_post(comm->sigboard, &sig);
    if (res != zccSuccess) {
      char cause[512];
      snprintf(cause, sizeof(cause), "%s", zcc_last_error());
      res = zcc_error(res, "%s: %s", fn, cause);
      zcc_comm_set_error(comm, res);
      goto fail;
    }
    uint64_t tid = zcc_trace_enqueue(comm, a->coll, a->count, a->count * zcc_type_size(a->type),
                                     a->type, a->op, trace_root, -1);
    a->op_id = tid;
    a->sig_seq = sig.seq;
    res = comm->dev->coll(comm, a, stream, fn);
    zcc_trace_finish_id(comm, tid, res);
    goto fail;
  }
  (void)stream;
  zcc_plan_t *plan = NULL;
  ZCC_CHECK_GOTO(zcc_plan_coll(comm, a, &plan), res, fail);
  /* Its number and signature travel with its transfers (opsig.h). */
  plan->sig = (zcc_op_sig_t){.seq = ++comm->op_seq, .count = a->count, .coll = a->coll,
                             .type = a->type, .op = reduces ? (int32_t)a->op : -1,
                             .root = rooted ? a->root : -1, .algo = plan->algo,
                             .flags = a->scale ? ZCC_SIG_PREMUL : 0,
                             .opno = ++comm->op_count};
  comm->sig_hist[plan->sig.seq % ZCC_SIG_HISTORY] = plan->sig;
  plan->trace_id = zcc_trace_enqueue(comm, a->coll, a->count,
                                     a->count * zcc_type_size(a->type), a->type, a->op,
                                     trace_root, plan->algo);
  if (check_full() && !zcc_group_active()) {
    res = check_full() < 0 ? zcc_error(zccInvalidArgument,
                                       "%s: ZCC_CHECK_MODE=%s: expected cheap or full", fn,
                                       zcc_param_check_mode())
                           : agree(comm, &plan->sig, fn);
    if (res != zccSuccess) {
      zcc_plan_free(plan);
      goto fail;
    }
  }
  if (zcc_group_active()) {
    res = zcc_group_add_plan(plan);
    if (res != zccSuccess) {
      zcc_plan_free(plan);
      goto fail;
    }
    return zccSuccess;
  }
  return zcc_run_plan_now(plan);
fail:
  zcc_comm_leave_op(comm);
  return res;
}

zccResult_t zccAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                         zccDataType_t datatype, zccRedOp_t op, zccComm_t comm,
                         zccStream_t stream) {
  zcc_coll_args_t a = {.coll = ZCC_COLL_ALLREDUCE, .sendbuf = sendbuff, .recvbuf = recvbuff,
                       .count = count, .type = datatype, .op = op, .root = 0};
  return run_coll(&a, comm, stream, "zccAllReduce");
}

zccResult_t zccBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                         zccDataType_t datatype, int root, zccComm_t comm,
                         zccStream_t stream) {
  zcc_coll_args_t a = {.coll = ZCC_COLL_BROADCAST, .sendbuf = sendbuff, .recvbuf = recvbuff,
                       .count = count, .type = datatype, .op = zccSum, .root = root};
  return run_coll(&a, comm, stream, "zccBroadcast");
}

zccResult_t zccReduce(const void *sendbuff, void *recvbuff, size_t count,
                      zccDataType_t datatype, zccRedOp_t op, int root, zccComm_t comm,
                      zccStream_t stream) {
  zcc_coll_args_t a = {.coll = ZCC_COLL_REDUCE, .sendbuf = sendbuff, .recvbuf = recvbuff,
                       .count = count, .type = datatype, .op = op, .root = root};
  return run_coll(&a, comm, stream, "zccReduce");
}

zccResult_t zccAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                         zccDataType_t datatype, zccComm_t comm, zccStream_t stream) {
  zcc_coll_args_t a = {.coll = ZCC_COLL_ALLGATHER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                       .count = sendcount, .type = datatype, .op = zccSum, .root = 0};
  return run_coll(&a, comm, stream, "zccAllGather");
}

zccResult_t zccReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                             zccDataType_t datatype, zccRedOp_t op, zccComm_t comm,
                             zccStream_t stream) {
  zcc_coll_args_t a = {.coll = ZCC_COLL_REDUCESCATTER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                       .count = recvcount, .type = datatype, .op = op, .root = 0};
  return run_coll(&a, comm, stream, "zccReduceScatter");
}

zccResult_t zccAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                        zccDataType_t datatype, zccComm_t comm, zccStream_t stream) {
  zcc_coll_args_t a = {.coll = ZCC_COLL_ALLTOALL, .sendbuf = sendbuff, .recvbuf = recvbuff,
                       .count = count, .type = datatype, .op = zccSum, .root = 0};
  return run_coll(&a, comm, stream, "zccAlltoAll");
}

static zccResult_t run_p2p(int is_recv, void *buf, size_t count, zccDataType_t type, int peer,
                           zccComm_t comm, zccStream_t stream, const char *fn) {
  ZCC_CHECK(check_type(type, fn));
  ZCC_CHECK(zcc_comm_enter_op(comm, fn));
  zccResult_t res = zccSuccess;
  size_t bytes = 0;
  if (peer < 0 || peer >= comm->nranks) {
    res = zcc_error(zccInvalidArgument, "%s: peer %d is out of range [0, %d)", fn, peer,
                    comm->nranks);
    goto fail;
  }
  ZCC_CHECK_GOTO(check_bytes(count, 1, type, fn, &bytes), res, fail);
  if (count && !buf) {
    res = zcc_error(zccInvalidArgument, "%s: %s is NULL", fn, is_recv ? "recvbuff" : "sendbuff");
    goto fail;
  }
  ZCC_TRACE(CALL, "%s buff %p count %zu type %s peer %d", fn, buf, count, zcc_type_name(type),
            peer);
  if (!zcc_group_active() && peer == comm->rank && bytes) {
    res = zcc_error(zccInvalidUsage,
                    "%s: a send to or receive from self must be paired inside a group", fn);
    goto fail;
  }
  if (comm->dev) {
    zcc_gpu_p2p_op_t op = {buf, bytes, peer, is_recv, stream, 0};
    op.op_id = zcc_trace_enqueue(comm, ZCC_COLL_SENDRECV, count, bytes, type, zccSum, peer, -1);
    zcc_trace_finish_id(comm, op.op_id, zccSuccess);
    if (zcc_group_active()) {
      int kept = 0;
      res = zcc_group_gpu_p2p_add(comm, &op, &kept);
      if (res != zccSuccess || !kept) zcc_comm_leave_op(comm);
      return res;
    }
    res = comm->dev->p2p(comm, &op, 1, fn);
    goto fail;
  }
  (void)stream;
  if (zcc_group_active()) {
    zcc_plan_t *plan;
    int created;
    ZCC_CHECK_GOTO(zcc_group_p2p_plan(comm, &plan, &created), res, fail);
    if (created) {
      zcc_opsig_p2p(&plan->sig, comm->op_seq);
      plan->sig.opno = ++comm->op_count;
    }
    if (created)
      plan->trace_id = zcc_trace_enqueue(comm, ZCC_COLL_SENDRECV, count, bytes, type, zccSum,
                                         peer, ZCC_ALGO_ONESHOT);
    res = zcc_plan_p2p(plan, is_recv, peer, buf, bytes);
    if (!created) zcc_comm_leave_op(comm);
    return res;
  }
  zcc_plan_t *plan;
  ZCC_CHECK_GOTO(zcc_plan_new(comm, ZCC_COLL_SENDRECV, &plan), res, fail);
  zcc_opsig_p2p(&plan->sig, comm->op_seq);
  plan->sig.opno = ++comm->op_count;
  plan->trace_id = zcc_trace_enqueue(comm, ZCC_COLL_SENDRECV, count, bytes, type, zccSum, peer,
                                     ZCC_ALGO_ONESHOT);
  res = zcc_plan_p2p(plan, is_recv, peer, buf, bytes);
  if (res != zccSuccess) {
    zcc_plan_free(plan);
    goto fail;
  }
  return zcc_run_plan_now(plan);
fail:
  zcc_comm_leave_op(comm);
  return res;
}

zccResult_t zccSend(const void *sendbuff, size_t count, zccDataType_t datatype, int peer,
                    zccComm_t comm, zccStream_t stream) {
  return run_p2p(0, (void *)sendbuff, count, datatype, peer, comm, stream, "zccSend");
}

zccResult_t zccRecv(void *recvbuff, size_t count, zccDataType_t datatype, int peer,
                    zccComm_t comm, zccStream_t stream) {
  return run_p2p(1, recvbuff, count, datatype, peer, comm, stream, "zccRecv");
}
