/* solve.c — solving the auto-sharding problem: a greedy plan (the fallback),
 * exact elimination of variables with one or two neighbours, pruning of
 * large problems, and XLA's one-hot ILP solved with GLPK's MIP (edge
 * variables linearized by the transportation constraints sum_j e_ij = x_i,
 * sum_i e_ij = y_j, exact for integral x, y). */
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autoshard/as_solve.h"
#include "spmd/partition.h" /* spmd_propagate */
/* ---- greedy: topological choice, then sweeps of local improvement ---- */


int as_adj_build(const as_prob *p, adjacency *a) {
  int n = p->c.g->n_nodes;
  a->start = calloc((size_t)n + 2, sizeof *a->start);
  a->list = malloc(((size_t)2 * p->c.n_edges + 1) * sizeof *a->list);
  if (!a->start || !a->list) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int e = 0; e < p->c.n_edges; e++) a->start[p->c.edges[e].u + 2]++, a->start[p->c.edges[e].v + 2]++;
  for (int v = 0; v < n; v++) a->start[v + 2] += a->start[v + 1];
  for (int e = 0; e < p->c.n_edges; e++) {
    a->list[a->start[p->c.edges[e].u + 1]++] = e;
    a->list[a->start[p->c.edges[e].v + 1]++] = e;
  }
  return 0;
}

/* Cost of leader L taking strategy i, with the neighbours' choices (only
 * those with assigned[] set). */
double as_local_cost(const as_prob *p, const adjacency *a, int L, int i, const int *choice, const bool *assigned) {
  const as_ctx *c = &p->c;
  double t = p->unary[L][i];
  for (int q = a->start[L]; q < a->start[L + 1]; q++) {
    const as_edge *ed = &c->edges[a->list[q]];
    int other = ed->u == L ? ed->v : ed->u;
    if (assigned && !assigned[other]) continue;
    t += ed->u == L ? ed->cost[i * c->nodes[ed->v].ns + choice[other]] : ed->cost[choice[other] * c->nodes[ed->v].ns + i];
  }
  return t;
}

int as_greedy(const as_prob *p, const adjacency *a, const mem_rows *r, double limit, bool reverse, int *choice) {
  const as_ctx *c = &p->c;
  bool *assigned = calloc((size_t)c->g->n_nodes + 1, sizeof *assigned);
  if (!assigned) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int q = 0; q < p->n_leaders; q++) {
    int k = reverse ? p->n_leaders - 1 - q : q;
    int L = p->leaders[k], best = 0;
    double bc = INFINITY;
    for (int i = 0; i < c->nodes[L].ns; i++) {
      double t = as_local_cost(p, a, L, i, choice, assigned);
      if (t < bc) bc = t, best = i;
    }
    choice[L] = best;
    assigned[L] = true;
  }
  free(assigned);
  for (int sweep = 0; sweep < 3; sweep++) {
    bool changed = false;
    for (int k = 0; k < p->n_leaders; k++) {
      int L = p->leaders[k], best = choice[L];
      double bc = as_local_cost(p, a, L, best, choice, NULL);
      for (int i = 0; i < c->nodes[L].ns; i++) {
        double t = as_local_cost(p, a, L, i, choice, NULL);
        if (t < bc - 1e-15) bc = t, best = i, changed = true;
      }
      choice[L] = best;
    }
    if (!changed) break;
  }
  /* over the memory limit: move the biggest tensors to their least-bytes strategy */
  if (limit > 0) {
    for (int round = 0; round < p->n_leaders; round++) {
      double worst = 0;
      for (int q = 0; q < r->n; q++) worst = fmax(worst, as_row_mem(p, r->t[q], choice));
      if (worst <= limit) break;
      int bestL = -1, besti = 0;
      double gain = 0;
      for (int k = 0; k < p->n_leaders; k++) {
        int L = p->leaders[k];
        const as_node *an = &c->nodes[L];
        for (int i = 0; i < an->ns; i++) {
          double g = an->s[choice[L]].mem - an->s[i].mem;
          if (g > gain) gain = g, bestL = L, besti = i;
        }
      }
      if (bestL < 0) break;
      choice[bestL] = besti;
    }
  }
  return 0;
}


/* ---- exact variable elimination (no memory limit) ----
 * A variable with one neighbour folds into it: the neighbour's cost of j
 * gains min_i (own_i + edge_ij); one with two neighbours A, B becomes an edge
 * A-B of cost min_i (own_i + edge1_ia + edge2_ib) (series reduction). Both
 * are exact; chains (batch norm, optimizer updates, shape ops) vanish before
 * the ILP, and the eliminated choices are recovered backwards. Memory rows
 * couple every variable, so with a memory limit nothing is eliminated. */



