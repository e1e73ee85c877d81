/* compile_replicas.c — compiling a replica program (classic data parallel,
 * ts_compile_options.replicas): the graph is optimized once, then every
 * device of this process gets its own copy with the replica all-reduces'
 * group resolved to all devices of the job. No shardings: every buffer holds
 * each device's own copy. */
#include <stdlib.h>

#include "compile/cache.h" /* the optimized program through the compile cache */
#include "compile/compile.h"
#include "opt/opt.h"
#include "spmd/spmd_internal.h" /* replica groups */

/* Records each replica all-reduce like the partitioner records its
 * collectives (tools and metrics list them). */
static int record(ts_executable *e, const ts_graph *opt) {
  for (int i = 0; i < opt->n_nodes; i++) {
    const ts_node *n = &opt->nodes[i];
    if (!ir_op_is_collective(n->op)) continue;
    if (e->colls.n == e->colls.cap) {
      int cap = e->colls.cap ? 2 * e->colls.cap : 8;
      ts_collective_info *v = realloc(e->colls.v, (size_t)cap * sizeof *v);
      if (!v) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
      e->colls.v = v;
      e->colls.cap = cap;
    }
    e->colls.v[e->colls.n++] = (ts_collective_info){
        .kind = TS_COLLECTIVE_ALL_REDUCE, .mesh_axes = 0, .group_size = e->client->num_devices,
        .bytes = (size_t)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(n->dtype), .cause = i,
        .cause_op = ir_op_name(n->op)};
  }
  return 0;
}

ts_executable *compile_replicas(ts_client *c, const ts_graph *g, const ts_compile_options *opts) {
  for (int i = 0; g && i < g->n_nodes; i++)
    if (g->nodes[i].sharding || g->nodes[i].manual) {
      set_error("compile: node %d has a sharding or is in a manual region, but a replica program "
                   "(ts_compile_options.replicas) is not partitioned", i);
      return NULL;
    }
  ts_graph *opt = cache_compile_graph(g, opts);
  if (!opt) return NULL;
  ts_executable *e = calloc(1, sizeof *e);
  if (!e || !(e->dev = calloc((size_t)c->num_devices, sizeof *e->dev))) {
    free(e);
    ts_graph_free(opt);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    return NULL;
  }
  e->client = c;
  e->n_dev = c->num_devices;
  if (!(e->g = opt_rebuild(g, NULL, NULL, NULL)) || record(e, opt) < 0) goto fail;
  for (int d = c->first_local; d < c->first_local + c->num_local; d++) {
    ts_graph *mine = opt_rebuild(opt, NULL, NULL, NULL);
    if (!mine || replica_resolve_groups(mine, c->num_devices) < 0) {
      ts_graph_free(mine);
      goto fail;
    }
    if (!(e->dev[d] = compile_local(c, d, mine, opts))) goto fail;
  }
  ts_graph_free(opt);
  return e;
fail:
  ts_graph_free(opt);
  ts_executable_free(e);
  return NULL;
}
