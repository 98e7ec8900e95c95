/*
 * The host executor: runs chains of plans, one chain per communicator,
 * progressing every runnable transfer without blocking, so that transfers
 * that depend on each other across ranks (and across communicators driven
 * by one thread in a group) all move. While nothing moves it spins briefly,
 * then yields, then sleeps; it checks aborts, dead peers and the
 * communicator's timeout (no progress for ZCC_TIMEOUT ms) as it waits.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "hostmem.h"
#include "reduce.h"
#include "trace.h"

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/*
 * Unbound ranks that do not outnumber their CPUs (comm->nudge) wait by
 * yielding. Where the scheduler has put two of them on one CPU, each wait
 * hands the core to the other and every exchange costs two context
 * switches (8 B allreduce, 2 ranks on the 2-core VM: 5.9 us against 0.45
 * us on two CPUs, from one run to the next, docs/perf/host.md); the
 * kernel's balancer keeps such busy, cache-hot tasks where they are. A
 * yield that comes back after NUDGE_LONG_NS gave the core to another task:
 * after a run of those the thread moves to another of its CPUs (its mask
 * without this CPU for a moment, then the mask as it was), at most once per
 * NUDGE_GAP_NS, so that a busy process on the other core cannot make it
 * move back and forth often. Two ranks sharing a CPU must not both move,
 * together, to the same other one (the first one's move itself makes the
 * other's next yield long): the run's length is NUDGE_YIELDS, plus 16 per
 * step of the rank (mod 8), plus a random multiple of 4 up to 12, so the
 * lower rank of a pair moves first, about 50 us into its first wait there
 * (a longer random run, 16-268, let the first row of a sweep read 0.57-0.68
 * us at 8 B against 0.44-0.50 at 64 B).
 */
#define NUDGE_LONG_NS 2000
#define NUDGE_YIELDS 8
#define NUDGE_GAP_NS 10000000ll
static __thread int nudge_long, nudge_want; /* long yields in a row; how many move it */
static __thread int64_t nudge_last_ns;
static __thread uint64_t nudge_rand;

static void nudge_yield(int rank) {
  int64_t t0 = zcc_now_ns();
  sched_yield();
  int64_t t1 = zcc_now_ns();
  if (t1 - t0 < NUDGE_LONG_NS) {
    nudge_long = 0;
    return;
  }
  if (!nudge_want) {
    if (!nudge_rand) nudge_rand = (uint64_t)t1 ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)&nudge_rand;
    nudge_rand ^= nudge_rand << 13, nudge_rand ^= nudge_rand >> 7, nudge_rand ^= nudge_rand << 17;
    nudge_want = NUDGE_YIELDS + 16 * (rank & 7) + 4 * (int)(nudge_rand & 3);
  }
  if (++nudge_long < nudge_want || (nudge_last_ns && t1 - nudge_last_ns < NUDGE_GAP_NS))
    return;
  nudge_long = nudge_want = 0;
  nudge_last_ns = t1;
  cpu_set_t mine, other;
  int cpu = sched_getcpu();
  if (cpu < 0 || sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) < 2 ||
      !CPU_ISSET(cpu, &mine))
    return;
  other = mine;
  CPU_CLR(cpu, &other);
  if (sched_setaffinity(0, sizeof(other), &other) == 0) {
    (void)sched_setaffinity(0, sizeof(mine), &mine);
    ZCC_INFO(INIT, "a waiting rank kept handing CPU %d to another task: moved to CPU %d", cpu,
             sched_getcpu());
  }
}

typedef struct chain_state {
  zcc_plan_t *plan;
  struct zccComm *comm;
  int moved;           /* since the last check */
  int64_t last_progress_ns;
  int64_t link_checked_ns; /* the bootstrap's link check, while waiting */
  /* Recorded plans: since when nothing moved, in which plan, on which peer. */
  int64_t idle_ns;     /* 0: moving; IDLE_UNTIMED: waiting, not timed yet */
  zcc_plan_t *idle_plan;
  int idle_peer;
} chain_state_t;

