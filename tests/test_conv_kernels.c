/* test_conv_kernels.c — the convolution kernels against a naive reference
 * loop: forward, backward-data and backward-filter over strides, padding,
 * dilation and groups in every dtype; the plain (NCHW gemm) and blocked 1x1
 * paths against each other, and which 1x1 convolutions take which; a
 * blocked convolution whose weights changed after another used the thread's
 * scratch; which kernel f32 channels-last forwards take; a 1x1 NHWC filter gradient as one GEMM; and blk16.c's bf16 transposition between NCHW and nChw16c. Graphs
 * run on kernel_ex.h's executor. */
#include "kernel_ex.h" /* random data, the tiny executor */

/* ================= convolution ================= */
typedef struct {
  int64_t N, C, H, W, O, KH, KW, G, s[2], pl[2], ph[2], d[2], OH, OW;
} cgeom;

static void ref_conv(const cgeom *q, const double *x, const double *w, double *y) {
  int64_t Cg = q->C / q->G, Og = q->O / q->G;
  for (int64_t n = 0; n < q->N; n++)
    for (int64_t o = 0; o < q->O; o++)
      for (int64_t oh = 0; oh < q->OH; oh++)
        for (int64_t ow = 0; ow < q->OW; ow++) {
          double s = 0;
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t i = 0; i < q->KH; i++)
              for (int64_t j = 0; j < q->KW; j++) {
                int64_t h = oh * q->s[0] - q->pl[0] + i * q->d[0], ww = ow * q->s[1] - q->pl[1] + j * q->d[1];
                if (h < 0 || h >= q->H || ww < 0 || ww >= q->W) continue;
                s += x[((n * q->C + (o / Og) * Cg + c) * q->H + h) * q->W + ww] * w[((o * Cg + c) * q->KH + i) * q->KW + j];
              }
          y[((n * q->O + o) * q->OH + oh) * q->OW + ow] = s;
        }
}

