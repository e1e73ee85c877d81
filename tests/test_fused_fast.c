/* test_fused_fast.c — the fused programs' fast paths (src/kernels/fused_fast.c)
 * against the tile interpreter (fused.c, with tk_fused_set_fast(false)), bit
 * for bit: batch-norm apply (f32 or bf16 input, with or without a bf16
 * rounding), plus a residual or a second batch-norm apply on either side of
 * the add, ReLU (max with +0, -0 or another constant), f32 or bf16 result;
 * the batch-norm input gradient. Inputs mix ordinary values with NaNs (any
 * payload, signaling ones too), infinities, signed zeros, denormals, bf16
 * ties and values that overflow when rounded to bf16; shapes have channel
 * runs of 1, 49, 257 and 600 elements (shorter and longer than the fast
 * loops' chunk and the interpreter's tile) and odd sizes, and channel-innermost
 * ones (NHWC: runs of 1 with C = 16, 32, 48, 64, 19 or 300 channels, the
 * channel terms NaN-free or not); 1 and 2 threads;
 * each program writes its result over each of its f32 inputs of the result's
 * size in turn (in place). The reduced
 * terms of batch-norm's gradient and statistics ((x - m)^2, dy (x - m)) run
 * here as elementwise programs (fused reductions read the same loops); ReLU's
 * gradient (a select by a compare with a constant) with every comparison,
 * the two terms of a sum of the same or different types, a NaN constant; a
 * widening convert alone, a convert node to bf16; the optimizer's scaled terms (k * x, x * k, plus or
 * minus another input on either side; k a constant or a scalar input); a bias add (either
 * side) with or without ReLU (a NaN constant too). Each pattern must
 * be matched (a fast path that silently stopped matching fails here), and
 * programs that differ from a pattern by one operand order must not be. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

enum { MAX_INS = 48, MAX_EXT = 12 };

typedef struct {
  ts_fused_instr ins[MAX_INS];
  int n;
} prog;

static uint64_t rs;
static uint32_t rnd32(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (uint32_t)(rs >> 11);
}

/* An f32 of every class: ordinary values (most), else any bit pattern,
 * a NaN, an infinity, a signed zero, a denormal or a bf16 tie. */
static float rnd_f32(int ordinary_pct) {
  uint32_t u = rnd32(), kind = rnd32() % 100;
  float f;
  if ((int)kind < ordinary_pct) {
    f = ((float)(rnd32() % 20001) - 10000.f) / 2500.f;
    return f;
  }
  switch (kind % 7) {
    case 0: break;                                              /* any bits */
    case 1: u = (u & 0x807fffffu) | 0x7f800000u | 1u; break;    /* NaN, any payload */
    case 2: u = (u & 0x80000000u) | 0x7f800000u; break;         /* +-inf */
    case 3: u &= 0x80000000u; break;                            /* +-0 */
    case 4: u &= 0x807fffffu; break;                            /* denormal */
    case 5: u = (u & 0xffff0000u) | 0x8000u; break;             /* a bf16 tie */
    default: u = (u & 0x80000000u) | 0x7f7f8000u | (u & 0x7fffu); /* rounds to inf in bf16 */
  }
  memcpy(&f, &u, 4);
  return f;
}

static void fill(ts_dtype dt, void *p, int64_t n, int ordinary_pct) {
  for (int64_t i = 0; i < n; i++) {
    float f = rnd_f32(ordinary_pct);
    if (dt == TS_F32) {
      ((float *)p)[i] = f;
    } else {
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    }
  }
}

static int32_t emit(prog *P, ts_op op, ts_dtype dt, int32_t a, int32_t b, double v) {
  P->ins[P->n] = (ts_fused_instr){.op = op, .dtype = dt, .a = a, .b = b, .value = v};
  return P->n++;
}
static int32_t ext(int k) { return -k - 1; }
/* Input k as an f32 operand: a bf16 one through CONVERT, an f32 one directly or (cvt) through CONVERT. */
static int32_t src(prog *P, int k, ts_dtype dt, bool cvt) {
  return dt == TS_BF16 || cvt ? emit(P, TS_OP_CONVERT, TS_F32, ext(k), 0, 0) : ext(k);
}
static int32_t bc(prog *P, int k, int64_t inner) { return emit(P, TS_OP_BROADCAST, TS_F32, ext(k), 0, (double)inner); }
static int32_t bin(prog *P, ts_op op, int32_t a, int32_t b) { return emit(P, op, TS_F32, a, b, 0); }
static int32_t round_bf16(prog *P, int32_t v) {
  return emit(P, TS_OP_CONVERT, TS_F32, emit(P, TS_OP_CONVERT, TS_BF16, v, 0, 0), 0, 0);
}

