/* test_nhwc_reduce.c — batch norm's reductions with the channels innermost
 * (NHWC): reductions that keep the innermost dim ([R, K]: the statistics and
 * gradient sums over N, H, W; [K, R, K]: the global average pool over H, W).
 *
 * 1. The reduced terms (x - m)^2, dy * (x - m), (x - m) * dy with channel
 *    runs of one element (fused_centered.c's row loop) against the tile
 *    interpreter, bit for bit: C = 16, 32, 64 and 7, f32 and bf16 operands,
 *    NaNs (any payload), infinities, signed zeros, denormals; ranges that
 *    start and end inside a row; one over dy (in place).
 * 2. Reductions over (N, H, W, C) through the executable, in double in
 *    reduce_cols.c's order: each output's rows in row order, or with more
 *    than 2048 rows and fewer than 512 channels in blocks of 2048 rows (each
 *    from -0.0), the blocks' sums added in order. The same bits on 1 and 2
 *    threads, with and without fusion, a plain sum and a bf16 operand's sum
 *    (reduce.c widens it to double) equal to that order written out here;
 *    over values that rise by +-2^40 and cancel (a changed order shows in the
 *    f32 results), NaN and inf; row counts that are not a multiple of the
 *    blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "tessel/tessel.h"

static uint64_t rs;
static uint32_t rnd32(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (uint32_t)(rs >> 11);
}

/* Mostly ordinary values; else a NaN (any payload), +-inf, +-0 or a denormal. */
static float rnd_f32(int ordinary_pct) {
  uint32_t u = rnd32(), kind = rnd32() % 100;
  if ((int)kind < ordinary_pct) return ((float)(rnd32() % 20001) - 10000.f) / 2500.f;
  switch (kind % 4) {
    case 0: u = (u & 0x807fffffu) | 0x7f800000u | 1u; break;
    case 1: u = (u & 0x80000000u) | 0x7f800000u; break;
    case 2: u &= 0x80000000u; break;
    default: u &= 0x807fffffu;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void fill(ts_dtype dt, void *p, int64_t n, int ordinary_pct) {
  for (int64_t i = 0; i < n; i++) {
    float f = rnd_f32(ordinary_pct);
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == TS_F32) ((float *)p)[i] = f;
    else ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
  }
}

enum { MAX_INS = 8 };
typedef struct {
  ts_fused_instr ins[MAX_INS];
  int n;
} prog;
static int32_t emit(prog *P, ts_op op, ts_dtype dt, int32_t a, int32_t b, double v) {
  P->ins[P->n] = (ts_fused_instr){.op = op, .dtype = dt, .a = a, .b = b, .value = v};
  return P->n++;
}
static int32_t src(prog *P, int k, ts_dtype dt) {
  return dt == TS_BF16 ? emit(P, TS_OP_CONVERT, TS_F32, -k - 1, 0, 0) : -k - 1;
}

/* Part 1: form 0 (x - m)^2, 1 dy * (x - m), 2 (x - m) * dy over rows x c
 * (inputs x, m, dy), channel runs of 1. */
static void centered_rows(int64_t rows, int64_t c, ts_dtype xdt, ts_dtype ydt, int form) {
  int64_t numel = rows * c, ne[3] = {numel, c, numel};
  ts_dtype dt[3] = {xdt, TS_F32, ydt};
  void *in[3] = {malloc((size_t)numel * 4), malloc((size_t)c * 4), malloc((size_t)numel * 4)};
  fill(xdt, in[0], numel, 80), fill(TS_F32, in[1], c, 90), fill(ydt, in[2], numel, 80);
  prog P = {.n = 0};
  int32_t m = emit(&P, TS_OP_BROADCAST, TS_F32, -2, 0, 1.0), x = src(&P, 0, xdt);
  int32_t t = emit(&P, TS_OP_SUB, TS_F32, x, m, 0);
  if (form == 0) emit(&P, TS_OP_MUL, TS_F32, t, t, 0);
  else if (form == 1) emit(&P, TS_OP_MUL, TS_F32, src(&P, 2, ydt), t, 0);
  else emit(&P, TS_OP_MUL, TS_F32, t, src(&P, 2, ydt), 0);
  ts_fused p = {P.n, P.ins};
  tk_fast F;
  CHECK(tk_fast_match(&p, dt, ne, TS_F32, numel, &F) && F.kind == TK_FAST_CENTERED && F.inner == 1,
        "form %d C %lld: not the centered fast path with runs of 1", form, (long long)c);
  float *ref = malloc((size_t)numel * 4), *got = malloc((size_t)numel * 4);
  ts_kctx ctx = {.num_threads = 1};
  tk_fused_set_fast(false);
  CHECK_OK(tk_program_run(&p, 3, dt, ne, (tk_in)in, ref, TS_F32, numel, &ctx));
  tk_fused_set_fast(true);
  for (int rep = 0; rep < 6; rep++) { /* ranges from and to any element (rep 0: all) */
    int64_t lo = rep ? rnd32() % numel : 0, hi = rep ? lo + 1 + rnd32() % (numel - lo) : numel;
    memset(got, 0x5a, (size_t)numel * 4);
    tk_fast_run(&F, (tk_in)in, got, lo, hi);
    int64_t bad = -1;
    for (int64_t i = lo; i < hi && bad < 0; i++)
      if (memcmp(got + (i - lo), ref + i, 4)) bad = i;
    CHECK(bad < 0, "form %d x %s dy %s C %lld rows %lld, range [%lld, %lld): element %lld differs", form,
          ts_dtype_name(xdt), ts_dtype_name(ydt), (long long)c, (long long)rows, (long long)lo, (long long)hi,
          (long long)bad);
  }
  if (form && ydt == TS_F32) { /* over dy */
    tk_fast_run(&F, (tk_in)in, in[2], 0, numel);
    CHECK(memcmp(in[2], ref, (size_t)numel * 4) == 0, "form %d C %lld over dy: bits differ", form, (long long)c);
  }
  free(ref), free(got);
  for (int k = 0; k < 3; k++) free(in[k]);
}

/* Part 2: reductions of an (n, h, w, c) operand. */
enum { N_OUT = 9 };

static ts_graph *build(const int64_t s4[4]) {
  ts_graph *g = ts_graph_new();
  int three = 3, nhw[3] = {0, 1, 2}, hw[2] = {1, 2};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, s4), b = ts_input(g, "b", TS_BF16, 4, s4);
  ts_tensor m = ts_input(g, "m", TS_F32, 1, &s4[3]);
  ts_tensor gr = ts_convert(g, b, TS_F32);
  ts_tensor xc = ts_sub(g, x, ts_broadcast_in_dim(g, m, 4, s4, &three));
  ts_tensor outs[N_OUT] = {
      ts_reduce(g, x, TS_REDUCE_SUM, 3, nhw, false),
      ts_reduce(g, gr, TS_REDUCE_MEAN, 3, nhw, false),
      ts_reduce(g, ts_mul(g, xc, xc), TS_REDUCE_SUM, 3, nhw, false),
      ts_reduce(g, gr, TS_REDUCE_SUM, 3, nhw, false), /* with the next: one stacked reduction */
      ts_reduce(g, ts_mul(g, gr, xc), TS_REDUCE_SUM, 3, nhw, false),
      ts_reduce(g, x, TS_REDUCE_MAX, 3, nhw, false),
      ts_reduce(g, x, TS_REDUCE_MEAN, 2, hw, false), /* the global average pool: (n, c) */
      ts_reduce(g, ts_mul(g, gr, x), TS_REDUCE_MEAN, 2, hw, false),
      ts_reduce(g, b, TS_REDUCE_SUM, 3, nhw, false), /* a bf16 operand, f64 in reduce.c: a bf16 result */
  };
  for (int k = 0; k < N_OUT; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  return g;
}

static int64_t out_numel(int k, const int64_t s4[4]) { return k == 6 || k == 7 ? s4[0] * s4[3] : s4[3]; }
static size_t out_bytes(int k, const int64_t s4[4]) { return (size_t)out_numel(k, s4) * (k == 8 ? 2 : 4); }

/* Channel j's sum of rows x (f32) or xb (bf16) in reduce_cols.c's order. */
static double order_sum(const float *x, const uint16_t *xb, int64_t rows, int64_t c, int64_t j) {
  int64_t blk = c < 512 && rows > 2048 ? 2048 : rows;
  double a = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += blk) {
    double s = -0.0;
    for (int64_t r = r0; r < rows && r < r0 + blk; r++) {
      float v = x ? x[r * c + j] : ts_bf16_to_f32(xb[r * c + j]);
      s = s + v;
    }
    a = a + s;
  }
  return a;
}

