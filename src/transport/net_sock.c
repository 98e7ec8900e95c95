/*
 * The `socket` network plug-in (net.h): ZCC_NET_SOCKS TCP connections per
 * comm (1 by default), each authenticated like ib's side channel, then
 * in-order messages, sent eagerly: an isend writes a header {seq, size} and
 * the first piece of the payload on the first connection in one sendmsg,
 * and piece k on connection k, without waiting for the receive (TCP's own
 * window is the flow control, as in the socket transport and NCCL's socket
 * plug-in). A message of at least SK_MIN_PIECE bytes a connection is split
 * into equal pieces (whole 4 KiB pages), so that several streams fill a
 * link one TCP stream cannot. Every connection carries its pieces in
 * message order. The receiver reads the first connection through a small
 * buffer (a header and a small payload in one recv; a large payload's rest
 * straight into the receive), matches each message to the receive posted
 * in the same place, and refuses one larger than that receive
 * (zccInvalidUsage on the receiver; the sender's messages went). Everything
 * is non-blocking: every call moves what the sockets take and returns.
 *
 * Connecting: the connector's connections each say {index, count, token}
 * in their hello (the token is random per comm); the listener holds each
 * proven connection until all of one token's have arrived, then hands them
 * out as one recv comm.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "net.h"
#include "param.h"
#include "socket.h"

ZCC_PARAM_INT(net_socks, "NET_SOCKS", 1,
              "TCP connections per connection of the net transport's socket plug-in (1 to 8; "
              "the connecting side's count holds): a message of at least 64 KiB per "
              "connection is split across them, to fill a link one TCP stream cannot (as "
              "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS)");

#define SK_HANDLE_MAGIC 0x7a63736bu /* "zcsk" */
#define SK_SIDE_MAGIC 0x7a637373u
#define SK_DEPTH ZCC_NET_MAX_REQUESTS
#define SK_PENDING 64 /* proven connections a listener holds for their siblings */
#define SK_PROOF_MS 5000 /* an accepted connection proves itself within this */
#define SK_MAX_SOCKS 8
#define SK_MIN_PIECE (64 * 1024)
#define SK_RBUF 4096 /* the receive side's buffer on the first connection */

typedef struct {
  uint32_t magic;
  zcc_sockaddr_t addr;
  void *stage;
} sk_handle_t;
_Static_assert(sizeof(sk_handle_t) <= ZCC_NET_HANDLE_BYTES,
               "socket handle too large");

typedef struct {
  uint64_t seq, size;
} sk_hdr_t;

struct sk_comm;

typedef struct {
  struct sk_comm *comm;
  int used, done;
  uint64_t seq;
  char *data;
  size_t size;      /* the message's (receive: once its header came) */
  size_t cap;       /* receive: the posted size */
  int hdr;          /* receive: its header arrived (size known) */
  int left;         /* connections whose part of it has not gone or come yet */
} sk_req_t;

typedef struct sk_comm {
  int fd, is_send, failed, stage;
  int64_t deadline_ns; /* accepted, unproven: dropped after this */
  zcc_net_auth_t auth;
  size_t off;
  uint8_t cnonce[16], snonce[16];
  union {
    struct {
      uint32_t magic, version;
      uint8_t nonce[16];
      uint32_t index, count; /* this connection's, of the comm's */
      uint8_t token[16];     /* the comm's (random) */
    } hello;
    struct {
      uint8_t nonce[16];
      uint8_t mac[32];
    } chal;
    uint8_t proof[32];
    uint32_t ready;
  } msg;
  uint64_t seq;  /* next request number */
  uint64_t head; /* oldest request not yet finished on the wire */
  /* the connections: fds[0] is fd (clear-to-send entries, headers and the
     first piece), fds[k] carries piece k; each at request cur[k], off[k]
     bytes into its piece */
  int nfds;
  int fds[SK_MAX_SOCKS];
  uint64_t cur[SK_MAX_SOCKS];
  size_t poff[SK_MAX_SOCKS];
  /* connecting: this connection's place among the comm's, and its token;
     the connector's other connections until they are up */
  uint32_t index, count;
  uint8_t token[16];
  struct sk_comm *more[SK_MAX_SOCKS];
  sk_req_t reqs[SK_DEPTH];
  /* send side: the header of the request connection 0 is on, and whether
     all of it went */
  size_t out_off;
  int out_hdr_sent;
  /* receive side: what connection 0 brought beyond the requests taken so
     far, [rb_lo, rb_hi) of rb */
  size_t rb_lo, rb_hi;
  char rb[SK_RBUF];
} sk_comm_t;