static double ecost(const as_ctx *c, const as_edge *e, int L, int i, int j) {
  int nb = c->nodes[e->v].ns;
  return e->u == L ? e->cost[i * nb + j] : e->cost[j * nb + i];
}

void as_reduce_free(reduced *R, const as_prob *p) {
  for (int e = R->n_orig; e < R->nE; e++) free(R->E[e].cost);
  free(R->E);
  free(R->dead);
  free(R->rec);
  free(R->adj.start);
  free(R->adj.list);
  if (R->q.unary)
    for (int v = 0; v < p->c.g->n_nodes; v++) free(R->q.unary[v]);
  free(R->q.unary);
  free(R->q.leaders);
  free(R->q.c.edges);
}

int as_reduce(const as_prob *p, bool keep_all, reduced *R) {
  const as_ctx *c = &p->c;
  int n = c->g->n_nodes;
  memset(R, 0, sizeof *R);
  R->q.c = p->c;
  R->q.c.edges = NULL;
  R->capE = 2 * c->n_edges + 16;
  R->E = malloc((size_t)R->capE * sizeof *R->E);
  R->dead = calloc((size_t)R->capE, sizeof *R->dead);
  R->rec = malloc(((size_t)n + 1) * sizeof *R->rec);
  R->q.unary = calloc((size_t)n + 1, sizeof *R->q.unary);
  R->q.leaders = malloc(((size_t)n + 1) * sizeof *R->q.leaders);
  int *deg = calloc((size_t)n + 1, sizeof *deg), *stack = malloc(((size_t)n + 1) * sizeof *stack);
  bool *gone = calloc((size_t)n + 1, sizeof *gone), *queued = calloc((size_t)n + 1, sizeof *queued);
  int **inc = calloc((size_t)n + 1, sizeof *inc), *ninc = calloc((size_t)n + 1, sizeof *ninc),
      *cinc = calloc((size_t)n + 1, sizeof *cinc);
  int rc = -1;
  if (!R->E || !R->dead || !R->rec || !R->q.unary || !R->q.leaders || !deg || !stack || !gone || !queued || !inc ||
      !ninc || !cinc)
    goto oom;
  if (c->n_edges > 0) memcpy(R->E, c->edges, (size_t)c->n_edges * sizeof *R->E); /* edges may be NULL */
  R->nE = R->n_orig = c->n_edges;
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k];
    if (!(R->q.unary[L] = malloc((size_t)c->nodes[L].ns * sizeof(double)))) goto oom;
    memcpy(R->q.unary[L], p->unary[L], (size_t)c->nodes[L].ns * sizeof(double));
  }
