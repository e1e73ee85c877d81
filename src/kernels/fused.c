/* fused.c — the elementwise program evaluator behind TS_OP_FUSED and every
 * single elementwise op (a one-instruction program).
 *
 * The program runs tile by tile (TILE elements): each instruction writes a
 * tile-sized temporary in its compute type — float for f32/bf16/f16 (bf16 and
 * f16 results are rounded after every instruction, so a fused program matches
 * the unfused ops), double for f64, int64 for the integer types (wrapped to
 * the instruction's dtype after every instruction). f32/f64/i64 operands are
 * read in place and the last instruction writes straight into the output when
 * its storage is the compute type. Tiles are split over OpenMP threads.
 * fused_plan.c decides which instructions share an earlier one's tile,
 * which are skipped, and where the GELU gradient runs as one step; programs
 * fused_fast.c matches (batch-norm apply and gradient terms, converts, the
 * optimizer's terms) run there instead, in one pass (fused reductions too).
 * A FUSED node decides that once, on its first call (its kernel state:
 * fused_state); a single op, a one-instruction program, on every call.
 * A FUSED node with attr.n_dims > 0 is a fused reduction: its f32 result is
 * summed (or averaged) over attr.dims by reduce.c, run by run, never stored. */
#include <omp.h>
#include <stdlib.h>

#include "kernels/bf16_round.h"
#include "kernels/kernels_internal.h"
#include "kernels/reduce_src.h"
#include "kernels/vexpf.h"

#define TILE 512

enum { C_F32, C_F64, C_INT };

/* -O2 vectorizes only loops that need no runtime alias or trip-count checks;
 * `omp simd` vectorizes these anyway (operands may be the same array, never
 * overlapping at different offsets). */
#define SIMD _Pragma("omp simd")
#define LOOP(...)                                                                           \
  {                                                                                         \
    SIMD for (int j = 0; j < n; j++) { __VA_ARGS__; }                                       \
  }                                                                                         \
  break;

static int cls(ts_dtype dt) {
  if (dt == TS_F64) return C_F64;
  if (dt == TS_F32 || dt == TS_BF16 || dt == TS_F16) return C_F32;
  return C_INT;
}

static void round_half(ts_dtype dt, float *x, int n) {
  if (dt == TS_BF16) {
    SIMD for (int j = 0; j < n; j++) x[j] = bf16_round(x[j]);
  } else if (dt == TS_F16)
    for (int j = 0; j < n; j++) x[j] = ts_f16_to_f32(ts_f32_to_f16(x[j]));
}


/* erff that vectorizes (libm's doesn't: 15-60 ns an element, most of a
 * GPT's GELU). |x| < 1: the Maclaurin series to x^21 (truncation < 1e-8,
 * relative, so erf(x) ~ 2x/sqrt(pi) keeps its digits near 0); above:
 * Abramowitz & Stegun 7.1.28, 1 - (1 + a1 t + ... + a6 t^6)^-16 (absolute
 * error <= 3e-7); 1 from |x| >= 4 (1 - erf(4) = 1.5e-8). */
static inline float verff(float x) {
  float ax = x < 0 ? -x : x, x2 = x * x;
  float s = -1.f / 76204800.f; /* (-1)^n / (n! (2n + 1)), n = 10 .. 0, in x^2 */
  s = s * x2 + 1.f / 6894720.f;
  s = s * x2 - 1.f / 685440.f;
  s = s * x2 + 1.f / 75600.f;
  s = s * x2 - 1.f / 9360.f;
  s = s * x2 + 1.f / 1320.f;
  s = s * x2 - 1.f / 216.f;
  s = s * x2 + 1.f / 42.f;
  s = s * x2 - 1.f / 10.f;
  s = s * x2 + 1.f / 3.f;
  s = 1.f - x2 * s;
  float small = 1.12837916709551257f * x * s;
  float p = 0.0000430638f;
  p = p * ax + 0.0002765672f;
  p = p * ax + 0.0001520143f;
  p = p * ax + 0.0092705272f;
  p = p * ax + 0.0422820123f;
  p = p * ax + 0.0705230784f;
  p = p * ax + 1.f;
  p = p * p, p = p * p, p = p * p, p = p * p; /* ^16 */
  float big = 1.f - 1.f / p;
  big = ax >= 4.f ? 1.f : big;
  big = x < 0 ? -big : big;
  return x != x ? x : ax < 1.f ? small : big;
}

