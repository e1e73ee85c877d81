/* pool.c — 2-D max / avg pooling over (N, C, H, W) and their gradients.
 * Max: padding is -inf, gradient goes to the first max of the window in
 * row-major order. Avg: divides by the full window KH*KW (PyTorch's
 * count_include_pad=True). f32/f64 run natively; bf16/f16 through double.
 * NHWC tensors (N, H, W, C) in f32 / f64 pool in place, channels innermost
 * (nhwc_f32/f64 below: to the same bits as the planar kernels); bf16 / f16 ones
 * are read into planar (N, C, H, W) doubles, pooled there and written back
 * (pool_nhwc).
 * 3x3 max windows of stride 2 (ResNet-50's stem pool) run a row of windows at
 * a time on the row's even and odd columns split apart (row33s2): unit-stride
 * loops the compiler vectorizes, the gradient added in the same order (so to
 * the same bits) as one window at a time. 2x2 max windows of stride 2 without
 * padding (the MNIST CNN's pool) go to pool22.c (every float dtype, both
 * layouts), to the same bits. */
#include <stdlib.h>

#include "kernels/pool_internal.h"

/* cn (<= 64) adjacent 3x3 max windows of stride 2 whose top-left input is rb
 * (row stride W; the last window's columns end inside the row): forward
 * (db NULL) writes yo[k]; backward adds dy db[k] to the first max of window k
 * (or its first NaN) in gb (the gradient at rb's position), window by window
 * as before. Each input row is split into its even columns e (2k, 2k+2:
 * window k's first and last) and odd ones o (2k+1: its middle), so window k
 * reads e[k], o[k], e[k+1] of 3 rows: unit strides, a vectorized loop where
 * the stride-2 reads were scalar. */
/* The max m of 3x3 window values v[9] (T) and whether one is NaN (nan):
 * declares m and nan. */
#define MAX9(T, v, m, nan)                                                                    \
  T m = v[0];                                                                                 \
  bool nan = false;                                                                           \
  _Pragma("GCC unroll 9") for (int q_ = 1; q_ < 9; q_++) m = v[q_] > m ? v[q_] : m;           \
  _Pragma("GCC unroll 9") for (int q_ = 0; q_ < 9; q_++) nan |= v[q_] != v[q_]

/* window k's 9 values v (row-major), their max m and whether one is NaN */
#define WIN33S2(T)                                                                            \
  T v[9] = {e[0][k], o[0][k], e[0][k + 1], e[1][k], o[1][k], e[1][k + 1],                     \
            e[2][k], o[2][k], e[2][k + 1]};                                                   \
  MAX9(T, v, m, nan)

