/* test_kernels.c — every CPU kernel against naive reference loops written
 * here: elementwise, fused programs, reductions, layout ops, dot_general,
 * pooling, gather / scatter_add and the counter-based RNG (convolutions:
 * test_conv_kernels.c). Graphs are built with ir_append and run node by node
 * by the tiny executor of kernel_ex.h. */
#include "kernel_ex.h" /* random data, the tiny executor */
#include "kernels/kernels_internal.h" /* tk_fused_plan */

/* ================= elementwise ================= */
static double ref_unary(ts_op op, double x) {
  switch (op) {
    case TS_OP_NEG: return -x;
    case TS_OP_ABS: return fabs(x);
    case TS_OP_EXP: return exp(x);
    case TS_OP_LOG: return log(fabs(x) + 0.1);
    case TS_OP_LOG1P: return log1p(fabs(x));
    case TS_OP_TANH: return tanh(x);
    case TS_OP_SQRT: return sqrt(fabs(x));
    case TS_OP_RSQRT: return 1 / sqrt(fabs(x) + 0.1);
    case TS_OP_SIGMOID: return 1 / (1 + exp(-x));
    case TS_OP_ERF: return erf(x);
    case TS_OP_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: return 0;
  }
}

static void test_elementwise(void) {
  ts_op un[] = {TS_OP_NEG, TS_OP_ABS, TS_OP_EXP, TS_OP_LOG, TS_OP_LOG1P, TS_OP_TANH,
                TS_OP_SQRT, TS_OP_RSQRT, TS_OP_SIGMOID, TS_OP_ERF, TS_OP_GELU};
  ts_dtype dts[] = {TS_F64, TS_F32};
  int64_t sh[2] = {7, 13};
  for (int di = 0; di < 2; di++) {
    ts_dtype dt = dts[di];
    double tol = dt == TS_F64 ? 1e-14 : 1e-6;
    for (size_t u = 0; u < sizeof un / sizeof *un; u++) {
      ex_t e;
      ex_init(&e);
      ts_tensor x = rinput(&e, dt, 2, sh);
      /* keep log / sqrt / rsqrt inputs in their domains */
      for (int64_t i = 0; i < 91; i++) {
        double v = get(&e, x, i);
        if (un[u] == TS_OP_LOG || un[u] == TS_OP_RSQRT) v = fabs(v) + 0.1;
        if (un[u] == TS_OP_LOG1P || un[u] == TS_OP_SQRT) v = fabs(v);
        if (dt == TS_F64) ((double *)e.buf[x])[i] = v;
        else ((float *)e.buf[x])[i] = (float)v;
      }
      double ref[91];
      for (int i = 0; i < 91; i++) {
        double v = get(&e, x, i);
        if (un[u] == TS_OP_LOG) v = v - 0.1;
        if (un[u] == TS_OP_RSQRT) v = v - 0.1;
        ref[i] = ref_unary(un[u], v);
        if (un[u] == TS_OP_LOG || un[u] == TS_OP_RSQRT) ref[i] = un[u] == TS_OP_LOG ? log(get(&e, x, i)) : 1 / sqrt(get(&e, x, i));
      }
      ts_tensor y = node(&e, un[u], dt, 2, sh, 1, &x, NULL);
      CHECK_OK(run(&e, y));
      CHECK(max_err(&e, y, ref, 91) < tol, "%s %s err %g", ir_op_name(un[u]), ts_dtype_name(dt), max_err(&e, y, ref, 91));
      ex_free(&e);
    }
    ts_op bin[] = {TS_OP_ADD, TS_OP_SUB, TS_OP_MUL, TS_OP_DIV, TS_OP_MAX, TS_OP_MIN, TS_OP_POW};
    for (size_t b = 0; b < sizeof bin / sizeof *bin; b++) {
      ex_t e;
      ex_init(&e);
      ts_tensor x = rinput(&e, dt, 2, sh), y = rinput(&e, dt, 2, sh);
      if (bin[b] == TS_OP_POW)
        for (int i = 0; i < 91; i++) {
          if (dt == TS_F64) ((double *)e.buf[x])[i] = fabs(get(&e, x, i)) + 0.5;
          else ((float *)e.buf[x])[i] = (float)(fabs(get(&e, x, i)) + 0.5);
        }
      double ref[91];
      for (int i = 0; i < 91; i++) {
        double a = get(&e, x, i), c = get(&e, y, i);
        ref[i] = bin[b] == TS_OP_ADD ? a + c : bin[b] == TS_OP_SUB ? a - c : bin[b] == TS_OP_MUL ? a * c
               : bin[b] == TS_OP_DIV ? a / c : bin[b] == TS_OP_MAX ? fmax(a, c) : bin[b] == TS_OP_MIN ? fmin(a, c) : pow(a, c);
      }
      int32_t ins[2] = {x, y};
      ts_tensor z = node(&e, bin[b], dt, 2, sh, 2, ins, NULL);
      CHECK_OK(run(&e, z));
      double err = max_err(&e, z, ref, 91);
      CHECK(err < (bin[b] == TS_OP_DIV ? tol * 100 : tol), "%s %s err %g", ir_op_name(bin[b]), ts_dtype_name(dt), err);
      ex_free(&e);
    }
  }
  /* integers: division by zero gives 0, INT32_MIN / -1 wraps; compare and select */
  {
    ex_t e;
    ex_init(&e);
    int64_t s4[1] = {4};
    ts_tensor a = input(&e, TS_I32, 1, s4), b = input(&e, TS_I32, 1, s4);
    int32_t av[4] = {7, -7, INT32_MIN, 5}, bv[4] = {0, 2, -1, -5};
    memcpy(e.buf[a], av, sizeof av), memcpy(e.buf[b], bv, sizeof bv);
    int32_t ins[2] = {a, b};
    ts_tensor q = node(&e, TS_OP_DIV, TS_I32, 1, s4, 2, ins, NULL);
    ts_attr at = {.cmp = TS_CMP_LT};
    ts_tensor c = node(&e, TS_OP_COMPARE, TS_BOOL, 1, s4, 2, ins, &at);
    int32_t sins[3] = {c, a, b};
    ts_tensor s = node(&e, TS_OP_SELECT, TS_I32, 1, s4, 3, sins, NULL);
    CHECK_OK(run(&e, s));
    const int32_t *qv = e.buf[q], *sv = e.buf[s];
    const uint8_t *cv = e.buf[c];
    CHECK(qv[0] == 0 && qv[1] == -3 && qv[2] == INT32_MIN && qv[3] == -1, "int div %d %d %d %d", qv[0], qv[1], qv[2], qv[3]);
    CHECK(cv[0] == 0 && cv[1] == 1 && cv[2] == 1 && cv[3] == 0, "compare lt");
    CHECK(sv[0] == 0 && sv[1] == -7 && sv[2] == INT32_MIN && sv[3] == -5, "select");
    ex_free(&e);
  }
  /* convert: truncation toward zero, saturation, NaN -> 0; f64 -> bf16 rounding */
  {
    ex_t e;
    ex_init(&e);
    int64_t s6[1] = {6};
    ts_tensor x = input(&e, TS_F64, 1, s6);
    double xv[6] = {-2.7, 2.7, 1e20, -1e20, NAN, 300.5};
    memcpy(e.buf[x], xv, sizeof xv);
    ts_tensor i32 = node(&e, TS_OP_CONVERT, TS_I32, 1, s6, 1, &x, NULL);
    ts_tensor u8 = node(&e, TS_OP_CONVERT, TS_U8, 1, s6, 1, &x, NULL);
    ts_tensor bf = node(&e, TS_OP_CONVERT, TS_BF16, 1, s6, 1, &x, NULL);
    ts_tensor back = node(&e, TS_OP_CONVERT, TS_F64, 1, s6, 1, &bf, NULL);
    CHECK_OK(run(&e, back));
    const int32_t *iv = e.buf[i32];
    const uint8_t *uv = e.buf[u8];
    CHECK(iv[0] == -2 && iv[1] == 2 && iv[2] == INT32_MAX && iv[3] == INT32_MIN && iv[4] == 0 && iv[5] == 300, "f64->i32 %d %d %d %d %d %d", iv[0], iv[1], iv[2], iv[3], iv[4], iv[5]);
    CHECK(uv[0] == 0 && uv[1] == 2 && uv[2] == 255 && uv[5] == 255, "f64->u8");
    CHECK(get(&e, back, 5) == 300.0 && get(&e, back, 0) == -2.703125, "bf16 rounding %g %g", get(&e, back, 5), get(&e, back, 0));
    ex_free(&e);
  }
  /* f32 exp over its whole range, overflow, underflow and NaN */
  {
    ex_t e;
    ex_init(&e);
    int64_t n = 4003;
    ts_tensor x = input(&e, TS_F32, 1, &n);
    float *xv = e.buf[x];
    for (int64_t i = 0; i < n - 3; i++) xv[i] = -110.f + 200.f * (float)i / (float)(n - 4) + (float)(urand() * 0.01);
    xv[n - 3] = NAN, xv[n - 2] = INFINITY, xv[n - 1] = -INFINITY;
    ts_tensor y = node(&e, TS_OP_EXP, TS_F32, 1, &n, 1, &x, NULL);
    CHECK_OK(run(&e, y));
    const float *yv = e.buf[y];
    double worst = 0;
    for (int64_t i = 0; i < n - 3; i++) {
      double want = exp((double)xv[i]);
      float wf = (float)want;
      if (isinf(wf) || wf < 1.2e-38f) { /* overflow / subnormal: within one subnormal step */
        if (!(isinf(wf) ? isinf(yv[i]) : fabs(yv[i] - want) <= 1.5e-45)) worst = INFINITY;
        continue;
      }
      double rel = fabs(yv[i] - want) / want;
      if (!(rel <= worst)) worst = rel;
    }
    CHECK(worst < 3e-7, "f32 exp max relative error %g", worst);
    CHECK(isnan(yv[n - 3]) && isinf(yv[n - 2]) && yv[n - 1] == 0, "exp(nan, inf, -inf) = %g %g %g", yv[n - 3], yv[n - 2], yv[n - 1]);
    ex_free(&e);
  }
  /* sigmoid stays finite and exact at large |x| */
  {
    ex_t e;
    ex_init(&e);
    int64_t s2[1] = {2};
    ts_tensor x = input(&e, TS_F32, 1, s2);
    ((float *)e.buf[x])[0] = -200.f, ((float *)e.buf[x])[1] = 200.f;
    ts_tensor y = node(&e, TS_OP_SIGMOID, TS_F32, 1, s2, 1, &x, NULL);
    CHECK_OK(run(&e, y));
    CHECK(get(&e, y, 0) >= 0 && get(&e, y, 0) < 1e-80 && get(&e, y, 1) == 1.0, "sigmoid tails %g %g", get(&e, y, 0), get(&e, y, 1));
    ex_free(&e);
  }
}