static void test_conv(void) {
  cgeom geoms[] = {
      {2, 4, 9, 8, 6, 3, 3, 2, {2, 2}, {1, 1}, {1, 0}, {2, 2}, 0, 0}, /* stride 2, pad, dilation 2, groups 2 */
      {3, 3, 8, 8, 5, 3, 3, 1, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 0, 0}, /* plain valid */
      {1, 2, 7, 5, 4, 2, 3, 1, {1, 2}, {2, 0}, {1, 1}, {1, 1}, 0, 0}, /* asymmetric everything */
      /* 1x1 on planes <= 14x14: forward and backward-data blocked, filter gradient on plain NCHW (f32) */
      {2, 5, 4, 3, 6, 1, 1, 1, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 0, 0},
      {2, 3, 5, 6, 4, 1, 1, 1, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 0, 0}, /* stride 2 */
      {1, 2, 15, 14, 3, 1, 1, 1, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 0, 0}, /* 1x1 on 15x14: all three plain (f32) */
  };
  for (size_t gi = 0; gi < sizeof geoms / sizeof *geoms; gi++) {
    cgeom q = geoms[gi];
    q.OH = (q.H + q.pl[0] + q.ph[0] - q.d[0] * (q.KH - 1) - 1) / q.s[0] + 1;
    q.OW = (q.W + q.pl[1] + q.ph[1] - q.d[1] * (q.KW - 1) - 1) / q.s[1] + 1;
    ts_conv_params cp = {{(int)q.s[0], (int)q.s[1]}, {(int)q.pl[0], (int)q.pl[1]}, {(int)q.ph[0], (int)q.ph[1]},
                         {(int)q.d[0], (int)q.d[1]}, (int)q.G, TS_LAYOUT_NCHW};
    int64_t xs[4] = {q.N, q.C, q.H, q.W}, ws[4] = {q.O, q.C / q.G, q.KH, q.KW}, ys[4] = {q.N, q.O, q.OH, q.OW};
    int64_t xn = ts_shape_numel(4, xs), wn = ts_shape_numel(4, ws), yn = ts_shape_numel(4, ys);
    for (int di = 0; di < 3; di++) {
      ts_dtype dt = di == 0 ? TS_F64 : di == 1 ? TS_F32 : TS_BF16;
      double tol = dt == TS_F64 ? 1e-12 : dt == TS_F32 ? 1e-5 : 3e-2;
      ex_t e;
      ex_init(&e);
      ts_tensor x = rinput(&e, dt, 4, xs), w = rinput(&e, dt, 4, ws), dy = rinput(&e, dt, 4, ys);
      ts_attr at = {.conv = cp};
      int32_t i0[2] = {x, w}, i1[2] = {dy, w}, i2[2] = {x, dy};
      ts_tensor y = node(&e, TS_OP_CONV, dt, 4, ys, 2, i0, &at);
      ts_tensor dx = node(&e, TS_OP_CONV_BWD_DATA, dt, 4, xs, 2, i1, &at);
      ts_tensor dw = node(&e, TS_OP_CONV_BWD_FILTER, dt, 4, ws, 2, i2, &at);
      CHECK_OK(run(&e, dw));
      double *xd = malloc(xn * 8), *wd = malloc(wn * 8), *dyd = malloc(yn * 8), *yr = malloc(yn * 8);
      double *dxr = calloc(xn, 8), *dwr = calloc(wn, 8), *tmp = malloc(yn * 8), *basis = calloc(xn > wn ? xn : wn, 8);
      for (int64_t i = 0; i < xn; i++) xd[i] = get(&e, x, i);
      for (int64_t i = 0; i < wn; i++) wd[i] = get(&e, w, i);
      for (int64_t i = 0; i < yn; i++) dyd[i] = get(&e, dy, i);
      ref_conv(&q, xd, wd, yr);
      /* bwd data / filter references via linearity: d<conv(x,w),dy>/dx_i */
      for (int64_t i = 0; i < xn; i++) {
        basis[i] = 1;
        ref_conv(&q, basis, wd, tmp);
        for (int64_t j = 0; j < yn; j++) dxr[i] += tmp[j] * dyd[j];
        basis[i] = 0;
      }
      for (int64_t i = 0; i < wn; i++) {
        basis[i] = 1;
        ref_conv(&q, xd, basis, tmp);
        for (int64_t j = 0; j < yn; j++) dwr[i] += tmp[j] * dyd[j];
        basis[i] = 0;
      }
      double scale = dt == TS_BF16 ? 4 : 1; /* bf16 sums of up to ~40 terms */
      CHECK(max_err(&e, y, yr, yn) < tol * scale, "conv fwd geom %zu %s err %g", gi, ts_dtype_name(dt), max_err(&e, y, yr, yn));
      CHECK(max_err(&e, dx, dxr, xn) < tol * scale, "conv bwd data geom %zu %s err %g", gi, ts_dtype_name(dt), max_err(&e, dx, dxr, xn));
      CHECK(max_err(&e, dw, dwr, wn) < tol * scale * 4, "conv bwd filter geom %zu %s err %g", gi, ts_dtype_name(dt), max_err(&e, dw, dwr, wn));
      CHECK(dt == TS_F64 || (e.st[y] && e.st[dx] && e.st[dw]), "conv geom %zu %s: oneDNN not used", gi, ts_dtype_name(dt));
      /* conv.c's plain_fits: bf16 only with 64+ input channels, so every bf16 geometry here is blocked */
      bool plain_dw = dt != TS_F64 && q.KH == 1 && q.KW == 1 && q.pl[0] == 0 && q.pl[1] == 0 && q.ph[0] == 0 &&
                      q.ph[1] == 0 && (dt != TS_BF16 || q.C >= 64);
      bool plain = plain_dw && q.OH * q.OW > 14 * 14;
      CHECK(tk_conv_state_is_plain(e.st[y]) == plain && tk_conv_state_is_plain(e.st[dx]) == plain &&
                tk_conv_state_is_plain(e.st[dw]) == plain_dw,
            "conv geom %zu %s: plain NCHW path y/dx/dw %d/%d/%d, expected %d/%d/%d", gi, ts_dtype_name(dt),
            tk_conv_state_is_plain(e.st[y]), tk_conv_state_is_plain(e.st[dx]), tk_conv_state_is_plain(e.st[dw]),
            plain, plain, plain_dw);
      /* adjoint identity with the kernels' own results: <conv(x,w), dy> = <x, bwd_data(dy, w)> */
      double l = 0, r = 0, r2 = 0;
      for (int64_t i = 0; i < yn; i++) l += get(&e, y, i) * dyd[i];
      for (int64_t i = 0; i < xn; i++) r += xd[i] * get(&e, dx, i);
      for (int64_t i = 0; i < wn; i++) r2 += wd[i] * get(&e, dw, i);
      CHECK(fabs(l - r) < tol * 10 * (1 + fabs(l)) && fabs(l - r2) < tol * 10 * (1 + fabs(l)), "conv adjoint %s: %g %g %g", ts_dtype_name(dt), l, r, r2);
      free(xd), free(wd), free(dyd), free(yr), free(dxr), free(dwr), free(tmp), free(basis);
      ex_free(&e);
    }
  }
}

