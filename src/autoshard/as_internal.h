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
  autoshard_costs k;
  as_node *nodes;
  as_edge *edges;
  int n_edges, cap_edges;
  int *last_use; /* per node: the last node that reads it (n_nodes: an output) */
  int n_tied;    /* nodes that took a repeated block's variable */
  int *tie;      /* per node: the earlier node of a repeated block it copies, or -1 (NULL: untied) */
  /* fusion as compile_graph's fuse pass does it (as_fusion): per node the
   * bytes its share of a fused kernel reads and writes (global, unsplit), or
   * < 0 for a kernel priced by its own operands and result; kernel: it is a
   * kernel the device runs (not absorbed into a user's fused kernel) */
  double *moved;
  bool *kernel;
  bool *trans; /* per node: its fused kernel computes a transcendental function */
  /* per node: a fused kernel's root, (its broadcast operands - 1) x its
   * result's elements (global), what kernel.broadcast.operand_s prices; 0 else */
  double *bcast;
  /* per node: estimated seconds of the compute between it and its first
   * user (what an asynchronous collective of its result hides behind) */
  double *window;
} as_ctx;

double as_bytes(const ts_node *n);
int64_t as_layout_tiles(const as_ctx *c, const uint8_t *lay, int rank);
/* Seconds to turn layout `from` of tensor n into `to`; adds the bytes a
 * device sends to *sent (may be NULL). */
double as_reshard_cost(const as_ctx *c, const uint8_t *from, const uint8_t *to, const ts_node *n, double *sent);
/* Seconds of the extra pieces a collective over dim d of n in layout lay
 * among `members` devices (1: a local slice) moves: a block per index of the
 * dims before d (0 when d is the first split-free one). */
double as_pieces_s(const as_ctx *c, const uint8_t *lay, const ts_node *n, int d, int members);
/* Fills c->moved and c->kernel (NULL on no memory: unfused costs). */
void as_fusion(as_ctx *c);
/* Fills c->window (NULL on no memory: nothing hidden). */
void as_windows(as_ctx *c);
/* Seconds of node id's kernel split over `par` devices (fusion included). */
double as_node_compute(const as_ctx *c, int id, double par);
/* Fills c->nodes[id]'s strategies. */
int as_node_strategies(as_ctx *c, int id);

#endif
