/* infer.h — shape and dtype inference for one IR node, shared by the builders
 * (which check before appending) and ts_graph_verify (which re-checks). */
#ifndef TS_IR_INFER_H
#define TS_IR_INFER_H

#include "ir/ir.h"

/* Checks operands in[0..n_in) of op with attr and computes the result dtype,
 * rank and shape (shape has room for TS_MAX_RANK dims). Returns 0, or -1 with
 * a message that starts with the op name ("reshape: cannot reshape ...").
 *
 * For ops whose result is not implied by operands and attributes, *dt, *rank
 * and shape are inputs (the requested result) that are checked and left
 * unchanged: INPUT, CONSTANT, IOTA, RNG_UNIFORM, RNG_NORMAL, CONVERT (dtype
 * only), BROADCAST, RESHAPE, CONV_BWD_DATA, CONV_BWD_FILTER, AVGPOOL_GRAD,
 * FUSED (shape only; dtype is the program's last instruction). Attributes are
 * expected normalized (conv stride/dilation/groups >= 1, pool stride >= 1). */
int ir_infer(const ts_graph *g, ts_op op, int n_in, const int32_t *in, const ts_attr *attr, ts_dtype *dt,
             int *rank, int64_t *shape);

/* True for the ops listed above whose result is an input of ir_infer. */
bool ir_infer_result_given(ts_op op);

#endif