/* ---- float unary / binary, generated for float and double ---- */
#define FLOAT_OPS(T, SUF, EXP, LOG, LOG1P, TANH, SQRT, ERF, POW)                           \
  static void unary_##SUF(ts_op op, const T *a, T *d, int n) {                            \
    switch (op) {                                                                          \
      case TS_OP_NEG: LOOP(d[j] = -a[j])                     \
      case TS_OP_ABS: LOOP(d[j] = a[j] < 0 ? -a[j] : a[j])   \
      case TS_OP_EXP: LOOP(d[j] = EXP(a[j]))                 \
      case TS_OP_LOG: LOOP(d[j] = LOG(a[j]))                 \
      case TS_OP_LOG1P: LOOP(d[j] = LOG1P(a[j]))             \
      case TS_OP_TANH: LOOP(d[j] = TANH(a[j]))               \
      case TS_OP_SQRT: LOOP(d[j] = SQRT(a[j]))               \
      case TS_OP_RSQRT: LOOP(d[j] = (T)1 / SQRT(a[j]))       \
      case TS_OP_ERF: LOOP(d[j] = ERF(a[j]))                 \
      case TS_OP_GELU: /* (x/2)(erf(x/sqrt 2) + 1), as the erf composite was */               \
        LOOP(d[j] = a[j] * (T)0.5 * (ERF(a[j] * (T)0.70710678118654752440) + (T)1))        \
      case TS_OP_SIGMOID: /* exp of -|x| only: no overflow for large |x| */                \
        LOOP(T x = a[j]; T e = EXP(x < 0 ? x : -x); T r = (T)1 / ((T)1 + e);               \
             d[j] = x >= 0 ? r : e * r)                                                    \
      default: break;                                                                      \
    }                                                                                      \
  }                                                                                        \
  static void binary_##SUF(ts_op op, const T *a, const T *b, T *d, int n) {               \
    switch (op) {                                                                          \
      case TS_OP_ADD: LOOP(d[j] = a[j] + b[j])               \
      case TS_OP_SUB: LOOP(d[j] = a[j] - b[j])               \
      case TS_OP_MUL: LOOP(d[j] = a[j] * b[j])               \
      case TS_OP_DIV: LOOP(d[j] = a[j] / b[j])               \
      /* NaN in either operand propagates (like torch.maximum) */                          \
      case TS_OP_MAX: LOOP(d[j] = (a[j] > b[j] || a[j] != a[j]) ? a[j] : b[j])             \
      case TS_OP_MIN: LOOP(d[j] = (a[j] < b[j] || a[j] != a[j]) ? a[j] : b[j])             \
      case TS_OP_POW: LOOP(d[j] = POW(a[j], b[j]))           \
      default: break;                                                                      \
    }                                                                                      \
  }                                                                                        \
  CMPSEL(T, SUF)

#define CMPSEL(T, SUF)                                                                     \
  static void compare_##SUF(ts_cmp c, const T *a, const T *b, int64_t *d, int n) {        \
    switch (c) {                                                                           \
      case TS_CMP_EQ: LOOP(d[j] = a[j] == b[j])              \
      case TS_CMP_NE: LOOP(d[j] = a[j] != b[j])              \
      case TS_CMP_LT: LOOP(d[j] = a[j] < b[j])               \
      case TS_CMP_LE: LOOP(d[j] = a[j] <= b[j])              \
      case TS_CMP_GT: LOOP(d[j] = a[j] > b[j])               \
      case TS_CMP_GE: LOOP(d[j] = a[j] >= b[j])              \
    }                                                                                      \
  }                                                                                        \
  static void select_##SUF(const int64_t *p, const T *a, const T *b, T *d, int n) {       \
    SIMD for (int j = 0; j < n; j++) d[j] = p[j] ? a[j] : b[j];                            \
  }

FLOAT_OPS(float, f32, vexpf, logf, log1pf, tanhf, sqrtf, verff, powf)
FLOAT_OPS(double, f64, exp, log, log1p, tanh, sqrt, erf, pow)
CMPSEL(int64_t, i64)

/* ---- integers (int64 compute, wrapped to the dtype afterwards; no UB) ---- */
static int64_t ineg(int64_t a) { return (int64_t)(0 - (uint64_t)a); }
static int64_t ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (int64_t)r;
}

static void unary_int(ts_op op, ts_dtype dt, const int64_t *a, int64_t *d, int n) {
  for (int j = 0; j < n; j++) {
    int64_t x = a[j];
    switch (op) {
      case TS_OP_NEG: d[j] = ineg(x); break;
      case TS_OP_ABS: d[j] = x < 0 ? ineg(x) : x; break;
      default: { /* float functions on integers: compute in double, truncate */
        double v = (double)x, r;
        unary_f64(op, &v, &r, 1);
        d[j] = tk_f2i(r, dt == TS_I64 ? TS_I64 : TS_I32);
      }
    }
  }
}

static void binary_int(ts_op op, const int64_t *a, const int64_t *b, int64_t *d, int n) {
  switch (op) {
    case TS_OP_ADD: LOOP(d[j] = (int64_t)((uint64_t)a[j] + (uint64_t)b[j]))
    case TS_OP_SUB: LOOP(d[j] = (int64_t)((uint64_t)a[j] - (uint64_t)b[j]))
    case TS_OP_MUL: LOOP(d[j] = (int64_t)((uint64_t)a[j] * (uint64_t)b[j]))
    case TS_OP_DIV: /* x / 0 = 0; INT64_MIN / -1 wraps */
      for (int j = 0; j < n; j++)
        d[j] = b[j] == 0 ? 0 : b[j] == -1 ? ineg(a[j]) : a[j] / b[j];
      break;
    case TS_OP_MAX: LOOP(d[j] = a[j] > b[j] ? a[j] : b[j])
    case TS_OP_MIN: LOOP(d[j] = a[j] < b[j] ? a[j] : b[j])
    case TS_OP_POW: LOOP(d[j] = ipow(a[j], b[j]))
    default: break;
  }
}

/* ---- loading external tiles into compute type ---- */
static void load_tile(ts_dtype dt, const void *src, int64_t off, int n, int c, void *dst) {
  if (c == C_F32) {
    float *d = dst;
    if (dt == TS_BF16) {
      const uint16_t *s = (const uint16_t *)src + off;
      SIMD for (int j = 0; j < n; j++) d[j] = ts_bf16_to_f32(s[j]);
    } else if (dt == TS_F16) {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int j = 0; j < n; j++) d[j] = ts_f16_to_f32(s[j]);
    } else {
      memcpy(d, (const float *)src + off, (size_t)n * 4);
    }
  } else if (c == C_F64) {
    memcpy(dst, (const double *)src + off, (size_t)n * 8);
  } else {
    int64_t *d = dst;
    if (dt == TS_BOOL) { /* masks (a compare kept for a select and its gradient): a vector loop */
      const uint8_t *s = (const uint8_t *)src + off;
      SIMD for (int j = 0; j < n; j++) d[j] = s[j] != 0;
    } else if (dt == TS_I32) {
      const int32_t *s = (const int32_t *)src + off;
      SIMD for (int j = 0; j < n; j++) d[j] = s[j];
    } else {
      for (int j = 0; j < n; j++) d[j] = tk_load_i64(dt, src, off + j);
    }
  }
}

