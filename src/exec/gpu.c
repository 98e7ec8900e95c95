/*
 * Collectives of GPU communicators: copies and kernels enqueued on the
 * caller's stream, nothing waited for on the host (so every call captures
 * into a CUDA graph).
 *
 * Every rank of a communicator enqueues the same sequence of kernels on its
 * flag area (the kernels keep per-block counters there), so the choices
 * below depend only on arguments every rank shares: the collective, count,
 * type, op, root, and whether the buffers are registered (registration is
 * collective and used symmetrically, as NCCL's windows are).
 *
 * Paths (ZCC_DEBUG_SUBSYS=COLL prints the one each call takes):
 *   allreduce <= 64 KiB        LL: data pushed with flags into peers' LL areas
 *   unregistered, larger       push: one kernel stores each chunk of the input into
 *                              the peers' staging and reduces what arrived locally
 *   allreduce, 2 ranks, large  copy engines push pieces into the peer's staging,
 *                              SMs reduce locally (allreduce_ce)
 *   registered                 one-shot / two-shot reading peers' buffers in place
 *   unregistered, forced       (ZCC_ALGO=oneshot|twoshot) the input is copied into the
 *                              own staging buffer (one copy), the kernel reads the
 *                              peers' staging; two-shot writes back through staging
 *                              (two copies); larger than staging: in pieces
 *
 * The push kernel writes into peers' staging without a barrier first, so
 * every sequence that uses staging ends with every rank done with its own:
 * the kernels' end barriers do that, and the two sequences that read
 * staging after their last kernel (two-shot staged, the copy-engine
 * pipeline) end with zcc_dev_barrier.
 *   broadcast, allgather,      staged copy in, then every rank pulls what it
 *   alltoall                   needs from the peers' staging (gather kernel)
 *   reduce, reducescatter      staged, one-shot reduction of the own slice
 *   send/recv                  the p2p kernel (sender's outbox, receiver pulls)
 *   ZCC_P2P_DIRECT_DISABLE=1   send/recv and alltoall over the per-peer connectors
 *                              (sender stores into the receiver's FIFO)
 *   ZCC_ALGO=ring|tree         allreduce, broadcast, reduce, all-gather and
 *                              reduce-scatter over the connectors (device.h):
 *                              one kernel, no staging copy, any transport
 *   pre-multiplied sums        allreduce: scaled into recvbuff, then summed there;
 *                              reduce, reducescatter: scaled into the own staging
 *                              piece by piece, then reduced (staged or ring)
 * Where ranks share a GPU, grids are capped (zcc_gpu_t.block_cap) so that
 * every rank's blocks run at once.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cudawrap.h"
#include "comm.h"
#include "debug.h"
#include "gpu.h"
#include "bootstrap.h"
#include "param.h"
#include "planner.h"
#include "reduce.h"
#include "trace.h"

static zccResult_t cuda_err(cudaError_t e, const char *what, const char *fn) {
  return zcc_error(zccUnhandledCudaError, "%s: %s failed: %s (%s)", fn, what,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

/* cuda_err where e is one, else success (for paths that free before returning). */
static zccResult_t cu_err(cudaError_t e, const char *what, const char *fn) {
  return e == cudaSuccess ? zccSuccess : cuda_err(e, what, fn);
}

static zccResult_t dev_err(int e, const char *what, const char *fn) {
  return zcc_error(e == 1 ? zccInvalidArgument : zccUnhandledCudaError, "%s: %s failed: %s",
                   fn, what, zcc_dev_error_string(e));
}

#define CU(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) return cuda_err(e_, #call, fn);                     \
  } while (0)

#define DEV(call)                                                              \
  do {                                                                         \
    int e_ = (call);                                                           \
    if (e_ != 0) return dev_err(e_, #call, fn);                                \
  } while (0)

/*
 * Checked pointers are remembered by their allocation (base, size): the
 * next call on the same buffers skips cudaPointerGetAttributes, a driver
 * query that costs about a microsecond each time. An allocation freed and
 * its addresses reused stays device memory (the driver keeps its device
 * address ranges reserved), so a remembered range stays valid.
 */
static int ptr_known(const zcc_gpu_t *g, const void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < ZCC_GPU_PTR_CACHE; i++)
    if (p >= g->ptr_ok[i].lo && p < g->ptr_ok[i].hi) {
      /* the same allocation still: a range freed (and perhaps reallocated,
       * on another GPU) since has another buffer id, or none */
      unsigned long long id;
      return zcc_cuda_buffer_id(ptr, &id) == 0 && id == g->ptr_ok[i].id;
    }
  return 0;
}

static void ptr_remember(zcc_gpu_t *g, const void *ptr) {
  void *base = NULL;
  size_t size = 0;
  unsigned long long id;
  if (zcc_cuda_mem_range(ptr, &base, &size) != 0 || size == 0 ||
      zcc_cuda_buffer_id(ptr, &id) != 0)
    return;
  int i = g->ptr_next++ % ZCC_GPU_PTR_CACHE;
  g->ptr_ok[i].lo = (uintptr_t)base;
  g->ptr_ok[i].hi = (uintptr_t)base + size;
  g->ptr_ok[i].id = id;
}

/*
 * What kernels may take: device memory of this communicator's GPU, pinned
 * host memory (cudaHostAlloc, cudaHostRegister, pin_memory=True) through its
 * device mapping (*dev: the address kernels use; the same under unified
 * addressing), and managed memory (the driver migrates or maps its pages on
 * access). Pageable host memory and memory of another GPU are refused.
 */
static zccResult_t gpu_addr_kind(struct zccComm *comm, const void *ptr, const char *what,
                                 const char *fn, const void **dev, int *host) {
  zcc_gpu_t *g = comm->gpu;
  *dev = ptr;
  *host = 0;
  if (ptr_known(g, ptr)) return zccSuccess;
  struct cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return zcc_error(zccInvalidArgument, "%s: %s %p: cannot query it (%s)", fn, what, ptr,
                     cudaGetErrorString(e));
  }
  switch (at.type) {
  case cudaMemoryTypeDevice:
    if (at.device != g->dev)
      return zcc_error(zccInvalidArgument,
                       "%s: %s %p is memory of GPU %d; this communicator's rank %d runs on GPU "
                       "%d", fn, what, ptr, at.device, comm->rank, g->dev);
    ptr_remember(g, ptr);
    return zccSuccess;
  case cudaMemoryTypeHost:
    if (!at.devicePointer)
      return zcc_error(zccInvalidArgument,
                       "%s: %s %p is pinned host memory not mapped into GPU %d (register it "
                       "with cudaHostRegisterMapped, or allocate it with cudaHostAlloc)", fn,
                       what, ptr, g->dev);
    *dev = at.devicePointer;
    *host = 1;
    ZCC_INFO(COLL, "%s: %s %p is pinned host memory: kernels read and write it in place "
             "through its mapping %p", fn, what, ptr, at.devicePointer);
    return zccSuccess;
  case cudaMemoryTypeManaged:
    ZCC_INFO(COLL, "%s: %s %p is managed memory: kernels reach it where the driver puts its "
             "pages", fn, what, ptr);
    return zccSuccess;
  default:
    return zcc_error(zccInvalidArgument,
                     "%s: %s %p is pageable host memory (or freed); a GPU communicator (GPU "
                     "%d) takes device memory, or host memory pinned and mapped: "
                     "cudaHostAlloc, cudaHostRegister, or torch's pin_memory=True", fn, what,
                     ptr, g->dev);
  }
}

static zccResult_t gpu_addr(struct zccComm *comm, const void *ptr, const char *what,
                            const char *fn, const void **dev) {
  int host;
  return gpu_addr_kind(comm, ptr, what, fn, dev, &host);
}

zccResult_t zcc_gpu_check_ptr(struct zccComm *comm, const void *ptr, const char *what,
                              const char *fn) {
  const void *dev;
  return gpu_addr(comm, ptr, what, fn, &dev);
}

/* The registration holding [p, p + bytes), or NULL. */
static zcc_gpu_reg_t *find_reg(zcc_gpu_t *g, const void *p, size_t bytes) {
  for (zcc_gpu_reg_t *r = g->regs; r; r = r->next)
    if (r->mapped_by_peers && (const char *)p >= r->base && (const char *)p + bytes <= r->base + r->size)
      return r;
  return NULL;
}

/*
 * Blocks a kernel that waits for peers may use: `want`, or fewer where ranks
 * share a GPU, so that the blocks of every rank's launch are resident at
 * once (the kernels' blocks wait for their peers' blocks of the same index).
 */
