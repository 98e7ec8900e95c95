/*
 * The graph as JSON (docs/topo-json.md), through json-c. Loading checks
 * every field's type and range and names the first bad one with its
 * place (host, node or link), so a hostile file is an error and nothing
 * more. Hosts identical to an earlier one are dumped as "same_as".
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "check.h"
#include "debug.h"
#include "topo.h"

#define FORMAT_NAME "zcc-topo"
#define FORMAT_VERSION 1
#define MAX_FILE_BYTES (256u << 20)
#define MAX_DEPTH 16

/* ---- dump ---- */

static int add_str(json_object *o, const char *key, const char *v) {
  json_object *s = json_object_new_string(v);
  return s ? json_object_object_add(o, key, s) : -1;
}
static int add_int(json_object *o, const char *key, int64_t v) {
  json_object *s = json_object_new_int64(v);
  return s ? json_object_object_add(o, key, s) : -1;
}
/* Six significant digits keep dumps readable and reload within 1e-5. */
static int add_num(json_object *o, const char *key, double v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.6g", v);
  json_object *s = json_object_new_double_s(v, buf);
  return s ? json_object_object_add(o, key, s) : -1;
}

static json_object *dump_node(const zcc_topo_t *g, const zcc_topo_node_t *n) {
  json_object *o = json_object_new_object();
  if (!o) return NULL;
  int bad = add_str(o, "id", n->id) || add_str(o, "kind", zcc_topo_kind_name(n->kind));
  if (n->bus[0]) bad |= add_str(o, "bus", n->bus);
  if (n->model[0]) bad |= add_str(o, "model", n->model);
  if (n->dev >= 0) bad |= add_int(o, "dev", n->dev);
  if (n->package >= 0) bad |= add_int(o, "package", n->package);
  if (n->arch) bad |= add_int(o, "arch", n->arch);
  if (n->speed > 0) bad |= add_num(o, "speed_gbps", n->speed);
  if (n->net >= 0) bad |= add_str(o, "net", g->nodes[n->net].id);
  if (bad) {
    json_object_put(o);
    return NULL;
  }
  return o;
}

static json_object *dump_link(const zcc_topo_t *g, const zcc_topo_link_t *l) {
  json_object *o = json_object_new_object();
  if (!o) return NULL;
  int bad = add_str(o, "a", g->nodes[l->a].id) || add_str(o, "b", g->nodes[l->b].id) ||
            add_str(o, "type", zcc_topo_link_name(l->type));
  if (l->gen) bad |= add_int(o, "gen", l->gen);
  if (l->width) bad |= add_int(o, "width", l->width);
  bad |= add_num(o, "bw", l->bw) || add_num(o, "lat", l->lat);
  if (bad) {
    json_object_put(o);
    return NULL;
  }
  return o;
}

