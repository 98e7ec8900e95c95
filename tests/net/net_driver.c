/*
 * One rank of the multi-host test (two_host.sh). Every rank computes every
 * rank's inputs itself (same seed), so that results are checked exactly
 * without any channel besides zcc.
 *
 *   net_driver --now
 *       print CLOCK_MONOTONIC in seconds (the script's clock for faults)
 *   net_driver --rank R --nranks N --id-file F [--seed S] [--mode M]
 *              [--dir D] [--sizes small]
 *       rank 0 creates the unique id and writes it to F; the others wait
 *       for F. Modes:
 *         check  allreduce, broadcast (every root), reduce, allgather,
 *                reducescatter, alltoall, grouped send/recv, exact checks
 *         fault  loop on 16 MiB allreduces (D/ready.R appears after two);
 *                once a call fails, the fault time is read from D/fault_time
 *                and the failure must come within ZCC_TIMEOUT + 2 s of it
 *         env    as check, but initialised by zccCommInitFromEnv (RANK,
 *                WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ZCC_COMM_SECRET from
 *                the environment); --rank, --nranks and --id-file unused
 *         init   every rank creates D/waiting.R and waits for D/start (a
 *                CLOCK_MONOTONIC time the script writes once all wait),
 *                then calls zccCommInitRank at that time; prints "init
 *                SECONDS" (from the start time to init's return), then runs
 *                the check mode's cases
 * Prints "net_driver rank R: N passed, N failed, N skipped" last.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ztest.h"
#include "ztest_types.h"
#include "zcc.h"

#define SLACK_S 2.0

typedef struct {
  int rank, nranks;
  uint64_t seed;
  zccComm_t comm;
  long case_index;
  int small;
} drv_t;

static int write_id(const char *path, const zccUniqueId *id) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f)
    return -1;
  size_t w = fwrite(id, 1, sizeof(*id), f);
  if (fclose(f) != 0 || w != sizeof(*id))
    return -1;
  return rename(tmp, path);
}

static int read_id(const char *path, zccUniqueId *id, double timeout_s) {
  double t0 = zt_now();
  while (zt_now() - t0 < timeout_s) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t r = fread(id, 1, sizeof(*id), f);
      fclose(f);
      if (r == sizeof(*id))
        return 0;
    }
    zt_sleep(0.02);
  }
  return -1;
}

/* All ranks' inputs for one case, generated locally. */
static void **gen_all(drv_t *d, zccDataType_t t, zccRedOp_t op, size_t elems) {
  void **in = calloc((size_t)d->nranks, sizeof(void *));
  for (int r = 0; r < d->nranks; r++) {
    in[r] = malloc(elems * zt_type_size(t) + 1);
    zt_gen(t, op, d->nranks, r, zt_mix(d->seed, (uint64_t)d->case_index, (uint64_t)r),
           in[r], elems);
  }
  return in;
}

static void free_all(drv_t *d, void **in) {
  for (int r = 0; r < d->nranks; r++)
    free(in[r]);
  free(in);
}

static void report(drv_t *d, const char *coll, zccDataType_t t, zccRedOp_t op,
                   size_t count, int root, const char *what, const void *got,
                   const void *exp, size_t n) {
  size_t first = 0, bad = zt_compare(t, got, exp, n, &first);
  if (bad == 0) {
    zt_pass();
    return;
  }
  char e[96], g[96];
  zt_fail("%s nranks=%d rank=%d type=%s op=%s count=%zu root=%d %s: %zu of %zu differ; "
          "first at %zu: expected %s, got %s",
          coll, d->nranks, d->rank, zt_type_name(t), zt_op_name(op), count, root, what,
          bad, n, first, zt_elem_str(t, exp, first, e, sizeof(e)),
          zt_elem_str(t, got, first, g, sizeof(g)));
}

