/* layers.c — the layer builders of tessel/nn.h: each declares its parameters
 * (PyTorch names and default initialization) through ts_params_use and
 * records the forward computation in the model's graph.
 *
 * Parameter names are "<layer>.<param>" as in a PyTorch state_dict, so
 * weights move between the two by name. */
#include <stdio.h>
#include <string.h>

#include "util/error.h"
#include "tessel/nn.h"
#include "tessel/spmd.h" /* ts_replica_all_reduce: SyncBatchNorm */

#define BN_MOMENTUM 0.1
#define NORM_EPS 1e-5

void ts_nn_init(ts_nn *m, ts_graph *g, ts_params *p, bool training, ts_tensor seed) {
  memset(m, 0, sizeof *m);
  m->g = g;
  m->p = p;
  m->training = training;
  m->seed = seed;
  m->sync_replicas = TS_NONE;
}

/* "<layer>.<param>" into buf; false (error set) if it does not fit. */
static bool nn_pname(char *buf, size_t len, const char *layer, const char *param) {
  if ((size_t)snprintf(buf, len, "%s.%s", layer, param) >= len) {
    set_error("layer name '%s' is too long", layer);
    return false;
  }
  return true;
}

/* Common entry checks: a usable context and a valid x. */
static bool nn_check(const ts_nn *m, ts_tensor x, const char *who, const char *name) {
  if (!name) {
    set_error("%s: the layer name is NULL (parameters are named \"<layer>.weight\", ...)", who);
    return false;
  }
  if (!m || !m->g || !m->p) {
    set_error("%s %s: the ts_nn context has no graph or parameter set (call ts_nn_init)", who, name);
    return false;
  }
  if (x == TS_NONE) {
    if (!ts_last_error()[0]) set_error("%s %s: input is TS_NONE (an earlier call failed)", who, name);
    return false;
  }
  if (x < 0 || x >= ts_graph_num_nodes(m->g)) {
    set_error("%s %s: tensor %d is not a node of the graph", who, name, x);
    return false;
  }
  return true;
}

static ts_init nn_fan_in(int64_t fan_in) { return (ts_init){TS_INIT_FAN_IN_UNIFORM, 0, fan_in}; }
static ts_init nn_const(ts_init_kind k) { return (ts_init){k, 0, 0}; }

ts_tensor ts_nn_linear(ts_nn *m, const char *name, ts_tensor x, int64_t in, int64_t out, bool bias) {
  if (!nn_check(m, x, "linear", name)) return TS_NONE;
  int r = ts_tensor_rank(m->g, x);
  const int64_t *xs = ts_tensor_shape(m->g, x);
  if (r < 1 || xs[r - 1] != in) {
    set_error("linear %s: expects in_features %lld in the last dim of x, but x has rank %d and last dim %lld",
                 name, (long long)in, r, r ? (long long)xs[r - 1] : 0LL);
    return TS_NONE;
  }
  ts_dtype dt = ts_tensor_dtype(m->g, x);
  char pn[256];
  if (!nn_pname(pn, sizeof pn, name, "weight")) return TS_NONE;
  int64_t wshape[2] = {out, in};
  ts_tensor w = ts_params_use(m->p, m->g, pn, dt, 2, wshape, nn_fan_in(in), true);
  if (w == TS_NONE) return TS_NONE;
  /* y = x W^T: contract x's last dim with W's dim 1 -> (..., out). */
  ts_dot_dims dd = {0};
  dd.n_contract = 1;
  dd.lhs_contract[0] = r - 1;
  dd.rhs_contract[0] = 1;
  ts_tensor y = ts_dot_general(m->g, x, w, &dd);
  if (!bias) return y;
  if (!nn_pname(pn, sizeof pn, name, "bias")) return TS_NONE;
  ts_tensor b = ts_params_use(m->p, m->g, pn, dt, 1, &out, nn_fan_in(in), true);
  return ts_add(m->g, y, b); /* (..., out) + (out) */
}

ts_tensor ts_nn_conv2d(ts_nn *m, const char *name, ts_tensor x, int64_t cin, int64_t cout, int k, int stride,
                       int pad, bool bias) {
  return ts_nn_conv2d_init(m, name, x, cin, cout, k, stride, pad, bias, NULL);
}

