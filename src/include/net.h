/*
 * The network plug-in table the `net` transport's proxy drives (the shape of
 * NCCL's net plug-in API, v8): `ib` (libibverbs, src/transport/net_ib.c) and
 * `socket` (TCP, src/transport/net_sock.c). docs/net.md describes the contract.
 *
 * Every call returns at once:
 *   - listen fills a handle of ZCC_NET_HANDLE_BYTES that the caller carries to
 *     the peer out of band (the bootstrap);
 *   - connect and accept complete over repeated calls: they return zccSuccess
 *     with *comm NULL until the connection is up, then the comm;
 *   - isend and irecv return *request NULL when they cannot start yet (ib:
 *     no clear-to-send from the receiver; every slot in flight): call
 *     again; a plug-in whose props say eager (socket) sends at once, so a
 *     send may go before its receive is posted;
 *   - test says whether a request is done and, for a receive, how many bytes
 *     arrived; a request that is done is released by that test.
 * Sends on one send comm match the receives posted on its recv comm in order,
 * one to one; a receive may be larger than its send (the size test gives is
 * the send's), never smaller (zccInvalidUsage: on the sender where the
 * clear-to-send carries the receive's size, ib; on the receiver where sends
 * are eager, socket). Errors of the peer or of the network
 * are zccRemoteError with the cause in zccGetLastError() (for ib: the verbs
 * status text); after one, a comm only accepts close.
 *
 * Any side channel a plug-in opens (ib: the TCP connection on which queue
 * pairs are exchanged) is authenticated with the communicator's secret and a
 * context (zcc_net_auth_t): a peer that cannot prove it holds both is dropped
 * and accept goes on waiting for the right one.
 */
#ifndef ZCC_NET_H_
#define ZCC_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "socket.h"
#include "zcc.h"

#define ZCC_NET_HANDLE_BYTES 128
/* Handles are 8-byte aligned: plug-ins keep a struct (and their connect state) in them. */
#define ZCC_NET_HANDLE_ALIGN _Alignas(8)
#define ZCC_NET_NAME_BYTES 64
/* In flight per comm: isends on a send comm, irecvs on a recv comm. */
#define ZCC_NET_MAX_REQUESTS 64

/* Memory a plug-in can reach (zcc_net_props_t.ptr_support, reg_mr's type). */
#define ZCC_NET_PTR_HOST 0x1
#define ZCC_NET_PTR_CUDA 0x2   /* device memory through nvidia-peermem (reg_mr) */
#define ZCC_NET_PTR_DMABUF 0x4 /* device memory through a dmabuf handle (reg_mr_dmabuf) */

typedef struct zcc_net_props {
  char name[ZCC_NET_NAME_BYTES]; /* "mlx5_0:1", "eth0" */
  int speed_mbps;                /* link rate, 0 unknown */
  int port;                      /* device port (ib), 0 otherwise */
  int ptr_support;               /* ZCC_NET_PTR_* */
  int max_comms;                 /* connections the device takes, 0: no limit */
  int max_requests;              /* ZCC_NET_MAX_REQUESTS or less */
  size_t max_message;            /* largest isend/irecv in bytes */
  int latency_us;                /* a rough one-way latency, 0 unknown */
  int eager;                     /* 1: an isend goes without waiting for its
                                    receive (socket); 0: it waits for the
                                    receiver's clear-to-send (ib) */
} zcc_net_props_t;

/* What a side channel must prove: the communicator's secret and a context. */
typedef struct zcc_net_auth {
  uint8_t secret[ZCC_SECRET_BYTES];
  uint64_t context;
} zcc_net_auth_t;

