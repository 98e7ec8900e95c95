// Ring and tree collectives over connectors (device.h: zcc_dev_conn_coll).
//
// One block per channel (two for the tree: one reducing up, one
// broadcasting down). A channel takes a contiguous slice of the message
// (16-byte aligned bounds, so every element stays whole and every pointer
// keeps its alignment from slice to slice) and moves it in slots of the
// connectors' FIFOs. The one primitive, `step`, waits until every FIFO it
// receives from holds the next slot and every FIFO it sends into has a free
// one, then computes v = src op recv[0] op recv[1] ..., optionally divides
// (avg), and stores v into dst and into every send slot; then it publishes
// the send slots (ready) and frees the receive slots (freed). Counters only
// grow and compare modulo 2^32.
//
// Ring allreduce over k ranks, ring position p, each round of k chunks
// (chunk j is the one whose result is made at position j):
//   reduce-scatter: send chunk p-1; chunks p-2 .. p-k+1 receive, reduce
//                   with the own input, send on; chunk p: receive, reduce,
//                   the result into the output and on to the next rank;
//   all-gather:     chunks p-1 .. p-k+2 receive into the output and send on;
//                   chunk p-k+1 (= p+1) received into the output.
// Reduce-scatter, all-gather, broadcast (a chain from the root) and reduce
// (a chain ending at the root) are the same steps in other orders. The
// hierarchical allreduce runs reduce-scatter, allreduce and all-gather on
// a channel's local or rail ring instead (ConnParams.ring), its blocks by
// ring position, the last ones possibly short (ConnParams.total).
// Every block of a launch must be resident with the blocks of the other
// ranks' launches that it waits for: the host caps the channel count.
#include <cuda_runtime.h>

#include "flags.cuh"
#include "reduce_ops.cuh"

#define ZD_CONN_THREADS 512
#define ZD_CONN_U 4                     // 16-byte packs per thread in flight
#define ZD_CONN_MIN_SLICE (64 * 1024)   // bytes a channel gets at least before another is used

