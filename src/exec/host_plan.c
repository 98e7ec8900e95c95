/*
 * Plans for host collectives. Segments of a ring are balanced element
 * ranges; every rank computes the same partition, so both ends of a
 * transfer agree on its size. Reductions of the direct algorithms run in
 * rank order on every rank, and ring segments are reduced once and then
 * copied, so allreduce results are bitwise identical on all ranks.
 */
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "hostmem.h"
#include "param.h"
#include "planner.h"
#include "reduce.h"
#include "stores.h"

ZCC_PARAM_INT(ring_chunk_bytes, "RING_CHUNK_BYTES", 1048576,
              "host ring allreduce: bytes per pipelined chunk (each chunk is a "
              "reduce-scatter and allgather of its own, so results are forwarded "
              "while still in cache); 0: one chunk")

static zccResult_t grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return zccSuccess;
  int ncap = *cap ? *cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  void *p = realloc(*arr, (size_t)ncap * elem);
  if (!p) return zcc_error(zccSystemError, "plan: out of memory");
  *arr = p;
  *cap = ncap;
  return zccSuccess;
}

static zccResult_t add_item(zcc_plan_t *p, zcc_item_t it) {
  ZCC_CHECK(grow((void **)&p->items, &p->cap_items, p->nitems + 1, sizeof(zcc_item_t)));
  p->items[p->nitems++] = it;
  return zccSuccess;
}

static zccResult_t batch_begin(zcc_plan_t *p) {
  zcc_item_t it = {.kind = ZCC_ITEM_XFERS, .first = p->nxfers, .count = 0};
  ZCC_CHECK(add_item(p, it));
  p->open_batch = 1;
  return zccSuccess;
}

static void batch_end(zcc_plan_t *p) {
  if (p->open_batch && p->items[p->nitems - 1].count == 0) p->nitems--;
  p->open_batch = 0;
}

/*
 * A transfer in the open batch; zero bytes add nothing. *index (if given)
 * receives its index in plan->xfers, or -1.
 */
static zccResult_t add_xfer(zcc_plan_t *p, int is_recv, int peer, const void *src,
                            void *dst, const void *red, size_t bytes, int limit_by,
                            int *index) {
  if (index) *index = -1;
  if (bytes == 0) return zccSuccess;
  ZCC_CHECK(grow((void **)&p->xfers, &p->cap_xfers, p->nxfers + 1, sizeof(zcc_xfer_t)));
  zcc_item_t *it = &p->items[p->nitems - 1];
  zcc_xfer_t x = {.conn = peer == p->comm->rank ? NULL : p->comm->conns[peer],
                  .is_recv = is_recv, .src = src, .dst = dst, .red = red,
                  .type = p->type, .op = p->op, .bytes = bytes, .avail = bytes,
                  .after = -1, .limit_by = limit_by, .fwd = -1, .fwd_ready = NULL,
                  .sig = &p->sig};
  for (int i = it->first + it->count - 1; i >= it->first; i--) {
    if (x.conn && p->xfers[i].conn == x.conn && p->xfers[i].is_recv == is_recv) {
      x.after = i;
      break;
    }
  }
  if (index) *index = p->nxfers;
  if (limit_by >= 0) p->xfers[limit_by].fwd = p->nxfers;
  p->xfers[p->nxfers++] = x;
  it->count++;
  return zccSuccess;
}

static zccResult_t send_to(zcc_plan_t *p, int peer, const void *src, size_t bytes) {
  return add_xfer(p, 0, peer, src, NULL, NULL, bytes, -1, NULL);
}
/* A send whose source is filled by the receive at index `limit_by` (-1: ready). */
static zccResult_t send_when(zcc_plan_t *p, int peer, const void *src, size_t bytes,
                             int limit_by) {
  return add_xfer(p, 0, peer, src, NULL, NULL, bytes, limit_by, NULL);
}
static zccResult_t recv_from(zcc_plan_t *p, int peer, void *dst, const void *red,
                             size_t bytes) {
  return add_xfer(p, 1, peer, NULL, dst, red, bytes, -1, NULL);
}
static zccResult_t recv_into(zcc_plan_t *p, int peer, void *dst, const void *red,
                             size_t bytes, int *index) {
  return add_xfer(p, 1, peer, NULL, dst, red, bytes, -1, index);
}

static zccResult_t local_copy(zcc_plan_t *p, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return zccSuccess;
  zcc_item_t it = {.kind = ZCC_ITEM_COPY, .dst = dst, .a = src, .n = bytes};
  return add_item(p, it);
}

static zccResult_t local_reduce(zcc_plan_t *p, void *dst, const void *a, const void *b,
                                size_t count) {
  if (count == 0) return zccSuccess;
  zcc_item_t it = {.kind = ZCC_ITEM_REDUCE, .dst = dst, .a = a, .b = b, .n = count};
  return add_item(p, it);
}

static zccResult_t local_avg(zcc_plan_t *p, void *dst, size_t count) {
  if (count == 0 || p->op != zccAvg || p->comm->nranks == 1) return zccSuccess;
  zcc_item_t it = {.kind = ZCC_ITEM_AVG, .dst = dst, .n = count};
  return add_item(p, it);
}

static zccResult_t alloc_tmp(zcc_plan_t *p, size_t bytes) {
  if (bytes <= p->tmp_cap) return zccSuccess;
  free(p->tmp);
  p->tmp_cap = 0;
  p->tmp = malloc(bytes);
  if (!p->tmp) return zcc_error(zccSystemError, "%s: cannot allocate %zu bytes of scratch",
                                zcc_coll_name(p->coll), bytes);
  p->tmp_cap = bytes;
  return zccSuccess;
}

static zccResult_t alloc_pre(zcc_plan_t *p, size_t bytes) {
  if (bytes <= p->pre_cap) return zccSuccess;
  free(p->pre);
  p->pre_cap = 0;
  p->pre = malloc(bytes);
  if (!p->pre)
    return zcc_error(zccSystemError, "%s: cannot allocate %zu bytes for the scaled input",
                     zcc_coll_name(p->coll), bytes);
  p->pre_cap = bytes;
  return zccSuccess;
}

/* Scratch kept in a spare plan beyond this is freed rather than kept. */
#define SPARE_TMP_MAX ((size_t)4 << 20)

static int mod(int a, int n) { return ((a % n) + n) % n; }

static int ranges_overlap(const char *a, size_t an, const char *b, size_t bn) {
  return an && bn && a < b + bn && b < a + an;
}

/*
 * A ring the plans run over: n members at positions 0..n-1 (order[pos],
 * NULL: member pos), this rank at position pos; member k is the comm rank
 * ranks[k] (NULL: k) and names segment k. The communicator's ring is the
 * planner's host ring (comm->ring_order, each host's ranks together), else
 * rank order; a host's ring and a rail's (hierarchical plans) are rings of
 * their own (comm->hier).
 */
typedef struct {
  int n, pos;
  const int *order, *ranks;
  int by_rank; /* blocks (blocks = 1) at their members' ranks' places, not their indices' */
} ring_t;

static ring_t comm_ring(const struct zccComm *c) {
  ring_t R = {c->nranks, c->ring_order ? c->ring_pos : c->rank, c->ring_order, NULL, 0};
  return R;
}
static int member_at(const ring_t *R, int i) {
  return R->order ? R->order[mod(i, R->n)] : mod(i, R->n);
}
static int rank_of(const ring_t *R, int member) { return R->ranks ? R->ranks[member] : member; }
/* The segment (or block) of the member at ring position i. */
static int seg_at(const ring_t *R, int i) {
  int member = member_at(R, i);
  return R->by_rank ? rank_of(R, member) : member;
}

/*
 * Reduce every rank's block into dst, in rank order: this rank's is `own`
 * (it may be dst: then it is copied to its own scratch block first), rank
 * i's the block i of `gathered` (blocks of count elements).
 */
static zccResult_t reduce_in_order(zcc_plan_t *p, char *dst, const char *own,
                                   char *gathered, size_t count) {
  int n = p->comm->nranks, me = p->comm->rank;
  size_t bytes = count * zcc_type_size(p->type);
  if (own == dst && n > 2) {
    ZCC_CHECK(local_copy(p, gathered + (size_t)me * bytes, dst, bytes));
    own = gathered + (size_t)me * bytes;
  }
#define SRC(i) ((i) == me ? own : gathered + (size_t)(i) * bytes)
  ZCC_CHECK(local_reduce(p, dst, SRC(0), SRC(1), count));
  for (int i = 2; i < n; i++) ZCC_CHECK(local_reduce(p, dst, dst, SRC(i), count));
#undef SRC
  return zccSuccess;
}

