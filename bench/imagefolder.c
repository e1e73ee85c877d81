/* imagefolder.c — benchmark: can the ImageFolder pipeline keep ResNet-50 fed?
 *
 *   usage: bench_imagefolder [--data-dir ROOT (default: generate)]
 *                            [--generate N (512)] [--gen-size WxH (500x375)]
 *                            [--out DIR (generate into DIR/train and DIR/val
 *                             and keep them, e.g. for tessel train)]
 *                            [--size S (224)] [--batch B (32)] [--batches K (8)]
 *                            [--workers LIST (1,2,4,8)] [--default-workers W (4)]
 *                            [--threads T (all cores)] [--resnet-steps N (10), 0: skip]
 *
 * Without --data-dir it writes N JPEGs of WxH (ImageNet's typical 500x375,
 * smooth gradients + texture + noise at quality 90: about ImageNet's bytes per
 * pixel) in 10 classes into a temporary ROOT/train (removed at the end).
 *   1. The loader alone (read + decode + RandomResizedCrop to SxS + flip +
 *      normalize), for each worker count: images/s, and per worker thread
 *      (scaling with workers). Median of 3 runs of K batches after one.
 *   2. ResNet-50's training step (batch B, SxS, AdamW; --threads compute
 *      threads) on random data: the images/s the loader must sustain.
 *   3. The same step fed by the loader with the default worker count (the
 *      workers share the machine with the step): the step's data wait in % of
 *      step time (target < 2).
 * Prints
 *   RESULT imagefolder_loader workers=W images_per_s=.. per_worker=..
 *   RESULT resnet50_step batch=B size=S threads=T images_per_s=..
 *   RESULT imagefolder_fed_resnet50 workers=W images_per_s=.. data_wait_pct=..
 *   RESULT workers_needed=.. (ResNet-50 rate / one worker's rate) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "bench_util.h" /* now_s, median */
#include "model_graph.h"
#include "tessel/imagefolder.h"
#include "tessel/tessel.h"
#include "util/prng.h"

static void die(const char *what) {
  fprintf(stderr, "bench_imagefolder: %s: %s\n", what, ts_last_error());
  exit(1);
}

static void generate(const char *root, const char *split, int n, int w, int h) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", root, split);
  mkdir(p, 0755);
  tjhandle tj = tjInitCompress();
  uint8_t *rgb = malloc((size_t)w * h * 3);
  ts_prng r;
  ts_prng_seed(&r, 42);
  for (int i = 0; i < n; i++) {
    int k = i % 10;
    snprintf(p, sizeof p, "%s/%s/n%08d", root, split, k);
    mkdir(p, 0755);
    double fx = 0.5 + ts_prng_uniform(&r), fy = 0.5 + ts_prng_uniform(&r);
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        for (int c = 0; c < 3; c++) {
          int v = (int)(60 + 25 * k + 80.0 * x / w * fx + 60.0 * y / h * fy) + ((x * (c + 1) + y * (k + 2)) / 5 % 7) * 6 +
                  (int)(ts_prng_next(&r) % 24);
          rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)(v & 255);
        }
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    if (!tj || tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &len, TJSAMP_420, 90, 0) < 0) {
      fprintf(stderr, "bench_imagefolder: JPEG encoding failed\n");
      exit(1);
    }
    snprintf(p, sizeof p, "%s/%s/n%08d/%06d.JPEG", root, split, k, i);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(jpg, 1, len, f) != len) {
      fprintf(stderr, "bench_imagefolder: cannot write %s\n", p);
      exit(1);
    }
    fclose(f);
    tjFree(jpg);
  }
  free(rgb);
  tjDestroy(tj);
}

static ts_loader_options loader_opts(int64_t batch, int workers) {
  return (ts_loader_options){.batch = batch, .prefetch = 2 * workers + 2, .workers = workers,
                             .augment = {.hflip = true, .mean = TS_IMAGENET_MEAN, .std = TS_IMAGENET_STD}};
}

