/*
 * membw: the memory-bandwidth ceiling the host collectives are measured
 * against. Copies a buffer with memcpy on 1..T threads at once (each thread
 * its own source and destination) and prints the median copy rate per
 * thread and in total, in GB/s of bytes copied (each byte is read once and
 * written once). Usage: membw [-b BYTES] [-t THREADS] [-n ITERS] [-p]
 *
 * -p copies with plain 16-byte loads and stores instead: glibc's memcpy
 * switches to streaming stores past a size (a few MiB), which go to DRAM
 * even where the buffers would stay in the last-level cache from one copy
 * to the next, so memcpy's rate there is the DRAM's; -p gives the cache's
 * (docs/perf/host.md, 2026-12-06).
 *
 * membw -l: the one-way latency of a cache line between two processes
 * bound to the first two CPUs this one may use (a flag written by one,
 * polled by the other, and back), median of 9 runs of 100000 round trips.
 * On a virtual machine it tells where the host placed the two cores: the
 * small-message latency of every library follows it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf_util.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

typedef struct worker {
  size_t bytes;
  int iters;
  int plain; /* -p: plain_copy, not memcpy */
  pthread_barrier_t *barrier;
  double *seconds; /* [iters] */
} worker_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A copy with plain stores only (no streaming stores at any size). */
static void plain_copy(char *dst, const char *src, size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
    _mm_storeu_si128((__m128i *)(dst + i), a);
    _mm_storeu_si128((__m128i *)(dst + i + 16), b);
    _mm_storeu_si128((__m128i *)(dst + i + 32), c);
    _mm_storeu_si128((__m128i *)(dst + i + 48), d);
  }
#endif
  for (; i < n; i++) ((volatile char *)dst)[i] = src[i];
}

static void *run(void *p) {
  worker_t *w = p;
  char *src = malloc(w->bytes), *dst = malloc(w->bytes);
  if (!src || !dst) {
    fprintf(stderr, "membw: cannot allocate 2 x %zu bytes\n", w->bytes);
    exit(1);
  }
  memset(src, 1, w->bytes);
  memset(dst, 2, w->bytes);
  for (int i = -2; i < w->iters; i++) {
    pthread_barrier_wait(w->barrier);
    double t0 = now();
    if (w->plain)
      plain_copy(dst, src, w->bytes);
    else
      memcpy(dst, src, w->bytes);
    double t1 = now();
    if (i >= 0) w->seconds[i] = t1 - t0;
  }
  free(src);
  free(dst);
  return NULL;
}

static int bind_to(int nth) {
  cpu_set_t all, one;
  if (sched_getaffinity(0, sizeof(all), &all) != 0) return -1;
  for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &all) && seen++ == nth) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      return sched_setaffinity(0, sizeof(one), &one);
    }
  return -1;
}

static int line_latency(void) {
  atomic_long *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("membw: mmap");
    return 1;
  }
  atomic_long *ping = m, *pong = m + 16; /* two lines */
  enum { ROUNDS = 9, TRIPS = 100000 };
  pid_t pid = fork();
  if (pid < 0) {
    perror("membw: fork");
    return 1;
  }
  if (bind_to(pid ? 0 : 1) != 0 && pid) fprintf(stderr, "membw: fewer than 2 CPUs to bind to\n");
  if (pid == 0) {
    for (long i = 1; i <= (long)ROUNDS * TRIPS; i++) {
      while (atomic_load_explicit(ping, memory_order_acquire) != i) {
      }
      atomic_store_explicit(pong, i, memory_order_release);
    }
    _exit(0);
  }
  double us[ROUNDS];
  long i = 0;
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = now();
    for (int k = 0; k < TRIPS; k++) {
      i++;
      atomic_store_explicit(ping, i, memory_order_release);
      while (atomic_load_explicit(pong, memory_order_acquire) != i) {
      }
    }
    us[r] = (now() - t0) / TRIPS / 2 * 1e6;
  }
  waitpid(pid, NULL, 0);
  qsort(us, ROUNDS, sizeof(double), cmp_double);
  printf("# membw -l: one-way cache-line latency between CPUs 0 and 1 of this process's set\n");
  printf("  %.3f us (runs %.3f-%.3f)\n", us[ROUNDS / 2], us[0], us[ROUNDS - 1]);
  return 0;
}

int main(int argc, char **argv) {
  size_t bytes = 256u << 20;
  int threads = 2, iters = 20, plain = 0, opt;
  while ((opt = getopt(argc, argv, "b:t:n:plh")) != -1) {
    switch (opt) {
    case 'b':
      if (perf_parse_size(optarg, &bytes) != 0 || bytes == 0) {
        fprintf(stderr, "membw: -b %s is not a size\n", optarg);
        return 2;
      }
      break;
    case 't': threads = atoi(optarg); break;
    case 'n': iters = atoi(optarg); break;
    case 'p': plain = 1; break;
    case 'l': return line_latency();
    default:
      fprintf(stderr, "usage: membw [-b BYTES] [-t THREADS] [-n ITERS] [-p] | membw -l\n");
      return opt == 'h' ? 0 : 2;
    }
  }
  if (threads < 1 || threads > 256 || iters < 1) {
    fprintf(stderr, "membw: -t must be 1..256 and -n at least 1\n");
    return 2;
  }
  printf("# membw: %s of %zu bytes, median of %d, GB/s of bytes copied\n",
         plain ? "copy with plain stores (-p)" : "memcpy", bytes, iters);
  printf("# threads  per-thread  total\n");
  for (int t = 1; t <= threads; t++) {
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)t);
    worker_t *w = calloc((size_t)t, sizeof(*w));
    pthread_t *th = calloc((size_t)t, sizeof(*th));
    for (int k = 0; k < t; k++) {
      w[k] = (worker_t){bytes, iters, plain, &barrier, calloc((size_t)iters, sizeof(double))};
      pthread_create(&th[k], NULL, run, &w[k]);
    }
    for (int k = 0; k < t; k++) pthread_join(th[k], NULL);
    qsort(w[0].seconds, (size_t)iters, sizeof(double), cmp_double);
    double per = bytes / w[0].seconds[iters / 2] / 1e9;
    printf("  %7d  %10.2f  %6.2f\n", t, per, per * t);
    for (int k = 0; k < t; k++) free(w[k].seconds);
    free(w);
    free(th);
    pthread_barrier_destroy(&barrier);
  }
  return 0;
}
