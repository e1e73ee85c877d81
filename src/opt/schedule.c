/* schedule.c — the schedule pass (opt.h opt_schedule): collectives as early
 * as their operands allow. The executor runs nodes in order and overlaps a
 * started collective with the nodes between it and its first user
 * (runtime/), so the earlier it starts the more work hides it.
 *
 * The node whose result a reduction reads (through its packing), when it is
 * the only one (a gradient reduced alone, not a bucket of several), runs as
 * soon as its operands exist, ahead of the nodes between: fc1's weight
 * gradient before its input gradient, so fc1's reduce-scatter (on the CNN's critical cycle
 * between hosts: gradient, reduction, update, gather, next forward) starts
 * one GEMM earlier.
 *
 * A convolution's weight gradient (conv2d_bwd_filter) is held back to
 * right after the next batch norm statistics all-reduce (stat_all_reduces:
 * at most SCHED_TINY_BYTES, and a convolution's gradient depends on it;
 * under sync-bn or SPMD data/fsdp a round trip to the other replicas) when
 * one is still to come, or to before a node that reads it. The backward
 * pass emits it before the next batch norm's statistics, which do not need
 * it; so the statistics all-reduce starts first and runs while it computes
 * (ResNet-20's 2-replica DDP sync-bn step: 23 all-reduces with a weight
 * gradient before their first user, 21 weight gradients; 3 before;
 * tests/test_sync_bn.c). Between hosts the device then starts that
 * all-reduce instead of calling it in line (runtime/cpu_collective.c
 * cpu_collective_inline). Same nodes, same bits; on one host the calls run
 * in line as before, only the order changed.
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
 * order, so a node of a later collective could only wait longer; but not
 * one that the device calls itself on the small lane between hosts
 * (runtime/cpu_device.c, comm.h comm_wait_lane): ResNet-20's DDP step
 * (sync-bn) starts its 1.05 MB bucket before the first layer's backward,
 * whose batch norm's statistics calls then end within a millisecond, yet
 * that backward is placed after the bucket's updates and so waits for the
 * bucket (run_multihost.sh PROFILE=1, link_gaps, stop 33: device 0 without
 * a kernel from the small call's end to the bucket's, 7-12 ms loaded). So
 * after that sort the tail is sorted again, stable, by the latest
 * collective each node depends on among all but the tiny all-reduces that a
 * convolution's gradient depends on (stat_all_reduces: batch norm statistics
 * in a convnet's step): the first layers' backward goes before the bucket's
 * users. A program without such all-reduces (an MLP, a GPT, the CNN) keeps
 * its order: every collective keys both sorts, the second changes nothing
 * (5e48316 dropped every tiny collective from the keys, which reordered
 * the MLP's single-host steps: tests/predict_calib.sh).
 *
 * Not done, on purpose: starting that update and all-gather before the
 * last bucket's reduction (where the reduce-scatter would have ended under
 * the backward pass still to run). The worker runs collectives in start
 * order, so the small bucket of the convolutions' gradients would then wait
 * for the whole 2.4 MB gather (20 ms at 1 Gbit/s), and their updates, the
 * step's end and the next step's convolutions after it: the cycle from
 * fc1's gradient to its next gradient grows by the convolutions' forward
 * pass instead of shrinking by the backward left after the reduce-scatter.
 * It pays only with a second lane that lets small collectives pass a
 * running large one (bench/run_multihost.sh PROFILE=1, link_cycle, shows
 * the link's idle time after the reduction: most of what such a lane
 * could win, with the update placed where the reduce-scatter ends). All
 * three pieces exist now: the lane between hosts (comm/async.c), the
 * executor's waits per collective (runtime/cpu_device.c, comm.h
 * comm_wait_alone), and net.c's send window with a bounded socket send
 * buffer, without which the small one waited behind every piece of the
 * large one (bench_net_link -m pass at 1 Gbit/s: an 80 KiB all-reduce
 * started 2 ms after a 4.7 MB one took 0.94x the large one's time, 0.17x
 * with them; stop 32). Between processes the update and its all-gather now
 * run on the collective worker as soon as the reduce-scatter ends (update
 * chains: plan/async.c, runtime/cpu_device.c); this schedule is where the
 * device runs them otherwise.
 *
 * Last, the collectives carried into the next step (their result only an
 * output aliased to an input: ZeRO-1's and SPMD data=N's new weights) start
 * in the order that step reads those inputs (order_carried): the worker
 * runs them in start order, and the next step's first layer would wait for
 * every gather started before its own. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h"
#include "util/config.h" /* ENV_INLINE_BYTES_HOSTS */

