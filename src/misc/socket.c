/*
 * TCP sockets: address choice and parsing, non-blocking connect/accept and
 * transfers that honour a zcc_wait_t, and the shared-secret handshake.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "param.h"
#include "socket.h"

ZCC_PARAM_INT(heartbeat_ms, "HEARTBEAT_MS", 1000,
              "TCP connections between ranks (bootstrap, socket and net/socket transports) "
              "probe a silent peer every this many ms (keepalive, whole seconds, at least 1) "
              "and fail after 2 unanswered probes: a dead peer host or a link that went "
              "down is an error in about 3 heartbeats; 0: the kernel's defaults (hours)")
ZCC_PARAM_STR(socket_ifname, "SOCKET_IFNAME", NULL,
              "interfaces for bootstrap and socket traffic: comma list of name "
              "prefixes, ^ to exclude, = for exact names")
ZCC_PARAM_STR(socket_family, "SOCKET_FAMILY", NULL,
              "address family for sockets: AF_INET or AF_INET6 (default: any)")

/* A wait slice: abort flags and deadlines are checked at least this often. */
#define POLL_SLICE_MS 100

/* Re-record the wait's failure with what we were doing. */
static zccResult_t wait_failed(zccResult_t res, const char *doing) {
  char cause[256];
  snprintf(cause, sizeof(cause), "%s", zcc_last_error());
  return zcc_error(res, "%s: %s", doing, cause);
}

/* ---- addresses ---------------------------------------------------------- */

const char *zcc_sockaddr_str(const zcc_sockaddr_t *addr, char *buf) {
  char ip[INET6_ADDRSTRLEN];
  if (addr == NULL) {
    snprintf(buf, ZCC_SOCKADDR_STRLEN, "(null)");
  } else if (addr->u.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->u.sin.sin_addr, ip, sizeof(ip));
    snprintf(buf, ZCC_SOCKADDR_STRLEN, "%s:%u", ip,
             ntohs(addr->u.sin.sin_port));
  } else if (addr->u.sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->u.sin6.sin6_addr, ip, sizeof(ip));
    snprintf(buf, ZCC_SOCKADDR_STRLEN, "[%s]:%u", ip,
             ntohs(addr->u.sin6.sin6_port));
  } else {
    snprintf(buf, ZCC_SOCKADDR_STRLEN, "(family %d)", addr->u.sa.sa_family);
  }
  return buf;
}

uint16_t zcc_sockaddr_port(const zcc_sockaddr_t *addr) {
  if (addr->u.sa.sa_family == AF_INET6)
    return ntohs(addr->u.sin6.sin6_port);
  return ntohs(addr->u.sin.sin_port);
}

void zcc_sockaddr_set_port(zcc_sockaddr_t *addr, uint16_t port) {
  if (addr->u.sa.sa_family == AF_INET6)
    addr->u.sin6.sin6_port = htons(port);
  else
    addr->u.sin.sin_port = htons(port);
}

