/* The network plug-ins the net transport can drive, by name (net.h). */
#include <string.h>

#include "debug.h"
#include "net.h"
#include "param.h"

ZCC_PARAM_STR(net_plugin, "NET_PLUGIN", "ib",
              "network plug-in of the net transport: ib or socket");

static const zcc_net_ops_t *const net_plugins[] = {&zcc_net_ib_ops,
                                                   &zcc_net_socket_ops};

const zcc_net_ops_t *zcc_net_find(const char *name) {
  if (!name)
    name = zcc_param_net_plugin();
  for (size_t i = 0; i < sizeof(net_plugins) / sizeof(net_plugins[0]); i++)
    if (strcmp(net_plugins[i]->name, name) == 0)
      return net_plugins[i];
  zcc_error(zccInvalidArgument,
            "no network plug-in named \"%s\" (ZCC_NET_PLUGIN: ib or socket)",
            name);
  return NULL;
}
