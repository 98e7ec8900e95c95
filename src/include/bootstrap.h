/*
 * Bootstrap: the unique id, the rendezvous of the ranks at the root, and an
 * out-of-band channel between ranks (allgather, barrier, point-to-point)
 * used while communicators are built.
 *
 * zcc_bootstrap_create_root draws a secret, listens, and serves one
 * rendezvous in a detached thread: each rank connects, proves it holds the
 * secret, and sends {rank, nranks, its own listening address}; once all
 * nranks ranks arrived the root sends every rank the table of addresses and
 * exits. A connection that fails the proof, sends garbage or wrong sizes, or
 * stalls, is dropped without delaying the others. If the ranks do not all
 * arrive within ZCC_INIT_TIMEOUT the root gives up.
 *
 * Ranks then connect in a ring (rank r to r+1), authenticated with the same
 * secret, for allgather and barrier; point-to-point messages use an
 * authenticated connection made on first use.
 */
#ifndef ZCC_BOOTSTRAP_H_
#define ZCC_BOOTSTRAP_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "socket.h"
#include "zcc.h"

/* Layout of zccUniqueId's bytes (fits in ZCC_UNIQUE_ID_BYTES). */
typedef struct zcc_unique_id {
  uint32_t magic;   /* ZCC_UNIQUE_ID_MAGIC */
  uint32_t version; /* ZCC_VERSION_CODE of the creator */
  zcc_sockaddr_t root;
  uint8_t secret[ZCC_SECRET_BYTES];
} zcc_unique_id_t;

#define ZCC_UNIQUE_ID_MAGIC 0x7a636331u

typedef struct zcc_bootstrap zcc_bootstrap_t;

/*
 * Fill `id` and start the root: listen on `addr` if given (port 0: any),
 * else on zcc_socket_pick_addr()'s address. The id names `advertise` as the
 * address ranks connect to (NULL: the bound address; a wildcard bind with a
 * host name others resolve needs it; port 0 takes the bound port).
 * secret: NULL draws a random one.
 */
zccResult_t zcc_bootstrap_create_root(zccUniqueId *id, const zcc_sockaddr_t *addr,
                                      const zcc_sockaddr_t *advertise,
                                      const uint8_t *secret);

/*
 * Rank `rank` of this process gave up its rendezvous on the id whose root
 * context is `context` (its init failed or was aborted): if this process
 * serves that id's root, the root ends now, telling the ranks waiting on
 * it (zccRemoteError), instead of waiting for ZCC_INIT_TIMEOUT with its
 * listener and threads. A root in another process is not affected (it
 * forgets a rank that left and waits on). Never blocks.
 */
void zcc_bootstrap_root_abandon(uint64_t context, int rank);

/* ZCC_INIT_TIMEOUT: how long a rendezvous may take, in ms (<= 0: forever). */
int64_t zcc_bootstrap_init_timeout_ms(void);

/* Decode and validate an id (bad magic -> zccInvalidArgument). */
zccResult_t zcc_bootstrap_id_decode(const zccUniqueId *id, zcc_unique_id_t *out);

/*
 * Join the rendezvous as `rank` of `nranks`. Fails with zccTimeout after
 * timeout_ms if not every rank arrives, zccRemoteError if the root refuses
 * or vanishes, or when *abort becomes non-zero.
 */
zccResult_t zcc_bootstrap_init(const zccUniqueId *id, int rank, int nranks,
                               int64_t timeout_ms, const atomic_int *abort,
                               zcc_bootstrap_t **out);

int zcc_bootstrap_rank(const zcc_bootstrap_t *b);
int zcc_bootstrap_nranks(const zcc_bootstrap_t *b);
/* The secret of the id, for authenticating other connections of this communicator. */
const uint8_t *zcc_bootstrap_secret(const zcc_bootstrap_t *b);
/* A 64-bit hash of the id, the same on every rank; names the communicator. */
uint64_t zcc_bootstrap_hash(const zcc_bootstrap_t *b);
/* The address this rank's bootstrap listens on (its IP is reachable by peers). */
const zcc_sockaddr_t *zcc_bootstrap_addr(const zcc_bootstrap_t *b);

/*
 * Every rank contributes `bytes` at data + rank * bytes; on return data holds
 * all ranks' contributions. Deadline: timeout_ms from the call.
 */
zccResult_t zcc_bootstrap_allgather(zcc_bootstrap_t *b, void *data, size_t bytes,
                                    int64_t timeout_ms);
zccResult_t zcc_bootstrap_barrier(zcc_bootstrap_t *b, int64_t timeout_ms);

/*
 * Tagged point-to-point messages; a recv matches (peer, tag) and the size
 * must equal what was sent (else zccInternalError). Messages from one peer
 * with other tags are kept until asked for.
 */
zccResult_t zcc_bootstrap_send(zcc_bootstrap_t *b, int peer, int tag,
                               const void *data, size_t bytes, int64_t timeout_ms);
zccResult_t zcc_bootstrap_recv(zcc_bootstrap_t *b, int peer, int tag, void *data,
                               size_t bytes, int64_t timeout_ms);

/*
 * zccRemoteError when `peer` is known to be gone: the connection it opened
 * to this rank closed, or the one this rank opened to it did. Never blocks.
 */
zccResult_t zcc_bootstrap_peer_check(zcc_bootstrap_t *b, int peer);
/*
 * The same for every peer with a connection either way (the ring's
 * neighbours at least): for waits in which any member's departure dooms
 * the wait, such as a transport's connect phase, where a rank waits for a
 * peer it has no bootstrap connection to while a neighbour that failed
 * has closed its own. Never blocks.
 */
zccResult_t zcc_bootstrap_any_gone(zcc_bootstrap_t *b);

/*
 * zccRemoteError, naming the peer, once a bootstrap connection of this rank
 * (the ring links made at init, and any opened since) has failed for want
 * of an answer: keepalive probes every ZCC_HEARTBEAT_MS unanswered, or no
 * route. These connections are idle while collectives run, so the kernel's
 * probes keep going on them when the data connections (busy both ways) are
 * not probed: a peer host or link that dies is seen in about 3 heartbeats.
 * An orderly close or a reset (a peer process exiting) is not counted.
 * Never blocks; costs a poll per open outgoing connection.
 */
zccResult_t zcc_bootstrap_link_check(zcc_bootstrap_t *b);

/* Close every connection. */
void zcc_bootstrap_free(zcc_bootstrap_t *b);

/*
 * The rendezvous port zccCommInitFromEnv derives from a launcher's job id
 * when the launcher gives none: a hash of JOB in [ZCC_JOB_PORT_MIN,
 * ZCC_JOB_PORT_MIN + ZCC_JOB_PORT_SPAN). Every rank must compute the same
 * port, on hosts whose settings may differ, so the range is fixed; it ends
 * below 32768, where Linux's default ephemeral range (32768-60999) starts,
 * so no process's outgoing connection holds the port.
 */
#define ZCC_JOB_PORT_MIN 20000
#define ZCC_JOB_PORT_SPAN 12768
int zcc_job_port(const char *job);

#endif /* ZCC_BOOTSTRAP_H_ */
