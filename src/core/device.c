/*
 * The one place core forks between host and GPU: the GPU face's table when
 * zcc is built with CUDA, none otherwise (devops.h).
 */
#include "devops.h"

#ifdef ZCC_HAVE_CUDA
#include <stdio.h>

#include "check.h"
#include "cudawrap.h"
#include "debug.h"
#include "gpu.h"

static zccResult_t cuda_current(int *dev, char *bus, size_t buslen) {
  ZCC_CHECK(zcc_gpu_current_device(dev));
  char name[64];
  int arch = 0;
  if (zcc_cuda_device_info(*dev, bus, buslen, name, sizeof(name), &arch) != 0)
    snprintf(bus, buslen, "gpu%d", *dev);
  return zccSuccess;
}

static const zcc_device_ops_t cuda_ops = {
    .name = "cuda",
    .current = cuda_current,
    .bind = zcc_gpu_bind_device,
    .setup = zcc_gpu_comm_setup,
    .free = zcc_gpu_comm_free,
    .stop = zcc_gpu_comm_stop_kernels,
    .check = zcc_gpu_coll_check,
    .coll = zcc_gpu_coll,
    .p2p = zcc_gpu_p2p,
    .reg = zcc_gpu_register,
    .dereg = zcc_gpu_deregister,
    .probe = zcc_gpu_probe,
    .op_times = zcc_gpu_op_times,
};

const zcc_device_ops_t *zcc_device_cuda(void) { return &cuda_ops; }
#else
const zcc_device_ops_t *zcc_device_cuda(void) { return 0; }
#endif