static int call_ok(drv_t *d, zccResult_t rc, const char *coll, zccDataType_t t,
                   size_t count) {
  if (rc == zccSuccess)
    return 1;
  zt_fail("%s nranks=%d rank=%d type=%s count=%zu: expected zccSuccess, got %s: \"%s\"",
          coll, d->nranks, d->rank, zt_type_name(t), count, zt_rc_name(rc),
          zccGetLastError(d->comm));
  return 0;
}

static void run_checks(drv_t *d) {
  static const struct {
    zccDataType_t t;
    zccRedOp_t op;
  } red[] = {{zccFloat32, zccSum},  {zccInt32, zccSum},   {zccBfloat16, zccMax},
             {zccInt64, zccMin},    {zccFloat16, zccAvg}, {zccUint8, zccProd},
             {zccFloat64, zccSum},  {zccFloat8e4m3, zccSum}};
  const size_t sizes_full[] = {1, 4097, (1u << 20) + 3};
  const size_t sizes_small[] = {1, 4097};
  const size_t *sizes = d->small ? sizes_small : sizes_full;
  int nsizes = d->small ? 2 : 3;
  int n = d->nranks, me = d->rank;

  for (int s = 0; s < nsizes; s++) {
    size_t c = sizes[s];
    for (size_t k = 0; k < sizeof(red) / sizeof(red[0]); k++) {
      zccDataType_t t = red[k].t;
      zccRedOp_t op = red[k].op;
      size_t esz = zt_type_size(t);
      char *out = malloc((size_t)n * c * esz + 1);
      char *exp = malloc((size_t)n * c * esz + 1);
      const void **ptrs = calloc((size_t)n, sizeof(void *));

      /* allreduce, out of place then in place */
      for (int inplace = 0; inplace < 2; inplace++) {
        d->case_index++;
        void **in = gen_all(d, t, op, c);
        zt_ref_reduce(t, op, n, (const void *const *)in, exp, 0, c);
        if (inplace)
          memcpy(out, in[me], c * esz);
        else
          memset(out, 0xa5, c * esz);
        if (call_ok(d, zccAllReduce(inplace ? out : in[me], out, c, t, op, d->comm, NULL),
                    "allreduce", t, c))
          report(d, inplace ? "allreduce in-place" : "allreduce", t, op, c, -1,
                 "result", out, exp, c);
        free_all(d, in);
      }
      /* reduce to the last rank */
      d->case_index++;
      {
        void **in = gen_all(d, t, op, c);
        zt_ref_reduce(t, op, n, (const void *const *)in, exp, 0, c);
        memset(out, 0xa5, c * esz);
        if (call_ok(d, zccReduce(in[me], out, c, t, op, n - 1, d->comm, NULL), "reduce",
                    t, c) &&
            me == n - 1)
          report(d, "reduce", t, op, c, n - 1, "result", out, exp, c);
        free_all(d, in);
      }
      /* reducescatter */
      d->case_index++;
      {
        void **in = gen_all(d, t, op, (size_t)n * c);
        for (int r = 0; r < n; r++)
          ptrs[r] = (char *)in[r] + (size_t)me * c * esz;
        zt_ref_reduce(t, op, n, ptrs, exp, 0, c);
        memset(out, 0xa5, c * esz);
        if (call_ok(d, zccReduceScatter(in[me], out, c, t, op, d->comm, NULL),
                    "reducescatter", t, c))
          report(d, "reducescatter", t, op, c, -1, "own block", out, exp, c);
        /* in place: the own block of the input is the output */
        char *own = (char *)in[me] + (size_t)me * c * esz;
        if (call_ok(d, zccReduceScatter(in[me], own, c, t, op, d->comm, NULL),
                    "reducescatter", t, c))
          report(d, "reducescatter", t, op, c, -1, "own block in place", own, exp, c);
        free_all(d, in);
      }
      free(out);
      free(exp);
      free(ptrs);
    }

    /* data movement, on two types */
    for (int v = 0; v < 2; v++) {
      zccDataType_t t = v ? zccUint8 : zccFloat32;
      size_t esz = zt_type_size(t);
      char *out = malloc((size_t)n * c * esz + 1);
      for (int root = 0; root < n; root++) {
        d->case_index++;
        void **in = gen_all(d, t, ZT_OP_NONE, c);
        memset(out, 0xa5, c * esz);
        if (call_ok(d, zccBroadcast(in[me], out, c, t, root, d->comm, NULL), "broadcast",
                    t, c))
          report(d, "broadcast", t, ZT_OP_NONE, c, root, "result", out, in[root], c);
        free_all(d, in);
      }
      d->case_index++;
      {
        void **in = gen_all(d, t, ZT_OP_NONE, c);
        memset(out, 0xa5, (size_t)n * c * esz);
        if (call_ok(d, zccAllGather(in[me], out, c, t, d->comm, NULL), "allgather", t, c))
          for (int r = 0; r < n; r++)
            report(d, "allgather", t, ZT_OP_NONE, c, -1, "block", out + (size_t)r * c * esz,
                   in[r], c);
        /* in place: the input is the own block of the output */
        memset(out, 0xa5, (size_t)n * c * esz);
        memcpy(out + (size_t)me * c * esz, in[me], c * esz);
        if (call_ok(d, zccAllGather(out + (size_t)me * c * esz, out, c, t, d->comm, NULL),
                    "allgather", t, c))
          for (int r = 0; r < n; r++)
            report(d, "allgather", t, ZT_OP_NONE, c, -1, "block in place",
                   out + (size_t)r * c * esz, in[r], c);
        free_all(d, in);
      }
      d->case_index++;
      {
        void **in = gen_all(d, t, ZT_OP_NONE, (size_t)n * c);
        memset(out, 0xa5, (size_t)n * c * esz);
        if (call_ok(d, zccAlltoAll(in[me], out, c, t, d->comm, NULL), "alltoall", t, c))
          for (int r = 0; r < n; r++)
            report(d, "alltoall", t, ZT_OP_NONE, c, -1, "block",
                   out + (size_t)r * c * esz, (char *)in[r] + (size_t)me * c * esz, c);
        free_all(d, in);
      }
      d->case_index++;
      {
        /* every rank sends to every other rank first, then receives: grouped */
        void **in = gen_all(d, t, ZT_OP_NONE, (size_t)n * c);
        memset(out, 0xa5, (size_t)n * c * esz);
        zccResult_t rc = zccGroupStart();
        for (int r = 0; r < n && rc == zccSuccess; r++)
          if (r != me)
            rc = zccSend((char *)in[me] + (size_t)r * c * esz, c, t, r, d->comm, NULL);
        for (int r = 0; r < n && rc == zccSuccess; r++)
          if (r != me)
            rc = zccRecv(out + (size_t)r * c * esz, c, t, r, d->comm, NULL);
        zccResult_t rc2 = zccGroupEnd();
        if (call_ok(d, rc != zccSuccess ? rc : rc2, "grouped send/recv", t, c))
          for (int r = 0; r < n; r++)
            if (r != me)
              report(d, "grouped send/recv", t, ZT_OP_NONE, c, -1, "block",
                     out + (size_t)r * c * esz, (char *)in[r] + (size_t)me * c * esz, c);
        free_all(d, in);
      }
      free(out);
    }
  }
}

