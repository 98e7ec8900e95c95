/*
 * The `ib` network plug-in (net.h): libibverbs loaded at run time
 * (ZCC_IBV_LIBRARY, default libibverbs.so.1), RC queue pairs, RDMA write
 * with immediate gated by a clear-to-send FIFO that the receiver writes into
 * the sender's memory, and an MR cache. Queue pairs are exchanged over an
 * authenticated TCP side channel, which stays open to notice a dead peer.
 * docs/net.md has the protocol.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "net.h"
#include "wait.h"
#include "param.h"
#include "socket.h"

ZCC_PARAM_STR(ibv_library, "IBV_LIBRARY", "libibverbs.so.1",
              "the verbs library the ib network plug-in loads (tests point it "
              "at libzcc_fakeverbs.so)");
ZCC_PARAM_STR(ib_hca, "IB_HCA", NULL,
              "RDMA devices the ib plug-in uses: comma list of name[:port] "
              "prefixes, ^ excludes, = exact names");
ZCC_PARAM_INT(ib_gid_index, "IB_GID_INDEX", -1,
              "GID index for RoCE (-1: the first RoCEv2 IPv4 GID, else RoCEv2 "
              "IPv6, else RoCEv1)");
ZCC_PARAM_INT(ib_tc, "IB_TC", 0,
              "traffic class of the ib plug-in's RoCE packets");
ZCC_PARAM_INT(ib_sl, "IB_SL", 0,
              "InfiniBand service level of the ib plug-in's queue pairs");
ZCC_PARAM_INT(ib_qps, "IB_QPS_PER_CONNECTION", 1,
              "RC queue pairs per ib connection (1-16)");
ZCC_PARAM_INT(ib_timeout, "IB_TIMEOUT", 18,
              "ib QP ack timeout exponent (4.096 us * 2^N)");
ZCC_PARAM_INT(ib_retry_cnt, "IB_RETRY_CNT", 7, "ib QP transport retries");
ZCC_PARAM_INT(ib_peermem, "IB_PEERMEM", -1,
              "device memory registered with ibv_reg_mr (GPUDirect RDMA through "
              "nvidia-peermem): -1 when the peer-memory module is loaded, 0 "
              "never, 1 always (a module under another name)");
ZCC_PARAM_INT(
    ib_split_bytes, "IB_SPLIT_BYTES", 65536,
    "smallest piece a message is split into across a connection's queue pairs");

#define IB_MAX_DEVS 16
#define IB_MAX_QPS 16
#define IB_DEPTH ZCC_NET_MAX_REQUESTS
#define IB_HANDLE_MAGIC 0x7a636962u /* "zcib" */
#define IB_SIDE_MAGIC 0x7a636973u   /* side channel hello */
#define IB_PROOF_MS 5000 /* an accepted connection proves itself within this */

enum { WR_DATA = 1, WR_CTS = 2, WR_RECV = 3 };

static struct {
  void *lib;
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  const char *(*get_device_name)(struct ibv_device *);
  struct ibv_context *(*open_device)(struct ibv_device *);
  int (*close_device)(struct ibv_context *);
  int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t,
                      struct ibv_gid_entry *, uint32_t, size_t);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  int (*dealloc_pd)(struct ibv_pd *);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t,
                                  int, int);
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *,
                              struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  const char *(*wc_status_str)(enum ibv_wc_status);
  int (*get_async_event)(struct ibv_context *, struct ibv_async_event *);
  void (*ack_async_event)(struct ibv_async_event *);
  const char *(*event_type_str)(enum ibv_event_type);
} ibv;

typedef struct ib_mr_ent {
  uintptr_t start, end;
  struct ibv_mr *mr;
  int refs, type;
  struct ib_mr_ent *next;
} ib_mr_ent_t;

typedef struct {
  char name[ZCC_NET_NAME_BYTES];
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int port, link_layer, gid_index, speed_mbps;
  int dmabuf; /* ibv_reg_dmabuf_mr works on this device (probed at init) */
  union ibv_gid gid;
  uint16_t lid;
  enum ibv_mtu mtu;
  pthread_mutex_t lock; /* the MR cache */
  ib_mr_ent_t *mrs;
  /* Asynchronous events (ib_async_poll): a port or device error fails every
     comm on it; a QP's or CQ's error the comm that owns it. */
  int async;              /* the context's async_fd is non-blocking and read */
  _Atomic int64_t async_next_ns; /* the next look (one a millisecond) */
  _Atomic int fatal;      /* a port or device error: its text in fatal_msg */
  char fatal_msg[160];
} ib_dev_t;

static ib_dev_t ib_devs[IB_MAX_DEVS];
static int ib_ndevs;
static pthread_mutex_t ib_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int ib_inited;
static zccResult_t ib_init_res;

/* Clear-to-send: the receiver writes one into the sender's FIFO per irecv; seq
 * last. */
typedef struct {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  uint32_t pad;
  volatile uint64_t seq; /* request number + 1 */
} ib_cts_t;

/* Queue pair data exchanged on the side channel. */
typedef struct {
  uint32_t magic, nqps;
  uint32_t qpn[IB_MAX_QPS];
  uint16_t lid;
  uint8_t link_layer, mtu;
  uint8_t gid[16];
  uint32_t fifo_rkey;
  uint64_t fifo_addr;
} ib_info_t;

typedef struct {
  uint32_t magic, version;
  uint8_t nonce[16];
} ib_hello_t;

typedef struct {
  uint8_t nonce[16];
  uint8_t mac[32];
} ib_challenge_t;

typedef struct {
  uint8_t mac[32];
  ib_info_t info;
} ib_proof_t;

typedef struct {
  uint32_t magic;
  zcc_sockaddr_t addr;
  void *stage; /* the connector's state between calls (zero from listen) */
} ib_handle_t;
_Static_assert(sizeof(ib_handle_t) <= ZCC_NET_HANDLE_BYTES,
               "ib handle too large");

struct ib_comm;

typedef struct {
  struct ib_comm *comm;
  int used, is_send, nexpected, ndone;
  uint64_t seq;
  size_t size;
} ib_req_t;

typedef struct ib_comm {
  ib_dev_t *dev;
  int is_send, fd, nqps, failed, peer_gone;
  int64_t deadline_ns; /* accepted, unproven: dropped after this (0: proven) */
  struct ibv_cq *cq;
  struct ibv_qp *qps[IB_MAX_QPS];
  ib_cts_t *fifo; /* send side: written by the receiver */
  struct ibv_mr *fifo_mr;
  uint64_t rfifo_addr; /* recv side: the sender's FIFO */
  uint32_t rfifo_rkey;
  uint64_t seq;
  int64_t last_alive_check;
  ib_req_t reqs[IB_DEPTH];
  /* connection setup */
  int stage;
  size_t off;
  uint8_t cnonce[16], snonce[16];
  union {
    ib_hello_t hello;
    ib_challenge_t chal;
    ib_proof_t proof;
    ib_info_t info;
    uint32_t ready;
  } msg;
  zcc_net_auth_t auth;
} ib_comm_t;

