/*
 * The plain-C face of zcc's CUDA kernels (src/device/). Host code includes
 * this header only: plain structs, extern "C" functions, and an opaque
 * stream pointer (a cudaStream_t is a struct CUstream_st *; NULL is the
 * legacy default stream). Every function only enqueues work on the stream
 * and returns: no allocation, no host synchronisation, so every call can be
 * captured in a CUDA graph. Each returns 0 or the cudaError_t of the launch
 * (cudaErrorInvalidValue, 1, for a bad argument); zcc_dev_error_string
 * names it.
 *
 * Arithmetic is that of the host reduction loops (reduce.h), bit for bit:
 * integer sums and products wrap; fp16, bf16 and both fp8 formats are
 * reduced in fp32 per element and rounded to nearest-even once per step;
 * max/min of floats give NaN if either operand is NaN; avg reduces as sum
 * and the finish step divides by nranks (integers truncate; narrow floats
 * divide in fp32 and round once). Compiled without fast-math: no FTZ, IEEE
 * division.
 *
 * Alignment: none is required. Buffers that share one offset modulo 16 run
 * with 16-byte loads and stores after a few scalar head elements; others
 * with the widest accesses each pointer allows.
 */
#ifndef ZCC_DEVICE_H_
#define ZCC_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* Ranks one all-pairs kernel handles (each GPU reads all inputs): the
   allreduce, gather and p2p kernels and their areas in the window. */
#define ZCC_DEV_MAX_RANKS 8
/* Ranks the connectors take (their tables below): a GPU communicator of
   more ranks than ZCC_DEV_MAX_RANKS runs the connector kernels alone. */
#define ZCC_DEV_MAX_CONN_RANKS 256
/* Blocks one allreduce launch may use; each owns one line of flags. */
#define ZCC_DEV_MAX_BLOCKS 256
/* Bytes of one rank's flag area: allocate on its GPU, zero once, map to peers. */
#define ZCC_DEV_FLAGS_BYTES (ZCC_DEV_MAX_BLOCKS * 64)

/*
 * Load every zcc kernel into the current device's context now. With CUDA's
 * lazy loading (the default since 12.2) a kernel's first launch loads it,
 * which can wait for the device to go idle: a launch on a GPU whose earlier
 * zcc kernel spins until a peer GPU arrives, when the same host thread has
 * yet to launch the peer's part, would then never return. Called once per
 * GPU communicator, before any collective. 0 or the cudaError_t.
 */
int zcc_dev_preload(void);

/*
 * Every zcc kernel is declared in namespace zcc_kernels (its name in a
 * profiler: "zcc_kernels::(anonymous namespace)::oneshot_ll_kernel<...>"),
 * so nsys, the torch profiler and zcc_trace heatmap --torch tell zcc's
 * kernels from the application's.
 */

/* "no error", or the CUDA runtime's name for code. */
const char *zcc_dev_error_string(int code);

/*
 * Op stamps: every kernel that waits for peers writes, into pinned host
 * memory the host maps (the watchdog and the flight recorder read it), when
 * each of its blocks entered and left, and when the GPU ran the operation
 * it belongs to. Stores only, no loads, fences or atomics (each would sit
 * on the launch's critical path). Times are the GPU's %globaltimer (ns):
 * block b stores entry = now + 1 as it enters, exit = max(now, entry) as it
 * leaves. Block 0 also stamps the op: its start at the op's first launch,
 * its end and the launch's token at each launch's end.
 *
 * Exits: by default (quiet_ns ZCC_DEV_NO_EXITS, tracing off) no block
 * stamps its exit: the exit's barrier and timer read alone cost an 8 B
 * allreduce 0.05 us (docs/perf/h200x1.md, 2026-12-06), so a launch leaves
 * entry_ns > exit_ns. What tells a block in flight then is its waits: a
 * wait that spins long stores the time into the block's slot beside the
 * abort word (ZCC_DEV_ABORT_WAITS_OFF), once, and then its heartbeat
 * (ZCC_DEV_ABORT_BEATS_OFF) every ZD_ANNOUNCE_SPINS spins while it waits.
 * Block b of some launch waits in flight exactly while
 * waits[b] >= block[b].entry_ns > block[b].exit_ns and its heartbeat is
 * recent, graph replays included. Quiet exits (quiet_ns 1 to 50 us): a
 * block that ran for longer stamps its exit; quiet_ns 0: every exit is
 * stamped (then entry > exit alone means in flight; the trace takes every
 * op's GPU end). live == NULL: no stamps (the kernels' own tests).
 */
