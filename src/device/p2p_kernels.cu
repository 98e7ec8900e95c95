// Point-to-point kernel (see device.h): all of one rank's sends and
// receives of a group in one launch.
//
// Channels. Data from rank S to rank R travels on ZCC_DEV_P2P_BLOCKS
// channels (S->R, b), each a FIFO of slots: channel b owns the
// ZCC_DEV_P2P_SLOTS slots outbox[R][b][*] of S's area, and its counters.
// An op of `bytes` is cut into pieces; both sides derive the cut from bytes
// alone (p2p_cut): pieces of ZD_P2P_MIN_PIECE up to ZCC_DEV_P2P_SLOT_BYTES
// (a multiple of 16), aiming at two pieces per channel, nb = min(pieces,
// ZCC_DEV_P2P_BLOCKS) channels, piece k on channel k % nb. So the n-th
// piece on a channel is the same piece for sender and receiver, over all
// launches, however the ops are grouped into launches. Zero-byte ops are
// skipped on both sides: they move no counter.
//
// Flags: line (p, b) of a rank's area (16 words at word (p * BLOCKS + b) * 16
// of its flags region) holds, for peer p and channel b:
//   ZD_P2P_READY  pieces p has posted to this rank (written by p)
//   ZD_P2P_SENT   pieces this rank has posted to p (own counter)
//   ZD_P2P_FREE   pieces of this rank's outbox p has taken (written by p)
//   ZD_P2P_TAKEN  pieces this rank has taken from p (own counter)
// all counting from 0 in a zeroed area, compared modulo 2^32. A sender's
// n-th piece (n = SENT) goes to slot n % SLOTS once FREE >= n + 1 - SLOTS
// (ld.acquire.sys of its own line); it copies the piece in, __syncthreads,
// and stores READY = n + 1 into the receiver's line (st.release.sys). The
// receiver waits for its READY >= n + 1, copies the slot out of the
// sender's outbox over NVLink, __syncthreads (every thread's loads have
// returned: their values are stored), and stores FREE = n + 1 into the
// sender's line (st.release.sys). The own counters are written back at the
// end of the launch, so graph replays continue where the last launch ended.
// A send completes once its data is in the outbox; the receiver may take it
// in a later launch.
//
// Grid. The ops with bytes > 0 are grouped by (peer, direction), groups in
// order of first appearance, each group's ops in the caller's order. Group g
// gets the blocks [first_block, first_block + nblocks), nblocks = the
// largest nb of its ops; block b of the group is channel b and runs the
// group's ops one after another (block b skips an op with nb <= b). At most
// 2 (ZCC_DEV_MAX_RANKS - 1) ZCC_DEV_P2P_BLOCKS = 112 blocks, all resident
// on an otherwise idle GPU; blocks only wait on the peer, never on each
// other.
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

#define ZD_P2P_THREADS 512
#define ZD_P2P_UNROLL 8
#define ZD_P2P_MIN_PIECE (32 * 1024)
#define ZD_P2P_GROUPS (2 * (ZCC_DEV_MAX_RANKS - 1))
#define ZD_P2P_MAX_GRID (ZD_P2P_GROUPS * ZCC_DEV_P2P_BLOCKS)

// Words of a flag line.
#define ZD_P2P_READY 0
#define ZD_P2P_SENT 4
#define ZD_P2P_FREE 8
#define ZD_P2P_TAKEN 12

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct P2pCut {
  size_t piece;   // bytes of each piece but the last
  size_t npieces;
  int nb;         // channels
};

__host__ __device__ inline P2pCut p2p_cut(size_t bytes) {
  P2pCut c;
  if (bytes == 0) {
    c.piece = 0;
    c.npieces = 0;
    c.nb = 0;
    return c;
  }
  size_t piece = (bytes + 2 * ZCC_DEV_P2P_BLOCKS - 1) / (2 * ZCC_DEV_P2P_BLOCKS);
  piece = (piece + 15) & ~(size_t)15;
  if (piece < ZD_P2P_MIN_PIECE) piece = ZD_P2P_MIN_PIECE;
  if (piece > ZCC_DEV_P2P_SLOT_BYTES) piece = ZCC_DEV_P2P_SLOT_BYTES;
  c.piece = piece;
  c.npieces = (bytes + piece - 1) / piece;
  c.nb = c.npieces < ZCC_DEV_P2P_BLOCKS ? (int)c.npieces : ZCC_DEV_P2P_BLOCKS;
  return c;
}

