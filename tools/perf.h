/*
 * The zcc benchmarks (allreduce_perf and siblings): one driver, one small
 * main per collective. The command line and the output columns are those
 * of nccl-tests; see perf_args.c for the options.
 */
#ifndef ZCC_PERF_H_
#define ZCC_PERF_H_

#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

/* Exit codes. */
#define PERF_EXIT_OK 0
#define PERF_EXIT_FAIL 1  /* zcc error, wrong results, a rank died */
#define PERF_EXIT_USAGE 2 /* bad command line */
/* A forked rank that finished but found wrong results (the parent exits 1). */
#define PERF_EXIT_WRONG 3

/* --device: where the communicators and buffers live. */
#define PERF_DEVICE_AUTO 0 /* cuda when built with CUDA and a GPU exists, else host */
#define PERF_DEVICE_HOST 1
#define PERF_DEVICE_CUDA 2

/* GPUs one process may drive (-g). */
#define PERF_MAX_GPUS 64
/* Bytes of a unique id, zcc's and NCCL's alike. */
#define PERF_ID_BYTES 128

/* Which library a measurement runs through (--compare nccl adds the second). */
#define PERF_LIB_ZCC 0
#define PERF_LIB_NCCL 1

/* An op value for collectives that do not reduce ("none" in the redop column). */
#define PERF_OP_NONE (-1)
/* -d all, -o all, -r all. */
#define PERF_ALL (-2)

/* Element counts and buffer sizes of one call, as nccl-tests computes them. */
typedef struct {
  size_t param_count; /* the count argument of the call */
  size_t send_count;  /* elements in the send buffer */
  size_t recv_count;  /* elements in the receive buffer */
  size_t inplace_send_offset; /* in-place: sendbuff = buffer + offset (elements) */
  size_t inplace_recv_offset; /* in-place: recvbuff = buffer + offset (elements) */
} perf_counts_t;

/* One call of a collective. */
typedef struct {
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  zccDataType_t type;
  zccRedOp_t op; /* ignored by collectives that do not reduce */
  int root;      /* ignored by collectives without a root */
  zccComm_t comm;
  void *nccl_comm;    /* the NCCL communicator, for PERF_LIB_NCCL */
  zccStream_t stream; /* NULL on host communicators */
  int rank;
  int nranks;
} perf_call_t;

/* The collectives, for the NCCL calls (perf_nccl.c). */
typedef enum {
  PERF_COLL_ALLREDUCE,
  PERF_COLL_BROADCAST,
  PERF_COLL_REDUCE,
  PERF_COLL_ALLGATHER,
  PERF_COLL_REDUCESCATTER,
  PERF_COLL_ALLTOALL,
  PERF_COLL_SENDRECV,
} perf_coll_kind_t;

/*
 * The source of one output element: src_rank < 0 reduces element src_index
 * of every rank's input; otherwise the element is src_index of src_rank's
 * input.
 */
typedef struct {
  int src_rank;
  size_t src_index;
} perf_source_t;

typedef struct perf_coll {
  perf_coll_kind_t kind;
  const char *name;        /* "allreduce" */
  const char *call_name;   /* "zccAllReduce", for error messages */
  int reduces;             /* takes an op */
  int rooted;              /* takes a root */
  /* Only the root's input matters; other ranks' in-place buffers stay poisoned. */
  int input_on_root_only;
  /* busbw = algbw * factor */
  double (*busbw_factor)(int nranks);
  /* count = size / type size, before rounding to the collective's shape */
  void (*counts)(size_t count, int rank, int nranks, perf_counts_t *c);
  zccResult_t (*run)(const perf_call_t *call);
  /* Output elements that rank holds after the call (checked ones). */
  size_t (*out_count)(const perf_counts_t *c, int rank, int nranks, int root);
  /* Where output element i of rank comes from. */
  perf_source_t (*source)(const perf_counts_t *c, size_t i, int rank,
                          int nranks, int root);
} perf_coll_t;

extern const perf_coll_t perf_allreduce;
extern const perf_coll_t perf_broadcast;
extern const perf_coll_t perf_reduce;
extern const perf_coll_t perf_allgather;
extern const perf_coll_t perf_reducescatter;
extern const perf_coll_t perf_alltoall;
extern const perf_coll_t perf_sendrecv;

/* Command line. */
typedef struct {
  size_t min_bytes, max_bytes, step_bytes;
  long step_factor;
  int iters, warmup, check;
  int type;        /* zccDataType_t, or PERF_ALL */
  int op;          /* zccRedOp_t, PERF_ALL, or PERF_OP_NONE when the collective does not reduce */
  int root;        /* root rank, or PERF_ALL */
  int nthreads, ngpus;
  int share_gpus; /* --share-gpus 1: ranks may share GPUs */
  int bind;       /* --bind core (1, the default) or none (0): -np ranks on CPUs of their own */
  int np;          /* -np: ranks to fork; 0 when not given */
  int local_register;
  int buffers;     /* --buffers: PERF_BUF_DEVICE, _PINNED (cudaHostAlloc, mapped), _MANAGED;
                      host communicators: PERF_BUF_DEVICE (ordinary memory) or _HOSTMEM */
  int device;      /* --device: PERF_DEVICE_*; AUTO until the rank resolves it */
  const char *device_why; /* what asked for cuda ("--device cuda", "-G"...), for messages */
  int graph_iters; /* -G: timed CUDA graph replays; 0: no graphs */
  int compare_nccl; /* --compare nccl */
  const char *json_path;
} perf_opts_t;

