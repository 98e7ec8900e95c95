/*
 * socket: ranks on different hosts (or where shm is disabled), over TCP.
 * Each rank listens on the bootstrap's interface; the higher rank of a pair
 * connects to the lower, proves the communicator's secret, and names its
 * rank. Sends go straight from the user buffer to the kernel; receives land
 * in the destination, or in a small staging buffer when they reduce.
 * Every transfer begins with its operation's record (opsig.h), checked by
 * the receiver before it uses any byte; a side that gives up sends a
 * ZCC_WIRE_FAIL record with its cause (when it is between transfers) and
 * shuts the connection down.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "coll.h"
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

/* An accepted connection still proving itself (secret, then hello). */
typedef struct greeting {
  int fd;
  int64_t deadline_ns;
  zcc_auth_server_state_t auth;
  hello_t hello;
  size_t hello_got;
} greeting_t;

/* A stranger that says nothing is dropped after this; it delays nobody. */
#define GREETING_MS 5000

typedef struct sock_state {
  int listen_fd;
  int *pending; /* [nranks]: accepted, authenticated fds not yet claimed */
  greeting_t *greet; /* accepted connections in their handshake, all at once */
  int ngreet, cap_greet;
} sock_state_t;

typedef struct sock_conn {
  int fd;
  char *stage;
  size_t stage_cap, stage_fill;
  /* The record of the transfer being sent, and how much of it went. */
  zcc_wire_hdr_t out_hdr;
  size_t out_hdr_done;
  atomic_int out_active;  /* a transfer is under way: its record was made
                             (atomic: sock_fail may look from another thread) */
  uint64_t send_pseq;
  /* The record of the transfer being received. */
  zcc_wire_hdr_t in_hdr;
  size_t in_hdr_got;
  int in_checked;         /* in_hdr is complete and matched */
  uint64_t recv_pseq;
  /* Read ahead with the last bytes of a transfer: the start of the next
     record (so that a failure record behind the data is seen, and the
     next header needs no system call of its own). */
  char la[sizeof(zcc_wire_hdr_t)];
  size_t la_len;
} sock_conn_t;

static int is_p2p(const zcc_xfer_t *x) { return x->sig && x->sig->coll == ZCC_COLL_SENDRECV; }


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
  /* A deep backlog: strangers queued ahead of a peer must not make the
     kernel drop its connection (accept_some takes them all at once). */
  ZCC_CHECK(zcc_socket_listen(&addr, 4096, &st->listen_fd));
  self->net_addr = addr;
  char buf[ZCC_SOCKADDR_STRLEN];
  ZCC_INFO(NET, "socket transport listening on %s", zcc_sockaddr_str(&addr, buf));
  return zccSuccess;
}

static void greet_drop(struct zccComm *comm, sock_state_t *st, int i, const char *why) {
  ZCC_WARN("socket: dropped a connection that did not prove membership of comm %s (%s)",
           comm->name, why);
  zcc_socket_close(&st->greet[i].fd);
  st->greet[i] = st->greet[--st->ngreet];
}

/* One step of greeting i: 1 proven (its hello names a peer we wait for),
   0 more to come, -1 not a member (why says so). */
