/*
 * The graph a communicator plans on: loaded from ZCC_TOPO_FILE, or
 * detected on this machine and then, with ZCC_TOPO_DUMP_FILE, written out
 * so that it can be replayed elsewhere.
 */
#include <stdio.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "topo.h"

ZCC_PARAM_STR(topo_file, "TOPO_FILE", NULL,
              "use the topology saved in this JSON file instead of detecting it")
ZCC_PARAM_STR(topo_dump_file, "TOPO_DUMP_FILE", NULL,
              "write the detected topology to this JSON file")

zccResult_t zcc_topo_for_comm(zcc_topo_t **out) {
  const char *file = zcc_param_topo_file();
  zcc_topo_t *g = NULL;
  if (file && *file) {
    zccResult_t res = zcc_topo_load_file(file, &g);
    if (res != zccSuccess) {
      char msg[900];
      snprintf(msg, sizeof(msg), "%s", zcc_last_error());
      return zcc_error(res, "ZCC_TOPO_FILE: %s", msg);
    }
    ZCC_INFO(TOPO, "topology loaded from %s: %d hosts, %d nodes", file, g->nhosts, g->nnodes);
  } else {
    ZCC_CHECK(zcc_topo_detect(&g));
  }
  const char *dump = zcc_param_topo_dump_file();
  if (dump && *dump) {
    zccResult_t res = zcc_topo_dump_file(g, dump);
    if (res != zccSuccess) {
      zcc_topo_free(g);
      return res;
    }
  }
  *out = g;
  return zccSuccess;
}

int zcc_topo_requested(void) {
  const char *a = zcc_param_topo_file(), *b = zcc_param_topo_dump_file();
  return (a && *a) || (b && *b);
}
