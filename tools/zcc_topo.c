/*
 * zcc_topo: the topology zcc sees and what it would do with it.
 *
 *   zcc_topo                       detect this machine and show everything
 *   zcc_topo --file saved.json     the same for a saved graph
 *   zcc_topo --ranks 0-3,6         plan for these GPUs (graph order) only
 *   zcc_topo --json | --dot        the graph as JSON or Graphviz
 *   zcc_topo --params              every ZCC_* variable, value and help
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "comm.h"
#include "debug.h"
#include "device.h"
#include "param.h"
#include "perf_util.h"
#include "planner.h"
#include "topo.h"
#include "zcc.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: zcc_topo [--file FILE] [--ranks LIST | --gpus] [--json | --dot | --params]\n"
          "                [--paths all] [--no-plan] [--measure] [--measure-gpu]\n"
          "                [--explain SIZE [--coll NAME]]\n"
          "  --file FILE   load a saved graph (as ZCC_TOPO_FILE does) instead of detecting\n"
          "  --ranks LIST  plan for ranks on these GPUs, e.g. 0-7 or 0,2,4-6, counted in graph\n"
          "                order over all hosts (CPU nodes when there is no GPU)\n"
          "  --gpus        plan for every GPU (the default)\n"
          "  --json        print the graph as JSON (docs/topo-json.md) and nothing else\n"
          "  --dot         print the graph for Graphviz and nothing else\n"
          "  --params      list every ZCC_* variable with its value, default and help\n"
          "  --paths all   best paths between every pair of devices of every distinct host\n"
          "                (default: devices of the first host)\n"
          "  --no-plan     show the graph and paths only\n"
          "  --explain SIZE  why a collective of SIZE bytes (e.g. 64M) runs what it runs on these\n"
          "                ranks: the choice, every candidate's predicted time, why the others\n"
          "                cannot run, and the links ring 0 crosses (--coll: allreduce default)\n"
          "  --measure     measure the host link class as ZCC_TOPO_MEASURE=1 does (two ranks\n"
          "                of this process) and show it beside the table's figures\n"
          "  --measure-gpu the same for two GPU ranks of this process on GPU 0 (the link class\n"
          "                ranks sharing a GPU get: p2p, or GPU shm with ZCC_P2P_DISABLE=1)\n");
}

static int parse_list(const char *s, int max, int *out, int cap) {
  int n = 0;
  while (*s) {
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10), b;
    if (end == s || errno || a < 0 || a >= max) return -1;
    b = a;
    s = end;
    if (*s == '-') {
      s++;
      b = strtol(s, &end, 10);
      if (end == s || b < a || b >= max) return -1;
      s = end;
    }
    for (long i = a; i <= b; i++) {
      if (n >= cap) return -1;
      out[n++] = (int)i;
    }
    if (*s == ',') s++;
    else if (*s) return -1;
  }
  return n;
}

static void print_params(void) {
  printf("%-24s %-24s %-16s %s\n", "variable", "value", "default", "help");
  for (int i = 0;; i++) {
    const char *name, *value, *def, *help;
    if (zccGetParam(i, &name, &value, &def, &help) != zccSuccess) break;
    char full[64];
    snprintf(full, sizeof(full), "ZCC_%s", name);
    printf("%-24s %-24s %-16s %s\n", full, value, def, help);
  }
}

static void print_dot(const zcc_topo_t *g) {
  printf("graph zcc {\n  node [shape=box, fontsize=10];\n");
  for (int h = 0; h < g->nhosts; h++) {
    printf("  subgraph \"cluster_%d\" {\n    label=\"%s\";\n", h, g->hosts[h].name);
    for (int i = g->hosts[h].first; i < g->hosts[h].first + g->hosts[h].nnodes; i++)
      printf("    n%d [label=\"%s\\n%s\"];\n", i, g->nodes[i].id, g->nodes[i].model);
    printf("  }\n");
  }
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].kind == ZCC_TOPO_NET)
      printf("  n%d [shape=ellipse, label=\"%s\"];\n", i, g->nodes[i].id);
  for (int l = 0; l < g->nlinks; l++) {
    const zcc_topo_link_t *k = &g->links[l];
    printf("  n%d -- n%d [label=\"%s%s %.0f\"];\n", k->a, k->b, zcc_topo_link_name(k->type),
           k->width && k->type == ZCC_LINK_NVLINK ? "x" : "", k->bw);
  }
  printf("}\n");
}

static void print_host(const zcc_topo_t *g, int h) {
  const zcc_topo_host_t *host = &g->hosts[h];
  printf("host %s: %d nodes\n", host->name, host->nnodes);
  static const zcc_topo_kind_t order[] = {ZCC_TOPO_CPU, ZCC_TOPO_PCI, ZCC_TOPO_GPU, ZCC_TOPO_NVS,
                                          ZCC_TOPO_NIC};
  for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++)
    for (int i = host->first; i < host->first + host->nnodes; i++) {
      const zcc_topo_node_t *n = &g->nodes[i];
      if (n->kind != order[k]) continue;
      switch (n->kind) {
      case ZCC_TOPO_CPU:
        printf("  cpu  %-8s numa %d, socket %d, %s\n", n->id, n->dev, n->package, n->model);
        break;
      case ZCC_TOPO_GPU:
        printf("  gpu  %-8s %s cuda %d, sm_%d, %s\n", n->id, n->bus, n->dev, n->arch, n->model);
        break;
      case ZCC_TOPO_NIC:
        printf("  nic  %-8s %s %s port %d, %.0f Gb/s on %s\n", n->id, n->bus, n->model, n->dev,
               n->speed, n->net >= 0 ? g->nodes[n->net].id : "no network");
        break;
      default:
        printf("  %-4s %-8s %s %s\n", zcc_topo_kind_name(n->kind), n->id, n->bus, n->model);
        break;
      }
    }
  printf("  links:\n");
  for (int l = 0; l < g->nlinks; l++) {
    const zcc_topo_link_t *k = &g->links[l];
    if (g->nodes[k->a].host != h && g->nodes[k->b].host != h) continue;
    char what[32] = "";
    if (k->type == ZCC_LINK_PCIE && k->gen) snprintf(what, sizeof(what), "gen%d x%d", k->gen, k->width ? k->width : 16);
    if (k->type == ZCC_LINK_NVLINK) snprintf(what, sizeof(what), "%d x nvlink%d", k->width, k->gen);
    printf("    %-8s - %-8s %-7s %-14s %8.1f GB/s %5.2f us\n", g->nodes[k->a].id,
           g->nodes[k->b].id, zcc_topo_link_name(k->type), what, k->bw, k->lat);
  }
}

static int is_device(const zcc_topo_node_t *n) {
  return n->kind == ZCC_TOPO_GPU || n->kind == ZCC_TOPO_NIC || n->kind == ZCC_TOPO_CPU;
}

static void print_paths(const zcc_topo_t *g, int h) {
  const zcc_topo_host_t *host = &g->hosts[h];
  printf("best paths on %s (bandwidth GB/s each way, class):\n", host->name);
  for (int a = host->first; a < host->first + host->nnodes; a++) {
    if (!is_device(&g->nodes[a])) continue;
    for (int b = host->first; b < host->first + host->nnodes; b++) {
      if (a == b || !is_device(&g->nodes[b])) continue;
      if (g->nodes[a].kind == ZCC_TOPO_CPU && g->nodes[b].kind == ZCC_TOPO_CPU && b < a) continue;
      const zcc_topo_path_t *p = zcc_topo_path(g, a, b);
      int via[64], n = zcc_topo_path_nodes(g, a, b, via, 64);
      printf("  %-6s -> %-6s %8.1f  %-12s %d hops:", g->nodes[a].id, g->nodes[b].id, p->bw,
             zcc_topo_class_name(p->cls), p->hops);
      for (int i = 0; i < n; i++) printf(" %s", g->nodes[via[i]].id);
      printf("\n");
    }
  }
}

static void print_line(void *ctx, const char *line) {
  (void)ctx;
  printf("  %s\n", line);
}

/* What a communicator of these ranks runs: the lines it logs at creation
   (INFO TUNING), from the same function. */
