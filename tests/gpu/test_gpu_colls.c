/*
 * GPU communicators end to end, through zcc.h (plus the host reduction
 * reference of misc/reduce.c for the expected results).
 *
 *   test_gpu_colls [--layout threads|procs|both] [--ngpus N] [--quick] [--full]
 *                  [--only PART,...] [--coll NAME,...] [--type NAME] [--premul-only]
 *                  [--replays N] [--capture global|thread|relaxed] [--seed N]
 *
 * Layouts:
 *   threads  one process: zccCommInitAll over N GPUs, one thread issuing
 *            every rank's call inside zccGroupStart/End.
 *   procs    one forked process per GPU: cudaSetDevice(rank), then
 *            zccCommInitRank. The parent never calls CUDA or zccGetUniqueId:
 *            it forks a probe, one process per layout, and each procs runner
 *            forks its ranks first and then serves them unique ids through
 *            shared memory.
 *
 * Parts (--only picks some; default all):
 *   matrix   every collective x datatype x op x count {0, 1, 7, 4097, 65541,
 *            1M+3; --full: 64 MiB} x in/out of place x root; each case on
 *            plain (cudaMalloc) or registered (zccMemAlloc + zccCommRegister)
 *            buffers at byte offsets 0, 1 or one element. Fresh random inputs
 *            per case and rank, outputs poisoned, results exact against a
 *            rank-order reduction with reduce.h (NaN equals any NaN); guards
 *            and out-of-place send buffers untouched; a non-root's reduce
 *            recvbuff untouched; allreduce outputs bitwise equal across ranks.
 *            --quick: float32/int32/bfloat16/int8, sum/max/avg, counts 0, 7,
 *            65541 (for compute-sanitizer). Then pre-multiplied sums
 *            (zccRedOpCreatePreMulSum, a scalar per rank) in reduce and
 *            reducescatter: every datatype (--quick: the four), scalar
 *            host-immediate or in device memory by turns, in and out of place,
 *            against zcc_reduce_scale then a rank-order sum.
 *            sendrecv_ring: send to rank+1, receive from rank-1;
 *            sendrecv_pairs: every peer both ways in one group;
 *            sendrecv_mix: self and every peer both ways, each peer's block
 *            in two ops per direction (the second one unaligned).
 *            ZCC_P2P_DIRECT_DISABLE=1 runs send/receive and alltoall over
 *            the per-peer connectors.
 *   graphs   one call per collective captured on each rank's stream, replayed
 *            --replays times (1000) with new inputs copied in before each
 *            replay (outside the graph); every replay's output checked.
 *   errors   host pointers, count overflow, bad root/peer/datatype/op: an
 *            error, and nothing changes; then an allreduce on the NULL stream.
 *   lifetime 20 cycles of init, zccMemAlloc + register, collectives,
 *            deregister, free, destroy: device free memory, open descriptors
 *            and threads as before.
 *   abort    only rank 0 calls allreduce; zccCommAbort from another thread
 *            makes its cudaStreamSynchronize return.
 *   stamps   15 collectives of five kinds, each timed on the host, then two
 *            send/receive rings; every rank's flight recorder (zccCommDump)
 *            holds each op done, with GPU start and end times inside its
 *            host window, in order (a ring's send and receive: those of
 *            their one launch).
 *   mismatch (only with --only; procs) the ranks make different collectives at
 *            one number (count, collective, op): zccInvalidUsage naming both
 *            within 2 s, at the call or as the async error; the stream idle.
 *   stuck    (only with --only) rank 0 alone calls allreduce under a short
 *            ZCC_TIMEOUT (procs: 2000 ms by config; threads: the
 *            environment's, at most 20000): its stream is idle within
 *            ZCC_TIMEOUT + 2 s, the async error is zccTimeout naming op #1,
 *            the flight recorder shows it started on the GPU (the
 *            watchdog's dump to ZCC_FLIGHT_RECORDER_FILE), or failed
 *            (zccCommDump afterwards); destroy < 2 s.
 * --netns NS:IF,... (procs) puts rank r into network namespace r % count
 * (made with `ip netns add`; its interface IF carries zcc's traffic), so
 * ranks on one GPU are on different "hosts" and reach each other through
 * the net transport; the runner serves ids from the first namespace.
 *
 *   deadpeer (procs) rank 1 _exits after one allreduce; rank 0's next one
 *            must end, and zccCommGetAsyncError report an error, within 30 s
 *            (ZCC_TIMEOUT=5000).
 *
 * ZCC_TEST_SEED (or --seed) reproduces a run's inputs; the seed is printed.
 * One line per failure, then "gpu colls: N checks, M failed"; exit 0, 1 on
 * any failure, 77 (skipped) without 2 usable GPUs, 2 on bad usage. The
 * processes that call CUDA run under alarm(): a hang becomes a failure that
 * names the step; the others wait with limits.
 *
 * This file holds the matrix's cases and the parts, a world's run, the
 * layouts' processes and main; the harness they share (options and the
 * command line, output and counters, watchdog, element data, collectives,
 * a world's plumbing, process helpers) is gpu_harness.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_harness.h"
#include "reduce.h"
#include "zcc.h"
#include "ztest_types.h"

#define GUARD 64
#define MIB ((size_t)1 << 20)
#define BIG_BYTES (64 * MIB)
#define LIFETIME_CYCLES 20
/*
 * Free device memory may drop by this much over the 20 lifetime cycles:
 * cudaMemGetInfo counts whole 2 MiB pages of the device, and the driver may
 * keep a page or two more after the warm-up cycle for itself (sub-allocator
 * pools, page tables of peer mappings, lazily loaded code) with no leak in
 * zcc. A leaked window, staging buffer or registration of any one cycle is
 * a whole page or more each cycle, so 20 cycles lose at least 40 MiB.
 */
#define MEM_SLACK (4 * MIB)
#define DEADPEER_LIMIT_S 30.0
#define ABORT_LIMIT_S 30.0

/* ---- the matrix's cases ---- */

typedef struct {
  long index;
  call_t c;
  int inplace;
  int reg; /* registered buffers */
  size_t soff, roff;
} case_t;

static const char *case_str(const case_t *k, int n, char *buf, size_t len) {
  char root[16] = "";
  if (is_rooted(k->c.coll))
    snprintf(root, sizeof(root), " root=%d", k->c.root);
  snprintf(buf, len, "#%ld %s nranks=%d type=%s op=%s count=%zu%s %s soff=%zu roff=%zu %s",
           k->index, coll_names[k->c.coll], n, zcc_type_name(k->c.type),
           k->c.premul == PREMUL_HOST     ? "premulsum(host scalar)"
           : k->c.premul == PREMUL_DEVICE ? "premulsum(device scalar)"
           : is_reducing(k->c.coll)       ? zcc_op_name(k->c.op)
                                          : "-",
           k->c.count, root,
           k->inplace ? "in-place" : "out-of-place", k->soff, k->roff,
           k->reg ? "registered" : "plain");
  return buf;
}

static uint64_t case_seed(const case_t *k, int r) {
  return mix3(opt.seed, (uint64_t)k->index, (uint64_t)r + 1);
}

typedef int (*case_fn)(const case_t *k, void *ctx);

/* Walk the matrix in the same order in every process; fn returns nonzero to stop. */
static long enumerate(int n, case_fn fn, void *ctx) {
  static const size_t sizes_all[] = {0, 1, 7, 4097, 65536 + 5, MIB + 3, 0 /* 64 MiB */};
  static const size_t sizes_quick[] = {0, 7, 65536 + 5};
  static const zccDataType_t quick_types[] = {zccFloat32, zccInt32, zccBfloat16, zccInt8};
  static const zccRedOp_t quick_ops[] = {zccSum, zccMax, zccAvg};
  int ntypes = opt.quick ? 4 : zccNumTypes;
  int nsizes = opt.quick ? 3 : opt.full ? 7 : 6;
  long index = 0;
  for (int c = 0; c < C_NUM; c++) {
    for (int ti = 0; ti < ntypes; ti++) {
      zccDataType_t t = opt.quick ? quick_types[ti] : (zccDataType_t)ti;
      size_t es = esize(t);
      /* Filtered cases keep their index, so that a case's inputs do not depend on the filter. */
      int skip = (opt.only_colls && !(opt.only_colls >> c & 1)) ||
                 (opt.only_type >= 0 && (int)t != opt.only_type) || opt.premul_only;
      int nops = is_reducing((coll_t)c) ? (opt.quick ? 3 : zccNumOps) : 1;
      for (int oi = 0; oi < nops; oi++) {
        for (int si = 0; si < nsizes; si++) {
          int big = si == 6;
          size_t count = opt.quick ? sizes_quick[si] : sizes_all[si];
          if (big)
            count = send_elems((coll_t)c, 1, n) > 1 || c == C_ALLGATHER ? BIG_BYTES / es / (size_t)n
                                                                        : BIG_BYTES / es;
          for (int inplace = 0; inplace < 2; inplace++) {
            if ((c == C_RING || c == C_PAIRS || c == C_MIX) && inplace)
              continue;
            int nroots = is_rooted((coll_t)c) ? n : 1;
            for (int root = 0; root < nroots; root++) {
              case_t k;
              memset(&k, 0, sizeof(k));
              k.index = index++;
              /* 64 MiB: one root per case, rotating. */
              if (skip || (big && nroots > 1 && root != (ti * 5 + oi + inplace) % n))
                continue;
              k.c.coll = (coll_t)c;
              k.c.type = t;
              k.c.op =
                  is_reducing((coll_t)c) ? (opt.quick ? quick_ops[oi] : (zccRedOp_t)oi) : zccSum;
              k.c.root = root;
              k.c.count = count;
              k.inplace = inplace;
              uint64_t h = mix3(opt.seed, (uint64_t)k.index, 0x0ff5e7);
              size_t choice[4] = {0, 0, es, 1};
              k.soff = choice[h & 3];
              k.roff = choice[(h >> 8) & 3];
              k.reg = (int)((h >> 16) & 1);
              if (fn(&k, ctx))
                return index;
            }
          }
        }
      }
    }
  }
  /* Pre-multiplied sums (after the rest: the cases above keep their indices):
     reduce and reducescatter x datatype x count (0, 7, 65541; not --quick:
     also 1M+3; --full: also 64 MiB) x in/out of place, the scalar on the
     host or on the device by turns; reduce to one root per case, rotating. */
  static const size_t premul_sizes[] = {0, 7, 65536 + 5, MIB + 3, 0 /* 64 MiB */};
  int npsizes = opt.quick ? 3 : opt.full ? 5 : 4;
  for (int pc = 0; pc < 2; pc++) {
    coll_t c = pc ? C_REDUCESCATTER : C_REDUCE;
    for (int ti = 0; ti < ntypes; ti++) {
      zccDataType_t t = opt.quick ? quick_types[ti] : (zccDataType_t)ti;
      size_t es = esize(t);
      int skip = (opt.only_colls && !(opt.only_colls >> c & 1)) ||
                 (opt.only_type >= 0 && (int)t != opt.only_type);
      for (int si = 0; si < npsizes; si++)
        for (int inplace = 0; inplace < 2; inplace++) {
          case_t k;
          memset(&k, 0, sizeof(k));
          k.index = index++;
          if (skip)
            continue;
          int big = si == 4;
          size_t count = premul_sizes[si];
          if (big)
            count = c == C_REDUCESCATTER ? BIG_BYTES / es / (size_t)n : BIG_BYTES / es;
          k.c.coll = c;
          k.c.type = t;
          k.c.op = zccSum;
          k.c.premul = (pc + ti + si + inplace) & 1 ? PREMUL_DEVICE : PREMUL_HOST;
          k.c.root = c == C_REDUCE ? (int)(k.index % n) : 0;
          k.c.count = count;
          k.inplace = inplace;
          uint64_t h = mix3(opt.seed, (uint64_t)k.index, 0x0ff5e7);
          size_t choice[4] = {0, 0, es, 1};
          k.soff = choice[h & 3];
          k.roff = choice[(h >> 8) & 3];
          k.reg = (int)((h >> 16) & 1);
          if (fn(&k, ctx))
            return index;
        }
    }
  }
  return index;
}

typedef struct {
  int n;
  size_t slot, priv;
  long cases;
} sizing_t;

static int size_case(const case_t *k, void *ctx) {
  sizing_t *s = ctx;
  size_t es = esize(k->c.type);
  size_t sb = send_elems(k->c.coll, k->c.count, s->n) * es;
  size_t rb = recv_elems(k->c.coll, k->c.count, s->n) * es;
  if (sb > s->slot)
    s->slot = sb;
  if (sb + 2 * GUARD + 64 > s->priv)
    s->priv = sb + 2 * GUARD + 64;
  if (rb + 2 * GUARD + 64 > s->priv)
    s->priv = rb + 2 * GUARD + 64;
  s->cases++;
  return 0;
}

/* ---- matrix ---- */

