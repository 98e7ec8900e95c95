/*
 * The topology graph: adding hosts, nodes and links, the bandwidth and
 * latency a link has from its type and generation, and comparison.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "debug.h"
#include "topo.h"

static const char *kind_names[ZCC_TOPO_KIND_COUNT] = {"gpu", "cpu", "pci",
                                                      "nvswitch", "nic", "net"};
static const char *link_names[ZCC_LINK_TYPE_COUNT] = {"nvlink", "pcie", "smp",
                                                      "net"};
static const char *class_names[ZCC_PATH_CLASS_COUNT] = {
    "self", "nvlink", "nvswitch", "pcie-switch", "pcie-host",
    "cross-socket", "network", "none"};

const char *zcc_topo_kind_name(zcc_topo_kind_t kind) {
  return kind >= 0 && kind < ZCC_TOPO_KIND_COUNT ? kind_names[kind] : "invalid";
}
const char *zcc_topo_link_name(zcc_link_type_t type) {
  return type >= 0 && type < ZCC_LINK_TYPE_COUNT ? link_names[type] : "invalid";
}
const char *zcc_topo_class_name(zcc_path_class_t cls) {
  return cls >= 0 && cls < ZCC_PATH_CLASS_COUNT ? class_names[cls] : "invalid";
}
int zcc_topo_kind_parse(const char *name) {
  for (int i = 0; i < ZCC_TOPO_KIND_COUNT; i++)
    if (strcmp(name, kind_names[i]) == 0) return i;
  return -1;
}
int zcc_topo_link_parse(const char *name) {
  for (int i = 0; i < ZCC_LINK_TYPE_COUNT; i++)
    if (strcmp(name, link_names[i]) == 0) return i;
  return -1;
}

/*
 * PCIe: raw lane rate (after line encoding) x lanes, of which 80% carries
 * data once TLP headers and flow control are paid for at 256-byte
 * payloads (gen4 x16: 25 GB/s, gen5 x16: 50 GB/s, as measured).
 */
double zcc_topo_pcie_bw(int gen, int width) {
  static const double lane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.877};
  if (gen < 1) gen = 3;
  if (gen > 6) gen = 6;
  if (width < 1) width = 16;
  return lane[gen] * width * 0.8;
}

/* NVLink, GB/s each direction per link: 1: 20, 2-4: 25, 5: 50. */
double zcc_topo_nvlink_bw(int gen, int count) {
  double per = gen <= 1 ? 20.0 : gen <= 4 ? 25.0 : 50.0;
  return per * (count < 1 ? 1 : count);
}

/*
 * Between sockets, what PCIe peer traffic gets across (not the raw
 * UPI/xGMI rate): Intel Sapphire Rapids and later 22, older Intel 10,
 * AMD 16 GB/s each direction.
 */
double zcc_topo_smp_bw(const char *vendor, int model_number) {
  if (vendor && strstr(vendor, "AMD")) return 16.0;
  if (vendor && strstr(vendor, "Intel")) {
    /* family 6 models: 143 SPR, 207 EMR, 173/174 GNR, 175 SRF */
    if (model_number == 143 || model_number == 207 || model_number == 173 ||
        model_number == 174 || model_number == 175)
      return 22.0;
    return 10.0;
  }
  return 10.0;
}

double zcc_topo_link_lat(zcc_link_type_t type) {
  switch (type) {
  case ZCC_LINK_NVLINK: return 0.15;
  case ZCC_LINK_PCIE: return 0.25;
  case ZCC_LINK_SMP: return 0.4;
  case ZCC_LINK_NET: return 1.5;
  default: return 1.0;
  }
}

