/* combine.c — collective combining (opt.h opt_combine): the gradient
 * all-reduces of a per-device program that share a device group, dtype and
 * reduction are packed into buckets of about `bucket_bytes` (XLA's
 * AllReduceCombiner, DDP's buckets), so a step makes a few collective calls
 * instead of one per gradient; reduce-scatters along dim 0 (FSDP's gradient
 * reduce-scatters) the same way. An all-reduce bucket is the flattened
 * members concatenated, one all-reduce, then each member's slice reshaped
 * back; a reduce-scatter bucket views each member as (group, rest) — row k
 * is member k's block — concatenates along dim 1 and scatters dim 0. Each
 * element is still reduced over the same members in the same order, so the
 * result is bit-identical to the uncombined program.
 *
 * Placement: the bucket's all-reduce goes where its last member was (the
 * schedule pass then moves it, with its packing, to right after its last
 * operand); each member's slice goes right before the member's first user,
 * so the nodes in between overlap with the all-reduce (compile.c marks it
 * asynchronous). A member whose gradient is at least bucket_bytes stays
 * alone: packing it would only copy it. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h"

typedef struct {
  int *member;    /* (n) node ids of the original all-reduces, in node order */
  int n, cap;
  size_t bytes;
} bucket;

typedef struct {
  const ts_graph *g;
  size_t bucket_bytes;
  int *of;          /* per node: bucket index of an all-reduce member, or -1 */
  bucket *b;
  int nb, cap_b;
} plan;

static size_t node_bytes(const ts_node *n) { return (size_t)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(n->dtype); }

/* A collective that can join a bucket: an all-reduce, or a reduce-scatter
 * of dim 0, over a real group, not inside a manual region. */
static bool combinable(const ts_graph *g, const ts_node *n) {
  if (!n->attr.coll || n->attr.coll->n < 2 || n->manual) return false;
  if (n->op == TS_OP_ALL_REDUCE) return true;
  const ts_node *x = &g->nodes[n->in[0]];
  return n->op == TS_OP_REDUCE_SCATTER && n->attr.axis == 0 && x->rank >= 1 && x->shape[0] % n->attr.coll->n == 0;
}

static bool same_kind(const ts_node *a, const ts_node *b) {
  return a->op == b->op && a->attr.axis == b->attr.axis && a->dtype == b->dtype &&
         a->attr.reduce == b->attr.reduce && a->attr.coll->n == b->attr.coll->n &&
         memcmp(a->attr.coll->ids, b->attr.coll->ids, (size_t)a->attr.coll->n * sizeof *a->attr.coll->ids) == 0;
}

static int add_member(plan *p, int bi, int id) {
  bucket *b = &p->b[bi];
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 8;
    int *m = realloc(b->member, (size_t)cap * sizeof *m);
    if (!m) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory combining collectives");
    b->member = m;
    b->cap = cap;
  }
  b->member[b->n++] = id;
  b->bytes += node_bytes(&p->g->nodes[p->g->nodes[id].in[0]]); /* the operand: what is packed */
  p->of[id] = bi;
  return 0;
}

static int new_bucket(plan *p) {
  if (p->nb == p->cap_b) {
    int cap = p->cap_b ? 2 * p->cap_b : 8;
    bucket *b = realloc(p->b, (size_t)cap * sizeof *b);
    if (!b) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory combining collectives");
    p->b = b;
    p->cap_b = cap;
  }
  memset(&p->b[p->nb], 0, sizeof p->b[p->nb]);
  return p->nb++;
}

/* Forms the buckets in node order. A bucket stays open while nothing reads
 * its members' results (their users run after the combined all-reduce; a
 * member feeding a later member would make a cycle) and it is below
 * bucket_bytes. open[k] is the open bucket of kind k (kinds are compared
 * with their first member). */