#define ZCC_DEV_NO_EXITS 0xffffffffu
typedef struct zcc_dev_live {
  uint64_t seq;     /* the op of the launch whose block 0 entered last */
  uint64_t pad[7];
  struct {
    uint64_t entry_ns, exit_ns;
  } block[ZCC_DEV_MAX_BLOCKS]; /* block b's latest entry and exit, of any launch */
} zcc_dev_live_t;
typedef struct zcc_dev_op_time {
  uint64_t seq;       /* the op these times are of */
  uint64_t start_ns;  /* its first launch's entry (block 0) */
  uint64_t end_ns;    /* the end of its latest launch (block 0; 0: none yet) */
  uint64_t end_token; /* that launch's token */
} zcc_dev_op_time_t;
typedef struct zcc_dev_stamp {
  zcc_dev_live_t *live;     /* host-mapped; NULL: no stamps */
  zcc_dev_op_time_t *op;    /* host-mapped: the op's times */
  uint64_t token;           /* this launch's, nonzero (graph replays repeat it) */
  uint64_t seq;             /* the op's number */
  int first;                /* the op's first launch */
  uint32_t quiet_ns;        /* a block shorter than this stamps no exit (0: every block;
                               ZCC_DEV_NO_EXITS: none) */
} zcc_dev_stamp_t;

/* The abort word's allocation (host-mapped, zeroed, ZCC_DEV_ABORT_BYTES):
   the abort word at 0, the network proxy's signature gate (8 bytes) at
   ZCC_DEV_ABORT_GATE_OFF, from ZCC_DEV_ABORT_WAITS_OFF one uint64 a
   block: the %globaltimer + 1 at which a wait of block b had spun long
   (above), and from ZCC_DEV_ABORT_BEATS_OFF one a block: the time at
   which a long wait of block b last spun another ZD_ANNOUNCE_SPINS (its
   heartbeat, every 100 us or so while it waits), or, with
   ZCC_DEV_BEAT_GAVE_UP set, the time at which a wait of block b saw the
   abort word and gave up. The host clears nothing there. */
#define ZCC_DEV_BEAT_GAVE_UP (1ull << 63)
#define ZCC_DEV_ABORT_GATE_OFF 32
#define ZCC_DEV_ABORT_WAITS_OFF 64
#define ZCC_DEV_ABORT_BEATS_OFF (ZCC_DEV_ABORT_WAITS_OFF + 8 * ZCC_DEV_MAX_BLOCKS)
#define ZCC_DEV_ABORT_BYTES (ZCC_DEV_ABORT_BEATS_OFF + 8 * ZCC_DEV_MAX_BLOCKS)

/*
 * dst[i] = a[i] op b[i] for i < count on stream. dst may alias a or b
 * exactly (not partially). zccAvg reduces as zccSum.
 */
int zcc_dev_reduce(void *dst, const void *a, const void *b, size_t count,
                   zccDataType_t type, zccRedOp_t op, struct CUstream_st *stream);

/*
 * dst[i] = src[i] * scalar (pre-multiplied sums), as zcc_reduce_scale on the
 * host; the scalar is *scalar_ptr (device-readable, read by the kernel) or,
 * when scalar_ptr is NULL, the element in scalar_bits. dst may alias src.
 */
int zcc_dev_scale(void *dst, const void *src, size_t count, zccDataType_t type,
                  const void *scalar_ptr, uint64_t scalar_bits, struct CUstream_st *stream);

/* dst[i] = src[i] / nranks (see above); dst may alias src exactly. */
int zcc_dev_finish_avg(void *dst, const void *src, size_t count,
                       zccDataType_t type, int nranks,
                       struct CUstream_st *stream);