static int grid_cap(const zcc_gpu_t *g, int want) {
  return want < g->block_cap ? want : g->block_cap;
}

/* Kernel arguments common to every launch on this communicator. */
static void ar_base(const zcc_gpu_t *g, zcc_dev_allreduce_t *a) {
  memset(a, 0, sizeof(*a));
  for (int r = 0; r < g->nranks; r++) {
    a->flags[r] = g->flags[r];
    a->ll[r] = g->ll[r];
  }
  a->abort_flag = g->abort_dev;
  a->nranks = g->nranks;
  a->rank = g->rank;
  a->max_blocks = grid_cap(g, ZCC_DEV_DEFAULT_BLOCKS);
}

static void gather_base(const zcc_gpu_t *g, zcc_dev_gather_t *a) {
  memset(a, 0, sizeof(*a));
  for (int r = 0; r < g->nranks; r++) a->flags[r] = g->flags[r];
  a->abort_flag = g->abort_dev;
  a->nranks = g->nranks;
  a->rank = g->rank;
  a->max_blocks = grid_cap(g, ZCC_DEV_DEFAULT_BLOCKS);
}

/* Bytes per piece: a multiple of 16 (every type's size divides it). */
static size_t piece_bytes(size_t limit) {
  size_t p = limit / 16 * 16;
  return p ? p : 16;
}

/*
 * Two ranks, large messages: the copy engines push each piece of the input
 * into the peer's staging slot (cudaMemcpyAsync on a side stream, about the
 * NVLink line rate), and the SMs reduce what arrived with the own input
 * (local memory only), piece by piece, the two overlapping. Flags in the
 * windows pace the slots: a push into a slot waits until the peer consumed
 * the slot's previous piece; a reduction waits until the peer's piece is in.
 * A barrier first: the peer's earlier use of its staging is over.
 */
static zccResult_t allreduce_ce(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                                size_t bytes, const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  int me = g->rank, peer = 1 - me;
  size_t es = zcc_type_size(x->type);
  size_t slot = piece_bytes(g->staging_bytes / ZCC_GPU_CE_SLOTS);
  size_t piece = piece_bytes(bytes / 8);
  if (piece < ((size_t)1 << 20)) piece = (size_t)1 << 20;
  if (piece > slot) piece = slot;
  cudaStream_t side = (cudaStream_t)g->side;
  uint32_t *mine = g->ce[me], *theirs = g->ce[peer];
  zcc_dev_allreduce_t b;
  ar_base(g, &b);
  b.type = x->type;
  b.op = x->op;
  b.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_barrier(&b, s));
  CU(cudaEventRecord((cudaEvent_t)g->ev_fork, s));
  CU(cudaStreamWaitEvent(side, (cudaEvent_t)g->ev_fork, 0));
  const char *in = x->sendbuf;
  char *out = x->recvbuf;
  size_t i = 0;
  for (size_t off = 0; off < bytes; off += piece, i++) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    int k = (int)(i % ZCC_GPU_CE_SLOTS);
    char *dst_slot = g->staging[peer] + (size_t)k * slot;
    char *my_slot = g->staging[me] + (size_t)k * slot;
    /* (the side stream's waits run beside the stream's launches: unstamped) */
    DEV(zcc_dev_flag_wait(mine + ZCC_GPU_CE_PUSH + k, mine + ZCC_GPU_CE_FREE + k, 0, g->abort_dev,
                          NULL, side));
    CU(cudaMemcpyAsync(dst_slot, in + off, n, cudaMemcpyDefault, side));
    CU(cudaEventRecord((cudaEvent_t)g->ev_copy[k], side));
    DEV(zcc_dev_flag_signal(mine + ZCC_GPU_CE_PUSH + k, theirs + ZCC_GPU_CE_READY + k, 1, side));
    zcc_dev_stamp_t st = zcc_gpu_stamp(g);
    DEV(zcc_dev_flag_wait(mine + ZCC_GPU_CE_RECV + k, mine + ZCC_GPU_CE_READY + k, 1, g->abort_dev,
                          &st, s));
    CU(cudaStreamWaitEvent(s, (cudaEvent_t)g->ev_copy[k], 0)); /* in place: pushed before overwritten */
    const void *a0 = me == 0 ? (const void *)(in + off) : (const void *)my_slot;
    const void *a1 = me == 0 ? (const void *)my_slot : (const void *)(in + off);
    DEV(zcc_dev_reduce(out + off, a0, a1, n / es, x->type, x->op, s));
    if (x->op == zccAvg) DEV(zcc_dev_finish_avg(out + off, out + off, n / es, x->type, 2, s));
    DEV(zcc_dev_flag_signal(mine + ZCC_GPU_CE_RECV + k, theirs + ZCC_GPU_CE_FREE + k, 0, s));
  }
  CU(cudaEventRecord((cudaEvent_t)g->ev_join, side));
  CU(cudaStreamWaitEvent(s, (cudaEvent_t)g->ev_join, 0));
  b.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_barrier(&b, s)); /* every rank is done with its staging (push kernel) */
  ZCC_INFO(COLL, "%s %zu bytes: copy-engine push + local reduce, %zu piece(s) of %zu", fn, bytes,
            i, piece);
  return zccSuccess;
}

/* A connector launch's arguments that come from the communicator and the
   call: the tables, the type, op and root, the abort word and the gate. */
static void conn_args_base(const zcc_gpu_t *g, const zcc_coll_args_t *x,
                           zcc_dev_conn_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->conns = g->conns_dev;
  a->host = g->conns;
  a->type = x->type;
  a->op = x->op;
  a->root = x->root;
  a->abort_flag = g->abort_dev;
  a->sig_gate = g->sig_gate_dev;
  a->sig_seq = x->sig_seq;
}

/*
 * A collective over the connectors (ring or tree kernels): no staging copy,
 * the kernels read the input and write the output in place. One rank has
 * nothing to move: its result is its input.
 */
static zccResult_t conn_coll(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                             int tree, const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  size_t es = zcc_type_size(x->type), bytes = x->count * es;
  if (g->nranks == 1) {
    if (x->sendbuf != x->recvbuf)
      CU(cudaMemcpyAsync(x->recvbuf, x->sendbuf, bytes, cudaMemcpyDefault, s));
    ZCC_INFO(COLL, "%s %zu bytes: one rank, %s", fn, bytes,
             x->sendbuf != x->recvbuf ? "one copy" : "nothing to move");
    return zccSuccess;
  }
  zcc_dev_conn_args_t a;
  conn_args_base(g, x, &a);
  switch (x->coll) {
  case ZCC_COLL_ALLREDUCE: a.coll = tree ? ZCC_DEV_CONN_TREE_ALLREDUCE : ZCC_DEV_CONN_ALLREDUCE; break;
  case ZCC_COLL_REDUCESCATTER: a.coll = ZCC_DEV_CONN_REDUCESCATTER; break;
  case ZCC_COLL_ALLGATHER: a.coll = ZCC_DEV_CONN_ALLGATHER; break;
  case ZCC_COLL_BROADCAST: a.coll = ZCC_DEV_CONN_BROADCAST; break;
  case ZCC_COLL_REDUCE: a.coll = ZCC_DEV_CONN_REDUCE; break;
  default: return zcc_error(zccInternalError, "%s: no connector kernel for this collective", fn);
  }
  a.input = x->sendbuf;
  a.output = x->recvbuf;
  a.count = x->count;
  ZCC_INFO(COLL, "%s %zu bytes: %s over connectors, %d channel(s), no copy", fn, bytes,
           a.coll == ZCC_DEV_CONN_TREE_ALLREDUCE ? "tree" : "ring", zcc_dev_conn_channels(&a));
  a.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_conn_coll(&a, s));
  return zccSuccess;
}

/*
 * The hierarchical all-gather: each rank's block to the same index on
 * every host (an all-gather on its rail, blocks by rank), then every host's
 * ranks exchange what they gathered (an all-gather on the host's ring, one
 * block per host and position, in place). No copy; the network carries
 * each block to each other host once.
 */