/* 0 on success; the tree is freed by the caller. */
static int dump_tree(const zcc_topo_t *g, json_object *root) {
  if (add_str(root, "format", FORMAT_NAME) || add_int(root, "version", FORMAT_VERSION))
    return -1;
  json_object *nets = json_object_new_array();
  if (!nets || json_object_object_add(root, "networks", nets)) return -1;
  for (int i = 0; i < g->nnodes; i++) {
    const zcc_topo_node_t *n = &g->nodes[i];
    if (n->kind != ZCC_TOPO_NET) continue;
    json_object *o = json_object_new_object();
    if (!o || json_object_array_add(nets, o)) return -1;
    if (add_str(o, "id", n->id)) return -1;
    if (n->model[0] && add_str(o, "type", n->model)) return -1;
  }
  json_object *hosts = json_object_new_array();
  if (!hosts || json_object_object_add(root, "hosts", hosts)) return -1;
  /* Per-host link lists, in link order (nets excluded: implied by NICs). */
  int *first_of_table = NULL;
  if (g->finalized && g->ntables > 0) {
    first_of_table = malloc(sizeof(int) * (size_t)g->ntables);
    if (!first_of_table) return -1;
    for (int t = 0; t < g->ntables; t++) first_of_table[t] = -1;
  }
  int *cnt = calloc((size_t)g->nhosts + 1, sizeof(int));
  int *idx = malloc(sizeof(int) * (size_t)(g->nlinks + 1));
  int rc = -1;
  if (!cnt || !idx) goto out;
  for (int l = 0; l < g->nlinks; l++)
    if (g->links[l].type != ZCC_LINK_NET) cnt[g->nodes[g->links[l].a].host + 1]++;
  for (int h = 0; h < g->nhosts; h++) cnt[h + 1] += cnt[h];
  {
    int *fill = calloc((size_t)g->nhosts + 1, sizeof(int));
    if (!fill) goto out;
    for (int l = 0; l < g->nlinks; l++) {
      if (g->links[l].type == ZCC_LINK_NET) continue;
      int h = g->nodes[g->links[l].a].host;
      idx[cnt[h] + fill[h]++] = l;
    }
    free(fill);
  }
  for (int h = 0; h < g->nhosts; h++) {
    const zcc_topo_host_t *host = &g->hosts[h];
    json_object *o = json_object_new_object();
    if (!o || json_object_array_add(hosts, o) || add_str(o, "name", host->name)) goto out;
    if (first_of_table) {
      int t = host->table;
      if (first_of_table[t] >= 0) {
        if (add_str(o, "same_as", g->hosts[first_of_table[t]].name)) goto out;
        continue;
      }
      first_of_table[t] = h;
    }
    json_object *nodes = json_object_new_array(), *links = json_object_new_array();
    if (!nodes || json_object_object_add(o, "nodes", nodes)) {
      json_object_put(links);
      goto out;
    }
    if (!links || json_object_object_add(o, "links", links)) goto out;
    for (int i = host->first; i < host->first + host->nnodes; i++) {
      json_object *n = dump_node(g, &g->nodes[i]);
      if (!n || json_object_array_add(nodes, n)) goto out;
    }
    for (int k = cnt[h]; k < cnt[h + 1]; k++) {
      json_object *l = dump_link(g, &g->links[idx[k]]);
      if (!l || json_object_array_add(links, l)) goto out;
    }
  }
  rc = 0;
out:
  free(cnt);
  free(idx);
  free(first_of_table);
  return rc;
}

zccResult_t zcc_topo_dump_json(const zcc_topo_t *g, int pretty, char **out) {
  json_object *root = json_object_new_object();
  if (!root || dump_tree(g, root) != 0) {
    json_object_put(root);
    return zcc_error(zccSystemError, "topology: out of memory writing json");
  }
  int flags = JSON_C_TO_STRING_NOSLASHESCAPE |
              (pretty ? JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED : JSON_C_TO_STRING_PLAIN);
  const char *s = json_object_to_json_string_ext(root, flags);
  char *copy = s ? strdup(s) : NULL;
  json_object_put(root);
  if (!copy) return zcc_error(zccSystemError, "topology: out of memory writing json");
  *out = copy;
  return zccSuccess;
}

zccResult_t zcc_topo_dump_file(const zcc_topo_t *g, const char *path) {
  char *text;
  ZCC_CHECK(zcc_topo_dump_json(g, 1, &text));
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    free(text);
    return zcc_error(zccSystemError, "topology: cannot write %s: %s", path, strerror(e));
  }
  int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF;
  bad |= fclose(f) != 0;
  free(text);
  if (bad)
    return zcc_error(zccSystemError, "topology: writing %s failed: %s", path, strerror(errno));
  ZCC_INFO(TOPO, "topology written to %s", path);
  return zccSuccess;
}

/* ---- load ---- */

typedef struct loader {
  const char *what; /* file name for messages */
  zcc_topo_t *g;
  /* host name -> host index, open addressing */
  int *slots;
  size_t nslots;
  int *lfirst, *lend; /* per host: its links, [lfirst, lend) */
} loader_t;

