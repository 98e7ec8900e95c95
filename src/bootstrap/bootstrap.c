/*
 * Bootstrap, rank side: the unique id, joining the rendezvous, and the
 * per-rank listener thread that queues tagged messages from peers; also the
 * gate (bootstrap_proto.h) that the root and the ranks put in front of their
 * listening sockets. The root itself is in bootstrap_root.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_proto.h"
#include "check.h"

void zcc_bootstrap_addr_encode(const zcc_sockaddr_t *a, uint8_t *p) {
  memset(p, 0, WIRE_ADDR_BYTES);
  if (a->u.sa.sa_family == AF_INET6) {
    put32(p, 6);
    memcpy(p + 4, &a->u.sin6.sin6_port, 2);
    memcpy(p + 6, &a->u.sin6.sin6_addr, 16);
    put32(p + 20, a->u.sin6.sin6_scope_id);
  } else {
    put32(p, 4);
    memcpy(p + 4, &a->u.sin.sin_port, 2);
    memcpy(p + 6, &a->u.sin.sin_addr, 4);
  }
}

int zcc_bootstrap_addr_decode(const uint8_t *p, zcc_sockaddr_t *a) {
  memset(a, 0, sizeof(*a));
  uint32_t fam = get32(p);
  if (fam == 6) {
    a->u.sin6.sin6_family = AF_INET6;
    memcpy(&a->u.sin6.sin6_port, p + 4, 2);
    memcpy(&a->u.sin6.sin6_addr, p + 6, 16);
    a->u.sin6.sin6_scope_id = get32(p + 20);
    a->len = sizeof(struct sockaddr_in6);
  } else if (fam == 4) {
    a->u.sin.sin_family = AF_INET;
    memcpy(&a->u.sin.sin_port, p + 4, 2);
    memcpy(&a->u.sin.sin_addr, p + 6, 4);
    a->len = sizeof(struct sockaddr_in);
  } else {
    return -1;
  }
  return zcc_sockaddr_port(a) != 0 ? 0 : -1;
}

/* Re-record the last error with what we were doing. */
zccResult_t zcc_bootstrap_error_in(zccResult_t res, const char *doing) {
  char cause[256];
  snprintf(cause, sizeof(cause), "%s", zcc_last_error());
  return zcc_error(res, "%s: %s", doing, cause);
}

/* ---- gate: authenticate accepted connections off the owner's thread ---- */

zccResult_t zcc_bootstrap_gate_init(gate_t *g, const uint8_t *secret,
                                    uint64_t context, size_t hello_bytes,
                                    int64_t deadline_ns, const char *owner) {
  memset(g, 0, sizeof(*g));
  if (pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) != 0)
    return zcc_error(zccSystemError, "pipe2 failed: %s", strerror(errno));
  if (pipe2(g->kick, O_NONBLOCK | O_CLOEXEC) != 0) {
    close(g->wake[0]);
    close(g->wake[1]);
    return zcc_error(zccSystemError, "pipe2 failed: %s", strerror(errno));
  }
  pthread_mutex_init(&g->lock, NULL);
  atomic_init(&g->stop, 0);
  memcpy(g->secret, secret, ZCC_SECRET_BYTES);
  g->context = context;
  g->hello_bytes = hello_bytes;
  g->deadline_ns = deadline_ns;
  g->owner = owner;
  return zccSuccess;
}

static void pipe_poke(int fd) {
  char c = 1;
  ssize_t n;
  do {
    n = write(fd, &c, 1);
  } while (n < 0 && errno == EINTR);
}