/* ================= fused programs ================= */
static void test_fused(void) {
  ts_dtype dts[2] = {TS_F64, TS_F32};
  for (int di = 0; di < 2; di++) {
    ts_dtype dt = dts[di];
    int64_t n = di ? 100003 : 1031; /* many tiles; the f32 case crosses the OpenMP threshold */
    ex_t e;
    ex_init(&e);
    ts_tensor x = rinput(&e, dt, 1, &n), y = rinput(&e, dt, 1, &n);
    ts_tensor s = rinput(&e, dt, 0, NULL); /* scalar, broadcast */
    /* t0 = x*y; t1 = 0.5; t2 = t0 + t1; t3 = sigmoid(t2); t4 = x > s; r = t4 ? t3 : y*s */
    ts_fused *f = malloc(sizeof *f);
    f->n = 7;
    f->ins = calloc(7, sizeof *f->ins);
    f->ins[0] = (ts_fused_instr){.op = TS_OP_MUL, .dtype = dt, .a = -1, .b = -2};
    f->ins[1] = (ts_fused_instr){.op = TS_OP_CONSTANT, .dtype = dt, .value = 0.5};
    f->ins[2] = (ts_fused_instr){.op = TS_OP_ADD, .dtype = dt, .a = 0, .b = 1};
    f->ins[3] = (ts_fused_instr){.op = TS_OP_SIGMOID, .dtype = dt, .a = 2};
    f->ins[4] = (ts_fused_instr){.op = TS_OP_COMPARE, .cmp = TS_CMP_GT, .dtype = TS_BOOL, .a = -1, .b = -3};
    f->ins[5] = (ts_fused_instr){.op = TS_OP_MUL, .dtype = dt, .a = -2, .b = -3};
    f->ins[6] = (ts_fused_instr){.op = TS_OP_SELECT, .dtype = dt, .a = 4, .b = 3, .c = 5};
    ts_attr at = {.fused = f};
    int32_t ins[3] = {x, y, s};
    ts_tensor r = node(&e, TS_OP_FUSED, dt, 1, &n, 3, ins, &at);
    double *ref = malloc((size_t)n * sizeof *ref), sv = get(&e, s, 0);
    for (int64_t i = 0; i < n; i++) {
      double a = get(&e, x, i), b = get(&e, y, i);
      ref[i] = a > sv ? 1 / (1 + exp(-(a * b + 0.5))) : b * sv;
    }
    CHECK_OK(run(&e, r));
    CHECK(max_err(&e, r, ref, n) < (di ? 1e-6 : 1e-14), "fused %s err %g", ts_dtype_name(dt), max_err(&e, r, ref, n));
    /* in place: out == in[0] */
    const void *inp[3] = {e.buf[x], e.buf[y], e.buf[s]};
    ts_kctx ctx = {.num_threads = 2};
    ts_kstate *st = NULL;
    CHECK_OK(kernel_run(e.g, r, inp, e.buf[x], &st, &ctx));
    CHECK(max_err(&e, x, ref, n) < (di ? 1e-6 : 1e-14), "fused in place");
    /* the node's check, match and plan are kept in its state and reused */
    ts_kstate *st0 = st;
    CHECK(st0 != NULL, "fused: no kernel state kept after the first call");
    CHECK_OK(kernel_run(e.g, r, inp, e.buf[r], &st, &ctx));
    CHECK(st == st0, "fused: the second call replaced the node's state");
    if (st) st->free(st);
    free(ref);
    ex_free(&e);
  }
  /* bf16 program rounds after each instruction like the unfused ops */
  {
    ex_t e;
    ex_init(&e);
    int64_t n = 37;
    ts_tensor x = rinput(&e, TS_BF16, 1, &n), y = rinput(&e, TS_BF16, 1, &n);
    int32_t ins[2] = {x, y};
    ts_tensor m = node(&e, TS_OP_MUL, TS_BF16, 1, &n, 2, ins, NULL);
    int32_t ins2[2] = {m, x};
    ts_tensor a = node(&e, TS_OP_ADD, TS_BF16, 1, &n, 2, ins2, NULL);
    ts_fused *f = malloc(sizeof *f);
    f->n = 2;
    f->ins = calloc(2, sizeof *f->ins);
    f->ins[0] = (ts_fused_instr){.op = TS_OP_MUL, .dtype = TS_BF16, .a = -1, .b = -2};
    f->ins[1] = (ts_fused_instr){.op = TS_OP_ADD, .dtype = TS_BF16, .a = 0, .b = -1};
    ts_attr at = {.fused = f};
    ts_tensor r = node(&e, TS_OP_FUSED, TS_BF16, 1, &n, 2, ins, &at);
    CHECK_OK(run(&e, r));
    CHECK(memcmp(e.buf[a], e.buf[r], (size_t)n * 2) == 0, "bf16 fused == unfused");
    ex_free(&e);
  }
}

