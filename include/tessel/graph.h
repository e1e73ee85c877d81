/* tessel/graph.h — building a global program as a graph of typed nodes.
 *
 * A call such as ts_add(g, a, b) only records a node and returns its id (a
 * ts_tensor); nothing is computed until the graph is compiled and executed
 * (tessel/runtime.h). Shapes are static and global. Every builder checks its
 * operands and on error returns TS_NONE with a message naming the op and the
 * mismatch; builders given TS_NONE return TS_NONE, so a chain of calls can be
 * checked once at the end (ts_graph_verify or the first TS_NONE).
 *
 * Binary elementwise builders broadcast with NumPy rules (inserting explicit
 * broadcast nodes); the IR itself is strict. */
#ifndef TESSEL_GRAPH_H
#define TESSEL_GRAPH_H

#include "tessel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

typedef struct ts_graph ts_graph;
typedef int32_t ts_tensor; /* node id inside its graph */
#define TS_NONE ((ts_tensor)-1)

/* The graph is the caller's. Nothing keeps a pointer to it: ts_compile and
 * the builders only read or append during the call. One thread at a time. */
ts_graph *ts_graph_new(void);
void ts_graph_free(ts_graph *g);

/* ---- node queries ---- */
int ts_graph_num_nodes(const ts_graph *g);
ts_dtype ts_tensor_dtype(const ts_graph *g, ts_tensor t);
int ts_tensor_rank(const ts_graph *g, ts_tensor t);
/* Pointer to TS_MAX_RANK dims, valid until the next node is added. */
const int64_t *ts_tensor_shape(const ts_graph *g, ts_tensor t);
int64_t ts_tensor_numel(const ts_graph *g, ts_tensor t);

/* ---- leaves ---- */
/* A program argument (HLO parameter): its value is supplied at every execute.
 * Arguments are numbered in creation order (ts_graph_num_inputs). Names are
 * unique within a graph. */
ts_tensor ts_input(ts_graph *g, const char *name, ts_dtype dt, int rank, const int64_t *shape);
/* A constant tensor; data (numel * dtype size bytes) is copied. */
ts_tensor ts_constant(ts_graph *g, ts_dtype dt, int rank, const int64_t *shape, const void *data);
/* A rank-0 constant. */
ts_tensor ts_scalar(ts_graph *g, ts_dtype dt, double value);
/* A tensor filled with one value (a scalar broadcast). */
ts_tensor ts_full(ts_graph *g, ts_dtype dt, int rank, const int64_t *shape, double value);
/* out[i...] = index along dim. */
ts_tensor ts_iota(ts_graph *g, ts_dtype dt, int rank, const int64_t *shape, int dim);
/* Counter-based random numbers: element i is a pure function of (seed, key, i),
 * so results are reproducible and any shard can be generated alone.
 * seed: a rank-0 i64 or i32 tensor (usually an input, e.g. the step number).
 * uniform: [0, 1); normal: mean 0, std 1. dt must be a float type. */
ts_tensor ts_rng_uniform(ts_graph *g, ts_tensor seed, uint64_t key, ts_dtype dt, int rank, const int64_t *shape);
ts_tensor ts_rng_normal(ts_graph *g, ts_tensor seed, uint64_t key, ts_dtype dt, int rank, const int64_t *shape);

/* ---- elementwise unary (float dtypes; neg/abs also integer) ---- */
ts_tensor ts_neg(ts_graph *g, ts_tensor x);
ts_tensor ts_abs(ts_graph *g, ts_tensor x);
ts_tensor ts_exp(ts_graph *g, ts_tensor x);
ts_tensor ts_log(ts_graph *g, ts_tensor x);
ts_tensor ts_log1p(ts_graph *g, ts_tensor x);
ts_tensor ts_tanh(ts_graph *g, ts_tensor x);
ts_tensor ts_sqrt(ts_graph *g, ts_tensor x);
ts_tensor ts_rsqrt(ts_graph *g, ts_tensor x);
ts_tensor ts_sigmoid(ts_graph *g, ts_tensor x);
ts_tensor ts_erf(ts_graph *g, ts_tensor x);
/* Elementwise dtype conversion (float->int truncates toward zero). */
ts_tensor ts_convert(ts_graph *g, ts_tensor x, ts_dtype to);

