/* pool_layout.c — ResNet-50's stem max pool (b8, 64 channels, 112x112,
 * 3x3 stride 2 pad 1) in NCHW and in NHWC, f32, forward alone and the
 * gradient program (ts_grad of sum(y * c): the max-pool gradient from x and
 * c), on one thread: the least ms per execute over R runs.
 *
 *   usage: bench_pool_layout [runs (12)]
 *   A/B against another build: the same source against its shared library,
 *   gcc -O2 -Iinclude bench/pool_layout.c -o pool_A -LA/build -ltessel -Wl,-rpath,A/build
 *   and TESSEL_NUM_THREADS=1 ./pool_A; ./build/bench_pool_layout alternately.
 * Stop 34 (nhwc15), load 7.5, 3 rounds: c617a66 NHWC forward 48.7-105 ms,
 * gradient 94-160; this code 3.7-4.4 / 9.5-19.7; NCHW 3.4-3.8 / 9.0-20.4. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessel/tessel.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The least ms of `runs` executes of the pool (grad: its gradient program) in layout L; < 0 on error. */
static double least_ms(ts_client *c, ts_layout L, int grad, int runs) {
  bool nhwc = L == TS_LAYOUT_NHWC;
  int64_t xs[4] = {8, nhwc ? 112 : 64, 112, nhwc ? 64 : 112}, ys[4] = {8, nhwc ? 56 : 64, 56, nhwc ? 64 : 56};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs), cot = ts_input(g, "c", TS_F32, 4, ys);
  ts_pool_params p = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}, .layout = L};
  ts_tensor y = ts_max_pool2d(g, x, &p), d = TS_NONE;
  if (grad && ts_grad(g, ts_sum_all(g, ts_mul(g, y, cot)), 1, &x, &d) < 0) d = TS_NONE;
  ts_graph_add_output(g, grad ? d : y);
  ts_executable *e = ts_compile(c, g, NULL);
  ts_graph_free(g);
  if (!e) return -1;
  size_t nx = 8 * 64 * 112 * 112, ny = 8 * 64 * 56 * 56;
  float *hx = malloc(nx * sizeof *hx), *hy = malloc(ny * sizeof *hy);
  for (size_t i = 0; hx && i < nx; i++) hx[i] = (float)((i * 2654435761u) % 1000) / 1000.f;
  for (size_t i = 0; hy && i < ny; i++) hy[i] = 1.0f;
  ts_buffer *in[2] = {hx ? ts_buffer_from_host(c, TS_F32, 4, xs, hx) : NULL,
                      hy ? ts_buffer_from_host(c, TS_F32, 4, ys, hy) : NULL};
  double best = in[0] && in[1] ? 1e30 : -1;
  for (int r = 0; best > 0 && r < runs; r++) {
    ts_buffer *out[1] = {0};
    double t0 = now_ms();
    if (ts_execute(e, in, out) < 0) best = -1;
    double t = now_ms() - t0;
    if (best > 0 && t < best) best = t;
    ts_buffer_free(out[0]);
  }
  ts_buffer_free(in[0]), ts_buffer_free(in[1]);
  free(hx), free(hy);
  ts_executable_free(e);
  return best;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 12;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1});
  if (!c || runs < 1) {
    fprintf(stderr, "bench_pool_layout: %s\n", c ? "runs must be >= 1" : ts_last_error());
    return 2;
  }
  for (int grad = 0; grad < 2; grad++) {
    double a = least_ms(c, TS_LAYOUT_NCHW, grad, runs), b = least_ms(c, TS_LAYOUT_NHWC, grad, runs);
    if (a < 0 || b < 0) {
      fprintf(stderr, "bench_pool_layout: %s\n", ts_last_error());
      return 1;
    }
    printf("max pool 3x3/2 b8 64x112x112 f32 %-8s nchw %8.2f ms  nhwc %8.2f ms (least of %d, 1 thread)\n",
           grad ? "gradient" : "forward", a, b, runs);
  }
  ts_client_free(c);
  return 0;
}
