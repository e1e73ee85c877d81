/* autoshard.h — auto-sharding inside tessel (after XLA's auto_sharding pass,
 * the Alpa intra-op ILP): every node of a global graph gets a list of
 * strategies (an output layout, the operand layouts it needs, a compute and
 * communication cost, per-device bytes); edges cost the resharding between a
 * producer's layout and what its user needs; an integer linear program over
 * one-hot strategy choices (GLPK's MIP, with a time limit and a greedy
 * fallback) picks the cheapest plan under a per-device memory limit. The plan
 * becomes sharding annotations on the graph's inputs (parameters, data) and
 * key activations (dot and convolution results); spmd/'s propagation and
 * partitioner do the rest. */
#ifndef TS_AUTOSHARD_H
#define TS_AUTOSHARD_H

#include "ir/ir.h"
#include "tessel/spmd.h"

/* Marks g (in place) with the chosen shardings; user-marked nodes are kept.
 * info and explain (malloc'd text, may be NULL) as ts_auto_shard. */
int autoshard_annotate(ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info, char **explain);

#endif
