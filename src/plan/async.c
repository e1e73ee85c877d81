/* async.c — which collectives a device starts asynchronously, and the
 * reduce-scatters that read their operand in place (the plan then keeps that
 * operand live until the collective is awaited). The runtime (compile.c) and
 * the prediction (predict.c) both plan through here, so a predicted arena is
 * the compiled one. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

void plan_async_free(plan_async *m) {
  free(m->async);
  free(m->defer);
  free(m->borrow);
  free(m->chain_of);
  free(m->chains);
  *m = (plan_async){0};
}

static int set_mark(bool **marks, int n, int i) {
  if (!*marks && !(*marks = calloc((size_t)n + 1, sizeof **marks)))
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
  (*marks)[i] = true;
  return 0;
}

void plan_first_uses(const ts_graph *g, int32_t *base, int32_t *first_use, int32_t none) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    base[i] = n->op == TS_OP_RESHAPE ? base[n->in[0]] : i;
    first_use[i] = none;
    if (n->op == TS_OP_RESHAPE) continue; /* runs nothing */
    for (int k = 0; k < n->n_in; k++)
      if (first_use[base[n->in[k]]] == none) first_use[base[n->in[k]]] = i;
  }
}

/* Whether the device runs a node between the collective i and its first user
 * (those nodes overlap with the communication). */
static bool runs_between(const ts_graph *g, int i, int32_t until) {
  for (int j = i + 1; j < g->n_nodes && j < until; j++) {
    ts_op op = g->nodes[j].op;
    if (op != TS_OP_INPUT && op != TS_OP_CONSTANT && op != TS_OP_RESHAPE) return true;
  }
  return false;
}

/* A result written straight into the caller's buffer (no end-of-run copy
 * reads it). */
static bool carried(const ts_plan *p, const int32_t *base, int i) {
  plan_kind kind = p->values[i].kind;
  bool copied = false;
  for (int k = 0; k < p->n_copies; k++) copied |= p->copies[k].src_node >= 0 && base[p->copies[k].src_node] == i;
  return (kind == PLAN_INPUT || kind == PLAN_OUTPUT) && !copied;
}

static int mark(const ts_graph *g, const ts_plan *p, const int32_t *base, const int32_t *first_use, int32_t *keep,
                plan_async *m) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    bool startable = n->op == TS_OP_ALL_REDUCE || n->op == TS_OP_ALL_GATHER || n->op == TS_OP_REDUCE_SCATTER;
    if (!startable || !n->attr.coll || n->attr.coll->n < 2) continue;
    /* a result nobody reads has memory only at its own node: the worker
     * would write it after it was reused */
    bool is_output = false;
    for (int k = 0; k < g->n_outputs; k++) is_output |= base[g->outputs[k]] == i;
    if (first_use[i] == INT32_MAX && !is_output) continue;
    /* one carried may still be in flight when the run returns: the next run
     * overlaps it (runtime/carry.c); so it is started even when it ends the
     * program (ZeRO-1's last weight all-gather: the next step's first layers
     * hide it) */
    bool carry = carried(p, base, i);
    if (!runs_between(g, i, first_use[i]) && !(carry && first_use[i] == INT32_MAX)) continue;
    if (set_mark(&m->async, g->n_nodes, i) < 0) return -1;
    if (carry) {
      if (set_mark(&m->defer, g->n_nodes, i) < 0) return -1;
    } else if (n->op == TS_OP_REDUCE_SCATTER && p->values[base[n->in[0]]].kind == PLAN_ARENA) {
      /* reads its operand (an arena value only this program writes) in
       * place until the result's first user awaits it (or the run's end) */
      if (set_mark(&m->borrow, g->n_nodes, i) < 0) return -1;
      keep[i] = first_use[i] == INT32_MAX ? g->n_nodes : first_use[i];
    }
  }
  return 0;
}

/* ---- update chains (plan.h plan_async.chain_of) ---- */

enum { CHAIN_TINY = 64 }; /* elements: a step scalar (AdamW's step size, bias corrections) */
/* Bytes a gather moves before its chain pays: one that crosses a 1 Gbit/s
 * link in milliseconds (the CNN's fc1, 4.7 MB). A small one (the CNN's conv
 * weights under SPMD data=2) gains nothing from starting early, and its
 * chain made the step's end wait for the worker (CNN SPMD over 2 hosts at
 * 1 Gbit/s, loaded, interleaved: 54.6 against 47.6 ms with every weight's
 * chain, DDP with fc1's alone 49.5 against 47.9). */
#define CHAIN_MIN_BYTES (1 << 20)

typedef struct {
  const ts_graph *g;
  const ts_plan *p;
  const int32_t *base;
  const plan_async *m;
  int8_t *early;   /* per node: 1 a tiny value of inputs and constants alone, 0 not, -1 not known yet */
  int32_t *owner;  /* per node: the G of the chain it is in, or -1 */
  int32_t *stack;
  int32_t *keep, *from;
  int *wr, *rd;    /* hand_off_at's scratch */
} chainer;

