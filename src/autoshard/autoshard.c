/* autoshard.c — the auto-sharding problem and its solution: strategies per
 * node (strategy.c), graph shrinking (a unary elementwise node of its
 * operand's shape shares the operand's variable), resharding edges merged per
 * pair of variables, XLA's one-hot ILP solved with GLPK's MIP (edge variables
 * linearized by the transportation constraints sum_j e_ij = x_i, sum_i e_ij =
 * y_j, exact for integral x, y), memory rows, a greedy fallback, the
 * prediction, the annotations and the explanation. */
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autoshard/as_internal.h"
#include "spmd/partition.h" /* spmd_propagate */

#define AS_MEM_ROWS 8 /* liveness points the ILP's memory constraint checks */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void spec_to_mask(const ts_partition_spec *s, uint8_t *lay) {
  memset(lay, 0, TS_MAX_RANK);
  for (int d = 0; d < s->rank; d++)
    for (int k = 0; k < s->naxes[d]; k++) lay[d] |= (uint8_t)(1u << s->axes[d][k]);
}

static void mask_to_spec(const as_ctx *c, const uint8_t *lay, int rank, ts_partition_spec *s) {
  ts_partition_spec_init(s, rank);
  for (int d = 0; d < rank; d++)
    for (int a = 0; a < c->m->rank; a++)
      if (lay[d] & (1u << a)) ts_partition_spec_add_axis(s, d, a);
}

static bool lay_eq(const uint8_t *a, const uint8_t *b, int rank) { return memcmp(a, b, (size_t)rank) == 0; }

static void ctx_free(as_ctx *c) {
  if (c->nodes)
    for (int i = 0; i < c->g->n_nodes; i++) free(c->nodes[i].s);
  free(c->nodes);
  for (int e = 0; e < c->n_edges; e++) free(c->edges[e].cost);
  free(c->edges);
  free(c->last_use);
}

static const uint8_t zero_lay[TS_MAX_RANK];

/* The layout strategy s of node v needs of its operand k. */
static const uint8_t *need(const as_strat *s, int k) { return k < AS_MAX_IN ? s->in[k] : zero_lay; }

static int add_edge(as_ctx *c, int a, int b, double *cost) {
  if (c->n_edges == c->cap_edges) {
    int cap = c->cap_edges ? 2 * c->cap_edges : 64;
    as_edge *v = realloc(c->edges, (size_t)cap * sizeof *v);
    if (!v) return -1;
    c->edges = v, c->cap_edges = cap;
  }
  c->edges[c->n_edges++] = (as_edge){a, b, cost};
  return 0;
}

static int edge_cmp(const void *x, const void *y) {
  const as_edge *a = x, *b = y;
  return a->u != b->u ? (a->u < b->u ? -1 : 1) : a->v != b->v ? (a->v < b->v ? -1 : 1) : 0;
}

/* unary[L] (ns of L): costs of choosing strategy i of leader L alone. */
typedef struct {
  as_ctx c;
  double **unary;
  int n_leaders;
  int *leaders; /* node ids of leaders with ns > 1 or any */
} as_prob;

/* Resharding cost of the edge u -> (v, operand k) for strategies i of u, j of v. */
static double edge_cost(as_ctx *c, int u, int i, int v, int j, int k) {
  return as_reshard_cost(c, c->nodes[u].s[i].out, need(&c->nodes[v].s[j], k), &c->g->nodes[u], NULL);
}

