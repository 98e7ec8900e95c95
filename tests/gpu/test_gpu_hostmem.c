/*
 * GPU communicators on host memory: pinned buffers (cudaHostAlloc,
 * cudaHostRegister) and managed memory as send and receive buffers, in and
 * out of place, at byte offsets, exact against a CPU reference; pageable
 * and freed memory refused with a message and nothing written. Two ranks
 * on GPU 0 in one process (a device list that repeats it), so it runs on a
 * one-GPU host; ZCC_P2P_DISABLE=1 runs the same over the shm transport.
 * Mixed cases give rank 1 device memory while rank 0's is pinned (each rank
 * picks how it reads its own input; the peers must not notice), and large
 * ones make every lane of the push kernel wrap its slots.
 * And a host communicator's zccCommRegister: CUDA-pinned memory keeps its
 * pages (registered, not made shared), while malloc'd memory becomes shared.
 * Exit 77 (skipped) without a GPU.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcc.h"

#define NR 2

static int failures;

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
              cudaGetErrorString(e_));                                             \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

#define ZK(call)                                                                   \
  do {                                                                             \
    zccResult_t r_ = (call);                                                       \
    if (r_ != zccSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,          \
              zccGetErrorString(r_), zccGetLastError(NULL));                       \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

typedef enum { K_HOSTALLOC, K_REGISTERED, K_MANAGED, K_DEVICE, NKINDS } kind_t;
static const char *kind_names[NKINDS] = {"cudaHostAlloc", "cudaHostRegister", "managed",
                                         "device"};

typedef struct {
  kind_t kind;
  char *base; /* what was allocated */
  size_t bytes;
  char *host; /* host-visible copy for device memory, else base */
} buf_t;

