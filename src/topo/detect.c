/*
 * Detection of this machine: hwloc 2.x for NUMA nodes, packages, the PCIe
 * tree (bridges and switches), NICs and GPUs as PCI devices; the CUDA
 * driver for which CUDA index each GPU is and peer access; NVML for
 * NVLinks and what is at their far end; libibverbs for RDMA port speeds.
 * In a VM whose PCIe tree is flattened (GPUs straight under the host
 * bridge), the NVLinks alone still give GPU-to-GPU paths their bandwidth.
 */
#include <ctype.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "debug.h"
#include "socket.h"
#include "detect.h"
#include "topo.h"

#define MAX_CPUS 64

typedef struct det {
  zcc_topo_t *g;
  int host;
  hwloc_topology_t topo;
  int ncpu;
  int cpu_node[MAX_CPUS];       /* graph node of each NUMA node */
  hwloc_obj_t numa[MAX_CPUS];
  zcc_topo_gpu_info_t cuda[ZCC_TOPO_MAX_GPUS];
  int ncuda;
  int ngpu, nnic, npci, nnvs;
  int net_rdma, net_eth;        /* network nodes, -1 if none */
} det_t;

/* PCIe generation and width from sysfs; 0 when the VM hides them. */
static void sysfs_link(const char *bus, int *gen, int *width) {
  char path[160], buf[64];
  *gen = *width = 0;
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_speed", bus);
  FILE *f = fopen(path, "r");
  if (f) {
    double gts = 0;
    if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%lf", &gts) == 1)
      *gen = gts >= 60 ? 6 : gts >= 30 ? 5 : gts >= 15 ? 4 : gts >= 7 ? 3 : gts >= 4 ? 2
           : gts > 0 ? 1 : 0;
    fclose(f);
  }
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_width", bus);
  f = fopen(path, "r");
  if (f) {
    int w = 0;
    if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%d", &w) == 1 && w > 0 && w <= 32) *width = w;
    fclose(f);
  }
}

static void bus_of(const struct hwloc_pcidev_attr_s *p, char *out, size_t cap) {
  snprintf(out, cap, "%04x:%02x:%02x.%x", p->domain, p->bus, p->dev, p->func);
}

static int is_gpu(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE && o->attr->pcidev.vendor_id == 0x10de &&
         (o->attr->pcidev.class_id >> 8) == 0x03;
}

static int osdev_kind(hwloc_obj_t pci, hwloc_obj_osdev_type_t t) {
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE && c->attr->osdev.type == t) return 1;
  return 0;
}

static int is_nic(hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_PCI_DEVICE) return 0;
  return osdev_kind(o, HWLOC_OBJ_OSDEV_OPENFABRICS) || osdev_kind(o, HWLOC_OBJ_OSDEV_NETWORK);
}

static int relevant(hwloc_obj_t o) {
  if (is_gpu(o) || is_nic(o)) return 1;
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
    if (relevant(c)) return 1;
  return 0;
}

/* The CPU (NUMA) node nearest an I/O object: the first NUMA node under its
 * non-I/O ancestor. */
static int cpu_of(det_t *d, hwloc_obj_t io) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(d->topo, io);
  for (int i = 0; i < d->ncpu && anc; i++)
    if (hwloc_bitmap_isincluded(d->numa[i]->nodeset, anc->nodeset)) return d->cpu_node[i];
  return d->ncpu ? d->cpu_node[0] : -1;
}

static zccResult_t add_pcie_link(det_t *d, int child, int parent, const char *bus,
                                 float hwloc_speed, int default_gen) {
  int gen, width;
  sysfs_link(bus, &gen, &width);
  double bw = 0;
  if (!gen && hwloc_speed > 0) bw = hwloc_speed * 0.8;
  if (!gen && bw <= 0) gen = default_gen;
  return zcc_topo_add_link(d->g, child, parent, ZCC_LINK_PCIE, gen, width, bw, -1);
}

