/* graph_io.c — program outputs, input/output aliasing (donation) and the
 * queries over a graph's inputs and outputs. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

int ts_graph_add_output(ts_graph *g, ts_tensor t) {
  if (!ir_check_tensor(g, t, "add_output")) return -1;
  if (g->n_outputs + 1 > g->cap_outputs) {
    int c = g->cap_outputs ? g->cap_outputs * 2 : 16;
    int32_t *o = realloc(g->outputs, (size_t)c * sizeof *o);
    if (!o) return set_error_code(TS_ERR_OUT_OF_MEMORY, "add_output: out of memory");
    g->outputs = o;
    int32_t *a = realloc(g->alias, (size_t)c * sizeof *a);
    if (!a) return set_error_code(TS_ERR_OUT_OF_MEMORY, "add_output: out of memory");
    g->alias = a;
    g->cap_outputs = c;
  }
  g->outputs[g->n_outputs] = t;
  g->alias[g->n_outputs] = -1;
  return g->n_outputs++;
}

int ts_graph_alias_output(ts_graph *g, int output, ts_tensor input) {
  if (!ir_check_tensor(g, input, "alias_output")) return -1;
  if (output < 0 || output >= g->n_outputs)
    return set_error("alias_output: output %d does not exist (the graph has %d outputs)", output, g->n_outputs);
  const ts_node *in = ts_node_at(g, input);
  if (in->op != TS_OP_INPUT)
    return set_error("alias_output: %%%d is a %s node, not an input", input, ir_op_name(in->op));
  const ts_node *out = ts_node_at(g, g->outputs[output]);
  bool same = in->dtype == out->dtype && in->rank == out->rank;
  for (int d = 0; same && d < in->rank; d++) same = in->shape[d] == out->shape[d];
  if (!same) {
    char si[96], so[96];
    return set_error("alias_output: output %d is %s but input \"%s\" is %s (must be equal)", output,
                        ir_shape_str(out, so, sizeof so), in->name ? in->name : "?", ir_shape_str(in, si, sizeof si));
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (i != output && g->alias[i] == in->attr.input_index)
      return set_error("alias_output: input \"%s\" is already aliased by output %d", in->name ? in->name : "?", i);
  g->alias[output] = in->attr.input_index;
  return 0;
}

int ts_graph_num_outputs(const ts_graph *g) { return g ? g->n_outputs : 0; }

ts_tensor ts_graph_output(const ts_graph *g, int i) {
  if (!g || i < 0 || i >= g->n_outputs) {
    set_error("graph_output: output %d does not exist (the graph has %d outputs)", i, g ? g->n_outputs : 0);
    return TS_NONE;
  }
  return g->outputs[i];
}

int ts_graph_num_inputs(const ts_graph *g) { return g ? g->n_inputs : 0; }

ts_tensor ts_graph_input(const ts_graph *g, int i) {
  if (!g || i < 0 || i >= g->n_inputs) {
    set_error("graph_input: input %d does not exist (the graph has %d inputs)", i, g ? g->n_inputs : 0);
    return TS_NONE;
  }
  return g->inputs[i];
}

const char *ts_input_name(const ts_graph *g, ts_tensor input) {
  if (!ir_check_tensor(g, input, "input_name")) return NULL;
  const ts_node *n = ts_node_at(g, input);
  if (n->op != TS_OP_INPUT) {
    set_error("input_name: %%%d is a %s node, not an input", input, ir_op_name(n->op));
    return NULL;
  }
  return n->name;
}

ts_tensor ts_graph_find_input(const ts_graph *g, const char *name) {
  if (!g || !name) return TS_NONE;
  for (int i = 0; i < g->n_inputs; i++) {
    const ts_node *n = ts_node_at(g, g->inputs[i]);
    if (n->name && strcmp(n->name, name) == 0) return g->inputs[i];
  }
  return TS_NONE;
}
