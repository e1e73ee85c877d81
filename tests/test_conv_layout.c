/* test_conv_layout.c — channels-last (TS_LAYOUT_NHWC) convolutions and
 * pooling against the NCHW ones and against the f64 direct loops.
 *
 * Each case builds, for a layout L and a dtype dt, from f32 inputs x
 * (N, C, H, W), w and a cotangent c shaped like the NCHW result:
 *   xx = convert(x, dt) (transposed to (N, H, W, C) for NHWC),
 *   y = op(xx, convert(w, dt)) (transposed back to NCHW for NHWC),
 *   L = sum(y * convert(c, dt)), and y, dL/dx, dL/dw as f32.
 * Inputs are multiples of 1/8 in [-1, 1] (exact in bf16), so every dtype
 * sees the same values. Checked:
 *   - NHWC = NCHW: bit-exact in f64 (the same loops in the same order);
 *     max |diff| <= 1e-5 * max |ref| in f32 (oneDNN's nxc against its blocked
 *     kernels), <= 1e-2 * max |ref| in bf16 (one bf16 rounding of the result);
 *     pooling bit-exact in every dtype (f32 / f64 NHWC pool channels innermost
 *     with the planar kernels' operations in their order; 70 channels: a full
 *     and a partial chunk of 64);
 *   - NHWC in f32 / bf16 against NCHW in f64 (the loops) within the same bounds;
 *   - a layout that is neither value is a graph-building error naming it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

typedef struct {
  const char *name;
  int64_t x[4], w[4]; /* NCHW, OIHW; w unused by pools */
  ts_conv_params cp;
  int pool;           /* 0 conv, 1 max, 2 avg */
  ts_pool_params pp;
} tcase;

static const tcase cases[] = {
    {.name = "conv 3x3 pad 1", .x = {2, 5, 7, 6}, .w = {4, 5, 3, 3}, .cp = {.pad_lo = {1, 1}, .pad_hi = {1, 1}}},
    {.name = "conv 3x3 stride 2", .x = {3, 16, 8, 8}, .w = {32, 16, 3, 3},
     .cp = {.stride = {2, 2}, .pad_lo = {1, 1}, .pad_hi = {1, 1}}},
    {.name = "conv 1x1 stride 2 (projection)", .x = {2, 16, 8, 8}, .w = {32, 16, 1, 1}, .cp = {.stride = {2, 2}}},
    {.name = "conv 1x1", .x = {2, 32, 5, 5}, .w = {16, 32, 1, 1}},
    {.name = "conv groups 2 dilation 2", .x = {2, 4, 9, 8}, .w = {6, 2, 3, 2},
     .cp = {.groups = 2, .dilation = {2, 1}, .pad_lo = {2, 0}, .pad_hi = {1, 1}}},
    {.name = "max pool 3x3 stride 2 pad 1", .x = {2, 3, 9, 8}, .pool = 1,
     .pp = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}}},
    {.name = "max pool 2x2", .x = {2, 4, 6, 6}, .pool = 1, .pp = {.kernel = {2, 2}}},
    {.name = "avg pool 3x2 pad", .x = {2, 3, 7, 6}, .pool = 2, .pp = {.kernel = {3, 2}, .stride = {2, 2}, .pad = {1, 0}}},
    {.name = "max pool 3x3 stride 2 pad 1, 70 channels", .x = {2, 70, 11, 12}, .pool = 1,
     .pp = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}}},
    {.name = "avg pool 3x3 stride 1 pad 1, 70 channels", .x = {1, 70, 6, 5}, .pool = 2,
     .pp = {.kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1}}},
};

static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};

typedef struct {
  float *y, *dx, *dw;
  int64_t ny, nx, nw;
} result;

static int64_t numel(const int64_t *s) { return s[0] * s[1] * s[2] * s[3]; }

/* The NCHW result shape of case t. */
static ts_tensor build(ts_graph *g, const tcase *t, ts_dtype dt, ts_layout L, ts_tensor *xx, ts_tensor *ww,
                       ts_tensor x, ts_tensor w) {
  *xx = ts_convert(g, x, dt);
  ts_tensor h = L == TS_LAYOUT_NHWC ? ts_transpose(g, *xx, to_nhwc) : *xx, y;
  if (t->pool) {
    ts_pool_params p = t->pp;
    p.layout = L;
    y = t->pool == 1 ? ts_max_pool2d(g, h, &p) : ts_avg_pool2d(g, h, &p);
  } else {
    ts_conv_params p = t->cp;
    p.layout = L;
    *ww = ts_convert(g, w, dt);
    y = ts_conv2d(g, h, *ww, &p);
  }
  return L == TS_LAYOUT_NHWC && y != TS_NONE ? ts_transpose(g, y, to_nchw) : y;
}