static double read_time(const char *path) {
  FILE *f = fopen(path, "r");
  double v = -1;
  if (f) {
    if (fscanf(f, "%lf", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  if (f)
    fclose(f);
}

/* init mode: wait for the common start time the script writes into D/start. */
static int wait_start(const drv_t *d, const char *dir, double *start) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/waiting.%d", dir, d->rank);
  touch(path);
  snprintf(path, sizeof(path), "%s/start", dir);
  double t0 = zt_now();
  while (zt_now() - t0 < 120) {
    FILE *f = fopen(path, "r");
    if (f) {
      int ok = fscanf(f, "%lf", start) == 1;
      fclose(f);
      if (ok) {
        while (zt_now() < *start) usleep(200);
        return 0;
      }
    }
    usleep(2000);
  }
  return -1;
}

static void run_fault(drv_t *d, const char *dir) {
  size_t count = 4u << 20;
  float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
  char path[4096];
  const char *tmo = getenv("ZCC_TIMEOUT"), *lim = getenv("ZCC_TEST_FAULT_LIMIT_S");
  double limit = (tmo ? strtod(tmo, NULL) : 300000) / 1000.0 + SLACK_S;
  if (lim && *lim)
    limit = strtod(lim, NULL); /* the heartbeat phase: well under ZCC_TIMEOUT */
  for (size_t i = 0; i < count; i++)
    in[i] = 1.0f;
  double t0 = zt_now();
  zccResult_t rc = zccSuccess;
  int iters = 0;
  while (zt_now() - t0 < 180) {
    rc = zccAllReduce(in, out, count, zccFloat, zccSum, d->comm, NULL);
    if (rc != zccSuccess)
      break;
    if (out[0] != (float)d->nranks || out[count - 1] != (float)d->nranks) {
      zt_fail("fault loop: allreduce float32 sum of 1.0: expected %d, got %g / %g",
              d->nranks, out[0], out[count - 1]);
      break;
    }
    if (++iters == 2) {
      snprintf(path, sizeof(path), "%s/ready.%d", dir, d->rank);
      touch(path);
    }
  }
  double t_err = zt_now();
  snprintf(path, sizeof(path), "%s/fault_time", dir);
  double t_fault = read_time(path);
  if (rc == zccSuccess) {
    zt_fail("no error within 180 s of looping (fault at %.2f)", t_fault);
    return;
  }
  zt_log("allreduce returned %s after %d iterations, %.2f s after the fault: \"%s\"",
         zt_rc_name(rc), iters, t_fault > 0 ? t_err - t_fault : -1.0,
         zccGetLastError(d->comm));
  ZT_CHECK(t_fault > 0, "allreduce failed with %s before any fault was made",
           zt_rc_name(rc));
  ZT_CHECK(rc == zccRemoteError || rc == zccTimeout,
           "allreduce across a fault: expected zccRemoteError or zccTimeout, got %s",
           zt_rc_name(rc));
  if (t_fault > 0)
    ZT_CHECK(t_err - t_fault <= limit,
             "allreduce returned %.2f s after the fault; expected <= %.1f s (%s)",
             t_err - t_fault, limit,
             lim && *lim ? "ZCC_TEST_FAULT_LIMIT_S" : "ZCC_TIMEOUT + 2 s");
  zccResult_t async = zccSuccess;
  rc = zccCommGetAsyncError(d->comm, &async);
  ZT_CHECK(rc == zccSuccess && (async == zccRemoteError || async == zccTimeout),
           "zccCommGetAsyncError after the fault: expected zccRemoteError or zccTimeout, "
           "got rc %s, async %s", zt_rc_name(rc), zt_rc_name(async));
  double ta = zt_now();
  rc = zccCommAbort(d->comm);
  d->comm = NULL;
  ZT_CHECK(rc == zccSuccess && zt_now() - ta < SLACK_S,
           "zccCommAbort after the fault: expected zccSuccess within %.0f s, got %s after %.2f s",
           SLACK_S, zt_rc_name(rc), zt_now() - ta);
  free(in);
  free(out);
}

int main(int argc, char **argv) {
  drv_t d;
  const char *id_file = NULL, *mode = "check", *dir = ".";
  static const struct option opts[] = {
      {"now", no_argument, 0, 'N'},        {"rank", required_argument, 0, 'r'},
      {"nranks", required_argument, 0, 'n'}, {"id-file", required_argument, 0, 'i'},
      {"seed", required_argument, 0, 's'}, {"mode", required_argument, 0, 'm'},
      {"dir", required_argument, 0, 'd'},  {"sizes", required_argument, 0, 'z'},
      {0, 0, 0, 0}};
  memset(&d, 0, sizeof(d));
  d.rank = -1;
  d.seed = 1;
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'N':
      printf("%.6f\n", zt_now());
      return 0;
    case 'r':
      d.rank = atoi(optarg);
      break;
    case 'n':
      d.nranks = atoi(optarg);
      break;
    case 'i':
      id_file = optarg;
      break;
    case 's':
      d.seed = strtoull(optarg, NULL, 0);
      break;
    case 'm':
      mode = optarg;
      break;
    case 'd':
      dir = optarg;
      break;
    case 'z':
      d.small = strcmp(optarg, "small") == 0;
      break;
    default:
      fprintf(stderr, "usage: see the comment at the top of net_driver.c\n");
      return 2;
    }
  }
  zt_setup("net_driver");
  zt_types_init();

  zccResult_t rc;
  if (strcmp(mode, "env") == 0) {
    zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
    cfg.deviceType = zccDeviceHost;
    rc = zccCommInitFromEnv(&d.comm, &cfg);
    if (rc == zccSuccess) {
      zccCommUserRank(d.comm, &d.rank);
      zccCommCount(d.comm, &d.nranks);
    }
    zt_set_tag("[net env rank %s]", getenv("RANK") ? getenv("RANK") : "?");
  } else {
    if (d.rank < 0 || d.nranks < 1 || d.rank >= d.nranks || !id_file) {
      fprintf(stderr, "net_driver: need --rank, --nranks and --id-file\n");
      return 2;
    }
    zt_set_tag("[net %s rank %d]", mode, d.rank);
    zccUniqueId id;
    if (d.rank == 0) {
      rc = zccGetUniqueId(&id);
      if (rc != zccSuccess || write_id(id_file, &id) != 0) {
        zt_fail("zccGetUniqueId / writing %s: %s: \"%s\"", id_file, zt_rc_name(rc),
                zccGetLastError(NULL));
        return zt_finish();
      }
    } else if (read_id(id_file, &id, 60) != 0) {
      zt_fail("no unique id in %s after 60 s", id_file);
      return zt_finish();
    }
    double start = 0;
    if (strcmp(mode, "init") == 0 && wait_start(&d, dir, &start) != 0) {
      zt_fail("no start time in %s/start after 120 s", dir);
      return zt_finish();
    }
    rc = zt_comm_init_host(&d.comm, d.nranks, &id, d.rank);
    if (strcmp(mode, "init") == 0 && rc == zccSuccess) {
      printf("net_driver rank %d: init %.3f s\n", d.rank, zt_now() - start);
      fflush(stdout);
    }
  }
  if (rc != zccSuccess) {
    zt_fail("init (%s): expected zccSuccess, got %s: \"%s\"", mode, zt_rc_name(rc),
            zccGetLastError(NULL));
    return zt_finish();
  }
  zt_pass();
  double t0 = zt_now();
  if (strcmp(mode, "fault") == 0) {
    run_fault(&d, dir);
  } else {
    run_checks(&d);
    rc = zccCommDestroy(d.comm);
    ZT_CHECK(rc == zccSuccess, "zccCommDestroy: expected zccSuccess, got %s", zt_rc_name(rc));
  }
  zt_log("%s done in %.1f s", mode, zt_now() - t0);
  char tag[64];
  snprintf(tag, sizeof(tag), "net_driver rank %d", d.rank);
  zt_set_tag("%s", "");
  printf("%s: %ld passed, %ld failed, %ld skipped\n", tag,
         atomic_load(&zt_counts->passed), atomic_load(&zt_counts->failed),
         atomic_load(&zt_counts->skipped));
  fflush(stdout);
  return atomic_load(&zt_counts->failed) == 0 ? 0 : 1;
}