/*
 * One rank's view of an all-pairs allreduce over nranks GPUs that can
 * address each other's memory (peer access in a process, or IPC / cuMem
 * mappings across processes). Pointers are as *this* GPU addresses them.
 *
 * Every rank launches the same algorithm with the same count, type, op,
 * nranks and max_blocks, in the same order on every flag area: the kernels
 * keep a per-block sequence number in the flag areas themselves, so the
 * same buffers serve every launch, also in CUDA graph replays, with no host
 * help. A launch returns on each GPU once every peer has finished reading
 * that GPU's input and writing its output, so the caller's stream may reuse
 * both right after. Inputs are read, never written; out-of-place and
 * in-place (outputs[r] == inputs[r]) both work.
 *
 * zccAvg is finished inside the kernel (sum, then the avg step).
 */
typedef struct zcc_dev_allreduce {
  const void *inputs[ZCC_DEV_MAX_RANKS]; /* rank r's send buffer */
  void *outputs[ZCC_DEV_MAX_RANKS];      /* rank r's recv buffer (one-shot: only [rank] is used) */
  uint32_t *flags[ZCC_DEV_MAX_RANKS];    /* rank r's flag area, ZCC_DEV_FLAGS_BYTES, zeroed before first use */
  void *ll[ZCC_DEV_MAX_RANKS];           /* rank r's LL receive area, ZCC_DEV_LL_BYTES, zeroed before first use (LL only) */
  const volatile uint32_t *abort_flag;   /* NULL, or nonzero: waiting kernels give up (results
                                            undefined); ZCC_DEV_ABORT_BYTES, below */
  zcc_dev_stamp_t stamp;               /* op stamps (live NULL: none) */
  size_t count;
  zccDataType_t type;
  zccRedOp_t op;
  int nranks; /* 1..ZCC_DEV_MAX_RANKS */
  int rank;
  int max_blocks; /* 0: the default (ZCC_DEV_DEFAULT_BLOCKS); at most ZCC_DEV_MAX_BLOCKS and the SM count */
  int passive;    /* one-shot only: barriers, but no data pass (Reduce's non-root ranks); outputs unused;
                     1 when the active ranks run out of place, 2 when in place (their barriers differ) */
} zcc_dev_allreduce_t;

#define ZCC_DEV_DEFAULT_BLOCKS 64

/*
 * One-shot: every GPU reads all nranks inputs and reduces them in rank order
 * into its own output, so all outputs are bitwise identical. Moves
 * (nranks-1) x bytes into each GPU; for small and, at nranks = 2, all sizes.
 * The active ranks of a launch all run in place or all out of place.
 */
int zcc_dev_allreduce_oneshot(const zcc_dev_allreduce_t *args,
                              struct CUstream_st *stream);

/*
 * Two-shot: rank r reduces slice r of all inputs (in rank order) and writes
 * it into every rank's output. Moves 2 (nranks-1)/nranks x bytes per GPU.
 */
int zcc_dev_allreduce_twoshot(const zcc_dev_allreduce_t *args,
                              struct CUstream_st *stream);

/*
 * One-shot LL ("low latency", for small messages): every rank pushes its
 * input into every peer's LL area as 16-byte lines of 8 data bytes and two
 * copies of the launch's sequence number, and reduces what arrives, in rank
 * order, once each line's flags match: one one-way NVLink latency and no
 * barrier. Lines alternate between two halves of the area by launch parity,
 * and a rank only reaches launch L+2 after its peers have entered L+1, so
 * the half being written is never still being read. Every LL launch uses
 * the same grid, so all blocks' counters agree. count * element size must
 * be at most ZCC_DEV_LL_MAX_BYTES; in place works; ll[] and flags[] are
 * used, inputs[] of peers and outputs[] of peers are not.
 */
#define ZCC_DEV_LL_MAX_BYTES (64 * 1024)
#define ZCC_DEV_LL_BYTES (2 * ZCC_DEV_MAX_RANKS * 2 * ZCC_DEV_LL_MAX_BYTES)
int zcc_dev_allreduce_oneshot_ll(const zcc_dev_allreduce_t *args,
                                 struct CUstream_st *stream);