typedef struct {
  int fd;
  zcc_net_auth_t auth;
  sk_comm_t **pending; /* proving themselves, each until its deadline: no */
  int npending, cap_pending; /* fixed number, so strangers push nobody out */
  sk_comm_t *proven[SK_PENDING];  /* proven, waiting for the rest of their comm's */
} sk_listen_t;

static zccResult_t sk_init(void) {
  return zccSuccess;
}

static zccResult_t sk_devices(int *ndev) {
  if (!ndev)
    return zcc_error(zccInvalidArgument, "socket: ndev is NULL");
  zcc_sockaddr_t a;
  *ndev = zcc_socket_pick_addr(&a) == zccSuccess ? 1 : 0;
  return zccSuccess;
}

static zccResult_t sk_get_properties(int dev, zcc_net_props_t *props) {
  zcc_sockaddr_t a;
  char s[ZCC_SOCKADDR_STRLEN];
  if (dev != 0 || !props)
    return zcc_error(zccInvalidArgument, "socket: no device %d", dev);
  ZCC_CHECK(zcc_socket_pick_addr(&a));
  memset(props, 0, sizeof(*props));
  zcc_sockaddr_set_port(&a, 0);
  snprintf(props->name, sizeof(props->name), "tcp %s", zcc_sockaddr_str(&a, s));
  props->ptr_support = ZCC_NET_PTR_HOST;
  props->max_requests = SK_DEPTH;
  props->max_message = (size_t)1 << 31;
  props->latency_us = 20;
  props->eager = 1;
  return zccSuccess;
}

static sk_comm_t *sk_comm_new(int fd) {
  zcc_socket_tune(fd); /* a header and its payload are two writes: no Nagle wait
                          between them; and the heartbeat */
  sk_comm_t *c = calloc(1, sizeof(*c));
  if (!c)
    return NULL;
  c->fd = fd;
  c->nfds = 1;
  c->fds[0] = fd;
  c->count = 1;
  for (int i = 0; i < SK_DEPTH; i++)
    c->reqs[i].comm = c;
  return c;
}

static void sk_comm_free(sk_comm_t *c) {
  if (!c)
    return;
  for (int k = 0; k < c->nfds; k++)
    if (c->fds[k] >= 0)
      close(c->fds[k]);
  for (int k = 0; k < SK_MAX_SOCKS; k++)
    sk_comm_free(c->more[k]);
  free(c);
}

/* Piece k of a message of size bytes over n connections: [*a, *b). */
static void sk_piece(size_t size, int k, int n, size_t *a, size_t *b) {
  size_t per = size;
  if (n > 1 && size >= (size_t)n * SK_MIN_PIECE)
    per = ((size + (size_t)n - 1) / (size_t)n + 4095) / 4096 * 4096;
  size_t lo = (size_t)k * per;
  *a = lo < size ? lo : size;
  *b = lo + per < size ? lo + per : size;
}

/* Connections with something of a message of size bytes (the first always:
   its header). */
static int sk_parts(size_t size, int n) {
  int parts = 1;
  for (int k = 1; k < n; k++) {
    size_t a, b;
    sk_piece(size, k, n, &a, &b);
    parts += b > a;
  }
  return parts;
}

