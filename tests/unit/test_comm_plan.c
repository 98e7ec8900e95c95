/*
 * A communicator keeps its graph and its plan on it, and chooses through
 * the same functions zcc_topo prints: on every fixture (ZCC_TOPO_FILE), a
 * host communicator's plan and decision table are the ones the planner
 * computes for those ranks; placement by host and GPU bus id; the graph is
 * shared by the communicators of a process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "param.h"
#include "planner.h"
#include "test_topo_util.h"
#include "zcc.h"

typedef struct {
  int n;
  char lines[128][640];
} table_t;

static void keep_line(void *ctx, const char *line) {
  table_t *t = ctx;
  if (t->n < 128) snprintf(t->lines[t->n++], sizeof(t->lines[0]), "%s", line);
}

static void use_fixture(const char *name) {
  if (name) {
    char path[1024];
    fixture_path(name, path, sizeof(path));
    setenv("ZCC_TOPO_FILE", path, 1);
  } else {
    unsetenv("ZCC_TOPO_FILE");
  }
  zcc_param_reload();
}

/* The plan zcc_topo makes for n ranks on the CPUs of the graph's first host. */
static zcc_planner_t *tool_plan(const zcc_topo_t *g, int n) {
  int cpus[64] = {0}, nc = 0, nodes[16] = {0};
  for (int i = g->hosts[0].first; i < g->hosts[0].first + g->hosts[0].nnodes; i++)
    if (g->nodes[i].kind == ZCC_TOPO_CPU && nc < 64) cpus[nc++] = i;
  assert_true(nc > 0);
  for (int r = 0; r < n; r++) nodes[r] = cpus[r % nc];
  zcc_planner_t *p = NULL;
  assert_int_equal(zcc_planner_build(g, n, nodes, &p), zccSuccess);
  return p;
}

static void test_every_fixture(void **s) {
  (void)s;
  for (size_t f = 0; f < sizeof(all_fixtures) / sizeof(all_fixtures[0]); f++) {
    if (strcmp(all_fixtures[f], "dgx-h100-x16.json") == 0) continue; /* same as x2, slower */
    use_fixture(all_fixtures[f]);
    zccComm_t comms[3];
    assert_int_equal(zccCommInitAll(comms, 3, NULL), zccSuccess);
    for (int r = 0; r < 3; r++) {
      struct zccComm *c = comms[r];
      assert_non_null(c->topo);
      assert_non_null(c->planner);
      assert_true(c->planner->cpu_ranks);
      assert_int_equal(c->planner->nranks, 3);
      assert_int_equal(c->planner->nnodes, 1);
      /* one graph for the process */
      assert_ptr_equal(c->topo, comms[0]->topo);
      /* the choice context is the plan's, as zcc_topo makes it */
      zcc_select_ctx_t want;
      zcc_select_ctx_of_plan(c->planner, &want);
      const zcc_select_ctx_t *got = &c->select->ctx;
      assert_true(want.gpu == got->gpu && want.nranks == got->nranks &&
                  want.nnodes == got->nnodes && want.link_class == got->link_class &&
                  want.measured == got->measured);
    }
    /* The decision table of the communicator and of the tool's plan. */
    zcc_planner_t *p = tool_plan(comms[0]->topo, 3);
    zcc_select_ctx_t tool;
    zcc_select_ctx_of_plan(p, &tool);
    /* what the graph does not say: how many CPUs this host gives its ranks
       (3 ranks on a 2-CPU machine share them; init.c sets it) */
    tool.oversub = comms[0]->select->ctx.oversub;
    table_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    assert_int_equal(zcc_planner_decisions(&comms[0]->select->ctx, keep_line, a), zccSuccess);
    assert_int_equal(zcc_planner_decisions(&tool, keep_line, b), zccSuccess);
    assert_int_equal(a->n, b->n);
    assert_true(a->n > 60);
    for (int i = 0; i < a->n; i++) assert_string_equal(a->lines[i], b->lines[i]);
    /* and the plan's description */
    a->n = b->n = 0;
    assert_int_equal(zcc_planner_describe(comms[0]->planner, keep_line, a), zccSuccess);
    assert_int_equal(zcc_planner_describe(p, keep_line, b), zccSuccess);
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) assert_string_equal(a->lines[i], b->lines[i]);
    /* and what runs: a collective's choice is the table's */
    float x[1024], y[1024];
    for (int i = 0; i < 1024; i++) x[i] = (float)i;
    assert_int_equal(zccGroupStart(), zccSuccess);
    for (int r = 0; r < 3; r++)
      assert_int_equal(zccAllReduce(x, y, 1024, zccFloat32, zccSum, comms[r], NULL), zccSuccess);
    assert_int_equal(zccGroupEnd(), zccSuccess);
    for (int i = 0; i < 1024; i++) assert_true(y[i] == 3.0f * (float)i);
    assert_true(comms[0]->select->misses >= 1);
    free(a);
    free(b);
    zcc_planner_free(p);
    for (int r = 0; r < 3; r++) assert_int_equal(zccCommDestroy(comms[r]), zccSuccess);
  }
  use_fixture(NULL);
}

