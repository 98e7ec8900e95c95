/* reducescatter_perf: times and checks zccReduceScatter; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_reducescatter, argc, argv);
}
