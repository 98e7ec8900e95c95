/*
 * What a communicator runs: one choice for host and GPU communicators.
 *
 * The candidates are the algorithm/protocol pairs this build's executors
 * run for the communicator and collective (zcc_select_can_run); each is
 * costed by the model of the link class the ranks share (cost.c:
 * zcc_select_predict); the fastest that the model may pick wins
 * (zcc_select_auto: kernels measured slower where they run stay for when
 * ZCC_ALGO asks). ZCC_ALGO and ZCC_PROTO are parsed here, once, for every
 * communicator and for the graph planner.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "param.h"
#include "planner.h"

ZCC_PARAM_STR(algo, "ALGO", NULL,
              "force an algorithm: ring, tree, oneshot (also 'direct'), twoshot, push, ce "
              "or hier; host communicators run ring and oneshot (for allreduce also twoshot on "
              "one host; for every collective but alltoall hier on several hosts with the "
              "same number of ranks on each), GPU communicators on one host every one but "
              "hier (push, ce, twoshot and tree for allreduce), on several ring, tree "
              "(allreduce) and hier (allreduce, the same number of ranks on each host); a "
              "name this communicator cannot run is an error that lists the ones it can")
ZCC_PARAM_STR(proto, "PROTO", NULL,
              "force a protocol: ll, ll128 or simple; host communicators run simple, GPU "
              "communicators ll (oneshot allreduce up to 64 KiB) and simple")

static const char *algo_names[ZCC_ALGO_COUNT] = {"ring", "tree", "oneshot", "twoshot",
                                                 "push", "ce",   "hier"};
static const char *proto_names[ZCC_PROTO_COUNT] = {"ll", "ll128", "simple"};

const char *zcc_coll_name(zcc_coll_t coll) {
  static const char *names[] = {"allreduce", "broadcast",     "reduce",  "allgather",
                                "reducescatter", "alltoall", "sendrecv"};
  return coll >= 0 && coll < ZCC_COLL_COUNT ? names[coll] : "invalid";
}

const char *zcc_algo_name(zcc_algo_t algo) {
  return algo >= 0 && algo < ZCC_ALGO_COUNT ? algo_names[algo] : "invalid";
}

const char *zcc_proto_name(zcc_proto_t proto) {
  return proto >= 0 && proto < ZCC_PROTO_COUNT ? proto_names[proto] : "invalid";
}

const char *zcc_algo_names(void) {
  return "ring, tree, oneshot (or direct), twoshot, push, ce, hier";
}

int zcc_algo_parse(const char *s) {
  if (!s) return -1;
  if (strcasecmp(s, "direct") == 0) return ZCC_ALGO_ONESHOT;
  for (int i = 0; i < ZCC_ALGO_COUNT; i++)
    if (strcasecmp(s, algo_names[i]) == 0) return i;
  return -1;
}

int zcc_proto_parse(const char *s) {
  if (!s) return -1;
  for (int i = 0; i < ZCC_PROTO_COUNT; i++)
    if (strcasecmp(s, proto_names[i]) == 0) return i;
  return -1;
}

const char *zcc_planner_algo_override(void) { return zcc_param_algo(); }
const char *zcc_planner_proto_override(void) { return zcc_param_proto(); }

/* The LL allreduce's per-rank limit: its buffers hold 64 KiB per peer. */
#define GPU_LL_MAX (64 * 1024)

static int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t len, const char *fmt, ...) {
  if (why && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
  }
  return 0;
}

int zcc_select_conn_kernels(const zcc_select_ctx_t *c) {
  return c->gpu && (c->conn_only || c->nranks > ZCC_GPU_PAIRS_MAX);
}

