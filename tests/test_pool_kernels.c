/* test_pool_kernels.c — max pooling and its gradient bit for bit against a
 * plain reference computed in the same type, window by window: 3x3 windows
 * of stride 2 (pool.c's row33s2 path, ResNet-50's stem pool) and of stride 1
 * and 3, padding 0 and 1, rows wide enough for several 64-window batches and
 * odd widths, on values drawn from a few levels (ties everywhere), with
 * -0.0 next to +0.0 and a few NaNs. The reference: forward = the first max of
 * the window in row-major order (NaN if any is NaN), backward adds dy to that
 * first max (or first NaN) in window order (oh, then ow) from +0 — the
 * kernel's documented rule, so any change in the order of the sums, in the tie
 * rule or in the vectorized path shows as different bits. f32 and f64; 1 and 2
 * threads give the same bits. dy holds -0.0 (0 + -0.0 is +0.0: a kernel that
 * stores dy instead of adding it to 0 fails) and NaNs too.
 * 2x2 windows of stride 2 (pool.c's row22s2 path, the CNN's pool) on every
 * width from 2 to 41 (the vector body, its remainders, odd W) and heights
 * 2, 3, 5 (odd H: a last row no window covers; 2x2 and 3x3: one output),
 * also in bf16 (pooled through doubles). */
#include "kernel_ex.h" /* random data, the tiny executor */

typedef struct {
  int64_t P, H, W, OH, OW;
  int k, s, pad;
} pcase;

/* reference in T (as the kernel computes), for planes x (P, H, W), dy (P, OH, OW) */
#define REF_IMPL(T, SUF)                                                                          \
  static void ref_##SUF(const pcase *c, const T *x, const T *dy, T *y, T *dx) {                   \
    memset(dx, 0, sizeof(T) * (size_t)(c->P * c->H * c->W));                                      \
    for (int64_t p = 0; p < c->P; p++)                                                            \
      for (int64_t oh = 0; oh < c->OH; oh++)                                                      \
        for (int64_t ow = 0; ow < c->OW; ow++) {                                                  \
          int64_t arg = -1, nanarg = -1;                                                          \
          for (int i = 0; i < c->k; i++)                                                          \
            for (int j = 0; j < c->k; j++) {                                                      \
              int64_t h = oh * c->s - c->pad + i, w = ow * c->s - c->pad + j;                     \
              if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;                             \
              int64_t xi = (p * c->H + h) * c->W + w;                                             \
              if (x[xi] != x[xi] && nanarg < 0) nanarg = xi;                                      \
              if (arg < 0 || x[xi] > x[arg]) arg = xi;                                            \
            }                                                                                     \
          int64_t a = nanarg >= 0 ? nanarg : arg, yi = (p * c->OH + oh) * c->OW + ow;             \
          y[yi] = nanarg >= 0 ? (T)NAN : x[a];                                                    \
          dx[a] += dy[yi];                                                                        \
        }                                                                                         \
  }
REF_IMPL(float, f32)
REF_IMPL(double, f64)

static double level(void) { /* few levels: ties; signed zeros; a NaN now and then */
  double u = urand();
  if (u < 0.01) return NAN;
  if (u < 0.08) return -0.0;
  if (u < 0.15) return 0.0;
  return floor(srand1() * 3) / 2;
}

static void setv(ts_dtype dt, void *buf, int64_t i, double v) {
  if (dt == TS_F32) ((float *)buf)[i] = (float)v;
  else if (dt == TS_F64) ((double *)buf)[i] = v;
  else ((uint16_t *)buf)[i] = ts_f32_to_bf16((float)v);
}

/* reference of a bf16 case: the f32 one on the same (exact) values, rounded */
static void ref_bf16(const pcase *c, const uint16_t *x, const uint16_t *dy, uint16_t *y, uint16_t *dx) {
  int64_t xn = c->P * c->H * c->W, yn = c->P * c->OH * c->OW;
  float *xf = calloc((size_t)xn, 4), *df = calloc((size_t)yn, 4), *yf = calloc((size_t)yn, 4),
        *dxf = calloc((size_t)xn, 4);
  for (int64_t i = 0; i < xn; i++) xf[i] = ts_bf16_to_f32(x[i]);
  for (int64_t i = 0; i < yn; i++) df[i] = ts_bf16_to_f32(dy[i]);
  ref_f32(c, xf, df, yf, dxf);
  for (int64_t i = 0; i < yn; i++) y[i] = ts_f32_to_bf16(yf[i]);
  for (int64_t i = 0; i < xn; i++) dx[i] = ts_f32_to_bf16(dxf[i]);
  free(xf), free(df), free(yf), free(dxf);
}

