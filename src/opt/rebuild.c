/* rebuild.c — the helper every pass uses to build a new graph from an old one
 * (node by node, with operand remapping), plus small graph queries passes
 * share: user lists and splat-constant values. */
#include <stdlib.h>
#include <string.h>

#include "opt/opt.h"
#include "util/half.h" /* bf16 / f16 element reads */

ts_tensor opt_copy_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map) {
  const ts_node *n = &src->nodes[id];
  int32_t in_small[8] = {0};
  int32_t *in = n->n_in <= 8 ? in_small : malloc((size_t)n->n_in * sizeof *in);
  if (!in) {
    error_oom("compile: copying a node", (size_t)n->n_in * sizeof *in);
    return TS_NONE;
  }
  for (int i = 0; i < n->n_in; i++) in[i] = map[n->in[i]];
  ts_attr attr = n->attr;
  attr.fused = NULL; /* n's: deep-copied below */
  attr.coll = NULL;
  ts_tensor t = ir_append(dst, n->op, n->dtype, n->rank, n->shape, n->n_in, in, &attr);
  if (in != in_small) free(in);
  if (t == TS_NONE) return TS_NONE;
  ts_node *d = &dst->nodes[t];
  int input_index = d->attr.input_index; /* ir_append numbers inputs itself */
  if (ir_node_copy_owned(d, n) < 0) return TS_NONE;
  if (n->op == TS_OP_INPUT) d->attr.input_index = input_index;
  return t;
}

int opt_set_outputs(ts_graph *dst, const ts_graph *src, const int32_t *map) {
  if (!src->n_outputs) return 0;
  dst->outputs = malloc((size_t)src->n_outputs * sizeof *dst->outputs);
  dst->alias = malloc((size_t)src->n_outputs * sizeof *dst->alias);
  if (!dst->outputs || !dst->alias) return error_oom("compile: copying outputs", (size_t)src->n_outputs * 8);
  dst->cap_outputs = dst->n_outputs = src->n_outputs;
  for (int i = 0; i < src->n_outputs; i++) {
    int32_t t = map[src->outputs[i]];
    if (t < 0) return set_error_code(TS_ERR_INTERNAL,
                                        "compile: a pass dropped output %d (node %d)", i, src->outputs[i]);
    dst->outputs[i] = t;
    dst->alias[i] = src->alias ? src->alias[i] : -1;
  }
  return 0;
}

ts_graph *opt_rebuild(const ts_graph *src, opt_rewrite_fn fn, void *user, int32_t *map_out) {
  ts_graph *dst = ts_graph_new();
  int32_t *map = malloc(((size_t)src->n_nodes + 1) * sizeof *map);
  if (!dst || !map) {
    ts_graph_free(dst);
    free(map);
    error_oom("compile: rebuilding a graph", ((size_t)src->n_nodes + 1) * sizeof *map);
    return NULL;
  }
  for (int id = 0; id < src->n_nodes; id++) {
    const ts_node *n = &src->nodes[id];
    ts_tensor r = OPT_KEEP;
    if (n->op != TS_OP_INPUT && fn) r = fn(dst, src, id, map, user);
    if (r == TS_NONE) goto fail; /* the callback failed (out of memory) */
    if (r == OPT_KEEP) {
      for (int i = 0; i < n->n_in; i++)
        if (map[n->in[i]] < 0) {
          set_error_code(TS_ERR_INTERNAL,
                            "compile: node %d (%s) uses node %d which a pass dropped", id, ir_op_name(n->op),
                            n->in[i]);
          goto fail;
        }
      if ((r = opt_copy_node(dst, src, id, map)) == TS_NONE) goto fail;
    } else if (r == OPT_DROP) {
      r = TS_NONE;
    }
    map[id] = r;
  }
  if (opt_set_outputs(dst, src, map) < 0) goto fail;
  if (map_out) memcpy(map_out, map, (size_t)src->n_nodes * sizeof *map);
  free(map);
  return dst;
fail:
  free(map);
  ts_graph_free(dst);
  return NULL;
}