zccResult_t zcc_sockaddr_parse(const char *str, zcc_sockaddr_t *out) {
  if (str == NULL || out == NULL)
    return zcc_error(zccInvalidArgument, "zcc_sockaddr_parse: null argument");
  char host[256];
  const char *port_str;
  if (str[0] == '[') {
    const char *end = strchr(str, ']');
    if (end == NULL || end[1] != ':' || (size_t)(end - str - 1) >= sizeof(host))
      return zcc_error(zccInvalidArgument,
                       "address '%s' is not of the form [ipv6]:port", str);
    memcpy(host, str + 1, (size_t)(end - str - 1));
    host[end - str - 1] = '\0';
    port_str = end + 2;
  } else {
    const char *colon = strrchr(str, ':');
    if (colon == NULL || colon == str || (size_t)(colon - str) >= sizeof(host))
      return zcc_error(zccInvalidArgument,
                       "address '%s' is not of the form host:port", str);
    if (memchr(str, ':', (size_t)(colon - str)) != NULL)
      return zcc_error(zccInvalidArgument,
                       "address '%s': write ipv6 addresses as [addr]:port",
                       str);
    memcpy(host, str, (size_t)(colon - str));
    host[colon - str] = '\0';
    port_str = colon + 1;
  }
  char *end;
  errno = 0;
  unsigned long port = strtoul(port_str, &end, 10);
  if (port_str[0] < '0' || port_str[0] > '9' || *end != '\0' || errno != 0 ||
      port > 65535)
    return zcc_error(zccInvalidArgument, "address '%s': bad port '%s'", str,
                     port_str);

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0)
    return zcc_error(zccInvalidArgument,
                     "address '%s': cannot resolve '%s': %s", str, host,
                     gai_strerror(rc));
  zcc_sockaddr_t a;
  memset(&a, 0, sizeof(a));
  int found = 0;
  for (struct addrinfo *ai = res; ai != NULL && !found; ai = ai->ai_next) {
    if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
        ai->ai_addrlen <= sizeof(a.u)) {
      memcpy(&a.u, ai->ai_addr, ai->ai_addrlen);
      a.len = ai->ai_addrlen;
      found = 1;
    }
  }
  freeaddrinfo(res);
  if (!found)
    return zcc_error(zccInvalidArgument,
                     "address '%s': no ipv4 or ipv6 address", str);
  zcc_sockaddr_set_port(&a, (uint16_t)port);
  *out = a;
  return zccSuccess;
}

/* ---- interface choice --------------------------------------------------- */

typedef struct if_filter {
  char names[16][IF_NAMESIZE + 1];
  int count;
  int exclude;
  int exact;
} if_filter_t;

static zccResult_t if_filter_parse(const char *spec, if_filter_t *f) {
  memset(f, 0, sizeof(*f));
  if (*spec == '^') {
    f->exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    f->exact = 1;
    spec++;
  }
  while (*spec != '\0') {
    size_t n = strcspn(spec, ",");
    if (n > 0) {
      if (n > IF_NAMESIZE || f->count == 16)
        return zcc_error(
            zccInvalidArgument,
            "ZCC_SOCKET_IFNAME: too many names or a name too long");
      memcpy(f->names[f->count], spec, n);
      f->names[f->count][n] = '\0';
      f->count++;
    }
    spec += n;
    if (*spec == ',')
      spec++;
  }
  return zccSuccess;
}

static int if_filter_match(const if_filter_t *f, const char *name) {
  int hit = 0;
  for (int i = 0; i < f->count && !hit; i++)
    hit = f->exact ? strcmp(name, f->names[i]) == 0
                   : strncmp(name, f->names[i], strlen(f->names[i])) == 0;
  return f->exclude ? !hit : hit;
}

/* Tier of an interface without ZCC_SOCKET_IFNAME: 0 preferred, 1 loopback. */
static int if_default_tier(const char *name, unsigned flags) {
  if ((flags & IFF_LOOPBACK) || strncmp(name, "lo", 2) == 0)
    return 1;
  if (strncmp(name, "docker", 6) == 0)
    return -1;
  return 0;
}

