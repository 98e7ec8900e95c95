/*
 * A GPU communicator's set-up: the window each rank lays out alike, the
 * connectors' channels over it, the watchdog, and registered buffers. The
 * transport that connects every peer (transport/p2p.c: device memory, or
 * shm's GPU face: pinned host memory) places the window, maps the peers'
 * into this GPU and registered buffers likewise; this file only reads the
 * device views it hands back. Layout of a window (each part 4 KiB aligned):
 *
 *   flags    ZCC_DEV_FLAGS_BYTES   barrier slots and counters (zeroed)
 *   ce       ZCC_GPU_CE_BYTES      copy-engine pipeline flags (zeroed)
 *   push     ZCC_DEV_PUSH_FLAGS_BYTES  push allreduce flags and counters (zeroed)
 *   ll       ZCC_DEV_LL_BYTES      LL allreduce lines (zeroed)
 *   p2p      ZCC_DEV_P2P_BYTES     send/recv flags (zeroed) and outboxes
 *   staging  ZCC_GPU_BUFFSIZE      where unregistered inputs are copied
 *   conns    per channel: its flag lines (zeroed), then its five receive
 *            FIFOs of ZCC_GPU_CONN_BYTES (device.h: connectors)
 *   peers    per-peer connectors for send/receive: their flag lines
 *            (ZCC_DEV_PEER_FLAG_BYTES(nranks), zeroed), then one receive FIFO of
 *            ZCC_GPU_CONN_BYTES per source rank (its own unused)
 *
 * Several ranks may share one GPU (in one process or several; the
 * transport maps their windows as for other GPUs). Kernels that wait for peers then run at once on one GPU, so
 * their grids are capped (block_cap) to leave room for every rank's blocks.
 *
 * A watchdog thread per communicator turns a dead peer process (or an abort,
 * or an error) into the abort word that every waiting kernel polls, so a
 * stream never hangs on a peer that is gone.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "debug.h"
#include "cudawrap.h"
#include "gpu.h"
#include "param.h"
#include "planner.h"
#include "sigboard.h"
#include "socket.h"
#include "trace.h"
#include "transport.h"
#include "wait.h"

ZCC_PARAM_INT(gpu_buffsize, "GPU_BUFFSIZE", 64 << 20,
              "bytes of each GPU rank's staging buffer (unregistered buffers are "
              "copied through it; larger calls run in pieces of it)")

ZCC_PARAM_INT(gpu_channels, "GPU_CHANNELS", 32,
              "most channels of the GPU ring and tree kernels (1 to 32; fewer where "
              "ranks share a GPU, so that every rank's blocks fit at once)")
ZCC_PARAM_INT(gpu_conn_bytes, "GPU_CONN_BYTES", 1 << 20,
              "bytes of each GPU connector FIFO (ring and tree kernels), split into "
              "ZCC_GPU_CONN_SLOTS slots")
ZCC_PARAM_INT(gpu_conn_slots, "GPU_CONN_SLOTS", 4, "slots per GPU connector FIFO (2 to 64)")
ZCC_PARAM_INT(gpu_sig_gate, "GPU_SIG_GATE", 1,
              "1: connector kernels of a GPU communicator with ranks on other hosts wait, "
              "before they take a byte, until the network proxy found the collective's "
              "signature equal on those ranks (sigboard.h); 0: they do not (for measuring it: "
              "a mismatch is then still an error, but may complete on the other call's data "
              "first)")
ZCC_PARAM_INT(gpu_stamps, "GPU_STAMPS", 1,
              "1: kernels stamp when the GPU ran each operation (the flight recorder's and "
              "the trace's GPU times, and the watchdog's ZCC_TIMEOUT for a launch whose peers "
              "never come); 0: no stamps, and a GPU collective waits for its peers until abort; "
              "2: stamps into device memory nobody reads (to measure their cost)")
ZCC_PARAM_INT(gpu_stamp_quiet_us, "GPU_STAMP_QUIET_US", -1,
              "-1: kernel blocks stamp no exit (the exit's barrier and timer read cost a "
              "small collective about 0.05 us); the watchdog tells a block in flight by its "
              "waits, which say so once they have spun long and keep beating while they "
              "wait, and the flight recorder an op's end by the next op's start. 1 to 50: a "
              "block that ran for longer than this many microseconds stamps its exit (its "
              "op's GPU end in the recorder). 0: every block stamps its exit, as always "
              "under ZCC_TRACE_FILE, whose trace takes every op's GPU end. At most 50: a "
              "wait announces itself after 1024 spins, over 100 us, and a block that did "
              "must be one that stamps its exit where exits are stamped")
ZCC_PARAM_INT(gpu_p2p_rounds, "GPU_P2P_ROUNDS", 0,
              "send/receive and all-to-all over the per-peer connectors: the most peer "
              "distances (rounds) one launch takes (0: as many as the GPU's blocks allow, at "
              "most 32; the smallest of any rank counts)")
ZCC_PARAM_INT(p2p_direct_disable, "P2P_DIRECT_DISABLE", 0,
              "1: GPU send/receive and all-to-all move data through per-peer connector "
              "FIFOs in the receiver's memory (the sender stores, the receiver reads "
              "locally; no loads from a peer's memory), as NCCL_P2P_DIRECT_DISABLE; 0: the "
              "receiver copies from the sender's outbox. Equal on every rank")

#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))

_Static_assert(ZCC_GPU_PAIRS_MAX == ZCC_DEV_MAX_RANKS,
               "the planner's bound on the all-pairs kernels is device.h's");

static size_t off_ce(void) { return ALIGN_UP((size_t)ZCC_DEV_FLAGS_BYTES, 4096); }
static size_t off_push(void) { return off_ce() + ZCC_GPU_CE_BYTES; }
static size_t off_ll(void) { return off_push() + ALIGN_UP((size_t)ZCC_DEV_PUSH_FLAGS_BYTES, 4096); }
static size_t off_p2p(void) { return off_ll() + ALIGN_UP((size_t)ZCC_DEV_LL_BYTES, 4096); }
static size_t off_staging(void) { return off_p2p() + ALIGN_UP((size_t)ZCC_DEV_P2P_BYTES, 4096); }
static size_t off_conns(const zcc_gpu_t *g) { return off_staging() + g->staging_bytes; }
/* Bytes of the connector part: every channel's flag lines, then its FIFOs. */
static size_t conn_flag_bytes(int nch) { return ALIGN_UP((size_t)nch * ZCC_DEV_CHAN_FLAG_BYTES, 4096); }
static size_t conn_fifo_bytes(const zcc_gpu_t *g) {
  return (size_t)g->conns->nslots * g->conns->slot_bytes;
}

static zccResult_t cuda_fail(cudaError_t e, const char *what, struct zccComm *comm) {
  return zcc_error(zccUnhandledCudaError, "comm %s rank %d: %s failed: %s (%s)", comm->name,
                   comm->rank, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_TRY(call, comm)                                                   \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call, comm);                  \
  } while (0)

zccResult_t zcc_gpu_current_device(int *dev) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return zcc_error(zccInvalidUsage, "GPU communicator: no CUDA device (%s)",
                     e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  e = cudaGetDevice(dev);
  if (e != cudaSuccess)
    return zcc_error(zccUnhandledCudaError, "GPU communicator: cudaGetDevice failed: %s",
                     cudaGetErrorString(e));
  return zccSuccess;
}

zccResult_t zcc_gpu_bind_device(int dev) {
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess)
    return zcc_error(zccUnhandledCudaError, "cudaSetDevice(%d) failed: %s", dev,
                     cudaGetErrorString(e));
  return zccSuccess;
}

/* What every rank must share about the window's layout (kernels address
   slots in peers' windows). */
typedef struct {
  uint64_t staging_bytes; /* kernels lay slots out in peers' staging */
  uint64_t slot_bytes;    /* connectors */
  int32_t nslots, nchannels;
  int32_t p2p_conn;       /* ZCC_P2P_DIRECT_DISABLE: the send/receive kernels must match */
  int32_t a2a_round;      /* every rank takes the smallest (zcc_gpu_t) */
  uint64_t rings;         /* a hash of every channel's ring: the connectors must pair up */
} layout_wire_t;

