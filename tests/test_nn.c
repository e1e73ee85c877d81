/* test_nn.c — parameter sets (declaration, shape errors, seeded init and its
 * distribution), layers and models (names, shapes, PyTorch init bounds),
 * learning-rate schedules at known steps, and — through the runtime — a
 * linear layer, batch-norm running statistics, SGD with momentum and AdamW
 * steps against the same arithmetic done by hand in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

#define NEAR(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol))

static const int64_t S4[1] = {4};

/* mean and standard deviation of n floats */
static void moments(const float *v, int64_t n, double *mean, double *std) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) s += v[i];
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
  *std = sqrt(s2 / (double)n);
}

static void test_params(void) {
  ts_params *p = ts_params_new(7);
  ts_graph *g = ts_graph_new();
  int64_t ws[2] = {3, 4};
  ts_init fan = {TS_INIT_FAN_IN_UNIFORM, 0, 4};
  ts_tensor w = ts_params_use(p, g, "w", TS_F32, 2, ws, fan, true);
  CHECK(w != TS_NONE, "declare w: %s", ts_last_error());
  CHECK(ts_params_count(p) == 1 && ts_params_numel(p, 0) == 12, "count / numel");
  CHECK(strcmp(ts_params_name(p, 0), "w") == 0 && ts_params_find(p, "w") == 0 && ts_params_find(p, "v") == -1,
        "names");
  CHECK(strcmp(ts_input_name(g, w), "w") == 0, "the graph input carries the parameter's name");
  CHECK(ts_params_use(p, g, "w", TS_F32, 2, ws, fan, true) == w, "second use in one graph: same node");
  int nin = ts_graph_num_inputs(g);
  ts_tensor s = ts_params_use(p, g, "state", TS_F32, 1, S4, (ts_init){TS_INIT_ZEROS, 0, 0}, false);
  CHECK(s != TS_NONE && ts_graph_num_inputs(g) == nin + 1, "state declared");
  CHECK(ts_params_trainable(p, 0) && !ts_params_trainable(p, 1), "trainable flags");
  CHECK(ts_params_trainable_numel(p) == 12, "trainable numel %lld", (long long)ts_params_trainable_numel(p));

  int64_t bad[2] = {4, 3};
  CHECK(ts_params_use(p, g, "w", TS_F32, 2, bad, fan, true) == TS_NONE, "shape mismatch rejected");
  CHECK(strstr(ts_last_error(), "f32[3,4]") && strstr(ts_last_error(), "f32[4,3]") &&
            strstr(ts_last_error(), "w"),
        "mismatch names both shapes: %s", ts_last_error());
  CHECK(ts_params_use(p, g, "w", TS_BF16, 2, ws, fan, true) == TS_NONE && strstr(ts_last_error(), "bf16[3,4]"),
        "dtype mismatch: %s", ts_last_error());
  int64_t zero[1] = {0};
  CHECK(ts_params_use(p, g, "z", TS_F32, 1, zero, fan, true) == TS_NONE && strstr(ts_last_error(), "z"),
        "zero dim rejected: %s", ts_last_error());
  CHECK(ts_params_use(p, g, "i", TS_I32, 1, S4, fan, true) == TS_NONE, "random init of an int param rejected");
  CHECK(ts_params_use(p, g, "f", TS_F32, 1, S4, (ts_init){TS_INIT_FAN_IN_UNIFORM, 0, 0}, true) == TS_NONE,
        "fan_in 0 rejected");
  CHECK(ts_params_count(p) == 2, "failed declarations leave no parameter (%d)", ts_params_count(p));
  ts_input(g, "taken", TS_F32, 1, S4);
  CHECK(ts_params_use(p, g, "taken", TS_F32, 2, ws, fan, true) == TS_NONE, "graph input of another shape");

  /* another graph binds the same parameter by name, values unchanged */
  ts_graph *g2 = ts_graph_new();
  ts_tensor w2 = ts_params_use(p, g2, "w", TS_F32, 2, ws, fan, true);
  CHECK(w2 != TS_NONE && strcmp(ts_input_name(g2, w2), "w") == 0, "use in a second graph");

  /* seeded: same seed -> same values; another seed -> others; in bounds */
  ts_params *q = ts_params_new(7), *r = ts_params_new(8);
  ts_graph *g3 = ts_graph_new();
  ts_params_use(q, g3, "w", TS_F32, 2, ws, fan, true);
  ts_params_use(r, g3, "w", TS_F32, 2, ws, fan, true);
  const float *a = ts_params_host(p, 0), *b = ts_params_host(q, 0), *c = ts_params_host(r, 0);
  CHECK(memcmp(a, b, 12 * sizeof *a) == 0, "same seed, same init");
  CHECK(memcmp(a, c, 12 * sizeof *a) != 0, "other seed, other init");
  bool in = true;
  for (int i = 0; i < 12; i++) in = in && a[i] >= -0.5f && a[i] < 0.5f;
  CHECK(in, "U(-1/sqrt(4), 1/sqrt(4))");
  const float *st = ts_params_host(p, 1);
  CHECK(st[0] == 0 && st[3] == 0, "zeros init");
  CHECK(ts_params_host(p, 5) == NULL && strstr(ts_last_error(), "5"), "index out of range");
  ts_params_free(q);
  ts_params_free(r);
  ts_graph_free(g3);
  ts_graph_free(g2);
  ts_graph_free(g);
  ts_params_free(p);
}