static void print_decisions(const zcc_planner_t *p) {
  printf("\nwhat a communicator of these ranks runs (as it logs at ZCC_DEBUG_SUBSYS=TUNING):\n");
  zcc_select_ctx_t c;
  zcc_select_ctx_of_plan(p, &c);
  if (!p->cpu_ranks && p->nranks > ZCC_DEV_MAX_CONN_RANKS)
    printf("  (the model's view only: this version creates GPU communicators of at most %d\n"
           "  ranks, and refuses %d at init)\n", ZCC_DEV_MAX_CONN_RANKS, p->nranks);
  else if (!p->cpu_ranks && p->nnodes == 1 && p->nranks > ZCC_DEV_MAX_RANKS)
    printf("  more than %d GPUs: the connector kernels alone run (ring, tree; send/receive\n"
           "  and all-to-all over the per-peer connectors)\n", ZCC_DEV_MAX_RANKS);
  if (!p->cpu_ranks && p->nnodes > 1) {
    printf("  GPUs on %d hosts: pairs of one host over p2p (or shm), pairs across hosts over the\n"
           "  net transport's proxy; the connector kernels alone run (ring, tree; send/receive\n"
           "  over connectors), each ring crossing between hosts through the proxy\n",
           p->nnodes);
    if (c.min_local == c.max_local && c.min_local > 1)
      printf("  hier (allreduce): a ring reduce-scatter among each host's %d GPUs, an allreduce\n"
             "  of each GPU's block over its rail (the GPU of its local index on each of the %d\n"
             "  hosts, through the proxy), a ring all-gather among the host's GPUs\n"
             "  hier (all-gather): each GPU's block over its rail, then a ring all-gather among\n"
             "  the host's GPUs of what each gathered (%d blocks a GPU); reduce-scatter the\n"
             "  mirror (the host's ring first, into the staging buffer, then the rail)\n"
             "  hier (broadcast, reduce): along the root's rail, then each host's ring from its\n"
             "  rank there; reduce the mirror\n",
             c.min_local, p->nnodes, p->nnodes);
  }
  if (zcc_planner_decisions(&c, print_line, NULL) != zccSuccess)
    printf("  %s\n", zcc_last_error());
}