typedef struct {
  int dev, fd;
  zcc_net_auth_t auth;
  ib_comm_t **pending; /* proving themselves, each until its deadline: no */
  int npending, cap_pending; /* fixed number, so strangers push nobody out */
} ib_listen_t;

/* ---- loading and devices ---- */

static int ib_load(void) {
  const char *path = zcc_param_ibv_library();
  ibv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!ibv.lib) {
    ZCC_INFO(NET, "ib: %s not loaded (%s): no RDMA devices", path, dlerror());
    return 0;
  }
#define IB_SYM(field, sym, required)                                           \
  do {                                                                         \
    *(void **)&ibv.field = dlsym(ibv.lib, sym);                                \
    if (!ibv.field && (required)) {                                            \
      ZCC_WARN("ib: %s lacks %s: no RDMA devices", path, sym);                 \
      return 0;                                                                \
    }                                                                          \
  } while (0)
  IB_SYM(get_device_list, "ibv_get_device_list", 1);
  IB_SYM(free_device_list, "ibv_free_device_list", 1);
  IB_SYM(get_device_name, "ibv_get_device_name", 1);
  IB_SYM(open_device, "ibv_open_device", 1);
  IB_SYM(close_device, "ibv_close_device", 1);
  IB_SYM(query_device, "ibv_query_device", 1);
  IB_SYM(query_port, "ibv_query_port", 1);
  IB_SYM(query_gid, "ibv_query_gid", 1);
  IB_SYM(query_gid_ex, "_ibv_query_gid_ex", 0);
  IB_SYM(alloc_pd, "ibv_alloc_pd", 1);
  IB_SYM(dealloc_pd, "ibv_dealloc_pd", 1);
  IB_SYM(reg_mr, "ibv_reg_mr", 1);
  IB_SYM(dereg_mr, "ibv_dereg_mr", 1);
  IB_SYM(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", 0);
  IB_SYM(create_cq, "ibv_create_cq", 1);
  IB_SYM(destroy_cq, "ibv_destroy_cq", 1);
  IB_SYM(create_qp, "ibv_create_qp", 1);
  IB_SYM(modify_qp, "ibv_modify_qp", 1);
  IB_SYM(destroy_qp, "ibv_destroy_qp", 1);
  IB_SYM(wc_status_str, "ibv_wc_status_str", 0);
  IB_SYM(get_async_event, "ibv_get_async_event", 0);
  IB_SYM(ack_async_event, "ibv_ack_async_event", 0);
  IB_SYM(event_type_str, "ibv_event_type_str", 0);
#undef IB_SYM
  return 1;
}

static const char *ib_status_str(enum ibv_wc_status s) {
  return ibv.wc_status_str ? ibv.wc_status_str(s) : "unknown status";
}

/* ZCC_IB_HCA: "mlx5_0:1,mlx5_1", "^mlx5_2", "=mlx5_0". */
static int ib_hca_wanted(const char *dev, int port) {
  const char *spec = zcc_param_ib_hca();
  if (!spec || !*spec)
    return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^')
    exclude = 1, spec++;
  if (*spec == '=')
    exact = 1, spec++;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec);
  int match = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(tok, ':');
    int want_port = colon ? atoi(colon + 1) : 0;
    if (colon)
      *colon = 0;
    int ok =
        exact ? strcmp(tok, dev) == 0 : strncmp(tok, dev, strlen(tok)) == 0;
    if (ok && (!want_port || want_port == port))
      match = 1;
  }
  return exclude ? !match : match;
}

static int ib_gid_type(ib_dev_t *d, int idx, const union ibv_gid *g) {
  if (ibv.query_gid_ex) {
    struct ibv_gid_entry e;
    if (ibv.query_gid_ex(d->ctx, (uint32_t)d->port, (uint32_t)idx, &e, 0,
                         sizeof(e)) == 0)
      return (int)e.gid_type;
  }
  char path[256], buf[32] = "";
  snprintf(path, sizeof(path),
           "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
           ibv.get_device_name(d->ctx->device), d->port, idx);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(buf, sizeof(buf), f))
      buf[0] = 0;
    fclose(f);
    return strstr(buf, "v2") ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  }
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, v4, 12) == 0 ? IBV_GID_TYPE_ROCE_V2
                                     : IBV_GID_TYPE_ROCE_V1;
}

/* RoCE: ZCC_IB_GID_INDEX, else RoCEv2 IPv4-mapped, else RoCEv2 IPv6 (not
 * link-local), else v1. */
static int ib_pick_gid(ib_dev_t *d, int tbl_len) {
  int64_t forced = zcc_param_ib_gid_index();
  if (forced >= 0) {
    if (forced >= tbl_len ||
        ibv.query_gid(d->ctx, (uint8_t)d->port, (int)forced, &d->gid) != 0)
      return -1;
    return (int)forced;
  }
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t zero[16] = {0};
  int best = -1, best_rank = 0;
  for (int i = 0; i < tbl_len; i++) {
    union ibv_gid g;
    if (ibv.query_gid(d->ctx, (uint8_t)d->port, i, &g) != 0 ||
        memcmp(g.raw, zero, 16) == 0)
      continue;
    int v2 = ib_gid_type(d, i, &g) == IBV_GID_TYPE_ROCE_V2;
    int is_v4 = memcmp(g.raw, v4, 12) == 0,
        ll = g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
    int rank = v2 ? (is_v4 ? 3 : ll ? 1 : 2) : 1;
    if (rank > best_rank)
      best = i, best_rank = rank, d->gid = g;
  }
  return best;
}

static int ib_speed_mbps(const struct ibv_port_attr *a) {
  int lane;
  switch (a->active_speed) {
  case 1:
    lane = 2500;
    break;
  case 2:
    lane = 5000;
    break;
  case 4:
  case 8:
    lane = 10000;
    break;
  case 16:
    lane = 14000;
    break;
  case 32:
    lane = 25000;
    break;
  case 64:
    lane = 50000;
    break;
  case 128:
    lane = 100000;
    break;
  default:
    lane = 0;
  }
  int width = a->active_width == 1    ? 1
              : a->active_width == 2  ? 4
              : a->active_width == 4  ? 8
              : a->active_width == 8  ? 12
              : a->active_width == 16 ? 2
                                      : 1;
  return lane * width;
}

/*
 * Does ibv_reg_dmabuf_mr work here? A registration with no file descriptor
 * fails with EOPNOTSUPP (or EPROTONOSUPPORT) where the library or the
 * kernel driver lacks dmabuf support, and with EBADF where it has it.
 */
