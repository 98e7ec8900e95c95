/* CUDA driver calls, loaded at run time. */
#include "cudawrap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

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
  CUresult_ (*device_get)(int *, int);
  CUresult_ (*bus_id)(char *, int, int);
  CUresult_ (*name)(char *, int, int);
  CUresult_ (*attr)(int *, int, int);
  CUresult_ (*can_peer)(int *, int, int);
  CUresult_ (*mem_alloc)(CUdeviceptr_ *, size_t);
  CUresult_ (*mem_free)(CUdeviceptr_);
  CUresult_ (*pointer_get_attribute)(void *, int, CUdeviceptr_);
  CUresult_ (*mem_range)(CUdeviceptr_ *, size_t *, CUdeviceptr_);
  CUresult_ (*get_error_string)(CUresult_, const char **);
  CUresult_ (*host_register)(void *, size_t, unsigned int);
  CUresult_ (*host_unregister)(void *);
  CUresult_ (*host_dev_ptr)(CUdeviceptr_ *, void *, unsigned int);
  CUresult_ (*range_handle)(void *, CUdeviceptr_, size_t, int, unsigned long long);
  CUresult_ (*ctx_get)(void **);
  CUresult_ (*ctx_set)(void *);
  CUresult_ (*flush_gdr)(int, int);
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
  *(void **)&cu.device_get = dlsym(cu.lib, "cuDeviceGet");
  *(void **)&cu.bus_id = dlsym(cu.lib, "cuDeviceGetPCIBusId");
  *(void **)&cu.name = dlsym(cu.lib, "cuDeviceGetName");
  *(void **)&cu.attr = dlsym(cu.lib, "cuDeviceGetAttribute");
  *(void **)&cu.can_peer = dlsym(cu.lib, "cuDeviceCanAccessPeer");
  cu.mem_alloc = (CUresult_(*)(CUdeviceptr_ *, size_t))dlsym(cu.lib, "cuMemAlloc_v2");
  cu.mem_free = (CUresult_(*)(CUdeviceptr_))dlsym(cu.lib, "cuMemFree_v2");
  *(void **)&cu.mem_range = dlsym(cu.lib, "cuMemGetAddressRange_v2");
  cu.pointer_get_attribute =
      (CUresult_(*)(void *, int, CUdeviceptr_))dlsym(cu.lib, "cuPointerGetAttribute");
  cu.get_error_string =
      (CUresult_(*)(CUresult_, const char **))dlsym(cu.lib, "cuGetErrorString");
  *(void **)&cu.host_register = dlsym(cu.lib, "cuMemHostRegister_v2");
  *(void **)&cu.host_unregister = dlsym(cu.lib, "cuMemHostUnregister");
  *(void **)&cu.host_dev_ptr = dlsym(cu.lib, "cuMemHostGetDevicePointer_v2");
  *(void **)&cu.range_handle = dlsym(cu.lib, "cuMemGetHandleForAddressRange");
  *(void **)&cu.ctx_get = dlsym(cu.lib, "cuCtxGetCurrent");
  *(void **)&cu.ctx_set = dlsym(cu.lib, "cuCtxSetCurrent");
  *(void **)&cu.flush_gdr = dlsym(cu.lib, "cuFlushGPUDirectRDMAWrites");
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
#ifdef ZCC_HAVE_CUDA
  return zcc_cuda_device_count() > 0;
#else
  return 0;
#endif
}