ts_tensor ts_nn_conv2d_init(ts_nn *m, const char *name, ts_tensor x, int64_t cin, int64_t cout, int k, int stride,
                            int pad, bool bias, const ts_init *w_init) {
  if (!nn_check(m, x, "conv2d", name)) return TS_NONE;
  const int64_t *xs = ts_tensor_shape(m->g, x);
  bool nhwc = m->layout == TS_LAYOUT_NHWC;
  int cd = nhwc ? 3 : 1;
  if (ts_tensor_rank(m->g, x) != 4 || xs[cd] != cin) {
    set_error("conv2d %s: expects x %s%lld%s but x has rank %d%s%lld", name, nhwc ? "(N, H, W, " : "(N, ",
                 (long long)cin, nhwc ? ")" : ", H, W)", ts_tensor_rank(m->g, x),
                 ts_tensor_rank(m->g, x) == 4 ? " and channel dim " : "",
                 ts_tensor_rank(m->g, x) == 4 ? (long long)xs[cd] : 0LL);
    return TS_NONE;
  }
  if (k < 1 || stride < 1 || pad < 0) {
    set_error("conv2d %s: kernel %d, stride %d, pad %d (need kernel >= 1, stride >= 1, pad >= 0)", name, k,
                 stride, pad);
    return TS_NONE;
  }
  ts_dtype dt = ts_tensor_dtype(m->g, x);
  char pn[256];
  if (!nn_pname(pn, sizeof pn, name, "weight")) return TS_NONE;
  int64_t fan_in = cin * k * k;
  int64_t wshape[4] = {cout, cin, k, k}; // OIHW
  ts_tensor w = ts_params_use(m->p, m->g, pn, dt, 4, wshape, w_init ? *w_init : nn_fan_in(fan_in), true);
  if (w == TS_NONE) return TS_NONE;
  ts_conv_params cp = {.stride = {stride, stride}, .pad_lo = {pad, pad}, .pad_hi = {pad, pad}, .layout = m->layout};
  ts_tensor y = ts_conv2d(m->g, x, w, &cp); // (N, Cout, OH, OW) or (N, OH, OW, Cout)
  if (!bias) return y;
  if (!nn_pname(pn, sizeof pn, name, "bias")) return TS_NONE;
  ts_tensor b = ts_params_use(m->p, m->g, pn, dt, 1, &cout, nn_fan_in(fan_in), true);
  int64_t bshape[4] = {1, 1, 1, 1};
  bshape[cd] = cout;
  return ts_add(m->g, y, ts_reshape(m->g, b, 4, bshape));
}

/* Records a state update new_value -> param (an input) for ts_nn_finish. */
static int nn_record_update(ts_nn *m, ts_tensor param, ts_tensor value) {
  if (param == TS_NONE || value == TS_NONE) return -1;
  int cap = (int)(sizeof m->update_param / sizeof m->update_param[0]);
  if (m->n_updates >= cap)
    return set_error("ts_nn: more than %d state updates recorded in one model (batch-norm layers); "
                        "call ts_nn_finish more often or use fewer layers",
                        cap);
  m->update_param[m->n_updates] = param;
  m->update_value[m->n_updates] = value;
  m->n_updates++;
  return 0;
}

/* SyncBatchNorm's statistics in a DDP replica program, one all-reduce per
 * batch norm: each replica's mean of x - K and of (x - K)^2 (K the running
 * mean, the same on every replica under sync-bn: a shift near the mean, so
 * the difference below cancels little), averaged over the replicas together
 * (equal batches); then mean = K + s1 and the biased variance s2 - s1^2
 * (clamped at 0). Its adjoint is again one all-reduce, of both statistics'
 * cotangents (PyTorch's SyncBatchNorm: sum_dy and sum_dy_xmu together): 2
 * round trips to the other replicas per batch norm and step instead of 4
 * (mean, then the variance around it, forward and backward), each a wait
 * between hosts. *unbias = n / (n - 1) for the global count n = per_channel
 * * replicas (the replica count is an all-reduce of 1, so the graph does not
 * depend on it; one per model, m->sync_replicas: ResNet-20's 21 batch norms
 * made 21 such waits for the other replicas a step). */