static zccResult_t run_local(zcc_plan_t *p, const zcc_item_t *it) {
  switch (it->kind) {
  case ZCC_ITEM_COPY: memmove(it->dst, it->a, it->n); break;
  case ZCC_ITEM_REDUCE: zcc_reduce(it->dst, it->a, it->b, it->n, p->type, p->op); break;
  case ZCC_ITEM_AVG: zcc_reduce_finish_avg(it->dst, it->dst, it->n, p->type, p->comm->nranks); break;
  case ZCC_ITEM_SCALE: zcc_reduce_scale(it->dst, it->a, it->n, p->type, &p->scalar); break;
  default: return zcc_error(zccInternalError, "executor: unknown item kind %d", it->kind);
  }
  return zccSuccess;
}

/* The bytes a signature's call moves per rank (for its description). */
static uint64_t sig_bytes(const zcc_op_sig_t *s) {
  return s->type >= 0 && s->type < zccNumTypes ? s->count * zcc_type_size((zccDataType_t)s->type)
                                               : 0;
}

/* The last error again, under the plan's collective ("allreduce: ..."), or
   with the peer it concerns ("allreduce with rank 1 failed: ..."; peer >= 0). */
static zccResult_t coll_error(const zcc_plan_t *p, int peer, zccResult_t res) {
  char cause[512];
  snprintf(cause, sizeof(cause), "%s", zcc_last_error());
  if (peer < 0) return zcc_error(res, "%s: %s", zcc_coll_name(p->coll), cause);
  return zcc_error(res, "%s with rank %d failed: %s", zcc_coll_name(p->coll), peer, cause);
}

/* Bytes waiting from `peer` that the current call does not receive. */
static zccResult_t board_stray(zcc_plan_t *p, int peer) {
  zcc_conn_t *conn = p->comm->conns[peer];
  zccResult_t res = conn && conn->ops->stray ? conn->ops->stray(conn, &p->sig) : zccSuccess;
  return res == zccSuccess ? res : coll_error(p, peer, res);
}

/*
 * The two-shot allreduce's steps (hostmem.h, zcc_stage_t; exec/host_plan.c
 * lays them out, the chunk in item.first).
 */
