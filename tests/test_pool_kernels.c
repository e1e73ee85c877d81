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
 * Every case in NCHW and in NHWC (the kernels' output is filled with garbage
 * first: an element left unwritten fails). 2x2 windows of stride 2 (pool22.c,
 * the CNN's pool) on every width from 2 to 41 (the vector body, its
 * remainders, odd W) and 261 (bf16 / f16: chunks of 128 windows), heights 2,
 * 3, 5 (odd H: a last row no window covers; 2x2 and 3x3: one output), in f32,
 * f64, bf16 and f16 (the reference: f32 on the same values, rounded back),
 * NHWC also with 70 channels (a full and a partial chunk of 64). The eaee734
 * kernels pass all of it: same bits. */
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
  else if (dt == TS_BF16) ((uint16_t *)buf)[i] = ts_f32_to_bf16((float)v);
  else ((uint16_t *)buf)[i] = ts_f32_to_f16((float)v);
}

/* reference of a bf16 / f16 case: the f32 one on the same (exact) values, rounded */
static void ref_half(ts_dtype dt, const pcase *c, const uint16_t *x, const uint16_t *dy, uint16_t *y, uint16_t *dx) {
  bool bf = dt == TS_BF16;
  int64_t xn = c->P * c->H * c->W, yn = c->P * c->OH * c->OW;
  float *xf = calloc((size_t)xn, 4), *df = calloc((size_t)yn, 4), *yf = calloc((size_t)yn, 4),
        *dxf = calloc((size_t)xn, 4);
  for (int64_t i = 0; i < xn; i++) xf[i] = bf ? ts_bf16_to_f32(x[i]) : ts_f16_to_f32(x[i]);
  for (int64_t i = 0; i < yn; i++) df[i] = bf ? ts_bf16_to_f32(dy[i]) : ts_f16_to_f32(dy[i]);
  ref_f32(c, xf, df, yf, dxf);
  for (int64_t i = 0; i < yn; i++) y[i] = bf ? ts_f32_to_bf16(yf[i]) : ts_f32_to_f16(yf[i]);
  for (int64_t i = 0; i < xn; i++) dx[i] = bf ? ts_f32_to_bf16(dxf[i]) : ts_f32_to_f16(dxf[i]);
  free(xf), free(df), free(yf), free(dxf);
}

/* planar (P, R) <-> NHWC (R, P) element copies of ts bytes (R = rows x columns) */
static void to_layout(bool nhwc, const char *pl, char *t, int64_t P, int64_t R, size_t ts) {
  for (int64_t p = 0; p < P; p++)
    for (int64_t r = 0; r < R; r++) memcpy(t + (size_t)(nhwc ? r * P + p : p * R + r) * ts, pl + (size_t)(p * R + r) * ts, ts);
}

static void from_layout(bool nhwc, const char *t, char *pl, int64_t P, int64_t R, size_t ts) {
  for (int64_t p = 0; p < P; p++)
    for (int64_t r = 0; r < R; r++) memcpy(pl + (size_t)(p * R + r) * ts, t + (size_t)(nhwc ? r * P + p : p * R + r) * ts, ts);
}

/* case c in dtype dt and layout L on `threads` threads: the kernels' y and dx
 * bit for bit against the reference on the planar data */
