/*
 * libzcc_fakeverbs.so: a test-only stand-in for libibverbs, loaded by the ib
 * plug-in through ZCC_IBV_LIBRARY. It exports the subset of the verbs API
 * the plug-in calls, and fills ibv_context.ops for the calls verbs.h inlines
 * (post_send, post_recv, poll_cq). Never linked into libzcc, never installed.
 *
 * Design (docs/net.md): each process does its own "DMA". A QP listens on a
 * TCP port at creation and that port is its QP number; the port's GID table
 * holds the host's IPv4 addresses as RoCEv2 GIDs (::ffff:a.b.c.d). At RTS a
 * QP connects to (dgid, dest_qp_num) and sends its requests there; the
 * responder's progress thread (one per process) checks each request as an
 * HCA would (QP state, rkey, PD, access flags, bounds, a posted receive, its
 * length), writes the payload into its own memory and returns an ACK or a
 * NAK on the same connection; the requester completes its work requests in
 * order on the ACKs. A connection that closes is the peer gone: its
 * outstanding and later work requests complete with RETRY_EXC_ERR.
 *
 * Faults (environment, read when the event happens):
 *   ZCC_FAKEVERBS_DEVICES=N        devices (default 1; 0: none)
 *   ZCC_FAKEVERBS_FAIL_REG_MR=N    the Nth ibv_reg_mr of the process and every
 * later one fail (ENOMEM) ZCC_FAKEVERBS_WC_ERROR=N[:S]   the Nth send WR
 * completes with status S (default IBV_WC_REM_OP_ERR), QP to error
 *   ZCC_FAKEVERBS_QP_ERROR=N       posting the Nth send WR moves its QP to the
 * error state (everything flushed) ZCC_FAKEVERBS_PORT_DOWN=N      0: the port
 * is down from the start; N: it goes down at the Nth send WR (ibv_query_port
 * says DOWN, nothing moves, and every QP with work outstanding fails it with
 * RETRY_EXC_ERR, as when the link drops)
 *   ZCC_FAKEVERBS_PORT_DOWN_RECV=N the port goes down as the Nth receive
 * completes (a side that only receives sees it too).
 *
 * GPU memory (GPUDirect RDMA): ibv_reg_dmabuf_mr takes a dmabuf file
 * descriptor (checked to be one) and its iova is taken for the CUDA device
 * address the range starts at (as zcc and NCCL register: the iova is the
 * buffer's address); the requester reads and the responder writes such
 * memory with copies on a stream of their own (libcuda, loaded when the
 * first such MR is registered), so the data never passes through memory
 * the application staged it in. ZCC_FAKEVERBS_DMABUF=0 makes the call fail
 * with EOPNOTSUPP (a library or kernel without dmabuf), and
 * ZCC_FAKEVERBS_PEERMEM=1 lets ibv_reg_mr take device memory, as with
 * nvidia-peermem loaded (without it, device memory is EFAULT).
 * A port going down queues IBV_EVENT_PORT_ERR, a QP_ERROR fault
 * IBV_EVENT_QP_FATAL, on the contexts' async_fd (ibv_get_async_event).
 * The thread starts with the first QP: fork before creating QPs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_query_port
#undef ibv_get_device_list

#define FV_EXPORT __attribute__((visibility("default")))
#define FV_MAX_DEVS 4
#define FV_MAX_GIDS 16
#define FV_MAX_SGE 4
#define FV_MAGIC 0x7a636676u /* "zcfv" */

enum { OP_WRITE = 1, OP_WRITE_IMM = 2, OP_SEND = 3, OP_SEND_IMM = 4 };

typedef struct {
  uint32_t magic, src_qpn, dst_qpn, pad;
} fv_hello_t;

typedef struct {
  uint32_t magic;
  uint32_t op;
  uint32_t len;
  uint32_t imm; /* network order, as posted */
  uint32_t rkey;
  uint32_t pad;
  uint64_t raddr;
} fv_hdr_t;

typedef struct {
  uint32_t magic;
  uint32_t status; /* enum ibv_wc_status seen by the requester */
} fv_ack_t;

typedef struct fv_mr {
  struct ibv_mr mr;
  int access;
  void *cuctx;   /* device memory: its CUDA context; NULL: host memory */
  void *custream; /* the copies' stream (made on first use) */
  struct fv_mr *next;
} fv_mr_t;

typedef struct {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  int cap, head, count, overflow;
} fv_cq_t;

typedef struct {
  uint64_t wr_id;
  int op, signaled, nsge;
  uint32_t len, imm, rkey;
  uint64_t raddr;
  struct ibv_sge sge[FV_MAX_SGE];
  fv_mr_t *sge_dev[FV_MAX_SGE]; /* the device MR of each entry, or NULL */
  char *inl;  /* IBV_SEND_INLINE: a copy */
  int inject; /* a status to complete with instead of sending (0: none) */
} fv_swr_t;

typedef struct {
  uint64_t wr_id;
  int nsge;
  struct ibv_sge sge[FV_MAX_SGE];
} fv_rwr_t;

typedef struct fv_qp {
  struct ibv_qp qp;
  int port, sgid_index;
  uint32_t dest_qpn, rq_psn, sq_psn;
  struct sockaddr_in dest;
  int lfd, out_fd, in_fd;
  int out_connecting, out_dead;
  /* send queue: [head, sent) transmitted and waiting for an ACK, [sent, tail)
   * to send */
  fv_swr_t *sq;
  int sq_cap;
  uint64_t sq_head, sq_sent, sq_tail;
  size_t tx_off; /* bytes of the hello (first) or of the current request sent */
  int hello_sent;
  char ack_in[sizeof(fv_ack_t)];
  size_t ack_in_off;
  /* receive queue */
  fv_rwr_t *rq;
  int rq_cap;
  uint64_t rq_head, rq_tail;
  /* responder parser on in_fd */
  int in_state; /* 0 hello, 1 header, 2 payload, 3 wait for a receive WR
                   (write-imm done), 4 dead */
  char in_buf[sizeof(fv_hdr_t)];
  size_t in_off;
  fv_hdr_t hdr;
  uint32_t pay_done;
  char bounce[256] __attribute__((aligned(8)));
  fv_mr_t *land_dev;                 /* a write's device MR, or NULL */
  fv_mr_t *rwr_dev[FV_MAX_SGE];      /* cur_rwr's device MRs, or NULL */
  char *devb;                        /* device memory's bounce (FV_DEVB bytes) */
  char *txb;                         /* the requester's: bytes of device memory */
  uint64_t txb_wr;                   /* staged from this WR (sq index) */
  size_t txb_lo, txb_hi;             /* payload offsets staged in txb */
  fv_rwr_t cur_rwr;
  int have_rwr;
  /* ACKs to write on in_fd */
  fv_ack_t acks[64];
  int ack_n;
  size_t ack_off;
  struct fv_qp *next;
} fv_qp_t;

#define FV_EVENTS 64
typedef struct fv_ctx {
  struct ibv_context ctx;
  int idx;
  int pipe_w; /* async_fd is the pipe's read end: a byte per queued event */
  struct {
    enum ibv_event_type type;
    struct ibv_qp *qp;
    int port;
  } ev[FV_EVENTS];
  unsigned ev_head, ev_tail;
  struct fv_ctx *next;
} fv_ctx_t;

static pthread_mutex_t fv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_device fv_devs[FV_MAX_DEVS];
static struct ibv_device *fv_dev_list[FV_MAX_DEVS + 1];
static union ibv_gid fv_gids[FV_MAX_GIDS];
static int fv_gid_type[FV_MAX_GIDS];
static int fv_ngids;
static fv_mr_t *fv_mrs;
static fv_qp_t *fv_qps;
static uint32_t fv_key_counter;
static long fv_reg_count, fv_send_count;
static int fv_port_down = -1; /* -1: not yet read */
static fv_ctx_t *fv_ctxs;      /* open contexts (asynchronous events) */
static int fv_thread_started;
static int fv_wake[2] = {-1, -1};

