/* fused_loops.c — benchmark: the fused programs' fast loops
 * (src/kernels/fused_fast.c) alone, one pattern over an f32 (N, C, H, W)
 * tensor through tk_program_run, out of place or written over a full-size
 * input (--inplace K: over input K - 1; the memory plan's in-place writes;
 * relu_grad*: y, u[, w], apply_relu and bn_grad: x first; relu_grad_add_amp:
 * a bf16 step's ReLU gradient of a sum, y and w bf16, u f32, --inplace 2 as
 * the memory plan writes it; relu_grad_amp: its plain ReLU gradient, y and u
 * bf16, a bf16 result; apply_relu_amp, bn_grad_amp: x (and dy) bf16, a bf16 result).
 *
 *   usage: bench_fused_loops [--pattern relu_grad|relu_grad_add|relu_grad_amp|relu_grad_add_amp|apply_relu[_amp]|bn_grad[_amp]]
 *                            [--shape N,C,H,W (128,16,32,32)] [--inplace 0|K (0)] [--threads T (1)] [--reps R (21)]
 *                            [--layout nchw|nhwc (nchw)] [--interp 0|1 (0)] [--nan-chan 0|1 (0)]
 *
 * --layout nhwc: the per-channel inputs broadcast channel-innermost (a run of
 * one element, channel e % C at element e), as a channels-last step's are.
 * --interp 1: the tile interpreter (fused.c) instead of the fast loop.
 * --nan-chan 1: channel 0 of the second per-channel input (apply: a, bn_grad:
 * k) is NaN (fused_apply.c sends such a call to the chunk loop).
 *
 * Prints: RESULT fused_loops pattern=.. inplace=.. ms=.. cpu_ms=.. (medians of
 * R runs) cpu_min_ms=.. (the least; CPU = process CPU time per run: a 1-thread run gives a usable
 * number on a busy host) and a checksum of the result (%.9g: A and B builds
 * must print the same). Build it against another tree's library for an A/B:
 *   cc -O2 -march=native -fopenmp -I$A/src -I$A/include bench/fused_loops.c $A/build/libtessel.a -lm -o fused_loops_A */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels_internal.h"

static double clk(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static ts_fused_instr I(ts_op op, int32_t a, int32_t b, double v) {
  return (ts_fused_instr){.op = op, .dtype = TS_F32, .a = a, .b = b, .value = v};
}

/* The pattern's instructions into ins (returns their count) and its inputs' kinds (1: full size, 0: per channel;
 * bf[k]: input k is bf16). */
static int build(const char *pat, int64_t inner, ts_fused_instr *ins, int *full, int *bf, int *n_ext) {
  int n = 0;
  if (!strcmp(pat, "relu_grad_amp")) { /* a bf16 step's: bf16(select(y > 0, float(u), 0)), y and u bf16 */
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONVERT, .dtype = TS_F32, .a = -2};
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = TS_BF16, .value = 0};
    ins[n] = I(TS_OP_COMPARE, -1, 1, 0), ins[n++].cmp = TS_CMP_GT;
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = TS_F32, .value = 0};
    ins[n] = I(TS_OP_SELECT, 2, 0, 0), ins[n].c = 3, n++;
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONVERT, .dtype = TS_BF16, .a = 4};
    *n_ext = 2;
    full[0] = full[1] = 1, bf[0] = bf[1] = 1;
    return n;
  }
  if (!strcmp(pat, "relu_grad_add_amp")) { /* a bf16 step's: select(y > 0, u + float(w), 0), y and w bf16 */
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONVERT, .dtype = TS_F32, .a = -3};
    ins[n++] = I(TS_OP_ADD, -2, 0, 0);
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = TS_BF16, .value = 0};
    ins[n] = I(TS_OP_COMPARE, -1, 2, 0), ins[n++].cmp = TS_CMP_GT;
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = TS_F32, .value = 0};
    ins[n] = I(TS_OP_SELECT, 3, 1, 0), ins[n].c = 4, n++;
    *n_ext = 3;
    for (int k = 0; k < 3; k++) full[k] = 1;
    bf[0] = bf[2] = 1;
    return n;
  }
  if (!strncmp(pat, "relu_grad", 9)) {
    bool add = !strcmp(pat, "relu_grad_add");
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = TS_F32, .value = 0};
    ins[n] = I(TS_OP_COMPARE, -1, 0, 0), ins[n++].cmp = TS_CMP_GT; /* y > 0 */
    if (add) ins[n++] = I(TS_OP_ADD, -2, -3, 0);
    ins[n] = I(TS_OP_SELECT, 1, add ? 2 : -2, 0), ins[n].c = 0, n++;
    *n_ext = add ? 3 : 2;
    for (int k = 0; k < *n_ext; k++) full[k] = 1;
    return n;
  }
  /* *_amp: a bf16 step's, the full-size inputs read through CONVERT from bf16, a bf16 result */
  bool amp = strstr(pat, "_amp") != NULL;
  for (int k = 1; k <= 4; k++) ins[n++] = I(TS_OP_BROADCAST, -k - 1, 0, (double)inner), full[k] = 0;
  full[0] = 1;
  int32_t x = -1, dy = -6;
  if (amp) x = n, ins[n++] = I(TS_OP_CONVERT, -1, 0, 0), bf[0] = 1;
  if (!strncmp(pat, "apply_relu", 10)) { /* max(((x - m) * a) * g + b, 0) */
    ins[n] = I(TS_OP_SUB, x, 0, 0), n++;
    ins[n] = I(TS_OP_MUL, n - 1, 1, 0), n++;
    ins[n] = I(TS_OP_MUL, n - 1, 2, 0), n++;
    ins[n] = I(TS_OP_ADD, n - 1, 3, 0), n++;
    ins[n++] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = TS_F32, .value = 0};
    ins[n] = I(TS_OP_MAX, n - 2, n - 1, 0), n++;
    *n_ext = 5;
  } else { /* bn_grad: ((dy - c) - (x - m) * k) * s, dy: input 5 */
    full[5] = 1, *n_ext = 6;
    if (amp) dy = n, ins[n++] = I(TS_OP_CONVERT, -6, 0, 0), bf[5] = 1;
    ins[n] = I(TS_OP_SUB, x, 0, 0), n++;
    ins[n] = I(TS_OP_MUL, n - 1, 1, 0), n++;
    ins[n] = I(TS_OP_SUB, dy, 2, 0), n++;
    ins[n] = I(TS_OP_SUB, n - 1, n - 2, 0), n++;
    ins[n] = I(TS_OP_MUL, n - 1, 3, 0), n++;
  }
  if (amp) ins[n] = (ts_fused_instr){.op = TS_OP_CONVERT, .dtype = TS_BF16, .a = n - 1}, n++;
  return n;
}

