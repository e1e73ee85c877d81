/* optim.c — optimizer updates as graph nodes: SGD (momentum, Nesterov, L2
 * weight decay) and AdamW, with PyTorch's torch.optim semantics step for
 * step. Each new parameter and state value becomes a graph output aliased to
 * its input, so one execute of the training step updates everything in place.
 *
 * State lives in the parameter set as non-trainable, zero-initialized
 * parameters named after PyTorch's optimizer state keys:
 * "<name>.momentum_buffer", "<name>.exp_avg", "<name>.exp_avg_sq". */
#include <stdio.h>

#include "util/error.h"
#include "tessel/nn.h"

/* The optimizer state tensor "<param>.<suffix>", zeros, shaped like the param. */
static ts_tensor optim_state(ts_nn *m, const char *param, const char *suffix, ts_tensor like) {
  char name[512];
  if ((size_t)snprintf(name, sizeof name, "%s.%s", param, suffix) >= sizeof name) {
    set_error("optimizer: parameter name '%s' is too long", param);
    return TS_NONE;
  }
  int64_t shape[TS_MAX_RANK]; /* copied: ts_tensor_shape is invalidated by new nodes */
  int rank = ts_tensor_rank(m->g, like);
  for (int d = 0; d < rank; d++) shape[d] = ts_tensor_shape(m->g, like)[d];
  return ts_params_use(m->p, m->g, name, ts_tensor_dtype(m->g, like), rank, shape,
                       (ts_init){TS_INIT_ZEROS, 0, 0}, false);
}

/* Adds value as an output written into input `into`; with a mask `keep`
 * (rank-0 bool, or TS_NONE) the output is select(keep, value, into). */
static int optim_write(ts_graph *g, ts_tensor into, ts_tensor value, ts_tensor keep) {
  if (value == TS_NONE) return -1;
  if (keep != TS_NONE && (value = ts_select(g, keep, value, into)) == TS_NONE) return -1;
  int o = ts_graph_add_output(g, value);
  if (o < 0) return -1;
  return ts_graph_alias_output(g, o, into);
}

/* True when t is a rank-0 float tensor of g (else sets the error). */
static bool optim_scalar_ok(ts_graph *g, ts_tensor t, const char *what) {
  if (t == TS_NONE || t < 0 || t >= ts_graph_num_nodes(g) || ts_tensor_rank(g, t) != 0 ||
      !ts_dtype_is_float(ts_tensor_dtype(g, t))) {
    set_error("optimizer: %s must be a rank-0 float tensor (tensor %d)", what, t);
    return false;
  }
  return true;
}

/* Checks params[i] / grads[i] and returns the parameter's name, or NULL. */
static const char *optim_check(ts_nn *m, int i, ts_tensor p, ts_tensor gr) {
  ts_graph *g = m->g;
  int nn = ts_graph_num_nodes(g);
  if (p < 0 || p >= nn) {
    set_error("optimizer: params[%d] is not a node of the graph (%d)", i, p);
    return NULL;
  }
  const char *name = ts_input_name(g, p);
  if (!name) {
    set_error("optimizer: params[%d] (node %d) is not a parameter input", i, p);
    return NULL;
  }
  int k = ts_params_find(m->p, name);
  if (k < 0) {
    set_error("optimizer: input %s is not in the parameter set", name);
    return NULL;
  }
  if (!ts_params_trainable(m->p, k)) {
    set_error("optimizer: parameter %s is not trainable", name);
    return NULL;
  }
  if (!ts_dtype_is_float(ts_tensor_dtype(g, p))) {
    set_error("optimizer: parameter %s has dtype %s (needs a float dtype)", name,
                 ts_dtype_name(ts_tensor_dtype(g, p)));
    return NULL;
  }
  if (gr == TS_NONE || gr < 0 || gr >= nn) {
    if (!ts_last_error()[0] || gr != TS_NONE)
      set_error("optimizer: gradient of %s is not a node of the graph (%d)", name, gr);
    return NULL;
  }
  int r = ts_tensor_rank(g, p);
  bool same = ts_tensor_rank(g, gr) == r && ts_tensor_dtype(g, gr) == ts_tensor_dtype(g, p);
  for (int d = 0; same && d < r; d++) same = ts_tensor_shape(g, gr)[d] == ts_tensor_shape(g, p)[d];
  if (!same) {
    set_error("optimizer: gradient of %s has a different dtype or shape (rank %d, %s) than the "
                 "parameter (rank %d, %s)",
                 name, ts_tensor_rank(g, gr), ts_dtype_name(ts_tensor_dtype(g, gr)), r,
                 ts_dtype_name(ts_tensor_dtype(g, p)));
    return NULL;
  }
  return name;
}

