/* fuse_internal.h — what fuse.c (groups) and fuse_siblings.c (sibling
 * reductions read in one pass) share. */
#ifndef TS_OPT_FUSE_INTERNAL_H
#define TS_OPT_FUSE_INTERNAL_H

#include "opt/opt.h"

/* Sibling reductions merged into one stacked fused reduction, at most. */
#define FUSE_MAX_SIBLINGS 4

typedef struct {
  int32_t *group;     /* per node: root of its group, or -1 */
  ts_fused **prog;    /* per root: the program */
  int32_t **ext;      /* per root: external inputs (source node ids) */
  int *n_ext;
  int fused_nodes;    /* source nodes absorbed into FUSED nodes */
  /* sibling reductions (fuse_siblings.c): per reduction, the first of its
   * stacked node's results (the leader: where the node is emitted) or -1,
   * its result index, and per leader the members and the node in dst */
  int32_t *sib, *sib_q, *sib_dst;
  int32_t (*sib_members)[FUSE_MAX_SIBLINGS];
} fuse_state;

/* Whether t is a sum or mean fusion may fold into a fused reduction. */
bool fuse_reducible(const ts_graph *g, int t);

/* Finds sibling reductions among the groups of s (after grouping) and
 * records them in s->sib*. Returns -1 on error. */
int fuse_find_siblings(const ts_graph *g, const opt_users *u, fuse_state *s);

/* The rebuild step for a merged reduction id (s->sib[id] >= 0): the stacked
 * node at its leader, then a slice per result. */
ts_tensor fuse_sibling_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, fuse_state *s);

void fuse_siblings_free(fuse_state *s, int nn);

#endif
