/*
 * zcc's libnccl.so.2: NCCL's API and ABI (2.28, the toolkit's nccl.h) over
 * zcc.h. The shim is the top layer: it calls zcc's API (and, for error
 * messages and the environment, a few internal helpers); nothing calls it.
 *
 *   nccl_api.c       versions, errors, ids, init, split, lifecycle, queries
 *   nccl_coll.c      collectives, send/recv, groups, ops, memory, windows
 *   nccl_env.c       NCCL_* variables read as ZCC_* ones; the first-call log
 *   nccl_fallback.c  ZCC_NCCL_FALLBACK: communicators zcc refuses go to NCCL
 *   nccl_abi.c       build-time checks of nccl.h against zcc.h
 *
 * A communicator that zcc serves is handed out as its zccComm_t, cast; one
 * that went to the fallback NCCL is that library's own handle, and the
 * fallback's registry says which is which.
 */
#ifndef ZCC_NCCL_SHIM_H_
#define ZCC_NCCL_SHIM_H_

#include <nccl.h>

#include "zcc.h"

/* nccl.h's declarations carry no visibility: the version script exports. */
#define NCCL_SHIM_API __attribute__((visibility("default")))

/* NCCL_CONFIG_INITIALIZER's magic. */
#define NCCL_SHIM_CONFIG_MAGIC 0xcafebeefu
/* NCCL_SIM_INFO_INITIALIZER's magic. */
#define NCCL_SHIM_SIMINFO_MAGIC 0x74685283u

/* Once per process, before anything else: the environment and the log line. */
void zcc_nccl_init(void);
extern int zcc_nccl_ready;
static inline void zcc_nccl_enter(void) {
  if (!__atomic_load_n(&zcc_nccl_ready, __ATOMIC_ACQUIRE)) zcc_nccl_init();
}

/* NCCL's result for zcc's (zccTimeout has no NCCL value: ncclRemoteError). */
static inline ncclResult_t zcc_nccl_result(zccResult_t r) {
  return r == zccTimeout ? ncclRemoteError : (ncclResult_t)r;
}

/*
 * The result of a zcc call made for NCCL entry `fn` on comm: on failure,
 * a communicator that is not zcc's gets a message saying so.
 */
ncclResult_t zcc_nccl_comm_result(zccResult_t r, const void *comm, const char *fn);

/* Record `fmt` as the last error (ncclGetLastError) and return `res`. */
ncclResult_t zcc_nccl_error(ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* An entry zcc cannot serve: ncclInvalidUsage, naming it and why. */
ncclResult_t zcc_nccl_unsupported(const char *fn, const char *why);

/* ---- the fallback NCCL (nccl_fallback.c) ---- */

/* Every NCCL function the shim may forward. */
#define ZCC_NCCL_FWD_LIST(X)                                                   \
  X(ncclGetVersion)                                                            \
  X(ncclGetUniqueId)                                                           \
  X(ncclCommInitRank)                                                          \
  X(ncclCommInitRankConfig)                                                    \
  X(ncclCommInitRankScalable)                                                  \
  X(ncclCommInitAll)                                                           \
  X(ncclCommSplit)                                                             \
  X(ncclCommShrink)                                                            \
  X(ncclCommFinalize)                                                          \
  X(ncclCommDestroy)                                                           \
  X(ncclCommAbort)                                                             \
  X(ncclCommRevoke)                                                            \
  X(ncclCommGetAsyncError)                                                     \
  X(ncclGetLastError)                                                          \
  X(ncclCommCount)                                                             \
  X(ncclCommCuDevice)                                                          \
  X(ncclCommUserRank)                                                          \
  X(ncclCommRegister)                                                          \
  X(ncclCommDeregister)                                                        \
  X(ncclCommWindowRegister)                                                    \
  X(ncclCommWindowDeregister)                                                  \
  X(ncclRedOpCreatePreMulSum)                                                  \
  X(ncclRedOpDestroy)                                                          \
  X(ncclAllReduce)                                                             \
  X(ncclBroadcast)                                                             \
  X(ncclBcast)                                                                 \
  X(ncclReduce)                                                                \
  X(ncclAllGather)                                                             \
  X(ncclReduceScatter)                                                         \
  X(ncclAlltoAll)                                                              \
  X(ncclGather)                                                                \
  X(ncclScatter)                                                               \
  X(ncclSend)                                                                  \
  X(ncclRecv)                                                                  \
  X(ncclGroupStart)                                                            \
  X(ncclGroupEnd)                                                              \
  X(ncclGroupSimulateEnd)

typedef struct zcc_nccl_fwd {
#define ZCC_NCCL_FWD_FIELD_(fn) __typeof__(fn) *fn;
  ZCC_NCCL_FWD_LIST(ZCC_NCCL_FWD_FIELD_)
#undef ZCC_NCCL_FWD_FIELD_
} zcc_nccl_fwd_t;

/* Set once the fallback library is loaded (ZCC_NCCL_FALLBACK). */
extern int zcc_nccl_fwd_active;
extern zcc_nccl_fwd_t zcc_nccl_fwd;
/* Load ZCC_NCCL_FALLBACK if set (from zcc_nccl_init). */
void zcc_nccl_fwd_load(void);
/* The file loaded, for messages. */
const char *zcc_nccl_fwd_path(void);

/* Communicators made by the fallback. */
int zcc_nccl_fwd_owns(const void *comm);
void zcc_nccl_fwd_add(ncclComm_t comm);
void zcc_nccl_fwd_remove(ncclComm_t comm);
static inline int zcc_nccl_is_fwd(const void *comm) {
  return zcc_nccl_fwd_active && comm && zcc_nccl_fwd_owns(comm);
}

/* A forwarded call; a function the fallback lacks is ncclInvalidUsage. */
ncclResult_t zcc_nccl_fwd_missing(const char *fn);
/* The fallback's result for `fn`, its message copied to ncclGetLastError. */
ncclResult_t zcc_nccl_fwd_result(ncclResult_t r, ncclComm_t comm, const char *fn);
#define ZCC_NCCL_FWD(fn, comm, ...)                                            \
  (zcc_nccl_fwd.fn ? zcc_nccl_fwd_result(zcc_nccl_fwd.fn(__VA_ARGS__), comm, #fn) \
                   : zcc_nccl_fwd_missing(#fn))

/*
 * Unique ids with the fallback loaded carry both: zcc's in the first half,
 * the fallback's (its first 64 bytes; the rest must be zero) in the second.
 */
#define ZCC_NCCL_ID_HALF 64
/* The fallback's id from a packed one; ncclInvalidUsage if it has none. */
ncclResult_t zcc_nccl_fwd_id(const ncclUniqueId *packed, ncclUniqueId *out, const char *fn,
                             const char *why);
/* Make a fallback id and pack it into the second half of id. */
ncclResult_t zcc_nccl_fwd_pack_id(ncclUniqueId *id);

/*
 * Whether a refused zcc init goes to the fallback: it is loaded, and zcc's
 * result says zcc cannot serve this layout (zccInvalidUsage).
 */
static inline int zcc_nccl_fwd_takes(zccResult_t r) {
  return zcc_nccl_fwd_active && r == zccInvalidUsage;
}
/* Log that `fn` went to the fallback because zcc said `why`. */
void zcc_nccl_fwd_note(const char *fn, const char *why);

#endif /* ZCC_NCCL_SHIM_H_ */
