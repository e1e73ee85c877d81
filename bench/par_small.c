/* par_small.c — what a device's second thread buys a kernel, by size (issue
 * 16: the MLP's 1-device step ran 0.72 of its prediction; traced, its large
 * kernels ran 1.7-2.0x faster on 2 threads than on 1, its kernels of 10-30 us
 * not at all or slower, while the model divides every kernel of 32768 or more
 * elements by the threads x the class's parallel efficiency).
 * Chains of 50 unfused f32 adds of n elements (a reshape between two keeps
 * them apart, as tessel plan --calibrate's fork-and-join chains), of 50
 * (128,n)x(n,n) matmuls, and of 25 such matmuls each followed by a fused
 * ReLU(2x) of its result (the MLP's pattern: the next kernel reads data the
 * other kind split over the cores another way), on a 1-thread and an
 * every-thread client,
 * interleaved rounds, each the least wall time of its runs (a loaded
 * machine's estimate of the quiet time): microseconds per kernel and the
 * speedup.
 *
 *   usage: bench_par_small [rounds (7)] [runs per round (5)]
 * Prints one line per shape: par_small KIND n=.. t1_us=.. tN_us=.. speedup=.. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h" /* now_s */
#include "tessel/tessel.h"

enum { CHAIN = 50 };

/* The chain graph: kind 0 adds of n elements ((128, n/128) <-> (n/128, 128)),
 * kind 1 matmuls (128,n)x(n,n), kind 2 both by turns as an MLP layer runs
 * them (a matmul, then ReLU(+ x) of its (128,n) result in a fused kernel:
 * each reads what the other kind wrote, split over the threads its own way). */
static ts_graph *chain(int kind, int64_t n, int64_t *xs, int64_t *ws) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t a[2] = {128, kind ? n : n / 128}, b[2] = {kind ? n : n / 128, kind ? n : 128};
  xs[0] = a[0], xs[1] = a[1], ws[0] = b[0], ws[1] = b[1];
  ts_tensor x = ts_input(g, "x", TS_F32, 2, a), w = ts_input(g, "w", TS_F32, 2, kind ? b : a);
  if (!kind) ws[0] = a[0], ws[1] = a[1];
  for (int i = 0; i < CHAIN; i++)
    x = kind == 1 || (kind == 2 && i % 2 == 0) ? ts_matmul(g, x, w)
        : kind == 2                           ? ts_relu(g, ts_add(g, x, x))
                                              : ts_add(g, ts_reshape(g, ts_reshape(g, x, 2, b), 2, a), w);
  ts_graph_add_output(g, x);
  return g;
}

/* Least seconds per kernel over `runs` executions of e. */
static double least(ts_executable *e, ts_buffer **in, int runs) {
  double best = -1;
  for (int r = 0; r < runs; r++) {
    ts_buffer *o[1] = {0};
    double t0 = now_s();
    if (ts_execute(e, in, o)) return -1;
    double t = (now_s() - t0) / CHAIN;
    ts_buffer_free(o[0]);
    if (best < 0 || t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 7, runs = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 1 || runs < 1) {
    fprintf(stderr, "bench_par_small: rounds and runs must be >= 1\n");
    return 2;
  }
  ts_client *cl[2] = {ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1}),
                      ts_client_new(&(ts_client_options){.num_devices = 1})};
  if (!cl[0] || !cl[1]) {
    fprintf(stderr, "bench_par_small: %s\n", ts_last_error());
    return 1;
  }
  const int64_t adds[] = {32768, 65536, 262144, 1048576}, mms[] = {32, 128, 256, 512};
  for (int kind = 0; kind < 3; kind++)
    for (int s = 0; s < 4; s++) {
      int64_t n = kind ? mms[s] : adds[s], xs[2], ws[2];
      ts_graph *g = chain(kind, n, xs, ws);
      float *h = calloc((size_t)(xs[0] * xs[1] + ws[0] * ws[1]), sizeof *h);
      for (int64_t i = 0; h && i < xs[0] * xs[1] + ws[0] * ws[1]; i++) h[i] = 1e-3f * (float)(i % 7);
      ts_executable *e[2] = {0};
      ts_buffer *in[2][2] = {{0}};
      for (int c = 0; c < 2 && g && h; c++) {
        e[c] = ts_compile(cl[c], g, NULL);
        in[c][0] = ts_buffer_from_host(cl[c], TS_F32, 2, xs, h);
        in[c][1] = ts_buffer_from_host(cl[c], TS_F32, 2, ws, h + xs[0] * xs[1]);
      }
      double t[2] = {-1, -1};
      for (int r = 0; r < rounds && e[0] && e[1] && in[1][1]; r++)
        for (int c = 0; c < 2; c++) {
          double v = least(e[c], in[c], runs);
          if (v < 0) {
            fprintf(stderr, "bench_par_small: %s\n", ts_last_error());
            return 1;
          }
          if (t[c] < 0 || v < t[c]) t[c] = v;
        }
      if (t[0] < 0) {
        fprintf(stderr, "bench_par_small: %s\n", ts_last_error());
        return 1;
      }
      printf("par_small %s n=%lld t1_us=%.2f tN_us=%.2f speedup=%.2f\n", kind == 2 ? "matmul+relu(128,n)" : kind ? "matmul(128,n)x(n,n)" : "add",
             (long long)n, 1e6 * t[0], 1e6 * t[1], t[0] / t[1]);
      for (int c = 0; c < 2; c++) ts_executable_free(e[c]), ts_buffer_free(in[c][0]), ts_buffer_free(in[c][1]);
      ts_graph_free(g);
      free(h);
    }
  ts_client_free(cl[0]), ts_client_free(cl[1]);
  return 0;
}
