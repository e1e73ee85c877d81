/* fused_fast.c — one-pass loops for the fused programs that dominate the
 * convnets' training steps, chosen by pattern before any tile runs
 * (tk_fast_match); every other program runs in fused.c's tile interpreter.
 *
 * The interpreter makes one pass over a tile per instruction (about twelve
 * for a batch-norm apply); these loops read each input once and write the
 * output once, with the per-channel terms as scalars. They compute the same
 * bits as the interpreter: the same f32 operations on each element in the
 * same order with the same operands on the same side (which NaN's payload
 * survives depends on it: add_o, mul_o), each rounded to f32 (this file is compiled with
 * -ffp-contract=off: no product is fused into a sum), bf16 roundings exactly
 * where the program has them, bf16 stores with fused.c's rounding. Patterns
 * (instructions in f32; x, r, dy: f32 or bf16 inputs of the output's size,
 * widened; m, a, g, b, c, k, s: f32 inputs broadcast per channel, all with
 * the same channel count and run length):
 *   - batch-norm apply: t = ((x - m) * a) * g + b, optionally rounded to bf16
 *     (CONVERT to bf16 then back);
 *   - forward: t, t + u or u + t (u: another such t, or r), optionally
 *     max(., constant) (ReLU), stored as f32 or bf16 (a final CONVERT);
 *   - batch-norm input gradient: ((dy - c) - (x - m) * k) * s, stored as
 *     f32 or bf16 (these two: fused_apply.c's one-pass loops, the chunk loop
 *     below, tk_fast_chunks, for the runs those do not take);
 *   - the batch-norm gradient's and statistics' reduced terms (fused
 *     reductions): (x - m) * (x - m), dy * (x - m) or (x - m) * dy (its
 *     loop is fused_centered.c's);
 *   - ReLU's gradient: select(compare(y, constant), v, constant), v an
 *     input or the sum of two (y, v: f32 or bf16), stored as f32 or bf16
 *     (its loop is fused_mask.c's);
 *   - an input alone (a bf16 -> f32 convert; fused reductions of it are
 *     the bias and batch-norm sums of bf16 gradients), or stored as bf16
 *     (a convert node f32 -> bf16: a bf16 step's weight casts);
 *   - the optimizer's scaled terms: k * x or x * k (k a constant or a scalar
 *     f32 input), alone or added to / subtracted from y on either side
 *     (SGD's 0.9 * buf + g and p - lr * g);
 *   - AdamW's moments, k0 x0 + k1 x1 (a term x * x where squared), and its
 *     parameter update, pd - step * (m / (sqrt(v) / bc + eps)) with pd = p or
 *     p * decay (f32; their loops are fused_adam.c's);
 *   - a bias add, x + b or b + x (b broadcast per channel, a run of one: a
 *     row), optionally max(., constant) (ReLU), f32 (fused_bias.c's loop). */
#include <stdlib.h>

#include "kernels/bf16_round.h"
#include "kernels/fused_apply.h"
#include "kernels/kernels_internal.h"
#include "kernels/nan_order.h"

#define SIMD _Pragma("omp simd")
#define CHUNK 256 /* elements per pass (two float buffers on the stack) */

static bool g_fast = true;

/* a + b and a * b with the x86 NaN rule pinned to this operand order (the
 * first NaN operand, quieted; a compiler may swap a commutative operation's
 * operands, and with them which of two NaNs' payload survives, as the
 * interpreter's loops over two arrays do not). */
static inline float add_o(float a, float b) {
  float r = a + b;
  return a != a ? nan_quieted(a) : b != b ? nan_quieted(b) : r;
}
static inline float mul_o(float a, float b) {
  float r = a * b;
  return a != a ? nan_quieted(a) : b != b ? nan_quieted(b) : r;
}

/* The loops below run each chunk with plain + and * first (`exact` false)
 * and again with add_o / mul_o only when a result of the chunk is NaN. The
 * two differ only in which NaN payload an operation returns: an element whose
 * result is not NaN had no NaN operand in any operation that reached it (NaN
 * propagates through +, -, * and the ReLU; a select that drops a NaN drops it
 * in both), so its bits are the same; a chunk with a NaN result is
 * recomputed exactly. The pinned order costs six instructions per operation
 * (two compares, two quiets, two blends): most of a batch-norm apply's
 * arithmetic, for payloads only NaNs have. The rerun reads the chunk's
 * inputs again, so a chunk whose f32 output overlaps one of its inputs (the
 * memory plan's in-place writes) is computed into a buffer on the stack and
 * copied into the output after the check (tk_fast_run). */
#define ADD(a, b) (exact ? add_o(a, b) : (a) + (b))
#define MUL(a, b) (exact ? mul_o(a, b) : (a) * (b))
#define INLINE static inline __attribute__((always_inline))

static int64_t g_reruns; /* chunks run again with add_o / mul_o (tk_fast_reruns) */
int64_t tk_fast_reruns(void) { return __atomic_load_n(&g_reruns, __ATOMIC_RELAXED); }

