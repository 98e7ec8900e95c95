/*
 * net's GPU face: GPU ranks that reach each other only through the network
 * (on other hosts, or on one host with ZCC_P2P_DISABLE=1 and
 * ZCC_SHM_DISABLE=1). Kernels never address a peer's memory. Each
 * connector (device.h) to such a peer is a FIFO in pinned host memory on
 * each side, mapped into the GPU, and one proxy thread per communicator
 * moves slots between them with the network plug-in (net.h: ib, socket):
 *
 *   send side: the kernel stores a slot into the local FIFO, its byte count
 *     into sizes[slot], and advances ready; the proxy posts the slot's bytes
 *     (isend: ib waits for the receiver's clear-to-send, socket sends at
 *     once) and advances freed once the plug-in says they went;
 *   receive side: the proxy keeps a receive posted in every slot the kernel
 *     has freed (with ib, each one a clear-to-send for the sender) and
 *     advances ready as they land; the kernel reads the slot and advances
 *     freed.
 *
 * So the ring and tree kernels, and send/receive over connectors, run over
 * the network unchanged: flags and sizes travel with the data. Every
 * connector is a plug-in connection of its own (sends and receives match in
 * order on one), named by a hello {comm, from, to, key} that the receiver
 * checks.
 *
 * Where the NIC reaches the GPU's memory (GPUDirect RDMA: a dmabuf handle,
 * else nvidia-peermem; gdr_decide) the slots of a receive FIFO are device
 * memory that the NIC writes and the kernel reads where they land, and
 * those of a send FIFO (ZCC_NET_GDR_READ) device memory the kernel stores
 * into and the NIC reads; the flag page stays pinned host memory, which the
 * proxy polls. A GPU that does not order the NIC's writes before the
 * proxy's ready store has them flushed first (cuFlushGPUDirectRDMAWrites).
 * Elsewhere the slots are pinned host memory too (host staging: the kernels
 * copy the bytes across PCIe, and the NIC moves them from host memory).
 *
 * A plug-in error (the peer's process ended, the network failed) stops the
 * proxy's work on that connector and, after ZCC_NET_GPU_GRACE_MS, the
 * watchdog's check reports it: the abort word stops waiting kernels and the
 * communicator is in error. The grace lets a rank whose peer has finished
 * and closed first take what already landed.
 *
 * Beside the connectors, each pair of ranks that any connector joins has a
 * signature connection each way (key SIG_KEY, messages of sigmsg_t): the
 * proxy sends the collectives' signatures its rank posts on the signature
 * board to a peer on another host, whose proxy puts them in that board's
 * mirror of this rank (sigboard.h), so that a mismatched collective across
 * hosts is zccInvalidUsage naming both calls, as on one host. Once its
 * communicator is in error, the proxy sends each peer a failure notice
 * (code, the rank the failure began on, its message) and sends nothing
 * more: the peers' watchdogs stop their kernels at once with that error,
 * where they would otherwise wait for ZCC_TIMEOUT. As the signatures agree,
 * the proxy raises the board's gate (sigboard.h), which the connector
 * kernels wait for before they take a byte: a collective that differs
 * across hosts never runs on the other call's data.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "net.h"
#include "opsig.h"
#include "param.h"
#include "planner.h"
#include "sigboard.h"
#include "topo.h"
#include "transport.h"
#include "wait.h"

ZCC_PARAM_INT(net_gpu_channels, "NET_GPU_CHANNELS", 4,
              "most channels of a GPU communicator whose ranks reach each other through the "
              "net transport (each channel's connectors are plug-in connections of their own)");
ZCC_PARAM_INT(net_gpu_grace_ms, "NET_GPU_GRACE_MS", 100,
              "ms between a GPU proxy's network error and the communicator's error (a peer "
              "that finished and closed first is not taken for a dead one while this rank "
              "takes what already landed)");
ZCC_PARAM_INT(net_proxy_spin_us, "NET_PROXY_SPIN_US", 20000,
              "us the GPU proxy thread polls after its last movement before it sleeps 50 us "
              "between polls");

ZCC_PARAM_STR(net_gdr_level, "NET_GDR_LEVEL", "PIX",
              "farthest path between a GPU and the NIC over which the NIC reads and writes "
              "the GPU's FIFOs (GPUDirect RDMA): LOC never, PIX (or PXB) through PCIe "
              "switches only, PHB through the CPU's host bridge, SYS any (also a NIC the "
              "topology does not show)");
ZCC_PARAM_INT(net_gdr_read, "NET_GDR_READ", 1,
              "with GPUDirect RDMA, send FIFOs in device memory too (the NIC reads them); "
              "0: only receive FIFOs");
ZCC_PARAM_INT(dmabuf_enable, "DMABUF_ENABLE", 1,
              "register GPU memory with the NIC through dmabuf handles when both allow it "
              "(0: only nvidia-peermem)");

/* A connector's flag page, in front of its FIFO (byte offsets). */
#define FLAG_PAGE 4096
#define OFF_READY 0
#define OFF_FREED 128
#define OFF_SIZES 256 /* up to 64 words */
#define OFF_HELLO 1024
#define MAX_SLOTS 64
#define GHELLO_MAGIC 0x7a63676e68656c31ULL

typedef struct ghello {
  uint64_t magic;
  uint64_t comm_hash;
  int32_t from, to;
  uint32_t key;
  uint32_t pad;
} ghello_t;