static void buf_new(buf_t *b, kind_t k, size_t bytes) {
  b->kind = k;
  b->bytes = bytes;
  switch (k) {
  case K_HOSTALLOC: CK(cudaHostAlloc((void **)&b->base, bytes, cudaHostAllocMapped | cudaHostAllocPortable)); break;
  case K_REGISTERED:
    b->base = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!b->base) exit(1);
    CK(cudaHostRegister(b->base, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    break;
  case K_MANAGED: CK(cudaMallocManaged((void **)&b->base, bytes, cudaMemAttachGlobal)); break;
  default: CK(cudaMalloc((void **)&b->base, bytes)); break;
  }
  b->host = k == K_DEVICE ? malloc(bytes) : b->base;
  if (!b->host) exit(1);
}

static void buf_free(buf_t *b) {
  switch (b->kind) {
  case K_HOSTALLOC: CK(cudaFreeHost(b->base)); break;
  case K_REGISTERED:
    CK(cudaHostUnregister(b->base));
    free(b->base);
    break;
  default: CK(cudaFree(b->base)); break;
  }
  if (b->kind == K_DEVICE) free(b->host);
}

/* Host view -> buffer, buffer -> host view (device memory only moves). */
static void push(buf_t *b) {
  if (b->kind == K_DEVICE) CK(cudaMemcpy(b->base, b->host, b->bytes, cudaMemcpyHostToDevice));
}
static void pull(buf_t *b) {
  if (b->kind == K_DEVICE) CK(cudaMemcpy(b->host, b->base, b->bytes, cudaMemcpyDeviceToHost));
}

typedef enum { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_REDUCESCATTER, C_SENDRECV, NCOLLS } coll_t;
static const char *coll_names[NCOLLS] = {"allreduce", "allgather", "broadcast",
                                         "reducescatter", "sendrecv"};

/* One case: count floats per rank's block, buffers of `kind` at byte offset off. */
/* mixed: rank 1's buffers are device memory whatever `kind` says. */
static void run_case(zccComm_t *comms, cudaStream_t *streams, coll_t c, kind_t kind, size_t count,
                     size_t off, int inplace, int mixed, unsigned seed) {
  size_t in_elems = c == C_REDUCESCATTER ? count * NR : count;
  size_t out_elems = c == C_ALLGATHER ? count * NR : count;
  size_t span = (in_elems > out_elems ? in_elems : out_elems) * sizeof(float);
  buf_t in[NR], out[NR];
  float *want[NR];
  for (int r = 0; r < NR; r++) {
    kind_t kr = mixed && r == 1 ? K_DEVICE : kind;
    buf_new(&in[r], kr, span + off + 64);
    buf_new(&out[r], kr, span + off + 64);
    want[r] = malloc(out_elems * sizeof(float) + 1);
  }
  /* fresh data: small integers (exact sums in any order) */
  srand(seed);
  float *src[NR];
  for (int r = 0; r < NR; r++) {
    src[r] = malloc(in_elems * sizeof(float) + 1);
    for (size_t i = 0; i < in_elems; i++) src[r][i] = (float)(rand() % 201 - 100);
    memset(in[r].host, 0x7f, in[r].bytes);  /* poison */
    memset(out[r].host, 0x7f, out[r].bytes);
    memcpy(in[r].host + off, src[r], in_elems * sizeof(float));
    if (inplace) {
      /* in place: the input lies where the API says (allgather: the rank's block) */
      size_t at = c == C_ALLGATHER ? (size_t)r * count : 0;
      memcpy(out[r].host + off + at * sizeof(float), src[r], in_elems * sizeof(float));
    }
    push(&in[r]);
    push(&out[r]);
  }
  for (int r = 0; r < NR; r++)
    for (size_t i = 0; i < out_elems; i++) {
      switch (c) {
      case C_ALLREDUCE: want[r][i] = src[0][i] + src[1][i]; break;
      case C_ALLGATHER: want[r][i] = src[i / count][i % count]; break;
      case C_BROADCAST: want[r][i] = src[0][i]; break;
      case C_REDUCESCATTER: want[r][i] = src[0][r * count + i] + src[1][r * count + i]; break;
      default: want[r][i] = src[(r + NR - 1) % NR][i]; break;
      }
    }
  ZK(zccGroupStart());
  for (int r = 0; r < NR; r++) {
    char *ob = out[r].base + off;
    const char *ib = inplace ? (c == C_ALLGATHER ? ob + (size_t)r * count * sizeof(float)
                                                 : (const char *)ob)
                             : in[r].base + off;
    switch (c) {
    case C_ALLREDUCE: ZK(zccAllReduce(ib, ob, count, zccFloat32, zccSum, comms[r], streams[r])); break;
    case C_ALLGATHER: ZK(zccAllGather(ib, ob, count, zccFloat32, comms[r], streams[r])); break;
    case C_BROADCAST: ZK(zccBroadcast(ib, ob, count, zccFloat32, 0, comms[r], streams[r])); break;
    case C_REDUCESCATTER:
      /* in place: recvbuff is the rank's block of sendbuff */
      ZK(zccReduceScatter(ib, inplace ? ob + (size_t)r * count * sizeof(float) : ob, count,
                          zccFloat32, zccSum, comms[r], streams[r]));
      break;
    default:
      ZK(zccSend(inplace ? in[r].base + off : ib, count, zccFloat32, (r + 1) % NR, comms[r],
                 streams[r]));
      ZK(zccRecv(ob, count, zccFloat32, (r + NR - 1) % NR, comms[r], streams[r]));
      break;
    }
  }
  ZK(zccGroupEnd());
  for (int r = 0; r < NR; r++) CK(cudaStreamSynchronize(streams[r]));
  for (int r = 0; r < NR; r++) {
    pull(&out[r]);
    size_t at = c == C_REDUCESCATTER && inplace ? (size_t)r * count * sizeof(float) : 0;
    const float *got = (const float *)(out[r].host + off + at);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < out_elems; i++)
      if (memcmp(&got[i], &want[r][i], sizeof(float)) != 0 && bad++ == 0) first = i;
    /* nothing written past the output */
    const unsigned char *tail = (const unsigned char *)(out[r].host + off) + out_elems * sizeof(float);
    size_t over = 0;
    for (size_t i = 0; i < 64 && !inplace; i++) over += tail[i] != 0x7f;
    if (bad || over) {
      failures++;
      fprintf(stderr, "FAIL %s %s%s count %zu offset %zu%s rank %d: %zu wrong (first at %zu: %g, "
              "want %g), %zu bytes written past the end\n", coll_names[c], kind_names[kind],
              mixed ? " (rank 1 device)" : "", count,
              off, inplace ? " in place" : "", r, bad, first, bad ? got[first] : 0.0,
              bad ? want[r][first] : 0.0, over);
    }
  }
  for (int r = 0; r < NR; r++) {
    buf_free(&in[r]);
    buf_free(&out[r]);
    free(want[r]);
    free(src[r]);
  }
}

/* Pageable and freed memory: refused, with a message, and nothing written. */
static void refusals(zccComm_t *comms, cudaStream_t *streams) {
  size_t n = 1000;
  float *pageable = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) pageable[i] = 1, out[i] = 7;
  zccResult_t r = zccAllReduce(pageable, out, n, zccFloat32, zccSum, comms[0], streams[0]);
  const char *msg = zccGetLastError(comms[0]);
  if (r != zccInvalidArgument || !strstr(msg, "pin_memory") || !strstr(msg, "cudaHostRegister")) {
    failures++;
    fprintf(stderr, "FAIL pageable buffers: %s, '%s'\n", zccGetErrorString(r), msg);
  }
  for (size_t i = 0; i < n; i++)
    if (out[i] != 7) {
      failures++;
      fprintf(stderr, "FAIL pageable buffers: output changed\n");
      break;
    }
  float *freed = NULL;
  CK(cudaMalloc((void **)&freed, n * sizeof(float)));
  CK(cudaFree(freed));
  r = zccAllReduce(freed, freed, n, zccFloat32, zccSum, comms[0], streams[0]);
  if (r != zccInvalidArgument) {
    /* accepted: rank 0's kernel now waits for a rank 1 that never comes */
    fprintf(stderr, "FAIL freed buffer: %s (%s)\n", zccGetErrorString(r),
            r == zccSuccess ? "enqueued" : zccGetLastError(comms[0]));
    exit(1);
  }
  if (!strstr(zccGetLastError(comms[0]), "freed")) {
    failures++;
    fprintf(stderr, "FAIL freed buffer: '%s'\n", zccGetLastError(comms[0]));
  }
  CK(cudaStreamSynchronize(streams[0]));
  /* the communicator still works after the refusals */
  free(pageable);
  free(out);
}

