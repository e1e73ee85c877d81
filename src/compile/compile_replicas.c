/* compile_replicas.c — compiling a replica program (classic data parallel,
 * ts_compile_options.replicas): every device of this process gets its own
 * program with the replica all-reduces' group resolved to all devices of the
 * job. No shardings: every buffer holds each device's own copy — except,
 * with ts_compile_options.shard_update, the optimizer state of the weights.
 *
 * Sharded update (PyTorch's ZeroRedundancyOptimizer on DDP): the gradients
 * are averaged as before (the program's own bucketed all-reduces), then
 * replica r of N computes the update of block r of each weight only (its
 * dim `d`, the first that N divides), with block r of its optimizer state
 * (the state buffers are sharded over the replicas: 1/N of them per device),
 * and the new weight is all-gathered. Each element of the new weight and
 * state goes through the same operations as in the replicated update, so the
 * values are bit for bit those of every replica updating everything
 * (tests/mpi_ddp_zero.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/cache.h" /* the optimized program through the compile cache */
#include "compile/compile.h"
#include "opt/opt.h"
#include "spmd/spmd_internal.h" /* replica groups */

/* Records each collective of a device program like the partitioner records
 * its collectives (tools and metrics list them). */
static int record(ts_executable *e, const ts_graph *opt) {
  for (int i = 0; i < opt->n_nodes; i++) {
    const ts_node *n = &opt->nodes[i];
    if (!ir_op_is_collective(n->op)) continue;
    /* bytes (ts_collective_info): of the operand; an all-gather's of its result */
    const ts_node *b = n->op == TS_OP_REDUCE_SCATTER ? &opt->nodes[n->in[0]] : n;
    if (e->colls.n == e->colls.cap) {
      int cap = e->colls.cap ? 2 * e->colls.cap : 8;
      ts_collective_info *v = realloc(e->colls.v, (size_t)cap * sizeof *v);
      if (!v) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
      e->colls.v = v;
      e->colls.cap = cap;
    }
    e->colls.v[e->colls.n++] = (ts_collective_info){
        .kind = n->op == TS_OP_ALL_GATHER       ? TS_COLLECTIVE_ALL_GATHER
                : n->op == TS_OP_REDUCE_SCATTER ? TS_COLLECTIVE_REDUCE_SCATTER
                                                : TS_COLLECTIVE_ALL_REDUCE,
        .mesh_axes = 0,
        .group_size = e->client->num_devices,
        .bytes = (size_t)ts_shape_numel(b->rank, b->shape) * ts_dtype_size(b->dtype), .cause = i,
        .cause_op = ir_op_name(n->op)};
  }
  return 0;
}

/* ---- the sharded update ---- */

/* Per input of the user's graph: the dim its update is split on (-1: not
 * split); `state` for optimizer state (a block-shaped input per device). */
typedef struct {
  int *dim;    /* (n_inputs) */
  bool *state; /* (n_inputs) */
  int *weight; /* (n_inputs) for a state: the input index of its weight */
} zero_plan;

static int input_of_name(const ts_graph *g, const char *name) {
  for (int i = 0; i < g->n_inputs; i++) {
    const ts_node *n = &g->nodes[g->inputs[i]];
    if (n->name && strcmp(n->name, name) == 0) return i;
  }
  return -1;
}

static bool aliased(const ts_graph *g, int input) {
  for (int k = 0; g->alias && k < g->n_outputs; k++)
    if (g->alias[k] == input) return true;
  return false;
}

static bool same_shape(const ts_node *a, const ts_node *b) {
  return a->rank == b->rank && memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) == 0;
}

/* Every user of node t is an elementwise op of t's shape (the optimizer's). */
static bool only_elementwise_users(const ts_graph *g, ts_tensor t) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == t && !(ir_op_is_elementwise(n->op) && same_shape(n, &g->nodes[t]))) return false;
  }
  return true;
}

