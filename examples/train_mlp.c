/* train_mlp.c — a tour of the tessel API: train a 784-512-512-10 MLP on
 * Fashion-MNIST with AdamW and report the test accuracy.
 *
 *   usage: example_train_mlp [epochs (default 1)] [data dir (default
 *          /usr/share/datasets/fashion-mnist)]
 *
 * The steps: parameters (ts_params) -> a graph for one training step (forward,
 * loss, ts_grad, optimizer update aliased to the parameters) -> compile once
 * -> execute every step with device buffers -> an evaluation graph bound to
 * the same parameters. Uses the public API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessel/tessel.h>

#define B 128   /* training batch */
#define E 1000  /* evaluation batch (divides the 10000 test images) */

/* Aborts with tessel's message: fine in an example, never in library code. */
static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "%s failed: %s\n", what, ts_last_error());
    exit(1);
  }
}

/* Binds every graph input to a buffer: "x", "y", "lr", "step" to the given
 * ones, anything else to the parameter of that name. */
static void bind(ts_graph *g, ts_params *p, ts_client *c, ts_buffer **in, ts_buffer *x, ts_buffer *y,
                 ts_buffer *lr, ts_buffer *step) {
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    const char *name = ts_input_name(g, ts_graph_input(g, i));
    if (!strcmp(name, "x")) in[i] = x;
    else if (!strcmp(name, "y")) in[i] = y;
    else if (!strcmp(name, "lr")) in[i] = lr;
    else if (!strcmp(name, "step")) in[i] = step;
    else in[i] = ts_params_buffer(p, c, ts_params_find(p, name));
    check(in[i] != NULL, name);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: %s [epochs (default 1)] [data dir (default %s)]\n", argv[0], TS_FASHION_MNIST_DIR);
    return 0;
  }
  int epochs = argc > 1 ? atoi(argv[1]) : 1;
  const char *dir = argc > 2 ? argv[2] : TS_FASHION_MNIST_DIR;
  if (epochs < 1) {
    fprintf(stderr, "usage: %s [epochs >= 1] [data dir]\n", argv[0]);
    return 2;
  }

  // 1. Data: the whole dataset in memory as u8 images + labels.
  ts_dataset train, test;
  check(ts_mnist_load(dir, "train", &train) == 0 && ts_mnist_load(dir, "t10k", &test) == 0,
        "loading Fashion-MNIST (install dataset-fashion-mnist or pass a directory)");

  // 2. A client (the CPU device) and a parameter set (values + buffers by name).
  ts_client *c = ts_client_new(NULL);
  ts_params *p = ts_params_new(42);

  // 3. The training step as one graph. Inputs: data, learning rate, step.
  ts_graph *g = ts_graph_new();
  int64_t xs[4] = {B, 1, 28, 28}, ys[1] = {B};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs); // (B, 1, 28, 28)
  ts_tensor y = ts_input(g, "y", TS_I32, 1, ys); // (B)
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE); // training mode; no dropout in the MLP
  ts_tensor logits = ts_model_mlp(&m, x); // (B, 10); declares fc1..fc3 in p
  ts_tensor loss = ts_cross_entropy(g, logits, y);
  check(loss != TS_NONE, "building the model");
  ts_graph_add_output(g, loss); // output 0

  // 4. Gradients of the loss for every trainable parameter, then AdamW: the
  //    new values are outputs aliased to the parameter buffers (in place).
  int n = 0;
  ts_tensor wrt[8], grads[8];
  for (int i = 0; i < ts_params_count(p); i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  check(ts_grad(g, loss, n, wrt, grads) == 0, "ts_grad");
  ts_optim_config adamw = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01};
  check(ts_optim_apply(&m, &adamw, lr, step, n, wrt, grads) == 0, "ts_optim_apply");
  check(ts_nn_finish(&m) == 0, "ts_nn_finish");

  // 5. Compile once.
  ts_executable *train_exe = ts_compile(c, g, NULL);
  check(train_exe != NULL, "compiling the training step");

  // 6. The evaluation forward: another graph over the same parameters.
  ts_graph *eg = ts_graph_new();
  int64_t es[4] = {E, 1, 28, 28};
  ts_nn em;
  ts_nn_init(&em, eg, p, false, TS_NONE);
  ts_graph_add_output(eg, ts_model_mlp(&em, ts_input(eg, "x", TS_F32, 4, es))); // (E, 10)
  ts_executable *eval_exe = ts_compile(c, eg, NULL);
  check(eval_exe != NULL, "compiling the evaluation");

  // 7. Buffers: data in, loss out; parameters are bound by name.
  ts_buffer *xb = ts_buffer_new(c, TS_F32, 4, xs), *yb = ts_buffer_new(c, TS_I32, 1, ys);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *stepb = ts_buffer_new(c, TS_F32, 0, NULL);
  ts_buffer *lossb = ts_buffer_new(c, TS_F32, 0, NULL);
  ts_buffer *ex = ts_buffer_new(c, TS_F32, 4, es), *elog = ts_buffer_new(c, TS_F32, 2, (int64_t[]){E, 10});
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in, sizeof *in), **out = calloc((size_t)n_out, sizeof *out);
  ts_buffer **ein = calloc((size_t)ts_graph_num_inputs(eg), sizeof *ein);
  bind(g, p, c, in, xb, yb, lrb, stepb);
  bind(eg, p, c, ein, ex, NULL, NULL, NULL);

  // 8. The loop: shuffle, fill a batch, execute; evaluate after each epoch.
  const int64_t steps_per_epoch = train.n / B;
  ts_lr_schedule sched = {.kind = TS_LR_COSINE, .base_lr = 1e-3, .warmup_steps = 100,
                          .total_steps = steps_per_epoch * epochs};
  int64_t *order = malloc((size_t)train.n * sizeof *order);
  float *xh = malloc((size_t)E * 784 * sizeof *xh), *lh = malloc((size_t)E * 10 * sizeof *lh);
  int32_t yh[E];
  int64_t t = 0;
  for (int epoch = 1; epoch <= epochs; epoch++) {
    ts_shuffle(order, train.n, (uint64_t)epoch);
    float loss_sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; s++, t++) {
      ts_dataset_batch(&train, order, s * B, B, 0.2860f, 0.3530f, xh, yh);
      float lrv = (float)ts_lr_at(&sched, t), stepv = (float)(t + 1), lossv;
      ts_buffer_write(xb, xh, B * 784 * sizeof(float));
      ts_buffer_write(yb, yh, B * sizeof(int32_t));
      ts_buffer_write(lrb, &lrv, sizeof lrv);
      ts_buffer_write(stepb, &stepv, sizeof stepv);
      out[0] = lossb;
      for (int k = 1; k < n_out; k++) out[k] = NULL; // aliased: set to their parameters
      check(ts_execute(train_exe, in, out) == 0, "training step");
      ts_buffer_read(lossb, &lossv, sizeof lossv);
      loss_sum += lossv;
    }
    int64_t correct = 0;
    for (int64_t first = 0; first < test.n; first += E) {
      ts_dataset_batch(&test, NULL, first, E, 0.2860f, 0.3530f, xh, yh);
      ts_buffer_write(ex, xh, E * 784 * sizeof(float));
      check(ts_execute(eval_exe, ein, &elog) == 0, "evaluation");
      ts_buffer_read(elog, lh, E * 10 * sizeof(float));
      for (int b = 0; b < E; b++) {
        int best = 0;
        for (int k = 1; k < 10; k++) best = lh[b * 10 + k] > lh[b * 10 + best] ? k : best;
        correct += best == yh[b];
      }
    }
    printf("epoch %d: train loss %.4f, test accuracy %.2f%%\n", epoch, loss_sum / steps_per_epoch,
           100.0 * (double)correct / (double)test.n);
  }

  free(order), free(xh), free(lh), free(in), free(out), free(ein);
  ts_buffer *bufs[] = {xb, yb, lrb, stepb, lossb, ex, elog};
  for (int k = 0; k < 7; k++) ts_buffer_free(bufs[k]);
  ts_executable_free(train_exe), ts_executable_free(eval_exe);
  ts_graph_free(g), ts_graph_free(eg);
  ts_params_free(p), ts_client_free(c);
  ts_dataset_free(&train), ts_dataset_free(&test);
  return 0;
}
