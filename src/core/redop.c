/*
 * Pre-multiplied sums: reduction ops made per communicator by
 * zccRedOpCreatePreMulSum (op zccNumOps + slot), resolved by each
 * collective into a sum of scaled inputs: host plans scale into their own
 * buffer; GPU allreduce scales into recvbuff, then sums in place; GPU
 * reduce and reduce-scatter scale each piece into the staging buffer, then
 * reduce from there (exec/gpu.c).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "debug.h"
#include "reduce.h"

/* Slots per communicator: PyTorch makes and frees one op per call. */
#define ZCC_MAX_REDOPS 1024

zccResult_t zccRedOpCreatePreMulSum(zccRedOp_t *op, void *scalar, zccDataType_t datatype,
                                    zccScalarResidence_t residence, zccComm_t comm) {
  static const char fn[] = "zccRedOpCreatePreMulSum";
  if (!op) return zcc_error(zccInvalidArgument, "%s: op is NULL", fn);
  if (!scalar) return zcc_error(zccInvalidArgument, "%s: scalar is NULL", fn);
  if ((int)datatype < 0 || (int)datatype >= zccNumTypes)
    return zcc_error(zccInvalidArgument, "%s: datatype %d is not a zccDataType_t", fn,
                     (int)datatype);
  if (residence != zccScalarDevice && residence != zccScalarHostImmediate)
    return zcc_error(zccInvalidArgument,
                     "%s: residence %d is neither zccScalarDevice nor zccScalarHostImmediate",
                     fn, (int)residence);
  ZCC_CHECK(zcc_comm_enter(comm, fn, 0));
  zccResult_t res = zccSuccess;
  pthread_mutex_lock(&comm->redop_lock);
  int slot = -1;
  for (int i = 0; i < comm->nredops && slot < 0; i++)
    if (!comm->redops[i].in_use) slot = i;
  if (slot < 0 && comm->nredops == ZCC_MAX_REDOPS) {
    pthread_mutex_unlock(&comm->redop_lock);
    res = zcc_error(zccInvalidUsage,
                    "%s: comm %s already holds %d pre-multiplied sums; free some with "
                    "zccRedOpDestroy", fn, comm->name, ZCC_MAX_REDOPS);
    goto out;
  }
  if (slot < 0) {
    zcc_redop_t *grown = realloc(comm->redops, (size_t)(comm->nredops + 1) * sizeof(*grown));
    if (!grown) {
      pthread_mutex_unlock(&comm->redop_lock);
      res = zcc_error(zccSystemError, "%s: out of memory", fn);
      goto out;
    }
    comm->redops = grown;
    slot = comm->nredops++;
  }
  zcc_redop_t *r = &comm->redops[slot];
  memset(r, 0, sizeof(*r));
  r->in_use = 1;
  r->type = datatype;
  r->residence = residence;
  if (residence == zccScalarHostImmediate) memcpy(&r->value, scalar, zcc_type_size(datatype));
  else r->scalar = scalar;
  pthread_mutex_unlock(&comm->redop_lock);
  ZCC_INFO(COLL, "%s: op %d on comm %s: %s scalar %s", fn, zccNumOps + slot, comm->name,
           zcc_type_name(datatype), residence == zccScalarHostImmediate ? "copied" : "read at each call");
  *op = (zccRedOp_t)(zccNumOps + slot);
out:
  zcc_comm_leave(comm);
  return res;
}

zccResult_t zccRedOpDestroy(zccRedOp_t op, zccComm_t comm) {
  static const char fn[] = "zccRedOpDestroy";
  if ((int)op >= 0 && (int)op < zccNumOps)
    return zcc_error(zccInvalidArgument, "%s: op %d is a built-in op (%s), not one made by "
                     "zccRedOpCreatePreMulSum", fn, (int)op, zcc_op_name(op));
  ZCC_CHECK(zcc_comm_enter(comm, fn, 0));
  zccResult_t res = zccSuccess;
  int slot = (int)op - zccNumOps;
  pthread_mutex_lock(&comm->redop_lock);
  if (slot < 0 || slot >= comm->nredops || !comm->redops[slot].in_use)
    res = zcc_error(zccInvalidArgument,
                    "%s: op %d was not made by zccRedOpCreatePreMulSum on comm %s (or is "
                    "already destroyed)", fn, (int)op, comm->name);
  else
    comm->redops[slot].in_use = 0;
  pthread_mutex_unlock(&comm->redop_lock);
  zcc_comm_leave(comm);
  return res;
}

zccResult_t zcc_redop_resolve(struct zccComm *comm, zccRedOp_t op, zccDataType_t type,
                              const char *fn, zccRedOp_t *base, int *scale,
                              uint64_t *scalar, const void **scalar_ptr) {
  *scalar_ptr = NULL;
  if ((int)op >= 0 && (int)op < zccNumOps) {
    *base = op;
    *scale = 0;
    return zccSuccess;
  }
  int slot = (int)op - zccNumOps;
  zccResult_t res = zccSuccess;
  pthread_mutex_lock(&comm->redop_lock);
  if (slot < 0 || slot >= comm->nredops || !comm->redops[slot].in_use) {
    res = zcc_error(zccInvalidArgument,
                    "%s: op %d is neither a built-in zccRedOp_t nor a live op of comm %s "
                    "from zccRedOpCreatePreMulSum", fn, (int)op, comm->name);
  } else if (comm->redops[slot].type != type) {
    res = zcc_error(zccInvalidArgument,
                    "%s: op %d is a pre-multiplied sum of %s; the call's datatype is %s", fn,
                    (int)op, zcc_type_name(comm->redops[slot].type), zcc_type_name(type));
  } else {
    const zcc_redop_t *r = &comm->redops[slot];
    uint64_t v = r->value;
    if (r->residence == zccScalarDevice && comm->device >= 0) {
      *scalar_ptr = r->scalar; /* device memory: the scaling kernel reads it */
    } else if (r->residence == zccScalarDevice) {
      v = 0;
      memcpy(&v, r->scalar, zcc_type_size(type));
    }
    *base = zccSum;
    *scale = 1;
    *scalar = v;
  }
  pthread_mutex_unlock(&comm->redop_lock);
  return res;
}

void zcc_redop_free_all(struct zccComm *comm) {
  free(comm->redops);
  comm->redops = NULL;
  comm->nredops = 0;
  pthread_mutex_destroy(&comm->redop_lock);
}
