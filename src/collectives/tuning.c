/*
 * Algorithm choice for host communicators, behind the planner's interface.
 * Direct (all-pairs, one round) wins on latency for small messages; the
 * ring wins on bandwidth once the per-rank volume dominates.
 */
#include <strings.h>

#include "check.h"
#include "coll.h"
#include "debug.h"
#include "param.h"

ZCC_PARAM_STR(algo, "ALGO", NULL, "force an algorithm: direct or ring")
ZCC_PARAM_INT(direct_max_bytes, "DIRECT_MAX_BYTES", 65536,
              "host communicators: largest message (bytes per rank) that takes "
              "the direct all-pairs algorithm rather than the ring")

const char *zcc_coll_name(zcc_coll_t coll) {
  static const char *names[] = {"allreduce", "broadcast",     "reduce",  "allgather",
                                "reducescatter", "alltoall", "sendrecv"};
  return coll >= 0 && coll < ZCC_COLL_COUNT ? names[coll] : "invalid";
}

const char *zcc_algo_name(zcc_algo_t algo) {
  return algo == ZCC_ALGO_DIRECT ? "direct" : algo == ZCC_ALGO_RING ? "ring" : "invalid";
}

zccResult_t zcc_tuning_pick(const struct zccComm *comm, zcc_coll_t coll, size_t bytes,
                            zcc_algo_t *algo) {
  /* Alltoall and point-to-point are all-pairs by nature. */
  if (coll == ZCC_COLL_ALLTOALL || coll == ZCC_COLL_SENDRECV) {
    *algo = ZCC_ALGO_DIRECT;
    return zccSuccess;
  }
  const char *forced = zcc_param_algo();
  if (forced && *forced) {
    if (strcasecmp(forced, "direct") == 0) *algo = ZCC_ALGO_DIRECT;
    else if (strcasecmp(forced, "ring") == 0) *algo = ZCC_ALGO_RING;
    else
      return zcc_error(zccInvalidArgument,
                       "ZCC_ALGO=%s: host communicators run 'direct' or 'ring'", forced);
    return zccSuccess;
  }
  *algo = comm->nranks > 1 && bytes > (size_t)zcc_param_direct_max_bytes() ? ZCC_ALGO_RING
                                                                           : ZCC_ALGO_DIRECT;
  ZCC_TRACE(TUNING, "%s of %zu bytes on %d ranks: %s", zcc_coll_name(coll), bytes,
            comm->nranks, zcc_algo_name(*algo));
  return zccSuccess;
}
