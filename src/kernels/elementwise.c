/* elementwise.c — unary, binary, COMPARE, SELECT and CONVERT nodes: each runs
 * as a one-instruction program through the tiled evaluator of fused.c. */
#include "kernels/kernels_internal.h"

int tk_elementwise(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  ts_fused_instr ins = {.op = n->op, .cmp = n->attr.cmp, .dtype = n->dtype, .a = -1, .b = -2, .c = -3};
  ts_fused prog = {1, &ins};
  ts_dtype dt[3];
  int64_t ne[3];
  if (n->n_in < 1 || n->n_in > 3) return set_error("%s: %d operands", ir_op_name(n->op), n->n_in);
  for (int k = 0; k < n->n_in; k++) {
    dt[k] = tk_operand(g, n, k)->dtype;
    ne[k] = tk_numel(tk_operand(g, n, k));
  }
  return tk_program_run(&prog, n->n_in, dt, ne, in, out, n->dtype, tk_numel(n), ctx);
}
