/* fused_adam.c — AdamW's update (src/nn/optim.c) in one pass per call, for
 * fused_fast.c (tk_fast_match describes the programs, tk_fast_run calls here):
 *   - the moments, TK_FAST_MOMENT: k0 x0 + k1 x1, a term x * x where
 *     squared (b1 m + c1 g and b2 v + c2 (g g); with clipping, c1 and c2 are
 *     scalar inputs and g g may be an input of its own);
 *   - the parameter, TK_FAST_ADAMW: pd - step (m / (sqrt(v) / bc + eps)),
 *     pd = p or p decay (no decay: weight decay 0 or a vector's under
 *     decay_matrices_only).
 * The tile interpreter (fused.c) makes a pass over a tile per instruction
 * (eight for the parameter, its sqrt a scalar libm call per element); these
 * read each input once and write the output once, in blocks of NAN_BLK
 * after a prefetch (nan_ahead), like fused_apply.c's loops.
 *
 * The same bits as the interpreter: the same f32 operations in the same
 * order, each rounded (compiled with -ffp-contract=off: no product fused
 * into a sum; and -fno-math-errno, so that sqrtf is the vector instruction:
 * the same correctly rounded root, and for a negative operand the same
 * default NaN libm's sqrtf returns). Which NaN payload an add or a mul
 * returns depends on its operand order where both operands are NaN
 * (fused_fast.c's add_o, mul_o: the first, quieted); a division, a
 * subtraction and the sqrt are never reordered by the compiler. So:
 *   - the one add of two vectors (the moments' sum) keeps its first
 *     operand quieted where that is NaN (ORD below);
 *   - the scalar factors (k0, k1, decay, step, eps) are checked once per
 *     call: none NaN, a mul or add by one has at most one NaN operand and
 *     the plain operation returns it in either order; else the call runs the
 *     loop with every such operation in the program's operand order (exact).
 * Each element's operands are read before it is written, so the output may
 * be one of the inputs (the update writes in place); an output that meets an
 * input at another offset is computed a block at a time into a buffer. */
#include <math.h>
#include <stdlib.h>

#include "kernels/kernels_internal.h"
#include "kernels/nan_order.h"

#define INLINE static inline __attribute__((always_inline))

/* r (a op b) as x86 computes a op b when a is NaN: a quieted (the order pinned). */
#define ORD(a, r) ((a) != (a) ? nan_quieted(a) : (r))

/* k * x (left) or x * k, in that operand order. */
INLINE float mul_side(float k, float x, bool left) { return left ? ORD(k, k * x) : ORD(x, x * k); }
/* k + x (left) or x + k, in that operand order. */
INLINE float add_side(float k, float x, bool left) { return left ? ORD(k, k + x) : ORD(x, x + k); }

/* One call's operands: the full-size inputs from the call's first element
 * (moment: x0, x1; parameter: p, m, v), the scalars (moment: k0, k1;
 * parameter: decay, step, bc, eps) and the program's forms. */
typedef struct {
  const float *x[3];
  float k[4];
  bool left[4]; /* per scalar: its mul's / add's first operand */
  bool sq[2], decay;
} args;

typedef void loop_fn(const args *A, float *o, int64_t n);

/* o[0 .. n) = k0 x0 + k1 x1 (x squared where sq), the scaled terms in the
 * operand order of the program where exact. */
INLINE void moment_loop(const args *A, float *o, int64_t n, bool sq0, bool sq1, bool exact) {
  const float *X0 = A->x[0], *X1 = A->x[1];
  float k0 = A->k[0], k1 = A->k[1];
  bool l0 = A->left[0], l1 = A->left[1];
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(X0, false, j0, n), nan_ahead(X1, false, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float a = X0[j], b = X1[j];
      if (sq0) a = a * a; /* one operand twice: either order */
      if (sq1) b = b * b;
      float p = exact ? mul_side(k0, a, l0) : k0 * a, q = exact ? mul_side(k1, b, l1) : k1 * b;
      o[j] = ORD(p, p + q);
    }
  }
}

/* o[0 .. n) = pd - step * (m / (sqrt(v) / bc + eps)), pd = p * decay where
 * decay (else p); the scalar operations in the program's operand order where exact. */
