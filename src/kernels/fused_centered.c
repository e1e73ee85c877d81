/* fused_centered.c — batch norm's reduced terms for fused_fast.c
 * (TK_FAST_CENTERED): (x - m) * (x - m), dy * (x - m) or (x - m) * dy, m per
 * channel, one loop per channel run, each input read where it is (bf16
 * widened in the loop) and the result written straight into the output, with
 * no chunks, buffers, NaN check or rerun (in blocks of NAN_BLK elements,
 * each after a prefetch ahead: nan_order.h).
 *
 * The fused reductions of a ResNet step read these terms run by run; at 7x7
 * and 14x14 a run is 49 or 196 elements, and fused_fast.c's chunk loop spent
 * more per run than the arithmetic (two widening calls into stack buffers,
 * the loop, a NaN test finished by a scalar loop: bn grad sums ran at ~4 GB/s
 * in a 1-thread ResNet-20 bf16 step, the elementwise programs at ~20).
 *
 * The same bits as the interpreter: x - m as it is (a subtraction's operands
 * are never swapped), a square has one operand; the product with dy keeps the
 * first operand's NaN (mul_o) by a fix-up instead of a rerun: where the first
 * operand is NaN the result is it quieted, elsewhere at most the second is
 * NaN and the hardware's plain product does not depend on the operand order
 * (fused_mask.c does the same for ReLU's gradient). Each element's operands
 * are read before it is written, so the output may be one of the inputs. */
#include "kernels/kernels_internal.h"
#include "kernels/nan_order.h"

#define INLINE static inline __attribute__((always_inline))

enum { SQUARE, DY_FIRST, X_FIRST };

/* d[0 .. n) = the term of form over one channel run (mean m). */
INLINE void run_loop(const void *X, bool xb, const void *Y, bool yb, int form, float m, float *d, int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(X, xb, j0, n);
    if (form != SQUARE) nan_ahead(Y, yb, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float t = nan_ld(X, xb, j) - m;
      if (form == SQUARE) {
        d[j] = t * t;
      } else {
        float y = nan_ld(Y, yb, j), a = form == DY_FIRST ? y : t, r = y * t;
        d[j] = a != a ? nan_quieted(a) : r; /* mul_o(a, the other) */
      }
    }
  }
}

typedef void run_fn(const void *X, const void *Y, float m, float *d, int64_t n);
#define RUN_FN(name, xb, yb, form) \
  static void name(const void *X, const void *Y, float m, float *d, int64_t n) { run_loop(X, xb, Y, yb, form, m, d, n); }
RUN_FN(sq_f, false, false, SQUARE)
RUN_FN(sq_h, true, false, SQUARE)
RUN_FN(dy_ff, false, false, DY_FIRST)
RUN_FN(dy_fh, false, true, DY_FIRST)
RUN_FN(dy_hf, true, false, DY_FIRST)
RUN_FN(dy_hh, true, true, DY_FIRST)
RUN_FN(x_ff, false, false, X_FIRST)
RUN_FN(x_fh, false, true, X_FIRST)
RUN_FN(x_hf, true, false, X_FIRST)
RUN_FN(x_hh, true, true, X_FIRST)

/* The loop for F's form and storage types (x's first, then dy's: f32 or bf16 "h"). */
static run_fn *pick(const tk_fast *F) {
  bool xb = F->x.bf16, yb = F->dy.bf16;
  if (F->square) return xb ? sq_h : sq_f;
  static run_fn *const dy[4] = {dy_ff, dy_fh, dy_hf, dy_hh}, *const x[4] = {x_ff, x_fh, x_hf, x_hh};
  return (F->dy_first ? dy : x)[xb * 2 + yb];
}

void tk_fast_centered_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  run_fn *fn = pick(F);
  size_t xs = F->x.bf16 ? 2 : 4, ys = F->dy.bf16 ? 2 : 4;
  const char *X = in[F->x.ext], *Y = F->square ? NULL : in[F->dy.ext];
  const float *m = in[F->m];
  int64_t r = lo % F->inner, ch = lo / F->inner % F->nch; /* lo's place in its run, its channel */
  for (int64_t e = lo; e < hi;) {
    int64_t n = F->inner - r < hi - e ? F->inner - r : hi - e;
    fn(X + (size_t)e * xs, Y ? Y + (size_t)e * ys : NULL, m[ch], (float *)out + (e - lo), n);
    e += n, r = 0, ch = ch + 1 == F->nch ? 0 : ch + 1;
  }
}
