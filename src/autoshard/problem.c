/* problem.c — the auto-sharding problem: each node's strategies
 * (strategy.c), graph shrinking (an elementwise node of its operand's shape
 * shares the operand's variable, unless that is a graph input other nodes
 * read too: follow_operand), resharding edges merged per pair of
 * variables, the memory rows and the objective. */
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autoshard/as_solve.h"
#include "spmd/partition.h" /* spmd_propagate */


void as_spec_to_mask(const ts_partition_spec *s, uint8_t *lay) {
  memset(lay, 0, TS_MAX_RANK);
  for (int d = 0; d < s->rank; d++)
    for (int k = 0; k < s->naxes[d]; k++) lay[d] |= (uint8_t)(1u << s->axes[d][k]);
}

void as_mask_to_spec(const as_ctx *c, const uint8_t *lay, int rank, ts_partition_spec *s) {
  ts_partition_spec_init(s, rank);
  for (int d = 0; d < rank; d++)
    for (int a = 0; a < c->m->rank; a++)
      if (lay[d] & (1u << a)) ts_partition_spec_add_axis(s, d, a);
}

bool as_lay_eq(const uint8_t *a, const uint8_t *b, int rank) { return memcmp(a, b, (size_t)rank) == 0; }

static void ctx_free(as_ctx *c) {
  if (c->nodes)
    for (int i = 0; i < c->g->n_nodes; i++) free(c->nodes[i].s);
  free(c->nodes);
  for (int e = 0; e < c->n_edges; e++) free(c->edges[e].cost);
  free(c->edges);
  free(c->last_use);
  free(c->tie);
  free(c->moved);
  free(c->kernel);
  free(c->window);
  free(c->trans);
  free(c->bcast);
}

static const uint8_t zero_lay[TS_MAX_RANK];

/* The layout strategy s of node v needs of its operand k. */
const uint8_t *as_need(const as_strat *s, int k) { return k < AS_MAX_IN ? s->in[k] : zero_lay; }

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


/* Resharding cost of the edge u -> (v, operand k) for strategies i of u, j of v. */
static double edge_cost(as_ctx *c, int u, int i, int v, int j, int k) {
  return as_reshard_cost(c, c->nodes[u].s[i].out, as_need(&c->nodes[v].s[j], k), &c->g->nodes[u], NULL);
}

/* An edge between the variables of u and v: the cost of u's strategy i
 * feeding v's strategy j as operand k (k < 0: into v's own output layout, a
 * donated update and its parameter). */
static int pair_edge(as_ctx *c, int u, int v, int k) {
  const as_node *au = &c->nodes[u], *av = &c->nodes[v];
  int Lu = au->leader, Lv = av->leader, a = Lu < Lv ? Lu : Lv, b = Lu < Lv ? Lv : Lu;
  int nb = c->nodes[b].ns;
  double *m = malloc((size_t)c->nodes[a].ns * (size_t)nb * sizeof *m);
  if (!m || add_edge(c, a, b, m) < 0) {
    free(m);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  }
  for (int i = 0; i < au->ns; i++)
    for (int j = 0; j < av->ns; j++) {
      const uint8_t *to = k < 0 ? av->s[j].out : as_need(&av->s[j], k);
      double t = as_reshard_cost(c, au->s[i].out, to, &c->g->nodes[u], NULL);
      if (Lu == a) m[i * nb + j] = t;
      else m[j * nb + i] = t;
    }
  return 0;
}

/* ---- repeated blocks ---- */

static uint64_t mix64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

