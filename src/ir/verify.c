/* verify.c — ts_graph_verify: re-checks every node of a graph with the same
 * inference the builders use (infer.c), plus the graph-level invariants
 * (topological operand order, input table, unique names, outputs, aliasing).
 * Messages name the node: "node %12 (dot_general): ...". */
#include <stdio.h>
#include <string.h>

#include "ir/infer.h"

/* Re-raises the current message prefixed with the node, dropping the op-name
 * prefix ir_infer puts at the start. */
static int node_error(const ts_graph *g, int id) {
  const ts_node *n = ts_node_at(g, id);
  const char *name = ir_op_name(n->op);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ts_last_error());
  const char *m = msg;
  size_t len = strlen(name);
  if (strncmp(m, name, len) == 0 && m[len] == ':' && m[len + 1] == ' ') m += len + 2;
  return set_error("node %%%d (%s): %s", id, name, m);
}

static int check_fused_instr_dtypes(const ts_graph *g, int id) {
  const ts_node *n = ts_node_at(g, id);
  const ts_fused *f = n->attr.fused;
  for (int j = 0; j < f->n; j++)
    if (f->ins[j].op == TS_OP_COMPARE && f->ins[j].dtype != TS_BOOL)
      return set_error("node %%%d (fused): instruction %d is a compare with result %s (must be bool)", id, j,
                          ts_dtype_name(f->ins[j].dtype));
  return 0;
}

static int verify_node(const ts_graph *g, int id) {
  const ts_node *n = ts_node_at(g, id);
  if ((unsigned)n->op >= TS_OP_COUNT) return set_error("node %%%d: invalid op %d", id, (int)n->op);
  const char *name = ir_op_name(n->op);
  if (n->n_in < 0 || (n->n_in > 0 && !n->in))
    return set_error("node %%%d (%s): bad operand list (%d operands)", id, name, n->n_in);
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] < 0 || n->in[k] >= id)
      return set_error("node %%%d (%s): operand %d is %%%d, which is not an earlier node", id, name, k, n->in[k]);
  if (n->rank < 0 || n->rank > TS_MAX_RANK)
    return set_error("node %%%d (%s): rank %d is outside [0, %d]", id, name, n->rank, TS_MAX_RANK);
  if (n->op == TS_OP_INPUT) {
    int k = n->attr.input_index;
    if (!n->name) return set_error("node %%%d (input): has no name", id);
    if (k < 0 || k >= g->n_inputs || g->inputs[k] != id)
      return set_error("node %%%d (input): input index #%d does not point back to it", id, k);
  }
  ts_dtype dt = n->dtype;
  int rank = n->rank;
  int64_t shape[TS_MAX_RANK] = {0};
  memcpy(shape, n->shape, (size_t)n->rank * sizeof *shape);
  if (ir_infer(g, n->op, n->n_in, n->in, &n->attr, &dt, &rank, shape)) return node_error(g, id);
  bool same = dt == n->dtype && rank == n->rank;
  for (int d = 0; same && d < rank; d++) same = shape[d] == n->shape[d];
  if (!same) {
    ts_node want = *n;
    want.dtype = dt;
    want.rank = rank;
    memcpy(want.shape, shape, sizeof shape);
    char sh[96], sw[96];
    return set_error("node %%%d (%s): recorded as %s but its operands imply %s", id, name,
                        ir_shape_str(n, sh, sizeof sh), ir_shape_str(&want, sw, sizeof sw));
  }
  if (n->op == TS_OP_FUSED) return check_fused_instr_dtypes(g, id);
  return 0;
}

int ts_graph_verify(const ts_graph *g) {
  if (!g) return set_error("verify: graph is NULL");
  for (int k = 0; k < g->n_inputs; k++) {
    int32_t id = g->inputs[k];
    if (id < 0 || id >= g->n_nodes || g->nodes[id].op != TS_OP_INPUT)
      return set_error("verify: input #%d refers to %%%d, which is not an input node", k, id);
    for (int j = 0; j < k; j++) {
      const char *a = g->nodes[g->inputs[j]].name, *b = g->nodes[id].name;
      if (a && b && strcmp(a, b) == 0)
        return set_error("verify: inputs #%d and #%d are both named \"%s\"", j, k, a);
    }
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (verify_node(g, i)) return -1;
  for (int o = 0; o < g->n_outputs; o++) {
    int32_t id = g->outputs[o];
    if (id < 0 || id >= g->n_nodes)
      return set_error("verify: output %d refers to %%%d but the graph has %d nodes", o, id, g->n_nodes);
    int32_t a = g->alias ? g->alias[o] : -1;
    if (a == -1) continue;
    if (a < 0 || a >= g->n_inputs)
      return set_error("verify: output %d aliases input #%d but the graph has %d inputs", o, a, g->n_inputs);
    const ts_node *in = ts_node_at(g, g->inputs[a]), *out = ts_node_at(g, id);
    bool same = in->dtype == out->dtype && in->rank == out->rank;
    for (int d = 0; same && d < in->rank; d++) same = in->shape[d] == out->shape[d];
    if (!same) {
      char si[96], so[96];
      return set_error("verify: output %d (%%%d) is %s but aliases input #%d \"%s\" which is %s", o, id,
                          ir_shape_str(out, so, sizeof so), a, in->name ? in->name : "?",
                          ir_shape_str(in, si, sizeof si));
    }
    for (int p = 0; p < o; p++)
      if (g->alias[p] == a) return set_error("verify: outputs %d and %d both alias input #%d", p, o, a);
  }
  return 0;
}
