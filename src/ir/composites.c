/* composites.c — builders that lower to primitive ops at build time: relu,
 * gelu, softmax, log_softmax, cross_entropy, layer_norm, batch norm and
 * dropout. Autodiff and the compiler only ever see the primitives. */
#include <string.h>

#include "ir/builders_internal.h"

static ts_tensor scalar_like(ts_graph *g, ts_tensor x, double v) {
  return ts_scalar(g, ts_node_at(g, x)->dtype, v);
}

/* r is x reduced over the dims marked in red[]; broadcast it back to x's shape. */
static ts_tensor bcast_back(ts_graph *g, ts_tensor r, int rank, const int64_t *xshape, const bool *red) {
  if (r == TS_NONE) return TS_NONE;
  int dims[TS_MAX_RANK], n = 0;
  for (int d = 0; d < rank; d++)
    if (!red[d]) dims[n++] = d;
  return ts_broadcast_in_dim(g, r, rank, xshape, dims);
}

/* x must be a float tensor of rank >= min_rank; copies its shape out. */
static bool check_float(const ts_graph *g, ts_tensor x, const char *who, int min_rank, int *rank, int64_t *shape) {
  if (!ir_check_tensor(g, x, who)) return false;
  const ts_node *n = ts_node_at(g, x);
  char s[96];
  if (!ts_dtype_is_float(n->dtype) || n->rank < min_rank) {
    set_error("%s: input must be a float tensor of rank >= %d but is %s", who, min_rank,
                 ir_shape_str(n, s, sizeof s));
    return false;
  }
  *rank = n->rank;
  memcpy(shape, n->shape, sizeof n->shape);
  return true;
}

/* An optional per-feature vector: TS_NONE (absent) or (len) of dtype dt. */
static bool check_vec(const ts_graph *g, ts_tensor v, const char *who, const char *what, ts_dtype dt, int64_t len,
                      bool optional) {
  if (v == TS_NONE && optional) return true;
  if (!ir_check_tensor(g, v, who)) return false;
  const ts_node *n = ts_node_at(g, v);
  char s[96];
  if (n->dtype != dt || n->rank != 1 || n->shape[0] != len) {
    set_error("%s: %s must be %s[%lld] but is %s", who, what, ts_dtype_name(dt), (long long)len,
                 ir_shape_str(n, s, sizeof s));
    return false;
  }
  return true;
}

ts_tensor ts_relu(ts_graph *g, ts_tensor x) {
  if (!ir_check_tensor(g, x, "relu")) return TS_NONE;
  /* max(x, 0): the max adjoint sends ties to the second operand, so the
   * gradient at 0 is 0 as in PyTorch */
  return ts_max(g, x, scalar_like(g, x, 0.0));
}

ts_tensor ts_gelu(ts_graph *g, ts_tensor x) {
  int rank;
  int64_t shape[TS_MAX_RANK];
  if (!check_float(g, x, "gelu", 0, &rank, shape)) return TS_NONE;
  /* 0.5 * x * (1 + erf(x / sqrt(2))) as one elementwise op (fused.c), so
   * its gradient needs only x (one fused pass) instead of the erf chain's
   * saved intermediates (four extra passes forward in a GPT's MLP) */
  return ir_build(g, TS_OP_GELU, 1, &x, NULL, TS_F32, 0, NULL);
}

static int norm_dim(const char *who, int dim, int rank) {
  int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) return set_error("%s: dim %d is outside [-%d, %d)", who, dim, rank, rank), -1;
  return d;
}

/* x - max(x, dim), broadcast back; the shifted logits of softmax. */
static ts_tensor shifted(ts_graph *g, ts_tensor x, int dim, int rank, const int64_t *shape, bool *red) {
  for (int d = 0; d < rank; d++) red[d] = d == dim;
  ts_tensor m = ts_reduce(g, x, TS_REDUCE_MAX, 1, &dim, false);
  return ts_sub(g, x, bcast_back(g, m, rank, shape, red));
}

ts_tensor ts_softmax(ts_graph *g, ts_tensor x, int dim) {
  int rank;
  int64_t shape[TS_MAX_RANK];
  bool red[TS_MAX_RANK];
  if (!check_float(g, x, "softmax", 1, &rank, shape)) return TS_NONE;
  if ((dim = norm_dim("softmax", dim, rank)) < 0) return TS_NONE;
  ts_tensor e = ts_exp(g, shifted(g, x, dim, rank, shape, red));
  ts_tensor s = ts_reduce(g, e, TS_REDUCE_SUM, 1, &dim, false);
  return ts_div(g, e, bcast_back(g, s, rank, shape, red));
}