static uint64_t kind_hash(const ts_graph *g, const ts_node *n) {
  uint64_t h = mix64((uint64_t)n->op, (uint64_t)n->dtype);
  h = mix64(h, (uint64_t)n->rank);
  for (int d = 0; d < n->rank; d++) h = mix64(h, (uint64_t)n->shape[d]);
  h = mix64(h, (uint64_t)n->n_in);
  for (int k = 0; k < n->n_in; k++) {
    const ts_node *x = &g->nodes[n->in[k]];
    h = mix64(h, (uint64_t)x->rank * 131 + (uint64_t)x->dtype);
    for (int d = 0; d < x->rank; d++) h = mix64(h, (uint64_t)x->shape[d]);
  }
  switch (ir_op_attr_kind(n->op)) { /* what same_kind compares */
  case TS_ATTRS_AXIS: return mix64(h, (uint64_t)n->attr.axis);
  case TS_ATTRS_CMP: return mix64(h, (uint64_t)n->attr.cmp);
  case TS_ATTRS_DIMS: case TS_ATTRS_PERM: case TS_ATTRS_REDUCE:
    for (int k = 0; k < n->attr.n_dims; k++) h = mix64(h, (uint64_t)n->attr.dims[k]);
    return mix64(h, (uint64_t)n->attr.n_dims);
  case TS_ATTRS_SLICE: case TS_ATTRS_PAD:
    for (int k = 0; k < (n->n_in ? g->nodes[n->in[0]].rank : 0); k++)
      h = mix64(mix64(h, (uint64_t)n->attr.start[k]), (uint64_t)n->attr.limit[k]);
    return h;
  default: return h;
  }
}

/* Same op, dtypes, shapes and the attributes that shape strategies. */
static bool same_kind(const ts_graph *g, const ts_node *a, const ts_node *b) {
  if (a->op != b->op || a->dtype != b->dtype || a->rank != b->rank || a->n_in != b->n_in ||
      memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) != 0)
    return false;
  for (int k = 0; k < a->n_in; k++) {
    const ts_node *x = &g->nodes[a->in[k]], *y = &g->nodes[b->in[k]];
    if (x->dtype != y->dtype || x->rank != y->rank || memcmp(x->shape, y->shape, (size_t)x->rank * sizeof x->shape[0]) != 0)
      return false;
  }
  const ts_attr *x = &a->attr, *y = &b->attr;
  int r_in = a->n_in ? g->nodes[a->in[0]].rank : 0;
  switch (ir_op_attr_kind(a->op)) {
  case TS_ATTRS_AXIS: return x->axis == y->axis;
  case TS_ATTRS_CMP: return x->cmp == y->cmp;
  case TS_ATTRS_DIMS: case TS_ATTRS_PERM: case TS_ATTRS_REDUCE:
    return x->n_dims == y->n_dims && memcmp(x->dims, y->dims, (size_t)x->n_dims * sizeof x->dims[0]) == 0;
  case TS_ATTRS_SLICE: case TS_ATTRS_PAD:
    return memcmp(x->start, y->start, (size_t)r_in * sizeof x->start[0]) == 0 &&
           memcmp(x->limit, y->limit, (size_t)r_in * sizeof x->limit[0]) == 0;
  case TS_ATTRS_DOT:
    return x->dot.n_batch == y->dot.n_batch && x->dot.n_contract == y->dot.n_contract &&
           memcmp(x->dot.lhs_batch, y->dot.lhs_batch, (size_t)x->dot.n_batch * sizeof(int)) == 0 &&
           memcmp(x->dot.rhs_batch, y->dot.rhs_batch, (size_t)x->dot.n_batch * sizeof(int)) == 0 &&
           memcmp(x->dot.lhs_contract, y->dot.lhs_contract, (size_t)x->dot.n_contract * sizeof(int)) == 0 &&
           memcmp(x->dot.rhs_contract, y->dot.rhs_contract, (size_t)x->dot.n_contract * sizeof(int)) == 0;
  case TS_ATTRS_CONV: return x->conv.groups == y->conv.groups;
  default: return true; /* constants, RNG keys, pooling windows: the strategies do not depend on them */
  }
}

/* tie[v]: the latest earlier node of v's kind (op, dtypes, shapes, operand
 * shapes, the attributes strategies depend on), else -1: copies of a block
 * (and identical nodes inside one) share a variable. Inputs: below. */