/* Ranks over several hosts on a one-host graph: the others are replicas. */
static void test_replicated_hosts(void **s) {
  (void)s;
  zcc_topo_t *g = load_fixture("cpu-vm.json");
  assert_non_null(g);
  const int host[4] = {0, 1, 0, 1};
  zcc_topo_t *own = NULL;
  zcc_planner_t *p = NULL;
  assert_int_equal(zcc_planner_for_comm(g, 4, 2, host, NULL, &own, &p), zccSuccess);
  assert_non_null(own);
  assert_int_equal(own->nhosts, 2);
  assert_int_equal(p->nnodes, 2);
  for (int r = 0; r < 4; r++) assert_int_equal(p->rank_host[r], host[r]);
  /* each ring enters and leaves each host once */
  for (int c = 0; c < p->nchannels; c++) {
    int changes = 0;
    for (int i = 0; i < 4; i++)
      changes += p->rank_host[p->rings[c].order[i]] != p->rank_host[p->rings[c].order[(i + 1) % 4]];
    assert_int_equal(changes, 2);
  }
  zcc_planner_free(p);
  zcc_topo_free(own);
  /* bad input changes nothing and says why */
  const int bad[2] = {0, 5};
  own = (zcc_topo_t *)1;
  p = (zcc_planner_t *)1;
  assert_int_equal(zcc_planner_for_comm(g, 2, 2, bad, NULL, &own, &p), zccInvalidArgument);
  assert_null(own);
  assert_null(p);
  assert_non_null(strstr(zcc_last_error(), "rank 1 on host 5"));
  assert_int_equal(zcc_planner_for_comm(g, 2, 3, host, NULL, &own, &p), zccInvalidArgument);
  zcc_topo_free(g);
}

/* GPU ranks are placed by bus id, in order where the graph hides it. */
static void test_gpu_placement(void **s) {
  (void)s;
  zcc_topo_t *g = load_fixture("h200-nv18-vm.json");
  assert_non_null(g);
  int gpu[2], n = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].kind == ZCC_TOPO_GPU) gpu[n++] = i;
  assert_int_equal(n, 2);
  const int host[2] = {0, 0};
  const char *rev[2] = {g->nodes[gpu[1]].bus, g->nodes[gpu[0]].bus};
  zcc_topo_t *own = NULL;
  zcc_planner_t *p = NULL;
  assert_int_equal(zcc_planner_for_comm(g, 2, 1, host, rev, &own, &p), zccSuccess);
  assert_null(own);
  assert_false(p->cpu_ranks);
  assert_int_equal(p->rank_node[0], gpu[1]);
  assert_int_equal(p->rank_node[1], gpu[0]);
  zcc_select_ctx_t c;
  zcc_select_ctx_of_plan(p, &c);
  assert_true(c.gpu && c.link_class <= ZCC_PATH_NVS);
  zcc_planner_free(p);
  const char *hidden[2] = {"0000:99:00.0", "0000:98:00.0"};
  assert_int_equal(zcc_planner_for_comm(g, 2, 1, host, hidden, &own, &p), zccSuccess);
  assert_int_equal(p->rank_node[0], gpu[0]);
  assert_int_equal(p->rank_node[1], gpu[1]);
  zcc_planner_free(p);
  zcc_topo_free(g);
}

/* A bad ZCC_TOPO_FILE fails communicator creation and leaves nothing. */
static void test_bad_file(void **s) {
  (void)s;
  setenv("ZCC_TOPO_FILE", "/nonexistent/zcc-topo.json", 1);
  zcc_param_reload();
  zccComm_t comms[2] = {NULL, NULL};
  assert_int_not_equal(zccCommInitAll(comms, 2, NULL), zccSuccess);
  assert_non_null(strstr(zccGetLastError(NULL), "ZCC_TOPO_FILE"));
  assert_null(comms[0]);
  use_fixture(NULL);
  /* detection works again after */
  assert_int_equal(zccCommInitAll(comms, 2, NULL), zccSuccess);
  assert_non_null(comms[0]->topo);
  for (int r = 0; r < 2; r++) assert_int_equal(zccCommDestroy(comms[r]), zccSuccess);
}

