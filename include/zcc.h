/*
 * zcc: a collective communication library for GPU clusters and hosts.
 *
 * The API mirrors nccl.h with the zcc prefix, same argument order and
 * semantics, so that porting from NCCL is a rename. This is the only
 * installed header.
 *
 * Threads: a communicator takes operations (collectives, send and receive,
 * split) from one thread at a time; a call from a second thread while one
 * is in flight, or queued in that thread's open group, is refused with
 * zccInvalidUsage and changes nothing. Queries, zccCommGetAsyncError,
 * zccCommDump and zccCommAbort may come from any thread. A communicator
 * that met an error fails every later call with that error's cause until
 * it is destroyed or aborted.
 */
#ifndef ZCC_H_
#define ZCC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZCC_MAJOR 0
#define ZCC_MINOR 1
#define ZCC_PATCH 0
/** Encoded version: major * 10000 + minor * 100 + patch. */
#define ZCC_VERSION_CODE (ZCC_MAJOR * 10000 + ZCC_MINOR * 100 + ZCC_PATCH)

#if defined(_WIN32)
#define ZCC_API
#else
#define ZCC_API __attribute__((visibility("default")))
#endif

/**
 * A CUDA stream. Binary- and type-compatible with cudaStream_t, so a caller
 * that includes cuda_runtime.h passes its streams directly. Host
 * communicators ignore it (pass NULL).
 */
struct CUstream_st;
typedef struct CUstream_st *zccStream_t;

/** Opaque communicator handle. */
typedef struct zccComm *zccComm_t;

/** Bytes in a unique id. */
#define ZCC_UNIQUE_ID_BYTES 128
/** Opaque rendezvous token: root address and a 128-bit secret. */
typedef struct {
  char internal[ZCC_UNIQUE_ID_BYTES];
} zccUniqueId;

/**
 * Results. One list generates the enum and zccGetErrorString.
 * X(name, value, description)
 */
#define ZCC_RESULT_MAP(X)                                                      \
  X(zccSuccess, 0, "no error")                                                 \
  X(zccUnhandledCudaError, 1, "unhandled cuda error")                          \
  X(zccSystemError, 2, "unhandled system error")                               \
  X(zccInternalError, 3, "internal error")                                     \
  X(zccInvalidArgument, 4, "invalid argument")                                 \
  X(zccInvalidUsage, 5, "invalid usage")                                       \
  X(zccRemoteError, 6, "remote process exited or there was a network error")   \
  X(zccInProgress, 7, "operation in progress")                                 \
  X(zccTimeout, 8, "operation timed out")

typedef enum {
#define ZCC_RESULT_ENUM_(name, value, desc) name = value,
  ZCC_RESULT_MAP(ZCC_RESULT_ENUM_)
#undef ZCC_RESULT_ENUM_
  zccNumResults
} zccResult_t;

/** Data types; values match ncclDataType_t. */
typedef enum {
  zccInt8 = 0,
  zccChar = 0,
  zccUint8 = 1,
  zccInt32 = 2,
  zccInt = 2,
  zccUint32 = 3,
  zccInt64 = 4,
  zccUint64 = 5,
  zccFloat16 = 6,
  zccHalf = 6,
  zccFloat32 = 7,
  zccFloat = 7,
  zccFloat64 = 8,
  zccDouble = 8,
  zccBfloat16 = 9,
  zccFloat8e4m3 = 10,
  zccFloat8e5m2 = 11,
  zccNumTypes = 12
} zccDataType_t;

/**
 * Reduction operations; values match ncclRedOp_t. fp16, bf16 and fp8 are
 * reduced with fp32 arithmetic per element. zccAvg divides the sum by the
 * number of ranks (integer types: truncating division). Values from
 * zccNumOps up are pre-multiplied sums made by zccRedOpCreatePreMulSum.
 */
typedef enum {
  zccSum = 0,
  zccProd = 1,
  zccMax = 2,
  zccMin = 3,
  zccAvg = 4,
  zccNumOps = 5
} zccRedOp_t;

/**
 * Where the scalar of a pre-multiplied sum lives; values match
 * ncclScalarResidence_t.
 */
typedef enum {
  /**
   * Memory the collective reads when it runs, so the caller may change the
   * value between calls (host communicators: host memory, read at each call).
   */
  zccScalarDevice = 0,
  /** Host memory, read once by zccRedOpCreatePreMulSum. */
  zccScalarHostImmediate = 1
} zccScalarResidence_t;

/** Where a communicator lives. */
typedef enum {
  /** A CUDA GPU where one exists and zcc's GPU path is built, else the host. */
  zccDeviceAuto = 0,
  /** Host memory: every collective runs on CPU buffers. */
  zccDeviceHost = 1,
  /** A CUDA GPU (the current device of the calling thread). */
  zccDeviceCuda = 2
} zccDeviceType_t;