zccResult_t zcc_socket_pick_if(zcc_sockaddr_t *out, char *ifname, size_t ifname_len) {
  if (out == NULL)
    return zcc_error(zccInvalidArgument, "zcc_socket_pick_if: out is null");
  const char *fam = zcc_param_socket_family();
  int family = AF_UNSPEC;
  if (fam != NULL && fam[0] != '\0') {
    if (strcmp(fam, "AF_INET") == 0 || strcmp(fam, "inet") == 0 ||
        strcmp(fam, "4") == 0)
      family = AF_INET;
    else if (strcmp(fam, "AF_INET6") == 0 || strcmp(fam, "inet6") == 0 ||
             strcmp(fam, "6") == 0)
      family = AF_INET6;
    else
      return zcc_error(zccInvalidArgument,
                       "ZCC_SOCKET_FAMILY='%s': expected AF_INET or AF_INET6",
                       fam);
  }
  const char *spec = zcc_param_socket_ifname();
  if_filter_t filter;
  int use_filter = spec != NULL && spec[0] != '\0';
  if (use_filter)
    ZCC_CHECK(if_filter_parse(spec, &filter));

  struct ifaddrs *ifs;
  if (getifaddrs(&ifs) != 0)
    return zcc_error(zccSystemError, "getifaddrs failed: %s", strerror(errno));
  /* best[tier][v6]: first address of each kind, in interface order */
  const struct ifaddrs *best[2][2] = {{NULL, NULL}, {NULL, NULL}};
  for (const struct ifaddrs *ifa = ifs; ifa != NULL; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP))
      continue;
    int af = ifa->ifa_addr->sa_family;
    if (af != AF_INET && af != AF_INET6)
      continue;
    if (family != AF_UNSPEC && af != family)
      continue;
    if (af == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(
            &((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
      continue;
    int tier;
    if (use_filter)
      tier = if_filter_match(&filter, ifa->ifa_name) ? 0 : -1;
    else
      tier = if_default_tier(ifa->ifa_name, ifa->ifa_flags);
    if (tier < 0)
      continue;
    int v6 = af == AF_INET6;
    if (best[tier][v6] == NULL)
      best[tier][v6] = ifa;
  }
  const struct ifaddrs *pick = NULL;
  for (int i = 0; i < 4 && pick == NULL; i++)
    pick = best[i / 2][i % 2];
  if (pick == NULL) {
    freeifaddrs(ifs);
    if (use_filter)
      return zcc_error(zccSystemError,
                       "no interface that is up matches ZCC_SOCKET_IFNAME=%s",
                       spec);
    return zcc_error(zccSystemError, "no interface with an ip address is up");
  }
  zcc_sockaddr_t a;
  memset(&a, 0, sizeof(a));
  if (pick->ifa_addr->sa_family == AF_INET) {
    memcpy(&a.u.sin, pick->ifa_addr, sizeof(struct sockaddr_in));
    a.len = sizeof(struct sockaddr_in);
  } else {
    memcpy(&a.u.sin6, pick->ifa_addr, sizeof(struct sockaddr_in6));
    a.len = sizeof(struct sockaddr_in6);
  }
  zcc_sockaddr_set_port(&a, 0);
  char buf[ZCC_SOCKADDR_STRLEN];
  ZCC_INFO(BOOT, "using interface %s address %s", pick->ifa_name,
           zcc_sockaddr_str(&a, buf));
  if (ifname && ifname_len) snprintf(ifname, ifname_len, "%s", pick->ifa_name);
  freeifaddrs(ifs);
  *out = a;
  return zccSuccess;
}

int zcc_sockaddr_is_local(const zcc_sockaddr_t *addr) {
  int af = addr->u.sa.sa_family;
  if (af == AF_INET && (ntohl(addr->u.sin.sin_addr.s_addr) >> 24) == 127) return 1;
  if (af == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&addr->u.sin6.sin6_addr)) return 1;
  if (af != AF_INET && af != AF_INET6) return 0;
  struct ifaddrs *ifs;
  if (getifaddrs(&ifs) != 0) return 0;
  int found = 0;
  for (const struct ifaddrs *ifa = ifs; ifa != NULL && !found; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP) || ifa->ifa_addr->sa_family != af)
      continue;
    if (af == AF_INET)
      found = ((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr.s_addr ==
              addr->u.sin.sin_addr.s_addr;
    else
      found = memcmp(&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
                     &addr->u.sin6.sin6_addr, sizeof(struct in6_addr)) == 0;
  }
  freeifaddrs(ifs);
  return found;
}

zccResult_t zcc_socket_pick_addr(zcc_sockaddr_t *out) {
  return zcc_socket_pick_if(out, NULL, 0);
}

/* ---- connections -------------------------------------------------------- */

static socklen_t addr_len(const zcc_sockaddr_t *a) {
  return a->u.sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                       : sizeof(struct sockaddr_in);
}

static int valid_family(const zcc_sockaddr_t *a) {
  return a->u.sa.sa_family == AF_INET || a->u.sa.sa_family == AF_INET6;
}

void zcc_socket_tune(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    ZCC_INFO(BOOT, "setsockopt TCP_NODELAY failed: %s", strerror(errno));
  int64_t hb = zcc_param_heartbeat_ms();
  if (hb <= 0)
    return;
  /* The kernel's heartbeat: a connection with nothing of ours in flight
     (a rank waiting for its peer) is probed after hb ms of silence and
     every hb ms after (keepalive counts whole seconds, at least 1), and
     fails after 2 unanswered probes: a peer host that dies, or a link that
     goes down, is an error in about 3 heartbeats instead of TCP's minutes
     (or ZCC_TIMEOUT); the rank that finds it fails the communicator for the
     others. No TCP_USER_TIMEOUT: it would also abort a connection whose
     receiver is only slow to read (a straggler, zero-window probes). */
  int secs = (int)((hb + 999) / 1000);
  int cnt = 2;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof(secs)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &secs, sizeof(secs)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0)
    ZCC_INFO(BOOT, "setsockopt for ZCC_HEARTBEAT_MS=%lld failed: %s", (long long)hb,
             strerror(errno));
}

