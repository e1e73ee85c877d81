/* adjoints.c — the adjoint (vector-Jacobian) rule of every differentiable
 * IR op, as nodes built with the public builders and the internal backward
 * builders (conv / pooling).
 *
 * Conventions: z is the node, dz its cotangent (z's shape), operands a, b...
 * Non-smooth points follow PyTorch: abs'(0) = 0; max(a, b) sends dz to a where
 * a > b and to b otherwise (so relu = max(x, 0) has gradient 0 at 0); min
 * likewise with a < b. Reduce max/min send dz to every position equal to the
 * result (ties all receive the full cotangent, XLA's select-based rule);
 * max pooling sends it to the first maximum of each window (the kernel's
 * rule). */
#include <stdio.h>
#include <string.h>

#include "ad/ad.h"                 /* ad_adjoint */
#include "ir/builders_internal.h"  /* ir_conv_bwd_data, ir_conv_bwd_filter, ir_*pool_grad */

bool ad_operand_differentiable(const ts_node *n, int i) {
  switch (n->op) {
  case TS_OP_RNG_UNIFORM:
  case TS_OP_RNG_NORMAL:
  case TS_OP_IOTA:
  case TS_OP_COMPARE:
    return false;
  case TS_OP_SELECT:
    return i != 0;
  case TS_OP_GATHER:
    return i == 0;
  case TS_OP_SCATTER_ADD:
    return i != 1;
  default:
    return true;
  }
}

/* State of one rule: the node (a copy: the node array moves as nodes are
 * appended) and its cotangent. */
typedef struct {
  ts_graph *g;
  ts_tensor z, dz;
  ts_node n;
} adj;

static ts_tensor in_(const adj *c, int i) { return c->n.in[i]; }
static const ts_node *node(const adj *c, ts_tensor t) { return &c->g->nodes[t]; }
static ts_tensor scal(const adj *c, double v) { return ts_scalar(c->g, c->n.dtype, v); }

/* A copy of t's shape (the pointer into the node array would dangle). */
static int shape_of(const adj *c, ts_tensor t, int64_t *shape) {
  const ts_node *n = node(c, t);
  memcpy(shape, n->shape, sizeof n->shape);
  return n->rank;
}

/* ---- elementwise ---- */

static int unary(const adj *c, ts_tensor *out) {
  ts_graph *g = c->g;
  ts_tensor x = in_(c, 0), z = c->z, dz = c->dz;
  switch (c->n.op) {
  case TS_OP_NEG: out[0] = ts_neg(g, dz); break;
  case TS_OP_ABS: /* sign(x) * dz, with sign(0) = 0 */
    out[0] = ts_select(g, ts_compare(g, x, scal(c, 0), TS_CMP_GT), dz,
                       ts_select(g, ts_compare(g, x, scal(c, 0), TS_CMP_LT), ts_neg(g, dz), scal(c, 0)));
    break;
  case TS_OP_EXP: out[0] = ts_mul(g, dz, z); break;
  case TS_OP_LOG: out[0] = ts_div(g, dz, x); break;
  case TS_OP_LOG1P: out[0] = ts_div(g, dz, ts_add(g, x, scal(c, 1))); break;
  case TS_OP_TANH: out[0] = ts_mul(g, dz, ts_sub(g, scal(c, 1), ts_mul(g, z, z))); break;
  case TS_OP_SQRT: out[0] = ts_div(g, dz, ts_mul(g, z, scal(c, 2))); break;
  case TS_OP_RSQRT: /* d x^-1/2 = -1/2 x^-3/2 = -1/2 z^3 */
    out[0] = ts_mul(g, dz, ts_mul(g, ts_mul(g, z, ts_mul(g, z, z)), scal(c, -0.5)));
    break;
  case TS_OP_SIGMOID: out[0] = ts_mul(g, dz, ts_mul(g, z, ts_sub(g, scal(c, 1), z))); break;
  case TS_OP_ERF: /* 2/sqrt(pi) exp(-x^2) */
    out[0] = ts_mul(g, dz, ts_mul(g, ts_exp(g, ts_neg(g, ts_mul(g, x, x))), scal(c, 1.1283791670955126 /* 2/sqrt(pi) */)));
    break;
  case TS_OP_GELU: /* Phi(x) + x phi(x) = (1 + erf(x/sqrt(2)))/2 + x exp(-x^2/2)/sqrt(2 pi): from x
                     alone, one fused pass over x and dz */
    out[0] = ts_mul(g, dz,
                    ts_add(g, ts_mul(g, ts_add(g, ts_erf(g, ts_mul(g, x, scal(c, 0.70710678118654752440))), scal(c, 1)),
                                     scal(c, 0.5)),
                           ts_mul(g, x, ts_mul(g, ts_exp(g, ts_mul(g, ts_mul(g, x, x), scal(c, -0.5))),
                                               scal(c, 0.39894228040143267794 /* 1/sqrt(2 pi) */)))));
    break;
  case TS_OP_CONVERT: out[0] = ts_convert(g, dz, node(c, x)->dtype); break;
  default: return set_error("autodiff: no unary rule for %s", ir_op_name(c->n.op));
  }
  return 0;
}

