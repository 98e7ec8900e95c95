/*
 * A communicator's plan: its ranks placed on the graph of its machines, and
 * the one description of that plan (channels, rings, trees) that
 * communicators log and zcc_topo prints.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "debug.h"
#include "planner.h"

/* The GPU of graph host `host` whose PCI bus id is `bus`, or -1. */
static int gpu_by_bus(const zcc_topo_t *g, int host, const char *bus) {
  const zcc_topo_host_t *h = &g->hosts[host];
  for (int i = h->first; i < h->first + h->nnodes; i++)
    if (g->nodes[i].kind == ZCC_TOPO_GPU && strcasecmp(g->nodes[i].bus, bus) == 0) return i;
  return -1;
}

/* The k-th node of `kind` on graph host `host` (round-robin), or -1. */
static int nth_of(const zcc_topo_t *g, int host, zcc_topo_kind_t kind, int k) {
  int n = zcc_topo_count(g, host, kind);
  if (n == 0) return -1;
  k %= n;
  const zcc_topo_host_t *h = &g->hosts[host];
  for (int i = h->first; i < h->first + h->nnodes; i++)
    if (g->nodes[i].kind == kind && k-- == 0) return i;
  return -1;
}

zccResult_t zcc_planner_for_comm(const zcc_topo_t *local, int nranks, int nnodes,
                                 const int *rank_host, const char *const *rank_bus,
                                 zcc_topo_t **own, zcc_planner_t **out) {
  *own = NULL;
  *out = NULL;
  if (!local || nranks < 1 || nnodes < 1 || nnodes > nranks || !rank_host)
    return zcc_error(zccInvalidArgument, "planner: %d ranks on %d hosts", nranks, nnodes);
  const zcc_topo_t *g = local;
  if (local->nhosts < nnodes) {
    if (local->nhosts != 1)
      return zcc_error(zccInvalidArgument,
                       "planner: the graph has %d hosts, the communicator spans %d",
                       local->nhosts, nnodes);
    /* Each rank sees its own machine: the others are taken to be alike. */
    zcc_topo_t *rep = NULL;
    ZCC_CHECK(zcc_topo_replicate(local, nnodes, &rep));
    zccResult_t res = zcc_topo_finalize(rep);
    if (res != zccSuccess) {
      zcc_topo_free(rep);
      return res;
    }
    *own = rep;
    g = rep;
  }
  int *node = malloc(sizeof(int) * (size_t)nranks);
  int *seen = calloc((size_t)nnodes, sizeof(int));
  zccResult_t res = zccSuccess;
  if (!node || !seen) {
    res = zcc_error(zccSystemError, "planner: out of memory");
    goto done;
  }
  for (int r = 0; r < nranks; r++) {
    int h = rank_host[r];
    if (h < 0 || h >= nnodes) {
      res = zcc_error(zccInvalidArgument, "planner: rank %d on host %d of %d", r, h, nnodes);
      goto done;
    }
    int k = seen[h]++;
    if (!rank_bus) {
      node[r] = nth_of(g, h, ZCC_TOPO_CPU, k);
    } else {
      node[r] = gpu_by_bus(g, h, rank_bus[r]);
      if (node[r] < 0) node[r] = nth_of(g, h, ZCC_TOPO_GPU, k); /* bus ids hidden (VMs) */
    }
    if (node[r] < 0) {
      res = zcc_error(zccInvalidArgument, "planner: host '%s' of the graph has no %s for rank %d",
                      g->hosts[h].name, rank_bus ? "gpu" : "cpu", r);
      goto done;
    }
  }
  res = zcc_planner_build(g, nranks, node, out);
done:
  free(node);
  free(seen);
  if (res != zccSuccess) {
    zcc_topo_free(*own);
    *own = NULL;
  }
  return res;
}