static int greet_step(struct zccComm *comm, sock_state_t *st, greeting_t *g, const char **why) {
  if (g->auth.phase < 2) {
    int r = zcc_socket_auth_server_step(g->fd, &g->auth, comm->secret, comm->hash);
    if (r <= 0) {
      *why = "no proof of the secret";
      return r;
    }
  }
  while (g->hello_got < sizeof(g->hello)) {
    ssize_t n = recv(g->fd, (char *)&g->hello + g->hello_got, sizeof(g->hello) - g->hello_got,
                     MSG_DONTWAIT);
    if (n > 0) {
      g->hello_got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    *why = "closed before its hello";
    return -1;
  }
  const hello_t *h = &g->hello;
  if (h->magic != HELLO_MAGIC || h->comm_hash != comm->hash || h->to_rank != comm->rank ||
      h->from_rank <= comm->rank || h->from_rank >= comm->nranks ||
      st->pending[h->from_rank] >= 0) {
    *why = "a hello for another connection";
    return -1;
  }
  return 1;
}

/*
 * Accept what comes within timeout_ms and move every handshake on at once
 * (non-blocking, each with its own deadline): a stranger that connects and
 * stays silent costs the real peers nothing. Proven connections go to
 * st->pending by the rank they name.
 */
static zccResult_t accept_some(struct zccComm *comm, sock_state_t *st, int timeout_ms) {
  struct pollfd stack[64], *pfd = stack;
  int n = st->ngreet + 1;
  if (n > 64 && !(pfd = malloc(sizeof(*pfd) * (size_t)n)))
    return zcc_error(zccSystemError, "socket: out of memory");
  pfd[0] = (struct pollfd){st->listen_fd, POLLIN, 0};
  for (int i = 0; i < st->ngreet; i++) pfd[i + 1] = (struct pollfd){st->greet[i].fd, POLLIN, 0};
  int r = poll(pfd, (nfds_t)n, timeout_ms);
  if (r < 0 && errno != EINTR) {
    if (pfd != stack) free(pfd);
    return zcc_error(zccSystemError, "socket: poll failed: %s", strerror(errno));
  }
  int64_t now = zcc_now_ns();
  /* Step the greetings from the back, so that a drop (which moves the last
     one into its place) never skips one that has not been looked at. */
  for (int i = st->ngreet - 1; i >= 0; i--) {
    greeting_t *g = &st->greet[i];
    const char *why = "no hello in time";
    int s = r > 0 && pfd[i + 1].revents ? greet_step(comm, st, g, &why) : 0;
    if (s > 0) {
      st->pending[g->hello.from_rank] = g->fd;
      st->greet[i] = st->greet[--st->ngreet];
    } else if (s < 0 || now >= g->deadline_ns) {
      greet_drop(comm, st, i, why);
    }
  }
  int accept_ready = r > 0 && (pfd[0].revents & POLLIN);
  if (pfd != stack) free(pfd);
  while (accept_ready) {
    int fd = accept4(st->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        ZCC_WARN("socket: accept failed: %s", strerror(errno));
      break;
    }
    zcc_socket_tune(fd);
    if (st->ngreet == st->cap_greet) {
      int cap = st->cap_greet ? 2 * st->cap_greet : 16;
      greeting_t *g = realloc(st->greet, sizeof(*g) * (size_t)cap);
      if (!g) {
        close(fd);
        return zcc_error(zccSystemError, "socket: out of memory");
      }
      st->greet = g;
      st->cap_greet = cap;
    }
    st->greet[st->ngreet++] = (greeting_t){.fd = fd,
                                           .deadline_ns = now + GREETING_MS * 1000000LL};
    /* its first message may be there already */
    greeting_t *g = &st->greet[st->ngreet - 1];
    const char *why = "";
    int s = greet_step(comm, st, g, &why);
    if (s > 0) {
      st->pending[g->hello.from_rank] = g->fd;
      st->ngreet--;
    } else if (s < 0) {
      greet_drop(comm, st, st->ngreet - 1, why);
    }
  }
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
  zcc_wait_t w = zcc_wait_in(zcc_transport_connect_timeout_ms(), &comm->abort_flag,
                             "socket connect");
  if (conn->peer < comm->rank) {
    /* Its listener was up before it gave out the address (sock_comm_setup):
       a refusal means it left, not that it is late. */
    ZCC_CHECK(zcc_socket_connect_listening(&comm->peers[conn->peer].net_addr, &s->fd, &w));
    ZCC_CHECK(zcc_socket_auth_client(s->fd, comm->secret, comm->hash, &w));
    hello_t h = {HELLO_MAGIC, comm->hash, comm->rank, conn->peer};
    ZCC_CHECK(zcc_socket_send_all(s->fd, &h, sizeof(h), &w));
  } else {
    while (st->pending[conn->peer] < 0) {
      ZCC_CHECK(zcc_wait_check(&w));
      ZCC_CHECK(zcc_bootstrap_peer_check(comm->bootstrap, conn->peer));
      ZCC_CHECK(zcc_bootstrap_any_gone(comm->bootstrap)); /* init is doomed */
      /* In slices, so that the peer's death is seen while waiting. */
      ZCC_CHECK(accept_some(comm, st, 100));
    }
    s->fd = st->pending[conn->peer];
    st->pending[conn->peer] = -1;
  }
  ZCC_INFO(NET, "socket connection to rank %d established", conn->peer);
  return zccSuccess;
}

/* writev/readv that never block; *moved counts bytes of either part. */
static zccResult_t io_vec(int fd, struct iovec *iov, int n, int sending, size_t *moved) {
  *moved = 0;
  for (;;) {
    ssize_t r = sending ? sendmsg(fd, &(struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)n},
                                  MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recvmsg(fd, &(struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)n},
                                  MSG_DONTWAIT);
    if (r > 0) {
      *moved = (size_t)r;
      return zccSuccess;
    }
    if (r == 0 && !sending) return zcc_error(zccRemoteError, "connection closed by peer");
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return zccSuccess;
    int err = r < 0 ? errno : EPIPE;
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT ||
        err == EHOSTUNREACH || err == ENETUNREACH)
      return zcc_error(zccRemoteError, "%s failed, peer connection lost: %s",
                       sending ? "send" : "recv", strerror(err));
    return zcc_error(zccSystemError, "%s failed: %s", sending ? "send" : "recv", strerror(err));
  }
}

