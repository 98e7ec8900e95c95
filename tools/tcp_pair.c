/*
 * tcp_pair: the plain-TCP reference for zcc's network transports. Two
 * processes, one TCP connection: at each size both send `size` bytes and
 * receive `size` bytes at once (as sendrecv_perf's two ranks do), and the
 * time of an exchange is until both directions are through. Prints, per
 * size, the median of -n exchanges after -w warm-ups, with the bandwidth
 * of one direction (bytes / time, as sendrecv_perf's algbw).
 *
 *   tcp_pair --listen PORT [options]            (one side)
 *   tcp_pair --connect ADDR:PORT [options]      (the other)
 *
 * Options (both sides the same): -b MIN -e MAX -f FACTOR sizes (suffixes
 * K, M, G; default 8 B .. 64 MiB, x4), -n ITERS (default 20), -w WARMUP
 * (default 5). TCP_NODELAY is set, as zcc's sockets do, and the calls spin
 * (non-blocking) as zcc's waits do.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "perf_util.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(const char *what) {
  fprintf(stderr, "tcp_pair: %s: %s\n", what, strerror(errno));
  exit(1);
}

/*
 * Send and receive n bytes at once on fd: non-blocking calls in a loop, as
 * zcc's transports wait (poll only after a millisecond with nothing moving).
 */
static void exchange(int fd, const char *out, char *in, size_t n) {
  size_t sent = 0, got = 0;
  double idle_since = 0;
  while (sent < n || got < n) {
    int moved = 0;
    if (sent < n) {
      ssize_t r = send(fd, out + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        sent += (size_t)r;
        moved = 1;
      } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        die("send");
      }
    }
    if (got < n) {
      ssize_t r = recv(fd, in + got, n - got, MSG_DONTWAIT);
      if (r > 0) {
        got += (size_t)r;
        moved = 1;
      } else if (r == 0) {
        fprintf(stderr, "tcp_pair: the peer closed the connection\n");
        exit(1);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        die("recv");
      }
    }
    if (moved) {
      idle_since = 0;
      continue;
    }
    double t = now_s();
    if (idle_since == 0) idle_since = t;
    if (t - idle_since > 1e-3) {
      struct pollfd p = {fd, (short)((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
      if (poll(&p, 1, 30000) <= 0) {
        fprintf(stderr, "tcp_pair: no progress for 30 s\n");
        exit(1);
      }
    }
  }
}

int main(int argc, char **argv) {
  const char *listen_port = NULL, *connect_to = NULL;
  size_t minb = 8, maxb = 64u << 20;
  long factor = 4, iters = 20, warmup = 5;
  static const struct option opts[] = {{"listen", required_argument, NULL, 'L'},
                                       {"connect", required_argument, NULL, 'C'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "b:e:f:n:w:h", opts, NULL)) != -1) {
    switch (o) {
    case 'L': listen_port = optarg; break;
    case 'C': connect_to = optarg; break;
    case 'b':
    case 'e': {
      size_t v;
      if (perf_parse_size(optarg, &v) != 0) {
        fprintf(stderr, "tcp_pair: bad size '%s'\n", optarg);
        return 2;
      }
      if (o == 'b') minb = v; else maxb = v;
      break;
    }
    case 'f': factor = atol(optarg); break;
    case 'n': iters = atol(optarg); break;
    case 'w': warmup = atol(optarg); break;
    default:
      fprintf(stderr, "usage: tcp_pair --listen PORT | --connect ADDR:PORT [-b MIN] [-e MAX] "
                      "[-f FACTOR] [-n ITERS] [-w WARMUP]\n");
      return o == 'h' ? 0 : 2;
    }
  }
  if (!listen_port == !connect_to || factor < 2 || iters < 1 || warmup < 0 || minb < 1 ||
      maxb < minb) {
    fprintf(stderr, "tcp_pair: give one of --listen and --connect, -f >= 2, -n >= 1, "
                    "1 <= -b <= -e\n");
    return 2;
  }
  int fd;
  if (listen_port) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (l < 0) die("socket");
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(listen_port))};
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0) die("listen");
    fd = accept(l, NULL, NULL);
    if (fd < 0) die("accept");
    close(l);
  } else {
    char host[256];
    snprintf(host, sizeof(host), "%s", connect_to);
    char *colon = strrchr(host, ':');
    if (!colon) {
      fprintf(stderr, "tcp_pair: --connect wants ADDR:PORT\n");
      return 2;
    }
    *colon = '\0';
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
      fprintf(stderr, "tcp_pair: cannot resolve %s\n", connect_to);
      return 1;
    }
    fd = -1;
    for (int tries = 0; tries < 200 && fd < 0; tries++) { /* the listener may start later */
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
        usleep(50000);
      }
    }
    freeaddrinfo(ai);
    if (fd < 0) die("connect");
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char *out = malloc(maxb), *in = malloc(maxb);
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!out || !in || !t) {
    fprintf(stderr, "tcp_pair: out of memory\n");
    return 1;
  }
  memset(out, 0x5a, maxb);
  printf("# tcp_pair: both sides send and receive each size at once; median of %ld after %ld "
         "warm-ups\n#%13s %12s %12s\n", iters, warmup, "bytes", "time(us)", "GB/s");
  for (size_t s = minb; s <= maxb; s *= (size_t)factor) {
    for (long i = 0; i < warmup; i++) exchange(fd, out, in, s);
    for (long i = 0; i < iters; i++) {
      double t0 = now_s();
      exchange(fd, out, in, s);
      t[i] = now_s() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    printf("%14zu %12.2f %12.3f\n", s, med * 1e6, (double)s / med / 1e9);
    fflush(stdout);
    if (s > maxb / (size_t)factor) break;
  }
  close(fd);
  free(out);
  free(in);
  free(t);
  return 0;
}
