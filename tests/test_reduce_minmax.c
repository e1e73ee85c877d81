/* test_reduce_minmax.c — the vectorized max / min of a contiguous reduced run
 * (src/kernels/reduce.c minmax_fast_*) returns the same bits as the scalar
 * fold it replaces: a = (v > a || v != v) ? v : a in index order, so the last
 * NaN wins (payload included), the first of -0 / +0 wins, -inf and +inf are
 * values. Runs of every length around the 64-byte lanes (and the 4-vector
 * minimum) in f32, f64 and bf16, over the reduce shapes [K, R], [R], [R, K, R]
 * and [R, K] (the last two take the row paths, checked for the same rules),
 * with 1 and 2 threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "util/half.h"

static uint64_t rs;
static double urand(void) { /* splitmix64 -> [0, 1) */
  uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

/* A NaN with payload p (quiet, so it survives the double round trip). */
static float nanf_p(uint32_t p) {
  uint32_t b = 0x7fc00000u | ((p & 0x3fffu) << 8), s = (p & 1) << 31;
  b |= s;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* Fills n values of one of several patterns (as floats; bf16 keeps the top
 * half, so every value here is exact in bf16). */
static void fill(float *v, int64_t n, int pat) {
  for (int64_t i = 0; i < n; i++) v[i] = (float)((int)(urand() * 64) - 32) * 0.25f;
  switch (pat) {
    case 0: break;                                 /* plain values, ties */
    case 1:                                        /* NaNs with distinct payloads */
      for (int k = 0; k < 3 && n; k++) v[(int64_t)(urand() * n)] = nanf_p((uint32_t)(k + 1) * 37);
      break;
    case 2: /* max is zero: -0 / +0 mixed with negatives; min: mirrored below */
      for (int64_t i = 0; i < n; i++) v[i] = urand() < 0.3 ? (urand() < 0.5 ? -0.0f : 0.0f) : -fabsf(v[i]) - 1;
      break;
    case 3:
      for (int64_t i = 0; i < n; i++) v[i] = urand() < 0.3 ? (urand() < 0.5 ? -0.0f : 0.0f) : fabsf(v[i]) + 1;
      break;
    case 4: /* infinities */
      for (int64_t i = 0; i < n; i++) v[i] = urand() < 0.5 ? -INFINITY : v[i];
      if (n && urand() < 0.5) v[(int64_t)(urand() * n)] = INFINITY;
      break;
    case 5:
      for (int64_t i = 0; i < n; i++) v[i] = -INFINITY;
      break;
    case 6: /* a NaN only in the tail / only at 0 */
      if (n) v[n - 1] = nanf_p(5);
      if (n > 1) v[0] = nanf_p(9);
      break;
    default: /* all zeros */
      for (int64_t i = 0; i < n; i++) v[i] = urand() < 0.5 ? -0.0f : 0.0f;
  }
}

static double fold(double a, double v, ts_reduce_kind k) {
  if (k == TS_REDUCE_MAX) return (v > a || v != v) ? v : a;
  return (v < a || v != v) ? v : a;
}

/* x has shape sh (rank r), reduced dims red; checks bits of every output. */
static void check(ts_dtype dt, int r, const int64_t *sh, const bool *red, ts_reduce_kind k, int pat, int nt) {
  ts_graph *g = ts_graph_new();
  ts_attr at = {.reduce = k};
  int64_t osh[4];
  int orank = 0;
  for (int d = 0; d < r; d++)
    if (red[d]) at.dims[at.n_dims++] = d;
    else osh[orank++] = sh[d];
  ts_tensor x = ir_append(g, TS_OP_INPUT, dt, r, sh, 0, NULL, NULL);
  ts_tensor y = ir_append(g, TS_OP_REDUCE, dt, orank, osh, 1, &x, &at);
  int64_t xn = ts_tensor_numel(g, x), on = ts_tensor_numel(g, y);
  size_t es = ts_dtype_size(dt);
  float *v = malloc((size_t)xn * sizeof *v);
  void *xb = malloc((size_t)xn * es + 64), *yb = malloc((size_t)on * es + 64);
  double *ref = malloc((size_t)on * sizeof *ref);
  if (!v || !xb || !yb || !ref) abort();
  fill(v, xn, pat);
  for (int64_t i = 0; i < xn; i++) {
    if (dt == TS_F32) ((float *)xb)[i] = v[i];
    else if (dt == TS_F64) ((double *)xb)[i] = v[i];
    else {
      uint32_t b;
      memcpy(&b, &v[i], 4);
      ((uint16_t *)xb)[i] = (uint16_t)(b >> 16);
    }
  }
  for (int64_t o = 0; o < on; o++) ref[o] = k == TS_REDUCE_MAX ? -INFINITY : INFINITY;
  for (int64_t i = 0; i < xn; i++) { /* index order, as the kernel folds */
    int64_t rem = i, o = 0, s = 1;
    for (int d = r - 1; d >= 0; d--) {
      int64_t idx = rem % sh[d];
      rem /= sh[d];
      if (!red[d]) o += idx * s, s *= sh[d];
    }
    double xv = dt == TS_F32 ? ((float *)xb)[i] : dt == TS_F64 ? ((double *)xb)[i]
                                                               : ts_bf16_to_f32(((uint16_t *)xb)[i]);
    ref[o] = fold(ref[o], xv, k);
  }
  const void *in[1] = {xb};
  ts_kctx ctx = {.num_threads = nt};
  ts_kstate *st = NULL;
  CHECK_OK(kernel_run(g, y, in, yb, &st, &ctx));
  if (st) st->free(st);
  int bad = 0;
  for (int64_t o = 0; o < on && bad < 3; o++) {
    bool same;
    if (dt == TS_F32) {
      float a = ((float *)yb)[o], b = (float)(ref[o] * 1.0);
      same = memcmp(&a, &b, 4) == 0;
    } else if (dt == TS_F64) {
      double a = ((double *)yb)[o], b = ref[o] * 1.0;
      same = memcmp(&a, &b, 8) == 0;
    } else { /* bf16: NaN-ness, sign and value */
      float a = ts_bf16_to_f32(((uint16_t *)yb)[o]), b = (float)ref[o];
      same = (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
    }
    if (!same) {
      bad++;
      CHECK(0, "%s %s pat %d rank %d shape %lld,%lld,%lld nt %d: output %lld differs from the scalar fold (%g)",
            ts_dtype_name(dt), k == TS_REDUCE_MAX ? "max" : "min", pat, r, (long long)sh[0],
            (long long)(r > 1 ? sh[1] : 1), (long long)(r > 2 ? sh[2] : 1), nt, (long long)o, ref[o]);
    }
  }
  free(v), free(xb), free(yb), free(ref);
  ts_graph_free(g);
}

int main(void) {
  rs = ts_test_init("test_reduce_minmax", 7);
  static const int64_t lens[] = {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 66, 100, 127, 128, 129, 1000, 8195};
  const int nl = (int)(sizeof lens / sizeof lens[0]);
  const ts_dtype dts[3] = {TS_F32, TS_F64, TS_BF16};
  for (int di = 0; di < 3; di++)
    for (int kk = 0; kk < 2; kk++) {
      ts_reduce_kind k = kk ? TS_REDUCE_MIN : TS_REDUCE_MAX;
      for (int pat = 0; pat < 8; pat++)
        for (int li = 0; li < nl; li++) {
          int64_t R = lens[li];
          /* [K, R]: rows over the last dim (the cross-entropy's max) */
          int64_t s2[2] = {3, R};
          bool r2[2] = {false, true};
          check(dts[di], 2, s2, r2, k, pat, 1 + (li & 1));
          /* [R]: everything */
          int64_t s1[1] = {R};
          bool r1[1] = {true};
          check(dts[di], 1, s1, r1, k, pat, 2);
          if (R > 200) continue;
          /* [R, K, R] and [R, K]: the row paths */
          int64_t s3[3] = {2, 3, R};
          bool r3[3] = {true, false, true};
          check(dts[di], 3, s3, r3, k, pat, 1 + (li & 1));
          int64_t s4[2] = {R, 5};
          bool r4[2] = {true, false};
          check(dts[di], 2, s4, r4, k, pat, 2);
        }
    }
  return ts_test_finish();
}
