/* test_fused_rerun.c — the fast loops' exact rerun (src/kernels/fused_fast.c):
 * a chunk runs with plain + and * and again with the NaN-ordered add/mul only
 * when one of its results is NaN; a batch-norm apply runs a channel run in
 * one pass (fused_apply.c) unless a per-channel scale is NaN, then in chunks.
 * Checks that exactly the chunks with a NaN result rerun (tk_fast_reruns;
 * none for finite inputs, nor for NaNs in x alone), with the
 * interpreter's bits, also in place; and that a result written over a
 * per-channel input (numel == channels) still reruns from the inputs as they
 * were: there a NaN residual's payload, which the rerun would otherwise see
 * through the overwritten mean and truncate by the bf16 rounding, must come
 * out whole. A channel-innermost (NHWC) apply runs in one call
 * (tk_fast_cl_calls) with no rerun, and in chunks of 256 where a scale is
 * NaN. ReLU's gradient (fused_mask.c) and batch norm's reduced terms
 * (fused_centered.c) have no rerun: with NaNs they keep the interpreter's
 * bits in one pass, also in place. test_fused_fast
 * compares the bits on random inputs. */
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

enum { MAX_INS = 16 };

typedef struct {
  ts_fused_instr ins[MAX_INS];
  int n;
} prog;

static int32_t emit(prog *P, ts_op op, ts_dtype dt, int32_t a, int32_t b, double v) {
  P->ins[P->n] = (ts_fused_instr){.op = op, .dtype = dt, .a = a, .b = b, .value = v};
  return P->n++;
}
static int32_t bin(prog *P, ts_op op, int32_t a, int32_t b) { return emit(P, op, TS_F32, a, b, 0); }
static int32_t bc(prog *P, int k, int64_t inner) { return emit(P, TS_OP_BROADCAST, TS_F32, -k - 1, 0, (double)inner); }

/* ((x - m) * a) * g + b (inputs 0 .. 4), optionally rounded to bf16, optionally + r (input 5). */
static void bn_apply(prog *P, int64_t inner, bool round, bool resid) {
  int32_t t = bin(P, TS_OP_SUB, -1, bc(P, 1, inner));
  t = bin(P, TS_OP_MUL, t, bc(P, 2, inner));
  t = bin(P, TS_OP_MUL, t, bc(P, 3, inner));
  t = bin(P, TS_OP_ADD, t, bc(P, 4, inner));
  if (round) t = emit(P, TS_OP_CONVERT, TS_F32, emit(P, TS_OP_CONVERT, TS_BF16, t, 0, 0), 0, 0);
  if (resid) bin(P, TS_OP_ADD, t, -6);
}

static float nan_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Runs P (n_ext f32 inputs of ne[k] elements) on one thread with the fast
 * loops into out, the interpreter into ref; whether their bits agree. */
static bool same_as_interpreter(prog *P, int n_ext, const int64_t *ne, float **in, float *out, int64_t numel) {
  ts_fused p = {P->n, P->ins};
  ts_dtype dt[8];
  for (int k = 0; k < n_ext; k++) dt[k] = TS_F32;
  tk_fast F;
  CHECK(tk_fast_match(&p, dt, ne, TS_F32, numel, &F), "the program has no fast path");
  float ref[1200];
  ts_kctx ctx = {.num_threads = 1};
  tk_fused_set_fast(false);
  CHECK_OK(tk_program_run(&p, n_ext, dt, ne, (tk_in)in, ref, TS_F32, numel, &ctx));
  tk_fused_set_fast(true);
  CHECK_OK(tk_program_run(&p, n_ext, dt, ne, (tk_in)in, out, TS_F32, numel, &ctx));
  return memcmp(ref, out, (size_t)numel * 4) == 0;
}

/* 2 images x 2 channels x 300: 8 chunks (256 + 44 per run). */
static void counts(void) {
  enum { NCH = 2, INNER = 300, NUMEL = 2 * NCH * INNER };
  static float x[NUMEL], keep[NUMEL], out[NUMEL], c[4][NCH];
  float *in[5] = {x, c[0], c[1], c[2], c[3]};
  int64_t ne[5] = {NUMEL, NCH, NCH, NCH, NCH};
  for (int i = 0; i < NUMEL; i++) x[i] = (float)(i % 97) * 0.25f - 12.f;
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < NCH; i++) c[k][i] = 0.5f + (float)(k + i);
  prog P = {.n = 0};
  bn_apply(&P, INNER, false, false);
  int64_t r0 = tk_fast_reruns();
  CHECK(same_as_interpreter(&P, 5, ne, in, out, NUMEL), "finite inputs: bits differ");
  CHECK(tk_fast_reruns() == r0, "finite inputs: %lld chunks rerun, expected none", (long long)(tk_fast_reruns() - r0));
  /* NaNs in x alone: fused_apply.c's one pass (a NaN scale nowhere), no rerun */
  x[0] = nan_bits(0x7f812345u), x[INNER + 260] = nan_bits(0xffc00abcu); /* runs 0 and 1 */
  r0 = tk_fast_reruns();
  CHECK(same_as_interpreter(&P, 5, ne, in, out, NUMEL), "NaN x: bits differ");
  CHECK(tk_fast_reruns() == r0, "NaN x: %lld chunks rerun, expected none", (long long)(tk_fast_reruns() - r0));
  /* a NaN scale g of channel 1: its two runs go to the chunk loop, whose
   * four chunks (256 + 44 each) all have NaN results and rerun */
  c[2][1] = nan_bits(0x7fa00001u);
  r0 = tk_fast_reruns();
  CHECK(same_as_interpreter(&P, 5, ne, in, out, NUMEL), "NaN inputs: bits differ");
  CHECK(tk_fast_reruns() - r0 == 4, "NaN inputs: %lld chunks rerun, expected 4", (long long)(tk_fast_reruns() - r0));
  /* in place over x (computed in a buffer, then copied) */
  memcpy(keep, out, sizeof out);
  CHECK(same_as_interpreter(&P, 5, ne, in, x, NUMEL), "in place over x: bits differ");
  CHECK(memcmp(keep, x, sizeof x) == 0, "in place over x: not the out-of-place result");
}