int zcc_select_can_run(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                       zcc_proto_t proto, size_t bytes, char *why, size_t whylen) {
  if (why && whylen) why[0] = '\0';
  if (algo < 0 || algo >= ZCC_ALGO_COUNT || proto < 0 || proto >= ZCC_PROTO_COUNT)
    return fail(why, whylen, "no such algorithm or protocol");
  if (coll < 0 || coll >= ZCC_COLL_COUNT) return fail(why, whylen, "no such collective");
  const char *an = algo_names[algo], *cn = zcc_coll_name(coll);
  int pairwise = coll == ZCC_COLL_ALLTOALL || coll == ZCC_COLL_SENDRECV;
  if (pairwise && algo != ZCC_ALGO_ONESHOT)
    return fail(why, whylen, "%s is all-pairs by nature (oneshot)", cn);
  if (!c->gpu) {
    int twoshot = algo == ZCC_ALGO_TWOSHOT && coll == ZCC_COLL_ALLREDUCE;
    int hier = algo == ZCC_ALGO_HIER && coll != ZCC_COLL_ALLTOALL && coll != ZCC_COLL_SENDRECV;
    if (twoshot && c->nnodes > 1)
      return fail(why, whylen, "twoshot shares staging memory: every rank on one host "
                  "(here %d hosts)", c->nnodes);
    if (hier && c->nnodes < 2)
      return fail(why, whylen, "hier needs several hosts (here 1)");
    if (hier && (c->min_local != c->max_local || c->max_local < 2))
      return fail(why, whylen, "hier needs the same number of ranks on every host, at least "
                  "2 (here %d to %d)", c->min_local, c->max_local);
    if (algo != ZCC_ALGO_RING && algo != ZCC_ALGO_ONESHOT && !twoshot && !hier)
      return fail(why, whylen, "host communicators run ring and oneshot (direct)%s, not %s",
                  coll == ZCC_COLL_ALLREDUCE ? ", twoshot (on one host) and hier (on several)"
                  : pairwise                 ? ""
                                             : " and hier (on several hosts)", an);
    if (proto != ZCC_PROTO_SIMPLE)
      return fail(why, whylen, "host communicators run the simple protocol, not %s",
                  proto_names[proto]);
    return 1;
  }
  if (zcc_select_conn_kernels(c)) {
    /* peers through the net transport's proxy, or more ranks than the
       all-pairs kernels take: the connector kernels only */
    char who[64];
    if (c->conn_only) snprintf(who, sizeof(who), "over the network");
    else snprintf(who, sizeof(who), "of more than %d ranks", ZCC_GPU_PAIRS_MAX);
    if (proto != ZCC_PROTO_SIMPLE)
      return fail(why, whylen, "GPU communicators %s run the simple protocol, not %s", who,
                  proto_names[proto]);
    if (pairwise) return 1; /* over the per-peer connectors */
    if (algo == ZCC_ALGO_RING || (algo == ZCC_ALGO_TREE && coll == ZCC_COLL_ALLREDUCE)) return 1;
    if (algo == ZCC_ALGO_HIER) { /* every collective but the pairwise ones */
      /* (connectors only on one host too: ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1) */
      if (c->nnodes < 2) return fail(why, whylen, "hier needs several hosts (here 1)");
      if (c->min_local != c->max_local || c->max_local < 2)
        return fail(why, whylen, "hier needs the same number of ranks on every host, at least "
                    "2 (here %d to %d)", c->min_local, c->max_local);
      return 1;
    }
    return fail(why, whylen, "GPU communicators %s run the connector kernels: ring%s%s, not %s",
                who, coll == ZCC_COLL_ALLREDUCE ? ", tree" : "", c->nnodes > 1 ? " and hier" : "",
                an);
  }
  if (c->nnodes > 1)
    return fail(why, whylen, "GPU ranks on several hosts reach each other through the net "
                "transport only");
  if (algo == ZCC_ALGO_HIER) return fail(why, whylen, "hier needs several hosts");
  if (proto == ZCC_PROTO_LL128)
    return fail(why, whylen, "GPU communicators have no ll128 kernel yet");
  if (coll == ZCC_COLL_ALLREDUCE) {
    if (proto == ZCC_PROTO_LL && algo != ZCC_ALGO_ONESHOT)
      return fail(why, whylen, "ll runs the oneshot allreduce only, not %s", an);
    if (proto == ZCC_PROTO_LL && bytes > GPU_LL_MAX)
      return fail(why, whylen, "ll carries at most %d bytes per rank, not %zu", GPU_LL_MAX,
                  bytes);
    if (algo == ZCC_ALGO_CE && c->nranks != 2)
      return fail(why, whylen, "ce pairs the copy engines of 2 ranks, not %d", c->nranks);
    return 1;
  }
  if (proto == ZCC_PROTO_LL) return fail(why, whylen, "ll runs allreduce only, not %s", cn);
  if (algo == ZCC_ALGO_ONESHOT || (algo == ZCC_ALGO_RING && !pairwise)) return 1;
  return fail(why, whylen, "GPU %s runs oneshot (staged all-pairs) and ring, not %s", cn, an);
}