typedef struct {
  const ts_graph *g;
  const opt_users *u;
  const bool *eager;
  bool *done;
  int32_t *order;
  int n;
  int32_t *held; /* weight gradients held back to the next statistics all-reduce (hold_weight_grad) */
  int n_held;
  const bool *stat; /* stat_all_reduces */
  int tiny_left;    /* of those, not yet emitted */
} sched;

/* A tiny all-reduce: at most the in-line limit between hosts (util/config.h
 * ENV_INLINE_BYTES_HOSTS), where each one is a round trip to the peer
 * rather than bytes on the link. */
#define SCHED_TINY_BYTES ENV_INLINE_BYTES_HOSTS

static bool tiny_all_reduce(const ts_node *n) {
  /* a group of several devices, or every replica: the one id -1 until the
   * replicas are known, after this pass (spmd/replica.c TS_ALL_REPLICAS) */
  bool group = n->attr.coll && (n->attr.coll->n > 1 || (n->attr.coll->n == 1 && n->attr.coll->ids[0] < 0));
  return n->op == TS_OP_ALL_REDUCE && group &&
         ts_shape_numel(n->rank, n->shape) * (int64_t)ts_dtype_size(n->dtype) <= SCHED_TINY_BYTES;
}

/* stat[v]: v is a tiny all-reduce that a convolution's gradient depends on
 * (batch norm's statistics in a convnet's step, forward or backward; not a
 * gradient bucket, which only the update reads): held weight gradients wait
 * for these, and they do not order the tail (see the top). Users come after
 * their operands in node order. */
static void stat_all_reduces(const ts_graph *g, const opt_users *u, bool *stat) {
  int n = g->n_nodes;
  for (int v = n - 1; v >= 0; v--) { /* first: whether a convolution's gradient depends on v */
    stat[v] = false;
    for (int k = u->off[v]; k < u->off[v + 1] && !stat[v]; k++) {
      int w = u->users[k];
      ts_op op = g->nodes[w].op;
      stat[v] = op == TS_OP_CONV_BWD_DATA || op == TS_OP_CONV_BWD_FILTER || stat[w];
    }
  }
  for (int v = 0; v < n; v++) stat[v] = stat[v] && tiny_all_reduce(&g->nodes[v]);
}

static bool ready(const sched *s, int id) {
  const ts_node *n = &s->g->nodes[id];
  for (int k = 0; k < n->n_in; k++)
    if (!s->done[n->in[k]]) return false;
  return true;
}

static void flush_held(sched *s);

/* Emits id, then every eager user it made ready (and theirs); after a
 * statistics all-reduce, the weight gradients held back for it
 * (hold_weight_grad). */
static void emit(sched *s, int id) {
  s->done[id] = true;
  s->order[s->n++] = id;
  if (s->stat && s->stat[id]) {
    s->tiny_left--;
    flush_held(s);
  }
  for (int k = s->u->off[id]; k < s->u->off[id + 1]; k++) {
    int v = s->u->users[k];
    if (s->eager[v] && !s->done[v] && ready(s, v)) emit(s, v);
  }
}

static void flush_held(sched *s) { /* in the order they were held */
  while (s->n_held) {
    int v = s->held[0];
    memmove(s->held, s->held + 1, (size_t)--s->n_held * sizeof *s->held);
    emit(s, v);
  }
}

