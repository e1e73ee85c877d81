/* partition.c — the SPMD partitioner: rewrites a global program, whose every
 * node has a sharding (propagate.c), into the program of one device, with
 * local (block) shapes and static slice offsets for that device. Each op has
 * a rule: elementwise ops, broadcast, transpose and reshape work on blocks;
 * dot_general splits batch, free and contracting dims (a sharded contracting
 * dim leaves a partial sum); reductions over sharded dims leave a partial
 * reduction; iota, rng and constants make their block from global indices.
 * Other ops use the general fallback: gather the operands whole, compute,
 * keep this device's block. Resharding is in reshard.c. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h" /* opt_splat_value */
#include "spmd/part_internal.h"

static void spec_clear(ts_partition_spec *s, int rank) {
  memset(s, 0, sizeof *s);
  s->rank = rank;
}

static void copy_dim(ts_partition_spec *dst, int dd, const ts_partition_spec *src, int sd) {
  dst->naxes[dd] = src->naxes[sd];
  memcpy(dst->axes[dd], src->axes[sd], sizeof dst->axes[dd]);
}

static uint32_t dim_mask(const ts_partition_spec *s, int d) {
  uint32_t m = 0;
  for (int k = 0; k < s->naxes[d]; k++) m |= 1u << s->axes[d][k];
  return m;
}

/* Removes the axes in `mask` from every dim of s, the others kept in order:
 * a result dim split over a+b whose b the operands contract computes split
 * over a, its partial sum over b reduce-scattered into it after (clearing
 * the whole dim gathered the operand's a: twice the FLOPs, GPT on 2x2). */
static void drop_axes(ts_partition_spec *s, int rank, uint32_t mask) {
  for (int d = 0; d < rank; d++) {
    int k = 0;
    for (int j = 0; j < s->naxes[d]; j++)
      if (!(mask & (1u << s->axes[d][j]))) s->axes[d][k++] = s->axes[d][j];
    s->naxes[d] = k;
  }
}

/* Copies the block of a row-major global array starting at `start` with
 * shape lshape into dst. */
static void take_block(char *dst, const char *src, int rank, const int64_t *shape, const int64_t *start,
                       const int64_t *lshape, size_t es) {
  int64_t n = ts_shape_numel(rank, lshape);
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i, off = 0, stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
      off += (rest % lshape[d] + start[d]) * stride;
      rest /= lshape[d];
      stride *= shape[d];
    }
    memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
  }
}

/* Global start of this device's block of a node laid out as W. */
static void block_start(const part *p, const ts_partition_spec *s, int rank, const int64_t *lshape, int64_t *start) {
  for (int d = 0; d < rank; d++) start[d] = part_tile_index(p, s->axes[d], s->naxes[d]) * lshape[d];
}

static int32_t lower_leaf(part *p, int id, const ts_partition_spec *in_spec) {
  const ts_node *n = &p->g->nodes[id];
  const ts_partition_spec *W = &p->W[id];
  int64_t ls[TS_MAX_RANK], st[TS_MAX_RANK];
  part_local_shape(p, W, n->rank, n->shape, ls);
  block_start(p, W, n->rank, ls, st);
  switch (n->op) {
  case TS_OP_INPUT: {
    int64_t is[TS_MAX_RANK];
    part_local_shape(p, in_spec, n->rank, n->shape, is);
    int32_t v = part_emit(p, TS_OP_INPUT, n->dtype, n->rank, is, 0, NULL, NULL);
    if (v == TS_NONE) return TS_NONE;
    if (!(p->L->nodes[v].name = strdup(n->name ? n->name : ""))) {
      error_oom("partition: an input's name", strlen(n->name ? n->name : "") + 1);
      return TS_NONE;
    }
    return part_reshard(p, v, n->dtype, n->rank, n->shape, *in_spec, 0, TS_REDUCE_SUM, W);
  }
  case TS_OP_CONSTANT: {
    int32_t v = part_emit(p, TS_OP_CONSTANT, n->dtype, n->rank, ls, 0, NULL, &n->attr);
    if (v != TS_NONE && n->data) {
      size_t es = ts_dtype_size(n->dtype);
      char *d = malloc((size_t)ts_shape_numel(n->rank, ls) * es + 1);
      if (!d) {
        error_oom("partition: a constant's block", (size_t)ts_shape_numel(n->rank, ls) * es + 1);
        return TS_NONE;
      }
      take_block(d, n->data, n->rank, n->shape, st, ls, es);
      p->L->nodes[v].data = d;
    }
    return v;
  }
  case TS_OP_IOTA: {
    int32_t v = part_emit(p, TS_OP_IOTA, n->dtype, n->rank, ls, 0, NULL, &n->attr);
    int64_t off = st[n->attr.axis];
    if (off == 0) return v;
    /* block of a sharded iota dim: local index + the block's global start */
    ts_attr c = {0};
    c.value = (double)off;
    int32_t k = part_emit(p, TS_OP_CONSTANT, n->dtype, n->rank, ls, 0, NULL, &c);
    int32_t in[2] = {v, k};
    return part_emit(p, TS_OP_ADD, n->dtype, n->rank, ls, 2, in, NULL);
  }
  default: { /* RNG: this block of the global random tensor */
    ts_partition_spec rep;
    spec_clear(&rep, 0);
    int32_t seed = part_get(p, n->in[0], &rep);
    ts_attr a = n->attr;
    if (!a.global) {
      a.global = true;
      memcpy(a.gshape, n->shape, sizeof a.gshape);
      memset(a.goffset, 0, sizeof a.goffset);
    }
    for (int d = 0; d < n->rank; d++) a.goffset[d] += st[d];
    return part_emit(p, n->op, n->dtype, n->rank, ls, 1, &seed, &a);
  }
  }
}

