/* test_gradcheck.c — ts_grad against central finite differences, for every
 * differentiable op alone and for the composites (relu, gelu, softmax,
 * log_softmax, cross_entropy, layer_norm, batch_norm_train (its closed-form
 * backward, with x read elsewhere too, and node by node when the batch
 * statistics feed the result), a small MLP, a
 * small conv net), compiled and executed end to end.
 *
 * Each case builds out = f(x1, x2, ...) on seeded random inputs and the loss
 * L = sum(out * c) with a random cotangent c, so every element of the
 * Jacobian is exercised. For every element v of every float input:
 *   numeric  n = (L(v + h) - L(v - h)) / ((v + h) - (v - h)),
 *            h = 1e-6 * max(1, |v|) for f64 inputs (1e-3 * max(1, |v|) for f32)
 *   analytic a = the element of ts_grad(L, x)
 *   error    |a - n| / max(|a|, |n|, 1e-3)          (relative, floored near 0)
 * and the case passes when every error is <= 1e-5. Everything is f64 except
 * the f32 side of the convert case. Inputs stay away from kinks and domain
 * edges: positive where log/sqrt/rsqrt/pow need it, |x| >= 0.1 for abs/relu,
 * distinct values (a shuffled grid, step 0.1) for max/min/max-pooling.
 * Set TESSEL_TEST_SEED to replay; a failure prints the case, the input, the
 * element and both values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/builders_internal.h" /* ir_conv_bwd_data, ir_conv_bwd_filter, ir_avgpool_grad */
#include "tessel/tessel.h"

#define TOL 1e-5
#define FLOOR 1e-3
#define MAX_IN 6

typedef enum {
  D_NORMAL,  /* uniform(-1, 1) */
  D_POS,     /* uniform(0.5, 2) */
  D_AWAY,    /* +-uniform(0.1, 1): away from 0 */
  D_GRID,    /* distinct: a shuffled grid (k - n/2) * 0.1 + off */
  D_INDEX    /* integer in [0, imax) */
} domain;

typedef struct {
  const char *name;
  ts_dtype dt;
  int rank;
  int64_t shape[4];
  domain dom;
  double off;  /* D_GRID offset */
  int imax;    /* D_INDEX bound */
} in_spec;

typedef struct {
  const char *name;
  int n_in;
  in_spec in[MAX_IN];
  ts_tensor (*build)(ts_graph *g, const ts_tensor *x);
} gc_case;

/* ---- deterministic random numbers ---- */

static uint64_t rng_state;
static uint64_t next_u64(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform(double lo, double hi) { return lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1.0p-53); }

static void fill(const in_spec *s, int64_t n, double *v) {
  for (int64_t i = 0; i < n; i++) {
    switch (s->dom) {
    case D_NORMAL: v[i] = uniform(-1, 1); break;
    case D_POS: v[i] = uniform(0.5, 2); break;
    case D_AWAY: v[i] = (next_u64() & 1 ? 1 : -1) * uniform(0.1, 1); break;
    case D_GRID: v[i] = (double)(i - n / 2) * 0.1 + s->off; break;
    case D_INDEX: v[i] = (double)(next_u64() % (uint64_t)s->imax); break;
    }
  }
  if (s->dom == D_GRID) /* Fisher-Yates */
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = (int64_t)(next_u64() % (uint64_t)(i + 1));
      double t = v[i];
      v[i] = v[j];
      v[j] = t;
    }
}

/* Host values (kept as double) into a buffer of dtype dt. */
static void to_bytes(ts_dtype dt, int64_t n, const double *v, void *dst) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == TS_F64) ((double *)dst)[i] = v[i];
    else if (dt == TS_F32) ((float *)dst)[i] = (float)v[i];
    else if (dt == TS_I32) ((int32_t *)dst)[i] = (int32_t)v[i];
    else ((int64_t *)dst)[i] = (int64_t)v[i];
  }
}

/* ---- the harness ---- */

typedef struct {
  ts_graph *g;
  ts_executable *exe;
  int n_grads;
} built;