/* ---- elementwise binary (same dtype; shapes broadcast NumPy-style) ---- */
ts_tensor ts_add(ts_graph *g, ts_tensor a, ts_tensor b);
ts_tensor ts_sub(ts_graph *g, ts_tensor a, ts_tensor b);
ts_tensor ts_mul(ts_graph *g, ts_tensor a, ts_tensor b);
ts_tensor ts_div(ts_graph *g, ts_tensor a, ts_tensor b);
ts_tensor ts_max(ts_graph *g, ts_tensor a, ts_tensor b);
ts_tensor ts_min(ts_graph *g, ts_tensor a, ts_tensor b);
ts_tensor ts_pow(ts_graph *g, ts_tensor a, ts_tensor b);

typedef enum { TS_CMP_EQ, TS_CMP_NE, TS_CMP_LT, TS_CMP_LE, TS_CMP_GT, TS_CMP_GE } ts_cmp;
/* Returns a TS_BOOL tensor. */
ts_tensor ts_compare(ts_graph *g, ts_tensor a, ts_tensor b, ts_cmp cmp);
/* pred (TS_BOOL) ? a : b, elementwise; all three broadcast. */
ts_tensor ts_select(ts_graph *g, ts_tensor pred, ts_tensor a, ts_tensor b);

/* ---- shape ops ---- */
/* HLO broadcast_in_dim: operand dim i becomes output dim dims[i] (strictly
 * increasing); operand dims are 1 or equal to the output dim. */
ts_tensor ts_broadcast_in_dim(ts_graph *g, ts_tensor x, int rank, const int64_t *shape, const int *dims);
/* NumPy broadcast of x to shape. */
ts_tensor ts_broadcast_to(ts_graph *g, ts_tensor x, int rank, const int64_t *shape);
/* Row-major reshape; numel must match. One dim may be -1 (inferred). */
ts_tensor ts_reshape(ts_graph *g, ts_tensor x, int rank, const int64_t *shape);
/* out dim i = x dim perm[i]. */
ts_tensor ts_transpose(ts_graph *g, ts_tensor x, const int *perm);
/* out dim d = ceil((limit[d] - start[d]) / stride[d]); stride NULL means 1. */
ts_tensor ts_slice(ts_graph *g, ts_tensor x, const int64_t *start, const int64_t *limit, const int64_t *stride);
/* Pads lo[d] / hi[d] elements (>= 0) with value on each side of dim d. */
ts_tensor ts_pad(ts_graph *g, ts_tensor x, const int64_t *lo, const int64_t *hi, double value);
/* Concatenates n tensors along dim; other dims equal. */
ts_tensor ts_concatenate(ts_graph *g, int n, const ts_tensor *xs, int dim);

/* ---- contractions ---- */
/* HLO dot_general. Output dims: batch dims (lhs order), then lhs free dims,
 * then rhs free dims. Batch and contracting dim sizes must match pairwise. */
typedef struct {
  int n_batch, n_contract;
  int lhs_batch[TS_MAX_RANK], rhs_batch[TS_MAX_RANK];
  int lhs_contract[TS_MAX_RANK], rhs_contract[TS_MAX_RANK];
} ts_dot_dims;
ts_tensor ts_dot_general(ts_graph *g, ts_tensor lhs, ts_tensor rhs, const ts_dot_dims *dims);
/* (M,K)x(K,N)->(M,N), or batched (B..,M,K)x(B..,K,N) with equal batch dims. */
ts_tensor ts_matmul(ts_graph *g, ts_tensor a, ts_tensor b);

/* The activation layout of a convolution or pooling: NCHW (the default,
 * zero) or channels-last NHWC, where oneDNN's convolutions run on the
 * caller's buffers with no layout reorders. Weights stay OIHW in both. */