/* dot_general: output dims keep the node's axes unless those axes split a
 * contracting dim (then the result is a partial sum over them). */
/* The one user of node id (one operand slot, not a program output), or -1. */
static int sole_user(const ts_graph *g, int id) {
  int user = -1;
  for (int i = id + 1; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == id) {
        if (user >= 0) return -1;
        user = i;
      }
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == id) return -1;
  return user;
}

static uint32_t scatter_partial_axes(const part *p, int id, ts_partition_spec *is, ts_partition_spec *us);

void spmd_dot_specs(const ts_graph *g, const ts_partition_spec *W, int id, ts_partition_spec *s, ts_partition_spec *out,
                    uint32_t *partial) {
  const ts_node *n = &g->nodes[id];
  const ts_dot_dims *dd = &n->attr.dot;
  const ts_node *x = &g->nodes[n->in[0]], *y = &g->nodes[n->in[1]];
  const ts_partition_spec *xw = &W[n->in[0]], *yw = &W[n->in[1]];
  /* axes the result wants on a dim whose operand dim already has them:
   * splitting a contracting dim over them instead would move that operand
   * (a weight gradient dW = dY^T h with dY split on the sequence and h on
   * the features keeps h's features and gathers dY) */
  uint32_t keep = 0;
  {
    const ts_partition_spec *Wd = &W[id];
    int o = 0;
    for (int b = 0; b < dd->n_batch; b++, o++)
      keep |= dim_mask(Wd, o) & (dim_mask(xw, dd->lhs_batch[b]) | dim_mask(yw, dd->rhs_batch[b]));
    for (int side = 0; side < 2; side++) {
      const ts_node *t = side ? y : x;
      const ts_partition_spec *tw = side ? yw : xw;
      const int *bat = side ? dd->rhs_batch : dd->lhs_batch, *con = side ? dd->rhs_contract : dd->lhs_contract;
      for (int i = 0; i < t->rank; i++) {
        bool skip = false;
        for (int k = 0; k < dd->n_batch; k++) skip |= bat[k] == i;
        for (int k = 0; k < dd->n_contract; k++) skip |= con[k] == i;
        if (!skip) keep |= dim_mask(Wd, o++) & dim_mask(tw, i);
      }
    }
  }
  ts_partition_spec ck; /* per contracting pair k: its axes (entry k) */
  spec_clear(&ck, dd->n_contract);
  uint32_t cmask = 0;
  for (int k = 0; k < dd->n_contract; k++) {
    int lc = dd->lhs_contract[k], rc = dd->rhs_contract[k];
    uint32_t lm = dim_mask(xw, lc), rm = dim_mask(yw, rc);
    if (lm && !(lm & (cmask | keep))) copy_dim(&ck, k, xw, lc);
    else if (rm && !(rm & (cmask | keep))) copy_dim(&ck, k, yw, rc);
    cmask |= dim_mask(&ck, k);
  }
  ts_partition_spec O = W[id];
  drop_axes(&O, n->rank, cmask);
  int o = dd->n_batch;
  for (int side = 0; side < 2; side++) {
    const ts_node *t = side ? y : x;
    const int *bat = side ? dd->rhs_batch : dd->lhs_batch, *con = side ? dd->rhs_contract : dd->lhs_contract;
    spec_clear(&s[side], t->rank);
    for (int b = 0; b < dd->n_batch; b++) copy_dim(&s[side], bat[b], &O, b);
    for (int k = 0; k < dd->n_contract; k++) copy_dim(&s[side], con[k], &ck, k);
    for (int i = 0; i < t->rank; i++) {
      bool skip = false;
      for (int k = 0; k < dd->n_batch; k++) skip |= bat[k] == i;
      for (int k = 0; k < dd->n_contract; k++) skip |= con[k] == i;
      if (!skip) copy_dim(&s[side], i, &O, o++);
    }
  }
  *out = O;
  *partial = cmask;
}

