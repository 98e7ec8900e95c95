/*
 * The harness of test_gpu_colls.c (declared in gpu_harness.h): options and
 * the command line, output and the check counters shared by every process,
 * the watchdog, time and randomness, element data (random inputs, bitwise
 * comparison with NaN equal to NaN, printing, the rank-order host reference
 * of reduce.h), the collectives (sizes, one rank's call, the expected
 * output), a world's plumbing (barriers, unique ids, communicators,
 * registration, calls, stream waits, buffers) and the process helpers
 * (shared memory, a child with a limit, the CUDA probe). The test's parts
 * and main are in test_gpu_colls.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_harness.h"
#include "ztest_types.h"
#include "reduce.h"
#include "zcc.h"

#define MAX_FAIL_LINES 300

/* ---- options ---- */

static const char *const part_names[] = {"matrix", "graphs",   "errors", "lifetime",
                                         "abort",  "deadpeer", "stamps", "stuck",
                                         "mismatch"};

options_t opt;

/* ---- output and counters (shared by every process) ---- */

counts_t *counts;
char tag[48];

static void vline(const char *kind, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void vline(const char *kind, const char *fmt, va_list ap) {
  char line[4096];
  int len = snprintf(line, sizeof(line), "%s%s%s", kind, tag, tag[0] ? " " : "");
  if (len < 0)
    len = 0;
  int m = vsnprintf(line + len, sizeof(line) - (size_t)len, fmt, ap);
  if (m > 0)
    len += m;
  if (len > (int)sizeof(line) - 2)
    len = (int)sizeof(line) - 2;
  line[len++] = '\n';
  fflush(stdout);
  ssize_t wr = write(STDOUT_FILENO, line, (size_t)len); /* one write: lines stay whole */
  (void)wr;
}

void info(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vline("", fmt, ap);
  va_end(ap);
}

void pass(void) {
  atomic_fetch_add(&counts->checks, 1);
}

void fail(const char *fmt, ...) {
  atomic_fetch_add(&counts->checks, 1);
  atomic_fetch_add(&counts->failed, 1);
  long n = atomic_fetch_add(&counts->lines, 1);
  if (n > MAX_FAIL_LINES)
    return;
  if (n == MAX_FAIL_LINES) {
    info("(more failures: counted, not printed)");
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vline("FAIL ", fmt, ap);
  va_end(ap);
}

/* A failure the process cannot go on from: count it and leave. */
void die(const char *fmt, ...) {
  atomic_fetch_add(&counts->checks, 1);
  atomic_fetch_add(&counts->failed, 1);
  va_list ap;
  va_start(ap, fmt);
  vline("FAIL ", fmt, ap);
  va_end(ap);
  _exit(2);
}

const char *rc_name(zccResult_t rc) {
  switch (rc) {
#define RC_NAME_(name, value, desc)                                                                \
  case name: return #name;
    ZCC_RESULT_MAP(RC_NAME_)
#undef RC_NAME_
  default: return "(not a zccResult_t)";
  }
}

const char *last_err(zccComm_t comm) {
  const char *m = zccGetLastError(comm);
  return m && *m ? m : "(no message)";
}

/* ---- watchdog ---- */

static char step[512];

static void on_alarm(int sig) {
  static const char a[] = "FAIL ", b[] = " watchdog: no progress within the step's limit in: ";
  ssize_t wr;
  (void)sig;
  wr = write(STDOUT_FILENO, a, sizeof(a) - 1);
  wr = write(STDOUT_FILENO, tag, strlen(tag));
  wr = write(STDOUT_FILENO, b, sizeof(b) - 1);
  wr = write(STDOUT_FILENO, step, strnlen(step, sizeof(step)));
  wr = write(STDOUT_FILENO, "\n", 1);
  (void)wr;
  _exit(3);
}

/* Name the step now running; the process exits if it lasts over `seconds`. */
void watch(unsigned seconds, const char *fmt, ...) {
  va_list ap;
  alarm(0);
  va_start(ap, fmt);
  vsnprintf(step, sizeof(step), fmt, ap);
  va_end(ap);
  alarm(seconds);
}

void child_setup(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tag, sizeof(tag), fmt, ap);
  va_end(ap);
  signal(SIGALRM, on_alarm);
}

int join_netns(int i) {
  if (opt.nnetns == 0) return 0;
  int k = i % opt.nnetns;
  char path[128];
  snprintf(path, sizeof(path), "/var/run/netns/%s", opt.netns[k]);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fail("cannot enter network namespace %s: %s", opt.netns[k], strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  char ifn[40];
  snprintf(ifn, sizeof(ifn), "=%s", opt.netif[k]);
  setenv("ZCC_SOCKET_IFNAME", ifn, 1);
  return 0;
}

/* ---- time, randomness ---- */

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix3(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = a;
  s = splitmix(&s) ^ b;
  s = splitmix(&s) ^ c;
  return splitmix(&s);
}

/* ---- element data ---- */

size_t esize(zccDataType_t t) {
  return zcc_type_size(t);
}

/* Infinity or NaN encodings of the narrow formats (redrawn by gen_data). */
static int narrow_special(zccDataType_t t, uint32_t v) {
  switch (t) {
  case zccFloat16: return (v & 0x7c00) == 0x7c00;
  case zccBfloat16: return (v & 0x7f80) == 0x7f80;
  case zccFloat8e4m3: return (v & 0x7f) == 0x7f;
  case zccFloat8e5m2: return (v & 0x7c) == 0x7c;
  default: return 0;
  }
}

/*
 * Random inputs: integers are random bits over the whole range (sums and
 * products wrap); floats are finite, of either sign: fp32/fp64 with
 * exponents around 1 (+-30 / +-60 binades) plus 1 in 32 special values
 * (+-0, subnormals, the largest finite), the narrow formats any finite
 * encoding. Sums and products may overflow to infinity and, past two ranks,
 * give NaN: the checks take any NaN as equal to any NaN.
 */
void gen_input(zccDataType_t t, zccRedOp_t op, int reducing, int n, int r, uint64_t seed,
               void *buf, size_t count) {
  if (opt.order_free && reducing)
    zt_gen(t, op, n, r, seed, buf, count);
  else
    gen_data(t, seed, buf, count);
}

int rank_dev(int r) { return opt.share ? r % opt.ndev : r; }

void gen_data(zccDataType_t t, uint64_t seed, void *buf, size_t count) {
  unsigned char *p = buf;
  uint64_t s = seed;
  size_t es = esize(t);
  for (size_t i = 0; i < count; i++) {
    uint64_t r = splitmix(&s);
    switch (t) {
    case zccFloat32: {
      uint32_t sign = (uint32_t)(r >> 63) << 31, man = (uint32_t)(r >> 8) & 0x7fffffu, b;
      switch (r & 31) {
      case 0: b = sign; break;
      case 1: b = sign | man; break; /* subnormal (or zero) */
      case 2: b = sign | 0x7f7fffffu; break;
      default: b = sign | ((uint32_t)(97 + (r >> 32) % 61) << 23) | man; break;
      }
      memcpy(p + 4 * i, &b, 4);
      break;
    }
    case zccFloat64: {
      uint64_t r2 = splitmix(&s), sign = (r >> 63) << 63, man = r2 & ((1ull << 52) - 1), b;
      switch (r & 31) {
      case 0: b = sign; break;
      case 1: b = sign | man; break;
      case 2: b = sign | 0x7fefffffffffffffull; break;
      default: b = sign | ((963 + (r >> 8) % 121) << 52) | man; break;
      }
      memcpy(p + 8 * i, &b, 8);
      break;
    }
    case zccFloat16:
    case zccBfloat16:
    case zccFloat8e4m3:
    case zccFloat8e5m2: {
      uint32_t mask = es == 2 ? 0xffffu : 0xffu, v = (uint32_t)r & mask;
      while (narrow_special(t, v))
        v = (uint32_t)splitmix(&s) & mask;
      memcpy(p + es * i, &v, es); /* little endian: the low bytes */
      break;
    }
    default: memcpy(p + es * i, &r, es); break;
    }
  }
}

static int elem_is_nan(zccDataType_t t, const unsigned char *p) {
  uint16_t h;
  uint32_t f;
  uint64_t d;
  switch (t) {
  case zccFloat16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
  case zccBfloat16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
  case zccFloat8e4m3: return (p[0] & 0x7f) == 0x7f;
  case zccFloat8e5m2: return (p[0] & 0x7f) > 0x7c;
  case zccFloat32: memcpy(&f, p, 4); return (f & 0x7fffffffu) > 0x7f800000u;
  case zccFloat64: memcpy(&d, p, 8); return (d & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  default: return 0;
  }
}

static int elem_is_zero(zccDataType_t t, const unsigned char *p) {
  size_t es = esize(t);
  if (t < zccFloat16) /* the integer types */
    return 0;
  for (size_t b = 0; b < es; b++)
    if ((b == es - 1 ? p[b] & 0x7f : p[b]) != 0)
      return 0;
  return 1;
}

/*
 * Elements that differ bitwise (a NaN matches any NaN); the first in *first,
 * and in *zeros (if not NULL) how many of them are +0 against -0.
 */
size_t compare2(zccDataType_t t, const unsigned char *got, const unsigned char *exp, size_t count,
                size_t *first, size_t *zeros) {
  size_t es = esize(t), bad = 0, z = 0;
  if (count == 0 || memcmp(got, exp, count * es) == 0)
    return 0;
  for (size_t i = 0; i < count; i++) {
    if (memcmp(got + i * es, exp + i * es, es) == 0)
      continue;
    if (elem_is_nan(t, got + i * es) && elem_is_nan(t, exp + i * es))
      continue;
    if (elem_is_zero(t, got + i * es) && elem_is_zero(t, exp + i * es))
      z++;
    if (bad++ == 0)
      *first = i;
  }
  if (zeros)
    *zeros = z;
  return bad;
}

size_t compare(zccDataType_t t, const unsigned char *got, const unsigned char *exp, size_t count,
               size_t *first) {
  return compare2(t, got, exp, count, first, NULL);
}

/* A note for a failure line when only signs of zero differ. */
const char *zero_note(size_t bad, size_t zeros) {
  if (bad && zeros == bad)
    return " [every difference is +0 against -0: max/min of +0 and -0 depends on the reduction "
           "order; the reference reduces in rank order]";
  return "";
}

/* Poison bytes that are no NaN in any type (so a NaN never "matches" them). */
unsigned char poison_for(uint64_t x) {
  unsigned char p = (unsigned char)(0xa5 ^ (x * 0x3b));
  if ((p & 0x7c) == 0x7c)
    p ^= 0x40;
  return p;
}

/* out = in[0] op in[1] op ... in rank order with reduce.h; avg divides at the end. */
static void ref_reduce(zccDataType_t t, zccRedOp_t op, int n, const unsigned char *const *in,
                       unsigned char *out, size_t count) {
  if (count == 0)
    return;
  memcpy(out, in[0], count * esize(t));
  for (int j = 1; j < n; j++)
    zcc_reduce(out, out, in[j], count, t, op);
  if (op == zccAvg)
    zcc_reduce_finish_avg(out, out, count, t, n);
}

/* Pre-multiplied sum: every input scaled by its rank's scalar (zcc_reduce_scale), then summed. */
static void ref_premul(zccDataType_t t, int n, const unsigned char *const *in, unsigned char *out,
                       size_t count) {
  size_t b = count * esize(t);
  unsigned char *tmp = malloc((size_t)n * b + 1);
  const unsigned char *sc[MAX_RANKS];
  if (!tmp)
    die("out of host memory");
  for (int j = 0; j < n; j++) {
    unsigned char s[8];
    premul_scalar(t, j, s);
    zcc_reduce_scale(tmp + (size_t)j * b, in[j], count, t, s);
    sc[j] = tmp + (size_t)j * b;
  }
  ref_reduce(t, zccSum, n, sc, out, count);
  free(tmp);
}

/* ---- collectives ---- */

const char *const coll_names[C_NUM] = {"allreduce",     "broadcast",      "reduce",
                                       "allgather",     "reducescatter",  "alltoall",
                                       "sendrecv_ring", "sendrecv_pairs", "sendrecv_mix"};

void *premul_dev[MAX_RANKS];

/*
 * Rank r's pre-multiplied sum scalar, as the type's bits: floats 1.5, -0.5,
 * 2, -1 by r % 4 (with opt.order_free, where the ring reduces in ring order,
 * 1, -1, -1, 1: exact in any order on order-free inputs); integers 3, -1, 5,
 * 7 (wrapping products and sums are exact in any order).
 */
void premul_scalar(zccDataType_t t, int r, unsigned char out[8]) {
  static const double fv[4] = {1.5, -0.5, 2.0, -1.0}, fo[4] = {1.0, -1.0, -1.0, 1.0};
  static const uint16_t h16[2][4] = {{0x3E00, 0xB800, 0x4000, 0xBC00}, {0x3C00, 0xBC00, 0xBC00, 0x3C00}};
  static const uint16_t b16[2][4] = {{0x3FC0, 0xBF00, 0x4000, 0xBF80}, {0x3F80, 0xBF80, 0xBF80, 0x3F80}};
  static const uint8_t e4[2][4] = {{0x3C, 0xB0, 0x40, 0xB8}, {0x38, 0xB8, 0xB8, 0x38}};
  static const uint8_t e5[2][4] = {{0x3E, 0xB8, 0x40, 0xBC}, {0x3C, 0xBC, 0xBC, 0x3C}};
  static const int64_t iv[4] = {3, -1, 5, 7};
  int o = opt.order_free != 0, i = r % 4;
  memset(out, 0, 8);
  switch (t) {
  case zccFloat32: {
    float f = (float)(o ? fo[i] : fv[i]);
    memcpy(out, &f, 4);
    break;
  }
  case zccFloat64: {
    double d = o ? fo[i] : fv[i];
    memcpy(out, &d, 8);
    break;
  }
  case zccFloat16: memcpy(out, &h16[o][i], 2); break;
  case zccBfloat16: memcpy(out, &b16[o][i], 2); break;
  case zccFloat8e4m3: out[0] = e4[o][i]; break;
  case zccFloat8e5m2: out[0] = e5[o][i]; break;
  default: memcpy(out, &iv[i], esize(t)); break; /* little endian: the low bytes */
  }
}

/* The device scalars of this process's ranks for c (before the call or its capture). */
void premul_prepare(world_t *w, const call_t *c) {
  if (c->premul != PREMUL_DEVICE)
    return;
  for (int i = 0; i < w->nlocal; i++) {
    unsigned char sc[8];
    premul_scalar(c->type, w->rk[i].rank, sc);
    setdev(w, i);
    CK(cudaMemcpy(premul_dev[w->rk[i].rank], sc, esize(c->type), cudaMemcpyHostToDevice));
  }
}

int is_reducing(coll_t c) {
  return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCESCATTER;
}
int is_rooted(coll_t c) {
  return c == C_BROADCAST || c == C_REDUCE;
}

/* Elements of sendbuff and recvbuff for a call of `count` (the API's unit). */
size_t send_elems(coll_t c, size_t count, int n) {
  return c == C_REDUCESCATTER || c == C_ALLTOALL || c == C_PAIRS || c == C_MIX ? (size_t)n * count
                                                                                : count;
}
size_t recv_elems(coll_t c, size_t count, int n) {
  return c == C_ALLGATHER || c == C_ALLTOALL || c == C_PAIRS || c == C_MIX ? (size_t)n * count
                                                                            : count;
}

/*
 * "mix": one group per rank r with a send and a receive of block r to and
 * from itself, and with every peer j block j both ways in two ops each (the
 * first count/2 elements, then the rest: the second starts unaligned), in
 * the order receive 1, send 1, send 2, receive 2. The result is alltoall's.
 */
static zccResult_t call_mix(const call_t *c, zccComm_t comm, int r, int n, const void *sp,
                            void *rp, cudaStream_t s) {
  zccResult_t res = zccSuccess, q;
  size_t es = esize(c->type), b = c->count * es, h = c->count / 2, hb = h * es;
  const char *in = sp;
  char *out = rp;
#define MIX_OP(call)                                                                               \
  do {                                                                                             \
    if ((q = (call)) != zccSuccess && res == zccSuccess)                                           \
      res = q;                                                                                     \
  } while (0)
  MIX_OP(zccSend(in + (size_t)r * b, c->count, c->type, r, comm, s));
  MIX_OP(zccRecv(out + (size_t)r * b, c->count, c->type, r, comm, s));
  for (int d = 1; d < n; d++) {
    int j = (r + d) % n;
    MIX_OP(zccRecv(out + (size_t)j * b, h, c->type, j, comm, s));
    MIX_OP(zccSend(in + (size_t)j * b, h, c->type, j, comm, s));
    MIX_OP(zccSend(in + (size_t)j * b + hb, c->count - h, c->type, j, comm, s));
    MIX_OP(zccRecv(out + (size_t)j * b + hb, c->count - h, c->type, j, comm, s));
  }
#undef MIX_OP
  return res;
}

/* A reduce or reducescatter with rank r's pre-multiplied sum (made and destroyed around it). */
static zccResult_t call_premul(const call_t *c, zccComm_t comm, int r, const void *sp, void *rp,
                               cudaStream_t s) {
  unsigned char sc[8];
  zccRedOp_t op;
  premul_scalar(c->type, r, sc);
  int dev = c->premul == PREMUL_DEVICE;
  zccResult_t res = zccRedOpCreatePreMulSum(&op, dev ? premul_dev[r] : (void *)sc, c->type,
                                            dev ? zccScalarDevice : zccScalarHostImmediate, comm);
  if (res != zccSuccess)
    return res;
  if (c->coll == C_REDUCE)
    res = zccReduce(sp, rp, c->count, c->type, op, c->root, comm, s);
  else
    res = zccReduceScatter(sp, rp, c->count, c->type, op, comm, s);
  zccResult_t res2 = zccRedOpDestroy(op, comm);
  return res != zccSuccess ? res : res2;
}

/*
 * One rank's call. Send/recv: the ring sends to rank+1 and receives from
 * rank-1; "pairs" exchanges block j with every rank j != rank, both
 * directions at once; "mix" see call_mix. grouped: already inside the
 * caller's group.
 */
static zccResult_t call_rank(const call_t *c, zccComm_t comm, int r, int n, const void *sp,
                             void *rp, cudaStream_t s, int grouped) {
  zccResult_t res = zccSuccess, res2;
  size_t b = c->count * esize(c->type);
  if (c->premul && (c->coll == C_REDUCE || c->coll == C_REDUCESCATTER))
    return call_premul(c, comm, r, sp, rp, s);
  switch (c->coll) {
  case C_ALLREDUCE: return zccAllReduce(sp, rp, c->count, c->type, c->op, comm, s);
  case C_BROADCAST: return zccBroadcast(sp, rp, c->count, c->type, c->root, comm, s);
  case C_REDUCE: return zccReduce(sp, rp, c->count, c->type, c->op, c->root, comm, s);
  case C_ALLGATHER: return zccAllGather(sp, rp, c->count, c->type, comm, s);
  case C_REDUCESCATTER: return zccReduceScatter(sp, rp, c->count, c->type, c->op, comm, s);
  case C_ALLTOALL: return zccAlltoAll(sp, rp, c->count, c->type, comm, s);
  case C_RING:
  case C_PAIRS:
  case C_MIX:
    if (!grouped && (res = zccGroupStart()) != zccSuccess)
      return res;
    if (c->coll == C_MIX) {
      res = call_mix(c, comm, r, n, sp, rp, s);
    } else if (c->coll == C_RING && c->bad_peer == BAD_PIECES) {
      size_t es = esize(c->type), per = c->count / BAD_PIECES_N;
      for (int k = 0; k < BAD_PIECES_N && res == zccSuccess; k++) {
        size_t off = (size_t)k * per, cnt = k < BAD_PIECES_N - 1 ? per : c->count - off;
        res = zccSend((const char *)sp + off * es, cnt, c->type, (r + 1) % n, comm, s);
        res2 = zccRecv((char *)rp + off * es, cnt, c->type, (r + n - 1) % n, comm, s);
        if (res == zccSuccess)
          res = res2;
      }
    } else if (c->coll == C_RING) {
      res = zccSend(sp, c->count, c->type, c->bad_peer ? n : (r + 1) % n, comm, s);
      res2 = zccRecv(rp, c->count, c->type, c->bad_peer ? -1 : (r + n - 1) % n, comm, s);
      if (res == zccSuccess)
        res = res2;
    } else {
      for (int j = 0; j < n; j++)
        if (j != r &&
            (res2 = zccSend((const char *)sp + (size_t)j * b, c->count, c->type, j, comm, s)) !=
                zccSuccess &&
            res == zccSuccess)
          res = res2;
      for (int j = 0; j < n; j++)
        if (j != r &&
            (res2 = zccRecv((char *)rp + (size_t)j * b, c->count, c->type, j, comm, s)) !=
                zccSuccess &&
            res == zccSuccess)
          res = res2;
    }
    if (!grouped && (res2 = zccGroupEnd()) != zccSuccess && res == zccSuccess)
      res = res2;
    return res;
  default: return zccInternalError;
  }
}

/*
 * The recvbuff rank r must hold afterwards (recv_elems elements), from every
 * rank's input ins[j]: a reduce non-root's is untouched (its own input when
 * in place, else the poison), as is a pairs rank's own block.
 */
void expect_out(const call_t *c, int inplace, int n, int r, const unsigned char *const *ins,
                unsigned char poison, unsigned char *out) {
  size_t cnt = c->count, b = cnt * esize(c->type);
  const unsigned char *blk[MAX_RANKS];
  switch (c->coll) {
  case C_ALLREDUCE: ref_reduce(c->type, c->op, n, ins, out, cnt); break;
  case C_BROADCAST: memcpy(out, ins[c->root], b); break;
  case C_REDUCE:
    if (r == c->root && c->premul)
      ref_premul(c->type, n, ins, out, cnt);
    else if (r == c->root)
      ref_reduce(c->type, c->op, n, ins, out, cnt);
    else if (inplace)
      memcpy(out, ins[r], b);
    else
      memset(out, poison, b);
    break;
  case C_ALLGATHER:
    for (int j = 0; j < n; j++)
      memcpy(out + (size_t)j * b, ins[j], b);
    break;
  case C_REDUCESCATTER:
    for (int j = 0; j < n; j++)
      blk[j] = ins[j] + (size_t)r * b;
    if (c->premul)
      ref_premul(c->type, n, blk, out, cnt);
    else
      ref_reduce(c->type, c->op, n, blk, out, cnt);
    break;
  case C_ALLTOALL:
  case C_PAIRS:
  case C_MIX:
    for (int j = 0; j < n; j++) {
      if (c->coll == C_PAIRS && j == r)
        memset(out + (size_t)j * b, poison, b);
      else
        memcpy(out + (size_t)j * b, ins[j] + (size_t)r * b, b);
    }
    break;
  case C_RING: memcpy(out, ins[(r + n - 1) % n], b); break;
  default: break;
  }
}

/* ---- a world: the ranks this process drives ---- */

unsigned char *slot(world_t *w, int r) {
  return w->slots + (size_t)r * w->slot_bytes;
}

void setdev(world_t *w, int i) {
  if (!w->procs)
    CK(cudaSetDevice(w->rk[i].dev));
}

static int pbar_wait(pbar_t *b, int n, double limit_s) {
  unsigned g = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == (unsigned)n) {
    __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&b->gen, 1, __ATOMIC_RELEASE);
    return 0;
  }
  double t0 = now_s();
  for (int spin = 0; __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g; spin++) {
    if (spin < 2000)
      continue;
    sleep_s(20e-6);
    if (now_s() - t0 > limit_s)
      return -1;
  }
  return 0;
}

/* Every rank process meets here (nothing to do in the threads layout). */
void sync_all(world_t *w, const char *what) {
  if (w->procs && pbar_wait(&w->sh->bar, w->n, opt.barrier_s) != 0)
    die("%s: the other rank processes did not reach the test's barrier within %.0f s; "
        "giving up",
        what, opt.barrier_s);
}

/* Whether ok holds in every rank process. */
int agree(world_t *w, int ok, const char *what) {
  if (!w->procs)
    return ok;
  atomic_store(&w->sh->flag[w->rk[0].rank], ok);
  sync_all(w, what);
  int all = 1;
  for (int j = 0; j < w->n; j++)
    all &= atomic_load(&w->sh->flag[j]) != 0;
  sync_all(w, what);
  return all;
}

/* The next unique id, from the runner (procs layout). */
static int get_id(world_t *w, zccUniqueId *id) {
  shared_t *sh = w->sh;
  int k = w->ids_used++;
  int cur = atomic_load(&sh->id_req);
  while (cur < k + 1 && !atomic_compare_exchange_weak(&sh->id_req, &cur, k + 1))
    ;
  double t0 = now_s();
  while (atomic_load(&sh->id_ready) <= k) {
    if (now_s() - t0 > 60) {
      fail("no unique id #%d from the runner within 60 s", k);
      return -1;
    }
    sleep_s(200e-6);
  }
  if (atomic_load(&sh->id_failed) || k >= MAX_IDS)
    return -1;
  *id = sh->ids[k];
  return 0;
}

/*
 * Communicators for every local rank: zccCommInitAll (threads), or a fresh
 * id and zccCommInitRank (cuda_cfg: zccCommInitRankConfig with deviceType
 * cuda and timeout_ms if nonzero; cuda_cfg 2: non-blocking, polled with
 * zccCommGetAsyncError until ready). Checks count, rank and device.
 */
int comms_init(world_t *w, zccComm_t *comms, int cuda_cfg, int timeout_ms, const char *what) {
  zccResult_t rc;
  memset(comms, 0, sizeof(*comms) * (size_t)w->nlocal);
  if (!w->procs) {
    int devlist[MAX_RANKS];
    for (int i = 0; i < w->n; i++)
      devlist[i] = w->rk[i].dev;
    rc = zccCommInitAll(comms, w->n, devlist);
    if (rc != zccSuccess) {
      fail("%s: zccCommInitAll(%d GPUs): %s: %s", what, w->n, rc_name(rc), last_err(NULL));
      memset(comms, 0, sizeof(*comms) * (size_t)w->nlocal);
      return -1;
    }
  } else {
    zccUniqueId id;
    if (get_id(w, &id) != 0)
      return -1;
    if (cuda_cfg) {
      zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
      cfg.deviceType = zccDeviceCuda;
      if (timeout_ms)
        cfg.timeoutMs = timeout_ms;
      if (cuda_cfg == 2)
        cfg.blocking = 0;
      rc = zccCommInitRankConfig(&comms[0], w->n, id, w->rk[0].rank, &cfg);
      if (cuda_cfg == 2) {
        /* non-blocking: zccInProgress and the handle, then the state says */
        CHECK(rc == zccInProgress && comms[0] != NULL,
              "%s: non-blocking zccCommInitRankConfig returned %s (comm %p), expected "
              "zccInProgress and a handle", what, rc_name(rc), (void *)comms[0]);
        double t0 = now_s();
        zccResult_t st = zccInProgress;
        while (rc == zccInProgress && comms[0] && st == zccInProgress && now_s() - t0 < 120) {
          zccResult_t q = zccCommGetAsyncError(comms[0], &st);
          if (q != zccSuccess)
            st = q;
          else if (st == zccInProgress)
            usleep(1000);
        }
        if (rc == zccInProgress) {
          if (st != zccSuccess && comms[0]) {
            zccCommDestroy(comms[0]);
            comms[0] = NULL;
          }
          rc = st;
        }
      }
    } else {
      rc = zccCommInitRank(&comms[0], w->n, id, w->rk[0].rank);
    }
    if (rc != zccSuccess) {
      fail("%s: zccCommInitRank%s(nranks %d, rank %d, GPU %d): %s: %s", what,
           cuda_cfg ? "Config" : "", w->n, w->rk[0].rank, w->rk[0].dev, rc_name(rc),
           last_err(NULL));
      comms[0] = NULL;
      return -1;
    }
  }
  for (int i = 0; i < w->nlocal; i++) {
    int cnt = -1, rank = -1, dev = -2;
    zccResult_t r1 = zccCommCount(comms[i], &cnt), r2 = zccCommUserRank(comms[i], &rank),
                r3 = zccCommCuDevice(comms[i], &dev);
    CHECK(r1 == zccSuccess && r2 == zccSuccess && r3 == zccSuccess && cnt == w->n &&
              rank == w->rk[i].rank && dev == w->rk[i].dev,
          "%s: communicator of rank %d: count %d (%s), user rank %d (%s), CUDA device %d (%s);"
          " expected %d, %d, %d (a GPU communicator)",
          what, w->rk[i].rank, cnt, rc_name(r1), rank, rc_name(r2), dev, rc_name(r3), w->n,
          w->rk[i].rank, w->rk[i].dev);
  }
  return 0;
}

/* Destroy (or abort) every local communicator, in this thread, as NCCL's users do. */
void comms_free(world_t *w, zccComm_t *comms, int abort_them, const char *what) {
  for (int i = 0; i < w->nlocal; i++) {
    if (!comms[i])
      continue;
    watch(opt.step_s, "%s: %s of rank %d", what, abort_them ? "zccCommAbort" : "zccCommDestroy",
          w->rk[i].rank);
    zccResult_t rc = abort_them ? zccCommAbort(comms[i]) : zccCommDestroy(comms[i]);
    CHECK(rc == zccSuccess, "%s: %s(rank %d): %s: %s", what,
          abort_them ? "zccCommAbort" : "zccCommDestroy", w->rk[i].rank, rc_name(rc),
          last_err(NULL));
    comms[i] = NULL;
  }
}

typedef struct {
  zccComm_t comm;
  int dev, rank, dereg;
  void *buf;
  size_t size;
  void *handle;
  zccResult_t rc;
  char err[256];
} regjob_t;

static void *reg_main(void *p) {
  regjob_t *j = p;
  if (cudaSetDevice(j->dev) != cudaSuccess) {
    j->rc = zccUnhandledCudaError;
    snprintf(j->err, sizeof(j->err), "cudaSetDevice(%d) failed", j->dev);
    return NULL;
  }
  j->rc = j->dereg ? zccCommDeregister(j->comm, j->handle)
                   : zccCommRegister(j->comm, j->buf, j->size, &j->handle);
  snprintf(j->err, sizeof(j->err), "%s", last_err(j->comm));
  return NULL;
}

/*
 * zccCommRegister (or Deregister) of one buffer per local rank. It is
 * collective, so in the threads layout each rank's call runs in a thread of
 * its own. Returns 1 when every local call succeeded.
 */
int reg_local(world_t *w, zccComm_t *comms, void **bufs, size_t size, void **handles, int dereg,
              const char *what) {
  regjob_t jobs[MAX_RANKS];
  pthread_t th[MAX_RANKS];
  int ok = 1;
  watch(opt.step_s, "%s: zccComm%sregister", what, dereg ? "De" : "");
  for (int i = 0; i < w->nlocal; i++) {
    memset(&jobs[i], 0, sizeof(jobs[i]));
    jobs[i].comm = comms[i];
    jobs[i].dev = w->rk[i].dev;
    jobs[i].rank = w->rk[i].rank;
    jobs[i].dereg = dereg;
    jobs[i].buf = bufs ? bufs[i] : NULL;
    jobs[i].size = size;
    jobs[i].handle = dereg ? handles[i] : NULL;
  }
  if (w->nlocal == 1) {
    reg_main(&jobs[0]);
  } else {
    for (int i = 0; i < w->nlocal; i++)
      if (pthread_create(&th[i], NULL, reg_main, &jobs[i]) != 0)
        die("%s: pthread_create failed", what);
    for (int i = 0; i < w->nlocal; i++)
      pthread_join(th[i], NULL);
  }
  for (int i = 0; i < w->nlocal; i++) {
    CHECK(jobs[i].rc == zccSuccess && (dereg || jobs[i].handle),
          "%s: zccComm%sregister(rank %d, %p, %zu bytes): %s, handle %p: %s", what,
          dereg ? "De" : "", jobs[i].rank, jobs[i].buf, size, rc_name(jobs[i].rc), jobs[i].handle,
          jobs[i].err);
    if (jobs[i].rc != zccSuccess)
      ok = 0;
    else if (!dereg)
      handles[i] = jobs[i].handle;
  }
  return ok;
}

/*
 * Every local rank's call; in the threads layout inside one group. Each
 * rank's result (the call's, or zccGroupEnd's when the call succeeded) lands
 * in rk[i].rc.
 */
void call_all(world_t *w, zccComm_t *comms, const call_t *c, const void *const *sps,
              void *const *rps, int null_stream) {
  int grouped = !w->procs;
  zccResult_t gs = grouped ? zccGroupStart() : zccSuccess;
  for (int i = 0; i < w->nlocal; i++) {
    rank_t *x = &w->rk[i];
    x->rc = gs != zccSuccess ? gs
                             : call_rank(c, comms[i], x->rank, w->n, sps[i], rps[i],
                                         null_stream ? NULL : x->stream, grouped);
  }
  if (grouped && gs == zccSuccess) {
    zccResult_t ge = zccGroupEnd();
    for (int i = 0; i < w->nlocal; i++)
      if (w->rk[i].rc == zccSuccess)
        w->rk[i].rc = ge;
  }
}

/* Wait for a stream with a limit; a stream that never finishes ends the process. */
cudaError_t wait_stream(cudaStream_t s, double limit_s, const char *what) {
  double t0 = now_s();
  cudaError_t e;
  for (int spin = 0; (e = cudaStreamQuery(s)) == cudaErrorNotReady; spin++) {
    if (spin < 100)
      continue;
    if (now_s() - t0 > limit_s)
      die("%s: the stream has not finished after %.0f s (a hang: nothing after this can run)", what,
          limit_s);
    sleep_s(20e-6);
  }
  if (e != cudaSuccess)
    (void)cudaGetLastError(); /* clear a non-sticky error */
  return e;
}

void wait_local(world_t *w, int null_stream, const char *what) {
  for (int i = 0; i < w->nlocal; i++) {
    setdev(w, i);
    w->rk[i].werr = wait_stream(null_stream ? NULL : w->rk[i].stream, opt.wait_s, what);
  }
}

/* ---- a world's buffers ---- */

void world_alloc(world_t *w, int set1) {
  for (int i = 0; i < w->nlocal; i++) {
    rank_t *x = &w->rk[i];
    setdev(w, i);
    CK(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&x->dsend[0], w->priv));
    CK(cudaMalloc((void **)&x->drecv[0], w->priv));
    CK(cudaMalloc(&premul_dev[x->rank], 16));
    if (set1) {
      zccResult_t r1 = zccMemAlloc((void **)&x->dsend[1], w->priv);
      zccResult_t r2 = r1 == zccSuccess ? zccMemAlloc((void **)&x->drecv[1], w->priv) : r1;
      CHECK(r2 == zccSuccess,
            "%s: zccMemAlloc(%zu) on GPU %d: %s: %s (the registered cases "
            "use cudaMalloc memory)",
            w->name, w->priv, x->dev, rc_name(r2), last_err(NULL));
      if (r2 == zccSuccess) {
        x->set1_zcc = 1;
      } else {
        if (r1 == zccSuccess)
          zccMemFree(x->dsend[1]);
        CK(cudaMalloc((void **)&x->dsend[1], w->priv));
        CK(cudaMalloc((void **)&x->drecv[1], w->priv));
      }
    }
    x->hout = malloc(w->priv);
    x->hsend = malloc(w->priv);
    x->hexp = malloc(w->priv);
    if (!x->hout || !x->hsend || !x->hexp)
      die("out of host memory for %zu-byte buffers", w->priv);
  }
}

