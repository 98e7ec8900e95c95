/*
 * ZCC_TOPO_MEASURE=1: at creation, a communicator measures the link class
 * its choices are costed on instead of taking the table's constants, and
 * every rank takes rank 0's figures (so that all ranks choose alike).
 *   - Host communicators (shared memory on one host, TCP across hosts):
 *     rank 0 and one peer over that class run a ping-pong of 8 bytes and a
 *     bandwidth probe of 4 MiB through the communicator's own connections;
 *     cost.c charges the measured one-way latency and bandwidth for a ring
 *     step and scales the one-round (oneshot) constants by the same ratios.
 *   - GPU communicators (once their windows are mapped): every rank runs
 *     8-byte allreduces as oneshot/ll (a flag each way between every pair:
 *     the latency) and 4 MiB ones as push (the bandwidth) through its own
 *     kernels, timed with CUDA events; the model's predictions of the same
 *     two give the ratios by which cost.c scales every GPU candidate's
 *     latency and byte terms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "debug.h"
#include "devops.h"
#include "param.h"
#include "planner.h"

ZCC_PARAM_INT(topo_measure, "TOPO_MEASURE", 0,
              "1: communicators measure their link class at creation (host: 8 B ping-pong and "
              "4 MiB bandwidth probe between rank 0 and a peer; GPU: 8 B oneshot/ll and 4 MiB "
              "push allreduces on the device) and cost their choices with it instead of the "
              "table's constants; INFO TUNING shows both")

#define PINGS 40
#define PING_WARMUP 5
#define PROBES 6
#define PROBE_BYTES ((size_t)4 << 20)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* The initiator sends `bytes` and waits for an 8-byte answer; the responder
   receives them and answers. */
static zccResult_t xfer(struct zccComm *comm, int peer, int responder, void *buf, size_t bytes,
                        void *ack) {
  for (int k = 0; k < 2; k++) {
    int is_recv = responder ? k == 0 : k == 1;
    zcc_plan_t *plan;
    ZCC_CHECK(zcc_plan_new(comm, ZCC_COLL_SENDRECV, &plan));
    zccResult_t res = zcc_plan_p2p(plan, is_recv, peer, k == 0 ? buf : ack, k == 0 ? bytes : 8);
    if (res == zccSuccess) res = zcc_plan_p2p_finish(plan);
    if (res == zccSuccess) res = zcc_exec_chains(&plan, 1);
    zcc_plan_free(plan);
    ZCC_CHECK(res);
  }
  return zccSuccess;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double alpha_us, bw_gbs;
  int peer; /* -1: nothing measured */
  int pad;
} measured_t;

#define GPU_PINGS 50
#define GPU_PROBES 10

/* What rank 0 measured (its record's peer is >= 0): every rank's choices follow it. */
static zccResult_t take_rank0(struct zccComm *comm, measured_t *mine) {
  measured_t *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (!all) return zcc_error(zccSystemError, "init: out of memory");
  all[comm->rank] = *mine;
  zccResult_t res =
      zcc_bootstrap_allgather(comm->bootstrap, all, sizeof(*all), comm->timeout_ms);
  if (res == zccSuccess && all[0].peer < 0)
    res = zcc_error(zccInternalError, "init: the link probe's figures did not arrive");
  if (res == zccSuccess) *mine = all[0];
  free(all);
  return res;
}

/*
 * The GPU probe. The model's time of a candidate is a latency part (its
 * time at 0 bytes) and a byte part; the measured 8-byte and 4 MiB times fix
 * their ratios (zcc_select_fit_gpu), and the context keeps them as a
 * latency and a bandwidth in the table's units (zcc_select_link_table), so
 * that cost.c and the log read them alike.
 */
