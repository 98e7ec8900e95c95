/*
 * zccCommInitFromEnv under each launcher's environment: two forked ranks
 * get torchrun's, Open MPI's, MPICH's or Slurm's variables, build a
 * communicator and allreduce; and logging to ZCC_DEBUG_FILE with %h/%p.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bootstrap.h"
#include "zcc.h"

typedef void (*set_env_fn)(int rank, int port);

static void torchrun_env(int rank, int port) {
  char v[16];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("RANK", v, 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  snprintf(v, sizeof(v), "%d", port - 1); /* zcc uses MASTER_PORT + 1 */
  setenv("MASTER_PORT", v, 1);
}

static void ompi_env(int rank, int port) {
  char v[32];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("OMPI_COMM_WORLD_RANK", v, 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1); /* one host: loopback rendezvous */
  snprintf(v, sizeof(v), "job-%d", port);
  setenv("PMIX_NAMESPACE", v, 1);
}

static void mpich_env(int rank, int port) {
  char v[32];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("PMI_RANK", v, 1);
  setenv("PMI_SIZE", "2", 1);
  setenv("MPI_LOCALNRANKS", "2", 1);
  snprintf(v, sizeof(v), "kvs_%d", port);
  setenv("PMI_KVSNAME", v, 1);
}

static void slurm_env(int rank, int port) {
  char v[32];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("SLURM_PROCID", v, 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_STEP_NODELIST", "localhost", 1);
  snprintf(v, sizeof(v), "%d", port);
  setenv("SLURM_JOB_ID", v, 1);
  setenv("SLURM_STEP_ID", "0", 1);
}

/* Each child: environment, init, allreduce of its rank + 1, check 3. */
static int child(set_env_fn fn, int rank, int port, const char *comm_id) {
  fn(rank, port);
  if (comm_id) setenv("ZCC_COMM_ID", comm_id, 1);
  setenv("ZCC_DEVICE", "host", 1);
  zccComm_t comm;
  if (zccCommInitFromEnv(&comm, NULL) != zccSuccess) {
    fprintf(stderr, "rank %d: zccCommInitFromEnv: %s\n", rank, zccGetLastError(NULL));
    return 1;
  }
  int n = 0, r = -1;
  zccCommCount(comm, &n);
  zccCommUserRank(comm, &r);
  int32_t v = rank + 1, sum = 0;
  zccResult_t res = zccAllReduce(&v, &sum, 1, zccInt32, zccSum, comm, NULL);
  zccCommDestroy(comm);
  if (res != zccSuccess || n != 2 || r != rank || sum != 3) {
    fprintf(stderr, "rank %d: res %d n %d r %d sum %d\n", rank, res, n, r, sum);
    return 1;
  }
  return 0;
}

/* A port that rank 0 can listen on now (every interface, as zcc does), out
   of the ephemeral range so that no outgoing connection takes it meanwhile;
   the walk starts at a per-process point so parallel tests differ. Plain
   sockets, not zcc's socket helpers: a zcc call here would set up the
   library's logging and parameters in this parent, and the forked ranks
   would inherit them (test_debug_file sets its own in the child). */
static int free_port(void) {
  int span = ZCC_JOB_PORT_SPAN;
  for (int i = 0; i < span; i++) {
    int port = ZCC_JOB_PORT_MIN + (int)((getpid() * 7919L + i) % span);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(s);
    if (ok) return port;
  }
  fail_msg("no free port in %d..%d", ZCC_JOB_PORT_MIN, ZCC_JOB_PORT_MIN + span - 1);
  return -1;
}

/* torchrun's port is the test's to choose; the MPI and Slurm ones are
   derived from the job id, which the port seeds. A failed rendezvous ends
   in 20 s, not the default 120. */
static void run_launcher(set_env_fn fn, const char *comm_id) {
  int port = free_port();
  setenv("ZCC_INIT_TIMEOUT", "20000", 1);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) _exit(child(fn, r, port, comm_id));
  }
  for (int r = 0; r < 2; r++) {
    int st = 0;
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("rank %d failed (status 0x%x)", r, st);
  }
}

static void test_torchrun(void **s) { run_launcher(torchrun_env, NULL); }
static void test_openmpi(void **s) { run_launcher(ompi_env, NULL); }
static void test_mpich(void **s) { run_launcher(mpich_env, NULL); }
static void test_slurm(void **s) { run_launcher(slurm_env, NULL); }

static void test_comm_id_override(void **s) {
  char id[64];
  snprintf(id, sizeof(id), "127.0.0.1:%d", free_port());
  run_launcher(ompi_env, id);
}

/* The IPv4 address (network order) listening on port per /proc/net/tcp, or
   -1 while nothing listens there. */