/* ((x - m) * a) * g + b over inputs k0 (x) .. k0 + 4 (b); swap: m - x (no pattern). */
static int32_t affine(prog *P, int k0, ts_dtype xdt, int64_t inner, bool round, bool swap) {
  int32_t x = src(P, k0, xdt, rnd32() % 2), m = bc(P, k0 + 1, inner);
  int32_t t = swap ? bin(P, TS_OP_SUB, m, x) : bin(P, TS_OP_SUB, x, m);
  t = bin(P, TS_OP_MUL, t, bc(P, k0 + 2, inner));
  t = bin(P, TS_OP_MUL, t, bc(P, k0 + 3, inner));
  t = bin(P, TS_OP_ADD, t, bc(P, k0 + 4, inner));
  return round ? round_bf16(P, t) : t;
}

typedef struct {
  int64_t nb, nch, inner; /* images, channels, elements per channel run */
} shape;

typedef struct {
  prog P;
  int n_ext;
  ts_dtype dt[MAX_EXT];
  int64_t ne[MAX_EXT];
  ts_dtype out_dt;
  int nan_in; /* > 0: input nan_in - 1 is one signaling NaN (a scalar k's payload against x's) */
} case_t;

/* The share of ordinary values in the per-channel inputs: with C = 16 or
 * more channels of four terms some scale is NaN at 85 (the per-run loops take
 * such a call); 100 runs the channel-innermost loops (fused_apply.c). */
static int g_chan_pct = 85;

static void set_ext(case_t *C, int k, ts_dtype dt, int64_t ne) {
  C->dt[k] = dt, C->ne[k] = ne;
  if (k >= C->n_ext) C->n_ext = k + 1;
}

/* Runs C (interpreter, then fast path on 1 and 2 threads; then the result
 * over each full-size f32 input) and compares the bits. */
static void run_case(const char *what, case_t *C, int64_t numel, bool expect_match) {
  void *in[MAX_EXT];
  for (int k = 0; k < C->n_ext; k++) {
    in[k] = malloc((size_t)C->ne[k] * ts_dtype_size(C->dt[k]));
    fill(C->dt[k], in[k], C->ne[k], C->ne[k] == numel ? 70 : g_chan_pct);
  }
  if (C->nan_in > 0) {
    uint32_t u = 0x7f812345u;
    memcpy(in[C->nan_in - 1], &u, 4);
  }
  ts_fused prog = {C->P.n, C->P.ins};
  tk_fast F;
  CHECK(tk_fast_match(&prog, C->dt, C->ne, C->out_dt, numel, &F) == expect_match, "%s: matched %d, expected %d",
        what, !expect_match, expect_match);
  size_t ob = (size_t)numel * ts_dtype_size(C->out_dt);
  char *ref = malloc(ob), *got = malloc(ob);
  for (int nt = 1; nt <= 2; nt++) {
    ts_kctx ctx = {.num_threads = nt};
    tk_fused_set_fast(false);
    CHECK_OK(tk_program_run(&prog, C->n_ext, C->dt, C->ne, (tk_in)in, ref, C->out_dt, numel, &ctx));
    tk_fused_set_fast(true);
    memset(got, 0x5a, ob);
    CHECK_OK(tk_program_run(&prog, C->n_ext, C->dt, C->ne, (tk_in)in, got, C->out_dt, numel, &ctx));
    int64_t bad = -1, es = (int64_t)ts_dtype_size(C->out_dt);
    for (int64_t i = 0; i < numel && bad < 0; i++)
      if (memcmp(ref + i * es, got + i * es, (size_t)es)) bad = i;
    uint32_t rb = 0, gb = 0;
    if (bad >= 0) memcpy(&rb, ref + bad * es, (size_t)es), memcpy(&gb, got + bad * es, (size_t)es);
    CHECK(bad < 0, "%s, %d threads, %lld elements: element %lld differs (bits %#x, interpreter %#x)", what, nt,
          (long long)numel, (long long)bad, gb, rb);
  }
  /* in place: an f32 result over each f32 input of the same size in turn
   * (the fast loops write f32 results straight into the output) */
  for (int k = 0; k < C->n_ext && C->out_dt == TS_F32; k++) {
    if (C->dt[k] != TS_F32 || C->ne[k] != numel) continue;
    ts_kctx ctx = {.num_threads = 2};
    memcpy(got, in[k], ob);
    CHECK_OK(tk_program_run(&prog, C->n_ext, C->dt, C->ne, (tk_in)in, ref, C->out_dt, numel, &ctx));
    CHECK_OK(tk_program_run(&prog, C->n_ext, C->dt, C->ne, (tk_in)in, in[k], C->out_dt, numel, &ctx));
    CHECK(memcmp(ref, in[k], ob) == 0, "%s: in place over input %d differs", what, k);
    memcpy(in[k], got, ob);
  }
  free(ref), free(got);
  for (int k = 0; k < C->n_ext; k++) free(in[k]);
}

