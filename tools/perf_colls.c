/*
 * The seven benchmarked operations: how nccl-tests sizes each one, its
 * bus-bandwidth factor, the zcc call, and where each output element comes
 * from (for the exact checks).
 */
#include "perf.h"

static double factor_one(int nranks)
{
  return 1.0;
}

static double factor_allreduce(int nranks)
{
  return 2.0 * (nranks - 1) / nranks;
}

static double factor_n1_n(int nranks)
{
  return (double)(nranks - 1) / nranks;
}

/* Same count in and out: allreduce, broadcast, reduce, sendrecv. */
static void counts_flat(size_t count, int rank, int nranks, perf_counts_t *c)
{
  c->param_count = count;
  c->send_count = count;
  c->recv_count = count;
  c->inplace_send_offset = 0;
  c->inplace_recv_offset = 0;
}

static size_t out_all(const perf_counts_t *c, int rank, int nranks, int root)
{
  return c->recv_count;
}

static size_t out_root(const perf_counts_t *c, int rank, int nranks, int root)
{
  return rank == root ? c->recv_count : 0;
}

/* allreduce */

static zccResult_t run_allreduce(const perf_call_t *k)
{
  return zccAllReduce(k->sendbuff, k->recvbuff, k->count, k->type, k->op,
                      k->comm, k->stream);
}

static perf_source_t src_reduced(const perf_counts_t *c, size_t i, int rank,
                                 int nranks, int root)
{
  return (perf_source_t){.src_rank = -1, .src_index = i};
}

const perf_coll_t perf_allreduce = {
    .kind = PERF_COLL_ALLREDUCE,
    .name = "allreduce",
    .call_name = "zccAllReduce",
    .reduces = 1,
    .busbw_factor = factor_allreduce,
    .counts = counts_flat,
    .run = run_allreduce,
    .out_count = out_all,
    .source = src_reduced,
};

/* broadcast */

static zccResult_t run_broadcast(const perf_call_t *k)
{
  return zccBroadcast(k->sendbuff, k->recvbuff, k->count, k->type, k->root,
                      k->comm, k->stream);
}

static perf_source_t src_root(const perf_counts_t *c, size_t i, int rank,
                              int nranks, int root)
{
  return (perf_source_t){.src_rank = root, .src_index = i};
}

const perf_coll_t perf_broadcast = {
    .kind = PERF_COLL_BROADCAST,
    .name = "broadcast",
    .call_name = "zccBroadcast",
    .rooted = 1,
    .input_on_root_only = 1,
    .busbw_factor = factor_one,
    .counts = counts_flat,
    .run = run_broadcast,
    .out_count = out_all,
    .source = src_root,
};

/* reduce */

static zccResult_t run_reduce(const perf_call_t *k)
{
  return zccReduce(k->sendbuff, k->recvbuff, k->count, k->type, k->op,
                   k->root, k->comm, k->stream);
}

const perf_coll_t perf_reduce = {
    .kind = PERF_COLL_REDUCE,
    .name = "reduce",
    .call_name = "zccReduce",
    .reduces = 1,
    .rooted = 1,
    .busbw_factor = factor_one,
    .counts = counts_flat,
    .run = run_reduce,
    .out_count = out_root,
    .source = src_reduced,
};

/* allgather: size is the gathered buffer; each rank sends count/nranks */

static void counts_allgather(size_t count, int rank, int nranks, perf_counts_t *c)
{
  size_t base = count / (size_t)nranks;

  c->param_count = base;
  c->send_count = base;
  c->recv_count = base * (size_t)nranks;
  c->inplace_send_offset = (size_t)rank * base;
  c->inplace_recv_offset = 0;
}

static zccResult_t run_allgather(const perf_call_t *k)
{
  return zccAllGather(k->sendbuff, k->recvbuff, k->count, k->type, k->comm,
                      k->stream);
}

static perf_source_t src_gathered(const perf_counts_t *c, size_t i, int rank,
                                  int nranks, int root)
{
  return (perf_source_t){.src_rank = (int)(i / c->param_count),
                         .src_index = i % c->param_count};
}

