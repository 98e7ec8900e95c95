/*
 * What detection learns from the libraries loaded at run time (CUDA driver,
 * NVML, libibverbs). Each call returns nothing when its library or the
 * device is absent; none of them fails the detection.
 */
#ifndef ZCC_TOPO_DETECT_H_
#define ZCC_TOPO_DETECT_H_

#include "topo.h"

#define ZCC_TOPO_MAX_GPUS 64
#define ZCC_TOPO_MAX_NVLINKS 18

typedef struct zcc_topo_gpu_info {
  char bus[ZCC_TOPO_BUS_LEN]; /* normalised "dddd:bb:dd.f" */
  int cuda;                   /* CUDA device index */
  int arch;                   /* compute capability x10 */
  char model[ZCC_TOPO_NAME_LEN];
} zcc_topo_gpu_info_t;

typedef enum {
  ZCC_NVL_REMOTE_GPU = 0,
  ZCC_NVL_REMOTE_SWITCH,
  ZCC_NVL_REMOTE_CPU
} zcc_nvl_remote_t;

typedef struct zcc_topo_nvlink_info {
  int version;                       /* NVLink generation, 0 unknown */
  zcc_nvl_remote_t remote;
  char remote_bus[ZCC_TOPO_BUS_LEN]; /* "" when NVML masks it (VMs) */
} zcc_topo_nvlink_info_t;

/* CUDA devices with their PCI bus ids; returns how many (0 without CUDA). */
int zcc_topo_cuda_gpus(zcc_topo_gpu_info_t *out, int cap);
/* 1 when CUDA device a can access device b's memory as a peer. */
int zcc_topo_cuda_peer(int a, int b);
/* Active NVLinks of the GPU at `bus` (0 without NVML). */
int zcc_topo_nvml_links(const char *bus, zcc_topo_nvlink_info_t *out, int cap);
/* Speed of an RDMA port in Gb/s through libibverbs (0: unknown). */
double zcc_topo_ib_speed(const char *dev, int port);
/* Ports of an RDMA device (0: unknown or no libibverbs). */
int zcc_topo_ib_ports(const char *dev);
/* "0000:18:00.0" from any "d:b:d.f" spelling; -1 if it is not one. */
int zcc_topo_bus_normalize(const char *in, char *out, size_t cap);

#endif /* ZCC_TOPO_DETECT_H_ */
