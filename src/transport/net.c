/* The network plug-ins the net transport can drive, by name (net.h). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "debug.h"
#include "net.h"
#include "param.h"

ZCC_PARAM_STR(net_plugin, "NET_PLUGIN", NULL,
              "network plug-in of the net transport: ib or socket; unset: ib, and for GPU "
              "communicators socket where ib finds no device");

static const zcc_net_ops_t *const net_plugins[] = {&zcc_net_ib_ops,
                                                   &zcc_net_socket_ops};

const char *zcc_net_plugin_name(void) {
  const char *p = zcc_param_net_plugin();
  return p && *p ? p : "ib";
}

int zcc_net_plugin_chosen(void) {
  const char *p = zcc_param_net_plugin();
  return p && *p;
}

const zcc_net_ops_t *zcc_net_find(const char *name) {
  if (!name)
    name = zcc_net_plugin_name();
  for (size_t i = 0; i < sizeof(net_plugins) / sizeof(net_plugins[0]); i++)
    if (strcmp(net_plugins[i]->name, name) == 0)
      return net_plugins[i];
  zcc_error(zccInvalidArgument,
            "no network plug-in named \"%s\" (ZCC_NET_PLUGIN: ib or socket)",
            name);
  return NULL;
}

int zcc_net_xfer(int fd, void *buf, size_t n, size_t *off, int out) {
  while (*off < n) {
    ssize_t r = out ? send(fd, (char *)buf + *off, n - *off,
                           MSG_NOSIGNAL | MSG_DONTWAIT)
                    : recv(fd, (char *)buf + *off, n - *off, MSG_DONTWAIT);
    if (r > 0) {
      *off += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    return -1;
  }
  *off = 0;
  return 1;
}

void zcc_net_mac(const zcc_net_auth_t *auth, const char label[10], char role,
                 const uint8_t cnonce[16], const uint8_t snonce[16],
                 uint8_t out[32]) {
  uint8_t msg[10 + 1 + 8 + 16 + 16];
  memcpy(msg, label, 10);
  msg[10] = (uint8_t)role;
  memcpy(msg + 11, &auth->context, 8);
  memcpy(msg + 19, cnonce, 16);
  memcpy(msg + 35, snonce, 16);
  zcc_hmac_sha256(auth->secret, ZCC_SECRET_BYTES, msg, sizeof(msg), out);
}

int zcc_net_mac_equal(const uint8_t a[32], const uint8_t b[32]) {
  uint8_t d = 0;
  for (int i = 0; i < 32; i++)
    d |= a[i] ^ b[i];
  return d == 0;
}
