/*
 * Signature boards (core/sigboard.c): how a GPU communicator's ranks on one
 * host find a mismatched collective (a different collective, count,
 * datatype, op or root at the same operation number), which its kernels
 * cannot tell: each rank posts every collective's signature (opsig.h) into
 * a table of 1024 entries in shared memory, mapped by its peers on the
 * host, before the collective is enqueued. The posting rank compares with
 * the peers that already made that call (the call is then refused, nothing
 * enqueued); the GPU watchdog compares the rest every round as peers catch
 * up, puts the communicator in error and raises the abort word. Either way
 * zccInvalidUsage names both calls. Ranks on other hosts are not compared.
 */
#ifndef ZCC_SIGBOARD_H_
#define ZCC_SIGBOARD_H_

#include "opsig.h"
#include "zcc.h"

struct zccComm;
typedef struct zcc_sigboard zcc_sigboard_t;

/* Collective over the communicator's bootstrap (two barriers). */
zccResult_t zcc_sigboard_setup(struct zccComm *comm, zcc_sigboard_t **out);
void zcc_sigboard_free(zcc_sigboard_t *b);

/* Post this rank's signature of sig->seq (numbers grow by one per call);
   zccInvalidUsage when a peer already posted another call there. */
zccResult_t zcc_sigboard_post(zcc_sigboard_t *b, const zcc_op_sig_t *sig);

/* Compare with what peers posted since the last check (one thread). */
zccResult_t zcc_sigboard_check(zcc_sigboard_t *b);

#endif
