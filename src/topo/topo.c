/*
 * The graph a communicator plans on: loaded from ZCC_TOPO_FILE, or
 * detected on this machine and then, with ZCC_TOPO_DUMP_FILE, written out
 * so that it can be replayed elsewhere.
 */
#include <pthread.h>
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

/*
 * The machine does not change while the process runs: communicators share
 * one graph, made on first use and kept for the life of the process.
 * A reload of the parameters (tests) makes the next acquire load afresh.
 */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static zcc_topo_t *shared_graph;
static int shared_refs;
static unsigned shared_gen;
static zcc_topo_t *retired; /* a stale graph still held by communicators */
static int retired_refs;

zccResult_t zcc_topo_acquire(const zcc_topo_t **out) {
  zccResult_t res = zccSuccess;
  pthread_mutex_lock(&shared_lock);
  unsigned gen = zcc_param_generation();
  if (shared_graph && shared_gen != gen) {
    if (shared_refs == 0) {
      zcc_topo_free(shared_graph);
    } else if (!retired) {
      retired = shared_graph;
      retired_refs = shared_refs;
    } else {
      goto keep; /* two generations held at once (tests only): keep the older graph */
    }
    shared_graph = NULL;
    shared_refs = 0;
  }
  if (!shared_graph) {
    res = zcc_topo_for_comm(&shared_graph);
    if (res != zccSuccess) {
      shared_graph = NULL;
      goto out;
    }
    shared_gen = gen;
  }
keep:
  shared_refs++;
  *out = shared_graph;
out:
  pthread_mutex_unlock(&shared_lock);
  return res;
}

void zcc_topo_release(const zcc_topo_t *g) {
  if (!g) return;
  pthread_mutex_lock(&shared_lock);
  if (g == shared_graph) {
    shared_refs--;
  } else if (g == retired && --retired_refs == 0) {
    zcc_topo_free(retired);
    retired = NULL;
  }
  pthread_mutex_unlock(&shared_lock);
}