/*
 * Push one-shot, for unregistered buffers of any size: one launch, no
 * staging copy on the stream. The grid is B lanes of two blocks (B the same
 * on every rank); lane j takes chunks j, j + B, ... of the message. Its
 * pusher block stores each chunk straight from the own input into a slot of
 * every peer's staging buffer (NVLink stores) and signals that peer; its
 * consumer block reduces the chunk in rank order from the own input and the
 * peers' chunks that arrived in the own staging (local reads only) into the
 * own output, and tells each peer that its slot is free again. Pushing and
 * reducing overlap; ZCC_DEV_PUSH_SLOTS slots per (source, lane) keep pushes
 * ahead. Every block must be resident at once (the grid is at most one block
 * per multiprocessor). Counters per lane live in the push-flag areas and
 * advance in the kernel (graph replays work); every rank derives the same
 * grid, chunks and slot layout from count, type, nranks, max_blocks and
 * staging_bytes, which must be equal on every rank. No barrier: a launch
 * begins writing into peers' staging at once, so whatever ran before on the
 * communicator must have finished with the staging buffers on every rank
 * (the gather, one-shot and two-shot kernels do by their end barriers; zcc
 * ends every other staged sequence with zcc_dev_barrier). Returns on each
 * rank once it has its result and every push into its staging was
 * consumed. In place works (outputs == inputs exactly); all outputs are
 * bitwise identical.
 *
 * Flag area of a rank (push[r], ZCC_DEV_PUSH_FLAGS_BYTES, zeroed before
 * first use): one line of ZCC_DEV_PUSH_LINE words per lane: [s] chunks
 * source s pushed into this rank's staging, [8 + p] of this rank's pushes
 * that peer p consumed ([8 + rank]: the own consumer's count, for a pusher
 * that copies a host input into its own slot), [16], [17] the lane's pusher
 * and consumer counters, [18] the pusher's progress (in place, and copying,
 * the consumer waits for it).
 */
#define ZCC_DEV_PUSH_SLOTS 4
#define ZCC_DEV_PUSH_LINE 32
#define ZCC_DEV_PUSH_FLAGS_BYTES (ZCC_DEV_MAX_BLOCKS * ZCC_DEV_PUSH_LINE * 4)
typedef struct zcc_dev_push {
  const void *input;                  /* own send buffer */
  void *output;                       /* own receive buffer */
  void *staging[ZCC_DEV_MAX_RANKS];   /* rank r's staging buffer as this GPU addresses it */
  uint32_t *push[ZCC_DEV_MAX_RANKS];  /* rank r's push-flag area as this GPU addresses it */
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;               /* op stamps (live NULL: none) */
  size_t staging_bytes;               /* of every rank's staging buffer (equal) */
  size_t count;
  zccDataType_t type;
  zccRedOp_t op;
  int nranks;
  int rank;
  int max_blocks; /* 0: 2 x ZCC_DEV_DEFAULT_BLOCKS; 2 to ZCC_DEV_MAX_BLOCKS, capped at the SM count */
  int lane_chunks; /* 0: lanes from the message (8 KiB each at least); n > 1: also at least n
                      chunks per lane (staging in host memory: stores and loads overlap) */
  int local_copy;  /* the input is pinned host memory: read once, reduced from a copy in the
                      own staging (this rank's choice alone; peers see no difference) */
} zcc_dev_push_t;
int zcc_dev_allreduce_push(const zcc_dev_push_t *args, struct CUstream_st *stream);
/* Blocks and chunk bytes a launch would use; 0 or 1 (bad arguments). */
int zcc_dev_allreduce_push_grid(const zcc_dev_push_t *args, int *blocks, size_t *chunk);

/* Blocks a launch of count elements would use (for tests and the planner). */
int zcc_dev_allreduce_blocks(const zcc_dev_allreduce_t *args, int twoshot);

/*
 * All-rank barrier on the flag areas above (block 0's line): every rank's
 * stream passes it once every rank's stream has reached it. Same ordering
 * rules as the allreduce kernels (every rank launches the same sequence of
 * kernels on one flag area). inputs/outputs/count/type/op are ignored.
 */
int zcc_dev_barrier(const zcc_dev_allreduce_t *args, struct CUstream_st *stream);

/*
 * Gather-style copies among the ranks of one flag area, for allgather,
 * alltoall and broadcast: a start barrier (every rank's sources are ready),
 * then this rank copies, for every r with src[r] != NULL, `bytes` bytes from
 * src[r] (rank r's memory as this GPU addresses it, or local) to dst[r]
 * (local), then an end barrier (every rank has finished reading the others'
 * sources). Any alignment; 16-byte accesses where src[r] and dst[r] share
 * an offset modulo 16. Ranks may pass different src/dst sets (broadcast's
 * root copies nothing when in place) but must pass the same `bytes` and
 * max_blocks (the grid derives from them and nranks). bytes == 0 still runs
 * the barriers. src[r] == dst[r] is already in place (nothing copied).
 */