/* Offset and size in bytes of segment i: balanced ranges, or blocks of `count`. */
static size_t soff(size_t count, int n, int i, int blocks, size_t ts) {
  return (blocks ? (size_t)i * count : zcc_seg_off(count, n, i)) * ts;
}
static size_t sbytes(size_t count, int n, int i, int blocks, size_t ts) {
  return (blocks ? count : zcc_seg_cnt(count, n, i)) * ts;
}

/*
 * Ring reduce-scatter over R, into the open batch. Step s sends the segment
 * of position pos-1-s to the next rank and receives that of position
 * pos-2-s from the previous one, reducing it with this rank's own
 * contribution; the rank at pos ends with its own member's segment fully
 * reduced in final_dst. Partial results of step s land in inter (same
 * layout as sendbuf) or in slot s of scratch. Each send starts as soon as
 * the receive that fills it has produced bytes, so all steps pipeline.
 * Returns the index of the final receive in *final_recv.
 */
static zccResult_t ring_reduce_scatter(zcc_plan_t *p, const ring_t *R, const char *sendbuf,
                                       size_t count, int blocks, char *inter, char *scratch,
                                       char *final_dst, int *final_recv) {
  int n = R->n, r = R->pos;
  size_t ts = zcc_type_size(p->type);
  int next = rank_of(R, member_at(R, r + 1)), prev = rank_of(R, member_at(R, r - 1));
  size_t maxseg = sbytes(count, n, 0, blocks, ts);
  const char *filled = NULL; /* what the previous step's receive filled */
  int filled_by = -1;
  for (int s = 0; s <= n - 2; s++) {
    int sseg = seg_at(R, r - 1 - s), rseg = seg_at(R, r - 2 - s);
    const char *src = s == 0 ? sendbuf + soff(count, n, sseg, blocks, ts) : filled;
    char *dst;
    if (s == n - 2) dst = final_dst;
    else if (inter) dst = inter + soff(count, n, rseg, blocks, ts);
    else dst = scratch + (size_t)s * maxseg;
    ZCC_CHECK(send_when(p, next, src, sbytes(count, n, sseg, blocks, ts), s == 0 ? -1 : filled_by));
    ZCC_CHECK(recv_into(p, prev, dst, sendbuf + soff(count, n, rseg, blocks, ts),
                        sbytes(count, n, rseg, blocks, ts), &filled_by));
    filled = dst;
  }
  *final_recv = filled_by;
  return zccSuccess;
}

/*
 * Ring allgather over R into the open batch: the own member's segment is in
 * buf, or is being filled by the receive at index `own_filled_by` (-1:
 * present already).
 */
static zccResult_t ring_allgather(zcc_plan_t *p, const ring_t *R, char *buf, size_t count,
                                  int blocks, int own_filled_by) {
  int n = R->n, r = R->pos;
  size_t ts = zcc_type_size(p->type);
  int next = rank_of(R, member_at(R, r + 1)), prev = rank_of(R, member_at(R, r - 1));
  int filled_by = own_filled_by;
  for (int s = 0; s <= n - 2; s++) {
    int sseg = seg_at(R, r - s), rseg = seg_at(R, r - s - 1);
    ZCC_CHECK(send_when(p, next, buf + soff(count, n, sseg, blocks, ts),
                        sbytes(count, n, sseg, blocks, ts), filled_by));
    ZCC_CHECK(recv_into(p, prev, buf + soff(count, n, rseg, blocks, ts), NULL,
                        sbytes(count, n, rseg, blocks, ts), &filled_by));
  }
  return zccSuccess;
}

/*
 * Direct (one-round) reduction: each rank sends the block sb + j * stride
 * to rank j (stride 0: the same buffer to all), the receiving ranks collect
 * every peer's block in scratch and reduce all of them in rank order into
 * rb. root >= 0: only the root receives; the others send it sb. Two ranks
 * reduce as the bytes arrive, without the scratch.
 */
static zccResult_t direct_reduce(zcc_plan_t *p, const char *sb, size_t stride, char *rb,
                                 size_t count, int root) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t bytes = count * zcc_type_size(p->type);
  const char *own = sb + (size_t)r * stride;
  if (n == 2 && (root < 0 || r == root) &&
      (rb == own || !ranges_overlap(rb, bytes, own, bytes))) {
    /* One peer: its bytes are reduced with this rank's straight into rb as
       they arrive (rank order kept: the lower rank's operand first), with
       no scratch copy. In place, what is sent is copied aside first: the
       receive overwrites it while the send may still be reading. */
    int peer = 1 - r, got = -1;
    const char *src = sb + (size_t)peer * stride;
    if (root < 0 && ranges_overlap(src, bytes, rb, bytes)) {
      ZCC_CHECK(alloc_tmp(p, bytes));
      ZCC_CHECK(local_copy(p, p->tmp, src, bytes));
      src = p->tmp;
    }
    ZCC_CHECK(batch_begin(p));
    if (root < 0) ZCC_CHECK(send_to(p, peer, src, bytes));
    ZCC_CHECK(recv_into(p, peer, rb, own, bytes, &got));
    if (got >= 0) p->xfers[got].in_first = peer < r;
    batch_end(p);
    return local_avg(p, rb, count);
  }
  if (root < 0 && stride == 0 && n > 2 && p->comm->oversub_any) {
    /*
     * More ranks than CPUs: every rank runs only when the scheduler lets
     * it, so each message costs turns. Gather to rank 0, which reduces in
     * rank order (the same bits as below), and send the result back: 2(n-1)
     * messages instead of n(n-1).
     */
    if (r != 0) {
      ZCC_CHECK(batch_begin(p));
      ZCC_CHECK(send_to(p, 0, sb, bytes));
      if (rb == sb) { /* the result may land while the send still reads */
        ZCC_CHECK(alloc_tmp(p, bytes));
        ZCC_CHECK(recv_from(p, 0, p->tmp, NULL, bytes));
        batch_end(p);
        ZCC_CHECK(local_copy(p, rb, p->tmp, bytes));
      } else {
        ZCC_CHECK(recv_from(p, 0, rb, NULL, bytes));
        batch_end(p);
      }
      return zccSuccess; /* avg: rank 0 divided already */
    }
    ZCC_CHECK(alloc_tmp(p, (size_t)n * bytes));
    char *tmp = p->tmp;
    ZCC_CHECK(batch_begin(p));
    for (int peer = 1; peer < n; peer++)
      ZCC_CHECK(recv_from(p, peer, tmp + (size_t)peer * bytes, NULL, bytes));
    batch_end(p);
    ZCC_CHECK(reduce_in_order(p, rb, sb, tmp, count));
    ZCC_CHECK(local_avg(p, rb, count));
    ZCC_CHECK(batch_begin(p));
    for (int peer = 1; peer < n; peer++) ZCC_CHECK(send_to(p, peer, rb, bytes));
    batch_end(p);
    return zccSuccess;
  }
  ZCC_CHECK(batch_begin(p));
  if (root >= 0 && r != root) {
    ZCC_CHECK(send_to(p, root, sb, bytes));
    batch_end(p);
    return zccSuccess;
  }
  ZCC_CHECK(alloc_tmp(p, (size_t)n * bytes));
  char *tmp = p->tmp;
  for (int k = 1; k < n; k++) {
    int peer = mod(r + k, n);
    if (root < 0) ZCC_CHECK(send_to(p, peer, sb + (size_t)peer * stride, bytes));
    ZCC_CHECK(recv_from(p, peer, tmp + (size_t)peer * bytes, NULL, bytes));
  }
  batch_end(p);
  ZCC_CHECK(reduce_in_order(p, rb, own, tmp, count));
  return local_avg(p, rb, count);
}

/* Every peer over shm (same host): ranks can map each other's memory. */
static int all_shm(const struct zccComm *comm) {
  for (int i = 0; i < comm->nranks; i++)
    if (i != comm->rank && (!comm->conns[i] || comm->conns[i]->ops != &zcc_transport_shm))
      return 0;
  return 1;
}

ZCC_PARAM_INT(ring_nt_bytes, "RING_NT_BYTES", 32768,
              "host ring allreduce: from this size up the receives that write the "
              "result (out of place, not avg) and the sends into shared-memory slots "
              "(ZCC_RING_SLOT_NT) may use streaming stores, as ZCC_NT_TUNE times them "
              "(-1: never)");
ZCC_PARAM_INT(ring_slot_nt, "RING_SLOT_NT", 1,
              "host ring allreduce from ZCC_RING_NT_BYTES, in place or not: 1 times "
              "streaming stores into the shared-memory slots against plain ones "
              "(ZCC_NT_TUNE); 0: the slots always take plain stores");
ZCC_PARAM_INT(twoshot_nt_bytes, "TWOSHOT_NT_BYTES", 33554432,
              "host two-shot allreduce out of place, not avg: from this size up the "
              "peers' segments are copied out with streaming stores (past the cache; "
              "-1: never)");

