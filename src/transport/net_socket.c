/*
 * socket: ranks on different hosts (or where shm is disabled), over TCP.
 * Each rank listens on the bootstrap's interface; the higher rank of a pair
 * connects to the lower, proves the communicator's secret, and names its
 * rank. Sends go straight from the user buffer to the kernel; receives land
 * in the destination, or in a small staging buffer when they reduce.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "reduce.h"
#include "socket.h"
#include "transport.h"

ZCC_PARAM_INT(net_stage_bytes, "NET_STAGE_BYTES", 262144,
              "bytes of the staging buffer a socket receive reduces from")

#define HELLO_MAGIC 0x7a6363736f636b31ULL

typedef struct hello {
  uint64_t magic;
  uint64_t comm_hash;
  int32_t from_rank;
  int32_t to_rank;
} hello_t;

typedef struct sock_state {
  int listen_fd;
  int *pending; /* [nranks]: accepted, authenticated fds not yet claimed */
} sock_state_t;

typedef struct sock_conn {
  int fd;
  char *stage;
  size_t stage_cap, stage_fill;
} sock_conn_t;


static int sock_can_connect(const struct zccComm *comm, const zcc_peer_info_t *self,
                            const zcc_peer_info_t *peer) {
  return peer->net_addr.len > 0 && self->net_addr.len > 0;
}

static zccResult_t sock_comm_setup(struct zccComm *comm, zcc_peer_info_t *self) {
  sock_state_t *st = calloc(1, sizeof(*st));
  if (!st) return zcc_error(zccSystemError, "socket: out of memory");
  st->listen_fd = -1;
  st->pending = malloc(sizeof(int) * (size_t)comm->nranks);
  if (!st->pending) {
    free(st);
    return zcc_error(zccSystemError, "socket: out of memory");
  }
  for (int i = 0; i < comm->nranks; i++) st->pending[i] = -1;
  *zcc_transport_slot(comm, &zcc_transport_socket) = st;
  if (comm->nranks == 1) return zccSuccess;
  zcc_sockaddr_t addr = *zcc_bootstrap_addr(comm->bootstrap);
  zcc_sockaddr_set_port(&addr, 0);
  ZCC_CHECK(zcc_socket_listen(&addr, comm->nranks + 16, &st->listen_fd));
  self->net_addr = addr;
  char buf[ZCC_SOCKADDR_STRLEN];
  ZCC_INFO(NET, "socket transport listening on %s", zcc_sockaddr_str(&addr, buf));
  return zccSuccess;
}

static zccResult_t accept_one(struct zccComm *comm, sock_state_t *st, const zcc_wait_t *w) {
  int fd = -1;
  ZCC_CHECK(zcc_socket_accept(st->listen_fd, &fd, w));
  zcc_wait_t hw = zcc_wait_in(5000, &comm->abort_flag, "socket handshake");
  if (hw.deadline_ns > w->deadline_ns) hw.deadline_ns = w->deadline_ns;
  hello_t h;
  if (zcc_socket_auth_server(fd, comm->secret, comm->hash, &hw) != zccSuccess ||
      zcc_socket_recv_all(fd, &h, sizeof(h), &hw) != zccSuccess ||
      h.magic != HELLO_MAGIC || h.comm_hash != comm->hash || h.to_rank != comm->rank ||
      h.from_rank <= comm->rank || h.from_rank >= comm->nranks ||
      st->pending[h.from_rank] >= 0) {
    ZCC_WARN("socket: dropped a connection that did not prove membership of comm %s",
             comm->name);
    zcc_socket_close(&fd);
    return zccSuccess;
  }
  st->pending[h.from_rank] = fd;
  return zccSuccess;
}