/* torch.optim.SGD (dampening 0), lr a rank-0 float input:
 *   g' = g + wd * p
 *   buf = momentum * buf + g'          (buf starts at 0, so step 1 gives buf = g')
 *   g' = nesterov ? g' + momentum * buf : buf
 *   p = p - lr * g' */
/* The weight decay of parameter p under c (decay_matrices_only: 0 for vectors). */
static double optim_wd(ts_graph *g, const ts_optim_config *c, ts_tensor p) {
  return c->decay_matrices_only && ts_tensor_rank(g, p) < 2 ? 0.0 : c->weight_decay;
}

static int optim_sgd(ts_nn *m, const ts_optim_config *c, ts_tensor lr, const char *name, ts_tensor p,
                     ts_tensor gr, ts_tensor keep) {
  ts_graph *g = m->g;
  ts_dtype dt = ts_tensor_dtype(g, p);
  ts_tensor d = gr;
  double wd = optim_wd(g, c, p);
  if (wd != 0) d = ts_add(g, d, ts_mul(g, ts_scalar(g, dt, wd), p));
  if (c->momentum != 0) {
    ts_tensor buf = optim_state(m, name, "momentum_buffer", p);
    if (buf == TS_NONE) return -1;
    ts_tensor mom = ts_scalar(g, dt, c->momentum);
    ts_tensor nbuf = ts_add(g, ts_mul(g, mom, buf), d);
    d = c->nesterov ? ts_add(g, d, ts_mul(g, mom, nbuf)) : nbuf;
    if (optim_write(g, buf, nbuf, keep) != 0) return -1;
  }
  ts_tensor lr_p = ts_tensor_dtype(g, lr) == dt ? lr : ts_convert(g, lr, dt);
  return optim_write(g, p, ts_sub(g, p, ts_mul(g, lr_p, d)), keep);
}

/* torch.optim.AdamW (amsgrad off), t = step (1-based); lr and t are the
 * rank-0 f32 inputs; the order of operations follows PyTorch's
 * single-tensor implementation:
 *   p = p * (1 - lr * wd)
 *   m = b1 * m + (1 - b1) * g
 *   v = b2 * v + (1 - b2) * g^2
 *   p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static int optim_adamw(ts_nn *m, const ts_optim_config *c, ts_tensor lr, ts_tensor t, const char *name,
                       ts_tensor p, ts_tensor gr, ts_tensor coef, ts_tensor keep) {
  ts_graph *g = m->g;
  ts_dtype dt = ts_tensor_dtype(g, p);
  double b1 = c->beta1 != 0 ? c->beta1 : 0.9, b2 = c->beta2 != 0 ? c->beta2 : 0.999;
  double eps = c->eps != 0 ? c->eps : 1e-8;
  ts_tensor ma = optim_state(m, name, "exp_avg", p);
  ts_tensor va = optim_state(m, name, "exp_avg_sq", p);
  if (ma == TS_NONE || va == TS_NONE) return -1;
  /* Scalars (rank 0) in f64, as PyTorch computes them (Python floats): in
   * f32, 1 - 0.999^t would lose 5 digits to cancellation. */
  ts_tensor lr64 = ts_convert(g, lr, TS_F64), t64 = ts_convert(g, t, TS_F64);
  ts_tensor one64 = ts_scalar(g, TS_F64, 1.0);
  ts_tensor pd = p;
  double wd = optim_wd(g, c, p);
  if (wd != 0) {
    ts_tensor decay = ts_sub(g, one64, ts_mul(g, lr64, ts_scalar(g, TS_F64, wd)));
    pd = ts_mul(g, p, ts_convert(g, decay, dt));
  }
  /* the clipping factor coef (rank 0, or TS_NONE) goes into the scalar
   * coefficients, (1 - b1) coef and (1 - b2) coef^2: no clipped copy of the
   * gradient is shared by (so materialized for) the two moment updates,
   * each reads g itself inside its fused kernel */
  ts_tensor c1 = ts_scalar(g, dt, 1.0 - b1), c2 = ts_scalar(g, dt, 1.0 - b2);
  if (coef != TS_NONE) {
    ts_tensor cf = dt == TS_F32 ? coef : ts_convert(g, coef, dt);
    c1 = ts_mul(g, c1, cf);
    c2 = ts_mul(g, c2, ts_mul(g, cf, cf));
  }
  ts_tensor nm = ts_add(g, ts_mul(g, ts_scalar(g, dt, b1), ma), ts_mul(g, c1, gr));
  ts_tensor nv = ts_add(g, ts_mul(g, ts_scalar(g, dt, b2), va), ts_mul(g, c2, ts_mul(g, gr, gr)));
  ts_tensor bc1 = ts_sub(g, one64, ts_pow(g, ts_scalar(g, TS_F64, b1), t64));
  ts_tensor bc2 = ts_sub(g, one64, ts_pow(g, ts_scalar(g, TS_F64, b2), t64));
  ts_tensor step_size = ts_convert(g, ts_div(g, lr64, bc1), dt);
  ts_tensor bc2_sqrt = ts_convert(g, ts_sqrt(g, bc2), dt);
  ts_tensor denom = ts_add(g, ts_div(g, ts_sqrt(g, nv), bc2_sqrt), ts_scalar(g, dt, eps));
  ts_tensor np = ts_sub(g, pd, ts_mul(g, step_size, ts_div(g, nm, denom)));
  if (optim_write(g, ma, nm, keep) != 0 || optim_write(g, va, nv, keep) != 0) return -1;
  return optim_write(g, p, np, keep);
}

