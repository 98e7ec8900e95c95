/*
 * The cost model: time = latency + bytes / bandwidth, per algorithm,
 * protocol and link class. One model for every plan:
 *
 *   - what a communicator of this build runs (host ranks on any hosts, GPU
 *     ranks on one host) is costed by the link classes' measured constants
 *     (zcc_select_predict: shared memory and TCP between host ranks, NVLink
 *     fitted on 2x H200, pinned host windows over PCIe fitted on one H200),
 *     and the planner's choice on such a plan is zcc_select's, so zcc_topo
 *     and a communicator say the same;
 *   - GPU plans across hosts (the network class, which no communicator runs
 *     yet) take the graph terms below:
 *
 *   latency   = base(protocol) + steps(algorithm, collective) * hop(class, protocol)
 *   bandwidth = the algorithm's bandwidth from link loads (rings.c,
 *               trees.c) * protocol efficiency * what the class's links
 *               deliver to SM stores * algorithm efficiency
 *
 *   with the figures NCCL users know on Hopper until zcc measures them: a
 *   kernel launch and its first flag cost a few us, an LL hop over NVLink
 *   about 0.6 us, a Simple hop a few us (a fence per chunk), a network hop
 *   4-8 us; LL carries 4 data bytes per 8, LL128 120 per 128; SM stores
 *   reach 363 of the 450 GB/s an NV18 pair's wire carries each way
 *   (DESIGN.md), RDMA about 92% of a port's rate.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "debug.h"
#include "hostmem.h"
#include "param.h"
#include "planner.h"

/* Kernel launch and first flag, us. */
static const double base_lat[ZCC_PROTO_COUNT] = {3.0, 3.5, 4.5};
/* One step over a link of each class, us: LL, LL128, Simple. */
static const double hop_lat[ZCC_PATH_CLASS_COUNT][ZCC_PROTO_COUNT] = {
    [ZCC_PATH_SELF] = {0.2, 0.3, 0.6}, [ZCC_PATH_NVL] = {0.6, 1.0, 2.0},
    [ZCC_PATH_NVS] = {0.7, 1.1, 2.2},  [ZCC_PATH_PIX] = {1.0, 1.6, 2.6},
    [ZCC_PATH_PHB] = {1.2, 1.9, 3.0},  [ZCC_PATH_SYS] = {1.6, 2.5, 3.6},
    [ZCC_PATH_NET] = {4.0, 6.0, 8.0},  [ZCC_PATH_NONE] = {1e6, 1e6, 1e6}};
static const double proto_eff[ZCC_PROTO_COUNT] = {0.5, 120.0 / 128.0, 1.0};
/* ring, tree, oneshot, twoshot, push, ce, hier */
static const double algo_eff[ZCC_ALGO_COUNT] = {1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.95};

/* What SM stores get of a link class's bandwidth. */
static double class_frac(int cls) {
  if (cls <= ZCC_PATH_SELF) return 1.0;
  if (cls <= ZCC_PATH_NVS) return 363.0 / 450.0;
  if (cls == ZCC_PATH_NET) return 0.92;
  return 0.85; /* PCIe */
}

/* ---- host communicators ----
 * Measured on the 2-core VM with nothing else running (2026-11-29), 2 ranks,
 * float32 sum, allreduce_perf -np 2 -n 2000..20000, ZCC_ALGO=direct and
 * =ring, shared memory and ZCC_SHM_DISABLE=1 (TCP over loopback); alpha is
 * per round (direct) or per step (ring: 2 steps on 2 ranks), bandwidth is
 * bytes each rank moves per us, fitted at 8-32 KiB (where the choice is
 * made) and checked at 2 MiB:
 *   shm  direct: 8 B 0.70 us, 8 KiB 2.14, 16 KiB 3.88, 32 KiB 5.59, 2 MiB 589
 *   shm  ring:   8 B 0.94 us, 8 KiB 2.78, 16 KiB 3.27, 32 KiB 4.87, 2 MiB 303
 *     -> crossover measured between 8 and 16 KiB; the model puts it at 9 KiB
 *   tcp  direct: 4 KiB 4.3 us, 16 KiB 7.4, 64 KiB 19.9, 256 KiB 53.6, 8 MiB 4392
 *   tcp  ring:   4 KiB 8.0 us, 16 KiB 11.8, 64 KiB 19.4, 256 KiB 54.1, 8 MiB 3921
 *     -> crossover measured between 64 and 256 KiB; the model puts it at 207 KiB
 */
#define SHM_DIRECT_ALPHA 0.7
#define SHM_DIRECT_BW 6.0
#define SHM_RING_ALPHA 0.5
#define SHM_RING_BW 7.5
#define TCP_DIRECT_ALPHA 4.3
#define TCP_DIRECT_BW 4.0
#define TCP_RING_ALPHA 4.5
#define TCP_RING_BW 4.4


/* ---- support ---- */

static int hop_class_of(const zcc_planner_t *p, zcc_algo_t algo) {
  switch (algo) {
  case ZCC_ALGO_RING: return p->ring_class;
  case ZCC_ALGO_ONESHOT:
  case ZCC_ALGO_TWOSHOT: return p->nnodes > 1 ? ZCC_PATH_NET : p->island_class;
  case ZCC_ALGO_TREE:
  case ZCC_ALGO_HIER: return p->nnodes > 1 ? ZCC_PATH_NET : p->ring_intra_class;
  default: return ZCC_PATH_NONE;
  }
}

/* A plan a communicator of this build runs: costed and chosen by zcc_select. */
static int comm_runs(const zcc_planner_t *p) { return p->cpu_ranks || p->nnodes == 1; }

