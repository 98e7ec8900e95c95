/*
 * net: ranks reached through a network plug-in (net.h: `ib` over libibverbs,
 * `socket` over TCP). This file is its host face and the per-communicator
 * plug-in both faces share; net_gpu.c is its GPU face (connectors moved by
 * a proxy thread). ZCC_NET_PLUGIN names the plug-in (default ib); where it
 * finds no device the entry connects no host pair and the `socket`
 * transport below it takes over (GPU communicators, which have no other
 * way across hosts, take the socket plug-in instead).
 *
 * Set-up: each rank listens once (the handle travels in its peer info) and
 * connects a send comm to every peer it reaches this way; the first message
 * on each connection is a hello naming the sender, so that the receiver can
 * tell which peer an accepted recv comm belongs to. Every connection of the
 * communicator is driven at once (connects, accepts, hellos), so no order
 * of visits can deadlock.
 *
 * Data: a ring of registered staging slots each way. A transfer is
 * messages of at most one slot; the first carries the operation's record
 * (opsig.h) in front of its data, checked by the receiver before it uses a
 * byte, and a side that gives up sends a ZCC_WIRE_FAIL record with its
 * cause. The sender copies into a slot and posts it; the bytes of a send
 * count as done when the plug-in says their message went, so a call never
 * returns with its data still in this rank's hands. The receiver keeps every
 * slot posted and copies (or reduces) each message out in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "net.h"
#include "param.h"
#include "reduce.h"
#include "transport.h"
#include "wait.h"

ZCC_PARAM_INT(net_disable, "NET_DISABLE", 0, "1: the net transport connects no pair");
ZCC_PARAM_INT(net_slots, "NET_SLOTS", 8,
              "staging slots of the net transport, each way of each connection");
ZCC_PARAM_INT(net_linger_ms, "NET_LINGER_MS", 1500,
              "ms a destroy waits, for all its peers together, to deliver failure records "
              "they have not taken");
ZCC_PARAM_INT(net_slot_bytes, "NET_SLOT_BYTES", 262144,
              "bytes of data in one net transport message (one staging slot)");

#define HELLO_MAGIC 0x7a636e68656c6f31ULL
#define NET_GRAIN 64 /* a message's data is whole elements of any type */

typedef struct hello {
  uint64_t magic;
  uint64_t comm_hash;
  int32_t from_rank;
  int32_t to_rank;
} hello_t;

typedef struct slot {
  void *req;     /* in flight: the plug-in's request */
  size_t bytes;  /* send: data bytes it carries; recv: bytes that landed */
  int state;     /* 0 free, 1 posted, 2 done (recv: landed, not yet used) */
} slot_t;

typedef struct ring {
  char *buf;       /* nslots x stride, registered */
  void *mh;
  slot_t *slots;
  unsigned head;   /* oldest slot in use */
  unsigned next;   /* next slot to take */
} ring_t;

typedef struct net_conn {
  void *send_comm, *recv_comm;
  ring_t tx, rx;
  /* the send transfer under way */
  int out_active;   /* a send transfer is under way (the executor gave it) */
  int hdr_sent;     /* its first message was posted */
  size_t out_bytes; /* its size */
  size_t staged_msg, staged_data; /* a message copied into the next slot, not yet
                                     posted (the plug-in said not now): its bytes */
  size_t tx_went;   /* its bytes that went, seen outside its progress */
  zcc_op_sig_t out_sig; /* its operation's (when out_active) */
  size_t out_posted;/* bytes of it posted */
  uint64_t send_pseq, recv_pseq;
  /* the receive transfer under way: its record was taken and matched */
  int in_checked;
  uint64_t in_opno; /* its operation's number */
  ZCC_NET_HANDLE_ALIGN uint8_t connect_handle[ZCC_NET_HANDLE_BYTES]; /* the peer's, as connect uses it */
  int hello_sent, failed_sent;
  int fail_pending; /* the failure record waits for the peer's clear-to-send */
  size_t fail_bytes;
} net_conn_t;

typedef struct accepted {
  void *recv_comm;
  ring_t rx;
} accepted_t;

typedef struct net_state {
  zcc_net_comm_t nc;   /* plug-in, device, auth, listener; the GPU face's state */
  int connected;       /* every connection of the communicator is up */
  accepted_t *unknown; /* accepted, hello not yet read */
  int nunknown, capunknown;
  size_t stride;       /* bytes of one slot: record + data */
  size_t data_bytes;   /* data in one message */
  int nslots;
  int eager;           /* the plug-in sends before the receive is posted (props) */
  /* The failure records' delivery after an error (net_fail) and at destroy
     (net_free) shares one deadline per communicator, however many peers. */
  int64_t fail_deadline_ns, linger_deadline_ns;
} net_state_t;

/* ms left until *deadline_ns, which the first caller sets to ms from now;
   at least 1 (one more try: a wait of 0 ms would have no deadline). */
static int64_t shared_ms(int64_t *deadline_ns, int64_t ms) {
  int64_t now = zcc_now_ns();
  if (*deadline_ns == 0) *deadline_ns = now + ms * 1000000;
  int64_t left = (*deadline_ns - now) / 1000000;
  return left > 1 ? left : 1;
}

