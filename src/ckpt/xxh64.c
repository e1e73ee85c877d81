/* xxh64.c — XXH64 (Yann Collet's xxHash, 64-bit, seed 0), the checksum of
 * format-2 checkpoints: four independent lanes of 8-byte words, so it runs
 * at memory speed (about 10 GB/s on one core, where the byte-serial
 * util_hash64 of format 1 ran at about 1.3 GB/s). The values are the
 * reference implementation's (`xxhsum -H64`, python's xxhash.xxh64), so a
 * file's checksum in index.json can be checked with standard tools.
 * Streaming: ckpt_xxh64_update takes the data in pieces of any size. */
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "util/hash.h" /* util_hash64: format 1 */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Little-endian loads (memcpy: no alignment assumed; one mov on x86). */
static inline uint64_t rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}
static inline uint32_t rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

static inline uint64_t round1(uint64_t acc, uint64_t in) {
  acc += in * P2;
  acc = rotl64(acc, 31);
  return acc * P1;
}
static inline uint64_t merge1(uint64_t acc, uint64_t v) {
  acc ^= round1(0, v);
  return acc * P1 + P4;
}

void ckpt_xxh64_init(ckpt_xxh64_state *s) {
  memset(s, 0, sizeof *s);
  s->v[0] = P1 + P2;
  s->v[1] = P2;
  s->v[2] = 0;
  s->v[3] = 0 - P1;
}

/* Whole 32-byte stripes of p[0..n): returns the bytes consumed. */
static size_t stripes(uint64_t *v, const unsigned char *p, size_t n) {
  uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = round1(a, rd64(p + i));
    b = round1(b, rd64(p + i + 8));
    c = round1(c, rd64(p + i + 16));
    d = round1(d, rd64(p + i + 24));
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  return i;
}

/* Two states' whole stripes over the same bytes at different stripe
 * phases (p and q: k stripes each), interleaved: eight independent
 * multiply chains instead of four, so the core's multiplier stays busy
 * (one pass for a block's and its file's checksum: about 1.5x the speed of
 * two passes). */
static void stripes2(uint64_t *v, const unsigned char *p, uint64_t *w, const unsigned char *q, size_t k) {
  uint64_t a = v[0], b = v[1], c = v[2], d = v[3], e = w[0], f = w[1], g = w[2], h = w[3];
  for (; k > 0; k--, p += 32, q += 32) {
    a = round1(a, rd64(p)), e = round1(e, rd64(q));
    b = round1(b, rd64(p + 8)), f = round1(f, rd64(q + 8));
    c = round1(c, rd64(p + 16)), g = round1(g, rd64(q + 16));
    d = round1(d, rd64(p + 24)), h = round1(h, rd64(q + 24));
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d, w[0] = e, w[1] = f, w[2] = g, w[3] = h;
}

/* Tops up s's partial stripe from p[0..n) (hashing it once full): the
 * bytes taken. Then s's next stripe starts at p + taken, or all n bytes were
 * taken into the buffer. */
static size_t top_up(ckpt_xxh64_state *s, const unsigned char *p, size_t n) {
  if (!s->nbuf) return 0;
  size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
  memcpy(s->buf + s->nbuf, p, take);
  s->nbuf += (unsigned)take;
  if (s->nbuf == 32) {
    stripes(s->v, s->buf, 32);
    s->nbuf = 0;
  }
  return take;
}

/* After top_up took `from` bytes of p[0..n) and the stripes up to `done`
 * were hashed: the remaining whole stripes, then the tail into the buffer. */
static void finish(ckpt_xxh64_state *s, const unsigned char *p, size_t n, size_t done) {
  if (s->nbuf) return; /* top_up took everything */
  done += stripes(s->v, p + done, n - done);
  memcpy(s->buf, p + done, n - done);
  s->nbuf = (unsigned)(n - done);
}

void ckpt_xxh64_update(ckpt_xxh64_state *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->total += n;
  finish(s, p, n, top_up(s, p, n));
}

void ckpt_xxh64_update2(ckpt_xxh64_state *s, ckpt_xxh64_state *t, const void *data, size_t n) {
  const unsigned char *p = data;
  s->total += n, t->total += n;
  size_t ds = top_up(s, p, n), dt = top_up(t, p, n);
  if (!s->nbuf && !t->nbuf) { /* both at a stripe start: their common whole stripes together */
    size_t ks = (n - ds) / 32, kt = (n - dt) / 32, k = ks < kt ? ks : kt;
    stripes2(s->v, p + ds, t->v, p + dt, k);
    ds += 32 * k, dt += 32 * k;
  }
  finish(s, p, n, ds);
  finish(t, p, n, dt);
}

uint64_t ckpt_xxh64_digest(const ckpt_xxh64_state *s) {
  uint64_t h;
  if (s->total >= 32) {
    h = rotl64(s->v[0], 1) + rotl64(s->v[1], 7) + rotl64(s->v[2], 12) + rotl64(s->v[3], 18);
    for (int k = 0; k < 4; k++) h = merge1(h, s->v[k]);
  } else {
    h = P5; /* seed 0 */
  }
  h += s->total;
  const unsigned char *p = s->buf;
  size_t n = s->nbuf, i = 0;
  for (; i + 8 <= n; i += 8) {
    h ^= round1(0, rd64(p + i));
    h = rotl64(h, 27) * P1 + P4;
  }
  if (i + 4 <= n) {
    h ^= (uint64_t)rd32(p + i) * P1;
    h = rotl64(h, 23) * P2 + P3;
    i += 4;
  }
  for (; i < n; i++) {
    h ^= p[i] * P5;
    h = rotl64(h, 11) * P1;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t ckpt_xxh64(const void *data, size_t n) {
  ckpt_xxh64_state s;
  ckpt_xxh64_init(&s);
  ckpt_xxh64_update(&s, data, n);
  return ckpt_xxh64_digest(&s);
}

uint64_t ckpt_sum(int version, const void *data, size_t n) {
  return version == 1 ? util_hash64(data, n, 0) : ckpt_xxh64(data, n);
}
