/* ir.h — the graph IR inside tessel: ops, node attributes, the graph struct.
 *
 * Nodes live in one array in creation order, which is a topological order
 * (operands always have smaller ids). Compiler passes never edit a graph in
 * place: they build a new graph (ir_rebuild helpers in ir_build.c). */
#ifndef TS_IR_H
#define TS_IR_H

#include "tessel/graph.h"
#include "util/error.h"

typedef enum {
  /* leaves */
  TS_OP_INPUT,      /* attr.input_index, name */
  TS_OP_CONSTANT,   /* data (numel * size bytes) or, when data == NULL, attr.value splat */
  TS_OP_IOTA,       /* attr.axis */
  TS_OP_RNG_UNIFORM,/* in[0] = seed (rank-0 int), attr.key */
  TS_OP_RNG_NORMAL, /* in[0] = seed, attr.key */
  /* unary elementwise */
  TS_OP_NEG, TS_OP_ABS, TS_OP_EXP, TS_OP_LOG, TS_OP_LOG1P, TS_OP_TANH, TS_OP_SQRT,
  TS_OP_RSQRT, TS_OP_SIGMOID, TS_OP_ERF,
  TS_OP_CONVERT,    /* to node dtype */
  /* binary elementwise (same shapes) */
  TS_OP_ADD, TS_OP_SUB, TS_OP_MUL, TS_OP_DIV, TS_OP_MAX, TS_OP_MIN, TS_OP_POW,
  TS_OP_COMPARE,    /* attr.cmp; result TS_BOOL */
  TS_OP_SELECT,     /* in = pred, on_true, on_false (same shapes) */
  /* shape */
  TS_OP_BROADCAST,  /* attr.dims[i] = output dim of operand dim i (n_dims = operand rank) */
  TS_OP_RESHAPE,
  TS_OP_TRANSPOSE,  /* attr.dims = perm (n_dims = rank) */
  TS_OP_SLICE,      /* attr.start, attr.limit, attr.stride */
  TS_OP_PAD,        /* attr.start = lo, attr.limit = hi, attr.value */
  TS_OP_CONCAT,     /* attr.axis; n_in operands */
  /* contractions */
  TS_OP_DOT,        /* attr.dot */
  TS_OP_CONV,       /* in = x (N,C,H,W), w (O,C/g,KH,KW); attr.conv */
  TS_OP_CONV_BWD_DATA,   /* in = dy (N,O,OH,OW), w; output shape = x shape */
  TS_OP_CONV_BWD_FILTER, /* in = x, dy; output shape = w shape */
  TS_OP_MAXPOOL,    /* attr.pool */
  TS_OP_MAXPOOL_GRAD,/* in = x, dy; output = x shape (dy routed to first max) */
  TS_OP_AVGPOOL,    /* attr.pool */
  TS_OP_AVGPOOL_GRAD,/* in = dy; output shape = x shape */
  /* reductions */
  TS_OP_REDUCE,     /* attr.reduce, attr.dims (n_dims, ascending); dims removed */
  /* indexing (axis 0) */
  TS_OP_GATHER,     /* in = table, indices */
  TS_OP_SCATTER_ADD,/* in = base, indices, updates */
  /* produced by the compiler only */
  TS_OP_FUSED,      /* attr.fused: elementwise program over n_in inputs */
  /* collectives between the devices of one SPMD program (spmd/partition.c
   * emits them into per-device graphs; attr.coll lists this device's group).
   * Their result shape is given (checked by the partitioner). */
  TS_OP_ALL_REDUCE,        /* attr.reduce over coll->ids; same shape */
  TS_OP_ALL_GATHER,        /* concatenates along attr.axis in group order */
  TS_OP_REDUCE_SCATTER,    /* attr.reduce, then keeps this member's block of attr.axis */
  TS_OP_ALL_TO_ALL,        /* splits attr.axis, concatenates along attr.dims[0] */
  TS_OP_COLLECTIVE_PERMUTE,/* coll->ids = (source, target) pairs; same shape */
  TS_OP_COUNT
} ts_op;

/* An elementwise program evaluated per element by one kernel (TS_OP_FUSED).
 * Operand encoding: a value >= 0 is an earlier instruction; a value < 0 is
 * external input (-v - 1), i.e. node->in[-v - 1]. External inputs have the
 * node's numel or are scalars (numel 1, broadcast). Instructions use ops from
 * the elementwise set (unary, binary, COMPARE, SELECT, CONVERT) and CONSTANT
 * (splat of .value). The result is the last instruction. */