/* The three ops of one convolution on random x, w and dy of dtype dt:
 * outs = {forward y, data gradient dx, filter gradient dw}. */
static void conv_trio(ex_t *e, ts_dtype dt, const int64_t xs[4], const int64_t ws[4], const int64_t ys[4],
                      const ts_attr *at, ts_tensor outs[3]) {
  ts_tensor x = rinput(e, dt, 4, xs), w = rinput(e, dt, 4, ws), dy = rinput(e, dt, 4, ys);
  int32_t i0[2] = {x, w}, i1[2] = {dy, w}, i2[2] = {x, dy};
  outs[0] = node(e, TS_OP_CONV, dt, 4, ys, 2, i0, at);
  outs[1] = node(e, TS_OP_CONV_BWD_DATA, dt, 4, xs, 2, i1, at);
  outs[2] = node(e, TS_OP_CONV_BWD_FILTER, dt, 4, ws, 2, i2, at);
}

/* The 1x1 convolutions of a ResNet on planes above 14x14: the plain NCHW path
 * (oneDNN's gemm convolution, no reorders) against the blocked path the other
 * convolutions take, the same three ops on the same data. Both accumulate in
 * f32, in different orders: f32 agrees to 1e-5 relative (sums of 48 to 225 terms),
 * bf16 results to one bf16 rounding (2^-8) plus the f32 difference. */
static void test_conv_plain_vs_blocked(void) {
  for (int si = 0; si < 2; si++)
    for (int di = 0; di < 2; di++) {
      ts_dtype dt = di ? TS_BF16 : TS_F32;
      /* one image, a 15x15 output plane: above plain_fits' 14x14, filter-gradient sums of 225 terms */
      int64_t st = si + 1, H = st == 1 ? 15 : 29, OH = (H - 1) / st + 1;
      int64_t xs[4] = {1, 64, H, H}, ws[4] = {48, 64, 1, 1}, ys[4] = {1, 48, OH, OH};
      ts_attr at = {.conv = {{(int)st, (int)st}, {0, 0}, {0, 0}, {1, 1}, 1}};
      ex_t e;
      ex_init(&e);
      ts_tensor outs[3];
      conv_trio(&e, dt, xs, ws, ys, &at, outs);
      CHECK_OK(run(&e, outs[2]));
      double *plain[3];
      for (int k = 0; k < 3; k++) {
        int64_t n = numel_of(e.g, outs[k]);
        CHECK(tk_conv_state_is_plain(e.st[outs[k]]), "conv 1x1 %s op %d: plain path not taken", ts_dtype_name(dt), k);
        plain[k] = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++) plain[k][i] = get(&e, outs[k], i);
        free(e.buf[outs[k]]), e.buf[outs[k]] = NULL;
        e.st[outs[k]]->free(e.st[outs[k]]), e.st[outs[k]] = NULL;
      }
      tk_conv_set_plain_1x1(false);
      CHECK_OK(run(&e, outs[2]));
      tk_conv_set_plain_1x1(true);
      double tol = dt == TS_F32 ? 1e-5 : 1.0 / 256 + 1e-5;
      for (int k = 0; k < 3; k++) {
        CHECK(e.st[outs[k]] && !tk_conv_state_is_plain(e.st[outs[k]]), "conv 1x1 %s op %d: blocked path not taken",
              ts_dtype_name(dt), k);
        double err = max_err(&e, outs[k], plain[k], numel_of(e.g, outs[k]));
        CHECK(err < tol, "conv 1x1 stride %lld %s op %d: plain vs blocked err %g", (long long)st, ts_dtype_name(dt), k, err);
        free(plain[k]);
      }
      ex_free(&e);
    }
}

