/*
 * Host memory that the ranks of a host communicator on one machine share
 * (zccMemHostAlloc), and the direct allreduce that runs on it.
 *
 * zccMemHostAlloc maps a memfd; a peer process maps the same pages by
 * opening /proc/<pid>/fd/<fd> of the owner (same user, same pid namespace)
 * and checking the inode. An allreduce whose buffers lie in such memory on
 * every rank reads the peers' inputs and writes their outputs in place:
 * no staging copy (exec/host_plan.c, the "hostmem" steps).
 */
#ifndef ZCC_HOSTMEM_H
#define ZCC_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

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

/* Finds [p, p + len) inside one region from zccMemHostAlloc: fills ref and
   returns 1; else ref->fd = -1 and 0. */
int zcc_hostmem_find(const void *p, size_t len, zcc_hostmem_ref_t *ref);

/* The peer's buffer described by ref, mapped into this process (cached per
   communicator); NULL when it cannot be mapped (the reason is logged once). */
char *zcc_hostmem_peer_ptr(struct zccComm *comm, int peer, const zcc_hostmem_ref_t *ref);

/* Unmaps every peer region the communicator mapped. */
void zcc_hostmem_comm_free(struct zccComm *comm);

/* The per-plan state of a direct allreduce (exec/host_plan.c builds it,
   exec/host.c runs its steps). */
typedef struct zcc_hostmem_op {
  zcc_hostmem_desc_t mine;
  zcc_hostmem_desc_t *theirs; /* [nranks] */
  uint64_t ok_mine;           /* 1: this rank mapped every peer's buffers */
  uint64_t *ok_theirs;        /* [nranks] */
  uint64_t bar_mine, *bar_theirs; /* the closing barrier's words */
  char **peer_send, **peer_recv;  /* [nranks] mapped (own rank: its buffers) */
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
  ZCC_HOSTMEM_REDUCE    /* reduce this rank's segment, write it to every rank */
};

/* Runs one step; *jump is set to the next item index, or -1 for the next. */
zccResult_t zcc_hostmem_step(struct zcc_plan *p, int step, int *jump);

#endif
