/* autodiff.c — reverse-mode autodiff as a graph rewrite (ts_grad, ts_vjp).
 *
 * Walks the nodes that depend on a wrt tensor in reverse creation order (a
 * reverse topological order), asks each for the cotangents of its operands
 * (adjoints.c) and sums the contributions a node receives with add nodes. The
 * gradient nodes are appended to the same graph, so they can be outputs, feed
 * an optimizer, or be differentiated again. Every contribution is checked to
 * have its operand's dtype and shape: a wrong adjoint rule is reported at
 * graph-build time, not as garbage at run time. */
#include <stdlib.h>
#include <string.h>

#include "ad/ad.h"            /* ad_adjoint, ad_operand_differentiable */
#include "tessel/autodiff.h"  /* ts_grad, ts_vjp */

static bool same_type(const ts_node *a, const ts_node *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

/* t is scatter_add(0, idx, upd) (a gather's adjoint: rows added into a
 * zero table). */
static bool zero_scatter(const ts_graph *g, ts_tensor t) {
  const ts_node *n = &g->nodes[t], *b = n->op == TS_OP_SCATTER_ADD ? &g->nodes[n->in[0]] : NULL;
  return b && b->op == TS_OP_CONSTANT && !b->data && b->attr.value == 0;
}

/* No node and no output uses t. */
static bool unused(const ts_graph *g, ts_tensor t) {
  for (int i = t + 1; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == t) return false;
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == t) return false;
  return true;
}

/* cot[t] += c (the first contribution is stored as is). A gather's
 * contribution c = scatter_add(0, idx, upd) that nothing uses yet becomes scatter_add(cot[t], idx, upd) in place (cot[t] is older, so
 * the order stays topological): one pass less, and under SPMD the two
 * partial sums over the batch (a tied embedding's lookup and head) are added
 * before their one all-reduce (spmd/partition.c lower_scatter_add). */
static int accumulate(ts_graph *g, ts_tensor *cot, ts_tensor t, ts_tensor c) {
  if (cot[t] == TS_NONE) {
    cot[t] = c;
    return 0;
  }
  ts_tensor s;
  if (c > cot[t] && zero_scatter(g, c) && same_type(&g->nodes[cot[t]], &g->nodes[c]) && unused(g, c)) {
    g->nodes[c].in[0] = cot[t];
    cot[t] = c;
    return 0;
  }
  s = ts_add(g, cot[t], c);
  if (s == TS_NONE) return -1;
  cot[t] = s;
  return 0;
}

/* dep[i]: node i is float and is a wrt or depends on one through an operand
 * that carries gradients. Nodes are in topological order, so one forward
 * sweep suffices. */
static void mark_dependents(const ts_graph *g, int n_nodes, int n, const ts_tensor *wrt, bool *dep) {
  for (int i = 0; i < n; i++) dep[wrt[i]] = true;
  for (int i = 0; i < n_nodes; i++) {
    const ts_node *nd = &g->nodes[i];
    if (dep[i] || !ts_dtype_is_float(nd->dtype)) continue;
    for (int j = 0; j < nd->n_in && !dep[i]; j++)
      if (dep[nd->in[j]] && ad_operand_differentiable(nd, j)) dep[i] = true;
  }
}

/* Checks contribution c to node t's cotangent (from node i) and adds it. */
static int contribute(ts_graph *g, ts_tensor *cot, int i, ts_tensor t, ts_tensor c) {
  const ts_node *src = &g->nodes[t], *gr = &g->nodes[c];
  if (!same_type(src, gr)) {
    char b1[96], b2[96];
    return set_error("autodiff: gradient of node %%%d (%s) coming from node %%%d (%s) has shape %s but the node is %s",
                     t, ir_op_name(src->op), i, ir_op_name(g->nodes[i].op), ir_shape_str(gr, b1, sizeof b1),
                     ir_shape_str(src, b2, sizeof b2));
  }
  return accumulate(g, cot, t, c);
}

/* Applies node i's adjoint rule and accumulates what its operands receive
 * (train-mode batch norm's output: its closed form, bn_adjoint.c). */
static int backprop_node(ts_graph *g, int i, const bool *dep, ts_tensor *cot, int n_nodes) {
  const ts_node *nd = &g->nodes[i];
  int n_in = nd->n_in;
  if (n_in == 0 || !dep[i]) return 0;
  ts_tensor bn_to[3], bn_c[3];
  int bn = ad_batch_norm_adjoint(g, i, cot, n_nodes, dep, bn_to, bn_c);
  if (bn != 0) {
    for (int j = 0; j < 3 && bn > 0; j++)
      if (bn_c[j] != TS_NONE && contribute(g, cot, i, bn_to[j], bn_c[j]) < 0) return -1;
    return bn < 0 ? -1 : 0;
  }
  nd = &g->nodes[i];
  bool need_buf[AD_MAX_OPERANDS];
  ts_tensor contrib_buf[AD_MAX_OPERANDS];
  bool *need = need_buf;
  ts_tensor *contrib = contrib_buf;
  if (n_in > AD_MAX_OPERANDS) { /* concatenate */
    need = malloc((size_t)n_in * sizeof *need);
    contrib = malloc((size_t)n_in * sizeof *contrib);
    if (!need || !contrib) {
      free(need);
      free(contrib);
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "autodiff: out of memory at node %%%d", i);
    }
  }
  int32_t *in = nd->in; /* stays valid: appending nodes moves the node array, not operand lists */
  bool any = false;
  for (int j = 0; j < n_in; j++) {
    need[j] = dep[in[j]] && ad_operand_differentiable(nd, j);
    contrib[j] = TS_NONE;
    any |= need[j];
  }
  int rc = 0;
  if (any) rc = ad_adjoint(g, i, cot[i], need, contrib);
  for (int j = 0; j < n_in && rc == 0; j++) {
    if (contrib[j] == TS_NONE) continue;
    rc = contribute(g, cot, i, in[j], contrib[j]);
  }
  if (need != need_buf) {
    free(need);
    free(contrib);
  }
  return rc;
}

