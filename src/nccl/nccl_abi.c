/*
 * Build-time checks: the nccl.h this library is built against (NCCL 2.28,
 * the CUDA toolkit's) and zcc.h agree wherever the shim passes values
 * through unchanged, and ncclConfig_t has the 2.28 layout the shim reads.
 * Function signatures are checked by the compiler: nccl.h declares every
 * function the shim defines.
 */
#include <stddef.h>

#include "bootstrap.h"
#include "nccl_shim.h"

#if NCCL_MAJOR != 2 || NCCL_MINOR != 28
#error "zcc's libnccl.so.2 speaks NCCL 2.28's ABI; this nccl.h is another version"
#endif

#define SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " != " #b)

/* Results (zccTimeout has no NCCL value; nccl_shim.h maps it). */
SAME(ncclSuccess, zccSuccess);
SAME(ncclUnhandledCudaError, zccUnhandledCudaError);
SAME(ncclSystemError, zccSystemError);
SAME(ncclInternalError, zccInternalError);
SAME(ncclInvalidArgument, zccInvalidArgument);
SAME(ncclInvalidUsage, zccInvalidUsage);
SAME(ncclRemoteError, zccRemoteError);
SAME(ncclInProgress, zccInProgress);
SAME(ncclNumResults, zccTimeout);

/* Datatypes. */
SAME(ncclInt8, zccInt8);
SAME(ncclUint8, zccUint8);
SAME(ncclInt32, zccInt32);
SAME(ncclUint32, zccUint32);
SAME(ncclInt64, zccInt64);
SAME(ncclUint64, zccUint64);
SAME(ncclFloat16, zccFloat16);
SAME(ncclFloat32, zccFloat32);
SAME(ncclFloat64, zccFloat64);
SAME(ncclBfloat16, zccBfloat16);
SAME(ncclFloat8e4m3, zccFloat8e4m3);
SAME(ncclFloat8e5m2, zccFloat8e5m2);
SAME(ncclNumTypes, zccNumTypes);

/* Ops: built-ins, and dynamic ops from ncclNumOps up in both. */
SAME(ncclSum, zccSum);
SAME(ncclProd, zccProd);
SAME(ncclMax, zccMax);
SAME(ncclMin, zccMin);
SAME(ncclAvg, zccAvg);
SAME(ncclNumOps, zccNumOps);
_Static_assert(sizeof(ncclRedOp_t) == sizeof(zccRedOp_t), "ncclRedOp_t's size");
_Static_assert(sizeof(ncclDataType_t) == sizeof(zccDataType_t), "ncclDataType_t's size");
_Static_assert(sizeof(ncclResult_t) == sizeof(zccResult_t), "ncclResult_t's size");
SAME(ncclScalarDevice, zccScalarDevice);
SAME(ncclScalarHostImmediate, zccScalarHostImmediate);

/* Handles and ids. */
_Static_assert(sizeof(ncclComm_t) == sizeof(zccComm_t), "communicator handles");
_Static_assert(sizeof(cudaStream_t) == sizeof(zccStream_t), "streams");
_Static_assert(sizeof(ncclUniqueId) == sizeof(zccUniqueId), "unique ids");
SAME(NCCL_UNIQUE_ID_BYTES, ZCC_UNIQUE_ID_BYTES);
/* zcc's id fits in the first half (the second carries the fallback's). */
_Static_assert(sizeof(zcc_unique_id_t) <= ZCC_NCCL_ID_HALF, "zcc's id in half an NCCL id");
SAME(NCCL_SPLIT_NOCOLOR, ZCC_SPLIT_NOCOLOR);

/* ncclConfig_t as of 2.28 (ncclConfig_v22800). */
_Static_assert(offsetof(ncclConfig_t, size) == 0, "ncclConfig_t.size");
_Static_assert(offsetof(ncclConfig_t, magic) == 8, "ncclConfig_t.magic");
_Static_assert(offsetof(ncclConfig_t, version) == 12, "ncclConfig_t.version");
_Static_assert(offsetof(ncclConfig_t, blocking) == 16, "ncclConfig_t.blocking");
_Static_assert(offsetof(ncclConfig_t, netName) == 32, "ncclConfig_t.netName");
_Static_assert(offsetof(ncclConfig_t, commName) == 48, "ncclConfig_t.commName");
_Static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76,
               "ncclConfig_t.nvlinkCentricSched");
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t's size in 2.28");
SAME(NCCL_CONFIG_UNDEF_INT, ZCC_CONFIG_UNDEF_INT);
_Static_assert(offsetof(ncclSimInfo_t, magic) == 8, "ncclSimInfo_t.magic");