static void pause_briefly(void) {
  struct timespec t = {0, 50000};
  nanosleep(&t, NULL);
}

static net_state_t *state_of(struct zccComm *comm) {
  return *zcc_transport_slot(comm, &zcc_transport_net);
}

static int is_p2p(const zcc_xfer_t *x) { return x->sig && x->sig->coll == ZCC_COLL_SENDRECV; }

static const char *plugin_name(const zcc_peer_info_t *p) {
  return p->net_plugin[0] ? p->net_plugin : NULL;
}

static int net_can_connect(const struct zccComm *comm, const zcc_peer_info_t *self,
                           const zcc_peer_info_t *peer) {
  const char *a = plugin_name(self), *b = plugin_name(peer);
  return a && b && strcmp(a, b) == 0;
}

static void net_refusal(const struct zccComm *comm, const zcc_peer_info_t *self,
                        const zcc_peer_info_t *peer, char *why, size_t len) {
  if (zcc_param_net_disable())
    snprintf(why, len, "ZCC_NET_DISABLE=1");
  else if (!plugin_name(self))
    snprintf(why, len, "rank %d has no device for network plug-in %s (ZCC_NET_PLUGIN)",
             self->rank, zcc_net_plugin_name());
  else if (!plugin_name(peer))
    snprintf(why, len, "rank %d has no device for its network plug-in", peer->rank);
  else
    snprintf(why, len, "rank %d uses plug-in %s, rank %d %s", self->rank, self->net_plugin,
             peer->rank, peer->net_plugin);
}

static zccResult_t ring_make(net_state_t *st, void *comm, ring_t *r) {
  /* Not cleared: a slot is read only where a receive landed or this rank
     wrote, and untouched pages cost nothing until a transfer uses them (16
     ranks of 4 hosts hold 24 rings each). */
  r->buf = aligned_alloc(64, st->stride * (size_t)st->nslots);
  r->slots = calloc((size_t)st->nslots, sizeof(*r->slots));
  if (!r->buf || !r->slots) return zcc_error(zccSystemError, "net: out of memory for staging");
  return st->nc.net->reg_mr(comm, r->buf, st->stride * (size_t)st->nslots, ZCC_NET_PTR_HOST,
                         &r->mh);
}

static void ring_free(net_state_t *st, void *comm, ring_t *r) {
  if (r->mh && comm) st->nc.net->dereg_mr(comm, r->mh);
  free(r->buf);
  free(r->slots);
  memset(r, 0, sizeof(*r));
}

static char *slot_buf(const net_state_t *st, ring_t *r, unsigned i) {
  return r->buf + (size_t)(i % (unsigned)st->nslots) * st->stride;
}

static slot_t *slot_at(const net_state_t *st, ring_t *r, unsigned i) {
  return &r->slots[i % (unsigned)st->nslots];
}

/*
 * Post receives for `want` more bytes of the transfer under way (at most
 * every slot). Never more than the sender will use: with a plug-in that is
 * not eager (ib) each posted receive is a clear-to-send it answers with a
 * message, and the next call's first messages would take those left over.
 */
static zccResult_t rx_post(net_state_t *st, void *comm, ring_t *r, size_t want) {
  while (r->next - r->head < (unsigned)st->nslots &&
         (size_t)(r->next - r->head) * st->data_bytes < want) {
    slot_t *s = slot_at(st, r, r->next);
    void *req = NULL;
    ZCC_CHECK(st->nc.net->irecv(comm, slot_buf(st, r, r->next), st->stride, r->mh, &req));
    if (!req) break;
    s->req = req;
    s->state = 1;
    r->next++;
  }
  return zccSuccess;
}

/* The oldest receive, when it has landed: its slot (state 2), else NULL. */
static zccResult_t rx_head(net_state_t *st, void *comm, ring_t *r, slot_t **out) {
  *out = NULL;
  if (r->head == r->next) return zccSuccess;
  slot_t *s = slot_at(st, r, r->head);
  if (s->state == 1) {
    int done = 0;
    size_t got = 0;
    ZCC_CHECK(st->nc.net->test(s->req, &done, &got));
    if (!done) return zccSuccess;
    s->req = NULL;
    s->bytes = got;
    s->state = 2;
  }
  *out = s;
  return zccSuccess;
}

/* The head receive is used up. */
static void rx_pop(net_state_t *st, ring_t *r) {
  slot_at(st, r, r->head)->state = 0;
  r->head++;
}

/* Sends that went: their slots free again; *bytes: the data they carried. */
static zccResult_t tx_reap(net_state_t *st, net_conn_t *c, size_t *bytes) {
  *bytes = 0;
  ring_t *r = &c->tx;
  while (r->head != r->next) {
    slot_t *s = slot_at(st, r, r->head);
    int done = 0;
    ZCC_CHECK(st->nc.net->test(s->req, &done, NULL));
    if (!done) break;
    *bytes += s->bytes;
    s->req = NULL;
    s->state = 0;
    r->head++;
  }
  return zccSuccess;
}