static double derived_bw(const zcc_topo_t *g, zcc_link_type_t type, int gen,
                         int width, int a, int b) {
  switch (type) {
  case ZCC_LINK_NVLINK: return zcc_topo_nvlink_bw(gen, width);
  case ZCC_LINK_PCIE: return zcc_topo_pcie_bw(gen, width);
  case ZCC_LINK_SMP: {
    /* Same package: the on-die mesh, far faster than any PCIe link. */
    if (g->nodes[a].package == g->nodes[b].package) return 60.0;
    /* CPU models read "<vendor> <model number>|<name>" (hwloc's CPUVendor, CPUModelNumber). */
    char vendor[32] = "";
    int number = 0;
    sscanf(g->nodes[a].model, "%31s %d", vendor, &number);
    return zcc_topo_smp_bw(vendor, number);
  }
  case ZCC_LINK_NET: {
    const zcc_topo_node_t *nic = g->nodes[a].kind == ZCC_TOPO_NIC ? &g->nodes[a]
                                                                  : &g->nodes[b];
    return nic->speed > 0 ? nic->speed / 8.0 : 1.25;
  }
  default: return 1.0;
  }
}

zccResult_t zcc_topo_create(zcc_topo_t **out) {
  zcc_topo_t *g = calloc(1, sizeof(*g));
  if (!g) return zcc_error(zccSystemError, "topology: out of memory");
  *out = g;
  return zccSuccess;
}

void zcc_topo_free(zcc_topo_t *g) {
  if (!g) return;
  for (int i = 0; i < g->ntables; i++) {
    free(g->tables[i].rep);
    free(g->tables[i].edges);
    free(g->tables[i].edge_of);
    free(g->tables[i].paths);
  }
  free(g->tables);
  free(g->nodes);
  free(g->links);
  free(g->hosts);
  free(g);
}

static zccResult_t grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return zccSuccess;
  int ncap = *cap ? *cap : 16;
  while (ncap < need) ncap *= 2;
  void *p = realloc(*arr, (size_t)ncap * elem);
  if (!p) return zcc_error(zccSystemError, "topology: out of memory");
  *arr = p;
  *cap = ncap;
  return zccSuccess;
}

static int copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap) return -1;
  memcpy(dst, src, n + 1);
  return 0;
}

zccResult_t zcc_topo_add_host(zcc_topo_t *g, const char *name, int *index) {
  if (g->finalized)
    return zcc_error(zccInternalError, "topology: host added after finalize");
  if (g->nhosts >= ZCC_TOPO_MAX_HOSTS)
    return zcc_error(zccInvalidArgument, "topology: more than %d hosts",
                     ZCC_TOPO_MAX_HOSTS);
  ZCC_CHECK(grow((void **)&g->hosts, &g->cap_hosts, g->nhosts + 1,
                 sizeof(zcc_topo_host_t)));
  zcc_topo_host_t *h = &g->hosts[g->nhosts];
  memset(h, 0, sizeof(*h));
  if (copy_str(h->name, sizeof(h->name), name) != 0)
    return zcc_error(zccInvalidArgument,
                     "topology: host name '%.32s...' is longer than %d bytes",
                     name, ZCC_TOPO_NAME_LEN - 1);
  h->first = g->nnodes;
  h->table = -1;
  if (index) *index = g->nhosts;
  g->nhosts++;
  return zccSuccess;
}

int zcc_topo_find(const zcc_topo_t *g, int host, const char *id) {
  if (host >= 0) {
    if (host >= g->nhosts) return -1;
    const zcc_topo_host_t *h = &g->hosts[host];
    for (int i = h->first; i < h->first + h->nnodes; i++)
      if (strcmp(g->nodes[i].id, id) == 0) return i;
    return -1;
  }
  /* Networks come before the first host. */
  int end = g->nhosts ? g->hosts[0].first : g->nnodes;
  for (int i = 0; i < end; i++)
    if (strcmp(g->nodes[i].id, id) == 0) return i;
  return -1;
}