typedef struct zcc_dev_gather {
  const void *src[ZCC_DEV_MAX_RANKS];
  void *dst[ZCC_DEV_MAX_RANKS];
  uint32_t *flags[ZCC_DEV_MAX_RANKS];
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;               /* op stamps (live NULL: none) */
  size_t bytes;
  int nranks;
  int rank;
  int max_blocks; /* 0: ZCC_DEV_DEFAULT_BLOCKS */
} zcc_dev_gather_t;
int zcc_dev_gather(const zcc_dev_gather_t *args, struct CUstream_st *stream);

/*
 * Point-to-point: one launch runs all of one rank's sends and receives of a
 * group, concurrently (a send and a receive between the same two ranks in
 * opposite directions never wait on each other), so any set of matched
 * operations completes. Ops with the same peer and direction run in the
 * order given, and pair with the peer's ops in its order: the n-th send
 * from A to B is the n-th receive on B from A, over all launches; their
 * byte counts must be equal.
 *
 * Each rank owns a p2p area of ZCC_DEV_P2P_BYTES, zeroed once, mapped into
 * every peer: flags and an outbox per peer. A sender copies its data into
 * its own outbox for that peer in slots of ZCC_DEV_P2P_SLOT_BYTES and
 * signals the receiver; the receiver copies the slot out of the sender's
 * outbox into its buffer and signals back that the slot is free. Counters
 * live in the areas and advance inside the kernels (graph replays work).
 * Sends to self are not passed here (the host copies them). Zero-byte ops
 * are skipped on both sides (no counter moves); a launch of nothing else
 * enqueues nothing. A send completes once its data sits in the outbox.
 */
#define ZCC_DEV_P2P_MAX_OPS 64
#define ZCC_DEV_P2P_BLOCKS 16          /* blocks per (peer, direction) at most */
#define ZCC_DEV_P2P_SLOT_BYTES (256 * 1024)
#define ZCC_DEV_P2P_SLOTS 2            /* per (peer, block) */
#define ZCC_DEV_P2P_FLAG_BYTES (ZCC_DEV_MAX_RANKS * ZCC_DEV_P2P_BLOCKS * 64)
#define ZCC_DEV_P2P_BYTES                                                     \
  (ZCC_DEV_P2P_FLAG_BYTES +                                                   \
   (size_t)ZCC_DEV_MAX_RANKS * ZCC_DEV_P2P_BLOCKS * ZCC_DEV_P2P_SLOTS * ZCC_DEV_P2P_SLOT_BYTES)
typedef struct zcc_dev_p2p_op {
  void *buf;    /* send: source; receive: destination (local) */
  size_t bytes;
  int peer;     /* != rank */
  int is_send;
} zcc_dev_p2p_op_t;
typedef struct zcc_dev_p2p {
  zcc_dev_p2p_op_t ops[ZCC_DEV_P2P_MAX_OPS];
  int nops;
  void *areas[ZCC_DEV_MAX_RANKS]; /* rank r's p2p area as this GPU addresses it */
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;               /* op stamps (live NULL: none) */
  int nranks;
  int rank;
} zcc_dev_p2p_t;
int zcc_dev_p2p(const zcc_dev_p2p_t *args, struct CUstream_st *stream);

/*
 * Connectors: one-way FIFOs between two ranks, the only thing the ring and
 * tree kernels move data through, so they run over any transport that can
 * give a GPU a FIFO to store into. The FIFO lives in the receiver's memory
 * (its GPU memory, reached by the sender over NVLink or PCIe; pinned host
 * memory; a proxy's window): the sender stores a slot into it and advances
 * the receiver's `ready` word; the receiver reads the slot locally and
 * advances the sender's `freed` word. Every wait is on a word in the
 * waiter's own memory, every signal a store into the other side's. Each
 * side keeps its count of slots (`step`) in its own memory across launches,
 * so the same connectors serve every launch and CUDA graph replays.
 *
 * Per channel (one ring, one tree, and where ranks span hosts with the same
 * number on each, the two rings of the hierarchical allreduce; a channel is
 * one thread block of the ring kernels, two of the tree kernel):
 *   recv[ZCC_DEV_RECV_RING]   from the previous rank of the ring
 *   recv[ZCC_DEV_RECV_UP]     from the tree child (the trees are chains)
 *   recv[ZCC_DEV_RECV_DOWN]   from the tree parent
 *   recv[ZCC_DEV_RECV_LOCAL]  from the previous rank of this host's ring
 *   recv[ZCC_DEV_RECV_RAIL]   from the previous rank of the rail's ring (the
 *                             rank of this rank's local index on every host)
 *   send[...]                 the same roles, to the next rank or the parent
 *                             or child
 * Every rank launches the same sequence of connector kernels with the same
 * channel count (the kernels derive it from the size alone), so the counts
 * on both ends of every connector stay in step.
 */