void zcc_socket_close(int *fd) {
  if (fd != NULL && *fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

zccResult_t zcc_socket_listen(zcc_sockaddr_t *addr, int backlog, int *fd) {
  if (addr == NULL || fd == NULL || !valid_family(addr))
    return zcc_error(zccInvalidArgument,
                     "zcc_socket_listen: null or non-ip address");
  char buf[ZCC_SOCKADDR_STRLEN];
  int s = socket(addr->u.sa.sa_family,
                 SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0)
    return zcc_error(zccSystemError, "socket failed: %s", strerror(errno));
  int one = 1;
  zccResult_t res = zccSuccess;
  zcc_sockaddr_t bound = *addr;
  bound.len = addr_len(addr);
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    res = zcc_error(zccSystemError, "setsockopt SO_REUSEADDR failed: %s",
                    strerror(errno));
    goto close_socket;
  }
  if (bind(s, &bound.u.sa, bound.len) != 0) {
    res = zcc_error(zccSystemError, "bind to %s failed: %s",
                    zcc_sockaddr_str(addr, buf), strerror(errno));
    goto close_socket;
  }
  if (listen(s, backlog > 0 ? backlog : 128) != 0) {
    res = zcc_error(zccSystemError, "listen on %s failed: %s",
                    zcc_sockaddr_str(addr, buf), strerror(errno));
    goto close_socket;
  }
  socklen_t len = sizeof(bound.u);
  if (getsockname(s, &bound.u.sa, &len) != 0) {
    res = zcc_error(zccSystemError, "getsockname failed: %s", strerror(errno));
    goto close_socket;
  }
  bound.len = len;
  *addr = bound;
  *fd = s;
  ZCC_INFO(BOOT, "listening on %s", zcc_sockaddr_str(addr, buf));
  return zccSuccess;
close_socket:
  close(s);
  return res;
}

/* Wait for events on fd for at most one slice; returns revents (0: none). */
static zccResult_t poll_slice(int fd, short events, const zcc_wait_t *w,
                              short *revents) {
  struct pollfd p = {fd, events, 0};
  int rc = poll(&p, 1, zcc_wait_poll_ms(w, POLL_SLICE_MS));
  if (rc < 0 && errno != EINTR)
    return zcc_error(zccSystemError, "poll failed: %s", strerror(errno));
  *revents = rc > 0 ? p.revents : 0;
  return zccSuccess;
}

static int retryable_connect_error(int err) {
  return err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH ||
         err == ETIMEDOUT || err == ECONNRESET || err == ECONNABORTED ||
         err == EAGAIN;
}

static zccResult_t connect_to(const zcc_sockaddr_t *addr, int *fd, const zcc_wait_t *w,
                              int refused_final) {
  if (addr == NULL || fd == NULL || w == NULL || !valid_family(addr))
    return zcc_error(zccInvalidArgument,
                     "zcc_socket_connect: null or non-ip address");
  char buf[ZCC_SOCKADDR_STRLEN], doing[128];
  zcc_sockaddr_str(addr, buf);
  snprintf(doing, sizeof(doing), "connect to %s", buf);
  int last_err = 0;
  int64_t backoff_ms = 1;
  for (;;) {
    zccResult_t res = zcc_wait_check(w);
    if (res != zccSuccess) {
      if (last_err != 0)
        ZCC_INFO(BOOT, "%s: last attempt: %s", doing, strerror(last_err));
      return wait_failed(res, doing);
    }
    int s = socket(addr->u.sa.sa_family,
                   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
      return zcc_error(zccSystemError, "socket failed: %s", strerror(errno));
    int err = 0;
    if (connect(s, &addr->u.sa, addr_len(addr)) != 0)
      err = errno;
    while (err == EINPROGRESS || err == EINTR) {
      short rev;
      res = poll_slice(s, POLLOUT, w, &rev);
      if (res == zccSuccess && rev == 0)
        res = zcc_wait_check(w);
      if (res != zccSuccess) {
        close(s);
        return res == zccSystemError ? res : wait_failed(res, doing);
      }
      if (rev == 0)
        continue;
      socklen_t len = sizeof(err);
      if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    if (err == 0) {
      zcc_socket_tune(s);
      *fd = s;
      return zccSuccess;
    }
    close(s);
    if (refused_final && err == ECONNREFUSED)
      return zcc_error(zccRemoteError,
                       "%s refused: the peer's listener, which was up, is closed (the peer "
                       "left)", doing);
    if (!retryable_connect_error(err))
      return zcc_error(zccSystemError, "%s failed: %s", doing, strerror(err));
    last_err = err;
    /* back off before the next attempt, still watching the wait */
    int ms = zcc_wait_poll_ms(w, (int)backoff_ms);
    if (ms > 0)
      poll(NULL, 0, ms);
    if (backoff_ms < POLL_SLICE_MS)
      backoff_ms *= 2;
  }
}

zccResult_t zcc_socket_connect(const zcc_sockaddr_t *addr, int *fd,
                               const zcc_wait_t *w) {
  return connect_to(addr, fd, w, 0);
}

zccResult_t zcc_socket_connect_listening(const zcc_sockaddr_t *addr, int *fd,
                                         const zcc_wait_t *w) {
  return connect_to(addr, fd, w, 1);
}

zccResult_t zcc_socket_accept(int listen_fd, int *fd, const zcc_wait_t *w) {
  if (listen_fd < 0 || fd == NULL || w == NULL)
    return zcc_error(zccInvalidArgument, "zcc_socket_accept: bad argument");
  for (;;) {
    int s = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s >= 0) {
      zcc_socket_tune(s);
      *fd = s;
      return zccSuccess;
    }
    int err = errno;
    if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR &&
        err != ECONNABORTED && err != EPROTO)
      return zcc_error(zccSystemError, "accept failed: %s", strerror(err));
    zccResult_t res = zcc_wait_check(w);
    if (res != zccSuccess)
      return wait_failed(res, "accept");
    short rev;
    ZCC_CHECK(poll_slice(listen_fd, POLLIN, w, &rev));
  }
}

zccResult_t zcc_socket_send_some(int fd, const void *buf, size_t bytes,
                                 size_t *done) {
  while (*done < bytes) {
    ssize_t n = send(fd, (const char *)buf + *done, bytes - *done,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return zccSuccess;
    int err = n < 0 ? errno : EPIPE;
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN ||
        err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH)
      return zcc_error(zccRemoteError, "send failed, peer connection lost: %s",
                       strerror(err));
    return zcc_error(zccSystemError, "send failed: %s", strerror(err));
  }
  return zccSuccess;
}

zccResult_t zcc_socket_recv_some(int fd, void *buf, size_t bytes,
                                 size_t *done) {
  while (*done < bytes) {
    ssize_t n = recv(fd, (char *)buf + *done, bytes - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n == 0)
      return zcc_error(zccRemoteError, "connection closed by peer");
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return zccSuccess;
    if (errno == ECONNRESET || errno == ETIMEDOUT || errno == ENOTCONN ||
        errno == EHOSTUNREACH || errno == ENETUNREACH)
      return zcc_error(zccRemoteError, "recv failed, peer connection lost: %s",
                       strerror(errno));
    return zcc_error(zccSystemError, "recv failed: %s", strerror(errno));
  }
  return zccSuccess;
}

static zccResult_t transfer_all(int fd, void *buf, size_t bytes,
                                const zcc_wait_t *w, int sending) {
  if (fd < 0 || w == NULL || (buf == NULL && bytes > 0))
    return zcc_error(zccInvalidArgument, "socket %s: bad argument",
                     sending ? "send" : "recv");
  size_t done = 0;
  for (;;) {
    size_t before = done;
    if (sending)
      ZCC_CHECK(zcc_socket_send_some(fd, buf, bytes, &done));
    else
      ZCC_CHECK(zcc_socket_recv_some(fd, buf, bytes, &done));
    if (done == bytes)
      return zccSuccess;
    if (done != before)
      continue;
    zccResult_t res = zcc_wait_check(w);
    if (res != zccSuccess)
      return wait_failed(res, sending ? "send" : "recv");
    short rev;
    ZCC_CHECK(poll_slice(fd, sending ? POLLOUT : POLLIN, w, &rev));
  }
}

zccResult_t zcc_socket_send_all(int fd, const void *buf, size_t bytes,
                                const zcc_wait_t *w) {
  return transfer_all(fd, (void *)buf, bytes, w, 1);
}

zccResult_t zcc_socket_recv_all(int fd, void *buf, size_t bytes,
                                const zcc_wait_t *w) {
  return transfer_all(fd, buf, bytes, w, 0);
}

/* ---- handshake ---------------------------------------------------------- */

/*
 * Four fixed-size messages:
 *   client -> server  HELLO     {client nonce}
 *   server -> client  CHALLENGE {server nonce, HMAC(secret, "S" ctx nc ns)}
 *   client -> server  PROOF     {HMAC(secret, "C" ctx nc ns)}
 *   server -> client  ACCEPT or REJECT
 * The role byte keeps one side's proof from being replayed as the other's.
 */
#define AUTH_MAGIC 0x7a636361u /* "zcca" */
#define AUTH_NONCE 16
#define AUTH_MSG_BYTES (8 + AUTH_NONCE + 32)

enum {
  AUTH_HELLO = 1,
  AUTH_CHALLENGE = 2,
  AUTH_PROOF = 3,
  AUTH_ACCEPT = 4,
  AUTH_REJECT = 5
};

typedef struct auth_msg {
  uint32_t kind;
  uint8_t nonce[AUTH_NONCE];
  uint8_t proof[32];
} auth_msg_t;

static void auth_encode(const auth_msg_t *m, uint8_t out[AUTH_MSG_BYTES]) {
  uint32_t magic = htonl(AUTH_MAGIC), kind = htonl(m->kind);
  memcpy(out, &magic, 4);
  memcpy(out + 4, &kind, 4);
  memcpy(out + 8, m->nonce, AUTH_NONCE);
  memcpy(out + 8 + AUTH_NONCE, m->proof, 32);
}

static zccResult_t auth_send(int fd, const auth_msg_t *m, const zcc_wait_t *w) {
  uint8_t wire[AUTH_MSG_BYTES];
  auth_encode(m, wire);
  return zcc_socket_send_all(fd, wire, sizeof(wire), w);
}

static zccResult_t auth_recv(int fd, uint32_t want, auth_msg_t *m,
                             const zcc_wait_t *w) {
  uint8_t wire[AUTH_MSG_BYTES];
  uint32_t magic, kind;
  ZCC_CHECK(zcc_socket_recv_all(fd, wire, sizeof(wire), w));
  memcpy(&magic, wire, 4);
  memcpy(&kind, wire + 4, 4);
  if (ntohl(magic) != AUTH_MAGIC)
    return zcc_error(zccRemoteError, "handshake: peer sent bad magic 0x%08x",
                     ntohl(magic));
  m->kind = ntohl(kind);
  memcpy(m->nonce, wire + 8, AUTH_NONCE);
  memcpy(m->proof, wire + 8 + AUTH_NONCE, 32);
  if (m->kind == AUTH_REJECT && want != AUTH_REJECT)
    return zcc_error(zccRemoteError,
                     "handshake: peer rejected our proof of the secret");
  if (m->kind != want)
    return zcc_error(zccRemoteError,
                     "handshake: expected message %u, peer sent %u", want,
                     m->kind);
  return zccSuccess;
}

static void auth_proof(const uint8_t secret[ZCC_SECRET_BYTES], char role,
                       uint64_t context, const uint8_t nc[AUTH_NONCE],
                       const uint8_t ns[AUTH_NONCE], uint8_t out[32]) {
  uint8_t data[1 + 8 + 2 * AUTH_NONCE];
  data[0] = (uint8_t)role;
  for (int i = 0; i < 8; i++)
    data[1 + i] = (uint8_t)(context >> (56 - 8 * i));
  memcpy(data + 9, nc, AUTH_NONCE);
  memcpy(data + 9 + AUTH_NONCE, ns, AUTH_NONCE);
  zcc_hmac_sha256(secret, ZCC_SECRET_BYTES, data, sizeof(data), out);
}

static int equal_ct(const uint8_t *a, const uint8_t *b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++)
    diff |= (uint8_t)(a[i] ^ b[i]);
  return diff == 0;
}

