/*
 * Every collective x datatype x op x size x in-place/out-of-place x 1..8
 * ranks on host communicators, each result checked bitwise against a
 * reference the test computes itself (ztest_types.c).
 *
 * One set of forked processes per rank count loops over the whole matrix.
 * The ranks share, outside zcc, a memory region where each writes its inputs
 * and where the reference of the reductions is computed cooperatively, so
 * that checking costs O(count) per rank at any rank count.
 *
 * Environment:
 *   ZCC_TEST_SEED=N      reproduce a run (the seed is printed)
 *   ZCC_TEST_QUICK=1     (or --quick) no 64 MiB cases, no 1 MiB+3 size except
 *                        at 2 ranks: for sanitizer builds
 *   ZCC_TEST_NRANKS=1,4  only these rank counts
 *   ZCC_TEST_COLL=name   only this collective (allreduce, broadcast, reduce,
 *                        allgather, reducescatter, alltoall, sendrecv_ring,
 *                        sendrecv_allpairs)
 *   ZCC_TEST_TYPE=name   only this datatype (int8 ... fp8e5m2)
 *   ZCC_TEST_MAXCOUNT=N  only the sizes of at most N elements (no 64 MiB cases)
 *   ZCC_TEST_FULL=1      every root at every size (by default the 1 MiB+3
 *                        and 64 MiB sizes run one root per case, rotating)
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ztest.h"
#include "ztest_types.h"
#include "zcc.h"

typedef enum {
  C_ALLREDUCE,
  C_BROADCAST,
  C_REDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_ALLTOALL,
  C_RING,
  C_ALLPAIRS,
  C_NUM
} coll_t;

static const char *coll_names[C_NUM] = {
    "allreduce", "broadcast", "reduce",        "allgather",
    "reducescatter", "alltoall", "sendrecv_ring", "sendrecv_allpairs"};

#define GUARD 64
#define MIB (1024ull * 1024)
#define BIG_BYTES (64 * MIB)
#define MAX_DETAIL 30

typedef struct {
  long index;
  coll_t coll;
  zccDataType_t type;
  zccRedOp_t op; /* ZT_OP_NONE for data movement */
  int root;
  size_t count; /* per-rank unit, as the zcc call takes it */
  int inplace;
  size_t soff, roff; /* byte offsets from a 64-byte aligned address */
  int big;           /* a 64 MiB case */
} case_t;

typedef struct {
  zt_barrier_t bar;
  atomic_int stop;
  int fail[ZT_MAX_RANKS];
  uint64_t hash[ZT_MAX_RANKS];
  double call_s[ZT_MAX_RANKS];
  long cases;
  double max_call_s;
  double sum_call_s; /* slowest rank's call time, summed over cases */
  char max_call_case[160];
} shared_hdr_t;

typedef struct {
  int nranks;
  int quick;
  int full;
  uint64_t seed;
  int only_coll;   /* -1: all */
  int only_type;   /* -1: all */
  size_t max_count; /* largest base size run */
  size_t slot;     /* bytes per input slot */
  size_t eslot;    /* bytes of the shared expected buffer */
  size_t priv;     /* bytes per private buffer (without guards) */
  size_t xbytes;   /* private reference buffer */
  double barrier_s;
  shared_hdr_t *hdr;
  char *slots; /* nranks input slots, then the expected slot */
  size_t shared_bytes;
} matrix_t;

static int is_reducing(coll_t c) {
  return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCESCATTER;
}

static int is_rooted(coll_t c) { return c == C_BROADCAST || c == C_REDUCE; }

static size_t send_elems(const case_t *k, int n) {
  switch (k->coll) {
  case C_REDUCESCATTER:
  case C_ALLTOALL:
  case C_ALLPAIRS:
    return (size_t)n * k->count;
  default:
    return k->count;
  }
}

static size_t recv_elems(const case_t *k, int n) {
  switch (k->coll) {
  case C_ALLGATHER:
  case C_ALLTOALL:
  case C_ALLPAIRS:
    return (size_t)n * k->count;
  default:
    return k->count;
  }
}

