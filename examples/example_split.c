/*
 * One process, four host communicators, one thread per rank: host
 * collectives return when they are done, so each rank needs its own thread.
 *
 * zccCommInitAll creates the four ranks of one communicator; each thread
 * sums its rank + 1 over all of them, then zccCommSplit puts the even and
 * the odd ranks in two new communicators, and each sums again there.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <zcc.h>

#define NRANKS 4
#define COUNT 4096

struct rank_ctx {
  zccComm_t comm;
  int rank;
  int failed;
  int split_rank;
  int split_size;
  int split_sum;
};

static int report(const struct rank_ctx *ctx, const char *call, zccResult_t res,
                  zccComm_t comm) {
  fprintf(stderr, "example_split: rank %d: %s failed: %s: %s\n", ctx->rank,
          call, zccGetErrorString(res), zccGetLastError(comm));
  return 1;
}

/* Every element of buf must equal want. */
static int check(const struct rank_ctx *ctx, const char *what, const int *buf,
                 int want) {
  for (int i = 0; i < COUNT; i++) {
    if (buf[i] != want) {
      fprintf(stderr,
              "example_split: rank %d: %s: element %d is %d, expected %d\n",
              ctx->rank, what, i, buf[i], want);
      return 1;
    }
  }
  return 0;
}

static int run_rank(struct rank_ctx *ctx) {
  int buf[COUNT];
  zccResult_t res;

  /* Everyone: 1 + 2 + 3 + 4. */
  for (int i = 0; i < COUNT; i++)
    buf[i] = ctx->rank + 1;
  res = zccAllReduce(buf, buf, COUNT, zccInt32, zccSum, ctx->comm, NULL);
  if (res != zccSuccess)
    return report(ctx, "zccAllReduce (world)", res, ctx->comm);
  if (check(ctx, "world sum", buf, NRANKS * (NRANKS + 1) / 2))
    return 1;

  /* Even ranks with even, odd with odd, ordered by their old rank. */
  zccComm_t half;
  res = zccCommSplit(ctx->comm, ctx->rank % 2, ctx->rank, &half, NULL);
  if (res != zccSuccess)
    return report(ctx, "zccCommSplit", res, ctx->comm);
  if ((res = zccCommUserRank(half, &ctx->split_rank)) != zccSuccess ||
      (res = zccCommCount(half, &ctx->split_size)) != zccSuccess) {
    report(ctx, "zccCommUserRank/zccCommCount", res, half);
    zccCommDestroy(half);
    return 1;
  }
  int want_rank = ctx->rank / 2, want_size = (NRANKS - ctx->rank % 2 + 1) / 2;
  if (ctx->split_rank != want_rank || ctx->split_size != want_size) {
    fprintf(stderr,
            "example_split: rank %d: split gave rank %d of %d, expected %d of "
            "%d\n",
            ctx->rank, ctx->split_rank, ctx->split_size, want_rank, want_size);
    zccCommDestroy(half);
    return 1;
  }

  /* Evens: 1 + 3; odds: 2 + 4. */
  int want = 0;
  for (int r = ctx->rank % 2; r < NRANKS; r += 2)
    want += r + 1;
  for (int i = 0; i < COUNT; i++)
    buf[i] = ctx->rank + 1;
  res = zccAllReduce(buf, buf, COUNT, zccInt32, zccSum, half, NULL);
  if (res != zccSuccess) {
    report(ctx, "zccAllReduce (split)", res, half);
    zccCommDestroy(half);
    return 1;
  }
  ctx->split_sum = buf[0];
  int failed = check(ctx, ctx->rank % 2 ? "odd sum" : "even sum", buf, want);
  if ((res = zccCommDestroy(half)) != zccSuccess)
    failed = report(ctx, "zccCommDestroy (split)", res, NULL);
  return failed;
}

static void *rank_thread(void *arg) {
  struct rank_ctx *ctx = arg;
  ctx->failed = run_rank(ctx);
  if (ctx->failed) {
    /* Tear down at once, so that the peers' calls fail instead of waiting. */
    zccCommAbort(ctx->comm);
    return NULL;
  }
  zccResult_t res = zccCommDestroy(ctx->comm);
  if (res != zccSuccess)
    ctx->failed = report(ctx, "zccCommDestroy (world)", res, NULL);
  return NULL;
}

int main(void) {
  /* Host communicators even where a GPU exists: the buffers are host memory. */
  setenv("ZCC_DEVICE", "host", 1);

  zccComm_t comms[NRANKS];
  zccResult_t res = zccCommInitAll(comms, NRANKS, NULL);
  if (res != zccSuccess) {
    fprintf(stderr, "example_split: zccCommInitAll failed: %s: %s\n",
            zccGetErrorString(res), zccGetLastError(NULL));
    return 1;
  }

  struct rank_ctx ctx[NRANKS];
  pthread_t threads[NRANKS];
  int started = 0, failed = 0;
  for (int r = 0; r < NRANKS; r++) {
    ctx[r] = (struct rank_ctx){.comm = comms[r], .rank = r};
    if (pthread_create(&threads[r], NULL, rank_thread, &ctx[r]) != 0) {
      fprintf(stderr, "example_split: pthread_create failed for rank %d\n", r);
      failed = 1;
      break;
    }
    started++;
  }
  /* Ranks that have no thread would leave the others waiting: abort them. */
  for (int r = started; r < NRANKS; r++)
    zccCommAbort(comms[r]);
  for (int r = 0; r < started; r++) {
    pthread_join(threads[r], NULL);
    failed |= ctx[r].failed;
  }
  if (failed) {
    puts("example_split: FAILED");
    return 1;
  }
  for (int r = 0; r < NRANKS; r++)
    printf("example_split: rank %d -> %s rank %d of %d, sum %d\n", r,
           r % 2 ? "odd" : "even", ctx[r].split_rank, ctx[r].split_size,
           ctx[r].split_sum);
  puts("example_split: ok");
  return 0;
}
