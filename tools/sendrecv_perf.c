/* sendrecv_perf: times and checks zccSend and zccRecv in a group, a ring; options as nccl-tests (-h). */
#include "perf.h"

int main(int argc, char **argv)
{
  return perf_main(&perf_sendrecv, argc, argv);
}
