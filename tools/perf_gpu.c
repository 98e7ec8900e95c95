/*
 * The GPU side of the benchmarks (--device cuda), and their only CUDA
 * runtime calls: one stream and one pair of cudaMalloc buffers per GPU,
 * data made on the host and copied in, outputs poisoned before every
 * checked call and copied back for the exact checks.
 *
 * Timing: -w eager iterations, then -n timed ones, each between two CUDA
 * events on every GPU's stream; per iteration the slowest rank's time, then
 * the median. With -G g, as in nccl-tests, after the eager warm-up -n
 * iterations (every GPU's calls, grouped) are captured into one CUDA graph
 * per stream and g replays are timed the same way, each replay's time
 * divided by -n (the time of one operation inside a graph). The check
 * replays a graph of one iteration. NCCL's measurements (--compare nccl) take the
 * same path with NCCL's calls.
 *
 * The bookkeeping (times, error counts, the rank list) goes through the
 * zcc GPU communicators themselves, in a small device scratch buffer.
 */
#include "perf_run.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_nccl.h"
#include "perf_util.h"

/* Event pairs per GPU: timed iterations are recorded in chunks of this many. */
#define PERF_EVENT_CHUNK 256
/* The scratch buffer's receive half starts here (the rank list). */
#define PERF_SCRATCH_ALIGN 256

typedef struct {
  cudaStream_t stream;
  char *send, *recv;   /* device buffers of r->buf_bytes */
  char *scratch;       /* bookkeeping */
  cudaEvent_t start[PERF_EVENT_CHUNK], stop[PERF_EVENT_CHUNK];
  cudaGraphExec_t exec;
  void *zcc_handle[2]; /* -R 1: send, receive */
  void *nccl_handle[2];
  int nccl_registered;
} gpu_rank_t;

struct perf_gpu {
  gpu_rank_t g[PERF_MAX_GPUS];
  size_t scratch_bytes;
};

static void cuda_fail(const perf_world_t *w, const char *call, cudaError_t err)
    __attribute__((noreturn));

static void cuda_fail(const perf_world_t *w, const char *call, cudaError_t err)
{
  char who[32] = "";

  if (w->rank >= 0)
    snprintf(who, sizeof(who), "rank %d: ", w->rank);
  fprintf(stderr, "%s: %s%s failed: %s (%s)\n", w->prog, who, call, cudaGetErrorString(err),
          cudaGetErrorName(err));
  perf_abort(PERF_EXIT_FAIL);
}

#define CUDA_CHECK(w, call)                                                    \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess)                                                   \
      cuda_fail((w), #call, err_);                                             \
  } while (0)

int perf_gpu_count(char *why, size_t len)
{
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);

  if (err != cudaSuccess) {
    snprintf(why, len, "cudaGetDeviceCount: %s", cudaGetErrorString(err));
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0)
    snprintf(why, len, "cudaGetDeviceCount found no device");
  return n;
}

void perf_gpu_set_device(const perf_world_t *w, int dev)
{
  CUDA_CHECK(w, cudaSetDevice(dev));
}

typedef struct {
  perf_world_t *w;
  int l;
  void (*fn)(perf_world_t *, int, void *);
  void *arg;
} par_t;

static void *par_main(void *p)
{
  par_t *a = p;

  perf_gpu_set_device(a->w, a->w->cuda_dev[a->l]);
  a->fn(a->w, a->l, a->arg);
  return NULL;
}

void perf_gpu_parallel(perf_world_t *w, void (*fn)(perf_world_t *, int, void *), void *arg)
{
  pthread_t t[PERF_MAX_GPUS];
  par_t a[PERF_MAX_GPUS];
  int err;

  if (w->nlocal == 1) {
    perf_gpu_set_device(w, w->cuda_dev[0]);
    fn(w, 0, arg);
    return;
  }
  for (int l = 0; l < w->nlocal; l++) {
    a[l] = (par_t){.w = w, .l = l, .fn = fn, .arg = arg};
    err = pthread_create(&t[l], NULL, par_main, &a[l]);
    if (err != 0) {
      fprintf(stderr, "%s: rank %d: cannot start a thread for GPU %d: %s\n", w->prog,
              w->rank + l, w->cuda_dev[l], strerror(err));
      perf_abort(PERF_EXIT_FAIL);
    }
  }
  for (int l = 0; l < w->nlocal; l++)
    pthread_join(t[l], NULL);
}

