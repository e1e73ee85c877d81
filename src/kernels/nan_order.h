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

#endif