static int32_t lower_dot(part *p, int id) {
  const ts_graph *g = p->g;
  const ts_node *n = &g->nodes[id];
  ts_partition_spec s[2], O;
  uint32_t cmask;
  spmd_dot_specs(g, p->W, id, s, &O, &cmask);
  int32_t in[2] = {part_get(p, n->in[0], &s[0]), part_get(p, n->in[1], &s[1])};
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  int32_t v = part_emit(p, TS_OP_DOT, n->dtype, n->rank, ls, 2, in, &n->attr);
  /* A partial sum whose one user is a scatter_add that adds rows into it
   * and reduces over the same axes in the same layout (a tied embedding's
   * gradient: the head's dW plus the lookup's rows, both summed over the
   * batch) stays partial: the scatter_add reduces both at once. */
  int u = cmask ? sole_user(g, id) : -1;
  if (u >= 0 && g->nodes[u].op == TS_OP_SCATTER_ADD && g->nodes[u].in[0] == id && g->nodes[u].in[1] != id &&
      g->nodes[u].in[2] != id && spmd_spec_equal(&O, &p->W[u])) {
    ts_partition_spec is, us;
    if (scatter_partial_axes(p, u, &is, &us) == cmask) {
      p->partial[id] = cmask;
      return v;
    }
  }
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, cmask, TS_REDUCE_SUM, &p->W[id]);
}

/* reduce: reduced dims keep their axes and leave a partial reduction. */
static int32_t lower_reduce(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *x = &p->g->nodes[n->in[0]];
  ts_partition_spec xs = p->W[n->in[0]], O = p->W[id];
  uint32_t cmask = 0;
  for (int r = 0; r < n->attr.n_dims; r++) cmask |= dim_mask(&xs, n->attr.dims[r]);
  for (int d = 0; d < n->rank; d++)
    if (dim_mask(&O, d) & cmask) O.naxes[d] = 0;
  for (int i = 0, r = 0, j = 0; i < x->rank; i++) {
    if (r < n->attr.n_dims && n->attr.dims[r] == i) {
      r++;
      continue;
    }
    copy_dim(&xs, i, &O, j++);
  }
  int32_t a = part_get(p, n->in[0], &xs);
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  int32_t v = part_emit(p, TS_OP_REDUCE, n->dtype, n->rank, ls, 1, &a, &n->attr);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, cmask, n->attr.reduce, &p->W[id]);
}

static int32_t lower_reshape(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *x = &p->g->nodes[n->in[0]];
  const ts_partition_spec *W = &p->W[id];
  int64_t fp[TS_MAX_RANK], tp[TS_MAX_RANK], q = 1;
  for (int e = 0; e < x->rank; e++) fp[e] = q, q *= x->shape[e];
  q = 1;
  for (int d = 0; d < n->rank; d++) tp[d] = q, q *= n->shape[d];
  ts_partition_spec xs, A;
  spec_clear(&xs, x->rank);
  spec_clear(&A, n->rank);
  for (int d = 0; d < n->rank; d++) {
    int64_t t = spmd_dim_tiles(p->m, W, d);
    if (t == 1) continue;
    for (int e = 0; e < x->rank; e++)
      if (fp[e] == tp[d] && x->shape[e] % t == 0 && n->shape[d] % t == 0) {
        copy_dim(&xs, e, W, d);
        copy_dim(&A, d, W, d);
        break;
      }
  }
  int32_t a = part_get(p, n->in[0], &xs);
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &A, n->rank, n->shape, ls);
  int32_t v = part_emit(p, TS_OP_RESHAPE, n->dtype, n->rank, ls, 1, &a, &n->attr);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, A, 0, TS_REDUCE_SUM, W);
}

/* A 4-D spec with dim 0 from s's dim a and dim cd (the channels: 1, or 3 for
 * NHWC activations) from s's dim b (none when -1); spatial dims replicated. */
static ts_partition_spec nc_spec(const ts_partition_spec *s, int a, int b, int cd) {
  ts_partition_spec r;
  spec_clear(&r, 4);
  if (a >= 0) copy_dim(&r, 0, s, a);
  if (b >= 0) copy_dim(&r, cd, s, b);
  return r;
}

/* Convolutions split the batch dim and the output channels; split input
 * channels (groups == 1) leave a partial sum. The two gradient ops are
 * convolutions too: bwd_data contracts over output channels, bwd_filter over
 * the batch. Pools split batch and channels. Spatial dims are gathered. The
 * activations' channel dim (ca) follows the node's layout; weights are OIHW. */