/* The GELU gradient as autodiff writes it, times dy (input 2), x = in0 + in1
 * (three copies, as fusion leaves the GPT's bias add) or in0 itself; swap:
 * x/sqrt2 as 1/sqrt2 * x, the same bits but not the pattern fused_plan.c knows. */
static ts_fused *gelu_grad_prog(bool add_x, bool swap) {
  ts_fused *f = malloc(sizeof *f);
  f->ins = calloc(24, sizeof *f->ins);
  int n = 0;
#define E(...) (f->ins[n] = (ts_fused_instr){.dtype = TS_F32, __VA_ARGS__}, n++)
  int32_t x[3];
  for (int u = 0; u < 3; u++) x[u] = add_x ? E(.op = TS_OP_ADD, .a = -1, .b = -2) : -1;
  int32_t c = E(.op = TS_OP_CONSTANT, .value = -0.5);
  int32_t sq = E(.op = TS_OP_MUL, .a = x[0], .b = x[0]);
  int32_t h = E(.op = TS_OP_MUL, .a = sq, .b = c);
  int32_t ex = E(.op = TS_OP_EXP, .a = h);
  int32_t c2 = E(.op = TS_OP_CONSTANT, .value = 0.39894228040143267794);
  int32_t phi = E(.op = TS_OP_MUL, .a = ex, .b = c2);
  int32_t t = E(.op = TS_OP_MUL, .a = x[1], .b = phi);
  int32_t c3 = E(.op = TS_OP_CONSTANT, .value = 0.70710678118654752440);
  int32_t s = swap ? E(.op = TS_OP_MUL, .a = c3, .b = x[2]) : E(.op = TS_OP_MUL, .a = x[2], .b = c3);
  int32_t er = E(.op = TS_OP_ERF, .a = s);
  int32_t one = E(.op = TS_OP_CONSTANT, .value = 1);
  int32_t a1 = E(.op = TS_OP_ADD, .a = er, .b = one);
  int32_t half = E(.op = TS_OP_CONSTANT, .value = 0.5);
  int32_t a = E(.op = TS_OP_MUL, .a = a1, .b = half);
  int32_t gg = E(.op = TS_OP_ADD, .a = a, .b = t);
  E(.op = TS_OP_MUL, .a = -3, .b = gg);
#undef E
  f->n = n;
  return f;
}

/* The GELU gradient done as one step (fused_plan.c) gives the bits of its ten
 * instructions, over x from -12 to 12 and the special values. */
static void test_fused_gelu_grad(void) {
  for (int add_x = 0; add_x < 2; add_x++) {
    ex_t e;
    ex_init(&e);
    int64_t n = 200003;
    ts_tensor x = input(&e, TS_F32, 1, &n), y = rinput(&e, TS_F32, 1, &n), dy = rinput(&e, TS_F32, 1, &n);
    float *xv = e.buf[x], *yv = e.buf[y];
    const float special[] = {NAN, INFINITY, -INFINITY, 0.f, -0.f, 1e-40f, -1e-40f, 1.f, -1.f, 4.f, -4.f,
                             3.9999998f, -3.9999998f, 13.5f, -13.5f, 89.f, 200.f, -200.f, 3e38f, -3e38f};
    int ns = (int)(sizeof special / sizeof *special);
    for (int64_t i = 0; i < n; i++) {
      xv[i] = i < ns ? special[i] : (float)(-12 + 24.0 * (double)i / (double)n);
      if (i < ns) yv[i] = 0;
      else yv[i] *= 1e-3f;
    }
    int32_t ins[3] = {x, y, dy};
    ts_fused *fp = gelu_grad_prog(add_x, false), *fq = gelu_grad_prog(add_x, true);
    int8_t kind[24];
    int32_t arg[24];
    tk_plan pl = {kind, arg};
    ts_dtype dts[3] = {TS_F32, TS_F32, TS_F32};
    tk_fused_plan(fp, dts, &pl);
    int gi = fp->n - 2; /* the gradient's sum */
    CHECK(kind[gi] == TK_INS_GELU_GRAD && arg[gi] == (add_x ? 0 : -1), "gelu grad recognized (x %s)",
          add_x ? "a sum" : "an input");
    CHECK(kind[gi - 1] == TK_INS_SKIP && kind[fp->n - 1] == TK_INS_RUN, "its instructions are skipped");
    tk_fused_plan(fq, dts, &pl);
    for (int i = 0; i < fq->n; i++) CHECK(kind[i] != TK_INS_GELU_GRAD, "swapped operands: not the pattern");
    if (add_x) CHECK(kind[1] == TK_INS_SAME && arg[1] == 0 && kind[2] == TK_INS_SAME, "equal sums shared");
    ts_attr ap = {.fused = fp}, aq = {.fused = fq};
    ts_tensor rp = node(&e, TS_OP_FUSED, TS_F32, 1, &n, 3, ins, &ap);
    ts_tensor rq = node(&e, TS_OP_FUSED, TS_F32, 1, &n, 3, ins, &aq);
    CHECK_OK(run(&e, rq));
    CHECK(memcmp(e.buf[rp], e.buf[rq], (size_t)n * 4) == 0, "gelu grad one step == ten instructions (x %s)",
          add_x ? "a sum" : "an input");
    double worst = 0; /* and it is the gradient */
    for (int64_t i = ns; i < n; i++) {
      double v = (double)xv[i] + (add_x ? (double)yv[i] : 0), dv = ((float *)e.buf[dy])[i];
      double ref = dv * (0.5 * (1 + erf(v / sqrt(2.0))) + v * exp(-v * v / 2) / sqrt(2 * M_PI));
      double err = fabs(((float *)e.buf[rp])[i] - ref);
      if (err > worst) worst = err;
    }
    CHECK(worst < 2e-6, "gelu grad err %g", worst);
    ex_free(&e);
  }
}