static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 0) : def;
}

/* ---- device memory: libcuda, loaded on first use ---- */

#define FV_DEVB (256u << 10)
static struct {
  int tried, ok;
  int (*init)(unsigned);
  int (*ptr_attr)(void *, int, unsigned long long);
  int (*ctx_set)(void *);
  int (*ctx_get)(void **);
  int (*stream_create)(void **, unsigned);
  int (*stream_destroy)(void *);
  int (*memcpy_async)(unsigned long long, unsigned long long, size_t, void *);
  int (*stream_sync)(void *);
} fv_cu;

static int fv_cu_load(void) {
  if (fv_cu.tried)
    return fv_cu.ok;
  fv_cu.tried = 1;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return 0;
  *(void **)&fv_cu.init = dlsym(lib, "cuInit");
  *(void **)&fv_cu.ptr_attr = dlsym(lib, "cuPointerGetAttribute");
  *(void **)&fv_cu.ctx_set = dlsym(lib, "cuCtxSetCurrent");
  *(void **)&fv_cu.ctx_get = dlsym(lib, "cuCtxGetCurrent");
  *(void **)&fv_cu.stream_create = dlsym(lib, "cuStreamCreate");
  *(void **)&fv_cu.stream_destroy = dlsym(lib, "cuStreamDestroy_v2");
  *(void **)&fv_cu.memcpy_async = dlsym(lib, "cuMemcpyAsync");
  *(void **)&fv_cu.stream_sync = dlsym(lib, "cuStreamSynchronize");
  fv_cu.ok = fv_cu.init && fv_cu.ptr_attr && fv_cu.ctx_set && fv_cu.ctx_get &&
             fv_cu.stream_create &&
             fv_cu.stream_destroy && fv_cu.memcpy_async && fv_cu.stream_sync &&
             fv_cu.init(0) == 0;
  return fv_cu.ok;
}

/* The CUDA context of device memory [addr, addr+len), or NULL (host memory,
   or no CUDA). */
static void *fv_cu_ctx_of(uint64_t addr, size_t len) {
  if (!len || !fv_cu_load())
    return NULL;
  unsigned type = 0, type_end = 0;
  void *ctx = NULL;
  /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2 (CU_MEMORYTYPE_DEVICE 2), _CONTEXT 1 */
  if (fv_cu.ptr_attr(&type, 2, addr) != 0 || type != 2 ||
      fv_cu.ptr_attr(&type_end, 2, addr + len - 1) != 0 || type_end != 2 ||
      fv_cu.ptr_attr(&ctx, 1, addr) != 0)
    return NULL;
  return ctx;
}

/* The HCA's DMA to or from device memory of m: a copy on m's stream (one
   that never waits for the application's kernels). 0, or -1. */
static long fv_dev_copies;

static int fv_dev_copy(fv_mr_t *m, void *dst, const void *src, size_t n) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (fv_cu.ctx_set(m->cuctx) != 0)
    return -1;
  if (!m->custream && fv_cu.stream_create(&m->custream, 1 /* non-blocking */) != 0)
    return -1;
  if (fv_cu.memcpy_async((uintptr_t)dst, (uintptr_t)src, n, m->custream) != 0)
    return -1;
  int rc = fv_cu.stream_sync(m->custream) == 0 ? 0 : -1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  /* ZCC_FAKEVERBS_TRACE=N: the first N device copies on stderr; a slow one always */
  long trace = env_long("ZCC_FAKEVERBS_TRACE", 0);
  int into = (uintptr_t)dst >= (uintptr_t)m->mr.addr &&
             (uintptr_t)dst < (uintptr_t)m->mr.addr + m->mr.length;
  if (++fv_dev_copies <= trace || ms > 500)
    fprintf(stderr, "fakeverbs: pid %d device copy #%ld %s %zu bytes at %p: %s in %.3f ms\n",
            (int)getpid(), fv_dev_copies, into ? "into" : "from", n,
            into ? dst : (void *)src, rc ? "failed" : "done", ms);
  return rc;
}

/*
 * At registration, in the registering thread (before the application's
 * kernels wait on what this MR will carry): the MR's stream, and one copy
 * each way through pageable memory, as the progress thread will make them.
 * A first copy of a kind can wait for the device to idle (the driver loads
 * what it needs lazily), which would never come while kernels spin on the
 * data it carries. 0, or -1.
 */
static int fv_dev_warm(fv_mr_t *m) {
  void *prev = NULL;
  if (fv_cu.ctx_get(&prev) != 0 || fv_cu.ctx_set(m->cuctx) != 0)
    return -1;
  char b[16];
  uint64_t at = (uintptr_t)m->mr.addr;
  int rc = fv_cu.stream_create(&m->custream, 1 /* non-blocking */) == 0 &&
                   fv_cu.memcpy_async((uintptr_t)b, at, sizeof(b), m->custream) == 0 &&
                   fv_cu.memcpy_async(at, (uintptr_t)b, sizeof(b), m->custream) == 0 &&
                   fv_cu.stream_sync(m->custream) == 0
               ? 0
               : -1;
  fv_cu.ctx_set(prev);
  return rc;
}

static void fv_wakeup(void) {
  if (fv_wake[1] >= 0) {
    char c = 1;
    ssize_t rc = write(fv_wake[1], &c, 1);
    (void)rc;
  }
}

/* ---- devices, ports, GIDs ---- */

static void fv_load_gids(void) {
  fv_ngids = 1;
  memset(fv_gids, 0, sizeof(fv_gids));
  fv_gids[0].raw[0] = 0xfe;
  fv_gids[0].raw[1] = 0x80;
  fv_gids[0].raw[15] = 1;
  fv_gid_type[0] = IBV_GID_TYPE_ROCE_V1;
  struct ifaddrs *ifa = NULL;
  if (getifaddrs(&ifa) != 0)
    return;
  /* Loopback addresses last: a RoCE port has its netdev's addresses, and a
     GID of 127.0.0.1 would reach this host from any network namespace. */
  for (int lo = 0; lo < 2; lo++)
    for (struct ifaddrs *i = ifa; i && fv_ngids < FV_MAX_GIDS; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
          !(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_LOOPBACK) != !lo)
        continue;
      union ibv_gid *g = &fv_gids[fv_ngids];
      g->raw[10] = g->raw[11] = 0xff;
      memcpy(&g->raw[12], &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
      fv_gid_type[fv_ngids++] = IBV_GID_TYPE_ROCE_V2;
    }
  freeifaddrs(ifa);
}

FV_EXPORT struct ibv_device **ibv_get_device_list(int *num) {
  int n = (int)env_long("ZCC_FAKEVERBS_DEVICES", 1);
  if (n < 0)
    n = 0;
  if (n > FV_MAX_DEVS)
    n = FV_MAX_DEVS;
  pthread_mutex_lock(&fv_lock);
  for (int i = 0; i < n; i++) {
    memset(&fv_devs[i], 0, sizeof(fv_devs[i]));
    fv_devs[i].node_type = IBV_NODE_CA;
    fv_devs[i].transport_type = IBV_TRANSPORT_IB;
    snprintf(fv_devs[i].name, sizeof(fv_devs[i].name), "fakeverbs%d", i);
    snprintf(fv_devs[i].dev_name, sizeof(fv_devs[i].dev_name), "uverbs%d", i);
    fv_dev_list[i] = &fv_devs[i];
  }
  fv_dev_list[n] = NULL;
  fv_load_gids();
  pthread_mutex_unlock(&fv_lock);
  if (num)
    *num = n;
  return fv_dev_list;
}

FV_EXPORT void ibv_free_device_list(struct ibv_device **list) {
  (void)list;
}

FV_EXPORT const char *ibv_get_device_name(struct ibv_device *dev) {
  return dev ? dev->name : NULL;
}