/* ResNet-20's projection shortcut (1x1, stride 2, 16 -> 32 channels, 32x32 ->
 * 16x16): f32 takes the plain NCHW path in all three directions, bf16 the
 * blocked one (conv.c's PLAIN_MIN_BF16_CHANNELS: oneDNN's bf16 gemm
 * convolution was 3-8x slower there, bench/run_onednn_least.sh). */
static void test_conv_bf16_small_1x1(void) {
  for (int di = 0; di < 2; di++) {
    ts_dtype dt = di ? TS_BF16 : TS_F32;
    int64_t xs[4] = {2, 16, 32, 32}, ws[4] = {32, 16, 1, 1}, ys[4] = {2, 32, 16, 16};
    ts_attr at = {.conv = {{2, 2}, {0, 0}, {0, 0}, {1, 1}, 1}};
    ex_t e;
    ex_init(&e);
    ts_tensor outs[3];
    conv_trio(&e, dt, xs, ws, ys, &at, outs);
    CHECK_OK(run(&e, outs[2]));
    for (int k = 0; k < 3; k++)
      CHECK(e.st[outs[k]] && tk_conv_state_is_plain(e.st[outs[k]]) == (dt == TS_F32),
            "conv 1x1 16->32 stride 2 %s op %d: plain %d, expected %d", ts_dtype_name(dt), k,
            e.st[outs[k]] ? tk_conv_state_is_plain(e.st[outs[k]]) : -1, dt == TS_F32);
    ex_free(&e);
  }
}

/* The blocked weights of a convolution live in the thread's conv scratch,
 * reordered on every call: after another conv (a backward-data with other
 * weights) has used that scratch and the weights have changed, a conv's next
 * call equals, bit for bit, a fresh conv of the new weights. */
static void test_conv_weights_scratch(void) {
  int64_t xs[4] = {2, 8, 9, 9}, ws[4] = {16, 8, 3, 3}, ys[4] = {2, 16, 9, 9};
  ts_attr at = {.conv = {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}};
  ex_t e;
  ex_init(&e);
  ts_tensor x = rinput(&e, TS_F32, 4, xs), w1 = rinput(&e, TS_F32, 4, ws), w2 = rinput(&e, TS_F32, 4, ws);
  ts_tensor dy = rinput(&e, TS_F32, 4, ys);
  int32_t a[2] = {x, w1}, b[2] = {dy, w2}, c[2] = {x, w2};
  ts_tensor y1 = node(&e, TS_OP_CONV, TS_F32, 4, ys, 2, a, &at), dx = node(&e, TS_OP_CONV_BWD_DATA, TS_F32, 4, xs, 2, b, &at);
  ts_tensor y2 = node(&e, TS_OP_CONV, TS_F32, 4, ys, 2, c, &at);
  CHECK_OK(run(&e, y2));
  CHECK(e.st[y1] && !tk_conv_state_is_plain(e.st[y1]) && e.st[dx], "conv weights scratch: blocked path not taken");
  memcpy(e.buf[w1], e.buf[w2], (size_t)numel_of(e.g, w1) * sizeof(float));
  const void *in[2] = {e.buf[x], e.buf[w1]};
  ts_kctx ctx = {.num_threads = 2};
  CHECK_OK(kernel_run(e.g, y1, in, e.buf[y1], &e.st[y1], &ctx));
  CHECK(!memcmp(e.buf[y1], e.buf[y2], (size_t)numel_of(e.g, y1) * sizeof(float)),
        "conv weights scratch: a conv's next call does not see its new weights");
  ex_free(&e);
}

/* f32 channels-last forward convolutions: 3x3 with few input channels
 * (16 -> 16) or a 4-wide output (64 -> 64 on 4x4, 3x3 or 1x1) conv.c takes
 * oneDNN's first kernel that is not a brgconv (nhwc_jit_fits; measured
 * faster there, the note in conv.c), elsewhere (64 -> 64 3x3 on 8x8, a 1x1
 * of 16 channels on 8x8) the one oneDNN lists first, and with the choice
 * off the first one everywhere; both results agree to 1e-5 relative (sums
 * of up to 576 terms in other orders). */
