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

/* The term of form for x, dy = y and mean m. */
INLINE float term(float x, float y, int form, float m) {
  float t = x - m;
  if (form == SQUARE) return t * t;
  float a = form == DY_FIRST ? y : t, r = y * t;
  return a != a ? nan_quieted(a) : r; /* mul_o(a, the other) */
}

/* d[0 .. n) = the term of form over one channel run (mean m). */
INLINE void run_loop(const void *X, bool xb, const void *Y, bool yb, int form, float m, float *d, int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(X, xb, j0, n);
    if (form != SQUARE) nan_ahead(Y, yb, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++)
      d[j] = term(nan_ld(X, xb, j), form == SQUARE ? 0.f : nan_ld(Y, yb, j), form, m);
  }
}

/* d[0 .. n) = the term of form over elements of one channel each (runs of 1:
 * channels innermost, NHWC), element 0 of channel ch, the means m[0 .. nch):
 * row by row, each a loop over its channels with their means (a loop per
 * channel run would be a call per element). */
INLINE void row_loop(const void *X, bool xb, const void *Y, bool yb, int form, const float *m, int64_t nch,
                     int64_t ch, float *d, int64_t n) {
  for (int64_t e = 0; e < n;) {
    int64_t cnt = nch - ch < n - e ? nch - ch : n - e;
    const float *mr = m + ch;
    float *dr = d + e;
    _Pragma("omp simd") for (int64_t j = 0; j < cnt; j++)
      dr[j] = term(nan_ld(X, xb, e + j), form == SQUARE ? 0.f : nan_ld(Y, yb, e + j), form, mr[j]);
    e += cnt, ch = 0;
  }
}

typedef void run_fn(const void *X, const void *Y, float m, float *d, int64_t n);
typedef void row_fn(const void *X, const void *Y, const float *m, int64_t nch, int64_t ch, float *d, int64_t n);
#define RUN_FN(name, xb, yb, form)                                                                        \
  static void name(const void *X, const void *Y, float m, float *d, int64_t n) {                          \
    run_loop(X, xb, Y, yb, form, m, d, n);                                                                \
  }                                                                                                       \
  static void name##_rows(const void *X, const void *Y, const float *m, int64_t nch, int64_t ch, float *d, \
                          int64_t n) {                                                                    \
    row_loop(X, xb, Y, yb, form, m, nch, ch, d, n);                                                       \
  }
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

/* The loops for F's form and storage types (x's first, then dy's: f32 or bf16 "h"): index into the tables below. */
static int pick(const tk_fast *F) {
  bool xb = F->x.bf16, yb = F->dy.bf16;
  if (F->square) return xb;
  return 2 + (F->dy_first ? 0 : 4) + xb * 2 + yb;
}
static run_fn *const runs[10] = {sq_f, sq_h, dy_ff, dy_fh, dy_hf, dy_hh, x_ff, x_fh, x_hf, x_hh};
static row_fn *const rows[10] = {sq_f_rows, sq_h_rows, dy_ff_rows, dy_fh_rows, dy_hf_rows,
                                 dy_hh_rows, x_ff_rows, x_fh_rows, x_hf_rows, x_hh_rows};

void tk_fast_centered_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  size_t xs = F->x.bf16 ? 2 : 4, ys = F->dy.bf16 ? 2 : 4;
  const char *X = in[F->x.ext], *Y = F->square ? NULL : in[F->dy.ext];
  const float *m = in[F->m];
  if (F->inner == 1) { /* channels innermost: one call for the range */
    rows[pick(F)](X + (size_t)lo * xs, Y ? Y + (size_t)lo * ys : NULL, m, F->nch, lo % F->nch, out, hi - lo);
    return;
  }
  run_fn *fn = runs[pick(F)];
  int64_t r = lo % F->inner, ch = lo / F->inner % F->nch; /* lo's place in its run, its channel */
  for (int64_t e = lo; e < hi;) {
    int64_t n = F->inner - r < hi - e ? F->inner - r : hi - e;
    fn(X + (size_t)e * xs, Y ? Y + (size_t)e * ys : NULL, m[ch], (float *)out + (e - lo), n);
    e += n, r = 0, ch = ch + 1 == F->nch ? 0 : ch + 1;
  }
}