typedef struct {
  ts_op op;
  ts_cmp cmp;
  ts_dtype dtype;   /* result dtype of this instruction */
  int32_t a, b, c;  /* operands (unused = 0) */
  double value;     /* CONSTANT */
} ts_fused_instr;

typedef struct {
  int n;
  ts_fused_instr *ins;
} ts_fused;

/* The devices of a collective (owned by its node). */
typedef struct {
  int n;          /* group size (or number of pairs for a permute) */
  int32_t *ids;   /* (n) device ids in rank order, or (2n) source/target pairs */
} ts_collective;

typedef struct {
  int axis;
  int n_dims;
  int dims[TS_MAX_RANK];
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK], stride[TS_MAX_RANK];
  double value;
  ts_cmp cmp;
  ts_reduce_kind reduce;
  uint64_t key;
  int input_index;
  ts_dot_dims dot;
  ts_conv_params conv;  /* normalized: stride/dilation/groups >= 1 */
  ts_pool_params pool;  /* normalized: stride >= 1 */
  ts_fused *fused;      /* owned by the node */
  ts_collective *coll;  /* collectives only; owned by the node */
  /* RNG on one shard (partitioner): when global is set, element i of the
   * local block is the element (goffset + local index) of a tensor of shape
   * gshape, so every shard equals its part of the 1-device result. */
  bool global;
  int64_t goffset[TS_MAX_RANK], gshape[TS_MAX_RANK];
} ts_attr;

typedef struct {
  ts_op op;
  ts_dtype dtype;
  int rank;
  int64_t shape[TS_MAX_RANK];
  int n_in;
  int32_t *in;          /* owned; operand node ids */
  ts_attr attr;
  char *name;           /* INPUT only; owned */
  void *data;           /* CONSTANT only; owned; NULL for a splat */
  struct ts_sharding *sharding; /* user annotation (ts_mark_sharding); owned; NULL if none */
  /* Built inside a manual SPMD region (ts_shard_map): a per-device value whose
   * shape is a block's; collectives in it name mesh axes (attr.dims[0..n_dims),
   * coll == NULL) instead of device groups. The region's entry is a manual
   * SLICE from 0 carrying the operand's sharding; its exit a (not manual) PAD
   * on the high side carrying the result's sharding. spmd/ resolves them. */
  bool manual;
} ts_node;

struct ts_graph {
  ts_node *nodes;
  int n_nodes, cap_nodes;
  int32_t *inputs;      /* node ids of INPUT nodes, by input_index */
  int n_inputs, cap_inputs;
  int32_t *outputs;     /* node ids */
  int32_t *alias;       /* per output: input index it is written into, or -1 */
  int n_outputs, cap_outputs;
  int manual_depth;     /* > 0 while a ts_shard_map body is being built */
};

/* ---- op metadata (ir_ops.c) ---- */
const char *ts_op_name(ts_op op);
bool ts_op_is_unary(ts_op op);
bool ts_op_is_binary(ts_op op);
/* unary, binary, COMPARE, SELECT, CONVERT: computed element by element. */
bool ts_op_is_elementwise(ts_op op);
/* ALL_REDUCE .. COLLECTIVE_PERMUTE: every device must run them, in the same
 * order, so passes never remove, merge or reorder them. */
bool ts_op_is_collective(ts_op op);

/* ---- low-level construction (ir_build.c), used by builders and passes ---- */
static inline const ts_node *ts_node_at(const ts_graph *g, ts_tensor t) { return &g->nodes[t]; }
/* Appends a node with the given fields (in[] and attr copied; attr.fused and
 * attr.coll are taken over, also on failure). Returns the id, or TS_NONE with
 * TS_ERR_OUT_OF_MEMORY and the graph unchanged. Does no other checking. */
ts_tensor ir_append(ts_graph *g, ts_op op, ts_dtype dt, int rank, const int64_t *shape,
                    int n_in, const int32_t *in, const ts_attr *attr);
/* Deep copy of a node's owned parts (fused program, collective groups, name,
 * data) into dst. Returns -1 (out of memory) with every part it could not
 * copy NULL: the caller must drop dst's graph, which stays safe to free. */
int ir_node_copy_owned(ts_node *dst, const ts_node *src);
/* True when t is a valid node of g (sets the error naming `who` if not). */
bool ir_check_tensor(const ts_graph *g, ts_tensor t, const char *who);
/* "f32[128,784]" into buf. */
const char *ir_shape_str(const ts_node *n, char *buf, size_t len);

#endif