#define ZCC_DEV_MAX_CHANNELS 32
#define ZCC_DEV_TREE_ARITY 3 /* the step primitive's most receives and sends */
#define ZCC_DEV_TREE_CHILDREN 1
#define ZCC_DEV_RECV_RING 0
#define ZCC_DEV_RECV_UP 1
#define ZCC_DEV_RECV_DOWN 2
#define ZCC_DEV_RECV_LOCAL 3
#define ZCC_DEV_RECV_RAIL 4
#define ZCC_DEV_RECV_CONNS 5
#define ZCC_DEV_SEND_RING 0
#define ZCC_DEV_SEND_UP 1
#define ZCC_DEV_SEND_DOWN 2
#define ZCC_DEV_SEND_LOCAL 3
#define ZCC_DEV_SEND_RAIL 4
#define ZCC_DEV_SEND_CONNS 5
/* Which ring a ring kernel runs on (zcc_dev_conn_args_t.ring). */
#define ZCC_DEV_RING_CHANNEL 0 /* the channel's ring over every rank */
#define ZCC_DEV_RING_LOCAL 1   /* this host's ranks, in local-index order */
#define ZCC_DEV_RING_RAIL 2    /* the rail: one rank of each host, in host order */
/* A channel's own flag words: lines of 32 words, each word on its own line. */
#define ZCC_DEV_CONN_LINE 32
#define ZCC_DEV_CHAN_LINES 24
#define ZCC_DEV_CHAN_FLAG_BYTES (ZCC_DEV_CHAN_LINES * ZCC_DEV_CONN_LINE * 4)
#define ZCC_DEV_CHAN_RECV_READY(i) (i)      /* line of recv[i]'s ready word */
#define ZCC_DEV_CHAN_RECV_STEP(i) (5 + (i)) /* recv[i]'s step */
#define ZCC_DEV_CHAN_SEND_FREED(j) (10 + (j))
#define ZCC_DEV_CHAN_SEND_STEP(j) (15 + (j))
#define ZCC_DEV_CHAN_TREE_UP 20   /* tree kernel: the up block's chunk count */
#define ZCC_DEV_CHAN_TREE_DOWN 21 /* the down block's */
#define ZCC_DEV_CHAN_TREE_DONE 22 /* root: chunks whose result is final */

typedef struct zcc_dev_conn {
  char *fifo;      /* nslots slots of slot_bytes, in the receiver's memory; NULL: unconnected */
  uint32_t *ready; /* the receiver's word: slots filled */
  uint32_t *freed; /* the sender's word: slots consumed */
  uint32_t *step;  /* this side's own count, kept across launches */
  uint32_t *sizes; /* send side through a proxy (transport.h: conn_only faces), else NULL:
                      [nslots] words, the sender stores each slot's byte count into
                      sizes[step % nslots] before it publishes the slot, so the proxy
                      moves only what the slot holds */
} zcc_dev_conn_t;

typedef struct zcc_dev_channel {
  zcc_dev_conn_t recv[ZCC_DEV_RECV_CONNS];
  zcc_dev_conn_t send[ZCC_DEV_SEND_CONNS];
  uint32_t *flags;                  /* own flag lines (ZCC_DEV_CHAN_*) */
  int ring_pos;                     /* this rank's position in the channel's ring */
  int ring_rank[ZCC_DEV_MAX_CONN_RANKS]; /* the rank at each position */
  int tree_parent;                  /* -1: the root */
  int tree_nchildren;               /* 0 .. ZCC_DEV_TREE_CHILDREN */
  /* The local and rail rings (ZCC_DEV_RING_LOCAL - 1, ZCC_DEV_RING_RAIL - 1):
     their ranks (0: not connected) and this rank's position, which is the
     index of the block it owns there. */
  int sub_n[2], sub_pos[2];
} zcc_dev_channel_t;

