/* schedule.c — the schedule pass (opt.h opt_schedule): collectives as early
 * as their operands allow. The executor runs nodes in order and overlaps a
 * started collective with the nodes between it and its first user
 * (runtime/), so the earlier it starts the more work hides it.
 *
 * Weight gathers (an all-gather of a program input: FSDP's parameters) are
 * prefetched one layer ahead instead: the first at the start of the
 * program, each next one right before the first user of the one before it
 * runs, so gathering layer k+1's weight overlaps layer k's compute while at
 * most two gathered weights wait for their layers (the input nodes, which
 * compute nothing, move along with them). The schedule depends only on the
 * program, so every device makes its collective calls in the same order.
 *
 * Then the tail of the program, after the last collective that waits for no
 * other (the end of the backward pass: the gradients' reductions have all
 * started), runs in the order its collectives end: each node goes with the
 * latest collective it depends on (through any path), nodes that depend on
 * none first, then those of the first collective started, and so on
 * (stable, so a topological order). ZeRO-1's update of the large weight
 * whose reduce-scatter started first (the CNN's fc1) so runs as soon as that
 * reduce-scatter ends, and its all-gather starts right after it, instead of
 * after the updates of later buckets the device would wait for first. A node
 * that waits for nothing goes first, unless it feeds only nodes that wait: it
 * goes with the earliest of them (memory: the update's block slice of each
 * weight stays next to its update). The worker ends collectives in start
 * order, so a node of a later collective could only wait longer. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h"

typedef struct {
  const ts_graph *g;
  const opt_users *u;
  const bool *eager;
  bool *done;
  int32_t *order;
  int n;
} sched;

static bool ready(const sched *s, int id) {
  const ts_node *n = &s->g->nodes[id];
  for (int k = 0; k < n->n_in; k++)
    if (!s->done[n->in[k]]) return false;
  return true;
}

/* Emits id, then every eager user it made ready (and theirs). */
static void emit(sched *s, int id) {
  s->done[id] = true;
  s->order[s->n++] = id;
  for (int k = s->u->off[id]; k < s->u->off[id + 1]; k++) {
    int v = s->u->users[k];
    if (s->eager[v] && !s->done[v] && ready(s, v)) emit(s, v);
  }
}

static bool startable(ts_op op) {
  return op == TS_OP_ALL_REDUCE || op == TS_OP_ALL_GATHER || op == TS_OP_REDUCE_SCATTER;
}

/* Reorders order[] after its last collective of key -1 by key (see the top):
 * key[v] = the position in order of the latest collective v depends on, -1
 * for none. key: n entries of scratch. */
static int tail_by_collective(const ts_graph *g, const opt_users *u, int32_t *order, int32_t *key) {
  int n = g->n_nodes, tail = -1;
  int32_t *pos = malloc(((size_t)n + 1) * sizeof *pos), *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
  if (!pos || !tmp) {
    free(pos);
    free(tmp);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
  }
  for (int p = 0; p < n; p++) pos[order[p]] = p;
  for (int p = 0; p < n; p++) { /* operands come first in order */
    const ts_node *nd = &g->nodes[order[p]];
    int32_t k = -1;
    for (int i = 0; i < nd->n_in; i++) {
      int in = nd->in[i];
      int32_t ki = startable(g->nodes[in].op) ? pos[in] : key[in];
      if (ki > k) k = ki;
    }
    key[order[p]] = k;
    if (k < 0 && startable(nd->op)) tail = p + 1;
  }
  /* a node of the tail that waits for nothing but feeds only nodes that wait
   * goes with the earliest of them (the update's slice of a weight stays next
   * to its update: hoisting every such slice would hold them all at once) */
  for (int p = n - 1; p >= tail && tail > 0; p--) {
    int v = order[p];
    ts_op op = g->nodes[v].op; /* inputs keep their order: it numbers them */
    if (key[v] >= 0 || startable(op) || op == TS_OP_INPUT || op == TS_OP_CONSTANT || u->n_out[v] ||
        u->off[v + 1] == u->off[v])
      continue;
    int32_t k = INT32_MAX;
    for (int j = u->off[v]; j < u->off[v + 1]; j++) k = key[u->users[j]] < k ? key[u->users[j]] : k;
    key[v] = k; /* -1 when one user waits for nothing */
  }
  if (tail > 0 && tail < n) { /* a stable counting sort by key + 1: -1 first, then by collective position */
    int32_t *at = pos; /* pos is done with: at[k + 1] = where key k's nodes go */
    memset(at, 0, ((size_t)n + 1) * sizeof *at);
    for (int p = tail; p < n; p++) at[key[order[p]] + 1]++;
    for (int k = 0, sum = 0; k <= n; k++) {
      int c = at[k];
      at[k] = sum;
      sum += c;
    }
    for (int p = tail; p < n; p++) tmp[at[key[order[p]] + 1]++] = order[p];
    memcpy(order + tail, tmp, (size_t)(n - tail) * sizeof *tmp);
  }
  free(pos);
  free(tmp);
  return 0;
}

