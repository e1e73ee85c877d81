/* ir_ops.c — the op table (one row per line of ops.def) and the questions
 * passes ask about ops. Everything here is a lookup: an op's metadata lives
 * in ops.def only. */
#include <string.h>

#include "ir/ir.h"

#define VAR TS_ARITY_VARIADIC
static const ts_op_info op_table[] = {
#define TS_OP(id, name, arity, cls, attrs, flags) [TS_OP_##id] = {name, arity, TS_OPC_##cls, TS_ATTRS_##attrs, flags},
#include "ir/ops.def"
#undef TS_OP
};
#undef VAR
_Static_assert(sizeof op_table / sizeof op_table[0] == TS_OP_COUNT, "op table and ts_op disagree");

const ts_op_info *ir_op_info_of(ts_op op) { return (unsigned)op < TS_OP_COUNT ? &op_table[op] : NULL; }

const char *ir_op_name(ts_op op) { return (unsigned)op < TS_OP_COUNT ? op_table[op].name : "invalid-op"; }

ts_op ir_op_from_name(const char *name) {
  for (int op = 0; name && op < TS_OP_COUNT; op++)
    if (strcmp(op_table[op].name, name) == 0) return (ts_op)op;
  return TS_OP_COUNT;
}

int ir_op_arity(ts_op op) { return (unsigned)op < TS_OP_COUNT ? op_table[op].arity : -2; }

ts_op_attrs ir_op_attr_kind(ts_op op) { return (unsigned)op < TS_OP_COUNT ? op_table[op].attrs : TS_ATTRS_NONE; }

bool ir_op_has(ts_op op, unsigned flags) {
  return (unsigned)op < TS_OP_COUNT && (op_table[op].flags & flags) == flags;
}

static bool in_class(ts_op op, ts_op_class c) { return (unsigned)op < TS_OP_COUNT && op_table[op].cls == c; }

bool ir_op_is_unary(ts_op op) { return in_class(op, TS_OPC_UNARY); }

bool ir_op_is_binary(ts_op op) { return in_class(op, TS_OPC_BINARY); }

bool ir_op_is_elementwise(ts_op op) {
  return in_class(op, TS_OPC_UNARY) || in_class(op, TS_OPC_BINARY) || in_class(op, TS_OPC_ELEMENTWISE);
}

bool ir_op_is_collective(ts_op op) { return in_class(op, TS_OPC_COLLECTIVE); }
