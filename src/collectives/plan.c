/*
 * Plans for host collectives. Segments of a ring are balanced element
 * ranges; every rank computes the same partition, so both ends of a
 * transfer agree on its size. Reductions of the direct algorithms run in
 * rank order on every rank, and ring segments are reduced once and then
 * copied, so allreduce results are bitwise identical on all ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "reduce.h"

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

/* A transfer in the open batch; zero bytes add nothing. */
static zccResult_t add_xfer(zcc_plan_t *p, int is_recv, int peer, const void *src,
                            void *dst, const void *red, size_t bytes) {
  if (bytes == 0) return zccSuccess;
  ZCC_CHECK(grow((void **)&p->xfers, &p->cap_xfers, p->nxfers + 1, sizeof(zcc_xfer_t)));
  zcc_item_t *it = &p->items[p->nitems - 1];
  zcc_xfer_t x = {.conn = peer == p->comm->rank ? NULL : p->comm->conns[peer],
                  .is_recv = is_recv, .src = src, .dst = dst, .red = red,
                  .type = p->type, .op = p->op, .bytes = bytes, .after = -1};
  for (int i = it->first + it->count - 1; i >= it->first; i--) {
    if (x.conn && p->xfers[i].conn == x.conn && p->xfers[i].is_recv == is_recv) {
      x.after = i;
      break;
    }
  }
  p->xfers[p->nxfers++] = x;
  it->count++;
  return zccSuccess;
}

static zccResult_t send_to(zcc_plan_t *p, int peer, const void *src, size_t bytes) {
  return add_xfer(p, 0, peer, src, NULL, NULL, bytes);
}
static zccResult_t recv_from(zcc_plan_t *p, int peer, void *dst, const void *red,
                             size_t bytes) {
  return add_xfer(p, 1, peer, NULL, dst, red, bytes);
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
  if (bytes == 0) return zccSuccess;
  p->tmp = malloc(bytes);
  if (!p->tmp) return zcc_error(zccSystemError, "%s: cannot allocate %zu bytes of scratch",
                                zcc_coll_name(p->coll), bytes);
  return zccSuccess;
}

static size_t seg_off(size_t count, int n, int i) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return base * (size_t)i + ((size_t)i < rem ? (size_t)i : rem);
}
static size_t seg_cnt(size_t count, int n, int i) {
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}
static int mod(int a, int n) { return ((a % n) + n) % n; }

/*
 * Reduce `srcs[0..n-1]` (srcs[me] may be in dst: then it is copied to the
 * scratch slot first) into dst, in rank order.
 */
static zccResult_t reduce_in_order(zcc_plan_t *p, char *dst, const char **srcs, char *own_copy,
                                   size_t count) {
  int n = p->comm->nranks, me = p->comm->rank;
  size_t bytes = count * zcc_type_size(p->type);
  if (srcs[me] == dst && n > 2) {
    ZCC_CHECK(local_copy(p, own_copy, dst, bytes));
    srcs[me] = own_copy;
  }
  ZCC_CHECK(local_reduce(p, dst, srcs[0], srcs[1], count));
  for (int i = 2; i < n; i++) ZCC_CHECK(local_reduce(p, dst, dst, srcs[i], count));
  return zccSuccess;
}

/*
 * Ring reduce-scatter over `n` segments of `seg(i)` elements at `off(i)`.
 * Rank r ends with segment r fully reduced in final_dst. Intermediate
 * partial results go to dst_of(i) when inter != NULL (allreduce: recvbuf)
 * or alternate between two scratch halves.
 */
static zccResult_t ring_reduce_scatter(zcc_plan_t *p, const char *sendbuf, size_t count,
                                       int blocks, char *inter, char *scratch, char *final_dst) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type);
  int next = mod(r + 1, n), prev = mod(r - 1, n);
  size_t maxseg = (blocks ? count : seg_cnt(count, n, 0)) * ts;
  const char *last_sent_from = NULL;
  for (int s = 0; s <= n - 2; s++) {
    int sseg = mod(r - 1 - s, n), rseg = mod(r - 2 - s, n);
    size_t soff = (blocks ? (size_t)sseg * count : seg_off(count, n, sseg)) * ts;
    size_t sbytes = (blocks ? count : seg_cnt(count, n, sseg)) * ts;
    size_t roff = (blocks ? (size_t)rseg * count : seg_off(count, n, rseg)) * ts;
    size_t rbytes = (blocks ? count : seg_cnt(count, n, rseg)) * ts;
    const char *src = s == 0 ? sendbuf + soff : last_sent_from;
    char *dst;
    if (s == n - 2) dst = final_dst;
    else if (inter) dst = inter + roff;
    else dst = scratch + (size_t)(s % 2) * maxseg;
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(send_to(p, next, src, sbytes));
    ZCC_CHECK(recv_from(p, prev, dst, sendbuf + roff, rbytes));
    batch_end(p);
    last_sent_from = dst;
  }
  return zccSuccess;
}

