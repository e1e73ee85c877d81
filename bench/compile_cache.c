/* compile_cache.c — benchmark: compile time of the MNIST CNN training step
 * (forward, loss, backward, AdamW; batch 64) cold vs. from the in-memory
 * compile cache vs. from the persistent cache (a fresh in-memory cache, the
 * entry on disk: what a second process sees); then the step-time overhead
 * of metrics and tracing: metrics off / metrics on / metrics + trace on, in
 * interleaved rounds so drift hits all three alike.
 *
 *   usage: bench_compile_cache [--model cnn|mlp] [--compiles N (5)]
 *                              [--steps N (40)] [--threads N (2)]
 *
 * ts_compile = the graph passes (what the cache saves) + building the
 * executable (memory plan, device memory, constants: done on every compile,
 * cached or not); the passes alone are timed too.
 * Prints medians side by side with the ratio to the reference of the same
 * run (cold compile; metrics off):
 *   RESULT compile cold_ms=.. memory_hit_ms=.. (x..) persistent_hit_ms=.. (x..)
 *   RESULT passes cold_ms=.. memory_hit_ms=.. (x..) persistent_hit_ms=.. (x..)
 *   RESULT step off_ms=.. metrics_ms=.. (+..%) trace_ms=.. (+..%) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h" /* now_s, cmp_double, median */
#include "model_graph.h" /* the training step of tessel train */

#include "compile/cache.h"   /* cache_compile_graph: the passes alone */
#include "compile/compile.h" /* compile_graph */
#include "tessel/metrics.h"
#include "tessel/tessel.h"

static double now_ms(void) { return 1e3 * now_s(); }

static void die(const char *what) {
  fprintf(stderr, "bench_compile_cache: %s: %s\n", what, ts_last_error());
  exit(1);
}

/* The CNN (or MLP) training step of tessel train (tools/model_graph.c). */
static ts_graph *build_step(ts_params *p, bool cnn, int64_t B) {
  model_graph_spec spec = {.model = cnn ? MODEL_GRAPH_CNN : MODEL_GRAPH_MLP, .batch = B, .c = 1, .h = 28, .w = 28,
                           .optim = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}};
  ts_graph *g = model_train_graph(&spec, p);
  if (!g) die("building the step");
  return g;
}

static double time_compile(ts_client *c, const ts_graph *g) {
  double t0 = now_ms();
  ts_executable *e = ts_compile(c, g, NULL);
  double t = now_ms() - t0;
  if (!e) die("compile");
  ts_executable_free(e);
  return t;
}

