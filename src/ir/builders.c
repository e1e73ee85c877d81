/* builders.c — public graph builders for leaves, elementwise ops and shape
 * ops. Each builder checks its operands through ir_infer (infer.c) and then
 * appends the node; binary ops and select broadcast NumPy-style by inserting
 * explicit broadcast nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/builders_internal.h"
#include "ir/infer.h"

ts_tensor ir_build(ts_graph *g, ts_op op, int n_in, const int32_t *in, const ts_attr *attr, ts_dtype dt, int rank,
                   const int64_t *shape) {
  int64_t s[TS_MAX_RANK] = {0};
  int r = 0;
  if (!g) {
    set_error("%s: graph is NULL", ir_op_name(op));
    return TS_NONE;
  }
  if (ir_infer_result_given(op)) {
    if (rank < 0 || rank > TS_MAX_RANK) {
      set_error("%s: rank %d is outside [0, %d]", ir_op_name(op), rank, TS_MAX_RANK);
      return TS_NONE;
    }
    if (rank > 0 && !shape) {
      set_error("%s: shape is NULL for rank %d", ir_op_name(op), rank);
      return TS_NONE;
    }
    if (rank) memcpy(s, shape, (size_t)rank * sizeof *s);
    r = rank;
  }
  if (ir_infer(g, op, n_in, in, attr, &dt, &r, s)) return TS_NONE;
  return ir_append(g, op, dt, r, s, n_in, in, attr);
}

/* ---- leaves ---- */

ts_tensor ts_input(ts_graph *g, const char *name, ts_dtype dt, int rank, const int64_t *shape) {
  if (!g || !name || !name[0]) {
    set_error("input: %s", !g ? "graph is NULL" : "name is NULL or empty");
    return TS_NONE;
  }
  for (int i = 0; i < g->n_inputs; i++) {
    const ts_node *n = ts_node_at(g, g->inputs[i]);
    if (n->name && strcmp(n->name, name) == 0) {
      set_error("input: name \"%s\" is already used by input #%d (%%%d)", name, i, g->inputs[i]);
      return TS_NONE;
    }
  }
  char *copy = strdup(name);
  if (!copy) {
    error_oom("input: copying the name", strlen(name) + 1);
    return TS_NONE;
  }
  ts_tensor t = ir_build(g, TS_OP_INPUT, 0, NULL, NULL, dt, rank, shape);
  if (t == TS_NONE) {
    free(copy);
    return TS_NONE;
  }
  g->nodes[t].name = copy;
  return t;
}

ts_tensor ts_constant(ts_graph *g, ts_dtype dt, int rank, const int64_t *shape, const void *data) {
  if (!data) {
    set_error("constant: data is NULL (use ts_full for a filled tensor)");
    return TS_NONE;
  }
  ts_tensor t = ir_build(g, TS_OP_CONSTANT, 0, NULL, NULL, dt, rank, shape);
  if (t == TS_NONE) return TS_NONE;
  ts_node *n = &g->nodes[t];
  size_t bytes = (size_t)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(dt);
  n->data = malloc(bytes ? bytes : 1);
  if (!n->data) {
    g->n_nodes--; /* drop the node just appended (no operands, not an input): the graph is as it was */
    error_oom("constant: copying the data", bytes);
    return TS_NONE;
  }
  if (bytes) memcpy(n->data, data, bytes);
  return t;
}

ts_tensor ts_full(ts_graph *g, ts_dtype dt, int rank, const int64_t *shape, double value) {
  ts_attr a = {0};
  a.value = value;
  return ir_build(g, TS_OP_CONSTANT, 0, NULL, &a, dt, rank, shape);
}

ts_tensor ts_scalar(ts_graph *g, ts_dtype dt, double value) { return ts_full(g, dt, 0, NULL, value); }

ts_tensor ts_iota(ts_graph *g, ts_dtype dt, int rank, const int64_t *shape, int dim) {
  ts_attr a = {0};
  a.axis = dim < 0 ? dim + rank : dim;
  return ir_build(g, TS_OP_IOTA, 0, NULL, &a, dt, rank, shape);
}

