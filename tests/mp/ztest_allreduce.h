/*
 * One allreduce of host buffers, checked: the cases the hostmem tests run
 * (float sum/max/min/avg, int64 sum) with inputs whose results are exact,
 * each rank's own per round.
 */
#ifndef ZTEST_ALLREDUCE_H_
#define ZTEST_ALLREDUCE_H_

#include <stddef.h>

#include "zcc.h"

typedef struct {
  zccDataType_t type;
  zccRedOp_t op;
  const char *name;
} zt_ar_case_t;

extern const zt_ar_case_t zt_ar_cases[];
extern const size_t zt_ar_ncases;

/* Rank r of n: fill its input (in rb when inplace, else sb) for `round`,
   poison rb, allreduce bytes (whole elements), check every element. The
   wrong results: 1 for a failed call or a wrong element (the first is
   reported through zt_fail), else 0. */
long zt_ar_call(zccComm_t comm, int r, int n, const zt_ar_case_t *c, char *sb, char *rb,
                size_t bytes, int inplace, int round);

/* A 1 MiB float sum whose last rank is gone: the call must fail within 60 s
   (checked, reported for rank r). */
void zt_ar_dead_peer(zccComm_t comm, int r, char *sb, char *rb);

/* The collectives' INFO log of each rank, to a file per process in a fresh
   directory (the path into dir, cap bytes): "/tmp/zcc-NAME-XXXXXX", files
   NAME.<pid>.log. Set before the ranks start; -1 where it cannot be made. */
int zt_log_dir_make(char *dir, size_t cap, const char *name);
/* Lines of this process's log that contain what (-1: no log). */
int zt_log_count(const char *dir, const char *name, const char *what);
/* This process's log removed; the whole directory (the runner, at its end). */
void zt_log_unlink(const char *dir, const char *name);
void zt_log_dir_remove(const char *dir);

#endif /* ZTEST_ALLREDUCE_H_ */
