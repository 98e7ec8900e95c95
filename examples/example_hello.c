/* Two ranks in one process, one thread each, sum a vector on the host. */
#include <pthread.h>
#include <stdio.h>
#include <zcc.h>

static zccComm_t comms[2];
static float bufs[2][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}};

static void *rank_main(void *arg) { /* host collectives return when done */
  long rank = (long)arg;
  zccAllReduce(bufs[rank], bufs[rank], 4, zccFloat, zccSum, comms[rank], NULL);
  return NULL;
}

int main(void) {
  pthread_t threads[2];
  if (zccCommInitAll(comms, 2, NULL) != zccSuccess) return 1;
  for (long r = 0; r < 2; r++) pthread_create(&threads[r], NULL, rank_main, (void *)r);
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL), zccCommDestroy(comms[r]);
  printf("rank 0: %g %g %g %g\n", bufs[0][0], bufs[0][1], bufs[0][2], bufs[0][3]);
  int ok = bufs[0][0] == 3 && bufs[1][3] == 3; /* 1 + 2 on both ranks */
  puts(ok ? "example_hello: ok" : "example_hello: FAILED");
  return !ok;
}