static ts_tensor nn_sync_batch_norm(ts_nn *m, ts_tensor x, ts_tensor gamma, ts_tensor beta, ts_tensor shift,
                                    int64_t per_channel, int axis, ts_tensor *mean, ts_tensor *var,
                                    ts_tensor *unbias) {
  ts_graph *g = m->g;
  int r = ts_tensor_rank(g, x);
  int64_t shape[TS_MAX_RANK], cshape[TS_MAX_RANK];
  int dims[TS_MAX_RANK], n = 0;
  for (int d = 0; d < r; d++) {
    shape[d] = ts_tensor_shape(g, x)[d];
    cshape[d] = d == axis ? shape[d] : 1;
    if (d != axis) dims[n++] = d;
  }
  ts_dtype dt = ts_tensor_dtype(g, x);
  int64_t c = shape[axis], lo[1] = {0}, mid[1] = {c}, hi[1] = {2 * c};
  ts_tensor xk = ts_sub(g, x, ts_reshape(g, shift, r, cshape));
  ts_tensor s[2] = {ts_reduce(g, xk, TS_REDUCE_MEAN, n, dims, false),
                    ts_reduce(g, ts_mul(g, xk, xk), TS_REDUCE_MEAN, n, dims, false)}; // (C) each
  ts_tensor st = ts_replica_all_reduce(g, ts_concatenate(g, 2, s, 0), TS_REDUCE_MEAN); // (2C)
  ts_tensor s1 = ts_slice(g, st, lo, mid, NULL), s2 = ts_slice(g, st, mid, hi, NULL);
  ts_tensor mu = ts_add(g, shift, s1);                                                        // (C)
  ts_tensor v = ts_max(g, ts_sub(g, s2, ts_mul(g, s1, s1)), ts_scalar(g, dt, 0.0));          // (C), biased
  ts_tensor xc = ts_sub(g, x, ts_reshape(g, mu, r, cshape));
  ts_tensor inv = ts_rsqrt(g, ts_add(g, v, ts_scalar(g, dt, NORM_EPS)));
  ts_tensor y = ts_mul(g, xc, ts_reshape(g, inv, r, cshape));
  y = ts_add(g, ts_mul(g, y, ts_reshape(g, gamma, r, cshape)), ts_reshape(g, beta, r, cshape));
  if (m->sync_replicas == TS_NONE || ts_tensor_dtype(g, m->sync_replicas) != dt)
    m->sync_replicas = ts_replica_all_reduce(g, ts_scalar(g, dt, 1.0), TS_REDUCE_SUM);
  ts_tensor total = ts_mul(g, m->sync_replicas, ts_scalar(g, dt, (double)per_channel));
  *unbias = ts_div(g, total, ts_sub(g, total, ts_scalar(g, dt, 1.0)));
  *mean = mu;
  *var = v;
  return y;
}

ts_tensor ts_nn_batch_norm(ts_nn *m, const char *name, ts_tensor x, int64_t c) {
  if (!nn_check(m, x, "batch_norm", name)) return TS_NONE;
  int r = ts_tensor_rank(m->g, x);
  const int64_t *xs = ts_tensor_shape(m->g, x);
  bool last = m->layout == TS_LAYOUT_NHWC;
  int axis = last ? r - 1 : 1; /* the channel dim */
  if (r < 2 || xs[axis] != c) {
    set_error("batch_norm %s: expects x %s%lld%s but x has rank %d%s%lld", name, last ? "(N, ..., " : "(N, ",
                 (long long)c, last ? ")" : ", ...)", r, r >= 2 ? " and channel dim of size " : "",
                 r >= 2 ? (long long)xs[axis] : 0LL);
    return TS_NONE;
  }
  int64_t per_channel = ts_tensor_numel(m->g, x) / c; /* values each statistic is taken over */
  ts_dtype dt = ts_tensor_dtype(m->g, x);
  char pn[256];
  ts_tensor gamma, beta, rmean, rvar;
  if (!nn_pname(pn, sizeof pn, name, "weight")) return TS_NONE;
  gamma = ts_params_use(m->p, m->g, pn, dt, 1, &c, nn_const(TS_INIT_ONES), true);
  if (!nn_pname(pn, sizeof pn, name, "bias")) return TS_NONE;
  beta = ts_params_use(m->p, m->g, pn, dt, 1, &c, nn_const(TS_INIT_ZEROS), true);
  if (!nn_pname(pn, sizeof pn, name, "running_mean")) return TS_NONE;
  rmean = ts_params_use(m->p, m->g, pn, dt, 1, &c, nn_const(TS_INIT_ZEROS), false);
  if (!nn_pname(pn, sizeof pn, name, "running_var")) return TS_NONE;
  rvar = ts_params_use(m->p, m->g, pn, dt, 1, &c, nn_const(TS_INIT_ONES), false);
  if (gamma == TS_NONE || beta == TS_NONE || rmean == TS_NONE || rvar == TS_NONE) return TS_NONE;
  if (!m->training) return ts_batch_norm_eval_axis(m->g, x, gamma, beta, rmean, rvar, NORM_EPS, axis);

  if (per_channel < 2) {
    set_error("batch_norm %s: training needs more than 1 value per channel, x has %lld", name,
                 (long long)per_channel);
    return TS_NONE;
  }
  ts_tensor mean = TS_NONE, var = TS_NONE; // (C), biased var
  ts_tensor unbias = TS_NONE;
  ts_graph *g = m->g;
  ts_tensor y = m->sync_bn ? nn_sync_batch_norm(m, x, gamma, beta, rmean, per_channel, axis, &mean, &var, &unbias)
                           : ts_batch_norm_train_axis(m->g, x, gamma, beta, NORM_EPS, axis, &mean, &var);
  if (y == TS_NONE) return TS_NONE;
  /* running = (1 - momentum) * running + momentum * batch statistic, with the
   * variance made unbiased (n / (n - 1)) as PyTorch does. */
  ts_tensor keep = ts_scalar(g, dt, 1.0 - BN_MOMENTUM), mom = ts_scalar(g, dt, BN_MOMENTUM);
  if (unbias == TS_NONE) unbias = ts_scalar(g, dt, (double)per_channel / (double)(per_channel - 1));
  ts_tensor new_mean = ts_add(g, ts_mul(g, keep, rmean), ts_mul(g, mom, mean));
  ts_tensor new_var = ts_add(g, ts_mul(g, keep, rvar), ts_mul(g, mom, ts_mul(g, var, unbias)));
  if (nn_record_update(m, rmean, new_mean) != 0 || nn_record_update(m, rvar, new_var) != 0) return TS_NONE;
  return y;
}