static void test_layers_init(void) {
  ts_params *p = ts_params_new(1234);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  int64_t xs[2] = {8, 784};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, xs);
  ts_tensor y = ts_nn_linear(&m, "big", x, 784, 512, true);
  CHECK(y != TS_NONE && ts_tensor_rank(g, y) == 2 && ts_tensor_shape(g, y)[1] == 512, "linear (8, 512): %s",
        ts_last_error());
  int wi = ts_params_find(p, "big.weight"), bi = ts_params_find(p, "big.bias");
  CHECK(wi >= 0 && bi >= 0, "linear params named big.weight / big.bias");
  const float *w = ts_params_host(p, wi);
  double bound = 1.0 / sqrt(784.0), mean, std, lo = 1, hi = -1;
  for (int64_t i = 0; i < 512 * 784; i++) lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
  moments(w, 512 * 784, &mean, &std);
  CHECK(lo >= -bound && hi <= bound && hi - lo > 1.99 * bound, "weight range [%g, %g] vs bound %g", lo, hi, bound);
  /* U(-b, b): mean 0, std b/sqrt(3); over 401408 draws the mean's sd is 5.7e-5 */
  CHECK(fabs(mean) < 3e-4, "weight mean %g", mean);
  CHECK(fabs(std / (bound / sqrt(3.0)) - 1) < 0.01, "weight std %g vs %g", std, bound / sqrt(3.0));
  const float *bb = ts_params_host(p, bi);
  bool bin = true;
  for (int i = 0; i < 512; i++) bin = bin && fabs(bb[i]) <= bound;
  CHECK(bin, "bias in the same bound");

  int64_t ls[3] = {2, 3, 784};
  ts_tensor x3 = ts_input(g, "x3", TS_F32, 3, ls);
  ts_tensor y3 = ts_nn_linear(&m, "big", x3, 784, 512, true);
  CHECK(y3 != TS_NONE && ts_tensor_rank(g, y3) == 3 && ts_tensor_shape(g, y3)[2] == 512,
        "rank-3 linear shares the weight: %s", ts_last_error());
  CHECK(ts_params_count(p) == 2, "no new params for a shared layer");
  CHECK(ts_nn_linear(&m, "big", x, 700, 512, true) == TS_NONE && strstr(ts_last_error(), "784"),
        "in_features mismatch: %s", ts_last_error());

  int64_t is[4] = {2, 32, 10, 10};
  ts_tensor img = ts_input(g, "img", TS_F32, 4, is);
  ts_tensor cv = ts_nn_conv2d(&m, "conv", img, 32, 64, 3, 1, 1, true);
  CHECK(cv != TS_NONE && ts_tensor_shape(g, cv)[1] == 64 && ts_tensor_shape(g, cv)[2] == 10, "conv same-pad: %s",
        ts_last_error());
  const float *cw = ts_params_host(p, ts_params_find(p, "conv.weight"));
  double cb = 1.0 / sqrt(32.0 * 9.0);
  lo = 1, hi = -1;
  for (int64_t i = 0; i < 64 * 32 * 9; i++) lo = fmin(lo, cw[i]), hi = fmax(hi, cw[i]);
  CHECK(lo >= -cb && hi <= cb && hi - lo > 1.9 * cb, "conv weight in U(-1/sqrt(288), ..): [%g, %g]", lo, hi);
  CHECK(ts_params_numel(p, ts_params_find(p, "conv.bias")) == 64, "conv bias (64)");

  ts_tensor bn = ts_nn_batch_norm(&m, "bn", cv, 64);
  CHECK(bn != TS_NONE, "batch norm: %s", ts_last_error());
  int rv = ts_params_find(p, "bn.running_var"), rm = ts_params_find(p, "bn.running_mean");
  CHECK(rv >= 0 && rm >= 0 && !ts_params_trainable(p, rv) && !ts_params_trainable(p, rm), "running stats state");
  CHECK(((float *)ts_params_host(p, rv))[5] == 1.0f && ((float *)ts_params_host(p, rm))[5] == 0.0f &&
            ((float *)ts_params_host(p, ts_params_find(p, "bn.weight")))[0] == 1.0f &&
            ((float *)ts_params_host(p, ts_params_find(p, "bn.bias")))[0] == 0.0f,
        "bn init 1 / 0 / 0 / 1");
  CHECK(m.n_updates == 2, "training batch norm records 2 updates (%d)", m.n_updates);
  int outs = ts_graph_num_outputs(g);
  CHECK_OK(ts_nn_finish(&m));
  CHECK(ts_graph_num_outputs(g) == outs + 2 && m.n_updates == 0, "finish adds 2 aliased outputs");

  ts_tensor ln = ts_nn_layer_norm(&m, "ln", y, 512);
  CHECK(ln != TS_NONE && ts_params_find(p, "ln.weight") >= 0, "layer norm: %s", ts_last_error());
  CHECK(ts_nn_layer_norm(&m, "ln2", y, 500) == TS_NONE, "layer norm dim mismatch");

  int64_t ids[2] = {4, 6};
  ts_tensor tok = ts_input(g, "tok", TS_I32, 2, ids);
  ts_tensor emb = ts_nn_embedding(&m, "emb", tok, 1000, 64);
  CHECK(emb != TS_NONE && ts_tensor_rank(g, emb) == 3 && ts_tensor_shape(g, emb)[2] == 64, "embedding: %s",
        ts_last_error());
  moments(ts_params_host(p, ts_params_find(p, "emb.weight")), 64000, &mean, &std);
  CHECK(fabs(mean) < 0.02 && fabs(std - 1) < 0.02, "embedding ~ N(0, 1): mean %g std %g", mean, std);

  CHECK(ts_nn_dropout(&m, y, 0.5) == y, "dropout without a seed is the identity");
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  m.seed = seed;
  ts_tensor d1 = ts_nn_dropout(&m, y, 0.5), d2 = ts_nn_dropout(&m, y, 0.5);
  CHECK(d1 != y && d2 != y && d1 != TS_NONE && m.next_key == 2, "dropout with a seed uses keys 0, 1");
  m.training = false;
  CHECK(ts_nn_dropout(&m, y, 0.5) == y, "dropout in eval is the identity");
  ts_graph_free(g);
  ts_params_free(p);
}