static int run_case(const case_t *k, void *ctx) {
  world_t *w = ctx;
  shared_t *sh = w->sh;
  int n = w->n;
  size_t es = esize(k->c.type), c = k->c.count;
  size_t ns = send_elems(k->c.coll, c, n), nr = recv_elems(k->c.coll, c, n);
  size_t sbytes = ns * es, rbytes = nr * es;
  size_t region = k->inplace && sbytes > rbytes ? sbytes : rbytes;
  size_t pre = GUARD + k->roff, img = pre + region + GUARD;
  unsigned char poison = poison_for((uint64_t)k->index);
  const void *sps[MAX_RANKS];
  void *rps[MAX_RANKS];
  const unsigned char *ins[MAX_RANKS];
  char cs[256];

  case_str(k, n, cs, sizeof(cs));
  watch(opt.step_s, "%s matrix %s", w->name, cs);
  w->cases_run++;
  for (int j = 0; j < n; j++)
    ins[j] = slot(w, j);

  for (int i = 0; i < w->nlocal; i++) {
    rank_t *x = &w->rk[i];
    int r = x->rank;
    unsigned char *in = slot(w, r), *rdata;
    gen_input(k->c.type, k->c.op, is_reducing(k->c.coll), n, r, case_seed(k, r), in, ns);
    setdev(w, i);
    x->rbase = x->drecv[k->reg];
    rdata = x->rbase + pre;
    x->sdata = x->dsend[k->reg] + GUARD + k->soff;
    x->out_off = 0;
    CK(cudaMemsetAsync(x->rbase, poison, img, x->stream));
    if (!k->inplace) {
      CK(cudaMemcpyAsync(x->sdata, in, sbytes, cudaMemcpyHostToDevice, x->stream));
      x->sp = x->sdata;
      x->rp = rdata;
    } else if (k->c.coll == C_ALLGATHER) {
      CK(cudaMemcpyAsync(rdata + (size_t)r * c * es, in, sbytes, cudaMemcpyHostToDevice,
                         x->stream));
      x->sp = rdata + (size_t)r * c * es;
      x->rp = rdata;
    } else if (k->c.coll == C_REDUCESCATTER) {
      CK(cudaMemcpyAsync(rdata, in, sbytes, cudaMemcpyHostToDevice, x->stream));
      x->sp = rdata;
      x->rp = rdata + (size_t)r * c * es;
      x->out_off = (size_t)r * c * es;
    } else {
      CK(cudaMemcpyAsync(rdata, in, sbytes, cudaMemcpyHostToDevice, x->stream));
      x->sp = x->rp = rdata;
    }
    sps[i] = x->sp;
    rps[i] = x->rp;
  }
  premul_prepare(w, &k->c);
  sync_all(w, cs); /* every input slot written */

  call_all(w, w->comms, &k->c, sps, rps, 0);
  for (int i = 0; i < w->nlocal; i++) /* on the host, while the GPUs work */
    expect_out(&k->c, k->inplace, n, w->rk[i].rank, ins, poison, w->rk[i].hexp);
  wait_local(w, 0, cs);

  for (int i = 0; i < w->nlocal; i++) {
    rank_t *x = &w->rk[i];
    int r = x->rank, bad = 0;
    size_t first = 0, nbad;
    char e[96], g[96];
    if (x->rc != zccSuccess || x->werr != cudaSuccess) {
      fail("%s matrix %s rank %d: %s%s, stream %s: %s", w->name, cs, r, rc_name(x->rc),
           x->rc != zccSuccess ? " returned" : "", cudaGetErrorName(x->werr),
           x->rc != zccSuccess ? last_err(w->comms[i]) : "");
      atomic_store(&sh->stop, 1);
      sh->fail[r] = 1;
      continue;
    }
    pass();
    setdev(w, i);
    CK(cudaMemcpy(x->hout, x->rbase, img, cudaMemcpyDeviceToHost));
    if (!k->inplace && sbytes)
      CK(cudaMemcpy(x->hsend, x->sdata, sbytes, cudaMemcpyDeviceToHost));

    const unsigned char *got = x->hout + pre + x->out_off;
    size_t zeros = 0;
    nbad = compare2(k->c.type, got, x->hexp, nr, &first, &zeros);
    if (nbad) {
      char insx[600] = "";
      size_t pos = 0, idx = first + (k->c.coll == C_REDUCESCATTER ? (size_t)r * c : 0);
      if (is_reducing(k->c.coll))
        for (int j = 0; j < n && pos < sizeof(insx) - 120; j++) {
          char v[96];
          pos += (size_t)snprintf(
              insx + pos, sizeof(insx) - pos, "%s%s",
              j ? ", " : "; inputs there: ", zt_elem_str(k->c.type, ins[j], idx, v, sizeof(v)));
        }
      bad = 1;
      fail("%s matrix %s rank %d: %zu of %zu elements differ; first at %zu: expected %s, got %s%s"
           " (input seed 0x%016" PRIx64 ", run seed %" PRIu64 ")%s",
           w->name, cs, r, nbad, nr, first, zt_elem_str(k->c.type, x->hexp, first, e, sizeof(e)),
           zt_elem_str(k->c.type, got, first, g, sizeof(g)), insx, case_seed(k, r), opt.seed,
           zero_note(nbad, zeros));
    } else {
      pass();
    }
    size_t gb = SIZE_MAX;
    for (size_t b = 0; b < img && gb == SIZE_MAX; b++) {
      if (b == pre)
        b = pre + region; /* the region itself is checked above (in-place RS: the rest of sendbuff
                             is free) */
      if (b < img && x->hout[b] != poison)
        gb = b;
    }
    if (gb != SIZE_MAX)
      bad = 1;
    CHECK(gb == SIZE_MAX,
          "%s matrix %s rank %d: guard byte %s the buffer changed: %zu bytes %s, 0x%02x "
          "instead of the poison 0x%02x",
          w->name, cs, r, gb < pre ? "before" : "after", gb < pre ? pre - gb : gb - (pre + region),
          gb < pre ? "before it" : "past its end", gb < img ? x->hout[gb] : 0, poison);
    if (!k->inplace) {
      int same = memcmp(x->hsend, slot(w, r), sbytes) == 0;
      if (!same)
        bad = 1;
      CHECK(same, "%s matrix %s rank %d: the out-of-place call changed sendbuff", w->name, cs, r);
    }
    sh->fail[r] = bad;
    sh->hash[r] = k->c.coll == C_ALLREDUCE ? zt_hash(got, rbytes) : 0;
  }
  sync_all(w, cs);

  if (w->rk[0].rank == 0 && k->c.coll == C_ALLREDUCE) {
    int bad = 0, differ = 0;
    for (int j = 0; j < n; j++) {
      bad |= sh->fail[j];
      differ |= sh->hash[j] != sh->hash[0];
    }
    if (!bad)
      CHECK(!differ, "%s matrix %s: allreduce outputs are not bitwise identical across ranks",
            w->name, cs);
  }
  if (atomic_load(&sh->stop)) {
    if (w->rk[0].rank == 0)
      info("%s matrix: stopping after %s: a call or its stream failed", w->name, cs);
    return 1;
  }
  return 0;
}

static void run_matrix(world_t *w) {
  double t0 = now_s();
  atomic_store(&w->sh->stop, 0);
  w->cases_run = 0;
  enumerate(w->n, run_case, w);
  if (w->rk[0].rank == 0)
    info("%s matrix: %ld cases in %.1f s", w->name, w->cases_run, now_s() - t0);
}

/* ---- graphs ---- */

typedef struct {
  const char *name;
  call_t c;
  int inplace, reg;
} gcase_t;

#define ROOT_LAST (-1)
static const gcase_t gcases[] = {
    {"allreduce float32 sum, 1027", {C_ALLREDUCE, zccFloat32, zccSum, 0, 1027, 0, 0}, 0, 0},
    {"allreduce float32 sum, 17001 (past LL), registered",
     {C_ALLREDUCE, zccFloat32, zccSum, 0, 17001, 0, 0},
     0,
     1},
    {"allreduce bfloat16 avg in place, 1027", {C_ALLREDUCE, zccBfloat16, zccAvg, 0, 1027, 0, 0}, 1, 0},
    {"broadcast int32 from the last rank",
     {C_BROADCAST, zccInt32, zccSum, ROOT_LAST, 1027, 0, 0},
     0,
     0},
    {"reduce float32 max to rank 0", {C_REDUCE, zccFloat32, zccMax, 0, 1027, 0, 0}, 0, 0},
    {"allgather int8", {C_ALLGATHER, zccInt8, zccSum, 0, 1027, 0, 0}, 0, 0},
    {"reducescatter int32 sum", {C_REDUCESCATTER, zccInt32, zccSum, 0, 1027, 0, 0}, 0, 0},
    {"alltoall float64", {C_ALLTOALL, zccFloat64, zccSum, 0, 1027, 0, 0}, 0, 0},
    {"sendrecv ring float16", {C_RING, zccFloat16, zccSum, 0, 1027, 0, 0}, 0, 0},
    {"sendrecv mix int32 (self, both ways, split ops)", {C_MIX, zccInt32, zccSum, 0, 1027, 0, 0}, 0, 0},
    {"alltoall uint8 in place", {C_ALLTOALL, zccUint8, zccSum, 0, 1027, 0, 0}, 1, 0},
    {"reducescatter float32 premulsum, device scalar",
     {C_REDUCESCATTER, zccFloat32, zccSum, 0, 1027, 0, PREMUL_DEVICE},
     0,
     0},
    {"reducescatter bfloat16 premulsum, host scalar",
     {C_REDUCESCATTER, zccBfloat16, zccSum, 0, 1027, 0, PREMUL_HOST},
     0,
     0},
    {"reduce float16 premulsum to the last rank, device scalar",
     {C_REDUCE, zccFloat16, zccSum, ROOT_LAST, 1027, 0, PREMUL_DEVICE},
     0,
     0},
};
#define NGCASES ((int)(sizeof(gcases) / sizeof(gcases[0])))

static uint64_t graph_seed(int g, int rep, int r) {
  return mix3(opt.seed ^ 0x67726170ull, (uint64_t)g * 100003u + (uint64_t)rep, (uint64_t)r + 1);
}