/* ---- op stamps (device.h) ---- */

/* Raise the abort word (its first time kept: ops that end after it were cut short). */
static void raise_abort(zcc_gpu_t *g) {
  int64_t zero = 0;
  __atomic_compare_exchange_n(&g->abort_ns, &zero, zcc_now_ns(), 0, __ATOMIC_RELAXED,
                              __ATOMIC_RELAXED);
  *g->abort_host = 1;
}

/* The ring slot of record id (0: slot 0). */
static uint32_t op_slot(const zcc_gpu_t *g, uint64_t id) {
  return id && g->ntimes ? (uint32_t)((id - 1) % g->ntimes) : 0;
}

void zcc_gpu_op_begin(zcc_gpu_t *g, uint64_t id) {
  g->op_id = id;
  g->op_slot = op_slot(g, id);
  g->op_launches = 0;
  if (g->times_last) __atomic_store_n(&g->times_last[g->op_slot], 0, __ATOMIC_RELEASE);
}

void zcc_gpu_op_end(zcc_gpu_t *g) {
  if (g->times_last && g->op_launches)
    __atomic_store_n(&g->times_last[g->op_slot], g->token, __ATOMIC_RELEASE);
}

zcc_dev_stamp_t zcc_gpu_stamp(zcc_gpu_t *g) {
  zcc_dev_stamp_t s;
  memset(&s, 0, sizeof(s));
  if (!g->live_dev) return s;
  s.live = g->live_dev;
  s.op = &g->times_dev[g->op_slot];
  s.token = ++g->token;
  s.seq = g->op_id;
  s.first = g->op_launches++ == 0;
  s.quiet_ns = g->quiet_ns;
  return s;
}

/*
 * The blocks' state from the stamps and the waits' words (device.h): how
 * many wait in flight; *sig changes whenever a block enters, leaves or a
 * wait announces itself; *last the latest entry (GPU time).
 */
static int blocks_waiting(const zcc_gpu_t *g, uint64_t *sig, uint64_t *last) {
  const volatile zcc_dev_live_t *live = g->live_host;
  const volatile uint64_t *waits =
      (const volatile uint64_t *)((const char *)g->abort_host + ZCC_DEV_ABORT_WAITS_OFF);
  const volatile uint64_t *beats =
      (const volatile uint64_t *)((const char *)g->abort_host + ZCC_DEV_ABORT_BEATS_OFF);
  int64_t gpu_now = zcc_now_ns() - g->clock_offset_ns;
  int busy = 0;
  uint64_t h = 0, latest = 0;
  for (int b = 0; b < ZCC_DEV_MAX_BLOCKS; b++) {
    uint64_t in = live->block[b].entry_ns, out = live->block[b].exit_ns, w = waits[b];
    /* entered and not left; where exits may go unstamped, also announced
       since it entered and beating lately (its wait goes on: a block that
       left stamped no exit, its beat goes stale) */
    uint64_t beat = beats[b];
    busy += in > out && (!g->quiet_ns || (w >= in && !(beat & ZCC_DEV_BEAT_GAVE_UP) &&
                                          gpu_now - (int64_t)beat < g->beat_fresh_ns));
    h = h * 1000003u + in + 3 * out + 7 * w;
    if (in > latest) latest = in;
  }
  if (sig) *sig = h;
  if (last) *last = latest;
  return busy;
}

/* An op whose launches stamped no end (each shorter than quiet_ns) is done
   once a later op of the communicator started on the GPU (one stream's
   order), or once no block has entered for a second and none waits: a
   launch that runs longer stamps its exit (a single launch computing for
   a second with no wait of 100 us may read done before its end). */
#define QUIET_SETTLE_NS 1000000000ll
static int later_started(const zcc_gpu_t *g, uint64_t id) {
  for (uint64_t j = id + 1; j <= id + 16; j++) {
    uint32_t k = op_slot(g, j);
    volatile zcc_dev_op_time_t *v = &g->times_host[k];
    if (__atomic_load_n(&g->times_last[k], __ATOMIC_ACQUIRE) && v->seq == j && v->start_ns)
      return 1;
  }
  return 0;
}

/* A wait of some block saw the abort word and gave up after start (GPU
   time): the op that started then, the latest, failed. */
static int gave_up_since(const zcc_gpu_t *g, uint64_t start) {
  const volatile uint64_t *beats =
      (const volatile uint64_t *)((const char *)g->abort_host + ZCC_DEV_ABORT_BEATS_OFF);
  for (int b = 0; b < ZCC_DEV_MAX_BLOCKS; b++) {
    uint64_t v = beats[b];
    if ((v & ZCC_DEV_BEAT_GAVE_UP) && (v & ~ZCC_DEV_BEAT_GAVE_UP) >= start) return 1;
  }
  return 0;
}

/* No block waits, and none has entered for QUIET_SETTLE_NS. */
static int quiet_settled(const zcc_gpu_t *g) {
  uint64_t last = 0;
  if (blocks_waiting(g, NULL, &last)) return 0;
  int64_t gpu_now = zcc_now_ns() - g->clock_offset_ns;
  return gpu_now - (int64_t)last > QUIET_SETTLE_NS;
}

int zcc_gpu_op_times(struct zccComm *comm, uint64_t id, int64_t *start_ns, int64_t *end_ns) {
  zcc_gpu_t *g = comm->gpu;
  *start_ns = *end_ns = 0;
  if (!g || !g->times_host || !id) return -1;
  uint32_t i = op_slot(g, id);
  uint64_t last = __atomic_load_n(&g->times_last[i], __ATOMIC_ACQUIRE);
  if (!last) return -1; /* it launched nothing stamped (or its slot went to a newer op) */
  volatile zcc_dev_op_time_t *v = &g->times_host[i];
  zcc_dev_op_time_t t = {v->seq, v->start_ns, v->end_ns, v->end_token};
  if (t.seq != id || !t.start_ns || v->seq != id) return 0;
  *start_ns = (int64_t)t.start_ns + g->clock_offset_ns;
  if (t.end_token == last && t.end_ns) {
    *end_ns = (int64_t)t.end_ns + g->clock_offset_ns;
    int64_t ab = __atomic_load_n(&g->abort_ns, __ATOMIC_RELAXED);
    return ab && *end_ns >= ab ? 3 : 2; /* ended after the abort word: its waits gave up */
  }
  if (!g->quiet_ns) return 1;
  /* no end stamped: done once a later op started; failed where its waits
     gave up at the abort word (no exit says so where exits go unstamped) */
  if (later_started(g, id)) return 4;
  if (gave_up_since(g, t.start_ns)) return 3;
  return quiet_settled(g) ? 4 : 1;
}

/* CLOCK_MONOTONIC minus %globaltimer: the smallest difference between the
   host's clock and a GPU time the host has just read, from a kernel that
   keeps writing its clock into mapped memory (the read's latency, about a
   microsecond over PCIe, is the error, always late). */
