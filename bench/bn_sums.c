/* bn_sums.c — benchmark: batch norm's backward sums as a ResNet step runs
 * them, one stacked fused reduction (opt/fuse_siblings.c) of sum(g) and
 * sum(g * (x_i - m_i)) for k - 1 batch norms reading the same gradient g
 * (k = 2: a plain block; k = 3: a projection block, whose main and shortcut
 * batch norms share g), over (N, C, H, W) in bf16 or f32, reduced over N, H, W;
 * --layout nhwc: the same tensors stored (N, H, W, C), the channels innermost.
 *
 *   usage: bench_bn_sums [--shape N,C,H,W (8,256,56,56)] [--k 2|3 (2)] [--dtype bf16|f32 (bf16)]
 *                        [--threads T (1)] [--reps R (15)] [--layout nchw|nhwc (nchw)]
 *
 * Prints: RESULT bn_sums k=.. dtype=.. shape=.. ms=.. cpu_ms=.. min_ms=.. min_cpu_ms=..
 * (medians of R executes, and the least; CPU = process CPU time per
 * execute, so a 1-thread run gives a usable number on a busy host) and the
 * sums' checksum (%.9g: A/B builds must print the same). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h" /* now_s, cmp_double */
#include "tessel/tessel.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  long long s[4] = {8, 256, 56, 56};
  int k = 2, nt = 1, reps = 15;
  ts_dtype dt = TS_BF16;
  bool nhwc = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--shape") && sscanf(argv[i + 1], "%lld,%lld,%lld,%lld", &s[0], &s[1], &s[2], &s[3]) == 4)
      continue;
    if (!strcmp(argv[i], "--k")) k = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) nt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--layout") && (!strcmp(argv[i + 1], "nchw") || !strcmp(argv[i + 1], "nhwc")))
      nhwc = !strcmp(argv[i + 1], "nhwc");
    else if (!strcmp(argv[i], "--dtype") && (!strcmp(argv[i + 1], "bf16") || !strcmp(argv[i + 1], "f32")))
      dt = !strcmp(argv[i + 1], "f32") ? TS_F32 : TS_BF16;
    else {
      fprintf(stderr, "bench_bn_sums: bad flag or value '%s %s'\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  if (k < 2 || k > 3 || nt < 1 || reps < 1 || s[0] < 1 || s[1] < 1 || s[2] < 1 || s[3] < 1) {
    fprintf(stderr, "bench_bn_sums: bad values (k %d threads %d reps %d)\n", k, nt, reps);
    return 2;
  }
  int64_t s4[4] = {s[0], s[1], s[2], s[3]}, c = s[1], numel = s[0] * s[1] * s[2] * s[3];
  int one = 1, nhw[3] = {0, 2, 3};
  if (nhwc) { /* (N, H, W, C), reduced over 0, 1, 2, the means broadcast along 3 */
    s4[1] = s[2], s4[2] = s[3], s4[3] = s[1];
    one = 3, nhw[1] = 1, nhw[2] = 2;
  }
  ts_graph *g = ts_graph_new();
  ts_tensor dy = ts_input(g, "g", dt, 4, s4), gf = dt == TS_F32 ? dy : ts_convert(g, dy, TS_F32);
  ts_graph_add_output(g, ts_reduce(g, gf, TS_REDUCE_SUM, 3, nhw, false));
  for (int i = 0; i < k - 1; i++) {
    char xn[8], mn[8];
    snprintf(xn, sizeof xn, "x%d", i), snprintf(mn, sizeof mn, "m%d", i);
    ts_tensor x = ts_input(g, xn, dt, 4, s4), m = ts_input(g, mn, TS_F32, 1, &c);
    ts_tensor xc = ts_sub(g, dt == TS_F32 ? x : ts_convert(g, x, TS_F32), ts_broadcast_in_dim(g, m, 4, s4, &one));
    ts_graph_add_output(g, ts_reduce(g, ts_mul(g, gf, xc), TS_REDUCE_SUM, 3, nhw, false));
  }
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = nt});
  ts_executable *e = cl ? ts_compile(cl, g, NULL) : NULL;
  if (!e) {
    fprintf(stderr, "bench_bn_sums: %s\n", ts_last_error());
    return 1;
  }
  size_t es = dt == TS_F32 ? 4 : 2;
  char *host = malloc((size_t)numel * es);
  float hm[4096];
  uint64_t r = 12345;
  for (int64_t i = 0; i < numel; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    float f = (float)(r >> 40) / (float)(1 << 24) - 0.5f;
    if (es == 4) memcpy(host + 4 * i, &f, 4);
    else {
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t h = (uint16_t)(u >> 16);
      memcpy(host + 2 * i, &h, 2);
    }
  }
  for (int64_t i = 0; i < c && i < 4096; i++) hm[i] = 0.01f * (float)(i % 7);
  ts_buffer *in[5] = {0}, *out[3] = {0};
  in[0] = ts_buffer_from_host(cl, dt, 4, s4, host);
  for (int i = 0; i < k - 1; i++) {
    in[1 + 2 * i] = ts_buffer_from_host(cl, dt, 4, s4, host);
    in[2 + 2 * i] = ts_buffer_from_host(cl, TS_F32, 1, &c, hm);
  }
  double *w = calloc((size_t)reps, sizeof *w), *cp = calloc((size_t)reps, sizeof *cp), sum = 0;
  for (int i = -2; i < reps; i++) {
    for (int q = 0; q < k; q++) ts_buffer_free(out[q]), out[q] = NULL;
    double t0 = now_s(), c0 = cpu_s();
    if (ts_execute(e, in, out)) {
      fprintf(stderr, "bench_bn_sums: %s\n", ts_last_error());
      return 1;
    }
    if (i >= 0) w[i] = 1e3 * (now_s() - t0), cp[i] = 1e3 * (cpu_s() - c0);
  }
  float *res = malloc((size_t)c * 4);
  for (int q = 0; q < k; q++)
    if (ts_buffer_read(out[q], res, (size_t)c * 4) == 0)
      for (int64_t i = 0; i < c; i++) sum += res[i] * (double)(q + 1);
  qsort(w, (size_t)reps, sizeof *w, cmp_double), qsort(cp, (size_t)reps, sizeof *cp, cmp_double);
  printf("RESULT bn_sums k=%d dtype=%s shape=%lld,%lld,%lld,%lld layout=%s threads=%d ms=%.3f cpu_ms=%.3f "
         "min_ms=%.3f min_cpu_ms=%.3f checksum=%.9g\n",
         k, ts_dtype_name(dt), s[0], s[1], s[2], s[3], nhwc ? "nhwc" : "nchw", nt, w[reps / 2], cp[reps / 2], w[0],
         cp[0], sum);
  return 0;
}
