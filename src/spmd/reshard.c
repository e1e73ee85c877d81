/* reshard.c — moving a value of a per-device program from one sharding to
 * another with the cheapest correct collectives: a pending partial reduction
 * becomes a reduce-scatter where the target splits a dim over the partial
 * axes beyond the ones the dim has (else an all-reduce); a dim moving from
 * one axis to another dim becomes an all-to-all; a dim moving to another
 * mesh axis of the same size, or split over the target's axes in another
 * order (b, a -> a, b), a collective-permute; other dims that lose axes are
 * all-gathered (over the lost minor axes only where the target keeps the
 * major ones); dims
 * that gain axes are sliced locally (no communication). Uneven dims (only at
 * program inputs and outputs) are padded on the right and sliced off. */
#include <stdlib.h>
#include <string.h>

#include "spmd/part_internal.h"

void part_local_shape(const part *p, const ts_partition_spec *s, int rank, const int64_t *shape, int64_t *out) {
  for (int d = 0; d < rank; d++) {
    int64_t t = spmd_dim_tiles(p->m, s, d);
    out[d] = (shape[d] + t - 1) / t;
  }
}

int64_t part_tile_index(const part *p, const int *axes, int n) {
  int64_t t = 0;
  for (int k = 0; k < n; k++) t = t * p->m->shape[axes[k]] + p->coord[axes[k]];
  return t;
}

/* Device ids of this device's group over mesh axes (major to minor): the
 * devices whose coordinates differ from ours only on those axes, ordered by
 * their block index. Returns the group size (-1: out of memory). */
static int group_ids(const part *p, const int *axes, int n, int32_t **out) {
  int64_t size = 1;
  for (int k = 0; k < n; k++) size *= p->m->shape[axes[k]];
  int32_t *ids = malloc((size_t)size * sizeof *ids);
  if (!ids) return error_oom("partition: a collective's device group", (size_t)size * sizeof *ids);
  for (int64_t r = 0; r < size; r++) {
    int64_t c[TS_MESH_MAX_RANK];
    for (int a = 0; a < p->m->rank; a++) c[a] = p->coord[a];
    int64_t rest = r;
    for (int k = n - 1; k >= 0; k--) {
      c[axes[k]] = rest % p->m->shape[axes[k]];
      rest /= p->m->shape[axes[k]];
    }
    int64_t flat = 0;
    for (int a = 0; a < p->m->rank; a++) flat = flat * p->m->shape[a] + c[a];
    ids[r] = p->m->device_ids[flat];
  }
  *out = ids;
  return (int)size;
}

int32_t part_emit(part *p, ts_op op, ts_dtype dt, int rank, const int64_t *shape, int n_in, const int32_t *in,
                  const ts_attr *attr) {
  for (int k = 0; k < n_in; k++)
    if (in[k] == TS_NONE) return TS_NONE; /* an earlier emit failed (out of memory) */
  ts_attr a = {0};
  if (attr) a = *attr;
  a.fused = NULL;
  a.coll = NULL;
  return ir_append(p->L, op, dt, rank, shape, n_in, in, &a);
}

static const ts_collective_kind kind_of[] = {TS_COLLECTIVE_ALL_REDUCE, TS_COLLECTIVE_ALL_GATHER,
                                             TS_COLLECTIVE_REDUCE_SCATTER, TS_COLLECTIVE_ALL_TO_ALL,
                                             TS_COLLECTIVE_PERMUTE};

/* Appends one entry to the list of collectives (-1: out of memory). */
static int coll_list_push(spmd_coll_list *l, ts_collective_info info) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    ts_collective_info *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return error_oom("partition: the list of collectives", (size_t)cap * sizeof *v);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = info;
  return 0;
}