static void test_models(void) {
  ts_params *p = ts_params_new(1);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, true, ts_input(g, "seed", TS_I64, 0, NULL));
  int64_t xs[4] = {16, 1, 28, 28};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs);
  ts_tensor y = ts_model_mlp(&m, x);
  CHECK(y != TS_NONE && ts_tensor_shape(g, y)[0] == 16 && ts_tensor_shape(g, y)[1] == 10, "mlp logits: %s",
        ts_last_error());
  const char *names[6] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"};
  for (int i = 0; i < 6 && i < ts_params_count(p); i++)
    CHECK(strcmp(ts_params_name(p, i), names[i]) == 0, "mlp param %d is %s", i, ts_params_name(p, i));
  CHECK(ts_params_trainable_numel(p) == 669706, "mlp has %lld params", (long long)ts_params_trainable_numel(p));
  ts_graph_free(g);
  ts_params_free(p);

  p = ts_params_new(1);
  g = ts_graph_new();
  ts_nn_init(&m, g, p, true, ts_input(g, "seed", TS_I64, 0, NULL));
  x = ts_input(g, "x", TS_F32, 4, xs);
  y = ts_model_mnist_cnn(&m, x);
  CHECK(y != TS_NONE && ts_tensor_shape(g, y)[0] == 16 && ts_tensor_shape(g, y)[1] == 10, "cnn logits: %s",
        ts_last_error());
  /* PyTorch's examples/mnist Net has 1,199,882 parameters */
  CHECK(ts_params_trainable_numel(p) == 1199882, "cnn has %lld params", (long long)ts_params_trainable_numel(p));
  const char *cn[8] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                       "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
  for (int i = 0; i < 8 && i < ts_params_count(p); i++)
    CHECK(strcmp(ts_params_name(p, i), cn[i]) == 0, "cnn param %d is %s", i, ts_params_name(p, i));
  CHECK(m.next_key == 2, "two dropout layers");
  int64_t bad[4] = {16, 3, 28, 28};
  CHECK(ts_model_mnist_cnn(&m, ts_input(g, "x3", TS_F32, 4, bad)) == TS_NONE &&
            strstr(ts_last_error(), "(16, 3, 28, 28)"),
        "cnn rejects 3 channels: %s", ts_last_error());
  ts_graph_free(g);
  ts_params_free(p);
}

