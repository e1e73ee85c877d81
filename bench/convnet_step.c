/* convnet_step.c — benchmark: one tessel training step of the ResNets (the
 * step of `tessel train --model resnet20|resnet18|resnet50`: forward,
 * cross-entropy, backward, SGD-momentum update, batch-norm statistics; one
 * compiled program) in fp32 or mixed precision.
 *
 *   usage: bench_convnet_step [--model resnet20|resnet18|resnet50|all] [--amp none|bf16|all]
 *                             [--steps N] [--warmup N] [--threads N (2)] [--batch B]
 *                             [--layout nchw|nhwc (nhwc, tessel train's default)]
 *
 * Inputs: resnet20 and resnet18 3x32x32, 10 classes (CIFAR; batch 128 and 32),
 * resnet50 3x224x224, 1000 classes (batch 8) — the sizes of
 * ../shared/peer-baselines.md. SGD lr 0.01 momentum 0.9, as there. Random
 * data pre-generated (4 batches, cycled); each timed step writes the batch,
 * executes and reads the loss back. --layout nhwc builds the ResNets
 * channels-last (ts_nn.layout). Prints per configuration:
 *   RESULT tessel <model> amp=<none|bf16> layout=<nchw|nhwc> batch=B steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=..
 *          samples_per_s=.. final_loss=L arena_mib=A rss_mib=R
 * (A: the memory plan's temporaries; R: the process's peak RSS so far), and
 * cpu_median_ms: the process CPU time per step (with --threads 1 the work
 * done, which on a loaded shared host tracks the code better than wall time),
 * min_ms and cpu_min_ms: the least step (wall, CPU).
 * bench/run_convnets.sh runs it next to bench/torch_convnet_step.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_util.h" /* now_s, cmp_double */
#include "model_graph.h" /* the training step of tessel train */

#include "tessel/tessel.h"

#define N_BATCHES 4

static void die(const char *what) {
  fprintf(stderr, "bench_convnet_step: %s: %s\n", what, ts_last_error());
  exit(1);
}

static void bench(const char *model, int64_t B, int steps, int warmup, int threads, ts_dtype amp, ts_layout layout) {
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = threads});
  ts_params *p = ts_params_new(1);
  if (!c || !p) die("setup");
  bool r50 = !strcmp(model, "resnet50");
  int hw = r50 ? 224 : 32;
  model_graph_spec spec = {.model = !strcmp(model, "resnet20")   ? MODEL_GRAPH_RESNET20
                                    : !strcmp(model, "resnet18") ? MODEL_GRAPH_RESNET18
                                                                 : MODEL_GRAPH_RESNET50,
                           .batch = B, .c = 3, .h = hw, .w = hw, .classes = r50 ? 1000 : 10,
                           .optim = {.kind = TS_OPTIM_SGD, .momentum = 0.9},
                           .amp = amp, .layout = layout};
  ts_graph *g = model_train_graph(&spec, p);
  if (!g) die("building the step");
  double tc = now_s();
  ts_executable *exe = ts_compile(c, g, &(ts_compile_options){.autocast = amp});
  if (!exe) die("compile");
  tc = now_s() - tc;
  int n_out = ts_graph_num_outputs(g);
  ts_buffer **out = calloc((size_t)n_out, sizeof *out);
  model_io io;
  if (!out || model_io_bind(&io, g, p, c) < 0) die("binding the inputs");
  int64_t per = 3 * (int64_t)hw * hw;
  float *xh = malloc((size_t)(N_BATCHES * B * per) * sizeof *xh);
  int32_t *yh = malloc((size_t)(N_BATCHES * B) * sizeof *yh);
  double *ms = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *ms);
  double *cpu = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *cpu);
  if (!xh || !yh || !ms || !cpu) die("out of memory");
  uint64_t s = 12345;
  for (int64_t i = 0; i < N_BATCHES * B * per; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xh[i] = (float)((double)(s >> 40) / (double)(1u << 24) * 2.0 - 1.0);
  }
  for (int64_t i = 0; i < N_BATCHES * B; i++) yh[i] = (int32_t)(i * 7 % (r50 ? 1000 : 10));
  float final_loss = 0;
  for (int t = 0; t < warmup + steps; t++) {
    double t0 = now_s();
    clock_t c0 = clock();
    int k = t % N_BATCHES;
    float lrv = 0.01f, stepv = (float)(t + 1), lossv;
    int64_t seedv = t;
    ts_buffer_write(io.x, xh + k * B * per, (size_t)(B * per) * sizeof(float));
    ts_buffer_write(io.y, yh + k * B, (size_t)B * sizeof(int32_t));
    ts_buffer_write(io.lr, &lrv, sizeof lrv);
    ts_buffer_write(io.step, &stepv, sizeof stepv);
    ts_buffer_write(io.seed, &seedv, sizeof seedv);
    out[0] = io.result;
    for (int o = 1; o < n_out; o++) out[o] = NULL; /* aliased to parameters */
    if (ts_execute(exe, io.in, out) < 0) die("execute");
    if (ts_buffer_read(io.result, &lossv, sizeof lossv) < 0) die("reading the loss");
    final_loss = lossv;
    if (t >= warmup) ms[t - warmup] = 1e3 * (now_s() - t0), cpu[t - warmup] = 1e3 * (double)(clock() - c0) / CLOCKS_PER_SEC;
  }
  double med = 0, p25 = 0, p75 = 0, cmed = 0, mn = 0, cmn = 0;
  if (steps > 0) {
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    qsort(cpu, (size_t)steps, sizeof *cpu, cmp_double);
    med = ms[steps / 2], p25 = ms[steps / 4], p75 = ms[(3 * steps) / 4], cmed = cpu[steps / 2];
    mn = ms[0], cmn = cpu[0];
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const char *amp_name = amp == TS_BF16 ? "bf16" : amp == TS_F16 ? "f16" : "none";
  fprintf(stderr, "tessel %s amp=%s: compile %.2fs, %lld params, %d threads\n", model, amp_name, tc,
          (long long)ts_params_trainable_numel(p), ts_client_num_threads(c));
  printf("RESULT tessel %s amp=%s layout=%s batch=%lld steps=%d warmup=%d median_ms=%.3f p25_ms=%.3f p75_ms=%.3f "
         "samples_per_s=%.2f final_loss=%.9g arena_mib=%.1f rss_mib=%.1f cpu_median_ms=%.3f min_ms=%.3f "
         "cpu_min_ms=%.3f\n",
         model, amp_name, layout == TS_LAYOUT_NHWC ? "nhwc" : "nchw", (long long)B, steps, warmup, med, p25, p75,
         med > 0 ? 1e3 * (double)B / med : 0.0, final_loss, (double)ts_executable_peak_bytes(exe) / (1 << 20),
         (double)ru.ru_maxrss / 1024, cmed, mn, cmn);
  fflush(stdout);
  free(ms), free(cpu), free(xh), free(yh), free(out);
  model_io_free(&io);
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
}

