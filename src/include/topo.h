/*
 * The topology graph: what a rank's machine (or a saved cluster) is made
 * of, as nodes (GPU, CPU/NUMA, PCI switch, NVSwitch, NIC, network) joined
 * by links that carry a bandwidth (GB/s, each direction) and a latency
 * (microseconds). Built by detection (hwloc, CUDA, NVML, libibverbs) or
 * loaded from JSON (docs/topo-json.md); then zcc_topo_finalize computes
 * the best path between every pair of nodes of each host.
 *
 * Nodes of one host are contiguous in g->nodes; network nodes belong to no
 * host (host -1) and are added before the hosts that use them.
 */
#ifndef ZCC_TOPO_H_
#define ZCC_TOPO_H_

#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

typedef enum {
  ZCC_TOPO_GPU = 0,
  ZCC_TOPO_CPU, /* one NUMA node of a CPU package */
  ZCC_TOPO_PCI, /* PCIe switch or bridge */
  ZCC_TOPO_NVS, /* NVSwitch */
  ZCC_TOPO_NIC, /* one port of a network adapter */
  ZCC_TOPO_NET, /* a network that NICs of several hosts attach to */
  ZCC_TOPO_KIND_COUNT
} zcc_topo_kind_t;

typedef enum {
  ZCC_LINK_NVLINK = 0,
  ZCC_LINK_PCIE,
  ZCC_LINK_SMP, /* between the NUMA nodes / sockets of one host */
  ZCC_LINK_NET, /* NIC to network */
  ZCC_LINK_TYPE_COUNT
} zcc_link_type_t;

/* How the best path between two nodes travels, best first. */
typedef enum {
  ZCC_PATH_SELF = 0, /* same device */
  ZCC_PATH_NVL,      /* NVLink, direct */
  ZCC_PATH_NVS,      /* NVLink through NVSwitches */
  ZCC_PATH_PIX,      /* PCIe through switches only */
  ZCC_PATH_PHB,      /* PCIe through a host bridge (CPU) */
  ZCC_PATH_SYS,      /* across the link between sockets */
  ZCC_PATH_NET,      /* through the network */
  ZCC_PATH_NONE,     /* no path */
  ZCC_PATH_CLASS_COUNT
} zcc_path_class_t;

#define ZCC_TOPO_ID_LEN 32
#define ZCC_TOPO_BUS_LEN 20
#define ZCC_TOPO_NAME_LEN 64
#define ZCC_TOPO_MAX_NODES (1 << 22)
#define ZCC_TOPO_MAX_HOST_NODES 1024
#define ZCC_TOPO_MAX_HOSTS (1 << 17)
#define ZCC_TOPO_MAX_BW 1.0e5   /* GB/s: anything above is an error */
#define ZCC_TOPO_MAX_LAT 1.0e6  /* us */

typedef struct zcc_topo_node {
  zcc_topo_kind_t kind;
  int host;                    /* index in hosts; -1 for networks */
  char id[ZCC_TOPO_ID_LEN];    /* unique within its host (or among networks) */
  char bus[ZCC_TOPO_BUS_LEN];  /* PCI bus id, "" when none */
  char model[ZCC_TOPO_NAME_LEN]; /* GPU/CPU model, NIC device, network type */
  int dev;     /* GPU: CUDA index; CPU: NUMA os index; NIC: port; else -1 */
  int package; /* CPU: socket; else -1 */
  int arch;    /* GPU: compute capability x10 (90 = Hopper); else 0 */
  double speed; /* NIC: Gb/s */
  int net;      /* NIC: node index of its network, -1 if none */
} zcc_topo_node_t;

typedef struct zcc_topo_link {
  int a, b;             /* node indices; a link carries both directions */
  zcc_link_type_t type;
  int gen;              /* PCIe / NVLink generation, 0 unknown */
  int width;            /* PCIe lanes, or number of NVLinks */
  double bw;            /* GB/s in each direction */
  double lat;           /* us */
} zcc_topo_link_t;

typedef struct zcc_topo_host {
  char name[ZCC_TOPO_NAME_LEN];
  int first, nnodes; /* its nodes: [first, first + nnodes) */
  int table;         /* index of its path table (shared by identical hosts) */
} zcc_topo_host_t;

/* Best path between two nodes of one host (12 bytes: 1024 hosts fit). */
typedef struct zcc_topo_path {
  float bw;    /* bottleneck, GB/s; 0 when unreachable */
  float lat;   /* sum of latencies, us */
  int16_t prev; /* local index of the node before the target; -1 */
  uint8_t cls;  /* zcc_path_class_t */
  uint8_t hops;
} zcc_topo_path_t;

/*
 * The per-host working graph the paths run on: parallel links summed, the
 * NVSwitches that serve the same GPUs merged into one fabric node.
 */
typedef struct zcc_topo_edge {
  int u, v;   /* local node indices (u < v) */
  zcc_link_type_t type;
  int width;  /* NVLinks or lanes, summed */
  double bw, lat;
} zcc_topo_edge_t;

typedef struct zcc_topo_table {
  int nnodes;         /* local nodes */
  int *rep;           /* [nnodes] merged representative of each local node */
  int nedges;
  zcc_topo_edge_t *edges;
  int16_t *edge_of;   /* [nnodes * nnodes]: working edge between u and v, -1 */
  zcc_topo_path_t *paths; /* [nnodes * nnodes], source-major */
  int refs;           /* hosts using it */
} zcc_topo_table_t;

