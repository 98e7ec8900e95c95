/*
 * NCCL's collectives, send/recv, groups, reduction ops, memory and
 * registration over zcc. Datatypes, built-in ops and results have the same
 * values in both (nccl_abi.c checks), so arguments pass through unchanged.
 */
#include <stdint.h>

#include "debug.h"
#include "nccl_shim.h"

#define Z(comm) ((zccComm_t)(comm))
#define S(stream) ((zccStream_t)(stream))

/* ---- collectives ---- */

NCCL_SHIM_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op,
                                         ncclComm_t comm, cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclAllReduce, comm, sendbuff, recvbuff, count, datatype, op, comm,
                        stream);
  zccResult_t r = zccAllReduce(sendbuff, recvbuff, count, (zccDataType_t)datatype,
                               (zccRedOp_t)op, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclAllReduce");
}

NCCL_SHIM_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclBroadcast, comm, sendbuff, recvbuff, count, datatype, root, comm,
                        stream);
  zccResult_t r =
      zccBroadcast(sendbuff, recvbuff, count, (zccDataType_t)datatype, root, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclBroadcast");
}

/* NCCL's legacy in-place broadcast. */
NCCL_SHIM_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclBcast, comm, buff, count, datatype, root, comm, stream);
  zccResult_t r =
      zccBroadcast(buff, buff, count, (zccDataType_t)datatype, root, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclBcast");
}

NCCL_SHIM_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, int root,
                                      ncclComm_t comm, cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclReduce, comm, sendbuff, recvbuff, count, datatype, op, root, comm,
                        stream);
  zccResult_t r = zccReduce(sendbuff, recvbuff, count, (zccDataType_t)datatype, (zccRedOp_t)op,
                            root, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclReduce");
}

NCCL_SHIM_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclAllGather, comm, sendbuff, recvbuff, sendcount, datatype, comm,
                        stream);
  zccResult_t r =
      zccAllGather(sendbuff, recvbuff, sendcount, (zccDataType_t)datatype, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclAllGather");
}

NCCL_SHIM_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                             size_t recvcount, ncclDataType_t datatype,
                                             ncclRedOp_t op, ncclComm_t comm,
                                             cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclReduceScatter, comm, sendbuff, recvbuff, recvcount, datatype, op,
                        comm, stream);
  zccResult_t r = zccReduceScatter(sendbuff, recvbuff, recvcount, (zccDataType_t)datatype,
                                   (zccRedOp_t)op, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclReduceScatter");
}

NCCL_SHIM_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclComm_t comm,
                                        cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclAlltoAll, comm, sendbuff, recvbuff, count, datatype, comm, stream);
  zccResult_t r =
      zccAlltoAll(sendbuff, recvbuff, count, (zccDataType_t)datatype, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclAlltoAll");
}

/*
 * Gather and scatter: zcc has no collective of its own for them; they are
 * the group of sends and receives NCCL itself runs (the root's own block a
 * send to and receive from itself).
 */
