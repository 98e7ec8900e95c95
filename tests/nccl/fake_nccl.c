/*
 * A stand-in for a real libnccl.so.2, for the fallback test: one-rank
 * communicators on host memory, a call counter (fake_nccl_calls), and no
 * ncclBcast (a function the fallback lacks). Built against nccl.h, so its
 * signatures are NCCL's.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

static const char *names[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce",
                              "ncclCommDestroy", "ncclGroupEnd"};
static int counts[sizeof(names) / sizeof(names[0])];
static const char *last = "";

static void count(const char *fn) {
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(names[i], fn) == 0) counts[i]++;
}

FAKE_API int fake_nccl_calls(const char *fn) {
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(names[i], fn) == 0) return counts[i];
  return -1;
}

struct ncclComm {
  unsigned magic;
};

FAKE_API ncclResult_t ncclGetVersion(int *v) {
  *v = 22800;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  count("ncclGetUniqueId");
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, "fake-nccl-id", 12);
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  count("ncclCommInitRank");
  if (nranks != 1 || rank != 0 || memcmp(id.internal, "fake-nccl-id", 12) != 0) {
    last = "fake NCCL: one rank and its own id only";
    return ncclInvalidArgument;
  }
  *comm = calloc(1, sizeof(struct ncclComm));
  (*comm)->magic = 0xfa6e;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclAllReduce(const void *s, void *r, size_t count_, ncclDataType_t t,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
  (void)st;
  if (comm->magic != 0xfa6e || t != ncclFloat) return ncclInvalidUsage;
  if (op != ncclSum) {
    last = "fake NCCL: bad op";
    return ncclInvalidArgument;
  }
  count("ncclAllReduce");
  memmove(r, s, count_ * sizeof(float));
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *n) {
  (void)comm;
  *n = 1;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  count("ncclCommDestroy");
  free(comm);
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
FAKE_API ncclResult_t ncclGroupEnd(void) {
  count("ncclGroupEnd");
  return ncclSuccess;
}

FAKE_API const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last;
}