// zcc_kernels:: names zcc's kernels in profilers (device.h).
namespace zcc_kernels {
namespace {

struct ConnParams {
  const zcc_dev_conns_t *conns;
  const char *in;
  char *out;
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  const volatile uint64_t *sig_gate; // NULL, or wait for it to reach sig_seq first
  uint64_t sig_seq;
  size_t unit;  // bytes of the message, or of one rank's block
  size_t slot;  // slot bytes
  int nslots;
  int k;
  int rank;
  int root;
  int avg;      // 0, or the divisor of the final step
  int nch;      // channels launched
  int coll;
  int ring;     // ZCC_DEV_RING_*
  size_t total; // reduce-scatter, all-gather: the whole buffer's bytes (0: blocks whole)
  int by_rank;  // on a hierarchical ring, blocks by rank (device.h)
  size_t bstride; // bytes between consecutive blocks of the input (reduce-scatter) or output
  int nseg;     // blocks each position owns (by_rank on the local ring: one per host)
  int hm, hl;   // ranks per host, this rank's index on its host
  // (the rank at index l of host h: conns->hier_rank[h * hm + l])
};

// A connector as one block uses it: its slot count in registers.
struct Side {
  char *fifo;
  uint32_t *ready, *freed, *stepw, *sizes;
  uint32_t step;
};

ZD_INLINE Side side_load(const zcc_dev_conn_t &c) {
  Side s;
  s.fifo = c.fifo;
  s.ready = c.ready;
  s.freed = c.freed;
  s.stepw = c.step;
  s.sizes = c.sizes;
  s.step = s.fifo ? *(volatile uint32_t *)c.step : 0;
  return s;
}

ZD_INLINE void side_store(const Side &s) {
  if (threadIdx.x == 0 && s.fifo) *(volatile uint32_t *)s.stepw = s.step;
}

ZD_INLINE char *slot_of(const Side &s, const ConnParams &p) {
  return s.fifo + (size_t)(s.step % (uint32_t)p.nslots) * p.slot;
}

// Publish the send slot s.step holding len bytes: its size first where a
// proxy moves it (device.h: sizes), then ready (release: both ordered after
// the slot's stores).
ZD_INLINE void publish(const Side &s, uint32_t nslots, size_t len) {
  if (s.sizes) *(volatile uint32_t *)&s.sizes[s.step % nslots] = (uint32_t)len;
  zd_st_release_sys(s.ready, s.step + 1);
}

// The block's slice of [0, unit).
ZD_INLINE void slice_of(const ConnParams &p, int c, size_t *lo, size_t *hi) {
  size_t per = (p.unit + (size_t)p.nch - 1) / (size_t)p.nch;
  per = (per + 15) / 16 * 16;
  size_t a = (size_t)c * per;
  *lo = a < p.unit ? a : p.unit;
  *hi = a + per < p.unit ? a + per : p.unit;
}

// The primitive: up to 3 receives, up to 3 sends (see the file comment).
// src / dst: user memory at the chunk, or NULL. len: bytes. *dead: the
// abort word ended a wait of the block (this step's or an earlier one's):
// nothing more is written.
// Not inlined: one copy per (type, op) rather than one per call site keeps
// the kernels small (the call costs nothing next to a slot's data).
template <typename T, typename Op>
__device__ __noinline__ void step(const ConnParams &p, Side *rv, int nr, Side *sd, int ns,
                                  const char *src, char *dst, size_t len, int avg, bool *dead) {
  if (*dead) return;
  const int t = threadIdx.x;
  bool ok = true;
#pragma unroll
  for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++) {
    if (i < nr && t == i) ok = zd_wait_reach(rv[i].ready, rv[i].step + 1, p.abort_flag);
    if (i < ns && t == 32 + i)
      ok = zd_wait_reach(sd[i].freed, sd[i].step + 1 - (uint32_t)p.nslots, p.abort_flag);
  }
  if (__syncthreads_or(!ok)) {
    *dead = true;
    return;
  }
  const char *rs[ZCC_DEV_TREE_ARITY];
  char *ss[ZCC_DEV_TREE_ARITY];
#pragma unroll
  for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++) {
    rs[i] = i < nr ? slot_of(rv[i], p) : NULL;
    ss[i] = i < ns ? slot_of(sd[i], p) : NULL;
  }
  const int ws = src ? zd_width(src) : 16, wd = dst ? zd_width(dst) : 16;
  const size_t packs = len / 16;
  for (size_t q0 = t; q0 < packs; q0 += (size_t)blockDim.x * ZD_CONN_U) {
    uint4 v[ZD_CONN_U];
#pragma unroll
    for (int u = 0; u < ZD_CONN_U; u++) {
      size_t q = q0 + (size_t)u * blockDim.x;
      if (q < packs) v[u] = src ? zd_ld16(src + q * 16, ws) : __ldcg((const uint4 *)(rs[0] + q * 16));
    }
#pragma unroll
    for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++) {
      if (i >= nr || (!src && i == 0)) continue;
#pragma unroll
      for (int u = 0; u < ZD_CONN_U; u++) {
        size_t q = q0 + (size_t)u * blockDim.x;
        if (q < packs) v[u] = zd_red_pack<T, Op>(v[u], __ldcg((const uint4 *)(rs[i] + q * 16)));
      }
    }
#pragma unroll
    for (int u = 0; u < ZD_CONN_U; u++) {
      size_t q = q0 + (size_t)u * blockDim.x;
      if (q >= packs) continue;
      if (avg) v[u] = zd_avg_pack<T>(v[u], avg);
      if (dst) zd_st16(dst + q * 16, wd, v[u]);
#pragma unroll
      for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++)
        if (i < ns) *(uint4 *)(ss[i] + q * 16) = v[u];
    }
  }
  // The last bytes (fewer than 16: whole elements), element by element.
  for (size_t e = packs * 16 + (size_t)t * sizeof(T); e < len; e += (size_t)blockDim.x * sizeof(T)) {
    T x = src ? zd_ld1<T>(src + e) : zd_ld1<T>(rs[0] + e);
#pragma unroll
    for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++)
      if (i < nr && (src || i > 0)) x = zd_red<T, Op>(x, zd_ld1<T>(rs[i] + e));
    if (avg) x = zd_avg<T>(x, avg);
    if (dst) zd_st1<T>(dst + e, x);
#pragma unroll
    for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++)
      if (i < ns) zd_st1<T>(ss[i] + e, x);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++) {
    if (i < ns && t == i) publish(sd[i], (uint32_t)p.nslots, len);
    if (i < nr && t == 32 + i) zd_st_release_sys(rv[i].freed, rv[i].step + 1);
  }
#pragma unroll
  for (int i = 0; i < ZCC_DEV_TREE_ARITY; i++) {
    if (i < ns) sd[i].step++;
    if (i < nr) rv[i].step++;
  }
}

ZD_INLINE int modk(int x, int k) { return ((x % k) + k) % k; }