/* Which inputs the update splits: weights (rank >= 2, min_bytes or more,
 * updated in place, a dim that n divides) and their optimizer state ("<weight>.exp_avg",
 * ".exp_avg_sq", ".momentum_buffer": src/nn/optim.c's names), when the state
 * is read by elementwise ops only. Returns the number of weights split. */
static int zero_plan_make(const ts_graph *g, int n, size_t min_bytes, zero_plan *z) {
  static const char *const suffix[] = {".exp_avg", ".exp_avg_sq", ".momentum_buffer"};
  int count = 0;
  for (int i = 0; i < g->n_inputs; i++) z->dim[i] = -1, z->state[i] = false, z->weight[i] = -1;
  for (int i = 0; i < g->n_inputs; i++) {
    const ts_node *w = &g->nodes[g->inputs[i]];
    if (!w->name || w->rank < 2 || !aliased(g, i) ||
        (size_t)ts_shape_numel(w->rank, w->shape) * ts_dtype_size(w->dtype) < min_bytes)
      continue;
    bool is_state = false;
    size_t len = strlen(w->name);
    for (int k = 0; k < 3; k++) {
      size_t s = strlen(suffix[k]);
      is_state |= len > s && strcmp(w->name + len - s, suffix[k]) == 0;
    }
    if (is_state) continue;
    int d = -1;
    for (int k = 0; d < 0 && k < w->rank; k++)
      if (w->shape[k] % n == 0) d = k;
    if (d < 0) continue;
    bool ok = true;
    int states[3], ns = 0;
    for (int k = 0; k < 3 && ok; k++) {
      char name[600];
      if ((size_t)snprintf(name, sizeof name, "%s%s", w->name, suffix[k]) >= sizeof name) continue;
      int s = input_of_name(g, name);
      if (s < 0) continue;
      const ts_node *sn = &g->nodes[g->inputs[s]];
      ok = same_shape(sn, w) && sn->dtype == w->dtype && aliased(g, s) && only_elementwise_users(g, g->inputs[s]);
      states[ns++] = s;
    }
    if (!ok) continue;
    z->dim[i] = d;
    for (int k = 0; k < ns; k++) z->dim[states[k]] = d, z->state[states[k]] = true, z->weight[states[k]] = i;
    count++;
  }
  return count;
}

/* Builder of block r (of n, along dim d) of full-shape values. */
typedef struct {
  ts_graph *g;
  int d, r, n;
  const int64_t *full; /* the weight's shape */
  int rank;
  int32_t *memo;       /* (g->n_nodes at the start) block id per node, or -1 */
  int n_memo;
  struct rs_fix *fix;  /* the reduce-scatters emitted, for rs_finish */
  int *n_fix, cap_fix;
} blk_ctx;

/* A gradient's reduce-scatter that replaced all-reduce + slice: `full` is
 * the averaged full gradient it stands for (the replica all-reduce itself, or
 * a member of a packed bucket: reshape(slice(all_reduce(concat(..))))); for
 * a member, `cat`/`piece` name its operand of the bucket's concat. */
struct rs_fix {
  int32_t rs, full, ar, cat, piece;
  int d, r, n;
};

static void block_shape(const blk_ctx *b, int64_t *shape) {
  memcpy(shape, b->full, (size_t)b->rank * sizeof *shape);
  shape[b->d] /= b->n;
}

/* Static slice of block r of node t (full shape). */
static ts_tensor blk_slice(blk_ctx *b, ts_tensor t) {
  const ts_node *x = &b->g->nodes[t];
  if (x->rank != b->rank || memcmp(x->shape, b->full, (size_t)x->rank * sizeof *x->shape) != 0) {
    set_error_code(TS_ERR_INTERNAL, "compile: sharded update: node %d (%s) is not shaped like its weight", t,
                   ir_op_name(x->op));
    return TS_NONE;
  }
  ts_attr a = {0};
  for (int k = 0; k < x->rank; k++) a.start[k] = 0, a.limit[k] = x->shape[k], a.stride[k] = 1;
  int64_t k = x->shape[b->d] / b->n;
  a.start[b->d] = k * b->r;
  a.limit[b->d] = k * (b->r + 1);
  int64_t shape[TS_MAX_RANK];
  block_shape(b, shape);
  return ir_append(b->g, TS_OP_SLICE, x->dtype, x->rank, shape, 1, &t, &a);
}

