/*
 * mpi_allreduce_ref: times MPI_Allreduce (float32 sum) over the same size
 * sweep and with the same method as allreduce_perf (-w untimed iterations,
 * then the median over -n iterations of the slowest rank's wall time), and
 * prints the same columns, so that compare_mpi.sh can put them side by side.
 * Start it with mpirun.
 */
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_util.h"

typedef struct {
  size_t min_bytes, max_bytes, step_bytes;
  long step_factor, iters, warmup, check;
} ref_opts_t;

static const char *prog = "mpi_allreduce_ref";
static int my_rank;

static void usage(FILE *f)
{
  fprintf(f,
          "usage: mpirun -np N %s [options]\n"
          "Times MPI_Allreduce of float32 sums like allreduce_perf does.\n"
          "\n"
          "  -b <size>   smallest size in bytes (suffixes K, M, G); default 32M\n"
          "  -e <size>   largest size; default 32M\n"
          "  -f <n>      multiply the size by the integer n each step; default 1 (use -i)\n"
          "  -i <size>   add this to the size each step when -f is 1; default 1M\n"
          "  -n <n>      timed iterations per size; default 20\n"
          "  -w <n>      untimed iterations before them; default 5\n"
          "  -c <0|1>    check every result element; default 1\n"
          "  -d float    the datatype; only float (float32)\n"
          "  -o sum      the op; only sum\n"
          "  -h          show this help\n",
          prog);
}

static void bad_arg(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void bad_arg(const char *fmt, ...)
{
  va_list ap;

  if (my_rank == 0) {
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    usage(stderr);
  }
  MPI_Finalize();
  exit(2);
}

static void parse_args(int argc, char **argv, ref_opts_t *o)
{
  o->min_bytes = o->max_bytes = 32u << 20;
  o->step_bytes = 1u << 20;
  o->step_factor = 1;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int ok = 0;

    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      if (my_rank == 0)
        usage(stdout);
      MPI_Finalize();
      exit(0);
    }
    if (a[0] != '-' || a[1] == '\0' || a[2] != '\0' || strchr("befinwcdo", a[1]) == NULL)
      bad_arg("unknown option '%s'", a);
    if (i + 1 >= argc)
      bad_arg("%s needs a value", a);
    v = argv[++i];
    switch (a[1]) {
    case 'b':
      ok = perf_parse_size(v, &o->min_bytes) == 0;
      break;
    case 'e':
      ok = perf_parse_size(v, &o->max_bytes) == 0;
      break;
    case 'i':
      ok = perf_parse_size(v, &o->step_bytes) == 0;
      break;
    case 'f':
      ok = perf_parse_long(v, 1, 1 << 20, &o->step_factor) == 0;
      break;
    case 'n':
      ok = perf_parse_long(v, 1, 1 << 24, &o->iters) == 0;
      break;
    case 'w':
      ok = perf_parse_long(v, 0, 1 << 24, &o->warmup) == 0;
      break;
    case 'c':
      ok = perf_parse_long(v, 0, 1, &o->check) == 0;
      break;
    case 'd':
      if (strcmp(v, "float") != 0 && strcmp(v, "float32") != 0)
        bad_arg("-d %s: only float (float32) is timed by the MPI reference", v);
      ok = 1;
      break;
    case 'o':
      if (strcmp(v, "sum") != 0)
        bad_arg("-o %s: only sum is timed by the MPI reference", v);
      ok = 1;
      break;
    }
    if (!ok)
      bad_arg("%s: bad value '%s'", a, v);
  }
  if (o->min_bytes > o->max_bytes)
    bad_arg("minimum size %zu bytes is larger than the maximum %zu bytes", o->min_bytes,
            o->max_bytes);
  if (o->step_factor <= 1 && o->step_bytes == 0 && o->min_bytes < o->max_bytes)
    bad_arg("-i 0 with -f 1 never reaches the maximum size");
}

