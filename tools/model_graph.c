/* model_graph.c — the programs `tessel train` runs and `tessel inspect`
 * shows: the training step (forward, loss, gradients, optimizer update) and
 * the evaluation forward, for the MLP, the MNIST CNN, the CIFAR CNN, the
 * ResNets (tessel/nn.h ts_model_resnet) and the GPT (ts_model_gpt: token
 * inputs x, y (B, T) i32; its evaluation program returns the mean loss, and
 * a (1, T) logits program serves --sample). */
#include "model_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h" /* set_error */

/* The CIFAR CNN: three 3x3 conv (pad 1) + ReLU + 2x2 max-pool stages (32, 64,
 * 128 channels), fc 2048-256, ReLU, dropout 0.5, fc 256-10.
 * x (B, 3, 32, 32) -> logits (B, 10). */
static ts_tensor cifar_cnn(ts_nn *m, ts_tensor x) {
  ts_graph *g = m->g;
  ts_pool_params pool = {.kernel = {2, 2}, .stride = {2, 2}};
  ts_tensor h = ts_max_pool2d(g, ts_relu(g, ts_nn_conv2d(m, "conv1", x, 3, 32, 3, 1, 1, true)), &pool);
  h = ts_max_pool2d(g, ts_relu(g, ts_nn_conv2d(m, "conv2", h, 32, 64, 3, 1, 1, true)), &pool);   // (B, 64, 8, 8)
  h = ts_max_pool2d(g, ts_relu(g, ts_nn_conv2d(m, "conv3", h, 64, 128, 3, 1, 1, true)), &pool);  // (B, 128, 4, 4)
  if (h == TS_NONE) return TS_NONE;
  int64_t flat[2] = {ts_tensor_shape(g, h)[0], 2048};
  h = ts_relu(g, ts_nn_linear(m, "fc1", ts_reshape(g, h, 2, flat), 2048, 256, true)); // (B, 256)
  h = ts_nn_dropout(m, h, 0.5);
  return ts_nn_linear(m, "fc2", h, 256, 10, true); // (B, 10)
}

bool model_graph_is_resnet(int model) {
  return model == MODEL_GRAPH_RESNET20 || model == MODEL_GRAPH_RESNET18 || model == MODEL_GRAPH_RESNET50;
}

int model_graph_layout(int model, const char *model_name, int layout) {
  bool resnet = model_graph_is_resnet(model);
  if (layout == TS_LAYOUT_NHWC && !resnet) {
    return set_error("--layout nhwc is for the resnets (resnet20, resnet18, resnet50), not --model %s", model_name);
  }
  return layout >= 0 ? layout : resnet ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW;
}

/* The ResNets run in the spec's layout; the other models are NCHW-only. */
static ts_layout resnet_layout(const model_graph_spec *o) {
  return model_graph_is_resnet(o->model) ? o->layout : TS_LAYOUT_NCHW;
}

static ts_tensor build_model(ts_nn *m, const model_graph_spec *o, ts_tensor x) {
  int classes = o->classes ? o->classes : 10;
  switch (o->model) {
  case MODEL_GRAPH_MLP: return ts_model_mlp(m, x);
  case MODEL_GRAPH_RESNET20: return ts_model_resnet(m, TS_RESNET20, x, classes);
  case MODEL_GRAPH_RESNET18: return ts_model_resnet(m, TS_RESNET18, x, classes);
  case MODEL_GRAPH_RESNET50: return ts_model_resnet(m, TS_RESNET50, x, classes);
  default: return o->c == 3 ? cifar_cnn(m, x) : ts_model_mnist_cnn(m, x);
  }
}

/* The training step: inputs params + optimizer state, x (B,C,H,W) f32,
 * y (B) i32, lr, step (f32 scalars), seed (i64 scalar, dropout); output 0 is
 * the loss, the rest are the in-place updates. */
/* x and y of the GPT: (batch, seq) i32 tokens. */
static void gpt_inputs(ts_graph *g, const model_graph_spec *o, int64_t batch, ts_tensor *x, ts_tensor *y) {
  int64_t ts[2] = {batch, o->gpt.seq};
  *x = ts_input(g, "x", TS_I32, 2, ts);
  if (y) *y = ts_input(g, "y", TS_I32, 2, ts);
}