static zccResult_t add_gpu(det_t *d, hwloc_obj_t o, int parent) {
  char bus[ZCC_TOPO_BUS_LEN], id[ZCC_TOPO_ID_LEN];
  bus_of(&o->attr->pcidev, bus, sizeof(bus));
  snprintf(id, sizeof(id), "gpu%d", d->ngpu++);
  int idx;
  ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_GPU, id, &idx));
  zcc_topo_node_t *n = &d->g->nodes[idx];
  snprintf(n->bus, sizeof(n->bus), "%s", bus);
  for (int i = 0; i < d->ncuda; i++)
    if (strcmp(d->cuda[i].bus, bus) == 0) {
      n->dev = d->cuda[i].cuda;
      n->arch = d->cuda[i].arch;
      snprintf(n->model, sizeof(n->model), "%s", d->cuda[i].model);
    }
  if (!n->model[0] && o->name) snprintf(n->model, sizeof(n->model), "%s", o->name);
  int arch = n->arch;
  return add_pcie_link(d, idx, parent, bus, o->attr->pcidev.linkspeed,
                       arch >= 90 ? 5 : arch >= 80 ? 4 : 3);
}

static double eth_speed(const char *ifname) {
  char path[160];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "r");
  long mbps = -1;
  if (f) {
    if (fscanf(f, "%ld", &mbps) != 1) mbps = -1;
    fclose(f);
  }
  return mbps > 0 ? (double)mbps / 1000.0 : 0;
}

static zccResult_t add_nic_port(det_t *d, hwloc_obj_t pci, const char *name, int port,
                                double gbps, int net, int parent) {
  char id[ZCC_TOPO_ID_LEN], bus[ZCC_TOPO_BUS_LEN];
  snprintf(id, sizeof(id), "nic%d", d->nnic++);
  bus_of(&pci->attr->pcidev, bus, sizeof(bus));
  if (gbps <= 0) {
    ZCC_INFO(TOPO, "nic %s port %d: speed unknown, assuming 10 Gb/s", name, port);
    gbps = 10;
  }
  int idx;
  ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_NIC, id, &idx));
  zcc_topo_node_t *n = &d->g->nodes[idx];
  snprintf(n->bus, sizeof(n->bus), "%s", bus);
  snprintf(n->model, sizeof(n->model), "%s", name);
  n->dev = port;
  n->speed = gbps;
  n->net = net;
  return add_pcie_link(d, idx, parent, bus, pci->attr->pcidev.linkspeed, 3);
}

/*
 * No PCI NIC (a container's veth, a VM's paravirtual NIC hwloc does not show
 * as a PCI device): the interface the socket transport uses is this host's
 * NIC, so that a communicator across hosts still has a plan. It hangs off the
 * first CPU with no PCI bus; its speed is the interface's, or 10 Gb/s.
 */
static zccResult_t add_virtual_nic(det_t *d, const char *ifname) {
  char id[ZCC_TOPO_ID_LEN];
  snprintf(id, sizeof(id), "nic%d", d->nnic++);
  double gbps = eth_speed(ifname);
  if (gbps <= 0) gbps = 10;
  int idx;
  ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_NIC, id, &idx));
  zcc_topo_node_t *n = &d->g->nodes[idx];
  snprintf(n->model, sizeof(n->model), "%s (no PCI device)", ifname);
  n->dev = 1;
  n->speed = gbps;
  n->net = d->net_eth;
  ZCC_INFO(TOPO, "no PCI nic: interface %s (%.0f Gb/s) is this host's nic", ifname, gbps);
  return zcc_topo_add_link(d->g, idx, d->cpu_node[0], ZCC_LINK_PCIE, 3, 16, 0, -1);
}

static zccResult_t add_nic(det_t *d, hwloc_obj_t o, int parent) {
  int rdma = osdev_kind(o, HWLOC_OBJ_OSDEV_OPENFABRICS);
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
    if (rdma && c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      int ports = zcc_topo_ib_ports(c->name);
      for (int p = 1; p <= (ports > 0 ? ports : 1); p++)
        ZCC_CHECK(add_nic_port(d, o, c->name, p, zcc_topo_ib_speed(c->name, p), d->net_rdma,
                               parent));
    } else if (!rdma && c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      ZCC_CHECK(add_nic_port(d, o, c->name, 1, eth_speed(c->name), d->net_eth, parent));
    }
  }
  return zccSuccess;
}

static zccResult_t walk(det_t *d, hwloc_obj_t o, int parent) {
  if (!relevant(o)) return zccSuccess;
  if (o->type == HWLOC_OBJ_BRIDGE) {
    int here = parent;
    if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
      char bus[ZCC_TOPO_BUS_LEN], id[ZCC_TOPO_ID_LEN];
      bus_of(&o->attr->bridge.upstream.pci, bus, sizeof(bus));
      snprintf(id, sizeof(id), "pci%d", d->npci++);
      ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_PCI, id, &here));
      snprintf(d->g->nodes[here].bus, ZCC_TOPO_BUS_LEN, "%s", bus);
      ZCC_CHECK(add_pcie_link(d, here, parent, bus, o->attr->bridge.upstream.pci.linkspeed, 3));
    }
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) ZCC_CHECK(walk(d, c, here));
    return zccSuccess;
  }
  if (is_gpu(o)) return add_gpu(d, o, parent);
  if (is_nic(o)) return add_nic(d, o, parent);
  return zccSuccess;
}