static zccResult_t sk_listen(int dev, const zcc_net_auth_t *auth, void *handle,
                             void **listen_comm) {
  if (dev != 0 || !auth || !handle || !listen_comm)
    return zcc_error(zccInvalidArgument, "socket listen: bad argument");
  sk_listen_t *l = calloc(1, sizeof(*l));
  if (!l)
    return zcc_error(zccSystemError, "socket: out of memory");
  sk_handle_t h;
  memset(&h, 0, sizeof(h));
  zccResult_t res;
  ZCC_CHECK_GOTO(zcc_socket_pick_addr(&h.addr), res, fail);
  zcc_sockaddr_set_port(&h.addr, 0);
  /* a deep backlog: strangers queued ahead of a peer must not get it dropped */
  ZCC_CHECK_GOTO(zcc_socket_listen(&h.addr, 4096, &l->fd), res, fail);
  h.magic = SK_HANDLE_MAGIC;
  l->auth = *auth;
  memset(handle, 0, ZCC_NET_HANDLE_BYTES);
  memcpy(handle, &h, sizeof(h));
  *listen_comm = l;
  return zccSuccess;
fail:
  free(l);
  return res;
}

/* A new connection toward the handle's listener: its socket, connect() begun. */
static zccResult_t sk_dial(const sk_handle_t *h, const zcc_net_auth_t *auth, sk_comm_t **out) {
  char as[ZCC_SOCKADDR_STRLEN];
  int fd = socket(h->addr.u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return zcc_error(zccSystemError, "socket connect: socket failed: %s", strerror(errno));
  sk_comm_t *c = sk_comm_new(fd);
  if (!c) {
    close(fd);
    return zcc_error(zccSystemError, "socket: out of memory");
  }
  c->is_send = 1;
  c->auth = *auth;
  zccResult_t res = zccSuccess;
  if (connect(fd, &h->addr.u.sa, h->addr.len) != 0 && errno != EINPROGRESS)
    res = zcc_error(zccRemoteError, "socket connect to %s failed: %s",
                    zcc_sockaddr_str(&h->addr, as), strerror(errno));
  else
    res = zcc_random_bytes(c->cnonce, 16);
  if (res != zccSuccess) {
    sk_comm_free(c);
    return res;
  }
  *out = c;
  return zccSuccess;
}

/* A connection's proof exchange as far as it goes now: *done once it is up. */
static zccResult_t sk_dial_step(sk_comm_t *c, const sk_handle_t *h, int *done) {
  char as[ZCC_SOCKADDR_STRLEN];
  *done = c->stage == 5;
  while (!*done) {
    int r = 1;
    switch (c->stage) {
    case 0: {
      struct pollfd p = {c->fd, POLLOUT, 0};
      if (poll(&p, 1, 0) <= 0)
        return zccSuccess;
      int err = 0;
      socklen_t l = sizeof(err);
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
      if (err)
        return zcc_error(zccRemoteError, "socket connect to %s failed: %s",
                         zcc_sockaddr_str(&h->addr, as), strerror(err));
      c->msg.hello.magic = SK_SIDE_MAGIC;
      c->msg.hello.version = 2;
      memcpy(c->msg.hello.nonce, c->cnonce, 16);
      c->msg.hello.index = c->index;
      c->msg.hello.count = c->count;
      memcpy(c->msg.hello.token, c->token, 16);
      break;
    }
    case 1:
      r = zcc_net_xfer(c->fd, &c->msg.hello, sizeof(c->msg.hello), &c->off, 1);
      break;
    case 2:
      r = zcc_net_xfer(c->fd, &c->msg.chal, sizeof(c->msg.chal), &c->off, 0);
      if (r == 1) {
        uint8_t want[32];
        memcpy(c->snonce, c->msg.chal.nonce, 16);
        zcc_net_mac(&c->auth, "zcc-net-sk", 's', c->cnonce, c->snonce, want);
        if (!zcc_net_mac_equal(want, c->msg.chal.mac))
          return zcc_error(zccRemoteError,
                           "socket connect to %s: the listener did not prove "
                           "the communicator's secret",
                           zcc_sockaddr_str(&h->addr, as));
        zcc_net_mac(&c->auth, "zcc-net-sk", 'c', c->cnonce, c->snonce, c->msg.proof);
      }
      break;
    case 3:
      r = zcc_net_xfer(c->fd, c->msg.proof, sizeof(c->msg.proof), &c->off, 1);
      break;
    case 4:
      r = zcc_net_xfer(c->fd, &c->msg.ready, sizeof(uint32_t), &c->off, 0);
      if (r == 1 && c->msg.ready != SK_SIDE_MAGIC)
        return zcc_error(zccRemoteError, "socket connect to %s: bad answer",
                         zcc_sockaddr_str(&h->addr, as));
      break;
    }
    if (r < 0)
      return zcc_error(zccRemoteError,
                       "socket connect to %s: the listener closed the connection",
                       zcc_sockaddr_str(&h->addr, as));
    if (r == 0)
      return zccSuccess;
    c->stage++;
    *done = c->stage == 5;
  }
  return zccSuccess;
}

static zccResult_t sk_connect(int dev, const zcc_net_auth_t *auth, void *handle,
                              void **send_comm) {
  if (!handle || !send_comm || !auth || dev != 0)
    return zcc_error(zccInvalidArgument, "socket connect: bad argument");
  *send_comm = NULL;
  sk_handle_t *h = handle;
  if (h->magic != SK_HANDLE_MAGIC)
    return zcc_error(zccInvalidArgument, "socket connect: not a socket handle");
  sk_comm_t *c = h->stage;
  zccResult_t res = zccSuccess;
  if (!c) {
    int64_t n = zcc_param_net_socks();
    if (n < 1 || n > SK_MAX_SOCKS)
      return zcc_error(zccInvalidArgument, "ZCC_NET_SOCKS=%lld: expected 1 to %d",
                       (long long)n, SK_MAX_SOCKS);
    ZCC_CHECK(sk_dial(h, auth, &c));
    c->count = (uint32_t)n;
    res = zcc_random_bytes(c->token, 16);
    if (res != zccSuccess)
      goto fail;
    h->stage = c;
  }
  /* the first connection, then the others, each proven on its own */
  int done = 0;
  ZCC_CHECK_GOTO(sk_dial_step(c, h, &done), res, fail);
  for (uint32_t k = 1; k < c->count && done; k++) {
    sk_comm_t *m = c->more[k];
    if (!m) {
      ZCC_CHECK_GOTO(sk_dial(h, auth, &c->more[k]), res, fail);
      m = c->more[k];
      m->index = k;
      m->count = c->count;
      memcpy(m->token, c->token, 16);
    }
    ZCC_CHECK_GOTO(sk_dial_step(m, h, &done), res, fail);
  }
  if (!done)
    return zccSuccess;
  for (uint32_t k = 1; k < c->count; k++) {
    c->fds[k] = c->more[k]->fd;
    c->more[k]->nfds = 0; /* its fd is the comm's now */
    sk_comm_free(c->more[k]);
    c->more[k] = NULL;
  }
  c->nfds = (int)c->count;
  h->stage = NULL;
  *send_comm = c;
  return zccSuccess;
fail:
  h->stage = NULL;
  sk_comm_free(c);
  return res;
}

/* 1 accepted, 0 not yet, -1 drop. */
static int sk_accept_step(sk_listen_t *l, sk_comm_t *p) {
  for (;;) {
    int r = 1;
    switch (p->stage) {
    case 0:
      r = zcc_net_xfer(p->fd, &p->msg.hello, sizeof(p->msg.hello), &p->off, 0);
      if (r == 1) {
        if (p->msg.hello.magic != SK_SIDE_MAGIC || p->msg.hello.version != 2 ||
            p->msg.hello.count < 1 || p->msg.hello.count > SK_MAX_SOCKS ||
            p->msg.hello.index >= p->msg.hello.count)
          return -1;
        p->index = p->msg.hello.index;
        p->count = p->msg.hello.count;
        memcpy(p->token, p->msg.hello.token, 16);
        memcpy(p->cnonce, p->msg.hello.nonce, 16);
        if (zcc_random_bytes(p->snonce, 16) != zccSuccess)
          return -1;
        memcpy(p->msg.chal.nonce, p->snonce, 16);
        zcc_net_mac(&l->auth, "zcc-net-sk", 's', p->cnonce, p->snonce,
                    p->msg.chal.mac);
      }
      break;
    case 1:
      r = zcc_net_xfer(p->fd, &p->msg.chal, sizeof(p->msg.chal), &p->off, 1);
      break;
    case 2:
      r = zcc_net_xfer(p->fd, p->msg.proof, sizeof(p->msg.proof), &p->off, 0);
      if (r == 1) {
        uint8_t want[32];
        zcc_net_mac(&l->auth, "zcc-net-sk", 'c', p->cnonce, p->snonce, want);
        if (!zcc_net_mac_equal(want, p->msg.proof)) {
          ZCC_INFO(NET, "socket: dropped a connection that did not prove the "
                        "communicator's secret");
          return -1;
        }
        p->msg.ready = SK_SIDE_MAGIC;
      }
      break;
    case 3:
      r = zcc_net_xfer(p->fd, &p->msg.ready, sizeof(uint32_t), &p->off, 1);
      if (r == 1)
        return 1;
      break;
    }
    if (r < 0)
      return -1;
    if (r == 0)
      return 0;
    p->stage++;
  }
}

/* A proven connection of a comm of several: held until its siblings come
   (the oldest held one makes room). */
static void sk_hold(sk_listen_t *l, sk_comm_t *p) {
  int slot = -1;
  for (int i = 0; i < SK_PENDING && slot < 0; i++)
    if (!l->proven[i])
      slot = i;
  if (slot < 0) {
    sk_comm_free(l->proven[0]);
    memmove(l->proven, l->proven + 1, sizeof(l->proven[0]) * (SK_PENDING - 1));
    slot = SK_PENDING - 1;
  }
  l->proven[slot] = p;
}

/* A comm whose every connection is proven and held, as one recv comm; or NULL. */
static sk_comm_t *sk_assemble(sk_listen_t *l) {
  for (int i = 0; i < SK_PENDING; i++) {
    sk_comm_t *c = l->proven[i];
    if (!c || c->index != 0)
      continue;
    int at[SK_MAX_SOCKS], have = 1;
    at[0] = i;
    for (uint32_t k = 1; k < c->count; k++) {
      at[k] = -1;
      for (int j = 0; j < SK_PENDING && at[k] < 0; j++) {
        sk_comm_t *m = l->proven[j];
        if (m && m->index == k && m->count == c->count && memcmp(m->token, c->token, 16) == 0)
          at[k] = j;
      }
      have += at[k] >= 0;
    }
    if (have != (int)c->count)
      continue;
    for (uint32_t k = 1; k < c->count; k++) {
      sk_comm_t *m = l->proven[at[k]];
      c->fds[k] = m->fd;
      m->nfds = 0; /* its fd is the comm's now */
      sk_comm_free(m);
      l->proven[at[k]] = NULL;
    }
    c->nfds = (int)c->count;
    l->proven[i] = NULL;
    return c;
  }
  return NULL;
}

static zccResult_t sk_accept(void *listen_comm, void **recv_comm) {
  sk_listen_t *l = listen_comm;
  if (!l || !recv_comm)
    return zcc_error(zccInvalidArgument, "socket accept: NULL argument");
  *recv_comm = NULL;
  int64_t now = zcc_now_ns();
  for (;;) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      break;
    if (l->npending == l->cap_pending) {
      int cap = l->cap_pending ? 2 * l->cap_pending : 16;
      sk_comm_t **np = realloc(l->pending, sizeof(*np) * (size_t)cap);
      if (!np) {
        close(fd);
        return zcc_error(zccSystemError, "socket: out of memory");
      }
      l->pending = np;
      l->cap_pending = cap;
    }
    sk_comm_t *c = sk_comm_new(fd);
    if (!c) {
      close(fd);
      return zcc_error(zccSystemError, "socket: out of memory");
    }
    c->deadline_ns = now + SK_PROOF_MS * 1000000LL;
    l->pending[l->npending++] = c;
  }
  /* from the back: a finished one's place takes the last, already stepped */
  for (int i = l->npending - 1; i >= 0; i--) {
    sk_comm_t *p = l->pending[i];
    int r = sk_accept_step(l, p);
    if (r == 0 && now >= p->deadline_ns)
      r = -1; /* silent too long: a stranger */
    if (r != 0)
      l->pending[i] = l->pending[--l->npending];
    if (r < 0) {
      sk_comm_free(p);
    } else if (r == 1) {
      p->stage = 0;
      if (p->count == 1) {
        *recv_comm = p;
        return zccSuccess;
      }
      sk_hold(l, p);
    }
  }
  *recv_comm = sk_assemble(l);
  return zccSuccess;
}

