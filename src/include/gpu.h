/*
 * GPU communicators: ranks on one host, all GPUs able to address each
 * other (NVLink or PCIe peer access), or on several hosts through the net
 * transport's proxy; several ranks may share one GPU, in one process or
 * across processes. Up to ZCC_DEV_MAX_RANKS ranks run every kernel; more
 * (up to ZCC_DEV_MAX_CONN_RANKS) run the connector kernels alone, as ranks
 * on several hosts do (conn_only).
 *
 * The set-up (exec/gpu_comm.c) gives each rank one "window" (flags, LL
 * area, point-to-point area, staging buffer, the channels' and the per-peer
 * connectors), its flags zeroed once, placed and mapped into every peer GPU
 * by the transport that connects them all (transport.h's GPU face: p2p in
 * device memory by peer access or CUDA IPC, shm in pinned host memory).
 * Collectives
 * (exec/gpu.c) enqueue copies and the kernels of src/device/ on
 * the caller's stream and return: no host synchronisation, so everything
 * captures into CUDA graphs.
 *
 * Compiled only when zcc is built with CUDA (ZCC_HAVE_CUDA).
 */
#ifndef ZCC_GPU_H_
#define ZCC_GPU_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "devops.h"
#include "device.h"
#include "zcc.h"

struct zccComm;

/* The copy-engine pipeline's slots in the staging buffer, and its flag words. */
#define ZCC_GPU_CE_SLOTS 4
#define ZCC_GPU_CE_READY 0  /* [slot]: pushes into my slot, written by the peer */
#define ZCC_GPU_CE_FREE 16  /* [slot]: my pushes the peer has consumed, written by the peer */
#define ZCC_GPU_CE_PUSH 32  /* [slot]: my pushes (counter) */
#define ZCC_GPU_CE_RECV 48  /* [slot]: peer pushes I consumed (counter) */
#define ZCC_GPU_CE_BYTES 4096

#define ZCC_GPU_PTR_CACHE 8

/* A buffer registered with a GPU communicator, as every rank maps it. */
typedef struct zcc_gpu_reg {
  struct zcc_gpu_reg *next;
  char *base;                      /* the allocation holding it (own) */
  size_t size;                     /* bytes from base */
  char *peer[ZCC_DEV_MAX_CONN_RANKS];   /* each rank's registered buffer as this GPU addresses it */
  char *mapped[ZCC_DEV_MAX_CONN_RANKS]; /* what the transport mapped for rank r (reg_unmap), or NULL */
  int index;                       /* registration order on this communicator */
  int mapped_by_peers;             /* 0: kept, but peers see nothing (the transport maps none) */
} zcc_gpu_reg_t;

typedef struct zcc_gpu {
  int dev;
  int nranks, rank;
  char *win;                           /* own window (device address) */
  int win_host;                        /* 1: in pinned host memory, the transport's */
  const struct zcc_transport_ops *tp;  /* the transport connecting every peer */
  size_t win_bytes;
  char *peer_win[ZCC_DEV_MAX_CONN_RANKS];   /* each rank's window as this GPU addresses it */
  uint32_t *flags[ZCC_DEV_MAX_CONN_RANKS];
  void *ll[ZCC_DEV_MAX_CONN_RANKS];
  void *p2p[ZCC_DEV_MAX_CONN_RANKS];
  char *staging[ZCC_DEV_MAX_CONN_RANKS];
  size_t staging_bytes;
  volatile uint32_t *abort_host;       /* mapped pinned word: nonzero stops waiting kernels */
  uint32_t *abort_dev;
  /* Peers on other hosts with a signature mirror: the word (in the abort
     word's allocation) the network proxy raises as their collectives agree
     with this rank's (sigboard.h); connector kernels wait for it. NULL: none. */
  uint64_t *sig_gate_dev;
  int watchdog_started;
  atomic_int watchdog_stop;
  pthread_t watchdog_thread;
  zcc_gpu_reg_t *regs;
  int nregs;
  /* Copy-engine pipeline (two ranks): flags, a side stream and events. */
  uint32_t *ce[ZCC_DEV_MAX_CONN_RANKS];     /* each rank's CE flag words (ZCC_GPU_CE_*) */
  uint32_t *push[ZCC_DEV_MAX_CONN_RANKS];   /* each rank's push-allreduce flags (device.h) */
  void *side;                          /* cudaStream_t */
  void *ev_fork, *ev_join;             /* cudaEvent_t */
  void *ev_copy[ZCC_GPU_CE_SLOTS];     /* cudaEvent_t: a slot's push has read its input */
  /* Device allocations already checked (gpu_coll.c, zcc_gpu_check_ptr). */
  struct { uintptr_t lo, hi; unsigned long long id; } ptr_ok[ZCC_GPU_PTR_CACHE];
  unsigned ptr_next;
  /* Connectors (device.h): the ring and tree kernels' FIFOs and flags, in
     every window after the staging buffer; the table in device memory. */
  zcc_dev_conns_t *conns;              /* host copy */
  void *conns_dev;                     /* device copy */
  /* Ranks share GPUs: the most ranks on any one GPU of the communicator, and
     the thread blocks one launch of a kernel that waits for peers may use, so
     that every rank's blocks are resident at once. */
  int gpu_share;
  int block_cap;
  int share_local; /* ranks of this process on this GPU, this one included */
  /* ZCC_P2P_DIRECT_DISABLE=1: send/receive and all-to-all run over the
     per-peer connectors (zcc_dev_conn_p2p) instead of the p2p outboxes. */
  int p2p_conn;
  /* Some peer is reached only through connectors a proxy moves (a conn_only
     transport, transport.h), or the ranks outnumber what the all-pairs
     kernels take (ZCC_DEV_MAX_RANKS): only the connector kernels run,
     p2p_conn set. */
  int conn_only;
  /* All-to-all over the per-peer connectors: the rounds (peers each way) one
     launch runs, alike on every rank (check_layout), so that its blocks and
     those of the peers' launches it waits for are resident at once. */
  int a2a_round;
  /* A hash of the channels' rings (conns->ch[].ring_rank): every rank must
     run the same. */
  uint64_t rings_hash;
  /* Op stamps (device.h): the live words and the ring of op times, mapped
     pinned memory (one allocation); the host's side: launches made, the op
     being enqueued, each slot's last launch token (its op is done on the
     GPU once end_token reaches it). */
  zcc_dev_live_t *live_host, *live_dev;
  zcc_dev_op_time_t *times_host, *times_dev;
  uint64_t *times_last;    /* [ntimes], host memory */
  uint32_t ntimes;         /* slots: the flight recorder's entries, or 1 */
  void *stamps_probe;      /* ZCC_GPU_STAMPS=2: device memory the kernels stamp, unread */
  uint64_t token;          /* launches stamped */
  uint64_t op_id;          /* the op being enqueued: its flight recorder id (0: none) */
  uint32_t op_slot;
  uint32_t op_launches;    /* of it so far */
  uint32_t quiet_ns;       /* the stamps' quiet_ns (device.h): ZCC_GPU_STAMP_QUIET_US
                              (-1: ZCC_DEV_NO_EXITS), 0 under ZCC_TRACE_FILE (the trace
                              takes every GPU end) */
  int64_t beat_fresh_ns;   /* a waiting block's heartbeat this recent: still waiting */
  int64_t clock_offset_ns; /* CLOCK_MONOTONIC minus %globaltimer */
  int64_t abort_ns;        /* when the abort word was first raised (0: never) */
  /* The link probe (zcc_gpu_probe) runs its allreduces as this, not as chosen. */
  int force_on;
  zcc_algo_t force_algo;
  zcc_proto_t force_proto;
} zcc_gpu_t;