void tk_fused_set_fast(bool on) { __atomic_store_n(&g_fast, on, __ATOMIC_RELAXED); }
bool tk_fused_fast_on(void) { return __atomic_load_n(&g_fast, __ATOMIC_RELAXED); }

/* ---- matching ---- */
typedef struct {
  const ts_fused *p;
  const ts_dtype *dt;
  const int64_t *ne;
  int64_t numel;
  tk_fast *F; /* its inner and nch: the channel run length and count (0: none yet) */
} mctx;

/* Instruction v when it is `op` with an f32 result. */
static const ts_fused_instr *f32_ins(const mctx *M, int32_t v, ts_op op) {
  if (v < 0 || v >= M->p->n) return NULL;
  const ts_fused_instr *I = &M->p->ins[v];
  return I->op == op && I->dtype == TS_F32 ? I : NULL;
}

/* v is a full-size f32 or bf16 input, read directly or through CONVERT to f32. */
static bool m_src(const mctx *M, int32_t v, tk_fast_src *s) {
  const ts_fused_instr *I = f32_ins(M, v, TS_OP_CONVERT);
  if (I) v = I->a;
  if (v >= 0) return false;
  int k = -v - 1;
  if ((M->dt[k] != TS_F32 && M->dt[k] != TS_BF16) || M->ne[k] != M->numel) return false;
  s->ext = k, s->bf16 = M->dt[k] == TS_BF16;
  return true;
}

/* v is an f32 BROADCAST of an f32 input, with the program's common run length and count. */
static bool m_chan(const mctx *M, int32_t v, int *k) {
  const ts_fused_instr *I = f32_ins(M, v, TS_OP_BROADCAST);
  if (!I || I->a >= 0) return false;
  *k = -I->a - 1;
  int64_t inner = (int64_t)I->value, m = M->ne[*k];
  if (M->dt[*k] != TS_F32 || (double)inner != I->value || inner < 1 || m < 1) return false;
  if (M->F->inner == 0) M->F->inner = inner, M->F->nch = m;
  return M->F->inner == inner && M->F->nch == m;
}

/* v is ((x - m) * a) * g + b, or that rounded to bf16 (CONVERT to bf16, then to f32). */
static bool m_affine(const mctx *M, int32_t v, tk_fast_term *t) {
  const ts_fused_instr *R = f32_ins(M, v, TS_OP_CONVERT);
  t->round = R && R->a >= 0 && M->p->ins[R->a].op == TS_OP_CONVERT && M->p->ins[R->a].dtype == TS_BF16;
  if (t->round) v = M->p->ins[R->a].a;
  const ts_fused_instr *B = f32_ins(M, v, TS_OP_ADD);
  const ts_fused_instr *G = B ? f32_ins(M, B->a, TS_OP_MUL) : NULL;
  const ts_fused_instr *A = G ? f32_ins(M, G->a, TS_OP_MUL) : NULL;
  const ts_fused_instr *S = A ? f32_ins(M, A->a, TS_OP_SUB) : NULL;
  t->affine = S && m_chan(M, B->b, &t->b) && m_chan(M, G->b, &t->g) && m_chan(M, A->b, &t->a) &&
              m_chan(M, S->b, &t->m) && m_src(M, S->a, &t->x);
  return t->affine;
}

static bool m_term(const mctx *M, int32_t v, tk_fast_term *t) {
  if (m_affine(M, v, t)) return true;
  t->round = false;
  return m_src(M, v, &t->x);
}

/* v is ((dy - c) - (x - m) * k) * s. */
static bool m_bn_grad(const mctx *M, int32_t v, tk_fast *F) {
  const ts_fused_instr *S = f32_ins(M, v, TS_OP_MUL);
  const ts_fused_instr *D = S ? f32_ins(M, S->a, TS_OP_SUB) : NULL;
  const ts_fused_instr *C = D ? f32_ins(M, D->a, TS_OP_SUB) : NULL;
  const ts_fused_instr *K = C ? f32_ins(M, D->b, TS_OP_MUL) : NULL;
  const ts_fused_instr *X = K ? f32_ins(M, K->a, TS_OP_SUB) : NULL;
  return X && m_chan(M, S->b, &F->s) && m_chan(M, C->b, &F->c) && m_chan(M, K->b, &F->k) &&
         m_chan(M, X->b, &F->m) && m_src(M, C->a, &F->dy) && m_src(M, X->a, &F->x);
}

/* v is (x - m) * (x - m) (one instruction read twice), dy * (x - m) or (x - m) * dy. */
static bool m_centered(const mctx *M, int32_t v, tk_fast *F) {
  const ts_fused_instr *P = f32_ins(M, v, TS_OP_MUL);
  if (!P) return false;
  const ts_fused_instr *A = f32_ins(M, P->a, TS_OP_SUB), *B = f32_ins(M, P->b, TS_OP_SUB);
  F->square = A && P->a == P->b;
  F->dy_first = !A;
  const ts_fused_instr *X = A ? A : B;
  if (!X || !m_chan(M, X->b, &F->m) || !m_src(M, X->a, &F->x)) return false;
  return F->square || m_src(M, F->dy_first ? P->a : P->b, &F->dy);
}