/* bf16(bn_apply(x)) + r, 1 image x 3 channels x 1: the result over the mean m
 * (as long as a channel input), r[1] a NaN with low payload bits. */
static void over_channel_input(void) {
  enum { N = 3 };
  float x[N] = {1.f, 2.f, 3.f}, m[N] = {0.5f, 0.25f, -1.f}, a[N] = {2.f, 3.f, 4.f}, g[N] = {1.f, -1.f, 0.5f},
        b[N] = {0.f, 1.f, 2.f}, r[N] = {1.f, nan_bits(0x7f812345u), -2.f}, ref[N];
  float *in[6] = {x, m, a, g, b, r};
  int64_t ne[6] = {N, N, N, N, N, N};
  prog P = {.n = 0};
  bn_apply(&P, 1, true, true);
  CHECK(same_as_interpreter(&P, 6, ne, in, ref, N), "out of place: bits differ");
  float m0[N];
  memcpy(m0, m, sizeof m);
  ts_fused p = {P.n, P.ins};
  ts_dtype dt[6] = {TS_F32, TS_F32, TS_F32, TS_F32, TS_F32, TS_F32};
  ts_kctx ctx = {.num_threads = 1};
  int64_t r0 = tk_fast_reruns();
  CHECK_OK(tk_program_run(&p, 6, dt, ne, (tk_in)in, m, TS_F32, N, &ctx));
  CHECK(tk_fast_reruns() - r0 == 1, "over m: %lld chunks rerun, expected 1", (long long)(tk_fast_reruns() - r0));
  uint32_t want, got;
  memcpy(&want, &ref[1], 4), memcpy(&got, &m[1], 4);
  CHECK(memcmp(ref, m, sizeof m) == 0, "over m: element 1 %#x, interpreter %#x (m was %g)", got, want, (double)m0[1]);
}

/* ReLU's gradient of a sum, select(y > 0, u + w, 0) (fused_mask.c): one
 * pass with no rerun, NaNs in u, w or both (any payloads) included, out of
 * place and written over u (the memory plan's in-place gradient). */
static void mask_sum(void) {
  enum { N = 600 };
  static float u[N], w[N], y[N], out[N], keep[N];
  for (int i = 0; i < N; i++) {
    u[i] = (float)(i % 13) - 6.f, w[i] = (float)(i % 7) * 0.5f - 1.f, y[i] = (float)(i % 5) - 2.f;
    if (i % 37 == 0) u[i] = nan_bits(0x7f800001u + (uint32_t)i);
    if (i % 41 == 0) w[i] = nan_bits(0xffa00000u + (uint32_t)i);
    if (i % 11 == 0) y[i] = 1.f; /* both NaN where i % 1517 == 0, selected */
  }
  float *in[3] = {y, u, w};
  int64_t ne[3] = {N, N, N};
  prog P = {.n = 0};
  int32_t k = emit(&P, TS_OP_CONSTANT, TS_F32, 0, 0, 0.0);
  int32_t cmp = emit(&P, TS_OP_COMPARE, TS_BOOL, -1, k, 0);
  P.ins[cmp].cmp = TS_CMP_GT;
  int32_t v = bin(&P, TS_OP_ADD, -2, -3);
  P.ins[P.n++] = (ts_fused_instr){.op = TS_OP_SELECT, .dtype = TS_F32, .a = cmp, .b = v, .c = k};
  int64_t r0 = tk_fast_reruns();
  CHECK(same_as_interpreter(&P, 3, ne, in, out, N), "relu grad + add, NaN inputs: bits differ");
  memcpy(keep, out, sizeof out);
  CHECK(same_as_interpreter(&P, 3, ne, in, u, N), "relu grad + add over u: bits differ");
  CHECK(memcmp(keep, u, sizeof u) == 0, "relu grad + add over u: not the out-of-place result");
  CHECK(tk_fast_reruns() == r0, "relu grad + add: %lld chunks rerun, expected none (one pass)",
        (long long)(tk_fast_reruns() - r0));
}

