/*
 * Algorithm choice for host communicators, behind the planner's interface.
 * Direct (all-pairs, one round) wins on latency for small messages; the
 * ring wins on bandwidth once the per-rank volume dominates.
 */
#include <strings.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "planner.h"


const char *zcc_coll_name(zcc_coll_t coll) {
  static const char *names[] = {"allreduce", "broadcast",     "reduce",  "allgather",
                                "reducescatter", "alltoall", "sendrecv"};
  return coll >= 0 && coll < ZCC_COLL_COUNT ? names[coll] : "invalid";
}

const char *zcc_algo_name(zcc_algo_t algo) {
  return algo == ZCC_ALGO_DIRECT ? "direct" : algo == ZCC_ALGO_RING ? "ring" : "invalid";
}

zccResult_t zcc_tuning_choice(int nranks, int nnodes, zcc_coll_t coll, size_t bytes,
                              zcc_algo_t *algo, double *times) {
  if (times) times[ZCC_ALGO_DIRECT] = times[ZCC_ALGO_RING] = 0;
  /* Alltoall and point-to-point are all-pairs by nature. */
  if (coll == ZCC_COLL_ALLTOALL || coll == ZCC_COLL_SENDRECV) {
    *algo = ZCC_ALGO_DIRECT;
    return zccSuccess;
  }
  /* The cost model, with constants measured for shared memory and TCP: not
     consulted for a forced choice unless the caller wants the predictions. */
  const char *forced = zcc_planner_algo_override();
  int is_forced = forced && *forced;
  zcc_algo_t model = ZCC_ALGO_DIRECT;
  if (!is_forced || times)
    ZCC_CHECK(zcc_planner_host_model(nranks, nnodes > 0 ? nnodes : 1, coll, bytes, &model, times));
  if (is_forced) {
    if (strcasecmp(forced, "direct") == 0 || strcasecmp(forced, "oneshot") == 0)
      *algo = ZCC_ALGO_DIRECT;
    else if (strcasecmp(forced, "ring") == 0)
      *algo = ZCC_ALGO_RING;
    else
      return zcc_error(zccInvalidArgument,
                       "ZCC_ALGO=%s: host communicators run 'direct' (or 'oneshot') or "
                       "'ring'", forced);
    return zccSuccess;
  }
  *algo = model;
  return zccSuccess;
}

zccResult_t zcc_tuning_pick(const struct zccComm *comm, zcc_coll_t coll, size_t bytes,
                            zcc_algo_t *algo) {
  ZCC_CHECK(zcc_tuning_choice(comm->nranks, comm->nnodes, coll, bytes, algo, NULL));
  ZCC_TRACE(TUNING, "%s of %zu bytes on %d ranks: %s", zcc_coll_name(coll), bytes,
            comm->nranks, zcc_algo_name(*algo));
  return zccSuccess;
}
