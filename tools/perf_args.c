/*
 * The benchmarks' command line: nccl-tests' options (short and long forms,
 * value attached or in the next argument) plus -np and --json.
 */
#include "perf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "perf_util.h"

/* Ranks that -np may fork. */
#define PERF_MAX_NP 1024

static const char *const type_names[zccNumTypes] = {
    [zccInt8] = "int8",       [zccUint8] = "uint8",       [zccInt32] = "int32",
    [zccUint32] = "uint32",   [zccInt64] = "int64",       [zccUint64] = "uint64",
    [zccFloat16] = "half",    [zccFloat32] = "float",     [zccFloat64] = "double",
    [zccBfloat16] = "bfloat16", [zccFloat8e4m3] = "f8e4m3", [zccFloat8e5m2] = "f8e5m2",
};

static const size_t type_sizes[zccNumTypes] = {
    [zccInt8] = 1,    [zccUint8] = 1,    [zccInt32] = 4,      [zccUint32] = 4,
    [zccInt64] = 8,   [zccUint64] = 8,   [zccFloat16] = 2,    [zccFloat32] = 4,
    [zccFloat64] = 8, [zccBfloat16] = 2, [zccFloat8e4m3] = 1, [zccFloat8e5m2] = 1,
};

static const char *const op_names[zccNumOps] = {
    [zccSum] = "sum", [zccProd] = "prod", [zccMax] = "max",
    [zccMin] = "min", [zccAvg] = "avg",
};

/* Other spellings accepted by -d. */
static const struct {
  const char *alias;
  int type;
} type_aliases[] = {
    {"char", zccInt8},        {"int", zccInt32},         {"float16", zccFloat16},
    {"fp16", zccFloat16},     {"float32", zccFloat32},   {"fp32", zccFloat32},
    {"float64", zccFloat64},  {"fp64", zccFloat64},      {"bf16", zccBfloat16},
    {"e4m3", zccFloat8e4m3},  {"fp8e4m3", zccFloat8e4m3}, {"e5m2", zccFloat8e5m2},
    {"fp8e5m2", zccFloat8e5m2},
};

const char *perf_type_name(int type)
{
  return (type >= 0 && type < zccNumTypes) ? type_names[type] : "invalid";
}

size_t perf_type_size(int type)
{
  return (type >= 0 && type < zccNumTypes) ? type_sizes[type] : 0;
}

static const char *const buffers_names[PERF_BUF_COUNT] = {"device", "pinned", "managed",
                                                            "hostmem"};

const char *perf_buffers_name(int buffers)
{
  return buffers >= 0 && buffers < PERF_BUF_COUNT ? buffers_names[buffers] : "invalid";
}

const char *perf_op_name(int op)
{
  if (op == PERF_OP_NONE)
    return "none";
  return (op >= 0 && op < zccNumOps) ? op_names[op] : "invalid";
}