/* Batch-norm apply; resid 0: none, 1: + input r, 2: + a second apply; swap:
 * the add's operands exchanged; relu: max with c; result f32 or bf16. */
static void forward(shape s, ts_dtype xdt, bool round, int resid, bool swap, bool relu, float c, ts_dtype out,
                    bool bad) {
  case_t C = {.out_dt = out};
  int64_t numel = s.nb * s.nch * s.inner;
  set_ext(&C, 0, xdt, numel);
  for (int k = 1; k <= 4; k++) set_ext(&C, k, TS_F32, s.nch);
  int32_t t = affine(&C.P, 0, xdt, s.inner, round, bad);
  if (resid) {
    int32_t u;
    set_ext(&C, 5, xdt, numel);
    if (resid == 1) {
      u = src(&C.P, 5, xdt, false);
    } else {
      for (int k = 6; k <= 9; k++) set_ext(&C, k, TS_F32, s.nch);
      u = affine(&C.P, 5, xdt, s.inner, round, false);
    }
    t = swap ? bin(&C.P, TS_OP_ADD, u, t) : bin(&C.P, TS_OP_ADD, t, u);
  }
  if (relu) t = bin(&C.P, TS_OP_MAX, t, emit(&C.P, TS_OP_CONSTANT, TS_F32, 0, 0, c));
  if (out == TS_BF16) emit(&C.P, TS_OP_CONVERT, TS_BF16, t, 0, 0);
  char what[160];
  snprintf(what, sizeof what, "forward x %s round %d resid %d swap %d relu %d (%g) -> %s%s, shape %lldx%lldx%lld",
           ts_dtype_name(xdt), round, resid, swap, relu, (double)c, ts_dtype_name(out), bad ? " (m - x)" : "",
           (long long)s.nb, (long long)s.nch, (long long)s.inner);
  run_case(what, &C, numel, !bad);
}

/* ((dy - c) - (x - m) * k) * s; bad: (x - m) - (dy - c), no pattern. */
static void bn_grad(shape s, ts_dtype xdt, ts_dtype dydt, ts_dtype out, bool bad) {
  case_t C = {.out_dt = out};
  int64_t numel = s.nb * s.nch * s.inner;
  set_ext(&C, 0, xdt, numel), set_ext(&C, 3, dydt, numel);
  int ch[4] = {1, 2, 4, 5};
  for (int i = 0; i < 4; i++) set_ext(&C, ch[i], TS_F32, s.nch);
  prog *P = &C.P;
  int32_t t = bin(P, TS_OP_SUB, src(P, 0, xdt, false), bc(P, 1, s.inner));
  t = bin(P, TS_OP_MUL, t, bc(P, 2, s.inner));
  int32_t u = bin(P, TS_OP_SUB, src(P, 3, dydt, false), bc(P, 4, s.inner));
  u = bad ? bin(P, TS_OP_SUB, t, u) : bin(P, TS_OP_SUB, u, t);
  u = bin(P, TS_OP_MUL, u, bc(P, 5, s.inner));
  if (out == TS_BF16) emit(P, TS_OP_CONVERT, TS_BF16, u, 0, 0);
  char what[128];
  snprintf(what, sizeof what, "bn grad x %s dy %s -> %s%s, shape %lldx%lldx%lld", ts_dtype_name(xdt),
           ts_dtype_name(dydt), ts_dtype_name(out), bad ? " (swapped)" : "", (long long)s.nb, (long long)s.nch,
           (long long)s.inner);
  run_case(what, &C, numel, !bad);
}

