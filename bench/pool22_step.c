/* pool22_step.c — benchmark: the 2x2 stride-2 max pool (the MNIST CNN's;
 * kernels/pool22.c) and its gradient, one kernel_run call each, in NCHW or
 * NHWC, f32 or bf16, on one host's half batch of the CNN (32x64x24x24) by
 * default: the least and the median CPU ms of R calls per kernel (CPU time of
 * the process: with --threads 1 the work done, steadier on a shared host).
 *
 *   usage: bench_pool22_step [--threads N (1)] [--reps R (100)] [--shape N,C,H,W]
 *                            [--layout nchw|nhwc] [--dtype f32|bf16]
 *   A/B against another build (the kernel API is internal: link its library):
 *     gcc -O2 -Iinclude -Isrc -Ibench bench/pool22_step.c -o pool22_A A/build/libtessel.a \
 *       -fopenmp -ldnnl -lglpk -lz -lm -lturbojpeg -lpng16 \
 *       /usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openmpi/lib
 *       (the MPI part if A was built with MPI)
 *   then ./pool22_A and build/bench_pool22_step alternately (A B A B).
 * Prints: RESULT pool22 layout=.. dtype=.. shape=.. fwd_least_ms=.. fwd_med_ms=..
 *         grad_least_ms=.. grad_med_ms=..
 * (--shape is N,C,H,W in either layout: NHWC tensors are (N, H, W, C)). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h" /* cmp_double */
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "util/half.h"

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + 1e-6 * (double)t.tv_nsec;
}

/* n values in [-0.5, 0.5) of dtype dt */
static void *filled(ts_dtype dt, int64_t n, unsigned seed) {
  size_t es = ts_dtype_size(dt);
  char *p = aligned_alloc(64, ((size_t)n * es + 64) / 64 * 64);
  if (!p) exit(1);
  for (int64_t i = 0; i < n; i++) {
    float v = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    if (dt == TS_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = ts_f32_to_bf16(v);
  }
  return p;
}

/* least and median CPU ms of R calls of node id (after 2 untimed) */
static void time_node(ts_graph *g, int id, const void **in, void *out, int nt, int reps, double *least, double *med) {
  double *c = calloc((size_t)reps, sizeof *c);
  ts_kstate *st = NULL;
  ts_kctx ctx = {.num_threads = nt};
  for (int r = -2; r < reps; r++) {
    double c0 = cpu_ms();
    if (kernel_run(g, id, in, out, &st, &ctx)) {
      fprintf(stderr, "bench_pool22_step: %s\n", ts_last_error());
      exit(1);
    }
    if (r >= 0) c[r] = cpu_ms() - c0;
  }
  qsort(c, (size_t)reps, sizeof *c, cmp_double);
  *least = c[0], *med = c[reps / 2];
  free(c);
}

int main(int argc, char **argv) {
  int nt = 1, reps = 100;
  long long N = 32, C = 64, H = 24, W = 24;
  const char *lay = "nchw", *dts = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *f = argv[i], *v = argv[i + 1];
    if (!strcmp(f, "--threads")) nt = atoi(v);
    else if (!strcmp(f, "--reps")) reps = atoi(v);
    else if (!strcmp(f, "--layout")) lay = v;
    else if (!strcmp(f, "--dtype")) dts = v;
    else if (strcmp(f, "--shape") || sscanf(v, "%lld,%lld,%lld,%lld", &N, &C, &H, &W) != 4) {
      fprintf(stderr, "bench_pool22_step: bad flag or value '%s %s'\n", f, v);
      return 2;
    }
  }
  bool nhwc = !strcmp(lay, "nhwc"), bf = !strcmp(dts, "bf16");
  if (nt < 1 || reps < 1 || N < 1 || C < 1 || H < 2 || W < 2 || (!nhwc && strcmp(lay, "nchw")) ||
      (!bf && strcmp(dts, "f32"))) {
    fprintf(stderr, "bench_pool22_step: bad values (threads %d reps %d layout %s dtype %s shape %lld,%lld,%lld,%lld)\n",
            nt, reps, lay, dts, N, C, H, W);
    return 2;
  }
  ts_dtype dt = bf ? TS_BF16 : TS_F32;
  int64_t OH = H / 2, OW = W / 2;
  int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
  if (nhwc) xs[1] = H, xs[2] = W, xs[3] = C, ys[1] = OH, ys[2] = OW, ys[3] = C;
  ts_graph *g = ts_graph_new();
  ts_attr at = {.pool = {{2, 2}, {2, 2}, {0, 0}, nhwc ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW}};
  int32_t x = ir_append(g, TS_OP_INPUT, dt, 4, xs, 0, NULL, NULL);
  int32_t dy = ir_append(g, TS_OP_INPUT, dt, 4, ys, 0, NULL, NULL);
  int32_t y = ir_append(g, TS_OP_MAXPOOL, dt, 4, ys, 1, &x, &at);
  int32_t gi[2] = {x, dy};
  int32_t dx = ir_append(g, TS_OP_MAXPOOL_GRAD, dt, 4, xs, 2, gi, &at);
  int64_t nx = N * C * H * W, ny = N * C * OH * OW;
  void *bx = filled(dt, nx, 1), *bdy = filled(dt, ny, 2), *by = filled(dt, ny, 3), *bdx = filled(dt, nx, 4);
  double fl, fm, gl, gm;
  const void *fin[1] = {bx}, *gin[2] = {bx, bdy};
  time_node(g, y, fin, by, nt, reps, &fl, &fm);
  time_node(g, dx, gin, bdx, nt, reps, &gl, &gm);
  printf("RESULT pool22 layout=%s dtype=%s shape=%lldx%lldx%lldx%lld threads=%d reps=%d fwd_least_ms=%.3f "
         "fwd_med_ms=%.3f grad_least_ms=%.3f grad_med_ms=%.3f\n",
         lay, dts, N, C, H, W, nt, reps, fl, fm, gl, gm);
  free(bx), free(bdy), free(by), free(bdx);
  ts_graph_free(g);
  return 0;
}