static int32_t lower_conv(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_partition_spec *x0 = &p->W[n->in[0]];
  bool is_pool = n->op != TS_OP_CONV && n->op != TS_OP_CONV_BWD_DATA && n->op != TS_OP_CONV_BWD_FILTER;
  int ca = ir_chan_dim(is_pool ? n->attr.pool.layout : n->attr.conv.layout);
  int rc = n->op == TS_OP_CONV_BWD_FILTER ? 1 : ca; /* the result's channel dim */
  ts_partition_spec O = nc_spec(&p->W[id], 0, rc, rc), a, b, K;
  spec_clear(&K, 1);
  uint32_t cmask = 0;
  /* the contracted dim: (operand, dim) pairs that must share its axes */
  switch (n->op) {
  case TS_OP_CONV: /* C of x, else of w (a row-parallel conv: x sliced, not w gathered) */
    copy_dim(&K, 0, x0, ca);
    if (K.naxes[0] == 0) copy_dim(&K, 0, &p->W[n->in[1]], 1);
    break;
  case TS_OP_CONV_BWD_DATA: copy_dim(&K, 0, x0, ca); break;  /* O of dy (and of w) */
  case TS_OP_CONV_BWD_FILTER: /* N of x (and of dy): x's axes, else dy's (x sliced, no gather of dy) */
    copy_dim(&K, 0, x0, 0);
    if (K.naxes[0] == 0) copy_dim(&K, 0, &p->W[n->in[1]], 0);
    break;
  default: break;
  }
  if (!is_pool) {
    if (n->attr.conv.groups != 1) K.naxes[0] = 0;
    cmask = dim_mask(&K, 0);
    if (dim_mask(&O, 0) & cmask) O.naxes[0] = 0;
    if (dim_mask(&O, rc) & cmask) O.naxes[rc] = 0;
  }
  int32_t in[2];
  switch (n->op) {
  case TS_OP_CONV: /* x (N,C,H,W) [N, K], w (O,C,kh,kw) [O, K] */
    a = nc_spec(&O, 0, -1, ca);
    copy_dim(&a, ca, &K, 0);
    b = nc_spec(&O, rc, -1, 1);
    copy_dim(&b, 1, &K, 0);
    break;
  case TS_OP_CONV_BWD_DATA: /* dy (N,O,..) [N, K], w (O,C,..) [K, C] -> (N,C,..) */
    a = nc_spec(&O, 0, -1, ca);
    copy_dim(&a, ca, &K, 0);
    b = nc_spec(&O, -1, rc, 1);
    copy_dim(&b, 0, &K, 0);
    break;
  case TS_OP_CONV_BWD_FILTER: /* x (N,C,..) [K, C], dy (N,O,..) [K, O] -> (O,C,..) */
    a = nc_spec(&O, -1, 1, ca);
    copy_dim(&a, 0, &K, 0);
    b = nc_spec(&O, -1, 0, ca);
    copy_dim(&b, 0, &K, 0);
    break;
  default: /* pools and their gradients: operands laid out like the result */
    a = b = O;
    break;
  }
  in[0] = part_get(p, n->in[0], &a);
  if (n->n_in > 1) in[1] = part_get(p, n->in[1], &b);
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  int32_t v = part_emit(p, n->op, n->dtype, n->rank, ls, n->n_in, in, &n->attr);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, cmask, TS_REDUCE_SUM, &p->W[id]);
}

/* Fused causal attention and its gradient: split on B and H only (qkv and
 * dqkv (B, T, 3, H, Dh): dims 0 and 3; y and dy (B, T, H, Dh): 0 and 2);
 * T and Dh are gathered. */
static int32_t lower_attention(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  int h = n->op == TS_OP_ATTENTION ? 2 : 3; /* the result's H dim */
  ts_partition_spec O, a, d;
  spec_clear(&O, n->rank);
  copy_dim(&O, 0, &p->W[id], 0);
  copy_dim(&O, h, &p->W[id], h);
  spec_clear(&a, 5);
  copy_dim(&a, 0, &O, 0);
  copy_dim(&a, 3, &O, h);
  spec_clear(&d, 4);
  copy_dim(&d, 0, &O, 0);
  copy_dim(&d, 2, &O, h);
  int32_t in[2] = {part_get(p, n->in[0], &a), n->n_in > 1 ? part_get(p, n->in[1], &d) : TS_NONE};
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  int32_t v = part_emit(p, n->op, n->dtype, n->rank, ls, n->n_in, in, &n->attr);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, 0, TS_REDUCE_SUM, &p->W[id]);
}

/* Fused layer norm: split on the leading (row) dims only; the last dim is
 * gathered, gamma and beta replicated. The rows are split like the result
 * or like x, whichever splits them over more devices: a sequence-parallel
 * norm whose output is wanted gathered (the input of a column-parallel
 * linear) still runs on its sequence shard and gathers y, as the
 * decomposed form does. layer_norm_dgamma sums over the rows of x and dy
 * laid out like x: a partial sum over the axes splitting them. */
static int32_t lower_layernorm(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *x = &p->g->nodes[n->in[0]];
  ts_partition_spec O, a, r;
  uint32_t cmask = 0;
  spec_clear(&a, x->rank);
  spec_clear(&r, 1);
  if (n->op == TS_OP_LAYERNORM_DGAMMA) {
    for (int d = 0; d + 1 < x->rank; d++) copy_dim(&a, d, &p->W[n->in[0]], d), cmask |= dim_mask(&a, d);
    spec_clear(&O, 1);
  } else {
    ts_partition_spec X;
    spec_clear(&O, n->rank);
    spec_clear(&X, n->rank);
    for (int d = 0; d + 1 < n->rank; d++) copy_dim(&O, d, &p->W[id], d), copy_dim(&X, d, &p->W[n->in[0]], d);
    if (spmd_total_tiles(p->m, &X) > spmd_total_tiles(p->m, &O)) O = X;
    for (int d = 0; d + 1 < n->rank; d++) copy_dim(&a, d, &O, d);
  }
  int32_t in[3];
  for (int k = 0; k < n->n_in; k++) {
    bool vec = n->op != TS_OP_LAYERNORM_DGAMMA && (k == 1 || (k == 2 && n->op == TS_OP_LAYERNORM));
    in[k] = part_get(p, n->in[k], vec ? &r : &a);
  }
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  int32_t v = part_emit(p, n->op, n->dtype, n->rank, ls, n->n_in, in, &n->attr);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, cmask, TS_REDUCE_SUM, &p->W[id]);
}

