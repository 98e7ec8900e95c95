/*
 * The topology graph on fixtures of real machines: what is in them, the
 * best paths and their classes, load(dump(g)) == g, detection of this
 * machine, ZCC_TOPO_FILE / ZCC_TOPO_DUMP_FILE, and hostile JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "param.h"
#include "test_topo_util.h"
#include "topo.h"

static void test_fixture_contents(void **s) {
  struct {
    const char *name;
    int hosts, gpus, cpus, nics, nvs;
  } want[] = {{"dgx-h100.json", 1, 8, 2, 8, 4},     {"h200-nv18-vm.json", 1, 2, 1, 1, 1},
              {"pcie-4gpu-2socket.json", 1, 4, 2, 2, 0}, {"dgx-h100-x2.json", 2, 16, 4, 16, 8},
              {"dgx-h100-x16.json", 16, 128, 32, 128, 64}, {"cpu-vm.json", 1, 0, 1, 1, 0}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    zcc_topo_t *g = load_fixture(want[i].name);
    assert_non_null(g);
    if (g->nhosts != want[i].hosts || zcc_topo_count(g, -1, ZCC_TOPO_GPU) != want[i].gpus ||
        zcc_topo_count(g, -1, ZCC_TOPO_CPU) != want[i].cpus ||
        zcc_topo_count(g, -1, ZCC_TOPO_NIC) != want[i].nics ||
        zcc_topo_count(g, -1, ZCC_TOPO_NVS) != want[i].nvs)
      fail_msg("%s: expected %d hosts %d gpus %d cpus %d nics %d nvswitches, got %d %d %d %d %d",
               want[i].name, want[i].hosts, want[i].gpus, want[i].cpus, want[i].nics,
               want[i].nvs, g->nhosts, zcc_topo_count(g, -1, ZCC_TOPO_GPU),
               zcc_topo_count(g, -1, ZCC_TOPO_CPU), zcc_topo_count(g, -1, ZCC_TOPO_NIC),
               zcc_topo_count(g, -1, ZCC_TOPO_NVS));
    zcc_topo_free(g);
  }
}

static void expect_path(const zcc_topo_t *g, int h, const char *a, const char *b,
                        zcc_path_class_t cls, double bw) {
  const zcc_topo_path_t *p = zcc_topo_path(g, NODE(g, h, a), NODE(g, h, b));
  assert_non_null(p);
  if (p->cls != cls || p->bw < bw * 0.999 || p->bw > bw * 1.001)
    fail_msg("%s -> %s: expected %s at %.1f GB/s, got %s at %.1f GB/s", a, b,
             zcc_topo_class_name(cls), bw, zcc_topo_class_name(p->cls), p->bw);
}

static void test_paths_dgx(void **s) {
  zcc_topo_t *g = load_fixture("dgx-h100.json");
  assert_non_null(g);
  /* 18 NVLink4 links over 4 NVSwitches (5+4+4+5): 450 GB/s each way */
  for (int a = 0; a < 8; a++)
    for (int b = 0; b < 8; b++) {
      char x[8], y[8];
      snprintf(x, sizeof(x), "gpu%d", a);
      snprintf(y, sizeof(y), "gpu%d", b);
      expect_path(g, 0, x, y, a == b ? ZCC_PATH_SELF : ZCC_PATH_NVS,
                  a == b ? ZCC_TOPO_MAX_BW : 450.0);
    }
  expect_path(g, 0, "gpu0", "nic0", ZCC_PATH_PIX, 50.4);
  expect_path(g, 0, "gpu0", "nic1", ZCC_PATH_PHB, 50.4);
  expect_path(g, 0, "gpu0", "nic4", ZCC_PATH_SYS, 22.0);
  expect_path(g, 0, "gpu5", "cpu1", ZCC_PATH_PHB, 50.4);
  for (int i = 0; i < 8; i++) {
    char gid[8], nid[8];
    snprintf(gid, sizeof(gid), "gpu%d", i);
    snprintf(nid, sizeof(nid), "nic%d", i);
    assert_int_equal(zcc_topo_best_nic(g, NODE(g, 0, gid)), NODE(g, 0, nid));
  }
  zcc_topo_free(g);
}

