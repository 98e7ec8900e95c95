/* Two ranks forked from one parent (one process per rank) sum a vector on
   host communicators; the parent serves the rendezvous. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zcc.h>

int main(void) {
  int pipes[2][2];
  for (int rank = 0; rank < 2; rank++) { /* fork first: zccGetUniqueId starts a thread */
    if (pipe(pipes[rank]) != 0) return 1;
    if (fork() == 0) {
      zccUniqueId id;
      zccConfig_t config = ZCC_CONFIG_INITIALIZER;
      config.deviceType = zccDeviceHost;
      zccComm_t comm;
      float buf[4] = {rank + 1.0f, rank + 1.0f, rank + 1.0f, rank + 1.0f};
      if (read(pipes[rank][0], &id, sizeof(id)) != sizeof(id) ||
          zccCommInitRankConfig(&comm, 2, id, rank, &config) != zccSuccess ||
          zccAllReduce(buf, buf, 4, zccFloat, zccSum, comm, NULL) != zccSuccess)
        _exit(1);
      zccCommDestroy(comm);
      if (rank == 0)
        printf("rank 0: %g %g %g %g\n", buf[0], buf[1], buf[2], buf[3]);
      fflush(stdout); /* _exit does not flush stdio */
      _exit(buf[0] == 3.0f && buf[3] == 3.0f ? 0 : 1); /* 1 + 2 */
    }
  }
  zccUniqueId id;
  if (zccGetUniqueId(&id) != zccSuccess) /* the parent serves the rendezvous */
    return 1;
  for (int rank = 0; rank < 2; rank++)
    if (write(pipes[rank][1], &id, sizeof(id)) != sizeof(id)) return 1;
  int status, failed = 0;
  while (wait(&status) > 0)
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  puts(failed ? "example_fork: FAILED" : "example_fork: ok");
  return failed;
}