static ncclResult_t rooted_p2p(int gather, const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream, const char *fn) {
  int nranks = 0, rank = 0;
  zccResult_t r = zccCommCount(Z(comm), &nranks);
  if (r == zccSuccess) r = zccCommUserRank(Z(comm), &rank);
  if (r != zccSuccess) return zcc_nccl_comm_result(r, comm, fn);
  if (root < 0 || root >= nranks)
    return zcc_nccl_error(ncclInvalidArgument, "%s: root %d is out of range [0, %d)", fn, root,
                          nranks);
  size_t es = 0;
  switch (datatype) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: es = 1; break;
  case ncclFloat16: case ncclBfloat16: es = 2; break;
  case ncclInt32: case ncclUint32: case ncclFloat32: es = 4; break;
  case ncclInt64: case ncclUint64: case ncclFloat64: es = 8; break;
  default:
    return zcc_nccl_error(ncclInvalidArgument, "%s: datatype %d is not an ncclDataType_t", fn,
                          (int)datatype);
  }
  if (count > SIZE_MAX / es / (size_t)nranks)
    return zcc_nccl_error(ncclInvalidArgument, "%s: count %zu overflows", fn, count);
  size_t block = count * es;
  ZCC_INFO(COLL, "%s: %zu elements, root %d: a group of sends and receives", fn, count, root);
  zccGroupStart();
  zccResult_t e = zccSuccess;
  zccDataType_t t = (zccDataType_t)datatype;
  if (gather) {
    e = zccSend(sendbuff, count, t, root, Z(comm), S(stream));
    for (int p = 0; p < nranks && e == zccSuccess && rank == root; p++)
      e = zccRecv((char *)recvbuff + (size_t)p * block, count, t, p, Z(comm), S(stream));
  } else {
    for (int p = 0; p < nranks && e == zccSuccess && rank == root; p++)
      e = zccSend((const char *)sendbuff + (size_t)p * block, count, t, p, Z(comm), S(stream));
    if (e == zccSuccess) e = zccRecv(recvbuff, count, t, root, Z(comm), S(stream));
  }
  r = zccGroupEnd();
  if (e != zccSuccess) r = e;
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, fn);
}

NCCL_SHIM_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclGather, comm, sendbuff, recvbuff, count, datatype, root, comm,
                        stream);
  return rooted_p2p(1, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclGather");
}

NCCL_SHIM_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclScatter, comm, sendbuff, recvbuff, count, datatype, root, comm,
                        stream);
  return rooted_p2p(0, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclScatter");
}

/* ---- point to point ---- */

NCCL_SHIM_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                    int peer, ncclComm_t comm, cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclSend, comm, sendbuff, count, datatype, peer, comm, stream);
  zccResult_t r = zccSend(sendbuff, count, (zccDataType_t)datatype, peer, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclSend");
}

NCCL_SHIM_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                    int peer, ncclComm_t comm, cudaStream_t stream) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclRecv, comm, recvbuff, count, datatype, peer, comm, stream);
  zccResult_t r = zccRecv(recvbuff, count, (zccDataType_t)datatype, peer, Z(comm), S(stream));
  return r == zccSuccess ? ncclSuccess : zcc_nccl_comm_result(r, comm, "ncclRecv");
}

/* ---- groups: zcc's, and the fallback's when it is loaded ---- */

NCCL_SHIM_API ncclResult_t ncclGroupStart(void) {
  zcc_nccl_enter();
  ncclResult_t nr = zcc_nccl_result(zccGroupStart());
  if (nr == ncclSuccess && zcc_nccl_fwd_active && zcc_nccl_fwd.ncclGroupStart)
    nr = ZCC_NCCL_FWD(ncclGroupStart, NULL);
  return nr;
}

NCCL_SHIM_API ncclResult_t ncclGroupEnd(void) {
  zcc_nccl_enter();
  ncclResult_t nr = zcc_nccl_result(zccGroupEnd());
  if (zcc_nccl_fwd_active && zcc_nccl_fwd.ncclGroupEnd) {
    ncclResult_t fr = ZCC_NCCL_FWD(ncclGroupEnd, NULL);
    if (nr == ncclSuccess) nr = fr;
  }
  return nr;
}

NCCL_SHIM_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  zcc_nccl_enter();
  if (simInfo && simInfo->magic != NCCL_SHIM_SIMINFO_MAGIC)
    return zcc_nccl_error(ncclInvalidArgument,
                          "ncclGroupSimulateEnd: simInfo magic 0x%x is not "
                          "NCCL_SIM_INFO_INITIALIZER's 0x%x",
                          simInfo->magic, NCCL_SHIM_SIMINFO_MAGIC);
  return zcc_nccl_unsupported("ncclGroupSimulateEnd",
                              "zcc does not simulate groups; the group stays open: call "
                              "ncclGroupEnd to run it");
}

/* ---- reduction ops ---- */