static int build(as_prob *p, const ts_graph *g, const ts_auto_shard_options *o) {
  as_ctx *c = &p->c;
  memset(p, 0, sizeof *p);
  c->g = g;
  c->m = o->mesh;
  c->flops = o->flops_per_s > 0 ? o->flops_per_s : 2e10;
  c->mem_bw = o->bytes_per_s > 0 ? o->bytes_per_s : 1e10;
  for (int a = 0; a < TS_MESH_MAX_RANK; a++) {
    c->link_bw[a] = o->axis_bytes_per_s[a] > 0 ? o->axis_bytes_per_s[a] : o->link_bytes_per_s > 0 ? o->link_bytes_per_s : 5e9;
    c->latency[a] = o->axis_latency_s[a] > 0 ? o->axis_latency_s[a] : o->link_latency_s > 0 ? o->link_latency_s : 5e-6;
  }
  int n = g->n_nodes;
  c->nodes = calloc((size_t)n + 1, sizeof *c->nodes);
  c->last_use = malloc(((size_t)n + 1) * sizeof *c->last_use);
  p->unary = calloc((size_t)n + 1, sizeof *p->unary);
  p->leaders = malloc(((size_t)n + 1) * sizeof *p->leaders);
  if (!c->nodes || !c->last_use || !p->unary || !p->leaders) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int v = 0; v < n; v++) c->last_use[v] = v;
  for (int v = 0; v < n; v++)
    for (int k = 0; k < g->nodes[v].n_in; k++) c->last_use[g->nodes[v].in[k]] = v;
  for (int k = 0; k < g->n_outputs; k++) c->last_use[g->outputs[k]] = n;
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    as_node *an = &c->nodes[v];
    an->leader = v;
    an->var = -1;
    /* graph shrinking: an elementwise node shares the variable of an operand
     * of its shape (one that is not a broadcast or constant, if any) */
    int fk = -1;
    for (int k = 0; !nd->sharding && ir_op_is_elementwise(nd->op) && k < nd->n_in; k++) {
      const ts_node *x = &g->nodes[nd->in[k]];
      if (x->rank != nd->rank || memcmp(x->shape, nd->shape, (size_t)nd->rank * sizeof nd->shape[0]) != 0) continue;
      bool weak = x->op == TS_OP_BROADCAST || x->op == TS_OP_CONSTANT;
      if (fk < 0 || (!weak && (g->nodes[nd->in[fk]].op == TS_OP_BROADCAST || g->nodes[nd->in[fk]].op == TS_OP_CONSTANT)))
        fk = k;
    }
    if (fk >= 0 && nd->rank > 0) {
      const as_node *u = &c->nodes[nd->in[fk]];
      an->leader = u->leader;
      an->s = calloc((size_t)u->ns, sizeof *an->s);
      if (!an->s) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
      an->ns = an->cap = u->ns;
      for (int i = 0; i < u->ns; i++) {
        as_strat *s = &an->s[i];
        memcpy(s->out, u->s[i].out, sizeof s->out);
        for (int k = 0; k < nd->n_in && k < AS_MAX_IN; k++)
          if (g->nodes[nd->in[k]].rank == nd->rank) memcpy(s->in[k], u->s[i].out, sizeof s->out);
        double par = (double)as_layout_tiles(c, s->out, nd->rank);
        s->compute = s->cost = (1 + nd->n_in) * as_bytes(nd) / c->mem_bw / par;
        s->mem = as_bytes(nd) / par;
      }
      continue;
    }
    if (as_node_strategies(c, v) < 0) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
    if (nd->sharding) { /* user-marked: only strategies with its layout */
      uint8_t want[TS_MAX_RANK] = {0};
      spec_to_mask(ts_sharding_spec(nd->sharding), want);
      int k = 0;
      for (int i = 0; i < an->ns; i++)
        if (lay_eq(an->s[i].out, want, nd->rank)) an->s[k++] = an->s[i];
      if (k == 0) { /* the marked layout is none of ours: keep it, operands as they come */
        as_strat s;
        memset(&s, 0, sizeof s);
        memcpy(s.out, want, sizeof s.out);
        s.compute = s.cost = an->ns ? an->s[0].cost : 0;
        s.mem = as_bytes(nd) / (double)as_layout_tiles(c, want, nd->rank);
        an->s[0] = s;
        k = 1;
      }
      an->ns = k;
    }
    if (an->ns == 0) return set_error_code(TS_ERR_INTERNAL, "auto_shard: node %%%d (%s) has no strategy", v, ir_op_name(nd->op));
  }
  /* unary costs per leader, and the edges */
  for (int v = 0; v < n; v++) {
    int L = c->nodes[v].leader;
    if (!p->unary[L] && !(p->unary[L] = calloc((size_t)c->nodes[L].ns, sizeof(double))))
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  }
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    as_node *an = &c->nodes[v];
    int Lv = an->leader;
    for (int i = 0; i < an->ns; i++) p->unary[Lv][i] += an->s[i].cost;
    for (int k = 0; k < nd->n_in; k++) {
      int u = nd->in[k], Lu = c->nodes[u].leader;
      as_node *au = &c->nodes[u];
      if (Lu == Lv) {
        for (int i = 0; i < an->ns; i++) p->unary[Lv][i] += edge_cost(c, u, i, v, i, k);
        continue;
      }
      if (au->ns == 1 || an->ns == 1) {
        if (au->ns == 1)
          for (int j = 0; j < an->ns; j++) p->unary[Lv][j] += edge_cost(c, u, 0, v, j, k);
        else
          for (int i = 0; i < au->ns; i++) p->unary[Lu][i] += edge_cost(c, u, i, v, 0, k);
        continue;
      }
      int a = Lu < Lv ? Lu : Lv, b = Lu < Lv ? Lv : Lu;
      int na = c->nodes[a].ns, nb = c->nodes[b].ns;
      double *m = malloc((size_t)na * (size_t)nb * sizeof *m);
      if (!m || add_edge(c, a, b, m) < 0) {
        free(m);
        return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
      }
      for (int i = 0; i < au->ns; i++)
        for (int j = 0; j < an->ns; j++) {
          double t = edge_cost(c, u, i, v, j, k);
          if (Lu == a) m[i * nb + j] = t;
          else m[j * nb + i] = t;
        }
    }
  }
  /* donated pairs: the update is written into its parameter's layout */
  for (int k = 0; k < g->n_outputs; k++) {
    int ai = g->alias ? g->alias[k] : -1;
    if (ai < 0) continue;
    int u = g->outputs[k], v = g->inputs[ai], Lu = c->nodes[u].leader, Lv = c->nodes[v].leader;
    as_node *au = &c->nodes[u], *av = &c->nodes[v];
    const ts_node *nu = &g->nodes[u];
    if (Lu == Lv) {
      for (int i = 0; i < au->ns; i++) p->unary[Lu][i] += as_reshard_cost(c, au->s[i].out, av->s[i].out, nu, NULL);
      continue;
    }
    int a = Lu < Lv ? Lu : Lv, b = Lu < Lv ? Lv : Lu;
    int na = c->nodes[a].ns, nb = c->nodes[b].ns;
    double *m = malloc((size_t)na * (size_t)nb * sizeof *m);
    if (!m || add_edge(c, a, b, m) < 0) {
      free(m);
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
    }
    for (int i = 0; i < au->ns; i++)
      for (int j = 0; j < av->ns; j++) {
        double t = as_reshard_cost(c, au->s[i].out, av->s[j].out, nu, NULL);
        if (Lu == a) m[i * nb + j] = t;
        else m[j * nb + i] = t;
      }
  }
  /* merge the edges of one pair of variables */
  if (c->n_edges > 1) qsort(c->edges, (size_t)c->n_edges, sizeof *c->edges, edge_cmp); /* edges may be NULL */
  int w = 0;
  for (int e = 0; e < c->n_edges; e++) {
    if (w > 0 && c->edges[w - 1].u == c->edges[e].u && c->edges[w - 1].v == c->edges[e].v) {
      size_t cnt = (size_t)c->nodes[c->edges[e].u].ns * (size_t)c->nodes[c->edges[e].v].ns;
      for (size_t q = 0; q < cnt; q++) c->edges[w - 1].cost[q] += c->edges[e].cost[q];
      free(c->edges[e].cost);
    } else {
      c->edges[w++] = c->edges[e];
    }
  }
  c->n_edges = w;
  for (int v = 0; v < n; v++)
    if (c->nodes[v].leader == v) p->leaders[p->n_leaders++] = v;
  return 0;
}

