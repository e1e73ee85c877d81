/* loader.c — benchmark: samples/s the data loader delivers on its own (read,
 * decode, crop + flip + normalize, place), against the rate at which the
 * MNIST CNN trainer consumes samples, measured in the same run; then both
 * together (loader feeding real CNN steps) with the data wait as % of step
 * time.
 *
 *   usage: bench_loader [--threads N (2)] [--workers N (1)] [--prefetch N (4)]
 *                       [--data-dir DIR (Fashion-MNIST)] [--repeats N (5)]
 *                       [--no-cnn 1 (skip the CNN measurements)]
 *
 * Datasets: Fashion-MNIST train (1x28x28, batch 64, crop pad 2 + flip +
 * normalize) if installed, and the synthetic ImageNet-shaped source
 * (3x224x224, batch 32, crop pad 4 + flip + normalize). Prints
 *   RESULT loader <dataset> workers=W samples_per_s=.. (median of repeats)
 *   RESULT cnn_step batch=64 samples_per_s=..
 *   RESULT ratio loader/cnn=..
 *   RESULT overlap data_wait_pct=..  (the loader feeding CNN steps) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> // clock_gettime

#include "bench_util.h" /* now_s, cmp_double, median */
#include "model_graph.h" /* the training step of tessel train */

#include "tessel/loader.h"
#include "tessel/tessel.h"

static void die(const char *what) {
  fprintf(stderr, "bench_loader: %s: %s\n", what, ts_last_error());
  exit(1);
}

/* Median samples/s of `repeats` runs of `batches` batches each, consumed with
 * no work in between (the loader's ceiling). */
static double bench_loader(const char *name, const ts_source *src, ts_loader_options o, int batches, int repeats) {
  double *rate = malloc((size_t)repeats * sizeof *rate);
  for (int r = 0; r < repeats; r++) {
    o.seed = (uint64_t)r;
    ts_loader *l = ts_loader_new(src, &o);
    if (!l) die(name);
    if (!ts_loader_next(l)) die(name); /* the first batch includes thread start-up */
    ts_loader_reset_stats(l);
    double t0 = now_s();
    int64_t samples = 0;
    for (int b = 0; b < batches; b++) {
      const ts_loader_batch *bt = ts_loader_next(l);
      if (!bt) die(name);
      samples += ts_batch_valid(bt);
    }
    rate[r] = (double)samples / (now_s() - t0);
    ts_loader_free(l);
  }
  qsort(rate, (size_t)repeats, sizeof *rate, cmp_double);
  double med = rate[repeats / 2];
  printf("RESULT loader %s batch=%lld workers=%d prefetch=%d samples_per_s=%.0f (min %.0f max %.0f)\n", name,
         (long long)o.batch, o.workers, o.prefetch, med, rate[0], rate[repeats - 1]);
  fflush(stdout);
  free(rate);
  return med;
}

/* The MNIST CNN training step (AdamW), fed either from pre-made random data
 * (loader NULL: the trainer's consumption rate) or from the loader (the data
 * wait is then measured). Returns samples/s (median step). */
static double bench_cnn(ts_loader *loader, int threads, int steps, double *wait_pct) {
  const int64_t B = 64;
  ts_client_options copts = {.num_threads = threads};
  ts_client *c = ts_client_new(&copts);
  ts_params *p = ts_params_new(1);
  if (!c || !p) die("setup");
  // The CNN training step of tessel train (tools/model_graph.c).
  model_graph_spec spec = {.model = MODEL_GRAPH_CNN, .batch = B, .c = 1, .h = 28, .w = 28,
                           .optim = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}};
  ts_graph *g = model_train_graph(&spec, p);
  if (!g) die("building the step");
  ts_executable *exe = ts_compile(c, g, NULL);
  if (!exe) die("compile");
  int n_out = ts_graph_num_outputs(g);
  ts_buffer **out = calloc((size_t)n_out, sizeof *out);
  model_io io; // x, y, lr, step, seed, loss; parameters bound by name
  if (model_io_bind(&io, g, p, c) < 0) die("binding the inputs");
  float *xh = calloc((size_t)(B * 784), sizeof *xh); // (B, 1, 28, 28)
  int32_t *yh = calloc((size_t)B, sizeof *yh);        // (B)
  double *ms = malloc((size_t)steps * sizeof *ms);
  const int warmup = 3;
  double total = 0;
  if (loader) ts_loader_reset_stats(loader);
  for (int t = 0; t < warmup + steps; t++) {
    if (t == warmup && loader) ts_loader_reset_stats(loader), total = 0;
    double t0 = now_s();
    const float *bx = xh;
    const int32_t *by = yh;
    if (loader) {
      const ts_loader_batch *bt = ts_loader_next(loader);
      if (!bt) die("loader");
      ts_batch_local_rows(bt, NULL, &bx, &by, NULL);
    }
    float lrv = 1e-3f, stepv = (float)(t + 1), lossv;
    int64_t seedv = t;
    ts_buffer_write(io.x, bx, (size_t)(B * 784) * sizeof(float));
    ts_buffer_write(io.y, by, (size_t)B * sizeof(int32_t));
    ts_buffer_write(io.lr, &lrv, sizeof lrv);
    ts_buffer_write(io.step, &stepv, sizeof stepv);
    ts_buffer_write(io.seed, &seedv, sizeof seedv);
    out[0] = io.result;
    for (int o = 1; o < n_out; o++) out[o] = NULL; // aliased to parameters
    if (ts_execute(exe, io.in, out) < 0) die("execute");
    ts_buffer_read(io.result, &lossv, sizeof lossv);
    double dt = now_s() - t0;
    if (t >= warmup) ms[t - warmup] = 1e3 * dt, total += dt;
  }
  if (loader && wait_pct) {
    ts_loader_stats st;
    ts_loader_get_stats(loader, &st);
    *wait_pct = 100.0 * st.wait_s / total;
  }
  qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
  double rate = 1e3 * (double)B / ms[steps / 2];
  free(ms), free(xh), free(yh), free(out);
  model_io_free(&io);
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return rate;
}

