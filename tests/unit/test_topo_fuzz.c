/*
 * Deterministic fuzzing of the JSON loader (and of the planner on whatever
 * loads): the fixtures mutated byte by byte (flips, cuts, splices, tokens)
 * and value by value (every field set to other types, extremes, long and
 * odd strings, deleted, duplicated). Each input must load or fail with a
 * message naming the file; a graph that loads must survive dump/reload
 * unchanged and planning. Runs in a few seconds; ZCC_FUZZ_ITERS=N for more,
 * ZCC_FUZZ_SEED=S for other inputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "planner.h"
#include "test_topo_util.h"

static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}
static size_t pick_n(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static long iters(long dflt) {
  const char *s = getenv("ZCC_FUZZ_ITERS");
  return s && atol(s) > 0 ? atol(s) : dflt;
}

static int loaded, refused;

/* Load; on success check the invariants and plan. */
static void try_input(const char *text, size_t len) {
  zcc_topo_t *g = NULL;
  zccResult_t res = zcc_topo_load_json(text, len, "fuzz.json", &g);
  if (res != zccSuccess) {
    if (strncmp(zcc_last_error(), "fuzz.json: ", 11) != 0 &&
        strncmp(zcc_last_error(), "topology: ", 10) != 0)
      fail_msg("error without its cause's place: '%s'", zcc_last_error());
    refused++;
    return;
  }
  loaded++;
  char *dump;
  assert_int_equal(zcc_topo_dump_json(g, 0, &dump), zccSuccess);
  zcc_topo_t *h = NULL;
  if (zcc_topo_load_json(dump, strlen(dump), "redump.json", &h) != zccSuccess)
    fail_msg("a loaded graph does not reload from its dump: %s\n%s", zcc_last_error(), dump);
  char why[256];
  if (!zcc_topo_equal(g, h, why, sizeof(why))) fail_msg("load(dump(g)) != g: %s", why);
  free(dump);
  zcc_topo_free(h);
  /* plan on every GPU (or a few CPU ranks); refusals are fine, crashes are not */
  int ngpu = zcc_topo_count(g, -1, ZCC_TOPO_GPU);
  int n = ngpu > 0 ? (ngpu > 64 ? 64 : ngpu) : 3;
  int *nodes = malloc(sizeof(int) * (size_t)n);
  if (zcc_planner_place(g, n, nodes) == zccSuccess) {
    zcc_planner_t *p;
    if (zcc_planner_build(g, n, nodes, &p) == zccSuccess) {
      zcc_choice_t c;
      for (int coll = 0; coll < ZCC_COLL_SENDRECV; coll++)
        (void)zcc_planner_pick(p, (zcc_coll_t)coll, (size_t)1 << pick_n(31), &c);
      zcc_planner_free(p);
    }
  }
  free(nodes);
  zcc_topo_free(g);
}

static const char *const tokens[] = {
    "{", "}", "[", "]", ",", ":", "\"", "\\", "\\u0000", "\\ud800", "null", "true", "-1",
    "0", "1e999", "-1e999", "NaN", "Infinity", "9223372036854775808", "-0", "1.5", "\"gpu0\"",
    "\"nvlink\"", "\"pcie\"", "\"same_as\":\"dgx-00\"", "\"net\":\"ib\"", "\xff\xfe", "/*", "\n"};

static size_t mutate_bytes(const char *in, size_t len, char *out, size_t cap) {
  size_t n = len < cap ? len : cap;
  memcpy(out, in, n);
  int rounds = 1 + (int)pick_n(4);
  for (int r = 0; r < rounds; r++) {
    size_t at = pick_n(n + 1);
    switch (pick_n(6)) {
    case 0: /* flip a byte */
      if (n) out[pick_n(n)] ^= (char)(1 + pick_n(255));
      break;
    case 1: /* cut a range */
      if (n) {
        size_t k = 1 + pick_n(n - at < 64 ? n - at + 1 : 64);
        if (at + k > n) k = n - at;
        memmove(out + at, out + at + k, n - at - k);
        n -= k;
      }
      break;
    case 2: { /* insert a token */
      const char *t = tokens[pick_n(sizeof(tokens) / sizeof(tokens[0]))];
      size_t k = strlen(t);
      if (n + k <= cap) {
        memmove(out + at + k, out + at, n - at);
        memcpy(out + at, t, k);
        n += k;
      }
      break;
    }
    case 3: /* duplicate a range */
      if (n) {
        size_t from = pick_n(n), k = 1 + pick_n(200);
        if (from + k > n) k = n - from;
        if (n + k <= cap) {
          memmove(out + at + k, out + at, n - at);
          memmove(out + at, out + from + (from >= at ? k : 0), k);
          n += k;
        }
      }
      break;
    case 4: /* truncate */
      n = at;
      break;
    default: /* a digit changed */
      for (size_t i = 0; i < n; i++) {
        size_t j = (at + i) % (n ? n : 1);
        if (out[j] >= '0' && out[j] <= '9') {
          out[j] = (char)('0' + pick_n(10));
          break;
        }
      }
      break;
    }
  }
  return n;
}

