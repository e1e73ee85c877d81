/* fused_apply.c — the batch-norm apply and input gradient of fused_fast.c
 * (TK_FAST_FORWARD, TK_FAST_BN_GRAD) in one pass per channel run, and the
 * optimizer's scaled terms (TK_FAST_SCALED, f32: no channels, one run): each input
 * read where it is (bf16 widened in the loop), the result rounded and written
 * straight into the output, with no chunks, stack buffers, NaN test or rerun.
 *
 * fused_fast.c's chunk loop ran three to five loops over a 256-element
 * buffer per chunk in a bf16 step (widen, apply, add, NaN test, round and
 * store) and split a 7x7 run of 49 elements into its own chunk: a 1-thread
 * ResNet-50 bf16 step ran these programs at 6.5-11 GB/s, its fp32 step at
 * 13-20.
 *
 * The same bits as the interpreter, whose add and mul keep the first NaN
 * operand's payload (fused_fast.c's add_o / mul_o): an operation with at most
 * one NaN operand returns it quieted in either operand order, so the order the
 * compiler picks matters only where both are NaN. Here the per-channel terms
 * (a, g, b of an apply, k, s of the gradient) are checked once per run: when
 * none is NaN, each mul and add by one of them has one vector operand that
 * may be NaN and the plain operation is exact (the optimizer's scale k the
 * same, once per call); a subtraction's operands are never swapped. The one
 * add of two vectors (an apply plus a residual or a second apply, the
 * optimizer's y + k x) keeps its first operand quieted where that is NaN, as
 * fused_mask.c does. A run with a NaN per-channel term goes to fused_fast.c's
 * chunk loop (tk_fast_chunks), as do storage combinations without a loop here
 * and an output that overlaps an input other than element for element.
 * Each element's operands are read before it is written, so the output may
 * be one of its inputs. Compiled with -ffp-contract=off like fused_fast.c.
 *
 * Channel-innermost programs (NHWC: the per-channel vectors broadcast with
 * runs of one element, channel e % C at element e) run each loop's *_cl
 * form once over the whole range, the per-channel terms read as vectors
 * (cl_run), where the per-run loop made a call per element: a 1-thread NHWC
 * ResNet-20 fp32 step's fused kernels 802 -> 357 ms (least of 2 rounds,
 * bench/ab_trace_least.sh), bench_fused_loops --layout nhwc apply_relu
 * 16.3 -> 0.66 ms (NCHW: 0.63). */
#include <stdlib.h>

#include "kernels/bf16_round.h"
#include "kernels/fused_apply.h"
#include "kernels/nan_order.h"

#define INLINE static inline __attribute__((always_inline))

enum { T_SRC, T_AFF, T_NONE }; /* a forward term: an input, an apply, absent (one-term) */

/* One channel run's operands: full-size inputs from the run's first element,
 * the per-channel terms as scalars; or, channel-innermost (the *_cl loops),
 * the per-channel terms as vectors (cl_v below). */
typedef struct {
  const void *x[2];           /* forward: the terms' inputs; gradient: dy, x */
  float m[2], a[2], g[2], b[2]; /* forward: each apply's terms */
  float k, c, s, gm;          /* gradient: ((dy - c) - (x - gm) * k) * s */
  float relu_c;
  /* channel-innermost: each per-channel term as a vector of nch + NAN_BLK
   * floats, element i the channel of the range's element i (mod nch) */
  const float *v[8]; /* forward: m, a, g, b of t[0], then of t[1]; gradient: gm, k, c, s */
  int64_t nch;
} run_args;

typedef void run_fn(const run_args *A, void *out, int64_t n);

/* The loops run a run in blocks of NAN_BLK after a prefetch (nan_ahead).
 * bench_fused_loops --shape 8,256,56,56, 1 thread, least CPU of 21:
 * apply_relu_amp 2.30 (chunks) / 2.4-4.3 (one loop, perf: half its samples
 * on the widening after the load) / 1.83 ms (blocks), bn_grad_amp 2.65 / - / 1.84. */