static const char *case_str(const case_t *k, int n, char *buf, size_t len) {
  char root[16] = "";
  if (is_rooted(k->coll))
    snprintf(root, sizeof(root), " root=%d", k->root);
  snprintf(buf, len,
           "#%ld %s nranks=%d type=%s op=%s count=%zu%s %s soff=%zu roff=%zu",
           k->index, coll_names[k->coll], n, zt_type_name(k->type),
           zt_op_name(k->op), k->count, root,
           k->inplace ? "in-place" : "out-of-place", k->soff, k->roff);
  return buf;
}

typedef int (*case_fn)(const case_t *k, matrix_t *m, void *ctx);

/* Walk the matrix in the same order on every rank; fn returns non-zero to stop. */
static long enumerate(matrix_t *m, case_fn fn, void *ctx) {
  static const size_t base_sizes[] = {0, 1, 7, 4097, MIB + 3};
  int n = m->nranks;
  long index = 0;
  for (int c = 0; c < C_NUM; c++) {
    if (m->only_coll >= 0 && c != m->only_coll)
      continue;
    for (int t = 0; t < zccNumTypes; t++) {
      if (m->only_type >= 0 && t != m->only_type)
        continue;
      int nops = is_reducing(c) ? zccNumOps : 1;
      for (int o = 0; o < nops; o++) {
        for (size_t s = 0; s < sizeof(base_sizes) / sizeof(base_sizes[0]); s++) {
          size_t count = base_sizes[s];
          int large = count > MIB;
          if (large && m->quick && n != 2)
            continue;
          if (count > m->max_count)
            continue;
          for (int inplace = 0; inplace < 2; inplace++) {
            /* in place, the ring's zccSend and zccRecv share one buffer */
            if (c == C_ALLPAIRS && inplace)
              continue;
            if (c == C_ALLPAIRS && n == 1)
              continue;
            int nroots = is_rooted(c) ? n : 1;
            for (int root = 0; root < nroots; root++) {
              case_t k;
              memset(&k, 0, sizeof(k));
              k.index = index++;
              if (large && !m->full && is_rooted(c) &&
                  root != (int)((unsigned)(t * 5 + o + inplace) % (unsigned)n))
                continue;
              k.coll = c;
              k.type = t;
              k.op = is_reducing(c) ? (zccRedOp_t)o : ZT_OP_NONE;
              k.root = root;
              k.count = count;
              k.inplace = inplace;
              uint64_t h = zt_mix(m->seed, (uint64_t)k.index, 0xa11a);
              size_t esz = zt_type_size(t);
              size_t choice[4] = {0, 0, esz, 1};
              k.soff = choice[h & 3];
              k.roff = choice[(h >> 8) & 3];
              if (fn(&k, m, ctx))
                return index;
            }
          }
        }
      }
    }
  }
  /* 64 MiB (in bytes) cases: float32 sum and bfloat16 max, at 2 and 8 ranks. */
  if (m->quick || (n != 2 && n != 8) || m->max_count < BIG_BYTES)
    return index;
  for (int c = 0; c < C_NUM; c++) {
    if (m->only_coll >= 0 && c != m->only_coll)
      continue;
    for (int v = 0; v < 2; v++) {
      zccDataType_t t = v == 0 ? zccFloat32 : zccBfloat16;
      if (m->only_type >= 0 && (int)t != m->only_type)
        continue;
      size_t esz = zt_type_size(t);
      for (int inplace = 0; inplace < 2; inplace++) {
        if (c == C_ALLPAIRS && inplace)
          continue;
        int nroots = is_rooted(c) ? n : 1;
        for (int root = 0; root < nroots; root++) {
          case_t k;
          memset(&k, 0, sizeof(k));
          k.index = index++;
          if (!m->full && is_rooted(c) && root != (v + inplace + 1) % n)
            continue;
          k.coll = c;
          k.type = t;
          k.op = is_reducing(c) ? (v == 0 ? zccSum : zccMax) : ZT_OP_NONE;
          k.root = root;
          k.inplace = inplace;
          k.big = 1;
          switch (c) {
          case C_ALLGATHER:
          case C_REDUCESCATTER:
          case C_ALLTOALL:
          case C_ALLPAIRS:
            k.count = BIG_BYTES / esz / (size_t)n;
            break;
          default:
            k.count = BIG_BYTES / esz;
            break;
          }
          uint64_t h = zt_mix(m->seed, (uint64_t)k.index, 0xa11a);
          size_t choice[4] = {0, 0, esz, 1};
          k.soff = choice[h & 3];
          k.roff = choice[(h >> 8) & 3];
          if (fn(&k, m, ctx))
            return index;
        }
      }
    }
  }
  return index;
}