static zccResult_t clock_calibrate(struct zccComm *comm, zcc_gpu_t *g) {
  uint64_t *word = NULL, *word_dev = NULL;
  CUDA_TRY(cudaHostAlloc((void **)&word, 64, cudaHostAllocMapped | cudaHostAllocPortable), comm);
  volatile uint64_t *w = word;
  volatile uint32_t *stop = (volatile uint32_t *)(word + 1);
  w[0] = 0;
  *stop = 0;
  zccResult_t res = zccSuccess;
  cudaError_t e = cudaHostGetDevicePointer((void **)&word_dev, word, 0);
  int de = e == cudaSuccess ? zcc_dev_clock_probe(word_dev, (const volatile uint32_t *)(word_dev + 1),
                                                  20000000ull, g->side)
                            : 0;
  if (e != cudaSuccess || de != 0) {
    res = zcc_error(zccUnhandledCudaError, "comm %s rank %d: the GPU clock probe failed: %s",
                    comm->name, comm->rank,
                    e != cudaSuccess ? cudaGetErrorString(e) : zcc_dev_error_string(de));
  } else {
    int64_t best = INT64_MAX, t_end = zcc_now_ns() + 1000000000LL;
    uint64_t last = 0;
    int samples = 0;
    while (samples < 200 && zcc_now_ns() < t_end) {
      uint64_t v = w[0];
      int64_t now = zcc_now_ns();
      if (v && v != last) {
        last = v;
        samples++;
        if (now - (int64_t)v < best) best = now - (int64_t)v;
      }
    }
    *stop = 1;
    e = cudaStreamSynchronize((cudaStream_t)g->side);
    if (e != cudaSuccess)
      res = cuda_fail(e, "cudaStreamSynchronize (the GPU clock probe)", comm);
    else if (!samples)
      res = zcc_error(zccUnhandledCudaError,
                      "comm %s rank %d: the GPU clock probe wrote nothing within 1 s",
                      comm->name, comm->rank);
    else
      g->clock_offset_ns = best;
    ZCC_INFO(INIT, "comm %s rank %d: GPU clock offset %lld ns from %d sample(s)", comm->name,
             comm->rank, (long long)g->clock_offset_ns, samples);
  }
  cudaFreeHost(word);
  return res;
}

/* The live words and the ring of op times (mapped pinned), and the clock. */
static zccResult_t stamps_setup(struct zccComm *comm, zcc_gpu_t *g) {
  const zcc_trace_t *t = comm->trace;
  g->ntimes = t && t->ring ? t->cap : 1;
  size_t head = ALIGN_UP(sizeof(zcc_dev_live_t), 64);
  size_t bytes = head + (size_t)g->ntimes * sizeof(zcc_dev_op_time_t);
  void *h = NULL, *d = NULL;
  CUDA_TRY(cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable), comm);
  memset(h, 0, bytes);
  g->live_host = h;
  g->times_host = (zcc_dev_op_time_t *)((char *)h + head);
  CUDA_TRY(cudaHostGetDevicePointer(&d, h, 0), comm);
  g->live_dev = d;
  g->times_dev = (zcc_dev_op_time_t *)((char *)d + head);
  g->times_last = calloc(g->ntimes, sizeof(uint64_t));
  if (!g->times_last) return zcc_error(zccSystemError, "init: out of memory");
  return clock_calibrate(comm, g);
}

/* ZCC_GPU_STAMPS=2, for measuring what the stamps cost: the kernels stamp
   into device memory nobody reads (no GPU times, no GPU timeout). */
static zccResult_t stamps_setup_probe(struct zccComm *comm, zcc_gpu_t *g) {
  size_t head = ALIGN_UP(sizeof(zcc_dev_live_t), 64);
  size_t bytes = head + sizeof(zcc_dev_op_time_t);
  void *d = NULL;
  CUDA_TRY(cudaMalloc(&d, bytes), comm);
  CUDA_TRY(cudaMemset(d, 0, bytes), comm);
  g->stamps_probe = d;
  g->live_dev = d;
  g->times_dev = (zcc_dev_op_time_t *)((char *)d + head);
  g->ntimes = 1;
  return zccSuccess;
}

/* A launch of this communicator in flight on the GPU for longer than
   ZCC_TIMEOUT with no launch entering or ending: the op's peers never
   came. Every waiting kernel gives up; the error names the op. */
static void gpu_timed_out(struct zccComm *comm, zcc_gpu_t *g, uint64_t id, int64_t ms) {
  char what[160] = "";
  zcc_op_rec_t *r = id ? zcc_trace_rec(comm, id) : NULL;
  if (r)
    snprintf(what, sizeof(what), " op #%llu %s of %llu bytes",
             (unsigned long long)__atomic_load_n(&r->seq, __ATOMIC_RELAXED),
             zcc_coll_name((zcc_coll_t)__atomic_load_n(&r->coll, __ATOMIC_RELAXED)),
             (unsigned long long)__atomic_load_n(&r->bytes, __ATOMIC_RELAXED));
  (void)zcc_error(zccTimeout,
                  "comm %s rank %d: GPU%s made no progress for %lld ms (ZCC_TIMEOUT=%lld): a "
                  "peer has not joined it; its kernels were stopped",
                  comm->name, comm->rank, what, (long long)ms, (long long)comm->timeout_ms);
  ZCC_WARN("%s", zcc_last_error());
  /* The error (and the flight recorder's dump, with the op still running) first. */
  zcc_comm_set_error(comm, zccTimeout);
  raise_abort(g);
}

static void *watchdog_main(void *arg) {
  struct zccComm *comm = arg;
  zcc_gpu_t *g = comm->gpu;
  const zcc_peer_info_t *self = &comm->peers[comm->rank];
  struct timespec ts = {0, 20 * 1000 * 1000};
  volatile zcc_dev_live_t *live = g->live_host;
  uint64_t seen = 0;
  int64_t since = 0; /* 0: nothing in flight */
  unsigned link_round = 0;
  while (!atomic_load(&g->watchdog_stop)) {
    if (atomic_load(&comm->abort_flag) || atomic_load(&comm->async_error) != zccSuccess) {
      if (!*g->abort_host) raise_abort(g);
    } else {
      for (int r = 0; r < comm->nranks; r++) {
        zcc_conn_t *c = comm->conns[r];
        if (!c || !c->ops->gpu->check || zcc_peer_same_process(self, &comm->peers[r])) continue;
        zccResult_t cr = c->ops->gpu->check(c);
        if (cr != zccSuccess) {
          /* a peer that died, or one that says it failed (zccInvalidUsage
             for a mismatch it found: net_gpu.c's failure notices) */
          if (cr != zccInvalidUsage) cr = zccRemoteError;
          ZCC_WARN("comm %s rank %d: rank %d (pid %d) is gone or failed; its collectives "
                   "fail with %s: %s", comm->name, comm->rank, r, comm->peers[r].pid,
                   zccGetErrorString(cr), zcc_last_error());
          raise_abort(g);
          zcc_comm_set_error(comm, cr);
          break;
        }
      }
      /* a peer's collective that is not this rank's at the same number */
      if (!*g->abort_host && zcc_sigboard_check(comm->sigboard) != zccSuccess) {
        ZCC_WARN("comm %s rank %d: mismatched collectives: %s", comm->name, comm->rank,
                 zcc_last_error());
        zcc_comm_set_error(comm, zccInvalidUsage);
        raise_abort(g);
      }
      /* a peer host or link gone silent (bootstrap.h), every 5th round */
      if (++link_round % 5 == 0 && !*g->abort_host &&
          zcc_bootstrap_link_check(comm->bootstrap) != zccSuccess) {
        ZCC_WARN("comm %s rank %d: %s; its collectives fail with zccRemoteError", comm->name,
                 comm->rank, zcc_last_error());
        raise_abort(g);
        zcc_comm_set_error(comm, zccRemoteError);
      }
    }
    if (live && comm->timeout_ms > 0 && !*g->abort_host) {
      /* A block in flight (entered, not left, and with quiet exits waiting
         long); progress: any block entering, leaving or announcing a wait. */
      uint64_t sig = 0;
      int busy = blocks_waiting(g, &sig, NULL);
      int64_t now = zcc_now_ns();
      if (!busy) {
        since = 0;
      } else if (!since || sig != seen) {
        since = now; /* in flight, and moving */
        seen = sig;
      } else if ((now - since) / 1000000 >= comm->timeout_ms) {
        gpu_timed_out(comm, g, live->seq, (now - since) / 1000000);
      }
    }
    nanosleep(&ts, NULL);
  }
  return NULL;
}

void zcc_gpu_comm_stop_kernels(struct zccComm *comm) {
  if (comm->gpu && comm->gpu->abort_host) raise_abort(comm->gpu);
}