/* slice, pad, concatenate: dims the op leaves alone (full range with stride
 * 1, no padding, not the concatenation dim) keep their axes; the others are
 * computed whole and then cut to the node's layout. */
static bool passes_through(const ts_node *n, const ts_node *x, int d) {
  const ts_attr *a = &n->attr;
  switch (n->op) {
  case TS_OP_SLICE: return a->start[d] == 0 && a->limit[d] == x->shape[d] && a->stride[d] == 1;
  case TS_OP_PAD: return a->start[d] == 0 && a->limit[d] == 0;
  default: return d != a->axis; /* concatenate */
  }
}

static int32_t lower_window(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *x = &p->g->nodes[n->in[0]];
  ts_partition_spec O = p->W[id];
  for (int d = 0; d < n->rank; d++)
    if (!passes_through(n, x, d)) O.naxes[d] = 0;
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  int32_t small[8], *in = n->n_in <= 8 ? small : malloc((size_t)n->n_in * sizeof *in);
  if (!in) {
    error_oom("partition: operands", (size_t)n->n_in * sizeof *in);
    return TS_NONE;
  }
  for (int k = 0; k < n->n_in; k++) in[k] = part_get(p, n->in[k], &O);
  ts_attr a = n->attr;
  for (int d = 0; d < n->rank; d++)
    if (n->op == TS_OP_SLICE && O.naxes[d]) a.limit[d] = ls[d]; /* the whole local block */
  int32_t v = part_emit(p, n->op, n->dtype, n->rank, ls, n->n_in, in, &a);
  if (in != small) free(in);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, 0, TS_REDUCE_SUM, &p->W[id]);
}

/* Any op: operands whole, compute the global result, keep this block. */
static int32_t lower_fallback(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  int32_t small[8], *in = n->n_in <= 8 ? small : malloc((size_t)n->n_in * sizeof *in);
  if (!in) {
    error_oom("partition: operands", (size_t)n->n_in * sizeof *in);
    return TS_NONE;
  }
  for (int k = 0; k < n->n_in; k++) {
    ts_partition_spec rep;
    spec_clear(&rep, p->g->nodes[n->in[k]].rank);
    in[k] = part_get(p, n->in[k], &rep);
  }
  int32_t v = part_emit(p, n->op, n->dtype, n->rank, n->shape, n->n_in, in, &n->attr);
  if (in != small) free(in);
  ts_partition_spec rep;
  spec_clear(&rep, n->rank);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, rep, 0, TS_REDUCE_SUM, &p->W[id]);
}

/* This device's rows [lo, lo + rows) of a table split over K: local row
 * index clamp(i - lo) of indices `idx` (local shape il) and whether i is
 * one of ours. */
static void local_rows(part *p, int32_t idx, ts_dtype idt, int rank, const int64_t *il, int64_t lo, int64_t rows,
                       int32_t *li, int32_t *ok) {
  ts_attr c = {0};
  c.value = (double)lo;
  int32_t klo = part_emit(p, TS_OP_CONSTANT, idt, rank, il, 0, NULL, &c);
  c.value = (double)(lo + rows);
  int32_t khi = part_emit(p, TS_OP_CONSTANT, idt, rank, il, 0, NULL, &c);
  c.value = 0;
  int32_t kzero = part_emit(p, TS_OP_CONSTANT, idt, rank, il, 0, NULL, &c);
  c.value = (double)(rows - 1);
  int32_t klast = part_emit(p, TS_OP_CONSTANT, idt, rank, il, 0, NULL, &c);
  ts_attr ge = {0}, lt = {0};
  ge.cmp = TS_CMP_GE;
  lt.cmp = TS_CMP_LT;
  int32_t a1[2] = {idx, klo}, a2[2] = {idx, khi};
  int32_t in_lo = part_emit(p, TS_OP_COMPARE, TS_BOOL, rank, il, 2, a1, &ge);
  int32_t in_hi = part_emit(p, TS_OP_COMPARE, TS_BOOL, rank, il, 2, a2, &lt);
  int32_t rel = part_emit(p, TS_OP_SUB, idt, rank, il, 2, a1, NULL);
  int32_t m1[2] = {rel, kzero}, m2[2] = {0, klast};
  m2[0] = part_emit(p, TS_OP_MAX, idt, rank, il, 2, m1, NULL);
  *li = part_emit(p, TS_OP_MIN, idt, rank, il, 2, m2, NULL);
  int32_t s3[3] = {in_lo, in_hi, 0};
  c.value = 0;
  s3[2] = part_emit(p, TS_OP_CONSTANT, TS_BOOL, rank, il, 0, NULL, &c);
  *ok = part_emit(p, TS_OP_SELECT, TS_BOOL, rank, il, 3, s3, NULL);
}

/* gather: rows of table (V, E..) picked by indices I -> (I.., E..). Index
 * dims and the table's other dims split as the result; a table split over V
 * (a vocabulary-sharded embedding) looks up the rows it holds, zeros for the
 * others, and leaves a partial sum over V's axes. */