static void store_tile(ts_dtype dt, const void *src, int n, void *out, int64_t off) {
  int c = cls(dt);
  if (c == C_F32) {
    const float *s = src;
    if (dt == TS_BF16) {
      uint16_t *d = (uint16_t *)out + off;
      SIMD for (int j = 0; j < n; j++) d[j] = (uint16_t)bf16_bits(s[j]);
    } else if (dt == TS_F16) {
      uint16_t *d = (uint16_t *)out + off;
      for (int j = 0; j < n; j++) d[j] = ts_f32_to_f16(s[j]);
    } else {
      memcpy((float *)out + off, s, (size_t)n * 4);
    }
  } else if (c == C_F64) {
    memcpy((double *)out + off, src, (size_t)n * 8);
  } else {
    const int64_t *s = src;
    if (dt == TS_BOOL) {
      uint8_t *d = (uint8_t *)out + off;
      SIMD for (int j = 0; j < n; j++) d[j] = s[j] != 0;
    } else {
      for (int j = 0; j < n; j++) tk_store_i64(dt, out, off + j, s[j]);
    }
  }
}

/* CONVERT of one tile from (class ca, dtype fa) to dtype to. */
static void convert_tile(int ca, const void *a, ts_dtype to, void *d, int n) {
  int cd = cls(to);
  if (ca == C_F32 && to == TS_BF16) { /* one pass (autocast's roundings of f32 activations) */
    const float *s = a;
    float *o = d;
    SIMD for (int j = 0; j < n; j++) o[j] = bf16_round(s[j]);
  } else if (ca == C_F32 && cd == C_F32) {
    memmove(d, a, (size_t)n * 4);
    round_half(to, d, n);
  } else if (ca == C_F32 && cd == C_F64) {
    SIMD for (int j = 0; j < n; j++) ((double *)d)[j] = ((const float *)a)[j];
  } else if (ca == C_F64 && cd == C_F32) {
    SIMD for (int j = 0; j < n; j++) ((float *)d)[j] = (float)((const double *)a)[j];
    round_half(to, d, n);
  } else if (ca == C_F64 && cd == C_F64) {
    memmove(d, a, (size_t)n * 8);
  } else if (ca == C_F32 && cd == C_INT) {
    for (int j = 0; j < n; j++) ((int64_t *)d)[j] = tk_f2i(((const float *)a)[j], to);
  } else if (ca == C_F64 && cd == C_INT) {
    for (int j = 0; j < n; j++) ((int64_t *)d)[j] = tk_f2i(((const double *)a)[j], to);
  } else if (ca == C_INT && cd == C_F32) {
    SIMD for (int j = 0; j < n; j++) ((float *)d)[j] = (float)((const int64_t *)a)[j];
    round_half(to, d, n);
  } else if (ca == C_INT && cd == C_F64) {
    SIMD for (int j = 0; j < n; j++) ((double *)d)[j] = (double)((const int64_t *)a)[j];
  } else {
    for (int j = 0; j < n; j++) ((int64_t *)d)[j] = tk_wrap_int(to, ((const int64_t *)a)[j]);
  }
}

static void splat_tile(int c, ts_dtype dt, double v, void *d, int n) {
  if (c == C_F32) {
    float f = (float)v;
    round_half(dt, &f, 1);
    SIMD for (int j = 0; j < n; j++) ((float *)d)[j] = f;
  } else if (c == C_F64) {
    SIMD for (int j = 0; j < n; j++) ((double *)d)[j] = v;
  } else {
    int64_t x = v != v ? 0 : tk_wrap_int(dt, tk_f2i(v, TS_I64));
    for (int j = 0; j < n; j++) ((int64_t *)d)[j] = x;
  }
}

/* A tile of copies of the scalar src[0] (exact for every dtype, i64 included). */
static void replicate(ts_dtype dt, const void *src, void *d) {
  int c = cls(dt);
  load_tile(dt, src, 0, 1, c, d);
  size_t es = c == C_F32 ? 4 : 8;
  for (int j = 1; j < TILE; j++) memcpy((char *)d + j * es, d, es);
}

typedef struct {
  const ts_fused *p;
  int n_ext;
  const ts_dtype *ext_dt;
  const int64_t *ext_numel;
  tk_in in;
  void *out;
  ts_dtype out_dt;
  int64_t numel;
  tk_plan plan; /* fused_plan.c: instructions skipped, shared or done as one */
  const tk_fast *fast; /* fused_fast.c's loop for this program (then no plan, no scratch), or NULL */
} prog_t;

/* Scratch per thread: a tile per instruction and per input, and one more
 * (the GELU gradient's second term). */
static size_t scratch_bytes(const prog_t *P) { return (size_t)(P->p->n + P->n_ext + 1) * TILE * 8; }

/* A BROADCAST instruction's tile: element off + j of the result reads element
 * ((off + j) / inner) % m of the m-element input src (class c into d). */