static int form_buckets(plan *p) {
  const ts_graph *g = p->g;
  int *open = malloc(((size_t)g->n_nodes + 1) * sizeof *open); /* open bucket per kind slot */
  int n_open = 0;
  if (!open) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory combining collectives");
  int rc = 0;
  for (int id = 0; id < g->n_nodes && rc == 0; id++) {
    const ts_node *n = &g->nodes[id];
    /* a node reading a member (a reshape too: it is copied where it stands)
     * closes that member's bucket */
    for (int k = 0; k < n->n_in; k++) {
      int bi = p->of[n->in[k]];
      for (int o = 0; bi >= 0 && o < n_open; o++)
        if (open[o] == bi) open[o] = open[--n_open];
    }
    if (!combinable(g, n)) continue;
    if (node_bytes(&g->nodes[n->in[0]]) >= p->bucket_bytes) continue; /* large: alone, no packing */
    int slot = -1;
    for (int o = 0; o < n_open && slot < 0; o++)
      if (same_kind(&g->nodes[p->b[open[o]].member[0]], n)) slot = o;
    if (slot < 0) {
      int bi = new_bucket(p);
      if (bi < 0) rc = -1;
      else open[slot = n_open++] = bi;
    }
    if (rc == 0) rc = add_member(p, open[slot], id);
    if (rc == 0 && p->b[open[slot]].bytes >= p->bucket_bytes) open[slot] = open[--n_open];
  }
  free(open);
  return rc;
}

/* Elements of member m in one row of its bucket: all of it for an
 * all-reduce, one group member's block for a reduce-scatter. */
static int64_t row_len(const ts_graph *g, const ts_node *m) {
  const ts_node *x = &g->nodes[m->in[0]];
  int64_t numel = ts_shape_numel(x->rank, x->shape);
  return m->op == TS_OP_REDUCE_SCATTER ? numel / m->attr.coll->n : numel;
}

/* Emits bucket b's packing and collective into dst (at its last member);
 * returns the collective's id. */
static ts_tensor emit_bucket(ts_graph *dst, const ts_graph *g, const bucket *b, const int32_t *map) {
  const ts_node *first = &g->nodes[b->member[0]];
  bool rs = first->op == TS_OP_REDUCE_SCATTER;
  int64_t rows = rs ? first->attr.coll->n : 1;
  int32_t *flat = malloc((size_t)b->n * sizeof *flat);
  ts_collective *coll = malloc(sizeof *coll);
  int32_t *ids = malloc((size_t)first->attr.coll->n * sizeof *ids);
  if (!flat || !coll || !ids) {
    free(flat), free(coll), free(ids);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory combining collectives");
    return TS_NONE;
  }
  int64_t total = 0;
  for (int i = 0; i < b->n; i++) {
    const ts_node *m = &g->nodes[b->member[i]];
    int64_t shape[2] = {rows, row_len(g, m)};
    flat[i] = ir_append(dst, TS_OP_RESHAPE, m->dtype, 2, shape, 1, &map[m->in[0]], NULL);
    total += shape[1];
    if (flat[i] == TS_NONE) { /* out of memory (error set); the graph is dropped by the caller */
      free(flat), free(coll), free(ids);
      return TS_NONE;
    }
  }
  ts_attr cat = {0};
  cat.axis = 1;
  int64_t packed[2] = {rows, total}, reduced[2] = {1, total};
  ts_tensor all = ir_append(dst, TS_OP_CONCAT, first->dtype, 2, packed, b->n, flat, &cat);
  free(flat);
  if (all == TS_NONE) {
    free(coll), free(ids);
    return TS_NONE;
  }
  memcpy(ids, first->attr.coll->ids, (size_t)first->attr.coll->n * sizeof *ids);
  *coll = (ts_collective){first->attr.coll->n, ids};
  ts_attr op = {0};
  op.reduce = first->attr.reduce;
  op.axis = 0;
  op.coll = coll; /* owned by the new node */
  return ir_append(dst, first->op, first->dtype, 2, reduced, 1, &all, &op); /* takes coll over, even on failure */
}

/* Member `id` of a combined bucket: its slice of the reduced (1, total)
 * bucket, reshaped to the member's shape. */