/* Appends collective op over mesh axes to L and records it. */
int32_t part_emit_coll(part *p, ts_op op, ts_dtype dt, int rank, const int64_t *shape, int32_t v, const int *axes,
                         int n, ts_reduce_kind kind, int axis, int dim2) {
  ts_attr a = {0};
  a.reduce = kind;
  a.axis = axis;
  a.dims[0] = dim2;
  a.n_dims = op == TS_OP_ALL_TO_ALL ? 1 : 0;
  if (v == TS_NONE) return TS_NONE; /* an earlier emit failed */
  ts_collective *c = malloc(sizeof *c);
  if (!c || (c->n = group_ids(p, axes, n, &c->ids)) < 0) {
    free(c);
    error_oom("partition: a collective", sizeof *c);
    return TS_NONE;
  }
  a.coll = c; /* taken over by ir_append */
  int32_t t = ir_append(p->L, op, dt, rank, shape, 1, &v, &a);
  if (t == TS_NONE) return TS_NONE;
  if (p->colls) {
    spmd_coll_list *l = p->colls;
    uint32_t mask = 0;
    for (int k = 0; k < n; k++) mask |= 1u << axes[k];
    const ts_node *src = &p->L->nodes[v], *dst = &p->L->nodes[t];
    const ts_node *counted = op == TS_OP_ALL_GATHER ? dst : src;
    size_t bytes = (size_t)ts_shape_numel(counted->rank, counted->shape) * ts_dtype_size(dt);
    int cause = p->cause >= 0 ? p->cause : 0;
    if (coll_list_push(l, (ts_collective_info){kind_of[op - TS_OP_ALL_REDUCE], mask, c->n, bytes, cause,
                                               ir_op_name(p->g->nodes[cause].op)}) < 0)
      return TS_NONE;
  }
  return t;
}

/* The mesh coordinates of flat device index f. */
static void mesh_coords(const ts_mesh *m, int64_t f, int64_t *co) {
  for (int k = m->rank - 1; k >= 0; k--) {
    co[k] = f % m->shape[k];
    f /= m->shape[k];
  }
}

static int64_t mesh_flat(const ts_mesh *m, const int64_t *co) {
  int64_t f = 0;
  for (int k = 0; k < m->rank; k++) f = f * m->shape[k] + co[k];
  return f;
}

/* Collective-permute of this device's block: for a block moving from axis
 * a to axis b (na == 0), device d receives from the device at d's
 * coordinates with coordinate a := d's b; for a dim whose mesh axes `from`
 * (na of them) become the same axes in the order `to` (a reduce-scatter into
 * a dim already split over a later axis: b then a, wanted a then b), from
 * the device whose block in `from`'s order is d's in `to`'s. */
static int32_t emit_permute(part *p, ts_dtype dt, int rank, const int64_t *shape, int32_t v, int a, int b,
                            const int *from, const int *to, int na) {
  const ts_mesh *m = p->m;
  if (v == TS_NONE) return TS_NONE; /* an earlier emit failed */
  ts_collective *c = malloc(sizeof *c);
  if (c) c->ids = malloc((size_t)m->ndevices * 2 * sizeof *c->ids);
  if (!c || !c->ids) {
    free(c);
    error_oom("partition: a collective-permute", (size_t)m->ndevices * 2 * sizeof *c->ids);
    return TS_NONE;
  }
  c->n = (int)m->ndevices;
  uint32_t mask = na ? 0 : (1u << a) | (1u << b);
  for (int64_t f = 0; f < m->ndevices; f++) {
    int64_t co[TS_MESH_MAX_RANK], t = 0;
    mesh_coords(m, f, co);
    if (!na) co[a] = co[b];
    for (int k = 0; k < na; k++) t = t * m->shape[to[k]] + co[to[k]], mask |= 1u << to[k];
    for (int k = na - 1; k >= 0; k--) co[from[k]] = t % m->shape[from[k]], t /= m->shape[from[k]];
    c->ids[2 * f] = m->device_ids[mesh_flat(m, co)];
    c->ids[2 * f + 1] = m->device_ids[f];
  }
  ts_attr at = {0};
  at.coll = c; /* taken over by ir_append */
  int32_t t = ir_append(p->L, TS_OP_COLLECTIVE_PERMUTE, dt, rank, shape, 1, &v, &at);
  if (t == TS_NONE) return TS_NONE;
  if (p->colls) {
    spmd_coll_list *l = p->colls;
    int cause = p->cause >= 0 ? p->cause : 0;
    size_t bytes = (size_t)ts_shape_numel(rank, shape) * ts_dtype_size(dt);
    if (coll_list_push(l, (ts_collective_info){TS_COLLECTIVE_PERMUTE, mask, 2, bytes, cause,
                                               ir_op_name(p->g->nodes[cause].op)}) < 0)
      return TS_NONE;
  }
  return t;
}

static bool dim_equal(const ts_partition_spec *a, int da, const ts_partition_spec *b, int db) {
  return a->naxes[da] == b->naxes[db] && memcmp(a->axes[da], b->axes[db], (size_t)a->naxes[da] * sizeof(int)) == 0;
}

static bool is_prefix(const ts_partition_spec *a, const ts_partition_spec *b, int d) {
  return a->naxes[d] <= b->naxes[d] && memcmp(a->axes[d], b->axes[d], (size_t)a->naxes[d] * sizeof(int)) == 0;
}