/*
 * Build the GPU side of a communicator whose peers are known (comm->peers
 * filled): window, mappings, abort word, watchdog. Collective over the
 * bootstrap. On error everything made so far is released.
 */
zccResult_t zcc_gpu_comm_setup(struct zccComm *comm);
/* Wait for the device's work, unmap, free (also after a failed setup). */
void zcc_gpu_comm_free(struct zccComm *comm);
/* Make waiting kernels give up (abort, error state). */
void zcc_gpu_comm_stop_kernels(struct zccComm *comm);
/* The op stamps of the op with flight recorder id `id` (0: one without a
   record) that the launches enqueued from now on belong to, and after
   them: its last launch. */
void zcc_gpu_op_begin(struct zcc_gpu *g, uint64_t id);
void zcc_gpu_op_end(struct zcc_gpu *g);
/* The stamp for the next launch of the current op (live NULL: stamps off). */
zcc_dev_stamp_t zcc_gpu_stamp(struct zcc_gpu *g);
/* The GPU's times of the op with record id `id`, as CLOCK_MONOTONIC ns:
   2 done (start and end set), 3 ended after the abort word was raised (its
   waits gave up: failed), 4 done with no end stamped (its launches were
   quiet: device.h; *end_ns 0), 1 started, 0 not started yet, -1 none will
   come (it launched nothing stamped, or its slot was reused). */
int zcc_gpu_op_times(struct zccComm *comm, uint64_t id, int64_t *start_ns, int64_t *end_ns);

/* The device current in the calling thread (for zccCommInitRank). */
zccResult_t zcc_gpu_current_device(int *dev);
/* cudaSetDevice for the calling thread. */
zccResult_t zcc_gpu_bind_device(int dev);

/* What zcc_gpu_coll would refuse of these arguments (stream, buffers),
   refused before the call takes its number: nothing changes. Accepted,
   args holds its buffers as the GPU reaches them (args->mapped). */
zccResult_t zcc_gpu_coll_check(struct zccComm *comm, zcc_coll_args_t *args,
                               struct CUstream_st *stream, const char *fn);
/* Enqueue a validated collective on stream (a cudaStream_t); its buffers
   mapped here unless args->mapped. */
zccResult_t zcc_gpu_coll(struct zccComm *comm, const zcc_coll_args_t *args,
                         struct CUstream_st *stream, const char *fn);

/* Launch a group's point-to-point operations of one communicator. */
zccResult_t zcc_gpu_p2p(struct zccComm *comm, const zcc_gpu_p2p_op_t *ops, int nops,
                        const char *fn);

/* Check that ptr is memory the communicator's GPU can address. */
zccResult_t zcc_gpu_check_ptr(struct zccComm *comm, const void *ptr, const char *what,
                              const char *fn);

/* ZCC_TOPO_MEASURE: the median us of `iters` allreduces of `bytes` as algo/proto (collective). */
zccResult_t zcc_gpu_probe(struct zccComm *comm, zcc_algo_t algo, zcc_proto_t proto, size_t bytes,
                          int iters, double *median_us);

/* zccCommRegister / zccCommDeregister on a GPU communicator (collective). */
zccResult_t zcc_gpu_register(struct zccComm *comm, void *buf, size_t size, void **handle);
zccResult_t zcc_gpu_deregister(struct zccComm *comm, void *handle);

#endif /* ZCC_GPU_H_ */