static zccResult_t add_cpus(det_t *d) {
  int n = hwloc_get_nbobjs_by_type(d->topo, HWLOC_OBJ_NUMANODE);
  if (n < 1) n = 0;
  if (n > MAX_CPUS) {
    ZCC_WARN("topology: %d NUMA nodes, keeping the first %d", n, MAX_CPUS);
    n = MAX_CPUS;
  }
  for (int i = 0; i < n; i++) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(d->topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(d->topo, HWLOC_OBJ_PACKAGE, numa);
    if (!pkg && numa->cpuset && !hwloc_bitmap_iszero(numa->cpuset))
      pkg = hwloc_get_next_obj_covering_cpuset_by_type(d->topo, numa->cpuset,
                                                       HWLOC_OBJ_PACKAGE, NULL);
    char id[ZCC_TOPO_ID_LEN];
    snprintf(id, sizeof(id), "cpu%u", numa->os_index);
    int idx;
    ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_CPU, id, &idx));
    zcc_topo_node_t *c = &d->g->nodes[idx];
    c->dev = (int)numa->os_index;
    c->package = pkg ? (int)pkg->os_index : 0;
    const char *vendor = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUVendor") : NULL;
    const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    const char *number = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModelNumber") : NULL;
    /* model holds "<vendor> <model number>|<model name>" trimmed to fit. */
    snprintf(c->model, sizeof(c->model), "%s %s|%s", vendor ? vendor : "unknown",
             number ? number : "0", model ? model : "");
    d->numa[d->ncpu] = numa;
    d->cpu_node[d->ncpu++] = idx;
  }
  for (int i = 0; i < d->ncpu; i++)
    for (int j = i + 1; j < d->ncpu; j++) {
      ZCC_CHECK(zcc_topo_add_link(d->g, d->cpu_node[i], d->cpu_node[j], ZCC_LINK_SMP, 0, 0, 0,
                                  -1));
    }
  return zccSuccess;
}

static int gpu_by_bus(det_t *d, const char *bus) {
  const zcc_topo_host_t *h = &d->g->hosts[d->host];
  for (int i = h->first; i < h->first + h->nnodes; i++)
    if (d->g->nodes[i].kind == ZCC_TOPO_GPU && strcmp(d->g->nodes[i].bus, bus) == 0) return i;
  return -1;
}

static int nvs_by_bus(det_t *d, const char *bus) {
  const zcc_topo_host_t *h = &d->g->hosts[d->host];
  for (int i = h->first; i < h->first + h->nnodes; i++)
    if (d->g->nodes[i].kind == ZCC_TOPO_NVS && strcmp(d->g->nodes[i].bus, bus) == 0) return i;
  return -1;
}

static int nvlink_gen(int arch, int version) {
  if (arch >= 100) return 5;
  if (arch >= 90) return 4;
  if (arch >= 80) return 3;
  if (arch >= 70) return 2;
  if (arch >= 60) return 1;
  return version >= 1 && version <= 5 ? version : 4; /* NVML's generation, else Hopper's */
}