/* ZCC_TOPO_MEASURE=1: every rank costs its choices with rank 0's measurement. */
static void test_measure(void **s) {
  (void)s;
  setenv("ZCC_TOPO_MEASURE", "1", 1);
  zcc_param_reload();
  zccComm_t comms[2];
  assert_int_equal(zccCommInitAll(comms, 2, NULL), zccSuccess);
  const zcc_select_ctx_t *a = &comms[0]->select->ctx, *b = &comms[1]->select->ctx;
  assert_int_equal(a->measured, 1);
  assert_int_equal(b->measured, 1);
  assert_true(a->alpha_us > 0 && a->bw_gbs > 0);
  assert_true(a->alpha_us == b->alpha_us && a->bw_gbs == b->bw_gbs);
  /* a ring allreduce of 2 ranks: 2 steps of the measured latency, 1 S at its bandwidth */
  double t = zcc_select_predict(a, ZCC_COLL_ALLREDUCE, ZCC_ALGO_RING, ZCC_PROTO_SIMPLE, 1 << 20, 0);
  double want = 2 * a->alpha_us + (double)(1 << 20) / (a->bw_gbs * 1e3);
  assert_true(t > want * 0.999 && t < want * 1.001);
  /* the table's figures stay what they were */
  zcc_select_ctx_t table = *a;
  table.measured = 0;
  double ta, tb;
  zcc_select_link_table(&table, &ta, &tb);
  double tt = zcc_select_predict(&table, ZCC_COLL_ALLREDUCE, ZCC_ALGO_RING, ZCC_PROTO_SIMPLE, 1 << 20, 0);
  want = 2 * ta + (double)(1 << 20) / (tb * 1e3);
  assert_true(tt > want * 0.999 && tt < want * 1.001);
  float x[64], y[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i;
  assert_int_equal(zccGroupStart(), zccSuccess);
  for (int r = 0; r < 2; r++)
    assert_int_equal(zccAllReduce(x, y, 64, zccFloat32, zccSum, comms[r], NULL), zccSuccess);
  assert_int_equal(zccGroupEnd(), zccSuccess);
  for (int i = 0; i < 64; i++) assert_true(y[i] == 2.0f * (float)i);
  for (int r = 0; r < 2; r++) assert_int_equal(zccCommDestroy(comms[r]), zccSuccess);
  unsetenv("ZCC_TOPO_MEASURE");
  zcc_param_reload();
}

static int has_line(const table_t *t, const char *a, const char *b) {
  for (int i = 0; i < t->n; i++)
    if (strstr(t->lines[i], a) && (!b || strstr(t->lines[i], b))) return 1;
  return 0;
}

/* zcc_select_explain: the choice, the candidates' times, the reasons the others cannot run. */
static void test_explain(void **s) {
  (void)s;
  use_fixture(NULL);
  table_t *t = calloc(1, sizeof(*t));
  zcc_select_ctx_t gpu8 = {1, 8, 1, ZCC_PATH_NVS, 0, 0, 0, 0, 0, 0, 0, 0}, host2 = {0, 2, 1, ZCC_PATH_SELF, 0, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(zcc_select_explain(&gpu8, ZCC_COLL_ALLREDUCE, 64 << 20, 1, keep_line, t),
                   zccSuccess);
  zcc_choice_t ch;
  assert_int_equal(zcc_select(&gpu8, ZCC_COLL_ALLREDUCE, 64 << 20, 1, &ch), zccSuccess);
  char want[64];
  snprintf(want, sizeof(want), "runs %s/%s", zcc_algo_name(ch.algo), zcc_proto_name(ch.proto));
  assert_true(has_line(t, want, NULL));
  assert_true(has_line(t, "ce ", "ce pairs the copy engines of 2 ranks, not 8"));
  assert_true(has_line(t, "hier", "hier needs several hosts"));
  assert_true(has_line(t, "protocol ll ", "ll carries at most 65536 bytes per rank"));
  assert_true(has_line(t, "oneshot/simple", "%"));
  t->n = 0;
  assert_int_equal(zcc_select_explain(&host2, ZCC_COLL_ALLREDUCE, 8, 0, keep_line, t), zccSuccess);
  assert_true(has_line(t, "runs oneshot/simple", NULL));
  assert_true(has_line(t, "ring/simple", "%"));
  assert_true(has_line(t, "tree", "host communicators run ring and oneshot"));
  /* the rings' links, on a fixture */
  zcc_topo_t *g = load_fixture("dgx-h100.json");
  int nodes[8], n = 0;
  for (int i = 0; i < g->nnodes && n < 8; i++)
    if (g->nodes[i].kind == ZCC_TOPO_GPU) nodes[n++] = i;
  zcc_planner_t *p = NULL;
  assert_int_equal(zcc_planner_build(g, n, nodes, &p), zccSuccess);
  t->n = 0;
  assert_int_equal(zcc_planner_ring_links(p, 0, keep_line, t), zccSuccess);
  assert_int_equal(t->n, 8);
  assert_true(has_line(t, "nvswitch", "GB/s"));
  assert_int_equal(zcc_planner_ring_links(p, p->nchannels, keep_line, t), zccInvalidArgument);
  zcc_planner_free(p);
  zcc_topo_free(g);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_fixture),
      cmocka_unit_test(test_replicated_hosts),
      cmocka_unit_test(test_gpu_placement),
      cmocka_unit_test(test_bad_file),
      cmocka_unit_test(test_measure),
      cmocka_unit_test(test_explain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
