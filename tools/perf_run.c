/*
 * The sweep: for each datatype, op and root, every size out-of-place and
 * in-place; per placement -w untimed iterations, -n timed ones (median of
 * the slowest rank per iteration), then one untimed checked call. Rank 0
 * prints nccl-tests' table and writes the JSON file. Host communicators are
 * measured here; GPU ones in perf_gpu.c, NCCL's beside them with
 * --compare nccl.
 */
#include "perf_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_nccl.h"
#include "perf_util.h"

typedef perf_run_t run_t;

static int is_cuda(const run_t *r)
{
  return r->w->device == PERF_DEVICE_CUDA;
}

/* shared: from zccMemHostAlloc (host communicators, --buffers hostmem: peers reach it in place). */
static void *alloc_buffer(const perf_world_t *w, size_t bytes, const char *what, int shared)
{
  void *p = NULL;

  if (shared) {
    zccResult_t res = zccMemHostAlloc(&p, bytes);
    if (res != zccSuccess) {
      fprintf(stderr, "%s: rank %d: zccMemHostAlloc of %zu bytes for the %s buffer failed: %s\n",
              w->prog, w->rank, bytes, what, zccGetLastError(NULL));
      perf_abort(PERF_EXIT_FAIL);
    }
    memset(p, 0, bytes);
    return p;
  }
  int err = posix_memalign(&p, 4096, bytes);

  if (err != 0) {
    fprintf(stderr, "%s: rank %d: cannot allocate %zu bytes for the %s buffer: %s\n",
            w->prog, w->rank, bytes, what, strerror(err));
    perf_abort(PERF_EXIT_FAIL);
  }
  memset(p, 0, bytes); /* fault the pages in before timing */
  return p;
}

static void print_header(run_t *r)
{
  const perf_opts_t *o = r->o;
  char gaps[512];
  int version = 0;

  PERF_ZCC_CHECK(r->w, "zccGetVersion", zccGetVersion(&version));
  if (!is_cuda(r))
    printf("# zcc %s: zcc %d.%d.%d, %d ranks, %s launch, host communicators\n",
           r->w->prog, version / 10000, version / 100 % 100, version % 100,
           r->w->nranks, r->w->launcher);
  else
    printf("# zcc %s: zcc %d.%d.%d, %d ranks, %s launch, GPU communicators, "
           "%d GPU%s per process\n", r->w->prog, version / 10000, version / 100 % 100,
           version % 100, r->w->nranks, r->w->launcher, r->w->nlocal,
           r->w->nlocal == 1 ? "" : "s");
  if (o->compare_nccl) {
    int v = perf_nccl_version();
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    printf("# NCCL %d.%d.%d from %s; NCCL_NVLS_ENABLE=%s (%s)\n", perf_nccl_major(v),
           perf_nccl_minor(v), perf_nccl_patch(v), perf_nccl_path(), nvls ? nvls : "",
           r->w->nvls_env_set ? "set by the benchmark: no NVLink multicast"
                              : "from the environment");
    if (perf_nccl_gaps(r->coll, o, gaps, sizeof(gaps)) > 0)
      printf("# Not run through NCCL (its columns read N/A): %s\n", gaps);
  }
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: ", o->nthreads,
         o->ngpus, o->min_bytes, o->max_bytes);
  if (o->step_factor > 1)
    printf("%ld(factor)", o->step_factor);
  else
    printf("%zu(bytes)", o->step_bytes);
  printf(" warmup iters: %d iters: %d agg iters: 1 validation: %d graph: %d\n",
         o->warmup, o->iters, o->check, o->graph_iters);
  if (is_cuda(r))
    printf("# Time: CUDA events on each GPU's stream, median over %d %s of the slowest "
           "rank; buffers from %s%s\n", r->ntimes,
           o->graph_iters ? "graph replays (each of -n operations, time divided by -n)"
                          : "iterations",
           o->buffers == PERF_BUF_MANAGED  ? "cudaMallocManaged (--buffers managed)"
           : o->buffers == PERF_BUF_PINNED ? "cudaHostAlloc (pinned, mapped: --buffers pinned)"
                                           : "cudaMalloc",
           o->local_register ? ", registered (-R 1)" : "");
  else
    printf("# Buffers: %s%s\n",
           o->buffers == PERF_BUF_HOSTMEM ? "zccMemHostAlloc (--buffers hostmem)"
                                          : "ordinary (posix_memalign)",
           o->local_register ? ", registered (-R 1)" : "");
  printf("#\n# Using devices\n");
  for (int i = 0; i < r->w->nranks; i++) {
    if (!is_cuda(r))
      printf("#  Rank %2d Group  0 Pid %6d on %10s device host\n", i,
             (int)r->ranks[i].pid, r->ranks[i].host);
    else
      printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s\n", i,
             (int)r->ranks[i].pid, r->ranks[i].host, (int)r->ranks[i].cuda_dev,
             r->ranks[i].bus_id, r->ranks[i].gpu);
  }
  if (o->compare_nccl)
    perf_print_compare_header(stdout);
  else
    perf_print_table_header(stdout);
  fflush(stdout);
}

