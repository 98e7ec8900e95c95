/*
 * NCCL for --compare nccl, through dlopen: the few types it needs are
 * declared here (an opaque communicator, a 128-byte unique id, int enums),
 * zcc's datatypes and ops are mapped to NCCL's by name, and every call
 * checks its result.
 */
#include "perf_nccl.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NCCL's own values (nccl.h), by name. */
enum {
  NCCL_SUCCESS = 0,
  NCCL_INT8 = 0,
  NCCL_UINT8 = 1,
  NCCL_INT32 = 2,
  NCCL_UINT32 = 3,
  NCCL_INT64 = 4,
  NCCL_UINT64 = 5,
  NCCL_FLOAT16 = 6,
  NCCL_FLOAT32 = 7,
  NCCL_FLOAT64 = 8,
  NCCL_BFLOAT16 = 9,
  NCCL_FLOAT8E4M3 = 10,
  NCCL_FLOAT8E5M2 = 11,
  NCCL_SUM = 0,
  NCCL_PROD = 1,
  NCCL_MAX = 2,
  NCCL_MIN = 3,
  NCCL_AVG = 4,
};

typedef struct {
  char internal[PERF_ID_BYTES];
} nccl_id_t;
typedef void *nccl_comm_t;
typedef void *nccl_stream_t; /* cudaStream_t */

/* zcc type -> NCCL type, and the first NCCL version that has it. */
static const struct {
  int zcc, nccl, since;
  const char *nccl_name;
} type_map[] = {
    {zccInt8, NCCL_INT8, 0, "ncclInt8"},
    {zccUint8, NCCL_UINT8, 0, "ncclUint8"},
    {zccInt32, NCCL_INT32, 0, "ncclInt32"},
    {zccUint32, NCCL_UINT32, 0, "ncclUint32"},
    {zccInt64, NCCL_INT64, 0, "ncclInt64"},
    {zccUint64, NCCL_UINT64, 0, "ncclUint64"},
    {zccFloat16, NCCL_FLOAT16, 0, "ncclFloat16"},
    {zccFloat32, NCCL_FLOAT32, 0, "ncclFloat32"},
    {zccFloat64, NCCL_FLOAT64, 0, "ncclFloat64"},
    {zccBfloat16, NCCL_BFLOAT16, 21000, "ncclBfloat16"},
    {zccFloat8e4m3, NCCL_FLOAT8E4M3, 22400, "ncclFloat8e4m3"},
    {zccFloat8e5m2, NCCL_FLOAT8E5M2, 22400, "ncclFloat8e5m2"},
};

static const struct {
  int zcc, nccl, since;
  const char *nccl_name;
} op_map[] = {
    {zccSum, NCCL_SUM, 0, "ncclSum"},
    {zccProd, NCCL_PROD, 0, "ncclProd"},
    {zccMax, NCCL_MAX, 0, "ncclMax"},
    {zccMin, NCCL_MIN, 0, "ncclMin"},
    {zccAvg, NCCL_AVG, 21000, "ncclAvg"},
};

static struct {
  void *lib;
  char path[4096];
  int version;
  int (*get_version)(int *);
  const char *(*error_string)(int);
  const char *(*last_error)(nccl_comm_t); /* optional (2.13) */
  int (*get_unique_id)(nccl_id_t *);
  int (*comm_init_rank)(nccl_comm_t *, int, nccl_id_t, int);
  int (*comm_init_all)(nccl_comm_t *, int, const int *);
  int (*comm_destroy)(nccl_comm_t);
  int (*group_start)(void);
  int (*group_end)(void);
  int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, nccl_stream_t);
  int (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, nccl_stream_t);
  int (*reduce)(const void *, void *, size_t, int, int, int, nccl_comm_t, nccl_stream_t);
  int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, nccl_stream_t);
  int (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t, nccl_stream_t);
  int (*all_to_all)(const void *, void *, size_t, int, nccl_comm_t, nccl_stream_t); /* optional */
  int (*send)(const void *, size_t, int, int, nccl_comm_t, nccl_stream_t);
  int (*recv)(void *, size_t, int, int, nccl_comm_t, nccl_stream_t);
  int (*comm_register)(nccl_comm_t, void *, size_t, void **);   /* optional (2.19) */
  int (*comm_deregister)(nccl_comm_t, void *);                  /* optional (2.19) */
} nccl;