static int binary(const adj *c, const bool *need, ts_tensor *out) {
  ts_graph *g = c->g;
  ts_tensor a = in_(c, 0), b = in_(c, 1), z = c->z, dz = c->dz;
  switch (c->n.op) {
  case TS_OP_ADD:
    out[0] = dz;
    out[1] = dz;
    break;
  case TS_OP_SUB:
    out[0] = dz;
    if (need[1]) out[1] = ts_neg(g, dz);
    break;
  case TS_OP_MUL:
    if (need[0]) out[0] = ts_mul(g, dz, b);
    if (need[1]) out[1] = ts_mul(g, dz, a);
    break;
  case TS_OP_DIV: { /* z = a / b: da = dz / b, db = -dz a / b^2 = -(dz / b) z */
    ts_tensor q = ts_div(g, dz, b);
    out[0] = q;
    if (need[1]) out[1] = ts_neg(g, ts_mul(g, q, z));
    break;
  }
  case TS_OP_MAX:
  case TS_OP_MIN: { /* dz to a where a wins strictly, else to b */
    ts_tensor m = ts_compare(g, a, b, c->n.op == TS_OP_MAX ? TS_CMP_GT : TS_CMP_LT), zero = scal(c, 0);
    if (need[0]) out[0] = ts_select(g, m, dz, zero);
    if (need[1]) out[1] = ts_select(g, m, zero, dz);
    break;
  }
  case TS_OP_POW: { /* z = a^b: da = dz b a^(b-1); db = dz z log(a), 0 where a <= 0 */
    if (need[0]) out[0] = ts_mul(g, dz, ts_mul(g, b, ts_pow(g, a, ts_sub(g, b, scal(c, 1)))));
    if (need[1]) {
      /* log of a safe base, so that no NaN appears even where it is unused
       * (a NaN would survive a later multiplication by zero) */
      ts_tensor zero = scal(c, 0), pos = ts_compare(g, a, zero, TS_CMP_GT);
      ts_tensor safe_a = ts_select(g, pos, a, scal(c, 1));
      out[1] = ts_select(g, pos, ts_mul(g, dz, ts_mul(g, z, ts_log(g, safe_a))), zero);
    }
    break;
  }
  default: return set_error("autodiff: no binary rule for %s", ir_op_name(c->n.op));
  }
  return 0;
}

/* ---- shape ops ---- */

/* Sum over the dims the broadcast created or stretched, then reshape to the
 * operand (re-inserting its size-1 dims). */
static ts_tensor broadcast_adjoint(const adj *c) {
  ts_tensor x = in_(c, 0);
  int64_t xs[TS_MAX_RANK];
  int xr = shape_of(c, x, xs);
  int red[TS_MAX_RANK], n_red = 0;
  for (int d = 0; d < c->n.rank; d++) {
    int src = -1;
    for (int i = 0; i < xr; i++)
      if (c->n.attr.dims[i] == d) src = i;
    if (src < 0 || (xs[src] == 1 && c->n.shape[d] != 1)) red[n_red++] = d;
  }
  ts_tensor r = c->dz;
  if (n_red) r = ts_reduce(c->g, r, TS_REDUCE_SUM, n_red, red, false);
  if (r == TS_NONE) return TS_NONE;
  int64_t rs[TS_MAX_RANK];
  int rr = shape_of(c, r, rs);
  if (rr == xr && memcmp(rs, xs, (size_t)xr * sizeof *xs) == 0) return r;
  return ts_reshape(c->g, r, xr, xs);
}

