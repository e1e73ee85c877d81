/* propagate.c — sharding propagation (after GSPMD's sharding_propagation):
 * user annotations are fixed; every other node takes the sharding its
 * operands imply (forward sweep) or its users imply (backward sweep), and the
 * sweeps repeat until nothing changes. A candidate replaces a node's current
 * sharding only when it cuts the tensor into more blocks, so the process is
 * monotone and ends (at most N blocks per tensor). Interior shardings are
 * kept even (every sharded dim divisible by its block count). */
#include <stdlib.h>
#include <string.h>

#include "spmd/partition.h"

int64_t spmd_dim_tiles(const ts_mesh *m, const ts_partition_spec *s, int d) {
  int64_t t = 1;
  for (int k = 0; k < s->naxes[d]; k++) t *= m->shape[s->axes[d][k]];
  return t;
}

int64_t spmd_total_tiles(const ts_mesh *m, const ts_partition_spec *s) {
  int64_t t = 1;
  for (int d = 0; d < s->rank; d++) t *= spmd_dim_tiles(m, s, d);
  return t;
}

bool spmd_spec_equal(const ts_partition_spec *a, const ts_partition_spec *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++) {
    if (a->naxes[d] != b->naxes[d]) return false;
    for (int k = 0; k < a->naxes[d]; k++)
      if (a->axes[d][k] != b->axes[d][k]) return false;
  }
  return true;
}

uint32_t spmd_spec_axes(const ts_partition_spec *s) {
  uint32_t mask = 0;
  for (int d = 0; d < s->rank; d++)
    for (int k = 0; k < s->naxes[d]; k++) mask |= 1u << s->axes[d][k];
  return mask;
}

void spmd_spec_make_even(const ts_mesh *m, ts_partition_spec *s, const int64_t *shape) {
  uint32_t used = 0;
  for (int d = 0; d < s->rank; d++) {
    int n = 0;
    for (int k = 0; k < s->naxes[d]; k++) {
      int a = s->axes[d][k];
      if (a < 0 || a >= m->rank || (used & (1u << a)) || m->shape[a] == 1) continue;
      s->axes[d][n++] = a;
    }
    s->naxes[d] = n;
    if (shape[d] % spmd_dim_tiles(m, s, d) != 0) s->naxes[d] = 0;
    for (int k = 0; k < s->naxes[d]; k++) used |= 1u << s->axes[d][k];
  }
}

static void spec_clear(ts_partition_spec *s, int rank) {
  memset(s, 0, sizeof *s);
  s->rank = rank;
}

static void copy_dim(ts_partition_spec *dst, int dd, const ts_partition_spec *src, int sd) {
  dst->naxes[dd] = src->naxes[sd];
  memcpy(dst->axes[dd], src->axes[sd], sizeof dst->axes[dd]);
}

/* Prefix products: pre[d] = product of shape[0..d). */
static void prefixes(int rank, const int64_t *shape, int64_t *pre) {
  int64_t p = 1;
  for (int d = 0; d < rank; d++) {
    pre[d] = p;
    p *= shape[d];
  }
}

/* Reshape: dim d of `to` (shape ts) takes the axes of dim e of `from` (fs)
 * when both start at the same element offset and the block count divides
 * both sizes (then both cut the same contiguous runs). */
static void map_reshape(const ts_mesh *m, const ts_partition_spec *from, int fr, const int64_t *fs,
                        ts_partition_spec *to, int tr, const int64_t *ts) {
  int64_t fp[TS_MAX_RANK], tp[TS_MAX_RANK];
  prefixes(fr, fs, fp);
  prefixes(tr, ts, tp);
  spec_clear(to, tr);
  for (int e = 0; e < fr; e++) {
    int64_t t = spmd_dim_tiles(m, from, e);
    if (t == 1) continue;
    for (int d = 0; d < tr; d++)
      if (tp[d] == fp[e] && ts[d] % t == 0 && fs[e] % t == 0 && ts[d] > 1) {
        copy_dim(to, d, from, e);
        break;
      }
  }
}

/* slice / pad / concatenate: dims the op leaves alone. */
static bool passes_through(const ts_node *n, const ts_node *x, int d) {
  const ts_attr *a = &n->attr;
  switch (n->op) {
  case TS_OP_SLICE: return a->start[d] == 0 && a->limit[d] == x->shape[d] && a->stride[d] == 1;
  case TS_OP_PAD: return a->start[d] == 0 && a->limit[d] == 0;
  default: return d != a->axis;
  }
}