int zcc_cuda_mem_range(const void *ptr, void **base, size_t *size) {
  if (zcc_cuda_device_count() == 0 || !cu.mem_range) return -1;
  CUdeviceptr_ b = 0;
  size_t s = 0;
  if (cu.mem_range(&b, &s, (CUdeviceptr_)(uintptr_t)ptr) != 0) return -1;
  *base = (void *)(uintptr_t)b;
  *size = s;
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

int zcc_cuda_is_host_ptr(const void *ptr) {
  if (zcc_cuda_device_count() == 0 || !cu.pointer_get_attribute) return 0;
  unsigned int type = 0;
  /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2; CU_MEMORYTYPE_HOST = 1 */
  if (cu.pointer_get_attribute(&type, 2, (CUdeviceptr_)(uintptr_t)ptr) != 0) return 0;
  return type == 1;
}

int zcc_cuda_buffer_id(const void *ptr, unsigned long long *id) {
  if (zcc_cuda_device_count() == 0 || !cu.pointer_get_attribute) return -1;
  /* CU_POINTER_ATTRIBUTE_BUFFER_ID = 7: unique per allocation, never reused */
  if (cu.pointer_get_attribute(id, 7, (CUdeviceptr_)(uintptr_t)ptr) != 0) return -1;
  return 0;
}

int zcc_cuda_device_info(int index, char *bus_id, size_t bus_cap, char *name, size_t name_cap,
                         int *arch) {
  if (index < 0 || index >= zcc_cuda_device_count() || !cu.device_get || !cu.bus_id ||
      !cu.name || !cu.attr)
    return -1;
  int d;
  if (cu.device_get(&d, index) != 0 || cu.bus_id(bus_id, (int)bus_cap, d) != 0) return -1;
  if (cu.name(name, (int)name_cap, d) != 0 && name_cap) name[0] = '\0';
  int major = 0, minor = 0;
  /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76 */
  cu.attr(&major, 75, d);
  cu.attr(&minor, 76, d);
  *arch = major * 10 + minor;
  return 0;
}

int zcc_cuda_can_access_peer(int a, int b) {
  int n = zcc_cuda_device_count();
  if (a < 0 || b < 0 || a >= n || b >= n || !cu.device_get || !cu.can_peer) return 0;
  int da, db, can = 0;
  if (cu.device_get(&da, a) != 0 || cu.device_get(&db, b) != 0 || cu.can_peer(&can, da, db) != 0)
    return 0;
  return can;
}

/* cuMemHostRegister flags: portable (every context) and device-mapped. */
#define CU_HOST_REGISTER_PORTABLE_ 0x01
#define CU_HOST_REGISTER_DEVICEMAP_ 0x02

zccResult_t zcc_cuda_host_register(void *ptr, size_t size, void **dev) {
  if (zcc_cuda_device_count() == 0 || !cu.host_register || !cu.host_dev_ptr)
    return zcc_error(zccInvalidUsage, "pinning host memory needs a CUDA device");
  CUresult_ rc = cu.host_register(ptr, size, CU_HOST_REGISTER_PORTABLE_ | CU_HOST_REGISTER_DEVICEMAP_);
  if (rc != 0) return cu_error(rc, "cuMemHostRegister");
  CUdeviceptr_ d = 0;
  rc = cu.host_dev_ptr(&d, ptr, 0);
  if (rc != 0) {
    cu.host_unregister(ptr);
    return cu_error(rc, "cuMemHostGetDevicePointer");
  }
  *dev = (void *)(uintptr_t)d;
  return zccSuccess;
}

zccResult_t zcc_cuda_host_unregister(void *ptr) {
  if (zcc_cuda_device_count() == 0 || !cu.host_unregister)
    return zcc_error(zccInvalidUsage, "unpinning host memory needs a CUDA device");
  CUresult_ rc = cu.host_unregister(ptr);
  if (rc != 0) return cu_error(rc, "cuMemHostUnregister");
  return zccSuccess;
}

int zcc_cuda_gdr_info(int ordinal, zcc_cuda_gdr_t *out) {
  memset(out, 0, sizeof(*out));
  int d;
  if (ordinal < 0 || ordinal >= zcc_cuda_device_count() || !cu.device_get || !cu.attr ||
      cu.device_get(&d, ordinal) != 0)
    return -1;
  /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED 116, _FLUSH_WRITES_OPTIONS 117,
     _WRITES_ORDERING 118, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124 */
  if (cu.attr(&out->gdr, 116, d) != 0) out->gdr = 0;
  if (cu.attr(&out->flush_options, 117, d) != 0) out->flush_options = 0;
  if (cu.attr(&out->ordering, 118, d) != 0) out->ordering = 0;
  if (cu.attr(&out->dmabuf, 124, d) != 0) out->dmabuf = 0;
  if (!cu.range_handle) out->dmabuf = 0;
  if (!cu.flush_gdr || !cu.ctx_get || !cu.ctx_set) out->flush_options = 0;
  return 0;
}

zccResult_t zcc_cuda_dmabuf_fd(void *ptr, size_t size, int *fd) {
  if (zcc_cuda_device_count() == 0 || !cu.range_handle)
    return zcc_error(zccInvalidUsage, "a dmabuf handle needs a CUDA driver that has "
                     "cuMemGetHandleForAddressRange");
  if (((uintptr_t)ptr | size) & 4095)
    return zcc_error(zccInvalidArgument, "a dmabuf handle needs page-aligned memory (%p, "
                     "%zu bytes)", ptr, size);
  int h = -1;
  /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1 */
  CUresult_ rc = cu.range_handle(&h, (CUdeviceptr_)(uintptr_t)ptr, size, 1, 0);
  if (rc != 0) return cu_error(rc, "cuMemGetHandleForAddressRange (dmabuf)");
  *fd = h;
  return zccSuccess;
}

void *zcc_cuda_ctx_current(void) {
  void *c = NULL;
  if (zcc_cuda_device_count() == 0 || !cu.ctx_get || cu.ctx_get(&c) != 0) return NULL;
  return c;
}

zccResult_t zcc_cuda_flush_gdr_writes(void *ctx) {
  if (zcc_cuda_device_count() == 0 || !cu.flush_gdr || !cu.ctx_set || !ctx)
    return zcc_error(zccInvalidUsage, "cuFlushGPUDirectRDMAWrites is not available");
  CUresult_ rc = cu.ctx_set(ctx);
  if (rc != 0) return cu_error(rc, "cuCtxSetCurrent");
  /* CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX 0, _TO_OWNER 100 */
  rc = cu.flush_gdr(0, 100);
  if (rc != 0) return cu_error(rc, "cuFlushGPUDirectRDMAWrites");
  return zccSuccess;
}