/* A bias along the last dim (BROADCAST inner 1) over rows longer than a tile:
 * tiles inside a row read the bias in place, tiles across two rows copy it;
 * both give x + b exactly (f32, f64, i64). */
static void test_fused_bias_rows(void) {
  ts_dtype dts[3] = {TS_F32, TS_F64, TS_I64};
  for (int di = 0; di < 3; di++) {
    ts_dtype dt = dts[di];
    ex_t e;
    ex_init(&e);
    int64_t d = 1031, n = 5 * d; /* 1031: two tiles and a part, so rows start inside tiles */
    ts_tensor x = rinput(&e, dt, 1, &n), b = rinput(&e, dt, 1, &d);
    ts_fused *f = malloc(sizeof *f);
    f->n = 2;
    f->ins = calloc(2, sizeof *f->ins);
    f->ins[0] = (ts_fused_instr){.op = TS_OP_BROADCAST, .dtype = dt, .a = -2, .value = 1};
    f->ins[1] = (ts_fused_instr){.op = TS_OP_ADD, .dtype = dt, .a = -1, .b = 0};
    ts_attr at = {.fused = f};
    int32_t ins[2] = {x, b};
    ts_tensor r = node(&e, TS_OP_FUSED, dt, 1, &n, 2, ins, &at);
    CHECK_OK(run(&e, r));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      if (dt == TS_F32) bad += ((float *)e.buf[r])[i] != ((float *)e.buf[x])[i] + ((float *)e.buf[b])[i % d];
      if (dt == TS_F64) bad += ((double *)e.buf[r])[i] != ((double *)e.buf[x])[i] + ((double *)e.buf[b])[i % d];
      if (dt == TS_I64) bad += ((int64_t *)e.buf[r])[i] != ((int64_t *)e.buf[x])[i] + ((int64_t *)e.buf[b])[i % d];
    }
    CHECK(bad == 0, "bias rows %s: %lld wrong", ts_dtype_name(dt), (long long)bad);
    ex_free(&e);
  }
}

/* ================= reductions ================= */
static void test_reduce(void) {
  for (int trial = 0; trial < 60; trial++) {
    int rank = trial % 5;
    int64_t sh[4];
    for (int d = 0; d < rank; d++) sh[d] = 1 + (int64_t)(urand() * 6);
    ts_dtype dt = trial % 3 == 2 ? TS_F32 : TS_F64;
    ts_reduce_kind kind = (ts_reduce_kind)(trial % 4);
    ts_attr at = {.reduce = kind};
    bool red[4] = {false};
    int64_t osh[4];
    int orank = 0;
    for (int d = 0; d < rank; d++) {
      red[d] = urand() < 0.5;
      if (red[d]) at.dims[at.n_dims++] = d;
      else osh[orank++] = sh[d];
    }
    ex_t e;
    ex_init(&e);
    ts_tensor x = rinput(&e, dt, rank, sh);
    ts_tensor y = node(&e, TS_OP_REDUCE, dt, orank, osh, 1, &x, &at);
    int64_t on = ts_shape_numel(orank, osh), xn = ts_shape_numel(rank, sh), count = xn / on;
    double ref[1300];
    for (int64_t o = 0; o < on; o++) ref[o] = kind == TS_REDUCE_MAX ? -INFINITY : kind == TS_REDUCE_MIN ? INFINITY : 0;
    int64_t ost[4];
    strides(orank, osh, ost);
    for (int64_t i = 0; i < xn; i++) {
      int64_t rem = i, o = 0, od = orank - 1;
      for (int d = rank - 1; d >= 0; d--) {
        int64_t idx = rem % sh[d];
        rem /= sh[d];
        if (!red[d]) o += idx * ost[od--];
      }
      double v = get(&e, x, i);
      if (kind == TS_REDUCE_MAX) ref[o] = fmax(ref[o], v);
      else if (kind == TS_REDUCE_MIN) ref[o] = fmin(ref[o], v);
      else ref[o] += v;
    }
    if (kind == TS_REDUCE_MEAN)
      for (int64_t o = 0; o < on; o++) ref[o] /= (double)count;
    CHECK_OK(run(&e, y));
    CHECK(max_err(&e, y, ref, on) < (dt == TS_F32 ? 1e-6 : 1e-13), "reduce trial %d rank %d err %g", trial, rank, max_err(&e, y, ref, on));
    ex_free(&e);
  }
  /* the fast paths at size: (300, 1000) over last dim and over first dim, f32 */
  for (int dim = 0; dim < 2; dim++) {
    ex_t e;
    ex_init(&e);
    int64_t sh[2] = {300, 1000}, osh[1] = {sh[1 - dim]};
    ts_tensor x = rinput(&e, TS_F32, 2, sh);
    ts_attr at = {.reduce = TS_REDUCE_SUM, .n_dims = 1, .dims = {dim}};
    ts_tensor y = node(&e, TS_OP_REDUCE, TS_F32, 1, osh, 1, &x, &at);
    double *ref = calloc((size_t)osh[0], sizeof *ref);
    for (int64_t i = 0; i < 300; i++)
      for (int64_t j = 0; j < 1000; j++) ref[dim ? i : j] += get(&e, x, i * 1000 + j);
    CHECK_OK(run(&e, y));
    CHECK(max_err(&e, y, ref, osh[0]) < 1e-6, "reduce big dim %d", dim);
    free(ref);
    ex_free(&e);
  }
  /* batch norm's [R, K, R] in memory on 2 threads (36000 elements: parallel),
   * each thread its channels row by row; K = 5 splits 3 + 2 */
  for (int kind = 0; kind < 2; kind++) {
    ex_t e;
    ex_init(&e);
    int64_t sh[3] = {6, 5, 1200}, osh[1] = {5};
    ts_tensor x = rinput(&e, TS_F32, 3, sh);
    ts_attr at = {.reduce = kind ? TS_REDUCE_MAX : TS_REDUCE_SUM, .n_dims = 2, .dims = {0, 2}};
    ts_tensor y = node(&e, TS_OP_REDUCE, TS_F32, 1, osh, 1, &x, &at);
    double ref[5];
    for (int c = 0; c < 5; c++) ref[c] = kind ? -INFINITY : 0;
    for (int64_t i = 0; i < 36000; i++) {
      int c = (int)(i / 1200 % 5);
      ref[c] = kind ? fmax(ref[c], get(&e, x, i)) : ref[c] + get(&e, x, i);
    }
    CHECK_OK(run(&e, y));
    CHECK(max_err(&e, y, ref, 5) < 1e-6, "reduce [R, K, R] kind %d err %g", kind, max_err(&e, y, ref, 5));
    ex_free(&e);
  }
}

