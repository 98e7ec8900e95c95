/* allreduce_perf: times and checks zccAllReduce; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_allreduce, argc, argv);
}
