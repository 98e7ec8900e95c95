/*
 * The flight recorder and the Chrome trace (trace.h). Records live in a
 * ring per communicator; the trace file gets one complete ("X") event per
 * operation as it ends, and user markers (zccTraceMark) as begin/end
 * events. Files named by ZCC_TRACE_FILE are shared by the communicators
 * of a process that expand to the same path, and closed (the JSON
 * finished) when the last of them is destroyed or the process exits.
 */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "debug.h"
#include "devops.h"
#include "group.h"
#include "param.h"
#include "reduce.h"
#include "transport.h"
#include "wait.h"

ZCC_PARAM_STR(trace_file, "TRACE_FILE", NULL,
              "write a Chrome trace (Perfetto, chrome://tracing) of every "
              "operation to this file; %h host, %p pid, %r rank (default: off)")
ZCC_PARAM_INT(fr_entries, "FLIGHT_RECORDER_ENTRIES", 2000,
              "operations each communicator keeps in its flight recorder "
              "(0: none)")
ZCC_PARAM_STR(fr_file, "FLIGHT_RECORDER_FILE", NULL,
              "dump the flight recorder as JSON to this file on timeout, error "
              "or abort (and SIGUSR1, zccCommDump); %h host, %p pid, %r rank "
              "(default: a WARN summary of the last operations instead)")
ZCC_PARAM_INT(fr_signal, "FLIGHT_RECORDER_SIGNAL", 0,
              "1: SIGUSR1 dumps every communicator's flight recorder to "
              "ZCC_FLIGHT_RECORDER_FILE")

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* ---- clocks, names, paths ---- */

static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC */
static char host_name[64];

static void clock_init(void) {
  struct timespec rt;
  int64_t m0 = zcc_now_ns();
  clock_gettime(CLOCK_REALTIME, &rt);
  int64_t m1 = zcc_now_ns();
  realtime_offset_ns =
      (int64_t)rt.tv_sec * 1000000000LL + rt.tv_nsec - (m0 + m1) / 2;
  gethostname(host_name, sizeof(host_name) - 1);
  char *dot = strchr(host_name, '.');
  if (dot)
    *dot = '\0';
}

/* Monotonic ns to wall-clock microseconds (comparable across hosts). */
static double wall_us(int64_t mono_ns) {
  return mono_ns ? (double)(mono_ns + realtime_offset_ns) / 1000.0 : 0.0;
}

/* Monotonic ns to wall-clock ns (0 stays 0: not yet). */
static int64_t wall_ns(int64_t mono_ns) {
  return mono_ns ? mono_ns + realtime_offset_ns : 0;
}

const char *zcc_op_state_name(int state) {
  static const char *names[] = {"empty", "enqueued", "started", "done",
                                "failed"};
  return state >= 0 && state <= ZCC_OP_FAILED ? names[state] : "invalid";
}

static void transports_text(uint32_t mask, char *out, size_t cap) {
  static const char *names[] = {"shm", "socket", "other"};
  size_t o = 0;
  out[0] = '\0';
  for (int i = 0; i < 3; i++)
    if (mask & (1u << i)) {
      int n = snprintf(out + o, cap - o, "%s%s", o ? "," : "", names[i]);
      if (n > 0 && (size_t)n < cap - o)
        o += (size_t)n;
    }
}

