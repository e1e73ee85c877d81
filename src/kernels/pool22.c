/* pool22.c — 2x2 max windows of stride 2 without padding (the MNIST CNN's
 * pool), forward and gradient, to the bits of pool.c's general kernels:
 * forward the max folded in row-major order (m = v > m ? v : m from the first
 * value), NaN if any value is NaN; the gradient 0 + dy at the window's first
 * max (or first NaN), +0 at its other three values and wherever no window
 * reaches (an odd last row or column). The windows do not overlap, so every
 * gradient value is written once, as zeroing and then adding would leave it
 * (0 + -0 is +0): no memset, no scatter, and selects only, so the loops
 * vectorize. Planar (N, C, H, W) f32 / f64 a row of windows at a time (the
 * stride-2 loads and stores are shuffles); bf16 / f16 the same on f32 copies
 * of row chunks (every value is exact in f32: the bits the double path gave);
 * NHWC f32 / f64 a window's channels at a time (unit stride), NHWC bf16 / f16
 * the same on f32 copies of the whole tensors. */
#include <stdlib.h>

#include "kernels/pool_internal.h"

/* The max m of window values v0..v3 and whether one is NaN (nan): declares both. */
#define MAX22(T, m, nan)                                                                      \
  T m = v1 > v0 ? v1 : v0;                                                                    \
  m = v2 > m ? v2 : m, m = v3 > m ? v3 : m;                                                   \
  int nan = (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3)

/* The gradient of window v0..v3 (max m, nan) for dy dv into o0..o3: a = 0 + dv, */
/* not dv (-0 becomes +0, as 0 += dv does), to the first v == m (p) or, where a */
/* value is NaN, to the first NaN (q); a chain of selects (no bool logic: that */
/* kept gcc 12 from vectorizing) */
#define GRAD22(T, m, nan, dv, o0, o1, o2, o3)                                                 \
  do {                                                                                        \
    T a = (T)0 + (dv);                                                                        \
    T p0 = v0 == m ? a : (T)0, r = v0 == m ? (T)0 : a;                                        \
    T p1 = v1 == m ? r : (T)0;                                                                \
    r = v1 == m ? (T)0 : r;                                                                   \
    T p2 = v2 == m ? r : (T)0, p3 = v2 == m ? (T)0 : r;                                       \
    T q0 = v0 != v0 ? a : (T)0, s = v0 != v0 ? (T)0 : a;                                      \
    T q1 = v1 != v1 ? s : (T)0;                                                               \
    s = v1 != v1 ? (T)0 : s;                                                                  \
    T q2 = v2 != v2 ? s : (T)0, q3 = v2 != v2 ? (T)0 : s;                                     \
    o0 = nan ? q0 : p0, o1 = nan ? q1 : p1, o2 = nan ? q2 : p2, o3 = nan ? q3 : p3;           \
  } while (0)

/* row22s2: a row of n windows on input rows r0, r1 (window k reads r0[2k],
 * r0[2k+1], r1[2k], r1[2k+1]): forward (d NULL) y[k]; backward g0[0, 2n),
 * g1[0, 2n) (the gradient rows under r0, r1) from d[k].
 * plane22: one plane (H, W) -> (OH, OW): forward into out (OH, OW); backward
 * every element of out (H, W). */
#define PLANAR22_IMPL(T, SUF)                                                                 \
  static void row22s2_##SUF(const T *r0, const T *r1, int64_t n, const T *d, T *y, T *g0, T *g1) { \
    if (!d) {                                                                                 \
      _Pragma("omp simd")                                                                     \
      for (int64_t k = 0; k < n; k++) {                                                       \
        T v0 = r0[2 * k], v1 = r0[2 * k + 1], v2 = r1[2 * k], v3 = r1[2 * k + 1];            \
        MAX22(T, m, nan);                                                                     \
        y[k] = nan ? (T)NAN : m;                                                              \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    _Pragma("omp simd")                                                                       \
    for (int64_t k = 0; k < n; k++) {                                                         \
      T v0 = r0[2 * k], v1 = r0[2 * k + 1], v2 = r1[2 * k], v3 = r1[2 * k + 1];              \
      MAX22(T, m, nan);                                                                       \
      GRAD22(T, m, nan, d[k], g0[2 * k], g0[2 * k + 1], g1[2 * k], g1[2 * k + 1]);            \
    }                                                                                         \
  }                                                                                           \
  static void plane22_##SUF(const pgeom *p, const T *xp, const T *dp, T *out) {             \
    int64_t W = p->W, OW = p->OW;                                                             \
    for (int64_t oh = 0; oh < p->OH; oh++) {                                                  \
      const T *r0 = xp + 2 * oh * W;                                                          \
      T *g0 = out + 2 * oh * W;                                                               \
      row22s2_##SUF(r0, r0 + W, OW, dp ? dp + oh * OW : NULL, out + oh * OW, g0, g0 + W);     \
      if (dp)                                                                                 \
        for (int64_t w = 2 * OW; w < W; w++) g0[w] = 0, g0[W + w] = 0;                        \
    }                                                                                         \
    if (dp) memset(out + 2 * p->OH * W, 0, sizeof(T) * (size_t)((p->H - 2 * p->OH) * W));     \
  }                                                                                           \
  void tk_pool22_##SUF(const pgeom *p, const T *x, const T *dy, T *out, int nt) {            \
    int64_t osz = dy ? p->H * p->W : p->OH * p->OW;                                           \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1)")                                   \
    for (int64_t pl = 0; pl < p->planes; pl++)                                                \
      plane22_##SUF(p, x + pl * p->H * p->W, dy ? dy + pl * p->OH * p->OW : NULL, out + pl * osz); \
  }