/* Send the record (first) and then src[done, avail). */
static zccResult_t send_xfer(sock_conn_t *s, zcc_xfer_t *x) {
  if (!atomic_load_explicit(&s->out_active, memory_order_relaxed)) {
    zcc_wire_hdr_fill(&s->out_hdr, x->sig, x->bytes, is_p2p(x) ? ++s->send_pseq : 0);
    s->out_hdr_done = 0;
    atomic_store_explicit(&s->out_active, 1, memory_order_relaxed);
  }
  while (s->out_hdr_done < sizeof(s->out_hdr) || x->done < x->avail) {
    struct iovec iov[2];
    int n = 0;
    size_t hleft = sizeof(s->out_hdr) - s->out_hdr_done;
    if (hleft) iov[n++] = (struct iovec){(char *)&s->out_hdr + s->out_hdr_done, hleft};
    if (x->done < x->avail)
      iov[n++] = (struct iovec){(char *)x->src + x->done, x->avail - x->done};
    size_t moved = 0;
    ZCC_CHECK(io_vec(s->fd, iov, n, 1, &moved));
    if (!moved) break;
    size_t h = moved < hleft ? moved : hleft;
    s->out_hdr_done += h;
    x->done += moved - h;
  }
  if (x->done == x->bytes && s->out_hdr_done == sizeof(s->out_hdr))
    atomic_store_explicit(&s->out_active, 0, memory_order_relaxed);
  return zccSuccess;
}

/*
 * A ZCC_WIRE_FAIL record arrived in s->in_hdr, `have` bytes of its text
 * already read into `text`: read the rest (briefly) into the error. A peer
 * that gave up over a usage error (a mismatch) makes it one here too.
 */