struct P2pOp {
  char *buf;
  size_t bytes;
};

struct P2pGroup {
  int peer;
  int is_send;
  int first_op;
  int nops;
  int first_block;
};

struct P2pParams {
  P2pOp ops[ZCC_DEV_P2P_MAX_OPS]; // grouped, see above
  P2pGroup groups[ZD_P2P_GROUPS];
  uint8_t block_group[ZD_P2P_MAX_GRID];
  char *areas[ZCC_DEV_MAX_RANKS];
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  int rank;
};

// len bytes from src to dst by the whole block; ws, wd: access widths that
// divide the alignment of src and dst (every 16-byte step keeps them).
// FROM_BOX: src is a slot (16-byte aligned) in a peer's outbox, read
// through L2 only (every byte once; the slot is rewritten while this SM may
// still hold lines of its last use).
template <bool FROM_BOX>
ZD_INLINE void p2p_copy(char *dst, int wd, const char *src, int ws, size_t len) {
  enum { U = ZD_P2P_UNROLL };
  const size_t chunks = len / 16;
  const size_t nth = blockDim.x;
  for (size_t c0 = threadIdx.x; c0 < chunks; c0 += nth * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t c = c0 + u * nth;
      if (c < chunks) v[u] = FROM_BOX ? __ldcg((const uint4 *)(src + c * 16)) : zd_ld16(src + c * 16, ws);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t c = c0 + u * nth;
      if (c < chunks) zd_st16(dst + c * 16, wd, v[u]);
    }
  }
  const size_t t = threadIdx.x;
  if (t < len % 16) dst[chunks * 16 + t] = FROM_BOX ? __ldcg(src + chunks * 16 + t) : src[chunks * 16 + t];
}

ZD_INLINE void p2p_kernel_body(const P2pParams &p) {
  __shared__ uint32_t s_ctr;
  const P2pGroup &g = p.groups[p.block_group[blockIdx.x]];
  const int b = blockIdx.x - g.first_block;
  char *const own = p.areas[p.rank];
  char *const peer = p.areas[g.peer];
  uint32_t *const own_line = (uint32_t *)own + (g.peer * ZCC_DEV_P2P_BLOCKS + b) * 16;
  uint32_t *const peer_line = (uint32_t *)peer + (p.rank * ZCC_DEV_P2P_BLOCKS + b) * 16;
  const int send = g.is_send;
  // The channel's slots: in my outbox for the peer, or in the peer's for me.
  char *const box = send ? own + ZCC_DEV_P2P_FLAG_BYTES +
                               (size_t)(g.peer * ZCC_DEV_P2P_BLOCKS + b) * ZCC_DEV_P2P_SLOTS *
                                   ZCC_DEV_P2P_SLOT_BYTES
                         : peer + ZCC_DEV_P2P_FLAG_BYTES +
                               (size_t)(p.rank * ZCC_DEV_P2P_BLOCKS + b) * ZCC_DEV_P2P_SLOTS *
                                   ZCC_DEV_P2P_SLOT_BYTES;
  uint32_t *const ctr = own_line + (send ? ZD_P2P_SENT : ZD_P2P_TAKEN);
  if (threadIdx.x == 0) s_ctr = *ctr;
  __syncthreads();
  uint32_t n = s_ctr;

  for (int i = 0; i < g.nops; i++) {
    const P2pOp &op = p.ops[g.first_op + i];
    const P2pCut cut = p2p_cut(op.bytes);
    const int wbuf = zd_width(op.buf); // pieces start at multiples of 16
    for (size_t k = b; k < cut.npieces; k += cut.nb) {
      const size_t off = k * cut.piece;
      const size_t len = op.bytes - off < cut.piece ? op.bytes - off : cut.piece;
      char *const slot = box + (size_t)(n % ZCC_DEV_P2P_SLOTS) * ZCC_DEV_P2P_SLOT_BYTES;
      if (send) {
        bool ok = threadIdx.x != 0 ||
                  zd_wait_reach(own_line + ZD_P2P_FREE, n + 1 - ZCC_DEV_P2P_SLOTS, p.abort_flag);
        if (__syncthreads_or(!ok)) return; // stopped: nothing more is written
        p2p_copy<false>(slot, 16, op.buf + off, wbuf, len);
        __syncthreads();
        if (threadIdx.x == 0) zd_st_release_sys(peer_line + ZD_P2P_READY, n + 1);
      } else {
        bool ok = threadIdx.x != 0 || zd_wait_reach(own_line + ZD_P2P_READY, n + 1, p.abort_flag);
        if (__syncthreads_or(!ok)) return;
        p2p_copy<true>(op.buf + off, wbuf, slot, 16, len);
        __syncthreads();
        if (threadIdx.x == 0) zd_st_release_sys(peer_line + ZD_P2P_FREE, n + 1);
      }
      n++;
    }
  }
  if (threadIdx.x == 0) *ctr = n;
}

