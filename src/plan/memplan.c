/* memplan.c — memory planning: liveness intervals over the node schedule,
 * best-fit reuse of one 64-byte aligned arena, reshapes as aliases, a
 * constant pool, outputs computed straight into the caller's buffers and
 * donated outputs updated in place when that is safe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

static size_t round_up(size_t x) { return (x + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

/* ---- best-fit arena allocator over a sorted free list ---- */
typedef struct {
  size_t off, size;
} block;

typedef struct {
  block *free;
  int n, cap;
  size_t top, peak;
} arena_alloc;

static int blocks_insert(arena_alloc *a, int at, block b) {
  if (a->n == a->cap) {
    int c = a->cap ? a->cap * 2 : 32;
    block *q = realloc(a->free, (size_t)c * sizeof *q);
    if (!q) return -1;
    a->free = q;
    a->cap = c;
  }
  memmove(&a->free[at + 1], &a->free[at], (size_t)(a->n - at) * sizeof *a->free);
  a->free[at] = b;
  a->n++;
  return 0;
}

static void blocks_remove(arena_alloc *a, int at) {
  memmove(&a->free[at], &a->free[at + 1], (size_t)(a->n - at - 1) * sizeof *a->free);
  a->n--;
}

static int arena_take(arena_alloc *a, size_t size, size_t *off) {
  if (!size) {
    *off = 0;
    return 0;
  }
  int best = -1;
  for (int i = 0; i < a->n; i++)
    if (a->free[i].size >= size && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
  if (best >= 0) {
    *off = a->free[best].off;
    a->free[best].off += size;
    a->free[best].size -= size;
    if (!a->free[best].size) blocks_remove(a, best);
    return 0;
  }
  /* no block fits: grow the arena, starting inside a free block at the top */
  if (a->n && a->free[a->n - 1].off + a->free[a->n - 1].size == a->top) {
    *off = a->free[a->n - 1].off;
    blocks_remove(a, a->n - 1);
  } else {
    *off = a->top;
  }
  a->top = *off + size;
  if (a->top > a->peak) a->peak = a->top;
  return 0;
}

static int arena_give(arena_alloc *a, size_t off, size_t size) {
  if (!size) return 0;
  int at = 0;
  while (at < a->n && a->free[at].off < off) at++;
  if (blocks_insert(a, at, (block){off, size}) < 0) return -1;
  if (at + 1 < a->n && a->free[at].off + a->free[at].size == a->free[at + 1].off) {
    a->free[at].size += a->free[at + 1].size;
    blocks_remove(a, at + 1);
  }
  if (at > 0 && a->free[at - 1].off + a->free[at - 1].size == a->free[at].off) {
    a->free[at - 1].size += a->free[at].size;
    blocks_remove(a, at);
  }
  return 0;
}

/* ---- the plan ---- */
static int root_of(const ts_plan *p, int t) {
  while (p->values[t].kind == PLAN_ALIAS) t = p->values[t].index;
  return t;
}

static int add_copy(ts_plan *p, int *cap, plan_copy c) {
  if (p->n_copies == *cap) {
    *cap = *cap ? *cap * 2 : 8;
    plan_copy *q = realloc(p->copies, (size_t)*cap * sizeof *q);
    if (!q) return -1;
    p->copies = q;
  }
  p->copies[p->n_copies++] = c;
  return 0;
}

/* Outputs: direct placement, in-place donation, or an end-of-run copy. */
static void place_outputs(const ts_graph *g, ts_plan *p, bool *claimed, bool *needs_copy) {
  for (int k = 0; k < g->n_outputs; k++) {
    int t = g->outputs[k], a = g->alias ? g->alias[k] : -1;
    const ts_node *n = &g->nodes[t];
    needs_copy[k] = true;
    if (claimed[t] || n->op == TS_OP_INPUT || n->op == TS_OP_CONSTANT || n->op == TS_OP_RESHAPE) continue;
    if (a < 0) {
      p->values[t].kind = PLAN_OUTPUT;
      p->values[t].index = k;
    } else {
      int last_in = p->values[g->inputs[a]].last; /* includes reads through reshapes */
      bool ew = ir_op_is_elementwise(n->op) || n->op == TS_OP_FUSED;
      if (!(last_in < t || (last_in == t && ew))) continue;
      p->values[t].kind = PLAN_INPUT;
      p->values[t].index = a;
      p->n_inplace++;
    }
    claimed[t] = true;
    needs_copy[k] = false;
  }
}

/* Copies in three phases: (1) from input buffers (into donated inputs via an
 * arena staging slot, so swaps work), (2) into donated inputs, (3) the rest. */
static int plan_copies(const ts_graph *g, ts_plan *p, const bool *needs_copy, arena_alloc *al) {
  int cap = 0;
  int n_stage = 0;
  size_t *stage = calloc((size_t)g->n_outputs + 1, sizeof *stage);
  if (!stage) return -1;
  for (int phase = 1; phase <= 3; phase++)
    for (int k = 0; k < g->n_outputs; k++) {
      if (!needs_copy[k]) continue;
      int t = g->outputs[k];
      bool donated = g->alias && g->alias[k] >= 0;
      bool from_input = p->values[root_of(p, t)].kind == PLAN_INPUT;
      size_t bytes = p->values[t].bytes;
      plan_copy c = {t, 0, k, 0, bytes};
      if (phase == 1 && from_input && donated) {
        if (arena_take(al, round_up(bytes), &stage[k]) < 0) goto oom;
        c.dst_output = -1;
        c.dst_offset = stage[k];
        n_stage++;
      } else if (phase == 2 && from_input && donated) {
        c.src_node = -1;
        c.src_offset = stage[k];
      } else if (!((phase == 1 && from_input) || (phase == 2 && !from_input && donated) ||
                   (phase == 3 && !from_input && !donated))) {
        continue;
      }
      if (add_copy(p, &cap, c) < 0) goto oom;
    }
  free(stage);
  return 0;
oom:
  free(stage);
  return -1;
}

/* An operand of elementwise / FUSED node i whose arena block node i can
 * write over: its value (with every reshape of it) is last read by i and it
 * has i's numel and size (kernels.h allows out == in for these ops).
 * Returns the operand's storage root or -1. */
static int reusable_operand(const ts_graph *g, const ts_plan *p, int i) {
  const ts_node *n = &g->nodes[i];
  /* elementwise kernels and all-reduces (the collectives work in place) */
  if (!ir_op_is_elementwise(n->op) && n->op != TS_OP_FUSED && n->op != TS_OP_ALL_REDUCE) return -1;
  int64_t numel = ts_shape_numel(n->rank, n->shape);
  for (int k = 0; k < n->n_in; k++) {
    int r = root_of(p, n->in[k]);
    const ts_node *rn = &g->nodes[r];
    const plan_value *rv = &p->values[r];
    if (rv->kind == PLAN_ARENA && rv->last == i && rv->bytes == p->values[i].bytes &&
        ts_shape_numel(rn->rank, rn->shape) == numel)
      return r;
  }
  return -1;
}

int plan_build(const ts_graph *g, ts_plan *p) { return plan_build_live(g, NULL, NULL, p); }

int plan_build_kept(const ts_graph *g, const int32_t *keep, ts_plan *p) { return plan_build_live(g, keep, NULL, p); }

static bool moved(const int32_t *from, int v) { return from && from[v] >= 0 && from[v] < v; }

/* The order in which the arena takes values (order[k], at schedule position
 * at[k]): each value at its own node, a moved one (from[v] < v) right
 * after the node it moved to, in node order. 0, or -1 out of memory. */
static int take_order(int n, const int32_t *from, int32_t *order, int32_t *at) {
  int32_t *off = calloc((size_t)n + 2, sizeof *off), *list = malloc(((size_t)n + 1) * sizeof *list);
  if (!off || !list) {
    free(off);
    free(list);
    return -1;
  }
  for (int v = 0; v < n; v++) /* moved values grouped by position: list[off[i], off[i + 1]) */
    if (moved(from, v)) off[from[v] + 2]++;
  for (int i = 0; i < n; i++) off[i + 2] += off[i + 1];
  for (int v = 0; v < n; v++)
    if (moved(from, v)) list[off[from[v] + 1]++] = v;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!moved(from, i)) order[k] = i, at[k++] = i;
    for (int j = off[i]; j < off[i + 1]; j++) order[k] = list[j], at[k++] = i;
  }
  free(off);
  free(list);
  return 0;
}