static ts_tensor rng(ts_graph *g, ts_op op, ts_tensor seed, uint64_t key, ts_dtype dt, int rank,
                     const int64_t *shape) {
  ts_attr a = {0};
  a.key = key;
  return ir_build(g, op, 1, &seed, &a, dt, rank, shape);
}

ts_tensor ts_rng_uniform(ts_graph *g, ts_tensor seed, uint64_t key, ts_dtype dt, int rank, const int64_t *shape) {
  return rng(g, TS_OP_RNG_UNIFORM, seed, key, dt, rank, shape);
}

ts_tensor ts_rng_normal(ts_graph *g, ts_tensor seed, uint64_t key, ts_dtype dt, int rank, const int64_t *shape) {
  return rng(g, TS_OP_RNG_NORMAL, seed, key, dt, rank, shape);
}

/* ---- unary ---- */

static ts_tensor unary(ts_graph *g, ts_op op, ts_tensor x) { return ir_build(g, op, 1, &x, NULL, TS_F32, 0, NULL); }

ts_tensor ts_neg(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_NEG, x); }
ts_tensor ts_abs(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_ABS, x); }
ts_tensor ts_exp(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_EXP, x); }
ts_tensor ts_log(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_LOG, x); }
ts_tensor ts_log1p(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_LOG1P, x); }
ts_tensor ts_tanh(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_TANH, x); }
ts_tensor ts_sqrt(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_SQRT, x); }
ts_tensor ts_rsqrt(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_RSQRT, x); }
ts_tensor ts_sigmoid(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_SIGMOID, x); }
ts_tensor ts_erf(ts_graph *g, ts_tensor x) { return unary(g, TS_OP_ERF, x); }

ts_tensor ts_convert(ts_graph *g, ts_tensor x, ts_dtype to) {
  if (!ir_check_tensor(g, x, "convert")) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, n->shape, sizeof shape);
  return ir_build(g, TS_OP_CONVERT, 1, &x, NULL, to, n->rank, shape);
}

/* ---- broadcasting ---- */

/* NumPy broadcast shape of n operands (right-aligned; dims 1 or equal). */
static int broadcast_shape(const char *who, const ts_graph *g, int n, const ts_tensor *xs, int *rank,
                           int64_t *shape) {
  int r = 0;
  for (int i = 0; i < n; i++)
    if (ts_node_at(g, xs[i])->rank > r) r = ts_node_at(g, xs[i])->rank;
  for (int d = 0; d < r; d++) shape[d] = 1;
  for (int i = 0; i < n; i++) {
    const ts_node *x = ts_node_at(g, xs[i]);
    for (int d = 0; d < x->rank; d++) {
      int od = r - x->rank + d;
      int64_t s = x->shape[d];
      if (s == shape[od] || s == 1) continue;
      if (shape[od] == 1) {
        shape[od] = s;
        continue;
      }
      char buf[8][96];
      size_t o = 0;
      char list[400];
      list[0] = '\0';
      for (int k = 0; k < n && k < 8 && o < sizeof list; k++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", k ? " and " : "",
                              ir_shape_str(ts_node_at(g, xs[k]), buf[k], sizeof buf[k]));
      return set_error("%s: cannot broadcast %s (dim %d: %lld vs %lld)", who, list, od, (long long)shape[od],
                          (long long)s);
    }
  }
  *rank = r;
  return 0;
}

static ts_tensor broadcast_to(ts_graph *g, ts_tensor x, int rank, const int64_t *shape, const char *who) {
  if (!ir_check_tensor(g, x, who)) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  char sx[96];
  if (rank < n->rank || rank > TS_MAX_RANK || (rank > 0 && !shape)) {
    set_error("%s: cannot broadcast %s to rank %d", who, ir_shape_str(n, sx, sizeof sx), rank);
    return TS_NONE;
  }
  bool same = rank == n->rank;
  for (int d = 0; same && d < rank; d++) same = shape[d] == n->shape[d];
  if (same) return x;
  ts_attr a = {0};
  a.n_dims = n->rank;
  for (int i = 0; i < n->rank; i++) a.dims[i] = rank - n->rank + i;
  return ir_build(g, TS_OP_BROADCAST, 1, &x, &a, n->dtype, rank, shape);
}

