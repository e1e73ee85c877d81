/* fuse.c — elementwise fusion: chains of elementwise ops become one
 * TS_OP_FUSED node computing them element by element, so no intermediate is
 * materialized.
 *
 * Which ops may join a group is the op table's TS_OPF_FUSIBLE (ops.def).
 *
 * Greedy, from the last node backwards: an elementwise node not yet taken
 * becomes the root (the one result) of a group; a producer joins the group
 * when it is elementwise, has the root's numel, is no graph output and all its
 * users are already in the group (scanning ids downwards makes that decidable
 * in one pass, since users have larger ids). Splat constants become CONSTANT
 * instructions and broadcasts of one element become scalar external inputs,
 * whatever their other users (they cost nothing to duplicate); a broadcast
 * whose operand is a contiguous block of the result's dims (indexed_broadcast)
 * becomes a BROADCAST instruction reading its operand by index, so it is never
 * materialized. A group of one op stays that op, unless it reads such a
 * broadcast. A sum or mean of such a group is fused with it (fused
 * reductions, below); sibling reductions that read the same input are then
 * stacked into one pass (fuse_siblings.c). */
#include <stdlib.h>
#include <string.h>

#include "opt/fuse_internal.h"

static bool splat_instr(const ts_graph *g, ts_tensor t, double *v) {
  return g->nodes[t].dtype != TS_I64 && opt_splat_value(g, t, v);
}

static bool scalar_broadcast(const ts_graph *g, ts_tensor t) {
  const ts_node *n = &g->nodes[t];
  return n->op == TS_OP_BROADCAST && ts_shape_numel(g->nodes[n->in[0]].rank, g->nodes[n->in[0]].shape) == 1;
}

/* A broadcast t into a result of numel elements that a fused program can read
 * from its operand by index: the operand's dims of size > 1 are consecutive
 * result dims of the same sizes, so result element i is operand element
 * (i / inner) % numel(operand) (inner: the product of the result dims after
 * them). Bias vectors, layer-norm statistics, position tables and attention
 * masks are all of this form. Operands of one element stay scalar externals. */
static bool indexed_broadcast(const ts_graph *g, ts_tensor t, int64_t numel, int64_t *inner) {
  const ts_node *n = &g->nodes[t];
  if (n->op != TS_OP_BROADCAST || ts_shape_numel(n->rank, n->shape) != numel) return false;
  const ts_node *src = &g->nodes[n->in[0]];
  int64_t sn = ts_shape_numel(src->rank, src->shape);
  if (sn <= 1 || sn >= numel || n->attr.n_dims != src->rank) return false;
  int last = -1;
  for (int i = 0; i < src->rank; i++) {
    if (src->shape[i] == 1) continue;
    int d = n->attr.dims[i];
    if (src->shape[i] != n->shape[d] || (last >= 0 && d != last + 1)) return false;
    last = d;
  }
  if (last < 0) return false;
  *inner = 1;
  for (int d = last + 1; d < n->rank; d++) *inner *= n->shape[d];
  return true;
}

/* Whether elementwise node t reads an indexed broadcast or a broadcast scalar
 * (then it is worth a fused node even alone: the broadcast is never
 * materialized). */
static bool reads_indexed_broadcast(const ts_graph *g, int t) {
  const ts_node *n = &g->nodes[t];
  int64_t numel = ts_shape_numel(n->rank, n->shape), inner;
  for (int k = 0; k < n->n_in; k++)
    if (indexed_broadcast(g, n->in[k], numel, &inner) || (numel > 1 && scalar_broadcast(g, n->in[k]))) return true;
  return false;
}

/* ---- fused reductions ----
 * A sum or mean of an f32 elementwise group (batch norm's variance of x - m,
 * its gradient's sums of dy * xhat) becomes one FUSED node whose program
 * result is folded by the reduce kernel run by run (kernels/fused.c) instead
 * of being written whole and read back: attr.n_dims, attr.dims and
 * attr.reduce are the reduce's, attr.gshape[0 .. attr.axis) the operand's
 * shape. The reduce kernel asks for contiguous runs as long as the innermost
 * group of equally reduced dims; longer runs stay unfused (each thread
 * buffers one run). */
#define FUSED_REDUCE_MAX_RUN (1 << 16)

static int64_t innermost_run(const ts_node *x, const ts_node *r) {
  bool red[TS_MAX_RANK] = {false};
  for (int i = 0; i < r->attr.n_dims; i++)
    if (r->attr.dims[i] >= 0 && r->attr.dims[i] < x->rank) red[r->attr.dims[i]] = true;
  int64_t run = 1;
  int kind = -1; /* reducedness of the innermost group (size-1 dims skipped) */
  for (int d = x->rank - 1; d >= 0; d--) {
    if (x->shape[d] == 1) continue;
    if (kind >= 0 && kind != (int)red[d]) break;
    kind = red[d];
    run *= x->shape[d];
  }
  return run;
}

bool fuse_reducible(const ts_graph *g, int t) {
  const ts_node *n = &g->nodes[t];
  if (n->op != TS_OP_REDUCE || n->n_in != 1 || n->dtype != TS_F32 || n->attr.n_dims < 1 ||
      (n->attr.reduce != TS_REDUCE_SUM && n->attr.reduce != TS_REDUCE_MEAN))
    return false;
  const ts_node *x = &g->nodes[n->in[0]];
  return x->dtype == TS_F32 && ir_op_has(x->op, TS_OPF_FUSIBLE) && innermost_run(x, n) <= FUSED_REDUCE_MAX_RUN;
}