static double bench_loader(const ts_source *src, int64_t batch, int workers, int batches) {
  double rate[3];
  for (int rep = 0; rep < 3; rep++) {
    ts_loader_options o = loader_opts(batch, workers);
    o.seed = (uint64_t)rep;
    ts_loader *l = ts_loader_new(src, &o);
    if (!l || !ts_loader_next(l)) die("loader"); /* the first batch includes thread start-up */
    double t0 = now_s();
    int64_t n = 0;
    for (int b = 0; b < batches; b++) {
      const ts_loader_batch *bt = ts_loader_next(l);
      if (!bt) die("loader");
      n += ts_batch_valid(bt);
    }
    rate[rep] = (double)n / (now_s() - t0);
    ts_loader_free(l);
  }
  return median(rate, 3);
}

/* ResNet-50 steps on random data (loader NULL) or fed by the loader; images/s
 * (median step) and the data wait in % of the steps' time. */
static double bench_resnet(int threads, int64_t B, int S, int steps, ts_loader *loader, double *wait_pct) {
  ts_client_options co = {.num_threads = threads};
  ts_client *c = ts_client_new(&co);
  ts_params *p = ts_params_new(1);
  if (!c || !p) die("setup");
  model_graph_spec spec = {.model = MODEL_GRAPH_RESNET50, .batch = B, .c = 3, .h = S, .w = S, .classes = 10,
                           .optim = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}};
  ts_graph *g = model_train_graph(&spec, p);
  ts_executable *exe = g ? ts_compile(c, g, NULL) : NULL;
  if (!exe) die("ResNet-50 step");
  int n_out = ts_graph_num_outputs(g);
  ts_buffer **out = calloc((size_t)n_out, sizeof *out);
  model_io io;
  if (model_io_bind(&io, g, p, c) < 0) die("binding");
  size_t xn = (size_t)B * 3 * S * S;
  float *xh = malloc(xn * sizeof *xh);
  int32_t *yh = calloc((size_t)B, sizeof *yh);
  for (size_t i = 0; i < xn; i++) xh[i] = (float)(i % 17) / 17.0f - 0.5f;
  double *ms = malloc((size_t)steps * sizeof *ms), total = 0;
  const int warmup = 2;
  for (int t = 0; t < warmup + steps; t++) {
    if (t == warmup && loader) ts_loader_reset_stats(loader);
    double t0 = now_s();
    const float *bx = xh;
    const int32_t *by = yh;
    if (loader) {
      const ts_loader_batch *bt = ts_loader_next(loader);
      if (!bt) die("loader");
      ts_batch_local_rows(bt, NULL, &bx, &by, NULL);
    }
    float lr = 1e-3f, stepv = (float)(t + 1), loss;
    int64_t seed = t;
    ts_buffer_write(io.x, bx, xn * sizeof *bx);
    ts_buffer_write(io.y, by, (size_t)B * sizeof *by);
    ts_buffer_write(io.lr, &lr, sizeof lr);
    ts_buffer_write(io.step, &stepv, sizeof stepv);
    ts_buffer_write(io.seed, &seed, sizeof seed);
    out[0] = io.result;
    for (int o = 1; o < n_out; o++) out[o] = NULL;
    if (ts_execute(exe, io.in, out) < 0) die("execute");
    ts_buffer_read(io.result, &loss, sizeof loss);
    double dt = now_s() - t0;
    if (t >= warmup) ms[t - warmup] = dt, total += dt;
  }
  if (loader && wait_pct) {
    ts_loader_stats st;
    ts_loader_get_stats(loader, &st);
    *wait_pct = 100.0 * st.wait_s / total;
  }
  double rate = (double)B / median(ms, steps);
  free(ms), free(xh), free(yh), free(out);
  model_io_free(&io);
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return rate;
}