const perf_coll_t perf_allgather = {
    .kind = PERF_COLL_ALLGATHER,
    .name = "allgather",
    .call_name = "zccAllGather",
    .busbw_factor = factor_n1_n,
    .counts = counts_allgather,
    .run = run_allgather,
    .out_count = out_all,
    .source = src_gathered,
};

/* reducescatter: size is the send buffer; each rank receives count/nranks */

static void counts_reducescatter(size_t count, int rank, int nranks, perf_counts_t *c)
{
  size_t base = count / (size_t)nranks;

  c->param_count = base;
  c->send_count = base * (size_t)nranks;
  c->recv_count = base;
  c->inplace_send_offset = 0;
  c->inplace_recv_offset = (size_t)rank * base;
}

static zccResult_t run_reducescatter(const perf_call_t *k)
{
  return zccReduceScatter(k->sendbuff, k->recvbuff, k->count, k->type, k->op,
                          k->comm, k->stream);
}

static perf_source_t src_scattered(const perf_counts_t *c, size_t i, int rank,
                                   int nranks, int root)
{
  return (perf_source_t){.src_rank = -1,
                         .src_index = (size_t)rank * c->param_count + i};
}

const perf_coll_t perf_reducescatter = {
    .kind = PERF_COLL_REDUCESCATTER,
    .name = "reducescatter",
    .call_name = "zccReduceScatter",
    .reduces = 1,
    .busbw_factor = factor_n1_n,
    .counts = counts_reducescatter,
    .run = run_reducescatter,
    .out_count = out_all,
    .source = src_scattered,
};

/* alltoall: size is either buffer; block j of count/nranks goes to rank j */

static void counts_alltoall(size_t count, int rank, int nranks, perf_counts_t *c)
{
  size_t base = count / (size_t)nranks;

  c->param_count = base;
  c->send_count = base * (size_t)nranks;
  c->recv_count = base * (size_t)nranks;
  c->inplace_send_offset = 0;
  c->inplace_recv_offset = 0;
}

static zccResult_t run_alltoall(const perf_call_t *k)
{
  return zccAlltoAll(k->sendbuff, k->recvbuff, k->count, k->type, k->comm,
                     k->stream);
}

static perf_source_t src_alltoall(const perf_counts_t *c, size_t i, int rank,
                                  int nranks, int root)
{
  size_t block = i / c->param_count, off = i % c->param_count;

  return (perf_source_t){.src_rank = (int)block,
                         .src_index = (size_t)rank * c->param_count + off};
}

const perf_coll_t perf_alltoall = {
    .kind = PERF_COLL_ALLTOALL,
    .name = "alltoall",
    .call_name = "zccAlltoAll",
    .busbw_factor = factor_n1_n,
    .counts = counts_alltoall,
    .run = run_alltoall,
    .out_count = out_all,
    .source = src_alltoall,
};

/* sendrecv: a ring, send to rank+1 and receive from rank-1 in one group */

static zccResult_t run_sendrecv(const perf_call_t *k)
{
  int next = (k->rank + 1) % k->nranks;
  int prev = (k->rank + k->nranks - 1) % k->nranks;
  zccResult_t res, end;

  res = zccGroupStart();
  if (res != zccSuccess)
    return res;
  res = zccSend(k->sendbuff, k->count, k->type, next, k->comm, k->stream);
  if (res == zccSuccess)
    res = zccRecv(k->recvbuff, k->count, k->type, prev, k->comm, k->stream);
  /* always close the group, so that a failed call leaves no group open */
  end = zccGroupEnd();
  return res != zccSuccess ? res : end;
}

static perf_source_t src_prev(const perf_counts_t *c, size_t i, int rank,
                              int nranks, int root)
{
  return (perf_source_t){.src_rank = (rank + nranks - 1) % nranks,
                         .src_index = i};
}

const perf_coll_t perf_sendrecv = {
    .kind = PERF_COLL_SENDRECV,
    .name = "sendrecv",
    .call_name = "zccSend/zccRecv",
    .busbw_factor = factor_one,
    .counts = counts_flat,
    .run = run_sendrecv,
    .out_count = out_all,
    .source = src_prev,
};
