// Build facts of the device code, for logs: the CUDA version nvcc compiled
// zcc's kernels with. GPU kernels join this folder with the GPU transport.
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("hidden"))) int zcc_device_cuda_version(void) {
  return CUDART_VERSION;
}
