/* Deadlines and abort flags shared by every blocking wait in zcc. */
#ifndef ZCC_WAIT_H_
#define ZCC_WAIT_H_

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "zcc.h"

typedef struct zcc_wait {
  int64_t deadline_ns;        /* CLOCK_MONOTONIC; INT64_MAX: none */
  const atomic_int *abort;    /* non-zero: give up with zccRemoteError; may be NULL */
  const char *what;           /* for messages: "bootstrap", "allreduce", ... */
} zcc_wait_t;

/* CLOCK_MONOTONIC in ns, read from the time-stamp counter where the kernel
   keeps time with it (misc/clock.c: within a microsecond of clock_gettime). */
int64_t zcc_now_ns(void);
/* What zcc_now_ns reads: "tsc", "tsc (calibrating)", "clock_gettime". */
const char *zcc_clock_name(void);

/* A wait that ends `timeout_ms` from now (timeout_ms <= 0: never). */
static inline zcc_wait_t zcc_wait_in(int64_t timeout_ms, const atomic_int *abort,
                                     const char *what) {
  zcc_wait_t w;
  w.deadline_ns = timeout_ms > 0 ? zcc_now_ns() + timeout_ms * 1000000LL : INT64_MAX;
  w.abort = abort;
  w.what = what;
  return w;
}

/*
 * zccSuccess while the wait may go on; zccRemoteError (aborted) or zccTimeout
 * (deadline passed), with the last error set, when it must stop.
 */
zccResult_t zcc_wait_check(const zcc_wait_t *w);

/* Milliseconds left, clamped to [0, cap_ms]; for poll(). */
int zcc_wait_poll_ms(const zcc_wait_t *w, int cap_ms);

#endif /* ZCC_WAIT_H_ */