ts_tensor ts_log_softmax(ts_graph *g, ts_tensor x, int dim) {
  int rank;
  int64_t shape[TS_MAX_RANK];
  bool red[TS_MAX_RANK];
  if (!check_float(g, x, "log_softmax", 1, &rank, shape)) return TS_NONE;
  if ((dim = norm_dim("log_softmax", dim, rank)) < 0) return TS_NONE;
  ts_tensor z = shifted(g, x, dim, rank, shape, red);
  ts_tensor lse = ts_log(g, ts_reduce(g, ts_exp(g, z), TS_REDUCE_SUM, 1, &dim, false));
  return ts_sub(g, z, bcast_back(g, lse, rank, shape, red));
}

ts_tensor ts_cross_entropy(ts_graph *g, ts_tensor logits, ts_tensor labels) {
  const char *who = "cross_entropy";
  if (!ir_check_tensor(g, logits, who) || !ir_check_tensor(g, labels, who)) return TS_NONE;
  const ts_node *nl = ts_node_at(g, logits), *ny = ts_node_at(g, labels);
  char sl[96], sy[96];
  if (nl->rank != 2 || !ts_dtype_is_float(nl->dtype)) {
    set_error("%s: logits must be a float (B, C) tensor but are %s", who, ir_shape_str(nl, sl, sizeof sl));
    return TS_NONE;
  }
  if (ny->dtype != TS_I32 && ny->dtype != TS_I64) {
    set_error("%s: labels must be i32 or i64 class indices but are %s", who, ir_shape_str(ny, sy, sizeof sy));
    return TS_NONE;
  }
  if (ny->rank != 1 || ny->shape[0] != nl->shape[0]) {
    set_error("%s: logits are %s so labels must be (%lld) but are %s", who, ir_shape_str(nl, sl, sizeof sl),
                 (long long)nl->shape[0], ir_shape_str(ny, sy, sizeof sy));
    return TS_NONE;
  }
  int64_t bc[2] = {nl->shape[0], nl->shape[1]}; // (B, C)
  ts_dtype fdt = nl->dtype, idt = ny->dtype;
  bool red[2] = {false, true};
  int dim0 = 0, dim1 = 1;
  /* loss_i = lse_i - x[i, y_i] with lse = m + log(sum exp(x - m)), written so
   * that a class-sharded (vocab-parallel) x never has to be gathered: the
   * three reductions over classes (max, sum of exponentials, the label's
   * logit) become three all-reduces of B values, and the gradient,
   * softmax(x) - onehot(y), is computed on each shard with no collective.
   * The shift m is max(x) truncated to an integer through an integer
   * conversion: lse is exact for any m, exp(x - m) stays <= e, and m
   * carries no gradient (a float gradient path through the max would cost
   * two more all-reduces in the backward pass and is zero anyway). */
  ts_tensor mx = ts_reduce(g, logits, TS_REDUCE_MAX, 1, &dim1, false);                 // (B)
  ts_tensor m = ts_convert(g, ts_convert(g, mx, TS_I64), fdt);                          // no gradient
  ts_tensor e = ts_exp(g, ts_sub(g, logits, bcast_back(g, m, 2, bc, red)));             // (B, C)
  ts_tensor lse = ts_add(g, m, ts_log(g, ts_reduce(g, e, TS_REDUCE_SUM, 1, &dim1, false))); // (B)
  /* the label's logit: x where the class index equals the label, else 0,
   * summed over classes. The class index is a (C) iota broadcast (fused
   * into the compare: no (B, C) index tensor is ever written), and a select
   * instead of a one-hot product: no f32 one-hot, no separate multiply pass;
   * the gradient is select(hit, -g, 0), fused into softmax's. */
  ts_tensor cls = ts_broadcast_in_dim(g, ts_iota(g, idt, 1, &bc[1], 0), 2, bc, &dim1);
  ts_tensor lab = ts_broadcast_in_dim(g, labels, 2, bc, &dim0);
  ts_tensor hit = ts_compare(g, cls, lab, TS_CMP_EQ);
  ts_tensor picked = ts_reduce(g, ts_select(g, hit, logits, scalar_like(g, logits, 0.0)), TS_REDUCE_SUM, 1, &dim1,
                               false); // (B)
  return ts_mean_all(g, ts_sub(g, lse, picked));
}