static void print_raw(void *ctx, const char *line) {
  (void)ctx;
  printf("%s\n", line);
}

static void print_plan(const zcc_planner_t *p) {
  if (zcc_planner_describe(p, print_raw, NULL) != zccSuccess) printf("%s\n", zcc_last_error());
  printf("\npredicted time (us) per collective and size; '-' cannot run\n");
  printf("%-13s %11s", "collective", "bytes");
  for (int a = 0; a < ZCC_ALGO_COUNT; a++)
    for (int q = 0; q < ZCC_PROTO_COUNT && zcc_planner_on_graph(a); q++) {
      char col[24];
      snprintf(col, sizeof(col), "%s/%s", zcc_algo_name(a), zcc_proto_name(q));
      printf(" %9.9s", col);
    }
  printf("  winner\n");
  static const zcc_coll_t colls[] = {ZCC_COLL_ALLREDUCE, ZCC_COLL_BROADCAST, ZCC_COLL_REDUCE,
                                     ZCC_COLL_ALLGATHER, ZCC_COLL_REDUCESCATTER,
                                     ZCC_COLL_ALLTOALL};
  for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++) {
    for (size_t b = 8; b <= ((size_t)1 << 30); b *= 8) {
      char row[512];
      zcc_planner_format_row(p, colls[c], b, row, sizeof(row));
      printf("%s\n", row);
    }
  }
  zcc_choice_t ch;
  if (zcc_planner_pick(p, ZCC_COLL_ALLREDUCE, 1 << 20, &ch) != zccSuccess)
    printf("\nZCC_ALGO / ZCC_PROTO: %s\n", zcc_last_error());
}

/*
 * --measure (--measure-gpu): what ZCC_TOPO_MEASURE=1 measures at communicator
 * creation, on two host ranks of this process (two ranks on GPU 0), beside
 * the table's figures, and the allreduce choices each gives.
 */
