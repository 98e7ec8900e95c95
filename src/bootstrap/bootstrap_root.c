/*
 * Bootstrap roots: each serves one rendezvous. Ranks connect through the
 * gate (bootstrap.c), send {rank, nranks, address}, and once all arrived
 * each gets the address table. Inconsistent ranks end the rendezvous with
 * an error sent to every rank; ZCC_INIT_TIMEOUT bounds it.
 *
 * One detached thread per process serves every root at once, and exits
 * when none is left; a root's gate (its pipes, and the handshake thread)
 * is made when its first connection comes. So an id that nobody uses
 * holds its listening socket alone until ZCC_INIT_TIMEOUT, not a thread
 * and pipes of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap_proto.h"
#include "check.h"
#include "param.h"

ZCC_PARAM_INT(
    init_timeout_ms, "INIT_TIMEOUT", 120000,
    "ms the bootstrap root waits for every rank to arrive, and ranks wait "
    "for the rendezvous to complete; then init fails with zccTimeout (<= 0: "
    "forever)")

int64_t zcc_bootstrap_init_timeout_ms(void) {
  return zcc_param_init_timeout_ms();
}

/* ---- root ---------------------------------------------------------------- */

typedef struct root {
  struct root *next; /* the service's list */
  gate_t gate;
  int gate_ready;    /* made at the first connection */
  uint8_t secret[ZCC_SECRET_BYTES];
  uint64_t context;
  int listen_fd;
  int64_t deadline_ns;
  int nranks; /* 0 until the first rank says */
  int arrived;
  int *fds; /* [nranks], -1: not arrived */
  zcc_sockaddr_t *addrs;
  char where[ZCC_SOCKADDR_STRLEN];
} root_t;

/* Send a reply header (and on success the address table); best effort. */
static void root_reply(root_t *r, int fd, zccResult_t result, const char *msg) {
  size_t bytes =
      REPLY_BYTES +
      (result == zccSuccess ? (size_t)r->nranks * WIRE_ADDR_BYTES : 0);
  uint8_t *buf = calloc(1, bytes);
  if (buf == NULL) {
    ZCC_WARN("bootstrap root %s: out of memory for a reply", r->where);
    return;
  }
  put32(buf, REPLY_MAGIC);
  put32(buf + 4, (uint32_t)result);
  put32(buf + 8, (uint32_t)r->nranks);
  snprintf((char *)buf + 12, REPLY_MSG_BYTES, "%s", msg);
  if (result == zccSuccess)
    for (int i = 0; i < r->nranks; i++)
      zcc_bootstrap_addr_encode(&r->addrs[i], buf + REPLY_BYTES +
                                                  (size_t)i * WIRE_ADDR_BYTES);
  zcc_wait_t w = zcc_wait_in(ROOT_SEND_MS, NULL, "bootstrap root reply");
  if (zcc_socket_send_all(fd, buf, bytes, &w) != zccSuccess)
    ZCC_WARN("bootstrap root %s: reply to a rank failed: %s", r->where,
             zcc_last_error());
  free(buf);
}

/* Report `msg` to every arrived rank and to `extra_fd`, ending the rendezvous.
 */
static void root_fail(root_t *r, int extra_fd, zccResult_t result,
                      const char *msg) {
  ZCC_WARN("bootstrap root %s: %s", r->where, msg);
  zcc_socket_close(&r->listen_fd); /* late comers are refused from now on */
  for (int i = 0; i < r->nranks; i++)
    if (r->fds[i] >= 0)
      root_reply(r, r->fds[i], result, msg);
  if (extra_fd >= 0)
    root_reply(r, extra_fd, result, msg);
}

static void root_forget(root_t *r) {
  for (int i = 0; i < r->nranks; i++)
    zcc_socket_close(&r->fds[i]);
  free(r->fds);
  free(r->addrs);
  r->fds = NULL;
  r->addrs = NULL;
  r->nranks = 0;
  r->arrived = 0;
}