/* Post buf (bytes, already in slot r->next) as the next message; *posted 0: not now. */
static zccResult_t tx_post(net_state_t *st, net_conn_t *c, size_t msg_bytes, size_t data,
                           int *posted) {
  ring_t *r = &c->tx;
  *posted = 0;
  void *req = NULL;
  ZCC_CHECK(st->nc.net->isend(c->send_comm, slot_buf(st, r, r->next), msg_bytes, r->mh, &req));
  if (!req) return zccSuccess;
  slot_t *s = slot_at(st, r, r->next);
  s->req = req;
  s->bytes = data;
  s->state = 1;
  r->next++;
  *posted = 1;
  return zccSuccess;
}

static zccResult_t net_comm_setup(struct zccComm *comm, zcc_peer_info_t *self) {
  memset(self->net_plugin, 0, sizeof(self->net_plugin));
  if (comm->nranks == 1 || zcc_param_net_disable()) return zccSuccess;
  const zcc_net_ops_t *net = zcc_net_find(NULL);
  if (!net) return zcc_error(zccInvalidArgument, "%s", zcc_last_error());
  int ndev = 0;
  if (net->init() != zccSuccess || net->devices(&ndev) != zccSuccess || ndev == 0) {
    ZCC_INFO(NET, "net transport: plug-in %s found no device%s%s", net->name,
             ndev ? ": " : "", ndev ? zcc_last_error() : "");
    zcc_clear_last_error();
    /* Host communicators have the socket transport below this entry; GPU
       communicators across hosts have only this one: TCP through the
       socket plug-in, unless ZCC_NET_PLUGIN named one. */
    if (comm->device < 0 || zcc_net_plugin_chosen()) return zccSuccess;
    net = zcc_net_find("socket");
    ndev = 0;
    if (!net || net->init() != zccSuccess || net->devices(&ndev) != zccSuccess || ndev == 0) {
      ZCC_INFO(NET, "net transport: plug-in socket found no device either");
      zcc_clear_last_error();
      return zccSuccess;
    }
  }
  net_state_t *st = calloc(1, sizeof(*st));
  if (!st) return zcc_error(zccSystemError, "net: out of memory");
  *zcc_transport_slot(comm, &zcc_transport_net) = st;
  st->nc.net = net;
  st->nc.dev = 0;
  memcpy(st->nc.auth.secret, comm->secret, sizeof(st->nc.auth.secret));
  st->nc.auth.context = comm->hash;
  zcc_net_props_t props;
  ZCC_CHECK(net->get_properties(st->nc.dev, &props));
  int64_t ns = zcc_param_net_slots(), sb = zcc_param_net_slot_bytes();
  if (ns < 1 || ns > props.max_requests)
    return zcc_error(zccInvalidArgument, "ZCC_NET_SLOTS=%lld: the plug-in %s takes 1 to %d",
                     (long long)ns, net->name, props.max_requests);
  if (sb < 4096 || (size_t)sb + sizeof(zcc_wire_hdr_t) + ZCC_WIRE_FAIL_TEXT > props.max_message)
    return zcc_error(zccInvalidArgument,
                     "ZCC_NET_SLOT_BYTES=%lld: from 4096 to the plug-in's largest message "
                     "(%zu bytes) less %zu", (long long)sb, props.max_message,
                     sizeof(zcc_wire_hdr_t) + ZCC_WIRE_FAIL_TEXT);
  st->nslots = (int)ns;
  st->eager = props.eager;
  st->data_bytes = (size_t)sb - (size_t)sb % NET_GRAIN;
  st->stride = sizeof(zcc_wire_hdr_t) + st->data_bytes;
  if (st->stride < sizeof(zcc_wire_hdr_t) + ZCC_WIRE_FAIL_TEXT)
    st->stride = sizeof(zcc_wire_hdr_t) + ZCC_WIRE_FAIL_TEXT;
  st->stride = (st->stride + 63) / 64 * 64;
  _Static_assert(sizeof(self->net_handle) == ZCC_NET_HANDLE_BYTES, "handle size");
  ZCC_CHECK(net->listen(st->nc.dev, &st->nc.auth, self->net_handle, &st->nc.listen_comm));
  snprintf(self->net_plugin, sizeof(self->net_plugin), "%s", net->name);
  ZCC_INFO(NET, "net transport: plug-in %s, device %d (%s), %d slot(s) of %zu bytes each way",
           net->name, st->nc.dev, props.name, st->nslots, st->data_bytes);
  return zccSuccess;
}

static zccResult_t net_connect_all(struct zccComm *comm, net_state_t *st);

static zccResult_t net_connect(zcc_conn_t *conn, zcc_connect_phase_t phase) {
  struct zccComm *comm = conn->comm;
  net_state_t *st = state_of(comm);
  if (phase == ZCC_CONNECT_CREATE) {
    net_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return zcc_error(zccSystemError, "net: out of memory");
    memcpy(c->connect_handle, comm->peers[conn->peer].net_handle, ZCC_NET_HANDLE_BYTES);
    conn->priv = c;
    return zccSuccess;
  }
  if (phase == ZCC_CONNECT_ATTACH && !st->connected) return net_connect_all(comm, st);
  /* every connection is up on every rank: nobody connects here again */
  if (phase == ZCC_CONNECT_FINISH) zcc_net_comm_close_listen(&st->nc);
  return zccSuccess;
}

