/*
 * Rings. Within a host the ring order is searched exhaustively up to 8
 * ranks (by locality beyond): the order whose most loaded link (load over
 * bandwidth, every step routed on its best path) is lightest, then the one
 * that crosses the socket link the fewest times, then the lowest latency.
 * Across hosts each ring enters a host through a NIC and leaves it through
 * a NIC, each next to the GPU that uses it, rails alternating so that the
 * NIC a host leaves by faces the one the next host is entered by; channel
 * c starts on rail c, so the channels spread over every NIC. Channels are
 * added while they raise the total bandwidth (each drives at most
 * ZCC_PLANNER_GPU_CHANNEL_BW).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "param.h"
#include "planner.h"

/* Copy bandwidth of one host rank through shared memory, GB/s (cost.c's
 * measurement of the ring on this VM's shm transport). */
#define HOST_SHM_BW 3.45
#define EXHAUSTIVE_MAX 8

/* ---- link loads ---- */

struct zcc_flow {
  const zcc_planner_t *p;
  int nslots;
  int *edge_base; /* [nnodes]: 2 slots per working edge of the host */
  int *nic_base;  /* [nnodes]: 2 slots (send, receive) per local node */
  int rank_base;  /* 2 slots per rank: host memory of CPU ranks */
  double *load, *cap;
};

static const zcc_topo_table_t *table_of(const zcc_planner_t *p, int h) {
  return &p->g->tables[p->g->hosts[p->host_of[h]].table];
}

zccResult_t zcc_planner_flow_new(const zcc_planner_t *p, zcc_flow_t **out) {
  zcc_flow_t *f = calloc(1, sizeof(*f));
  if (!f) return zcc_error(zccSystemError, "planner: out of memory");
  f->p = p;
  f->edge_base = malloc(sizeof(int) * (size_t)p->nnodes);
  f->nic_base = malloc(sizeof(int) * (size_t)p->nnodes);
  if (!f->edge_base || !f->nic_base) goto oom;
  int n = 0;
  for (int h = 0; h < p->nnodes; h++) {
    const zcc_topo_table_t *t = table_of(p, h);
    f->edge_base[h] = n;
    n += 2 * t->nedges;
    f->nic_base[h] = n;
    n += 2 * t->nnodes;
  }
  f->rank_base = n;
  n += 2 * p->nranks;
  f->nslots = n;
  f->load = calloc((size_t)n + 1, sizeof(double));
  f->cap = calloc((size_t)n + 1, sizeof(double));
  if (!f->load || !f->cap) goto oom;
  const zcc_topo_t *g = p->g;
  for (int h = 0; h < p->nnodes; h++) {
    const zcc_topo_table_t *t = table_of(p, h);
    const zcc_topo_host_t *host = &g->hosts[p->host_of[h]];
    for (int e = 0; e < t->nedges; e++)
      f->cap[f->edge_base[h] + 2 * e] = f->cap[f->edge_base[h] + 2 * e + 1] = t->edges[e].bw;
    for (int i = 0; i < t->nnodes; i++) {
      const zcc_topo_node_t *nd = &g->nodes[host->first + i];
      double bw = nd->kind == ZCC_TOPO_NIC && nd->net >= 0
                      ? (nd->speed > 0 ? nd->speed / 8.0 : 1.25) : 0;
      f->cap[f->nic_base[h] + 2 * i] = f->cap[f->nic_base[h] + 2 * i + 1] = bw;
    }
  }
  for (int r = 0; r < p->nranks; r++)
    f->cap[f->rank_base + 2 * r] = f->cap[f->rank_base + 2 * r + 1] =
        p->cpu_ranks ? HOST_SHM_BW : 0;
  *out = f;
  return zccSuccess;
oom:
  zcc_planner_flow_free(f);
  return zcc_error(zccSystemError, "planner: out of memory");
}

void zcc_planner_flow_free(zcc_flow_t *f) {
  if (!f) return;
  free(f->edge_base);
  free(f->nic_base);
  free(f->load);
  free(f->cap);
  free(f);
}

void zcc_planner_flow_reset(zcc_flow_t *f) {
  memset(f->load, 0, sizeof(double) * (size_t)f->nslots);
}

