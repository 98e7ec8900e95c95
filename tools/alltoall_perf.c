/* alltoall_perf: times and checks zccAlltoAll; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_alltoall, argc, argv);
}