/* A signature connection's message: signatures, or the sender's failure. */
#define SIG_KEY 0xffffffffu
#define SIGMSG_MAGIC 0x7a63736du
#define SIGMSG_MAX 64
enum { SIGMSG_SIGS = 1, SIGMSG_FAIL = 2 };
typedef struct sigmsg {
  uint32_t magic;
  uint32_t kind;
  uint32_t n;     /* SIGS: signatures that follow */
  int32_t code;   /* FAIL: the sender's error */
  int32_t origin; /* FAIL: the rank the failure began on */
  uint32_t pad;
  uint64_t upto;  /* SIGS: every signature up to it is in this message or an earlier
                     one, or was skipped (overwritten before it went) */
  union {
    zcc_op_sig_t sig[SIGMSG_MAX];
    char text[ZCC_WIRE_FAIL_TEXT]; /* FAIL: that rank's message */
  } u;
} sigmsg_t;
#define SIGMSG_HDR offsetof(sigmsg_t, u)

typedef struct gconn {
  int peer;
  uint32_t key;
  int is_send;
  int sig;       /* a signature connection: host memory of one sigmsg_t, no GPU side */
  uint64_t sent; /* sig send: the last seq in a message posted (done: its failure notice went) */
  int nslots;
  size_t slot_bytes;
  char *host;    /* flag page (+ FIFO when host staged), pinned */
  char *dev;     /* as the GPU addresses it */
  size_t bytes;
  char *data;    /* the FIFO's slots as the plug-in addresses them: host + FLAG_PAGE,
                    or gpu_fifo */
  char *gpu_fifo; /* GPUDirect RDMA: the slots in device memory, else NULL */
  size_t gpu_bytes; /* its size (a multiple of 2 MiB) */
  void *comm;    /* the plug-in's send or recv comm */
  void *mh;      /* the slots (with the flag page when host staged) registered on comm */
  void *fmh;     /* the flag page registered apart (GPUDirect RDMA), or NULL */
  ZCC_NET_HANDLE_ALIGN uint8_t handle[ZCC_NET_HANDLE_BYTES]; /* send: connect's copy */
  int hello;     /* send: 0 not posted, 1 posted, 2 went */
  void *hello_req;
  uint32_t posted, done; /* messages posted, and finished, since the start */
  void *req[MAX_SLOTS];
  int dead;      /* a plug-in error: nothing moves on it any more */
} gconn_t;

/* An accepted connection before its hello. */
typedef struct pending {
  void *comm, *mh, *req;
  ghello_t *hello;
} pending_t;

struct zcc_net_gpu {
  gconn_t **conns;
  int nconns, cap;
  pending_t *pend;
  int npend, cappend;
  char *win; /* the window, when this face places it */
  pthread_t proxy;
  int proxy_started;
  atomic_int stop;
  atomic_int failed;
  int fail_peer;
  int fail_code;   /* what the watchdog's check returns */
  int64_t fail_ns; /* a peer's failure notice: far enough back to need no grace */
  char fail_msg[1024];
  int released;
  int sig_added; /* the signature connections are made (sig_conns_add) */
  /* GPUDirect RDMA (gdr_decide, at the first connector) */
  int gdr_decided;
  int gdr;       /* ZCC_NET_PTR_DMABUF or ZCC_NET_PTR_CUDA; 0: host staging */
  int gdr_send;  /* send FIFOs in device memory too */
  void *gdr_ctx; /* flush landed writes in this context before ready; NULL: no need */
  char gdr_text[256];
};

typedef struct zcc_net_gpu net_gpu_t;

static uint32_t *word(const gconn_t *c, size_t off) { return (uint32_t *)(c->host + off); }

static zccResult_t state(struct zccComm *comm, zcc_net_comm_t **ncp, net_gpu_t **out) {
  zcc_net_comm_t *nc = zcc_net_comm_of(comm);
  if (!nc) return zcc_error(zccInternalError, "net: GPU face without a plug-in");
  if (!nc->gpu) {
    nc->gpu = calloc(1, sizeof(*nc->gpu));
    if (!nc->gpu) return zcc_error(zccSystemError, "net: out of memory");
    nc->gpu->fail_peer = -1;
  }
  *ncp = nc;
  *out = nc->gpu;
  return zccSuccess;
}

/* A communicator whose every pair is net: its window, local device memory. */
static zccResult_t net_win_alloc(struct zccComm *comm, size_t bytes, char **dev) {
  zcc_net_comm_t *nc = NULL;
  net_gpu_t *st = NULL;
  ZCC_CHECK(state(comm, &nc, &st));
  if (st->win) return zcc_error(zccInternalError, "net: the GPU window exists already");
  void *p = NULL;
  ZCC_CHECK(zcc_cuda_mem_alloc(&p, bytes));
  st->win = p;
  *dev = p;
  return zccSuccess;
}

static void net_win_free(struct zccComm *comm) {
  zcc_net_comm_t *nc = zcc_net_comm_of(comm);
  if (!nc || !nc->gpu || !nc->gpu->win) return;
  zcc_cuda_mem_free(nc->gpu->win);
  nc->gpu->win = NULL;
}

/* ---- GPUDirect RDMA ---- */

/* ZCC_NET_GDR_LEVEL: 0 LOC, 1 PIX (PXB), 2 PHB, 3 SYS; -1 not a level. */
static int gdr_level_parse(const char *v) {
  static const char *const names[] = {"LOC", "PIX", "PHB", "SYS"};
  if (!v || !*v) return 1;
  if (strcasecmp(v, "PXB") == 0) return 1;
  /* NCCL_NET_GDR_LEVEL's numbers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS */
  if (v[0] >= '0' && v[0] <= '4' && !v[1]) return (int[]){0, 1, 1, 2, 3}[v[0] - '0'];
  for (int i = 0; i < 4; i++)
    if (strcasecmp(v, names[i]) == 0) return i;
  return -1;
}

/* The level a path class needs (-1, unknown: SYS). */
static int gdr_level_of(int cls) {
  if (cls < 0 || cls >= ZCC_PATH_NET) return 3;
  if (cls <= ZCC_PATH_PIX) return 1;
  return cls == ZCC_PATH_PHB ? 2 : 3;
}

