/*
 * The fake verbs provider itself, through the real verbs.h (the inline
 * data-path calls go through ibv_context.ops): what it checks as hardware
 * does (QP state machine, lkey, rkey, PD, access flags, bounds, receive
 * length) and the completions it gives. Two QPs of one process, connected
 * to each other over the fake's wire.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>

#include <cmocka.h>

typedef struct {
  struct ibv_context *ctx;
  struct ibv_pd *pd, *pd2;
  struct ibv_cq *cq[2];
  struct ibv_qp *qp[2];
  int gid_index;
} pair_t;

static struct ibv_device **devs;

static int find_v2_gid(struct ibv_context *ctx) {
  struct ibv_port_attr pa;
  assert_int_equal(ibv_query_port(ctx, 1, &pa), 0);
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0) == 0 &&
        e.gid_type == IBV_GID_TYPE_ROCE_V2)
      return i;
  }
  return -1;
}

static int to_init(struct ibv_qp *qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest, int gid_index) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = dest;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
  a.ah_attr.grh.hop_limit = 255;
  assert_int_equal(
      ibv_query_gid(qp->context, 1, gid_index, &a.ah_attr.grh.dgid), 0);
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
                          .timeout = 14,
                          .retry_cnt = 7,
                          .rnr_retry = 7,
                          .max_rd_atomic = 1};
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

static void make_pair(pair_t *p) {
  memset(p, 0, sizeof(*p));
  int n = 0;
  devs = ibv_get_device_list(&n);
  assert_non_null(devs);
  assert_true(n >= 1);
  p->ctx = ibv_open_device(devs[0]);
  assert_non_null(p->ctx);
  p->pd = ibv_alloc_pd(p->ctx);
  p->pd2 = ibv_alloc_pd(p->ctx);
  p->gid_index = find_v2_gid(p->ctx);
  assert_true(p->gid_index > 0);
  for (int i = 0; i < 2; i++) {
    p->cq[i] = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
    assert_non_null(p->cq[i]);
    struct ibv_qp_init_attr ia = {.send_cq = p->cq[i],
                                  .recv_cq = p->cq[i],
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 16,
                                          .max_recv_wr = 16,
                                          .max_send_sge = 2,
                                          .max_recv_sge = 2,
                                          .max_inline_data = 64}};
    p->qp[i] = ibv_create_qp(p->pd, &ia);
    assert_non_null(p->qp[i]);
    assert_int_equal(p->qp[i]->state, IBV_QPS_RESET);
  }
  for (int i = 0; i < 2; i++)
    assert_int_equal(to_init(p->qp[i]), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(to_rtr(p->qp[i], p->qp[1 - i]->qp_num, p->gid_index), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(to_rts(p->qp[i]), 0);
}

static void free_pair(pair_t *p) {
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ibv_destroy_qp(p->qp[i]), 0);
    assert_int_equal(ibv_destroy_cq(p->cq[i]), 0);
  }
  assert_int_equal(ibv_dealloc_pd(p->pd), 0);
  assert_int_equal(ibv_dealloc_pd(p->pd2), 0);
  assert_int_equal(ibv_close_device(p->ctx), 0);
  ibv_free_device_list(devs);
}

/* One completion from cq within 5 s (a failed poll is a test failure, never a
 * hang). */
static struct ibv_wc wait_wc(struct ibv_cq *cq) {
  struct ibv_wc wc;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    assert_true(n >= 0);
    if (n == 1)
      return wc;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 5)
      fail_msg("no completion within 5 s");
  }
}

static int post_write(struct ibv_qp *qp, void *src, uint32_t len, uint32_t lkey,
                      uint64_t raddr, uint32_t rkey, int imm) {
  struct ibv_sge sge = {(uintptr_t)src, len, lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(0xabcdef);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, void *buf, uint32_t len,
                     uint32_t lkey) {
  struct ibv_sge sge = {(uintptr_t)buf, len, lkey};
  struct ibv_recv_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = buf ? 1 : 0},
                     *bad;
  return ibv_post_recv(qp, &wr, &bad);
}