FV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *dev) {
  return htobe64(0x5a43430000000000ull | (uint64_t)(dev - fv_devs));
}

static int fv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad);
static int fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad);
static int fv_req_notify(struct ibv_cq *cq, int solicited) {
  (void)cq, (void)solicited;
  return EOPNOTSUPP;
}

/* Queue an asynchronous event on context c (under fv_lock); a full queue
   drops it, as a kernel's would overflow. */
static void fv_async_push(fv_ctx_t *c, enum ibv_event_type type, struct ibv_qp *qp, int port) {
  if (c->ev_tail - c->ev_head >= FV_EVENTS)
    return;
  unsigned i = c->ev_tail++ % FV_EVENTS;
  c->ev[i].type = type;
  c->ev[i].qp = qp;
  c->ev[i].port = port;
  char b = 1;
  if (write(c->pipe_w, &b, 1) < 0) {
  }
}

/* The port went down (under fv_lock): every context hears it. */
static void fv_port_went_down(void) {
  if (fv_port_down == 1)
    return;
  fv_port_down = 1;
  for (fv_ctx_t *c = fv_ctxs; c; c = c->next)
    fv_async_push(c, IBV_EVENT_PORT_ERR, NULL, 1);
}

FV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev) {
  fv_ctx_t *c = calloc(1, sizeof(*c));
  if (!c)
    return errno = ENOMEM, NULL;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    free(c);
    return NULL;
  }
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  c->pipe_w = fds[1];
  c->ctx.device = dev;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = fds[0];
  c->ctx.num_comp_vectors = 1;
  c->ctx.abi_compat =
      NULL; /* not extended: verbs.h's inlines use the exported calls */
  c->ctx.ops.poll_cq = fv_poll_cq;
  c->ctx.ops.post_send = fv_post_send;
  c->ctx.ops.post_recv = fv_post_recv;
  c->ctx.ops.req_notify_cq = fv_req_notify;
  pthread_mutex_init(&c->ctx.mutex, NULL);
  c->idx = (int)(dev - fv_devs);
  pthread_mutex_lock(&fv_lock);
  c->next = fv_ctxs;
  fv_ctxs = c;
  pthread_mutex_unlock(&fv_lock);
  return &c->ctx;
}

FV_EXPORT int ibv_close_device(struct ibv_context *ctx) {
  fv_ctx_t *c = (fv_ctx_t *)ctx;
  pthread_mutex_lock(&fv_lock);
  for (fv_ctx_t **pp = &fv_ctxs; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  pthread_mutex_unlock(&fv_lock);
  close(c->ctx.async_fd);
  close(c->pipe_w);
  free(c);
  return 0;
}

/* As libibverbs: blocks unless async_fd was made O_NONBLOCK (then -1, EAGAIN). */
FV_EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
  fv_ctx_t *c = (fv_ctx_t *)ctx;
  char b;
  ssize_t r = read(c->ctx.async_fd, &b, 1);
  if (r != 1)
    return -1;
  pthread_mutex_lock(&fv_lock);
  int got = c->ev_head != c->ev_tail;
  if (got) {
    unsigned i = c->ev_head++ % FV_EVENTS;
    memset(ev, 0, sizeof(*ev));
    ev->event_type = c->ev[i].type;
    if (c->ev[i].qp)
      ev->element.qp = c->ev[i].qp;
    else
      ev->element.port_num = c->ev[i].port;
  }
  pthread_mutex_unlock(&fv_lock);
  return got ? 0 : (errno = EAGAIN, -1);
}

FV_EXPORT void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }

FV_EXPORT const char *ibv_event_type_str(enum ibv_event_type t) {
  switch (t) {
  case IBV_EVENT_CQ_ERR: return "CQ error";
  case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
  case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
  case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
  case IBV_EVENT_PORT_ACTIVE: return "port active";
  case IBV_EVENT_PORT_ERR: return "port error";
  case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
  default: return "unknown";
  }
}

FV_EXPORT int ibv_query_device(struct ibv_context *ctx,
                               struct ibv_device_attr *a) {
  (void)ctx;
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "fakeverbs-1");
  a->vendor_id = 0x5a43;
  a->max_mr_size = 1ull << 40;
  a->page_size_cap = 4096;
  a->max_qp = 1 << 16;
  a->max_qp_wr = 1 << 15;
  a->max_sge = FV_MAX_SGE;
  a->max_cq = 1 << 16;
  a->max_cqe = 1 << 20;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->phys_port_cnt = 1;
  return 0;
}

static int fv_port_is_down(void) {
  if (fv_port_down < 0)
    fv_port_down = env_long("ZCC_FAKEVERBS_PORT_DOWN", -1) == 0;
  return fv_port_down;
}

FV_EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port,
                             struct _compat_ibv_port_attr *out) {
  (void)ctx;
  if (port != 1)
    return EINVAL;
  struct ibv_port_attr a;
  memset(&a, 0, sizeof(a));
  pthread_mutex_lock(&fv_lock);
  a.state = fv_port_is_down() ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  pthread_mutex_unlock(&fv_lock);
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = IBV_MTU_4096;
  a.gid_tbl_len = fv_ngids;
  a.max_msg_sz = 1u << 31;
  a.pkey_tbl_len = 1;
  a.active_width = 2; /* 4x */
  a.active_speed =
      64; /* HDR: 200 Gb/s on paper; the fake moves what TCP moves */
  a.phys_state = a.state == IBV_PORT_ACTIVE ? 5 : 3;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  /* the old (compat) layout ends before flags; callers zero the rest */
  memcpy(out, &a, offsetof(struct ibv_port_attr, flags));
  return 0;
}

FV_EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
                            union ibv_gid *gid) {
  (void)ctx;
  if (port != 1 || index < 0 || index >= fv_ngids)
    return EINVAL;
  *gid = fv_gids[index];
  return 0;
}

FV_EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port,
                                uint32_t index, struct ibv_gid_entry *e,
                                uint32_t flags, size_t size) {
  (void)ctx, (void)flags;
  if (port != 1 || index >= (uint32_t)fv_ngids || size < sizeof(*e))
    return EINVAL;
  memset(e, 0, sizeof(*e));
  e->gid = fv_gids[index];
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = fv_gid_type[index];
  e->ndev_ifindex = 1;
  return 0;
}

