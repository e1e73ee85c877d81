/* test_fused_adam.c — AdamW's fused programs on their fast loops
 * (src/kernels/fused_adam.c) against the tile interpreter (fused.c with
 * tk_fused_set_fast(false)), bit for bit: the moments k0 x0 + k1 x1 (a term
 * squared, x * x, or not; each scalar a constant, f32 or bf16, or a scalar
 * input, on either side of its mul) and the parameter update
 * pd - step * (m / (sqrt(v) / bc + eps)) (pd = p, p * decay or decay * p;
 * step and eps on either side), as src/nn/optim.c writes them. Inputs mix
 * ordinary values with NaNs of any payload (signaling too), infinities,
 * signed zeros, denormals and negatives (sqrt of a negative: NaN); scalar
 * inputs are NaN in some cases (the loops' exact form, every add and mul in
 * the program's operand order); sizes 1 .. 40001 on 1 and 2 threads, and
 * each program's result over each of its full-size inputs (in place) and
 * over an input shifted by 512 elements. Each program must be matched, and
 * programs that differ from a pattern in the order of one operation must
 * not be (they run in the interpreter). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

enum { MAX_INS = 24, MAX_EXT = 10, SHIFT = 512 };

static uint64_t rs;
static uint32_t rnd32(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (uint32_t)(rs >> 11);
}

/* An f32: ordinary (most, half of them small: v near 0 and below eps), else
 * any bits, a NaN, an infinity, a signed zero or a denormal. */
