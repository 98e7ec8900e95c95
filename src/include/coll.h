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

typedef enum {
  ZCC_ALGO_DIRECT = 0, /* all-pairs in one round: latency */
  ZCC_ALGO_RING = 1,   /* ring: bandwidth */
  ZCC_ALGO_COUNT
} zcc_algo_t;

const char *zcc_coll_name(zcc_coll_t coll);
const char *zcc_algo_name(zcc_algo_t algo);

/*
 * The planner's interface: which algorithm runs `coll` on `bytes` (the
 * per-rank buffer size nccl-tests reports) for this communicator.
 * ZCC_ALGO=direct|ring overrides (an unknown name is an error).
 */
zccResult_t zcc_tuning_pick(const struct zccComm *comm, zcc_coll_t coll,
                            size_t bytes, zcc_algo_t *algo);
/*
 * What zcc_tuning_pick decides for `nranks` ranks on `nnodes` hosts, and
 * each algorithm's predicted us in times[ZCC_ALGO_COUNT] (or NULL; 0 where
 * there is no model): the one choice of host communicators.
 */
zccResult_t zcc_tuning_choice(int nranks, int nnodes, zcc_coll_t coll, size_t bytes,
                              zcc_algo_t *algo, double *times);

typedef enum {
  ZCC_ITEM_XFERS = 0,
  ZCC_ITEM_COPY,   /* memmove(dst, a, bytes) */
  ZCC_ITEM_REDUCE, /* dst = a op b, count elements */
  ZCC_ITEM_AVG,    /* dst = dst / nranks, count elements */
  ZCC_ITEM_SCALE   /* dst = a * plan->scalar, count elements */
} zcc_item_kind_t;

typedef struct zcc_item {
  zcc_item_kind_t kind;
  int first, count; /* XFERS: range in plan->xfers */
  int pending;      /* XFERS: transfers before first + pending are done */
  void *dst;
  const void *a, *b;
  size_t n; /* COPY: bytes; REDUCE/AVG: elements */
} zcc_item_t;

typedef struct zcc_plan {
  struct zccComm *comm;
  zcc_coll_t coll;
  zcc_algo_t algo;
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
  struct zcc_plan *next;
} zcc_plan_t;

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
} zcc_coll_args_t;

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
/* Free the communicator's kept plan (at communicator destruction). */
void zcc_plan_release_spare(struct zccComm *comm);

/*
 * Run chains of plans to completion: chains[i] is a linked list (next) of
 * plans of one communicator, run in order; the chains run concurrently.
 * On error every communicator involved is put in error state.
 */
zccResult_t zcc_exec_chains(zcc_plan_t **chains, int nchains);

#endif /* ZCC_COLL_H_ */
