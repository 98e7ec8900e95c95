/*
 * Double binary trees over the hosts of a communicator, and the link loads
 * of the all-pairs and hierarchical schemes.
 *
 * Tree 0 is the in-order binary tree on labels 1..N (the root is the
 * largest power of two <= N, a node with lowest set bit k has children
 * x - k/2 and the largest x + k/2^i <= N), so its depth is floor(log2 N).
 * Tree 1 is the same tree with every host shifted by one: the leaves of
 * one tree are the inner nodes of the other, so each host sends and
 * receives about as much in total. Within a host the tree runs as a chain
 * in the order of the channel's ring, starting at the rank next to the
 * NIC the ring enters by, which is also the one that talks to the parent
 * and children.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "planner.h"

static zccResult_t make_tree(zcc_tree_t *t, int n, int shift) {
  t->parent = malloc(sizeof(int) * (size_t)n);
  t->child = malloc(sizeof(int) * 2 * (size_t)n);
  int *depth = malloc(sizeof(int) * (size_t)n);
  if (!t->parent || !t->child || !depth) {
    free(depth);
    return zcc_error(zccSystemError, "planner: out of memory for trees");
  }
  for (int i = 0; i < n; i++) {
    t->parent[i] = -1;
    t->child[2 * i] = t->child[2 * i + 1] = -1;
  }
  /* label x (1..n) sits on host (x - 1 + shift) % n */
#define POS(x) (((x) - 1 + shift) % n)
  int root = 1;
  while (root * 2 <= n) root *= 2;
  t->root = POS(root);
  for (int x = 1; x <= n; x++) {
    int k = x & -x;
    if (k == 1) continue;
    int left = x - k / 2;
    t->child[2 * POS(x)] = POS(left);
    t->parent[POS(left)] = POS(x);
    int step = k / 2;
    while (step >= 1 && x + step > n) step /= 2;
    if (step >= 1) {
      t->child[2 * POS(x) + 1] = POS(x + step);
      t->parent[POS(x + step)] = POS(x);
    }
  }
#undef POS
  /* depth by walking up from every host (n log n) */
  t->depth = 0;
  for (int i = 0; i < n; i++) {
    int d = 0;
    for (int v = i; t->parent[v] >= 0 && d <= n; v = t->parent[v]) d++;
    depth[i] = d;
    if (d > t->depth) t->depth = d;
  }
  free(depth);
  return zccSuccess;
}

zccResult_t zcc_planner_build_trees(zcc_planner_t *p) {
  int n = p->nnodes;
  for (int t = 0; t < 2; t++) ZCC_CHECK(make_tree(&p->trees[t], n, n > 1 ? t : 0));
  /* Loads: every channel runs tree (c % 2), reducing up and broadcasting down. */
  zcc_flow_t *f;
  ZCC_CHECK(zcc_planner_flow_new(p, &f));
  zcc_planner_flow_reset(f);
  for (int c = 0; c < p->nchannels; c++) {
    const zcc_ring_t *r = &p->rings[c];
    const zcc_tree_t *t = &p->trees[c % 2];
    for (int h = 0; h < n; h++) {
      int first = p->host_off[h], last = p->host_off[h + 1];
      for (int i = first; i + 1 < last; i++) {
        zcc_planner_flow_add(f, r->order[i], r->order[i + 1], -1, -1, 1.0);
        zcc_planner_flow_add(f, r->order[i + 1], r->order[i], -1, -1, 1.0);
      }
      int up = t->parent[h];
      if (up < 0) continue;
      int a = r->order[first], b = r->order[p->host_off[up]];
      zcc_planner_flow_add(f, a, b, r->nic_in[h], r->nic_in[up], 1.0);
      zcc_planner_flow_add(f, b, a, r->nic_in[up], r->nic_in[h], 1.0);
    }
  }
  double m = zcc_planner_flow_max(f);
  double chan = p->cpu_ranks ? p->ring_bw : ZCC_PLANNER_GPU_CHANNEL_BW;
  p->tree_bw = p->nranks == 1 ? chan : p->nchannels * (m > 0 ? fmin(chan, 1.0 / m) : chan);
  zcc_planner_flow_free(f);
  return zccSuccess;
}

