/* annotate.c — sharding annotations on graph nodes (ts_mark_sharding, the
 * counterpart of PyTorch/XLA's xs.mark_sharding). */
#include <stdlib.h>

#include "ir/ir.h"
#include "spmd/spmd_internal.h"

int ts_mark_sharding(ts_graph *g, ts_tensor t, const ts_sharding *s) {
  if (!ir_check_tensor(g, t, "mark_sharding")) return -1;
  if (!s) return set_error("mark_sharding: sharding is NULL (use ts_clear_sharding to remove one)");
  ts_node *n = &g->nodes[t];
  if (s->rank != n->rank) {
    char buf[96];
    return set_error("mark_sharding: sharding is for rank %d but tensor %%%d is %s", s->rank, t,
                        ir_shape_str(n, buf, sizeof buf));
  }
  if (n->sharding) {
    if (ts_sharding_equal(n->sharding, s)) return 0;
    char *a = ts_sharding_to_string(n->sharding), *b = ts_sharding_to_string(s);
    set_error("mark_sharding: tensor %%%d is already marked %s; clear it (ts_clear_sharding) before marking "
                 "it %s", t, a ? a : "?", b ? b : "?");
    free(a);
    free(b);
    return -1;
  }
  if (!(n->sharding = ts_sharding_clone(s))) return -1;
  return 0;
}

int ts_clear_sharding(ts_graph *g, ts_tensor t) {
  if (!ir_check_tensor(g, t, "clear_sharding")) return -1;
  ts_sharding_free(g->nodes[t].sharding);
  g->nodes[t].sharding = NULL;
  return 0;
}

const ts_sharding *ts_tensor_sharding(const ts_graph *g, ts_tensor t) {
  if (!g || t < 0 || t >= g->n_nodes) return NULL;
  return g->nodes[t].sharding;
}