static void check_case(const pcase *c, ts_dtype dt, int threads) {
  ex_t e;
  ex_init(&e);
  int64_t xs[4] = {1, c->P, c->H, c->W}, ys[4] = {1, c->P, c->OH, c->OW};
  int64_t xn = c->P * c->H * c->W, yn = c->P * c->OH * c->OW;
  ts_tensor x = input(&e, dt, 4, xs), dy = rinput(&e, dt, 4, ys);
  for (int64_t i = 0; i < xn; i++) setv(dt, e.buf[x], i, level());
  for (int64_t i = 0; i < yn; i++) { /* some dy -0.0 and NaN, the rest random */
    double u = urand();
    if (u < 0.1) setv(dt, e.buf[dy], i, -0.0);
    else if (u < 0.12) setv(dt, e.buf[dy], i, NAN);
  }
  ts_attr at = {.pool = {{c->k, c->k}, {c->s, c->s}, {c->pad, c->pad}, TS_LAYOUT_NCHW}};
  int32_t gi[2] = {x, dy};
  ts_tensor y = node(&e, TS_OP_MAXPOOL, dt, 4, ys, 1, &x, &at);
  ts_tensor dx = node(&e, TS_OP_MAXPOOL_GRAD, dt, 4, xs, 2, gi, &at);
  ts_kctx ctx = {.num_threads = threads};
  const void *fin[1] = {e.buf[x]}, *gin[2] = {e.buf[x], e.buf[dy]};
  alloc_node(&e, y), alloc_node(&e, dx);
  CHECK_OK(kernel_run(e.g, y, fin, e.buf[y], &e.st[y], &ctx));
  CHECK_OK(kernel_run(e.g, dx, gin, e.buf[dx], &e.st[dx], &ctx));
  size_t ts = ts_dtype_size(dt);
  void *ry = malloc((size_t)yn * ts), *rdx = malloc((size_t)xn * ts);
  if (dt == TS_F32) ref_f32(c, e.buf[x], e.buf[dy], ry, rdx);
  else if (dt == TS_F64) ref_f64(c, e.buf[x], e.buf[dy], ry, rdx);
  else ref_bf16(c, e.buf[x], e.buf[dy], ry, rdx);
  CHECK(!memcmp(ry, e.buf[y], (size_t)yn * ts), "max_pool2d %dx%d/%d pad %d on %lldx%lld %s %d threads: not bit-equal",
        c->k, c->k, c->s, c->pad, (long long)c->H, (long long)c->W, ts_dtype_name(dt), threads);
  CHECK(!memcmp(rdx, e.buf[dx], (size_t)xn * ts),
        "max_pool2d_grad %dx%d/%d pad %d on %lldx%lld %s %d threads: not bit-equal", c->k, c->k, c->s, c->pad,
        (long long)c->H, (long long)c->W, ts_dtype_name(dt), threads);
  free(ry), free(rdx);
  ex_free(&e);
}

int main(void) {
  rs = ts_test_init("test_pool_kernels", 7);
  /* widths: 1 batch; 2 batches + a partial one (odd); exactly 64 windows; a tiny odd plane */
  int64_t hw[][2] = {{9, 40}, {11, 261}, {6, 130}, {5, 7}};
  int ks[][3] = {{3, 2, 1}, {3, 2, 0}, {3, 1, 1}, {3, 3, 1}, {2, 2, 0}};
  for (size_t i = 0; i < sizeof hw / sizeof *hw; i++)
    for (size_t j = 0; j < sizeof ks / sizeof *ks; j++)
      for (int d = 0; d < 2; d++) {
        pcase c = {.P = 12, .H = hw[i][0], .W = hw[i][1], .k = ks[j][0], .s = ks[j][1], .pad = ks[j][2]};
        c.OH = (c.H + 2 * c.pad - c.k) / c.s + 1, c.OW = (c.W + 2 * c.pad - c.k) / c.s + 1;
        check_case(&c, d ? TS_F64 : TS_F32, 1);
        check_case(&c, d ? TS_F64 : TS_F32, 2);
      }
  /* 2x2 stride 2: every width 2..41, heights 2, 3, 5; f32, f64, bf16 */
  ts_dtype dts[3] = {TS_F32, TS_F64, TS_BF16};
  for (int64_t H = 2; H <= 5; H += H == 2 ? 1 : 2)
    for (int64_t W = 2; W <= 41; W++)
      for (int d = 0; d < 3; d++) {
        pcase c = {.P = 5, .H = H, .W = W, .k = 2, .s = 2, .pad = 0, .OH = H / 2, .OW = W / 2};
        check_case(&c, dts[d], 1 + (int)(W % 2));
      }
  return ts_test_finish();
}