/* Scatters dz back into the sliced region of a zero tensor shaped like x. A
 * dim with stride s > 1 is spread first: (n) -> reshape (n, 1) -> pad to
 * (n, s) -> reshape (n*s) -> slice the first (n-1)*s+1, which puts element k
 * at k*s with zeros between. Then one pad places the region at start. */
static ts_tensor slice_adjoint(const adj *c) {
  ts_graph *g = c->g;
  ts_tensor x = in_(c, 0), r = c->dz;
  int64_t xs[TS_MAX_RANK];
  int rank = shape_of(c, x, xs);
  const ts_attr *at = &c->n.attr;
  int64_t cur[TS_MAX_RANK]; /* shape of r */
  memcpy(cur, c->n.shape, sizeof cur);
  for (int d = 0; d < rank; d++) {
    int64_t s = at->stride[d], n = cur[d];
    if (s <= 1 || n <= 1) continue;
    if (rank + 1 > TS_MAX_RANK) {
      set_error("autodiff: slice with stride %lld on a rank-%d tensor needs rank %d (the limit is %d)", (long long)s,
                   rank, rank + 1, TS_MAX_RANK);
      return TS_NONE;
    }
    int64_t sh[TS_MAX_RANK], lo[TS_MAX_RANK] = {0}, hi[TS_MAX_RANK] = {0};
    for (int i = 0, j = 0; i < rank; i++) {
      sh[j++] = cur[i];
      if (i == d) sh[j++] = 1;
    }
    r = ts_reshape(g, r, rank + 1, sh); /* (.., n, 1, ..) */
    hi[d + 1] = s - 1;
    r = ts_pad(g, r, lo, hi, 0.0); /* (.., n, s, ..) */
    cur[d] = n * s;
    r = ts_reshape(g, r, rank, cur); /* (.., n*s, ..) */
    int64_t st[TS_MAX_RANK] = {0}, lim[TS_MAX_RANK];
    memcpy(lim, cur, sizeof lim);
    lim[d] = (n - 1) * s + 1;
    r = ts_slice(g, r, st, lim, NULL);
    cur[d] = lim[d];
  }
  int64_t lo[TS_MAX_RANK] = {0}, hi[TS_MAX_RANK] = {0};
  bool any = false;
  for (int d = 0; d < rank; d++) {
    lo[d] = at->start[d];
    hi[d] = xs[d] - at->start[d] - cur[d];
    any |= lo[d] != 0 || hi[d] != 0;
  }
  return any ? ts_pad(g, r, lo, hi, 0.0) : r;
}

static ts_tensor pad_adjoint(const adj *c) {
  int64_t xs[TS_MAX_RANK], lim[TS_MAX_RANK];
  int rank = shape_of(c, in_(c, 0), xs);
  for (int d = 0; d < rank; d++) lim[d] = c->n.attr.start[d] + xs[d];
  return ts_slice(c->g, c->dz, c->n.attr.start, lim, NULL);
}

static void concat_adjoint(const adj *c, const bool *need, ts_tensor *out) {
  int axis = c->n.attr.axis;
  int64_t off = 0;
  for (int j = 0; j < c->n.n_in; j++) {
    int64_t xs[TS_MAX_RANK], st[TS_MAX_RANK] = {0}, lim[TS_MAX_RANK];
    shape_of(c, in_(c, j), xs);
    memcpy(lim, c->n.shape, sizeof lim);
    st[axis] = off;
    lim[axis] = off + xs[axis];
    if (need[j]) out[j] = ts_slice(c->g, c->dz, st, lim, NULL);
    off += xs[axis];
  }
}