static void run_graph(world_t *w, int gi) {
  const gcase_t *gc = &gcases[gi];
  call_t c = gc->c;
  int n = w->n, R = opt.replays;
  if (c.root == ROOT_LAST)
    c.root = n - 1;
  size_t es = esize(c.type), ns = send_elems(c.coll, c.count, n),
         nr = recv_elems(c.coll, c.count, n);
  size_t inb = ns * es, outb = nr * es;
  unsigned char poison = poison_for(0x9a9a + (uint64_t)gi);
  unsigned char *din[MAX_RANKS], *dout[MAX_RANKS], *dres[MAX_RANKS], *pool[MAX_RANKS],
      *hres[MAX_RANKS];
  void *hin[MAX_RANKS], *hout[MAX_RANKS];
  cudaGraph_t graph[MAX_RANKS];
  cudaGraphExec_t exec[MAX_RANKS];
  const void *sps[MAX_RANKS];
  void *rps[MAX_RANKS];
  char what[200];
  int ok = 1;

  snprintf(what, sizeof(what), "%s graph \"%s\"", w->name, gc->name);
  watch(opt.step_s, "%s: setup", what);
  memset(graph, 0, sizeof(graph));
  memset(exec, 0, sizeof(exec));
  for (int i = 0; i < w->nlocal; i++) {
    int r = w->rk[i].rank;
    setdev(w, i);
    if (gc->reg) {
      zccResult_t r1 = zccMemAlloc((void **)&din[i], inb);
      zccResult_t r2 = gc->inplace ? zccSuccess : zccMemAlloc((void **)&dout[i], outb);
      if (r1 != zccSuccess || r2 != zccSuccess)
        die("%s: zccMemAlloc(%zu / %zu bytes) on GPU %d: %s / %s: %s", what, inb, outb,
            w->rk[i].dev, rc_name(r1), rc_name(r2), last_err(NULL));
    } else {
      CK(cudaMalloc((void **)&din[i], inb));
      if (!gc->inplace)
        CK(cudaMalloc((void **)&dout[i], outb));
    }
    if (gc->inplace)
      dout[i] = din[i];
    CK(cudaMalloc((void **)&dres[i], (size_t)R * outb));
    CK(cudaHostAlloc((void **)&pool[i], (size_t)R * inb, cudaHostAllocPortable));
    hres[i] = malloc((size_t)R * outb);
    if (!hres[i])
      die("%s: out of host memory", what);
    for (int rep = 0; rep < R; rep++)
      gen_input(c.type, c.op, is_reducing(c.coll), w->n, r, graph_seed(gi, rep, r),
                pool[i] + (size_t)rep * inb, ns);
    sps[i] = din[i];
    rps[i] = dout[i];
    hin[i] = din[i];
    hout[i] = dout[i];
  }
  void *hreg_in[MAX_RANKS], *hreg_out[MAX_RANKS];
  int regd = 0;
  if (gc->reg) {
    ok = reg_local(w, w->comms, hin, inb, hreg_in, 0, what);
    if (!gc->inplace)
      ok &= reg_local(w, w->comms, hout, outb, hreg_out, 0, what);
    /* Deregistration is collective too: only when every rank registered. */
    regd = ok = agree(w, ok, what);
  }

  premul_prepare(w, &c); /* device scalars: written once, read by every replay */
  /* One eager call first (with replay 0's input): lazy set-up happens outside the capture. */
  if (ok) {
    watch(opt.step_s, "%s: eager call", what);
    for (int i = 0; i < w->nlocal; i++) {
      setdev(w, i);
      CK(cudaMemcpyAsync(din[i], pool[i], inb, cudaMemcpyHostToDevice, w->rk[i].stream));
      if (!gc->inplace)
        CK(cudaMemsetAsync(dout[i], poison, outb, w->rk[i].stream));
    }
    call_all(w, w->comms, &c, sps, rps, 0);
    wait_local(w, 0, what);
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      CHECK(x->rc == zccSuccess && x->werr == cudaSuccess,
            "%s rank %d: eager call: %s, stream %s: %s", what, x->rank, rc_name(x->rc),
            cudaGetErrorName(x->werr), last_err(w->comms[i]));
      if (x->rc != zccSuccess || x->werr != cudaSuccess)
        ok = 0;
    }
    ok = agree(w, ok, what);
  }

  /* Capture: every rank's stream, then every rank's call (one group in the threads layout). */
  if (ok) {
    int lok = 1;
    watch(opt.step_s, "%s: capture", what);
    for (int i = 0; i < w->nlocal; i++) {
      setdev(w, i);
      CK(cudaStreamBeginCapture(w->rk[i].stream, opt.capture));
    }
    call_all(w, w->comms, &c, sps, rps, 0);
    /* End every capture before instantiating: in global mode, instantiating
       while another stream of this thread still captures is refused. */
    cudaError_t ends[MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) {
      setdev(w, i);
      ends[i] = cudaStreamEndCapture(w->rk[i].stream, &graph[i]);
    }
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      setdev(w, i);
      cudaError_t e = ends[i];
      cudaError_t e2 = e == cudaSuccess ? cudaGraphInstantiate(&exec[i], graph[i], 0) : e;
      CHECK(x->rc == zccSuccess && e == cudaSuccess && e2 == cudaSuccess,
            "%s rank %d: captured call returned %s (%s); cudaStreamEndCapture: %s; "
            "cudaGraphInstantiate: %s",
            what, x->rank, rc_name(x->rc), last_err(w->comms[i]), cudaGetErrorName(e),
            cudaGetErrorName(e2));
      if (x->rc != zccSuccess || e != cudaSuccess || e2 != cudaSuccess) {
        lok = 0;
        (void)cudaGetLastError();
      }
    }
    ok = agree(w, lok, what);
  }

  if (ok) {
    double t0 = now_s();
    watch(opt.step_s + (unsigned)R / 10, "%s: %d replays", what, R);
    for (int rep = 0; rep < R; rep++) {
      for (int i = 0; i < w->nlocal; i++) {
        cudaStream_t s = w->rk[i].stream;
        setdev(w, i);
        CK(cudaMemcpyAsync(din[i], pool[i] + (size_t)rep * inb, inb, cudaMemcpyHostToDevice, s));
        if (!gc->inplace)
          CK(cudaMemsetAsync(dout[i], poison, outb, s));
        CK(cudaGraphLaunch(exec[i], s));
        CK(cudaMemcpyAsync(dres[i] + (size_t)rep * outb, dout[i], outb, cudaMemcpyDeviceToDevice,
                           s));
      }
    }
    for (int i = 0; i < w->nlocal; i++) {
      setdev(w, i);
      cudaError_t e = wait_stream(w->rk[i].stream, opt.wait_s + R * 0.05, what);
      if (e != cudaSuccess)
        die("%s rank %d: replays: stream error %s (%s)", what, w->rk[i].rank, cudaGetErrorName(e),
            cudaGetErrorString(e));
      CK(cudaMemcpy(hres[i], dres[i], (size_t)R * outb, cudaMemcpyDeviceToHost));
    }
    double dt = now_s() - t0;

    /* Check every replay; inputs of ranks in other processes are generated again. */
    watch(opt.step_s + (unsigned)R / 10, "%s: checking %d replays", what, R);
    unsigned char *tmp = malloc((size_t)n * inb + 1), *exp = malloc(outb + 1);
    if (!tmp || !exp)
      die("%s: out of host memory", what);
    for (int i = 0; i < w->nlocal; i++) {
      int r = w->rk[i].rank;
      long nbad = 0, first_rep = -1;
      int zero_only = 0;
      char detail[400] = "";
      for (int rep = 0; rep < R; rep++) {
        const unsigned char *ins[MAX_RANKS];
        for (int j = 0; j < n; j++) {
          int lj = -1;
          for (int q = 0; q < w->nlocal; q++)
            if (w->rk[q].rank == j)
              lj = q;
          if (lj >= 0) {
            ins[j] = pool[lj] + (size_t)rep * inb;
          } else {
            gen_input(c.type, c.op, is_reducing(c.coll), w->n, j, graph_seed(gi, rep, j),
                      tmp + (size_t)j * inb, ns);
            ins[j] = tmp + (size_t)j * inb;
          }
        }
        expect_out(&c, gc->inplace, n, r, ins, poison, exp);
        const unsigned char *got = hres[i] + (size_t)rep * outb;
        size_t f = 0, z = 0, nb = compare2(c.type, got, exp, nr, &f, &z);
        if (nb && nbad++ == 0) {
          char e[96], g[96];
          first_rep = rep;
          zero_only = z == nb;
          snprintf(detail, sizeof(detail),
                   "%zu of %zu elements differ, first at %zu: expected %s, got %s", nb, nr, f,
                   zt_elem_str(c.type, exp, f, e, sizeof(e)), zt_elem_str(c.type, got, f, g, sizeof(g)));
        }
      }
      CHECK(nbad == 0,
            "%s rank %d: %ld of %d replays wrong; first replay %ld: %s (run seed %" PRIu64 ")%s",
            what, r, nbad, R, first_rep, detail, opt.seed, zero_note(zero_only, zero_only));
    }
    free(tmp);
    free(exp);
    if (w->rk[0].rank == 0)
      info("%s: %d replays in %.2f s (%.1f us each, with the copies)", what, R, dt, dt * 1e6 / R);
  }

  watch(opt.step_s, "%s: teardown", what);
  sync_all(w, what);
  for (int i = 0; i < w->nlocal; i++) {
    setdev(w, i);
    if (exec[i])
      CK(cudaGraphExecDestroy(exec[i]));
    if (graph[i])
      CK(cudaGraphDestroy(graph[i]));
  }
  if (regd) {
    reg_local(w, w->comms, NULL, 0, hreg_in, 1, what);
    if (!gc->inplace)
      reg_local(w, w->comms, NULL, 0, hreg_out, 1, what);
  }
  for (int i = 0; i < w->nlocal; i++) {
    setdev(w, i);
    if (gc->reg) {
      CHECK(zccMemFree(din[i]) == zccSuccess, "%s: zccMemFree: %s", what, last_err(NULL));
      if (!gc->inplace)
        CHECK(zccMemFree(dout[i]) == zccSuccess, "%s: zccMemFree: %s", what, last_err(NULL));
    } else {
      CK(cudaFree(din[i]));
      if (!gc->inplace)
        CK(cudaFree(dout[i]));
    }
    CK(cudaFree(dres[i]));
    CK(cudaFreeHost(pool[i]));
    free(hres[i]);
  }
}

/* ---- errors ---- */

typedef struct {
  const char *what;
  call_t c;
  int host_send, host_recv; /* pass host (malloc) memory */
  int usage_ok;             /* zccInvalidUsage accepted besides zccInvalidArgument;
                               USAGE_ONLY: zccInvalidUsage alone, naming the group's limit */
} bad_t;

enum { USAGE_ONLY = 2 };

#define BAD_BYTES 65536

/* Several local ranks on one GPU: the NULL stream is refused (zcc_gpu_coll). */
static int null_refused(const world_t *w) {
  for (int i = 0; i < w->nlocal; i++)
    for (int j = 0; j < i; j++)
      if (w->rk[i].dev == w->rk[j].dev) return 1;
  return 0;
}