/* Along the best path from node x to node y of comm host h. */
static void walk(zcc_flow_t *f, int h, int x, int y, double amount) {
  const zcc_planner_t *p = f->p;
  const zcc_topo_table_t *t = table_of(p, h);
  int first = p->g->hosts[p->host_of[h]].first, n = t->nnodes;
  int s = t->rep[x - first], d = t->rep[y - first];
  const zcc_topo_path_t *row = &t->paths[(size_t)s * n];
  for (int v = d, guard = 0; v != s && guard < n; guard++) {
    int u = row[v].prev;
    if (u < 0) break;
    int e = t->edge_of[(size_t)u * n + v];
    if (e < 0) break;
    f->load[f->edge_base[h] + 2 * e + (t->edges[e].u == u ? 0 : 1)] += amount;
    v = u;
  }
}

void zcc_planner_flow_add(zcc_flow_t *f, int a, int b, int na, int nb, double amount) {
  const zcc_planner_t *p = f->p;
  if (a == b) return;
  int x = p->rank_node[a], y = p->rank_node[b];
  int ha = p->rank_host[a], hb = p->rank_host[b];
  if (p->cpu_ranks) {
    f->load[f->rank_base + 2 * a] += amount;
    f->load[f->rank_base + 2 * b + 1] += amount;
  }
  if (ha == hb) {
    if (x != y) walk(f, ha, x, y, amount);
    return;
  }
  if (na < 0 || nb < 0) {
    zcc_topo_route_t r;
    if (zcc_topo_route(p->g, x, y, &r) != zccSuccess || r.nic_a < 0) return;
    if (na < 0) na = r.nic_a;
    if (nb < 0) nb = r.nic_b;
  }
  int fa = p->g->hosts[p->host_of[ha]].first, fb = p->g->hosts[p->host_of[hb]].first;
  walk(f, ha, x, na, amount);
  f->load[f->nic_base[ha] + 2 * (na - fa)] += amount;
  f->load[f->nic_base[hb] + 2 * (nb - fb) + 1] += amount;
  walk(f, hb, nb, y, amount);
}

double zcc_planner_flow_max(const zcc_flow_t *f) {
  double m = 0;
  for (int i = 0; i < f->nslots; i++)
    if (f->load[i] > 0 && f->cap[i] > 0) {
      double r = f->load[i] / f->cap[i];
      if (r > m) m = r;
    }
  return m;
}

/* ---- placement and grouping ---- */

zccResult_t zcc_planner_place(const zcc_topo_t *g, int nranks, int *rank_node) {
  if (nranks < 1) return zcc_error(zccInvalidArgument, "planner: %d ranks", nranks);
  int ngpu = zcc_topo_count(g, -1, ZCC_TOPO_GPU);
  zcc_topo_kind_t kind = ngpu > 0 ? ZCC_TOPO_GPU : ZCC_TOPO_CPU;
  int total = ngpu > 0 ? ngpu : zcc_topo_count(g, -1, ZCC_TOPO_CPU);
  if (total == 0) return zcc_error(zccInvalidArgument, "planner: the topology has no gpu and no cpu");
  if (kind == ZCC_TOPO_GPU && nranks > ngpu)
    return zcc_error(zccInvalidArgument, "planner: %d ranks but the topology has %d gpus", nranks,
                     ngpu);
  int r = 0;
  while (r < nranks)
    for (int i = 0; i < g->nnodes && r < nranks; i++)
      if (g->nodes[i].kind == kind) rank_node[r++] = i;
  return zccSuccess;
}

int zcc_planner_host_ring(int nranks, const uint64_t *rank_host, int *order) {
  if (nranks < 1 || !rank_host || !order) return -1;
  int n = 0, hosts = 0;
  for (int r = 0; r < nranks; r++) {
    int first = 1;
    for (int q = 0; q < r && first; q++)
      if (rank_host[q] == rank_host[r]) first = 0;
    if (!first) continue;
    hosts++;
    for (int q = r; q < nranks; q++)
      if (rank_host[q] == rank_host[r]) order[n++] = q;
  }
  return hosts > 1 ? hosts : 0;
}

ZCC_PARAM_STR(rings, "RINGS", NULL,
              "GPU communicators: the rings of the ring and tree kernels' channels, as NCCL_RINGS "
              "wrote them: each ring the ranks in order, rings separated by '|' (\"0 1 2 3|3 2 1 "
              "0\"), channel c taking ring c modulo their number; each must hold every rank once; "
              "unset: the planner's rings on the topology graph, or rank order where ranks share "
              "GPUs; equal on every rank")