static void broadcast_tile(ts_dtype dt, const void *src, int64_t m, int64_t inner, int64_t off, int n, int c,
                           void *d) {
  int64_t q = off / inner, r = off % inner, s = q % m;
  size_t es = c == C_F32 ? 4 : 8;
  if (inner == 1) { /* a bias along the last dim, NHWC's per-channel terms: one period loaded, then copied */
    int per = (int)(m < n ? m : n), first = (int)(m - s < per ? m - s : per);
    load_tile(dt, src, s, first, c, d);
    if (first < per) load_tile(dt, src, 0, per - first, c, (char *)d + (size_t)first * es);
    for (int j = per; j < n;) { /* j a multiple of m: d[j + k] = d[k] */
      int k = j < n - j ? j : n - j;
      memcpy((char *)d + (size_t)j * es, d, (size_t)k * es);
      j += k;
    }
    return;
  }
  if (c == C_F32 && dt == TS_F32) {
    const float *x = src;
    float *y = d;
    for (int j = 0; j < n;) { /* runs of equal source elements (inner > 1) or consecutive ones */
      int run = (int)(inner - r < n - j ? inner - r : n - j);
      float v = x[s], *yj = y + j;
      SIMD for (int k = 0; k < run; k++) yj[k] = v;
      j += run, r += run;
      if (r == inner) r = 0, s = s + 1 == m ? 0 : s + 1;
    }
    return;
  }
  /* other dtypes (labels broadcast along the classes, bf16 or f64 rows): the
   * same runs, each source element loaded once and copied (as its bits) */
  for (int j = 0; j < n;) {
    int run = (int)(inner - r < n - j ? inner - r : n - j);
    char *dj = (char *)d + (size_t)j * es;
    load_tile(dt, src, s, 1, c, dj);
    if (es == 4) {
      uint32_t v, *y = (uint32_t *)dj;
      memcpy(&v, dj, 4);
      SIMD for (int k = 1; k < run; k++) y[k] = v;
    } else {
      uint64_t v, *y = (uint64_t *)dj;
      memcpy(&v, dj, 8);
      SIMD for (int k = 1; k < run; k++) y[k] = v;
    }
    j += run, r += run;
    if (r == inner) r = 0, s = s + 1 == m ? 0 : s + 1;
  }
}

/* Whether a BROADCAST tile (elements off .. off + n) reads one source element
 * only (inner > 1 and the tile inside one run of `inner`); *s is its index. */
static bool broadcast_uniform(int64_t m, int64_t inner, int64_t off, int n, int64_t *s) {
  if (inner <= 1 || inner - off % inner < n) return false;
  *s = off / inner % m;
  return true;
}

static ts_dtype operand_dt(const prog_t *P, int32_t v) {
  return v >= 0 ? P->p->ins[v].dtype : P->ext_dt[-v - 1];
}

/* Fills scratch (scratch_bytes) with what is the same in
 * every tile: constants and scalar externals. */
static void prefill(const prog_t *P, char *scratch) {
  const ts_fused *p = P->p;
  char *ext_buf = scratch + (size_t)p->n * TILE * 8;
  for (int i = 0; i < p->n - 1; i++)
    if (p->ins[i].op == TS_OP_CONSTANT)
      splat_tile(cls(p->ins[i].dtype), p->ins[i].dtype, p->ins[i].value, scratch + (size_t)i * TILE * 8, TILE);
  for (int k = 0; k < P->n_ext; k++)
    if (P->ext_numel[k] == 1 && P->numel != 1)
      replicate(P->ext_dt[k], P->in[k], ext_buf + (size_t)k * TILE * 8);
}

/* A BROADCAST instruction's tile: read in place when it is one run of
 * consecutive source elements stored as the compute type (a bias along the
 * last dim, the tile inside one row), else into d unless d still holds it: a
 * tile that reads one source element (per-channel batch-norm terms over an
 * image of >= TILE pixels) is the same as the previous tile's when that read
 * the same element and filled at least n elements (*held: its index, or -1);
 * with inner 1 (a bias, NHWC's per-channel terms: source element
 * (off + j) % m) when it starts at the same place in the source (*held:
 * off % m; every tile of a range does when m divides TILE). */
static const void *broadcast_into(const prog_t *P, const ts_fused_instr *I, int64_t off, int n, void *d,
                                  int64_t *held, int *held_n) {
  int k = -I->a - 1;
  int64_t inner = (int64_t)I->value, m = P->ext_numel[k], s;
  ts_dtype edt = P->ext_dt[k];
  if (inner == 1 && off % m + n <= m && edt == I->dtype && (edt == TS_F32 || edt == TS_F64 || edt == TS_I64))
    return (const char *)P->in[k] + (size_t)(off % m) * ts_dtype_size(edt); /* *held stays -1 */
  bool uni = broadcast_uniform(m, inner, off, n, &s);
  if (inner == 1) uni = true, s = off % m;
  if (uni && *held == s && *held_n >= n) return d;
  broadcast_tile(edt, P->in[k], m, inner, off, n, cls(I->dtype), d);
  *held = uni ? s : -1;
  *held_n = n;
  return d;
}

/* The tile of operand v (an instruction's, or input -v - 1's: read in place
 * when its storage is the compute type, else loaded once per tile into its
 * scratch tile; ext[k] is NULL until then). */