static void emitf(void (*emit)(void *, const char *), void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emitf(void (*emit)(void *, const char *), void *ctx, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  emit(ctx, line);
}

zccResult_t zcc_planner_describe(const zcc_planner_t *p, void (*emit)(void *, const char *),
                                 void *ctx) {
  const zcc_topo_t *g = p->g;
  emitf(emit, ctx, "plan for %d ranks on %d host%s (%s ranks)", p->nranks, p->nnodes,
        p->nnodes == 1 ? "" : "s", p->cpu_ranks ? "cpu" : "gpu");
  emitf(emit, ctx, "rings: %d channel%s, %.1f GB/s in all, worst step %s", p->nchannels,
        p->nchannels == 1 ? "" : "s", p->ring_bw, zcc_topo_class_name(p->ring_class));
  size_t cap = (size_t)p->nranks * 48 + 64;
  char *line = malloc(cap);
  if (!line) return zcc_error(zccSystemError, "planner: out of memory");
  int show = p->nranks <= 256 ? p->nchannels : 2;
  for (int c = 0; c < show; c++) {
    size_t o = (size_t)snprintf(line, cap, "  ring %2d:", c);
    for (int i = 0; i < p->nranks && o < cap; i++) {
      int r = p->rings[c].order[i], h = p->rank_host[r];
      if (p->nnodes > 1 && i == p->host_off[h])
        o += (size_t)snprintf(line + o, cap - o, " [%s in %s]", g->hosts[p->host_of[h]].name,
                              g->nodes[p->rings[c].nic_in[h]].id);
      if (o < cap) o += (size_t)snprintf(line + o, cap - o, " %d", r);
      if (p->nnodes > 1 && i == p->host_off[h + 1] - 1 && o < cap)
        o += (size_t)snprintf(line + o, cap - o, " [out %s]", g->nodes[p->rings[c].nic_out[h]].id);
    }
    emit(ctx, line);
  }
  if (show < p->nchannels) emitf(emit, ctx, "  ... %d more", p->nchannels - show);
  for (int t = 0; t < 2; t++) {
    const zcc_tree_t *tr = &p->trees[t];
    size_t o = (size_t)snprintf(line, cap, "tree %d: root %s, depth %d over hosts", t,
                                g->hosts[p->host_of[tr->root]].name, tr->depth);
    if (p->nnodes > 1 && p->nnodes <= 64) {
      o += (size_t)snprintf(line + o, o < cap ? cap - o : 0, "; parents:");
      for (int h = 0; h < p->nnodes && o < cap; h++)
        o += (size_t)snprintf(line + o, cap - o, " %d", tr->parent[h]);
    }
    emit(ctx, line);
  }
  free(line);
  emitf(emit, ctx, "  within each host, a chain in ring order; tree bandwidth %.1f GB/s",
        p->tree_bw);
  if (p->nnodes > 1)
    emitf(emit, ctx, "all-pairs (oneshot/twoshot): not possible, the ranks span %d hosts",
          p->nnodes);
  else
    emitf(emit, ctx, "all-pairs (oneshot/twoshot): %s (worst pair %s)",
          p->island ? "possible" : "not possible", zcc_topo_class_name(p->island_class));
  return zccSuccess;
}

zccResult_t zcc_planner_ring_links(const zcc_planner_t *p, int channel,
                                   void (*emit)(void *, const char *), void *ctx) {
  if (channel < 0 || channel >= p->nchannels)
    return zcc_error(zccInvalidArgument, "planner: channel %d of %d", channel, p->nchannels);
  const zcc_topo_t *g = p->g;
  int show = p->nranks <= 64 ? p->nranks : 64;
  for (int i = 0; i < show; i++) {
    int a = p->rings[channel].order[i], b = p->rings[channel].order[(i + 1) % p->nranks];
    int na = p->rank_node[a], nb = p->rank_node[b];
    char line[512];
    size_t o;
    if (na == nb) {
      emitf(emit, ctx, "  rank %d -> %d: the same %s (%s), no link", a, b,
            zcc_topo_kind_name(g->nodes[na].kind), g->nodes[na].id);
      continue;
    }
    zcc_topo_route_t r;
    ZCC_CHECK(zcc_topo_route(g, na, nb, &r));
    o = (size_t)snprintf(line, sizeof(line), "  rank %d -> %d: %-12s %7.1f GB/s %6.2f us, %d hop%s",
                         a, b, zcc_topo_class_name(r.cls), r.bw, r.lat, r.hops,
                         r.hops == 1 ? "" : "s");
    if (g->nodes[na].host == g->nodes[nb].host) {
      int via[64], n = zcc_topo_path_nodes(g, na, nb, via, 64);
      o += (size_t)snprintf(line + o, o < sizeof(line) ? sizeof(line) - o : 0, ":");
      for (int k = 0; k < n && o < sizeof(line); k++)
        o += (size_t)snprintf(line + o, sizeof(line) - o, " %s", g->nodes[via[k]].id);
    } else if (r.nic_a >= 0 && r.nic_b >= 0) {
      snprintf(line + o, o < sizeof(line) ? sizeof(line) - o : 0, ": out by %s of %s, in by %s of %s",
               g->nodes[r.nic_a].id, g->hosts[g->nodes[na].host].name, g->nodes[r.nic_b].id,
               g->hosts[g->nodes[nb].host].name);
    }
    emit(ctx, line);
  }
  if (show < p->nranks) emitf(emit, ctx, "  ... %d more steps", p->nranks - show);
  return zccSuccess;
}
