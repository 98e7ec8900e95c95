/*
 * SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and random bytes, for the
 * bootstrap handshake. Small and portable; speed is not a concern here.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "check.h"
#include "socket.h"

typedef struct sha256_ctx {
  uint32_t h[8];
  uint8_t block[64];
  size_t used;    /* bytes in block */
  uint64_t total; /* bytes hashed so far */
} sha256_ctx_t;

static const uint32_t k256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

static void sha256_block(sha256_ctx_t *c, const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
  uint32_t e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + ch + k256[i] + w[i];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & cc) ^ (b & cc);
    uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = cc;
    cc = b;
    b = a;
    a = t1 + t2;
  }
  c->h[0] += a;
  c->h[1] += b;
  c->h[2] += cc;
  c->h[3] += d;
  c->h[4] += e;
  c->h[5] += f;
  c->h[6] += g;
  c->h[7] += h;
}

static void sha256_init(sha256_ctx_t *c) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, h0, sizeof(h0));
  c->used = 0;
  c->total = 0;
}

static void sha256_update(sha256_ctx_t *c, const void *data, size_t bytes) {
  const uint8_t *p = data;
  c->total += bytes;
  while (bytes > 0) {
    if (c->used == 0 && bytes >= 64) {
      sha256_block(c, p);
      p += 64;
      bytes -= 64;
      continue;
    }
    size_t n = 64 - c->used;
    if (n > bytes)
      n = bytes;
    memcpy(c->block + c->used, p, n);
    c->used += n;
    p += n;
    bytes -= n;
    if (c->used == 64) {
      sha256_block(c, c->block);
      c->used = 0;
    }
  }
}

static void sha256_final(sha256_ctx_t *c, uint8_t out[32]) {
  uint64_t bits = c->total * 8;
  uint8_t pad = 0x80;
  sha256_update(c, &pad, 1);
  pad = 0;
  while (c->used != 56)
    sha256_update(c, &pad, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(c, len, 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(c->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)c->h[i];
  }
  memset(c, 0, sizeof(*c));
}

void zcc_sha256(const void *data, size_t bytes, uint8_t out[32]) {
  sha256_ctx_t c;
  sha256_init(&c);
  sha256_update(&c, data, bytes);
  sha256_final(&c, out);
}

void zcc_hmac_sha256(const uint8_t *key, size_t key_bytes, const void *data,
                     size_t bytes, uint8_t out[32]) {
  uint8_t k[64] = {0};
  if (key_bytes > sizeof(k))
    zcc_sha256(key, key_bytes, k);
  else if (key_bytes > 0)
    memcpy(k, key, key_bytes);

  uint8_t pad[64];
  uint8_t inner[32];
  sha256_ctx_t c;
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x36;
  sha256_init(&c);
  sha256_update(&c, pad, sizeof(pad));
  sha256_update(&c, data, bytes);
  sha256_final(&c, inner);
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x5c;
  sha256_init(&c);
  sha256_update(&c, pad, sizeof(pad));
  sha256_update(&c, inner, sizeof(inner));
  sha256_final(&c, out);
  memset(k, 0, sizeof(k));
  memset(pad, 0, sizeof(pad));
}

static zccResult_t urandom_bytes(uint8_t *p, size_t bytes) {
  int fd;
  do {
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return zcc_error(zccSystemError, "open /dev/urandom failed: %s",
                     strerror(errno));
  while (bytes > 0) {
    ssize_t n = read(fd, p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      close(fd);
      return zcc_error(zccSystemError, "read /dev/urandom failed: %s",
                       strerror(err));
    }
    p += n;
    bytes -= (size_t)n;
  }
  close(fd);
  return zccSuccess;
}

zccResult_t zcc_random_bytes(void *buf, size_t bytes) {
  if (buf == NULL && bytes > 0)
    return zcc_error(zccInvalidArgument, "zcc_random_bytes: buf is null");
  uint8_t *p = buf;
  while (bytes > 0) {
    ssize_t n = getrandom(p, bytes, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == ENOSYS)
      return urandom_bytes(p, bytes);
    if (n < 0)
      return zcc_error(zccSystemError, "getrandom failed: %s", strerror(errno));
    p += n;
    bytes -= (size_t)n;
  }
  return zccSuccess;
}