typedef struct {
  size_t slot, eslot, xbytes;
  long cases;
} sizing_t;

static int size_case(const case_t *k, matrix_t *m, void *ctx) {
  sizing_t *s = ctx;
  size_t esz = zt_type_size(k->type);
  size_t sb = send_elems(k, m->nranks) * esz;
  size_t rb = recv_elems(k, m->nranks) * esz;
  size_t mx = sb > rb ? sb : rb;
  if (mx > s->slot)
    s->slot = mx;
  if ((k->coll == C_ALLREDUCE || k->coll == C_REDUCE) && rb > s->eslot)
    s->eslot = rb;
  if (k->coll == C_REDUCESCATTER && rb > s->xbytes)
    s->xbytes = rb;
  s->cases++;
  return 0;
}

/* ---- one rank ---- */

typedef struct {
  int rank;
  zccComm_t comm;
  char *sbase, *rbase, *x;
  int details;
} rank_ctx_t;

static char *in_slot(matrix_t *m, int r) { return m->slots + (size_t)r * m->slot; }
static char *exp_slot(matrix_t *m) { return m->slots + (size_t)m->nranks * m->slot; }

static void detail(rank_ctx_t *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void detail(rank_ctx_t *rc, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  if (rc->details++ >= MAX_DETAIL)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  zt_log("%s", line);
}

/* Compare count elements; report the first mismatch with the inputs there. */
static int check_block(rank_ctx_t *rc, matrix_t *m, const case_t *k,
                       const char *what, const void *got, const void *expected,
                       size_t count, size_t elem_base) {
  size_t first = 0;
  size_t bad = zt_compare(k->type, got, expected, count, &first);
  if (bad == 0)
    return 0;
  char cs[256], e[96], g[96], ins[512] = "";
  size_t pos = 0;
  if (is_reducing(k->coll)) {
    size_t idx = elem_base + first;
    for (int r = 0; r < m->nranks && pos < sizeof(ins) - 100; r++) {
      char v[96];
      pos += (size_t)snprintf(ins + pos, sizeof(ins) - pos, "%s%s",
                              r ? ", " : "; inputs there: ",
                              zt_elem_str(k->type, in_slot(m, r), idx, v,
                                          sizeof(v)));
    }
  }
  detail(rc, "%s: %s: %zu of %zu elements differ; first at element %zu: "
             "expected %s, got %s%s",
         case_str(k, m->nranks, cs, sizeof(cs)), what, bad, count, first,
         zt_elem_str(k->type, expected, first, e, sizeof(e)),
         zt_elem_str(k->type, got, first, g, sizeof(g)), ins);
  return 1;
}

static int check_poison(rank_ctx_t *rc, matrix_t *m, const case_t *k,
                        const char *what, const unsigned char *p, size_t bytes,
                        unsigned char poison) {
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != poison) {
      char cs[256];
      detail(rc, "%s: %s: byte %zu of %zu changed: expected poison 0x%02x, got 0x%02x",
             case_str(k, m->nranks, cs, sizeof(cs)), what, i, bytes, poison, p[i]);
      return 1;
    }
  return 0;
}

