// Flags shared by the all-rank kernels (allreduce one-shot / two-shot,
// barrier, gather) and the p2p kernel: system-scope release stores and
// acquire loads, waits on counters compared modulo 2^32, and the per-block
// barrier on the flag areas of device.h.
//
// Flag area layout (uint32 words): one line of ZD_FLAG_STRIDE words per
// block: [0, ZCC_DEV_MAX_RANKS) one slot per peer (the last value that peer
// signalled to this block), ZD_FLAG_CTR the block's barrier counter. Every
// kernel that uses these lines shares the counters, so any sequence of them
// launched alike on every rank stays in step. (Word 9 is the LL counter.)
#ifndef ZCC_DEVICE_FLAGS_CUH_
#define ZCC_DEVICE_FLAGS_CUH_

#include <stdint.h>

#include "reduce_ops.cuh"

#define ZD_FLAG_STRIDE 16
#define ZD_FLAG_CTR 8

ZD_INLINE void zd_st_release_sys(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

ZD_INLINE uint32_t zd_ld_acquire_sys(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

ZD_INLINE uint64_t zd_ld_acquire_sys64(const volatile uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

ZD_INLINE uint64_t zd_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A wait's check of the abort word, every 1024 spins or so (the slow path):
// at the ZD_ANNOUNCE_SPINS-th spin it also stores the time into its block's
// slot beside the abort word (device.h, ZCC_DEV_ABORT_WAITS_OFF), once per
// wait: the watchdog's sign of a block in flight, since a launch shorter
// than its stamp's quiet_ns stamps no exit. 1024 loads that miss L1 take
// over 100 us, far above any quiet_ns, so a block that announced is one
// that stamps its exit where exits are stamped; then its heartbeat every
// ZD_ANNOUNCE_SPINS more, which tells the host it still waits where no exit
// will say it left. true: the abort word is raised.
#define ZD_ANNOUNCE_SPINS 1024u
ZD_INLINE bool zd_wait_slow(const volatile uint32_t *abort_flag, unsigned spins) {
  const unsigned b = blockIdx.x;
  if (*abort_flag) {
    if (b < ZCC_DEV_MAX_BLOCKS) /* gave up: the op failed, whether or not exits are stamped */
      ((volatile uint64_t *)((uintptr_t)abort_flag + ZCC_DEV_ABORT_BEATS_OFF))[b] =
          (zd_globaltimer() + 1) | ZCC_DEV_BEAT_GAVE_UP;
    return true;
  }
  if (spins % ZD_ANNOUNCE_SPINS == 0 && b < ZCC_DEV_MAX_BLOCKS) {
    const uint64_t t = zd_globaltimer() + 1;
    if (spins == ZD_ANNOUNCE_SPINS)
      ((volatile uint64_t *)((uintptr_t)abort_flag + ZCC_DEV_ABORT_WAITS_OFF))[b] = t;
    ((volatile uint64_t *)((uintptr_t)abort_flag + ZCC_DEV_ABORT_BEATS_OFF))[b] = t;
  }
  return false;
}

// A collective's gate (device.h, zcc_dev_conn_args_t.sig_gate): the block
// waits until the network proxy's agreement word reaches seq. false when
// the abort word was raised first: the block then touches no connector.
ZD_INLINE bool zd_sig_gate(const volatile uint64_t *gate, uint64_t seq,
                           const volatile uint32_t *abort_flag) {
  if (!gate) return true;
  __shared__ int s_open;
  if (threadIdx.x == 0) {
    int open = 1;
    unsigned spins = 0;
    while (zd_ld_acquire_sys64(gate) < seq) {
      if (abort_flag && (++spins & 63u) == 0 && zd_wait_slow(abort_flag, spins)) {
        open = 0;
        break;
      }
    }
    s_open = open;
  }
  __syncthreads();
  return s_open != 0;
}

// Spin until *p has reached v (modulo 2^32): true; or the abort flag is
// raised first: false. A kernel whose wait gave up writes nothing more (no
// output, no peer's memory): every wait site's block asks __syncthreads_or
// whether any of its waits did, and returns.
ZD_INLINE bool zd_wait_reach(const uint32_t *p, uint32_t v, const volatile uint32_t *abort_flag) {
  unsigned spins = 0;
  while ((int32_t)(zd_ld_acquire_sys(p) - v) < 0) {
    if (abort_flag && (++spins & 1023u) == 0 && zd_wait_slow(abort_flag, spins)) return false;
  }
  return true;
}

// ---- op stamps (device.h) ----

// The thread of a block that stamps: its last one, whose part of the work
// is the smallest (small messages are thread 0's): stamping in thread 0
// delayed an 8 B allreduce by 0.1 us more (docs/perf/h200x1.md).
ZD_INLINE bool zd_stamper() { return threadIdx.x == blockDim.x - 1; }

// What a launch's stamps need at its end, taken at its entry: the exit
// then reads no kernel parameter (each is pinned in a register here).
struct zd_stamp_at {
  uint64_t entry, token;
  zcc_dev_live_t *live; // every thread: NULL, no stamps
  zcc_dev_op_time_t *op;
  uint32_t quiet_ns;    // every thread: ZCC_DEV_NO_EXITS, no exit stamps
};

ZD_INLINE uint64_t zd_pin(uint64_t v) {
  asm volatile("" : "+l"(v));
  return v;
}

// At a launch's entry, in every block (its stamper stores; see device.h):
// the block's entry time, which zd_stamp_exit takes back. Block 0 also
// names the op, and stamps its start at the op's first launch.
ZD_INLINE zd_stamp_at zd_stamp_enter(const zcc_dev_stamp_t &s) {
  zd_stamp_at a = {0, 0, (zcc_dev_live_t *)zd_pin((uint64_t)s.live), nullptr,
                   (uint32_t)zd_pin(s.quiet_ns)};
  if (!a.live || !zd_stamper()) return a;
  const uint64_t t = zd_globaltimer() + 1;
  const unsigned b = blockIdx.x;
  if (b < ZCC_DEV_MAX_BLOCKS) ((volatile zcc_dev_live_t *)a.live)->block[b].entry_ns = t;
  a.entry = t;
  a.token = zd_pin(s.token);
  a.op = (zcc_dev_op_time_t *)zd_pin((uint64_t)s.op);
  if (b == 0) {
    ((volatile zcc_dev_live_t *)a.live)->seq = s.seq;
    if (s.first) {
      volatile zcc_dev_op_time_t *op = a.op;
      op->end_ns = 0;
      op->end_token = 0;
      op->seq = s.seq;
      op->start_ns = t;
    }
  }
  return a;
}

// At a launch's end, in every block (all its threads): once the block is
// done, its exit time; block 0 also the op's end and this launch's token.
// Nothing where the block ran for less than quiet_ns, and nothing at all,
// not even the barrier, with ZCC_DEV_NO_EXITS (device.h).
ZD_INLINE void zd_stamp_exit(const zd_stamp_at &a) {
  if (!a.live || a.quiet_ns == ZCC_DEV_NO_EXITS) return;
  __syncthreads();
  if (!zd_stamper()) return;
  uint64_t t = zd_globaltimer();
  if (a.quiet_ns && t < a.entry + a.quiet_ns) return;
  if (t < a.entry) t = a.entry;
  const unsigned b = blockIdx.x;
  if (b == 0) {
    volatile zcc_dev_op_time_t *op = a.op;
    op->end_ns = t;
    op->end_token = a.token;
  }
  if (b < ZCC_DEV_MAX_BLOCKS) ((volatile zcc_dev_live_t *)a.live)->block[b].exit_ns = t;
}

// arr[i] for a run-time i without indexing the parameter array dynamically
// (which would copy the kernel parameters to local memory).
template <int MAXK, typename P> ZD_INLINE P zd_pick(const P *arr, int i) {
  P x = arr[0];
#pragma unroll
  for (int r = 1; r < MAXK; r++)
    if (r == i) x = arr[r];
  return x;
}

// Barrier of block blockIdx.x with the same block of every peer: store v
// into its slot of every peer's line (after __syncthreads, so the block's
// earlier loads and stores are ordered before it) and wait for every peer's
// slot in the own line to reach v.
// false (in every thread of the block) when the abort word ended a wait.
template <int MAXK>
ZD_INLINE bool zd_barrier(uint32_t *const *flags, int k, int rank, const volatile uint32_t *abort_flag,
                          uint32_t v) {
  __syncthreads();
  const int t = threadIdx.x;
  bool ok = true;
  if (t < k && t != rank) {
    zd_st_release_sys(zd_pick<MAXK>(flags, t) + blockIdx.x * ZD_FLAG_STRIDE + rank, v);
    const uint32_t *mine = zd_pick<MAXK>(flags, rank) + blockIdx.x * ZD_FLAG_STRIDE + t;
    ok = zd_wait_reach(mine, v, abort_flag);
  }
  return !__syncthreads_or(!ok);
}

// The block's barrier counter, read at the start of a launch and written
// back (by thread 0, after the last barrier) at its end.
template <int MAXK> ZD_INLINE uint32_t zd_counter_load(uint32_t *const *flags, int rank) {
  __shared__ uint32_t s_ctr;
  if (threadIdx.x == 0) s_ctr = zd_pick<MAXK>(flags, rank)[blockIdx.x * ZD_FLAG_STRIDE + ZD_FLAG_CTR];
  __syncthreads();
  return s_ctr;
}

template <int MAXK> ZD_INLINE void zd_counter_store(uint32_t *const *flags, int rank, uint32_t v) {
  if (threadIdx.x == 0) zd_pick<MAXK>(flags, rank)[blockIdx.x * ZD_FLAG_STRIDE + ZD_FLAG_CTR] = v;
}

// Multiprocessors of the current device (cached per device), for grids that
// every rank must derive alike. 0 or a cudaError_t.
static inline int zd_sm_count(int *n) {
  static int cache[64];
  int dev;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  int c = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);
  if (c == 0) {
    err = cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    __atomic_store_n(&cache[dev], c, __ATOMIC_RELAXED);
  }
  *n = c;
  return cudaSuccess;
}

#endif // ZCC_DEVICE_FLAGS_CUH_
