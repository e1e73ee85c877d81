/* async.c — which collectives a device starts asynchronously, and the
 * reduce-scatters that read their operand in place (the plan then keeps that
 * operand live until the collective is awaited). The runtime (compile.c) and
 * the prediction (predict.c) both plan through here, so a predicted arena is
 * the compiled one. */
#include <stdlib.h>

#include "plan/plan.h"

void plan_async_free(plan_async *m) {
  free(m->async);
  free(m->defer);
  free(m->borrow);
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

int plan_mark_async(const ts_graph *g, ts_plan *p, plan_async *m) {
  *m = (plan_async){0};
  size_t n = (size_t)g->n_nodes + 1;
  int32_t *base = malloc(n * sizeof *base), *first_use = malloc(n * sizeof *first_use);
  int32_t *keep = malloc(n * sizeof *keep);
  int rc = base && first_use && keep ? 0 : set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
  if (rc == 0) {
    for (int i = 0; i < g->n_nodes; i++) keep[i] = -1;
    plan_first_uses(g, base, first_use, INT32_MAX);
    rc = mark(g, p, base, first_use, keep, m);
  }
  if (rc == 0 && m->borrow) { /* the borrowed operands live until their collectives are awaited */
    plan_free(p);
    rc = plan_build_kept(g, keep, p);
  }
  free(base);
  free(first_use);
  free(keep);
  if (rc < 0) plan_async_free(m);
  return rc;
}
