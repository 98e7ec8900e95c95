/*
 * Transports: one ops table each, listed in priority order; the first
 * whose can_connect says yes connects a pair of ranks. The same table
 * serves host and GPU communicators:
 *   - host communicators: a connection moves a stream of bytes each way;
 *     the executor hands it transfers (zcc_xfer_t) and calls progress,
 *     which never blocks;
 *   - GPU communicators (entries with a GPU face, `gpu`): the face may
 *     place the communicator's window (win_alloc: a memory every peer it
 *     connects can map), each connection sends the peer an opaque blob
 *     (blob), takes the peer's (attach), and then hands the GPU executor a
 *     device view of the peer (view): the peer's window as this GPU
 *     addresses it, and whether kernels may load from it or only store.
 * Per-communicator state lives in a slot keyed by the table
 * (zcc_transport_slot), never in another transport's.
 */
#ifndef ZCC_TRANSPORT_H_
#define ZCC_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "device.h"
#include "opsig.h"
#include "zcc.h"

typedef struct zcc_conn {
  const struct zcc_transport_ops *ops;
  struct zccComm *comm;
  int peer;
  void *priv;
} zcc_conn_t;

/* One message one way on one connection. */
typedef struct zcc_xfer {
  zcc_conn_t *conn;
  int is_recv;
  const void *src;  /* send: the bytes */
  void *dst;        /* recv: where they land */
  const void *red;  /* recv: if set, dst = red op incoming (element-wise) */
  int in_first;     /* recv with red: dst = incoming op red instead (the peer's
                       bytes are the first operand: rank order) */
  zccDataType_t type;
  zccRedOp_t op;
  size_t bytes;
  size_t done;
  size_t avail;     /* send: bytes of src ready to go (<= bytes); progress
                       never sends past it */
  int after;        /* index of an earlier transfer in the batch on the same
                       connection and direction, which must finish first; -1 */
  int limit_by;     /* send: index of a receive in the batch whose progress
                       bounds avail (it fills src); -1: all of src is ready */
  int fwd;          /* recv: index of the send that forwards what this
                       receive produces (its limit_by is this one); -1 */
  struct zcc_xfer *fwd_ready; /* recv: set by the executor when that send is
                       caught up and may be written now, so the transport
                       can produce both outputs in one pass; else NULL */
  int nt;          /* recv: dst is the operation's output, which no later
                       step reads (only a forwarding send that fell behind,
                       from memory then): written with streaming stores,
                       past the cache, where the transport copies or
                       reduces */
  int nt_ok;       /* recv: the plan may set nt (its stores' choice for the
                       call, stores.h) */
  int slot_nt;     /* send: written into the transport's slots (shm) with
                       streaming stores: the stores then take the line
                       without first fetching the copy the peer's core
                       read last (stores.h says when that is faster) */
  int slot_nt_ok;  /* send: the plan may set slot_nt (stores.h) */
  const zcc_op_sig_t *sig; /* the operation it belongs to (its plan's); the
                       transport sends it with the first bytes and checks
                       the peer's against it (opsig.h) */
} zcc_xfer_t;

/* A receive's reduction of n elements that arrived at `in` into dst (and dst2
   if not NULL: a forwarding send's slot), operands in the order x asks for;
   dst streams where x->nt, dst2 where dst2_nt. */
void zcc_xfer_reduce(const zcc_xfer_t *x, void *dst, void *dst2, int dst2_nt, const void *in,
                     size_t n);

typedef enum {
  ZCC_CONNECT_CREATE = 0, /* make local resources */
  ZCC_CONNECT_ATTACH = 1, /* after a barrier: reach the peer's */
  ZCC_CONNECT_FINISH = 2, /* after a barrier: drop names, etc. */
  ZCC_CONNECT_PHASES = 3
} zcc_connect_phase_t;

/* What a GPU kernel of this rank may do with a peer through a connection. */
typedef struct zcc_dev_peer {
  char *win;   /* the peer's window, as this GPU addresses it */
  int loads;   /* 1: kernels may load from it as well as store */
} zcc_dev_peer_t;

/* What a transport's registration blob may hold (a CUDA IPC handle is 64 bytes). */
#define ZCC_REG_BLOB_MAX 64

/*
 * A connector's key (device.h: connectors), the same on both of its ends:
 * its channel and its role there, or the per-peer connector of
 * send/receive. With the sender and the receiver it names the connector.
 */
