/* nan_order.h — the fused loops' element helpers (fused_fast.c, fused_mask.c,
 * fused_centered.c): reading an f32 or bf16 operand widened to f32, and a
 * NaN quieted, for the x86 rule the interpreter's bits follow (an operation
 * returns its first NaN operand, quieted). Header-only, always inlined, so
 * that each loop's constant storage flags fold away. */
#ifndef TESSEL_KERNELS_NAN_ORDER_H
#define TESSEL_KERNELS_NAN_ORDER_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "util/half.h"

/* x with its quiet bit set (only NaNs are passed here). */
static inline __attribute__((always_inline)) float nan_quieted(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  b |= 0x400000u;
  memcpy(&x, &b, 4);
  return x;
}

/* Element j of p, stored as bf16 (widened) or f32. */
static inline __attribute__((always_inline)) float nan_ld(const void *p, bool bf16, int64_t j) {
  return bf16 ? ts_bf16_to_f32(((const uint16_t *)p)[j]) : ((const float *)p)[j];
}

/* Reads elements j0 and j1 - 1 of p (j0 < j1) with plain loads, so that the
 * pages a masked vector load then reads have their accessed bit set: an
 * AVX-512 load whose mask is all zero (ReLU's gradient where y <= 0
 * everywhere: gcc folds the select's operand into the masked load) does not
 * set it, and on a page whose bit was cleared (this host's DAMON samples
 * every 0.5 s) every such load walks the page tables again: the probe ran 2x
 * slower for the rest of the process (bench_calib_ew_probe --cold, tests/
 * calib_probe_cold.sh). Called once per block of at most 4 KiB, every page
 * under the block holds j0 or j1 - 1. */
static inline __attribute__((always_inline)) void nan_touch(const void *p, bool bf16, int64_t j0, int64_t j1) {
  size_t e = bf16 ? 2 : 4;
  (void)*(const volatile char *)((const char *)p + (size_t)j0 * e);
  (void)*(const volatile char *)((const char *)p + (size_t)(j1 - 1) * e);
}

/* The fused loops run in blocks of NAN_BLK elements, each after prefetching
 * as many elements of each full-size input NAN_AHEAD blocks on (fused_apply.c:
 * one loop over a whole run stalled on its loads, a long loop body keeping
 * few loads in flight). Past the run's or the tensor's end the prefetch
 * touches the next channels' elements or nothing (a prefetch does not fault). */
enum { NAN_BLK = 256, NAN_AHEAD = 2 };

/* The end of the block that starts at j0 of n elements. */
static inline __attribute__((always_inline)) int64_t nan_blk_end(int64_t j0, int64_t n) {
  return j0 + NAN_BLK < n ? j0 + NAN_BLK : n;
}

/* Prefetches elements [j0 + NAN_AHEAD * NAN_BLK, + min(NAN_BLK, n - j0)) of X (bf16 or f32). */
static inline __attribute__((always_inline)) void nan_ahead(const void *X, bool bf16, int64_t j0, int64_t n) {
  int64_t a = j0 + NAN_AHEAD * NAN_BLK, b = a + (n - j0 < NAN_BLK ? n - j0 : NAN_BLK);
  int es = bf16 ? 2 : 4;
  for (int64_t q = a * es; q < b * es; q += 64) __builtin_prefetch((const char *)X + q);
}

#endif
