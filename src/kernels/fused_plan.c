/* fused_plan.c — what the fused program evaluator (fused.c) may skip or do
 * at once, decided before any tile runs (once per FUSED node: fused.c keeps
 * the plan in the node's kernel state), without changing a bit:
 *   - an instruction equal to an earlier one (same op, dtype, operands and
 *     value; fusion copies a producer into each consumer, e.g. the GPT's
 *     bias add three times in the GELU gradient) reuses that one's tile;
 *   - the GELU gradient as autodiff writes it (ad/adjoints.c),
 *       (erf(x * 1/sqrt 2) + 1) * 0.5 + x * (exp(x * x * -0.5) * 1/sqrt(2 pi)),
 *     ten f32 instructions, is one step of fused.c (tk_gelu_grad_tile, with
 *     the same roundings in the same order);
 *   - instructions no kept instruction reads are not evaluated. */
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/kernels_internal.h"

static int nops(ts_op op) {
  return op == TS_OP_SELECT ? 3 : ir_op_is_binary(op) || op == TS_OP_COMPARE ? 2 : op == TS_OP_CONSTANT ? 0 : 1;
}

static int32_t canon_of(const int32_t *canon, int32_t v) { return v >= 0 ? canon[v] : v; }

/* Whether instructions i and j (j < i) compute the same tile. */
static bool same_instr(const ts_fused *p, const int32_t *canon, int i, int j) {
  const ts_fused_instr *a = &p->ins[i], *b = &p->ins[j];
  if (a->op != b->op || a->dtype != b->dtype || a->cmp != b->cmp) return false;
  if (memcmp(&a->value, &b->value, sizeof a->value) != 0) return false;
  int32_t ia[3] = {a->a, a->b, a->c}, ib[3] = {b->a, b->b, b->c};
  for (int o = 0; o < nops(a->op); o++)
    if (canon_of(canon, ia[o]) != canon_of(canon, ib[o])) return false;
  return true;
}

/* Instruction v (canonical) when it is `op` in f32 with operands (canonical)
 * *a and *b, b a CONSTANT equal in f32 to c (c ignored for unary ops). */
static const ts_fused_instr *is_op(const ts_fused *p, const int32_t *canon, int32_t v, ts_op op, float c,
                                   int32_t *a) {
  if (v < 0) return NULL;
  const ts_fused_instr *I = &p->ins[v];
  if (I->op != op || I->dtype != TS_F32) return NULL;
  if (nops(op) == 2) {
    int32_t b = canon_of(canon, I->b);
    if (b < 0 || p->ins[b].op != TS_OP_CONSTANT || p->ins[b].dtype != TS_F32 || (float)p->ins[b].value != c)
      return NULL;
  }
  *a = canon_of(canon, I->a);
  return I;
}

#define NO_MATCH INT32_MIN

/* The x of instruction i (an instruction or an input, -k - 1) when i is the
 * GELU gradient of the header; NO_MATCH if not.
 * x must be a float-class operand (f32, bf16 or f16: its tile holds floats). */
static int32_t gelu_grad_x(const ts_fused *p, const ts_dtype *ext_dt, const int32_t *canon, int i) {
  const ts_fused_instr *R = &p->ins[i];
  if (R->op != TS_OP_ADD || R->dtype != TS_F32 || canon[i] != i) return NO_MATCH;
  int32_t a1, a2, a3, x, b1, b2, b3, b4, xe, xs;
  int32_t A = canon_of(canon, R->a), B = canon_of(canon, R->b);
  if (!is_op(p, canon, A, TS_OP_MUL, 0.5f, &a1) || !is_op(p, canon, a1, TS_OP_ADD, 1.f, &a2) ||
      !is_op(p, canon, a2, TS_OP_ERF, 0, &a3) || !is_op(p, canon, a3, TS_OP_MUL, TK_GELU_RSQRT2, &x))
    return NO_MATCH;
  /* B = mul(x, b1): the constant check does not apply (both operands are values) */
  if (B < 0 || p->ins[B].op != TS_OP_MUL || p->ins[B].dtype != TS_F32 || canon_of(canon, p->ins[B].a) != x)
    return NO_MATCH;
  b1 = canon_of(canon, p->ins[B].b);
  if (!is_op(p, canon, b1, TS_OP_MUL, TK_GELU_RSQRT2PI, &b2) || !is_op(p, canon, b2, TS_OP_EXP, 0, &b3) ||
      !is_op(p, canon, b3, TS_OP_MUL, -0.5f, &b4) || b4 < 0 || p->ins[b4].op != TS_OP_MUL ||
      p->ins[b4].dtype != TS_F32)
    return NO_MATCH;
  xe = canon_of(canon, p->ins[b4].a), xs = canon_of(canon, p->ins[b4].b);
  if (xe != x || xs != x) return NO_MATCH;
  ts_dtype xdt = x >= 0 ? p->ins[x].dtype : ext_dt[-x - 1];
  return xdt == TS_F32 || xdt == TS_BF16 || xdt == TS_F16 ? x : NO_MATCH;
}