typedef struct {
  const ts_graph *g;
  const ts_mesh *m;
  ts_partition_spec *spec;
  bool *fixed;
  bool changed;
} prop;

static void offer(prop *p, int id, ts_partition_spec cand) {
  if (p->fixed[id]) return;
  const ts_node *n = &p->g->nodes[id];
  cand.rank = n->rank;
  spmd_spec_make_even(p->m, &cand, n->shape);
  if (spmd_total_tiles(p->m, &cand) > spmd_total_tiles(p->m, &p->spec[id])) {
    p->spec[id] = cand;
    p->changed = true;
  }
}

static bool same_shape(const ts_node *a, const ts_node *b) {
  return a->rank == b->rank && memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) == 0;
}

/* Whether node id's layout was annotated, directly or through ops that only
 * rearrange it (a transposed or reshaped parameter). */
static bool anchored(const prop *p, int id) {
  for (int depth = 0; depth < 8; depth++) {
    if (p->fixed[id]) return true;
    const ts_node *n = &p->g->nodes[id];
    if (n->op != TS_OP_TRANSPOSE && n->op != TS_OP_RESHAPE && n->op != TS_OP_CONVERT) return false;
    id = n->in[0];
  }
  return false;
}

/* Forward: the sharding node id's operands imply. */
static void forward(prop *p, int id) {
  const ts_graph *g = p->g;
  const ts_node *n = &g->nodes[id];
  ts_partition_spec c;
  spec_clear(&c, n->rank);
  if (ir_op_is_elementwise(n->op)) {
    for (int k = 0; k < n->n_in; k++)
      if (same_shape(&g->nodes[n->in[k]], n)) offer(p, id, p->spec[n->in[k]]);
    return;
  }
  const ts_node *x = n->n_in ? &g->nodes[n->in[0]] : NULL;
  const ts_partition_spec *xs = n->n_in ? &p->spec[n->in[0]] : NULL;
  switch (n->op) {
  case TS_OP_BROADCAST:
    for (int i = 0; i < x->rank; i++)
      if (x->shape[i] == n->shape[n->attr.dims[i]]) copy_dim(&c, n->attr.dims[i], xs, i);
    break;
  case TS_OP_TRANSPOSE:
    for (int i = 0; i < n->rank; i++) copy_dim(&c, i, xs, n->attr.dims[i]);
    break;
  case TS_OP_RESHAPE:
    map_reshape(p->m, xs, x->rank, x->shape, &c, n->rank, n->shape);
    break;
  case TS_OP_REDUCE: {
    int j = 0;
    for (int i = 0, r = 0; i < x->rank; i++) {
      if (r < n->attr.n_dims && n->attr.dims[r] == i) {
        r++;
        continue;
      }
      copy_dim(&c, j++, xs, i);
    }
    break;
  }
  case TS_OP_DOT: {
    const ts_dot_dims *dd = &n->attr.dot;
    const ts_node *y = &g->nodes[n->in[1]];
    const ts_partition_spec *ys = &p->spec[n->in[1]];
    int o = 0;
    bool from_rhs[TS_MAX_RANK] = {false};
    int src[TS_MAX_RANK] = {0}; /* the operand dim each output dim comes from */
    for (int b = 0; b < dd->n_batch; b++, o++) {
      if (xs->naxes[dd->lhs_batch[b]]) copy_dim(&c, o, xs, dd->lhs_batch[b]), src[o] = dd->lhs_batch[b];
      else copy_dim(&c, o, ys, dd->rhs_batch[b]), from_rhs[o] = true, src[o] = dd->rhs_batch[b];
    }
    for (int pass = 0; pass < 2; pass++) {
      const ts_node *t = pass ? y : x;
      const ts_partition_spec *ts = pass ? ys : xs;
      const int *bat = pass ? dd->rhs_batch : dd->lhs_batch, *con = pass ? dd->rhs_contract : dd->lhs_contract;
      for (int i = 0; i < t->rank; i++) {
        bool skip = false;
        for (int k = 0; k < dd->n_batch; k++) skip |= bat[k] == i;
        for (int k = 0; k < dd->n_contract; k++) skip |= con[k] == i;
        if (!skip) from_rhs[o] = pass, src[o] = i, copy_dim(&c, o++, ts, i);
      }
    }
    /* A mesh axis splitting a dim from each side (an activation split on
     * the sequence, a weight on its features): the side whose layout was
     * annotated keeps it and the other side is gathered (Megatron: the
     * weights stay split, the activations move), unless the other side's
     * dim is its leading (batch) dim (FSDP: the batch stays split, the
     * weights are gathered); else the lhs keeps it. */
    uint32_t on[2] = {0, 0}, lead = 0;
    for (int d = 0; d < n->rank; d++)
      for (int k = 0; k < c.naxes[d]; k++) {
        on[from_rhs[d]] |= 1u << c.axes[d][k];
        if (!from_rhs[d] && src[d] == 0) lead |= 1u << c.axes[d][k];
      }
    if (on[0] & on[1]) {
      bool rhs_wins = anchored(p, n->in[1]) && !anchored(p, n->in[0]) && !(lead & on[0] & on[1]);
      for (int d = 0; d < n->rank; d++) {
        if (from_rhs[d] == rhs_wins) continue;
        uint32_t dm = 0;
        for (int k = 0; k < c.naxes[d]; k++) dm |= 1u << c.axes[d][k];
        if (dm & on[rhs_wins]) c.naxes[d] = 0;
      }
    }
    break;
  }
  case TS_OP_SLICE: case TS_OP_PAD: case TS_OP_CONCAT:
    for (int d = 0; d < n->rank; d++)
      if (passes_through(n, x, d)) copy_dim(&c, d, xs, d);
    break;
  case TS_OP_CONV: /* (N, O, ..) from x's N and w's O (O: dim 3 in NHWC) */
    copy_dim(&c, 0, xs, 0);
    copy_dim(&c, ir_chan_dim(n->attr.conv.layout), &p->spec[n->in[1]], 0);
    break;
  case TS_OP_CONV_BWD_DATA: /* (N, C, ..) from dy's N and w's C */
    copy_dim(&c, 0, xs, 0);
    copy_dim(&c, ir_chan_dim(n->attr.conv.layout), &p->spec[n->in[1]], 1);
    break;
  case TS_OP_MAXPOOL: case TS_OP_AVGPOOL: case TS_OP_MAXPOOL_GRAD: case TS_OP_AVGPOOL_GRAD: {
    int cd = ir_chan_dim(n->attr.pool.layout);
    copy_dim(&c, 0, xs, 0);
    copy_dim(&c, cd, xs, cd);
    break;
  }
  case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_GRAD: /* rows split like x's (or dy's); the last dim whole */
    for (int d = 0; d + 1 < n->rank; d++) copy_dim(&c, d, xs, d);
    if (n->op == TS_OP_LAYERNORM_GRAD && spmd_total_tiles(p->m, &c) == 1)
      for (int d = 0; d + 1 < n->rank; d++) copy_dim(&c, d, &p->spec[n->in[2]], d);
    break;
  case TS_OP_LAYERNORM_DGAMMA: /* (D): a sum over the rows, replicated */
    break;
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: /* qkv (B, T, 3, H, Dh): B and H; y (B, T, H, Dh) */
    copy_dim(&c, 0, xs, 0);
    copy_dim(&c, n->op == TS_OP_ATTENTION ? 2 : 3, xs, 3);
    break;
  case TS_OP_GATHER: { // out = indices dims ++ table dims 1..
    const ts_node *ix = &g->nodes[n->in[1]];
    for (int i = 0; i < ix->rank; i++) copy_dim(&c, i, &p->spec[n->in[1]], i);
    for (int i = 1; i < x->rank; i++) copy_dim(&c, ix->rank + i - 1, xs, i);
    break;
  }
  case TS_OP_SCATTER_ADD: /* the result is laid out like base */
    c = *xs;
    break;
  /* no forward rule: leaves, elementwise (above, by class), fused and
   * collectives (made after propagation), and none written yet for
   * conv2d_bwd_filter (partitioned as it comes) */
  TS_OP_CASES_ELEMENTWISE
  case TS_OP_INPUT: case TS_OP_CONSTANT: case TS_OP_IOTA: case TS_OP_RNG_UNIFORM: case TS_OP_RNG_NORMAL:
  case TS_OP_CONV_BWD_FILTER: case TS_OP_FUSED: case TS_OP_ALL_REDUCE:
  case TS_OP_ALL_GATHER: case TS_OP_REDUCE_SCATTER: case TS_OP_ALL_TO_ALL: case TS_OP_COLLECTIVE_PERMUTE:
  case TS_OP_COUNT:
    return;
  }
  offer(p, id, c);
}