static int print_measure(int gpu) {
  setenv("ZCC_TOPO_MEASURE", "1", 1);
  setenv("ZCC_DEVICE", gpu ? "cuda" : "host", 1);
  zcc_param_reload();
  zccComm_t comms[2];
  const int on_gpu0[2] = {0, 0};
  if (zccCommInitAll(comms, 2, gpu ? on_gpu0 : NULL) != zccSuccess) {
    fprintf(stderr, "zcc_topo: %s: %s\n", gpu ? "--measure-gpu" : "--measure",
            zccGetLastError(NULL));
    return 1;
  }
  zcc_select_ctx_t m = comms[0]->select->ctx, t = m;
  t.measured = 0;
  double ta, tb;
  zcc_select_link_table(&t, &ta, &tb);
  printf("link class %s (2 %s ranks of this process):\n", zcc_topo_class_name(m.link_class),
         gpu ? "GPU 0" : "host");
  printf("  %-9s %10s %10s\n", "", "latency", "bandwidth");
  printf("  %-9s %7.2f us %5.2f GB/s\n", "table", ta, tb);
  printf("  %-9s %7.2f us %5.2f GB/s\n", "measured", m.alpha_us, m.bw_gbs);
  printf("allreduce on 2 ranks:  %11s  %-26s %s\n", "bytes", "table", "measured");
  for (size_t b = 8; b <= ((size_t)64 << 20); b *= 8) {
    zcc_choice_t ct, cm;
    /* GPU: unregistered buffers (staged), as allreduce_perf's */
    if (zcc_select(&t, ZCC_COLL_ALLREDUCE, b, gpu, &ct) != zccSuccess ||
        zcc_select(&m, ZCC_COLL_ALLREDUCE, b, gpu, &cm) != zccSuccess) {
      fprintf(stderr, "zcc_topo: %s\n", zcc_last_error());
      break;
    }
    char l[64], r[64];
    snprintf(l, sizeof(l), "%s %.1f us", zcc_algo_name(ct.algo), ct.time_us);
    snprintf(r, sizeof(r), "%s %.1f us", zcc_algo_name(cm.algo), cm.time_us);
    printf("                       %11zu  %-26s %s\n", b, l, r);
  }
  for (int i = 0; i < 2; i++) zccCommDestroy(comms[i]);
  return 0;
}