zccResult_t zcc_topo_add_node(zcc_topo_t *g, int host, zcc_topo_kind_t kind,
                              const char *id, int *index) {
  if (g->finalized)
    return zcc_error(zccInternalError, "topology: node added after finalize");
  if (kind < 0 || kind >= ZCC_TOPO_KIND_COUNT)
    return zcc_error(zccInvalidArgument, "topology: node kind %d is invalid",
                     (int)kind);
  if ((kind == ZCC_TOPO_NET) != (host < 0))
    return zcc_error(zccInvalidArgument,
                     "topology: node '%s': networks, and only networks, belong "
                     "to no host", id);
  if (host >= 0) {
    if (host != g->nhosts - 1 ||
        g->hosts[host].first + g->hosts[host].nnodes != g->nnodes)
      return zcc_error(zccInternalError,
                       "topology: nodes of host %d must be added together", host);
    if (g->hosts[host].nnodes >= ZCC_TOPO_MAX_HOST_NODES)
      return zcc_error(zccInvalidArgument, "topology: host '%s' has more than %d nodes",
                       g->hosts[host].name, ZCC_TOPO_MAX_HOST_NODES);
  } else if (g->nhosts > 0) {
    return zcc_error(zccInternalError,
                     "topology: network '%s' added after the first host", id);
  }
  if (g->nnodes >= ZCC_TOPO_MAX_NODES)
    return zcc_error(zccInvalidArgument, "topology: more than %d nodes",
                     ZCC_TOPO_MAX_NODES);
  if (!*id) return zcc_error(zccInvalidArgument, "topology: a node has an empty id");
  if (strlen(id) >= ZCC_TOPO_ID_LEN)
    return zcc_error(zccInvalidArgument,
                     "topology: node id '%.32s...' is longer than %d bytes", id,
                     ZCC_TOPO_ID_LEN - 1);
  if (zcc_topo_find(g, host, id) >= 0)
    return zcc_error(zccInvalidArgument, "topology: node id '%s' appears twice%s%s", id,
                     host >= 0 ? " in host " : " among networks",
                     host >= 0 ? g->hosts[host].name : "");
  ZCC_CHECK(grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1,
                 sizeof(zcc_topo_node_t)));
  zcc_topo_node_t *n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  n->host = host;
  strcpy(n->id, id);
  n->dev = -1;
  n->package = -1;
  n->net = -1;
  if (host >= 0) g->hosts[host].nnodes++;
  if (index) *index = g->nnodes;
  g->nnodes++;
  return zccSuccess;
}

zccResult_t zcc_topo_add_link(zcc_topo_t *g, int a, int b, zcc_link_type_t type,
                              int gen, int width, double bw, double lat) {
  if (g->finalized)
    return zcc_error(zccInternalError, "topology: link added after finalize");
  if (a < 0 || b < 0 || a >= g->nnodes || b >= g->nnodes)
    return zcc_error(zccInvalidArgument, "topology: link between nodes %d and %d: no such node",
                     a, b);
  if (a == b)
    return zcc_error(zccInvalidArgument, "topology: link from '%s' to itself",
                     g->nodes[a].id);
  if (type < 0 || type >= ZCC_LINK_TYPE_COUNT)
    return zcc_error(zccInvalidArgument, "topology: link type %d is invalid", (int)type);
  const zcc_topo_node_t *na = &g->nodes[a], *nb = &g->nodes[b];
  int is_net = na->kind == ZCC_TOPO_NET || nb->kind == ZCC_TOPO_NET;
  if (is_net) {
    const zcc_topo_node_t *other = na->kind == ZCC_TOPO_NET ? nb : na;
    if (type != ZCC_LINK_NET || other->kind != ZCC_TOPO_NIC)
      return zcc_error(zccInvalidArgument,
                       "topology: network links join a nic and a network, not %s '%s'",
                       zcc_topo_kind_name(other->kind), other->id);
  } else {
    if (type == ZCC_LINK_NET)
      return zcc_error(zccInvalidArgument,
                       "topology: link '%s'-'%s' of type net does not reach a network",
                       na->id, nb->id);
    if (na->host != nb->host)
      return zcc_error(zccInvalidArgument,
                       "topology: link '%s'-'%s' joins two hosts; hosts meet only "
                       "through networks", na->id, nb->id);
    if (type == ZCC_LINK_SMP &&
        (na->kind != ZCC_TOPO_CPU || nb->kind != ZCC_TOPO_CPU))
      return zcc_error(zccInvalidArgument,
                       "topology: smp link '%s'-'%s' must join two cpus", na->id, nb->id);
    if (type == ZCC_LINK_NVLINK) {
      int ok_a = na->kind == ZCC_TOPO_GPU || na->kind == ZCC_TOPO_NVS ||
                 na->kind == ZCC_TOPO_CPU;
      int ok_b = nb->kind == ZCC_TOPO_GPU || nb->kind == ZCC_TOPO_NVS ||
                 nb->kind == ZCC_TOPO_CPU;
      if (!ok_a || !ok_b || (na->kind != ZCC_TOPO_GPU && nb->kind != ZCC_TOPO_GPU))
        return zcc_error(zccInvalidArgument,
                         "topology: nvlink '%s'-'%s' must join a gpu to a gpu, "
                         "nvswitch or cpu", na->id, nb->id);
    }
  }
  if (gen < 0 || gen > 16 || width < 0 || width > 1024)
    return zcc_error(zccInvalidArgument,
                     "topology: link '%s'-'%s': generation %d / width %d out of range",
                     na->id, nb->id, gen, width);
  if (!(bw <= ZCC_TOPO_MAX_BW) || !(lat <= ZCC_TOPO_MAX_LAT) || isnan(bw) || isnan(lat))
    return zcc_error(zccInvalidArgument,
                     "topology: link '%s'-'%s': bandwidth %g GB/s or latency %g us out of range",
                     na->id, nb->id, bw, lat);
  ZCC_CHECK(grow((void **)&g->links, &g->cap_links, g->nlinks + 1,
                 sizeof(zcc_topo_link_t)));
  zcc_topo_link_t *l = &g->links[g->nlinks++];
  l->a = a;
  l->b = b;
  l->type = type;
  l->gen = gen;
  l->width = width;
  l->bw = bw > 0 ? bw : derived_bw(g, type, gen, width, a, b);
  l->lat = lat >= 0 ? lat : zcc_topo_link_lat(type);
  return zccSuccess;
}

