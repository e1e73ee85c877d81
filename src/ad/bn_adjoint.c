/* bn_adjoint.c — train-mode batch norm differentiated in closed form.
 *
 * ts_batch_norm_train (ir/composites.c; its structure is matched and the
 * closed form's dx built in ir/bn_pattern.c) builds, over every dim but the
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

static bool is_inner(const ir_bn *mt, ts_tensor t) {
  for (int k = 0; k < mt->n_inner; k++)
    if (mt->inner[k] == t) return true;
  return false;
}

/* Every node outside the pattern that reads an inner node comes after y and
 * sent no cotangent (autodiff has processed it: reverse order), and no inner
 * node holds a cotangent yet (e.g. as an output of ts_vjp). The eps operand
 * of v + eps carries no gradient. */
static bool closed(const ts_graph *g, ts_tensor y, const ir_bn *mt, const ts_tensor *cot, int n_nodes,
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

int ad_batch_norm_adjoint(ts_graph *g, ts_tensor y, const ts_tensor *cot, int n_nodes, const bool *dep,
                          ts_tensor to[3], ts_tensor contrib[3]) {
  ir_bn mt;
  if (!ir_bn_match(g, y, &mt) || !closed(g, y, &mt, cot, n_nodes, dep)) return 0;
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
    contrib[0] = ir_bn_input_grad(g, &mt, dy, a, b, ts_mul(g, mt.inv, mt.gamma));
  }
  for (int j = 0; j < 3; j++)
    if (contrib[j] == TS_NONE && dep[to[j]])
      return set_error_context("autodiff: building batch norm's gradient at node %%%d failed", y);
  return 1;
}