static const void *operand(const prog_t *P, int32_t v, int64_t off, int n, const void **ext, char *ext_buf,
                           const void *const *val) {
  if (v >= 0) return val[v];
  int k = -v - 1;
  if (!ext[k]) {
    ts_dtype edt = P->ext_dt[k];
    void *buf = ext_buf + (size_t)k * TILE * 8;
    if (P->ext_numel[k] == 1 && P->numel != 1)
      ext[k] = buf;
    else if (edt == TS_F32 || edt == TS_F64 || edt == TS_I64)
      ext[k] = (const char *)P->in[k] + (size_t)off * ts_dtype_size(edt);
    else {
      load_tile(edt, P->in[k], off, n, cls(edt), buf);
      ext[k] = buf;
    }
  }
  return ext[k];
}

/* gelu'(x) = (erf(x / sqrt 2) + 1) / 2 + x exp(-x^2 / 2) / sqrt(2 pi) as
 * autodiff's ten f32 instructions compute it, the same roundings in the same
 * order: three loops, so no product is fused into the sum that reads it
 * (the instructions it replaces round every product through memory). */
static void gelu_grad_tile(const float *x, float *d, float *t, int n) {
  SIMD for (int j = 0; j < n; j++) t[j] = x[j] * (vexpf(x[j] * x[j] * -0.5f) * TK_GELU_RSQRT2PI);
  SIMD for (int j = 0; j < n; j++) d[j] = (verff(x[j] * TK_GELU_RSQRT2) + 1.f) * 0.5f;
  SIMD for (int j = 0; j < n; j++) d[j] = d[j] + t[j];
}

/* Elements [lo, hi) into out (element lo at out's start), tile by tile, with
 * a prefilled scratch. */
static void run_range(const prog_t *P, int64_t lo, int64_t hi, char *scratch, void *out) {
  const ts_fused *p = P->p;
  int ni = p->n;
  char *ext_buf = scratch + (size_t)ni * TILE * 8;
  float *extra = (float *)(ext_buf + (size_t)P->n_ext * TILE * 8);
  const void *ext[P->n_ext > 0 ? P->n_ext : 1]; /* tile pointer per external input (NULL: not loaded) */
  bool direct = P->out_dt == TS_F32 || P->out_dt == TS_F64 || P->out_dt == TS_I64;
  int64_t held[ni]; /* per BROADCAST instruction: the source element its scratch tile holds, or -1 */
  int held_n[ni];
  for (int i = 0; i < ni; i++) held[i] = -1, held_n[i] = 0;
  for (int64_t off = lo; off < hi; off += TILE) {
    int n = (int)(hi - off < TILE ? hi - off : TILE);
    for (int k = 0; k < P->n_ext; k++) ext[k] = NULL;
    const void *val[ni];
    bool stored = false; /* the last instruction wrote the output tile itself */
    for (int i = 0; i < ni; i++) {
      const ts_fused_instr *I = &p->ins[i];
      int kind = P->plan.kind[i];
      if (kind == TK_INS_SKIP) continue;
      if (kind == TK_INS_SAME) { /* never the last instruction */
        val[i] = val[P->plan.arg[i]];
        continue;
      }
      void *d = scratch + (size_t)i * TILE * 8;
      if (i == ni - 1 && direct)
        d = (char *)out + (size_t)(off - lo) * ts_dtype_size(P->out_dt);
      int c = cls(I->dtype);
      const void *opnd[3] = {NULL, NULL, NULL};
      int32_t ids[3] = {I->a, I->b, I->c};
      if (kind == TK_INS_GELU_GRAD) {
        gelu_grad_tile(operand(P, P->plan.arg[i], off, n, ext, ext_buf, val), d, extra, n);
        val[i] = d;
        continue;
      }
      if (I->op == TS_OP_BROADCAST) {
        val[i] = broadcast_into(P, I, off, n, d, &held[i], &held_n[i]);
        continue;
      }
      int nops = I->op == TS_OP_SELECT ? 3 : ir_op_is_binary(I->op) || I->op == TS_OP_COMPARE ? 2
                 : I->op == TS_OP_CONSTANT ? 0 : 1;
      for (int o = 0; o < nops; o++) opnd[o] = operand(P, ids[o], off, n, ext, ext_buf, val);
      if (I->op == TS_OP_CONSTANT) {
        if (i == ni - 1) splat_tile(c, I->dtype, I->value, d, n); /* else filled before the loop */
      } else if (I->op == TS_OP_CONVERT) {
        if (I->dtype == TS_F32 && cls(operand_dt(P, I->a)) == C_F32 && !(i == ni - 1 && direct)) {
          val[i] = opnd[0]; /* bf16/f16/f32 -> f32: its operand tile already holds the values */
          continue;
        }
        if (i == ni - 1 && P->out_dt == TS_BF16 && I->dtype == TS_BF16 && cls(operand_dt(P, I->a)) == C_F32) {
          /* the result: rounded once, straight into the output (the bits the
           * round-then-store of store_tile writes: bf16 values round to themselves) */
          store_tile(TS_BF16, opnd[0], n, out, off - lo);
          stored = true;
          continue;
        }
        convert_tile(cls(operand_dt(P, I->a)), opnd[0], I->dtype, d, n);
      } else if (I->op == TS_OP_COMPARE) {
        int ca = cls(operand_dt(P, I->a));
        if (ca == C_F32) compare_f32(I->cmp, opnd[0], opnd[1], d, n);
        else if (ca == C_F64) compare_f64(I->cmp, opnd[0], opnd[1], d, n);
        else compare_i64(I->cmp, opnd[0], opnd[1], d, n);
      } else if (I->op == TS_OP_SELECT) {
        if (c == C_F32) select_f32(opnd[0], opnd[1], opnd[2], d, n);
        else if (c == C_F64) select_f64(opnd[0], opnd[1], opnd[2], d, n);
        else select_i64(opnd[0], opnd[1], opnd[2], d, n);
      } else if (ir_op_is_unary(I->op)) {
        if (c == C_F32) unary_f32(I->op, opnd[0], d, n), round_half(I->dtype, d, n);
        else if (c == C_F64) unary_f64(I->op, opnd[0], d, n);
        else unary_int(I->op, I->dtype, opnd[0], d, n);
      } else {
        if (c == C_F32) binary_f32(I->op, opnd[0], opnd[1], d, n), round_half(I->dtype, d, n);
        else if (c == C_F64) binary_f64(I->op, opnd[0], opnd[1], d, n);
        else binary_int(I->op, opnd[0], opnd[1], d, n);
      }
      if (c == C_INT && I->op != TS_OP_CONVERT && I->op != TS_OP_COMPARE && I->dtype != TS_I64)
        for (int j = 0; j < n; j++) ((int64_t *)d)[j] = tk_wrap_int(I->dtype, ((int64_t *)d)[j]);
      val[i] = d;
    }
    if (!direct && !stored) store_tile(P->out_dt, val[ni - 1], n, out, off - lo);
  }
}