static ts_collective *all_members(int n) {
  ts_collective *c = malloc(sizeof *c);
  if (c && !(c->ids = malloc((size_t)n * sizeof *c->ids))) free(c), c = NULL;
  if (!c) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    return NULL;
  }
  c->n = n;
  for (int m = 0; m < n; m++) c->ids[m] = m;
  return c;
}

/* Block r of the averaged gradient t, when t is a replica all-reduce of a
 * full-shaped value or a member of a packed bucket (src/nn/ddp.c): a
 * reduce-scatter of the unreduced gradient over the replicas (each element
 * reduced over the same members in the same order as by the all-reduce:
 * comm.c), recorded for rs_finish. TS_NONE without error: not a gradient. */
static ts_tensor blk_grad(blk_ctx *b, ts_tensor t) {
  const ts_graph *g = b->g;
  const ts_node *x = &g->nodes[t];
  int32_t src = -1, ar = -1, cat = -1, piece = -1;
  if (replica_is_all(x)) {
    src = x->in[0], ar = t;
  } else if (x->op == TS_OP_RESHAPE) {
    const ts_node *sl = &g->nodes[x->in[0]];
    if (sl->op != TS_OP_SLICE || sl->rank != 1 || sl->attr.stride[0] != 1) return TS_NONE;
    const ts_node *a = &g->nodes[sl->in[0]];
    if (!replica_is_all(a) || a->rank != 1) return TS_NONE;
    const ts_node *c = &g->nodes[a->in[0]];
    if (c->op != TS_OP_CONCAT || c->rank != 1) return TS_NONE;
    int64_t off = 0;
    for (int k = 0; k < c->n_in && piece < 0; k++) {
      const ts_node *p = &g->nodes[c->in[k]];
      if (off == sl->attr.start[0] && p->shape[0] == sl->shape[0] && p->op == TS_OP_RESHAPE) piece = k;
      else off += p->shape[0];
    }
    if (piece < 0) return TS_NONE;
    src = g->nodes[c->in[piece]].in[0], ar = sl->in[0], cat = a->in[0];
  } else {
    return TS_NONE;
  }
  const ts_node *s = &g->nodes[src];
  if (s->rank != b->rank || memcmp(s->shape, b->full, (size_t)s->rank * sizeof *s->shape) != 0 ||
      s->dtype != x->dtype)
    return TS_NONE;
  if (*b->n_fix == b->cap_fix) {
    set_error_code(TS_ERR_INTERNAL, "compile: sharded update: too many gradient reduce-scatters");
    return -2;
  }
  ts_attr at = {0};
  at.axis = b->d;
  at.reduce = g->nodes[ar].attr.reduce;
  if (!(at.coll = all_members(b->n))) return -2;
  int64_t shape[TS_MAX_RANK];
  block_shape(b, shape);
  ts_dtype dt = x->dtype;
  ts_tensor r = ir_append(b->g, TS_OP_REDUCE_SCATTER, dt, b->rank, shape, 1, &src, &at);
  if (r == TS_NONE) return -2;
  b->fix[(*b->n_fix)++] = (struct rs_fix){r, t, ar, cat, piece, b->d, b->r, b->n};
  return r;
}

/* Block r of node t: elementwise ops rebuilt on blocks of their operands,
 * broadcasts of one value and splat constants rebuilt block-shaped, anything
 * else sliced. */