#define LERR(L, ...) zcc_error(zccInvalidArgument, __VA_ARGS__)

/* The graph refused something: its message, prefixed by the file's name. */
static zccResult_t relay(loader_t *L) {
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", zcc_last_error());
  return zcc_error(zccInvalidArgument, "%s: %s", L->what, msg);
}

static const char *type_name(json_object *o) {
  return json_type_to_name(json_object_get_type(o));
}

static zccResult_t want(loader_t *L, json_object *o, json_type t, const char *where) {
  if (json_object_get_type(o) != t)
    return LERR(L, "%s: %s must be %s, not %s", L->what, where, json_type_to_name(t),
                type_name(o));
  return zccSuccess;
}

/* Every key of `o` must be one of `allowed` (NULL-terminated). */
static zccResult_t only_keys(loader_t *L, json_object *o, const char *const *allowed,
                             const char *where) {
  json_object_object_foreach(o, key, val) {
    (void)val;
    int ok = 0;
    for (int i = 0; allowed[i]; i++) ok |= strcmp(key, allowed[i]) == 0;
    if (!ok) return LERR(L, "%s: %s has an unknown field '%.40s'", L->what, where, key);
  }
  return zccSuccess;
}

static zccResult_t get_str(loader_t *L, json_object *o, const char *key, int required,
                           size_t cap, const char **out, const char *where) {
  json_object *v;
  *out = NULL;
  if (!json_object_object_get_ex(o, key, &v)) {
    if (required) return LERR(L, "%s: %s has no '%s'", L->what, where, key);
    return zccSuccess;
  }
  if (json_object_get_type(v) != json_type_string)
    return LERR(L, "%s: %s: '%s' must be a string, not %s", L->what, where, key, type_name(v));
  const char *s = json_object_get_string(v);
  size_t n = (size_t)json_object_get_string_len(v);
  if (strlen(s) != n)
    return LERR(L, "%s: %s: '%s' holds a NUL byte", L->what, where, key);
  if (n >= cap)
    return LERR(L, "%s: %s: '%s' is longer than %zu bytes", L->what, where, key, cap - 1);
  *out = s;
  return zccSuccess;
}

static zccResult_t get_int(loader_t *L, json_object *o, const char *key, int64_t lo, int64_t hi,
                           int *out, const char *where) {
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v)) return zccSuccess;
  if (json_object_get_type(v) != json_type_int)
    return LERR(L, "%s: %s: '%s' must be an integer, not %s", L->what, where, key, type_name(v));
  errno = 0;
  int64_t x = json_object_get_int64(v);
  if (errno == ERANGE || x < lo || x > hi)
    return LERR(L, "%s: %s: '%s' is out of range [%lld, %lld]", L->what, where, key,
                (long long)lo, (long long)hi);
  *out = (int)x;
  return zccSuccess;
}

static zccResult_t get_num(loader_t *L, json_object *o, const char *key, double lo, double hi,
                           double *out, const char *where) {
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v)) return zccSuccess;
  json_type t = json_object_get_type(v);
  if (t != json_type_int && t != json_type_double)
    return LERR(L, "%s: %s: '%s' must be a number, not %s", L->what, where, key, type_name(v));
  double x = json_object_get_double(v);
  if (!isfinite(x) || x < lo || x > hi)
    return LERR(L, "%s: %s: '%s' is %g, out of range [%g, %g]", L->what, where, key, x, lo, hi);
  *out = x;
  return zccSuccess;
}

static size_t name_hash(const char *s) {
  size_t h = 5381;
  while (*s) h = h * 33 + (unsigned char)*s++;
  return h;
}

/* Slot holding host `name`, or the empty slot where it would go. */
static size_t host_slot(loader_t *L, const char *name) {
  size_t i = name_hash(name) & (L->nslots - 1);
  while (L->slots[i] >= 0 && strcmp(L->g->hosts[L->slots[i]].name, name) != 0)
    i = (i + 1) & (L->nslots - 1);
  return i;
}

