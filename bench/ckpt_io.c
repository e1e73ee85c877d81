/* ckpt_io.c — benchmark: save and restore time of a training state
 * (parameters + AdamW moments, the running statistics) through
 * tessel/ckpt.h, against the disk's own sequential write and read bandwidth
 * measured in the same run on the same directory (bench/run_ckpt.sh runs dd
 * beside it). ResNet-50 (25.6 M parameters, 307 MB of state in f32) by
 * default.
 *
 *   bench_ckpt_io [--model resnet50|resnet20|mlp] [--dir DIR] [--rounds N]
 *
 * Each round saves a new step through a background saver (ts_ckpt_saver:
 * the caller waits for the snapshot of the device buffers only, a thread
 * writes; fsync of every file and the directory, as a real save) and waits
 * for it, then opens the latest and loads every tensor back into the
 * device buffers (the page cache is dropped first when the process may:
 * /proc/sys/vm/drop_caches; otherwise the load reads from cache and the
 * line says so). Prints
 *   RESULT ckpt <model> bytes=B save_median_s=.. load_median_s=.. save_GBps=.. load_GBps=.. cold_load=0|1
 *          snapshot_median_s=.. write_median_s=.. step_wait_fraction=..
 * (save: from the start of the save to the checkpoint in place; snapshot:
 * what a training step waits; step_wait_fraction = snapshot / save, the
 * issue's target <= 0.10) and checks that what was loaded equals what was saved (bit for bit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* sync */

#include "bench_util.h" /* now_s, cmp_double, median */
#include "model_graph.h" /* the training step of tessel train: parameters + optimizer state */

#include "tessel/tessel.h"

static void die(const char *what) {
  fprintf(stderr, "bench_ckpt_io: %s: %s\n", what, ts_last_error());
  exit(1);
}

static int drop_caches(void) {
  sync();
  FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
  if (!f) return 0;
  int ok = fputs("3\n", f) >= 0;
  return fclose(f) == 0 && ok;
}

/* A hash of every entry's device values (to check a load bit for bit). */
static uint64_t state_hash(ts_params *p, ts_client *c) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < ts_params_count(p); i++) {
    ts_buffer *b = ts_params_buffer(p, c, i);
    size_t bytes = (size_t)ts_params_numel(p, i) * 4;
    unsigned char *v = malloc(bytes);
    if (!v || ts_buffer_read(b, v, bytes) < 0) die("reading a parameter");
    for (size_t k = 0; k < bytes; k++) h = (h ^ v[k]) * 1099511628211ull;
    free(v);
  }
  return h;
}

int main(int argc, char **argv) {
  const char *model = "resnet50", *dir = "/tmp/tessel_bench_ckpt";
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_ckpt_io [--model resnet50|resnet20|mlp] [--dir DIR] [--rounds N]\n");
      return 2;
    }
  }
  bool r50 = !strcmp(model, "resnet50"), r20 = !strcmp(model, "resnet20");
  if (!r50 && !r20 && strcmp(model, "mlp")) {
    fprintf(stderr, "bench_ckpt_io: --model: unknown model '%s' (valid: resnet50, resnet20, mlp)\n", model);
    return 2;
  }
  if (rounds < 1) rounds = 1;
  ts_client *c = ts_client_new(NULL);
  ts_params *p = ts_params_new(1);
  model_graph_spec spec = {.model = r50 ? MODEL_GRAPH_RESNET50 : r20 ? MODEL_GRAPH_RESNET20 : MODEL_GRAPH_MLP,
                           .batch = 2, .c = r50 ? 3 : 1, .h = r50 ? 224 : 28, .w = r50 ? 224 : 28,
                           .classes = r50 ? 1000 : 10, .optim = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}};
  ts_graph *g = c && p ? model_train_graph(&spec, p) : NULL; /* declares the parameters and AdamW moments */
  if (!g) die("building the step");
  size_t bytes = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    bytes += (size_t)ts_params_numel(p, i) * 4;
    if (!ts_params_buffer(p, c, i)) die("uploading");
  }
  uint64_t want = state_hash(p, c);
  double *save = malloc((size_t)rounds * sizeof *save), *load = malloc((size_t)rounds * sizeof *load);
  double *snap = malloc((size_t)rounds * sizeof *snap), *write = malloc((size_t)rounds * sizeof *write);
  int cold = 1;
  /* One saver for every round, as tessel train keeps one: the snapshot
   * memory is allocated by the first save and reused. */
  ts_ckpt_saver *sv = ts_ckpt_saver_new(c);
  if (!sv) die("saver");
  for (int r = 0; r < rounds; r++) {
    ts_ckpt_meta meta = {.step = r + 1};
    /* The background save: the caller waits for the snapshot only; then
     * (here, nothing else to do) for the write and the commit. */
    if (ts_ckpt_saver_save_params(sv, dir, p, &meta, 1) < 0 || ts_ckpt_saver_wait(sv) < 0) die("save");
    ts_ckpt_save_stats st;
    ts_ckpt_saver_stats(sv, &st);
    save[r] = st.total_s, snap[r] = st.snapshot_s, write[r] = st.write_s;
    cold &= drop_caches();
    double t0 = now_s();
    ts_ckpt *ck = ts_ckpt_open(dir);
    if (!ck || ts_ckpt_load_params(ck, c, p, false) < 0) die("load");
    load[r] = now_s() - t0;
    ts_ckpt_close(ck);
    if (state_hash(p, c) != want) {
      fprintf(stderr, "bench_ckpt_io: the loaded state differs from the saved one\n");
      return 1;
    }
  }
  ts_ckpt_saver_free(sv);
  qsort(snap, (size_t)rounds, sizeof *snap, cmp_double);
  qsort(write, (size_t)rounds, sizeof *write, cmp_double);
  qsort(save, (size_t)rounds, sizeof *save, cmp_double);
  qsort(load, (size_t)rounds, sizeof *load, cmp_double);
  double ms = save[rounds / 2], ml = load[rounds / 2];
  double msn = snap[rounds / 2];
  printf("RESULT ckpt %s bytes=%zu tensors=%d save_median_s=%.3f load_median_s=%.3f save_GBps=%.3f load_GBps=%.3f "
         "cold_load=%d snapshot_median_s=%.4f write_median_s=%.3f step_wait_fraction=%.3f\n", model, bytes,
         ts_params_count(p), ms, ml, (double)bytes / ms / 1e9, (double)bytes / ml / 1e9, cold, msn, write[rounds / 2],
         msn / ms);
  free(save), free(load), free(snap), free(write);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return 0;
}
