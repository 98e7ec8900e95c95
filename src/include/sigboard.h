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
 * zccInvalidUsage names both calls. A rank on another host that a network
 * connection reaches has a mirror in private memory instead, which the GPU
 * network proxy fills with what that rank's proxy sends (transport/net_gpu.c);
 * ranks on other hosts reached by no connection are compared by the ranks
 * between (every pair of neighbours agreeing means every rank does).
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

/* For the network proxy: the last seq posted here; this rank's signature of
   seq (1 read, 0 not posted or being written, -1 overwritten: a whole table
   behind); whether peer has a mirror; and a peer's signature into its
   mirror (one writer: the proxy; ignored without a mirror). */
uint64_t zcc_sigboard_posted(const zcc_sigboard_t *b);
/* The proxy: the peer's proxy has sent (or skipped, a whole table behind)
   every signature of that rank up to upto. */
void zcc_sigboard_put_upto(zcc_sigboard_t *b, int peer, uint64_t upto);
int zcc_sigboard_own(const zcc_sigboard_t *b, uint64_t seq, zcc_op_sig_t *out);
int zcc_sigboard_mirrors(const zcc_sigboard_t *b, int peer);
void zcc_sigboard_put(zcc_sigboard_t *b, int peer, const zcc_op_sig_t *sig);

/*
 * The gate. A mirror is filled beside the data, so a collective that
 * differs across hosts could start on both sides before either rank sees
 * the other's signature, and complete with bytes of the other call. Where
 * a board has mirrors, its connector kernels therefore wait, before they
 * take a byte, for a word in mapped pinned memory to reach their
 * collective's number; the proxy raises it (zcc_sigboard_gate_advance, one
 * thread) to the last number at which every peer with a board (mirrored,
 * and mapped on this host: a rank here that made the other call could
 * otherwise be passed by one that agrees with the far ranks) posted the
 * same signature as this rank. A mismatch leaves the word below it: the caller's
 * or the watchdog's check reports the error and the abort word releases
 * the kernels, which then touch nothing.
 * gate_set: the word for board b (before the board is published); 1 when
 * b has mirrors and will use it, 0 when none (NULL b included).
 */
int zcc_sigboard_gate_set(zcc_sigboard_t *b, uint64_t *word);
/* 1 when the word moved. */
int zcc_sigboard_gate_advance(zcc_sigboard_t *b);

#endif