/* v is a CONSTANT of a float type: *c its value as the interpreter splats it. */
static bool m_const(const mctx *M, int32_t v, float *c) {
  if (v < 0 || v >= M->p->n) return false;
  const ts_fused_instr *I = &M->p->ins[v];
  if (I->op != TS_OP_CONSTANT || (I->dtype != TS_F32 && I->dtype != TS_BF16)) return false;
  *c = I->dtype == TS_BF16 ? bf16_round((float)I->value) : (float)I->value;
  return true;
}

/* F's terms are not per channel (masks, converts, the optimizer's terms). */
static void no_channels(tk_fast *F) { F->inner = INT64_MAX, F->nch = 1; }

/* v is select(compare(y, k), u [+ w], c). */
static bool m_mask(const mctx *M, int32_t v, tk_fast *F) {
  const ts_fused_instr *S = f32_ins(M, v, TS_OP_SELECT);
  const ts_fused_instr *P = S && S->a >= 0 ? &M->p->ins[S->a] : NULL;
  if (!P || P->op != TS_OP_COMPARE || !m_src(M, P->a, &F->x) || !m_const(M, P->b, &F->mask_k) ||
      !m_const(M, S->c, &F->mask_c))
    return false;
  F->cmp = P->cmp;
  no_channels(F);
  const ts_fused_instr *A = f32_ins(M, S->b, TS_OP_ADD);
  F->nterm = A && m_src(M, A->a, &F->t[0].x) && m_src(M, A->b, &F->t[1].x) ? 2 : 1;
  return F->nterm == 2 || m_src(M, S->b, &F->t[0].x);
}

/* v is an input alone (m_src), without channels. */
static bool m_plain(const mctx *M, int32_t v, tk_fast *F) {
  no_channels(F);
  return m_src(M, v, &F->x);
}

/* v is a float CONSTANT (*ext -1, *c its value) or a scalar f32 input (*ext). */
static bool m_scalar(const mctx *M, int32_t v, int *ext, float *c) {
  *ext = -1;
  if (v >= 0) return m_const(M, v, c);
  *ext = -v - 1;
  return M->dt[*ext] == TS_F32 && M->ne[*ext] == 1;
}

/* v is k * x or x * k (k: m_scalar, x: m_src). */
static bool m_product(const mctx *M, int32_t v, tk_fast *F) {
  const ts_fused_instr *P = f32_ins(M, v, TS_OP_MUL);
  if (!P) return false;
  F->k_left = m_scalar(M, P->a, &F->scale_ext, &F->scale_c) && m_src(M, P->b, &F->x);
  return F->k_left || (m_scalar(M, P->b, &F->scale_ext, &F->scale_c) && m_src(M, P->a, &F->x));
}

/* v is k * x, or that added to / subtracted from y on either side. */
static bool m_scaled(const mctx *M, int32_t v, tk_fast *F) {
  no_channels(F);
  if (m_product(M, v, F)) return true;
  const ts_fused_instr *A = f32_ins(M, v, TS_OP_ADD);
  if (!A) A = f32_ins(M, v, TS_OP_SUB);
  if (!A) return false;
  F->nterm = 1, F->comb_sub = A->op == TS_OP_SUB;
  F->dy_first = m_product(M, A->b, F) && m_src(M, A->a, &F->dy);
  return F->dy_first || (m_product(M, A->a, F) && m_src(M, A->b, &F->dy));
}

/* v is an f32 input of the output's size (read directly or through CONVERT): *k. */
static bool m_f32(const mctx *M, int32_t v, int *k) {
  tk_fast_src s;
  if (!m_src(M, v, &s) || s.bf16) return false;
  *k = s.ext;
  return true;
}

static bool m_k(const mctx *M, int32_t v, tk_fast_k *k) { return m_scalar(M, v, &k->ext, &k->c); }

/* v is an f32 input or x * x (one input twice): t->x, t->square. */
static bool m_sq(const mctx *M, int32_t v, tk_fast_prod *t) {
  const ts_fused_instr *Q = f32_ins(M, v, TS_OP_MUL);
  int other;
  t->square = Q && m_f32(M, Q->a, &t->x) && m_f32(M, Q->b, &other) && other == t->x;
  return t->square || m_f32(M, v, &t->x);
}

/* v is k * x or x * k, x: m_sq. */
static bool m_prod(const mctx *M, int32_t v, tk_fast_prod *t) {
  const ts_fused_instr *P = f32_ins(M, v, TS_OP_MUL);
  if (!P) return false;
  t->k_left = m_k(M, P->a, &t->k) && m_sq(M, P->b, t);
  return t->k_left || (m_k(M, P->b, &t->k) && m_sq(M, P->a, t));
}