/* The outputs of g (client of nt threads, fusion on or off), as bytes (out[k]: out_numel floats). */
static void run(ts_graph *g, int nt, bool fuse, const int64_t s4[4], const float *hx, const uint16_t *hb,
                const float *hm, float **out) {
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = nt});
  ts_executable *e = ts_compile(cl, g, &(ts_compile_options){.no_fusion = !fuse});
  CHECK(e, "compile: %s", ts_last_error());
  ts_buffer *in[3] = {ts_buffer_from_host(cl, TS_F32, 4, s4, hx), ts_buffer_from_host(cl, TS_BF16, 4, s4, hb),
                      ts_buffer_from_host(cl, TS_F32, 1, &s4[3], hm)};
  ts_buffer *o[N_OUT] = {0};
  CHECK(e && ts_execute(e, in, o) == 0, "execute: %s", ts_last_error());
  for (int k = 0; k < N_OUT; k++) {
    memset(out[k], 0, out_bytes(k, s4));
    if (o[k]) ts_buffer_read(o[k], out[k], out_bytes(k, s4));
    if (o[k]) ts_buffer_free(o[k]);
  }
  for (int k = 0; k < 3; k++) ts_buffer_free(in[k]);
  ts_executable_free(e);
  ts_client_free(cl);
}

