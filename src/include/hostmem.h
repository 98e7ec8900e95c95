/*
 * Host memory that the ranks of a host communicator on one machine share
 * (zccMemHostAlloc, and ordinary memory registered with zccCommRegister),
 * and the direct allreduce that runs on it.
 *
 * zccMemHostAlloc maps a memfd; a peer process maps the same pages by
 * opening /proc/<pid>/fd/<fd> of the owner (same user, same pid namespace)
 * and checking the inode. Registering ordinary memory (private anonymous:
 * malloc's) makes a memfd of its pages, copies the whole pages the range
 * holds into it and maps it over them at the same addresses, so the process
 * goes on using the buffer as before; the partial pages at its ends stay
 * the process's (other data may share them): the memfd holds a copy of
 * those bytes, filled before an op's peers read them and copied back after
 * they wrote. Deregistering moves private pages with the bytes back.
 * An allreduce whose buffers lie in such memory on every rank reads the
 * peers' inputs and writes their outputs in place: no staging copy
 * (exec/host_plan.c, the "hostmem" steps).
 */
#ifndef ZCC_HOSTMEM_H
#define ZCC_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

#include "opsig.h"
#include "zcc.h"

struct zccComm;
struct zcc_plan;

/* The direct allreduce reduces and writes out in pieces of this many bytes
   (each stays in cache between its reduction and its copies). */
#define ZCC_HOSTMEM_PIECE 65536

/* Where one buffer lies in a shared region, as a peer needs it. */
typedef struct zcc_hostmem_ref {
  int32_t fd;        /* the owner's memfd; -1: not shared memory */
  int32_t pad;
  uint64_t id;       /* the region's number in its process (never reused) */
  uint64_t ino;      /* the memfd's inode, checked by the peer after open */
  uint64_t bytes;    /* the region's size (what the peer maps) */
  uint64_t off;      /* the buffer's offset in the region */
} zcc_hostmem_ref_t;

/* What a rank tells its peers at the start of a direct allreduce. */
typedef struct zcc_hostmem_desc {
  zcc_hostmem_ref_t send, recv;
} zcc_hostmem_desc_t;

/* Finds [p, p + len) inside one region (zccMemHostAlloc's, or a range
   registered): fills ref and returns 1; else ref->fd = -1 and 0. */
int zcc_hostmem_find(const void *p, size_t len, zcc_hostmem_ref_t *ref);

/* Where this process reaches the bytes of [p, p + len) that its peers read
   and write, in the region found as zcc_hostmem_find does (NULL: none): p
   itself in zccMemHostAlloc memory, the memfd's own mapping for a range
   registered; with copy_in, the range's bytes in its partial end pages are
   copied there first. zcc_hostmem_copy_out copies them back after the
   peers wrote them. */
char *zcc_hostmem_local(const void *p, size_t len, int copy_in);
void zcc_hostmem_copy_out(void *p, size_t len);

/* zccCommRegister of host memory [buf, buf + len): makes its whole pages
   shared memory (once; a range inside one registered already holds that
   one again) and sets *region for zcc_hostmem_unregister. *region stays
   NULL where the memory stays as it was: zccMemHostAlloc memory already,
   no whole page, a file or shared mapping, an overlap with another
   registration. Unmapped memory is zccInvalidArgument. */
zccResult_t zcc_hostmem_register(void *buf, size_t len, void **region);
/* The last holder of a region gives the range back private pages with its
   bytes (where the range still maps the region; else it is left alone and
   a warning says so). */
void zcc_hostmem_unregister(void *region);

/* The peer's buffer described by ref, mapped into this process (cached per
   communicator); NULL when it cannot be mapped (the reason is logged once). */
char *zcc_hostmem_peer_ptr(struct zccComm *comm, int peer, const zcc_hostmem_ref_t *ref);

/* Unmaps every peer region the communicator mapped. */
void zcc_hostmem_comm_free(struct zccComm *comm);

/* Rank i's part of count elements split among n: the first count % n
   ranks hold one element more (every segmented collective cuts so). */
