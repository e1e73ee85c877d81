/* pool_step.c — benchmark: one max-pool kernel call and its gradient on a
 * given (N, C, H, W) f32 activation, default ResNet-50 b8's stem pool
 * (8x64x112x112, 3x3 window, stride 2, pad 1), timed through kernel_run as
 * the executor calls it. run_op_profile.sh shows where a step's pooling time
 * goes; this isolates it (A/B: run two builds' binaries interleaved).
 *
 *   usage: bench_pool_step [--threads N (2)] [--reps R (20)] [--shape N,C,H,W] [--window K,S,P]
 *
 * Prints: RESULT pool fwd_ms=.. grad_ms=.. fwd_cpu_ms=.. grad_cpu_ms=.. (medians over R calls;
 * CPU = process CPU time per call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h" /* now_s, cmp_double */
#include "ir/ir.h"
#include "kernels/kernels.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *filled(int64_t n, unsigned seed) {
  float *p = aligned_alloc(64, (size_t)(n * 4 + 64) / 64 * 64);
  if (!p) exit(1);
  for (int64_t i = 0; i < n; i++) p[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
  return p;
}

/* median of R timed calls of node id: wall ms in *wall, CPU ms in *cpu */
static void time_node(ts_graph *g, int id, const void **in, void *out, int nt, int reps, double *wall, double *cpu) {
  double *w = calloc((size_t)reps, sizeof *w), *c = calloc((size_t)reps, sizeof *c);
  ts_kstate *st = NULL;
  ts_kctx ctx = {.num_threads = nt};
  for (int r = -2; r < reps; r++) {
    double t0 = now_s(), c0 = cpu_s();
    if (kernel_run(g, id, in, out, &st, &ctx)) {
      fprintf(stderr, "bench_pool_step: %s\n", ts_last_error());
      exit(1);
    }
    if (r >= 0) w[r] = 1e3 * (now_s() - t0), c[r] = 1e3 * (cpu_s() - c0);
  }
  qsort(w, (size_t)reps, sizeof *w, cmp_double), qsort(c, (size_t)reps, sizeof *c, cmp_double);
  *wall = w[reps / 2], *cpu = c[reps / 2];
  free(w), free(c);
}

int main(int argc, char **argv) {
  int nt = 2, reps = 20, k = 3, s = 2, pad = 1;
  long long N = 8, C = 64, H = 112, W = 112;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) nt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--shape") && sscanf(argv[i + 1], "%lld,%lld,%lld,%lld", &N, &C, &H, &W) == 4) continue;
    else if (!strcmp(argv[i], "--window") && sscanf(argv[i + 1], "%d,%d,%d", &k, &s, &pad) == 3) continue;
    else {
      fprintf(stderr, "bench_pool_step: bad flag or value '%s %s'\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  if (nt < 1 || reps < 1 || k < 1 || s < 1 || pad < 0 || N < 1 || C < 1 || H < k || W < k) {
    fprintf(stderr, "bench_pool_step: bad values (threads %d reps %d window %d,%d,%d shape %lld,%lld,%lld,%lld)\n", nt,
            reps, k, s, pad, N, C, H, W);
    return 2;
  }
  int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
  int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
  ts_graph *g = ts_graph_new();
  ts_attr at = {.pool = {{k, k}, {s, s}, {pad, pad}, TS_LAYOUT_NCHW}};
  int32_t x = ir_append(g, TS_OP_INPUT, TS_F32, 4, xs, 0, NULL, NULL);
  int32_t dy = ir_append(g, TS_OP_INPUT, TS_F32, 4, ys, 0, NULL, NULL);
  int32_t y = ir_append(g, TS_OP_MAXPOOL, TS_F32, 4, ys, 1, &x, &at);
  int32_t gi[2] = {x, dy};
  int32_t dx = ir_append(g, TS_OP_MAXPOOL_GRAD, TS_F32, 4, xs, 2, gi, &at);
  void *bx = filled(N * C * H * W, 1), *bdy = filled(N * C * OH * OW, 2);
  void *by = filled(N * C * OH * OW, 3), *bdx = filled(N * C * H * W, 4);
  double fw, fc, gw, gc;
  const void *fin[1] = {bx}, *gin[2] = {bx, bdy};
  time_node(g, y, fin, by, nt, reps, &fw, &fc);
  time_node(g, dx, gin, bdx, nt, reps, &gw, &gc);
  printf("RESULT pool shape=%lldx%lldx%lldx%lld window=%d,%d,%d threads=%d reps=%d fwd_ms=%.3f grad_ms=%.3f "
         "fwd_cpu_ms=%.3f grad_cpu_ms=%.3f\n", N, C, H, W, k, s, pad, nt, reps, fw, gw, fc, gc);
  free(bx), free(bdy), free(by), free(bdx);
  ts_graph_free(g);
  return 0;
}