static void json_open(run_t *r)
{
  const perf_opts_t *o = r->o;
  char date[64];
  int version = 0;

  r->json = fopen(o->json_path, "w");
  if (r->json == NULL) {
    fprintf(stderr, "%s: cannot open %s for writing: %s\n", r->w->prog,
            o->json_path, strerror(errno));
    perf_abort(PERF_EXIT_FAIL);
  }
  PERF_ZCC_CHECK(r->w, "zccGetVersion", zccGetVersion(&version));
  perf_iso_date(date, sizeof(date));
  fprintf(r->json, "{\n  \"benchmark\": ");
  perf_json_string(r->json, r->w->prog);
  fprintf(r->json, ",\n  \"collective\": ");
  perf_json_string(r->json, r->coll->name);
  fprintf(r->json, ",\n  \"environment\": {\n    \"host\": ");
  perf_json_string(r->json, r->ranks[0].host);
  fprintf(r->json, ",\n    \"zcc_version\": \"%d.%d.%d\",\n    \"zcc_version_code\": %d,\n",
          version / 10000, version / 100 % 100, version % 100, version);
  fprintf(r->json, "    \"nranks\": %d,\n    \"date\": \"%s\",\n    \"launcher\": \"%s\",\n"
          "    \"device\": \"%s\",\n", r->w->nranks, date, r->w->launcher,
          is_cuda(r) ? "cuda" : "host");
  if (is_cuda(r)) {
    fprintf(r->json, "    \"gpus_per_process\": %d,\n    \"timing\": \"cuda_events\",\n",
            r->w->nlocal);
    if (o->compare_nccl) {
      int v = perf_nccl_version();
      const char *nvls = getenv("NCCL_NVLS_ENABLE");
      fprintf(r->json, "    \"nccl_version\": \"%d.%d.%d\",\n    \"nccl_version_code\": %d,\n"
              "    \"nccl_library\": ", perf_nccl_major(v), perf_nccl_minor(v),
              perf_nccl_patch(v), v);
      perf_json_string(r->json, perf_nccl_path());
      fprintf(r->json, ",\n    \"nccl_nvls_enable\": ");
      perf_json_string(r->json, nvls ? nvls : "");
      fprintf(r->json, ",\n    \"nccl_nvls_enable_set_by_benchmark\": %s,\n",
              r->w->nvls_env_set ? "true" : "false");
    }
  }
  fprintf(r->json, "    \"ranks\": [");
  for (int i = 0; i < r->w->nranks; i++) {
    fprintf(r->json, "%s\n      {\"rank\": %d, \"pid\": %d, \"host\": ", i ? "," : "", i,
            (int)r->ranks[i].pid);
    perf_json_string(r->json, r->ranks[i].host);
    if (is_cuda(r)) {
      fprintf(r->json, ", \"cuda_device\": %d, \"bus_id\": ", (int)r->ranks[i].cuda_dev);
      perf_json_string(r->json, r->ranks[i].bus_id);
      fprintf(r->json, ", \"gpu\": ");
      perf_json_string(r->json, r->ranks[i].gpu);
    }
    fprintf(r->json, "}");
  }
  fprintf(r->json, "\n    ]\n  },\n");
  fprintf(r->json, "  \"options\": {\"min_bytes\": %zu, \"max_bytes\": %zu, \"step_factor\": %ld, "
          "\"step_bytes\": %zu, \"iters\": %d, \"warmup_iters\": %d, \"check\": %d, "
          "\"local_register\": %d, \"nthreads\": %d, \"ngpus\": %d",
          o->min_bytes, o->max_bytes, o->step_factor, o->step_bytes, o->iters,
          o->warmup, o->check, o->local_register, o->nthreads, o->ngpus);
  if (is_cuda(r))
    fprintf(r->json, ", \"device\": \"cuda\", \"cudagraph\": %d, \"compare\": \"%s\", "
            "\"buffers\": \"%s\"", o->graph_iters, o->compare_nccl ? "nccl" : "",
            perf_buffers_name(o->buffers));
  fprintf(r->json, "},\n");
  fprintf(r->json, "  \"results\": [");
}

