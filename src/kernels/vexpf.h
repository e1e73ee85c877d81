/* vexpf.h — the kernels' expf that vectorizes, shared by fused.c
 * (elementwise exp) and attention.c (the softmax). Header-only so each
 * loop that calls it inlines it. */
#ifndef TESSEL_KERNELS_VEXPF_H
#define TESSEL_KERNELS_VEXPF_H

#include <stdint.h>

/* expf that vectorizes (libm's doesn't without -ffast-math): exp(x) =
 * 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in two parts (Cody-Waite),
 * exp(r) by the Cephes minimax polynomial (~1 ulp); 2^k applied as two
 * exact power-of-two factors so overflow gives inf and underflow rounds
 * once into the subnormals. */
static inline float vexpf(float x) {
  float xc = x > -104.f ? x : -104.f; /* NaN -> -104: no NaN reaches the int conversion */
  xc = xc < 89.f ? xc : 89.f;
  float kf = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f; /* round to nearest */
  float r = xc - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.f;
  int32_t k = (int32_t)kf, k1 = k / 2, k2 = k - k1; /* each in [-75, 65] */
  union { int32_t i; float f; } s1 = {.i = (k1 + 127) << 23}, s2 = {.i = (k2 + 127) << 23};
  y = y * s1.f * s2.f;
  return x != x ? x : y;
}

#endif
