/* test_dropout.c — the numbers of inverted dropout (ts_dropout, the op behind
 * ts_nn_dropout):
 *  - the keep rate is 1-p within 5 standard deviations of the binomial
 *    (n = 2^18 elements, p = 0.1, 0.25, 0.5, 0.9; several seeds and keys),
 *    each half of the tensor alone too, and disjoint pairs are both kept at
 *    the rate (1-p)^2 (elements independent, not a repeating pattern);
 *  - every survivor is x * fl(1/(1-p)) exactly (the f32 product of x and the
 *    rounded scale), every other element exactly 0;
 *  - the same (seed, key) gives the same mask, another seed or key another;
 *  - the backward pass uses the forward's mask: d sum(dropout(x)) / dx is
 *    exactly mask * fl(1/(1-p)) (mask read off the forward output), and
 *    d sum(w * dropout(x)) / dx = w * fl(1/(1-p)) on the kept elements;
 *  - dropout partitioned over a mesh (data=2; data=2,model=2; uneven dims)
 *    gives the unpartitioned result bit for bit, forward and gradient;
 *  - p = 0 is the identity, p outside [0, 1) is an error naming p. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

static ts_client *g_clients[5]; /* by device count: 1, 2, 4 */

static ts_client *client(int n) {
  if (!g_clients[n]) g_clients[n] = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = n});
  return g_clients[n];
}

static uint64_t g_rng;
static double runi(void) { /* xorshift64, [0, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * 0x1p-53;
}

/* The test graph: inputs x (rank, shape) f32, w (same) f32, seed i64[];
 * outputs y = dropout(x, p, seed, key), d sum(y)/dx, d sum(w*y)/dx. */
static ts_graph *dropout_graph(int rank, const int64_t *shape, double p, uint64_t key) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, rank, shape);
  ts_tensor w = ts_input(g, "w", TS_F32, rank, shape);
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  ts_tensor y = ts_dropout(g, x, p, seed, key);
  ts_graph_add_output(g, y);
  ts_tensor g1, g2;
  CHECK_OK(ts_grad(g, ts_sum_all(g, y), 1, &x, &g1));
  CHECK_OK(ts_grad(g, ts_sum_all(g, ts_mul(g, w, y)), 1, &x, &g2));
  ts_graph_add_output(g, g1);
  ts_graph_add_output(g, g2);
  return g;
}

/* Runs g on a client of `ndev` devices (inputs x, w sharded as sh, NULL =
 * replicated) and reads the three outputs (n floats each) into out[3]. */
static int run(const ts_graph *g, int ndev, const ts_sharding *sh, const float *x, const float *w, int64_t seed,
               float *out[3]) {
  ts_client *c = client(ndev);
  ts_compile_options co = {0};
  ts_executable *e = ts_compile(c, g, &co);
  if (!e) return -1;
  ts_tensor xt = ts_graph_input(g, 0);
  int rank = ts_tensor_rank(g, xt);
  const int64_t *shape = ts_tensor_shape(g, xt);
  ts_buffer *in[3] = {ts_buffer_from_host_sharded(c, TS_F32, rank, shape, x, sh),
                      ts_buffer_from_host_sharded(c, TS_F32, rank, shape, w, sh),
                      ts_buffer_from_host(c, TS_I64, 0, NULL, &seed)};
  ts_buffer *o[3] = {0};
  int rc = in[0] && in[1] && in[2] ? ts_execute(e, in, o) : -1;
  size_t bytes = (size_t)ts_tensor_numel(g, xt) * sizeof(float);
  for (int k = 0; k < 3 && rc == 0; k++) rc = ts_buffer_read(o[k], out[k], bytes);
  for (int k = 0; k < 3; k++) {
    ts_buffer_free(in[k]);
    ts_buffer_free(o[k]);
  }
  ts_executable_free(e);
  return rc;
}

static float *falloc(int64_t n) { return malloc((size_t)n * sizeof(float) + 8); }