int zcc_planner_supports(const zcc_planner_t *p, zcc_coll_t coll, zcc_algo_t algo,
                         zcc_proto_t proto, char *why, size_t whylen) {
  char dummy[256]; /* the reason, when the caller does not want it */
  if (!why) {
    why = dummy;
    whylen = sizeof(dummy);
  }
  if (comm_runs(p)) {
    zcc_select_ctx_t c;
    zcc_select_ctx_of_plan(p, &c);
    return zcc_select_can_run(&c, coll, algo, proto, 1, why, whylen);
  }
  if (algo < 0 || algo >= ZCC_ALGO_COUNT || proto < 0 || proto >= ZCC_PROTO_COUNT) {
    snprintf(why, whylen, "no such algorithm or protocol");
    return 0;
  }
  if (algo == ZCC_ALGO_PUSH || algo == ZCC_ALGO_CE) {
    snprintf(why, whylen, "%s is a kernel of GPU communicators on one host, costed by its "
             "measurements (zcc_select), not on the graph", zcc_algo_name(algo));
    return 0;
  }
  const char *an = zcc_algo_name(algo);
  int ok_coll;
  switch (coll) {
  case ZCC_COLL_ALLREDUCE: ok_coll = 1; break;
  case ZCC_COLL_BROADCAST:
  case ZCC_COLL_REDUCE:
    ok_coll = algo == ZCC_ALGO_RING || algo == ZCC_ALGO_TREE || algo == ZCC_ALGO_ONESHOT;
    break;
  case ZCC_COLL_ALLGATHER:
  case ZCC_COLL_REDUCESCATTER: ok_coll = algo == ZCC_ALGO_RING || algo == ZCC_ALGO_ONESHOT; break;
  case ZCC_COLL_ALLTOALL:
  case ZCC_COLL_SENDRECV: ok_coll = algo == ZCC_ALGO_ONESHOT; break;
  default: ok_coll = 0; break;
  }
  if (!ok_coll) {
    snprintf(why, whylen, "%s does not run %s", an, zcc_coll_name(coll));
    return 0;
  }
  int all_pairs_coll = coll == ZCC_COLL_ALLTOALL || coll == ZCC_COLL_SENDRECV;
  if ((algo == ZCC_ALGO_ONESHOT || algo == ZCC_ALGO_TWOSHOT) && !all_pairs_coll) {
    if (p->nnodes > 1) {
      snprintf(why, whylen, "%s needs every rank on one host; these %d ranks span %d hosts", an,
               p->nranks, p->nnodes);
      return 0;
    }
    if (!p->island) {
      snprintf(why, whylen,
               "%s needs every pair of ranks joined by NVLink; the worst pair here goes "
               "over %s", an, zcc_topo_class_name(p->island_class));
      return 0;
    }
  }
  if (algo == ZCC_ALGO_HIER && (p->nnodes < 2 || p->max_local < 2)) {
    snprintf(why, whylen, "hier needs several hosts with several ranks each (here %d host%s, "
             "at most %d rank%s per host)", p->nnodes, p->nnodes == 1 ? "" : "s", p->max_local,
             p->max_local == 1 ? "" : "s");
    return 0;
  }
  if (proto == ZCC_PROTO_LL128) {
    int cls = hop_class_of(p, algo);
    if (cls > ZCC_PATH_NVS) {
      snprintf(why, whylen, "ll128 needs NVLink on every step; %s here goes over %s", an,
               zcc_topo_class_name(cls));
      return 0;
    }
  }
  why[0] = '\0';
  return 1;
}

/* ---- prediction ---- */

double zcc_planner_predict(const zcc_planner_t *p, zcc_coll_t coll, zcc_algo_t algo,
                           zcc_proto_t proto, size_t bytes) {
  if (comm_runs(p)) {
    zcc_select_ctx_t c;
    zcc_select_ctx_of_plan(p, &c);
    if (!zcc_select_can_run(&c, coll, algo, proto, bytes, NULL, 0)) return INFINITY;
    return zcc_select_predict(&c, coll, algo, proto, bytes, 1);
  }
  double S = (double)bytes, n = p->nranks, N = p->nnodes, L = p->max_local;
  int cls = hop_class_of(p, algo);
  double base = base_lat[proto]; /* GPU ranks across hosts (comm_runs: the rest) */
  if (p->nranks == 1) return base;
  double hop = hop_lat[cls][proto];
  double hop_net = hop_lat[ZCC_PATH_NET][proto];
  int intra = p->nnodes > 1 ? p->ring_intra_class : cls;
  double hop_in = hop_lat[intra][proto];
  double eff = proto_eff[proto] * algo_eff[algo] * class_frac(cls);
  double steps = 0, us_bw = 0; /* us_bw: us per byte at full efficiency */
  switch (algo) {
  case ZCC_ALGO_RING: {
    double factor = 1;
    if (coll == ZCC_COLL_ALLREDUCE) {
      steps = 2 * (n - 1);
      factor = 2 * (n - 1) / n;
    } else if (coll == ZCC_COLL_ALLGATHER || coll == ZCC_COLL_REDUCESCATTER) {
      steps = n - 1;
      factor = (n - 1) / n;
    } else {
      steps = n - 1;
    }
    /* A step takes what its hops take on average around the ring: the
     * NVLink steps of a multi-host ring are not charged the network's latency. */
    double sum = 0, cnt = 0;
    for (int k = 0; k < ZCC_PATH_CLASS_COUNT; k++) {
      if (!p->ring_steps[k]) continue;
      sum += p->ring_steps[k] * hop_lat[k][proto];
      cnt += p->ring_steps[k];
    }
    if (cnt > 0) hop = sum / cnt;
    us_bw = factor / (p->ring_bw * 1e3);
    return base + steps * hop + S * us_bw / eff;
  }
  case ZCC_ALGO_TREE: {
    double one_way = p->trees[0].depth * hop_net + (L - 1) * hop_in;
    steps = coll == ZCC_COLL_ALLREDUCE ? 2 : 1;
    return base + steps * one_way + S / (p->tree_bw * 1e3) / eff;
  }
  case ZCC_ALGO_ONESHOT: {
    double per_pair_bytes_inv; /* us per byte of S */
    switch (coll) {
    case ZCC_COLL_ALLREDUCE: per_pair_bytes_inv = p->ap_inv / 1e3; break;
    case ZCC_COLL_BROADCAST: per_pair_bytes_inv = p->bcast_inv / 1e3; break;
    case ZCC_COLL_REDUCE: per_pair_bytes_inv = p->gather_inv / 1e3; break;
    default:
      if (p->nnodes > 1) /* alltoall / sendrecv across hosts: the NICs bound it */
        per_pair_bytes_inv = L * (N - 1) / N / (p->net_bw * 1e3) + p->hier_intra_inv / n / 1e3;
      else
        per_pair_bytes_inv = p->ap_inv / n / 1e3;
      break;
    }
    return base + hop + S * per_pair_bytes_inv / eff;
  }
  case ZCC_ALGO_TWOSHOT:
    return base + 2 * hop + 2 * S / n * p->ap_inv / 1e3 / eff;
  case ZCC_ALGO_HIER: {
    double lat = 2 * hop_in + 2 * (N - 1) * hop_net;
    double bw = 2 * S / L * p->hier_intra_inv / 1e3 +
                2 * (N - 1) / N * S / L * p->hier_rail_inv / 1e3;
    return base + lat + bw / eff;
  }
  default: return INFINITY;
  }
}

/* ---- choice on the graph ---- */

int zcc_planner_on_graph(zcc_algo_t algo) {
  return algo >= 0 && algo < ZCC_ALGO_COUNT && algo != ZCC_ALGO_PUSH && algo != ZCC_ALGO_CE;
}