/* The elements a group's program runs over: its root's, or for a fused
 * reduction its operand's. */
static int64_t group_numel(const ts_graph *g, int root) {
  const ts_node *r = &g->nodes[root];
  if (r->op == TS_OP_REDUCE) r = &g->nodes[r->in[0]];
  return ts_shape_numel(r->rank, r->shape);
}

/* Builds the program of the group rooted at root from members lo..root (a
 * reduction root is no instruction: the program computes its operand). */
static int build_program(const ts_graph *g, fuse_state *s, int root, int lo, int32_t *slot, int32_t *stamp,
                         int32_t *cslot, int32_t *cstamp, int32_t *eslot, int32_t *estamp) {
  int cap = 16, n = 0, n_ext = 0, cap_ext = 8;
  int64_t root_numel = group_numel(g, root), inner = 1;
  ts_fused_instr *ins = malloc((size_t)cap * sizeof *ins);
  int32_t *ext = malloc((size_t)cap_ext * sizeof *ext);
  if (!ins || !ext) goto oom;
  for (int m = lo; m <= root; m++) {
    if (s->group[m] != root || (m == root && g->nodes[m].op == TS_OP_REDUCE)) continue;
    const ts_node *nd = &g->nodes[m];
    int32_t ops[3] = {0, 0, 0};
    for (int k = 0; k < nd->n_in && k < 3; k++) {
      int o = nd->in[k];
      double v;
      if (s->group[o] == root && stamp[o] == root) {
        ops[k] = slot[o];
        continue;
      }
      if (n + 2 > cap) {
        cap *= 2;
        ts_fused_instr *q = realloc(ins, (size_t)cap * sizeof *ins);
        if (!q) goto oom;
        ins = q;
      }
      if (splat_instr(g, o, &v)) {
        if (cstamp[o] != root) {
          memset(&ins[n], 0, sizeof ins[n]);
          ins[n].op = TS_OP_CONSTANT;
          ins[n].dtype = g->nodes[o].dtype;
          ins[n].value = v;
          cstamp[o] = root;
          cslot[o] = n++;
        }
        ops[k] = cslot[o];
        continue;
      }
      if (indexed_broadcast(g, o, root_numel, &inner)) { /* a BROADCAST load of its operand */
        if (cstamp[o] != root) {
          int src = g->nodes[o].in[0];
          if (estamp[src] != root) {
            if (n_ext == cap_ext) {
              cap_ext *= 2;
              int32_t *q = realloc(ext, (size_t)cap_ext * sizeof *ext);
              if (!q) goto oom;
              ext = q;
            }
            estamp[src] = root;
            eslot[src] = n_ext;
            ext[n_ext++] = src;
          }
          if (n + 2 > cap) {
            cap *= 2;
            ts_fused_instr *q = realloc(ins, (size_t)cap * sizeof *ins);
            if (!q) goto oom;
            ins = q;
          }
          memset(&ins[n], 0, sizeof ins[n]);
          ins[n].op = TS_OP_BROADCAST;
          ins[n].dtype = g->nodes[o].dtype;
          ins[n].a = -eslot[src] - 1;
          ins[n].value = (double)inner;
          cstamp[o] = root;
          cslot[o] = n++;
        }
        ops[k] = cslot[o];
        continue;
      }
      if (scalar_broadcast(g, o)) o = g->nodes[o].in[0];
      if (estamp[o] != root) {
        if (n_ext == cap_ext) {
          cap_ext *= 2;
          int32_t *q = realloc(ext, (size_t)cap_ext * sizeof *ext);
          if (!q) goto oom;
          ext = q;
        }
        estamp[o] = root;
        eslot[o] = n_ext;
        ext[n_ext++] = o;
      }
      ops[k] = -eslot[o] - 1;
    }
    if (n + 1 > cap) {
      cap *= 2;
      ts_fused_instr *q = realloc(ins, (size_t)cap * sizeof *ins);
      if (!q) goto oom;
      ins = q;
    }
    memset(&ins[n], 0, sizeof ins[n]);
    ins[n].op = nd->op;
    ins[n].dtype = nd->dtype;
    if (nd->op == TS_OP_COMPARE) ins[n].cmp = nd->attr.cmp;
    ins[n].a = ops[0];
    ins[n].b = ops[1];
    ins[n].c = ops[2];
    stamp[m] = root;
    slot[m] = n++;
  }
  ts_fused *f = malloc(sizeof *f);
  if (!f) goto oom;
  f->n = n;
  f->ins = ins;
  s->prog[root] = f;
  s->ext[root] = ext;
  s->n_ext[root] = n_ext;
  return 0;
oom:
  free(ins);
  free(ext);
  return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory building a fused program");
}

/* Marks producer t as a candidate of the group at root (only elementwise
 * producers can join, so the downward scan stops at the lowest of those). */
static void want(const ts_graph *g, int32_t *wanted, int *min_w, int t, int root) {
  if (!ir_op_has(g->nodes[t].op, TS_OPF_FUSIBLE)) return;
  wanted[t] = root;
  if (t < *min_w) *min_w = t;
}