static void run_errors(world_t *w) {
  int n = w->n;
  size_t ovf = SIZE_MAX / (4 * (size_t)n) + 1; /* n * ovf * 4 overflows, ovf * 4 does not */
  const bad_t bads[] = {
      {"allreduce, sendbuff in host memory",
       {C_ALLREDUCE, zccFloat32, zccSum, 0, 1024, 0, 0},
       1,
       0,
       1},
      {"allreduce, recvbuff in host memory",
       {C_ALLREDUCE, zccFloat32, zccSum, 0, 1024, 0, 0},
       0,
       1,
       1},
      {"broadcast, buffers in host memory", {C_BROADCAST, zccInt8, zccSum, 0, 1000, 0, 0}, 1, 1, 1},
      {"reduce, sendbuff in host memory", {C_REDUCE, zccInt32, zccMax, 0, 1000, 0, 0}, 1, 0, 1},
      {"allgather, recvbuff in host memory",
       {C_ALLGATHER, zccFloat32, zccSum, 0, 1000, 0, 0},
       0,
       1,
       1},
      {"reducescatter, sendbuff in host memory",
       {C_REDUCESCATTER, zccFloat32, zccSum, 0, 1000, 0, 0},
       1,
       0,
       1},
      {"alltoall, sendbuff in host memory", {C_ALLTOALL, zccInt64, zccSum, 0, 500, 0, 0}, 1, 0, 1},
      {"send/recv ring, buffers in host memory", {C_RING, zccFloat32, zccSum, 0, 1000, 0, 0}, 1, 1, 1},
      {"allreduce, count * 4 overflows",
       {C_ALLREDUCE, zccFloat32, zccSum, 0, SIZE_MAX / 2, 0, 0},
       0,
       0,
       0},
      {"allreduce, count SIZE_MAX of float64",
       {C_ALLREDUCE, zccFloat64, zccSum, 0, SIZE_MAX, 0, 0},
       0,
       0,
       0},
      {"broadcast, count * 4 overflows",
       {C_BROADCAST, zccFloat32, zccSum, 0, SIZE_MAX / 2, 0, 0},
       0,
       0,
       0},
      {"reduce, count * 4 overflows", {C_REDUCE, zccFloat32, zccSum, 0, SIZE_MAX / 2, 0, 0}, 0, 0, 0},
      {"allgather, nranks * count * 4 overflows",
       {C_ALLGATHER, zccFloat32, zccSum, 0, ovf, 0, 0},
       0,
       0,
       0},
      {"reducescatter, nranks * count * 4 overflows",
       {C_REDUCESCATTER, zccFloat32, zccSum, 0, ovf, 0, 0},
       0,
       0,
       0},
      {"alltoall, nranks * count * 4 overflows",
       {C_ALLTOALL, zccFloat32, zccSum, 0, ovf, 0, 0},
       0,
       0,
       0},
      {"send/recv, count * 4 overflows", {C_RING, zccFloat32, zccSum, 0, SIZE_MAX / 2, 0, 0}, 0, 0, 0},
      {"broadcast, root -1", {C_BROADCAST, zccFloat32, zccSum, -1, 1000, 0, 0}, 0, 0, 0},
      {"broadcast, root nranks", {C_BROADCAST, zccFloat32, zccSum, n, 1000, 0, 0}, 0, 0, 0},
      {"reduce, root nranks", {C_REDUCE, zccFloat32, zccSum, n, 1000, 0, 0}, 0, 0, 0},
      {"reduce, root -1", {C_REDUCE, zccFloat32, zccSum, -1, 1000, 0, 0}, 0, 0, 0},
      {"send/recv, peers nranks and -1",
       {C_RING, zccFloat32, zccSum, 0, 1000, BAD_PEERS, 0},
       0,
       0,
       0},
      {"send/recv ring in 65 pieces a direction (a group of 130 ops with peers)",
       {C_RING, zccFloat32, zccSum, 0, 1000, BAD_PIECES, 0},
       0,
       0,
       USAGE_ONLY},
      {"allreduce, datatype zccNumTypes",
       {C_ALLREDUCE, (zccDataType_t)zccNumTypes, zccSum, 0, 1000, 0, 0},
       0,
       0,
       0},
      {"allreduce, op zccNumOps",
       {C_ALLREDUCE, zccFloat32, (zccRedOp_t)zccNumOps, 0, 1000, 0, 0},
       0,
       0,
       0},
      {"reducescatter, op -1", {C_REDUCESCATTER, zccFloat32, (zccRedOp_t)-1, 0, 1000, 0, 0}, 0, 0, 0},
  };
  unsigned char *hsrc[MAX_RANKS], *hdst[MAX_RANKS], *ref_src, *ref_dst;
  const unsigned char pat = 0x3c, dpoison = 0x5a;

  ref_src = malloc(BAD_BYTES);
  ref_dst = malloc(BAD_BYTES);
  if (!ref_src || !ref_dst)
    die("errors: out of host memory");
  for (size_t b = 0; b < BAD_BYTES; b++)
    ref_src[b] = (unsigned char)(pat ^ (b * 7));
  memset(ref_dst, dpoison, BAD_BYTES);
  for (int i = 0; i < w->nlocal; i++) {
    hsrc[i] = malloc(BAD_BYTES);
    hdst[i] = malloc(BAD_BYTES);
    if (!hsrc[i] || !hdst[i])
      die("errors: out of host memory");
  }

  for (size_t bi = 0; bi < sizeof(bads) / sizeof(bads[0]); bi++) {
    const bad_t *bd = &bads[bi];
    const void *sps[MAX_RANKS];
    void *rps[MAX_RANKS];
    watch(opt.step_s, "%s errors: %s", w->name, bd->what);
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      setdev(w, i);
      memcpy(hsrc[i], ref_src, BAD_BYTES);
      memcpy(hdst[i], ref_dst, BAD_BYTES);
      CK(cudaMemcpyAsync(x->dsend[0], ref_src, BAD_BYTES, cudaMemcpyHostToDevice, x->stream));
      CK(cudaMemsetAsync(x->drecv[0], dpoison, BAD_BYTES, x->stream));
      CK(cudaStreamSynchronize(x->stream));
      sps[i] = bd->host_send ? (void *)hsrc[i] : (void *)x->dsend[0];
      rps[i] = bd->host_recv ? (void *)hdst[i] : (void *)x->drecv[0];
    }
    sync_all(w, bd->what);
    call_all(w, w->comms, &bd->c, sps, rps, 0);
    wait_local(w, 0, bd->what);
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      int code_ok = bd->usage_ok == USAGE_ONLY
                        ? x->rc == zccInvalidUsage &&
                              strstr(last_err(w->comms[i]), "sends and receives")
                        : x->rc == zccInvalidArgument || (bd->usage_ok && x->rc == zccInvalidUsage);
      CHECK(code_ok, "%s errors: %s: rank %d: expected %s, got %s (%s)", w->name, bd->what,
            x->rank,
            bd->usage_ok == USAGE_ONLY ? "zccInvalidUsage naming the group's sends and receives"
            : bd->usage_ok             ? "zccInvalidArgument or zccInvalidUsage"
                                       : "zccInvalidArgument",
            rc_name(x->rc), last_err(w->comms[i]));
      setdev(w, i);
      CK(cudaMemcpy(x->hout, x->drecv[0], BAD_BYTES, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(x->hsend, x->dsend[0], BAD_BYTES, cudaMemcpyDeviceToHost));
      int same = x->werr == cudaSuccess && memcmp(x->hout, ref_dst, BAD_BYTES) == 0 &&
                 memcmp(x->hsend, ref_src, BAD_BYTES) == 0 &&
                 memcmp(hsrc[i], ref_src, BAD_BYTES) == 0 &&
                 memcmp(hdst[i], ref_dst, BAD_BYTES) == 0;
      CHECK(same,
            "%s errors: %s: rank %d: the rejected call changed a buffer or its stream failed (%s)",
            w->name, bd->what, x->rank, cudaGetErrorName(x->werr));
    }
    sync_all(w, bd->what);
  }

  /* The communicators still work, on the legacy (NULL) stream; where ranks
     of this process share a GPU, zcc refuses it (each waits for the other,
     and that stream would run them one after the other). */
  watch(opt.step_s, "%s errors: allreduce on the NULL stream", w->name);
  {
    call_t c = {C_ALLREDUCE, zccFloat32, zccSum, 0, 4097, 0, 0};
    size_t bytes = c.count * 4;
    const void *sps[MAX_RANKS];
    void *rps[MAX_RANKS];
    const unsigned char *ins[MAX_RANKS];
    for (int j = 0; j < n; j++)
      ins[j] = slot(w, j);
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      gen_input(c.type, c.op, 1, n, x->rank, mix3(opt.seed, 0x4e554c4cull, (uint64_t)x->rank),
                slot(w, x->rank), c.count);
      setdev(w, i);
      CK(cudaMemcpy(x->dsend[0], slot(w, x->rank), bytes, cudaMemcpyHostToDevice));
      CK(cudaMemset(x->drecv[0], dpoison, bytes));
      CK(cudaDeviceSynchronize());
      sps[i] = x->dsend[0];
      rps[i] = x->drecv[0];
    }
    sync_all(w, "NULL stream");
    call_all(w, w->comms, &c, sps, rps, 1);
    wait_local(w, 1, "allreduce on the NULL stream");
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      size_t first = 0, nb = 0;
      char e[96], g[96] = "";
      if (x->rc == zccSuccess && x->werr == cudaSuccess) {
        setdev(w, i);
        CK(cudaMemcpy(x->hout, x->drecv[0], bytes, cudaMemcpyDeviceToHost));
        expect_out(&c, 0, n, x->rank, ins, dpoison, x->hexp);
        nb = compare(c.type, x->hout, x->hexp, c.count, &first);
        if (nb)
          zt_elem_str(c.type, x->hout, first, g, sizeof(g));
      }
      if (null_refused(w))
        CHECK(x->rc == zccInvalidUsage && strstr(last_err(w->comms[i]), "own stream"),
              "%s errors: allreduce on the NULL stream with ranks of one process sharing a "
              "GPU, rank %d: expected zccInvalidUsage naming the stream, got %s (%s)",
              w->name, x->rank, rc_name(x->rc), last_err(w->comms[i]));
      else
      CHECK(
          x->rc == zccSuccess && x->werr == cudaSuccess && nb == 0,
          "%s errors: allreduce float32 sum 4097 on the NULL stream, rank %d: %s (%s), stream %s, "
          "%zu elements wrong (first %zu: expected %s, got %s)",
          w->name, x->rank, rc_name(x->rc), x->rc ? last_err(w->comms[i]) : "",
          cudaGetErrorName(x->werr), nb, first,
          nb ? zt_elem_str(c.type, x->hexp, first, e, sizeof(e)) : "-", g);
      zccResult_t ae = zccNumResults;
      zccResult_t r1 = zccCommGetAsyncError(w->comms[i], &ae);
      CHECK(r1 == zccSuccess && ae == zccSuccess,
            "%s errors: rank %d: zccCommGetAsyncError after rejected calls: %s, async error %s",
            w->name, x->rank, rc_name(r1), rc_name(ae));
    }
    sync_all(w, "NULL stream");
  }
  for (int i = 0; i < w->nlocal; i++) {
    free(hsrc[i]);
    free(hdst[i]);
  }
  free(ref_src);
  free(ref_dst);
}

/* ---- lifetime ---- */

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int cnt = 0;
  if (!d)
    return -1;
  while (readdir(d))
    cnt++;
  closedir(d);
  return cnt - 3; /* ".", ".." and the directory's own descriptor */
}

static int count_threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int t = -1;
  if (!f)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "Threads: %d", &t) == 1)
      break;
  fclose(f);
  return t;
}

/*
 * Pinned host memory, seen from outside zcc: the driver maps each page-
 * locked allocation (cudaHostAlloc) into the process as a shared mapping
 * that /proc/self/maps lists as "/dev/zero (deleted)" (driver 580 on the
 * H200 host; pinprobe in docs/perf/h200x1.md), or of /dev/nvidia* on
 * others; run_lifetime checks that 8 MiB of cudaHostAlloc shows. The
 * shared-memory segments zcc registers with cuMemHostRegister are
 * mappings of /dev/shm/zcc-*, which stay while mapped. (A registration of
 * memory that stays mapped shows nowhere: not in VmPin or VmLck either.)
 * Counts of both, and the pinned mappings' size.
 */
static void count_maps(int *pin_maps, long *pin_kib, int *shm_maps) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  *pin_maps = *shm_maps = 0;
  *pin_kib = 0;
  if (!f) {
    *pin_maps = *shm_maps = -1;
    return;
  }
  while (fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    int path = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path) < 2 || path == 0)
      continue;
    const char *name = line + path, *perms = strchr(line, ' ');
    int shared = perms && perms[4] == 's';
    if (strncmp(name, "/dev/nvidia", 11) == 0 ||
        (shared && strncmp(name, "/dev/zero (deleted)", 19) == 0)) {
      (*pin_maps)++;
      *pin_kib += (long)((hi - lo) / 1024);
    } else if (strncmp(name, "/dev/shm/zcc-", 13) == 0) {
      (*shm_maps)++;
    }
  }
  fclose(f);
}

/* Entries /dev/shm/zcc-* (every process's: the host's ranks are in step). */
static int count_shm_files(void) {
  DIR *d = opendir("/dev/shm");
  int n = 0;
  struct dirent *e;
  if (!d)
    return -1;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, "zcc-", 4) == 0)
      n++;
  closedir(d);
  return n;
}

typedef struct {
  size_t free_mem[MAX_RANKS];
  int fds, threads;
  int pin_maps, shm_maps, shm_files;
  long pin_kib;
} usage_t;

static void measure(world_t *w, usage_t *u) {
  for (int i = 0; i < w->nlocal; i++) {
    size_t fr = 0, total = 0;
    setdev(w, i);
    CK(cudaDeviceSynchronize());
    CK(cudaMemGetInfo(&fr, &total));
    u->free_mem[i] = fr;
  }
  u->fds = count_fds();
  u->threads = count_threads();
  count_maps(&u->pin_maps, &u->pin_kib, &u->shm_maps);
  u->shm_files = count_shm_files();
}

static int usage_same(world_t *w, const usage_t *a, const usage_t *b) {
  for (int i = 0; i < w->nlocal; i++)
    if (b->free_mem[i] + MEM_SLACK < a->free_mem[i])
      return 0;
  return a->fds == b->fds && a->threads == b->threads && a->pin_maps == b->pin_maps &&
         a->pin_kib == b->pin_kib && a->shm_maps == b->shm_maps && a->shm_files == b->shm_files;
}

/* The host-side counts: the same after as before, or a failed check naming what grew. */
static void usage_check(world_t *w, const usage_t *before, const usage_t *after,
                        const char *what) {
  CHECK(before->fds == after->fds && before->threads == after->threads,
        "%s (rank %d's process): open descriptors %d -> %d, threads %d -> %d", what,
        w->rk[0].rank, before->fds, after->fds, before->threads, after->threads);
  CHECK(before->pin_maps == after->pin_maps && before->pin_kib == after->pin_kib,
        "%s (rank %d's process): pinned host memory (driver mappings) %d mappings "
        "of %ld KiB -> %d mappings of %ld KiB", what, w->rk[0].rank, before->pin_maps,
        before->pin_kib, after->pin_maps, after->pin_kib);
  CHECK(before->shm_maps == after->shm_maps && before->shm_files == after->shm_files,
        "%s (rank %d's process): /dev/shm/zcc-* mapped %d -> %d, entries %d -> %d", what,
        w->rk[0].rank, before->shm_maps, after->shm_maps, before->shm_files, after->shm_files);
  if (w->rk[0].rank == 0)
    info("%s: descriptors %d, threads %d, pinned mappings %d (%ld KiB), /dev/shm/zcc-* mapped "
         "%d, entries %d; after: %d, %d, %d (%ld KiB), %d, %d", what, before->fds,
         before->threads, before->pin_maps, before->pin_kib, before->shm_maps,
         before->shm_files, after->fds, after->threads, after->pin_maps, after->pin_kib,
         after->shm_maps, after->shm_files);
}

/* Measure into *after until it matches *before or 5 s have passed (threads
   and descriptors may take a moment to go: a thread's exit after its join). */
static void measure_settled(world_t *w, const usage_t *before, usage_t *after) {
  double t1 = now_s();
  do {
    measure(w, after);
    if (usage_same(w, before, after))
      break;
    sleep_s(0.1);
  } while (now_s() - t1 < 5);
}

/* init, zccMemAlloc + register, allreduce (registered, in place) + allgather (plain), check, undo
 * all. */
