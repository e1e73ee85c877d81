/* hash.c — a fast non-cryptographic 64-bit hash (xxhash-style multiply-rotate
 * over little-endian 8-byte words): compile-cache keys and checksums, and the
 * program hash processes compare. */
#include "util/hash.h"

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t util_hash64(const void *data, size_t len, uint64_t seed) {
  const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull;
  const unsigned char *p = data;
  uint64_t h = seed + P3 + (uint64_t)len * P1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = 0;
    for (int b = 0; b < 8; b++) w |= (uint64_t)p[i + b] << (8 * b);
    h ^= rotl(w * P2, 31) * P1;
    h = rotl(h, 27) * P1 + 0x85EBCA77C2B2AE63ull;
  }
  for (; i < len; i++) {
    h ^= (uint64_t)p[i] * P3;
    h = rotl(h, 11) * P1;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}