/* ZCC_RINGS's ring `want` (cycled) into order; zccInvalidArgument naming what is wrong. */
static zccResult_t rings_param(const char *spec, int nranks, int want, int *order) {
  int nrings = 1;
  for (const char *q = spec; *q; q++) nrings += *q == '|';
  const char *at = spec;
  for (int r = 0; r < want % nrings; r++) at = strchr(at, '|') + 1;
  unsigned char seen[ZCC_PLANNER_MAX_RANKS_RING] = {0};
  if (nranks > ZCC_PLANNER_MAX_RANKS_RING)
    return zcc_error(zccInvalidArgument, "ZCC_RINGS: at most %d ranks", ZCC_PLANNER_MAX_RANKS_RING);
  int n = 0;
  const char *q = at;
  while (*q && *q != '|') {
    if (*q == ' ' || *q == ',' || *q == '\t') {
      q++;
      continue;
    }
    char *end;
    long v = strtol(q, &end, 10);
    if (end == q || v < 0 || v >= nranks || seen[v] || n >= nranks)
      return zcc_error(zccInvalidArgument,
                       "ZCC_RINGS=\"%s\": ring %d must list each of the %d ranks 0..%d once "
                       "(at \"%.16s\")", spec, want % nrings, nranks, nranks - 1, q);
    seen[v] = 1;
    order[n++] = (int)v;
    q = end;
  }
  if (n != nranks)
    return zcc_error(zccInvalidArgument,
                     "ZCC_RINGS=\"%s\": ring %d lists %d rank(s); this communicator has %d",
                     spec, want % nrings, n, nranks);
  return zccSuccess;
}

zccResult_t zcc_planner_channel_ring(const zcc_planner_t *p, int nranks, int channel, int *order,
                                     const char **source) {
  if (nranks < 1 || channel < 0 || !order)
    return zcc_error(zccInvalidArgument, "planner: channel ring %d of %d ranks", channel, nranks);
  const char *spec = zcc_param_rings();
  if (spec && *spec) {
    if (source) *source = "ZCC_RINGS";
    return rings_param(spec, nranks, channel, order);
  }
  if (p && p->nchannels > 0 && p->nranks == nranks) {
    memcpy(order, p->rings[channel % p->nchannels].order, sizeof(int) * (size_t)nranks);
    if (source) *source = "the planner's rings";
    return zccSuccess;
  }
  for (int r = 0; r < nranks; r++) order[r] = r;
  if (source) *source = "rank order";
  return zccSuccess;
}

static zccResult_t group_hosts(zcc_planner_t *p) {
  const zcc_topo_t *g = p->g;
  int *seen = malloc(sizeof(int) * (size_t)g->nhosts);
  p->rank_host = malloc(sizeof(int) * (size_t)p->nranks);
  p->host_of = malloc(sizeof(int) * (size_t)p->nranks);
  p->host_off = calloc((size_t)p->nranks + 1, sizeof(int));
  p->host_ranks = malloc(sizeof(int) * (size_t)p->nranks);
  if (!seen || !p->rank_host || !p->host_of || !p->host_off || !p->host_ranks) {
    free(seen);
    return zcc_error(zccSystemError, "planner: out of memory");
  }
  for (int h = 0; h < g->nhosts; h++) seen[h] = -1;
  p->nnodes = 0;
  for (int r = 0; r < p->nranks; r++) {
    int gh = g->nodes[p->rank_node[r]].host;
    if (seen[gh] < 0) {
      seen[gh] = p->nnodes;
      p->host_of[p->nnodes++] = gh;
    }
    p->rank_host[r] = seen[gh];
    p->host_off[seen[gh] + 1]++;
  }
  free(seen);
  for (int h = 0; h < p->nnodes; h++) {
    if (p->host_off[h + 1] > p->max_local) p->max_local = p->host_off[h + 1];
    p->host_off[h + 1] += p->host_off[h];
  }
  int *fill = calloc((size_t)p->nnodes, sizeof(int));
  if (!fill) return zcc_error(zccSystemError, "planner: out of memory");
  for (int r = 0; r < p->nranks; r++) {
    int h = p->rank_host[r];
    p->host_ranks[p->host_off[h] + fill[h]++] = r;
  }
  free(fill);
  return zccSuccess;
}