zcc_net_comm_t *zcc_net_comm_of(struct zccComm *comm) {
  net_state_t *st = state_of(comm);
  return st ? &st->nc : NULL;
}

void zcc_net_comm_close_listen(zcc_net_comm_t *nc) {
  if (nc && nc->listen_comm) {
    nc->net->close_listen(nc->listen_comm);
    nc->listen_comm = NULL;
  }
}

/* An accepted recv comm whose hello arrived: claim it for its peer, or drop it. */
static zccResult_t claim(struct zccComm *comm, net_state_t *st, accepted_t *a, int *claimed) {
  *claimed = 0;
  slot_t *s = NULL;
  ZCC_CHECK(rx_head(st, a->recv_comm, &a->rx, &s));
  if (!s) return zccSuccess;
  hello_t h;
  memset(&h, 0, sizeof(h));
  memcpy(&h, slot_buf(st, &a->rx, a->rx.head), s->bytes < sizeof(h) ? s->bytes : sizeof(h));
  int from = h.from_rank;
  zcc_conn_t *conn = from >= 0 && from < comm->nranks ? comm->conns[from] : NULL;
  net_conn_t *c = conn && conn->ops == &zcc_transport_net ? conn->priv : NULL;
  if (s->bytes != sizeof(h) || h.magic != HELLO_MAGIC || h.comm_hash != comm->hash ||
      h.to_rank != comm->rank || !c || c->recv_comm) {
    ZCC_WARN("net: dropped a connection whose hello does not name a peer of comm %s "
             "(rank %d, for rank %d)", comm->name, from, h.to_rank);
    *claimed = -1;
    return zccSuccess;
  }
  rx_pop(st, &a->rx);
  c->recv_comm = a->recv_comm;
  c->rx = a->rx;
  *claimed = 1;
  return zccSuccess;
}

static zccResult_t net_connect_all(struct zccComm *comm, net_state_t *st) {
  int n = comm->nranks;
  zcc_wait_t w = zcc_wait_in(zcc_transport_connect_timeout_ms(), &comm->abort_flag,
                             "net connect");
  for (;;) {
    int waiting = 0, moved = 0;
    for (int j = 0; j < n; j++) {
      zcc_conn_t *conn = comm->conns[j];
      if (!conn || conn->ops != &zcc_transport_net) continue;
      net_conn_t *c = conn->priv;
      if (!c->send_comm) {
        ZCC_CHECK(st->nc.net->connect(st->nc.dev, &st->nc.auth, c->connect_handle, &c->send_comm));
        if (c->send_comm) {
          ZCC_CHECK(ring_make(st, c->send_comm, &c->tx));
          moved = 1;
        }
      }
      if (c->send_comm && !c->hello_sent) {
        hello_t h = {HELLO_MAGIC, comm->hash, comm->rank, j};
        memcpy(slot_buf(st, &c->tx, c->tx.next), &h, sizeof(h));
        int posted = 0;
        ZCC_CHECK(tx_post(st, c, sizeof(h), 0, &posted));
        c->hello_sent = posted;
      }
      if (c->hello_sent) {
        size_t ignored;
        ZCC_CHECK(tx_reap(st, c, &ignored));
      }
      if (!c->recv_comm || !c->hello_sent || c->tx.head != c->tx.next) waiting = 1;
    }
    /* new connections, then the hellos of those not yet known */
    for (;;) {
      void *rc = NULL;
      ZCC_CHECK(st->nc.net->accept(st->nc.listen_comm, &rc));
      if (!rc) break;
      if (st->nunknown == st->capunknown) {
        int cap = st->capunknown ? 2 * st->capunknown : 8;
        accepted_t *u = realloc(st->unknown, sizeof(*u) * (size_t)cap);
        if (!u) {
          st->nc.net->close_recv(rc);
          return zcc_error(zccSystemError, "net: out of memory");
        }
        st->unknown = u;
        st->capunknown = cap;
      }
      accepted_t *a = &st->unknown[st->nunknown++];
      memset(a, 0, sizeof(*a));
      a->recv_comm = rc;
      ZCC_CHECK(ring_make(st, rc, &a->rx));
      ZCC_CHECK(rx_post(st, rc, &a->rx, 1)); /* for the hello */
      moved = 1;
    }
    for (int i = st->nunknown - 1; i >= 0; i--) {
      accepted_t *a = &st->unknown[i];
      int claimed = 0;
      zccResult_t res = claim(comm, st, a, &claimed);
      if (res != zccSuccess) claimed = -1; /* a connection that failed before its hello */
      if (!claimed) continue;
      if (claimed < 0) {
        ring_free(st, a->recv_comm, &a->rx);
        st->nc.net->close_recv(a->recv_comm);
        zcc_clear_last_error();
      }
      st->unknown[i] = st->unknown[--st->nunknown];
      moved = 1;
    }
    if (!waiting) break;
    ZCC_CHECK(zcc_wait_check(&w));
    for (int j = 0; j < n; j++) {
      zcc_conn_t *conn = comm->conns[j];
      net_conn_t *c = conn && conn->ops == &zcc_transport_net ? conn->priv : NULL;
      if (c && !c->recv_comm) ZCC_CHECK(zcc_bootstrap_peer_check(comm->bootstrap, j));
    }
    ZCC_CHECK(zcc_bootstrap_any_gone(comm->bootstrap)); /* a neighbour's failure dooms init */
    if (!moved) pause_briefly();
  }
  st->connected = 1;
  for (int j = 0; j < n; j++) {
    zcc_conn_t *conn = comm->conns[j];
    if (conn && conn->ops == &zcc_transport_net)
      ZCC_INFO(NET, "net connection to rank %d established over %s", j, st->nc.net->name);
  }
  return zccSuccess;
}