/*
 * Per-peer connectors, for point-to-point (zcc_dev_conn_p2p): one FIFO each
 * way per pair of ranks, nslots x slot_bytes like the channels' FIFOs. A
 * rank's own words for peer r are four flag lines (ZCC_DEV_PEER_LINE(r, i))
 * in its window: the ready word and step of its FIFO from r, the freed word
 * and step of its sends to r.
 */
#define ZCC_DEV_PEER_RECV_READY 0
#define ZCC_DEV_PEER_RECV_STEP 1
#define ZCC_DEV_PEER_SEND_FREED 2
#define ZCC_DEV_PEER_SEND_STEP 3
#define ZCC_DEV_PEER_LINES 4
#define ZCC_DEV_PEER_LINE(r, i) ((r) * ZCC_DEV_PEER_LINES + (i))
/* The flag lines of a communicator of n ranks. */
#define ZCC_DEV_PEER_FLAG_BYTES(n) ((size_t)(n) * ZCC_DEV_PEER_LINES * ZCC_DEV_CONN_LINE * 4)

typedef struct zcc_dev_conns {
  int nchannels;
  int nranks, rank;
  int nslots;        /* per FIFO, 2 .. 64 */
  size_t slot_bytes; /* a multiple of 16 */
  zcc_dev_channel_t ch[ZCC_DEV_MAX_CHANNELS];
  zcc_dev_conn_t peer_send[ZCC_DEV_MAX_CONN_RANKS]; /* to rank r (fifo NULL for self) */
  zcc_dev_conn_t peer_recv[ZCC_DEV_MAX_CONN_RANKS]; /* from rank r */
  /* The hierarchical groups (hier_m 0: none): hier_rank[h * hier_m + l] is
     the rank at index l of host h's ring, which is also index h of rail
     l's; hier_l is this rank's index on its host. */
  int hier_m, hier_h, hier_l;
  int hier_rank[ZCC_DEV_MAX_CONN_RANKS];
} zcc_dev_conns_t;

typedef enum {
  ZCC_DEV_CONN_ALLREDUCE = 0, /* ring: reduce-scatter then all-gather, chunk by chunk */
  ZCC_DEV_CONN_REDUCESCATTER, /* ring */
  ZCC_DEV_CONN_ALLGATHER,     /* ring */
  ZCC_DEV_CONN_BROADCAST,     /* ring from the root (a chain) */
  ZCC_DEV_CONN_REDUCE,        /* ring ending at the root (a chain) */
  ZCC_DEV_CONN_TREE_ALLREDUCE, /* reduce up the tree, broadcast down, pipelined */
  ZCC_DEV_CONN_COLLS
} zcc_dev_conn_coll_t;

/*
 * One collective over the connectors. count: elements of the message
 * (allreduce, broadcast, reduce) or of one rank's block (allgather:
 * input; reduce-scatter: output). Any count and alignment; in place and
 * out of place as in zcc.h. The ring collectives reduce each chunk once,
 * along the ring, and copy the result around: every rank's output is
 * bitwise identical; the tree's results come from the root. nchannels:
 * 0 for the kernels' own choice from the size (the same on every rank).
 * host: the host's copy of the table whose device copy is `conns`.
 * nranks must be at least 2 (one rank has nothing to move).
 */