ts_tensor ts_nn_layer_norm(ts_nn *m, const char *name, ts_tensor x, int64_t d) {
  if (!nn_check(m, x, "layer_norm", name)) return TS_NONE;
  int r = ts_tensor_rank(m->g, x);
  const int64_t *xs = ts_tensor_shape(m->g, x);
  if (r < 1 || xs[r - 1] != d) {
    set_error("layer_norm %s: normalizes a last dim of %lld but x has rank %d and last dim %lld", name,
                 (long long)d, r, r ? (long long)xs[r - 1] : 0LL);
    return TS_NONE;
  }
  ts_dtype dt = ts_tensor_dtype(m->g, x);
  char pn[256];
  if (!nn_pname(pn, sizeof pn, name, "weight")) return TS_NONE;
  ts_tensor gamma = ts_params_use(m->p, m->g, pn, dt, 1, &d, nn_const(TS_INIT_ONES), true);
  if (!nn_pname(pn, sizeof pn, name, "bias")) return TS_NONE;
  ts_tensor beta = ts_params_use(m->p, m->g, pn, dt, 1, &d, nn_const(TS_INIT_ZEROS), true);
  if (gamma == TS_NONE || beta == TS_NONE) return TS_NONE;
  return ts_layer_norm(m->g, x, gamma, beta, NORM_EPS);
}

ts_tensor ts_nn_embedding(ts_nn *m, const char *name, ts_tensor indices, int64_t v, int64_t d) {
  if (!nn_check(m, indices, "embedding", name)) return TS_NONE;
  ts_dtype it = ts_tensor_dtype(m->g, indices);
  if (it != TS_I32 && it != TS_I64) {
    set_error("embedding %s: indices must be i32 or i64, not %s", name, ts_dtype_name(it));
    return TS_NONE;
  }
  char pn[256];
  if (!nn_pname(pn, sizeof pn, name, "weight")) return TS_NONE;
  int64_t wshape[2] = {v, d};
  ts_tensor w = ts_params_use(m->p, m->g, pn, TS_F32, 2, wshape, (ts_init){TS_INIT_NORMAL, 1.0, 0}, true);
  return ts_gather(m->g, w, indices); // (..., d)
}

ts_tensor ts_nn_dropout(ts_nn *m, ts_tensor x, double p) {
  if (!nn_check(m, x, "dropout", "")) return TS_NONE;
  if (p < 0 || p >= 1) {
    set_error("dropout: probability %g must be in [0, 1)", p);
    return TS_NONE;
  }
  if (!m->training || m->seed == TS_NONE || p == 0) return x;
  return ts_dropout(m->g, x, p, m->seed, m->next_key++);
}

int ts_nn_finish(ts_nn *m) {
  if (!m || !m->g) return set_error("ts_nn_finish: context has no graph");
  for (int i = 0; i < m->n_updates; i++) {
    int o = ts_graph_add_output(m->g, m->update_value[i]);
    if (o < 0 || ts_graph_alias_output(m->g, o, m->update_param[i]) != 0) return -1;
  }
  m->n_updates = 0;
  return 0;
}
