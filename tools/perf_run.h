/*
 * The sweep's state, shared by perf_run.c (the sweep, the table, the JSON
 * file and the host measurements) and perf_gpu.c (the GPU measurements).
 * Internal to the benchmarks.
 */
#ifndef ZCC_PERF_RUN_H_
#define ZCC_PERF_RUN_H_

#include <stdio.h>

#include "perf.h"

/* What each rank tells rank 0 for the header; plain bytes on the wire. */
typedef struct {
  int32_t pid;
  int32_t cuda_dev; /* -1: host */
  char host[60];
  char bus_id[20];  /* PCI bus id of the GPU */
  char gpu[64];     /* the GPU's name */
} rank_info_t;

/* One placement's result. */
typedef struct {
  double time_us, algbw, busbw; /* time_us < 0: not run (NCCL lacks the type or op) */
  int64_t wrong; /* -1: not checked */
} placement_t;

struct perf_gpu; /* perf_gpu.c */

typedef struct {
  perf_world_t *w;
  const perf_opts_t *o;
  const perf_coll_t *coll;
  char *sendbuf, *recvbuf; /* host: the buffers; cuda: staging for fills and checks */
  int host_shared;         /* host, -R 1: sendbuf and recvbuf from zccMemHostAlloc */
  size_t buf_bytes;
  double *times;
  int ntimes;       /* entries in times: -n, or -G with graphs */
  rank_info_t *ranks;
  FILE *json;       /* rank 0 with --json only */
  int json_rows;
  int64_t wrong_total;
  double busbw_sum;
  int busbw_count;
  /* --compare nccl */
  int64_t nccl_wrong_total;
  double nccl_busbw_sum;
  int nccl_busbw_count;
  double compared_busbw_sum; /* zcc's, over the rows NCCL ran too */
  struct perf_gpu *gpu;
} perf_run_t;

/*
 * Fill the inputs of one placement with d's data and poison every output
 * element, in host memory laid out as the device buffers are.
 */
void perf_prepare(const perf_run_t *r, const perf_data_t *d, const perf_counts_t *c,
                  int rank, int inplace, char *sendbuf, char *recvbuf, int root);

#ifdef ZCC_PERF_WITH_CUDA
/* perf_gpu.c: streams, device buffers, events and registration of every local rank. */
void perf_gpu_setup(perf_run_t *r);
void perf_gpu_teardown(perf_run_t *r);
/* Every rank's record into r->ranks, gathered over the GPU communicators. */
void perf_gpu_gather_ranks(perf_run_t *r);
/* Time and check one placement through lib (PERF_LIB_*); every process calls it. */
void perf_gpu_measure(perf_run_t *r, int lib, const perf_counts_t *c, size_t size,
                      int type, int op, int root, int inplace, placement_t *out);
#endif

#endif /* ZCC_PERF_RUN_H_ */