/* %h host, %p pid, %r rank (-1: "x"). */
static void expand_path(const char *in, int rank, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = in; *p && o + 1 < cap; p++) {
    int n = -1;
    if (p[0] == '%' && p[1] == 'h')
      n = snprintf(out + o, cap - o, "%s", host_name);
    else if (p[0] == '%' && p[1] == 'p')
      n = snprintf(out + o, cap - o, "%d", (int)getpid());
    else if (p[0] == '%' && p[1] == 'r')
      n = rank >= 0 ? snprintf(out + o, cap - o, "%d", rank)
                    : snprintf(out + o, cap - o, "x");
    if (n >= 0) {
      o += (size_t)n;
      if (o >= cap)
        o = cap - 1;
      p++;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

/* s as a JSON string body (quotes and control characters escaped). */
static void json_escape(const char *s, char *out, size_t cap) {
  size_t o = 0;
  for (; *s && o + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
}

/* ---- trace files ---- */

struct zcc_trace_file {
  struct zcc_trace_file *next;
  char path[4096];
  FILE *f;
  int refs;
  int nevents;
  int pid; /* of the process that opened it */
  char *buf;
};

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static zcc_trace_file_t *files;
static int files_atexit, warned_unwritable;

static void file_write_trailer(zcc_trace_file_t *tf) {
  fprintf(tf->f, "\n]}\n");
  fclose(tf->f);
  tf->f = NULL;
  free(tf->buf);
}

static void files_at_exit(void) {
  pthread_mutex_lock(&files_lock);
  for (zcc_trace_file_t *tf = files; tf; tf = tf->next)
    if (tf->f)
      file_write_trailer(tf);
  pthread_mutex_unlock(&files_lock);
}

/*
 * A child forked while trace files are open must not write into them: its
 * copy of a stream's buffer would be flushed at its exit, with a trailer,
 * into the parent's file. It drops its copies unwritten.
 */
static void files_before_fork(void) {
  pthread_mutex_lock(&files_lock);
}
static void files_after_fork_parent(void) {
  pthread_mutex_unlock(&files_lock);
}
static void files_after_fork_child(void) {
  for (zcc_trace_file_t *tf = files; tf; tf = tf->next)
    if (tf->f) {
      __fpurge(tf->f);
      fclose(tf->f);
      tf->f = NULL;
    }
  pthread_mutex_unlock(&files_lock);
}

/* Caller holds files_lock. The separator before each event but the first. */
static void file_sep(zcc_trace_file_t *tf) {
  fputs(tf->nevents++ ? ",\n" : "\n", tf->f);
}

static zcc_trace_file_t *file_open(const char *path) {
  pthread_mutex_lock(&files_lock);
  zcc_trace_file_t *tf = files;
  while (tf && (strcmp(tf->path, path) != 0 || !tf->f))
    tf = tf->next;
  if (tf) {
    tf->refs++;
    pthread_mutex_unlock(&files_lock);
    return tf;
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    if (!warned_unwritable) {
      warned_unwritable = 1;
      ZCC_WARN("ZCC_TRACE_FILE: cannot open %s: %s; tracing is off", path,
               strerror(e));
    }
    pthread_mutex_unlock(&files_lock);
    return NULL;
  }
  tf = calloc(1, sizeof(*tf));
  if (!tf) {
    fclose(f);
    pthread_mutex_unlock(&files_lock);
    return NULL;
  }
  snprintf(tf->path, sizeof(tf->path), "%s", path);
  tf->f = f;
  tf->refs = 1;
  tf->pid = (int)getpid();
  tf->buf = malloc(1 << 20);
  if (tf->buf)
    setvbuf(f, tf->buf, _IOFBF, 1 << 20);
  fprintf(f,
          "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"zcc_trace\":1,\"host\":"
          "\"%s\","
          "\"pid\":%d,\"clock\":\"realtime_us\"},\"traceEvents\":[",
          host_name, (int)getpid());
  tf->next = files;
  files = tf;
  if (!files_atexit) {
    files_atexit = 1;
    atexit(files_at_exit);
    pthread_atfork(files_before_fork, files_after_fork_parent,
                   files_after_fork_child);
  }
  pthread_mutex_unlock(&files_lock);
  return tf;
}

static void file_close(zcc_trace_file_t *tf) {
  pthread_mutex_lock(&files_lock);
  if (--tf->refs == 0 && tf->f) {
    file_write_trailer(tf);
    zcc_trace_file_t **pp = &files;
    while (*pp && *pp != tf)
      pp = &(*pp)->next;
    if (*pp)
      *pp = tf->next;
    free(tf);
  }
  pthread_mutex_unlock(&files_lock);
}

/* ---- SIGUSR1 ---- */

static sem_t signal_sem;
static pthread_once_t signal_once = PTHREAD_ONCE_INIT;

static void on_sigusr1(int sig) {
  (void)sig;
  sem_post(&signal_sem); /* async-signal-safe; the dump runs in signal_thread */
}

static void dump_one(struct zccComm *comm, void *arg) {
  (void)arg;
  zcc_trace_dump(comm, NULL, "SIGUSR1");
}

static void *signal_thread(void *arg) {
  (void)arg;
  for (;;) {
    while (sem_wait(&signal_sem) != 0 && errno == EINTR) {
    }
    zcc_comm_foreach(dump_one, NULL);
  }
  return NULL;
}

static void signal_init(void) {
  if (sem_init(&signal_sem, 0, 0) != 0)
    return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all,
                  &old); /* the thread takes no signals itself */
  pthread_t t;
  int rc = pthread_create(&t, NULL, signal_thread, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ZCC_WARN("ZCC_FLIGHT_RECORDER_SIGNAL: cannot start the dump thread: %s",
             strerror(rc));
    return;
  }
  pthread_detach(t);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigusr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  ZCC_INFO(INIT, "SIGUSR1 dumps the flight recorder to %s",
           zcc_param_fr_file() ? zcc_param_fr_file()
                               : "(ZCC_FLIGHT_RECORDER_FILE unset)");
}

/* ---- communicator life ---- */

static void make_prefix(struct zccComm *comm, zcc_trace_t *t);

static void trace_metadata(struct zccComm *comm, zcc_trace_file_t *tf) {
  char name[160];
  json_escape(comm->name, name, sizeof(name));
  pthread_mutex_lock(&files_lock);
  file_sep(tf);
  fprintf(tf->f,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"name\":\"%s:%d\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"name\":\"comm %s rank "
          "%d/%d\",\"comm\":\"%s\",\"hash\":\"0x%016" PRIx64
          "\",\"rank\":%d,\"nranks\":%d,\"device\":%d}}",
          (int)getpid(), comm->rank, host_name, (int)getpid(), (int)getpid(),
          comm->rank, name, comm->rank, comm->nranks, name, comm->hash,
          comm->rank, comm->nranks, comm->device);
  pthread_mutex_unlock(&files_lock);
}

void zcc_trace_comm_init(struct zccComm *comm) {
  pthread_once(&clock_once, clock_init);
  int64_t entries = zcc_param_fr_entries();
  const char *tpath = zcc_param_trace_file();
  if (entries < 0)
    entries = 0;
  if (entries > (1 << 24))
    entries = 1 << 24;
  if (entries == 0 && !(tpath && *tpath))
    return;
  if (zcc_param_fr_signal() == 1)
    pthread_once(&signal_once, signal_init);
  zcc_trace_t *t = calloc(1, sizeof(*t));
  if (!t)
    return;
  if (entries) {
    t->ring = calloc((size_t)entries, sizeof(zcc_op_rec_t));
    if (t->ring)
      t->cap = (uint32_t)entries;
  }
  if (tpath && *tpath) {
    char path[4096];
    expand_path(tpath, comm->rank, path, sizeof(path));
    t->peer_wait = calloc((size_t)comm->nranks, sizeof(int64_t));
    if (t->peer_wait)
      t->file = file_open(path);
    if (t->file) {
      make_prefix(comm, t);
      trace_metadata(comm, t->file);
    }
  }
  comm->trace = t;
}

void zcc_trace_comm_free(struct zccComm *comm) {
  zcc_trace_t *t = comm->trace;
  if (!t)
    return;
  comm->trace = NULL;
  if (t->file)
    file_close(t->file);
  free(t->peer_wait);
  free(t->ring);
  free(t);
}

/* ---- records ---- */

static zcc_op_rec_t *slot(zcc_trace_t *t, uint64_t id) {
  return t->ring ? &t->ring[(id - 1) % t->cap] : &t->one;
}

zcc_op_rec_t *zcc_trace_rec(struct zccComm *comm, uint64_t id) {
  zcc_trace_t *t = comm->trace;
  if (!t || !id)
    return NULL;
  /* Nearly every lookup is of the newest record: no division for it. */
  zcc_op_rec_t *r = LD(t->last);
  if (!r || LD(r->id) != id)
    r = slot(t, id);
  return LD(r->id) == id ? r : NULL;
}

uint64_t zcc_trace_enqueue(struct zccComm *comm, int coll, size_t count,
                           size_t bytes, int type, int op, int root, int algo) {
  zcc_trace_t *t = comm->trace;
  if (!t)
    return 0;
  /* Only the issuing thread writes (one thread at a time per communicator);
     dumps in other threads read it. Its ring index runs beside the id (no
     division), and t->next moves once the record is whole. */
  uint64_t id = LD(t->next) + 1;
  zcc_op_rec_t *r = &t->one;
  if (t->ring) {
    r = &t->ring[t->wpos];
    if (++t->wpos == t->cap)
      t->wpos = 0;
  }
  /* Readers skip a record whose id is 0 or changes while they read it. */
  __atomic_store_n(&r->id, 0, __ATOMIC_RELEASE);
  ST(r->seq, coll == ZCC_COLL_SENDRECV ? ++t->p2p_seq : ++t->coll_seq);
  ST(r->coll, coll);
  ST(r->algo, algo);
  ST(r->type, type);
  ST(r->op, op);
  ST(r->root, root);
  ST(r->state, ZCC_OP_ENQUEUED);
  ST(r->result, zccSuccess);
  ST(r->wait_peer, -1);
  ST(r->transports, 0u);
  ST(r->gpu, comm->device >= 0);
  ST(r->count, (uint64_t)count);
  ST(r->bytes, (uint64_t)bytes);
  /* Host calls outside groups start at once: zcc_trace_start fills it. */
  ST(r->t_enqueue_ns,
     comm->device >= 0 || zcc_group_active() ? zcc_now_ns() : 0);
  ST(r->t_start_ns, 0);
  ST(r->t_end_ns, 0);
  ST(r->gpu_start_ns, 0);
  ST(r->gpu_end_ns, 0);
  ST(r->wait_ns, 0);
  ST(r->wait_peer_ns, 0);
  ST(r->gpu_id, id);
  ST(r->pred_ns, 0);
  __atomic_store_n(&r->id, id, __ATOMIC_RELEASE);
  ST(t->last, r);
  __atomic_store_n(&t->next, id, __ATOMIC_RELEASE);
  return id;
}

void zcc_trace_predicted(struct zccComm *comm, uint64_t id, double us) {
  zcc_op_rec_t *r = zcc_trace_rec(comm, id);
  if (r)
    ST(r->pred_ns, (int64_t)(us * 1000.0));
}

void zcc_trace_gpu_share(struct zccComm *comm, uint64_t id, uint64_t with) {
  zcc_op_rec_t *r = zcc_trace_rec(comm, id);
  if (r)
    ST(r->gpu_id, with);
}

/* The plan's record, its slot kept in the plan (no division per lookup). */
static zcc_op_rec_t *plan_rec(zcc_plan_t *p) {
  zcc_op_rec_t *r = p->trace_rec;
  if (!r)
    return p->trace_rec = zcc_trace_rec(p->comm, p->trace_id);
  return LD(r->id) == p->trace_id ? r : NULL;
}

void zcc_trace_start(zcc_plan_t *p, int64_t now) {
  zcc_op_rec_t *r = plan_rec(p);
  if (!r)
    return;
  uint32_t mask = 0;
  int peer = -2;
  uint64_t bytes = 0;
  for (int i = 0; i < p->nxfers; i++) {
    const zcc_conn_t *c = p->xfers[i].conn;
    if (c)
      mask |= c->ops == &zcc_transport_shm      ? ZCC_TRACE_TP_SHM
              : c->ops == &zcc_transport_socket ? ZCC_TRACE_TP_SOCKET
                                                : ZCC_TRACE_TP_OTHER;
    if (p->coll == ZCC_COLL_SENDRECV) {
      int q = c ? c->peer : p->comm->rank;
      peer = peer == -2 || peer == q ? q : -1;
      bytes += p->xfers[i].bytes;
    }
  }
  if (p->coll == ZCC_COLL_SENDRECV) {
    /* A group's sends and receives on this comm are one record: their peer
       (-1: several) and their bytes, both directions. */
    ST(r->root, peer == -2 ? -1 : peer);
    if (p->nxfers > 1) {
      ST(r->bytes, bytes);
      ST(r->count, bytes);
      ST(r->type, (int32_t)zccUint8);
    }
  }
  ST(r->transports, mask);
  ST(r->algo, (int32_t)p->algo);
  ST(r->pred_ns, (int64_t)(p->pred_us * 1000.0));
  if (!now)
    now = zcc_now_ns();
  if (!LD(r->t_enqueue_ns))
    ST(r->t_enqueue_ns, now);
  ST(r->t_start_ns, now);
  ST(r->state, ZCC_OP_STARTED);
  zcc_trace_t *t = p->comm->trace;
  if (t->file)
    memset(t->peer_wait, 0, (size_t)p->comm->nranks * sizeof(int64_t));
}

void zcc_trace_waiting_on(zcc_plan_t *p, int peer) {
  zcc_op_rec_t *r = plan_rec(p);
  if (r)
    ST(r->wait_peer, peer);
}

void zcc_trace_wait(zcc_plan_t *p, int peer, int64_t ns) {
  zcc_op_rec_t *r = plan_rec(p);
  if (!r)
    return;
  zcc_trace_t *t = p->comm->trace;
  ST(r->wait_ns, LD(r->wait_ns) + ns);
  if (peer < 0 || peer >= p->comm->nranks)
    return;
  int64_t on_peer = ns;
  if (t->file)
    on_peer = t->peer_wait[peer] += ns;
  else if (LD(r->wait_peer) == peer)
    on_peer = LD(r->wait_peer_ns) + ns;
  if (on_peer >= LD(r->wait_peer_ns)) {
    ST(r->wait_peer_ns, on_peer);
    ST(r->wait_peer, peer);
  }
}

/*
 * Events are formatted by hand into a stack buffer: with fprintf the ~25
 * conversions of an event cost several microseconds, over the budget of
 * one per operation.
 */
static char *put_s(char *p, const char *s) {
  size_t n = strlen(s);
  memcpy(p, s, n);
  return p + n;
}
/* A string literal: its length is known at compile time. */
#define PUT_LIT(p, lit)                                                        \
  (memcpy((p), (lit), sizeof(lit) - 1), (p) + sizeof(lit) - 1)

static const char digits2[] = "000102030405060708091011121314151617181920212223"
                              "24252627282930313233343536373839"
                              "404142434445464748495051525354555657585960616263"
                              "64656667686970717273747576777879"
                              "8081828384858687888990919293949596979899";

static char *put_u(char *p, uint64_t v) {
  char tmp[24];
  int i = 24;
  while (v >= 100) {
    unsigned d = (unsigned)(v % 100);
    v /= 100;
    tmp[--i] = digits2[2 * d + 1];
    tmp[--i] = digits2[2 * d];
  }
  if (v >= 10) {
    tmp[--i] = digits2[2 * v + 1];
    tmp[--i] = digits2[2 * v];
  } else {
    tmp[--i] = (char)('0' + v);
  }
  memcpy(p, tmp + i, (size_t)(24 - i));
  return p + (24 - i);
}

static char *put_i(char *p, int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return put_u(p, (uint64_t)(-(v + 1)) + 1);
  }
  return put_u(p, (uint64_t)v);
}

/* ns as microseconds with 3 decimals. */
static char *put_us(char *p, int64_t ns) {
  if (ns < 0) {
    *p++ = '-';
    ns = ns == INT64_MIN ? INT64_MAX : -ns;
  }
  p = put_u(p, (uint64_t)ns / 1000);
  unsigned f = (unsigned)((uint64_t)ns % 1000);
  p[0] = '.';
  p[1] = (char)('0' + f / 100);
  p[2] = digits2[2 * (f % 100)];
  p[3] = digits2[2 * (f % 100) + 1];
  return p + 4;
}

/* The part of every event's args that is the same for the communicator. */
static void make_prefix(struct zccComm *comm, zcc_trace_t *t) {
  char name[160];
  json_escape(comm->name, name, sizeof(name));
  snprintf(t->prefix, sizeof(t->prefix),
           "\"comm\":\"%s\",\"hash\":\"0x%016" PRIx64
           "\",\"rank\":%d,\"nranks\":%d,",
           name, comm->hash, comm->rank, comm->nranks);
}

#define EVENT_MAX 8192

/* The thread id of a communicator's GPU spans in the trace (its host
   events use the rank; markers 100000 + rank). */
#define TRACE_GPU_TID 200000

/* One complete event for a finished record; gpu_span: the GPU's span of a
   GPU op (its stamps), else the host's. */
static void trace_event_as(struct zccComm *comm, const zcc_op_rec_t *r, int gpu_span) {
  zcc_trace_t *t = comm->trace;
  char ev[EVENT_MAX], tps[32];
  transports_text(r->transports, tps, sizeof(tps));
  int64_t start = r->t_start_ns ? r->t_start_ns : r->t_enqueue_ns;
  int64_t end = r->t_end_ns ? r->t_end_ns : start;
  if (gpu_span) {
    start = r->gpu_start_ns;
    end = r->gpu_end_ns;
  }
  int p2p = r->coll == ZCC_COLL_SENDRECV;
  const char *coll = zcc_coll_name((zcc_coll_t)r->coll);
  char *p = ev;
  p = PUT_LIT(p, "{\"name\":\"");
  p = put_s(p, coll);
  p = put_s(p, gpu_span ? "\",\"cat\":\"zcc_gpu\",\"ph\":\"X\",\"pid\":"
                        : "\",\"cat\":\"zcc\",\"ph\":\"X\",\"pid\":");
  p = put_i(p, t->file->pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_i(p, gpu_span ? TRACE_GPU_TID + comm->rank : comm->rank);
  p = PUT_LIT(p, ",\"ts\":");
  p = put_us(p, wall_ns(start));
  p = PUT_LIT(p, ",\"dur\":");
  p = put_us(p, end - start);
  p = PUT_LIT(p, ",\"args\":{");
  p = put_s(p, t->prefix);
  p = PUT_LIT(p, "\"seq\":");
  p = put_u(p, r->seq);
  p = put_s(p, p2p ? ",\"p2p\":1,\"coll\":\"" : ",\"p2p\":0,\"coll\":\"");
  p = put_s(p, coll);
  p = PUT_LIT(p, "\",\"bytes\":");
  p = put_u(p, r->bytes);
  p = PUT_LIT(p, ",\"count\":");
  p = put_u(p, r->count);
  p = PUT_LIT(p, ",\"dtype\":\"");
  p = put_s(p, zcc_type_name((zccDataType_t)r->type));
  p = PUT_LIT(p, "\",\"op\":\"");
  p = put_s(p, zcc_op_name((zccRedOp_t)r->op));
  p = put_s(p, p2p ? "\",\"peer\":" : "\",\"root\":");
  p = put_i(p, r->root);
  p = PUT_LIT(p, ",\"algo\":\"");
  p = put_s(p, r->algo >= 0 ? zcc_algo_name((zcc_algo_t)r->algo) : "gpu");
  p = PUT_LIT(p, "\",\"transports\":\"");
  p = put_s(p, tps);
  p = PUT_LIT(p, "\",\"state\":\"");
  p = put_s(p, zcc_op_state_name(r->state));
  p = PUT_LIT(p, "\",\"result\":");
  p = put_i(p, r->result);
  p = put_s(p, r->gpu ? ",\"gpu\":1,\"enqueue_us\":"
                      : ",\"gpu\":0,\"enqueue_us\":");
  p = put_us(p, wall_ns(r->t_enqueue_ns));
  if (r->gpu) {
    p = PUT_LIT(p, ",\"gpu_start_us\":");
    p = put_us(p, wall_ns(r->gpu_start_ns));
    p = PUT_LIT(p, ",\"gpu_end_us\":");
    p = put_us(p, wall_ns(r->gpu_end_ns));
  }
  p = PUT_LIT(p, ",\"pred_us\":");
  p = put_us(p, r->pred_ns);
  p = PUT_LIT(p, ",\"wait_us\":");
  p = put_us(p, r->wait_ns);
  p = PUT_LIT(p, ",\"wait_peer\":");
  p = put_i(p, r->wait_peer);
  p = PUT_LIT(p, ",\"peer_wait_us\":{");
  int first = 1;
  if (!r->gpu)
    for (int q = 0; q < comm->nranks && p - ev < EVENT_MAX - 128; q++)
      if (t->peer_wait[q]) {
        if (!first)
          *p++ = ',';
        first = 0;
        *p++ = '"';
        p = put_i(p, q);
        p = PUT_LIT(p, "\":");
        p = put_us(p, t->peer_wait[q]);
      }
  p = PUT_LIT(p, "}}}");
  pthread_mutex_lock(&files_lock);
  if (t->file->f) {
    file_sep(t->file);
    fwrite(ev, 1, (size_t)(p - ev), t->file->f);
  }
  pthread_mutex_unlock(&files_lock);
}

static void trace_event(struct zccComm *comm, const zcc_op_rec_t *r) {
  trace_event_as(comm, r, 0);
}

/* GPU: a record's times and state from the stamps of the launch that ran
   it (zcc_gpu_op_times' codes: 2 done, 4 done with no end time, 3 cut
   short, 1 started, 0 not yet, -1 none will come). */
static int gpu_times(struct zccComm *comm, uint64_t id, uint64_t gpu_id, int64_t *s,
                     int64_t *e) {
  if (!comm->dev || !comm->dev->op_times)
    return -1;
  return comm->dev->op_times(comm, gpu_id ? gpu_id : id, s, e);
}

static int gpu_state(int st) {
  return st == 2 || st == 4 ? ZCC_OP_DONE : st == 3 ? ZCC_OP_FAILED : ZCC_OP_STARTED;
}

/* GPU: the spans of the ops from t->gpu_next up to (not including) `upto`
   whose stamps say they are done, in order; an op still running stops the
   walk (its successors come later), one that will never have times is
   passed. The issuing thread only (it writes the records). */
static void gpu_spans(struct zccComm *comm, uint64_t upto) {
  zcc_trace_t *t = comm->trace;
  if (t->gpu_next == 0 || (t->ring && upto > t->cap && t->gpu_next < upto - t->cap))
    t->gpu_next = upto > t->cap && t->ring ? upto - t->cap : 1;
  for (; t->gpu_next < upto; t->gpu_next++) {
    zcc_op_rec_t *r = zcc_trace_rec(comm, t->gpu_next);
    if (!r)
      continue;
    int64_t s, e;
    int st = gpu_times(comm, t->gpu_next, LD(r->gpu_id), &s, &e);
    if (st < 0)
      continue;
    if (st < 2)
      break;
    ST(r->gpu_start_ns, s);
    ST(r->gpu_end_ns, e);
    if (st == 3)
      ST(r->result, (int32_t)atomic_load(&comm->async_error));
    ST(r->state, gpu_state(st));
    trace_event_as(comm, r, 1);
  }
}

void zcc_trace_gpu_flush(struct zccComm *comm) {
  zcc_trace_t *t = comm->trace;
  if (t && t->file)
    gpu_spans(comm, __atomic_load_n(&t->next, __ATOMIC_RELAXED) + 1);
}

static void finish(struct zccComm *comm, zcc_op_rec_t *r, zccResult_t res,
                   int64_t now) {
  ST(r->t_end_ns, now ? now : zcc_now_ns());
  ST(r->result, (int32_t)res);
  ST(r->state, res == zccSuccess ? ZCC_OP_DONE : ZCC_OP_FAILED);
  if (comm->trace->file)
    trace_event(comm, r);
}

void zcc_trace_end(zcc_plan_t *p, zccResult_t res, int64_t now_ns) {
  zcc_op_rec_t *r = plan_rec(p);
  if (r && LD(r->state) < ZCC_OP_DONE)
    finish(p->comm, r, res, now_ns);
}

void zcc_trace_finish_id(struct zccComm *comm, uint64_t id, zccResult_t res) {
  zcc_op_rec_t *r = zcc_trace_rec(comm, id);
  if (!r)
    return;
  if (res != zccSuccess) {
    finish(comm, r, res, 0);
  } else if (comm->trace->file) {
    trace_event(comm, r); /* GPU: enqueued; the device's span comes later */
    gpu_spans(comm, id);
  }
}

/* ---- dumps ---- */

/* A consistent copy of the record with this id; 0 if it is gone or being
 * written. */
static int snapshot_rec(zcc_trace_t *t, uint64_t id, zcc_op_rec_t *out);

/* snapshot_rec, with a GPU op's times and state from its stamps. */
static int snapshot(struct zccComm *comm, uint64_t id, zcc_op_rec_t *out) {
  if (!snapshot_rec(comm->trace, id, out))
    return 0;
  if (out->gpu && out->state == ZCC_OP_ENQUEUED) {
    int64_t s, e;
    int st = gpu_times(comm, id, out->gpu_id, &s, &e);
    if (st >= 1) {
      out->gpu_start_ns = s;
      out->gpu_end_ns = e;
      out->state = gpu_state(st);
      if (st == 3)
        out->result = atomic_load(&comm->async_error);
    } else if (st < 0 && out->count == 0) {
      out->state = ZCC_OP_DONE; /* nothing to run on the GPU */
    }
  }
  return 1;
}

static int snapshot_rec(zcc_trace_t *t, uint64_t id, zcc_op_rec_t *out) {
  zcc_op_rec_t *r = slot(t, id);
  if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != id)
    return 0;
  out->id = id;
  out->seq = LD(r->seq);
  out->coll = LD(r->coll);
  out->algo = LD(r->algo);
  out->type = LD(r->type);
  out->op = LD(r->op);
  out->root = LD(r->root);
  out->state = LD(r->state);
  out->result = LD(r->result);
  out->wait_peer = LD(r->wait_peer);
  out->transports = LD(r->transports);
  out->gpu = LD(r->gpu);
  out->count = LD(r->count);
  out->bytes = LD(r->bytes);
  out->t_enqueue_ns = LD(r->t_enqueue_ns);
  out->t_start_ns = LD(r->t_start_ns);
  out->t_end_ns = LD(r->t_end_ns);
  out->gpu_start_ns = LD(r->gpu_start_ns);
  out->gpu_end_ns = LD(r->gpu_end_ns);
  out->wait_ns = LD(r->wait_ns);
  out->wait_peer_ns = LD(r->wait_peer_ns);
  out->gpu_id = LD(r->gpu_id);
  out->pred_ns = LD(r->pred_ns);
  return __atomic_load_n(&r->id, __ATOMIC_ACQUIRE) == id;
}

static void write_op(FILE *f, const zcc_op_rec_t *r, int first) {
  char tps[32];
  transports_text(r->transports, tps, sizeof(tps));
  int p2p = r->coll == ZCC_COLL_SENDRECV;
  fprintf(
      f,
      "%s\n  {\"seq\":%" PRIu64
      ",\"p2p\":%d,\"coll\":\"%s\",\"state\":\"%s\",\"result\":%d,"
      "\"bytes\":%" PRIu64 ",\"count\":%" PRIu64
      ",\"dtype\":\"%s\",\"op\":\"%s\",\"%s\":%d,"
      "\"algo\":\"%s\",\"transports\":\"%s\",\"gpu\":%d,\"enqueue_us\":%.3f,"
      "\"start_us\":%.3f,\"end_us\":%.3f,\"gpu_start_us\":%.3f,\"gpu_end_us\":%"
      ".3f,"
      "\"wait_us\":%.3f,\"wait_peer\":%d,\"wait_peer_us\":%.3f,\"pred_us\":%.3f}",
      first ? "" : ",", r->seq, p2p, zcc_coll_name((zcc_coll_t)r->coll),
      zcc_op_state_name(r->state), r->result, r->bytes, r->count,
      zcc_type_name((zccDataType_t)r->type), zcc_op_name((zccRedOp_t)r->op),
      p2p ? "peer" : "root", r->root,
      r->algo >= 0 ? zcc_algo_name((zcc_algo_t)r->algo) : "gpu", tps, r->gpu,
      wall_us(r->t_enqueue_ns), wall_us(r->t_start_ns), wall_us(r->t_end_ns),
      wall_us(r->gpu_start_ns), wall_us(r->gpu_end_ns),
      (double)r->wait_ns / 1000.0, r->wait_peer,
      (double)r->wait_peer_ns / 1000.0, (double)r->pred_ns / 1000.0);
}

zccResult_t zcc_trace_dump(struct zccComm *comm, const char *path,
                           const char *reason) {
  pthread_once(&clock_once, clock_init);
  zcc_trace_t *t = comm->trace;
  if (!path)
    path = zcc_param_fr_file();
  if (!path || !*path)
    return zcc_error(zccInvalidArgument,
                     "flight recorder dump: no path given and "
                     "ZCC_FLIGHT_RECORDER_FILE is unset");
  char full[4096], tmp[4200], name[160], why[1100];
  expand_path(path, comm->rank, full, sizeof(full));
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%ld", full, (int)getpid(),
           (long)syscall(SYS_gettid));
  json_escape(comm->name, name, sizeof(name));
  json_escape(reason ? reason : "", why, sizeof(why));
  FILE *f = fopen(tmp, "w");
  if (!f)
    return zcc_error(zccSystemError, "flight recorder dump: cannot open %s: %s",
                     tmp, strerror(errno));
  int err = atomic_load(&comm->async_error);
  fprintf(
      f,
      "{\"zcc_flight_recorder\":1,\"host\":\"%s\",\"pid\":%d,\"comm\":\"%s\","
      "\"hash\":\"0x%016" PRIx64 "\",\"rank\":%d,\"nranks\":%d,\"device\":%d,"
      "\"dump_time_us\":%.3f,\"reason\":\"%s\",\"async_error\":%d,\"entries\":%"
      "u,"
      "\"recorded\":%" PRIu64 ",\"ops\":[",
      host_name, (int)getpid(), name, comm->hash, comm->rank, comm->nranks,
      comm->device, wall_us(zcc_now_ns()), why, err, t ? t->cap : 0,
      t ? __atomic_load_n(&t->next, __ATOMIC_RELAXED) : 0);
  if (t && t->ring) {
    uint64_t last = __atomic_load_n(&t->next, __ATOMIC_RELAXED);
    uint64_t first = last > t->cap ? last - t->cap + 1 : 1;
    int n = 0;
    zcc_op_rec_t r;
    for (uint64_t id = first; id <= last && id; id++)
      if (snapshot(comm, id, &r))
        write_op(f, &r, n++ == 0);
  }
  fprintf(f, "\n]}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    unlink(tmp);
    return zcc_error(zccSystemError, "flight recorder dump: cannot write %s",
                     tmp);
  }
  if (rename(tmp, full) != 0) {
    int e = errno;
    unlink(tmp);
    return zcc_error(zccSystemError,
                     "flight recorder dump: cannot rename %s to %s: %s", tmp,
                     full, strerror(e));
  }
  ZCC_WARN("comm %s rank %d: flight recorder written to %s (%s)", comm->name,
           comm->rank, full, reason ? reason : "request");
  return zccSuccess;
}