zccResult_t zcc_planner_pick(const zcc_planner_t *p, zcc_coll_t coll, size_t bytes,
                             zcc_choice_t *out) {
  if (comm_runs(p)) { /* what the communicator would run (unregistered GPU buffers) */
    zcc_select_ctx_t c;
    zcc_select_ctx_of_plan(p, &c);
    return zcc_select(&c, coll, bytes, 1, out);
  }
  const char *fa = zcc_planner_algo_override(), *fp = zcc_planner_proto_override();
  int want_a = -1, want_p = -1;
  if (fa && *fa && (want_a = zcc_algo_parse(fa)) < 0)
    return zcc_error(zccInvalidArgument, "ZCC_ALGO=%s is not an algorithm: use %s", fa,
                     zcc_algo_names());
  if (fp && *fp && (want_p = zcc_proto_parse(fp)) < 0)
    return zcc_error(zccInvalidArgument, "ZCC_PROTO=%s is not a protocol: use ll, ll128 or simple",
                     fp);
  zcc_choice_t best = {ZCC_ALGO_RING, ZCC_PROTO_SIMPLE, INFINITY};
  char why[256] = "";
  for (int a = 0; a < ZCC_ALGO_COUNT; a++) {
    if (want_a >= 0 && a != want_a) continue;
    for (int q = 0; q < ZCC_PROTO_COUNT; q++) {
      if (want_p >= 0 && q != want_p) continue;
      char w[256];
      if (!zcc_planner_supports(p, coll, a, q, w, sizeof(w))) {
        if (!why[0]) snprintf(why, sizeof(why), "%s", w);
        continue;
      }
      double t = zcc_planner_predict(p, coll, a, q, bytes);
      if (t < best.time_us) best = (zcc_choice_t){a, q, t};
    }
  }
  if (!isfinite(best.time_us)) {
    if (want_a >= 0 || want_p >= 0)
      return zcc_error(zccInvalidArgument, "%s%s%s%s%s cannot run %s here: %s",
                       want_a >= 0 ? "ZCC_ALGO=" : "", want_a >= 0 ? fa : "",
                       want_a >= 0 && want_p >= 0 ? " with " : "",
                       want_p >= 0 ? "ZCC_PROTO=" : "", want_p >= 0 ? fp : "",
                       zcc_coll_name(coll), why);
    return zcc_error(zccInternalError, "planner: no algorithm runs %s here: %s",
                     zcc_coll_name(coll), why);
  }
  ZCC_TRACE(TUNING, "%s of %zu bytes on %d ranks: %s/%s, %.1f us", zcc_coll_name(coll), bytes,
            p->nranks, zcc_algo_name(best.algo), zcc_proto_name(best.proto), best.time_us);
  *out = best;
  return zccSuccess;
}

int zcc_planner_format_row(const zcc_planner_t *p, zcc_coll_t coll, size_t bytes, char *buf,
                           size_t len) {
  size_t o = 0;
  int best_a = -1, best_q = -1;
  double best = INFINITY;
  o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%-13s %11zu", zcc_coll_name(coll),
                        bytes);
  for (int a = 0; a < ZCC_ALGO_COUNT; a++)
    for (int q = 0; q < ZCC_PROTO_COUNT && zcc_planner_on_graph(a); q++) {
      if (!zcc_planner_supports(p, coll, a, q, NULL, 0)) {
        o += (size_t)snprintf(buf + o, o < len ? len - o : 0, " %9s", "-");
        continue;
      }
      double t = zcc_planner_predict(p, coll, a, q, bytes);
      if (t < best) {
        best = t;
        best_a = a;
        best_q = q;
      }
      o += (size_t)snprintf(buf + o, o < len ? len - o : 0, " %9.1f", t);
    }
  zcc_choice_t ch;
  if (comm_runs(p) && zcc_planner_pick(p, coll, bytes, &ch) == zccSuccess) {
    best_a = ch.algo; /* zcc_select's pick: it may be a kernel outside the graph's columns */
    best_q = ch.proto;
  }
  if (best_a >= 0)
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "  %s/%s", zcc_algo_name(best_a),
                          zcc_proto_name(best_q));
  return (int)o;
}

void zcc_planner_log_table(const zcc_planner_t *p) {
  if (!zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) return;
  char head[512];
  size_t o = (size_t)snprintf(head, sizeof(head), "%-13s %11s", "collective", "bytes");
  for (int a = 0; a < ZCC_ALGO_COUNT; a++)
    for (int q = 0; q < ZCC_PROTO_COUNT && zcc_planner_on_graph(a); q++) {
      char col[24];
      snprintf(col, sizeof(col), "%s/%s", zcc_algo_name(a), zcc_proto_name(q));
      o += (size_t)snprintf(head + o, o < sizeof(head) ? sizeof(head) - o : 0, " %9.9s", col);
    }
  ZCC_INFO(TUNING, "predicted us on %d ranks, %d hosts:", p->nranks, p->nnodes);
  ZCC_INFO(TUNING, "%s  winner", head);
  static const zcc_coll_t colls[] = {ZCC_COLL_ALLREDUCE, ZCC_COLL_BROADCAST, ZCC_COLL_REDUCE,
                                     ZCC_COLL_ALLGATHER, ZCC_COLL_REDUCESCATTER,
                                     ZCC_COLL_ALLTOALL};
  for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++)
    for (size_t b = 8; b <= ((size_t)1 << 30); b *= 8) {
      char row[512];
      zcc_planner_format_row(p, colls[c], b, row, sizeof(row));
      ZCC_INFO(TUNING, "%s", row);
    }
}

/* ---- the link classes' measured costs: what a communicator runs ----
 *
 * zcc_select_predict costs a communicator's candidates from the class of
 * link its ranks share: host ranks over shared memory (ZCC_PATH_SELF) or
 * TCP (ZCC_PATH_NET, ranks on several hosts), constants above; GPUs over
 * NVLink, constants below. GPU pairs of other classes have no measurement
 * yet and are charged NVLink's.
 */

/*
 * ZCC_TOPO_MEASURE: the measured link replaces the table's ring step (one
 * hop of a ring is one message over the link), and the one-round constants
 * scale by the same ratios (host communicators); GPU candidates scale their
 * latency and byte parts by them (zcc_select_predict).
 */
static void host_scale(const zcc_select_ctx_t *c, double *as, double *bs) {
  *as = *bs = 1;
  if (!c->measured || c->alpha_us <= 0 || c->bw_gbs <= 0) return;
  double ta, tb;
  zcc_select_link_table(c, &ta, &tb);
  *as = c->alpha_us / ta;
  *bs = c->bw_gbs / tb;
}