/* Ring allgather of n segments already placed in buf (segment r present). */
static zccResult_t ring_allgather(zcc_plan_t *p, char *buf, size_t count, int blocks) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type);
  int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (int s = 0; s <= n - 2; s++) {
    int sseg = mod(r - s, n), rseg = mod(r - s - 1, n);
    size_t soff = (blocks ? (size_t)sseg * count : seg_off(count, n, sseg)) * ts;
    size_t sbytes = (blocks ? count : seg_cnt(count, n, sseg)) * ts;
    size_t roff = (blocks ? (size_t)rseg * count : seg_off(count, n, rseg)) * ts;
    size_t rbytes = (blocks ? count : seg_cnt(count, n, rseg)) * ts;
    ZCC_CHECK(batch_begin(p));
    ZCC_CHECK(send_to(p, next, buf + soff, sbytes));
    ZCC_CHECK(recv_from(p, prev, buf + roff, NULL, rbytes));
    batch_end(p);
  }
  return zccSuccess;
}

static zccResult_t plan_allreduce(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (n == 1) return local_copy(p, rb, sb, bytes);
  if (p->algo == ZCC_ALGO_DIRECT) {
    ZCC_CHECK(alloc_tmp(p, (size_t)n * bytes));
    char *tmp = p->tmp;
    ZCC_CHECK(batch_begin(p));
    for (int k = 1; k < n; k++) {
      int peer = mod(r + k, n);
      ZCC_CHECK(send_to(p, peer, sb, bytes));
      ZCC_CHECK(recv_from(p, peer, tmp + (size_t)peer * bytes, NULL, bytes));
    }
    batch_end(p);
    const char **srcs = calloc((size_t)n, sizeof(*srcs));
    if (!srcs) return zcc_error(zccSystemError, "allreduce: out of memory");
    for (int i = 0; i < n; i++) srcs[i] = i == r ? sb : tmp + (size_t)i * bytes;
    zccResult_t res = reduce_in_order(p, rb, srcs, tmp + (size_t)r * bytes, count);
    free(srcs);
    ZCC_CHECK(res);
    return local_avg(p, rb, count);
  }
  ZCC_CHECK(ring_reduce_scatter(p, sb, count, 0, rb, NULL, rb + seg_off(count, n, r) * ts));
  ZCC_CHECK(local_avg(p, rb + seg_off(count, n, r) * ts, seg_cnt(count, n, r)));
  return ring_allgather(p, rb, count, 0);
}

static zccResult_t plan_reducescatter(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (n == 1) return local_copy(p, rb, sb, bytes);
  if (p->algo == ZCC_ALGO_DIRECT) {
    ZCC_CHECK(alloc_tmp(p, (size_t)n * bytes));
    char *tmp = p->tmp;
    ZCC_CHECK(batch_begin(p));
    for (int k = 1; k < n; k++) {
      int peer = mod(r + k, n);
      ZCC_CHECK(send_to(p, peer, sb + (size_t)peer * bytes, bytes));
      ZCC_CHECK(recv_from(p, peer, tmp + (size_t)peer * bytes, NULL, bytes));
    }
    batch_end(p);
    const char **srcs = calloc((size_t)n, sizeof(*srcs));
    if (!srcs) return zcc_error(zccSystemError, "reducescatter: out of memory");
    for (int i = 0; i < n; i++) srcs[i] = i == r ? sb + (size_t)r * bytes : tmp + (size_t)i * bytes;
    zccResult_t res = reduce_in_order(p, rb, srcs, tmp + (size_t)r * bytes, count);
    free(srcs);
    ZCC_CHECK(res);
    return local_avg(p, rb, count);
  }
  ZCC_CHECK(alloc_tmp(p, 2 * bytes));
  ZCC_CHECK(ring_reduce_scatter(p, sb, count, 1, NULL, p->tmp, rb));
  return local_avg(p, rb, count);
}

static zccResult_t plan_reduce(zcc_plan_t *p, const char *sb, char *rb, size_t count, int root) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (n == 1) return local_copy(p, rb, sb, bytes);
  if (p->algo == ZCC_ALGO_DIRECT) {
    if (r != root) {
      ZCC_CHECK(batch_begin(p));
      ZCC_CHECK(send_to(p, root, sb, bytes));
      batch_end(p);
      return zccSuccess;
    }
    ZCC_CHECK(alloc_tmp(p, (size_t)n * bytes));
    char *tmp = p->tmp;
    ZCC_CHECK(batch_begin(p));
    for (int k = 1; k < n; k++) {
      int peer = mod(r + k, n);
      ZCC_CHECK(recv_from(p, peer, tmp + (size_t)peer * bytes, NULL, bytes));
    }
    batch_end(p);
    const char **srcs = calloc((size_t)n, sizeof(*srcs));
    if (!srcs) return zcc_error(zccSystemError, "reduce: out of memory");
    for (int i = 0; i < n; i++) srcs[i] = i == r ? sb : tmp + (size_t)i * bytes;
    zccResult_t res = reduce_in_order(p, rb, srcs, tmp + (size_t)r * bytes, count);
    free(srcs);
    ZCC_CHECK(res);
    return local_avg(p, rb, count);
  }
  size_t maxseg = seg_cnt(count, n, 0) * ts;
  ZCC_CHECK(alloc_tmp(p, 3 * maxseg));
  char *final = r == root ? rb + seg_off(count, n, r) * ts : (char *)p->tmp + 2 * maxseg;
  ZCC_CHECK(ring_reduce_scatter(p, sb, count, 0, NULL, p->tmp, final));
  ZCC_CHECK(local_avg(p, final, seg_cnt(count, n, r)));
  ZCC_CHECK(batch_begin(p));
  if (r != root) {
    ZCC_CHECK(send_to(p, root, final, seg_cnt(count, n, r) * ts));
  } else {
    for (int j = 0; j < n; j++)
      if (j != r)
        ZCC_CHECK(recv_from(p, j, rb + seg_off(count, n, j) * ts, NULL, seg_cnt(count, n, j) * ts));
  }
  batch_end(p);
  return zccSuccess;
}

