/*
 * ZCC_TOPO_MEASURE=1: at creation, a host communicator measures the link
 * class its choices are costed on (shared memory on one host, TCP across
 * hosts), instead of taking the table's constants: rank 0 and one peer over
 * that class run a ping-pong of 8 bytes and a bandwidth probe of 4 MiB
 * through the communicator's own connections, and every rank takes rank
 * 0's figures (so that all ranks choose alike). cost.c then charges the
 * measured one-way latency and bandwidth for a ring step, and scales the
 * one-round (oneshot) constants by the same ratios.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "debug.h"
#include "param.h"
#include "planner.h"

ZCC_PARAM_INT(topo_measure, "TOPO_MEASURE", 0,
              "1: host communicators measure their link class at creation (8 B ping-pong, "
              "4 MiB bandwidth probe between rank 0 and a peer) and cost their choices with it "
              "instead of the table's constants; INFO TUNING shows both")

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

zccResult_t zcc_comm_measure(struct zccComm *comm) {
  if (!zcc_param_topo_measure() || comm->nranks < 2) return zccSuccess;
  zcc_select_ctx_t *c = &comm->select->ctx;
  if (c->gpu) {
    ZCC_INFO(TUNING, "comm %s rank %d: ZCC_TOPO_MEASURE: GPU communicators keep the NVLink "
             "table (no probe on GPUs yet)", comm->name, comm->rank);
    return zccSuccess;
  }
  /* the peer of rank 0 over the class the model charges */
  int peer = 1;
  if (comm->nnodes > 1)
    for (int r = 1; r < comm->nranks; r++)
      if (comm->peers[r].host_hash != comm->peers[0].host_hash) {
        peer = r;
        break;
      }
  measured_t *all = calloc((size_t)comm->nranks, sizeof(*all));
  char *big = NULL;
  zccResult_t res = zccSuccess;
  if (!all) return zcc_error(zccSystemError, "init: out of memory");
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
  all[comm->rank] = mine;
  ZCC_CHECK_GOTO(zcc_bootstrap_allgather(comm->bootstrap, all, sizeof(*all), comm->timeout_ms),
                 res, done);
  if (all[0].peer != peer) {
    res = zcc_error(zccInternalError, "init: the link probe's figures did not arrive");
    goto done;
  }
  c->measured = 1;
  c->alpha_us = all[0].alpha_us;
  c->bw_gbs = all[0].bw_gbs;
  double ta, tb;
  zcc_select_link_table(c, &ta, &tb);
  ZCC_INFO(TUNING, "comm %s rank %d: link class %s measured between ranks 0 and %d: %.2f us "
           "one way, %.2f GB/s (table: %.2f us, %.2f GB/s)", comm->name, comm->rank,
           zcc_topo_class_name(c->link_class), peer, c->alpha_us, c->bw_gbs, ta, tb);
done:
  free(big);
  free(all);
  return res;
}
