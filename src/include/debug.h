/* Logging by subsystem, and the thread's last error message. */
#ifndef ZCC_DEBUG_H_
#define ZCC_DEBUG_H_

#include <stdint.h>

#include "zcc.h"

typedef enum {
  ZCC_LOG_NONE = 0,
  ZCC_LOG_VERSION = 1,
  ZCC_LOG_WARN = 2,
  ZCC_LOG_INFO = 3,
  ZCC_LOG_TRACE = 4
} zcc_log_level_t;

/* Subsystems, a bit each; ZCC_DEBUG_SUBSYS names them (ALL, or a list, ^ negates). */
#define ZCC_SUBSYS_MAP(X)                                                      \
  X(INIT, 0)                                                                   \
  X(BOOT, 1)                                                                   \
  X(TOPO, 2)                                                                   \
  X(TUNING, 3)                                                                 \
  X(COLL, 4)                                                                   \
  X(P2P, 5)                                                                    \
  X(SHM, 6)                                                                    \
  X(NET, 7)                                                                    \
  X(ENV, 8)                                                                    \
  X(ALLOC, 9)                                                                  \
  X(CALL, 10)

typedef enum {
#define ZCC_SUBSYS_ENUM_(name, bit) ZCC_##name = 1u << (bit),
  ZCC_SUBSYS_MAP(ZCC_SUBSYS_ENUM_)
#undef ZCC_SUBSYS_ENUM_
  ZCC_ALL = ~0u
} zcc_subsys_t;

extern int zcc_log_level_cached;      /* -1 until initialised */
extern uint32_t zcc_log_subsys_cached;
/* Rank shown in log lines of this thread (-1: none). */
extern _Thread_local int zcc_log_rank;

void zcc_log_init(void);
void zcc_log(zcc_log_level_t level, uint32_t subsys, const char *file,
             int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static inline int zcc_log_enabled(zcc_log_level_t level, uint32_t subsys) {
  if (zcc_log_level_cached < 0) zcc_log_init();
  return zcc_log_level_cached >= (int)level &&
         (level <= ZCC_LOG_WARN || (zcc_log_subsys_cached & subsys));
}

#define ZCC_LOG_(level, subsys, ...)                                           \
  do {                                                                         \
    if (zcc_log_enabled(level, subsys))                                        \
      zcc_log(level, subsys, __FILE__, __LINE__, __VA_ARGS__);                 \
  } while (0)

#define ZCC_WARN(...) ZCC_LOG_(ZCC_LOG_WARN, ZCC_ALL, __VA_ARGS__)
#define ZCC_INFO(subsys, ...) ZCC_LOG_(ZCC_LOG_INFO, ZCC_##subsys, __VA_ARGS__)
#define ZCC_TRACE(subsys, ...) ZCC_LOG_(ZCC_LOG_TRACE, ZCC_##subsys, __VA_ARGS__)

/*
 * Record the thread's last error (returned by zccGetLastError) and log it at
 * WARN. Returns `res` so that callers can write `return zcc_error(...)`.
 */
zccResult_t zcc_error(zccResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *zcc_last_error(void);
/* One line of a decision table at INFO TUNING; prefix: a const char * or NULL. */
void zcc_log_tuning_line(void *prefix, const char *line);
void zcc_clear_last_error(void);
/* Put back a message saved from zcc_last_error() (after calls that may replace it). */
void zcc_restore_last_error(const char *msg);

#endif /* ZCC_DEBUG_H_ */