static zccResult_t load_node(loader_t *L, int h, json_object *o, int pos) {
  static const char *const keys[] = {"id", "kind", "bus", "model", "dev", "package",
                                     "arch", "speed_gbps", "net", NULL};
  char where[160];
  snprintf(where, sizeof(where), "host '%s' node %d", L->g->hosts[h].name, pos);
  ZCC_CHECK(want(L, o, json_type_object, where));
  ZCC_CHECK(only_keys(L, o, keys, where));
  const char *id, *kind, *bus, *model, *net;
  ZCC_CHECK(get_str(L, o, "id", 1, ZCC_TOPO_ID_LEN, &id, where));
  snprintf(where, sizeof(where), "host '%s' node '%s'", L->g->hosts[h].name, id);
  ZCC_CHECK(get_str(L, o, "kind", 1, 16, &kind, where));
  int k = zcc_topo_kind_parse(kind);
  if (k < 0 || k == ZCC_TOPO_NET)
    return LERR(L, "%s: %s: kind '%s' is not one of gpu, cpu, pci, nvswitch, nic", L->what,
                where, kind);
  ZCC_CHECK(get_str(L, o, "bus", 0, ZCC_TOPO_BUS_LEN, &bus, where));
  ZCC_CHECK(get_str(L, o, "model", 0, ZCC_TOPO_NAME_LEN, &model, where));
  ZCC_CHECK(get_str(L, o, "net", 0, ZCC_TOPO_ID_LEN, &net, where));
  int dev = -1, package = -1, arch = 0;
  double speed = 0;
  ZCC_CHECK(get_int(L, o, "dev", 0, 1 << 20, &dev, where));
  ZCC_CHECK(get_int(L, o, "package", 0, 1 << 16, &package, where));
  ZCC_CHECK(get_int(L, o, "arch", 0, 10000, &arch, where));
  ZCC_CHECK(get_num(L, o, "speed_gbps", 0, 8 * ZCC_TOPO_MAX_BW, &speed, where));
  int netidx = -1;
  if (net) {
    if (k != ZCC_TOPO_NIC) return LERR(L, "%s: %s: only nics attach to a network", L->what, where);
    netidx = zcc_topo_find(L->g, -1, net);
    if (netidx < 0)
      return LERR(L, "%s: %s: network '%s' is not in \"networks\"", L->what, where, net);
  }
  int idx;
  zccResult_t res = zcc_topo_add_node(L->g, h, (zcc_topo_kind_t)k, id, &idx);
  if (res != zccSuccess) return relay(L);
  zcc_topo_node_t *n = &L->g->nodes[idx];
  if (bus) strcpy(n->bus, bus);
  if (model) strcpy(n->model, model);
  n->dev = dev;
  n->package = package;
  n->arch = arch;
  n->speed = speed;
  n->net = netidx;
  return zccSuccess;
}