static int ib_dmabuf_probe(struct ibv_pd *pd) {
  if (!ibv.reg_dmabuf_mr)
    return 0;
  errno = 0;
  struct ibv_mr *mr = ibv.reg_dmabuf_mr(pd, 0, 4096, 0, -1, 0);
  if (mr) {
    ibv.dereg_mr(mr);
    return 1;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT && errno != ENOSYS;
}

/* nvidia-peermem (or MOFED's nv_peer_mem): ibv_reg_mr takes device memory. */
static int ib_peermem(void) {
  int64_t v = zcc_param_ib_peermem();
  if (v >= 0)
    return v > 0;
  return access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
         access("/sys/module/nvidia_peermem", F_OK) == 0 ||
         access("/sys/module/nv_peer_mem", F_OK) == 0;
}

static zccResult_t ib_init(void) {
  pthread_mutex_lock(&ib_init_lock);
  if (ib_inited) {
    pthread_mutex_unlock(&ib_init_lock);
    return ib_init_res;
  }
  ib_inited = 1;
  if (!ib_load())
    goto done;
  int n = 0;
  struct ibv_device **list = ibv.get_device_list(&n);
  if (!list) {
    ZCC_INFO(NET, "ib: ibv_get_device_list failed: %s", strerror(errno));
    goto done;
  }
  for (int i = 0; i < n && ib_ndevs < IB_MAX_DEVS; i++) {
    const char *name = ibv.get_device_name(list[i]);
    struct ibv_context *ctx = ibv.open_device(list[i]);
    if (!ctx) {
      ZCC_INFO(NET, "ib: cannot open %s: %s", name, strerror(errno));
      continue;
    }
    struct ibv_device_attr da;
    int used = 0;
    if (ibv.query_device(ctx, &da) != 0)
      da.phys_port_cnt = 0;
    struct ibv_pd *pd = NULL;
    for (int port = 1; port <= da.phys_port_cnt && ib_ndevs < IB_MAX_DEVS;
         port++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (ibv.query_port(ctx, (uint8_t)port, &pa) != 0)
        continue;
      if (!ib_hca_wanted(name, port))
        continue;
      if (pa.state != IBV_PORT_ACTIVE) {
        ZCC_INFO(NET, "ib: %s:%d is not active (state %d): skipped", name, port,
                 (int)pa.state);
        continue;
      }
      if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
          pa.link_layer != IBV_LINK_LAYER_ETHERNET)
        continue;
      ib_dev_t *d = &ib_devs[ib_ndevs];
      memset(d, 0, sizeof(*d));
      d->ctx = ctx;
      d->port = port;
      d->link_layer = pa.link_layer;
      d->lid = pa.lid;
      d->mtu = pa.active_mtu;
      d->speed_mbps = ib_speed_mbps(&pa);
      d->gid_index = 0;
      if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
        d->gid_index = ib_pick_gid(d, pa.gid_tbl_len);
        if (d->gid_index < 0) {
          ZCC_INFO(NET, "ib: %s:%d has no usable RoCE GID: skipped", name,
                   port);
          continue;
        }
      } else if (ibv.query_gid(ctx, (uint8_t)port, 0, &d->gid) != 0) {
        memset(&d->gid, 0, sizeof(d->gid));
      }
      if (!pd && !(pd = ibv.alloc_pd(ctx))) {
        ZCC_WARN("ib: ibv_alloc_pd on %s failed: %s", name, strerror(errno));
        break;
      }
      d->pd = pd;
      snprintf(d->name, sizeof(d->name), "%s:%d", name, port);
      d->dmabuf = ib_dmabuf_probe(pd);
      pthread_mutex_init(&d->lock, NULL);
      /* asynchronous events are read without blocking, as comms poll */
      int fl = ctx->async_fd >= 0 ? fcntl(ctx->async_fd, F_GETFL) : -1;
      d->async = ibv.get_async_event && ibv.ack_async_event && fl >= 0 &&
                 fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0;
      char gs[INET6_ADDRSTRLEN] = "";
      inet_ntop(AF_INET6, d->gid.raw, gs, sizeof(gs));
      ZCC_INFO(NET, "ib: device %d %s %s %d Mb/s gid %d %s, dmabuf %s", ib_ndevs,
               d->name, pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
               d->speed_mbps, d->gid_index, gs, d->dmabuf ? "yes" : "no");
      ib_ndevs++;
      used = 1;
    }
    if (!used) {
      if (pd)
        ibv.dealloc_pd(pd);
      ibv.close_device(ctx);
    }
  }
  ibv.free_device_list(list);
done:
  ib_init_res = zccSuccess;
  pthread_mutex_unlock(&ib_init_lock);
  return zccSuccess;
}

static zccResult_t ib_devices(int *ndev) {
  if (!ndev)
    return zcc_error(zccInvalidArgument, "ib: ndev is NULL");
  ZCC_CHECK(ib_init());
  *ndev = ib_ndevs;
  return zccSuccess;
}

static zccResult_t ib_get_properties(int dev, zcc_net_props_t *props) {
  ZCC_CHECK(ib_init());
  if (dev < 0 || dev >= ib_ndevs || !props)
    return zcc_error(zccInvalidArgument, "ib: no device %d (%d devices)", dev,
                     ib_ndevs);
  ib_dev_t *d = &ib_devs[dev];
  memset(props, 0, sizeof(*props));
  snprintf(props->name, sizeof(props->name), "%s", d->name);
  props->speed_mbps = d->speed_mbps;
  props->port = d->port;
  props->ptr_support = ZCC_NET_PTR_HOST |
                       (d->dmabuf ? ZCC_NET_PTR_DMABUF : 0) |
                       (ib_peermem() ? ZCC_NET_PTR_CUDA : 0);
  props->max_requests = IB_DEPTH;
  props->max_message = (size_t)1 << 31;
  props->latency_us = 2;
  return zccSuccess;
}

/* ---- side channel: non-blocking, fixed-size messages ---- */

/* ---- queue pairs ---- */

static zccResult_t ib_comm_create(int dev, int nqps, int is_send,
                                  ib_comm_t **out) {
  ib_dev_t *d = &ib_devs[dev];
  zccResult_t res = zccSuccess;
  ib_comm_t *c = calloc(1, sizeof(*c));
  if (!c)
    return zcc_error(zccSystemError, "ib: out of memory");
  c->dev = d;
  c->is_send = is_send;
  c->fd = -1;
  c->nqps = nqps;
  for (int i = 0; i < IB_DEPTH; i++)
    c->reqs[i].comm = c;
  c->cq = ibv.create_cq(d->ctx, nqps * 3 * IB_DEPTH + 16, NULL, NULL, 0);
  if (!c->cq) {
    res = zcc_error(zccSystemError, "ib %s: ibv_create_cq failed: %s", d->name,
                    strerror(errno));
    goto fail;
  }
  for (int i = 0; i < nqps; i++) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = c->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 2 * IB_DEPTH;
    ia.cap.max_recv_wr = IB_DEPTH;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = sizeof(ib_cts_t);
    c->qps[i] = ibv.create_qp(d->pd, &ia);
    if (!c->qps[i]) {
      res = zcc_error(zccSystemError, "ib %s: ibv_create_qp failed: %s",
                      d->name, strerror(errno));
      goto fail;
    }
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = (uint8_t)d->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    int rc = ibv.modify_qp(c->qps[i], &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                               IBV_QP_ACCESS_FLAGS);
    if (rc) {
      res = zcc_error(zccSystemError, "ib %s: QP to INIT failed: %s", d->name,
                      strerror(rc));
      goto fail;
    }
  }
  if (is_send) {
    if (posix_memalign((void **)&c->fifo, 4096, sizeof(ib_cts_t) * IB_DEPTH) !=
        0) {
      c->fifo = NULL;
      res = zcc_error(zccSystemError, "ib: out of memory");
      goto fail;
    }
    memset(c->fifo, 0, sizeof(ib_cts_t) * IB_DEPTH);
    c->fifo_mr = ibv.reg_mr(d->pd, c->fifo, sizeof(ib_cts_t) * IB_DEPTH,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!c->fifo_mr) {
      res = zcc_error(zccSystemError,
                      "ib %s: ibv_reg_mr of the clear-to-send FIFO failed: %s",
                      d->name, strerror(errno));
      goto fail;
    }
  }
  *out = c;
  return zccSuccess;