static int run(ts_client *cl, const tcase *t, ts_dtype dt, ts_layout L, const float *hx, const float *hw,
               const float *hc, const int64_t *ys, result *r) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, t->x), w = t->pool ? TS_NONE : ts_input(g, "w", TS_F32, 4, t->w);
  ts_tensor c = ts_input(g, "c", TS_F32, 4, ys), xx, ww = TS_NONE;
  ts_tensor y = build(g, t, dt, L, &xx, &ww, x, w);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, y, ts_convert(g, c, dt))), wrt[2] = {xx, ww}, d[2];
  int nw = t->pool ? 1 : 2, rc = -1;
  ts_executable *e = NULL;
  if (loss != TS_NONE && !ts_grad(g, loss, nw, wrt, d) && ts_graph_add_output(g, ts_convert(g, y, TS_F32)) >= 0 &&
      ts_graph_add_output(g, ts_convert(g, d[0], TS_F32)) >= 0 &&
      (t->pool || ts_graph_add_output(g, ts_convert(g, d[1], TS_F32)) >= 0))
    e = ts_compile(cl, g, NULL);
  ts_graph_free(g);
  if (!e) return -1;
  ts_buffer *in[3] = {ts_buffer_from_host(cl, TS_F32, 4, t->x, hx), NULL, NULL}, *out[3] = {0};
  int k = 1;
  if (!t->pool) in[k++] = ts_buffer_from_host(cl, TS_F32, 4, t->w, hw);
  in[k] = ts_buffer_from_host(cl, TS_F32, 4, ys, hc);
  r->ny = numel(ys), r->nx = numel(t->x), r->nw = t->pool ? 0 : numel(t->w);
  r->y = malloc(sizeof(float) * (size_t)r->ny), r->dx = malloc(sizeof(float) * (size_t)r->nx);
  r->dw = malloc(sizeof(float) * (size_t)(r->nw ? r->nw : 1));
  if (in[k] && !ts_execute(e, in, out) && !ts_buffer_read(out[0], r->y, sizeof(float) * (size_t)r->ny) &&
      !ts_buffer_read(out[1], r->dx, sizeof(float) * (size_t)r->nx) &&
      (t->pool || !ts_buffer_read(out[2], r->dw, sizeof(float) * (size_t)r->nw)))
    rc = 0;
  for (int i = 0; i < 3; i++) ts_buffer_free(in[i]), ts_buffer_free(out[i]);
  ts_executable_free(e);
  return rc;
}

/* max |a - b| <= tol * max |b| (tol 0: bit-exact). */
static void check_close(const char *what, const tcase *t, ts_dtype dt, const float *a, const float *b, int64_t n,
                        double tol) {
  double md = 0, mb = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > md || (tol == 0 && memcmp(&a[i], &b[i], sizeof *a))) md = d > md ? d : md, at = i;
    mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
  }
  bool ok = tol == 0 ? memcmp(a, b, sizeof *a * (size_t)n) == 0 : md <= tol * mb;
  CHECK(ok, "%s %s %s: max |diff| %g at %lld (%g vs %g), max |ref| %g, bound %g", t->name, ts_dtype_name(dt), what, md,
        (long long)at, a[at], b[at], mb, tol * mb);
}

static void free_result(result *r) { free(r->y), free(r->dx), free(r->dw); }

