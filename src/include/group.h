/* Groups: operations issued between zccGroupStart and zccGroupEnd. */
#ifndef ZCC_GROUP_H_
#define ZCC_GROUP_H_

#include "coll.h"
#include "zcc.h"

/* Non-zero inside zccGroupStart/End in this thread. */
int zcc_group_active(void);
/* Queue a plan; the group owns it and the comm reference taken by the caller. */
zccResult_t zcc_group_add_plan(zcc_plan_t *plan);
/*
 * The open point-to-point plan of comm in this group, made on first use
 * (*created set: the plan then owns the caller's comm reference).
 */
zccResult_t zcc_group_p2p_plan(struct zccComm *comm, zcc_plan_t **plan, int *created);
#include "devops.h"
/*
 * Queue a GPU communicator's send or receive until zccGroupEnd, which
 * launches each communicator's operations together. *kept set: the group
 * took the caller's comm reference (the first operation of that comm).
 */
zccResult_t zcc_group_gpu_p2p_add(struct zccComm *comm, const zcc_gpu_p2p_op_t *op, int *kept);
/* Run one plan now (outside groups), then free it and leave the comm. */
zccResult_t zcc_run_plan_now(zcc_plan_t *plan);
/*
 * Drop what the calling thread's open group holds of comm (its queued
 * plans and their references); returns how many operations were dropped.
 */
int zcc_group_drop_comm(struct zccComm *comm);

#endif /* ZCC_GROUP_H_ */
