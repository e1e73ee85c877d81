/* pool_internal.h — what pool.c and pool22.c share: a pooling's geometry and
 * the 2x2 stride-2 kernels (pool22.c). */
#ifndef TS_KERNELS_POOL_INTERNAL_H
#define TS_KERNELS_POOL_INTERNAL_H

#include "kernels/kernels_internal.h"

/* planes: N * C (the planar kernels) or N (NHWC); input (H, W), output (OH, OW);
 * window kh x kw, strides sh, sw, padding ph, pw (top/left = bottom/right). */
typedef struct {
  int64_t planes, H, W, OH, OW;
  int kh, kw, sh, sw, ph, pw;
} pgeom;

/* 2x2 max windows, stride 2, no padding, OH <= H / 2, OW <= W / 2 (pool22.c).
 * x: the input; dy NULL: forward, out the output; else the gradient, dy the
 * output's shape, out the input's, every element written (no need to zero it).
 * x, dy, out caller-owned, out overlapping neither. nt OpenMP threads over the
 * planes (NHWC: images x chunks of channels); the bits do not depend on nt.
 * Planar: p->planes planes (H, W) of f32 / f64 / bf16 or f16 (dt). */
void tk_pool22_f32(const pgeom *p, const float *x, const float *dy, float *out, int nt);
void tk_pool22_f64(const pgeom *p, const double *x, const double *dy, double *out, int nt);
void tk_pool22_half(ts_dtype dt, const pgeom *p, const uint16_t *x, const uint16_t *dy, uint16_t *out, int nt);
/* NHWC: N images (H, W, C) (p->planes unused) */
void tk_pool22_nhwc_f32(const pgeom *p, int64_t N, int64_t C, const float *x, const float *dy, float *out, int nt);
void tk_pool22_nhwc_f64(const pgeom *p, int64_t N, int64_t C, const double *x, const double *dy, double *out,
                        int nt);
/* NHWC bf16 / f16 (dt) through f32 copies it allocates: 0, or -1 when out of memory (nothing written) */
int tk_pool22_nhwc_half(ts_dtype dt, const pgeom *p, int64_t N, int64_t C, const uint16_t *x, const uint16_t *dy,
                        uint16_t *out, int nt);

#endif