#define ZCC_CONN_KEY_RING 0  /* a channel's ring: send[SEND_RING] -> recv[RECV_RING] */
#define ZCC_CONN_KEY_UP 1    /* its tree, child to parent: send[SEND_UP] -> recv[RECV_UP] */
#define ZCC_CONN_KEY_DOWN 2  /* parent to child: send[SEND_DOWN] -> recv[RECV_DOWN] */
#define ZCC_CONN_KEY_LOCAL 3 /* its host's ring: send[SEND_LOCAL] -> recv[RECV_LOCAL] */
#define ZCC_CONN_KEY_RAIL 4  /* its rail's ring: send[SEND_RAIL] -> recv[RECV_RAIL] */
#define ZCC_CONN_KEY(channel, role) ((uint32_t)(channel) * 8u + (uint32_t)(role))
#define ZCC_CONN_KEY_PEER ZCC_CONN_KEY(ZCC_DEV_MAX_CHANNELS, 0) /* send/receive */

/* The GPU face of a transport (NULL in a host-only entry). */
typedef struct zcc_transport_gpu {
  size_t blob_bytes; /* size of the blob each side of a connection sends the other */
  int host_memory;   /* 1: the window is pinned host memory (kernels reach it over PCIe) */
  /*
   * 1: kernels never address the peer's window; they reach the peer only
   * through connectors this face binds (conn_bind), whose slots a proxy
   * moves. A communicator with such a pair runs the connector kernels alone
   * (ring, tree, send/receive over connectors); view is not called. The
   * window (win_alloc, when this face connects every pair) is local.
   */
  int conn_only;
  /*
   * The window's memory when this transport connects the communicator:
   * `bytes` that every peer can map, *dev its device address (the executor
   * zeroes its flags). win_free releases it (after the device is idle; also
   * when nothing was allocated).
   */
  zccResult_t (*win_alloc)(struct zccComm *comm, size_t bytes, char **dev);
  void (*win_free)(struct zccComm *comm);
  /* This side's blob for conn->peer. */
  zccResult_t (*blob)(zcc_conn_t *conn, void *out);
  /* Take the peer's blob: map what it names (after every rank made its own). */
  zccResult_t (*attach)(zcc_conn_t *conn, const void *peer_blob);
  /* Every rank attached every connection (after a barrier): drop names. */
  void (*ready)(struct zccComm *comm);
  /* The device view of the peer (after attach). */
  zccResult_t (*view)(zcc_conn_t *conn, zcc_dev_peer_t *out);
  /* Is the peer still there? (the GPU watchdog asks) */
  zccResult_t (*check)(zcc_conn_t *conn);
  void (*free)(zcc_conn_t *conn);
  /*
   * zccCommRegister: map a user buffer's allocation for peers (zero copy).
   * reg_export describes the allocation at `base` in reg_blob_bytes (at
   * most ZCC_REG_BLOB_MAX); reg_map takes a peer's description and the
   * peer's base address and gives the allocation as this GPU addresses it,
   * and in *mapped what reg_unmap must release (NULL: nothing). reg_map
   * NULL: registrations map nothing over this transport (kernels go through
   * the windows, as for unregistered buffers).
   */
  size_t reg_blob_bytes;
  zccResult_t (*reg_export)(struct zccComm *comm, void *base, void *blob);
  zccResult_t (*reg_map)(zcc_conn_t *conn, const void *peer_blob, uint64_t peer_base, char **out,
                         char **mapped);
  void (*reg_unmap)(zcc_conn_t *conn, char *mapped);
  /*
   * conn_only faces. conn_bind: connector `key` with conn->peer, is_send 1
   * for this rank's sends into it, 0 for its receives: fills out's fifo,
   * ready, freed and (send) sizes as this GPU addresses them, nslots x
   * slot_bytes of FIFO (the executor sets step). conn_start: every
   * connector of the communicator is bound: connect them to the peers'
   * (each rank's conn_start runs at once; bounded by ZCC_CONNECT_TIMEOUT)
   * and start moving slots. max_channels: the channels such a
   * communicator runs at most. unused: the communicator connects no pair
   * through this entry (drop what comm_setup made).
   */
  zccResult_t (*conn_bind)(zcc_conn_t *conn, uint32_t key, int is_send, int nslots,
                           size_t slot_bytes, zcc_dev_conn_t *out);
  zccResult_t (*conn_start)(struct zccComm *comm);
  int (*max_channels)(void);
  void (*unused)(struct zccComm *comm);
} zcc_transport_gpu_t;

