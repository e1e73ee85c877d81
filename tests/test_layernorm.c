/* test_layernorm.c — the fused layer-norm ops (kernels/layernorm.c:
 * layer_norm, layer_norm_grad, layer_norm_dgamma) against the decomposed
 * composite (ts_layer_norm_decomposed: reduce, add, mul, rsqrt), in f32.
 *
 * Each case builds L = sum(layer_norm(x, gamma, beta) * c) with seeded random
 * x (rows with an offset, so the centering matters), gamma, beta and
 * cotangent c, outputs y and ts_grad(L, {x, gamma, beta}) for both forms, and
 * checks each normwise: max |fused - decomposed| <= 1e-6 max |decomposed|
 * (dgamma, dbeta: sums over all rows, 2e-6). Shapes: rank 1, odd D, odd row
 * counts over several dgamma row blocks, rank 3 like GPT's (B, T, C). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

static uint64_t rng_state;
static double uniform(double lo, double hi) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return lo + (hi - lo) * ((double)(z >> 11) * 0x1.0p-53);
}

/* Outputs y, dx, dgamma, dbeta of one form. */
static ts_executable *build(ts_client *cl, int rank, const int64_t *s, bool fused, ts_graph **gout) {
  ts_graph *g = ts_graph_new();
  *gout = g;
  int64_t D = s[rank - 1];
  ts_tensor x[3] = {ts_input(g, "x", TS_F32, rank, s), ts_input(g, "gamma", TS_F32, 1, &D),
                    ts_input(g, "beta", TS_F32, 1, &D)};
  ts_tensor c = ts_input(g, "c", TS_F32, rank, s);
  ts_tensor y = fused ? ts_layer_norm(g, x[0], x[1], x[2], 1e-5) : ts_layer_norm_decomposed(g, x[0], x[1], x[2], 1e-5);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, y, c)), d[3];
  if (loss == TS_NONE || ts_grad(g, loss, 3, x, d) || ts_graph_add_output(g, y) < 0) return NULL;
  for (int i = 0; i < 3; i++)
    if (ts_graph_add_output(g, d[i]) < 0) return NULL;
  return ts_compile(cl, g, NULL);
}

static void run_case(ts_client *cl, int rank, const int64_t *s) {
  int64_t n = 1, D = s[rank - 1];
  for (int d = 0; d < rank; d++) n *= s[d];
  ts_graph *gf = NULL, *gd = NULL;
  ts_executable *ef = build(cl, rank, s, true, &gf), *ed = build(cl, rank, s, false, &gd);
  CHECK(ef && ed, "compile rank %d, D %lld: %s", rank, (long long)D, ts_last_error());
  float *host = malloc((size_t)(2 * n + 2 * D) * sizeof *host), *a = malloc((size_t)n * sizeof *a),
        *b = malloc((size_t)n * sizeof *b);
  ts_buffer *in[4] = {NULL};
  if (host) {
    for (int64_t r = 0; r < n / D; r++) {
      double off = uniform(-3, 3), sc = uniform(0.2, 2);
      for (int64_t j = 0; j < D; j++) host[r * D + j] = (float)(off + sc * uniform(-1, 1));
    }
    for (int64_t i = n; i < 2 * n + 2 * D; i++) host[i] = (float)uniform(-2, 2);
    in[0] = ts_buffer_from_host(cl, TS_F32, rank, s, host);
    in[1] = ts_buffer_from_host(cl, TS_F32, 1, &D, host + n);
    in[2] = ts_buffer_from_host(cl, TS_F32, 1, &D, host + n + D);
    in[3] = ts_buffer_from_host(cl, TS_F32, rank, s, host + n + 2 * D);
  }
  ts_buffer *of[4] = {NULL}, *od[4] = {NULL};
  if (ef && ed && host && a && b && in[3]) {
    CHECK_OK(ts_execute(ef, in, of));
    CHECK_OK(ts_execute(ed, in, od));
    const char *what[4] = {"y", "dx", "dgamma", "dbeta"};
    for (int o = 0; o < 4 && of[o] && od[o]; o++) {
      int64_t m = o < 2 ? n : D;
      ts_buffer_read(of[o], a, (size_t)m * sizeof *a);
      ts_buffer_read(od[o], b, (size_t)m * sizeof *b);
      double err = 0, ref = 0, tol = o < 2 ? 1e-6 : 2e-6;
      for (int64_t i = 0; i < m; i++) {
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
        ref = fmax(ref, fabs((double)b[i]));
      }
      CHECK(err <= tol * ref, "rank %d, %lld rows, D %lld, %s: max |fused - decomposed| = %.3g, max |ref| = %.3g",
            rank, (long long)(n / D), (long long)D, what[o], err, ref);
    }
  }
  for (int i = 0; i < 4; i++) ts_buffer_free(in[i]), ts_buffer_free(of[i]), ts_buffer_free(od[i]);
  free(host), free(a), free(b);
  ts_executable_free(ef), ts_executable_free(ed);
  ts_graph_free(gf), ts_graph_free(gd);
}

int main(void) {
  rng_state = ts_test_init("test_layernorm", 20261203);
  ts_client *cl = ts_client_new(NULL);
  CHECK(cl != NULL, "client: %s", ts_last_error());
  if (!cl) return ts_test_finish();
  run_case(cl, 1, (int64_t[]){7});            /* one row */
  run_case(cl, 2, (int64_t[]){3, 5});         /* tiny D */
  run_case(cl, 2, (int64_t[]){67, 33});       /* odd rows over three dgamma blocks, odd D */
  run_case(cl, 3, (int64_t[]){4, 129, 256});  /* GPT's (B, T, C), rows over the thread threshold */
  /* the op is differentiable once: a second derivative is a clear error */
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {2, 3}, d = 3;
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s), ga = ts_input(g, "g", TS_F32, 1, &d), dx, ddx;
  ts_tensor l = ts_sum_all(g, ts_mul(g, ts_layer_norm(g, x, ga, ga, 1e-5), x));
  CHECK_OK(ts_grad(g, l, 1, &x, &dx));
  CHECK(ts_grad(g, ts_sum_all(g, dx), 1, &x, &ddx) != 0 && strstr(ts_last_error(), "layer_norm_grad"),
        "second derivative: %s", ts_last_error());
  ts_graph_free(g);
  ts_client_free(cl);
  return ts_test_finish();
}