static zccResult_t plan_broadcast(zcc_plan_t *p, const char *sb, char *rb, size_t count, int root) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  if (r == root) ZCC_CHECK(local_copy(p, rb, sb, bytes));
  if (n == 1) return zccSuccess;
  if (p->algo == ZCC_ALGO_DIRECT) {
    ZCC_CHECK(batch_begin(p));
    if (r == root) {
      for (int k = 1; k < n; k++) ZCC_CHECK(send_to(p, mod(r + k, n), rb, bytes));
    } else {
      ZCC_CHECK(recv_from(p, root, rb, NULL, bytes));
    }
    batch_end(p);
    return zccSuccess;
  }
  /* Scatter the segments from the root, then a ring allgather. */
  ZCC_CHECK(batch_begin(p));
  if (r == root) {
    for (int j = 0; j < n; j++)
      if (j != r) ZCC_CHECK(send_to(p, j, rb + seg_off(count, n, j) * ts, seg_cnt(count, n, j) * ts));
  } else {
    ZCC_CHECK(recv_from(p, root, rb + seg_off(count, n, r) * ts, NULL, seg_cnt(count, n, r) * ts));
  }
  batch_end(p);
  return ring_allgather(p, rb, count, 0);
}

static zccResult_t plan_allgather(zcc_plan_t *p, const char *sb, char *rb, size_t count) {
  int n = p->comm->nranks, r = p->comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = count * ts;
  ZCC_CHECK(local_copy(p, rb + (size_t)r * bytes, sb, bytes));
  if (n == 1) return zccSuccess;
  if (p->algo == ZCC_ALGO_DIRECT) {
    ZCC_CHECK(batch_begin(p));
    for (int k = 1; k < n; k++) {
      int peer = mod(r + k, n);
      ZCC_CHECK(send_to(p, peer, sb, bytes));
      ZCC_CHECK(recv_from(p, peer, rb + (size_t)peer * bytes, NULL, bytes));
    }
    batch_end(p);
    return zccSuccess;
  }
  return ring_allgather(p, rb, count, 1);
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
  zcc_plan_t *p = calloc(1, sizeof(*p));
  if (!p) return zcc_error(zccSystemError, "plan: out of memory");
  p->comm = comm;
  p->coll = coll;
  p->type = zccUint8;
  p->op = zccSum;
  p->algo = ZCC_ALGO_DIRECT;
  *out = p;
  return zccSuccess;
}

void zcc_plan_free(zcc_plan_t *p) {
  if (!p) return;
  free(p->items);
  free(p->xfers);
  free(p->tmp);
  free(p);
}

zccResult_t zcc_plan_coll(struct zccComm *comm, const zcc_coll_args_t *a, zcc_plan_t **out) {
  zcc_plan_t *p = NULL;
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
  zccResult_t res = zcc_tuning_pick(comm, a->coll, bytes, &p->algo);
  if (res != zccSuccess) goto fail;
  const char *sb = a->sendbuf;
  char *rb = a->recvbuf;
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
  ZCC_INFO(COLL, "%s: %zu elements of %s (%s) on %d ranks via %s, %d steps, staged through shm/socket buffers",
           zcc_coll_name(a->coll), a->count, zcc_type_name(a->type), zcc_op_name(a->op),
           comm->nranks, zcc_algo_name(p->algo), p->nitems);
  *out = p;
  return zccSuccess;
fail:
  zcc_plan_free(p);
  return res;
}

zccResult_t zcc_plan_p2p(zcc_plan_t *p, int is_recv, int peer, void *buf, size_t bytes) {
  if (!p->open_batch) ZCC_CHECK(batch_begin(p));
  if (peer != p->comm->rank) return add_xfer(p, is_recv, peer, buf, buf, NULL, bytes);
  if (bytes == 0) return zccSuccess;
  /* Self: kept as a transfer with no connection, paired by zcc_plan_p2p_finish. */
  return add_xfer(p, is_recv, peer, buf, is_recv ? buf : NULL, NULL, bytes);
}

zccResult_t zcc_plan_p2p_finish(zcc_plan_t *p) {
  batch_end(p);
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