static void test_schedule(void) {
  ts_lr_schedule c = {TS_LR_CONSTANT, 0.1, 0, 100, 0};
  CHECK(ts_lr_at(&c, 0) == 0.1 && ts_lr_at(&c, 1000) == 0.1, "constant");
  c.warmup_steps = 10;
  CHECK(ts_lr_at(&c, 0) == 0 && NEAR(ts_lr_at(&c, 5), 0.05, 1e-15) && ts_lr_at(&c, 10) == 0.1,
        "constant with warm-up");
  ts_lr_schedule s = {TS_LR_COSINE, 1.0, 10, 110, 0.1};
  CHECK(ts_lr_at(&s, 0) == 0.0, "cosine warm-up starts at 0");
  CHECK(NEAR(ts_lr_at(&s, 4), 0.4, 1e-15), "warm-up step 4: %g", ts_lr_at(&s, 4));
  CHECK(NEAR(ts_lr_at(&s, 10), 1.0, 1e-15), "peak at the end of warm-up: %g", ts_lr_at(&s, 10));
  CHECK(NEAR(ts_lr_at(&s, 60), 0.55, 1e-12), "half way: %g", ts_lr_at(&s, 60));
  /* progress 1/4: 0.1 + 0.45 * (1 + cos(pi/4)) */
  CHECK(NEAR(ts_lr_at(&s, 35), 0.1 + 0.45 * (1 + sqrt(0.5)), 1e-12), "quarter: %g", ts_lr_at(&s, 35));
  CHECK(NEAR(ts_lr_at(&s, 110), 0.1, 1e-12) && NEAR(ts_lr_at(&s, 500), 0.1, 1e-12), "min after the end");
  ts_lr_schedule z = {TS_LR_COSINE, 0.5, 0, 4, 0};
  CHECK(NEAR(ts_lr_at(&z, 0), 0.5, 1e-15) && NEAR(ts_lr_at(&z, 2), 0.25, 1e-12), "cosine without warm-up");
}

/* ---- through the runtime ---- */