static void group_start(const perf_world_t *w, int lib)
{
  if (lib == PERF_LIB_NCCL)
    perf_nccl_group_start(w);
  else
    PERF_ZCC_CHECK(w, "zccGroupStart", zccGroupStart());
}

static void group_end(const perf_world_t *w, int lib)
{
  if (lib == PERF_LIB_NCCL)
    perf_nccl_group_end(w);
  else
    PERF_ZCC_CHECK(w, "zccGroupEnd", zccGroupEnd());
}

void perf_gpu_broadcast(perf_world_t *w, void *buf, size_t bytes)
{
  cudaStream_t s[PERF_MAX_GPUS];
  void *d[PERF_MAX_GPUS];

  for (int l = 0; l < w->nlocal; l++) {
    perf_gpu_set_device(w, w->cuda_dev[l]);
    CUDA_CHECK(w, cudaStreamCreateWithFlags(&s[l], cudaStreamNonBlocking));
    CUDA_CHECK(w, cudaMalloc(&d[l], bytes));
    CUDA_CHECK(w, cudaMemcpyAsync(d[l], buf, bytes, cudaMemcpyHostToDevice, s[l]));
  }
  group_start(w, PERF_LIB_ZCC);
  for (int l = 0; l < w->nlocal; l++)
    PERF_ZCC_CHECK(w, "zccBroadcast (bootstrap)",
                   zccBroadcast(d[l], d[l], bytes, zccUint8, 0, w->comms[l], (zccStream_t)s[l]));
  group_end(w, PERF_LIB_ZCC);
  for (int l = 0; l < w->nlocal; l++) {
    perf_gpu_set_device(w, w->cuda_dev[l]);
    if (l == 0)
      CUDA_CHECK(w, cudaMemcpyAsync(buf, d[0], bytes, cudaMemcpyDeviceToHost, s[0]));
    CUDA_CHECK(w, cudaStreamSynchronize(s[l]));
    CUDA_CHECK(w, cudaFree(d[l]));
    CUDA_CHECK(w, cudaStreamDestroy(s[l]));
  }
}

/* Wait for everything queued on every local GPU. */
static void sync_all(perf_run_t *r)
{
  for (int l = 0; l < r->w->nlocal; l++)
    CUDA_CHECK(r->w, cudaStreamSynchronize(r->gpu->g[l].stream));
}

/*
 * Reduce count elements of buf over every rank, result in buf. Local rank
 * 0 gives buf; the others give buf too for max, nothing (zeros) for sum.
 */
static void reduce_host(perf_run_t *r, void *buf, size_t count, zccDataType_t type,
                        zccRedOp_t op, const char *what)
{
  perf_world_t *w = r->w;
  size_t bytes = count * perf_type_size(type);

  for (int l = 0; l < w->nlocal; l++) {
    gpu_rank_t *g = &r->gpu->g[l];
    perf_gpu_set_device(w, w->cuda_dev[l]);
    if (l == 0 || op == zccMax)
      CUDA_CHECK(w, cudaMemcpyAsync(g->scratch, buf, bytes, cudaMemcpyHostToDevice, g->stream));
    else
      CUDA_CHECK(w, cudaMemsetAsync(g->scratch, 0, bytes, g->stream));
  }
  group_start(w, PERF_LIB_ZCC);
  for (int l = 0; l < w->nlocal; l++)
    PERF_ZCC_CHECK(w, what,
                   zccAllReduce(r->gpu->g[l].scratch, r->gpu->g[l].scratch, count, type, op,
                                w->comms[l], (zccStream_t)r->gpu->g[l].stream));
  group_end(w, PERF_LIB_ZCC);
  CUDA_CHECK(w, cudaMemcpyAsync(buf, r->gpu->g[0].scratch, bytes, cudaMemcpyDeviceToHost,
                                r->gpu->g[0].stream));
  sync_all(r);
}