/* v is AdamW's moment update, pr[0] + pr[1] (b1 m + c1 g, b2 v + c2 (g g)). */
static bool m_moment(const mctx *M, int32_t v, tk_fast *F) {
  no_channels(F);
  const ts_fused_instr *A = f32_ins(M, v, TS_OP_ADD);
  return A && m_prod(M, A->a, &F->pr[0]) && m_prod(M, A->b, &F->pr[1]);
}

/* v is `op` of a scalar (*k; *left: its first operand) and instruction `of`: that one, or NULL. */
static const ts_fused_instr *m_with_k(const mctx *M, int32_t v, ts_op op, ts_op of, tk_fast_k *k, bool *left) {
  const ts_fused_instr *I = f32_ins(M, v, op), *X = NULL;
  if (!I) return NULL;
  if (m_k(M, I->a, k) && (X = f32_ins(M, I->b, of))) return *left = true, X;
  if (m_k(M, I->b, k) && (X = f32_ins(M, I->a, of))) return *left = false, X;
  return NULL;
}

/* v is AdamW's parameter update: pd - step * (m / (sqrt(v) / bc + eps)), pd = p or p * decay. */
static bool m_adamw(const mctx *M, int32_t v, tk_fast *F) {
  no_channels(F);
  const ts_fused_instr *S = f32_ins(M, v, TS_OP_SUB);
  if (!S) return false;
  const ts_fused_instr *D = m_with_k(M, S->b, TS_OP_MUL, TS_OP_DIV, &F->step, &F->step_left);
  bool m_ok = D && m_f32(M, D->a, &F->am);
  const ts_fused_instr *Q = m_ok ? m_with_k(M, D->b, TS_OP_ADD, TS_OP_DIV, &F->eps, &F->eps_left) : NULL;
  const ts_fused_instr *R = Q && m_k(M, Q->b, &F->bc) ? f32_ins(M, Q->a, TS_OP_SQRT) : NULL;
  if (!R || !m_f32(M, R->a, &F->av)) return false;
  if (m_f32(M, S->a, &F->ap)) return true;
  const ts_fused_instr *P = f32_ins(M, S->a, TS_OP_MUL);
  F->decay_on = P != NULL;
  F->decay_left = P && m_k(M, P->a, &F->decay) && m_f32(M, P->b, &F->ap);
  return F->decay_left || (P && m_k(M, P->b, &F->decay) && m_f32(M, P->a, &F->ap));
}

/* v is max(u, constant) (then F->relu, F->relu_c): u, else v. */
static int32_t m_relu(const mctx *M, int32_t v, tk_fast *F) {
  const ts_fused_instr *X = f32_ins(M, v, TS_OP_MAX);
  if (!X || X->b < 0 || M->p->ins[X->b].op != TS_OP_CONSTANT || M->p->ins[X->b].dtype != TS_F32) return v;
  F->relu = true, F->relu_c = (float)M->p->ins[X->b].value;
  return X->a;
}

/* v is [max(] x + b [, constant)] or b + x: x an f32 input, b an f32 input broadcast per channel. */
static bool m_bias(const mctx *M, int32_t v, tk_fast *F) {
  const ts_fused_instr *A = f32_ins(M, m_relu(M, v, F), TS_OP_ADD);
  if (!A) return false;
  F->x_first = m_f32(M, A->a, &F->x.ext) && m_chan(M, A->b, &F->m);
  return F->x_first || (m_chan(M, A->a, &F->m) && m_f32(M, A->b, &F->x.ext));
}

/* The forward pattern below the final store: [max(] t [+ u] [, constant)]. */
static bool m_forward(const mctx *M, int32_t v, tk_fast *F) {
  v = m_relu(M, v, F);
  if (m_affine(M, v, &F->t[0])) return F->nterm = 1, true;
  const ts_fused_instr *A = f32_ins(M, v, TS_OP_ADD);
  F->nterm = 2;
  return A && m_term(M, A->a, &F->t[0]) && m_term(M, A->b, &F->t[1]) && (F->t[0].affine || F->t[1].affine);
}

/* Whether v (below the final store) is pattern `kind` (described into M->F). */
static bool try_kind(const mctx *M, int32_t v, int kind, bool out_bf16) {
  memset(M->F, 0, sizeof *M->F);
  M->F->out_bf16 = out_bf16;
  bool ok = kind == TK_FAST_BN_GRAD   ? m_bn_grad(M, v, M->F)
            : kind == TK_FAST_CENTERED ? !out_bf16 && m_centered(M, v, M->F)
            : kind == TK_FAST_MASK     ? m_mask(M, v, M->F)
            : kind == TK_FAST_SRC      ? m_plain(M, v, M->F)
            : kind == TK_FAST_SCALED   ? m_scaled(M, v, M->F)
            : kind == TK_FAST_MOMENT   ? !out_bf16 && m_moment(M, v, M->F)
            : kind == TK_FAST_ADAMW    ? !out_bf16 && m_adamw(M, v, M->F)
            : kind == TK_FAST_BIAS     ? !out_bf16 && m_bias(M, v, M->F)
                                       : m_forward(M, v, M->F);
  M->F->kind = ok ? kind : TK_FAST_NONE;
  return ok;
}