// The rank whose block ring position i holds (segment sg of it on the local
// ring with blocks by rank: the host's index).
ZD_INLINE int blk_rank(const ConnParams &p, const zcc_dev_channel_t *ch, int i, int sg) {
  if (p.by_rank) {
    const int *hr = p.conns->hier_rank;
    return p.ring == ZCC_DEV_RING_RAIL ? hr[i * p.hm + p.hl] : hr[sg * p.hm + i];
  }
  return p.ring ? i : ch->ring_rank[i];
}

// The bytes of block q's piece [off, off + n) that are there: all of them,
// or where the buffer ends inside the last blocks (p.total), fewer or none.
ZD_INLINE size_t blk_len(const ConnParams &p, int q, size_t off, size_t n) {
  if (!p.total) return n;
  size_t at = (size_t)q * p.unit + off;
  return at >= p.total ? 0 : p.total - at < n ? p.total - at : n;
}

template <typename T, typename Op> ZD_INLINE void ring_kernel_body(const ConnParams &p) {
  const zcc_dev_channel_t *ch = &p.conns->ch[blockIdx.x];
  // The channel's ring (blocks by rank), or a hierarchical one (by position).
  const int sub = p.ring;
  const int ri = sub == ZCC_DEV_RING_LOCAL ? ZCC_DEV_RECV_LOCAL
                 : sub == ZCC_DEV_RING_RAIL ? ZCC_DEV_RECV_RAIL : ZCC_DEV_RECV_RING;
  const int si = sub == ZCC_DEV_RING_LOCAL ? ZCC_DEV_SEND_LOCAL
                 : sub == ZCC_DEV_RING_RAIL ? ZCC_DEV_SEND_RAIL : ZCC_DEV_SEND_RING;
  Side r = side_load(ch->recv[ri]);
  Side s = side_load(ch->send[si]);
  __syncthreads(); // every thread has read the steps before thread 0 may write them
  bool dead = false;
  const int k = p.k, pos = sub ? ch->sub_pos[sub - 1] : ch->ring_pos;
  size_t lo, hi;
  slice_of(p, blockIdx.x, &lo, &hi);
  const size_t cs = p.slot;
  switch (p.coll) {
  case ZCC_DEV_CONN_ALLREDUCE:
    for (size_t off = lo; off < hi; off += (size_t)k * cs) {
      size_t R = hi - off < (size_t)k * cs ? hi - off : (size_t)k * cs;
      size_t cl = ((R + (size_t)k - 1) / (size_t)k + 15) / 16 * 16;
#define CHUNK(j, a, n)                                                        \
  size_t a = off + (size_t)(j) * cl, n = 0;                                   \
  if (a < off + R) n = off + R - a < cl ? off + R - a : cl;                   \
  else a = off + R;
      {
        CHUNK(modk(pos - 1, k), a, n)
        step<T, Op>(p, &r, 0, &s, 1, p.in + a, NULL, n, 0, &dead);
      }
      for (int st = 1; st <= k - 2; st++) {
        CHUNK(modk(pos - st - 1, k), a, n)
        step<T, Op>(p, &r, 1, &s, 1, p.in + a, NULL, n, 0, &dead);
      }
      {
        CHUNK(pos, a, n)
        step<T, Op>(p, &r, 1, &s, 1, p.in + a, p.out + a, n, p.avg, &dead);
      }
      for (int st = 1; st <= k - 2; st++) {
        CHUNK(modk(pos - st, k), a, n)
        step<T, Op>(p, &r, 1, &s, 1, NULL, p.out + a, n, 0, &dead);
      }
      {
        CHUNK(modk(pos + 1, k), a, n)
        step<T, Op>(p, &r, 1, &s, 0, NULL, p.out + a, n, 0, &dead);
      }
#undef CHUNK
    }
    break;
  case ZCC_DEV_CONN_REDUCESCATTER: {
    // Segment by segment (one, but on the local ring with blocks by rank:
    // one a host, each summed into its own output block).
    const size_t B = p.bstride;
    for (size_t off = lo; off < hi; off += cs) {
      size_t n = hi - off < cs ? hi - off : cs;
      for (int sg = 0; sg < p.nseg; sg++) {
        int q = blk_rank(p, ch, modk(pos - 1, k), sg);
        step<T, Op>(p, &r, 0, &s, 1, p.in + (size_t)q * B + off, NULL, blk_len(p, q, off, n), 0,
                    &dead);
        for (int st = 1; st <= k - 2; st++) {
          q = blk_rank(p, ch, modk(pos - st - 1, k), sg);
          step<T, Op>(p, &r, 1, &s, 1, p.in + (size_t)q * B + off, NULL, blk_len(p, q, off, n), 0,
                      &dead);
        }
        const int me = blk_rank(p, ch, pos, sg);
        step<T, Op>(p, &r, 1, &s, 0, p.in + (size_t)me * B + off,
                    p.out + (size_t)sg * p.unit + off, blk_len(p, me, off, n), p.avg, &dead);
      }
    }
    break;
  }
  case ZCC_DEV_CONN_ALLGATHER: {
    // Segment by segment (one, but on the local ring with blocks by rank),
    // each a ring all-gather of its piece.
    const size_t B = p.bstride;
    const int inplace = p.in == p.out + (size_t)blk_rank(p, ch, pos, 0) * B;
    for (size_t off = lo; off < hi; off += cs) {
      size_t n = hi - off < cs ? hi - off : cs;
      for (int sg = 0; sg < p.nseg; sg++) {
        const int me = blk_rank(p, ch, pos, sg);
        step<T, Op>(p, &r, 0, &s, 1, inplace ? p.out + (size_t)me * B + off : p.in + off,
                    inplace ? NULL : p.out + (size_t)me * B + off, blk_len(p, me, off, n), 0,
                    &dead);
        for (int st = 1; st <= k - 2; st++) {
          int q = blk_rank(p, ch, modk(pos - st, k), sg);
          step<T, Op>(p, &r, 1, &s, 1, NULL, p.out + (size_t)q * B + off, blk_len(p, q, off, n), 0,
                      &dead);
        }
        int q = blk_rank(p, ch, modk(pos - (k - 1), k), sg);
        step<T, Op>(p, &r, 1, &s, 0, NULL, p.out + (size_t)q * B + off, blk_len(p, q, off, n), 0,
                    &dead);
      }
    }
    break;
  }
  case ZCC_DEV_CONN_BROADCAST:
  case ZCC_DEV_CONN_REDUCE: {
    int rootpos = p.ring ? p.root : 0; // a hierarchical ring's root: its position
    for (int i = 0; i < k && !p.ring; i++)
      if (ch->ring_rank[i] == p.root) rootpos = i;
    const int bcast = p.coll == ZCC_DEV_CONN_BROADCAST;
    // Broadcast: distance from the root; reduce: from the rank after it.
    const int d = modk(pos - rootpos - (bcast ? 0 : 1), k);
    for (size_t off = lo; off < hi; off += cs) {
      size_t n = hi - off < cs ? hi - off : cs;
      if (bcast) {
        if (d == 0) step<T, Op>(p, &r, 0, &s, 1, p.in + off, p.in == p.out ? NULL : p.out + off, n, 0, &dead);
        else step<T, Op>(p, &r, 1, &s, d < k - 1 ? 1 : 0, NULL, p.out + off, n, 0, &dead);
      } else {
        if (d == 0) step<T, Op>(p, &r, 0, &s, 1, p.in + off, NULL, n, 0, &dead);
        else if (d < k - 1) step<T, Op>(p, &r, 1, &s, 1, p.in + off, NULL, n, 0, &dead);
        else step<T, Op>(p, &r, 1, &s, 0, p.in + off, p.out + off, n, p.avg, &dead);
      }
    }
    break;
  }
  default: break;
  }
  __syncthreads();
  side_store(r);
  side_store(s);
}

