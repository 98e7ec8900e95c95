/* The communicator object and the registry of live communicators. */
#ifndef ZCC_COMM_H_
#define ZCC_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bootstrap.h"
#include "opsig.h"
#include "socket.h"
#include "zcc.h"

#define ZCC_COMM_MAGIC 0x7a63632d636f6d6dULL

/* What each rank tells the others at init (exchanged by allgather). */
typedef struct zcc_peer_info {
  uint64_t host_hash; /* host name, boot id and network namespace */
  uint64_t pidns;     /* pid namespace inode: pids comparable when equal */
  int32_t pid;
  int32_t rank;
  int32_t device; /* -1: host */
  int32_t pad;
  char gpu_bus_id[32]; /* GPU communicators: the PCI bus id of the rank's GPU */
  zcc_sockaddr_t net_addr; /* the socket transport's listening address */
  char net_plugin[16];     /* the net transport's plug-in ("ib", "socket"); "": none */
  _Alignas(8) uint8_t net_handle[128]; /* its listen handle (ZCC_NET_HANDLE_BYTES, aligned as
                                           ZCC_NET_HANDLE_ALIGN) */
  char hostname[64];
  uint64_t cpus[16];   /* the CPUs this rank may run on (sched_getaffinity), 1024 bits */
} zcc_peer_info_t;

/* Two ranks in one process (one address space). */
static inline int zcc_peer_same_process(const zcc_peer_info_t *a, const zcc_peer_info_t *b) {
  return a->host_hash == b->host_hash && a->pidns == b->pidns && a->pid == b->pid;
}

struct zcc_conn;

/* A buffer registered with zccCommRegister. */
typedef struct zcc_reg {
  struct zcc_reg *next;
  void *buf;
  size_t size;
  void *region; /* host memory made shared (hostmem.h); NULL: left as it was */
} zcc_reg_t;

#define ZCC_MAX_TRANSPORTS 4

/* A pre-multiplied sum made by zccRedOpCreatePreMulSum (op zccNumOps + index). */
typedef struct zcc_redop {
  int in_use;
  zccDataType_t type;
  zccScalarResidence_t residence;
  uint64_t value;      /* HostImmediate: the scalar's bytes */
  const void *scalar;  /* Device: read at each call */
} zcc_redop_t;

struct zccComm {
  uint64_t magic;
  int rank;
  int nranks;
  int device;      /* -1: host */
  int device_type; /* zccDeviceType_t, resolved */
  int64_t timeout_ms;
  char name[64];
  uint64_t hash;
  uint8_t secret[ZCC_SECRET_BYTES];

  atomic_int abort_flag;  /* set by zccCommAbort: waits give up */
  atomic_int async_error; /* first error met; collectives refuse after it */
  atomic_int error_claim; /* the first setter of the error writes error_msg */
  char error_msg[1024];   /* its message, written before async_error is set */
  /*
   * What the peers are told of the error (the transports' failure records):
   * the rank it began on (fail_origin) and that rank's own message, so that
   * a failure passed along a ring reads "rank 2 gave up ... after rank 0's
   * error (<rank 0's message>)", not a message nested once per rank. Set
   * with the error; from the cause a peer's record gave (zcc_comm_note_cause)
   * when that came first.
   */
  int fail_origin;
  char fail_text[512]; /* ZCC_WIRE_FAIL_TEXT */
  atomic_int cause_claim;
  int cause_origin;
  char cause_text[512];
  atomic_int busy;        /* calls in flight (registry-protected entry) */
  /* A non-blocking init (config blocking = 0) runs on its own thread:
     pending until it has finished; live until someone joined it. */
  atomic_int init_pending;
  atomic_int init_thread_live;
  pthread_t init_thread;
  /* One thread at a time issues operations (zcc_comm_enter_op): the one
     that holds it, how deep (its open groups hold it too), and for what. */
  atomic_uintptr_t owner;
  int owner_depth;            /* touched by the owner only */
  const char *_Atomic owner_fn;
  atomic_int fail_deferred;   /* a transport could not tell its peers of the
                                 error from the thread that found it (another
                                 thread was sending): the owner does it when
                                 its call ends (zcc_comm_leave_op) */
  uint64_t op_seq;            /* collectives issued (opsig.h: their numbers) */
  uint64_t op_count;          /* operations issued: collectives and p2p plans */
  _Atomic uint64_t ops_done;  /* the last operation known to have completed */
  uint64_t fail_opno;         /* in error: the first operation not completed */
#define ZCC_SIG_HISTORY 16
  zcc_op_sig_t sig_hist[ZCC_SIG_HISTORY]; /* the last collectives, by seq: a
                                 late peer's record names what ran here */
  struct zcc_sigboard *sigboard; /* GPU communicators: signatures shared with
                                    the ranks of this host (sigboard.h) */