typedef enum { TS_LAYOUT_NCHW = 0, TS_LAYOUT_NHWC = 1 } ts_layout;

/* 2-D convolution, NCHW activations and OIHW weights (PyTorch's layouts, so
 * weights and references move between the two unchanged; oneDNN picks its own
 * blocked layout internally), or NHWC activations with layout TS_LAYOUT_NHWC.
 *   x: (N, C, H, W)   w: (O, C/groups, KH, KW)   ->   (N, O, OH, OW)
 *   NHWC: x (N, H, W, C) -> (N, OH, OW, O), w as above
 *   OH = (H + pad_lo + pad_hi - dilation*(KH-1) - 1) / stride + 1. */
typedef struct {
  int stride[2];     /* default 1 when 0 */
  int pad_lo[2];     /* top, left */
  int pad_hi[2];     /* bottom, right */
  int dilation[2];   /* default 1 when 0 */
  int groups;        /* default 1 when 0 */
  ts_layout layout;  /* TS_LAYOUT_NCHW (0) or TS_LAYOUT_NHWC */
} ts_conv_params;
ts_tensor ts_conv2d(ts_graph *g, ts_tensor x, ts_tensor w, const ts_conv_params *p);

/* Pooling over the spatial dims of (N, C, H, W) (dims 2, 3), or of
 * (N, H, W, C) (dims 1, 2) with layout TS_LAYOUT_NHWC. avg divides by the
 * full window (PyTorch's count_include_pad=True). Padding for max is -inf. */
typedef struct {
  int kernel[2];
  int stride[2];     /* default = kernel when 0 */
  int pad[2];        /* symmetric */
  ts_layout layout;  /* TS_LAYOUT_NCHW (0) or TS_LAYOUT_NHWC */
} ts_pool_params;
ts_tensor ts_max_pool2d(ts_graph *g, ts_tensor x, const ts_pool_params *p);
ts_tensor ts_avg_pool2d(ts_graph *g, ts_tensor x, const ts_pool_params *p);

/* ---- reductions ---- */
typedef enum { TS_REDUCE_SUM, TS_REDUCE_MAX, TS_REDUCE_MIN, TS_REDUCE_MEAN } ts_reduce_kind;
/* Reduces over n dims (removed from the shape unless keepdims). */
ts_tensor ts_reduce(ts_graph *g, ts_tensor x, ts_reduce_kind kind, int n, const int *dims, bool keepdims);
/* Over all dims, to a scalar. */
ts_tensor ts_sum_all(ts_graph *g, ts_tensor x);
ts_tensor ts_mean_all(ts_graph *g, ts_tensor x);

/* ---- indexing ---- */
/* Rows of table (V, ...) picked by integer indices (any shape I):
 * out shape = I ++ table.shape[1:]. Indices outside [0, V) are an execute error. */
ts_tensor ts_gather(ts_graph *g, ts_tensor table, ts_tensor indices);
/* base (V, ...) with updates (I ++ base.shape[1:]) added at rows indices (I). */
ts_tensor ts_scatter_add(ts_graph *g, ts_tensor base, ts_tensor indices, ts_tensor updates);

/* ---- composites (lowered to the ops above at build time) ---- */
ts_tensor ts_relu(ts_graph *g, ts_tensor x);
ts_tensor ts_gelu(ts_graph *g, ts_tensor x); /* exact, erf-based */
ts_tensor ts_softmax(ts_graph *g, ts_tensor x, int dim);
ts_tensor ts_log_softmax(ts_graph *g, ts_tensor x, int dim);
/* Mean cross-entropy of logits (B, C) against integer labels (B). Logits
 * split on C (a vocabulary-parallel LM head) are never gathered: the max,
 * the sum of exponentials and the label's logit are three all-reduces of B
 * values, and the gradient (softmax - onehot) needs none. */