/* ---- intra-host orders ---- */

typedef struct score {
  double load; /* hottest link, unit flow per step */
  int sys;     /* steps across the socket link */
  int cls;     /* sum of step classes */
  double lat;
} score_t;

static int score_better(const score_t *a, const score_t *b) {
  if (a->load < b->load * (1 - 1e-9)) return 1;
  if (a->load > b->load * (1 + 1e-9)) return 0;
  if (a->sys != b->sys) return a->sys < b->sys;
  if (a->cls != b->cls) return a->cls < b->cls;
  return a->lat < b->lat - 1e-12;
}

/* Score an order of ranks of comm host h (closed: back to the first). */
static void score_order(zcc_flow_t *f, int h, const int *order, int n, int closed,
                        score_t *s) {
  const zcc_planner_t *p = f->p;
  int lo = f->edge_base[h], hi = f->nic_base[h];
  memset(f->load + lo, 0, sizeof(double) * (size_t)(hi - lo));
  if (p->cpu_ranks)
    for (int i = 0; i < n; i++) f->load[f->rank_base + 2 * order[i]] = f->load[f->rank_base + 2 * order[i] + 1] = 0;
  memset(s, 0, sizeof(*s));
  int steps = closed ? n : n - 1;
  for (int i = 0; i < steps; i++) {
    int a = order[i], b = order[(i + 1) % n];
    zcc_planner_flow_add(f, a, b, -1, -1, 1.0);
    const zcc_topo_path_t *pa = zcc_topo_path(p->g, p->rank_node[a], p->rank_node[b]);
    s->sys += pa->cls == ZCC_PATH_SYS;
    s->cls += pa->cls;
    s->lat += pa->lat;
  }
  for (int i = lo; i < hi; i++)
    if (f->load[i] > 0 && f->cap[i] > 0 && f->load[i] / f->cap[i] > s->load)
      s->load = f->load[i] / f->cap[i];
  if (p->cpu_ranks)
    for (int i = 0; i < n; i++)
      for (int d = 0; d < 2; d++) {
        int k = f->rank_base + 2 * order[i] + d;
        if (f->load[k] / f->cap[k] > s->load) s->load = f->load[k] / f->cap[k];
        f->load[k] = 0;
      }
  memset(f->load + lo, 0, sizeof(double) * (size_t)(hi - lo));
}

static int next_perm(int *a, int n) {
  int i = n - 2;
  while (i >= 0 && a[i] >= a[i + 1]) i--;
  if (i < 0) return 0;
  int j = n - 1;
  while (a[j] <= a[i]) j--;
  int t = a[i];
  a[i] = a[j];
  a[j] = t;
  for (int l = i + 1, r = n - 1; l < r; l++, r--) {
    t = a[l];
    a[l] = a[r];
    a[r] = t;
  }
  return 1;
}

/* Locality order: package of the nearest CPU, then PCI bus id. */
static int locality_cmp(const zcc_planner_t *p, int ra, int rb) {
  const zcc_topo_node_t *a = &p->g->nodes[p->rank_node[ra]], *b = &p->g->nodes[p->rank_node[rb]];
  int pa = a->package, pb = b->package;
  if (a->kind != ZCC_TOPO_CPU || b->kind != ZCC_TOPO_CPU) {
    /* the package of the CPU node with the best path */
    const zcc_topo_host_t *h = &p->g->hosts[a->host];
    double ba = -1, bb = -1;
    for (int i = h->first; i < h->first + h->nnodes; i++) {
      if (p->g->nodes[i].kind != ZCC_TOPO_CPU) continue;
      const zcc_topo_path_t *x = zcc_topo_path(p->g, p->rank_node[ra], i);
      const zcc_topo_path_t *y = zcc_topo_path(p->g, p->rank_node[rb], i);
      if (x && x->bw > ba) { ba = x->bw; pa = p->g->nodes[i].package; }
      if (y && y->bw > bb) { bb = y->bw; pb = p->g->nodes[i].package; }
    }
  }
  if (pa != pb) return pa < pb ? -1 : 1;
  int c = strcmp(a->bus, b->bus);
  if (c) return c;
  return ra < rb ? -1 : ra > rb;
}

/*
 * Best order of the n ranks in `r` (comm host h). closed: a cycle starting
 * at r[0]; else a path from s to t (s == t only when n == 1). The result
 * goes to out[n].
 */