/* A ZCC_WIRE_FAIL record (in slot data `rec`, `bytes` long) from the peer, as an error. */
static zccResult_t peer_failed(zcc_conn_t *conn, const char *rec, size_t bytes) {
  zcc_wire_hdr_t h;
  memcpy(&h, rec, sizeof(h));
  char text[ZCC_WIRE_FAIL_TEXT + 1] = "";
  size_t len = bytes - sizeof(h);
  if (len > h.bytes) len = (size_t)h.bytes;
  if (len > ZCC_WIRE_FAIL_TEXT) len = ZCC_WIRE_FAIL_TEXT;
  memcpy(text, rec + sizeof(h), len);
  text[len] = '\0';
  return zcc_peer_failed_error(conn->comm, conn->peer, 0, (int32_t)h.code, h.sig.root - 1,
                               text);
}

static zccResult_t send_progress(zcc_conn_t *conn, net_state_t *st, net_conn_t *c,
                                 zcc_xfer_t *x) {
  size_t went = 0;
  ZCC_CHECK(tx_reap(st, c, &went));
  x->done += went + c->tx_went;
  c->tx_went = 0;
  if (!c->out_active) {
    c->out_active = 1;
    c->hdr_sent = 0;
    c->out_bytes = x->bytes;
    if (x->sig)
      c->out_sig = *x->sig;
    else
      memset(&c->out_sig, 0, sizeof(c->out_sig));
  }
  while (c->out_posted < x->bytes) {
    ring_t *r = &c->tx;
    if (r->next - r->head == (unsigned)st->nslots) break;
    if (!c->staged_msg) {
      size_t ready = x->avail - c->out_posted;
      size_t n = ready < st->data_bytes ? ready : st->data_bytes;
      /* whole grains, unless this is the end of the transfer */
      if (c->out_posted + n < x->bytes) n -= n % NET_GRAIN;
      if (n == 0) break;
      char *buf = slot_buf(st, r, r->next);
      size_t off = 0;
      if (!c->hdr_sent) {
        zcc_wire_hdr_t h;
        zcc_wire_hdr_fill(&h, x->sig, x->bytes, is_p2p(x) ? c->send_pseq + 1 : 0);
        memcpy(buf, &h, sizeof(h));
        off = sizeof(h);
      }
      memcpy(buf + off, (const char *)x->src + c->out_posted, n);
      c->staged_msg = off + n;
      c->staged_data = n;
    }
    size_t n = c->staged_data;
    int posted = 0;
    ZCC_CHECK(tx_post(st, c, c->staged_msg, n, &posted));
    if (!posted) break;
    c->staged_msg = c->staged_data = 0;
    if (!c->hdr_sent && is_p2p(x)) c->send_pseq++;
    c->hdr_sent = 1;
    c->out_posted += n;
  }
  if (c->hdr_sent && x->done == x->bytes && c->tx.head == c->tx.next) {
    c->out_active = 0; /* every message of it went */
    c->hdr_sent = 0;
    c->out_posted = 0;
  }
  return zccSuccess;
}

static zccResult_t peer_failed(zcc_conn_t *conn, const char *rec, size_t bytes);
static const char *next_fail_record(net_state_t *st, net_conn_t *c, slot_t **s,
                                    zcc_wire_hdr_t *h);

/*
 * A transfer all landed. Where the plug-in sends eagerly, the peer may have
 * sent it before its call failed (a timeout); it says so right behind it
 * with its failure record, and then this call must not succeed on its data
 * (as the socket transport's look-ahead). One receive posted to see by (the
 * next transfer uses it); a peer gone after sending all of it is left for
 * the next receive to meet.
 */
static zccResult_t stale_check(zcc_conn_t *conn, net_state_t *st, net_conn_t *c) {
  if (!st->eager) return zccSuccess;
  slot_t *s = NULL;
  zcc_wire_hdr_t h;
  const char *msg = next_fail_record(st, c, &s, &h);
  return msg && c->in_opno >= h.pseq ? peer_failed(conn, msg, s->bytes) : zccSuccess;
}