int plan_build_live(const ts_graph *g, const int32_t *keep, const int32_t *from, ts_plan *p) {
  int n = g->n_nodes;
  memset(p, 0, sizeof *p);
  p->n = n;
  p->values = calloc((size_t)n + 1, sizeof *p->values);
  bool *claimed = calloc((size_t)n + 1, sizeof *claimed);
  bool *needs_copy = calloc((size_t)g->n_outputs + 1, sizeof *needs_copy);
  int *active = malloc(((size_t)n + 1) * sizeof *active);
  int32_t *order = malloc(((size_t)n + 1) * sizeof *order), *at = malloc(((size_t)n + 1) * sizeof *at);
  arena_alloc al = {0};
  if (!p->values || !claimed || !needs_copy || !active || !order || !at) goto oom;

  /* kinds of leaves and aliases; live ranges on the storage roots */
  for (int i = 0; i < n; i++) {
    const ts_node *nd = &g->nodes[i];
    plan_value *v = &p->values[i];
    v->bytes = (size_t)ts_shape_numel(nd->rank, nd->shape) * ts_dtype_size(nd->dtype);
    v->def = v->last = i;
    v->kind = PLAN_ARENA;
    if (nd->op == TS_OP_INPUT) {
      v->kind = PLAN_INPUT;
      v->index = nd->attr.input_index;
    } else if (nd->op == TS_OP_CONSTANT) {
      v->kind = PLAN_CONST;
      v->offset = p->const_bytes;
      p->const_bytes += round_up(v->bytes);
    } else if (nd->op == TS_OP_RESHAPE) {
      v->kind = PLAN_ALIAS;
      v->index = nd->in[0];
    }
    for (int k = 0; k < nd->n_in; k++) {
      int r = root_of(p, nd->in[k]);
      if (p->values[r].last < i) p->values[r].last = i;
    }
  }
  for (int i = 0; keep && i < n; i++) /* operands a started collective reads until keep[i] */
    if (keep[i] >= 0 && g->nodes[i].n_in > 0) {
      plan_value *r = &p->values[root_of(p, g->nodes[i].in[0])];
      if (r->last < keep[i]) r->last = keep[i] < n ? keep[i] : n;
    }
  for (int v = 0; from && v < n; v++) /* taken early, live to the end */
    if (from[v] >= 0 && p->values[v].kind == PLAN_ARENA) p->values[v].def = from[v], p->values[v].last = n;
  for (int k = 0; k < g->n_outputs; k++) p->values[root_of(p, g->outputs[k])].last = n;
  for (int i = 0; i < n; i++) /* aliases show their root's range */
    if (p->values[i].kind == PLAN_ALIAS) p->values[i].last = p->values[root_of(p, i)].last;

  place_outputs(g, p, claimed, needs_copy);

  /* arena: in schedule order, free what died before i, then best fit */
  int n_active = 0;
  if (take_order(n, from, order, at) < 0) goto oom;
  for (int k = 0; k < n; k++) {
    int i = order[k];
    for (int a = 0; a < n_active;) {
      plan_value *v = &p->values[active[a]];
      if (v->last < at[k]) {
        if (arena_give(&al, v->offset, round_up(v->bytes)) < 0) goto oom;
        active[a] = active[--n_active];
      } else {
        a++;
      }
    }
    plan_value *v = &p->values[i];
    if (v->kind != PLAN_ARENA) continue;
    int r = from && from[i] >= 0 ? -1 : reusable_operand(g, p, i); /* a chain's value: its own block */
    if (r >= 0) { /* take over the dying operand's block */
      v->offset = p->values[r].offset;
      for (int a = 0; a < n_active; a++)
        if (active[a] == r) active[a] = i;
      p->n_reused++;
      continue;
    }
    if (arena_take(&al, round_up(v->bytes), &v->offset) < 0) goto oom;
    active[n_active++] = i;
  }
  for (int a = 0; a < n_active; a++) /* only values copied at the end are left */
    if (p->values[active[a]].last < n &&
        arena_give(&al, p->values[active[a]].offset, round_up(p->values[active[a]].bytes)) < 0)
      goto oom;
  if (plan_copies(g, p, needs_copy, &al) < 0) goto oom;
  p->arena_bytes = al.peak;
  free(al.free);
  free(claimed);
  free(needs_copy);
  free(active);
  free(order);
  free(at);
  return 0;
oom:
  free(al.free);
  free(claimed);
  free(needs_copy);
  free(active);
  free(order);
  free(at);
  plan_free(p);
  return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory planning %d values", n);
}