/* Admit one authenticated rank; returns 1 when the rendezvous is over. */
static int root_admit(root_t *r, gate_conn_t *c) {
  char msg[REPLY_MSG_BYTES];
  uint32_t magic = get32(c->hello), version = get32(c->hello + 4);
  int rank = (int32_t)get32(c->hello + 8),
      nranks = (int32_t)get32(c->hello + 12);
  zcc_sockaddr_t addr;
  if (magic != INFO_MAGIC ||
      zcc_bootstrap_addr_decode(c->hello + 16, &addr) != 0) {
    ZCC_WARN("bootstrap root %s: malformed rank info from %s, dropped",
             r->where, c->from);
    return 0;
  }
  if (version != ZCC_VERSION_CODE || nranks <= 0 || rank < 0 ||
      rank >= nranks) {
    snprintf(msg, sizeof(msg), "rank %d of %d (zcc version %u) refused: %s",
             rank, nranks, version,
             version != ZCC_VERSION_CODE ? "version differs from the root's"
                                         : "rank out of range");
    ZCC_WARN("bootstrap root %s: %s", r->where, msg);
    root_reply(r, c->fd, zccInvalidUsage, msg);
    return 0;
  }
  if (r->nranks == 0) {
    r->fds = malloc(sizeof(int) * (size_t)nranks);
    r->addrs = calloc((size_t)nranks, sizeof(zcc_sockaddr_t));
    if (r->fds == NULL || r->addrs == NULL) {
      free(r->fds);
      free(r->addrs);
      r->fds = NULL;
      r->addrs = NULL;
      root_reply(r, c->fd, zccSystemError, "bootstrap root out of memory");
      return 0;
    }
    for (int i = 0; i < nranks; i++)
      r->fds[i] = -1;
    r->nranks = nranks;
  } else if (nranks != r->nranks) {
    snprintf(msg, sizeof(msg),
             "inconsistent nranks: rank %d says %d, earlier ranks said %d",
             rank, nranks, r->nranks);
    root_fail(r, c->fd, zccInvalidUsage, msg);
    return 1;
  } else if (r->fds[rank] >= 0) {
    snprintf(msg, sizeof(msg), "rank %d joined twice (from %s)", rank, c->from);
    root_fail(r, c->fd, zccInvalidUsage, msg);
    return 1;
  }
  char buf[ZCC_SOCKADDR_STRLEN];
  r->fds[rank] = c->fd;
  c->fd = -1;
  r->addrs[rank] = addr;
  r->arrived++;
  ZCC_INFO(BOOT,
           "bootstrap root %s: rank %d of %d arrived, listening on %s (%d/%d)",
           r->where, rank, nranks, zcc_sockaddr_str(&addr, buf), r->arrived,
           r->nranks);
  if (r->arrived < r->nranks)
    return 0;
  zcc_socket_close(&r->listen_fd);
  for (int i = 0; i < r->nranks; i++)
    root_reply(r, r->fds[i], zccSuccess, "");
  ZCC_INFO(BOOT, "bootstrap root %s: all %d ranks arrived", r->where,
           r->nranks);
  return 1;
}

static void root_timeout(root_t *r) {
  char msg[REPLY_MSG_BYTES];
  int len = snprintf(msg, sizeof(msg),
                     "bootstrap root timed out (ZCC_INIT_TIMEOUT) with %d of "
                     "%d ranks; missing:",
                     r->arrived, r->nranks);
  for (int i = 0; i < r->nranks && len < (int)sizeof(msg) - 12; i++)
    if (r->fds[i] < 0)
      len += snprintf(msg + len, sizeof(msg) - (size_t)len, " %d", i);
  if (r->nranks == 0)
    snprintf(msg, sizeof(msg),
             "bootstrap root timed out (ZCC_INIT_TIMEOUT): no rank arrived");
  root_fail(r, -1, zccTimeout, msg);
}

/* Polled descriptors of one root, for one round of the service. */
typedef struct root_poll {
  root_t *r;
  int first, count; /* its range in the round's pollfds */
} root_poll_t;