/* Marks what instruction i reads as live. */
static void mark_operands(const ts_fused *p, const tk_plan *pl, int i, bool *live) {
  if (pl->kind[i] == TK_INS_GELU_GRAD || pl->kind[i] == TK_INS_SAME) {
    if (pl->arg[i] >= 0) live[pl->arg[i]] = true;
    return;
  }
  const ts_fused_instr *I = &p->ins[i];
  int32_t ids[3] = {I->a, I->b, I->c};
  for (int o = 0; o < nops(I->op); o++)
    if (ids[o] >= 0) live[ids[o]] = true;
}

void tk_fused_plan(const ts_fused *p, const ts_dtype *ext_dt, tk_plan *pl) {
  int n = p->n;
  int32_t canon[n > 0 ? n : 1];
  bool live[n > 0 ? n : 1];
  for (int i = 0; i < n; i++) {
    canon[i] = i, pl->kind[i] = TK_INS_RUN, pl->arg[i] = -1, live[i] = i == n - 1;
    ts_op op = p->ins[i].op;
    if (op == TS_OP_CONSTANT || op == TS_OP_BROADCAST || i == n - 1) continue; /* the last writes the output */
    for (int j = 0; j < i && canon[i] == i; j++)
      if (canon[j] == j && same_instr(p, canon, i, j)) canon[i] = j;
    if (canon[i] != i) pl->kind[i] = TK_INS_SAME, pl->arg[i] = canon[i];
  }
  for (int i = 0; i < n; i++) {
    int32_t x = gelu_grad_x(p, ext_dt, canon, i);
    if (x != NO_MATCH) pl->kind[i] = TK_INS_GELU_GRAD, pl->arg[i] = x;
  }
  for (int i = n - 1; i >= 0; i--) {
    if (live[i]) mark_operands(p, pl, i, live);
    else pl->kind[i] = TK_INS_SKIP;
  }
}

int tk_fused_extract(const ts_fused *p, int n_ext, int r, ts_fused *out, int32_t *ext, int *out_n_ext) {
  bool live[r + 1];
  int32_t at[r + 1], ext_at[n_ext > 0 ? n_ext : 1];
  for (int i = 0; i <= r; i++) live[i] = i == r;
  for (int k = 0; k < n_ext; k++) ext_at[k] = -1;
  for (int i = r; i >= 0; i--) {
    const ts_fused_instr *I = &p->ins[i];
    int32_t ids[3] = {I->a, I->b, I->c};
    for (int o = 0; live[i] && o < nops(I->op); o++)
      if (ids[o] >= 0) live[ids[o]] = true;
  }
  int n = 0, ne = 0;
  for (int i = 0; i <= r; i++) n += live[i];
  if (!(out->ins = malloc((size_t)n * sizeof *out->ins)))
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "fused: out of memory for a result's program");
  out->n = 0;
  for (int i = 0; i <= r; i++) {
    if (!live[i]) continue;
    ts_fused_instr I = p->ins[i];
    int32_t *ids[3] = {&I.a, &I.b, &I.c};
    for (int o = 0; o < nops(I.op); o++) {
      int32_t v = *ids[o];
      if (v >= 0) {
        *ids[o] = at[v];
        continue;
      }
      if (ext_at[-v - 1] < 0) ext[ne] = -v - 1, ext_at[-v - 1] = ne++;
      *ids[o] = -ext_at[-v - 1] - 1;
    }
    at[i] = out->n;
    out->ins[out->n++] = I;
  }
  *out_n_ext = ne;
  return 0;
}