static void one_case(ts_client *cl, const tcase *t, uint64_t *rng) {
  int64_t ys[4];
  { /* the NCHW result shape, from a graph that infers it */
    ts_graph *g = ts_graph_new();
    ts_tensor x = ts_input(g, "x", TS_F32, 4, t->x), w = t->pool ? TS_NONE : ts_input(g, "w", TS_F32, 4, t->w), xx, ww;
    ts_tensor y = build(g, t, TS_F32, TS_LAYOUT_NCHW, &xx, &ww, x, w);
    CHECK(y != TS_NONE, "%s: %s", t->name, ts_last_error());
    if (y == TS_NONE) {
      ts_graph_free(g);
      return;
    }
    memcpy(ys, ts_tensor_shape(g, y), sizeof ys);
    ts_graph_free(g);
  }
  int64_t nx = numel(t->x), nw = t->pool ? 1 : numel(t->w), ny = numel(ys);
  float *h = malloc(sizeof *h * (size_t)(nx + nw + ny));
  for (int64_t i = 0; i < nx + nw + ny; i++) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (float)((int)(*rng >> 59) - 16) / 16.0f; /* multiples of 1/16 in [-1, 1): exact in bf16 */
  }
  result ref; /* NCHW f64: the direct loops */
  if (run(cl, t, TS_F64, TS_LAYOUT_NCHW, h, h + nx, h + nx + nw, ys, &ref)) {
    CHECK(0, "%s f64 nchw: %s", t->name, ts_last_error());
    free(h);
    return;
  }
  static const ts_dtype dts[3] = {TS_F64, TS_F32, TS_BF16};
  for (int k = 0; k < 3; k++) {
    ts_dtype dt = dts[k];
    result a, b; /* NCHW, NHWC */
    int ra = run(cl, t, dt, TS_LAYOUT_NCHW, h, h + nx, h + nx + nw, ys, &a);
    int rb = ra ? -1 : run(cl, t, dt, TS_LAYOUT_NHWC, h, h + nx, h + nx + nw, ys, &b);
    CHECK(!ra && !rb, "%s %s: %s", t->name, ts_dtype_name(dt), ts_last_error());
    if (!ra && !rb) {
      bool exact = dt == TS_F64 || t->pool;
      double tol = exact ? 0 : dt == TS_BF16 ? 1e-2 : 1e-5;
      check_close("y nhwc vs nchw", t, dt, b.y, a.y, a.ny, tol);
      check_close("dx nhwc vs nchw", t, dt, b.dx, a.dx, a.nx, tol);
      if (!t->pool) check_close("dw nhwc vs nchw", t, dt, b.dw, a.dw, a.nw, tol);
      double tl = dt == TS_BF16 ? 1e-2 : dt == TS_F32 ? 1e-5 : 0; /* against the f64 loops */
      check_close("y nhwc vs f64 loops", t, dt, b.y, ref.y, a.ny, tl);
      check_close("dx nhwc vs f64 loops", t, dt, b.dx, ref.dx, a.nx, tl);
      if (!t->pool) check_close("dw nhwc vs f64 loops", t, dt, b.dw, ref.dw, a.nw, tl);
    }
    if (!ra) free_result(&a);
    if (!rb) free_result(&b);
  }
  free_result(&ref);
  free(h);
}

static void bad_layout(void) {
  ts_graph *g = ts_graph_new();
  int64_t xs[4] = {1, 2, 4, 4}, ws[4] = {3, 2, 3, 3};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs), w = ts_input(g, "w", TS_F32, 4, ws);
  ts_conv_params cp = {.layout = (ts_layout)7};
  CHECK(ts_conv2d(g, x, w, &cp) == TS_NONE && strstr(ts_last_error(), "layout 7"), "conv: %s", ts_last_error());
  ts_pool_params pp = {.kernel = {2, 2}, .layout = (ts_layout)-1};
  CHECK(ts_max_pool2d(g, x, &pp) == TS_NONE && strstr(ts_last_error(), "layout -1"), "pool: %s", ts_last_error());
  /* NHWC reads the channels from dim 3: x (1, 2, 4, 4) has 4 there, w wants 2 */
  cp.layout = TS_LAYOUT_NHWC;
  CHECK(ts_conv2d(g, x, w, &cp) == TS_NONE && strstr(ts_last_error(), "dim 3"), "conv nhwc: %s", ts_last_error());
  ts_graph_free(g);
}

int main(void) {
  uint64_t rng = ts_test_init("test_conv_layout", 11);
  ts_client *cl = ts_client_new(NULL);
  CHECK(cl != NULL, "%s", ts_last_error());
  if (!cl) return ts_test_finish();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(cl, &cases[i], &rng);
  bad_layout();
  ts_client_free(cl);
  return ts_test_finish();
}