/* Add r's descriptors (gate wake, listener, arrived ranks) to pfd at n. */
static int root_fds(root_t *r, struct pollfd *pfd, int *slot, int n) {
  pfd[n] = (struct pollfd){r->gate_ready ? r->gate.wake[0] : -1, POLLIN, 0};
  slot[n++] = -1;
  pfd[n] = (struct pollfd){r->listen_fd >= 0 && (!r->gate_ready || zcc_bootstrap_gate_has_room(&r->gate))
                               ? r->listen_fd : -1, POLLIN, 0};
  slot[n++] = -1;
  for (int i = 0; i < r->nranks; i++)
    if (r->fds[i] >= 0) {
      slot[n] = i;
      pfd[n++] = (struct pollfd){r->fds[i], POLLIN, 0};
    }
  return n;
}

/* One round's events of root r (its fds from first on); 1 once it is over. */
static int root_events(root_t *r, const struct pollfd *pfd, const int *slot, int first,
                       int count) {
  /* an arrived rank must stay silent: readable means it left or misbehaves */
  for (int k = first + 2; k < first + count; k++) {
    if (pfd[k].revents == 0)
      continue;
    int i = slot[k];
    ZCC_INFO(BOOT, "bootstrap root %s: rank %d left before the rendezvous completed",
             r->where, i);
    zcc_socket_close(&r->fds[i]);
    r->arrived--;
  }
  if (r->nranks > 0 && r->arrived == 0)
    root_forget(r); /* all left: start afresh */
  if (pfd[first + 1].revents && r->listen_fd >= 0) {
    if (!r->gate_ready) {
      if (zcc_bootstrap_gate_init(&r->gate, r->secret, r->context, INFO_BYTES, r->deadline_ns,
                                  "bootstrap root") != zccSuccess) {
        root_fail(r, -1, zccSystemError, "bootstrap root cannot start its handshakes");
        return 1;
      }
      r->gate_ready = 1;
    }
    zcc_bootstrap_gate_accept(&r->gate, r->listen_fd);
  }
  int done = 0;
  if (pfd[first].revents) {
    gate_conn_t *c = zcc_bootstrap_gate_take(&r->gate), *next;
    for (; c != NULL; c = next) {
      next = c->next;
      if (!done)
        done = root_admit(r, c);
      zcc_socket_close(&c->fd);
      free(c);
    }
  }
  return done;
}

static void root_end(root_t *r) {
  zcc_socket_close(&r->listen_fd);
  if (r->gate_ready)
    zcc_bootstrap_gate_stop(&r->gate);
  root_forget(r);
  ZCC_INFO(BOOT, "bootstrap root %s: exiting", r->where);
  free(r);
}

/* The service: every root of the process, one poll loop. */
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static root_t *svc_roots;  /* added by zcc_bootstrap_create_root */
/* Rendezvous given up by a rank of this process (zcc_bootstrap_root_abandon). */
typedef struct abandon {
  struct abandon *next;
  uint64_t context;
  int rank;
} abandon_t;
static abandon_t *svc_abandons;
static int svc_running;
static int svc_kick[2] = {-1, -1}; /* a root was added: poll again */