/*
 * Allreduce of host ranks of one host that outnumber its CPUs (q ranks per
 * CPU): every round waits for a scheduling turn (SHM_TURN_US per rank on the
 * CPU), each message costs SHM_MSG_US, and the bytes share the CPUs. Oneshot
 * gathers at rank 0 (two rounds; rank 0 moves 3 (n-1) S alone), twoshot has
 * two barriers per chunk and 3 S per rank, the ring 2 (n-1) rounds and about
 * 5 (n-1)/n S per rank (into and out of FIFOs at every step). Fitted to
 * allreduce_perf -np 4 and 8 on 2 CPUs (docs/perf/host.md, 2026-12-05):
 * measured / predicted 0.4-1.1 (small sizes at 4 ranks lowest). The
 * barriers became board barriers (no message) and the smallest oneshots run
 * on the boards (hostmem.h) after that fit; the same terms still fit them
 * (a barrier costs what n - 1 messages each way were charged, and the board
 * oneshot lies within the gather's spread), so the crossovers stand.
 */
#define SHM_TURN_US 1.0
#define SHM_MSG_US 0.5
#define SHM_OVERSUB_BW 12.0
static double host_oversub(const zcc_select_ctx_t *c, zcc_algo_t algo, double S) {
  double n = c->nranks, q = c->oversub, turn = SHM_TURN_US * q;
  double per_us = SHM_OVERSUB_BW * 1e3; /* bytes per us */
  switch (algo) {
  case ZCC_ALGO_ONESHOT: return 2 * turn + 2 * (n - 1) * SHM_MSG_US + 3 * (n - 1) * S / per_us;
  case ZCC_ALGO_TWOSHOT: /* a barrier: n - 1 messages each way per rank */
    return ceil(S / (double)zcc_twoshot_chunk_auto(q)) * 2 * (turn + 2 * (n - 1) * SHM_MSG_US) +
           3 * q * S / per_us;
  default: return 2 * (n - 1) * (turn + SHM_MSG_US) + 5 * (n - 1) / n * q * S / per_us;
  }
}

static double host_predict_one(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                               size_t bytes);

/*
 * The hierarchical allreduce (exec/host_plan.c) in its two forms, m ranks on
 * each of H hosts. Rails: a ring reduce-scatter inside each host (shared
 * memory), an allreduce of each rank's segment over its rail (the rank of
 * its local index on every host, over the network), a ring allgather inside
 * the host: 2 (m - 1) shared-memory ring steps and 2 (m - 1) / m S at that
 * ring's rate, 2 (H - 1) network steps and 2 (H - 1) / H S at the network
 * ring's rate (the m rails share the host's link: together they move what
 * one rank's rail would of the whole S). Leaders: each host's ranks send
 * their input to its first rank, which sums them, exchanges the sum with
 * the other hosts' leaders (one round, H - 1 messages each way) and sends
 * the total back: three rounds, one of them over the network, the leader
 * moving 2 (m - 1) S over shared memory and (H - 1) S each way over the
 * network. Where a host's ranks outnumber its CPUs each round also waits
 * for a scheduling turn (host_oversub). The measured link (ZCC_TOPO_MEASURE)
 * scales the network's part.
 */
static double hier_time(const zcc_select_ctx_t *c, double S, int leaders) {
  double as, bs;
  host_scale(c, &as, &bs);
  double m = c->max_local > 1 ? c->max_local : 2, H = c->nnodes;
  double turn = c->oversub > 1 ? SHM_TURN_US * c->oversub : 0;
  if (leaders)
    return 2 * SHM_DIRECT_ALPHA + (H - 1) * TCP_DIRECT_ALPHA * as +
           S * (2 * (m - 1) / (SHM_DIRECT_BW * 1e3) + (H - 1) / (TCP_DIRECT_BW * bs * 1e3)) +
           3 * turn;
  return 2 * (m - 1) * SHM_RING_ALPHA + 2 * (m - 1) / m * S / (SHM_RING_BW * 1e3) +
         2 * (H - 1) * TCP_RING_ALPHA * as + 2 * (H - 1) / H * S / (TCP_RING_BW * bs * 1e3) +
         (2 * (m - 1) + 2 * (H - 1)) * turn;
}

int zcc_host_hier_leaders(const zcc_select_ctx_t *c, size_t bytes) {
  return hier_time(c, (double)bytes, 1) <= hier_time(c, (double)bytes, 0);
}

/*
 * Hierarchical broadcast and reduce (exec/host_plan.c): the root's rank on
 * every other host (the same local index) relays. Broadcast: the root sends
 * to the relays over the network and to its host's ranks, each relay
 * forwards to its host's ranks as the bytes arrive; reduce the mirror (each
 * relay sums its host's inputs and sends the sum to the root, which sums
 * the hosts'). Two rounds, one across hosts; the root moves (H - 1) S over
 * the network and (m - 1) S over shared memory.
 */
static double hier_rooted_time(const zcc_select_ctx_t *c, double S) {
  double as, bs;
  host_scale(c, &as, &bs);
  double m = c->max_local > 1 ? c->max_local : 2, H = c->nnodes;
  double turn = c->oversub > 1 ? SHM_TURN_US * c->oversub : 0;
  return SHM_DIRECT_ALPHA + (H - 1) * TCP_DIRECT_ALPHA * as +
         S * ((m - 1) / (SHM_DIRECT_BW * 1e3) + (H - 1) / (TCP_DIRECT_BW * bs * 1e3)) + 2 * turn;
}

/*
 * Hierarchical allgather and reduce-scatter (exec/host_plan.c): a ring over
 * the rail, H - 1 network steps, the host's m rails together moving
 * (H - 1) / H S over its link, and one direct round inside the host ((m - 1)
 * H messages a rank, (m - 1) / m S over shared memory); the reduce-scatter
 * also sums m blocks of S / n per rail block (priced as shared memory's
 * bytes). S is nccl-tests' size: the whole output (allgather) or input.
 */
static double hier_gather_time(const zcc_select_ctx_t *c, zcc_coll_t coll, double S) {
  double as, bs;
  host_scale(c, &as, &bs);
  double m = c->max_local > 1 ? c->max_local : 2, H = c->nnodes;
  double turn = c->oversub > 1 ? SHM_TURN_US * c->oversub : 0;
  double sums = coll == ZCC_COLL_REDUCESCATTER ? S / m : 0;
  return (H - 1) * (TCP_RING_ALPHA * as + turn) + (H - 1) / H * S / (TCP_RING_BW * bs * 1e3) +
         (m - 1) * H * SHM_DIRECT_ALPHA + turn +
         ((m - 1) / m * S + sums) / (SHM_DIRECT_BW * 1e3);
}

/*
 * Across hosts whose ranks outnumber their CPUs, each round of an allreduce
 * also waits for a scheduling turn, as host_oversub charges on one host:
 * the direct path gathers at rank 0 there (two rounds), the ring has
 * 2 (n - 1) (the hierarchical plans: hier_time, hier_rooted_time). With 4
 * ranks in each of two namespaces on 2 CPUs (docs/perf/net.md, 2026-12-05)
 * the model picks hier at every size to 4 MiB (leaders to 2 KiB); measured,
 * hier was as fast as the direct path or faster except at 32 KiB (the
 * rails' eight rounds, 1.1-1.4x the direct path's time).
 */
