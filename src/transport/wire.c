/*
 * The record in front of every host transfer (opsig.h): filling it, and the
 * receiver's check that names both calls when they differ.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "comm.h"
#include "debug.h"
#include "opsig.h"
#include "reduce.h"

void zcc_opsig_describe(const zcc_op_sig_t *s, uint64_t bytes, char *buf, size_t len) {
  if (s->coll == ZCC_COLL_SENDRECV) {
    snprintf(buf, len, "send/recv of %" PRIu64 " bytes", bytes);
    return;
  }
  char root[24] = "", op[40] = "";
  if (s->root >= 0) snprintf(root, sizeof(root), "root=%d, ", (int)s->root);
  if (s->op >= 0)
    snprintf(op, sizeof(op), ", %s%s", s->flags & ZCC_SIG_PREMUL ? "premulsum of " : "",
             zcc_op_name((zccRedOp_t)s->op));
  const char *type = s->type >= 0 && s->type < zccNumTypes
                         ? zcc_type_name((zccDataType_t)s->type)
                         : "?";
  snprintf(buf, len, "%s(%scount=%" PRIu64 ", %s%s)", zcc_coll_name((zcc_coll_t)s->coll),
           root, s->count, type, op);
}

zccResult_t zcc_opsig_mismatch(const zcc_op_sig_t *theirs, uint64_t theirs_bytes, int peer,
                               const zcc_op_sig_t *mine, uint64_t mine_bytes, int me) {
  char t[128], m[128];
  zcc_opsig_describe(theirs, theirs_bytes, t, sizeof(t));
  zcc_opsig_describe(mine, mine_bytes, m, sizeof(m));
  return zcc_error(zccInvalidUsage,
                   "rank %d called %s as op #%" PRIu64 " where rank %d called %s as op #%" PRIu64,
                   peer, t, theirs->seq, me, m, mine->seq);
}

void zcc_opsig_p2p(zcc_op_sig_t *s, uint64_t seq) {
  memset(s, 0, sizeof(*s));
  s->seq = seq;
  s->coll = ZCC_COLL_SENDRECV;
  s->type = -1;
  s->op = -1;
  s->root = -1;
  s->algo = ZCC_ALGO_ONESHOT;
}

void zcc_wire_hdr_fill(zcc_wire_hdr_t *h, const zcc_op_sig_t *sig, uint64_t bytes,
                       uint64_t pseq) {
  h->magic = ZCC_WIRE_DATA;
  h->code = 0;
  h->bytes = bytes;
  h->pseq = pseq;
  if (sig)
    h->sig = *sig;
  else
    memset(&h->sig, 0, sizeof(h->sig));
}

static int same_call(const zcc_op_sig_t *a, const zcc_op_sig_t *b) {
  return a->seq == b->seq && a->coll == b->coll && a->count == b->count &&
         a->type == b->type && a->op == b->op && a->root == b->root && a->flags == b->flags;
}

int zcc_opsig_same(const zcc_op_sig_t *a, const zcc_op_sig_t *b) {
  return same_call(a, b) && a->algo == b->algo;
}

zccResult_t zcc_peer_failed_error(struct zccComm *comm, int peer, int pid, int32_t code,
                                  int origin, const char *text) {
  if (origin < 0 || !comm || origin >= comm->nranks) origin = peer;
  if (!text) text = "";
  zcc_comm_note_cause(comm, origin, text);
  char who[64] = "", after[48] = "";
  if (pid > 0) snprintf(who, sizeof(who), " (pid %d)", pid);
  if (origin != peer) snprintf(after, sizeof(after), " after rank %d's error", origin);
  return zcc_error(code == zccInvalidUsage ? zccInvalidUsage : zccRemoteError,
                   "rank %d%s gave up on the communicator%s (%s%s%s)", peer, who, after,
                   zccGetErrorString((zccResult_t)code), text[0] ? ": " : "", text);
}

zccResult_t zcc_wire_hdr_check(const zcc_wire_hdr_t *got, const zcc_op_sig_t *mine,
                               uint64_t bytes, uint64_t pseq, int peer,
                               const struct zccComm *comm) {
  int me = comm->rank;
  if (got->magic == ZCC_WIRE_FAIL)
    return zcc_error(zccRemoteError, "rank %d gave up on the communicator (%s)", peer,
                     zccGetErrorString((zccResult_t)got->code));
  if (got->magic != ZCC_WIRE_DATA)
    return zcc_error(zccInternalError,
                     "rank %d sent a record with magic 0x%08x where a transfer should "
                     "begin (the byte streams are out of step)", peer, got->magic);
  zcc_op_sig_t none;
  memset(&none, 0, sizeof(none));
  if (!mine) mine = &none;
  if (!same_call(&got->sig, mine)) {
    const zcc_op_sig_t *then = &comm->sig_hist[got->sig.seq % ZCC_SIG_HISTORY];
    if (got->sig.seq != mine->seq && got->sig.seq && then->seq == got->sig.seq &&
        mine->coll != ZCC_COLL_SENDRECV && got->sig.coll != ZCC_COLL_SENDRECV) {
      /* Out of step: the peer's call is one this rank already made. */
      char theirs_s[128], mine_s[128], then_s[128];
      zcc_opsig_describe(&got->sig, got->bytes, theirs_s, sizeof(theirs_s));
      zcc_opsig_describe(mine, bytes, mine_s, sizeof(mine_s));
      zcc_opsig_describe(then, 0, then_s, sizeof(then_s));
      return zcc_error(zccInvalidUsage,
                       "rank %d called %s as op #%" PRIu64 " where rank %d called %s as op "
                       "#%" PRIu64 " (seen at rank %d's op #%" PRIu64 ", %s)",
                       peer, theirs_s, got->sig.seq, me, then_s, then->seq, me, mine->seq,
                       mine_s);
    }
    return zcc_opsig_mismatch(&got->sig, got->bytes, peer, mine, bytes, me);
  }
  if (got->pseq != pseq || got->bytes != bytes) {
    if (mine->coll == ZCC_COLL_SENDRECV)
      return zcc_error(zccInvalidUsage,
                       "rank %d sent %" PRIu64 " bytes as its send #%" PRIu64
                       " to rank %d (after op #%" PRIu64 ") where rank %d posted a receive "
                       "of %" PRIu64 " bytes as its receive #%" PRIu64 " from rank %d",
                       peer, got->bytes, got->pseq, me, got->sig.seq, me, bytes, pseq, peer);
    return zcc_error(zccInvalidUsage,
                     "op #%" PRIu64 " %s: rank %d sent a transfer of %" PRIu64
                     " bytes (algorithm %s) where rank %d expected %" PRIu64
                     " bytes (algorithm %s): ZCC_ALGO or ZCC_RING_CHUNK_BYTES differ "
                     "between ranks?", mine->seq, zcc_coll_name((zcc_coll_t)mine->coll), peer,
                     got->bytes, zcc_algo_name((zcc_algo_t)got->sig.algo), me, bytes,
                     zcc_algo_name((zcc_algo_t)mine->algo));
  }
  if (got->sig.algo != mine->algo)
    return zcc_error(zccInvalidUsage,
                     "op #%" PRIu64 " %s: rank %d runs algorithm %s where rank %d runs %s "
                     "(ZCC_ALGO differs between ranks?)", mine->seq,
                     zcc_coll_name((zcc_coll_t)mine->coll), peer,
                     zcc_algo_name((zcc_algo_t)got->sig.algo), me,
                     zcc_algo_name((zcc_algo_t)mine->algo));
  return zccSuccess;
}
