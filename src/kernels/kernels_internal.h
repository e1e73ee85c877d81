/* kernels_internal.h — helpers shared by the CPU kernel files: one entry
 * point per kernel family, element load/store between storage dtypes and
 * compute types, the OpenMP size threshold and the shared oneDNN engine. */
#ifndef TS_KERNELS_INTERNAL_H
#define TS_KERNELS_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/half.h"

/* Loops over fewer elements than this stay on one thread (fork/join costs more). */
#define TK_PAR_MIN 32768

typedef const void *const *tk_in;

static inline int64_t tk_numel(const ts_node *n) { return ts_shape_numel(n->rank, n->shape); }
static inline const ts_node *tk_operand(const ts_graph *g, const ts_node *n, int i) {
  return &g->nodes[n->in[i]];
}
/* Threads for a loop of `work` elements. */
static inline int tk_threads(const ts_kctx *ctx, int64_t work) {
  return work >= TK_PAR_MIN && ctx->num_threads > 1 ? ctx->num_threads : 1;
}

/* Element i of p (dtype dt) as double / int64, and the reverse. */
static inline double tk_load_f64(ts_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case TS_F32: return ((const float *)p)[i];
    case TS_F64: return ((const double *)p)[i];
    case TS_BF16: return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    case TS_F16: return ts_f16_to_f32(((const uint16_t *)p)[i]);
    case TS_I32: return ((const int32_t *)p)[i];
    case TS_I64: return (double)((const int64_t *)p)[i];
    case TS_U8: return ((const uint8_t *)p)[i];
    case TS_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
  }
}

/* Float -> integer conversion: truncates toward zero, saturates, NaN -> 0. */
static inline int64_t tk_f2i(double v, ts_dtype to) {
  if (to == TS_BOOL) return v != 0;
  if (v != v) return 0;
  double lo = to == TS_I32 ? -2147483648.0 : to == TS_U8 ? 0.0 : -9223372036854775808.0;
  double hi = to == TS_I32 ? 2147483647.0 : to == TS_U8 ? 255.0 : 9223372036854775807.0;
  if (v <= lo) return to == TS_I64 ? INT64_MIN : (int64_t)lo;
  if (v >= hi) return to == TS_I64 ? INT64_MAX : (int64_t)hi;
  return (int64_t)v;
}

static inline void tk_store_f64(ts_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
    case TS_F32: ((float *)p)[i] = (float)v; break;
    case TS_F64: ((double *)p)[i] = v; break;
    case TS_BF16: ((uint16_t *)p)[i] = ts_f32_to_bf16((float)v); break;
    case TS_F16: ((uint16_t *)p)[i] = ts_f32_to_f16((float)v); break;
    case TS_I32: ((int32_t *)p)[i] = (int32_t)tk_f2i(v, TS_I32); break;
    case TS_I64: ((int64_t *)p)[i] = tk_f2i(v, TS_I64); break;
    case TS_U8: ((uint8_t *)p)[i] = (uint8_t)tk_f2i(v, TS_U8); break;
    case TS_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
  }
}

static inline int64_t tk_load_i64(ts_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case TS_I32: return ((const int32_t *)p)[i];
    case TS_I64: return ((const int64_t *)p)[i];
    case TS_U8: return ((const uint8_t *)p)[i];
    case TS_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return tk_f2i(tk_load_f64(dt, p, i), TS_I64);
  }
}

/* Wraps an integer to dtype dt (two's complement), as an int64. */
static inline int64_t tk_wrap_int(ts_dtype dt, int64_t v) {
  switch (dt) {
    case TS_I32: return (int32_t)(uint32_t)(uint64_t)v;
    case TS_U8: return (uint8_t)(uint64_t)v;
    case TS_BOOL: return v != 0;
    default: return v;
  }
}

static inline void tk_store_i64(ts_dtype dt, void *p, int64_t i, int64_t v) {
  switch (dt) {
    case TS_I32: ((int32_t *)p)[i] = (int32_t)tk_wrap_int(TS_I32, v); break;
    case TS_I64: ((int64_t *)p)[i] = v; break;
    case TS_U8: ((uint8_t *)p)[i] = (uint8_t)tk_wrap_int(TS_U8, v); break;
    case TS_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: tk_store_f64(dt, p, i, (double)v); break;
  }
}

/* One value of dtype dt written to buf (>= 8 bytes): pad values, splats. */
static inline void tk_scalar_bytes(ts_dtype dt, double v, void *buf) { tk_store_f64(dt, buf, 0, v); }