int main(int argc, char **argv) {
  long long s[4] = {128, 16, 32, 32};
  int inplace = 0, nt = 1, reps = 21, interp = 0, nan_chan = 0;
  const char *pat = "relu_grad_add", *layout = "nchw";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--shape") && sscanf(argv[i + 1], "%lld,%lld,%lld,%lld", &s[0], &s[1], &s[2], &s[3]) == 4)
      continue;
    if (!strcmp(argv[i], "--pattern")) pat = argv[i + 1];
    else if (!strcmp(argv[i], "--inplace")) inplace = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) nt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--layout")) layout = argv[i + 1];
    else if (!strcmp(argv[i], "--interp")) interp = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--nan-chan")) nan_chan = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "bench_fused_loops: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  int64_t numel = s[0] * s[1] * s[2] * s[3], inner = strcmp(layout, "nhwc") ? s[2] * s[3] : 1;
  ts_fused_instr ins[16];
  int full[8], bf[8] = {0}, n_ext;
  int n = build(pat, inner, ins, full, bf, &n_ext);
  ts_fused prog = {n, ins};
  ts_dtype dt[8];
  int64_t ne[8];
  float *in[8], *keep = malloc((size_t)numel * 4), *out = malloc((size_t)numel * 4);
  for (int k = 0; k < n_ext; k++) {
    dt[k] = bf[k] ? TS_BF16 : TS_F32, ne[k] = full[k] ? numel : s[1];
    in[k] = malloc((size_t)ne[k] * 4);
    for (int64_t i = 0; i < ne[k]; i++) {
      float v = (float)((i * 7 + k * 13) % 101) * 0.02f - 1.f;
      if (bf[k]) {
        uint32_t u;
        memcpy(&u, &v, 4);
        ((uint16_t *)in[k])[i] = (uint16_t)(u >> 16);
      } else {
        in[k][i] = v;
      }
    }
  }
  if (nan_chan && n_ext > 2 && !full[2]) in[2][0] = NAN;
  float *over = inplace > 0 && inplace <= n_ext && full[inplace - 1] && !bf[inplace - 1] ? in[inplace - 1] : NULL;
  if (inplace && !over) {
    fprintf(stderr, "bench_fused_loops: --inplace %d is not a full-size input\n", inplace);
    return 2;
  }
  if (over) memcpy(keep, over, (size_t)numel * 4);
  tk_fast F;
  ts_dtype odt = ins[n - 1].op == TS_OP_CONVERT && ins[n - 1].dtype == TS_BF16 ? TS_BF16 : TS_F32;
  if (!tk_fast_match(&prog, dt, ne, odt, numel, &F)) {
    fprintf(stderr, "bench_fused_loops: %s has no fast path\n", pat);
    return 1;
  }
  tk_fused_set_fast(!interp);
  ts_kctx ctx = {.num_threads = nt};
  double *w = malloc(sizeof(double) * (size_t)reps), *c = malloc(sizeof(double) * (size_t)reps);
  for (int r = 0; r < reps; r++) {
    if (over) memcpy(over, keep, (size_t)numel * 4); /* the same input every run */
    double w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
    tk_program_run(&prog, n_ext, dt, ne, (tk_in)in, over ? over : out, odt, numel, &ctx);
    w[r] = 1e3 * (clk(CLOCK_MONOTONIC) - w0), c[r] = 1e3 * (clk(CLOCK_PROCESS_CPUTIME_ID) - c0);
  }
  qsort(w, (size_t)reps, sizeof *w, cmp_d), qsort(c, (size_t)reps, sizeof *c, cmp_d);
  double sum = 0;
  const float *res = over ? over : out;
  for (int64_t i = 0; i < numel; i++) {
    float v = res[i];
    if (odt == TS_BF16) {
      uint32_t u = (uint32_t)((const uint16_t *)res)[i] << 16;
      memcpy(&v, &u, 4);
    }
    sum += v;
  }
  printf("RESULT fused_loops pattern=%s layout=%s interp=%d nan_chan=%d inplace=%d shape=%lldx%lldx%lldx%lld "
         "ms=%.3f cpu_ms=%.3f cpu_min_ms=%.3f checksum=%.9g\n",
         pat, layout, interp, nan_chan, inplace, s[0], s[1], s[2], s[3], w[reps / 2], c[reps / 2], c[0], sum);
  return 0;
}