ts_tensor ts_cross_entropy(ts_graph *g, ts_tensor logits, ts_tensor labels);
/* Normalizes over the last dim; gamma/beta (D) may be TS_NONE. */
ts_tensor ts_layer_norm(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps);
/* The same layer norm as primitive ops (reduce, add, mul, rsqrt): what
 * ts_layer_norm builds unless x is f32 with both gamma and beta; for those
 * it builds one fused op (one pass per row, kernels/layernorm.c). This form
 * stays for comparisons. */
ts_tensor ts_layer_norm_decomposed(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps);
/* Batch norm over (N, C, ...) per channel C. Training mode uses batch
 * statistics and returns them in *mean / *var (biased var; may be NULL);
 * eval mode uses the given running statistics. */
ts_tensor ts_batch_norm_train(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps,
                              ts_tensor *mean, ts_tensor *var);
ts_tensor ts_batch_norm_eval(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta,
                             ts_tensor running_mean, ts_tensor running_var, double eps);
/* The same with the channels in dim `axis` (1: NCHW, what the two above use;
 * rank - 1: channels last, NHWC): the same nodes, the statistics reduced over
 * every other dim; gamma, beta and the statistics are (C,) either way. */
ts_tensor ts_batch_norm_train_axis(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps, int axis,
                                   ts_tensor *mean, ts_tensor *var);
ts_tensor ts_batch_norm_eval_axis(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, ts_tensor running_mean,
                                  ts_tensor running_var, double eps, int axis);
/* Causal multi-head self-attention: q, k, v (B, H, T, Dh) of one float dtype
 * -> (B, H, T, Dh): softmax(q k^T * scale, masked to keys j <= query i) v,
 * the scores and the softmax in f32. Heads are a dim of their own, so a
 * sharding on H splits attention with no communication. */
ts_tensor ts_causal_attention(ts_graph *g, ts_tensor q, ts_tensor k, ts_tensor v, double scale);
/* The same attention as primitive ops (dot_general, select, softmax): what
 * ts_causal_attention builds for non-f32 operands. For f32 it builds one
 * fused op instead (a kernel that never stores the (B, H, T, T) scores, on
 * q, k, v packed as ts_causal_attention_qkv takes them); this form stays
 * for comparisons. */
ts_tensor ts_causal_attention_decomposed(ts_graph *g, ts_tensor q, ts_tensor k, ts_tensor v, double scale);
/* The same attention on a packed projection qkv (B, T, 3, H, Dh) (q, k, v
 * along dim 2) -> (B, T, H, Dh): what a fused QKV linear gives and its
 * output projection takes, with no slices or transposes around the fused
 * f32 op (a sharding on H (dim 3) splits it by heads). */
ts_tensor ts_causal_attention_qkv(ts_graph *g, ts_tensor qkv, double scale);
/* Inverted dropout: keeps each element with probability 1-p, scales by 1/(1-p). */
ts_tensor ts_dropout(ts_graph *g, ts_tensor x, double p, ts_tensor seed, uint64_t key);

/* ---- program outputs ---- */
/* Marks t as output number ts_graph_num_outputs() - 1; returns its index or -1. */
int ts_graph_add_output(ts_graph *g, ts_tensor t);
/* Donation: output `output` is written into the buffer of input `input` (same
 * dtype and shape), so parameters and optimizer state update in place. */
int ts_graph_alias_output(ts_graph *g, int output, ts_tensor input);
int ts_graph_num_outputs(const ts_graph *g);
ts_tensor ts_graph_output(const ts_graph *g, int i);
int ts_graph_num_inputs(const ts_graph *g);
ts_tensor ts_graph_input(const ts_graph *g, int i);
const char *ts_input_name(const ts_graph *g, ts_tensor input);
/* Input node with this name, or TS_NONE. */
ts_tensor ts_graph_find_input(const ts_graph *g, const char *name);

/* ---- checking and printing ---- */
/* Re-checks every node; on error the message names the node and mismatch. */
int ts_graph_verify(const ts_graph *g);
/* Stable text form, one node per line (malloc'd; free() it). Used by tests
 * and for hashing. */
char *ts_graph_to_string(const ts_graph *g);
/* 64-bit hash of the text form. */
uint64_t ts_graph_hash(const ts_graph *g);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