static zccResult_t add_nvlinks(det_t *d) {
  const zcc_topo_host_t *h = &d->g->hosts[d->host];
  int first = h->first, end = h->first + h->nnodes;
  for (int i = first; i < end; i++) {
    if (d->g->nodes[i].kind != ZCC_TOPO_GPU) continue;
    zcc_topo_nvlink_info_t links[ZCC_TOPO_MAX_NVLINKS];
    char bus[ZCC_TOPO_BUS_LEN];
    snprintf(bus, sizeof(bus), "%s", d->g->nodes[i].bus);
    int arch = d->g->nodes[i].arch;
    int n = zcc_topo_nvml_links(bus, links, ZCC_TOPO_MAX_NVLINKS);
    /* Group the links by their far end. */
    int done[ZCC_TOPO_MAX_NVLINKS] = {0};
    for (int l = 0; l < n; l++) {
      if (done[l]) continue;
      int count = 0;
      for (int m = l; m < n; m++)
        if (!done[m] && strcmp(links[m].remote_bus, links[l].remote_bus) == 0) {
          done[m] = 1;
          count++;
        }
      int gen = nvlink_gen(arch, links[l].version);
      int peer = links[l].remote_bus[0] ? gpu_by_bus(d, links[l].remote_bus) : -1;
      if (peer >= 0) {
        if (peer > i)
          ZCC_CHECK(zcc_topo_add_link(d->g, i, peer, ZCC_LINK_NVLINK, gen, count, 0, -1));
        continue;
      }
      if (links[l].remote == ZCC_NVL_REMOTE_CPU) {
        ZCC_CHECK(zcc_topo_add_link(d->g, i, d->ncpu ? d->cpu_node[0] : i, ZCC_LINK_NVLINK, gen,
                                    count, 0, -1));
        continue;
      }
      /*
       * A switch, or a GPU this process cannot see: an NVSwitch by its bus.
       * A VM given some GPUs of an NVSwitch server sees its links end at
       * masked buses: all of those reach one NVSwitch fabric, hidden.
       */
      int sw = nvs_by_bus(d, links[l].remote_bus);
      if (sw < 0) {
        char id[ZCC_TOPO_ID_LEN];
        snprintf(id, sizeof(id), "nvs%d", d->nnvs++);
        ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_NVS, id, &sw));
        snprintf(d->g->nodes[sw].bus, ZCC_TOPO_BUS_LEN, "%s", links[l].remote_bus);
        snprintf(d->g->nodes[sw].model, ZCC_TOPO_NAME_LEN, "%s",
                 links[l].remote_bus[0] ? "NVSwitch" : "NVSwitch fabric (bus hidden by the VM)");
      }
      ZCC_CHECK(zcc_topo_add_link(d->g, i, sw, ZCC_LINK_NVLINK, gen, count, 0, -1));
    }
  }
  return zccSuccess;
}

static void report_peers(det_t *d) {
  for (int a = 0; a < d->ncuda; a++)
    for (int b = 0; b < d->ncuda; b++)
      if (a != b && !zcc_topo_cuda_peer(d->cuda[a].cuda, d->cuda[b].cuda))
        ZCC_INFO(TOPO, "cuda device %d cannot access device %d as a peer: their traffic "
                       "goes through host memory", d->cuda[a].cuda, d->cuda[b].cuda);
}

/* CUDA devices that hwloc did not show (no PCI data): under the first CPU. */
static zccResult_t add_unseen_gpus(det_t *d) {
  for (int i = 0; i < d->ncuda; i++) {
    if (gpu_by_bus(d, d->cuda[i].bus) >= 0) continue;
    char id[ZCC_TOPO_ID_LEN];
    snprintf(id, sizeof(id), "gpu%d", d->ngpu++);
    int idx;
    ZCC_CHECK(zcc_topo_add_node(d->g, d->host, ZCC_TOPO_GPU, id, &idx));
    zcc_topo_node_t *n = &d->g->nodes[idx];
    snprintf(n->bus, sizeof(n->bus), "%s", d->cuda[i].bus);
    snprintf(n->model, sizeof(n->model), "%s", d->cuda[i].model);
    n->dev = d->cuda[i].cuda;
    n->arch = d->cuda[i].arch;
    if (d->ncpu)
      ZCC_CHECK(zcc_topo_add_link(d->g, idx, d->cpu_node[0], ZCC_LINK_PCIE,
                                  n->arch >= 90 ? 5 : 4, 16, 0, -1));
  }
  return zccSuccess;
}

static void scan_networks(det_t *d, int *rdma, int *eth) {
  *rdma = *eth = 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(d->topo, o));) {
    if (!is_nic(o)) continue;
    if (osdev_kind(o, HWLOC_OBJ_OSDEV_OPENFABRICS)) *rdma = 1;
    else *eth = 1;
  }
}

/*
 * hwloc loads its plugins with the first topology and unloads them with the
 * last; its PCI plugin (libpciaccess) keeps allocations it never frees, which
 * then read as leaks from an unknown module. One empty topology kept for the
 * life of the process keeps the plugins loaded, so detecting again (a process
 * detects once, src/topo/topo.c) costs no reload either.
 */
static pthread_once_t keep_once = PTHREAD_ONCE_INIT;
static hwloc_topology_t keep_plugins;
static void keep_plugins_loaded(void) {
  if (hwloc_topology_init(&keep_plugins) != 0) keep_plugins = NULL;
}