/* Backward: what node id's sharding implies for its operands. */
static void backward(prop *p, int id) {
  const ts_graph *g = p->g;
  const ts_node *n = &g->nodes[id];
  const ts_partition_spec *ns = &p->spec[id];
  if (spmd_is_to_local(n)) { /* the operand is wanted in the region's layout */
    offer(p, n->in[0], *ts_sharding_spec(n->sharding));
    return;
  }
  if (spmd_total_tiles(p->m, ns) == 1) return;
  if (ir_op_is_elementwise(n->op)) {
    for (int k = 0; k < n->n_in; k++)
      if (same_shape(&g->nodes[n->in[k]], n)) offer(p, n->in[k], *ns);
    return;
  }
  if (!n->n_in) return;
  const ts_node *x = &g->nodes[n->in[0]];
  ts_partition_spec c;
  spec_clear(&c, x->rank);
  switch (n->op) {
  case TS_OP_BROADCAST:
    for (int i = 0; i < x->rank; i++)
      if (x->shape[i] == n->shape[n->attr.dims[i]]) copy_dim(&c, i, ns, n->attr.dims[i]);
    offer(p, n->in[0], c);
    break;
  case TS_OP_TRANSPOSE:
    for (int i = 0; i < n->rank; i++) copy_dim(&c, n->attr.dims[i], ns, i);
    offer(p, n->in[0], c);
    break;
  case TS_OP_RESHAPE:
    map_reshape(p->m, ns, n->rank, n->shape, &c, x->rank, x->shape);
    offer(p, n->in[0], c);
    break;
  case TS_OP_REDUCE: {
    c = p->spec[n->in[0]];
    int j = 0;
    for (int i = 0, r = 0; i < x->rank; i++) {
      if (r < n->attr.n_dims && n->attr.dims[r] == i) {
        r++;
        continue;
      }
      copy_dim(&c, i, ns, j++);
    }
    offer(p, n->in[0], c);
    break;
  }
  case TS_OP_SLICE: case TS_OP_PAD: case TS_OP_CONCAT:
    for (int k = 0; k < n->n_in; k++) {
      spec_clear(&c, x->rank);
      for (int d = 0; d < n->rank; d++)
        if (passes_through(n, x, d)) copy_dim(&c, d, ns, d);
      offer(p, n->in[k], c);
    }
    break;
  case TS_OP_CONV: /* x's N from out's N, w's O from out's O */
    copy_dim(&c, 0, ns, 0);
    offer(p, n->in[0], c);
    spec_clear(&c, 4);
    copy_dim(&c, 0, ns, ir_chan_dim(n->attr.conv.layout));
    offer(p, n->in[1], c);
    break;
  case TS_OP_MAXPOOL: case TS_OP_AVGPOOL: case TS_OP_AVGPOOL_GRAD: {
    int cd = ir_chan_dim(n->attr.pool.layout);
    copy_dim(&c, 0, ns, 0);
    copy_dim(&c, cd, ns, cd);
    offer(p, n->in[0], c);
    break;
  }
  case TS_OP_SCATTER_ADD: /* base is laid out like the result */
    offer(p, n->in[0], *ns);
    break;
  case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_GRAD: /* x (and dy) split on the result's rows */
    spec_clear(&c, n->rank);
    for (int d = 0; d + 1 < n->rank; d++) copy_dim(&c, d, ns, d);
    offer(p, n->in[0], c);
    if (n->op == TS_OP_LAYERNORM_GRAD) offer(p, n->in[2], c);
    break;
  case TS_OP_LAYERNORM_DGAMMA: /* x and dy alike on their rows */
    spec_clear(&c, x->rank);
    for (int d = 0; d + 1 < x->rank; d++) copy_dim(&c, d, &p->spec[n->in[0]], d);
    offer(p, n->in[1], c);
    spec_clear(&c, x->rank);
    for (int d = 0; d + 1 < x->rank; d++) copy_dim(&c, d, &p->spec[n->in[1]], d);
    offer(p, n->in[0], c);
    break;
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: { /* qkv and dy split on the result's B and H */
    int h = n->op == TS_OP_ATTENTION ? 2 : 3;
    spec_clear(&c, 5);
    copy_dim(&c, 0, ns, 0);
    copy_dim(&c, 3, ns, h);
    offer(p, n->in[0], c);
    if (n->op == TS_OP_ATTENTION_GRAD) {
      spec_clear(&c, 4);
      copy_dim(&c, 0, ns, 0);
      copy_dim(&c, 2, ns, h);
      offer(p, n->in[1], c);
    }
    break;
  }
  case TS_OP_DOT: {
    const ts_dot_dims *dd = &n->attr.dot;
    for (int side = 0; side < 2; side++) {
      const ts_node *t = &g->nodes[n->in[side]];
      const ts_partition_spec *other = &p->spec[n->in[1 - side]];
      const int *bat = side ? dd->rhs_batch : dd->lhs_batch, *con = side ? dd->rhs_contract : dd->lhs_contract;
      const int *ocon = side ? dd->lhs_contract : dd->rhs_contract;
      spec_clear(&c, t->rank);
      for (int b = 0; b < dd->n_batch; b++) copy_dim(&c, bat[b], ns, b);
      /* free dims: out positions after the batch dims and the lhs free dims */
      int o = dd->n_batch;
      if (side) o += x->rank - dd->n_batch - dd->n_contract;
      for (int i = 0; i < t->rank; i++) {
        bool skip = false;
        for (int k = 0; k < dd->n_batch; k++) skip |= bat[k] == i;
        for (int k = 0; k < dd->n_contract; k++) skip |= con[k] == i;
        if (!skip) copy_dim(&c, i, ns, o++);
      }
      for (int k = 0; k < dd->n_contract; k++) copy_dim(&c, con[k], other, ocon[k]);
      offer(p, n->in[side], c);
    }
    break;
  }
  /* no backward rule: the operands keep what other users ask of them */
  TS_OP_CASES_ELEMENTWISE
  case TS_OP_INPUT: case TS_OP_CONSTANT: case TS_OP_IOTA: case TS_OP_RNG_UNIFORM: case TS_OP_RNG_NORMAL:
  case TS_OP_CONV_BWD_DATA: case TS_OP_CONV_BWD_FILTER: case TS_OP_MAXPOOL_GRAD: case TS_OP_GATHER:
  case TS_OP_FUSED: case TS_OP_ALL_REDUCE: case TS_OP_ALL_GATHER:
  case TS_OP_REDUCE_SCATTER: case TS_OP_ALL_TO_ALL: case TS_OP_COLLECTIVE_PERMUTE: case TS_OP_COUNT:
    break;
  }
}

