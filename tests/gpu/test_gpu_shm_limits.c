/*
 * The shm transport's GPU windows when they cannot be pinned: communicator
 * creation fails with the locked-memory limit named, nothing falls back to
 * another path, nothing crashes, and no shared-memory segment is left.
 *
 * A child process drops CAP_IPC_LOCK (root's exemption from the limit),
 * sets RLIMIT_MEMLOCK to 64 KiB and creates two ranks on GPU 0 with
 * ZCC_P2P_DISABLE=1, so that the windows must be pinned shared memory.
 * Where the driver pins beyond the limit (it does not count
 * cuMemHostRegister against RLIMIT_MEMLOCK), the child makes pinning fail
 * another way: a private mount namespace with a 1 MiB tmpfs on /dev/shm,
 * so the segment's pages cannot all exist. Creation must then fail as
 * clearly (the pin or the segment named), with no fallback and no crash.
 * Exit 0 when it failed as it should; 1 when it succeeded or failed in
 * another way; 77 (skipped) without a GPU, or where neither way can make
 * pinning fail here (the test says why).
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zcc.h"

#define LIMIT (64 << 10)

/* Segments of zcc's GPU windows in /dev/shm. */
static int count_segments(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strncmp(e->d_name, "zcc-gw-", 7) == 0) n++;
  closedir(d);
  return n;
}

static int drop_ipc_lock(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct c[2];
  if (syscall(SYS_capget, &h, c) != 0) return -1;
  c[0].effective &= ~(1u << CAP_IPC_LOCK);
  c[0].permitted &= ~(1u << CAP_IPC_LOCK);
  c[0].inheritable &= ~(1u << CAP_IPC_LOCK);
  return (int)syscall(SYS_capset, &h, c);
}

/* All CUDA use is here, after the fork: CUDA does not survive one. */
static int child(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("test_gpu_shm_limits: skipped: no CUDA GPU\n");
    return 77;
  }
  if (drop_ipc_lock() != 0) {
    perror("test_gpu_shm_limits: capset");
    return 3;
  }
  struct rlimit rl = {LIMIT, LIMIT};
  if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    perror("test_gpu_shm_limits: setrlimit");
    return 3;
  }
  setenv("ZCC_P2P_DISABLE", "1", 1);
  int devs[2] = {0, 0};
  zccComm_t comms[2];
  zccResult_t rc = zccCommInitAll(comms, 2, devs);
  if (rc == zccSuccess) {
    printf("test_gpu_shm_limits: created with RLIMIT_MEMLOCK %d KiB and no CAP_IPC_LOCK: "
           "the driver pins beyond the limit; now a 1 MiB /dev/shm\n", LIMIT >> 10);
    zccCommDestroy(comms[0]);
    zccCommDestroy(comms[1]);
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      printf("test_gpu_shm_limits: skipped: neither RLIMIT_MEMLOCK nor a small /dev/shm "
             "(mount namespace: %s) can make pinning fail here\n", strerror(errno));
      return 77;
    }
    rc = zccCommInitAll(comms, 2, devs);
    if (rc == zccSuccess) {
      printf("test_gpu_shm_limits: FAIL: created with windows in a 1 MiB /dev/shm\n");
      return 1;
    }
    const char *m2 = zccGetLastError(NULL);
    printf("test_gpu_shm_limits: zccCommInitAll: %s: %s\n", zccGetErrorString(rc), m2);
    if (rc != zccSystemError || (!strstr(m2, "cannot pin") && !strstr(m2, "/dev/shm"))) {
      printf("test_gpu_shm_limits: FAIL: expected zccSystemError naming the pin or /dev/shm\n");
      return 1;
    }
    return 0;
  }
  const char *msg = zccGetLastError(NULL);
  printf("test_gpu_shm_limits: zccCommInitAll: %s: %s\n", zccGetErrorString(rc), msg);
  char want[64];
  snprintf(want, sizeof(want), "locked-memory limit %d KiB", LIMIT >> 10);
  if (rc != zccSystemError || !strstr(msg, want) || !strstr(msg, "ulimit -l")) {
    printf("test_gpu_shm_limits: FAIL: expected zccSystemError naming \"%s\" and ulimit -l\n",
           want);
    return 1;
  }
  return 0;
}

int main(void) {
  int before = count_segments();
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("test_gpu_shm_limits: fork");
    return 1;
  }
  if (pid == 0) {
    int c = child();
    fflush(stdout);
    _exit(c);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) {
    perror("test_gpu_shm_limits: waitpid");
    return 1;
  }
  if (WIFSIGNALED(st)) {
    printf("test_gpu_shm_limits: FAIL: the child died of signal %d\n", WTERMSIG(st));
    return 1;
  }
  int code = WEXITSTATUS(st);
  int after = count_segments();
  if (after != before) {
    printf("test_gpu_shm_limits: FAIL: %d zcc-gw segment(s) in /dev/shm before, %d after\n",
           before, after);
    return 1;
  }
  if (code == 77) return 77; /* the child said why */
  printf("test_gpu_shm_limits: %s\n", code == 0 ? "ok: creation refused as above, nothing "
                                                  "left in /dev/shm" : "FAIL");
  return code == 0 ? 0 : 1;
}