static zccResult_t layout_agrees(struct zccComm *comm, const zcc_gpu_t *g, int r,
                                 const layout_wire_t *w) {
  int me = comm->rank;
  struct { layout_wire_t w; } b = {*w};
  if (b.w.staging_bytes != g->staging_bytes)
    return zcc_error(zccInvalidUsage,
                     "comm %s: rank %d has a %llu-byte staging buffer and rank %d one of %llu "
                     "bytes; set ZCC_GPU_BUFFSIZE alike on every rank",
                     comm->name, me, (unsigned long long)g->staging_bytes, r,
                     (unsigned long long)b.w.staging_bytes);
  if (b.w.slot_bytes != g->conns->slot_bytes || b.w.nslots != g->conns->nslots ||
      b.w.nchannels != g->conns->nchannels)
    return zcc_error(zccInvalidUsage,
                     "comm %s: rank %d has %d channels of %d x %llu-byte connector slots and "
                     "rank %d %d of %d x %llu; set ZCC_GPU_CHANNELS (ZCC_NET_GPU_CHANNELS "
                     "across hosts), ZCC_GPU_CONN_BYTES and ZCC_GPU_CONN_SLOTS alike on every "
                     "rank (and use GPUs of one kind)",
                     comm->name, me, g->conns->nchannels, g->conns->nslots,
                     (unsigned long long)g->conns->slot_bytes, r, b.w.nchannels, b.w.nslots,
                     (unsigned long long)b.w.slot_bytes);
  if (b.w.rings != g->rings_hash)
    return zcc_error(zccInvalidUsage,
                     "comm %s: rank %d and rank %d run the channels over different rings; set "
                     "ZCC_RINGS alike on every rank (or on none)", comm->name, me, r);
  if (b.w.p2p_conn != g->p2p_conn)
    return zcc_error(zccInvalidUsage,
                     "comm %s: rank %d runs send/receive %s and rank %d %s; set "
                     "ZCC_P2P_DIRECT_DISABLE alike on every rank",
                     comm->name, me, g->p2p_conn ? "over connectors" : "direct", r,
                     b.w.p2p_conn ? "over connectors" : "direct");
  return zccSuccess;
}

/*
 * Every rank lays its window out alike (kernels address slots in peers'
 * windows): the parameters that shape it must agree. Collective.
 */
static zccResult_t check_layout(struct zccComm *comm, zcc_gpu_t *g) {
  int n = comm->nranks, me = comm->rank;
  if (n == 1) return zccSuccess;
  layout_wire_t *all = calloc((size_t)n, sizeof(*all));
  if (!all) return zcc_error(zccSystemError, "init: out of memory");
  all[me].staging_bytes = g->staging_bytes;
  all[me].slot_bytes = g->conns->slot_bytes;
  all[me].nslots = g->conns->nslots;
  all[me].nchannels = g->conns->nchannels;
  all[me].p2p_conn = g->p2p_conn;
  all[me].rings = g->rings_hash;
  all[me].a2a_round = g->a2a_round;
  zccResult_t res = zcc_bootstrap_allgather(comm->bootstrap, all, sizeof(*all), comm->timeout_ms);
  for (int r = 0; r < n && res == zccSuccess; r++) {
    res = layout_agrees(comm, g, r, &all[r]);
    if (all[r].a2a_round < g->a2a_round) g->a2a_round = all[r].a2a_round;
  }
  free(all);
  return res;
}

/* Every peer's window through its connection's device view. */
static zccResult_t map_peers(struct zccComm *comm, zcc_gpu_t *g) {
  ZCC_CHECK(zcc_transport_attach_gpu(comm));
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank) {
      g->peer_win[r] = g->win;
      continue;
    }
    if (zcc_conn_proxied(comm->conns[r])) {
      g->peer_win[r] = NULL; /* reached through connectors only */
      continue;
    }
    zcc_dev_peer_t v;
    ZCC_CHECK(comm->conns[r]->ops->gpu->view(comm->conns[r], &v));
    if (!v.loads)
      return zcc_error(zccInvalidUsage, "comm %s: the %s connection to rank %d takes stores "
                       "only; the GPU kernels of this version need loads too", comm->name,
                       comm->conns[r]->ops->name, r);
    g->peer_win[r] = v.win;
  }
  return zccSuccess;
}

/*
 * How ranks share GPUs, the grid cap that follows, and the connectors'
 * layout (before the window is allocated: it holds them). Every rank sees
 * every rank's GPU (peer info), so all derive the same share.
 */
static zccResult_t conns_plan(struct zccComm *comm, zcc_gpu_t *g) {
  int n = comm->nranks, share = 1;
  for (int r = 0; r < n; r++) {
    int same = 0;
    for (int q = 0; q < n; q++)
      same += comm->peers[q].host_hash == comm->peers[r].host_hash &&
              strcmp(comm->peers[q].gpu_bus_id, comm->peers[r].gpu_bus_id) == 0;
    if (same > share) share = same;
  }
  int sms = 0;
  CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->dev), comm);
  g->gpu_share = share;
  g->share_local = 0;
  for (int q = 0; q < n; q++)
    g->share_local += zcc_peer_same_process(&comm->peers[q], &comm->peers[comm->rank]) &&
                      comm->peers[q].device == g->dev;
  g->block_cap = sms / share > 0 ? sms / share : 1;
  /* Each of this process's ranks on this GPU needs a hardware queue of its
     own: streams beyond CUDA_DEVICE_MAX_CONNECTIONS share one, where a
     rank's kernel can wait behind another rank's kernel that waits for it
     (measured: 9 ranks in one process on an H100, an all-to-all of two
     launches each hung). */
  const char *mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  long queues = mc && *mc ? strtol(mc, NULL, 10) : 8;
  if (queues < 1) queues = 1;
  if (queues > 32) queues = 32;
  if (g->share_local > queues)
    return zcc_error(zccInvalidUsage,
                     "comm %s: %d ranks of this process share GPU %d, more than the %ld "
                     "hardware queues CUDA gives its streams (CUDA_DEVICE_MAX_CONNECTIONS%s): one "
                     "rank's kernels could queue behind another's that wait for them; set "
                     "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts in this process, or run "
                     "at most %ld ranks of one process on one GPU", comm->name, g->share_local,
                     g->dev, queues, mc && *mc ? "" : " unset: 8", queues);
  /* All-to-all over the per-peer connectors: rounds of a send and a receive
     block each, as many as one launch takes and the grid cap leaves room
     for (check_layout: the smallest of any rank). */
  int round = g->block_cap / 2;
  if (round > ZCC_DEV_P2P_MAX_OPS / 2) round = ZCC_DEV_P2P_MAX_OPS / 2;
  int64_t most = zcc_param_gpu_p2p_rounds();
  if (most < 0 || most > ZCC_DEV_P2P_MAX_OPS / 2)
    return zcc_error(zccInvalidArgument, "ZCC_GPU_P2P_ROUNDS=%lld: expected 0 (as the GPU's "
                     "blocks allow) or 1 to %d", (long long)most, ZCC_DEV_P2P_MAX_OPS / 2);
  if (most && round > most) round = (int)most;
  g->a2a_round = round > 0 ? round : 1;
  int64_t want = zcc_param_gpu_channels(), bytes = zcc_param_gpu_conn_bytes(),
          slots = zcc_param_gpu_conn_slots();
  if (want < 1 || want > ZCC_DEV_MAX_CHANNELS)
    return zcc_error(zccInvalidArgument, "ZCC_GPU_CHANNELS=%lld: expected 1 to %d",
                     (long long)want, ZCC_DEV_MAX_CHANNELS);
  if (slots < 2 || slots > 64)
    return zcc_error(zccInvalidArgument, "ZCC_GPU_CONN_SLOTS=%lld: expected 2 to 64",
                     (long long)slots);
  if (bytes < slots * 4096 || bytes > ((int64_t)1 << 30))
    return zcc_error(zccInvalidArgument,
                     "ZCC_GPU_CONN_BYTES=%lld: expected 4 KiB per slot (%lld slots) to 1 GiB",
                     (long long)bytes, (long long)slots);
  /* The tree kernel runs two blocks per channel. */
  int nch = (int)want, fit = g->block_cap / 2 > 0 ? g->block_cap / 2 : 1;
  if (nch > fit) nch = fit;
  g->conns = calloc(1, sizeof(*g->conns));
  if (!g->conns) return zcc_error(zccSystemError, "init: out of memory");
  g->conns->nchannels = nch;
  g->conns->nranks = n;
  g->conns->rank = comm->rank;
  g->conns->nslots = (int)slots;
  g->conns->slot_bytes = (size_t)bytes / (size_t)slots / 16 * 16;
  /* Every channel's ring, into the table conns_bind completes (checked
     here, before anything is allocated), and a hash of them all that every
     rank must share (check_layout). */
  uint64_t h = ZCC_FNV_OFFSET;
  const char *source = "";
  uint64_t hosts[ZCC_DEV_MAX_CONN_RANKS];
  for (int r = 0; r < n; r++) hosts[r] = comm->peers[r].host_hash;
  for (int c = 0; c < nch; c++) {
    int *order = g->conns->ch[c].ring_rank;
    ZCC_CHECK(zcc_planner_channel_ring(comm->planner, n, c, order, &source));
    /* No plan (ranks share GPUs) on several hosts: each host's ranks
       together, so that the ring crosses each host boundary once. */
    if (comm->nnodes > 1 && strcmp(source, "rank order") == 0) {
      if (zcc_planner_host_ring(n, hosts, order) < 0)
        return zcc_error(zccInternalError, "init: cannot plan the GPU ring over the hosts");
      source = "the hosts' grouping";
    }
    h = zcc_fnv1a(h, order, sizeof(int) * (size_t)n);
  }
  g->rings_hash = h;
  if (zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) {
    char buf[256];
    size_t len = 0;
    for (int i = 0; i < n && len + 16 < sizeof(buf); i++)
      len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%d", i ? " " : "",
                              g->conns->ch[0].ring_rank[i]);
    ZCC_INFO(TUNING, "comm %s rank %d: connectors: %d channel(s), rings from %s; channel 0: "
             "%s (its tree a chain along it)", comm->name, comm->rank, nch, source, buf);
    if (comm->hier_local)
      ZCC_INFO(TUNING, "comm %s rank %d: hier rings: this host's %d ranks (local index %d), "
               "the rail of local index %d over %d hosts (host index %d)", comm->name,
               comm->rank, comm->hier_m, comm->hier_li, comm->hier_li, comm->hier_h,
               comm->hier_hi);
  }
  return zccSuccess;
}