bool tk_fast_match(const ts_fused *p, const ts_dtype *ext_dt, const int64_t *ext_numel, ts_dtype out_dt,
                   int64_t numel, tk_fast *F) {
  memset(F, 0, sizeof *F);
  if (!tk_fused_fast_on() || p->n < 1) return false;
  mctx M = {p, ext_dt, ext_numel, numel, F};
  int32_t v = p->n - 1;
  const ts_fused_instr *L = &p->ins[v];
  /* the result stored as bf16: a final CONVERT of an f32 value (or of an f32
   * input: a convert node alone, as the weights' casts of a bf16 step run) */
  bool out_bf16 = out_dt == TS_BF16 && L->op == TS_OP_CONVERT && L->dtype == TS_BF16 &&
                  (L->a >= 0 ? p->ins[L->a].dtype == TS_F32 : ext_dt[-L->a - 1] == TS_F32);
  if (out_bf16) v = L->a;
  else if (out_dt != TS_F32 || L->dtype != TS_F32) return false;
  return try_kind(&M, v, TK_FAST_BN_GRAD, out_bf16) || try_kind(&M, v, TK_FAST_CENTERED, out_bf16) ||
         try_kind(&M, v, TK_FAST_MASK, out_bf16) || try_kind(&M, v, TK_FAST_SRC, out_bf16) ||
         try_kind(&M, v, TK_FAST_SCALED, out_bf16) || try_kind(&M, v, TK_FAST_MOMENT, out_bf16) ||
         try_kind(&M, v, TK_FAST_ADAMW, out_bf16) || try_kind(&M, v, TK_FAST_BIAS, out_bf16) ||
         try_kind(&M, v, TK_FAST_FORWARD, out_bf16);
}

/* ---- the loops (n <= CHUNK elements from element e) ----
 * f32 inputs are read where they are and an f32 result is written straight
 * into the output: only bf16 goes through buffers on the stack (inputs
 * widened, the f32 result before its rounding), so a chunk is not copied
 * from memory into a buffer and from a buffer into the output (those copies
 * were ~19% of ResNet-20's fp32 step on one thread, perf). The output may be
 * one of the inputs (the memory plan writes in place): each loop reads
 * element j of its operands before it writes element j, and a term computed
 * into a buffer is computed before the output is written; a program with an
 * add or a mul whose output overlaps an input is computed into a buffer
 * (the exact rerun of a chunk with a NaN result reads the inputs again). */
static void load_src(const tk_fast_src *s, tk_in in, int64_t e, int64_t n, float *d) {
  if (s->bf16) { /* in blocks after a prefetch (nan_ahead): a bf16 step's batch-norm means and bias sums */
    const uint16_t *x = (const uint16_t *)in[s->ext] + e;
    for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
      nan_ahead(x, true, j0, n);
      int64_t j1 = nan_blk_end(j0, n);
      SIMD for (int64_t j = j0; j < j1; j++) d[j] = ts_bf16_to_f32(x[j]);
    }
  } else {
    memmove(d, (const float *)in[s->ext] + e, (size_t)n * 4);
  }
}

/* Elements e .. e + n of s as floats: in place when stored as f32, else widened into buf. */
static const float *src_at(const tk_fast_src *s, tk_in in, int64_t e, int n, float *buf) {
  if (s->bf16) {
    load_src(s, in, e, n, buf);
    return buf;
  }
  return (const float *)in[s->ext] + e;
}

static float chan(tk_in in, int k, int64_t ch) { return ((const float *)in[k])[ch]; }

/* A chunk's per-channel terms: channel ch's, or channel-innermost (cl: F's
 * inner 1, NHWC) the vectors w from the chunk's first element on (element
 * j: w[i][j]; tk_fast_cl_vectors' order). */
typedef struct {
  int64_t ch;
  const float *w[8];
} chans;

/* A per-channel term of element j: the scalar s, or channel-innermost V[j]. */
#define CV(s, V) (cl ? (V)[j] : (s))
/* The batch-norm apply of v (term t's channel terms m, a, g, b and vectors M, A, G, B in scope). */
#define AFFINE(v) ADD(MUL(MUL((v) - CV(m, M), CV(a, A)), CV(g, G)), CV(b, B))