/* "64 MiB" */
static void size_text(uint64_t b, char *out, size_t cap) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0)
    snprintf(out, cap, "%" PRIu64 " GiB", b >> 30);
  else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
    snprintf(out, cap, "%" PRIu64 " MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(out, cap, "%" PRIu64 " KiB", b >> 10);
  else
    snprintf(out, cap, "%" PRIu64 " B", b);
}

#define SUMMARY_OPS 4

static void warn_summary(struct zccComm *comm, zccResult_t res) {
  zcc_trace_t *t = comm->trace;
  char line[1024];
  size_t o = 0;
  line[0] = '\0';
  int64_t now = zcc_now_ns();
  if (t && t->ring) {
    uint64_t last = __atomic_load_n(&t->next, __ATOMIC_RELAXED);
    uint64_t first = last > SUMMARY_OPS ? last - SUMMARY_OPS + 1 : 1;
    if (last > t->cap && first < last - t->cap + 1)
      first = last - t->cap + 1;
    zcc_op_rec_t r;
    for (uint64_t id = first; id <= last && id; id++) {
      if (!snapshot(comm, id, &r))
        continue;
      char sz[32], extra[96] = "";
      size_text(r.bytes, sz, sizeof(sz));
      if (r.state == ZCC_OP_STARTED && r.wait_peer >= 0)
        snprintf(extra, sizeof(extra), " for %.1f s, waiting on rank %d",
                 (double)(now - r.t_start_ns) / 1e9, r.wait_peer);
      else if (r.state == ZCC_OP_STARTED && r.gpu && r.gpu_start_ns)
        snprintf(extra, sizeof(extra), " on the GPU for %.1f s",
                 (double)(now - r.gpu_start_ns) / 1e9);
      else if (r.state == ZCC_OP_FAILED && r.wait_peer >= 0 && r.t_start_ns)
        snprintf(extra, sizeof(extra), " after %.1f s, waiting on rank %d",
                 (double)(r.t_end_ns - r.t_start_ns) / 1e9, r.wait_peer);
      else if (r.state == ZCC_OP_DONE && r.t_end_ns)
        snprintf(extra, sizeof(extra), " %.1f s ago",
                 (double)(now - r.t_end_ns) / 1e9);
      int n = snprintf(line + o, sizeof(line) - o, "%s#%" PRIu64 " %s %s %s%s",
                       o ? "; " : "", r.seq,
                       r.coll == ZCC_COLL_SENDRECV
                           ? "sendrecv"
                           : zcc_coll_name((zcc_coll_t)r.coll),
                       sz, zcc_op_state_name(r.state), extra);
      if (n > 0 && (size_t)n < sizeof(line) - o)
        o += (size_t)n;
    }
  }
  ZCC_WARN("comm %s rank %d (%s): last operations: %s (set "
           "ZCC_FLIGHT_RECORDER_FILE for a "
           "full dump)",
           comm->name, comm->rank, zccGetErrorString(res),
           o ? line : "none recorded");
}

