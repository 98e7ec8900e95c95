/*
 * Best paths. Each host gets a working graph (parallel links summed, the
 * NVSwitches that serve the same GPUs merged into one fabric node, so
 * that a GPU's 18 NVLinks spread over 4 switches count as 18 links) and
 * the best path from every node to every other: widest first (largest
 * bottleneck bandwidth, exact), then lowest latency and fewest hops as
 * tie-breaks of the label-setting search. GPUs and NICs are endpoints
 * only: no path runs through them.
 *
 * Hosts whose nodes and links are identical (a homogeneous cluster)
 * share one table, so 1024 servers cost the memory of one.
 * Paths between hosts go NIC to NIC through a network they share.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "socket.h"
#include "topo.h"


typedef struct host_links {
  int *off; /* [nhosts + 1] */
  int *idx; /* link indices, grouped by the host of their non-network end */
} host_links_t;

static int link_host(const zcc_topo_t *g, const zcc_topo_link_t *l) {
  int h = g->nodes[l->a].host;
  return h >= 0 ? h : g->nodes[l->b].host;
}

static zccResult_t group_links(const zcc_topo_t *g, host_links_t *hl) {
  hl->off = calloc((size_t)g->nhosts + 1, sizeof(int));
  hl->idx = malloc(sizeof(int) * (size_t)(g->nlinks ? g->nlinks : 1));
  if (!hl->off || !hl->idx) {
    free(hl->off);
    free(hl->idx);
    return zcc_error(zccSystemError, "topology: out of memory for paths");
  }
  for (int l = 0; l < g->nlinks; l++) {
    int h = link_host(g, &g->links[l]);
    if (h >= 0) hl->off[h + 1]++;
  }
  for (int h = 0; h < g->nhosts; h++) hl->off[h + 1] += hl->off[h];
  int *fill = calloc((size_t)g->nhosts + 1, sizeof(int));
  if (!fill) {
    free(hl->off);
    free(hl->idx);
    return zcc_error(zccSystemError, "topology: out of memory for paths");
  }
  for (int l = 0; l < g->nlinks; l++) {
    int h = link_host(g, &g->links[l]);
    if (h >= 0) hl->idx[hl->off[h] + fill[h]++] = l;
  }
  free(fill);
  return zccSuccess;
}

/* Local index of a link end: nodes of the host >= 0, networks -1 - index. */
static int local_of(const zcc_topo_t *g, int h, int node) {
  return g->nodes[node].host == h ? node - g->hosts[h].first : -1 - node;
}

/* FNV-1a over the host's nodes and links, names of the host excluded. */
static uint64_t host_hash(const zcc_topo_t *g, const host_links_t *hl, int h) {
  const zcc_topo_host_t *host = &g->hosts[h];
  uint64_t x = ZCC_FNV_OFFSET;
  x = zcc_fnv1a(x, &host->nnodes, sizeof(int));
  for (int i = host->first; i < host->first + host->nnodes; i++) {
    const zcc_topo_node_t *n = &g->nodes[i];
    x = zcc_fnv1a(x, &n->kind, sizeof(n->kind));
    x = zcc_fnv1a(x, n->id, strlen(n->id));
    x = zcc_fnv1a(x, n->bus, strlen(n->bus));
    int ints[4] = {n->dev, n->package, n->arch, n->net};
    x = zcc_fnv1a(x, ints, sizeof(ints));
    x = zcc_fnv1a(x, &n->speed, sizeof(double));
  }
  for (int k = hl->off[h]; k < hl->off[h + 1]; k++) {
    const zcc_topo_link_t *l = &g->links[hl->idx[k]];
    int v[5] = {local_of(g, h, l->a), local_of(g, h, l->b), l->type, l->gen, l->width};
    x = zcc_fnv1a(x, v, sizeof(v));
    x = zcc_fnv1a(x, &l->bw, sizeof(double));
    x = zcc_fnv1a(x, &l->lat, sizeof(double));
  }
  return x;
}