static double host_predict(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                           size_t bytes) {
  if (algo == ZCC_ALGO_HIER && (coll == ZCC_COLL_ALLGATHER || coll == ZCC_COLL_REDUCESCATTER))
    return hier_gather_time(c, coll, (double)bytes);
  if (algo == ZCC_ALGO_HIER && coll != ZCC_COLL_ALLREDUCE)
    return hier_rooted_time(c, (double)bytes);
  if (algo == ZCC_ALGO_HIER) {
    double l = hier_time(c, (double)bytes, 1), r = hier_time(c, (double)bytes, 0);
    return l <= r ? l : r;
  }
  double t = host_predict_one(c, coll, algo, bytes);
  if (c->nnodes < 2 || c->oversub <= 1 || coll != ZCC_COLL_ALLREDUCE) return t;
  double n = c->nranks;
  return t + (algo == ZCC_ALGO_ONESHOT ? (n > 2 ? 2 : 1) : 2 * (n - 1)) * SHM_TURN_US * c->oversub;
}

static double host_predict_one(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                               size_t bytes) {
  int tcp = c->nnodes > 1;
  double n = c->nranks, S = (double)bytes, as, bs;
  if (!tcp && c->oversub > 1 && coll == ZCC_COLL_ALLREDUCE) return host_oversub(c, algo, S);
  host_scale(c, &as, &bs);
  if (algo == ZCC_ALGO_ONESHOT) {
    double a = (tcp ? TCP_DIRECT_ALPHA : SHM_DIRECT_ALPHA) * as;
    if (tcp && c->min_local > 0) {
      /* One round, but each rank's messages over the network are handled
         one after another on its thread (fitted with one peer): a rank of
         the host with the fewest ranks has n - min_local of them, and
         min_local - 1 over shared memory. */
      a = TCP_DIRECT_ALPHA * as * (n - c->min_local) + SHM_DIRECT_ALPHA * (c->min_local - 1);
    }
    double bw = (tcp ? TCP_DIRECT_BW : SHM_DIRECT_BW) * bs;
    double moved;
    switch (coll) {
    case ZCC_COLL_ALLREDUCE: moved = (n - 1) * S; break;
    case ZCC_COLL_ALLGATHER:
    case ZCC_COLL_REDUCESCATTER:
    case ZCC_COLL_ALLTOALL: moved = (n - 1) / n * S; break;
    case ZCC_COLL_SENDRECV: moved = S; break;
    default: moved = (n - 1) * S; break; /* broadcast, reduce: the root moves (n-1) copies */
    }
    return a + moved / (bw * 1e3);
  }
  if (algo == ZCC_ALGO_TWOSHOT) {
    /* per chunk two barriers (an all-pairs exchange each); every rank copies
       its input in, reduces its segment from n regions and copies the
       peers' segments out: about 3 S at the direct path's rate */
    double chunks = ceil(S / (double)zcc_twoshot_chunk_auto(c->oversub));
    return 2 * chunks * SHM_DIRECT_ALPHA * as + 3 * S / (SHM_DIRECT_BW * bs * 1e3);
  }
  /* ring */
  double a = (tcp ? TCP_RING_ALPHA : SHM_RING_ALPHA) * as;
  double bw = (tcp ? TCP_RING_BW : SHM_RING_BW) * bs;
  double moved, steps;
  switch (coll) {
  case ZCC_COLL_ALLREDUCE:
    moved = 2 * (n - 1) / n * S;
    steps = 2 * (n - 1);
    break;
  case ZCC_COLL_ALLGATHER:
  case ZCC_COLL_REDUCESCATTER:
    moved = (n - 1) / n * S;
    steps = n - 1;
    break;
  default: /* broadcast, reduce: scatter and a ring */
    moved = 2 * (n - 1) / n * S;
    steps = n;
    break;
  }
  return steps * a + moved / (bw * 1e3);
}

/*
 * Fitted to allreduce_perf -g 2 on 2x H200 (NV18), 2026-11-29, float32 sum,
 * unregistered buffers; docs/perf/h200x2.md has the runs and the
 * predicted-versus-measured table; tests/unit/test_gpu_model.c checks it.
 * Bandwidths in GB/s, times in us.
 *
 * LL and push: times per operation inside a CUDA graph (-G 10/20, -n 20
 * operations per graph, nccl-tests' method), runs of 22:00-22:25 UTC.
 * Push costs a launch, the NVLink stores of (k-1) S bytes, and the
 * pipeline's fill: one chunk (the message over 64 lanes, 8 KiB to 128 KiB
 * with the default 128 blocks and 64 MiB staging) pushed before the first
 * reduction starts, at one lane's rate.
 *
 * One-shot and two-shot (registered buffers, or forced): fitted earlier
 * (20:41-21:00 UTC) to one replay of a one-operation graph, graph launch
 * included, staged with ZCC_ALGO=oneshot|twoshot. Per byte, two-shot
 * staged costs one-shot staged plus one more local copy: that difference
 * gives GPU_COPY_BW, the rest the NVLink term.
 */
#define GPU_LL_ALPHA 2.31     /* us: one NVLink crossing and the flag checks */
#define GPU_LL_BW 78.0        /* payload per peer (half the lines are flags) */
#define GPU_LL_MAX (64 * 1024)
#define GPU_1S_ALPHA 12.2     /* us: graph launch, staging copy launch, two barriers */
#define GPU_1S_BW 353.0       /* SM loads from a peer, (k-1) S bytes */
#define GPU_2S_ALPHA 12.4
#define GPU_2S_BW 353.0       /* 2 (k-1)/k S bytes, loads and stores */
#define GPU_COPY_BW 1700.0    /* a local staging copy (read and write) */
/* The copy-engine pipeline: correct since kernels are preloaded, 230 GB/s
   at 1 GiB (22:00 UTC run); these constants are the copy engine's peer
   rate and a guess per piece, and the model never picks it. */
#define GPU_CE_ALPHA 12.0
#define GPU_CE_BW 394.5
#define GPU_CE_PIECE_US 4.0
#define GPU_PUSH_ALPHA 6.5
#define GPU_PUSH_BW 346.6     /* (k-1) S bytes stored into peers' staging */
#define GPU_PUSH_LANE_BW 17.7 /* one lane's first chunk, before reductions overlap */

/* Pieces of the copy-engine pipeline for `bytes` (exec/gpu.c cuts the same). */
static double gpu_ce_pieces(size_t bytes) {
  double piece = (double)bytes / 8;
  if (piece < (1 << 20)) piece = 1 << 20;
  if (piece > (16 << 20)) piece = 16 << 20;
  double n = (double)bytes / piece;
  return n < 1 ? 1 : n;
}

