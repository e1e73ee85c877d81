/* bn_adjoint.c — train-mode batch norm differentiated in closed form.
 *
 * ts_batch_norm_train (ir/composites.c) builds, over every dim but the
 * channel axis a (1, or the last dim for channels-last activations; D, n
 * values per channel):
 *   m = mean_D(x), xc = x - B(m), v = mean_D(xc * xc), inv = rsqrt(v + eps),
 *   y = xc * B(inv) * B(gamma) + B(beta)           (B: broadcast along dim a)
 * Differentiating those nodes one by one costs some 16 full-size passes
 * (the variance's and the mean's paths each add a pass and a reduction). At
 * y's add node autodiff instead asks bn_adjoint for the closed form (PyTorch's
 * native_batch_norm_backward, in the centred form: no cancellation):
 *   dbeta = sum_D(dy), p = sum_D(dy * xc), dgamma = p * inv,
 *   dx = (dy - B(dbeta / n) - xc * B(p / n * inv * inv)) * B(inv * gamma)
 * two reductions that read dy and xc, and one pass for dx. The sums are
 * ordinary REDUCE nodes, so under SPMD the partitioner all-reduces them like
 * any other (global batch statistics).
 *
 * Matched only when nothing else sends a cotangent into the pattern's inner
 * nodes (m, xc, v, inv and the products): the closed form accounts for every
 * path from x through them to y. Otherwise autodiff goes node by node. */
#include <string.h>

#include "ad/ad.h"

enum { BN_MAX_INNER = 16 };

typedef struct {
  ts_tensor x, gamma, beta, xc, inv, m, ve; /* ve = v + eps */
  int axis; /* the channel dim (taken from beta's broadcast) */
  int n_inner;
  ts_tensor inner[BN_MAX_INNER]; /* nodes whose only cotangents come from y */
} bn_match;

/* t is broadcast(v) along dim a (>= 1) of a rank-r result, v rank 1; returns
 * v. a < 0: any such dim, stored in *a. */
static ts_tensor per_channel_src(const ts_graph *g, ts_tensor t, int r, int *a) {
  const ts_node *n = &g->nodes[t];
  if (n->op != TS_OP_BROADCAST || n->rank != r || n->attr.n_dims != 1 || n->attr.dims[0] < 1) return TS_NONE;
  if (*a < 0) *a = n->attr.dims[0];
  if (n->attr.dims[0] != *a) return TS_NONE;
  const ts_node *v = &g->nodes[n->in[0]];
  return v->rank == 1 && v->shape[0] == n->shape[*a] && v->dtype == n->dtype ? n->in[0] : TS_NONE;
}

/* The mean over every dim of x but a. */
static bool channel_mean(const ts_graph *g, ts_tensor t, ts_tensor x, int a) {
  const ts_node *n = &g->nodes[t], *xn = &g->nodes[x];
  if (n->op != TS_OP_REDUCE || n->in[0] != x || n->attr.reduce != TS_REDUCE_MEAN || n->attr.n_dims != xn->rank - 1)
    return false;
  for (int i = 0, d = 0; d < xn->rank; d++)
    if (d != a && n->attr.dims[i++] != d) return false;
  return true;
}

static void add_inner(bn_match *mt, ts_tensor t) { mt->inner[mt->n_inner++] = t; }

/* y = add(mul(mul(xc, B(inv)), B(gamma)), B(beta)) as composites.c builds it. */
static bool match(const ts_graph *g, ts_tensor y, bn_match *mt) {
  memset(mt, 0, sizeof *mt);
  const ts_node *yn = &g->nodes[y];
  int r = yn->rank;
  if (yn->op != TS_OP_ADD || r < 2 || !ts_dtype_is_float(yn->dtype)) return false;
  ts_tensor yg = yn->in[0], bb = yn->in[1];
  mt->axis = -1;
  if ((mt->beta = per_channel_src(g, bb, r, &mt->axis)) == TS_NONE) return false;
  const ts_node *ygn = &g->nodes[yg];
  if (ygn->op != TS_OP_MUL || (mt->gamma = per_channel_src(g, ygn->in[1], r, &mt->axis)) == TS_NONE) return false;
  ts_tensor xhat = ygn->in[0];
  const ts_node *xh = &g->nodes[xhat];
  if (xh->op != TS_OP_MUL || (mt->inv = per_channel_src(g, xh->in[1], r, &mt->axis)) == TS_NONE) return false;
  mt->xc = xh->in[0];
  const ts_node *xcn = &g->nodes[mt->xc];
  if (xcn->op != TS_OP_SUB || (mt->m = per_channel_src(g, xcn->in[1], r, &mt->axis)) == TS_NONE) return false;
  mt->x = xcn->in[0];
  if (!channel_mean(g, mt->m, mt->x, mt->axis)) return false;
  const ts_node *inv = &g->nodes[mt->inv];
  if (inv->op != TS_OP_RSQRT) return false;
  mt->ve = inv->in[0];
  const ts_node *ve = &g->nodes[mt->ve];
  if (ve->op != TS_OP_ADD) return false;
  ts_tensor v = ve->in[0];
  const ts_node *vn = &g->nodes[v];
  if (!channel_mean(g, v, vn->in[0], mt->axis)) return false;
  const ts_node *sq = &g->nodes[vn->in[0]];
  if (sq->op != TS_OP_MUL || sq->in[0] != mt->xc || sq->in[1] != mt->xc) return false;
  ts_tensor list[] = {yg, bb, ygn->in[1], xhat, xh->in[1], mt->xc, xcn->in[1], mt->m, mt->inv, inv->in[0], v,
                      vn->in[0]};
  for (size_t k = 0; k < sizeof list / sizeof *list; k++) add_inner(mt, list[k]);
  return true;
}

