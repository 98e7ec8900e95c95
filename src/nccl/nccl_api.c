/*
 * NCCL's API over zcc: versions, errors, unique ids, communicator creation,
 * split, lifecycle and queries. See nccl_shim.h for the layout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "debug.h"
#include "nccl_shim.h"

/* ---- errors ---- */

ncclResult_t zcc_nccl_error(ncclResult_t res, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  zcc_error((zccResult_t)res, "%s", msg);
  return res;
}

ncclResult_t zcc_nccl_unsupported(const char *fn, const char *why) {
  return zcc_nccl_error(ncclInvalidUsage, "%s is not supported by zcc's libnccl.so.2: %s%s", fn,
                        why,
                        zcc_nccl_fwd_active ? "" : " (nothing was done; ZCC_NCCL_FALLBACK=/path/"
                                                   "libnccl.so.2 sends communicators zcc "
                                                   "refuses to NCCL)");
}

ncclResult_t zcc_nccl_comm_result(zccResult_t r, const void *comm, const char *fn) {
  if (r == zccSuccess) return ncclSuccess;
  if (comm && !zcc_comm_is_live(comm))
    return zcc_nccl_error(ncclInvalidUsage,
                          "%s: comm %p is not a communicator of zcc's libnccl.so.2 (one made "
                          "by another NCCL library, destroyed, or never created); nothing "
                          "was done",
                          fn, comm);
  return zcc_nccl_result(r);
}

NCCL_SHIM_API const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the zcc developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

NCCL_SHIM_API const char *ncclGetLastError(ncclComm_t comm) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm) && zcc_nccl_fwd.ncclGetLastError)
    return zcc_nccl_fwd.ncclGetLastError(comm);
  return zccGetLastError(NULL);
}

NCCL_SHIM_API ncclResult_t ncclGetVersion(int *version) {
  zcc_nccl_enter();
  if (!version) return zcc_nccl_error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  /* The ABI spoken: that of the nccl.h this library was checked against. */
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_SHIM_API void ncclResetDebugInit(void) {
  zcc_nccl_enter();
  ZCC_WARN("ncclResetDebugInit: zcc reads NCCL_DEBUG and ZCC_DEBUG once per process; "
           "the call changes nothing");
}

/* ---- unique ids ---- */

NCCL_SHIM_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  zcc_nccl_enter();
  if (!uniqueId) return zcc_nccl_error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  zccUniqueId id;
  zccResult_t r = zccGetUniqueId(&id);
  if (r != zccSuccess) return zcc_nccl_result(r);
  ncclUniqueId out;
  memcpy(&out, &id, sizeof(out));
  if (zcc_nccl_fwd_active) {
    ncclResult_t nr = zcc_nccl_fwd_pack_id(&out);
    if (nr != ncclSuccess) return nr;
  }
  *uniqueId = out;
  return ncclSuccess;
}

/* ---- configuration ---- */

/* Field of ncclConfig_t present in a config of `size` bytes. */
#define HAS_FIELD(cfg, field)                                                  \
  ((cfg)->size >= offsetof(ncclConfig_t, field) + sizeof((cfg)->field))

/*
 * NCCL's config as zcc's: size, magic and version checked, blocking and
 * commName taken, the rest (CTA counts, network name, traffic class,
 * collnet, ...) are NCCL's tuning of NCCL's kernels and are ignored.
 */