fail:
  if (c->fifo_mr)
    ibv.dereg_mr(c->fifo_mr);
  free(c->fifo);
  for (int i = 0; i < nqps; i++)
    if (c->qps[i])
      ibv.destroy_qp(c->qps[i]);
  if (c->cq)
    ibv.destroy_cq(c->cq);
  free(c);
  return res;
}

static void ib_comm_free(ib_comm_t *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i])
      ibv.destroy_qp(c->qps[i]);
  if (c->cq)
    ibv.destroy_cq(c->cq);
  if (c->fifo_mr)
    ibv.dereg_mr(c->fifo_mr);
  free(c->fifo);
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

static void ib_local_info(ib_comm_t *c, ib_info_t *info) {
  memset(info, 0, sizeof(*info));
  info->magic = IB_SIDE_MAGIC;
  info->nqps = (uint32_t)c->nqps;
  for (int i = 0; i < c->nqps; i++)
    info->qpn[i] = c->qps[i]->qp_num;
  info->lid = c->dev->lid;
  info->link_layer = (uint8_t)c->dev->link_layer;
  info->mtu = (uint8_t)c->dev->mtu;
  memcpy(info->gid, c->dev->gid.raw, 16);
  if (c->fifo_mr) {
    info->fifo_addr = (uintptr_t)c->fifo;
    info->fifo_rkey = c->fifo_mr->rkey;
  }
}

/* INIT -> RTR -> RTS against the peer's queue pairs. */
static zccResult_t ib_comm_rts(ib_comm_t *c, const ib_info_t *r) {
  ib_dev_t *d = c->dev;
  if (r->magic != IB_SIDE_MAGIC || (int)r->nqps != c->nqps)
    return zcc_error(
        zccRemoteError,
        "ib %s: peer sent bad queue pair data (%u queue pairs, %d expected)",
        d->name, r->nqps, c->nqps);
  for (int i = 0; i < c->nqps; i++) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)(r->mtu < d->mtu ? r->mtu : d->mtu);
    a.dest_qp_num = r->qpn[i];
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)d->port;
    a.ah_attr.sl = (uint8_t)zcc_param_ib_sl();
    if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
      a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = (uint8_t)zcc_param_ib_tc();
    } else {
      a.ah_attr.dlid = r->lid;
    }
    int rc = ibv.modify_qp(
        c->qps[i], &a,
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
      return zcc_error(zccRemoteError, "ib %s: QP to RTR failed: %s", d->name,
                       strerror(rc));
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)zcc_param_ib_timeout();
    a.retry_cnt = (uint8_t)zcc_param_ib_retry_cnt();
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    rc = ibv.modify_qp(c->qps[i], &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc)
      return zcc_error(zccRemoteError, "ib %s: QP to RTS failed: %s", d->name,
                       strerror(rc));
  }
  return zccSuccess;
}

static zccResult_t ib_post_recv(ib_comm_t *c, int qp) {
  struct ibv_recv_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = ((uint64_t)qp << 8) | WR_RECV;
  int rc = ibv_post_recv(c->qps[qp], &wr, &bad);
  if (rc)
    return zcc_error(zccRemoteError, "ib %s: ibv_post_recv failed: %s",
                     c->dev->name, strerror(rc));
  return zccSuccess;
}

/* ---- listen, connect, accept ---- */

static zccResult_t ib_listen(int dev, const zcc_net_auth_t *auth, void *handle,
                             void **listen_comm) {
  ZCC_CHECK(ib_init());
  if (dev < 0 || dev >= ib_ndevs || !auth || !handle || !listen_comm)
    return zcc_error(zccInvalidArgument,
                     "ib listen: bad argument (device %d of %d)", dev,
                     ib_ndevs);
  ib_listen_t *l = calloc(1, sizeof(*l));
  if (!l)
    return zcc_error(zccSystemError, "ib: out of memory");
  ib_handle_t h;
  memset(&h, 0, sizeof(h));
  zccResult_t res;
  ZCC_CHECK_GOTO(zcc_socket_pick_addr(&h.addr), res, fail);
  zcc_sockaddr_set_port(&h.addr, 0);
  /* a deep backlog: strangers queued ahead of a peer must not get it dropped */
  ZCC_CHECK_GOTO(zcc_socket_listen(&h.addr, 4096, &l->fd), res, fail);
  h.magic = IB_HANDLE_MAGIC;
  l->dev = dev;
  l->auth = *auth;
  memset(handle, 0, ZCC_NET_HANDLE_BYTES);
  memcpy(handle, &h, sizeof(h));
  *listen_comm = l;
  return zccSuccess;
fail:
  free(l);
  return res;
}