int spmd_propagate(const ts_graph *g, const ts_mesh *m, ts_partition_spec *specs, bool *fixed_out) {
  bool *fixed = calloc((size_t)g->n_nodes + 1, sizeof *fixed);
  if (!fixed) return set_error_code(TS_ERR_OUT_OF_MEMORY, "propagate: out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    spec_clear(&specs[i], n->rank);
    if (n->manual) { /* per-device values: not sharded, left as written */
      fixed[i] = true;
      continue;
    }
    if (!n->sharding) continue;
    const ts_mesh *am = ts_sharding_mesh(n->sharding);
    bool same = am->rank == m->rank && memcmp(am->shape, m->shape, sizeof m->shape) == 0 &&
                memcmp(am->device_ids, m->device_ids, (size_t)m->ndevices * sizeof *m->device_ids) == 0;
    if (!same) {
      free(fixed);
      return set_error("propagate: node %%%d (%s) is marked with a sharding on a different mesh than the "
                          "program's (%lld devices)", i, ir_op_name(n->op), (long long)m->ndevices);
    }
    specs[i] = *ts_sharding_spec(n->sharding);
    fixed[i] = true;
  }
  prop p = {g, m, specs, fixed, true};
  for (int iter = 0; p.changed && iter < 64; iter++) {
    p.changed = false;
    for (int i = 0; i < g->n_nodes; i++) forward(&p, i);
    for (int i = g->n_nodes - 1; i >= 0; i--) backward(&p, i);
  }
  if (fixed_out) memcpy(fixed_out, fixed, (size_t)g->n_nodes * sizeof *fixed);
  free(fixed);
  return 0;
}