static ncclResult_t config_from_nccl(const ncclConfig_t *in, zccConfig_t *out, const char *fn) {
  zccConfig_t z = ZCC_CONFIG_INITIALIZER;
  *out = z;
  if (!in) return ncclSuccess;
  if (in->magic != NCCL_SHIM_CONFIG_MAGIC)
    return zcc_nccl_error(ncclInvalidArgument,
                          "%s: config magic 0x%x is not NCCL_CONFIG_INITIALIZER's 0x%x "
                          "(initialise ncclConfig_t with NCCL_CONFIG_INITIALIZER); nothing "
                          "was done",
                          fn, in->magic, NCCL_SHIM_CONFIG_MAGIC);
  /* ncclConfig_t began (NCCL 2.14) with the fields up to netName. */
  size_t oldest = offsetof(ncclConfig_t, netName) + sizeof(const char *);
  if (in->size < oldest || in->size > 4096)
    return zcc_nccl_error(ncclInvalidArgument,
                          "%s: config size %zu is not an ncclConfig_t's (%zu in NCCL %d.%d, at "
                          "least %zu in older ones); nothing was done",
                          fn, in->size, sizeof(ncclConfig_t), NCCL_MAJOR, NCCL_MINOR, oldest);
  if (in->version < 21400u || in->version > 99999u)
    return zcc_nccl_error(ncclInvalidArgument,
                          "%s: config version %u is no NCCL version with ncclConfig_t (2.14 "
                          "or later: 21400 and up); nothing was done",
                          fn, in->version);
  if (in->blocking != NCCL_CONFIG_UNDEF_INT && in->blocking != 0 && in->blocking != 1)
    return zcc_nccl_error(ncclInvalidArgument, "%s: config blocking=%d: expected 0 or 1", fn,
                          in->blocking);
  if (in->blocking == 0)
    ZCC_INFO(INIT, "%s: non-blocking communicator asked for: zcc's calls complete before "
             "they return (ncclSuccess, never ncclInProgress), which NCCL allows", fn);
  if (HAS_FIELD(in, commName)) out->commName = in->commName;
  return ncclSuccess;
}

/* ---- creation ---- */

/*
 * A failed zcc init that no fallback takes: a refusal (zccInvalidUsage)
 * says how a fallback would run it.
 */
static ncclResult_t refused(zccResult_t r, const char *fn) {
  if (r != zccInvalidUsage || zcc_nccl_fwd_active) return zcc_nccl_result(r);
  char why[1024];
  snprintf(why, sizeof(why), "%s", zccGetLastError(NULL));
  return zcc_nccl_error(ncclInvalidUsage,
                        "%s: zcc refused the communicator: %s; nothing was created "
                        "(ZCC_NCCL_FALLBACK=/path/libnccl.so.2 sends such communicators to "
                        "NCCL)", fn, why);
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId *commId, int rank,
                              ncclConfig_t *config, const char *fn) {
  zcc_nccl_enter();
  if (!comm) return zcc_nccl_error(ncclInvalidArgument, "%s: comm is NULL", fn);
  zccConfig_t zc;
  ncclResult_t nr = config_from_nccl(config, &zc, fn);
  if (nr != ncclSuccess) return nr;
  zccUniqueId id;
  memset(&id, 0, sizeof(id));
  /* zcc's id is the first half (the second: the fallback's, if any). */
  memcpy(&id, commId, ZCC_NCCL_ID_HALF);
  zccComm_t zcomm = NULL;
  zccResult_t r = zccCommInitRankConfig(&zcomm, nranks, id, rank, &zc);
  if (r == zccSuccess) {
    *comm = (ncclComm_t)zcomm;
    return ncclSuccess;
  }
  if (!zcc_nccl_fwd_takes(r)) return refused(r, fn);
  char why[1024];
  snprintf(why, sizeof(why), "%s", zccGetLastError(NULL));
  ncclUniqueId fid;
  nr = zcc_nccl_fwd_id(commId, &fid, fn, why);
  if (nr != ncclSuccess) return nr;
  zcc_nccl_fwd_note(fn, why);
  ncclComm_t fc = NULL;
  nr = config ? ZCC_NCCL_FWD(ncclCommInitRankConfig, NULL, &fc, nranks, fid, rank, config)
              : ZCC_NCCL_FWD(ncclCommInitRank, NULL, &fc, nranks, fid, rank);
  if (nr != ncclSuccess) return nr;
  zcc_nccl_fwd_add(fc);
  *comm = fc;
  return ncclSuccess;
}