static bool class_ok(const prog_t *P) {
  const ts_fused *p = P->p;
  if (p->n < 1) return false;
  /* the last instruction writes the output directly: its class must be the output's */
  if (cls(p->ins[p->n - 1].dtype) != cls(P->out_dt)) return false;
  for (int i = 0; i < p->n; i++) {
    const ts_fused_instr *I = &p->ins[i];
    int32_t ids[3] = {I->a, I->b, I->c};
    int nops = I->op == TS_OP_SELECT ? 3 : ir_op_is_binary(I->op) || I->op == TS_OP_COMPARE ? 2
               : I->op == TS_OP_CONSTANT ? 0 : 1;
    for (int o = 0; o < nops; o++)
      if (ids[o] >= i || ids[o] < -P->n_ext) return false;
    if (I->op == TS_OP_BROADCAST && (I->a >= 0 || !(I->value >= 1) || i == p->n - 1)) return false;
  }
  return true;
}

/* 0 when P's program is well formed and its inputs have P->numel elements
 * (or 1, or any count for those read by BROADCAST instructions only). */
static int prog_check(const prog_t *P) {
  const ts_fused *prog = P->p;
  if (!class_ok(P))
    return set_error("fused: malformed program (%d instructions, %d inputs, result %s)",
                        prog->n, P->n_ext, ts_dtype_name(P->out_dt));
  for (int k = 0; k < P->n_ext; k++) {
    bool indexed = false; /* read by BROADCAST instructions only: any numel */
    for (int j = 0; j < prog->n && !indexed; j++) indexed = prog->ins[j].op == TS_OP_BROADCAST && prog->ins[j].a == -k - 1;
    if (P->ext_numel[k] != P->numel && P->ext_numel[k] != 1 && !indexed)
      return set_error("fused: input %d has %lld elements, expected %lld or 1", k,
                          (long long)P->ext_numel[k], (long long)P->numel);
  }
  return 0;
}

/* Checks P and decides how it runs: fused_fast.c's loop (into *F, then
 * P->fast) or the interpreter with P->plan (arrays of p->n entries). */
static int prog_prepare(prog_t *P, tk_fast *F) {
  if (prog_check(P) < 0) return -1;
  P->fast = tk_fast_match(P->p, P->ext_dt, P->ext_numel, P->out_dt, P->numel, F) ? F : NULL;
  if (!P->fast) tk_fused_plan(P->p, P->ext_dt, &P->plan);
  return 0;
}

/* Runs a prepared elementwise program over P->numel elements into P->out. */
static int prog_exec(const prog_t *P, tk_in in, void *out, const ts_kctx *ctx) {
  if (P->numel == 0) return 0;
  const tk_fast *fast = P->fast;
  int64_t numel = P->numel, ntiles = (numel + TILE - 1) / TILE;
  size_t bytes = fast ? 0 : scratch_bytes(P);
  int nt = tk_threads(ctx, numel);
  if (nt > ntiles) nt = (int)ntiles;
  prog_t R = *P;
  R.in = in, R.out = out;
  int err = 0;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : err)
  {
    char *scratch = fast ? NULL : aligned_alloc(64, bytes);
    if (!fast && !scratch) {
      err = 1;
    } else {
      int nth = omp_get_num_threads(), me = omp_get_thread_num();
      int64_t per = (ntiles + nth - 1) / nth, t0 = me * per, t1 = t0 + per < ntiles ? t0 + per : ntiles;
      int64_t lo = t0 * TILE, hi = t1 * TILE < numel ? t1 * TILE : numel;
      void *o = (char *)out + (size_t)lo * ts_dtype_size(R.out_dt);
      if (t0 < t1 && fast) {
        tk_fast_run(fast, in, o, lo, hi);
      } else if (t0 < t1) {
        prefill(&R, scratch);
        run_range(&R, lo, hi, scratch, o);
      }
      free(scratch);
    }
  }
  if (err) return set_error_code(TS_ERR_OUT_OF_MEMORY, "fused: out of memory for %zu bytes of tile scratch", bytes);
  return 0;
}

