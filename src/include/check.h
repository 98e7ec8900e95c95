/* Error propagation macros: each logs a file:line breadcrumb on failure. */
#ifndef ZCC_CHECK_H_
#define ZCC_CHECK_H_

#include <errno.h>
#include <string.h>

#include "debug.h"

/* Check a zcc call; return its result on failure. */
#define ZCC_CHECK(call)                                                        \
  do {                                                                         \
    zccResult_t res_ = (call);                                                 \
    if (res_ != zccSuccess) {                                                  \
      ZCC_TRACE(ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)res_);          \
      return res_;                                                             \
    }                                                                          \
  } while (0)

/* Check a zcc call; on failure store its result in `res` and goto `label`. */
#define ZCC_CHECK_GOTO(call, res, label)                                       \
  do {                                                                         \
    (res) = (call);                                                            \
    if ((res) != zccSuccess) {                                                 \
      ZCC_TRACE(ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res));         \
      goto label;                                                              \
    }                                                                          \
  } while (0)

/*
 * Check a system call that returns -1 and sets errno; retries EINTR. Records
 * "<what> failed: <strerror>" and returns zccSystemError.
 */
#define ZCC_SYSCHECK(call, what)                                               \
  do {                                                                         \
    int rc_;                                                                   \
    do {                                                                       \
      rc_ = (int)(call);                                                       \
    } while (rc_ == -1 && errno == EINTR);                                     \
    if (rc_ == -1)                                                             \
      return zcc_error(zccSystemError, "%s failed: %s", what,                  \
                       strerror(errno));                                       \
  } while (0)

#define ZCC_SYSCHECK_GOTO(call, what, res, label)                              \
  do {                                                                         \
    int rc_;                                                                   \
    do {                                                                       \
      rc_ = (int)(call);                                                       \
    } while (rc_ == -1 && errno == EINTR);                                     \
    if (rc_ == -1) {                                                           \
      (res) = zcc_error(zccSystemError, "%s failed: %s", what,                 \
                        strerror(errno));                                      \
      goto label;                                                              \
    }                                                                          \
  } while (0)

#endif /* ZCC_CHECK_H_ */
