/* test_fuse_broadcast.c — broadcasts read by index inside fused programs
 * (src/opt/fuse.c indexed_broadcast, the BROADCAST instruction of
 * src/kernels/fused.c): a bias (D) along the last dim, per-row statistics
 * (A, B) along the last dim, a bool mask (B, D) over the leading dim, a
 * per-batch vector (A) over the trailing dims, a broadcast scalar, and a
 * single mul reading one (a group of one op). Results equal the unfused
 * arithmetic exactly (f32 and f64), at sizes that are not multiples of the
 * kernel's 512-element tile, and none of these broadcasts is materialized;
 * a broadcast that is not a contiguous block ((A, 1, D) -> (A, B, D)) still is.
 * run_rows_bf16: per-row terms over rows of whole tiles (the kernel reuses a
 * broadcast tile within a row) into a bf16 result (rounded once, straight into
 * the output), bit-exact. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec_util.h"
#include "harness.h"
#include "tessel/tessel.h"

enum { A = 7, Bd = 37, D = 29 }; /* A*B*D = 7511: 14 tiles and a partial one */

static void run(ts_dtype dt) {
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = ts_graph_new();
  int64_t s3[3] = {A, Bd, D}, s2[2] = {A, Bd}, m2[2] = {Bd, D}, a1 = A, d1 = D, u3[3] = {A, 1, D};
  ts_tensor x = ts_input(g, "x", dt, 3, s3), v = ts_input(g, "v", dt, 1, &d1), st = ts_input(g, "s", dt, 2, s2);
  ts_tensor w = ts_input(g, "w", dt, 1, &a1), mm = ts_input(g, "m", dt, 2, m2), u = ts_input(g, "u", dt, 3, u3);
  int last[1] = {2}, lead[2] = {0, 1}, tail[2] = {1, 2}, first[1] = {0}, all3[3] = {0, 1, 2};
  ts_tensor vb = ts_broadcast_in_dim(g, v, 3, s3, last), sb = ts_broadcast_in_dim(g, st, 3, s3, lead);
  ts_tensor mask = ts_compare(g, mm, ts_scalar(g, dt, 0.0), TS_CMP_GT);
  ts_tensor mb = ts_broadcast_in_dim(g, mask, 3, s3, tail), wb = ts_broadcast_in_dim(g, w, 3, s3, first);
  ts_tensor ub = ts_broadcast_in_dim(g, u, 3, s3, all3);
  ts_tensor o1 = ts_add(g, ts_mul(g, x, vb), sb);                               /* (x * v + s) */
  ts_tensor o2 = ts_select(g, mb, ts_sub(g, x, wb), ts_scalar(g, dt, -1.5));    /* mask ? x - w : -1.5 */
  ts_tensor o3 = ts_mul(g, x, ts_broadcast_in_dim(g, v, 3, s3, last));         /* one op */
  ts_tensor o4 = ts_add(g, ts_mul(g, x, ub), ts_scalar(g, dt, 2.0));            /* not a block: materialized */
  ts_tensor outs[4] = {o1, o2, o3, o4};
  for (int k = 0; k < 4; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "compile: %s", ts_last_error());
  if (!e) goto out;
  char *prog = ts_executable_to_string(e);
  int materialized = 0;
  for (const char *p = prog; p && (p = strstr(p, "= broadcast(%")); p++) materialized++;
  CHECK(materialized == 1, "%d broadcasts materialized (expected 1, the (A,1,D) one):\n%s", materialized, prog);
  free(prog);
  size_t es = ts_dtype_size(dt);
  double hx[A * Bd * D], hv[D], hs[A * Bd], hw[A], hm[Bd * D], hu[A * D];
  uint64_t r = 0x1234 + (uint64_t)dt;
#define RND() ((double)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / (double)(1 << 24) - 0.5)
  for (int i = 0; i < A * Bd * D; i++) hx[i] = RND();
  for (int i = 0; i < D; i++) hv[i] = RND();
  for (int i = 0; i < A * Bd; i++) hs[i] = RND();
  for (int i = 0; i < A; i++) hw[i] = RND();
  for (int i = 0; i < Bd * D; i++) hm[i] = RND();
  for (int i = 0; i < A * D; i++) hu[i] = RND();
  double *hosts[6] = {hx, hv, hs, hw, hm, hu};
  int64_t ns[6] = {A * Bd * D, D, A * Bd, A, Bd * D, A * D};
  ts_buffer *in[6];
  const int64_t *shapes[6] = {s3, &d1, s2, &a1, m2, u3};
  int ranks[6] = {3, 1, 2, 1, 2, 3};
  for (int k = 0; k < 6; k++) {
    void *buf = malloc((size_t)ns[k] * es);
    for (int64_t i = 0; i < ns[k]; i++)
      if (dt == TS_F32) ((float *)buf)[i] = (float)hosts[k][i];
      else ((double *)buf)[i] = hosts[k][i];
    in[k] = ts_buffer_from_host(c, dt, ranks[k], shapes[k], buf);
    free(buf);
  }
  ts_buffer *ob[4] = {0};
  CHECK(ts_execute(e, in, ob) == 0, "execute: %s", ts_last_error());
  int64_t n = A * Bd * D;
  void *res = malloc((size_t)n * es);
  for (int k = 0; k < 4 && ob[0]; k++) {
    ts_buffer_read(ob[k], res, (size_t)n * es);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t a = i / (Bd * D), b = (i / D) % Bd, d = i % D;
      double want, got = dt == TS_F32 ? ((float *)res)[i] : ((double *)res)[i];
      /* products through volatile: no FMA contraction on the host side (the
       * program rounds after every op) */
      if (dt == TS_F32) {
        float fx = (float)hx[i];
        volatile float p0 = fx * (float)hv[d], p3 = fx * (float)hu[a * D + d];
        want = k == 0   ? (double)(p0 + (float)hs[a * Bd + b])
               : k == 1 ? ((float)hm[b * D + d] > 0 ? (double)(fx - (float)hw[a]) : -1.5)
               : k == 2 ? (double)p0
                        : (double)(p3 + 2.0f);
      } else {
        volatile double p0 = hx[i] * hv[d], p3 = hx[i] * hu[a * D + d];
        want = k == 0   ? p0 + hs[a * Bd + b]
               : k == 1 ? (hm[b * D + d] > 0 ? hx[i] - hw[a] : -1.5)
               : k == 2 ? p0
                        : p3 + 2.0;
      }
      bad += got != want;
    }
    CHECK(bad == 0, "%s output %d: %lld of %lld elements differ from the unfused arithmetic", ts_dtype_name(dt), k,
          (long long)bad, (long long)n);
  }
  free(res);
  exec_free(in, 6, ob, 4, e);