/* Window bytes of the connector part (its flags and FIFOs). */
static size_t conns_bytes(const zcc_gpu_t *g) {
  return conn_flag_bytes(g->conns->nchannels) +
         (size_t)g->conns->nchannels * ZCC_DEV_RECV_CONNS * conn_fifo_bytes(g);
}

/* The per-peer connectors after the channels': flag lines, then one FIFO per source rank. */
static size_t off_peers(const zcc_gpu_t *g) { return off_conns(g) + conns_bytes(g); }
static size_t peers_bytes(const zcc_gpu_t *g) {
  return ALIGN_UP(ZCC_DEV_PEER_FLAG_BYTES(g->nranks), 4096) + (size_t)g->nranks * conn_fifo_bytes(g);
}
/* Rank r's flag line for peer q (ZCC_DEV_PEER_*), and its FIFO fed by rank q. */
static uint32_t *peer_line(const zcc_gpu_t *g, int r, int q, int i) {
  return (uint32_t *)(g->peer_win[r] + off_peers(g) +
                      (size_t)ZCC_DEV_PEER_LINE(q, i) * ZCC_DEV_CONN_LINE * 4);
}
static char *peer_fifo(const zcc_gpu_t *g, int r, int q) {
  return g->peer_win[r] + off_peers(g) + ALIGN_UP(ZCC_DEV_PEER_FLAG_BYTES(g->nranks), 4096) +
         (size_t)q * conn_fifo_bytes(g);
}

/* Rank r's flag line L of channel c, and its receive FIFO i, as this GPU addresses them. */
static uint32_t *conn_line(const zcc_gpu_t *g, int r, int c, int line) {
  return (uint32_t *)(g->peer_win[r] + off_conns(g) + (size_t)c * ZCC_DEV_CHAN_FLAG_BYTES +
                      (size_t)line * ZCC_DEV_CONN_LINE * 4);
}
static char *conn_fifo(const zcc_gpu_t *g, int r, int c, int i) {
  return g->peer_win[r] + off_conns(g) + conn_flag_bytes(g->conns->nchannels) +
         ((size_t)c * ZCC_DEV_RECV_CONNS + (size_t)i) * conn_fifo_bytes(g);
}

/* A connector through a proxy (a conn_only transport): its FIFOs and words
   are the transport's; its step stays in the own window. */
static zccResult_t conn_proxy(struct zccComm *comm, const zcc_gpu_t *g, int peer, uint32_t key,
                              int is_send, uint32_t *step, zcc_dev_conn_t *out) {
  zcc_conn_t *c = comm->conns[peer];
  ZCC_CHECK(c->ops->gpu->conn_bind(c, key, is_send, g->conns->nslots, g->conns->slot_bytes, out));
  out->step = step;
  return zccSuccess;
}

/* recv[i] of me on channel c, fed by rank `from`'s send[j] (role: the key's). */
static zccResult_t conn_pair(struct zccComm *comm, const zcc_gpu_t *g, int c, int i, int from,
                             int j, int role, zcc_dev_conn_t *recv) {
  int me = g->rank;
  uint32_t *step = conn_line(g, me, c, ZCC_DEV_CHAN_RECV_STEP(i));
  if (zcc_conn_proxied(comm->conns[from]))
    return conn_proxy(comm, g, from, ZCC_CONN_KEY(c, role), 0, step, recv);
  recv->fifo = conn_fifo(g, me, c, i);
  recv->ready = conn_line(g, me, c, ZCC_DEV_CHAN_RECV_READY(i));
  recv->step = step;
  recv->freed = conn_line(g, from, c, ZCC_DEV_CHAN_SEND_FREED(j));
  return zccSuccess;
}
/* send[j] of me on channel c, into rank `to`'s recv[i]. */
static zccResult_t conn_send(struct zccComm *comm, const zcc_gpu_t *g, int c, int j, int to,
                             int i, int role, zcc_dev_conn_t *send) {
  int me = g->rank;
  uint32_t *step = conn_line(g, me, c, ZCC_DEV_CHAN_SEND_STEP(j));
  if (zcc_conn_proxied(comm->conns[to]))
    return conn_proxy(comm, g, to, ZCC_CONN_KEY(c, role), 1, step, send);
  send->fifo = conn_fifo(g, to, c, i);
  send->ready = conn_line(g, to, c, ZCC_DEV_CHAN_RECV_READY(i));
  send->freed = conn_line(g, me, c, ZCC_DEV_CHAN_SEND_FREED(j));
  send->step = step;
  return zccSuccess;
}

/*
 * A channel's ring of the hierarchical allreduce (ZCC_DEV_RING_LOCAL or
 * _RAIL): `k` ranks (core/init.c: comm_hier), this one at `pos`.
 */
static zccResult_t conns_bind_sub(struct zccComm *comm, zcc_gpu_t *g, int c, int ring,
                                  const int *ranks, int k, int pos) {
  zcc_dev_channel_t *ch = &g->conns->ch[c];
  int local = ring == ZCC_DEV_RING_LOCAL;
  int ri = local ? ZCC_DEV_RECV_LOCAL : ZCC_DEV_RECV_RAIL;
  int si = local ? ZCC_DEV_SEND_LOCAL : ZCC_DEV_SEND_RAIL;
  int key = local ? ZCC_CONN_KEY_LOCAL : ZCC_CONN_KEY_RAIL;
  ch->sub_n[ring - 1] = k;
  ch->sub_pos[ring - 1] = pos;
  int prev = ranks[(pos + k - 1) % k], next = ranks[(pos + 1) % k];
  ZCC_CHECK(conn_pair(comm, g, c, ri, prev, si, key, &ch->recv[ri]));
  return conn_send(comm, g, c, si, next, ri, key, &ch->send[si]);
}

