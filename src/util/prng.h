/* prng.h — the host-side pseudo-random generator used for parameter
 * initialization (nn/params.c) and data shuffling (data/dataset.c).
 *
 * xoshiro256** (Blackman & Vigna, 2018) with its 256-bit state filled from the
 * 64-bit seed by splitmix64, as its authors recommend. Everything here is a
 * pure function of the seed, so a seed replays a run exactly on any machine.
 * (Device-side random numbers — dropout — use the counter-based ts_rng_* ops.) */
#ifndef TS_UTIL_PRNG_H
#define TS_UTIL_PRNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
  uint64_t s[4];
} ts_prng;

static inline uint64_t ts_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline void ts_prng_seed(ts_prng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = ts_splitmix64(&seed);
}

static inline uint64_t ts_prng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t ts_prng_next(ts_prng *r) {
  uint64_t *s = r->s;
  uint64_t result = ts_prng_rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = ts_prng_rotl(s[3], 45);
  return result;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static inline double ts_prng_uniform(ts_prng *r) {
  return (double)(ts_prng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal by Box-Muller (both draws consumed, the sine branch discarded,
 * so every call uses exactly two 64-bit outputs). */
static inline double ts_prng_normal(ts_prng *r) {
  double u1 = 1.0 - ts_prng_uniform(r); /* (0, 1]: log(u1) is finite */
  double u2 = ts_prng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Unbiased integer in [0, n) (n >= 1) by rejection of the short last block. */
static inline uint64_t ts_prng_below(ts_prng *r, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* multiple of n */
  uint64_t x;
  do x = ts_prng_next(r);
  while (x >= limit);
  return x % n;
}

#endif