/* The path class between this rank's GPU and the plug-in's NIC on the
   graph (the plan's, else this host's), or -1 when the graph shows either
   not. */
static int gdr_nic_class(const struct zccComm *comm, const zcc_net_props_t *props) {
  const zcc_topo_t *g = NULL;
  int gpu = -1;
  if (comm->planner && comm->planner->rank_node) {
    g = comm->planner->g;
    gpu = comm->planner->rank_node[comm->rank];
  } else if (comm->topo) {
    g = comm->topo;
    for (int i = 0; i < g->nnodes && gpu < 0; i++)
      if (g->nodes[i].kind == ZCC_TOPO_GPU &&
          strcasecmp(g->nodes[i].bus, comm->peers[comm->rank].gpu_bus_id) == 0)
        gpu = i;
  }
  if (!g || gpu < 0 || g->nodes[gpu].kind != ZCC_TOPO_GPU) return -1;
  char name[ZCC_NET_NAME_BYTES];
  snprintf(name, sizeof(name), "%s", props->name);
  char *colon = strchr(name, ':');
  if (colon) *colon = '\0';
  for (int i = 0; i < g->nnodes; i++) {
    const zcc_topo_node_t *n = &g->nodes[i];
    if (n->kind != ZCC_TOPO_NIC || n->host != g->nodes[gpu].host || strcmp(n->model, name) != 0 ||
        (props->port > 0 && n->dev != props->port))
      continue;
    const zcc_topo_path_t *pt = zcc_topo_path(g, gpu, i);
    return pt && pt->bw > 0 ? pt->cls : -1;
  }
  return -1;
}

/*
 * Does the NIC read and write this rank's FIFOs in device memory? Through a
 * dmabuf handle where the plug-in, the GPU and ZCC_DMABUF_ENABLE allow it,
 * else through nvidia-peermem; only as far from the GPU as
 * ZCC_NET_GDR_LEVEL; and only where the GPU consumes the NIC's writes in
 * order or can have them flushed. Said once per communicator at INFO.
 */
static zccResult_t gdr_decide(struct zccComm *comm, zcc_net_comm_t *nc, net_gpu_t *st) {
  st->gdr_decided = 1;
  const char *lv = zcc_param_net_gdr_level();
  int level = gdr_level_parse(lv);
  if (!lv || !*lv) lv = "PIX";
  if (level < 0)
    return zcc_error(zccInvalidArgument, "ZCC_NET_GDR_LEVEL=%s: expected LOC, PIX, PXB, PHB "
                     "or SYS (or 0 to 4)", lv);
  zcc_net_props_t props;
  ZCC_CHECK(nc->net->get_properties(nc->dev, &props));
  zcc_cuda_gdr_t g;
  zcc_cuda_gdr_info(comm->device, &g);
  char why[200] = "";
  int mode = 0, cls = gdr_nic_class(comm, &props);
  int dmabuf = (props.ptr_support & ZCC_NET_PTR_DMABUF) && nc->net->reg_mr_dmabuf;
  int peermem = (props.ptr_support & ZCC_NET_PTR_CUDA) != 0;
  if (level == 0) {
    snprintf(why, sizeof(why), "ZCC_NET_GDR_LEVEL=%s", lv);
  } else if (!dmabuf && !peermem) {
    snprintf(why, sizeof(why), "plug-in %s reaches host memory only on %s", nc->net->name,
             props.name);
  } else if (gdr_level_of(cls) > level) {
    if (cls < 0)
      snprintf(why, sizeof(why), "NIC %s is not on the topology graph, beyond "
               "ZCC_NET_GDR_LEVEL=%s", props.name, lv);
    else
      snprintf(why, sizeof(why), "the path from the GPU to NIC %s is %s, beyond "
               "ZCC_NET_GDR_LEVEL=%s", props.name, zcc_topo_class_name(cls), lv);
  } else if (dmabuf && g.dmabuf && zcc_param_dmabuf_enable()) {
    mode = ZCC_NET_PTR_DMABUF;
  } else if (peermem && g.gdr) {
    mode = ZCC_NET_PTR_CUDA;
  } else {
    snprintf(why, sizeof(why), "%s%s", !g.gdr && !g.dmabuf ? "the GPU supports neither "
             "dmabuf nor GPUDirect RDMA" : "",
             g.dmabuf && !zcc_param_dmabuf_enable() && !(peermem && g.gdr)
                 ? "ZCC_DMABUF_ENABLE=0 and no nvidia-peermem" : "");
    if (!why[0]) snprintf(why, sizeof(why), "the NIC's and the GPU's ways differ (plug-in: "
                          "%s%s; GPU: %s%s)", dmabuf ? "dmabuf " : "", peermem ? "peermem" : "",
                          g.dmabuf ? "dmabuf " : "", g.gdr ? "peermem" : "");
  }
  if (mode && g.ordering < 100) {
    /* CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER: below it, landed writes are
       flushed before the kernel is told */
    void *ctx = (g.flush_options & 1) ? zcc_cuda_ctx_current() : NULL;
    if (ctx) {
      st->gdr_ctx = ctx;
    } else {
      mode = 0;
      snprintf(why, sizeof(why), "the GPU neither orders the NIC's writes nor can flush them");
    }
  }
  st->gdr = mode;
  st->gdr_send = mode && zcc_param_net_gdr_read() != 0;
  if (mode)
    snprintf(st->gdr_text, sizeof(st->gdr_text), "GPUDirect RDMA through %s (NIC %s, %s%s; "
             "receive%s FIFOs in device memory%s)",
             mode == ZCC_NET_PTR_DMABUF ? "dmabuf" : "nvidia-peermem", props.name,
             cls < 0 ? "not on the topology graph" : zcc_topo_class_name(cls),
             cls < 0 ? "" : " from the GPU",
             st->gdr_send ? " and send" : "",
             st->gdr_ctx ? ", flushed before the kernel reads" : "");
  else
    snprintf(st->gdr_text, sizeof(st->gdr_text), "FIFOs in pinned host memory (host staging: "
             "%s)", why);
  ZCC_INFO(NET, "comm %s rank %d: %s [GPU %d: dmabuf %d, GPUDirect RDMA %d, writes ordering %d, "
           "flush options %d; plug-in pointer support %d]", comm->name, comm->rank, st->gdr_text,
           comm->device, g.dmabuf, g.gdr, g.ordering, g.flush_options, props.ptr_support);
  return zccSuccess;
}