static int find_ties(const ts_graph *g, int *tie) {
  int n = g->n_nodes, cap = 1;
  while (cap < 2 * n + 2) cap <<= 1;
  uint64_t *key = calloc((size_t)cap, sizeof *key);
  int *val = malloc((size_t)cap * sizeof *val);
  if (!key || !val) {
    free(key), free(val);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  }
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    tie[v] = -1;
    if (nd->op == TS_OP_INPUT || nd->sharding) continue;
    uint64_t h = kind_hash(g, nd) | 1; /* 0: an empty slot */
    size_t q = (size_t)(h & (uint64_t)(cap - 1));
    while (key[q] && key[q] != h) q = (q + 1) & (size_t)(cap - 1);
    int u = key[q] ? val[q] : -1;
    key[q] = h, val[q] = v;
    if (u < 0 || !same_kind(g, &g->nodes[u], nd)) continue;
    tie[v] = u;
  }
  /* inputs (a block's parameters and optimizer state): tied when their first
   * users are copies of one node, read at the same operand position */
  int *first = malloc(((size_t)n + 1) * sizeof *first), *pos = malloc(((size_t)n + 1) * sizeof *pos);
  if (!first || !pos) {
    free(key), free(val), free(first), free(pos);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  }
  for (int v = 0; v < n; v++) first[v] = -1;
  for (int v = 0; v < n; v++)
    for (int k = 0; k < g->nodes[v].n_in; k++)
      if (first[g->nodes[v].in[k]] < 0) first[g->nodes[v].in[k]] = v, pos[g->nodes[v].in[k]] = k;
  memset(key, 0, (size_t)cap * sizeof *key);
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    if (nd->op != TS_OP_INPUT || nd->sharding || first[v] < 0) continue;
    int r = first[v];
    while (tie[r] >= 0) r = tie[r];
    if (r == first[v]) continue; /* its user is no copy */
    uint64_t h = mix64(mix64(kind_hash(g, nd), (uint64_t)r), (uint64_t)pos[v]) | 1;
    size_t q = (size_t)(h & (uint64_t)(cap - 1));
    while (key[q] && key[q] != h) q = (q + 1) & (size_t)(cap - 1);
    int u = key[q] ? val[q] : -1;
    key[q] = h, val[q] = v;
    if (u >= 0 && same_kind(g, &g->nodes[u], nd)) tie[v] = u;
  }
  free(first), free(pos);
  free(key), free(val);
  return 0;
}

/* Graph shrinking: the operand whose variable elementwise node v shares, one
 * of its shape that is not a broadcast or constant if any, or -1 (v gets its
 * own variable). Not a graph input that other nodes read too (a parameter
 * its forward contractions also read): sharing it made the parameter's
 * update chain (AdamW's w * (1 - lr wd), then w - step) compute in the
 * layout the forward reads w in, whole on every device, with the sharded
 * optimizer step all-gathered into it (GPT on 8 devices: each device
 * updated all 4.8M parameters, 1.08-1.11x the hand layout's measured step,
 * whose ZeRO-1 update runs on the device's slice and gathers the result). */
static int follow_operand(const ts_graph *g, int v, const int *users) {
  const ts_node *nd = &g->nodes[v];
  int fk = -1;
  for (int k = 0; !nd->sharding && ir_op_is_elementwise(nd->op) && k < nd->n_in; k++) {
    const ts_node *x = &g->nodes[nd->in[k]];
    if (x->rank != nd->rank || memcmp(x->shape, nd->shape, (size_t)nd->rank * sizeof nd->shape[0]) != 0) continue;
    if (x->op == TS_OP_INPUT && users[nd->in[k]] > 1) continue;
    bool weak = x->op == TS_OP_BROADCAST || x->op == TS_OP_CONSTANT;
    if (fk < 0 || (!weak && (g->nodes[nd->in[fk]].op == TS_OP_BROADCAST || g->nodes[nd->in[fk]].op == TS_OP_CONSTANT)))
      fk = k;
  }
  return fk;
}

static int build_nodes(as_prob *p, const int *users);

