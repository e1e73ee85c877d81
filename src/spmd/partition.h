/* partition.h — the SPMD compiler inside tessel: sharding propagation over a
 * global graph (propagate.c) and the partitioner that turns it into one
 * program per device with collectives (partition.c, reshard.c). Shardings
 * are handled as partition specs over one mesh (axis lists per dim); a value
 * inside the partitioner may also be a partial sum (or max/min/mean) over a
 * set of mesh axes, pending a collective. */
#ifndef TS_SPMD_PARTITION_H
#define TS_SPMD_PARTITION_H

#include "ir/ir.h"
#include "spmd/spmd_internal.h"
#include "tessel/runtime.h" /* ts_collective_info */

/* The entry and exit of a manual region (ts_shard_map; see ts_node.manual). */
static inline bool spmd_is_to_local(const ts_node *n) { return n->op == TS_OP_SLICE && n->manual && n->sharding; }
static inline bool spmd_is_from_local(const ts_graph *g, const ts_node *n) {
  return n->op == TS_OP_PAD && !n->manual && n->sharding && n->n_in == 1 && g->nodes[n->in[0]].manual;
}

/* ---- spec helpers (propagate.c) ---- */
/* Blocks dim d is cut into: product of the sizes of its mesh axes. */
int64_t spmd_dim_tiles(const ts_mesh *m, const ts_partition_spec *s, int d);
int64_t spmd_total_tiles(const ts_mesh *m, const ts_partition_spec *s);
bool spmd_spec_equal(const ts_partition_spec *a, const ts_partition_spec *b);
/* Drops axes used a second time and the axes of every dim that they do not
 * divide evenly (interior values are never padded). */
void spmd_spec_make_even(const ts_mesh *m, ts_partition_spec *s, const int64_t *shape);
/* Bit mask of the mesh axes a spec uses. */
uint32_t spmd_spec_axes(const ts_partition_spec *s);

/* Propagation: fills specs[i] for every node of g on mesh m. Nodes with an
 * annotation (ts_mark_sharding) keep it (their mesh must match m); the rest
 * get shardings from their operands and users (forward and backward sweeps
 * to a fixed point; a more tiled candidate wins), or replicated. fixed[i]
 * (may be NULL) tells which were annotated. */
int spmd_propagate(const ts_graph *g, const ts_mesh *m, ts_partition_spec *specs, bool *fixed);

/* How the partitioner lowers dot_general node id of g whose nodes are laid
 * out as W (propagated): the operand layouts s[0], s[1] it reads, the
 * result's layout out as computed and the mesh axes *partial it leaves a
 * partial sum over (then reduce-scattered or all-reduced into W[id]). */
void spmd_dot_specs(const ts_graph *g, const ts_partition_spec *W, int id, ts_partition_spec *s, ts_partition_spec *out,
                    uint32_t *partial);

/* A collective the partitioner inserted, with the node it served. */
typedef struct {
  ts_collective_info *v;
  int n, cap;
} spmd_coll_list;

/* The per-device program of device `device` (a device id of m): the same
 * inputs and outputs as g in the same order, with local (block) shapes, input
 * i laid out as in_specs[i] and output k as out_specs[k]. If colls is
 * non-NULL the inserted collectives are appended to it. */
ts_graph *spmd_partition(const ts_graph *g, const ts_mesh *m, const ts_partition_spec *specs,
                         const ts_partition_spec *in_specs, const ts_partition_spec *out_specs, int device,
                         spmd_coll_list *colls);

#endif