static ts_tensor blk(blk_ctx *b, ts_tensor t) {
  if (t < b->n_memo && b->memo[t] >= 0) return b->memo[t];
  const ts_node *x = &b->g->nodes[t];
  int64_t shape[TS_MAX_RANK];
  block_shape(b, shape);
  ts_tensor r = TS_NONE;
  bool full = x->rank == b->rank && memcmp(x->shape, b->full, (size_t)x->rank * sizeof *x->shape) == 0;
  if (full && ir_op_is_elementwise(x->op) && x->n_in <= 3) {
    int32_t in[3];
    int n_in = x->n_in;
    ts_op op = x->op;
    ts_dtype dt = x->dtype;
    ts_attr a = x->attr;
    a.fused = NULL, a.coll = NULL;
    for (int k = 0; k < n_in; k++)
      if ((in[k] = blk(b, b->g->nodes[t].in[k])) == TS_NONE) return TS_NONE;
    r = ir_append(b->g, op, dt, b->rank, shape, n_in, in, &a);
  } else if (full && x->op == TS_OP_BROADCAST && ts_shape_numel(b->g->nodes[x->in[0]].rank,
                                                                   b->g->nodes[x->in[0]].shape) == 1) {
    ts_attr a = x->attr;
    int32_t in = x->in[0];
    r = ir_append(b->g, TS_OP_BROADCAST, x->dtype, b->rank, shape, 1, &in, &a);
  } else if (full && x->op == TS_OP_CONSTANT && !x->data) {
    ts_attr a = x->attr;
    r = ir_append(b->g, TS_OP_CONSTANT, x->dtype, b->rank, shape, 0, NULL, &a);
  } else if (full && (r = blk_grad(b, t)) != TS_NONE) {
    if (r == -2) return TS_NONE;
  } else {
    r = blk_slice(b, t);
  }
  if (r != TS_NONE && t < b->n_memo) b->memo[t] = r;
  return r;
}

/* Replaces a SLICE of a state input (now block-shaped) by the input itself. */
static ts_tensor drop_state_slices(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  (void)dst;
  const bool *shrunk = user; /* per node of src */
  const ts_node *n = &src->nodes[id];
  if (n->op == TS_OP_SLICE && shrunk[n->in[0]]) return map[n->in[0]];
  return OPT_KEEP;
}

/* Turns reduce-scatter f back into block r of its full gradient (the
 * gradient is read elsewhere too, so it is all-reduced anyway). */
static void rs_to_slice(ts_graph *w, const struct rs_fix *f) {
  ts_node *x = &w->nodes[f->rs];
  free(x->attr.coll->ids);
  free(x->attr.coll);
  x->attr = (ts_attr){0};
  for (int k = 0; k < x->rank; k++) x->attr.start[k] = 0, x->attr.limit[k] = x->shape[k], x->attr.stride[k] = 1;
  int64_t blk = x->shape[f->d];
  x->attr.start[f->d] = blk * f->r;
  x->attr.limit[f->d] = blk * (f->r + 1);
  x->op = TS_OP_SLICE;
  x->in[0] = f->full;
}

/* A collective no longer read (a gradient's all-reduce that its
 * reduce-scatter replaced) as a plain reshape, so that DCE drops it (it
 * keeps every collective: peers wait for them; every replica drops the same). */
static void drop_collective(ts_graph *w, int id) {
  ts_node *x = &w->nodes[id];
  if (x->attr.coll) free(x->attr.coll->ids);
  free(x->attr.coll);
  x->attr = (ts_attr){0};
  x->op = TS_OP_RESHAPE;
}

/* After the outputs were rewritten: a gradient whose full average is no
 * longer read leaves its bucket (the bucket's concat, all-reduce and its
 * members' slices shrink: a bucket is reduced elementwise, so the other
 * members' values do not change); one still read keeps the all-reduce and
 * its reduce-scatter becomes a slice of it (never more bytes than before). */
