/* fused_bias.c — a bias add, then ReLU, in one pass (fused_fast.c's
 * TK_FAST_BIAS: max(x + b, c) or max(b + x, c), or the add alone; x an f32
 * input, b an f32 per-channel input): a convolution's bias over runs of
 * H*W elements (the MNIST CNN's conv1 and conv2), a dense layer's over rows
 * (a run of one element, channel e % C). The interpreter made two passes
 * over a tile (the add, the max) besides the broadcast's.
 *
 * The same bits as the interpreter: the add keeps its first operand quieted
 * where that is NaN (fused_fast.c's add_o: the x86 rule, pinned to the
 * program's operand order; with the first not NaN the plain sum returns the
 * other's NaN in either order), the max is fused.c's expression with the
 * same operands. Runs in blocks of NAN_BLK after a prefetch (nan_ahead).
 * Each element is read before it is written, so the output may be x
 * itself; an output that meets x at another offset, or meets b, is computed
 * a block at a time into a buffer. */
#include "kernels/kernels_internal.h"
#include "kernels/nan_order.h"

#define INLINE static inline __attribute__((always_inline))

/* o[0 .. n) = [max(] x + b [, c)] (x first; else b + x); b the scalar bs, or (vec) B[j]. */
INLINE void bias_loop(const float *X, float bs, const float *B, bool vec, float c, float *o, int64_t n,
                      bool x_first, bool relu) {
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(X, false, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float x = X[j], b = vec ? B[j] : bs;
      float v = x_first ? (x != x ? nan_quieted(x) : x + b) : (b != b ? nan_quieted(b) : b + x);
      if (relu) v = (v > c || v != v) ? v : c; /* fused.c's MAX */
      o[j] = v;
    }
  }
}

typedef void bias_fn(const float *X, float bs, const float *B, float c, float *o, int64_t n);
#define BIAS(name, vec, x_first, relu)                                                         \
  static void name(const float *X, float bs, const float *B, float c, float *o, int64_t n) { \
    bias_loop(X, bs, B, vec, c, o, n, x_first, relu);                                        \
  }
BIAS(run_xb, false, true, false)
BIAS(run_xb_relu, false, true, true)
BIAS(run_bx, false, false, false)
BIAS(run_bx_relu, false, false, true)
BIAS(row_xb, true, true, false)
BIAS(row_xb_relu, true, true, true)
BIAS(row_bx, true, false, false)
BIAS(row_bx_relu, true, false, true)

/* Whether [p, p + n) and [q, q + m) meet. */
static bool meets(const float *p, int64_t n, const float *q, int64_t m) { return p < q + m && q < p + n; }

/* Elements [lo, hi) into o (element lo at o[0]), reading x from X (element lo at X[0]) and b from B. */
static void bias_range(const tk_fast *F, const float *X, const float *B, float *o, int64_t lo, int64_t hi) {
  static bias_fn *const runs[4] = {run_bx, run_bx_relu, run_xb, run_xb_relu};
  static bias_fn *const rows[4] = {row_bx, row_bx_relu, row_xb, row_xb_relu};
  int form = F->x_first * 2 + F->relu;
  int64_t inner = F->inner, nch = F->nch;
  for (int64_t e = lo; e < hi;) {
    int64_t n;
    if (inner > 1) {
      n = inner - e % inner < hi - e ? inner - e % inner : hi - e;
      runs[form](X + (e - lo), B[e / inner % nch], NULL, F->relu_c, o + (e - lo), n);
    } else {
      int64_t ph = e % nch;
      n = nch - ph < hi - e ? nch - ph : hi - e;
      rows[form](X + (e - lo), 0, B + ph, F->relu_c, o + (e - lo), n);
    }
    e += n;
  }
}

void tk_fast_bias_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  const float *X = (const float *)in[F->x.ext] + lo, *B = in[F->m];
  float *o = out;
  int64_t n = hi - lo;
  if ((X == o || !meets(o, n, X, n)) && !meets(o, n, B, F->nch)) {
    bias_range(F, X, B, o, lo, hi);
    return;
  }
  float buf[NAN_BLK];
  for (int64_t e = 0; e < n; e += NAN_BLK) {
    int64_t m = n - e < NAN_BLK ? n - e : NAN_BLK;
    bias_range(F, X + e, B, buf, lo + e, lo + e + m);
    memcpy(o + e, buf, (size_t)m * sizeof *buf);
  }
}
