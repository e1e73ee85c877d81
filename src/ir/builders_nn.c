/* builders_nn.c — builders for contractions (dot_general, matmul, conv2d),
 * pooling, reductions and indexing, plus the internal backward builders of
 * conv and pooling used by autodiff (builders_internal.h). */
#include <string.h>

#include "ir/builders_internal.h"
#include "ir/infer.h"

/* ---- contractions ---- */

ts_tensor ts_dot_general(ts_graph *g, ts_tensor lhs, ts_tensor rhs, const ts_dot_dims *dims) {
  if (!dims) {
    set_error("dot_general: dims is NULL");
    return TS_NONE;
  }
  ts_attr a = {0};
  a.dot = *dims;
  ts_tensor in[2] = {lhs, rhs};
  return ir_build(g, TS_OP_DOT, 2, in, &a, TS_F32, 0, NULL);
}

ts_tensor ts_matmul(ts_graph *g, ts_tensor a, ts_tensor b) {
  if (!ir_check_tensor(g, a, "matmul") || !ir_check_tensor(g, b, "matmul")) return TS_NONE;
  const ts_node *na = ts_node_at(g, a), *nb = ts_node_at(g, b);
  char sa[96], sb[96];
  ts_dot_dims d;
  memset(&d, 0, sizeof d);
  if (na->rank < 2 || nb->rank < 2 || (nb->rank != 2 && nb->rank != na->rank)) {
    set_error("matmul: a is %s and b is %s (need (M,K)x(K,N), (B..,M,K)x(B..,K,N) or (B..,M,K)x(K,N))",
                 ir_shape_str(na, sa, sizeof sa), ir_shape_str(nb, sb, sizeof sb));
    return TS_NONE;
  }
  if (na->shape[na->rank - 1] != nb->shape[nb->rank - 2]) {
    set_error("matmul: a is %s and b is %s: inner dims %lld and %lld differ", ir_shape_str(na, sa, sizeof sa),
                 ir_shape_str(nb, sb, sizeof sb), (long long)na->shape[na->rank - 1],
                 (long long)nb->shape[nb->rank - 2]);
    return TS_NONE;
  }
  d.n_contract = 1;
  d.lhs_contract[0] = na->rank - 1;
  d.rhs_contract[0] = nb->rank - 2;
  if (nb->rank > 2) { /* batched: equal leading dims are batch dims */
    d.n_batch = na->rank - 2;
    for (int i = 0; i < d.n_batch; i++) {
      if (na->shape[i] != nb->shape[i]) {
        set_error("matmul: a is %s and b is %s: batch dim %d differs (%lld vs %lld)",
                     ir_shape_str(na, sa, sizeof sa), ir_shape_str(nb, sb, sizeof sb), i, (long long)na->shape[i],
                     (long long)nb->shape[i]);
        return TS_NONE;
      }
      d.lhs_batch[i] = d.rhs_batch[i] = i;
    }
  }
  return ts_dot_general(g, a, b, &d);
}

ts_conv_params ir_conv_normalize(const ts_conv_params *p) {
  ts_conv_params q;
  memset(&q, 0, sizeof q);
  if (p) q = *p;
  for (int i = 0; i < 2; i++) {
    if (q.stride[i] == 0) q.stride[i] = 1;
    if (q.dilation[i] == 0) q.dilation[i] = 1;
  }
  if (q.groups == 0) q.groups = 1;
  return q;
}

ts_pool_params ir_pool_normalize(const ts_pool_params *p) {
  ts_pool_params q;
  memset(&q, 0, sizeof q);
  if (p) q = *p;
  for (int i = 0; i < 2; i++)
    if (q.stride[i] == 0) q.stride[i] = q.kernel[i];
  return q;
}

ts_tensor ts_conv2d(ts_graph *g, ts_tensor x, ts_tensor w, const ts_conv_params *p) {
  ts_attr a = {0};
  a.conv = ir_conv_normalize(p);
  ts_tensor in[2] = {x, w};
  return ir_build(g, TS_OP_CONV, 2, in, &a, TS_F32, 0, NULL);
}

ts_tensor ir_conv_bwd_data(ts_graph *g, ts_tensor dy, ts_tensor w, const ts_conv_params *p, int rank,
                           const int64_t *x_shape) {
  if (!ir_check_tensor(g, dy, "conv2d_bwd_data")) return TS_NONE;
  ts_attr a = {0};
  a.conv = ir_conv_normalize(p);
  ts_tensor in[2] = {dy, w};
  return ir_build(g, TS_OP_CONV_BWD_DATA, 2, in, &a, ts_node_at(g, dy)->dtype, rank, x_shape);
}

ts_tensor ir_conv_bwd_filter(ts_graph *g, ts_tensor x, ts_tensor dy, const ts_conv_params *p,
                             const int64_t *w_shape) {
  if (!ir_check_tensor(g, x, "conv2d_bwd_filter")) return TS_NONE;
  ts_attr a = {0};
  a.conv = ir_conv_normalize(p);
  ts_tensor in[2] = {x, dy};
  return ir_build(g, TS_OP_CONV_BWD_FILTER, 2, in, &a, ts_node_at(g, x)->dtype, 4, w_shape);
}

/* ---- pooling ---- */

ts_tensor ts_max_pool2d(ts_graph *g, ts_tensor x, const ts_pool_params *p) {
  ts_attr a = {0};
  a.pool = ir_pool_normalize(p);
  return ir_build(g, TS_OP_MAXPOOL, 1, &x, &a, TS_F32, 0, NULL);
}

ts_tensor ts_avg_pool2d(ts_graph *g, ts_tensor x, const ts_pool_params *p) {
  ts_attr a = {0};
  a.pool = ir_pool_normalize(p);
  return ir_build(g, TS_OP_AVGPOOL, 1, &x, &a, TS_F32, 0, NULL);
}

