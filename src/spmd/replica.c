/* replica.c — replica programs (classic data parallel): the all-reduce over
 * every replica, whose device group is only known at compile time. Until
 * then its group is the one id TS_ALL_REPLICAS; compile_replicas()
 * (compile/) resolves it with replica_resolve_groups. */
#include <stdlib.h>

#include "ir/ir.h"
#include "spmd/spmd_internal.h"

int32_t ts_replica_all_reduce(ts_graph *g, int32_t x, ts_reduce_kind kind) {
  if (!ir_check_tensor(g, x, "replica_all_reduce")) return TS_NONE;
  if ((unsigned)kind > TS_REDUCE_MEAN) {
    set_error("replica_all_reduce: unknown reduce kind %d", (int)kind);
    return TS_NONE;
  }
  const ts_node *n = &g->nodes[x];
  ts_attr a = {0};
  a.reduce = kind;
  if (!(a.coll = malloc(sizeof *a.coll)) || !(a.coll->ids = malloc(sizeof *a.coll->ids))) {
    free(a.coll);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "replica_all_reduce: out of memory");
    return TS_NONE;
  }
  a.coll->n = 1;
  a.coll->ids[0] = TS_ALL_REPLICAS;
  int64_t shape[TS_MAX_RANK];
  for (int d = 0; d < n->rank; d++) shape[d] = n->shape[d];
  return ir_append(g, TS_OP_ALL_REDUCE, n->dtype, n->rank, shape, 1, &x, &a);
}

bool replica_is_all(const ts_node *n) {
  return n->op == TS_OP_ALL_REDUCE && n->attr.coll && n->attr.coll->n == 1 && n->attr.coll->ids[0] == TS_ALL_REPLICAS;
}

int replica_resolve_groups(ts_graph *g, int n_devices) {
  for (int i = 0; i < g->n_nodes; i++) {
    ts_node *n = &g->nodes[i];
    if (!replica_is_all(n)) continue;
    int32_t *ids = malloc((size_t)n_devices * sizeof *ids);
    if (!ids) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    for (int d = 0; d < n_devices; d++) ids[d] = d;
    free(n->attr.coll->ids);
    n->attr.coll->ids = ids;
    n->attr.coll->n = n_devices;
  }
  return 0;
}
