/*
 * Plans and the host executor. A collective becomes a plan: a sequence of
 * items, each a batch of transfers that run concurrently or a local step
 * (copy, reduce, average). The executor runs several plans at once (one
 * chain per communicator, for groups) without blocking on any one transfer.
 */
#ifndef ZCC_COLL_H_
#define ZCC_COLL_H_

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "transport.h"
#include "zcc.h"

typedef enum {
  ZCC_COLL_ALLREDUCE = 0,
  ZCC_COLL_BROADCAST,
  ZCC_COLL_REDUCE,
  ZCC_COLL_ALLGATHER,
  ZCC_COLL_REDUCESCATTER,
  ZCC_COLL_ALLTOALL,
  ZCC_COLL_SENDRECV,
  ZCC_COLL_COUNT
} zcc_coll_t;

/*
 * One algorithm enum for host and GPU communicators, the planner and
 * ZCC_ALGO. Which of them a communicator runs for a collective, size and
 * protocol is the planner's (planner.h: zcc_select).
 */
typedef enum {
  ZCC_ALGO_RING = 0, /* rings over all ranks, one per channel (GPU: over connectors) */
  ZCC_ALGO_TREE,     /* double binary tree over hosts, chains within (GPU: over connectors) */
  ZCC_ALGO_ONESHOT,  /* all-pairs in one round: every rank reads or gets every input
                        (host communicators' "direct") */
  ZCC_ALGO_TWOSHOT,  /* all-pairs reduce-scatter, then all-gather */
  ZCC_ALGO_PUSH,     /* GPU: SMs store into peers' staging, each rank reduces its own */
  ZCC_ALGO_CE,       /* GPU, 2 ranks: copy engines push, SMs reduce */
  ZCC_ALGO_HIER,     /* within hosts, then across hosts by rail, then within */
  ZCC_ALGO_COUNT
} zcc_algo_t;

typedef enum {
  ZCC_PROTO_LL = 0, /* 8-byte stores with a flag: lowest latency, half bandwidth */
  ZCC_PROTO_LL128,  /* 128-byte lines with a flag: NVLink only */
  ZCC_PROTO_SIMPLE, /* bulk copies with a fence per chunk: full bandwidth */
  ZCC_PROTO_COUNT
} zcc_proto_t;

const char *zcc_coll_name(zcc_coll_t coll);
const char *zcc_algo_name(zcc_algo_t algo);
const char *zcc_proto_name(zcc_proto_t proto);
/*
 * The one parser of algorithm and protocol names (ZCC_ALGO, ZCC_PROTO,
 * tools): the index, or -1. Case is ignored; "direct" is oneshot.
 */
int zcc_algo_parse(const char *name);
int zcc_proto_parse(const char *name);
/* "ring, tree, oneshot, ..." : every name, for messages. */
const char *zcc_algo_names(void);

typedef enum {
  ZCC_ITEM_XFERS = 0,
  ZCC_ITEM_COPY,   /* memmove(dst, a, bytes) */
  ZCC_ITEM_REDUCE, /* dst = a op b, count elements */
  ZCC_ITEM_AVG,    /* dst = dst / nranks, count elements */
  ZCC_ITEM_SCALE,  /* dst = a * plan->scalar, count elements */
  ZCC_ITEM_HOSTMEM, /* a step of the direct allreduce on shared host memory:
                       n is the step (hostmem.h) */
  ZCC_ITEM_JUMP     /* continue at item n */
} zcc_item_kind_t;

typedef struct zcc_item {
  zcc_item_kind_t kind;
  int first, count; /* XFERS: range in plan->xfers */
  int pending;      /* XFERS: transfers before first + pending are done */
  void *dst;
  const void *a, *b;
  size_t n; /* COPY: bytes; REDUCE/AVG: elements */
} zcc_item_t;