/* Element j of a forward term: the input widened, or its apply (rounded to bf16 if r). */
INLINE float term(const void *X, int kind, bool xb, bool r, float m, float a, float g, float b, int64_t j) {
  float v = nan_ld(X, xb, j);
  if (kind == T_SRC) return v;
  float t = ((v - m) * a) * g + b;
  return r ? bf16_round(t) : t;
}

/* Channel-innermost loops (cl): the per-channel term of element j of a
 * block starting at j0 is V[j + d], d = q - j0 with q the block's first
 * element's place in the expanded vectors (q < nch; a block of <= NAN_BLK
 * elements stays inside nch + NAN_BLK), then q steps on by NAN_BLK mod nch. */
#define CH(scalar, vec) (cl ? (vec)[j + d] : (scalar))
INLINE int64_t cl_next(bool cl, int64_t q, int64_t nch) { return cl ? (q + NAN_BLK) % nch : 0; }

/* out[0 .. n) = [max(] t0 [+ t1] [, c)], stored as bf16 (ob) or f32. */
INLINE void fwd_loop(const run_args *A, bool cl, int k0, bool b0, bool r0, int k1, bool b1, bool r1, bool relu,
                     bool ob, void *out, int64_t n) {
  const void *X0 = A->x[0], *X1 = A->x[1];
  float m0 = A->m[0], a0 = A->a[0], g0 = A->g[0], c0 = A->b[0];
  float m1 = A->m[1], a1 = A->a[1], g1 = A->g[1], c1 = A->b[1], c = A->relu_c;
  const float *const *V = A->v;
  float *of = out;
  uint16_t *oh = out;
  for (int64_t j0 = 0, q = 0; j0 < n; j0 += NAN_BLK, q = cl_next(cl, q, A->nch)) {
    nan_ahead(X0, b0, j0, n);
    if (k1 != T_NONE) nan_ahead(X1, b1, j0, n);
    int64_t j1 = nan_blk_end(j0, n), d = q - j0;
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float p = term(X0, k0, b0, r0, CH(m0, V[0]), CH(a0, V[1]), CH(g0, V[2]), CH(c0, V[3]), j), v = p;
      if (k1 != T_NONE) {
        v = p + term(X1, k1, b1, r1, CH(m1, V[4]), CH(a1, V[5]), CH(g1, V[6]), CH(c1, V[7]), j);
        v = p != p ? nan_quieted(p) : v; /* add_o(p, q) */
      }
      if (relu) v = (v > c || v != v) ? v : c; /* fused.c's MAX */
      if (ob) oh[j] = (uint16_t)bf16_bits(v);
      else of[j] = v;
    }
  }
}

/* out[0 .. n) = ((dy - c) - (x - m) * k) * s, stored as bf16 (ob) or f32. */
INLINE void grad_loop(const run_args *A, bool cl, bool dyb, bool xb, bool ob, void *out, int64_t n) {
  const void *DY = A->x[0], *X = A->x[1];
  float m = A->gm, k = A->k, c = A->c, s = A->s;
  const float *const *V = A->v;
  float *of = out;
  uint16_t *oh = out;
  for (int64_t j0 = 0, q = 0; j0 < n; j0 += NAN_BLK, q = cl_next(cl, q, A->nch)) {
    nan_ahead(DY, dyb, j0, n), nan_ahead(X, xb, j0, n);
    int64_t j1 = nan_blk_end(j0, n), d = q - j0;
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float v = ((nan_ld(DY, dyb, j) - CH(c, V[2])) - (nan_ld(X, xb, j) - CH(m, V[0])) * CH(k, V[1])) * CH(s, V[3]);
      if (ob) oh[j] = (uint16_t)bf16_bits(v);
      else of[j] = v;
    }
  }
}

/* The optimizer's scaled terms (TK_FAST_SCALED, f32): out[0 .. n) = p, y - p,
 * p - y, y + p or p + y (form), p = k * x, k not NaN (then either operand
 * order gives x's NaN: exact); an add keeps its first operand quieted where NaN. */