static int print_explain(const zcc_planner_t *p, const char *size, const char *coll_name) {
  size_t bytes;
  if (perf_parse_size(size, &bytes) != 0 || bytes == 0 || bytes > ((size_t)1 << 40)) {
    fprintf(stderr, "zcc_topo: --explain %s: not a size from 1 byte to 1 TiB (e.g. 4096, 64M)\n",
            size);
    return 2;
  }
  int coll = -1;
  for (int k = 0; k < ZCC_COLL_SENDRECV; k++)
    if (strcasecmp(coll_name, zcc_coll_name(k)) == 0) coll = k;
  if (coll < 0) {
    fprintf(stderr, "zcc_topo: --coll %s: use allreduce, broadcast, reduce, allgather, "
            "reducescatter or alltoall\n", coll_name);
    return 2;
  }
  zcc_select_ctx_t c;
  zcc_select_ctx_of_plan(p, &c);
  printf("\nexplain (the choice a communicator of these ranks makes, through zcc_select):\n");
  if (zcc_select_explain(&c, coll, bytes, 1, print_line, NULL) != zccSuccess) {
    printf("  %s\n", zcc_last_error());
    return 1;
  }
  printf("ring 0's steps on the graph (rank -> next: path class, bottleneck, latency, nodes):\n");
  if (zcc_planner_ring_links(p, 0, print_raw, NULL) != zccSuccess) {
    printf("  %s\n", zcc_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"file", required_argument, 0, 'f'}, {"ranks", required_argument, 0, 'r'},
      {"gpus", no_argument, 0, 'g'},       {"json", no_argument, 0, 'j'},
      {"dot", no_argument, 0, 'd'},        {"params", no_argument, 0, 'p'},
      {"paths", required_argument, 0, 'a'}, {"no-plan", no_argument, 0, 'n'},
      {"measure", no_argument, 0, 'm'},    {"help", no_argument, 0, 'h'},
      {"measure-gpu", no_argument, 0, 'G'},
      {"explain", required_argument, 0, 'x'}, {"coll", required_argument, 0, 'c'},
      {0, 0, 0, 0}};
  const char *file = NULL, *ranks = NULL;
  int json = 0, dot = 0, params = 0, all_paths = 0, plan = 1, measure = 0;
  const char *explain = NULL, *coll_name = "allreduce";
  for (int c; (c = getopt_long(argc, argv, "f:r:gjdpa:nmx:c:h", opts, NULL)) != -1;) {
    switch (c) {
    case 'f': file = optarg; break;
    case 'r': ranks = optarg; break;
    case 'g': ranks = NULL; break;
    case 'j': json = 1; break;
    case 'd': dot = 1; break;
    case 'p': params = 1; break;
    case 'a':
      if (strcmp(optarg, "all") != 0) {
        fprintf(stderr, "zcc_topo: --paths takes 'all', not '%s'\n", optarg);
        return 2;
      }
      all_paths = 1;
      break;
    case 'n': plan = 0; break;
    case 'm': measure = 1; break;
    case 'G': measure = 2; break;
    case 'x': explain = optarg; break;
    case 'c': coll_name = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zcc_topo: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (params) {
    print_params();
    return 0;
  }
  if (measure) return print_measure(measure == 2);
  zcc_topo_t *g;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  zccResult_t res = file ? zcc_topo_load_file(file, &g) : zcc_topo_detect(&g);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (res != zccSuccess) {
    fprintf(stderr, "zcc_topo: %s\n", zcc_last_error());
    return 1;
  }
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  if (json || dot) {
    if (json) {
      char *text;
      if (zcc_topo_dump_json(g, 1, &text) != zccSuccess) {
        fprintf(stderr, "zcc_topo: %s\n", zcc_last_error());
        zcc_topo_free(g);
        return 1;
      }
      printf("%s\n", text);
      free(text);
    } else {
      print_dot(g);
    }
    zcc_topo_free(g);
    return 0;
  }
  printf("topology %s: %d host%s, %d nodes, %d links (%s in %.1f ms, %zu KiB)\n",
         file ? file : "detected", g->nhosts, g->nhosts == 1 ? "" : "s", g->nnodes, g->nlinks,
         file ? "loaded" : "detected", ms, zcc_topo_memory(g) / 1024);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].kind == ZCC_TOPO_NET)
      printf("network %s: %s\n", g->nodes[i].id, g->nodes[i].model);
  /* Hosts with the same table are the same machine: show the first only. */
  int shown = 0;
  for (int h = 0; h < g->nhosts; h++) {
    int first = 1;
    for (int k = 0; k < h; k++) first &= g->hosts[k].table != g->hosts[h].table;
    if (!first) continue;
    if (shown++) printf("\n");
    print_host(g, h);
    int same = 0;
    for (int k = h + 1; k < g->nhosts; k++) same += g->hosts[k].table == g->hosts[h].table;
    if (same) printf("  (%d more host%s identical to %s)\n", same, same == 1 ? "" : "s", g->hosts[h].name);
    if (all_paths || h == 0) print_paths(g, h);
  }
  int rc = 0;
  if (plan) {
    int ndev = zcc_topo_count(g, -1, ZCC_TOPO_GPU);
    int *nodes = NULL, n = 0;
    int *all = malloc(sizeof(int) * (size_t)(g->nnodes + 1));
    int total = 0;
    zcc_topo_kind_t kind = ndev ? ZCC_TOPO_GPU : ZCC_TOPO_CPU;
    for (int i = 0; i < g->nnodes; i++)
      if (g->nodes[i].kind == kind) all[total++] = i;
    nodes = malloc(sizeof(int) * (size_t)(total + 1));
    if (ranks) {
      int *idx = malloc(sizeof(int) * (size_t)(total + 1));
      /* host communicators may put several ranks on one CPU node */
      int max = kind == ZCC_TOPO_CPU ? 4096 : total;
      idx = realloc(idx, sizeof(int) * (size_t)max);
      n = idx ? parse_list(ranks, max, idx, max) : -1;
      if (n <= 0) {
        fprintf(stderr, "zcc_topo: --ranks %s: not a list of %s indices below %d (e.g. 0-3,6)\n",
                ranks, zcc_topo_kind_name(kind), max);
        free(idx);
        free(all);
        free(nodes);
        zcc_topo_free(g);
        return 2;
      }
      nodes = realloc(nodes, sizeof(int) * (size_t)(n > 0 ? n : 1));
      for (int i = 0; i < n && nodes; i++) nodes[i] = all[idx[i] % total];
      free(idx);
    } else {
      n = total;
      memcpy(nodes, all, sizeof(int) * (size_t)total);
    }
    zcc_planner_t *p;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    res = zcc_planner_build(g, n, nodes, &p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (res != zccSuccess) {
      fprintf(stderr, "zcc_topo: %s\n", zcc_last_error());
      rc = 1;
    } else {
      printf("\n");
      print_plan(p);
      printf("\n(planned in %.1f ms)\n",
             (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
      print_decisions(p);
      if (explain) rc = print_explain(p, explain, coll_name);
      zcc_planner_free(p);
    }
    free(all);
    free(nodes);
  }
  zcc_topo_free(g);
  return rc;
}