static int same_host(const zcc_topo_t *g, const host_links_t *hl, int h1, int h2) {
  const zcc_topo_host_t *a = &g->hosts[h1], *b = &g->hosts[h2];
  if (a->nnodes != b->nnodes || hl->off[h1 + 1] - hl->off[h1] != hl->off[h2 + 1] - hl->off[h2])
    return 0;
  for (int i = 0; i < a->nnodes; i++) {
    const zcc_topo_node_t *x = &g->nodes[a->first + i], *y = &g->nodes[b->first + i];
    if (x->kind != y->kind || strcmp(x->id, y->id) || strcmp(x->bus, y->bus) ||
        strcmp(x->model, y->model) || x->dev != y->dev || x->package != y->package ||
        x->arch != y->arch || x->net != y->net || x->speed != y->speed)
      return 0;
  }
  int n = hl->off[h1 + 1] - hl->off[h1];
  for (int k = 0; k < n; k++) {
    const zcc_topo_link_t *x = &g->links[hl->idx[hl->off[h1] + k]];
    const zcc_topo_link_t *y = &g->links[hl->idx[hl->off[h2] + k]];
    if (local_of(g, h1, x->a) != local_of(g, h2, y->a) ||
        local_of(g, h1, x->b) != local_of(g, h2, y->b) || x->type != y->type ||
        x->gen != y->gen || x->width != y->width || x->bw != y->bw || x->lat != y->lat)
      return 0;
  }
  return 1;
}

/* NVSwitches joined by NVLink to the same set of GPUs become one node. */
static zccResult_t merge_switches(const zcc_topo_t *g, const host_links_t *hl, int h,
                                  int *rep) {
  const zcc_topo_host_t *host = &g->hosts[h];
  int n = host->nnodes;
  for (int i = 0; i < n; i++) rep[i] = i;
  int nsw = 0;
  for (int i = 0; i < n; i++) nsw += g->nodes[host->first + i].kind == ZCC_TOPO_NVS;
  if (nsw < 2) return zccSuccess;
  /* Bitmaps of GPU neighbours, one word per 64 local nodes. */
  int words = (n + 63) / 64;
  uint64_t *sets = calloc((size_t)n * (size_t)words, sizeof(uint64_t));
  if (!sets) return zcc_error(zccSystemError, "topology: out of memory for paths");
  for (int k = hl->off[h]; k < hl->off[h + 1]; k++) {
    const zcc_topo_link_t *l = &g->links[hl->idx[k]];
    if (l->type != ZCC_LINK_NVLINK) continue;
    int a = local_of(g, h, l->a), b = local_of(g, h, l->b);
    if (a < 0 || b < 0) continue;
    zcc_topo_kind_t ka = g->nodes[l->a].kind, kb = g->nodes[l->b].kind;
    if (ka == ZCC_TOPO_NVS && kb == ZCC_TOPO_GPU) sets[(size_t)a * words + b / 64] |= 1ull << (b % 64);
    if (kb == ZCC_TOPO_NVS && ka == ZCC_TOPO_GPU) sets[(size_t)b * words + a / 64] |= 1ull << (a % 64);
  }
  for (int i = 0; i < n; i++) {
    if (g->nodes[host->first + i].kind != ZCC_TOPO_NVS) continue;
    for (int j = 0; j < i; j++) {
      if (g->nodes[host->first + j].kind != ZCC_TOPO_NVS || rep[j] != j) continue;
      if (memcmp(&sets[(size_t)i * words], &sets[(size_t)j * words],
                 sizeof(uint64_t) * (size_t)words) == 0) {
        rep[i] = j;
        break;
      }
    }
  }
  free(sets);
  return zccSuccess;
}