static zccResult_t ib_connect(int dev, const zcc_net_auth_t *auth, void *handle,
                              void **send_comm) {
  ZCC_CHECK(ib_init());
  if (!handle || !send_comm || !auth)
    return zcc_error(zccInvalidArgument, "ib connect: NULL argument");
  *send_comm = NULL;
  ib_handle_t *h = handle;
  if (h->magic != IB_HANDLE_MAGIC)
    return zcc_error(zccInvalidArgument, "ib connect: not an ib handle");
  ib_comm_t *c = h->stage;
  zccResult_t res = zccSuccess;
  char as[ZCC_SOCKADDR_STRLEN];
  if (!c) {
    if (dev < 0 || dev >= ib_ndevs)
      return zcc_error(zccInvalidArgument, "ib connect: no device %d", dev);
    int64_t nq = zcc_param_ib_qps();
    if (nq < 1 || nq > IB_MAX_QPS)
      return zcc_error(zccInvalidArgument,
                       "ZCC_IB_QPS_PER_CONNECTION=%lld: must be 1 to %d",
                       (long long)nq, IB_MAX_QPS);
    ZCC_CHECK(ib_comm_create(dev, (int)nq, 1, &c));
    c->auth = *auth;
    c->fd = socket(h->addr.u.sa.sa_family,
                   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
      res = zcc_error(zccSystemError, "ib connect: socket failed: %s",
                      strerror(errno));
      goto fail;
    }
    if (connect(c->fd, &h->addr.u.sa, h->addr.len) != 0 &&
        errno != EINPROGRESS) {
      res = zcc_error(zccRemoteError, "ib connect to %s failed: %s",
                      zcc_sockaddr_str(&h->addr, as), strerror(errno));
      goto fail;
    }
    ZCC_CHECK_GOTO(zcc_random_bytes(c->cnonce, 16), res, fail);
    h->stage = c;
  }
  for (;;) {
    int r = 1;
    switch (c->stage) {
    case 0: { /* TCP connected? */
      struct pollfd p = {c->fd, POLLOUT, 0};
      if (poll(&p, 1, 0) <= 0)
        return zccSuccess;
      int err = 0;
      socklen_t l = sizeof(err);
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
      if (err) {
        res = zcc_error(zccRemoteError, "ib connect to %s failed: %s",
                        zcc_sockaddr_str(&h->addr, as), strerror(err));
        goto fail;
      }
      c->msg.hello.magic = IB_SIDE_MAGIC;
      c->msg.hello.version = 1;
      memcpy(c->msg.hello.nonce, c->cnonce, 16);
      break;
    }
    case 1:
      r = zcc_net_xfer(c->fd, &c->msg.hello, sizeof(ib_hello_t), &c->off, 1);
      break;
    case 2:
      r = zcc_net_xfer(c->fd, &c->msg.chal, sizeof(ib_challenge_t), &c->off, 0);
      if (r == 1) {
        uint8_t want[32];
        memcpy(c->snonce, c->msg.chal.nonce, 16);
        zcc_net_mac(&c->auth, "zcc-net-ib", 's', c->cnonce, c->snonce, want);
        if (!zcc_net_mac_equal(want, c->msg.chal.mac)) {
          res = zcc_error(zccRemoteError,
                          "ib connect to %s: the listener did not prove the "
                          "communicator's secret",
                          zcc_sockaddr_str(&h->addr, as));
          goto fail;
        }
        zcc_net_mac(&c->auth, "zcc-net-ib", 'c', c->cnonce, c->snonce,
                    c->msg.proof.mac);
        ib_local_info(c, &c->msg.proof.info);
      }
      break;
    case 3:
      r = zcc_net_xfer(c->fd, &c->msg.proof, sizeof(ib_proof_t), &c->off, 1);
      break;
    case 4:
      r = zcc_net_xfer(c->fd, &c->msg.info, sizeof(ib_info_t), &c->off, 0);
      if (r == 1) {
        ZCC_CHECK_GOTO(ib_comm_rts(c, &c->msg.info), res, fail);
        c->msg.ready = IB_SIDE_MAGIC;
      }
      break;
    case 5:
      r = zcc_net_xfer(c->fd, &c->msg.ready, sizeof(uint32_t), &c->off, 1);
      if (r == 1) {
        h->stage = NULL;
        c->last_alive_check = zcc_now_ns();
        *send_comm = c;
        ZCC_INFO(NET, "ib %s: connected to %s with %d queue pairs",
                 c->dev->name, zcc_sockaddr_str(&h->addr, as), c->nqps);
        return zccSuccess;
      }
      break;
    }
    if (r < 0) {
      res = zcc_error(zccRemoteError,
                      "ib connect to %s: the listener closed the connection",
                      zcc_sockaddr_str(&h->addr, as));
      goto fail;
    }
    if (r == 0)
      return zccSuccess;
    c->stage++;
  }
fail:
  h->stage = NULL;
  ib_comm_free(c);
  return res;
}

/* One pending connection's next steps: 1 accepted, 0 not yet, -1 drop it, -2
 * local error (res set). */
static int ib_accept_step(ib_listen_t *l, ib_comm_t *p, ib_comm_t **made,
                          zccResult_t *res) {
  for (;;) {
    int r = 1;
    switch (p->stage) {
    case 0:
      r = zcc_net_xfer(p->fd, &p->msg.hello, sizeof(ib_hello_t), &p->off, 0);
      if (r == 1) {
        if (p->msg.hello.magic != IB_SIDE_MAGIC || p->msg.hello.version != 1)
          return -1;
        memcpy(p->cnonce, p->msg.hello.nonce, 16);
        if (zcc_random_bytes(p->snonce, 16) != zccSuccess)
          return *res = zccSystemError, -2;
        memcpy(p->msg.chal.nonce, p->snonce, 16);
        zcc_net_mac(&l->auth, "zcc-net-ib", 's', p->cnonce, p->snonce,
                    p->msg.chal.mac);
      }
      break;
    case 1:
      r = zcc_net_xfer(p->fd, &p->msg.chal, sizeof(ib_challenge_t), &p->off, 1);
      break;
    case 2:
      r = zcc_net_xfer(p->fd, &p->msg.proof, sizeof(ib_proof_t), &p->off, 0);
      if (r == 1) {
        uint8_t want[32];
        zcc_net_mac(&l->auth, "zcc-net-ib", 'c', p->cnonce, p->snonce, want);
        if (!zcc_net_mac_equal(want, p->msg.proof.mac)) {
          ZCC_INFO(NET, "ib: dropped a connection that did not prove the "
                        "communicator's secret");
          return -1;
        }
        ib_info_t ci = p->msg.proof.info;
        if (ci.magic != IB_SIDE_MAGIC || ci.nqps < 1 || ci.nqps > IB_MAX_QPS)
          return -1;
        ib_comm_t *c;
        *res = ib_comm_create(l->dev, (int)ci.nqps, 0, &c);
        if (*res != zccSuccess)
          return -2;
        *res = ib_comm_rts(c, &ci);
        for (int q = 0; q < c->nqps && *res == zccSuccess; q++)
          for (int i = 0; i < IB_DEPTH && *res == zccSuccess; i++)
            *res = ib_post_recv(c, q);
        if (*res != zccSuccess) {
          ib_comm_free(c);
          return -2;
        }
        c->rfifo_addr = ci.fifo_addr;
        c->rfifo_rkey = ci.fifo_rkey;
        /* the pending entry becomes the comm: move the socket and stage over */
        c->fd = p->fd, p->fd = -1;
        c->stage = 3;
        ib_local_info(c, &c->msg.info);
        c->off = 0;
        *made = c; /* caller swaps it in */
        return 0;
      }
      break;
    case 3:
      r = zcc_net_xfer(p->fd, &p->msg.info, sizeof(ib_info_t), &p->off, 1);
      break;
    case 4:
      r = zcc_net_xfer(p->fd, &p->msg.ready, sizeof(uint32_t), &p->off, 0);
      if (r == 1)
        return p->msg.ready == IB_SIDE_MAGIC ? 1 : -1;
      break;
    }
    if (r < 0)
      return -1;
    if (r == 0)
      return 0;
    p->stage++;
  }
}

