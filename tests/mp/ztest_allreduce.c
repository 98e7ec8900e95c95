/* A checked host allreduce for the hostmem tests: see ztest_allreduce.h. */
#include "ztest_allreduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ztest.h"

const zt_ar_case_t zt_ar_cases[] = {
    {zccFloat32, zccSum, "float sum"}, {zccFloat32, zccMax, "float max"},
    {zccFloat32, zccMin, "float min"}, {zccFloat32, zccAvg, "float avg"},
    {zccInt64, zccSum, "int64 sum"},
};
const size_t zt_ar_ncases = sizeof(zt_ar_cases) / sizeof(zt_ar_cases[0]);

static float fin(int r, size_t i, int round) {
  return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)round * 5) % 61) - 30);
}
static int64_t iin(int r, size_t i, int round) {
  return (int64_t)((i * 2654435761u + (size_t)r * 977 + (size_t)round) % 100003) -
         50000 + ((int64_t)r << 40);
}
static float fcomb(zccRedOp_t op, float a, float b) {
  return op == zccMax ? (a > b ? a : b) : op == zccMin ? (a < b ? a : b) : a + b;
}

long zt_ar_call(zccComm_t comm, int r, int n, const zt_ar_case_t *c, char *sb, char *rb,
                size_t bytes, int inplace, int round) {
  size_t ts = c->type == zccInt64 ? 8 : 4, count = bytes / ts;
  char *sp = inplace ? rb : sb;
  const char *how = inplace ? "in place" : "out of place";
  memset(rb, 0x7b, count * ts); /* poison */
  for (size_t i = 0; i < count; i++) {
    if (c->type == zccInt64) {
      int64_t v = iin(r, i, round);
      memcpy(sp + i * 8, &v, 8);
    } else {
      float v = fin(r, i, round);
      memcpy(sp + i * 4, &v, 4);
    }
  }
  zccResult_t rc = zccAllReduce(sp, rb, count, c->type, c->op, comm, NULL);
  if (rc != zccSuccess) {
    zt_fail("rank %d: %s of %zu B %s: %s: %s", r, c->name, bytes, how, zt_rc_name(rc),
            zccGetLastError(comm));
    return 1;
  }
  for (size_t i = 0; i < count; i++) {
    if (c->type == zccInt64) {
      int64_t want = 0, got;
      for (int q = 0; q < n; q++) want += iin(q, i, round);
      memcpy(&got, rb + i * 8, 8);
      if (got != want) {
        zt_fail("rank %d: %s of %zu B %s round %d: element %zu of %zu is %lld, expected %lld",
                r, c->name, bytes, how, round, i, count, (long long)got, (long long)want);
        return 1;
      }
    } else {
      float want = fin(0, i, round), got;
      for (int q = 1; q < n; q++) want = fcomb(c->op, want, fin(q, i, round));
      if (c->op == zccAvg) want = want / (float)n;
      memcpy(&got, rb + i * 4, 4);
      if (got != want) {
        zt_fail("rank %d: %s of %zu B %s round %d: element %zu of %zu is %g, expected %g", r,
                c->name, bytes, how, round, i, count, (double)got, (double)want);
        return 1;
      }
    }
  }
  return 0;
}

void zt_ar_dead_peer(zccComm_t comm, int r, char *sb, char *rb) {
  double t0 = zt_now();
  zccResult_t got = zccAllReduce(sb, rb, (1u << 20) / 4, zccFloat32, zccSum, comm, NULL);
  ZT_CHECK(got != zccSuccess && zt_now() - t0 < 60,
           "rank %d: allreduce with a dead peer returned %s after %.1f s", r, zt_rc_name(got),
           zt_now() - t0);
}

int zt_log_dir_make(char *dir, size_t cap, const char *name) {
  snprintf(dir, cap, "/tmp/zcc-%s-XXXXXX", name);
  if (!mkdtemp(dir)) return -1;
  char pattern[192];
  snprintf(pattern, sizeof(pattern), "%s/%s.%%p.log", dir, name);
  setenv("ZCC_DEBUG", "INFO", 1);
  setenv("ZCC_DEBUG_SUBSYS", "COLL", 1);
  setenv("ZCC_DEBUG_FILE", pattern, 1);
  return 0;
}

int zt_log_count(const char *dir, const char *name, const char *what) {
  char path[192], line[1024];
  snprintf(path, sizeof(path), "%s/%s.%d.log", dir, name, (int)getpid());
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, what)) n++;
  fclose(f);
  return n;
}

void zt_log_unlink(const char *dir, const char *name) {
  char path[192];
  snprintf(path, sizeof(path), "%s/%s.%d.log", dir, name, (int)getpid());
  unlink(path);
}

void zt_log_dir_remove(const char *dir) {
  char cmd[192];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) zt_log("could not remove %s", dir);
}