/* The reduced terms: (x - m) * (x - m) (form 0), dy * (x - m) (1), (x - m) * dy (2);
 * bad: (x - m) * (m - x), no pattern. f32 results (fused reductions sum them). */
static void centered(shape s, ts_dtype xdt, ts_dtype dydt, int form, bool bad) {
  case_t C = {.out_dt = TS_F32};
  int64_t numel = s.nb * s.nch * s.inner;
  set_ext(&C, 0, xdt, numel), set_ext(&C, 1, TS_F32, s.nch), set_ext(&C, 2, dydt, numel);
  prog *P = &C.P;
  int32_t m = bc(P, 1, s.inner), x = src(P, 0, xdt, false);
  int32_t t = bin(P, TS_OP_SUB, x, m);
  if (form == 0) bin(P, TS_OP_MUL, t, bad ? bin(P, TS_OP_SUB, m, x) : t);
  else if (form == 1) bin(P, TS_OP_MUL, src(P, 2, dydt, rnd32() % 2), t);
  else bin(P, TS_OP_MUL, t, src(P, 2, dydt, rnd32() % 2));
  char what[128];
  snprintf(what, sizeof what, "centered form %d x %s dy %s%s, shape %lldx%lldx%lld", form, ts_dtype_name(xdt),
           ts_dtype_name(dydt), bad ? " (m - x)" : "", (long long)s.nb, (long long)s.nch, (long long)s.inner);
  run_case(what, &C, numel, !bad);
}

/* ReLU's gradient: select(compare(y, k), v [+ w], c), k a bf16 or f32
 * constant (w of type wdt: a bf16 step adds a bf16 gradient to an f32 one,
 * w + v); bad: select(compare(k, y), ...), no pattern. */
static void mask_w(shape s, ts_dtype ydt, ts_dtype vdt, ts_dtype wdt, ts_cmp cmp, bool sum, ts_dtype kdt, float k,
                   ts_dtype out, bool bad) {
  case_t C = {.out_dt = out};
  int64_t numel = s.nb * s.nch * s.inner;
  set_ext(&C, 0, vdt, numel), set_ext(&C, 1, wdt, numel), set_ext(&C, 2, ydt, numel);
  prog *P = &C.P;
  int32_t v = src(P, 0, vdt, rnd32() % 2);
  if (sum) v = bin(P, TS_OP_ADD, src(P, 1, wdt, rnd32() % 2), v);
  int32_t kc = emit(P, TS_OP_CONSTANT, kdt, 0, 0, k), y = src(P, 2, ydt, rnd32() % 2);
  int32_t m = P->n;
  P->ins[P->n++] = (ts_fused_instr){.op = TS_OP_COMPARE, .cmp = cmp, .dtype = TS_BOOL, .a = bad ? kc : y, .b = bad ? y : kc};
  int32_t c = emit(P, TS_OP_CONSTANT, TS_F32, 0, 0, 0.0);
  P->ins[P->n++] = (ts_fused_instr){.op = TS_OP_SELECT, .dtype = TS_F32, .a = m, .b = v, .c = c};
  if (out == TS_BF16) emit(P, TS_OP_CONVERT, TS_BF16, P->n - 1, 0, 0);
  char what[160];
  snprintf(what, sizeof what, "mask y %s v %s w %s cmp %d sum %d k %s %g -> %s%s, %lld elements",
           ts_dtype_name(ydt), ts_dtype_name(vdt), ts_dtype_name(wdt), (int)cmp, sum, ts_dtype_name(kdt), (double)k,
           ts_dtype_name(out), bad ? " (k first)" : "", (long long)numel);
  run_case(what, &C, numel, !bad);
}
static void mask(shape s, ts_dtype ydt, ts_dtype vdt, ts_cmp cmp, bool sum, ts_dtype kdt, float k, ts_dtype out,
                 bool bad) {
  mask_w(s, ydt, vdt, vdt, cmp, sum, kdt, k, out, bad);
}