ts_graph *model_train_graph(const model_graph_spec *o, ts_params *p) {
  ts_graph *g = ts_graph_new();
  bool gpt = o->model == MODEL_GRAPH_GPT;
  int64_t xs[4] = {o->batch, o->c, o->h, o->w};
  ts_tensor x, y;
  if (gpt) gpt_inputs(g, o, o->batch, &x, &y);               // (B, T), (B, T)
  else {
    x = ts_input(g, "x", TS_F32, 4, xs);                     // (B, C, H, W)
    y = ts_input(g, "y", TS_I32, 1, &o->batch);              // (B)
  }
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, seed);
  m.sync_bn = o->ddp && o->sync_bn; /* --sync-bn: batch norm over every replica's batch */
  m.layout = resnet_layout(o);
  ts_tensor loss = gpt ? ts_gpt_loss(g, ts_model_gpt(&m, &o->gpt, x), y) // nats per token
                       : ts_cross_entropy(g, build_model(&m, o, x), y); // logits (B, classes)
  /* DDP: every replica reports the mean loss of the global batch, averaged
   * with the last gradient bucket (below); output 0 either way */
  if (loss == TS_NONE || (!o->ddp && ts_graph_add_output(g, loss) != 0)) goto fail;

  int np = ts_params_count(p);
  ts_tensor *wrt = calloc((size_t)np + 1, sizeof *wrt);
  ts_tensor *grads = calloc((size_t)np + 1, sizeof *grads);
  int n = 0;
  for (int i = 0; i < np; i++) {
    if (!ts_params_trainable(p, i)) continue;
    ts_tensor t = ts_graph_find_input(g, ts_params_name(p, i));
    if (t != TS_NONE) wrt[n++] = t;
  }
  ts_optim_config cfg = o->optim;
  ts_loss_scaler sc;
  bool scaled = o->amp == TS_F16;
  ts_tensor objective = scaled ? ts_loss_scaler_scale(&m, &sc, &o->scaler, loss) : loss;
  int rc = objective == TS_NONE ? -1 : ts_grad(g, objective, n, wrt, grads);
  ts_tensor shown = loss;
  if (rc == 0 && o->ddp &&
      (ts_ddp_average_gradients_logged(g, n, grads, o->ddp_bucket_bytes, 1, &shown) < 0 ||
       ts_graph_add_output(g, shown) != 0))
    rc = -1;
  if (rc == 0 && scaled) rc = ts_loss_scaler_unscale(&m, &sc, n, grads);
  if (rc == 0)
    rc = scaled ? ts_optim_apply_masked(&m, &cfg, lr, sc.optim_step, n, wrt, grads, sc.finite)
                : ts_optim_apply(&m, &cfg, lr, step, n, wrt, grads);
  if (rc == 0) rc = ts_nn_finish(&m);
  free(wrt);
  free(grads);
  if (rc == 0) return g;
fail:
  ts_graph_free(g);
  return NULL;
}

/* Evaluation forward: x (E,C,H,W) -> logits (E,classes), training off. */
ts_graph *model_eval_graph(const model_graph_spec *o, int64_t e, ts_params *p) {
  ts_graph *g = ts_graph_new();
  if (o->model == MODEL_GRAPH_GPT) { /* x, y (E, T) -> the mean loss */
    ts_tensor x, y;
    gpt_inputs(g, o, e, &x, &y);
    ts_nn m;
    ts_nn_init(&m, g, p, false, TS_NONE);
    ts_tensor loss = ts_gpt_loss(g, ts_model_gpt(&m, &o->gpt, x), y);
    if (loss == TS_NONE || ts_graph_add_output(g, loss) != 0) {
      ts_graph_free(g);
      return NULL;
    }
    return g;
  }
  int64_t xs[4] = {e, o->c, o->h, o->w};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs);
  ts_nn m;
  ts_nn_init(&m, g, p, false, TS_NONE);
  m.layout = resnet_layout(o);
  ts_tensor logits = build_model(&m, o, x);
  if (logits == TS_NONE || ts_graph_add_output(g, logits) != 0 || ts_nn_finish(&m) != 0) {
    ts_graph_free(g);
    return NULL;
  }
  return g;
}

ts_graph *model_gpt_logits_graph(const model_graph_spec *o, ts_params *p) {
  ts_graph *g = ts_graph_new();
  ts_tensor x;
  gpt_inputs(g, o, 1, &x, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, false, TS_NONE);
  ts_tensor logits = ts_model_gpt(&m, &o->gpt, x); // (1, T, V)
  if (logits == TS_NONE || ts_graph_add_output(g, logits) != 0) {
    ts_graph_free(g);
    return NULL;
  }
  return g;
}

int model_io_bind(model_io *io, const ts_graph *g, ts_params *p, ts_client *c) {
  memset(io, 0, sizeof *io);
  io->n_in = ts_graph_num_inputs(g);
  if (!(io->in = calloc((size_t)io->n_in + 1, sizeof *io->in))) return -1;
  for (int i = 0; i < io->n_in; i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    ts_buffer **own = !strcmp(name, "x")      ? &io->x
                      : !strcmp(name, "y")    ? &io->y
                      : !strcmp(name, "lr")   ? &io->lr
                      : !strcmp(name, "step") ? &io->step
                      : !strcmp(name, "seed") ? &io->seed
                                              : NULL;
    if (own) {
      io->in[i] = *own = ts_buffer_new(c, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t));
    } else {
      int k = ts_params_find(p, name);
      if (k < 0) {
        fprintf(stderr, "graph input '%s' is neither data nor a parameter\n", name);
        return -1;
      }
      io->in[i] = ts_params_buffer(p, c, k);
    }
    if (!io->in[i]) return -1;
  }
  ts_tensor r = ts_graph_output(g, 0);
  io->result = ts_buffer_new(c, ts_tensor_dtype(g, r), ts_tensor_rank(g, r), ts_tensor_shape(g, r));
  return io->result ? 0 : -1;
}

void model_io_free(model_io *io) {
  ts_buffer *own[] = {io->x, io->y, io->lr, io->step, io->seed, io->result};
  for (size_t k = 0; k < sizeof own / sizeof *own; k++)
    if (own[k]) ts_buffer_free(own[k]);
  free(io->in);
  memset(io, 0, sizeof *io);
}
