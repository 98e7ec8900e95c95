/*
 * Per-operation records: the flight recorder (the last
 * ZCC_FLIGHT_RECORDER_ENTRIES operations of every communicator, dumped as JSON
 * on error, timeout, abort, SIGUSR1 or zccCommDump) and the Chrome trace
 * (ZCC_TRACE_FILE).
 *
 * The thread that issues an operation fills its record; any other thread
 * (a dump on abort, on SIGUSR1, from zccCommDump) may read it at the same
 * time, so every field is read and written with relaxed atomics and a
 * record is valid while its `id` matches the slot's.
 *
 * Host communicators fill every time; GPU communicators fill the enqueue
 * time, and the kernels stamp when the GPU ran the op (device.h, op
 * stamps): dumps read those stamps for gpu_start_ns / gpu_end_ns and the
 * state (started, done), and the trace gets a GPU span per op once it has
 * ended (written as later ops are enqueued, and at destroy).
 */
#ifndef ZCC_TRACE_H_
#define ZCC_TRACE_H_

#include <stdatomic.h>
#include <stdint.h>

#include "zcc.h"

struct zccComm;
struct zcc_plan;

typedef enum {
  ZCC_OP_EMPTY = 0,
  ZCC_OP_ENQUEUED = 1,
  ZCC_OP_STARTED = 2,
  ZCC_OP_DONE = 3,
  ZCC_OP_FAILED = 4
} zcc_op_state_t;

/* A record's transports: the ops tables its connections used. */
#define ZCC_TRACE_TP_SHM 1u
#define ZCC_TRACE_TP_SOCKET 2u
#define ZCC_TRACE_TP_OTHER 4u

typedef struct zcc_op_rec {
  /* 1 + the index of this record among the comm's records; 0: empty. */
  uint64_t id;
  /* Collectives: 1, 2, ... per comm; point-to-point: a counter of its own. */
  uint64_t seq;
  int32_t coll; /* zcc_coll_t */
  int32_t algo; /* zcc_algo_t; -1: chosen by the GPU side */
  int32_t type, op;
  /* Broadcast/reduce root; point-to-point: the peer (-1: several). */
  int32_t root;
  int32_t state;  /* zcc_op_state_t */
  int32_t result; /* zccResult_t once done or failed */
  /* The peer waited on longest (while running: the one waited on); -1. */
  int32_t wait_peer;
  uint32_t transports;
  int32_t gpu; /* 1: GPU communicator */
  uint64_t count, bytes;
  int64_t t_enqueue_ns, t_start_ns, t_end_ns; /* CLOCK_MONOTONIC; 0: not yet */
  int64_t gpu_start_ns, gpu_end_ns;           /* GPU side: 0 until written */
  int64_t wait_ns;      /* total time the executor found nothing to move */
  int64_t wait_peer_ns; /* of which waiting on wait_peer */
  /* GPU: the record whose stamps hold its GPU times: its own id, or the
     newest op of the launch that ran it (a group's sends and receives). */
  uint64_t gpu_id;
  /* The cost model's time of the choice that runs it (zcc_select); 0: none
     (send/receive, one rank). */
  int64_t pred_ns;
} zcc_op_rec_t;

typedef struct zcc_trace_file zcc_trace_file_t;

/* A communicator's recorder; NULL when the recorder and the trace are off. */
typedef struct zcc_trace {
  zcc_op_rec_t *ring; /* [cap]; NULL: recorder off (trace only) */
  uint32_t cap;
  uint64_t next; /* records made (the id of the newest) */
  uint32_t wpos; /* the issuing thread's: ring index of the next record */
  zcc_op_rec_t *last; /* the newest record (lookups by id try it first) */
  uint64_t coll_seq, p2p_seq;
  zcc_trace_file_t *file; /* NULL: ZCC_TRACE_FILE off */
  zcc_op_rec_t one;       /* the record when the ring is off */
  int64_t
      *peer_wait;    /* [nranks]: the running op's wait per peer (trace only) */
  atomic_int dumped; /* an automatic dump was written */
  uint64_t gpu_next;  /* GPU: the first record whose GPU span is not written yet */
  char prefix[256];  /* the comm's part of every trace event's args */
} zcc_trace_t;

/* Make comm->trace after the transports connect (never fails the comm). */
void zcc_trace_comm_init(struct zccComm *comm);
/* Flush the trace and free the recorder. */
void zcc_trace_comm_free(struct zccComm *comm);

/*
 * A new record for an operation, ENQUEUED now. root: rooted collectives'
 * root, the peer of a send/recv (-1 several); algo -1: not known here.
 * Returns the record's id (0: nothing recorded).
 */
uint64_t zcc_trace_enqueue(struct zccComm *comm, int coll, size_t count,
                           size_t bytes, int type, int op, int root, int algo);
/* The record with this id, or NULL (off, or overwritten since). */
zcc_op_rec_t *zcc_trace_rec(struct zccComm *comm, uint64_t id);

/*
 * The host executor: the plan starts (now_ns: the time if the caller has
 * it, else 0), waits on `peer` for ns, ends. A host call outside a group
 * runs at once: its enqueue time is taken to be its start time (one clock
 * read fewer per operation).
 */
void zcc_trace_start(struct zcc_plan *plan, int64_t now_ns);
void zcc_trace_wait(struct zcc_plan *plan, int peer, int64_t ns);
void zcc_trace_waiting_on(struct zcc_plan *plan, int peer);
/* now_ns: the time it ended if the caller has it, else 0 (read the clock). */
void zcc_trace_end(struct zcc_plan *plan, zccResult_t res, int64_t now_ns);
/* A record that ran elsewhere (GPU enqueue): its final state now. */
void zcc_trace_finish_id(struct zccComm *comm, uint64_t id, zccResult_t res);
/* GPU: record `id` ran in the launch stamped for record `with`. */
void zcc_trace_gpu_share(struct zccComm *comm, uint64_t id, uint64_t with);
/* Record id runs a choice the model predicts to take us (GPU collectives;
   host plans carry theirs into zcc_trace_start). */
void zcc_trace_predicted(struct zccComm *comm, uint64_t id, double us);
/* GPU: write the trace's spans of every op the GPU has finished (destroy,
   once the device is idle). */
void zcc_trace_gpu_flush(struct zccComm *comm);

/*
 * The communicator entered error state (first error only): write the
 * flight recorder to ZCC_FLIGHT_RECORDER_FILE, or log a summary of its
 * last operations at WARN when that is unset.
 */
void zcc_trace_on_error(struct zccComm *comm, zccResult_t res);
/* Write comm's recorder as JSON to path (NULL: ZCC_FLIGHT_RECORDER_FILE). */
zccResult_t zcc_trace_dump(struct zccComm *comm, const char *path,
                           const char *reason);

/* Names for the JSON. */
const char *zcc_op_state_name(int state);

#endif /* ZCC_TRACE_H_ */