/*
 * Windows in pinned host memory (the shm transport: link class
 * ZCC_PATH_SYS): every byte a kernel stores into a window and loads from
 * one crosses the GPU's PCIe link (staging and connector FIFOs live in the
 * windows, the own one too), and ranks that share a GPU share its link.
 * One H200, gpu_membw -m host at 256 MiB (docs/perf/h200x1.md,
 * 2026-12-02): SM loads of mapped host memory 50.7 GB/s, SM stores 52.4,
 * both at once 40.8 each way. The pipelined kernels (push, ring, tree, LL,
 * the copy engines) run both directions at once; one-shot and two-shot copy
 * into staging first and load it after a barrier, so their phases add up.
 * Each flag a kernel waits for crosses the link once per peer it waits for
 * (a store into host memory, the peer's poll): about half the 4.3 us round
 * trip of gpu_membw -m flag. The connectors' ring and tree pay a slot
 * hand-over per step on top (both its flags), and reach 0.85 of the link;
 * the push kernel loses a little more of it with every rank (lanes of every
 * peer contend), and LL's 8-byte lines get 0.65 of it.
 * Fitted on 2026-12-02 (docs/perf/h200x1.md, "the cost model on host
 * windows"): 2 ranks (allreduce), 3 and 4 ranks (allreduce, each kernel
 * forced), 2 and 3 ranks (broadcast, reduce, all-gather, reduce-scatter
 * with oneshot and ring forced), in graphs; tests/unit/test_gpu_model.c
 * holds those measurements against these predictions.
 */
#define HOST_LD_BW 50.7
#define HOST_ST_BW 52.4
#define HOST_BOTH_BW 40.8
#define HOST_HOP_US 2.2
#define HOST_CONN_BASE_US 13.5 /* the ring and tree kernels' start over host windows */
#define HOST_CONN_STEP_US 4.7  /* a connector step: slot stored, flag seen, slot freed */
#define HOST_CONN_EFF 0.85
#define HOST_PUSH_LOSS 0.12    /* push: 1 / (1 + this per peer) of the link */
#define HOST_LL_EFF 0.65       /* LL's 8-byte lines (4 of data, 4 of flag) over PCIe */

/* Bytes stored into and loaded from host windows by all k ranks together. */
typedef struct {
  double st, ld;
  double hops;  /* flag crossings a rank waits for, per peer */
  int overlap;  /* 1: loads and stores at once (pipelined kernels) */
  double eff;
} host_traffic_t;

static host_traffic_t host_traffic(zcc_coll_t coll, zcc_algo_t algo, zcc_proto_t proto,
                                   double k, double S) {
  host_traffic_t t = {0, 0, 1, 1, 1.0};
  int conn = algo == ZCC_ALGO_RING || algo == ZCC_ALGO_TREE;
  if (conn) {
    /* each rank stores its sends into the next one's FIFO and loads what it
       receives from its own; ring and chain move the same bytes */
    double per = coll == ZCC_COLL_ALLREDUCE ? 2 * (k - 1) * S : (k - 1) * S;
    t = (host_traffic_t){per, per, 0, 1, HOST_CONN_EFF};
    return t;
  }
  if (coll == ZCC_COLL_ALLREDUCE) {
    switch (algo) {
    case ZCC_ALGO_ONESHOT:
      if (proto == ZCC_PROTO_LL) /* half of every line is its flag; 8-byte stores */
        return (host_traffic_t){2 * (k - 1) * S * k, 2 * (k - 1) * S * k, 1, 1, HOST_LL_EFF};
      /* into the own staging, then every rank's staging (the own too) */
      return (host_traffic_t){k * S, k * k * S, 3, 0, 1.0};
    case ZCC_ALGO_TWOSHOT:
      return (host_traffic_t){k * (S + (k - 1) / k * S), k * 2 * (k - 1) / k * S, 6, 0, 1.0};
    case ZCC_ALGO_PUSH:
      return (host_traffic_t){k * (k - 1) * S, k * (k - 1) * S, 2, 1,
                              1 / (1 + HOST_PUSH_LOSS * (k - 1))};
    case ZCC_ALGO_CE: return (host_traffic_t){k * S, k * S, 2, 1, 1.0};
    default: return (host_traffic_t){INFINITY, INFINITY, 0, 0, 1.0};
    }
  }
  if (algo != ZCC_ALGO_ONESHOT) return (host_traffic_t){INFINITY, INFINITY, 0, 0, 1.0};
  /* the staged all-pairs kernels: copy into the own staging, barrier, loads */
  switch (coll) {
  case ZCC_COLL_BROADCAST: return (host_traffic_t){S, (k - 1) * S, 2, 0, 1.0};
  case ZCC_COLL_REDUCE: return (host_traffic_t){k * S, k * S, 3.5, 0, 1.0};
  case ZCC_COLL_ALLGATHER: return (host_traffic_t){S, (k - 1) * S, 3.5, 0, 1.0};
  case ZCC_COLL_REDUCESCATTER: return (host_traffic_t){k * S, k * S, 3.5, 0, 1.0};
  case ZCC_COLL_ALLTOALL: return (host_traffic_t){k * S, (k - 1) * S, 3.5, 0, 1.0};
  default: return (host_traffic_t){INFINITY, INFINITY, 0, 0, 1.0};
  }
}

/* What host windows add to a GPU kernel's time: the PCIe traffic of the
   ranks on this GPU (`share` of the k) and the flags' crossings. */
static double host_link_us(zcc_coll_t coll, zcc_algo_t algo, zcc_proto_t proto, int nranks,
                           int share, size_t bytes) {
  double k = nranks, S = (double)bytes;
  host_traffic_t tr = host_traffic(coll, algo, proto, k, S);
  if (!isfinite(tr.st)) return INFINITY;
  double frac = (share > 1 ? share : 1) / k, t;
  double st = tr.st * frac, ld = tr.ld * frac;
  if (tr.overlap) {
    t = ld / HOST_LD_BW;
    if (st / HOST_ST_BW > t) t = st / HOST_ST_BW;
    if ((ld + st) / (2 * HOST_BOTH_BW) > t) t = (ld + st) / (2 * HOST_BOTH_BW);
  } else {
    t = ld / HOST_LD_BW + st / HOST_ST_BW;
  }
  double lat;
  if (algo == ZCC_ALGO_RING || algo == ZCC_ALGO_TREE) {
    double steps = coll == ZCC_COLL_ALLREDUCE ? 2 * (k - 1) : k - 1;
    /* the chain's steps wait for a whole slot's round trip each */
    lat = HOST_CONN_BASE_US + steps * HOST_CONN_STEP_US * (algo == ZCC_ALGO_TREE ? 2 : 1);
  } else {
    lat = tr.hops * (k - 1) * HOST_HOP_US;
  }
  return lat + t / tr.eff * 1e-3;
}