static zccResult_t build_edges(const zcc_topo_t *g, const host_links_t *hl, int h,
                               zcc_topo_table_t *t) {
  int n = t->nnodes;
  const int first = g->hosts[h].first;
  t->edge_of = malloc(sizeof(int16_t) * (size_t)(n ? n * n : 1));
  int cap = hl->off[h + 1] - hl->off[h];
  t->edges = malloc(sizeof(zcc_topo_edge_t) * (size_t)(cap ? cap : 1));
  if (!t->edge_of || !t->edges) return zcc_error(zccSystemError, "topology: out of memory for paths");
  memset(t->edge_of, 0xff, sizeof(int16_t) * (size_t)n * (size_t)n);
  for (int k = hl->off[h]; k < hl->off[h + 1]; k++) {
    const zcc_topo_link_t *l = &g->links[hl->idx[k]];
    if (l->type == ZCC_LINK_NET) continue;
    /* An NVSwitch's PCIe port is for management: NVLink traffic cannot leave by it. */
    if (l->type == ZCC_LINK_PCIE &&
        (g->nodes[l->a].kind == ZCC_TOPO_NVS || g->nodes[l->b].kind == ZCC_TOPO_NVS))
      continue;
    int u = t->rep[l->a - first], v = t->rep[l->b - first];
    if (u == v) continue;
    if (u > v) {
      int s = u;
      u = v;
      v = s;
    }
    int e = t->edge_of[(size_t)u * n + v];
    if (e >= 0) {
      zcc_topo_edge_t *x = &t->edges[e];
      if (x->type == l->type) {
        x->bw += l->bw;
        x->width += l->width;
        if (l->lat < x->lat) x->lat = l->lat;
      } else if (l->bw > x->bw) {
        x->type = l->type;
        x->bw = l->bw;
        x->width = l->width;
        x->lat = l->lat;
      }
      continue;
    }
    if (t->nedges >= INT16_MAX)
      return zcc_error(zccInvalidArgument, "topology: host '%s' has more than %d links",
                       g->hosts[h].name, INT16_MAX);
    e = t->nedges++;
    t->edges[e] = (zcc_topo_edge_t){.u = u, .v = v, .type = l->type, .width = l->width,
                                    .bw = l->bw, .lat = l->lat};
    t->edge_of[(size_t)u * n + v] = (int16_t)e;
    t->edge_of[(size_t)v * n + u] = (int16_t)e;
  }
  return zccSuccess;
}

/* Is (bw1, lat1, hops1) a better label than (bw2, lat2, hops2)? */
static int better(double bw1, double lat1, int hops1, double bw2, double lat2, int hops2) {
  if (bw1 > bw2 * (1 + 1e-9)) return 1;
  if (bw1 < bw2 * (1 - 1e-9)) return 0;
  if (lat1 < lat2 - 1e-9) return 1;
  if (lat1 > lat2 + 1e-9) return 0;
  return hops1 < hops2;
}

static zcc_path_class_t classify(const zcc_topo_t *g, int first, const zcc_topo_table_t *t,
                                 int s, int d) {
  if (s == d) return ZCC_PATH_SELF;
  const zcc_topo_path_t *row = &t->paths[(size_t)s * t->nnodes];
  if (row[d].bw <= 0) return ZCC_PATH_NONE;
  int all_nvlink = 1, via_nvs = 0, cpu = 0, cross = 0;
  for (int v = d; v != s;) {
    int u = row[v].prev;
    const zcc_topo_edge_t *e = &t->edges[t->edge_of[(size_t)u * t->nnodes + v]];
    if (e->type != ZCC_LINK_NVLINK) all_nvlink = 0;
    const zcc_topo_node_t *nu = &g->nodes[first + u], *nv = &g->nodes[first + v];
    if (e->type == ZCC_LINK_SMP && nu->package != nv->package) cross = 1;
    if (nu->kind == ZCC_TOPO_CPU || nv->kind == ZCC_TOPO_CPU) cpu = 1;
    if (u != s && nu->kind == ZCC_TOPO_NVS) via_nvs = 1;
    v = u;
  }
  if (all_nvlink) return via_nvs ? ZCC_PATH_NVS : ZCC_PATH_NVL;
  if (cross) return ZCC_PATH_SYS;
  if (cpu) return ZCC_PATH_PHB;
  return ZCC_PATH_PIX;
}

