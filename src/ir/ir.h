/* ir.h — the graph IR inside tessel: ops, node attributes, the graph struct.
 *
 * Nodes live in one array in creation order, which is a topological order
 * (operands always have smaller ids). Compiler passes never edit a graph in
 * place: they build a new graph (ir_rebuild helpers in ir_build.c). */
#ifndef TS_IR_H
#define TS_IR_H

#include "tessel/graph.h"
#include "util/error.h"

/* The ops, in the order of ops.def (which documents each op's operands and
 * attributes). */
typedef enum {
#define TS_OP(id, name, arity, cls, attrs, flags) TS_OP_##id,
#include "ir/ops.def"
#undef TS_OP
  TS_OP_COUNT
} ts_op;

/* What kind of computation an op is; generic passes act on the class. */
typedef enum {
  TS_OPC_LEAF,        /* no data operands (RNG takes a seed) */
  TS_OPC_UNARY,       /* elementwise f(x) */
  TS_OPC_BINARY,      /* elementwise f(a, b), same shapes */
  TS_OPC_ELEMENTWISE, /* other elementwise: CONVERT, COMPARE, SELECT */
  TS_OPC_SHAPE,       /* moves elements, computes nothing */
  TS_OPC_CONTRACTION, /* dot, convolutions, pooling windows */
  TS_OPC_REDUCTION,
  TS_OPC_INDEXING,    /* gather / scatter along axis 0 */
  TS_OPC_COMPILER,    /* made by compiler passes only (FUSED) */
  TS_OPC_COLLECTIVE,  /* communication between the devices of an SPMD program */
} ts_op_class;

/* Which ts_attr fields an op uses (the printer, CSE and the hash compare
 * exactly these; ops of one kind share code there). */
typedef enum {
  TS_ATTRS_NONE,       /* operands say it all */
  TS_ATTRS_INPUT,      /* input_index and the node name */
  TS_ATTRS_CONSTANT,   /* node data, or value (splat) */
  TS_ATTRS_AXIS,       /* axis */
  TS_ATTRS_RNG,        /* key, global / goffset / gshape */
  TS_ATTRS_CMP,        /* cmp */
  TS_ATTRS_DIMS,       /* dims[n_dims] (broadcast map) */
  TS_ATTRS_PERM,       /* dims[n_dims] (permutation) */
  TS_ATTRS_SLICE,      /* start, limit, stride (operand rank) */
  TS_ATTRS_PAD,        /* start = lo, limit = hi (operand rank), value */
  TS_ATTRS_DOT,        /* dot */
  TS_ATTRS_CONV,       /* conv */
  TS_ATTRS_POOL,       /* pool */
  TS_ATTRS_REDUCE,     /* reduce, dims[n_dims] */
  TS_ATTRS_FUSED,      /* fused program */
  TS_ATTRS_COLLECTIVE, /* coll (or mesh axes in dims), reduce, axis, dims[0] */
  TS_ATTRS_VALUE,      /* value (a scale) */
} ts_op_attrs;

/* Op flags (ops.def). */
enum {
  /* ir_infer takes the result dtype/shape as an input and checks it */
  TS_OPF_RESULT_GIVEN = 1u << 0,
  /* may become an instruction of a FUSED program (opt/fuse.c) */
  TS_OPF_FUSIBLE = 1u << 1,
  /* never merged by CSE (collectives: every device runs each one) */
  TS_OPF_NO_CSE = 1u << 2,
  /* f(a, b) == f(b, a) bit for bit (no pass canonicalizes on it yet: doing
   * so would change compiled programs) */
  TS_OPF_COMMUTATIVE = 1u << 3,
};

#define TS_ARITY_VARIADIC (-1)

/* The case labels of every elementwise op (classes UNARY, BINARY and
 * ELEMENTWISE), for exhaustive switches whose rule is the same for the whole
 * class (sharding follows the operand). tests/test_op_table.c checks it
 * against the table. */
#define TS_OP_CASES_ELEMENTWISE                                                                              \
  case TS_OP_NEG: case TS_OP_ABS: case TS_OP_EXP: case TS_OP_LOG: case TS_OP_LOG1P: case TS_OP_TANH:         \
  case TS_OP_SQRT: case TS_OP_RSQRT: case TS_OP_SIGMOID: case TS_OP_ERF: case TS_OP_GELU: case TS_OP_CONVERT:     \
  case TS_OP_ADD:                                                                                            \
  case TS_OP_SUB: case TS_OP_MUL: case TS_OP_DIV: case TS_OP_MAX: case TS_OP_MIN: case TS_OP_POW:            \
  case TS_OP_COMPARE: case TS_OP_SELECT:

/* One row of the op table (ir_ops.c, generated from ops.def). */
typedef struct {
  const char *name;
  int arity; /* operand count, or TS_ARITY_VARIADIC */
  ts_op_class cls;
  ts_op_attrs attrs;
  unsigned flags;
} ts_op_info;