static void lifetime_cycle(world_t *w, int cyc) {
  zccComm_t comms[MAX_RANKS];
  void *buf[MAX_RANKS], *h[MAX_RANKS];
  const void *sps[MAX_RANKS];
  void *rps[MAX_RANKS];
  const unsigned char *ins[MAX_RANKS];
  call_t ar = {C_ALLREDUCE, zccFloat32, zccSum, 0, 65536 + 5, 0, 0};
  call_t ag = {C_ALLGATHER, zccInt8, zccSum, 0, 4097, 0, 0};
  size_t arb = ar.count * 4;
  char what[64];
  int n = w->n;

  snprintf(what, sizeof(what), "%s lifetime cycle %d", w->name, cyc);
  watch(opt.step_s, "%s: init", what);
  int ok = comms_init(w, comms, 1, 0, what) == 0;
  if (!agree(w, ok, what)) {
    if (ok)
      comms_free(w, comms, 1, what);
    return;
  }
  for (int i = 0; i < w->nlocal; i++) {
    setdev(w, i);
    zccResult_t rc = zccMemAlloc(&buf[i], arb);
    if (rc != zccSuccess)
      die("%s: zccMemAlloc(%zu) on GPU %d: %s: %s", what, arb, w->rk[i].dev, rc_name(rc),
          last_err(NULL));
  }
  ok = reg_local(w, comms, buf, arb, h, 0, what);
  ok = agree(w, ok, what);
  for (int j = 0; j < n; j++)
    ins[j] = slot(w, j);
  if (ok) {
    watch(opt.step_s, "%s: collectives", what);
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      gen_input(ar.type, ar.op, 1, n, x->rank,
                mix3(opt.seed, 0x11fe, (uint64_t)(cyc * MAX_RANKS + x->rank)), slot(w, x->rank),
                ar.count);
      setdev(w, i);
      CK(cudaMemcpy(buf[i], slot(w, x->rank), arb, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(x->dsend[0], slot(w, x->rank), ag.count, cudaMemcpyHostToDevice));
      CK(cudaMemset(x->drecv[0], 0x5a, ag.count * (size_t)n));
      CK(cudaDeviceSynchronize());
    }
    sync_all(w, what);
    for (int i = 0; i < w->nlocal; i++)
      sps[i] = rps[i] = buf[i];
    call_all(w, comms, &ar, sps, rps, 0);
    zccResult_t rc_ar[MAX_RANKS];
    for (int i = 0; i < w->nlocal; i++) {
      rc_ar[i] = w->rk[i].rc;
      sps[i] = w->rk[i].dsend[0];
      rps[i] = w->rk[i].drecv[0];
    }
    call_all(w, comms, &ag, sps, rps, 0);
    wait_local(w, 0, what);
    for (int i = 0; i < w->nlocal; i++) {
      rank_t *x = &w->rk[i];
      size_t f1 = 0, f2 = 0, b1 = 1, b2 = 1;
      if (rc_ar[i] == zccSuccess && x->rc == zccSuccess && x->werr == cudaSuccess) {
        setdev(w, i);
        CK(cudaMemcpy(x->hout, buf[i], arb, cudaMemcpyDeviceToHost));
        expect_out(&ar, 1, n, x->rank, ins, 0, x->hexp);
        b1 = compare(ar.type, x->hout, x->hexp, ar.count, &f1);
        CK(cudaMemcpy(x->hout, x->drecv[0], ag.count * (size_t)n, cudaMemcpyDeviceToHost));
        expect_out(&ag, 0, n, x->rank, ins, 0, x->hexp);
        b2 = compare(ag.type, x->hout, x->hexp, ag.count * (size_t)n, &f2);
      }
      CHECK(b1 == 0 && b2 == 0,
            "%s rank %d: allreduce %s, allgather %s, stream %s; %zu / %zu "
            "elements wrong (first %zu / %zu)",
            what, x->rank, rc_name(rc_ar[i]), rc_name(x->rc), cudaGetErrorName(x->werr), b1, b2, f1,
            f2);
    }
    sync_all(w, what);
    reg_local(w, comms, NULL, 0, h, 1, what);
  }
  for (int i = 0; i < w->nlocal; i++) {
    setdev(w, i);
    zccResult_t rc = zccMemFree(buf[i]);
    CHECK(rc == zccSuccess, "%s rank %d: zccMemFree: %s: %s", what, w->rk[i].rank, rc_name(rc),
          last_err(NULL));
  }
  comms_free(w, comms, 0, what);
  sync_all(w, what);
}

static void run_lifetime(world_t *w) {
  usage_t before, after;
  double t0 = now_s();
  {
    /* The pinned count must see pinned memory: 8 MiB of cudaHostAlloc. */
    int m0, m1, s0, s1;
    long k0, k1;
    void *p = NULL;
    setdev(w, 0);
    count_maps(&m0, &k0, &s0);
    CK(cudaHostAlloc(&p, 8 * MIB, cudaHostAllocMapped | cudaHostAllocPortable));
    count_maps(&m1, &k1, &s1);
    CHECK(k1 - k0 >= 8 * 1024,
          "%s lifetime: 8 MiB of cudaHostAlloc at %p moved the pinned mappings from %d (%ld KiB) "
          "to %d (%ld KiB): the count cannot see pinned memory", w->name, p, m0, k0, m1, k1);
    if (k1 - k0 < 8 * 1024) { /* what the maps say of it */
      FILE *f = fopen("/proc/self/maps", "r");
      char line[512];
      while (f && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
          info("the allocation's mapping: %s", line);
      }
      if (f) fclose(f);
    }
    CK(cudaFreeHost(p));
  }
  lifetime_cycle(w, 0); /* warm-up: lazily loaded code, driver pools */
  sync_all(w, "lifetime");
  measure(w, &before);
  sync_all(w, "lifetime");
  for (int cyc = 1; cyc <= LIFETIME_CYCLES; cyc++)
    lifetime_cycle(w, cyc);
  sync_all(w, "lifetime");
  measure_settled(w, &before, &after);
  for (int i = 0; i < w->nlocal; i++)
    CHECK(after.free_mem[i] + MEM_SLACK >= before.free_mem[i],
          "%s lifetime: GPU %d: free device memory %.1f MiB before %d init/destroy cycles, "
          "%.1f MiB after: %.1f MiB lost (allowed: %zu MiB)",
          w->name, w->rk[i].dev, (double)before.free_mem[i] / (double)MIB, LIFETIME_CYCLES,
          (double)after.free_mem[i] / (double)MIB,
          ((double)before.free_mem[i] - (double)after.free_mem[i]) / (double)MIB, MEM_SLACK / MIB);
  char what[96];
  snprintf(what, sizeof(what), "%s lifetime, %d init/destroy cycles", w->name, LIFETIME_CYCLES);
  usage_check(w, &before, &after, what);
  if (w->rk[0].rank == 0)
    info("%s lifetime: %d cycles in %.1f s", w->name, LIFETIME_CYCLES + 1, now_s() - t0);
}

/* ---- abort and dead peer ---- */

typedef struct {
  zccComm_t comm;
  cudaStream_t stream;
  int dev;
  const void *sp;
  void *rp;
  size_t count;
  zccResult_t rc;
  cudaError_t se;
  double t_done;
  atomic_int called, done;
} waiter_t;

/* The first thread: an allreduce, then cudaStreamSynchronize. */
static void *waiter_main(void *p) {
  waiter_t *a = p;
  if (cudaSetDevice(a->dev) != cudaSuccess) {
    a->rc = zccUnhandledCudaError;
  } else {
    a->rc = zccAllReduce(a->sp, a->rp, a->count, zccFloat32, zccSum, a->comm, a->stream);
    atomic_store(&a->called, 1);
    a->se = cudaStreamSynchronize(a->stream);
  }
  a->t_done = now_s();
  atomic_store(&a->done, 1);
  return NULL;
}

static int wait_flag(atomic_int *f, double limit_s) {
  double t0 = now_s();
  while (!atomic_load(f)) {
    if (now_s() - t0 > limit_s)
      return -1;
    sleep_s(1e-3);
  }
  return 0;
}

/* The stream and device still take work (no sticky error). */
static cudaError_t stream_usable(world_t *w, int i) {
  setdev(w, i);
  cudaError_t e = cudaMemsetAsync(w->rk[i].drecv[0], 0, 4096, w->rk[i].stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(w->rk[i].stream);
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  return e;
}

/* A part's communicators (timeout_ms 0: the default); 0 when every rank has them. */
static int part_init_cfg(world_t *w, zccComm_t *comms, int cfg, int timeout_ms,
                         const char *what) {
  watch(opt.step_s, "%s: init", what);
  int ok = comms_init(w, comms, cfg, timeout_ms, what) == 0;
  if (!agree(w, ok, what)) {
    if (ok)
      comms_free(w, comms, 1, what);
    return -1;
  }
  return 0;
}

static int part_init(world_t *w, zccComm_t *comms, int timeout_ms, const char *what) {
  return part_init_cfg(w, comms, 1, timeout_ms, what);
}

/*
 * A non-blocking GPU init whose peer never comes (a rank of its own
 * rendezvous, 2 ranks): zccInProgress, calls refused with zccInProgress,
 * zccCommAbort within 2 s; the GPU works after.
 */
static void init_abort_check(world_t *w, const char *what) {
  zccUniqueId id;
  if (zccGetUniqueId(&id) != zccSuccess) {
    fail("%s: zccGetUniqueId: %s", what, last_err(NULL));
    return;
  }
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = zccDeviceCuda;
  cfg.blocking = 0;
  zccComm_t c = NULL;
  zccResult_t rc = zccCommInitRankConfig(&c, 2, id, 0, &cfg);
  CHECK(rc == zccInProgress && c, "%s: non-blocking init alone returned %s", what, rc_name(rc));
  if (!c) return;
  zccResult_t ar = zccAllReduce(w->rk[0].dsend[0], w->rk[0].drecv[0], 16, zccFloat32, zccSum, c,
                                w->rk[0].stream);
  CHECK(ar == zccInProgress, "%s: allreduce on a communicator still initialising: %s", what,
        rc_name(ar));
  sleep_s(0.05);
  double t0 = now_s();
  rc = zccCommAbort(c);
  double dt = now_s() - t0;
  CHECK(rc == zccSuccess && dt < 2.0, "%s: abort of a non-blocking init: %s after %.2f s", what,
        rc_name(rc), dt);
  cudaError_t ue = stream_usable(w, 0);
  CHECK(ue == cudaSuccess, "%s: the stream after the aborted init: %s", what,
        cudaGetErrorName(ue));
  info("%s: non-blocking init with its peer missing: aborted in %.3f s", what, dt);
}

/* Rank 0's allreduce of count floats, alone, in a thread of its own (waiter_main). */
static void waiter_start(world_t *w, zccComm_t comm, size_t count, waiter_t *a, pthread_t *th,
                         const char *what) {
  memset(a, 0, sizeof(*a));
  a->comm = comm;
  a->stream = w->rk[0].stream;
  a->dev = w->rk[0].dev;
  a->sp = w->rk[0].dsend[0];
  a->rp = w->rk[0].drecv[0];
  a->count = count;
  if (pthread_create(th, NULL, waiter_main, a) != 0)
    die("%s: pthread_create failed", what);
}

static void run_abort(world_t *w) {
  zccComm_t comms[MAX_RANKS];
  char what[64];
  snprintf(what, sizeof(what), "%s abort", w->name);
  /* procs: each rank's communicator through a non-blocking init, after one
     aborted while its peer never came */
  if (w->procs) init_abort_check(w, what);
  if (part_init_cfg(w, comms, w->procs ? 2 : 1, 0, what) != 0)
    return;
  if (w->rk[0].rank == 0) {
    waiter_t a;
    pthread_t th;
    watch(opt.step_s, "%s: rank 0's allreduce alone", what);
    waiter_start(w, comms[0], 65536 + 5, &a, &th, what);
    sleep_s(1.5);
    int early = atomic_load(&a.done);
    CHECK(!early,
          "%s: rank 0's allreduce (returned %s) and cudaStreamSynchronize (%s) finished "
          "though no other rank called",
          what, rc_name(a.rc), cudaGetErrorName(a.se));
    watch(60, "%s: zccCommAbort from a second thread while rank 0's allreduce waits", what);
    int returned = atomic_load(&a.called); /* else the call itself waits on the host */
    double t0 = now_s();
    zccResult_t rc = zccCommAbort(comms[0]);
    comms[0] = NULL;
    double t_abort = now_s() - t0;
    CHECK(rc == zccSuccess, "%s: zccCommAbort: %s: %s", what, rc_name(rc), last_err(NULL));
    watch(opt.step_s, "%s: waiting for the first thread", what);
    if (wait_flag(&a.done, ABORT_LIMIT_S) != 0)
      die("%s: cudaStreamSynchronize (allreduce returned %s) has not returned %.0f s after "
          "zccCommAbort",
          what, atomic_load(&a.called) ? rc_name(a.rc) : "nothing yet", ABORT_LIMIT_S);
    pthread_join(th, NULL);
    if (!early) {
      /* A call still inside zcc at the abort returns zccRemoteError (zcc.h). */
      CHECK(a.rc == zccSuccess || (!returned && a.rc == zccRemoteError),
            "%s: rank 0's allreduce returned %s %s the abort", what, rc_name(a.rc),
            returned ? "before" : "after");
      cudaError_t ue = stream_usable(w, 0);
      CHECK(ue == cudaSuccess,
            "%s: after zccCommAbort, cudaStreamSynchronize returned %s and the "
            "stream no longer works (%s): the aborted kernels left a sticky error",
            what, cudaGetErrorName(a.se), cudaGetErrorName(ue));
      info("%s: zccCommAbort took %.2f s; cudaStreamSynchronize returned %s %.2f s after it "
           "began",
           what, t_abort, cudaGetErrorName(a.se), a.t_done - t0);
    }
  }
  sync_all(w, what);
  comms_free(w, comms, 1, what);
  sync_all(w, what);
}

static void run_deadpeer(world_t *w) {
  zccComm_t comm[1] = {NULL};
  rank_t *x = &w->rk[0];
  const unsigned char *ins[MAX_RANKS];
  call_t c = {C_ALLREDUCE, zccFloat32, zccSum, 0, 4097, 0, 0};
  size_t bytes = c.count * 4;
  char what[64];
  snprintf(what, sizeof(what), "deadpeer");

  watch(opt.step_s, "%s: init with ZCC_TIMEOUT=5000", what);
  int ok = comms_init(w, comm, 1, 5000, what) == 0;
  if (!agree(w, ok, what)) {
    if (ok)
      comms_free(w, comm, 1, what);
    return;
  }
  watch(opt.step_s, "%s: one good allreduce", what);
  gen_input(c.type, c.op, 1, w->n, x->rank, mix3(opt.seed, 0xdead, (uint64_t)x->rank),
            slot(w, x->rank), c.count);
  CK(cudaMemcpy(x->dsend[0], slot(w, x->rank), bytes, cudaMemcpyHostToDevice));
  sync_all(w, what);
  {
    const void *sps[1] = {x->dsend[0]};
    void *rps[1] = {x->drecv[0]};
    size_t first = 0, nb = 1;
    call_all(w, comm, &c, sps, rps, 0);
    wait_local(w, 0, what);
    if (x->rc == zccSuccess && x->werr == cudaSuccess) {
      for (int j = 0; j < w->n; j++)
        ins[j] = slot(w, j);
      CK(cudaMemcpy(x->hout, x->drecv[0], bytes, cudaMemcpyDeviceToHost));
      expect_out(&c, 0, w->n, x->rank, ins, 0, x->hexp);
      nb = compare(c.type, x->hout, x->hexp, c.count, &first);
    }
    CHECK(nb == 0, "%s: rank %d: first allreduce: %s, stream %s, %zu elements wrong", what, x->rank,
          rc_name(x->rc), cudaGetErrorName(x->werr), nb);
  }
  sync_all(w, what);
  if (x->rank == 1) {
    info("%s: rank 1 exits now", what);
    _exit(0);
  }
  watch(opt.step_s, "%s: waiting for rank 1 to be gone", what);
  if (wait_flag(&w->sh->reaped[1], 30) != 0)
    die("%s: rank 1's process was not reaped within 30 s", what);

  waiter_t a;
  pthread_t th;
  memset(&a, 0, sizeof(a));
  a.comm = comm[0];
  a.stream = x->stream;
  a.dev = x->dev;
  a.sp = x->dsend[0];
  a.rp = x->drecv[0];
  a.count = c.count;
  watch((unsigned)(DEADPEER_LIMIT_S + 60), "%s: rank %d's allreduce after rank 1 died", what,
        x->rank);
  double t0 = now_s(), t_err = -1;
  if (pthread_create(&th, NULL, waiter_main, &a) != 0)
    die("%s: pthread_create failed", what);
  zccResult_t ae = zccSuccess;
  while (now_s() - t0 < DEADPEER_LIMIT_S) {
    zccResult_t r1 = zccCommGetAsyncError(comm[0], &ae);
    if (r1 != zccSuccess) {
      fail("%s: rank %d: zccCommGetAsyncError itself failed: %s", what, x->rank, rc_name(r1));
      break;
    }
    if (ae != zccSuccess) {
      t_err = now_s() - t0;
      break;
    }
    sleep_s(0.02);
  }
  CHECK(ae != zccSuccess,
        "%s: rank %d: zccCommGetAsyncError still zccSuccess %.0f s after rank 1 "
        "died (ZCC_TIMEOUT=5000)",
        what, x->rank, DEADPEER_LIMIT_S);
  double left = DEADPEER_LIMIT_S - (now_s() - t0);
  if (wait_flag(&a.done, left > 1 ? left : 1) != 0)
    die("%s: rank %d: the allreduce (returned %s) is still running %.0f s after rank 1 died: "
        "cudaStreamSynchronize hangs",
        what, x->rank, atomic_load(&a.called) ? rc_name(a.rc) : "nothing yet", DEADPEER_LIMIT_S);
  pthread_join(th, NULL);
  pass(); /* the stream's work completed */
  cudaError_t ue = stream_usable(w, 0);
  CHECK(ue == cudaSuccess,
        "%s: rank %d: after the dead peer, cudaStreamSynchronize returned %s "
        "and the stream no longer works (%s): a sticky CUDA error",
        what, x->rank, cudaGetErrorName(a.se), cudaGetErrorName(ue));
  info("%s: rank %d: allreduce returned %s; async error %s after %.2f s; cudaStreamSynchronize "
       "returned %s after %.2f s",
       what, x->rank, rc_name(a.rc), rc_name(ae), t_err, cudaGetErrorName(a.se), a.t_done - t0);
  watch(60, "%s: zccCommAbort after the error", what);
  comms_free(w, comm, 1, what);
}

/* ---- op stamps and a stuck kernel ---- */

/* Wall-clock microseconds, the flight recorder's time base. */
static double wall_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The whole file, NUL-terminated (NULL: unreadable). */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0)
      break;
    if (len + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
      }
      buf = nb;
    }
  }
  fclose(f);
  if (buf)
    buf[len] = '\0';
  return buf;
}