/* d = affine term ti (t) of elements e .. e + n: one loop from the input. */
INLINE void eval_affine(const tk_fast_term *t, int ti, tk_in in, int64_t e, const chans *C, int n, float *d,
                        bool exact, bool cl) {
  float m = 0, a = 0, g = 0, b = 0;
  if (!cl) m = chan(in, t->m, C->ch), a = chan(in, t->a, C->ch), g = chan(in, t->g, C->ch), b = chan(in, t->b, C->ch);
  const float *M = C->w[4 * ti], *A = C->w[4 * ti + 1], *G = C->w[4 * ti + 2], *B = C->w[4 * ti + 3];
  const uint16_t *h = (const uint16_t *)in[t->x.ext] + e;
  const float *x = (const float *)in[t->x.ext] + e;
  if (t->x.bf16 && t->round) {
    SIMD for (int j = 0; j < n; j++) d[j] = bf16_round(AFFINE(ts_bf16_to_f32(h[j])));
  } else if (t->x.bf16) {
    SIMD for (int j = 0; j < n; j++) d[j] = AFFINE(ts_bf16_to_f32(h[j]));
  } else if (t->round) {
    SIMD for (int j = 0; j < n; j++) d[j] = bf16_round(AFFINE(x[j]));
  } else {
    SIMD for (int j = 0; j < n; j++) d[j] = AFFINE(x[j]);
  }
}

/* Term ti of elements e .. e + n: its input in place (not affine, f32), else computed into buf. */
INLINE const float *term_at(const tk_fast *F, int ti, tk_in in, int64_t e, const chans *C, int n, float *buf,
                            bool exact, bool cl) {
  const tk_fast_term *t = &F->t[ti];
  if (!t->affine) return src_at(&t->x, in, e, n, buf);
  eval_affine(t, ti, in, e, C, n, buf, exact, cl);
  return buf;
}

/* d = t[0] or t[0] + t[1] (a one-term forward is an affine term). */
INLINE void eval_forward(const tk_fast *F, tk_in in, int64_t e, const chans *C, int n, float *d, float *b0,
                         float *b1, bool exact, bool cl) {
  if (F->nterm == 1) {
    eval_affine(&F->t[0], 0, in, e, C, n, d, exact, cl);
    return;
  }
  const float *p = term_at(F, 0, in, e, C, n, b0, exact, cl), *q = term_at(F, 1, in, e, C, n, b1, exact, cl);
  SIMD for (int j = 0; j < n; j++) d[j] = ADD(p[j], q[j]);
}

INLINE void eval_bn_grad(const tk_fast *F, tk_in in, int64_t e, const chans *C, int n, float *d, float *b0,
                         float *b1, bool exact, bool cl) {
  float m = 0, k = 0, c = 0, s = 0;
  if (!cl) m = chan(in, F->m, C->ch), k = chan(in, F->k, C->ch), c = chan(in, F->c, C->ch), s = chan(in, F->s, C->ch);
  const float *M = C->w[0], *K = C->w[1], *Cc = C->w[2], *S = C->w[3];
  const float *dy = src_at(&F->dy, in, e, n, b0), *x = src_at(&F->x, in, e, n, b1);
  SIMD for (int j = 0; j < n; j++) d[j] = MUL((dy[j] - CV(c, Cc)) - MUL(x[j] - CV(m, M), CV(k, K)), CV(s, S));
}

/* d = p, then y + p, p + y, y - p or p - y, with p = P (k * x or x * k). */
#define SCALED_LOOPS(P)                                                   \
  do {                                                                    \
    if (F->nterm == 0) {                                                  \
      SIMD for (int j = 0; j < n; j++) d[j] = P;                          \
    } else if (F->comb_sub && F->dy_first) {                              \
      SIMD for (int j = 0; j < n; j++) d[j] = w[j] - P;                   \
    } else if (F->comb_sub) {                                             \
      SIMD for (int j = 0; j < n; j++) d[j] = P - w[j];                   \
    } else if (F->dy_first) {                                             \
      SIMD for (int j = 0; j < n; j++) d[j] = ADD(w[j], P);               \
    } else {                                                              \
      SIMD for (int j = 0; j < n; j++) d[j] = ADD(P, w[j]);               \
    }                                                                     \
  } while (0)
INLINE void eval_scaled(const tk_fast *F, tk_in in, int64_t e, int n, float *d, float *b0, float *b1, bool exact) {
  float k = F->scale_ext >= 0 ? ((const float *)in[F->scale_ext])[0] : F->scale_c;
  const float *x = src_at(&F->x, in, e, n, b0), *w = F->nterm ? src_at(&F->dy, in, e, n, b1) : NULL;
  if (F->k_left) SCALED_LOOPS(MUL(k, x[j]));
  else SCALED_LOOPS(MUL(x[j], k));
}

/* max(v, c) as fused.c's MAX (a NaN in v propagates). */
#define RELU(v) (((v) > c || (v) != (v)) ? (v) : c)

/* d (the f32 output itself, or a buffer for a bf16 one), then max(d, c) if
 * F->relu: in place, or stored as bf16 at out + o. */
static void finish(const tk_fast *F, float *d, int n, void *out, int64_t o) {
  float c = F->relu_c;
  uint16_t *h = (uint16_t *)out + o;
  if (F->relu && F->out_bf16) {
    SIMD for (int j = 0; j < n; j++) h[j] = (uint16_t)bf16_bits(RELU(d[j]));
  } else if (F->out_bf16) {
    SIMD for (int j = 0; j < n; j++) h[j] = (uint16_t)bf16_bits(d[j]);
  } else if (F->relu) {
    SIMD for (int j = 0; j < n; j++) d[j] = RELU(d[j]);
  }
}