static void usage(FILE *f, const char *prog, const perf_coll_t *coll)
{
  fprintf(f,
          "usage: %s [options]\n"
          "Times zcc %s over a sweep of sizes, as nccl-tests does, and checks every result.\n"
          "\n"
          "  -b, --minbytes <size>       smallest size in bytes (suffixes K, M, G); default 32M\n"
          "  -e, --maxbytes <size>       largest size; default 32M\n"
          "  -f, --stepfactor <n>        multiply the size by the integer n each step; default 1 (use -i)\n"
          "  -i, --stepbytes <size>      add this to the size each step when -f is 1; default 1M\n"
          "  -n, --iters <n>             timed iterations per size; default 20\n"
          "  -w, --warmup_iters <n>      untimed iterations before them; default 5\n"
          "  -c, --check <0|1>           verify every element of every result exactly; default 1\n"
          "  -d, --datatype <type>       int8 uint8 int32 uint32 int64 uint64 half float double\n"
          "                              bfloat16 f8e4m3 f8e5m2, or all; default float\n",
          prog, coll->name);
  if (coll->reduces)
    fprintf(f, "  -o, --op <op>               sum prod max min avg, or all; default sum\n");
  else
    fprintf(f, "  -o, --op <op>               accepted and ignored: %s does not reduce\n", coll->name);
  if (coll->rooted)
    fprintf(f, "  -r, --root <rank>           root rank, or all; default 0\n");
  else
    fprintf(f, "  -r, --root <rank>           accepted and ignored: %s has no root\n", coll->name);
  fprintf(f,
          "  -R, --local_register <0|1>  register both buffers with zccCommRegister (and\n"
          "                              ncclCommRegister with --compare nccl); on host\n"
          "                              communicators that makes ordinary buffers shared memory,\n"
          "                              so large allreduces run in place; default 0\n"
          "      --buffers <device|pinned|managed|hostmem>  GPU communicators: send and receive\n"
          "                              buffers from cudaMalloc (device), cudaHostAlloc mapped and\n"
          "                              portable (pinned: the kernels load and store host memory over\n"
          "                              PCIe) or cudaMallocManaged (managed); default device. Host\n"
          "                              communicators: ordinary memory (posix_memalign), or\n"
          "                              zccMemHostAlloc (hostmem: large allreduces run in place)\n"
          "  -t, --nthreads <n>          threads per process; only 1\n"
          "  -g, --ngpus <n>             GPUs per process, one rank and communicator each\n"
          "                              (zccCommInitAll, calls grouped); default 1\n"
          "      --share-gpus <0|1>      1: ranks may share GPUs (-g or -np beyond the GPUs there are:\n"
          "                              rank i on GPU i modulo their count); default 0\n"
          "  -np <n>                     fork n local ranks (up to %d); the parent makes the unique id\n"
          "      --bind <none|core>      -np: core binds rank i to the i-th CPU this process may run on\n"
          "                              when there are at least n of them (as mpirun binds); default core\n"
          "      --device <host|cuda>    host: host communicators and memory; cuda: GPU communicators,\n"
          "                              device buffers and streams; default: ZCC_DEVICE, else cuda when\n"
          "                              a GPU exists and the benchmarks were built with CUDA, else host\n"
          "  -G, --cudagraph <n>         capture one iteration into a CUDA graph per GPU and time n\n"
          "                              replays of it instead of -n iterations; default 0 (no graphs)\n"
          "      --compare nccl          run the same sweep through NCCL (dlopen libnccl.so.2, or\n"
          "                              ZCC_NCCL_LIB) and print both with busbw ratio zcc/NCCL\n"
          "      --json <file>           also write every result and the environment to file as JSON\n"
          "  -h, --help                  show this help\n"
          "\n"
          "Ranks: with -np n, n forked processes; under mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE),\n"
          "one rank per MPI process; under torchrun, from its environment; otherwise one rank.\n"
          "Each process drives -g GPUs: process i of its host uses GPUs i*g .. i*g+g-1.\n"
          "Time is the median over -n iterations of the slowest rank's time per iteration:\n"
          "wall time on the host, CUDA events on each GPU's stream.\n",
          PERF_MAX_NP);
}