static zccResult_t zcc_stage_step(zcc_plan_t *p, int step, int *jump) {
  zcc_hostmem_op_t *h = p->hostmem;
  struct zccComm *comm = p->comm;
  int n = comm->nranks, r = comm->rank;
  size_t ts = zcc_type_size(p->type);
  const zcc_item_t *it = &p->items[p->cur];
  size_t off = (size_t)it->first * h->st_chunk;
  size_t c = h->st_count - off < h->st_chunk ? h->st_count - off : h->st_chunk;
  zcc_stage_t *st = comm->stage;
  switch (step) {
  case ZCC_HOSTMEM_STAGE_PREP:
    zcc_stage_prepare(comm, h->st_chunk_bytes, &h->st_mine);
    return zccSuccess;
  case ZCC_HOSTMEM_STAGE_MAP: /* 0 where a region is missing, own or a peer's */
    h->st_ok_mine = zcc_stage_map(comm, h->st_theirs);
    return zccSuccess;
  case ZCC_HOSTMEM_STAGE_DECIDE: {
    int all = h->st_ok_mine == 1;
    for (int k = 0; k < n && all; k++)
      if (k != r && h->st_ok_theirs[k] != 1) all = 0;
    zcc_stage_decide(comm, all);
    if (all) *jump = h->st_direct_at;
    return zccSuccess;
  }
  case ZCC_HOSTMEM_STAGE_IN:
    memcpy(st->mine, h->st_sb + off * ts, c * ts);
    return zccSuccess;
  case ZCC_HOSTMEM_STAGE_REDUCE: {
    /* Rank order, as every other allreduce path of a rank's segment; the
       output is private and the input staged already, so in place too. */
    size_t so = zcc_seg_off(c, n, r), sc = zcc_seg_cnt(c, n, r);
    size_t piece = ZCC_HOSTMEM_PIECE / ts;
    for (size_t i = 0; i < sc; i += piece) {
      size_t m = sc - i < piece ? sc - i : piece, at = (so + i) * ts;
      char *dst = h->st_rb + off * ts + at;
      zcc_reduce(dst, st->peer[0] + at, st->peer[1] + at, m, p->type, p->op);
      for (int k = 2; k < n; k++) zcc_reduce(dst, dst, st->peer[k] + at, m, p->type, p->op);
      if (p->op == zccAvg) zcc_reduce_finish_avg(dst, dst, m, p->type, n);
      memcpy(st->mine + st->chunk + at, dst, m * ts);
    }
    return zccSuccess;
  }
  case ZCC_HOSTMEM_STAGE_OUT:
    for (int k = 1; k < n; k++) {
      int q = (r + k) % n;
      size_t at = zcc_seg_off(c, n, q) * ts;
      char *dst = h->st_rb + off * ts + at;
      const char *src = st->peer[q] + st->chunk + at;
      if (h->st_nt) zcc_copy_nt(dst, src, zcc_seg_cnt(c, n, q) * ts);
      else memcpy(dst, src, zcc_seg_cnt(c, n, q) * ts);
    }
    return zccSuccess;
  case ZCC_HOSTMEM_STAGE_ARRIVE: {
    /* No peer can be past this barrier yet: bytes waiting from one belong
       to a call this rank does not make. */
    for (int k = 1; k < n; k++)
      ZCC_CHECK(board_stray(p, (r + k) % n));
    zcc_stage_line_t *l = zcc_stage_line(st->mine, st->chunk, ++st->bars);
    l->sig = p->sig;
    __atomic_store_n(&l->bar, st->bars, __ATOMIC_RELEASE);
    return zccSuccess;
  }
  case ZCC_HOSTMEM_STAGE_WAIT:
    /* Every rank's line asked for at once: the misses on the lines other
       CPUs wrote overlap instead of coming one after another (4 ranks on 2
       CPUs, 8 B: 0.1-0.2 us per call, docs/perf/host.md). */
    for (int k = 0; k < n; k++)
      __builtin_prefetch(zcc_stage_line(st->peer[k], st->chunk, st->bars));
    /* From the rank last found missing: the one most likely still out. */
    for (int k = 0; k < n; k++) {
      int q = (h->st_waiting + k) % n;
      zcc_stage_line_t *l = zcc_stage_line(st->peer[q], st->chunk, st->bars);
      if (__atomic_load_n(&l->bar, __ATOMIC_ACQUIRE) != st->bars) {
        /* Not there: it may be running a call that sends instead. */
        ZCC_CHECK(board_stray(p, q));
        h->st_waiting = q;
        *jump = ZCC_HOSTMEM_NOT_YET;
        return zccSuccess;
      }
      if (q != r && !zcc_opsig_same(&l->sig, &p->sig)) {
        zcc_op_sig_t t = l->sig;
        return coll_error(p, q, zcc_opsig_mismatch(&t, sig_bytes(&t), q, &p->sig,
                                                   sig_bytes(&p->sig), r));
      }
    }
    h->st_waiting = 0;
    if (p->cur + 1 < p->nitems && p->items[p->cur + 1].kind == ZCC_ITEM_HOSTMEM &&
        p->items[p->cur + 1].n == ZCC_HOSTMEM_BOARD_REDUCE) {
      /* The same for the slots the reduction reads next. */
      size_t bytes = h->bd_count * ts;
      for (int k = 0; k < n; k++) {
        const char *slot = zcc_stage_slot(st->peer[k], st->chunk, h->bd_parity);
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(slot + b);
      }
    }
    return zccSuccess;
  case ZCC_HOSTMEM_BOARD_IN:
    h->bd_parity = (int)(st->boards++ & 1);
    memcpy(zcc_stage_slot(st->mine, st->chunk, h->bd_parity), h->bd_sb, h->bd_count * ts);
    return zccSuccess;
  case ZCC_HOSTMEM_BOARD_REDUCE: {
    /* Rank order, every rank alike: the same bits on all of them. */
    int par = h->bd_parity;
    zcc_reduce(h->bd_rb, zcc_stage_slot(st->peer[0], st->chunk, par),
               zcc_stage_slot(st->peer[1], st->chunk, par), h->bd_count, p->type, p->op);
    for (int k = 2; k < n; k++)
      zcc_reduce(h->bd_rb, h->bd_rb, zcc_stage_slot(st->peer[k], st->chunk, par), h->bd_count,
                 p->type, p->op);
    if (p->op == zccAvg) zcc_reduce_finish_avg(h->bd_rb, h->bd_rb, h->bd_count, p->type, n);
    return zccSuccess;
  }
  default:
    return zcc_error(zccInternalError, "executor: unknown shared-memory step %d", step);
  }
}

