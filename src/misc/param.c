/* ZCC_* parameters: parsing, caching, and the list behind zccGetParam. */
#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

/* Linker-made bounds of the "zcc_params" section. */
extern zcc_param_t __start_zcc_params[] __attribute__((weak));
extern zcc_param_t __stop_zcc_params[] __attribute__((weak));

/* First reads of a parameter may race between threads: one loads it.
   Recursive: a load may log, and logging reads its own parameters. */
static pthread_mutex_t load_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static zcc_param_alias_fn alias_fn;

void zcc_param_set_alias(zcc_param_alias_fn fn) {
  __atomic_store_n(&alias_fn, fn, __ATOMIC_RELEASE);
}

/* ZCC_<name>, else the alias source's value (into val), else NULL. */
static const char *env_of(const zcc_param_t *p, char *buf, size_t cap, char *val,
                          size_t vcap) {
  snprintf(buf, cap, "ZCC_%s", p->name);
  const char *s = getenv(buf);
  zcc_param_alias_fn fn = __atomic_load_n(&alias_fn, __ATOMIC_ACQUIRE);
  if (!s && fn) s = fn(p->name, val, vcap);
  return s;
}

/* Integer with optional k/m/g (binary) suffix; 0 on success. */
static int parse_int(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || end == s) return -1;
  while (isspace((unsigned char)*end)) end++;
  int64_t mul = 1;
  switch (tolower((unsigned char)*end)) {
  case 'k': mul = 1LL << 10; end++; break;
  case 'm': mul = 1LL << 20; end++; break;
  case 'g': mul = 1LL << 30; end++; break;
  default: break;
  }
  if (*end != '\0') return -1;
  *out = (int64_t)v * mul;
  return 0;
}

int64_t zcc_param_get_int(zcc_param_t *p) {
  if (__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) return p->int_value;
  pthread_mutex_lock(&load_lock);
  if (!__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) {
    char name[128], alias[256];
    const char *s = env_of(p, name, sizeof(name), alias, sizeof(alias));
    int64_t v = p->int_default;
    if (s && *s) {
      if (parse_int(s, &v) != 0) {
        ZCC_WARN("%s=%s is not an integer; using the default %" PRId64, name, s,
                 p->int_default);
        v = p->int_default;
      } else {
        ZCC_INFO(ENV, "%s set to %" PRId64, name, v);
      }
    }
    p->int_value = v;
    __atomic_store_n(&p->loaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&load_lock);
  return p->int_value;
}

const char *zcc_param_get_str(zcc_param_t *p) {
  if (__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) return p->str_value;
  pthread_mutex_lock(&load_lock);
  if (!__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) {
    char name[128], alias[1024];
    const char *s = env_of(p, name, sizeof(name), alias, sizeof(alias));
    /* getenv's string stays valid unless the variable is changed; keep a copy. */
    const char *v = p->str_default;
    if (s) {
      char *copy = strdup(s);
      v = copy ? copy : p->str_default;
    }
    p->str_value = v;
    __atomic_store_n(&p->loaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&load_lock);
  return p->str_value;
}

const zcc_param_t *zcc_param_at(int index) {
  if (index < 0 || !__start_zcc_params) return NULL;
  size_t n = (size_t)(__stop_zcc_params - __start_zcc_params);
  return (size_t)index < n ? &__start_zcc_params[index] : NULL;
}

static unsigned reload_generation;

unsigned zcc_param_generation(void) {
  return __atomic_load_n(&reload_generation, __ATOMIC_ACQUIRE);
}

void zcc_param_reload(void) {
  __atomic_add_fetch(&reload_generation, 1, __ATOMIC_ACQ_REL);
  if (!__start_zcc_params) return;
  pthread_mutex_lock(&load_lock);
  for (zcc_param_t *p = __start_zcc_params; p < __stop_zcc_params; p++) {
    if (!__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) continue;
    if (p->kind == ZCC_PARAM_KIND_STR && p->str_value != p->str_default)
      free((char *)p->str_value); /* the strdup'd copy of the environment's value */
    p->str_value = NULL;
    __atomic_store_n(&p->loaded, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&load_lock);
}

zccResult_t zccGetParam(int index, const char **name, const char **value,
                        const char **defaultValue, const char **help) {
  zcc_param_t *p = (zcc_param_t *)zcc_param_at(index);
  if (!p)
    return zcc_error(zccInvalidArgument, "zccGetParam: index %d is past the last parameter",
                     index);
  /* Text forms of integer values live in a per-parameter static table. */
  static __thread char value_buf[64], default_buf[64];
  if (name) *name = p->name;
  if (p->kind == ZCC_PARAM_KIND_INT) {
    snprintf(value_buf, sizeof(value_buf), "%" PRId64, zcc_param_get_int(p));
    snprintf(default_buf, sizeof(default_buf), "%" PRId64, p->int_default);
    if (value) *value = value_buf;
    if (defaultValue) *defaultValue = default_buf;
  } else {
    const char *v = zcc_param_get_str(p);
    if (value) *value = v ? v : "";
    if (defaultValue) *defaultValue = p->str_default ? p->str_default : "";
  }
  if (help) *help = p->help;
  return zccSuccess;
}