/* Whether an allreduce staged through shared memory writes its result with
   streaming stores: out of place and from min bytes up (-1: never), where
   the output's lines are not in the cache and a plain store reads each
   first. Not for avg, whose division reads the result back. */
static int staged_nt(const zcc_plan_t *p, const char *sb, const char *rb, size_t bytes,
                     int64_t min) {
  return min >= 0 && bytes >= (size_t)min && p->op != zccAvg &&
         !ranges_overlap(sb, bytes, rb, bytes);
}

void zcc_plan_stores(zcc_plan_t *p, int kind) {
  int out = (kind & ZCC_STORES_OUT) != 0, slots = (kind & ZCC_STORES_SLOTS) != 0;
  for (int i = 0; i < p->nxfers; i++) {
    p->xfers[i].nt = p->xfers[i].nt_ok && out;
    p->xfers[i].slot_nt = p->xfers[i].slot_nt_ok && slots;
  }
  if (p->hostmem) p->hostmem->st_nt = p->hostmem->st_nt_ok && out;
}

/* The ring allreduce through the transports' buffers. */
static zccResult_t plan_allreduce_ring(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  ring_t R = comm_ring(p->comm);
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type);
  /* One batch of chunks, each a reduce-scatter and an allgather; the
     allgather forwards each reduced piece as it is made. */
  int64_t cb = zcc_param_ring_chunk_bytes();
  size_t chunk = cb > 0 ? (size_t)cb / ts : count;
  if (chunk < (size_t)n) chunk = (size_t)n;
  /* The receives that write the result (staged_nt); from the same size the
     sends into shared-memory slots (stores.h). */
  int64_t nt_min = zcc_param_ring_nt_bytes();
  int nt = staged_nt(p, sb, rb, count * ts, nt_min);
  int slots = zcc_param_ring_slot_nt() && nt_min >= 0 && count * ts >= (size_t)nt_min &&
              all_shm(p->comm);
  ZCC_CHECK(batch_begin(p));
  for (size_t off = 0; off < count; off += chunk) {
    size_t c = count - off < chunk ? count - off : chunk;
    const char *csb = sb + off * ts;
    char *crb = rb + off * ts;
    int final_recv;
    ZCC_CHECK(ring_reduce_scatter(p, &R, csb, c, 0, crb, NULL, crb + zcc_seg_off(c, n, r) * ts,
                                  &final_recv));
    if (nt && final_recv >= 0) p->xfers[final_recv].nt_ok = 1;
    int first = p->nxfers;
    ZCC_CHECK(ring_allgather(p, &R, crb, c, 0, final_recv));
    /* A forwarded receive writes the forward's slot in the same pass; a
       send that fell behind reads the output back (from memory then:
       slower, the same bytes). */
    for (int i = first; nt && i < p->nxfers; i++)
      if (p->xfers[i].is_recv) p->xfers[i].nt_ok = 1;
  }
  batch_end(p);
  for (int i = 0; slots && i < p->nxfers; i++)
    if (!p->xfers[i].is_recv) p->xfers[i].slot_nt_ok = 1;
  /* Whether they stream is timed per call (stores.h). */
  unsigned mask = (nt ? ZCC_STORES_OUT : 0) | (slots ? ZCC_STORES_SLOTS : 0);
  if (mask) p->stores_class = 1 + zcc_stores_class(ZCC_STORES_RING, mask, count * ts);
  /* Avg divides every element once the sums are everywhere: same bits on all ranks. */
  return local_avg(p, rb, count);
}

ZCC_PARAM_INT(hostmem_direct, "HOSTMEM_DIRECT", 1,
              "host allreduce on zccMemHostAlloc buffers: 1 reads the peers' inputs and "
              "writes their outputs in place when every rank's buffers are there; 0 stages "
              "through shared memory always (set alike on every rank)");
ZCC_PARAM_INT(hostmem_nt_bytes, "HOSTMEM_NT_BYTES", 2097152,
              "host allreduce in place on zccMemHostAlloc buffers, 2 ranks: from this "
              "size up the reduction writes both outputs with streaming stores (they "
              "bypass the cache; -1: never)");
ZCC_PARAM_INT(hostmem_min_bytes, "HOSTMEM_MIN_BYTES", 1048576,
              "host allreduce: from this size up the ranks first tell each other whether "
              "their buffers are zccMemHostAlloc memory (one small message each way; set "
              "alike on every rank)");

int zcc_hostmem_direct_eligible(const struct zccComm *comm, size_t bytes) {
  if (comm->nranks < 2 || comm->dev || zcc_param_hostmem_direct() != 1) return 0;
  int64_t min = zcc_param_hostmem_min_bytes();
  if (min < 0 || bytes < (size_t)min || bytes == 0) return 0;
  return all_shm(comm);
}

zccResult_t zcc_hostmem_op_get(struct zccComm *comm, zcc_hostmem_op_t **op) {
  if (*op) return zccSuccess;
  size_t n = (size_t)comm->nranks;
  zcc_hostmem_op_t *h = calloc(1, sizeof(*h));
  if (h) {
    h->theirs = calloc(n, sizeof(*h->theirs));
    h->ok_theirs = calloc(n, sizeof(*h->ok_theirs));
    h->bar_theirs = calloc(n, sizeof(*h->bar_theirs));
    h->peer_send = calloc(n, sizeof(*h->peer_send));
    h->peer_recv = calloc(n, sizeof(*h->peer_recv));
    h->st_theirs = calloc(n, sizeof(*h->st_theirs));
    h->st_ok_theirs = calloc(n, sizeof(*h->st_ok_theirs));
  }
  if (!h || !h->theirs || !h->ok_theirs || !h->bar_theirs || !h->peer_send || !h->peer_recv ||
      !h->st_theirs || !h->st_ok_theirs) {
    zcc_hostmem_op_free(h);
    return zcc_error(zccSystemError, "allreduce: out of memory");
  }
  *op = h;
  return zccSuccess;
}

void zcc_hostmem_op_free(zcc_hostmem_op_t *h) {
  if (!h) return;
  free(h->theirs);
  free(h->ok_theirs);
  free(h->bar_theirs);
  free(h->peer_send);
  free(h->peer_recv);
  free(h->st_theirs);
  free(h->st_ok_theirs);
  free(h->scratch);
  free(h);
}

/* One batch: `bytes` from mine to every peer, each peer's into theirs[peer]. */
static zccResult_t exchange_all(zcc_plan_t *p, const void *mine, void *theirs, size_t bytes) {
  int n = p->comm->nranks, r = p->comm->rank;
  ZCC_CHECK(batch_begin(p));
  for (int k = 1; k < n; k++) {
    int peer = mod(r + k, n);
    ZCC_CHECK(send_to(p, peer, mine, bytes));
    ZCC_CHECK(recv_from(p, peer, (char *)theirs + (size_t)peer * bytes, NULL, bytes));
  }
  batch_end(p);
  return zccSuccess;
}

static zccResult_t hostmem_item(zcc_plan_t *p, int step) {
  zcc_item_t it = {.kind = ZCC_ITEM_HOSTMEM, .n = (size_t)step};
  return add_item(p, it);
}

ZCC_PARAM_INT(twoshot_chunk_bytes, "TWOSHOT_CHUNK_BYTES", 0,
              "host two-shot allreduce: bytes of input each rank stages per chunk (its "
              "shared region holds twice that; set alike on every rank); 0: 1 MiB, or "
              "512 KiB / ceil(ranks per CPU) where ranks outnumber CPUs");

static zccResult_t stage_item(zcc_plan_t *p, int step, size_t chunk) {
  zcc_item_t it = {.kind = ZCC_ITEM_HOSTMEM, .n = (size_t)step, .first = (int)chunk};
  return add_item(p, it);
}

/* A barrier on the staging regions' boards (hostmem.h): no message. */
static zccResult_t board_barrier(zcc_plan_t *p) {
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_STAGE_ARRIVE));
  return hostmem_item(p, ZCC_HOSTMEM_STAGE_WAIT);
}

/* The staging regions' chunk: the communicator's once they exist, else
   ZCC_TWOSHOT_CHUNK_BYTES (checked; 0: zcc_twoshot_chunk_auto). */
static zccResult_t stage_chunk_bytes(const struct zccComm *c, size_t *out) {
  if (c->stage_state == 1) {
    *out = c->stage->chunk;
    return zccSuccess;
  }
  int64_t cb = zcc_param_twoshot_chunk_bytes();
  if (cb == 0) {
    *out = zcc_twoshot_chunk_auto(c->select ? c->select->ctx.oversub : 0);
    return zccSuccess;
  }
  if (cb < 4096 || cb > ((int64_t)1 << 30))
    return zcc_error(zccInvalidArgument,
                     "ZCC_TWOSHOT_CHUNK_BYTES=%lld: expected 0 (chosen) or 4096 to 1G",
                     (long long)cb);
  *out = (size_t)cb;
  return zccSuccess;
}