static zccResult_t issue(rank_ctx_t *rc, matrix_t *m, const case_t *k,
                         const void *sp, void *rp) {
  int n = m->nranks, r = rc->rank;
  size_t esz = zt_type_size(k->type);
  zccComm_t comm = rc->comm;
  zccResult_t res = zccSuccess, res2;
  switch (k->coll) {
  case C_ALLREDUCE:
    return zccAllReduce(sp, rp, k->count, k->type, k->op, comm, NULL);
  case C_BROADCAST:
    return zccBroadcast(sp, rp, k->count, k->type, k->root, comm, NULL);
  case C_REDUCE:
    return zccReduce(sp, rp, k->count, k->type, k->op, k->root, comm, NULL);
  case C_ALLGATHER:
    return zccAllGather(sp, rp, k->count, k->type, comm, NULL);
  case C_REDUCESCATTER:
    return zccReduceScatter(sp, rp, k->count, k->type, k->op, comm, NULL);
  case C_ALLTOALL:
    return zccAlltoAll(sp, rp, k->count, k->type, comm, NULL);
  case C_RING:
    res = zccGroupStart();
    if (res != zccSuccess)
      return res;
    res = zccSend(sp, k->count, k->type, (r + 1) % n, comm, NULL);
    if (res == zccSuccess)
      res = zccRecv(rp, k->count, k->type, (r + n - 1) % n, comm, NULL);
    res2 = zccGroupEnd();
    return res != zccSuccess ? res : res2;
  case C_ALLPAIRS:
    res = zccGroupStart();
    if (res != zccSuccess)
      return res;
    for (int j = 0; j < n && res == zccSuccess; j++)
      if (j != r)
        res = zccSend((const char *)sp + (size_t)j * k->count * esz, k->count,
                      k->type, j, comm, NULL);
    for (int j = 0; j < n && res == zccSuccess; j++)
      if (j != r)
        res = zccRecv((char *)rp + (size_t)j * k->count * esz, k->count,
                      k->type, j, comm, NULL);
    res2 = zccGroupEnd();
    return res != zccSuccess ? res : res2;
  default:
    return zccInternalError;
  }
}