out:
  ts_graph_free(g);
  ts_client_free(c);
}

/* Round to nearest even, as bf16 bits (the inputs here are finite). */
static uint16_t bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A per-row term over rows of R >= 2 tiles (per-channel batch-norm terms over
 * an image: each tile reads one element, tiles in a row reuse the scratch
 * tile) into a bf16 result (the program's last instruction converts, written
 * rounded once into the output): (x - w[a]) * 0.37 -> bf16, bit-exact. */
static void run_rows_bf16(void) {
  enum { AR = 5, R = 1536 }; /* 3 tiles a row: uniform tiles of one row, then of the next */
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = ts_graph_new();
  int64_t s2[2] = {AR, R}, a1 = AR;
  int first[1] = {0};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s2), w = ts_input(g, "w", TS_F32, 1, &a1);
  ts_tensor d = ts_sub(g, x, ts_broadcast_in_dim(g, w, 2, s2, first));
  CHECK(ts_graph_add_output(g, ts_convert(g, ts_mul(g, d, ts_scalar(g, TS_F32, 0.37)), TS_BF16)) == 0, "output: %s",
        ts_last_error());
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "compile: %s", ts_last_error());
  if (!e) goto out;
  static float hx[AR * R];
  float hw[AR];
  uint64_t r = 0x77;
  for (int i = 0; i < AR * R; i++) hx[i] = (float)RND();
  for (int i = 0; i < AR; i++) hw[i] = (float)RND();
  ts_buffer *in[2] = {ts_buffer_from_host(c, TS_F32, 2, s2, hx), ts_buffer_from_host(c, TS_F32, 1, &a1, hw)}, *ob[1] = {0};
  CHECK(ts_execute(e, in, ob) == 0, "execute: %s", ts_last_error());
  static uint16_t res[AR * R];
  int64_t bad = 0;
  if (ob[0]) {
    ts_buffer_read(ob[0], res, sizeof res);
    for (int i = 0; i < AR * R; i++) {
      volatile float t = hx[i] - hw[i / R];
      bad += res[i] != bf16_rne(t * 0.37f);
    }
    ts_buffer_free(ob[0]);
  }
  CHECK(bad == 0, "rows -> bf16: %lld of %d elements differ from the unfused arithmetic", (long long)bad, AR * R);
  for (int k = 0; k < 2; k++) ts_buffer_free(in[k]);
  ts_executable_free(e);
out:
  ts_graph_free(g);
  ts_client_free(c);
}

int main(void) {
  ts_test_init("test_fuse_broadcast", 0);
  run(TS_F32);
  run(TS_F64);
  run_rows_bf16();
  return ts_test_finish();
}
