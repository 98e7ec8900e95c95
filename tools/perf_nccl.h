/*
 * NCCL for --compare nccl, loaded at run time (perf_nccl.c): no nccl.h and
 * no link-time dependency. The benchmarks build without NCCL and run without
 * it unless --compare nccl asks for it.
 */
#ifndef ZCC_PERF_NCCL_H_
#define ZCC_PERF_NCCL_H_

#include "perf.h"

/*
 * dlopen NCCL (ZCC_NCCL_LIB, else libnccl.so.2, else libnccl.so), resolve
 * its functions and check that it can run coll with the type and op of
 * opts when both are named (with -d all or -o all, the pairs NCCL lacks
 * are skipped: see perf_nccl_gaps).
 * Prints the cause and returns PERF_EXIT_USAGE when it cannot (quiet: only
 * returns it); PERF_EXIT_OK otherwise. Loads once per process.
 */
int perf_nccl_load(const char *prog, const perf_coll_t *coll, const perf_opts_t *opts,
                   int quiet);
/* After a successful load: NCCL's version code, and the file it came from. */
int perf_nccl_version(void);
const char *perf_nccl_path(void);
/* Major, minor and patch of a version code (old 1000s and new 10000s encodings). */
int perf_nccl_major(int code);
int perf_nccl_minor(int code);
int perf_nccl_patch(int code);

/* NCCL runs zcc type with op (PERF_OP_NONE: no op). */
int perf_nccl_supports(int type, int op);
/* NCCL can run coll in place (not alltoall, not send/recv: their buffers would race). */
int perf_nccl_runs_in_place(const perf_coll_t *coll);
/* What of coll's sweep under opts NCCL does not run, as text in buf; returns how many. */
int perf_nccl_gaps(const perf_coll_t *coll, const perf_opts_t *opts, char *buf, size_t len);

/* Each of these prints the NCCL error and leaves (perf_abort(1)) on failure. */
void perf_nccl_get_unique_id(const perf_world_t *w, char id[PERF_ID_BYTES]);
/* Local rank l's communicator, as global rank `rank`; the caller set its device. */
void perf_nccl_init_rank(perf_world_t *w, int l, const char id[PERF_ID_BYTES], int rank);
/* Every local rank's communicator in one call (one process holds all ranks). */
void perf_nccl_init_all(perf_world_t *w);
void perf_nccl_destroy_all(perf_world_t *w);
void perf_nccl_group_start(const perf_world_t *w);
void perf_nccl_group_end(const perf_world_t *w);
/* The collective of call through NCCL; call->nccl_comm and call->stream are used. */
void perf_nccl_run(const perf_world_t *w, const perf_coll_t *coll, const perf_call_t *call);
/* ncclCommRegister, when this NCCL has it: 0 when it has not (nothing done). */
int perf_nccl_register(const perf_world_t *w, int l, void *buf, size_t bytes, void **handle);
void perf_nccl_deregister(const perf_world_t *w, int l, void *handle);

#endif /* ZCC_PERF_NCCL_H_ */
