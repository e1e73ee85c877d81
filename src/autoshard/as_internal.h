/* as_internal.h — what the autoshard/ files share: strategies, the problem. */
#ifndef TS_AS_INTERNAL_H
#define TS_AS_INTERNAL_H

#include "autoshard/autoshard.h"
#include "mesh/mesh.h"

#define AS_MAX_IN 3   /* operands whose layouts a strategy names (the rest: replicated) */
#define AS_MAX_AXES 3 /* mesh axes of size > 1 the strategies use (more: replicated) */
#define AS_MAX_STRATS 8192 /* (2 * TS_MAX_RANK + 3) ^ AS_MAX_AXES bounds a node's strategies */

typedef struct {
  uint8_t out[TS_MAX_RANK];           /* mesh-axis mask per output dim */
  uint8_t in[AS_MAX_IN][TS_MAX_RANK]; /* per operand: the layout this strategy needs */
  uint8_t partial;                    /* axes the result is summed over (an all-reduce, in cost) */
  double cost;                        /* seconds: compute + the all-reduce */
  double compute;                     /* seconds of compute alone */
  double comm_bytes;                  /* bytes sent by the all-reduce */
  double mem;                         /* per-device bytes of the result */
} as_strat;

typedef struct {
  as_strat *s;
  int ns, cap;
  int leader;   /* the node whose variable this node shares (itself if none) */
  int var;      /* first ILP column of the leader's one-hot, or -1 */
  int choice;   /* the chosen strategy */
} as_node;

typedef struct {
  int u, v;        /* leaders, u < v */
  double *cost;    /* ns(u) x ns(v), row-major */
} as_edge;

typedef struct {
  const ts_graph *g;
  const ts_mesh *m;
  double flops, mem_bw;
  double link_bw[TS_MESH_MAX_RANK], latency[TS_MESH_MAX_RANK]; /* per mesh axis */
  as_node *nodes;
  as_edge *edges;
  int n_edges, cap_edges;
  int *last_use; /* per node: the last node that reads it (n_nodes: an output) */
} as_ctx;

double as_bytes(const ts_node *n);
int64_t as_layout_tiles(const as_ctx *c, const uint8_t *lay, int rank);
/* Seconds to turn layout `from` of tensor n into `to`; adds the bytes a
 * device sends to *sent (may be NULL). */
double as_reshard_cost(const as_ctx *c, const uint8_t *from, const uint8_t *to, const ts_node *n, double *sent);
/* Fills c->nodes[id]'s strategies. */
int as_node_strategies(as_ctx *c, int id);

#endif