static zccResult_t recv_progress(zcc_conn_t *conn, net_state_t *st, net_conn_t *c,
                                 zcc_xfer_t *x) {
  for (;;) {
    if (c->in_checked && x->done == x->bytes) break;
    ZCC_CHECK(rx_post(st, c->recv_comm, &c->rx, x->bytes - x->done));
    slot_t *s = NULL;
    ZCC_CHECK(rx_head(st, c->recv_comm, &c->rx, &s));
    if (!s) break;
    const char *msg = slot_buf(st, &c->rx, c->rx.head);
    size_t off = 0;
    if (!c->in_checked) {
      zcc_wire_hdr_t h;
      if (s->bytes < sizeof(h))
        return zcc_error(zccInternalError, "net: rank %d sent a %zu-byte message where a "
                         "transfer should begin", conn->peer, s->bytes);
      memcpy(&h, msg, sizeof(h));
      if (h.magic == ZCC_WIRE_FAIL) return peer_failed(conn, msg, s->bytes);
      uint64_t pseq = is_p2p(x) ? c->recv_pseq + 1 : 0;
      ZCC_CHECK(zcc_wire_hdr_check(&h, x->sig, x->bytes, pseq, conn->peer, conn->comm));
      if (pseq) c->recv_pseq = pseq;
      c->in_checked = 1;
      c->in_opno = h.sig.opno;
      off = sizeof(h);
    }
    size_t n = s->bytes - off;
    if (n > x->bytes - x->done)
      return zcc_error(zccInternalError, "net: rank %d sent %zu bytes past the end of a "
                       "%zu-byte transfer", conn->peer, n - (x->bytes - x->done), x->bytes);
    if (n) {
      if (x->red) {
        size_t t = zcc_type_size(x->type);
        if (n % t)
          return zcc_error(zccInternalError, "net: rank %d sent a message of %zu bytes, not "
                           "whole %zu-byte elements", conn->peer, n, t);
        zcc_xfer_reduce(x, (char *)x->dst + x->done, NULL, 0, msg + off, n / t);
      } else {
        memcpy((char *)x->dst + x->done, msg + off, n);
      }
      x->done += n;
    }
    rx_pop(st, &c->rx);
  }
  if (c->in_checked && x->done == x->bytes) {
    c->in_checked = 0;
    return stale_check(conn, st, c);
  }
  return zccSuccess;
}

/* The record at the front of landed head slot s (NULL: none): *h, and the message. */
static const char *head_record(const net_state_t *st, net_conn_t *c, const slot_t *s,
                               zcc_wire_hdr_t *h) {
  if (!s || s->bytes < sizeof(*h)) return NULL;
  const char *msg = slot_buf(st, &c->rx, c->rx.head);
  memcpy(h, msg, sizeof(*h));
  return msg;
}

/* The peer's next message, when it has landed and is a failure record: the
   message, with its slot and record (else NULL). One receive posted lets it
   land; a data message that lands instead stays for its call, a plug-in
   error stays in the ring for the next receive to meet, and the thread's
   last error is kept either way. */
static const char *next_fail_record(net_state_t *st, net_conn_t *c, slot_t **s,
                                    zcc_wire_hdr_t *h) {
  char saved[1024];
  snprintf(saved, sizeof(saved), "%s", zcc_last_error());
  const char *msg = NULL;
  *s = NULL;
  if (rx_post(st, c->recv_comm, &c->rx, 1) == zccSuccess &&
      rx_head(st, c->recv_comm, &c->rx, s) == zccSuccess)
    msg = head_record(st, c, *s, h);
  zcc_restore_last_error(saved);
  return msg && h->magic == ZCC_WIRE_FAIL ? msg : NULL;
}

/*
 * A send failed because the peer is gone: what it sent last may say why (its
 * failure record, or the record of a call that is not this one), and that is
 * the error to report.
 */
static zccResult_t send_failed(zcc_conn_t *conn, net_state_t *st, net_conn_t *c,
                               const zcc_xfer_t *x, zccResult_t res) {
  if (res != zccRemoteError || !c->recv_comm || c->in_checked) return res;
  char cause[1024];
  snprintf(cause, sizeof(cause), "%s", zcc_last_error());
  slot_t *s = NULL;
  zcc_wire_hdr_t h;
  const char *msg = NULL;
  if (rx_head(st, c->recv_comm, &c->rx, &s) == zccSuccess &&
      (msg = head_record(st, c, s, &h)) != NULL) {
    if (h.magic == ZCC_WIRE_FAIL) return peer_failed(conn, msg, s->bytes);
    if (h.magic == ZCC_WIRE_DATA) {
      zccResult_t mm = zcc_wire_hdr_check(&h, x->sig, h.bytes, h.pseq, conn->peer, conn->comm);
      if (mm == zccInvalidUsage) return mm;
    }
  }
  zcc_restore_last_error(cause);
  return res;
}

