/* ad.h — internals of reverse-mode autodiff shared by the traversal
 * (autodiff.c) and the per-op adjoint rules (adjoints.c). */
#ifndef TS_AD_H
#define TS_AD_H

#include "ir/ir.h"

/* Most operands a node with an adjoint rule has (select, scatter_add: 3);
 * concatenate may have more and is handled without this bound. */
#define AD_MAX_OPERANDS 3

/* True when operand i of node n can carry a gradient: false for the
 * predicate of select, the indices of gather/scatter_add and the seed of the
 * random ops; true for every operand of ops that are differentiable in all
 * of them (and of FUSED, so that meeting one reports an error). */
bool ad_operand_differentiable(const ts_node *n, int i);

/* The adjoint rule of node z: given its cotangent dz (same dtype and shape
 * as z), appends nodes computing the cotangent contribution of each operand
 * i with need[i] set and stores it in contrib[i] (others are TS_NONE; an
 * operand whose contribution is identically zero may be left TS_NONE).
 * contrib has room for n_in entries. Returns 0, or -1 with a message naming
 * the node when the op has no adjoint or a builder failed. */
int ad_adjoint(ts_graph *g, ts_tensor z, ts_tensor dz, const bool *need, ts_tensor *contrib);

/* Train-mode batch norm in closed form (bn_adjoint.c): when node y is the
 * output of ts_batch_norm_train's pattern and nothing else sends cotangents
 * into its inner nodes, stores in contrib[j] the cotangent contribution to
 * to[j] (x, gamma, beta; TS_NONE where dep[] is false) from y's cotangent
 * cot[y] and returns 1; returns 0 when the pattern does not apply (autodiff
 * goes node by node), -1 with a message when a builder failed. */
int ad_batch_norm_adjoint(ts_graph *g, ts_tensor y, const ts_tensor *cot, int n_nodes, const bool *dep,
                          ts_tensor to[3], ts_tensor contrib[3]);

#endif