#define ZCC_CONFIG_UNDEF_INT INT32_MIN
#define ZCC_CONFIG_UNDEF_PTR NULL

/**
 * Communicator configuration. Begins with its size so that it can grow;
 * always initialise with ZCC_CONFIG_INITIALIZER. A field left undefined
 * takes its environment variable's value, then its default.
 */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  /**
   * 1 (default): zccCommInitRankConfig returns once the communicator is
   * ready. 0: it checks the arguments, returns zccInProgress with *comm set
   * and builds the communicator on a thread of its own; poll
   * zccCommGetAsyncError until it is not zccInProgress (zccSuccess: ready;
   * an error: the init failed, destroy the handle). Meanwhile
   * zccCommGetAsyncError, zccCommCount and zccCommUserRank answer, every
   * other call returns zccInProgress, and zccCommAbort or zccCommDestroy
   * stop the init (within its next wait) and free it. A GPU communicator
   * uses the device current in the calling thread. Other calls complete
   * before they return whatever this says (which NCCL allows).
   */
  int blocking;
  /** zccDeviceType_t; undefined: ZCC_DEVICE, else auto. */
  int deviceType;
  /** Collective timeout in milliseconds; undefined: ZCC_TIMEOUT. */
  int timeoutMs;
  /** Name shown in logs; undefined: none. */
  const char *commName;
} zccConfig_t;

#define ZCC_CONFIG_MAGIC 0x7a636366u
#define ZCC_CONFIG_INITIALIZER                                                 \
  {                                                                            \
    sizeof(zccConfig_t), ZCC_CONFIG_MAGIC, ZCC_VERSION_CODE,                   \
        ZCC_CONFIG_UNDEF_INT, ZCC_CONFIG_UNDEF_INT, ZCC_CONFIG_UNDEF_INT,      \
        ZCC_CONFIG_UNDEF_PTR                                                   \
  }

/** Split colour that leaves a rank out of every new communicator. */
#define ZCC_SPLIT_NOCOLOR (-1)

/** Library version as ZCC_VERSION_CODE. */
ZCC_API zccResult_t zccGetVersion(int *version);

/**
 * Create a unique id: opens a listening socket (ZCC_SOCKET_IFNAME chooses the
 * interface; ZCC_COMM_ID=host:port a fixed address) and draws a random
 * secret. The calling process serves the rendezvous, from a thread it
 * starts here, until every rank of the communicator has arrived or
 * ZCC_INIT_TIMEOUT passes. Give the id to every rank out of band. A process
 * that forks its ranks should fork them before this call: a fork taken while
 * another thread allocates memory is unsafe with some allocators (ASan's).
 */
ZCC_API zccResult_t zccGetUniqueId(zccUniqueId *uniqueId);

/** Create rank `rank` of an `nranks` communicator; collective across ranks. */
ZCC_API zccResult_t zccCommInitRank(zccComm_t *comm, int nranks,
                                    zccUniqueId commId, int rank);

/** As zccCommInitRank, with a configuration (NULL: defaults). */
ZCC_API zccResult_t zccCommInitRankConfig(zccComm_t *comm, int nranks,
                                          zccUniqueId commId, int rank,
                                          zccConfig_t *config);

/**
 * Create `ndev` communicators in one process, one per entry of devlist. For
 * GPU communicators devlist names CUDA devices (NULL: 0..ndev-1); a device
 * may appear more than once, and its ranks then share the GPU (NCCL refuses
 * that; zcc allows it, in one process and across processes). For host
 * communicators (ZCC_DEVICE=host or no GPU) it is ignored.
 */
ZCC_API zccResult_t zccCommInitAll(zccComm_t *comms, int ndev,
                                   const int *devlist);

/**
 * Create a communicator from a launcher's environment: torchrun (RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI's and MPICH's mpirun, and
 * Slurm's srun. ZCC_COMM_ID=host:port overrides the rendezvous address and
 * ZCC_COMM_SECRET (32 hex digits) the shared secret; see the README.
 */
ZCC_API zccResult_t zccCommInitFromEnv(zccComm_t *comm, zccConfig_t *config);

/**
 * Split `comm` by colour; ranks with equal colour form a new communicator,
 * ordered by key then by old rank. ZCC_SPLIT_NOCOLOR yields *newcomm NULL.
 * Collective across every rank of comm. config NULL: inherit comm's.
 */
ZCC_API zccResult_t zccCommSplit(zccComm_t comm, int color, int key,
                                 zccComm_t *newcomm, zccConfig_t *config);