/* An input alone, widened (x f32 read directly or through CONVERT), stored
 * as f32 or bf16: a one-instruction convert; fused reductions sum it. */
static void src_only(int64_t numel, ts_dtype xdt, ts_dtype out) {
  case_t C = {.out_dt = out};
  set_ext(&C, 0, xdt, numel);
  int32_t x = src(&C.P, 0, xdt, true);
  if (out == TS_BF16) emit(&C.P, TS_OP_CONVERT, TS_BF16, x, 0, 0);
  char what[96];
  snprintf(what, sizeof what, "src x %s -> %s, %lld elements", ts_dtype_name(xdt), ts_dtype_name(out),
           (long long)numel);
  run_case(what, &C, numel, true);
}

/* A convert node alone, f32 -> bf16 (a bf16 step's weight casts: a
 * one-instruction program whose operand is the input itself), out of place
 * and written over its input (the bf16 result at the f32 input's start). */
static void convert_only(int64_t numel) {
  case_t C = {.out_dt = TS_BF16};
  set_ext(&C, 0, TS_F32, numel);
  emit(&C.P, TS_OP_CONVERT, TS_BF16, ext(0), 0, 0);
  char what[96];
  snprintf(what, sizeof what, "convert f32 -> bf16, %lld elements", (long long)numel);
  run_case(what, &C, numel, true);
  float *x = malloc((size_t)numel * 4);
  uint16_t *ref = malloc((size_t)numel * 2);
  fill(TS_F32, x, numel, 70);
  ts_fused prog = {C.P.n, C.P.ins};
  ts_kctx ctx = {.num_threads = 2};
  tk_fused_set_fast(false);
  CHECK_OK(tk_program_run(&prog, 1, C.dt, C.ne, (tk_in)&x, ref, TS_BF16, numel, &ctx));
  tk_fused_set_fast(true);
  ctx.num_threads = 1; /* two threads would write over each other's inputs */
  CHECK_OK(tk_program_run(&prog, 1, C.dt, C.ne, (tk_in)&x, x, TS_BF16, numel, &ctx));
  CHECK(memcmp(ref, x, (size_t)numel * 2) == 0, "%s: over its input differs", what);
  free(x), free(ref);
}

/* The optimizer's terms: p = k * x (k_left) or x * k, k a constant (f32 or
 * bf16: kdt) or a scalar f32 input (kdt TS_I32 here; a NaN in half the cases), then (comb 1) p + y or
 * y + p (y_first), (comb 2) p - y or y - p; bad: k a full-size input (no pattern). */
static void scaled(int64_t numel, ts_dtype xdt, ts_dtype ydt, ts_dtype kdt, float k, bool k_left, int comb,
                   bool y_first, ts_dtype out, bool bad) {
  case_t C = {.out_dt = out, .nan_in = kdt == TS_I32 && numel > 1 && !bad && rnd32() % 2 ? 3 : 0};
  set_ext(&C, 0, xdt, numel), set_ext(&C, 1, ydt, numel), set_ext(&C, 2, TS_F32, bad ? numel : 1);
  prog *P = &C.P;
  int32_t kv = kdt == TS_I32 || bad ? ext(2) : emit(P, TS_OP_CONSTANT, kdt, 0, 0, k);
  int32_t x = src(P, 0, xdt, rnd32() % 2);
  int32_t p = k_left ? bin(P, TS_OP_MUL, kv, x) : bin(P, TS_OP_MUL, x, kv);
  if (comb) {
    int32_t y = src(P, 1, ydt, rnd32() % 2);
    ts_op op = comb == 1 ? TS_OP_ADD : TS_OP_SUB;
    p = y_first ? bin(P, op, y, p) : bin(P, op, p, y);
  }
  if (out == TS_BF16) emit(P, TS_OP_CONVERT, TS_BF16, p, 0, 0);
  char what[160];
  snprintf(what, sizeof what, "scaled x %s y %s k %s %g left %d comb %d y first %d -> %s%s, %lld elements",
           ts_dtype_name(xdt), ts_dtype_name(ydt), kdt == TS_I32 ? "input" : ts_dtype_name(kdt), (double)k,
           k_left, comb, y_first, ts_dtype_name(out), bad ? " (k full size)" : "", (long long)numel);
  run_case(what, &C, numel, !bad);
}