static int find_groups(const ts_graph *g, const opt_users *u, fuse_state *s) {
  int nn = g->n_nodes;
  int32_t *wanted = malloc((size_t)nn * sizeof *wanted);
  int32_t *scratch = malloc((size_t)nn * 6 * sizeof *scratch);
  if (!wanted || !scratch) {
    free(wanted);
    free(scratch);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory in fusion");
  }
  for (int i = 0; i < nn; i++) wanted[i] = -1;
  int32_t *slot = scratch, *stamp = scratch + nn, *cslot = scratch + 2 * nn, *cstamp = scratch + 3 * nn;
  int32_t *eslot = scratch + 4 * nn, *estamp = scratch + 5 * nn;
  for (int i = 0; i < 6 * nn; i++) scratch[i] = -1;
  int rc = 0;
  for (int root = nn - 1; root >= 0 && rc == 0; root--) {
    const ts_node *r = &g->nodes[root];
    bool red = fuse_reducible(g, root);
    if (s->group[root] >= 0 || !(red || ir_op_has(r->op, TS_OPF_FUSIBLE))) continue;
    int64_t numel = group_numel(g, root);
    s->group[root] = root;
    int lo = root, members = 1, min_w = root;
    for (int k = 0; k < r->n_in; k++) want(g, wanted, &min_w, r->in[k], root);
    for (int i = root - 1; i >= min_w; i--) {
      const ts_node *p = &g->nodes[i];
      if (wanted[i] != root || s->group[i] >= 0 || !ir_op_has(p->op, TS_OPF_FUSIBLE)) continue;
      if (u->n_out[i] || ts_shape_numel(p->rank, p->shape) != numel) continue;
      bool inside = true;
      for (int k = u->off[i]; k < u->off[i + 1] && inside; k++) inside = s->group[u->users[k]] == root;
      if (!inside) continue;
      s->group[i] = root;
      members++;
      lo = i;
      for (int k = 0; k < p->n_in; k++) want(g, wanted, &min_w, p->in[k], root);
    }
    if (members < 2 && (red || !reads_indexed_broadcast(g, root))) {
      s->group[root] = -1;
      continue;
    }
    s->fused_nodes += members;
    rc = build_program(g, s, root, lo, slot, stamp, cslot, cstamp, eslot, estamp);
  }
  free(wanted);
  free(scratch);
  return rc;
}

static ts_tensor fuse_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  fuse_state *s = user;
  if (s->sib[id] >= 0) return fuse_sibling_node(dst, src, id, map, s);
  if (s->group[id] < 0) return OPT_KEEP;
  if (s->group[id] != id) return OPT_DROP;
  const ts_node *n = &src->nodes[id];
  int ne = s->n_ext[id];
  int32_t *in = malloc(((size_t)ne + 1) * sizeof *in);
  if (!in) {
    error_oom("compile: a fused node's operands", ((size_t)ne + 1) * sizeof *in);
    return TS_NONE;
  }
  for (int k = 0; k < ne; k++) in[k] = map[s->ext[id][k]];
  ts_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.fused = s->prog[id];
  s->prog[id] = NULL; /* taken over by the node */
  if (n->op == TS_OP_REDUCE) { /* a fused reduction */
    const ts_node *x = &src->nodes[n->in[0]];
    attr.reduce = n->attr.reduce;
    attr.n_dims = n->attr.n_dims;
    memcpy(attr.dims, n->attr.dims, sizeof attr.dims);
    attr.axis = x->rank;
    memcpy(attr.gshape, x->shape, sizeof attr.gshape);
  }
  ts_tensor t = ir_append(dst, TS_OP_FUSED, n->dtype, n->rank, n->shape, ne, in, &attr);
  free(in);
  return t;
}

/* ---- rewrites before grouping (the same bits, fewer full-size passes) ----
 * 1. ReLU's backward mask reads the ReLU's output.
 * y > 0 (COMPARE GT against a splat 0, or 0 < y) is true exactly when
 * max(y, 0) > 0 (NaN: false either way; -0: false either way), so when the
 * graph also computes r = max(y, 0), the mask reads r instead of y. Then y's
 * only user is the ReLU and y (batch norm's scale-shift output) fuses into it
 * instead of being written, read back and kept alive for the backward pass:
 * one pass and one activation fewer per BN+ReLU, the same bits.
 * 2. sum(neg(x)) -> neg(sum(x)) (and mean), see relu_mask_node.
 * 3. op(broadcast(v), splat) -> broadcast(op(v, splat)), see relu_mask_node.
 * (4. cheap values recomputed by each user and 5. f32 values exact in bf16
 * stored as bf16 follow.) */
static bool splat_zero(const ts_graph *g, ts_tensor t) {
  double v;
  return opt_splat_value(g, t, &v) && v == 0;
}

typedef struct {
  int32_t *relu_of; /* per node y: the first max(y, 0) node, or -1 */
  int32_t *bf16_of; /* per f32 node r: the first convert(r, bf16), or -1 */
  int rewritten;
} relu_mask_state;