static void best_order(zcc_flow_t *f, int h, const int *r, int n, int closed, int s, int t,
                       int *out) {
  const zcc_planner_t *p = f->p;
  int fixed_first = closed ? r[0] : s;
  int mid[ZCC_TOPO_MAX_HOST_NODES], m = 0;
  for (int i = 0; i < n; i++)
    if (r[i] != fixed_first && (closed || r[i] != t)) mid[m++] = r[i];
  int cand[ZCC_TOPO_MAX_HOST_NODES];
  if (n <= EXHAUSTIVE_MAX) {
    /* mid holds rank numbers in increasing order: next_perm walks them all. */
    score_t best = {INFINITY, 0, 0, 0}, sc;
    do {
      cand[0] = fixed_first;
      memcpy(cand + 1, mid, sizeof(int) * (size_t)m);
      if (!closed && n > 1) cand[n - 1] = t;
      score_order(f, h, cand, n, closed, &sc);
      if (score_better(&sc, &best)) {
        best = sc;
        memcpy(out, cand, sizeof(int) * (size_t)n);
      }
    } while (next_perm(mid, m));
    return;
  }
  /* Larger hosts: by locality, starting from the first rank's side. */
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && locality_cmp(p, mid[j - 1], mid[j]) > 0; j--) {
      int x = mid[j];
      mid[j] = mid[j - 1];
      mid[j - 1] = x;
    }
  out[0] = fixed_first;
  memcpy(out + 1, mid, sizeof(int) * (size_t)m);
  if (!closed && n > 1) out[n - 1] = t;
}

/* Orders already searched, for hosts that are alike. */
typedef struct memo {
  int table, n, s_pos, t_pos, closed;
  uint64_t key; /* local node indices of the ranks */
  int *pos;     /* [n] result as positions in the host's rank list */
} memo_t;

typedef struct memos {
  int count, cap;
  memo_t *m;
} memos_t;

static uint64_t host_key(const zcc_planner_t *p, int h) {
  uint64_t k = 1469598103934665603ull;
  int first = p->g->hosts[p->host_of[h]].first;
  for (int i = p->host_off[h]; i < p->host_off[h + 1]; i++)
    k = (k ^ (uint64_t)(p->rank_node[p->host_ranks[i]] - first)) * 1099511628211ull;
  return k;
}

static zccResult_t host_order(zcc_flow_t *f, memos_t *ms, int h, int closed, int s, int t,
                              int *out) {
  const zcc_planner_t *p = f->p;
  const int *r = &p->host_ranks[p->host_off[h]];
  int n = p->host_off[h + 1] - p->host_off[h];
  int s_pos = -1, t_pos = -1;
  for (int i = 0; i < n; i++) {
    if (r[i] == s) s_pos = i;
    if (r[i] == t) t_pos = i;
  }
  int table = p->g->hosts[p->host_of[h]].table;
  uint64_t key = host_key(p, h);
  for (int i = 0; i < ms->count; i++) {
    memo_t *m = &ms->m[i];
    if (m->table == table && m->n == n && m->key == key && m->closed == closed &&
        (closed || (m->s_pos == s_pos && m->t_pos == t_pos))) {
      for (int j = 0; j < n; j++) out[j] = r[m->pos[j]];
      return zccSuccess;
    }
  }
  best_order(f, h, r, n, closed, s, t, out);
  if (ms->count == ms->cap) {
    int nc = ms->cap ? 2 * ms->cap : 16;
    memo_t *nm = realloc(ms->m, sizeof(memo_t) * (size_t)nc);
    if (!nm) return zcc_error(zccSystemError, "planner: out of memory");
    ms->m = nm;
    ms->cap = nc;
  }
  memo_t *m = &ms->m[ms->count];
  m->pos = malloc(sizeof(int) * (size_t)n);
  if (!m->pos) return zcc_error(zccSystemError, "planner: out of memory");
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      if (r[i] == out[j]) m->pos[j] = i;
  m->table = table;
  m->n = n;
  m->key = key;
  m->closed = closed;
  m->s_pos = s_pos;
  m->t_pos = t_pos;
  ms->count++;
  return zccSuccess;
}

/* ---- rails: each NIC with the local rank nearest it ---- */

typedef struct rail {
  int nic, rank;
} rail_t;