static int32_t lower_gather(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *t = &p->g->nodes[n->in[0]], *ix = &p->g->nodes[n->in[1]];
  ts_partition_spec K, O = p->W[id], ts_, is;
  spec_clear(&K, 1);
  copy_dim(&K, 0, &p->W[n->in[0]], 0);
  uint32_t cmask = dim_mask(&K, 0);
  for (int d = 0; d < n->rank; d++)
    if (dim_mask(&O, d) & cmask) O.naxes[d] = 0;
  spec_clear(&ts_, t->rank);
  spec_clear(&is, ix->rank);
  copy_dim(&ts_, 0, &K, 0);
  for (int d = 0; d < ix->rank; d++) copy_dim(&is, d, &O, d);
  for (int d = 1; d < t->rank; d++) copy_dim(&ts_, d, &O, ix->rank + d - 1);
  int32_t tab = part_get(p, n->in[0], &ts_), idx = part_get(p, n->in[1], &is);
  int64_t ls[TS_MAX_RANK], il[TS_MAX_RANK], tl[TS_MAX_RANK];
  part_local_shape(p, &O, n->rank, n->shape, ls);
  part_local_shape(p, &is, ix->rank, ix->shape, il);
  part_local_shape(p, &ts_, t->rank, t->shape, tl);
  if (!cmask) {
    int32_t in[2] = {tab, idx};
    return part_reshard(p, part_emit(p, TS_OP_GATHER, n->dtype, n->rank, ls, 2, in, NULL), n->dtype, n->rank,
                        n->shape, O, 0, TS_REDUCE_SUM, &p->W[id]);
  }
  /* rows [lo, lo + V/k) live here: local index = clamp(i - lo), masked */
  int64_t lo = part_tile_index(p, K.axes[0], K.naxes[0]) * tl[0];
  int32_t li, ok;
  local_rows(p, idx, ix->dtype, ix->rank, il, lo, tl[0], &li, &ok);
  int32_t in[2] = {tab, li};
  int32_t got = part_emit(p, TS_OP_GATHER, n->dtype, n->rank, ls, 2, in, NULL);
  /* mask (I..) -> (I.., E..): both bounds hold */
  ts_attr c = {0};
  ts_attr bc = {0};
  bc.n_dims = ix->rank;
  for (int d = 0; d < ix->rank; d++) bc.dims[d] = d;
  int32_t okb = part_emit(p, TS_OP_BROADCAST, TS_BOOL, n->rank, ls, 1, &ok, &bc);
  int32_t zero = part_emit(p, TS_OP_CONSTANT, n->dtype, n->rank, ls, 0, NULL, &c);
  int32_t sel[3] = {okb, got, zero};
  int32_t v = part_emit(p, TS_OP_SELECT, n->dtype, n->rank, ls, 3, sel, NULL);
  return part_reshard(p, v, n->dtype, n->rank, n->shape, O, cmask, TS_REDUCE_SUM, &p->W[id]);
}

/* scatter_add: base (V, E..) plus updates (I.., E..) at rows indices (I..).
 * The result splits V and E like the node; updates keep the axes their
 * index dims already have (those not splitting V or E), each device adds
 * its updates into zeros and the partial sums over those axes are reduced
 * before base is added (the gradient of an embedding lookup: no gather of
 * the batch). A V split over axes K (a vocabulary-sharded table) adds only
 * the updates of the rows this device holds. */
/* The mesh axes J over which scatter_add id's updates are partial sums (the
 * axes its index dims keep, none of them splitting the result), and the
 * layouts of its indices and updates. */
static uint32_t scatter_partial_axes(const part *p, int id, ts_partition_spec *is, ts_partition_spec *us) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *ix = &p->g->nodes[n->in[1]], *up = &p->g->nodes[n->in[2]];
  const ts_partition_spec *W = &p->W[id], *uw = &p->W[n->in[2]];
  uint32_t used = spmd_spec_axes(W), J = 0;
  spec_clear(is, ix->rank);
  spec_clear(us, up->rank);
  for (int d = 0; d < ix->rank; d++) {
    uint32_t dm = dim_mask(uw, d);
    if (!dm || (dm & (used | J))) continue;
    copy_dim(is, d, uw, d);
    copy_dim(us, d, uw, d);
    J |= dm;
  }
  for (int d = 1; d < n->rank; d++) copy_dim(us, ix->rank + d - 1, W, d);
  return J;
}