int ts_vjp(ts_graph *g, int n_out, const ts_tensor *outs, const ts_tensor *cotangents, int n,
           const ts_tensor *wrt, ts_tensor *grads) {
  char b1[96], b2[96];
  if (!g) return set_error("ts_vjp: graph is NULL");
  if (n_out < 1 || n < 0 || (n > 0 && (!wrt || !grads)) || !outs || !cotangents)
    return set_error("ts_vjp: need at least one output with a cotangent (got n_out = %d) and n >= 0 wrt tensors (got %d)",
                        n_out, n);
  for (int i = 0; i < n; i++) grads[i] = TS_NONE;
  for (int k = 0; k < n_out; k++) {
    if (!ir_check_tensor(g, outs[k], "ts_vjp (output)") || !ir_check_tensor(g, cotangents[k], "ts_vjp (cotangent)"))
      return -1;
    const ts_node *o = &g->nodes[outs[k]], *c = &g->nodes[cotangents[k]];
    if (!ts_dtype_is_float(o->dtype))
      return set_error("ts_vjp: output %d (node %%%d, %s) is %s; only float tensors have gradients", k, outs[k],
                          ir_op_name(o->op), ir_shape_str(o, b1, sizeof b1));
    if (!same_type(o, c))
      return set_error("ts_vjp: cotangent %d (node %%%d) is %s but output %d (node %%%d) is %s", k,
                          cotangents[k], ir_shape_str(c, b1, sizeof b1), k, outs[k], ir_shape_str(o, b2, sizeof b2));
  }
  for (int i = 0; i < n; i++) {
    if (!ir_check_tensor(g, wrt[i], "ts_vjp (wrt)")) return -1;
    const ts_node *w = &g->nodes[wrt[i]];
    if (!ts_dtype_is_float(w->dtype))
      return set_error("autodiff: wrt[%d] (node %%%d, %s) is %s; only float tensors have gradients", i, wrt[i],
                          ir_op_name(w->op), ir_shape_str(w, b1, sizeof b1));
  }

  /* Only nodes up to the last output can lie on a path from a wrt to an output. */
  int n_nodes = 0;
  for (int k = 0; k < n_out; k++)
    if (outs[k] + 1 > n_nodes) n_nodes = outs[k] + 1;
  for (int i = 0; i < n; i++)
    if (wrt[i] + 1 > n_nodes) n_nodes = wrt[i] + 1;
  bool *dep = calloc((size_t)n_nodes, sizeof *dep);
  ts_tensor *cot = malloc((size_t)n_nodes * sizeof *cot);
  if (!dep || !cot) {
    free(dep);
    free(cot);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_vjp: out of memory for %d nodes", n_nodes);
  }
  for (int i = 0; i < n_nodes; i++) cot[i] = TS_NONE;
  mark_dependents(g, n_nodes, n, wrt, dep);

  int rc = 0;
  for (int k = 0; k < n_out && rc == 0; k++)
    if (dep[outs[k]]) rc = accumulate(g, cot, outs[k], cotangents[k]);
  /* Reverse creation order: every user of node i (id > i) has already sent
   * its contribution when i is reached. */
  for (int i = n_nodes - 1; i >= 0 && rc == 0; i--)
    if (cot[i] != TS_NONE) rc = backprop_node(g, i, dep, cot, n_nodes);

  for (int i = 0; i < n && rc == 0; i++) {
    ts_tensor w = wrt[i];
    if (cot[w] != TS_NONE) {
      grads[i] = cot[w];
    } else { /* the outputs do not depend on this wrt: its gradient is zero */
      const ts_node *wn = &g->nodes[w];
      int64_t shape[TS_MAX_RANK];
      int rank = wn->rank;
      memcpy(shape, wn->shape, sizeof shape);
      grads[i] = ts_full(g, wn->dtype, rank, shape, 0.0);
      if (grads[i] == TS_NONE) rc = -1;
    }
  }
  free(dep);
  free(cot);
  if (rc != 0)
    for (int i = 0; i < n; i++) grads[i] = TS_NONE;
  return rc;
}

int ts_grad(ts_graph *g, ts_tensor loss, int n, const ts_tensor *wrt, ts_tensor *grads) {
  if (!ir_check_tensor(g, loss, "ts_grad (loss)")) return -1;
  const ts_node *l = &g->nodes[loss];
  if (!ts_dtype_is_float(l->dtype) || l->rank != 0) {
    char b[96];
    return set_error("ts_grad: the loss must be a float scalar but node %%%d (%s) is %s%s", loss,
                        ir_op_name(l->op), ir_shape_str(l, b, sizeof b),
                        l->rank != 0 ? " (reduce it, e.g. with ts_mean_all)" : "");
  }
  ts_tensor one = ts_scalar(g, l->dtype, 1.0);
  if (one == TS_NONE) return -1;
  return ts_vjp(g, 1, &loss, &one, n, wrt, grads);
}