int opt_users_build(const ts_graph *g, opt_users *u) {
  int n = g->n_nodes;
  u->off = calloc((size_t)n + 1, sizeof *u->off);
  u->n_out = calloc((size_t)n + 1, sizeof *u->n_out);
  int total = 0;
  for (int i = 0; i < n; i++) total += g->nodes[i].n_in;
  u->users = malloc(((size_t)total + 1) * sizeof *u->users);
  if (!u->off || !u->n_out || !u->users) {
    opt_users_free(u);
    return error_oom("compile: listing users", ((size_t)total + 1) * sizeof *u->users);
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) u->off[g->nodes[i].in[k] + 1]++;
  for (int i = 0; i < n; i++) u->off[i + 1] += u->off[i];
  int *fill = calloc((size_t)n + 1, sizeof *fill);
  if (!fill) {
    opt_users_free(u);
    return error_oom("compile: listing users", ((size_t)n + 1) * sizeof *fill);
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int p = g->nodes[i].in[k];
      u->users[u->off[p] + fill[p]++] = i;
    }
  free(fill);
  for (int i = 0; i < g->n_outputs; i++) u->n_out[g->outputs[i]]++;
  return 0;
}

void opt_users_free(opt_users *u) {
  free(u->off);
  free(u->users);
  free(u->n_out);
  memset(u, 0, sizeof *u);
}

static double read_elem(ts_dtype dt, const void *p) {
  switch (dt) {
  case TS_F32: { float v; memcpy(&v, p, 4); return v; }
  case TS_F64: { double v; memcpy(&v, p, 8); return v; }
  case TS_BF16: { uint16_t h; memcpy(&h, p, 2); return ts_bf16_to_f32(h); }
  case TS_F16: { uint16_t h; memcpy(&h, p, 2); return ts_f16_to_f32(h); }
  case TS_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  case TS_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  case TS_U8: return *(const uint8_t *)p;
  case TS_BOOL: return *(const uint8_t *)p ? 1 : 0;
  default: return 0;
  }
}

bool opt_splat_value(const ts_graph *g, ts_tensor t, double *value) {
  const ts_node *n = &g->nodes[t];
  if (n->op == TS_OP_BROADCAST) {
    if (ts_shape_numel(g->nodes[n->in[0]].rank, g->nodes[n->in[0]].shape) != 1) return false;
    return opt_splat_value(g, n->in[0], value);
  }
  if (n->op != TS_OP_CONSTANT) return false;
  if (!n->data) {
    *value = n->attr.value;
    return true;
  }
  if (ts_shape_numel(n->rank, n->shape) != 1) return false;
  *value = read_elem(n->dtype, n->data);
  return true;
}

static bool bf16_value(double v) {
  float f = (float)v;
  return (double)f == v && ts_bf16_to_f32(ts_f32_to_bf16(f)) == f;
}

ts_tensor opt_bf16_widened(const ts_graph *g, ts_tensor t) {
  const ts_node *n = &g->nodes[t];
  return n->op == TS_OP_CONVERT && n->dtype == TS_F32 && g->nodes[n->in[0]].dtype == TS_BF16 ? n->in[0] : TS_NONE;
}

bool opt_bf16_exact(const ts_graph *g, ts_tensor t, const bool *exact) {
  const ts_node *n = &g->nodes[t];
  double v;
  if (n->dtype != TS_F32) return false;
  if (opt_splat_value(g, t, &v)) return bf16_value(v);
  if (n->op == TS_OP_CONVERT) return opt_bf16_widened(g, t) != TS_NONE;
  if (n->op == TS_OP_SELECT) return exact[n->in[1]] && exact[n->in[2]];
  if (n->op == TS_OP_MAX || n->op == TS_OP_MIN) return exact[n->in[0]] && exact[n->in[1]];
  if (n->op == TS_OP_NEG || n->op == TS_OP_ABS) return exact[n->in[0]];
  return false;
}
