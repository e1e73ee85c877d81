/* test_gpt_reference.c — GPT training steps against PyTorch.
 *
 * A 2-layer GPT (d_model 32, 4 heads, position table 16, vocab 64) on
 * sequences of 12 tokens (shorter than the table: the position slice), batch
 * 4, in f32: tessel draws the initial weights (nanoGPT's initialization),
 * a seeded random batch of tokens, and runs 5 AdamW steps on it (lr 1e-2, betas (0.9, 0.95),
 * weight decay 0.1 on matrices only, gradient clipping at global norm 0.5,
 * which is below the initial norm, so every step clips), recording each
 * step's loss and the first step's gradient of every parameter (the tied
 * token embedding's includes the LM head's share); tests/torch_gpt.py replays
 * the same steps in PyTorch (nanoGPT's model, parameters loaded by name).
 * Losses and gradients agree to 1e-4 relative (ref_util.h's rule).
 *
 * Needs /usr/bin/python3 with torch: the test FAILS (never skips) without it. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> // mkdir
#include <unistd.h>   // rmdir

#include "harness.h"
#include "ref_util.h"
#include "tessel/tessel.h"

#ifndef TS_SOURCE_DIR
#error "TS_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

#define STEPS 5
#define B 4
#define T 12
static const ts_gpt_config CFG = {.layers = 2, .d_model = 32, .heads = 4, .seq = 16, .vocab = 64};
static const ts_optim_config OPT = {.kind = TS_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                                    .clip_norm = 0.5, .decay_matrices_only = true};
static const double LR = 1e-2;

/* Outputs: loss, the gradients (parameter order), then the in-place updates. */
static int step_graph(ts_graph *g, ts_params *p, ts_tensor *wrt, ts_tensor *grads, int cap) {
  int64_t xs[2] = {B, T};
  ts_tensor x = ts_input(g, "x", TS_I32, 2, xs), y = ts_input(g, "y", TS_I32, 2, xs);
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  ts_tensor loss = ts_gpt_loss(g, ts_model_gpt(&m, &CFG, x), y);
  if (loss == TS_NONE || ts_graph_add_output(g, loss) < 0) return -1;
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < cap; i++) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  if (ts_grad(g, loss, n, wrt, grads) < 0) return -1;
  for (int k = 0; k < n; k++) ts_graph_add_output(g, grads[k]);
  if (ts_optim_apply(&m, &OPT, lr, step, n, wrt, grads) < 0 || ts_nn_finish(&m) < 0) return -1;
  return n;
}

static int write_config(const char *dir, ts_params *p, int n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\"layers\": %lld, \"d_model\": %lld, \"heads\": %lld, \"seq\": %lld, \"vocab\": %lld, \"batch\": %d, "
             "\"T\": %d, \"steps\": %d, \"lr\": %.17g, \"beta1\": %.17g, \"beta2\": %.17g, \"weight_decay\": %.17g, "
             "\"clip\": %.17g, \"params\": [",
          (long long)CFG.layers, (long long)CFG.d_model, (long long)CFG.heads, (long long)CFG.seq,
          (long long)CFG.vocab, B, T, STEPS, (double)(float)LR, OPT.beta1, OPT.beta2, OPT.weight_decay, OPT.clip_norm);
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += ts_params_numel(p, i);
  double *w = malloc((size_t)total * sizeof *w);
  for (int i = 0, off = 0; i < n && w; off += (int)ts_params_numel(p, i), i++) {
    fprintf(f, "%s{\"name\": \"%s\", \"numel\": %lld}", i ? ", " : "", ts_params_name(p, i),
            (long long)ts_params_numel(p, i));
    const float *h = ts_params_host(p, i);
    for (int64_t k = 0; k < ts_params_numel(p, i); k++) w[off + k] = h[k];
  }
  fprintf(f, "]}\n");
  int ok = fclose(f) == 0 && w && write_file(dir, "params.bin", w, (size_t)total * sizeof *w) == 0;
  free(w);
  return ok ? 0 : -1;
}