FV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s) {
  static const char *const names[] = {
      [IBV_WC_SUCCESS] = "success",
      [IBV_WC_LOC_LEN_ERR] = "local length error",
      [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
      [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
      [IBV_WC_LOC_PROT_ERR] = "local protection error",
      [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
      [IBV_WC_MW_BIND_ERR] = "memory management operation error",
      [IBV_WC_BAD_RESP_ERR] = "bad response error",
      [IBV_WC_LOC_ACCESS_ERR] = "local access error",
      [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
      [IBV_WC_REM_ACCESS_ERR] = "remote access error",
      [IBV_WC_REM_OP_ERR] = "remote operation error",
      [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
      [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
      [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
      [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
      [IBV_WC_REM_ABORT_ERR] = "aborted error",
      [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
      [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
      [IBV_WC_FATAL_ERR] = "fatal error",
      [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
      [IBV_WC_GENERAL_ERR] = "general error",
  };
  if ((unsigned)s < sizeof(names) / sizeof(names[0]) && names[s])
    return names[s];
  return "unknown";
}

/* ---- PDs and MRs ---- */

FV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
  struct ibv_pd *pd = calloc(1, sizeof(*pd));
  if (!pd)
    return errno = ENOMEM, NULL;
  pd->context = ctx;
  return pd;
}

FV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  pthread_mutex_lock(&fv_lock);
  for (fv_mr_t *m = fv_mrs; m; m = m->next)
    if (m->mr.pd == pd)
      return pthread_mutex_unlock(&fv_lock), EBUSY;
  for (fv_qp_t *q = fv_qps; q; q = q->next)
    if (q->qp.pd == pd)
      return pthread_mutex_unlock(&fv_lock), EBUSY;
  pthread_mutex_unlock(&fv_lock);
  free(pd);
  return 0;
}

static uint32_t fv_new_key(void) {
  /* keys that are hard to hit by accident: a counter and a mixed pid */
  uint32_t k = ++fv_key_counter;
  return (k << 8) ^ (((uint32_t)getpid() * 2654435761u) & 0xff00ff);
}

/* A new MR of pd over [addr, addr + length), device memory of cuctx (NULL:
   host memory), linked in; NULL with errno set. Under fv_lock. */
static struct ibv_mr *fv_mr_add(struct ibv_pd *pd, void *addr, size_t length, int access,
                                void *cuctx) {
  fv_mr_t *m = calloc(1, sizeof(*m));
  if (!m)
    return errno = ENOMEM, NULL;
  m->cuctx = cuctx;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = fv_new_key();
  m->mr.rkey = fv_new_key() | 0x80000000u; /* never equal to an lkey */
  m->access = access;
  if (cuctx && fv_dev_warm(m) != 0) {
    free(m);
    return errno = EFAULT, NULL;
  }
  m->next = fv_mrs;
  fv_mrs = m;
  return &m->mr;
}

FV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                          size_t length, uint64_t iova,
                                          unsigned int access) {
  if (!pd || (!addr && length) || iova != (uintptr_t)addr)
    return errno = EINVAL, NULL;
  /* remote write or atomic needs local write, as the kernel insists */
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return errno = EINVAL, NULL;
  pthread_mutex_lock(&fv_lock);
  long n = ++fv_reg_count, fail = env_long("ZCC_FAKEVERBS_FAIL_REG_MR", 0);
  if (fail > 0 && n >= fail) {
    pthread_mutex_unlock(&fv_lock);
    return errno = ENOMEM, NULL;
  }
  void *cuctx = NULL;
  if (env_long("ZCC_FAKEVERBS_PEERMEM", 0) == 1 &&
      (cuctx = fv_cu_ctx_of((uintptr_t)addr, length)) == NULL &&
      fv_cu_ctx_of((uintptr_t)addr, 1))
    return pthread_mutex_unlock(&fv_lock), errno = EFAULT, NULL; /* partly device */
  struct ibv_mr *mr = fv_mr_add(pd, addr, length, (int)access, cuctx);
  pthread_mutex_unlock(&fv_lock);
  return mr;
}

FV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
                                    size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

/*
 * A dmabuf MR: fd must be a dmabuf; [iova, iova + length) is the device
 * memory it covers (offset is where that begins in the dmabuf: not needed,
 * as the fake reaches the memory by its address).
 */
FV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                           size_t length, uint64_t iova, int fd,
                                           int access) {
  (void)offset;
  if (env_long("ZCC_FAKEVERBS_DMABUF", 1) == 0)
    return errno = EOPNOTSUPP, NULL;
  if (fd < 0)
    return errno = EBADF, NULL;
  char link[64], path[256];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof(path) - 1);
  if (n < 0)
    return errno = EBADF, NULL;
  path[n] = '\0';
  if (!strstr(path, "dmabuf"))
    return errno = EINVAL, NULL; /* not a dmabuf */
  if (!pd || !length || (access & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING)))
    return errno = EINVAL, NULL;
  if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return errno = EINVAL, NULL;
  pthread_mutex_lock(&fv_lock);
  long cnt = ++fv_reg_count, fail = env_long("ZCC_FAKEVERBS_FAIL_REG_MR", 0);
  void *cuctx = fail > 0 && cnt >= fail ? NULL : fv_cu_ctx_of(iova, length);
  if (!cuctx) {
    pthread_mutex_unlock(&fv_lock);
    return errno = fail > 0 && cnt >= fail ? ENOMEM : EFAULT, NULL;
  }
  struct ibv_mr *mr = fv_mr_add(pd, (void *)(uintptr_t)iova, length, access, cuctx);
  pthread_mutex_unlock(&fv_lock);
  return mr;
}

FV_EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  pthread_mutex_lock(&fv_lock);
  for (fv_mr_t **p = &fv_mrs; *p; p = &(*p)->next)
    if (&(*p)->mr == mr) {
      fv_mr_t *m = *p;
      *p = m->next;
      /* a device MR's next copy is gone with it: clear the QPs' pointers */
      for (fv_qp_t *q = fv_qps; q; q = q->next) {
        if (q->land_dev == m)
          q->land_dev = NULL;
        for (int i = 0; i < FV_MAX_SGE; i++)
          if (q->rwr_dev[i] == m)
            q->rwr_dev[i] = NULL;
      }
      pthread_mutex_unlock(&fv_lock);
      if (m->custream)
        fv_cu.stream_destroy(m->custream);
      free(m);
      return 0;
    }
  pthread_mutex_unlock(&fv_lock);
  return EINVAL;
}

/* An MR of pd by key that holds [addr, addr+len) and allows `access`. Under
 * fv_lock. */
static fv_mr_t *fv_find_mr(struct ibv_pd *pd, uint32_t key, int remote,
                           uint64_t addr, uint64_t len, int access) {
  for (fv_mr_t *m = fv_mrs; m; m = m->next) {
    if ((remote ? m->mr.rkey : m->mr.lkey) != key)
      continue;
    if (m->mr.pd != pd)
      return NULL;
    uint64_t lo = (uintptr_t)m->mr.addr, hi = lo + m->mr.length;
    if (addr < lo || addr > hi || len > hi - addr)
      return NULL;
    if ((m->access & access) != access)
      return NULL;
    return m;
  }
  return NULL;
}

/* ---- CQs ---- */

FV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe,
                                       void *cq_context,
                                       struct ibv_comp_channel *channel,
                                       int comp_vector) {
  (void)comp_vector;
  if (cqe <= 0 || cqe > (1 << 20) || channel)
    return errno = EINVAL, NULL;
  fv_cq_t *c = calloc(1, sizeof(*c));
  if (!c)
    return errno = ENOMEM, NULL;
  c->ring = calloc((size_t)cqe, sizeof(struct ibv_wc));
  if (!c->ring)
    return free(c), errno = ENOMEM, NULL;
  c->cap = cqe;
  c->cq.context = ctx;
  c->cq.cq_context = cq_context;
  c->cq.cqe = cqe;
  return &c->cq;
}

FV_EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  pthread_mutex_lock(&fv_lock);
  for (fv_qp_t *q = fv_qps; q; q = q->next)
    if (q->qp.send_cq == cq || q->qp.recv_cq == cq)
      return pthread_mutex_unlock(&fv_lock), EBUSY;
  pthread_mutex_unlock(&fv_lock);
  fv_cq_t *c = (fv_cq_t *)cq;
  free(c->ring);
  free(c);
  return 0;
}

/* Under fv_lock. */
static void fv_cq_push(struct ibv_cq *cq, const struct ibv_wc *wc) {
  fv_cq_t *c = (fv_cq_t *)cq;
  if (c->count == c->cap) {
    c->overflow = 1;
    return;
  }
  c->ring[(c->head + c->count) % c->cap] = *wc;
  c->count++;
}

static int fv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  fv_cq_t *c = (fv_cq_t *)cq;
  int got = 0;
  pthread_mutex_lock(&fv_lock);
  if (c->overflow) {
    pthread_mutex_unlock(&fv_lock);
    return -1;
  }
  while (got < n && c->count > 0) {
    wc[got++] = c->ring[c->head];
    c->head = (c->head + 1) % c->cap;
    c->count--;
  }
  pthread_mutex_unlock(&fv_lock);
  return got;
}

/* ---- QPs ---- */

static void *fv_thread(void *arg);

static void fv_send_wc(fv_qp_t *q, const fv_swr_t *w, enum ibv_wc_status st) {
  if (st == IBV_WC_SUCCESS && !w->signaled)
    return;
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = w->wr_id;
  wc.status = st;
  wc.opcode = w->op == OP_SEND || w->op == OP_SEND_IMM ? IBV_WC_SEND
                                                       : IBV_WC_RDMA_WRITE;
  wc.byte_len = st == IBV_WC_SUCCESS ? w->len : 0;
  wc.qp_num = q->qp.qp_num;
  fv_cq_push(q->qp.send_cq, &wc);
}

static void fv_recv_flush(fv_qp_t *q, const fv_rwr_t *r) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = r->wr_id;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = q->qp.qp_num;
  fv_cq_push(q->qp.recv_cq, &wc);
}