void world_free_set1(world_t *w) {
  for (int i = 0; i < w->nlocal; i++) {
    rank_t *x = &w->rk[i];
    if (!x->dsend[1])
      continue;
    setdev(w, i);
    if (x->set1_zcc) {
      zccResult_t r1 = zccMemFree(x->dsend[1]), r2 = zccMemFree(x->drecv[1]);
      CHECK(r1 == zccSuccess && r2 == zccSuccess, "%s: zccMemFree: %s, %s: %s", w->name,
            rc_name(r1), rc_name(r2), last_err(NULL));
    } else {
      CK(cudaFree(x->dsend[1]));
      CK(cudaFree(x->drecv[1]));
    }
    x->dsend[1] = x->drecv[1] = NULL;
  }
}

void world_free(world_t *w) {
  world_free_set1(w);
  for (int i = 0; i < w->nlocal; i++) {
    rank_t *x = &w->rk[i];
    setdev(w, i);
    CK(cudaFree(x->dsend[0]));
    CK(cudaFree(x->drecv[0]));
    CK(cudaFree(premul_dev[x->rank]));
    premul_dev[x->rank] = NULL;
    CK(cudaStreamDestroy(x->stream));
    free(x->hout);
    free(x->hsend);
    free(x->hexp);
  }
}

