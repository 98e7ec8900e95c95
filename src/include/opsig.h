/*
 * Operation signatures: what every transfer of the host transports carries
 * with its first bytes, so that the receiver can tell that the bytes belong
 * to the call it is making (same operation number, collective, count,
 * datatype, op, root and algorithm) and refuse them, naming both calls,
 * when they do not. Bytes left over from an aborted or mismatched call can
 * then never be taken for the data of a later one.
 */
#ifndef ZCC_OPSIG_H_
#define ZCC_OPSIG_H_

#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

typedef struct zcc_op_sig {
  uint64_t seq;   /* collectives: the call's number on the communicator, from
                     1; point-to-point: the number of the last collective */
  uint64_t count; /* elements as the API got them; 0 for point-to-point */
  int32_t coll;   /* zcc_coll_t */
  int32_t type;   /* zccDataType_t; -1 for point-to-point */
  int32_t op;     /* the built-in op; -1 when the collective does not reduce */
  int32_t root;   /* -1 when not rooted */
  int32_t algo;   /* zcc_algo_t */
  int32_t flags;  /* ZCC_SIG_* */
  uint64_t opno;  /* the sender's own count of operations (collectives and
                     point-to-point plans), from 1; not compared: it says
                     whether the bytes predate the sender's failure */
} zcc_op_sig_t;

#define ZCC_SIG_PREMUL 1 /* a pre-multiplied sum */

/* The record in front of every transfer (socket) or in its first slot (shm). */
typedef struct zcc_wire_hdr {
  uint32_t magic;  /* ZCC_WIRE_DATA, or ZCC_WIRE_FAIL: the sender gave up */
  uint32_t code;   /* ZCC_WIRE_FAIL: its zccResult_t */
  uint64_t bytes;  /* this transfer's size; ZCC_WIRE_FAIL: text that follows */
  uint64_t pseq;   /* point-to-point: the message's number on this direction
                      of the connection, from 1; collectives: 0;
                      ZCC_WIRE_FAIL: the sender's first operation that did
                      not complete (its bytes from there on are void) */
  zcc_op_sig_t sig;
} zcc_wire_hdr_t;

#define ZCC_WIRE_DATA 0x7a636431u
#define ZCC_WIRE_FAIL 0x7a636446u
#define ZCC_WIRE_FAIL_TEXT 512 /* bytes of the cause after a ZCC_WIRE_FAIL record */
/* A ZCC_WIRE_FAIL record's sig.root: the rank the failure began on, plus 1
   (0: the sender itself). Its text is that rank's message. */

struct zccComm;
/*
 * The error for a failure record from rank `peer` (pid: 0 if not known)
 * with code `code`, beginning on rank `origin` (-1: the peer) with message
 * `text`: zccInvalidUsage if the peer gave up over a usage error (a
 * mismatch), else zccRemoteError, reading "rank 1 (pid 7) gave up on the
 * communicator (invalid usage: ...)" or "... gave up on the communicator
 * after rank 0's error (...)". Notes the cause on comm
 * (zcc_comm_note_cause), so that this rank passes on the origin's message.
 */
zccResult_t zcc_peer_failed_error(struct zccComm *comm, int peer, int pid, int32_t code,
                                  int origin, const char *text);

/* The signature of point-to-point transfers after collective number `seq`. */
void zcc_opsig_p2p(zcc_op_sig_t *s, uint64_t seq);

/* The same call: every field but opno (the algorithm too). */
int zcc_opsig_same(const zcc_op_sig_t *a, const zcc_op_sig_t *b);

/* zccInvalidUsage: "rank <peer> called <theirs> as op #N where rank <me>
   called <mine> as op #M" (the bytes: for zcc_opsig_describe). */
zccResult_t zcc_opsig_mismatch(const zcc_op_sig_t *theirs, uint64_t theirs_bytes, int peer,
                               const zcc_op_sig_t *mine, uint64_t mine_bytes, int me);

/* "broadcast(root=1, count=1000, float32)", "send of 4000 bytes", ... */
void zcc_opsig_describe(const zcc_op_sig_t *s, uint64_t bytes, char *buf, size_t len);

/*
 * Fill the record for a transfer of `bytes` under `sig` (pseq: 0, or the
 * point-to-point message number).
 */
void zcc_wire_hdr_fill(zcc_wire_hdr_t *h, const zcc_op_sig_t *sig, uint64_t bytes,
                       uint64_t pseq);

/*
 * The receiver's check of a record from rank `peer`, for its own transfer
 * of `bytes` under `mine` (pseq as above). zccSuccess, or
 * zccInvalidUsage naming both calls:
 *   rank 1 called broadcast(root=1, count=1000, float32) as op #17 where
 *   rank 0 called broadcast(root=0, count=1000, float32) as op #17
 * When the peer's call is one this rank made earlier or later (the streams
 * are out of step), the message names this rank's call of that number too.
 * A ZCC_WIRE_FAIL record is zccRemoteError (the text is the caller's to add).
 */
struct zccComm;
zccResult_t zcc_wire_hdr_check(const zcc_wire_hdr_t *got, const zcc_op_sig_t *mine,
                               uint64_t bytes, uint64_t pseq, int peer,
                               const struct zccComm *comm);

#endif /* ZCC_OPSIG_H_ */