template <typename T, typename Op>
__global__ void __launch_bounds__(ZD_CONN_THREADS) ring_kernel(ConnParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  if (zd_sig_gate(p.sig_gate, p.sig_seq, p.abort_flag)) ring_kernel_body<T, Op>(p);
  zd_stamp_exit(stamp_at);
}

// Tree allreduce: block 2c reduces up channel c's tree, block 2c + 1
// broadcasts down it. At the root the up block writes each chunk's result
// into the output and counts it in the channel's TREE_DONE word; the down
// block sends it on from there once counted.
template <typename T, typename Op> ZD_INLINE void tree_kernel_body(const ConnParams &p) {
  const int c = blockIdx.x >> 1, down = blockIdx.x & 1;
  const zcc_dev_channel_t *ch = &p.conns->ch[c];
  const int nc = ch->tree_nchildren, root = ch->tree_parent < 0;
  uint32_t *ctr = ch->flags + (down ? ZCC_DEV_CHAN_TREE_DOWN : ZCC_DEV_CHAN_TREE_UP) * ZCC_DEV_CONN_LINE;
  uint32_t *done = ch->flags + ZCC_DEV_CHAN_TREE_DONE * ZCC_DEV_CONN_LINE;
  Side rv[ZCC_DEV_TREE_CHILDREN], sd[ZCC_DEV_TREE_CHILDREN];
  int nr, ns;
  nr = down ? (root ? 0 : 1) : nc;
  ns = down ? nc : (root ? 0 : 1);
#pragma unroll
  for (int i = 0; i < ZCC_DEV_TREE_CHILDREN; i++) {
    if (i < nr) rv[i] = side_load(ch->recv[down ? ZCC_DEV_RECV_DOWN : ZCC_DEV_RECV_UP + i]);
    if (i < ns) sd[i] = side_load(ch->send[down ? ZCC_DEV_SEND_DOWN + i : ZCC_DEV_SEND_UP]);
  }
  uint32_t n0 = *(volatile uint32_t *)ctr, cnt = 0;
  bool dead = false;
  __syncthreads();
  size_t lo, hi;
  slice_of(p, c, &lo, &hi);
  for (size_t off = lo; off < hi; off += p.slot, cnt++) {
    size_t n = hi - off < p.slot ? hi - off : p.slot;
    if (!down) {
      if (!root) {
        step<T, Op>(p, rv, nr, sd, ns, p.in + off, NULL, n, 0, &dead);
      } else {
        step<T, Op>(p, rv, nr, sd, 0, p.in + off, p.out + off, n, p.avg, &dead);
        if (threadIdx.x == 0 && !dead) zd_st_release_sys(done, n0 + cnt + 1);
      }
    } else if (!root) {
      step<T, Op>(p, rv, 1, sd, ns, NULL, p.out + off, n, 0, &dead);
    } else {
      bool ok = threadIdx.x != 0 || dead || zd_wait_reach(done, n0 + cnt + 1, p.abort_flag);
      if (__syncthreads_or(!ok)) dead = true;
      step<T, Op>(p, rv, 0, sd, ns, p.out + off, NULL, n, 0, &dead);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *(volatile uint32_t *)ctr = n0 + cnt;
#pragma unroll
  for (int i = 0; i < ZCC_DEV_TREE_CHILDREN; i++) {
    if (i < nr) side_store(rv[i]);
    if (i < ns) side_store(sd[i]);
  }
}

template <typename T, typename Op>
__global__ void __launch_bounds__(ZD_CONN_THREADS) tree_kernel(ConnParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  if (zd_sig_gate(p.sig_gate, p.sig_seq, p.abort_flag)) tree_kernel_body<T, Op>(p);
  zd_stamp_exit(stamp_at);
}

// ---- point-to-point over the per-peer connectors (zcc_dev_conn_p2p) ----
//
// Block g runs group g: the ops of one (peer, direction), in the caller's
// order, each cut into slots of p.slot bytes. A send waits until its FIFO
// has a free slot (freed, own word), stores the piece into the slot in the
// receiver's memory, __syncthreads, and publishes it (ready, the receiver's
// word, st.release.sys). A receive waits for its ready word, copies the
// slot out (local loads through L2: the slot is rewritten while this SM
// may hold lines of its last use), __syncthreads (every load has returned:
// its value is stored), and frees the slot (freed, the sender's word).

#define ZD_CP2P_UNROLL 8
#define ZD_CP2P_GROUPS ZCC_DEV_P2P_MAX_OPS // a group holds one op at least

struct ConnP2pOp {
  char *buf;
  size_t bytes;
};

struct ConnP2pGroup {
  int peer;
  int is_send;
  int first_op;
  int nops;
};

struct ConnP2pParams {
  ConnP2pOp ops[ZCC_DEV_P2P_MAX_OPS]; // grouped, each group's in the caller's order
  ConnP2pGroup groups[ZD_CP2P_GROUPS];
  const zcc_dev_conns_t *conns;
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;
  size_t slot;
  int nslots;
};

// len bytes from src to dst by the whole block; ws, wd: access widths that
// divide the alignment of src and dst. FROM_FIFO: src is a FIFO slot (16-byte
// aligned), read through L2 only.
template <bool FROM_FIFO>
ZD_INLINE void cp2p_copy(char *dst, int wd, const char *src, int ws, size_t len) {
  enum { U = ZD_CP2P_UNROLL };
  const size_t packs = len / 16;
  const size_t nth = blockDim.x;
  for (size_t c0 = threadIdx.x; c0 < packs; c0 += nth * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t c = c0 + u * nth;
      if (c < packs) v[u] = FROM_FIFO ? __ldcg((const uint4 *)(src + c * 16)) : zd_ld16(src + c * 16, ws);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t c = c0 + u * nth;
      if (c < packs) zd_st16(dst + c * 16, wd, v[u]);
    }
  }
  const size_t t = threadIdx.x;
  if (t < len % 16) dst[packs * 16 + t] = FROM_FIFO ? __ldcg(src + packs * 16 + t) : src[packs * 16 + t];
}

ZD_INLINE void conn_p2p_kernel_body(const ConnP2pParams &p) {
  const ConnP2pGroup &g = p.groups[blockIdx.x];
  const int send = g.is_send;
  Side s = side_load(send ? p.conns->peer_send[g.peer] : p.conns->peer_recv[g.peer]);
  __syncthreads(); // every thread has read the step before thread 0 may write it
  const uint32_t nslots = (uint32_t)p.nslots;
  for (int i = 0; i < g.nops; i++) {
    const ConnP2pOp &op = p.ops[g.first_op + i];
    const int wbuf = zd_width(op.buf); // pieces start at multiples of 16
    for (size_t off = 0; off < op.bytes; off += p.slot) {
      const size_t len = op.bytes - off < p.slot ? op.bytes - off : p.slot;
      char *const sl = s.fifo + (size_t)(s.step % nslots) * p.slot;
      if (send) {
        bool ok = threadIdx.x != 0 || zd_wait_reach(s.freed, s.step + 1 - nslots, p.abort_flag);
        if (__syncthreads_or(!ok)) return; // stopped: nothing more is written
        cp2p_copy<false>(sl, 16, op.buf + off, wbuf, len);
        __syncthreads();
        if (threadIdx.x == 0) publish(s, nslots, len);
      } else {
        bool ok = threadIdx.x != 0 || zd_wait_reach(s.ready, s.step + 1, p.abort_flag);
        if (__syncthreads_or(!ok)) return;
        cp2p_copy<true>(op.buf + off, wbuf, sl, 16, len);
        __syncthreads();
        if (threadIdx.x == 0) zd_st_release_sys(s.freed, s.step + 1);
      }
      s.step++;
    }
  }
  __syncthreads();
  side_store(s);
}

__global__ void __launch_bounds__(ZD_CONN_THREADS) conn_p2p_kernel(const __grid_constant__ ConnP2pParams p) {
  const zd_stamp_at stamp_at = zd_stamp_enter(p.stamp);
  conn_p2p_kernel_body(p);
  zd_stamp_exit(stamp_at);
}

int conn_p2p_prepare(const zcc_dev_conn_p2p_t *a, ConnP2pParams *p, int *blocks) {
  if (!a || !a->conns || !a->host) return cudaErrorInvalidValue;
  const zcc_dev_conns_t *h = a->host;
  if (h->nranks < 1 || h->nranks > ZCC_DEV_MAX_CONN_RANKS || h->rank < 0 ||
      h->rank >= h->nranks || h->nslots < 2 || h->slot_bytes < 16 || h->slot_bytes % 16 != 0)
    return cudaErrorInvalidValue;
  if (a->nops < 0 || a->nops > ZCC_DEV_P2P_MAX_OPS) return cudaErrorInvalidValue;
  *p = ConnP2pParams();
  int ngroups = 0, nops = 0;
  for (int i = 0; i < a->nops; i++) {
    const zcc_dev_p2p_op_t *op = &a->ops[i];
    if (op->peer < 0 || op->peer >= h->nranks || op->peer == h->rank) return cudaErrorInvalidValue;
    if (op->bytes > (SIZE_MAX >> 1)) return cudaErrorInvalidValue;
    if (op->bytes && !op->buf) return cudaErrorInvalidValue;
    const zcc_dev_conn_t &c = op->is_send ? h->peer_send[op->peer] : h->peer_recv[op->peer];
    if (op->bytes && (!c.fifo || !c.ready || !c.freed || !c.step)) return cudaErrorInvalidValue;
    if (!op->bytes) continue;
    int known = 0;
    for (int gi = 0; gi < ngroups && !known; gi++)
      known = p->groups[gi].peer == op->peer && p->groups[gi].is_send == (op->is_send != 0);
    if (!known) {
      ConnP2pGroup *g = &p->groups[ngroups++];
      g->peer = op->peer;
      g->is_send = op->is_send != 0;
    }
  }
  for (int gi = 0; gi < ngroups; gi++) {
    ConnP2pGroup *g = &p->groups[gi];
    g->first_op = nops;
    for (int i = 0; i < a->nops; i++) {
      const zcc_dev_p2p_op_t *op = &a->ops[i];
      if (!op->bytes || op->peer != g->peer || (op->is_send != 0) != g->is_send) continue;
      p->ops[nops].buf = (char *)op->buf;
      p->ops[nops].bytes = op->bytes;
      nops++;
    }
    g->nops = nops - g->first_op;
  }
  p->conns = a->conns;
  p->abort_flag = a->abort_flag;
  p->stamp = a->stamp;
  p->slot = h->slot_bytes;
  p->nslots = h->nslots;
  *blocks = ngroups;
  return cudaSuccess;
}

int conn_prepare(const zcc_dev_conn_args_t *a, ConnParams *p) {
  if (!a || !a->conns || !a->host || (int)a->coll < 0 || a->coll >= ZCC_DEV_CONN_COLLS)
    return cudaErrorInvalidValue;
  const zcc_dev_conns_t *h = a->host;
  size_t es = zd_type_size(a->type);
  if (es == 0 || h->nranks < 2 || h->nranks > ZCC_DEV_MAX_CONN_RANKS || h->nchannels < 1 ||
      h->nchannels > ZCC_DEV_MAX_CHANNELS || h->nslots < 2 || h->slot_bytes < 16 ||
      h->slot_bytes % 16 != 0 || a->nchannels < 0 || a->nchannels > h->nchannels)
    return cudaErrorInvalidValue;
  // A hierarchical ring: connected, and it runs every ring collective but
  // the tree's (a rooted one's root is a position on it).
  int ring_k = h->nranks;
  if (a->ring != ZCC_DEV_RING_CHANNEL) {
    if ((a->ring != ZCC_DEV_RING_LOCAL && a->ring != ZCC_DEV_RING_RAIL) ||
        a->coll == ZCC_DEV_CONN_TREE_ALLREDUCE)
      return cudaErrorInvalidValue;
    ring_k = h->ch[0].sub_n[a->ring - 1];
    if (ring_k < 2) return cudaErrorInvalidValue;
  }
  if ((a->coll == ZCC_DEV_CONN_BROADCAST || a->coll == ZCC_DEV_CONN_REDUCE) &&
      (a->root < 0 || a->root >= ring_k))
    return cudaErrorInvalidValue;
  if (a->total && (a->coll == ZCC_DEV_CONN_ALLREDUCE || a->total > a->count * es * (size_t)ring_k))
    return cudaErrorInvalidValue;
  // Blocks by rank (device.h): the all-gather on a hierarchical ring of
  // groups that cover the ranks, on the local ring in place (one block per
  // host each); the reduce-scatter on the local ring.
  p->by_rank = 0;
  p->nseg = 1;
  p->bstride = a->count * es;
  if (a->stride) {
    if (!a->by_rank || a->stride < a->count * es) return cudaErrorInvalidValue;
    p->bstride = a->stride;
  }
  if (a->by_rank) {
    int rs = a->coll == ZCC_DEV_CONN_REDUCESCATTER;
    if (a->ring == ZCC_DEV_RING_CHANNEL || (a->coll != ZCC_DEV_CONN_ALLGATHER && !rs) ||
        (rs && a->ring != ZCC_DEV_RING_LOCAL) || a->total ||
        h->hier_m < 2 || h->hier_h < 2 || h->hier_m * h->hier_h != h->nranks || h->hier_l < 0 ||
        h->hier_l >= h->hier_m)
      return cudaErrorInvalidValue;
    for (int i = 0; i < h->nranks; i++)
      if (h->hier_rank[i] < 0 || h->hier_rank[i] >= h->nranks) return cudaErrorInvalidValue;
    p->by_rank = 1;
    p->hm = h->hier_m;
    p->hl = h->hier_l;
    if (a->ring == ZCC_DEV_RING_LOCAL) {
      p->nseg = h->hier_h;
      if (!rs && (const char *)a->input != (const char *)a->output + (size_t)h->hier_rank[p->hl] * p->bstride)
        return cudaErrorInvalidValue;
    }
  }
  if (a->avg_div < 0) return cudaErrorInvalidValue;
  int reduces = a->coll != ZCC_DEV_CONN_ALLGATHER && a->coll != ZCC_DEV_CONN_BROADCAST;
  if (reduces && ((int)a->op < 0 || a->op >= zccNumOps)) return cudaErrorInvalidValue;
  p->conns = a->conns;
  p->in = (const char *)a->input;
  p->out = (char *)a->output;
  p->abort_flag = a->abort_flag;
  p->stamp = a->stamp;
  p->sig_gate = a->sig_gate;
  p->sig_seq = a->sig_seq;
  p->unit = a->count * es;
  p->slot = h->slot_bytes;
  p->nslots = h->nslots;
  p->k = ring_k;
  p->rank = h->rank;
  p->root = a->root;
  p->avg = reduces && a->op == zccAvg ? (a->avg_div ? a->avg_div : ring_k) : 0;
  p->coll = a->coll;
  p->ring = a->ring;
  p->total = a->total;
  int nch = a->nchannels;
  if (nch == 0) {
    size_t want = (p->unit + ZD_CONN_MIN_SLICE - 1) / ZD_CONN_MIN_SLICE;
    nch = want < (size_t)h->nchannels ? (int)(want ? want : 1) : h->nchannels;
  }
  p->nch = nch;
  return cudaSuccess;
}

} // namespace
} // namespace zcc_kernels
using namespace zcc_kernels;

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_conn_channels(
    const zcc_dev_conn_args_t *a) {
  ConnParams p;
  if (conn_prepare(a, &p) != cudaSuccess) return -1;
  return p.nch;
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_conn_coll(
    const zcc_dev_conn_args_t *a, struct CUstream_st *stream) {
  ConnParams p;
  int err = conn_prepare(a, &p);
  if (err != cudaSuccess) return err;
  if (a->count == 0) return cudaSuccess; // every rank passes the same count: all skip
  cudaStream_t s = (cudaStream_t)stream;
  const int tree = a->coll == ZCC_DEV_CONN_TREE_ALLREDUCE;
  const int grid = tree ? 2 * p.nch : p.nch;
#define ZD_LAUNCH_CONN(T, Op)                                                 \
  do {                                                                        \
    if (tree) tree_kernel<T, Op><<<grid, ZD_CONN_THREADS, 0, s>>>(p);         \
    else ring_kernel<T, Op><<<grid, ZD_CONN_THREADS, 0, s>>>(p);              \
  } while (0)
  if (a->coll == ZCC_DEV_CONN_ALLGATHER || a->coll == ZCC_DEV_CONN_BROADCAST)
    ring_kernel<uint8_t, ZdSum><<<grid, ZD_CONN_THREADS, 0, s>>>(p);
  else
    ZD_DISPATCH(a->type, a->op, ZD_LAUNCH_CONN)
#undef ZD_LAUNCH_CONN
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_conn_p2p(
    const zcc_dev_conn_p2p_t *a, struct CUstream_st *stream) {
  ConnP2pParams p;
  int blocks = 0;
  int err = conn_p2p_prepare(a, &p, &blocks);
  if (err != cudaSuccess) return err;
  if (blocks == 0) return cudaSuccess; // nothing but zero-byte ops: nothing to do
  conn_p2p_kernel<<<blocks, ZD_CONN_THREADS, 0, (cudaStream_t)stream>>>(p);
  return cudaGetLastError();
}

// Load every kernel of this file now (see zcc_dev_preload in device.h).
extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload_conn(void) {
  int err = cudaSuccess;
  cudaFuncAttributes fa;
  cudaError_t e0 = cudaFuncGetAttributes(&fa, ring_kernel<uint8_t, ZdSum>);
  if (e0 == cudaSuccess) e0 = cudaFuncGetAttributes(&fa, conn_p2p_kernel);
  if (e0 != cudaSuccess) return e0;
#define ZD_LOAD_CONN(T, Op)                                                    \
  do {                                                                        \
    cudaError_t e_ = cudaFuncGetAttributes(&fa, ring_kernel<T, Op>);          \
    if (e_ == cudaSuccess) e_ = cudaFuncGetAttributes(&fa, tree_kernel<T, Op>); \
    if (e_ != cudaSuccess) err = e_;                                          \
  } while (0)
  for (int t = 0; t < zccNumTypes; t++)
    for (int o = 0; o < zccNumOps; o++) {
      if (o == zccAvg) continue; /* runs as sum */
      ZD_DISPATCH((zccDataType_t)t, (zccRedOp_t)o, ZD_LOAD_CONN)
    }
#undef ZD_LOAD_CONN
  return err;
}