static ts_tensor relu_mask_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  relu_mask_state *s = user;
  const ts_node *n = &src->nodes[id];
  if (n->op == TS_OP_REDUCE && n->n_in == 1 && (n->attr.reduce == TS_REDUCE_SUM || n->attr.reduce == TS_REDUCE_MEAN) &&
      ts_dtype_is_float(n->dtype) && src->nodes[n->in[0]].op == TS_OP_NEG && map[src->nodes[n->in[0]].in[0]] >= 0) {
    /* sum(-x) = -sum(x) bit for bit (round to nearest is symmetric): the
     * negation moves to the few outputs and the NEG pass (batch norm's mean
     * gradient) is left without users for DCE */
    int32_t x = map[src->nodes[n->in[0]].in[0]];
    ts_tensor r = ir_append(dst, TS_OP_REDUCE, n->dtype, n->rank, n->shape, 1, &x, &n->attr);
    if (r < 0) return TS_NONE;
    s->rewritten++;
    return ir_append(dst, TS_OP_NEG, n->dtype, n->rank, n->shape, 1, &r, NULL);
  }
  if ((n->op == TS_OP_DIV || n->op == TS_OP_MUL || n->op == TS_OP_ADD || n->op == TS_OP_SUB) && n->n_in == 2) {
    /* op(broadcast(v), splat c) -> broadcast(op(v, c)) (either operand
     * order): batch norm's gradient divides a broadcast per-channel sum by
     * N*H*W; it is done once per channel instead of once per element */
    for (int k = 0; k < 2; k++) {
      const ts_node *b = &src->nodes[n->in[k]];
      if (b->op != TS_OP_BROADCAST || b->n_in != 1) continue;
      const ts_node *v = &src->nodes[b->in[0]];
      double c;
      if (v->dtype != n->dtype || b->dtype != n->dtype ||
          ts_shape_numel(v->rank, v->shape) <= 1 ||
          ts_shape_numel(v->rank, v->shape) >= ts_shape_numel(n->rank, n->shape) ||
          !opt_splat_value(src, n->in[1 - k], &c) || map[b->in[0]] < 0)
        continue;
      int32_t ins[2];
      ins[k] = map[b->in[0]];
      ins[1 - k] = ts_full(dst, n->dtype, v->rank, v->shape, c);
      if (ins[1 - k] < 0) return TS_NONE;
      ts_tensor t = ir_append(dst, n->op, n->dtype, v->rank, v->shape, 2, ins, NULL);
      if (t < 0) return TS_NONE;
      s->rewritten++;
      return ir_append(dst, TS_OP_BROADCAST, n->dtype, n->rank, n->shape, 1, &t, &b->attr);
    }
    return OPT_KEEP;
  }
  if (n->op != TS_OP_COMPARE || n->n_in != 2) return OPT_KEEP;
  int yk = n->attr.cmp == TS_CMP_GT ? 0 : n->attr.cmp == TS_CMP_LT ? 1 : -1;
  if (yk < 0 || !splat_zero(src, n->in[1 - yk])) return OPT_KEEP;
  int32_t y = n->in[yk], r = s->relu_of[y];
  if (r < 0 || r >= id || map[r] < 0 || map[n->in[1 - yk]] < 0) return OPT_KEEP;
  int32_t ins[2];
  ins[yk] = map[r], ins[1 - yk] = map[n->in[1 - yk]];
  int32_t c = s->bf16_of[r];
  if (c >= 0 && c < id && map[c] >= 0) {
    /* mixed precision: the mask reads the bf16 copy of the ReLU output that
     * the next conv consumes, so the f32 ReLU output need not be written nor
     * kept (it differs from y > 0 only for 0 < y <= 2^-134, which round to
     * 0 in bf16 -- PyTorch's autocast takes its mask from bf16 too) */
    const ts_node *cn = &src->nodes[c];
    ts_tensor z = ts_full(dst, TS_BF16, cn->rank, cn->shape, 0.0);
    if (z < 0) return TS_NONE;
    ins[yk] = map[c], ins[1 - yk] = z;
  }
  s->rewritten++;
  return ir_append(dst, TS_OP_COMPARE, n->dtype, n->rank, n->shape, 2, ins, &n->attr);
}

/* *out: the rewritten graph, or NULL when there is nothing to rewrite. */
static int relu_mask_rewrite(const ts_graph *g, ts_graph **out, int *rewritten) {
  relu_mask_state s = {0};
  *rewritten = 0;
  *out = NULL;
  s.relu_of = malloc(((size_t)g->n_nodes + 1) * sizeof *s.relu_of);
  s.bf16_of = malloc(((size_t)g->n_nodes + 1) * sizeof *s.bf16_of);
  if (!s.relu_of || !s.bf16_of) {
    free(s.relu_of), free(s.bf16_of);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory in fusion");
  }
  for (int i = 0; i < g->n_nodes; i++) s.relu_of[i] = s.bf16_of[i] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    if (n->op == TS_OP_CONVERT && n->dtype == TS_BF16 && g->nodes[n->in[0]].dtype == TS_F32 && s.bf16_of[n->in[0]] < 0)
      s.bf16_of[n->in[0]] = i;
  }
  bool any = false;
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    if (n->op != TS_OP_MAX || n->n_in != 2) continue;
    for (int k = 0; k < 2; k++) {
      int32_t y = n->in[k];
      const ts_node *yn = &g->nodes[y];
      if (s.relu_of[y] < 0 && splat_zero(g, n->in[1 - k]) && !splat_zero(g, y) && yn->dtype == n->dtype &&
          yn->rank == n->rank && !memcmp(yn->shape, n->shape, (size_t)n->rank * sizeof *n->shape))
        s.relu_of[y] = i, any = true;
    }
  }
  for (int i = 0; i < g->n_nodes && !any; i++) {
    const ts_node *n = &g->nodes[i];
    any = (n->op == TS_OP_REDUCE && n->n_in == 1 && g->nodes[n->in[0]].op == TS_OP_NEG) ||
          ((n->op == TS_OP_DIV || n->op == TS_OP_MUL || n->op == TS_OP_ADD || n->op == TS_OP_SUB) && n->n_in == 2 &&
           (g->nodes[n->in[0]].op == TS_OP_BROADCAST || g->nodes[n->in[1]].op == TS_OP_BROADCAST));
  }
  if (any && !(*out = opt_rebuild(g, relu_mask_node, &s, NULL))) {
    free(s.relu_of), free(s.bf16_of);
    return -1;
  }
  free(s.relu_of), free(s.bf16_of);
  *rewritten = s.rewritten;
  return 0;
}