/* ================= layout ================= */
static void test_layout(void) {
  ex_t e;
  ex_init(&e);
  int64_t xs[3] = {3, 1, 5};
  ts_tensor x = rinput(&e, TS_F64, 3, xs);
  /* broadcast (3,1,5) -> (2,3,4,5) with dims {1,2,3} */
  int64_t bs[4] = {2, 3, 4, 5};
  ts_attr ab = {.n_dims = 3, .dims = {1, 2, 3}};
  ts_tensor b = node(&e, TS_OP_BROADCAST, TS_F64, 4, bs, 1, &x, &ab);
  /* transpose perm (3,0,2,1): out (5,2,4,3) */
  int64_t ts[4] = {5, 2, 4, 3};
  ts_attr atr = {.n_dims = 4, .dims = {3, 0, 2, 1}};
  ts_tensor t = node(&e, TS_OP_TRANSPOSE, TS_F64, 4, ts, 1, &b, &atr);
  /* slice of t: start (1,0,1,0) limit (5,2,4,3) stride (2,1,2,2) -> (2,2,2,2) */
  int64_t ss[4] = {2, 2, 2, 2};
  ts_attr as = {.start = {1, 0, 1, 0}, .limit = {5, 2, 4, 3}, .stride = {2, 1, 2, 2}};
  ts_tensor s = node(&e, TS_OP_SLICE, TS_F64, 4, ss, 1, &t, &as);
  /* pad x with lo (1,0,2) hi (0,2,1), value 7 -> (4,3,8) */
  int64_t ps[3] = {4, 3, 8};
  ts_attr ap = {.start = {1, 0, 2}, .limit = {0, 2, 1}, .value = 7};
  ts_tensor p = node(&e, TS_OP_PAD, TS_F64, 3, ps, 1, &x, &ap);
  /* concat x, x along axis 2 -> (3,1,10); reshape to (30) */
  int64_t cs[3] = {3, 1, 10}, rsz[1] = {30};
  int32_t cin[2] = {x, x};
  ts_attr ac = {.axis = 2};
  ts_tensor c = node(&e, TS_OP_CONCAT, TS_F64, 3, cs, 2, cin, &ac);
  ts_tensor r = node(&e, TS_OP_RESHAPE, TS_F64, 1, rsz, 1, &c, NULL);
  /* iota along dim 1 of (3,4) i32; splat constant */
  int64_t is[2] = {3, 4};
  ts_attr ai = {.axis = 1};
  ts_tensor io = node(&e, TS_OP_IOTA, TS_I32, 2, is, 0, NULL, &ai);
  ts_attr ak = {.value = -2.5};
  ts_tensor k = node(&e, TS_OP_CONSTANT, TS_F32, 2, is, 0, NULL, &ak);
  CHECK_OK(run(&e, k));
  int bad = 0;
  for (int i0 = 0; i0 < 2; i0++)
    for (int i1 = 0; i1 < 3; i1++)
      for (int i2 = 0; i2 < 4; i2++)
        for (int i3 = 0; i3 < 5; i3++) {
          double want = get(&e, x, i1 * 5 + i3);
          bad += get(&e, b, ((i0 * 3 + i1) * 4 + i2) * 5 + i3) != want;
          bad += get(&e, t, ((i3 * 2 + i0) * 4 + i2) * 3 + i1) != want;
        }
  CHECK(bad == 0, "broadcast / transpose: %d wrong", bad);
  { /* NCHW (2,3,4,5) -> NHWC (2,4,5,3): a 3-element inner run, copied along the source's unit stride */
    ex_t f;
    ex_init(&f);
    int64_t xs4[4] = {2, 3, 4, 5}, ys4[4] = {2, 4, 5, 3};
    ts_tensor x4 = rinput(&f, TS_F64, 4, xs4);
    ts_attr an = {.n_dims = 4, .dims = {0, 2, 3, 1}};
    ts_tensor y4 = node(&f, TS_OP_TRANSPOSE, TS_F64, 4, ys4, 1, &x4, &an);
    CHECK_OK(run(&f, y4));
    int wrong = 0;
    for (int i = 0; i < 120; i++) {
      int n = i / 60, c = i / 20 % 3, h = i / 5 % 4, w = i % 5;
      wrong += get(&f, y4, ((n * 4 + h) * 5 + w) * 3 + c) != get(&f, x4, i);
    }
    CHECK(wrong == 0, "transpose to channels last: %d wrong", wrong);
    ex_free(&f);
  }
  bad = 0;
  for (int i = 0; i < 16; i++) {
    int a0 = i >> 3, a1 = (i >> 2) & 1, a2 = (i >> 1) & 1, a3 = i & 1;
    int t0 = 1 + 2 * a0, t1 = a1, t2 = 1 + 2 * a2, t3 = 2 * a3;
    bad += get(&e, s, i) != get(&e, t, ((t0 * 2 + t1) * 4 + t2) * 3 + t3);
  }
  CHECK(bad == 0, "slice: %d wrong", bad);
  bad = 0;
  for (int i0 = 0; i0 < 4; i0++)
    for (int i1 = 0; i1 < 3; i1++)
      for (int i2 = 0; i2 < 8; i2++) {
        int x0 = i0 - 1, x1 = i1, x2 = i2 - 2;
        double want = x0 >= 0 && x0 < 3 && x1 < 1 && x2 >= 0 && x2 < 5 ? get(&e, x, x0 * 5 + x2) : 7;
        bad += get(&e, p, (i0 * 3 + i1) * 8 + i2) != want;
      }
  CHECK(bad == 0, "pad: %d wrong", bad);
  bad = 0;
  for (int i = 0; i < 30; i++) bad += get(&e, r, i) != get(&e, x, (i / 10) * 5 + (i % 10) % 5);
  for (int i = 0; i < 12; i++) bad += get(&e, io, i) != i % 4 || get(&e, k, i) != -2.5;
  CHECK(bad == 0, "concat / iota / constant: %d wrong", bad);
  ex_free(&e);
}