#define ROW33S2_IMPL(T, SUF)                                                                  \
  /* s[0..2n] -> e[k] = s[2k] (k <= n), o[k] = s[2k+1] (k < n) */                             \
  static inline void row_split_##SUF(const T *restrict s, int64_t n, T *restrict e, T *restrict o) { \
    _Pragma("omp simd")                                                                       \
    for (int64_t k = 0; k < n; k++) e[k] = s[2 * k];                                          \
    _Pragma("omp simd")                                                                       \
    for (int64_t k = 0; k < n; k++) o[k] = s[2 * k + 1];                                      \
    e[n] = s[2 * n];                                                                          \
  }                                                                                           \
  static void row33s2_##SUF(const T *rb, int64_t W, int64_t cn, const T *db, T *yo, T *gb) { \
    T e[3][65], o[3][64];                                                                     \
    int32_t at[64];                                                                           \
    for (int r = 0; r < 3; r++) {                                                             \
      const T *s = rb + r * W;                                                                \
      row_split_##SUF(s, cn, e[r], o[r]);                                                     \
    }                                                                                         \
    if (!db) {                                                                                \
      _Pragma("omp simd")                                                                     \
      for (int64_t k = 0; k < cn; k++) {                                                      \
        WIN33S2(T);                                                                           \
        yo[k] = nan ? (T)NAN : m;                                                             \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    _Pragma("omp simd")                                                                       \
    for (int64_t k = 0; k < cn; k++) {                                                        \
      WIN33S2(T);                                                                             \
      int32_t a = 8;                                                                          \
      _Pragma("GCC unroll 9") for (int q = 7; q >= 0; q--)                                    \
        a = (nan ? v[q] != v[q] : v[q] == m) ? q : a;                                         \
      at[k] = a;                                                                              \
    }                                                                                         \
    for (int64_t k = 0; k < cn; k++) gb[2 * k + (at[k] / 3) * W + at[k] % 3] += db[k];       \
  }

ROW33S2_IMPL(float, f32)
ROW33S2_IMPL(double, f64)

#define POOL_IMPL(T, SUF)                                                                   \
  static void pool_##SUF(const pgeom *p, ts_op op, const T *x, const T *dy, T *out, int nt) { \
    bool grad = op == TS_OP_MAXPOOL_GRAD || op == TS_OP_AVGPOOL_GRAD;                       \
    bool isavg = op == TS_OP_AVGPOOL || op == TS_OP_AVGPOOL_GRAD;                           \
    double inv = 1.0 / ((double)p->kh * p->kw);                                             \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1)")                                 \
    for (int64_t pl = 0; pl < p->planes; pl++) {                                            \
      const T *xp = x ? x + pl * p->H * p->W : NULL;                                        \
      const T *dp = dy ? dy + pl * p->OH * p->OW : NULL;                                    \
      T *op_ = out + pl * (grad ? p->H * p->W : p->OH * p->OW);                             \
      if (grad) memset(op_, 0, sizeof(T) * (size_t)(p->H * p->W));                          \
      /* 3x3 max: the run [olo, ohi) of windows inside the row goes in one batch: */        \
      /* the argmaxes first (a loop the compiler can vectorize), then the scatter */        \
      bool max33 = !isavg && p->kh == 3 && p->kw == 3;                                      \
      int64_t olo = (p->pw + p->sw - 1) / p->sw;                                            \
      int64_t ohi = p->W + p->pw - 3 >= 0 ? (p->W + p->pw - 3) / p->sw + 1 : 0;             \
      ohi = ohi < p->OW ? ohi : p->OW;                                                      \
      for (int64_t oh = 0; oh < p->OH; oh++)                                                \
        for (int64_t ow = 0; ow < p->OW; ow++) {                                            \
          int64_t h0 = oh * p->sh - p->ph, w0 = ow * p->sw - p->pw;                         \
          if (max33 && ow == olo && olo < ohi && h0 >= 0 && h0 + 3 <= p->H) {               \
            int64_t W_ = p->W, sw = p->sw;                                                  \
            for (int64_t c0 = olo; c0 < ohi; c0 += 64) {                                    \
              int64_t cn = ohi - c0 < 64 ? ohi - c0 : 64;                                   \
              int32_t aa[64];                                                               \
              const T *rb = xp + h0 * W_ + c0 * sw - p->pw;                                 \
              T *yo = op_ + oh * p->OW + c0;                                                \
              if (sw == 2) {                                                                \
                row33s2_##SUF(rb, W_, cn, grad ? dp + oh * p->OW + c0 : NULL, yo,           \
                              op_ + h0 * W_ + c0 * sw - p->pw);                             \
                continue;                                                                   \
              }                                                                             \
              if (!grad) {                                                                  \
                _Pragma("omp simd")                                                         \
                for (int64_t k = 0; k < cn; k++) {                                          \
                  const T *r = rb + k * sw;                                                 \
                  T v[9] = {r[0], r[1], r[2], r[W_], r[W_ + 1], r[W_ + 2],                  \
                            r[2 * W_], r[2 * W_ + 1], r[2 * W_ + 2]};                       \
                  MAX9(T, v, m, nan);                                                    \
                  yo[k] = nan ? (T)NAN : m;                                                 \
                }                                                                           \
                continue;                                                                   \
              }                                                                             \
              _Pragma("omp simd")                                                           \
              for (int64_t k = 0; k < cn; k++) {                                            \
                const T *r = rb + k * sw;                                                   \
                T v[9] = {r[0], r[1], r[2], r[W_], r[W_ + 1], r[W_ + 2],                    \
                          r[2 * W_], r[2 * W_ + 1], r[2 * W_ + 2]};                         \
                MAX9(T, v, m, nan);                                                      \
                int32_t a = (int32_t)(2 * W_ + 2);                                          \
                _Pragma("GCC unroll 9") for (int q = 7; q >= 0; q--)                        \
                  a = (nan ? v[q] != v[q] : v[q] == m) ? (int32_t)((q / 3) * W_ + q % 3) : a;\
                aa[k] = a;                                                                  \
              }                                                                             \
              T *gb = op_ + h0 * W_ + c0 * sw - p->pw; /* in ow order, as before */         \
              const T *db = dp + oh * p->OW + c0;                                           \
              for (int64_t k = 0; k < cn; k++) gb[k * sw + aa[k]] += db[k];                 \
            }                                                                               \
            ow = ohi - 1;                                                                   \
            continue;                                                                       \
          }                                                                                 \
          if (!isavg && h0 >= 0 && w0 >= 0 && h0 + p->kh <= p->H && w0 + p->kw <= p->W) {   \
            /* window inside the plane: no bounds checks, branch-free max in T, */          \
            /* then the first position holding it (or the first NaN) */                     \
            const T *r = xp + h0 * p->W + w0;                                               \
            T m = r[0];                                                                     \
            bool nan = false;                                                               \
            if (p->kh == 2 && p->kw == 2) { /* the common window, unrolled */               \
              T v1 = r[1], v2 = r[p->W], v3 = r[p->W + 1];                                  \
              m = v1 > m ? v1 : m, m = v2 > m ? v2 : m, m = v3 > m ? v3 : m;                \
              nan = (r[0] != r[0]) | (v1 != v1) | (v2 != v2) | (v3 != v3);                  \
            } else if (p->kh == 3 && p->kw == 3) { /* ResNet's stem pool, unrolled */       \
              int64_t W_ = p->W;                                                            \
              T v[9] = {r[0], r[1], r[2], r[W_], r[W_ + 1], r[W_ + 2],                      \
                        r[2 * W_], r[2 * W_ + 1], r[2 * W_ + 2]};                           \
              _Pragma("GCC unroll 9") for (int k = 1; k < 9; k++) m = v[k] > m ? v[k] : m;  \
              _Pragma("GCC unroll 9") for (int k = 0; k < 9; k++) nan |= v[k] != v[k];      \
              if (grad) {                                                                   \
                int64_t a = 2 * W_ + 2;                                                     \
                _Pragma("GCC unroll 9") for (int k = 7; k >= 0; k--)                        \
                  a = (nan ? v[k] != v[k] : v[k] == m) ? (k / 3) * W_ + k % 3 : a;          \
                op_[h0 * W_ + w0 + a] += dp[oh * p->OW + ow];                               \
                continue;                                                                   \
              }                                                                             \
            } else {                                                                        \
              for (int i = 0; i < p->kh; i++)                                               \
                for (int j = 0; j < p->kw; j++) {                                           \
                  T v = r[i * p->W + j];                                                    \
                  m = v > m ? v : m;                                                        \
                  nan |= v != v;                                                            \
                }                                                                           \
            }                                                                               \
            if (grad && p->kh == 2 && p->kw == 2) {                                         \
              int64_t W_ = p->W, a = W_ + 1;                                                \
              a = (nan ? r[W_] != r[W_] : r[W_] == m) ? W_ : a;                             \
              a = (nan ? r[1] != r[1] : r[1] == m) ? 1 : a;                                 \
              a = (nan ? r[0] != r[0] : r[0] == m) ? 0 : a;                                 \
              op_[h0 * W_ + w0 + a] += dp[oh * p->OW + ow];                                 \
            } else if (grad) {                                                              \
              int64_t a = 0;                                                                \
              for (int i = p->kh - 1; i >= 0; i--)                                          \
                for (int j = p->kw - 1; j >= 0; j--) {                                      \
                  T v = r[i * p->W + j];                                                    \
                  a = (nan ? v != v : v == m) ? i * p->W + j : a;                           \
                }                                                                           \
              op_[h0 * p->W + w0 + a] += dp[oh * p->OW + ow];                               \
            } else {                                                                        \
              op_[oh * p->OW + ow] = nan ? (T)NAN : m;                                      \
            }                                                                               \
            continue;                                                                       \
          }                                                                                 \
          double acc = isavg ? 0.0 : -INFINITY;                                             \
          int64_t arg = -1;                                                                 \
          for (int i = 0; i < p->kh; i++) {                                                 \
            int64_t h = h0 + i;                                                             \
            if (h < 0 || h >= p->H) continue;                                               \
            for (int j = 0; j < p->kw; j++) {                                               \
              int64_t w = w0 + j;                                                           \
              if (w < 0 || w >= p->W) continue;                                             \
              if (isavg) {                                                                  \
                if (grad) op_[h * p->W + w] += (T)(dp[oh * p->OW + ow] * inv);              \
                else acc += xp[h * p->W + w];                                               \
              } else {                                                                      \
                double v = xp[h * p->W + w];                                                \
                if (arg < 0 || v > acc || (v != v && acc == acc)) acc = v, arg = h * p->W + w; \
              }                                                                             \
            }                                                                               \
          }                                                                                 \
          if (op == TS_OP_MAXPOOL) op_[oh * p->OW + ow] = (T)acc;                           \
          else if (op == TS_OP_AVGPOOL) op_[oh * p->OW + ow] = (T)(acc * inv);              \
          else if (op == TS_OP_MAXPOOL_GRAD && arg >= 0) op_[arg] += dp[oh * p->OW + ow];   \
        }                                                                                   \
    }                                                                                       \
  }