/* ---- 4. cheap values recomputed by each user ----
 * A COMPARE whose operands are splats and broadcasts a fused program reads by
 * index (the cross-entropy's iota(C) == label(B) mask over the (B, C)
 * logits) costs next to nothing per element, but with several users (the
 * loss's select and its gradient's) it would be written as a (B, C) bool
 * array and read back by each. Each fusible user gets its own copy instead,
 * which fuses into it: the same values, one full-size write and read fewer
 * per user.
 * Likewise a chain of cheap arithmetic on one full-size value (batch norm's
 * x - B(m), under autocast convert(x) from bf16 first), when every user
 * fuses it (an elementwise op or a fused reduction): each user recomputes it
 * from the source, so it is never written; its users read the source
 * instead (bf16 under autocast: half the bytes) and the source is what stays
 * alive for the backward pass. */
#define COPY_MAX_DEPTH 4

static bool cheap_operand(const ts_graph *g, ts_tensor t, int64_t numel) {
  double v;
  int64_t inner;
  return splat_instr(g, t, &v) || scalar_broadcast(g, t) || indexed_broadcast(g, t, numel, &inner);
}

typedef struct {
  const opt_users *u;
  int copies;
} mask_copy_state;

static bool cheap_mask(const ts_graph *g, const opt_users *u, ts_tensor t) {
  const ts_node *n = &g->nodes[t];
  int64_t numel = ts_shape_numel(n->rank, n->shape);
  return n->op == TS_OP_COMPARE && n->n_in == 2 && numel > 1 && u->off[t + 1] - u->off[t] > 1 &&
         cheap_operand(g, n->in[0], numel) && cheap_operand(g, n->in[1], numel);
}

/* The one full-size operand of cheap arithmetic t (its other operands read
 * by index), or -1. */
static int chain_source(const ts_graph *g, ts_tensor t) {
  const ts_node *n = &g->nodes[t];
  int64_t numel = ts_shape_numel(n->rank, n->shape);
  bool arith = n->op == TS_OP_ADD || n->op == TS_OP_SUB || n->op == TS_OP_MUL || n->op == TS_OP_NEG;
  bool widen = n->op == TS_OP_CONVERT && ts_dtype_is_float(g->nodes[n->in[0]].dtype) &&
               ts_dtype_size(g->nodes[n->in[0]].dtype) <= ts_dtype_size(n->dtype);
  if (!(arith || widen) || !ts_dtype_is_float(n->dtype) || numel <= 1) return -1;
  int src = -1;
  for (int k = 0; k < n->n_in; k++) {
    if (cheap_operand(g, n->in[k], numel)) continue;
    if (src >= 0 || ts_tensor_numel(g, n->in[k]) != numel) return -1;
    src = n->in[k];
  }
  return src;
}

/* Whether user w fuses its full-size operands (an elementwise op a private
 * copy can join, or a fused reduction). */
static bool fusing_user(const ts_graph *g, int w) {
  const ts_node *wn = &g->nodes[w];
  return (ir_op_has(wn->op, TS_OPF_FUSIBLE) && wn->n_in <= 3) || (wn->op == TS_OP_REDUCE && fuse_reducible(g, w));
}

/* t is cheap arithmetic with several users, all of which fuse it. */
static bool cheap_chain(const ts_graph *g, const opt_users *u, ts_tensor t) {
  if (u->n_out[t] || u->off[t + 1] - u->off[t] < 2 || chain_source(g, t) < 0) return false;
  for (int k = u->off[t]; k < u->off[t + 1]; k++)
    if (!fusing_user(g, u->users[k])) return false;
  return true;
}

/* A private copy of the chain ending at t (its cheap chain operands copied
 * too, up to COPY_MAX_DEPTH). */
static ts_tensor copy_chain(ts_graph *dst, const ts_graph *src, mask_copy_state *s, ts_tensor t, const int32_t *map,
                            int depth) {
  const ts_node *n = &src->nodes[t];
  int32_t ins[3];
  for (int k = 0; k < n->n_in; k++) {
    int32_t o = n->in[k];
    ins[k] = depth < COPY_MAX_DEPTH && cheap_chain(src, s->u, o) ? copy_chain(dst, src, s, o, map, depth + 1) : map[o];
    if (ins[k] < 0) return TS_NONE;
  }
  s->copies++;
  return ir_append(dst, n->op, n->dtype, n->rank, n->shape, n->n_in, ins, &n->attr);
}