static ts_tensor layer_norm(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps, bool fused) {
  const char *who = "layer_norm";
  int rank;
  int64_t shape[TS_MAX_RANK];
  bool red[TS_MAX_RANK];
  if (!check_float(g, x, who, 1, &rank, shape)) return TS_NONE;
  ts_dtype dt = ts_node_at(g, x)->dtype;
  int64_t D = shape[rank - 1];
  if (!check_vec(g, gamma, who, "gamma", dt, D, true) || !check_vec(g, beta, who, "beta", dt, D, true))
    return TS_NONE;
  /* f32 with gamma and beta: one fused op (kernels/layernorm.c: one pass per
   * row); its adjoint is the fused dx and dgamma ops and a reduce for dbeta. */
  if (fused && dt == TS_F32 && gamma != TS_NONE && beta != TS_NONE) {
    if (!(eps >= 0)) {
      set_error("%s: eps %g must be >= 0", who, eps);
      return TS_NONE;
    }
    return ir_layernorm(g, x, gamma, beta, eps);
  }
  int last = rank - 1;
  for (int d = 0; d < rank; d++) red[d] = d == last;
  ts_tensor mean = ts_reduce(g, x, TS_REDUCE_MEAN, 1, &last, false);
  /* x + (-mean), bit for bit x - mean: the gradient's negation is then on
   * the (rows) mean, not a full pass over dxc before its reduction */
  ts_tensor xc = ts_add(g, x, bcast_back(g, ts_neg(g, mean), rank, shape, red));
  ts_tensor var = ts_reduce(g, ts_mul(g, xc, xc), TS_REDUCE_MEAN, 1, &last, false); // biased
  ts_tensor inv = ts_rsqrt(g, ts_add(g, var, scalar_like(g, x, eps)));
  ts_tensor y = ts_mul(g, xc, bcast_back(g, inv, rank, shape, red));
  if (gamma != TS_NONE) y = ts_mul(g, y, gamma); /* (D) broadcasts over the last dim */
  if (beta != TS_NONE) y = ts_add(g, y, beta);
  return y;
}

ts_tensor ts_layer_norm(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps) {
  return layer_norm(g, x, gamma, beta, eps, true);
}

ts_tensor ts_layer_norm_decomposed(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps) {
  return layer_norm(g, x, gamma, beta, eps, false);
}

/* v (C) broadcast along dim axis of shape (N, ..., C, ...). */
static ts_tensor per_channel(ts_graph *g, ts_tensor v, int rank, const int64_t *shape, int axis) {
  return ts_broadcast_in_dim(g, v, rank, shape, &axis);
}

static bool check_axis(const char *who, int axis, int rank) {
  if (axis >= 1 && axis < rank) return true;
  set_error("%s: channel axis %d is outside [1, %d)", who, axis, rank);
  return false;
}

ts_tensor ts_batch_norm_train_axis(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps, int axis,
                                   ts_tensor *mean, ts_tensor *var) {
  const char *who = "batch_norm_train";
  int rank;
  int64_t shape[TS_MAX_RANK];
  bool red[TS_MAX_RANK];
  if (mean) *mean = TS_NONE;
  if (var) *var = TS_NONE;
  if (!check_float(g, x, who, 2, &rank, shape) || !check_axis(who, axis, rank)) return TS_NONE;
  ts_dtype dt = ts_node_at(g, x)->dtype;
  if (!check_vec(g, gamma, who, "gamma", dt, shape[axis], true) ||
      !check_vec(g, beta, who, "beta", dt, shape[axis], true))
    return TS_NONE;
  int dims[TS_MAX_RANK], n = 0;
  for (int d = 0; d < rank; d++) {
    red[d] = d != axis;
    if (red[d]) dims[n++] = d;
  }
  ts_tensor m = ts_reduce(g, x, TS_REDUCE_MEAN, n, dims, false); // (C)
  ts_tensor xc = ts_sub(g, x, bcast_back(g, m, rank, shape, red));
  ts_tensor v = ts_reduce(g, ts_mul(g, xc, xc), TS_REDUCE_MEAN, n, dims, false); // (C), biased
  ts_tensor inv = ts_rsqrt(g, ts_add(g, v, scalar_like(g, x, eps)));
  ts_tensor y = ts_mul(g, xc, per_channel(g, inv, rank, shape, axis));
  if (gamma != TS_NONE) y = ts_mul(g, y, per_channel(g, gamma, rank, shape, axis));
  if (beta != TS_NONE) y = ts_add(g, y, per_channel(g, beta, rank, shape, axis));
  if (mean) *mean = m;
  if (var) *var = v;
  return y;
}