/* ---- contractions ---- */

static bool in_list(const int *l, int n, int v) {
  for (int i = 0; i < n; i++)
    if (l[i] == v) return true;
  return false;
}

/* Number of entries of l smaller than v (v's position once l is sorted). */
static int rank_in(const int *l, int n, int v) {
  int k = 0;
  for (int i = 0; i < n; i++) k += l[i] < v;
  return k;
}

static ts_tensor transpose_unless_identity(ts_graph *g, ts_tensor t, int rank, const int *perm) {
  for (int i = 0; i < rank; i++)
    if (perm[i] != i) return ts_transpose(g, t, perm);
  return t;
}

/* z = dot_general(a, b): z dims are (batch..., a free..., b free...), free
 * dims in ascending order. Each operand's gradient is a dot_general of dz with
 * the other operand over the other's free dims, then a transpose back to the
 * operand's dim order — for b, when dot(dz, a) already has b's order (a
 * linear layer's weight), that product directly. */
static void dot_adjoint(const adj *c, const bool *need, ts_tensor *out) {
  ts_graph *g = c->g;
  const ts_dot_dims *D = &c->n.attr.dot;
  ts_tensor a = in_(c, 0), b = in_(c, 1);
  int ra = node(c, a)->rank, rb = node(c, b)->rank;
  int nb = D->n_batch, nc = D->n_contract;
  int fa[TS_MAX_RANK], nfa = 0, fb[TS_MAX_RANK], nfb = 0;
  for (int j = 0; j < ra; j++)
    if (!in_list(D->lhs_batch, nb, j) && !in_list(D->lhs_contract, nc, j)) fa[nfa++] = j;
  for (int j = 0; j < rb; j++)
    if (!in_list(D->rhs_batch, nb, j) && !in_list(D->rhs_contract, nc, j)) fb[nfb++] = j;

  if (need[0]) { /* dot(dz, b) over b's free dims: (batch, a free, b contract sorted) */
    ts_dot_dims E = {.n_batch = nb, .n_contract = nfb};
    for (int k = 0; k < nb; k++) E.lhs_batch[k] = k, E.rhs_batch[k] = D->rhs_batch[k];
    for (int m = 0; m < nfb; m++) E.lhs_contract[m] = nb + nfa + m, E.rhs_contract[m] = fb[m];
    ts_tensor r = ts_dot_general(g, c->dz, b, &E);
    int perm[TS_MAX_RANK];
    for (int k = 0; k < nb; k++) perm[D->lhs_batch[k]] = k;
    for (int m = 0; m < nfa; m++) perm[fa[m]] = nb + m;
    for (int k = 0; k < nc; k++) perm[D->lhs_contract[k]] = nb + nfa + rank_in(D->rhs_contract, nc, D->rhs_contract[k]);
    out[0] = r == TS_NONE ? TS_NONE : transpose_unless_identity(g, r, ra, perm);
  }
  if (need[1]) { /* dot(a, dz) over a's free dims: (batch, a contract sorted, b free) */
    int perm[TS_MAX_RANK], swapped[TS_MAX_RANK];
    bool direct = true; /* dot(dz, a) gives b's dim order: (batch, b free, b contract) */
    for (int k = 0; k < nb; k++) perm[D->rhs_batch[k]] = swapped[D->rhs_batch[k]] = k;
    for (int k = 0; k < nc; k++) {
      int r = rank_in(D->lhs_contract, nc, D->lhs_contract[k]);
      perm[D->rhs_contract[k]] = nb + r;
      swapped[D->rhs_contract[k]] = nb + nfb + r;
    }
    for (int m = 0; m < nfb; m++) perm[fb[m]] = nb + nc + m, swapped[fb[m]] = nb + m;
    for (int j = 0; j < rb; j++) direct = direct && swapped[j] == j;
    ts_dot_dims E = {.n_batch = nb, .n_contract = nfa};
    ts_tensor r;
    if (direct) { /* e.g. a linear layer's weight (out, in): no transpose of the product */
      for (int k = 0; k < nb; k++) E.lhs_batch[k] = k, E.rhs_batch[k] = D->lhs_batch[k];
      for (int m = 0; m < nfa; m++) E.lhs_contract[m] = nb + m, E.rhs_contract[m] = fa[m];
      r = ts_dot_general(g, c->dz, a, &E);
    } else {
      for (int k = 0; k < nb; k++) E.lhs_batch[k] = D->lhs_batch[k], E.rhs_batch[k] = k;
      for (int m = 0; m < nfa; m++) E.lhs_contract[m] = fa[m], E.rhs_contract[m] = nb + m;
      r = ts_dot_general(g, a, c->dz, &E);
      if (r != TS_NONE) r = transpose_unless_identity(g, r, rb, perm);
    }
    out[1] = r;
  }
}

