// Build facts of the device code, for logs (the CUDA version nvcc compiled
// zcc's kernels with), and the preloading of every kernel.
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("hidden"))) int zcc_device_cuda_version(void) {
  return CUDART_VERSION;
}

extern "C" int zcc_dev_preload_allreduce(void);
extern "C" int zcc_dev_preload_ll(void);
extern "C" int zcc_dev_preload_reduce(void);
extern "C" int zcc_dev_preload_coll(void);
extern "C" int zcc_dev_preload_p2p(void);
extern "C" int zcc_dev_preload_ce(void);
extern "C" int zcc_dev_preload_push(void);
extern "C" int zcc_dev_preload_conn(void);

extern "C" __attribute__((visibility("hidden"))) int zcc_dev_preload(void) {
  int (*const fns[])(void) = {zcc_dev_preload_allreduce, zcc_dev_preload_ll,
                              zcc_dev_preload_reduce,    zcc_dev_preload_coll,
                              zcc_dev_preload_p2p,       zcc_dev_preload_ce,
                              zcc_dev_preload_push,      zcc_dev_preload_conn};
  for (auto f : fns) {
    int e = f();
    if (e != 0) return e;
  }
  return 0;
}