static bool is_inner(const bn_match *mt, ts_tensor t) {
  for (int k = 0; k < mt->n_inner; k++)
    if (mt->inner[k] == t) return true;
  return false;
}

/* Every node outside the pattern that reads an inner node comes after y and
 * sent no cotangent (autodiff has processed it: reverse order), and no inner
 * node holds a cotangent yet (e.g. as an output of ts_vjp). The eps operand
 * of v + eps carries no gradient. */
static bool closed(const ts_graph *g, ts_tensor y, const bn_match *mt, const ts_tensor *cot, int n_nodes,
                   const bool *dep) {
  for (int k = 0; k < mt->n_inner; k++)
    if (cot[mt->inner[k]] != TS_NONE) return false;
  if (dep[g->nodes[mt->ve].in[1]]) return false; /* v + eps: eps */
  int lo = mt->m;
  for (int k = 0; k < mt->n_inner; k++) lo = mt->inner[k] < lo ? mt->inner[k] : lo;
  for (int u = lo + 1; u < n_nodes; u++) {
    if (u == y || is_inner(mt, u)) continue;
    const ts_node *un = &g->nodes[u];
    for (int k = 0; k < un->n_in; k++)
      if (is_inner(mt, un->in[k]) && (u < y || cot[u] != TS_NONE)) return false;
  }
  return true;
}

/* B(v) along dim a of x's shape. */
static ts_tensor bc(ts_graph *g, ts_tensor v, ts_tensor x, int a) {
  const ts_node *xn = &g->nodes[x];
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, xn->shape, sizeof shape);
  return ts_broadcast_in_dim(g, v, xn->rank, shape, &a);
}

int ad_batch_norm_adjoint(ts_graph *g, ts_tensor y, const ts_tensor *cot, int n_nodes, const bool *dep,
                          ts_tensor to[3], ts_tensor contrib[3]) {
  bn_match mt;
  if (!match(g, y, &mt) || !closed(g, y, &mt, cot, n_nodes, dep)) return 0;
  ts_tensor dy = cot[y];
  const ts_node *mn = &g->nodes[mt.m];
  int nd = mn->attr.n_dims, dims[TS_MAX_RANK];
  memcpy(dims, mn->attr.dims, sizeof dims);
  ts_dtype dt = g->nodes[y].dtype;
  double n = (double)ts_tensor_numel(g, mt.x) / (double)ts_tensor_numel(g, mt.inv);
  to[0] = mt.x, to[1] = mt.gamma, to[2] = mt.beta;
  contrib[0] = contrib[1] = contrib[2] = TS_NONE;
  ts_tensor sdy = ts_reduce(g, dy, TS_REDUCE_SUM, nd, dims, false);              // (C) = dbeta
  ts_tensor p = ts_reduce(g, ts_mul(g, dy, mt.xc), TS_REDUCE_SUM, nd, dims, false); // (C)
  if (dep[mt.beta]) contrib[2] = sdy;
  if (dep[mt.gamma]) contrib[1] = ts_mul(g, p, mt.inv);
  if (dep[mt.x]) {
    ts_tensor nn = ts_scalar(g, dt, n);
    ts_tensor a = ts_div(g, sdy, nn);                                         // mean(dy)
    ts_tensor b = ts_mul(g, ts_div(g, p, nn), ts_mul(g, mt.inv, mt.inv));     // mean(dy * xc) * inv^2
    ts_tensor k = ts_mul(g, mt.inv, mt.gamma);
    ts_tensor t = ts_sub(g, ts_sub(g, dy, bc(g, a, mt.x, mt.axis)), ts_mul(g, mt.xc, bc(g, b, mt.x, mt.axis)));
    contrib[0] = ts_mul(g, t, bc(g, k, mt.x, mt.axis));
  }
  for (int j = 0; j < 3; j++)
    if (contrib[j] == TS_NONE && dep[to[j]])
      return set_error_context("autodiff: building batch norm's gradient at node %%%d failed", y);
  return 1;
}