POOL_IMPL(float, f32)
POOL_IMPL(double, f64)

/* ---- NHWC in f32 / f64 ----
 * A window's C channels lie together, so every loop runs over a chunk of up to
 * NHWC_CHUNK channels innermost (unit stride, vectorized) where the planar
 * kernel above reads strided rows. Per channel the operations and their order
 * are the planar kernel's: a window inside the plane folds its max in row-major
 * order (m = v > m ? v : m from its first value; NaN if any value is NaN) and
 * sends the gradient to its first max (or first NaN); a window over padding
 * keeps the first of the strictly larger values (or the first NaN); averages
 * sum in double and divide by the full window; gradients are added window by
 * window in (oh, ow) order. So an NHWC tensor pools to the bits its NCHW
 * transpose does. Threads split images x channel chunks (one writer per
 * output element); a gradient's output is zeroed first, image by image. */
#define NHWC_CHUNK 64

#define NHWC_IMPL(T, SUF)                                                                   \
  static void nhwc_##SUF(const pgeom *p, int64_t N, int64_t C, ts_op op, const T *x, const T *dy, T *out, \
                         int nt) {                                                          \
    bool grad = op == TS_OP_MAXPOOL_GRAD || op == TS_OP_AVGPOOL_GRAD;                       \
    bool isavg = op == TS_OP_AVGPOOL || op == TS_OP_AVGPOOL_GRAD;                           \
    double inv = 1.0 / ((double)p->kh * p->kw);                                             \
    int64_t H = p->H, W = p->W, OH = p->OH, OW = p->OW, chunks = (C + NHWC_CHUNK - 1) / NHWC_CHUNK; \
    int64_t ostride = (grad ? H * W : OH * OW) * C;                                         \
    if (grad) {                                                                             \
      _Pragma("omp parallel for num_threads(nt) if (nt > 1)")                               \
      for (int64_t n = 0; n < N; n++) memset(out + n * ostride, 0, sizeof(T) * (size_t)ostride); \
    }                                                                                       \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1)")                                 \
    for (int64_t t = 0; t < N * chunks; t++) {                                              \
      int64_t n = t / chunks, c0 = (t % chunks) * NHWC_CHUNK;                               \
      int cn = (int)(C - c0 < NHWC_CHUNK ? C - c0 : NHWC_CHUNK);                            \
      const T *xn = x ? x + n * H * W * C + c0 : NULL, *dn = dy ? dy + n * OH * OW * C + c0 : NULL; \
      T *on = out + n * ostride + c0;                                                       \
      for (int64_t oh = 0; oh < OH; oh++)                                                   \
        for (int64_t ow = 0; ow < OW; ow++) {                                               \
          int64_t h0 = oh * p->sh - p->ph, w0 = ow * p->sw - p->pw;                         \
          int ilo = h0 < 0 ? (int)-h0 : 0, jlo = w0 < 0 ? (int)-w0 : 0;                     \
          int ihi = h0 + p->kh > H ? (int)(H - h0) : p->kh, jhi = w0 + p->kw > W ? (int)(W - w0) : p->kw; \
          const T *d = dn ? dn + (oh * OW + ow) * C : NULL;                                 \
          T *y = grad ? NULL : on + (oh * OW + ow) * C;                                     \
          if (isavg && grad) {                                                              \
            for (int i = ilo; i < ihi; i++)                                                 \
              for (int j = jlo; j < jhi; j++) {                                             \
                T *g = on + ((h0 + i) * W + w0 + j) * C;                                    \
                _Pragma("omp simd")                                                         \
                for (int c = 0; c < cn; c++) g[c] += (T)(d[c] * inv);                       \
              }                                                                             \
            continue;                                                                       \
          }                                                                                 \
          if (isavg) {                                                                      \
            double acc[NHWC_CHUNK] = {0};                                                   \
            for (int i = ilo; i < ihi; i++)                                                 \
              for (int j = jlo; j < jhi; j++) {                                             \
                const T *r = xn + ((h0 + i) * W + w0 + j) * C;                              \
                _Pragma("omp simd")                                                         \
                for (int c = 0; c < cn; c++) acc[c] += r[c];                                \
              }                                                                             \
            for (int c = 0; c < cn; c++) y[c] = (T)(acc[c] * inv);                          \
            continue;                                                                       \
          }                                                                                 \
          T m[NHWC_CHUNK];                                                                  \
          if (ilo == 0 && jlo == 0 && ihi == p->kh && jhi == p->kw) { /* inside the plane */ \
            int32_t nan[NHWC_CHUNK], done[NHWC_CHUNK]; /* flags as ints: vectorized */      \
            const T *r0 = xn + (h0 * W + w0) * C;                                           \
            for (int c = 0; c < cn; c++) m[c] = r0[c], nan[c] = r0[c] != r0[c], done[c] = 0;    \
            for (int i = 0; i < p->kh; i++)                                                 \
              for (int j = i ? 0 : 1; j < p->kw; j++) {                                     \
                const T *r = xn + ((h0 + i) * W + w0 + j) * C;                              \
                _Pragma("omp simd")                                                         \
                for (int c = 0; c < cn; c++) {                                              \
                  m[c] = r[c] > m[c] ? r[c] : m[c];                                         \
                  nan[c] |= r[c] != r[c];                                                   \
                }                                                                           \
              }                                                                             \
            if (!grad) {                                                                    \
              _Pragma("omp simd")                                                           \
              for (int c = 0; c < cn; c++) y[c] = nan[c] ? (T)NAN : m[c];                   \
              continue;                                                                     \
            }                                                                               \
            for (int i = 0; i < p->kh; i++)                                                 \
              for (int j = 0; j < p->kw; j++) {                                             \
                int64_t at = ((h0 + i) * W + w0 + j) * C;                                  \
                const T *r = xn + at;                                                       \
                T *g = on + at;                                                             \
                _Pragma("omp simd")                                                         \
                for (int c = 0; c < cn; c++) { /* a select, not + 0: -0 stays -0 */         \
                  int32_t hit = (done[c] == 0) & (nan[c] ? r[c] != r[c] : r[c] == m[c]);      \
                  g[c] = hit ? g[c] + d[c] : g[c];                                          \
                  done[c] |= hit;                                                           \
                }                                                                           \
              }                                                                             \
            continue;                                                                       \
          }                                                                                 \
          int64_t arg[NHWC_CHUNK];                                                          \
          for (int c = 0; c < cn; c++) m[c] = (T)-INFINITY, arg[c] = -1;                    \
          for (int i = ilo; i < ihi; i++)                                                   \
            for (int j = jlo; j < jhi; j++) {                                               \
              int64_t at = ((h0 + i) * W + w0 + j) * C;                                     \
              const T *r = xn + at;                                                         \
              for (int c = 0; c < cn; c++)                                                  \
                if (arg[c] < 0 || r[c] > m[c] || (r[c] != r[c] && m[c] == m[c])) m[c] = r[c], arg[c] = at; \
            }                                                                               \
          for (int c = 0; c < cn; c++)                                                      \
            if (!grad) y[c] = m[c];                                                         \
            else if (arg[c] >= 0) on[arg[c] + c] += d[c];                                   \
        }                                                                                   \
    }                                                                                       \
  }

