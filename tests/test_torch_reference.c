/* test_torch_reference.c — whole training steps against PyTorch.
 *
 * For the MLP (SGD, momentum 0.9, lr 0.01) and the MNIST CNN (AdamW, lr 1e-3,
 * weight decay 0.01): tessel draws the initial weights (ts_params) and 10
 * seeded random batches, writes them as raw little-endian f32/i32 files, runs
 * 10 training steps recording each step's loss and the gradients of every
 * parameter at the first step (extra outputs of the step graph), then runs
 * tests/torch_reference.py, which replays the same steps on the same PyTorch
 * model (f32, 2 threads) and writes its losses and first-step gradients.
 *
 * Dropout is disabled on both sides: the CNN is built in training mode with
 * seed TS_NONE (dropout is the identity) and the PyTorch CNN has no dropout
 * layers. Every other op of the models is exercised.
 *
 * Tolerance, per element (losses and gradients):
 *   |a - b| <= 1e-4 * max(|a|, |b|) + 1e-6 * max|b over the tensor|
 * i.e. 1e-4 relative, with an absolute floor at 1e-6 of the tensor's largest
 * magnitude for elements near zero (where summation order dominates).
 *
 * Needs /usr/bin/python3 with torch: the test FAILS (never skips) without it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> // mkdir
#include <unistd.h>   // rmdir, unlink

#include "harness.h"
#include "ref_util.h" /* raw files, the tolerance check */
#include "tessel/tessel.h"

#ifndef TS_SOURCE_DIR
#error "TS_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

#define STEPS 10
#define MAX_PARAMS 16

typedef struct {
  const char *model; /* "mlp" or "cnn" */
  ts_optim_kind optim;
  double lr, momentum, weight_decay;
  int64_t batch;
} ref_case;