static zccResult_t ib_accept(void *listen_comm, void **recv_comm) {
  ib_listen_t *l = listen_comm;
  if (!l || !recv_comm)
    return zcc_error(zccInvalidArgument, "ib accept: NULL argument");
  *recv_comm = NULL;
  int64_t now = zcc_now_ns();
  for (;;) { /* take every waiting connection */
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      break;
    if (l->npending == l->cap_pending) {
      int cap = l->cap_pending ? 2 * l->cap_pending : 16;
      ib_comm_t **np = realloc(l->pending, sizeof(*np) * (size_t)cap);
      if (!np) {
        close(fd);
        return zcc_error(zccSystemError, "ib: out of memory");
      }
      l->pending = np;
      l->cap_pending = cap;
    }
    ib_comm_t *p = calloc(1, sizeof(*p));
    if (!p) {
      close(fd);
      return zcc_error(zccSystemError, "ib: out of memory");
    }
    p->fd = fd;
    p->deadline_ns = now + IB_PROOF_MS * 1000000LL;
    l->pending[l->npending++] = p;
  }
  /* from the back: a finished one's place takes the last, already stepped */
  for (int i = l->npending - 1; i >= 0; i--) {
    ib_comm_t *p = l->pending[i];
    for (;;) {
      ib_comm_t *made = NULL;
      zccResult_t res = zccSuccess;
      int r = ib_accept_step(l, p, &made, &res);
      if (made) { /* authenticated: the queue pairs exist now */
        ib_comm_free(p);
        l->pending[i] = p = made;
        continue;
      }
      if (r == -2)
        return res;
      if (r == 0 && p->deadline_ns && now >= p->deadline_ns)
        r = -1; /* silent too long: a stranger */
      if (r != 0)
        l->pending[i] = l->pending[--l->npending];
      if (r == -1) {
        ib_comm_free(p);
      } else if (r == 1) {
        p->last_alive_check = zcc_now_ns();
        *recv_comm = p;
        ZCC_INFO(NET, "ib %s: accepted a connection with %d queue pairs",
                 p->dev->name, p->nqps);
        return zccSuccess;
      }
      break;
    }
  }
  return zccSuccess;
}

/* ---- memory registration: a cache of page-aligned ranges, by reference ----
 */

/*
 * Host memory and peermem registrations are page-rounded; a dmabuf one is
 * exactly the range asked (its file descriptor covers no more). A range
 * inside a registered one of the same type reuses it.
 */
static zccResult_t ib_reg(ib_comm_t *c, void *data, size_t size, int type,
                          uint64_t offset, int fd, void **mhandle) {
  ib_dev_t *d = c->dev;
  uintptr_t start = (uintptr_t)data, end = start + size;
  if (type != ZCC_NET_PTR_DMABUF) {
    start &= ~(uintptr_t)4095;
    end = (end + 4095) & ~(uintptr_t)4095;
    if (end == start)
      end = start + 4096;
  }
  pthread_mutex_lock(&d->lock);
  for (ib_mr_ent_t *e = d->mrs; e; e = e->next)
    if (e->type == type && e->start <= start && e->end >= end) {
      e->refs++;
      pthread_mutex_unlock(&d->lock);
      *mhandle = e;
      return zccSuccess;
    }
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_READ;
  ib_mr_ent_t *e = calloc(1, sizeof(*e));
  struct ibv_mr *mr = NULL;
  if (e && type == ZCC_NET_PTR_DMABUF)
    mr = ibv.reg_dmabuf_mr(d->pd, offset, end - start, (uint64_t)start, fd,
                           access);
  else if (e)
    mr = ibv.reg_mr(d->pd, (void *)start, end - start, access);
  if (!mr) {
    int err = e ? errno : ENOMEM;
    pthread_mutex_unlock(&d->lock);
    free(e);
    return zcc_error(zccSystemError, "ib %s: %s of %zu bytes of %s at %p failed: %s",
                     d->name,
                     type == ZCC_NET_PTR_DMABUF ? "ibv_reg_dmabuf_mr" : "ibv_reg_mr",
                     size, type == ZCC_NET_PTR_HOST ? "host memory" : "device memory",
                     data, strerror(err));
  }
  e->start = start, e->end = end, e->mr = mr, e->refs = 1, e->type = type;
  e->next = d->mrs;
  d->mrs = e;
  pthread_mutex_unlock(&d->lock);
  ZCC_TRACE(NET, "ib %s: registered %zu bytes of %s at %p", d->name,
            (size_t)(end - start),
            type == ZCC_NET_PTR_DMABUF ? "device memory (dmabuf)"
            : type == ZCC_NET_PTR_CUDA ? "device memory (peermem)"
                                       : "host memory",
            (void *)start);
  *mhandle = e;
  return zccSuccess;
}

static zccResult_t ib_reg_mr(void *comm, void *data, size_t size, int type,
                             void **mhandle) {
  ib_comm_t *c = comm;
  if (!c || !mhandle || (!data && size))
    return zcc_error(zccInvalidArgument, "ib reg_mr: bad argument");
  if (type == ZCC_NET_PTR_CUDA && !ib_peermem())
    return zcc_error(zccInvalidArgument,
                     "ib reg_mr: device memory needs nvidia-peermem, which is not "
                     "loaded (ZCC_IB_PEERMEM=1 says it is)");
  if (type != ZCC_NET_PTR_HOST && type != ZCC_NET_PTR_CUDA)
    return zcc_error(zccInvalidArgument,
                     "ib reg_mr: memory type %d is not host (%d) or peermem "
                     "device memory (%d)", type, ZCC_NET_PTR_HOST, ZCC_NET_PTR_CUDA);
  return ib_reg(c, data, size, type, 0, -1, mhandle);
}

static zccResult_t ib_reg_mr_dmabuf(void *comm, void *data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void **mhandle) {
  ib_comm_t *c = comm;
  if (!c || !mhandle || !data || !size || fd < 0)
    return zcc_error(zccInvalidArgument, "ib reg_mr_dmabuf: bad argument");
  if (type != ZCC_NET_PTR_DMABUF)
    return zcc_error(zccInvalidArgument,
                     "ib reg_mr_dmabuf: memory type %d is not dmabuf (%d)", type,
                     ZCC_NET_PTR_DMABUF);
  if (!c->dev->dmabuf)
    return zcc_error(zccInvalidArgument,
                     "ib %s: this device or libibverbs cannot register dmabuf "
                     "memory", c->dev->name);
  return ib_reg(c, data, size, type, offset, fd, mhandle);
}

static zccResult_t ib_dereg_mr(void *comm, void *mhandle) {
  ib_comm_t *c = comm;
  if (!c || !mhandle)
    return zcc_error(zccInvalidArgument, "ib dereg_mr: NULL argument");
  ib_dev_t *d = c->dev;
  pthread_mutex_lock(&d->lock);
  for (ib_mr_ent_t **p = &d->mrs; *p; p = &(*p)->next)
    if (*p == mhandle) {
      ib_mr_ent_t *e = *p;
      if (--e->refs == 0) {
        *p = e->next;
        ibv.dereg_mr(e->mr);
        free(e);
      }
      pthread_mutex_unlock(&d->lock);
      return zccSuccess;
    }
  pthread_mutex_unlock(&d->lock);
  return zcc_error(zccInvalidArgument, "ib dereg_mr: %p is not a registration",
                   mhandle);
}

/* ---- data path ---- */

static zccResult_t ib_fail(ib_comm_t *c, zccResult_t res) {
  c->failed = 1;
  return res;
}