static int rails_of(const zcc_planner_t *p, int h, int net, rail_t *out, int cap) {
  const zcc_topo_t *g = p->g;
  const zcc_topo_host_t *host = &g->hosts[p->host_of[h]];
  int n = 0;
  for (int i = host->first; i < host->first + host->nnodes && n < cap; i++) {
    if (g->nodes[i].kind != ZCC_TOPO_NIC || g->nodes[i].net != net) continue;
    int best = -1;
    double bbw = 0, blat = 0;
    for (int k = p->host_off[h]; k < p->host_off[h + 1]; k++) {
      int r = p->host_ranks[k];
      const zcc_topo_path_t *x = zcc_topo_path(g, p->rank_node[r], i);
      if (!x || x->bw <= 0) continue;
      if (best < 0 || x->bw > bbw * (1 + 1e-9) ||
          (x->bw >= bbw * (1 - 1e-9) && x->lat < blat - 1e-12)) {
        best = r;
        bbw = x->bw;
        blat = x->lat;
      }
    }
    if (best >= 0) out[n++] = (rail_t){i, best};
  }
  return n;
}

/* ---- building ---- */

static void ring_free(zcc_ring_t *r) {
  free(r->order);
  free(r->nic_in);
  free(r->nic_out);
  memset(r, 0, sizeof(*r));
}

void zcc_planner_free(zcc_planner_t *p) {
  if (!p) return;
  for (int c = 0; c < ZCC_PLANNER_MAX_CHANNELS; c++) ring_free(&p->rings[c]);
  for (int t = 0; t < 2; t++) {
    free(p->trees[t].parent);
    free(p->trees[t].child);
  }
  free(p->rank_node);
  free(p->rank_host);
  free(p->host_of);
  free(p->host_off);
  free(p->host_ranks);
  free(p);
}

/* Ring of channel c, multi-host: rails a (in) and b (out), swapped on odd hosts. */
static zccResult_t multi_host_ring(zcc_planner_t *p, zcc_flow_t *f, memos_t *ms, int c,
                                   rail_t *rails, int *nrails, int maxr, zcc_ring_t *ring) {
  int pos = 0;
  for (int h = 0; h < p->nnodes; h++) {
    rail_t *rl = &rails[(size_t)h * maxr];
    int R = nrails[h];
    int a = c % R, b = a;
    for (int k = 1; k < R; k++)
      if (rl[(a + k) % R].rank != rl[a].rank) {
        b = (a + k) % R;
        break;
      }
    if (h % 2 == 1) {
      int x = a;
      a = b;
      b = x;
    }
    int s = rl[a].rank, t = rl[b].rank;
    int n = p->host_off[h + 1] - p->host_off[h];
    if (s == t && n > 1) {
      /* every NIC is nearest the same rank: leave by the rank nearest after it */
      t = -1;
      double bbw = -1;
      for (int k = p->host_off[h]; k < p->host_off[h + 1]; k++) {
        int r = p->host_ranks[k];
        if (r == s) continue;
        const zcc_topo_path_t *x = zcc_topo_path(p->g, p->rank_node[r], rl[b].nic);
        if (x->bw > bbw) {
          bbw = x->bw;
          t = r;
        }
      }
    }
    ZCC_CHECK(host_order(f, ms, h, 0, s, t, ring->order + pos));
    ring->nic_in[h] = rl[a].nic;
    ring->nic_out[h] = rl[b].nic;
    pos += n;
  }
  return zccSuccess;
}

static void add_ring_flows(zcc_planner_t *p, zcc_flow_t *f, const zcc_ring_t *r, double amount) {
  for (int i = 0; i < p->nranks; i++) {
    int a = r->order[i], b = r->order[(i + 1) % p->nranks];
    int ha = p->rank_host[a], hb = p->rank_host[b];
    zcc_planner_flow_add(f, a, b, ha == hb ? -1 : r->nic_out[ha], ha == hb ? -1 : r->nic_in[hb],
                         amount);
  }
}