/* The dump's line of collective (p2p 0) or send/receive (p2p 1) #seq (its
   own line: `{"seq":N,"p2p":0,...}`), copied into line; 0 if absent. */
static int dump_op_kind(const char *text, unsigned long seq, int p2p, char *line, size_t cap) {
  char key[64];
  snprintf(key, sizeof(key), "{\"seq\":%lu,\"p2p\":%d,", seq, p2p);
  const char *p = strstr(text, key);
  if (!p)
    return 0;
  const char *e = strchr(p, '}');
  size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
  if (n >= cap)
    n = cap - 1;
  memcpy(line, p, n);
  line[n] = '\0';
  return 1;
}

static int dump_op(const char *text, unsigned long seq, char *line, size_t cap) {
  return dump_op_kind(text, seq, 0, line, cap);
}

/* A number field of a dump line ("name":value); NAN when absent. */
static double field_num(const char *line, const char *name) {
  char key[64];
  snprintf(key, sizeof(key), "\"%s\":", name);
  const char *p = strstr(line, key);
  return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* A string field's value into out; "" when absent. */
static void field_str(const char *line, const char *name, char *out, size_t cap) {
  char key[64];
  snprintf(key, sizeof(key), "\"%s\":\"", name);
  const char *p = strstr(line, key);
  out[0] = '\0';
  if (!p)
    return;
  p += strlen(key);
  size_t n = 0;
  while (p[n] && p[n] != '"' && n + 1 < cap) {
    out[n] = p[n];
    n++;
  }
  out[n] = '\0';
}

#define STAMP_OPS 15
#define STAMP_RINGS 2 /* then send/receive rings: each rank's two ops in one launch */
/* The calibration reads the GPU's clock about a PCIe read late: GPU times
   may sit this much after the host's own clock. */
#define STAMP_SLACK_US 5.0

/*
 * stamps: STAMP_OPS collectives of five kinds, each timed on the host
 * (before the call, after the stream is idle); then every rank's flight
 * recorder (zccCommDump): every op done, with GPU times inside its host
 * window, in order, after its enqueue. With quiet exits (device.h; unless
 * ZCC_GPU_STAMP_QUIET_US=0) a short op has no GPU end: it must still read
 * done (the next op started, or, for the last, nothing ran for a second:
 * the dumps wait STAMP_SETTLE_US for that), and its start is checked alone.
 */
#define STAMP_SETTLE_US 1200000
static void run_stamps(world_t *w) {
  zccComm_t comms[MAX_RANKS];
  char what[64];
  snprintf(what, sizeof(what), "%s stamps", w->name);
  if (part_init(w, comms, 0, what) != 0)
    return;
  const call_t calls[5] = {{C_ALLREDUCE, zccFloat32, zccSum, 0, 7, 0, 0},
                           {C_ALLREDUCE, zccFloat32, zccSum, 0, 200000, 0, 0},
                           {C_BROADCAST, zccFloat32, zccSum, w->n - 1, 65541, 0, 0},
                           {C_ALLGATHER, zccFloat32, zccSum, 0, 4096, 0, 0},
                           {C_REDUCESCATTER, zccFloat32, zccSum, 0, 4096, 0, 0}};
  double before[STAMP_OPS], after[STAMP_OPS];
  const void *sps[MAX_RANKS];
  void *rps[MAX_RANKS];
  for (int i = 0; i < w->nlocal; i++) {
    sps[i] = w->rk[i].dsend[0];
    rps[i] = w->rk[i].drecv[0];
  }
  int broken = 0;
  for (int k = 0; k < STAMP_OPS && !broken; k++) {
    watch(opt.step_s, "%s: op #%d", what, k + 1);
    sync_all(w, what);
    before[k] = wall_now_us();
    call_all(w, comms, &calls[k % 5], sps, rps, 0);
    wait_local(w, 0, what);
    after[k] = wall_now_us();
    for (int i = 0; i < w->nlocal; i++)
      if (w->rk[i].rc != zccSuccess || w->rk[i].werr != cudaSuccess) {
        fail("%s: op #%d (%s) on rank %d: %s, stream %s", what, k + 1,
             coll_names[calls[k % 5].coll], w->rk[i].rank, rc_name(w->rk[i].rc),
             cudaGetErrorName(w->rk[i].werr));
        broken = 1;
      }
  }
  const call_t ring = {C_RING, zccFloat32, zccSum, 0, 4099, 0, 0};
  for (int k = 0; k < STAMP_RINGS && !broken; k++) {
    watch(opt.step_s, "%s: send/receive ring %d", what, k + 1);
    sync_all(w, what);
    call_all(w, comms, &ring, sps, rps, 0);
    wait_local(w, 0, what);
    for (int i = 0; i < w->nlocal; i++)
      if (w->rk[i].rc != zccSuccess || w->rk[i].werr != cudaSuccess) {
        fail("%s: ring %d on rank %d: %s, stream %s", what, k + 1, w->rk[i].rank,
             rc_name(w->rk[i].rc), cudaGetErrorName(w->rk[i].werr));
        broken = 1;
      }
  }
  const char *qv = getenv("ZCC_GPU_STAMP_QUIET_US");
  int strict = qv && strcmp(qv, "0") == 0, no_end = 0;
  if (!strict)
    usleep(STAMP_SETTLE_US);
  sync_all(w, what);
  double worst_late = -1e30, min_gap = 1e30;
  for (int i = 0; i < w->nlocal && !broken; i++) {
    int r = w->rk[i].rank;
    char path[128];
    snprintf(path, sizeof(path), "/tmp/zcc_stamps.%d.%d.json", (int)getpid(), r);
    zccResult_t rc = zccCommDump(comms[i], path);
    CHECK(rc == zccSuccess, "%s: rank %d: zccCommDump(%s): %s: %s", what, r, path, rc_name(rc),
          last_err(comms[i]));
    char *text = rc == zccSuccess ? read_text(path) : NULL;
    unlink(path);
    if (!text)
      continue;
    double prev_end = 0;
    for (int k = 0; k < STAMP_OPS; k++) {
      char line[2048], state[32], coll[32];
      if (!dump_op(text, (unsigned long)k + 1, line, sizeof(line))) {
        fail("%s: rank %d: the dump has no collective #%d", what, r, k + 1);
        continue;
      }
      field_str(line, "state", state, sizeof(state));
      field_str(line, "coll", coll, sizeof(coll));
      double enq = field_num(line, "enqueue_us"), gs = field_num(line, "gpu_start_us"),
             ge = field_num(line, "gpu_end_us");
      const char *want = coll_names[calls[k % 5].coll];
      if (!strict && ge == 0) { /* quiet: no end stamped; its start alone */
        no_end++;
        ge = gs;
      }
      int good = strcmp(state, "done") == 0 && strcmp(coll, want) == 0 && gs > 0 && ge >= gs &&
                 enq >= before[k] && gs >= enq && ge <= after[k] + STAMP_SLACK_US &&
                 gs >= prev_end;
      CHECK(good,
            "%s: rank %d: op #%d: %s %s (want %s done); host window [%.3f, %.3f] us, enqueue "
            "%+.3f, GPU start %+.3f, end %+.3f (relative to the window's start), previous "
            "op's GPU end %+.3f",
            what, r, k + 1, coll, state, want, before[k], after[k], enq - before[k],
            gs - before[k], ge - before[k], prev_end ? prev_end - before[k] : 0.0);
      if (ge - after[k] > worst_late)
        worst_late = ge - after[k];
      if (gs - enq < min_gap)
        min_gap = gs - enq;
      prev_end = ge;
    }
    /* the rings' sends and receives: every one done with the GPU times of its launch */
    for (int k = 1; k <= 2 * STAMP_RINGS; k++) {
      char line[2048], state[32];
      int have = dump_op_kind(text, (unsigned long)k, 1, line, sizeof(line));
      if (have)
        field_str(line, "state", state, sizeof(state));
      double gs = have ? field_num(line, "gpu_start_us") : 0,
             ge = have ? field_num(line, "gpu_end_us") : 0;
      if (have && !strict && ge == 0) {
        no_end++;
        ge = gs;
      }
      CHECK(have && strcmp(state, "done") == 0 && gs > 0 && ge >= gs && gs >= prev_end,
            "%s: rank %d: send/receive #%d: %s, GPU start %+.3f end %+.3f (after the last "
            "collective's end)",
            what, r, k, have ? state : "missing", gs - prev_end, ge - prev_end);
    }
    free(text);
  }
  if (!broken)
    info("%s: %d ops per rank; GPU end at most %.3f us after the host saw the stream idle; "
         "GPU start at least %.3f us after the enqueue; %s: %d op(s) done with no GPU end",
         what, STAMP_OPS, worst_late, min_gap, strict ? "every exit stamped" : "quiet exits",
         no_end);
  sync_all(w, what);
  comms_free(w, comms, broken, what);
  sync_all(w, what);
}

/*
 * stuck: only rank 0 calls allreduce, under a short ZCC_TIMEOUT (the
 * procs layout's config says 2000 ms; the threads layout's is the
 * environment's). Within ZCC_TIMEOUT + 2 s its stream is idle again,
 * zccCommGetAsyncError says zccTimeout and its message names the op; the
 * flight recorder (ZCC_FLIGHT_RECORDER_FILE when set, the watchdog's dump;
 * else zccCommDump) shows op #1 allreduce started on the GPU; every rank
 * destroys within 2 s and the stream still works.
 */
/*
 * mismatch (procs, --only): the two ranks make different collectives at the
 * same number (count, collective, op). Each rank's call or its async error
 * is zccInvalidUsage naming both calls within 2 s, the stream is idle after
 * (waiting kernels stopped), across hosts (--netns) the output is untouched
 * (no call ran on the other call's bytes: the collective and op kinds move
 * the same bytes, so a kernel that started on both sides would complete),
 * destroy works.
 * --mismatch-rounds repeats it (the ranks call at once: races show there).
 */
#define MISMATCH_MAX 2048 /* floats a mismatched call moves at most */
static void run_mismatch(world_t *w) {
  if (!w->procs) {
    info("%s mismatch: processes only (one thread issues every rank's call here)", w->name);
    return;
  }
  static const char *kinds[] = {"count", "collective", "op"};
  for (int k = 0; k < 3 * opt.mismatch_rounds; k++) {
    zccComm_t comms[MAX_RANKS];
    char what[96];
    snprintf(what, sizeof(what), "%s mismatch-%s", w->name, kinds[k % 3]);
    if (opt.mismatch_rounds > 1)
      snprintf(what + strlen(what), sizeof(what) - strlen(what), " round %d", k / 3 + 1);
    if (part_init(w, comms, 0, what) != 0) return;
    rank_t *x = &w->rk[0];
    int r = x->rank;
    const char *mine = "", *theirs = "";
    zccResult_t rc;
    /* inputs 1 + rank, the output poisoned: whatever a kernel writes differs */
    static float in[MISMATCH_MAX];
    for (int i = 0; i < MISMATCH_MAX; i++) in[i] = 1.0f + (float)r;
    CK(cudaMemcpy(x->dsend[0], in, sizeof(in), cudaMemcpyHostToDevice));
    CK(cudaMemset(x->drecv[0], 0xa5, sizeof(in)));
    sync_all(w, what); /* the ranks call at once */
    watch(opt.step_s, "%s: the mismatched call", what);
    double t0 = now_s();
    if (k % 3 == 0) {
      size_t cnt = r == 0 ? 1024 : 2048;
      rc = zccAllReduce(x->dsend[0], x->drecv[0], cnt, zccFloat32, zccSum, comms[0], x->stream);
      mine = r == 0 ? "count=1024" : "count=2048";
      theirs = r == 0 ? "count=2048" : "count=1024";
    } else if (k % 3 == 1) {
      if (r == 0)
        rc = zccAllReduce(x->dsend[0], x->drecv[0], 1024, zccFloat32, zccSum, comms[0],
                          x->stream);
      else
        rc = zccBroadcast(x->dsend[0], x->drecv[0], 1024, zccFloat32, 0, comms[0], x->stream);
      mine = r == 0 ? "allreduce" : "broadcast";
      theirs = r == 0 ? "broadcast" : "allreduce";
    } else {
      rc = zccAllReduce(x->dsend[0], x->drecv[0], 1024, zccFloat32, r == 0 ? zccSum : zccMax,
                        comms[0], x->stream);
      mine = r == 0 ? "sum" : "max";
      theirs = r == 0 ? "max" : "sum";
    }
    char msg[1024] = "";
    zccResult_t st = rc;
    if (rc != zccSuccess) {
      snprintf(msg, sizeof(msg), "%s", last_err(NULL));
    } else {
      st = zccSuccess;
      while (st == zccSuccess && now_s() - t0 < 5.0) {
        zccResult_t q = zccCommGetAsyncError(comms[0], &st);
        if (q != zccSuccess) st = q;
        if (st == zccSuccess) sleep_s(0.002);
      }
      if (st != zccSuccess) snprintf(msg, sizeof(msg), "%s", last_err(NULL));
    }
    double dt = now_s() - t0;
    CHECK(st == zccInvalidUsage && dt < 2.0,
          "%s: expected zccInvalidUsage within 2 s (at the call or as the async error), got "
          "%s (call %s) after %.2f s: %s", what, rc_name(st), rc_name(rc), dt, msg);
    CHECK(strstr(msg, mine) && strstr(msg, theirs) && strstr(msg, "op #1"),
          "%s: the message names both calls (%s, %s) and op #1: %s", what, mine, theirs, msg);
    watch(opt.step_s, "%s: the stream after the mismatch", what);
    cudaError_t se = cudaStreamSynchronize(x->stream);
    double dt_sync = now_s() - t0;
    (void)cudaGetLastError();
    CHECK(dt_sync < 2.0 + 2.0, "%s: the stream was idle only %.2f s after the call", what, dt_sync);
    /* Nothing of a mismatched call reaches the output: across hosts (--netns)
       the connector kernels' signature gate holds them before any byte; on one
       host a rank whose call was refused never launches, and the peer's
       kernel, released by the abort word, returns without another store. */
    static unsigned char out[MISMATCH_MAX * sizeof(float)];
    CK(cudaMemcpy(out, x->drecv[0], sizeof(out), cudaMemcpyDeviceToHost));
    size_t changed = 0, first = 0;
    for (size_t i = sizeof(out); i-- > 0;)
      if (out[i] != 0xa5) {
        changed++;
        first = i;
      }
    CHECK(changed == 0,
          "%s rank %d: the output was written (%zu of %zu bytes changed, the first at byte "
          "%zu): a mismatched call ran on the other call's bytes", what, r, changed, sizeof(out),
          first);
    info("%s: %s %s after %.3f s, stream idle after %.3f s (%s): %s", what, rc_name(st),
         rc != zccSuccess ? "at the call" : "as the async error", dt, dt_sync,
         cudaGetErrorName(se), msg);
    sync_all(w, what);
    comms_free(w, comms, 1, what);
    sync_all(w, what);
  }
}

static void run_stuck(world_t *w) {
  zccComm_t comms[MAX_RANKS];
  char what[64];
  snprintf(what, sizeof(what), "%s stuck", w->name);
  int tmo_ms = w->procs ? 2000 : (int)(opt.tmo_s * 1000);
  if (tmo_ms > 20000) {
    fail("%s: needs ZCC_TIMEOUT of at most 20000 ms in the threads layout (it is %d)", what,
         tmo_ms);
    return;
  }
  if (part_init(w, comms, tmo_ms, what) != 0)
    return;
  if (w->rk[0].rank == 0) {
    waiter_t a;
    pthread_t th;
    watch((unsigned)(tmo_ms / 1000 + 60), "%s: rank 0's allreduce alone", what);
    double t0 = now_s();
    waiter_start(w, comms[0], 4097, &a, &th, what);
    double limit = tmo_ms / 1000.0 + 2.0;
    int late = wait_flag(&a.done, limit) != 0;
    double t_done = now_s() - t0;
    CHECK(!late, "%s: rank 0's stream was not idle %.1f s after its allreduce began "
          "(ZCC_TIMEOUT %d ms + 2 s)", what, limit, tmo_ms);
    if (late && wait_flag(&a.done, ABORT_LIMIT_S) != 0)
      die("%s: rank 0's allreduce never ended", what);
    pthread_join(th, NULL);
    zccResult_t ae = zccSuccess;
    zccResult_t r1 = zccCommGetAsyncError(comms[0], &ae);
    const char *msg = last_err(comms[0]);
    CHECK(r1 == zccSuccess && ae == zccTimeout && strstr(msg, "op #1 allreduce") &&
              strstr(msg, "no progress"),
          "%s: rank 0: zccCommGetAsyncError %s, async error %s (want zccTimeout), message: %s",
          what, rc_name(r1), rc_name(ae), msg);
    const char *fr = getenv("ZCC_FLIGHT_RECORDER_FILE");
    char path[512];
    if (fr && *fr) {
      /* %h host, %p pid, %r rank, as the library expands them */
      char host[64] = "", *o = path;
      gethostname(host, sizeof(host) - 1);
      char *dot = strchr(host, '.');
      if (dot)
        *dot = '\0';
      for (const char *p = fr; *p && o < path + sizeof(path) - 32; p++) {
        if (p[0] == '%' && p[1] == 'h') o += sprintf(o, "%s", host), p++;
        else if (p[0] == '%' && p[1] == 'p') o += sprintf(o, "%d", (int)getpid()), p++;
        else if (p[0] == '%' && p[1] == 'r') o += sprintf(o, "0"), p++;
        else *o++ = *p;
      }
      *o = '\0';
    } else {
      snprintf(path, sizeof(path), "/tmp/zcc_stuck.%d.json", (int)getpid());
      zccResult_t dr = zccCommDump(comms[0], path);
      CHECK(dr == zccSuccess, "%s: zccCommDump: %s", what, rc_name(dr));
    }
    char *text = read_text(path);
    char line[2048] = "", state[32] = "", coll[32] = "";
    int have = text && dump_op(text, 1, line, sizeof(line));
    if (have) {
      field_str(line, "state", state, sizeof(state));
      field_str(line, "coll", coll, sizeof(coll));
    }
    /* The watchdog's dump is written before the kernel is stopped; a later one shows it
       cut short. */
    const char *want = fr && *fr ? "started" : "failed";
    char err_field[32];
    snprintf(err_field, sizeof(err_field), "\"async_error\":%d", (int)zccTimeout);
    CHECK(have && strcmp(coll, "allreduce") == 0 && strcmp(state, want) == 0 &&
              field_num(line, "gpu_start_us") > 0 && strstr(text, err_field),
          "%s: the flight recorder %s (%s) %s: op #1 %s %s (want allreduce %s, GPU start "
          "%.3f, %s)",
          what, path, fr && *fr ? "the watchdog's dump" : "zccCommDump",
          text ? "read" : "missing", coll, state, want, field_num(line, "gpu_start_us"),
          text && strstr(text, err_field) ? err_field : "async_error missing or wrong");
    free(text);
    unlink(path);
    cudaError_t ue = stream_usable(w, 0);
    CHECK(ue == cudaSuccess, "%s: rank 0's stream no longer works after the timeout: %s", what,
          cudaGetErrorName(ue));
    info("%s: ZCC_TIMEOUT %d ms: rank 0's stream idle after %.2f s, async error %s", what,
         tmo_ms, t_done, rc_name(ae));
  }
  sync_all(w, what);
  double t0 = now_s();
  comms_free(w, comms, 0, what);
  double t_free = now_s() - t0;
  CHECK(t_free < 2.0, "%s: destroying the communicators took %.2f s", what, t_free);
  sync_all(w, what);
}

/* ---- a world's whole run ---- */

static void run_world(world_t *w) {
  world_alloc(w, (opt.parts & PART_MATRIX) != 0);
  if (opt.parts & (PART_MATRIX | PART_GRAPHS | PART_ERRORS)) {
    watch(opt.step_s, "%s: init", w->name);
    int ok = comms_init(w, w->comms, 0, 0, w->name) == 0;
    int broken = !agree(w, ok, "init");
    int regs = 0;
    if (!broken && (opt.parts & PART_MATRIX)) {
      /* The matrix's "registered" cases use sub-ranges of these two. */
      void *b[MAX_RANKS], *hs[MAX_RANKS], *hr[MAX_RANKS];
      memset(hs, 0, sizeof(hs));
      memset(hr, 0, sizeof(hr));
      for (int i = 0; i < w->nlocal; i++)
        b[i] = w->rk[i].dsend[1];
      int rok = reg_local(w, w->comms, b, w->priv, hs, 0, "register the matrix's sendbuffs");
      for (int i = 0; i < w->nlocal; i++)
        b[i] = w->rk[i].drecv[1];
      rok &= reg_local(w, w->comms, b, w->priv, hr, 0, "register the matrix's recvbuffs");
      for (int i = 0; i < w->nlocal; i++) {
        w->rk[i].hreg[0] = hs[i];
        w->rk[i].hreg[1] = hr[i];
      }
      regs = 1;
      broken = !agree(w, rok, "register");
    }
    if (!broken && (opt.parts & PART_MATRIX)) {
      run_matrix(w);
      broken = atomic_load(&w->sh->stop);
    }
    if (!broken && (opt.parts & PART_GRAPHS))
      for (int g = 0; g < NGCASES; g++)
        run_graph(w, g);
    if (!broken && (opt.parts & PART_ERRORS))
      run_errors(w);
    sync_all(w, "teardown");
    if (regs && !broken) {
      void *h[MAX_RANKS];
      for (int k = 0; k < 2; k++) {
        for (int i = 0; i < w->nlocal; i++)
          h[i] = w->rk[i].hreg[k];
        reg_local(w, w->comms, NULL, 0, h, 1, "deregister the matrix's buffers");
      }
    }
    /* After a failed call the communicators may hold work that never ends: abort them. */
    comms_free(w, w->comms, broken, w->name);
    sync_all(w, "teardown");
  }
  world_free_set1(w);
  if (opt.parts & PART_LIFETIME)
    run_lifetime(w);
  /* The fault parts leave the host's counts as they found them. */
  usage_t before, after;
  int faults = (opt.parts & (PART_ABORT | PART_STUCK | PART_MISMATCH)) != 0;
  if (faults) {
    /* What a first communicator makes once per process (driver descriptors,
       lazily loaded code) is not the fault parts': lifetime's warm-up, when
       it did not run (--only stuck measured +9 descriptors without). */
    if (!(opt.parts & PART_LIFETIME))
      lifetime_cycle(w, 0);
    sync_all(w, "faults");
    measure(w, &before);
    sync_all(w, "faults");
  }
  if (opt.parts & PART_ABORT)
    run_abort(w);
  if (opt.parts & PART_STAMPS)
    run_stamps(w);
  if (opt.parts & PART_STUCK)
    run_stuck(w);
  if (opt.parts & PART_MISMATCH)
    run_mismatch(w);
  if (faults) {
    sync_all(w, "faults");
    measure_settled(w, &before, &after);
    char what[96];
    snprintf(what, sizeof(what), "%s after the fault parts (abort, stuck, mismatch)", w->name);
    usage_check(w, &before, &after, what);
  }
  world_free(w);
}

/* ---- processes ---- */

typedef struct {
  size_t slot, priv;
  long cases;
} plan_t;
static plan_t plan;

/* The threads layout, in a child of main. */
static void threads_main(void) {
  static world_t w;
  child_setup("[threads]");
  memset(&w, 0, sizeof(w));
  w.procs = 0;
  w.n = w.nlocal = opt.ngpus;
  w.name = "threads";
  w.slot_bytes = plan.slot;
  w.priv = plan.priv;
  w.sh = calloc(1, sizeof(shared_t));
  w.slots = malloc((size_t)w.n * w.slot_bytes);
  if (!w.sh || !w.slots)
    die("out of host memory for %d x %zu-byte input slots", w.n, w.slot_bytes);
  for (int i = 0; i < w.n; i++) {
    w.rk[i].rank = i;
    w.rk[i].dev = rank_dev(i);
  }
  run_world(&w);
  info("threads layout done");
}

/* One rank process of the procs layout. */
static void rank_main(shared_t *sh, unsigned char *slots, size_t slot_bytes, int rank,
                      int deadpeer) {
  static world_t w;
  child_setup("[%s rank %d]", deadpeer ? "deadpeer" : "procs", rank);
  memset(&w, 0, sizeof(w));
  w.procs = 1;
  w.n = opt.ngpus;
  w.nlocal = 1;
  w.name = deadpeer ? "deadpeer" : "procs";
  w.sh = sh;
  w.slots = slots;
  w.slot_bytes = slot_bytes;
  w.priv = deadpeer ? MIB : plan.priv;
  w.rk[0].rank = rank;
  w.rk[0].dev = rank_dev(rank);
  if (join_netns(rank) != 0) return;
  watch(opt.step_s, "cudaSetDevice(%d)", w.rk[0].dev);
  CK(cudaSetDevice(w.rk[0].dev));
  if (deadpeer) {
    world_alloc(&w, 0);
    run_deadpeer(&w);
    world_free(&w);
  } else {
    run_world(&w);
  }
  alarm(0);
}

/*
 * A procs runner, in a child of main: forks the ranks before anything else,
 * then serves unique ids (zccGetUniqueId starts a thread: no fork after it)
 * and reaps the ranks.
 */
static void runner_main(int deadpeer) {
  int n = opt.ngpus;
  size_t slot_bytes = deadpeer ? MIB : plan.slot;
  size_t bytes = ((sizeof(shared_t) + 4095) & ~(size_t)4095) + (size_t)n * slot_bytes;
  char *mem = shared_alloc(bytes);
  shared_t *sh = (shared_t *)mem;
  unsigned char *slots = (unsigned char *)mem + ((sizeof(shared_t) + 4095) & ~(size_t)4095);
  pid_t pids[MAX_RANKS];
  int done[MAX_RANKS] = {0}, alive = 0;
  const char *name = deadpeer ? "deadpeer" : "procs";

  snprintf(tag, sizeof(tag), "[%s runner]", name);
  if (deadpeer)
    setenv("ZCC_TIMEOUT", "5000", 1);
  for (int r = 0; r < n; r++) {
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] < 0) {
      fail("fork of rank %d failed: %s", r, strerror(errno));
      break;
    }
    if (pids[r] == 0) {
      rank_main(sh, slots, slot_bytes, r, deadpeer);
      _exit(0);
    }
    alive++;
  }
  /* --netns: the ids' listener where rank 0 is (it serves the rendezvous) */
  if (join_netns(0) != 0) atomic_store(&sh->id_failed, 1);
  double t0 = now_s(), limit = opt.quick ? 1100 : 4 * 3600;
  while (alive > 0) {
    int req = atomic_load(&sh->id_req), rdy = atomic_load(&sh->id_ready);
    if (req > rdy) {
      if (rdy >= MAX_IDS) {
        fail("the ranks asked for more than %d unique ids", MAX_IDS);
        atomic_store(&sh->id_failed, 1);
        atomic_store(&sh->id_ready, req);
        continue;
      }
      zccResult_t rc = zccGetUniqueId(&sh->ids[rdy]);
      if (rc != zccSuccess) {
        fail("zccGetUniqueId: %s: %s", rc_name(rc), last_err(NULL));
        atomic_store(&sh->id_failed, 1);
      }
      atomic_store(&sh->id_ready, rdy + 1);
      continue;
    }
    for (int r = 0; r < n; r++) {
      int st = 0;
      if (done[r] || waitpid(pids[r], &st, WNOHANG) != pids[r])
        continue;
      done[r] = 1;
      alive--;
      atomic_store(&sh->reaped[r], 1);
      if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        fail("%s rank %d exited with status %d%s", name, r, WEXITSTATUS(st),
             WEXITSTATUS(st) == 3 ? " (watchdog)" : "");
      else if (WIFSIGNALED(st))
        fail("%s rank %d was killed by signal %d (%s)", name, r, WTERMSIG(st),
             strsignal(WTERMSIG(st)));
    }
    if (alive > 0 && now_s() - t0 > limit) {
      for (int r = 0; r < n; r++)
        if (!done[r]) {
          fail("%s rank %d still running after %.0f s: killed", name, r, limit);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          done[r] = 1;
          alive--;
        }
    }
    sleep_s(1e-3);
  }
}