static zccResult_t load_link(loader_t *L, int h, json_object *o, int pos) {
  static const char *const keys[] = {"a", "b", "type", "gen", "width", "bw", "lat", NULL};
  char where[200];
  snprintf(where, sizeof(where), "host '%s' link %d", L->g->hosts[h].name, pos);
  ZCC_CHECK(want(L, o, json_type_object, where));
  ZCC_CHECK(only_keys(L, o, keys, where));
  const char *a, *b, *type;
  ZCC_CHECK(get_str(L, o, "a", 1, ZCC_TOPO_ID_LEN, &a, where));
  ZCC_CHECK(get_str(L, o, "b", 1, ZCC_TOPO_ID_LEN, &b, where));
  snprintf(where, sizeof(where), "host '%s' link %d ('%s'-'%s')", L->g->hosts[h].name, pos, a, b);
  ZCC_CHECK(get_str(L, o, "type", 1, 16, &type, where));
  int t = zcc_topo_link_parse(type);
  if (t < 0 || t == ZCC_LINK_NET)
    return LERR(L, "%s: %s: type '%s' is not one of nvlink, pcie, smp", L->what, where, type);
  int gen = 0, width = 0;
  double bw = 0, lat = -1;
  ZCC_CHECK(get_int(L, o, "gen", 0, 16, &gen, where));
  ZCC_CHECK(get_int(L, o, "width", 0, 1024, &width, where));
  ZCC_CHECK(get_num(L, o, "bw", 1e-6, ZCC_TOPO_MAX_BW, &bw, where));
  ZCC_CHECK(get_num(L, o, "lat", 0, ZCC_TOPO_MAX_LAT, &lat, where));
  int ia = zcc_topo_find(L->g, h, a), ib = zcc_topo_find(L->g, h, b);
  if (ia < 0 || ib < 0)
    return LERR(L, "%s: %s: no node '%s' in this host", L->what, where, ia < 0 ? a : b);
  zccResult_t res = zcc_topo_add_link(L->g, ia, ib, (zcc_link_type_t)t, gen, width, bw, lat);
  if (res != zccSuccess) return relay(L);
  return zccSuccess;
}

/* A host "same_as" an earlier one: its nodes and links, copied. */
static zccResult_t copy_host(loader_t *L, int h, int src) {
  zcc_topo_t *g = L->g;
  int first = g->hosts[src].first, n = g->hosts[src].nnodes;
  int base = g->nnodes;
  for (int i = 0; i < n; i++) {
    int idx;
    zcc_topo_node_t copy = g->nodes[first + i]; /* adding may move g->nodes */
    ZCC_CHECK(zcc_topo_add_node(g, h, copy.kind, copy.id, &idx));
    g->nodes[idx] = copy;
    g->nodes[idx].host = h;
  }
  for (int l = L->lfirst[src]; l < L->lend[src]; l++) {
    zcc_topo_link_t k = g->links[l];
    if (k.type == ZCC_LINK_NET) continue;
    ZCC_CHECK(zcc_topo_add_link(g, k.a - first + base, k.b - first + base, k.type, k.gen,
                                k.width, k.bw, k.lat));
  }
  return zccSuccess;
}

static zccResult_t load_host_body(loader_t *L, int h, json_object *nodes, json_object *links,
                                  const char *same, const char *where);

static zccResult_t load_host(loader_t *L, json_object *o, int pos) {
  static const char *const keys[] = {"name", "nodes", "links", "same_as", NULL};
  char where[120];
  snprintf(where, sizeof(where), "host %d", pos);
  ZCC_CHECK(want(L, o, json_type_object, where));
  ZCC_CHECK(only_keys(L, o, keys, where));
  const char *name, *same;
  ZCC_CHECK(get_str(L, o, "name", 1, ZCC_TOPO_NAME_LEN, &name, where));
  if (!*name) return LERR(L, "%s: %s has an empty name", L->what, where);
  snprintf(where, sizeof(where), "host '%s'", name);
  size_t slot = host_slot(L, name);
  if (L->slots[slot] >= 0) return LERR(L, "%s: host name '%s' appears twice", L->what, name);
  ZCC_CHECK(get_str(L, o, "same_as", 0, ZCC_TOPO_NAME_LEN, &same, where));
  json_object *nodes = NULL, *links = NULL;
  json_object_object_get_ex(o, "nodes", &nodes);
  json_object_object_get_ex(o, "links", &links);
  int h;
  ZCC_CHECK(zcc_topo_add_host(L->g, name, &h));
  L->slots[slot] = h;
  L->lfirst[h] = L->g->nlinks;
  zccResult_t res = load_host_body(L, h, nodes, links, same, where);
  L->lend[h] = L->g->nlinks;
  return res;
}

