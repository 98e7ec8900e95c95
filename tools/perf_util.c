/*
 * Size parsing, the size sweep, timing and nccl-tests' output columns,
 * shared by the zcc benchmarks and mpi_allreduce_ref.
 */
#include "perf_util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int perf_parse_size(const char *text, size_t *bytes)
{
  char *end;
  unsigned long long v, mult = 1;

  if (text == NULL || *text == '\0' || *text == '-' || *text == '+')
    return -1;
  errno = 0;
  v = strtoull(text, &end, 10);
  if (errno != 0 || end == text)
    return -1;
  switch (*end) {
  case '\0':
    break;
  case 'k':
  case 'K':
    mult = 1ull << 10;
    end++;
    break;
  case 'm':
  case 'M':
    mult = 1ull << 20;
    end++;
    break;
  case 'g':
  case 'G':
    mult = 1ull << 30;
    end++;
    break;
  default:
    return -1;
  }
  if (*end != '\0')
    return -1;
  if (v != 0 && mult > (unsigned long long)SIZE_MAX / v)
    return -1;
  *bytes = (size_t)(v * mult);
  return 0;
}

int perf_parse_long(const char *text, long lo, long hi, long *value)
{
  char *end;
  long v;

  if (text == NULL || *text == '\0')
    return -1;
  errno = 0;
  v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
    return -1;
  *value = v;
  return 0;
}

int perf_next_size(size_t size, size_t max, long factor, size_t step,
                   size_t *next)
{
  size_t n;

  if (factor > 1) {
    if (size == 0)
      n = 1;
    else if (size > SIZE_MAX / (size_t)factor)
      return 0;
    else
      n = size * (size_t)factor;
  } else {
    if (step == 0 || size > SIZE_MAX - step)
      return 0;
    n = size + step;
  }
  if (n > max)
    return 0;
  *next = n;
  return 1;
}

size_t perf_largest_size(size_t min, size_t max, long factor, size_t step)
{
  size_t size = min, next;

  while (perf_next_size(size, max, factor, step, &next))
    size = next;
  return size;
}

double perf_now_us(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

double perf_median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  if (n % 2 == 1)
    return v[n / 2];
  return 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void perf_format_time(char *buf, size_t len, double us)
{
  if (us >= 10000.0)
    snprintf(buf, len, "%7.0f", us);
  else if (us >= 100.0)
    snprintf(buf, len, "%7.1f", us);
  else
    snprintf(buf, len, "%7.2f", us);
}

double perf_gbps(size_t bytes, double us)
{
  if (us <= 0.0)
    return 0.0;
  return (double)bytes / us / 1e3;
}

void perf_print_table_header(FILE *f)
{
  fprintf(f, "#\n");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
          "", "", "", "", "");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n",
          "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
          "#wrong", "time", "algbw", "busbw", "#wrong");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n",
          "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
          "(us)", "(GB/s)", "(GB/s)", "");
}

void perf_print_row_head(FILE *f, size_t size, size_t count, const char *type,
                         const char *op, int root)
{
  fprintf(f, "%12zu  %12zu  %8s  %6s  %6d", size, count, type, op, root);
}

void perf_print_row_result(FILE *f, double us, double algbw, double busbw,
                           int64_t wrong)
{
  char t[32];

  perf_format_time(t, sizeof(t), us);
  if (wrong >= 0)
    fprintf(f, "  %7s  %6.2f  %6.2f  %5g", t, algbw, busbw, (double)wrong);
  else
    fprintf(f, "  %7s  %6.2f  %6.2f  %5s", t, algbw, busbw, "N/A");
}

void perf_print_trailer(FILE *f, int64_t wrong, double avg_busbw)
{
  fprintf(f, "# Out of bounds values : %lld %s\n", (long long)wrong,
          wrong ? "FAILED" : "OK");
  fprintf(f, "# Avg bus bandwidth    : %g \n", avg_busbw);
  fprintf(f, "#\n");
}

double perf_ratio(double num, double den)
{
  return den > 0.0 ? num / den : 0.0;
}

void perf_print_compare_header(FILE *f)
{
  fprintf(f, "#\n");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %-56s  %-56s\n", "", "", "", "", "",
          "                      out-of-place", "                        in-place");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int i = 0; i < 2; i++)
    fprintf(f, "  %7s  %6s %6s  %7s  %6s %6s  %6s", "zcc", "busbw", "#wrong", "nccl", "busbw",
            "#wrong", "ratio");
  fprintf(f, "\n# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int i = 0; i < 2; i++)
    fprintf(f, "  %7s  %6s %6s  %7s  %6s %6s  %6s", "(us)", "(GB/s)", "", "(us)", "(GB/s)", "",
            "z/n");
  fprintf(f, "\n");
}

static void print_wrong(FILE *f, int64_t wrong)
{
  if (wrong >= 0)
    fprintf(f, "  %5g", (double)wrong);
  else
    fprintf(f, "  %5s", "N/A");
}

void perf_print_compare_result(FILE *f, double us, double busbw, int64_t wrong,
                               double ref_us, double ref_busbw, int64_t ref_wrong)
{
  char t[32], rt[32];

  perf_format_time(t, sizeof(t), us);
  fprintf(f, "  %7s  %6.2f", t, busbw);
  print_wrong(f, wrong);
  if (ref_us < 0) {
    fprintf(f, "  %7s  %6s  %5s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  perf_format_time(rt, sizeof(rt), ref_us);
  fprintf(f, "  %7s  %6.2f", rt, ref_busbw);
  print_wrong(f, ref_wrong);
  fprintf(f, "  %6.2f", perf_ratio(ref_us, us));
}

void perf_print_compare_trailer(FILE *f, int64_t wrong, double avg_busbw,
                                int64_t ref_wrong, double ref_avg_busbw, double ratio)
{
  fprintf(f, "# Out of bounds values : %lld %s\n", (long long)wrong, wrong ? "FAILED" : "OK");
  fprintf(f, "# Avg bus bandwidth    : %g \n", avg_busbw);
  fprintf(f, "# NCCL out of bounds values : %lld %s\n", (long long)ref_wrong,
          ref_wrong ? "FAILED" : "OK");
  fprintf(f, "# NCCL avg bus bandwidth    : %g \n", ref_avg_busbw);
  fprintf(f, "# Avg busbw ratio zcc/NCCL  : %.3f\n", ratio);
  fprintf(f, "#\n");
}

void perf_iso_date(char *buf, size_t len)
{
  time_t now = time(NULL);
  struct tm tm;

  gmtime_r(&now, &tm);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void perf_json_string(FILE *f, const char *s)
{
  const unsigned char *p;

  fputc('"', f);
  for (p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