static void test_write_imm_lands(void **state) {
  (void)state;
  pair_t p;
  make_pair(&p);
  static char src[8192], dst[8192];
  for (int i = 0; i < 8192; i++)
    src[i] = (char)(i * 7);
  memset(dst, 0, sizeof(dst));
  struct ibv_mr *ms =
      ibv_reg_mr(p.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *md = ibv_reg_mr(
      p.pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  assert_non_null(ms);
  assert_non_null(md);
  assert_int_not_equal(md->lkey, md->rkey);
  assert_int_equal(post_recv(p.qp[1], NULL, 0, 0), 0);
  assert_int_equal(post_write(p.qp[0], src, 5000, ms->lkey,
                              (uintptr_t)dst + 100, md->rkey, 1),
                   0);
  struct ibv_wc s = wait_wc(p.cq[0]), r = wait_wc(p.cq[1]);
  assert_int_equal(s.status, IBV_WC_SUCCESS);
  assert_int_equal(s.opcode, IBV_WC_RDMA_WRITE);
  assert_int_equal(r.status, IBV_WC_SUCCESS);
  assert_int_equal(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  assert_int_equal(r.byte_len, 5000);
  assert_true(r.wc_flags & IBV_WC_WITH_IMM);
  assert_int_equal(ntohl(r.imm_data), 0xabcdef);
  assert_memory_equal(dst + 100, src, 5000);
  assert_int_equal(dst[99], 0);
  assert_int_equal(dst[5100], 0);
  /* send/recv with a scatter list */
  static char r1[10], r2[100];
  struct ibv_sge rs[2] = {{(uintptr_t)r1, 10, md->lkey},
                          {(uintptr_t)r2, 100, md->lkey}};
  struct ibv_mr *mr1 = ibv_reg_mr(p.pd, r1, 10, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mr2 = ibv_reg_mr(p.pd, r2, 100, IBV_ACCESS_LOCAL_WRITE);
  rs[0].lkey = mr1->lkey, rs[1].lkey = mr2->lkey;
  struct ibv_recv_wr rw = {.wr_id = 11, .sg_list = rs, .num_sge = 2}, *rbad;
  assert_int_equal(ibv_post_recv(p.qp[1], &rw, &rbad), 0);
  struct ibv_sge ss = {(uintptr_t)src, 50, ms->lkey};
  struct ibv_send_wr sw = {.wr_id = 12,
                           .sg_list = &ss,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  assert_int_equal(ibv_post_send(p.qp[0], &sw, &sbad), 0);
  s = wait_wc(p.cq[0]);
  r = wait_wc(p.cq[1]);
  assert_int_equal(s.status, IBV_WC_SUCCESS);
  assert_int_equal(r.status, IBV_WC_SUCCESS);
  assert_int_equal(r.opcode, IBV_WC_RECV);
  assert_int_equal(r.wr_id, 11);
  assert_int_equal(r.byte_len, 50);
  assert_memory_equal(r1, src, 10);
  assert_memory_equal(r2, src + 10, 40);
  ibv_dereg_mr(mr1), ibv_dereg_mr(mr2), ibv_dereg_mr(ms), ibv_dereg_mr(md);
  free_pair(&p);
}

/* A write that the responder must refuse: the requester sees `want`, the QP is
 * in error after. */
static void refused(enum ibv_wc_status want, int what) {
  pair_t p;
  make_pair(&p);
  static char src[4096], dst[4096];
  struct ibv_mr *ms =
      ibv_reg_mr(p.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *md =
      ibv_reg_mr(what == 4 ? p.pd2 : p.pd, dst, sizeof(dst),
                 what == 3 ? IBV_ACCESS_LOCAL_WRITE
                           : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  assert_non_null(ms);
  assert_non_null(md);
  uint32_t rkey = what == 1   ? md->rkey ^ 0x100
                  : what == 5 ? md->lkey
                              : md->rkey;
  uint32_t lkey = what == 6 ? ms->lkey ^ 0x100 : ms->lkey;
  uint64_t raddr = (uintptr_t)dst + (what == 2 ? 1 : 0);
  uint32_t len = what == 7 ? 4097 : 4096;
  memset(dst, 0, sizeof(dst));
  memset(src, 0x33, sizeof(src));
  assert_int_equal(post_write(p.qp[0], src, len, lkey, raddr, rkey, 0), 0);
  struct ibv_wc s = wait_wc(p.cq[0]);
  if (s.status != want)
    fail_msg("case %d: status %d (%s), expected %d (%s)", what, s.status,
             ibv_wc_status_str(s.status), want, ibv_wc_status_str(want));
  for (int i = 0; i < 4096; i++)
    assert_int_equal(dst[i], 0); /* nothing landed */
  /* the QP is in error: the next work request is flushed */
  assert_int_equal(
      post_write(p.qp[0], src, 8, ms->lkey, (uintptr_t)dst, md->rkey, 0), 0);
  s = wait_wc(p.cq[0]);
  assert_int_equal(s.status, IBV_WC_WR_FLUSH_ERR);
  ibv_dereg_mr(ms), ibv_dereg_mr(md);
  free_pair(&p);
}

static void test_bad_rkey(void **state) {
  (void)state, refused(IBV_WC_REM_ACCESS_ERR, 1);
}
static void test_out_of_bounds(void **state) {
  (void)state, refused(IBV_WC_REM_ACCESS_ERR, 2);
}
static void test_no_remote_write(void **state) {
  (void)state, refused(IBV_WC_REM_ACCESS_ERR, 3);
}
static void test_other_pd(void **state) {
  (void)state, refused(IBV_WC_REM_ACCESS_ERR, 4);
}
static void test_lkey_as_rkey(void **state) {
  (void)state, refused(IBV_WC_REM_ACCESS_ERR, 5);
}
static void test_bad_lkey(void **state) {
  (void)state, refused(IBV_WC_LOC_PROT_ERR, 6);
}
static void test_local_bounds(void **state) {
  (void)state, refused(IBV_WC_LOC_PROT_ERR, 7);
}

static void test_recv_too_small(void **state) {
  (void)state;
  pair_t p;
  make_pair(&p);
  static char src[64], dst[16];
  struct ibv_mr *ms =
      ibv_reg_mr(p.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *md =
      ibv_reg_mr(p.pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
  assert_int_equal(post_recv(p.qp[1], dst, 16, md->lkey), 0);
  struct ibv_sge ss = {(uintptr_t)src, 64, ms->lkey};
  struct ibv_send_wr sw = {.wr_id = 1,
                           .sg_list = &ss,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  assert_int_equal(ibv_post_send(p.qp[0], &sw, &bad), 0);
  assert_int_equal(wait_wc(p.cq[1]).status, IBV_WC_LOC_LEN_ERR);
  assert_int_equal(wait_wc(p.cq[0]).status, IBV_WC_REM_INV_REQ_ERR);
  ibv_dereg_mr(ms), ibv_dereg_mr(md);
  free_pair(&p);
}

static void test_state_machine(void **state) {
  (void)state;
  int n;
  devs = ibv_get_device_list(&n);
  struct ibv_context *ctx = ibv_open_device(devs[0]);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  struct ibv_qp_init_attr ia = {.send_cq = cq,
                                .recv_cq = cq,
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 4,
                                        .max_recv_wr = 4,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1}};
  struct ibv_qp *qp = ibv_create_qp(pd, &ia);
  assert_non_null(qp);
  int g = find_v2_gid(ctx);
  static char buf[64];
  struct ibv_mr *mr = ibv_reg_mr(
      pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  assert_int_not_equal(post_recv(qp, buf, 8, mr->lkey),
                       0);                            /* RESET: no receives */
  assert_int_not_equal(to_rtr(qp, qp->qp_num, g), 0); /* RESET -> RTR */
  assert_int_not_equal(to_rts(qp), 0);                /* RESET -> RTS */
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  assert_int_not_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT),
                       0); /* missing attributes */
  a.port_num = 2;
  assert_int_not_equal(ibv_modify_qp(qp, &a,
                                     IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                         IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                       0); /* no port 2 */
  assert_int_equal(to_init(qp), 0);
  assert_int_equal(post_recv(qp, buf, 8, mr->lkey), 0); /* INIT: receives ok */
  assert_int_not_equal(
      post_write(qp, buf, 8, mr->lkey, (uintptr_t)buf, mr->rkey, 0),
      0);                                             /* no sends */
  assert_int_not_equal(to_rts(qp), 0);                /* INIT -> RTS */
  assert_int_not_equal(to_rtr(qp, qp->qp_num, 0), 0); /* v1 GID: refused */
  assert_int_equal(to_rtr(qp, qp->qp_num, g), 0);
  assert_int_not_equal(
      post_write(qp, buf, 8, mr->lkey, (uintptr_t)buf, mr->rkey, 0),
      0); /* RTR: no sends */
  assert_int_equal(to_rts(qp), 0);
  a.qp_state = IBV_QPS_ERR;
  assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  assert_int_equal(wait_wc(cq).status,
                   IBV_WC_WR_FLUSH_ERR);       /* the posted receive */
  assert_int_equal(ibv_dealloc_pd(pd), EBUSY); /* QP and MR still on it */
  assert_null(
      ibv_reg_mr(pd, buf, 8,
                 IBV_ACCESS_REMOTE_WRITE)); /* remote write needs local write */
  assert_int_equal(ibv_destroy_cq(cq), EBUSY);
  assert_int_equal(ibv_destroy_qp(qp), 0);
  assert_int_equal(ibv_dereg_mr(mr), 0);
  assert_int_equal(ibv_destroy_cq(cq), 0);
  assert_int_equal(ibv_dealloc_pd(pd), 0);
  ibv_close_device(ctx);
  ibv_free_device_list(devs);
}

/* dmabuf registration checks its descriptor: none (EBADF, the answer that
 * says the call is supported), one that is not a dmabuf (EINVAL), and no
 * support at all when told so (EOPNOTSUPP); device memory through
 * ibv_reg_mr needs peermem, and host memory is never taken for it. */
static void test_dmabuf_checks(void **state) {
  (void)state;
  struct ibv_device **list = ibv_get_device_list(NULL);
  struct ibv_context *ctx = ibv_open_device(list[0]);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  errno = 0;
  assert_null(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, acc));
  assert_int_equal(errno, EBADF);
  int p[2];
  assert_int_equal(pipe(p), 0);
  errno = 0;
  assert_null(ibv_reg_dmabuf_mr(pd, 0, 4096, 0x10000, p[0], acc));
  assert_int_equal(errno, EINVAL);
  setenv("ZCC_FAKEVERBS_DMABUF", "0", 1);
  errno = 0;
  assert_null(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, acc));
  assert_int_equal(errno, EOPNOTSUPP);
  unsetenv("ZCC_FAKEVERBS_DMABUF");
  /* with peermem on, host memory stays host memory */
  setenv("ZCC_FAKEVERBS_PEERMEM", "1", 1);
  static char buf[64];
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), acc);
  assert_non_null(mr);
  assert_int_equal(ibv_dereg_mr(mr), 0);
  unsetenv("ZCC_FAKEVERBS_PEERMEM");
  close(p[0]), close(p[1]);
  assert_int_equal(ibv_dealloc_pd(pd), 0);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dmabuf_checks),
      cmocka_unit_test(test_write_imm_lands),
      cmocka_unit_test(test_bad_rkey),
      cmocka_unit_test(test_out_of_bounds),
      cmocka_unit_test(test_no_remote_write),
      cmocka_unit_test(test_other_pd),
      cmocka_unit_test(test_lkey_as_rkey),
      cmocka_unit_test(test_bad_lkey),
      cmocka_unit_test(test_local_bounds),
      cmocka_unit_test(test_recv_too_small),
      cmocka_unit_test(test_state_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