int ts_optim_apply(ts_nn *m, const ts_optim_config *cfg, ts_tensor lr, ts_tensor step, int n,
                   const ts_tensor *params, const ts_tensor *grads) {
  return ts_optim_apply_masked(m, cfg, lr, step, n, params, grads, TS_NONE);
}

int ts_optim_apply_masked(ts_nn *m, const ts_optim_config *cfg, ts_tensor lr, ts_tensor step, int n,
                          const ts_tensor *params, const ts_tensor *grads, ts_tensor keep) {
  if (!m || !m->g || !m->p || !cfg || (n > 0 && (!params || !grads)))
    return set_error("ts_optim_apply: NULL argument (context, config, params or grads)");
  if (cfg->kind != TS_OPTIM_SGD && cfg->kind != TS_OPTIM_ADAMW)
    return set_error("ts_optim_apply: unknown optimizer kind %d", (int)cfg->kind);
  if (cfg->kind == TS_OPTIM_SGD && cfg->nesterov && cfg->momentum == 0)
    return set_error("ts_optim_apply: Nesterov momentum requires momentum > 0");
  ts_graph *g = m->g;
  if (!optim_scalar_ok(g, lr, "the learning rate `lr`")) return -1;
  if (cfg->kind == TS_OPTIM_ADAMW && !optim_scalar_ok(g, step, "the step number `step`")) return -1;
  if (keep != TS_NONE && (keep < 0 || keep >= ts_graph_num_nodes(g) || ts_tensor_rank(g, keep) != 0 ||
                          ts_tensor_dtype(g, keep) != TS_BOOL))
    return set_error("optimizer: the update mask must be a rank-0 bool tensor (tensor %d)", keep);
  if (!(cfg->clip_norm >= 0)) return set_error("ts_optim_apply: clip_norm %g must be >= 0", cfg->clip_norm);
  for (int i = 0; i < n; i++)
    if (!optim_check(m, i, params[i], grads[i])) return -1;
  ts_tensor coef = TS_NONE; /* the clipping factor, rank-0 f32 */
  if (cfg->clip_norm > 0 && n > 0) {
    ts_tensor total = ts_global_norm(g, n, grads);
    ts_tensor c = ts_div(g, ts_scalar(g, TS_F32, cfg->clip_norm), ts_add(g, total, ts_scalar(g, TS_F32, 1e-6)));
    coef = ts_min(g, c, ts_scalar(g, TS_F32, 1.0));
    if (coef == TS_NONE) return -1;
  }
  for (int i = 0; i < n; i++) {
    const char *name = optim_check(m, i, params[i], grads[i]);
    ts_tensor gr = grads[i];
    if (coef != TS_NONE && cfg->kind == TS_OPTIM_SGD) {
      ts_dtype dt = ts_tensor_dtype(g, gr);
      gr = ts_mul(g, gr, dt == TS_F32 ? coef : ts_convert(g, coef, dt));
    }
    int rc = cfg->kind == TS_OPTIM_SGD ? optim_sgd(m, cfg, lr, name, params[i], gr, keep)
                                       : optim_adamw(m, cfg, lr, step, name, params[i], gr, coef, keep);
    if (rc != 0) return -1;
  }
  return 0;
}

ts_tensor ts_global_norm(ts_graph *g, int n, const ts_tensor *grads) {
  if (!g || n < 1 || !grads) {
    set_error("ts_global_norm: no gradients (n = %d)", n);
    return TS_NONE;
  }
  ts_tensor total = TS_NONE;
  for (int i = 0; i < n; i++) {
    ts_tensor gr = grads[i];
    if (gr == TS_NONE) return TS_NONE;
    if (ts_tensor_dtype(g, gr) != TS_F32) gr = ts_convert(g, gr, TS_F32);
    ts_tensor norm = ts_sqrt(g, ts_sum_all(g, ts_mul(g, gr, gr)));
    ts_tensor sq = ts_mul(g, norm, norm);
    total = total == TS_NONE ? sq : ts_add(g, total, sq);
  }
  return ts_sqrt(g, total);
}