typedef struct zcc_transport_ops {
  const char *name;
  /* Can this transport connect self and peer? Must answer the same on both sides. */
  int (*can_connect)(const struct zccComm *comm, const zcc_peer_info_t *self,
                     const zcc_peer_info_t *peer);
  /* Per-communicator set-up before peer info is exchanged (e.g. listen). */
  zccResult_t (*comm_setup)(struct zccComm *comm, zcc_peer_info_t *self);
  /* One phase of connecting conn->peer; phases run in order for all peers,
     with a barrier between phases; peers are visited in rank order. */
  zccResult_t (*connect)(zcc_conn_t *conn, zcc_connect_phase_t phase);
  /* Move what can move now; sets *moved when bytes moved. */
  zccResult_t (*progress)(zcc_conn_t *conn, zcc_xfer_t *x, int *moved);
  /* Are bytes from the peer waiting to be received? Never blocks, moves
     nothing; for zccRecvAny. NULL: the transport cannot tell. */
  int (*pending)(zcc_conn_t *conn);
  /* Bytes from the peer are waiting that no call of this rank receives
     (`mine` runs now and moves none on this connection): the error naming
     both calls (zccInvalidUsage), or the peer's failure. zccSuccess while
     nothing waits. Moves nothing. NULL: the transport cannot tell. */
  zccResult_t (*stray)(zcc_conn_t *conn, const zcc_op_sig_t *mine);
  /* Is the peer still there? Called while waiting; zccRemoteError if not. */
  zccResult_t (*check)(zcc_conn_t *conn);
  /* Asked of every connection while a wait on other peers drags on: the
     peer's failure record, if its communicator failed and said so, as the
     error it names; zccSuccess otherwise, a peer that closed or left
     included (it may have finished; calls with it say so), and a peer that
     timed out (it says only that some rank was slow, which this rank's own
     ZCC_TIMEOUT says as well). Moves no data. NULL: the transport has no
     such record. */
  zccResult_t (*fail_peek)(zcc_conn_t *conn);
  /* Tell the peer that this side gave up (so it stops waiting). */
  void (*fail)(zcc_conn_t *conn);
  void (*free)(zcc_conn_t *conn);
  void (*comm_free)(struct zccComm *comm);
  /* Why can_connect says no (for the error naming the pair); NULL: no detail. */
  void (*refusal)(const struct zccComm *comm, const zcc_peer_info_t *self,
                  const zcc_peer_info_t *peer, char *why, size_t whylen);
  /* The GPU face; NULL: host communicators only. (progress NULL: GPU only.) */
  const zcc_transport_gpu_t *gpu;
} zcc_transport_ops_t;

extern const zcc_transport_ops_t zcc_transport_shm;
extern const zcc_transport_ops_t zcc_transport_net;    /* network plug-ins (net.h) */
extern const zcc_transport_ops_t zcc_transport_socket;
extern const zcc_transport_ops_t zcc_transport_p2p; /* GPU builds only */
extern const zcc_transport_gpu_t zcc_shm_gpu_face; /* shm's GPU face (shm_gpu.c) */
extern const zcc_transport_gpu_t zcc_net_gpu_face; /* net's GPU face (net_gpu.c) */

/* The per-communicator state slot of a transport (NULL until it sets one). */
void **zcc_transport_slot(struct zccComm *comm, const zcc_transport_ops_t *ops);

/* ZCC_CONNECT_TIMEOUT: what connecting a pair of ranks may take, in ms. */
int64_t zcc_transport_connect_timeout_ms(void);

/* Fill self's transport fields, exchange peer info, connect every pair
   (host communicators; GPU communicators connect in zcc_transport_pick_gpu). */
zccResult_t zcc_transport_connect_all(struct zccComm *comm);
/*
 * GPU communicators (the GPU executor's setup): a connection to every
 * peer, and *out the entry whose window the communicator uses. Every rank
 * picks alike (the answers of can_connect are exchanged; a pair counts
 * only if both sides accept it):
 *   - the first window entry (not conn_only) that connects every pair
 *     connects them all (one memory kind: peers map each other's window);
 *   - else the first window entry that connects every pair of ranks on one
 *     host connects those, and the first conn_only entry the pairs across
 *     hosts (kernels reach those peers only through connectors);
 *   - else, when no window entry connects the pairs of one host, the first
 *     conn_only entry connects every pair, and places the (local) window.
 * A pair none can connect is zccInvalidUsage naming the pair and each
 * transport's reason.
 */
zccResult_t zcc_transport_pick_gpu(struct zccComm *comm, const zcc_transport_ops_t **out);
/* Then, once the window exists: exchange the blobs, attach, and wait for every rank. */
zccResult_t zcc_transport_attach_gpu(struct zccComm *comm);
/* Does the connection reach its peer only through connectors (a conn_only face)? */
static inline int zcc_conn_proxied(const zcc_conn_t *c) {
  return c && c->ops->gpu && c->ops->gpu->conn_only;
}
/* Once every connector is bound: start the conn_only faces (conn_start). */
zccResult_t zcc_transport_start_gpu(struct zccComm *comm);
/* Free every connection and transport state. */
void zcc_transport_free_all(struct zccComm *comm);
/* Poison every connection (after an error or abort). */
void zcc_transport_fail_all(struct zccComm *comm);

#endif /* ZCC_TRANSPORT_H_ */