/* A plan's state for steps on the staging regions, with their chunk. */
static zccResult_t stage_op(zcc_plan_t *p, zcc_hostmem_op_t **out) {
  size_t chunk_bytes = 0;
  ZCC_CHECK(stage_chunk_bytes(p->comm, &chunk_bytes));
  ZCC_CHECK(zcc_hostmem_op_get(p->comm, &p->hostmem));
  p->hostmem->st_chunk_bytes = chunk_bytes;
  *out = p->hostmem;
  return zccSuccess;
}

/*
 * Before a plan's steps on the staging regions: in the communicator's first
 * plan that uses them, their setup (made, described, mapped, and the
 * decision every rank takes alike), then what runs where they are not kept
 * (the gather at rank 0 or the ring; now, and from then on without this
 * setup) and a jump over the steps that follow, returned in *jump for the
 * caller to aim at its end. DECIDE jumps to those steps where they are kept.
 */
static zccResult_t stage_prologue(zcc_plan_t *p, const char *sb, char *rb, size_t count,
                                  int gather, int *jump) {
  zcc_hostmem_op_t *h = p->hostmem;
  *jump = -1;
  if (p->comm->stage_state == 0) {
    ZCC_CHECK(stage_item(p, ZCC_HOSTMEM_STAGE_PREP, 0));
    ZCC_CHECK(exchange_all(p, &h->st_mine, h->st_theirs, sizeof(h->st_mine)));
    ZCC_CHECK(stage_item(p, ZCC_HOSTMEM_STAGE_MAP, 0));
    ZCC_CHECK(exchange_all(p, &h->st_ok_mine, h->st_ok_theirs, sizeof(h->st_ok_mine)));
    ZCC_CHECK(stage_item(p, ZCC_HOSTMEM_STAGE_DECIDE, 0));
    p->once = 1; /* this layout holds for this call only */
    ZCC_CHECK(gather ? direct_reduce(p, sb, 0, rb, count, -1)
                     : plan_allreduce_ring(p, sb, rb, count));
    *jump = p->nitems;
    zcc_item_t it = {.kind = ZCC_ITEM_JUMP};
    ZCC_CHECK(add_item(p, it));
  }
  h->st_direct_at = p->nitems;
  return zccSuccess;
}

/*
 * Two-shot allreduce through shared staging regions (hostmem.h,
 * zcc_stage_t): per chunk, the input into the own region, a barrier, the own
 * segment reduced from every region, a barrier, the peers' segments out.
 * The first one on a communicator makes and maps the regions; where some
 * rank cannot, every rank decides alike to run the ring (now and later).
 */
static zccResult_t plan_allreduce_twoshot(zcc_plan_t *p, const char *sb, char *rb,
                                          size_t count) {
  size_t ts = zcc_type_size(p->type);
  zcc_hostmem_op_t *h;
  ZCC_CHECK(stage_op(p, &h));
  size_t chunk = h->st_chunk_bytes / ts, nchunks = (count + chunk - 1) / chunk;
  if (nchunks > INT32_MAX) return plan_allreduce_ring(p, sb, rb, count);
  h->st_sb = sb;
  h->st_rb = rb;
  h->st_count = count;
  h->st_chunk = chunk;
  h->st_nt_ok = staged_nt(p, sb, rb, count * ts, zcc_param_twoshot_nt_bytes());
  h->st_nt = 0;
  if (h->st_nt_ok)
    p->stores_class = 1 + zcc_stores_class(ZCC_STORES_TWOSHOT, ZCC_STORES_OUT, count * ts);
  int jump;
  ZCC_CHECK(stage_prologue(p, sb, rb, count, 0, &jump));
  for (size_t k = 0; k < nchunks; k++) {
    ZCC_CHECK(stage_item(p, ZCC_HOSTMEM_STAGE_IN, k));
    ZCC_CHECK(board_barrier(p));
    ZCC_CHECK(stage_item(p, ZCC_HOSTMEM_STAGE_REDUCE, k));
    ZCC_CHECK(board_barrier(p));
    ZCC_CHECK(stage_item(p, ZCC_HOSTMEM_STAGE_OUT, k));
  }
  if (jump >= 0) p->items[jump].n = (size_t)p->nitems;
  return zccSuccess;
}

/*
 * Whether an allreduce of `bytes` runs on the boards: more ranks than CPUs,
 * every peer over shm, the input within a slot and every rank's read of all
 * the slots (nranks x bytes) within ZCC_STAGE_BOARD_READ. Past that the
 * gather at rank 0 (only rank 0 reads every input) or the two-shot is
 * faster (docs/perf/host.md, 2026-12-05; with the reads overlapped, 16 KiB
 * on 8 ranks and 8 KiB on 4 ran faster there, 16 KiB on 4 slower:
 * 2026-12-06).
 */
static int board_eligible(const zcc_plan_t *p, size_t bytes) {
  const struct zccComm *c = p->comm;
  return c->nranks > 2 && c->oversubscribed && !c->dev && c->stage_state >= 0 &&
         bytes > 0 && bytes <= ZCC_STAGE_SLOT &&
         bytes <= ZCC_STAGE_BOARD_READ / (size_t)c->nranks && all_shm(c);
}

/*
 * The one-barrier allreduce on the boards (hostmem.h): the input into this
 * rank's slot, the barrier, every slot reduced in rank order into the
 * output. Before the regions exist the gather at rank 0 runs (direct_reduce).
 */
static zccResult_t plan_allreduce_board(zcc_plan_t *p, const char *sb, char *rb,
                                        size_t count) {
  zcc_hostmem_op_t *h;
  ZCC_CHECK(stage_op(p, &h));
  h->bd_sb = sb;
  h->bd_rb = rb;
  h->bd_count = count;
  int jump;
  ZCC_CHECK(stage_prologue(p, sb, rb, count, 1, &jump));
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_BOARD_IN));
  ZCC_CHECK(board_barrier(p));
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_BOARD_REDUCE));
  if (jump >= 0) p->items[jump].n = (size_t)p->nitems;
  return zccSuccess;
}

/*
 * Hierarchical plans' sums (comm->hier): the host's inputs gathered at this
 * rank (every other rank of the host's into slot k of `in`, k its local
 * index), and blocks summed in order into dst (block k of `blk`, or `own`
 * for block own_at; -1: none is).
 */
static zccResult_t recv_host_inputs(zcc_plan_t *p, char *in, size_t bytes) {
  const struct zccComm *c = p->comm;
  ZCC_CHECK(batch_begin(p));
  for (int k = 0; k < c->hier_m; k++)
    if (k != c->hier_li)
      ZCC_CHECK(recv_from(p, c->hier_local[k], in + (size_t)k * bytes, NULL, bytes));
  batch_end(p);
  return zccSuccess;
}
static zccResult_t sum_in_order(zcc_plan_t *p, char *dst, const char *blk, int n, int own_at,
                                const char *own, size_t count) {
  size_t bytes = count * zcc_type_size(p->type);
#define BLK(k) ((k) == own_at ? own : blk + (size_t)(k) * bytes)
  ZCC_CHECK(local_reduce(p, dst, BLK(0), BLK(1), count));
  for (int k = 2; k < n; k++) ZCC_CHECK(local_reduce(p, dst, dst, BLK(k), count));
#undef BLK
  return zccSuccess;
}

/*
 * The hierarchical allreduce's leaders' form, for small messages (the model
 * picks the form: cost.c, zcc_host_hier_leaders): each host's ranks send
 * their input to the host's first rank, its leader, which sums them in
 * local order, exchanges that sum with every other host's leader (one
 * round over the network) and sums the hosts' in host order: every leader
 * gets the same bits, and sends them to its host's ranks. Three rounds,
 * one of them across hosts.
 */
