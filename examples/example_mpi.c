/*
 * One process per rank, started by a launcher; no MPI library is needed:
 *
 *   mpirun -np 4 ./example_mpi                            one host
 *   mpirun -np 8 -H a:4,b:4 -x ZCC_COMM_ID=a:29400 ./example_mpi
 *   srun -N 2 -n 8 ./example_mpi
 *
 * zccCommInitFromEnv takes the rank and size from the launcher's variables
 * (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS)
 * and the rendezvous address from ZCC_COMM_ID=host:port, or finds it by
 * itself when every rank runs on one host.
 *
 * Rank r contributes (r + 1) * (i + 1) at element i, so the sum at element i
 * is n (n + 1) / 2 * (i + 1) on n ranks. Every rank checks every element and
 * exits non-zero on a mismatch; rank 0 prints the result.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <zcc.h>

#define COUNT ((size_t)1 << 20)

static int report(const char *call, zccResult_t res, zccComm_t comm) {
  fprintf(stderr, "example_mpi: %s failed: %s: %s\n", call,
          zccGetErrorString(res), zccGetLastError(comm));
  return 1;
}

int main(void) {
  zccConfig_t config = ZCC_CONFIG_INITIALIZER;
  config.deviceType = zccDeviceHost; /* the buffers below are host memory */
  config.commName = "example_mpi";
  zccComm_t comm;
  zccResult_t res = zccCommInitFromEnv(&comm, &config);
  if (res != zccSuccess)
    return report("zccCommInitFromEnv", res, NULL);

  int rank, nranks;
  if ((res = zccCommUserRank(comm, &rank)) != zccSuccess ||
      (res = zccCommCount(comm, &nranks)) != zccSuccess) {
    report("zccCommUserRank/zccCommCount", res, comm);
    zccCommAbort(comm);
    return 1;
  }

  int64_t *send = malloc(COUNT * sizeof(*send));
  int64_t *recv = malloc(COUNT * sizeof(*recv));
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "example_mpi: out of memory\n");
    zccCommAbort(comm);
    return 1;
  }
  for (size_t i = 0; i < COUNT; i++)
    send[i] = (int64_t)(rank + 1) * (int64_t)(i + 1);

  int failed = 0;
  res = zccAllReduce(send, recv, COUNT, zccInt64, zccSum, comm, NULL);
  if (res != zccSuccess) {
    failed = report("zccAllReduce", res, comm);
  } else {
    int64_t tri = (int64_t)nranks * (nranks + 1) / 2;
    for (size_t i = 0; i < COUNT; i++) {
      int64_t want = tri * (int64_t)(i + 1);
      if (recv[i] != want) {
        fprintf(stderr,
                "example_mpi: rank %d of %d: element %zu is %" PRId64
                ", expected %" PRId64 "\n",
                rank, nranks, i, recv[i], want);
        failed = 1;
        break;
      }
    }
  }
  if (rank == 0 && !failed)
    printf("example_mpi: %d ranks summed %zu int64: [0] = %" PRId64
           ", [%zu] = %" PRId64 ": ok\n",
           nranks, COUNT, recv[0], COUNT - 1, recv[COUNT - 1]);

  if (failed)
    zccCommAbort(comm);
  else if ((res = zccCommDestroy(comm)) != zccSuccess)
    failed = report("zccCommDestroy", res, NULL);
  free(send);
  free(recv);
  return failed;
}