/* A board barrier's wait (ZCC_HOSTMEM_STAGE_WAIT): the rank not there yet. */
static int board_waiting(const zcc_plan_t *p) {
  if (p->cur >= p->nitems) return -1;
  const zcc_item_t *it = &p->items[p->cur];
  if (it->kind != ZCC_ITEM_HOSTMEM || it->n != ZCC_HOSTMEM_STAGE_WAIT || !p->hostmem) return -1;
  return p->hostmem->st_waiting;
}

/*
 * The direct allreduce's steps (hostmem.h; exec/host_plan.c lays them out):
 * where this rank's buffers are, the peers' mapped, the decision every rank
 * takes alike, and the reduction of this rank's segment into every output.
 */
zccResult_t zcc_hostmem_step(zcc_plan_t *p, int step, int *jump) {
  zcc_hostmem_op_t *h = p->hostmem;
  struct zccComm *comm = p->comm;
  int n = comm->nranks, r = comm->rank;
  size_t ts = zcc_type_size(p->type), bytes = h->count * ts;
  *jump = -1;
  switch (step) {
  case ZCC_HOSTMEM_PREP:
    zcc_hostmem_find(h->sendbuf, bytes, &h->mine.send);
    zcc_hostmem_find(h->recvbuf, bytes, &h->mine.recv);
    return zccSuccess;
  case ZCC_HOSTMEM_MAP: {
    for (int k = 0; k < n; k++) {
      const zcc_hostmem_desc_t *d = k == r ? &h->mine : &h->theirs[k];
      if (d->send.fd < 0 || d->recv.fd < 0) {
        *jump = h->staged_at; /* every rank saw this descriptor: all go staged */
        return zccSuccess;
      }
    }
    h->ok_mine = 1;
    for (int k = 0; k < n; k++) {
      if (k == r) {
        /* Peers have not read yet: they pass the exchange of ok_mine after
           this step, and every rank's last op ended at a barrier. */
        h->peer_send[k] = zcc_hostmem_local(h->sendbuf, bytes, 1);
        h->peer_recv[k] = zcc_hostmem_local(h->recvbuf, bytes, 0);
        if (!h->peer_send[k] || !h->peer_recv[k]) {
          h->ok_mine = 0; /* deregistered since PREP */
          break;
        }
        continue;
      }
      const zcc_hostmem_desc_t *d = &h->theirs[k];
      /* The peer's buffers hold its part of this very call: its size. */
      if (d->send.off > d->send.bytes || bytes > d->send.bytes - d->send.off ||
          d->recv.off > d->recv.bytes || bytes > d->recv.bytes - d->recv.off) {
        h->ok_mine = 0;
        break;
      }
      h->peer_send[k] = zcc_hostmem_peer_ptr(comm, k, &d->send);
      h->peer_recv[k] = zcc_hostmem_peer_ptr(comm, k, &d->recv);
      if (!h->peer_send[k] || !h->peer_recv[k]) {
        h->ok_mine = 0;
        break;
      }
    }
    return zccSuccess;
  }
  case ZCC_HOSTMEM_DECIDE: {
    int all = h->ok_mine == 1;
    for (int k = 0; k < n && all; k++)
      if (k != r && h->ok_theirs[k] != 1) all = 0;
    if (all) *jump = h->direct_at;
    else ZCC_INFO(COLL, "allreduce of %zu bytes on comm %s: staged (a rank could not map a "
                  "peer's buffers)", bytes, comm->name);
    return zccSuccess;
  }
  case ZCC_HOSTMEM_REDUCE: {
    size_t off = h->seg_off, cnt = h->seg_cnt;
    size_t piece = ZCC_HOSTMEM_PIECE / ts;
    int nt = h->nt;
    for (int k = 0; k < n && nt; k++) {
      const char *s = h->peer_send[k], *o = h->peer_recv[k];
      if (s < o + bytes && o < s + bytes) nt = 0;
    }
    ZCC_INFO(COLL, "allreduce of %zu bytes on comm %s: in place on shared host memory",
             bytes, comm->name);
    for (size_t i = 0; i < cnt; i += piece) {
      size_t c = cnt - i < piece ? cnt - i : piece;
      size_t at = (off + i) * ts;
      char *own = h->peer_recv[r] + at;
      if (nt) { /* 2 ranks: both outputs in one pass, past the cache */
        zcc_reduce2_nt(own, h->peer_recv[1 - r] + at, h->peer_send[0] + at,
                       h->peer_send[1] + at, c, p->type, p->op);
        continue;
      }
      char *dst = h->use_scratch ? h->scratch : own;
      /* Rank order, as every other allreduce path of a rank's segment. */
      zcc_reduce(dst, h->peer_send[0] + at, h->peer_send[1] + at, c, p->type, p->op);
      for (int k = 2; k < n; k++)
        zcc_reduce(dst, dst, h->peer_send[k] + at, c, p->type, p->op);
      if (p->op == zccAvg) zcc_reduce_finish_avg(dst, dst, c, p->type, n);
      for (int k = 0; k < n; k++)
        if (h->peer_recv[k] + at != dst) memcpy(h->peer_recv[k] + at, dst, c * ts);
    }
    return zccSuccess;
  }
  case ZCC_HOSTMEM_FINISH:
    zcc_hostmem_copy_out(h->recvbuf, bytes);
    return zccSuccess;
  default: return zcc_stage_step(p, step, jump);
  }
}