int main(int argc, char **argv) {
  int threads = 2, workers = 1, prefetch = 4, repeats = 5, no_cnn = 0;
  const char *dir = TS_FASHION_MNIST_DIR;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_loader: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--threads")) threads = atoi(v);
    else if (!strcmp(argv[i], "--workers")) workers = atoi(v);
    else if (!strcmp(argv[i], "--prefetch")) prefetch = atoi(v);
    else if (!strcmp(argv[i], "--repeats")) repeats = atoi(v);
    else if (!strcmp(argv[i], "--data-dir")) dir = v;
    else if (!strcmp(argv[i], "--no-cnn")) no_cnn = atoi(v);
    else {
      fprintf(stderr, "bench_loader: unknown flag %s\n", argv[i]);
      return 2;
    }
    i++;
  }
  if (repeats < 1) repeats = 1;

  ts_dataset fm = {0};
  ts_source *fsrc = NULL;
  double fm_rate = 0;
  if (ts_mnist_load(dir, "train", &fm) == 0) {
    fsrc = ts_source_from_dataset(&fm, "fashion-mnist");
    ts_loader_options o = {.batch = 64, .prefetch = prefetch, .workers = workers,
                           .augment = {.crop_pad = 2, .hflip = true, .mean = {0.2860f}, .std = {0.3530f}}};
    fm_rate = bench_loader("fashion-mnist", fsrc, o, 400, repeats);
  } else {
    fprintf(stderr, "bench_loader: skipping Fashion-MNIST: %s\n", ts_last_error());
  }

  ts_source *syn = ts_source_synthetic(1281167, 3, 224, 224, 1000, 0);
  ts_loader_options so = {.batch = 32, .prefetch = prefetch, .workers = workers,
                          .augment = {.crop_pad = 4, .hflip = true, .mean = {0.485f, 0.456f, 0.406f},
                                      .std = {0.229f, 0.224f, 0.225f}}};
  bench_loader("synthetic-imagenet-3x224x224", syn, so, 20, repeats);

  double cnn = no_cnn ? 0 : bench_cnn(NULL, threads, 20, NULL);
  if (!no_cnn) printf("RESULT cnn_step batch=64 threads=%d samples_per_s=%.0f (random data, no loader)\n", threads, cnn);
  if (fm_rate > 0 && !no_cnn) {
    printf("RESULT ratio loader/cnn=%.1f (target >= 10)\n", fm_rate / cnn);
    ts_loader_options o = {.batch = 64, .prefetch = prefetch, .workers = workers,
                           .augment = {.crop_pad = 2, .hflip = true, .mean = {0.2860f}, .std = {0.3530f}}};
    ts_loader *l = ts_loader_new(fsrc, &o);
    if (!l) die("loader");
    double wait_pct = 0;
    double fed = bench_cnn(l, threads, 40, &wait_pct);
    printf("RESULT overlap cnn_step_fed_by_loader samples_per_s=%.0f data_wait_pct=%.2f (target < 2)\n", fed,
           wait_pct);
    ts_loader_free(l);
  }
  ts_source_free(syn);
  ts_source_free(fsrc);
  if (fm.images) ts_dataset_free(&fm);
  return 0;
}