static float rnd_f32(int ordinary_pct) {
  uint32_t u = rnd32(), kind = rnd32() % 100;
  if ((int)kind < ordinary_pct) {
    float f = ((float)(rnd32() % 20001) - 10000.f) / 2500.f;
    return kind % 2 ? f * 1e-7f : f;
  }
  switch (kind % 5) {
    case 0: break;                                           /* any bits */
    case 1: u = (u & 0x807fffffu) | 0x7f800000u | 1u; break; /* NaN, any payload */
    case 2: u = (u & 0x80000000u) | 0x7f800000u; break;      /* +-inf */
    case 3: u &= 0x80000000u; break;                         /* +-0 */
    default: u &= 0x807fffffu;                               /* denormal */
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

typedef struct {
  ts_fused_instr ins[MAX_INS];
  int n, n_ext;
  int64_t ne[MAX_EXT];
  bool full[MAX_EXT]; /* full size (else a scalar input) */
} prog;

static int32_t emit(prog *P, ts_op op, int32_t a, int32_t b, double v, ts_dtype dt) {
  P->ins[P->n] = (ts_fused_instr){.op = op, .dtype = dt, .a = a, .b = b, .value = v};
  return P->n++;
}
static int32_t bin(prog *P, ts_op op, int32_t a, int32_t b) { return emit(P, op, a, b, 0, TS_F32); }
/* A new full-size input (read directly or through CONVERT to f32). */
static int32_t full(prog *P) {
  int k = P->n_ext++;
  P->full[k] = true;
  return rnd32() % 4 ? -k - 1 : emit(P, TS_OP_CONVERT, -k - 1, 0, 0, TS_F32);
}
/* A scalar: kind 0 an f32 constant, 1 a bf16 constant, 2 a new scalar input. */
static int32_t scalar(prog *P, int kind, double c) {
  if (kind < 2) return emit(P, TS_OP_CONSTANT, 0, 0, c, kind ? TS_BF16 : TS_F32);
  int k = P->n_ext++;
  P->full[k] = false;
  return -k - 1;
}
/* k * x (left) or x * k. */
static int32_t scale(prog *P, int32_t k, int32_t x, bool left) {
  return left ? bin(P, TS_OP_MUL, k, x) : bin(P, TS_OP_MUL, x, k);
}

/* The program against the interpreter: out of place on 1 and 2 threads, then
 * over each full-size input, and over the first one shifted by an element. */
static void run(const char *what, prog *P, int64_t numel, bool expect) {
  ts_dtype dt[MAX_EXT];
  void *in[MAX_EXT];
  for (int k = 0; k < P->n_ext; k++) {
    dt[k] = TS_F32, P->ne[k] = P->full[k] ? numel : 1;
    float *x = malloc((size_t)(P->ne[k] + SHIFT) * 4);
    for (int64_t i = 0; i < P->ne[k] + SHIFT; i++) x[i] = rnd_f32(75);
    if (!P->full[k]) { /* a scalar: a NaN of any payload in a quarter of the cases, else ordinary */
      uint32_t u = (rnd32() & 0x807fffffu) | 0x7f800000u | 1u;
      if (rnd32() % 4) x[0] = 0.5f + (float)(rnd32() % 100) / 64.f;
      else memcpy(x, &u, 4);
    }
    in[k] = x;
  }
  ts_fused prog = {P->n, P->ins};
  tk_fast F;
  bool got_match = tk_fast_match(&prog, dt, P->ne, TS_F32, numel, &F);
  CHECK(got_match == expect, "%s: matched %d, expected %d", what, got_match, expect);
  CHECK(!expect || F.kind == TK_FAST_MOMENT || F.kind == TK_FAST_ADAMW, "%s: matched as kind %d", what, F.kind);
  size_t ob = (size_t)numel * 4;
  size_t ab = ob + SHIFT * 4;
  float *ref = malloc(ab), *got = malloc(ab), *keep = malloc(ab);
  for (int nt = 1; nt <= 2; nt++) {
    ts_kctx ctx = {.num_threads = nt};
    tk_fused_set_fast(false);
    CHECK_OK(tk_program_run(&prog, P->n_ext, dt, P->ne, (tk_in)in, ref, TS_F32, numel, &ctx));
    tk_fused_set_fast(true);
    memset(got, 0x5a, ob);
    CHECK_OK(tk_program_run(&prog, P->n_ext, dt, P->ne, (tk_in)in, got, TS_F32, numel, &ctx));
    int64_t bad = -1;
    for (int64_t i = 0; i < numel && bad < 0; i++)
      if (memcmp(ref + i, got + i, 4)) bad = i;
    uint32_t rb = 0, gb = 0;
    if (bad >= 0) memcpy(&rb, ref + bad, 4), memcpy(&gb, got + bad, 4);
    CHECK(bad < 0, "%s, %d threads, %lld elements: element %lld differs (bits %#x, interpreter %#x)", what, nt,
          (long long)numel, (long long)bad, gb, rb);
  }
  /* in place over each full-size input, and shifted: the result SHIFT
   * elements past the start of input k (each element read after the one
   * SHIFT before it is written, by the interpreter's tiles of 512 and the
   * fast loop's blocks alike; 1 thread) */
  for (int k = 0; k < P->n_ext; k++) {
    if (!P->full[k]) continue;
    for (int shift = 0; shift <= SHIFT; shift += SHIFT) {
      ts_kctx ctx = {.num_threads = 1};
      memcpy(keep, in[k], ab);
      tk_fused_set_fast(false);
      CHECK_OK(tk_program_run(&prog, P->n_ext, dt, P->ne, (tk_in)in, (float *)in[k] + shift, TS_F32, numel, &ctx));
      memcpy(ref, in[k], ab), memcpy(in[k], keep, ab);
      tk_fused_set_fast(true);
      CHECK_OK(tk_program_run(&prog, P->n_ext, dt, P->ne, (tk_in)in, (float *)in[k] + shift, TS_F32, numel, &ctx));
      CHECK(memcmp(ref, in[k], ab) == 0, "%s, %lld elements: over input %d (shift %d) differs", what,
            (long long)numel, k, shift);
      memcpy(in[k], keep, ab);
    }
  }
  free(ref), free(got), free(keep);
  for (int k = 0; k < P->n_ext; k++) free(in[k]);
}

/* k0 x0 + k1 x1 (sq: x * x): kinds of the scalars (scalar()), their sides;
 * bad 1: x1 * x2 (two inputs) for a square, 2: k0 (x0 + x1), no pattern. */
static void moment(int64_t numel, int sq, int kk, int sides, int bad) {
  prog P = {.n = 0};
  int32_t t[2];
  if (bad == 2) {
    int32_t k = scalar(&P, kk % 3, 0.9);
    int32_t a = full(&P);
    bin(&P, TS_OP_MUL, k, bin(&P, TS_OP_ADD, a, full(&P)));
  } else {
    for (int i = 0; i < 2; i++) {
      int32_t k = scalar(&P, (kk >> (2 * i)) % 3, i ? 0.001 : 0.9), x = full(&P);
      if (sq >> i & 1) x = bin(&P, TS_OP_MUL, x, bad == 1 ? full(&P) : x);
      t[i] = scale(&P, k, x, sides >> i & 1);
    }
    bin(&P, TS_OP_ADD, t[0], t[1]);
  }
  char what[128];
  snprintf(what, sizeof what, "moment sq %d scalars %d sides %d%s", sq, kk, sides,
           bad == 1 ? " (x * y)" : bad == 2 ? " (k (x + y))" : "");
  run(what, &P, numel, bad == 0);
}

/* pd - step * (m / (sqrt(v) / bc + eps)); decay 0: none, 1: p * d, 2: d * p;
 * bad: 1 den / m, 2 bc / sqrt(v), 3 (step * m) / den, 4 sqrt(v / bc), 5 q - pd. */
static void adamw(int64_t numel, int decay, int eps_kind, int sides, int bad) {
  prog P = {.n = 0};
  int32_t p = full(&P), pd = p;
  if (decay) pd = scale(&P, scalar(&P, rnd32() % 2 ? 2 : 0, 0.99), p, decay == 2);
  int32_t m = full(&P), v = full(&P), bc = scalar(&P, 2, 0), step = scalar(&P, 2, 0);
  int32_t eps = scalar(&P, eps_kind, 1e-8);
  int32_t r = bad == 4 ? emit(&P, TS_OP_SQRT, bin(&P, TS_OP_DIV, v, bc), 0, 0, TS_F32)
              : bad == 2 ? bin(&P, TS_OP_DIV, bc, emit(&P, TS_OP_SQRT, v, 0, 0, TS_F32))
                         : bin(&P, TS_OP_DIV, emit(&P, TS_OP_SQRT, v, 0, 0, TS_F32), bc);
  int32_t den = sides & 1 ? bin(&P, TS_OP_ADD, eps, r) : bin(&P, TS_OP_ADD, r, eps);
  int32_t t = bad == 3 ? bin(&P, TS_OP_DIV, scale(&P, step, m, sides & 2), den)
                       : scale(&P, step, bad == 1 ? bin(&P, TS_OP_DIV, den, m) : bin(&P, TS_OP_DIV, m, den), sides & 2);
  if (bad == 5) bin(&P, TS_OP_SUB, t, pd);
  else bin(&P, TS_OP_SUB, pd, t);
  char what[128];
  snprintf(what, sizeof what, "adamw decay %d eps kind %d sides %d%s", decay, eps_kind, sides,
           bad ? " (an operation's order changed)" : "");
  run(what, &P, numel, bad == 0);
}

int main(void) {
  rs = ts_test_init("test_fused_adam", 17) | 1;
  int64_t sizes[] = {1, 7, 256, 1000, 40001};
  for (int zi = 0; zi < 5; zi++) {
    int64_t n = sizes[zi];
    for (int v = 0; v < 12; v++) {
      moment(n, v % 4, (v * 7) % 9, v / 3, 0);
      adamw(n, v % 3, v % 3, v / 3, 0);
    }
    if (n > 1)
      for (int bad = 1; bad <= 5; bad++) {
        if (bad <= 2) moment(n, bad == 1 ? 2 : 0, 0, 0, bad);
        adamw(n, bad % 3, 0, 0, bad);
      }
  }
  return ts_test_finish();
}