static zccResult_t plan_allreduce_leaders(zcc_plan_t *p, const char *sb, char *rb,
                                          size_t count) {
  const struct zccComm *c = p->comm;
  int m = c->hier_m, H = c->hier_h, li = c->hier_li, hi = c->hier_hi;
  size_t bytes = count * zcc_type_size(p->type);
  int leader = c->hier_local[0];
  if (li != 0) {
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(send_to(p, leader, sb, bytes));
    if (ranges_overlap(sb, bytes, rb, bytes)) { /* the sum may land while the send reads */
      ZCC_CHECK(alloc_tmp(p, bytes));
      ZCC_CHECK(recv_from(p, leader, p->tmp, NULL, bytes));
      batch_end(p);
      return local_copy(p, rb, p->tmp, bytes);
    }
    ZCC_CHECK(recv_from(p, leader, rb, NULL, bytes));
    batch_end(p);
    return zccSuccess; /* avg: the leader divided */
  }
  /* tmp: the host's inputs (slot 0 unused), then every host's sum */
  ZCC_CHECK(alloc_tmp(p, (size_t)(m + H) * bytes));
  char *in = p->tmp, *sums = in + (size_t)m * bytes, *own = sums + (size_t)hi * bytes;
  ZCC_CHECK(recv_host_inputs(p, in, bytes));
  ZCC_CHECK(sum_in_order(p, own, in, m, 0, sb, count));
  ZCC_CHECK(batch_begin(p));
  for (int j = 0; j < H; j++) {
    if (j == hi) continue;
    ZCC_CHECK(send_to(p, c->hier_rail[j], own, bytes));
    ZCC_CHECK(recv_from(p, c->hier_rail[j], sums + (size_t)j * bytes, NULL, bytes));
  }
  batch_end(p);
  ZCC_CHECK(sum_in_order(p, rb, sums, H, -1, NULL, count));
  ZCC_CHECK(local_avg(p, rb, count));
  ZCC_CHECK(batch_begin(p));
  for (int k = 1; k < m; k++) ZCC_CHECK(send_to(p, c->hier_local[k], rb, bytes));
  batch_end(p);
  return zccSuccess;
}

/*
 * The hierarchical allreduce (ranks on several hosts, m on each: comm->hier),
 * per chunk of ZCC_RING_CHUNK_BYTES: a ring reduce-scatter inside the host
 * leaves this rank's segment (its local index's) summed over the host; an
 * allreduce of that segment over its rail (a ring reduce-scatter and
 * allgather among the ranks of its local index, one per host) sums it over
 * every host; a ring allgather inside the host hands every rank every
 * segment. Each element is summed at one rank and copied from there, so
 * every rank gets the same bits. Only the rails cross hosts: 2 (H - 1)
 * network steps instead of the flat ring's 2 (n - 1), and each host's link
 * carries 2 (H - 1) / H of the bytes. The three phases are batches of their
 * own (a phase reduces into what the one before filled).
 */
static zccResult_t plan_allreduce_hier(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  const struct zccComm *c = p->comm;
  if (!c->hier_local)
    return zcc_error(zccInternalError, "allreduce: hier chosen on a communicator without "
                     "hierarchical groups");
  if (zcc_host_hier_leaders(&c->select->ctx, count * zcc_type_size(p->type)))
    return plan_allreduce_leaders(p, sb, rb, count);
  int m = c->hier_m, H = c->hier_h, li = c->hier_li, hi = c->hier_hi;
  ring_t local = {m, li, NULL, c->hier_local, 0}, rail = {H, hi, NULL, c->hier_rail, 0};
  size_t ts = zcc_type_size(p->type);
  int64_t cb = zcc_param_ring_chunk_bytes();
  size_t chunk = cb > 0 ? (size_t)cb / ts : count;
  if (chunk < (size_t)(m * H)) chunk = (size_t)(m * H);
  for (size_t off = 0; off < count; off += chunk) {
    size_t cc = count - off < chunk ? count - off : chunk;
    const char *csb = sb + off * ts;
    char *crb = rb + off * ts;
    char *seg = crb + zcc_seg_off(cc, m, li) * ts;
    size_t sc = zcc_seg_cnt(cc, m, li);
    int fin;
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(ring_reduce_scatter(p, &local, csb, cc, 0, crb, NULL, seg, &fin));
    batch_end(p);
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(ring_reduce_scatter(p, &rail, seg, sc, 0, seg, NULL,
                                  seg + zcc_seg_off(sc, H, hi) * ts, &fin));
    ZCC_CHECK(ring_allgather(p, &rail, seg, sc, 0, fin));
    batch_end(p);
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(ring_allgather(p, &local, crb, cc, 0, -1));
    batch_end(p);
  }
  return local_avg(p, rb, count);
}

/* Allreduce through buffers of the library's (every rank's own buffers). */
static zccResult_t plan_allreduce_staged(zcc_plan_t *p, const char *sb, char *rb,
                                         size_t count) {
  if (p->algo == ZCC_ALGO_ONESHOT) {
    if (board_eligible(p, count * zcc_type_size(p->type)))
      return plan_allreduce_board(p, sb, rb, count);
    return direct_reduce(p, sb, 0, rb, count, -1);
  }
  if (p->algo == ZCC_ALGO_HIER) return plan_allreduce_hier(p, sb, rb, count);
  if (p->algo == ZCC_ALGO_TWOSHOT && !p->comm->dev && p->comm->stage_state >= 0 &&
      all_shm(p->comm))
    return plan_allreduce_twoshot(p, sb, rb, count);
  return plan_allreduce_ring(p, sb, rb, count);
}

/*
 * Allreduce on shared host memory (hostmem.h): the ranks tell each other
 * where their buffers are; when every buffer of every rank is in
 * zccMemHostAlloc memory that every rank could map, each rank reduces its
 * segment from all inputs and writes it into all outputs, then a barrier.
 * Otherwise (decided alike on every rank from what they exchanged) the
 * staged plan runs: one small message each way more than without this.
 */
static zccResult_t plan_allreduce_hostmem(zcc_plan_t *p, const char *sb, char *rb,
                                          size_t count) {
  struct zccComm *c = p->comm;
  int n = c->nranks, r = c->rank;
  size_t bytes = count * zcc_type_size(p->type);
  ZCC_CHECK(zcc_hostmem_op_get(c, &p->hostmem));
  zcc_hostmem_op_t *h = p->hostmem;
  h->sendbuf = sb;
  h->recvbuf = rb;
  h->count = count;
  h->seg_off = zcc_seg_off(count, n, r);
  h->seg_cnt = zcc_seg_cnt(count, n, r);
  /* In place, rank r >= 2 would overwrite its own input before reading it
     (the sum starts with ranks 0 and 1): it sums into a scratch piece. */
  h->use_scratch = r >= 2 && ranges_overlap(sb, bytes, rb, bytes);
  int64_t nt = zcc_param_hostmem_nt_bytes();
  h->nt = n == 2 && p->op != zccAvg && nt >= 0 && bytes >= (size_t)nt;
  if (h->use_scratch && !h->scratch) {
    h->scratch = malloc(ZCC_HOSTMEM_PIECE);
    if (!h->scratch)
      return zcc_error(zccSystemError, "allreduce: cannot allocate %d bytes of scratch",
                       ZCC_HOSTMEM_PIECE);
  }
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_PREP));
  ZCC_CHECK(exchange_all(p, &h->mine, h->theirs, sizeof(h->mine)));
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_MAP));
  ZCC_CHECK(exchange_all(p, &h->ok_mine, h->ok_theirs, sizeof(h->ok_mine)));
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_DECIDE));
  h->staged_at = p->nitems;
  ZCC_CHECK(plan_allreduce_staged(p, sb, rb, count));
  int jump = p->nitems;
  zcc_item_t it = {.kind = ZCC_ITEM_JUMP};
  ZCC_CHECK(add_item(p, it));
  h->direct_at = p->nitems;
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_REDUCE));
  ZCC_CHECK(exchange_all(p, &h->bar_mine, h->bar_theirs, sizeof(h->bar_mine)));
  ZCC_CHECK(hostmem_item(p, ZCC_HOSTMEM_FINISH));
  p->items[jump].n = (size_t)p->nitems;
  return zccSuccess;
}

/* For the plan's log line (read only when it is logged). */
static int has_step(const zcc_plan_t *p, int step) {
  for (int i = 0; i < p->nitems; i++)
    if (p->items[i].kind == ZCC_ITEM_HOSTMEM && p->items[i].n == (size_t)step) return 1;
  return 0;
}