int main(int argc, char **argv) {
  bool cnn = true;
  int compiles = 5, steps = 40, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) cnn = strcmp(argv[i + 1], "mlp") != 0;
    else if (!strcmp(argv[i], "--compiles")) compiles = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "bench_compile_cache: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (compiles < 1 || steps < 3 || threads < 1) {
    fprintf(stderr, "bench_compile_cache: --compiles >= 1, --steps >= 3, --threads >= 1\n");
    return 2;
  }
  const int64_t B = cnn ? 64 : 128;
  ts_client_options copts = {.num_threads = threads};
  ts_client *c = ts_client_new(&copts);
  ts_params *p = ts_params_new(1);
  if (!c || !p) die("setup");
  ts_graph *g = build_step(p, cnn, B);

  /* ---- compile: cold, memory hit, persistent hit ---- */
  char dir[] = "/tmp/tessel_bench_cache_XXXXXX";
  if (!mkdtemp(dir)) die("mkdtemp");
  double *cold = malloc(sizeof(double) * (size_t)compiles), *mem = malloc(sizeof(double) * (size_t)compiles),
         *disk = malloc(sizeof(double) * (size_t)compiles);
  for (int k = 0; k < compiles; k++) {
    ts_compile_cache_set_dir(NULL);
    ts_compile_cache_clear();
    cold[k] = time_compile(c, g);
    mem[k] = time_compile(c, g);
    ts_compile_cache_set_dir(dir);
    ts_compile_cache_clear();
    time_compile(c, g); /* writes the entry */
    ts_compile_cache_clear();
    disk[k] = time_compile(c, g);
  }
  /* the passes alone: compile_graph vs. the cache's answers */
  double *pc = malloc(sizeof(double) * (size_t)compiles), *pm = malloc(sizeof(double) * (size_t)compiles),
         *pd = malloc(sizeof(double) * (size_t)compiles);
  for (int k = 0; k < compiles; k++) {
    double t0 = now_ms();
    ts_graph *o = compile_graph(g, NULL);
    pc[k] = now_ms() - t0;
    ts_graph_free(o);
    ts_compile_cache_set_dir(dir);
    ts_compile_cache_clear();
    ts_graph_free(cache_compile_graph(g, NULL)); /* entry on disk (already there) and in memory */
    t0 = now_ms();
    o = cache_compile_graph(g, NULL);
    pm[k] = now_ms() - t0;
    ts_graph_free(o);
    ts_compile_cache_clear();
    t0 = now_ms();
    o = cache_compile_graph(g, NULL);
    pd[k] = now_ms() - t0;
    if (!o) die("persistent hit");
    ts_graph_free(o);
  }
  int64_t hits = ts_counter_value("PersistentCacheHit"), cached = ts_counter_value("CachedCompile");
  double mc = median(cold, compiles), mm = median(mem, compiles), md = median(disk, compiles);
  printf("RESULT compile model=%s cold_ms=%.2f memory_hit_ms=%.2f (x%.1f faster) persistent_hit_ms=%.2f "
         "(x%.1f faster) [CachedCompile=%lld PersistentCacheHit=%lld]\n",
         cnn ? "cnn" : "mlp", mc, mm, mc / mm, md, mc / md, (long long)cached, (long long)hits);
  double qc = median(pc, compiles), qm = median(pm, compiles), qd = median(pd, compiles);
  printf("RESULT passes model=%s nodes=%d cold_ms=%.2f memory_hit_ms=%.2f (x%.1f faster) persistent_hit_ms=%.2f "
         "(x%.1f faster)\n", cnn ? "cnn" : "mlp", ts_graph_num_nodes(g), qc, qm, qc / qm, qd, qc / qd);
  fflush(stdout);
  free(pc), free(pm), free(pd);
  ts_compile_cache_set_dir(NULL);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_compile_cache: could not remove %s\n", dir);

  /* ---- step time: metrics off / on / on + trace ---- */
  ts_executable *e = ts_compile(c, g, NULL);
  if (!e) die("compile");
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in, sizeof *in), **out = calloc((size_t)n_out, sizeof *out);
  ts_buffer *own[5] = {0};
  const char *names[5] = {"x", "y", "lr", "step", "seed"};
  for (int i = 0; i < n_in; i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    int k = 0;
    while (k < 5 && strcmp(names[k], name)) k++;
    if (k < 5) in[i] = own[k] = ts_buffer_new(c, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t));
    else in[i] = ts_params_buffer(p, c, ts_params_find(p, name));
    if (!in[i]) die(name);
  }
  float lrv = 1e-4f;
  ts_buffer_write(own[2], &lrv, sizeof lrv);
  ts_buffer *loss = ts_buffer_new(c, TS_F32, 0, NULL);
  double *t_off = malloc(sizeof(double) * (size_t)steps), *t_on = malloc(sizeof(double) * (size_t)steps),
         *t_tr = malloc(sizeof(double) * (size_t)steps);
  char trace[] = "/tmp/tessel_bench_trace_XXXXXX";
  int fd = mkstemp(trace);
  if (fd >= 0) close(fd);
  for (int s = -2; s < steps; s++) { /* two warm-up rounds */
    for (int mode = 0; mode < 3; mode++) {
      ts_metrics_set_enabled(mode > 0);
      if (mode == 2) ts_trace_start();
      float stepv = (float)(s + 3);
      ts_buffer_write(own[3], &stepv, sizeof stepv);
      out[0] = loss;
      for (int o = 1; o < n_out; o++) out[o] = NULL;
      double t0 = now_ms();
      if (ts_execute(e, in, out) < 0) die("execute");
      double t = now_ms() - t0;
      if (mode == 2) ts_trace_stop(trace);
      if (s >= 0) (mode == 0 ? t_off : mode == 1 ? t_on : t_tr)[s] = t;
    }
  }
  ts_metrics_set_enabled(true);
  unlink(trace);
  double so = median(t_off, steps), sm = median(t_on, steps), st = median(t_tr, steps);
  printf("RESULT step model=%s steps=%d off_ms=%.3f metrics_ms=%.3f (%+.2f%%) trace_ms=%.3f (%+.2f%%)\n",
         cnn ? "cnn" : "mlp", steps, so, sm, 100 * (sm / so - 1), st, 100 * (st / so - 1));
  free(cold), free(mem), free(disk), free(t_off), free(t_on), free(t_tr);
  for (int k = 0; k < 5; k++) ts_buffer_free(own[k]);
  ts_buffer_free(loss);
  free(in), free(out);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return 0;
}