static zccResult_t load_host_body(loader_t *L, int h, json_object *nodes, json_object *links,
                                  const char *same, const char *where) {
  if (same) {
    if (nodes || links)
      return LERR(L, "%s: %s: a host with \"same_as\" has no nodes or links of its own",
                  L->what, where);
    size_t s = host_slot(L, same);
    if (L->slots[s] < 0 || L->slots[s] == h)
      return LERR(L, "%s: %s: same_as '%s' is not an earlier host", L->what, where, same);
    ZCC_CHECK(copy_host(L, h, L->slots[s]));
    return zcc_topo_attach_nets(L->g, h);
  }
  if (!nodes) return LERR(L, "%s: %s has no \"nodes\"", L->what, where);
  ZCC_CHECK(want(L, nodes, json_type_array, "\"nodes\""));
  size_t nn = json_object_array_length(nodes);
  if (nn > ZCC_TOPO_MAX_HOST_NODES)
    return LERR(L, "%s: %s has %zu nodes, more than %d", L->what, where, nn,
                ZCC_TOPO_MAX_HOST_NODES);
  for (size_t i = 0; i < nn; i++)
    ZCC_CHECK(load_node(L, h, json_object_array_get_idx(nodes, i), (int)i));
  if (links) {
    ZCC_CHECK(want(L, links, json_type_array, "\"links\""));
    size_t nl = json_object_array_length(links);
    for (size_t i = 0; i < nl; i++)
      ZCC_CHECK(load_link(L, h, json_object_array_get_idx(links, i), (int)i));
  }
  return zcc_topo_attach_nets(L->g, h);
}

static zccResult_t load_tree(loader_t *L, json_object *root) {
  static const char *const keys[] = {"format", "version", "networks", "hosts", NULL};
  ZCC_CHECK(want(L, root, json_type_object, "the top level"));
  ZCC_CHECK(only_keys(L, root, keys, "the top level"));
  const char *format;
  ZCC_CHECK(get_str(L, root, "format", 1, 32, &format, "the top level"));
  if (strcmp(format, FORMAT_NAME) != 0)
    return LERR(L, "%s: format is '%s', not '" FORMAT_NAME "'", L->what, format);
  int version = -1;
  if (!json_object_object_get_ex(root, "version", NULL))
    return LERR(L, "%s: the top level has no \"version\"", L->what);
  ZCC_CHECK(get_int(L, root, "version", 0, 1000, &version, "the top level"));
  if (version != FORMAT_VERSION)
    return LERR(L, "%s: version %d is not supported (this zcc reads version %d)", L->what,
                version, FORMAT_VERSION);
  json_object *nets, *hosts;
  if (json_object_object_get_ex(root, "networks", &nets)) {
    ZCC_CHECK(want(L, nets, json_type_array, "\"networks\""));
    size_t n = json_object_array_length(nets);
    for (size_t i = 0; i < n; i++) {
      static const char *const nkeys[] = {"id", "type", NULL};
      json_object *o = json_object_array_get_idx(nets, i);
      char where[64];
      snprintf(where, sizeof(where), "network %zu", i);
      ZCC_CHECK(want(L, o, json_type_object, where));
      ZCC_CHECK(only_keys(L, o, nkeys, where));
      const char *id, *type;
      ZCC_CHECK(get_str(L, o, "id", 1, ZCC_TOPO_ID_LEN, &id, where));
      ZCC_CHECK(get_str(L, o, "type", 0, ZCC_TOPO_NAME_LEN, &type, where));
      int idx;
      if (zcc_topo_add_node(L->g, -1, ZCC_TOPO_NET, id, &idx) != zccSuccess)
        return relay(L);
      if (type) strcpy(L->g->nodes[idx].model, type);
    }
  }
  if (!json_object_object_get_ex(root, "hosts", &hosts))
    return LERR(L, "%s: the top level has no \"hosts\"", L->what);
  ZCC_CHECK(want(L, hosts, json_type_array, "\"hosts\""));
  size_t n = json_object_array_length(hosts);
  if (n > ZCC_TOPO_MAX_HOSTS)
    return LERR(L, "%s: %zu hosts, more than %d", L->what, n, ZCC_TOPO_MAX_HOSTS);
  L->nslots = 16;
  while (L->nslots < 2 * n) L->nslots *= 2;
  L->slots = malloc(sizeof(int) * L->nslots);
  L->lfirst = malloc(sizeof(int) * (n + 1));
  L->lend = malloc(sizeof(int) * (n + 1));
  if (!L->slots || !L->lfirst || !L->lend) return zcc_error(zccSystemError, "topology: out of memory loading %s", L->what);
  for (size_t i = 0; i < L->nslots; i++) L->slots[i] = -1;
  for (size_t i = 0; i < n; i++)
    ZCC_CHECK(load_host(L, json_object_array_get_idx(hosts, i), (int)i));
  return zccSuccess;
}