static void prob_free(as_prob *p) {
  if (p->unary)
    for (int v = 0; v < p->c.g->n_nodes; v++) free(p->unary[v]);
  free(p->unary);
  free(p->leaders);
  ctx_free(&p->c);
}

/* ---- memory rows ---- */

typedef struct {
  int n;                   /* rows */
  int t[AS_MEM_ROWS];      /* the liveness point (node id) of each row */
} mem_rows;

static bool live_at(const as_ctx *c, int v, int t) {
  return c->g->nodes[v].op == TS_OP_INPUT || (v <= t && c->last_use[v] >= t);
}

/* The AS_MEM_ROWS points of the 1-device schedule with the most live bytes. */
static void pick_mem_rows(const as_ctx *c, mem_rows *r) {
  int n = c->g->n_nodes;
  double *live = calloc((size_t)n + 1, sizeof *live);
  r->n = 0;
  if (!live) { /* degrade: the last node only */
    r->n = n > 0, r->t[0] = n - 1;
    return;
  }
  for (int v = 0; v < n; v++) {
    if (c->g->nodes[v].op == TS_OP_INPUT) continue;
    int end = c->last_use[v] < n ? c->last_use[v] : n - 1;
    for (int t = v; t <= end; t++) live[t] += as_bytes(&c->g->nodes[v]);
  }
  for (int k = 0; k < AS_MEM_ROWS && k < n; k++) {
    int best = -1;
    for (int t = 0; t < n; t++) {
      bool taken = false;
      for (int q = 0; q < r->n; q++) taken = taken || r->t[q] == t;
      if (!taken && (best < 0 || live[t] > live[best])) best = t;
    }
    r->t[r->n++] = best;
  }
  free(live);
}

