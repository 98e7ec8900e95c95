/*
 * NVML and libibverbs, loaded with dlopen when detection first needs them,
 * so that one build runs where they are absent; the CUDA driver's queries go
 * through misc/cudawrap.c, the one wall between host code and CUDA. Only
 * the few entry points topology needs are resolved; their C types are
 * spelled here (the driver and NVML headers are not needed to build).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "cudawrap.h"
#include "debug.h"
#include "detect.h"

int zcc_topo_bus_normalize(const char *in, char *out, size_t cap) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  char tail;
  if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
    dom = 0;
    if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3) return -1;
  }
  if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7) return -1;
  snprintf(out, cap, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return 0;
}

/* ---- CUDA driver (through misc/cudawrap.c) ---- */

int zcc_topo_cuda_gpus(zcc_topo_gpu_info_t *out, int cap) {
  int n = zcc_cuda_device_count(), got = 0;
  for (int i = 0; i < n && got < cap; i++) {
    char bus[64];
    zcc_topo_gpu_info_t *g = &out[got];
    memset(g, 0, sizeof(*g));
    if (zcc_cuda_device_info(i, bus, sizeof(bus), g->model, sizeof(g->model), &g->arch) != 0)
      continue;
    if (zcc_topo_bus_normalize(bus, g->bus, sizeof(g->bus)) != 0) continue;
    g->cuda = i;
    got++;
  }
  return got;
}

int zcc_topo_cuda_peer(int a, int b) { return zcc_cuda_can_access_peer(a, b); }

/* ---- NVML ---- */

typedef void *nvml_device_t;
/* nvmlPciInfo_t, as filled by the _v2 calls. */
typedef struct {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info_t;

static struct {
  int ok;
  int (*handle_by_bus)(const char *, nvml_device_t *);
  int (*link_state)(nvml_device_t, unsigned, int *);
  int (*link_version)(nvml_device_t, unsigned, unsigned *);
  int (*remote_pci)(nvml_device_t, unsigned, nvml_pci_info_t *);
  int (*remote_type)(nvml_device_t, unsigned, int *);
} nvml;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_load(void) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    ZCC_INFO(TOPO, "libnvidia-ml.so.1 not loaded (%s): no NVLink data", dlerror());
    return;
  }
  int (*init)(void);
  *(void **)&init = dlsym(lib, "nvmlInit_v2");
  *(void **)&nvml.handle_by_bus = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&nvml.link_state = dlsym(lib, "nvmlDeviceGetNvLinkState");
  *(void **)&nvml.link_version = dlsym(lib, "nvmlDeviceGetNvLinkVersion");
  *(void **)&nvml.remote_pci = dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  /* Older drivers lack it: remote ends are then told apart by bus id. */
  *(void **)&nvml.remote_type = dlsym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!init || !nvml.handle_by_bus || !nvml.link_state || !nvml.remote_pci) {
    ZCC_WARN("libnvidia-ml.so.1 lacks an NVLink query entry point: no NVLink data");
    return;
  }
  int r = init();
  if (r != 0) {
    ZCC_INFO(TOPO, "nvmlInit failed with NVML error %d: no NVLink data", r);
    return;
  }
  nvml.ok = 1;
}

int zcc_topo_nvml_links(const char *bus, zcc_topo_nvlink_info_t *out, int cap) {
  pthread_once(&nvml_once, nvml_load);
  if (!nvml.ok) return 0;
  nvml_device_t dev;
  if (nvml.handle_by_bus(bus, &dev) != 0) {
    ZCC_INFO(TOPO, "nvml knows no gpu at %s: no NVLink data for it", bus);
    return 0;
  }
  int got = 0;
  for (unsigned l = 0; l < ZCC_TOPO_MAX_NVLINKS && got < cap; l++) {
    int state = 0;
    if (nvml.link_state(dev, l, &state) != 0 || state != 1) continue;
    nvml_pci_info_t pci;
    memset(&pci, 0, sizeof(pci));
    if (nvml.remote_pci(dev, l, &pci) != 0) continue;
    zcc_topo_nvlink_info_t *x = &out[got];
    memset(x, 0, sizeof(*x));
    const char *rb = pci.bus_id[0] ? pci.bus_id : pci.bus_id_legacy;
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    pci.bus_id_legacy[sizeof(pci.bus_id_legacy) - 1] = '\0';
    /* VMs mask the far end ("FFFFFFFF:FF:FF.0"): the link stays, its end unnamed. */
    if (zcc_topo_bus_normalize(rb, x->remote_bus, sizeof(x->remote_bus)) != 0)
      x->remote_bus[0] = '\0';
    unsigned version = 0;
    /* nvmlNvlinkVersion_t: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0 */
    if (nvml.link_version && nvml.link_version(dev, l, &version) == 0) {
      static const int gen[] = {0, 1, 2, 2, 3, 3, 4, 5};
      x->version = version < sizeof(gen) / sizeof(gen[0]) ? gen[version] : 5;
    }
    int type = -1;
    if (nvml.remote_type && nvml.remote_type(dev, l, &type) == 0)
      x->remote = type == 2 ? ZCC_NVL_REMOTE_SWITCH : type == 1 ? ZCC_NVL_REMOTE_CPU
                                                                : ZCC_NVL_REMOTE_GPU;
    else
      x->remote = ZCC_NVL_REMOTE_GPU; /* detection re-labels unknown buses as switches */
    got++;
  }
  return got;
}