static int rs_finish(ts_graph *w, struct rs_fix *fix, int n_fix) {
  if (!n_fix) return 0;
  int nn = w->n_nodes;
  bool *live = calloc((size_t)nn + 1, sizeof *live);
  int64_t *off = NULL;
  bool *gone = NULL;
  if (!live) return error_oom("compile: sharding the update", (size_t)nn);
  for (int k = 0; k < w->n_outputs; k++) live[w->outputs[k]] = true;
  for (int i = nn - 1; i >= 0; i--)
    for (int k = 0; live[i] && k < w->nodes[i].n_in; k++) live[w->nodes[i].in[k]] = true;
  int rc = 0;
  for (int f = 0; f < n_fix; f++) {
    if (!live[fix[f].rs]) { /* unread: a dead slice, not a collective DCE would keep */
      rs_to_slice(w, &fix[f]);
      continue;
    }
    if (live[fix[f].full]) { rs_to_slice(w, &fix[f]); continue; }
    if (fix[f].cat == -1) { /* a lone all-reduce: read no more */
      if (w->nodes[fix[f].ar].op == TS_OP_ALL_REDUCE) drop_collective(w, fix[f].ar);
      continue;
    }
    int cat = fix[f].cat, ar = fix[f].ar;
    if (cat == -2) continue; /* this bucket is done */
    /* every removal from this bucket at once */
    ts_node *c = &w->nodes[cat];
    free(off), free(gone);
    off = malloc(((size_t)c->n_in + 1) * sizeof *off);
    gone = calloc((size_t)c->n_in + 1, sizeof *gone);
    if (!off || !gone) {
      rc = error_oom("compile: sharding the update", (size_t)c->n_in);
      break;
    }
    int n_gone = 0;
    for (int g = f; g < n_fix; g++)
      if (fix[g].cat == cat && live[fix[g].rs] && !live[fix[g].full] && !gone[fix[g].piece])
        gone[fix[g].piece] = true, n_gone++;
    for (int g = f; g < n_fix; g++)
      if (fix[g].cat == cat) fix[g].cat = -2;
    /* the live slices of the all-reduce must each be one kept member */
    int64_t o = 0;
    for (int k = 0; k < c->n_in; k++) off[k] = o, o += w->nodes[c->in[k]].shape[0];
    off[c->n_in] = o;
    bool ok = true;
    for (int i = ar + 1; ok && i < nn; i++) {
      const ts_node *u = &w->nodes[i];
      for (int k = 0; ok && k < u->n_in; k++) {
        if (u->in[k] != ar || !live[i]) continue;
        int p = -1;
        if (u->op == TS_OP_SLICE)
          for (int q = 0; q < c->n_in && p < 0; q++)
            if (off[q] == u->attr.start[0] && off[q + 1] == u->attr.limit[0]) p = q;
        ok = p >= 0 && !gone[p];
      }
    }
    if (!ok) { /* keep the bucket whole: slices of it instead */
      for (int g = 0; g < n_fix; g++)
        if (fix[g].ar == ar && live[fix[g].rs] && !live[fix[g].full]) rs_to_slice(w, &fix[g]);
      continue;
    }
    if (n_gone == c->n_in) { /* every member left: the bucket is gone */
      drop_collective(w, ar);
      continue;
    }
    /* the new layout: off[q] - what was removed before member q */
    int n_old = c->n_in, kept = 0;
    int64_t removed = 0;
    for (int q = 0; q < n_old; q++) {
      int64_t len = off[q + 1] - off[q];
      for (int i = ar + 1; i < nn; i++) { /* this member's slice moves */
        ts_node *u = &w->nodes[i];
        if (!gone[q] && live[i] && u->op == TS_OP_SLICE && u->in[0] == ar && u->attr.start[0] == off[q]) {
          u->attr.start[0] = off[q] - removed;
          u->attr.limit[0] = off[q] - removed + len;
        }
      }
      if (gone[q]) removed += len;
      else c->in[kept++] = c->in[q];
    }
    c->n_in = kept;
    c->shape[0] = off[n_old] - removed;
    w->nodes[ar].shape[0] = off[n_old] - removed;
  }
  free(live), free(off), free(gone);
  return rc;
}

