/* opt.h — graph-to-graph compiler passes (simplify, CSE, DCE, elementwise
 * fusion) and the rebuild helper they share. Every pass returns a NEW graph
 * and leaves its argument untouched; the caller frees both. */
#ifndef TS_OPT_H
#define TS_OPT_H

#include "ir/ir.h"

/* What a rebuild callback answers for a node of the source graph. */
#define OPT_KEEP ((ts_tensor)-2) /* copy the node, operands remapped */
#define OPT_DROP ((ts_tensor)-3) /* leave it out (no later node may use it) */

/* Called for every non-INPUT node of src in order (INPUT nodes are always
 * copied, in order, with their names). map[i] is the id in dst of every node
 * i < id (TS_NONE for dropped ones). The callback may append nodes to dst
 * (opt_copy_node, ir_append) and return the id that stands for `id`, or
 * OPT_KEEP / OPT_DROP. */
typedef ts_tensor (*opt_rewrite_fn)(ts_graph *dst, const ts_graph *src, int id, const int32_t *map,
                                    void *user);

/* Builds a new graph by walking src in node order through fn (NULL = keep
 * everything). Outputs and aliases are remapped. If map_out is non-NULL it
 * receives src->n_nodes entries (old id -> new id). Returns NULL with an
 * error if an output or a kept node's operand was dropped. */
ts_graph *opt_rebuild(const ts_graph *src, opt_rewrite_fn fn, void *user, int32_t *map_out);

/* Appends a copy of src node `id` to dst with operands mapped through map
 * (owned parts deep-copied). Returns the new id. */
ts_tensor opt_copy_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map);

/* Copies src's outputs and aliases into dst through map (old -> new id). */
int opt_set_outputs(ts_graph *dst, const ts_graph *src, const int32_t *map);

/* Users of every node: users[off[i] .. off[i+1]) are the nodes reading node i
 * (a node reading i twice appears twice). Free with opt_users_free. */
typedef struct {
  int *off;   /* n_nodes + 1 */
  int *users;
  int *n_out; /* per node: how many graph outputs refer to it */
} opt_users;
int opt_users_build(const ts_graph *g, opt_users *u);
void opt_users_free(opt_users *u);

/* The scalar value of a constant that holds one value everywhere: a splat
 * CONSTANT, a CONSTANT of numel 1, or a BROADCAST of one of those.
 * Returns false otherwise. */
bool opt_splat_value(const ts_graph *g, ts_tensor t, double *value);

/* t = convert(b, f32) with b bf16: returns b, else TS_NONE. */
ts_tensor opt_bf16_widened(const ts_graph *g, ts_tensor t);

/* Whether t is f32 and every value it can hold is a bf16 value: a splat of
 * one, a convert from bf16, or a select / max / min / neg / abs of such
 * values. exact[] holds the answer for t's operands (nodes before t). */
bool opt_bf16_exact(const ts_graph *g, ts_tensor t, const bool *exact);

/* The passes. Each returns a new graph or NULL with an error; *changed (may
 * be NULL) receives the number of nodes rewritten / removed / fused. */
ts_graph *opt_simplify(const ts_graph *g, int *changed);
ts_graph *opt_cse(const ts_graph *g, int *changed);
ts_graph *opt_dce(const ts_graph *g, int *changed);
ts_graph *opt_fuse(const ts_graph *g, int *changed);
/* Mixed precision (autocast.c): dot/conv nodes of f32 run in dt (TS_BF16, or
 * TS_F16 stored as f16 and computed in f32) between converts; other dt: a copy. */
ts_graph *opt_autocast(const ts_graph *g, ts_dtype dt, int *changed);
/* All-reduce combining: all-reduces of one device group, dtype and reduction
 * packed into buckets of about bucket_bytes (combine.c). Bit-identical. */
ts_graph *opt_combine(const ts_graph *g, size_t bucket_bytes, int *changed);
/* Node order for overlap: every collective, with the reshapes and
 * concatenations that only feed collectives (a DDP bucket's packing), moves
 * up to right after its last operand, so the device can start it early and
 * go on computing while it runs. Everything else keeps its order (inputs
 * too, so input indices do not change). */
ts_graph *opt_schedule(const ts_graph *g, int *changed);

#endif