/** Finish outstanding work; the communicator must still be destroyed. */
ZCC_API zccResult_t zccCommFinalize(zccComm_t comm);

/**
 * Free the communicator. A call blocked on it in another thread gives up at
 * once; inside a group with operations queued on it, zccInvalidUsage (end
 * the group first, or abort).
 */
ZCC_API zccResult_t zccCommDestroy(zccComm_t comm);

/**
 * Abort and free: operations in progress on the communicator, also in other
 * threads, return zccRemoteError; any thread may call it.
 */
ZCC_API zccResult_t zccCommAbort(zccComm_t comm);

/** The first error the communicator met (zccSuccess if none); when it is an
 * error, this thread's zccGetLastError becomes that error's message. */
ZCC_API zccResult_t zccCommGetAsyncError(zccComm_t comm,
                                         zccResult_t *asyncError);

/**
 * Write the communicator's flight recorder (its last
 * ZCC_FLIGHT_RECORDER_ENTRIES operations with their state: enqueued,
 * started, done, failed) as JSON to `path`; "%h", "%p" and "%r" become the
 * host name, pid and rank. path NULL: ZCC_FLIGHT_RECORDER_FILE
 * (zccInvalidArgument when that is unset too). Any thread may call it, also
 * while another is stuck in a collective on comm; a communicator in error
 * state can still be dumped. zcc itself dumps there on timeout, error or
 * abort, and on SIGUSR1 with ZCC_FLIGHT_RECORDER_SIGNAL=1. `zcc_trace
 * report` reads the dumps of every rank (see the README).
 */
ZCC_API zccResult_t zccCommDump(zccComm_t comm, const char *path);

/**
 * A user marker in the process's trace (ZCC_TRACE_FILE; nothing when it is
 * off): begin != 0 opens a span of category `kind` named `name`, begin == 0
 * closes the innermost open span of that thread. `zcc_trace heatmap`
 * reads the kinds "step" and "compute" (python: zcc.torch.step() and
 * zcc.torch.compute()).
 */
ZCC_API zccResult_t zccTraceMark(const char *kind, const char *name, int begin);

/** Text for a result code. */
ZCC_API const char *zccGetErrorString(zccResult_t result);

/** The last error message recorded in this thread (comm may be NULL). */
ZCC_API const char *zccGetLastError(zccComm_t comm);

/**
 * List zcc's ZCC_* parameters: index 0, 1, ... until zccInvalidArgument.
 * name excludes the ZCC_ prefix; value is the current value as text.
 * Pointers stay valid for the life of the process.
 */
ZCC_API zccResult_t zccGetParam(int index, const char **name,
                                const char **value, const char **defaultValue,
                                const char **help);

/** Number of ranks. */
ZCC_API zccResult_t zccCommCount(const zccComm_t comm, int *count);
/** CUDA device of the communicator; -1 for a host communicator. */
ZCC_API zccResult_t zccCommCuDevice(const zccComm_t comm, int *device);
/** Rank of the caller in the communicator. */
ZCC_API zccResult_t zccCommUserRank(const zccComm_t comm, int *rank);

/**
 * Register a buffer with the communicator so that peers can reach it
 * directly. Host communicators accept host memory; device memory needs a
 * GPU communicator. On a host communicator, ordinary memory (private
 * anonymous, as from malloc) becomes shared memory that the host's ranks map:
 * its whole pages are moved into a memfd mapped at the same addresses, its
 * bytes kept, so an allreduce of 1 MiB or more on registered buffers on
 * every rank runs in place, as on zccMemHostAlloc memory. Other memory (a
 * file or shared mapping, read-only pages, memory CUDA has pinned) is only
 * recorded. Do not register memory that another device has pinned by other
 * means (an RDMA memory region): its pages would move under it. Until
 * zccCommDeregister gives the range back its private pages, a forked child
 * shares them; do not free the buffer before deregistering it.
 */
ZCC_API zccResult_t zccCommRegister(const zccComm_t comm, void *buff,
                                    size_t size, void **handle);
/** Undo zccCommRegister. */
ZCC_API zccResult_t zccCommDeregister(const zccComm_t comm, void *handle);

/** Allocate device memory suited to zero-copy collectives (GPU only). */
ZCC_API zccResult_t zccMemAlloc(void **ptr, size_t size);
/** Free memory from zccMemAlloc. */
ZCC_API zccResult_t zccMemFree(void *ptr);

/**
 * Allocate host memory that the ranks of a host communicator on this
 * machine can reach in place (a memfd, mapped shared; size rounded up to a
 * page). An allreduce of ZCC_HOSTMEM_MIN_BYTES (1 MiB) or more whose send
 * and receive buffers lie in such memory on every rank reads the peers'
 * inputs and writes their outputs directly, with no staging copy; other
 * buffers are staged as before. A forked child shares the pages with its
 * parent. Free with zccMemHostFree.
 */
