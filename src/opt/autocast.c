/* autocast.c — mixed precision as a graph rewrite (ts_compile_options.autocast):
 * PyTorch's CPU autocast policy on tessel's IR. The contractions (dot_general,
 * conv2d and its two backward ops: matmul, linear and convolution in both
 * passes) run in the low-precision type; everything else (softmax, the losses,
 * norms and their statistics, reductions, exp/log/pow, the optimizer, the
 * collectives) is computed in f32. Under bf16, the activations PyTorch keeps
 * in bf16 between a convolution and the next (batch norm's output and input
 * gradient, residual sums) are also rounded to bf16 (below: "bf16
 * activations").
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
#include <stdlib.h>
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

/* ---- bf16 activations: the values PyTorch's autocast stores as bf16 ----
 * Under PyTorch's CPU autocast a convolution returns bf16, and the ops after
 * it (not on any autocast list) keep that type: batch norm reads bf16 x and
 * returns bf16 y (computed in f32 inside), ReLU of bf16 is bf16, bf16 + bf16
 * is bf16, and autograd gives each bf16 tensor a bf16 gradient (batch norm's
 * input gradient, the sum of a residual block input's two gradients). So
 * under bf16 autocast these values are rounded to bf16, everything between
 * them still computed in f32:
 *   (a) batch norm's output y when its input x is a bf16 value,
 *   (b) batch norm's input gradient dx (bn_adjoint's closed form) when x is,
 *   (c) the sum of two full-size bf16 values, neither a matmul's result
 *       (PyTorch sums matmul gradients into the f32 tensor autocast cast
 *       from: q, k and v read one f32 LayerNorm output; convolutions read the
 *       bf16 activations above).
 * "A bf16 value" is opt_bf16_exact: a contraction's converted result, a value
 * rounded here, or a ReLU / select of those. Each rounding is the round trip
 * convert(convert(v, bf16), f32): fusion folds the inner convert into v's
 * group (which then writes bf16: half the bytes) and the outer one into its
 * users. ReLU commutes with the rounding, so relu(round(y)) is what PyTorch
 * stores too. */
typedef struct {
  bool *exact; /* per dst node */
  int n_exact, cap;
  int rounded;
} round_ctx;

/* (a) batch norm's output, its input x a bf16 value. */
static bool bn_output(const ts_graph *g, ts_tensor t, const bool *exact) {
  ir_bn m;
  return ir_bn_match(g, t, &m) && exact[m.x];
}

/* (b) batch norm's closed-form input gradient, x a bf16 value. */
static bool bn_input_grad(const ts_graph *g, ts_tensor t, const bool *exact) {
  ts_tensor x = ir_bn_input_grad_source(g, t);
  return x != TS_NONE && exact[x];
}

static bool from_matmul(const ts_graph *g, ts_tensor t) {
  const ts_node *n = &g->nodes[t];
  return n->op == TS_OP_CONVERT && g->nodes[n->in[0]].op == TS_OP_DOT;
}

/* (c) a + b, both full-size bf16 values, neither a matmul's. */
static bool bf16_sum(const ts_graph *g, ts_tensor t, const bool *exact) {
  const ts_node *n = &g->nodes[t];
  if (n->op != TS_OP_ADD || n->n_in != 2) return false;
  int64_t numel = ts_shape_numel(n->rank, n->shape);
  for (int k = 0; k < 2; k++)
    if (!exact[n->in[k]] || ts_tensor_numel(g, n->in[k]) != numel || from_matmul(g, n->in[k])) return false;
  return numel > 1;
}

/* exact[] for every dst node appended since the last call. */
static int update_exact(round_ctx *c, const ts_graph *dst) {
  if (dst->n_nodes > c->cap) {
    int cap = dst->n_nodes * 2 + 16;
    bool *e = realloc(c->exact, (size_t)cap * sizeof *e);
    if (!e) return error_oom("compile: autocast", (size_t)cap);
    c->exact = e, c->cap = cap;
  }
  for (; c->n_exact < dst->n_nodes; c->n_exact++) c->exact[c->n_exact] = opt_bf16_exact(dst, c->n_exact, c->exact);
  return 0;
}

static ts_tensor round_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  round_ctx *c = user;
  const ts_node *sn = &src->nodes[id];
  /* convert(convert(b, f32), bf16) = b: a contraction reading a rounded value
   * reads its bf16 copy (no second rounding pass in the fused kernel) */
  if (sn->op == TS_OP_CONVERT && sn->dtype == TS_BF16 && map[sn->in[0]] >= 0) {
    ts_tensor b = opt_bf16_widened(dst, map[sn->in[0]]);
    if (b != TS_NONE) return b;
  }
  ts_tensor t = opt_copy_node(dst, src, id, map);
  if (t < 0 || update_exact(c, dst) < 0) return TS_NONE;
  const ts_node *n = &dst->nodes[t];
  if (n->dtype != TS_F32 || !(bn_output(dst, t, c->exact) || bn_input_grad(dst, t, c->exact) ||
                              bf16_sum(dst, t, c->exact)))
    return t;
  c->rounded++;
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, n->shape, sizeof shape);
  int rank = n->rank;
  ts_tensor b = ir_append(dst, TS_OP_CONVERT, TS_BF16, rank, shape, 1, &t, NULL);
  return b < 0 ? TS_NONE : ir_append(dst, TS_OP_CONVERT, TS_F32, rank, shape, 1, &b, NULL);
}

static ts_graph *round_activations(ts_graph *g, int *changed) {
  round_ctx c = {0};
  ts_graph *out = opt_rebuild(g, round_node, &c, NULL);
  free(c.exact);
  ts_graph_free(g);
  *changed += c.rounded;
  return out;
}

ts_graph *opt_autocast(const ts_graph *g, ts_dtype dt, int *changed) {
  autocast_ctx c = {.dt = dt};
  if (dt != TS_BF16 && dt != TS_F16) {
    if (changed) *changed = 0;
    return opt_rebuild(g, NULL, NULL, NULL);
  }
  ts_graph *out = opt_rebuild(g, autocast_node, &c, NULL);
  if (out && dt == TS_BF16) out = round_activations(out, &c.changed);
  if (changed) *changed = c.changed;
  return out;
}