static void test_conv_nhwc_jit(void) {
  static const int64_t cases[5][4] = {{16, 8, 3, 1}, {64, 4, 3, 1}, {64, 4, 1, 1}, {64, 8, 3, 0}, {16, 8, 1, 0}};
  for (int ci = 0; ci < 5; ci++) { /* C = O, H = W, K, whether the rule fires */
    int64_t C = cases[ci][0], H = cases[ci][1], K = cases[ci][2], P = K / 2;
    int64_t xs[4] = {2, H, H, C}, ws[4] = {C, C, K, K}, ys[4] = {2, H, H, C};
    ts_attr at = {.conv = {{1, 1}, {(int)P, (int)P}, {(int)P, (int)P}, {1, 1}, 1, TS_LAYOUT_NHWC}};
    ex_t e;
    ex_init(&e);
    ts_tensor x = rinput(&e, TS_F32, 4, xs), w = rinput(&e, TS_F32, 4, ws);
    int32_t in[2] = {x, w};
    ts_tensor y = node(&e, TS_OP_CONV, TS_F32, 4, ys, 2, in, &at);
    char impl[2][48];
    double *first = NULL;
    int64_t n = numel_of(e.g, y);
    for (int pass = 0; pass < 2; pass++) {
      tk_conv_set_nhwc_jit(pass == 1);
      CHECK_OK(run(&e, y));
      CHECK(e.st[y], "conv nhwc %lld ch %lldx%lld k%lld: no oneDNN state", (long long)C, (long long)H, (long long)H, (long long)K);
      snprintf(impl[pass], sizeof impl[pass], "%s", e.st[y] ? tk_conv_state_impl(e.st[y]) : "");
      if (pass == 0) {
        first = malloc((size_t)n * sizeof *first);
        for (int64_t i = 0; i < n; i++) first[i] = get(&e, y, i);
        free(e.buf[y]), e.buf[y] = NULL;
        if (e.st[y]) e.st[y]->free(e.st[y]), e.st[y] = NULL;
      }
    }
    tk_conv_set_nhwc_jit(true);
    bool brg_first = !strncmp(impl[0], "brgconv", 7);
    if (cases[ci][3])
      CHECK(strncmp(impl[1], "brgconv", 7) && strncmp(impl[1], "ref", 3) && *impl[1],
            "conv nhwc %lld ch %lldx%lld k%lld: took %s (oneDNN's first: %s)", (long long)C, (long long)H, (long long)H, (long long)K,
            impl[1], impl[0]);
    else
      CHECK(!strcmp(impl[0], impl[1]), "conv nhwc %lld ch %lldx%lld k%lld: took %s, oneDNN's first %s", (long long)C,
            (long long)H, (long long)H, (long long)K, impl[1], impl[0]);
    if (ci == 0 && !brg_first) fprintf(stderr, "note: oneDNN lists %s first here: the choice is not exercised\n", impl[0]);
    double err = max_err(&e, y, first, n);
    CHECK(err < 1e-5, "conv nhwc %lld ch %lldx%lld k%lld: %s vs %s err %g", (long long)C, (long long)H, (long long)H, (long long)K,
          impl[1], impl[0], err);
    free(first);
    ex_free(&e);
  }
}

/* blk16.c's NCHW <-> nChw16c transposition of 16-bit values against the
 * layout's definition (element (n, c, p) at ((n C/16 + c/16) HW + p) 16 + c%16),
 * on planes below, at and around its 16-wide tiles, on 1 and 2 threads; then
 * bf16 convolutions whose activations it moves (C and O multiples of 16, 3x3:
 * the blocked path) equal, bit for bit, the same convolutions through
 * oneDNN's reorder primitive. */