static zccResult_t sk_reg_mr(void *comm, void *data, size_t size, int type,
                             void **mhandle) {
  (void)data, (void)size;
  if (!comm || !mhandle)
    return zcc_error(zccInvalidArgument, "socket reg_mr: NULL argument");
  if (type != ZCC_NET_PTR_HOST)
    return zcc_error(
        zccInvalidArgument,
        "socket reg_mr: memory type %d not supported (host memory only)", type);
  *mhandle = comm; /* nothing to register: the kernel copies */
  return zccSuccess;
}

static zccResult_t sk_dereg_mr(void *comm, void *mhandle) {
  if (!comm || mhandle != comm)
    return zcc_error(zccInvalidArgument, "socket dereg_mr: not a registration");
  return zccSuccess;
}

static zccResult_t sk_fail(sk_comm_t *c, const char *what) {
  c->failed = 1;
  return zcc_error(zccRemoteError, "socket: %s", what);
}

/* Move connection k's piece (k >= 1) of request q as far as it goes
   (sending or receiving): 1 done, 0 more to come (the offset is kept), -1
   the peer closed. */
static int sk_piece_move(sk_comm_t *c, sk_req_t *q, int k, int sending) {
  size_t a, b;
  sk_piece(q->size, k, c->nfds, &a, &b);
  if (b > a) {
    size_t off = c->poff[k];
    int r = zcc_net_xfer(c->fds[k], q->data + a, b - a, &off, sending);
    if (r <= 0) {
      if (r == 0)
        c->poff[k] = off;
      return r;
    }
    q->left--;
  }
  c->poff[k] = 0;
  return 1;
}