/* Whether addr lies in a mapping of a registered range's memfd. */
static int in_registered(const void *addr) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  int in = 0;
  while (!in && fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi)
      in = strstr(line, "memfd:zcc-registered") != NULL;
  }
  fclose(f);
  return in;
}

/* A host communicator of one rank registers CUDA-pinned memory (both kinds)
   without moving its pages, and ordinary memory by making it shared; the
   pinned memory still carries a GPU copy afterwards. */
static void host_register(void) {
  zccUniqueId id;
  zccComm_t hc;
  zccConfig_t cfg = ZCC_CONFIG_INITIALIZER;
  cfg.deviceType = zccDeviceHost;
  ZK(zccGetUniqueId(&id));
  ZK(zccCommInitRankConfig(&hc, 1, id, 0, &cfg));
  size_t bytes = (size_t)4 << 20;
  char *alloc = NULL, *reg = malloc(bytes + 8192), *plain = malloc(bytes + 8192);
  CK(cudaHostAlloc((void **)&alloc, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  CK(cudaHostRegister(reg, bytes + 8192, cudaHostRegisterPortable));
  struct {
    const char *what;
    char *p;
    int shared;
  } k[] = {{"cudaHostAlloc", alloc + 100, 0}, {"cudaHostRegister", reg + 100, 0},
           {"malloc", plain + 100, 1}};
  for (int i = 0; i < 3; i++) {
    void *h = NULL;
    memset(k[i].p, 0x11 * (i + 1), bytes - 200);
    ZK(zccCommRegister(hc, k[i].p, bytes - 200, &h));
    if (in_registered(k[i].p + (bytes / 2)) != k[i].shared) {
      failures++;
      fprintf(stderr, "FAIL host comm register of %s memory: shared %d, expected %d\n",
              k[i].what, in_registered(k[i].p + (bytes / 2)), k[i].shared);
    }
    if (!k[i].shared) { /* the GPU still reaches the same pages */
      void *dev = NULL;
      CK(cudaMalloc(&dev, 4096));
      CK(cudaMemset(dev, 0x5c, 4096));
      CK(cudaMemcpy(k[i].p + 8192, dev, 4096, cudaMemcpyDeviceToHost));
      CK(cudaFree(dev));
      if (k[i].p[8192] != 0x5c || k[i].p[8192 + 4095] != 0x5c) {
        failures++;
        fprintf(stderr, "FAIL %s memory after a host comm's registration: the copy did not "
                "land\n", k[i].what);
      }
    }
    ZK(zccCommDeregister(hc, h));
  }
  ZK(zccCommDestroy(hc));
  CK(cudaHostUnregister(reg));
  CK(cudaFreeHost(alloc));
  free(reg);
  free(plain);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("test_gpu_hostmem: skipped: no CUDA GPU\n");
    return 77;
  }
  int devs[NR] = {0, 0};
  zccComm_t comms[NR];
  ZK(zccCommInitAll(comms, NR, devs));
  cudaStream_t streams[NR];
  CK(cudaSetDevice(0));
  for (int r = 0; r < NR; r++) CK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  static const size_t counts[] = {1, 1000, 300001};
  static const size_t offs[] = {0, 4, 1028};
  unsigned seed = 1;
  int cases = 0;
  for (int c = 0; c < NCOLLS; c++)
    for (int k = 0; k < NKINDS; k++)
      for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
        for (int inplace = 0; inplace <= 1; inplace++) {
          if (inplace && c == C_SENDRECV) continue;
          size_t off = offs[(i + (size_t)inplace + (size_t)k) % 3];
          run_case(comms, streams, (coll_t)c, (kind_t)k, counts[i], off, inplace, 0, seed++);
          cases++;
        }
  /* Allreduce with rank 0 pinned and rank 1 on the device, then 32 MiB (several chunks
     per lane), pinned alone and mixed, in and out of place. */
  static const size_t big[] = {1000, 300001, (size_t)8 << 20};
  for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
    for (int mixed = 0; mixed <= 1; mixed++)
      for (int inplace = 0; inplace <= 1; inplace++) {
        if (!mixed && i < 2) continue; /* done above */
        run_case(comms, streams, C_ALLREDUCE, K_HOSTALLOC, big[i], offs[i % 3], inplace, mixed,
                 seed++);
        cases++;
      }
  refusals(comms, streams);
  host_register();
  /* and a last allreduce on pinned memory after them */
  run_case(comms, streams, C_ALLREDUCE, K_HOSTALLOC, 4097, 4, 0, 0, seed++);
  for (int r = 0; r < NR; r++) {
    ZK(zccCommDestroy(comms[r]));
    CK(cudaStreamDestroy(streams[r]));
  }
  printf("test_gpu_hostmem: %d cases + refusals, %d failure(s)\n", cases + 1, failures);
  return failures ? 1 : 0;
}