/* The interpreter's BROADCAST with runs of one element (a bias along the
 * last dim, NHWC's per-channel terms: source element e % m at element e; one
 * period loaded per tile, the rest copied, a tile reused by the next one
 * that starts at the same place): x + v against the sum in C, v stored as
 * f32, bf16 (widened by a CONVERT), f64 or i32, m dividing the 512-element
 * tile or not or longer, 1 and 2 threads. */
static void interp_bias(ts_dtype vdt, int64_t m, int64_t numel) {
  ts_dtype xdt = vdt == TS_BF16 ? TS_F32 : vdt;
  size_t xs = ts_dtype_size(xdt), vs = ts_dtype_size(vdt);
  char *x = malloc((size_t)numel * xs), *v = malloc((size_t)m * vs), *got = malloc((size_t)numel * xs);
  for (int64_t i = 0; i < numel; i++) tk_store_f64(xdt, x, i, (double)(rnd32() % 2001) - 1000.0);
  for (int64_t i = 0; i < m; i++) tk_store_f64(vdt, v, i, ((double)(rnd32() % 2001) - 1000.0) / 64.0);
  prog P = {.n = 0};
  int32_t b = emit(&P, TS_OP_BROADCAST, vdt, ext(1), 0, 1.0);
  if (vdt == TS_BF16) b = emit(&P, TS_OP_CONVERT, TS_F32, b, 0, 0);
  emit(&P, TS_OP_ADD, xdt, ext(0), b, 0);
  ts_fused prog = {P.n, P.ins};
  ts_dtype dt[2] = {xdt, vdt};
  int64_t ne[2] = {numel, m};
  void *in[2] = {x, v};
  for (int nt = 1; nt <= 2; nt++) {
    ts_kctx ctx = {.num_threads = nt};
    tk_fused_set_fast(false);
    CHECK_OK(tk_program_run(&prog, 2, dt, ne, (tk_in)in, got, xdt, numel, &ctx));
    tk_fused_set_fast(true);
    int64_t bad = -1;
    for (int64_t i = 0; i < numel && bad < 0; i++) {
      double want = xdt == TS_I32 ? (double)(((int32_t *)x)[i] + ((int32_t *)v)[i % m])
                    : xdt == TS_F64 ? ((double *)x)[i] + ((double *)v)[i % m]
                                    : (double)(((float *)x)[i] + (float)tk_load_f64(vdt, v, i % m));
      if (tk_load_f64(xdt, got, i) != want) bad = i;
    }
    CHECK(bad < 0, "interpreter bias %s, m %lld, %lld elements, %d threads: element %lld differs",
          ts_dtype_name(vdt), (long long)m, (long long)numel, nt, (long long)bad);
  }
  free(x), free(v), free(got);
}

/* A bias add, x + b or b + x (b per channel: runs of s.inner, or a row of
 * s.nch), then max with c (relu) or not; bad 1: x - b, 2: x bf16 (no pattern). */
static void bias(shape s, bool x_first, bool relu, float c, int bad) {
  case_t C = {.out_dt = TS_F32};
  int64_t numel = s.nb * s.nch * s.inner;
  ts_dtype xdt = bad == 2 ? TS_BF16 : TS_F32;
  set_ext(&C, 0, xdt, numel), set_ext(&C, 1, TS_F32, s.nch);
  prog *P = &C.P;
  int32_t x = src(P, 0, xdt, rnd32() % 2), b = bc(P, 1, s.inner);
  int32_t t = bin(P, bad == 1 ? TS_OP_SUB : TS_OP_ADD, x_first ? x : b, x_first ? b : x);
  if (relu) bin(P, TS_OP_MAX, t, emit(P, TS_OP_CONSTANT, TS_F32, 0, 0, c));
  char what[128];
  snprintf(what, sizeof what, "bias x first %d relu %d (%g)%s, shape %lldx%lldx%lld", x_first, relu, (double)c,
           bad == 1 ? " (x - b)" : bad == 2 ? " (x bf16)" : "", (long long)s.nb, (long long)s.nch,
           (long long)s.inner);
  run_case(what, &C, numel, !bad);
}