/* QP and CQ errors the events named, until their comm looks (few at once). */
#define IB_ASYNC_ERRS 16
static struct {
  uintptr_t what; /* the QP or CQ */
  char msg[160];
} ib_async_errs[IB_ASYNC_ERRS];
static _Atomic unsigned ib_async_nerrs;
static pthread_mutex_t ib_async_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *ib_event_str(enum ibv_event_type t) {
  return ibv.event_type_str ? ibv.event_type_str(t) : "asynchronous event";
}

/*
 * Read the device context's asynchronous events (one look a millisecond):
 * a port that goes down (IBV_EVENT_PORT_ERR on this device's port) or a
 * device error fails every comm on the device; a QP's or CQ's error is kept
 * for the comm that owns it. Others (port active, path migration, the
 * last WQE) change nothing. Each event is acknowledged.
 */
static void ib_async_poll(ib_dev_t *d, int now_please) {
  if (!d->async) return;
  int64_t now = zcc_now_ns();
  if (!now_please && now < atomic_load_explicit(&d->async_next_ns, memory_order_relaxed))
    return;
  atomic_store_explicit(&d->async_next_ns, now + 1000000, memory_order_relaxed);
  pthread_mutex_lock(&ib_async_lock);
  struct ibv_async_event ev;
  while (ibv.get_async_event(d->ctx, &ev) == 0) {
    enum ibv_event_type t = ev.event_type;
    char msg[160];
    switch (t) {
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
      for (int i = 0; i < ib_ndevs; i++) {
        ib_dev_t *o = &ib_devs[i];
        if (o->ctx != d->ctx || (t == IBV_EVENT_PORT_ERR && o->port != ev.element.port_num))
          continue;
        snprintf(msg, sizeof(msg), "%s %s (asynchronous event %d)",
                 t == IBV_EVENT_PORT_ERR ? "the port went down:" : "the device failed:",
                 ib_event_str(t), (int)t);
        if (!atomic_load(&o->fatal)) {
          snprintf(o->fatal_msg, sizeof(o->fatal_msg), "%s", msg);
          atomic_store(&o->fatal, 1);
        }
      }
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_CQ_ERR: {
      int cq = t == IBV_EVENT_CQ_ERR;
      unsigned i = ib_async_nerrs++ % IB_ASYNC_ERRS;
      ib_async_errs[i].what = cq ? (uintptr_t)ev.element.cq : (uintptr_t)ev.element.qp;
      snprintf(ib_async_errs[i].msg, sizeof(ib_async_errs[i].msg),
               "%s %u: %s (asynchronous event %d)", cq ? "completion queue" : "queue pair",
               cq ? 0u : ev.element.qp->qp_num, ib_event_str(t), (int)t);
      break;
    }
    default:
      break;
    }
    ibv.ack_async_event(&ev);
  }
  pthread_mutex_unlock(&ib_async_lock);
}

/* An asynchronous error that concerns comm c, as its error (else success). */
static zccResult_t ib_async_check(ib_comm_t *c) {
  ib_dev_t *d = c->dev;
  ib_async_poll(d, 0);
  if (atomic_load(&d->fatal))
    return ib_fail(c, zcc_error(zccRemoteError, "ib %s: %s", d->name, d->fatal_msg));
  if (!ib_async_nerrs) return zccSuccess;
  zccResult_t res = zccSuccess;
  pthread_mutex_lock(&ib_async_lock);
  for (unsigned i = 0; i < IB_ASYNC_ERRS && res == zccSuccess; i++) {
    uintptr_t w = ib_async_errs[i].what;
    int mine = w && w == (uintptr_t)c->cq;
    for (int q = 0; q < c->nqps && !mine; q++) mine = w && w == (uintptr_t)c->qps[q];
    if (mine) {
      res = ib_fail(c, zcc_error(zccRemoteError, "ib %s: %s", d->name, ib_async_errs[i].msg));
      ib_async_errs[i].what = 0;
    }
  }
  pthread_mutex_unlock(&ib_async_lock);
  return res;
}

/*
 * Is the peer still there? Its side channel closes when its process ends
 * (rate-limited: one look a millisecond). 1 once it is gone.
 */