static zccResult_t conn_hier_allgather(struct zccComm *comm, const zcc_coll_args_t *x,
                                       cudaStream_t s, const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  size_t es = zcc_type_size(x->type), bytes = x->count * es;
  zcc_dev_conn_args_t a;
  conn_args_base(g, x, &a);
  a.coll = ZCC_DEV_CONN_ALLGATHER;
  a.by_rank = 1;
  a.count = x->count;
  a.ring = ZCC_DEV_RING_RAIL;
  a.input = x->sendbuf;
  a.output = x->recvbuf;
  int nrail = zcc_dev_conn_channels(&a);
  a.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_conn_coll(&a, s));
  a.ring = ZCC_DEV_RING_LOCAL;
  a.input = (char *)x->recvbuf + (size_t)comm->ring_order[comm->hier_li] * bytes;
  int nch = zcc_dev_conn_channels(&a);
  a.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_conn_coll(&a, s));
  ZCC_INFO(COLL, "%s %zu bytes a rank: hier over connectors: all-gather on the rail of %d hosts "
           "(%d channel(s)), then on the host's ring of %d, %d block(s) a rank (%d "
           "channel(s)), no copy", fn, bytes, comm->hier_h, nrail, comm->hier_m, comm->hier_h,
           nch);
  return zccSuccess;
}

/*
 * One pass of a hierarchical reduction: elements [e0, e0 + n) of each
 * input block summed on the host's ring into the own staging buffer
 * (zccAvg divides later, once, on the rail), then set up for the rail's
 * step (the op, zccAvg's divisor, input the staging buffer); the caller
 * sets the rest of each (ring collective, blocks, root, output).
 */
static zccResult_t hier_local_pass(zcc_gpu_t *g, const zcc_coll_args_t *x, zcc_dev_conn_args_t *a,
                                   size_t e0, size_t n, int nranks, cudaStream_t s,
                                   const char *fn) {
  a->ring = ZCC_DEV_RING_LOCAL;
  a->count = n;
  a->op = x->op == zccAvg ? zccSum : x->op;
  a->avg_div = 0;
  a->input = (const char *)x->sendbuf + e0 * zcc_type_size(x->type);
  a->output = g->staging[g->rank];
  a->stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_conn_coll(a, s));
  a->ring = ZCC_DEV_RING_RAIL;
  a->op = x->op;
  a->avg_div = x->op == zccAvg ? nranks : 0;
  a->input = g->staging[g->rank];
  return zccSuccess;
}

/*
 * The hierarchical reduce-scatter, the all-gather's mirror: the host's
 * ranks sum, on the host's ring, the blocks of each index on every host
 * (one segment a host) into the own staging buffer; then a reduce-scatter
 * of those on the rail (blocks by host) leaves each rank its block. In
 * pieces of the staging buffer; zccAvg divides once, on the rail.
 */
static zccResult_t conn_hier_reducescatter(struct zccComm *comm, const zcc_coll_args_t *x,
                                           cudaStream_t s, const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  size_t es = zcc_type_size(x->type), H = (size_t)comm->hier_h, cb = x->count * es;
  size_t piece = g->staging_bytes / H / 16 * 16 / es; /* elements of each block a pass */
  if (piece == 0)
    return zcc_error(zccInternalError, "%s: a %llu-byte staging buffer holds no piece of %zu "
                     "blocks", fn, (unsigned long long)g->staging_bytes, H);
  zcc_dev_conn_args_t a;
  conn_args_base(g, x, &a);
  a.coll = ZCC_DEV_CONN_REDUCESCATTER;
  size_t passes = 0;
  int nch = 0, nrail = 0;
  for (size_t e0 = 0; e0 < x->count; e0 += piece, passes++) {
    size_t pc = x->count - e0 < piece ? x->count - e0 : piece;
    a.by_rank = 1; /* the host's step: every host's block of each index */
    a.stride = cb;
    a.ring = ZCC_DEV_RING_LOCAL;
    a.count = pc;
    nch = zcc_dev_conn_channels(&a);
    ZCC_CHECK(hier_local_pass(g, x, &a, e0, pc, comm->nranks, s, fn));
    a.by_rank = 0; /* the rail's: the blocks by host, as the staging buffer holds them */
    a.stride = 0;
    a.output = (char *)x->recvbuf + e0 * es;
    nrail = zcc_dev_conn_channels(&a);
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_conn_coll(&a, s));
  }
  ZCC_INFO(COLL, "%s %zu bytes a rank: hier over connectors: reduce-scatter on the host's ring "
           "of %d, %d block(s) a rank into staging (%d channel(s)), then on the rail of %d "
           "hosts (%d channel(s)), %zu pass(es)", fn, cb, comm->hier_m, comm->hier_h, nch,
           comm->hier_h, nrail, passes);
  return zccSuccess;
}

/*
 * The hierarchical broadcast and reduce, through the ranks of the root's
 * local index (the root's rail). Broadcast: along that rail from the
 * root, then on every host's ring from its rank there. Reduce: on every
 * host's ring to its rank on the root's rail, into that rank's staging
 * buffer, then along the rail to the root; in passes of the staging buffer,
 * zccAvg dividing once, on the rail. Ranks off the root's rail take no part
 * in the rail's step; nothing but the root's output is written.
 */
static zccResult_t conn_hier_rooted(struct zccComm *comm, const zcc_coll_args_t *x,
                                    cudaStream_t s, const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  size_t es = zcc_type_size(x->type), bytes = x->count * es;
  int m = comm->hier_m, at = 0;
  for (int i = 0; i < comm->nranks; i++)
    if (comm->ring_order[i] == x->root) at = i;
  int root_host = at / m, root_li = at % m, on_rail = comm->hier_li == root_li;
  zcc_dev_conn_args_t a;
  conn_args_base(g, x, &a);
  if (x->coll == ZCC_COLL_BROADCAST) {
    a.coll = ZCC_DEV_CONN_BROADCAST;
    a.count = x->count;
    if (on_rail) {
      a.ring = ZCC_DEV_RING_RAIL;
      a.root = root_host;
      a.input = comm->rank == x->root ? x->sendbuf : x->recvbuf;
      a.output = x->recvbuf;
      a.stamp = zcc_gpu_stamp(g);
      DEV(zcc_dev_conn_coll(&a, s));
    }
    a.ring = ZCC_DEV_RING_LOCAL;
    a.root = root_li;
    a.input = x->recvbuf;
    a.output = x->recvbuf;
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_conn_coll(&a, s));
    ZCC_INFO(COLL, "%s %zu bytes: hier over connectors: broadcast along the rail of %d hosts "
             "from rank %d%s, then on the host's ring of %d from local index %d", fn, bytes,
             comm->hier_h, x->root, on_rail ? "" : " (not this rank's)", m, root_li);
    return zccSuccess;
  }
  size_t piece = g->staging_bytes / 16 * 16 / es;
  a.coll = ZCC_DEV_CONN_REDUCE;
  size_t passes = 0;
  for (size_t e0 = 0; e0 < x->count; e0 += piece, passes++) {
    size_t pc = x->count - e0 < piece ? x->count - e0 : piece;
    a.root = root_li;
    ZCC_CHECK(hier_local_pass(g, x, &a, e0, pc, comm->nranks, s, fn));
    if (!on_rail) continue;
    a.root = root_host;
    a.output = comm->rank == x->root ? (char *)x->recvbuf + e0 * es : g->staging[g->rank];
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_conn_coll(&a, s));
  }
  ZCC_INFO(COLL, "%s %zu bytes: hier over connectors: reduce on the host's ring of %d to local "
           "index %d, into staging, then along the rail of %d hosts to rank %d%s, %zu "
           "pass(es)", fn, bytes, m, root_li, comm->hier_h, x->root,
           on_rail ? "" : " (not this rank's)", passes);
  return zccSuccess;
}

/*
 * The hierarchical allreduce over connectors (ranks on several hosts, m on
 * each): a ring reduce-scatter among the host's ranks, an allreduce of the
 * rank's block over its rail (the rank of its local index on every host,
 * across the network), a ring all-gather among the host's ranks. Block i
 * (of B bytes, 16-byte aligned, the last ones short or empty) belongs to
 * local index i. Every block is reduced once, in local then rail ring
 * order, and copied around: every rank's output is bitwise identical. A
 * rail whose block is empty skips its allreduce (all of its ranks alike).
 * The other collectives' hierarchical forms are the functions above.
 */