/* One compiled step: inputs that are parameters come from the set, the rest
 * from named buffers. */
typedef struct {
  ts_client *c;
  ts_executable *e;
  ts_graph *g;
  ts_params *p;
  int n_extra;
  const char *extra_name[4];
  ts_buffer *extra[4];
} step_t;

static int step_run(step_t *s) {
  int n = ts_graph_num_inputs(s->g);
  ts_buffer *in[64];
  for (int i = 0; i < n; i++) {
    const char *name = ts_input_name(s->g, ts_graph_input(s->g, i));
    int k = ts_params_find(s->p, name);
    in[i] = NULL;
    if (k >= 0) in[i] = ts_params_buffer(s->p, s->c, k);
    for (int j = 0; j < s->n_extra; j++)
      if (strcmp(s->extra_name[j], name) == 0) in[i] = s->extra[j];
    if (!in[i]) {
      fprintf(stderr, "no buffer for input %s\n", name);
      return -1;
    }
  }
  ts_buffer *out[64] = {0};
  int rc = ts_execute(s->e, in, out);
  for (int o = 0; o < ts_graph_num_outputs(s->g); o++) {
    bool aliased = false;
    for (int i = 0; i < n; i++) aliased = aliased || out[o] == in[i];
    if (!aliased) ts_buffer_free(out[o]);
  }
  return rc;
}

static ts_buffer *scalar_buf(ts_client *c, float v) { return ts_buffer_from_host(c, TS_F32, 0, NULL, &v); }

static const float P0[4] = {0.5f, -1.25f, 2.0f, 0.1f};
static const float G1[4] = {0.1f, -0.2f, 0.3f, -0.4f};
static const float G2[4] = {0.05f, 0.5f, -0.25f, 1.0f};

/* Builds the update of one (4) parameter "w" from the gradient input "grad",
 * runs two steps (gradients G1 then G2, lr `lr`) and leaves the parameter
 * set synced to the host. */
static ts_params *optim_run(ts_client *c, const ts_optim_config *cfg, float lr) {
  ts_params *p = ts_params_new(3);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  ts_tensor w = ts_params_use(p, g, "w", TS_F32, 1, S4, (ts_init){TS_INIT_ZEROS, 0, 0}, true);
  memcpy(ts_params_host(p, 0), P0, sizeof P0);
  ts_tensor gr = ts_input(g, "grad", TS_F32, 1, S4);
  ts_tensor lr_in = ts_input(g, "lr", TS_F32, 0, NULL), step_in = ts_input(g, "step", TS_F32, 0, NULL);
  if (ts_optim_apply(&m, cfg, lr_in, step_in, 1, &w, &gr) != 0) {
    CHECK(0, "optim_apply: %s", ts_last_error());
    goto fail;
  }
  step_t s = {c, ts_compile(c, g, NULL), g, p, 3, {"grad", "lr", "step"}, {NULL}};
  if (!s.e) {
    CHECK(0, "compile: %s", ts_last_error());
    goto fail;
  }
  s.extra[0] = ts_buffer_from_host(c, TS_F32, 1, S4, G1);
  s.extra[1] = scalar_buf(c, lr);
  s.extra[2] = scalar_buf(c, 1.0f);
  CHECK(step_run(&s) == 0, "step 1: %s", ts_last_error());
  float two = 2.0f;
  ts_buffer_write(s.extra[0], G2, sizeof G2);
  ts_buffer_write(s.extra[2], &two, sizeof two);
  CHECK(step_run(&s) == 0, "step 2: %s", ts_last_error());
  CHECK_OK(ts_params_sync_host(p));
  for (int j = 0; j < 3; j++) ts_buffer_free(s.extra[j]);
  ts_executable_free(s.e);
  ts_graph_free(g);
  return p;
fail:
  ts_graph_free(g);
  ts_params_free(p);
  return NULL;
}