/* The program of replica r of n with the sharded update (plan z), or NULL. */
static ts_graph *zero_program(const ts_graph *g, const zero_plan *z, int r, int n) {
  ts_graph *w = opt_rebuild(g, NULL, NULL, NULL), *w2 = NULL, *out = NULL;
  int32_t *memo = NULL;
  bool *shrunk = NULL;
  struct rs_fix *fix = NULL;
  int n_fix = 0;
  if (!w) return NULL;
  int n0 = w->n_nodes;
  if (!(memo = malloc((size_t)n0 * sizeof *memo)) || !(fix = malloc(((size_t)n0 + 1) * sizeof *fix))) {
    error_oom("compile: sharding the update", (size_t)n0 * sizeof *memo);
    goto done;
  }
  for (int i = 0; i < g->n_inputs; i++) {
    if (z->dim[i] < 0 || z->state[i]) continue;
    const ts_node *wn = &w->nodes[w->inputs[i]];
    int64_t full[TS_MAX_RANK];
    memcpy(full, wn->shape, sizeof full);
    blk_ctx b = {w, z->dim[i], r, n, full, wn->rank, memo, n0, fix, &n_fix, n0 + 1};
    for (int k = 0; k < n0; k++) memo[k] = -1;
    for (int k = 0; k < w->n_outputs; k++) {
      int a = w->alias[k];
      if (a < 0 || (a != i && z->weight[a] != i)) continue;
      ts_tensor v = blk(&b, w->outputs[k]);
      if (v == TS_NONE) goto done;
      if (a == i) { /* the weight: all-gathered from every replica's block */
        ts_attr at = {0};
        at.axis = b.d;
        if (!(at.coll = malloc(sizeof *at.coll)) || !(at.coll->ids = malloc((size_t)n * sizeof *at.coll->ids))) {
          free(at.coll);
          set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
          goto done;
        }
        at.coll->n = n;
        for (int m = 0; m < n; m++) at.coll->ids[m] = m;
        ts_dtype dt = w->nodes[v].dtype;
        if ((v = ir_append(w, TS_OP_ALL_GATHER, dt, b.rank, full, 1, &v, &at)) == TS_NONE) goto done;
      }
      w->outputs[k] = v;
    }
  }
  if (rs_finish(w, fix, n_fix) < 0) goto done;
  /* the replicated update is dead now: drop it, then shrink the state inputs
   * to their blocks (only this replica's block is ever read or written) */
  if (!(w2 = opt_dce(w, NULL))) goto done;
  if (!(shrunk = calloc((size_t)w2->n_nodes + 1, sizeof *shrunk))) {
    error_oom("compile: sharding the update", (size_t)w2->n_nodes);
    goto done;
  }
  for (int i = 0; i < w2->n_inputs; i++) {
    if (!z->state[i]) continue;
    ts_node *s = &w2->nodes[w2->inputs[i]];
    s->shape[z->dim[i]] /= n;
    shrunk[w2->inputs[i]] = true;
  }
  out = opt_rebuild(w2, drop_state_slices, shrunk, NULL);
done:
  free(memo);
  free(fix);
  free(shrunk);
  ts_graph_free(w);
  ts_graph_free(w2);
  return out;
}

/* The state inputs' shardings: dim d split over the N replicas, block r on
 * device r (a 1-D mesh of every device). NULL entries: replicated. */
