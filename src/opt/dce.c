/* dce.c — dead code elimination: keeps the nodes reachable from the graph
 * outputs (inputs always stay, in order). */
#include <stdlib.h>

#include "opt/opt.h"

static ts_tensor dce_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  (void)dst, (void)src, (void)map;
  const bool *live = user;
  return live[id] ? OPT_KEEP : OPT_DROP;
}

ts_graph *opt_dce(const ts_graph *g, int *changed) {
  bool *live = calloc((size_t)g->n_nodes + 1, sizeof *live);
  if (!live) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory in dce");
    return NULL;
  }
  for (int i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = true;
  /* a collective stays even when its result is unused on this device: the
   * peers of its group wait for it */
  for (int i = 0; i < g->n_nodes; i++)
    if (ir_op_is_collective(g->nodes[i].op)) live[i] = true;
  /* operands have smaller ids, so one backward sweep reaches everything */
  int dropped = 0;
  for (int id = g->n_nodes - 1; id >= 0; id--) {
    if (!live[id]) {
      if (g->nodes[id].op != TS_OP_INPUT) dropped++;
      continue;
    }
    for (int k = 0; k < g->nodes[id].n_in; k++) live[g->nodes[id].in[k]] = true;
  }
  ts_graph *out = opt_rebuild(g, dce_node, live, NULL);
  free(live);
  if (changed) *changed = dropped;
  return out;
}