zccResult_t zcc_topo_attach_nets(zcc_topo_t *g, int host) {
  if (host < 0 || host >= g->nhosts)
    return zcc_error(zccInternalError, "topology: no host %d to attach networks to", host);
  const zcc_topo_host_t *h = &g->hosts[host];
  for (int i = h->first; i < h->first + h->nnodes; i++) {
    const zcc_topo_node_t *n = &g->nodes[i];
    if (n->kind != ZCC_TOPO_NIC || n->net < 0) continue;
    if (n->net >= g->nnodes || g->nodes[n->net].kind != ZCC_TOPO_NET)
      return zcc_error(zccInvalidArgument, "topology: nic '%s' names a network that is not one",
                       n->id);
    ZCC_CHECK(zcc_topo_add_link(g, i, n->net, ZCC_LINK_NET, 0, 0, 0, -1));
  }
  return zccSuccess;
}

int zcc_topo_count(const zcc_topo_t *g, int host, zcc_topo_kind_t kind) {
  int first = 0, n = g->nnodes, c = 0;
  if (host >= 0 && host < g->nhosts) {
    first = g->hosts[host].first;
    n = g->hosts[host].nnodes;
  }
  for (int i = first; i < first + n; i++) c += g->nodes[i].kind == kind;
  return c;
}

/* Doubles written as %.6g text and read back must compare equal. */
static int close_enough(double x, double y) {
  return fabs(x - y) <= 1e-5 * fmax(fabs(x), fabs(y)) + 1e-9;
}