/* Strided copy of esize-byte elements over `shape`; strides in elements. */
void tk_copy_strided(int rank, const int64_t *shape, size_t esize, const void *src,
                     const int64_t *src_strides, void *dst, const int64_t *dst_strides, int nthreads);
/* Row-major strides of a shape. */
void tk_row_strides(int rank, const int64_t *shape, int64_t *strides);
/* dst[0..n) = the esize-byte value at val. */
void tk_fill(void *dst, int64_t n, size_t esize, const void *val);

/* ---- kernel families (return 0 / -1 with set_error) ---- */
int tk_elementwise(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
/* FUSED: *st holds what its runs share (checked program, fast path or plan), made on the first call. */
int tk_fused(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st, const ts_kctx *ctx);
int tk_reduce(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
int tk_layout(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
int tk_dot(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st,
           const ts_kctx *ctx);
int tk_conv(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st,
            const ts_kctx *ctx);
/* conv_gemm.c: a 1x1 NHWC f32 filter gradient over at most 2048 output
 * positions (N OH OW) runs as one GEMM (tk_conv calls it when it fits). */
bool tk_conv_gemm_fits(const ts_graph *g, const ts_node *n);
int tk_conv_gemm(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st, int nt);
int tk_pool(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
int tk_index(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
int tk_rng(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
int tk_layernorm(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);
int tk_attention(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx);

/* Evaluates an elementwise program (see ts_fused in ir/ir.h) over numel
 * elements: external input k has dtype ext_dt[k] and numel ext_numel[k]
 * (numel or 1 = broadcast scalar). Used by FUSED and every single elementwise op. */
int tk_program_run(const ts_fused *prog, int n_ext, const ts_dtype *ext_dt,
                   const int64_t *ext_numel, tk_in in, void *out, ts_dtype out_dt, int64_t numel,
                   const ts_kctx *ctx);

/* What the fused evaluator does with each instruction (fused_plan.c):
 * evaluate it, skip it (nothing kept reads it), reuse the tile of the equal
 * instruction arg, or compute the GELU gradient of operand arg in one step. */
enum { TK_INS_RUN, TK_INS_SKIP, TK_INS_SAME, TK_INS_GELU_GRAD };
typedef struct {
  int8_t *kind;  /* per instruction, TK_INS_* */
  int32_t *arg;  /* TK_INS_SAME: the instruction; TK_INS_GELU_GRAD: its x (-k - 1: input k) */
} tk_plan;
/* The f32 constants of the GELU gradient autodiff writes: 1/sqrt(2), 1/sqrt(2 pi). */
#define TK_GELU_RSQRT2 ((float)0.70710678118654752440)
#define TK_GELU_RSQRT2PI ((float)0.39894228040143267794)
/* Fills pl (p->n entries each) for program p over inputs of dtypes ext_dt. */
void tk_fused_plan(const ts_fused *p, const ts_dtype *ext_dt, tk_plan *pl);
/* Result instruction r of p as a program of its own (a stacked fused
 * reduction's result, fused.c): the instructions r reads, in order and
 * renumbered, into out (out->ins malloc'd; r last), and its inputs: out's
 * input j is p's input ext[j] (*out_n_ext of them; ext has n_ext entries). */
int tk_fused_extract(const ts_fused *p, int n_ext, int r, ts_fused *out, int32_t *ext, int *out_n_ext);

/* fused_fast.c: one-pass loops for the fused programs that dominate the
 * convnets' steps (batch-norm apply with residual add and ReLU, batch-norm
 * input gradient, batch-norm's reduced terms, ReLU's gradient, the optimizers' updates), the same bits as
 * the interpreter. */
typedef struct {
  int ext;   /* the input (full size) */
  bool bf16; /* stored as bf16 (else f32) */
} tk_fast_src;
typedef struct {
  bool affine;      /* ((x - m) * a) * g + b; else x */
  bool round;       /* that rounded to bf16 */
  tk_fast_src x;
  int m, a, g, b;   /* inputs broadcast per channel */
} tk_fast_term;
enum {
  TK_FAST_NONE, TK_FAST_FORWARD, TK_FAST_BN_GRAD, TK_FAST_CENTERED, TK_FAST_MASK, TK_FAST_SRC, TK_FAST_SCALED,
  TK_FAST_MOMENT, TK_FAST_ADAMW, TK_FAST_BIAS
};
/* A scalar operand of the AdamW loops: the f32 scalar input ext (>= 0) or the constant c. */
typedef struct {
  int ext;
  float c;
} tk_fast_k;
/* A scaled term of TK_FAST_MOMENT: k * x or x * k (k_left), x an f32 input, or x * x (square). */
typedef struct {
  tk_fast_k k;
  bool k_left, square;
  int x;
} tk_fast_prod;
typedef struct {
  int kind;               /* TK_FAST_* */
  int64_t inner, nch;     /* channel c covers runs of inner elements; nch channels, repeating */
  bool out_bf16;          /* the result stored as bf16 (else f32) */
  /* TK_FAST_FORWARD: t[0] (+ t[1]), then max(., relu_c) */
  int nterm;
  tk_fast_term t[2];
  bool relu;
  float relu_c;
  /* TK_FAST_BN_GRAD: ((dy - c) - (x - m) * k) * s;
   * TK_FAST_CENTERED: (x - m) * (x - m) (square), dy * (x - m) (dy_first) or (x - m) * dy */
  tk_fast_src dy, x;
  int m, k, c, s;
  bool square, dy_first;
  /* TK_FAST_MASK: t[0].x (+ t[1].x: nterm 2) where x cmp mask_k, else mask_c (no channels) */
  ts_cmp cmp;
  float mask_k, mask_c;
  /* TK_FAST_SRC: x, widened (a bf16 -> f32 convert: the bias and batch-norm
   * sums of bf16 gradients); TK_FAST_SCALED: p = k * x (k_left) or x * k, k
   * the constant scale_c or the scalar f32 input scale_ext (>= 0), then with
   * nterm 1: dy + p, p + dy, dy - p or p - dy (comb_sub, dy_first) — SGD's
   * momentum (0.9 * buf + g) and update (p - lr * g); no channels */
  int scale_ext;
  float scale_c;
  bool k_left, comb_sub;
  /* TK_FAST_MOMENT: pr[0] + pr[1] (AdamW's b1 m + c1 g and b2 v + c2 (g g));
   * TK_FAST_ADAMW: pd - step * (am / (sqrt(av) / bc + eps)) with pd = ap, or
   * ap * decay (decay_on; decay_left: decay * ap), step * q or q * step
   * (step_left), eps + r or r + eps (eps_left): AdamW's parameter update
   * (src/nn/optim.c). All f32, no channels (fused_adam.c's loops). */
  tk_fast_prod pr[2];
  int ap, am, av; /* the f32 inputs p, m', v' */
  tk_fast_k decay, step, bc, eps;
  bool decay_on, decay_left, step_left, eps_left;
  /* TK_FAST_BIAS: x + b (x_first) or b + x, then max(., relu_c) where relu:
   * x an f32 input (F->x), b the f32 per-channel input F->m (a conv's or a
   * dense layer's bias: runs of inner elements, or inner 1: a row of nch);
   * f32 result (fused_bias.c's loop) */
  bool x_first;
} tk_fast;
/* Whether program p over inputs (ext_dt, ext_numel) with an out_dt result of
 * numel elements has a fast path (described into *F); false when the switch
 * tk_fused_set_fast is off. */
bool tk_fast_match(const ts_fused *p, const ts_dtype *ext_dt, const int64_t *ext_numel, ts_dtype out_dt,
                   int64_t numel, tk_fast *F);
/* Whether the fast paths are on (tk_fused_set_fast). */
bool tk_fused_fast_on(void);
/* Elements [lo, hi) of F's program into out (element lo at out's start). */
void tk_fast_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);
/* fused_mask.c: tk_fast_run of a TK_FAST_MASK program (ReLU's gradient). */
void tk_fast_mask_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);
/* fused_adam.c: tk_fast_run of a TK_FAST_MOMENT or TK_FAST_ADAMW program (AdamW's update). */
void tk_fast_adam_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);
/* fused_bias.c: tk_fast_run of a TK_FAST_BIAS program (a bias add, then ReLU). */
void tk_fast_bias_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);
/* fused_centered.c: tk_fast_run of a TK_FAST_CENTERED program (batch norm's reduced terms). */
void tk_fast_centered_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);
/* How many chunks the fast loops have run again with the NaN-ordered add and
 * mul (a chunk with a NaN result) since the process started (tests). */
int64_t tk_fast_reruns(void);

/* The process-wide oneDNN CPU engine and an in-order stream (created once). */
struct dnnl_engine;
struct dnnl_stream;
int tk_dnnl_engine(struct dnnl_engine **eng, struct dnnl_stream **stream);

/* fused_apply.c: how many calls have run a channel-innermost batch-norm apply
 * or input gradient (per-channel inputs broadcast with runs of one element,
 * NHWC) in one loop over their range, since the process started (tests). */
int64_t tk_fast_cl_calls(void);

#endif