static zccResult_t conn_hier(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                             const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  if (!comm->hier_local || x->coll == ZCC_COLL_ALLTOALL || x->coll == ZCC_COLL_SENDRECV)
    return zcc_error(zccInternalError, "%s: hier chosen on a communicator without "
                     "hierarchical groups, or for a collective without it", fn);
  if (x->coll == ZCC_COLL_BROADCAST || x->coll == ZCC_COLL_REDUCE)
    return conn_hier_rooted(comm, x, s, fn);
  if (x->coll == ZCC_COLL_ALLGATHER) return conn_hier_allgather(comm, x, s, fn);
  if (x->coll == ZCC_COLL_REDUCESCATTER) return conn_hier_reducescatter(comm, x, s, fn);
  size_t es = zcc_type_size(x->type), bytes = x->count * es;
  size_t m = (size_t)comm->hier_m, li = (size_t)comm->hier_li;
  size_t per = (x->count + m - 1) / m * es;
  size_t B = (per + 15) / 16 * 16; /* whole elements: every type's size divides 16 */
  size_t mine = li * B >= bytes ? 0 : bytes - li * B < B ? bytes - li * B : B;
  char *blk = (char *)x->recvbuf + li * B;
  zcc_dev_conn_args_t a;
  conn_args_base(g, x, &a);
  a.total = bytes;
  a.count = B / es;
  /* 1. reduce-scatter among the host's ranks: sums (zccAvg divides once, on the rail) */
  a.ring = ZCC_DEV_RING_LOCAL;
  a.coll = ZCC_DEV_CONN_REDUCESCATTER;
  a.op = x->op == zccAvg ? zccSum : x->op;
  a.input = x->sendbuf;
  a.output = blk;
  int nch = zcc_dev_conn_channels(&a);
  a.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_conn_coll(&a, s));
  /* 2. allreduce of the own block over the rail, in place */
  a.ring = ZCC_DEV_RING_RAIL;
  a.coll = ZCC_DEV_CONN_ALLREDUCE;
  a.op = x->op;
  a.avg_div = x->op == zccAvg ? comm->nranks : 0;
  a.total = 0;
  a.count = mine / es;
  a.input = blk;
  a.output = blk;
  int nrail = a.count ? zcc_dev_conn_channels(&a) : 0;
  if (a.count) {
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_conn_coll(&a, s));
  }
  /* 3. all-gather among the host's ranks, in place */
  a.ring = ZCC_DEV_RING_LOCAL;
  a.coll = ZCC_DEV_CONN_ALLGATHER;
  a.op = zccSum;
  a.avg_div = 0;
  a.total = bytes;
  a.count = B / es;
  a.input = blk;
  a.output = x->recvbuf;
  a.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_conn_coll(&a, s));
  ZCC_INFO(COLL, "%s %zu bytes: hier over connectors: reduce-scatter on the host's ring of %d "
           "(%d channel(s)), allreduce of %zu bytes on the rail of %d hosts (%d channel(s)), "
           "all-gather on the host's ring, no copy", fn, bytes, comm->hier_m, nch, mine,
           comm->hier_h, nrail);
  return zccSuccess;
}

/*
 * The end of a sequence that read the own staging buffer: every rank past
 * it has finished with its staging, which the push kernel then writes into
 * without a barrier of its own. Where peers are reached only through
 * connectors (conn_only) no kernel writes into a peer's staging: nothing
 * to wait for (and no peer flag area to wait on).
 */
static zccResult_t staging_barrier(zcc_gpu_t *g, cudaStream_t s, const char *fn) {
  if (g->conn_only) return zccSuccess;
  zcc_dev_allreduce_t b;
  ar_base(g, &b);
  b.stamp = zcc_gpu_stamp(g);
  DEV(zcc_dev_barrier(&b, s));
  return zccSuccess;
}

/*
 * Pre-multiplied sums of reduce and reduce-scatter: the piece at `off` (n
 * bytes) of each of the input's `blocks` blocks of `bytes` scaled by this
 * rank's scalar into the own staging buffer, block r at r * n. Only
 * recvbuff is written afterwards, so in place works as out of place.
 */
static zccResult_t stage_scaled(zcc_gpu_t *g, const zcc_coll_args_t *x, size_t off, size_t n,
                                size_t bytes, int blocks, cudaStream_t s, const char *fn) {
  size_t es = zcc_type_size(x->type);
  for (int r = 0; r < blocks; r++)
    DEV(zcc_dev_scale(g->staging[g->rank] + (size_t)r * n,
                      (const char *)x->sendbuf + (size_t)r * bytes + off, n / es, x->type,
                      x->scalar_ptr, x->scalar, s));
  return zccSuccess;
}

/*
 * Pre-multiplied reduce and reduce-scatter over the connectors: each piece
 * of the input is scaled into the own staging buffer (stage_scaled) and the
 * ring kernel reduces it from there into recvbuff. Every rank cuts alike
 * (count and staging size are shared). The sequence ends with a barrier:
 * the push kernel writes into peers' staging without one, so every rank
 * must be done reading its own first.
 */
static zccResult_t conn_premul(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                               const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  int k = g->nranks, me = g->rank, scatter = x->coll == ZCC_COLL_REDUCESCATTER;
  size_t es = zcc_type_size(x->type), bytes = x->count * es; /* per rank's output */
  if (k == 1) { /* the result is the scaled input */
    DEV(zcc_dev_scale(x->recvbuf, x->sendbuf, x->count, x->type, x->scalar_ptr, x->scalar, s));
    ZCC_INFO(COLL, "%s %zu bytes: one rank, pre-multiplied: scaled", fn, bytes);
    return zccSuccess;
  }
  size_t piece = piece_bytes(scatter ? g->staging_bytes / (size_t)k : g->staging_bytes);
  zcc_dev_conn_args_t a;
  conn_args_base(g, x, &a);
  a.coll = scatter ? ZCC_DEV_CONN_REDUCESCATTER : ZCC_DEV_CONN_REDUCE;
  size_t npieces = 0;
  for (size_t off = 0; off < bytes; off += piece, npieces++) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    ZCC_CHECK(stage_scaled(g, x, off, n, bytes, scatter ? k : 1, s, fn));
    a.input = g->staging[me];
    a.output = x->recvbuf ? (char *)x->recvbuf + off : NULL; /* reduce: unused off the root */
    a.count = n / es;
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_conn_coll(&a, s));
  }
  ZCC_CHECK(staging_barrier(g, s, fn));
  ZCC_INFO(COLL, "%s %zu bytes: pre-multiplied, scaled into staging, ring over connectors, "
           "%zu piece(s)", fn, bytes, npieces);
  return zccSuccess;
}

/*
 * The allreduce algorithm for x, and whether its buffers are read in place;
 * *rs / *rr: the registrations holding sendbuff / recvbuff, or NULL.
 */
static zccResult_t ar_plan(struct zccComm *comm, const zcc_coll_args_t *x, zcc_choice_t *ch,
                           int *zero_copy, zcc_gpu_reg_t **rs, zcc_gpu_reg_t **rr) {
  zcc_gpu_t *g = comm->gpu;
  size_t bytes = x->count * zcc_type_size(x->type);
  *rs = find_reg(g, x->sendbuf, bytes);
  *rr = find_reg(g, x->recvbuf, bytes);
  if (g->force_on) /* the link probe's own kernel (zcc_gpu_probe) */
    *ch = (zcc_choice_t){g->force_algo, g->force_proto, 0};
  else
    ZCC_CHECK(zcc_select_cached(comm->select, ZCC_COLL_ALLREDUCE, bytes, !(*rs && *rr), ch));
  zcc_trace_predicted(comm, g->op_id, ch->time_us);
  int simple = ch->proto == ZCC_PROTO_SIMPLE;
  *zero_copy = simple && ch->algo == ZCC_ALGO_ONESHOT   ? *rs != NULL
               : simple && ch->algo == ZCC_ALGO_TWOSHOT ? *rs && *rr
                                                        : 0;
  return zccSuccess;
}

ZCC_PARAM_INT(gpu_push_blocks, "GPU_PUSH_BLOCKS", 0,
              "most thread blocks of the push allreduce kernel, half pushing and half "
              "reducing (2 to 256, capped at the SM count; equal on every rank); 0: 128, "
              "or 32 where the staging buffers are pinned host memory (the shm transport)")

/* Push blocks where the windows are host memory: fewer lanes keep PCIe busier
   (docs/perf/h200x1.md, 2026-12-02: 32 blocks 19.2 GB/s at 64 MiB, 66 blocks 17.2). */
#define GPU_PUSH_BLOCKS_DEVICE 128
#define GPU_PUSH_BLOCKS_HOST 32
#define GPU_PUSH_LANE_CHUNKS_HOST 4

