/*
 * Repeated calls on host communicators, over shared memory and over
 * sockets (ZCC_SHM_DISABLE=1), 2 and 3 ranks, each set in its own runner.
 *
 * A collective called again with the same arguments runs the plan kept
 * from the call before (zcc_plan_coll); two ranks' direct reductions
 * reduce the peer's bytes as they arrive, in rank order. So, for
 * allreduce, reduce, reduce-scatter, broadcast and all-gather, out of place
 * and in place, at 8 B, 4 KiB + 4 and 1 MiB + 12 (several shm slots):
 *   - the same call three times, with fresh inputs each time: each exact;
 *   - then one argument changed (the receive buffer, the count, the op,
 *     the root): exact, so the kept plan was not taken for another call;
 *   - max over +0 on one rank and -0 on the other, and NaNs with different
 *     payloads: every rank's result has the same bits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "zcc.h"

#define MAXN 3
#define MAXC ((1u << 18) + 3) /* floats: 1 MiB + 12 B */

typedef struct {
  uint32_t bits[MAXN][64]; /* each rank's first results, for the same-bits check */
  zt_barrier_t bar;
} shared_t;

static shared_t *sh;

enum { K_ALLREDUCE, K_REDUCE, K_REDUCESCATTER, K_BROADCAST, K_ALLGATHER, K_NUM };
static const char *knames[K_NUM] = {"allreduce", "reduce", "reducescatter", "broadcast",
                                    "allgather"};

/* Rank r's input element i for round `round`: small integers, sums exact. */
static float in_val(int r, size_t i, int round) {
  return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)round * 5) % 61) - 30);
}

typedef struct {
  int kind, inplace, root;
  zccRedOp_t op;
  size_t count; /* per-rank unit as the call takes it */
} call_t;

static size_t send_n(const call_t *c, int n) {
  return c->kind == K_REDUCESCATTER ? c->count * (size_t)n : c->count;
}
static size_t recv_n(const call_t *c, int n) {
  return c->kind == K_ALLGATHER ? c->count * (size_t)n : c->count;
}

static float combine(zccRedOp_t op, float a, float b) {
  return op == zccSum ? a + b : op == zccMax ? (a > b ? a : b) : (a < b ? a : b);
}

/* Fill, call, check one call; returns the number of wrong elements. */
static long one_call(zccComm_t comm, int r, int n, const call_t *c, float *sbuf, float *rbuf,
                     int round, const char *what) {
  size_t ns = send_n(c, n), nr = recv_n(c, n);
  float *sp = sbuf, *rp = rbuf;
  if (c->inplace) {
    sp = c->kind == K_ALLGATHER ? rbuf + (size_t)r * c->count : rbuf;
    rp = c->kind == K_REDUCESCATTER ? rbuf + (size_t)r * c->count : rbuf;
  }
  for (size_t i = 0; i < (ns > nr ? ns : nr); i++) rbuf[i] = -999.0f; /* poison */
  for (size_t i = 0; i < ns; i++) sp[i] = in_val(r, i, round);
  zccResult_t rc = zccSuccess;
  switch (c->kind) {
  case K_ALLREDUCE: rc = zccAllReduce(sp, rp, c->count, zccFloat32, c->op, comm, NULL); break;
  case K_REDUCE: rc = zccReduce(sp, rp, c->count, zccFloat32, c->op, c->root, comm, NULL); break;
  case K_REDUCESCATTER:
    rc = zccReduceScatter(sp, rp, c->count, zccFloat32, c->op, comm, NULL);
    break;
  case K_BROADCAST: rc = zccBroadcast(sp, rp, c->count, zccFloat32, c->root, comm, NULL); break;
  case K_ALLGATHER: rc = zccAllGather(sp, rp, c->count, zccFloat32, comm, NULL); break;
  }
  if (rc != zccSuccess) {
    zt_fail("%s: %s returned %s: %s", what, knames[c->kind], zt_rc_name(rc),
            zccGetLastError(comm));
    return 1;
  }
  if (c->kind == K_REDUCE && r != c->root) return 0;
  long wrong = 0;
  for (size_t i = 0; i < nr && wrong < 1; i++) {
    float want;
    if (c->kind == K_BROADCAST) {
      want = in_val(c->root, i, round);
    } else if (c->kind == K_ALLGATHER) {
      want = in_val((int)(i / c->count), i % c->count, round);
    } else {
      size_t j = c->kind == K_REDUCESCATTER ? (size_t)r * c->count + i : i;
      want = in_val(0, j, round);
      for (int q = 1; q < n; q++) want = combine(c->op, want, in_val(q, j, round));
    }
    if (rp[i] != want) {
      zt_fail("%s: rank %d: %s %s count %zu root %d round %d: element %zu is %g, expected %g",
              what, r, knames[c->kind], c->inplace ? "in place" : "out of place", c->count,
              c->root, round, i, (double)rp[i], (double)want);
      wrong++;
    }
  }
  return wrong;
}