#define INC_ADD(L, e)                                                              \
  do {                                                                             \
    if (ninc[L] == cinc[L]) {                                                      \
      int nc = cinc[L] ? 2 * cinc[L] : 4;                                          \
      int *nv = realloc(inc[L], (size_t)nc * sizeof *nv);                          \
      if (!nv) goto oom;                                                           \
      inc[L] = nv, cinc[L] = nc;                                                   \
    }                                                                              \
    inc[L][ninc[L]++] = (e);                                                       \
  } while (0)
  for (int e = 0; e < R->nE; e++) {
    INC_ADD(R->E[e].u, e);
    INC_ADD(R->E[e].v, e);
  }
  int top = 0;
  for (int k = 0; !keep_all && k < p->n_leaders; k++) stack[top++] = p->leaders[k], queued[p->leaders[k]] = true;
  while (top > 0) {
    int L = stack[--top];
    queued[L] = false;
    if (gone[L]) continue;
    int live[3], nl = 0;
    for (int q = 0; q < ninc[L] && nl < 3; q++)
      if (!R->dead[inc[L][q]]) live[nl++] = inc[L][q];
    if (nl > 2) continue;
    int ns = c->nodes[L].ns;
    const double *u = R->q.unary[L];
    elim_rec rr = {L, {-1, -1}};
    int nb[2] = {-1, -1};
    for (int k = 0; k < nl; k++) {
      rr.e[k] = live[k];
      nb[k] = R->E[live[k]].u == L ? R->E[live[k]].v : R->E[live[k]].u;
    }
    if (nl == 1 || (nl == 2 && nb[0] == nb[1])) { /* fold into the one neighbour */
      int N = nb[0];
      for (int j = 0; j < c->nodes[N].ns; j++) {
        double best = INFINITY;
        for (int i = 0; i < ns; i++) {
          double t = u[i] + ecost(c, &R->E[live[0]], L, i, j) + (nl == 2 ? ecost(c, &R->E[live[1]], L, i, j) : 0);
          if (t < best) best = t;
        }
        R->q.unary[N][j] += best;
      }
    } else if (nl == 2) { /* series: a new edge between the two neighbours */
      int A = nb[0] < nb[1] ? nb[0] : nb[1], B = nb[0] < nb[1] ? nb[1] : nb[0];
      int ea = nb[0] == A ? live[0] : live[1], eb = nb[0] == A ? live[1] : live[0];
      int na = c->nodes[A].ns, nbs = c->nodes[B].ns;
      double *m = malloc((size_t)na * (size_t)nbs * sizeof *m);
      if (!m) goto oom;
      for (int a = 0; a < na; a++)
        for (int b = 0; b < nbs; b++) {
          double best = INFINITY;
          for (int i = 0; i < ns; i++) {
            double t = u[i] + ecost(c, &R->E[ea], L, i, a) + ecost(c, &R->E[eb], L, i, b);
            if (t < best) best = t;
          }
          m[a * nbs + b] = best;
        }
      if (R->nE == R->capE) {
        int cap = 2 * R->capE;
        as_edge *ne = realloc(R->E, (size_t)cap * sizeof *ne);
        if (!ne) {
          free(m);
          goto oom;
        }
        R->E = ne;
        bool *nd = realloc(R->dead, (size_t)cap * sizeof *nd);
        if (!nd) {
          free(m);
          goto oom;
        }
        R->dead = nd;
        memset(R->dead + R->capE, 0, (size_t)(cap - R->capE) * sizeof *nd);
        R->capE = cap;
      }
      R->E[R->nE] = (as_edge){A, B, m};
      R->dead[R->nE] = false;
      INC_ADD(A, R->nE);
      INC_ADD(B, R->nE);
      R->nE++;
    }
    for (int k = 0; k < nl; k++) R->dead[live[k]] = true;
    gone[L] = true;
    R->rec[R->n_rec++] = rr;
    for (int k = 0; k < nl; k++)
      if (!queued[nb[k]] && !gone[nb[k]]) stack[top++] = nb[k], queued[nb[k]] = true;
  }
#undef INC_ADD
  /* the reduced problem */
  for (int k = 0; k < p->n_leaders; k++)
    if (!gone[p->leaders[k]]) R->q.leaders[R->q.n_leaders++] = p->leaders[k];
  if (!(R->q.c.edges = malloc(((size_t)R->nE + 1) * sizeof *R->q.c.edges))) goto oom;
  R->q.c.n_edges = 0;
  for (int e = 0; e < R->nE; e++)
    if (!R->dead[e]) R->q.c.edges[R->q.c.n_edges++] = R->E[e];
  if (as_adj_build(&R->q, &R->adj) < 0) goto done;
  rc = 0;
  goto done;
oom:
  set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
done:
  for (int v = 0; inc && v < n; v++) free(inc[v]);
  free(inc), free(ninc), free(cinc), free(deg), free(stack), free(gone), free(queued);
  return rc;
}

/* The eliminated variables' choices, backwards from the reduced solution. */
void as_back_substitute(const reduced *R, const as_ctx *c, int *choice) {
  for (int k = R->n_rec - 1; k >= 0; k--) {
    const elim_rec *rr = &R->rec[k];
    int L = rr->L, best = 0;
    double bc = INFINITY;
    for (int i = 0; i < c->nodes[L].ns; i++) {
      double t = R->q.unary[L][i];
      for (int q = 0; q < 2; q++)
        if (rr->e[q] >= 0) {
          const as_edge *e = &R->E[rr->e[q]];
          int other = e->u == L ? e->v : e->u;
          t += ecost(c, e, L, i, choice[other]);
        }
      if (t < bc) bc = t, best = i;
    }
    choice[L] = best;
  }
}



/* keep[L][i] for the AS_KEEP strategies of each variable that cost least
 * with its neighbours at the greedy plan's choices (always the greedy one). */