static zccResult_t allreduce(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                             const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  size_t es = zcc_type_size(x->type), bytes = x->count * es;
  zcc_choice_t ch;
  int zero_copy;
  zcc_gpu_reg_t *rs, *rr;
  ZCC_CHECK(ar_plan(comm, x, &ch, &zero_copy, &rs, &rr));
  zcc_algo_t algo = ch.algo;
  if (algo == ZCC_ALGO_CE) return allreduce_ce(comm, x, s, bytes, fn);
  if (algo == ZCC_ALGO_RING || algo == ZCC_ALGO_TREE)
    return conn_coll(comm, x, s, algo == ZCC_ALGO_TREE, fn);
  if (algo == ZCC_ALGO_HIER) return conn_hier(comm, x, s, fn);
  if (algo == ZCC_ALGO_PUSH) {
    zcc_dev_push_t p;
    memset(&p, 0, sizeof(p));
    p.input = x->sendbuf;
    p.output = x->recvbuf;
    for (int r = 0; r < g->nranks; r++) {
      p.staging[r] = g->staging[r];
      p.push[r] = g->push[r];
    }
    p.abort_flag = g->abort_dev;
    p.staging_bytes = g->staging_bytes;
    p.count = x->count;
    p.type = x->type;
    p.op = x->op;
    p.nranks = g->nranks;
    p.rank = g->rank;
    int64_t pb = zcc_param_gpu_push_blocks();
    if (pb != 0 && (pb < 2 || pb > ZCC_DEV_MAX_BLOCKS))
      return zcc_error(zccInvalidArgument, "%s: ZCC_GPU_PUSH_BLOCKS=%lld: expected 0 (by the "
                       "staging's memory) or 2 to %d", fn, (long long)pb, ZCC_DEV_MAX_BLOCKS);
    if (pb == 0) pb = g->win_host ? GPU_PUSH_BLOCKS_HOST : GPU_PUSH_BLOCKS_DEVICE;
    p.max_blocks = grid_cap(g, (int)pb) & ~1;
    if (p.max_blocks < 2) p.max_blocks = 2;
    p.lane_chunks = g->win_host ? GPU_PUSH_LANE_CHUNKS_HOST : 0;
    p.local_copy = (x->host_bufs & ZCC_HOST_SEND) != 0;
    if (zcc_log_enabled(ZCC_LOG_INFO, ZCC_COLL)) {
      int blocks = 0;
      size_t chunk = 0;
      (void)zcc_dev_allreduce_push_grid(&p, &blocks, &chunk);
      ZCC_INFO(COLL, "%s %zu bytes: push (stores into peers' staging, no copy on the stream), "
               "%d block(s), chunks of %zu%s", fn, bytes, blocks, chunk,
               p.local_copy ? ", the host input read once (a copy in the own staging)" : "");
    }
    p.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_allreduce_push(&p, s));
    return zccSuccess;
  }
  zcc_dev_allreduce_t a;
  ar_base(g, &a);
  a.type = x->type;
  a.op = x->op;
  if (ch.proto == ZCC_PROTO_LL) {
    a.inputs[g->rank] = x->sendbuf;
    a.outputs[g->rank] = x->recvbuf;
    a.count = x->count;
    ZCC_INFO(COLL, "%s %zu bytes: LL, no copy", fn, bytes);
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_allreduce_oneshot_ll(&a, s));
    return zccSuccess;
  }
  int twoshot = algo == ZCC_ALGO_TWOSHOT;
  if (zero_copy) {
    size_t so = (const char *)x->sendbuf - rs->base;
    size_t ro = rr ? (size_t)((const char *)x->recvbuf - rr->base) : 0;
    for (int r = 0; r < g->nranks; r++) {
      a.inputs[r] = rs->peer[r] + so;
      a.outputs[r] = rr ? rr->peer[r] + ro : NULL;
    }
    a.outputs[g->rank] = x->recvbuf;
    a.count = x->count;
    ZCC_INFO(COLL, "%s %zu bytes: %s, registered (zero copy)", fn, bytes,
             zcc_algo_name(algo));
    a.stamp = zcc_gpu_stamp(g);
    DEV(twoshot ? zcc_dev_allreduce_twoshot(&a, s) : zcc_dev_allreduce_oneshot(&a, s));
    return zccSuccess;
  }
  size_t piece = piece_bytes(g->staging_bytes);
  ZCC_INFO(COLL, "%s %zu bytes: %s, staged (%s), %zu piece(s)", fn, bytes,
           zcc_algo_name(algo), twoshot ? "copy in and out" : "one copy",
           (bytes + piece - 1) / piece);
  for (size_t off = 0; off < bytes; off += piece) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    CU(cudaMemcpyAsync(g->staging[g->rank], (const char *)x->sendbuf + off, n,
                       cudaMemcpyDefault, s));
    for (int r = 0; r < g->nranks; r++) {
      a.inputs[r] = g->staging[r];
      a.outputs[r] = g->staging[r];
    }
    a.count = n / es;
    if (twoshot) {
      a.stamp = zcc_gpu_stamp(g);
      DEV(zcc_dev_allreduce_twoshot(&a, s));
      CU(cudaMemcpyAsync((char *)x->recvbuf + off, g->staging[g->rank], n,
                         cudaMemcpyDefault, s));
      a.stamp = zcc_gpu_stamp(g);
      DEV(zcc_dev_barrier(&a, s)); /* the copy out is done on every rank (push kernel) */
    } else {
      a.outputs[g->rank] = (char *)x->recvbuf + off;
      a.stamp = zcc_gpu_stamp(g);
      DEV(zcc_dev_allreduce_oneshot(&a, s));
    }
  }
  return zccSuccess;
}

/*
 * Reduce (root) and reducescatter: the one-shot kernel over staged inputs
 * (pre-multiplied sums: scaled into staging instead of copied).
 */
static zccResult_t reduce_like(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                               const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  int k = g->nranks, me = g->rank;
  int scatter = x->coll == ZCC_COLL_REDUCESCATTER;
  size_t es = zcc_type_size(x->type), bytes = x->count * es; /* per rank's output */
  size_t piece = piece_bytes(scatter ? g->staging_bytes / (size_t)k : g->staging_bytes);
  zcc_dev_allreduce_t a;
  ar_base(g, &a);
  a.type = x->type;
  a.op = x->op;
  ZCC_INFO(COLL, "%s %zu bytes: one-shot, staged (%s), %zu piece(s)", fn, bytes,
           x->scale ? "scaled, pre-multiplied" : "one copy", (bytes + piece - 1) / piece);
  for (size_t off = 0; off < bytes; off += piece) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    if (x->scale)
      ZCC_CHECK(stage_scaled(g, x, off, n, bytes, scatter ? k : 1, s, fn));
    else if (scatter)
      CU(cudaMemcpy2DAsync(g->staging[me], n, (const char *)x->sendbuf + off, bytes, n,
                           (size_t)k, cudaMemcpyDefault, s));
    else
      CU(cudaMemcpyAsync(g->staging[me], (const char *)x->sendbuf + off, n,
                         cudaMemcpyDefault, s));
    for (int r = 0; r < k; r++) a.inputs[r] = g->staging[r] + (scatter ? (size_t)me * n : 0);
    a.count = n / es;
    a.passive = !scatter && me != x->root;
    a.outputs[me] = a.passive ? NULL : (char *)x->recvbuf + off;
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_allreduce_oneshot(&a, s));
  }
  return zccSuccess;
}

/* Broadcast, allgather, alltoall: stage, then pull with the gather kernel. */
static zccResult_t gather_like(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                               const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  int k = g->nranks, me = g->rank;
  size_t es = zcc_type_size(x->type), bytes = x->count * es; /* per piece */
  int a2a = x->coll == ZCC_COLL_ALLTOALL, bcast = x->coll == ZCC_COLL_BROADCAST;
  size_t piece = piece_bytes(a2a ? g->staging_bytes / (size_t)k : g->staging_bytes);
  zcc_dev_gather_t a;
  gather_base(g, &a);
  ZCC_INFO(COLL, "%s %zu bytes: staged (one copy), gather, %zu piece(s)", fn, bytes,
            (bytes + piece - 1) / piece);
  const char *in = x->sendbuf;
  char *out = x->recvbuf;
  for (size_t off = 0; off < bytes; off += piece) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    memset(a.src, 0, sizeof(a.src));
    memset(a.dst, 0, sizeof(a.dst));
    if (bcast) {
      if (me == x->root) {
        CU(cudaMemcpyAsync(g->staging[me], in + off, n, cudaMemcpyDefault, s));
        if (in != out) {
          a.src[me] = in + off;
          a.dst[me] = out + off;
        }
      } else {
        a.src[x->root] = g->staging[x->root];
        a.dst[x->root] = out + off;
      }
    } else if (a2a) {
      CU(cudaMemcpy2DAsync(g->staging[me], n, in + off, bytes, n, (size_t)k,
                           cudaMemcpyDefault, s));
      for (int r = 0; r < k; r++) {
        a.src[r] = r == me ? g->staging[me] + (size_t)me * n : g->staging[r] + (size_t)me * n;
        a.dst[r] = out + (size_t)r * bytes + off;
      }
    } else { /* allgather */
      CU(cudaMemcpyAsync(g->staging[me], in + off, n, cudaMemcpyDefault, s));
      for (int r = 0; r < k; r++) {
        a.src[r] = g->staging[r];
        a.dst[r] = out + (size_t)r * bytes + off;
      }
      if (in + off == out + (size_t)me * bytes + off) a.src[me] = NULL, a.dst[me] = NULL;
      else a.src[me] = in + off;
    }
    a.bytes = n;
    a.stamp = zcc_gpu_stamp(g);
    DEV(zcc_dev_gather(&a, s));
  }
  return zccSuccess;
}

