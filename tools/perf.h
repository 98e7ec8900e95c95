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
  int rank;
  int nranks;
} perf_call_t;

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
  int np;          /* -np: ranks to fork; 0 when not given */
  int local_register;
  const char *json_path;
} perf_opts_t;

/* Parse argv; on a bad option print the cause and the usage, and exit 2. -h exits 0. */
void perf_parse_args(const perf_coll_t *coll, int argc, char **argv,
                     perf_opts_t *opts);
/* nccl-tests' name of a type ("float", "half", "f8e4m3"...). */
const char *perf_type_name(int type);
/* "sum", "prod", "max", "min", "avg", or "none" for PERF_OP_NONE. */
const char *perf_op_name(int op);
size_t perf_type_size(int type);

/* A running rank. */
typedef struct {
  const perf_coll_t *coll;
  const perf_opts_t *opts;
  const char *prog;
  const char *launcher; /* "single", "fork", "mpi" or "env" */
  zccComm_t comm;
  int rank;
  int nranks;
} perf_world_t;

/* Print "<prog>: rank R: <what> failed: <error string>: <last error>" and fail. */
void perf_zcc_fail(const perf_world_t *w, const char *what, zccResult_t res)
    __attribute__((noreturn));
/* Leave the process with code after a fatal error (MPI_Abort under MPI). */
void perf_abort(int code) __attribute__((noreturn));

/* Run the whole sweep on an initialised world; returns the rank's exit code. */
int perf_run(perf_world_t *w);

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