/* Parse argv; on a bad option print the cause and the usage, and exit 2. -h exits 0. */
void perf_parse_args(const perf_coll_t *coll, int argc, char **argv,
                     perf_opts_t *opts);
/* nccl-tests' name of a type ("float", "half", "f8e4m3"...). */
const char *perf_type_name(int type);
/* "sum", "prod", "max", "min", "avg", or "none" for PERF_OP_NONE. */
const char *perf_op_name(int op);
/* --buffers kinds and their names ("device", "pinned", "managed", "hostmem"). */
enum { PERF_BUF_DEVICE, PERF_BUF_PINNED, PERF_BUF_MANAGED, PERF_BUF_HOSTMEM, PERF_BUF_COUNT };
const char *perf_buffers_name(int buffers);
size_t perf_type_size(int type);

/*
 * A running process and the ranks it drives: one on the host, -g N on GPUs
 * (global ranks rank .. rank + nlocal - 1, one communicator and GPU each).
 */
typedef struct {
  const perf_coll_t *coll;
  const perf_opts_t *opts;
  const char *prog;
  const char *launcher; /* "single", "fork", "mpi" or "env" */
  zccComm_t comm;       /* comms[0] */
  int rank;             /* the first rank of this process */
  int nranks;           /* in all processes */
  int device;           /* PERF_DEVICE_HOST or PERF_DEVICE_CUDA */
  int nlocal;           /* ranks (communicators) of this process */
  int local_index;      /* this process among those on its host; -1: unknown */
  int local_size;       /* processes on this host; 0: unknown */
  zccComm_t comms[PERF_MAX_GPUS];
  int cuda_dev[PERF_MAX_GPUS];       /* CUDA device of each local rank */
  void *nccl_comms[PERF_MAX_GPUS];   /* --compare nccl */
  int nvls_env_set;     /* the benchmark set NCCL_NVLS_ENABLE=0 */
} perf_world_t;

/* Print "<prog>: rank R: <what> failed: <error string>: <last error>" and fail. */
void perf_zcc_fail(const perf_world_t *w, const char *what, zccResult_t res)
    __attribute__((noreturn));
/* Run a zcc call; on an error, perf_zcc_fail with what. */
#define PERF_ZCC_CHECK(w, what, call)                                          \
  do {                                                                         \
    zccResult_t res_ = (call);                                                 \
    if (res_ != zccSuccess)                                                    \
      perf_zcc_fail((w), (what), res_);                                        \
  } while (0)
/* Leave the process with code after a fatal error (MPI_Abort under MPI). */
void perf_abort(int code) __attribute__((noreturn));

/* Run the whole sweep on an initialised world; returns the rank's exit code. */
int perf_run(perf_world_t *w);

/* The name of a PERF_DEVICE_* value ("auto", "host", "cuda"). */
const char *perf_device_name(int device);

#ifdef ZCC_PERF_WITH_CUDA
/* perf_gpu.c, the benchmarks' only CUDA runtime calls. */
/* CUDA devices this process sees; 0 with the reason in why when none. */
int perf_gpu_count(char *why, size_t len);
/* cudaSetDevice; a CUDA error prints the call and leaves with 1. */
void perf_gpu_set_device(const perf_world_t *w, int dev);
/*
 * fn(w, l, arg) for every local rank l, each on its own thread with its
 * GPU current (inline when there is one): for calls that block until every
 * rank has made them (init, registration, finalize).
 */
void perf_gpu_parallel(perf_world_t *w, void (*fn)(perf_world_t *w, int l, void *arg),
                       void *arg);
/* Rank 0's bytes to every rank, over the zcc GPU communicators. */
void perf_gpu_broadcast(perf_world_t *w, void *buf, size_t bytes);
#endif

/* Data for exact checks (perf_check.c). */
typedef struct {
  int type;
  int op;       /* PERF_OP_NONE for collectives that do not reduce */
  uint64_t seed;
  int nranks;
} perf_data_t;

/* A seed that differs for every size, type, op, root and placement. */
uint64_t perf_seed(size_t size, int type, int op, int root, int inplace);
/* Write rank's input elements [0, n) at buf. */
void perf_fill(const perf_data_t *d, int rank, void *buf, size_t n);
/* Fill n elements with a value that no check can expect. */
void perf_poison(int type, void *buf, size_t n);
/*
 * Count the output elements that differ from what the sources say; report
 * the first few mismatches on stderr with label.
 */
int64_t perf_verify(const perf_data_t *d, const perf_coll_t *coll,
                    const perf_counts_t *c, int rank, int root,
                    const void *out, const char *label);

/* The entry point of every benchmark main. */
int perf_main(const perf_coll_t *coll, int argc, char **argv);

#endif /* ZCC_PERF_H_ */
