/* ir_ops.c — op metadata: printable names and the op classes passes ask about. */
#include "ir/ir.h"

static const char *const op_names[TS_OP_COUNT] = {
    [TS_OP_INPUT] = "input",
    [TS_OP_CONSTANT] = "constant",
    [TS_OP_IOTA] = "iota",
    [TS_OP_RNG_UNIFORM] = "rng_uniform",
    [TS_OP_RNG_NORMAL] = "rng_normal",
    [TS_OP_NEG] = "neg",
    [TS_OP_ABS] = "abs",
    [TS_OP_EXP] = "exp",
    [TS_OP_LOG] = "log",
    [TS_OP_LOG1P] = "log1p",
    [TS_OP_TANH] = "tanh",
    [TS_OP_SQRT] = "sqrt",
    [TS_OP_RSQRT] = "rsqrt",
    [TS_OP_SIGMOID] = "sigmoid",
    [TS_OP_ERF] = "erf",
    [TS_OP_CONVERT] = "convert",
    [TS_OP_ADD] = "add",
    [TS_OP_SUB] = "sub",
    [TS_OP_MUL] = "mul",
    [TS_OP_DIV] = "div",
    [TS_OP_MAX] = "max",
    [TS_OP_MIN] = "min",
    [TS_OP_POW] = "pow",
    [TS_OP_COMPARE] = "compare",
    [TS_OP_SELECT] = "select",
    [TS_OP_BROADCAST] = "broadcast",
    [TS_OP_RESHAPE] = "reshape",
    [TS_OP_TRANSPOSE] = "transpose",
    [TS_OP_SLICE] = "slice",
    [TS_OP_PAD] = "pad",
    [TS_OP_CONCAT] = "concatenate",
    [TS_OP_DOT] = "dot_general",
    [TS_OP_CONV] = "conv2d",
    [TS_OP_CONV_BWD_DATA] = "conv2d_bwd_data",
    [TS_OP_CONV_BWD_FILTER] = "conv2d_bwd_filter",
    [TS_OP_MAXPOOL] = "max_pool2d",
    [TS_OP_MAXPOOL_GRAD] = "max_pool2d_grad",
    [TS_OP_AVGPOOL] = "avg_pool2d",
    [TS_OP_AVGPOOL_GRAD] = "avg_pool2d_grad",
    [TS_OP_REDUCE] = "reduce",
    [TS_OP_GATHER] = "gather",
    [TS_OP_SCATTER_ADD] = "scatter_add",
    [TS_OP_FUSED] = "fused",
    [TS_OP_ALL_REDUCE] = "all_reduce",
    [TS_OP_ALL_GATHER] = "all_gather",
    [TS_OP_REDUCE_SCATTER] = "reduce_scatter",
    [TS_OP_ALL_TO_ALL] = "all_to_all",
    [TS_OP_COLLECTIVE_PERMUTE] = "collective_permute",
};

const char *ts_op_name(ts_op op) {
  if ((unsigned)op >= TS_OP_COUNT || !op_names[op]) return "invalid-op";
  return op_names[op];
}

bool ts_op_is_unary(ts_op op) { return op >= TS_OP_NEG && op <= TS_OP_ERF; }

bool ts_op_is_binary(ts_op op) { return op >= TS_OP_ADD && op <= TS_OP_POW; }

bool ts_op_is_elementwise(ts_op op) {
  return ts_op_is_unary(op) || ts_op_is_binary(op) || op == TS_OP_CONVERT || op == TS_OP_COMPARE ||
         op == TS_OP_SELECT;
}

bool ts_op_is_collective(ts_op op) { return op >= TS_OP_ALL_REDUCE && op <= TS_OP_COLLECTIVE_PERMUTE; }