static uint32_t dim_mask(const ts_partition_spec *s, int d) {
  uint32_t m = 0;
  for (int k = 0; k < s->naxes[d]; k++) m |= 1u << s->axes[d][k];
  return m;
}

int32_t part_reshard(part *p, int32_t v, ts_dtype dt, int rank, const int64_t *shape, ts_partition_spec S,
                     uint32_t P, ts_reduce_kind kind, const ts_partition_spec *T) {
  const ts_mesh *m = p->m;
  int64_t cur[TS_MAX_RANK];
  part_local_shape(p, &S, rank, shape, cur);
  /* 0. a pending reduction: reduce-scatter into a dim the target splits over
   * the partial axes, all-reduce over the rest */
  if (P && kind == TS_REDUCE_SUM) {
    for (int e = 0; e < rank; e++) {
      /* the target's axes on e beyond the ones e has (those of them in P):
       * scattered into each block of e, they follow e's axes */
      uint32_t sm = dim_mask(&S, e), tm = dim_mask(T, e) & ~sm;
      if ((sm & ~dim_mask(T, e)) || !tm || (tm & ~P) || shape[e] % spmd_dim_tiles(m, T, e)) continue;
      int rs[TS_MESH_MAX_RANK] = {0}, n = 0;
      int64_t g = 1;
      for (int k = 0; k < T->naxes[e]; k++)
        if (tm & (1u << T->axes[e][k])) rs[n++] = T->axes[e][k], g *= m->shape[T->axes[e][k]];
      int64_t out[TS_MAX_RANK];
      memcpy(out, cur, sizeof out);
      out[e] = cur[e] / g;
      v = part_emit_coll(p, TS_OP_REDUCE_SCATTER, dt, rank, out, v, rs, n, kind, e, 0);
      for (int k = 0; k < n; k++) S.axes[e][S.naxes[e]++] = rs[k];
      memcpy(cur, out, sizeof cur);
      P &= ~tm;
      break;
    }
  }
  if (P) {
    int axes[TS_MESH_MAX_RANK], n = 0;
    for (int a = 0; a < m->rank; a++)
      if (P & (1u << a)) axes[n++] = a;
    v = part_emit_coll(p, TS_OP_ALL_REDUCE, dt, rank, cur, v, axes, n, kind, 0, 0);
  }
  /* 1a. dim i goes from axes A to none (or to axes other than A) while dim
   * j goes from none to A; repeated, so a chain of moves (a: dim 0 -> 1
   * while b: dim 2 -> 0) is one all-to-all each, not a gather of both */
  for (int pass = 0, moved = 1; moved && pass < rank; pass++)
  for (int i = moved = 0; i < rank; i++) {
    if (!S.naxes[i] || (dim_mask(T, i) & dim_mask(&S, i))) continue;
    int64_t t = spmd_dim_tiles(m, &S, i);
    if (shape[i] % t) continue;
    for (int j = 0; j < rank; j++) {
      if (j == i || S.naxes[j] || !dim_equal(T, j, &S, i) || shape[j] % t) continue;
      int64_t out[TS_MAX_RANK];
      memcpy(out, cur, sizeof out);
      out[i] = shape[i];
      out[j] = cur[j] / t;
      v = part_emit_coll(p, TS_OP_ALL_TO_ALL, dt, rank, out, v, S.axes[i], S.naxes[i], TS_REDUCE_SUM, j, i);
      S.naxes[j] = T->naxes[j];
      memcpy(S.axes[j], T->axes[j], sizeof S.axes[j]);
      S.naxes[i] = 0;
      memcpy(cur, out, sizeof cur);
      moved = 1;
      break;
    }
  }
  /* 1b. a dim moving from mesh axis a to an axis b of the same size, neither
   * used elsewhere: each device fetches its new block from one peer */
  for (int e = 0; e < rank; e++) {
    if (S.naxes[e] != 1 || T->naxes[e] != 1) continue;
    int a = S.axes[e][0], b = T->axes[e][0];
    if (a == b || m->shape[a] != m->shape[b] || shape[e] % m->shape[a]) continue;
    if ((spmd_spec_axes(&S) & (1u << b)) || (spmd_spec_axes(T) & (1u << a))) continue;
    v = emit_permute(p, dt, rank, cur, v, a, b, NULL, NULL, 0);
    S.axes[e][0] = b;
  }
  /* 1c. a dim split over the target's axes in another order: the blocks permuted */
  for (int e = 0; e < rank; e++) {
    if (S.naxes[e] < 2 || dim_equal(&S, e, T, e) || dim_mask(&S, e) != dim_mask(T, e) ||
        S.naxes[e] != T->naxes[e] || shape[e] % spmd_dim_tiles(m, T, e))
      continue;
    v = emit_permute(p, dt, rank, cur, v, 0, 0, S.axes[e], T->axes[e], S.naxes[e]);
    memcpy(S.axes[e], T->axes[e], sizeof S.axes[e]);
  }
  /* 1d. dims whose axes are not a prefix of the target's: gather them whole */
  for (int e = 0; e < rank; e++) {
    if (!S.naxes[e] || dim_equal(&S, e, T, e)) continue;
    bool even = shape[e] % spmd_dim_tiles(m, T, e) == 0 && shape[e] % spmd_dim_tiles(m, &S, e) == 0;
    if (even && is_prefix(&S, T, e)) continue;
    int64_t out[TS_MAX_RANK];
    memcpy(out, cur, sizeof out);
    /* the target's axes a prefix of ours (a, b -> a): the target's block is
     * the blocks of our group over the remaining minor axes, in their order:
     * gather over those only */
    int k = even && is_prefix(T, &S, e) ? T->naxes[e] : 0;
    int64_t g = 1;
    for (int j = k; j < S.naxes[e]; j++) g *= m->shape[S.axes[e][j]];
    out[e] = cur[e] * g;
    v = part_emit_coll(p, TS_OP_ALL_GATHER, dt, rank, out, v, S.axes[e] + k, S.naxes[e] - k, TS_REDUCE_SUM, e, 0);
    if (k) {
      memcpy(cur, out, sizeof cur);
      S.naxes[e] = k;
      continue;
    }
    memcpy(cur, out, sizeof cur);
    if (out[e] != shape[e]) { /* drop the padding of an uneven dim */
      ts_attr a = {0};
      for (int d = 0; d < rank; d++) {
        a.limit[d] = cur[d];
        a.stride[d] = 1;
      }
      a.limit[e] = shape[e];
      cur[e] = shape[e];
      v = part_emit(p, TS_OP_SLICE, dt, rank, cur, 1, &v, &a);
    }
    S.naxes[e] = 0;
  }
  /* 2. dims that gain axes: keep this device's block (padded if short) */
  ts_attr sl = {0}, pad = {0};
  bool any = false, padded = false;
  for (int d = 0; d < rank; d++) {
    sl.limit[d] = cur[d];
    sl.stride[d] = 1;
  }
  for (int e = 0; e < rank; e++) {
    if (dim_equal(&S, e, T, e)) continue;
    int64_t B = (shape[e] + spmd_dim_tiles(m, T, e) - 1) / spmd_dim_tiles(m, T, e);
    int64_t gs = part_tile_index(p, T->axes[e], T->naxes[e]) * B;
    if (gs > shape[e]) gs = shape[e];
    int64_t gl = gs + B < shape[e] ? gs + B : shape[e];
    int64_t base = part_tile_index(p, S.axes[e], S.naxes[e]) * cur[e];
    sl.start[e] = gs - base;
    sl.limit[e] = gl - base;
    pad.limit[e] = B - (gl - gs);
    padded |= pad.limit[e] > 0;
    any = true;
  }
  if (any) {
    int64_t out[TS_MAX_RANK];
    for (int d = 0; d < rank; d++) out[d] = sl.limit[d] - sl.start[d];
    v = part_emit(p, TS_OP_SLICE, dt, rank, out, 1, &v, &sl);
    if (padded) {
      for (int d = 0; d < rank; d++) out[d] += pad.limit[d];
      v = part_emit(p, TS_OP_PAD, dt, rank, out, 1, &v, &pad);
    }
  }
  return v;
}

int32_t part_get(part *p, int32_t node, const ts_partition_spec *T) {
  if (spmd_spec_equal(&p->W[node], T)) return p->val[node];
  for (part_memo *q = p->memo[node]; q; q = q->next)
    if (spmd_spec_equal(&q->spec, T)) return q->id;
  const ts_node *n = &p->g->nodes[node];
  int32_t v = part_reshard(p, p->val[node], n->dtype, n->rank, n->shape, p->W[node], 0, TS_REDUCE_SUM, T);
  part_memo *q = v == TS_NONE ? NULL : malloc(sizeof *q);
  if (!q) { /* not memoized: the caller stops at the TS_NONE */
    if (v != TS_NONE) error_oom("partition: a memo entry", sizeof *q);
    return TS_NONE;
  }
  q->spec = *T;
  q->id = v;
  q->next = p->memo[node];
  p->memo[node] = q;
  return v;
}