static void test_paths_vm_and_pcie(void **s) {
  /* Detected on the real pair: flat PCIe in the VM, and NVML masks the far
   * end of all 18 links of each GPU ("FFFFFFFF:FF:FF.0", a switch): the
   * NVLinks alone, through the hidden NVSwitch fabric, give 450 GB/s. */
  zcc_topo_t *g = load_fixture("h200-nv18-vm.json");
  assert_non_null(g);
  assert_string_equal(g->nodes[NODE(g, 0, "gpu0")].bus, "0000:00:06.0");
  assert_string_equal(g->nodes[NODE(g, 0, "gpu1")].bus, "0000:00:07.0");
  expect_path(g, 0, "gpu0", "gpu1", ZCC_PATH_NVS, 450.0);
  expect_path(g, 0, "gpu0", "cpu0", ZCC_PATH_PHB, 50.4);
  zcc_topo_free(g);
  g = load_fixture("pcie-4gpu-2socket.json");
  assert_non_null(g);
  expect_path(g, 0, "gpu0", "gpu1", ZCC_PATH_PIX, 25.2);
  expect_path(g, 0, "gpu2", "gpu3", ZCC_PATH_PIX, 25.2);
  expect_path(g, 0, "gpu0", "gpu2", ZCC_PATH_SYS, 10.0);
  expect_path(g, 0, "gpu1", "nic0", ZCC_PATH_PHB, 25.2);
  int via[16];
  int n = zcc_topo_path_nodes(g, NODE(g, 0, "gpu0"), NODE(g, 0, "gpu3"), via, 16);
  const char *want[] = {"gpu0", "pci0", "cpu0", "cpu1", "pci1", "gpu3"};
  assert_int_equal(n, 6);
  for (int i = 0; i < n; i++) assert_string_equal(g->nodes[via[i]].id, want[i]);
  zcc_topo_free(g);
}

static void test_route_across_hosts(void **s) {
  zcc_topo_t *g = load_fixture("dgx-h100-x2.json");
  assert_non_null(g);
  assert_int_equal(g->ntables, 1); /* identical hosts share their paths */
  zcc_topo_route_t r;
  int a = NODE(g, 0, "gpu3"), b = NODE(g, 1, "gpu3");
  assert_int_equal(zcc_topo_route(g, a, b, &r), zccSuccess);
  assert_int_equal(r.cls, ZCC_PATH_NET);
  assert_true(r.bw > 49.9 && r.bw < 50.1);
  assert_int_equal(r.nic_a, NODE(g, 0, "nic3"));
  assert_int_equal(r.nic_b, NODE(g, 1, "nic3"));
  zcc_topo_free(g);
}

static void roundtrip(zcc_topo_t *g, const char *what) {
  char *text;
  assert_int_equal(zcc_topo_dump_json(g, 1, &text), zccSuccess);
  zcc_topo_t *h = NULL;
  if (zcc_topo_load_json(text, strlen(text), what, &h) != zccSuccess)
    fail_msg("%s: reloading the dump failed: %s", what, zcc_last_error());
  char why[256];
  if (!zcc_topo_equal(g, h, why, sizeof(why))) fail_msg("%s: load(dump(g)) != g: %s", what, why);
  char *again;
  assert_int_equal(zcc_topo_dump_json(h, 1, &again), zccSuccess);
  /* a finalized graph writes identical hosts as "same_as": same text again */
  if (g->finalized) assert_string_equal(text, again);
  free(text);
  free(again);
  zcc_topo_free(h);
}

static void test_roundtrip(void **s) {
  for (size_t i = 0; i < sizeof(all_fixtures) / sizeof(all_fixtures[0]); i++) {
    zcc_topo_t *g = load_fixture(all_fixtures[i]);
    assert_non_null(g);
    roundtrip(g, all_fixtures[i]);
    /* and replicated, not finalized: every host written out in full */
    zcc_topo_t *r;
    assert_int_equal(zcc_topo_replicate(g, 3, &r), zccSuccess);
    assert_int_equal(r->nhosts, 3 * g->nhosts);
    roundtrip(r, all_fixtures[i]);
    zcc_topo_free(r);
    zcc_topo_free(g);
  }
}

static void test_detect_this_machine(void **s) {
  zcc_topo_t *g;
  assert_int_equal(zcc_topo_detect(&g), zccSuccess);
  assert_int_equal(g->nhosts, 1);
  assert_true(zcc_topo_count(g, 0, ZCC_TOPO_CPU) >= 1);
  /* without libcuda / NVML (as here) detection still succeeds; a GPU that
   * hwloc sees is in the graph either way */
  if (access("/dev/nvidia0", F_OK) != 0) assert_int_equal(zcc_topo_count(g, 0, ZCC_TOPO_GPU), 0);
  roundtrip(g, "detected");
  zcc_topo_free(g);
}

