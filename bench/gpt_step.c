/* gpt_step.c — tessel's side of bench/run_gpt_step.sh: the time of one GPT
 * training step (forward, cross-entropy, backward, gradient clipping, AdamW)
 * of `tessel train --model gpt`'s program (tools/model_graph.c), on random
 * tokens pre-generated in 4 batches and cycled.
 *
 *   usage: bench_gpt_step [--layers N (6)] [--d-model D (256)] [--heads H (4)]
 *                         [--seq T (128)] [--vocab V (8192)] [--batch B (8)]
 *                         [--steps N (20)] [--warmup N (3)] [--threads N (2)]
 *                         [--amp none|bf16 (none)] [--dump DIR]
 *
 * --amp bf16 compiles the step with ts_compile_options.autocast = TS_BF16
 * (PyTorch's CPU autocast policy: the matmuls in bf16, the rest f32; the
 * fused causal attention stays f32).
 * --dump DIR writes what bench/torch_gpt_step.py needs to run the same steps
 * from the same start: config.json (the model and every parameter's name and
 * size in order), params.bin (initial values, f32) and x.bin / y.bin (the 4
 * batches, (4, B, T) i32). Prints
 *   RESULT tessel gpt amp=none|bf16 batch=B seq=T steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=..
 *          tokens_per_s=.. first_loss=L
 * (L: the first step's loss, %.9g, before any update: equal to PyTorch's on
 * the same weights and batch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "model_graph.h"
#include "tessel/tessel.h"

#define N_BATCHES 4

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int dump(const char *dir, const model_graph_spec *s, ts_params *p, const int32_t *x, const int32_t *y) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\"layers\": %lld, \"d_model\": %lld, \"heads\": %lld, \"seq\": %lld, \"vocab\": %lld, \"batch\": %lld, "
             "\"batches\": %d, \"params\": [",
          (long long)s->gpt.layers, (long long)s->gpt.d_model, (long long)s->gpt.heads, (long long)s->gpt.seq,
          (long long)s->gpt.vocab, (long long)s->batch, N_BATCHES);
  int first = 1;
  snprintf(path, sizeof path, "%s/params.bin", dir);
  FILE *pb = fopen(path, "wb");
  for (int i = 0; pb && i < ts_params_count(p); i++) {
    if (!ts_params_trainable(p, i)) continue; /* optimizer state */
    fprintf(f, "%s{\"name\": \"%s\", \"numel\": %lld}", first ? "" : ", ", ts_params_name(p, i),
            (long long)ts_params_numel(p, i));
    first = 0;
    fwrite(ts_params_host(p, i), sizeof(float), (size_t)ts_params_numel(p, i), pb);
  }
  fprintf(f, "]}\n");
  int ok = pb && fclose(pb) == 0;
  ok = fclose(f) == 0 && ok;
  size_t n = (size_t)N_BATCHES * (size_t)(s->batch * s->gpt.seq);
  snprintf(path, sizeof path, "%s/x.bin", dir);
  FILE *xf = fopen(path, "wb");
  ok = ok && xf && fwrite(x, sizeof *x, n, xf) == n;
  if (xf) ok = fclose(xf) == 0 && ok;
  snprintf(path, sizeof path, "%s/y.bin", dir);
  FILE *yf = fopen(path, "wb");
  ok = ok && yf && fwrite(y, sizeof *y, n, yf) == n;
  if (yf) ok = fclose(yf) == 0 && ok;
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  model_graph_spec s = {.model = MODEL_GRAPH_GPT, .batch = 8,
                        .gpt = {.layers = 6, .d_model = 256, .heads = 4, .seq = 128, .vocab = 8192},
                        .optim = {.kind = TS_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                                  .clip_norm = 1.0, .decay_matrices_only = true}};
  int steps = 20, warmup = 3, threads = 2;
  const char *dir = NULL, *amp = "none";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t *dst = !strcmp(a, "--layers") ? &s.gpt.layers : !strcmp(a, "--d-model") ? &s.gpt.d_model
                   : !strcmp(a, "--heads") ? &s.gpt.heads : !strcmp(a, "--seq") ? &s.gpt.seq
                   : !strcmp(a, "--vocab") ? &s.gpt.vocab : !strcmp(a, "--batch") ? &s.batch : NULL;
    int *idst = !strcmp(a, "--steps") ? &steps : !strcmp(a, "--warmup") ? &warmup : !strcmp(a, "--threads") ? &threads
                : NULL;
    if ((dst || idst || !strcmp(a, "--dump") || !strcmp(a, "--amp")) && !v) {
      fprintf(stderr, "bench_gpt_step: %s needs a value\n", a);
      return 2;
    }
    if (dst) *dst = atoll(v), i++;
    else if (idst) *idst = atoi(v), i++;
    else if (!strcmp(a, "--dump")) dir = v, i++;
    else if (!strcmp(a, "--amp")) amp = v, i++;
    else {
      fprintf(stderr, "bench_gpt_step: unknown argument '%s' (see the top of bench/gpt_step.c)\n", a);
      return 2;
    }
  }
  if (ts_gpt_config_check(&s.gpt) < 0 || s.batch < 1 || steps < 1 || warmup < 0) {
    fprintf(stderr, "bench_gpt_step: %s\n", ts_gpt_config_check(&s.gpt) < 0 ? ts_last_error() : "bad --batch/--steps/--warmup");
    return 2;
  }
  if (strcmp(amp, "none") && strcmp(amp, "bf16")) {
    fprintf(stderr, "bench_gpt_step: --amp %s (none or bf16)\n", amp);
    return 2;
  }
  s.amp = strcmp(amp, "bf16") ? TS_F32 : TS_BF16;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = threads});
  ts_params *p = ts_params_new(0);
  ts_graph *g = c && p ? model_train_graph(&s, p) : NULL;
  ts_executable *e = g ? ts_compile(c, g, &(ts_compile_options){.autocast = s.amp == TS_BF16 ? TS_BF16 : TS_F32})
                       : NULL;
  model_io io = {0};
  if (!e || model_io_bind(&io, g, p, c) < 0) {
    fprintf(stderr, "bench_gpt_step: %s\n", ts_last_error());
    return 1;
  }
  int64_t per = s.batch * s.gpt.seq;
  int32_t *x = malloc((size_t)(N_BATCHES * per) * sizeof *x), *y = malloc((size_t)(N_BATCHES * per) * sizeof *y);
  uint64_t st = 0x6B7A11ull;
  for (int64_t r = 0; r < N_BATCHES * s.batch; r++) { /* y: x shifted by one, as the text loader makes it */
    int32_t prev = (int32_t)(mix(&st) % (uint64_t)s.gpt.vocab);
    for (int64_t t = 0; t < s.gpt.seq; t++) {
      int32_t next = (int32_t)(mix(&st) % (uint64_t)s.gpt.vocab);
      x[r * s.gpt.seq + t] = prev, y[r * s.gpt.seq + t] = next, prev = next;
    }
  }
  if (dir && dump(dir, &s, p, x, y) < 0) {
    fprintf(stderr, "bench_gpt_step: cannot write %s\n", dir);
    return 1;
  }
  int n_out = ts_graph_num_outputs(g);
  ts_buffer **out = calloc((size_t)n_out, sizeof *out);
  double *ms = malloc((size_t)steps * sizeof *ms);
  float first = 0, loss = 0, lr = 1e-3f;
  for (int t = 0; t < warmup + steps; t++) {
    double t0 = now_s();
    int k = t % N_BATCHES;
    float stepv = (float)(t + 1);
    memset(out, 0, (size_t)n_out * sizeof *out);
    out[0] = io.result;
    if (ts_buffer_write(io.x, x + k * per, (size_t)per * sizeof *x) < 0 ||
        ts_buffer_write(io.y, y + k * per, (size_t)per * sizeof *y) < 0 || ts_buffer_write(io.lr, &lr, sizeof lr) < 0 ||
        ts_buffer_write(io.step, &stepv, sizeof stepv) < 0 || (io.seed && ts_buffer_write(io.seed, &(int64_t){t}, 8) < 0) ||
        ts_execute(e, io.in, out) < 0 || ts_buffer_read(io.result, &loss, sizeof loss) < 0) {
      fprintf(stderr, "bench_gpt_step: step %d: %s\n", t, ts_last_error());
      return 1;
    }
    for (int o = 1; o < n_out; o++) { /* the updates are aliased to the parameters */
      bool aliased = false;
      for (int i = 0; i < io.n_in && !aliased; i++) aliased = out[o] == io.in[i];
      if (!aliased && out[o]) ts_buffer_free(out[o]);
    }
    if (t == 0) first = loss;
    if (t >= warmup) ms[t - warmup] = 1e3 * (now_s() - t0);
  }
  double med = median(ms, steps), p25 = ms[steps / 4], p75 = ms[(3 * steps) / 4 < steps ? (3 * steps) / 4 : steps - 1];
  printf("RESULT tessel gpt amp=%s batch=%lld seq=%lld steps=%d warmup=%d median_ms=%.2f p25_ms=%.2f p75_ms=%.2f "
         "tokens_per_s=%.0f first_loss=%.9g\n",
         amp, (long long)s.batch, (long long)s.gpt.seq, steps, warmup, med, p25, p75, (double)per / (med / 1e3), first);
  free(x), free(y), free(out), free(ms);
  model_io_free(&io);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return 0;
}
