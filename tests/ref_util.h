/* ref_util.h — what the PyTorch reference tests share: a seeded generator,
 * raw little-endian files in a scratch directory, and the comparison
 *   |a - b| <= 1e-4 * max(|a|, |b|) + 1e-6 * max|b over the tensor|
 * (1e-4 relative, with a floor for elements near zero, where summation
 * order dominates). Static functions: each test includes it once. */
#ifndef TS_TEST_REF_UTIL_H
#define TS_TEST_REF_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h> /* unlink */

static inline uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline int write_file(const char *dir, const char *name, const void *data, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, bytes, f);
  return fclose(f) == 0 && w == bytes ? 0 : -1;
}

static inline int read_file(const char *dir, const char *name, void *data, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t r = fread(data, 1, bytes, f);
  int extra = fgetc(f);
  fclose(f);
  return r == bytes && extra == EOF ? 0 : -1;
}

static inline void remove_file(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
}

/* Compares n elements; returns the number of elements out of tolerance and
 * prints the worst one. */
static inline int64_t compare(const char *what, const float *a, const float *b, int64_t n) {
  double maxb = 0;
  for (int64_t i = 0; i < n; i++) maxb = fmax(maxb, fabs(b[i]));
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    double tol = 1e-4 * fmax(fabs(a[i]), fabs(b[i])) + 1e-6 * maxb;
    double ratio = tol > 0 ? d / tol : (d > 0 ? INFINITY : 0);
    if (!(d <= tol)) bad++; // NaN counts as bad
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad) {
    fprintf(stderr, "  %s: %lld of %lld elements out of tolerance; worst [%lld] tessel %.8g torch %.8g\n",
            what, (long long)bad, (long long)n, (long long)worst, a[worst], b[worst]);
  } else {
    printf("  %s: %lld elements ok (worst error %.2f of tolerance)\n", what, (long long)n, worst_ratio);
  }
  return bad;
}

#endif