/* Inputs x..., then c; outputs L and (with_grads) d L / d x for float x. */
static int build_case(ts_client *cl, const gc_case *k, bool with_grads, built *b) {
  memset(b, 0, sizeof *b);
  b->g = ts_graph_new();
  ts_tensor x[MAX_IN], wrt[MAX_IN], grads[MAX_IN];
  int n_wrt = 0;
  for (int i = 0; i < k->n_in; i++) {
    x[i] = ts_input(b->g, k->in[i].name, k->in[i].dt, k->in[i].rank, k->in[i].shape);
    if (ts_dtype_is_float(k->in[i].dt)) wrt[n_wrt++] = x[i];
  }
  ts_tensor out = k->build(b->g, x);
  if (out == TS_NONE) return -1;
  int64_t os[TS_MAX_RANK];
  int orank = ts_tensor_rank(b->g, out);
  memcpy(os, ts_tensor_shape(b->g, out), sizeof os);
  ts_tensor c = ts_input(b->g, "cotangent", ts_tensor_dtype(b->g, out), orank, os);
  ts_tensor loss = ts_sum_all(b->g, ts_mul(b->g, out, c));
  if (loss == TS_NONE || ts_graph_add_output(b->g, loss) < 0) return -1;
  if (with_grads) {
    if (ts_grad(b->g, loss, n_wrt, wrt, grads)) return -1;
    for (int i = 0; i < n_wrt; i++)
      if (ts_graph_add_output(b->g, grads[i]) < 0) return -1;
    b->n_grads = n_wrt;
  }
  b->exe = ts_compile(cl, b->g, NULL);
  return b->exe ? 0 : -1;
}

static void free_built(built *b) {
  ts_executable_free(b->exe);
  ts_graph_free(b->g);
}

static double eval_loss(ts_executable *e, ts_buffer **inputs) {
  ts_buffer *out = NULL;
  if (ts_execute(e, inputs, &out)) return NAN;
  double l;
  if (ts_buffer_dtype(out) == TS_F64) {
    ts_buffer_read(out, &l, sizeof l);
  } else {
    float f;
    ts_buffer_read(out, &f, sizeof f);
    l = f;
  }
  ts_buffer_free(out);
  return l;
}

static void run_case(ts_client *cl, const gc_case *k, int case_index) {
  rng_state = ts_test_seed * 1000003u + (uint64_t)case_index;
  built fwd, bwd;
  int rc = build_case(cl, k, false, &fwd);
  if (rc == 0) rc = build_case(cl, k, true, &bwd);
  CHECK(rc == 0, "%s: building or compiling failed: %s", k->name, ts_last_error());
  if (rc) return;

  int n_all = ts_graph_num_inputs(fwd.g); /* k->n_in + the cotangent */
  double *vals[MAX_IN + 1];
  void *bytes[MAX_IN + 1];
  ts_buffer *bufs[MAX_IN + 1];
  ts_dtype dts[MAX_IN + 1];
  int64_t numel[MAX_IN + 1];
  for (int i = 0; i < n_all; i++) {
    ts_tensor t = ts_graph_input(fwd.g, i);
    in_spec cspec = {.dom = D_NORMAL};
    const in_spec *s = i < k->n_in ? &k->in[i] : &cspec;
    dts[i] = ts_tensor_dtype(fwd.g, t);
    numel[i] = ts_tensor_numel(fwd.g, t);
    vals[i] = malloc((size_t)(numel[i] ? numel[i] : 1) * sizeof(double));
    bytes[i] = malloc((size_t)(numel[i] ? numel[i] : 1) * 8);
    fill(s, numel[i], vals[i]);
    to_bytes(dts[i], numel[i], vals[i], bytes[i]);
    bufs[i] = ts_buffer_from_host(cl, dts[i], ts_tensor_rank(fwd.g, t), ts_tensor_shape(fwd.g, t), bytes[i]);
  }

  ts_buffer *outs[1 + MAX_IN] = {NULL};
  rc = ts_execute(bwd.exe, bufs, outs);
  CHECK(rc == 0, "%s: execute failed: %s", k->name, ts_last_error());
  double l0 = NAN;
  if (rc == 0) ts_buffer_read(outs[0], &l0, sizeof l0); /* the loss is f64 in every case */
  double l1 = eval_loss(fwd.exe, bufs);
  CHECK(rc == 0 && fabs(l0 - l1) <= 1e-12 * fmax(1, fabs(l0)), "%s: the loss differs with and without gradients (%.17g vs %.17g)",
        k->name, l0, l1);

  int gi = 0;
  for (int i = 0; i < k->n_in && rc == 0; i++) {
    if (!ts_dtype_is_float(dts[i])) continue;
    ts_buffer *gb = outs[1 + gi++];
    void *gdata = malloc(ts_buffer_bytes(gb) ? ts_buffer_bytes(gb) : 1);
    ts_buffer_read(gb, gdata, ts_buffer_bytes(gb));
    double worst = 0, wa = 0, wn = 0;
    int64_t wj = -1;
    for (int64_t j = 0; j < numel[i]; j++) {
      double v = vals[i][j];
      double h = (dts[i] == TS_F64 ? 1e-6 : 1e-3) * fmax(1, fabs(v));
      double vp = v + h, vm = v - h;
      if (dts[i] == TS_F32) vp = (float)vp, vm = (float)vm;
      vals[i][j] = vp;
      to_bytes(dts[i], numel[i], vals[i], bytes[i]);
      ts_buffer_write(bufs[i], bytes[i], (size_t)numel[i] * ts_dtype_size(dts[i]));
      double lp = eval_loss(fwd.exe, bufs);
      vals[i][j] = vm;
      to_bytes(dts[i], numel[i], vals[i], bytes[i]);
      ts_buffer_write(bufs[i], bytes[i], (size_t)numel[i] * ts_dtype_size(dts[i]));
      double lm = eval_loss(fwd.exe, bufs);
      vals[i][j] = v;
      double num = (lp - lm) / (vp - vm);
      double ana = dts[i] == TS_F64 ? ((double *)gdata)[j] : ((float *)gdata)[j];
      double err = fabs(ana - num) / fmax(fmax(fabs(ana), fabs(num)), FLOOR);
      if (!(err <= worst)) { /* NaN counts as worst */
        worst = isnan(err) ? INFINITY : err;
        wj = j, wa = ana, wn = num;
      }
    }
    to_bytes(dts[i], numel[i], vals[i], bytes[i]);
    ts_buffer_write(bufs[i], bytes[i], (size_t)numel[i] * ts_dtype_size(dts[i]));
    CHECK(worst <= TOL, "%s: d L / d %s: relative error %.3g at element %lld (analytic %.12g, numeric %.12g)", k->name,
          k->in[i].name, worst, (long long)wj, wa, wn);
    if (getenv("TESSEL_GRADCHECK_VERBOSE"))
      printf("  %-28s d/d%-6s max rel err %.2e\n", k->name, k->in[i].name, worst);
    free(gdata);
  }
  for (int i = 0; i < 1 + MAX_IN; i++) ts_buffer_free(outs[i]);
  for (int i = 0; i < n_all; i++) {
    ts_buffer_free(bufs[i]);
    free(vals[i]);
    free(bytes[i]);
  }
  free_built(&fwd);
  free_built(&bwd);
}