int zcc_select_auto(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                    zcc_proto_t proto, int staged) {
  (void)proto;
  /* Host: twoshot where ranks outnumber the CPUs (measured there only, and
     the ring's many rounds each wait for a scheduling turn), else ring and
     oneshot (both costed from measurements). */
  if (!c->gpu) return algo != ZCC_ALGO_TWOSHOT || c->oversub > 1;
  /* ring and tree (allreduce), by the network's or the link's costs */
  if (zcc_select_conn_kernels(c)) return 1;
  /*
   * Windows in pinned host memory (link class SYS): every kernel is bound by
   * the PCIe link, and the model's costs for each were measured there
   * (docs/perf/h200x1.md): the connectors' ring moves the fewest bytes over
   * it from 3 ranks on (1.6-1.8x the push kernel at 16 MiB).
   */
  int host_windows = c->link_class == ZCC_PATH_SYS;
  /* The other collectives: the staged all-pairs kernels where peers' memory
     is loaded directly (on one GPU the ring measured faster only for
     reduce-scatter from 2 MiB, and no pair of GPUs has measured it yet). */
  if (coll != ZCC_COLL_ALLREDUCE)
    return algo == ZCC_ALGO_ONESHOT || (host_windows && algo == ZCC_ALGO_RING);
  /*
   * Between GPUs that load and store each other's memory: the copy-engine
   * pipeline is correct but slower than SM stores (docs/perf/h200x2.md); the
   * connector ring and tree are slower than the all-pairs kernels
   * (docs/perf/h200x1.md). Push only for unregistered buffers: registered
   * ones move zero copy.
   */
  if (algo == ZCC_ALGO_CE) return 0;
  if (algo == ZCC_ALGO_RING || algo == ZCC_ALGO_TREE) return host_windows;
  return algo != ZCC_ALGO_PUSH || staged;
}

/* "a, b or c": what this communicator runs for coll at `bytes`. */
static void runnable_list(const zcc_select_ctx_t *c, zcc_coll_t coll, size_t bytes, int protos,
                          char *buf, size_t len) {
  size_t o = 0;
  int n = 0;
  buf[0] = '\0';
  for (int i = 0; i < (protos ? ZCC_PROTO_COUNT : ZCC_ALGO_COUNT); i++) {
    int ok = 0;
    for (int j = 0; j < (protos ? ZCC_ALGO_COUNT : ZCC_PROTO_COUNT) && !ok; j++)
      ok = protos ? zcc_select_can_run(c, coll, j, i, bytes, NULL, 0)
                  : zcc_select_can_run(c, coll, i, j, bytes, NULL, 0);
    if (!ok) continue;
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%s", n ? ", " : "",
                          protos ? proto_names[i] : algo_names[i]);
    n++;
  }
}

/* Does the forced algorithm run any collective on this communicator? */
static int runs_somewhere(const zcc_select_ctx_t *c, int algo, int proto) {
  for (int coll = 0; coll < ZCC_COLL_COUNT; coll++)
    for (int a = 0; a < ZCC_ALGO_COUNT; a++)
      for (int q = 0; q < ZCC_PROTO_COUNT; q++)
        if ((algo < 0 || a == algo) && (proto < 0 || q == proto) &&
            zcc_select_can_run(c, coll, a, q, 8, NULL, 0))
          return 1;
  return 0;
}

static const char *kind_of(const zcc_select_ctx_t *c) { return c->gpu ? "GPU" : "host"; }