/* Convolution and its two backward ops are bilinear; with y = conv(x, w):
 *   conv:            dx = bwd_data(dy, w),   dw = bwd_filter(x, dy)
 *   z = bwd_data(dy, w):   d(dy) = conv(dz, w),  dw = bwd_filter(dz, dy)
 *   z = bwd_filter(x, dy): dx = bwd_data(dy, dz), d(dy) = conv(x, dz)
 * (each from <dy, conv(x, w)> = <bwd_data(dy, w), x> = <bwd_filter(x, dy), w>). */
static void conv_adjoint(const adj *c, const bool *need, ts_tensor *out) {
  ts_graph *g = c->g;
  const ts_conv_params *p = &c->n.attr.conv;
  ts_tensor u = in_(c, 0), v = in_(c, 1), dz = c->dz;
  int64_t us[TS_MAX_RANK], vs[TS_MAX_RANK];
  int ur = shape_of(c, u, us);
  shape_of(c, v, vs);
  switch (c->n.op) {
  case TS_OP_CONV: /* u = x, v = w */
    if (need[0]) out[0] = ir_conv_bwd_data(g, dz, v, p, ur, us);
    if (need[1]) out[1] = ir_conv_bwd_filter(g, u, dz, p, vs);
    break;
  case TS_OP_CONV_BWD_DATA: /* u = dy, v = w; z has x's shape */
    if (need[0]) out[0] = ts_conv2d(g, dz, v, p);
    if (need[1]) out[1] = ir_conv_bwd_filter(g, dz, u, p, vs);
    break;
  case TS_OP_CONV_BWD_FILTER: { /* u = x, v = dy; z has w's shape */
    if (need[0]) out[0] = ir_conv_bwd_data(g, v, dz, p, ur, us);
    if (need[1]) out[1] = ts_conv2d(g, u, dz, p);
    break;
  }
  default: break;
  }
}

/* ---- reductions ---- */

static ts_tensor reduce_adjoint(const adj *c) {
  ts_graph *g = c->g;
  const ts_attr *at = &c->n.attr;
  ts_tensor x = in_(c, 0);
  int64_t xs[TS_MAX_RANK];
  int xr = shape_of(c, x, xs);
  int kept[TS_MAX_RANK], nk = 0;
  int64_t count = 1;
  for (int d = 0; d < xr; d++) {
    if (in_list(at->dims, at->n_dims, d))
      count *= xs[d];
    else
      kept[nk++] = d;
  }
  ts_tensor bdz = ts_broadcast_in_dim(g, c->dz, xr, xs, kept); /* x's shape */
  switch (at->reduce) {
  case TS_REDUCE_SUM: return bdz;
  case TS_REDUCE_MEAN: return ts_div(g, bdz, scal(c, (double)count));
  case TS_REDUCE_MAX:
  case TS_REDUCE_MIN: {
    ts_tensor bz = ts_broadcast_in_dim(g, c->z, xr, xs, kept);
    return ts_select(g, ts_compare(g, x, bz, TS_CMP_EQ), bdz, scal(c, 0));
  }
  }
  return TS_NONE;
}

/* ---- the rule table ---- */