ts_tensor ts_batch_norm_train(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps, ts_tensor *mean,
                              ts_tensor *var) {
  return ts_batch_norm_train_axis(g, x, gamma, beta, eps, 1, mean, var);
}

ts_tensor ts_batch_norm_eval_axis(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, ts_tensor running_mean,
                                  ts_tensor running_var, double eps, int axis) {
  const char *who = "batch_norm_eval";
  int rank;
  int64_t shape[TS_MAX_RANK];
  if (!check_float(g, x, who, 2, &rank, shape) || !check_axis(who, axis, rank)) return TS_NONE;
  ts_dtype dt = ts_node_at(g, x)->dtype;
  int64_t C = shape[axis];
  if (!check_vec(g, gamma, who, "gamma", dt, C, true) || !check_vec(g, beta, who, "beta", dt, C, true) ||
      !check_vec(g, running_mean, who, "running_mean", dt, C, false) ||
      !check_vec(g, running_var, who, "running_var", dt, C, false))
    return TS_NONE;
  ts_tensor inv = ts_rsqrt(g, ts_add(g, running_var, scalar_like(g, x, eps))); // (C)
  ts_tensor y = ts_sub(g, x, per_channel(g, running_mean, rank, shape, axis));
  y = ts_mul(g, y, per_channel(g, inv, rank, shape, axis));
  if (gamma != TS_NONE) y = ts_mul(g, y, per_channel(g, gamma, rank, shape, axis));
  if (beta != TS_NONE) y = ts_add(g, y, per_channel(g, beta, rank, shape, axis));
  return y;
}

ts_tensor ts_batch_norm_eval(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, ts_tensor running_mean,
                             ts_tensor running_var, double eps) {
  return ts_batch_norm_eval_axis(g, x, gamma, beta, running_mean, running_var, eps, 1);
}

ts_tensor ts_dropout(ts_graph *g, ts_tensor x, double p, ts_tensor seed, uint64_t key) {
  if (!ir_check_tensor(g, x, "dropout")) return TS_NONE;
  if (!(p >= 0.0 && p < 1.0)) {
    set_error("dropout: p = %g is outside [0, 1)", p);
    return TS_NONE;
  }
  if (p == 0.0) return x;
  const ts_node *n = ts_node_at(g, x);
  int rank = n->rank;
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, n->shape, sizeof shape);
  ts_tensor u = ts_rng_uniform(g, seed, key, n->dtype, rank, shape);
  if (u == TS_NONE) return TS_NONE;
  ts_tensor keep = ts_compare(g, u, scalar_like(g, x, p), TS_CMP_GE);
  ts_tensor scaled = ts_mul(g, x, scalar_like(g, x, 1.0 / (1.0 - p)));
  return ts_select(g, keep, scaled, scalar_like(g, x, 0.0));
}

/* Causal self-attention over q, k, v (B, H, T, Dh), heads a dim of their own
 * so a sharding of H splits it with no communication:
 *   s = (q k^T) * scale  (B, H, T, T), in f32 (the operands' dtype otherwise)
 *   s[i, j] = -1e30 where j > i (a constant mask; exp underflows to exactly 0)
 *   p = softmax(s) over the last dim, in f32
 *   y = p v              (B, H, T, Dh), in the operands' dtype */