/* The peer a waiting plan waits on: its first unfinished receive, else send. */
static int waited_peer(const zcc_plan_t *p) {
  int b = board_waiting(p);
  if (b >= 0) return b;
  if (p->cur >= p->nitems || p->items[p->cur].kind != ZCC_ITEM_XFERS) return -1;
  const zcc_item_t *it = &p->items[p->cur];
  int send_peer = -1;
  for (int i = it->first + it->pending; i < it->first + it->count; i++) {
    const zcc_xfer_t *x = &p->xfers[i];
    if (x->done == x->bytes || !x->conn) continue;
    if (x->is_recv) return x->conn->peer;
    if (send_peer < 0) send_peer = x->conn->peer;
  }
  return send_peer;
}

/* A wait the flight recorder alone has not timed yet (idle_ns). */
#define IDLE_UNTIMED (-1)

/*
 * Recorded plans: time spent with nothing to move, charged to the peer
 * waited on. With a trace file every wait is timed from its first poll;
 * the flight recorder alone times a wait from the executor's first clock
 * read in it (64 polls, a few microseconds in), so an operation whose
 * waits are all shorter reads the clock twice (start and end), not four
 * times. Returns the time it read (0: none), which the caller reuses.
 */
static int64_t note_idle(chain_state_t *c, int moved) {
  int64_t now = 0;
  if (moved) {
    if (c->idle_ns > 0) {
      now = zcc_now_ns();
      zcc_trace_wait(c->idle_plan, c->idle_peer, now - c->idle_ns);
    }
    c->idle_ns = 0;
  } else if (!c->idle_ns && c->plan && c->plan->trace_id) {
    c->idle_ns = IDLE_UNTIMED;
    if (c->plan->comm->trace->file) c->idle_ns = now = zcc_now_ns();
    c->idle_plan = c->plan;
    c->idle_peer = waited_peer(c->plan);
    zcc_trace_waiting_on(c->plan, c->idle_peer);
  }
  return now;
}