static void run_case(const ref_case *rc, const char *tmp, uint64_t seed) {
  printf("%s: %s, batch %lld, %d steps\n", rc->model, rc->optim == TS_OPTIM_SGD ? "SGD" : "AdamW",
         (long long)rc->batch, STEPS);
  const int64_t B = rc->batch;
  ts_client_options copts = {.num_threads = 2};
  ts_client *c = ts_client_new(&copts);
  ts_params *p = ts_params_new(seed);
  ts_graph *g = ts_graph_new();
  CHECK(c && p && g, "%s", ts_last_error());
  if (!c || !p || !g) return;

  // ---- the step graph: loss, first-step gradients, optimizer update ----
  int64_t xs[4] = {B, 1, 28, 28};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs);  // (B, 1, 28, 28)
  ts_tensor y = ts_input(g, "y", TS_I32, 1, &B);  // (B)
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE); // training mode, dropout off (no seed)
  ts_tensor logits = strcmp(rc->model, "mlp") == 0 ? ts_model_mlp(&m, x) : ts_model_mnist_cnn(&m, x);
  ts_tensor loss = ts_cross_entropy(g, logits, y);
  CHECK(loss != TS_NONE, "building %s: %s", rc->model, ts_last_error());
  if (loss == TS_NONE) goto out;
  ts_graph_add_output(g, loss);
  int n = 0, idx[MAX_PARAMS];
  ts_tensor wrt[MAX_PARAMS], grads[MAX_PARAMS];
  for (int i = 0; i < ts_params_count(p) && n < MAX_PARAMS; i++) {
    if (!ts_params_trainable(p, i)) continue;
    idx[n] = i;
    wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  }
  CHECK_OK(ts_grad(g, loss, n, wrt, grads));
  for (int k = 0; k < n; k++) ts_graph_add_output(g, grads[k]);
  ts_optim_config cfg = {.kind = rc->optim, .momentum = rc->momentum, .weight_decay = rc->weight_decay};
  CHECK_OK(ts_optim_apply(&m, &cfg, lr, step, n, wrt, grads));
  CHECK_OK(ts_nn_finish(&m));
  CHECK_OK(ts_graph_verify(g));
  ts_executable *exe = ts_compile(c, g, NULL);
  CHECK(exe != NULL, "compile: %s", ts_last_error());
  if (!exe) goto out;

  // ---- config.json, initial weights, data ----
  char path[1024], dir[256];
  snprintf(dir, sizeof dir, "%s/%s", tmp, rc->model);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK(mkdir(dir, 0700) == 0, "cannot create %s", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL, "cannot write %s", path);
  if (!f) goto out_exe;
  fprintf(f, "{\"model\": \"%s\", \"optimizer\": \"%s\", \"lr\": %.17g, \"momentum\": %.17g, "
             "\"weight_decay\": %.17g, \"batch\": %lld, \"steps\": %d, \"params\": [",
          rc->model, rc->optim == TS_OPTIM_SGD ? "sgd" : "adamw", rc->lr, rc->momentum,
          rc->weight_decay, (long long)B, STEPS);
  int64_t total = 0, off[MAX_PARAMS + 1];
  for (int k = 0; k < n; k++) {
    int rank = ts_tensor_rank(g, wrt[k]);
    const int64_t *shape = ts_tensor_shape(g, wrt[k]);
    fprintf(f, "%s{\"name\": \"%s\", \"shape\": [", k ? ", " : "", ts_params_name(p, idx[k]));
    for (int d = 0; d < rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)shape[d]);
    fprintf(f, "]}");
    off[k] = total;
    total += ts_params_numel(p, idx[k]);
  }
  off[n] = total;
  fprintf(f, "]}\n");
  fclose(f);

  float *w0 = malloc((size_t)total * sizeof *w0);             // all trainable params, in order
  float *xdata = malloc((size_t)(STEPS * B * 784) * sizeof *xdata); // (STEPS, B, 1, 28, 28)
  int32_t *ydata = malloc((size_t)(STEPS * B) * sizeof *ydata);     // (STEPS, B)
  float *g_ts = malloc((size_t)total * sizeof *g_ts), *g_pt = malloc((size_t)total * sizeof *g_pt);
  for (int k = 0; k < n; k++)
    memcpy(w0 + off[k], ts_params_host(p, idx[k]), (size_t)(off[k + 1] - off[k]) * sizeof(float));
  uint64_t s = seed ^ 0xDA7Aull;
  for (int64_t i = 0; i < STEPS * B * 784; i++)
    xdata[i] = (float)((double)(splitmix64(&s) >> 11) * 0x1.0p-53 * 4.0 - 1.0); // U(-1, 3): like normalized pixels
  for (int64_t i = 0; i < STEPS * B; i++) ydata[i] = (int32_t)(splitmix64(&s) % 10);
  CHECK_OK(write_file(dir, "params.bin", w0, (size_t)total * sizeof *w0));
  CHECK_OK(write_file(dir, "x.bin", xdata, (size_t)(STEPS * B * 784) * sizeof *xdata));
  CHECK_OK(write_file(dir, "y.bin", ydata, (size_t)(STEPS * B) * sizeof *ydata));

  // ---- tessel: 10 steps ----
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in, sizeof *in), **outs = calloc((size_t)n_out, sizeof *outs);
  ts_buffer *xb = ts_buffer_new(c, TS_F32, 4, xs), *yb = ts_buffer_new(c, TS_I32, 1, &B);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *stepb = ts_buffer_new(c, TS_F32, 0, NULL);
  ts_buffer *lossb = ts_buffer_new(c, TS_F32, 0, NULL), *gradb[MAX_PARAMS] = {0};
  for (int k = 0; k < n; k++)
    gradb[k] = ts_buffer_new(c, TS_F32, ts_tensor_rank(g, wrt[k]), ts_tensor_shape(g, wrt[k]));
  for (int i = 0; i < n_in; i++) {
    const char *name = ts_input_name(g, ts_graph_input(g, i));
    in[i] = !strcmp(name, "x") ? xb : !strcmp(name, "y") ? yb : !strcmp(name, "lr") ? lrb
          : !strcmp(name, "step") ? stepb : ts_params_buffer(p, c, ts_params_find(p, name));
    CHECK(in[i] != NULL, "input '%s' unbound: %s", name, ts_last_error());
  }
  float losses_ts[STEPS], losses_pt[STEPS];
  for (int st = 0; st < STEPS; st++) {
    float lrv = (float)rc->lr, stepv = (float)(st + 1);
    ts_buffer_write(xb, xdata + st * B * 784, (size_t)(B * 784) * sizeof(float));
    ts_buffer_write(yb, ydata + st * B, (size_t)B * sizeof(int32_t));
    ts_buffer_write(lrb, &lrv, sizeof lrv);
    ts_buffer_write(stepb, &stepv, sizeof stepv);
    outs[0] = lossb;
    for (int k = 0; k < n; k++) outs[1 + k] = gradb[k];
    for (int k = 1 + n; k < n_out; k++) outs[k] = NULL; // aliased: set to their inputs
    int ok = ts_execute(exe, in, outs) == 0;
    CHECK(ok, "step %d: %s", st + 1, ts_last_error());
    if (!ok) goto out_bufs;
    ts_buffer_read(lossb, &losses_ts[st], sizeof(float));
    if (st == 0)
      for (int k = 0; k < n; k++)
        ts_buffer_read(gradb[k], g_ts + off[k], (size_t)(off[k + 1] - off[k]) * sizeof(float));
  }

  // ---- PyTorch ----
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/torch_reference.py %s", TS_SOURCE_DIR, dir);
  int sys = system(cmd);
  CHECK(sys == 0, "'%s' failed (exit status %d)", cmd, sys);
  if (sys != 0) goto out_bufs;
  int have = read_file(dir, "losses.bin", losses_pt, sizeof losses_pt) == 0 &&
             read_file(dir, "grads.bin", g_pt, (size_t)total * sizeof *g_pt) == 0;
  CHECK(have, "torch_reference.py wrote no (or malformed) losses.bin / grads.bin in %s", dir);
  if (!have) goto out_bufs;

  // ---- compare ----
  for (int st = 0; st < STEPS; st++) printf("  step %2d loss tessel %.7f torch %.7f\n", st + 1, losses_ts[st], losses_pt[st]);
  CHECK(compare("losses", losses_ts, losses_pt, STEPS) == 0, "%s: losses differ from PyTorch", rc->model);
  for (int k = 0; k < n; k++) {
    char what[128];
    snprintf(what, sizeof what, "grad %s (step 1)", ts_params_name(p, idx[k]));
    CHECK(compare(what, g_ts + off[k], g_pt + off[k], off[k + 1] - off[k]) == 0,
          "%s: gradient of %s differs from PyTorch", rc->model, ts_params_name(p, idx[k]));
  }
  if (ts_test_failed == 0) {
    const char *files[] = {"config.json", "params.bin", "x.bin", "y.bin", "losses.bin", "grads.bin"};
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) remove_file(dir, files[k]);
    rmdir(dir);
  } else {
    fprintf(stderr, "  inputs and outputs kept in %s\n", dir);
  }