int as_build(as_prob *p, const ts_graph *g, const ts_auto_shard_options *o) {
  as_ctx *c = &p->c;
  memset(p, 0, sizeof *p);
  c->g = g;
  c->m = o->mesh;
  autoshard_costs_from(o, &c->k);
  int n = g->n_nodes;
  c->nodes = calloc((size_t)n + 1, sizeof *c->nodes);
  c->last_use = malloc(((size_t)n + 1) * sizeof *c->last_use);
  p->unary = calloc((size_t)n + 1, sizeof *p->unary);
  p->leaders = malloc(((size_t)n + 1) * sizeof *p->leaders);
  if (!c->nodes || !c->last_use || !p->unary || !p->leaders) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  int *tie = NULL; /* per node: the repeated block copy it ties to (find_ties) */
  if (!o->untie_repeated) {
    if (!(tie = c->tie = malloc(((size_t)n + 1) * sizeof *tie)))
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
    if (find_ties(g, tie) < 0) return -1;
  }
  for (int v = 0; v < n; v++) c->last_use[v] = v;
  for (int v = 0; v < n; v++)
    for (int k = 0; k < g->nodes[v].n_in; k++) c->last_use[g->nodes[v].in[k]] = v;
  for (int k = 0; k < g->n_outputs; k++) c->last_use[g->outputs[k]] = n;
  as_fusion(c);
  as_windows(c);
  int *users = calloc((size_t)n + 1, sizeof *users);
  if (!users) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int v = 0; v < n; v++)
    for (int k = 0; k < g->nodes[v].n_in; k++) users[g->nodes[v].in[k]]++;
  int rc = build_nodes(p, users);
  free(users);
  return rc;
}

/* Each node's strategies (or the variable it shares), the unary costs and
 * the merged edges; users[v]: the nodes reading v. */
static int build_nodes(as_prob *p, const int *users) {
  as_ctx *c = &p->c;
  const ts_graph *g = c->g;
  int n = g->n_nodes;
  int *tie = c->tie;
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    as_node *an = &c->nodes[v];
    an->leader = v;
    an->var = -1;
    int fk = follow_operand(g, v, users);
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
        s->compute = s->cost = as_node_compute(c, v, par);
        s->mem = as_bytes(nd) / par;
      }
      continue;
    }
    if (as_node_strategies(c, v) < 0) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
    if (tie && tie[v] >= 0 && c->nodes[c->nodes[tie[v]].leader].ns == an->ns) { /* a repeated block's copy */
      an->leader = c->nodes[tie[v]].leader;
      c->n_tied++;
      continue;
    }
    if (nd->sharding) { /* user-marked: only strategies with its layout */
      uint8_t want[TS_MAX_RANK] = {0};
      as_spec_to_mask(ts_sharding_spec(nd->sharding), want);
      int k = 0;
      for (int i = 0; i < an->ns; i++)
        if (as_lay_eq(an->s[i].out, want, nd->rank)) an->s[k++] = an->s[i];
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
      if (pair_edge(c, u, v, k) < 0) return -1;
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
    if (pair_edge(c, u, v, -1) < 0) return -1;
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

void as_prob_free(as_prob *p) {
  if (p->unary)
    for (int v = 0; v < p->c.g->n_nodes; v++) free(p->unary[v]);
  free(p->unary);
  free(p->leaders);
  ctx_free(&p->c);
}

/* ---- memory rows ---- */


bool as_live_at(const as_ctx *c, int v, int t) {
  return c->g->nodes[v].op == TS_OP_INPUT || (v <= t && c->last_use[v] >= t);
}

/* The AS_MEM_ROWS points of the 1-device schedule with the most live bytes. */
void as_pick_mem_rows(const as_ctx *c, mem_rows *r) {
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
double as_row_mem(const as_prob *p, int t, const int *choice) {
  const as_ctx *c = &p->c;
  double s = 0;
  for (int v = 0; v < c->g->n_nodes; v++)
    if (as_live_at(c, v, t)) s += c->nodes[v].s[choice[c->nodes[v].leader]].mem;
  return s;
}

/* The smallest modeled peak any plan reaches: memory has no cross-node
 * constraint, so each node's least-bytes strategy minimizes every row. */
double as_min_peak(const as_prob *p, const mem_rows *r, int *choice) {
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
    double m = as_row_mem(p, r->t[q], choice);
    if (m > worst) worst = m;
  }
  return worst;
}

/* ---- objective ---- */

double as_objective(const as_prob *p, const int *choice) {
  const as_ctx *c = &p->c;
  double t = 0;
  for (int k = 0; k < p->n_leaders; k++) t += p->unary[p->leaders[k]][choice[p->leaders[k]]];
  for (int e = 0; e < c->n_edges; e++) {
    const as_edge *ed = &c->edges[e];
    t += ed->cost[choice[ed->u] * c->nodes[ed->v].ns + choice[ed->v]];
  }
  return t;
}