static void test_conv_blk16(void) {
  static const int64_t hws[] = {1, 7, 16, 17, 49, 50};
  for (int k = 0; k < 6; k++)
    for (int nt = 1; nt <= 2; nt++) {
      int64_t N = 2, C = 48, HW = hws[k], n = N * C * HW;
      uint16_t *x = malloc((size_t)n * 2), *b = malloc((size_t)n * 2), *back = malloc((size_t)n * 2);
      for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)(urand() * 65536);
      tk_blk16_convert(x, b, N, C, HW, true, nt);
      tk_blk16_convert(b, back, N, C, HW, false, nt);
      int64_t bad = -1;
      for (int64_t i = 0; i < n && bad < 0; i++) {
        int64_t im = i / (C * HW), c = i / HW % C, p = i % HW;
        if (b[((im * (C / 16) + c / 16) * HW + p) * 16 + c % 16] != x[i] || back[i] != x[i]) bad = i;
      }
      CHECK(bad < 0, "blk16 HW %lld, %d threads: element %lld misplaced", (long long)HW, nt, (long long)bad);
      free(x), free(b), free(back);
    }
  int64_t xs[4] = {2, 32, 9, 7}, ws[4] = {48, 32, 3, 3}, ys[4] = {2, 48, 9, 7};
  ts_attr at = {.conv = {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}};
  ex_t e;
  ex_init(&e);
  ts_tensor outs[3];
  conv_trio(&e, TS_BF16, xs, ws, ys, &at, outs);
  void *ref[3];
  for (int pass = 0; pass < 2; pass++) {
    tk_conv_set_blk16(pass == 1);
    CHECK_OK(run(&e, outs[2]));
    for (int k = 0; k < 3; k++) {
      size_t bytes = (size_t)numel_of(e.g, outs[k]) * 2;
      if (!pass) {
        ref[k] = e.buf[outs[k]], e.buf[outs[k]] = NULL;
      } else {
        CHECK(!memcmp(ref[k], e.buf[outs[k]], bytes), "blk16: bf16 conv op %d differs from oneDNN's reorders", k);
        free(ref[k]);
      }
      e.st[outs[k]]->free(e.st[outs[k]]), e.st[outs[k]] = NULL;
    }
  }
  tk_conv_set_blk16(true);
  ex_free(&e);
}

/* A 1x1 NHWC f32 filter gradient over at most 2048 output positions runs as
 * one GEMM (conv_gemm.c; ResNet-50's last stages at one image per device ran
 * 2-5x slower in oneDNN's convolution): at stride 1 and 2 (x's strided
 * positions copied), against the sum in double, to 1e-5 relative (2e-8 K
 * at K terms above 500); over
 * 56x56 positions (K 3136) the convolution's own kernel as before. */
static void test_conv_gemm_1x1(void) {
  for (int k = 0; k < 3; k++) {
    int64_t st = k == 1 ? 2 : 1, N = k == 2 ? 1 : 2, OH = k == 2 ? 56 : 7, H = (OH - 1) * st + 1 + (st - 1);
    int64_t C = 24, O = 20, xs[4] = {N, H, H, C}, ws[4] = {O, C, 1, 1}, ys[4] = {N, OH, OH, O};
    ts_attr at = {.conv = {{(int)st, (int)st}, {0, 0}, {0, 0}, {1, 1}, 1, TS_LAYOUT_NHWC}};
    ex_t e;
    ex_init(&e);
    ts_tensor x = rinput(&e, TS_F32, 4, xs), dy = rinput(&e, TS_F32, 4, ys);
    int32_t in[2] = {x, dy};
    ts_tensor dw = node(&e, TS_OP_CONV_BWD_FILTER, TS_F32, 4, ws, 2, in, &at);
    CHECK_OK(run(&e, dw));
    double *ref = calloc((size_t)(O * C), sizeof *ref);
    for (int64_t b = 0; b < N; b++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OH; j++)
          for (int64_t o = 0; o < O; o++)
            for (int64_t c = 0; c < C; c++)
              ref[o * C + c] += get(&e, dy, ((b * OH + i) * OH + j) * O + o) *
                                get(&e, x, ((b * H + i * st) * H + j * st) * C + c);
    bool gemm = N * OH * OH <= 2048;
    CHECK(tk_conv_gemm_state(e.st[dw]) == gemm, "conv 1x1 nhwc dw, %lld positions, stride %lld: GEMM %d, expected %d",
          (long long)(N * OH * OH), (long long)st, tk_conv_gemm_state(e.st[dw]), gemm);
    double err = max_err(&e, dw, ref, O * C);
    double tol = fmax(1e-5, 2e-8 * (double)(N * OH * OH)); /* f32 sums of K terms */
    CHECK(err < tol, "conv 1x1 nhwc dw, %lld positions, stride %lld: err %g (tolerance %g)", (long long)(N * OH * OH),
          (long long)st, err, tol);
    free(ref);
    ex_free(&e);
  }
}

int main(void) {
  rs = ts_test_init("test_conv_kernels", 42);
  test_conv_gemm_1x1();
  test_conv();
  test_conv_plain_vs_blocked();
  test_conv_bf16_small_1x1();
  test_conv_weights_scratch();
  test_conv_nhwc_jit();
  test_conv_blk16();
  return ts_test_finish();
}