static long listener_addr(int port) {
  FILE *f = fopen("/proc/net/tcp", "r");
  if (!f) return -1;
  char line[512];
  long found = -1;
  while (fgets(line, sizeof(line), f)) {
    unsigned addr, p, st;
    if (sscanf(line, " %*d: %x:%x %*x:%*x %x", &addr, &p, &st) == 3 && (int)p == port &&
        st == 0x0A) {
      found = (long)addr;
      break;
    }
  }
  fclose(f);
  return found;
}

/* ZCC_COMM_ID naming 127.0.0.1: rank 0 listens on 127.0.0.1 alone, not on
   every interface (/proc/net/tcp while rank 1 has yet to start), and the
   ranks then meet there. */
static void test_comm_id_loopback_bind(void **s) {
  int port = free_port();
  char id[64];
  snprintf(id, sizeof(id), "127.0.0.1:%d", port);
  setenv("ZCC_INIT_TIMEOUT", "20000", 1);
  pid_t pids[2];
  pids[0] = fork();
  assert_true(pids[0] >= 0);
  if (pids[0] == 0) _exit(child(ompi_env, 0, port, id));
  long addr = -1;
  for (int i = 0; i < 1000 && addr < 0; i++) {
    addr = listener_addr(port);
    if (addr < 0) usleep(10000);
  }
  pids[1] = fork();
  assert_true(pids[1] >= 0);
  if (pids[1] == 0) _exit(child(ompi_env, 1, port, id));
  for (int r = 0; r < 2; r++) {
    int st = 0;
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("rank %d failed (status 0x%x)", r, st);
  }
  if (addr < 0) fail_msg("nothing listened on port %d within 10 s", port);
  /* /proc/net/tcp prints the address in host order of its network bytes */
  struct in_addr a = {.s_addr = (in_addr_t)addr};
  if (a.s_addr != htonl(INADDR_LOOPBACK))
    fail_msg("rank 0 listened on %s:%d, not 127.0.0.1", inet_ntoa(a), port);
}

/* Derived rendezvous ports cover [ZCC_JOB_PORT_MIN, +SPAN) and stay below
   Linux's ephemeral range, where outgoing connections would take them. */
static void test_job_port_range(void **s) {
  int lo = 1 << 30, hi = -1;
  for (int i = 0; i < 20000; i++) {
    char job[64];
    snprintf(job, sizeof(job), "slurm:%d.0", i);
    int p = zcc_job_port(job);
    assert_int_equal(p, zcc_job_port(job));
    if (p < lo) lo = p;
    if (p > hi) hi = p;
  }
  assert_true(lo >= ZCC_JOB_PORT_MIN && hi < ZCC_JOB_PORT_MIN + ZCC_JOB_PORT_SPAN);
  assert_true(hi < 32768);
  assert_true(lo < ZCC_JOB_PORT_MIN + 100 && hi >= ZCC_JOB_PORT_MIN + ZCC_JOB_PORT_SPAN - 100);
}

static void test_no_launcher(void **s) {
  pid_t pid = fork();
  if (pid == 0) {
    const char *vars[] = {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                          "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
    zccComm_t comm = NULL;
    zccResult_t res = zccCommInitFromEnv(&comm, NULL);
    _exit(res == zccInvalidUsage && comm == NULL && strstr(zccGetLastError(NULL), "launcher") ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_debug_file(void **s) {
  char dir[] = "/tmp/zcc-log-XXXXXX";
  assert_non_null(mkdtemp(dir));
  pid_t pid = fork();
  if (pid == 0) {
    char path[128];
    snprintf(path, sizeof(path), "%s/zcc.%%h.%%p.log", dir);
    setenv("ZCC_DEBUG", "INFO", 1);
    setenv("ZCC_DEBUG_SUBSYS", "INIT", 1);
    setenv("ZCC_DEBUG_FILE", path, 1);
    zccComm_t comm;
    if (zccCommInitAll(&comm, 1, NULL) != zccSuccess) _exit(2);
    zccCommDestroy(comm);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char path[256];
  snprintf(path, sizeof(path), "%s/zcc.%s.%d.log", dir, host, (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("no log file %s", path);
  char line[1024];
  int init_lines = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, " ZCC INFO INIT ")) init_lines++;
  fclose(f);
  unlink(path);
  rmdir(dir);
  assert_true(init_lines > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torchrun),   cmocka_unit_test(test_openmpi),
      cmocka_unit_test(test_mpich),      cmocka_unit_test(test_slurm),
      cmocka_unit_test(test_comm_id_override), cmocka_unit_test(test_comm_id_loopback_bind),
      cmocka_unit_test(test_no_launcher),
      cmocka_unit_test(test_debug_file), cmocka_unit_test(test_job_port_range),
  };
  return cmocka_run_group_tests_name("launch", tests, NULL, NULL);
}
