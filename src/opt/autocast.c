/* autocast.c — mixed precision as a graph rewrite (ts_compile_options.autocast):
 * PyTorch's CPU autocast policy on tessel's IR. The contractions (dot_general,
 * conv2d and its two backward ops: matmul, linear and convolution in both
 * passes) run in the low-precision type; everything else (softmax, the losses,
 * norms and their statistics, reductions, exp/log/pow, the optimizer, the
 * collectives) stays f32.
 *
 *   bf16: op(a, b) f32  ->  convert(op(convert(a, bf16), convert(b, bf16)) bf16, f32)
 *         (oneDNN's bf16 kernels accumulate in f32 and round the result to
 *         bf16, like PyTorch's bf16 output)
 *   f16:  op(a, b) f32  ->  f16-rounded operands and result, computed in f32:
 *         convert(convert(op(convert(convert(a, f16), f32), ...) f32, f16), f32)
 *         (this CPU has no f16 arithmetic: AVX512_FP16 is absent, so oneDNN has
 *         no f16 convolution or matmul here; values are stored and rounded as
 *         f16 — range and overflow are f16's — and computed in f32)
 *
 * The bf16 filter gradient is the exception to "result bf16, converted":
 *   conv2d_bwd_filter(convert(x, bf16), convert(dy, bf16)) f32
 * oneDNN's bf16 backward-weights kernel accumulates in f32 and writes the f32
 * sum directly (no rounding to bf16 and no convert node: the optimizer reads
 * the f32 gradient), the sum PyTorch computes before rounding it to bf16.
 *
 * Master weights stay f32: a weight's convert is a node like any other, so CSE
 * computes it once per step however many ops use it (forward conv and the
 * backward-data conv), and gradients come back f32 through the result's
 * convert. Run before the other passes so simplify/CSE/fusion see the converts
 * (a convert feeding an elementwise chain is fused into it). */
#include <string.h>

#include "opt/opt.h"

typedef struct {
  ts_dtype dt;
  int changed;
} autocast_ctx;

static bool is_autocast_op(ts_op op) {
  return op == TS_OP_DOT || op == TS_OP_CONV || op == TS_OP_CONV_BWD_DATA || op == TS_OP_CONV_BWD_FILTER;
}

static ts_tensor convert_to(ts_graph *dst, ts_tensor x, ts_dtype to) {
  if (x < 0) return TS_NONE;
  const ts_node *n = &dst->nodes[x];
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, n->shape, sizeof shape);
  int rank = n->rank;
  if (n->op == TS_OP_RESHAPE && n->n_in == 1) {
    /* convert(reshape(y)) -> reshape(convert(y)): the same elements in the
     * same order, but the convert now reads y itself, so fusion can fold it
     * into the elementwise op producing y (which then writes the bf16 copy
     * directly): the cross-entropy's (B*T, V) logits gradient reshaped to
     * (B, T, V) for the LM head's two matmuls */
    ts_tensor c = convert_to(dst, n->in[0], to);
    if (c < 0) return TS_NONE;
    return ir_append(dst, TS_OP_RESHAPE, to, rank, shape, 1, &c, NULL);
  }
  return ir_append(dst, TS_OP_CONVERT, to, rank, shape, 1, &x, NULL);
}

static ts_tensor autocast_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  autocast_ctx *c = user;
  const ts_node *n = &src->nodes[id];
  if (!is_autocast_op(n->op) || n->dtype != TS_F32) return OPT_KEEP;
  for (int k = 0; k < n->n_in; k++)
    if (src->nodes[n->in[k]].dtype != TS_F32) return OPT_KEEP;
  int32_t ins[2];
  for (int k = 0; k < n->n_in && k < 2; k++) {
    ins[k] = convert_to(dst, map[n->in[k]], c->dt);
    if (c->dt == TS_F16) ins[k] = convert_to(dst, ins[k], TS_F32); /* stored f16, computed f32 */
    if (ins[k] < 0) return TS_NONE;
  }
  ts_dtype compute = c->dt == TS_BF16 ? TS_BF16 : TS_F32;
  bool wide_dw = c->dt == TS_BF16 && n->op == TS_OP_CONV_BWD_FILTER; /* f32 diff_weights (above) */
  ts_tensor r = ir_append(dst, n->op, wide_dw ? TS_F32 : compute, n->rank, n->shape, n->n_in, ins, &n->attr);
  if (wide_dw) {
    if (r >= 0) c->changed++;
    return r;
  }
  if (c->dt == TS_F16) r = convert_to(dst, r, TS_F16);
  r = convert_to(dst, r, TS_F32);
  if (r >= 0) c->changed++;
  return r;
}

ts_graph *opt_autocast(const ts_graph *g, ts_dtype dt, int *changed) {
  autocast_ctx c = {.dt = dt};
  if (dt != TS_BF16 && dt != TS_F16) {
    if (changed) *changed = 0;
    return opt_rebuild(g, NULL, NULL, NULL);
  }
  ts_graph *out = opt_rebuild(g, autocast_node, &c, NULL);
  if (changed) *changed = c.changed;
  return out;
}