void plan_free(ts_plan *p) {
  free(p->values);
  free(p->copies);
  memset(p, 0, sizeof *p);
}

static int appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#include <stdarg.h>
static int appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (*len + (size_t)need + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (*len + (size_t)need + 1 > c) c *= 2;
    char *q = realloc(*buf, c);
    if (!q) return -1;
    *buf = q;
    *cap = c;
  }
  va_start(ap, fmt);
  vsnprintf(*buf + *len, *cap - *len, fmt, ap);
  va_end(ap);
  *len += (size_t)need;
  return 0;
}

int plan_print(const ts_plan *p, const ts_graph *g, char **buf, size_t *len, size_t *cap) {
  int rc = appendf(buf, len, cap,
                   "memory plan: arena peak %zu bytes, constants %zu bytes, %d donated in place, %d reused in place\n",
                   p->arena_bytes, p->const_bytes, p->n_inplace, p->n_reused);
  for (int i = 0; i < p->n && rc == 0; i++) {
    const plan_value *v = &p->values[i];
    char where[64];
    switch (v->kind) {
    case PLAN_INPUT: snprintf(where, sizeof where, "input %d", v->index); break;
    case PLAN_CONST: snprintf(where, sizeof where, "const +%zu", v->offset); break;
    case PLAN_ARENA: snprintf(where, sizeof where, "arena +%zu", v->offset); break;
    case PLAN_OUTPUT: snprintf(where, sizeof where, "output %d", v->index); break;
    case PLAN_ALIAS: snprintf(where, sizeof where, "alias %%%d", v->index); break;
    default: snprintf(where, sizeof where, "unused"); break;
    }
    rc = appendf(buf, len, cap, "  %%%d %s: %s, %zu bytes, live [%d, %d]\n", i, ir_op_name(g->nodes[i].op), where,
                 v->bytes, v->def, v->last);
  }
  for (int c = 0; c < p->n_copies && rc == 0; c++) {
    const plan_copy *x = &p->copies[c];
    char src[48], dst[48];
    if (x->src_node >= 0) snprintf(src, sizeof src, "%%%d", x->src_node);
    else snprintf(src, sizeof src, "arena +%zu", x->src_offset);
    if (x->dst_output >= 0) snprintf(dst, sizeof dst, "output %d", x->dst_output);
    else snprintf(dst, sizeof dst, "arena +%zu", x->dst_offset);
    rc = appendf(buf, len, cap, "  copy %s -> %s, %zu bytes\n", src, dst, x->bytes);
  }
  return rc < 0 ? set_error_code(TS_ERR_OUT_OF_MEMORY, "executable: out of memory printing the plan") : 0;
}
