/*
 * The planner: from the topology graph and where each rank runs, the rings
 * (several, as channels), double binary trees and all-pairs schemes a
 * communicator can use, and the alpha-beta cost model that picks among
 * them per collective, size and protocol.
 *
 * Bandwidths come from link loads: every algorithm's traffic pattern is
 * routed over the graph's best paths, and the most loaded link (load over
 * bandwidth) bounds it, so shared PCIe uplinks, the socket link and NICs
 * are charged for every ring, tree edge or peer pair that crosses them.
 */
#ifndef ZCC_PLANNER_H_
#define ZCC_PLANNER_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "topo.h"

typedef enum {
  ZCC_PALGO_RING = 0, /* rings over all ranks, one per channel */
  ZCC_PALGO_TREE,     /* double binary tree over hosts, chains within */
  ZCC_PALGO_ONESHOT,  /* all-pairs, one round (NVLink island or host memory) */
  ZCC_PALGO_TWOSHOT,  /* all-pairs reduce-scatter then all-gather */
  ZCC_PALGO_HIER,     /* within hosts, then across hosts by rail, then within */
  ZCC_PALGO_COUNT
} zcc_palgo_t;

typedef enum {
  ZCC_PROTO_LL = 0, /* 8-byte stores with a flag: lowest latency, half bandwidth */
  ZCC_PROTO_LL128,  /* 128-byte lines with a flag: NVLink only */
  ZCC_PROTO_SIMPLE, /* bulk copies with a fence per chunk: full bandwidth */
  ZCC_PROTO_COUNT
} zcc_proto_t;

#define ZCC_PLANNER_MAX_CHANNELS 32
/* What one channel (one thread block, or one host thread) can drive, GB/s. */
#define ZCC_PLANNER_GPU_CHANNEL_BW 25.0

typedef struct zcc_ring {
  int *order;   /* [nranks]: rank at each position */
  int *nic_in;  /* [nnodes]: NIC node each comm host is entered by (-1: one host) */
  int *nic_out; /* [nnodes]: NIC node it is left by */
} zcc_ring_t;

typedef struct zcc_tree {
  int root;    /* comm host at the root */
  int depth;   /* edges from the root to the deepest host */
  int *parent; /* [nnodes]: parent comm host, -1 at the root */
  int *child;  /* [2 * nnodes]: up to two children, -1 */
} zcc_tree_t;

typedef struct zcc_planner {
  const zcc_topo_t *g;
  int nranks;
  int *rank_node; /* [nranks] graph node each rank runs on (GPU, or CPU) */
  int cpu_ranks;  /* 1: host communicator (ranks on CPUs) */
  int nnodes;     /* hosts in the communicator */
  int *rank_host; /* [nranks] comm host of each rank */
  int *host_of;   /* [nnodes] graph host of each comm host */
  int *host_off, *host_ranks; /* ranks of comm host h: host_ranks[host_off[h]..] */
  int max_local;

  int nchannels;
  zcc_ring_t rings[ZCC_PLANNER_MAX_CHANNELS];
  double ring_bw;      /* GB/s all channels together */
  int ring_class;      /* worst path class of any ring step */
  int ring_intra_class; /* worst within a host */
  int ring_steps[ZCC_PATH_CLASS_COUNT]; /* ring 0's steps of each class */
  zcc_tree_t trees[2];
  double tree_bw;      /* GB/s, up and down together */
  int island;          /* one host, every pair NVLink (or host memory) */
  int island_class;    /* worst pair class on the host */
  double ap_inv;       /* all-pairs, 1 byte per ordered pair: seconds/GB of the hottest link */
  double bcast_inv;    /* one rank to all others */
  double gather_inv;   /* all others to one rank */
  double hier_intra_inv; /* 1 byte per ordered pair within every host */
  double hier_rail_inv;  /* rail rings across hosts, 1 byte per step */
  double net_bw;         /* GB/s: NIC bandwidth of the least connected host */
} zcc_planner_t;

typedef struct zcc_choice {
  zcc_palgo_t algo;
  zcc_proto_t proto;
  double time_us;
} zcc_choice_t;

/*
 * rings.c: build the plan for `nranks` ranks running on graph nodes
 * rank_node[] (GPUs, or CPU nodes for host communicators).
 */
zccResult_t zcc_planner_build(const zcc_topo_t *g, int nranks,
                              const int *rank_node, zcc_planner_t **out);
void zcc_planner_free(zcc_planner_t *p);
/*
 * Place `nranks` ranks on the graph: the GPUs of each host in order, host
 * after host; where the graph has no GPU, ranks on the CPUs round-robin.
 */
zccResult_t zcc_planner_place(const zcc_topo_t *g, int nranks, int *rank_node);

/* Link-load accounting, shared by the ring, tree and all-pairs builders. */
typedef struct zcc_flow zcc_flow_t;
zccResult_t zcc_planner_flow_new(const zcc_planner_t *p, zcc_flow_t **out);
void zcc_planner_flow_free(zcc_flow_t *f);
void zcc_planner_flow_reset(zcc_flow_t *f);
/* `amount` from rank a to rank b; across hosts through NICs na and nb
 * (-1: the best NIC of each end). */
void zcc_planner_flow_add(zcc_flow_t *f, int a, int b, int na, int nb,
                          double amount);
/* Highest load / bandwidth over every link (s/GB per unit of amount). */
double zcc_planner_flow_max(const zcc_flow_t *f);

/* trees.c: double binary trees and the all-pairs and hierarchical loads */
zccResult_t zcc_planner_build_trees(zcc_planner_t *p);
zccResult_t zcc_planner_build_allpairs(zcc_planner_t *p);