  zcc_bootstrap_t *bootstrap;
  zcc_peer_info_t *peers;          /* [nranks] */
  int nnodes;                      /* distinct hosts among the ranks */
  struct zcc_conn **conns;         /* [nranks]; NULL for self */
  struct {
    const void *ops; /* the transport table owning the slot */
    void *state;
  } transport_state[ZCC_MAX_TRANSPORTS];

  const struct zcc_device_ops *dev; /* GPU communicators: the GPU face (devops.h); host: NULL */
  struct zcc_gpu *gpu;         /* GPU communicators: window, mappings (gpu.h) */
  char gpu_bus_id[32];

  struct zcc_plan *spare_plan; /* kept by zcc_plan_free for reuse */
  int *ring_order;             /* host rings: [nranks] rank at each ring position */
  int ring_pos;                /* this rank's position in ring_order */
  /* Hierarchical plans (host communicators on several hosts with the same
     number of ranks on each; init.c): this host's ranks in rank order, and
     this rank's rail, the rank of its local index on every host (hosts in
     ring order). hier_local NULL: the ranks cannot run them. */
  int hier_m, hier_h;   /* ranks per host, hosts */
  int hier_li, hier_hi; /* this rank's index in hier_local and in hier_rail */
  int *hier_local, *hier_rail;
  const struct zcc_topo *topo;     /* the graph it plans on (zcc_topo_acquire); NULL: none */
  struct zcc_topo *topo_own;       /* the graph over several hosts made from it, or NULL */
  struct zcc_planner *planner;     /* its plan on that graph, or NULL */
  struct zcc_select_cache *select; /* what runs: the planner's context and kept choices */
  struct zcc_stores_class *stores; /* staged allreduce: plain or streaming stores per size
                                      class, by timing (stores.h); NULL until the first */
  int64_t spin_ns, yield_ns;       /* host waits: spin, then yield, then sleep (exec/host.c) */
  unsigned wait_polls;             /* idle polls between the wait's clock reads: 64, or 16 where
                                      ranks outnumber CPUs */
  int yield_at_once;               /* ranks outnumber CPUs, no spin asked for: a wait yields
                                      from its first idle poll, before any clock read */
  int oversubscribed;              /* more ranks on this host than CPUs for them (init.c) */
  int nudge;                       /* unbound ranks, no more than the CPUs: a waiting rank
                                      that keeps handing its core to another task moves
                                      off it (exec/host.c) */
  int home_cpu;                    /* ranks outnumber the host's CPUs, this one unbound:
                                      the CPU its waits go back to (init.c); -1: none */
  int oversub_any;                 /* that on some host of the communicator (alike on every
                                      rank: what plans decide by) */
  struct zcc_trace *trace;      /* flight recorder and trace (trace.h); NULL: off */

  pthread_mutex_t reg_lock;
  struct zcc_reg *regs;
  struct zcc_hostmem_cache *hostmem; /* peers' zccMemHostAlloc regions mapped here
                                        (hostmem.h); used by the executing thread */
  struct zcc_stage *stage;           /* the two-shot allreduce's regions (hostmem.h) */
  int stage_state;                   /* 0: not set up yet; 1: every rank mapped every
                                        region; -1: some rank could not (the ring runs) */
  int split_seq; /* splits made from this communicator */

  pthread_mutex_t redop_lock;
  zcc_redop_t *redops; /* [nredops]: pre-multiplied sums */
  int nredops;
};

/*
 * Resolve `op` for a collective of `type` on comm: a built-in op is returned
 * as it is; a pre-multiplied sum becomes zccSum with *scale set and the
 * scalar's bytes in *scalar, or, for a zccScalarDevice op of a GPU
 * communicator, its device pointer in *scalar_ptr (read by the kernel).
 * Errors name `fn`.
 */