PLANAR22_IMPL(float, f32)
PLANAR22_IMPL(double, f64)

/* ---- bf16 / f16, planar: row chunks of up to HALF_CHUNK windows converted to
 * f32, pooled by row22s2_f32 and converted back (exact values: the same bits as
 * pooling their doubles; NaNs keep their payloads either way) ---- */
#define HALF_CHUNK 128

/* n values at s (stride 1) -> f32 t */
static void half_in(bool bf, const uint16_t *s, int64_t n, float *t) {
  if (bf) {
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) t[i] = ts_bf16_to_f32(s[i]);
  } else {
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) t[i] = ts_f16_to_f32(s[i]);
  }
}

static void half_out(bool bf, const float *t, int64_t n, uint16_t *s) {
  if (bf) {
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) s[i] = ts_f32_to_bf16(t[i]);
  } else {
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) s[i] = ts_f32_to_f16(t[i]);
  }
}

/* one row of windows (oh) of a half plane: chunk by chunk */
static void half_row(bool bf, const pgeom *p, const uint16_t *xp, const uint16_t *dp, uint16_t *out, int64_t oh) {
  float t0[2 * HALF_CHUNK], t1[2 * HALF_CHUNK], td[HALF_CHUNK], ty[HALF_CHUNK], g0[2 * HALF_CHUNK],
      g1[2 * HALF_CHUNK];
  int64_t W = p->W;
  const uint16_t *r0 = xp + 2 * oh * W;
  for (int64_t c0 = 0; c0 < p->OW; c0 += HALF_CHUNK) {
    int64_t cn = p->OW - c0 < HALF_CHUNK ? p->OW - c0 : HALF_CHUNK;
    half_in(bf, r0 + 2 * c0, 2 * cn, t0), half_in(bf, r0 + W + 2 * c0, 2 * cn, t1);
    if (dp) half_in(bf, dp + oh * p->OW + c0, cn, td);
    row22s2_f32(t0, t1, cn, dp ? td : NULL, ty, g0, g1);
    if (!dp) {
      half_out(bf, ty, cn, out + oh * p->OW + c0);
      continue;
    }
    half_out(bf, g0, 2 * cn, out + 2 * oh * W + 2 * c0), half_out(bf, g1, 2 * cn, out + (2 * oh + 1) * W + 2 * c0);
  }
  if (dp)
    for (int64_t w = 2 * p->OW; w < W; w++) out[2 * oh * W + w] = 0, out[(2 * oh + 1) * W + w] = 0;
}

void tk_pool22_half(ts_dtype dt, const pgeom *p, const uint16_t *x, const uint16_t *dy, uint16_t *out, int nt) {
  bool bf = dt == TS_BF16;
  int64_t osz = dy ? p->H * p->W : p->OH * p->OW;
  _Pragma("omp parallel for num_threads(nt) if (nt > 1)")
  for (int64_t pl = 0; pl < p->planes; pl++) {
    const uint16_t *xp = x + pl * p->H * p->W, *dp = dy ? dy + pl * p->OH * p->OW : NULL;
    uint16_t *op = out + pl * osz;
    for (int64_t oh = 0; oh < p->OH; oh++) half_row(bf, p, xp, dp, op, oh);
    if (dp) memset(op + 2 * p->OH * p->W, 0, 2 * (size_t)((p->H - 2 * p->OH) * p->W));
  }
}

/* ---- NHWC f32 / f64: image n, channels [c0, c0 + cn) of every window at a
 * time (unit stride); threads split images x channel chunks as pool.c's NHWC
 * kernel does; every output element of the chunk written (odd edges: 0). ---- */
#define NHWC22_CHUNK 64