ts_tensor ir_maxpool_grad(ts_graph *g, ts_tensor x, ts_tensor dy, const ts_pool_params *p) {
  ts_attr a = {0};
  a.pool = ir_pool_normalize(p);
  ts_tensor in[2] = {x, dy};
  return ir_build(g, TS_OP_MAXPOOL_GRAD, 2, in, &a, TS_F32, 0, NULL);
}

ts_tensor ir_avgpool_grad(ts_graph *g, ts_tensor dy, const ts_pool_params *p, const int64_t *x_shape) {
  if (!ir_check_tensor(g, dy, "avg_pool2d_grad")) return TS_NONE;
  ts_attr a = {0};
  a.pool = ir_pool_normalize(p);
  return ir_build(g, TS_OP_AVGPOOL_GRAD, 1, &dy, &a, ts_node_at(g, dy)->dtype, 4, x_shape);
}

/* ---- fused causal attention ---- */

ts_tensor ir_attention(ts_graph *g, ts_tensor qkv, double scale) {
  ts_attr a = {0};
  a.value = scale;
  return ir_build(g, TS_OP_ATTENTION, 1, &qkv, &a, TS_F32, 0, NULL);
}

ts_tensor ir_attention_grad(ts_graph *g, ts_tensor qkv, ts_tensor dy, double scale) {
  ts_attr a = {0};
  a.value = scale;
  ts_tensor in[2] = {qkv, dy};
  return ir_build(g, TS_OP_ATTENTION_GRAD, 2, in, &a, TS_F32, 0, NULL);
}

/* ---- fused layer norm ---- */

ts_tensor ir_layernorm(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps) {
  ts_attr a = {0};
  a.value = eps;
  ts_tensor in[3] = {x, gamma, beta};
  return ir_build(g, TS_OP_LAYERNORM, 3, in, &a, TS_F32, 0, NULL);
}

ts_tensor ir_layernorm_grad(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor dy, double eps) {
  ts_attr a = {0};
  a.value = eps;
  ts_tensor in[3] = {x, gamma, dy};
  return ir_build(g, TS_OP_LAYERNORM_GRAD, 3, in, &a, TS_F32, 0, NULL);
}

ts_tensor ir_layernorm_dgamma(ts_graph *g, ts_tensor x, ts_tensor dy, double eps) {
  ts_attr a = {0};
  a.value = eps;
  ts_tensor in[2] = {x, dy};
  return ir_build(g, TS_OP_LAYERNORM_DGAMMA, 2, in, &a, TS_F32, 0, NULL);
}

/* ---- reductions ---- */

ts_tensor ts_reduce(ts_graph *g, ts_tensor x, ts_reduce_kind kind, int n, const int *dims, bool keepdims) {
  if (!ir_check_tensor(g, x, "reduce")) return TS_NONE;
  const ts_node *nx = ts_node_at(g, x);
  int r = nx->rank;
  int64_t xshape[TS_MAX_RANK];
  memcpy(xshape, nx->shape, sizeof xshape);
  if (n < 0 || n > r || (n > 0 && !dims)) {
    set_error("reduce: %d dims given for a rank %d operand", n, r);
    return TS_NONE;
  }
  /* normalize negative dims, sort ascending, reject repeats */
  bool red[TS_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int d = dims[i] < 0 ? dims[i] + r : dims[i];
    if (d < 0 || d >= r) {
      set_error("reduce: dim %d is outside [-%d, %d)", dims[i], r, r);
      return TS_NONE;
    }
    if (red[d]) {
      set_error("reduce: dim %d is given twice", d);
      return TS_NONE;
    }
    red[d] = true;
  }
  ts_attr a = {0};
  a.reduce = kind;
  for (int d = 0; d < r; d++)
    if (red[d]) a.dims[a.n_dims++] = d;
  ts_tensor y = ir_build(g, TS_OP_REDUCE, 1, &x, &a, TS_F32, 0, NULL);
  if (y == TS_NONE || !keepdims || n == 0) return y;
  int64_t kshape[TS_MAX_RANK];
  for (int d = 0; d < r; d++) kshape[d] = red[d] ? 1 : xshape[d];
  return ts_reshape(g, y, r, kshape);
}

ts_tensor ts_sum_all(ts_graph *g, ts_tensor x) {
  if (!ir_check_tensor(g, x, "sum_all")) return TS_NONE;
  int dims[TS_MAX_RANK], r = ts_node_at(g, x)->rank;
  if (r == 0) return x;
  for (int i = 0; i < r; i++) dims[i] = i;
  return ts_reduce(g, x, TS_REDUCE_SUM, r, dims, false);
}

ts_tensor ts_mean_all(ts_graph *g, ts_tensor x) {
  if (!ir_check_tensor(g, x, "mean_all")) return TS_NONE;
  int dims[TS_MAX_RANK], r = ts_node_at(g, x)->rank;
  for (int i = 0; i < r; i++) dims[i] = i;
  return ts_reduce(g, x, TS_REDUCE_MEAN, r, dims, false);
}

/* ---- indexing ---- */

ts_tensor ts_gather(ts_graph *g, ts_tensor table, ts_tensor indices) {
  ts_tensor in[2] = {table, indices};
  return ir_build(g, TS_OP_GATHER, 2, in, NULL, TS_F32, 0, NULL);
}

ts_tensor ts_scatter_add(ts_graph *g, ts_tensor base, ts_tensor indices, ts_tensor updates) {
  ts_tensor in[3] = {base, indices, updates};
  return ir_build(g, TS_OP_SCATTER_ADD, 3, in, NULL, TS_F32, 0, NULL);
}