static void test_for_comm_env(void **s) {
  char dump[] = "/tmp/zcc_topo_dumpXXXXXX";
  int fd = mkstemp(dump);
  assert_true(fd >= 0);
  close(fd);
  setenv("ZCC_TOPO_DUMP_FILE", dump, 1);
  unsetenv("ZCC_TOPO_FILE");
  zcc_param_reload();
  zcc_topo_t *g, *h;
  assert_int_equal(zcc_topo_for_comm(&g), zccSuccess);
  assert_int_equal(zcc_topo_load_file(dump, &h), zccSuccess);
  assert_true(zcc_topo_equal(g, h, NULL, 0));
  zcc_topo_free(g);
  zcc_topo_free(h);
  /* ZCC_TOPO_FILE replaces detection */
  char path[1024];
  fixture_path("dgx-h100.json", path, sizeof(path));
  unsetenv("ZCC_TOPO_DUMP_FILE");
  setenv("ZCC_TOPO_FILE", path, 1);
  zcc_param_reload();
  assert_int_equal(zcc_topo_for_comm(&g), zccSuccess);
  assert_int_equal(zcc_topo_count(g, -1, ZCC_TOPO_GPU), 8);
  zcc_topo_free(g);
  setenv("ZCC_TOPO_FILE", "/nonexistent/zcc.json", 1);
  zcc_param_reload();
  assert_int_equal(zcc_topo_for_comm(&g), zccSystemError);
  assert_non_null(strstr(zcc_last_error(), "ZCC_TOPO_FILE: topology: cannot open /nonexistent/zcc.json"));
  unsetenv("ZCC_TOPO_FILE");
  zcc_param_reload();
  unlink(dump);
}