int ad_adjoint(ts_graph *g, ts_tensor z, ts_tensor dz, const bool *need, ts_tensor *contrib) {
  adj c = {.g = g, .z = z, .dz = dz, .n = g->nodes[z]};
  ts_op op = c.n.op;
  int rc = 0;
  ts_clear_error();
  /* Every op has a case and there is no default: a new op in ops.def fails
   * the build (-Werror=switch) until it has a rule here or says why not. */
  switch (op) {
  case TS_OP_NEG: case TS_OP_ABS: case TS_OP_EXP: case TS_OP_LOG: case TS_OP_LOG1P: case TS_OP_TANH:
  case TS_OP_SQRT: case TS_OP_RSQRT: case TS_OP_SIGMOID: case TS_OP_ERF: case TS_OP_GELU: case TS_OP_CONVERT:
    rc = unary(&c, contrib);
    break;
  case TS_OP_ADD: case TS_OP_SUB: case TS_OP_MUL: case TS_OP_DIV: case TS_OP_MAX: case TS_OP_MIN: case TS_OP_POW:
    rc = binary(&c, need, contrib);
    break;
  case TS_OP_SELECT: {
    ts_tensor p = in_(&c, 0), zero = scal(&c, 0);
    if (need[1]) contrib[1] = ts_select(g, p, dz, zero);
    if (need[2]) contrib[2] = ts_select(g, p, zero, dz);
    break;
  }
  case TS_OP_BROADCAST: contrib[0] = broadcast_adjoint(&c); break;
  case TS_OP_RESHAPE: {
    int64_t xs[TS_MAX_RANK];
    int xr = shape_of(&c, in_(&c, 0), xs);
    contrib[0] = ts_reshape(g, dz, xr, xs);
    break;
  }
  case TS_OP_TRANSPOSE: {
    int inv[TS_MAX_RANK];
    for (int i = 0; i < c.n.rank; i++) inv[c.n.attr.dims[i]] = i;
    contrib[0] = ts_transpose(g, dz, inv);
    break;
  }
  case TS_OP_SLICE: contrib[0] = slice_adjoint(&c); break;
  case TS_OP_PAD: contrib[0] = pad_adjoint(&c); break;
  case TS_OP_CONCAT: concat_adjoint(&c, need, contrib); break;
  case TS_OP_DOT: dot_adjoint(&c, need, contrib); break;
  case TS_OP_CONV:
  case TS_OP_CONV_BWD_DATA:
  case TS_OP_CONV_BWD_FILTER: conv_adjoint(&c, need, contrib); break;
  case TS_OP_MAXPOOL: contrib[0] = ir_maxpool_grad(g, in_(&c, 0), dz, &c.n.attr.pool); break;
  case TS_OP_MAXPOOL_GRAD:
    /* piecewise constant in x (no contribution); linear in dy, but the
     * transpose (gathering dz at each window's first maximum) has no op */
    if (need[1])
      rc = set_error("autodiff: node %%%d (max_pool2d_grad) has no adjoint with respect to its dy operand "
                        "(second derivatives through max pooling are not supported)",
                        z);
    break;
  case TS_OP_AVGPOOL: {
    int64_t xs[TS_MAX_RANK];
    shape_of(&c, in_(&c, 0), xs);
    contrib[0] = ir_avgpool_grad(g, dz, &c.n.attr.pool, xs);
    break;
  }
  case TS_OP_AVGPOOL_GRAD: contrib[0] = ts_avg_pool2d(g, dz, &c.n.attr.pool); break;
  case TS_OP_LAYERNORM: { /* dx and dgamma by the fused grad ops; dbeta: dz summed over the rows */
    double eps = c.n.attr.value;
    if (need[0]) contrib[0] = ir_layernorm_grad(g, in_(&c, 0), in_(&c, 1), dz, eps);
    if (need[1]) contrib[1] = ir_layernorm_dgamma(g, in_(&c, 0), dz, eps);
    if (need[2]) {
      int r = node(&c, dz)->rank, dims[TS_MAX_RANK];
      for (int d = 0; d < r - 1; d++) dims[d] = d;
      contrib[2] = ts_reduce(g, dz, TS_REDUCE_SUM, r - 1, dims, false);
    }
    break;
  }
  case TS_OP_LAYERNORM_GRAD: case TS_OP_LAYERNORM_DGAMMA:
    rc = set_error("autodiff: node %%%d (%s) has no adjoint (second derivatives through the fused layer norm are "
                   "not supported; use ts_layer_norm_decomposed)",
                   z, ir_op_name(c.n.op));
    break;
  case TS_OP_ATTENTION: contrib[0] = ir_attention_grad(g, in_(&c, 0), dz, c.n.attr.value); break;
  case TS_OP_ATTENTION_GRAD:
    rc = set_error("autodiff: node %%%d (causal_attention_grad) has no adjoint (second derivatives through the "
                   "fused attention are not supported; use ts_causal_attention_decomposed)",
                   z);
    break;
  case TS_OP_REDUCE: contrib[0] = reduce_adjoint(&c); break;
  case TS_OP_GATHER: { /* rows of dz added back into a zero table */
    int64_t ts[TS_MAX_RANK];
    ts_tensor table = in_(&c, 0);
    int tr = shape_of(&c, table, ts);
    contrib[0] = ts_scatter_add(g, ts_full(g, node(&c, table)->dtype, tr, ts, 0.0), in_(&c, 1), dz);
    break;
  }
  case TS_OP_SCATTER_ADD:
    if (need[0]) contrib[0] = dz;
    if (need[2]) contrib[2] = ts_gather(g, dz, in_(&c, 1));
    break;
  case TS_OP_FUSED:
    rc = set_error("autodiff: node %%%d is a fused node, which has no adjoint (fusion is a compiler pass: "
                      "differentiate the graph before compiling it)",
                      z);
    break;
  /* No adjoint by nature: leaves have no differentiable operand, COMPARE's
   * result is piecewise constant, and collectives only appear after
   * partitioning (differentiate the 1-device program instead). */
  case TS_OP_INPUT: case TS_OP_CONSTANT: case TS_OP_IOTA: case TS_OP_RNG_UNIFORM: case TS_OP_RNG_NORMAL:
  case TS_OP_ALL_REDUCE:
    /* A replica all-reduce (ts_replica_all_reduce: one group, id -1 = every
     * replica) of sum or mean is its own adjoint under DDP's convention:
     * each replica differentiates its own loss and the replicas' gradients
     * are then averaged, so d(mean_r L_r)/dx_r = mean over replicas of the
     * cotangents (SyncBatchNorm's backward all-reduce). */
    if (c.n.attr.coll && c.n.attr.coll->n == 1 && c.n.attr.coll->ids[0] < 0 &&
        (c.n.attr.reduce == TS_REDUCE_SUM || c.n.attr.reduce == TS_REDUCE_MEAN)) {
      if (!need[0]) break;
      ts_attr a = c.n.attr;
      a.coll = NULL, a.fused = NULL;
      ts_tensor t = ir_append(g, TS_OP_ALL_REDUCE, c.n.dtype, c.n.rank, c.n.shape, 1, &c.dz, &a);
      if (t == TS_NONE || ir_node_copy_owned(&g->nodes[t], &c.n) < 0) {
        rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "autodiff: out of memory (all-reduce adjoint)");
        break;
      }
      contrib[0] = t;
      break;
    }
    rc = set_error("autodiff: node %%%d (all_reduce) has no adjoint (only replica all-reduces of sum or mean do)", z);
    break;
  case TS_OP_COMPARE: case TS_OP_ALL_GATHER: case TS_OP_REDUCE_SCATTER:
  case TS_OP_ALL_TO_ALL: case TS_OP_COLLECTIVE_PERMUTE: case TS_OP_COUNT:
    rc = set_error("autodiff: node %%%d (%s) has no adjoint", z, ir_op_name(op));
    break;
  }
  if (rc != 0) return rc;
  /* A builder failed (it set a message and returned TS_NONE): say which rule. */
  for (int j = 0; j < c.n.n_in; j++) {
    if (need[j] && contrib[j] == TS_NONE && ts_last_error()[0]) {
      return set_error_context("autodiff: building the gradient of node %%%d (%s) for operand %d failed", z,
                                  ir_op_name(op), j);
    }
  }
  return 0;
}