/* Batch norm's reduced term dy * (x - m) (fused_centered.c), runs of 49 as
 * at 7x7: one loop per run with no rerun, NaNs in dy, x, both and in a
 * channel's mean included, out of place and over dy. */
static void centered_runs(void) {
  enum { NCH = 3, INNER = 49, N = 2 * NCH * INNER };
  static float dy[N], x[N], m[NCH] = {0.5f, -1.f, 2.f}, out[N], keep[N];
  for (int i = 0; i < N; i++) {
    dy[i] = (float)(i % 9) - 4.f, x[i] = (float)(i % 11) * 0.25f;
    if (i % 23 == 0) dy[i] = nan_bits(0x7f800001u + (uint32_t)i);
    if (i % 29 == 0) x[i] = nan_bits(0xffa00000u + (uint32_t)i);
  }
  m[2] = nan_bits(0x7fc00123u);
  float *in[3] = {dy, x, m};
  int64_t ne[3] = {N, N, NCH};
  prog P = {.n = 0};
  int32_t t = bin(&P, TS_OP_SUB, -2, bc(&P, 2, INNER));
  bin(&P, TS_OP_MUL, -1, t);
  int64_t r0 = tk_fast_reruns();
  CHECK(same_as_interpreter(&P, 3, ne, in, out, N), "dy * (x - m), NaN inputs: bits differ");
  memcpy(keep, out, sizeof out);
  CHECK(same_as_interpreter(&P, 3, ne, in, dy, N), "dy * (x - m) over dy: bits differ");
  CHECK(memcmp(keep, dy, sizeof dy) == 0, "dy * (x - m) over dy: not the out-of-place result");
  CHECK(tk_fast_reruns() == r0, "dy * (x - m): %lld chunks rerun, expected none (a loop per run)",
        (long long)(tk_fast_reruns() - r0));
}

/* Channel-innermost (NHWC: channel e % 16 at element e), 2 x 3 x 3 pixels x
 * 16 channels: one call of fused_apply.c's cl loop over the range (not a call
 * per element) with no rerun, NaNs in x included; a NaN scale g in channel 5:
 * the chunk loop with the terms as vectors, whose two chunks (256 + 32, not
 * one per element of channel 5) both rerun. */
static void channels_last(void) {
  enum { NCH = 16, NUMEL = 2 * 3 * 3 * NCH };
  static float x[NUMEL], keep[NUMEL], out[NUMEL], c[4][NCH];
  float *in[5] = {x, c[0], c[1], c[2], c[3]};
  int64_t ne[5] = {NUMEL, NCH, NCH, NCH, NCH};
  for (int i = 0; i < NUMEL; i++) x[i] = (float)(i % 97) * 0.25f - 12.f;
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < NCH; i++) c[k][i] = 0.5f + (float)(k + i) * 0.125f;
  x[3] = nan_bits(0x7f812345u), x[NCH + 7] = nan_bits(0xffc00abcu);
  prog P = {.n = 0};
  bn_apply(&P, 1, false, false);
  int64_t r0 = tk_fast_reruns(), c0 = tk_fast_cl_calls();
  CHECK(same_as_interpreter(&P, 5, ne, in, out, NUMEL), "NHWC, NaN x: bits differ");
  CHECK(tk_fast_cl_calls() - c0 == 1, "NHWC: %lld channel-innermost calls, expected 1",
        (long long)(tk_fast_cl_calls() - c0));
  CHECK(tk_fast_reruns() == r0, "NHWC, NaN x: %lld chunks rerun, expected none", (long long)(tk_fast_reruns() - r0));
  memcpy(keep, out, sizeof out);
  CHECK(same_as_interpreter(&P, 5, ne, in, x, NUMEL), "NHWC in place over x: bits differ");
  CHECK(memcmp(keep, x, sizeof x) == 0, "NHWC in place over x: not the out-of-place result");
  for (int i = 0; i < NUMEL; i++) x[i] = (float)(i % 89) * 0.5f - 20.f;
  c[2][5] = nan_bits(0x7fa00001u);
  r0 = tk_fast_reruns(), c0 = tk_fast_cl_calls();
  CHECK(same_as_interpreter(&P, 5, ne, in, out, NUMEL), "NHWC, NaN g: bits differ");
  CHECK(tk_fast_cl_calls() == c0, "NHWC, NaN g: a channel-innermost call");
  CHECK(tk_fast_reruns() - r0 == 2, "NHWC, NaN g: %lld chunks rerun, expected 2", (long long)(tk_fast_reruns() - r0));
  memcpy(keep, out, sizeof out);
  CHECK(same_as_interpreter(&P, 5, ne, in, x, NUMEL), "NHWC, NaN g, in place over x: bits differ");
  CHECK(memcmp(keep, x, sizeof x) == 0, "NHWC, NaN g, in place over x: not the out-of-place result");
}

int main(void) {
  ts_test_init("test_fused_rerun", 1);
  counts();
  channels_last();
  over_channel_input();
  mask_sum();
  centered_runs();
  return ts_test_finish();
}