/* Whether node v is computed from inputs and constants alone, tiny: the
 * device computes it before the chain's hand-off (opt/schedule.c runs such
 * nodes first). */
static bool early(chainer *c, int v) {
  if (c->early[v] >= 0) return c->early[v];
  const ts_node *n = &c->g->nodes[v];
  bool e = n->op == TS_OP_INPUT || n->op == TS_OP_CONSTANT ||
           (!ir_op_is_collective(n->op) && ts_shape_numel(n->rank, n->shape) <= CHAIN_TINY);
  for (int k = 0; e && k < n->n_in; k++) e = early(c, n->in[k]); /* operands come first: the depth is small */
  c->early[v] = e;
  return e;
}

static bool started_reduction(const chainer *c, int v) {
  ts_op op = c->g->nodes[v].op;
  return (op == TS_OP_REDUCE_SCATTER || op == TS_OP_ALL_REDUCE) && c->m->async && c->m->async[v] &&
         !(c->m->defer && c->m->defer[v]);
}

/* The nodes G's operand is computed by, from one started reduction (*r)
 * and early values (the latest: *ext): marked owner = G. False (nothing
 * marked that stays) where another collective, a second reduction or
 * another chain's node is met. */
static bool collect(chainer *c, int G, int *r, int *ext) {
  const ts_graph *g = c->g;
  int sp = 0;
  c->stack[sp++] = g->nodes[G].in[0];
  bool ok = true;
  while (sp && ok) {
    int v = c->stack[--sp];
    const ts_node *n = &g->nodes[v];
    if (c->owner[v] == G || n->op == TS_OP_INPUT || n->op == TS_OP_CONSTANT) continue;
    if (started_reduction(c, v)) {
      ok = *r < 0 || *r == v;
      *r = v;
      continue;
    }
    if (n->op != TS_OP_RESHAPE && early(c, v)) {
      if (v > *ext) *ext = v;
      continue;
    }
    if (ir_op_is_collective(n->op) || c->owner[v] >= 0) {
      ok = false;
      continue;
    }
    c->owner[v] = G;
    for (int k = 0; k < n->n_in; k++) c->stack[sp++] = n->in[k];
  }
  return ok && *r >= 0;
}

/* The memory of value v, as (kind, index) of the caller's buffers; -1 for
 * the arena and constants. */
static int caller_mem(const chainer *c, int v) {
  const plan_value *pv = &c->p->values[c->base[v]];
  if (pv->kind == PLAN_INPUT) return 2 * pv->index;
  if (pv->kind == PLAN_OUTPUT) return 2 * pv->index + 1;
  return -1;
}

static bool in_chain(const chainer *c, int G, int v) { return v == G || c->owner[c->base[v]] == G; }

static bool has(const int *list, int n, int x) {
  for (int i = 0; i < n; i++)
    if (list[i] == x) return true;
  return false;
}

/* The hand-off node of chain G (R its reduction, ext its latest early
 * operand): the latest node outside it that reads or writes caller memory
 * the chain writes, or writes caller memory it reads; -1 where the chain
 * cannot run apart (a value of it read outside, or copied at the end).
 * wr, rd: scratch for the caller memory it writes and reads. */
static int hand_off_at(const chainer *c, int G, int r, int ext, int *wr, int *rd) {
  const ts_graph *g = c->g;
  int h = r > ext ? r : ext, n_wr = 0, n_rd = 0;
  for (int v = 0; v < g->n_nodes; v++) {
    if (!in_chain(c, G, v) || g->nodes[v].op == TS_OP_RESHAPE) continue;
    if (caller_mem(c, v) >= 0) wr[n_wr++] = caller_mem(c, v);
    for (int k = 0; v != G && k < g->nodes[v].n_in; k++)
      if (caller_mem(c, g->nodes[v].in[k]) >= 0) rd[n_rd++] = caller_mem(c, g->nodes[v].in[k]);
  }
  for (int j = 0; j < g->n_nodes; j++) {
    const ts_node *n = &g->nodes[j];
    if (n->op == TS_OP_RESHAPE || n->op == TS_OP_INPUT || n->op == TS_OP_CONSTANT || in_chain(c, G, j)) continue;
    int mem = caller_mem(c, j);
    bool touch = mem >= 0 && (has(wr, n_wr, mem) || has(rd, n_rd, mem));
    for (int k = 0; k < n->n_in; k++) {
      if (in_chain(c, G, n->in[k])) return -1; /* read outside the chain */
      touch = touch || (caller_mem(c, n->in[k]) >= 0 && has(wr, n_wr, caller_mem(c, n->in[k])));
    }
    if (touch && j > h) h = j;
  }
  for (int k = 0; k < g->n_outputs; k++) /* its outputs written in place, not copied at the end */
    if (in_chain(c, G, g->outputs[k]) && caller_mem(c, g->outputs[k]) < 0) return -1;
  for (int k = 0; k < c->p->n_copies; k++) {
    const plan_copy *x = &c->p->copies[k];
    if (x->src_node >= 0 && in_chain(c, G, x->src_node)) return -1;
    if (x->dst_output >= 0) { /* an output's buffer, or its aliased input's */
      int a = g->alias ? g->alias[x->dst_output] : -1;
      int mem = a >= 0 ? 2 * a : 2 * x->dst_output + 1;
      if (has(wr, n_wr, mem) || has(rd, n_rd, mem)) return -1;
    }
  }
  return h < G ? h : -1;
}