static int zero_shardings(ts_executable *e, const zero_plan *z, int n) {
  const ts_graph *g = e->g;
  if (!(e->in_sh = calloc((size_t)g->n_inputs + 1, sizeof *e->in_sh)) ||
      !(e->out_sh = calloc((size_t)g->n_outputs + 1, sizeof *e->out_sh)))
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
  int64_t size = n;
  const char *names[1] = {"replica"};
  ts_mesh *m = ts_mesh_new(1, &size, names, 0, NULL);
  if (!m) return -1;
  int rc = 0;
  for (int i = 0; i < g->n_inputs && rc == 0; i++) {
    if (!z->state[i]) continue;
    const ts_node *t = &g->nodes[g->inputs[i]];
    ts_partition_spec s;
    if (ts_partition_spec_init(&s, t->rank) < 0 || ts_partition_spec_add_axis(&s, z->dim[i], 0) < 0 ||
        !(e->in_sh[i] = ts_sharding_new(m, &s, t->rank)))
      rc = -1;
  }
  for (int k = 0; k < g->n_outputs && rc == 0; k++) {
    int a = g->alias ? g->alias[k] : -1;
    if (a >= 0 && e->in_sh[a] && !(e->out_sh[k] = ts_sharding_clone(e->in_sh[a]))) rc = -1;
  }
  ts_mesh_free(m);
  return rc;
}

ts_executable *compile_replicas(ts_client *c, const ts_graph *g, const ts_compile_options *opts) {
  for (int i = 0; g && i < g->n_nodes; i++)
    if (g->nodes[i].sharding || g->nodes[i].manual) {
      set_error("compile: node %d has a sharding or is in a manual region, but a replica program "
                   "(ts_compile_options.replicas) is not partitioned", i);
      return NULL;
    }
  int n = c->num_devices;
  zero_plan z = {0};
  bool zero = opts && opts->shard_update && n > 1 && g;
  if (zero) {
    size_t k = (size_t)g->n_inputs + 1;
    if (!(z.dim = malloc(k * sizeof *z.dim)) || !(z.state = malloc(k * sizeof *z.state)) ||
        !(z.weight = malloc(k * sizeof *z.weight))) {
      free(z.dim), free(z.state), free(z.weight);
      set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
      return NULL;
    }
    zero = zero_plan_make(g, n, opts->shard_update_min_bytes ? opts->shard_update_min_bytes : (size_t)512 << 10, &z) > 0;
  }
  ts_graph *opt = zero ? NULL : cache_compile_graph(g, opts);
  ts_executable *e = NULL;
  if (!zero && !opt) goto fail;
  e = calloc(1, sizeof *e);
  if (!e || !(e->dev = calloc((size_t)n, sizeof *e->dev))) {
    free(e);
    e = NULL;
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto fail;
  }
  e->client = c;
  e->n_dev = n;
  if (!(e->g = opt_rebuild(g, NULL, NULL, NULL)) || (opt && record(e, opt) < 0)) goto fail;
  if (zero && zero_shardings(e, &z, n) < 0) goto fail;
  for (int d = c->first_local; d < c->first_local + c->num_local; d++) {
    ts_graph *mine;
    if (zero) { /* each replica's program differs (its block): optimized per device */
      ts_graph *local = zero_program(g, &z, d, n);
      mine = local ? cache_compile_graph(local, opts) : NULL;
      ts_graph_free(local);
      if (mine && d == c->first_local && record(e, mine) < 0) {
        ts_graph_free(mine);
        goto fail;
      }
    } else {
      mine = opt_rebuild(opt, NULL, NULL, NULL);
    }
    if (!mine || replica_resolve_groups(mine, n) < 0) {
      ts_graph_free(mine);
      goto fail;
    }
    if (!(e->dev[d] = compile_local(c, d, mine, opts))) goto fail;
  }
  ts_graph_free(opt);
  free(z.dim), free(z.state), free(z.weight);
  return e;
fail:
  ts_graph_free(opt);
  free(z.dim), free(z.state), free(z.weight);
  ts_executable_free(e);
  return NULL;
}
