/*
 * CUDA for the code that every build has (core, topology): the driver
 * library is loaded at run time (dlopen), so one build runs on machines
 * without it. The GPU path (gpu.h: transport/p2p.c, exec/gpu.c)
 * is compiled only with CUDA and calls the CUDA runtime directly.
 */
#ifndef ZCC_CUDAWRAP_H_
#define ZCC_CUDAWRAP_H_

#include <stddef.h>

#include "zcc.h"

/* Number of CUDA devices (0 when libcuda or a GPU is absent). */
int zcc_cuda_device_count(void);
/* Whether GPU communicators are built into this library and a GPU exists. */
int zcc_cuda_gpu_path_available(void);
/* Device memory through the driver, in the calling thread's current context. */
zccResult_t zcc_cuda_mem_alloc(void **ptr, size_t size);
zccResult_t zcc_cuda_mem_free(void *ptr);
/*
 * CUDA device `index`: its PCI bus id as the driver prints it, its name and
 * compute capability x10. 0 on success, -1 when there is no such device.
 */
int zcc_cuda_device_info(int index, char *bus_id, size_t bus_cap, char *name, size_t name_cap,
                         int *arch);
/* Can device a access device b's memory directly? 0 when unknown. */
int zcc_cuda_can_access_peer(int a, int b);
/* The allocation holding device pointer ptr: its base and size; 0 or -1. */
int zcc_cuda_mem_range(const void *ptr, void **base, size_t *size);
/*
 * The process-wide id of the allocation holding ptr (never reused, so a
 * freed or reallocated range has another or none); 0, or -1 when the
 * driver knows no allocation there.
 */
int zcc_cuda_buffer_id(const void *ptr, unsigned long long *id);
/* Is ptr device (or managed) memory known to the driver? */
int zcc_cuda_is_device_ptr(const void *ptr);
/* 1 if ptr is host memory CUDA knows (cudaHostAlloc, cudaHostRegister):
   pinned, so its pages must not move. */
int zcc_cuda_is_host_ptr(const void *ptr);
/*
 * Pin host memory [ptr, ptr + size) for every context and map it into the
 * current device: *dev is its device address (kernels load and store it).
 */
zccResult_t zcc_cuda_host_register(void *ptr, size_t size, void **dev);
zccResult_t zcc_cuda_host_unregister(void *ptr);

/* GPUDirect RDMA as the driver reports it for a device (its attributes). */
typedef struct zcc_cuda_gdr {
  int gdr;           /* GPUDirect RDMA supported (nvidia_p2p_get_pages: peermem) */
  int dmabuf;        /* dmabuf handles for device memory (cuMemGetHandleForAddressRange) */
  int flush_options; /* bit 0: cuFlushGPUDirectRDMAWrites works */
  int ordering;      /* 0 none, 100 the owner consumes remote writes in order, 200 all */
} zcc_cuda_gdr_t;
/* 0, or -1 when there is no such device (all fields 0). */
int zcc_cuda_gdr_info(int ordinal, zcc_cuda_gdr_t *out);
/* A dmabuf file descriptor for the device range [ptr, ptr + size), both
   page-aligned; the caller closes it. */
zccResult_t zcc_cuda_dmabuf_fd(void *ptr, size_t size, int *fd);
/* The calling thread's current context, or NULL. */
void *zcc_cuda_ctx_current(void);
/* Make ctx current in the calling thread and wait until the network's writes
   into its memory are visible to it (cuFlushGPUDirectRDMAWrites). */
zccResult_t zcc_cuda_flush_gdr_writes(void *ctx);

#endif /* ZCC_CUDAWRAP_H_ */