static zccResult_t net_progress(zcc_conn_t *conn, zcc_xfer_t *x, int *moved) {
  net_state_t *st = state_of(conn->comm);
  net_conn_t *c = conn->priv;
  if (x->bytes == 0) return zccSuccess; /* never sent, on either side */
  size_t before = x->done;
  int was_checked = c->in_checked, was_active = c->hdr_sent;
  if (x->is_recv) {
    ZCC_CHECK(recv_progress(conn, st, c, x));
  } else {
    zccResult_t res = send_progress(conn, st, c, x);
    if (res != zccSuccess) return send_failed(conn, st, c, x, res);
  }
  if (x->done != before || c->in_checked != was_checked || c->hdr_sent != was_active)
    *moved = 1;
  return zccSuccess;
}

/* Is a message from the peer waiting? (errors too: the receive reports them) */
static int net_pending(zcc_conn_t *conn) {
  net_state_t *st = state_of(conn->comm);
  net_conn_t *c = conn->priv;
  if (!c || !c->recv_comm) return 0;
  slot_t *s = NULL;
  /* one receive posted to see it by (the next transfer from the peer uses it) */
  if (rx_post(st, c->recv_comm, &c->rx, 1) != zccSuccess ||
      rx_head(st, c->recv_comm, &c->rx, &s) != zccSuccess)
    return 1;
  return s != NULL;
}

/*
 * While waiting: has the peer given up (its record is next), gone, or sent
 * a transfer of another call with this one's number? A send waits for the
 * peer to post a receive, so two ranks that both only send (a broadcast with
 * different roots) would wait for each other until the timeout: one receive
 * posted here lets the peer's first message land, and its record tells.
 */
static zccResult_t net_check(zcc_conn_t *conn) {
  net_state_t *st = state_of(conn->comm);
  net_conn_t *c = conn->priv;
  /* (a dead peer under a send shows in the send's own progress: its test fails) */
  if (!c || !c->recv_comm || c->in_checked || !c->out_active) return zccSuccess;
  slot_t *s = NULL;
  zccResult_t res = rx_post(st, c->recv_comm, &c->rx, 1);
  if (res == zccSuccess) res = rx_head(st, c->recv_comm, &c->rx, &s);
  if (res != zccSuccess) {
    /* The peer is gone; but it may have left after taking all of our send,
       whose last completion is then in: the send decides (the probe's error
       stays in the ring for the next receive to meet). */
    size_t went = 0;
    if (tx_reap(st, c, &went) == zccSuccess) {
      c->tx_went += went;
      if (c->hdr_sent && c->out_posted == c->out_bytes && c->tx.head == c->tx.next) {
        zcc_clear_last_error();
        return zccSuccess;
      }
    }
    return res;
  }
  zcc_wire_hdr_t h;
  const char *msg = head_record(st, c, s, &h);
  if (!msg) return zccSuccess;
  if (h.magic == ZCC_WIRE_FAIL) return peer_failed(conn, msg, s->bytes);
  /* a collective's transfer of this call's number: it must be this call */
  if (h.magic == ZCC_WIRE_DATA && h.sig.seq == c->out_sig.seq &&
      h.sig.coll != ZCC_COLL_SENDRECV && c->out_sig.coll != ZCC_COLL_SENDRECV)
    return zcc_wire_hdr_check(&h, &c->out_sig, h.bytes, h.pseq, conn->peer, conn->comm);
  return zccSuccess;
}

/* A failure record from a peer this rank's call does not wait on (see
   zcc_transport_ops_t.fail_peek): one receive posted lets it land, as for
   net_pending; a data message that lands instead stays for its call, and a
   closed connection is left for the calls with the peer to meet. */
static zccResult_t net_fail_peek(zcc_conn_t *conn) {
  net_state_t *st = state_of(conn->comm);
  net_conn_t *c = conn->priv;
  if (!st || !c || !c->recv_comm || c->in_checked) return zccSuccess;
  slot_t *s = NULL;
  zcc_wire_hdr_t h;
  const char *msg = next_fail_record(st, c, &s, &h);
  return msg && h.code != zccTimeout ? peer_failed(conn, msg, s->bytes) : zccSuccess;
}

/*
 * Post the failure record (it waits in the next slot) once the peer asks
 * for a message, and wait until it went: up to ms. The plug-ins move bytes
 * only when called, so this side must stay to hand the record over.
 */
static void fail_deliver(net_state_t *st, net_conn_t *c, int64_t ms) {
  zcc_wait_t w = zcc_wait_in(ms, NULL, "net failure record");
  size_t went;
  for (;;) {
    /* A peer that failed too waits to hand over its own record: one receive
       posted lets it go, and its record lands where nobody reads it. */
    slot_t *s = NULL;
    if (c->recv_comm && !c->in_checked && rx_post(st, c->recv_comm, &c->rx, 1) == zccSuccess &&
        rx_head(st, c->recv_comm, &c->rx, &s) == zccSuccess && s)
      rx_pop(st, &c->rx);
    if (c->fail_pending) {
      int posted = 0;
      if (tx_post(st, c, c->fail_bytes, 0, &posted) != zccSuccess) break;
      if (posted) c->fail_pending = 0;
    }
    if (!c->fail_pending && c->tx.head == c->tx.next) break;
    if (tx_reap(st, c, &went) != zccSuccess || zcc_wait_check(&w) != zccSuccess) break;
    pause_briefly();
  }
}