/* ---- processes ---- */

void *shared_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    printf("test_gpu_colls: mmap of %zu shared bytes failed: %s\n", bytes, strerror(errno));
    exit(2);
  }
  return p;
}

/* Fork fn into a child and wait for it (with a limit); a bad end counts as a failure. */
void run_child(const char *what, void (*fn)(int), int arg, double limit_s) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fail("%s: fork failed: %s", what, strerror(errno));
    return;
  }
  if (pid == 0) {
    fn(arg);
    fflush(NULL);
    _exit(0);
  }
  double t0 = now_s();
  int st = 0;
  for (;;) {
    pid_t p = waitpid(pid, &st, WNOHANG);
    if (p == pid)
      break;
    if (p < 0 && errno != EINTR) {
      fail("%s: waitpid: %s", what, strerror(errno));
      return;
    }
    if (now_s() - t0 > limit_s) {
      fail("%s: still running after %.0f s: killed", what, limit_s);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return;
    }
    sleep_s(0.01);
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
    fail("%s: exited with status %d%s", what, WEXITSTATUS(st),
         WEXITSTATUS(st) == 3 ? " (watchdog)" : "");
  else if (WIFSIGNALED(st))
    fail("%s: killed by signal %d (%s)", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
}

/*
 * In a child, so that this process never initialises CUDA: the device
 * count, and peer access among the first `want` devices.
 */
void probe(probe_t *out, int want) {
  int fds[2];
  memset(out, 0, sizeof(*out));
  if (pipe(fds) != 0) {
    snprintf(out->msg, sizeof(out->msg), "pipe: %s", strerror(errno));
    out->err = -1;
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    probe_t m;
    memset(&m, 0, sizeof(m));
    close(fds[0]);
    cudaError_t e = cudaGetDeviceCount(&m.count);
    m.err = (int)e;
    m.peer_ok = 1;
    if (e != cudaSuccess) {
      snprintf(m.msg, sizeof(m.msg), "cudaGetDeviceCount: %s: %s", cudaGetErrorName(e),
               cudaGetErrorString(e));
      m.count = 0;
    } else {
      int lim = want > 0 && want < m.count ? want : m.count;
      if (lim > MAX_RANKS)
        lim = MAX_RANKS;
      for (int a = 0; a < lim && m.peer_ok; a++)
        for (int b = 0; b < lim && m.peer_ok; b++) {
          int can = 0;
          if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can)) {
            m.peer_ok = 0;
            snprintf(m.msg, sizeof(m.msg), "GPU %d cannot access GPU %d's memory (no peer access)",
                     a, b);
          }
        }
    }
    ssize_t wr = write(fds[1], &m, sizeof(m));
    (void)wr;
    _exit(0);
  }
  close(fds[1]);
  ssize_t got = pid > 0 ? read(fds[0], out, sizeof(*out)) : -1;
  close(fds[0]);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  if (got != (ssize_t)sizeof(*out)) {
    memset(out, 0, sizeof(*out));
    out->err = -1;
    snprintf(out->msg, sizeof(out->msg), "the CUDA probe process failed");
  }
}