zccResult_t zcc_select(const zcc_select_ctx_t *c, zcc_coll_t coll, size_t bytes, int staged,
                       zcc_choice_t *out) {
  if (!c || !out || c->nranks < 1 || c->nnodes < 1 || c->nnodes > c->nranks)
    return zcc_error(zccInvalidArgument, "planner: %d ranks on %d hosts", c ? c->nranks : 0,
                     c ? c->nnodes : 0);
  if (coll < 0 || coll >= ZCC_COLL_COUNT)
    return zcc_error(zccInvalidArgument, "planner: collective %d is invalid", (int)coll);
  const char *fa = zcc_param_algo(), *fp = zcc_param_proto();
  int want_a = -1, want_p = -1;
  if (fa && *fa && (want_a = zcc_algo_parse(fa)) < 0)
    return zcc_error(zccInvalidArgument, "ZCC_ALGO=%s is not an algorithm: use %s", fa,
                     zcc_algo_names());
  if (fp && *fp && (want_p = zcc_proto_parse(fp)) < 0)
    return zcc_error(zccInvalidArgument, "ZCC_PROTO=%s is not a protocol: use ll, ll128 or simple",
                     fp);
  char list[160];
  if (want_a >= 0 && !runs_somewhere(c, want_a, -1)) {
    /* why, as allreduce (which every algorithm runs) meets it */
    char why[160];
    runnable_list(c, coll, bytes, 0, list, sizeof(list));
    zcc_select_can_run(c, ZCC_COLL_ALLREDUCE, want_a, ZCC_PROTO_SIMPLE, 8, why, sizeof(why));
    return zcc_error(zccInvalidArgument,
                     "ZCC_ALGO=%s: this %s communicator (%d ranks, %d host%s) cannot run it "
                     "(%s); for %s it runs %s", fa, kind_of(c), c->nranks, c->nnodes,
                     c->nnodes == 1 ? "" : "s", why[0] ? why : "no kernel for it",
                     zcc_coll_name(coll), list);
  }
  if (want_p >= 0 && !runs_somewhere(c, -1, want_p)) {
    runnable_list(c, coll, bytes, 1, list, sizeof(list));
    return zcc_error(zccInvalidArgument,
                     "ZCC_PROTO=%s: this %s communicator cannot run it; for %s it runs %s", fp,
                     kind_of(c), zcc_coll_name(coll), list);
  }
  if (c->nranks == 1) { /* nothing moves: a local copy */
    *out = (zcc_choice_t){ZCC_ALGO_ONESHOT, ZCC_PROTO_SIMPLE, 0};
    return zccSuccess;
  }
  /* What the overrides leave for this collective and size (NCCL's rules). */
  if (want_p >= 0 && !runs_somewhere(c, want_a, want_p)) {
    char why[160];
    zcc_select_can_run(c, coll, want_a, want_p, bytes, why, sizeof(why));
    return zcc_error(zccInvalidArgument, "ZCC_ALGO=%s with ZCC_PROTO=%s: %s", fa, fp, why);
  }
  int a_ok = 0, p_ok = 0;
  for (int a = 0; a < ZCC_ALGO_COUNT; a++)
    for (int q = 0; q < ZCC_PROTO_COUNT; q++) {
      if (!zcc_select_can_run(c, coll, a, q, bytes, NULL, 0)) continue;
      if (want_a < 0 || a == want_a) a_ok = 1;
      if (want_p < 0 || q == want_p) p_ok = 1;
    }
  if (!p_ok) want_p = -1; /* ll beyond its size, or a collective ll does not run */
  if (!a_ok) {
    /* tree: the ring, as NCCL's rooted and gathering collectives run chains;
       an algorithm of other collectives only: the model's choice here */
    want_a = want_a == ZCC_ALGO_TREE && zcc_select_can_run(c, coll, ZCC_ALGO_RING,
                                                           ZCC_PROTO_SIMPLE, bytes, NULL, 0)
                 ? ZCC_ALGO_RING
                 : -1;
  }
  zcc_choice_t best = {ZCC_ALGO_ONESHOT, ZCC_PROTO_SIMPLE, INFINITY};
  for (int a = 0; a < ZCC_ALGO_COUNT; a++)
    for (int q = 0; q < ZCC_PROTO_COUNT; q++) {
      if ((want_a >= 0 && a != want_a) || (want_p >= 0 && q != want_p)) continue;
      if (!zcc_select_can_run(c, coll, a, q, bytes, NULL, 0)) continue;
      /* A forced algorithm runs as asked; otherwise only what the model may pick. */
      if (want_a < 0 && !zcc_select_auto(c, coll, a, q, staged)) continue;
      double t = zcc_select_predict(c, coll, a, q, bytes, staged);
      if (t < best.time_us) best = (zcc_choice_t){a, q, t};
    }
  if (!isfinite(best.time_us)) {
    char why[160];
    runnable_list(c, coll, bytes, 0, list, sizeof(list));
    zcc_select_can_run(c, coll, want_a >= 0 ? want_a : ZCC_ALGO_ONESHOT,
                       want_p >= 0 ? want_p : ZCC_PROTO_SIMPLE, bytes, why, sizeof(why));
    return zcc_error(zccInvalidArgument, "%s%s%s%s: this %s communicator runs %s for %s: %s",
                     fa && *fa ? "ZCC_ALGO=" : "", fa && *fa ? fa : "",
                     fp && *fp ? " ZCC_PROTO=" : "", fp && *fp ? fp : "", kind_of(c), list,
                     zcc_coll_name(coll), why);
  }
  *out = best;
  return zccSuccess;
}

