/* test_reduce_split.c — a threaded [R, K, R] sum (batch norm's sums over N, H,
 * W) gives the 1-thread bits: reduce.c splits the R x K runs between the
 * threads and then adds each output's run sums in row order, as the serial
 * fold does. Sums in memory (no fusion), fused reductions (a bf16 convert's
 * mean, x * x) and a stacked fused reduction (sum(g), sum(g * (x - m)): batch
 * norm's backward sums), on 1 and 2 threads, compared byte for byte, over
 * values with cancellations (+-2^40 terms that rise and cancel over the rows)
 * where a changed order shows in the f32 results; shapes with uneven splits,
 * runs of 16, runs of more than 4096 (one run per source call), runs of 9 and
 * a max (the last two not split: threads take channels, row by row). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { N_OUT = 6 };

static ts_graph *build(int64_t n, int64_t c, int64_t h, int64_t w) {
  ts_graph *g = ts_graph_new();
  int64_t s4[4] = {n, c, h, w};
  int one = 1, nhw[3] = {0, 2, 3};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, s4), b = ts_input(g, "b", TS_BF16, 4, s4);
  ts_tensor m = ts_input(g, "m", TS_F32, 1, &c);
  ts_tensor gr = ts_convert(g, b, TS_F32);
  ts_tensor xc = ts_sub(g, x, ts_broadcast_in_dim(g, m, 4, s4, &one));
  ts_tensor outs[N_OUT] = {
      ts_reduce(g, x, TS_REDUCE_SUM, 3, nhw, false),
      ts_reduce(g, gr, TS_REDUCE_MEAN, 3, nhw, false),
      ts_reduce(g, ts_mul(g, x, x), TS_REDUCE_SUM, 3, nhw, false),
      ts_reduce(g, gr, TS_REDUCE_SUM, 3, nhw, false), /* with the next: one stacked reduction */
      ts_reduce(g, ts_mul(g, gr, xc), TS_REDUCE_SUM, 3, nhw, false),
      ts_reduce(g, x, TS_REDUCE_MAX, 3, nhw, false),
  };
  for (int k = 0; k < N_OUT; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  return g;
}

/* The outputs of g on inputs in (client of nt threads, fusion on or off), as bytes. */
static void run(ts_graph *g, int nt, bool fuse, int64_t n, int64_t c, int64_t h, int64_t w, const float *hx,
                const uint16_t *hb, const float *hm, float out[N_OUT][64]) {
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = nt});
  ts_executable *e = ts_compile(cl, g, &(ts_compile_options){.no_fusion = !fuse});
  CHECK(e, "compile: %s", ts_last_error());
  int64_t s4[4] = {n, c, h, w};
  ts_buffer *in[3] = {ts_buffer_from_host(cl, TS_F32, 4, s4, hx), ts_buffer_from_host(cl, TS_BF16, 4, s4, hb),
                      ts_buffer_from_host(cl, TS_F32, 1, &c, hm)};
  ts_buffer *o[N_OUT] = {0};
  memset(out, 0, sizeof(float) * N_OUT * 64);
  CHECK(e && ts_execute(e, in, o) == 0, "execute: %s", ts_last_error());
  for (int k = 0; k < N_OUT; k++) {
    if (o[k]) ts_buffer_read(o[k], out[k], (size_t)c * sizeof(float));
    if (o[k]) ts_buffer_free(o[k]);
  }
  for (int k = 0; k < 3; k++) ts_buffer_free(in[k]);
  ts_executable_free(e);
  ts_client_free(cl);
}

static void check_shape(int64_t n, int64_t c, int64_t h, int64_t w) {
  int64_t numel = n * c * h * w;
  float *hx = malloc((size_t)numel * 4), hm[64];
  uint16_t *hb = malloc((size_t)numel * 2);
  uint64_t r = 0x5b117 + (uint64_t)numel;
#define RND() ((float)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / (float)(1 << 24) - 0.4f)
  for (int64_t i = 0; i < numel; i++) {
    /* the first element of each run: +2^40 in the first half of the rows,
     * -2^40 in the second (3 rows: +, small, -): the sums rise and cancel,
     * so the small terms' rounding depends on the order they are added in */
    int64_t row = i / (c * h * w), pos = i % (h * w);
    float big = pos ? 0 : row < n / 2 ? 1099511627776.0f : row >= n - n / 2 ? -1099511627776.0f : 0;
    hx[i] = big ? big : RND();
    uint32_t bits;
    memcpy(&bits, &(float){big ? big : RND() * 3}, 4);
    hb[i] = (uint16_t)(bits >> 16);
  }
  for (int64_t i = 0; i < c; i++) hm[i] = RND();
  ts_graph *g = build(n, c, h, w);
  static float one[N_OUT][64], two[N_OUT][64];
  for (int fuse = 0; fuse < 2; fuse++) {
    run(g, 1, fuse, n, c, h, w, hx, hb, hm, one);
    run(g, 2, fuse, n, c, h, w, hx, hb, hm, two);
    for (int k = 0; k < N_OUT; k++)
      CHECK(memcmp(one[k], two[k], (size_t)c * sizeof(float)) == 0,
            "shape (%lld,%lld,%lld,%lld) fusion %d output %d: 2 threads differ from 1 (%.9g vs %.9g at channel 0)",
            (long long)n, (long long)c, (long long)h, (long long)w, fuse, k, one[k][0], two[k][0]);
  }
  ts_graph_free(g);
  free(hx), free(hb);
}

int main(void) {
  ts_test_init("test_reduce_split", 0);
  check_shape(41, 7, 11, 11);  /* 287 runs of 121 split 143 / 144, 33 runs a source call */
  check_shape(128, 17, 4, 4);  /* runs of 16 (the shortest split), 17 channels */
  check_shape(3, 3, 64, 65);   /* runs of 4160: one a source call, 9 runs split 4 / 5 */
  check_shape(512, 9, 3, 3);   /* runs of 9: too short to split, the channels split 5 / 4 instead */
  return ts_test_finish();
}