/* Hostile inputs and the message each must give. */
static void test_hostile_json(void **s) {
  const char *h = "{\"format\":\"zcc-topo\",\"version\":1,\"networks\":[{\"id\":\"ib\"}],\"hosts\":";
  struct {
    const char *tail; /* appended to h, or a whole text when it starts with '!' */
    const char *msg;
  } cases[] = {
      {"!", "json ends early"},
      {"!{", "json ends early"},
      {"!{\"format\":", "json ends early"},
      {"![1,2", "json ends early"},
      {"!{\"format\":\"zcc-topo\"} x", "json syntax error at byte 22"},
      {"!{\"format\":\"zcc-topo\"} ", "has no \"version\""},
      {"!{\"format\":\"zcc-topo\",}", "json syntax error"},
      {"![[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
       "json syntax error"},
      {"!{\"format\":\"zcc-topo\",\"version\":NaN,\"hosts\":[]}", "'version' must be an integer, not double"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"n\",\"kind\":\"nic\",\"speed_gbps\":NaN}]}]}", "'speed_gbps' is nan, out of range"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"n\",\"kind\":\"nic\",\"speed_gbps\":-Infinity}]}]}", "'speed_gbps' is -inf, out of range"},
      {"![]", "the top level must be object, not array"},
      {"!{\"format\":\"nccl\",\"version\":1,\"hosts\":[]}", "format is 'nccl'"},
      {"!{\"format\":\"zcc-topo\",\"version\":7,\"hosts\":[]}", "version 7 is not supported"},
      {"!{\"format\":\"zcc-topo\",\"version\":1}", "has no \"hosts\""},
      {"!{\"format\":\"zcc-topo\",\"version\":1,\"hosts\":[],\"extra\":1}", "unknown field 'extra'"},
      {"{}}", "\"hosts\" must be array, not object"},
      {"[1]}", "host 0 must be object, not int"},
      {"[{\"name\":\"a\"}]}", "host 'a' has no \"nodes\""},
      {"[{\"name\":\"\",\"nodes\":[]}]}", "has an empty name"},
      {"[{\"name\":\"a\",\"nodes\":[]},{\"name\":\"a\",\"nodes\":[]}]}", "host name 'a' appears twice"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"},{\"id\":\"g\",\"kind\":\"cpu\"}]}]}",
       "node id 'g' appears twice"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"toaster\"}]}]}", "kind 'toaster'"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"net\"}]}]}", "kind 'net'"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":5,\"kind\":\"gpu\"}]}]}", "'id' must be a string, not int"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\",\"dev\":-4}]}]}", "'dev' is out of range"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\",\"dev\":99999999999999999999}]}]}",
       "'dev' is out of range"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\",\"dev\":1.5}]}]}", "'dev' must be an integer"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"n\",\"kind\":\"nic\",\"speed_gbps\":1e300}]}]}",
       "'speed_gbps' is 1e+300, out of range"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"n\",\"kind\":\"nic\",\"net\":\"eth\"}]}]}",
       "network 'eth' is not in \"networks\""},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\",\"net\":\"ib\"}]}]}",
       "only nics attach to a network"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"0123456789012345678901234567890123\",\"kind\":\"gpu\"}]}]}",
       "'id' is longer than 31 bytes"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\\u0000x\",\"kind\":\"gpu\"}]}]}", "'id' holds a NUL byte"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"}],\"links\":[{\"a\":\"g\",\"b\":\"g\",\"type\":\"pcie\"}]}]}",
       "link from 'g' to itself"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"}],\"links\":[{\"a\":\"g\",\"b\":\"h\",\"type\":\"pcie\"}]}]}",
       "no node 'h' in this host"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"},{\"id\":\"c\",\"kind\":\"cpu\"}],"
       "\"links\":[{\"a\":\"g\",\"b\":\"c\",\"type\":\"warp\"}]}]}", "type 'warp' is not one of"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"},{\"id\":\"c\",\"kind\":\"cpu\"}],"
       "\"links\":[{\"a\":\"g\",\"b\":\"c\",\"type\":\"smp\"}]}]}", "smp link 'g'-'c' must join two cpus"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"p\",\"kind\":\"pci\"},{\"id\":\"c\",\"kind\":\"cpu\"}],"
       "\"links\":[{\"a\":\"p\",\"b\":\"c\",\"type\":\"nvlink\"}]}]}", "nvlink 'p'-'c' must join a gpu"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"},{\"id\":\"c\",\"kind\":\"cpu\"}],"
       "\"links\":[{\"a\":\"g\",\"b\":\"c\",\"type\":\"pcie\",\"bw\":-1}]}]}", "'bw' is -1, out of range"},
      {"[{\"name\":\"a\",\"nodes\":[{\"id\":\"g\",\"kind\":\"gpu\"},{\"id\":\"c\",\"kind\":\"cpu\"}],"
       "\"links\":[{\"a\":\"g\",\"b\":\"c\",\"type\":\"pcie\",\"gen\":99}]}]}", "'gen' is out of range"},
      {"[{\"name\":\"a\",\"same_as\":\"b\"}]}", "same_as 'b' is not an earlier host"},
      {"[{\"name\":\"a\",\"same_as\":\"a\"}]}", "same_as 'a' is not an earlier host"},
      {"[{\"name\":\"a\",\"nodes\":[]},{\"name\":\"b\",\"same_as\":\"a\",\"nodes\":[]}]}",
       "has no nodes or links of its own"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[4096];
    if (cases[i].tail[0] == '!') snprintf(text, sizeof(text), "%s", cases[i].tail + 1);
    else snprintf(text, sizeof(text), "%s%s", h, cases[i].tail);
    zcc_topo_t *g = NULL;
    zccResult_t res = zcc_topo_load_json(text, strlen(text), "case.json", &g);
    if (res != zccInvalidArgument || !strstr(zcc_last_error(), cases[i].msg) ||
        strncmp(zcc_last_error(), "case.json", 9) != 0)
      fail_msg("case %zu (%s): expected invalid argument with '%s', got %d: '%s'", i, text,
               cases[i].msg, res, zcc_last_error());
    assert_null(g);
  }
  /* a NUL byte inside the buffer, and a file that is not a regular file */
  char nul[] = "{\"format\":\"zcc-topo\"\0,\"version\":1}";
  zcc_topo_t *g = NULL;
  assert_int_equal(zcc_topo_load_json(nul, sizeof(nul) - 1, "nul.json", &g), zccInvalidArgument);
  assert_int_equal(zcc_topo_load_file("/tmp", &g), zccInvalidArgument);
  assert_non_null(strstr(zcc_last_error(), "is not a regular file"));
}

/*
 * LeakSanitizer: hwloc's libxml2 plugin allocates the parser's globals once
 * per process when hwloc loads its plugins and never frees them (a bare
 * hwloc_topology_init/load/destroy shows the same 2032 bytes).
 */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhwloc.so\n"; }
/* the slow unwinder, so that the plugin's stacks reach libhwloc */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixture_contents),  cmocka_unit_test(test_paths_dgx),
      cmocka_unit_test(test_paths_vm_and_pcie), cmocka_unit_test(test_route_across_hosts),
      cmocka_unit_test(test_roundtrip),         cmocka_unit_test(test_detect_this_machine),
      cmocka_unit_test(test_for_comm_env),      cmocka_unit_test(test_hostile_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