ts_tensor ts_broadcast_to(ts_graph *g, ts_tensor x, int rank, const int64_t *shape) {
  return broadcast_to(g, x, rank, shape, "broadcast_to");
}

ts_tensor ts_broadcast_in_dim(ts_graph *g, ts_tensor x, int rank, const int64_t *shape, const int *dims) {
  if (!ir_check_tensor(g, x, "broadcast")) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  if (n->rank > 0 && !dims) {
    set_error("broadcast: dims is NULL for a rank %d operand", n->rank);
    return TS_NONE;
  }
  ts_attr a = {0};
  a.n_dims = n->rank;
  bool same = rank == n->rank && (rank == 0 || shape);
  for (int i = 0; i < n->rank; i++) {
    a.dims[i] = dims[i];
    same = same && dims[i] == i && shape[i] == n->shape[i];
  }
  if (same) return x;
  return ir_build(g, TS_OP_BROADCAST, 1, &x, &a, n->dtype, rank, shape);
}

/* ---- binary ---- */

static ts_tensor binary(ts_graph *g, ts_op op, ts_tensor a, ts_tensor b, const ts_attr *attr) {
  const char *who = ir_op_name(op);
  if (!ir_check_tensor(g, a, who) || !ir_check_tensor(g, b, who)) return TS_NONE;
  const ts_node *na = ts_node_at(g, a), *nb = ts_node_at(g, b);
  if (na->dtype != nb->dtype) {
    char sa[96], sb[96];
    set_error("%s: lhs is %s but rhs is %s (dtypes must match; no implicit promotion, use ts_convert)", who,
                 ir_shape_str(na, sa, sizeof sa), ir_shape_str(nb, sb, sizeof sb));
    return TS_NONE;
  }
  ts_tensor xs[2] = {a, b};
  int rank;
  int64_t shape[TS_MAX_RANK];
  if (broadcast_shape(who, g, 2, xs, &rank, shape)) return TS_NONE;
  for (int i = 0; i < 2; i++)
    if ((xs[i] = broadcast_to(g, xs[i], rank, shape, who)) == TS_NONE) return TS_NONE;
  return ir_build(g, op, 2, xs, attr, TS_F32, 0, NULL);
}

ts_tensor ts_add(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_ADD, a, b, NULL); }
ts_tensor ts_sub(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_SUB, a, b, NULL); }
ts_tensor ts_mul(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_MUL, a, b, NULL); }
ts_tensor ts_div(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_DIV, a, b, NULL); }
ts_tensor ts_max(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_MAX, a, b, NULL); }
ts_tensor ts_min(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_MIN, a, b, NULL); }
ts_tensor ts_pow(ts_graph *g, ts_tensor a, ts_tensor b) { return binary(g, TS_OP_POW, a, b, NULL); }

ts_tensor ts_compare(ts_graph *g, ts_tensor a, ts_tensor b, ts_cmp cmp) {
  ts_attr at = {0};
  at.cmp = cmp;
  return binary(g, TS_OP_COMPARE, a, b, &at);
}

ts_tensor ts_select(ts_graph *g, ts_tensor pred, ts_tensor a, ts_tensor b) {
  ts_tensor xs[3] = {pred, a, b};
  for (int i = 0; i < 3; i++)
    if (!ir_check_tensor(g, xs[i], "select")) return TS_NONE;
  int rank;
  int64_t shape[TS_MAX_RANK];
  if (broadcast_shape("select", g, 3, xs, &rank, shape)) return TS_NONE;
  for (int i = 0; i < 3; i++)
    if ((xs[i] = broadcast_to(g, xs[i], rank, shape, "select")) == TS_NONE) return TS_NONE;
  return ir_build(g, TS_OP_SELECT, 3, xs, NULL, TS_F32, 0, NULL);
}

