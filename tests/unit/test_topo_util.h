/* Helpers shared by the topology and planner tests: fixtures by name. */
#ifndef ZCC_TEST_TOPO_UTIL_H_
#define ZCC_TEST_TOPO_UTIL_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "topo.h"

/* tests/fixtures/topo/<name>, found from this file's own path. */
static inline void fixture_path(const char *name, char *out, size_t cap) {
  const char *here = __FILE__;
  const char *slash = strrchr(here, '/');
  int dir = slash ? (int)(slash - here) : 0;
  snprintf(out, cap, "%.*s%s../fixtures/topo/%s", dir, here, slash ? "/" : "", name);
}

static inline zcc_topo_t *load_fixture(const char *name) {
  char path[1024];
  fixture_path(name, path, sizeof(path));
  zcc_topo_t *g = NULL;
  if (zcc_topo_load_file(path, &g) != zccSuccess) {
    fprintf(stderr, "loading %s failed: %s\n", path, zcc_last_error());
    return NULL;
  }
  return g;
}

static inline char *read_fixture(const char *name, size_t *len) {
  char path[1024];
  fixture_path(name, path, sizeof(path));
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = '\0';
    *len = (size_t)n;
  }
  return buf;
}

/* Node of host h with this id, or fail the test. */
#define NODE(g, h, id)                                                         \
  ({                                                                           \
    int n_ = zcc_topo_find((g), (h), (id));                                    \
    if (n_ < 0) fail_msg("no node '%s' in host %d", (id), (h));                \
    n_;                                                                        \
  })

static const char *const all_fixtures[] = {"dgx-h100.json", "h200-nv18-vm.json",
                                           "pcie-4gpu-2socket.json", "dgx-h100-x2.json",
                                           "dgx-h100-x16.json", "cpu-vm.json"};

#endif /* ZCC_TEST_TOPO_UTIL_H_ */
