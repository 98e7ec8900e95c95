/*
 * One process per rank under torchrun, the way a training job averages its
 * gradients; no Python is involved:
 *
 *   torchrun --nproc-per-node 4 --no-python ./example_torchrun
 *   torchrun --nnodes 2 --node-rank 0 --master-addr a --master-port 29500 \
 *            --nproc-per-node 8 --no-python ./example_torchrun
 *
 * zccCommInitFromEnv reads RANK and WORLD_SIZE, and meets the other ranks at
 * MASTER_ADDR on port MASTER_PORT + 1 (torchrun's own store holds
 * MASTER_PORT). The same variables set by hand work without torchrun.
 *
 * Rank r's gradient holds r + (i % 8) at element i; zccAvg leaves
 * (n - 1) / 2 + (i % 8) on n ranks. Every rank checks every element and exits
 * non-zero on a mismatch; rank 0 prints the result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <zcc.h>

#define COUNT ((size_t)1 << 20)

static int report(const char *call, zccResult_t res, zccComm_t comm) {
  fprintf(stderr, "example_torchrun: %s failed: %s: %s\n", call,
          zccGetErrorString(res), zccGetLastError(comm));
  return 1;
}

static const char *env_or(const char *name, const char *fallback) {
  const char *v = getenv(name);
  return v != NULL ? v : fallback;
}

int main(void) {
  zccConfig_t config = ZCC_CONFIG_INITIALIZER;
  config.deviceType = zccDeviceHost; /* the gradient below is host memory */
  config.commName = "example_torchrun";
  zccComm_t comm;
  zccResult_t res = zccCommInitFromEnv(&comm, &config);
  if (res != zccSuccess) {
    report("zccCommInitFromEnv", res, NULL);
    fprintf(stderr,
            "example_torchrun: RANK=%s WORLD_SIZE=%s MASTER_ADDR=%s "
            "MASTER_PORT=%s\n",
            env_or("RANK", "(unset)"), env_or("WORLD_SIZE", "(unset)"),
            env_or("MASTER_ADDR", "(unset)"), env_or("MASTER_PORT", "(unset)"));
    return 1;
  }

  int rank, nranks;
  if ((res = zccCommUserRank(comm, &rank)) != zccSuccess ||
      (res = zccCommCount(comm, &nranks)) != zccSuccess) {
    report("zccCommUserRank/zccCommCount", res, comm);
    zccCommAbort(comm);
    return 1;
  }

  float *grad = malloc(COUNT * sizeof(*grad));
  if (grad == NULL) {
    fprintf(stderr, "example_torchrun: out of memory\n");
    zccCommAbort(comm);
    return 1;
  }
  for (size_t i = 0; i < COUNT; i++)
    grad[i] = (float)rank + (float)(i % 8);

  int failed = 0;
  /* In place, as DDP does with its gradient buckets. */
  res = zccAllReduce(grad, grad, COUNT, zccFloat32, zccAvg, comm, NULL);
  if (res != zccSuccess) {
    failed = report("zccAllReduce", res, comm);
  } else {
    for (size_t i = 0; i < COUNT; i++) {
      float want = (float)(nranks - 1) / 2.0f + (float)(i % 8);
      if (fabsf(grad[i] - want) > 1e-5f * (1.0f + fabsf(want))) {
        fprintf(stderr,
                "example_torchrun: rank %d of %d: element %zu is %.9g, "
                "expected %.9g\n",
                rank, nranks, i, grad[i], want);
        failed = 1;
        break;
      }
    }
  }
  if (rank == 0 && !failed)
    printf("example_torchrun: %d ranks (master %s:%s) averaged %zu floats: "
           "[0] = %g, [7] = %g: ok\n",
           nranks, env_or("MASTER_ADDR", "?"), env_or("MASTER_PORT", "?"),
           COUNT, grad[0], grad[7]);

  if (failed)
    zccCommAbort(comm);
  else if ((res = zccCommDestroy(comm)) != zccSuccess)
    failed = report("zccCommDestroy", res, NULL);
  free(grad);
  return failed;
}