static void *root_service(void *arg) {
  (void)arg;
  root_t *mine = NULL; /* the roots this thread took */
  struct pollfd *pfd = NULL;
  int *slot = NULL;
  root_poll_t *rp = NULL;
  int cap = 0, rcap = 0;
  for (;;) {
    pthread_mutex_lock(&svc_lock);
    while (svc_roots) {
      root_t *r = svc_roots;
      svc_roots = r->next;
      r->next = mine;
      mine = r;
    }
    abandon_t *ab = svc_abandons;
    svc_abandons = NULL;
    pthread_mutex_unlock(&svc_lock);
    /* a root whose rendezvous a rank of this process gave up ends now */
    for (root_t **link = &mine; *link;) {
      root_t *r = *link;
      const abandon_t *a = ab;
      while (a && a->context != r->context) a = a->next;
      if (!a) {
        link = &r->next;
        continue;
      }
      char msg[REPLY_MSG_BYTES];
      snprintf(msg, sizeof(msg), "rank %d gave up the rendezvous (its init failed or was "
               "aborted): it cannot complete", a->rank);
      root_fail(r, -1, zccRemoteError, msg);
      *link = r->next;
      root_end(r);
    }
    while (ab) {
      abandon_t *next = ab->next;
      free(ab);
      ab = next;
    }
    pthread_mutex_lock(&svc_lock);
    if (!mine && !svc_roots) {
      svc_running = 0; /* the next root starts a new service, and pipe */
      close(svc_kick[0]);
      close(svc_kick[1]);
      svc_kick[0] = svc_kick[1] = -1;
      pthread_mutex_unlock(&svc_lock);
      break;
    }
    pthread_mutex_unlock(&svc_lock);
    int need = 1, nroots = 0;
    for (root_t *r = mine; r; r = r->next) {
      need += 2 + r->nranks;
      nroots++;
    }
    if (need > cap || nroots > rcap) {
      struct pollfd *np = realloc(pfd, sizeof(*pfd) * (size_t)need);
      if (np) pfd = np;
      int *ns = np ? realloc(slot, sizeof(int) * (size_t)need) : NULL;
      if (ns) slot = ns;
      root_poll_t *nr = ns ? realloc(rp, sizeof(*rp) * (size_t)nroots) : NULL;
      if (nr) rp = nr;
      if (!np || !ns || !nr) {
        poll(NULL, 0, 10); /* out of memory: try again soon */
        continue;
      }
      cap = need;
      rcap = nroots;
    }
    int64_t now = zcc_now_ns(), wait_ms = SLICE_MS;
    int n = 0, k = 0;
    pfd[n] = (struct pollfd){svc_kick[0], POLLIN, 0};
    slot[n++] = -1;
    for (root_t *r = mine; r; r = r->next, k++) {
      rp[k] = (root_poll_t){r, n, 0};
      n = root_fds(r, pfd, slot, n);
      rp[k].count = n - rp[k].first;
      if (r->deadline_ns != INT64_MAX) {
        int64_t left = (r->deadline_ns - now) / 1000000;
        if (left < wait_ms) wait_ms = left < 0 ? 0 : left;
      }
    }
    int rc = poll(pfd, (nfds_t)n, (int)wait_ms);
    if (rc < 0 && errno != EINTR) {
      ZCC_WARN("bootstrap roots: poll failed: %s", strerror(errno));
      poll(NULL, 0, 10);
      continue;
    }
    if (pfd[0].revents) {
      char buf[64];
      while (read(svc_kick[0], buf, sizeof(buf)) > 0) {
      }
    }
    now = zcc_now_ns();
    root_t **link = &mine;
    for (int j = 0; j < k; j++) {
      root_t *r = rp[j].r;
      int over = 0;
      if (rc > 0)
        over = root_events(r, pfd, slot, rp[j].first, rp[j].count);
      if (!over && now >= r->deadline_ns) {
        root_timeout(r);
        over = 1;
      }
      /* the list is in the order of rp: unlink r where it stands */
      while (*link != r)
        link = &(*link)->next;
      if (over) {
        *link = r->next;
        root_end(r);
      } else {
        link = &r->next;
      }
    }
  }
  free(pfd);
  free(slot);
  free(rp);
  return NULL;
}

/* Make the service poll again (a root or a request was added); svc_lock held. */
static void svc_wake(void) {
  char c = 1;
  ssize_t w;
  do {
    w = write(svc_kick[1], &c, 1);
  } while (w < 0 && errno == EINTR);
}

void zcc_bootstrap_root_abandon(uint64_t context, int rank) {
  pthread_mutex_lock(&svc_lock);
  if (svc_running) { /* else this process serves no root */
    abandon_t *a = malloc(sizeof(*a));
    if (a) {
      *a = (abandon_t){svc_abandons, context, rank};
      svc_abandons = a;
      svc_wake();
    }
  }
  pthread_mutex_unlock(&svc_lock);
}

/* fork: the child has no service thread; the parent's roots stay the parent's. */
static void svc_before_fork(void) { pthread_mutex_lock(&svc_lock); }
static void svc_after_fork_parent(void) { pthread_mutex_unlock(&svc_lock); }
static void svc_after_fork_child(void) {
  pthread_mutex_init(&svc_lock, NULL);
  svc_running = 0;
  svc_roots = NULL;
  svc_abandons = NULL; /* the parent's requests (leaked in the child: a few bytes) */
  if (svc_kick[0] >= 0) {
    close(svc_kick[0]);
    close(svc_kick[1]);
  }
  svc_kick[0] = svc_kick[1] = -1;
}
static pthread_once_t svc_once = PTHREAD_ONCE_INIT;
static void svc_register_fork(void) {
  pthread_atfork(svc_before_fork, svc_after_fork_parent, svc_after_fork_child);
}

