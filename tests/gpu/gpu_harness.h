/*
 * The harness of test_gpu_colls (defined in gpu_harness.c): options and the
 * command line, output and the shared check counters, the watchdog, time
 * and randomness, element data (generation, comparison, printing, the host
 * reference), the collectives and their calls, a world (the ranks one
 * process drives) with its communicators and buffers, and the process
 * helpers (shared memory, a child with a limit, the CUDA probe).
 */
#ifndef ZCC_TESTS_GPU_HARNESS_H
#define ZCC_TESTS_GPU_HARNESS_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "zcc.h"

#define MAX_RANKS 16 /* past ZCC_DEV_MAX_RANKS (8): the connector kernels alone */
#define MAX_IDS 64

/* ---- options ---- */

enum {
  PART_MATRIX = 1,
  PART_GRAPHS = 2,
  PART_ERRORS = 4,
  PART_LIFETIME = 8,
  PART_ABORT = 16,
  PART_DEADPEER = 32,
  PART_STAMPS = 64,
  PART_ALL = 127, /* every part but stuck and mismatch (--only) */
  PART_STUCK = 128,
  PART_MISMATCH = 256
};

typedef struct {
  int threads, procs;
  int ngpus;        /* ranks (one per GPU unless --ranks lets ranks share GPUs) */
  int share;        /* --ranks: rank i runs on GPU i % ndev */
  int ndev;         /* GPUs used */
  int order_free;   /* inputs whose reduction is exact in any order (ring, tree) */
  int quick, full;
  int premul_only;  /* --premul-only: the matrix's pre-multiplied sum cases only */
  int parts;
  unsigned only_colls; /* --coll: bit c for collective c; 0: all */
  int only_type;
  int replays;
  int mismatch_rounds; /* --mismatch-rounds: the mismatch part's rounds (1) */
  enum cudaStreamCaptureMode capture;
  uint64_t seed;
  double tmo_s;     /* ZCC_TIMEOUT in seconds */
  double wait_s;    /* a stream must finish within this */
  double barrier_s; /* the test's own barrier between rank processes */
  unsigned step_s;  /* watchdog per step */
  /* --netns NS:IF,...: procs layout, rank r in network namespace netns[r % nnetns]
     (/var/run/netns/NAME), its traffic on interface netif[] (ZCC_SOCKET_IFNAME) */
  int nnetns;
  char netns[MAX_RANKS][64], netif[MAX_RANKS][32];
} options_t;
extern options_t opt;

/* ---- output and counters (shared by every process) ---- */

typedef struct {
  atomic_long checks, failed, lines;
} counts_t;
extern counts_t *counts;
extern char tag[48];

void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pass(void);
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond)                                                                                      \
      pass();                                                                                      \
    else                                                                                           \
      fail(__VA_ARGS__);                                                                           \
  } while (0)

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, cudaGetErrorName(e_),                   \
          cudaGetErrorString(e_));                                                                 \
  } while (0)

const char *rc_name(zccResult_t rc);
const char *last_err(zccComm_t comm);

/* ---- watchdog ---- */