static zccResult_t gpu_measure(struct zccComm *comm) {
  zcc_select_ctx_t *c = &comm->select->ctx;
  const zcc_algo_t sa = ZCC_ALGO_ONESHOT, ba = ZCC_ALGO_PUSH;
  const zcc_proto_t sp = ZCC_PROTO_LL, bp = ZCC_PROTO_SIMPLE;
  double t_small = 0, t_big = 0;
  if (zcc_select_conn_kernels(c)) {
    /* its probe kernels (oneshot, push) do not run where the connector
       kernels run alone: the table stays */
    char who[64];
    if (c->conn_only) snprintf(who, sizeof(who), "peers reached over the network");
    else snprintf(who, sizeof(who), "more than %d ranks", ZCC_GPU_PAIRS_MAX);
    ZCC_INFO(TUNING, "comm %s rank %d: ZCC_TOPO_MEASURE: %s run the connector kernels alone, "
             "which the GPU probe does not time; the table's link class %s stays", comm->name,
             comm->rank, who, zcc_topo_class_name(c->link_class));
    return zccSuccess;
  }
  if (!comm->dev || !comm->dev->probe)
    return zcc_error(zccInternalError, "init: this build's GPU face has no link probe");
  ZCC_CHECK(comm->dev->probe(comm, sa, sp, 8, GPU_PINGS, &t_small));
  ZCC_CHECK(comm->dev->probe(comm, ba, bp, PROBE_BYTES, GPU_PROBES, &t_big));
  /* rank 0's two times travel in the record's figure fields */
  measured_t m = {t_small, t_big, comm->rank == 0 ? 0 : -1, 0};
  ZCC_CHECK(take_rank0(comm, &m));
  t_small = m.alpha_us;
  t_big = m.bw_gbs;
  zcc_gpu_fit_t fit;
  zcc_select_fit_gpu(c, t_small, t_big, PROBE_BYTES, &fit);
  ZCC_INFO(TUNING, "comm %s rank %d: link class %s measured on the GPU: 8 B oneshot/ll %.2f us "
           "(table %.2f), 4 MiB push %.1f us (table %.1f): latency %.2f us, bandwidth %.1f GB/s%s "
           "(table: %.2f us, %.1f GB/s)", comm->name, comm->rank,
           zcc_topo_class_name(c->link_class), t_small, fit.p_small, t_big, fit.p_big, c->alpha_us,
           c->bw_gbs, fit.whole ? " (from the 4 MiB time's whole ratio)" : "", fit.table_alpha,
           fit.table_bw);
  if (zcc_log_enabled(ZCC_LOG_INFO, ZCC_TUNING)) {
    char who[96];
    snprintf(who, sizeof(who), "comm %s rank %d (measured)", comm->name, comm->rank);
    ZCC_CHECK(zcc_planner_decisions(c, zcc_log_tuning_line, who));
  }
  return zccSuccess;
}

zccResult_t zcc_comm_measure(struct zccComm *comm) {
  if (!zcc_param_topo_measure() || comm->nranks < 2) return zccSuccess;
  zcc_select_ctx_t *c = &comm->select->ctx;
  if (c->gpu) return gpu_measure(comm);
  /* the peer of rank 0 over the class the model charges */
  int peer = 1;
  if (comm->nnodes > 1)
    for (int r = 1; r < comm->nranks; r++)
      if (comm->peers[r].host_hash != comm->peers[0].host_hash) {
        peer = r;
        break;
      }
  char *big = NULL;
  zccResult_t res = zccSuccess;
  measured_t mine = {0, 0, -1, 0};
  if (comm->rank == 0 || comm->rank == peer) {
    big = malloc(PROBE_BYTES);
    if (!big) {
      res = zcc_error(zccSystemError, "init: out of memory for the link probe");
      goto done;
    }
    memset(big, 0x5a, PROBE_BYTES);
    uint64_t small = 0, ack = 0;
    double t[PINGS];
    int me0 = comm->rank == 0, other = me0 ? peer : 0;
    for (int i = 0; i < PING_WARMUP + PINGS; i++) {
      double t0 = now_us();
      ZCC_CHECK_GOTO(xfer(comm, other, !me0, &small, 8, &ack), res, done);
      if (i >= PING_WARMUP) t[i - PING_WARMUP] = now_us() - t0;
    }
    qsort(t, PINGS, sizeof(double), cmp_double);
    double alpha = t[PINGS / 2] / 2;
    double p[PROBES];
    for (int i = 0; i < PROBES; i++) {
      double t0 = now_us();
      ZCC_CHECK_GOTO(xfer(comm, other, !me0, big, PROBE_BYTES, &ack), res, done);
      p[i] = now_us() - t0;
    }
    qsort(p, PROBES, sizeof(double), cmp_double);
    double one_way = p[PROBES / 2] - 2 * alpha; /* less the latency of both messages */
    if (one_way < 1) one_way = 1;
    mine = (measured_t){alpha, (double)PROBE_BYTES / one_way / 1e3, peer, 0};
  }
  ZCC_CHECK_GOTO(take_rank0(comm, &mine), res, done);
  c->measured = 1;
  c->alpha_us = mine.alpha_us;
  c->bw_gbs = mine.bw_gbs;
  double ta, tb;
  zcc_select_link_table(c, &ta, &tb);
  ZCC_INFO(TUNING, "comm %s rank %d: link class %s measured between ranks 0 and %d: %.2f us "
           "one way, %.2f GB/s (table: %.2f us, %.2f GB/s)", comm->name, comm->rank,
           zcc_topo_class_name(c->link_class), peer, c->alpha_us, c->bw_gbs, ta, tb);
done:
  free(big);
  return res;
}