/* What the plan's INFO line says about where its bytes go. */
static const char *plan_path(const zcc_plan_t *p) {
  if (has_step(p, ZCC_HOSTMEM_REDUCE))
    return "in place where every rank's buffers are zccMemHostAlloc memory, else staged "
           "through shm buffers";
  const char *setup = p->once ? " once the regions are set up (this call sets them up)" : "";
  static __thread char why[160];
  if (has_step(p, ZCC_HOSTMEM_BOARD_REDUCE))
    snprintf(why, sizeof(why), "on the staging regions' boards, one barrier%s", setup);
  else if (has_step(p, ZCC_HOSTMEM_STAGE_REDUCE))
    snprintf(why, sizeof(why), "through the shared staging regions, two barriers a chunk%s",
             setup);
  else if (p->algo == ZCC_ALGO_HIER && p->coll == ZCC_COLL_ALLGATHER)
    snprintf(why, sizeof(why), "over the rails across %d hosts, then directly inside each host "
             "(%d ranks)", p->comm->hier_h, p->comm->hier_m);
  else if (p->algo == ZCC_ALGO_HIER && p->coll == ZCC_COLL_REDUCESCATTER)
    snprintf(why, sizeof(why), "directly inside each host (%d ranks), then over the rails "
             "across %d hosts", p->comm->hier_m, p->comm->hier_h);
  else if (p->algo == ZCC_ALGO_HIER && p->coll != ZCC_COLL_ALLREDUCE)
    snprintf(why, sizeof(why), "through the root's rank on each of the %d hosts (%d ranks a "
             "host)", p->comm->hier_h, p->comm->hier_m);
  else if (p->algo == ZCC_ALGO_HIER &&
           zcc_host_hier_leaders(&p->comm->select->ctx, (size_t)p->bytes))
    snprintf(why, sizeof(why), "summed by each host's leader (%d ranks a host), exchanged "
             "between the %d hosts' leaders, sent back", p->comm->hier_m, p->comm->hier_h);
  else if (p->algo == ZCC_ALGO_HIER)
    snprintf(why, sizeof(why), "inside each host (%d ranks), over the rails across %d hosts, "
             "inside the host", p->comm->hier_m, p->comm->hier_h);
  else
    return "staged through shm/socket buffers";
  return why;
}

static zccResult_t plan_allreduce(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  size_t bytes = count * zcc_type_size(p->type);
  if (p->comm->nranks == 1) return local_copy(p, rb, sb, bytes);
  if (zcc_hostmem_direct_eligible(p->comm, bytes))
    return plan_allreduce_hostmem(p, sb, rb, count);
  return plan_allreduce_staged(p, sb, rb, count);
}

/* The rank of local index j on host k (hierarchical plans: the host ring
   holds each host's hier_m ranks together, hosts in ring order). */
static int hier_rank(const struct zccComm *c, int k, int j) {
  return c->ring_order[k * c->hier_m + j];
}

/*
 * The hierarchical allgather's and reduce-scatter's round inside the host,
 * into the open batch: to the rank of each other local index j, the H
 * blocks of `src` at the places of the ranks of local index j (for_peer:
 * the reduce-scatter's, which j sums) or of this rank's (the allgather's,
 * what its rail brought); from it, its H blocks into `dst` at their ranks'
 * places (at_rank) or in slots [k][j] (the reduce-scatter's inputs).
 */
static zccResult_t hier_host_round(zcc_plan_t *p, const char *src, int for_peer, char *dst,
                                   int at_rank, size_t bytes) {
  const struct zccComm *c = p->comm;
  int m = c->hier_m, H = c->hier_h, li = c->hier_li;
  for (int d = 1; d < m; d++) {
    int to = (li + d) % m, from = (li - d + m) % m;
    for (int k = 0; k < H; k++)
      ZCC_CHECK(send_to(p, c->hier_local[to],
                        src + (size_t)hier_rank(c, k, for_peer ? to : li) * bytes, bytes));
    for (int k = 0; k < H; k++)
      ZCC_CHECK(recv_from(p, c->hier_local[from],
                          dst + (at_rank ? (size_t)hier_rank(c, k, from)
                                         : (size_t)(k * m + from)) * bytes,
                          NULL, bytes));
  }
  return zccSuccess;
}

/*
 * Hierarchical reduce-scatter (comm->hier): the host's ranks first hand
 * each other, directly (one round), the blocks of each other's rails (the H
 * blocks of the ranks of that local index), and each sums its host's inputs
 * for its rail's blocks in local order; a ring reduce-scatter over the rail
 * then sums those over the hosts into this rank's block. Only the rail
 * crosses hosts: H - 1 network steps, a host's link carrying (H - 1) / H of
 * the input where the flat ring's crossing carries (n - 1) / n.
 */
static zccResult_t plan_reducescatter_hier(zcc_plan_t *p, const char *sb, char *rb,
                                           size_t count) {
  const struct zccComm *c = p->comm;
  int m = c->hier_m, H = c->hier_h, li = c->hier_li, hi = c->hier_hi;
  size_t bytes = count * zcc_type_size(p->type);
  /* tmp: the host's inputs for this rail ([k][j], slots [k][li] unused),
     the host's sums for it ([k]), the rail ring's partial sums (H - 2) */
  ZCC_CHECK(alloc_tmp(p, (size_t)(m * H + H + (H > 2 ? H - 2 : 0)) * bytes));
  char *in = p->tmp, *part = in + (size_t)m * H * bytes, *scr = part + (size_t)H * bytes;
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(hier_host_round(p, sb, 1, in, 0, bytes));
  batch_end(p);
  for (int k = 0; k < H; k++)
    ZCC_CHECK(sum_in_order(p, part + (size_t)k * bytes, in + (size_t)k * m * bytes, m, li,
                           sb + (size_t)hier_rank(c, k, li) * bytes, count));
  ring_t rail = {H, hi, NULL, c->hier_rail, 0};
  int fin;
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(ring_reduce_scatter(p, &rail, part, count, 1, NULL, scr, rb, &fin));
  batch_end(p);
  return local_avg(p, rb, count);
}

static zccResult_t plan_reducescatter(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  ring_t R = comm_ring(p->comm);
  int n = p->comm->nranks;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (n == 1) return local_copy(p, rb, sb, bytes);
  if (p->algo == ZCC_ALGO_ONESHOT) return direct_reduce(p, sb, bytes, rb, count, -1);
  if (p->algo == ZCC_ALGO_HIER) return plan_reducescatter_hier(p, sb, rb, count);
  int final_recv;
  ZCC_CHECK(alloc_tmp(p, (size_t)(n - 2) * bytes));
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(ring_reduce_scatter(p, &R, sb, count, 1, NULL, p->tmp, rb, &final_recv));
  batch_end(p);
  return local_avg(p, rb, count);
}

/* A rank's index among its host's ranks (hierarchical plans: the host ring
   holds each host's hier_m ranks together). */
static int hier_index_of(const struct zccComm *c, int rank) {
  for (int i = 0; i < c->nranks; i++)
    if (c->ring_order[i] == rank) return i % c->hier_m;
  return 0;
}

/*
 * Hierarchical broadcast: the root's rank on every other host (the one of
 * its local index, on the root's rail) relays. The root sends to the relays
 * and to its host's ranks; each relay forwards to its host's ranks as the
 * bytes arrive. One message per host crosses the network.
 */
static zccResult_t plan_broadcast_hier(zcc_plan_t *p, char *rb, size_t count, int root) {
  const struct zccComm *c = p->comm;
  int m = c->hier_m, H = c->hier_h, li = c->hier_li, hi = c->hier_hi;
  int lr = hier_index_of(c, root);
  size_t bytes = count * zcc_type_size(p->type);
  ZCC_CHECK(batch_begin(p));
  if (c->rank == root) { /* its rail is the relays' */
    for (int j = 0; j < H; j++)
      if (j != hi) ZCC_CHECK(send_to(p, c->hier_rail[j], rb, bytes));
    for (int k = 0; k < m; k++)
      if (k != li) ZCC_CHECK(send_to(p, c->hier_local[k], rb, bytes));
  } else if (li == lr) {
    int got;
    ZCC_CHECK(recv_into(p, root, rb, NULL, bytes, &got));
    for (int k = 0; k < m; k++)
      if (k != li) ZCC_CHECK(send_when(p, c->hier_local[k], rb, bytes, got));
  } else {
    ZCC_CHECK(recv_from(p, c->hier_local[lr], rb, NULL, bytes));
  }
  batch_end(p);
  return zccSuccess;
}

/*
 * Hierarchical reduce, the broadcast's mirror: the root's rank on each host
 * (its relay; the root on its own) gathers its host's inputs and sums them
 * in local order, each relay sends that sum to the root, which sums the
 * hosts' in host order. One message per host crosses the network.
 */
static zccResult_t plan_reduce_hier(zcc_plan_t *p, const char *sb, char *rb, size_t count,
                                    int root) {
  const struct zccComm *c = p->comm;
  int m = c->hier_m, H = c->hier_h, li = c->hier_li, hi = c->hier_hi;
  int lr = hier_index_of(c, root);
  size_t bytes = count * zcc_type_size(p->type);
  if (li != lr) {
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(send_to(p, c->hier_local[lr], sb, bytes));
    batch_end(p);
    return zccSuccess;
  }
  /* tmp: the host's inputs (own slot unused), then every host's sum */
  ZCC_CHECK(alloc_tmp(p, (size_t)(m + H) * bytes));
  char *in = p->tmp, *sums = in + (size_t)m * bytes, *own = sums + (size_t)hi * bytes;
  ZCC_CHECK(recv_host_inputs(p, in, bytes));
  ZCC_CHECK(sum_in_order(p, own, in, m, li, sb, count));
  ZCC_CHECK(batch_begin(p));
  if (c->rank != root) {
    ZCC_CHECK(send_to(p, root, own, bytes));
    batch_end(p);
    return zccSuccess;
  }
  for (int j = 0; j < H; j++)
    if (j != hi) ZCC_CHECK(recv_from(p, c->hier_rail[j], sums + (size_t)j * bytes, NULL, bytes));
  batch_end(p);
  ZCC_CHECK(sum_in_order(p, rb, sums, H, -1, NULL, count));
  return local_avg(p, rb, count);
}