/* Per-device bytes at row point t with choice[] per leader. */
static double row_mem(const as_prob *p, int t, const int *choice) {
  const as_ctx *c = &p->c;
  double s = 0;
  for (int v = 0; v < c->g->n_nodes; v++)
    if (live_at(c, v, t)) s += c->nodes[v].s[choice[c->nodes[v].leader]].mem;
  return s;
}

/* The smallest modeled peak any plan reaches: memory has no cross-node
 * constraint, so each node's least-bytes strategy minimizes every row. */
static double min_peak(const as_prob *p, const mem_rows *r, int *choice) {
  const as_ctx *c = &p->c;
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k], best = 0;
    double bm = INFINITY;
    for (int i = 0; i < c->nodes[L].ns; i++) {
      double m = 0;
      for (int v = L; v < c->g->n_nodes; v++)
        if (c->nodes[v].leader == L) m += c->nodes[v].s[i].mem;
      if (m < bm) bm = m, best = i;
    }
    choice[L] = best;
  }
  double worst = 0;
  for (int q = 0; q < r->n; q++) {
    double m = row_mem(p, r->t[q], choice);
    if (m > worst) worst = m;
  }
  return worst;
}

/* ---- objective ---- */

static double objective(const as_prob *p, const int *choice) {
  const as_ctx *c = &p->c;
  double t = 0;
  for (int k = 0; k < p->n_leaders; k++) t += p->unary[p->leaders[k]][choice[p->leaders[k]]];
  for (int e = 0; e < c->n_edges; e++) {
    const as_edge *ed = &c->edges[e];
    t += ed->cost[choice[ed->u] * c->nodes[ed->v].ns + choice[ed->v]];
  }
  return t;
}

/* ---- greedy: topological choice, then sweeps of local improvement ---- */

typedef struct {
  int *start, *list; /* CSR: edges incident on each leader */
} adjacency;