static int rank_main(int rank, int nranks, const zccUniqueId *id, void *arg) {
  (void)arg;
  zccComm_t comm;
  zccResult_t rc = zt_comm_init_host(&comm, nranks, id, rank);
  if (rc != zccSuccess) {
    zt_fail("rank %d: init: %s", rank, zt_rc_name(rc));
    return 1;
  }
  size_t cap = (size_t)MAXN * MAXC;
  float *sbuf = malloc(cap * sizeof(float)), *rbuf = malloc(cap * sizeof(float));
  float *rbuf2 = malloc(cap * sizeof(float));
  if (!sbuf || !rbuf || !rbuf2) {
    zt_fail("rank %d: out of memory", rank);
    return 1;
  }
  static const size_t counts[] = {2, 1025, MAXC};
  for (int kind = 0; kind < K_NUM; kind++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        call_t c = {.kind = kind, .inplace = inplace, .root = nranks - 1, .op = zccSum,
                    .count = counts[ci]};
        long wrong = 0;
        for (int round = 0; round < 3; round++)
          wrong += one_call(comm, rank, nranks, &c, sbuf, rbuf, round, "same call");
        /* one argument changed at a time, then the first call again */
        wrong += one_call(comm, rank, nranks, &c, sbuf, rbuf2, 3, "another recvbuff");
        call_t d = c;
        d.count = c.count - 1;
        wrong += one_call(comm, rank, nranks, &d, sbuf, rbuf, 4, "another count");
        if (kind <= K_REDUCESCATTER) {
          d = c;
          d.op = zccMax;
          wrong += one_call(comm, rank, nranks, &d, sbuf, rbuf, 5, "another op");
        }
        if (kind == K_REDUCE || kind == K_BROADCAST) {
          d = c;
          d.root = 0;
          wrong += one_call(comm, rank, nranks, &d, sbuf, rbuf, 6, "another root");
        }
        wrong += one_call(comm, rank, nranks, &c, sbuf, rbuf, 7, "the first call again");
        if (!wrong) zt_pass();
      }

  /* Same bits everywhere: max of +0/-0 and of NaNs with different payloads,
     twice (the second call runs the kept plan), out of place and in place. */
  for (int inplace = 0; inplace < 2; inplace++)
    for (int round = 0; round < 2; round++) {
      float *sp = inplace ? rbuf : sbuf;
      for (int i = 0; i < 64; i++) {
        uint32_t u = i % 3 == 0   ? (rank ? 0x80000000u : 0u)             /* -0 / +0 */
                     : i % 3 == 1 ? 0x7fc00000u | (uint32_t)(rank + 1 + i) /* NaNs */
                                  : (rank ? 0u : 0x80000000u);
        memcpy(&sp[i], &u, 4);
      }
      rc = zccAllReduce(sp, rbuf, 64, zccFloat32, zccMax, comm, NULL);
      if (rc != zccSuccess) {
        zt_fail("rank %d: max of signed zeros: %s", rank, zt_rc_name(rc));
        break;
      }
      memcpy(sh->bits[rank], rbuf, sizeof(sh->bits[rank]));
      if (zt_barrier_wait(&sh->bar, nranks, 30) != 0) {
        zt_fail("rank %d: barrier timed out", rank);
        break;
      }
      if (rank == 0) {
        int same = 1;
        for (int q = 1; q < nranks; q++)
          same &= memcmp(sh->bits[0], sh->bits[q], sizeof(sh->bits[0])) == 0;
        if (same) zt_pass();
        else zt_fail("max over +0/-0 and NaNs (%s, call %d): ranks' results differ in bits",
                     inplace ? "in place" : "out of place", round + 1);
      }
      if (zt_barrier_wait(&sh->bar, nranks, 30) != 0) {
        zt_fail("rank %d: barrier timed out", rank);
        break;
      }
    }
  free(sbuf);
  free(rbuf);
  free(rbuf2);
  zccCommDestroy(comm);
  return 0;
}

int main(void) {
  static const char *transports[] = {"shm", "socket"};
  zt_setup("test_repeat");
  sh = zt_shared_alloc(sizeof(*sh));
  for (int k = 0; k < 2; k++)
    for (int n = 2; n <= MAXN; n++) {
      memset(sh, 0, sizeof(*sh));
      printf("test_repeat: --- %d ranks over %s\n", n, transports[k]);
      fflush(NULL);
      /* A runner per set: zcc reads ZCC_SHM_DISABLE once per process. */
      pid_t pid = fork();
      if (pid == 0) {
        setenv("ZCC_SHM_DISABLE", k ? "1" : "0", 1);
        zt_group_t g;
        zccUniqueId id;
        if (zt_spawn(&g, n, rank_main, NULL) == 0) {
          if (zt_expect_rc(zccSuccess, zccGetUniqueId(&id), "zccGetUniqueId", __FILE__,
                           __LINE__))
            zt_release(&g, &id);
          zt_wait_all(&g, 240, transports[k]);
        }
        fflush(NULL);
        _exit(0); /* the counts are shared: main's zt_finish reports them */
      }
      int st = 0;
      if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        zt_fail("%d ranks over %s: runner ended with status 0x%x", n, transports[k], st);
    }
  return zt_finish();
}