/* Connection 0 of a send: request q's header and first piece, in one
   sendmsg, as far as the socket takes them: 1 all went, 0 more to go (the
   offsets are kept), -1 the peer is gone. */
static int sk_send_first(sk_comm_t *c, sk_req_t *q) {
  size_t a, b;
  sk_piece(q->size, 0, c->nfds, &a, &b);
  sk_hdr_t h = {q->seq, q->size};
  for (;;) {
    struct iovec iov[2];
    int n = 0;
    size_t hleft = sizeof(h) - c->out_off, dleft = b - a - c->poff[0];
    if (hleft)
      iov[n++] = (struct iovec){(char *)&h + c->out_off, hleft};
    if (dleft)
      iov[n++] = (struct iovec){q->data + a + c->poff[0], dleft};
    if (!n)
      break;
    ssize_t r = sendmsg(c->fds[0], &(struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)n},
                        MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    size_t hh = (size_t)r < hleft ? (size_t)r : hleft;
    c->out_off += hh;
    c->poff[0] += (size_t)r - hh;
  }
  c->out_off = 0;
  c->poff[0] = 0;
  q->left--;
  return 1;
}

/* Send side: connection k's part of the requests it has not finished,
   oldest first. */
static zccResult_t sk_send_part(sk_comm_t *c, int k) {
  while (c->cur[k] < c->seq) {
    sk_req_t *q = &c->reqs[c->cur[k] % SK_DEPTH];
    int r = k == 0 ? sk_send_first(c, q) : sk_piece_move(c, q, k, 1);
    if (r < 0)
      return sk_fail(c, "the peer closed the connection");
    if (r == 0)
      return zccSuccess;
    c->cur[k]++;
  }
  return zccSuccess;
}