/* GPU allreduce over NVLink. */
static double gpu_allreduce(zcc_algo_t algo, zcc_proto_t proto, int nranks, size_t bytes,
                            int staged) {
  double k = nranks, S = (double)bytes, us_per_byte = 1e-3;
  double copy = staged ? S / GPU_COPY_BW * us_per_byte : 0;
  switch (algo) {
  case ZCC_ALGO_ONESHOT:
    if (proto == ZCC_PROTO_LL) return GPU_LL_ALPHA + (k - 1) * S / GPU_LL_BW * us_per_byte;
    return GPU_1S_ALPHA + copy + (k - 1) * S / GPU_1S_BW * us_per_byte;
  case ZCC_ALGO_TWOSHOT:
    return GPU_2S_ALPHA + 2 * copy + 2 * (k - 1) / k * S / GPU_2S_BW * us_per_byte;
  case ZCC_ALGO_CE:
    return GPU_CE_ALPHA + S / GPU_CE_BW * us_per_byte + gpu_ce_pieces(bytes) * GPU_CE_PIECE_US;
  case ZCC_ALGO_PUSH: {
    double chunk = S / 64;
    chunk = chunk < 8192 ? 8192 : chunk > 131072 ? 131072 : chunk;
    return GPU_PUSH_ALPHA + ((k - 1) * S / GPU_PUSH_BW + chunk / GPU_PUSH_LANE_BW) * us_per_byte;
  }
  /* Ring and tree over connectors: 2 (k - 1) steps of a one-way NVLink hop
     each (the LL latency) and the all-pairs stores' bandwidth, a guess until
     measured between GPUs; they run only when forced (zcc_select_auto). */
  case ZCC_ALGO_RING:
    return GPU_PUSH_ALPHA + 2 * (k - 1) * GPU_LL_ALPHA + 2 * (k - 1) / k * S / GPU_PUSH_BW * us_per_byte;
  case ZCC_ALGO_TREE:
    return GPU_PUSH_ALPHA + 2 * (k - 1) * GPU_LL_ALPHA + 2 * S / GPU_PUSH_BW * us_per_byte;
  default: return INFINITY;
  }
}

/*
 * The other GPU collectives between peers that load each other's memory,
 * from the same constants: the staged all-pairs kernels (a copy into the
 * own staging, a barrier, loads of the peers' parts) and the connectors'
 * ring (pipelined stores into the next rank's FIFO, k - 1 steps). S is
 * nccl-tests' size: the whole buffer of all-gather, reduce-scatter and
 * all-to-all, one rank's of broadcast and reduce.
 */
static double gpu_other(zcc_coll_t coll, zcc_algo_t algo, int nranks, size_t bytes) {
  double k = nranks, S = (double)bytes, us_per_byte = 1e-3, copy, load, sent;
  switch (coll) {
  case ZCC_COLL_BROADCAST: copy = S, load = S, sent = S; break;
  case ZCC_COLL_REDUCE: copy = S, load = (k - 1) * S, sent = S; break;
  case ZCC_COLL_ALLGATHER: copy = S / k, load = (k - 1) / k * S, sent = (k - 1) / k * S; break;
  case ZCC_COLL_REDUCESCATTER:
  case ZCC_COLL_ALLTOALL: copy = S, load = (k - 1) / k * S, sent = (k - 1) / k * S; break;
  default: return INFINITY;
  }
  if (algo == ZCC_ALGO_ONESHOT)
    return GPU_1S_ALPHA + (copy / GPU_COPY_BW + load / GPU_1S_BW) * us_per_byte;
  if (algo == ZCC_ALGO_RING && coll != ZCC_COLL_ALLTOALL)
    return GPU_PUSH_ALPHA + (k - 1) * GPU_LL_ALPHA + sent / GPU_PUSH_BW * us_per_byte;
  return INFINITY;
}

static double gpu_predict(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                          zcc_proto_t proto, size_t bytes, int staged);

double zcc_select_predict(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                          zcc_proto_t proto, size_t bytes, int staged) {
  if (c->nranks <= 1) return 0;
  if (!c->gpu) return host_predict(c, coll, algo, bytes);
  if (coll == ZCC_COLL_SENDRECV) return 0; /* one way to do it: no choice to cost */
  double t = gpu_predict(c, coll, algo, proto, bytes, staged);
  double as, bs;
  host_scale(c, &as, &bs);
  if (as != 1 || bs != 1) {
    /* ZCC_TOPO_MEASURE on a GPU: the latency part (the time at 0 bytes) and
       the byte part scale by the probe's ratios (core/measure.c) */
    double t0 = gpu_predict(c, coll, algo, proto, 0, staged);
    t = t0 * as + (t - t0) / bs;
  }
  return t;
}

/*
 * The hierarchical allreduce over connectors (exec/gpu.c: conn_hier), m
 * ranks on each of H hosts, in three launches (two more than the ring,
 * GPU_NET_PHASE_US each): the host's ring reduce-scatter and all-gather,
 * 2 (m - 1) hops inside the host and 2 (m - 1) / m S through its
 * connectors, charged as the GPU's; the rails' allreduce, 2 (H - 1) network
 * hops, the host's m rails sharing its link and together moving
 * 2 (H - 1) / H S over it (the flat ring's crossing moves 2 (k - 1) / k S,
 * each of its 2 (k - 1) steps a network hop's time: gpu_net).
 * GPU_NET_PHASE_US is fitted to the one measurement there is (2 + 2 ranks
 * in two namespaces on one H100, docs/perf/net.md, 2026-12-05): hier 1.1-
 * 1.25x the ring's time to 32 KiB, 1.25-1.6x faster from 128 KiB; 10 us
 * puts the crossover between them (64 KiB).
 */
#define GPU_NET_PHASE_US 10.0
/*
 * The hierarchical all-gather (conn_hier_allgather), two launches: each
 * rank's block over its rail, H - 1 network hops, the host's rails moving
 * (H - 1) / H S over its link together; then the host's ring, H blocks a
 * position, (m - 1) H steps inside the host and (m - 1) / m S. S: the whole
 * output, as nccl-tests count it. A step of the host's ring is an NVLink
 * crossing (GPU_LL_ALPHA), but GPU_NET_SHARED_STEP_US where the host's
 * ranks share GPUs: fitted to the one measurement there is (2 + 2 ranks in
 * two namespaces on one H100 under MPS, docs/perf/net.md, 2026-12-05
 * (evening): hier 1.05-1.3x the ring's time to 512 KiB, 1.4-1.5x faster
 * from 2 MiB); 17.5 us puts the crossover between them (about 700 KB).
 * Each step there waits on another process's kernel on the same GPU; not
 * broken down further.
 */