static inline size_t zcc_seg_off(size_t count, int n, int i) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return base * (size_t)i + ((size_t)i < rem ? (size_t)i : rem);
}
static inline size_t zcc_seg_cnt(size_t count, int n, int i) {
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/*
 * The two-shot allreduce of host communicators on one machine (ZCC_ALGO
 * twoshot): each rank copies a chunk of its input into its own staging
 * region, reduces its segment of the chunk from every rank's region into
 * its output and its region's second half, and copies the peers' reduced
 * segments out of theirs; two barriers per chunk, whatever the rank count.
 * The regions (zccMemHostAlloc memory, 2 x chunk bytes each) are made and
 * mapped by every rank at the communicator's first two-shot allreduce,
 * then kept until it is destroyed.
 */
typedef struct zcc_stage {
  size_t chunk;       /* bytes of one input chunk; the region holds two */
  char *mine;         /* this rank's region */
  char **peer;        /* [nranks] every rank's region as mapped here (own: mine) */
  uint64_t bars;      /* barriers this rank has entered on the regions */
  uint64_t boards;    /* one-barrier allreduces run (their slot: the parity) */
} zcc_stage_t;

/*
 * Past the two chunks each region holds its board: two cache lines, one per
 * barrier parity, each with a count of the barriers its rank has entered and
 * the signature of the call that entered the last of that parity (opsig.h).
 * A barrier: write the own line of its parity (signature, then count), wait
 * until every rank's line of that parity holds this barrier's count; no
 * message, no atomic read-modify-write. A rank writes the line of barrier
 * b + 2 only after every rank entered b + 1, so while a rank waits at b the
 * lines of b stay as written: each rank compares every signature there with
 * its own, so that ranks whose calls differ fail, naming both, as they do
 * where bytes carry the record. Then two slots of ZCC_STAGE_SLOT bytes for
 * the one-barrier allreduce of small inputs that runs where ranks outnumber
 * CPUs: every rank stores its input in its slot, meets the others at one
 * barrier, and reduces all the slots in rank order. Consecutive ones
 * alternate slots: a rank that writes a slot again has passed the barrier of
 * the one between, which every rank entered only after reading the slot.
 * Each slot starts a page of its own: next to each other, a rank reading
 * one slot had the hardware prefetch lines of the other, which the peer
 * writes next (4 ranks, 2 KiB: 4.3 us against 3.7-3.9, 2026-12-06).
 */
#define ZCC_STAGE_SLOT 2048        /* the most bytes it runs for */
#define ZCC_STAGE_SLOT_STRIDE 4096 /* a page per slot */
#define ZCC_STAGE_BOARD_READ 16384 /* ... and the most nranks x bytes */
#define ZCC_STAGE_BOARD_HDR 4096
typedef struct zcc_stage_line {
  uint64_t bar;     /* the count of barriers entered, at the last of this parity */
  zcc_op_sig_t sig; /* that barrier's call */
  char pad[64 - sizeof(uint64_t) - sizeof(zcc_op_sig_t)];
} zcc_stage_line_t;
_Static_assert(sizeof(zcc_stage_line_t) == 64, "a board line is one cache line");
static inline size_t zcc_stage_bytes(size_t chunk) {
  return 2 * chunk + ZCC_STAGE_BOARD_HDR + 2 * ZCC_STAGE_SLOT_STRIDE;
}
static inline zcc_stage_line_t *zcc_stage_line(char *region, size_t chunk, uint64_t bar) {
  return (zcc_stage_line_t *)(region + 2 * chunk) + (bar & 1);
}
static inline char *zcc_stage_slot(char *region, size_t chunk, int parity) {
  return region + 2 * chunk + ZCC_STAGE_BOARD_HDR + (size_t)parity * ZCC_STAGE_SLOT_STRIDE;
}

/*
 * The two-shot's chunk where ZCC_TWOSHOT_CHUNK_BYTES is 0 (its default):
 * 1 MiB; where a host's ranks outnumber its CPUs (q ranks per CPU, the worst
 * host's, alike on every rank: zcc_select_ctx_t.oversub), 512 KiB / ceil(q),
 * at least 32 KiB, so that the chunks, regions and outputs of the ranks
 * sharing a core stay within its cache (4 and 8 ranks on 2 CPUs, 1-16 MiB:
 * 256 and 128 KiB chunks 11-20% faster than 1 MiB; 2 ranks the same either
 * way; docs/perf/host.md, 2026-12-06).
 */
static inline size_t zcc_twoshot_chunk_auto(double oversub) {
  if (oversub <= 1) return (size_t)1 << 20;
  double q = oversub > 16 ? 16 : oversub;
  size_t per = (size_t)q + ((double)(size_t)q < q);
  size_t chunk = ((size_t)512 << 10) / per / 4096 * 4096;
  return chunk < ((size_t)32 << 10) ? (size_t)32 << 10 : chunk;
}

/* Makes this rank's region of 2 x chunk bytes (once) and describes it in
   ref (ref->fd = -1 where it cannot be made: every rank then runs the ring). */
void zcc_stage_prepare(struct zccComm *comm, size_t chunk, zcc_hostmem_ref_t *ref);
/* Maps every peer's region from refs [nranks]: 1 when all could be mapped. */
int zcc_stage_map(struct zccComm *comm, const zcc_hostmem_ref_t *refs);
/* What every rank decided alike: keep the regions (ok; comm->stage_state 1)
   or drop them for good (-1). */
void zcc_stage_decide(struct zccComm *comm, int ok);

/* The per-plan state of a direct allreduce (exec/host_plan.c builds it,
   exec/host.c runs its steps). */
typedef struct zcc_hostmem_op {
  zcc_hostmem_desc_t mine;
  zcc_hostmem_desc_t *theirs; /* [nranks] */
  uint64_t ok_mine;           /* 1: this rank mapped every peer's buffers */
  uint64_t *ok_theirs;        /* [nranks] */
  uint64_t bar_mine, *bar_theirs; /* the closing barrier's words */
  char **peer_send, **peer_recv;  /* [nranks] mapped (own rank: zcc_hostmem_local's) */
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  size_t seg_off, seg_cnt;    /* this rank's segment of the count (elements) */
  char *scratch;              /* one piece (allocated once, kept) */
  int use_scratch;            /* the own output is the own input and the reduction
                                 order would overwrite it first: sum in scratch */
  int nt;                     /* 2 ranks, large, not avg: one pass that writes both
                                 outputs with streaming stores (zcc_reduce2_nt) when
                                 neither rank runs in place (an output that is the
                                 input is in the cache already: plain stores) */
  int staged_at;              /* item index where the staged (ring) steps start */
  int direct_at;              /* item index where the direct steps start */
  /* The two-shot allreduce (zcc_stage_t): its regions as described and
     whether this rank mapped them, its buffers and chunk (elements). */
  zcc_hostmem_ref_t st_mine, *st_theirs; /* [nranks] */
  uint64_t st_ok_mine, *st_ok_theirs;    /* [nranks] */
  const char *st_sb;
  char *st_rb;
  size_t st_count, st_chunk, st_chunk_bytes;
  int st_nt;                  /* the peers' segments out with streaming stores */
  int st_nt_ok;               /* st_nt may be set (the plan's stores' choice, stores.h) */
  int st_direct_at;           /* item index where its chunks start */
  int st_waiting;             /* a board barrier's wait: the rank not there yet */
  /* The one-barrier allreduce: its buffers and bytes, its slot this call. */
  const char *bd_sb;
  char *bd_rb;
  size_t bd_count;
  int bd_parity;
} zcc_hostmem_op_t;

/* The state for a plan on comm (allocated once, kept with the plan). */
zccResult_t zcc_hostmem_op_get(struct zccComm *comm, zcc_hostmem_op_t **op);
void zcc_hostmem_op_free(zcc_hostmem_op_t *op);

/* Whether an allreduce of `bytes` on comm tries the direct path: decided
   from what every rank knows alike (size, transports, parameters). */
int zcc_hostmem_direct_eligible(const struct zccComm *comm, size_t bytes);

/* The steps (items of kind ZCC_ITEM_HOSTMEM; item.n says which). */
enum {
  ZCC_HOSTMEM_PREP = 0, /* fill mine from the buffers */
  ZCC_HOSTMEM_MAP,      /* a rank's buffers are not shared memory: jump to
                           staged_at (every rank sees the same descriptors);
                           else map the peers' buffers, ok_mine says whether
                           that worked */
  ZCC_HOSTMEM_DECIDE,   /* every rank mapped: jump to direct_at; else staged */
  ZCC_HOSTMEM_REDUCE,   /* reduce this rank's segment, write it to every rank */
  ZCC_HOSTMEM_FINISH,   /* after the closing barrier: the output's bytes in the
                           partial end pages of a registered range copied back */
  /* the two-shot allreduce (item.first: the chunk) */
  ZCC_HOSTMEM_STAGE_PREP,   /* make (once) and describe this rank's region */
  ZCC_HOSTMEM_STAGE_MAP,    /* map the peers' regions; st_ok_mine says whether that worked */
  ZCC_HOSTMEM_STAGE_DECIDE, /* every rank mapped: keep them, jump to st_direct_at;
                               else drop them for good and run the ring that follows */
  ZCC_HOSTMEM_STAGE_IN,     /* the chunk of the input into this rank's region */
  ZCC_HOSTMEM_STAGE_REDUCE, /* this rank's segment of it from every region, in rank
                               order, into the output and the region's second half */
  ZCC_HOSTMEM_STAGE_OUT,    /* the peers' reduced segments into the output */
  ZCC_HOSTMEM_STAGE_ARRIVE, /* a barrier on the boards: this rank's word counts it */
  ZCC_HOSTMEM_STAGE_WAIT,   /* ... and waits until every rank's word has (the
                               step does not move until then) */
  ZCC_HOSTMEM_BOARD_IN,     /* the one-barrier allreduce: the input into this
                               rank's next slot */
  ZCC_HOSTMEM_BOARD_REDUCE  /* every rank's slot, in rank order, into the output */
};

/* What zcc_hostmem_step puts in *jump for a step that cannot go on yet. */
#define ZCC_HOSTMEM_NOT_YET (-2)

/* Runs one step; *jump is set to the next item index, or -1 for the next. */
zccResult_t zcc_hostmem_step(struct zcc_plan *p, int step, int *jump);

#endif