/* nan_pct: per cent of x's and b's elements that are NaN, inf, +-0 or denormal. */
static void check_shape(int64_t n, int64_t h, int64_t w, int64_t c, int nan_pct) {
  int64_t s4[4] = {n, h, w, c}, rows = n * h * w, numel = rows * c;
  float *hx = malloc((size_t)numel * 4), *hm = malloc((size_t)c * 4), *res[2][N_OUT];
  uint16_t *hb = malloc((size_t)numel * 2);
  fill(TS_F32, hx, numel, 100 - nan_pct), fill(TS_BF16, hb, numel, 100 - nan_pct), fill(TS_F32, hm, c, 100);
  for (int64_t r = 0; r < rows; r++) { /* +2^40 on the first third of the rows, -2^40 on the last */
    float big = r < rows / 3 ? 1099511627776.0f : r >= rows - rows / 3 ? -1099511627776.0f : 0;
    for (int64_t j = 0; big && j < c; j += 3) hx[r * c + j] = big, hb[r * c + j] = big > 0 ? 0x5380 : 0xd380;
  }
  for (int v = 0; v < 2; v++)
    for (int k = 0; k < N_OUT; k++) res[v][k] = malloc(out_bytes(k, s4));
  ts_graph *g = build(s4);
  for (int cfg = 0; cfg < 4; cfg++) { /* cfg 0: 1 thread, no fusion (the reference); 1 thread fused; 2 threads */
    run(g, cfg < 2 ? 1 : 2, cfg % 2 == 1, s4, hx, hb, hm, res[cfg > 0]);
    for (int k = 0; cfg && k < N_OUT; k++)
      CHECK(memcmp(res[0][k], res[1][k], out_bytes(k, s4)) == 0,
            "shape (%lld,%lld,%lld,%lld) %d threads fusion %d output %d differs from 1 thread unfused (%.9g vs %.9g)",
            (long long)n, (long long)h, (long long)w, (long long)c, cfg < 2 ? 1 : 2, cfg % 2, k, res[1][k][0],
            res[0][k][0]);
  }
  for (int64_t j = 0; j < c; j++) { /* the plain sums in the order written out */
    float f = (float)order_sum(hx, NULL, rows, c, j);
    uint16_t fb = ts_f32_to_bf16((float)order_sum(NULL, hb, rows, c, j)), gb;
    memcpy(&gb, (const char *)res[0][8] + 2 * j, 2);
    CHECK(memcmp(&f, &res[0][0][j], 4) == 0, "shape (%lld,%lld,%lld,%lld) sum channel %lld: %.9g, in order %.9g",
          (long long)n, (long long)h, (long long)w, (long long)c, (long long)j, res[0][0][j], f);
    CHECK(fb == gb, "shape (%lld,%lld,%lld,%lld) bf16 sum channel %lld: %#x, in order %#x", (long long)n,
          (long long)h, (long long)w, (long long)c, (long long)j, gb, fb);
  }
  ts_graph_free(g);
  for (int v = 0; v < 2; v++)
    for (int k = 0; k < N_OUT; k++) free(res[v][k]);
  free(hx), free(hb), free(hm);
}

int main(void) {
  rs = ts_test_init("test_nhwc_reduce", 3) | 1;
  int64_t cs[4] = {16, 32, 64, 7};
  ts_dtype dts[2] = {TS_F32, TS_BF16};
  for (int ci = 0; ci < 4; ci++)
    for (int form = 0; form < 3; form++)
      for (int d = 0; d < 4; d++) centered_rows(37, cs[ci], dts[d / 2], dts[d % 2], form);
  /* >= TK_PAR_MIN elements (2 threads take them), rows in several of
   * reduce_cols.c's blocks and a remainder */
  check_shape(8, 21, 23, 16, 0);  /* 3864 rows: 2 blocks of the order */
  check_shape(4, 40, 41, 16, 0);  /* 6560 rows: 4 blocks, the last of 416 */
  check_shape(4, 17, 19, 32, 0);  /* 1292 rows: row order */
  check_shape(2, 19, 17, 64, 0);
  check_shape(9, 23, 29, 7, 0);   /* odd C, 6003 rows */
  check_shape(3, 30, 30, 17, 2);  /* NaN, inf: 2700 rows, 17 channels */
  check_shape(2, 33, 31, 17, 2);  /* NaN, inf: 2046 rows (row order) */
  check_shape(1, 8, 9, 520, 0);   /* K >= 512: row order, a source's sums on reduce.c's loops */
  check_shape(1, 1, 3, 16, 0);    /* one thread */
  return ts_test_finish();
}