ZCC_API zccResult_t zccMemHostAlloc(void **ptr, size_t size);
/** Free memory from zccMemHostAlloc. */
ZCC_API zccResult_t zccMemHostFree(void *ptr);

/**
 * Create a pre-multiplied sum on comm: every rank's input is multiplied by
 * the scalar (one element of datatype), then the products are summed, as
 * ncclRedOpCreatePreMulSum. Each product is rounded to datatype (fp16, bf16
 * and fp8: computed in fp32); integers wrap. The op is a value from
 * zccNumOps upwards, valid for collectives of datatype on comm only, until
 * zccRedOpDestroy. zccScalarDevice: host communicators read the scalar at
 * each call; GPU communicators read it from device memory in the kernel.
 * GPU communicators run it in zccAllReduce only for now (the input is scaled
 * into recvbuff, then summed in place); their other reductions refuse it
 * with zccInvalidUsage.
 */
ZCC_API zccResult_t zccRedOpCreatePreMulSum(zccRedOp_t *op, void *scalar,
                                            zccDataType_t datatype,
                                            zccScalarResidence_t residence,
                                            zccComm_t comm);
/** Free an op made by zccRedOpCreatePreMulSum on comm. */
ZCC_API zccResult_t zccRedOpDestroy(zccRedOp_t op, zccComm_t comm);

/* Collectives: count is in elements of datatype, as in NCCL. */
ZCC_API zccResult_t zccAllReduce(const void *sendbuff, void *recvbuff,
                                 size_t count, zccDataType_t datatype,
                                 zccRedOp_t op, zccComm_t comm,
                                 zccStream_t stream);
ZCC_API zccResult_t zccBroadcast(const void *sendbuff, void *recvbuff,
                                 size_t count, zccDataType_t datatype,
                                 int root, zccComm_t comm, zccStream_t stream);
ZCC_API zccResult_t zccReduce(const void *sendbuff, void *recvbuff,
                              size_t count, zccDataType_t datatype,
                              zccRedOp_t op, int root, zccComm_t comm,
                              zccStream_t stream);
/** recvbuff holds nranks * sendcount elements. */
ZCC_API zccResult_t zccAllGather(const void *sendbuff, void *recvbuff,
                                 size_t sendcount, zccDataType_t datatype,
                                 zccComm_t comm, zccStream_t stream);
/** sendbuff holds nranks * recvcount elements. */
ZCC_API zccResult_t zccReduceScatter(const void *sendbuff, void *recvbuff,
                                     size_t recvcount, zccDataType_t datatype,
                                     zccRedOp_t op, zccComm_t comm,
                                     zccStream_t stream);
/** Both buffers hold nranks * count elements; block j goes to rank j. */
ZCC_API zccResult_t zccAlltoAll(const void *sendbuff, void *recvbuff,
                                size_t count, zccDataType_t datatype,
                                zccComm_t comm, zccStream_t stream);
ZCC_API zccResult_t zccSend(const void *sendbuff, size_t count,
                            zccDataType_t datatype, int peer, zccComm_t comm,
                            zccStream_t stream);
ZCC_API zccResult_t zccRecv(void *recvbuff, size_t count,
                            zccDataType_t datatype, int peer, zccComm_t comm,
                            zccStream_t stream);
/**
 * Receive count elements from whichever other rank's message arrives first,
 * and set *peer to that rank (MPI_ANY_SOURCE; not in NCCL). The sender calls
 * zccSend as usual. When messages from several ranks are waiting, the lowest
 * rank's is taken. Host communicators only (zccInvalidUsage on a GPU
 * communicator), outside groups (zccInvalidUsage inside one), count > 0 (an
 * empty message cannot be seen arriving). Waits like zccRecv: ZCC_TIMEOUT,
 * zccCommAbort and a peer's death end the wait with an error. Messages
 * carry no tags: whatever a rank sends the caller next on this
 * communicator is taken for a message, so while the caller waits no rank
 * may be in a collective with it there. Keep a communicator for
 * point-to-point traffic (the torch backend does) or order the calls.
 */
ZCC_API zccResult_t zccRecvAny(void *recvbuff, size_t count,
                               zccDataType_t datatype, int *peer,
                               zccComm_t comm, zccStream_t stream);

/**
 * Group calls: operations issued between zccGroupStart and zccGroupEnd are
 * launched together at zccGroupEnd, so send/recv pairs that would deadlock
 * one by one complete. Groups nest.
 */
ZCC_API zccResult_t zccGroupStart(void);
ZCC_API zccResult_t zccGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif /* ZCC_H_ */
