/* CUDA driver calls, loaded at run time. */
#include "cudawrap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "debug.h"

#ifdef ZCC_HAVE_CUDA
int zcc_device_cuda_version(void); /* src/device/device_info.cu */
#endif

typedef int CUresult_;
typedef unsigned long long CUdeviceptr_;

static struct {
  void *lib;
  CUresult_ (*init)(unsigned int);
  CUresult_ (*device_count)(int *);
  CUresult_ (*mem_alloc)(CUdeviceptr_ *, size_t);
  CUresult_ (*mem_free)(CUdeviceptr_);
  CUresult_ (*pointer_get_attribute)(void *, int, CUdeviceptr_);
  CUresult_ (*get_error_string)(CUresult_, const char **);
  int count;
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void) {
  cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu.lib) {
    ZCC_INFO(INIT, "libcuda.so.1 not loaded (%s): no CUDA devices", dlerror());
    return;
  }
  cu.init = (CUresult_(*)(unsigned int))dlsym(cu.lib, "cuInit");
  cu.device_count = (CUresult_(*)(int *))dlsym(cu.lib, "cuDeviceGetCount");
  cu.mem_alloc = (CUresult_(*)(CUdeviceptr_ *, size_t))dlsym(cu.lib, "cuMemAlloc_v2");
  cu.mem_free = (CUresult_(*)(CUdeviceptr_))dlsym(cu.lib, "cuMemFree_v2");
  cu.pointer_get_attribute =
      (CUresult_(*)(void *, int, CUdeviceptr_))dlsym(cu.lib, "cuPointerGetAttribute");
  cu.get_error_string =
      (CUresult_(*)(CUresult_, const char **))dlsym(cu.lib, "cuGetErrorString");
  if (!cu.init || !cu.device_count || cu.init(0) != 0 || cu.device_count(&cu.count) != 0)
    cu.count = 0;
  ZCC_INFO(INIT, "libcuda loaded: %d device(s)", cu.count);
#ifdef ZCC_HAVE_CUDA
  ZCC_INFO(INIT, "device code built with CUDA %d", zcc_device_cuda_version());
#endif
}

int zcc_cuda_device_count(void) {
  pthread_once(&cu_once, cu_load);
  return cu.count;
}

int zcc_cuda_gpu_path_available(void) {
  /* GPU communicators arrive with the GPU transport; until then, the host. */
  return 0;
}

static zccResult_t cu_error(CUresult_ rc, const char *what) {
  const char *s = "unknown";
  if (cu.get_error_string) cu.get_error_string(rc, &s);
  return zcc_error(zccUnhandledCudaError, "%s failed: cuda error %d (%s)", what, rc, s);
}

zccResult_t zcc_cuda_mem_alloc(void **ptr, size_t size) {
  if (zcc_cuda_device_count() == 0 || !cu.mem_alloc)
    return zcc_error(zccInvalidUsage, "zccMemAlloc: no CUDA device is available");
  CUdeviceptr_ d = 0;
  CUresult_ rc = cu.mem_alloc(&d, size);
  if (rc != 0) return cu_error(rc, "cuMemAlloc");
  *ptr = (void *)(uintptr_t)d;
  return zccSuccess;
}

zccResult_t zcc_cuda_mem_free(void *ptr) {
  if (zcc_cuda_device_count() == 0 || !cu.mem_free)
    return zcc_error(zccInvalidUsage, "zccMemFree: no CUDA device is available");
  CUresult_ rc = cu.mem_free((CUdeviceptr_)(uintptr_t)ptr);
  if (rc != 0) return cu_error(rc, "cuMemFree");
  return zccSuccess;
}

int zcc_cuda_is_device_ptr(const void *ptr) {
  if (zcc_cuda_device_count() == 0 || !cu.pointer_get_attribute) return 0;
  unsigned int type = 0;
  /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2; CU_MEMORYTYPE_DEVICE = 2 */
  if (cu.pointer_get_attribute(&type, 2, (CUdeviceptr_)(uintptr_t)ptr) != 0) return 0;
  return type == 2;
}