/* Keep rate, exact scaling, backward mask, reproducibility: one device. */
static void test_numbers(void) {
  enum { N = 1 << 18 };
  static const double ps[] = {0.1, 0.25, 0.5, 0.9};
  float *x = falloc(N), *w = falloc(N), *out[3] = {falloc(N), falloc(N), falloc(N)};
  float *first = falloc(N);
  for (int i = 0; i < N; i++) x[i] = (float)(0.5 + runi()), w[i] = (float)(runi() * 2 - 1); /* x != 0 */
  for (int pi = 0; pi < 4; pi++) {
    double p = ps[pi];
    float scale = (float)(1.0 / (1.0 - p)); /* the f32 scale the graph multiplies by */
    for (int rep = 0; rep < 3; rep++) {
      uint64_t key = 11 + (uint64_t)(rep == 2);    /* reps 0, 1: same key, other seed; 2: other key */
      int64_t seed = 1000 + pi * 10 + (rep == 1); /* rep 2: rep 0's seed */
      ts_graph *g = dropout_graph(1, (int64_t[]){N}, p, key);
      int rc = run(g, 1, NULL, x, w, seed, out);
      CHECK(rc == 0, "p=%g: %s", p, ts_last_error());
      ts_graph_free(g);
      if (rc != 0) continue;
      int64_t kept = 0, kept_lo = 0, both = 0, bad_value = 0, bad_grad = 0, bad_wgrad = 0;
      for (int i = 0; i < N; i++) {
        bool k = out[0][i] != 0.0f;
        kept += k;
        kept_lo += k && i < N / 2;
        if (i % 2 == 1) both += k && out[0][i - 1] != 0.0f;
        if (k ? out[0][i] != x[i] * scale : out[0][i] != 0.0f) bad_value++;
        if (out[1][i] != (k ? scale : 0.0f)) bad_grad++;
        if (out[2][i] != (k ? w[i] * scale : 0.0f)) bad_wgrad++;
      }
      /* binomial bounds: |count - n q| <= 5 sqrt(n q (1-q)) */
      double q = 1 - p, q2 = q * q;
      double sd = sqrt(N * q * (1 - q)), sd_half = sqrt(N / 2 * q * (1 - q)), sd2 = sqrt(N / 2 * q2 * (1 - q2));
      CHECK(fabs((double)kept - N * q) <= 5 * sd, "p=%g seed %lld key %llu: kept %lld of %d, expected %.0f +- %.0f",
            p, (long long)seed, (unsigned long long)key, (long long)kept, N, N * q, 5 * sd);
      CHECK(fabs((double)kept_lo - N / 2 * q) <= 5 * sd_half, "p=%g: first half kept %lld of %d, expected %.0f +- %.0f",
            p, (long long)kept_lo, N / 2, N / 2 * q, 5 * sd_half);
      CHECK(fabs((double)(kept - kept_lo) - N / 2 * q) <= 5 * sd_half,
            "p=%g: second half kept %lld of %d, expected %.0f +- %.0f", p, (long long)(kept - kept_lo), N / 2,
            N / 2 * q, 5 * sd_half);
      CHECK(fabs((double)both - N / 2 * q2) <= 5 * sd2, "p=%g: %lld disjoint pairs both kept, expected %.0f +- %.0f",
            p, (long long)both, N / 2 * q2, 5 * sd2);
      CHECK(bad_value == 0, "p=%g: %lld elements are neither 0 nor x * %.9g", p, (long long)bad_value, scale);
      CHECK(bad_grad == 0, "p=%g: d sum(dropout(x))/dx differs from mask * %.9g at %lld elements", p, scale,
            (long long)bad_grad);
      CHECK(bad_wgrad == 0, "p=%g: d sum(w*dropout(x))/dx differs from w * mask * %.9g at %lld elements", p, scale,
            (long long)bad_wgrad);
      /* masks: rep 0 is kept; reps 1 (other seed) and 2 (other key) differ
       * from it in about 2 p (1-p) of the elements */
      if (rep == 0) {
        memcpy(first, out[0], N * sizeof(float));
        /* the same seed and key again: the same mask */
        g = dropout_graph(1, (int64_t[]){N}, p, key);
        rc = run(g, 1, NULL, x, w, seed, out);
        ts_graph_free(g);
        CHECK(rc == 0 && memcmp(first, out[0], N * sizeof(float)) == 0, "p=%g: same seed and key, other mask", p);
      } else {
        int64_t differ = 0;
        for (int i = 0; i < N; i++) differ += (first[i] != 0.0f) != (out[0][i] != 0.0f);
        double m = 2 * p * q, sdm = sqrt(N * m * (1 - m));
        CHECK(fabs((double)differ - N * m) <= 5 * sdm,
              "p=%g: other %s: masks differ in %lld elements, expected %.0f +- %.0f (independent masks)", p,
              rep == 1 ? "seed" : "key", (long long)differ, N * m, 5 * sdm);
      }
    }
  }
  free(x), free(w), free(first);
  for (int k = 0; k < 3; k++) free(out[k]);
}