/*
 * Sends and receives with peers (ops to self skipped) over the per-peer
 * connectors (ZCC_P2P_DIRECT_DISABLE=1, or conn_only): the sender stores
 * into the receiver's FIFO, the receiver reads locally. An op's round is
 * its peer's distance (zcc_p2p_round: both ends of a pair in the same one).
 * One launch runs a2a_round consecutive rounds (the same rounds on every
 * rank), the ops of each (peer, direction) in the caller's order: a launch
 * waits only for the peers' launches of the same rounds, which every rank
 * reaches once its earlier ones are done, and the blocks of those fit on
 * the GPUs at once (zcc_gpu_t.a2a_round). *launches: how many it made.
 */
static zccResult_t p2p_conn_launch(struct zccComm *comm, const zcc_gpu_p2p_op_t *ops, int nops,
                                   cudaStream_t s, const char *fn, int *launches) {
  zcc_gpu_t *g = comm->gpu;
  int n = g->nranks, me = g->rank, per = g->a2a_round;
  int nwin = n > 1 ? (n - 2) / per + 1 : 1; /* launches of per rounds (none with one rank) */
  *launches = 0;
  int *count = calloc((size_t)nwin, sizeof(int));
  if (!count) return zcc_error(zccSystemError, "%s: out of memory", fn);
  /* Refuse before anything is enqueued. */
  for (int i = 0; i < nops; i++) {
    if (ops[i].peer == me || !ops[i].bytes) continue; /* zero bytes: nothing on either side */
    int d = zcc_p2p_round(me, ops[i].peer, n, ops[i].is_recv);
    if (++count[(d - 1) / per] > ZCC_DEV_P2P_MAX_OPS) {
      free(count);
      /* Split further, one rank's later launch could hold what a peer's
         earlier one waits for: refuse rather than risk a deadlock. */
      int lo = (d - 1) / per * per + 1, hi = lo + per - 1 < n - 1 ? lo + per - 1 : n - 1;
      return zcc_error(zccInvalidUsage,
                       "%s: a group holds more than %d sends and receives with the peers at "
                       "distances %d to %d on one GPU communicator", fn, ZCC_DEV_P2P_MAX_OPS,
                       lo, hi);
    }
  }
  zcc_dev_conn_p2p_t a;
  for (int w = 0; w < nwin; w++) {
    if (!count[w]) continue;
    memset(&a, 0, sizeof(a));
    a.conns = g->conns_dev;
    a.host = g->conns;
    a.abort_flag = g->abort_dev;
    for (int i = 0; i < nops; i++) {
      if (ops[i].peer == me || !ops[i].bytes) continue;
      int d = zcc_p2p_round(me, ops[i].peer, n, ops[i].is_recv);
      if ((d - 1) / per != w) continue;
      zcc_dev_p2p_op_t *o = &a.ops[a.nops++];
      o->buf = ops[i].buf;
      o->bytes = ops[i].bytes;
      o->peer = ops[i].peer;
      o->is_send = !ops[i].is_recv;
    }
    a.stamp = zcc_gpu_stamp(g);
    int e = zcc_dev_conn_p2p(&a, s);
    if (e) {
      free(count);
      return dev_err(e, "zcc_dev_conn_p2p(&a, s)", fn);
    }
    (*launches)++;
  }
  free(count);
  return zccSuccess;
}

/*
 * All-to-all over the per-peer connectors (ZCC_P2P_DIRECT_DISABLE=1): one
 * launch per piece of the blocks, sending block j's piece to rank j and
 * receiving rank j's into block j. Every rank cuts the blocks alike (from
 * the count and the staging size, which all share), so the n-th send from
 * one rank to another always meets a receive of the same size. In place,
 * each piece of every block is first copied into the own staging buffer and
 * sent from there (the receives overwrite the blocks); the sequence ends
 * with a barrier on every rank (in place or not, so the flag areas stay in
 * step), after which no rank reads its staging any more (the push kernel
 * writes into peers' staging without one).
 */
static zccResult_t alltoall_conn(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                                 const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  int k = g->nranks, me = g->rank;
  size_t es = zcc_type_size(x->type), bytes = x->count * es; /* per block */
  size_t piece = piece_bytes(g->staging_bytes / (size_t)k);
  const char *in = x->sendbuf;
  char *out = x->recvbuf;
  int inplace = x->sendbuf == x->recvbuf;
  zcc_gpu_p2p_op_t *ops = malloc(sizeof(*ops) * 2 * (size_t)k);
  if (!ops) return zcc_error(zccSystemError, "%s: out of memory", fn);
  zccResult_t res = zccSuccess;
  if (!inplace)
    res = cu_err(cudaMemcpyAsync(out + (size_t)me * bytes, in + (size_t)me * bytes, bytes,
                                 cudaMemcpyDefault, s), "cudaMemcpyAsync", fn);
  size_t npieces = 0;
  int launches = 0;
  for (size_t off = 0; off < bytes && res == zccSuccess; off += piece, npieces++) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    int nops = 0, nl = 0;
    if (inplace)
      res = cu_err(cudaMemcpy2DAsync(g->staging[me], n, in + off, bytes, n, (size_t)k,
                                     cudaMemcpyDefault, s), "cudaMemcpy2DAsync", fn);
    for (int r = 0; r < k; r++) {
      if (r == me) continue;
      ops[nops++] = (zcc_gpu_p2p_op_t){
          inplace ? g->staging[me] + (size_t)r * n : (char *)(in + (size_t)r * bytes + off), n, r,
          0, (struct CUstream_st *)s, 0};
      ops[nops++] = (zcc_gpu_p2p_op_t){out + (size_t)r * bytes + off, n, r, 1,
                                       (struct CUstream_st *)s, 0};
    }
    if (res == zccSuccess) res = p2p_conn_launch(comm, ops, nops, s, fn, &nl);
    launches += nl;
  }
  free(ops);
  ZCC_CHECK(res);
  ZCC_CHECK(staging_barrier(g, s, fn));
  ZCC_INFO(COLL, "%s %zu bytes: over connectors (send/receive), %zu piece(s), %d launch(es) of "
           "up to %d round(s)%s", fn, bytes, npieces, launches, g->a2a_round,
           inplace ? ", in place through staging" : "");
  return zccSuccess;
}

static zccResult_t dispatch(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                            const char *fn) {
  if (x->coll != ZCC_COLL_ALLREDUCE) {
    /* nccl-tests' size, as host plans and the decision table count it */
    size_t bytes = x->count * zcc_type_size(x->type);
    if (x->coll == ZCC_COLL_ALLGATHER || x->coll == ZCC_COLL_REDUCESCATTER ||
        x->coll == ZCC_COLL_ALLTOALL)
      bytes *= (size_t)comm->nranks;
    zcc_choice_t ch;
    ZCC_CHECK(zcc_select_cached(comm->select, x->coll, bytes, 1, &ch));
    zcc_trace_predicted(comm, comm->gpu->op_id, ch.time_us);
    if (ch.algo == ZCC_ALGO_RING)
      return x->scale ? conn_premul(comm, x, s, fn) : conn_coll(comm, x, s, 0, fn);
    /* (pre-multiplied sums run the ring's scaling path) */
    if (ch.algo == ZCC_ALGO_HIER && x->scale) return conn_premul(comm, x, s, fn);
    if (ch.algo == ZCC_ALGO_HIER && comm->gpu->nranks > 1) return conn_hier(comm, x, s, fn);
  }
  if (x->coll == ZCC_COLL_ALLTOALL && comm->gpu->p2p_conn && comm->gpu->nranks > 1)
    return alltoall_conn(comm, x, s, fn);
  switch (x->coll) {
  case ZCC_COLL_ALLREDUCE: return allreduce(comm, x, s, fn);
  case ZCC_COLL_REDUCE:
  case ZCC_COLL_REDUCESCATTER: return reduce_like(comm, x, s, fn);
  case ZCC_COLL_BROADCAST:
  case ZCC_COLL_ALLGATHER:
  case ZCC_COLL_ALLTOALL: return gather_like(comm, x, s, fn);
  default: return zcc_error(zccInternalError, "%s: not a collective", fn);
  }
}