zccResult_t zcc_topo_load_json(const char *text, size_t len, const char *what,
                               zcc_topo_t **out) {
  if (!text) return zcc_error(zccInvalidArgument, "topology: no json text");
  if (len > MAX_FILE_BYTES)
    return zcc_error(zccInvalidArgument, "%s: %zu bytes, more than the %u allowed", what, len,
                     MAX_FILE_BYTES);
  json_tokener *tok = json_tokener_new_ex(MAX_DEPTH);
  if (!tok) return zcc_error(zccSystemError, "topology: out of memory loading %s", what);
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  json_object *root = json_tokener_parse_ex(tok, text, (int)len);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t at = json_tokener_get_parse_end(tok);
  zccResult_t res = zccSuccess;
  if (jerr == json_tokener_continue || (!root && jerr == json_tokener_success)) {
    res = zcc_error(zccInvalidArgument, "%s: json ends early (%zu bytes)", what, len);
  } else if (jerr != json_tokener_success) {
    res = zcc_error(zccInvalidArgument, "%s: json syntax error at byte %zu: %s", what, at,
                    json_tokener_error_desc(jerr));
  } else {
    /* Only whitespace may follow the value. */
    for (size_t i = at; i < len; i++)
      if (text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '\t') {
        res = zcc_error(zccInvalidArgument, "%s: text after the json value at byte %zu", what, i);
        break;
      }
  }
  json_tokener_free(tok);
  if (res != zccSuccess) {
    json_object_put(root);
    return res;
  }
  loader_t L = {.what = what};
  res = zcc_topo_create(&L.g);
  if (res == zccSuccess) res = load_tree(&L, root);
  if (res == zccSuccess) res = zcc_topo_finalize(L.g);
  json_object_put(root);
  free(L.slots);
  free(L.lfirst);
  free(L.lend);
  if (res != zccSuccess) {
    zcc_topo_free(L.g);
    return res;
  }
  *out = L.g;
  return zccSuccess;
}

zccResult_t zcc_topo_load_file(const char *path, zcc_topo_t **out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return zcc_error(zccSystemError, "topology: cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return zcc_error(zccInvalidArgument, "topology: %s is not a regular file", path);
  }
  if ((size_t)st.st_size > MAX_FILE_BYTES) {
    close(fd);
    return zcc_error(zccInvalidArgument, "topology: %s has %lld bytes, more than the %u allowed",
                     path, (long long)st.st_size, MAX_FILE_BYTES);
  }
  size_t len = (size_t)st.st_size;
  char *buf = malloc(len + 1);
  if (!buf) {
    close(fd);
    return zcc_error(zccSystemError, "topology: out of memory reading %s", path);
  }
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, buf + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      free(buf);
      close(fd);
      return zcc_error(zccSystemError, "topology: reading %s failed: %s", path, strerror(e));
    }
    got += (size_t)r;
  }
  close(fd);
  buf[len] = '\0';
  zccResult_t res = zcc_topo_load_json(buf, len, path, out);
  free(buf);
  return res;
}