static int ib_peer_gone(ib_comm_t *c) {
  if (c->peer_gone)
    return 1;
  int64_t now = zcc_now_ns();
  if (now - c->last_alive_check < 1000000)
    return 0;
  c->last_alive_check = now;
  char b;
  ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0 ||
      (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    c->peer_gone = 1;
  return c->peer_gone;
}

static zccResult_t ib_gone_error(ib_comm_t *c) {
  return ib_fail(c, zcc_error(zccRemoteError,
                              "ib %s: the peer closed its connection",
                              c->dev->name));
}

/* Reap completions. Returns how many were taken through *got. */
static zccResult_t ib_progress(ib_comm_t *c, int *got) {
  struct ibv_wc wc[16];
  *got = 0;
  ZCC_CHECK(ib_async_check(c));
  int n = ibv_poll_cq(c->cq, 16, wc);
  if (n < 0)
    return ib_fail(
        c, zcc_error(zccRemoteError,
                     "ib %s: ibv_poll_cq failed (completion queue overrun?)",
                     c->dev->name));
  for (int i = 0; i < n; i++) {
    int kind = (int)(wc[i].wr_id & 0xff);
    if (wc[i].status != IBV_WC_SUCCESS) {
      static const char *const what[] = {"", "data write",
                                         "clear-to-send write", "receive"};
      /* a port or device that went down is the cause: its event first */
      ib_async_poll(c->dev, 1);
      int fatal = atomic_load(&c->dev->fatal);
      return ib_fail(
          c, zcc_error(zccRemoteError,
                       "ib %s: %s%s%s on queue pair %u failed: %s (status %d, "
                       "vendor error 0x%x)",
                       c->dev->name, fatal ? c->dev->fatal_msg : "", fatal ? "; " : "",
                       kind >= 1 && kind <= 3 ? what[kind] : "work request",
                       wc[i].qp_num, ib_status_str(wc[i].status),
                       (int)wc[i].status, wc[i].vendor_err));
    }
    if (kind == WR_DATA) {
      c->reqs[(wc[i].wr_id >> 8) % IB_DEPTH].ndone++;
    } else if (kind == WR_RECV) {
      uint32_t imm = ntohl(wc[i].imm_data);
      uint32_t seq24 = imm & 0xffffff;
      ib_req_t *r = &c->reqs[seq24 % IB_DEPTH];
      if (!(wc[i].wc_flags & IBV_WC_WITH_IMM) || !r->used || r->is_send ||
          (r->seq & 0xffffff) != seq24)
        return ib_fail(
            c, zcc_error(
                   zccRemoteError,
                   "ib %s: a write arrived for no posted receive (request %u)",
                   c->dev->name, seq24));
      r->nexpected = (int)(imm >> 24);
      r->ndone++;
      r->size += wc[i].byte_len;
      ZCC_CHECK(ib_post_recv(c, (int)(wc[i].wr_id >> 8)));
    }
  }
  *got = n;
  return zccSuccess;
}

static zccResult_t ib_isend(void *send_comm, void *data, size_t size,
                            void *mhandle, void **request) {
  ib_comm_t *c = send_comm;
  if (!c || !request || !c->is_send || (size && (!data || !mhandle)))
    return zcc_error(zccInvalidArgument, "ib isend: bad argument");
  *request = NULL;
  if (c->failed)
    return zcc_error(zccRemoteError, "ib %s: the connection failed earlier",
                     c->dev->name);
  if (size >= ((size_t)1 << 31))
    return zcc_error(zccInvalidArgument,
                     "ib isend: %zu bytes: at most 2 GiB - 1", size);
  uint64_t seq = c->seq;
  int slot = (int)(seq % IB_DEPTH);
  ib_req_t *r = &c->reqs[slot];
  volatile ib_cts_t *cts = &c->fifo[slot];
  int got;
  /* reap first: send queue slots come back as their completions are polled */
  ZCC_CHECK(ib_progress(c, &got));
  if (r->used || __atomic_load_n(&cts->seq, __ATOMIC_ACQUIRE) != seq + 1) {
    if (!got && ib_peer_gone(c))
      return ib_gone_error(c);
    return zccSuccess;
  }
  uint64_t raddr = cts->addr, rsize = cts->size;
  uint32_t rkey = cts->rkey;
  if (size > rsize)
    return ib_fail(
        c,
        zcc_error(
            zccInvalidUsage,
            "ib %s: send of %zu bytes is larger than the receive of %llu bytes",
            c->dev->name, size, (unsigned long long)rsize));
  int64_t split = zcc_param_ib_split_bytes();
  if (split < 1)
    split = 1;
  int nused = (int)(size / (size_t)split);
  if (nused < 1)
    nused = 1;
  if (nused > c->nqps)
    nused = c->nqps;
  size_t chunk = (size + (size_t)nused - 1) / (size_t)nused;
  uint32_t lkey = mhandle ? ((ib_mr_ent_t *)mhandle)->mr->lkey : 0;
  for (int k = 0; k < nused; k++) {
    size_t off = (size_t)k * chunk,
           len = size - off < chunk ? size - off : chunk;
    struct ibv_sge sge = {(uintptr_t)data + off, (uint32_t)len, lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = ((uint64_t)slot << 8) | WR_DATA;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl((uint32_t)(seq & 0xffffff) | ((uint32_t)nused << 24));
    wr.wr.rdma.remote_addr = raddr + off;
    wr.wr.rdma.rkey = rkey;
    int rc = ibv_post_send(c->qps[k], &wr, &bad);
    if (rc)
      return ib_fail(c, zcc_error(zccRemoteError,
                                  "ib %s: ibv_post_send failed: %s",
                                  c->dev->name, strerror(rc)));
  }
  r->used = 1;
  r->is_send = 1;
  r->seq = seq;
  r->size = size;
  r->nexpected = nused;
  r->ndone = 0;
  c->seq++;
  *request = r;
  return zccSuccess;
}

static zccResult_t ib_irecv(void *recv_comm, void *data, size_t size,
                            void *mhandle, void **request) {
  ib_comm_t *c = recv_comm;
  if (!c || !request || c->is_send || (size && (!data || !mhandle)))
    return zcc_error(zccInvalidArgument, "ib irecv: bad argument");
  *request = NULL;
  if (c->failed)
    return zcc_error(zccRemoteError, "ib %s: the connection failed earlier",
                     c->dev->name);
  if (size >= ((size_t)1 << 31))
    return zcc_error(zccInvalidArgument,
                     "ib irecv: %zu bytes: at most 2 GiB - 1", size);
  uint64_t seq = c->seq;
  int slot = (int)(seq % IB_DEPTH);
  ib_req_t *r = &c->reqs[slot];
  int got;
  ZCC_CHECK(ib_progress(c, &got));
  if (r->used)
    return zccSuccess;
  ib_cts_t cts;
  memset(&cts, 0, sizeof(cts));
  cts.addr = (uintptr_t)data;
  cts.size = size;
  cts.rkey = mhandle ? ((ib_mr_ent_t *)mhandle)->mr->rkey : 0;
  cts.seq = seq + 1;
  struct ibv_sge sge = {(uintptr_t)&cts, sizeof(cts), 0};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = ((uint64_t)slot << 8) | WR_CTS;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = c->rfifo_addr + (uint64_t)slot * sizeof(ib_cts_t);
  wr.wr.rdma.rkey = c->rfifo_rkey;
  r->used = 1;
  r->is_send = 0;
  r->seq = seq;
  r->size = 0;
  r->nexpected = -1;
  r->ndone = 0;
  int rc = ibv_post_send(c->qps[0], &wr, &bad);
  if (rc) {
    r->used = 0;
    return ib_fail(c,
                   zcc_error(zccRemoteError, "ib %s: ibv_post_send failed: %s",
                             c->dev->name, strerror(rc)));
  }
  c->seq++;
  *request = r;
  return zccSuccess;
}

static zccResult_t ib_test(void *request, int *done, size_t *size) {
  ib_req_t *r = request;
  if (!r || !done || !r->used)
    return zcc_error(zccInvalidArgument, "ib test: not a request in flight");
  ib_comm_t *c = r->comm;
  *done = 0;
  if (c->failed)
    return zcc_error(zccRemoteError, "ib %s: the connection failed earlier",
                     c->dev->name);
  if (r->ndone != r->nexpected) {
    int got;
    ZCC_CHECK(ib_progress(c, &got));
    if (r->ndone != r->nexpected && !got && ib_peer_gone(c)) {
      /* The peer may have finished and closed after our last poll: the
       * completions of what it took (a send's ACK) can come in a little
       * after its side channel closed. Poll them for up to 100 ms. */
      int64_t until = zcc_now_ns() + 100 * 1000000LL;
      do {
        ZCC_CHECK(ib_progress(c, &got));
        if (!got && r->ndone != r->nexpected) sched_yield();
      } while (r->ndone != r->nexpected && zcc_now_ns() < until);
      if (r->ndone != r->nexpected)
        return ib_gone_error(c);
    }
    if (r->ndone != r->nexpected)
      return zccSuccess;
  }
  *done = 1;
  if (size)
    *size = r->size;
  r->used = 0;
  return zccSuccess;
}

static zccResult_t ib_close(void *comm) {
  ib_comm_free(comm);
  return zccSuccess;
}

static zccResult_t ib_close_listen(void *listen_comm) {
  ib_listen_t *l = listen_comm;
  if (!l)
    return zccSuccess;
  for (int i = 0; i < l->npending; i++)
    ib_comm_free(l->pending[i]);
  free(l->pending);
  zcc_socket_close(&l->fd);
  free(l);
  return zccSuccess;
}

const zcc_net_ops_t zcc_net_ib_ops = {
    .name = "ib",
    .init = ib_init,
    .devices = ib_devices,
    .get_properties = ib_get_properties,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .reg_mr = ib_reg_mr,
    .reg_mr_dmabuf = ib_reg_mr_dmabuf,
    .dereg_mr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .close_send = ib_close,
    .close_recv = ib_close,
    .close_listen = ib_close_listen,
};
