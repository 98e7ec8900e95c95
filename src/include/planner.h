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

/* A choice: the algorithm and protocol, and the predicted time (0: no model). */
typedef struct zcc_choice {
  zcc_algo_t algo;
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

/*
 * place.c: the plan of a communicator. `local` is the graph this process
 * sees (zcc_topo_acquire): when it holds one host and the communicator
 * spans more, the others are taken to be alike (a replica, returned in
 * *own for the caller to free after the plan). rank_host[r]: the comm host
 * (0 .. nnodes-1) of rank r; rank_bus[r]: the PCI bus id of its GPU, or
 * rank_bus NULL for host ranks (on the CPUs, round-robin). A GPU whose bus
 * id the graph does not show is taken in order (VMs hide them).
 */
zccResult_t zcc_planner_for_comm(const zcc_topo_t *local, int nranks, int nnodes,
                                 const int *rank_host, const char *const *rank_bus,
                                 zcc_topo_t **own, zcc_planner_t **out);
/* The channels, rings and trees of a plan, one line each (zcc_topo and INFO TUNING). */
zccResult_t zcc_planner_describe(const zcc_planner_t *p, void (*emit)(void *ctx, const char *line),
                                 void *ctx);

/* Each step of ring `channel`: the link class, bandwidth and latency of the path, and its nodes. */
zccResult_t zcc_planner_ring_links(const zcc_planner_t *p, int channel,
                                   void (*emit)(void *ctx, const char *line), void *ctx);

/*
 * The ring of GPU channel `channel` of a communicator of nranks (order:
 * the rank at each position): ZCC_RINGS when set, else ring channel %
 * nchannels of the plan p, else (p NULL: ranks share GPUs, or no plan)
 * rank order. *source (if set) names which. zccInvalidArgument for a
 * ZCC_RINGS that does not list every rank once.
 */
#define ZCC_PLANNER_MAX_RANKS_RING 4096
zccResult_t zcc_planner_channel_ring(const zcc_planner_t *p, int nranks, int channel, int *order,
                                     const char **source);

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
/* 1 for the algorithms the graph model costs (not push and ce: select.c's). */
int zcc_planner_on_graph(zcc_algo_t algo);
/* 1 if the combination can run; else 0 and why. */
int zcc_planner_supports(const zcc_planner_t *p, zcc_coll_t coll,
                         zcc_algo_t algo, zcc_proto_t proto, char *why,
                         size_t whylen);
/* Predicted time in us (the combination must be supported). */
double zcc_planner_predict(const zcc_planner_t *p, zcc_coll_t coll,
                           zcc_algo_t algo, zcc_proto_t proto, size_t bytes);
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
 * The ring of a host communicator: rank_host[r] is the host (any id; equal
 * for ranks of one host) of rank r. Fills order[nranks] with the ranks in
 * ring order: the hosts in the order of their lowest rank, each host's
 * ranks together in rank order, so the ring enters and leaves every host
 * once, as the planner's rings do on a graph. Returns the ring's host
 * crossings (0 on one host, else the number of hosts); -1 on bad input.
 */
int zcc_planner_host_ring(int nranks, const uint64_t *rank_host, int *order);

/* ---- select.c: what a communicator runs ----
 *
 * One choice for host and GPU communicators: the algorithms this build's
 * executors run for the communicator (zcc_select_can_run), each one's time
 * from the cost model of the link class the ranks share (cost.c: measured
 * constants for shared memory and TCP between host ranks, for NVLink between
 * GPUs), and ZCC_ALGO / ZCC_PROTO, parsed once for both.
 */
typedef struct zcc_select_ctx {
  int gpu;        /* ranks on GPUs (else on CPUs) */
  int nranks;
  int nnodes;     /* hosts */
  int link_class; /* zcc_path_class_t the model charges: host ranks ZCC_PATH_SELF
                     (shared memory, one host) or ZCC_PATH_NET (TCP, several hosts);
                     GPUs the worst pair's class */
  int measured;    /* 1: ZCC_TOPO_MEASURE measured the class (below), else the table */
  double alpha_us; /* measured one-way latency of a message */
  double bw_gbs;   /* measured bandwidth of one connection */
  int gpu_share;   /* GPU communicators: the most ranks on one GPU (0 or 1: none share);
                      with link_class ZCC_PATH_SYS (windows in pinned host memory) they
                      share that GPU's one PCIe link, and the model charges it */
  int conn_only;   /* GPU communicators with a peer reached only through connectors (the
                      net transport's proxy): the connector kernels alone run (ring and
                      tree; send/receive and all-to-all over connectors), costed by the
                      network. Those of more than ZCC_GPU_PAIRS_MAX ranks on one host run
                      them alone too, costed by their link (zcc_select_conn_kernels) */
  double oversub;  /* host communicators: ranks of this host per CPU for them, where
                      they outnumber the CPUs (init.c); 0: each rank has a CPU */
  int min_local, max_local; /* the fewest and most ranks on one host (hier needs them
                               equal, and at least 2) */
} zcc_select_ctx_t;

/* The most ranks of a GPU communicator the all-pairs kernels take (device.h:
   ZCC_DEV_MAX_RANKS); more run the connector kernels alone. */
#define ZCC_GPU_PAIRS_MAX 8
/* 1 where a GPU communicator runs the connector kernels alone (conn_only, or
   more ranks than ZCC_GPU_PAIRS_MAX). */
int zcc_select_conn_kernels(const zcc_select_ctx_t *c);

/* Host communicators: 1 if the hierarchical allreduce of `bytes` runs in its
   leaders' form (a sum per host, one exchange between hosts), 0 if in its
   rails' (cost.c: hier_time). Alike on every rank (the context is). */
int zcc_host_hier_leaders(const zcc_select_ctx_t *c, size_t bytes);

/* The table's latency (us, one ring step) and bandwidth (GB/s) of the class. */
void zcc_select_link_table(const zcc_select_ctx_t *c, double *alpha_us, double *bw_gbs);

/*
 * GPU: fit the measured link from the probe's two allreduce times (8 B
 * oneshot/ll and `big` bytes of push, us) against the table's predictions
 * of the same two: the 8-byte ratio scales the latency; the big time less
 * its latency part, scaled so, fixes the bandwidth, unless that leaves
 * under a quarter of it, where the split is noise and the big time's whole
 * ratio is taken (then fit->whole = 1). Sets c->measured, alpha_us, bw_gbs;
 * fit (for the log) gets the table's predictions and link.
 */
typedef struct {
  double p_small, p_big;          /* the table's predictions of the two */
  double table_alpha, table_bw;   /* zcc_select_link_table's */
  int whole;
} zcc_gpu_fit_t;
void zcc_select_fit_gpu(zcc_select_ctx_t *c, double t_small, double t_big, size_t big,
                        zcc_gpu_fit_t *fit);

/* 1 if the communicator runs algo/proto for coll on `bytes`; else 0 and why. */
int zcc_select_can_run(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                       zcc_proto_t proto, size_t bytes, char *why, size_t whylen);
/*
 * Predicted us (the combination must run); staged: a GPU allreduce on
 * unregistered buffers (copied into staging).
 */
double zcc_select_predict(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                          zcc_proto_t proto, size_t bytes, int staged);
/*
 * The choice for coll on `bytes` (nccl-tests' per-rank size): the fastest
 * predicted combination the model may pick (zcc_select_auto), unless
 * ZCC_ALGO / ZCC_PROTO force one. A forced protocol or algorithm that
 * cannot run this collective here gives way where the rule is NCCL's
 * (ll above its size limit runs simple; tree on a GPU collective with no
 * tree kernel runs the ring, as NCCL's rooted collectives run chains;
 * an allreduce-only algorithm leaves the other collectives to the model);
 * one that this communicator cannot run for this collective at all is
 * zccInvalidArgument naming the ones it can.
 */
zccResult_t zcc_select(const zcc_select_ctx_t *c, zcc_coll_t coll, size_t bytes, int staged,
                       zcc_choice_t *out);
/* 1 if the model may pick algo/proto unforced (measured faster where it runs). */
int zcc_select_auto(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                    zcc_proto_t proto, int staged);
/* The context of a plan on a graph (zcc_topo, tests): what its communicator would be. */
void zcc_select_ctx_of_plan(const zcc_planner_t *p, zcc_select_ctx_t *c);

/*
 * A communicator's decisions, kept: the last choice per collective, size
 * class (log2 of the bytes) and staging, reused while ZCC_ALGO / ZCC_PROTO
 * and the size stay the same.
 */
#define ZCC_SELECT_CACHE_SIZES 48
typedef struct zcc_select_cache_entry {
  size_t bytes; /* 0: empty */
  zcc_choice_t choice;
} zcc_select_cache_entry_t;
typedef struct zcc_select_cache {
  zcc_select_ctx_t ctx;
  zcc_select_cache_entry_t e[ZCC_COLL_COUNT][2][ZCC_SELECT_CACHE_SIZES];
  unsigned generation; /* zcc_param_generation the entries belong to */
  uint64_t hits, misses;
} zcc_select_cache_t;
/* zcc_select through the cache (one communicator, one thread at a time). */
zccResult_t zcc_select_cached(zcc_select_cache_t *cache, zcc_coll_t coll, size_t bytes,
                              int staged, zcc_choice_t *out);

/*
 * What a communicator runs: one line per collective and size (8 B to 8 GiB,
 * x8), the choice zcc_select makes and every candidate's predicted time
 * (GPU allreduce: for unregistered buffers), within ZCC_ALGO / ZCC_PROTO.
 * Communicators log it at creation (INFO TUNING) and zcc_topo prints it:
 * the same lines from the same function. emit gets each line without a
 * newline; zccInvalidArgument (as zcc_select says) for an override that
 * cannot run.
 */
zccResult_t zcc_planner_decisions(const zcc_select_ctx_t *c,
                                  void (*emit)(void *ctx, const char *line), void *ctx);

/*
 * Why `coll` of `bytes` runs what it runs on this communicator: the choice,
 * every candidate's predicted time and how far behind the winner it is,
 * those the model leaves to ZCC_ALGO, and why the others cannot run here.
 */
zccResult_t zcc_select_explain(const zcc_select_ctx_t *c, zcc_coll_t coll, size_t bytes,
                               int staged, void (*emit)(void *ctx, const char *line), void *ctx);

/* ZCC_ALGO / ZCC_PROTO as set (NULL: unset). */
const char *zcc_planner_algo_override(void);
const char *zcc_planner_proto_override(void);

#endif /* ZCC_PLANNER_H_ */