/* Bad input is an error naming the value: a sequence longer than the
 * position table, heads not dividing d_model. */
static void bad_input(void) {
  ts_graph *g = ts_graph_new();
  ts_params *p = ts_params_new(1);
  int64_t xs[2] = {1, CFG.seq + 4};
  ts_nn m;
  ts_nn_init(&m, g, p, false, TS_NONE);
  ts_tensor y = ts_model_gpt(&m, &CFG, ts_input(g, "x", TS_I32, 2, xs));
  CHECK(y == TS_NONE && strstr(ts_last_error(), "sequence length 20") && strstr(ts_last_error(), "seq = 16"),
        "T > seq: %s", ts_last_error());
  ts_gpt_config c = CFG;
  c.heads = 5;
  CHECK(ts_gpt_config_check(&c) < 0 && strstr(ts_last_error(), "heads = 5 does not divide d_model = 32"), "heads: %s",
        ts_last_error());
  ts_params_free(p);
  ts_graph_free(g);
}

int main(void) {
  uint64_t seed = ts_test_init("test_gpt_reference", 12);
  bad_input();
  if (system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
    CHECK(0, "/usr/bin/python3 cannot import torch: run scripts/install-deps.sh and re-run this test");
    return ts_test_finish();
  }
  char dir[] = "/tmp/tessel_gpt_ref_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_params *p = ts_params_new(seed);
  ts_graph *g = ts_graph_new();
  enum { CAP = 64 };
  ts_tensor wrt[CAP], grads[CAP];
  int n = c && p && g ? step_graph(g, p, wrt, grads, CAP) : -1;
  CHECK(n == 4 + 12 * (int)CFG.layers, "%d trainable parameters (%s)", n, ts_last_error());
  ts_executable *exe = n > 0 ? ts_compile(c, g, NULL) : NULL;
  CHECK(exe != NULL, "compile: %s", ts_last_error());
  if (!exe) goto out;
  CHECK_OK(write_config(dir, p, n));
  int32_t x[STEPS * B * T], y[STEPS * B * T];
  /* y is x shifted by one, as the text loader makes it; every step sees the
   * same batch, so the loss must fall */
  uint64_t s = seed ^ 0x7E47ull;
  for (int i = 0; i < STEPS * B; i++) {
    if (i >= B) {
      memcpy(x + i * T, x + (i % B) * T, sizeof(int32_t) * T);
      memcpy(y + i * T, y + (i % B) * T, sizeof(int32_t) * T);
      continue;
    }
    int32_t w[T + 1];
    for (int t = 0; t <= T; t++) w[t] = (int32_t)(splitmix64(&s) % (uint64_t)CFG.vocab);
    memcpy(x + i * T, w, sizeof(int32_t) * T);
    memcpy(y + i * T, w + 1, sizeof(int32_t) * T);
  }
  CHECK_OK(write_file(dir, "x.bin", x, sizeof x));
  CHECK_OK(write_file(dir, "y.bin", y, sizeof y));

  int64_t total = 0;
  for (int k = 0; k < n; k++) total += ts_tensor_numel(g, wrt[k]);
  float *ga = calloc((size_t)total, sizeof *ga), *gb = calloc((size_t)total, sizeof *gb);
  double la[STEPS] = {0}, lb[STEPS] = {0};
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in, sizeof *in), **outs = calloc((size_t)n_out, sizeof *outs);
  int64_t xs[2] = {B, T};
  ts_buffer *xb = ts_buffer_new(c, TS_I32, 2, xs), *yb = ts_buffer_new(c, TS_I32, 2, xs);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *stb = ts_buffer_new(c, TS_F32, 0, NULL);
  int rc = ga && gb && in && outs && xb && yb && lrb && stb ? 0 : -1;
  for (int i = 0; rc == 0 && i < n_in; i++) {
    const char *nm = ts_input_name(g, ts_graph_input(g, i));
    in[i] = !strcmp(nm, "x") ? xb : !strcmp(nm, "y") ? yb : !strcmp(nm, "lr") ? lrb : !strcmp(nm, "step") ? stb
          : ts_params_buffer(p, c, ts_params_find(p, nm));
  }
  for (int st = 0; st < STEPS && rc == 0; st++) {
    float lr = (float)LR, stepv = (float)(st + 1), loss = 0;
    ts_buffer_write(xb, x + st * B * T, sizeof(int32_t) * B * T);
    ts_buffer_write(yb, y + st * B * T, sizeof(int32_t) * B * T);
    ts_buffer_write(lrb, &lr, sizeof lr);
    ts_buffer_write(stb, &stepv, sizeof stepv);
    memset(outs, 0, (size_t)n_out * sizeof *outs);
    rc = ts_execute(exe, in, outs);
    if (rc == 0) rc = ts_buffer_read(outs[0], &loss, sizeof loss);
    la[st] = loss;
    for (int k = 0, off = 0; rc == 0 && st == 0 && k < n; off += (int)ts_tensor_numel(g, wrt[k]), k++)
      rc = ts_buffer_read(outs[1 + k], ga + off, sizeof(float) * (size_t)ts_tensor_numel(g, wrt[k]));
    for (int k = 0; k < 1 + n && outs[0]; k++) ts_buffer_free(outs[k]); /* the rest are aliased parameters */
  }
  CHECK(rc == 0, "tessel steps: %s", ts_last_error());
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/torch_gpt.py %s", TS_SOURCE_DIR, dir);
  int sys = rc == 0 ? system(cmd) : -1;
  CHECK(rc != 0 || sys == 0, "'%s' failed (exit status %d)", cmd, sys);
  double *gd = malloc((size_t)total * sizeof *gd);
  bool have = rc == 0 && sys == 0 && gd && read_file(dir, "losses.bin", lb, sizeof lb) == 0 &&
              read_file(dir, "grads.bin", gd, (size_t)total * sizeof *gd) == 0;
  CHECK(rc != 0 || sys != 0 || have, "torch_gpt.py wrote no (or malformed) outputs in %s", dir);
  if (have) {
    float fa[STEPS], fb[STEPS];
    for (int k = 0; k < STEPS; k++) {
      fa[k] = (float)la[k], fb[k] = (float)lb[k];
      printf("  step %d loss tessel %.9g torch %.9g\n", k + 1, la[k], lb[k]);
    }
    CHECK(compare("losses", fa, fb, STEPS) == 0, "losses differ from PyTorch");
    CHECK(la[STEPS - 1] < la[0], "the loss did not fall over %d steps (%g -> %g)", STEPS, la[0], la[STEPS - 1]);
    for (int64_t i = 0; i < total; i++) gb[i] = (float)gd[i];
    int bad = 0;
    for (int k = 0, off = 0; k < n; off += (int)ts_tensor_numel(g, wrt[k]), k++)
      bad += compare(ts_input_name(g, wrt[k]), ga + off, gb + off, ts_tensor_numel(g, wrt[k])) ? 1 : 0;
    CHECK(bad == 0, "%d of %d first-step gradients differ from PyTorch", bad, n);
    double sq = 0;
    for (int64_t i = 0; i < total; i++) sq += (double)ga[i] * ga[i];
    printf("  first-step gradient norm %.4g (clipped to %g)\n", sqrt(sq), OPT.clip_norm);
    CHECK(sqrt(sq) > OPT.clip_norm, "the first step's gradient norm %g is below clip_norm: no clipping tested", sqrt(sq));
  }
  ts_buffer_free(xb), ts_buffer_free(yb), ts_buffer_free(lrb), ts_buffer_free(stb);
  free(in), free(outs), free(ga), free(gb), free(gd);
  const char *files[] = {"config.json", "params.bin", "x.bin", "y.bin", "losses.bin", "grads.bin"};
  if (ts_test_failed == 0) {
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) remove_file(dir, files[k]);
    rmdir(dir);
  } else {
    fprintf(stderr, "  inputs and outputs kept in %s\n", dir);
  }
out:
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return ts_test_finish();
}