static void net_fail(zcc_conn_t *conn) {
  net_state_t *st = state_of(conn->comm);
  net_conn_t *c = conn->priv;
  if (!st || !c || !c->send_comm || c->failed_sent) return;
  uintptr_t owner = atomic_load(&conn->comm->owner);
  if (owner != 0 && !zcc_comm_held_here(conn->comm)) {
    /* another thread's call is in flight: it sends the record when it ends */
    atomic_store(&conn->comm->fail_deferred, 1);
    return;
  }
  c->failed_sent = 1;
  /* Not in the middle of a transfer (its messages would take the record for
     data), and not when every slot is in flight. A transfer's first message
     staged but never posted (it waited for the peer's clear-to-send) is not
     begun: the record takes its slot, or the peer would learn nothing but a
     closed connection. */
  if (c->hdr_sent || c->tx.next - c->tx.head == (unsigned)st->nslots) return;
  c->staged_msg = c->staged_data = 0;
  /* Best effort, and the thread's last error must stay the original one. */
  char saved[1024];
  snprintf(saved, sizeof(saved), "%s", zcc_last_error());
  char *buf = slot_buf(st, &c->tx, c->tx.next);
  zcc_wire_hdr_t h;
  memset(&h, 0, sizeof(h));
  h.magic = ZCC_WIRE_FAIL;
  h.code = (uint32_t)atomic_load(&conn->comm->async_error);
  h.pseq = conn->comm->fail_opno;
  char text[ZCC_WIRE_FAIL_TEXT];
  h.sig.root = conn->comm->fail_origin + 1;
  snprintf(text, sizeof(text), "%s", conn->comm->fail_text);
  h.bytes = strlen(text);
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), text, (size_t)h.bytes);
  c->fail_bytes = sizeof(h) + (size_t)h.bytes;
  c->fail_pending = 1;
  c->out_active = c->hdr_sent = 1; /* nothing may follow */
  fail_deliver(st, c, shared_ms(&st->fail_deadline_ns, 200));
  zcc_restore_last_error(saved);
}

static void net_free(zcc_conn_t *conn) {
  net_state_t *st = state_of(conn->comm);
  net_conn_t *c = conn->priv;
  if (!c) return;
  if (st && c->send_comm && (c->fail_pending || c->tx.head != c->tx.next) &&
      !atomic_load(&conn->comm->abort_flag)) {
    /* After a failure: a record, or the messages of the call that failed,
       the peer has not taken yet: they tell it why this rank left (a
       mismatched call's own record names both calls on the peer). */
    char saved[1024];
    snprintf(saved, sizeof(saved), "%s", zcc_last_error());
    /* The record of this rank's own failure (a mismatch, a timeout), and
       the failed call's messages after a mismatch (they name this rank's
       call), get ZCC_NET_LINGER_MS: a peer that comes late learns why.
       Where this rank failed because another did (zccRemoteError), the
       close says as much, and peers that wait on this rank for something
       else (a clear-to-send, a bootstrap message) hear of the failure only
       from it: no longer than the error's own delivery deadline (with a
       linger the failure crossed each such rank 1.5 s late). The messages
       of a call that failed otherwise tell the peer only that this rank
       left: the same deadline. */
    int err = atomic_load(&conn->comm->async_error);
    if (err == zccRemoteError || (!c->fail_pending && err != zccSuccess && err != zccInvalidUsage))
      fail_deliver(st, c, shared_ms(&st->fail_deadline_ns, 200));
    else
      fail_deliver(st, c, shared_ms(&st->linger_deadline_ns, zcc_param_net_linger_ms()));
    zcc_restore_last_error(saved);
  }
  if (st) {
    /* closing the comms frees their requests too */
    ring_free(st, c->send_comm, &c->tx);
    ring_free(st, c->recv_comm, &c->rx);
    if (c->send_comm) st->nc.net->close_send(c->send_comm);
    if (c->recv_comm) st->nc.net->close_recv(c->recv_comm);
  }
  free(c);
  conn->priv = NULL;
}

static void net_comm_free(struct zccComm *comm) {
  net_state_t *st = state_of(comm);
  if (!st) return;
  zcc_net_gpu_release(comm, &st->nc);
  for (int i = 0; i < st->nunknown; i++) {
    ring_free(st, st->unknown[i].recv_comm, &st->unknown[i].rx);
    st->nc.net->close_recv(st->unknown[i].recv_comm);
  }
  free(st->unknown);
  zcc_net_comm_close_listen(&st->nc);
  free(st);
  *zcc_transport_slot(comm, &zcc_transport_net) = NULL;
}

const zcc_transport_ops_t zcc_transport_net = {
    .name = "net",
    .can_connect = net_can_connect,
    .comm_setup = net_comm_setup,
    .connect = net_connect,
    .progress = net_progress,
    .pending = net_pending,
    .fail_peek = net_fail_peek,
    .check = net_check,
    .fail = net_fail,
    .free = net_free,
    .comm_free = net_comm_free,
    .refusal = net_refusal,
    .gpu = &zcc_net_gpu_face,
};