static ts_tensor causal_attention(ts_graph *g, ts_tensor q, ts_tensor k, ts_tensor v, double scale, bool fused) {
  const char *who = "causal_attention";
  int rank;
  int64_t shape[TS_MAX_RANK];
  if (!check_float(g, q, who, 4, &rank, shape) || !ir_check_tensor(g, k, who) || !ir_check_tensor(g, v, who))
    return TS_NONE;
  ts_dtype dt = ts_node_at(g, q)->dtype;
  const ts_node *nk = ts_node_at(g, k), *nv = ts_node_at(g, v);
  char s1[96], s2[96], s3[96];
  if (rank != 4 || nk->rank != 4 || nv->rank != 4 || nk->dtype != dt || nv->dtype != dt ||
      memcmp(nk->shape, shape, 4 * sizeof *shape) || memcmp(nv->shape, shape, 4 * sizeof *shape)) {
    set_error("%s: q, k, v must be (B, H, T, Dh) of one shape and dtype, got %s, %s, %s", who,
              ir_shape_str(ts_node_at(g, q), s1, sizeof s1), ir_shape_str(nk, s2, sizeof s2),
              ir_shape_str(nv, s3, sizeof s3));
    return TS_NONE;
  }
  if (!(scale > 0)) {
    set_error("%s: scale %g must be positive", who, scale);
    return TS_NONE;
  }
  if (fused && dt == TS_F32) { /* packed (B, T, 3, H, Dh) for the fused op, and back */
    int perm[4] = {0, 2, 1, 3};
    int64_t s5[5] = {shape[0], shape[2], 1, shape[1], shape[3]};
    ts_tensor parts[3] = {q, k, v};
    for (int i = 0; i < 3; i++) parts[i] = ts_reshape(g, ts_transpose(g, parts[i], perm), 5, s5);
    return ts_transpose(g, ts_causal_attention_qkv(g, ts_concatenate(g, 3, parts, 2), scale), perm);
  }
  int64_t B = shape[0], H = shape[1], T = shape[2];
  ts_dot_dims qk = {.n_batch = 2, .n_contract = 1, .lhs_batch = {0, 1}, .rhs_batch = {0, 1},
                    .lhs_contract = {3}, .rhs_contract = {3}};
  ts_tensor s = ts_dot_general(g, q, k, &qk); // (B, H, T, T)
  if (dt != TS_F32) s = ts_convert(g, s, TS_F32);
  s = ts_mul(g, s, ts_scalar(g, TS_F32, scale));
  int64_t tt[2] = {T, T}, st[4] = {B, H, T, T};
  int two[2] = {2, 3};
  ts_tensor keep = ts_compare(g, ts_iota(g, TS_I32, 2, tt, 1), ts_iota(g, TS_I32, 2, tt, 0), TS_CMP_LE); // j <= i
  ts_tensor mask = ts_broadcast_in_dim(g, keep, 4, st, two);
  s = ts_select(g, mask, s, ts_scalar(g, TS_F32, -1e30));
  ts_tensor p = ts_softmax(g, s, 3);
  if (dt != TS_F32) p = ts_convert(g, p, dt);
  ts_dot_dims pv = {.n_batch = 2, .n_contract = 1, .lhs_batch = {0, 1}, .rhs_batch = {0, 1},
                    .lhs_contract = {3}, .rhs_contract = {2}};
  return ts_dot_general(g, p, v, &pv); // (B, H, T, Dh)
}

ts_tensor ts_causal_attention(ts_graph *g, ts_tensor q, ts_tensor k, ts_tensor v, double scale) {
  return causal_attention(g, q, k, v, scale, true);
}

ts_tensor ts_causal_attention_decomposed(ts_graph *g, ts_tensor q, ts_tensor k, ts_tensor v, double scale) {
  return causal_attention(g, q, k, v, scale, false);
}

ts_tensor ts_causal_attention_qkv(ts_graph *g, ts_tensor qkv, double scale) {
  const char *who = "causal_attention_qkv";
  int rank;
  int64_t shape[TS_MAX_RANK];
  if (!check_float(g, qkv, who, 5, &rank, shape)) return TS_NONE;
  char s1[96];
  if (rank != 5 || shape[2] != 3) {
    set_error("%s: qkv must be (B, T, 3, H, Dh) but is %s", who, ir_shape_str(ts_node_at(g, qkv), s1, sizeof s1));
    return TS_NONE;
  }
  if (!(scale > 0)) {
    set_error("%s: scale %g must be positive", who, scale);
    return TS_NONE;
  }
  /* f32: one fused op (kernels/attention.c: scores per block of query rows
   * in a scratch, softmax in f32, never the whole (B, H, T, T) in memory,
   * q, k, v read in place from the packed projection); its adjoint is one
   * op too (scores recomputed per block, dqkv written in place). */
  if (ts_node_at(g, qkv)->dtype == TS_F32) return ir_attention(g, qkv, scale);
  ts_tensor part[3];
  int perm[4] = {0, 2, 1, 3};
  int64_t s4[4] = {shape[0], shape[1], shape[3], shape[4]};
  for (int i = 0; i < 3; i++) { /* (B, T, 1, H, Dh) -> (B, H, T, Dh) */
    int64_t lo[5] = {0, 0, i, 0, 0}, hi[5] = {shape[0], shape[1], i + 1, shape[3], shape[4]};
    part[i] = ts_transpose(g, ts_reshape(g, ts_slice(g, qkv, lo, hi, NULL), 4, s4), perm);
  }
  return ts_transpose(g, causal_attention(g, part[0], part[1], part[2], scale, false), perm);
}