NHWC_IMPL(float, f32)
NHWC_IMPL(double, f64)

static double *to_f64(ts_dtype dt, const void *p, int64_t n) {
  double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
  if (d)
    for (int64_t i = 0; i < n; i++) d[i] = tk_load_f64(dt, p, i);
  return d;
}

/* (N, H, W, C) of dtype dt -> planar (N, C, H, W) doubles; NULL when out of memory. */
static double *nhwc_to_planar(ts_dtype dt, const void *p, const int64_t *s) {
  int64_t N = s[0], H = s[1], W = s[2], C = s[3], total = N * H * W * C;
  double *d = malloc((size_t)(total > 0 ? total : 1) * sizeof *d);
  if (d)
    for (int64_t i = 0, n = 0; n < N; n++)
      for (int64_t hw = 0; hw < H * W; hw++)
        for (int64_t c = 0; c < C; c++) d[(n * C + c) * H * W + hw] = tk_load_f64(dt, p, i++);
  return d;
}

/* 2x2 max windows of stride 2 without padding, each inside the input: pool22.c's case */
static bool is22(const ts_node *n, const pgeom *p) {
  return (n->op == TS_OP_MAXPOOL || n->op == TS_OP_MAXPOOL_GRAD) && p->kh == 2 && p->kw == 2 && p->sh == 2 &&
         p->sw == 2 && p->ph == 0 && p->pw == 0 && 2 * p->OH <= p->H && 2 * p->OW <= p->W;
}