/* Advance one chain as far as it goes without waiting. *done when finished. */
static zccResult_t advance(chain_state_t *c, int *moved) {
  while (c->plan) {
    zcc_plan_t *p = c->plan;
    if (p->trace_id && !p->trace_started) {
      p->trace_started = 1;
      zcc_trace_start(p, 0);
    }
    if (p->cur == p->nitems) {
      if (p->trace_id) {
        /* The wait that ended in this call, and the end, at one clock read. */
        zcc_trace_end(p, zccSuccess, c->idle_ns ? note_idle(c, 1) : 0);
      }
      c->plan = p->next;
      continue;
    }
    zcc_item_t *it = &p->items[p->cur];
    if (it->kind == ZCC_ITEM_JUMP || it->kind == ZCC_ITEM_HOSTMEM) {
      int next = (int)it->n;
      if (it->kind == ZCC_ITEM_HOSTMEM) {
        ZCC_CHECK(zcc_hostmem_step(p, (int)it->n, &next));
        if (next == ZCC_HOSTMEM_NOT_YET) return zccSuccess;
      }
      p->cur = next >= 0 ? next : p->cur + 1;
      *moved = 1;
      continue;
    }
    if (it->kind != ZCC_ITEM_XFERS) {
      ZCC_CHECK(run_local(p, it));
      p->cur++;
      *moved = 1;
      continue;
    }
    int all_done = 1;
    /* Skip the finished prefix: long pipelined batches finish in order. */
    while (it->pending < it->count &&
           p->xfers[it->first + it->pending].done == p->xfers[it->first + it->pending].bytes)
      it->pending++;
    for (int i = it->first + it->pending; i < it->first + it->count; i++) {
      zcc_xfer_t *x = &p->xfers[i];
      if (x->done == x->bytes) continue;
      if (x->after >= 0 && p->xfers[x->after].done != p->xfers[x->after].bytes) {
        all_done = 0;
        continue;
      }
      if (x->limit_by >= 0) {
        x->avail = p->xfers[x->limit_by].done;
        if (x->avail <= x->done) {
          all_done = 0;
          continue;
        }
      }
      x->fwd_ready = NULL;
      if (x->fwd >= 0) {
        zcc_xfer_t *f = &p->xfers[x->fwd];
        if (f->done == x->done && (f->after < 0 || p->xfers[f->after].done == p->xfers[f->after].bytes))
          x->fwd_ready = f;
      }
      int m = 0;
      zccResult_t res = x->conn->ops->progress(x->conn, x, &m);
      if (res != zccSuccess) return coll_error(p, x->conn->peer, res);
      if (m) *moved = 1;
      if (x->done != x->bytes) all_done = 0;
    }
    if (!all_done) return zccSuccess;
    p->cur++;
    *moved = 1;
  }
  return zccSuccess;
}

/* How often a waiting chain asks the bootstrap about its links. */
#define LINK_CHECK_NS (100 * 1000000LL)

/* Aborts, dead peers and timeouts, for a chain that is waiting. */
static zccResult_t check_chain(chain_state_t *c, int64_t now) {
  struct zccComm *comm = c->comm;
  if (atomic_load_explicit(&comm->abort_flag, memory_order_relaxed))
    return zcc_error(zccRemoteError, "%s: communicator %s was aborted",
                     zcc_coll_name(c->plan->coll), comm->name);
  if (c->moved) {
    c->moved = 0;
    c->last_progress_ns = now;
    return zccSuccess;
  }
  zcc_plan_t *p = c->plan;
  zcc_item_t *it = &p->items[p->cur];
  int board = board_waiting(p);
  if (board >= 0) {
    /* A board barrier: the rank not there yet may have died or failed
       (its shm connection says; every peer of such a plan has one). */
    zcc_conn_t *conn = comm->conns[board];
    zccResult_t res = conn && conn->ops->check ? conn->ops->check(conn) : zccSuccess;
    if (res != zccSuccess) return coll_error(p, -1, res);
  }
  if (it->kind == ZCC_ITEM_XFERS) {
    for (int i = it->first; i < it->first + it->count; i++) {
      zcc_xfer_t *x = &p->xfers[i];
      if (x->done == x->bytes || !x->conn->ops->check) continue;
      zccResult_t res = x->conn->ops->check(x->conn);
      if (res != zccSuccess) return coll_error(p, -1, res);
    }
  }
  /* Waiting long: has a peer's host or the link to it gone silent? The
     bootstrap's idle connections keep the heartbeat the busy data
     connections lose (bootstrap.h). */
  if (now - c->last_progress_ns > LINK_CHECK_NS && now - c->link_checked_ns > LINK_CHECK_NS) {
    c->link_checked_ns = now;
    zccResult_t res = zcc_bootstrap_link_check(comm->bootstrap);
    if (res != zccSuccess) return coll_error(p, -1, res);
    /* A peer this call does not wait on may have failed, and said why:
       its record is the cause, where the wait would otherwise end on a
       peer that failed after it (or closed) with less to say. */
    for (int r = 0; r < comm->nranks; r++) {
      zcc_conn_t *conn = comm->conns ? comm->conns[r] : NULL;
      if (r == comm->rank || !conn || !conn->ops->fail_peek) continue;
      res = conn->ops->fail_peek(conn);
      if (res != zccSuccess) return coll_error(p, -1, res);
    }
  }
  if (comm->timeout_ms > 0 && now - c->last_progress_ns > comm->timeout_ms * 1000000LL) {
    int peer = board;
    if (it->kind == ZCC_ITEM_XFERS)
      for (int i = it->first; i < it->first + it->count && peer < 0; i++)
        if (p->xfers[i].done != p->xfers[i].bytes) peer = p->xfers[i].conn->peer;
    return zcc_error(zccTimeout,
                     "%s on comm %s: no progress for %lld ms waiting for rank %d "
                     "(ZCC_TIMEOUT)", zcc_coll_name(p->coll), comm->name,
                     (long long)comm->timeout_ms, peer);
  }
  return zccSuccess;
}

