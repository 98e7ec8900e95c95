/*
 * ZCC_NCCL_FALLBACK=/path/libnccl.so.2: a real NCCL, loaded at the first
 * NCCL call, that takes the communicators zcc refuses (a layout zcc's GPU
 * path cannot run: ranks sharing a GPU, GPUs across hosts, no peer
 * access). The decision is per communicator, at creation; every later call
 * on a forwarded communicator goes to that library. Unique ids carry both
 * libraries' ids, so every rank can take either path.
 *
 * The library is opened RTLD_LOCAL | RTLD_DEEPBIND: its own internal calls
 * of nccl* functions must reach itself, not this shim (ASan cannot run
 * DEEPBIND libraries, nor TSan; their builds open it without).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "nccl_shim.h"
#include "param.h"

ZCC_PARAM_STR(nccl_fallback, "NCCL_FALLBACK", NULL,
              "NCCL shim (libnccl.so.2 built from zcc): a real libnccl.so.2 that "
              "takes the communicators zcc refuses; unset: those are errors")

int zcc_nccl_fwd_active;
zcc_nccl_fwd_t zcc_nccl_fwd;
static char fwd_path[4096];
static int fwd_version;

const char *zcc_nccl_fwd_path(void) { return fwd_path; }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FWD_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#else
#define FWD_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
#endif

void zcc_nccl_fwd_load(void) {
  const char *path = zcc_param_nccl_fallback();
  if (!path || !*path) return;
  void *h = dlopen(path, FWD_DLOPEN_FLAGS);
  if (!h) {
    ZCC_WARN("ZCC_NCCL_FALLBACK=%s cannot be loaded: %s; communicators zcc refuses are errors",
             path, dlerror());
    return;
  }
  /* The shim itself (a path to this very library) would forward to itself. */
  if (dlsym(h, "ncclGetVersion") == (void *)ncclGetVersion) {
    ZCC_WARN("ZCC_NCCL_FALLBACK=%s is zcc, not NCCL; no fallback", path);
    dlclose(h);
    return;
  }
#define ZCC_NCCL_FWD_SYM_(fn) *(void **)&zcc_nccl_fwd.fn = dlsym(h, #fn);
  ZCC_NCCL_FWD_LIST(ZCC_NCCL_FWD_SYM_)
#undef ZCC_NCCL_FWD_SYM_
  if (!zcc_nccl_fwd.ncclGetVersion || !zcc_nccl_fwd.ncclGetUniqueId ||
      !zcc_nccl_fwd.ncclCommInitRank || !zcc_nccl_fwd.ncclCommDestroy) {
    ZCC_WARN("ZCC_NCCL_FALLBACK=%s lacks ncclGetVersion, ncclGetUniqueId, ncclCommInitRank or "
             "ncclCommDestroy: not an NCCL; no fallback", path);
    memset(&zcc_nccl_fwd, 0, sizeof(zcc_nccl_fwd));
    dlclose(h);
    return;
  }
  zcc_nccl_fwd.ncclGetVersion(&fwd_version);
  snprintf(fwd_path, sizeof(fwd_path), "%s", path);
  /* The handle stays open for the life of the process. */
  __atomic_store_n(&zcc_nccl_fwd_active, 1, __ATOMIC_RELEASE);
  ZCC_INFO(INIT, "ZCC_NCCL_FALLBACK: NCCL %d from %s takes the communicators zcc refuses",
           fwd_version, path);
}

ncclResult_t zcc_nccl_fwd_missing(const char *fn) {
  return zcc_nccl_error(ncclInvalidUsage, "%s: the fallback NCCL (%s) has no %s", fn, fwd_path,
                        fn);
}

ncclResult_t zcc_nccl_fwd_result(ncclResult_t r, ncclComm_t comm, const char *fn) {
  if (r == ncclSuccess || r == ncclInProgress) return r;
  const char *msg = zcc_nccl_fwd.ncclGetLastError ? zcc_nccl_fwd.ncclGetLastError(comm) : NULL;
  const char *str = zcc_nccl_fwd.ncclGetLastError ? "" : "no message";
  return zcc_nccl_error(r, "%s (fallback NCCL %s): %s", fn, fwd_path, msg && *msg ? msg : str);
}

void zcc_nccl_fwd_note(const char *fn, const char *why) {
  ZCC_INFO(INIT, "%s: zcc refused the communicator (%s); it goes to the fallback NCCL %d at %s",
           fn, why, fwd_version, fwd_path);
}

/* ---- forwarded communicators: a small set under a lock ---- */

static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;
static const void **set;
static size_t set_len, set_cap;

int zcc_nccl_fwd_owns(const void *comm) {
  int found = 0;
  pthread_mutex_lock(&set_lock);
  for (size_t i = 0; i < set_len && !found; i++) found = set[i] == comm;
  pthread_mutex_unlock(&set_lock);
  return found;
}

void zcc_nccl_fwd_add(ncclComm_t comm) {
  if (!comm) return;
  pthread_mutex_lock(&set_lock);
  if (set_len == set_cap) {
    size_t cap = set_cap ? set_cap * 2 : 16;
    const void **grown = realloc(set, cap * sizeof(*grown));
    if (!grown) abort(); /* a few pointers: out of memory here is fatal */
    set = grown;
    set_cap = cap;
  }
  set[set_len++] = comm;
  pthread_mutex_unlock(&set_lock);
}

void zcc_nccl_fwd_remove(ncclComm_t comm) {
  pthread_mutex_lock(&set_lock);
  for (size_t i = 0; i < set_len; i++)
    if (set[i] == comm) {
      set[i] = set[--set_len];
      break;
    }
  pthread_mutex_unlock(&set_lock);
}

/* ---- ids ---- */

ncclResult_t zcc_nccl_fwd_pack_id(ncclUniqueId *id) {
  ncclUniqueId fid;
  memset(&fid, 0, sizeof(fid));
  ncclResult_t r = zcc_nccl_fwd.ncclGetUniqueId(&fid);
  if (r != ncclSuccess) return zcc_nccl_fwd_result(r, NULL, "ncclGetUniqueId");
  for (int i = ZCC_NCCL_ID_HALF; i < NCCL_UNIQUE_ID_BYTES; i++)
    if (fid.internal[i])
      return zcc_nccl_error(ncclInternalError,
                            "ncclGetUniqueId: the fallback NCCL's id uses more than %d bytes; "
                            "it cannot travel beside zcc's", ZCC_NCCL_ID_HALF);
  memcpy(id->internal + ZCC_NCCL_ID_HALF, fid.internal, ZCC_NCCL_ID_HALF);
  return ncclSuccess;
}

ncclResult_t zcc_nccl_fwd_id(const ncclUniqueId *packed, ncclUniqueId *out, const char *fn,
                             const char *why) {
  int any = 0;
  for (int i = ZCC_NCCL_ID_HALF; i < NCCL_UNIQUE_ID_BYTES && !any; i++)
    any = packed->internal[i] != 0;
  if (!any)
    return zcc_nccl_error(ncclInvalidUsage,
                          "%s: zcc refused the communicator (%s), and the unique id holds no "
                          "id of the fallback NCCL: set ZCC_NCCL_FALLBACK in the process that "
                          "calls ncclGetUniqueId too",
                          fn, why);
  memset(out, 0, sizeof(*out));
  memcpy(out->internal, packed->internal + ZCC_NCCL_ID_HALF, ZCC_NCCL_ID_HALF);
  return ncclSuccess;
}