/* An elementwise program evaluated per element by one kernel (TS_OP_FUSED).
 * Operand encoding: a value >= 0 is an earlier instruction; a value < 0 is
 * external input (-v - 1), i.e. node->in[-v - 1]. External inputs have the
 * node's numel or are scalars (numel 1, broadcast). Instructions use ops from
 * the elementwise set (unary, binary, COMPARE, SELECT, CONVERT), CONSTANT
 * (splat of .value) and BROADCAST (a = an external input of any numel m:
 * element i reads its element (i / .value) % m). The result is the last
 * instruction. A FUSED node with attr.n_dims > 0 is a fused reduction: the
 * program runs over the shape attr.gshape[0 .. attr.axis) and its f32 result
 * is summed (attr.reduce sum or mean) over attr.dims into the node's shape.
 * A stacked fused reduction (opt/fuse.c's sibling sums read in one pass) has
 * one dim more than the reduced shape, in front: k >= 2 results, the
 * program's last k instructions, result q summed into block q (see
 * ir_fused_results). */
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

/* The number of results of a fused reduction whose node has rank `rank`
 * and attributes at: 1, or k = shape[0] when stacked (rank one more than the
 * reduced shape's). */
static inline int64_t ir_fused_results(const ts_attr *at, int rank, const int64_t *shape) {
  return at->n_dims > 0 && rank == at->axis - at->n_dims + 1 ? shape[0] : 1;
}

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
/* The table row of op, or NULL for a value outside the enum. */
const ts_op_info *ir_op_info_of(ts_op op);
/* "add"; "invalid-op" outside the enum. */
const char *ir_op_name(ts_op op);
/* The op named name (its ops.def name), or TS_OP_COUNT if none is. */
ts_op ir_op_from_name(const char *name);
/* Operand count, TS_ARITY_VARIADIC, or -2 for an invalid op. */
int ir_op_arity(ts_op op);
/* The attribute kind of op (TS_ATTRS_NONE for an invalid op). */
ts_op_attrs ir_op_attr_kind(ts_op op);
/* True when op is valid and has every bit of flags. */
bool ir_op_has(ts_op op, unsigned flags);
bool ir_op_is_unary(ts_op op);
bool ir_op_is_binary(ts_op op);
/* unary, binary, COMPARE, SELECT, CONVERT: computed element by element. */
bool ir_op_is_elementwise(ts_op op);
/* ALL_REDUCE .. COLLECTIVE_PERMUTE: every device must run them, in the same
 * order, so passes never remove, merge or reorder them. */
bool ir_op_is_collective(ts_op op);

/* ---- activation layouts (ts_layout) of conv / pool nodes ----
 * The dim of a rank-4 activation that holds the channels, and the first of
 * its two spatial dims (H; W follows): NCHW 1 and 2, NHWC 3 and 1. */
static inline int ir_chan_dim(ts_layout l) { return l == TS_LAYOUT_NHWC ? 3 : 1; }
static inline int ir_space_dim(ts_layout l) { return l == TS_LAYOUT_NHWC ? 1 : 2; }

/* ---- low-level construction (ir_build.c), used by builders and passes ---- */
static inline const ts_node *ts_node_at(const ts_graph *g, ts_tensor t) { return &g->nodes[t]; }
/* What a chain of reshapes ending at t reshapes, t itself if none: the node
 * whose memory t names (a reshape only renames it). */
static inline int32_t ir_reshape_base(const ts_graph *g, int32_t t) {
  while (g->nodes[t].op == TS_OP_RESHAPE) t = g->nodes[t].in[0];
  return t;
}
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

/* ---- train-mode batch norm's node structure (bn_pattern.c) ----
 * The one matcher of ts_batch_norm_train_axis's forward and of its closed-form
 * input gradient, for autodiff (ad/bn_adjoint.c) and bf16 autocast. */
enum { IR_BN_MAX_INNER = 16 };
typedef struct {
  ts_tensor x, gamma, beta, xc, inv, m, ve; /* ve = v + eps */
  int axis;                                 /* the channel dim */
  int n_inner;
  ts_tensor inner[IR_BN_MAX_INNER]; /* the pattern's nodes between x and y (y excluded) */
} ir_bn;
/* y = xc * B(inv) * B(gamma) + B(beta) as ts_batch_norm_train_axis builds it
 * (affine; all B along one channel dim): fills *m and returns true. */
bool ir_bn_match(const ts_graph *g, ts_tensor y, ir_bn *m);
/* Appends dx = (dy - B(a) - m->xc * B(b)) * B(k), a, b, k (C) vectors
 * broadcast along m->axis; returns dx (TS_NONE with the builder's error). */
ts_tensor ir_bn_input_grad(ts_graph *g, const ir_bn *m, ts_tensor dy, ts_tensor a, ts_tensor b, ts_tensor k);
/* dx built by ir_bn_input_grad: returns its batch norm's input x, else TS_NONE. */
ts_tensor ir_bn_input_grad_source(const ts_graph *g, ts_tensor dx);

#endif