static void json_placement(FILE *f, const char *name, const placement_t *p)
{
  if (p->time_us < 0) {
    fprintf(f, "\"%s\": null", name);
    return;
  }
  fprintf(f, "\"%s\": {\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": ",
          name, p->time_us, p->algbw, p->busbw);
  if (p->wrong >= 0)
    fprintf(f, "%lld}", (long long)p->wrong);
  else
    fprintf(f, "null}");
}

/* p[0..1]: zcc out-of-place and in-place; with --compare nccl p[2..3]: NCCL's. */
static void json_row(run_t *r, size_t size, size_t count, int type, int op,
                     int root, const placement_t *p)
{
  FILE *f = r->json;

  fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
          "\"root\": %d, ", r->json_rows++ ? "," : "", size, count, perf_type_name(type),
          perf_op_name(op), root);
  json_placement(f, "out_of_place", &p[0]);
  fprintf(f, ", ");
  json_placement(f, "in_place", &p[1]);
  if (r->o->compare_nccl) {
    fprintf(f, ", \"nccl\": {");
    json_placement(f, "out_of_place", &p[2]);
    fprintf(f, ", ");
    json_placement(f, "in_place", &p[3]);
    fprintf(f, "}, \"busbw_ratio_zcc_over_nccl\": {");
    for (int i = 0; i < 2; i++) {
      fprintf(f, "%s\"%s\": ", i ? ", " : "", i ? "in_place" : "out_of_place");
      if (p[2 + i].time_us < 0)
        fprintf(f, "null");
      else
        fprintf(f, "%.6f", perf_ratio(p[2 + i].time_us, p[i].time_us));
    }
    fprintf(f, "}");
  }
  fprintf(f, "}");
}

static void json_close(run_t *r, double avg_busbw, double nccl_avg_busbw)
{
  fprintf(r->json, "\n  ],\n  \"out_of_bounds_values\": %lld,\n  \"avg_busbw_gbps\": %.6f",
          (long long)r->wrong_total, avg_busbw);
  if (r->o->compare_nccl)
    fprintf(r->json, ",\n  \"nccl_out_of_bounds_values\": %lld,\n"
            "  \"nccl_avg_busbw_gbps\": %.6f", (long long)r->nccl_wrong_total, nccl_avg_busbw);
  fprintf(r->json, "\n}\n");
  if (fclose(r->json) != 0) {
    fprintf(stderr, "%s: writing %s failed: %s\n", r->w->prog, r->o->json_path,
            strerror(errno));
    perf_abort(PERF_EXIT_FAIL);
  }
  r->json = NULL;
}

void perf_prepare(const run_t *r, const perf_data_t *d, const perf_counts_t *c, int rank,
                  int inplace, char *sendbuf, char *recvbuf, int root)
{
  int has_input = !r->coll->input_on_root_only || rank == root;
  size_t ts = perf_type_size(d->type);

  if (inplace) {
    size_t span = c->send_count > c->recv_count ? c->send_count : c->recv_count;
    perf_poison(d->type, recvbuf, span);
    if (has_input)
      perf_fill(d, rank, recvbuf + c->inplace_send_offset * ts, c->send_count);
  } else {
    perf_fill(d, rank, sendbuf, c->send_count);
    perf_poison(d->type, recvbuf, c->recv_count);
  }
}