/* A new connection of this rank's (no plug-in side yet): a connector's
   flag page and FIFO pinned and mapped into the GPU, or a signature
   connection's message in plain host memory. */
static zccResult_t conn_add(struct zccComm *comm, net_gpu_t *st, int peer, uint32_t key,
                            int is_send, int sig, size_t bytes, gconn_t **out) {
  if (st->nconns == st->cap) {
    int cap = st->cap ? 2 * st->cap : 16;
    gconn_t **a = realloc(st->conns, sizeof(*a) * (size_t)cap);
    if (!a) return zcc_error(zccSystemError, "net: out of memory");
    st->conns = a;
    st->cap = cap;
  }
  gconn_t *c = calloc(1, sizeof(*c));
  if (!c) return zcc_error(zccSystemError, "net: out of memory");
  c->peer = peer;
  c->key = key;
  c->is_send = is_send;
  c->sig = sig;
  c->bytes = bytes;
  c->host = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  if (!c->host) {
    free(c);
    return zcc_error(zccSystemError, "net: out of memory for a %zu-byte GPU connector", bytes);
  }
  memset(c->host, 0, sig ? bytes : FLAG_PAGE);
  if (!sig) {
    void *dev = NULL;
    zccResult_t res = zcc_cuda_host_register(c->host, c->bytes, &dev);
    if (res != zccSuccess) {
      char why[400];
      snprintf(why, sizeof(why), "%s", zcc_last_error());
      free(c->host);
      free(c);
      return zcc_error(res, "comm %s rank %d: cannot pin a %zu-byte GPU connector to rank %d: "
                       "%s", comm->name, comm->rank, bytes, peer, why);
    }
    c->dev = dev;
    c->data = c->host + FLAG_PAGE;
  }
  memcpy(c->handle, comm->peers[peer].net_handle, ZCC_NET_HANDLE_BYTES);
  st->conns[st->nconns++] = c;
  *out = c;
  return zccSuccess;
}

