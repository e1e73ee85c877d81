/* test_fuse_narrow.c — f32 values exact in bf16 stored as bf16 (src/opt/fuse.c,
 * rewrite 5): ReLU's backward under autocast, g = select(y > 0, convert(dx,
 * f32), 0) with dx and y bf16, read by batch norm's backward three ways (a
 * sum over (N, H, W), a sum of g * x, an elementwise g + x) and converted to
 * bf16 once more. g is never written as f32 — the compiled program's only
 * full-size f32 array is g + x, and g's fused group writes bf16 — and every
 * result equals the arithmetic on g bit for bit (values that sum exactly in
 * any order; -0, +-inf and bf16 subnormals among them). A value that is not
 * exact in bf16 (h = 1.5 g, read by two sums) is not narrowed: its sums are
 * exact too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec_util.h"
#include "harness.h"
#include "tessel/tessel.h"
#include "util/half.h"

enum { N = 2, C = 3, H = 20, W = 30, E = N * C * H * W }; /* 3600 elements: 7 tiles and a partial one */

/* full-size computed nodes (fused ones only: fused_only) of dtype dt in the
 * program text */
static int count_full(const char *prog, const char *dt, bool fused_only) {
  char pat[64];
  snprintf(pat, sizeof pat, ": %s[%d,%d,%d,%d]", dt, N, C, H, W);
  int n = 0;
  for (const char *l = prog; l && *l;) {
    const char *end = strchr(l, '\n');
    size_t len = end ? (size_t)(end - l) : strlen(l);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
    if (line[0] == '%' && !strstr(line, "= input ") && (!fused_only || strstr(line, "= fused(")) && strstr(line, pat))
      n++;
    l = end ? end + 1 : NULL;
  }
  return n;
}

static float dx_value(int i, uint64_t *r) {
  *r = *r * 6364136223846793005ull + 1442695040888963407ull;
  int k = (int)(*r >> 40) % 257 - 128; /* multiples of 1/16 in [-8, 8]: bf16 values that sum exactly */
  if (i % 97 == 5) return -0.0f;
  if (i == 1236) return INFINITY; /* unmasked (y > 0), in channel 2 */
  if (i == 2349) return -INFINITY; /* unmasked, in channel 0 */
  if (i % 211 == 7) return ts_bf16_to_f32(0x0003); /* a bf16 subnormal */
  return (float)k / 16.0f;
}

static void check_bits(const char *what, const float *got, const float *want, int n) {
  int bad = 0, first = -1;
  for (int i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], 4) != 0 && !(isnan(got[i]) && isnan(want[i]))) bad++, first = first < 0 ? i : first;
  CHECK(bad == 0, "%s: %d of %d elements differ (first %d: %.9g, want %.9g)", what, bad, n, first,
        first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0);
}

int main(void) {
  ts_test_init("test_fuse_narrow", 0);
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = ts_graph_new();
  int64_t s4[4] = {N, C, H, W};
  int red[3] = {0, 2, 3};
  ts_tensor dx = ts_input(g, "dx", TS_BF16, 4, s4), y = ts_input(g, "y", TS_BF16, 4, s4);
  ts_tensor x = ts_input(g, "x", TS_F32, 4, s4);
  ts_tensor mask = ts_compare(g, y, ts_scalar(g, TS_BF16, 0.0), TS_CMP_GT);
  ts_tensor gv = ts_select(g, mask, ts_convert(g, dx, TS_F32), ts_scalar(g, TS_F32, 0.0));
  ts_tensor h = ts_mul(g, gv, ts_scalar(g, TS_F32, 1.5)); /* not exact in bf16: stays f32 */
  ts_tensor outs[5] = {ts_reduce(g, gv, TS_REDUCE_SUM, 3, red, false),
                       ts_reduce(g, ts_mul(g, gv, x), TS_REDUCE_SUM, 3, red, false), ts_add(g, gv, x),
                       ts_convert(g, gv, TS_BF16), ts_add(g, ts_reduce(g, h, TS_REDUCE_SUM, 3, red, false),
                                                          ts_reduce(g, ts_mul(g, h, x), TS_REDUCE_SUM, 3, red, false))};
  for (int k = 0; k < 5; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "compile: %s", ts_last_error());
  if (!e) goto out;
  char *prog = ts_executable_to_string(e);
  CHECK(prog != NULL, "program text: %s", ts_last_error());
  if (prog) {
    CHECK(count_full(prog, "f32", false) == 1, "g is written as f32 (expected one full-size f32 array, g + x):\n%s",
          prog);
    CHECK(count_full(prog, "bf16", true) >= 1, "no fused group writes g as bf16:\n%s", prog);
  }
  free(prog);
  static uint16_t hdx[E], hy[E];
  static float hx[E], fg[E];
  uint64_t r = 0x9a11;
  for (int i = 0; i < E; i++) {
    hdx[i] = ts_f32_to_bf16(dx_value(i, &r));
    float yv = (float)(i % 7) - 3.0f; /* > 0 for 3 of 7 */
    hy[i] = ts_f32_to_bf16(i % 13 == 0 ? -0.0f : yv);
    hx[i] = (float)((i * 37) % 33 - 16) / 16.0f;
    fg[i] = ts_bf16_to_f32(hy[i]) > 0 ? ts_bf16_to_f32(hdx[i]) : 0.0f;
  }
  ts_buffer *in[3] = {ts_buffer_from_host(c, TS_BF16, 4, s4, hdx), ts_buffer_from_host(c, TS_BF16, 4, s4, hy),
                      ts_buffer_from_host(c, TS_F32, 4, s4, hx)};
  ts_buffer *ob[5] = {0};
  CHECK(ts_execute(e, in, ob) == 0, "execute: %s", ts_last_error());
  if (ob[0]) {
    double s0[C] = {0}, s1[C] = {0}, sh[C] = {0}, shx[C] = {0};
    static float add[E], got[E];
    static uint16_t gb[E], wb[E];
    for (int i = 0; i < E; i++) {
      int ch = i / (H * W) % C;
      float hv = fg[i] * 1.5f;
      s0[ch] += fg[i], s1[ch] += (double)(fg[i] * hx[i]), sh[ch] += hv, shx[ch] += (double)(hv * hx[i]);
      add[i] = fg[i] + hx[i];
      wb[i] = ts_f32_to_bf16(fg[i]);
    }
    float w0[C], w1[C], w4[C], got_c[C];
    for (int k = 0; k < C; k++) w0[k] = (float)s0[k], w1[k] = (float)s1[k], w4[k] = (float)sh[k] + (float)shx[k];
    ts_buffer_read(ob[0], got_c, sizeof got_c);
    check_bits("sum(g)", got_c, w0, C);
    ts_buffer_read(ob[1], got_c, sizeof got_c);
    check_bits("sum(g * x)", got_c, w1, C);
    ts_buffer_read(ob[2], got, sizeof got);
    check_bits("g + x", got, add, E);
    ts_buffer_read(ob[3], gb, sizeof gb);
    CHECK(memcmp(gb, wb, sizeof gb) == 0, "convert(g, bf16) differs from g's bf16 bits");
    ts_buffer_read(ob[4], got_c, sizeof got_c);
    check_bits("sum(1.5 g) + sum(1.5 g x)", got_c, w4, C);
  }
  exec_free(in, 3, ob, 5, e);
out:
  ts_graph_free(g);
  ts_client_free(c);
  return ts_test_finish();
}