int main(int argc, char **argv) {
  const char *model = "all", *amp = "all", *layout = "nhwc";
  int steps = -1, warmup = -1, threads = 2;
  int64_t batch = 0;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_convnet_step: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--model")) model = v;
    else if (!strcmp(argv[i], "--amp")) amp = v;
    else if (!strcmp(argv[i], "--steps")) steps = atoi(v);
    else if (!strcmp(argv[i], "--warmup")) warmup = atoi(v);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(v);
    else if (!strcmp(argv[i], "--batch")) batch = atoll(v);
    else if (!strcmp(argv[i], "--layout")) layout = v;
    else {
      fprintf(stderr, "usage: bench_convnet_step [--model resnet20|resnet18|resnet50|all] [--amp none|bf16|all] "
                      "[--steps N] [--warmup N] [--threads N] [--batch B] [--layout nchw|nhwc]\n");
      return 2;
    }
    i++;
  }
  const char *models[] = {"resnet20", "resnet18", "resnet50"};
  static const int64_t batches[] = {128, 32, 8};
  static const int def_steps[] = {20, 20, 8}, def_warmup[] = {3, 3, 2}; /* peer-baselines.md's */
  bool ok_model = !strcmp(model, "all"), ok_amp = !strcmp(amp, "all") || !strcmp(amp, "none") || !strcmp(amp, "bf16");
  for (int k = 0; k < 3; k++) ok_model |= !strcmp(model, models[k]);
  bool nhwc = !strcmp(layout, "nhwc");
  if (!ok_model || !ok_amp || threads < 1 || batch < 0 || (!nhwc && strcmp(layout, "nchw"))) {
    fprintf(stderr, "bench_convnet_step: --model %s / --amp %s / --threads %d / --batch %lld / --layout %s: valid "
                    "models resnet20, resnet18, resnet50, all; amp none, bf16, all; layout nchw, nhwc\n", model, amp,
                    threads, (long long)batch, layout);
    return 2;
  }
  for (int k = 0; k < 3; k++) {
    if (strcmp(model, "all") && strcmp(model, models[k])) continue;
    for (int a = 0; a < 2; a++) {
      if (strcmp(amp, "all") && strcmp(amp, a ? "bf16" : "none")) continue;
      bench(models[k], batch ? batch : batches[k], steps >= 0 ? steps : def_steps[k],
            warmup >= 0 ? warmup : def_warmup[k], threads, a ? TS_BF16 : TS_F32,
            nhwc ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW);
    }
  }
  return 0;
}