static zccResult_t plan_reduce(zcc_plan_t *p, const char *sb, char *rb, size_t count, int root) {
  ring_t R = comm_ring(p->comm);
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (n == 1) return local_copy(p, rb, sb, bytes);
  if (p->algo == ZCC_ALGO_HIER) return plan_reduce_hier(p, sb, rb, count, root);
  if (p->algo == ZCC_ALGO_ONESHOT) return direct_reduce(p, sb, 0, rb, count, root);
  size_t maxseg = zcc_seg_cnt(count, n, 0) * ts;
  ZCC_CHECK(alloc_tmp(p, (size_t)(n - 1) * maxseg));
  char *final = r == root ? rb + zcc_seg_off(count, n, r) * ts
                          : (char *)p->tmp + (size_t)(n - 2) * maxseg;
  int final_recv;
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(ring_reduce_scatter(p, &R, sb, count, 0, NULL, p->tmp, final, &final_recv));
  if (r != root) {
    ZCC_CHECK(send_when(p, root, final, zcc_seg_cnt(count, n, r) * ts, final_recv));
  } else {
    for (int j = 0; j < n; j++)
      if (j != r)
        ZCC_CHECK(recv_from(p, j, rb + zcc_seg_off(count, n, j) * ts, NULL,
                            zcc_seg_cnt(count, n, j) * ts));
  }
  batch_end(p);
  return r == root ? local_avg(p, rb, count) : zccSuccess;
}

static zccResult_t plan_broadcast(zcc_plan_t *p, const char *sb, char *rb, size_t count, int root) {
  ring_t R = comm_ring(p->comm);
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (r == root) ZCC_CHECK(local_copy(p, rb, sb, bytes));
  if (n == 1) return zccSuccess;
  if (p->algo == ZCC_ALGO_HIER) return plan_broadcast_hier(p, rb, count, root);
  if (p->algo == ZCC_ALGO_ONESHOT) {
    ZCC_CHECK(batch_begin(p));
    if (r == root) {
      for (int k = 1; k < n; k++) ZCC_CHECK(send_to(p, mod(r + k, n), rb, bytes));
    } else {
      ZCC_CHECK(recv_from(p, root, rb, NULL, bytes));
    }
    batch_end(p);
    return zccSuccess;
  }
  /* Scatter the segments from the root, then a ring allgather, pipelined. */
  int own = -1;
  ZCC_CHECK(batch_begin(p));
  if (r == root) {
    for (int j = 0; j < n; j++)
      if (j != r)
        ZCC_CHECK(send_to(p, j, rb + zcc_seg_off(count, n, j) * ts, zcc_seg_cnt(count, n, j) * ts));
  } else {
    ZCC_CHECK(recv_into(p, root, rb + zcc_seg_off(count, n, r) * ts, NULL,
                        zcc_seg_cnt(count, n, r) * ts, &own));
  }
  ZCC_CHECK(ring_allgather(p, &R, rb, count, 0, own));
  batch_end(p);
  return zccSuccess;
}

/*
 * Hierarchical allgather (comm->hier), the reduce-scatter's mirror: every
 * rank's block goes around its rail first (a ring allgather among the ranks
 * of its local index, one per host), landing at its rank's place in rb;
 * then the host's ranks hand each other, directly (one round), what their
 * rails brought: H blocks to each of the m - 1 others.
 */
static zccResult_t plan_allgather_hier(zcc_plan_t *p, char *rb, size_t count) {
  const struct zccComm *c = p->comm;
  int H = c->hier_h, hi = c->hier_hi;
  size_t bytes = count * zcc_type_size(p->type);
  ring_t rail = {H, hi, NULL, c->hier_rail, 1};
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(ring_allgather(p, &rail, rb, count, 1, -1));
  batch_end(p);
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(hier_host_round(p, rb, 0, rb, 1, bytes));
  batch_end(p);
  return zccSuccess;
}

static zccResult_t plan_allgather(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  ring_t R = comm_ring(p->comm);
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  ZCC_CHECK(local_copy(p, rb + (size_t)r * bytes, sb, bytes));
  if (n == 1) return zccSuccess;
  if (p->algo == ZCC_ALGO_HIER) return plan_allgather_hier(p, rb, count);
  if (p->algo == ZCC_ALGO_ONESHOT) {
    ZCC_CHECK(batch_begin(p));
    for (int k = 1; k < n; k++) {
      int peer = mod(r + k, n);
      ZCC_CHECK(send_to(p, peer, sb, bytes));
      ZCC_CHECK(recv_from(p, peer, rb + (size_t)peer * bytes, NULL, bytes));
    }
    batch_end(p);
    return zccSuccess;
  }
  ZCC_CHECK(batch_begin(p));
  ZCC_CHECK(ring_allgather(p, &R, rb, count, 1, -1));
  batch_end(p);
  return zccSuccess;
}

static zccResult_t plan_alltoall(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t bytes = count * zcc_type_size(p->type);
  const char *src = sb;
  if (sb == rb && n > 1) {
    /* In place: the blocks to send are overwritten by those received. */
    ZCC_CHECK(alloc_tmp(p, (size_t)n * bytes));
    ZCC_CHECK(local_copy(p, p->tmp, sb, (size_t)n * bytes));
    src = p->tmp;
  }
  ZCC_CHECK(local_copy(p, rb + (size_t)r * bytes, src + (size_t)r * bytes, bytes));
  ZCC_CHECK(batch_begin(p));
  for (int k = 1; k < n; k++) {
    int peer = mod(r + k, n);
    ZCC_CHECK(send_to(p, peer, src + (size_t)peer * bytes, bytes));
    ZCC_CHECK(recv_from(p, peer, rb + (size_t)peer * bytes, NULL, bytes));
  }
  batch_end(p);
  return zccSuccess;
}

zccResult_t zcc_plan_new(struct zccComm *comm, zcc_coll_t coll, zcc_plan_t **out) {
  zcc_plan_t *p = comm->spare_plan;
  if (p) {
    /* Keep the arrays and scratch; forget the contents. */
    comm->spare_plan = NULL;
    zcc_item_t *items = p->items;
    zcc_xfer_t *xfers = p->xfers;
    void *tmp = p->tmp, *pre = p->pre;
    struct zcc_hostmem_op *hostmem = p->hostmem;
    int ci = p->cap_items, cx = p->cap_xfers;
    size_t ct = p->tmp_cap, cp = p->pre_cap;
    memset(p, 0, sizeof(*p));
    p->items = items;
    p->xfers = xfers;
    p->tmp = tmp;
    p->pre = pre;
    p->hostmem = hostmem;
    p->cap_items = ci;
    p->cap_xfers = cx;
    p->tmp_cap = ct;
    p->pre_cap = cp;
  } else {
    p = calloc(1, sizeof(*p));
    if (!p) return zcc_error(zccSystemError, "plan: out of memory");
  }
  p->comm = comm;
  p->coll = coll;
  p->type = zccUint8;
  p->op = zccSum;
  p->algo = ZCC_ALGO_ONESHOT;
  *out = p;
  return zccSuccess;
}

static void plan_destroy(zcc_plan_t *p) {
  free(p->items);
  free(p->xfers);
  free(p->tmp);
  free(p->pre);
  zcc_hostmem_op_free(p->hostmem);
  free(p);
}

void zcc_plan_free(zcc_plan_t *p) {
  if (!p) return;
  struct zccComm *comm = p->comm;
  if (comm && !comm->spare_plan) {
    if (p->tmp_cap > SPARE_TMP_MAX) {
      free(p->tmp);
      p->tmp = NULL;
      p->tmp_cap = 0;
      p->keyed = 0; /* its transfers pointed there */
    }
    if (p->pre_cap > SPARE_TMP_MAX) {
      free(p->pre);
      p->pre = NULL;
      p->pre_cap = 0;
      p->keyed = 0;
    }
    comm->spare_plan = p;
    return;
  }
  plan_destroy(p);
}

void zcc_plan_release_spare(struct zccComm *comm) {
  if (comm->spare_plan) plan_destroy(comm->spare_plan);
  comm->spare_plan = NULL;
}