NCCL_SHIM_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                    ncclDataType_t datatype,
                                                    ncclScalarResidence_t residence,
                                                    ncclComm_t comm) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclRedOpCreatePreMulSum, comm, op, scalar, datatype, residence, comm);
  zccRedOp_t zop;
  zccResult_t r = zccRedOpCreatePreMulSum(op ? &zop : NULL, scalar, (zccDataType_t)datatype,
                                          (zccScalarResidence_t)residence, Z(comm));
  if (r != zccSuccess) return zcc_nccl_comm_result(r, comm, "ncclRedOpCreatePreMulSum");
  *op = (ncclRedOp_t)zop;
  return ncclSuccess;
}

NCCL_SHIM_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclRedOpDestroy, comm, op, comm);
  return zcc_nccl_comm_result(zccRedOpDestroy((zccRedOp_t)op, Z(comm)), comm, "ncclRedOpDestroy");
}

/* ---- registration and memory ---- */

NCCL_SHIM_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                            void **handle) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommRegister, comm, comm, buff, size, handle);
  return zcc_nccl_comm_result(zccCommRegister(Z(comm), buff, size, handle), comm,
                              "ncclCommRegister");
}

NCCL_SHIM_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommDeregister, comm, comm, handle);
  return zcc_nccl_comm_result(zccCommDeregister(Z(comm), handle), comm, "ncclCommDeregister");
}

/*
 * Windows: zccCommRegister is already collective and symmetric (every rank,
 * the same order, the same offsets), which is what a window is to NCCL's
 * collectives; the handle is the window. The device API that reads windows
 * from kernels (ncclDevCommCreate, ncclGetLsaPointer, ...) is not served.
 */
NCCL_SHIM_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                                  ncclWindow_t *win, int winFlags) {
  static const char fn[] = "ncclCommWindowRegister";
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclCommWindowRegister, comm, comm, buff, size, win, winFlags);
  if (!win) return zcc_nccl_error(ncclInvalidArgument, "%s: win is NULL", fn);
  if (winFlags != NCCL_WIN_DEFAULT && winFlags != NCCL_WIN_COLL_SYMMETRIC)
    return zcc_nccl_error(ncclInvalidArgument,
                          "%s: winFlags 0x%x: expected NCCL_WIN_DEFAULT or "
                          "NCCL_WIN_COLL_SYMMETRIC", fn, winFlags);
  void *handle = NULL;
  zccResult_t r = zccCommRegister(Z(comm), buff, size, &handle);
  if (r != zccSuccess) return zcc_nccl_comm_result(r, comm, fn);
  *win = (ncclWindow_t)handle;
  return ncclSuccess;
}

NCCL_SHIM_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommWindowDeregister, comm, comm, win);
  return zcc_nccl_comm_result(zccCommDeregister(Z(comm), (void *)win), comm,
                              "ncclCommWindowDeregister");
}

NCCL_SHIM_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  zcc_nccl_enter();
  return zcc_nccl_result(zccMemAlloc(ptr, size));
}

NCCL_SHIM_API ncclResult_t ncclMemFree(void *ptr) {
  zcc_nccl_enter();
  return zcc_nccl_result(zccMemFree(ptr));
}

/* ---- NCCL's device API (nccl_device.h): not served ---- */

/* Declared by nccl_device/core.h, a C++ header: the types stay opaque here. */
NCCL_SHIM_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm);
NCCL_SHIM_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *devComm);

NCCL_SHIM_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm) {
  zcc_nccl_enter();
  (void)comm, (void)reqs, (void)outDevComm;
  return zcc_nccl_unsupported("ncclDevCommCreate",
                              "NCCL's device API (kernels that call NCCL) has no zcc "
                              "counterpart");
}

NCCL_SHIM_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *devComm) {
  zcc_nccl_enter();
  (void)comm, (void)devComm;
  return zcc_nccl_unsupported("ncclDevCommDestroy",
                              "NCCL's device API (kernels that call NCCL) has no zcc "
                              "counterpart");
}