/* ================= dot_general ================= */
/* Reference: out[batch, lhs free, rhs free] = sum over contracting index. */
static void ref_dot(const ex_t *e, ts_tensor a, ts_tensor b, const ts_dot_dims *dd, double *out,
                    int orank, const int64_t *osh) {
  const ts_node *A = ts_node_at(e->g, a), *B = ts_node_at(e->g, b);
  int fa[8], fb[8], nfa = 0, nfb = 0;
  for (int d = 0; d < A->rank; d++) {
    bool used = false;
    for (int i = 0; i < dd->n_batch; i++) used |= dd->lhs_batch[i] == d;
    for (int i = 0; i < dd->n_contract; i++) used |= dd->lhs_contract[i] == d;
    if (!used) fa[nfa++] = d;
  }
  for (int d = 0; d < B->rank; d++) {
    bool used = false;
    for (int i = 0; i < dd->n_batch; i++) used |= dd->rhs_batch[i] == d;
    for (int i = 0; i < dd->n_contract; i++) used |= dd->rhs_contract[i] == d;
    if (!used) fb[nfb++] = d;
  }
  int64_t ast[8], bst[8], on = ts_shape_numel(orank, osh), kn = 1;
  strides(A->rank, A->shape, ast), strides(B->rank, B->shape, bst);
  for (int i = 0; i < dd->n_contract; i++) kn *= A->shape[dd->lhs_contract[i]];
  for (int64_t o = 0; o < on; o++) {
    int64_t idx[8], rem = o;
    for (int d = orank - 1; d >= 0; d--) idx[d] = rem % osh[d], rem /= osh[d];
    int64_t ao = 0, bo = 0;
    for (int i = 0; i < dd->n_batch; i++) ao += idx[i] * ast[dd->lhs_batch[i]], bo += idx[i] * bst[dd->rhs_batch[i]];
    for (int i = 0; i < nfa; i++) ao += idx[dd->n_batch + i] * ast[fa[i]];
    for (int i = 0; i < nfb; i++) bo += idx[dd->n_batch + nfa + i] * bst[fb[i]];
    double s = 0;
    for (int64_t k = 0; k < kn; k++) {
      int64_t kr = k, ak = 0, bk = 0;
      for (int i = dd->n_contract - 1; i >= 0; i--) {
        int64_t sz = A->shape[dd->lhs_contract[i]], ki = kr % sz;
        kr /= sz;
        ak += ki * ast[dd->lhs_contract[i]], bk += ki * bst[dd->rhs_contract[i]];
      }
      s += get(e, a, ao + ak) * get(e, b, bo + bk);
    }
    out[o] = s;
  }
}

typedef struct {
  int ra, rb;
  int64_t as[4], bs[4];
  ts_dot_dims d;
  int ro;
  int64_t os[4];
} dot_case;

static void test_dot(void) {
  dot_case cases[] = {
      {2, 2, {7, 13}, {13, 5}, {0, 1, {0}, {0}, {1}, {0}}, 2, {7, 5}},          /* plain */
      {2, 2, {13, 7}, {13, 5}, {0, 1, {0}, {0}, {0}, {0}}, 2, {7, 5}},          /* x^T dy */
      {2, 2, {7, 13}, {5, 13}, {0, 1, {0}, {0}, {1}, {1}}, 2, {7, 5}},          /* dy W^T */
      {3, 3, {3, 7, 13}, {3, 13, 5}, {1, 1, {0}, {0}, {2}, {1}}, 3, {3, 7, 5}}, /* batched */
      {3, 3, {7, 3, 13}, {13, 3, 5}, {1, 1, {1}, {1}, {2}, {0}}, 3, {3, 7, 5}}, /* batch in the middle */
      {3, 3, {7, 4, 6}, {6, 4, 5}, {0, 2, {0}, {0}, {1, 2}, {1, 0}}, 2, {7, 5}}, /* 2 contract dims, needs a copy */
      {4, 3, {2, 3, 7, 13}, {3, 13, 2}, {2, 1, {0, 1}, {2, 0}, {3}, {1}}, 3, {2, 3, 7}}, /* 2 batch, rhs free empty */
      {1, 1, {13}, {13}, {0, 1, {0}, {0}, {0}, {0}}, 0, {0}},                   /* vector . vector */
  };
  ts_dtype dts[3] = {TS_F64, TS_F32, TS_BF16};
  for (int di = 0; di < 3; di++)
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
      dot_case *k = &cases[c];
      ex_t e;
      ex_init(&e);
      ts_tensor a = rinput(&e, dts[di], k->ra, k->as), b = rinput(&e, dts[di], k->rb, k->bs);
      ts_attr at = {.dot = k->d};
      int32_t ins[2] = {a, b};
      ts_tensor y = node(&e, TS_OP_DOT, dts[di], k->ro, k->os, 2, ins, &at);
      double ref[512];
      ref_dot(&e, a, b, &k->d, ref, k->ro, k->os);
      CHECK_OK(run(&e, y));
      /* again through the cached state, into a cleared output */
      memset(e.buf[y], 0, (size_t)ts_tensor_numel(e.g, y) * ts_dtype_size(dts[di]));
      const void *in[2] = {e.buf[a], e.buf[b]};
      ts_kctx ctx = {.num_threads = 2};
      CHECK_OK(kernel_run(e.g, y, in, e.buf[y], &e.st[y], &ctx));
      double tol = dts[di] == TS_F64 ? 1e-13 : dts[di] == TS_F32 ? 1e-5 : 2e-2;
      double err = max_err(&e, y, ref, ts_shape_numel(k->ro, k->os));
      CHECK(err < tol, "dot case %zu %s err %g", c, ts_dtype_name(dts[di]), err);
      CHECK(dts[di] == TS_F64 || e.st[y] != NULL, "dot case %zu %s: no oneDNN primitive cached", c, ts_dtype_name(dts[di]));
      ex_free(&e);
    }
}

