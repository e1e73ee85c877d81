/* bench_util.h — the few helpers every benchmark program shares: a monotonic
 * clock, sorting samples, the median. Header-only (each bench is one program). */
#ifndef TS_BENCH_UTIL_H
#define TS_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h> // clock_gettime

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v in place and returns its median. */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
