/*
 * Bootstrap root: a detached thread that serves one rendezvous. Ranks
 * connect through the gate (bootstrap.c), send {rank, nranks, address}, and
 * once all arrived each gets the address table. Inconsistent ranks end the
 * rendezvous with an error sent to every rank; ZCC_INIT_TIMEOUT bounds it.
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
  gate_t gate;
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

static void *root_main(void *arg) {
  root_t *r = arg;
  struct pollfd *pfd = NULL;
  int *slot = NULL;
  int done = 0;
  while (!done) {
    int64_t left_ms = r->deadline_ns == INT64_MAX
                          ? SLICE_MS
                          : (r->deadline_ns - zcc_now_ns()) / 1000000;
    if (left_ms <= 0) {
      root_timeout(r);
      break;
    }
    int cap = 2 + r->nranks, n = 0;
    struct pollfd *np = realloc(pfd, sizeof(*pfd) * (size_t)cap);
    int *ns = np ? realloc(slot, sizeof(int) * (size_t)cap) : NULL;
    if (np)
      pfd = np;
    if (ns)
      slot = ns;
    if (np == NULL || ns == NULL) {
      root_fail(r, -1, zccSystemError, "bootstrap root out of memory");
      break;
    }
    pfd[n++] = (struct pollfd){r->gate.wake[0], POLLIN, 0};
    pfd[n++] = (struct pollfd){
        zcc_bootstrap_gate_has_room(&r->gate) ? r->listen_fd : -1, POLLIN, 0};
    for (int i = 0; i < r->nranks; i++)
      if (r->fds[i] >= 0) {
        slot[n] = i;
        pfd[n++] = (struct pollfd){r->fds[i], POLLIN, 0};
      }
    int rc = poll(pfd, (nfds_t)n, left_ms < SLICE_MS ? (int)left_ms : SLICE_MS);
    if (rc < 0 && errno != EINTR) {
      ZCC_WARN("bootstrap root %s: poll failed: %s", r->where, strerror(errno));
      root_fail(r, -1, zccSystemError, "bootstrap root failed in poll");
      break;
    }
    if (rc <= 0)
      continue;
    /* an arrived rank must stay silent: readable means it left or misbehaves */
    for (int k = 2; k < n; k++) {
      if (pfd[k].revents == 0)
        continue;
      int i = slot[k];
      ZCC_INFO(
          BOOT,
          "bootstrap root %s: rank %d left before the rendezvous completed",
          r->where, i);
      zcc_socket_close(&r->fds[i]);
      r->arrived--;
    }
    if (r->nranks > 0 && r->arrived == 0)
      root_forget(r); /* all left: start afresh */
    if (pfd[1].revents && r->listen_fd >= 0)
      zcc_bootstrap_gate_accept(&r->gate, r->listen_fd);
    if (pfd[0].revents) {
      gate_conn_t *c = zcc_bootstrap_gate_take(&r->gate), *next;
      for (; c != NULL; c = next) {
        next = c->next;
        if (!done)
          done = root_admit(r, c);
        zcc_socket_close(&c->fd);
        free(c);
      }
    }
  }
  zcc_socket_close(&r->listen_fd);
  zcc_bootstrap_gate_stop(&r->gate);
  root_forget(r);
  free(pfd);
  free(slot);
  ZCC_INFO(BOOT, "bootstrap root %s: exiting", r->where);
  free(r);
  return NULL;
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
  ZCC_CHECK_GOTO(
      zcc_bootstrap_gate_init(&r->gate, u.secret,
                              zcc_bootstrap_id_hash(&u) ^ ROOT_CONTEXT_SALT,
                              INFO_BYTES, r->deadline_ns, "bootstrap root"),
      res, close_listen);
  pthread_attr_t attr;
  pthread_t t;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, root_main, r);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    res = zcc_error(zccSystemError,
                    "cannot start the bootstrap root thread: %s", strerror(rc));
    goto stop_gate;
  }
  ZCC_INFO(BOOT, "bootstrap root listening on %s (timeout %lld ms)", r->where,
           (long long)timeout_ms);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &u, sizeof(u));
  return zccSuccess;
stop_gate:
  zcc_bootstrap_gate_stop(&r->gate);
close_listen:
  zcc_socket_close(&r->listen_fd);
free_root:
  free(r);
  return res;
}