static void check_vec(ts_params *p, const char *name, const double *want, const char *what) {
  int k = ts_params_find(p, name);
  CHECK(k >= 0, "%s: state %s exists", what, name);
  if (k < 0) return;
  const float *v = ts_params_host(p, k);
  for (int i = 0; i < 4; i++)
    CHECK(NEAR(v[i], want[i], 1e-6), "%s: %s[%d] = %.9g, by hand %.9g", what, name, i, v[i], want[i]);
}

static void test_sgd(ts_client *c) {
  for (int nesterov = 0; nesterov < 2; nesterov++) {
    ts_optim_config cfg = {.kind = TS_OPTIM_SGD, .momentum = 0.9, .nesterov = nesterov, .weight_decay = 0.01};
    ts_params *p = optim_run(c, &cfg, 0.125f);
    if (!p) continue;
    double w[4], buf[4] = {0};
    const float *gs[2] = {G1, G2};
    for (int i = 0; i < 4; i++) w[i] = P0[i];
    for (int t = 0; t < 2; t++)
      for (int i = 0; i < 4; i++) {
        double d = gs[t][i] + 0.01 * w[i];
        buf[i] = 0.9 * buf[i] + d;
        d = nesterov ? d + 0.9 * buf[i] : buf[i];
        w[i] -= 0.125 * d;
      }
    const char *what = nesterov ? "sgd nesterov" : "sgd momentum";
    check_vec(p, "w", w, what);
    check_vec(p, "w.momentum_buffer", buf, what);
    ts_params_free(p);
  }
  ts_optim_config plain = {.kind = TS_OPTIM_SGD};
  ts_params *p = optim_run(c, &plain, 0.5f);
  if (p) {
    double w[4];
    for (int i = 0; i < 4; i++) w[i] = P0[i] - 0.5 * G1[i] - 0.5 * G2[i];
    check_vec(p, "w", w, "plain sgd");
    CHECK(ts_params_count(p) == 1, "plain SGD keeps no state");
    ts_params_free(p);
  }
}

