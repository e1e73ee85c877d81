/* spmd_internal.h — what the spmd/ files share beyond the mesh layer
 * (mesh/mesh.h: the structs behind ts_mesh and ts_sharding): replica groups. */
#ifndef TESSEL_SPMD_INTERNAL_H
#define TESSEL_SPMD_INTERNAL_H

#include "ir/ir.h"     /* ts_node: replica groups */
#include "mesh/mesh.h" /* ts_mesh, ts_sharding fields */

/* ---- replica.c ---- */
#define TS_ALL_REPLICAS (-1) /* the group of a ts_replica_all_reduce before compile */
bool replica_is_all(const ts_node *n);
/* Gives every replica all-reduce of g the group of all n_devices devices. */
int replica_resolve_groups(ts_graph *g, int n_devices);

#endif
