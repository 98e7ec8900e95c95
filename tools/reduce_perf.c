/* reduce_perf: times and checks zccReduce; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_reduce, argc, argv);
}
