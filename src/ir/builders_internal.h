/* builders_internal.h — builders for IR ops that have no public builder:
 * the backward ops of convolution and pooling (used by autodiff), and a
 * generic checked append used by passes that construct arbitrary nodes.
 * Like the public builders they return TS_NONE with a message on error and
 * propagate TS_NONE operands. */
#ifndef TS_IR_BUILDERS_INTERNAL_H
#define TS_IR_BUILDERS_INTERNAL_H

#include "ir/ir.h"

/* Gradient of conv2d w.r.t. its input: dy (N, O, OH, OW), w (O, C/g, KH, KW)
 * -> dx with shape x_shape (rank 4, (N, C, H, W)). x_shape is needed because
 * a strided conv maps several input heights to one output height. p is the
 * forward conv's params (zeros are normalized to the defaults). */
ts_tensor ir_conv_bwd_data(ts_graph *g, ts_tensor dy, ts_tensor w, const ts_conv_params *p, int rank,
                           const int64_t *x_shape);
/* Gradient of conv2d w.r.t. its weight: x (N, C, H, W), dy (N, O, OH, OW) ->
 * dw with shape w_shape (O, C/g, KH, KW). */
ts_tensor ir_conv_bwd_filter(ts_graph *g, ts_tensor x, ts_tensor dy, const ts_conv_params *p,
                             const int64_t *w_shape);
/* Gradient of max_pool2d: x (N, C, H, W), dy (N, C, OH, OW) -> dx (N, C, H, W);
 * each dy element goes to the first maximum of its window. */
ts_tensor ir_maxpool_grad(ts_graph *g, ts_tensor x, ts_tensor dy, const ts_pool_params *p);
/* Gradient of avg_pool2d: dy (N, C, OH, OW) -> dx with shape x_shape (rank 4). */
ts_tensor ir_avgpool_grad(ts_graph *g, ts_tensor dy, const ts_pool_params *p, const int64_t *x_shape);
/* Fused layer norm over the last dim (composites.c picks it for f32 with
 * gamma and beta): x (.., D), gamma, beta (D) -> (.., D); its gradients
 * dx = layer_norm_grad(x, gamma, dy) and dgamma = sum over rows of
 * dy * xhat (D). */
ts_tensor ir_layernorm(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor beta, double eps);
ts_tensor ir_layernorm_grad(ts_graph *g, ts_tensor x, ts_tensor gamma, ts_tensor dy, double eps);
ts_tensor ir_layernorm_dgamma(ts_graph *g, ts_tensor x, ts_tensor dy, double eps);
/* Fused causal attention (composites.c uses it for f32): qkv (B, T, 3, H, Dh)
 * -> y (B, T, H, Dh); and its gradient for cotangent dy: dqkv (qkv's shape). */
ts_tensor ir_attention(ts_graph *g, ts_tensor qkv, double scale);
ts_tensor ir_attention_grad(ts_graph *g, ts_tensor qkv, ts_tensor dy, double scale);

/* Checks a node with ir_infer and appends it. For ops whose result is not
 * implied by the operands (see infer.h) dt/rank/shape give the result;
 * otherwise they are ignored (pass 0/NULL). in[] must not contain TS_NONE
 * (returns TS_NONE). attr may be NULL (all zeros). */
ts_tensor ir_build(ts_graph *g, ts_op op, int n_in, const int32_t *in, const ts_attr *attr, ts_dtype dt,
                   int rank, const int64_t *shape);

/* Normalized copies of the user's params (conv stride/dilation/groups 0 -> 1,
 * pool stride 0 -> kernel). */
ts_conv_params ir_conv_normalize(const ts_conv_params *p);
ts_pool_params ir_pool_normalize(const ts_pool_params *p);

#endif