static int run_case(const case_t *k, matrix_t *m, void *ctx) {
  rank_ctx_t *rc = ctx;
  shared_hdr_t *hdr = m->hdr;
  int n = m->nranks, r = rc->rank;
  size_t esz = zt_type_size(k->type);
  size_t c = k->count, ns = send_elems(k, n), nr = recv_elems(k, n);
  size_t sbytes = ns * esz, rbytes = nr * esz;
  size_t region = k->inplace ? (sbytes > rbytes ? sbytes : rbytes) : rbytes;
  unsigned char poison = (unsigned char)(0xa5 ^ ((uint64_t)k->index * 0x3b));
  char *in = in_slot(m, r);
  char *rdata = rc->rbase + GUARD + k->roff;
  char *sdata = rc->sbase + GUARD + k->soff;
  const void *sp;
  void *rp;
  char cs[256];
  int fail = 0;

  /* Inputs: a fresh stream per (run, case, rank); broadcast needs the root's only. */
  if (k->coll != C_BROADCAST || r == k->root)
    zt_gen(k->type, k->op, n, r, zt_mix(m->seed, (uint64_t)k->index, (uint64_t)r),
           in, ns);
  memset(rc->rbase, poison, GUARD + k->roff + region + GUARD);
  if (!k->inplace) {
    memcpy(sdata, in, sbytes);
    sp = sdata;
    rp = rdata;
  } else if (k->coll == C_ALLGATHER) {
    memcpy(rdata + (size_t)r * c * esz, in, sbytes);
    sp = rdata + (size_t)r * c * esz;
    rp = rdata;
  } else if (k->coll == C_REDUCESCATTER) {
    memcpy(rdata, in, sbytes);
    sp = rdata;
    rp = rdata + (size_t)r * c * esz;
  } else {
    memcpy(rdata, in, sbytes);
    sp = rdata;
    rp = rdata;
  }

  if (zt_barrier_wait(&hdr->bar, n, m->barrier_s) != 0)
    goto barrier_timeout;
  if (k->coll == C_ALLREDUCE || k->coll == C_REDUCE) {
    const void *ins[ZT_MAX_RANKS];
    for (int j = 0; j < n; j++)
      ins[j] = in_slot(m, j);
    zt_ref_reduce(k->type, k->op, n, ins, exp_slot(m), c * (size_t)r / (size_t)n,
                  c * (size_t)(r + 1) / (size_t)n);
  }
  if (zt_barrier_wait(&hdr->bar, n, m->barrier_s) != 0)
    goto barrier_timeout;

  double t0 = zt_now();
  zccResult_t res = issue(rc, m, k, sp, rp);
  hdr->call_s[r] = zt_now() - t0;

  if (res != zccSuccess) {
    const char *le = zccGetLastError(rc->comm);
    detail(rc, "%s: returned %s (%d): \"%s\"", case_str(k, n, cs, sizeof(cs)),
           zt_rc_name(res), (int)res, le ? le : "(null)");
    atomic_store(&hdr->stop, 1);
    fail = 1;
  } else {
    switch (k->coll) {
    case C_ALLREDUCE:
      fail |= check_block(rc, m, k, "result", rp, exp_slot(m), c, 0);
      break;
    case C_BROADCAST:
      fail |= check_block(rc, m, k, "result", rp, in_slot(m, k->root), c, 0);
      break;
    case C_REDUCE:
      if (r == k->root)
        fail |= check_block(rc, m, k, "result at root", rp, exp_slot(m), c, 0);
      else if (!k->inplace)
        fail |= check_poison(rc, m, k, "non-root recvbuff (must be ignored)",
                             (unsigned char *)rdata, rbytes, poison);
      break;
    case C_ALLGATHER:
      for (int j = 0; j < n && !fail; j++) {
        char what[64];
        snprintf(what, sizeof(what), "block from rank %d", j);
        fail |= check_block(rc, m, k, what, (char *)rp + (size_t)j * c * esz,
                            in_slot(m, j), c, 0);
      }
      break;
    case C_REDUCESCATTER: {
      const void *ins[ZT_MAX_RANKS];
      for (int j = 0; j < n; j++)
        ins[j] = in_slot(m, j) + (size_t)r * c * esz;
      zt_ref_reduce(k->type, k->op, n, ins, rc->x, 0, c);
      fail |= check_block(rc, m, k, "result block", rp, rc->x, c, (size_t)r * c);
      break;
    }
    case C_ALLTOALL:
    case C_ALLPAIRS:
      for (int j = 0; j < n && !fail; j++) {
        char what[64];
        char *got = (char *)rp + (size_t)j * c * esz;
        if (k->coll == C_ALLPAIRS && j == r) {
          fail |= check_poison(rc, m, k, "own block (no self send)",
                               (unsigned char *)got, c * esz, poison);
          continue;
        }
        snprintf(what, sizeof(what), "block from rank %d", j);
        fail |= check_block(rc, m, k, what, got,
                            in_slot(m, j) + (size_t)r * c * esz, c, 0);
      }
      break;
    case C_RING:
      fail |= check_block(rc, m, k, "block from the previous rank", rp,
                          in_slot(m, (r + n - 1) % n), c, 0);
      break;
    default:
      break;
    }
    fail |= check_poison(rc, m, k, "guard before recvbuff",
                         (unsigned char *)rc->rbase, GUARD + k->roff, poison);
    fail |= check_poison(rc, m, k, "guard after recvbuff",
                         (unsigned char *)rdata + region, GUARD, poison);
    if (!k->inplace && memcmp(sdata, in, sbytes) != 0) {
      detail(rc, "%s: sendbuff was modified by an out-of-place call",
             case_str(k, n, cs, sizeof(cs)));
      fail = 1;
    }
  }
  hdr->fail[r] = fail;
  hdr->hash[r] = k->coll == C_ALLREDUCE ? zt_hash(rp, rbytes) : 0;
  if (zt_barrier_wait(&hdr->bar, n, m->barrier_s) != 0)
    goto barrier_timeout;

  if (r == 0) {
    int bad = 0, mismatch = 0;
    double mx = 0;
    for (int j = 0; j < n; j++) {
      bad |= hdr->fail[j];
      if (hdr->hash[j] != hdr->hash[0])
        mismatch = 1;
      if (hdr->call_s[j] > mx)
        mx = hdr->call_s[j];
    }
    if (mismatch && !bad)
      zt_fail("%s: results are not bitwise identical across ranks",
              case_str(k, n, cs, sizeof(cs)));
    else if (bad)
      zt_fail("%s: failed (details above)", case_str(k, n, cs, sizeof(cs)));
    else
      zt_pass();
    hdr->cases++;
    hdr->sum_call_s += mx;
    if (mx > hdr->max_call_s) {
      hdr->max_call_s = mx;
      case_str(k, n, hdr->max_call_case, sizeof(hdr->max_call_case));
    }
  }
  if (atomic_load(&hdr->stop)) {
    if (r == 0)
      zt_fail("nranks=%d: stopping after %s: a call returned an error",
              n, case_str(k, n, cs, sizeof(cs)));
    return 1;
  }
  return 0;

barrier_timeout:
  zt_log("FAIL: test barrier timed out after %.0f s in %s; exiting", m->barrier_s,
         case_str(k, n, cs, sizeof(cs)));
  fflush(stdout);
  _exit(4);
}