#define NHWC22_IMPL(T, SUF)                                                                   \
  static void nhwc22_chunk_##SUF(const pgeom *p, int64_t C, const T *xn, const T *dn, T *on, int cn) { \
    int64_t W = p->W, OW = p->OW, rs = W * C;                                                 \
    for (int64_t oh = 0; oh < p->OH; oh++) {                                                  \
      for (int64_t ow = 0; ow < OW; ow++) {                                                   \
        int64_t at = (2 * oh * W + 2 * ow) * C;                                               \
        const T *r0 = xn + at, *r1 = xn + at + C, *r2 = xn + at + rs, *r3 = xn + at + rs + C; \
        if (!dn) {                                                                            \
          T *y = on + (oh * OW + ow) * C;                                                     \
          _Pragma("omp simd")                                                                 \
          for (int c = 0; c < cn; c++) {                                                      \
            T v0 = r0[c], v1 = r1[c], v2 = r2[c], v3 = r3[c];                                 \
            MAX22(T, m, nan);                                                                 \
            y[c] = nan ? (T)NAN : m;                                                          \
          }                                                                                   \
          continue;                                                                           \
        }                                                                                     \
        const T *d = dn + (oh * OW + ow) * C;                                                 \
        T *o0 = on + at, *o1 = on + at + C, *o2 = on + at + rs, *o3 = on + at + rs + C;       \
        _Pragma("omp simd")                                                                   \
        for (int c = 0; c < cn; c++) {                                                        \
          T v0 = r0[c], v1 = r1[c], v2 = r2[c], v3 = r3[c];                                   \
          MAX22(T, m, nan);                                                                   \
          GRAD22(T, m, nan, d[c], o0[c], o1[c], o2[c], o3[c]);                                \
        }                                                                                     \
      }                                                                                       \
      for (int64_t w = 2 * OW; dn && w < W; w++) /* odd W: the last column */                 \
        for (int c = 0; c < cn; c++) on[(2 * oh * W + w) * C + c] = 0, on[((2 * oh + 1) * W + w) * C + c] = 0; \
    }                                                                                         \
    for (int64_t hw = 2 * p->OH * W; dn && hw < p->H * W; hw++) /* odd H: the last row */    \
      for (int c = 0; c < cn; c++) on[hw * C + c] = 0;                                        \
  }                                                                                           \
  void tk_pool22_nhwc_##SUF(const pgeom *p, int64_t N, int64_t C, const T *x, const T *dy, T *out, int nt) { \
    int64_t chunks = (C + NHWC22_CHUNK - 1) / NHWC22_CHUNK;                                   \
    int64_t osz = (dy ? p->H * p->W : p->OH * p->OW) * C;                                     \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1)")                                   \
    for (int64_t t = 0; t < N * chunks; t++) {                                                \
      int64_t n = t / chunks, c0 = (t % chunks) * NHWC22_CHUNK;                               \
      int cn = (int)(C - c0 < NHWC22_CHUNK ? C - c0 : NHWC22_CHUNK);                          \
      nhwc22_chunk_##SUF(p, C, x + n * p->H * p->W * C + c0, dy ? dy + n * p->OH * p->OW * C + c0 : NULL, \
                         out + n * osz + c0, cn);                                             \
    }                                                                                         \
  }

NHWC22_IMPL(float, f32)
NHWC22_IMPL(double, f64)

/* ---- NHWC bf16 / f16: the whole tensors widened to f32 (no transpose; exact),
 * pooled by the NHWC f32 kernel and rounded back (the same bits, as planar) ---- */
#define HALF_BLOCK 4096

/* n halves at s <-> f32 t, blocks of HALF_BLOCK over nt threads */
static void half_all_in(bool bf, const uint16_t *s, int64_t n, float *t, int nt) {
  _Pragma("omp parallel for num_threads(nt) if (nt > 1)")
  for (int64_t b = 0; b < n; b += HALF_BLOCK) half_in(bf, s + b, n - b < HALF_BLOCK ? n - b : HALF_BLOCK, t + b);
}

static void half_all_out(bool bf, const float *t, int64_t n, uint16_t *s, int nt) {
  _Pragma("omp parallel for num_threads(nt) if (nt > 1)")
  for (int64_t b = 0; b < n; b += HALF_BLOCK) half_out(bf, t + b, n - b < HALF_BLOCK ? n - b : HALF_BLOCK, s + b);
}

int tk_pool22_nhwc_half(ts_dtype dt, const pgeom *p, int64_t N, int64_t C, const uint16_t *x, const uint16_t *dy,
                        uint16_t *out, int nt) {
  bool bf = dt == TS_BF16;
  int64_t nx = N * p->H * p->W * C, ny = N * p->OH * p->OW * C, no = dy ? nx : ny;
  float *xf = malloc((size_t)(nx ? nx : 1) * 4), *df = dy ? malloc((size_t)(ny ? ny : 1) * 4) : NULL;
  float *of = malloc((size_t)(no ? no : 1) * 4);
  int rc = -1;
  if (xf && of && (!dy || df)) {
    half_all_in(bf, x, nx, xf, nt);
    if (dy) half_all_in(bf, dy, ny, df, nt);
    tk_pool22_nhwc_f32(p, N, C, xf, df, of, nt);
    half_all_out(bf, of, no, out, nt);
    rc = 0;
  }
  free(xf), free(df), free(of);
  return rc;
}