void zcc_trace_on_error(struct zccComm *comm, zccResult_t res) {
  zcc_trace_t *t = comm->trace;
  if (t && atomic_exchange(&t->dumped, 1))
    return;
  const char *path = zcc_param_fr_file();
  if (!path || !*path) {
    warn_summary(comm, res);
    return;
  }
  char reason[1100];
  snprintf(reason, sizeof(reason), "%s: %s", zccGetErrorString(res),
           zcc_last_error());
  /* The last error may belong to an unrelated call of this thread: keep it as
   * context. */
  char saved[1024];
  snprintf(saved, sizeof(saved), "%s", zcc_last_error());
  if (zcc_trace_dump(comm, path, reason) != zccSuccess)
    warn_summary(comm, res);
  /* zcc_error inside the dump must not replace the failure the caller reports.
   */
  zcc_restore_last_error(saved);
}

/* ---- public ---- */

zccResult_t zccCommDump(zccComm_t comm, const char *path) {
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommDump", 0));
  zccResult_t res = zcc_trace_dump(comm, path, "zccCommDump");
  zcc_comm_leave(comm);
  return res;
}

zccResult_t zccTraceMark(const char *kind, const char *name, int begin) {
  if (!kind || !name)
    return zcc_error(zccInvalidArgument,
                     "zccTraceMark: kind and name must not be NULL");
  pthread_once(&clock_once, clock_init);
  int64_t now = zcc_now_ns();
  char k[96], n[256];
  json_escape(kind, k, sizeof(k));
  json_escape(name, n, sizeof(n));
  pthread_mutex_lock(&files_lock);
  for (zcc_trace_file_t *tf = files; tf; tf = tf->next) {
    if (!tf->f)
      continue;
    file_sep(tf);
    fprintf(tf->f,
            "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",\"pid\":%d,\"tid\":%"
            "d,\"ts\":%.3f,"
            "\"args\":{\"marker\":\"%s\",\"rank\":%d}}",
            n, k, begin ? "B" : "E", (int)getpid(),
            100000 + (zcc_log_rank >= 0 ? zcc_log_rank : 0), wall_us(now), k,
            zcc_log_rank);
  }
  pthread_mutex_unlock(&files_lock);
  return zccSuccess;
}