zccResult_t zcc_socket_auth_client(int fd,
                                   const uint8_t secret[ZCC_SECRET_BYTES],
                                   uint64_t context, const zcc_wait_t *w) {
  if (fd < 0 || secret == NULL || w == NULL)
    return zcc_error(zccInvalidArgument,
                     "zcc_socket_auth_client: bad argument");
  auth_msg_t hello = {AUTH_HELLO, {0}, {0}}, chal,
             proof = {AUTH_PROOF, {0}, {0}}, ack;
  uint8_t expect[32];
  ZCC_CHECK(zcc_random_bytes(hello.nonce, AUTH_NONCE));
  ZCC_CHECK(auth_send(fd, &hello, w));
  ZCC_CHECK(auth_recv(fd, AUTH_CHALLENGE, &chal, w));
  auth_proof(secret, 'S', context, hello.nonce, chal.nonce, expect);
  if (!equal_ct(expect, chal.proof, 32))
    return zcc_error(
        zccRemoteError,
        "handshake: server does not hold the secret (or another communicator)");
  auth_proof(secret, 'C', context, hello.nonce, chal.nonce, proof.proof);
  ZCC_CHECK(auth_send(fd, &proof, w));
  ZCC_CHECK(auth_recv(fd, AUTH_ACCEPT, &ack, w));
  return zccSuccess;
}