static int pool_nhwc(const ts_node *n, const pgeom *p, const ts_node *xs, const ts_node *ys, const void *x,
                     const void *dy, void *out, int nt) {
  double *xd = x ? nhwc_to_planar(n->dtype, x, xs->shape) : NULL, *dd = dy ? nhwc_to_planar(n->dtype, dy, ys->shape) : NULL;
  double *od = malloc((size_t)(tk_numel(n) ? tk_numel(n) : 1) * sizeof *od);
  int rc = 0;
  if ((x && !xd) || (dy && !dd) || !od) {
    rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", ir_op_name(n->op));
  } else {
    if (is22(n, p)) tk_pool22_f64(p, xd, dd, od, nt);
    else pool_f64(p, n->op, xd, dd, od, nt);
    int64_t N = n->shape[0], HW = n->shape[1] * n->shape[2], C = n->shape[3];
    for (int64_t i = 0, b = 0; b < N; b++)
      for (int64_t hw = 0; hw < HW; hw++)
        for (int64_t c = 0; c < C; c++) tk_store_f64(n->dtype, out, i++, od[(b * C + c) * HW + hw]);
  }
  free(xd), free(dd), free(od);
  return rc;
}

/* 2x2 stride-2 max windows in pool22.c where it has the layout and dtype: true when done */
static bool pool22(const ts_node *n, const pgeom *p, const ts_node *xs, const void *x, const void *dy, void *out,
                   int nt) {
  if (n->attr.pool.layout == TS_LAYOUT_NHWC) {
    if (n->dtype == TS_F32) tk_pool22_nhwc_f32(p, xs->shape[0], xs->shape[3], x, dy, out, nt);
    else if (n->dtype == TS_F64) tk_pool22_nhwc_f64(p, xs->shape[0], xs->shape[3], x, dy, out, nt);
    else if (n->dtype == TS_BF16 || n->dtype == TS_F16) /* out of memory: the general path reports it */
      return tk_pool22_nhwc_half(n->dtype, p, xs->shape[0], xs->shape[3], x, dy, out, nt) == 0;
    else return false;
    return true;
  }
  if (n->dtype == TS_F32) tk_pool22_f32(p, x, dy, out, nt);
  else if (n->dtype == TS_F64) tk_pool22_f64(p, x, dy, out, nt);
  else if (n->dtype == TS_BF16 || n->dtype == TS_F16) tk_pool22_half(n->dtype, p, x, dy, out, nt);
  else return false;
  return true;
}