static zccResult_t peer_failed(zcc_conn_t *conn, sock_conn_t *s, const char *text_in,
                               size_t have) {
  char text[ZCC_WIRE_FAIL_TEXT + 1] = "";
  size_t len = s->in_hdr.bytes <= ZCC_WIRE_FAIL_TEXT ? (size_t)s->in_hdr.bytes : 0;
  if (have > len) have = len;
  if (have) memcpy(text, text_in, have);
  zcc_wait_t w = zcc_wait_in(200, NULL, "socket failure record");
  if (len > have && zcc_socket_recv_all(s->fd, text + have, len - have, &w) != zccSuccess)
    len = have;
  text[len] = '\0';
  return zcc_peer_failed_error(conn->comm, conn->peer, 0, (int32_t)s->in_hdr.code,
                               s->in_hdr.sig.root - 1, text);
}

/*
 * The next record's header, when all of it is here and none of it has been
 * taken yet: copied to *h, returns 1 (take_record then consumes it).
 */
static int next_record(sock_conn_t *s, zcc_wire_hdr_t *h) {
  if (s->in_checked || s->in_hdr_got) return 0;
  if (s->la_len == sizeof(*h)) {
    memcpy(h, s->la, sizeof(*h));
    return 1;
  }
  if (s->la_len) return 0;
  return recv(s->fd, h, sizeof(*h), MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof(*h);
}

/* Consume the record next_record saw into s->in_hdr. */
static zccResult_t take_record(sock_conn_t *s) {
  if (s->la_len) {
    memcpy(&s->in_hdr, s->la, sizeof(s->in_hdr));
    s->la_len = 0;
    return zccSuccess;
  }
  zcc_wait_t w = zcc_wait_in(200, NULL, "socket failure record");
  return zcc_socket_recv_all(s->fd, &s->in_hdr, sizeof(s->in_hdr), &w);
}

/* The peer's failure record is next: take it and report it. */
static zccResult_t take_failure(zcc_conn_t *conn, sock_conn_t *s) {
  if (take_record(s) != zccSuccess)
    return zcc_error(zccRemoteError, "rank %d gave up on the communicator", conn->peer);
  return peer_failed(conn, s, NULL, 0);
}

/*
 * After a failed send, the reason from what the peer sent next: its
 * failure record, or the record of a call that does not match this one.
 */
static zccResult_t send_failed(zcc_conn_t *conn, sock_conn_t *s, const zcc_xfer_t *x,
                               zccResult_t res) {
  zcc_wire_hdr_t h;
  if (res != zccRemoteError || !next_record(s, &h)) return res;
  if (h.magic == ZCC_WIRE_DATA) {
    char cause[256];
    snprintf(cause, sizeof(cause), "%s", zcc_last_error());
    zccResult_t mm = zcc_wire_hdr_check(&h, x->sig, h.bytes, h.pseq, conn->peer, conn->comm);
    if (mm != zccSuccess) return mm;
    zcc_restore_last_error(cause);
    return res;
  }
  return h.magic == ZCC_WIRE_FAIL ? take_failure(conn, s) : res;
}

/*
 * Receive into buf[0, want): behind the rest of the record while it is not
 * complete (checked once it is), and, when `last` (want ends the
 * transfer), with up to one record's worth of what follows into the
 * look-ahead. *got: bytes of buf filled; *moved: any bytes taken.
 */
static zccResult_t recv_xfer(zcc_conn_t *conn, sock_conn_t *s, zcc_xfer_t *x, char *buf,
                             size_t want, int last, size_t *got, int *moved) {
  *got = 0;
  if (!s->in_checked && !s->in_hdr_got && s->la_len) {
    memcpy(&s->in_hdr, s->la, s->la_len);
    s->in_hdr_got = s->la_len;
    s->la_len = 0;
  }
  for (;;) {
    if (!s->in_checked && s->in_hdr_got == sizeof(s->in_hdr)) {
      if (s->in_hdr.magic == ZCC_WIRE_FAIL) {
        /* Its text went where the data would have: into buf, then the look-ahead. */
        char text[ZCC_WIRE_FAIL_TEXT];
        size_t t = *got < sizeof(text) ? *got : sizeof(text);
        memcpy(text, buf, t);
        size_t l = s->la_len < sizeof(text) - t ? s->la_len : sizeof(text) - t;
        memcpy(text + t, s->la, l);
        s->la_len = 0;
        return peer_failed(conn, s, text, t + l);
      }
      uint64_t pseq = is_p2p(x) ? s->recv_pseq + 1 : 0;
      ZCC_CHECK(zcc_wire_hdr_check(&s->in_hdr, x->sig, x->bytes, pseq, conn->peer,
                                   conn->comm));
      if (pseq) s->recv_pseq = pseq;
      s->in_checked = 1;
    }
    /* Done when buf is full; bytes read past it mean all of it is here. */
    if (s->in_checked && (*got == want || s->la_len)) return zccSuccess;
    if (!s->in_checked && s->in_hdr_got == 0) {
      /* Nothing of the record yet: poll with a plain recv of it, which costs
         less than a recvmsg while the peer has not sent (the common case of
         a waiting receiver); the data follows in the same pass. */
      ssize_t r = recv(s->fd, &s->in_hdr, sizeof(s->in_hdr), MSG_DONTWAIT);
      if (r > 0) {
        s->in_hdr_got = (size_t)r;
        *moved = 1;
        continue;
      }
      if (r == 0) return zcc_error(zccRemoteError, "connection closed by peer");
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return zccSuccess;
      return zcc_error(zccRemoteError, "recv failed, peer connection lost: %s", strerror(errno));
    }
    struct iovec iov[3];
    int n = 0;
    size_t hleft = s->in_checked ? 0 : sizeof(s->in_hdr) - s->in_hdr_got;
    size_t dleft = want - *got;
    if (hleft) iov[n++] = (struct iovec){(char *)&s->in_hdr + s->in_hdr_got, hleft};
    if (dleft) iov[n++] = (struct iovec){buf + *got, dleft};
    if (last) iov[n++] = (struct iovec){s->la + s->la_len, sizeof(s->la) - s->la_len};
    size_t r = 0;
    ZCC_CHECK(io_vec(s->fd, iov, n, 0, &r));
    if (!r) return zccSuccess;
    *moved = 1;
    size_t h = r < hleft ? r : hleft;
    s->in_hdr_got += h;
    r -= h;
    size_t d = r < dleft ? r : dleft;
    *got += d;
    s->la_len += r - d;
  }
}

static zccResult_t sock_progress(zcc_conn_t *conn, zcc_xfer_t *x, int *moved) {
  sock_conn_t *s = conn->priv;
  size_t before = x->done;
  if (!x->is_recv) {
    zccResult_t res = send_xfer(s, x);
    if (res != zccSuccess) return send_failed(conn, s, x, res);
  } else if (!x->red) {
    size_t got = 0;
    ZCC_CHECK(recv_xfer(conn, s, x, (char *)x->dst + x->done, x->bytes - x->done, 1, &got,
                        moved));
    x->done += got;
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
    size_t want = x->bytes - x->done - s->stage_fill, last = 1;
    if (want > s->stage_cap - s->stage_fill) {
      want = s->stage_cap - s->stage_fill;
      last = 0;
    }
    size_t got = 0;
    ZCC_CHECK(recv_xfer(conn, s, x, s->stage + s->stage_fill, want, (int)last, &got, moved));
    s->stage_fill += got;
    size_t whole = s->stage_fill - s->stage_fill % tsize;
    if (whole) {
      zcc_xfer_reduce(x, (char *)x->dst + x->done, NULL, 0, s->stage, whole / tsize);
      x->done += whole;
      memmove(s->stage, s->stage + whole, s->stage_fill - whole);
      s->stage_fill -= whole;
    }
  }
  if (x->is_recv && x->done == x->bytes) {
    s->in_checked = 0;
    s->in_hdr_got = 0;
    /* A peer that gave up after sending these bytes says so behind them
       (read ahead with them): its call failed, so this one must not
       succeed on its data. */
    zcc_wire_hdr_t h;
    uint64_t opno = s->in_hdr.sig.opno;
    if (s->la_len == sizeof(h)) {
      memcpy(&h, s->la, sizeof(h));
      if (h.magic == ZCC_WIRE_FAIL && opno >= h.pseq) return take_failure(conn, s);
    }
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
  if (s->stage_fill || s->la_len) return 1;
  char c;
  ssize_t n = recv(s->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void sock_fail(zcc_conn_t *conn) {
  sock_conn_t *s = conn->priv;
  if (!s || s->fd < 0) return;
  /* Between transfers, and from the thread that sends on it: say why, best
     effort, then close our side. */
  uintptr_t owner = atomic_load(&conn->comm->owner);
  if (owner != 0 && !zcc_comm_held_here(conn->comm)) {
    /* Another thread's call is in flight: it sends the record when it ends. */
    atomic_store(&conn->comm->fail_deferred, 1);
    return;
  }
  if (!atomic_load_explicit(&s->out_active, memory_order_relaxed)) {
    struct {
      zcc_wire_hdr_t h;
      char text[ZCC_WIRE_FAIL_TEXT];
    } rec;
    memset(&rec, 0, sizeof(rec));
    rec.h.magic = ZCC_WIRE_FAIL;
    rec.h.code = (uint32_t)atomic_load(&conn->comm->async_error);
    rec.h.pseq = conn->comm->fail_opno;
    rec.h.sig.root = conn->comm->fail_origin + 1;
    snprintf(rec.text, sizeof(rec.text), "%s", conn->comm->fail_text);
    rec.h.bytes = strlen(rec.text);
    /* A plain send: the thread's last error must stay the original one. */
    size_t len = sizeof(rec.h) + (size_t)rec.h.bytes;
    (void)!send(s->fd, &rec, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    atomic_store_explicit(&s->out_active, 1, memory_order_relaxed); /* nothing may follow */
  }
  /* Only our direction: closing the other with bytes unread would reset the
     connection, and the peer's kernel would drop what we sent it (the
     record that says why). Destroy closes the rest. */
  shutdown(s->fd, SHUT_WR);
}

/* A failure record next from a peer this rank's call does not wait on
   (zcc_transport_ops_t.fail_peek, which says why a close or a timeout is not
   one). */
static zccResult_t sock_fail_peek(zcc_conn_t *conn) {
  sock_conn_t *s = conn->priv;
  zcc_wire_hdr_t h;
  if (!s || s->fd < 0 || !next_record(s, &h) || h.magic != ZCC_WIRE_FAIL ||
      h.code == zccTimeout)
    return zccSuccess;
  return take_failure(conn, s);
}

/*
 * While waiting: has the peer given up (its record is next) or closed the
 * connection? Looks without taking anything.
 */
static zccResult_t sock_check(zcc_conn_t *conn) {
  sock_conn_t *s = conn->priv;
  if (!s || s->fd < 0 || s->in_hdr_got || s->in_checked) return zccSuccess;
  zcc_wire_hdr_t h;
  if (next_record(s, &h)) return h.magic == ZCC_WIRE_FAIL ? take_failure(conn, s) : zccSuccess;
  if (s->la_len) return zccSuccess;
  ssize_t n = recv(s->fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return zcc_error(zccRemoteError, "rank %d closed the connection", conn->peer);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return zcc_error(zccRemoteError, "connection to rank %d lost: %s", conn->peer,
                     strerror(errno));
  return zccSuccess;
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
  for (int i = 0; i < st->ngreet; i++) zcc_socket_close(&st->greet[i].fd);
  free(st->greet);
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
    .check = sock_check,
    .fail_peek = sock_fail_peek,
    .fail = sock_fail,
    .free = sock_free,
    .comm_free = sock_comm_free,
};