static int32_t lower_scatter_add(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  const ts_node *ix = &p->g->nodes[n->in[1]], *up = &p->g->nodes[n->in[2]];
  const ts_partition_spec *W = &p->W[id];
  ts_partition_spec is, us, O = *W;
  uint32_t J = scatter_partial_axes(p, id, &is, &us);
  int32_t idx = part_get(p, n->in[1], &is), upd = part_get(p, n->in[2], &us);
  int64_t ls[TS_MAX_RANK], il[TS_MAX_RANK], ul[TS_MAX_RANK];
  part_local_shape(p, W, n->rank, n->shape, ls);
  part_local_shape(p, &is, ix->rank, ix->shape, il);
  part_local_shape(p, &us, up->rank, up->shape, ul);
  if (W->naxes[0]) { /* rows [lo, lo + ls[0]) live here: others' updates masked to 0 */
    int64_t lo = part_tile_index(p, W->axes[0], W->naxes[0]) * ls[0];
    int32_t ok;
    local_rows(p, idx, ix->dtype, ix->rank, il, lo, ls[0], &idx, &ok);
    ts_attr bc = {0}, z = {0};
    bc.n_dims = ix->rank;
    for (int d = 0; d < ix->rank; d++) bc.dims[d] = d;
    int32_t okb = part_emit(p, TS_OP_BROADCAST, TS_BOOL, up->rank, ul, 1, &ok, &bc);
    int32_t zero = part_emit(p, TS_OP_CONSTANT, up->dtype, up->rank, ul, 0, NULL, &z);
    int32_t sel[3] = {okb, upd, zero};
    upd = part_emit(p, TS_OP_SELECT, up->dtype, up->rank, ul, 3, sel, NULL);
  }
  double bv = 1;
  bool zero_base = opt_splat_value(p->g, n->in[0], &bv) && bv == 0;
  if (!J) { /* no partial sums: add into base's block directly */
    int32_t in[3] = {part_get(p, n->in[0], W), idx, upd};
    return part_emit(p, TS_OP_SCATTER_ADD, n->dtype, n->rank, ls, 3, in, NULL);
  }
  if (p->partial[n->in[0]] == J) { /* base is a partial sum over J too (lower_dot): one reduction of both */
    int32_t in[3] = {p->val[n->in[0]], idx, upd};
    int32_t v = part_emit(p, TS_OP_SCATTER_ADD, n->dtype, n->rank, ls, 3, in, NULL);
    return part_reshard(p, v, n->dtype, n->rank, n->shape, O, J, TS_REDUCE_SUM, W);
  }
  ts_attr z = {0};
  int32_t in[3] = {part_emit(p, TS_OP_CONSTANT, n->dtype, n->rank, ls, 0, NULL, &z), idx, upd};
  int32_t v = part_emit(p, TS_OP_SCATTER_ADD, n->dtype, n->rank, ls, 3, in, NULL);
  v = part_reshard(p, v, n->dtype, n->rank, n->shape, O, J, TS_REDUCE_SUM, W);
  if (zero_base) return v;
  int32_t sum[2] = {v, part_get(p, n->in[0], W)};
  return part_emit(p, TS_OP_ADD, n->dtype, n->rank, ls, 2, sum, NULL);
}

/* A node of a manual region: copied as written (its shapes are already the
 * blocks'); its collectives name mesh axes, turned into this device's group. */
static int32_t lower_manual(part *p, int id) {
  const ts_node *n = &p->g->nodes[id];
  if (spmd_is_to_local(n)) return part_get(p, n->in[0], ts_sharding_spec(n->sharding));
  int32_t small[8], *in = n->n_in <= 8 ? small : malloc((size_t)n->n_in * sizeof *in);
  if (!in) {
    error_oom("partition: operands", (size_t)n->n_in * sizeof *in);
    return TS_NONE;
  }
  for (int k = 0; k < n->n_in; k++) in[k] = p->val[n->in[k]];
  int32_t v;
  if (ir_op_is_collective(n->op) && !n->attr.coll)
    v = part_emit_coll(p, n->op, n->dtype, n->rank, n->shape, in[0], n->attr.dims, n->attr.n_dims, n->attr.reduce,
                       n->attr.axis, 0);
  else {
    v = part_emit(p, n->op, n->dtype, n->rank, n->shape, n->n_in, in, &n->attr);
    if (v != TS_NONE && ir_node_copy_owned(&p->L->nodes[v], n) < 0) /* constant data, fused programs */
      v = TS_NONE;
  }
  if (in != small) free(in);
  return v;
}