NCCL_SHIM_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                            int rank) {
  return init_rank(comm, nranks, &commId, rank, NULL, "ncclCommInitRank");
}

NCCL_SHIM_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                  ncclUniqueId commId, int rank,
                                                  ncclConfig_t *config) {
  return init_rank(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}

/*
 * Several ids spread NCCL's bootstrap over several roots. zcc's rendezvous
 * has one root: commIds[0]'s (made by the first rank, whose process serves
 * it); the others' rendezvous threads give up after ZCC_INIT_TIMEOUT.
 */
NCCL_SHIM_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                    int nId, ncclUniqueId *commIds,
                                                    ncclConfig_t *config) {
  static const char fn[] = "ncclCommInitRankScalable";
  zcc_nccl_enter();
  if (nId < 1) return zcc_nccl_error(ncclInvalidArgument, "%s: nId %d must be at least 1", fn, nId);
  if (!commIds) return zcc_nccl_error(ncclInvalidArgument, "%s: commIds is NULL", fn);
  if (nId > 1)
    ZCC_INFO(INIT, "%s: %d ids; zcc's rendezvous uses the first one's root only", fn, nId);
  if (!zcc_nccl_fwd_active) return init_rank(newcomm, nranks, &commIds[0], myrank, config, fn);
  /* With a fallback, a refusal must forward every id: keep the zcc path's rules. */
  if (!newcomm) return zcc_nccl_error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  zccConfig_t zc;
  ncclResult_t nr = config_from_nccl(config, &zc, fn);
  if (nr != ncclSuccess) return nr;
  zccUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(&id, &commIds[0], ZCC_NCCL_ID_HALF);
  zccComm_t zcomm = NULL;
  zccResult_t r = zccCommInitRankConfig(&zcomm, nranks, id, myrank, &zc);
  if (r == zccSuccess) {
    *newcomm = (ncclComm_t)zcomm;
    return ncclSuccess;
  }
  if (!zcc_nccl_fwd_takes(r)) return refused(r, fn);
  char why[1024];
  snprintf(why, sizeof(why), "%s", zccGetLastError(NULL));
  ncclUniqueId fids[64];
  if (nId > 64)
    return zcc_nccl_error(ncclInvalidUsage, "%s: %d ids: the fallback path takes at most 64",
                          fn, nId);
  for (int i = 0; i < nId; i++) {
    nr = zcc_nccl_fwd_id(&commIds[i], &fids[i], fn, why);
    if (nr != ncclSuccess) return nr;
  }
  zcc_nccl_fwd_note(fn, why);
  ncclComm_t fc = NULL;
  nr = ZCC_NCCL_FWD(ncclCommInitRankScalable, NULL, &fc, nranks, myrank, nId, fids, config);
  if (nr != ncclSuccess) return nr;
  zcc_nccl_fwd_add(fc);
  *newcomm = fc;
  return ncclSuccess;
}

NCCL_SHIM_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  static const char fn[] = "ncclCommInitAll";
  zcc_nccl_enter();
  if (!comms) return zcc_nccl_error(ncclInvalidArgument, "%s: comms is NULL", fn);
  /* ncclComm_t and zccComm_t are both one pointer (nccl_abi.c). */
  zccResult_t r = zccCommInitAll((zccComm_t *)comms, ndev, devlist);
  if (r == zccSuccess) return ncclSuccess;
  if (!zcc_nccl_fwd_takes(r)) return refused(r, fn);
  zcc_nccl_fwd_note(fn, zccGetLastError(NULL));
  ncclResult_t nr = ZCC_NCCL_FWD(ncclCommInitAll, NULL, comms, ndev, devlist);
  if (nr != ncclSuccess) return nr;
  for (int i = 0; i < ndev; i++) zcc_nccl_fwd_add(comms[i]);
  return ncclSuccess;
}