/* Partitioned dropout equals the unpartitioned one bit for bit. */
static void test_sharded(void) {
  static const struct {
    const char *mesh, *spec;
    int rank;
    int64_t shape[3];
  } cases[] = {
      {"data=2", "data,None", 2, {16, 24}},
      {"data=2", "data,None", 2, {7, 10}}, /* uneven: padded blocks */
      {"data=2,model=2", "data,model", 2, {16, 24}},
      {"data=2,model=2", "data,model", 2, {9, 13}},
      {"data=2,model=2", "model,None,data", 3, {6, 5, 7}},
      {"data=2,model=2", "data+model,None", 2, {10, 3}},
      {"data=4", "None,data", 2, {3, 18}},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    int64_t n = 1;
    for (int d = 0; d < cases[ci].rank; d++) n *= cases[ci].shape[d];
    float *x = falloc(n), *w = falloc(n), *ref[3] = {falloc(n), falloc(n), falloc(n)},
          *got[3] = {falloc(n), falloc(n), falloc(n)};
    for (int64_t i = 0; i < n; i++) x[i] = (float)(0.5 + runi()), w[i] = (float)(runi() * 2 - 1);
    ts_mesh *m = ts_mesh_from_text(cases[ci].mesh);
    ts_partition_spec ps;
    CHECK_OK(ts_partition_spec_parse(m, cases[ci].spec, &ps));
    ts_sharding *sh = ts_sharding_new(m, &ps, cases[ci].rank);
    ts_graph *g = dropout_graph(cases[ci].rank, cases[ci].shape, 0.5, 3);
    int rc = run(g, 1, NULL, x, w, 77, ref);
    CHECK(rc == 0, "%s: 1 device: %s", cases[ci].mesh, ts_last_error());
    /* marked: the partitioned program computes dropout on each device's block */
    ts_mark_sharding(g, ts_graph_input(g, 0), sh);
    rc = rc == 0 ? run(g, (int)ts_mesh_num_devices(m), sh, x, w, 77, got) : -1;
    CHECK(rc == 0, "%s %s: %s", cases[ci].mesh, cases[ci].spec, ts_last_error());
    for (int k = 0; k < 3 && rc == 0; k++) {
      int64_t first_diff = -1, kept = 0;
      for (int64_t i = 0; i < n; i++) {
        if (first_diff < 0 && memcmp(&ref[k][i], &got[k][i], sizeof(float)) != 0) first_diff = i;
        kept += ref[0][i] != 0.0f;
      }
      CHECK(first_diff < 0, "%s spec %s, shape %lldx%lld, output %d: element %lld is %.9g sharded, %.9g on 1 device",
            cases[ci].mesh, cases[ci].spec, (long long)cases[ci].shape[0], (long long)cases[ci].shape[1], k,
            (long long)first_diff, first_diff < 0 ? 0.0 : got[k][first_diff], first_diff < 0 ? 0.0 : ref[k][first_diff]);
      CHECK(kept > 0 && kept < n, "%s: a real mask (%lld of %lld kept)", cases[ci].mesh, (long long)kept, (long long)n);
    }
    ts_graph_free(g);
    ts_sharding_free(sh);
    ts_mesh_free(m);
    free(x), free(w);
    for (int k = 0; k < 3; k++) free(ref[k]), free(got[k]);
  }
}

static void test_edges(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 1, (int64_t[]){4});
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  CHECK(ts_dropout(g, x, 0.0, seed, 1) == x, "p = 0 is the identity");
  CHECK(ts_dropout(g, x, 1.0, seed, 1) == TS_NONE && strstr(ts_last_error(), "p = 1"), "p = 1: '%s'",
        ts_last_error());
  CHECK(ts_dropout(g, x, -0.5, seed, 1) == TS_NONE && strstr(ts_last_error(), "-0.5"), "p = -0.5: '%s'",
        ts_last_error());
  ts_graph_free(g);
}

int main(void) {
  g_rng = ts_test_init("dropout", 20261203) * 2 + 1; /* xorshift: never 0 */
  test_numbers();
  test_sharded();
  test_edges();
  for (int i = 0; i < 5; i++) ts_client_free(g_clients[i]);
  return ts_test_finish();
}