/*
 * Ranks of one process that share a GPU wait for each other inside their
 * kernels, so their launches must be able to run at once: the legacy
 * default stream (NULL) serialises every stream of the device behind it.
 */
static zccResult_t check_stream(struct zccComm *comm, cudaStream_t s, const char *fn) {
  if (comm->gpu->share_local > 1 && (s == NULL || s == cudaStreamLegacy))
    return zcc_error(zccInvalidUsage,
                     "%s: %d ranks of this process share GPU %d, and this call is on the "
                     "legacy default stream, which would run one rank's kernel after the "
                     "other's while each waits for the other: give each rank its own stream "
                     "(cudaStreamCreateWithFlags(..., cudaStreamNonBlocking), or "
                     "cudaStreamPerThread with one thread per rank)",
                     fn, comm->gpu->share_local, comm->device);
  return zccSuccess;
}

/* The stream's and buffers' checks of a collective, and the addresses its
   kernels use (pinned host memory through its mapping) into *mapped. */
static zccResult_t map_args(struct zccComm *comm, const zcc_coll_args_t *x, cudaStream_t s,
                            const char *fn, zcc_coll_args_t *mapped) {
  ZCC_CHECK(check_stream(comm, s, fn));
  const void *dp;
  int host;
  *mapped = *x;
  mapped->host_bufs = 0;
  if (x->coll != ZCC_COLL_BROADCAST || comm->rank == x->root) {
    ZCC_CHECK(gpu_addr_kind(comm, x->sendbuf, "sendbuff", fn, &dp, &host));
    mapped->sendbuf = dp;
    if (host) mapped->host_bufs |= ZCC_HOST_SEND;
  }
  if (x->coll != ZCC_COLL_REDUCE || comm->rank == x->root) {
    ZCC_CHECK(gpu_addr_kind(comm, x->recvbuf, "recvbuff", fn, &dp, &host));
    mapped->recvbuf = (void *)dp;
    if (host) mapped->host_bufs |= ZCC_HOST_RECV;
  }
  if (x->scale && x->scalar_ptr) {
    ZCC_CHECK(gpu_addr(comm, x->scalar_ptr, "the pre-multiplied sum's scalar", fn, &dp));
    mapped->scalar_ptr = dp;
  }
  return zccSuccess;
}

zccResult_t zcc_gpu_coll_check(struct zccComm *comm, zcc_coll_args_t *x,
                               struct CUstream_st *stream, const char *fn) {
  if (x->count == 0) return zccSuccess;
  zcc_coll_args_t mapped;
  ZCC_CHECK(map_args(comm, x, (cudaStream_t)stream, fn, &mapped));
  /* Pinned host buffers are asked of the driver once per call, here
     (cudaPointerGetAttributes), not again at the enqueue. */
  *x = mapped;
  x->mapped = 1;
  return zccSuccess;
}

zccResult_t zcc_gpu_coll(struct zccComm *comm, const zcc_coll_args_t *x,
                         struct CUstream_st *stream, const char *fn) {
  cudaStream_t s = (cudaStream_t)stream;
  if (x->count == 0) return zccSuccess; /* every rank passes the same count: all skip */
  zcc_coll_args_t mapped;
  if (!x->mapped) {
    ZCC_CHECK(map_args(comm, x, s, fn, &mapped));
    x = &mapped;
  }
  zcc_gpu_op_begin(comm->gpu, x->op_id);
  int prev = -1;
  CU(cudaGetDevice(&prev));
  if (prev != comm->device) CU(cudaSetDevice(comm->device));
  zccResult_t res = zccSuccess;
  zcc_coll_args_t scaled;
  if (x->scale && x->coll == ZCC_COLL_ALLREDUCE) {
    /* Pre-multiplied sum: scale into recvbuff, then sum there in place. (Reduce
       and reducescatter scale into staging as they stage: reduce_like, conn_premul.) */
    int e = zcc_dev_scale(x->recvbuf, x->sendbuf, x->count, x->type, x->scalar_ptr, x->scalar,
                          stream);
    if (e != 0) {
      res = zcc_error(zccUnhandledCudaError, "%s: the pre-multiplied sum's scaling kernel "
                      "failed: %s", fn, zcc_dev_error_string(e));
      goto out;
    }
    scaled = *x;
    scaled.sendbuf = x->recvbuf;
    scaled.host_bufs = (x->host_bufs & ZCC_HOST_RECV) ? ZCC_HOST_SEND | ZCC_HOST_RECV : 0;
    scaled.scale = 0;
    x = &scaled;
  }
  res = dispatch(comm, x, s, fn);
out:
  zcc_gpu_op_end(comm->gpu);
  if (prev != comm->device) cudaSetDevice(prev);
  return res;
}

static zccResult_t gpu_p2p_mapped(struct zccComm *comm, const zcc_gpu_p2p_op_t *ops, int nops,
                                  const char *fn);

zccResult_t zcc_gpu_p2p(struct zccComm *comm, const zcc_gpu_p2p_op_t *ops, int nops,
                        const char *fn) {
  if (nops == 0) return zccSuccess;
  /* The addresses kernels use (pinned host memory through its mapping). */
  zcc_gpu_p2p_op_t *m = malloc(sizeof(*m) * (size_t)nops);
  if (!m) return zcc_error(zccSystemError, "%s: out of memory", fn);
  zccResult_t res = zccSuccess;
  for (int i = 0; i < nops && res == zccSuccess; i++) {
    m[i] = ops[i];
    const void *dp = ops[i].buf;
    if (ops[i].bytes)
      res = gpu_addr(comm, ops[i].buf, ops[i].is_recv ? "recvbuff" : "sendbuff", fn, &dp);
    m[i].buf = (void *)dp;
  }
  /* One launch runs them all: its stamps go to the newest op's record, and
     the others' records read theirs. */
  uint64_t id = 0;
  for (int i = 0; i < nops; i++)
    if (ops[i].op_id > id) id = ops[i].op_id;
  for (int i = 0; i < nops; i++)
    if (ops[i].op_id && ops[i].op_id != id) zcc_trace_gpu_share(comm, ops[i].op_id, id);
  zcc_gpu_op_begin(comm->gpu, id);
  if (res == zccSuccess) res = gpu_p2p_mapped(comm, m, nops, fn);
  zcc_gpu_op_end(comm->gpu);
  free(m);
  return res;
}