enum { S_P, S_Y_MINUS, S_MINUS_Y, S_Y_PLUS, S_PLUS_Y };
INLINE void scaled_loop(const run_args *A, int form, void *out, int64_t n) {
  const float *X = A->x[0], *Y = A->x[1];
  float k = A->k, *o = out;
  for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
    nan_ahead(X, false, j0, n);
    if (form != S_P) nan_ahead(Y, false, j0, n);
    int64_t j1 = nan_blk_end(j0, n);
    _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) {
      float p = k * X[j], v = p;
      if (form == S_Y_MINUS) v = Y[j] - p;
      if (form == S_MINUS_Y) v = p - Y[j];
      if (form == S_Y_PLUS) v = Y[j] != Y[j] ? nan_quieted(Y[j]) : Y[j] + p;
      if (form == S_PLUS_Y) v = p != p ? nan_quieted(p) : p + Y[j];
      o[j] = v;
    }
  }
}
#define SCALED(name, form) \
  static void name(const run_args *A, void *out, int64_t n) { scaled_loop(A, form, out, n); }
SCALED(s_p, S_P)
SCALED(s_y_minus, S_Y_MINUS)
SCALED(s_minus_y, S_MINUS_Y)
SCALED(s_y_plus, S_Y_PLUS)
SCALED(s_plus_y, S_PLUS_Y)

/* A term's code: its kind, input type and rounding. */
#define TC(kind, xb, r) ((kind) * 4 + (xb) * 2 + (r))
#define FWD_KEY(c0, c1, relu, ob) ((c0) | (c1) << 4 | (relu) << 8 | (ob) << 9)

/* The loops: a ResNet step's forms, bf16 (amp: bf16 inputs, each apply
 * rounded, bf16 result) and f32, each with and without the ReLU and with an
 * input or a second apply on either side of the add; the rest run in chunks. */
#define FWD(name, k0, b0, r0, k1, b1, r1, relu, ob)                                                        \
  static void name(const run_args *A, void *out, int64_t n) {                                                 \
    fwd_loop(A, false, k0, b0, r0, k1, b1, r1, relu, ob, out, n);                                             \
  }                                                                                                           \
  static void name##_cl(const run_args *A, void *out, int64_t n) {                                            \
    fwd_loop(A, true, k0, b0, r0, k1, b1, r1, relu, ob, out, n);                                              \
  }