out_bufs:
  ts_buffer_free(xb);
  ts_buffer_free(yb);
  ts_buffer_free(lrb);
  ts_buffer_free(stepb);
  ts_buffer_free(lossb);
  for (int k = 0; k < n; k++) ts_buffer_free(gradb[k]);
  free(in);
  free(outs);
  free(w0);
  free(xdata);
  free(ydata);
  free(g_ts);
  free(g_pt);
out_exe:
  ts_executable_free(exe);
out:
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
}

int main(void) {
  uint64_t seed = ts_test_init("test_torch_reference", 1234);
  if (system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
    CHECK(0, "/usr/bin/python3 cannot import torch: run scripts/install-deps.sh "
             "(it installs python3-torch) and re-run this test");
    return ts_test_finish();
  }
  char tmp[] = "/tmp/tessel_torch_ref_XXXXXX";
  CHECK(mkdtemp(tmp) != NULL, "mkdtemp failed");
  const ref_case cases[] = {
      {"mlp", TS_OPTIM_SGD, 0.01, 0.9, 0.0, 32},
      {"cnn", TS_OPTIM_ADAMW, 1e-3, 0.0, 0.01, 8},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) run_case(&cases[k], tmp, seed + k);
  if (ts_test_failed == 0) rmdir(tmp);
  return ts_test_finish();
}