static void measure(run_t *r, const perf_counts_t *c, size_t size, int type,
                    int op, int root, int inplace, placement_t *out)
{
  perf_world_t *w = r->w;
  size_t ts = perf_type_size(type);
  size_t bytes = (c->send_count > c->recv_count ? c->send_count : c->recv_count) * ts;
  char *sendp = inplace ? r->recvbuf + c->inplace_send_offset * ts : r->sendbuf;
  char *recvp = inplace ? r->recvbuf + c->inplace_recv_offset * ts : r->recvbuf;
  perf_call_t call = {.sendbuff = sendp, .recvbuff = recvp, .count = c->param_count,
                      .type = (zccDataType_t)type, .op = op == PERF_OP_NONE ? zccSum : (zccRedOp_t)op,
                      .root = root, .comm = w->comm, .rank = w->rank, .nranks = w->nranks};
  perf_data_t d = {.type = type, .op = op, .nranks = w->nranks,
                   .seed = perf_seed(size, type, op, root, inplace)};
  int iters = r->o->iters;

  perf_prepare(r, &d, c, w->rank, inplace, r->sendbuf, r->recvbuf, root);
  for (int i = 0; i < r->o->warmup; i++)
    PERF_ZCC_CHECK(w, r->coll->call_name, r->coll->run(&call));
  for (int i = 0; i < iters; i++) {
    double t0 = perf_now_us();
    PERF_ZCC_CHECK(w, r->coll->call_name, r->coll->run(&call));
    r->times[i] = perf_now_us() - t0;
  }
  /* the slowest rank's time per iteration, then the median of those */
  PERF_ZCC_CHECK(w, "zccAllReduce (timing)",
                 zccAllReduce(r->times, r->times, (size_t)iters, zccFloat64, zccMax,
                              w->comm, NULL));
  out->time_us = perf_median(r->times, iters);
  out->algbw = perf_gbps(bytes, out->time_us);
  out->busbw = out->algbw * r->coll->busbw_factor(w->nranks);
  out->wrong = -1;

  if (r->o->check) {
    char label[256];
    int64_t wrong;

    snprintf(label, sizeof(label), "%s: rank %d: %s %s %s root %d %s size %zu",
             w->prog, w->rank, r->coll->name, perf_type_name(type), perf_op_name(op),
             r->coll->rooted ? root : -1, inplace ? "in-place" : "out-of-place", bytes);
    perf_prepare(r, &d, c, w->rank, inplace, r->sendbuf, r->recvbuf, root);
    PERF_ZCC_CHECK(w, r->coll->call_name, r->coll->run(&call));
    wrong = perf_verify(&d, r->coll, c, w->rank, root, recvp, label);
    PERF_ZCC_CHECK(w, "zccAllReduce (error count)",
                   zccAllReduce(&wrong, &wrong, 1, zccInt64, zccSum, w->comm, NULL));
    out->wrong = wrong;
  }
}

