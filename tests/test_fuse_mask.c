/* test_fuse_mask.c — the cross-entropy's label mask inside fused programs
 * (src/opt/fuse.c mask_copy_rewrite, src/kernels/fused.c broadcast_tile):
 * hit = iota(C) == label(N) over (N, C), read by two selects (the loss's pick
 * and its gradient's), is recomputed inside each of them: the compiled
 * program holds no bool (N, C) array. The labels (i32, and i64) are
 * broadcast along C > the kernel's 512-element tile (runs of one source
 * element that cross tiles), some labels are out of range (no hit); a bf16
 * per-row vector broadcast the same way is read exactly. Every result equals
 * the unfused arithmetic bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "exec_util.h"
#include "harness.h"
#include "tessel/tessel.h"

enum { N = 13, C = 700 }; /* 9100 elements: 17 tiles and a partial one */

static void run(ts_dtype ldt) {
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = ts_graph_new();
  int64_t s2[2] = {N, C}, n1 = N, c1 = C;
  int rows[1] = {0}, cols[1] = {1};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s2), y = ts_input(g, "y", ldt, 1, &n1), w = ts_input(g, "w", TS_F32, 1, &n1);
  ts_tensor cls = ts_broadcast_in_dim(g, ts_iota(g, ldt, 1, &c1, 0), 2, s2, cols);
  ts_tensor hit = ts_compare(g, cls, ts_broadcast_in_dim(g, y, 2, s2, rows), TS_CMP_EQ);
  ts_tensor o1 = ts_select(g, hit, x, ts_scalar(g, TS_F32, 0.0));
  ts_tensor o2 = ts_select(g, hit, ts_broadcast_in_dim(g, w, 2, s2, rows), ts_mul(g, x, ts_scalar(g, TS_F32, 2.0)));
  ts_tensor wb = ts_broadcast_in_dim(g, ts_convert(g, w, TS_BF16), 2, s2, rows);
  ts_tensor o3 = ts_add(g, x, ts_convert(g, wb, TS_F32));
  ts_tensor outs[3] = {o1, o2, o3};
  for (int k = 0; k < 3; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "compile: %s", ts_last_error());
  if (!e) goto out;
  char *prog = ts_executable_to_string(e);
  CHECK(prog && !strstr(prog, ": bool["), "%s: the (N, C) mask is materialized:\n%s", ts_dtype_name(ldt), prog);
  free(prog);
  static float hx[N * C];
  float hw[N];
  int64_t hy[N];
  uint64_t r = 0x5eed + (uint64_t)ldt;
#define RND() ((double)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / (double)(1 << 24) - 0.5)
  for (int i = 0; i < N * C; i++) hx[i] = (float)RND();
  for (int i = 0; i < N; i++) {
    hw[i] = (float)(i - 6) / 8.0f; /* exact in bf16 */
    hy[i] = i % 5 == 4 ? -1 : i == 3 ? C - 1 : (int64_t)((RND() + 0.5) * C) % C;
  }
  void *ybuf = malloc(N * 8);
  for (int i = 0; i < N; i++)
    if (ldt == TS_I32) ((int32_t *)ybuf)[i] = (int32_t)hy[i];
    else ((int64_t *)ybuf)[i] = hy[i];
  ts_buffer *in[3] = {ts_buffer_from_host(c, TS_F32, 2, s2, hx), ts_buffer_from_host(c, ldt, 1, &n1, ybuf),
                      ts_buffer_from_host(c, TS_F32, 1, &n1, hw)};
  free(ybuf);
  ts_buffer *ob[3] = {0};
  CHECK(ts_execute(e, in, ob) == 0, "execute: %s", ts_last_error());
  static float res[N * C];
  for (int k = 0; k < 3 && ob[0]; k++) {
    ts_buffer_read(ob[k], res, sizeof res);
    int64_t bad = 0, hits = 0;
    for (int i = 0; i < N * C; i++) {
      int row = i / C, col = i % C;
      bool h = hy[row] == col;
      hits += h;
      float want = k == 0 ? (h ? hx[i] : 0.0f) : k == 1 ? (h ? hw[row] : hx[i] * 2.0f) : hx[i] + hw[row];
      bad += memcmp(&res[i], &want, 4) != 0;
    }
    CHECK(bad == 0, "%s labels, output %d: %lld of %d elements differ from the unfused arithmetic", ts_dtype_name(ldt),
          k, (long long)bad, N * C);
    if (k == 0) CHECK(hits == N - 2, "%lld hits (expected %d: 2 labels out of range)", (long long)hits, N - 2);
  }
  exec_free(in, 3, ob, 3, e);
out:
  ts_graph_free(g);
  ts_client_free(c);
}

int main(void) {
  ts_test_init("test_fuse_mask", 0);
  run(TS_I32);
  run(TS_I64);
  return ts_test_finish();
}