static zccResult_t build_paths(const zcc_topo_t *g, int h, zcc_topo_table_t *t) {
  int n = t->nnodes, first = g->hosts[h].first;
  t->paths = calloc((size_t)(n ? n * n : 1), sizeof(zcc_topo_path_t));
  /* Adjacency (CSR) of the working graph. */
  int *off = calloc((size_t)n + 1, sizeof(int));
  int *adj = malloc(sizeof(int) * (size_t)(2 * t->nedges + 1));
  char *done = malloc((size_t)n + 1);
  double *bw = malloc(sizeof(double) * ((size_t)n + 1)), *lat = malloc(sizeof(double) * ((size_t)n + 1));
  int *hops = malloc(sizeof(int) * ((size_t)n + 1)), *prev = malloc(sizeof(int) * ((size_t)n + 1));
  zccResult_t res = zccSuccess;
  if (!t->paths || !off || !adj || !done || !bw || !lat || !hops || !prev) {
    res = zcc_error(zccSystemError, "topology: out of memory for paths");
    goto out;
  }
  for (int e = 0; e < t->nedges; e++) {
    off[t->edges[e].u + 1]++;
    off[t->edges[e].v + 1]++;
  }
  for (int i = 0; i < n; i++) off[i + 1] += off[i];
  {
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!fill) {
      res = zcc_error(zccSystemError, "topology: out of memory for paths");
      goto out;
    }
    for (int e = 0; e < t->nedges; e++) {
      adj[off[t->edges[e].u] + fill[t->edges[e].u]++] = e;
      adj[off[t->edges[e].v] + fill[t->edges[e].v]++] = e;
    }
    free(fill);
  }
  for (int s = 0; s < n; s++) {
    zcc_topo_path_t *row = &t->paths[(size_t)s * n];
    if (t->rep[s] != s) continue; /* merged switch: copied from its representative below */
    for (int i = 0; i < n; i++) {
      bw[i] = 0;
      lat[i] = INFINITY;
      hops[i] = 0;
      prev[i] = -1;
      done[i] = 0;
    }
    bw[s] = INFINITY;
    lat[s] = 0;
    for (;;) {
      int u = -1;
      for (int i = 0; i < n; i++)
        if (!done[i] && bw[i] > 0 && (u < 0 || better(bw[i], lat[i], hops[i], bw[u], lat[u], hops[u])))
          u = i;
      if (u < 0) break;
      done[u] = 1;
      zcc_topo_kind_t k = g->nodes[first + u].kind;
      if (u != s && (k == ZCC_TOPO_GPU || k == ZCC_TOPO_NIC)) continue;
      for (int a = off[u]; a < off[u + 1]; a++) {
        const zcc_topo_edge_t *e = &t->edges[adj[a]];
        int v = e->u == u ? e->v : e->u;
        if (done[v]) continue;
        double nb = fmin(bw[u], e->bw), nl = lat[u] + e->lat;
        if (better(nb, nl, hops[u] + 1, bw[v], lat[v], hops[v])) {
          bw[v] = nb;
          lat[v] = nl;
          hops[v] = hops[u] + 1;
          prev[v] = u;
        }
      }
    }
    for (int d = 0; d < n; d++) {
      row[d].bw = d == s ? (float)ZCC_TOPO_MAX_BW : (float)bw[d];
      row[d].lat = d == s || bw[d] <= 0 ? 0.0f : (float)lat[d];
      row[d].prev = (int16_t)prev[d];
      row[d].hops = (uint8_t)(hops[d] > 255 ? 255 : hops[d]);
    }
  }
  for (int s = 0; s < n; s++) {
    if (t->rep[s] == s) continue;
    memcpy(&t->paths[(size_t)s * n], &t->paths[(size_t)t->rep[s] * n],
           sizeof(zcc_topo_path_t) * (size_t)n);
  }
  /* Targets that are merged switches read their representative's column. */
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (t->rep[d] != d && d != s) t->paths[(size_t)s * n + d] = t->paths[(size_t)s * n + t->rep[d]];
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++) {
      int rs = t->rep[s], rd = t->rep[d];
      t->paths[(size_t)s * n + d].cls =
          (uint8_t)(s == d ? ZCC_PATH_SELF : classify(g, first, t, rs, rd));
    }
out:
  free(off);
  free(adj);
  free(done);
  free(bw);
  free(lat);
  free(hops);
  free(prev);
  return res;
}