/*
 * The connectors of every channel, once the windows are mapped: the
 * channel's ring (conns_plan took it from zcc_planner_channel_ring:
 * ZCC_RINGS, the planner's rings, or rank order), and a chain along it as the tree (rooted at the
 * ring's first rank on even channels, at its last on odd ones, so the two
 * halves of the channels put their roots at opposite ends), and where the
 * ranks span hosts with the same number on each, the hierarchical
 * allreduce's host and rail rings (conns_bind_sub). Copied to device
 * memory for the kernels.
 */
static zccResult_t conns_bind(struct zccComm *comm, zcc_gpu_t *g) {
  zcc_dev_conns_t *t = g->conns;
  int n = comm->nranks, me = comm->rank;
  for (int c = 0; c < t->nchannels; c++) {
    zcc_dev_channel_t *ch = &t->ch[c];
    ch->flags = conn_line(g, me, c, 0); /* ch->ring_rank: conns_plan's */
    int pos = 0;
    for (int q = 0; q < n; q++)
      if (ch->ring_rank[q] == me) pos = q;
    ch->ring_pos = pos;
    if (n < 2) continue;
    int prev = ch->ring_rank[(pos + n - 1) % n], next = ch->ring_rank[(pos + 1) % n];
    ZCC_CHECK(conn_pair(comm, g, c, ZCC_DEV_RECV_RING, prev, ZCC_DEV_SEND_RING, ZCC_CONN_KEY_RING,
                        &ch->recv[ZCC_DEV_RECV_RING]));
    ZCC_CHECK(conn_send(comm, g, c, ZCC_DEV_SEND_RING, next, ZCC_DEV_RECV_RING, ZCC_CONN_KEY_RING,
                        &ch->send[ZCC_DEV_SEND_RING]));
    int up = c % 2 == 0 ? -1 : 1; /* the parent's offset in ring order */
    int ppos = pos + up, cpos = pos - up;
    int parent = ppos >= 0 && ppos < n ? ch->ring_rank[ppos] : -1;
    int child = cpos >= 0 && cpos < n ? ch->ring_rank[cpos] : -1;
    ch->tree_parent = parent;
    ch->tree_nchildren = child >= 0 ? 1 : 0;
    if (ch->tree_parent >= 0) {
      /* I am the parent's child 0. */
      ZCC_CHECK(conn_send(comm, g, c, ZCC_DEV_SEND_UP, parent, ZCC_DEV_RECV_UP + 0,
                          ZCC_CONN_KEY_UP, &ch->send[ZCC_DEV_SEND_UP]));
      ZCC_CHECK(conn_pair(comm, g, c, ZCC_DEV_RECV_DOWN, parent, ZCC_DEV_SEND_DOWN + 0,
                          ZCC_CONN_KEY_DOWN, &ch->recv[ZCC_DEV_RECV_DOWN]));
    }
    if (ch->tree_nchildren) {
      ZCC_CHECK(conn_pair(comm, g, c, ZCC_DEV_RECV_UP + 0, child, ZCC_DEV_SEND_UP,
                          ZCC_CONN_KEY_UP, &ch->recv[ZCC_DEV_RECV_UP]));
      ZCC_CHECK(conn_send(comm, g, c, ZCC_DEV_SEND_DOWN + 0, child, ZCC_DEV_RECV_DOWN,
                          ZCC_CONN_KEY_DOWN, &ch->send[ZCC_DEV_SEND_DOWN]));
    }
    if (comm->hier_local) {
      ZCC_CHECK(conns_bind_sub(comm, g, c, ZCC_DEV_RING_LOCAL, comm->hier_local, comm->hier_m,
                               comm->hier_li));
      ZCC_CHECK(conns_bind_sub(comm, g, c, ZCC_DEV_RING_RAIL, comm->hier_rail, comm->hier_h,
                               comm->hier_hi));
    }
  }
  /* the groups' ranks, host by host (comm_hier took them from ring_order) */
  if (comm->hier_local && comm->hier_m * comm->hier_h == n) {
    t->hier_m = comm->hier_m;
    t->hier_h = comm->hier_h;
    t->hier_l = comm->hier_li;
    for (int i = 0; i < n; i++) t->hier_rank[i] = comm->ring_order[i];
  }
  /* Per peer q: my sends store into q's FIFO from me; q's into mine from q. */
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    zcc_dev_conn_t *sd = &t->peer_send[q], *rv = &t->peer_recv[q];
    if (zcc_conn_proxied(comm->conns[q])) {
      ZCC_CHECK(conn_proxy(comm, g, q, ZCC_CONN_KEY_PEER, 1,
                           peer_line(g, me, q, ZCC_DEV_PEER_SEND_STEP), sd));
      ZCC_CHECK(conn_proxy(comm, g, q, ZCC_CONN_KEY_PEER, 0,
                           peer_line(g, me, q, ZCC_DEV_PEER_RECV_STEP), rv));
      continue;
    }
    sd->fifo = peer_fifo(g, q, me);
    sd->ready = peer_line(g, q, me, ZCC_DEV_PEER_RECV_READY);
    sd->freed = peer_line(g, me, q, ZCC_DEV_PEER_SEND_FREED);
    sd->step = peer_line(g, me, q, ZCC_DEV_PEER_SEND_STEP);
    rv->fifo = peer_fifo(g, me, q);
    rv->ready = peer_line(g, me, q, ZCC_DEV_PEER_RECV_READY);
    rv->freed = peer_line(g, q, me, ZCC_DEV_PEER_SEND_FREED);
    rv->step = peer_line(g, me, q, ZCC_DEV_PEER_RECV_STEP);
  }
  void *d = NULL;
  CUDA_TRY(cudaMalloc(&d, sizeof(*t)), comm);
  g->conns_dev = d;
  CUDA_TRY(cudaMemcpy(d, t, sizeof(*t), cudaMemcpyHostToDevice), comm);
  return zccSuccess;
}