/* The same call: a plan built for `k` runs `a` as it is. */
static int same_call(const zcc_coll_args_t *k, const zcc_coll_args_t *a) {
  return k->coll == a->coll && k->sendbuf == a->sendbuf && k->recvbuf == a->recvbuf &&
         k->count == a->count && k->type == a->type && k->op == a->op && k->root == a->root &&
         k->scale == a->scale && k->scalar == a->scalar;
}

/* Make a kept plan ready to run again: its items and transfers as built. */
static void plan_rewind(zcc_plan_t *p) {
  for (int i = 0; i < p->nitems; i++) p->items[i].pending = 0;
  for (int i = 0; i < p->nxfers; i++) {
    zcc_xfer_t *x = &p->xfers[i];
    x->done = 0;
    x->avail = x->bytes;
    x->fwd_ready = NULL;
  }
  p->cur = 0;
  p->trace_id = 0;
  p->trace_rec = NULL;
  p->trace_started = 0;
  p->next = NULL;
}

zccResult_t zcc_plan_coll(struct zccComm *comm, const zcc_coll_args_t *a, zcc_plan_t **out) {
  zcc_plan_t *p = comm->spare_plan;
  if (p && p->keyed && same_call(&p->key, a)) {
    /* The call the kept plan was built for (a training loop's or a
       benchmark's repeated call): run it again, nothing to build. */
    comm->spare_plan = NULL;
    plan_rewind(p);
    *out = p;
    return zccSuccess;
  }
  p = NULL;
  ZCC_CHECK(zcc_plan_new(comm, a->coll, &p));
  p->type = a->type;
  p->op = a->op;
  size_t ts = zcc_type_size(a->type);
  /* nccl-tests' size: the per-rank buffer for the collective. */
  size_t bytes = a->count * ts;
  if (a->coll == ZCC_COLL_ALLGATHER || a->coll == ZCC_COLL_REDUCESCATTER ||
      a->coll == ZCC_COLL_ALLTOALL)
    bytes *= (size_t)comm->nranks;
  p->bytes = bytes;
  zcc_choice_t ch;
  zccResult_t res = zcc_select_cached(comm->select, a->coll, bytes, 0, &ch);
  p->algo = ch.algo;
  p->pred_us = ch.time_us;
  if (res != zccSuccess) goto fail;
  const char *sb = a->sendbuf;
  char *rb = a->recvbuf;
  if (a->scale) {
    /* Pre-multiplied sum: scale the input once into the plan's own buffer,
       then run the sum from there (sendbuff stays untouched, in place too). */
    size_t n = a->count * (a->coll == ZCC_COLL_REDUCESCATTER ? (size_t)comm->nranks : 1);
    p->scalar = a->scalar;
    if (n) {
      res = alloc_pre(p, n * ts);
      if (res != zccSuccess) goto fail;
      zcc_item_t it = {.kind = ZCC_ITEM_SCALE, .dst = p->pre, .a = sb, .n = n};
      res = add_item(p, it);
      if (res != zccSuccess) goto fail;
      sb = p->pre;
    }
  }
  switch (a->coll) {
  case ZCC_COLL_ALLREDUCE: res = plan_allreduce(p, sb, rb, a->count); break;
  case ZCC_COLL_BROADCAST: res = plan_broadcast(p, sb, rb, a->count, a->root); break;
  case ZCC_COLL_REDUCE: res = plan_reduce(p, sb, rb, a->count, a->root); break;
  case ZCC_COLL_ALLGATHER: res = plan_allgather(p, sb, rb, a->count); break;
  case ZCC_COLL_REDUCESCATTER: res = plan_reducescatter(p, sb, rb, a->count); break;
  case ZCC_COLL_ALLTOALL: res = plan_alltoall(p, sb, rb, a->count); break;
  default: res = zcc_error(zccInternalError, "plan: collective %d has no planner", a->coll);
  }
  if (res != zccSuccess) goto fail;
  ZCC_INFO(COLL, "%s: %zu elements of %s (%s) on %d ranks via %s, %d steps, %s",
           zcc_coll_name(a->coll), a->count, zcc_type_name(a->type),
           a->scale ? "premulsum" : zcc_op_name(a->op),
           comm->nranks, zcc_algo_name(p->algo), p->nitems,
           plan_path(p));
  p->key = *a;
  p->keyed = !p->once;
  *out = p;
  return zccSuccess;
fail:
  zcc_plan_free(p);
  return res;
}

zccResult_t zcc_plan_p2p(zcc_plan_t *p, int is_recv, int peer, void *buf, size_t bytes) {
  if (!p->open_batch) ZCC_CHECK(batch_begin(p));
  if (peer != p->comm->rank) return add_xfer(p, is_recv, peer, buf, buf, NULL, bytes, -1, NULL);
  if (bytes == 0) return zccSuccess;
  /* Self: kept as a transfer with no connection, paired by zcc_plan_p2p_finish. */
  return add_xfer(p, is_recv, peer, buf, is_recv ? buf : NULL, NULL, bytes, -1, NULL);
}

/*
 * A send whose bytes a receive of the same group overwrites (zccSend and
 * zccRecv on one buffer, as sendrecv_perf's in-place case): its data is
 * copied aside before the transfers start, so that it sends what the buffer
 * held at the call whatever order the transfers move in.
 */
static zccResult_t stage_aliased_sends(zcc_plan_t *p) {
  const char *lo = NULL, *hi = NULL;
  for (int i = 0; i < p->nxfers; i++) {
    const zcc_xfer_t *x = &p->xfers[i];
    if (!x->is_recv || !x->bytes) continue;
    const char *d = x->dst;
    if (!lo || d < lo) lo = d;
    if (!hi || d + x->bytes > hi) hi = d + x->bytes;
  }
  if (!lo) return zccSuccess;
  size_t total = 0;
  int nstaged = 0;
  for (int pass = 0; pass < 2; pass++) {
    size_t off = 0;
    for (int i = 0; i < p->nxfers; i++) {
      zcc_xfer_t *x = &p->xfers[i];
      if (x->is_recv || !ranges_overlap(x->src, x->bytes, lo, (size_t)(hi - lo)))
        continue;
      int aliased = 0;
      for (int j = 0; j < p->nxfers && !aliased; j++)
        aliased = p->xfers[j].is_recv &&
                  ranges_overlap(x->src, x->bytes, p->xfers[j].dst, p->xfers[j].bytes);
      if (!aliased) continue;
      size_t at = (off + 63) / 64 * 64;
      if (pass == 0) {
        total = at + x->bytes;
        nstaged++;
      } else {
        char *tmp = (char *)p->tmp + at;
        /* the copies go first: before the batch of transfers */
        ZCC_CHECK(grow((void **)&p->items, &p->cap_items, p->nitems + 1, sizeof(zcc_item_t)));
        memmove(p->items + 1, p->items, sizeof(zcc_item_t) * (size_t)p->nitems);
        p->items[0] = (zcc_item_t){.kind = ZCC_ITEM_COPY, .dst = tmp, .a = x->src, .n = x->bytes};
        p->nitems++;
        x->src = tmp;
      }
      off = at + x->bytes;
    }
    if (pass == 0) {
      if (!nstaged) return zccSuccess;
      ZCC_CHECK(alloc_tmp(p, total));
    }
  }
  return zccSuccess;
}

zccResult_t zcc_plan_p2p_finish(zcc_plan_t *p) {
  batch_end(p);
  ZCC_CHECK(stage_aliased_sends(p));
  /* Pair sends to self with receives from self, in order, as copies. */
  int nsend = 0, nrecv = 0;
  for (int i = 0; i < p->nxfers; i++)
    if (!p->xfers[i].conn) {
      if (p->xfers[i].is_recv) nrecv++;
      else nsend++;
    }
  if (nsend != nrecv)
    return zcc_error(zccInvalidUsage,
                     "%d send(s) to self but %d receive(s) from self in one group", nsend,
                     nrecv);
  if (nsend == 0) return zccSuccess;
  int si = 0, ri = 0;
  for (int k = 0; k < nsend; k++) {
    while (p->xfers[si].conn || p->xfers[si].is_recv) si++;
    while (p->xfers[ri].conn || !p->xfers[ri].is_recv) ri++;
    if (p->xfers[si].bytes != p->xfers[ri].bytes)
      return zcc_error(zccInvalidUsage, "send to self of %zu bytes meets a receive of %zu bytes",
                       p->xfers[si].bytes, p->xfers[ri].bytes);
    ZCC_CHECK(local_copy(p, p->xfers[ri].dst, p->xfers[si].src, p->xfers[si].bytes));
    p->xfers[si].done = p->xfers[si].bytes;
    p->xfers[ri].done = p->xfers[ri].bytes;
    si++;
    ri++;
  }
  return zccSuccess;
}