static zccResult_t gpu_p2p_mapped(struct zccComm *comm, const zcc_gpu_p2p_op_t *ops, int nops,
                                  const char *fn) {
  zcc_gpu_t *g = comm->gpu;
  cudaStream_t s = (cudaStream_t)ops[0].stream;
  ZCC_CHECK(check_stream(comm, s, fn));
  for (int i = 1; i < nops; i++)
    if (ops[i].stream != ops[0].stream)
      return zcc_error(zccInvalidUsage,
                       "%s: the point-to-point operations of one GPU communicator in a group "
                       "must use one stream", fn);
  /* A receive may not land where a send of the same launch still reads (the
     kernel runs them concurrently); self copies of one buffer are no-ops. */
  for (int i = 0; i < nops; i++)
    for (int j = 0; j < nops; j++) {
      const zcc_gpu_p2p_op_t *r = &ops[i], *w = &ops[j];
      if (!r->is_recv || w->is_recv || !r->bytes || !w->bytes) continue;
      if (r->peer == g->rank && w->peer == g->rank && r->buf == w->buf) continue;
      uintptr_t a = (uintptr_t)r->buf, b = (uintptr_t)w->buf;
      if (a < b + w->bytes && b < a + r->bytes)
        return zcc_error(zccInvalidArgument,
                         "%s: a receive from rank %d into %p overlaps a send to rank %d from "
                         "%p in the same group; GPU point-to-point needs separate buffers",
                         fn, r->peer, r->buf, w->peer, w->buf);
    }
  /* Sends to self pair with receives from self in order: plain copies. */
  int nself_s = 0, nself_r = 0;
  for (int i = 0; i < nops; i++)
    if (ops[i].peer == g->rank) {
      if (ops[i].is_recv) nself_r++;
      else nself_s++;
    }
  if (nself_s != nself_r)
    return zcc_error(zccInvalidUsage,
                     "%s: %d send(s) to self but %d receive(s) from self in the group", fn,
                     nself_s, nself_r);
  int prev = -1;
  CU(cudaGetDevice(&prev));
  if (prev != comm->device) CU(cudaSetDevice(comm->device));
  zccResult_t res = zccSuccess;
  int si = 0, ri = 0;
  for (int m = 0; m < nself_s && res == zccSuccess; m++) {
    while (ops[si].peer != g->rank || ops[si].is_recv) si++;
    while (ops[ri].peer != g->rank || !ops[ri].is_recv) ri++;
    if (ops[si].bytes != ops[ri].bytes) {
      res = zcc_error(zccInvalidArgument, "%s: send to self of %zu bytes meets a receive of %zu",
                      fn, ops[si].bytes, ops[ri].bytes);
      break;
    }
    if (ops[si].bytes && ops[si].buf != ops[ri].buf) {
      cudaError_t e = cudaMemcpyAsync(ops[ri].buf, ops[si].buf, ops[si].bytes,
                                      cudaMemcpyDefault, s);
      if (e != cudaSuccess) res = cuda_err(e, "cudaMemcpyAsync", fn);
    }
    si++;
    ri++;
  }
  if (g->p2p_conn) { /* through the per-peer connectors */
    int nl = 0;
    if (res == zccSuccess) res = p2p_conn_launch(comm, ops, nops, s, fn, &nl);
    ZCC_INFO(COLL, "%s: %d point-to-point op(s), %d self copy(ies), over connectors, %d "
             "launch(es)", fn, nops, nself_s, nl);
    if (prev != comm->device) cudaSetDevice(prev);
    return res;
  }
  zcc_dev_p2p_t a;
  memset(&a, 0, sizeof(a));
  for (int r = 0; r < g->nranks; r++) a.areas[r] = g->p2p[r];
  a.abort_flag = g->abort_dev;
  a.nranks = g->nranks;
  a.rank = g->rank;
  int launches = 0;
  if (nops - 2 * nself_s > ZCC_DEV_P2P_MAX_OPS && res == zccSuccess)
    /* Split into launches, one rank's second launch could hold what a peer's
       first one waits for: refuse rather than risk a deadlock. */
    res = zcc_error(zccInvalidUsage,
                    "%s: a group holds %d sends and receives with peers on one GPU "
                    "communicator; at most %d are supported", fn, nops - 2 * nself_s,
                    ZCC_DEV_P2P_MAX_OPS);
  for (int i = 0; i < nops && res == zccSuccess; i++) {
    if (ops[i].peer == g->rank) continue;
    zcc_dev_p2p_op_t *o = &a.ops[a.nops++];
    o->buf = ops[i].buf;
    o->bytes = ops[i].bytes;
    o->peer = ops[i].peer;
    o->is_send = !ops[i].is_recv;
  }
  if (res == zccSuccess && a.nops) {
    a.stamp = zcc_gpu_stamp(g);
    int e = zcc_dev_p2p(&a, s);
    if (e) res = dev_err(e, "zcc_dev_p2p", fn);
    launches++;
  }
  ZCC_INFO(COLL, "%s: %d point-to-point op(s), %d self copy(ies), %d launch(es)", fn, nops,
            nself_s, launches);
  if (prev != comm->device) cudaSetDevice(prev);
  return res;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/*
 * ZCC_TOPO_MEASURE (core/measure.c): `iters` allreduces of `bytes` (float
 * sum) as algo/proto, captured into one CUDA graph on a stream of the
 * probe's own and replayed (as the model's constants were measured: time
 * per operation inside a graph), after one replay to warm up; the median of
 * the replays' CUDA-event times, per operation, in *median_us. Collective:
 * every rank runs it at once, in steps every rank finishes before the next:
 * allocations, capture, replays, frees (a rank still allocating could wait
 * for the device while a peer's kernel waits for it, or break a peer's
 * capture in the same process).
 */
#define PROBE_REPLAYS 5

/* Collective: zccSuccess when every rank says ok, else zccRemoteError naming one that did not. */
static zccResult_t all_ok(struct zccComm *comm, int ok) {
  int *v = calloc((size_t)comm->nranks, sizeof(int));
  if (!v) return zcc_error(zccSystemError, "out of memory");
  v[comm->rank] = ok;
  zccResult_t res = zcc_bootstrap_allgather(comm->bootstrap, v, sizeof(int), comm->timeout_ms);
  for (int r = 0; r < comm->nranks && res == zccSuccess; r++)
    if (!v[r] && r != comm->rank)
      res = zcc_error(zccRemoteError, "ZCC_TOPO_MEASURE: rank %d could not set up its probe", r);
  free(v);
  return res;
}
zccResult_t zcc_gpu_probe(struct zccComm *comm, zcc_algo_t algo, zcc_proto_t proto, size_t bytes,
                          int iters, double *median_us) {
  const char *fn = "ZCC_TOPO_MEASURE";
  zcc_gpu_t *g = comm->gpu;
  if (iters < 1 || iters > 1000 || bytes < 4 || !median_us)
    return zcc_error(zccInvalidArgument, "%s: probe of %d x %zu bytes", fn, iters, bytes);
  int prev = -1;
  CU(cudaGetDevice(&prev));
  if (prev != g->dev) CU(cudaSetDevice(g->dev));
  zccResult_t res = zccSuccess, bres;
  void *buf = NULL;
  cudaStream_t s = NULL;
  cudaEvent_t ev[2] = {NULL, NULL};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  float t[PROBE_REPLAYS];
  cudaError_t e = cudaMalloc(&buf, bytes);
  if (e == cudaSuccess) e = cudaMemset(buf, 0, bytes);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaEventCreate(&ev[i]);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) res = cuda_err(e, "the probe's buffer, stream and events", fn);
  /* every rank's allocations done before any captures (ranks of one process
     share the device: an allocation or device-wide wait in one thread
     breaks another thread's capture) */
  bres = all_ok(comm, res == zccSuccess);
  if (res == zccSuccess) res = bres;
  if (res == zccSuccess) {
    zcc_coll_args_t x;
    memset(&x, 0, sizeof(x));
    x.coll = ZCC_COLL_ALLREDUCE;
    x.sendbuf = buf;
    x.recvbuf = buf;
    x.count = bytes / 4;
    x.type = zccFloat32;
    x.op = zccSum;
    zcc_gpu_op_begin(g, 0); /* the probe's launches belong to no record */
    g->force_on = 1;
    g->force_algo = algo;
    g->force_proto = proto;
    e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < iters && e == cudaSuccess && res == zccSuccess; i++)
      res = dispatch(comm, &x, s, fn);
    cudaError_t ee = e == cudaSuccess ? cudaStreamEndCapture(s, &graph) : e;
    g->force_on = 0;
    if (res == zccSuccess && ee == cudaSuccess) ee = cudaGraphInstantiate(&exec, graph, 0);
    if (res == zccSuccess && ee != cudaSuccess) res = cuda_err(ee, "the probe's graph", fn);
  }
  /* every rank ready, or all give up together (a peer's replays would wait for ours) */
  bres = all_ok(comm, res == zccSuccess);
  if (res == zccSuccess) res = bres;
  for (int i = -1; i < PROBE_REPLAYS && res == zccSuccess; i++) {
    e = cudaEventRecord(ev[0], s);
    if (e == cudaSuccess) e = cudaGraphLaunch(exec, s);
    if (e == cudaSuccess) e = cudaEventRecord(ev[1], s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess && i >= 0) e = cudaEventElapsedTime(&t[i], ev[0], ev[1]);
    if (e != cudaSuccess) res = cuda_err(e, "the probe's replays", fn);
  }
  if (res == zccSuccess) {
    qsort(t, PROBE_REPLAYS, sizeof(float), cmp_float);
    *median_us = t[PROBE_REPLAYS / 2] * 1e3 / iters;
  }
  /* every rank's replays done before anything is freed */
  bres = zcc_bootstrap_barrier(comm->bootstrap, comm->timeout_ms);
  if (res == zccSuccess) res = bres;
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  for (int i = 0; i < 2; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  if (s) cudaStreamDestroy(s);
  if (buf) cudaFree(buf);
  (void)cudaGetLastError();
  if (prev != g->dev) cudaSetDevice(prev);
  return res;
}