/* ---- command line ---- */

void usage(void) {
  printf(
      "usage: test_gpu_colls [--layout threads|procs|both] [--ngpus N | --ranks N] [--quick]\n"
      "                      [--full] (--ranks N: N ranks on the GPUs there are, round-robin)\n"
      "                      [--premul-only] (the matrix's pre-multiplied sum cases only)\n"
      "                      [--only matrix,graphs,errors,lifetime,abort,deadpeer,stamps,stuck]\n"
      "                      [--coll NAME,...] [--type NAME] [--replays N]\n"
      "                      [--mismatch-rounds N] (the mismatch part N times; 1)\n"
      "                      [--capture global|thread|relaxed] [--seed N]\n"
      "                      [--netns NS:IFNAME,...] (procs: rank r in namespace r %% count)\n"
      "collectives: allreduce broadcast reduce allgather reducescatter alltoall sendrecv_ring\n"
      "             sendrecv_pairs sendrecv_mix; types: int8 uint8 int32 uint32 int64 uint64 float16 float32\n"
      "             float64 bfloat16 float8e4m3 float8e5m2. ZCC_TEST_SEED=N as --seed.\n");
}

int parse_args(int argc, char **argv) {
  opt.threads = opt.procs = 1;
  opt.parts = PART_ALL;
  opt.only_colls = 0;
  opt.only_type = -1;
  opt.replays = 1000;
  opt.mismatch_rounds = 1;
  opt.capture = cudaStreamCaptureModeGlobal;
  const char *s = getenv("ZCC_TEST_SEED");
  opt.seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quick") == 0) {
      opt.quick = 1;
    } else if (strcmp(a, "--premul-only") == 0) {
      opt.premul_only = 1;
    } else if (strcmp(a, "--full") == 0) {
      opt.full = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage();
      exit(0);
    } else if (!v) {
      printf("test_gpu_colls: %s needs a value (or is unknown)\n", a);
      return -1;
    } else if (strcmp(a, "--layout") == 0) {
      opt.threads = strcmp(v, "threads") == 0 || strcmp(v, "both") == 0;
      opt.procs = strcmp(v, "procs") == 0 || strcmp(v, "both") == 0;
      if (!opt.threads && !opt.procs) {
        printf("test_gpu_colls: --layout %s: expected threads, procs or both\n", v);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--ngpus") == 0) {
      opt.ngpus = atoi(v);
      if (opt.ngpus < 2 || opt.ngpus > MAX_RANKS) {
        printf("test_gpu_colls: --ngpus %s: expected 2 .. %d\n", v, MAX_RANKS);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--ranks") == 0) {
      opt.ngpus = atoi(v);
      opt.share = 1;
      if (opt.ngpus < 2 || opt.ngpus > MAX_RANKS) {
        printf("test_gpu_colls: --ranks %s: expected 2 .. %d\n", v, MAX_RANKS);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--netns") == 0) {
      char buf[512];
      snprintf(buf, sizeof(buf), "%s", v);
      opt.nnetns = 0;
      for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(p, ':');
        if (!colon || opt.nnetns == MAX_RANKS || strlen(p) >= 64 || strlen(colon + 1) >= 32) {
          printf("test_gpu_colls: --netns %s: expected NAME:IFNAME,... (at most %d)\n", v,
                 MAX_RANKS);
          return -1;
        }
        *colon = '\0';
        snprintf(opt.netns[opt.nnetns], sizeof(opt.netns[0]), "%s", p);
        snprintf(opt.netif[opt.nnetns], sizeof(opt.netif[0]), "%s", colon + 1);
        opt.nnetns++;
      }
      i++;
    } else if (strcmp(a, "--replays") == 0) {
      opt.replays = atoi(v);
      if (opt.replays < 1) {
        printf("test_gpu_colls: --replays %s: expected at least 1\n", v);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--mismatch-rounds") == 0) {
      opt.mismatch_rounds = atoi(v);
      if (opt.mismatch_rounds < 1) {
        printf("test_gpu_colls: --mismatch-rounds %s: expected at least 1\n", v);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--seed") == 0) {
      opt.seed = strtoull(v, NULL, 0);
      i++;
    } else if (strcmp(a, "--capture") == 0) {
      if (strcmp(v, "global") == 0)
        opt.capture = cudaStreamCaptureModeGlobal;
      else if (strcmp(v, "thread") == 0)
        opt.capture = cudaStreamCaptureModeThreadLocal;
      else if (strcmp(v, "relaxed") == 0)
        opt.capture = cudaStreamCaptureModeRelaxed;
      else {
        printf("test_gpu_colls: --capture %s: expected global, thread or relaxed\n", v);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--coll") == 0) {
      char buf[256];
      snprintf(buf, sizeof(buf), "%s", v);
      for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int c = 0; c < C_NUM; c++)
          if (strcmp(p, coll_names[c]) == 0) {
            opt.only_colls |= 1u << c;
            found = 1;
          }
        if (!found) {
          printf("test_gpu_colls: --coll %s: not a collective's name\n", p);
          return -1;
        }
      }
      i++;
    } else if (strcmp(a, "--type") == 0) {
      for (int t = 0; t < zccNumTypes; t++)
        if (strcmp(v, zcc_type_name((zccDataType_t)t)) == 0)
          opt.only_type = t;
      if (opt.only_type < 0) {
        printf("test_gpu_colls: --type %s: not a datatype's name\n", v);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--only") == 0) {
      char buf[256];
      opt.parts = 0;
      snprintf(buf, sizeof(buf), "%s", v);
      for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int k = 0; k < (int)(sizeof(part_names) / sizeof(part_names[0])); k++)
          if (strcmp(p, part_names[k]) == 0) {
            opt.parts |= 1 << k;
            found = 1;
          }
        if (!found) {
          printf("test_gpu_colls: --only %s: unknown part\n", p);
          return -1;
        }
      }
      i++;
    } else {
      printf("test_gpu_colls: unknown option %s\n", a);
      return -1;
    }
  }
  return 0;
}