void zcc_select_ctx_of_plan(const zcc_planner_t *p, zcc_select_ctx_t *c) {
  *c = (zcc_select_ctx_t){0}; /* not measured; a plan places one rank per GPU */
  c->gpu = !p->cpu_ranks;
  c->nranks = p->nranks;
  c->nnodes = p->nnodes;
  c->link_class = p->cpu_ranks ? (p->nnodes > 1 ? ZCC_PATH_NET : ZCC_PATH_SELF) : p->island_class;
  /* GPUs on several hosts reach each other through the net transport's
     proxy: the connector kernels alone, costed by the network */
  c->conn_only = c->gpu && p->nnodes > 1;
  if (c->conn_only) c->link_class = ZCC_PATH_NET;
  c->max_local = p->max_local;
  c->min_local = p->nranks;
  for (int h = 0; h < p->nnodes; h++) {
    int k = p->host_off[h + 1] - p->host_off[h];
    if (k < c->min_local) c->min_local = k;
  }
}

static int size_class(size_t bytes) {
  int k = 0;
  while (bytes > 1 && k < ZCC_SELECT_CACHE_SIZES - 1) {
    bytes >>= 1;
    k++;
  }
  return k;
}

zccResult_t zcc_select_cached(zcc_select_cache_t *cache, zcc_coll_t coll, size_t bytes,
                              int staged, zcc_choice_t *out) {
  /* The overrides are read once per process (zcc_param_reload, in tests,
     makes a new generation): a kept choice stays right until then. */
  unsigned gen = zcc_param_generation();
  if (cache->generation != gen) {
    memset(cache->e, 0, sizeof(cache->e));
    cache->generation = gen;
  }
  if (coll >= 0 && coll < ZCC_COLL_COUNT && bytes > 0) {
    zcc_select_cache_entry_t *e = &cache->e[coll][staged ? 1 : 0][size_class(bytes)];
    if (e->bytes == bytes) {
      cache->hits++;
      *out = e->choice;
      return zccSuccess;
    }
    ZCC_CHECK(zcc_select(&cache->ctx, coll, bytes, staged, out));
    ZCC_TRACE(TUNING, "%s of %zu bytes on %d ranks%s: %s/%s, %.1f us predicted",
              zcc_coll_name(coll), bytes, cache->ctx.nranks, staged ? " (staged)" : "",
              algo_names[out->algo], proto_names[out->proto], out->time_us);
    e->bytes = bytes;
    e->choice = *out;
    cache->misses++;
    return zccSuccess;
  }
  return zcc_select(&cache->ctx, coll, bytes, staged, out);
}

/* ---- the decision table ---- */