static int32_t lower(part *p, int id, const ts_partition_spec *in_spec) {
  const ts_node *n = &p->g->nodes[id];
  const ts_partition_spec *W = &p->W[id];
  if (n->manual) return lower_manual(p, id);
  if (spmd_is_from_local(p->g, n)) return p->val[n->in[0]]; /* the blocks, laid out as W (its annotation) */
  int64_t ls[TS_MAX_RANK];
  part_local_shape(p, W, n->rank, n->shape, ls);
  /* Every op has a case and there is no default: a new op in ops.def fails
   * the build (-Werror=switch) until it says how it is partitioned. */
  switch (n->op) {
  TS_OP_CASES_ELEMENTWISE { /* the whole class: operands in the result's layout */
    int32_t in[3];
    for (int k = 0; k < n->n_in; k++) in[k] = part_get(p, n->in[k], W);
    return part_emit(p, n->op, n->dtype, n->rank, ls, n->n_in, in, &n->attr);
  }
  case TS_OP_INPUT: case TS_OP_CONSTANT: case TS_OP_IOTA: case TS_OP_RNG_UNIFORM: case TS_OP_RNG_NORMAL:
    return lower_leaf(p, id, in_spec);
  case TS_OP_BROADCAST: {
    const ts_node *x = &p->g->nodes[n->in[0]];
    ts_partition_spec xs; /* operand dims of size 1 stay whole */
    spec_clear(&xs, x->rank);
    for (int i = 0; i < x->rank; i++)
      if (x->shape[i] == n->shape[n->attr.dims[i]]) copy_dim(&xs, i, W, n->attr.dims[i]);
    int32_t a = part_get(p, n->in[0], &xs);
    return part_emit(p, TS_OP_BROADCAST, n->dtype, n->rank, ls, 1, &a, &n->attr);
  }
  case TS_OP_TRANSPOSE: {
    ts_partition_spec xs;
    spec_clear(&xs, n->rank);
    for (int i = 0; i < n->rank; i++) copy_dim(&xs, n->attr.dims[i], W, i);
    int32_t a = part_get(p, n->in[0], &xs);
    return part_emit(p, TS_OP_TRANSPOSE, n->dtype, n->rank, ls, 1, &a, &n->attr);
  }
  case TS_OP_RESHAPE: return lower_reshape(p, id);
  case TS_OP_DOT: return lower_dot(p, id);
  case TS_OP_REDUCE: return lower_reduce(p, id);
  case TS_OP_CONV: case TS_OP_CONV_BWD_DATA: case TS_OP_CONV_BWD_FILTER: case TS_OP_MAXPOOL:
  case TS_OP_MAXPOOL_GRAD: case TS_OP_AVGPOOL: case TS_OP_AVGPOOL_GRAD:
    return lower_conv(p, id);
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: return lower_attention(p, id);
  case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_GRAD: case TS_OP_LAYERNORM_DGAMMA: return lower_layernorm(p, id);
  case TS_OP_GATHER: return lower_gather(p, id);
  case TS_OP_SCATTER_ADD: return lower_scatter_add(p, id);
  case TS_OP_SLICE: case TS_OP_PAD: case TS_OP_CONCAT: return lower_window(p, id);
  /* replicated: gathered operands, the whole op on every device */
  case TS_OP_FUSED: case TS_OP_ALL_REDUCE: case TS_OP_ALL_GATHER:
  case TS_OP_REDUCE_SCATTER: case TS_OP_ALL_TO_ALL: case TS_OP_COLLECTIVE_PERMUTE: case TS_OP_COUNT:
    break;
  }
  return lower_fallback(p, id);
}

/* Frees the per-node memo lists (memo may be NULL). */
static void memo_free(part_memo **memo, int n) {
  for (int i = 0; memo && i < n; i++)
    for (part_memo *q = memo[i]; q;) {
      part_memo *nx = q->next;
      free(q);
      q = nx;
    }
  free(memo);
}

ts_graph *spmd_partition(const ts_graph *g, const ts_mesh *m, const ts_partition_spec *specs,
                         const ts_partition_spec *in_specs, const ts_partition_spec *out_specs, int device,
                         spmd_coll_list *colls) {
  part p = {0};
  p.g = g;
  p.m = m;
  p.device = device;
  p.colls = colls;
  int64_t flat = -1;
  for (int64_t i = 0; i < m->ndevices; i++)
    if (m->device_ids[i] == device) flat = i;
  if (flat < 0) {
    set_error("partition: device %d is not in the mesh", device);
    return NULL;
  }
  for (int a = m->rank - 1; a >= 0; a--) {
    p.coord[a] = flat % m->shape[a];
    flat /= m->shape[a];
  }
  ts_partition_spec *W = malloc(((size_t)g->n_nodes + 1) * sizeof *W);
  p.val = malloc(((size_t)g->n_nodes + 1) * sizeof *p.val);
  p.memo = calloc((size_t)g->n_nodes + 1, sizeof *p.memo);
  p.partial = calloc((size_t)g->n_nodes + 1, sizeof *p.partial);
  p.L = ts_graph_new();
  if (!W || !p.val || !p.memo || !p.partial || !p.L) {
    error_oom("partition: per-node state", ((size_t)g->n_nodes + 1) * (sizeof *W + sizeof *p.val + sizeof *p.memo));
    goto fail;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    W[i] = specs[i];
    spmd_spec_make_even(m, &W[i], g->nodes[i].shape);
  }
  p.W = W;
  for (int i = 0; i < g->n_nodes; i++) {
    p.cause = i;
    const ts_node *n = &g->nodes[i];
    p.val[i] = lower(&p, i, n->op == TS_OP_INPUT ? &in_specs[n->attr.input_index] : NULL);
    if (p.val[i] == TS_NONE) goto fail; /* out of memory (the only way lowering fails) */
  }
  for (int k = 0; k < g->n_outputs; k++) {
    p.cause = g->outputs[k];
    int32_t v = part_get(&p, g->outputs[k], &out_specs[k]);
    if (v == TS_NONE || ts_graph_add_output(p.L, v) < 0) goto fail;
    int a = g->alias ? g->alias[k] : -1;
    if (a >= 0 && ts_graph_alias_output(p.L, k, p.L->inputs[a]) < 0) goto fail;
  }
  memo_free(p.memo, g->n_nodes);
  free(p.partial);
  free(p.val);
  free(W);
  return p.L;
fail:
  memo_free(p.memo, g->n_nodes);
  free(p.partial);
  free(p.val);
  free(W);
  ts_graph_free(p.L);
  return NULL;
}