static ts_tensor mask_copy_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  mask_copy_state *s = user;
  const ts_node *n = &src->nodes[id];
  bool red = n->op == TS_OP_REDUCE && fuse_reducible(src, id);
  if ((!ir_op_has(n->op, TS_OPF_FUSIBLE) && !red) || n->n_in > 3) return OPT_KEEP;
  int32_t ins[3];
  bool any = false;
  for (int k = 0; k < n->n_in; k++) {
    int32_t t = n->in[k];
    ins[k] = map[t];
    const ts_node *m = &src->nodes[t];
    if (k > 0 && t == n->in[k - 1] && any) { /* mul(xc, xc): one copy for both operands */
      ins[k] = ins[k - 1];
      continue;
    }
    if (cheap_chain(src, s->u, t)) {
      if ((ins[k] = copy_chain(dst, src, s, t, map, 0)) < 0) return TS_NONE;
      any = true;
      continue;
    }
    if (red || !cheap_mask(src, s->u, t) || map[m->in[0]] < 0 || map[m->in[1]] < 0) continue;
    int32_t mi[2] = {map[m->in[0]], map[m->in[1]]};
    if ((ins[k] = ir_append(dst, TS_OP_COMPARE, m->dtype, m->rank, m->shape, 2, mi, &m->attr)) < 0) return TS_NONE;
    any = true;
    s->copies++;
  }
  if (!any) return OPT_KEEP;
  return ir_append(dst, n->op, n->dtype, n->rank, n->shape, n->n_in, ins, &n->attr);
}

/* *out: the rewritten graph, or NULL when nothing is worth a copy. */
static int mask_copy_rewrite(const ts_graph *g, ts_graph **out, int *copies) {
  *out = NULL;
  *copies = 0;
  opt_users u;
  if (opt_users_build(g, &u) < 0) return -1;
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = cheap_mask(g, &u, i) || cheap_chain(g, &u, i);
  mask_copy_state s = {&u, 0};
  if (any && !(*out = opt_rebuild(g, mask_copy_node, &s, NULL))) {
    opt_users_free(&u);
    return -1;
  }
  opt_users_free(&u);
  *copies = s.copies;
  return 0;
}

/* ---- 5. f32 values exact in bf16 stored as bf16 ----
 * Under bf16 autocast, ReLU's backward mask selects from a bf16 gradient:
 * g = select(mask, convert(dx, f32), 0) is f32 but every value of it is a
 * bf16 value, and batch norm's backward reads g three times (two sums and the
 * input gradient). Such a value t (an f32 elementwise op whose result is
 * always representable in bf16, opt_bf16_exact) with several users, all of which
 * fuse it, is stored as bf16 instead: t -> convert(convert(t, bf16), f32).
 * The inner convert joins t's group, which then writes bf16 (half the bytes);
 * the outer one is cheap arithmetic that every user recomputes (rewrite 4);
 * a user that converts t to bf16 itself reads the bf16 copy. The round trip
 * is the identity on bf16 values (a signaling NaN would come back quiet: the
 * only bits that may change), so the results are the same bits. */
/* Whether t is worth storing as bf16: bf16_exact, computed (not a convert
 * from bf16 or a splat, which cost nothing to recompute), full-size, no graph
 * output, and read by several users that all fuse it (a bf16 conversion of
 * it, or a fusing_user). */
static bool narrow_candidate(const ts_graph *g, const opt_users *u, const bool *exact, int t) {
  const ts_node *n = &g->nodes[t];
  double v;
  if (!exact[t] || n->op == TS_OP_CONVERT || !ir_op_has(n->op, TS_OPF_FUSIBLE) || opt_splat_value(g, t, &v) ||
      u->n_out[t] || u->off[t + 1] - u->off[t] < 2 || ts_shape_numel(n->rank, n->shape) <= 1)
    return false;
  for (int k = u->off[t]; k < u->off[t + 1]; k++) {
    const ts_node *wn = &g->nodes[u->users[k]];
    if (!(wn->op == TS_OP_CONVERT && wn->dtype == TS_BF16) && !fusing_user(g, u->users[k])) return false;
  }
  return true;
}

/* What rewrites 5 and 6 start from: the users, opt_bf16_exact of every
 * node, a per-node mark (the rewrite's candidates) and, per rewritten node,
 * its bf16 copy in the new graph. bf16_scan_end is safe after any begin. */
typedef struct {
  opt_users u;
  bool *exact;
  int8_t *mark;
  int32_t *bf16;
} bf16_scan;

static int bf16_scan_begin(const ts_graph *g, bf16_scan *s) {
  memset(s, 0, sizeof *s);
  if (opt_users_build(g, &s->u) < 0) return -1;
  size_t nn = (size_t)g->n_nodes + 1;
  s->exact = malloc(nn * sizeof *s->exact), s->mark = calloc(nn, sizeof *s->mark);
  s->bf16 = malloc(nn * sizeof *s->bf16);
  if (!s->exact || !s->mark || !s->bf16) return error_oom("compile: fusion", nn * sizeof *s->bf16);
  for (int i = 0; i < g->n_nodes; i++) s->exact[i] = opt_bf16_exact(g, i, s->exact);
  return 0;
}