static void emitf(void (*emit)(void *, const char *), void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emitf(void (*emit)(void *, const char *), void *ctx, const char *fmt, ...) {
  char line[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  emit(ctx, line);
}

zccResult_t zcc_planner_decisions(const zcc_select_ctx_t *c,
                                  void (*emit)(void *ctx, const char *line), void *ctx) {
  static const zcc_coll_t colls[] = {ZCC_COLL_ALLREDUCE, ZCC_COLL_BROADCAST, ZCC_COLL_REDUCE,
                                     ZCC_COLL_ALLGATHER, ZCC_COLL_REDUCESCATTER,
                                     ZCC_COLL_ALLTOALL};
  emitf(emit, ctx, "%s communicator, %d ranks on %d host(s), link class %s: us per candidate "
        "(algo/proto; *: only when ZCC_ALGO/ZCC_PROTO ask; GPU allreduce on unregistered "
        "buffers; 'rule': no model yet)", kind_of(c), c->nranks, c->nnodes,
        zcc_topo_class_name(c->link_class));
  int staged = 1;
  for (size_t k = 0; k < sizeof(colls) / sizeof(colls[0]); k++)
    for (size_t b = 8; b <= ((size_t)8 << 30); b *= 8) {
      zcc_coll_t coll = colls[k];
      zcc_choice_t ch;
      ZCC_CHECK(zcc_select(c, coll, b, staged, &ch));
      char row[480];
      size_t o = 0;
      row[0] = '\0';
      for (int a = 0; a < ZCC_ALGO_COUNT; a++)
        for (int q = 0; q < ZCC_PROTO_COUNT; q++) {
          if (!zcc_select_can_run(c, coll, a, q, b, NULL, 0)) continue;
          double t = zcc_select_predict(c, coll, a, q, b, staged);
          const char *mark = zcc_select_auto(c, coll, a, q, staged) ? "" : "*";
          if (t > 0)
            o += (size_t)snprintf(row + o, o < sizeof(row) ? sizeof(row) - o : 0,
                                  " %s/%s%s %.1f", algo_names[a], proto_names[q], mark, t);
          else
            o += (size_t)snprintf(row + o, o < sizeof(row) ? sizeof(row) - o : 0,
                                  " %s/%s%s rule", algo_names[a], proto_names[q], mark);
        }
      char pick[32];
      snprintf(pick, sizeof(pick), "%s/%s", algo_names[ch.algo], proto_names[ch.proto]);
      emitf(emit, ctx, "%-13s %11zu  %-15s%s", zcc_coll_name(coll), b, pick, row);
    }
  return zccSuccess;
}

zccResult_t zcc_select_explain(const zcc_select_ctx_t *c, zcc_coll_t coll, size_t bytes,
                               int staged, void (*emit)(void *ctx, const char *line), void *ctx) {
  zcc_choice_t ch;
  ZCC_CHECK(zcc_select(c, coll, bytes, staged, &ch));
  emitf(emit, ctx, "%s of %zu bytes on %d ranks (%s communicator, %d host(s), link class %s%s):",
        zcc_coll_name(coll), bytes, c->nranks, kind_of(c), c->nnodes,
        zcc_topo_class_name(c->link_class), c->measured ? ", measured" : "");
  emitf(emit, ctx, "  runs %s/%s%s", algo_names[ch.algo], proto_names[ch.proto],
        ch.time_us > 0 ? "" : " (by the rule: no model for it yet)");
  if (ch.time_us > 0) emitf(emit, ctx, "  predicted %.2f us", ch.time_us);
  for (int a = 0; a < ZCC_ALGO_COUNT; a++) {
    int any = 0;
    for (int q = 0; q < ZCC_PROTO_COUNT; q++) any |= zcc_select_can_run(c, coll, a, q, bytes, NULL, 0);
    char why[200], combo[32];
    if (!any) {
      zcc_select_can_run(c, coll, a, ZCC_PROTO_SIMPLE, bytes, why, sizeof(why));
      emitf(emit, ctx, "  %-15s cannot run: %s", algo_names[a], why);
      continue;
    }
    for (int q = 0; q < ZCC_PROTO_COUNT; q++) {
      if (!zcc_select_can_run(c, coll, a, q, bytes, NULL, 0)) continue;
      if (a == (int)ch.algo && q == (int)ch.proto) continue;
      snprintf(combo, sizeof(combo), "%s/%s", algo_names[a], proto_names[q]);
      double t = zcc_select_predict(c, coll, a, q, bytes, staged);
      int autop = zcc_select_auto(c, coll, a, q, staged);
      if (t > 0 && ch.time_us > 0)
        emitf(emit, ctx, "  %-15s %.2f us, %+.0f%%%s", combo, t, 100.0 * (t - ch.time_us) / ch.time_us,
              autop ? "" : " (not picked unless ZCC_ALGO/ZCC_PROTO ask: the kernels picked measured faster where both ran)");
      else
        emitf(emit, ctx, "  %-15s %s", combo, autop ? "runs by the rule" : "only when ZCC_ALGO asks");
    }
  }
  /* protocols no algorithm runs here, once each */
  for (int q = 0; q < ZCC_PROTO_COUNT; q++) {
    int any = 0;
    for (int a = 0; a < ZCC_ALGO_COUNT; a++) any |= zcc_select_can_run(c, coll, a, q, bytes, NULL, 0);
    if (any) continue;
    char why[200];
    zcc_select_can_run(c, coll, q == ZCC_PROTO_LL ? ZCC_ALGO_ONESHOT : ZCC_ALGO_RING, q, bytes, why,
                       sizeof(why));
    emitf(emit, ctx, "  protocol %-6s cannot run: %s", proto_names[q], why);
  }
  return zccSuccess;
}
