/* layernorm_ab.c — A/B guide for the fused layer norm (kernels/layernorm.c):
 * forward + backward (y, dx, dgamma, dbeta of sum(layer_norm(x) * c)) of
 * ts_layer_norm (fused for f32) against ts_layer_norm_decomposed on x
 * (B, T, C), interleaved rounds, process CPU time per call (clock()), so a
 * 1-thread run gives a usable ratio on a busy machine.
 *
 *   usage: bench_layernorm_ab [B (8)] [T (128)] [C (256)] [iters per round (40)]
 *   e.g.   TESSEL_NUM_THREADS=1 build/bench_layernorm_ab
 * Prints: layernorm_ab B=.. T=.. C=.. decomposed_cpu_ms=.. fused_cpu_ms=.. ratio=.. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tessel/tessel.h"

static ts_executable *build(ts_client *cl, const int64_t *s, bool fused) {
  ts_graph *g = ts_graph_new();
  int64_t D = s[2];
  ts_tensor x[3] = {ts_input(g, "x", TS_F32, 3, s), ts_input(g, "gamma", TS_F32, 1, &D),
                    ts_input(g, "beta", TS_F32, 1, &D)};
  ts_tensor c = ts_input(g, "c", TS_F32, 3, s);
  ts_tensor y = fused ? ts_layer_norm(g, x[0], x[1], x[2], 1e-5) : ts_layer_norm_decomposed(g, x[0], x[1], x[2], 1e-5);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, y, c)), d[3];
  ts_executable *e = NULL;
  if (loss != TS_NONE && !ts_grad(g, loss, 3, x, d) && ts_graph_add_output(g, y) >= 0 &&
      ts_graph_add_output(g, d[0]) >= 0 && ts_graph_add_output(g, d[1]) >= 0 && ts_graph_add_output(g, d[2]) >= 0)
    e = ts_compile(cl, g, NULL);
  ts_graph_free(g);
  return e;
}

int main(int argc, char **argv) {
  int64_t s[3] = {8, 128, 256};
  int iters = 40;
  for (int i = 1; i < argc && i < 4; i++) s[i - 1] = atoll(argv[i]);
  if (argc > 4) iters = atoi(argv[4]);
  if (s[0] < 1 || s[1] < 1 || s[2] < 1 || iters < 1) {
    fprintf(stderr, "bench_layernorm_ab: sizes and iters must be >= 1\n");
    return 2;
  }
  int64_t n = s[0] * s[1] * s[2], D = s[2];
  ts_client *cl = ts_client_new(NULL);
  float *h = malloc(sizeof *h * (size_t)(2 * n + 2 * D));
  if (!cl || !h) {
    fprintf(stderr, "bench_layernorm_ab: %s\n", cl ? "out of memory" : ts_last_error());
    return 1;
  }
  for (int64_t i = 0; i < 2 * n + 2 * D; i++) h[i] = (float)((uint64_t)i * 2654435761u % 1000) / 500.f - 1.f;
  ts_buffer *in[4] = {ts_buffer_from_host(cl, TS_F32, 3, s, h), ts_buffer_from_host(cl, TS_F32, 1, &D, h + n),
                      ts_buffer_from_host(cl, TS_F32, 1, &D, h + n + D),
                      ts_buffer_from_host(cl, TS_F32, 3, s, h + n + 2 * D)};
  ts_executable *e[2] = {build(cl, s, false), build(cl, s, true)};
  if (!e[0] || !e[1] || !in[3]) {
    fprintf(stderr, "bench_layernorm_ab: %s\n", ts_last_error());
    return 1;
  }
  double t[2] = {0, 0};
  for (int r = 0; r < 6; r++) /* round 0 warms up */
    for (int k = 0; k < 2; k++) {
      clock_t c0 = clock();
      for (int it = 0; it < iters; it++) {
        ts_buffer *o[4] = {0};
        if (ts_execute(e[k], in, o)) {
          fprintf(stderr, "bench_layernorm_ab: %s\n", ts_last_error());
          return 1;
        }
        for (int i = 0; i < 4; i++) ts_buffer_free(o[i]);
      }
      if (r) t[k] += (double)(clock() - c0) / CLOCKS_PER_SEC * 1e3 / (5.0 * iters);
    }
  printf("layernorm_ab B=%lld T=%lld C=%lld decomposed_cpu_ms=%.3f fused_cpu_ms=%.3f ratio=%.2f\n", (long long)s[0],
         (long long)s[1], (long long)s[2], t[0], t[1], t[0] / t[1]);
  for (int i = 0; i < 4; i++) ts_buffer_free(in[i]);
  ts_executable_free(e[0]), ts_executable_free(e[1]);
  ts_client_free(cl);
  free(h);
  return 0;
}