static void pipe_drain(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

void zcc_bootstrap_gate_wake(gate_t *g) { pipe_poke(g->wake[1]); }

/* One step of a connection's handshake: 1 done, 0 more to come, -1 failed. */
static int gate_step(gate_t *g, gate_conn_t *c) {
  if (c->auth.phase < 2) {
    int r = zcc_socket_auth_server_step(c->fd, &c->auth, g->secret, g->context);
    if (r <= 0) return r;
  }
  while (c->hello_got < g->hello_bytes) {
    ssize_t n = recv(c->fd, c->hello + c->hello_got, g->hello_bytes - c->hello_got,
                     MSG_DONTWAIT);
    if (n > 0) {
      c->hello_got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    zcc_error(zccRemoteError, "hello: %s", n == 0 ? "connection closed" : strerror(errno));
    return -1;
  }
  return 1;
}

static void gate_drop(gate_t *g, gate_conn_t *c, const char *why) {
  if (atomic_load(&g->stop))
    ZCC_INFO(BOOT, "%s: closed connection from %s that was still authenticating", g->owner,
             c->from);
  else
    ZCC_WARN("%s: dropped connection from %s: %s", g->owner, c->from, why);
  zcc_socket_close(&c->fd);
  free(c);
}

/* The worker: every connection still authenticating, in one poll loop. */
static void *gate_worker(void *arg) {
  gate_t *g = arg;
  gate_conn_t *mine = NULL;
  struct pollfd *pfd = NULL;
  gate_conn_t **who = NULL;
  size_t cap = 0;
  while (!atomic_load(&g->stop)) {
    pthread_mutex_lock(&g->lock);
    while (g->incoming) {
      gate_conn_t *c = g->incoming;
      g->incoming = c->next;
      c->next = mine;
      mine = c;
    }
    pthread_mutex_unlock(&g->lock);
    size_t n = 1;
    for (gate_conn_t *c = mine; c; c = c->next) n++;
    if (n > cap) {
      size_t ncap = n * 2;
      struct pollfd *p2 = realloc(pfd, ncap * sizeof(*pfd));
      if (p2) pfd = p2;
      gate_conn_t **w2 = p2 ? realloc(who, ncap * sizeof(*who)) : NULL;
      if (w2) who = w2;
      if (!p2 || !w2) { /* out of memory: serve what fits, retry soon */
        poll(NULL, 0, 10);
        continue;
      }
      cap = ncap;
    }
    int64_t now = zcc_now_ns(), next = now + 100 * 1000000LL;
    pfd[0] = (struct pollfd){g->kick[0], POLLIN, 0};
    n = 1;
    for (gate_conn_t *c = mine; c; c = c->next) {
      pfd[n] = (struct pollfd){c->fd, POLLIN, 0};
      who[n++] = c;
      if (c->deadline_ns < next) next = c->deadline_ns;
    }
    int ms = next > now ? (int)((next - now + 999999) / 1000000) : 0;
    if (poll(pfd, (nfds_t)n, ms) < 0 && errno != EINTR) poll(NULL, 0, 10);
    if (pfd[0].revents) pipe_drain(g->kick[0]);
    now = zcc_now_ns();
    int finished = 0;
    for (size_t i = 1; i < n; i++) {
      gate_conn_t *c = who[i];
      int r = pfd[i].revents ? gate_step(g, c) : 0;
      if (r == 0 && now >= c->deadline_ns) {
        zcc_error(zccTimeout, "no handshake within %d ms", HANDSHAKE_MS);
        r = -1;
      }
      if (r == 0) continue;
      c->done = r;
      finished = 1;
    }
    if (!finished) continue;
    gate_conn_t **link = &mine;
    int woke = 0;
    while (*link) {
      gate_conn_t *c = *link;
      if (!c->done) {
        link = &c->next;
        continue;
      }
      *link = c->next;
      if (c->done > 0) {
        pthread_mutex_lock(&g->lock);
        c->next = g->ready;
        g->ready = c;
        pthread_mutex_unlock(&g->lock);
        woke = 1;
      } else {
        gate_drop(g, c, zcc_last_error());
      }
    }
    if (woke) zcc_bootstrap_gate_wake(g);
  }
  while (mine) {
    gate_conn_t *c = mine;
    mine = c->next;
    gate_drop(g, c, "gate stopped");
  }
  free(pfd);
  free(who);
  return NULL;
}

int zcc_bootstrap_gate_has_room(gate_t *g) { return !atomic_load(&g->stop); }

/* Accept what is pending on listen_fd and hand it to the worker. */
void zcc_bootstrap_gate_accept(gate_t *g, int listen_fd) {
  int added = 0;
  for (;;) {
    struct sockaddr_storage from;
    socklen_t len = sizeof(from);
    int fd = accept4(listen_fd, (struct sockaddr *)&from, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        ZCC_WARN("%s: accept failed: %s", g->owner, strerror(errno));
      break;
    }
    zcc_socket_tune(fd);
    gate_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
      ZCC_WARN("%s: out of memory accepting a connection", g->owner);
      close(fd);
      continue;
    }
    c->gate = g;
    c->fd = fd;
    c->deadline_ns = zcc_now_ns() + HANDSHAKE_MS * 1000000LL;
    if (g->deadline_ns < c->deadline_ns) c->deadline_ns = g->deadline_ns;
    zcc_sockaddr_t a;
    memset(&a, 0, sizeof(a));
    memcpy(&a.u, &from, len < sizeof(a.u) ? len : sizeof(a.u));
    zcc_sockaddr_str(&a, c->from);
    pthread_mutex_lock(&g->lock);
    c->next = g->incoming;
    g->incoming = c;
    pthread_mutex_unlock(&g->lock);
    added = 1;
  }
  if (!added) return;
  if (!g->worker_started) {
    int rc = pthread_create(&g->worker, NULL, gate_worker, g);
    if (rc != 0) {
      ZCC_WARN("%s: cannot start the handshake thread: %s", g->owner, strerror(rc));
      pthread_mutex_lock(&g->lock);
      gate_conn_t *list = g->incoming;
      g->incoming = NULL;
      pthread_mutex_unlock(&g->lock);
      while (list) {
        gate_conn_t *c = list;
        list = c->next;
        gate_drop(g, c, "no handshake thread");
      }
      return;
    }
    g->worker_started = 1;
  }
  pipe_poke(g->kick[1]);
}

/* Drain the wake pipe and take the authenticated connections (oldest first). */
gate_conn_t *zcc_bootstrap_gate_take(gate_t *g) {
  char buf[64];
  while (read(g->wake[0], buf, sizeof(buf)) > 0) {
  }
  pthread_mutex_lock(&g->lock);
  gate_conn_t *list = g->ready, *rev = NULL;
  g->ready = NULL;
  pthread_mutex_unlock(&g->lock);
  while (list != NULL) {
    gate_conn_t *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  return rev;
}

/* Stop the worker, wait for it, close what is left. */
void zcc_bootstrap_gate_stop(gate_t *g) {
  atomic_store(&g->stop, 1);
  if (g->worker_started) {
    pipe_poke(g->kick[1]);
    pthread_join(g->worker, NULL);
    g->worker_started = 0;
  }
  pthread_mutex_lock(&g->lock);
  gate_conn_t *in = g->incoming;
  g->incoming = NULL;
  pthread_mutex_unlock(&g->lock);
  while (in) {
    gate_conn_t *c = in;
    in = c->next;
    gate_drop(g, c, "gate stopped");
  }
  for (gate_conn_t *c = zcc_bootstrap_gate_take(g), *n; c != NULL; c = n) {
    n = c->next;
    zcc_socket_close(&c->fd);
    free(c);
  }
  close(g->wake[0]);
  close(g->wake[1]);
  close(g->kick[0]);
  close(g->kick[1]);
  pthread_mutex_destroy(&g->lock);
}

/* ---- unique id ----------------------------------------------------------- */

zccResult_t zcc_bootstrap_id_decode(const zccUniqueId *id,
                                    zcc_unique_id_t *out) {
  if (id == NULL || out == NULL)
    return zcc_error(zccInvalidArgument,
                     "zcc_bootstrap_id_decode: null argument");
  zcc_unique_id_t u;
  memcpy(&u, id->internal, sizeof(u));
  if (u.magic != ZCC_UNIQUE_ID_MAGIC)
    return zcc_error(
        zccInvalidArgument,
        "unique id is not a zcc id (magic 0x%08x, expected 0x%08x)", u.magic,
        ZCC_UNIQUE_ID_MAGIC);
  if (u.version != ZCC_VERSION_CODE)
    return zcc_error(zccInvalidUsage,
                     "unique id made by zcc version %u, this is %u", u.version,
                     (unsigned)ZCC_VERSION_CODE);
  int fam = u.root.u.sa.sa_family;
  if (!((fam == AF_INET && u.root.len == sizeof(struct sockaddr_in)) ||
        (fam == AF_INET6 && u.root.len == sizeof(struct sockaddr_in6))) ||
      zcc_sockaddr_port(&u.root) == 0)
    return zcc_error(zccInvalidArgument,
                     "unique id holds no valid root address");
  *out = u;
  return zccSuccess;
}

uint64_t zcc_bootstrap_id_hash(const zcc_unique_id_t *u) {
  uint8_t data[ZCC_SECRET_BYTES + WIRE_ADDR_BYTES + 4], digest[32];
  memcpy(data, u->secret, ZCC_SECRET_BYTES);
  zcc_bootstrap_addr_encode(&u->root, data + ZCC_SECRET_BYTES);
  put32(data + ZCC_SECRET_BYTES + WIRE_ADDR_BYTES, u->version);
  zcc_sha256(data, sizeof(data), digest);
  return get64(digest);
}

/* ---- ranks ----------------------------------------------------------------
 */

typedef struct msg {
  struct msg *next;
  int peer, kind, tag;
  size_t bytes;
  uint8_t *data;
} msg_t;

typedef struct in_conn {
  int fd, peer;
  uint8_t hdr[MSG_HDR_BYTES];
  size_t hdr_done, done;
  msg_t *msg; /* being received */
} in_conn_t;

typedef struct out_conn {
  pthread_mutex_t lock;
  int fd;
} out_conn_t;

struct zcc_bootstrap {
  int rank, nranks;
  uint8_t secret[ZCC_SECRET_BYTES];
  uint64_t hash;
  const atomic_int *abort;
  zcc_sockaddr_t addr;
  zcc_sockaddr_t *peers; /* [nranks] */
  out_conn_t *out;       /* [nranks] */
  int listen_fd;
  gate_t gate;
  int gate_ready;
  pthread_t listener;
  int listener_started;
  atomic_int stop;
  /* incoming messages, filled by the listener */
  pthread_mutex_t qlock;
  pthread_cond_t qcond;
  msg_t *head, *tail;
  int *in_open;     /* [nranks] open connections from each peer */
  uint8_t *in_seen; /* [nranks] a connection from the peer was ever open */
  /* The first connection that failed for want of an answer (the link or
     the peer's host; see zcc_bootstrap_link_check): peer and errno, under
     qlock; link_peer -1 while none has. */
  atomic_int link_peer;
  int link_errno;
};

/* Errors that only a silent peer host or network gives a TCP connection:
   keepalive probes or retransmissions unanswered, routes gone. A peer
   process that exits or closes its end gives EOF or a reset instead. */
static int link_errno(int e) {
  return e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == ENETDOWN ||
         e == EHOSTDOWN;
}

/* Record fd's pending error if it is a link failure; 1 if recorded. */
static int link_note(zcc_bootstrap_t *b, int peer, int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || !link_errno(err)) return 0;
  pthread_mutex_lock(&b->qlock);
  if (atomic_load(&b->link_peer) < 0) {
    b->link_errno = err;
    atomic_store(&b->link_peer, peer);
    pthread_cond_broadcast(&b->qcond);
  }
  pthread_mutex_unlock(&b->qlock);
  ZCC_WARN("bootstrap: the connection with rank %d failed: %s (its host or the link "
           "between us stopped answering)", peer, strerror(err));
  return 1;
}

static void queue_push(zcc_bootstrap_t *b, msg_t *m) {
  pthread_mutex_lock(&b->qlock);
  m->next = NULL;
  if (b->tail)
    b->tail->next = m;
  else
    b->head = m;
  b->tail = m;
  pthread_cond_broadcast(&b->qcond);
  pthread_mutex_unlock(&b->qlock);
}

static void in_conn_count(zcc_bootstrap_t *b, int peer, int delta) {
  pthread_mutex_lock(&b->qlock);
  b->in_open[peer] += delta;
  b->in_seen[peer] = 1;
  pthread_cond_broadcast(&b->qcond);
  pthread_mutex_unlock(&b->qlock);
}

/* Read what is available on an incoming connection; -1: drop it. */
static int in_conn_progress(zcc_bootstrap_t *b, in_conn_t *c) {
  for (;;) {
    if (c->msg == NULL) {
      /* A rank that closes between messages (its communicator destroyed)
         is no error: look before reading, so none is raised and logged. */
      char one;
      if (c->hdr_done == 0 && recv(c->fd, &one, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        ZCC_INFO(BOOT, "connection from rank %d closed", c->peer);
        return -1;
      }
      if (zcc_socket_recv_some(c->fd, c->hdr, MSG_HDR_BYTES, &c->hdr_done) !=
          zccSuccess) {
        if (c->hdr_done == 0)
          ZCC_INFO(BOOT, "connection from rank %d closed", c->peer);
        else
          ZCC_WARN("connection from rank %d lost mid-message: %s", c->peer,
                   zcc_last_error());
        return -1;
      }
      if (c->hdr_done < MSG_HDR_BYTES)
        return 0;
      uint32_t kind = get32(c->hdr + 4);
      uint64_t bytes = get64(c->hdr + 12);
      if (get32(c->hdr) != MSG_MAGIC ||
          (kind != KIND_USER && kind != KIND_RING) || bytes > SIZE_MAX / 2) {
        ZCC_WARN("rank %d sent a malformed message header, connection dropped",
                 c->peer);
        return -1;
      }
      msg_t *m = calloc(1, sizeof(*m));
      uint8_t *data = m ? malloc(bytes ? (size_t)bytes : 1) : NULL;
      if (data == NULL) {
        free(m);
        ZCC_WARN("out of memory for a %llu-byte message from rank %d, "
                 "connection dropped",
                 (unsigned long long)bytes, c->peer);
        return -1;
      }
      m->peer = c->peer;
      m->kind = (int)kind;
      m->tag = (int32_t)get32(c->hdr + 8);
      m->bytes = (size_t)bytes;
      m->data = data;
      c->msg = m;
      c->done = 0;
    }
    if (zcc_socket_recv_some(c->fd, c->msg->data, c->msg->bytes, &c->done) !=
        zccSuccess) {
      ZCC_WARN("connection from rank %d lost mid-message: %s", c->peer,
               zcc_last_error());
      return -1;
    }
    if (c->done < c->msg->bytes)
      return 0;
    queue_push(b, c->msg);
    c->msg = NULL;
    c->hdr_done = 0;
  }
}

static void in_conn_close(zcc_bootstrap_t *b, in_conn_t *c) {
  zcc_socket_close(&c->fd);
  if (c->msg) {
    free(c->msg->data);
    free(c->msg);
    c->msg = NULL;
  }
  in_conn_count(b, c->peer, -1);
}

/* Add an authenticated peer connection after checking its hello. */
static int listener_admit(zcc_bootstrap_t *b, gate_conn_t *g, in_conn_t **conns,
                          int *n, int *cap) {
  int peer = (int32_t)get32(g->hello + 4),
      nranks = (int32_t)get32(g->hello + 8);
  if (get32(g->hello) != HELLO_MAGIC || nranks != b->nranks || peer < 0 ||
      peer >= nranks) {
    ZCC_WARN("authenticated connection from %s sent a bad hello (rank %d of "
             "%d), dropped",
             g->from, peer, nranks);
    return -1;
  }
  if (*n == *cap) {
    int ncap = *cap ? *cap * 2 : 8;
    in_conn_t *nc = realloc(*conns, sizeof(**conns) * (size_t)ncap);
    if (nc == NULL) {
      ZCC_WARN("out of memory adding a connection from rank %d, dropped", peer);
      return -1;
    }
    *conns = nc;
    *cap = ncap;
  }
  in_conn_t *c = &(*conns)[(*n)++];
  memset(c, 0, sizeof(*c));
  c->fd = g->fd;
  c->peer = peer;
  g->fd = -1;
  in_conn_count(b, peer, +1);
  ZCC_INFO(BOOT, "accepted connection from rank %d (%s)", peer, g->from);
  return 0;
}

static void *listener_main(void *arg) {
  zcc_bootstrap_t *b = arg;
  zcc_log_rank = b->rank;
  in_conn_t *conns = NULL;
  struct pollfd *pfd = NULL;
  int n = 0, cap = 0, pcap = 0;
  while (!atomic_load(&b->stop)) {
    if (pcap < n + 2) {
      struct pollfd *np = realloc(pfd, sizeof(*pfd) * (size_t)(n + 2));
      if (np == NULL) {
        ZCC_WARN("bootstrap listener: out of memory, retrying");
        poll(NULL, 0, SLICE_MS);
        continue;
      }
      pfd = np;
      pcap = n + 2;
    }
    pfd[0] = (struct pollfd){b->gate.wake[0], POLLIN, 0};
    pfd[1] = (struct pollfd){
        zcc_bootstrap_gate_has_room(&b->gate) ? b->listen_fd : -1, POLLIN, 0};
    for (int i = 0; i < n; i++)
      pfd[2 + i] = (struct pollfd){conns[i].fd, POLLIN, 0};
    int count = n;
    int rc = poll(pfd, (nfds_t)(count + 2), SLICE_MS);
    if (rc < 0 && errno != EINTR) {
      ZCC_WARN("bootstrap listener: poll failed: %s", strerror(errno));
      poll(NULL, 0, SLICE_MS);
      continue;
    }
    if (rc <= 0)
      continue;
    /* descending, so that moving the last entry into a hole is safe */
    for (int i = count - 1; i >= 0; i--) {
      if (pfd[2 + i].revents == 0)
        continue;
      if (pfd[2 + i].revents & POLLERR)
        link_note(b, conns[i].peer, conns[i].fd);
      if (in_conn_progress(b, &conns[i]) != 0) {
        in_conn_close(b, &conns[i]);
        conns[i] = conns[--n];
      }
    }
    if (pfd[1].revents)
      zcc_bootstrap_gate_accept(&b->gate, b->listen_fd);
    if (pfd[0].revents) {
      gate_conn_t *g = zcc_bootstrap_gate_take(&b->gate), *next;
      for (; g != NULL; g = next) {
        next = g->next;
        listener_admit(b, g, &conns, &n, &cap);
        zcc_socket_close(&g->fd);
        free(g);
      }
    }
  }
  for (int i = 0; i < n; i++)
    in_conn_close(b, &conns[i]);
  free(conns);
  free(pfd);
  return NULL;
}

static void bootstrap_destroy(zcc_bootstrap_t *b) {
  atomic_store(&b->stop, 1);
  if (b->listener_started) {
    zcc_bootstrap_gate_wake(&b->gate);
    pthread_join(b->listener, NULL);
  }
  if (b->gate_ready)
    zcc_bootstrap_gate_stop(&b->gate);
  zcc_socket_close(&b->listen_fd);
  for (int i = 0; i < b->nranks; i++) {
    zcc_socket_close(&b->out[i].fd);
    pthread_mutex_destroy(&b->out[i].lock);
  }
  for (msg_t *m = b->head, *next; m != NULL; m = next) {
    next = m->next;
    free(m->data);
    free(m);
  }
  pthread_cond_destroy(&b->qcond);
  pthread_mutex_destroy(&b->qlock);
  free(b->out);
  free(b->peers);
  free(b->in_open);
  free(b->in_seen);
  memset(b->secret, 0, sizeof(b->secret));
  free(b);
}

static zccResult_t bootstrap_alloc(int rank, int nranks,
                                   zcc_bootstrap_t **out) {
  zcc_bootstrap_t *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return zcc_error(zccSystemError, "bootstrap: out of memory");
  b->peers = calloc((size_t)nranks, sizeof(*b->peers));
  b->out = calloc((size_t)nranks, sizeof(*b->out));
  b->in_open = calloc((size_t)nranks, sizeof(*b->in_open));
  b->in_seen = calloc((size_t)nranks, sizeof(*b->in_seen));
  if (!b->peers || !b->out || !b->in_open || !b->in_seen) {
    free(b->peers);
    free(b->out);
    free(b->in_open);
    free(b->in_seen);
    free(b);
    return zcc_error(zccSystemError, "bootstrap: out of memory for %d ranks",
                     nranks);
  }
  b->rank = rank;
  b->nranks = nranks;
  b->listen_fd = -1;
  atomic_init(&b->stop, 0);
  atomic_init(&b->link_peer, -1);
  for (int i = 0; i < nranks; i++) {
    pthread_mutex_init(&b->out[i].lock, NULL);
    b->out[i].fd = -1;
  }
  pthread_mutex_init(&b->qlock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&b->qcond, &ca);
  pthread_condattr_destroy(&ca);
  *out = b;
  return zccSuccess;
}

/* Receive the root's reply and the address table into b->peers. */
static zccResult_t recv_table(zcc_bootstrap_t *b, int fd, const zcc_wait_t *w) {
  uint8_t hdr[REPLY_BYTES];
  zccResult_t res = zcc_socket_recv_all(fd, hdr, sizeof(hdr), w);
  if (res != zccSuccess)
    return zcc_bootstrap_error_in(res, "waiting for the bootstrap root");
  uint32_t result = get32(hdr + 4);
  char *msg = (char *)hdr + 12;
  msg[REPLY_MSG_BYTES - 1] = '\0';
  if (get32(hdr) != REPLY_MAGIC || result >= (uint32_t)zccNumResults)
    return zcc_error(zccInternalError, "bootstrap root sent a malformed reply");
  if (result != zccSuccess)
    return zcc_error((zccResult_t)result, "bootstrap root refused rank %d: %s",
                     b->rank, msg);
  if ((int)get32(hdr + 8) != b->nranks)
    return zcc_error(zccInternalError,
                     "bootstrap root sent a table of %d ranks, expected %d",
                     (int)get32(hdr + 8), b->nranks);
  uint8_t entry[WIRE_ADDR_BYTES];
  for (int i = 0; i < b->nranks; i++) {
    ZCC_CHECK(zcc_socket_recv_all(fd, entry, sizeof(entry), w));
    if (zcc_bootstrap_addr_decode(entry, &b->peers[i]) != 0)
      return zcc_error(zccInternalError,
                       "bootstrap root sent a bad address for rank %d", i);
  }
  return zccSuccess;
}

static zccResult_t out_connect(zcc_bootstrap_t *b, int peer, const zcc_wait_t *w);

/* Closed by the peer: our outgoing connection to it is write-only, so any
   readiness to read is its end (a crash or a freed bootstrap). */
static int out_closed(zcc_bootstrap_t *b, int peer) {
  out_conn_t *o = &b->out[peer];
  if (pthread_mutex_trylock(&o->lock) != 0) return 0; /* a send is under way */
  int closed = 0;
  if (o->fd >= 0) {
    struct pollfd p = {o->fd, POLLIN | POLLRDHUP, 0};
    closed = poll(&p, 1, 0) > 0 && p.revents != 0;
  }
  pthread_mutex_unlock(&o->lock);
  return closed;
}

/* Caller holds qlock. */
static int in_closed(const zcc_bootstrap_t *b, int peer) {
  return b->in_seen[peer] && b->in_open[peer] == 0;
}

zccResult_t zcc_bootstrap_link_check(zcc_bootstrap_t *b) {
  if (!b) return zccSuccess;
  if (atomic_load(&b->link_peer) < 0) {
    for (int peer = 0; peer < b->nranks; peer++) {
      out_conn_t *o = &b->out[peer];
      if (peer == b->rank || pthread_mutex_trylock(&o->lock) != 0) continue;
      int fd = o->fd, hit = 0;
      if (fd >= 0) {
        struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
        if (poll(&p, 1, 0) > 0 && (p.revents & POLLERR)) hit = link_note(b, peer, fd);
      }
      pthread_mutex_unlock(&o->lock);
      if (hit) break;
    }
  }
  int peer = atomic_load(&b->link_peer);
  if (peer < 0) return zccSuccess;
  pthread_mutex_lock(&b->qlock);
  int err = b->link_errno;
  pthread_mutex_unlock(&b->qlock);
  return zcc_error(zccRemoteError,
                   "the bootstrap connection with rank %d failed: %s (no answer to "
                   "ZCC_HEARTBEAT_MS keepalive probes: rank %d's host or the link to it "
                   "is down)", peer, strerror(err), peer);
}

zccResult_t zcc_bootstrap_peer_check(zcc_bootstrap_t *b, int peer) {
  if (!b || peer < 0 || peer >= b->nranks || peer == b->rank) return zccSuccess;
  pthread_mutex_lock(&b->qlock);
  int gone = in_closed(b, peer);
  pthread_mutex_unlock(&b->qlock);
  if (gone || out_closed(b, peer))
    return zcc_error(zccRemoteError,
                     "rank %d closed its bootstrap connection (it exited or gave up)", peer);
  return zccSuccess;
}

zccResult_t zcc_bootstrap_any_gone(zcc_bootstrap_t *b) {
  for (int p = 0; b && p < b->nranks; p++) ZCC_CHECK(zcc_bootstrap_peer_check(b, p));
  return zccSuccess;
}

/* How long a peer that never connected to us must stay gone (see take). */
#define GONE_GRACE_MS 1000
/* A connection to a silent peer (take, ring_link): how long it may try. */
#define PROBE_MS 2000

/*
 * Link the ring before init goes on: connect to the next rank, and wait
 * (within the init deadline) for the previous one's connection. From then
 * on a rank's death closes a connection its neighbour watches, so that a
 * rank killed right after the rendezvous fails the others' init at once
 * (and within ZCC_INIT_TIMEOUT when it dies before linking), not after
 * ZCC_CONNECT_TIMEOUT; failures travel around the ring the same way.
 */
static zccResult_t ring_link(zcc_bootstrap_t *b, const zcc_wait_t *w) {
  if (b->nranks == 1) return zccSuccess;
  int next = (b->rank + 1) % b->nranks, prev = (b->rank + b->nranks - 1) % b->nranks;
  pthread_mutex_lock(&b->out[next].lock);
  zccResult_t res = out_connect(b, next, w);
  pthread_mutex_unlock(&b->out[next].lock);
  if (res != zccSuccess) {
    char doing[64];
    snprintf(doing, sizeof(doing), "bootstrap: linking to rank %d", next);
    return zcc_bootstrap_error_in(res, doing);
  }
  int64_t start = zcc_now_ns();
  int probed = prev == next; /* 2 ranks: prev's end is next's, watched above */
  pthread_mutex_lock(&b->qlock);
  while (!b->in_seen[prev]) {
    res = zcc_wait_check(w);
    if (res == zccSuccess && out_closed(b, next))
      res = zcc_error(zccRemoteError,
                      "bootstrap: rank %d closed its connection while the ring was being "
                      "linked (it exited or gave up)", next);
    if (res == zccSuccess && probed && out_closed(b, prev))
      res = zcc_error(zccRemoteError, "bootstrap: rank %d closed its bootstrap (it exited or "
                      "gave up)", prev);
    /* prev is slow, or left after the rendezvous: after a slice, connect
       to it once. Its listener is up until it frees its bootstrap, so a
       refusal means it left (and a connection made is one whose end we
       watch); a rank that left fails this init whatever it had sent. */
    if (res == zccSuccess && !probed && zcc_now_ns() - start >= SLICE_MS * 1000000LL) {
      probed = 1;
      pthread_mutex_unlock(&b->qlock);
      out_conn_t *o = &b->out[prev];
      pthread_mutex_lock(&o->lock);
      if (o->fd < 0) {
        zcc_wait_t pw = zcc_wait_in(PROBE_MS, b->abort, "bootstrap probe");
        if (out_connect(b, prev, &pw) == zccRemoteError)
          res = zcc_error(zccRemoteError, "bootstrap: rank %d's listener refused a connection "
                          "(it exited or gave up)", prev);
        else
          zcc_clear_last_error();
      }
      pthread_mutex_unlock(&o->lock);
      pthread_mutex_lock(&b->qlock);
      if (res == zccSuccess) continue;
    }
    if (res != zccSuccess) {
      pthread_mutex_unlock(&b->qlock);
      char doing[128];
      snprintf(doing, sizeof(doing),
               "bootstrap: rank %d never connected to rank %d after the rendezvous (did it "
               "exit?)", prev, b->rank);
      return zcc_bootstrap_error_in(res, doing);
    }
    int64_t until = zcc_now_ns() + zcc_wait_poll_ms(w, SLICE_MS) * 1000000LL;
    struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
    pthread_cond_timedwait(&b->qcond, &b->qlock, &ts);
  }
  pthread_mutex_unlock(&b->qlock);
  return zccSuccess;
}

zccResult_t zcc_bootstrap_init(const zccUniqueId *id, int rank, int nranks,
                               int64_t timeout_ms, const atomic_int *abort,
                               zcc_bootstrap_t **out) {
  if (id == NULL || out == NULL)
    return zcc_error(zccInvalidArgument, "zcc_bootstrap_init: null argument");
  if (nranks <= 0 || rank < 0 || rank >= nranks)
    return zcc_error(zccInvalidArgument,
                     "zcc_bootstrap_init: rank %d of %d is out of range", rank,
                     nranks);
  zcc_unique_id_t u;
  ZCC_CHECK(zcc_bootstrap_id_decode(id, &u));
  zcc_bootstrap_t *b = NULL;
  ZCC_CHECK(bootstrap_alloc(rank, nranks, &b));
  memcpy(b->secret, u.secret, ZCC_SECRET_BYTES);
  b->hash = zcc_bootstrap_id_hash(&u);
  b->abort = abort;

  zccResult_t res;
  int root_fd = -1;
  char buf[ZCC_SOCKADDR_STRLEN];
  zcc_wait_t w = zcc_wait_in(timeout_ms, abort, "bootstrap init (ZCC_INIT_TIMEOUT)");
  ZCC_CHECK_GOTO(zcc_socket_connect(&u.root, &root_fd, &w), res, fail);
  ZCC_CHECK_GOTO(zcc_socket_auth_client(root_fd, u.secret,
                                        b->hash ^ ROOT_CONTEXT_SALT, &w),
                 res, fail);
  /* listen on the local address that reaches the root */
  socklen_t len = sizeof(b->addr.u);
  if (getsockname(root_fd, &b->addr.u.sa, &len) != 0) {
    res = zcc_error(zccSystemError, "getsockname failed: %s", strerror(errno));
    goto fail;
  }
  b->addr.len = len;
  zcc_sockaddr_set_port(&b->addr, 0);
  ZCC_CHECK_GOTO(zcc_socket_listen(&b->addr, 1024, &b->listen_fd), res, fail);
  ZCC_CHECK_GOTO(zcc_bootstrap_gate_init(&b->gate, b->secret, b->hash,
                                         HELLO_BYTES, INT64_MAX,
                                         "bootstrap listener"),
                 res, fail);
  b->gate_ready = 1;
  int rc = pthread_create(&b->listener, NULL, listener_main, b);
  if (rc != 0) {
    res = zcc_error(zccSystemError, "cannot start the bootstrap listener: %s",
                    strerror(rc));
    goto fail;
  }
  b->listener_started = 1;

  uint8_t info[INFO_BYTES];
  put32(info, INFO_MAGIC);
  put32(info + 4, ZCC_VERSION_CODE);
  put32(info + 8, (uint32_t)rank);
  put32(info + 12, (uint32_t)nranks);
  zcc_bootstrap_addr_encode(&b->addr, info + 16);
  ZCC_CHECK_GOTO(zcc_socket_send_all(root_fd, info, sizeof(info), &w), res,
                 fail);
  ZCC_CHECK_GOTO(recv_table(b, root_fd, &w), res, fail);
  zcc_socket_close(&root_fd);
  ZCC_CHECK_GOTO(ring_link(b, &w), res, fail);
  char buf2[ZCC_SOCKADDR_STRLEN];
  ZCC_INFO(BOOT, "bootstrap: rank %d of %d joined via root %s, listening on %s",
           rank, nranks, zcc_sockaddr_str(&u.root, buf),
           zcc_sockaddr_str(&b->addr, buf2));
  *out = b;
  return zccSuccess;
fail:
  zcc_socket_close(&root_fd);
  bootstrap_destroy(b);
  /* If this process serves the root, the rendezvous cannot complete now.
     A timeout is the root's own deadline as well: the other ranks time out
     with it, and say so (zccTimeout, not this rank's departure). */
  if (res != zccTimeout)
    zcc_bootstrap_root_abandon(zcc_bootstrap_id_hash(&u) ^ ROOT_CONTEXT_SALT, rank);
  return res;
}

int zcc_bootstrap_rank(const zcc_bootstrap_t *b) {
  return b->rank;
}
int zcc_bootstrap_nranks(const zcc_bootstrap_t *b) {
  return b->nranks;
}
const uint8_t *zcc_bootstrap_secret(const zcc_bootstrap_t *b) {
  return b->secret;
}
uint64_t zcc_bootstrap_hash(const zcc_bootstrap_t *b) {
  return b->hash;
}
const zcc_sockaddr_t *zcc_bootstrap_addr(const zcc_bootstrap_t *b) {
  return &b->addr;
}

/* Open (once) the authenticated connection to `peer`; caller holds its lock. */
static zccResult_t out_connect(zcc_bootstrap_t *b, int peer,
                               const zcc_wait_t *w) {
  out_conn_t *o = &b->out[peer];
  if (o->fd >= 0)
    return zccSuccess;
  int fd = -1;
  zccResult_t res;
  uint8_t hello[HELLO_BYTES];
  /* Every peer listened before the rendezvous gave out its address: a
     refusal now means it left (closed or aborted its bootstrap). */
  ZCC_CHECK_GOTO(zcc_socket_connect_listening(&b->peers[peer], &fd, w), res, fail);
  ZCC_CHECK_GOTO(zcc_socket_auth_client(fd, b->secret, b->hash, w), res, fail);
  put32(hello, HELLO_MAGIC);
  put32(hello + 4, (uint32_t)b->rank);
  put32(hello + 8, (uint32_t)b->nranks);
  ZCC_CHECK_GOTO(zcc_socket_send_all(fd, hello, sizeof(hello), w), res, fail);
  o->fd = fd;
  return zccSuccess;
fail:
  zcc_socket_close(&fd);
  return res;
}

static zccResult_t post(zcc_bootstrap_t *b, int peer, int kind, int tag,
                        const void *data, size_t bytes, const zcc_wait_t *w) {
  if (peer == b->rank) {
    msg_t *m = calloc(1, sizeof(*m));
    uint8_t *copy = m ? malloc(bytes ? bytes : 1) : NULL;
    if (copy == NULL) {
      free(m);
      return zcc_error(zccSystemError,
                       "bootstrap: out of memory for a %zu-byte message",
                       bytes);
    }
    if (bytes)
      memcpy(copy, data, bytes);
    *m = (msg_t){NULL, peer, kind, tag, bytes, copy};
    queue_push(b, m);
    return zccSuccess;
  }
  out_conn_t *o = &b->out[peer];
  uint8_t hdr[MSG_HDR_BYTES];
  put32(hdr, MSG_MAGIC);
  put32(hdr + 4, (uint32_t)kind);
  put32(hdr + 8, (uint32_t)tag);
  put64(hdr + 12, bytes);
  zccResult_t res;
  pthread_mutex_lock(&o->lock);
  ZCC_CHECK_GOTO(out_connect(b, peer, w), res, unlock);
  ZCC_CHECK_GOTO(zcc_socket_send_all(o->fd, hdr, sizeof(hdr), w), res, drop);
  ZCC_CHECK_GOTO(zcc_socket_send_all(o->fd, data, bytes, w), res, drop);
  pthread_mutex_unlock(&o->lock);
  return zccSuccess;
drop:
  /* a partial message leaves the stream unusable */
  zcc_socket_close(&o->fd);
unlock:
  pthread_mutex_unlock(&o->lock);
  char doing[64];
  snprintf(doing, sizeof(doing), "bootstrap send to rank %d", peer);
  return zcc_bootstrap_error_in(res, doing);
}


static zccResult_t take(zcc_bootstrap_t *b, int peer, int kind, int tag,
                        void *data, size_t bytes, const zcc_wait_t *w) {
  zccResult_t res = zccSuccess;
  int64_t gone_since = 0, start = zcc_now_ns();
  int probed = 0, refused = 0;
  pthread_mutex_lock(&b->qlock);
  for (;;) {
    msg_t *prev = NULL, *m = b->head;
    while (m != NULL &&
           !(m->peer == peer && m->kind == kind && m->tag == tag)) {
      prev = m;
      m = m->next;
    }
    if (m != NULL) {
      if (m->bytes != bytes) {
        res = zcc_error(zccInternalError,
                        "bootstrap: message from rank %d with tag %d has %zu "
                        "bytes, expected %zu",
                        peer, tag, m->bytes, bytes);
        break;
      }
      if (prev)
        prev->next = m->next;
      else
        b->head = m->next;
      if (b->tail == m)
        b->tail = prev;
      pthread_mutex_unlock(&b->qlock);
      if (bytes)
        memcpy(data, m->data, bytes);
      free(m->data);
      free(m);
      return zccSuccess;
    }
    if (b->in_seen[peer] && b->in_open[peer] == 0) {
      res = zcc_error(
          zccRemoteError,
          "bootstrap: rank %d closed its connection before sending tag %d",
          peer, tag);
      break;
    }
    if (atomic_load(&b->link_peer) == peer) {
      res = zcc_error(zccRemoteError,
                      "bootstrap: the connection with rank %d failed before it sent tag "
                      "%d: %s (its host or the link to it is down)",
                      peer, tag, strerror(b->link_errno));
      break;
    }
    /* A peer that never connected to us may still have left: our own
       connection to it (if any) reads its end. What it sent just before
       leaving may still be on its way through our listener, so that end
       counts only while no connection from it turns up for a grace
       period. (A peer that did connect is judged by that connection's
       end, above, which the listener sees after the last message.) */
    if (!b->in_seen[peer] && (refused || out_closed(b, peer))) {
      int64_t now = zcc_now_ns();
      if (gone_since == 0) gone_since = now;
      if (now - gone_since >= GONE_GRACE_MS * 1000000LL) {
        res = zcc_error(zccRemoteError,
                        "bootstrap: rank %d closed its bootstrap (it exited or gave "
                        "up) before sending tag %d",
                        peer, tag);
        break;
      }
    }
    res = zcc_wait_check(w);
    if (res != zccSuccess) {
      pthread_mutex_unlock(&b->qlock);
      char doing[96];
      snprintf(doing, sizeof(doing), "bootstrap recv from rank %d tag %d", peer,
               tag);
      return zcc_bootstrap_error_in(res, doing);
    }
    /* Waiting on a peer with no connection either way (not a ring
       neighbour, and it never spoke to us): nothing would tell us if it
       left. After a slice, connect to it once: a refusal says it left
       (every rank listens from before the rendezvous until it frees its
       bootstrap), and a connection made is one whose end we can watch. */
    if (!probed && peer != b->rank && !b->in_seen[peer] &&
        zcc_now_ns() - start >= SLICE_MS * 1000000LL) {
      probed = 1;
      pthread_mutex_unlock(&b->qlock);
      out_conn_t *o = &b->out[peer];
      pthread_mutex_lock(&o->lock);
      if (o->fd < 0) {
        zcc_wait_t pw = zcc_wait_in(PROBE_MS, b->abort, "bootstrap probe");
        if (out_connect(b, peer, &pw) == zccRemoteError) refused = 1;
        zcc_clear_last_error();
      }
      pthread_mutex_unlock(&o->lock);
      pthread_mutex_lock(&b->qlock);
      continue;
    }
    int64_t until = zcc_now_ns() + zcc_wait_poll_ms(w, SLICE_MS) * 1000000LL;
    struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
    pthread_cond_timedwait(&b->qcond, &b->qlock, &ts);
  }
  pthread_mutex_unlock(&b->qlock);
  return res;
}

static zccResult_t check_peer(const zcc_bootstrap_t *b, int peer,
                              const void *data, size_t bytes, const char *fn) {
  if (b == NULL)
    return zcc_error(zccInvalidArgument, "%s: bootstrap is null", fn);
  if (peer < 0 || peer >= b->nranks)
    return zcc_error(zccInvalidArgument, "%s: peer %d out of range [0, %d)", fn,
                     peer, b->nranks);
  if (data == NULL && bytes > 0)
    return zcc_error(zccInvalidArgument, "%s: data is null", fn);
  return zccSuccess;
}

zccResult_t zcc_bootstrap_send(zcc_bootstrap_t *b, int peer, int tag,
                               const void *data, size_t bytes,
                               int64_t timeout_ms) {
  ZCC_CHECK(check_peer(b, peer, data, bytes, "zcc_bootstrap_send"));
  zcc_wait_t w = zcc_wait_in(timeout_ms, b->abort, "bootstrap send");
  return post(b, peer, KIND_USER, tag, data, bytes, &w);
}

zccResult_t zcc_bootstrap_recv(zcc_bootstrap_t *b, int peer, int tag,
                               void *data, size_t bytes, int64_t timeout_ms) {
  ZCC_CHECK(check_peer(b, peer, data, bytes, "zcc_bootstrap_recv"));
  zcc_wait_t w = zcc_wait_in(timeout_ms, b->abort, "bootstrap recv");
  return take(b, peer, KIND_USER, tag, data, bytes, &w);
}

zccResult_t zcc_bootstrap_allgather(zcc_bootstrap_t *b, void *data,
                                    size_t bytes, int64_t timeout_ms) {
  if (b == NULL || (data == NULL && bytes > 0))
    return zcc_error(zccInvalidArgument,
                     "zcc_bootstrap_allgather: null argument");
  if (bytes > SIZE_MAX / (size_t)b->nranks)
    return zcc_error(zccInvalidArgument,
                     "zcc_bootstrap_allgather: %zu bytes x %d ranks overflows",
                     bytes, b->nranks);
  int n = b->nranks, r = b->rank;
  if (n == 1)
    return zccSuccess;
  zcc_wait_t w = zcc_wait_in(timeout_ms, b->abort, "bootstrap allgather");
  uint8_t *p = data;
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; s++) {
    int sblk = (r - s + n) % n, rblk = (r - s - 1 + n) % n;
    ZCC_CHECK(
        post(b, next, KIND_RING, sblk, p + (size_t)sblk * bytes, bytes, &w));
    ZCC_CHECK(
        take(b, prev, KIND_RING, rblk, p + (size_t)rblk * bytes, bytes, &w));
  }
  return zccSuccess;
}

zccResult_t zcc_bootstrap_barrier(zcc_bootstrap_t *b, int64_t timeout_ms) {
  if (b == NULL)
    return zcc_error(zccInvalidArgument,
                     "zcc_bootstrap_barrier: bootstrap is null");
  uint8_t *flags = calloc((size_t)b->nranks, 1);
  if (flags == NULL)
    return zcc_error(zccSystemError, "bootstrap barrier: out of memory");
  zccResult_t res = zcc_bootstrap_allgather(b, flags, 1, timeout_ms);
  free(flags);
  return res;
}

void zcc_bootstrap_free(zcc_bootstrap_t *b) {
  if (b != NULL)
    bootstrap_destroy(b);
}
