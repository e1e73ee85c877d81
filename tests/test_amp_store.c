/* test_amp_store.c — bf16 autocast stores what torch.autocast stores as bf16
 * (src/opt/autocast.c, "bf16 activations"): c = conv(x, w), y = BN(c),
 * s = y + relu(y), loss = sum(s * r), compiled with autocast bf16.
 *  - y and s equal, bit for bit, the same step written by hand without
 *    autocast: conv in bf16, batch norm computed in f32 on its converted
 *    result, y rounded to bf16, s = y + relu(y) rounded to bf16 (PyTorch: a
 *    conv's bf16 result stays bf16 through batch norm, ReLU and +);
 *  - batch norm's input gradient dL/dc holds only bf16 values (PyTorch's
 *    gradient of the bf16 tensor c); a sanity bound of 0.1 norm-relative
 *    from the f32 step's (not a precision claim: batch norm's backward
 *    cancels, dy - mean(dy) - ..., and amplifies the bf16 convolution's
 *    rounding; measured 0.0007-0.034 over 6 seeds, with or without the
 *    rounding);
 *  - a sum of two matmul results stays f32 (some value not a bf16 value),
 *    within 2^-6 of f32's (two bf16 roundings of the operands, K = 16:
 *    measured 0.0023);
 *  - without the rounding rule y, s and dL/dc would be arbitrary f32 values.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"
#include "util/half.h" /* ts_bf16_to_f32, ts_f32_to_bf16 */

enum { N = 4, CI = 3, C = 8, H = 6, E = N * C * H * H, M = 16, K = 16 }; /* a: (M, K), M = K: a a */

static ts_tensor rnd(ts_graph *g, ts_tensor t) { return ts_convert(g, ts_convert(g, t, TS_BF16), TS_F32); }

static bool all_bf16(const float *v, int n) {
  for (int i = 0; i < n; i++)
    if (ts_bf16_to_f32(ts_f32_to_bf16(v[i])) != v[i]) return false;
  return true;
}

/* hand: the reference written out without autocast. Outputs y, s; the
 * autocast graph (hand false) also dL/dc and the matmul sum q. */
static ts_graph *build(bool hand) {
  ts_graph *g = ts_graph_new();
  int64_t xs[4] = {N, CI, H, H}, ws[4] = {C, CI, 3, 3}, cs[1] = {C}, ys[4] = {N, C, H, H}, as[2] = {M, K};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs), w = ts_input(g, "w", TS_F32, 4, ws);
  ts_tensor gamma = ts_input(g, "gamma", TS_F32, 1, cs), beta = ts_input(g, "beta", TS_F32, 1, cs);
  ts_tensor r = ts_input(g, "r", TS_F32, 4, ys), a = ts_input(g, "a", TS_F32, 2, as);
  ts_conv_params p = {.pad_lo = {1, 1}, .pad_hi = {1, 1}};
  ts_tensor c = hand ? ts_convert(g, ts_conv2d(g, ts_convert(g, x, TS_BF16), ts_convert(g, w, TS_BF16), &p), TS_F32)
                     : ts_conv2d(g, x, w, &p);
  ts_tensor y = ts_batch_norm_train(g, c, gamma, beta, 1e-5, NULL, NULL);
  if (hand) y = rnd(g, y);
  ts_tensor s = ts_add(g, y, ts_relu(g, y));
  if (hand) s = rnd(g, s);
  ts_graph_add_output(g, y);
  ts_graph_add_output(g, s);
  if (!hand) {
    ts_tensor dc = TS_NONE;
    CHECK_OK(ts_grad(g, ts_sum_all(g, ts_mul(g, s, r)), 1, &c, &dc));
    ts_graph_add_output(g, dc);
    ts_tensor aa = ts_mul(g, a, ts_scalar(g, TS_F32, 0.75));
    ts_graph_add_output(g, ts_add(g, ts_matmul(g, a, a), ts_matmul(g, aa, a)));
  }
  return g;
}

/* Runs build(hand) compiled with autocast amp; out: y, s, dc, q. */
static void run(ts_client *cl, bool hand, ts_dtype amp, float *const out[4], const float *const in[6]) {
  ts_graph *g = build(hand);
  ts_executable *e = ts_compile(cl, g, &(ts_compile_options){.autocast = amp});
  CHECK(e != NULL, "compile: %s", ts_last_error());
  size_t osz[4] = {E, E, E, M * K};
  ts_buffer *ib[6] = {0}, *ob[4] = {0};
  for (int k = 0; k < 6 && e; k++) {
    ts_tensor t = ts_graph_input(g, k);
    ib[k] = ts_buffer_from_host(cl, TS_F32, ts_tensor_rank(g, t), ts_tensor_shape(g, t), in[k]);
  }
  if (e) CHECK_OK(ts_execute(e, ib, ob));
  int n_out = hand ? 2 : 4;
  for (int k = 0; k < n_out; k++)
    if (ob[k]) CHECK_OK(ts_buffer_read(ob[k], out[k], osz[k] * 4));
  for (int k = 0; k < 6; k++) ts_buffer_free(ib[k]);
  for (int k = 0; k < 4; k++) ts_buffer_free(ob[k]);
  ts_executable_free(e);
  ts_graph_free(g);
}

static double norm_rel(const float *a, const float *b, int n) {
  double d = 0, r = 0;
  for (int i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
  return sqrt(d / r);
}

int main(void) {
  ts_test_init("test_amp_store", 27);
  static float x[N * CI * H * H], w[C * CI * 9], gamma[C], beta[C], r[E], a[M * K];
  srand((unsigned)ts_test_seed);
  float *vals[6] = {x, w, gamma, beta, r, a};
  size_t sizes[6] = {N * CI * H * H, C * CI * 9, C, C, E, M * K};
  for (int k = 0; k < 6; k++)
    for (size_t i = 0; i < sizes[k]; i++) vals[k][i] = (float)rand() / (float)RAND_MAX * 2.0f - 0.8f;
  static float y[E], s[E], dc[E], q[M * K], hy[E], hs[E], fdc[E], fq[M * K], scratch[E];
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = 2});
  const float *const in[6] = {x, w, gamma, beta, r, a};
  run(cl, false, TS_BF16, (float *const[4]){y, s, dc, q}, in);
  run(cl, true, TS_F32, (float *const[4]){hy, hs, NULL, NULL}, in);
  run(cl, false, TS_F32, (float *const[4]){scratch, scratch, fdc, fq}, in);
  CHECK(memcmp(y, hy, sizeof y) == 0, "batch norm's output differs from the hand-rounded step");
  CHECK(memcmp(s, hs, sizeof s) == 0, "the residual sum differs from the hand-rounded step");
  CHECK(all_bf16(dc, E), "batch norm's input gradient holds values that are not bf16 values");
  double dc_err = norm_rel(dc, fdc, E), q_err = norm_rel(q, fq, M * K);
  printf("dL/dc %.3g from f32 (sanity bound 0.1), matmul sum %.3g from f32 (bound 2^-6)\n", dc_err, q_err);
  CHECK(dc_err <= 0.1, "batch norm's input gradient %.3g from f32's", dc_err);
  CHECK(!all_bf16(q, M * K), "the sum of two matmul results was rounded to bf16");
  CHECK(q_err <= ldexp(1.0, -6), "matmul sum %.3g from f32's", q_err);
  ts_client_free(cl);
  return ts_test_finish();
}
