/* test_bn_fast.c — what makes train-mode batch norm cheap:
 * 1. fused reductions (src/opt/fuse.c, kernels/fused.c + reduce.c): sums and
 *    means of elementwise groups over [R, K, R] (batch norm's N, H, W),
 *    [R, K] and [K, R] layouts, serial and threaded, equal the unfused
 *    program bit for bit, and neither the reduced product nor a cheap chain
 *    with several fusing users (x - B(m); convert from bf16) is materialized;
 * 2. the closed-form backward (src/ad/bn_adjoint.c): ts_grad of
 *    ts_batch_norm_train adds exactly two reductions (sum dy, sum dy*(x-m));
 *    when the batch statistics feed the loss too, autodiff goes node by node
 *    (test_gradcheck checks both against finite differences). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "tessel/tessel.h"

/* Nodes (lines "%N = op(...)", not a fused program's instructions) of op pat. */
static int count(const char *text, const char *pat) {
  int n = 0;
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    const char *eq = p[0] == '%' ? strstr(p, " = ") : NULL, *nl = strchr(p, '\n');
    n += eq && (!nl || eq < nl) && !strncmp(eq + 3, pat, strlen(pat));
  }
  return n;
}

enum { N_OUT = 5 };

static ts_graph *build(int64_t n, int64_t c, int64_t h, int64_t w) {
  ts_graph *g = ts_graph_new();
  int64_t s4[4] = {n, c, h, w};
  int one = 1, nhw[3] = {0, 2, 3}, batch[1] = {0}, chw[3] = {1, 2, 3};
  ts_tensor a = ts_input(g, "a", TS_F32, 4, s4), b = ts_input(g, "b", TS_BF16, 4, s4);
  ts_tensor m = ts_input(g, "m", TS_F32, 1, &c);
  ts_tensor xc = ts_sub(g, a, ts_broadcast_in_dim(g, m, 4, s4, &one)); /* three fusing users */
  ts_tensor bf = ts_convert(g, b, TS_F32);                              /* two: a mean, a mul */
  ts_tensor outs[N_OUT] = {
      ts_reduce(g, ts_mul(g, xc, xc), TS_REDUCE_SUM, 3, nhw, false),                  /* [R, K, R] */
      ts_reduce(g, ts_mul(g, a, a), TS_REDUCE_MEAN, 1, batch, false),                 /* [R, K] */
      ts_reduce(g, ts_mul(g, xc, ts_scalar(g, TS_F32, 2.0)), TS_REDUCE_SUM, 3, chw, false), /* [K, R] */
      ts_reduce(g, bf, TS_REDUCE_MEAN, 3, nhw, false),
      ts_mul(g, bf, ts_broadcast_in_dim(g, m, 4, s4, &one)),
  };
  for (int k = 0; k < N_OUT; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  return g;
}

static void run_fused(int64_t n, int64_t c, int64_t h, int64_t w) {
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = build(n, c, h, w);
  ts_executable *e = ts_compile(cl, g, NULL);
  ts_executable *ref = ts_compile(cl, g, &(ts_compile_options){.no_fusion = true});
  CHECK(e && ref, "compile: %s", ts_last_error());
  if (!e || !ref) goto out;
  char *prog = ts_executable_to_string(e);
  CHECK(prog && count(prog, "reduce(") == 0 && count(prog, "convert(") == 0 && count(prog, "sub(") == 0 &&
            count(prog, "mul(") == 0,
        "a reduction's operand or a cheap chain is materialized:\n%s", prog ? prog : "");
  free(prog);
  int64_t s4[4] = {n, c, h, w}, numel = n * c * h * w;
  float *ha = malloc((size_t)numel * 4), hm[64];
  uint16_t *hb = malloc((size_t)numel * 2);
  uint64_t r = 0x5eed + (uint64_t)numel;
#define RND() ((float)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / (float)(1 << 24) - 0.3f)
  for (int64_t i = 0; i < numel; i++) {
    ha[i] = RND();
    float f = RND();
    uint32_t u;
    memcpy(&u, &f, 4);
    hb[i] = (uint16_t)(u >> 16);
  }
  for (int64_t i = 0; i < c; i++) hm[i] = RND();
  ts_buffer *in[3] = {ts_buffer_from_host(cl, TS_F32, 4, s4, ha), ts_buffer_from_host(cl, TS_BF16, 4, s4, hb),
                      ts_buffer_from_host(cl, TS_F32, 1, &c, hm)};
  ts_buffer *o1[N_OUT] = {0}, *o2[N_OUT] = {0};
  CHECK(ts_execute(e, in, o1) == 0 && ts_execute(ref, in, o2) == 0, "execute: %s", ts_last_error());
  for (int k = 0; k < N_OUT && o1[0] && o2[0]; k++) {
    size_t bytes = ts_buffer_bytes(o1[k]);
    void *x = malloc(bytes), *y = malloc(bytes);
    ts_buffer_read(o1[k], x, bytes);
    ts_buffer_read(o2[k], y, bytes);
    CHECK(memcmp(x, y, bytes) == 0, "shape (%lld,%lld,%lld,%lld) output %d differs from the unfused program",
          (long long)n, (long long)c, (long long)h, (long long)w, k);
    free(x), free(y);
  }
  for (int k = 0; k < N_OUT; k++) {
    if (o1[k]) ts_buffer_free(o1[k]);
    if (o2[k]) ts_buffer_free(o2[k]);
  }
  for (int k = 0; k < 3; k++) ts_buffer_free(in[k]);
  free(ha), free(hb);
out:
  ts_executable_free(e);
  ts_executable_free(ref);
  ts_graph_free(g);
  ts_client_free(cl);
}

static int reduces(const ts_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == TS_OP_REDUCE;
  return n;
}

/* ts_grad of sum(bn(x) * w) (+ sum(var) when stats_in_loss). */
static void grad_structure(bool stats_in_loss) {
  ts_graph *g = ts_graph_new();
  int64_t s4[4] = {4, 3, 5, 5}, c = 3;
  ts_tensor x = ts_input(g, "x", TS_F32, 4, s4), w = ts_input(g, "w", TS_F32, 4, s4);
  ts_tensor gamma = ts_input(g, "gamma", TS_F32, 1, &c), beta = ts_input(g, "beta", TS_F32, 1, &c);
  ts_tensor mean, var;
  ts_tensor y = ts_batch_norm_train(g, x, gamma, beta, 1e-5, &mean, &var);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, y, w));
  if (stats_in_loss) loss = ts_add(g, loss, ts_sum_all(g, var));
  int before = reduces(g);
  ts_tensor wrt[3] = {x, gamma, beta}, grads[3];
  CHECK(ts_grad(g, loss, 3, wrt, grads) == 0, "grad: %s", ts_last_error());
  int added = reduces(g) - before;
  if (stats_in_loss)
    CHECK(added > 2, "the statistics feed the loss: node by node expected, but the gradient added %d reductions", added);
  else
    CHECK(added == 2, "closed form: the gradient should add sum(dy) and sum(dy*(x-m)), added %d", added);
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_bn_fast", 0);
  run_fused(2, 3, 7, 11);  /* 462 elements: serial, one partial tile */
  run_fused(8, 7, 24, 25); /* 33600: threaded, 65 tiles and a partial one */
  run_fused(72, 13, 6, 6); /* 33696: threaded, runs of 36 (113 a source call), 936 runs split 468 / 468 */
  grad_structure(false);
  grad_structure(true);
  return ts_test_finish();
}