int perf_nccl_major(int code)
{
  return code < 10000 ? code / 1000 : code / 10000;
}

int perf_nccl_minor(int code)
{
  return code < 10000 ? code / 100 % 10 : code / 100 % 100;
}

int perf_nccl_patch(int code)
{
  return code % 100;
}

int perf_nccl_version(void)
{
  return nccl.version;
}

const char *perf_nccl_path(void)
{
  return nccl.path;
}

/* Resolve name into *fn; 0 on success. */
static int resolve(void **fn, const char *name)
{
  *fn = dlsym(nccl.lib, name);
  return *fn != NULL ? 0 : -1;
}

static void usage_error(int quiet, const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void usage_error(int quiet, const char *prog, const char *fmt, ...)
{
  va_list ap;

  if (quiet)
    return;
  fprintf(stderr, "%s: --compare nccl: ", prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}

static int is_fp8(int t)
{
  return t == zccFloat8e4m3 || t == zccFloat8e5m2;
}

/* NULL when NCCL runs zcc type t with op (op < 0: no op); else why not, in why. */
static const char *lacks(int t, int op, char *why, size_t len)
{
  char vers[32];

  snprintf(vers, sizeof(vers), "%d.%d.%d", perf_nccl_major(nccl.version),
           perf_nccl_minor(nccl.version), perf_nccl_patch(nccl.version));
  for (size_t i = 0; i < sizeof(type_map) / sizeof(type_map[0]); i++)
    if (type_map[i].zcc == t && nccl.version < type_map[i].since) {
      snprintf(why, len, "NCCL %s has no %s", vers, type_map[i].nccl_name);
      return why;
    }
  for (size_t i = 0; i < sizeof(op_map) / sizeof(op_map[0]); i++)
    if (op >= 0 && op_map[i].zcc == op && nccl.version < op_map[i].since) {
      snprintf(why, len, "NCCL %s has no %s", vers, op_map[i].nccl_name);
      return why;
    }
  /* ncclAvg is a pre-multiplied sum, which NCCL does not build for fp8 (2.28: invalid argument) */
  if (op == zccAvg && is_fp8(t)) {
    snprintf(why, len, "NCCL %s has no ncclAvg for %s", vers,
             t == zccFloat8e4m3 ? "ncclFloat8e4m3" : "ncclFloat8e5m2");
    return why;
  }
  return NULL;
}

int perf_nccl_supports(int type, int op)
{
  char why[128];

  return lacks(type, op == PERF_OP_NONE ? -1 : op, why, sizeof(why)) == NULL;
}

int perf_nccl_runs_in_place(const perf_coll_t *coll)
{
  /* NCCL sends from and receives into the same buffer at once: the data races */
  return coll->kind != PERF_COLL_ALLTOALL && coll->kind != PERF_COLL_SENDRECV;
}

int perf_nccl_gaps(const perf_coll_t *coll, const perf_opts_t *opts, char *buf, size_t len)
{
  int n = 0;

  buf[0] = '\0';
  if (!perf_nccl_runs_in_place(coll)) {
    snprintf(buf, len, "in-place %s (one buffer to send from and receive into)", coll->name);
    n++;
  }
  for (int t = 0; t < zccNumTypes; t++) {
    if (opts->type != PERF_ALL && opts->type != t)
      continue;
    for (int op = opts->op == PERF_ALL ? 0 : opts->op;
         op <= (opts->op == PERF_ALL ? zccNumOps - 1 : opts->op); op++) {
      size_t used = strlen(buf);
      if (perf_nccl_supports(t, op))
        continue;
      if (op == PERF_OP_NONE)
        snprintf(buf + used, len - used, "%s%s", n ? ", " : "", perf_type_name(t));
      else
        snprintf(buf + used, len - used, "%s%s %s", n ? ", " : "", perf_type_name(t),
                 perf_op_name(op));
      n++;
    }
  }
  return n;
}

int perf_nccl_load(const char *prog, const perf_coll_t *coll, const perf_opts_t *opts,
                   int quiet)
{
  static const char *const candidates[] = {"libnccl.so.2", "libnccl.so"};
  const char *env = getenv("ZCC_NCCL_LIB");
  char tried[1024] = "";
  Dl_info info;
  int bad = 0;

  if (nccl.lib != NULL)
    goto check;
  if (env != NULL && *env != '\0') {
    nccl.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (nccl.lib == NULL) {
      usage_error(quiet, prog, "cannot load ZCC_NCCL_LIB=%s: %s", env, dlerror());
      return PERF_EXIT_USAGE;
    }
  } else {
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]) && !nccl.lib; i++) {
      nccl.lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
      if (nccl.lib == NULL)
        snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s", i ? "; " : "",
                 dlerror());
    }
    if (nccl.lib == NULL) {
      usage_error(quiet, prog, "cannot load NCCL (%s); set ZCC_NCCL_LIB to the path of "
                  "libnccl.so.2", tried);
      return PERF_EXIT_USAGE;
    }
  }
  bad |= resolve((void **)&nccl.get_version, "ncclGetVersion");
  bad |= resolve((void **)&nccl.error_string, "ncclGetErrorString");
  bad |= resolve((void **)&nccl.get_unique_id, "ncclGetUniqueId");
  bad |= resolve((void **)&nccl.comm_init_rank, "ncclCommInitRank");
  bad |= resolve((void **)&nccl.comm_init_all, "ncclCommInitAll");
  bad |= resolve((void **)&nccl.comm_destroy, "ncclCommDestroy");
  bad |= resolve((void **)&nccl.group_start, "ncclGroupStart");
  bad |= resolve((void **)&nccl.group_end, "ncclGroupEnd");
  bad |= resolve((void **)&nccl.all_reduce, "ncclAllReduce");
  bad |= resolve((void **)&nccl.broadcast, "ncclBroadcast");
  bad |= resolve((void **)&nccl.reduce, "ncclReduce");
  bad |= resolve((void **)&nccl.all_gather, "ncclAllGather");
  bad |= resolve((void **)&nccl.reduce_scatter, "ncclReduceScatter");
  bad |= resolve((void **)&nccl.send, "ncclSend");
  bad |= resolve((void **)&nccl.recv, "ncclRecv");
  resolve((void **)&nccl.last_error, "ncclGetLastError");
  resolve((void **)&nccl.all_to_all, "ncclAlltoAll");
  resolve((void **)&nccl.comm_register, "ncclCommRegister");
  resolve((void **)&nccl.comm_deregister, "ncclCommDeregister");
  if (dladdr((void *)nccl.get_version, &info) != 0 && info.dli_fname != NULL)
    snprintf(nccl.path, sizeof(nccl.path), "%s", info.dli_fname);
  else
    snprintf(nccl.path, sizeof(nccl.path), "%s", env ? env : "libnccl.so.2");
  if (bad) {
    usage_error(quiet, prog, "%s lacks NCCL 2 functions (ncclGetVersion, ncclCommInitRank, "
                "ncclGroupStart, ncclSend...)", nccl.path);
    dlclose(nccl.lib);
    nccl.lib = NULL;
    return PERF_EXIT_USAGE;
  }
  if (nccl.get_version(&nccl.version) != NCCL_SUCCESS) {
    usage_error(quiet, prog, "ncclGetVersion failed in %s", nccl.path);
    return PERF_EXIT_USAGE;
  }

