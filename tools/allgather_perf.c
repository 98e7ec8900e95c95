/* allgather_perf: times and checks zccAllGather; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_allgather, argc, argv);
}