/* ---- shape ops ---- */

ts_tensor ts_reshape(ts_graph *g, ts_tensor x, int rank, const int64_t *shape) {
  if (!ir_check_tensor(g, x, "reshape")) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  char sx[96];
  if (rank < 0 || rank > TS_MAX_RANK || (rank > 0 && !shape)) {
    set_error("reshape: cannot reshape %s to rank %d", ir_shape_str(n, sx, sizeof sx), rank);
    return TS_NONE;
  }
  int64_t s[TS_MAX_RANK];
  int infer_at = -1;
  int64_t known = 1, numel = ts_shape_numel(n->rank, n->shape);
  for (int d = 0; d < rank; d++) {
    s[d] = shape[d];
    if (s[d] == -1 && infer_at < 0) {
      infer_at = d;
      continue;
    }
    if (s[d] < 0) {
      set_error("reshape: dim %d of the new shape is %lld (only one -1 is allowed)", d, (long long)s[d]);
      return TS_NONE;
    }
    known *= s[d];
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      set_error("reshape: cannot reshape %s (%lld elements) to a shape with -1 at dim %d and %lld other elements",
                   ir_shape_str(n, sx, sizeof sx), (long long)numel, infer_at, (long long)known);
      return TS_NONE;
    }
    s[infer_at] = numel / known;
  }
  return ir_build(g, TS_OP_RESHAPE, 1, &x, NULL, n->dtype, rank, s);
}

ts_tensor ts_transpose(ts_graph *g, ts_tensor x, const int *perm) {
  if (!ir_check_tensor(g, x, "transpose")) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  ts_attr a = {0};
  a.n_dims = n->rank;
  if (n->rank && !perm) {
    set_error("transpose: perm is NULL");
    return TS_NONE;
  }
  for (int i = 0; i < n->rank; i++) a.dims[i] = perm[i];
  return ir_build(g, TS_OP_TRANSPOSE, 1, &x, &a, TS_F32, 0, NULL);
}

ts_tensor ts_slice(ts_graph *g, ts_tensor x, const int64_t *start, const int64_t *limit, const int64_t *stride) {
  if (!ir_check_tensor(g, x, "slice")) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  if (n->rank && (!start || !limit)) {
    set_error("slice: start or limit is NULL");
    return TS_NONE;
  }
  ts_attr a = {0};
  for (int d = 0; d < n->rank; d++) {
    a.start[d] = start[d];
    a.limit[d] = limit[d];
    a.stride[d] = stride ? stride[d] : 1;
  }
  return ir_build(g, TS_OP_SLICE, 1, &x, &a, TS_F32, 0, NULL);
}

ts_tensor ts_pad(ts_graph *g, ts_tensor x, const int64_t *lo, const int64_t *hi, double value) {
  if (!ir_check_tensor(g, x, "pad")) return TS_NONE;
  const ts_node *n = ts_node_at(g, x);
  if (n->rank && (!lo || !hi)) {
    set_error("pad: lo or hi is NULL");
    return TS_NONE;
  }
  ts_attr a = {0};
  for (int d = 0; d < n->rank; d++) {
    a.start[d] = lo[d];
    a.limit[d] = hi[d];
  }
  a.value = value;
  return ir_build(g, TS_OP_PAD, 1, &x, &a, TS_F32, 0, NULL);
}

ts_tensor ts_concatenate(ts_graph *g, int n, const ts_tensor *xs, int dim) {
  if (n < 1 || !xs) {
    set_error("concatenate: needs at least one operand (got %d)", n);
    return TS_NONE;
  }
  for (int i = 0; i < n; i++)
    if (!ir_check_tensor(g, xs[i], "concatenate")) return TS_NONE;
  if (n == 1) return xs[0];
  ts_attr a = {0};
  a.axis = dim < 0 ? dim + ts_node_at(g, xs[0])->rank : dim;
  return ir_build(g, TS_OP_CONCAT, n, xs, &a, TS_F32, 0, NULL);
}
