/* test_op_table.c — the op table (src/ir/ops.def) against the code that
 * relies on it: names unique and found again by name (the serializer stores
 * ops by name), classes and flags consistent, TS_OP_CASES_ELEMENTWISE equal
 * to the table's elementwise classes, and every fusible op computed by the
 * CPU elementwise kernel: kernels/fused.c's per-op switches end in a default
 * (no build-time check there), and a forgotten case leaves the output
 * unwritten. f32 and i64 results are written in place (no temporary), so an
 * unwritten element still holds the fill. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tessel/tessel.h"

static void test_names(void) {
  for (int op = 0; op < TS_OP_COUNT; op++) {
    const char *name = ir_op_name((ts_op)op);
    CHECK(name && name[0], "op %d has no name", op);
    CHECK(ir_op_from_name(name) == (ts_op)op, "name %s does not find op %d", name, op);
    for (int other = 0; other < op; other++)
      CHECK(strcmp(name, ir_op_name((ts_op)other)) != 0, "ops %d and %d are both named %s", other, op, name);
  }
  CHECK(ir_op_from_name("no_such_op") == TS_OP_COUNT, "an unknown name finds an op");
  CHECK(ir_op_from_name(NULL) == TS_OP_COUNT, "NULL finds an op");
  CHECK(strcmp(ir_op_name(TS_OP_COUNT), "invalid-op") == 0, "TS_OP_COUNT has a name");
  CHECK(ir_op_info_of(TS_OP_COUNT) == NULL, "TS_OP_COUNT has a table row");
}

static bool in_elementwise_cases(ts_op op) {
  switch (op) {
  TS_OP_CASES_ELEMENTWISE
    return true;
  default:
    return false;
  }
}

static void test_classes(void) {
  for (int i = 0; i < TS_OP_COUNT; i++) {
    ts_op op = (ts_op)i;
    const ts_op_info *info = ir_op_info_of(op);
    const char *name = ir_op_name(op);
    CHECK(in_elementwise_cases(op) == ir_op_is_elementwise(op), "TS_OP_CASES_ELEMENTWISE disagrees on %s", name);
    CHECK(ir_op_has(op, TS_OPF_FUSIBLE) == ir_op_is_elementwise(op), "%s: fusible iff elementwise", name);
    if (info->cls == TS_OPC_UNARY) CHECK(info->arity == 1, "unary %s has arity %d", name, info->arity);
    if (info->cls == TS_OPC_BINARY) CHECK(info->arity == 2, "binary %s has arity %d", name, info->arity);
    if (info->cls == TS_OPC_COLLECTIVE)
      CHECK(ir_op_has(op, TS_OPF_NO_CSE) && info->attrs == TS_ATTRS_COLLECTIVE, "collective %s", name);
    CHECK(info->arity >= TS_ARITY_VARIADIC && info->arity <= 3, "%s has arity %d", name, info->arity);
  }
}

/* Runs fusible op on 5 elements of dtype dt and checks that every output
 * byte pattern changed from the 0xA5 fill. */
static void check_kernel(ts_op op, ts_dtype dt) {
  /* kernels.h: buffers are 64-byte aligned */
  static _Alignas(64) const float fa[5] = {0.25f, 0.5f, 0.75f, 1.5f, 2.f}, fb[5] = {2.f, 0.5f, 1.f, 0.25f, 3.f};
  static _Alignas(64) const int64_t ia[5] = {1, 2, 3, 4, 5}, ib[5] = {2, 2, 1, 3, 1};
  static _Alignas(64) const uint8_t pred[5] = {1, 0, 1, 0, 1};
  const int64_t shape[1] = {5};
  ts_graph *g = ts_graph_new();
  ts_tensor a = ts_input(g, "a", dt, 1, shape), b = ts_input(g, "b", dt, 1, shape);
  ts_tensor p = ts_input(g, "p", TS_BOOL, 1, shape);
  ts_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.cmp = TS_CMP_LT;
  int32_t in[3] = {a, b, b};
  ts_dtype out_dt = op == TS_OP_COMPARE ? TS_BOOL : op == TS_OP_CONVERT ? TS_F64 : dt;
  if (op == TS_OP_SELECT) in[0] = p, in[1] = a, in[2] = b;
  ts_tensor z = ir_append(g, op, out_dt, 1, shape, ir_op_arity(op), in, &attr);
  const void *bufs[3] = {dt == TS_F32 ? (const void *)fa : ia, dt == TS_F32 ? (const void *)fb : ib, fb};
  if (op == TS_OP_SELECT) bufs[0] = pred, bufs[1] = dt == TS_F32 ? (const void *)fa : ia, bufs[2] = bufs[1];
  _Alignas(64) unsigned char out[5 * 8]; /* 5 elements of at most 8 bytes */
  memset(out, 0xA5, sizeof out);
  ts_kstate *state = NULL;
  int rc = kernel_run(g, z, bufs, out, &state, NULL);
  CHECK(rc == 0, "%s %s: %s", ir_op_name(op), ts_dtype_name(dt), ts_last_error());
  size_t es = ts_dtype_size(out_dt);
  unsigned char fill[8];
  memset(fill, 0xA5, sizeof fill);
  for (int i = 0; rc == 0 && i < 5; i++)
    CHECK(memcmp(out + i * es, fill, es) != 0, "%s %s: element %d not written (no kernel case?)", ir_op_name(op),
          ts_dtype_name(dt), i);
  if (state) state->free(state);
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_op_table", 0);
  test_names();
  test_classes();
  for (int op = 0; op < TS_OP_COUNT; op++) {
    if (!ir_op_has((ts_op)op, TS_OPF_FUSIBLE)) continue;
    check_kernel((ts_op)op, TS_F32);
    check_kernel((ts_op)op, TS_I64);
  }
  return ts_test_finish();
}
