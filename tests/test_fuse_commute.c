/* test_fuse_commute.c — bf16 roundings moved past a select (src/opt/fuse.c,
 * rewrite 6): ReLU's backward of a rounded residual gradient under autocast,
 * s = select(y > 0, convert(convert(x, bf16), f32), 0), (1) stored as bf16
 * and (2) read by two sums (so stored as bf16 by rewrite 5), and (3)
 * max(convert(convert(x, bf16), f32), 0) stored as bf16. The compiled
 * program rounds x once (no bf16 -> f32 round trip left inside a fused
 * group), and every result equals the arithmetic on round(x) bit for bit
 * (-0, +-inf, NaN, ties and values below bf16's range among the inputs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"
#include "util/half.h"

enum { N = 2, C = 3, H = 20, W = 30, E = N * C * H * W };

/* a round trip inside a fused program: "iK = convert(iJ) : bf16" followed by
 * "iL = convert(iK) : f32" */
static bool has_round_trip(const char *prog) {
  for (const char *l = prog; (l = strstr(l, " = convert(i")); l++) {
    const char *eol = strchr(l, '\n');
    if (!eol || strncmp(eol - 6, ": bf16", 6)) continue;
    const char *next = strchr(eol + 1, '\n');
    if (next && strstr(eol + 1, " = convert(i") < next && !strncmp(next - 5, ": f32", 5)) return true;
  }
  return false;
}

static float x_value(int i) {
  if (i % 101 == 3) return -0.0f;
  if (i == 17) return INFINITY;
  if (i == 29) return NAN;
  if (i % 89 == 5) return 1e-42f; /* an f32 subnormal: rounds to a bf16 subnormal or 0 */
  if (i % 83 == 6) return -1e-45f; /* rounds to -0 in bf16 */
  if (i % 7 == 1) return ts_bf16_to_f32(0x3f81) + ldexpf(1.0f, -8) * 0.5f; /* a tie: to even */
  return sinf((float)i * 0.37f) * 3.0f;
}

int main(void) {
  ts_test_init("test_fuse_commute", 0);
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2});
  ts_graph *g = ts_graph_new();
  int64_t s4[4] = {N, C, H, W};
  int red[3] = {0, 2, 3};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, s4), y = ts_input(g, "y", TS_BF16, 4, s4);
  ts_tensor m = ts_compare(g, y, ts_scalar(g, TS_BF16, 0.0), TS_CMP_GT);
  ts_tensor r = ts_convert(g, ts_convert(g, x, TS_BF16), TS_F32);
  ts_tensor s = ts_select(g, m, r, ts_scalar(g, TS_F32, 0.0));
  ts_tensor xs = ts_mul(g, x, ts_scalar(g, TS_F32, 0.5)); /* a second selection, read by two sums */
  ts_tensor s2 = ts_select(g, m, ts_convert(g, ts_convert(g, xs, TS_BF16), TS_F32), ts_scalar(g, TS_F32, 0.0));
  ts_tensor outs[4] = {ts_convert(g, s, TS_BF16), ts_reduce(g, s2, TS_REDUCE_SUM, 3, red, false),
                       ts_reduce(g, ts_mul(g, s2, s2), TS_REDUCE_SUM, 3, red, false),
                       ts_convert(g, ts_relu(g, r), TS_BF16)};
  for (int k = 0; k < 4; k++) CHECK(ts_graph_add_output(g, outs[k]) == k, "output %d: %s", k, ts_last_error());
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "compile: %s", ts_last_error());
  if (!e) goto out;
  char *prog = ts_executable_to_string(e);
  CHECK(prog && !has_round_trip(prog), "a bf16 -> f32 round trip is left in a fused group:\n%s", prog ? prog : "");
  free(prog);
  static float hx[E], ws2[E];
  static uint16_t hy[E], got[E], want[E], wrelu[E];
  for (int i = 0; i < E; i++) {
    hx[i] = x_value(i);
    hy[i] = ts_f32_to_bf16((float)(i % 5) - 2.0f);
    bool on = ts_bf16_to_f32(hy[i]) > 0;
    want[i] = on ? ts_f32_to_bf16(hx[i]) : 0;
    wrelu[i] = hx[i] > 0 || isnan(hx[i]) ? ts_f32_to_bf16(hx[i]) : 0; /* max propagates NaN; -0 gives +0 */
    ws2[i] = on ? ts_bf16_to_f32(ts_f32_to_bf16(hx[i] * 0.5f)) : 0.0f;
  }
  ts_buffer *in[2] = {ts_buffer_from_host(c, TS_F32, 4, s4, hx), ts_buffer_from_host(c, TS_BF16, 4, s4, hy)};
  ts_buffer *ob[4] = {0};
  CHECK(ts_execute(e, in, ob) == 0, "execute: %s", ts_last_error());
  if (ob[0]) {
    ts_buffer_read(ob[0], got, sizeof got);
    int bad = 0;
    for (int i = 0; i < E; i++) bad += got[i] != want[i] && !(isnan(ts_bf16_to_f32(got[i])) && isnan(ts_bf16_to_f32(want[i])));
    CHECK(bad == 0, "select of the rounded x: %d of %d elements differ", bad, E);
    ts_buffer_read(ob[3], got, sizeof got);
    bad = 0;
    for (int i = 0; i < E; i++)
      if (got[i] != wrelu[i] && bad++ == 0) printf("ReLU element %d: x %.9g, got 0x%04x, want 0x%04x\n", i, hx[i], got[i], wrelu[i]);
    CHECK(bad == 0, "ReLU of the rounded x: %d of %d elements differ", bad, E);
    /* the sums read the selection of round(0.5 x): NaN / inf make them NaN in every channel they reach */
    float sums[2][C], ref[2][C];
    for (int k = 0; k < C; k++) ref[0][k] = ref[1][k] = 0;
    for (int i = 0; i < E; i++) ref[0][i / (H * W) % C] += ws2[i], ref[1][i / (H * W) % C] += ws2[i] * ws2[i];
    ts_buffer_read(ob[1], sums[0], sizeof sums[0]);
    ts_buffer_read(ob[2], sums[1], sizeof sums[1]);
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < C; k++)
        CHECK((isnan(sums[j][k]) && isnan(ref[j][k])) || fabsf(sums[j][k] - ref[j][k]) <= 1e-5f * fabsf(ref[j][k]) + 1e-6f,
              "sum %d channel %d: %.9g, want %.9g", j, k, sums[j][k], ref[j][k]);
  }
  for (int k = 0; k < 2; k++) ts_buffer_free(in[k]);
  for (int k = 0; k < 4; k++) ts_buffer_free(ob[k]);
  ts_executable_free(e);
out:
  ts_graph_free(g);
  ts_client_free(c);
  return ts_test_finish();
}