int tk_program_run(const ts_fused *prog, int n_ext, const ts_dtype *ext_dt,
                   const int64_t *ext_numel, tk_in in, void *out, ts_dtype out_dt, int64_t numel,
                   const ts_kctx *ctx) {
  int8_t kind[prog->n > 0 ? prog->n : 1];
  int32_t arg[prog->n > 0 ? prog->n : 1];
  prog_t P = {prog, n_ext, ext_dt, ext_numel, in, out, out_dt, numel, {kind, arg}, NULL};
  tk_fast F; /* fused_fast.c: a one-pass loop for this program, if it has one */
  if (prog_prepare(&P, &F) < 0) return -1;
  return prog_exec(&P, in, out, ctx);
}

/* ---- fused reductions: the program's f32 result folded by reduce.c ----
 * Each thread evaluates the runs reduce.c asks for into its own buffer. A
 * stacked fused reduction (k = ir_fused_results > 1: sibling sums merged by
 * opt/fuse.c) runs each result as the program of its own instructions and
 * inputs (tk_fused_extract: the program it had alone, so the same loop and
 * the same bits), one after the other on each range: the later ones find the
 * range's inputs in cache, so the shared operand is read from memory once. A
 * result that is an f32 input alone (a plain sum's) is folded in place. */
typedef struct {
  const prog_t *P; /* k programs, one per result */
  const bool *direct; /* per result: an f32 input alone, read in place (no program run) */
  int k;
} red_src;

/* Result q's block of a buffer for ranges of n: n rounded up to 16 floats. */
static int64_t block_stride(int64_t n) { return (n + 15) & ~(int64_t)15; }

typedef struct {
  const red_src *R;
  char **scratch; /* per program (NULL: fused_fast.c's loop) */
  float *buf;     /* k blocks of tk_src_stride(max_run) */
} red_state;

static void red_end(void *state) {
  red_state *st = state;
  for (int q = 0; st->scratch && q < st->R->k; q++) free(st->scratch[q]);
  free(st->scratch);
  free(st->buf);
  free(st);
}

static void *red_begin(const void *user, int64_t max_run) {
  const red_src *R = user;
  red_state *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->R = R;
  st->scratch = calloc((size_t)R->k, sizeof *st->scratch);
  st->buf = aligned_alloc(64, (size_t)R->k * (size_t)block_stride(max_run > 0 ? max_run : 1) * sizeof *st->buf);
  bool ok = st->scratch && st->buf;
  for (int q = 0; ok && q < R->k; q++) {
    if (R->P[q].fast || R->direct[q]) continue;
    ok = (st->scratch[q] = aligned_alloc(64, scratch_bytes(&R->P[q]))) != NULL;
    if (ok) prefill(&R->P[q], st->scratch[q]);
  }
  if (!ok) {
    red_end(st);
    return NULL;
  }
  return st;
}

static void red_range(void *state, int64_t off, int64_t n, const float **res) {
  red_state *st = state;
  for (int q = 0; q < st->R->k; q++) {
    const prog_t *P = &st->R->P[q];
    float *b = st->buf + q * block_stride(n);
    res[q] = b;
    if (st->R->direct[q]) res[q] = (const float *)P->in[0] + off;
    else if (P->fast) tk_fast_run(P->fast, P->in, b, off, off + n);
    else run_range(P, off, off + n, st->scratch[q], b);
  }
}

/* One result of a stacked fused reduction: its program and inputs. */
typedef struct {
  ts_fused p;
  int32_t *ext; /* its input j is the node's input ext[j] */
  bool direct;  /* the program is an f32 input alone (a plain sum's): read in place */
  prog_t P;     /* in unset */
  tk_fast F;
  ts_dtype *dt;
  int64_t *ne;
  int8_t *kind;
  int32_t *arg;
} res_prog;

static void res_progs_free(res_prog *r, int k) {
  for (int q = 0; r && q < k; q++) {
    free(r[q].p.ins), free(r[q].ext), free(r[q].dt), free(r[q].ne);
    free(r[q].kind), free(r[q].arg);
  }
  free(r);
}

/* The k result programs of stacked fused reduction n (program prog over
 * numel elements; its inputs' dtypes dt and sizes ne), prepared. */
static res_prog *res_progs_make(const ts_node *n, const ts_dtype *dt, const int64_t *ne, int64_t numel, int k) {
  const ts_fused *prog = n->attr.fused;
  if (k > TK_SRC_MAX_RES) {
    set_error("fused: a stacked reduction of %d results (at most %d)", k, TK_SRC_MAX_RES);
    return NULL;
  }
  res_prog *r = calloc((size_t)k, sizeof *r);
  int ni = n->n_in > 0 ? n->n_in : 1;
  for (int q = 0; r && q < k; q++) {
    res_prog *R = &r[q];
    R->ext = malloc((size_t)ni * sizeof *R->ext), R->dt = malloc((size_t)ni * sizeof *R->dt);
    R->ne = malloc((size_t)ni * sizeof *R->ne);
    int m = 0;
    if (!R->ext || !R->dt || !R->ne || tk_fused_extract(prog, n->n_in, prog->n - k + q, &R->p, R->ext, &m) < 0 ||
        !(R->kind = malloc((size_t)R->p.n)) || !(R->arg = malloc((size_t)R->p.n * sizeof *R->arg))) {
      res_progs_free(r, k);
      set_error_code(TS_ERR_OUT_OF_MEMORY, "fused: out of memory for a stacked reduction's results");
      return NULL;
    }
    for (int j = 0; j < m; j++) R->dt[j] = dt[R->ext[j]], R->ne[j] = ne[R->ext[j]];
    R->direct = R->p.n == 1 && R->p.ins[0].op == TS_OP_CONVERT && R->p.ins[0].dtype == TS_F32 && m == 1 &&
                R->dt[0] == TS_F32 && R->ne[0] == numel;
    R->P = (prog_t){&R->p, m, R->dt, R->ne, NULL, NULL, TS_F32, numel, {R->kind, R->arg}, NULL};
    if (prog_prepare(&R->P, &R->F) < 0) {
      res_progs_free(r, k);
      return NULL;
    }
  }
  if (!r) set_error_code(TS_ERR_OUT_OF_MEMORY, "fused: out of memory for a stacked reduction's results");
  return r;
}

