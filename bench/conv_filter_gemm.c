/* conv_filter_gemm.c — the filter gradient of ResNet-50's 1x1 NHWC
 * convolutions at one image per device (8 devices, batch 8), as
 * kernels/conv_gemm.c runs it (one GEMM: dw = dy^T x_s) against oneDNN's
 * convolution (tk_conv_set_gemm_1x1(false)), one just under the GEMM's cut
 * (40x40, K = 1600 positions) and the 56x56 control it leaves to the
 * convolution (K = 3136, above 2048): least ms
 * of a one-node program over interleaved rounds, 1 thread, and the largest
 * relative difference of the two results (each path computed the same thing).
 *
 *   usage: bench_conv_filter_gemm [rounds (5)] [reps per round (5)]
 * Prints per shape: conv_filter_gemm HxW CxO stride=S conv_ms=.. gemm_ms=.. ratio=.. maxrel=.. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"      /* now_s */
#include "kernels/kernels.h" /* tk_conv_set_gemm_1x1 */
#include "tessel/tessel.h"

typedef struct {
  int64_t H, C, O, s; /* input H = W, channels in and out, stride */
} shape_t;

/* ResNet-50's 1x1 filter gradients of 14x14 and 7x7 outputs, one at 40x40
 * (K 1600, under conv_gemm.c's cut) and a 56x56 control (over it) */
static const shape_t shapes[] = {{14, 1024, 256, 1}, {14, 256, 1024, 1}, {7, 2048, 512, 1}, {7, 512, 2048, 1},
                                 {14, 1024, 2048, 2}, {28, 512, 1024, 2}, {40, 1024, 256, 1}, {56, 64, 256, 1}};

typedef struct {
  ts_executable *e;
  ts_buffer *in[3], *out; /* x, w (read by nothing the program keeps), dy */
} prog_t;

static int open_prog(ts_client *c, const shape_t *q, bool gemm, prog_t *p) {
  int64_t OH = (q->H - 1) / q->s + 1, xs[4] = {1, q->H, q->H, q->C}, ys[4] = {1, OH, OH, q->O}, ws[4] = {q->O, q->C, 1, 1};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs), w = ts_input(g, "w", TS_F32, 4, ws), dy = ts_input(g, "dy", TS_F32, 4, ys);
  ts_conv_params cp = {.stride = {(int)q->s, (int)q->s}, .layout = TS_LAYOUT_NHWC};
  ts_tensor y = ts_conv2d(g, x, w, &cp), dw = TS_NONE;
  if (ts_vjp(g, 1, &y, &dy, 1, &w, &dw) < 0) return -1;
  ts_graph_add_output(g, dw);
  tk_conv_set_gemm_1x1(gemm);
  p->e = ts_compile(c, g, NULL);
  ts_graph_free(g);
  if (!p->e) return -1;
  const int64_t *sh[3] = {xs, ws, ys};
  for (int i = 0; i < 3; i++) {
    int64_t n = sh[i][0] * sh[i][1] * sh[i][2] * sh[i][3];
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t k = 0; k < n; k++) h[k] = (float)((k * 2654435761u) % 1000) / 1000.0f - 0.5f;
    p->in[i] = ts_buffer_from_host(c, TS_F32, 4, sh[i], h);
    free(h);
  }
  p->out = NULL;
  return p->in[0] && p->in[1] && p->in[2] ? 0 : -1;
}

/* The least of reps runs; the switch as when the program first ran (the
 * kernel keeps the path it took in its state: kernels.h). */
static double run_least(prog_t *p, bool gemm, int reps) {
  double best = 1e30;
  tk_conv_set_gemm_1x1(gemm);
  for (int r = 0; r < reps; r++) {
    ts_buffer *o[1] = {p->out};
    double t0 = now_s();
    if (ts_execute(p->e, p->in, o) < 0) return -1;
    double t = now_s() - t0;
    p->out = o[0];
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5, reps = argc > 2 ? atoi(argv[2]) : 5;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  if (!c) return 1;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape_t *q = &shapes[i];
    prog_t p[2] = {{0}};
    if (open_prog(c, q, false, &p[0]) < 0 || open_prog(c, q, true, &p[1]) < 0) {
      fprintf(stderr, "conv_filter_gemm: %s\n", ts_last_error());
      return 1;
    }
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < 2; k++) {
        double t = run_least(&p[k], k == 1, reps);
        if (t < 0) return fprintf(stderr, "conv_filter_gemm: %s\n", ts_last_error()), 1;
        if (t < best[k]) best[k] = t;
      }
    size_t n = (size_t)(q->O * q->C);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    double maxrel = 0;
    if (ts_buffer_read(p[0].out, a, n * sizeof *a) == 0 && ts_buffer_read(p[1].out, b, n * sizeof *b) == 0)
      for (size_t k = 0; k < n; k++) maxrel = fmax(maxrel, fabs((double)a[k] - b[k]) / (1 + fabs((double)a[k])));
    else maxrel = NAN;
    printf("conv_filter_gemm %lldx%lld %lldx%lld stride=%lld conv_ms=%.3f gemm_ms=%.3f ratio=%.2f maxrel=%.2g\n",
           (long long)q->H, (long long)q->H, (long long)q->C, (long long)q->O, (long long)q->s, best[0] * 1e3,
           best[1] * 1e3, best[1] / best[0], maxrel);
    free(a), free(b);
    for (int k = 0; k < 2; k++) {
      for (int j = 0; j < 3; j++) ts_buffer_free(p[k].in[j]);
      ts_buffer_free(p[k].out);
      ts_executable_free(p[k].e);
    }
    if (!(maxrel < 1e-4)) return fprintf(stderr, "conv_filter_gemm: the two paths differ (%g)\n", maxrel), 1;
  }
  tk_conv_set_gemm_1x1(true);
  ts_client_free(c);
  return 0;
}