/* Receive side: more of connection 0 into rb (what is there moved to its
   front): 1 something came, 0 nothing now, -1 the peer closed. */
static int sk_fill(sk_comm_t *c) {
  if (c->rb_lo) {
    memmove(c->rb, c->rb + c->rb_lo, c->rb_hi - c->rb_lo);
    c->rb_hi -= c->rb_lo;
    c->rb_lo = 0;
  }
  for (;;) {
    ssize_t r = recv(c->fds[0], c->rb + c->rb_hi, SK_RBUF - c->rb_hi, MSG_DONTWAIT);
    if (r > 0) {
      c->rb_hi += (size_t)r;
      return 1;
    }
    if (r < 0 && errno == EINTR)
      continue;
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
  }
}

/* Receive side, rb empty: up to need bytes of a payload straight into dst
   (the offset kept in poff[0]), and what follows them into rb in the same
   call (a failure record behind the data is seen with it): 1 something
   came, 0 nothing now, -1 the peer closed. */
static int sk_read_direct(sk_comm_t *c, char *dst, size_t need) {
  c->rb_lo = c->rb_hi = 0;
  struct iovec iov[2] = {{dst, need}, {c->rb, SK_RBUF}};
  for (;;) {
    ssize_t r = recvmsg(c->fds[0], &(struct msghdr){.msg_iov = iov, .msg_iovlen = 2},
                        MSG_DONTWAIT);
    if (r > 0) {
      size_t d = (size_t)r < need ? (size_t)r : need;
      c->poff[0] += d;
      c->rb_hi = (size_t)r - d;
      return 1;
    }
    if (r < 0 && errno == EINTR)
      continue;
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
  }
}