typedef struct zcc_dev_conn_args {
  const zcc_dev_conns_t *conns; /* device memory */
  const zcc_dev_conns_t *host;
  zcc_dev_conn_coll_t coll;
  const void *input;
  void *output;
  size_t count;
  zccDataType_t type;
  zccRedOp_t op;
  int root;
  int nchannels;
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;               /* op stamps (live NULL: none) */
  /* NULL, or the network proxy's agreement word (sigboard.h: every peer on
     another host posted the collectives up to it with the same signature):
     the kernel touches no connector before it reaches sig_seq, and gives
     up at the abort word without touching any. */
  const volatile uint64_t *sig_gate;
  uint64_t sig_seq;
  /*
   * The hierarchical collectives' pieces (exec/gpu.c): ring
   * ZCC_DEV_RING_LOCAL or _RAIL runs a ring collective on that ring of
   * every channel, its blocks in ring-position order, root (broadcast,
   * reduce) a position on it. total (reduce-scatter, all-gather): the bytes of the whole
   * buffer, where the last blocks are short (a block's bytes past it are
   * not there; 0: every block whole). avg_div: zccAvg's divisor (0: the
   * ring's ranks).
   * by_rank (the hierarchical all-gather and reduce-scatter): the blocks
   * are the ranks' as in zcc.h, of count elements each, stride bytes apart
   * (0: count elements): all-gather, on the rail ring the block of each
   * member's rank, on the local ring one block per host a position (the
   * rank at its index there: hier_rank), gathered in place (input = output
   * + the own block on host 0); reduce-scatter, on the local ring only,
   * each position's block of every host summed over the host's ranks into
   * output + host x count elements.
   */
  int ring;
  size_t total;
  int avg_div;
  int by_rank;
  size_t stride;
} zcc_dev_conn_args_t;
int zcc_dev_conn_coll(const zcc_dev_conn_args_t *args, struct CUstream_st *stream);
/* Channels a launch would use (the same rule every rank applies); -1: bad arguments. */
int zcc_dev_conn_channels(const zcc_dev_conn_args_t *args);

/*
 * Point-to-point over the per-peer connectors (ZCC_P2P_DIRECT_DISABLE=1):
 * the same contract as zcc_dev_p2p (one launch runs all of one rank's
 * sends and receives of a group concurrently; ops with the same peer and
 * direction run in the order given and pair with the peer's in its order;
 * paired byte counts equal; zero-byte ops skipped on both sides; sends to
 * self not passed here), but no loads from a peer's memory: the sender
 * stores each slot of its data into the FIFO in the receiver's memory and
 * advances the receiver's ready word, the receiver copies the slot out
 * locally into its buffer and advances the sender's freed word. An op is
 * cut into slots of slot_bytes (the last one shorter), so both sides cut
 * alike from the byte count. One block per (peer, direction) with work,
 * at most ZCC_DEV_P2P_MAX_OPS, all resident at once (the caller sees to it
 * that the blocks of the launches they wait for fit beside them). The steps stay in the
 * connectors' step words across launches (graph replays work). A send
 * completes once its last slot is in the receiver's FIFO.
 */
typedef struct zcc_dev_conn_p2p {
  const zcc_dev_conns_t *conns; /* device memory */
  const zcc_dev_conns_t *host;  /* its host copy */
  zcc_dev_p2p_op_t ops[ZCC_DEV_P2P_MAX_OPS];
  int nops;
  const volatile uint32_t *abort_flag;
  zcc_dev_stamp_t stamp;               /* op stamps (live NULL: none) */
} zcc_dev_conn_p2p_t;
int zcc_dev_conn_p2p(const zcc_dev_conn_p2p_t *args, struct CUstream_st *stream);

/*
 * Stream-ordered flags between two GPUs, for pipelines that move data with
 * the copy engines (cudaMemcpyAsync between peers) and reduce with SMs. A
 * one-thread kernel each; counters live in device memory and advance in the
 * kernels, so the same sequence works in CUDA graph replays.
 *
 * zcc_dev_flag_signal: v = inc ? ++*counter : *counter, then publishes v
 * into remote_flag (release, system scope) after everything earlier on the
 * stream, copy-engine writes included.
 * zcc_dev_flag_wait: want = inc ? ++*counter : *counter, then waits until
 * *flag >= want (modulo 2^32, acquire) or abort_flag is nonzero; stamp
 * (NULL: none) as for the other kernels.
 */
int zcc_dev_flag_signal(uint32_t *counter, uint32_t *remote_flag, int inc,
                        struct CUstream_st *stream);
int zcc_dev_flag_wait(uint32_t *counter, const uint32_t *flag, int inc,
                      const volatile uint32_t *abort_flag, const zcc_dev_stamp_t *stamp,
                      struct CUstream_st *stream);

/*
 * One thread writes %globaltimer into *out (mapped pinned memory) again and
 * again until *stop is nonzero or limit_ns have passed on the GPU's clock:
 * the host reads it beside its own clock to convert op stamps.
 */
int zcc_dev_clock_probe(uint64_t *out, const volatile uint32_t *stop, uint64_t limit_ns,
                        struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* ZCC_DEVICE_H_ */