typedef struct zcc_topo {
  int nnodes, cap_nodes;
  zcc_topo_node_t *nodes;
  int nlinks, cap_links;
  zcc_topo_link_t *links;
  int nhosts, cap_hosts;
  zcc_topo_host_t *hosts;
  /* Filled by zcc_topo_finalize. */
  int finalized;
  int ntables;
  zcc_topo_table_t *tables;
} zcc_topo_t;

/* A path between any two nodes, possibly on different hosts. */
typedef struct zcc_topo_route {
  double bw, lat;
  zcc_path_class_t cls;
  int hops;
  int nic_a, nic_b; /* NET paths: the NICs it leaves and enters by; else -1 */
} zcc_topo_route_t;

/* graph.c: construction, derived link figures, comparison */
zccResult_t zcc_topo_create(zcc_topo_t **out);
void zcc_topo_free(zcc_topo_t *g);
/* A new host; later host nodes go to it. *index may be NULL. */
zccResult_t zcc_topo_add_host(zcc_topo_t *g, const char *name, int *index);
/* A node of the last host (host >= 0) or a network (host -1). */
zccResult_t zcc_topo_add_node(zcc_topo_t *g, int host, zcc_topo_kind_t kind,
                              const char *id, int *index);
/* A link; bw <= 0 or lat < 0 take the figures derived from type and gen. */
zccResult_t zcc_topo_add_link(zcc_topo_t *g, int a, int b,
                              zcc_link_type_t type, int gen, int width,
                              double bw, double lat);
/*
 * Close a host: a link from each of its NICs that names a network (node
 * field net) to that network, in node order, bandwidth from the NIC speed.
 */
zccResult_t zcc_topo_attach_nets(zcc_topo_t *g, int host);
/* Node of `host` (-1: networks) with this id, or -1. */
int zcc_topo_find(const zcc_topo_t *g, int host, const char *id);
/* GB/s each direction of a PCIe link (gen, lanes) and an NVLink bundle. */
double zcc_topo_pcie_bw(int gen, int width);
double zcc_topo_nvlink_bw(int gen, int count);
/* GB/s each direction between the sockets of CPUs of this vendor/model. */
double zcc_topo_smp_bw(const char *vendor, int model_number);
/* Latency of one link of this type, us. */
double zcc_topo_link_lat(zcc_link_type_t type);
const char *zcc_topo_kind_name(zcc_topo_kind_t kind);
const char *zcc_topo_link_name(zcc_link_type_t type);
const char *zcc_topo_class_name(zcc_path_class_t cls);
/* Parse names back (-1 when unknown). */
int zcc_topo_kind_parse(const char *name);
int zcc_topo_link_parse(const char *name);
/* 1 when both graphs hold the same hosts, nodes and links. *why (may be
 * NULL) receives the first difference. */
int zcc_topo_equal(const zcc_topo_t *a, const zcc_topo_t *b, char *why,
                   size_t whylen);
/* Count nodes of a kind (host -1: all hosts). */
int zcc_topo_count(const zcc_topo_t *g, int host, zcc_topo_kind_t kind);
/* A copy with `copies` replicas of every host, named <name>-<i>. */
zccResult_t zcc_topo_replicate(const zcc_topo_t *g, int copies,
                               zcc_topo_t **out);

/* paths.c: all-pairs best paths per host, classes, cross-host routes */
zccResult_t zcc_topo_finalize(zcc_topo_t *g);
/* Best path between nodes of one host (NULL across hosts). */
const zcc_topo_path_t *zcc_topo_path(const zcc_topo_t *g, int a, int b);
/* Best path between any two nodes; cross-host through the best NICs. */
zccResult_t zcc_topo_route(const zcc_topo_t *g, int a, int b,
                           zcc_topo_route_t *out);
/* NIC of a's host with the best path from a (-1 if none). */
int zcc_topo_best_nic(const zcc_topo_t *g, int a);
/* Nodes of a's host on the best path a -> b, a first (returns the count). */
int zcc_topo_path_nodes(const zcc_topo_t *g, int a, int b, int *nodes,
                        int cap);
/* Bytes of memory held by the graph and its paths. */
size_t zcc_topo_memory(const zcc_topo_t *g);

/* json.c: dump and load (docs/topo-json.md) */
zccResult_t zcc_topo_dump_json(const zcc_topo_t *g, int pretty, char **out);
zccResult_t zcc_topo_dump_file(const zcc_topo_t *g, const char *path);
/* Parse text of `len` bytes; `what` names it in error messages. */
zccResult_t zcc_topo_load_json(const char *text, size_t len, const char *what,
                               zcc_topo_t **out);
zccResult_t zcc_topo_load_file(const char *path, zcc_topo_t **out);

/* detect.c: this machine through hwloc, CUDA, NVML and libibverbs */
zccResult_t zcc_topo_detect(zcc_topo_t **out);

/*
 * For a communicator being created: the graph from ZCC_TOPO_FILE, or the
 * one detected here (then written to ZCC_TOPO_DUMP_FILE when set).
 * Finalized; free with zcc_topo_free.
 */
zccResult_t zcc_topo_for_comm(zcc_topo_t **out);
/*
 * The graph communicators of this process share (zcc_topo_for_comm's, made
 * on first use); hold it until zcc_topo_release.
 */
zccResult_t zcc_topo_acquire(const zcc_topo_t **out);
void zcc_topo_release(const zcc_topo_t *g);
/* Is ZCC_TOPO_FILE or ZCC_TOPO_DUMP_FILE set? */
int zcc_topo_requested(void);

#endif /* ZCC_TOPO_H_ */