int main(int argc, char **argv) {
  const char *dir = NULL, *out = NULL, *wlist = "1,2,4,8";
  int gen = 512, gw = 500, gh = 375, S = 224, batches = 8, defw = 4, threads = 0, rsteps = 10;
  int64_t B = 32;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_imagefolder: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--data-dir")) dir = v;
    else if (!strcmp(argv[i], "--generate")) gen = atoi(v);
    else if (!strcmp(argv[i], "--out")) out = v;
    else if (!strcmp(argv[i], "--gen-size")) sscanf(v, "%dx%d", &gw, &gh);
    else if (!strcmp(argv[i], "--size")) S = atoi(v);
    else if (!strcmp(argv[i], "--batch")) B = atoi(v);
    else if (!strcmp(argv[i], "--batches")) batches = atoi(v);
    else if (!strcmp(argv[i], "--workers")) wlist = v;
    else if (!strcmp(argv[i], "--default-workers")) defw = atoi(v);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(v);
    else if (!strcmp(argv[i], "--resnet-steps")) rsteps = atoi(v);
    else {
      fprintf(stderr, "bench_imagefolder: unknown flag %s\n", argv[i]);
      return 2;
    }
    i++;
  }
  char tmp[64] = "";
  if (out) { /* a tree to keep: train/ and val/ (an eighth), for tessel train */
    mkdir(out, 0755);
    generate(out, "train", gen, gw, gh);
    generate(out, "val", gen / 8 > 10 ? gen / 8 : 10, gw, gh);
    printf("generated %d + %d JPEGs of %dx%d in %s/train, %s/val\n", gen, gen / 8 > 10 ? gen / 8 : 10, gw, gh, out,
           out);
    dir = out;
  }
  if (!dir) {
    snprintf(tmp, sizeof tmp, "/tmp/tessel_bench_imgf_XXXXXX");
    if (!mkdtemp(tmp)) die("mkdtemp");
    double t0 = now_s();
    generate(tmp, "train", gen, gw, gh);
    printf("generated %d JPEGs of %dx%d in %s (%.1fs)\n", gen, gw, gh, tmp, now_s() - t0);
    dir = tmp;
  }
  ts_imagefolder_options io = {.size = S, .train = true};
  ts_source *src = ts_imagefolder_open(dir, "train", &io);
  if (!src) die("open");
  printf("imagefolder: %lld files, %d classes, crops of %dx%d, batch %lld\n", (long long)src->n, src->num_classes, S, S,
         (long long)B);
  double one = 0;
  for (const char *p = wlist; *p;) {
    int w = atoi(p);
    if (w > 0) {
      double r = bench_loader(src, B, w, batches);
      if (one == 0 || w == 1) one = r / w;
      printf("RESULT imagefolder_loader workers=%d images_per_s=%.1f per_worker=%.1f\n", w, r, r / w);
      fflush(stdout);
    }
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  if (rsteps > 0) {
    double rn = bench_resnet(threads, B, S, rsteps, NULL, NULL);
    printf("RESULT resnet50_step batch=%lld size=%d threads=%d images_per_s=%.1f (random data)\n", (long long)B, S,
           threads, rn);
    printf("RESULT workers_needed=%.3g (ResNet-50 images/s / one worker's images/s)\n", one > 0 ? rn / one : 0.0);
    ts_loader_options o = loader_opts(B, defw);
    ts_loader *l = ts_loader_new(src, &o);
    if (!l) die("loader");
    double wait = 0, fed = bench_resnet(threads, B, S, rsteps, l, &wait);
    printf("RESULT imagefolder_fed_resnet50 workers=%d images_per_s=%.1f data_wait_pct=%.2f (target < 2)\n", defw, fed,
           wait);
    ts_loader_free(l);
  }
  ts_source_free(src);
  if (tmp[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "bench_imagefolder: cannot remove %s\n", tmp);
  }
  return 0;
}