#define FWD_SET(S, xb, r, ob)                                                   \
  FWD(S##_a, T_AFF, xb, r, T_NONE, 0, 0, false, ob)                           \
  FWD(S##_a_relu, T_AFF, xb, r, T_NONE, 0, 0, true, ob)                       \
  FWD(S##_as, T_AFF, xb, r, T_SRC, xb, 0, false, ob)                          \
  FWD(S##_as_relu, T_AFF, xb, r, T_SRC, xb, 0, true, ob)                      \
  FWD(S##_sa, T_SRC, xb, 0, T_AFF, xb, r, false, ob)                          \
  FWD(S##_sa_relu, T_SRC, xb, 0, T_AFF, xb, r, true, ob)                      \
  FWD(S##_aa, T_AFF, xb, r, T_AFF, xb, r, false, ob)                          \
  FWD(S##_aa_relu, T_AFF, xb, r, T_AFF, xb, r, true, ob)
FWD_SET(h, true, true, true)
FWD_SET(f, false, false, false)
/* one apply of a bf16 input: unrounded into a bf16 result (the rounding is
 * the store's), rounded into an f32 result (the stem's, read by the pool) */
FWD(hn_a, T_AFF, true, false, T_NONE, 0, 0, false, true)
FWD(hn_a_relu, T_AFF, true, false, T_NONE, 0, 0, true, true)
FWD(hf_a, T_AFF, true, true, T_NONE, 0, 0, false, false)
FWD(hf_a_relu, T_AFF, true, true, T_NONE, 0, 0, true, false)

#define ROW(key, fn) {key, fn, fn##_cl}
#define FWD_ROWS(S, xb, r, ob)                                                                        \
  ROW(FWD_KEY(TC(T_AFF, xb, r), TC(T_NONE, 0, 0), 0, ob), S##_a),                                   \
      ROW(FWD_KEY(TC(T_AFF, xb, r), TC(T_NONE, 0, 0), 1, ob), S##_a_relu),                          \
      ROW(FWD_KEY(TC(T_AFF, xb, r), TC(T_SRC, xb, 0), 0, ob), S##_as),                              \
      ROW(FWD_KEY(TC(T_AFF, xb, r), TC(T_SRC, xb, 0), 1, ob), S##_as_relu),                         \
      ROW(FWD_KEY(TC(T_SRC, xb, 0), TC(T_AFF, xb, r), 0, ob), S##_sa),                              \
      ROW(FWD_KEY(TC(T_SRC, xb, 0), TC(T_AFF, xb, r), 1, ob), S##_sa_relu),                         \
      ROW(FWD_KEY(TC(T_AFF, xb, r), TC(T_AFF, xb, r), 0, ob), S##_aa),                              \
      ROW(FWD_KEY(TC(T_AFF, xb, r), TC(T_AFF, xb, r), 1, ob), S##_aa_relu)
static const struct {
  int key;
  run_fn *fn, *cl; /* per channel run; channel-innermost */
} fwd_table[] = {FWD_ROWS(h, 1, 1, 1),
                 FWD_ROWS(f, 0, 0, 0),
                 ROW(FWD_KEY(TC(T_AFF, 1, 0), TC(T_NONE, 0, 0), 0, 1), hn_a),
                 ROW(FWD_KEY(TC(T_AFF, 1, 0), TC(T_NONE, 0, 0), 1, 1), hn_a_relu),
                 ROW(FWD_KEY(TC(T_AFF, 1, 1), TC(T_NONE, 0, 0), 0, 0), hf_a),
                 ROW(FWD_KEY(TC(T_AFF, 1, 1), TC(T_NONE, 0, 0), 1, 0), hf_a_relu)};

#define GRAD(name, dyb, xb, ob)                                                                             \
  static void name(const run_args *A, void *out, int64_t n) { grad_loop(A, false, dyb, xb, ob, out, n); }   \
  static void name##_cl(const run_args *A, void *out, int64_t n) { grad_loop(A, true, dyb, xb, ob, out, n); }
GRAD(g_fff, false, false, false)
GRAD(g_ffh, false, false, true)
GRAD(g_fhf, false, true, false)
GRAD(g_fhh, false, true, true)
GRAD(g_hff, true, false, false)
GRAD(g_hfh, true, false, true)
GRAD(g_hhf, true, true, false)
GRAD(g_hhh, true, true, true)

static int term_code(const tk_fast *F, int i) {
  const tk_fast_term *t = &F->t[i];
  return t->affine ? TC(T_AFF, t->x.bf16, t->round) : TC(T_SRC, t->x.bf16, 0);
}

/* F's loop here (cl: its channel-innermost form), or NULL (fused_fast.c's chunks). */
static run_fn *pick(const tk_fast *F, bool cl) {
  if (F->kind == TK_FAST_BN_GRAD) {
    static run_fn *const g[8] = {g_fff, g_ffh, g_fhf, g_fhh, g_hff, g_hfh, g_hhf, g_hhh};
    static run_fn *const gc[8] = {g_fff_cl, g_ffh_cl, g_fhf_cl, g_fhh_cl, g_hff_cl, g_hfh_cl, g_hhf_cl, g_hhh_cl};
    return (cl ? gc : g)[F->dy.bf16 * 4 + F->x.bf16 * 2 + F->out_bf16];
  }
  if (F->kind == TK_FAST_SCALED) {
    if (cl || F->x.bf16 || (F->nterm && F->dy.bf16) || F->out_bf16) return NULL;
    if (!F->nterm) return s_p;
    return F->comb_sub ? (F->dy_first ? s_y_minus : s_minus_y) : (F->dy_first ? s_y_plus : s_plus_y);
  }
  if (F->kind != TK_FAST_FORWARD) return NULL;
  int key = FWD_KEY(term_code(F, 0), F->nterm == 2 ? term_code(F, 1) : TC(T_NONE, 0, 0), F->relu, F->out_bf16);
  for (size_t i = 0; i < sizeof fwd_table / sizeof fwd_table[0]; i++)
    if (fwd_table[i].key == key) return cl ? fwd_table[i].cl : fwd_table[i].fn;
  return NULL;
}

static float chan(tk_in in, int k, int64_t ch) { return ((const float *)in[k])[ch]; }
static bool is_nan(float v) { return v != v; }
static const void *src_at(tk_in in, const tk_fast_src *s, int64_t e) {
  return (const char *)in[s->ext] + e * (s->bf16 ? 2 : 4);
}

/* *A for the run of channel ch from element e; false when a per-channel
 * scale or shift is NaN (its payload against a NaN element's depends on the
 * operand order: the chunk loop's rerun decides). */
static bool args_at(const tk_fast *F, tk_in in, int64_t e, int64_t ch, run_args *A) {
  if (F->kind == TK_FAST_SCALED) {
    A->x[0] = src_at(in, &F->x, e), A->x[1] = F->nterm ? src_at(in, &F->dy, e) : NULL;
    A->k = F->scale_ext >= 0 ? ((const float *)in[F->scale_ext])[0] : F->scale_c;
    return !is_nan(A->k);
  }
  if (F->kind == TK_FAST_BN_GRAD) {
    A->x[0] = src_at(in, &F->dy, e), A->x[1] = src_at(in, &F->x, e);
    A->gm = chan(in, F->m, ch), A->k = chan(in, F->k, ch), A->c = chan(in, F->c, ch), A->s = chan(in, F->s, ch);
    return !is_nan(A->k) && !is_nan(A->s);
  }
  A->relu_c = F->relu_c;
  for (int i = 0; i < (F->nterm == 2 ? 2 : 1); i++) {
    const tk_fast_term *t = &F->t[i];
    A->x[i] = src_at(in, &t->x, e);
    if (!t->affine) continue;
    A->m[i] = chan(in, t->m, ch), A->a[i] = chan(in, t->a, ch), A->g[i] = chan(in, t->g, ch);
    A->b[i] = chan(in, t->b, ch);
    if (is_nan(A->a[i]) || is_nan(A->g[i]) || is_nan(A->b[i])) return false;
  }
  return true;
}

/* The per-channel inputs of F's cl loop in run_args.v's order into ids (-1:
 * none, a term that is an input), and whether each is a scale or shift
 * (checked for NaN). */
static void cl_terms(const tk_fast *F, int ids[8], bool nan_check[8]) {
  for (int i = 0; i < 8; i++) ids[i] = -1, nan_check[i] = i % 4 != 0; /* all but the means */
  if (F->kind == TK_FAST_BN_GRAD) {
    ids[0] = F->m, ids[1] = F->k, ids[2] = F->c, ids[3] = F->s;
    nan_check[2] = false; /* c: subtracted */
    return;
  }
  for (int i = 0; i < (F->nterm == 2 ? 2 : 1); i++) {
    const tk_fast_term *t = &F->t[i];
    if (t->affine) ids[4 * i] = t->m, ids[4 * i + 1] = t->a, ids[4 * i + 2] = t->g, ids[4 * i + 3] = t->b;
  }
}

static int64_t g_cl_calls; /* tk_fast_cl_calls */
int64_t tk_fast_cl_calls(void) { return __atomic_load_n(&g_cl_calls, __ATOMIC_RELAXED); }

/* Copies each per-channel input ids[i] (>= 0; C channels) into v[i], a
 * vector of C + NAN_BLK floats from channel p0 on, repeating (v[i] of an
 * absent one: a valid vector its loop never reads); the copies' buffer to
 * free, or NULL when a checked one is NaN in some channel or without memory. */
static float *cl_expand(tk_in in, const int ids[8], const bool nan_check[8], int64_t C, int64_t p0,
                        const float *v[8]) {
  int nv = 0;
  for (int i = 0; i < 8; i++) {
    nv += ids[i] >= 0;
    for (int64_t c = 0; ids[i] >= 0 && nan_check[i] && c < C; c++)
      if (is_nan(chan(in, ids[i], c))) return NULL;
  }
  int64_t len = C + NAN_BLK;
  float *buf = malloc((size_t)nv * (size_t)len * sizeof *buf), *e = buf;
  for (int i = 0; i < 8 && buf; i++) {
    v[i] = buf;
    if (ids[i] < 0) continue;
    const float *x = in[ids[i]];
    for (int64_t j = 0, c = p0; j < len; j++, c = c + 1 == C ? 0 : c + 1) e[j] = x[c];
    v[i] = e, e += len;
  }
  return buf;
}

float *tk_fast_cl_vectors(const tk_fast *F, tk_in in, int64_t lo, const float *v[8]) {
  int ids[8];
  bool nan_check[8];
  cl_terms(F, ids, nan_check);
  for (int i = 0; i < 8; i++) nan_check[i] = false;
  return cl_expand(in, ids, nan_check, F->nch, lo % F->nch, v);
}

/* Channel-innermost programs (F->inner 1: NHWC's per-channel vectors, channel
 * e % nch at element e): one call of F's cl loop over [lo, hi), with each
 * per-channel term copied once per call into a vector that starts at lo's
 * channel and repeats it (nch + NAN_BLK floats: a NAN_BLK block reads it
 * whole from any channel), where the per-run loop would make a call per
 * element. False (nothing written) when a scale or shift is NaN in some
 * channel or without memory. */
static bool cl_run(const tk_fast *F, run_fn *fn, tk_in in, void *out, int64_t lo, int64_t hi) {
  int ids[8];
  bool nan_check[8];
  cl_terms(F, ids, nan_check);
  run_args A = {.relu_c = F->relu_c, .nch = F->nch};
  float *buf = cl_expand(in, ids, nan_check, F->nch, lo % F->nch, A.v);
  if (!buf) return false;
  if (F->kind == TK_FAST_BN_GRAD) {
    A.x[0] = src_at(in, &F->dy, lo), A.x[1] = src_at(in, &F->x, lo);
  } else {
    for (int i = 0; i < (F->nterm == 2 ? 2 : 1); i++) A.x[i] = src_at(in, &F->t[i].x, lo);
  }
  fn(&A, out, hi - lo);
  free(buf);
  __atomic_fetch_add(&g_cl_calls, 1, __ATOMIC_RELAXED);
  return true;
}

void tk_fast_apply_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  run_fn *fn = pick(F, false), *fn_cl = F->inner == 1 ? pick(F, true) : NULL;
  if (!fn || tk_fast_out_meets(F, in, out, lo, hi, F->out_bf16 ? 2 : 4, true)) {
    tk_fast_chunks(F, in, out, lo, hi);
    return;
  }
  if (fn_cl) { /* a NaN scale: the chunk loop, with the terms as vectors too */
    if (!cl_run(F, fn_cl, in, out, lo, hi)) tk_fast_chunks(F, in, out, lo, hi);
    return;
  }
  size_t os = F->out_bf16 ? 2 : 4;
  int64_t r = lo % F->inner, ch = lo / F->inner % F->nch; /* lo's place in its run, its channel */
  run_args A;
  for (int64_t e = lo; e < hi;) {
    int64_t n = F->inner - r < hi - e ? F->inner - r : hi - e;
    char *o = (char *)out + (size_t)(e - lo) * os;
    if (args_at(F, in, e, ch, &A)) fn(&A, o, n);
    else tk_fast_chunks(F, in, o, e, e + n);
    e += n, r = 0, ch = ch + 1 == F->nch ? 0 : ch + 1;
  }
}
