/* simplify.c — removes identity ops: same-dtype converts, same-shape reshapes
 * and broadcasts, reshape of reshape, identity transposes, full slices, zero
 * pads, x*1 / x+0 / x-0 / x/1 with splat constants, neg(neg x). Rules look at
 * the NEW graph's operands, so rewrites compose along chains. */
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

/* Returns the node of dst that replaces src node id, or OPT_KEEP. */
static ts_tensor simplify_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  int *changed = user;
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
  int count = 0;
  ts_graph *out = opt_rebuild(g, simplify_node, &count, NULL);
  if (changed) *changed = count;
  return out;
}