int zcc_topo_equal(const zcc_topo_t *a, const zcc_topo_t *b, char *why,
                   size_t whylen) {
  char dummy[8];
  if (!why) {
    why = dummy;
    whylen = sizeof(dummy);
  }
  if (a->nhosts != b->nhosts) {
    snprintf(why, whylen, "%d hosts against %d", a->nhosts, b->nhosts);
    return 0;
  }
  if (a->nnodes != b->nnodes) {
    snprintf(why, whylen, "%d nodes against %d", a->nnodes, b->nnodes);
    return 0;
  }
  if (a->nlinks != b->nlinks) {
    snprintf(why, whylen, "%d links against %d", a->nlinks, b->nlinks);
    return 0;
  }
  for (int i = 0; i < a->nhosts; i++) {
    const zcc_topo_host_t *x = &a->hosts[i], *y = &b->hosts[i];
    if (strcmp(x->name, y->name) || x->first != y->first || x->nnodes != y->nnodes) {
      snprintf(why, whylen, "host %d: '%s' (%d nodes) against '%s' (%d nodes)", i,
               x->name, x->nnodes, y->name, y->nnodes);
      return 0;
    }
  }
  for (int i = 0; i < a->nnodes; i++) {
    const zcc_topo_node_t *x = &a->nodes[i], *y = &b->nodes[i];
    if (x->kind != y->kind || x->host != y->host || strcmp(x->id, y->id) ||
        strcmp(x->bus, y->bus) || strcmp(x->model, y->model) || x->dev != y->dev ||
        x->package != y->package || x->arch != y->arch ||
        !close_enough(x->speed, y->speed) || x->net != y->net) {
      snprintf(why, whylen, "node %d ('%s' of host %d) differs", i, x->id, x->host);
      return 0;
    }
  }
  for (int i = 0; i < a->nlinks; i++) {
    const zcc_topo_link_t *x = &a->links[i], *y = &b->links[i];
    if (x->a != y->a || x->b != y->b || x->type != y->type || x->gen != y->gen ||
        x->width != y->width || !close_enough(x->bw, y->bw) ||
        !close_enough(x->lat, y->lat)) {
      snprintf(why, whylen, "link %d ('%s'-'%s') differs", i, a->nodes[x->a].id,
               a->nodes[x->b].id);
      return 0;
    }
  }
  return 1;
}

zccResult_t zcc_topo_replicate(const zcc_topo_t *g, int copies, zcc_topo_t **out) {
  if (copies < 1 || (int64_t)copies * g->nhosts > ZCC_TOPO_MAX_HOSTS)
    return zcc_error(zccInvalidArgument, "topology: cannot make %d copies of %d hosts",
                     copies, g->nhosts);
  zcc_topo_t *r = NULL;
  ZCC_CHECK(zcc_topo_create(&r));
  zccResult_t res = zccSuccess;
  int nnets = 0;
  /* Networks first, then each copy of each host. */
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].host >= 0) continue;
    int idx;
    ZCC_CHECK_GOTO(zcc_topo_add_node(r, -1, ZCC_TOPO_NET, g->nodes[i].id, &idx), res, fail);
    r->nodes[idx] = g->nodes[i];
    nnets++;
  }
  int *map = malloc(sizeof(int) * (size_t)(g->nnodes ? g->nnodes : 1));
  if (!map) {
    res = zcc_error(zccSystemError, "topology: out of memory");
    goto fail;
  }
  for (int i = 0; i < g->nnodes; i++) map[i] = g->nodes[i].host < 0 ? zcc_topo_find(r, -1, g->nodes[i].id) : -1;
  for (int c = 0; c < copies; c++) {
    for (int h = 0; h < g->nhosts; h++) {
      const zcc_topo_host_t *src = &g->hosts[h];
      char name[ZCC_TOPO_NAME_LEN];
      if (copies == 1) snprintf(name, sizeof(name), "%s", src->name);
      else snprintf(name, sizeof(name), "%.50s-%d", src->name, c);
      int nh;
      ZCC_CHECK_GOTO(zcc_topo_add_host(r, name, &nh), res, fail_map);
      for (int i = src->first; i < src->first + src->nnodes; i++) {
        int idx;
        ZCC_CHECK_GOTO(zcc_topo_add_node(r, nh, g->nodes[i].kind, g->nodes[i].id, &idx),
                       res, fail_map);
        r->nodes[idx] = g->nodes[i];
        r->nodes[idx].host = nh;
        if (g->nodes[i].net >= 0) r->nodes[idx].net = map[g->nodes[i].net];
        map[i] = idx;
      }
      for (int l = 0; l < g->nlinks; l++) {
        const zcc_topo_link_t *k = &g->links[l];
        int ha = g->nodes[k->a].host, hb = g->nodes[k->b].host;
        if (ha != h && hb != h) continue;
        ZCC_CHECK_GOTO(zcc_topo_add_link(r, map[k->a], map[k->b], k->type, k->gen,
                                         k->width, k->bw, k->lat),
                       res, fail_map);
      }
    }
  }
  free(map);
  *out = r;
  return zccSuccess;
fail_map:
  free(map);
fail:
  zcc_topo_free(r);
  return res;
}
