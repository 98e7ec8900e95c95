/*
 * membw: the memory-bandwidth ceiling the host collectives are measured
 * against. Copies a buffer with memcpy on 1..T threads at once (each thread
 * its own source and destination) and prints the median copy rate per
 * thread and in total, in GB/s of bytes copied (each byte is read once and
 * written once). Usage: membw [-b BYTES] [-t THREADS] [-n ITERS]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf_util.h"

typedef struct worker {
  size_t bytes;
  int iters;
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
    memcpy(dst, src, w->bytes);
    double t1 = now();
    if (i >= 0) w->seconds[i] = t1 - t0;
  }
  free(src);
  free(dst);
  return NULL;
}

int main(int argc, char **argv) {
  size_t bytes = 256u << 20;
  int threads = 2, iters = 20, opt;
  while ((opt = getopt(argc, argv, "b:t:n:h")) != -1) {
    switch (opt) {
    case 'b':
      if (perf_parse_size(optarg, &bytes) != 0 || bytes == 0) {
        fprintf(stderr, "membw: -b %s is not a size\n", optarg);
        return 2;
      }
      break;
    case 't': threads = atoi(optarg); break;
    case 'n': iters = atoi(optarg); break;
    default:
      fprintf(stderr, "usage: membw [-b BYTES] [-t THREADS] [-n ITERS]\n");
      return opt == 'h' ? 0 : 2;
    }
  }
  if (threads < 1 || threads > 256 || iters < 1) {
    fprintf(stderr, "membw: -t must be 1..256 and -n at least 1\n");
    return 2;
  }
  printf("# membw: memcpy of %zu bytes, median of %d, GB/s of bytes copied\n", bytes, iters);
  printf("# threads  per-thread  total\n");
  for (int t = 1; t <= threads; t++) {
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)t);
    worker_t *w = calloc((size_t)t, sizeof(*w));
    pthread_t *th = calloc((size_t)t, sizeof(*th));
    for (int k = 0; k < t; k++) {
      w[k] = (worker_t){bytes, iters, &barrier, calloc((size_t)iters, sizeof(double))};
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