ts_graph *opt_schedule(const ts_graph *g, int *changed) {
  int n = g->n_nodes;
  opt_users u;
  if (opt_users_build(g, &u) < 0) return NULL;
  bool *eager = calloc((size_t)n + 1, sizeof *eager), *done = calloc((size_t)n + 1, sizeof *done);
  int32_t *order = malloc(((size_t)n + 1) * sizeof *order), *map = malloc(((size_t)n + 1) * sizeof *map);
  ts_graph *dst = NULL;
  if (!eager || !done || !order || !map) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
    goto out;
  }
  /* users come after their operands: decide from the last node back */
  for (int i = n - 1; i >= 0; i--) {
    ts_op op = g->nodes[i].op;
    if (ir_op_is_collective(op)) {
      eager[i] = true;
    } else if ((op == TS_OP_RESHAPE || op == TS_OP_CONCAT) && !u.n_out[i] && u.off[i + 1] > u.off[i]) {
      eager[i] = true;
      for (int k = u.off[i]; k < u.off[i + 1] && eager[i]; k++) eager[i] = eager[u.users[k]];
    }
  }
  /* the weight gathers in node order (pf), each with the node before which
   * it is pulled (anchor): the first user of the gather before it (0: the
   * start; INT32_MAX: never pulled, it stays where its input is) */
  int32_t *pf = malloc(((size_t)n + 1) * sizeof *pf), *anchor = malloc(((size_t)n + 1) * sizeof *anchor);
  if (!pf || !anchor) {
    free(pf);
    free(anchor);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
    goto out;
  }
  int n_pf = 0;
  int32_t prev_first = 0; /* the first user of the gather before */
  for (int i = 0; i < n; i++) {
    const ts_node *nd = &g->nodes[i];
    if (nd->op != TS_OP_ALL_GATHER || nd->n_in != 1 || g->nodes[nd->in[0]].op != TS_OP_INPUT) continue;
    pf[n_pf] = i;
    anchor[n_pf++] = prev_first;
    prev_first = INT32_MAX;
    for (int k = u.off[i]; k < u.off[i + 1]; k++)
      if (u.users[k] < prev_first) prev_first = u.users[k];
  }
  sched s = {g, &u, eager, done, order, 0};
  int next = 0, cursor = 0; /* inputs before `cursor` are emitted */
  for (int i = 0; i < n; i++) {
    for (; next < n_pf && anchor[next] <= i; next++) { /* pull the gathers due before node i */
      /* inputs are numbered in node order: the ones before the gather's go first */
      for (int in = g->nodes[pf[next]].in[0]; cursor <= in; cursor++)
        if (g->nodes[cursor].op == TS_OP_INPUT && !done[cursor]) emit(&s, cursor); /* the gather too (eager) */
      if (!done[pf[next]] && ready(&s, pf[next])) emit(&s, pf[next]);
    }
    if (!done[i]) emit(&s, i);
  }
  free(pf);
  free(anchor);
  if (tail_by_collective(g, &u, order, map) < 0) goto out; /* map: scratch here */
  int moved = 0;
  for (int i = 0; i < n; i++) moved += order[i] != i;
  if (changed) *changed = moved;
  if (!(dst = ts_graph_new())) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling");
    goto out;
  }
  for (int i = 0; i < n; i++) map[order[i]] = opt_copy_node(dst, g, order[i], map);
  if (opt_set_outputs(dst, g, map) < 0) {
    ts_graph_free(dst);
    dst = NULL;
  }
out:
  opt_users_free(&u);
  free(eager);
  free(done);
  free(order);
  free(map);
  return dst;
}
