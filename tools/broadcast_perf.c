/* broadcast_perf: times and checks zccBroadcast; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_broadcast, argc, argv);
}
