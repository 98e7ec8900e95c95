/*
 * TCP sockets for the bootstrap and the socket transport: addresses,
 * interface choice, connect/accept with deadlines, full sends and receives,
 * and the shared-secret handshake. Every wait honours a zcc_wait_t.
 */
#ifndef ZCC_SOCKET_H_
#define ZCC_SOCKET_H_

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "wait.h"
#include "zcc.h"

typedef struct zcc_sockaddr {
  union {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
  } u;
  socklen_t len;
} zcc_sockaddr_t;

#define ZCC_SECRET_BYTES 16
#define ZCC_SOCKADDR_STRLEN 64

/*
 * The address this process should listen on (port 0): the interface named
 * by ZCC_SOCKET_IFNAME (a comma list of prefixes, ^ to exclude, = for an exact
 * name, as NCCL_SOCKET_IFNAME), else the first interface that is up and not
 * loopback or docker, else loopback. ZCC_SOCKET_FAMILY=AF_INET/AF_INET6
 * restricts the family.
 */
zccResult_t zcc_socket_pick_addr(zcc_sockaddr_t *out);
/* The same, and the interface's name into ifname (ifname_len bytes; NULL: not wanted). */
zccResult_t zcc_socket_pick_if(zcc_sockaddr_t *out, char *ifname, size_t ifname_len);

/*
 * 1 when addr's host (the port aside) is a loopback address or an address of
 * one of this host's interfaces that is up, else 0 (also when the interfaces
 * cannot be read).
 */
int zcc_sockaddr_is_local(const zcc_sockaddr_t *addr);

/* Parse "host:port", "[v6]:port" or "ipv4:port" (host names resolved). */
zccResult_t zcc_sockaddr_parse(const char *str, zcc_sockaddr_t *out);
/* "a.b.c.d:port" or "[v6]:port" into buf (ZCC_SOCKADDR_STRLEN bytes). */
const char *zcc_sockaddr_str(const zcc_sockaddr_t *addr, char *buf);
uint16_t zcc_sockaddr_port(const zcc_sockaddr_t *addr);
void zcc_sockaddr_set_port(zcc_sockaddr_t *addr, uint16_t port);

/*
 * Listen on addr (port 0: any free port); addr is updated with the bound
 * port. The socket is non-blocking and close-on-exec.
 */
zccResult_t zcc_socket_listen(zcc_sockaddr_t *addr, int backlog, int *fd);

/* Connect, retrying refused and unreachable attempts until the wait ends. */
zccResult_t zcc_socket_connect(const zcc_sockaddr_t *addr, int *fd,
                               const zcc_wait_t *w);
/* As zcc_socket_connect, to a listener known to have been up (a peer's
   bootstrap after the rendezvous): a refusal means it closed, and is
   zccRemoteError at once instead of a retry until the wait ends. */
zccResult_t zcc_socket_connect_listening(const zcc_sockaddr_t *addr, int *fd,
                                         const zcc_wait_t *w);

/* TCP_NODELAY, and the heartbeat of ZCC_HEARTBEAT_MS (keepalive probes), on
   a connected socket. */
void zcc_socket_tune(int fd);
/* Accept one connection (non-blocking fd returned, tuned: zcc_socket_tune). */
zccResult_t zcc_socket_accept(int listen_fd, int *fd, const zcc_wait_t *w);

/*
 * Send or receive exactly `bytes`. A closed or reset peer gives
 * zccRemoteError; the wait's end gives zccTimeout or zccRemoteError.
 */
zccResult_t zcc_socket_send_all(int fd, const void *buf, size_t bytes,
                                const zcc_wait_t *w);
zccResult_t zcc_socket_recv_all(int fd, void *buf, size_t bytes,
                                const zcc_wait_t *w);

/*
 * Non-blocking progress: moves what it can, adds it to *done; returns
 * zccRemoteError if the peer closed or reset the connection.
 */
zccResult_t zcc_socket_send_some(int fd, const void *buf, size_t bytes,
                                  size_t *done);
zccResult_t zcc_socket_recv_some(int fd, void *buf, size_t bytes, size_t *done);

/*
 * Mutual proof of a shared secret (challenge-response with HMAC-SHA256 over
 * fresh nonces; the secret never crosses the wire). `context` binds the proof
 * to a purpose (e.g. the communicator's hash), so a proof for one
 * communicator is refused by another. A failed proof gives zccRemoteError.
 */
zccResult_t zcc_socket_auth_client(int fd, const uint8_t secret[ZCC_SECRET_BYTES],
                                   uint64_t context, const zcc_wait_t *w);
zccResult_t zcc_socket_auth_server(int fd, const uint8_t secret[ZCC_SECRET_BYTES],
                                   uint64_t context, const zcc_wait_t *w);

/*
 * The server side without blocking, one step per call, for a poll loop
 * that serves many connections at once (the bootstrap gate): reads what has
 * arrived, answers when a message is complete. Returns 1 when the client
 * proved the secret, 0 when it needs more bytes (poll for POLLIN), -1 on
 * failure (last error set; the caller drops the connection). Start from a
 * zeroed state.
 */
typedef struct zcc_auth_server_state {
  int phase;       /* 0: reading HELLO, 1: reading PROOF, 2: done */
  size_t got;
  uint8_t in[56];  /* one message */
  uint8_t nc[16], ns[16];
} zcc_auth_server_state_t;
int zcc_socket_auth_server_step(int fd, zcc_auth_server_state_t *st,
                                const uint8_t secret[ZCC_SECRET_BYTES], uint64_t context);

void zcc_socket_close(int *fd);

/* FNV-1a: a quick 64-bit hash of bytes, chained from h (start with
   ZCC_FNV_OFFSET); for comparing layouts and graphs, not for security. */
#define ZCC_FNV_OFFSET 1469598103934665603ull
static inline uint64_t zcc_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* Cryptographic helpers (src/misc/sha256.c). */
void zcc_sha256(const void *data, size_t bytes, uint8_t out[32]);
void zcc_hmac_sha256(const uint8_t *key, size_t key_bytes, const void *data,
                     size_t bytes, uint8_t out[32]);
/* Fill with bytes from getrandom(2) (or /dev/urandom). */
zccResult_t zcc_random_bytes(void *buf, size_t bytes);

#endif /* ZCC_SOCKET_H_ */
