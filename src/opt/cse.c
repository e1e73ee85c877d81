/* cse.c — common subexpression elimination: nodes with the same op, dtype,
 * shape, operands and attributes become one. Attributes are compared field
 * by field as far as the op uses them; constants by their bytes. INPUT nodes
 * are never merged; RNG nodes only with the same key and seed. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h"

typedef struct {
  int32_t *slots; /* dst node ids, -1 = empty; open addressing */
  uint64_t *hash;
  size_t cap;
  int merged;
} cse_table;

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

static uint64_t node_hash(const ts_node *n) {
  uint64_t h = mix(mix((uint64_t)n->op, (uint64_t)n->dtype), (uint64_t)n->rank);
  for (int i = 0; i < n->rank; i++) h = mix(h, (uint64_t)n->shape[i]);
  for (int i = 0; i < n->n_in; i++) h = mix(h, (uint64_t)n->in[i]);
  ts_op_attrs kind = ir_op_attr_kind(n->op);
  if (kind == TS_ATTRS_CONSTANT && !n->data) {
    uint64_t bits;
    memcpy(&bits, &n->attr.value, 8);
    h = mix(h, bits);
  }
  if (kind == TS_ATTRS_RNG) h = mix(h, n->attr.key);
  return h;
}

static bool same_ints(const int *a, const int *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }
static bool same_i64(const int64_t *a, const int64_t *b, int n) {
  return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}
static bool same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static bool same_fused(const ts_fused *a, const ts_fused *b) {
  if (!a || !b || a->n != b->n) return false;
  for (int i = 0; i < a->n; i++) {
    const ts_fused_instr *x = &a->ins[i], *y = &b->ins[i];
    if (x->op != y->op || x->dtype != y->dtype || x->a != y->a || x->b != y->b || x->c != y->c) return false;
    if (x->op == TS_OP_COMPARE && x->cmp != y->cmp) return false;
    if ((x->op == TS_OP_CONSTANT || x->op == TS_OP_BROADCAST) && !same_double(x->value, y->value)) return false;
  }
  return true;
}

/* Attribute equality for the fields op uses (its table row's attribute
 * kind; operands already equal). */
static bool same_attrs(const ts_graph *g, const ts_node *a, const ts_node *b) {
  const ts_attr *x = &a->attr, *y = &b->attr;
  int r_in = a->n_in ? g->nodes[a->in[0]].rank : 0;
  switch (ir_op_attr_kind(a->op)) {
  case TS_ATTRS_CONSTANT:
    if (!a->data != !b->data) return false;
    if (!a->data) return same_double(x->value, y->value);
    return memcmp(a->data, b->data, (size_t)ts_shape_numel(a->rank, a->shape) * ts_dtype_size(a->dtype)) == 0;
  case TS_ATTRS_AXIS:
    return x->axis == y->axis;
  case TS_ATTRS_RNG:
    return x->key == y->key && x->global == y->global &&
           (!x->global || (same_i64(x->goffset, y->goffset, a->rank) && same_i64(x->gshape, y->gshape, a->rank)));
  case TS_ATTRS_CMP:
    return x->cmp == y->cmp;
  case TS_ATTRS_VALUE:
    return same_double(x->value, y->value);
  case TS_ATTRS_DIMS:
  case TS_ATTRS_PERM:
    return x->n_dims == y->n_dims && same_ints(x->dims, y->dims, x->n_dims);
  case TS_ATTRS_REDUCE:
    return x->reduce == y->reduce && x->n_dims == y->n_dims && same_ints(x->dims, y->dims, x->n_dims);
  case TS_ATTRS_SLICE:
    return same_i64(x->start, y->start, r_in) && same_i64(x->limit, y->limit, r_in) &&
           same_i64(x->stride, y->stride, r_in);
  case TS_ATTRS_PAD:
    return same_i64(x->start, y->start, r_in) && same_i64(x->limit, y->limit, r_in) &&
           same_double(x->value, y->value);
  case TS_ATTRS_DOT: {
    const ts_dot_dims *p = &x->dot, *q = &y->dot;
    return p->n_batch == q->n_batch && p->n_contract == q->n_contract &&
           same_ints(p->lhs_batch, q->lhs_batch, p->n_batch) && same_ints(p->rhs_batch, q->rhs_batch, p->n_batch) &&
           same_ints(p->lhs_contract, q->lhs_contract, p->n_contract) &&
           same_ints(p->rhs_contract, q->rhs_contract, p->n_contract);
  }
  case TS_ATTRS_CONV: {
    const ts_conv_params *p = &x->conv, *q = &y->conv;
    return same_ints(p->stride, q->stride, 2) && same_ints(p->pad_lo, q->pad_lo, 2) &&
           same_ints(p->pad_hi, q->pad_hi, 2) && same_ints(p->dilation, q->dilation, 2) && p->groups == q->groups &&
           p->layout == q->layout;
  }
  case TS_ATTRS_POOL: {
    const ts_pool_params *p = &x->pool, *q = &y->pool;
    return same_ints(p->kernel, q->kernel, 2) && same_ints(p->stride, q->stride, 2) && same_ints(p->pad, q->pad, 2) &&
           p->layout == q->layout;
  }
  case TS_ATTRS_FUSED:
    return same_fused(x->fused, y->fused);
  case TS_ATTRS_NONE: /* elementwise, reshape, gather, scatter: operands say it all */
  case TS_ATTRS_INPUT:      /* never reaches here: opt_rebuild copies inputs itself */
  case TS_ATTRS_COLLECTIVE: /* never merged (TS_OPF_NO_CSE) */
    return true;
  }
  return true;
}

