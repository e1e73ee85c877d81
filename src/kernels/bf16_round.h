/* bf16_round.h — f32 -> bf16 rounding that `omp simd` vectorizes, shared by
 * the fused evaluator (fused.c) and its fast paths (fused_fast.c). */
#ifndef TS_KERNELS_BF16_ROUND_H
#define TS_KERNELS_BF16_ROUND_H

#include <stdint.h>
#include <string.h>

/* ts_f32_to_bf16 without branches, so `omp simd` vectorizes it (the same
 * bits: round to nearest even, NaN quieted). */
static inline uint32_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}

/* f rounded to bf16, as a float. */
static inline float bf16_round(float f) {
  uint32_t u = bf16_bits(f) << 16;
  float r;
  memcpy(&r, &u, 4);
  return r;
}

#endif