static zccResult_t net_conn_bind(zcc_conn_t *conn, uint32_t key, int is_send, int nslots,
                                 size_t slot_bytes, zcc_dev_conn_t *out) {
  struct zccComm *comm = conn->comm;
  zcc_net_comm_t *nc = NULL;
  net_gpu_t *st = NULL;
  ZCC_CHECK(state(comm, &nc, &st));
  if (nslots < 2 || nslots > MAX_SLOTS || slot_bytes == 0 || slot_bytes > (1u << 30))
    return zcc_error(zccInvalidArgument, "net: %d GPU connector slots of %zu bytes (2 to %d "
                     "slots, at most 1 GiB each)", nslots, slot_bytes, MAX_SLOTS);
  if (!st->gdr_decided) ZCC_CHECK(gdr_decide(comm, nc, st));
  int on_gpu = st->gdr && (!is_send || st->gdr_send);
  size_t fifo = (size_t)nslots * slot_bytes;
  gconn_t *c = NULL;
  ZCC_CHECK(conn_add(comm, st, conn->peer, key, is_send, 0, FLAG_PAGE + (on_gpu ? 0 : fifo),
                     &c));
  c->nslots = nslots;
  c->slot_bytes = slot_bytes;
  if (on_gpu) {
    /* whole 2 MiB pages: cuMemAlloc aligns them so, as a dmabuf handle needs */
    size_t bytes = (fifo + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    void *p = NULL;
    ZCC_CHECK(zcc_cuda_mem_alloc(&p, bytes));
    c->gpu_fifo = p;
    c->gpu_bytes = bytes;
    if ((uintptr_t)p & 4095)
      return zcc_error(zccInternalError, "net: device memory for a GPU connector at %p is not "
                       "page-aligned", p);
    c->data = p;
  }
  out->fifo = on_gpu ? c->gpu_fifo : c->dev + FLAG_PAGE;
  out->ready = (uint32_t *)(c->dev + OFF_READY);
  out->freed = (uint32_t *)(c->dev + OFF_FREED);
  out->sizes = is_send ? (uint32_t *)(c->dev + OFF_SIZES) : NULL;
  conn->priv = st;
  return zccSuccess;
}

/* A signature connection each way with every peer a connector joins this
   rank to (a connector's far end has one toward this rank: both sides make
   the same pairs). */
static zccResult_t sig_conns_add(struct zccComm *comm, net_gpu_t *st) {
  char *seen = calloc((size_t)comm->nranks, 1);
  if (!seen) return zcc_error(zccSystemError, "net: out of memory");
  zccResult_t res = zccSuccess;
  int n = st->nconns;
  for (int i = 0; i < n && res == zccSuccess; i++) {
    int p = st->conns[i]->peer;
    if (seen[p]) continue;
    seen[p] = 1;
    gconn_t *c = NULL;
    res = conn_add(comm, st, p, SIG_KEY, 1, 1, sizeof(sigmsg_t), &c);
    if (res == zccSuccess) res = conn_add(comm, st, p, SIG_KEY, 0, 1, sizeof(sigmsg_t), &c);
  }
  free(seen);
  return res;
}

/* A connector's memory registered on its plug-in connection: the flag page
   with the slots, or (GPUDirect RDMA) the slots in device memory and, on a
   send side, the flag page apart for the hello. */
static zccResult_t conn_register(struct zccComm *comm, zcc_net_comm_t *nc, net_gpu_t *st,
                                 gconn_t *c) {
  if (!c->gpu_fifo) return nc->net->reg_mr(c->comm, c->host, c->bytes, ZCC_NET_PTR_HOST, &c->mh);
  if (c->is_send) ZCC_CHECK(nc->net->reg_mr(c->comm, c->host, FLAG_PAGE, ZCC_NET_PTR_HOST, &c->fmh));
  zccResult_t res;
  if (st->gdr == ZCC_NET_PTR_CUDA) {
    res = nc->net->reg_mr(c->comm, c->gpu_fifo, c->gpu_bytes, ZCC_NET_PTR_CUDA, &c->mh);
  } else {
    int fd = -1;
    res = zcc_cuda_dmabuf_fd(c->gpu_fifo, c->gpu_bytes, &fd);
    if (res == zccSuccess) {
      res = nc->net->reg_mr_dmabuf(c->comm, c->gpu_fifo, c->gpu_bytes, ZCC_NET_PTR_DMABUF, 0, fd,
                                   &c->mh);
      close(fd);
    }
  }
  if (res != zccSuccess) {
    char why[400];
    snprintf(why, sizeof(why), "%s", zcc_last_error());
    return zcc_error(res, "comm %s rank %d: the %s FIFO %s rank %d in device memory cannot be "
                     "registered with the NIC (%s): %s; ZCC_NET_GDR_LEVEL=LOC stages through "
                     "host memory instead", comm->name, comm->rank,
                     c->is_send ? "send" : "receive", c->is_send ? "to" : "from", c->peer,
                     st->gdr == ZCC_NET_PTR_CUDA ? "nvidia-peermem" : "dmabuf", why);
  }
  return zccSuccess;
}

/* The connector a hello names (a receive side not yet connected), or NULL. */
static gconn_t *claimable(net_gpu_t *st, const struct zccComm *comm, const ghello_t *h) {
  if (h->magic != GHELLO_MAGIC || h->comm_hash != comm->hash || h->to != comm->rank) return NULL;
  for (int i = 0; i < st->nconns; i++) {
    gconn_t *c = st->conns[i];
    if (!c->is_send && !c->comm && c->peer == h->from && c->key == h->key) return c;
  }
  return NULL;
}

static void pending_drop(zcc_net_comm_t *nc, pending_t *p) {
  if (p->mh) nc->net->dereg_mr(p->comm, p->mh);
  if (p->comm) nc->net->close_recv(p->comm);
  free(p->hello);
  memset(p, 0, sizeof(*p));
}

/* One pass over the accepted connections: post their hello receives, claim. */
static zccResult_t accept_pass(struct zccComm *comm, zcc_net_comm_t *nc, net_gpu_t *st,
                               int *moved) {
  for (;;) {
    void *rc = NULL;
    ZCC_CHECK(nc->net->accept(nc->listen_comm, &rc));
    if (!rc) break;
    if (st->npend == st->cappend) {
      int cap = st->cappend ? 2 * st->cappend : 16;
      pending_t *a = realloc(st->pend, sizeof(*a) * (size_t)cap);
      if (!a) {
        nc->net->close_recv(rc);
        return zcc_error(zccSystemError, "net: out of memory");
      }
      st->pend = a;
      st->cappend = cap;
    }
    pending_t *p = &st->pend[st->npend++];
    memset(p, 0, sizeof(*p));
    p->comm = rc;
    p->hello = aligned_alloc(64, 64);
    if (!p->hello) return zcc_error(zccSystemError, "net: out of memory");
    memset(p->hello, 0, 64);
    ZCC_CHECK(nc->net->reg_mr(rc, p->hello, 64, ZCC_NET_PTR_HOST, &p->mh));
    *moved = 1;
  }
  for (int i = st->npend - 1; i >= 0; i--) {
    pending_t *p = &st->pend[i];
    zccResult_t res = zccSuccess;
    int done = 0;
    size_t got = 0;
    if (!p->req) res = nc->net->irecv(p->comm, p->hello, 64, p->mh, &p->req);
    if (res == zccSuccess && p->req) res = nc->net->test(p->req, &done, &got);
    if (res == zccSuccess && !done) continue;
    gconn_t *c = res == zccSuccess && got == sizeof(ghello_t) ? claimable(st, comm, p->hello) : NULL;
    if (!c) {
      /* a stranger, or a connection that failed before its hello */
      ZCC_INFO(NET, "comm %s rank %d: dropped a GPU connection whose hello names no connector "
               "of this communicator", comm->name, comm->rank);
      pending_drop(nc, p);
      zcc_clear_last_error();
    } else {
      nc->net->dereg_mr(p->comm, p->mh);
      free(p->hello);
      c->comm = p->comm;
      memset(p, 0, sizeof(*p));
      ZCC_CHECK(c->sig ? nc->net->reg_mr(c->comm, c->host, c->bytes, ZCC_NET_PTR_HOST, &c->mh)
                       : conn_register(comm, nc, st, c));
    }
    st->pend[i] = st->pend[--st->npend];
    *moved = 1;
  }
  return zccSuccess;
}

/* One pass over the send sides: connect, register, say hello. */
static zccResult_t connect_pass(struct zccComm *comm, zcc_net_comm_t *nc, net_gpu_t *st,
                                int *moved, int *waiting) {
  for (int i = 0; i < st->nconns; i++) {
    gconn_t *c = st->conns[i];
    if (!c->is_send) {
      if (!c->comm) *waiting = 1;
      continue;
    }
    if (!c->comm) {
      ZCC_CHECK(nc->net->connect(nc->dev, &nc->auth, c->handle, &c->comm));
      if (!c->comm) {
        *waiting = 1;
        continue;
      }
      ZCC_CHECK(c->sig ? nc->net->reg_mr(c->comm, c->host, c->bytes, ZCC_NET_PTR_HOST, &c->mh)
                       : conn_register(comm, nc, st, c));
      ghello_t h = {GHELLO_MAGIC, comm->hash, comm->rank, c->peer, c->key, 0};
      memcpy(c->host + OFF_HELLO, &h, sizeof(h));
      *moved = 1;
    }
    if (c->hello == 0) {
      ZCC_CHECK(nc->net->isend(c->comm, c->host + OFF_HELLO, sizeof(ghello_t),
                               c->fmh ? c->fmh : c->mh, &c->hello_req));
      if (c->hello_req) c->hello = 1, *moved = 1;
    }
    if (c->hello == 1) {
      int done = 0;
      ZCC_CHECK(nc->net->test(c->hello_req, &done, NULL));
      if (done) c->hello = 2, *moved = 1;
    }
    if (c->hello != 2) *waiting = 1;
  }
  return zccSuccess;
}

/* ---- the proxy ---- */

/* The proxy's first failure, its message in fail_msg: what the watchdog's
   check reports for `peer` from at_ns on (plus the grace, net_gpu_check). */
static void failure_publish(net_gpu_t *st, int peer, int code, int64_t at_ns) {
  st->fail_code = code;
  st->fail_peer = peer;
  st->fail_ns = at_ns;
  atomic_store_explicit(&st->failed, 1, memory_order_release);
  ZCC_INFO(NET, "%s", st->fail_msg);
}

static void record_failure(struct zccComm *comm, net_gpu_t *st, const gconn_t *c) {
  if (atomic_load(&st->failed)) return;
  char what[32] = "signatures";
  if (!c->sig) snprintf(what, sizeof(what), "GPU connector %u", c->key);
  snprintf(st->fail_msg, sizeof(st->fail_msg),
           "comm %s rank %d: the network connection %s rank %d (%s) failed: %s", comm->name,
           comm->rank, c->is_send ? "to" : "from", c->peer, what, zcc_last_error());
  failure_publish(st, c->peer, zccRemoteError, zcc_now_ns());
}

/* Post the slots the kernel has published; free those that went. */
static zccResult_t drive_send(zcc_net_comm_t *nc, gconn_t *c, int *moved) {
  uint32_t ready = __atomic_load_n(word(c, OFF_READY), __ATOMIC_ACQUIRE);
  const uint32_t n = (uint32_t)c->nslots;
  while (c->posted != ready && c->posted - c->done < n) {
    uint32_t slot = c->posted % n;
    uint32_t size = __atomic_load_n(word(c, OFF_SIZES) + slot, __ATOMIC_RELAXED);
    if (size > c->slot_bytes)
      return zcc_error(zccInternalError, "net: a GPU connector slot says %u bytes, more than "
                       "its %zu", size, c->slot_bytes);
    void *req = NULL;
    ZCC_CHECK(nc->net->isend(c->comm, c->data + (size_t)slot * c->slot_bytes, size, c->mh,
                             &req));
    if (!req) break;
    c->req[slot] = req;
    c->posted++;
    *moved = 1;
  }
  while (c->done != c->posted) {
    int done = 0;
    ZCC_CHECK(nc->net->test(c->req[c->done % n], &done, NULL));
    if (!done) break;
    c->req[c->done % n] = NULL;
    c->done++;
    __atomic_store_n(word(c, OFF_FREED), c->done, __ATOMIC_RELEASE);
    *moved = 1;
  }
  return zccSuccess;
}

/* Keep a receive posted in every slot the kernel freed; publish what landed
   (flushed first where the GPU needs it: gdr_decide). */
static zccResult_t drive_recv(zcc_net_comm_t *nc, net_gpu_t *st, gconn_t *c, int *moved) {
  uint32_t freed = __atomic_load_n(word(c, OFF_FREED), __ATOMIC_ACQUIRE);
  const uint32_t n = (uint32_t)c->nslots;
  while (c->posted - freed < n) {
    uint32_t slot = c->posted % n;
    void *req = NULL;
    ZCC_CHECK(nc->net->irecv(c->comm, c->data + (size_t)slot * c->slot_bytes, c->slot_bytes,
                             c->mh, &req));
    if (!req) break;
    c->req[slot] = req;
    c->posted++;
    *moved = 1;
  }
  uint32_t landed = c->done;
  while (c->done != c->posted) {
    int done = 0;
    size_t got = 0;
    ZCC_CHECK(nc->net->test(c->req[c->done % n], &done, &got));
    if (!done) break;
    c->req[c->done % n] = NULL;
    c->done++;
  }
  if (c->done != landed) {
    if (c->gpu_fifo && st->gdr_ctx) ZCC_CHECK(zcc_cuda_flush_gdr_writes(st->gdr_ctx));
    __atomic_store_n(word(c, OFF_READY), c->done, __ATOMIC_RELEASE);
    *moved = 1;
  }
  return zccSuccess;
}

/*
 * A signature connection's send side: once the last message went, the next
 * one: this rank's failure notice when its communicator is in error (then
 * nothing more), else the signatures posted since (to a peer on another
 * host: one on this host reads the board itself).
 */
static zccResult_t drive_sig_send(struct zccComm *comm, zcc_net_comm_t *nc, gconn_t *c,
                                  int *moved) {
  if (c->req[0]) {
    int done = 0;
    ZCC_CHECK(nc->net->test(c->req[0], &done, NULL));
    if (!done) return zccSuccess;
    c->req[0] = NULL;
    *moved = 1;
  }
  if (c->done) return zccSuccess; /* the failure notice went */
  sigmsg_t *m = (sigmsg_t *)c->host;
  size_t bytes = 0;
  uint64_t upto = c->sent;
  if (atomic_load_explicit(&comm->async_error, memory_order_acquire) != zccSuccess) {
    m->kind = SIGMSG_FAIL;
    m->code = atomic_load(&comm->async_error);
    m->origin = comm->fail_origin;
    snprintf(m->u.text, sizeof(m->u.text), "%s", comm->fail_text);
    bytes = SIGMSG_HDR + strlen(m->u.text) + 1;
  } else {
    const zcc_sigboard_t *b = __atomic_load_n(&comm->sigboard, __ATOMIC_ACQUIRE);
    uint64_t posted = zcc_sigboard_posted(b);
    if (posted <= c->sent || comm->peers[c->peer].host_hash == comm->peers[comm->rank].host_hash)
      return zccSuccess;
    uint32_t k = 0;
    for (uint64_t seq = c->sent + 1; seq <= posted && k < SIGMSG_MAX; seq++) {
      int got = zcc_sigboard_own(b, seq, &m->u.sig[k]);
      if (got == 0) break; /* being written */
      upto = seq;
      if (got == 1) k++; /* -1: overwritten, a table behind; nothing to compare */
    }
    if (upto == c->sent) return zccSuccess;
    m->kind = SIGMSG_SIGS;
    m->n = k;
    m->upto = upto;
    bytes = SIGMSG_HDR + (size_t)k * sizeof(zcc_op_sig_t);
  }
  m->magic = SIGMSG_MAGIC;
  ZCC_CHECK(nc->net->isend(c->comm, m, bytes, c->mh, &c->req[0]));
  if (!c->req[0]) return zccSuccess; /* not yet (ib: the receiver's clear-to-send) */
  if (m->kind == SIGMSG_FAIL) c->done = 1;
  else c->sent = upto;
  *moved = 1;
  return zccSuccess;
}

/* Its receive side: signatures into the board's mirror of the peer; a failure
   notice becomes this proxy's failure, reported without the grace. */
static zccResult_t drive_sig_recv(struct zccComm *comm, zcc_net_comm_t *nc, net_gpu_t *st,
                                  gconn_t *c, int *moved) {
  sigmsg_t *m = (sigmsg_t *)c->host;
  if (!c->req[0]) {
    ZCC_CHECK(nc->net->irecv(c->comm, m, sizeof(*m), c->mh, &c->req[0]));
    if (!c->req[0]) return zccSuccess;
    *moved = 1;
  }
  int done = 0;
  size_t got = 0;
  ZCC_CHECK(nc->net->test(c->req[0], &done, &got));
  if (!done) return zccSuccess;
  c->req[0] = NULL;
  *moved = 1;
  if (got < SIGMSG_HDR || m->magic != SIGMSG_MAGIC ||
      (m->kind == SIGMSG_SIGS && (m->n > SIGMSG_MAX ||
                                  got != SIGMSG_HDR + (size_t)m->n * sizeof(zcc_op_sig_t))) ||
      (m->kind != SIGMSG_SIGS && m->kind != SIGMSG_FAIL))
    return zcc_error(zccInternalError, "net: rank %d sent a %zu-byte signature message that "
                     "is not one (magic 0x%08x, kind %u)", c->peer, got, m->magic, m->kind);
  if (m->kind == SIGMSG_SIGS) {
    zcc_sigboard_t *b = __atomic_load_n(&comm->sigboard, __ATOMIC_ACQUIRE);
    for (uint32_t k = 0; k < m->n; k++) zcc_sigboard_put(b, c->peer, &m->u.sig[k]);
    zcc_sigboard_put_upto(b, c->peer, m->upto);
    return zccSuccess;
  }
  m->u.text[sizeof(m->u.text) - 1] = '\0';
  if (atomic_load(&st->failed)) return zccSuccess;
  zccResult_t res = zcc_peer_failed_error(comm, c->peer, comm->peers[c->peer].pid, m->code,
                                          m->origin, m->u.text);
  snprintf(st->fail_msg, sizeof(st->fail_msg), "%s", zcc_last_error());
  /* the peer says it failed: no grace */
  failure_publish(st, c->peer, res, zcc_now_ns() - zcc_param_net_gpu_grace_ms() * 1000000);
  return zccSuccess;
}

static void *proxy_main(void *arg) {
  struct zccComm *comm = arg;
  zcc_net_comm_t *nc = zcc_net_comm_of(comm);
  net_gpu_t *st = nc->gpu;
  int64_t spin_ns = zcc_param_net_proxy_spin_us() * 1000, last = zcc_now_ns();
  while (!atomic_load(&st->stop)) {
    int moved = 0;
    for (int i = 0; i < st->nconns; i++) {
      gconn_t *c = st->conns[i];
      if (c->dead) continue;
      zccResult_t res = c->sig ? (c->is_send ? drive_sig_send(comm, nc, c, &moved)
                                             : drive_sig_recv(comm, nc, st, c, &moved))
                      : c->is_send ? drive_send(nc, c, &moved) : drive_recv(nc, st, c, &moved);
      if (res != zccSuccess) {
        c->dead = 1;
        record_failure(comm, st, c);
      }
    }
    /* the kernels' gate: collectives that now agree with the peers' */
    if (zcc_sigboard_gate_advance(__atomic_load_n(&comm->sigboard, __ATOMIC_ACQUIRE)))
      moved = 1;
    int64_t now = zcc_now_ns();
    if (moved) {
      last = now;
    } else if (now - last > spin_ns) {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static zccResult_t net_conn_start(struct zccComm *comm) {
  zcc_net_comm_t *nc = NULL;
  net_gpu_t *st = NULL;
  ZCC_CHECK(state(comm, &nc, &st));
  if (st->proxy_started) return zccSuccess;
  if (!st->sig_added) {
    ZCC_CHECK(sig_conns_add(comm, st));
    st->sig_added = 1;
  }
  zcc_wait_t w = zcc_wait_in(zcc_transport_connect_timeout_ms(), &comm->abort_flag,
                             "net GPU connect");
  int64_t t0 = zcc_now_ns();
  for (;;) {
    int waiting = 0, moved = 0;
    ZCC_CHECK(connect_pass(comm, nc, st, &moved, &waiting));
    if (nc->listen_comm) ZCC_CHECK(accept_pass(comm, nc, st, &moved));
    if (!waiting) break;
    ZCC_CHECK(zcc_wait_check(&w));
    /* a peer that left fails this at once (each waited-for peer once a pass) */
    uint32_t asked = 0;
    for (int i = 0; i < st->nconns; i++) {
      const gconn_t *c = st->conns[i];
      if ((c->comm && (!c->is_send || c->hello == 2)) || (asked >> c->peer & 1u)) continue;
      asked |= 1u << c->peer;
      ZCC_CHECK(zcc_bootstrap_peer_check(comm->bootstrap, c->peer));
    }
    ZCC_CHECK(zcc_bootstrap_any_gone(comm->bootstrap)); /* a neighbour's failure dooms init */
    if (!moved) {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  /* every connector of this rank is up, so every peer's toward it is too:
     nobody connects here again */
  zcc_net_comm_close_listen(nc);
  for (int i = 0; i < st->npend; i++) pending_drop(nc, &st->pend[i]);
  st->npend = 0;
  if (pthread_create(&st->proxy, NULL, proxy_main, comm) != 0)
    return zcc_error(zccSystemError, "comm %s rank %d: cannot start the GPU network proxy "
                     "thread", comm->name, comm->rank);
  st->proxy_started = 1;
  int nsig = 0;
  for (int i = 0; i < st->nconns; i++) nsig += st->conns[i]->sig;
  ZCC_INFO(NET, "comm %s rank %d: %d GPU connector(s) and %d signature connection(s) over "
           "plug-in %s up in %.1f ms; proxy started; %s", comm->name, comm->rank,
           st->nconns - nsig, nsig, nc->net->name, (double)(zcc_now_ns() - t0) / 1e6,
           st->gdr_text);
  return zccSuccess;
}

static zccResult_t net_gpu_check(zcc_conn_t *conn) {
  zcc_net_comm_t *nc = zcc_net_comm_of(conn->comm);
  net_gpu_t *st = nc ? nc->gpu : NULL;
  if (!st || !atomic_load_explicit(&st->failed, memory_order_acquire) ||
      st->fail_peer != conn->peer)
    return zccSuccess;
  if ((zcc_now_ns() - st->fail_ns) / 1000000 < zcc_param_net_gpu_grace_ms()) return zccSuccess;
  return zcc_error((zccResult_t)st->fail_code, "%s", st->fail_msg);
}

/* Stop the proxy and release every connector (the device idle). */
static void teardown(zcc_net_comm_t *nc, net_gpu_t *st) {
  if (st->released) return;
  st->released = 1;
  /* the error that ended an init, if any, outlives the plug-in's complaints here */
  char keep[1024];
  snprintf(keep, sizeof(keep), "%s", zcc_last_error());
  if (st->proxy_started) {
    atomic_store(&st->stop, 1);
    pthread_join(st->proxy, NULL);
    st->proxy_started = 0;
  }
  for (int i = 0; i < st->nconns; i++) {
    gconn_t *c = st->conns[i];
    if (c->comm) {
      if (c->mh) nc->net->dereg_mr(c->comm, c->mh);
      if (c->fmh) nc->net->dereg_mr(c->comm, c->fmh);
      if (c->is_send) nc->net->close_send(c->comm);
      else nc->net->close_recv(c->comm);
    }
    if (!c->sig) zcc_cuda_host_unregister(c->host);
    if (c->gpu_fifo) zcc_cuda_mem_free(c->gpu_fifo);
    free(c->host);
    free(c);
  }
  free(st->conns);
  st->conns = NULL;
  st->nconns = st->cap = 0;
  for (int i = 0; i < st->npend; i++) pending_drop(nc, &st->pend[i]);
  free(st->pend);
  st->pend = NULL;
  st->npend = st->cappend = 0;
  zcc_restore_last_error(keep);
}

static void net_gpu_free(zcc_conn_t *conn) {
  if (!conn->priv) return;
  zcc_net_comm_t *nc = zcc_net_comm_of(conn->comm);
  if (nc && nc->gpu) teardown(nc, nc->gpu);
  conn->priv = NULL;
}

void zcc_net_gpu_release(struct zccComm *comm, zcc_net_comm_t *nc) {
  if (!nc->gpu) return;
  teardown(nc, nc->gpu);
  net_win_free(comm);
  free(nc->gpu);
  nc->gpu = NULL;
}

static int net_max_channels(void) {
  int64_t c = zcc_param_net_gpu_channels();
  return c < 1 ? 1 : c > ZCC_DEV_MAX_CHANNELS ? ZCC_DEV_MAX_CHANNELS : (int)c;
}

static void net_unused(struct zccComm *comm) { zcc_net_comm_close_listen(zcc_net_comm_of(comm)); }

const zcc_transport_gpu_t zcc_net_gpu_face = {
    .conn_only = 1,
    .win_alloc = net_win_alloc,
    .win_free = net_win_free,
    .check = net_gpu_check,
    .free = net_gpu_free,
    .conn_bind = net_conn_bind,
    .conn_start = net_conn_start,
    .max_channels = net_max_channels,
    .unused = net_unused,
};