NCCL_SHIM_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                         ncclConfig_t *config) {
  static const char fn[] = "ncclCommSplit";
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) {
    ncclResult_t nr = ZCC_NCCL_FWD(ncclCommSplit, comm, comm, color, key, newcomm, config);
    if (nr == ncclSuccess && newcomm && *newcomm) zcc_nccl_fwd_add(*newcomm);
    return nr;
  }
  if (!newcomm) return zcc_nccl_error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  zccConfig_t zc;
  ncclResult_t nr = config_from_nccl(config, &zc, fn);
  if (nr != ncclSuccess) return nr;
  zccComm_t out = NULL;
  zccResult_t r = zccCommSplit((zccComm_t)comm, color, key, &out, config ? &zc : NULL);
  if (r != zccSuccess) return zcc_nccl_comm_result(r, comm, fn);
  *newcomm = (ncclComm_t)out;
  return ncclSuccess;
}

NCCL_SHIM_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                          int excludeRanksCount, ncclComm_t *newcomm,
                                          ncclConfig_t *config, int shrinkFlags) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclCommShrink, comm, comm, excludeRanksList, excludeRanksCount, newcomm,
                        config, shrinkFlags);
  return zcc_nccl_unsupported("ncclCommShrink",
                              "zcc builds new communicators with every rank of the old one "
                              "(ncclCommSplit); it cannot leave out ranks that do not call");
}

/* ---- lifecycle ---- */

NCCL_SHIM_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommFinalize, comm, comm);
  return zcc_nccl_comm_result(zccCommFinalize((zccComm_t)comm), comm, "ncclCommFinalize");
}

NCCL_SHIM_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  zcc_nccl_enter();
  /* NCCL accepts NULL as a no-op. */
  if (!comm) return ncclSuccess;
  if (zcc_nccl_is_fwd(comm)) {
    zcc_nccl_fwd_remove(comm);
    return ZCC_NCCL_FWD(ncclCommDestroy, NULL, comm);
  }
  return zcc_nccl_comm_result(zccCommDestroy((zccComm_t)comm), comm, "ncclCommDestroy");
}

NCCL_SHIM_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  zcc_nccl_enter();
  if (!comm) return ncclSuccess;
  if (zcc_nccl_is_fwd(comm)) {
    zcc_nccl_fwd_remove(comm);
    return ZCC_NCCL_FWD(ncclCommAbort, NULL, comm);
  }
  return zcc_nccl_comm_result(zccCommAbort((zccComm_t)comm), comm, "ncclCommAbort");
}

NCCL_SHIM_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommRevoke, comm, comm, revokeFlags);
  return zcc_nccl_unsupported("ncclCommRevoke", "use ncclCommAbort to stop a zcc communicator");
}

NCCL_SHIM_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm))
    return ZCC_NCCL_FWD(ncclCommGetAsyncError, comm, comm, asyncError);
  if (!asyncError)
    return zcc_nccl_error(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  zccResult_t a = zccSuccess;
  zccResult_t r = zccCommGetAsyncError((zccComm_t)comm, &a);
  if (r != zccSuccess) return zcc_nccl_comm_result(r, comm, "ncclCommGetAsyncError");
  *asyncError = zcc_nccl_result(a);
  return ncclSuccess;
}

/* ---- queries ---- */

NCCL_SHIM_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommCount, comm, comm, count);
  return zcc_nccl_comm_result(zccCommCount((zccComm_t)comm, count), comm, "ncclCommCount");
}

NCCL_SHIM_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommCuDevice, comm, comm, device);
  return zcc_nccl_comm_result(zccCommCuDevice((zccComm_t)comm, device), comm,
                              "ncclCommCuDevice");
}

NCCL_SHIM_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  zcc_nccl_enter();
  if (zcc_nccl_is_fwd(comm)) return ZCC_NCCL_FWD(ncclCommUserRank, comm, comm, rank);
  return zcc_nccl_comm_result(zccCommUserRank((zccComm_t)comm, rank), comm, "ncclCommUserRank");
}
