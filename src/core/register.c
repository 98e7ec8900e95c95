/* Buffer registration and zcc-allocated memory. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "comm.h"
#include "cudawrap.h"
#include "debug.h"
#include "devops.h"
#include "hostmem.h"

zccResult_t zccCommRegister(const zccComm_t comm, void *buff, size_t size, void **handle) {
  zccResult_t res = zccSuccess;
  if (!buff) return zcc_error(zccInvalidArgument, "zccCommRegister: buff is NULL");
  if (!handle) return zcc_error(zccInvalidArgument, "zccCommRegister: handle is NULL");
  if (size == 0) return zcc_error(zccInvalidArgument, "zccCommRegister: size is 0");
  if ((uintptr_t)buff + size < (uintptr_t)buff)
    return zcc_error(zccInvalidArgument, "zccCommRegister: buff + size overflows");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommRegister", 0));
  if (comm->dev) {
    res = comm->dev->reg(comm, buff, size, handle);
    goto out;
  }
  if (comm->device < 0 && zcc_cuda_is_device_ptr(buff)) {
    res = zcc_error(zccInvalidUsage,
                    "zccCommRegister: %p is device memory and comm is a host "
                    "communicator", buff);
    goto out;
  }
  zcc_reg_t *r = malloc(sizeof(*r));
  if (!r) {
    res = zcc_error(zccSystemError, "zccCommRegister: out of memory");
    goto out;
  }
  r->buf = buff;
  r->size = size;
  /* Ordinary memory becomes shared memory that the host's peers map, so
     large allreduces on it run in place (hostmem.h); other memory is only
     recorded, and its collectives are staged. */
  r->region = NULL;
  if (zcc_cuda_is_host_ptr(buff) || zcc_cuda_is_host_ptr((char *)buff + size - 1))
    ZCC_INFO(INIT, "zccCommRegister: %p (%zu bytes) is CUDA-pinned host memory: its pages "
             "stay where they are, and collectives on it are staged", buff, size);
  else
    res = zcc_hostmem_register(buff, size, &r->region);
  if (res != zccSuccess) {
    free(r);
    goto out;
  }
  pthread_mutex_lock(&comm->reg_lock);
  r->next = comm->regs;
  comm->regs = r;
  pthread_mutex_unlock(&comm->reg_lock);
  ZCC_INFO(COLL, "registered %p (%zu bytes) with comm %s%s", buff, size, comm->name,
           r->region ? ", shared with the host's ranks" : "");
  *handle = r;
out:
  zcc_comm_leave(comm);
  return res;
}

zccResult_t zccCommDeregister(const zccComm_t comm, void *handle) {
  if (!handle) return zcc_error(zccInvalidArgument, "zccCommDeregister: handle is NULL");
  ZCC_CHECK(zcc_comm_enter(comm, "zccCommDeregister", 0));
  zccResult_t res = zccSuccess;
  if (comm->dev) {
    pthread_mutex_lock(&comm->reg_lock);
    res = comm->dev->dereg(comm, handle);
    pthread_mutex_unlock(&comm->reg_lock);
    zcc_comm_leave(comm);
    return res;
  }
  pthread_mutex_lock(&comm->reg_lock);
  zcc_reg_t **pp = &comm->regs;
  while (*pp && *pp != handle) pp = &(*pp)->next;
  if (*pp) {
    zcc_reg_t *r = *pp;
    *pp = r->next;
    zcc_hostmem_unregister(r->region);
    free(r);
  } else {
    res = zcc_error(zccInvalidArgument,
                    "zccCommDeregister: handle %p was not registered with this "
                    "communicator", handle);
  }
  pthread_mutex_unlock(&comm->reg_lock);
  zcc_comm_leave(comm);
  return res;
}

zccResult_t zccMemAlloc(void **ptr, size_t size) {
  if (!ptr) return zcc_error(zccInvalidArgument, "zccMemAlloc: ptr is NULL");
  if (size == 0) return zcc_error(zccInvalidArgument, "zccMemAlloc: size is 0");
  return zcc_cuda_mem_alloc(ptr, size);
}

zccResult_t zccMemFree(void *ptr) {
  if (!ptr) return zcc_error(zccInvalidArgument, "zccMemFree: ptr is NULL");
  return zcc_cuda_mem_free(ptr);
}