/* ---- the cases: one builder per op or composite ---- */

#define F TS_F64
#define SC(v) ts_scalar(g, F, v)

static ts_tensor b_neg(ts_graph *g, const ts_tensor *x) { return ts_neg(g, x[0]); }
static ts_tensor b_abs(ts_graph *g, const ts_tensor *x) { return ts_abs(g, x[0]); }
static ts_tensor b_exp(ts_graph *g, const ts_tensor *x) { return ts_exp(g, x[0]); }
static ts_tensor b_log(ts_graph *g, const ts_tensor *x) { return ts_log(g, x[0]); }
static ts_tensor b_log1p(ts_graph *g, const ts_tensor *x) { return ts_log1p(g, x[0]); }
static ts_tensor b_tanh(ts_graph *g, const ts_tensor *x) { return ts_tanh(g, x[0]); }
static ts_tensor b_sqrt(ts_graph *g, const ts_tensor *x) { return ts_sqrt(g, x[0]); }
static ts_tensor b_rsqrt(ts_graph *g, const ts_tensor *x) { return ts_rsqrt(g, x[0]); }
static ts_tensor b_sigmoid(ts_graph *g, const ts_tensor *x) { return ts_sigmoid(g, x[0]); }
static ts_tensor b_erf(ts_graph *g, const ts_tensor *x) { return ts_erf(g, x[0]); }
static ts_tensor b_convert(ts_graph *g, const ts_tensor *x) { return ts_convert(g, x[0], TS_F64); }
static ts_tensor b_add(ts_graph *g, const ts_tensor *x) { return ts_add(g, x[0], x[1]); }
static ts_tensor b_sub(ts_graph *g, const ts_tensor *x) { return ts_sub(g, x[0], x[1]); }
static ts_tensor b_mul(ts_graph *g, const ts_tensor *x) { return ts_mul(g, x[0], x[1]); }
static ts_tensor b_div(ts_graph *g, const ts_tensor *x) { return ts_div(g, x[0], x[1]); }
static ts_tensor b_max(ts_graph *g, const ts_tensor *x) { return ts_max(g, x[0], x[1]); }
static ts_tensor b_min(ts_graph *g, const ts_tensor *x) { return ts_min(g, x[0], x[1]); }
static ts_tensor b_pow(ts_graph *g, const ts_tensor *x) { return ts_pow(g, x[0], x[1]); }
/* the predicate input p gets a zero gradient (the loss is flat in it) */
static ts_tensor b_select(ts_graph *g, const ts_tensor *x) {
  return ts_select(g, ts_compare(g, x[2], SC(0), TS_CMP_GT), x[0], x[1]);
}
static ts_tensor b_broadcast(ts_graph *g, const ts_tensor *x) { /* (3,1) -> (2,3,4) */
  int dims[] = {1, 2};
  return ts_broadcast_in_dim(g, x[0], 3, (int64_t[]){2, 3, 4}, dims);
}
static ts_tensor b_reshape(ts_graph *g, const ts_tensor *x) { return ts_reshape(g, x[0], 2, (int64_t[]){4, 6}); }
static ts_tensor b_transpose(ts_graph *g, const ts_tensor *x) { return ts_transpose(g, x[0], (int[]){2, 0, 1}); }
static ts_tensor b_slice(ts_graph *g, const ts_tensor *x) { /* (4,5,6) -> [1:3, 0:5, 2:5] */
  return ts_slice(g, x[0], (int64_t[]){1, 0, 2}, (int64_t[]){3, 5, 5}, NULL);
}
static ts_tensor b_slice_stride(ts_graph *g, const ts_tensor *x) { /* (4,5,6) -> [1:4:2, 0:5, 0:6:2] (+ odd end) */
  return ts_slice(g, x[0], (int64_t[]){1, 0, 1}, (int64_t[]){4, 5, 6}, (int64_t[]){2, 1, 2});
}
static ts_tensor b_pad(ts_graph *g, const ts_tensor *x) {
  return ts_pad(g, x[0], (int64_t[]){1, 0, 2}, (int64_t[]){0, 2, 1}, 0.5);
}
static ts_tensor b_concat(ts_graph *g, const ts_tensor *x) { return ts_concatenate(g, 3, x, 1); }
static ts_tensor b_matmul(ts_graph *g, const ts_tensor *x) { return ts_matmul(g, x[0], x[1]); }
/* a (2,4,3): batch 0, contract 1; b (4,2,5): batch 1, contract 0 -> (2,3,5) */
static ts_tensor b_dot_batch(ts_graph *g, const ts_tensor *x) {
  ts_dot_dims d = {.n_batch = 1, .n_contract = 1, .lhs_batch = {0}, .rhs_batch = {1}, .lhs_contract = {1},
                   .rhs_contract = {0}};
  return ts_dot_general(g, x[0], x[1], &d);
}
/* a (3,2,4): batch 1, contract {0,2}; b (4,5,3,2): batch 3, contract {2,0} -> (2,5) */
static ts_tensor b_dot_multi(ts_graph *g, const ts_tensor *x) {
  ts_dot_dims d = {.n_batch = 1, .n_contract = 2, .lhs_batch = {1}, .rhs_batch = {3}, .lhs_contract = {0, 2},
                   .rhs_contract = {2, 0}};
  return ts_dot_general(g, x[0], x[1], &d);
}
static ts_tensor b_conv(ts_graph *g, const ts_tensor *x) { return ts_conv2d(g, x[0], x[1], NULL); }
static const ts_conv_params conv_s2 = {.stride = {2, 2}, .pad_lo = {1, 0}, .pad_hi = {1, 2}};
static const ts_conv_params conv_d2 = {.dilation = {2, 2}, .pad_lo = {1, 1}, .pad_hi = {1, 1}};
static const ts_conv_params conv_g2 = {.groups = 2, .stride = {1, 2}, .pad_lo = {1, 1}, .pad_hi = {0, 1}};
static ts_tensor b_conv_s2(ts_graph *g, const ts_tensor *x) { return ts_conv2d(g, x[0], x[1], &conv_s2); }
static ts_tensor b_conv_d2(ts_graph *g, const ts_tensor *x) { return ts_conv2d(g, x[0], x[1], &conv_d2); }
static ts_tensor b_conv_g2(ts_graph *g, const ts_tensor *x) { return ts_conv2d(g, x[0], x[1], &conv_g2); }
/* channels-last: x (N, H, W, C) */
static const ts_conv_params conv_nhwc = {.stride = {2, 1}, .pad_lo = {1, 0}, .pad_hi = {1, 2}, .groups = 2,
                                         .layout = TS_LAYOUT_NHWC};
