/* Logging: ZCC_DEBUG, ZCC_DEBUG_SUBSYS, ZCC_DEBUG_FILE; the thread's last error. */
#include "debug.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "param.h"

ZCC_PARAM_STR(debug, "DEBUG", NULL,
              "log level: VERSION, WARN, INFO or TRACE (default: none)")
ZCC_PARAM_STR(debug_subsys, "DEBUG_SUBSYS", "INIT,BOOT,ENV",
              "subsystems logged at INFO/TRACE: ALL or a comma list of INIT, "
              "BOOT, TOPO, TUNING, COLL, P2P, SHM, NET, ENV, ALLOC, CALL; a "
              "leading ^ excludes the list")
ZCC_PARAM_STR(debug_file, "DEBUG_FILE", NULL,
              "log to this file instead of stderr; %h is the host name, %p "
              "the pid")

int zcc_log_level_cached = -1;
uint32_t zcc_log_subsys_cached;
_Thread_local int zcc_log_rank = -1;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;
static char log_host[64];

static const struct {
  const char *name;
  uint32_t bit;
} subsys_names[] = {
#define ZCC_SUBSYS_NAME_(name, bit) {#name, 1u << (bit)},
    ZCC_SUBSYS_MAP(ZCC_SUBSYS_NAME_)
#undef ZCC_SUBSYS_NAME_
};

static uint32_t parse_subsys(const char *s) {
  int negate = 0;
  uint32_t mask = 0;
  if (s[0] == '^') {
    negate = 1;
    s++;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (strcasecmp(tok, "ALL") == 0) {
      mask = ZCC_ALL;
      continue;
    }
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
  }
  return negate ? ~mask : mask;
}

/* Expand %h and %p in the file name. */
static void expand_path(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = in; *p && o + 1 < cap; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int n = p[1] == 'h' ? snprintf(out + o, cap - o, "%s", log_host)
                          : snprintf(out + o, cap - o, "%d", (int)getpid());
      o += n > 0 ? (size_t)n : 0;
      if (o >= cap) o = cap - 1;
      p++;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

void zcc_log_init(void) {
  pthread_mutex_lock(&log_lock);
  if (zcc_log_level_cached >= 0) {
    pthread_mutex_unlock(&log_lock);
    return;
  }
  gethostname(log_host, sizeof(log_host) - 1);
  char *dot = strchr(log_host, '.');
  if (dot) *dot = '\0';
  int level = ZCC_LOG_NONE;
  const char *lv = zcc_param_debug();
  if (lv) {
    if (strcasecmp(lv, "VERSION") == 0) level = ZCC_LOG_VERSION;
    else if (strcasecmp(lv, "WARN") == 0) level = ZCC_LOG_WARN;
    else if (strcasecmp(lv, "INFO") == 0) level = ZCC_LOG_INFO;
    else if (strcasecmp(lv, "TRACE") == 0) level = ZCC_LOG_TRACE;
  }
  zcc_log_subsys_cached = parse_subsys(zcc_param_debug_subsys());
  log_file = stderr;
  const char *path = zcc_param_debug_file();
  if (path && level > ZCC_LOG_NONE) {
    char full[4096];
    expand_path(path, full, sizeof(full));
    FILE *f = fopen(full, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      log_file = f;
    } else {
      fprintf(stderr, "zcc: cannot open ZCC_DEBUG_FILE %s: %s; logging to stderr\n",
              full, strerror(errno));
    }
  }
  __atomic_store_n(&zcc_log_level_cached, level, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&log_lock);
}

static const char *level_name(zcc_log_level_t l) {
  switch (l) {
  case ZCC_LOG_VERSION: return "VERSION";
  case ZCC_LOG_WARN: return "WARN";
  case ZCC_LOG_INFO: return "INFO";
  case ZCC_LOG_TRACE: return "TRACE";
  default: return "";
  }
}

static const char *subsys_name(uint32_t s) {
  for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
    if (s == subsys_names[i].bit) return subsys_names[i].name;
  return "ALL";
}

void zcc_log(zcc_log_level_t level, uint32_t subsys, const char *file, int line,
             const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  char rank[16] = "";
  if (zcc_log_rank >= 0) snprintf(rank, sizeof(rank), " [%d]", zcc_log_rank);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  pthread_mutex_lock(&log_lock);
  if (level == ZCC_LOG_TRACE) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    fprintf(log_file, "%s:%d:%ld%s ZCC %s %s %ld.%06ld %s:%d %s\n", log_host,
            (int)getpid(), (long)syscall(SYS_gettid), rank, level_name(level),
            subsys_name(subsys), (long)tv.tv_sec, (long)tv.tv_usec, base, line, msg);
  } else {
    fprintf(log_file, "%s:%d:%ld%s ZCC %s %s %s\n", log_host, (int)getpid(),
            (long)syscall(SYS_gettid), rank, level_name(level),
            level == ZCC_LOG_WARN ? base : subsys_name(subsys), msg);
  }
  pthread_mutex_unlock(&log_lock);
}

static _Thread_local char last_error[1024];

zccResult_t zcc_error(zccResult_t res, const char *fmt, ...) {
  /* Format aside first: callers may pass zcc_last_error() as an argument. */
  char msg[sizeof(last_error)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  memcpy(last_error, msg, sizeof(msg));
  ZCC_WARN("%s (%s)", last_error, zccGetErrorString(res));
  return res;
}

const char *zcc_last_error(void) { return last_error; }

void zcc_clear_last_error(void) { last_error[0] = '\0'; }

void zcc_log_tuning_line(void *prefix, const char *line) {
  ZCC_INFO(TUNING, "%s%s%s", prefix ? (const char *)prefix : "", prefix ? ": " : "", line);
}

void zcc_restore_last_error(const char *msg) {
  snprintf(last_error, sizeof(last_error), "%s", msg);
}