/* ================= pooling ================= */
static void test_pool(void) {
  /* the third: ResNet's stem pool (3x3, stride 2, pad 1), which has its own unrolled path */
  ts_pool_params cfgs[3] = {{{3, 2}, {2, 2}, {1, 1}, TS_LAYOUT_NCHW}, {{2, 2}, {2, 2}, {0, 0}, TS_LAYOUT_NCHW},
                            {{3, 3}, {2, 2}, {1, 1}, TS_LAYOUT_NCHW}};
  for (int ci = 0; ci < 3; ci++)
    for (int di = 0; di < 2; di++) {
      ts_pool_params pp = cfgs[ci];
      int KH = pp.kernel[0], KW = pp.kernel[1], PH = pp.pad[0], PW = pp.pad[1];
      int64_t H = 7, W = 6, OH = (H + 2 * PH - KH) / 2 + 1, OW = (W + 2 * PW - KW) / 2 + 1;
      int64_t xs[4] = {2, 3, H, W}, ys[4] = {2, 3, OH, OW}, xn = 6 * H * W, yn = 6 * OH * OW;
      ts_dtype dt = di ? TS_F32 : TS_F64;
      ex_t e;
      ex_init(&e);
      ts_tensor x = rinput(&e, dt, 4, xs), dy = rinput(&e, dt, 4, ys);
      /* ties: a plane of equal values routes every window's gradient to its first element */
      for (int64_t i = 0; i < H * W; i++) {
        if (dt == TS_F64) ((double *)e.buf[x])[i] = 0.25;
        else ((float *)e.buf[x])[i] = 0.25f;
      }
      ts_attr at = {.pool = pp};
      int32_t gi[2] = {x, dy};
      ts_tensor mp = node(&e, TS_OP_MAXPOOL, dt, 4, ys, 1, &x, &at);
      ts_tensor ap = node(&e, TS_OP_AVGPOOL, dt, 4, ys, 1, &x, &at);
      ts_tensor mg = node(&e, TS_OP_MAXPOOL_GRAD, dt, 4, xs, 2, gi, &at);
      ts_tensor ag = node(&e, TS_OP_AVGPOOL_GRAD, dt, 4, xs, 1, &dy, &at);
      CHECK_OK(run(&e, ag));
      double rm[200], ra[200], rmg[300] = {0}, rag[300] = {0};
      for (int64_t pl = 0; pl < 6; pl++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            double m = -INFINITY, s = 0;
            int64_t arg = -1, yi = (pl * OH + oh) * OW + ow;
            for (int i = 0; i < KH; i++)
              for (int j = 0; j < KW; j++) {
                int64_t h = oh * 2 - PH + i, w = ow * 2 - PW + j;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                int64_t xi = (pl * H + h) * W + w;
                double v = get(&e, x, xi);
                s += v;
                rag[xi] += get(&e, dy, yi) / (KH * KW);
                if (v > m) m = v, arg = xi;
              }
            rm[yi] = m, ra[yi] = s / (KH * KW);
            rmg[arg] += get(&e, dy, yi);
          }
      double tol = di ? 1e-6 : 1e-14;
      CHECK(max_err(&e, mp, rm, yn) < tol, "maxpool cfg %d %s", ci, ts_dtype_name(dt));
      CHECK(max_err(&e, ap, ra, yn) < tol, "avgpool cfg %d %s", ci, ts_dtype_name(dt));
      CHECK(max_err(&e, mg, rmg, xn) < tol, "maxpool grad cfg %d %s err %g", ci, ts_dtype_name(dt), max_err(&e, mg, rmg, xn));
      CHECK(max_err(&e, ag, rag, xn) < tol, "avgpool grad cfg %d %s", ci, ts_dtype_name(dt));
      ex_free(&e);
    }
}

/* ================= gather / scatter_add ================= */
static void test_index(void) {
  ex_t e;
  ex_init(&e);
  int64_t ts[2] = {10, 3}, is[2] = {2, 2}, os[3] = {2, 2, 3};
  ts_tensor table = rinput(&e, TS_F32, 2, ts);
  ts_tensor idx = input(&e, TS_I64, 2, is);
  int64_t iv[4] = {9, 0, 9, 4};
  memcpy(e.buf[idx], iv, sizeof iv);
  ts_tensor upd = rinput(&e, TS_F32, 3, os);
  int32_t gin[2] = {table, idx}, sin[3] = {table, idx, upd};
  ts_tensor gt = node(&e, TS_OP_GATHER, TS_F32, 3, os, 2, gin, NULL);
  ts_tensor sc = node(&e, TS_OP_SCATTER_ADD, TS_F32, 2, ts, 3, sin, NULL);
  CHECK_OK(run(&e, sc));
  double rg[12], rsc[30];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) rg[i * 3 + j] = get(&e, table, iv[i] * 3 + j);
  for (int i = 0; i < 30; i++) rsc[i] = get(&e, table, i);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) rsc[iv[i] * 3 + j] += get(&e, upd, i * 3 + j);
  CHECK(max_err(&e, gt, rg, 12) == 0, "gather");
  CHECK(max_err(&e, sc, rsc, 30) < 1e-6, "scatter_add");
  ex_free(&e);
  /* out of range */
  ex_init(&e);
  int64_t V[2] = {60000, 2}, n16 = 16, o2[2] = {16, 2};
  ts_tensor big = input(&e, TS_F32, 2, V);
  memset(e.buf[big], 0, 60000 * 2 * 4);
  ts_tensor id32 = input(&e, TS_I32, 1, &n16);
  for (int i = 0; i < 16; i++) ((int32_t *)e.buf[id32])[i] = i == 12 ? 70000 : i;
  int32_t gin2[2] = {big, id32};
  ts_tensor g2 = node(&e, TS_OP_GATHER, TS_F32, 2, o2, 2, gin2, NULL);
  CHECK(run(&e, g2) == -1, "out-of-range gather fails");
  CHECK(strcmp(ts_last_error(), "gather: index 70000 at position 12 is out of range [0, 60000)") == 0,
        "message: %s", ts_last_error());
  ex_free(&e);
}

/* ================= RNG ================= */
static void test_rng(void) {
  for (int normal = 0; normal < 2; normal++)
    for (int di = 0; di < 2; di++) {
      ts_dtype dt = di ? TS_F32 : TS_F64;
      ex_t e;
      ex_init(&e);
      int64_t n = 100000;
      ts_tensor seed = input(&e, TS_I64, 0, NULL);
      *(int64_t *)e.buf[seed] = 1234;
      ts_op op = normal ? TS_OP_RNG_NORMAL : TS_OP_RNG_UNIFORM;
      ts_attr k1 = {.key = 7}, k2 = {.key = 8};
      ts_tensor a = node(&e, op, dt, 1, &n, 1, &seed, &k1);
      ts_tensor b = node(&e, op, dt, 1, &n, 1, &seed, &k1);
      ts_tensor c = node(&e, op, dt, 1, &n, 1, &seed, &k2);
      CHECK_OK(run(&e, c));
      size_t bytes = (size_t)n * ts_dtype_size(dt);
      CHECK(memcmp(e.buf[a], e.buf[b], bytes) == 0, "same seed and key -> same numbers");
      CHECK(memcmp(e.buf[a], e.buf[c], bytes) != 0, "different key -> different numbers");
      double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
      for (int64_t i = 0; i < n; i++) {
        double v = get(&e, a, i);
        s += v, s2 += v * v, lo = fmin(lo, v), hi = fmax(hi, v);
      }
      double mean = s / n, var = s2 / n - mean * mean;
      if (normal) {
        CHECK(fabs(mean) < 0.02 && fabs(var - 1) < 0.03, "normal %s mean %g var %g", ts_dtype_name(dt), mean, var);
      } else {
        CHECK(fabs(mean - 0.5) < 0.01 && fabs(var - 1.0 / 12) < 0.005 && lo >= 0 && hi < 1,
              "uniform %s mean %g var %g range [%g, %g]", ts_dtype_name(dt), mean, var, lo, hi);
      }
      ex_free(&e);
    }
  /* another seed changes the stream; an i32 seed equals the same i64 seed */
  ex_t e;
  ex_init(&e);
  int64_t n = 64;
  ts_tensor s64 = input(&e, TS_I64, 0, NULL), s32 = input(&e, TS_I32, 0, NULL), s2 = input(&e, TS_I64, 0, NULL);
  *(int64_t *)e.buf[s64] = -5, *(int32_t *)e.buf[s32] = -5, *(int64_t *)e.buf[s2] = 6;
  ts_attr k = {.key = 1};
  ts_tensor a = node(&e, TS_OP_RNG_UNIFORM, TS_F32, 1, &n, 1, &s64, &k);
  ts_tensor b = node(&e, TS_OP_RNG_UNIFORM, TS_F32, 1, &n, 1, &s32, &k);
  ts_tensor c = node(&e, TS_OP_RNG_UNIFORM, TS_F32, 1, &n, 1, &s2, &k);
  CHECK_OK(run(&e, c));
  CHECK(memcmp(e.buf[a], e.buf[b], 256) == 0 && memcmp(e.buf[a], e.buf[c], 256) != 0, "rng seeds");
  ex_free(&e);
}