void perf_gpu_gather_ranks(perf_run_t *r)
{
  perf_world_t *w = r->w;
  size_t one = sizeof(rank_info_t);

  for (int l = 0; l < w->nlocal; l++) {
    gpu_rank_t *g = &r->gpu->g[l];
    struct cudaDeviceProp prop;
    rank_info_t mine;

    memset(&mine, 0, sizeof(mine));
    mine.pid = (int32_t)getpid();
    mine.cuda_dev = w->cuda_dev[l];
    if (gethostname(mine.host, sizeof(mine.host) - 1) != 0)
      snprintf(mine.host, sizeof(mine.host), "unknown");
    CUDA_CHECK(w, cudaGetDeviceProperties(&prop, w->cuda_dev[l]));
    snprintf(mine.gpu, sizeof(mine.gpu), "%.*s", (int)sizeof(mine.gpu) - 1, prop.name);
    CUDA_CHECK(w, cudaDeviceGetPCIBusId(mine.bus_id, (int)sizeof(mine.bus_id) - 1,
                                        w->cuda_dev[l]));
    perf_gpu_set_device(w, w->cuda_dev[l]);
    CUDA_CHECK(w, cudaMemcpyAsync(g->scratch, &mine, one, cudaMemcpyHostToDevice, g->stream));
    CUDA_CHECK(w, cudaStreamSynchronize(g->stream));
  }
  group_start(w, PERF_LIB_ZCC);
  for (int l = 0; l < w->nlocal; l++)
    PERF_ZCC_CHECK(w, "zccAllGather (rank list)",
                   zccAllGather(r->gpu->g[l].scratch, r->gpu->g[l].scratch + PERF_SCRATCH_ALIGN,
                                one, zccUint8, w->comms[l], (zccStream_t)r->gpu->g[l].stream));
  group_end(w, PERF_LIB_ZCC);
  CUDA_CHECK(w, cudaMemcpyAsync(r->ranks, r->gpu->g[0].scratch + PERF_SCRATCH_ALIGN,
                                one * (size_t)w->nranks, cudaMemcpyDeviceToHost,
                                r->gpu->g[0].stream));
  sync_all(r);
}

static void register_zcc(perf_world_t *w, int l, void *arg)
{
  perf_run_t *r = arg;
  gpu_rank_t *g = &r->gpu->g[l];

  PERF_ZCC_CHECK(w, "zccCommRegister (send buffer)",
                 zccCommRegister(w->comms[l], g->send, r->buf_bytes, &g->zcc_handle[0]));
  PERF_ZCC_CHECK(w, "zccCommRegister (receive buffer)",
                 zccCommRegister(w->comms[l], g->recv, r->buf_bytes, &g->zcc_handle[1]));
}

static void deregister_zcc(perf_world_t *w, int l, void *arg)
{
  perf_run_t *r = arg;
  gpu_rank_t *g = &r->gpu->g[l];

  PERF_ZCC_CHECK(w, "zccCommDeregister (receive buffer)",
                 zccCommDeregister(w->comms[l], g->zcc_handle[1]));
  PERF_ZCC_CHECK(w, "zccCommDeregister (send buffer)",
                 zccCommDeregister(w->comms[l], g->zcc_handle[0]));
}