static void test_adamw(ts_client *c) {
  /* zeros in the config mean betas 0.9 / 0.999 and eps 1e-8 */
  ts_optim_config cfgs[2] = {{.kind = TS_OPTIM_ADAMW, .weight_decay = 0.1},
                             {.kind = TS_OPTIM_ADAMW, .weight_decay = 0, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3}};
  for (int k = 0; k < 2; k++) {
    ts_params *p = optim_run(c, &cfgs[k], 0.01f);
    if (!p) continue;
    double b1 = k ? 0.8 : 0.9, b2 = k ? 0.99 : 0.999, eps = k ? 1e-3 : 1e-8, wd = cfgs[k].weight_decay;
    double lr = (double)0.01f, w[4], m[4] = {0}, v[4] = {0};
    const float *gs[2] = {G1, G2};
    for (int i = 0; i < 4; i++) w[i] = P0[i];
    for (int t = 1; t <= 2; t++)
      for (int i = 0; i < 4; i++) {
        double gi = gs[t - 1][i];
        w[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        w[i] -= lr * (m[i] / (1 - pow(b1, t))) / (sqrt(v[i] / (1 - pow(b2, t))) + eps);
      }
    const char *what = k ? "adamw custom betas" : "adamw defaults";
    check_vec(p, "w", w, what);
    check_vec(p, "w.exp_avg", m, what);
    check_vec(p, "w.exp_avg_sq", v, what);
    ts_params_free(p);
  }
}

static void test_optim_errors(void) {
  ts_params *p = ts_params_new(1);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  ts_tensor st = ts_params_use(p, g, "st", TS_F32, 1, S4, (ts_init){TS_INIT_ZEROS, 0, 0}, false);
  ts_tensor w = ts_params_use(p, g, "w", TS_F32, 1, S4, (ts_init){TS_INIT_ZEROS, 0, 0}, true);
  int64_t s5[1] = {5};
  ts_tensor g4 = ts_input(g, "g4", TS_F32, 1, S4), g5 = ts_input(g, "g5", TS_F32, 1, s5);
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_optim_config cfg = {.kind = TS_OPTIM_ADAMW};
  CHECK(ts_optim_apply(&m, &cfg, lr, lr, 1, &st, &g4) == -1 && strstr(ts_last_error(), "st"),
        "state is not trainable: %s", ts_last_error());
  CHECK(ts_optim_apply(&m, &cfg, lr, lr, 1, &w, &g5) == -1 && strstr(ts_last_error(), "gradient of w"),
        "gradient shape mismatch: %s", ts_last_error());
  CHECK(ts_optim_apply(&m, &cfg, g4, lr, 1, &w, &g4) == -1 && strstr(ts_last_error(), "lr"),
        "lr must be rank 0: %s", ts_last_error());
  CHECK(ts_optim_apply(&m, &cfg, lr, lr, 1, &g4, &g4) == -1 && strstr(ts_last_error(), "g4"),
        "a non-parameter input: %s", ts_last_error());
  ts_graph_free(g);
  ts_params_free(p);
}

/* y = x W^T + b for x (2, 3, 5): checks the contraction is over W's dim 1. */
static void test_linear_values(ts_client *c) {
  ts_params *p = ts_params_new(11);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, false, TS_NONE);
  int64_t xs[3] = {2, 3, 5};
  ts_tensor x = ts_input(g, "x", TS_F32, 3, xs);
  ts_tensor y = ts_nn_linear(&m, "lin", x, 5, 4, true);
  ts_graph_add_output(g, y);
  float xv[30];
  for (int i = 0; i < 30; i++) xv[i] = (float)(i % 7) * 0.25f - 0.5f;
  step_t s = {c, ts_compile(c, g, NULL), g, p, 1, {"x"}, {ts_buffer_from_host(c, TS_F32, 3, xs, xv)}};
  CHECK(s.e != NULL, "compile linear: %s", ts_last_error());
  if (s.e) {
    ts_buffer *in[3] = {NULL};
    for (int i = 0; i < ts_graph_num_inputs(g); i++) {
      const char *name = ts_input_name(g, ts_graph_input(g, i));
      int k = ts_params_find(p, name);
      in[i] = k >= 0 ? ts_params_buffer(p, c, k) : s.extra[0];
    }
    ts_buffer *out[1] = {NULL};
    CHECK(ts_execute(s.e, in, out) == 0, "execute linear: %s", ts_last_error());
    float yv[24] = {0};
    if (out[0]) ts_buffer_read(out[0], yv, sizeof yv);
    const float *W = ts_params_host(p, ts_params_find(p, "lin.weight")); // (4, 5)
    const float *B = ts_params_host(p, ts_params_find(p, "lin.bias"));
    double worst = 0;
    for (int r = 0; r < 6; r++)
      for (int o = 0; o < 4; o++) {
        double acc = B[o];
        for (int i = 0; i < 5; i++) acc += (double)xv[r * 5 + i] * W[o * 5 + i];
        worst = fmax(worst, fabs(acc - yv[r * 4 + o]));
      }
    CHECK(worst < 1e-5, "linear matches x W^T + b (max error %g)", worst);
    ts_buffer_free(out[0]);
    ts_executable_free(s.e);
  }
  ts_buffer_free(s.extra[0]);
  ts_graph_free(g);
  ts_params_free(p);
}

/* Training batch norm on x (4, 2): running_mean = 0.1 * mean, running_var =
 * 0.9 + 0.1 * unbiased var, both updated in place through aliased outputs. */