/* ---- libibverbs ---- */

static struct {
  int ok;
  struct ibv_device **(*list)(int *);
  void (*free_list)(struct ibv_device **);
  const char *(*name)(struct ibv_device *);
  struct ibv_context *(*open)(struct ibv_device *);
  int (*close)(struct ibv_context *);
  int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
  int (*query_port)(struct ibv_context *, uint8_t, void *);
} ibv;
static pthread_once_t ibv_once = PTHREAD_ONCE_INIT;

static void ibv_load(void) {
  void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    ZCC_INFO(TOPO, "libibverbs.so.1 not loaded (%s): RDMA port speeds unknown", dlerror());
    return;
  }
  *(void **)&ibv.list = dlsym(lib, "ibv_get_device_list");
  *(void **)&ibv.free_list = dlsym(lib, "ibv_free_device_list");
  *(void **)&ibv.name = dlsym(lib, "ibv_get_device_name");
  *(void **)&ibv.open = dlsym(lib, "ibv_open_device");
  *(void **)&ibv.close = dlsym(lib, "ibv_close_device");
  *(void **)&ibv.query_device = dlsym(lib, "ibv_query_device");
  *(void **)&ibv.query_port = dlsym(lib, "ibv_query_port");
  ibv.ok = ibv.list && ibv.free_list && ibv.name && ibv.open && ibv.close &&
           ibv.query_device && ibv.query_port;
  if (!ibv.ok) ZCC_WARN("libibverbs.so.1 lacks a query entry point: RDMA port speeds unknown");
}

static struct ibv_context *ibv_open_by_name(const char *dev, struct ibv_device ***list) {
  pthread_once(&ibv_once, ibv_load);
  *list = NULL;
  if (!ibv.ok) return NULL;
  int n = 0;
  struct ibv_device **l = ibv.list(&n);
  if (!l) return NULL;
  for (int i = 0; i < n; i++)
    if (strcmp(ibv.name(l[i]), dev) == 0) {
      struct ibv_context *c = ibv.open(l[i]);
      if (c) {
        *list = l;
        return c;
      }
    }
  ibv.free_list(l);
  return NULL;
}

int zcc_topo_ib_ports(const char *dev) {
  struct ibv_device **list;
  struct ibv_context *c = ibv_open_by_name(dev, &list);
  if (!c) return 0;
  struct ibv_device_attr a;
  int n = ibv.query_device(c, &a) == 0 ? a.phys_port_cnt : 0;
  ibv.close(c);
  ibv.free_list(list);
  return n;
}

double zcc_topo_ib_speed(const char *dev, int port) {
  struct ibv_device **list;
  struct ibv_context *c = ibv_open_by_name(dev, &list);
  if (!c) return 0;
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  double gbps = 0;
  if (ibv.query_port(c, (uint8_t)port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
    /* Lanes from active_width, data rate per lane (Gb/s) from active_speed. */
    int lanes = pa.active_width == 1 ? 1 : pa.active_width == 2 ? 4 : pa.active_width == 4 ? 8
              : pa.active_width == 8 ? 12 : pa.active_width == 16 ? 2 : 0;
    double lane = pa.active_speed == 1 ? 2.0 : pa.active_speed == 2 ? 4.0
                : pa.active_speed == 4 ? 8.0 : pa.active_speed == 8 ? 10.0
                : pa.active_speed == 16 ? 13.64 : pa.active_speed == 32 ? 25.0
                : pa.active_speed == 64 ? 50.0 : pa.active_speed == 128 ? 100.0 : 0;
    gbps = lanes * lane;
  }
  ibv.close(c);
  ibv.free_list(list);
  return gbps;
}
