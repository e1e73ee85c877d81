/* test_attention.c — the fused causal-attention op (kernels/attention.c)
 * against the decomposed composite (ts_causal_attention_decomposed: dot,
 * mask, softmax, dot), forward and the three gradients dq, dk, dv, in f32.
 * ts_causal_attention packs q, k, v into the (B, T, 3, H, Dh) the fused op
 * reads (ts_causal_attention_qkv), so this covers the op's strided reads
 * and writes too.
 *
 * Each case builds L = sum(attention(q, k, v) * c) with seeded random q, k,
 * v in (-2, 2) and cotangent c, outputs y and ts_grad(L, {q, k, v}) for both
 * forms, and checks every output normwise: max |fused - decomposed| /
 * max |decomposed| <= 2e-6. Shapes cover odd T, T inside one 64-row block
 * and across three, one and several heads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

#define TOL 2e-6

static uint64_t rng_state;
static double uniform(double lo, double hi) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return lo + (hi - lo) * ((double)(z >> 11) * 0x1.0p-53);
}

/* Outputs y, dq, dk, dv of one form. */
static ts_executable *build(ts_client *cl, const int64_t *s, bool fused, ts_graph **gout) {
  ts_graph *g = ts_graph_new();
  *gout = g;
  ts_tensor x[3] = {ts_input(g, "q", TS_F32, 4, s), ts_input(g, "k", TS_F32, 4, s), ts_input(g, "v", TS_F32, 4, s)};
  ts_tensor c = ts_input(g, "c", TS_F32, 4, s);
  double scale = 1.0 / sqrt((double)s[3]);
  ts_tensor y = fused ? ts_causal_attention(g, x[0], x[1], x[2], scale)
                      : ts_causal_attention_decomposed(g, x[0], x[1], x[2], scale);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, y, c)), d[3];
  if (loss == TS_NONE || ts_grad(g, loss, 3, x, d) || ts_graph_add_output(g, y) < 0) return NULL;
  for (int i = 0; i < 3; i++)
    if (ts_graph_add_output(g, d[i]) < 0) return NULL;
  return ts_compile(cl, g, NULL);
}

static void run_case(ts_client *cl, int64_t B, int64_t H, int64_t T, int64_t D) {
  int64_t s[4] = {B, H, T, D}, n = B * H * T * D;
  ts_graph *gf = NULL, *gd = NULL;
  ts_executable *ef = build(cl, s, true, &gf), *ed = build(cl, s, false, &gd);
  CHECK(ef && ed, "compile (%lld, %lld, %lld, %lld): %s", (long long)B, (long long)H, (long long)T, (long long)D,
        ts_last_error());
  float *host = malloc((size_t)(4 * n) * sizeof *host), *a = malloc((size_t)n * sizeof *a),
        *b = malloc((size_t)n * sizeof *b);
  ts_buffer *in[4] = {NULL};
  for (int64_t i = 0; i < 4 * n; i++) host[i] = (float)uniform(-2, 2);
  for (int i = 0; i < 4 && host; i++) in[i] = ts_buffer_from_host(cl, TS_F32, 4, s, host + i * n);
  ts_buffer *of[4] = {NULL}, *od[4] = {NULL};
  if (ef && ed && host && a && b && in[3]) {
    CHECK_OK(ts_execute(ef, in, of));
    CHECK_OK(ts_execute(ed, in, od));
    const char *what[4] = {"y", "dq", "dk", "dv"};
    for (int o = 0; o < 4 && of[o] && od[o]; o++) {
      ts_buffer_read(of[o], a, (size_t)n * sizeof *a);
      ts_buffer_read(od[o], b, (size_t)n * sizeof *b);
      double err = 0, ref = 0;
      for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
        ref = fmax(ref, fabs((double)b[i]));
      }
      CHECK(err <= TOL * ref, "(%lld, %lld, %lld, %lld) %s: max |fused - decomposed| = %.3g, max |ref| = %.3g",
            (long long)B, (long long)H, (long long)T, (long long)D, what[o], err, ref);
    }
  }
  for (int i = 0; i < 4; i++) ts_buffer_free(in[i]), ts_buffer_free(of[i]), ts_buffer_free(od[i]);
  free(host), free(a), free(b);
  ts_executable_free(ef), ts_executable_free(ed);
  ts_graph_free(gf), ts_graph_free(gd);
}

int main(void) {
  rng_state = ts_test_init("test_attention", 20261203);
  ts_client *cl = ts_client_new(NULL);
  CHECK(cl != NULL, "client: %s", ts_last_error());
  if (!cl) return ts_test_finish();
  run_case(cl, 1, 1, 1, 4);    /* one query, one key (dq = dk = 0) */
  run_case(cl, 2, 3, 7, 8);    /* odd T inside one block */
  run_case(cl, 2, 4, 131, 16); /* odd T over three blocks, several heads */
  run_case(cl, 1, 2, 64, 64);  /* exactly one block, GPT's head size */
  /* the op is differentiable once: a second derivative is a clear error */
  ts_graph *g = ts_graph_new();
  int64_t s[4] = {1, 1, 3, 2};
  ts_tensor q = ts_input(g, "q", TS_F32, 4, s), dq, ddq;
  ts_tensor l = ts_sum_all(g, ts_causal_attention(g, q, q, q, 1.0));
  CHECK_OK(ts_grad(g, l, 1, &q, &dq));
  CHECK(ts_grad(g, ts_sum_all(g, dq), 1, &q, &ddq) != 0 && strstr(ts_last_error(), "causal_attention_grad"),
        "second derivative: %s", ts_last_error());
  ts_graph_free(g);
  ts_client_free(cl);
  return ts_test_finish();
}