zccResult_t zcc_redop_resolve(struct zccComm *comm, zccRedOp_t op, zccDataType_t type,
                              const char *fn, zccRedOp_t *base, int *scale,
                              uint64_t *scalar, const void **scalar_ptr);
/* Free the table (at communicator destruction). */
void zcc_redop_free_all(struct zccComm *comm);

/*
 * Take a reference on a live communicator for the duration of a call:
 * zccInvalidUsage (message naming `fn`) if comm is NULL, destroyed or
 * aborted. Flags: ZCC_ENTER_CHECK_ERROR also refuses a communicator in
 * error state; ZCC_ENTER_DURING_INIT lets the call in while a non-blocking
 * init still runs (calls that read only what the init's caller set: rank,
 * size, state), which every other call meets as zccInProgress.
 */
#define ZCC_ENTER_CHECK_ERROR 1
#define ZCC_ENTER_DURING_INIT 2
zccResult_t zcc_comm_enter(struct zccComm *comm, const char *fn, int flags);
void zcc_comm_leave(struct zccComm *comm);
/* Wait for a non-blocking init's thread to end, once (init.c). */
void zcc_comm_init_join(struct zccComm *comm);

/*
 * zcc_comm_enter for calls that issue operations (collectives, send and
 * receive, split): also claims the communicator for the calling thread, so
 * that a second thread's call is refused (zccInvalidUsage) instead of
 * interleaving with it. Released by zcc_comm_leave_op.
 */
zccResult_t zcc_comm_enter_op(struct zccComm *comm, const char *fn);
void zcc_comm_leave_op(struct zccComm *comm);
/* Does the calling thread hold comm (an op in flight or queued in its group)? */
int zcc_comm_held_here(const struct zccComm *comm);

/* Call fn on every live communicator, under the registry lock (they stay alive). */
void zcc_comm_foreach(void (*fn)(struct zccComm *comm, void *arg), void *arg);

/* Add to / remove from the registry of live communicators. */
void zcc_comm_register(struct zccComm *comm);
/* Remove; returns 0 if it was not registered (already destroyed). */
int zcc_comm_unregister(struct zccComm *comm);

/* Non-zero if comm is a live communicator of this library (no reference taken). */
int zcc_comm_is_live(const struct zccComm *comm);

/*
 * Record an error on the communicator (first one wins; its message is the
 * thread's last error) and poison its connections, so that the peers stop
 * too. Every later call fails with this cause until destroy or abort.
 */
void zcc_comm_set_error(struct zccComm *comm, zccResult_t res);
/* The same with an explicit message. */
void zcc_comm_set_error_msg(struct zccComm *comm, zccResult_t res, const char *msg);
/*
 * A peer's failure record said the error began on rank `origin` with
 * message `text`: the first such note becomes this communicator's cause
 * for its own peers if its error is set afterwards.
 */
void zcc_comm_note_cause(struct zccComm *comm, int origin, const char *text);

/* Build a communicator (the body of zccCommInitRankConfig). */
zccResult_t zcc_comm_init(struct zccComm **out, int nranks, const zccUniqueId *id,
                          int rank, const zccConfig_t *config, const char *fn);
/* The same, with the rendezvous also giving up when *stop becomes nonzero. */
zccResult_t zcc_comm_init_watched(struct zccComm **out, int nranks, const zccUniqueId *id,
                                  int rank, const zccConfig_t *config, const char *fn,
                                  const atomic_int *stop);
/* Wait until no other call holds a reference. */
void zcc_comm_wait_idle(struct zccComm *comm);
/* Free everything (connections, bootstrap, memory). */
void zcc_comm_free(struct zccComm *comm);
/* ZCC_TOPO_MEASURE: measure the link class choices are costed on (measure.c). */
zccResult_t zcc_comm_measure(struct zccComm *comm);

/* Validate a user config; fills the resolved values. */
zccResult_t zcc_config_resolve(const zccConfig_t *config, int *device_type,
                               int64_t *timeout_ms, const char **name,
                               const char *fn);

#endif /* ZCC_COMM_H_ */