INLINE void adamw_loop(const args *A, float *o, int64_t n, bool decay, bool exact) {
  const float *P = A->x[0], *M = A->x[1], *V = A->x[2];
  float dk = A->k[0], sk = A->k[1], bk = A->k[2], ek = A->k[3];
  bool dl = A->left[0], sl = A->left[1], el = A->left[3];
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(P, false, j0, n), nan_ahead(M, false, j0, n), nan_ahead(V, false, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float pd = P[j];
      if (decay) pd = exact ? mul_side(dk, pd, dl) : pd * dk;
      float s = sqrtf(V[j]) / bk;
      float den = exact ? add_side(ek, s, el) : s + ek;
      float q = M[j] / den;
      o[j] = pd - (exact ? mul_side(sk, q, sl) : sk * q);
    }
  }
}

#define MOMENT(name, sq0, sq1) \
  static void name(const args *A, float *o, int64_t n) { moment_loop(A, o, n, sq0, sq1, false); }
MOMENT(moment_xx, false, false)
MOMENT(moment_xs, false, true)
MOMENT(moment_sx, true, false)
MOMENT(moment_ss, true, true)
static void moment_exact(const args *A, float *o, int64_t n) { moment_loop(A, o, n, A->sq[0], A->sq[1], true); }
static void adamw_plain(const args *A, float *o, int64_t n) { adamw_loop(A, o, n, false, false); }
static void adamw_decay(const args *A, float *o, int64_t n) { adamw_loop(A, o, n, true, false); }
static void adamw_exact(const args *A, float *o, int64_t n) { adamw_loop(A, o, n, A->decay, true); }

static float kval(tk_in in, tk_fast_k k) { return k.ext >= 0 ? ((const float *)in[k.ext])[0] : k.c; }
static const float *at(tk_in in, int k, int64_t e) { return (const float *)in[k] + e; }

/* *A for F from element lo; its loop (exact when a scalar factor is NaN). */
static loop_fn *prepare(const tk_fast *F, tk_in in, int64_t lo, args *A) {
  memset(A, 0, sizeof *A);
  bool nan = false;
  if (F->kind == TK_FAST_MOMENT) {
    for (int i = 0; i < 2; i++) {
      const tk_fast_prod *t = &F->pr[i];
      A->x[i] = at(in, t->x, lo), A->k[i] = kval(in, t->k), A->left[i] = t->k_left, A->sq[i] = t->square;
      nan |= isnan(A->k[i]);
    }
    if (nan) return moment_exact;
    static loop_fn *const forms[4] = {moment_xx, moment_xs, moment_sx, moment_ss};
    return forms[A->sq[0] * 2 + A->sq[1]];
  }
  A->x[0] = at(in, F->ap, lo), A->x[1] = at(in, F->am, lo), A->x[2] = at(in, F->av, lo);
  A->k[0] = F->decay_on ? kval(in, F->decay) : 1.f, A->k[1] = kval(in, F->step);
  A->k[2] = kval(in, F->bc), A->k[3] = kval(in, F->eps);
  A->left[0] = F->decay_left, A->left[1] = F->step_left, A->left[3] = F->eps_left, A->decay = F->decay_on;
  nan = isnan(A->k[0]) || isnan(A->k[1]) || isnan(A->k[3]); /* bc divides: never reordered */
  return nan ? adamw_exact : F->decay_on ? adamw_decay : adamw_plain;
}

/* Whether the output (n floats at o) meets one of A's inputs other than element for element. */
static bool overlaps(const tk_fast *F, const args *A, const float *o, int64_t n) {
  for (int i = 0; i < (F->kind == TK_FAST_MOMENT ? 2 : 3); i++)
    if (A->x[i] != o && A->x[i] < o + n && o < A->x[i] + n) return true;
  return false;
}

void tk_fast_adam_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  args A;
  loop_fn *fn = prepare(F, in, lo, &A);
  int64_t n = hi - lo;
  if (!overlaps(F, &A, out, n)) {
    fn(&A, out, n);
    return;
  }
  float buf[NAN_BLK];
  for (int64_t e = 0; e < n; e += NAN_BLK) {
    int64_t m = n - e < NAN_BLK ? n - e : NAN_BLK;
    args B = A;
    for (int i = 0; i < 3; i++) B.x[i] = A.x[i] ? A.x[i] + e : NULL;
    fn(&B, buf, m);
    memcpy((float *)out + e, buf, (size_t)m * 4);
  }
}