/* Small integers whose float sums over any rank count here stay exact. */
static float input_value(int rank, size_t i)
{
  return (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

static void fill(float *buf, size_t count, int rank)
{
  for (size_t i = 0; i < count; i++)
    buf[i] = input_value(rank, i);
}

static long long verify(const float *buf, size_t count, int nranks)
{
  long long wrong = 0;

  for (size_t i = 0; i < count; i++) {
    float want = 0.0f;
    for (int r = 0; r < nranks; r++)
      want += input_value(r, i);
    if (buf[i] != want)
      wrong++;
  }
  return wrong;
}

static double measure(const ref_opts_t *o, float *send, float *recv, size_t count,
                      int inplace, int nranks, double *times, long long *wrong)
{
  const void *src = inplace ? MPI_IN_PLACE : (const void *)send;
  float *data = inplace ? recv : send;

  fill(data, count, my_rank);
  for (long i = 0; i < o->warmup; i++)
    MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (long i = 0; i < o->iters; i++) {
    double t0 = perf_now_us();
    MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    times[i] = perf_now_us() - t0;
  }
  MPI_Allreduce(MPI_IN_PLACE, times, (int)o->iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *wrong = -1;
  if (o->check) {
    long long w;
    fill(data, count, my_rank);
    if (!inplace)
      memset(recv, 0xff, count * sizeof(float));
    MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    w = verify(recv, count, nranks);
    MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    *wrong = w;
  }
  return perf_median(times, (int)o->iters);
}

int main(int argc, char **argv)
{
  ref_opts_t o;
  int nranks, len;
  char version[MPI_MAX_LIBRARY_VERSION_STRING], *nl;
  size_t largest, size;
  float *send, *recv;
  double *times, bw_sum = 0.0;
  int bw_count = 0;
  long long wrong_total = 0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argv[0] && strrchr(argv[0], '/'))
    prog = strrchr(argv[0], '/') + 1;
  parse_args(argc, argv, &o);

  largest = perf_largest_size(o.min_bytes, o.max_bytes, o.step_factor, o.step_bytes);
  if (largest / sizeof(float) > INT_MAX)
    bad_arg("%zu bytes is more floats than one MPI_Allreduce takes (%d)", largest, INT_MAX);
  send = malloc(largest + sizeof(float));
  recv = malloc(largest + sizeof(float));
  times = malloc((size_t)o.iters * sizeof(double));
  if (send == NULL || recv == NULL || times == NULL) {
    fprintf(stderr, "%s: rank %d: cannot allocate two %zu-byte buffers\n", prog, my_rank, largest);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(send, 0, largest + sizeof(float));
  memset(recv, 0, largest + sizeof(float));

  if (my_rank == 0) {
    MPI_Get_library_version(version, &len);
    nl = strchr(version, '\n');
    if (nl)
      *nl = '\0';
    nl = strchr(version, ',');
    if (nl)
      *nl = '\0';
    printf("# %s: %s, %d ranks, MPI_Allreduce float sum\n", prog, version, nranks);
    printf("# nThread 1 nGpus 0 minBytes %zu maxBytes %zu step: ", o.min_bytes, o.max_bytes);
    if (o.step_factor > 1)
      printf("%ld(factor)", o.step_factor);
    else
      printf("%zu(bytes)", o.step_bytes);
    printf(" warmup iters: %ld iters: %ld agg iters: 1 validation: %ld graph: 0\n", o.warmup,
           o.iters, o.check);
    perf_print_table_header(stdout);
  }

  size = o.min_bytes;
  do {
    size_t count = size / sizeof(float);
    double us[2];
    long long wrong[2];

    if (count == 0 && size != 0)
      continue;
    for (int inplace = 0; inplace < 2; inplace++)
      us[inplace] = measure(&o, send, recv, count, inplace, nranks, times, &wrong[inplace]);
    if (my_rank != 0)
      continue;
    perf_print_row_head(stdout, count * sizeof(float), count, "float", "sum", -1);
    for (int i = 0; i < 2; i++) {
      double algbw = perf_gbps(count * sizeof(float), us[i]);
      double busbw = algbw * 2.0 * (nranks - 1) / nranks;
      perf_print_row_result(stdout, us[i], algbw, busbw, wrong[i]);
      bw_sum += busbw;
      bw_count++;
      if (wrong[i] > 0)
        wrong_total += wrong[i];
    }
    printf("\n");
    fflush(stdout);
  } while (perf_next_size(size, o.max_bytes, o.step_factor, o.step_bytes, &size));

  if (my_rank == 0)
    perf_print_trailer(stdout, wrong_total, bw_count ? bw_sum / bw_count : 0.0);
  MPI_Bcast(&wrong_total, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  free(times);
  free(recv);
  free(send);
  MPI_Finalize();
  return wrong_total ? 1 : 0;
}