check:
  if (coll->kind == PERF_COLL_ALLTOALL && nccl.all_to_all == NULL) {
    char vers[32];
    snprintf(vers, sizeof(vers), "%d.%d.%d", perf_nccl_major(nccl.version),
             perf_nccl_minor(nccl.version), perf_nccl_patch(nccl.version));
    usage_error(quiet, prog, "NCCL %s (%s) has no ncclAlltoAll; alltoall needs a newer NCCL",
                vers, nccl.path);
    return PERF_EXIT_USAGE;
  }
  /* asked for by name: refused; within -d all or -o all: NCCL's columns read N/A */
  if (opts->type != PERF_ALL && opts->op != PERF_ALL) {
    char why[128];
    if (lacks(opts->type, opts->op == PERF_OP_NONE ? -1 : opts->op, why, sizeof(why))) {
      usage_error(quiet, prog, "%s; choose another %s", why,
                  perf_nccl_supports(opts->type, PERF_OP_NONE) ? "op with -o" : "type with -d");
      return PERF_EXIT_USAGE;
    }
  }
  return PERF_EXIT_OK;
}

static int nccl_type(int t)
{
  for (size_t i = 0; i < sizeof(type_map) / sizeof(type_map[0]); i++)
    if (type_map[i].zcc == t)
      return type_map[i].nccl;
  return -1;
}