static void fv_close(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

/*
 * The QP goes to the error state: the oldest outstanding send WR completes
 * with `first` (unless 0), every other WR is flushed, and the connections
 * close so that the peer sees us gone. Under fv_lock.
 */
static void fv_qp_error(fv_qp_t *q, enum ibv_wc_status first) {
  if (q->qp.state == IBV_QPS_ERR)
    return;
  q->qp.state = IBV_QPS_ERR;
  for (uint64_t i = q->sq_head; i < q->sq_tail; i++) {
    fv_swr_t *w = &q->sq[i % q->sq_cap];
    fv_send_wc(q, w, i == q->sq_head && first ? first : IBV_WC_WR_FLUSH_ERR);
    free(w->inl);
    w->inl = NULL;
  }
  q->sq_head = q->sq_sent = q->sq_tail;
  if (q->have_rwr)
    fv_recv_flush(q, &q->cur_rwr), q->have_rwr = 0;
  for (uint64_t i = q->rq_head; i < q->rq_tail; i++)
    fv_recv_flush(q, &q->rq[i % q->rq_cap]);
  q->rq_head = q->rq_tail;
  q->in_state = 4;
  fv_close(&q->out_fd);
  fv_close(&q->in_fd);
  fv_close(&q->lfd);
}

FV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                       struct ibv_qp_init_attr *a) {
  if (!pd || !a || a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq ||
      a->srq || a->cap.max_send_wr == 0 || a->cap.max_send_wr > (1u << 15) ||
      a->cap.max_recv_wr > (1u << 15) || a->cap.max_send_sge > FV_MAX_SGE ||
      a->cap.max_recv_sge > FV_MAX_SGE || a->cap.max_inline_data > 256)
    return errno = EINVAL, NULL;
  fv_qp_t *q = calloc(1, sizeof(*q));
  if (!q)
    return errno = ENOMEM, NULL;
  q->sq_cap = (int)a->cap.max_send_wr;
  q->rq_cap = a->cap.max_recv_wr ? (int)a->cap.max_recv_wr : 1;
  q->sq = calloc((size_t)q->sq_cap, sizeof(*q->sq));
  q->rq = calloc((size_t)q->rq_cap, sizeof(*q->rq));
  q->out_fd = q->in_fd = -1;
  q->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof(sin);
  if (!q->sq || !q->rq || q->lfd < 0 ||
      bind(q->lfd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
      listen(q->lfd, 4) != 0 ||
      getsockname(q->lfd, (struct sockaddr *)&sin, &len) != 0) {
    int e = errno ? errno : ENOMEM;
    if (q->lfd >= 0)
      close(q->lfd);
    free(q->sq), free(q->rq), free(q);
    return errno = e, NULL;
  }
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.qp_num =
      ntohs(sin.sin_port); /* the QP number is the port it listens on */
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_lock(&fv_lock);
  if (!fv_thread_started) {
    pthread_t t;
    if (pipe2(fv_wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
        pthread_create(&t, NULL, fv_thread, NULL) != 0) {
      pthread_mutex_unlock(&fv_lock);
      close(q->lfd);
      free(q->sq), free(q->rq), free(q);
      return errno = EAGAIN, NULL;
    }
    pthread_detach(t);
    fv_thread_started = 1;
  }
  q->next = fv_qps;
  fv_qps = q;
  pthread_mutex_unlock(&fv_lock);
  return &q->qp;
}

FV_EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  fv_qp_t *q = (fv_qp_t *)qp;
  pthread_mutex_lock(&fv_lock);
  for (fv_qp_t **p = &fv_qps; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      fv_close(&q->out_fd);
      fv_close(&q->in_fd);
      fv_close(&q->lfd);
      for (int i = 0; i < q->sq_cap; i++)
        free(q->sq[i].inl);
      pthread_mutex_unlock(&fv_lock);
      fv_wakeup();
      free(q->devb), free(q->txb);
      free(q->sq), free(q->rq), free(q);
      return 0;
    }
  pthread_mutex_unlock(&fv_lock);
  return EINVAL;
}

FV_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a,
                            int mask) {
  fv_qp_t *q = (fv_qp_t *)qp;
  int rc = 0;
  pthread_mutex_lock(&fv_lock);
  enum ibv_qp_state cur = q->qp.state,
                    to = (mask & IBV_QP_STATE) ? a->qp_state : cur;
  if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
    rc = EINVAL;
  } else if (to == IBV_QPS_ERR) {
    fv_qp_error(q, 0);
  } else if (to == IBV_QPS_RESET) {
    rc = cur == IBV_QPS_RESET
             ? 0
             : EINVAL; /* a reused QP is not needed by the plug-in */
  } else if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    int need =
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    if ((mask & need) != need || a->port_num != 1 || a->pkey_index != 0)
      rc = EINVAL;
    else
      q->port = a->port_num, q->qp.state = IBV_QPS_INIT;
  } else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    int need = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    const union ibv_gid *g = &a->ah_attr.grh.dgid;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if ((mask & need) != need || !a->ah_attr.is_global ||
        a->ah_attr.port_num != q->port ||
        a->ah_attr.grh.sgid_index >= fv_ngids ||
        fv_gid_type[a->ah_attr.grh.sgid_index] != IBV_GID_TYPE_ROCE_V2 ||
        memcmp(g->raw, v4, 12) != 0 || a->dest_qp_num == 0 ||
        a->dest_qp_num > 0xffff || a->path_mtu < IBV_MTU_256 ||
        a->path_mtu > IBV_MTU_4096 || fv_port_is_down()) {
      rc = EINVAL;
    } else {
      memset(&q->dest, 0, sizeof(q->dest));
      q->dest.sin_family = AF_INET;
      memcpy(&q->dest.sin_addr, &g->raw[12], 4);
      q->dest.sin_port = htons((uint16_t)a->dest_qp_num);
      q->dest_qpn = a->dest_qp_num;
      q->rq_psn = a->rq_psn;
      q->sgid_index = a->ah_attr.grh.sgid_index;
      q->qp.state = IBV_QPS_RTR;
    }
  } else if (cur == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    int need = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
               IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    if ((mask & need) != need) {
      rc = EINVAL;
    } else {
      q->sq_psn = a->sq_psn;
      q->out_fd =
          socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (q->out_fd < 0) {
        rc = errno;
      } else {
        int one = 1;
        setsockopt(q->out_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(q->out_fd, (struct sockaddr *)&q->dest, sizeof(q->dest)) !=
                0 &&
            errno != EINPROGRESS)
          q->out_dead =
              1; /* as a peer that never answers: the first WR fails */
        q->out_connecting = 1;
        q->qp.state = IBV_QPS_RTS;
      }
    }
  } else if (to == cur && cur != IBV_QPS_RESET) {
    rc = 0; /* attribute changes in place: accepted, ignored */
  } else {
    rc = EINVAL;
  }
  pthread_mutex_unlock(&fv_lock);
  fv_wakeup();
  return rc;
}

FV_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
                           struct ibv_qp_init_attr *init) {
  (void)mask;
  fv_qp_t *q = (fv_qp_t *)qp;
  memset(a, 0, sizeof(*a));
  pthread_mutex_lock(&fv_lock);
  a->qp_state = a->cur_qp_state = q->qp.state;
  a->dest_qp_num = q->dest_qpn;
  a->port_num = (uint8_t)q->port;
  pthread_mutex_unlock(&fv_lock);
  if (init)
    memset(init, 0, sizeof(*init));
  return 0;
}

