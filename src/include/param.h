/*
 * ZCC_* parameters, declared where they are used:
 *
 *   ZCC_PARAM_INT(timeout_ms, "TIMEOUT", 300000, "collective timeout in ms");
 *   ... zcc_param_timeout_ms() ...
 *
 * reads ZCC_TIMEOUT once per process (later changes to the environment are
 * not seen; zcc_param_reload re-reads, for tests).
 * Each declaration lands in the "zcc_params" section, so that
 * zccGetParam can list them all without start-up constructors.
 */
#ifndef ZCC_PARAM_H_
#define ZCC_PARAM_H_

#include <stddef.h>
#include <stdint.h>

typedef enum { ZCC_PARAM_KIND_INT = 0, ZCC_PARAM_KIND_STR = 1 } zcc_param_kind_t;

typedef struct zcc_param {
  const char *name; /* without the ZCC_ prefix */
  zcc_param_kind_t kind;
  int64_t int_default;
  const char *str_default;
  const char *help;
  /* Filled on first read. */
  int loaded;
  int64_t int_value;
  const char *str_value;
} zcc_param_t;

/* Parse ZCC_<name> as an integer (decimal, 0x hex, k/m/g suffixes) or default. */
int64_t zcc_param_get_int(zcc_param_t *p);
/* ZCC_<name> or the default (may be NULL). */
const char *zcc_param_get_str(zcc_param_t *p);
/* Iterate the declared parameters: NULL past the end. */
const zcc_param_t *zcc_param_at(int index);
/* Forget every cached value so that the next read sees the environment. */
void zcc_param_reload(void);
/* How many times zcc_param_reload ran: what caches of parameter-made choices key on. */
unsigned zcc_param_generation(void);

/*
 * A second source of values, asked when ZCC_<name> is unset: writes the
 * value for `name` (without ZCC_) into buf and returns buf, or returns NULL.
 * The NCCL shim installs one that reads NCCL_* variables. It must not log.
 */
typedef const char *(*zcc_param_alias_fn)(const char *name, char *buf, size_t cap);
void zcc_param_set_alias(zcc_param_alias_fn fn);

#define ZCC_PARAM_SECTION_ __attribute__((used, section("zcc_params"), aligned(8)))

#define ZCC_PARAM_INT(id, env, def, helptext)                                  \
  static zcc_param_t zcc_param_decl_##id ZCC_PARAM_SECTION_ = {               \
      env, ZCC_PARAM_KIND_INT, (def), 0, helptext, 0, 0, 0};                            \
  static inline int64_t zcc_param_##id(void) {                                 \
    return zcc_param_get_int(&zcc_param_decl_##id);                            \
  }

#define ZCC_PARAM_STR(id, env, def, helptext)                                  \
  static zcc_param_t zcc_param_decl_##id ZCC_PARAM_SECTION_ = {               \
      env, ZCC_PARAM_KIND_STR, 0, (def), helptext, 0, 0, 0};                            \
  static inline const char *zcc_param_##id(void) {                             \
    return zcc_param_get_str(&zcc_param_decl_##id);                            \
  }

#endif /* ZCC_PARAM_H_ */