static void run_size(run_t *r, size_t size, int type, int op, int root)
{
  size_t ts = perf_type_size(type);
  perf_counts_t c;
  placement_t p[4]; /* zcc out-of-place, in-place; NCCL's */
  int nlibs = r->o->compare_nccl ? 2 : 1;
  size_t shown;

  /* the shape is the same for every rank of this process (only offsets differ) */
  r->coll->counts(size / ts, r->w->rank, r->w->nranks, &c);
  if (c.param_count == 0 && size != 0)
    return; /* too small for this type and rank count */
  for (int lib = 0; lib < nlibs; lib++)
    for (int inplace = 0; inplace < 2; inplace++) {
      placement_t *out = &p[2 * lib + inplace];
      if (lib == PERF_LIB_NCCL &&
          (!perf_nccl_supports(type, op) || (inplace && !perf_nccl_runs_in_place(r->coll)))) {
        *out = (placement_t){.time_us = -1.0, .wrong = -1};
        continue;
      }
#ifdef ZCC_PERF_WITH_CUDA
      if (is_cuda(r)) {
        perf_gpu_measure(r, lib, &c, size, type, op, root, inplace, out);
        continue;
      }
#endif
      measure(r, &c, size, type, op, root, inplace, out);
    }
  for (int i = 0; i < 2; i++) {
    r->wrong_total += p[i].wrong > 0 ? p[i].wrong : 0;
    if (nlibs == 2)
      r->nccl_wrong_total += p[2 + i].wrong > 0 ? p[2 + i].wrong : 0;
  }
  if (r->w->rank != 0)
    return;
  shown = (c.send_count > c.recv_count ? c.send_count : c.recv_count) * ts;
  perf_print_row_head(stdout, shown, c.param_count, perf_type_name(type), perf_op_name(op),
                      r->coll->rooted ? root : -1);
  for (int i = 0; i < 2; i++) {
    if (nlibs == 2) {
      perf_print_compare_result(stdout, p[i].time_us, p[i].busbw, p[i].wrong,
                                p[2 + i].time_us, p[2 + i].busbw, p[2 + i].wrong);
      if (p[2 + i].time_us >= 0) {
        r->nccl_busbw_sum += p[2 + i].busbw;
        r->nccl_busbw_count++;
        r->compared_busbw_sum += p[i].busbw;
      }
    } else {
      perf_print_row_result(stdout, p[i].time_us, p[i].algbw, p[i].busbw, p[i].wrong);
    }
    r->busbw_sum += p[i].busbw;
    r->busbw_count++;
  }
  printf("\n");
  fflush(stdout);
  if (r->json)
    json_row(r, shown, c.param_count, type, op, r->coll->rooted ? root : -1, p);
}

static void sweep(run_t *r, int type, int op, int root)
{
  const perf_opts_t *o = r->o;
  size_t size = o->min_bytes;

  do {
    run_size(r, size, type, op, root);
  } while (perf_next_size(size, o->max_bytes, o->step_factor, o->step_bytes, &size));
}

static void gather_ranks(run_t *r)
{
  perf_world_t *w = r->w;
  rank_info_t mine;

  r->ranks = calloc((size_t)w->nranks, sizeof(*r->ranks));
  if (r->ranks == NULL) {
    fprintf(stderr, "%s: rank %d: out of memory for %d rank records\n", w->prog, w->rank,
            w->nranks);
    perf_abort(PERF_EXIT_FAIL);
  }
#ifdef ZCC_PERF_WITH_CUDA
  if (is_cuda(r)) {
    perf_gpu_gather_ranks(r);
    return;
  }
#endif
  memset(&mine, 0, sizeof(mine));
  mine.pid = (int32_t)getpid();
  mine.cuda_dev = -1;
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0)
    snprintf(mine.host, sizeof(mine.host), "unknown");
  PERF_ZCC_CHECK(w, "zccAllGather (rank list)",
                 zccAllGather(&mine, r->ranks, sizeof(mine), zccUint8, w->comm, NULL));
}

/* Host buffers: the communicator's own (host) or staging for the GPUs' (cuda). */
static void alloc_host(run_t *r)
{
  const perf_opts_t *o = r->o;

  r->buf_bytes = perf_largest_size(o->min_bytes, o->max_bytes, o->step_factor, o->step_bytes);
  if (r->buf_bytes < 4096)
    r->buf_bytes = 4096;
  r->host_shared = !is_cuda(r) && o->buffers == PERF_BUF_HOSTMEM;
  r->sendbuf = alloc_buffer(r->w, r->buf_bytes, "send", r->host_shared);
  r->recvbuf = alloc_buffer(r->w, r->buf_bytes, "receive", r->host_shared);
  r->ntimes = o->graph_iters > 0 ? o->graph_iters : o->iters;
  r->times = calloc((size_t)r->ntimes, sizeof(double));
  if (r->times == NULL) {
    fprintf(stderr, "%s: rank %d: out of memory for %d iteration times\n", r->w->prog,
            r->w->rank, r->ntimes);
    perf_abort(PERF_EXIT_FAIL);
  }
}