static ts_tensor b_conv_nhwc(ts_graph *g, const ts_tensor *x) { return ts_conv2d(g, x[0], x[1], &conv_nhwc); }
static ts_tensor b_maxpool_nhwc(ts_graph *g, const ts_tensor *x) {
  ts_pool_params p = {.kernel = {2, 3}, .stride = {2, 1}, .pad = {1, 1}, .layout = TS_LAYOUT_NHWC};
  return ts_max_pool2d(g, x[0], &p);
}
static ts_tensor b_avgpool_nhwc(ts_graph *g, const ts_tensor *x) {
  ts_pool_params p = {.kernel = {3, 2}, .stride = {2, 2}, .pad = {1, 0}, .layout = TS_LAYOUT_NHWC};
  return ts_avg_pool2d(g, x[0], &p);
}
/* dy (2,4,3,3), w (4,2,3,3), stride 2 pad 1 -> dx (2,2,6,6) */
static ts_tensor b_conv_bwd_data(ts_graph *g, const ts_tensor *x) {
  ts_conv_params p = {.stride = {2, 2}, .pad_lo = {1, 1}, .pad_hi = {1, 1}};
  return ir_conv_bwd_data(g, x[0], x[1], &p, 4, (int64_t[]){2, 2, 6, 6});
}
/* x (2,2,6,6), dy (2,4,3,3), stride 2 pad 1 -> dw (4,2,3,3) */
static ts_tensor b_conv_bwd_filter(ts_graph *g, const ts_tensor *x) {
  ts_conv_params p = {.stride = {2, 2}, .pad_lo = {1, 1}, .pad_hi = {1, 1}};
  return ir_conv_bwd_filter(g, x[0], x[1], &p, (int64_t[]){4, 2, 3, 3});
}
static ts_tensor b_maxpool(ts_graph *g, const ts_tensor *x) {
  ts_pool_params p = {.kernel = {2, 3}, .stride = {2, 1}, .pad = {1, 1}};
  return ts_max_pool2d(g, x[0], &p);
}
static ts_tensor b_avgpool(ts_graph *g, const ts_tensor *x) {
  ts_pool_params p = {.kernel = {3, 2}, .stride = {2, 2}, .pad = {1, 0}};
  return ts_avg_pool2d(g, x[0], &p);
}
static ts_tensor b_avgpool_grad(ts_graph *g, const ts_tensor *x) { /* dy (2,2,3,3) -> (2,2,5,6) */
  ts_pool_params p = {.kernel = {3, 2}, .stride = {2, 2}, .pad = {1, 0}};
  return ir_avgpool_grad(g, x[0], &p, (int64_t[]){2, 2, 5, 6});
}
static ts_tensor b_sum_mid(ts_graph *g, const ts_tensor *x) {
  return ts_reduce(g, x[0], TS_REDUCE_SUM, 1, (int[]){1}, false);
}
static ts_tensor b_sum_outer(ts_graph *g, const ts_tensor *x) {
  return ts_reduce(g, x[0], TS_REDUCE_SUM, 2, (int[]){0, 2}, false);
}
static ts_tensor b_mean_mid(ts_graph *g, const ts_tensor *x) {
  return ts_reduce(g, x[0], TS_REDUCE_MEAN, 2, (int[]){1, 2}, true);
}
static ts_tensor b_max_mid(ts_graph *g, const ts_tensor *x) {
  return ts_reduce(g, x[0], TS_REDUCE_MAX, 2, (int[]){1, 2}, false);
}
static ts_tensor b_min_mid(ts_graph *g, const ts_tensor *x) {
  return ts_reduce(g, x[0], TS_REDUCE_MIN, 1, (int[]){1}, false);
}
static ts_tensor b_gather(ts_graph *g, const ts_tensor *x) { return ts_gather(g, x[0], x[1]); }
static ts_tensor b_scatter_add(ts_graph *g, const ts_tensor *x) { return ts_scatter_add(g, x[0], x[1], x[2]); }
/* composites */
static ts_tensor b_relu(ts_graph *g, const ts_tensor *x) { return ts_relu(g, x[0]); }
static ts_tensor b_gelu(ts_graph *g, const ts_tensor *x) { return ts_gelu(g, x[0]); }
static ts_tensor b_softmax(ts_graph *g, const ts_tensor *x) { return ts_softmax(g, x[0], 1); }
static ts_tensor b_log_softmax(ts_graph *g, const ts_tensor *x) { return ts_log_softmax(g, x[0], -1); }
static ts_tensor b_cross_entropy(ts_graph *g, const ts_tensor *x) { return ts_cross_entropy(g, x[0], x[1]); }
static ts_tensor b_layer_norm(ts_graph *g, const ts_tensor *x) { return ts_layer_norm(g, x[0], x[1], x[2], 1e-5); }
static ts_tensor b_batch_norm(ts_graph *g, const ts_tensor *x) {
  return ts_batch_norm_train(g, x[0], x[1], x[2], 1e-5, NULL, NULL);
}
/* the closed-form backward (ad/bn_adjoint.c) with x also read elsewhere */
static ts_tensor b_batch_norm_x(ts_graph *g, const ts_tensor *x) {
  return ts_add(g, ts_batch_norm_train(g, x[0], x[1], x[2], 1e-5, NULL, NULL), x[0]);
}
/* the batch statistics feed the result too: autodiff goes node by node */
static ts_tensor b_batch_norm_stats(ts_graph *g, const ts_tensor *x) {
  ts_tensor mean, var, y = ts_batch_norm_train(g, x[0], x[1], x[2], 1e-5, &mean, &var);
  int one = 1;
  const int64_t *s = ts_tensor_shape(g, x[0]);
  int64_t shape[4] = {s[0], s[1], s[2], s[3]};
  return ts_add(g, y, ts_broadcast_in_dim(g, ts_add(g, var, mean), 4, shape, &one));
}
/* x (4,6) -> linear 6->5, relu, linear 5->3 -> cross entropy */
static ts_tensor b_mlp(ts_graph *g, const ts_tensor *x) {
  ts_tensor h = ts_relu(g, ts_add(g, ts_matmul(g, x[0], x[1]), x[2]));
  ts_tensor logits = ts_add(g, ts_matmul(g, h, x[3]), x[4]);
  return ts_cross_entropy(g, logits, x[5]);
}
/* x (2,1,6,6) -> conv 1->3 3x3 pad 1, relu, max-pool 2 -> (2,27) -> fc 27->3 -> cross entropy */
static ts_tensor b_convnet(ts_graph *g, const ts_tensor *x) {
  ts_conv_params cp = {.pad_lo = {1, 1}, .pad_hi = {1, 1}};
  ts_pool_params pp = {.kernel = {2, 2}};
  int bias_dim = 1;
  ts_tensor y = ts_conv2d(g, x[0], x[1], &cp);
  y = ts_add(g, y, ts_broadcast_in_dim(g, x[2], 4, (int64_t[]){2, 3, 6, 6}, &bias_dim));
  y = ts_max_pool2d(g, ts_relu(g, y), &pp);
  y = ts_reshape(g, y, 2, (int64_t[]){2, 27});
  return ts_cross_entropy(g, ts_matmul(g, y, x[3]), x[4]);
}
/* the gradient of a gradient: out = d/dx sum(tanh(x) * exp(y)) (also w.r.t. y) */
static ts_tensor b_second_order(ts_graph *g, const ts_tensor *x) {
  ts_tensor l = ts_sum_all(g, ts_mul(g, ts_tanh(g, x[0]), ts_exp(g, x[1])));
  ts_tensor d;
  return ts_grad(g, l, 1, x, &d) ? TS_NONE : d;
}