static void threads_child(int unused) {
  (void)unused;
  /* More ranks of this process on the GPU than CUDA's default 8 stream
     queues: zcc refuses that unless each stream has a queue of its own. Only
     here (this child starts CUDA afresh): the procs layout's processes hold
     one rank each. (16 processes that each asked for 32 got 3 clients of an
     MPS server on an H100, the rest cudaErrorDevicesUnavailable; a shared
     pool of queues would explain it, not confirmed.) */
  if (opt.ngpus > 8)
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  threads_main();
}

static void runner_child(int deadpeer) {
  runner_main(deadpeer);
}

int main(int argc, char **argv) {
  probe_t pr;
  setvbuf(stdout, NULL, _IOLBF, 0);
  zt_types_init(); /* zt_elem_str's narrow-float tables, before any child forks */
  if (parse_args(argc, argv) != 0) {
    usage();
    return 2;
  }
  counts = shared_alloc(sizeof(*counts));

  probe(&pr, opt.ngpus);
  if (pr.err != 0) {
    printf("skipped: no usable CUDA driver or device (%s)\n", pr.msg);
    return 77;
  }
  if (opt.share) {
    opt.ndev = pr.count < opt.ngpus ? pr.count : opt.ngpus;
  } else if (pr.count < 2) {
    printf("skipped: %d CUDA device(s) visible; without --ranks the test needs at least 2\n",
           pr.count);
    return 77;
  }
  if (!opt.share && opt.ngpus > pr.count) {
    printf("skipped: --ngpus %d but only %d CUDA devices are visible\n", opt.ngpus, pr.count);
    return 77;
  }
  if (!pr.peer_ok) {
    printf("skipped: %s\n", pr.msg);
    return 77;
  }
  if (opt.ngpus == 0)
    opt.ngpus = pr.count < MAX_RANKS ? pr.count : MAX_RANKS;
  if (!opt.share)
    opt.ndev = opt.ngpus;
  /* The ring and tree kernels reduce in ring or tree order: inputs exact in
     any order where they run, forced or picked (over GPU shm, ZCC_P2P_DISABLE=1,
     the cost model picks the ring for larger sizes). */
  const char *algo = getenv("ZCC_ALGO"), *p2p_off = getenv("ZCC_P2P_DISABLE");
  if (algo && (strcmp(algo, "ring") == 0 || strcmp(algo, "tree") == 0))
    opt.order_free = 1;
  if (p2p_off && strcmp(p2p_off, "1") == 0 && !(algo && *algo))
    opt.order_free = 1;
  /* ranks on different hosts reach each other through the net transport,
     where only the connector kernels run */
  if (opt.nnetns > 1)
    opt.order_free = 1;
  /* so do communicators of more ranks than the all-pairs kernels take */
  if (opt.ngpus > 8)
    opt.order_free = 1;

  /* A hung peer must become an error well before the test's own limits. */
  setenv("ZCC_TIMEOUT", "60000", 0);
  opt.tmo_s = (double)strtol(getenv("ZCC_TIMEOUT"), NULL, 10) / 1000.0;
  if (opt.tmo_s < 1)
    opt.tmo_s = 1;
  opt.wait_s = opt.tmo_s + 30;
  opt.barrier_s = opt.tmo_s + 90;
  opt.step_s = (unsigned)(opt.tmo_s + 150);
  if (opt.quick && opt.full)
    opt.full = 0;

  sizing_t sz = {opt.ngpus, 0, 0, 0};
  enumerate(opt.ngpus, size_case, &sz);
  /* Also room for the other parts' inputs (65541 floats) and buffers. */
  plan.slot = (sz.slot < MIB ? MIB : (sz.slot + 4095) & ~(size_t)4095);
  plan.priv = sz.priv < MIB + 2 * GUARD + 64 ? MIB + 2 * GUARD + 64 : sz.priv;
  plan.cases = sz.cases;

  const char *pdd = getenv("ZCC_P2P_DIRECT_DISABLE");
  printf("test_gpu_colls: %d ranks on %d GPU(s), ZCC_ALGO=%s%s, ZCC_P2P_DIRECT_DISABLE=%s, "
         "layouts:%s%s, %s mode, %ld matrix cases per layout, "
         "ZCC_TEST_SEED=%" PRIu64 ", ZCC_TIMEOUT=%.0f ms\n",
         opt.ngpus, opt.ndev, algo ? algo : "(default)", opt.order_free ? " (order-free inputs)" : "",
         pdd && *pdd ? pdd : "(unset)",
         opt.threads ? " threads" : "", opt.procs ? " procs" : "",
         opt.quick  ? "quick"
         : opt.full ? "full"
                    : "default",
         (opt.parts & PART_MATRIX) ? plan.cases : 0L, opt.seed, opt.tmo_s * 1000);
  fflush(stdout);

  double limit = opt.quick ? 1150 : 4 * 3600 + 60;
  double t0 = now_s();
  if (opt.threads && (opt.parts & ~PART_DEADPEER))
    run_child("threads layout", threads_child, 0, limit);
  if (opt.procs && (opt.parts & ~PART_DEADPEER))
    run_child("procs layout", runner_child, 0, limit);
  if (opt.procs && (opt.parts & PART_DEADPEER))
    run_child("deadpeer (procs)", runner_child, 1, 300);

  long checks = atomic_load(&counts->checks), failed = atomic_load(&counts->failed);
  printf("test_gpu_colls: %.1f s\n", now_s() - t0);
  printf("gpu colls: %ld checks, %ld failed\n", checks, failed);
  return failed ? 1 : 0;
}
