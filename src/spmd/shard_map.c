/* shard_map.c — manual SPMD regions (ts_shard_map, after JAX's shard_map):
 * to_local / from_local boundary nodes and the mesh-axis collectives a
 * region body calls. The partitioner (partition.c) turns them into plain
 * per-device code. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "spmd/spmd_internal.h"

/* The region's entry (a SLICE from 0 to the block shape) or exit (a PAD on
 * the high side to the global shape), carrying the layout (ts_node.manual). */
static int32_t boundary(ts_graph *g, ts_op op, int32_t x, const ts_sharding *s, const int64_t *shape) {
  const ts_node *n = &g->nodes[x];
  ts_attr a = {0};
  for (int d = 0; d < n->rank; d++) {
    if (op == TS_OP_SLICE) {
      a.limit[d] = shape[d];
      a.stride[d] = 1;
    } else {
      a.limit[d] = shape[d] - n->shape[d];
    }
  }
  int32_t t = ir_append(g, op, n->dtype, n->rank, shape, 1, &x, &a);
  if (t == TS_NONE || !(g->nodes[t].sharding = ts_sharding_clone(s))) return TS_NONE;
  return t;
}

int ts_shard_map(ts_graph *g, int n_in, const int32_t *in, const ts_sharding *const *in_sh, int n_out,
                 const ts_sharding *const *out_sh, ts_shard_map_fn body, void *user, int32_t *out) {
  if (!g || !body || (n_in && (!in || !in_sh)) || n_out < 1 || !out_sh || !out)
    return set_error("shard_map: graph, body, inputs/outputs or their shardings missing");
  if (n_in > 64 || n_out > 64) return set_error("shard_map: at most 64 inputs and outputs");
  int32_t local_in[64], local_out[64];
  for (int i = 0; i < n_in; i++) {
    if (!ir_check_tensor(g, in[i], "shard_map")) return -1;
    const ts_node *n = &g->nodes[in[i]];
    if (!in_sh[i] || in_sh[i]->rank != n->rank)
      return set_error("shard_map: sharding of input %d is missing or not of rank %d", i, n->rank);
    int64_t ls[TS_MAX_RANK];
    for (int d = 0; d < n->rank; d++) {
      if (n->shape[d] % in_sh[i]->tiles[d])
        return set_error("shard_map: input %d dim %d (%lld) is not divisible into %lld blocks", i, d,
                            (long long)n->shape[d], (long long)in_sh[i]->tiles[d]);
      ls[d] = n->shape[d] / in_sh[i]->tiles[d];
    }
    g->manual_depth++; /* the local view is a per-device value */
    local_in[i] = boundary(g, TS_OP_SLICE, in[i], in_sh[i], ls);
    g->manual_depth--;
    if (local_in[i] == TS_NONE) return -1;
  }
  g->manual_depth++;
  int rc = body(g, local_in, local_out, user);
  g->manual_depth--;
  if (rc < 0) return -1;
  for (int k = 0; k < n_out; k++) {
    if (!ir_check_tensor(g, local_out[k], "shard_map")) return -1;
    const ts_node *n = &g->nodes[local_out[k]];
    if (!out_sh[k] || out_sh[k]->rank != n->rank)
      return set_error("shard_map: sharding of output %d is missing or not of rank %d", k, n->rank);
    int64_t gs[TS_MAX_RANK];
    for (int d = 0; d < n->rank; d++) gs[d] = n->shape[d] * out_sh[k]->tiles[d];
    if ((out[k] = boundary(g, TS_OP_PAD, local_out[k], out_sh[k], gs)) == TS_NONE) return -1;
  }
  return 0;
}

static int32_t manual_coll(ts_graph *g, ts_op op, int32_t x, ts_reduce_kind kind, int dim, const ts_mesh *m,
                           int n_axes, const int *axes) {
  const char *who = ir_op_name(op);
  if (!ir_check_tensor(g, x, who)) return TS_NONE;
  const ts_node *n = &g->nodes[x];
  if (!n->manual) {
    set_error("%s: %%%d is not a value of a manual region (call it inside a ts_shard_map body)", who, x);
    return TS_NONE;
  }
  if (!m || n_axes < 1 || n_axes > m->rank) {
    set_error("%s: needs a mesh and 1..rank mesh axes", who);
    return TS_NONE;
  }
  int64_t size = 1;
  for (int k = 0; k < n_axes; k++) {
    if (axes[k] < 0 || axes[k] >= m->rank) {
      set_error("%s: mesh axis %d is outside [0, %d)", who, axes[k], m->rank);
      return TS_NONE;
    }
    size *= m->shape[axes[k]];
  }
  int64_t shape[TS_MAX_RANK];
  memcpy(shape, n->shape, sizeof shape);
  if (op != TS_OP_ALL_REDUCE) {
    if (dim < 0 || dim >= n->rank) {
      set_error("%s: dim %d is outside [0, %d)", who, dim, n->rank);
      return TS_NONE;
    }
    if (op == TS_OP_ALL_GATHER) shape[dim] *= size;
    else if (shape[dim] % size) {
      set_error("%s: dim %d (%lld) is not divisible by the group size %lld", who, dim, (long long)shape[dim],
                   (long long)size);
      return TS_NONE;
    } else {
      shape[dim] /= size;
    }
  }
  ts_attr a = {0};
  a.reduce = kind;
  a.axis = dim;
  a.n_dims = n_axes;
  memcpy(a.dims, axes, (size_t)n_axes * sizeof *axes);
  return ir_append(g, op, n->dtype, n->rank, shape, 1, &x, &a);
}

int32_t ts_manual_all_reduce(ts_graph *g, int32_t x, ts_reduce_kind kind, const ts_mesh *m, int n_axes,
                             const int *axes) {
  return manual_coll(g, TS_OP_ALL_REDUCE, x, kind, 0, m, n_axes, axes);
}

int32_t ts_manual_all_gather(ts_graph *g, int32_t x, int dim, const ts_mesh *m, int n_axes, const int *axes) {
  return manual_coll(g, TS_OP_ALL_GATHER, x, TS_REDUCE_SUM, dim, m, n_axes, axes);
}

int32_t ts_manual_reduce_scatter(ts_graph *g, int32_t x, int dim, const ts_mesh *m, int n_axes, const int *axes) {
  return manual_coll(g, TS_OP_REDUCE_SCATTER, x, TS_REDUCE_SUM, dim, m, n_axes, axes);
}
