/* bn_pattern.c — the node structure of train-mode batch norm, in one place.
 *
 * ts_batch_norm_train_axis (composites.c) builds, over every dim but the
 * channel axis a (B: broadcast of a (C) vector along dim a):
 *   m = mean(x), xc = x - B(m), v = mean(xc * xc), inv = rsqrt(v + eps),
 *   y = xc * B(inv) * B(gamma) + B(beta)
 * and ad/bn_adjoint.c builds its input gradient in closed form with
 * ir_bn_input_grad:
 *   dx = (dy - B(a) - xc * B(b)) * B(k)
 * Two passes recognise these shapes: autodiff (to differentiate y in closed
 * form) and bf16 autocast (opt/autocast.c: y and dx are what PyTorch's
 * autocast stores in bf16). Both match here, against the builders' exact
 * node order, so a change of the builders changes one matcher. */
#include <string.h>

#include "ir/ir.h"

/* t is broadcast(v) along dim a (>= 1) of a rank-r result, v rank 1 of t's
 * dtype; returns v. *a < 0: any such dim, stored in *a. */
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

/* xc = x - B(mean(x)) along dim *a: returns x (and the mean in *m), or TS_NONE. */
static ts_tensor centred(const ts_graph *g, ts_tensor xc, int *a, ts_tensor *m) {
  const ts_node *n = &g->nodes[xc];
  if (n->op != TS_OP_SUB || n->n_in != 2) return TS_NONE;
  *m = per_channel_src(g, n->in[1], n->rank, a);
  return *m != TS_NONE && channel_mean(g, *m, n->in[0], *a) ? n->in[0] : TS_NONE;
}

/* op(u, B(v)) along dim *a: returns u (and v in *v), or TS_NONE. */
static ts_tensor scaled(const ts_graph *g, ts_tensor t, ts_op op, int *a, ts_tensor *v) {
  const ts_node *n = &g->nodes[t];
  if (n->op != op || n->n_in != 2) return TS_NONE;
  *v = per_channel_src(g, n->in[1], n->rank, a);
  return *v != TS_NONE ? n->in[0] : TS_NONE;
}

bool ir_bn_match(const ts_graph *g, ts_tensor y, ir_bn *mt) {
  memset(mt, 0, sizeof *mt);
  const ts_node *yn = &g->nodes[y];
  if (yn->op != TS_OP_ADD || yn->rank < 2 || !ts_dtype_is_float(yn->dtype)) return false;
  mt->axis = -1;
  ts_tensor yg = scaled(g, y, TS_OP_ADD, &mt->axis, &mt->beta);
  ts_tensor xhat = yg == TS_NONE ? TS_NONE : scaled(g, yg, TS_OP_MUL, &mt->axis, &mt->gamma);
  mt->xc = xhat == TS_NONE ? TS_NONE : scaled(g, xhat, TS_OP_MUL, &mt->axis, &mt->inv);
  mt->x = mt->xc == TS_NONE ? TS_NONE : centred(g, mt->xc, &mt->axis, &mt->m);
  if (mt->x == TS_NONE || g->nodes[mt->inv].op != TS_OP_RSQRT) return false;
  mt->ve = g->nodes[mt->inv].in[0];
  const ts_node *ve = &g->nodes[mt->ve];
  if (ve->op != TS_OP_ADD) return false;
  ts_tensor v = ve->in[0];
  const ts_node *vn = &g->nodes[v];
  if (!channel_mean(g, v, vn->in[0], mt->axis)) return false;
  const ts_node *sq = &g->nodes[vn->in[0]];
  if (sq->op != TS_OP_MUL || sq->in[0] != mt->xc || sq->in[1] != mt->xc) return false;
  const ts_node *xhn = &g->nodes[xhat], *ygn = &g->nodes[yg];
  ts_tensor inner[] = {yg, yn->in[1], ygn->in[1], xhat, xhn->in[1], mt->xc, g->nodes[mt->xc].in[1], mt->m, mt->inv,
                       mt->ve, v, vn->in[0]};
  mt->n_inner = (int)(sizeof inner / sizeof *inner);
  memcpy(mt->inner, inner, sizeof inner);
  return true;
}

/* B(v) along dim a of x's shape. */
static ts_tensor bc(ts_graph *g, ts_tensor v, ts_tensor x, int a) {
  const ts_node *xn = &g->nodes[x];
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, xn->shape, sizeof shape);
  return ts_broadcast_in_dim(g, v, xn->rank, shape, &a);
}

ts_tensor ir_bn_input_grad(ts_graph *g, const ir_bn *mt, ts_tensor dy, ts_tensor a, ts_tensor b, ts_tensor k) {
  ts_tensor t = ts_sub(g, ts_sub(g, dy, bc(g, a, mt->x, mt->axis)), ts_mul(g, mt->xc, bc(g, b, mt->x, mt->axis)));
  return ts_mul(g, t, bc(g, k, mt->x, mt->axis));
}

ts_tensor ir_bn_input_grad_source(const ts_graph *g, ts_tensor dx) {
  int axis = -1;
  ts_tensor v, m, t = scaled(g, dx, TS_OP_MUL, &axis, &v);
  if (t == TS_NONE || g->nodes[t].op != TS_OP_SUB || g->nodes[t].n_in != 2) return TS_NONE;
  if (scaled(g, g->nodes[t].in[0], TS_OP_SUB, &axis, &v) == TS_NONE) return TS_NONE;
  ts_tensor xc = scaled(g, g->nodes[t].in[1], TS_OP_MUL, &axis, &v);
  return xc == TS_NONE ? TS_NONE : centred(g, xc, &axis, &m);
}
