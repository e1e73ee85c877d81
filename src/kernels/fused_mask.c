/* fused_mask.c — ReLU's gradient for fused_fast.c (TK_FAST_MASK):
 * select(compare(y, k), u [+ w], c) in one pass over the inputs, each read
 * where it is (bf16 widened in the loop) and the result written straight
 * into the output, with no chunks, buffers, NaN check or rerun (in blocks of
 * NAN_BLK elements, each after a prefetch ahead: nan_order.h).
 *
 * The same bits as the interpreter. The only arithmetic is u + w, which the
 * interpreter computes with u first: when u is NaN the result is u quieted
 * (x86's rule for a first NaN operand), otherwise the hardware's plain sum,
 * in which at most one operand (w) is NaN and whose result then does not
 * depend on the operand order the compiler picks. So the loop adds plainly
 * and replaces the sum by quiet(u) where u is NaN: two vector instructions
 * (a compare and a masked or) where fused_fast.c's rerun scheme needed a
 * NaN test per chunk, and, when the output is one of the inputs (the memory
 * plan writes the gradient of a residual sum over one of its terms), a
 * staging buffer and a copy per chunk so that a rerun could read the inputs
 * intact (a 1-thread ResNet-50 bf16 step's relu grad + add went from ~13 to
 * ~16.7 ms with them). Each element's operands are read before its result
 * is written, so the output may be any of the inputs.
 *
 * The comparison is one expression for all six (lt, eq, gt and unordered
 * flags): NE is the only one true on an unordered pair (y or k NaN), as
 * with the C operators the interpreter uses. Loops are instantiated for each storage type of u,
 * w, y and the result (always_inline with constant flags). */
#include "kernels/bf16_round.h"
#include "kernels/kernels_internal.h"
#include "kernels/nan_order.h"

#define INLINE static inline __attribute__((always_inline))

typedef struct {
  const void *u, *w, *y; /* from the range's first element */
  float k, c;
  int32_t lt, eq, gt, un; /* which outcomes of y against k select u [+ w] (-1 or 0) */
} mask_args;

INLINE void mask_loop(const mask_args *A, bool ub, bool wb, bool yb, bool has_w, bool ob, bool gt_only, void *out,
                      int64_t n) {
  const void *U = A->u, *W = A->w, *Y = A->y;
  float k = A->k, c = A->c, *of = out;
  int32_t lt = A->lt, eq = A->eq, gt = A->gt, un = A->un;
  uint16_t *oh = out;
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(U, ub, j0, n), nan_ahead(Y, yb, j0, n);
    if (has_w) nan_ahead(W, wb, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    nan_touch(U, ub, j0, j1); /* u and w are read by masked loads: nan_order.h */
    if (has_w) nan_touch(W, wb, j0, j1);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float u = nan_ld(U, ub, j), v = u;
      if (has_w) {
        v = u + nan_ld(W, wb, j);
        v = u != u ? nan_quieted(u) : v; /* add_o(u, w) */
      }
      float y = nan_ld(Y, yb, j);
      /* the flags as masks (-1 or 0), so that their logic stays in vector lanes */
      int32_t s = (lt & -(int32_t)(y < k)) | (eq & -(int32_t)(y == k)) | (gt & -(int32_t)(y > k)) |
                  (un & -(int32_t)(y != y || k != k));
      float r = (gt_only ? y > k : s != 0) ? v : c;
      if (ob) oh[j] = (uint16_t)bf16_bits(r);
      else of[j] = r;
    }
  }
}

/* The loop for the result's storage type ob and the comparison (GT, ReLU's,
 * with the flags folded away: a third less time on cache-resident operands,
 * bench_fused_loops; u, w, y's types fixed by the callers below). */
#define BY_CMP(ub, wb, yb, hw, ob) \
  (gt ? mask_loop(A, ub, wb, yb, hw, ob, true, out, n) : mask_loop(A, ub, wb, yb, hw, ob, false, out, n))
#define BY_OUT(ub, wb, yb, hw) (ob ? BY_CMP(ub, wb, yb, hw, true) : BY_CMP(ub, wb, yb, hw, false))
static void loop_f32_y(const mask_args *A, bool ub, bool wb, bool hw, bool ob, bool gt, void *out, int64_t n) {
  if (!hw) ub ? BY_OUT(true, false, false, false) : BY_OUT(false, false, false, false);
  else if (ub) wb ? BY_OUT(true, true, false, true) : BY_OUT(true, false, false, true);
  else wb ? BY_OUT(false, true, false, true) : BY_OUT(false, false, false, true);
}
static void loop_bf16_y(const mask_args *A, bool ub, bool wb, bool hw, bool ob, bool gt, void *out, int64_t n) {
  if (!hw) ub ? BY_OUT(true, false, true, false) : BY_OUT(false, false, true, false);
  else if (ub) wb ? BY_OUT(true, true, true, true) : BY_OUT(true, false, true, true);
  else wb ? BY_OUT(false, true, true, true) : BY_OUT(false, false, true, true);
}

static const void *at(tk_in in, const tk_fast_src *s, int64_t lo) {
  return (const char *)in[s->ext] + lo * (s->bf16 ? 2 : 4);
}

void tk_fast_mask_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  bool hw = F->nterm == 2;
  ts_cmp q = F->cmp;
  mask_args A = {.u = at(in, &F->t[0].x, lo), .w = hw ? at(in, &F->t[1].x, lo) : NULL, .y = at(in, &F->x, lo),
                 .k = F->mask_k, .c = F->mask_c,
                 .lt = -(int32_t)(q == TS_CMP_LT || q == TS_CMP_LE || q == TS_CMP_NE),
                 .eq = -(int32_t)(q == TS_CMP_EQ || q == TS_CMP_LE || q == TS_CMP_GE),
                 .gt = -(int32_t)(q == TS_CMP_GT || q == TS_CMP_GE || q == TS_CMP_NE),
                 .un = -(int32_t)(q == TS_CMP_NE)};
  bool ub = F->t[0].x.bf16, wb = hw && F->t[1].x.bf16, yb = F->x.bf16;
  (yb ? loop_bf16_y : loop_f32_y)(&A, ub, wb, hw, F->out_bf16, q == TS_CMP_GT, out, hi - lo);
}