/* Connection 0 of a receive: request q's header, then its first piece,
   from rb and then the socket (a rest of SK_RBUF or more straight into the
   receive); *done once all of it came. */
static zccResult_t sk_recv_first(sk_comm_t *c, sk_req_t *q, int *done) {
  *done = 0;
  while (!q->hdr) {
    if (c->rb_hi - c->rb_lo >= sizeof(sk_hdr_t)) {
      sk_hdr_t h;
      memcpy(&h, c->rb + c->rb_lo, sizeof(h));
      c->rb_lo += sizeof(h);
      if (h.seq != q->seq)
        return sk_fail(c, "the peer sent a bad header");
      if (h.size > q->cap) {
        c->failed = 1;
        return zcc_error(zccInvalidUsage,
                         "socket: the peer sent %llu bytes, larger than the receive of %zu bytes",
                         (unsigned long long)h.size, q->cap);
      }
      q->size = h.size;
      q->left = sk_parts(q->size, c->nfds);
      q->hdr = 1;
      break;
    }
    int r = sk_fill(c);
    if (r < 0)
      return sk_fail(c, "the peer closed the connection");
    if (r == 0)
      return zccSuccess;
  }
  size_t a, b;
  sk_piece(q->size, 0, c->nfds, &a, &b);
  while (c->poff[0] < b - a) {
    size_t need = b - a - c->poff[0], have = c->rb_hi - c->rb_lo;
    int r = 1;
    if (have) {
      size_t t = have < need ? have : need;
      memcpy(q->data + a + c->poff[0], c->rb + c->rb_lo, t);
      c->rb_lo += t;
      c->poff[0] += t;
    } else if (need < SK_RBUF) {
      r = sk_fill(c);
    } else {
      r = sk_read_direct(c, q->data + a + c->poff[0], need);
    }
    if (r < 0)
      return sk_fail(c, "the peer closed the connection");
    if (r == 0)
      return zccSuccess;
  }
  c->poff[0] = 0;
  q->left--;
  *done = 1;
  return zccSuccess;
}

/* Receive side: connection k's part of the posted requests (k = 0: each
   header, then the first piece; the others wait for their request's header,
   which says how the message is cut). */
static zccResult_t sk_recv_part(sk_comm_t *c, int k) {
  while (c->cur[k] < c->seq) {
    sk_req_t *q = &c->reqs[c->cur[k] % SK_DEPTH];
    if (k == 0) {
      int done = 0;
      ZCC_CHECK(sk_recv_first(c, q, &done));
      if (!done)
        return zccSuccess;
    } else {
      if (!q->hdr)
        return zccSuccess; /* its header has not come yet */
      int r = sk_piece_move(c, q, k, 0);
      if (r < 0)
        return sk_fail(c, "the peer closed the connection");
      if (r == 0)
        return zccSuccess;
    }
    c->cur[k]++;
  }
  return zccSuccess;
}

/* Move what the sockets take. */
static zccResult_t sk_progress(sk_comm_t *c) {
  if (c->failed)
    return zcc_error(zccRemoteError, "socket: the connection failed earlier");
  for (int k = 0; k < c->nfds; k++)
    ZCC_CHECK(c->is_send ? sk_send_part(c, k) : sk_recv_part(c, k));
  /* requests whose every part went (or came) are done, in order */
  while (c->head < c->seq) {
    sk_req_t *q = &c->reqs[c->head % SK_DEPTH];
    if ((!c->is_send && !q->hdr) || q->left > 0)
      break;
    q->done = 1;
    c->head++;
  }
  return zccSuccess;
}