static void bad_arg(const char *prog, const perf_coll_t *coll, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

static void bad_arg(const char *prog, const perf_coll_t *coll, const char *fmt, ...)
{
  va_list ap;

  fprintf(stderr, "%s: ", prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n\n");
  usage(stderr, prog, coll);
  exit(PERF_EXIT_USAGE);
}

/* The type, PERF_ALL, or -3 when unknown. */
static int parse_type(const char *s)
{
  if (strcmp(s, "all") == 0)
    return PERF_ALL;
  for (int t = 0; t < zccNumTypes; t++)
    if (strcmp(s, type_names[t]) == 0)
      return t;
  for (size_t i = 0; i < sizeof(type_aliases) / sizeof(type_aliases[0]); i++)
    if (strcmp(s, type_aliases[i].alias) == 0)
      return type_aliases[i].type;
  return -3;
}

/* The op, PERF_ALL, or -3 when unknown. */
static int parse_op(const char *s)
{
  if (strcmp(s, "all") == 0)
    return PERF_ALL;
  for (int o = 0; o < zccNumOps; o++)
    if (strcmp(s, op_names[o]) == 0)
      return o;
  return -3;
}

/* Option names: the short letter, or 'N' for -np and 'J' for --json. */
static const struct {
  const char *long_name;
  char key;
} long_opts[] = {
    {"minbytes", 'b'},     {"maxbytes", 'e'},       {"stepbytes", 'i'},
    {"stepfactor", 'f'},   {"iters", 'n'},          {"warmup_iters", 'w'},
    {"check", 'c'},        {"datatype", 'd'},       {"op", 'o'},
    {"root", 'r'},         {"local_register", 'R'}, {"nthreads", 't'},
    {"ngpus", 'g'},        {"np", 'N'},             {"json", 'J'},
    {"device", 'D'},       {"cudagraph", 'G'},      {"compare", 'C'},
    {"share-gpus", 'S'},   {"help", 'h'},           {"bind", 'B'},
    {"buffers", 'M'},
};

/* The device came from ZCC_DEVICE rather than --device (for messages). */
static int device_from_env;

/* The PERF_DEVICE_* value of a --device or ZCC_DEVICE word, or -1. */
static int parse_device(const char *s)
{
  if (strcasecmp(s, "auto") == 0)
    return PERF_DEVICE_AUTO;
  if (strcasecmp(s, "host") == 0 || strcasecmp(s, "cpu") == 0)
    return PERF_DEVICE_HOST;
  if (strcasecmp(s, "cuda") == 0 || strcasecmp(s, "gpu") == 0)
    return PERF_DEVICE_CUDA;
  return -1;
}

const char *perf_device_name(int device)
{
  switch (device) {
  case PERF_DEVICE_HOST:
    return "host";
  case PERF_DEVICE_CUDA:
    return "cuda";
  default:
    return "auto";
  }
}

#ifndef ZCC_PERF_WITH_CUDA
static void no_cuda(const char *prog, const char *what) __attribute__((noreturn));

static void no_cuda(const char *prog, const char *what)
{
  fprintf(stderr, "%s: %s: these benchmarks were built without CUDA "
          "(configure zcc with CUDA to run on GPUs)\n", prog, what);
  exit(PERF_EXIT_USAGE);
}
#endif

static void set_option(const char *prog, const perf_coll_t *coll, char key,
                       const char *name, const char *val, perf_opts_t *o)
{
  long v;

  switch (key) {
  case 'b':
  case 'e':
  case 'i':
    if (perf_parse_size(val, key == 'b' ? &o->min_bytes
                             : key == 'e' ? &o->max_bytes : &o->step_bytes) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a size in bytes (a whole number with an optional K, M or G)",
              name, val);
    break;
  case 'f':
    if (perf_parse_long(val, 1, 1 << 20, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not an integer step factor of at least 1", name, val);
    o->step_factor = v;
    break;
  case 'n':
    if (perf_parse_long(val, 1, 1 << 24, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not an iteration count of at least 1", name, val);
    o->iters = (int)v;
    break;
  case 'w':
    if (perf_parse_long(val, 0, 1 << 24, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a warm-up count of at least 0", name, val);
    o->warmup = (int)v;
    break;
  case 'c':
  case 'R':
    if (perf_parse_long(val, 0, 1, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' must be 0 or 1", name, val);
    if (key == 'c')
      o->check = (int)v;
    else
      o->local_register = (int)v;
    break;
  case 'd':
    o->type = parse_type(val);
    if (o->type == -3)
      bad_arg(prog, coll, "%s: unknown datatype '%s'", name, val);
    break;
  case 'o':
    o->op = parse_op(val);
    if (o->op == -3)
      bad_arg(prog, coll, "%s: unknown reduction op '%s' (sum, prod, max, min, avg or all)", name, val);
    break;
  case 'r':
    if (strcmp(val, "all") == 0)
      o->root = PERF_ALL;
    else if (perf_parse_long(val, 0, 1 << 30, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a root rank (a rank number or all)", name, val);
    else
      o->root = (int)v;
    break;
  case 't':
    if (perf_parse_long(val, 1, 1 << 20, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a thread count of at least 1", name, val);
    if (v != 1)
      bad_arg(prog, coll, "%s %s: several threads per process are not supported; "
              "run one rank per process with -np or mpirun", name, val);
    o->nthreads = 1;
    break;
  case 'g':
    if (perf_parse_long(val, 1, PERF_MAX_GPUS, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a GPU count between 1 and %d", name, val,
              PERF_MAX_GPUS);
    o->ngpus = (int)v;
    break;
  case 'B':
    if (strcmp(val, "none") == 0)
      o->bind = 0;
    else if (strcmp(val, "core") == 0)
      o->bind = 1;
    else
      bad_arg(prog, coll, "%s: '%s' is not none or core", name, val);
    break;
  case 'M':
    o->buffers = -1;
    for (int b = 0; b < PERF_BUF_COUNT; b++)
      if (strcmp(val, buffers_names[b]) == 0)
        o->buffers = b;
    if (o->buffers < 0)
      bad_arg(prog, coll, "%s: '%s' is not device, pinned, managed or hostmem", name, val);
    break;
  case 'S':
    if (perf_parse_long(val, 0, 1, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not 0 or 1", name, val);
    o->share_gpus = (int)v;
    break;
  case 'G':
    if (perf_parse_long(val, 0, 1 << 24, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a graph replay count of at least 0", name, val);
    o->graph_iters = (int)v;
    break;
  case 'D':
    device_from_env = 0;
    o->device = parse_device(val);
    if (o->device < 0)
      bad_arg(prog, coll, "%s: unknown device '%s' (host or cuda)", name, val);
    break;
  case 'C':
    if (strcasecmp(val, "nccl") != 0)
      bad_arg(prog, coll, "%s: cannot compare with '%s' (only nccl)", name, val);
    o->compare_nccl = 1;
    break;
  case 'N':
    if (perf_parse_long(val, 1, PERF_MAX_NP, &v) != 0)
      bad_arg(prog, coll, "%s: '%s' is not a rank count between 1 and %d", name, val,
              PERF_MAX_NP);
    o->np = (int)v;
    break;
  case 'J':
    if (*val == '\0')
      bad_arg(prog, coll, "%s: the file name is empty", name);
    o->json_path = val;
    break;
  }
}

/* What needs GPUs: -g above 1, -G and --compare ask for --device cuda. */
static void check_device(const char *prog, const perf_coll_t *coll, perf_opts_t *o)
{
  const char *gpu_only = o->buffers == PERF_BUF_MANAGED  ? "--buffers managed"
                         : o->buffers == PERF_BUF_PINNED ? "--buffers pinned"
                         : o->compare_nccl ? "--compare nccl"
                         : o->graph_iters > 0 ? "-G" : o->ngpus > 1 ? "-g" : NULL;

  if (o->buffers == PERF_BUF_HOSTMEM) {
    if (o->device == PERF_DEVICE_CUDA || gpu_only != NULL)
      bad_arg(prog, coll, "--buffers hostmem is for host communicators, not with %s",
              gpu_only ? gpu_only : device_from_env ? "ZCC_DEVICE=cuda" : "--device cuda");
    o->device = PERF_DEVICE_HOST;
  }
#ifndef ZCC_PERF_WITH_CUDA
  if (o->device == PERF_DEVICE_CUDA)
    no_cuda(prog, device_from_env ? "ZCC_DEVICE=cuda" : "--device cuda");
  if (gpu_only != NULL)
    no_cuda(prog, gpu_only);
  o->device = PERF_DEVICE_HOST;
#else
  if (gpu_only != NULL && o->device == PERF_DEVICE_HOST)
    bad_arg(prog, coll, "%s needs GPU communicators (--device cuda), not %s", gpu_only,
            device_from_env ? "ZCC_DEVICE=host" : "--device host");
  if (o->device == PERF_DEVICE_CUDA)
    o->device_why = device_from_env ? "ZCC_DEVICE=cuda" : "--device cuda";
  else if (gpu_only != NULL)
    o->device_why = gpu_only;
  if (gpu_only != NULL)
    o->device = PERF_DEVICE_CUDA;
#endif
}

void perf_parse_args(const perf_coll_t *coll, int argc, char **argv,
                     perf_opts_t *o)
{
  const char *prog = argv[0] ? strrchr(argv[0], '/') : NULL;

  prog = prog ? prog + 1 : (argv[0] ? argv[0] : coll->name);
  memset(o, 0, sizeof(*o));
  o->min_bytes = 32u << 20;
  o->max_bytes = 32u << 20;
  o->step_bytes = 1u << 20;
  o->step_factor = 1;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->type = zccFloat32;
  o->op = zccSum;
  o->root = 0;
  o->nthreads = 1;
  o->bind = 1;
  o->ngpus = 1;
  o->device = PERF_DEVICE_AUTO;
  if (getenv("ZCC_DEVICE") != NULL && parse_device(getenv("ZCC_DEVICE")) >= 0) {
    o->device = parse_device(getenv("ZCC_DEVICE"));
    device_from_env = 1;
  }

  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = NULL, *name = arg;
    char key = 0, namebuf[64];

    if (arg[0] != '-' || arg[1] == '\0')
      bad_arg(prog, coll, "unexpected argument '%s'", arg);
    if (strcmp(arg, "-np") == 0 || strcmp(arg, "--np") == 0) {
      key = 'N';
    } else if (arg[1] == '-') {
      const char *eq = strchr(arg + 2, '=');
      size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
      for (size_t k = 0; k < sizeof(long_opts) / sizeof(long_opts[0]); k++)
        if (strlen(long_opts[k].long_name) == len &&
            strncmp(arg + 2, long_opts[k].long_name, len) == 0)
          key = long_opts[k].key;
      if (key == 0)
        bad_arg(prog, coll, "unknown option '%s'", arg);
      snprintf(namebuf, sizeof(namebuf), "--%.*s", (int)len, arg + 2);
      name = namebuf;
      if (eq)
        val = eq + 1;
    } else {
      key = arg[1];
      if (strchr("beifnwcdorRtgGh", key) == NULL)
        bad_arg(prog, coll, "unknown option '%s'", arg);
      snprintf(namebuf, sizeof(namebuf), "-%c", key);
      name = namebuf;
      if (arg[2] != '\0')
        val = arg + 2;
    }
    if (key == 'h') {
      if (val != NULL)
        bad_arg(prog, coll, "%s takes no value", name);
      usage(stdout, prog, coll);
      exit(PERF_EXIT_OK);
    }
    if (val == NULL) {
      if (i + 1 >= argc)
        bad_arg(prog, coll, "%s needs a value", name);
      val = argv[++i];
    }
    set_option(prog, coll, key, name, val, o);
  }

  if (o->min_bytes > o->max_bytes)
    bad_arg(prog, coll, "minimum size %zu bytes is larger than the maximum %zu bytes",
            o->min_bytes, o->max_bytes);
  if (o->step_factor <= 1 && o->step_bytes == 0 && o->min_bytes < o->max_bytes)
    bad_arg(prog, coll, "-i 0 with -f 1 never reaches the maximum size");
  if (!coll->reduces)
    o->op = PERF_OP_NONE;
  if (!coll->rooted)
    o->root = 0;
  check_device(prog, coll, o);
}