__global__ void __launch_bounds__(ZD_P2P_THREADS) p2p_kernel(const __grid_constant__ P2pParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  p2p_kernel_body(p);
  zd_stamp_exit(stamp_at);
}

int p2p_prepare(const zcc_dev_p2p_t *a, P2pParams *p, int *blocks) {
  if (!a) return cudaErrorInvalidValue;
  if (a->nranks < 1 || a->nranks > ZCC_DEV_MAX_RANKS || a->rank < 0 || a->rank >= a->nranks)
    return cudaErrorInvalidValue;
  if (a->nops < 0 || a->nops > ZCC_DEV_P2P_MAX_OPS) return cudaErrorInvalidValue;
  *p = P2pParams();
  int ngroups = 0, nops = 0, grid = 0;
  int key_group[2 * ZCC_DEV_MAX_RANKS];
  for (int i = 0; i < 2 * ZCC_DEV_MAX_RANKS; i++) key_group[i] = -1;
  for (int i = 0; i < a->nops; i++) {
    const zcc_dev_p2p_op_t *op = &a->ops[i];
    if (op->peer < 0 || op->peer >= a->nranks || op->peer == a->rank) return cudaErrorInvalidValue;
    if (op->bytes > (SIZE_MAX >> 1)) return cudaErrorInvalidValue;
    if (op->bytes && !op->buf) return cudaErrorInvalidValue;
    if (op->bytes && (!a->areas[a->rank] || !a->areas[op->peer])) return cudaErrorInvalidValue;
    const int key = op->peer * 2 + (op->is_send != 0);
    if (op->bytes && key_group[key] < 0) {
      P2pGroup *g = &p->groups[ngroups];
      g->peer = op->peer;
      g->is_send = op->is_send != 0;
      key_group[key] = ngroups++;
    }
  }
  // Ops grouped, in order within each group; blocks per group.
  for (int gi = 0; gi < ngroups; gi++) {
    P2pGroup *g = &p->groups[gi];
    g->first_op = nops;
    int nb = 0;
    for (int i = 0; i < a->nops; i++) {
      const zcc_dev_p2p_op_t *op = &a->ops[i];
      if (!op->bytes || op->peer != g->peer || (op->is_send != 0) != g->is_send) continue;
      p->ops[nops].buf = (char *)op->buf;
      p->ops[nops].bytes = op->bytes;
      nops++;
      P2pCut cut = p2p_cut(op->bytes);
      if (cut.nb > nb) nb = cut.nb;
    }
    g->nops = nops - g->first_op;
    g->first_block = grid;
    for (int b = 0; b < nb; b++) p->block_group[grid++] = (uint8_t)gi;
  }
  for (int r = 0; r < a->nranks; r++) p->areas[r] = (char *)a->areas[r];
  p->abort_flag = a->abort_flag;
  p->stamp = a->stamp;
  p->rank = a->rank;
  *blocks = grid;
  return cudaSuccess;
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_p2p(const zcc_dev_p2p_t *a,
                                                                 struct CUstream_st *stream) {
  P2pParams p;
  int blocks;
  int err = p2p_prepare(a, &p, &blocks);
  if (err != cudaSuccess) return err;
  if (blocks == 0) return cudaSuccess; // nothing but zero-byte ops: nothing to do
  p2p_kernel<<<blocks, ZD_P2P_THREADS, 0, (cudaStream_t)stream>>>(p);
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_p2p(void) {
  cudaFuncAttributes fa;
  return cudaFuncGetAttributes(&fa, p2p_kernel);
}