/* d = F's program over elements e .. e + n (channels C), before finish (b0, b1: buffers). */
INLINE void eval_chunk(const tk_fast *F, tk_in in, int64_t e, const chans *C, int n, float *d, float *b0, float *b1,
                       bool exact, bool cl) {
  if (F->kind == TK_FAST_BN_GRAD) {
    eval_bn_grad(F, in, e, C, n, d, b0, b1, exact, cl);
  } else if (F->kind == TK_FAST_SRC) {
    load_src(&F->x, in, e, n, d); /* memmove: d may be the input itself */
  } else if (F->kind == TK_FAST_SCALED) {
    eval_scaled(F, in, e, n, d, b0, b1, exact);
  } else {
    eval_forward(F, in, e, C, n, d, b0, b1, exact, cl);
  }
}
typedef void eval_fn(const tk_fast *F, tk_in in, int64_t e, const chans *C, int n, float *d, float *b[2]);
#define EVAL(name, exact, cl) \
  static void name(const tk_fast *F, tk_in in, int64_t e, const chans *C, int n, float *d, float *b[2]) { \
    eval_chunk(F, in, e, C, n, d, b[0], b[1], exact, cl);                                             \
  }
EVAL(eval_plain, false, false)
EVAL(eval_exact, true, false)
EVAL(eval_plain_cl, false, true)
EVAL(eval_exact_cl, true, true)

/* Whether d[0 .. n) holds a NaN: 16 lanes OR-ed in a vector, then folded by
 * shuffles (`omp simd reduction(|)` finished with a scalar loop over the 16
 * lanes through the stack: ~1% of a 1-thread ResNet-20 bf16 step, perf). */
