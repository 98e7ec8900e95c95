/*
 * The one host-versus-GPU fork of core (core/device.c): a communicator on a
 * GPU holds the GPU face's table (comm->dev), a host communicator holds
 * none. Core calls through it and includes no CUDA header; the GPU
 * executor (exec/gpu.c) and the p2p transport fill it.
 */
#ifndef ZCC_DEVOPS_H_
#define ZCC_DEVOPS_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "zcc.h"

struct zccComm;
struct CUstream_st;

/* One point-to-point operation of a GPU communicator. */
typedef struct zcc_gpu_p2p_op {
  void *buf;
  size_t bytes;
  int peer;
  int is_recv;
  struct CUstream_st *stream;
  uint64_t op_id; /* its flight recorder id (0: none) */
} zcc_gpu_p2p_op_t;

/*
 * Send/receive over the per-peer connectors runs in rounds of peer distance
 * (exec/gpu.c): a send to rank me + d and a receive from rank me - d (mod
 * nranks) are in round d, so both ends of every pair are in the same round;
 * one launch takes `per` consecutive rounds (launch (d - 1) / per), alike on
 * every rank. The round (1 .. nranks - 1) of an op with peer != me.
 */
static inline int zcc_p2p_round(int me, int peer, int nranks, int is_recv) {
  return is_recv ? (me - peer + nranks) % nranks : (peer - me + nranks) % nranks;
}

typedef struct zcc_device_ops {
  const char *name;
  /* The device current in the calling thread, and its PCI bus id. */
  zccResult_t (*current)(int *dev, char *bus, size_t buslen);
  /* Make dev current in the calling thread (zccCommInitAll's threads). */
  zccResult_t (*bind)(int dev);
  /* The GPU side of a communicator whose peers are known (collective). */
  zccResult_t (*setup)(struct zccComm *comm);
  /* Wait for the device's work, unmap, free (also after a failed setup). */
  void (*free)(struct zccComm *comm);
  /* Make waiting kernels give up (abort, error state). */
  void (*stop)(struct zccComm *comm);
  /* Refuse a collective's stream or buffers before it takes its number
     (the signature board, the flight recorder): a refused call changes
     nothing. An accepted one has its buffers mapped for the GPU in args
     (args->mapped), for coll to take as they are. */
  zccResult_t (*check)(struct zccComm *comm, zcc_coll_args_t *args,
                       struct CUstream_st *stream, const char *fn);
  /* Enqueue a validated collective on the stream. */
  zccResult_t (*coll)(struct zccComm *comm, const zcc_coll_args_t *args,
                      struct CUstream_st *stream, const char *fn);
  /* Launch point-to-point operations of one communicator together. */
  zccResult_t (*p2p)(struct zccComm *comm, const zcc_gpu_p2p_op_t *ops, int nops,
                     const char *fn);
  /* zccCommRegister / zccCommDeregister (collective). */
  zccResult_t (*reg)(struct zccComm *comm, void *buf, size_t size, void **handle);
  zccResult_t (*dereg)(struct zccComm *comm, void *handle);
  /* ZCC_TOPO_MEASURE: the median us of `iters` allreduces of `bytes` (float
     sum) run as algo/proto, timed on the device (collective). */
  zccResult_t (*probe)(struct zccComm *comm, zcc_algo_t algo, zcc_proto_t proto, size_t bytes,
                       int iters, double *median_us);
  /* The GPU's times of the op with flight recorder id `id` (CLOCK_MONOTONIC
     ns): 2 done, 3 ended cut short by an abort, 4 done without an end time,
     1 started, 0 not yet, -1 none will come (gpu.h). */
  int (*op_times)(struct zccComm *comm, uint64_t id, int64_t *start_ns, int64_t *end_ns);
} zcc_device_ops_t;

/* The GPU face, or NULL when this build has no CUDA. */
const zcc_device_ops_t *zcc_device_cuda(void);

#endif /* ZCC_DEVOPS_H_ */
