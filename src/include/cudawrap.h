/*
 * The one wall between host code and CUDA: the driver library is loaded at
 * run time (dlopen), so one build runs on machines without it.
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
/* Is ptr device (or managed) memory known to the driver? */
int zcc_cuda_is_device_ptr(const void *ptr);

#endif /* ZCC_CUDAWRAP_H_ */
