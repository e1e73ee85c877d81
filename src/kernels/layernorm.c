/* layernorm.c — TS_OP_LAYERNORM, TS_OP_LAYERNORM_GRAD, TS_OP_LAYERNORM_DGAMMA:
 * f32 layer norm over the last dim D of x, N = numel / D rows, OpenMP over
 * rows. Each row (D floats) stays in cache, so its statistics are two passes
 * over cached data and the kernel reads x once from memory:
 *   forward:  mean = sum(x) / D; var = sum((x - mean)^2) / D (biased);
 *             rstd = 1 / sqrt(var + eps); y = (x - mean) rstd gamma + beta.
 *   dx:       mean, rstd recomputed (no saved statistics); xhat = (x - mean)
 *             rstd; g = dy gamma; dx = rstd (g - mean(g) - xhat mean(g xhat)).
 *   dgamma:   sum over rows of dy xhat: per fixed block of LN_RB rows a
 *             partial (in row order), then the blocks summed in block order,
 *             so the result does not depend on the thread count.
 * The order of operations is the decomposed form's (composites.c
 * ts_layer_norm_decomposed); sums accumulate in double like its reductions
 * (kernels/reduce.c), values are f32. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "kernels/kernels_internal.h"

#define LN_RB 32 /* rows per dgamma partial */

/* mean and rstd of row x[0..D). */
static inline void ln_stats(const float *x, int64_t D, float eps, float *mean, float *rstd) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < D; j++) s += x[j];
  float m = (float)(s / (double)D);
  double v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < D; j++) {
    float c = x[j] - m;
    v += c * c;
  }
  *mean = m;
  *rstd = 1.0f / sqrtf((float)(v / (double)D) + eps);
}

static void ln_forward(const float *x, const float *gamma, const float *beta, float *y, int64_t N, int64_t D,
                       float eps, int nt) {
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float *xr = x + i * D;
    float *yr = y + i * D;
    float m, r;
    ln_stats(xr, D, eps, &m, &r);
#pragma omp simd
    for (int64_t j = 0; j < D; j++) yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
  }
}

static void ln_grad(const float *x, const float *gamma, const float *dy, float *dx, int64_t N, int64_t D, float eps,
                    int nt) {
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float *xr = x + i * D, *dr = dy + i * D;
    float *o = dx + i * D;
    float m, r;
    ln_stats(xr, D, eps, &m, &r);
    double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t j = 0; j < D; j++) {
      float gj = dr[j] * gamma[j];
      sg += gj;
      sgx += gj * ((xr[j] - m) * r);
    }
    float a = (float)(sg / (double)D), b = (float)(sgx / (double)D);
#pragma omp simd
    for (int64_t j = 0; j < D; j++) o[j] = r * (dr[j] * gamma[j] - a - (xr[j] - m) * r * b);
  }
}

static int ln_dgamma(const float *x, const float *dy, float *out, int64_t N, int64_t D, float eps, int nt) {
  int64_t nb = (N + LN_RB - 1) / LN_RB;
  double *part = calloc((size_t)(nb > 0 ? nb : 1) * (size_t)D, sizeof *part);
  if (!part) return error_oom("layer_norm_dgamma: partials", (size_t)nb * (size_t)D * sizeof *part);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t b = 0; b < nb; b++) {
    double *p = part + b * D;
    int64_t i1 = (b + 1) * LN_RB < N ? (b + 1) * LN_RB : N;
    for (int64_t i = b * LN_RB; i < i1; i++) {
      const float *xr = x + i * D, *dr = dy + i * D;
      float m, r;
      ln_stats(xr, D, eps, &m, &r);
#pragma omp simd
      for (int64_t j = 0; j < D; j++) p[j] += dr[j] * ((xr[j] - m) * r);
    }
  }
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t j = 0; j < D; j++) {
    double s = 0;
    for (int64_t b = 0; b < nb; b++) s += part[b * D + j];
    out[j] = (float)s;
  }
  free(part);
  return 0;
}

int tk_layernorm(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  const ts_node *x = tk_operand(g, n, 0);
  if (x->dtype != TS_F32 || x->rank < 1)
    return set_error("%s: the fused kernel takes an f32 x of rank >= 1", ir_op_name(n->op));
  int64_t D = x->shape[x->rank - 1], numel = tk_numel(x);
  if (D == 0 || numel == 0) {
    if (n->op == TS_OP_LAYERNORM_DGAMMA)
      for (int64_t j = 0; j < D; j++) ((float *)out)[j] = 0;
    return 0;
  }
  int64_t N = numel / D;
  int nt = tk_threads(ctx, numel);
  float eps = (float)n->attr.value;
  switch (n->op) {
  case TS_OP_LAYERNORM: ln_forward(in[0], in[1], in[2], out, N, D, eps, nt); return 0;
  case TS_OP_LAYERNORM_GRAD: ln_grad(in[0], in[1], in[2], out, N, D, eps, nt); return 0;
  case TS_OP_LAYERNORM_DGAMMA: return ln_dgamma(in[0], in[1], out, N, D, eps, nt);
  default: return set_error("%s: not a layer norm op", ir_op_name(n->op));
  }
}