int tk_pool(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  const ts_pool_params *pp = &n->attr.pool;
  /* x-shaped and y-shaped nodes: fwd (x -> out), max grad (x, dy), avg grad (dy) */
  const ts_node *xs = n->op == TS_OP_MAXPOOL || n->op == TS_OP_AVGPOOL || n->op == TS_OP_MAXPOOL_GRAD
                          ? tk_operand(g, n, 0) : n;
  const ts_node *ys = n->op == TS_OP_MAXPOOL || n->op == TS_OP_AVGPOOL ? n
                      : tk_operand(g, n, n->op == TS_OP_MAXPOOL_GRAD ? 1 : 0);
  if (xs->rank != 4 || ys->rank != 4) return set_error("%s: expects rank-4 (N, C, H, W) tensors", ir_op_name(n->op));
  int cd = ir_chan_dim(pp->layout), sd = ir_space_dim(pp->layout);
  pgeom p = {xs->shape[0] * xs->shape[cd], xs->shape[sd], xs->shape[sd + 1], ys->shape[sd], ys->shape[sd + 1],
             pp->kernel[0], pp->kernel[1], pp->stride[0] > 0 ? pp->stride[0] : pp->kernel[0],
             pp->stride[1] > 0 ? pp->stride[1] : pp->kernel[1], pp->pad[0], pp->pad[1]};
  const void *x = n->op == TS_OP_AVGPOOL_GRAD ? NULL : in[0];
  const void *dy = n->op == TS_OP_MAXPOOL_GRAD ? in[1] : n->op == TS_OP_AVGPOOL_GRAD ? in[0] : NULL;
  int nt = tk_threads(ctx, p.planes * p.H * p.W);
  if (is22(n, &p) && pool22(n, &p, xs, x, dy, out, nt)) return 0; /* the CNN's pool: pool22.c */
  if (pp->layout == TS_LAYOUT_NHWC && (n->dtype == TS_F32 || n->dtype == TS_F64)) {
    int64_t N = xs->shape[0], C = xs->shape[3];
    if (n->dtype == TS_F32) nhwc_f32(&p, N, C, n->op, x, dy, out, nt);
    else nhwc_f64(&p, N, C, n->op, x, dy, out, nt);
    return 0;
  }
  if (pp->layout == TS_LAYOUT_NHWC) return pool_nhwc(n, &p, xs, ys, x, dy, out, nt);
  if (n->dtype == TS_F32) {
    pool_f32(&p, n->op, x, dy, out, nt);
    return 0;
  }
  if (n->dtype == TS_F64) {
    pool_f64(&p, n->op, x, dy, out, nt);
    return 0;
  }
  int64_t xn = tk_numel(xs), yn = tk_numel(ys), on = tk_numel(n);
  double *xd = x ? to_f64(n->dtype, x, xn) : NULL, *dd = dy ? to_f64(n->dtype, dy, yn) : NULL;
  double *od = malloc((size_t)(on ? on : 1) * sizeof *od);
  int rc = 0;
  if ((x && !xd) || (dy && !dd) || !od) {
    rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", ir_op_name(n->op));
  } else {
    pool_f64(&p, n->op, xd, dd, od, nt);
    for (int64_t i = 0; i < on; i++) tk_store_f64(n->dtype, out, i, od[i]);
  }
  free(xd), free(dd), free(od);
  return rc;
}