static zccResult_t build_rings(zcc_planner_t *p, zcc_flow_t *f) {
  int maxc = p->cpu_ranks || p->nranks == 1 ? 1 : ZCC_PLANNER_MAX_CHANNELS;
  double chan = p->cpu_ranks ? HOST_SHM_BW : ZCC_PLANNER_GPU_CHANNEL_BW;
  memos_t ms = {0, 0, NULL};
  rail_t *rails = NULL;
  int *nrails = NULL, maxr = 0;
  zccResult_t res = zccSuccess;
  if (p->nnodes > 1) {
    for (int h = 0; h < p->nnodes; h++) {
      int n = zcc_topo_count(p->g, p->host_of[h], ZCC_TOPO_NIC);
      if (n > maxr) maxr = n;
    }
    rails = malloc(sizeof(rail_t) * (size_t)p->nnodes * (size_t)(maxr ? maxr : 1));
    nrails = malloc(sizeof(int) * (size_t)p->nnodes);
    if (!rails || !nrails) {
      res = zcc_error(zccSystemError, "planner: out of memory");
      goto out;
    }
    /* The network every host must reach: the first host's first one. */
    int net = -1;
    const zcc_topo_host_t *h0 = &p->g->hosts[p->host_of[0]];
    for (int i = h0->first; i < h0->first + h0->nnodes && net < 0; i++)
      if (p->g->nodes[i].kind == ZCC_TOPO_NIC) net = p->g->nodes[i].net;
    for (int h = 0; h < p->nnodes; h++) {
      nrails[h] = net < 0 ? 0 : rails_of(p, h, net, &rails[(size_t)h * maxr], maxr);
      if (nrails[h] == 0) {
        res = zcc_error(zccInvalidArgument,
                        "planner: host '%s' has no nic on network '%s' that its ranks reach: "
                        "they cannot reach the other %d hosts", p->g->hosts[p->host_of[h]].name,
                        net < 0 ? "(none)" : p->g->nodes[net].id, p->nnodes - 1);
        goto out;
      }
    }
  }
  zcc_planner_flow_reset(f);
  double best_total = -1;
  int best_c = 1;
  for (int c = 0; c < maxc; c++) {
    zcc_ring_t *r = &p->rings[c];
    r->order = malloc(sizeof(int) * (size_t)p->nranks);
    r->nic_in = malloc(sizeof(int) * (size_t)p->nnodes);
    r->nic_out = malloc(sizeof(int) * (size_t)p->nnodes);
    if (!r->order || !r->nic_in || !r->nic_out) {
      res = zcc_error(zccSystemError, "planner: out of memory");
      goto out;
    }
    for (int h = 0; h < p->nnodes; h++) r->nic_in[h] = r->nic_out[h] = -1;
    if (p->nnodes > 1) {
      ZCC_CHECK_GOTO(multi_host_ring(p, f, &ms, c, rails, nrails, maxr, r), res, out);
    } else if (c == 0) {
      ZCC_CHECK_GOTO(host_order(f, &ms, 0, 1, -1, -1, r->order), res, out);
    } else {
      /* the first ring, or the same one reversed if that loads links less */
      zcc_ring_t *r0 = &p->rings[0];
      memcpy(r->order, r0->order, sizeof(int) * (size_t)p->nranks);
      add_ring_flows(p, f, r, 1.0);
      double fwd = zcc_planner_flow_max(f);
      add_ring_flows(p, f, r, -1.0);
      for (int i = 0; i < p->nranks; i++) r->order[i] = r0->order[(p->nranks - i) % p->nranks];
      add_ring_flows(p, f, r, 1.0);
      double rev = zcc_planner_flow_max(f);
      add_ring_flows(p, f, r, -1.0);
      if (!(rev < fwd * (1 - 1e-9))) memcpy(r->order, r0->order, sizeof(int) * (size_t)p->nranks);
    }
    add_ring_flows(p, f, r, 1.0);
    double m = zcc_planner_flow_max(f);
    double per = m > 0 ? fmin(chan, 1.0 / m) : chan;
    double total = (c + 1) * per;
    if (total > best_total * (1 + 1e-9)) {
      best_total = total;
      best_c = c + 1;
    }
  }
  p->nchannels = best_c;
  p->ring_bw = best_total;
  for (int c = best_c; c < maxc; c++) ring_free(&p->rings[c]);
  /* Classes of the steps. */
  p->ring_class = p->ring_intra_class = ZCC_PATH_SELF;
  for (int c = 0; c < p->nchannels; c++)
    for (int i = 0; i < p->nranks && p->nranks > 1; i++) {
      int a = p->rings[c].order[i], b = p->rings[c].order[(i + 1) % p->nranks];
      int cls = p->rank_host[a] != p->rank_host[b]
                    ? ZCC_PATH_NET
                    : zcc_topo_path(p->g, p->rank_node[a], p->rank_node[b])->cls;
      if (c == 0) p->ring_steps[cls]++;
      if (cls > p->ring_class) p->ring_class = cls;
      if (cls != ZCC_PATH_NET && cls > p->ring_intra_class) p->ring_intra_class = cls;
    }
out:
  for (int i = 0; i < ms.count; i++) free(ms.m[i].pos);
  free(ms.m);
  free(rails);
  free(nrails);
  return res;
}