static ts_tensor emit_slice(ts_graph *dst, const ts_graph *g, const bucket *b, ts_tensor reduced, int id) {
  int64_t off = 0;
  for (int i = 0; i < b->n && b->member[i] != id; i++) off += row_len(g, &g->nodes[b->member[i]]);
  const ts_node *m = &g->nodes[id];
  int64_t len = row_len(g, m), shape[2] = {1, len};
  ts_attr sl = {0};
  sl.start[1] = off;
  sl.limit[0] = 1;
  sl.limit[1] = off + len;
  sl.stride[0] = sl.stride[1] = 1;
  ts_tensor s = ir_append(dst, TS_OP_SLICE, m->dtype, 2, shape, 1, &reduced, &sl);
  return s == TS_NONE ? TS_NONE : ir_append(dst, TS_OP_RESHAPE, m->dtype, m->rank, m->shape, 1, &s, NULL);
}

/* Writes the program with the buckets: map[i] is node i's id in dst once
 * emitted; members get theirs lazily (slice before first use). */
static ts_graph *rewrite(const plan *p) {
  const ts_graph *g = p->g;
  int n = g->n_nodes;
  int32_t *map = malloc(((size_t)n + 1) * sizeof *map);
  ts_tensor *reduced = malloc(((size_t)p->nb + 1) * sizeof *reduced);
  ts_graph *dst = ts_graph_new();
  if (!map || !reduced || !dst) {
    free(map), free(reduced), ts_graph_free(dst);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory combining collectives");
    return NULL;
  }
  for (int i = 0; i < n; i++) map[i] = TS_NONE;
  bool ok = true;
  for (int id = 0; id < n && ok; id++) {
    const ts_node *nd = &g->nodes[id];
    for (int k = 0; k < nd->n_in && ok; k++) { /* members this node reads: their slices first */
      int src = nd->in[k], bi = p->of[src];
      if (bi >= 0 && map[src] == TS_NONE) ok = (map[src] = emit_slice(dst, g, &p->b[bi], reduced[bi], src)) >= 0;
    }
    int bi = p->of[id];
    if (bi < 0) {
      ok = (map[id] = opt_copy_node(dst, g, id, map)) != TS_NONE;
    } else if (p->b[bi].member[p->b[bi].n - 1] == id) {
      ok = (reduced[bi] = emit_bucket(dst, g, &p->b[bi], map)) >= 0;
    }
  }
  for (int k = 0; k < g->n_outputs && ok; k++) { /* members that are outputs */
    int src = g->outputs[k], bi = p->of[src];
    if (bi >= 0 && map[src] == TS_NONE) ok = (map[src] = emit_slice(dst, g, &p->b[bi], reduced[bi], src)) >= 0;
  }
  if (!ok || opt_set_outputs(dst, g, map) < 0) {
    ts_graph_free(dst);
    dst = NULL;
  }
  free(map);
  free(reduced);
  return dst;
}

ts_graph *opt_combine(const ts_graph *g, size_t bucket_bytes, int *changed) {
  plan p = {g, bucket_bytes, malloc(((size_t)g->n_nodes + 1) * sizeof(int)), NULL, 0, 0};
  ts_graph *dst = NULL;
  if (!p.of) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory combining collectives");
    return NULL;
  }
  for (int i = 0; i < g->n_nodes; i++) p.of[i] = -1;
  if (form_buckets(&p) == 0) {
    int combined = 0;
    for (int b = 0; b < p.nb; b++) /* a bucket of one is left as it is */
      if (p.b[b].n < 2) {
        p.of[p.b[b].member[0]] = -1;
      } else {
        combined += p.b[b].n;
      }
    if (changed) *changed = combined;
    /* renumber the buckets that remain so `of` indexes them densely */
    int nb = 0;
    for (int b = 0; b < p.nb; b++) {
      if (p.b[b].n < 2) {
        free(p.b[b].member);
        continue;
      }
      for (int i = 0; i < p.b[b].n; i++) p.of[p.b[b].member[i]] = nb;
      p.b[nb++] = p.b[b];
    }
    p.nb = nb;
    dst = combined ? rewrite(&p) : opt_rebuild(g, NULL, NULL, NULL);
  }
  for (int b = 0; b < p.nb; b++) free(p.b[b].member);
  free(p.b);
  free(p.of);
  return dst;
}