typedef struct zcc_net_ops {
  const char *name;
  /* Find devices (called before any other entry; idempotent). */
  zccResult_t (*init)(void);
  /* How many devices; 0 is not an error. */
  zccResult_t (*devices)(int *ndev);
  zccResult_t (*get_properties)(int dev, zcc_net_props_t *props);
  /* Listen on dev; handle (ZCC_NET_HANDLE_BYTES) goes to the connector. */
  zccResult_t (*listen)(int dev, const zcc_net_auth_t *auth, void *handle,
                        void **listen_comm);
  /*
   * Call until *send_comm is non-NULL. The caller's copy of the handle holds
   * the connection's progress between calls (as in NCCL): pass the same
   * memory each time, and do not reuse it for another connect.
   */
  zccResult_t (*connect)(int dev, const zcc_net_auth_t *auth, void *handle,
                         void **send_comm);
  /* Call until *recv_comm is non-NULL. */
  zccResult_t (*accept)(void *listen_comm, void **recv_comm);
  /* Register [data, data+size) of memory type (ZCC_NET_PTR_*) for a comm. */
  zccResult_t (*reg_mr)(void *comm, void *data, size_t size, int type,
                        void **mhandle);
  /*
   * Register device memory [data, data+size) through a dmabuf: fd from
   * cuMemGetHandleForAddressRange for a range that starts `offset` bytes
   * before data (type ZCC_NET_PTR_DMABUF). The caller may close fd once this
   * returns. NULL when the plug-in has no dmabuf support.
   */
  zccResult_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type,
                               uint64_t offset, int fd, void **mhandle);
  zccResult_t (*dereg_mr)(void *comm, void *mhandle);
  /* mhandle from reg_mr on this comm; may be NULL when size is 0. */
  zccResult_t (*isend)(void *send_comm, void *data, size_t size, void *mhandle,
                       void **request);
  zccResult_t (*irecv)(void *recv_comm, void *data, size_t size, void *mhandle,
                       void **request);
  /* *done 1 once finished; *size (may be NULL): bytes sent or received. */
  zccResult_t (*test)(void *request, int *done, size_t *size);
  zccResult_t (*close_send)(void *send_comm);
  zccResult_t (*close_recv)(void *recv_comm);
  zccResult_t (*close_listen)(void *listen_comm);
} zcc_net_ops_t;

/*
 * Side-channel helpers the plug-ins share (src/transport/net.c).
 * zcc_net_xfer moves what a non-blocking socket takes of buf[*off, n):
 * 1 when all n bytes are through (*off back to 0), 0 not yet, -1 the
 * connection failed or closed (no error is recorded: a stranger's
 * connection failing is not ours). zcc_net_mac is the proof of `role`
 * ('s' listener, 'c' connector) over both nonces, bound to the plug-in's
 * 10-byte label and to auth's context; zcc_net_mac_equal compares in
 * constant time.
 */
int zcc_net_xfer(int fd, void *buf, size_t n, size_t *off, int out);
void zcc_net_mac(const zcc_net_auth_t *auth, const char label[10], char role,
                 const uint8_t cnonce[16], const uint8_t snonce[16],
                 uint8_t out[32]);
int zcc_net_mac_equal(const uint8_t a[32], const uint8_t b[32]);

extern const zcc_net_ops_t zcc_net_ib_ops;
extern const zcc_net_ops_t zcc_net_socket_ops;

/*
 * The plug-in named `name`, or by ZCC_NET_PLUGIN when name is NULL ("ib" by
 * default); NULL with the last error set when none has that name.
 */
const zcc_net_ops_t *zcc_net_find(const char *name);
/* ZCC_NET_PLUGIN's value (the plug-in zcc_net_find(NULL) looks for: ib when unset). */
const char *zcc_net_plugin_name(void);
/* Is ZCC_NET_PLUGIN set? (unset, GPU communicators fall back to socket) */
int zcc_net_plugin_chosen(void);

struct zccComm;
struct zcc_net_gpu;

/*
 * The net transport's per-communicator plug-in (net_transport.c: its
 * comm_setup), which its host face and its GPU face (net_gpu.c) drive:
 * the plug-in, its device, what side channels prove, and this rank's
 * listener (its handle is in the rank's peer info) until every connection
 * is up.
 */
typedef struct zcc_net_comm {
  const zcc_net_ops_t *net;
  int dev;
  zcc_net_auth_t auth;
  void *listen_comm;
  struct zcc_net_gpu *gpu; /* the GPU face's connectors and proxy, or NULL */
} zcc_net_comm_t;

/* The communicator's, or NULL when the net transport found no device. */
zcc_net_comm_t *zcc_net_comm_of(struct zccComm *comm);
/* Close the listener (every connection of the communicator is up). */
void zcc_net_comm_close_listen(zcc_net_comm_t *nc);
/* Release the GPU face's connectors (net_gpu.c; at comm_free). */
void zcc_net_gpu_release(struct zccComm *comm, zcc_net_comm_t *nc);

#endif /* ZCC_NET_H_ */