static json_object *random_value(void) {
  switch (pick_n(12)) {
  case 0: return json_object_new_int64(-1);
  case 1: return json_object_new_int64(INT64_MAX);
  case 2: return json_object_new_int64((int64_t)pick_n(40));
  case 3: return json_object_new_double(1e308);
  case 4: return json_object_new_double(-0.0);
  case 5: return json_object_new_double((double)pick_n(1000) / 7.0);
  case 6: return json_object_new_string("");
  case 7: {
    char buf[300];
    memset(buf, 'x', sizeof(buf) - 1);
    buf[pick_n(sizeof(buf))] = '\0';
    return json_object_new_string(buf);
  }
  case 8: {
    static const char *ids[] = {"gpu0", "gpu1", "cpu0", "cpu1", "nvs0", "nic0", "pci0", "ib",
                                "eth", "dgx-00", "nvlink", "pcie", "smp", "net", "gpu", "cpu",
                                "nic", "nvswitch", "pci"};
    return json_object_new_string(ids[pick_n(sizeof(ids) / sizeof(ids[0]))]);
  }
  case 9: return json_object_new_object();
  case 10: return json_object_new_array();
  default: return NULL; /* json null */
  }
}

/* Mutate one random place of the tree. */
static void mutate_tree(json_object *o, int depth) {
  json_type t = json_object_get_type(o);
  if (t == json_type_array) {
    size_t n = json_object_array_length(o);
    if (n == 0 || pick_n(4) == 0) {
      json_object_array_add(o, pick_n(2) ? random_value() : json_object_new_object());
      return;
    }
    size_t i = pick_n(n);
    json_object *e = json_object_array_get_idx(o, i);
    switch (pick_n(depth > 0 ? 5 : 3)) {
    case 0: json_object_array_add(o, json_object_get(e)); return; /* duplicate */
    case 1: json_object_array_del_idx(o, i, 1); return;
    case 2: json_object_array_put_idx(o, i, random_value()); return;
    default: mutate_tree(e, depth + 1); return;
    }
  }
  if (t == json_type_object) {
    int n = json_object_object_length(o);
    int k = (int)pick_n((size_t)(n ? n : 1)), i = 0;
    const char *key = NULL;
    json_object_object_foreach(o, name, val) {
      (void)val;
      if (i++ == k) {
        key = name;
        break;
      }
    }
    if (!key || pick_n(8) == 0) {
      static const char *keys[] = {"gen", "width", "bw", "lat", "net", "same_as", "dev",
                                   "speed_gbps", "bogus", "nodes", "links"};
      json_object_object_add(o, keys[pick_n(sizeof(keys) / sizeof(keys[0]))], random_value());
      return;
    }
    json_object *v = json_object_object_get(o, key);
    switch (pick_n(5)) {
    case 0: json_object_object_del(o, key); return;
    case 1: json_object_object_add(o, key, random_value()); return;
    default:
      if (v && (json_object_get_type(v) == json_type_object || json_object_get_type(v) == json_type_array))
        mutate_tree(v, depth + 1);
      else
        json_object_object_add(o, key, random_value());
      return;
    }
  }
}

static const char *const seeds[] = {"h200-nv18-vm.json", "pcie-4gpu-2socket.json", "cpu-vm.json",
                                    "dgx-h100.json", "dgx-h100-x2.json"};

static void seed_rng(uint64_t salt) {
  const char *s = getenv("ZCC_FUZZ_SEED");
  rng_state = (s ? strtoull(s, NULL, 0) : 0x9e3779b97f4a7c15ull) ^ (salt * 0x2545f4914f6cdd1dull);
  if (!rng_state) rng_state = 1;
}

static void test_byte_mutations(void **s) {
  seed_rng(1);
  long n = iters(4000);
  loaded = refused = 0;
  for (size_t f = 0; f < sizeof(seeds) / sizeof(seeds[0]); f++) {
    size_t len;
    char *text = read_fixture(seeds[f], &len);
    assert_non_null(text);
    size_t cap = len * 2 + 1024;
    char *buf = malloc(cap);
    for (long i = 0; i < n / (long)(sizeof(seeds) / sizeof(seeds[0])); i++) {
      size_t m = mutate_bytes(text, len, buf, cap);
      try_input(buf, m);
    }
    free(buf);
    free(text);
  }
  printf("byte mutations: %d loaded, %d refused with a message\n", loaded, refused);
}

static void test_value_mutations(void **s) {
  seed_rng(2);
  long n = iters(4000);
  loaded = refused = 0;
  for (size_t f = 0; f < sizeof(seeds) / sizeof(seeds[0]); f++) {
    size_t len;
    char *text = read_fixture(seeds[f], &len);
    assert_non_null(text);
    for (long i = 0; i < n / (long)(sizeof(seeds) / sizeof(seeds[0])); i++) {
      json_object *root = json_tokener_parse(text);
      assert_non_null(root);
      int rounds = 1 + (int)pick_n(3);
      for (int r = 0; r < rounds; r++) mutate_tree(root, 0);
      const char *m = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
      try_input(m, strlen(m));
      json_object_put(root);
    }
    free(text);
  }
  printf("value mutations: %d loaded, %d refused with a message\n", loaded, refused);
  assert_true(loaded > 0 && refused > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_byte_mutations),
                                     cmocka_unit_test(test_value_mutations)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