static bool same_node(const ts_graph *g, const ts_node *a, const ts_node *b) {
  if (a->op != b->op || a->dtype != b->dtype || a->rank != b->rank || a->n_in != b->n_in) return false;
  if (!same_i64(a->shape, b->shape, a->rank)) return false;
  if (a->n_in && memcmp(a->in, b->in, (size_t)a->n_in * sizeof *a->in) != 0) return false;
  return same_attrs(g, a, b);
}

static ts_tensor cse_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, void *user) {
  cse_table *t = user;
  ts_tensor nid = opt_copy_node(dst, src, id, map);
  /* every device must run every collective in the same order: never merge */
  if (ir_op_has(src->nodes[id].op, TS_OPF_NO_CSE)) return nid;
  const ts_node *n = &dst->nodes[nid];
  uint64_t h = node_hash(n);
  size_t i = h & (t->cap - 1);
  for (; t->slots[i] >= 0; i = (i + 1) & (t->cap - 1)) {
    if (t->hash[i] != h || !same_node(dst, n, &dst->nodes[t->slots[i]])) continue;
    /* a duplicate: undo the append (it is the last node and no input) */
    ts_node *last = &dst->nodes[--dst->n_nodes];
    free(last->in);
    free(last->data);
    if (last->attr.fused) {
      free(last->attr.fused->ins);
      free(last->attr.fused);
    }
    t->merged++;
    return t->slots[i];
  }
  t->slots[i] = nid;
  t->hash[i] = h;
  return nid;
}

ts_graph *opt_cse(const ts_graph *g, int *changed) {
  cse_table t = {0};
  t.cap = 16;
  while (t.cap < (size_t)g->n_nodes * 2) t.cap *= 2;
  t.slots = malloc(t.cap * sizeof *t.slots);
  t.hash = malloc(t.cap * sizeof *t.hash);
  if (!t.slots || !t.hash) {
    free(t.slots);
    free(t.hash);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory in cse");
    return NULL;
  }
  memset(t.slots, 0xff, t.cap * sizeof *t.slots);
  ts_graph *out = opt_rebuild(g, cse_node, &t, NULL);
  free(t.slots);
  free(t.hash);
  if (changed) *changed = t.merged;
  return out;
}