static int nccl_op(int op)
{
  for (size_t i = 0; i < sizeof(op_map) / sizeof(op_map[0]); i++)
    if (op_map[i].zcc == op)
      return op_map[i].nccl;
  return -1;
}

static void nccl_fail(const perf_world_t *w, int rank, nccl_comm_t comm, const char *what,
                      int res) __attribute__((noreturn));

static void nccl_fail(const perf_world_t *w, int rank, nccl_comm_t comm, const char *what,
                      int res)
{
  const char *last = nccl.last_error ? nccl.last_error(comm) : NULL;
  char who[32] = "";

  if (rank >= 0)
    snprintf(who, sizeof(who), "rank %d: ", rank);
  fprintf(stderr, "%s: %s%s failed: NCCL error %d: %s%s%s\n", w->prog, who, what, res,
          nccl.error_string(res), last && *last ? ": " : "", last && *last ? last : "");
  perf_abort(PERF_EXIT_FAIL);
}

#define NCCL_CHECK(w, rank, comm, what, call)                                  \
  do {                                                                         \
    int res_ = (call);                                                         \
    if (res_ != NCCL_SUCCESS)                                                  \
      nccl_fail((w), (rank), (comm), (what), res_);                            \
  } while (0)

void perf_nccl_get_unique_id(const perf_world_t *w, char id[PERF_ID_BYTES])
{
  nccl_id_t u;

  NCCL_CHECK(w, w->rank, NULL, "ncclGetUniqueId", nccl.get_unique_id(&u));
  memcpy(id, u.internal, PERF_ID_BYTES);
}

void perf_nccl_init_rank(perf_world_t *w, int l, const char id[PERF_ID_BYTES], int rank)
{
  nccl_id_t u;
  nccl_comm_t c = NULL;

  memcpy(u.internal, id, PERF_ID_BYTES);
  NCCL_CHECK(w, rank, NULL, "ncclCommInitRank", nccl.comm_init_rank(&c, w->nranks, u, rank));
  w->nccl_comms[l] = c;
}

void perf_nccl_init_all(perf_world_t *w)
{
  nccl_comm_t c[PERF_MAX_GPUS];

  NCCL_CHECK(w, w->rank, NULL, "ncclCommInitAll", nccl.comm_init_all(c, w->nlocal, w->cuda_dev));
  for (int l = 0; l < w->nlocal; l++)
    w->nccl_comms[l] = c[l];
}

