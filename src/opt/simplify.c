/* simplify.c — removes identity ops: same-dtype converts, same-shape reshapes
 * and broadcasts, reshape of reshape, identity transposes, full slices, zero
 * pads, x*1 / x+0 / x-0 / x/1 with splat constants, neg(neg x); and folds
 * the transpose of a matrix product into the product (A^T B)^T = B^T A, the
 * weight gradient of a linear layer. Rules look at the NEW graph's
 * operands, so rewrites compose along chains. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h"

static bool same_shape(const ts_node *a, const ts_node *b) {
  return a->rank == b->rank && memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) == 0;
}

static bool is_splat(const ts_graph *g, ts_tensor t, double v) {
  double x;
  return opt_splat_value(g, t, &x) && x == v;
}

typedef struct {
  int changed;
  opt_users users; /* of src */
} simplify_ctx;

/* transpose(dot(a, b)) of matrices, the dot used only there: dot(b, a) with
 * the contracting dims swapped (no copy of the product). TS_NONE if not. */
static ts_tensor fold_transposed_dot(ts_graph *dst, const ts_graph *src, const ts_node *t, const int32_t *map,
                                     const simplify_ctx *c) {
  int d = t->in[0];
  const ts_node *dot = &src->nodes[d];
  if (dot->op != TS_OP_DOT || t->rank != 2 || t->attr.dims[0] != 1 || dot->attr.dot.n_batch ||
      dot->attr.dot.n_contract != 1 || src->nodes[dot->in[0]].rank != 2 || src->nodes[dot->in[1]].rank != 2 ||
      c->users.off[d + 1] - c->users.off[d] != 1 || c->users.n_out[d])
    return TS_NONE;
  ts_attr a = dot->attr;
  a.dot.lhs_contract[0] = dot->attr.dot.rhs_contract[0];
  a.dot.rhs_contract[0] = dot->attr.dot.lhs_contract[0];
  int32_t in[2] = {map[dot->in[1]], map[dot->in[0]]};
  return ir_append(dst, TS_OP_DOT, t->dtype, 2, t->shape, 2, in, &a);
}

/* Returns the node of dst that replaces src node id, or OPT_KEEP. */
static ts_tensor simplify_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  simplify_ctx *ctx = user;
  int *changed = &ctx->changed;
  const ts_node *n = &src->nodes[id];
  if (n->n_in < 1) return OPT_KEEP;
  ts_tensor a = map[n->in[0]];
  const ts_node *na = &dst->nodes[a];
  ts_tensor r = OPT_KEEP;
  switch (n->op) {
  case TS_OP_CONVERT:
    if (na->dtype == n->dtype) r = a;
    break;
  case TS_OP_RESHAPE:
    while (dst->nodes[a].op == TS_OP_RESHAPE) a = dst->nodes[a].in[0]; /* reshape of reshape */
    na = &dst->nodes[a];
    if (same_shape(na, n) && na->dtype == n->dtype) {
      r = a;
    } else if (a != map[n->in[0]]) {
      r = ir_append(dst, TS_OP_RESHAPE, n->dtype, n->rank, n->shape, 1, &a, &n->attr);
    }
    break;
  case TS_OP_BROADCAST:
    if (same_shape(na, n)) r = a;
    break;
  case TS_OP_TRANSPOSE: {
    bool ident = true;
    for (int i = 0; i < n->attr.n_dims; i++) ident = ident && n->attr.dims[i] == i;
    if (ident) r = a;
    else if ((a = fold_transposed_dot(dst, src, n, map, ctx)) != TS_NONE) r = a;
    break;
  }
  case TS_OP_SLICE: {
    bool full = same_shape(na, n);
    for (int i = 0; i < n->rank && full; i++)
      full = n->attr.start[i] == 0 && (n->attr.stride[i] == 1 || n->shape[i] <= 1);
    if (full) r = a;
    break;
  }
  case TS_OP_PAD:
    if (same_shape(na, n)) r = a;
    break;
  case TS_OP_NEG:
    if (na->op == TS_OP_NEG) r = na->in[0];
    break;
  case TS_OP_ADD:
  case TS_OP_SUB:
  case TS_OP_MUL:
  case TS_OP_DIV: {
    ts_tensor b = map[n->in[1]];
    double unit = (n->op == TS_OP_MUL || n->op == TS_OP_DIV) ? 1.0 : 0.0;
    if (is_splat(dst, b, unit) && same_shape(na, n) && na->dtype == n->dtype) r = a;
    else if ((n->op == TS_OP_ADD || n->op == TS_OP_MUL) && is_splat(dst, a, unit) &&
             same_shape(&dst->nodes[b], n) && dst->nodes[b].dtype == n->dtype)
      r = b;
    break;
  }
  default:
    break;
  }
  if (r != OPT_KEEP) ++*changed;
  return r;
}

ts_graph *opt_simplify(const ts_graph *g, int *changed) {
  simplify_ctx ctx = {0};
  if (opt_users_build(g, &ctx.users) < 0) return NULL;
  ts_graph *out = opt_rebuild(g, simplify_node, &ctx, NULL);
  opt_users_free(&ctx.users);
  if (changed) *changed = ctx.changed;
  return out;
}