int perf_run(perf_world_t *w)
{
  const perf_opts_t *o = w->opts;
  const perf_coll_t *coll = w->coll;
  run_t r = {.w = w, .o = o, .coll = coll};
  void *send_handle = NULL, *recv_handle = NULL;
  int all_types = o->type == PERF_ALL, all_ops = o->op == PERF_ALL, all_roots = o->root == PERF_ALL;
  int type_lo = all_types ? 0 : o->type, type_hi = all_types ? zccNumTypes - 1 : o->type;
  int op_lo = all_ops ? 0 : o->op, op_hi = all_ops ? zccNumOps - 1 : o->op;
  int root_lo = all_roots ? 0 : o->root, root_hi = all_roots ? w->nranks - 1 : o->root;
  double avg, nccl_avg, compared_avg;

  if (coll->rooted && o->root >= w->nranks) {
    if (w->rank == 0)
      fprintf(stderr, "%s: root %d is out of range for %d ranks\n", w->prog, o->root,
              w->nranks);
    return PERF_EXIT_USAGE;
  }
#ifdef ZCC_PERF_WITH_CUDA
  if (is_cuda(&r)) {
    alloc_host(&r);
    perf_gpu_setup(&r);
  }
#endif
  gather_ranks(&r);
  if (w->rank == 0) {
    print_header(&r);
    if (o->json_path)
      json_open(&r);
  }

  if (!is_cuda(&r)) {
    alloc_host(&r);
    if (o->local_register) {
      PERF_ZCC_CHECK(w, "zccCommRegister (send buffer)",
                     zccCommRegister(w->comm, r.sendbuf, r.buf_bytes, &send_handle));
      PERF_ZCC_CHECK(w, "zccCommRegister (receive buffer)",
                     zccCommRegister(w->comm, r.recvbuf, r.buf_bytes, &recv_handle));
    }
  }

  for (int type = type_lo; type <= type_hi; type++)
    for (int op = op_lo; op <= op_hi; op++)
      for (int root = root_lo; root <= root_hi; root++)
        sweep(&r, type, op, root);

  avg = r.busbw_count ? r.busbw_sum / r.busbw_count : 0.0;
  nccl_avg = r.nccl_busbw_count ? r.nccl_busbw_sum / r.nccl_busbw_count : 0.0;
  compared_avg = r.nccl_busbw_count ? r.compared_busbw_sum / r.nccl_busbw_count : 0.0;
  if (w->rank == 0) {
    if (o->compare_nccl)
      perf_print_compare_trailer(stdout, o->check ? r.wrong_total : 0, avg,
                                 o->check ? r.nccl_wrong_total : 0, nccl_avg,
                                 perf_ratio(compared_avg, nccl_avg));
    else
      perf_print_trailer(stdout, o->check ? r.wrong_total : 0, avg);
    fflush(stdout);
    if (r.json)
      json_close(&r, avg, nccl_avg);
  }
#ifdef ZCC_PERF_WITH_CUDA
  if (is_cuda(&r))
    perf_gpu_teardown(&r);
#endif
  if (!is_cuda(&r) && o->local_register) {
    PERF_ZCC_CHECK(w, "zccCommDeregister (receive buffer)",
                   zccCommDeregister(w->comm, recv_handle));
    PERF_ZCC_CHECK(w, "zccCommDeregister (send buffer)",
                   zccCommDeregister(w->comm, send_handle));
  }
  free(r.times);
  if (r.host_shared) {
    PERF_ZCC_CHECK(w, "zccMemHostFree (receive buffer)", zccMemHostFree(r.recvbuf));
    PERF_ZCC_CHECK(w, "zccMemHostFree (send buffer)", zccMemHostFree(r.sendbuf));
  } else {
    free(r.recvbuf);
    free(r.sendbuf);
  }
  free(r.ranks);
  return r.wrong_total ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}
