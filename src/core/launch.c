/*
 * zccCommInitFromEnv: a communicator from the environment that launchers
 * already set. Rank and size come from torchrun (RANK, WORLD_SIZE), Open
 * MPI (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_RANK, PMI_SIZE) or Slurm
 * (SLURM_PROCID, SLURM_NTASKS). Every rank computes the same unique id:
 * the rendezvous address (ZCC_COMM_ID; torchrun: MASTER_ADDR and
 * MASTER_PORT+1, since torch's own store holds MASTER_PORT; Slurm: the first
 * host of the step, port from the job id; single-host mpirun: loopback, port
 * from the job id) and the secret (ZCC_COMM_SECRET, else one derived from
 * the job's identity: it keeps jobs apart, but anyone who can read the
 * job's environment can derive it). Rank 0 serves the rendezvous.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "debug.h"
#include "param.h"

ZCC_PARAM_STR(comm_id, "COMM_ID", NULL,
              "host:port of the rendezvous zccCommInitFromEnv uses (rank 0 listens there)")
ZCC_PARAM_STR(comm_secret, "COMM_SECRET", NULL,
              "32 hex digits: the secret zccCommInitFromEnv's ranks share (default: "
              "derived from the launcher's job id)")

typedef struct launch_env {
  const char *launcher;
  int rank, size;
  int single_host; /* every rank on this host, known from the launcher */
  char job[256];   /* the job's identity */
  char host[256];  /* rendezvous host ("" unknown) */
  int port;        /* rendezvous port (0 unknown) */
} launch_env_t;

static int env_int(const char *name, int *out) {
  const char *s = getenv(name);
  if (!s || !*s) return 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < 0 || v > 1 << 30) return 0;
  *out = (int)v;
  return 1;
}

static const char *env_or(const char *name, const char *def) {
  const char *s = getenv(name);
  return s && *s ? s : def;
}

/* First host of a Slurm node list: "node[01-04,07],other" -> "node01". */
static void first_slurm_host(const char *list, char *out, size_t cap) {
  size_t o = 0;
  const char *p = list;
  while (*p && *p != ',' && *p != '[' && o + 1 < cap) out[o++] = *p++;
  if (*p == '[') {
    p++;
    while (*p && isdigit((unsigned char)*p) && o + 1 < cap) out[o++] = *p++;
  }
  out[o] = '\0';
}

int zcc_job_port(const char *job) {
  uint8_t h[32];
  zcc_sha256(job, strlen(job), h);
  return ZCC_JOB_PORT_MIN + (int)(((unsigned)h[0] << 8 | h[1]) % ZCC_JOB_PORT_SPAN);
}