#define GPU_NET_SHARED_STEP_US 17.5
static double gpu_net_host_step(const zcc_select_ctx_t *c) {
  return c->gpu_share > 1 ? GPU_NET_SHARED_STEP_US : GPU_LL_ALPHA;
}

static double gpu_net_hier_allgather(const zcc_select_ctx_t *c, double S) {
  double m = c->max_local > 1 ? c->max_local : 2, H = c->nnodes, step = gpu_net_host_step(c);
  return GPU_NET_PHASE_US + (m - 1) * H * step +
         (m - 1) / m * S / (GPU_PUSH_BW * 1e3) +
         (H - 1) * TCP_RING_ALPHA + (H - 1) / H * S / (TCP_RING_BW * 1e3);
}

/*
 * The hierarchical broadcast and reduce (conn_hier_rooted): two pipelined
 * chains one after the other, the root's rail (H - 1 network hops, S over
 * the link) and the host's ring (m - 1 steps, S through the connectors, a
 * step as the all-gather's), and a launch more; the flat ring is one chain
 * of k - 1 network-priced hops.
 */
static double gpu_net_hier_rooted(const zcc_select_ctx_t *c, double S) {
  double m = c->max_local > 1 ? c->max_local : 2, H = c->nnodes, step = gpu_net_host_step(c);
  return GPU_NET_PHASE_US + (m - 1) * step + S / (GPU_PUSH_BW * 1e3) + (H - 1) * TCP_RING_ALPHA +
         S / (TCP_RING_BW * 1e3);
}

static double gpu_net_hier(const zcc_select_ctx_t *c, double S) {
  double m = c->max_local > 1 ? c->max_local : 2, H = c->nnodes;
  return 2 * GPU_NET_PHASE_US + 2 * (m - 1) * GPU_LL_ALPHA +
         2 * (m - 1) / m * S / (GPU_PUSH_BW * 1e3) + 2 * (H - 1) * TCP_RING_ALPHA +
         2 * (H - 1) / H * S / (TCP_RING_BW * 1e3);
}

/*
 * GPU ranks that reach each other through the net transport's proxy (the
 * connector kernels over pinned host FIFOs; conn_only): the network's hop
 * and bandwidth bound every step, TCP's constants of the host model (not
 * fitted on GPUs; no RDMA device was at hand). The ring moves 2 (k-1)/k S
 * per rank in 2 (k-1) hops. The tree (a chain along the ring) has not run
 * over a network yet: it is charged the ring's bytes and half a hop more
 * per step, so it runs only when ZCC_ALGO=tree asks.
 */
static double gpu_net(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                      size_t bytes) {
  double k = c->nranks, S = (double)bytes, a = TCP_RING_ALPHA, bw = TCP_RING_BW * 1e3;
  if (algo == ZCC_ALGO_HIER) /* the reduce-scatter is the all-gather's mirror */
    return coll == ZCC_COLL_ALLGATHER || coll == ZCC_COLL_REDUCESCATTER
               ? gpu_net_hier_allgather(c, S)
           : coll == ZCC_COLL_ALLREDUCE ? gpu_net_hier(c, S)
                                        : gpu_net_hier_rooted(c, S);
  switch (coll) {
  case ZCC_COLL_ALLREDUCE:
    return 2 * (k - 1) * (algo == ZCC_ALGO_TREE ? 1.5 : 1) * a + 2 * (k - 1) / k * S / bw;
  case ZCC_COLL_ALLGATHER:
  case ZCC_COLL_REDUCESCATTER:
  case ZCC_COLL_ALLTOALL: return (k - 1) * a + (k - 1) / k * S / bw;
  default: return (k - 1) * a + S / bw; /* broadcast, reduce: a pipelined chain */
  }
}

static double gpu_predict(const zcc_select_ctx_t *c, zcc_coll_t coll, zcc_algo_t algo,
                          zcc_proto_t proto, size_t bytes, int staged) {
  if (c->conn_only) return gpu_net(c, coll, algo, bytes);
  /* Windows in host memory: the kernel's own costs, with the PCIe link's
     traffic in place of the device's (it bounds every byte there). */
  int host = c->link_class == ZCC_PATH_SYS;
  size_t dev_bytes = host ? 0 : bytes;
  double t = coll == ZCC_COLL_ALLREDUCE ? gpu_allreduce(algo, proto, c->nranks, dev_bytes, staged)
                                        : gpu_other(coll, algo, c->nranks, dev_bytes);
  if (host) t += host_link_us(coll, algo, proto, c->nranks, c->gpu_share, bytes);
  return t;
}

void zcc_select_fit_gpu(zcc_select_ctx_t *c, double t_small, double t_big, size_t big,
                        zcc_gpu_fit_t *fit) {
  const zcc_algo_t sa = ZCC_ALGO_ONESHOT, ba = ZCC_ALGO_PUSH;
  const zcc_proto_t sp = ZCC_PROTO_LL, bp = ZCC_PROTO_SIMPLE;
  c->measured = 0; /* the table's predictions of the same two */
  double p_small = zcc_select_predict(c, ZCC_COLL_ALLREDUCE, sa, sp, 8, 1);
  double p_big = zcc_select_predict(c, ZCC_COLL_ALLREDUCE, ba, bp, big, 1);
  double p_big0 = zcc_select_predict(c, ZCC_COLL_ALLREDUCE, ba, bp, 0, 1);
  double as = p_small > 0 && t_small > 0 ? t_small / p_small : 1;
  double bytes_meas = t_big - p_big0 * as, bytes_pred = p_big - p_big0;
  double bs = bytes_meas > 0 && bytes_pred > 0 ? bytes_pred / bytes_meas : 1;
  /* (the split gave 15-1100x NVLink's bandwidth on one H200: 2.5-5.3 us at
     8 B, 13-16 us at 4 MiB against a table of 2.31 and 22.3) */
  fit->whole = t_big > 0 && p_big > 0 && bytes_meas < 0.25 * t_big;
  if (fit->whole) bs = p_big / t_big;
  fit->p_small = p_small;
  fit->p_big = p_big;
  zcc_select_link_table(c, &fit->table_alpha, &fit->table_bw);
  c->alpha_us = fit->table_alpha * as;
  c->bw_gbs = fit->table_bw * bs;
  c->measured = 1;
}

/* The table's link: a ring step's latency and a connection's bandwidth. */
void zcc_select_link_table(const zcc_select_ctx_t *c, double *alpha_us, double *bw_gbs) {
  if (c->gpu) {
    *alpha_us = GPU_LL_ALPHA;
    *bw_gbs = GPU_PUSH_BW;
  } else {
    *alpha_us = c->nnodes > 1 ? TCP_RING_ALPHA : SHM_RING_ALPHA;
    *bw_gbs = c->nnodes > 1 ? TCP_RING_BW : SHM_RING_BW;
  }
}