/* Faults counted on every posted send WR; under fv_lock. Returns a status to
 * inject or 0. */
static int fv_count_send(fv_qp_t *q, int *qp_error) {
  long n = ++fv_send_count;
  long wc_at = 0, st = IBV_WC_REM_OP_ERR;
  const char *v = getenv("ZCC_FAKEVERBS_WC_ERROR");
  if (v && *v) {
    char *end;
    wc_at = strtol(v, &end, 0);
    if (*end == ':')
      st = strtol(end + 1, NULL, 0);
  }
  if (env_long("ZCC_FAKEVERBS_QP_ERROR", 0) == n)
    *qp_error = 1;
  long down = env_long("ZCC_FAKEVERBS_PORT_DOWN", -1);
  (void)q;
  if (down > 0 && n >= down)
    fv_port_went_down(); /* from here on nothing gets through */
  return wc_at == n ? (int)st : 0;
}

static int fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad) {
  fv_qp_t *q = (fv_qp_t *)qp;
  int rc = 0;
  pthread_mutex_lock(&fv_lock);
  for (; wr; wr = wr->next) {
    int qp_error = 0, inject = fv_count_send(q, &qp_error);
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) {
      rc = EINVAL;
      break;
    }
    if (q->sq_tail - q->sq_head >= (uint64_t)q->sq_cap) {
      rc = ENOMEM;
      break;
    }
    int op = wr->opcode == IBV_WR_RDMA_WRITE            ? OP_WRITE
             : wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? OP_WRITE_IMM
             : wr->opcode == IBV_WR_SEND                ? OP_SEND
             : wr->opcode == IBV_WR_SEND_WITH_IMM       ? OP_SEND_IMM
                                                        : 0;
    if (!op || wr->num_sge < 0 || wr->num_sge > FV_MAX_SGE) {
      rc = EINVAL;
      break;
    }
    fv_swr_t *w = &q->sq[q->sq_tail % q->sq_cap];
    free(w->inl);
    memset(w, 0, sizeof(*w));
    w->wr_id = wr->wr_id;
    w->op = op;
    w->signaled = !!(wr->send_flags & IBV_SEND_SIGNALED);
    w->imm = wr->imm_data;
    w->nsge = wr->num_sge;
    w->inject = inject;
    if (op == OP_WRITE || op == OP_WRITE_IMM)
      w->raddr = wr->wr.rdma.remote_addr, w->rkey = wr->wr.rdma.rkey;
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; i++)
      w->sge[i] = wr->sg_list[i], total += wr->sg_list[i].length;
    if (total > (1u << 31)) {
      rc = EINVAL;
      break;
    }
    w->len = (uint32_t)total;
    if (wr->send_flags & IBV_SEND_INLINE) {
      if (total > 256) {
        rc = EINVAL;
        break;
      }
      w->inl = malloc(total ? total : 1);
      for (int i = 0, off = 0; i < wr->num_sge;
           off += (int)wr->sg_list[i].length, i++)
        memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
    } else if (!w->inject) {
      /* the HCA checks the gather list: a bad lkey or bounds is a local
       * protection error */
      for (int i = 0; i < wr->num_sge; i++) {
        fv_mr_t *m = w->sge[i].length
                         ? fv_find_mr(q->qp.pd, w->sge[i].lkey, 0, w->sge[i].addr,
                                      w->sge[i].length, 0)
                         : NULL;
        if (w->sge[i].length && !m)
          w->inject = IBV_WC_LOC_PROT_ERR;
        else if (m && m->cuctx)
          w->sge_dev[i] = m;
      }
    }
    q->sq_tail++;
    if (q->qp.state == IBV_QPS_ERR) {
      fv_send_wc(q, w, IBV_WC_WR_FLUSH_ERR);
      q->sq_head = q->sq_sent = q->sq_tail;
    } else if (qp_error) {
      fv_qp_error(q, 0);
      fv_async_push((fv_ctx_t *)q->qp.context, IBV_EVENT_QP_FATAL, &q->qp, 0);
    }
  }
  if (rc && bad)
    *bad = wr;
  pthread_mutex_unlock(&fv_lock);
  fv_wakeup();
  return rc;
}

static int fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad) {
  fv_qp_t *q = (fv_qp_t *)qp;
  int rc = 0;
  pthread_mutex_lock(&fv_lock);
  for (; wr; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || wr->num_sge < 0 ||
        wr->num_sge > FV_MAX_SGE) {
      rc = EINVAL;
      break;
    }
    if (q->rq_tail - q->rq_head >= (uint64_t)q->rq_cap) {
      rc = ENOMEM;
      break;
    }
    fv_rwr_t *r = &q->rq[q->rq_tail++ % q->rq_cap];
    r->wr_id = wr->wr_id;
    r->nsge = wr->num_sge;
    for (int i = 0; i < wr->num_sge; i++)
      r->sge[i] = wr->sg_list[i];
    if (q->qp.state == IBV_QPS_ERR)
      fv_recv_flush(q, r), q->rq_head = q->rq_tail;
  }
  if (rc && bad)
    *bad = wr;
  pthread_mutex_unlock(&fv_lock);
  fv_wakeup();
  return rc;
}

/* ---- the wire: one progress thread per process ---- */

/* Non-blocking I/O: bytes moved, 0 for EAGAIN, -1 for a closed or failed
 * connection. */
static ssize_t fv_io(int fd, void *buf, size_t n, int out) {
  if (n == 0)
    return 0;
  ssize_t r = out ? send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                  : recv(fd, buf, n, MSG_DONTWAIT);
  if (r > 0)
    return r;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  return -1;
}