/* FUSED with attr.n_dims > 0: the program runs over the operand shape
 * attr.gshape[0 .. attr.axis) and its result is reduced over attr.dims
 * (attr.reduce) into the node's shape (k results: res, k of them). */
static int fused_reduce(const ts_node *n, const prog_t *prepared, const res_prog *res, int k, tk_in in, void *out,
                        const ts_kctx *ctx) {
  prog_t P[k];
  bool direct[k];
  int total = 0;
  for (int q = 0; q < k; q++) total += res ? res[q].P.n_ext : 0;
  const void *cin[total > 0 ? total : 1];
  for (int q = 0, c = 0; q < k; q++) {
    P[q] = res ? res[q].P : *prepared;
    P[q].in = in;
    direct[q] = res && res[q].direct;
    if (!res) continue;
    for (int j = 0; j < res[q].P.n_ext; j++) cin[c + j] = in[res[q].ext[j]];
    P[q].in = cin + c;
    c += res[q].P.n_ext;
  }
  red_src R = {P, direct, k};
  tk_reduce_src src = {red_begin, red_range, red_end, &R, k};
  return tk_reduce_from(n, n->attr.axis, n->attr.gshape, &src, out, ctx);
}

/* A FUSED node's kernel state: what every run of its program shares, decided
 * on the first (operand dtypes and sizes, the check, the fast path or plan;
 * again if the fast-path switch changed since). */
typedef struct {
  ts_kstate base;
  bool fast_on; /* tk_fused_fast_on() when prepared */
  prog_t P;     /* in and out unset */
  tk_fast F;
  ts_dtype *dt;
  int64_t *ne;
  int8_t *kind;
  int32_t *arg;
  int n_res;      /* results (a stacked fused reduction: k > 1, then res) */
  res_prog *res;
} fused_state;

static void fused_state_free(ts_kstate *s) {
  fused_state *f = (fused_state *)s;
  res_progs_free(f->res, f->n_res);
  free(f->dt), free(f->ne), free(f->kind), free(f->arg);
  free(f);
}

/* The operand dtypes and sizes and the program's preparation into f. */
static int fused_state_fill(const ts_graph *g, const ts_node *n, fused_state *f) {
  const ts_fused *prog = n->attr.fused;
  for (int k = 0; k < n->n_in; k++) {
    f->dt[k] = tk_operand(g, n, k)->dtype;
    f->ne[k] = tk_numel(tk_operand(g, n, k));
  }
  bool red = n->attr.n_dims > 0;
  int rank = n->attr.axis;
  if (red && (rank < 1 || rank > TS_MAX_RANK)) return set_error("fused: reduction over an operand of rank %d", rank);
  int64_t numel = red ? ts_shape_numel(rank, n->attr.gshape) : tk_numel(n);
  f->P = (prog_t){prog, n->n_in, f->dt, f->ne, NULL, NULL, red ? TS_F32 : n->dtype, numel, {f->kind, f->arg}, NULL};
  f->fast_on = tk_fused_fast_on();
  res_progs_free(f->res, f->n_res);
  f->res = NULL;
  f->n_res = (int)ir_fused_results(&n->attr, n->rank, n->shape);
  if (f->n_res > 1) return (f->res = res_progs_make(n, f->dt, f->ne, numel, f->n_res)) ? 0 : -1;
  return prog_prepare(&f->P, &f->F);
}

/* n's state (*st), made and prepared on the first call. */
static fused_state *fused_state_get(const ts_graph *g, const ts_node *n, ts_kstate **st) {
  fused_state *f = (fused_state *)*st;
  if (f && f->fast_on == tk_fused_fast_on()) return f;
  if (!f) {
    int ni = n->n_in > 0 ? n->n_in : 1, np = n->attr.fused->n > 0 ? n->attr.fused->n : 1;
    f = calloc(1, sizeof *f);
    if (f) {
      f->base.free = fused_state_free;
      f->dt = malloc((size_t)ni * sizeof *f->dt), f->ne = malloc((size_t)ni * sizeof *f->ne);
      f->kind = malloc((size_t)np * sizeof *f->kind), f->arg = malloc((size_t)np * sizeof *f->arg);
    }
    if (!f || !f->dt || !f->ne || !f->kind || !f->arg) {
      if (f) fused_state_free(&f->base);
      set_error_code(TS_ERR_OUT_OF_MEMORY, "fused: out of memory for a node's state (%d inputs)", n->n_in);
      return NULL;
    }
    *st = &f->base;
  }
  if (fused_state_fill(g, n, f) < 0) { /* freed with the executable's states */
    f->fast_on = !tk_fused_fast_on(); /* not prepared: the next call tries again */
    return NULL;
  }
  return f;
}

int tk_fused(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st, const ts_kctx *ctx) {
  if (!n->attr.fused) return set_error("fused: node has no program");
  fused_state *f = fused_state_get(g, n, st);
  if (!f) return -1;
  return n->attr.n_dims > 0 ? fused_reduce(n, &f->P, f->res, f->n_res, in, out, ctx) : prog_exec(&f->P, in, out, ctx);
}