static int matrix_rank(int rank, int nranks, const zccUniqueId *id, void *arg) {
  matrix_t *m = arg;
  rank_ctx_t rc;
  zccResult_t res;
  int v;

  memset(&rc, 0, sizeof(rc));
  rc.rank = rank;
  zt_set_tag("[n=%d rank %d]", nranks, rank);
  res = zt_comm_init_host(&rc.comm, nranks, id, rank);
  if (res != zccSuccess) {
    zt_fail("zccCommInitRankConfig(nranks=%d, rank=%d, host): expected zccSuccess, got %s: \"%s\"",
            nranks, rank, zt_rc_name(res), zccGetLastError(NULL));
    return 1;
  }
  res = zccCommCount(rc.comm, &v);
  ZT_CHECK(res == zccSuccess && v == nranks,
           "zccCommCount: expected %d, got %d (%s)", nranks, v, zt_rc_name(res));
  res = zccCommUserRank(rc.comm, &v);
  ZT_CHECK(res == zccSuccess && v == rank,
           "zccCommUserRank: expected %d, got %d (%s)", rank, v, zt_rc_name(res));
  res = zccCommCuDevice(rc.comm, &v);
  ZT_CHECK(res == zccSuccess && v == -1,
           "zccCommCuDevice of a host communicator: expected -1, got %d (%s)", v,
           zt_rc_name(res));

  rc.sbase = malloc(m->priv + 2 * GUARD + 64);
  rc.rbase = malloc(m->priv + 2 * GUARD + 64);
  rc.x = malloc(m->xbytes ? m->xbytes : 1);
  if (!rc.sbase || !rc.rbase || !rc.x) {
    zt_fail("out of memory for %zu-byte buffers", m->priv);
    return 1;
  }
  enumerate(m, run_case, &rc);
  free(rc.sbase);
  free(rc.rbase);
  free(rc.x);

  double t0 = zt_now();
  res = zccCommDestroy(rc.comm);
  ZT_CHECK(res == zccSuccess, "zccCommDestroy: expected zccSuccess, got %s: \"%s\"",
           zt_rc_name(res), zccGetLastError(NULL));
  ZT_CHECK(zt_now() - t0 < 30, "zccCommDestroy took %.1f s", zt_now() - t0);
  return 0;
}

