/* test_amp_wgrad.c — autocast bf16's filter gradient is accumulated and
 * written in f32: conv2d_bwd_filter(convert(x, bf16), convert(dy, bf16))
 * with an f32 result (oneDNN's f32 diff_weights), not a bf16 result converted
 * back. For y = conv2d(x, w) and loss = sum(y * g), dL/dw is the filter
 * gradient of x and dy = g. Checked for a blocked 3x3, a strided 3x3 and a
 * plain (NCHW gemm) 1x1 stride-2 convolution:
 *   - the compiled program has a conv2d_bwd_filter with an f32 result;
 *   - against a double reference on bf16-rounded x and g, every element is
 *     within K u_f32 of the exact sum (K = N*OH*OW terms, all positive, so the
 *     sum is its own condition number; f32 recursive summation's bound;
 *     measured 0: these sums are exact in f32). A result rounded to bf16
 *     misses it by ~250x (up to 2^-8 relative; measured 3.7e-3 against the
 *     bounds 4e-6 .. 1.5e-5 with autocast's wide filter gradient disabled). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"
#include "util/half.h" /* ts_bf16_to_f32, ts_f32_to_bf16 */

static float bf16r(float v) { return ts_bf16_to_f32(ts_f32_to_bf16(v)); }

static bool has_f32_wgrad(const char *prog) {
  for (const char *l = prog; l && (l = strstr(l, " = conv2d_bwd_filter(")); l++) {
    const char *eol = strchr(l, '\n'), *colon = strstr(l, " : ");
    if (colon && (!eol || colon < eol) && !strncmp(colon + 3, "f32[", 4)) return true;
  }
  return false;
}

static void check_case(int N, int C, int H, int O, int K, int stride, int pad) {
  int OH = (H + 2 * pad - K) / stride + 1;
  int64_t xs[4] = {N, C, H, H}, ws[4] = {O, C, K, K}, gs[4] = {N, O, OH, OH};
  size_t nx = (size_t)N * C * H * H, nw = (size_t)O * C * K * K, ng = (size_t)N * O * OH * OH;
  float *x = malloc(nx * 4), *w = calloc(nw, 4), *gv = malloc(ng * 4), *dw = malloc(nw * 4);
  srand((unsigned)ts_test_seed + (unsigned)K);
  for (size_t i = 0; i < nx; i++) x[i] = 0.5f + (float)rand() / (float)RAND_MAX * 0.5f; /* positive */
  for (size_t i = 0; i < ng; i++) gv[i] = 0.5f + (float)rand() / (float)RAND_MAX * 0.5f;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = ts_graph_new();
  ts_tensor tx = ts_input(g, "x", TS_F32, 4, xs), tw = ts_input(g, "w", TS_F32, 4, ws);
  ts_tensor tg = ts_input(g, "g", TS_F32, 4, gs);
  ts_conv_params p = {.stride = {stride, stride}, .pad_lo = {pad, pad}, .pad_hi = {pad, pad}};
  ts_tensor loss = ts_sum_all(g, ts_mul(g, ts_conv2d(g, tx, tw, &p), tg)), grad = TS_NONE;
  CHECK_OK(ts_grad(g, loss, 1, &tw, &grad));
  ts_graph_add_output(g, grad);
  ts_executable *e = ts_compile(c, g, &(ts_compile_options){.autocast = TS_BF16});
  CHECK(e != NULL, "compile: %s", ts_last_error());
  if (e) {
    char *prog = ts_executable_to_string(e);
    CHECK(has_f32_wgrad(prog), "K=%d: no conv2d_bwd_filter with an f32 result in\n%s", K, prog);
    free(prog);
    ts_buffer *in[3] = {ts_buffer_new(c, TS_F32, 4, xs), ts_buffer_new(c, TS_F32, 4, ws),
                        ts_buffer_new(c, TS_F32, 4, gs)}, *out[1] = {NULL};
    ts_buffer_write(in[0], x, nx * 4), ts_buffer_write(in[1], w, nw * 4), ts_buffer_write(in[2], gv, ng * 4);
    CHECK_OK(ts_execute(e, in, out));
    if (out[0]) CHECK_OK(ts_buffer_read(out[0], dw, nw * 4));
    double worst = 0, bound = (double)N * OH * OH * ldexp(1.0, -24);
    for (int o = 0; o < O; o++)
      for (int ci = 0; ci < C; ci++)
        for (int kh = 0; kh < K; kh++)
          for (int kw = 0; kw < K; kw++) {
            double ref = 0;
            for (int n = 0; n < N; n++)
              for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OH; ow++) {
                  int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= H) continue;
                  ref += (double)bf16r(x[((size_t)(n * C + ci) * H + ih) * H + iw]) *
                         (double)bf16r(gv[((size_t)(n * O + o) * OH + oh) * OH + ow]);
                }
            double got = dw[((size_t)(o * C + ci) * K + kh) * K + kw], err = fabs(got - ref) / ref;
            if (err > worst) worst = err;
          }
    printf("K=%d stride=%d: max relative error %.3g (bound %.3g; a bf16 result: up to 2^-8)\n", K, stride, worst, bound);
    CHECK(worst <= bound, "K=%d stride=%d: filter gradient error %.3g > %.3g (rounded to bf16?)", K, stride,
          worst, bound);
    for (int i = 0; i < 3; i++) ts_buffer_free(in[i]);
    if (out[0]) ts_buffer_free(out[0]);
    ts_executable_free(e);
  }
  ts_graph_free(g);
  ts_client_free(c);
  free(x), free(w), free(gv), free(dw);
}

int main(void) {
  ts_test_init("test_amp_wgrad", 11);
  check_case(4, 8, 8, 16, 3, 1, 1); /* blocked 3x3 */
  check_case(4, 8, 9, 16, 3, 2, 1); /* strided 3x3 */
  check_case(4, 16, 8, 32, 1, 2, 0); /* plain 1x1 stride 2 */
  return ts_test_finish();
}