/* Weight gradients that wait for the next statistics all-reduce (see the top): a
 * convolution's weight gradient feeds only the gradient reduction and the
 * update, never the rest of the backward pass, so it can run while the
 * batch norm statistics' round trip to the other replicas is in flight,
 * instead of before the reduction's operand exists. Node i is held (1)
 * when it is one and a statistics all-reduce is still to come; 0
 * otherwise. A held node goes right after the next one, or before a node
 * that reads it, or at the end. */
static int hold_weight_grad(sched *s, int i) {
  if (s->g->nodes[i].op != TS_OP_CONV_BWD_FILTER || s->tiny_left <= 0 || !s->held) return 0;
  s->held[s->n_held++] = i;
  return 1;
}

/* Before node i: the held nodes it reads. */
static void release_read(sched *s, int i) {
  const ts_node *n = &s->g->nodes[i];
  for (int k = 0; k < n->n_in; k++)
    for (int h = 0; h < s->n_held; h++)
      if (s->held[h] == n->in[k]) {
        int v = s->held[h];
        memmove(s->held + h, s->held + h + 1, (size_t)(--s->n_held - h) * sizeof *s->held);
        emit(s, v);
        break;
      }
}

static bool startable(ts_op op) {
  return op == TS_OP_ALL_REDUCE || op == TS_OP_ALL_GATHER || op == TS_OP_REDUCE_SCATTER;
}

/* The feeders of reductions in node order (see the top): per all-reduce or
 * reduce-scatter, the one node that computes its operand (through eager
 * reshapes and concats), when there is exactly one; a bucket of several
 * gradients starts with its last one anyway. seen, stack: n entries of
 * scratch, seen all -1. Returns the count, written to feed. */
static int reduction_feeders(const ts_graph *g, const bool *eager, int32_t *seen, int32_t *stack, int32_t *feed) {
  int n = g->n_nodes, count = 0;
  for (int c = 0; c < n; c++) {
    ts_op op = g->nodes[c].op;
    if (!eager[c] || (op != TS_OP_ALL_REDUCE && op != TS_OP_REDUCE_SCATTER)) continue;
    int top = 0, producer = -1, producers = 0;
    stack[top++] = c;
    while (top) {
      const ts_node *v = &g->nodes[stack[--top]];
      for (int k = 0; k < v->n_in; k++) {
        int w = v->in[k];
        ts_op wop = g->nodes[w].op;
        if (seen[w] == c || wop == TS_OP_INPUT || wop == TS_OP_CONSTANT) continue;
        seen[w] = c; /* reached from reduction c */
        if (eager[w] && !ir_op_is_collective(wop)) stack[top++] = w;
        else producers++, producer = w;
      }
    }
    if (producers == 1 && !eager[producer]) feed[count++] = producer;
  }
  for (int i = 1; i < count; i++) /* node order: insertion sort */
    for (int k = i; k > 0 && feed[k - 1] > feed[k]; k--) {
      int32_t t = feed[k];
      feed[k] = feed[k - 1];
      feed[k - 1] = t;
    }
  return count;
}

/* key[v] = the position in order (pos) of the latest collective that
 * `keyed` marks which v depends on, -1 for none; a node of the tail that
 * waits for nothing but feeds only nodes that wait goes with the earliest of
 * them (the update's slice of a weight stays next to its update: hoisting
 * every such slice would hold them all at once). tail < 0: the tail is
 * after the last keyed collective of key -1, returned. */
static int tail_key(const ts_graph *g, const opt_users *u, const int32_t *order, const int32_t *pos,
                    const bool *keyed, int tail, int32_t *key) {
  int n = g->n_nodes, last = -1;
  for (int p = 0; p < n; p++) { /* operands come first in order */
    const ts_node *nd = &g->nodes[order[p]];
    int32_t k = -1;
    for (int i = 0; i < nd->n_in; i++) {
      int in = nd->in[i];
      int32_t ki = keyed[in] ? pos[in] : key[in];
      if (ki > k) k = ki;
    }
    key[order[p]] = k;
    if (k < 0 && keyed[order[p]]) last = p + 1;
  }
  if (tail < 0) tail = last;
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
  return tail;
}

