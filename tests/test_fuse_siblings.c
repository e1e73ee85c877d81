/* test_fuse_siblings.c — sibling reductions read in one pass
 * (src/opt/fuse_siblings.c, the stacked fused reduction of
 * src/kernels/fused.c and reduce.c): batch norm's gradient sums
 *   g = select(y > 0, d, 0), s1 = sum(g), s2 = sum(g * (x - B(m)))
 * (g also read by a third pass, so it is written once) become one FUSED
 * node with a (2, ...) result and no plain reduce of g remains. Every
 * reduction layout reduce.c folds a source in ([R, K, R] with short runs
 * and with runs of 4096, [R, K] channels-last, [K, R] rows), on 1 and 2
 * threads, gives the same bits as the unfused graph. A sum that reads its
 * sibling's result (a variance after its mean) is not merged. */
#include <stdlib.h>
#include <string.h>

#include "exec_util.h"
#include "harness.h"
#include "tessel/tessel.h"

typedef struct {
  const char *name;
  int rank;
  int64_t shape[4];
  int ch;     /* the kept (channel) dim */
  bool dep;   /* the second sum reads the first's result (not merged) */
} case_t;

static const case_t cases[] = {
    {"nchw 7x7", 4, {8, 16, 7, 7}, 1, false},
    {"nchw 64x64", 4, {2, 8, 64, 64}, 1, false},
    {"nhwc", 4, {4, 5, 5, 24}, 3, false},
    {"rows", 3, {6, 10, 300}, 0, false},
    {"mean then variance", 4, {8, 16, 7, 7}, 1, true},
};

/* The graph: outputs s1, s2, dx (rows: the kept dims are 0 and 1, summed over 2). */
static ts_graph *build(const case_t *k) {
  ts_graph *g = ts_graph_new();
  int rows = k->rank == 3, nd = 0, dims[4], keep[2];
  int64_t cs[2];
  int nk = 0;
  for (int d = 0; d < k->rank; d++)
    if (rows ? d == 2 : d != k->ch) dims[nd++] = d;
    else cs[nk] = k->shape[d], keep[nk++] = d;
  ts_tensor y = ts_input(g, "y", TS_F32, k->rank, k->shape), d = ts_input(g, "d", TS_F32, k->rank, k->shape);
  ts_tensor x = ts_input(g, "x", TS_F32, k->rank, k->shape), m = ts_input(g, "m", TS_F32, nk, cs);
  ts_tensor zero = ts_scalar(g, TS_F32, 0.0);
  ts_tensor gg = ts_select(g, ts_compare(g, y, zero, TS_CMP_GT), d, zero);
  ts_tensor s1 = ts_reduce(g, gg, TS_REDUCE_SUM, nd, dims, false);
  ts_tensor c = k->dep ? s1 : m;
  ts_tensor xc = ts_sub(g, x, ts_broadcast_in_dim(g, c, k->rank, k->shape, keep));
  ts_tensor s2 = ts_reduce(g, ts_mul(g, gg, xc), TS_REDUCE_SUM, nd, dims, false);
  ts_tensor dx = ts_mul(g, ts_sub(g, gg, xc), ts_scalar(g, TS_F32, 0.5));
  ts_tensor outs[3] = {s1, s2, dx};
  for (int o = 0; o < 3; o++) CHECK(ts_graph_add_output(g, outs[o]) == o, "output %d: %s", o, ts_last_error());
  return g;
}

/* Runs k's graph (fusion on or off) into res[0..3) (malloc'd); the program text into *prog when asked. */
static void run(const case_t *k, int threads, bool fuse, const float *const *host, float **res, char **prog) {
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = threads});
  ts_graph *g = build(k);
  ts_compile_options o = {0};
  o.no_fusion = !fuse;
  ts_executable *e = ts_compile(c, g, &o);
  CHECK(e != NULL, "%s: compile: %s", k->name, ts_last_error());
  if (e) {
    if (prog) *prog = ts_executable_to_string(e);
    ts_buffer *in[4], *ob[3] = {0};
    for (int i = 0; i < 4; i++) {
      int64_t cs[2];
      int nk = 0;
      for (int d = 0; d < k->rank; d++)
        if (k->rank == 3 ? d != 2 : d == k->ch) cs[nk++] = k->shape[d];
      in[i] = i < 3 ? ts_buffer_from_host(c, TS_F32, k->rank, k->shape, host[i])
                    : ts_buffer_from_host(c, TS_F32, nk, cs, host[3]);
    }
    CHECK(ts_execute(e, in, ob) == 0, "%s: execute: %s", k->name, ts_last_error());
    for (int o = 0; o < 3 && ob[0]; o++) {
      size_t bytes = ts_buffer_bytes(ob[o]);
      res[o] = malloc(bytes);
      ts_buffer_read(ob[o], res[o], bytes);
    }
    exec_free(in, 4, ob, 3, e);
  }
  ts_graph_free(g);
  ts_client_free(c);
}

static void check_case(const case_t *k, int threads) {
  int64_t n = 1, nc = 1;
  for (int d = 0; d < k->rank; d++) n *= k->shape[d];
  for (int d = 0; d < k->rank; d++)
    if (k->rank == 3 ? d != 2 : d == k->ch) nc *= k->shape[d];
  float *h[4];
  uint64_t r = 0x51b + (uint64_t)threads;
#define RND() ((double)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / (double)(1 << 24) - 0.5)
  for (int i = 0; i < 4; i++) {
    int64_t m = i < 3 ? n : nc;
    h[i] = malloc((size_t)m * 4);
    for (int64_t j = 0; j < m; j++) h[i][j] = (float)RND() * (i == 2 ? 3.0f : 1.0f);
  }
  float *a[3] = {0}, *b[3] = {0};
  char *prog = NULL;
  run(k, threads, true, (const float *const *)h, a, &prog);
  run(k, threads, false, (const float *const *)h, b, NULL);
  bool stacked = prog && strstr(prog, "kind=sum") && strstr(prog, ": f32[2,");
  bool plain = prog && strstr(prog, "= reduce(");
  if (k->dep)
    CHECK(!stacked, "%s: a sum that reads its sibling's result was stacked:\n%s", k->name, prog ? prog : "");
  else
    CHECK(stacked && !plain, "%s: the two sums are not one stacked fused reduction:\n%s", k->name, prog ? prog : "");
  int64_t cnt[3] = {nc, nc, n};
  for (int o = 0; o < 3 && a[0] && b[0]; o++)
    CHECK(!memcmp(a[o], b[o], (size_t)cnt[o] * 4), "%s, %d threads: output %d differs from the unfused graph",
          k->name, threads, o);
  for (int i = 0; i < 4; i++) free(h[i]);
  for (int o = 0; o < 3; o++) free(a[o]), free(b[o]);
  free(prog);
}

int main(void) {
  ts_test_init("test_fuse_siblings", 0);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int t = 1; t <= 2; t++) check_case(&cases[i], t);
  return ts_test_finish();
}