static zccResult_t detect(launch_env_t *e) {
  memset(e, 0, sizeof(*e));
  int local;
  if (env_int("RANK", &e->rank) && env_int("WORLD_SIZE", &e->size)) {
    e->launcher = "torchrun";
    snprintf(e->job, sizeof(e->job), "torchrun:%s:%s:%s", env_or("TORCHELASTIC_RUN_ID", ""),
             env_or("MASTER_ADDR", ""), env_or("MASTER_PORT", ""));
    int mport;
    if (getenv("MASTER_ADDR") && env_int("MASTER_PORT", &mport) && mport < 65535) {
      snprintf(e->host, sizeof(e->host), "%s", getenv("MASTER_ADDR"));
      e->port = mport + 1;
    }
  } else if (env_int("OMPI_COMM_WORLD_RANK", &e->rank) &&
             env_int("OMPI_COMM_WORLD_SIZE", &e->size)) {
    e->launcher = "Open MPI";
    snprintf(e->job, sizeof(e->job), "ompi:%s:%s", env_or("OMPI_MCA_ess_base_jobid", ""),
             env_or("PMIX_NAMESPACE", ""));
    e->single_host = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &local) && local == e->size;
  } else if (env_int("PMI_RANK", &e->rank) && env_int("PMI_SIZE", &e->size)) {
    e->launcher = "MPICH";
    snprintf(e->job, sizeof(e->job), "mpich:%s:%s", env_or("PMI_KVSNAME", ""),
             env_or("PMI_PORT", env_or("PMI_FD", "")));
    e->single_host = env_int("MPI_LOCALNRANKS", &local) && local == e->size;
  } else if (env_int("SLURM_PROCID", &e->rank) && env_int("SLURM_NTASKS", &e->size)) {
    e->launcher = "Slurm";
    snprintf(e->job, sizeof(e->job), "slurm:%s.%s", env_or("SLURM_JOB_ID", ""),
             env_or("SLURM_STEP_ID", ""));
    const char *nodes = env_or("SLURM_STEP_NODELIST", env_or("SLURM_JOB_NODELIST", NULL));
    if (nodes) first_slurm_host(nodes, e->host, sizeof(e->host));
    e->port = zcc_job_port(e->job);
  } else {
    return zcc_error(zccInvalidUsage,
                     "zccCommInitFromEnv: no launcher environment found (RANK/WORLD_SIZE, "
                     "OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or SLURM_PROCID/NTASKS)");
  }
  if (e->size < 1 || e->rank >= e->size)
    return zcc_error(zccInvalidArgument, "zccCommInitFromEnv: %s gives rank %d of %d ranks",
                     e->launcher, e->rank, e->size);
  if (!e->host[0] && e->single_host) {
    snprintf(e->host, sizeof(e->host), "127.0.0.1");
    e->port = zcc_job_port(e->job);
  }
  return zccSuccess;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = (char)tolower((unsigned char)c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

zccResult_t zccCommInitFromEnv(zccComm_t *comm, zccConfig_t *config) {
  const char *fn = "zccCommInitFromEnv";
  if (!comm) return zcc_error(zccInvalidArgument, "%s: comm is NULL", fn);
  launch_env_t e;
  ZCC_CHECK(detect(&e));
  char where[300];
  const char *cid = zcc_param_comm_id();
  if (cid && *cid) snprintf(where, sizeof(where), "%s", cid);
  else if (e.host[0] && e.port > 0) snprintf(where, sizeof(where), "%s:%d", e.host, e.port);
  else
    return zcc_error(zccInvalidUsage,
                     "%s: %s ranks span several hosts and no rendezvous address is known: "
                     "set ZCC_COMM_ID=host:port (the host of rank 0)", fn, e.launcher);
  zcc_unique_id_t uid;
  memset(&uid, 0, sizeof(uid));
  uid.magic = ZCC_UNIQUE_ID_MAGIC;
  uid.version = ZCC_VERSION_CODE;
  ZCC_CHECK(zcc_sockaddr_parse(where, &uid.root));
  const char *hex = zcc_param_comm_secret();
  if (hex && *hex) {
    if (strlen(hex) != 2 * ZCC_SECRET_BYTES)
      return zcc_error(zccInvalidArgument, "%s: ZCC_COMM_SECRET must be %d hex digits", fn,
                       2 * ZCC_SECRET_BYTES);
    for (int i = 0; i < ZCC_SECRET_BYTES; i++) {
      int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
      if (hi < 0 || lo < 0)
        return zcc_error(zccInvalidArgument, "%s: ZCC_COMM_SECRET has a non-hex digit", fn);
      uid.secret[i] = (uint8_t)(hi << 4 | lo);
    }
  } else {
    char seed[600];
    snprintf(seed, sizeof(seed), "zcc-launch|%s|%s|%d", e.job, where, e.size);
    uint8_t h[32];
    zcc_sha256(seed, strlen(seed), h);
    memcpy(uid.secret, h, ZCC_SECRET_BYTES);
  }
  zccUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, &uid, sizeof(uid));
  ZCC_INFO(INIT, "%s: rank %d of %d from %s, rendezvous %s", fn, e.rank, e.size, e.launcher,
           where);
  if (e.rank == 0) {
    /* Listen on the rendezvous address itself where it is one of ours (a
       loopback address stays private to this host); on every interface at
       its port where it is not (a name that others reach through NAT or an
       alias is not an address of ours verbatim). */
    zcc_sockaddr_t bind_to = uid.root;
    if (!zcc_sockaddr_is_local(&uid.root)) {
      if (bind_to.u.sa.sa_family == AF_INET) bind_to.u.sin.sin_addr.s_addr = htonl(INADDR_ANY);
      else bind_to.u.sin6.sin6_addr = in6addr_any;
    }
    char b[ZCC_SOCKADDR_STRLEN];
    ZCC_INFO(INIT, "%s: rank 0 serves the rendezvous on %s", fn, zcc_sockaddr_str(&bind_to, b));
    zccUniqueId served;
    ZCC_CHECK(zcc_bootstrap_create_root(&served, &bind_to, &uid.root, uid.secret));
  }
  return zcc_comm_init(comm, e.size, &id, e.rank, config, fn);
}