static zccResult_t sock_connect(zcc_conn_t *conn, zcc_connect_phase_t phase) {
  struct zccComm *comm = conn->comm;
  sock_state_t *st = *zcc_transport_slot(comm, &zcc_transport_socket);
  if (phase == ZCC_CONNECT_CREATE) {
    sock_conn_t *s = calloc(1, sizeof(*s));
    if (!s) return zcc_error(zccSystemError, "socket: out of memory");
    s->fd = -1;
    conn->priv = s;
    return zccSuccess;
  }
  if (phase != ZCC_CONNECT_ATTACH) return zccSuccess;
  sock_conn_t *s = conn->priv;
  zcc_wait_t w = zcc_wait_in(60000, &comm->abort_flag, "socket connect");
  if (conn->peer < comm->rank) {
    ZCC_CHECK(zcc_socket_connect(&comm->peers[conn->peer].net_addr, &s->fd, &w));
    ZCC_CHECK(zcc_socket_auth_client(s->fd, comm->secret, comm->hash, &w));
    hello_t h = {HELLO_MAGIC, comm->hash, comm->rank, conn->peer};
    ZCC_CHECK(zcc_socket_send_all(s->fd, &h, sizeof(h), &w));
  } else {
    while (st->pending[conn->peer] < 0) {
      ZCC_CHECK(zcc_wait_check(&w));
      ZCC_CHECK(accept_one(comm, st, &w));
    }
    s->fd = st->pending[conn->peer];
    st->pending[conn->peer] = -1;
  }
  ZCC_INFO(NET, "socket connection to rank %d established", conn->peer);
  return zccSuccess;
}

static zccResult_t sock_progress(zcc_conn_t *conn, zcc_xfer_t *x, int *moved) {
  sock_conn_t *s = conn->priv;
  size_t before = x->done;
  if (!x->is_recv) {
    /* *_some treat *done as the offset already moved within buf. */
    ZCC_CHECK(zcc_socket_send_some(s->fd, x->src, x->avail, &x->done));
  } else if (!x->red) {
    ZCC_CHECK(zcc_socket_recv_some(s->fd, x->dst, x->bytes, &x->done));
  } else {
    size_t tsize = zcc_type_size(x->type);
    if (!s->stage) {
      size_t cap = (size_t)zcc_param_net_stage_bytes();
      if (cap < 4096) cap = 4096;
      cap -= cap % 64;
      s->stage = malloc(cap);
      if (!s->stage) return zcc_error(zccSystemError, "socket: out of memory for staging");
      s->stage_cap = cap;
    }
    size_t want = x->bytes - x->done - s->stage_fill;
    if (want > s->stage_cap - s->stage_fill) want = s->stage_cap - s->stage_fill;
    size_t got = 0;
    ZCC_CHECK(zcc_socket_recv_some(s->fd, s->stage + s->stage_fill, want, &got));
    s->stage_fill += got;
    size_t whole = s->stage_fill - s->stage_fill % tsize;
    if (whole) {
      zcc_reduce((char *)x->dst + x->done, (const char *)x->red + x->done, s->stage,
                 whole / tsize, x->type, x->op);
      x->done += whole;
      memmove(s->stage, s->stage + whole, s->stage_fill - whole);
      s->stage_fill -= whole;
    }
    if (got) *moved = 1;
  }
  if (x->done != before) *moved = 1;
  return zccSuccess;
}

/*
 * Bytes staged or in the kernel's receive queue. End of stream and errors
 * count as pending too: the receive that follows reports them.
 */
static int sock_pending(zcc_conn_t *conn) {
  sock_conn_t *s = conn->priv;
  if (!s || s->fd < 0) return 0;
  if (s->stage_fill) return 1;
  char c;
  ssize_t n = recv(s->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void sock_fail(zcc_conn_t *conn) {
  sock_conn_t *s = conn->priv;
  if (s && s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
}

static void sock_free(zcc_conn_t *conn) {
  sock_conn_t *s = conn->priv;
  if (!s) return;
  zcc_socket_close(&s->fd);
  free(s->stage);
  free(s);
  conn->priv = NULL;
}

static void sock_comm_free(struct zccComm *comm) {
  sock_state_t *st = *zcc_transport_slot(comm, &zcc_transport_socket);
  if (!st) return;
  zcc_socket_close(&st->listen_fd);
  for (int i = 0; i < comm->nranks; i++) zcc_socket_close(&st->pending[i]);
  free(st->pending);
  free(st);
  *zcc_transport_slot(comm, &zcc_transport_socket) = NULL;
}

const zcc_transport_ops_t zcc_transport_socket = {
    .name = "socket",
    .can_connect = sock_can_connect,
    .comm_setup = sock_comm_setup,
    .connect = sock_connect,
    .progress = sock_progress,
    .pending = sock_pending,
    .fail = sock_fail,
    .free = sock_free,
    .comm_free = sock_comm_free,
};