zccResult_t zcc_topo_detect(zcc_topo_t **out) {
  pthread_once(&keep_once, keep_plugins_loaded);
  det_t d;
  memset(&d, 0, sizeof(d));
  d.net_rdma = d.net_eth = -1;
  zccResult_t res = zccSuccess;
  if (hwloc_topology_init(&d.topo) != 0)
    return zcc_error(zccSystemError, "topology: hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(d.topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  /* GPUs are found through CUDA and NVML below; hwloc's own GPU plugins
   * would load those libraries (and an X display) a second time. */
  static const char *const skip[] = {"gl", "opencl", "cuda", "nvml", "rsmi", "levelzero"};
  for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
    hwloc_topology_set_components(d.topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
  if (hwloc_topology_load(d.topo) != 0) {
    hwloc_topology_destroy(d.topo);
    return zcc_error(zccSystemError, "topology: hwloc_topology_load failed");
  }
  ZCC_CHECK_GOTO(zcc_topo_create(&d.g), res, fail_hwloc);
  int rdma, eth;
  scan_networks(&d, &rdma, &eth);
  char vif[64] = "";
  if (!rdma && !eth) {
    zcc_sockaddr_t a;
    if (zcc_socket_pick_if(&a, vif, sizeof(vif)) != zccSuccess) {
      vif[0] = '\0';
      zcc_clear_last_error(); /* no interface: detection goes on without a nic */
    } else if (strcmp(vif, "lo") == 0) {
      vif[0] = '\0'; /* nothing to reach other hosts through */
    }
    eth = vif[0] != '\0';
  }
  if (rdma) {
    ZCC_CHECK_GOTO(zcc_topo_add_node(d.g, -1, ZCC_TOPO_NET, "rdma", &d.net_rdma), res, fail);
    snprintf(d.g->nodes[d.net_rdma].model, ZCC_TOPO_NAME_LEN, "infiniband/roce");
  }
  if (eth) {
    ZCC_CHECK_GOTO(zcc_topo_add_node(d.g, -1, ZCC_TOPO_NET, "eth", &d.net_eth), res, fail);
    snprintf(d.g->nodes[d.net_eth].model, ZCC_TOPO_NAME_LEN, "ethernet");
  }
  char hostname[ZCC_TOPO_NAME_LEN];
  if (gethostname(hostname, sizeof(hostname)) != 0) snprintf(hostname, sizeof(hostname), "localhost");
  hostname[sizeof(hostname) - 1] = '\0';
  if (!hostname[0]) snprintf(hostname, sizeof(hostname), "localhost");
  ZCC_CHECK_GOTO(zcc_topo_add_host(d.g, hostname, &d.host), res, fail);
  ZCC_CHECK_GOTO(add_cpus(&d), res, fail);
  d.ncuda = zcc_topo_cuda_gpus(d.cuda, ZCC_TOPO_MAX_GPUS);
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_bridge(d.topo, o));) {
    if (o->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST) continue;
    int cpu = cpu_of(&d, o);
    if (cpu < 0) continue;
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
      ZCC_CHECK_GOTO(walk(&d, c, cpu), res, fail);
  }
  /* PCI devices outside any host bridge (some VMs): straight under their CPU. */
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(d.topo, o));) {
    if (o->parent && o->parent->type == HWLOC_OBJ_BRIDGE) continue;
    int cpu = cpu_of(&d, o);
    if (cpu >= 0) ZCC_CHECK_GOTO(walk(&d, o, cpu), res, fail);
  }
  ZCC_CHECK_GOTO(add_unseen_gpus(&d), res, fail);
  if (d.nnic == 0 && vif[0] && d.ncpu > 0) ZCC_CHECK_GOTO(add_virtual_nic(&d, vif), res, fail);
  ZCC_CHECK_GOTO(add_nvlinks(&d), res, fail);
  ZCC_CHECK_GOTO(zcc_topo_attach_nets(d.g, d.host), res, fail);
  report_peers(&d);
  ZCC_CHECK_GOTO(zcc_topo_finalize(d.g), res, fail);
  ZCC_INFO(TOPO, "detected %s: %d cpus, %d gpus, %d nics, %d pci switches, %d nvswitches",
           hostname, d.ncpu, d.ngpu, d.nnic, d.npci, d.nnvs);
  hwloc_topology_destroy(d.topo);
  *out = d.g;
  return zccSuccess;
fail:
  zcc_topo_free(d.g);
fail_hwloc:
  hwloc_topology_destroy(d.topo);
  return res;
}