/* Requester: send the hello, then requests; read ACKs. */
static int fv_requester(fv_qp_t *q) {
  int moved = 0;
  if (q->qp.state != IBV_QPS_RTS)
    return 0;
  if (q->out_dead ||
      fv_port_down == 1) { /* no answer: the transport retries run out */
    if (q->out_dead)
      fv_close(&q->out_fd); /* a closed socket polls readable forever */
    if (q->sq_head < q->sq_tail)
      fv_qp_error(q, IBV_WC_RETRY_EXC_ERR);
    return 0;
  }
  if (q->out_connecting) {
    struct pollfd p = {q->out_fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0)
      return 0;
    int err = 0;
    socklen_t l = sizeof(err);
    getsockopt(q->out_fd, SOL_SOCKET, SO_ERROR, &err, &l);
    if (err) {
      q->out_dead = 1;
      return 1;
    }
    q->out_connecting = 0;
  }
  if (!q->hello_sent) {
    fv_hello_t h = {FV_MAGIC, q->qp.qp_num, q->dest_qpn, 0};
    ssize_t r =
        fv_io(q->out_fd, (char *)&h + q->tx_off, sizeof(h) - q->tx_off, 1);
    if (r < 0)
      return q->out_dead = 1;
    q->tx_off += (size_t)r;
    if (q->tx_off < sizeof(h))
      return r > 0;
    q->hello_sent = 1, q->tx_off = 0, moved = 1;
  }
  while (q->sq_sent < q->sq_tail && q->qp.state == IBV_QPS_RTS) {
    fv_swr_t *w = &q->sq[q->sq_sent % q->sq_cap];
    if (w->inject) { /* nothing goes out: the WR fails here */
      if (q->sq_sent == q->sq_head) {
        fv_qp_error(q, (enum ibv_wc_status)w->inject);
        return 1;
      }
      break; /* wait for the ACKs of the earlier ones, so that completions stay
                in order */
    }
    fv_hdr_t h = {FV_MAGIC, (uint32_t)w->op, w->len, w->imm, w->rkey,
                  0,        w->raddr};
    size_t total = sizeof(h) + w->len;
    while (q->tx_off < total) {
      ssize_t r;
      if (q->tx_off < sizeof(h)) {
        r = fv_io(q->out_fd, (char *)&h + q->tx_off, sizeof(h) - q->tx_off, 1);
      } else {
        size_t off = q->tx_off - sizeof(h), base = 0;
        char *src = NULL;
        size_t n = 0;
        if (w->inl) {
          src = w->inl + off, n = w->len - off;
        } else {
          fv_mr_t *dev = NULL;
          for (int i = 0; i < w->nsge; base += w->sge[i].length, i++)
            if (off < base + w->sge[i].length) {
              src = (char *)(uintptr_t)w->sge[i].addr + (off - base);
              n = w->sge[i].length - (off - base);
              dev = w->sge_dev[i];
              break;
            }
          if (dev) { /* device memory: the HCA reads it a piece at a time */
            if (q->txb_wr != q->sq_sent + 1 || off < q->txb_lo || off >= q->txb_hi) {
              size_t k = n < FV_DEVB ? n : FV_DEVB;
              if ((!q->txb && !(q->txb = malloc(FV_DEVB))) ||
                  fv_dev_copy(dev, q->txb, src, k) != 0) {
                fv_qp_error(q, IBV_WC_LOC_PROT_ERR);
                return 1;
              }
              q->txb_wr = q->sq_sent + 1, q->txb_lo = off, q->txb_hi = off + k;
            }
            src = q->txb + (off - q->txb_lo);
            n = q->txb_hi - off;
          }
        }
        r = fv_io(q->out_fd, src, n, 1);
      }
      if (r < 0) {
        q->out_dead = 1;
        return 1;
      }
      if (r == 0)
        goto acks;
      q->tx_off += (size_t)r;
      moved = 1;
    }
    q->tx_off = 0;
    q->sq_sent++;
  }
acks:
  while (q->qp.state == IBV_QPS_RTS && q->out_fd >= 0) {
    ssize_t r = fv_io(q->out_fd, q->ack_in + q->ack_in_off,
                      sizeof(fv_ack_t) - q->ack_in_off, 0);
    if (r < 0) {
      q->out_dead = 1;
      return 1;
    }
    if (r == 0)
      break;
    moved = 1;
    q->ack_in_off += (size_t)r;
    if (q->ack_in_off < sizeof(fv_ack_t))
      continue;
    q->ack_in_off = 0;
    fv_ack_t a;
    memcpy(&a, q->ack_in, sizeof(a));
    if (a.magic != FV_MAGIC || q->sq_head >= q->sq_sent) {
      fv_qp_error(q, IBV_WC_BAD_RESP_ERR);
      return 1;
    }
    fv_swr_t *w = &q->sq[q->sq_head % q->sq_cap];
    if (a.status != IBV_WC_SUCCESS) {
      fv_qp_error(q, (enum ibv_wc_status)a.status);
      return 1;
    }
    fv_send_wc(q, w, IBV_WC_SUCCESS);
    free(w->inl);
    w->inl = NULL;
    q->sq_head++;
  }
  return moved;
}

static void fv_ack(fv_qp_t *q, enum ibv_wc_status st) {
  if (q->ack_n < (int)(sizeof(q->acks) / sizeof(q->acks[0]))) {
    q->acks[q->ack_n].magic = FV_MAGIC;
    q->acks[q->ack_n++].status = st;
  }
}

/* Write the queued ACKs; wait up to wait_ms for room. 1: some bytes went. */
static int fv_flush_acks(fv_qp_t *q, int wait_ms) {
  struct pollfd p = {q->in_fd, POLLOUT, 0};
  int moved = 0;
  while (q->ack_n > 0) {
    ssize_t r = fv_io(q->in_fd, (char *)q->acks + q->ack_off,
                      sizeof(fv_ack_t) * (size_t)q->ack_n - q->ack_off, 1);
    if (r < 0 || (r == 0 && (!wait_ms || poll(&p, 1, wait_ms) <= 0)))
      break;
    moved |= r > 0;
    q->ack_off += (size_t)r;
    int whole = (int)(q->ack_off / sizeof(fv_ack_t));
    memmove(q->acks, q->acks + whole,
            sizeof(fv_ack_t) * (size_t)(q->ack_n - whole));
    q->ack_n -= whole;
    q->ack_off -= sizeof(fv_ack_t) * (size_t)whole;
  }
  return moved;
}

/* Responder error: NAK, then the QP goes to error (the NAK is sent first). */
static void fv_resp_error(fv_qp_t *q, enum ibv_wc_status nak,
                          int local_recv_status) {
  fv_ack_t a = {FV_MAGIC, nak};
  struct pollfd p = {q->in_fd, POLLOUT, 0};
  for (int i = 0; i < q->ack_n && poll(&p, 1, 100) > 0; i++)
    fv_io(q->in_fd, &q->acks[i], sizeof(a), 1);
  if (poll(&p, 1, 100) > 0)
    fv_io(q->in_fd, &a, sizeof(a), 1);
  q->ack_n = 0;
  if (local_recv_status && q->have_rwr) {
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = q->cur_rwr.wr_id;
    wc.status = (enum ibv_wc_status)local_recv_status;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = q->qp.qp_num;
    fv_cq_push(q->qp.recv_cq, &wc);
    q->have_rwr = 0;
  }
  fv_qp_error(q, 0);
}

static int fv_small_write(const fv_hdr_t *h) {
  return (h->op == OP_WRITE || h->op == OP_WRITE_IMM) && h->len &&
         h->len <= 256 && h->len % 8 == 0 && h->raddr % 8 == 0;
}

static int fv_take_rwr(fv_qp_t *q) {
  if (q->have_rwr)
    return 1;
  if (q->rq_head == q->rq_tail)
    return 0;
  q->cur_rwr = q->rq[q->rq_head++ % q->rq_cap];
  q->have_rwr = 1;
  return 1;
}

static long fv_recv_count;

static void fv_recv_done(fv_qp_t *q) {
  /* ZCC_FAKEVERBS_PORT_DOWN_RECV=N: the port goes down as the Nth receive
     completes (its completion is the last thing that gets through) */
  long down = env_long("ZCC_FAKEVERBS_PORT_DOWN_RECV", 0);
  if (down > 0 && ++fv_recv_count >= down)
    fv_port_went_down();
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = q->cur_rwr.wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode =
      q->hdr.op == OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  wc.byte_len = q->hdr.len;
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->dest_qpn;
  if (q->hdr.op == OP_WRITE_IMM || q->hdr.op == OP_SEND_IMM)
    wc.wc_flags = IBV_WC_WITH_IMM, wc.imm_data = q->hdr.imm;
  fv_cq_push(q->qp.recv_cq, &wc);
  q->have_rwr = 0;
}

/* Responder: accept the requester, parse requests, check them, land the data,
 * ACK. */