static void bf16_scan_end(bf16_scan *s) {
  free(s->exact), free(s->mark), free(s->bf16);
  opt_users_free(&s->u);
}

typedef struct {
  const int8_t *narrow; /* per node of the source: stored as bf16 */
  int32_t *bf16;      /* per narrowed source node: its bf16 copy in dst */
  int narrowed;
} narrow_state;

static ts_tensor narrow_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  narrow_state *s = user;
  const ts_node *n = &src->nodes[id];
  if (n->op == TS_OP_CONVERT && n->dtype == TS_BF16 && s->narrow[n->in[0]]) return s->bf16[n->in[0]];
  if (!s->narrow[id]) return OPT_KEEP;
  ts_tensor t = opt_copy_node(dst, src, id, map);
  if (t < 0) return TS_NONE;
  ts_tensor b = ir_append(dst, TS_OP_CONVERT, TS_BF16, n->rank, n->shape, 1, &t, NULL);
  if (b < 0) return TS_NONE;
  s->bf16[id] = b;
  s->narrowed++;
  return ir_append(dst, TS_OP_CONVERT, TS_F32, n->rank, n->shape, 1, &b, NULL);
}

/* *out: the rewritten graph, or NULL when no value is narrowed. */
static int narrow_rewrite(const ts_graph *g, ts_graph **out, int *narrowed) {
  *out = NULL;
  *narrowed = 0;
  bf16_scan sc;
  int rc = bf16_scan_begin(g, &sc);
  bool any = false;
  for (int i = 0; rc == 0 && i < g->n_nodes; i++) any |= sc.mark[i] = narrow_candidate(g, &sc.u, sc.exact, i);
  narrow_state s = {sc.mark, sc.bf16, 0};
  if (rc == 0 && any && !(*out = opt_rebuild(g, narrow_node, &s, NULL))) rc = -1;
  *narrowed = s.narrowed;
  bf16_scan_end(&sc);
  return rc;
}

/* ---- 6. bf16 roundings moved past a select, max or min ----
 * Under bf16 autocast the residual gradient is rounded and then masked by
 * ReLU's backward, and the masked value is stored as bf16:
 *   convert(select(m, convert(convert(x, bf16), f32), z), bf16)
 * with z a bf16 value (0). Selecting commutes with rounding (each element is
 * round(x) or z = round(z)), so that is convert(select(m, x, z), bf16): the
 * same bits, one rounding pass fewer. Likewise max and min (ReLU of batch
 * norm's rounded output): rounding is monotone and keeps z, so
 * max(round(x), z) = round(max(x, z)) (a NaN x gives round(x) either way).
 * Applied when every user of the select
 * converts it to bf16, or when rewrite 5 would store it as bf16 (several
 * users, all fusing it: it reads as f32 from a bf16 copy); then the select of
 * x is stored as bf16 here, convert(convert(select(m, x, z), bf16), f32),
 * the values the users read before. */
static ts_tensor unrounded(const ts_graph *g, ts_tensor t) {
  ts_tensor bt = opt_bf16_widened(g, t);
  const ts_node *b = bt == TS_NONE ? NULL : &g->nodes[bt];
  return b && b->op == TS_OP_CONVERT && g->nodes[b->in[0]].dtype == TS_F32 ? b->in[0] : TS_NONE;
}

/* 0: no; 1: every user converts to bf16; 2: stored as bf16 (rewrite 5). */
static int commute_candidate(const ts_graph *g, const opt_users *u, const bool *exact, int t) {
  const ts_node *n = &g->nodes[t];
  bool sel = n->op == TS_OP_SELECT, mono = n->op == TS_OP_MAX || n->op == TS_OP_MIN;
  if (!(sel || mono) || n->dtype != TS_F32 || u->n_out[t] || u->off[t + 1] == u->off[t]) return 0;
  bool any = false;
  for (int k = sel; k < n->n_in; k++) {
    bool r = unrounded(g, n->in[k]) >= 0;
    if (!r && !exact[n->in[k]]) return 0;
    any |= r;
  }
  int narrowed = 0, users = u->off[t + 1] - u->off[t];
  for (int k = u->off[t]; k < u->off[t + 1]; k++) {
    const ts_node *w = &g->nodes[u->users[k]];
    if (w->op == TS_OP_CONVERT && w->dtype == TS_BF16) continue;
    if (!fusing_user(g, u->users[k])) return 0;
    narrowed = 1;
  }
  if (narrowed && (users < 2 || ts_shape_numel(n->rank, n->shape) <= 1)) return 0;
  return any ? 1 + narrowed : 0;
}

typedef struct {
  const int8_t *cand;
  int32_t *bf16; /* per candidate stored as bf16 (2): its bf16 copy in dst */
} commute_state;