static void check_case(const pcase *c, ts_dtype dt, ts_layout L, int threads) {
  ex_t e;
  ex_init(&e);
  bool nhwc = L == TS_LAYOUT_NHWC;
  int64_t xs[4] = {1, c->P, c->H, c->W}, ys[4] = {1, c->P, c->OH, c->OW};
  if (nhwc) xs[1] = c->H, xs[2] = c->W, xs[3] = c->P, ys[1] = c->OH, ys[2] = c->OW, ys[3] = c->P;
  int64_t xn = c->P * c->H * c->W, yn = c->P * c->OH * c->OW;
  size_t ts = ts_dtype_size(dt);
  char *px = malloc((size_t)xn * ts), *pdy = malloc((size_t)yn * ts), *ry = malloc((size_t)yn * ts),
       *rdx = malloc((size_t)xn * ts), *ky = malloc((size_t)yn * ts), *kdx = malloc((size_t)xn * ts);
  for (int64_t i = 0; i < xn; i++) setv(dt, px, i, level());
  for (int64_t i = 0; i < yn; i++) { /* some dy -0.0 and NaN, the rest random */
    double u = urand();
    setv(dt, pdy, i, u < 0.1 ? -0.0 : u < 0.12 ? NAN : srand1());
  }
  ts_tensor x = input(&e, dt, 4, xs), dy = input(&e, dt, 4, ys);
  to_layout(nhwc, px, e.buf[x], c->P, c->H * c->W, ts), to_layout(nhwc, pdy, e.buf[dy], c->P, c->OH * c->OW, ts);
  ts_attr at = {.pool = {{c->k, c->k}, {c->s, c->s}, {c->pad, c->pad}, L}};
  int32_t gi[2] = {x, dy};
  ts_tensor y = node(&e, TS_OP_MAXPOOL, dt, 4, ys, 1, &x, &at);
  ts_tensor dx = node(&e, TS_OP_MAXPOOL_GRAD, dt, 4, xs, 2, gi, &at);
  ts_kctx ctx = {.num_threads = threads};
  const void *fin[1] = {e.buf[x]}, *gin[2] = {e.buf[x], e.buf[dy]};
  alloc_node(&e, y), alloc_node(&e, dx);
  memset(e.buf[dx], 0x5a, (size_t)xn * ts); /* garbage: the kernel writes every element */
  CHECK_OK(kernel_run(e.g, y, fin, e.buf[y], &e.st[y], &ctx));
  CHECK_OK(kernel_run(e.g, dx, gin, e.buf[dx], &e.st[dx], &ctx));
  from_layout(nhwc, e.buf[y], ky, c->P, c->OH * c->OW, ts), from_layout(nhwc, e.buf[dx], kdx, c->P, c->H * c->W, ts);
  if (dt == TS_F32) ref_f32(c, (float *)px, (float *)pdy, (float *)ry, (float *)rdx);
  else if (dt == TS_F64) ref_f64(c, (double *)px, (double *)pdy, (double *)ry, (double *)rdx);
  else ref_half(dt, c, (uint16_t *)px, (uint16_t *)pdy, (uint16_t *)ry, (uint16_t *)rdx);
  CHECK(!memcmp(ry, ky, (size_t)yn * ts), "max_pool2d %dx%d/%d pad %d on %lldx%lldx%lld %s %s %d threads: not bit-equal",
        c->k, c->k, c->s, c->pad, (long long)c->P, (long long)c->H, (long long)c->W, ts_dtype_name(dt),
        nhwc ? "nhwc" : "nchw", threads);
  CHECK(!memcmp(rdx, kdx, (size_t)xn * ts),
        "max_pool2d_grad %dx%d/%d pad %d on %lldx%lldx%lld %s %s %d threads: not bit-equal", c->k, c->k, c->s, c->pad,
        (long long)c->P, (long long)c->H, (long long)c->W, ts_dtype_name(dt), nhwc ? "nhwc" : "nchw", threads);
  free(px), free(pdy), free(ry), free(rdx), free(ky), free(kdx);
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
        for (int l = 0; l < 2; l++) {
          check_case(&c, d ? TS_F64 : TS_F32, l ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW, 1);
          check_case(&c, d ? TS_F64 : TS_F32, l ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW, 2);
        }
      }
  /* 2x2 stride 2 (pool22.c): every width 2..41 and 261 (bf16/f16 planar: 2 row
   * chunks of 128 windows and a partial one), heights 2, 3, 5; f32, f64, bf16,
   * f16; NCHW and NHWC (5 channels; 70: a full and a partial channel chunk) */
  ts_dtype dts[4] = {TS_F32, TS_F64, TS_BF16, TS_F16};
  for (int64_t H = 2; H <= 5; H += H == 2 ? 1 : 2)
    for (int64_t W = 2; W <= 261; W = W == 41 ? 261 : W + 1)
      for (int d = 0; d < 4; d++)
        for (int l = 0; l < 2; l++) {
          pcase c = {.P = l && W == 9 ? 70 : 5, .H = H, .W = W, .k = 2, .s = 2, .pad = 0, .OH = H / 2, .OW = W / 2};
          check_case(&c, dts[d], l ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW, 1 + (int)(W % 2));
        }
  return ts_test_finish();
}