/* Every per-channel and elementwise pattern over shape s. */
static void patterns(shape s, int si) {
  ts_dtype dts[] = {TS_F32, TS_BF16};
  float consts[] = {0.f, -0.f, 0.5f};
  for (int di = 0; di < 2; di++) {
    ts_dtype xdt = dts[di];
    for (int resid = 0; resid <= 2; resid++)
      for (int v = 0; v < 4; v++) {
        bool round = v & 1, relu = v & 2, swap = (v + resid) & 1;
        forward(s, xdt, round, resid, swap, relu, consts[(si + v) % 3], dts[(di + v / 2) % 2], false);
      }
    forward(s, xdt, false, 1, false, true, 0.f, xdt, true);
    for (int oi = 0; oi < 2; oi++) bn_grad(s, xdt, dts[(di + oi) % 2], dts[oi], false);
    bn_grad(s, xdt, xdt, xdt, true);
    for (int form = 0; form < 3; form++) centered(s, xdt, dts[(di + form) % 2], form, false);
    centered(s, xdt, xdt, 0, true);
    for (int cmp = TS_CMP_EQ; cmp <= TS_CMP_GE; cmp++)
      mask(s, xdt, dts[(di + cmp) % 2], (ts_cmp)cmp, cmp % 2, dts[cmp / 3], cmp % 3 ? 0.f : 0.1f,
           dts[(cmp / 2) % 2], false);
    mask(s, xdt, xdt, TS_CMP_GT, true, TS_F32, 0.f, xdt, true);
    for (int v = 0; v < 4; v++) bias(s, v & 1, v & 2, di && v == 3 ? NAN : consts[(si + v) % 3], 0);
    bias(s, di, true, 0.f, 1 + di);
    /* v and w of different types (fused_mask.c's loops are per type), and a NaN k */
    for (int cmp = TS_CMP_EQ; cmp <= TS_CMP_GE; cmp++) {
      mask_w(s, xdt, dts[cmp % 2], dts[(cmp + 1) % 2], (ts_cmp)cmp, true, TS_BF16, 0.f, dts[(cmp / 2) % 2], false);
      mask_w(s, xdt, dts[di], dts[cmp % 2], (ts_cmp)cmp, cmp % 2, TS_F32, NAN, dts[(cmp / 3 + di) % 2], false);
    }
  }
}

int main(void) {
  rs = ts_test_init("test_fused_fast", 7) | 1;
  shape shapes[] = {{2, 3, 49}, {1, 5, 600}, {3, 2, 1}, {2, 4, 257}, {1, 1, 1}};
  for (int si = 0; si < 5; si++) patterns(shapes[si], si);
  /* channel-innermost (NHWC: a run of one element, channel e % C), C = 16,
   * 32, 48, 64, odd, and over NAN_BLK; with NaN-free channel terms too */
  shape cl[] = {{40, 16, 1}, {21, 32, 1}, {13, 48, 1}, {11, 64, 1}, {31, 19, 1}, {3, 300, 1}};
  for (int si = 0; si < 6; si++)
    for (g_chan_pct = 85; g_chan_pct <= 100; g_chan_pct += 15) patterns(cl[si], si);
  ts_dtype bdts[] = {TS_F32, TS_BF16, TS_F64, TS_I32};
  int64_t ms[] = {16, 64, 29, 700, 1};
  for (int di = 0; di < 4; di++)
    for (int mi = 0; mi < 5; mi++) interp_bias(bdts[di], ms[mi], ms[mi] * 37 + 5);
  ts_dtype dts[] = {TS_F32, TS_BF16};
  int64_t sizes[] = {1, 7, 256, 1000, 40001};
  ts_dtype kdts[] = {TS_F32, TS_BF16, TS_I32};
  for (int zi = 0; zi < 5; zi++)
    for (int di = 0; di < 2; di++) {
      for (int oi = 0; oi < 2; oi++) src_only(sizes[zi], dts[di], dts[oi]);
      if (di == 0) convert_only(sizes[zi]);
      for (int v = 0; v < 12; v++)
        scaled(sizes[zi], dts[di], dts[(di + v) % 2], kdts[v % 3], v % 4 ? 0.9f : 0.1f, v % 2, v % 3, v / 6,
               dts[(v / 3) % 2], false);
      if (sizes[zi] > 1) scaled(sizes[zi], dts[di], dts[di], TS_F32, 0.9f, true, 1, false, TS_F32, true);
    }
  return ts_test_finish();
}
