/* half.h — bf16 and f16 <-> f32 conversions (round to nearest even). */
#ifndef TS_HALF_H
#define TS_HALF_H

#include <stdint.h>
#include <string.h>

static inline float ts_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t ts_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float ts_f16_to_f32(uint16_t h) {
  _Float16 f;
  memcpy(&f, &h, 2);
  return (float)f;
}

static inline uint16_t ts_f32_to_f16(float f) {
  _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}

#endif
