/* ir_build.c — graph storage: creating and freeing graphs, appending nodes,
 * node queries. Builders (builders.c) and compiler passes sit on top. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "tessel/spmd.h" /* ts_sharding_free: node annotations */

ts_graph *ts_graph_new(void) {
  ts_graph *g = calloc(1, sizeof *g);
  if (!g) error_oom("ts_graph_new", sizeof *g);
  return g;
}

static void fused_free(ts_fused *f) {
  if (!f) return;
  free(f->ins);
  free(f);
}

void ts_graph_free(ts_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++) {
    ts_node *n = &g->nodes[i];
    free(n->in);
    free(n->name);
    free(n->data);
    fused_free(n->attr.fused);
    if (n->attr.coll) free(n->attr.coll->ids);
    free(n->attr.coll);
    ts_sharding_free(n->sharding);
  }
  free(g->nodes);
  free(g->inputs);
  free(g->outputs);
  free(g->alias);
  free(g);
}

/* Makes room for `need` entries; on failure leaves p and *cap as they were
 * and returns NULL. */
static void *grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  int c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(p, (size_t)c * elem);
  if (!q) return NULL;
  *cap = c;
  return q;
}

ts_tensor ir_append(ts_graph *g, ts_op op, ts_dtype dt, int rank, const int64_t *shape, int n_in,
                    const int32_t *in, const ts_attr *attr) {
  /* every allocation first, so a failure leaves the graph as it was */
  ts_node *nodes = grow(g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes);
  if (nodes) g->nodes = nodes;
  bool room = nodes != NULL;
  if (room && op == TS_OP_INPUT) {
    int32_t *inputs = grow(g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof *g->inputs);
    if (inputs) g->inputs = inputs;
    room = inputs != NULL;
  }
  int32_t *ins = room && n_in ? malloc((size_t)n_in * sizeof *in) : NULL;
  if (!room || (n_in && !ins)) {
    if (attr) { /* taken over even on failure */
      fused_free(attr->fused);
      if (attr->coll) free(attr->coll->ids);
      free(attr->coll);
    }
    error_oom("adding a node to the graph", sizeof *g->nodes + (size_t)n_in * sizeof *in);
    return TS_NONE;
  }
  ts_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->dtype = dt;
  n->rank = rank;
  if (rank) memcpy(n->shape, shape, (size_t)rank * sizeof *shape);
  n->n_in = n_in;
  if (n_in) {
    n->in = ins;
    memcpy(n->in, in, (size_t)n_in * sizeof *in);
  }
  if (attr) n->attr = *attr;
  n->manual = g->manual_depth > 0;
  if (op == TS_OP_INPUT) {
    n->attr.input_index = g->n_inputs;
    g->inputs[g->n_inputs++] = g->n_nodes;
  }
  return g->n_nodes++;
}

int ir_node_copy_owned(ts_node *dst, const ts_node *src) {
  dst->name = src->name ? strdup(src->name) : NULL;
  bool ok = dst->name || !src->name;
  dst->data = NULL;
  size_t bytes = 0;
  if (src->data) {
    bytes = (size_t)ts_shape_numel(src->rank, src->shape) * ts_dtype_size(src->dtype);
    if ((dst->data = malloc(bytes ? bytes : 1)))
      memcpy(dst->data, src->data, bytes);
    else
      ok = false;
  }
  dst->attr.fused = NULL;
  if (src->attr.fused) {
    ts_fused *f = malloc(sizeof *f);
    if (f) f->ins = malloc((size_t)(src->attr.fused->n ? src->attr.fused->n : 1) * sizeof *f->ins);
    if (f && f->ins) {
      f->n = src->attr.fused->n;
      memcpy(f->ins, src->attr.fused->ins, (size_t)f->n * sizeof *f->ins);
      dst->attr.fused = f;
    } else {
      free(f);
      ok = false;
    }
  }
  dst->attr.coll = NULL;
  if (src->attr.coll) {
    const ts_collective *c = src->attr.coll;
    int n_ids = src->op == TS_OP_COLLECTIVE_PERMUTE ? 2 * c->n : c->n;
    ts_collective *k = malloc(sizeof *k);
    if (k) k->ids = malloc((size_t)(n_ids ? n_ids : 1) * sizeof *k->ids);
    if (k && k->ids) {
      k->n = c->n;
      memcpy(k->ids, c->ids, (size_t)n_ids * sizeof *k->ids);
      dst->attr.coll = k;
    } else {
      free(k);
      ok = false;
    }
  }
  /* sharding annotations belong to the user's graph; passes do not carry them */
  dst->sharding = NULL;
  return ok ? 0 : error_oom("copying a node's data", bytes);
}

bool ir_check_tensor(const ts_graph *g, ts_tensor t, const char *who) {
  if (!g) {
    set_error("%s: graph is NULL", who);
    return false;
  }
  if (t == TS_NONE) {
    /* keep the message of the builder that failed first */
    if (!ts_last_error()[0]) set_error("%s: operand is TS_NONE (an earlier call failed)", who);
    return false;
  }
  if (t < 0 || t >= g->n_nodes) {
    set_error("%s: tensor id %d is not a node of this graph (it has %d nodes)", who, t, g->n_nodes);
    return false;
  }
  return true;
}

const char *ir_shape_str(const ts_node *n, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "%s[", ts_dtype_name(n->dtype));
  for (int i = 0; i < n->rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)n->shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

int ts_graph_num_nodes(const ts_graph *g) { return g ? g->n_nodes : 0; }

ts_dtype ts_tensor_dtype(const ts_graph *g, ts_tensor t) { return g->nodes[t].dtype; }

int ts_tensor_rank(const ts_graph *g, ts_tensor t) { return g->nodes[t].rank; }

const int64_t *ts_tensor_shape(const ts_graph *g, ts_tensor t) { return g->nodes[t].shape; }

int64_t ts_tensor_numel(const ts_graph *g, ts_tensor t) {
  return ts_shape_numel(g->nodes[t].rank, g->nodes[t].shape);
}
