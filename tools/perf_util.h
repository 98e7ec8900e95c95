/*
 * Helpers shared by the zcc benchmarks and the MPI reference: size parsing,
 * the size sweep, timing, medians and nccl-tests' column formatting. Nothing
 * here depends on zcc or MPI.
 */
#ifndef ZCC_PERF_UTIL_H_
#define ZCC_PERF_UTIL_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Parse "123", "4K", "8M", "1G" (binary multiples, either case). 0 on success. */
int perf_parse_size(const char *text, size_t *bytes);
/* Parse a whole decimal integer in [lo, hi]. 0 on success. */
int perf_parse_long(const char *text, long lo, long hi, long *value);

/*
 * The size sweep of nccl-tests: from min to max, multiplying by factor when
 * factor > 1, else adding step. A sweep that starts at 0 continues at 1.
 * Returns 0 when the sweep ends (next size past max or overflow).
 */
int perf_next_size(size_t size, size_t max, long factor, size_t step,
                   size_t *next);
/* The largest size the sweep visits. */
size_t perf_largest_size(size_t min, size_t max, long factor, size_t step);

/* CLOCK_MONOTONIC in microseconds. */
double perf_now_us(void);
/* Median of v[0..n-1]; sorts v. n must be at least 1. */
double perf_median(double *v, int n);

/* The time column: "%7.0f" from 10 ms, "%7.1f" from 100 us, else "%7.2f". */
void perf_format_time(char *buf, size_t len, double us);
/* GB/s for bytes moved in us microseconds (0 when us is 0). */
double perf_gbps(size_t bytes, double us);

/* The three column header lines of nccl-tests. */
void perf_print_table_header(FILE *f);
/* size, count, type, redop and root columns. */
void perf_print_row_head(FILE *f, size_t size, size_t count, const char *type,
                         const char *op, int root);
/* time, algbw, busbw and #wrong of one placement; wrong < 0 prints N/A. */
void perf_print_row_result(FILE *f, double us, double algbw, double busbw,
                           int64_t wrong);
/* "# Out of bounds values" and "# Avg bus bandwidth" lines. */
void perf_print_trailer(FILE *f, int64_t wrong, double avg_busbw);

/* num / den, or 0 when den is not positive. */
double perf_ratio(double num, double den);
/*
 * The table of two libraries side by side (allreduce_perf --compare nccl):
 * per placement, zcc's time, busbw and #wrong, NCCL's, and the ratio zcc
 * busbw / NCCL busbw (= NCCL time / zcc time). ref_us < 0: NCCL did not run
 * (N/A). The trailer's ratio is over the rows that both ran.
 */
void perf_print_compare_header(FILE *f);
void perf_print_compare_result(FILE *f, double us, double busbw, int64_t wrong,
                               double ref_us, double ref_busbw, int64_t ref_wrong);
void perf_print_compare_trailer(FILE *f, int64_t wrong, double avg_busbw,
                                int64_t ref_wrong, double ref_avg_busbw, double ratio);

/* Current UTC date and time as ISO 8601 ("2024-05-01T12:00:00Z"). */
void perf_iso_date(char *buf, size_t len);
/* Write s as a JSON string literal, quotes included. */
void perf_json_string(FILE *f, const char *s);

#endif /* ZCC_PERF_UTIL_H_ */