/* Hand r to the service, starting it if none runs. */
static zccResult_t service_add(root_t *r) {
  pthread_once(&svc_once, svc_register_fork);
  pthread_mutex_lock(&svc_lock);
  if (svc_kick[0] < 0 && pipe2(svc_kick, O_NONBLOCK | O_CLOEXEC) != 0) {
    int err = errno;
    svc_kick[0] = svc_kick[1] = -1;
    pthread_mutex_unlock(&svc_lock);
    return zcc_error(zccSystemError, "bootstrap root: pipe2 failed: %s", strerror(err));
  }
  if (!svc_running) {
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, root_service, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      pthread_mutex_unlock(&svc_lock);
      return zcc_error(zccSystemError, "cannot start the bootstrap root thread: %s",
                       strerror(rc));
    }
    svc_running = 1;
  }
  r->next = svc_roots;
  svc_roots = r;
  svc_wake();
  pthread_mutex_unlock(&svc_lock);
  return zccSuccess;
}

zccResult_t zcc_bootstrap_create_root(zccUniqueId *id,
                                      const zcc_sockaddr_t *addr,
                                      const zcc_sockaddr_t *advertise,
                                      const uint8_t *secret) {
  if (id == NULL)
    return zcc_error(zccInvalidArgument,
                     "zcc_bootstrap_create_root: id is null");
  if (addr != NULL && addr->u.sa.sa_family != AF_INET &&
      addr->u.sa.sa_family != AF_INET6)
    return zcc_error(
        zccInvalidArgument,
        "zcc_bootstrap_create_root: address family %d is not ipv4 or ipv6",
        addr->u.sa.sa_family);
  if (advertise != NULL && advertise->u.sa.sa_family != AF_INET &&
      advertise->u.sa.sa_family != AF_INET6)
    return zcc_error(
        zccInvalidArgument,
        "zcc_bootstrap_create_root: advertised address family %d is not ipv4 "
        "or ipv6",
        advertise->u.sa.sa_family);
  zcc_unique_id_t u;
  memset(&u, 0, sizeof(u));
  u.magic = ZCC_UNIQUE_ID_MAGIC;
  u.version = ZCC_VERSION_CODE;
  zcc_sockaddr_t bound;
  if (addr != NULL)
    bound = *addr;
  else
    ZCC_CHECK(zcc_socket_pick_addr(&bound));
  if (secret != NULL)
    memcpy(u.secret, secret, ZCC_SECRET_BYTES);
  else
    ZCC_CHECK(zcc_random_bytes(u.secret, ZCC_SECRET_BYTES));

  zccResult_t res;
  root_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return zcc_error(zccSystemError, "bootstrap root: out of memory");
  r->listen_fd = -1;
  ZCC_CHECK_GOTO(zcc_socket_listen(&bound, 1024, &r->listen_fd), res,
                 free_root);
  u.root = advertise != NULL ? *advertise : bound;
  if (zcc_sockaddr_port(&u.root) == 0)
    zcc_sockaddr_set_port(&u.root, zcc_sockaddr_port(&bound));
  zcc_sockaddr_str(&bound, r->where);
  int64_t timeout_ms = zcc_param_init_timeout_ms();
  r->deadline_ns =
      timeout_ms > 0 ? zcc_now_ns() + timeout_ms * 1000000LL : INT64_MAX;
  memcpy(r->secret, u.secret, ZCC_SECRET_BYTES);
  r->context = zcc_bootstrap_id_hash(&u) ^ ROOT_CONTEXT_SALT;
  ZCC_INFO(BOOT, "bootstrap root listening on %s (timeout %lld ms)", r->where,
           (long long)timeout_ms);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &u, sizeof(u));
  /* Last: once the service has r, it may end and free it at any time. */
  ZCC_CHECK_GOTO(service_add(r), res, close_listen);
  return zccSuccess;
close_listen:
  zcc_socket_close(&r->listen_fd);
free_root:
  free(r);
  return res;
}