/* Arguments of a collective call, as the API received them. */
typedef struct zcc_coll_args {
  zcc_coll_t coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count; /* as in the API call */
  zccDataType_t type;
  zccRedOp_t op; /* built-in; a pre-multiplied sum is zccSum with scale set */
  int root;
  int scale;       /* pre-multiplied sum: inputs are multiplied by scalar first */
  uint64_t scalar; /* the scalar's bytes, one element of type */
  const void *scalar_ptr; /* GPU communicators, zccScalarDevice: the kernel reads it */
  unsigned host_bufs;     /* GPU communicators: ZCC_HOST_SEND / ZCC_HOST_RECV, the buffer
                             is pinned host memory (set by the executor as it maps them) */
  int mapped;             /* GPU communicators: the device side's check mapped them already
                             (sendbuf, recvbuf, scalar_ptr and host_bufs are the GPU's) */
  uint64_t op_id;         /* GPU communicators: the op's flight recorder id (0: none) */
  uint64_t sig_seq;       /* GPU communicators: the number its signature was posted at */
} zcc_coll_args_t;
#define ZCC_HOST_SEND 1u
#define ZCC_HOST_RECV 2u

typedef struct zcc_plan {
  struct zccComm *comm;
  zcc_coll_t coll;
  zcc_algo_t algo;
  double pred_us; /* the model's time of that choice (zcc_choice_t.time_us) */
  zccDataType_t type;
  zccRedOp_t op;
  size_t bytes;
  int nitems, cap_items;
  zcc_item_t *items;
  int nxfers, cap_xfers;
  zcc_xfer_t *xfers;
  void *tmp; /* scratch owned by the plan */
  size_t tmp_cap;
  void *pre; /* pre-multiplied sums: the scaled input */
  size_t pre_cap;
  uint64_t scalar; /* pre-multiplied sums: the scalar's bytes */
  int cur;   /* executor's position */
  int open_batch; /* builder: an XFERS item is open */
  uint64_t trace_id; /* its flight recorder record (trace.h); 0: none */
  struct zcc_op_rec *trace_rec; /* that record's slot, found on first use */
  int trace_started;
  zcc_op_sig_t sig; /* what its transfers carry (opsig.h); set by the caller */
  int stores_class;   /* 1 + its class of plain or streaming stores for the result
                         and the slots (stores.h); 0: it has no such choice */
  struct zcc_hostmem_op *hostmem; /* the direct allreduce's state (hostmem.h), kept
                                     with the plan's arrays; NULL: never used */
  struct zcc_plan *next;
  /* A collective's plan kept by zcc_plan_free: the call it was built for
     (zcc_plan_coll runs it again for the same call instead of rebuilding). */
  int keyed;
  int once; /* its layout holds for this call only (a setup ran in it): not kept */
  zcc_coll_args_t key;
} zcc_plan_t;


/* Build the plan for a collective (arguments already validated). */
zccResult_t zcc_plan_coll(struct zccComm *comm, const zcc_coll_args_t *args,
                          zcc_plan_t **out);
/* An empty plan for point-to-point operations, filled by zcc_plan_p2p. */
zccResult_t zcc_plan_new(struct zccComm *comm, zcc_coll_t coll, zcc_plan_t **out);
zccResult_t zcc_plan_p2p(zcc_plan_t *plan, int is_recv, int peer, void *buf,
                         size_t bytes);
/* Close a point-to-point plan: pairs sends to self with receives from self. */
zccResult_t zcc_plan_p2p_finish(zcc_plan_t *plan);
/*
 * Done with a plan: the communicator keeps one, with its arrays and
 * scratch, for the next call (so small collectives allocate nothing).
 */
void zcc_plan_free(zcc_plan_t *plan);
/* Its stores for this run: kind's bits (stores.h) stream where the plan
   may stream, the rest are plain. */
void zcc_plan_stores(zcc_plan_t *p, int kind);
/* Free the communicator's kept plan (at communicator destruction). */
void zcc_plan_release_spare(struct zccComm *comm);

/*
 * Run chains of plans to completion: chains[i] is a linked list (next) of
 * plans of one communicator, run in order; the chains run concurrently.
 * On error every communicator involved is put in error state.
 */
zccResult_t zcc_exec_chains(zcc_plan_t **chains, int nchains);

#endif /* ZCC_COLL_H_ */