/* Whether G is a started all-gather of one block per member (outer 1) into
 * the caller's memory (deferred) of more than CHAIN_MIN_BYTES. */
static bool chain_gather(const chainer *c, int G) {
  const ts_graph *g = c->g;
  const ts_node *n = &g->nodes[G];
  return n->op == TS_OP_ALL_GATHER && c->m->defer && c->m->defer[G] && n->n_in == 1 && n->attr.coll &&
         ts_shape_numel(n->attr.axis, g->nodes[n->in[0]].shape) == 1 &&
         (double)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(n->dtype) > CHAIN_MIN_BYTES;
}

/* Forms the chains of the deferred gathers (plan.h); keep and from are the
 * plan's (plan_build_live). */
static int find_chains(chainer *c, plan_async *m) {
  const ts_graph *g = c->g;
  int n = g->n_nodes;
  for (int G = 0; G < n; G++) {
    if (!chain_gather(c, G)) continue;
    int r = -1, ext = -1, h = -1;
    if (collect(c, G, &r, &ext)) h = hand_off_at(c, G, r, ext, c->wr, c->rd);
    if (h < 0) { /* not a chain: unmark */
      for (int v = 0; v < n; v++)
        if (c->owner[v] == G) c->owner[v] = -1;
      continue;
    }
    if (!m->chain_of) {
      m->chain_of = malloc(((size_t)n + 1) * sizeof *m->chain_of);
      m->chains = malloc(((size_t)n + 1) * sizeof *m->chains);
      if (!m->chain_of || !m->chains) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
      for (int v = 0; v < n; v++) m->chain_of[v] = -1;
    }
    int at = m->n_chains++;
    while (at > 0 && m->chains[at - 1].hand_off > h) m->chains[at] = m->chains[at - 1], at--;
    m->chains[at] = (plan_chain){G, h, r};
    m->chain_of[G] = G;
    c->keep[r] = n; /* its operand, read in place (borrow), and its result until the chain ran */
    c->from[r] = r;
    for (int v = 0; v < n; v++) {
      if (c->owner[v] != G) continue;
      m->chain_of[v] = G;
      c->from[v] = h; /* computed any time after the hand-off */
      for (int k = 0; k < g->nodes[v].n_in; k++) {
        int x = c->base[g->nodes[v].in[k]];
        if (c->owner[x] != G && c->from[x] < 0) c->from[x] = x; /* an early operand: live to the end */
      }
    }
  }
  return 0;
}

static int mark_chains(const ts_graph *g, const ts_plan *p, const int32_t *base, int32_t *keep, int32_t *from,
                       plan_async *m) {
  size_t n = (size_t)g->n_nodes + 1, edges = 1;
  for (int v = 0; v < g->n_nodes; v++) edges += (size_t)g->nodes[v].n_in;
  chainer c = {g, p, base, m, malloc(n), malloc(n * sizeof(int32_t)), malloc(edges * sizeof(int32_t)), keep, from,
               malloc(n * sizeof(int)), malloc(edges * sizeof(int))};
  int rc = c.early && c.owner && c.stack && c.wr && c.rd ? 0 : set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
  if (rc == 0) {
    memset(c.early, -1, n);
    for (size_t v = 0; v < n; v++) c.owner[v] = -1;
    rc = find_chains(&c, m);
  }
  free(c.early);
  free(c.owner);
  free(c.stack);
  free(c.wr);
  free(c.rd);
  return rc;
}

int plan_mark_async(const ts_graph *g, ts_plan *p, bool chains, plan_async *m) {
  *m = (plan_async){0};
  size_t n = (size_t)g->n_nodes + 1;
  int32_t *base = malloc(n * sizeof *base), *first_use = malloc(n * sizeof *first_use);
  int32_t *keep = malloc(n * sizeof *keep), *from = malloc(n * sizeof *from);
  int rc = base && first_use && keep && from ? 0 : set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
  if (rc == 0) {
    for (int i = 0; i < g->n_nodes; i++) keep[i] = from[i] = -1;
    plan_first_uses(g, base, first_use, INT32_MAX);
    rc = mark(g, p, base, first_use, keep, m);
  }
  if (rc == 0 && chains && m->async) rc = mark_chains(g, p, base, keep, from, m);
  if (rc == 0 && (m->borrow || m->chains)) { /* the borrowed operands live until their collectives are awaited */
    plan_free(p);
    rc = plan_build_live(g, keep, m->chains ? from : NULL, p);
  }
  free(base);
  free(first_use);
  free(keep);
  free(from);
  if (rc < 0) plan_async_free(m);
  return rc;
}
