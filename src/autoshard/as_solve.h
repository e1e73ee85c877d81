/* as_solve.h — what the auto-sharding files share beyond strategies: the
 * problem (problem.c: variables, merged edges, memory rows, objective), its
 * solvers (solve.c: greedy, exact elimination, GLPK's ILP) and their use by
 * autoshard.c (prediction, annotations, explanation). */
#ifndef TS_AS_SOLVE_H
#define TS_AS_SOLVE_H

#include <stdbool.h>

#include "autoshard/as_internal.h"
#include "util/clock.h" /* util_now_s */

#define AS_MEM_ROWS 8 /* liveness points the ILP's memory constraint checks */

/* unary[L] (ns of L): costs of choosing strategy i of leader L alone. */
typedef struct {
  as_ctx c;
  double **unary;
  int n_leaders;
  int *leaders; /* node ids of leaders with ns > 1 or any */
} as_prob;

typedef struct {
  int n;                   /* rows */
  int t[AS_MEM_ROWS];      /* the liveness point (node id) of each row */
} mem_rows;

typedef struct {
  int *start, *list; /* CSR: edges incident on each leader */
} adjacency;

typedef struct {
  int L, e[2];
} elim_rec;

typedef struct {
  as_prob q;        /* the reduced problem: q.c shares p's nodes; edges, unary, leaders its own */
  adjacency adj;
  as_edge *E;       /* every edge: p's (shared cost arrays) then new ones (owned) */
  int nE, capE, n_orig;
  bool *dead;
  elim_rec *rec;
  int n_rec;
} reduced;

#define AS_PRUNE_COLUMNS 40000 /* above: prune (solve times of GLPK's simplex grow fast past it) */

#define AS_KEEP 4

/* problem.c */
bool as_live_at(const as_ctx *c, int v, int t);
double as_row_mem(const as_prob *p, int t, const int *choice);
double as_objective(const as_prob *p, const int *choice);
void as_spec_to_mask(const ts_partition_spec *s, uint8_t *lay);
void as_mask_to_spec(const as_ctx *c, const uint8_t *lay, int rank, ts_partition_spec *s);
bool as_lay_eq(const uint8_t *a, const uint8_t *b, int rank);
void as_prob_free(as_prob *p);
const uint8_t *as_need(const as_strat *s, int k);
int as_build(as_prob *p, const ts_graph *g, const ts_auto_shard_options *o);
double as_min_peak(const as_prob *p, const mem_rows *r, int *choice);
void as_pick_mem_rows(const as_ctx *c, mem_rows *r);

/* solve.c */
char **as_prune(const as_prob *p, const adjacency *a, const int *choice);
void as_reduce_free(reduced *R, const as_prob *p);
int as_adj_build(const as_prob *p, adjacency *a);
double as_local_cost(const as_prob *p, const adjacency *a, int L, int i, const int *choice, const bool *assigned);
void as_back_substitute(const reduced *R, const as_ctx *c, int *choice);
int as_solve_ilp(const as_prob *p, const mem_rows *r, double limit, double time_limit_s, char *const *keep, int *choice, bool *optimal, int *n_vars);
int as_reduce(const as_prob *p, bool keep_all, reduced *R);
/* reverse: assign the variables from the last (the loss, the update) to the first */
int as_greedy(const as_prob *p, const adjacency *a, const mem_rows *r, double limit, bool reverse, int *choice);

#endif