/* A whole message on a fresh connection's empty send buffer, or failure. */
static int auth_send_now(int fd, const auth_msg_t *m) {
  uint8_t wire[AUTH_MSG_BYTES];
  auth_encode(m, wire);
  ssize_t n;
  do {
    n = send(fd, wire, sizeof(wire), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(wire)) return 0;
  zcc_error(zccRemoteError, "handshake: cannot send %zu bytes at once: %s", sizeof(wire),
            n < 0 ? strerror(errno) : "short write");
  return -1;
}

int zcc_socket_auth_server_step(int fd, zcc_auth_server_state_t *st,
                                const uint8_t secret[ZCC_SECRET_BYTES], uint64_t context) {
  _Static_assert(sizeof(st->in) == AUTH_MSG_BYTES, "auth message size");
  _Static_assert(sizeof(st->nc) == AUTH_NONCE, "auth nonce size");
  if (st->phase >= 2) return 1;
  while (st->got < AUTH_MSG_BYTES) {
    ssize_t n = recv(fd, st->in + st->got, AUTH_MSG_BYTES - st->got, MSG_DONTWAIT);
    if (n > 0) {
      st->got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    zcc_error(zccRemoteError, "handshake: %s",
              n == 0 ? "connection closed by peer" : strerror(errno));
    return -1;
  }
  st->got = 0;
  uint32_t magic, kind;
  memcpy(&magic, st->in, 4);
  memcpy(&kind, st->in + 4, 4);
  uint32_t want = st->phase == 0 ? AUTH_HELLO : AUTH_PROOF;
  if (ntohl(magic) != AUTH_MAGIC || ntohl(kind) != want) {
    zcc_error(zccRemoteError, "handshake: expected message %u, got magic 0x%08x kind %u",
              want, ntohl(magic), ntohl(kind));
    return -1;
  }
  if (st->phase == 0) {
    auth_msg_t chal = {AUTH_CHALLENGE, {0}, {0}};
    memcpy(st->nc, st->in + 8, AUTH_NONCE);
    if (zcc_random_bytes(st->ns, AUTH_NONCE) != zccSuccess) return -1;
    memcpy(chal.nonce, st->ns, AUTH_NONCE);
    auth_proof(secret, 'S', context, st->nc, st->ns, chal.proof);
    if (auth_send_now(fd, &chal) != 0) return -1;
    st->phase = 1;
    return zcc_socket_auth_server_step(fd, st, secret, context);
  }
  uint8_t expect[32];
  auth_proof(secret, 'C', context, st->nc, st->ns, expect);
  auth_msg_t ack = {AUTH_ACCEPT, {0}, {0}};
  if (!equal_ct(expect, st->in + 8 + AUTH_NONCE, 32)) {
    ack.kind = AUTH_REJECT;
    (void)auth_send_now(fd, &ack);
    zcc_error(zccRemoteError,
              "handshake: client does not hold the secret (or another communicator)");
    return -1;
  }
  if (auth_send_now(fd, &ack) != 0) return -1;
  st->phase = 2;
  return 1;
}

zccResult_t zcc_socket_auth_server(int fd,
                                   const uint8_t secret[ZCC_SECRET_BYTES],
                                   uint64_t context, const zcc_wait_t *w) {
  if (fd < 0 || secret == NULL || w == NULL)
    return zcc_error(zccInvalidArgument,
                     "zcc_socket_auth_server: bad argument");
  auth_msg_t hello, chal = {AUTH_CHALLENGE, {0}, {0}}, proof,
                    ack = {AUTH_ACCEPT, {0}, {0}};
  uint8_t expect[32];
  ZCC_CHECK(auth_recv(fd, AUTH_HELLO, &hello, w));
  ZCC_CHECK(zcc_random_bytes(chal.nonce, AUTH_NONCE));
  auth_proof(secret, 'S', context, hello.nonce, chal.nonce, chal.proof);
  ZCC_CHECK(auth_send(fd, &chal, w));
  ZCC_CHECK(auth_recv(fd, AUTH_PROOF, &proof, w));
  auth_proof(secret, 'C', context, hello.nonce, chal.nonce, expect);
  if (!equal_ct(expect, proof.proof, 32)) {
    ack.kind = AUTH_REJECT;
    /* best effort: tell the client why before the caller drops it */
    uint8_t wire[AUTH_MSG_BYTES];
    auth_encode(&ack, wire);
    (void)send(fd, wire, sizeof(wire), MSG_NOSIGNAL | MSG_DONTWAIT);
    return zcc_error(
        zccRemoteError,
        "handshake: client does not hold the secret (or another communicator)");
  }
  ZCC_CHECK(auth_send(fd, &ack, w));
  return zccSuccess;
}