/* cost.c: the model, the choice, overrides and the table */
const char *zcc_palgo_name(zcc_palgo_t algo);
const char *zcc_proto_name(zcc_proto_t proto);
/* 1 if the combination can run; else 0 and why. */
int zcc_planner_supports(const zcc_planner_t *p, zcc_coll_t coll,
                         zcc_palgo_t algo, zcc_proto_t proto, char *why,
                         size_t whylen);
/* Predicted time in us (the combination must be supported). */
double zcc_planner_predict(const zcc_planner_t *p, zcc_coll_t coll,
                           zcc_palgo_t algo, zcc_proto_t proto, size_t bytes);
/*
 * The cheapest supported combination for `bytes` (nccl-tests' size),
 * within what ZCC_ALGO / ZCC_PROTO force; an override that names no
 * algorithm, or one that cannot run here, is zccInvalidArgument with why.
 */
zccResult_t zcc_planner_pick(const zcc_planner_t *p, zcc_coll_t coll,
                             size_t bytes, zcc_choice_t *out);
/* One line of the table: every combination's time and the winner. */
int zcc_planner_format_row(const zcc_planner_t *p, zcc_coll_t coll,
                           size_t bytes, char *buf, size_t len);
/* The table for every collective and size 8 B .. 1 GiB at INFO TUNING. */
void zcc_planner_log_table(const zcc_planner_t *p);
/*
 * Host communicators: direct or ring for `nranks` ranks over `nnodes`
 * hosts (shared memory within a host, TCP between), from constants
 * measured with allreduce_perf on a 2-core VM (see cost.c).
 */
/*
 * The ring of a host communicator: rank_host[r] is the host (any id; equal
 * for ranks of one host) of rank r. Fills order[nranks] with the ranks in
 * ring order: the hosts in the order of their lowest rank, each host's
 * ranks together in rank order, so the ring enters and leaves every host
 * once, as the planner's rings do on a graph. Returns the ring's host
 * crossings (0 on one host, else the number of hosts); -1 on bad input.
 */
int zcc_planner_host_ring(int nranks, const uint64_t *rank_host, int *order);

/*
 * What a communicator runs: one line per collective and size (8 B to 8 GiB,
 * x8), the algorithm the communicator's own choice functions pick
 * (zcc_planner_pick_host; zcc_planner_pick_gpu for unregistered buffers and
 * zcc_planner_pick_gpu_coll) and every candidate's predicted time, within
 * ZCC_ALGO / ZCC_PROTO. Communicators log it at creation (INFO TUNING) and
 * zcc_topo prints it: the same lines from the same functions. emit gets
 * each line without a newline; zccInvalidArgument (as the pick functions
 * say) for an override that cannot run.
 */
zccResult_t zcc_planner_decisions(int gpu, int nranks, int nnodes,
                                  void (*emit)(void *ctx, const char *line), void *ctx);

/* ZCC_ALGO as set (NULL: unset). */
const char *zcc_planner_algo_override(void);

zccResult_t zcc_planner_pick_host(int nranks, int nnodes, zcc_coll_t coll,
                                  size_t bytes, zcc_algo_t *algo);
/* The same, with each algorithm's predicted us in times[ZCC_ALGO_COUNT] (or NULL). */
zccResult_t zcc_planner_host_model(int nranks, int nnodes, zcc_coll_t coll, size_t bytes,
                                   zcc_algo_t *algo, double *times);

/*
 * GPU communicators (every rank on one host, all-pairs NVLink or P2P):
 * the allreduce algorithms of exec/gpu.c and their predicted
 * time. Constants measured on 2 H200s joined by NV18, times of CUDA-graph
 * replays (docs/perf/h200x2.md has the predicted-versus-measured table).
 */
typedef enum {
  ZCC_GPU_LL = 0,  /* data with flags into peers' LL areas (<= 64 KiB) */
  ZCC_GPU_ONESHOT, /* every rank reads every input */
  ZCC_GPU_TWOSHOT, /* reduce-scatter, then all-gather, by stores */
  ZCC_GPU_CE,      /* copy engines push, SMs reduce locally (2 ranks) */
  ZCC_GPU_PUSH,    /* SMs store into peers' staging, reduce locally (one launch) */
  ZCC_GPU_RING,    /* ring over connectors (device.h): any transport */
  ZCC_GPU_TREE,    /* tree over connectors: reduce up, broadcast down */
  ZCC_GPU_ALGO_COUNT
} zcc_gpu_algo_t;

const char *zcc_gpu_algo_name(zcc_gpu_algo_t algo);
/* Predicted microseconds for an allreduce of `bytes`; staged: unregistered buffers. */
double zcc_planner_gpu_predict(zcc_gpu_algo_t algo, int nranks, size_t bytes, int staged);
/*
 * The fastest predicted algorithm that can run; ZCC_PROTO=ll, ZCC_ALGO=
 * oneshot|twoshot|ce|push|ring|tree override (one that cannot run is
 * zccInvalidArgument). The ring and tree kernels run when forced: the
 * all-pairs kernels are the faster choice between GPUs that load and store
 * each other's memory, which is every GPU communicator so far.
 */
zccResult_t zcc_planner_pick_gpu(int nranks, size_t bytes, int staged, zcc_gpu_algo_t *algo);
/*
 * The other GPU collectives (broadcast, reduce, all-gather, reduce-scatter):
 * 1 in *ring when ZCC_ALGO=ring asks for the ring kernels, else 0 (the
 * staged all-pairs kernels). ZCC_ALGO=tree runs rooted and gathering
 * collectives as rings too (their tree is a chain, as in NCCL); names that
 * apply only to allreduce leave the others on their default; an unknown
 * name is zccInvalidArgument.
 */
zccResult_t zcc_planner_pick_gpu_coll(zcc_coll_t coll, int *ring);

#endif /* ZCC_PLANNER_H_ */