zccResult_t zcc_planner_build(const zcc_topo_t *g, int nranks, const int *rank_node,
                              zcc_planner_t **out) {
  if (!g->finalized) return zcc_error(zccInternalError, "planner: topology not finalized");
  if (nranks < 1) return zcc_error(zccInvalidArgument, "planner: %d ranks", nranks);
  zcc_planner_t *p = calloc(1, sizeof(*p));
  if (!p) return zcc_error(zccSystemError, "planner: out of memory");
  p->g = g;
  p->nranks = nranks;
  zccResult_t res = zccSuccess;
  zcc_flow_t *f = NULL;
  p->rank_node = malloc(sizeof(int) * (size_t)nranks);
  if (!p->rank_node) {
    res = zcc_error(zccSystemError, "planner: out of memory");
    goto fail;
  }
  for (int r = 0; r < nranks; r++) {
    int n = rank_node[r];
    if (n < 0 || n >= g->nnodes ||
        (g->nodes[n].kind != ZCC_TOPO_GPU && g->nodes[n].kind != ZCC_TOPO_CPU)) {
      res = zcc_error(zccInvalidArgument, "planner: rank %d is on node %d, not a gpu or cpu", r,
                      n);
      goto fail;
    }
    if (g->nodes[n].kind != g->nodes[rank_node[0]].kind) {
      res = zcc_error(zccInvalidArgument,
                      "planner: rank 0 runs on a %s and rank %d on a %s; a communicator is "
                      "all gpus or all cpus", zcc_topo_kind_name(g->nodes[rank_node[0]].kind),
                      r, zcc_topo_kind_name(g->nodes[n].kind));
      goto fail;
    }
    p->rank_node[r] = n;
  }
  p->cpu_ranks = g->nodes[rank_node[0]].kind == ZCC_TOPO_CPU;
  if (!p->cpu_ranks) {
    /* Two ranks on one GPU: refused, as NCCL does (node ids are unique per host). */
    int *owner = malloc(sizeof(int) * (size_t)g->nnodes);
    if (!owner) {
      res = zcc_error(zccSystemError, "planner: out of memory");
      goto fail;
    }
    for (int r = 0; r < nranks; r++) owner[p->rank_node[r]] = -1;
    for (int r = 0; r < nranks && res == zccSuccess; r++) {
      int n = p->rank_node[r];
      if (owner[n] >= 0)
        res = zcc_error(zccInvalidUsage, "planner: ranks %d and %d are both on gpu '%s' of host '%s'",
                        owner[n], r, g->nodes[n].id, g->hosts[g->nodes[n].host].name);
      owner[n] = r;
    }
    free(owner);
    if (res != zccSuccess) goto fail;
  }
  ZCC_CHECK_GOTO(group_hosts(p), res, fail);
  ZCC_CHECK_GOTO(zcc_planner_flow_new(p, &f), res, fail);
  ZCC_CHECK_GOTO(build_rings(p, f), res, fail);
  zcc_planner_flow_free(f);
  f = NULL;
  ZCC_CHECK_GOTO(zcc_planner_build_trees(p), res, fail);
  ZCC_CHECK_GOTO(zcc_planner_build_allpairs(p), res, fail);
  ZCC_INFO(TUNING, "planner: %d ranks on %d hosts, %d ring channels of %.1f GB/s in all "
                   "(worst step %s), tree depth %d, %s",
           nranks, p->nnodes, p->nchannels, p->ring_bw, zcc_topo_class_name(p->ring_class),
           p->trees[0].depth, p->island ? "all-pairs island" : "no all-pairs island");
  *out = p;
  return zccSuccess;
fail:
  zcc_planner_flow_free(f);
  zcc_planner_free(p);
  return res;
}