/* Runs in its own process, so that each set forks from a process without zcc state. */
static int run_set(matrix_t *m) {
  zt_group_t g;
  zccUniqueId id;
  sizing_t sz;
  double t0 = zt_now();
  int n = m->nranks;

  memset(&sz, 0, sizeof(sz));
  enumerate(m, size_case, &sz);
  m->slot = (sz.slot + 4095) & ~(size_t)4095;
  m->eslot = (sz.eslot + 4095) & ~(size_t)4095;
  m->priv = m->slot + 64;
  m->xbytes = sz.xbytes;
  m->shared_bytes = sizeof(shared_hdr_t) + 4096 + (size_t)n * m->slot + m->eslot;
  char *mem = zt_shared_alloc(m->shared_bytes);
  m->hdr = (shared_hdr_t *)mem;
  m->slots = mem + ((sizeof(shared_hdr_t) + 4095) & ~(size_t)4095);
  printf("test_coll_matrix: nranks=%d: %ld cases, %.0f MiB shared\n", n, sz.cases,
         (double)m->shared_bytes / (double)MIB);
  fflush(stdout);

  if (zt_spawn(&g, n, matrix_rank, m) != 0)
    return 0; /* counted */
  zccResult_t res = zccGetUniqueId(&id);
  if (res != zccSuccess) {
    zt_fail("zccGetUniqueId: expected zccSuccess, got %s: \"%s\"", zt_rc_name(res),
            zccGetLastError(NULL));
    zt_wait_all(&g, 10, "matrix");
    return 0; /* counted */
  }
  zt_release(&g, &id);
  double limit = m->quick ? 900 : 1500;
  zt_wait_all(&g, limit, "matrix");
  long run = m->hdr->cases;
  if (run != sz.cases)
    zt_fail("nranks=%d: only %ld of %ld cases ran", n, run, sz.cases);
  printf("test_coll_matrix: nranks=%d: %ld cases in %.1f s (%.1f s in zcc calls); "
         "slowest call %.3f s (%s)\n",
         n, run, zt_now() - t0, m->hdr->sum_call_s, m->hdr->max_call_s,
         m->hdr->max_call_case);
  fflush(stdout);
  zt_shared_free(mem, m->shared_bytes);
  return 0;
}

static int find_name(const char *env, const char *const *names, int count) {
  const char *v = getenv(env);
  if (!v || !*v)
    return -1;
  for (int i = 0; i < count; i++)
    if (strcmp(v, names[i]) == 0)
      return i;
  printf("test_coll_matrix: %s=%s is not a known name\n", env, v);
  exit(2);
}

int main(int argc, char **argv) {
  matrix_t m;
  int counts[ZT_MAX_RANKS], ncounts = 0;
  const char *type_names[zccNumTypes];

  zt_setup("test_coll_matrix");
  zt_types_init();
  memset(&m, 0, sizeof(m));
  m.quick = zt_quick(argc, argv);
  m.full = getenv("ZCC_TEST_FULL") && strcmp(getenv("ZCC_TEST_FULL"), "0") != 0;
  m.seed = zt_seed();
  m.only_coll = find_name("ZCC_TEST_COLL", coll_names, C_NUM);
  for (int t = 0; t < zccNumTypes; t++)
    type_names[t] = zt_type_name(t);
  m.only_type = find_name("ZCC_TEST_TYPE", type_names, zccNumTypes);
  m.max_count = getenv("ZCC_TEST_MAXCOUNT") ? strtoull(getenv("ZCC_TEST_MAXCOUNT"), NULL, 0)
                                            : SIZE_MAX;
  zt_seed_print();

  const char *nr = getenv("ZCC_TEST_NRANKS");
  if (nr && *nr) {
    char *end;
    for (const char *p = nr; *p && ncounts < ZT_MAX_RANKS; p = end) {
      long v = strtol(p, &end, 10);
      if (end == p || v < 1 || v > ZT_MAX_RANKS) {
        printf("test_coll_matrix: bad ZCC_TEST_NRANKS=%s\n", nr);
        return 2;
      }
      counts[ncounts++] = (int)v;
      while (*end == ',' || *end == ' ')
        end++;
    }
  } else {
    for (int n = 1; n <= 8; n++)
      counts[ncounts++] = n;
  }
  /* A hung peer must turn into an error well before the test barrier gives up. */
  zt_setenv_default("ZCC_TIMEOUT", "60000");
  m.barrier_s = (double)strtol(getenv("ZCC_TIMEOUT"), NULL, 10) / 1000.0 + 60;
  printf("test_coll_matrix: %s mode, rank counts:", m.quick ? "quick" : "full");
  for (int i = 0; i < ncounts; i++)
    printf(" %d", counts[i]);
  printf("\n");

  double t0 = zt_now();
  for (int i = 0; i < ncounts; i++) {
    m.nranks = counts[i];
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
      _exit(run_set(&m));
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
      ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      zt_fail("nranks=%d: the set runner ended with status 0x%x", counts[i], st);
  }
  printf("test_coll_matrix: total %.1f s\n", zt_now() - t0);
  return zt_finish();
}