/* A stable counting sort of order[tail..n) by key + 1: -1 first, then by
 * collective position. at, tmp: n + 1 entries of scratch. */
static void sort_tail(int n, int tail, const int32_t *key, int32_t *order, int32_t *at, int32_t *tmp) {
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

/* Reorders order[] after its last collective of key -1 by key (see the top),
 * every startable collective keyed; then, stable, by the key of the
 * collectives but the batch norm statistics (stat_all_reduces; the same
 * order where there are none).
 * key: n entries of scratch. */
static int tail_by_collective(const ts_graph *g, const opt_users *u, const bool *stat, int32_t *order,
                              int32_t *key) {
  int n = g->n_nodes;
  int32_t *pos = calloc((size_t)n + 1, sizeof *pos), *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
  int32_t *key2 = malloc(((size_t)n + 1) * sizeof *key2), *at = malloc(((size_t)n + 1) * sizeof *at);
  bool *keyed = calloc((size_t)n + 1, sizeof *keyed);
  if (!pos || !tmp || !key2 || !at || !keyed) {
    free(pos), free(tmp), free(key2), free(at), free(keyed);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
  }
  for (int p = 0; p < n; p++) pos[order[p]] = p;
  for (int v = 0; v < n; v++) keyed[v] = startable(g->nodes[v].op);
  int tail = tail_key(g, u, order, pos, keyed, -1, key);
  for (int v = 0; v < n; v++) keyed[v] = keyed[v] && !stat[v];
  tail_key(g, u, order, pos, keyed, tail, key2);
  if (tail > 0 && tail < n) {
    sort_tail(n, tail, key, order, at, tmp);
    sort_tail(n, tail, key2, order, at, tmp);
  }
  free(pos), free(tmp), free(key2), free(at), free(keyed);
  return 0;
}

/* A startable collective whose result (through reshapes) only leaves the
 * program, as an output aliased to an input (a new weight that an update
 * all-gathers, read by the next step as that input): the input, else -1. */
static int carried_input(const ts_graph *g, const opt_users *u, int c) {
  if (!startable(g->nodes[c].op)) return -1;
  int stack[64], top = 0, input = -1;
  stack[top++] = c;
  while (top) {
    int v = stack[--top];
    for (int k = 0; k < g->n_outputs; k++)
      if (g->outputs[k] == v && g->alias && g->alias[k] >= 0) input = g->alias[k];
    for (int k = u->off[v]; k < u->off[v + 1]; k++) {
      int w = u->users[k];
      if (g->nodes[w].op != TS_OP_RESHAPE || top == 64) return -1; /* read by the program itself */
      stack[top++] = w;
    }
  }
  return input;
}

/* order becomes tmp, a reordering of its n nodes (m placed), or an error
 * naming the pass `what`. */
static int adopt_order(int32_t *order, const int32_t *tmp, int m, int n, const char *what) {
  if (m != n) return set_error("compile: scheduling the %s placed %d of %d nodes", what, m, n);
  memcpy(order, tmp, (size_t)n * sizeof *tmp);
  return 0;
}

/* The collectives carried into the next step (carried_input) start in the
 * order the next step reads their weights (the first user of the aliased
 * input in order[]), not in the order their updates end: else the step's
 * first layer waits for the all-gather of a large late weight (the CNN's
 * fc1 under SPMD data=2) started ahead of its own small one. Each only moves
 * later (to after the one before it in that order), so operands still come
 * first. */
static int order_carried(const ts_graph *g, const opt_users *u, int32_t *order) {
  int n = g->n_nodes, nc = 0, rc = 0;
  int32_t *pos = malloc(((size_t)n + 1) * sizeof *pos), *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
  int32_t *cs = malloc(((size_t)n + 1) * sizeof *cs), *need = malloc(((size_t)n + 1) * sizeof *need);
  bool *move = calloc((size_t)n + 1, sizeof *move);
  if (!pos || !tmp || !cs || !need || !move) {
    rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
    goto out;
  }
  for (int p = 0; p < n; p++) pos[order[p]] = p;
  for (int p = 0; p < n; p++) {
    int c = order[p], in = carried_input(g, u, c);
    if (in < 0) continue;
    move[c] = true;
    int node = g->inputs[in];
    need[c] = INT32_MAX;
    for (int k = u->off[node]; k < u->off[node + 1]; k++)
      if (pos[u->users[k]] < need[c]) need[c] = pos[u->users[k]];
    int j = nc++; /* insertion sort by need, stable: a few dozen weights */
    for (; j > 0 && need[cs[j - 1]] > need[c]; j--) cs[j] = cs[j - 1];
    cs[j] = c;
  }
  if (nc < 2) goto out;
  for (int v = 0; v < n; v++) /* the reshapes of a moved one move with it */
    if (g->nodes[v].op == TS_OP_RESHAPE && move[ir_reshape_base(g, v)]) move[v] = true;
  /* slot: the position after which each goes, never before its own */
  int32_t *slot = need; /* need is done with once sorted */
  for (int i = 0, prev = -1; i < nc; i++) slot[cs[i]] = prev = pos[cs[i]] > prev ? pos[cs[i]] : prev;
  int m = 0, next = 0;
  for (int p = 0; p < n; p++) {
    if (!move[order[p]]) tmp[m++] = order[p];
    for (; next < nc && slot[cs[next]] == p; next++) {
      int c = cs[next];
      tmp[m++] = c;
      for (int v = c + 1; v < n; v++) /* its reshapes, in node order (a topological one) */
        if (g->nodes[v].op == TS_OP_RESHAPE && ir_reshape_base(g, v) == c) tmp[m++] = v;
    }
  }
  rc = adopt_order(order, tmp, m, n, "carried collectives");
out:
  free(pos);
  free(tmp);
  free(cs);
  free(need);
  free(move);
  return rc;
}

/* Tiny values of inputs and constants alone (AdamW's step size and bias
 * corrections: scalars of the step count and the learning rate) go right
 * after their last operand, at the start of the program instead of before
 * the first update: a weight's update can then be handed to the collective
 * worker as soon as the backward pass is done with the weight (plan.h
 * plan_async.chain_of), not after the whole backward pass. */
enum { SCHED_EARLY_NUMEL = 64 };

static int early_values(const ts_graph *g, int32_t *order) {
  int n = g->n_nodes, n_early = 0;
  bool *early = calloc((size_t)n + 1, sizeof *early), *emitted = calloc((size_t)n + 1, sizeof *emitted);
  int32_t *tmp = malloc(((size_t)n + 1) * sizeof *tmp), *list = malloc(((size_t)n + 1) * sizeof *list);
  int rc = 0;
  if (!early || !emitted || !tmp || !list) {
    rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
    goto out;
  }
  for (int i = 0; i < n; i++) { /* operands have smaller ids */
    const ts_node *nd = &g->nodes[i];
    if (nd->op == TS_OP_INPUT || nd->op == TS_OP_CONSTANT || ir_op_is_collective(nd->op) || !nd->n_in ||
        ts_shape_numel(nd->rank, nd->shape) > SCHED_EARLY_NUMEL)
      continue;
    bool e = true;
    for (int k = 0; k < nd->n_in && e; k++) {
      ts_op op = g->nodes[nd->in[k]].op;
      e = early[nd->in[k]] || op == TS_OP_INPUT || op == TS_OP_CONSTANT;
    }
    if (e) early[i] = true, list[n_early++] = i;
  }
  if (!n_early) goto out;
  int m = 0, next = 0; /* list: the early nodes in id order, a topological one */
  for (int p = 0; p <= n; p++) {
    for (bool more = true; more;) { /* the early nodes whose operands are all out */
      more = false;
      for (int e = next; e < n_early; e++) {
        int v = list[e];
        if (emitted[v]) continue;
        bool ready = true;
        for (int k = 0; k < g->nodes[v].n_in && ready; k++) ready = emitted[g->nodes[v].in[k]];
        if (ready) tmp[m++] = v, emitted[v] = more = true;
      }
      while (next < n_early && emitted[list[next]]) next++;
    }
    if (p < n && !early[order[p]]) tmp[m++] = order[p], emitted[order[p]] = true;
  }
  rc = adopt_order(order, tmp, m, n, "early values");
out:
  free(early);
  free(emitted);
  free(tmp);
  free(list);
  return rc;
}

ts_graph *opt_schedule(const ts_graph *g, int *changed) {
  int n = g->n_nodes;
  opt_users u;
  if (opt_users_build(g, &u) < 0) return NULL;
  bool *eager = calloc((size_t)n + 1, sizeof *eager), *done = calloc((size_t)n + 1, sizeof *done);
  bool *stat = calloc((size_t)n + 1, sizeof *stat);
  int32_t *order = malloc(((size_t)n + 1) * sizeof *order), *map = malloc(((size_t)n + 1) * sizeof *map);
  ts_graph *dst = NULL;
  if (!eager || !done || !stat || !order || !map) {
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
  sched s = {g, &u, eager, done, order, 0, malloc(((size_t)n + 1) * sizeof(int32_t)), 0, stat, 0};
  stat_all_reduces(g, &u, stat);
  for (int i = 0; i < n; i++) s.tiny_left += stat[i];
  int32_t *feed = malloc(((size_t)n + 1) * sizeof *feed);
  int32_t *seen = malloc(((size_t)n + 1) * sizeof *seen), *stack = malloc(((size_t)n + 1) * sizeof *stack);
  for (int i = 0; seen && i < n; i++) seen[i] = -1;
  int n_feed = feed && seen && stack ? reduction_feeders(g, eager, seen, stack, feed) : -1;
  free(seen);
  free(stack);
  if (n_feed < 0) {
    free(s.held);
    free(pf);
    free(anchor);
    free(feed);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory scheduling %d nodes", n);
    goto out;
  }
  int next = 0, cursor = 0, first_feed = 0; /* inputs before `cursor` are emitted; feed[..first_feed) too */
  for (int i = 0; i < n; i++) {
    for (int f = first_feed; f < n_feed; f++) /* the reductions' feeders that are ready, ahead of node i */
      if (!done[feed[f]] && ready(&s, feed[f])) emit(&s, feed[f]);
    while (first_feed < n_feed && done[feed[first_feed]]) first_feed++;
    for (; next < n_pf && anchor[next] <= i; next++) { /* pull the gathers due before node i */
      /* inputs are numbered in node order: the ones before the gather's go first */
      for (int in = g->nodes[pf[next]].in[0]; cursor <= in; cursor++)
        if (g->nodes[cursor].op == TS_OP_INPUT && !done[cursor]) emit(&s, cursor); /* the gather too (eager) */
      if (!done[pf[next]] && ready(&s, pf[next])) emit(&s, pf[next]);
    }
    if (done[i]) continue;
    release_read(&s, i); /* may emit i itself: an eager user of a held node */
    if (!done[i] && !hold_weight_grad(&s, i)) emit(&s, i);
  }
  flush_held(&s);
  free(s.held);
  free(pf);
  free(anchor);
  free(feed);
  if (tail_by_collective(g, &u, stat, order, map) < 0) goto out; /* map: scratch here */
  if (order_carried(g, &u, order) < 0) goto out;
  if (early_values(g, order) < 0) goto out;
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
  free(stat);
  free(order);
  free(map);
  return dst;
}