static zccResult_t sk_isend(void *send_comm, void *data, size_t size,
                            void *mhandle, void **request) {
  (void)mhandle;
  sk_comm_t *c = send_comm;
  if (!c || !request || !c->is_send || (size && !data))
    return zcc_error(zccInvalidArgument, "socket isend: bad argument");
  *request = NULL;
  if (size >= ((size_t)1 << 31))
    return zcc_error(zccInvalidArgument,
                     "socket isend: %zu bytes: at most 2 GiB - 1", size);
  if (c->failed)
    return zcc_error(zccRemoteError, "socket: the connection failed earlier");
  sk_req_t *q = &c->reqs[c->seq % SK_DEPTH];
  if (q->used)
    return zccSuccess; /* every request in flight */
  q->used = 1, q->done = 0, q->seq = c->seq++, q->data = data, q->size = size,
  q->hdr = 1, q->left = sk_parts(size, c->nfds);
  *request = q;
  return sk_progress(c);
}

static zccResult_t sk_irecv(void *recv_comm, void *data, size_t size,
                            void *mhandle, void **request) {
  (void)mhandle;
  sk_comm_t *c = recv_comm;
  if (!c || !request || c->is_send || (size && !data))
    return zcc_error(zccInvalidArgument, "socket irecv: bad argument");
  *request = NULL;
  if (size >= ((size_t)1 << 31))
    return zcc_error(zccInvalidArgument,
                     "socket irecv: %zu bytes: at most 2 GiB - 1", size);
  if (c->failed)
    return zcc_error(zccRemoteError, "socket: the connection failed earlier");
  sk_req_t *q = &c->reqs[c->seq % SK_DEPTH];
  if (q->used)
    return zccSuccess; /* every request in flight */
  /* nothing goes back to the sender: the first test reads the message */
  q->used = 1, q->done = 0, q->seq = c->seq++, q->data = data, q->cap = size,
  q->size = 0, q->hdr = 0, q->left = 0;
  *request = q;
  return zccSuccess;
}

static zccResult_t sk_test(void *request, int *done, size_t *size) {
  sk_req_t *q = request;
  if (!q || !done || !q->used)
    return zcc_error(zccInvalidArgument,
                     "socket test: not a request in flight");
  *done = 0;
  if (!q->done)
    ZCC_CHECK(sk_progress(q->comm));
  if (!q->done)
    return zccSuccess;
  *done = 1;
  if (size)
    *size = q->size;
  q->used = 0;
  return zccSuccess;
}

static zccResult_t sk_close(void *comm) {
  sk_comm_t *c = comm;
  for (int k = 0; c && k < c->nfds; k++) {
    if (c->fds[k] < 0)
      continue;
    /* unread bytes at close would make the kernel reset the connection,
     * dropping what we sent */
    char sink[256];
    while (recv(c->fds[k], sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
    shutdown(c->fds[k], SHUT_WR);
  }
  sk_comm_free(c);
  return zccSuccess;
}

static zccResult_t sk_close_listen(void *listen_comm) {
  sk_listen_t *l = listen_comm;
  if (!l)
    return zccSuccess;
  for (int i = 0; i < l->npending; i++)
    sk_comm_free(l->pending[i]);
  free(l->pending);
  for (int i = 0; i < SK_PENDING; i++)
    sk_comm_free(l->proven[i]);
  zcc_socket_close(&l->fd);
  free(l);
  return zccSuccess;
}

const zcc_net_ops_t zcc_net_socket_ops = {
    .name = "socket",
    .init = sk_init,
    .devices = sk_devices,
    .get_properties = sk_get_properties,
    .listen = sk_listen,
    .connect = sk_connect,
    .accept = sk_accept,
    .reg_mr = sk_reg_mr,
    .dereg_mr = sk_dereg_mr,
    .isend = sk_isend,
    .irecv = sk_irecv,
    .test = sk_test,
    .close_send = sk_close,
    .close_recv = sk_close,
    .close_listen = sk_close_listen,
};