void perf_nccl_destroy_all(perf_world_t *w)
{
  for (int l = 0; l < w->nlocal; l++) {
    if (w->nccl_comms[l] == NULL)
      continue;
    NCCL_CHECK(w, w->rank + l, w->nccl_comms[l], "ncclCommDestroy",
               nccl.comm_destroy(w->nccl_comms[l]));
    w->nccl_comms[l] = NULL;
  }
}

void perf_nccl_group_start(const perf_world_t *w)
{
  NCCL_CHECK(w, w->rank, NULL, "ncclGroupStart", nccl.group_start());
}

void perf_nccl_group_end(const perf_world_t *w)
{
  NCCL_CHECK(w, w->rank, NULL, "ncclGroupEnd", nccl.group_end());
}

void perf_nccl_run(const perf_world_t *w, const perf_coll_t *coll, const perf_call_t *k)
{
  nccl_comm_t comm = k->nccl_comm;
  int t = nccl_type(k->type), op = nccl_op(k->op);
  int next = (k->rank + 1) % k->nranks, prev = (k->rank + k->nranks - 1) % k->nranks;
  int res, end;

  switch (coll->kind) {
  case PERF_COLL_ALLREDUCE:
    NCCL_CHECK(w, k->rank, comm, "ncclAllReduce",
               nccl.all_reduce(k->sendbuff, k->recvbuff, k->count, t, op, comm, k->stream));
    break;
  case PERF_COLL_BROADCAST:
    NCCL_CHECK(w, k->rank, comm, "ncclBroadcast",
               nccl.broadcast(k->sendbuff, k->recvbuff, k->count, t, k->root, comm, k->stream));
    break;
  case PERF_COLL_REDUCE:
    NCCL_CHECK(w, k->rank, comm, "ncclReduce",
               nccl.reduce(k->sendbuff, k->recvbuff, k->count, t, op, k->root, comm, k->stream));
    break;
  case PERF_COLL_ALLGATHER:
    NCCL_CHECK(w, k->rank, comm, "ncclAllGather",
               nccl.all_gather(k->sendbuff, k->recvbuff, k->count, t, comm, k->stream));
    break;
  case PERF_COLL_REDUCESCATTER:
    NCCL_CHECK(w, k->rank, comm, "ncclReduceScatter",
               nccl.reduce_scatter(k->sendbuff, k->recvbuff, k->count, t, op, comm, k->stream));
    break;
  case PERF_COLL_ALLTOALL:
    NCCL_CHECK(w, k->rank, comm, "ncclAlltoAll",
               nccl.all_to_all(k->sendbuff, k->recvbuff, k->count, t, comm, k->stream));
    break;
  case PERF_COLL_SENDRECV:
    NCCL_CHECK(w, k->rank, comm, "ncclGroupStart", nccl.group_start());
    res = nccl.send(k->sendbuff, k->count, t, next, comm, k->stream);
    if (res == NCCL_SUCCESS)
      res = nccl.recv(k->recvbuff, k->count, t, prev, comm, k->stream);
    end = nccl.group_end(); /* always close the group */
    NCCL_CHECK(w, k->rank, comm, "ncclSend/ncclRecv", res != NCCL_SUCCESS ? res : end);
    break;
  }
}

int perf_nccl_register(const perf_world_t *w, int l, void *buf, size_t bytes, void **handle)
{
  if (nccl.comm_register == NULL || nccl.comm_deregister == NULL)
    return 0;
  NCCL_CHECK(w, w->rank + l, w->nccl_comms[l], "ncclCommRegister",
             nccl.comm_register(w->nccl_comms[l], buf, bytes, handle));
  return 1;
}

void perf_nccl_deregister(const perf_world_t *w, int l, void *handle)
{
  NCCL_CHECK(w, w->rank + l, w->nccl_comms[l], "ncclCommDeregister",
             nccl.comm_deregister(w->nccl_comms[l], handle));
}