zccResult_t zcc_gpu_comm_setup(struct zccComm *comm) {
  int n = comm->nranks, me = comm->rank;
  if (n > ZCC_DEV_MAX_CONN_RANKS)
    return zcc_error(zccInvalidUsage,
                     "comm %s: a GPU communicator has at most %d ranks in this version "
                     "(asked for %d)", comm->name, ZCC_DEV_MAX_CONN_RANKS, n);
  int64_t stamps = zcc_param_gpu_stamps();
  if (stamps < 0 || stamps > 2)
    return zcc_error(zccInvalidArgument, "ZCC_GPU_STAMPS=%lld: expected 0, 1 or 2",
                     (long long)stamps);
  int64_t quiet = zcc_param_gpu_stamp_quiet_us();
  if (quiet < -1 || quiet > 50)
    return zcc_error(zccInvalidArgument,
                     "ZCC_GPU_STAMP_QUIET_US=%lld: expected -1 (no exit stamps) or 0 to 50 "
                     "(microseconds: below the time a wait takes to announce itself)",
                     (long long)quiet);
  zcc_gpu_t *g = calloc(1, sizeof(*g));
  if (!g) return zcc_error(zccSystemError, "init: out of memory");
  comm->gpu = g;
  g->dev = comm->device;
  g->nranks = n;
  g->rank = me;
  CUDA_TRY(cudaSetDevice(g->dev), comm);
  /* Before any kernel can spin on this GPU (device.h says why). */
  int pe = zcc_dev_preload();
  if (pe != 0) {
    /* Not fatal: kernels then load at first launch, as CUDA does by default. */
    ZCC_WARN("comm %s rank %d: preloading zcc's kernels failed (%s); they load at first use",
             comm->name, me, zcc_dev_error_string(pe));
    (void)cudaGetLastError();
  }
  int64_t sb = zcc_param_gpu_buffsize();
  if (sb < (1 << 20) || sb > ((int64_t)1 << 34))
    return zcc_error(zccInvalidArgument, "ZCC_GPU_BUFFSIZE=%lld: expected 1 MiB to 16 GiB",
                     (long long)sb);
  g->staging_bytes = ALIGN_UP((size_t)sb, 4096);
  ZCC_CHECK(conns_plan(comm, g));
  int64_t pdd = zcc_param_p2p_direct_disable();
  if (pdd != 0 && pdd != 1)
    return zcc_error(zccInvalidArgument, "ZCC_P2P_DIRECT_DISABLE=%lld: expected 0 or 1",
                     (long long)pdd);
  g->p2p_conn = (int)pdd;
  /* The transport decides where the window lives (its memory kind). */
  ZCC_CHECK(zcc_transport_pick_gpu(comm, &g->tp));
  /* Peers reached only through connectors (every rank sees the same
     pairs): the connector kernels alone run, send/receive over connectors,
     on no more channels than the proxy's transport takes. */
  int proxied = 0;
  for (int r = 0; r < n; r++)
    if (zcc_conn_proxied(comm->conns[r])) {
      const zcc_transport_gpu_t *f = comm->conns[r]->ops->gpu;
      int most = f->max_channels ? f->max_channels() : ZCC_DEV_MAX_CHANNELS;
      if (g->conns->nchannels > most) g->conns->nchannels = most;
      g->conn_only = 1;
      g->p2p_conn = 1;
      proxied = 1;
    }
  /* More ranks than the all-pairs kernels take: the connector kernels alone
     (the window's all-pairs areas stay unused). */
  if (n > ZCC_DEV_MAX_RANKS) {
    g->conn_only = 1;
    g->p2p_conn = 1;
  }
  ZCC_CHECK(check_layout(comm, g));
  if (n > ZCC_DEV_MAX_RANKS)
    ZCC_INFO(INIT, "comm %s rank %d: %d ranks, more than the all-pairs kernels take (%d): the "
             "connector kernels alone run (ring, tree%s; send/receive and all-to-all over the "
             "per-peer connectors, %d round(s) a launch)", comm->name, me, n, ZCC_DEV_MAX_RANKS,
             comm->nnodes > 1 ? ", hier" : "", g->a2a_round);
  g->win_bytes = off_peers(g) + peers_bytes(g);
  char *win = NULL;
  ZCC_CHECK(g->tp->gpu->win_alloc(comm, g->win_bytes, &win));
  g->win = win;
  g->win_host = g->tp->gpu->host_memory;
  CUDA_TRY(cudaMemset(g->win, 0, off_p2p() + ZCC_DEV_P2P_FLAG_BYTES), comm);
  CUDA_TRY(cudaMemset(g->win + off_conns(g), 0, conn_flag_bytes(g->conns->nchannels)), comm);
  CUDA_TRY(cudaMemset(g->win + off_peers(g), 0, ZCC_DEV_PEER_FLAG_BYTES(n)), comm);
  CUDA_TRY(cudaDeviceSynchronize(), comm);
  void *ab = NULL;
  CUDA_TRY(cudaHostAlloc(&ab, ZCC_DEV_ABORT_BYTES, cudaHostAllocMapped | cudaHostAllocPortable),
           comm);
  memset(ab, 0, ZCC_DEV_ABORT_BYTES);
  g->abort_host = ab;
  void *abd = NULL;
  CUDA_TRY(cudaHostGetDevicePointer(&abd, ab, 0), comm);
  g->abort_dev = abd;

  ZCC_CHECK(map_peers(comm, g));
  /* Choices follow the link: peers' windows in pinned host memory are reached over PCIe;
     peers through a proxy over the network, by the connector kernels alone. */
  if (g->win_host) comm->select->ctx.link_class = ZCC_PATH_SYS;
  if (proxied) {
    comm->select->ctx.link_class = ZCC_PATH_NET;
    comm->select->ctx.conn_only = 1;
  }
  comm->select->ctx.gpu_share = g->gpu_share;
  for (int r = 0; r < n; r++) {
    if (!g->peer_win[r]) continue; /* reached through connectors only */
    g->flags[r] = (uint32_t *)g->peer_win[r];
    g->ll[r] = g->peer_win[r] + off_ll();
    g->p2p[r] = g->peer_win[r] + off_p2p();
    g->staging[r] = g->peer_win[r] + off_staging();
    g->ce[r] = (uint32_t *)(g->peer_win[r] + off_ce());
    g->push[r] = (uint32_t *)(g->peer_win[r] + off_push());
  }
  ZCC_CHECK(conns_bind(comm, g));
  ZCC_CHECK(zcc_transport_start_gpu(comm));
  cudaStream_t side;
  CUDA_TRY(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), comm);
  g->side = side;
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), comm);
  g->ev_fork = ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), comm);
  g->ev_join = ev;
  for (int i = 0; i < ZCC_GPU_CE_SLOTS; i++) {
    CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), comm);
    g->ev_copy[i] = ev;
  }
  g->quiet_ns = comm->trace && comm->trace->file ? 0
                : quiet < 0                         ? ZCC_DEV_NO_EXITS
                                                    : (uint32_t)quiet * 1000u;
  /* A waiting block beats every 100 us or so; time slices of a GPU shared
     by processes stretch that to milliseconds. A block that left without
     an exit stamp reads in flight this long after its last beat: well
     under the timeout. */
  g->beat_fresh_ns = 200000000ll;
  if (comm->timeout_ms > 0 && comm->timeout_ms * 1000000ll / 4 < g->beat_fresh_ns)
    g->beat_fresh_ns = comm->timeout_ms * 1000000ll / 4;
  if (stamps == 1) ZCC_CHECK(stamps_setup(comm, g));
  if (stamps == 2) ZCC_CHECK(stamps_setup_probe(comm, g));
  /* Nobody writes into a peer's window before every peer has mapped all. */
  if (n > 1) ZCC_CHECK(zcc_bootstrap_barrier(comm->bootstrap, comm->timeout_ms));
  /* Mismatched collectives among the ranks of this host, and with those on
     other hosts that the network proxy reaches (sigboard.h). The proxy runs
     already: it reads the board once it is published. */
  if (n > 1) {
    int64_t gate = zcc_param_gpu_sig_gate();
    if (gate != 0 && gate != 1)
      return zcc_error(zccInvalidArgument, "ZCC_GPU_SIG_GATE=%lld: expected 0 or 1",
                       (long long)gate);
    zcc_sigboard_t *board = NULL;
    ZCC_CHECK(zcc_sigboard_setup(comm, &board));
    /* Kernels that take bytes from another host wait for the proxy's word
       that the collective agrees there (sigboard.h: the gate). */
    uint64_t *gate_word = (uint64_t *)((char *)g->abort_host + ZCC_DEV_ABORT_GATE_OFF);
    if (gate && zcc_sigboard_gate_set(board, gate_word))
      g->sig_gate_dev = (uint64_t *)((char *)g->abort_dev + ZCC_DEV_ABORT_GATE_OFF);
    __atomic_store_n(&comm->sigboard, board, __ATOMIC_RELEASE);
  }

  if (pthread_create(&g->watchdog_thread, NULL, watchdog_main, comm) != 0)
    return zcc_error(zccSystemError, "init: cannot start the GPU watchdog thread");
  g->watchdog_started = 1;
  if (zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) {
    char who[96];
    snprintf(who, sizeof(who), "comm %s rank %d", comm->name, me);
    ZCC_CHECK(zcc_planner_decisions(&comm->select->ctx, zcc_log_tuning_line, who));
  }
  ZCC_INFO(INIT,
           "comm %s rank %d: GPU %d (%s), window %zu MiB, staging %zu MiB, %d channel(s) of "
           "%d x %zu KiB connector slots, %d rank(s) per GPU at most, grids capped at %d "
           "block(s)",
           comm->name, me, g->dev, comm->peers[me].gpu_bus_id, g->win_bytes >> 20,
           g->staging_bytes >> 20, g->conns->nchannels, g->conns->nslots,
           g->conns->slot_bytes >> 10, g->gpu_share, g->block_cap);
  return zccSuccess;
}