/* A shard (attr.global) equals its block of the whole tensor bit for bit, for
 * blocks whose runs of consecutive global indices are the whole block (dim 0
 * sharded), a dim's part (dim 2), a few elements (dims 0 and 3) and lengths
 * that cross the kernel's parallel chunks at odd places (dim 1). */
static void test_rng_shards(void) {
  static const int64_t gs[4] = {9, 5, 70, 13};
  static const int64_t blocks[][2][4] = {
      {{4, 0, 0, 0}, {5, 5, 70, 13}}, {{0, 0, 35, 0}, {9, 5, 35, 13}}, {{3, 0, 0, 6}, {3, 5, 70, 7}},
      {{0, 2, 0, 0}, {9, 3, 70, 13}}, {{0, 0, 0, 0}, {9, 5, 70, 13}}, {{8, 4, 69, 12}, {1, 1, 1, 1}}};
  int nb = (int)(sizeof blocks / sizeof blocks[0]);
  for (int normal = 0; normal < 2; normal++)
    for (int di = 0; di < 2; di++) {
      ts_dtype dt = di ? TS_F32 : TS_F64;
      size_t es = ts_dtype_size(dt);
      ex_t e;
      ex_init(&e);
      ts_tensor seed = input(&e, TS_I64, 0, NULL);
      *(int64_t *)e.buf[seed] = 99;
      ts_op op = normal ? TS_OP_RNG_NORMAL : TS_OP_RNG_UNIFORM;
      ts_attr k = {.key = 3};
      ts_tensor whole = node(&e, op, dt, 4, gs, 1, &seed, &k);
      ts_tensor sh[8];
      for (int b = 0; b < nb; b++) {
        ts_attr a = {.key = 3, .global = true};
        memcpy(a.goffset, blocks[b][0], sizeof a.goffset[0] * 4);
        memcpy(a.gshape, gs, sizeof a.gshape[0] * 4);
        sh[b] = node(&e, op, dt, 4, blocks[b][1], 1, &seed, &a);
      }
      CHECK_OK(run(&e, sh[nb - 1]));
      for (int b = 0; b < nb; b++) {
        const int64_t *off = blocks[b][0], *ls = blocks[b][1];
        int64_t n = ls[0] * ls[1] * ls[2] * ls[3], bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
          int64_t r = i, gi = 0, stride = 1;
          for (int d = 3; d >= 0; d--) {
            gi += (r % ls[d] + off[d]) * stride;
            r /= ls[d];
            stride *= gs[d];
          }
          if (memcmp((char *)e.buf[sh[b]] + i * es, (char *)e.buf[whole] + gi * es, es)) bad = i;
        }
        CHECK(bad < 0, "%s %s shard %d equals its block of the whole (first difference at %lld)",
              normal ? "normal" : "uniform", ts_dtype_name(dt), b, (long long)bad);
      }
      ex_free(&e);
    }
}

/* ================= integer and narrow dtypes ================= */
static void test_dtypes(void) {
  ex_t e;
  ex_init(&e);
  int64_t sh[2] = {5, 7}, s5[1] = {5}, st[2] = {7, 5};
  ts_tensor x = rinput(&e, TS_I32, 2, sh);
  ts_attr as = {.reduce = TS_REDUCE_SUM, .n_dims = 1, .dims = {1}}, am = as;
  am.reduce = TS_REDUCE_MAX;
  ts_tensor rs_ = node(&e, TS_OP_REDUCE, TS_I32, 1, s5, 1, &x, &as);
  ts_tensor rm = node(&e, TS_OP_REDUCE, TS_I32, 1, s5, 1, &x, &am);
  ts_tensor b = rinput(&e, TS_BF16, 2, sh);
  ts_attr ap = {.n_dims = 2, .dims = {1, 0}};
  ts_tensor bt = node(&e, TS_OP_TRANSPOSE, TS_BF16, 2, st, 1, &b, &ap);
  ts_tensor u = node(&e, TS_OP_CONVERT, TS_U8, 2, sh, 1, &x, NULL);
  ts_tensor ut = node(&e, TS_OP_TRANSPOSE, TS_U8, 2, st, 1, &u, &ap);
  int64_t cs[2] = {15, 7};
  int32_t cin[3] = {x, x, x};
  ts_attr ac = {.axis = 0};
  ts_tensor c = node(&e, TS_OP_CONCAT, TS_I32, 2, cs, 3, cin, &ac);
  /* an i64 scalar beyond 2^53 broadcast exactly */
  ts_tensor big = input(&e, TS_I64, 0, NULL), v = input(&e, TS_I64, 1, s5);
  *(int64_t *)e.buf[big] = ((int64_t)1 << 60) + 1;
  for (int i = 0; i < 5; i++) ((int64_t *)e.buf[v])[i] = i;
  int32_t ain[2] = {v, big};
  ts_tensor add = node(&e, TS_OP_ADD, TS_I64, 1, s5, 2, ain, NULL);
  CHECK_OK(run(&e, add));
  int bad = 0;
  for (int i = 0; i < 5; i++) {
    int64_t sum = 0, mx = INT64_MIN;
    for (int j = 0; j < 7; j++) {
      int64_t xv = ((int32_t *)e.buf[x])[i * 7 + j];
      sum += xv, mx = xv > mx ? xv : mx;
      bad += get(&e, bt, j * 5 + i) != get(&e, b, i * 7 + j);
      bad += ((uint8_t *)e.buf[ut])[j * 5 + i] != (uint8_t)xv; /* int -> int wraps */
      for (int k = 0; k < 3; k++) bad += get(&e, c, (k * 5 + i) * 7 + j) != xv;
    }
    bad += ((int32_t *)e.buf[rs_])[i] != sum || ((int32_t *)e.buf[rm])[i] != mx;
    bad += ((int64_t *)e.buf[add])[i] != ((int64_t)1 << 60) + 1 + i;
  }
  CHECK(bad == 0, "integer / bf16 / u8 kernels: %d wrong", bad);
  ex_free(&e);
}

int main(void) {
  rs = ts_test_init("test_kernels", 42);
  test_elementwise();
  test_fused();
  test_fused_gelu_grad();
  test_fused_bias_rows();
  test_reduce();
  test_layout();
  test_dot();
  test_pool();
  test_index();
  test_rng();
  test_rng_shards();
  test_dtypes();
  return ts_test_finish();
}
