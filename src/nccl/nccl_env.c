/*
 * NCCL's environment variables read as zcc's: when ZCC_<name> is unset, the
 * NCCL_* variable with the same meaning supplies it (zcc_param_set_alias),
 * its value translated where the spelling differs. ZCC_* always wins; a
 * ZCC_* set to the empty string turns the NCCL variable off. Nothing is
 * written to the environment. NCCL_* variables without a zcc meaning are
 * named once in the log (INFO, ENV) as ignored.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "debug.h"
#include "nccl_shim.h"
#include "param.h"

extern char **environ;

/* Translate `in` into out; return 0 to leave the variable unmapped. */
typedef int (*map_fn)(const char *in, char *out, size_t cap);

typedef struct alias {
  const char *zcc;  /* ZCC_ name without the prefix */
  const char *nccl; /* the NCCL variable */
  map_fn map;       /* NULL: the value as it is */
} alias_t;

/* NCCL's levels: VERSION, WARN, INFO, TRACE, ABORT (WARN and abort on error). */
static int map_debug(const char *in, char *out, size_t cap) {
  static const char *levels[] = {"VERSION", "WARN", "INFO", "TRACE"};
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
    if (strcasecmp(in, levels[i]) == 0) return snprintf(out, cap, "%s", levels[i]) > 0;
  if (strcasecmp(in, "ABORT") == 0) return snprintf(out, cap, "WARN") > 0;
  return 0;
}

/* NCCL's subsystem names, each as zcc's (unknown ones are dropped by zcc's parser). */
static int map_subsys(const char *in, char *out, size_t cap) {
  static const struct {
    const char *nccl, *zcc;
  } names[] = {{"GRAPH", "TOPO"}, {"BOOTSTRAP", "BOOT"}, {"TUNING", "TUNING"}, {"PROXY", "NET"},
               {"NVLS", "P2P"},   {"REG", "ALLOC"},     {"INIT", "INIT"},     {"COLL", "COLL"},
               {"P2P", "P2P"},    {"SHM", "SHM"},       {"NET", "NET"},       {"ENV", "ENV"},
               {"ALLOC", "ALLOC"}, {"CALL", "CALL"},    {"ALL", "ALL"}};
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", in);
  size_t o = 0;
  char *p = buf;
  if (*p == '^' && o + 1 < cap) out[o++] = *p++;
  out[o] = '\0';
  char *save = NULL;
  for (char *tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    const char *z = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !z; i++)
      if (strcasecmp(tok, names[i].nccl) == 0) z = names[i].zcc;
    if (!z) continue;
    int n = snprintf(out + o, cap - o, "%s%s", o && out[o - 1] != '^' ? "," : "", z);
    if (n < 0 || (size_t)n >= cap - o) break;
    o += (size_t)n;
  }
  return o > 0;
}

/* Lower-case `in` if it is one of the names in `list` (NULL-terminated). */
static int map_name(const char *in, char *out, size_t cap, const char *const *list) {
  for (const char *const *l = list; *l; l++)
    if (strcasecmp(in, *l) == 0) {
      size_t i = 0;
      for (; in[i] && i + 1 < cap; i++) out[i] = (char)tolower((unsigned char)in[i]);
      out[i] = '\0';
      return 1;
    }
  return 0;
}

/* One algorithm that zcc also has (NCCL's lists and per-collective forms: unmapped). */
static int map_algo(const char *in, char *out, size_t cap) {
  static const char *const names[] = {"ring", "tree", NULL};
  return map_name(in, out, cap, names);
}

static int map_proto(const char *in, char *out, size_t cap) {
  static const char *const names[] = {"ll", "ll128", "simple", NULL};
  return map_name(in, out, cap, names);
}

static const alias_t aliases[] = {
    {"DEBUG", "NCCL_DEBUG", map_debug},
    {"DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS", map_subsys},
    {"DEBUG_FILE", "NCCL_DEBUG_FILE", NULL},
    {"SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", NULL},
    {"SOCKET_FAMILY", "NCCL_SOCKET_FAMILY", NULL},
    {"COMM_ID", "NCCL_COMM_ID", NULL},
    {"SHM_DISABLE", "NCCL_SHM_DISABLE", NULL},
    {"P2P_DISABLE", "NCCL_P2P_DISABLE", NULL},
    {"P2P_DIRECT_DISABLE", "NCCL_P2P_DIRECT_DISABLE", NULL},
    {"ALGO", "NCCL_ALGO", map_algo},
    {"PROTO", "NCCL_PROTO", map_proto},
};
#define NALIASES (sizeof(aliases) / sizeof(aliases[0]))

/* NCCL variables with nothing to do in zcc, so not worth a line in the log. */
static const char *const quiet[] = {"NCCL_NVLS_ENABLE", "NCCL_VERSION", NULL};

static const alias_t *alias_of(const char *zcc_name) {
  for (size_t i = 0; i < NALIASES; i++)
    if (strcmp(aliases[i].zcc, zcc_name) == 0) return &aliases[i];
  return NULL;
}

/* The hook zcc_param_* calls when ZCC_<name> is unset. Must not log. */
static const char *alias_hook(const char *name, char *buf, size_t cap) {
  const alias_t *a = alias_of(name);
  if (!a) return NULL;
  const char *v = getenv(a->nccl);
  if (!v) return NULL;
  if (!a->map) {
    snprintf(buf, cap, "%s", v);
    return buf;
  }
  return a->map(v, buf, cap) ? buf : NULL;
}

/* Log, once, what each NCCL_* variable set became. */
static void log_environment(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "NCCL_", 5) != 0) continue;
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    char var[128];
    snprintf(var, sizeof(var), "%.*s", (int)(eq - *e), *e);
    const char *value = eq + 1;
    const alias_t *a = NULL;
    for (size_t i = 0; i < NALIASES && !a; i++)
      if (strcmp(aliases[i].nccl, var) == 0) a = &aliases[i];
    if (!a) {
      int q = 0;
      for (const char *const *n = quiet; *n && !q; n++) q = strcmp(*n, var) == 0;
      if (!q) ZCC_INFO(ENV, "%s=%s has no zcc meaning; ignored", var, value);
      continue;
    }
    char zname[64];
    snprintf(zname, sizeof(zname), "ZCC_%s", a->zcc);
    const char *zv = getenv(zname);
    char mapped[512];
    if (zv)
      ZCC_INFO(ENV, "%s=%s ignored: %s=%s wins", var, value, zname, zv);
    else if (alias_hook(a->zcc, mapped, sizeof(mapped)))
      ZCC_INFO(ENV, "%s=%s read as %s=%s", var, value, zname, mapped);
    else
      ZCC_WARN("%s=%s has no zcc counterpart (%s takes other values); ignored", var, value,
               zname);
  }
}

int zcc_nccl_ready;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_body(void) {
  zcc_param_set_alias(alias_hook);
  int v = 0;
  zccGetVersion(&v);
  /* Shown from NCCL_DEBUG=VERSION (or ZCC_DEBUG=VERSION) up, like NCCL's own version line. */
  ZCC_LOG_(ZCC_LOG_VERSION, ZCC_INIT,
           "zcc %d.%d.%d answers as libnccl.so.2: NCCL ABI %d.%d.%d (NCCL_VERSION_CODE %d)",
           v / 10000, v / 100 % 100, v % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
           NCCL_VERSION_CODE);
  log_environment();
  zcc_nccl_fwd_load();
}

void zcc_nccl_init(void) {
  pthread_once(&init_once, init_body);
  __atomic_store_n(&zcc_nccl_ready, 1, __ATOMIC_RELEASE);
}