void watch(unsigned seconds, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void child_setup(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* --netns: move this process into namespace i % nnetns and point
   ZCC_SOCKET_IFNAME at its interface (before any zcc call); 0, or -1 on failure */
int join_netns(int i);

/* ---- time, randomness ---- */

double now_s(void);
void sleep_s(double s);
uint64_t mix3(uint64_t a, uint64_t b, uint64_t c);

/* ---- element data ---- */

size_t esize(zccDataType_t t);
void gen_data(zccDataType_t t, uint64_t seed, void *buf, size_t count);
/* Rank r's input for op: gen_data, or with opt.order_free (the ring and
   tree kernels reduce in ring or tree order, the reference in rank order)
   values whose reduction is exact in any order. */
void gen_input(zccDataType_t t, zccRedOp_t op, int reducing, int n, int r, uint64_t seed,
               void *buf, size_t count);
/* The GPU rank r runs on. */
int rank_dev(int r);
size_t compare2(zccDataType_t t, const unsigned char *got, const unsigned char *exp, size_t count,
                size_t *first, size_t *zeros);
size_t compare(zccDataType_t t, const unsigned char *got, const unsigned char *exp, size_t count,
               size_t *first);
const char *zero_note(size_t bad, size_t zeros);
unsigned char poison_for(uint64_t x);

/* ---- collectives ---- */

typedef enum {
  C_ALLREDUCE,
  C_BROADCAST,
  C_REDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_ALLTOALL,
  C_RING,
  C_PAIRS,
  C_MIX,
  C_NUM
} coll_t;

extern const char *const coll_names[C_NUM];

int is_reducing(coll_t c);
int is_rooted(coll_t c);
size_t send_elems(coll_t c, size_t count, int n);
size_t recv_elems(coll_t c, size_t count, int n);

typedef struct {
  coll_t coll;
  zccDataType_t type;
  zccRedOp_t op;
  int root;
  size_t count;
  int bad_peer; /* send/recv: BAD_PEERS peers out of range; BAD_PIECES the ring's send and
                   receive each in BAD_PIECES_N pieces, more than a GPU group takes */
  int premul;   /* reduce, reducescatter: a pre-multiplied sum, PREMUL_HOST or PREMUL_DEVICE */
} call_t;

enum { BAD_PEERS = 1, BAD_PIECES = 2 };
#define BAD_PIECES_N 65 /* > ZCC_DEV_P2P_MAX_OPS / 2: the group holds 130 ops with peers */

/* Pre-multiplied sums (zccRedOpCreatePreMulSum, op zccSum in call_t): each
   rank r's scalar premul_scalar(type, r), host-immediate or in device memory
   (premul_dev[r], written by premul_prepare before the call or capture). */
enum { PREMUL_NONE = 0, PREMUL_HOST = 1, PREMUL_DEVICE = 2 };
void premul_scalar(zccDataType_t t, int r, unsigned char out[8]);
extern void *premul_dev[MAX_RANKS];

void expect_out(const call_t *c, int inplace, int n, int r, const unsigned char *const *ins,
                unsigned char poison, unsigned char *out);

/* ---- a world: the ranks this process drives ---- */

typedef struct {
  unsigned count, gen; /* atomics through the builtins (pbar_wait) */
} pbar_t;

typedef struct {
  pbar_t bar;
  atomic_int stop;
  atomic_int id_req, id_ready, id_failed;
  atomic_int reaped[MAX_RANKS];
  atomic_int flag[MAX_RANKS];
  int fail[MAX_RANKS];
  uint64_t hash[MAX_RANKS];
  zccUniqueId ids[MAX_IDS];
} shared_t;

typedef struct {
  int rank, dev;
  cudaStream_t stream;
  unsigned char *dsend[2], *drecv[2]; /* [0] cudaMalloc, [1] zccMemAlloc, registered */
  int set1_zcc;                       /* [1] came from zccMemAlloc */
  void *hreg[2];                      /* registration handles of dsend[1], drecv[1] */
  unsigned char *hout, *hsend, *hexp; /* host images */
  /* the case in flight */
  const void *sp;
  void *rp;
  unsigned char *rbase, *sdata;
  size_t out_off;
  zccResult_t rc;
  cudaError_t werr;
} rank_t;

typedef struct {
  int procs; /* one process per rank */
  int n, nlocal;
  const char *name;
  rank_t rk[MAX_RANKS]; /* threads: every rank; procs: rk[0] is this process's */
  zccComm_t comms[MAX_RANKS];
  shared_t *sh;
  unsigned char *slots; /* n input slots of slot_bytes (shared between rank processes) */
  size_t slot_bytes, priv;
  int ids_used;
  long cases_run;
} world_t;

unsigned char *slot(world_t *w, int r);
void setdev(world_t *w, int i);
void sync_all(world_t *w, const char *what);
int agree(world_t *w, int ok, const char *what);
int comms_init(world_t *w, zccComm_t *comms, int cuda_cfg, int timeout_ms, const char *what);
void comms_free(world_t *w, zccComm_t *comms, int abort_them, const char *what);
int reg_local(world_t *w, zccComm_t *comms, void **bufs, size_t size, void **handles, int dereg,
              const char *what);
void premul_prepare(world_t *w, const call_t *c);
void call_all(world_t *w, zccComm_t *comms, const call_t *c, const void *const *sps,
              void *const *rps, int null_stream);
cudaError_t wait_stream(cudaStream_t s, double limit_s, const char *what);
void wait_local(world_t *w, int null_stream, const char *what);
void world_alloc(world_t *w, int set1);
void world_free_set1(world_t *w);
void world_free(world_t *w);

/* ---- processes ---- */

void *shared_alloc(size_t bytes);
void run_child(const char *what, void (*fn)(int), int arg, double limit_s);

typedef struct {
  int err, count, peer_ok;
  char msg[256];
} probe_t;

void probe(probe_t *out, int want);

/* ---- command line ---- */

void usage(void);
int parse_args(int argc, char **argv);

#endif