typedef float nan_f __attribute__((vector_size(64)));
typedef int32_t nan_i __attribute__((vector_size(64)));
static bool any_nan(const float *d, int n) {
  nan_i acc = {0};
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    nan_f v;
    memcpy(&v, d + j, sizeof v);
    acc |= v != v;
  }
  int r = 0;
  for (; j < n; j++) r |= d[j] != d[j];
  acc |= __builtin_shuffle(acc, (nan_i){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  acc |= __builtin_shuffle(acc, (nan_i){4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15});
  acc |= __builtin_shuffle(acc, (nan_i){2, 3, 0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  acc |= __builtin_shuffle(acc, (nan_i){1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  return (r | acc[0]) != 0;
}

/* Whether F has an add or a mul to redo (a load has none). */
static bool has_arith(const tk_fast *F) { return F->kind != TK_FAST_SRC; }

/* Whether bytes [b + lo, b + hi) meet [o0, o1). */
static bool meets(const void *b, uintptr_t lo, uintptr_t hi, uintptr_t o0, uintptr_t o1) {
  return (uintptr_t)b + lo < o1 && o0 < (uintptr_t)b + hi;
}

bool tk_fast_out_meets(const tk_fast *F, tk_in in, const void *out, int64_t lo, int64_t hi, size_t os, bool same_ok) {
  uintptr_t o0 = (uintptr_t)out, o1 = o0 + (uintptr_t)(hi - lo) * os, cb = (uintptr_t)F->nch * 4;
  const tk_fast_src *s[3];
  int ns = 0, nc = 0, c[9];
  if (F->kind == TK_FAST_FORWARD) {
    for (int i = 0; i < (F->nterm == 2 ? 2 : 1); i++) {
      const tk_fast_term *t = &F->t[i];
      s[ns++] = &t->x;
      if (t->affine) c[nc++] = t->m, c[nc++] = t->a, c[nc++] = t->g, c[nc++] = t->b;
    }
  } else {
    s[ns++] = &F->x;
    if (F->kind == TK_FAST_BN_GRAD || (F->kind == TK_FAST_SCALED && F->nterm)) s[ns++] = &F->dy;
    if (F->kind == TK_FAST_BN_GRAD) c[nc++] = F->k, c[nc++] = F->c, c[nc++] = F->s, c[nc++] = F->m;
  }
  for (int i = 0; i < ns; i++) {
    uintptr_t es = s[i]->bf16 ? 2 : 4;
    const char *p = (const char *)in[s[i]->ext] + (uintptr_t)lo * es;
    if (same_ok && (const void *)p == out && es == os) continue;
    if (meets(p, 0, (uintptr_t)(hi - lo) * es, o0, o1)) return true;
  }
  for (int i = 0; i < nc; i++)
    if (meets(in[c[i]], 0, cb, o0, o1)) return true;
  return F->kind == TK_FAST_SCALED && F->scale_ext >= 0 && meets(in[F->scale_ext], 0, 4, o0, o1);
}

/* An input alone stored as bf16 (a convert to bf16): one loop, rounded as fused.c stores. */
static void store_src_bf16(const tk_fast_src *s, tk_in in, int64_t lo, int64_t n, uint16_t *o) {
  if (s->bf16) {
    const uint16_t *x = (const uint16_t *)in[s->ext] + lo;
    SIMD for (int64_t j = 0; j < n; j++) o[j] = (uint16_t)bf16_bits(ts_bf16_to_f32(x[j]));
  } else {
    const float *x = (const float *)in[s->ext] + lo;
    for (int64_t j0 = 0; j0 < n; j0 += NAN_BLK) {
      nan_ahead(x, false, j0, n);
      int64_t j1 = nan_blk_end(j0, n);
      SIMD for (int64_t j = j0; j < j1; j++) o[j] = (uint16_t)bf16_bits(x[j]);
    }
  }
}

/* Whether a bf16 result over [lo, hi) at out is clear of input s there, or
 * starts where it does (element j written after element j / 2 or j is read). */
static bool src_clear(const tk_fast_src *s, tk_in in, const void *out, int64_t lo, int64_t hi) {
  const char *p = (const char *)in[s->ext] + lo * (s->bf16 ? 2 : 4);
  uintptr_t o0 = (uintptr_t)out;
  uintptr_t len = (uintptr_t)(hi - lo) * (s->bf16 ? 2 : 4);
  return (const void *)p == out || !meets(p, 0, len, o0, o0 + (uintptr_t)(hi - lo) * 2);
}

void tk_fast_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  if (F->kind == TK_FAST_MASK) { /* fused_mask.c: one pass, no rerun */
    tk_fast_mask_run(F, in, out, lo, hi);
  } else if (F->kind == TK_FAST_MOMENT || F->kind == TK_FAST_ADAMW) { /* fused_adam.c: one pass */
    tk_fast_adam_run(F, in, out, lo, hi);
  } else if (F->kind == TK_FAST_BIAS) { /* fused_bias.c: one pass per run or row */
    tk_fast_bias_run(F, in, out, lo, hi);
  } else if (F->kind == TK_FAST_CENTERED) { /* fused_centered.c: a loop per channel run, no rerun */
    tk_fast_centered_run(F, in, out, lo, hi);
  } else if (F->kind == TK_FAST_FORWARD || F->kind == TK_FAST_BN_GRAD || F->kind == TK_FAST_SCALED) {
    /* fused_apply.c: one pass per run */
    tk_fast_apply_run(F, in, out, lo, hi);
  } else if (F->kind == TK_FAST_SRC && !F->out_bf16) { /* widened (or moved) in one call, not per chunk */
    load_src(&F->x, in, lo, hi - lo, out);
  } else if (F->kind == TK_FAST_SRC && src_clear(&F->x, in, out, lo, hi)) { /* rounded in one call */
    store_src_bf16(&F->x, in, lo, hi - lo, out);
  } else {
    tk_fast_chunks(F, in, out, lo, hi);
  }
}

/* A channel-innermost F (inner 1, NHWC) in chunks: the per-channel terms as
 * vectors (tk_fast_cl_vectors) into *V, their buffer to free; NULL for any
 * other F or without memory (then chunks end at each run of one element). */
static float *chunk_vectors(const tk_fast *F, tk_in in, int64_t lo, const float *V[8]) {
  if (F->inner != 1 || (F->kind != TK_FAST_FORWARD && F->kind != TK_FAST_BN_GRAD)) return NULL;
  return tk_fast_cl_vectors(F, in, lo, V);
}

void tk_fast_chunks(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi) {
  float buf[CHUNK], b0[CHUNK], b1[CHUNK], *b[2] = {b0, b1};
  int64_t r = lo % F->inner; /* e's place in its run */
  chans C = {.ch = lo / F->inner % F->nch};
  const float *V[8];
  float *vec = chunk_vectors(F, in, lo, V);
  eval_fn *plain = vec ? eval_plain_cl : eval_plain, *exact = vec ? eval_exact_cl : eval_exact;
  bool arith = has_arith(F);
  /* an f32 result over its own inputs: into buf, so that a rerun reads them intact */
  bool staged = F->out_bf16 || (arith && tk_fast_out_meets(F, in, out, lo, hi, 4, false));
  for (int64_t e = lo; e < hi;) {
    int64_t left = vec ? hi - e : F->inner - r;
    int n = (int)(left < hi - e ? left : hi - e);
    if (n > CHUNK) n = CHUNK;
    for (int i = 0; vec && i < 8; i++) C.w[i] = V[i] + (e - lo) % F->nch; /* n <= 256: inside the vectors */
    float *o = (float *)out + (e - lo), *d = staged ? buf : o;
    plain(F, in, e, &C, n, d, b);
    if (arith && any_nan(d, n)) {
      __atomic_fetch_add(&g_reruns, 1, __ATOMIC_RELAXED);
      exact(F, in, e, &C, n, d, b);
    }
    finish(F, d, n, out, e - lo);
    if (staged && !F->out_bf16) memcpy(o, d, (size_t)n * 4);
    e += n, r += n;
    if (r == F->inner) r = 0, C.ch = C.ch + 1 == F->nch ? 0 : C.ch + 1;
  }
  free(vec);
}