zccResult_t zcc_planner_build_allpairs(zcc_planner_t *p) {
  const zcc_topo_t *g = p->g;
  p->island = 0;
  p->island_class = ZCC_PATH_SELF;
  if (p->nnodes == 1) {
    int worst = ZCC_PATH_SELF;
    for (int a = 0; a < p->nranks; a++)
      for (int b = 0; b < p->nranks; b++) {
        const zcc_topo_path_t *x = zcc_topo_path(g, p->rank_node[a], p->rank_node[b]);
        if (x->cls > worst) worst = x->cls;
      }
    p->island_class = worst;
    p->island = p->cpu_ranks || worst <= ZCC_PATH_NVS;
  }
  zcc_flow_t *f;
  ZCC_CHECK(zcc_planner_flow_new(p, &f));
  /* All pairs, only where one-shot and two-shot may run (n^2 pairs). */
  p->ap_inv = 0;
  if (p->nnodes == 1) {
    zcc_planner_flow_reset(f);
    for (int a = 0; a < p->nranks; a++)
      for (int b = 0; b < p->nranks; b++) zcc_planner_flow_add(f, a, b, -1, -1, 1.0);
    p->ap_inv = zcc_planner_flow_max(f);
  }
  zcc_planner_flow_reset(f);
  for (int b = 1; b < p->nranks; b++) zcc_planner_flow_add(f, 0, b, -1, -1, 1.0);
  p->bcast_inv = zcc_planner_flow_max(f);
  zcc_planner_flow_reset(f);
  for (int a = 1; a < p->nranks; a++) zcc_planner_flow_add(f, a, 0, -1, -1, 1.0);
  p->gather_inv = zcc_planner_flow_max(f);
  /* Hierarchical: all pairs inside every host ... */
  zcc_planner_flow_reset(f);
  for (int h = 0; h < p->nnodes; h++)
    for (int i = p->host_off[h]; i < p->host_off[h + 1]; i++)
      for (int j = p->host_off[h]; j < p->host_off[h + 1]; j++)
        zcc_planner_flow_add(f, p->host_ranks[i], p->host_ranks[j], -1, -1, 1.0);
  p->hier_intra_inv = zcc_planner_flow_max(f);
  /* ... and a ring per local index (rail) across the hosts, best NICs. */
  zcc_planner_flow_reset(f);
  p->hier_rail_inv = 0;
  if (p->nnodes > 1) {
    for (int k = 0; k < p->max_local; k++)
      for (int h = 0; h < p->nnodes; h++) {
        int nh = (h + 1) % p->nnodes;
        int lh = p->host_off[h + 1] - p->host_off[h], lnh = p->host_off[nh + 1] - p->host_off[nh];
        if (k >= lh || k >= lnh) continue;
        zcc_planner_flow_add(f, p->host_ranks[p->host_off[h] + k],
                             p->host_ranks[p->host_off[nh] + k], -1, -1, 1.0);
      }
    p->hier_rail_inv = zcc_planner_flow_max(f);
  }
  zcc_planner_flow_free(f);
  p->net_bw = 0;
  for (int h = 0; h < p->nnodes && p->nnodes > 1; h++) {
    const zcc_topo_host_t *host = &g->hosts[p->host_of[h]];
    double sum = 0;
    for (int i = host->first; i < host->first + host->nnodes; i++)
      if (g->nodes[i].kind == ZCC_TOPO_NIC && g->nodes[i].net >= 0)
        sum += g->nodes[i].speed > 0 ? g->nodes[i].speed / 8.0 : 1.25;
    if (h == 0 || sum < p->net_bw) p->net_bw = sum;
  }
  return zccSuccess;
}