static ts_tensor commute_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  commute_state *s = user;
  const int8_t *cand = s->cand;
  const ts_node *n = &src->nodes[id];
  if (n->op == TS_OP_CONVERT && n->dtype == TS_BF16 && cand[n->in[0]] == 2) return s->bf16[n->in[0]];
  if (!cand[id]) return OPT_KEEP;
  int32_t ins[3];
  for (int k = 0; k < n->n_in; k++) {
    ts_tensor x = k > 0 || n->op != TS_OP_SELECT ? unrounded(src, n->in[k]) : TS_NONE;
    ins[k] = map[x >= 0 ? x : n->in[k]];
  }
  ts_tensor t = ir_append(dst, n->op, n->dtype, n->rank, n->shape, n->n_in, ins, &n->attr);
  if (t < 0 || cand[id] == 1) return t;
  ts_tensor b = ir_append(dst, TS_OP_CONVERT, TS_BF16, n->rank, n->shape, 1, &t, NULL);
  s->bf16[id] = b;
  return b < 0 ? TS_NONE : ir_append(dst, TS_OP_CONVERT, TS_F32, n->rank, n->shape, 1, &b, NULL);
}

/* *out: the rewritten graph, or NULL when no select qualifies. */
static int commute_rewrite(const ts_graph *g, ts_graph **out, int *rewritten) {
  *out = NULL;
  *rewritten = 0;
  bf16_scan sc;
  int rc = bf16_scan_begin(g, &sc);
  for (int i = 0; rc == 0 && i < g->n_nodes; i++)
    *rewritten += (sc.mark[i] = (int8_t)commute_candidate(g, &sc.u, sc.exact, i)) > 0;
  if (rc == 0 && *rewritten) { /* then without the round trips no one reads (they would keep x from fusing) */
    commute_state st = {sc.mark, sc.bf16};
    ts_graph *r = opt_rebuild(g, commute_node, &st, NULL);
    if (!r || !(*out = opt_dce(r, NULL))) rc = -1;
    ts_graph_free(r);
  }
  bf16_scan_end(&sc);
  return rc;
}

/* The rewrites before grouping, in order: the ReLU masks first (a mask that
 * reads the ReLU's output leaves batch norm's output with one user, so it is
 * not recomputed for the mask; under autocast it reads the ReLU's bf16 copy,
 * so the ReLU's only users are bf16 converts), the roundings moved past
 * selects and ReLUs next, the bf16-exact values next (so their f32
 * round trips are copied into users), the cheap copies last. Each gives a
 * new graph or NULL (nothing to rewrite). */
typedef int (*prefuse_rewrite)(const ts_graph *g, ts_graph **out, int *rewritten);
static const prefuse_rewrite prefuse_rewrites[] = {relu_mask_rewrite, commute_rewrite, narrow_rewrite,
                                                    mask_copy_rewrite};

/* Runs prefuse_rewrites on g0. *owned: the graph they made (NULL: g0 is
 * unchanged), the caller's to free; *rewritten: nodes rewritten. Returns the
 * graph to group (g0 or *owned), NULL on error. */
static const ts_graph *prefuse(const ts_graph *g0, ts_graph **owned, int *rewritten) {
  *owned = NULL;
  *rewritten = 0;
  for (size_t k = 0; k < sizeof prefuse_rewrites / sizeof *prefuse_rewrites; k++) {
    ts_graph *next;
    int n = 0;
    if (prefuse_rewrites[k](*owned ? *owned : g0, &next, &n) < 0) {
      ts_graph_free(*owned);
      *owned = NULL;
      return NULL;
    }
    *rewritten += n;
    if (next) {
      ts_graph_free(*owned);
      *owned = next;
    }
  }
  return *owned ? *owned : g0;
}

ts_graph *opt_fuse(const ts_graph *g0, int *changed) {
  int masks;
  ts_graph *pre;
  const ts_graph *g = prefuse(g0, &pre, &masks);
  if (!g) return NULL;
  int nn = g->n_nodes;
  opt_users u;
  if (opt_users_build(g, &u) < 0) {
    ts_graph_free(pre);
    return NULL;
  }
  fuse_state s = {0};
  s.group = malloc(((size_t)nn + 1) * sizeof *s.group);
  s.prog = calloc((size_t)nn + 1, sizeof *s.prog);
  s.ext = calloc((size_t)nn + 1, sizeof *s.ext);
  s.n_ext = calloc((size_t)nn + 1, sizeof *s.n_ext);
  ts_graph *out = NULL;
  s.sib = malloc(((size_t)nn + 1) * sizeof *s.sib);
  s.sib_q = calloc((size_t)nn + 1, sizeof *s.sib_q);
  s.sib_dst = calloc((size_t)nn + 1, sizeof *s.sib_dst);
  s.sib_members = calloc((size_t)nn + 1, sizeof *s.sib_members);
  if (!s.group || !s.prog || !s.ext || !s.n_ext || !s.sib || !s.sib_q || !s.sib_dst || !s.sib_members) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory in fusion");
    goto done;
  }
  for (int i = 0; i < nn; i++) s.group[i] = s.sib[i] = -1;
  if (find_groups(g, &u, &s) == 0 && fuse_find_siblings(g, &u, &s) == 0) out = opt_rebuild(g, fuse_node, &s, NULL);
  if (changed) *changed = s.fused_nodes + masks;
done:
  for (int i = 0; i < nn && s.prog; i++) {
    if (s.prog[i]) {
      free(s.prog[i]->ins);
      free(s.prog[i]);
    }
    if (s.ext) free(s.ext[i]);
  }
  fuse_siblings_free(&s, nn);
  free(s.group);
  free(s.prog);
  free(s.ext);
  free(s.n_ext);
  opt_users_free(&u);
  ts_graph_free(pre);
  return out;
}