zccResult_t zcc_topo_finalize(zcc_topo_t *g) {
  if (g->finalized) return zccSuccess;
  for (int i = 0; i < g->nnodes; i++) {
    const zcc_topo_node_t *x = &g->nodes[i];
    if (x->kind == ZCC_TOPO_NIC && x->net >= 0 &&
        (x->net >= g->nnodes || g->nodes[x->net].kind != ZCC_TOPO_NET))
      return zcc_error(zccInvalidArgument, "topology: nic '%s' names a network that is not one",
                       x->id);
  }
  host_links_t hl;
  ZCC_CHECK(group_links(g, &hl));
  zccResult_t res = zccSuccess;
  uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)(g->nhosts ? g->nhosts : 1));
  int *owner = malloc(sizeof(int) * (size_t)(g->nhosts ? g->nhosts : 1));
  g->tables = calloc((size_t)(g->nhosts ? g->nhosts : 1), sizeof(zcc_topo_table_t));
  if (!hashes || !owner || !g->tables) {
    res = zcc_error(zccSystemError, "topology: out of memory for paths");
    goto out;
  }
  double work = 0;
  for (int h = 0; h < g->nhosts; h++) {
    hashes[h] = host_hash(g, &hl, h);
    int found = -1;
    for (int t = 0; t < g->ntables && found < 0; t++)
      if (hashes[owner[t]] == hashes[h] && same_host(g, &hl, owner[t], h)) found = t;
    if (found >= 0) {
      g->hosts[h].table = found;
      g->tables[found].refs++;
      continue;
    }
    /* Path search is cubic in a host's size: refuse what would not finish. */
    double n = g->hosts[h].nnodes;
    work += n * n * n;
    if (work > 4e9) {
      res = zcc_error(zccInvalidArgument,
                      "topology: %d distinct hosts up to '%s' (%d nodes) are too large "
                      "to compute paths for", g->ntables + 1, g->hosts[h].name,
                      g->hosts[h].nnodes);
      goto out;
    }
    int ti = g->ntables++;
    owner[ti] = h;
    zcc_topo_table_t *t = &g->tables[ti];
    t->nnodes = g->hosts[h].nnodes;
    t->refs = 1;
    t->rep = malloc(sizeof(int) * (size_t)(t->nnodes ? t->nnodes : 1));
    if (!t->rep) {
      res = zcc_error(zccSystemError, "topology: out of memory for paths");
      goto out;
    }
    ZCC_CHECK_GOTO(merge_switches(g, &hl, h, t->rep), res, out);
    ZCC_CHECK_GOTO(build_edges(g, &hl, h, t), res, out);
    ZCC_CHECK_GOTO(build_paths(g, h, t), res, out);
    g->hosts[h].table = ti;
  }
  g->finalized = 1;
  ZCC_INFO(TOPO, "topology: %d hosts, %d nodes, %d links, %d distinct path tables",
           g->nhosts, g->nnodes, g->nlinks, g->ntables);
out:
  free(hashes);
  free(owner);
  free(hl.off);
  free(hl.idx);
  return res;
}

const zcc_topo_path_t *zcc_topo_path(const zcc_topo_t *g, int a, int b) {
  if (!g->finalized || a < 0 || b < 0 || a >= g->nnodes || b >= g->nnodes) return NULL;
  int h = g->nodes[a].host;
  if (h < 0 || h != g->nodes[b].host) return NULL;
  const zcc_topo_table_t *t = &g->tables[g->hosts[h].table];
  int first = g->hosts[h].first;
  return &t->paths[(size_t)(a - first) * t->nnodes + (b - first)];
}

/* GB/s each direction between a NIC and its network (0: none). */
static double nic_bw(const zcc_topo_t *g, int nic) {
  const zcc_topo_node_t *n = &g->nodes[nic];
  if (n->kind != ZCC_TOPO_NIC || n->net < 0) return 0;
  return n->speed > 0 ? n->speed / 8.0 : 1.25;
}

int zcc_topo_best_nic(const zcc_topo_t *g, int a) {
  int h = g->nodes[a].host;
  if (h < 0 || !g->finalized) return -1;
  int best = -1;
  double bbw = 0, blat = 0;
  const zcc_topo_host_t *host = &g->hosts[h];
  for (int i = host->first; i < host->first + host->nnodes; i++) {
    if (g->nodes[i].kind != ZCC_TOPO_NIC || g->nodes[i].net < 0) continue;
    const zcc_topo_path_t *p = zcc_topo_path(g, a, i);
    double bw = fmin(p->bw, nic_bw(g, i));
    if (bw <= 0) continue;
    if (best < 0 || better(bw, p->lat, p->hops, bbw, blat, 0)) {
      best = i;
      bbw = bw;
      blat = p->lat;
    }
  }
  return best;
}