/* name, domain, rank, dims... */
#define IN(n, d, r, ...) {.name = n, .dt = F, .rank = r, .shape = {__VA_ARGS__}, .dom = d}
#define GRID(n, o, r, ...) {.name = n, .dt = F, .rank = r, .shape = {__VA_ARGS__}, .dom = D_GRID, .off = o}
#define IDX(n, m, r, ...) {.name = n, .dt = TS_I32, .rank = r, .shape = {__VA_ARGS__}, .dom = D_INDEX, .imax = m}
static const gc_case cases[] = {
    {"neg", 1, {IN("x", D_NORMAL, 2, 3, 4)}, b_neg},
    {"abs", 1, {IN("x", D_AWAY, 2, 3, 4)}, b_abs},
    {"exp", 1, {IN("x", D_NORMAL, 2, 3, 4)}, b_exp},
    {"log", 1, {IN("x", D_POS, 2, 3, 4)}, b_log},
    {"log1p", 1, {IN("x", D_POS, 2, 3, 4)}, b_log1p},
    {"tanh", 1, {IN("x", D_NORMAL, 2, 3, 4)}, b_tanh},
    {"sqrt", 1, {IN("x", D_POS, 2, 3, 4)}, b_sqrt},
    {"rsqrt", 1, {IN("x", D_POS, 2, 3, 4)}, b_rsqrt},
    {"sigmoid", 1, {IN("x", D_NORMAL, 2, 3, 4)}, b_sigmoid},
    {"erf", 1, {IN("x", D_NORMAL, 2, 3, 4)}, b_erf},
    {"convert f32->f64", 1, {{.name = "x", .dt = TS_F32, .rank = 2, .shape = {3, 4}, .dom = D_NORMAL}}, b_convert},
    {"add (broadcast b)", 2, {IN("a", D_NORMAL, 2, 3, 4), IN("b", D_NORMAL, 1, 4)}, b_add},
    {"sub", 2, {IN("a", D_NORMAL, 2, 3, 4), IN("b", D_NORMAL, 2, 3, 4)}, b_sub},
    {"mul (broadcast a)", 2, {IN("a", D_NORMAL, 2, 3, 1), IN("b", D_NORMAL, 2, 3, 4)}, b_mul},
    {"div", 2, {IN("a", D_NORMAL, 2, 3, 4), IN("b", D_POS, 2, 3, 4)}, b_div},
    {"max", 2, {GRID("a", 0.0, 2, 3, 4), GRID("b", 0.05, 2, 3, 4)}, b_max},
    {"min", 2, {GRID("a", 0.0, 2, 3, 4), GRID("b", 0.05, 2, 3, 4)}, b_min},
    {"pow", 2, {IN("a", D_POS, 2, 3, 4), IN("b", D_NORMAL, 2, 3, 4)}, b_pow},
    {"select", 3, {IN("a", D_NORMAL, 2, 3, 4), IN("b", D_NORMAL, 2, 3, 4), IN("p", D_AWAY, 2, 3, 4)}, b_select},
    {"broadcast", 1, {IN("x", D_NORMAL, 2, 3, 1)}, b_broadcast},
    {"reshape", 1, {IN("x", D_NORMAL, 3, 2, 3, 4)}, b_reshape},
    {"transpose", 1, {IN("x", D_NORMAL, 3, 2, 3, 4)}, b_transpose},
    {"slice", 1, {IN("x", D_NORMAL, 3, 4, 5, 6)}, b_slice},
    {"slice stride 2", 1, {IN("x", D_NORMAL, 3, 4, 5, 6)}, b_slice_stride},
    {"pad", 1, {IN("x", D_NORMAL, 3, 2, 3, 2)}, b_pad},
    {"concatenate",
     3,
     {IN("a", D_NORMAL, 2, 3, 2), IN("b", D_NORMAL, 2, 3, 1), IN("c", D_NORMAL, 2, 3, 3)},
     b_concat},
    {"matmul", 2, {IN("a", D_NORMAL, 2, 3, 4), IN("b", D_NORMAL, 2, 4, 5)}, b_matmul},
    {"dot batch+transposed", 2, {IN("a", D_NORMAL, 3, 2, 4, 3), IN("b", D_NORMAL, 3, 4, 2, 5)}, b_dot_batch},
    {"dot 2 contracting", 2, {IN("a", D_NORMAL, 3, 3, 2, 4), IN("b", D_NORMAL, 4, 4, 5, 3, 2)}, b_dot_multi},
    {"conv", 2, {IN("x", D_NORMAL, 4, 2, 2, 5, 5), IN("w", D_NORMAL, 4, 3, 2, 3, 3)}, b_conv},
    {"conv stride 2 pad", 2, {IN("x", D_NORMAL, 4, 2, 2, 6, 5), IN("w", D_NORMAL, 4, 3, 2, 3, 3)}, b_conv_s2},
    {"conv dilation 2", 2, {IN("x", D_NORMAL, 4, 1, 2, 6, 6), IN("w", D_NORMAL, 4, 2, 2, 3, 3)}, b_conv_d2},
    {"conv groups 2", 2, {IN("x", D_NORMAL, 4, 2, 4, 4, 5), IN("w", D_NORMAL, 4, 4, 2, 2, 3)}, b_conv_g2},
    {"conv nhwc stride 2 pad groups 2", 2, {IN("x", D_NORMAL, 4, 2, 6, 5, 4), IN("w", D_NORMAL, 4, 4, 2, 3, 3)},
     b_conv_nhwc},
    {"conv_bwd_data", 2, {IN("dy", D_NORMAL, 4, 2, 4, 3, 3), IN("w", D_NORMAL, 4, 4, 2, 3, 3)}, b_conv_bwd_data},
    {"conv_bwd_filter",
     2,
     {IN("x", D_NORMAL, 4, 2, 2, 6, 6), IN("dy", D_NORMAL, 4, 2, 4, 3, 3)},
     b_conv_bwd_filter},
    {"max_pool2d", 1, {GRID("x", 0.0, 4, 2, 2, 4, 5)}, b_maxpool},
    {"avg_pool2d", 1, {IN("x", D_NORMAL, 4, 2, 2, 5, 6)}, b_avgpool},
    {"max_pool2d nhwc", 1, {GRID("x", 0.0, 4, 2, 4, 5, 2)}, b_maxpool_nhwc},
    {"avg_pool2d nhwc", 1, {IN("x", D_NORMAL, 4, 2, 5, 6, 3)}, b_avgpool_nhwc},
    {"avg_pool2d_grad", 1, {IN("dy", D_NORMAL, 4, 2, 2, 3, 3)}, b_avgpool_grad},
    {"reduce sum (middle dim)", 1, {IN("x", D_NORMAL, 3, 2, 3, 4)}, b_sum_mid},
    {"reduce sum (dims 0,2)", 1, {IN("x", D_NORMAL, 3, 2, 3, 4)}, b_sum_outer},
    {"reduce mean keepdims", 1, {IN("x", D_NORMAL, 4, 2, 3, 2, 3)}, b_mean_mid},
    {"reduce max (middle dims)", 1, {GRID("x", 0.0, 4, 2, 3, 2, 3)}, b_max_mid},
    {"reduce min (middle dim)", 1, {GRID("x", 0.0, 3, 2, 3, 4)}, b_min_mid},
    {"gather", 2, {IN("table", D_NORMAL, 2, 5, 3), IDX("idx", 5, 2, 2, 3)}, b_gather},
    {"scatter_add",
     3,
     {IN("base", D_NORMAL, 2, 5, 3), IDX("idx", 5, 1, 4), IN("upd", D_NORMAL, 2, 4, 3)},
     b_scatter_add},
    {"relu", 1, {IN("x", D_AWAY, 2, 3, 4)}, b_relu},
    {"gelu", 1, {IN("x", D_NORMAL, 2, 3, 4)}, b_gelu},
    {"softmax", 1, {IN("x", D_NORMAL, 2, 3, 5)}, b_softmax},
    {"log_softmax", 1, {IN("x", D_NORMAL, 2, 3, 5)}, b_log_softmax},
    {"cross_entropy", 2, {IN("logits", D_NORMAL, 2, 4, 5), IDX("labels", 5, 1, 4)}, b_cross_entropy},
    {"layer_norm",
     3,
     {IN("x", D_NORMAL, 2, 3, 5), IN("gamma", D_NORMAL, 1, 5), IN("beta", D_NORMAL, 1, 5)},
     b_layer_norm},
    {"batch_norm_train",
     3,
     {IN("x", D_NORMAL, 4, 4, 3, 2, 2), IN("gamma", D_NORMAL, 1, 3), IN("beta", D_NORMAL, 1, 3)},
     b_batch_norm},
    {"batch_norm_train + x",
     3,
     {IN("x", D_NORMAL, 4, 4, 3, 2, 2), IN("gamma", D_NORMAL, 1, 3), IN("beta", D_NORMAL, 1, 3)},
     b_batch_norm_x},
    {"batch_norm_train + statistics",
     3,
     {IN("x", D_NORMAL, 4, 4, 3, 2, 2), IN("gamma", D_NORMAL, 1, 3), IN("beta", D_NORMAL, 1, 3)},
     b_batch_norm_stats},
    {"mlp",
     6,
     {IN("x", D_NORMAL, 2, 4, 6), IN("w1", D_NORMAL, 2, 6, 5), IN("b1", D_NORMAL, 1, 5),
      IN("w2", D_NORMAL, 2, 5, 3), IN("b2", D_NORMAL, 1, 3), IDX("labels", 3, 1, 4)},
     b_mlp},
    {"conv net",
     5,
     {IN("x", D_NORMAL, 4, 2, 1, 6, 6), IN("w", D_NORMAL, 4, 3, 1, 3, 3), IN("bias", D_NORMAL, 1, 3),
      IN("fc", D_NORMAL, 2, 27, 3), IDX("labels", 3, 1, 2)},
     b_convnet},
    {"second order (grad of grad)", 2, {IN("x", D_NORMAL, 2, 2, 3), IN("y", D_NORMAL, 2, 2, 3)}, b_second_order},
};

int main(int argc, char **argv) {
  ts_test_init("test_gradcheck", 20261202);
  ts_client *cl = ts_client_new(NULL);
  CHECK(cl != NULL, "client: %s", ts_last_error());
  if (!cl) return ts_test_finish();
  const char *only = argc > 1 ? argv[1] : NULL; /* run the cases whose name contains argv[1] */
  int n = (int)(sizeof cases / sizeof *cases);
  for (int i = 0; i < n; i++) {
    if (only && !strstr(cases[i].name, only)) continue;
    int failed_before = ts_test_failed;
    run_case(cl, &cases[i], i);
    if (ts_test_failed > failed_before) fprintf(stderr, "  (case \"%s\", seed %llu)\n", cases[i].name,
                                                (unsigned long long)ts_test_seed);
  }
  ts_client_free(cl);
  return ts_test_finish();
}