void perf_gpu_setup(perf_run_t *r)
{
  perf_world_t *w = r->w;
  size_t list = sizeof(rank_info_t) * (size_t)w->nranks;
  size_t times = sizeof(double) * (size_t)r->ntimes;

  r->gpu = calloc(1, sizeof(*r->gpu));
  if (r->gpu == NULL) {
    fprintf(stderr, "%s: rank %d: out of memory for the GPU state\n", w->prog, w->rank);
    perf_abort(PERF_EXIT_FAIL);
  }
  r->gpu->scratch_bytes = PERF_SCRATCH_ALIGN + list;
  if (r->gpu->scratch_bytes < times)
    r->gpu->scratch_bytes = times;
  for (int l = 0; l < w->nlocal; l++) {
    gpu_rank_t *g = &r->gpu->g[l];

    perf_gpu_set_device(w, w->cuda_dev[l]);
    CUDA_CHECK(w, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    if (r->o->buffers == PERF_BUF_MANAGED) {
      /* --buffers managed: the driver moves the pages where they are touched */
      CUDA_CHECK(w, cudaMallocManaged((void **)&g->send, r->buf_bytes, cudaMemAttachGlobal));
      CUDA_CHECK(w, cudaMallocManaged((void **)&g->recv, r->buf_bytes, cudaMemAttachGlobal));
      CUDA_CHECK(w, cudaMemsetAsync(g->send, 0, r->buf_bytes, g->stream));
      CUDA_CHECK(w, cudaMemsetAsync(g->recv, 0, r->buf_bytes, g->stream));
    } else if (r->o->buffers == PERF_BUF_PINNED) {
      /* --buffers pinned: host memory every GPU maps; the kernels load and store it */
      unsigned fl = cudaHostAllocMapped | cudaHostAllocPortable;
      CUDA_CHECK(w, cudaHostAlloc((void **)&g->send, r->buf_bytes, fl));
      CUDA_CHECK(w, cudaHostAlloc((void **)&g->recv, r->buf_bytes, fl));
      memset(g->send, 0, r->buf_bytes);
      memset(g->recv, 0, r->buf_bytes);
    } else {
      CUDA_CHECK(w, cudaMalloc((void **)&g->send, r->buf_bytes));
      CUDA_CHECK(w, cudaMalloc((void **)&g->recv, r->buf_bytes));
      CUDA_CHECK(w, cudaMemsetAsync(g->send, 0, r->buf_bytes, g->stream));
      CUDA_CHECK(w, cudaMemsetAsync(g->recv, 0, r->buf_bytes, g->stream));
    }
    CUDA_CHECK(w, cudaMalloc((void **)&g->scratch, r->gpu->scratch_bytes));
    for (int i = 0; i < PERF_EVENT_CHUNK; i++) {
      CUDA_CHECK(w, cudaEventCreate(&g->start[i]));
      CUDA_CHECK(w, cudaEventCreate(&g->stop[i]));
    }
    CUDA_CHECK(w, cudaStreamSynchronize(g->stream));
  }
  if (r->o->local_register) {
    perf_gpu_parallel(w, register_zcc, r);
    for (int l = 0; r->o->compare_nccl && l < w->nlocal; l++) {
      gpu_rank_t *g = &r->gpu->g[l];
      perf_gpu_set_device(w, w->cuda_dev[l]);
      g->nccl_registered = perf_nccl_register(w, l, g->send, r->buf_bytes, &g->nccl_handle[0]) &&
                           perf_nccl_register(w, l, g->recv, r->buf_bytes, &g->nccl_handle[1]);
    }
  }
}

void perf_gpu_teardown(perf_run_t *r)
{
  perf_world_t *w = r->w;

  if (r->o->local_register) {
    for (int l = 0; r->o->compare_nccl && l < w->nlocal; l++) {
      gpu_rank_t *g = &r->gpu->g[l];
      if (!g->nccl_registered)
        continue;
      perf_gpu_set_device(w, w->cuda_dev[l]);
      perf_nccl_deregister(w, l, g->nccl_handle[1]);
      perf_nccl_deregister(w, l, g->nccl_handle[0]);
    }
    perf_gpu_parallel(w, deregister_zcc, r);
  }
  for (int l = 0; l < w->nlocal; l++) {
    gpu_rank_t *g = &r->gpu->g[l];

    perf_gpu_set_device(w, w->cuda_dev[l]);
    CUDA_CHECK(w, cudaStreamSynchronize(g->stream));
    for (int i = 0; i < PERF_EVENT_CHUNK; i++) {
      CUDA_CHECK(w, cudaEventDestroy(g->start[i]));
      CUDA_CHECK(w, cudaEventDestroy(g->stop[i]));
    }
    CUDA_CHECK(w, cudaFree(g->scratch));
    if (r->o->buffers == PERF_BUF_PINNED) {
      CUDA_CHECK(w, cudaFreeHost(g->recv));
      CUDA_CHECK(w, cudaFreeHost(g->send));
    } else {
      CUDA_CHECK(w, cudaFree(g->recv));
      CUDA_CHECK(w, cudaFree(g->send));
    }
    CUDA_CHECK(w, cudaStreamDestroy(g->stream));
  }
  free(r->gpu);
  r->gpu = NULL;
}

/* One iteration: every local rank's call, grouped when there are several. */
static void iteration(perf_run_t *r, int lib, const perf_call_t *calls)
{
  perf_world_t *w = r->w;
  int grouped = w->nlocal > 1;

  if (grouped)
    group_start(w, lib);
  for (int l = 0; l < w->nlocal; l++) {
    if (grouped)
      perf_gpu_set_device(w, w->cuda_dev[l]);
    if (lib == PERF_LIB_NCCL)
      perf_nccl_run(w, r->coll, &calls[l]);
    else
      PERF_ZCC_CHECK(w, r->coll->call_name, r->coll->run(&calls[l]));
  }
  if (grouped)
    group_end(w, lib);
}

/*
 * Capture n iterations into one graph per stream and instantiate them:
 * every capture ends before the first instantiation (the capturing thread
 * may make no other CUDA call that a capture forbids).
 */
static void capture(perf_run_t *r, int lib, const perf_call_t *calls, int n)
{
  perf_world_t *w = r->w;
  cudaGraph_t graph[PERF_MAX_GPUS];

  for (int l = 0; l < w->nlocal; l++) {
    perf_gpu_set_device(w, w->cuda_dev[l]);
    CUDA_CHECK(w, cudaStreamBeginCapture(r->gpu->g[l].stream, cudaStreamCaptureModeThreadLocal));
  }
  for (int i = 0; i < n; i++)
    iteration(r, lib, calls);
  for (int l = 0; l < w->nlocal; l++) {
    perf_gpu_set_device(w, w->cuda_dev[l]);
    graph[l] = NULL;
    CUDA_CHECK(w, cudaStreamEndCapture(r->gpu->g[l].stream, &graph[l]));
  }
  for (int l = 0; l < w->nlocal; l++) {
    perf_gpu_set_device(w, w->cuda_dev[l]);
    CUDA_CHECK(w, cudaGraphInstantiateWithFlags(&r->gpu->g[l].exec, graph[l], 0));
    CUDA_CHECK(w, cudaGraphDestroy(graph[l]));
  }
}

static void replay(perf_run_t *r)
{
  for (int l = 0; l < r->w->nlocal; l++)
    CUDA_CHECK(r->w, cudaGraphLaunch(r->gpu->g[l].exec, r->gpu->g[l].stream));
}

static void release_graphs(perf_run_t *r)
{
  for (int l = 0; l < r->w->nlocal; l++) {
    perf_gpu_set_device(r->w, r->w->cuda_dev[l]);
    CUDA_CHECK(r->w, cudaGraphExecDestroy(r->gpu->g[l].exec));
    r->gpu->g[l].exec = NULL;
  }
}

/* Fill and poison every local rank's buffers on the host and copy them in. */
static void prepare(perf_run_t *r, const perf_data_t *d, const perf_counts_t *c, int inplace,
                    int root)
{
  perf_world_t *w = r->w;
  size_t ts = perf_type_size(d->type);

  sync_all(r); /* nothing may still read or write the buffers */
  for (int l = 0; l < w->nlocal; l++) {
    gpu_rank_t *g = &r->gpu->g[l];

    perf_prepare(r, d, &c[l], w->rank + l, inplace, r->sendbuf, r->recvbuf, root);
    perf_gpu_set_device(w, w->cuda_dev[l]);
    if (inplace) {
      size_t span = c[l].send_count > c[l].recv_count ? c[l].send_count : c[l].recv_count;
      CUDA_CHECK(w, cudaMemcpyAsync(g->recv, r->recvbuf, span * ts, cudaMemcpyDefault,
                                    g->stream));
    } else {
      CUDA_CHECK(w, cudaMemcpyAsync(g->send, r->sendbuf, c[l].send_count * ts,
                                    cudaMemcpyDefault, g->stream));
      CUDA_CHECK(w, cudaMemcpyAsync(g->recv, r->recvbuf, c[l].recv_count * ts,
                                    cudaMemcpyDefault, g->stream));
    }
    /* the staging buffers are refilled for the next rank */
    CUDA_CHECK(w, cudaStreamSynchronize(g->stream));
  }
}

/*
 * Time r->ntimes iterations (or replays of graphs of per_graph iterations)
 * into r->times, per iteration: the slowest local GPU's.
 */
static void time_loop(perf_run_t *r, int lib, const perf_call_t *calls, int graphs, int per_graph)
{
  perf_world_t *w = r->w;

  for (int base = 0; base < r->ntimes; base += PERF_EVENT_CHUNK) {
    int n = r->ntimes - base < PERF_EVENT_CHUNK ? r->ntimes - base : PERF_EVENT_CHUNK;

    for (int j = 0; j < n; j++) {
      for (int l = 0; l < w->nlocal; l++)
        CUDA_CHECK(w, cudaEventRecord(r->gpu->g[l].start[j], r->gpu->g[l].stream));
      if (graphs)
        replay(r);
      else
        iteration(r, lib, calls);
      for (int l = 0; l < w->nlocal; l++)
        CUDA_CHECK(w, cudaEventRecord(r->gpu->g[l].stop[j], r->gpu->g[l].stream));
    }
    for (int j = 0; j < n; j++)
      r->times[base + j] = 0.0;
    for (int l = 0; l < w->nlocal; l++) {
      gpu_rank_t *g = &r->gpu->g[l];
      CUDA_CHECK(w, cudaEventSynchronize(g->stop[n - 1]));
      for (int j = 0; j < n; j++) {
        float ms = 0.0f;
        CUDA_CHECK(w, cudaEventElapsedTime(&ms, g->start[j], g->stop[j]));
        double us = ms * 1e3 / (graphs ? per_graph : 1);
        if (us > r->times[base + j])
          r->times[base + j] = us;
      }
    }
  }
}

void perf_gpu_measure(perf_run_t *r, int lib, const perf_counts_t *c0, size_t size, int type,
                      int op, int root, int inplace, placement_t *out)
{
  perf_world_t *w = r->w;
  size_t ts = perf_type_size(type);
  size_t bytes = (c0->send_count > c0->recv_count ? c0->send_count : c0->recv_count) * ts;
  int graphs = r->o->graph_iters > 0;
  perf_counts_t c[PERF_MAX_GPUS];
  perf_call_t calls[PERF_MAX_GPUS];
  perf_data_t d = {.type = type, .op = op, .nranks = w->nranks,
                   .seed = perf_seed(size, type, op, root, inplace)};

  for (int l = 0; l < w->nlocal; l++) {
    gpu_rank_t *g = &r->gpu->g[l];

    /* in-place offsets depend on the rank */
    r->coll->counts(size / ts, w->rank + l, w->nranks, &c[l]);
    calls[l] = (perf_call_t){
        .sendbuff = inplace ? g->recv + c[l].inplace_send_offset * ts : g->send,
        .recvbuff = inplace ? g->recv + c[l].inplace_recv_offset * ts : g->recv,
        .count = c[l].param_count,
        .type = (zccDataType_t)type,
        .op = op == PERF_OP_NONE ? zccSum : (zccRedOp_t)op,
        .root = root,
        .comm = w->comms[l],
        .nccl_comm = w->nccl_comms[l],
        .stream = (zccStream_t)g->stream,
        .rank = w->rank + l,
        .nranks = w->nranks,
    };
  }

  prepare(r, &d, c, inplace, root);
  for (int i = 0; i < r->o->warmup; i++)
    iteration(r, lib, calls);
  if (graphs) {
    capture(r, lib, calls, r->o->iters);
    replay(r); /* uploads the graphs; untimed */
  }
  time_loop(r, lib, calls, graphs, r->o->iters);
  /* the slowest rank's time per iteration, then the median of those */
  reduce_host(r, r->times, (size_t)r->ntimes, zccFloat64, zccMax, "zccAllReduce (timing)");
  out->time_us = perf_median(r->times, r->ntimes);
  out->algbw = perf_gbps(bytes, out->time_us);
  out->busbw = out->algbw * r->coll->busbw_factor(w->nranks);
  out->wrong = -1;

  if (r->o->check) {
    int64_t wrong = 0;

    prepare(r, &d, c, inplace, root);
    if (graphs) { /* one iteration: in place, a second one would reduce again */
      release_graphs(r);
      capture(r, lib, calls, 1);
      replay(r);
    } else
      iteration(r, lib, calls);
    sync_all(r);
    for (int l = 0; l < w->nlocal; l++) {
      size_t n = r->coll->out_count(&c[l], w->rank + l, w->nranks, root);
      char label[256];

      snprintf(label, sizeof(label), "%s: rank %d: %s%s %s %s root %d %s size %zu", w->prog,
               w->rank + l, lib == PERF_LIB_NCCL ? "NCCL " : "", r->coll->name,
               perf_type_name(type), perf_op_name(op), r->coll->rooted ? root : -1,
               inplace ? "in-place" : "out-of-place", bytes);
      perf_gpu_set_device(w, w->cuda_dev[l]);
      CUDA_CHECK(w, cudaMemcpy(r->recvbuf, calls[l].recvbuff, n * ts, cudaMemcpyDefault));
      wrong += perf_verify(&d, r->coll, &c[l], w->rank + l, root, r->recvbuf, label);
    }
    reduce_host(r, &wrong, 1, zccInt64, zccSum, "zccAllReduce (error count)");
    out->wrong = wrong;
  }
  if (graphs)
    release_graphs(r);
}