static int adj_build(const as_prob *p, adjacency *a) {
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
static double local_cost(const as_prob *p, const adjacency *a, int L, int i, const int *choice, const bool *assigned) {
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

static int greedy(const as_prob *p, const adjacency *a, const mem_rows *r, double limit, int *choice) {
  const as_ctx *c = &p->c;
  bool *assigned = calloc((size_t)c->g->n_nodes + 1, sizeof *assigned);
  if (!assigned) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k], best = 0;
    double bc = INFINITY;
    for (int i = 0; i < c->nodes[L].ns; i++) {
      double t = local_cost(p, a, L, i, choice, assigned);
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
      double bc = local_cost(p, a, L, best, choice, NULL);
      for (int i = 0; i < c->nodes[L].ns; i++) {
        double t = local_cost(p, a, L, i, choice, NULL);
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
      for (int q = 0; q < r->n; q++) worst = fmax(worst, row_mem(p, r->t[q], choice));
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

static double ecost(const as_ctx *c, const as_edge *e, int L, int i, int j) {
  int nb = c->nodes[e->v].ns;
  return e->u == L ? e->cost[i * nb + j] : e->cost[j * nb + i];
}

static void reduce_free(reduced *R, const as_prob *p) {
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

static int reduce(const as_prob *p, bool keep_all, reduced *R) {
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
  if (adj_build(&R->q, &R->adj) < 0) goto done;
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
static void back_substitute(const reduced *R, const as_ctx *c, int *choice) {
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


#define AS_PRUNE_COLUMNS 40000 /* above: prune (solve times of GLPK's simplex grow fast past it) */
#define AS_KEEP 4

/* keep[L][i] for the AS_KEEP strategies of each variable that cost least
 * with its neighbours at the greedy plan's choices (always the greedy one). */
static char **prune(const as_prob *p, const adjacency *a, const int *choice) {
  int n = p->c.g->n_nodes;
  char **keep = calloc((size_t)n + 1, sizeof *keep);
  double *cost = malloc(AS_MAX_STRATS * sizeof *cost);
  if (!keep || !cost) goto oom;
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k], ns = p->c.nodes[L].ns;
    if (!(keep[L] = calloc((size_t)ns, 1))) goto oom;
    for (int i = 0; i < ns; i++) cost[i] = local_cost(p, a, L, i, choice, NULL);
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
static int solve_ilp(const as_prob *p, const mem_rows *r, double limit, double time_limit_s, char *const *keep,
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
        if (live_at(c, v, r->t[q])) {
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
  if ((err == 0 || err == GLP_ETMLIM) && (st == GLP_OPT || st == GLP_FEAS)) {
    for (int k = 0; k < p->n_leaders; k++) {
      int L = p->leaders[k], best = 0;
      double bv = -1;
      for (int i = 0; i < c->nodes[L].ns; i++) {
        double v = glp_mip_col_val(lp, col0[L] + i);
        if (v > bv) bv = v, best = i;
      }
      choice[L] = best;
    }
    *optimal = err == 0 && st == GLP_OPT;
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

/* ---- prediction from per-node layouts and strategies ---- */

/* lay[v]: the layout node v is kept in; pick[v]: its strategy. */
static void predict(const as_ctx *c, const uint8_t (*lay)[TS_MAX_RANK], const int *pick, ts_auto_shard_info *info) {
  const ts_graph *g = c->g;
  double comp = 0, comm = 0, bytes = 0;
  for (int v = 0; v < g->n_nodes; v++) {
    const ts_node *nd = &g->nodes[v];
    const as_strat *s = &c->nodes[v].s[pick[v]];
    comp += s->compute;
    comm += s->cost - s->compute;
    bytes += s->comm_bytes;
    for (int k = 0; k < nd->n_in; k++)
      comm += as_reshard_cost(c, lay[nd->in[k]], need(s, k), &g->nodes[nd->in[k]], &bytes);
    if (!lay_eq(s->out, lay[v], nd->rank)) comm += as_reshard_cost(c, s->out, lay[v], nd, &bytes);
  }
  for (int k = 0; k < g->n_outputs; k++) {
    int a = g->alias ? g->alias[k] : -1;
    if (a >= 0) comm += as_reshard_cost(c, lay[g->outputs[k]], lay[g->inputs[a]], &g->nodes[g->outputs[k]], &bytes);
  }
  /* peak: inputs always, every other value from its definition to its last use */
  double base = 0, live = 0, peak = 0;
  int n = g->n_nodes;
  double *drop = calloc((size_t)n + 2, sizeof *drop);
  for (int v = 0; v < n; v++) {
    double b = as_bytes(&g->nodes[v]) / (double)as_layout_tiles(c, lay[v], g->nodes[v].rank);
    if (g->nodes[v].op == TS_OP_INPUT) {
      base += b;
      continue;
    }
    live += b;
    if (live > peak) peak = live;
    if (drop) drop[c->last_use[v] < n ? c->last_use[v] : n] += b;
    if (drop) live -= drop[v], drop[v] = 0;
  }
  free(drop);
  info->compute_s = comp;
  info->comm_s = comm;
  info->step_s = comp + comm;
  info->comm_bytes_per_device = bytes;
  info->peak_bytes_per_device = base + peak;
}

/* Per-node layouts and strategies of a leader choice. */
static int expand(const as_ctx *c, const int *choice, uint8_t (**lay)[TS_MAX_RANK], int **pick) {
  int n = c->g->n_nodes;
  *lay = calloc((size_t)n + 1, sizeof **lay);
  *pick = calloc((size_t)n + 1, sizeof **pick);
  if (!*lay || !*pick) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int v = 0; v < n; v++) {
    (*pick)[v] = choice[c->nodes[v].leader];
    memcpy((*lay)[v], c->nodes[v].s[(*pick)[v]].out, TS_MAX_RANK);
  }
  return 0;
}

static void opts_check_defaults(const ts_auto_shard_options *o, ts_auto_shard_options *d) {
  *d = *o;
  if (d->time_limit_s <= 0) d->time_limit_s = 10;
}

static int check_opts(const ts_graph *g, const ts_auto_shard_options *o) {
  if (!g) return set_error("auto_shard: graph is NULL");
  if (!o || !o->mesh) return set_error("auto_shard: options.mesh is required (the mesh to shard over)");
  if (o->memory_limit_bytes < 0) return set_error("auto_shard: memory_limit_bytes %g is negative", o->memory_limit_bytes);
  if (g->manual_depth > 0) return set_error("auto_shard: the graph is inside a shard_map body");
  for (int v = 0; v < g->n_nodes; v++)
    if (g->nodes[v].manual || ir_op_is_collective(g->nodes[v].op) || g->nodes[v].op == TS_OP_FUSED)
      return set_error("auto_shard: node %%%d (%s) is a manual or compiled node; auto-sharding takes a plain global "
                       "graph", v, ir_op_name(g->nodes[v].op));
  return 0;
}

static void append_lay(spmd_str *s, const as_ctx *c, const uint8_t *lay, int rank) {
  ts_partition_spec sp;
  mask_to_spec(c, lay, rank, &sp);
  char buf[160];
  spmd_str_printf(s, "%s", spmd_spec_str(c->m, &sp, buf, sizeof buf));
}

static char *explain_text(const as_prob *p, const adjacency *a, const int *choice, const ts_auto_shard_info *info,
                          const char *how) {
  const as_ctx *c = &p->c;
  const ts_graph *g = c->g;
  spmd_str s = {0};
  spmd_str_printf(&s, "auto-sharding on %lld devices: %s, %d nodes -> %d variables, %d edges (after "
                      "elimination: %d variables, %d edges), %d ILP columns, solved in %.3f s\n",
                  (long long)c->m->ndevices, how, g->n_nodes, p->n_leaders, c->n_edges, info->nodes, info->edges,
                  info->variables, info->solve_s);
  spmd_str_printf(&s, "predicted per device: step %.3f ms = compute %.3f ms + communication %.3f ms (%.0f bytes "
                      "sent), peak %.0f bytes\n", 1e3 * info->step_s, 1e3 * info->compute_s, 1e3 * info->comm_s,
                  info->comm_bytes_per_device, info->peak_bytes_per_device);
  spmd_str_printf(&s, "inputs:\n");
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    const ts_node *nd = &g->nodes[v];
    char sh[96];
    const as_strat *st = &c->nodes[v].s[choice[c->nodes[v].leader]];
    spmd_str_printf(&s, "  %-28s %-20s ", nd->name ? nd->name : "?", ir_shape_str(nd, sh, sizeof sh));
    append_lay(&s, c, st->out, nd->rank);
    spmd_str_printf(&s, "  %.0f bytes/device%s\n", st->mem, nd->sharding ? " (user-marked)" : "");
  }
  /* the largest variables: chosen vs runner-up (the others fixed) */
  int top[5], nt = 0;
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k];
    if (c->nodes[L].ns < 2) continue;
    if (nt == 5 && as_bytes(&g->nodes[L]) <= as_bytes(&g->nodes[top[4]])) continue; /* full: not bigger */
    int pos = nt < 5 ? nt++ : 4;
    top[pos] = L;
    for (int q = pos; q > 0 && as_bytes(&g->nodes[top[q]]) > as_bytes(&g->nodes[top[q - 1]]); q--) {
      int t = top[q];
      top[q] = top[q - 1], top[q - 1] = t;
    }
  }
  spmd_str_printf(&s, "largest tensors (chosen vs runner-up, the rest of the plan fixed):\n");
  for (int q = 0; q < nt; q++) {
    int L = top[q];
    const ts_node *nd = &g->nodes[L];
    char sh[96];
    double cur = local_cost(p, a, L, choice[L], choice, NULL), best = INFINITY;
    int bi = -1;
    for (int i = 0; i < c->nodes[L].ns; i++) {
      if (i == choice[L]) continue;
      double t = local_cost(p, a, L, i, choice, NULL);
      if (t < best) best = t, bi = i;
    }
    spmd_str_printf(&s, "  %%%d %s %s%s%s: ", L, ir_op_name(nd->op), ir_shape_str(nd, sh, sizeof sh),
                    nd->name ? " " : "", nd->name ? nd->name : "");
    append_lay(&s, c, c->nodes[L].s[choice[L]].out, nd->rank);
    spmd_str_printf(&s, " %.4f ms", 1e3 * cur);
    if (bi >= 0) {
      spmd_str_printf(&s, "; runner-up ");
      append_lay(&s, c, c->nodes[L].s[bi].out, nd->rank);
      if (c->nodes[L].s[bi].partial) spmd_str_printf(&s, "+partial");
      spmd_str_printf(&s, " %.4f ms (+%.4f)", 1e3 * best, 1e3 * (best - cur));
    }
    spmd_str_printf(&s, "\n");
  }
  return spmd_str_take(&s);
}

int autoshard_annotate(ts_graph *g, const ts_auto_shard_options *o_in, ts_auto_shard_info *info, char **explain) {
  if (explain) *explain = NULL;
  if (check_opts(g, o_in) < 0) return -1;
  ts_auto_shard_options o;
  opts_check_defaults(o_in, &o);
  double t0 = now_s();
  as_prob p;
  adjacency adj = {0};
  reduced R;
  bool reduced_ok = false;
  char **keep = NULL;
  int *choice = NULL, *alt = NULL, *pick = NULL;
  uint8_t(*lay)[TS_MAX_RANK] = NULL;
  int rc = -1;
  ts_auto_shard_info inf = {0};
  if (build(&p, g, &o) < 0 || adj_build(&p, &adj) < 0) goto done;
  choice = calloc((size_t)g->n_nodes + 1, sizeof *choice);
  alt = calloc((size_t)g->n_nodes + 1, sizeof *alt);
  if (!choice || !alt) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
    goto done;
  }
  mem_rows rows;
  pick_mem_rows(&p.c, &rows);
  double limit = o.memory_limit_bytes;
  if (limit > 0) {
    double least = min_peak(&p, &rows, alt);
    if (least > limit) {
      set_error("auto_shard: no sharding fits memory_limit %.0f bytes per device: the smallest achievable modeled "
                "peak is %.0f bytes (%.1f MiB) on this mesh", limit, least, least / 1048576.0);
      goto done;
    }
  }
  const char *how;
  reduced_ok = true; /* reduce_free undoes a partial reduce too */
  if (reduce(&p, limit > 0, &R) < 0) goto done;
  if (greedy(&R.q, &R.adj, &rows, limit, choice) < 0) goto done;
  back_substitute(&R, &p.c, choice);
  inf.greedy = true;
  how = o.greedy_only ? "greedy (ILP skipped)" : "greedy fallback (the ILP found no plan within the time limit)";
  if (!o.greedy_only) {
    bool optimal = false;
    /* a big problem: the ILP over each variable's AS_KEEP best strategies against the greedy
     * plan (the greedy choice among them), so the LP stays small; not proven optimal then */
    double cols = 0;
    for (int e = 0; e < R.q.c.n_edges; e++) cols += (double)p.c.nodes[R.q.c.edges[e].u].ns * p.c.nodes[R.q.c.edges[e].v].ns;
    if (cols > AS_PRUNE_COLUMNS && !(keep = prune(&R.q, &R.adj, choice))) goto done;
    int r = solve_ilp(&R.q, &rows, limit, o.time_limit_s, keep, alt, &optimal, &inf.variables);
    if (keep) optimal = false;
    if (r < 0) goto done;
    if (r == 1) back_substitute(&R, &p.c, alt);
    if (r == 1 && objective(&p, alt) <= objective(&p, choice) + 1e-12) {
      memcpy(choice, alt, (size_t)g->n_nodes * sizeof *choice);
      inf.greedy = false;
      inf.optimal = optimal;
      how = optimal ? "ILP optimal (GLPK)"
            : keep  ? "ILP over each variable's best strategies (pruned: a big problem), not proven optimal"
                    : "ILP time limit: GLPK's best plan, not proven optimal";
    } else if (r == 1) {
      how = "ILP time limit: the greedy plan beat GLPK's incumbent";
    }
  }
  inf.solve_s = now_s() - t0;
  inf.objective_s = objective(&p, choice);
  inf.nodes = R.q.n_leaders;
  inf.edges = R.q.c.n_edges;
  if (expand(&p.c, choice, &lay, &pick) < 0) goto done;
  predict(&p.c, (const uint8_t(*)[TS_MAX_RANK])lay, pick, &inf);
  if (limit > 0) {
    double worst = 0;
    for (int q = 0; q < rows.n; q++) worst = fmax(worst, row_mem(&p, rows.t[q], choice));
    if (worst > limit * (1 + 1e-9)) {
      set_error("auto_shard: the plan does not fit memory_limit %.0f bytes (modeled %.0f); the greedy fallback "
                "could not meet it, give the solver more time", limit, worst);
      goto done;
    }
  }
  if (explain && !(*explain = explain_text(&p, &adj, choice, &inf, how))) goto done; /* before marking: says what the user marked */
  /* the annotations: inputs and the results of contractions */
  for (int v = 0; v < g->n_nodes; v++) {
    ts_node *nd = &g->nodes[v];
    bool key = nd->op == TS_OP_INPUT || nd->op == TS_OP_DOT || nd->op == TS_OP_CONV;
    if (!key || nd->sharding || nd->rank == 0) continue;
    ts_partition_spec sp;
    mask_to_spec(&p.c, lay[v], nd->rank, &sp);
    ts_sharding *sh = ts_sharding_new(p.c.m, &sp, nd->rank);
    if (!sh) goto done;
    int m = ts_mark_sharding(g, v, sh);
    ts_sharding_free(sh);
    if (m < 0) goto done;
  }
  rc = 0;
done:
  if (info) *info = inf;
  for (int v = 0; keep && v < g->n_nodes; v++) free(keep[v]);
  free(keep);
  if (reduced_ok) reduce_free(&R, &p);
  free(adj.start);
  free(adj.list);
  free(choice);
  free(alt);
  free(pick);
  free(lay);
  prob_free(&p);
  return rc;
}

int ts_auto_shard(ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info, char **explain) {
  return autoshard_annotate(g, o, info, explain);
}

int ts_shard_predict(const ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info) {
  if (check_opts(g, o) < 0) return -1;
  if (!info) return set_error("shard_predict: info is NULL");
  memset(info, 0, sizeof *info);
  int n = g->n_nodes, rc = -1;
  as_prob p;
  ts_partition_spec *specs = calloc((size_t)n + 1, sizeof *specs);
  uint8_t(*lay)[TS_MAX_RANK] = calloc((size_t)n + 1, sizeof *lay);
  int *pick = calloc((size_t)n + 1, sizeof *pick);
  if (!specs || !lay || !pick) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "shard_predict: out of memory");
    free(specs), free(lay), free(pick);
    return -1;
  }
  if (build(&p, g, o) < 0) goto done;
  if (spmd_propagate(g, o->mesh, specs, NULL) < 0) goto done;
  for (int v = 0; v < n; v++) spec_to_mask(&specs[v], lay[v]);
  /* each node: the cheapest strategy with its propagated layout (operands as they are) */
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    const as_node *an = &p.c.nodes[v];
    double best = INFINITY;
    for (int pass = 0; pass < 2 && best == INFINITY; pass++)
      for (int i = 0; i < an->ns; i++) {
        if (pass == 0 && !lay_eq(an->s[i].out, lay[v], nd->rank)) continue;
        double t = an->s[i].cost;
        for (int k = 0; k < nd->n_in; k++)
          t += as_reshard_cost(&p.c, lay[nd->in[k]], need(&an->s[i], k), &g->nodes[nd->in[k]], NULL);
        if (pass == 1) t += as_reshard_cost(&p.c, an->s[i].out, lay[v], nd, NULL);
        if (t < best) best = t, pick[v] = i;
      }
  }
  predict(&p.c, (const uint8_t(*)[TS_MAX_RANK])lay, pick, info);
  info->objective_s = info->step_s;
  rc = 0;
done:
  prob_free(&p);
  free(specs);
  free(lay);
  free(pick);
  return rc;
}