char **as_prune(const as_prob *p, const adjacency *a, const int *choice) {
  int n = p->c.g->n_nodes;
  char **keep = calloc((size_t)n + 1, sizeof *keep);
  double *cost = malloc(AS_MAX_STRATS * sizeof *cost);
  if (!keep || !cost) goto oom;
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k], ns = p->c.nodes[L].ns;
    if (!(keep[L] = calloc((size_t)ns, 1))) goto oom;
    for (int i = 0; i < ns; i++) cost[i] = as_local_cost(p, a, L, i, choice, NULL);
    keep[L][choice[L]] = 1;
    for (int t = 1; t < AS_KEEP && t < ns; t++) {
      int best = -1;
      for (int i = 0; i < ns; i++)
        if (!keep[L][i] && (best < 0 || cost[i] < cost[best])) best = i;
      keep[L][best] = 1;
    }
  }
  free(cost);
  return keep;
oom:
  set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int v = 0; keep && v < n; v++) free(keep[v]);
  free(keep);
  free(cost);
  return NULL;
}

/* ---- the ILP ---- */

/* 1: solved (choice set; *optimal), 0: no solution in time, -1: error. */
/* keep (may be NULL: all): keep[L][i] says strategy i of variable L is in the ILP. */
int as_solve_ilp(const as_prob *p, const mem_rows *r, double limit, double time_limit_s, char *const *keep,
                     int *choice, bool *optimal, int *n_vars) {
  const as_ctx *c = &p->c;
#define KEPT(L, i) (!keep || keep[L][i])
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  int n = c->g->n_nodes;
  int *col0 = malloc(((size_t)n + 1) * sizeof *col0);
  int *ia = NULL, *ja = NULL;
  double *ar = NULL;
  size_t nz = 0, cap = 0;
  int rc = -1;
  double const_obj = 0;
  if (!col0) goto oom;
#define PUSH(i, j, v)                                                              \
  do {                                                                             \
    if (nz + 2 > cap) {                                                            \
      size_t nc = cap ? 2 * cap : 4096;                                            \
      int *ni = realloc(ia, nc * sizeof *ni);                                      \
      if (!ni) goto oom;                                                           \
      ia = ni;                                                                     \
      int *nj = realloc(ja, nc * sizeof *nj);                                      \
      if (!nj) goto oom;                                                           \
      ja = nj;                                                                     \
      double *na = realloc(ar, nc * sizeof *na);                                   \
      if (!na) goto oom;                                                           \
      ar = na;                                                                     \
      cap = nc;                                                                    \
    }                                                                              \
    ++nz;                                                                          \
    ia[nz] = (i), ja[nz] = (j), ar[nz] = (v);                                      \
  } while (0)
  /* objective in milliseconds (better scaled for the simplex) */
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k], ns = c->nodes[L].ns;
    int j0 = glp_add_cols(lp, ns);
    col0[L] = j0;
    int row = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, row, GLP_FX, 1, 1);
    for (int i = 0; i < ns; i++) {
      glp_set_col_kind(lp, j0 + i, GLP_BV);
      glp_set_obj_coef(lp, j0 + i, 1e3 * p->unary[L][i]);
      if (!KEPT(L, i)) glp_set_col_bnds(lp, j0 + i, GLP_FX, 0, 0);
      PUSH(row, j0 + i, 1.0);
    }
  }
  /* edges: strategies whose rows (columns) of the cost matrix are equal form
   * one class; the edge variables are over class pairs, with sum_J e_IJ =
   * sum_{i in I} x_i and sum_I e_IJ = sum_{j in J} y_j (exact for integral
   * x, y, and far smaller: partial-sum variants, replicated operands) */
  int *rc_ = malloc(((size_t)4 * AS_MAX_STRATS + 4) * sizeof *rc_);
  if (!rc_) goto oom;
  for (int e = 0; e < c->n_edges; e++) {
    const as_edge *ed = &c->edges[e];
    int na = c->nodes[ed->u].ns, nb = c->nodes[ed->v].ns;
    int *rcls = rc_, *ccls = rc_ + AS_MAX_STRATS + 1, nr = 0, ncl = 0;
    int *rrep = rc_ + 2 * (AS_MAX_STRATS + 1), *crep = rc_ + 3 * (AS_MAX_STRATS + 1);
    for (int i = 0; i < na; i++) {
      rcls[i] = -1;
      if (!KEPT(ed->u, i)) continue;
      for (int q = 0; q < nr && rcls[i] < 0; q++) {
        bool same = true;
        for (int j = 0; j < nb && same; j++) same = !KEPT(ed->v, j) || ed->cost[i * nb + j] == ed->cost[rrep[q] * nb + j];
        if (same) rcls[i] = q;
      }
      if (rcls[i] < 0) rrep[nr] = i, rcls[i] = nr++;
    }
    for (int j = 0; j < nb; j++) {
      ccls[j] = -1;
      if (!KEPT(ed->v, j)) continue;
      for (int q = 0; q < ncl && ccls[j] < 0; q++) {
        bool same = true;
        for (int i = 0; i < nr && same; i++) same = ed->cost[rrep[i] * nb + j] == ed->cost[rrep[i] * nb + crep[q]];
        if (same) ccls[j] = q;
      }
      if (ccls[j] < 0) crep[ncl] = j, ccls[j] = ncl++;
    }
    if (nr <= 1 && ncl <= 1) { /* a constant: no choice depends on it */
      const_obj += nr && ncl ? ed->cost[rrep[0] * nb + crep[0]] : 0;
      continue;
    }
    int j0 = glp_add_cols(lp, nr * ncl);
    int r0 = glp_add_rows(lp, nr + ncl);
    for (int i = 0; i < nr + ncl; i++) glp_set_row_bnds(lp, r0 + i, GLP_FX, 0, 0);
    for (int i = 0; i < na; i++)
      if (rcls[i] >= 0) PUSH(r0 + rcls[i], col0[ed->u] + i, -1.0);
    for (int j = 0; j < nb; j++)
      if (ccls[j] >= 0) PUSH(r0 + nr + ccls[j], col0[ed->v] + j, -1.0);
    for (int i = 0; i < nr; i++)
      for (int j = 0; j < ncl; j++) {
        int col = j0 + i * ncl + j;
        glp_set_col_bnds(lp, col, GLP_DB, 0, 1);
        glp_set_obj_coef(lp, col, 1e3 * ed->cost[rrep[i] * nb + crep[j]]);
        PUSH(r0 + i, col, 1.0);
        PUSH(r0 + nr + j, col, 1.0);
      }
  }
  free(rc_);
  if (limit > 0) {
    int ncols = glp_get_num_cols(lp);
    double *coef = calloc((size_t)ncols + 1, sizeof *coef);
    if (!coef) goto oom;
    for (int q = 0; q < r->n; q++) {
      memset(coef, 0, ((size_t)ncols + 1) * sizeof *coef);
      for (int v = 0; v < n; v++)
        if (as_live_at(c, v, r->t[q])) {
          int L = c->nodes[v].leader;
          for (int i = 0; i < c->nodes[v].ns; i++) coef[col0[L] + i] += c->nodes[v].s[i].mem / 1048576.0;
        }
      int row = glp_add_rows(lp, 1);
      glp_set_row_bnds(lp, row, GLP_UP, 0, limit / 1048576.0);
      for (int j = 1; j <= ncols; j++)
        if (coef[j] != 0) {
          size_t before = nz;
          PUSH(row, j, coef[j]);
          (void)before;
        }
    }
    free(coef);
  }