/* Release what the transport mapped for a registration (the device idle). */
static void reg_unmap(struct zccComm *comm, zcc_gpu_reg_t *r) {
  const zcc_transport_gpu_t *face = comm->gpu->tp->gpu;
  for (int k = 0; k < comm->nranks; k++)
    if (r->mapped[k]) {
      if (face->reg_unmap && comm->conns[k]) face->reg_unmap(comm->conns[k], r->mapped[k]);
      r->mapped[k] = NULL;
    }
}

void zcc_gpu_comm_free(struct zccComm *comm) {
  zcc_gpu_t *g = comm->gpu;
  if (!g) return;
  if (g->watchdog_started) {
    atomic_store(&g->watchdog_stop, 1);
    pthread_join(g->watchdog_thread, NULL);
  }
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(g->dev);
  if (g->abort_host && (atomic_load(&comm->abort_flag) || atomic_load(&comm->async_error)))
    raise_abort(g);
  /* Every kernel that maps a peer's memory has finished before unmapping. */
  cudaDeviceSynchronize();
  /* The trace's GPU spans of what ran, while the stamps are there. */
  zcc_trace_gpu_flush(comm);
  /* The transport's mappings go while this GPU is current (its free then
     finds them gone): registered buffers first, then the windows. */
  while (g->regs) {
    zcc_gpu_reg_t *r = g->regs;
    g->regs = r->next;
    reg_unmap(comm, r);
    free(r);
  }
  for (int r = 0; comm->conns && r < comm->nranks; r++) {
    zcc_conn_t *c = comm->conns[r];
    if (c && c->ops->gpu && c->ops->gpu->free) c->ops->gpu->free(c);
  }
  if (g->side) cudaStreamDestroy((cudaStream_t)g->side);
  if (g->ev_fork) cudaEventDestroy((cudaEvent_t)g->ev_fork);
  if (g->ev_join) cudaEventDestroy((cudaEvent_t)g->ev_join);
  for (int i = 0; i < ZCC_GPU_CE_SLOTS; i++)
    if (g->ev_copy[i]) cudaEventDestroy((cudaEvent_t)g->ev_copy[i]);
  if (g->tp && g->tp->gpu->win_free) g->tp->gpu->win_free(comm);
  if (g->conns_dev) cudaFree(g->conns_dev);
  free(g->conns);
  if (g->abort_host) cudaFreeHost((void *)g->abort_host);
  if (g->live_host) cudaFreeHost(g->live_host);
  if (g->stamps_probe) cudaFree(g->stamps_probe);
  free(g->times_last);
  (void)cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
  free(g);
  comm->gpu = NULL;
}

/* ---- registration ---- */

typedef struct {
  uint64_t base;
  uint64_t offset; /* of the registered buffer in its allocation */
  uint64_t size;
  int32_t ok;
  int32_t pad;
  _Alignas(8) uint8_t blob[ZCC_REG_BLOB_MAX]; /* the transport's description (reg_export) */
} reg_wire_t;

zccResult_t zcc_gpu_register(struct zccComm *comm, void *buf, size_t size, void **handle) {
  zcc_gpu_t *g = comm->gpu;
  int n = comm->nranks, me = comm->rank;
  /* A transport without reg_map (shm: windows in host memory) maps nothing:
     the registration is kept (and checked), and collectives on it go through
     the windows as on unregistered buffers. */
  const zcc_transport_gpu_t *face = g->tp->gpu;
  int map = face->reg_map != NULL && !g->conn_only; /* connector kernels read no peer buffer */
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(g->dev);
  reg_wire_t *w = calloc((size_t)n, sizeof(*w));
  zcc_gpu_reg_t *reg = calloc(1, sizeof(*reg));
  zccResult_t res = zccSuccess;
  if (!w || !reg) {
    res = zcc_error(zccSystemError, "zccCommRegister: out of memory");
    goto out;
  }
  if (map && (face->reg_blob_bytes > ZCC_REG_BLOB_MAX || !face->reg_export)) {
    res = zcc_error(zccInternalError, "zccCommRegister: transport %s describes registrations "
                    "in %zu bytes (at most %d)", g->tp->name, face->reg_blob_bytes,
                    ZCC_REG_BLOB_MAX);
    goto out;
  }
  /* The allocation holding buf: transports map allocations, not pointers. */
  struct cudaPointerAttributes at;
  char err[200] = "";
  cudaError_t e = cudaPointerGetAttributes(&at, buf);
  if (e != cudaSuccess || at.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    snprintf(err, sizeof(err), "%p is not device memory from cudaMalloc/zccMemAlloc", buf);
  } else if (at.device != g->dev) {
    snprintf(err, sizeof(err), "%p is on GPU %d, the communicator on GPU %d", buf, at.device,
             g->dev);
  }
  char *base = buf;
  size_t range = size;
  if (!err[0] && zcc_cuda_mem_range(buf, (void **)&base, &range) != 0)
    snprintf(err, sizeof(err), "cannot find the allocation holding %p", buf);
  if (!err[0] && (char *)buf + size > base + range)
    snprintf(err, sizeof(err), "%p + %zu runs past the end of its allocation (%zu bytes)", buf,
             size, range);
  if (!err[0] && map && face->reg_export(comm, base, w[me].blob) != zccSuccess)
    snprintf(err, sizeof(err), "%s", zcc_last_error());
  w[me].ok = err[0] == 0;
  w[me].base = (uint64_t)(uintptr_t)base;
  w[me].offset = (uint64_t)((char *)buf - base);
  w[me].size = size;
  /* Every rank learns whether every rank could register: all succeed or none. */
  res = zcc_bootstrap_allgather(comm->bootstrap, w, sizeof(*w), comm->timeout_ms);
  if (res != zccSuccess) goto out;
  for (int r = 0; r < n; r++)
    if (!w[r].ok) {
      res = r == me ? zcc_error(zccInvalidArgument, "zccCommRegister: %s", err)
                    : zcc_error(zccInvalidUsage,
                                "zccCommRegister: rank %d could not register its buffer", r);
      goto out;
    }
  reg->base = buf;
  reg->size = size;
  reg->mapped_by_peers = map;
  reg->peer[me] = buf;
  for (int r = 0; r < n && res == zccSuccess && map; r++) {
    if (r == me) continue;
    char *p = NULL;
    res = face->reg_map(comm->conns[r], w[r].blob, w[r].base, &p, &reg->mapped[r]);
    /* The transport maps the allocation holding the peer's buffer, from its base. */
    if (res == zccSuccess) reg->peer[r] = p + w[r].offset;
  }
  if (res != zccSuccess) {
    reg_unmap(comm, reg);
    goto out;
  }
  reg->index = g->nregs++;
  reg->next = g->regs;
  g->regs = reg;
  ZCC_INFO(COLL, "comm %s rank %d: registered %p (%zu bytes) as window %d%s", comm->name, me,
           buf, size, reg->index,
           map ? "" : " (not mapped into peers: their transport maps no registrations)");
  *handle = reg;
  reg = NULL;
out:
  free(w);
  free(reg);
  if (prev >= 0) cudaSetDevice(prev);
  return res;
}

zccResult_t zcc_gpu_deregister(struct zccComm *comm, void *handle) {
  zcc_gpu_t *g = comm->gpu;
  zcc_gpu_reg_t **pp = &g->regs;
  while (*pp && *pp != handle) pp = &(*pp)->next;
  if (!*pp)
    return zcc_error(zccInvalidArgument,
                     "zccCommDeregister: handle %p was not registered with this communicator",
                     handle);
  zcc_gpu_reg_t *r = *pp;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(g->dev);
  /* Work that reads peers' registered buffers finishes before they go. */
  cudaDeviceSynchronize();
  *pp = r->next;
  reg_unmap(comm, r);
  (void)cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
  free(r);
  return zccSuccess;
}