static void test_batch_norm_stats(ts_client *c) {
  ts_params *p = ts_params_new(5);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  int64_t xs[2] = {4, 2};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, xs);
  ts_graph_add_output(g, ts_nn_batch_norm(&m, "bn", x, 2));
  CHECK_OK(ts_nn_finish(&m));
  const float xv[8] = {1, 10, 2, 20, 3, 30, 6, 40};
  step_t s = {c, ts_compile(c, g, NULL), g, p, 1, {"x"}, {ts_buffer_from_host(c, TS_F32, 2, xs, xv)}};
  CHECK(s.e != NULL, "compile batch norm: %s", ts_last_error());
  if (s.e) {
    CHECK(step_run(&s) == 0, "execute batch norm: %s", ts_last_error());
    CHECK_OK(ts_params_sync_host(p));
    const float *rm = ts_params_host(p, ts_params_find(p, "bn.running_mean"));
    const float *rv = ts_params_host(p, ts_params_find(p, "bn.running_var"));
    /* channel 0: 1 2 3 6, mean 3, unbiased var 14/3; channel 1: 10 20 30 40, mean 25, var 500/3 */
    CHECK(NEAR(rm[0], 0.3, 1e-6) && NEAR(rm[1], 2.5, 1e-5), "running mean %g %g", rm[0], rm[1]);
    CHECK(NEAR(rv[0], 0.9 + 1.4 / 3, 1e-6) && NEAR(rv[1], 0.9 + 50.0 / 3, 1e-5), "running var (unbiased) %g %g",
          rv[0], rv[1]);
    ts_executable_free(s.e);
  }
  ts_buffer_free(s.extra[0]);
  ts_graph_free(g);
  ts_params_free(p);
}

/* Host and device copies: a read through ts_params_host never overwrites a
 * newer device value; a write through it is uploaded by the next
 * ts_params_buffer; a second client gets the newest value. */
static void test_host_device(ts_client *c) {
  ts_params *p = ts_params_new(9);
  ts_graph *g = ts_graph_new();
  ts_params_use(p, g, "v", TS_F32, 1, S4, (ts_init){TS_INIT_ONES, 0, 0}, true);
  ts_buffer *b = ts_params_buffer(p, c, 0);
  CHECK(b != NULL, "buffer: %s", ts_last_error());
  if (!b) goto done;
  float dv[4] = {2, 3, 4, 5}, got[4] = {0};
  ts_buffer_write(b, dv, sizeof dv); /* what an execute with an aliased output does */
  const float *h = ts_params_host(p, 0);
  CHECK(h && h[0] == 2 && h[3] == 5, "host read pulls the device value");
  CHECK(ts_params_buffer(p, c, 0) == b, "same buffer for the same client");
  dv[0] = 7;
  ts_buffer_write(b, dv, sizeof dv);
  CHECK(ts_params_buffer(p, c, 0) == b, "buffer again");
  ts_buffer_read(b, got, sizeof got);
  CHECK(got[0] == 7, "a read-only host look did not clobber the device (%g)", got[0]);
  CHECK_OK(ts_params_sync_host(p));
  CHECK(((float *)ts_params_host(p, 0))[0] == 7, "sync_host pulls");
  float *w = ts_params_host(p, 0);
  w[1] = -1;
  CHECK_OK(ts_params_sync_host(p));
  CHECK(w[1] == -1, "a host write survives sync_host");
  ts_params_buffer(p, c, 0);
  ts_buffer_read(b, got, sizeof got);
  CHECK(got[1] == -1 && got[0] == 7, "a host write is uploaded (%g %g)", got[0], got[1]);
  ts_client *c2 = ts_client_new(NULL);
  if (c2) {
    dv[2] = 42;
    ts_buffer_write(b, dv, sizeof dv);
    ts_buffer *b2 = ts_params_buffer(p, c2, 0);
    CHECK(b2 && b2 != b, "second client, second buffer");
    if (b2) ts_buffer_read(b2, got, sizeof got);
    CHECK(got[2] == 42, "second client gets the newest value (%g)", got[2]);
    ts_params_free(p); /* frees the buffers: before their clients */
    p = NULL;
    ts_client_free(c2);
  }
done:
  ts_params_free(p);
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_nn", 1);
  test_params();
  test_layers_init();
  test_models();
  test_schedule();
  test_optim_errors();
  ts_client *c = ts_client_new(NULL);
  CHECK(c != NULL, "client: %s", ts_last_error());
  if (c) {
    test_host_device(c);
    test_linear_values(c);
    test_batch_norm_stats(c);
    test_sgd(c);
    test_adamw(c);
    ts_client_free(c);
  }
  return ts_test_finish();
}