#undef PUSH
  (void)const_obj;
  glp_load_matrix(lp, (int)nz, ia, ja, ar);
  *n_vars = glp_get_num_cols(lp);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.mip_gap = 1e-3; /* within 0.1% of the bound is optimal enough */
  parm.presolve = GLP_ON;
  parm.tm_lim = (int)fmax(1, time_limit_s * 1e3);
  int err = glp_intopt(lp, &parm);
  int st = glp_mip_status(lp);
  /* GLP_EMIPGAP: stopped within mip_gap of the bound, an incumbent in hand
   * (was taken for no plan: the MLP on 2x2 fell back to the greedy plan) */
  if ((err == 0 || err == GLP_ETMLIM || err == GLP_EMIPGAP) && (st == GLP_OPT || st == GLP_FEAS)) {
    for (int k = 0; k < p->n_leaders; k++) {
      int L = p->leaders[k], best = 0;
      double bv = -1;
      for (int i = 0; i < c->nodes[L].ns; i++) {
        double v = glp_mip_col_val(lp, col0[L] + i);
        if (v > bv) bv = v, best = i;
      }
      choice[L] = best;
    }
    *optimal = (err == 0 && st == GLP_OPT) || err == GLP_EMIPGAP; /* optimal within mip_gap */
    rc = 1;
  } else {
    rc = 0;
  }
  goto done;
oom:
  set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  rc = -1;
done:
  glp_delete_prob(lp);
  free(col0);
  free(ia);
  free(ja);
  free(ar);
  return rc;
#undef KEPT
}