/*
 * A waiting rank with a home CPU (init.c: ranks outnumber CPUs, unbound)
 * that the kernel put elsewhere goes back: its mask narrowed to the home
 * CPU and set back as it was, so it moves now and nothing stays changed.
 * Woken tasks land where their waker runs, so after blocking calls a host's
 * ranks pile up on one CPU until the balancer spreads them, tenths of a
 * second later: 3 or 4 of 4 ranks on one of 2 CPUs read 8 B allreduce at
 * 3.3-4.0 us against 2.4 two to a CPU (docs/perf/host.md, 2026-12-06).
 */
static void go_home(int home) {
  if (sched_getcpu() == home) return;
  cpu_set_t mask, one;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || !CPU_ISSET(home, &mask)) return;
  CPU_ZERO(&one);
  CPU_SET(home, &one);
  if (sched_setaffinity(0, sizeof(one), &one) == 0)
    (void)sched_setaffinity(0, sizeof(mask), &mask);
}

zccResult_t zcc_exec_chains(zcc_plan_t **chains, int nchains) {
  chain_state_t stack_states[8];
  chain_state_t *cs = nchains <= 8 ? stack_states : calloc((size_t)nchains, sizeof(*cs));
  if (!cs) return zcc_error(zccSystemError, "executor: out of memory");
  /* The clock is read here only for a recorded plan's start; the timeout
     counts from the first check otherwise (256 polls in, microseconds). */
  int64_t start = 0;
  for (int i = 0; i < nchains; i++)
    if (chains[i] && chains[i]->trace_id && !chains[i]->trace_started) start = zcc_now_ns();
  for (int i = 0; i < nchains; i++) {
    cs[i].plan = chains[i];
    cs[i].comm = chains[i] ? chains[i]->comm : NULL;
    cs[i].moved = 0;
    cs[i].last_progress_ns = start;
    cs[i].link_checked_ns = 0;
    cs[i].idle_ns = 0;
    cs[i].idle_plan = NULL;
    cs[i].idle_peer = -1;
    if (chains[i] && chains[i]->trace_id && !chains[i]->trace_started) {
      chains[i]->trace_started = 1;
      zcc_trace_start(chains[i], start); /* the clock just read */
    }
  }
  zccResult_t res = zccSuccess;
  int failed = -1;
  unsigned idle = 0, iter = 0;
  int64_t idle_since = 0;
  /* the most cautious policy of the communicators driven (comm->spin_ns, init.c) */
  int64_t spin_ns = INT64_MAX, yield_ns = 0;
  unsigned polls = 64; /* idle polls between clock reads: a power of 2 */
  int nudge = nchains > 0, nudge_rank = -1; /* the rank whose step sets the run (nudge_yield) */
  int home = -1;                             /* go_home's CPU (the first communicator's) */
  unsigned yields = 0;
  int at_once = nchains > 0; /* every communicator's waits yield from the first poll */
  for (int i = 0; i < nchains; i++)
    if (cs[i].comm) {
      if (home < 0) home = cs[i].comm->home_cpu;
      nudge &= cs[i].comm->nudge;
      at_once &= cs[i].comm->yield_at_once;
      if (nudge_rank < 0) nudge_rank = cs[i].comm->rank;
      if (cs[i].comm->spin_ns < spin_ns) spin_ns = cs[i].comm->spin_ns;
      if (cs[i].comm->yield_ns > yield_ns) yield_ns = cs[i].comm->yield_ns;
      if (cs[i].comm->wait_polls < polls) polls = cs[i].comm->wait_polls;
    }
  if (spin_ns == INT64_MAX) spin_ns = 0;
  /* of a wait: 0 spin, 1 yield, 2 sleep; where it starts */
  int first_phase = at_once ? (yield_ns > 0 ? 1 : 2) : 0; /* at_once: every spin_ns is 0 */
  int phase = first_phase;
  for (;;) {
    int active = 0, moved_any = 0;
    int64_t read = 0; /* a clock read of this round, if one was made */
    for (int i = 0; i < nchains; i++) {
      if (!cs[i].plan) continue;
      int m = 0;
      res = advance(&cs[i], &m);
      if (res != zccSuccess) {
        failed = i;
        goto out;
      }
      if (m) {
        cs[i].moved = 1;
        moved_any = 1;
      }
      if (cs[i].idle_ns || (cs[i].plan && cs[i].plan->trace_id)) {
        int64_t t = note_idle(&cs[i], m);
        if (t) read = t;
      }
      if (cs[i].plan) active++;
    }
    if (!active) break;
    /*
     * Waiting: spin while the peer is likely running (a reply from a rank on
     * another core comes within microseconds), then yield, then sleep, so
     * that a slow peer never costs a core for long. The clock is read every
     * 64 polls only (the wait's start is a read the recorder made, or the
     * first of those); every 16th where ranks outnumber CPUs, whose waits
     * yield from the first (first_phase).
     */
    if (moved_any) {
      idle = 0;
      phase = first_phase;
    } else {
      if (idle++ == 0) {
        idle_since = read;
      } else if ((idle & (polls - 1)) == 0) {
        int64_t now = zcc_now_ns();
        if (!idle_since) idle_since = now - 1;
        for (int i = 0; i < nchains; i++)
          if (cs[i].idle_ns == IDLE_UNTIMED) cs[i].idle_ns = now;
        int64_t waited = now - idle_since;
        phase = waited > spin_ns + yield_ns ? 2 : waited > spin_ns ? (yield_ns > 0 ? 1 : 2) : 0;
      }
      if (phase == 0) {
        cpu_relax();
      } else if (phase == 1) {
        if (home >= 0 && (yields++ & 15) == 0) go_home(home);
        if (nudge)
          nudge_yield(nudge_rank);
        else
          sched_yield();
      } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
      }
    }
    if ((++iter & 255) == 0) {
      int64_t now = zcc_now_ns();
      for (int i = 0; i < nchains; i++) {
        if (!cs[i].plan) continue;
        if (!cs[i].last_progress_ns) cs[i].last_progress_ns = now;
        res = check_chain(&cs[i], now);
        if (res != zccSuccess) {
          failed = i;
          goto out;
        }
      }
    }
  }
out:
  if (res != zccSuccess) {
    /* Every communicator left mid-operation is out of step with its peers.
       Its records say so first: setting the error dumps the flight recorder. */
    for (int i = 0; i < nchains; i++) {
      if (cs[i].idle_ns) note_idle(&cs[i], 1);
      if (cs[i].plan && cs[i].plan->trace_id) zcc_trace_end(cs[i].plan, res, 0);
    }
    for (int i = 0; i < nchains; i++)
      if (cs[i].plan || i == failed) zcc_comm_set_error(cs[i].comm, res);
  }
  if (cs != stack_states) free(cs);
  return res;
}