static int fv_responder(fv_qp_t *q) {
  int moved = 0;
  if (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS)
    return 0;
  if (fv_port_down == 1)
    return 0;
  if (q->in_fd < 0) {
    int fd = accept4(q->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return 0;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    q->in_fd = fd, q->in_state = 0, q->in_off = 0;
    moved = 1;
  }
  if (fv_flush_acks(q, 0)) /* ACKs first */
    moved = 1;
  while (q->ack_n < 60) {
    if (q->in_state == 0 || q->in_state == 1) {
      size_t need = q->in_state == 0 ? sizeof(fv_hello_t) : sizeof(fv_hdr_t);
      ssize_t r = fv_io(q->in_fd, q->in_buf + q->in_off, need - q->in_off, 0);
      if (r < 0) { /* the requester went away: a responder does not notice */
        fv_close(&q->in_fd);
        return 1;
      }
      if (r == 0)
        return moved;
      moved = 1;
      q->in_off += (size_t)r;
      if (q->in_off < need)
        continue;
      q->in_off = 0;
      if (q->in_state == 0) {
        fv_hello_t h;
        memcpy(&h, q->in_buf, sizeof(h));
        if (h.magic != FV_MAGIC || h.dst_qpn != q->qp.qp_num ||
            h.src_qpn != q->dest_qpn) {
          fv_close(&q->in_fd); /* a stranger, or a QP we are not connected to */
          return 1;
        }
        q->in_state = 1;
        continue;
      }
      memcpy(&q->hdr, q->in_buf, sizeof(q->hdr));
      fv_hdr_t *h = &q->hdr;
      if (h->magic != FV_MAGIC || h->op < OP_WRITE || h->op > OP_SEND_IMM) {
        fv_resp_error(q, IBV_WC_REM_INV_REQ_ERR, 0);
        return 1;
      }
      q->land_dev = NULL;
      if ((h->op == OP_WRITE || h->op == OP_WRITE_IMM) && h->len) {
        fv_mr_t *m = fv_find_mr(q->qp.pd, h->rkey, 1, h->raddr, h->len,
                                IBV_ACCESS_REMOTE_WRITE);
        if (!m) {
          fv_resp_error(q, IBV_WC_REM_ACCESS_ERR, 0);
          return 1;
        }
        if (m->cuctx)
          q->land_dev = m;
      }
      q->pay_done = 0;
      q->in_state = 2;
    }
    fv_hdr_t *h = &q->hdr;
    int is_send = h->op == OP_SEND || h->op == OP_SEND_IMM;
    if (q->in_state == 2 && is_send && !q->have_rwr) {
      if (!fv_take_rwr(q))
        return moved; /* receiver not ready: the requester waits (RNR, retried
                         forever) */
      uint64_t cap = 0;
      for (int i = 0; i < q->cur_rwr.nsge; i++) {
        struct ibv_sge *s = &q->cur_rwr.sge[i];
        fv_mr_t *m = s->length ? fv_find_mr(q->qp.pd, s->lkey, 0, s->addr, s->length,
                                            IBV_ACCESS_LOCAL_WRITE)
                               : NULL;
        if (s->length && !m) {
          fv_resp_error(q, IBV_WC_REM_OP_ERR, IBV_WC_LOC_PROT_ERR);
          return 1;
        }
        q->rwr_dev[i] = m && m->cuctx ? m : NULL;
        cap += s->length;
      }
      if (cap < h->len) {
        fv_resp_error(q, IBV_WC_REM_INV_REQ_ERR, IBV_WC_LOC_LEN_ERR);
        return 1;
      }
    }
    if (q->in_state == 2) {
      while (q->pay_done < h->len) {
        char *dst = NULL;
        size_t n = 0;
        fv_mr_t *dev = NULL;
        if (is_send) {
          size_t base = 0;
          for (int i = 0; i < q->cur_rwr.nsge;
               base += q->cur_rwr.sge[i].length, i++)
            if (q->pay_done < base + q->cur_rwr.sge[i].length) {
              dst = (char *)(uintptr_t)q->cur_rwr.sge[i].addr +
                    (q->pay_done - base);
              n = q->cur_rwr.sge[i].length - (q->pay_done - base);
              dev = q->rwr_dev[i];
              break;
            }
          if (n > h->len - q->pay_done)
            n = h->len - q->pay_done;
        } else if (fv_small_write(h) && !q->land_dev) {
          dst = q->bounce + q->pay_done; /* landed below, a word at a time */
          n = h->len - q->pay_done;
        } else {
          dst = (char *)(uintptr_t)h->raddr + q->pay_done;
          n = h->len - q->pay_done;
          dev = q->land_dev;
        }
        char *to = dst;
        if (dev) { /* device memory: through a bounce, then a copy */
          if (!q->devb && !(q->devb = malloc(FV_DEVB))) {
            fv_resp_error(q, IBV_WC_REM_OP_ERR, 0);
            return 1;
          }
          to = q->devb;
          if (n > FV_DEVB)
            n = FV_DEVB;
        }
        ssize_t r = fv_io(q->in_fd, to, n, 0);
        if (r < 0) {
          fv_close(&q->in_fd);
          return 1;
        }
        if (r == 0)
          return moved;
        if (dev && fv_dev_copy(dev, dst, q->devb, (size_t)r) != 0) {
          fv_resp_error(q, IBV_WC_REM_ACCESS_ERR, 0);
          return 1;
        }
        moved = 1;
        q->pay_done += (uint32_t)r;
      }
      if (!is_send && fv_small_write(h) && !q->land_dev) {
        /*
         * Small aligned writes (a clear-to-send FIFO entry, a flag) land as
         * atomic words in address order, the last with release, as an HCA's
         * in-order DMA does: a poller that reads the last word with acquire
         * sees the others, and race detectors see no data race.
         */
        uint64_t *to = (uint64_t *)(uintptr_t)h->raddr, w;
        for (uint32_t i = 0; i < h->len / 8; i++) {
          memcpy(&w, q->bounce + 8 * i, 8);
          __atomic_store_n(&to[i], w,
                           i + 1 == h->len / 8 ? __ATOMIC_RELEASE
                                               : __ATOMIC_RELAXED);
        }
      }
      q->in_state = 3;
    }
    if (q->in_state == 3) {
      if (h->op != OP_WRITE && !fv_take_rwr(q))
        return moved; /* write with immediate consumes a receive */
      /*
       * The receive completes, then the ACK leaves at once, both under
       * fv_lock: a receiver that sees its completion and destroys the QP
       * (which takes fv_lock) cannot leave the requester without the ACK (its
       * write would then fail with RETRY_EXC_ERR although it landed), and a
       * requester that sees the ACK and leaves finds the receiver's
       * completion already in its CQ.
       */
      if (h->op != OP_WRITE)
        fv_recv_done(q);
      fv_ack(q, IBV_WC_SUCCESS);
      fv_flush_acks(q, 100);
      q->in_state = 1;
    }
  }
  return moved;
}

static void *fv_thread(void *arg) {
  (void)arg;
  struct pollfd *pfd = NULL;
  int cap = 0;
  for (;;) {
    int n = 0, busy = 0;
    pthread_mutex_lock(&fv_lock);
    for (fv_qp_t *q = fv_qps; q; q = q->next) {
      busy |= fv_requester(q);
      busy |= fv_responder(q);
    }
    for (fv_qp_t *q = fv_qps; q; q = q->next)
      n += 3;
    if (n + 1 > cap) {
      cap = 2 * (n + 1);
      pfd = realloc(pfd, sizeof(*pfd) * (size_t)cap);
    }
    int k = 0;
    pfd[k++] = (struct pollfd){fv_wake[0], POLLIN, 0};
    for (fv_qp_t *q = fv_qps; q && fv_port_down != 1; q = q->next) {
      /* a responder that waits for a receive WR is woken by post_recv */
      int is_send = q->hdr.op == OP_SEND || q->hdr.op == OP_SEND_IMM;
      int wait_rwr =
          (q->in_state == 3 || (q->in_state == 2 && is_send && !q->have_rwr)) &&
          q->rq_head == q->rq_tail;
      if (q->in_fd < 0 && q->lfd >= 0)
        pfd[k++] = (struct pollfd){q->lfd, POLLIN, 0};
      if (q->in_fd >= 0)
        pfd[k++] = (struct pollfd){
            q->in_fd,
            (short)((wait_rwr ? 0 : POLLIN) | (q->ack_n ? POLLOUT : 0)), 0};
      if (q->out_fd >= 0)
        pfd[k++] = (struct pollfd){
            q->out_fd,
            (short)(POLLIN |
                    (q->out_connecting || q->sq_sent < q->sq_tail ? POLLOUT
                                                                  : 0)),
            0};
    }
    pthread_mutex_unlock(&fv_lock);
    if (busy)
      continue;
    /* a short cap: a responder waiting for a receive WR is woken by post_recv,
     * the rest by fds */
    poll(pfd, (nfds_t)k, 50);
    char drain[64];
    while (read(fv_wake[0], drain, sizeof(drain)) > 0) {
    }
  }
  return NULL;
}