zccResult_t zcc_topo_route(const zcc_topo_t *g, int a, int b, zcc_topo_route_t *out) {
  if (!g->finalized)
    return zcc_error(zccInternalError, "topology: route asked before finalize");
  if (a < 0 || b < 0 || a >= g->nnodes || b >= g->nnodes)
    return zcc_error(zccInvalidArgument, "topology: route between nodes %d and %d: no such node",
                     a, b);
  zcc_topo_route_t r = {.bw = 0, .lat = 0, .cls = ZCC_PATH_NONE, .hops = 0, .nic_a = -1, .nic_b = -1};
  int ha = g->nodes[a].host, hb = g->nodes[b].host;
  if (ha < 0 || hb < 0) {
    *out = r;
    return zccSuccess;
  }
  if (ha == hb) {
    const zcc_topo_path_t *p = zcc_topo_path(g, a, b);
    r.bw = p->bw;
    r.lat = p->lat;
    r.cls = p->cls;
    r.hops = p->hops;
    *out = r;
    return zccSuccess;
  }
  const zcc_topo_host_t *A = &g->hosts[ha], *B = &g->hosts[hb];
  for (int i = A->first; i < A->first + A->nnodes; i++) {
    if (g->nodes[i].kind != ZCC_TOPO_NIC || g->nodes[i].net < 0) continue;
    const zcc_topo_path_t *pa = zcc_topo_path(g, a, i);
    if (pa->bw <= 0) continue;
    for (int j = B->first; j < B->first + B->nnodes; j++) {
      if (g->nodes[j].kind != ZCC_TOPO_NIC || g->nodes[j].net != g->nodes[i].net) continue;
      const zcc_topo_path_t *pb = zcc_topo_path(g, j, b);
      if (pb->bw <= 0) continue;
      double bw = fmin(fmin(pa->bw, pb->bw), fmin(nic_bw(g, i), nic_bw(g, j)));
      double lat = pa->lat + pb->lat + 2 * zcc_topo_link_lat(ZCC_LINK_NET);
      int hops = pa->hops + pb->hops + 2;
      if (r.nic_a < 0 || better(bw, lat, hops, r.bw, r.lat, r.hops)) {
        r.bw = bw;
        r.lat = lat;
        r.hops = hops;
        r.nic_a = i;
        r.nic_b = j;
        r.cls = ZCC_PATH_NET;
      }
    }
  }
  *out = r;
  return zccSuccess;
}

int zcc_topo_path_nodes(const zcc_topo_t *g, int a, int b, int *nodes, int cap) {
  const zcc_topo_path_t *p = zcc_topo_path(g, a, b);
  if (!p || p->bw <= 0) return 0;
  int h = g->nodes[a].host, first = g->hosts[h].first;
  const zcc_topo_table_t *t = &g->tables[g->hosts[h].table];
  int s = t->rep[a - first], d = t->rep[b - first];
  int count = 0, tmp[256];
  const zcc_topo_path_t *row = &t->paths[(size_t)s * t->nnodes];
  for (int v = d; v != s && count < 255; v = row[v].prev) tmp[count++] = v;
  tmp[count++] = s;
  int n = 0;
  for (int i = count - 1; i >= 0 && n < cap; i--) nodes[n++] = first + tmp[i];
  if (n > 0) nodes[0] = a;
  if (n == count && n > 0) nodes[n - 1] = b;
  return n;
}

size_t zcc_topo_memory(const zcc_topo_t *g) {
  size_t m = sizeof(*g) + (size_t)g->cap_nodes * sizeof(zcc_topo_node_t) +
             (size_t)g->cap_links * sizeof(zcc_topo_link_t) +
             (size_t)g->cap_hosts * sizeof(zcc_topo_host_t);
  for (int i = 0; i < g->ntables; i++) {
    const zcc_topo_table_t *t = &g->tables[i];
    size_t n = (size_t)t->nnodes;
    m += sizeof(*t) + n * sizeof(int) + (size_t)t->nedges * sizeof(zcc_topo_edge_t) +
         n * n * (sizeof(int16_t) + sizeof(zcc_topo_path_t));
  }
  return m;
}
