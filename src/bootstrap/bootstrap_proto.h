/*
 * Private to src/bootstrap: wire formats shared by the root
 * (bootstrap_root.c) and the ranks (bootstrap.c), and the gate that
 * authenticates accepted connections for both.
 */
#ifndef ZCC_BOOTSTRAP_PROTO_H_
#define ZCC_BOOTSTRAP_PROTO_H_

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "bootstrap.h"

#define HANDSHAKE_MS 10000  /* a connection must authenticate within this */
#define ROOT_SEND_MS 10000  /* the root's replies to ranks */
#define SLICE_MS 100

#define ROOT_CONTEXT_SALT 0x726f6f7400000000ull /* "root" */
#define INFO_MAGIC 0x7a636969u                  /* rank -> root */
#define REPLY_MAGIC 0x7a636972u                 /* root -> rank */
#define HELLO_MAGIC 0x7a636968u                 /* rank -> rank, once */
#define MSG_MAGIC 0x7a63636du                   /* rank -> rank, each message */

/*
 * Messages, after the handshake of socket.c (all integers big-endian):
 *   rank -> root  INFO   {magic, version, rank, nranks, wire address}
 *   root -> rank  REPLY  {magic, result, nranks, message[160]}, then on
 *                        success nranks wire addresses
 *   rank -> rank  HELLO  {magic, rank, nranks}, once per connection
 *                 MSG    {magic, kind, tag, u64 size}, then size bytes
 */
#define WIRE_ADDR_BYTES 24
#define INFO_BYTES (16 + WIRE_ADDR_BYTES)
#define REPLY_MSG_BYTES 160
#define REPLY_BYTES (12 + REPLY_MSG_BYTES)
#define HELLO_BYTES 12
#define MSG_HDR_BYTES 20
#define GATE_HELLO_MAX INFO_BYTES

enum { KIND_USER = 1, KIND_RING = 2 };

/* ---- wire encoding (big-endian) ---- */

static inline void put32(uint8_t *p, uint32_t v) {
  v = htonl(v);
  memcpy(p, &v, 4);
}

static inline uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return ntohl(v);
}

static inline void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p + 4, (uint32_t)v);
}

static inline uint64_t get64(const uint8_t *p) {
  return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* Addresses as 24 bytes: family (4 or 6), port, address, scope id. */
void zcc_bootstrap_addr_encode(const zcc_sockaddr_t *a, uint8_t *p);
/* 0 on success, -1 for an unknown family or a zero port. */
int zcc_bootstrap_addr_decode(const uint8_t *p, zcc_sockaddr_t *a);
/* Re-record the thread's last error as "<doing>: <last error>". */
zccResult_t zcc_bootstrap_error_in(zccResult_t res, const char *doing);
/* The 64-bit name of a communicator, derived from its id. */
uint64_t zcc_bootstrap_id_hash(const zcc_unique_id_t *u);

/*
 * The gate: every connection accepted on a listening socket is
 * authenticated (and its fixed-size hello read) by one worker thread per
 * gate that serves all of them at once without blocking (poll and a state
 * machine each, zcc_socket_auth_server_step), each within HANDSHAKE_MS; so a
 * stranger who stalls or sends garbage costs a file descriptor for a while
 * and never holds up the owner or another connection, however many come.
 * The owner sees only connections that proved the secret; it polls
 * gate->wake[0].
 */
typedef struct gate_conn {
  struct gate_conn *next;
  struct gate *gate;
  int fd;
  int done;              /* worker: finished (ready or dropped) */
  int64_t deadline_ns;
  zcc_auth_server_state_t auth;
  size_t hello_got;
  char from[ZCC_SOCKADDR_STRLEN];
  uint8_t hello[GATE_HELLO_MAX];
} gate_conn_t;

typedef struct gate {
  pthread_mutex_t lock;
  atomic_int stop;
  int wake[2];           /* worker -> owner */
  int kick[2];           /* owner -> worker: new connections, stop */
  pthread_t worker;
  int worker_started;
  gate_conn_t *incoming; /* accepted, not yet seen by the worker */
  gate_conn_t *ready;    /* authenticated, hello received */
  uint8_t secret[ZCC_SECRET_BYTES];
  uint64_t context;
  size_t hello_bytes;
  int64_t deadline_ns; /* the owner's own end, or INT64_MAX */
  const char *owner;   /* for messages */
} gate_t;

zccResult_t zcc_bootstrap_gate_init(gate_t *g, const uint8_t *secret,
                                    uint64_t context, size_t hello_bytes,
                                    int64_t deadline_ns, const char *owner);
/* Wake the owner's poll. */
void zcc_bootstrap_gate_wake(gate_t *g);
/* Whether another handshake may start: always (no fixed number of slots). */
int zcc_bootstrap_gate_has_room(gate_t *g);
/* Accept what is pending on listen_fd and start a handshake thread for each. */
void zcc_bootstrap_gate_accept(gate_t *g, int listen_fd);
/* Drain the wake pipe; the authenticated connections, oldest first. */
gate_conn_t *zcc_bootstrap_gate_take(gate_t *g);
/* Stop the handshakes, wait for their threads, close what is left. */
void zcc_bootstrap_gate_stop(gate_t *g);

#endif /* ZCC_BOOTSTRAP_PROTO_H_ */
