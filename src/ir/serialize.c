/* serialize.c — the exact binary form of a graph (see serialize.h).
 *
 * Layout (little-endian): "TSGR", u32 version, u32 n_nodes, then per node:
 * op (its ops.def name as a string, so reordering the op list never changes
 * what a stored graph means), dtype, rank, shape, operands, every attr field
 * (written whole, so any op's attrs survive), the fused program (ops by name
 * too), the collective group, the input name, the constant's bytes and the
 * sharding annotation (mesh + spec); then the outputs with their aliases.
 * The reader rebuilds the graph with ir_append, checks every count against
 * the remaining bytes and every operand against the node order, and
 * verifies the result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/serialize.h"
#include "tessel/spmd.h" /* sharding annotations: mesh + spec */

static const unsigned char ser_magic[4] = {'T', 'S', 'G', 'R'};

/* ---- writer ---- */

typedef struct {
  unsigned char **buf;
  size_t *len, *cap;
  bool oom;
} ser_w;

static void w_bytes(ser_w *w, const void *p, size_t n) {
  if (w->oom) return;
  if (*w->len + n > *w->cap) {
    size_t cap = *w->cap ? *w->cap : 4096;
    while (cap < *w->len + n) cap *= 2;
    unsigned char *b = realloc(*w->buf, cap);
    if (!b) {
      w->oom = true;
      return;
    }
    *w->buf = b;
    *w->cap = cap;
  }
  if (n) memcpy(*w->buf + *w->len, p, n);
  *w->len += n;
}

static void w_u64(ser_w *w, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  w_bytes(w, b, 8);
}
static void w_u32(ser_w *w, uint32_t v) {
  unsigned char b[4];
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
  w_bytes(w, b, 4);
}
static void w_i32(ser_w *w, int32_t v) { w_u32(w, (uint32_t)v); }
static void w_i64(ser_w *w, int64_t v) { w_u64(w, (uint64_t)v); }
static void w_f64(ser_w *w, double v) {
  uint64_t u;
  memcpy(&u, &v, 8); /* the bits: -0.0, NaN payloads and infinities survive */
  w_u64(w, u);
}
static void w_ints(ser_w *w, const int *v, int n) {
  for (int i = 0; i < n; i++) w_i32(w, v[i]);
}
static void w_i64s(ser_w *w, const int64_t *v, int n) {
  for (int i = 0; i < n; i++) w_i64(w, v[i]);
}
static void w_str(ser_w *w, const char *s) {
  if (!s) {
    w_u32(w, UINT32_MAX);
    return;
  }
  size_t n = strlen(s);
  w_u32(w, (uint32_t)n);
  w_bytes(w, s, n);
}

static void w_attr(ser_w *w, const ts_attr *a) {
  w_i32(w, a->axis);
  w_i32(w, a->n_dims);
  w_ints(w, a->dims, TS_MAX_RANK);
  w_i64s(w, a->start, TS_MAX_RANK);
  w_i64s(w, a->limit, TS_MAX_RANK);
  w_i64s(w, a->stride, TS_MAX_RANK);
  w_f64(w, a->value);
  w_u32(w, (uint32_t)a->cmp);
  w_u32(w, (uint32_t)a->reduce);
  w_u64(w, a->key);
  w_i32(w, a->input_index);
  w_i32(w, a->dot.n_batch);
  w_i32(w, a->dot.n_contract);
  w_ints(w, a->dot.lhs_batch, TS_MAX_RANK);
  w_ints(w, a->dot.rhs_batch, TS_MAX_RANK);
  w_ints(w, a->dot.lhs_contract, TS_MAX_RANK);
  w_ints(w, a->dot.rhs_contract, TS_MAX_RANK);
  w_ints(w, a->conv.stride, 2);
  w_ints(w, a->conv.pad_lo, 2);
  w_ints(w, a->conv.pad_hi, 2);
  w_ints(w, a->conv.dilation, 2);
  w_i32(w, a->conv.groups);
  w_ints(w, a->pool.kernel, 2);
  w_ints(w, a->pool.stride, 2);
  w_ints(w, a->pool.pad, 2);
  w_i32(w, a->conv.layout);
  w_i32(w, a->pool.layout);
  w_u32(w, a->global ? 1 : 0);
  w_i64s(w, a->goffset, TS_MAX_RANK);
  w_i64s(w, a->gshape, TS_MAX_RANK);
}

static int coll_ids(const ts_node *n) {
  return n->op == TS_OP_COLLECTIVE_PERMUTE ? 2 * n->attr.coll->n : n->attr.coll->n;
}

static void w_sharding(ser_w *w, const struct ts_sharding *s) {
  w_u32(w, s ? 1 : 0);
  if (!s) return;
  const ts_mesh *m = ts_sharding_mesh(s);
  int r = ts_mesh_rank(m);
  w_i32(w, r);
  for (int i = 0; i < r; i++) w_i64(w, ts_mesh_axis_size(m, i));
  w_u32(w, ts_mesh_axis_name(m, 0) ? 1 : 0);
  for (int i = 0; i < r && ts_mesh_axis_name(m, 0); i++) w_str(w, ts_mesh_axis_name(m, i));
  int64_t nd = ts_mesh_num_devices(m);
  w_i64(w, nd);
  w_ints(w, ts_mesh_device_ids(m), (int)nd);
  const ts_partition_spec *sp = ts_sharding_spec(s);
  w_i32(w, sp->rank);
  w_ints(w, sp->naxes, TS_MAX_RANK);
  for (int d = 0; d < TS_MAX_RANK; d++) w_ints(w, sp->axes[d], TS_MESH_MAX_RANK);
  w_i32(w, ts_sharding_rank(s));
}

int ir_serialize(const ts_graph *g, unsigned char **buf, size_t *len, size_t *cap) {
  if (!g || !buf || !len || !cap) return set_error("graph_serialize: NULL argument");
  ser_w w = {buf, len, cap, false};
  w_bytes(&w, ser_magic, 4);
  w_u32(&w, TS_SERIALIZE_VERSION);
  w_i32(&w, g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    w_str(&w, ir_op_name(n->op));
    w_u32(&w, (uint32_t)n->dtype);
    w_i32(&w, n->rank);
    w_i64s(&w, n->shape, n->rank);
    w_i32(&w, n->n_in);
    for (int k = 0; k < n->n_in; k++) w_i32(&w, n->in[k]);
    w_attr(&w, &n->attr);
    w_i32(&w, n->attr.fused ? n->attr.fused->n : -1);
    for (int j = 0; n->attr.fused && j < n->attr.fused->n; j++) {
      const ts_fused_instr *f = &n->attr.fused->ins[j];
      w_str(&w, ir_op_name(f->op));
      w_u32(&w, (uint32_t)f->cmp);
      w_u32(&w, (uint32_t)f->dtype);
      w_i32(&w, f->a);
      w_i32(&w, f->b);
      w_i32(&w, f->c);
      w_f64(&w, f->value);
    }
    w_i32(&w, n->attr.coll ? n->attr.coll->n : -1);
    if (n->attr.coll) w_ints(&w, n->attr.coll->ids, coll_ids(n));
    w_str(&w, n->name);
    size_t bytes = n->data ? (size_t)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(n->dtype) : 0;
    w_u32(&w, n->data ? 1 : 0);
    if (n->data) {
      w_u64(&w, bytes);
      w_bytes(&w, n->data, bytes);
    }
    w_sharding(&w, n->sharding);
  }
  w_i32(&w, g->n_outputs);
  for (int o = 0; o < g->n_outputs; o++) {
    w_i32(&w, g->outputs[o]);
    w_i32(&w, g->alias ? g->alias[o] : -1);
  }
  if (w.oom) return set_error_code(TS_ERR_OUT_OF_MEMORY, "graph_serialize: out of memory (%zu bytes written)", *len);
  return 0;
}

/* ---- reader ---- */

typedef struct {
  const unsigned char *p;
  size_t len, pos;
  const char *bad; /* first problem, or NULL */
  size_t bad_at;
  char detail[96]; /* storage for a message naming a value (unknown op) */
} ser_r;

static bool r_fail(ser_r *r, const char *what) {
  if (!r->bad) {
    r->bad = what;
    r->bad_at = r->pos;
  }
  return false;
}

static bool r_bytes(ser_r *r, void *dst, size_t n) {
  if (r->bad) return false;
  if (n > r->len - r->pos) return r_fail(r, "data ends early (truncated)");
  if (n) memcpy(dst, r->p + r->pos, n);
  r->pos += n;
  return true;
}
static uint64_t r_u64(ser_r *r) {
  unsigned char b[8] = {0};
  r_bytes(r, b, 8);
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}
static uint32_t r_u32(ser_r *r) {
  unsigned char b[4] = {0};
  r_bytes(r, b, 4);
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static int32_t r_i32(ser_r *r) { return (int32_t)r_u32(r); }
static int64_t r_i64(ser_r *r) { return (int64_t)r_u64(r); }
static double r_f64(ser_r *r) {
  uint64_t u = r_u64(r);
  double v;
  memcpy(&v, &u, 8);
  return v;
}
static void r_ints(ser_r *r, int *v, int n) {
  for (int i = 0; i < n; i++) v[i] = r_i32(r);
}
static void r_i64s(ser_r *r, int64_t *v, int n) {
  for (int i = 0; i < n; i++) v[i] = r_i64(r);
}
/* A malloc'd string, NULL for the null string; *ok false on error. */
static char *r_str(ser_r *r, bool *ok) {
  uint32_t n = r_u32(r);
  *ok = !r->bad;
  if (r->bad || n == UINT32_MAX) return NULL;
  if (n > r->len - r->pos) {
    *ok = r_fail(r, "string runs past the end (truncated)");
    return NULL;
  }
  char *s = malloc((size_t)n + 1);
  if (!s) {
    *ok = r_fail(r, "out of memory");
    return NULL;
  }
  r_bytes(r, s, n);
  s[n] = '\0';
  if (strlen(s) != n) {
    free(s);
    *ok = r_fail(r, "string contains a NUL byte");
    return NULL;
  }
  return s;
}

/* An op by its name; TS_OP_COUNT (and the error set) for a name the op
 * table does not know, e.g. a graph written by a build with more ops. */
static ts_op r_op(ser_r *r) {
  bool ok = true;
  size_t at = r->pos;
  char *name = r_str(r, &ok);
  if (!ok) return TS_OP_COUNT;
  ts_op op = ir_op_from_name(name);
  if (op == TS_OP_COUNT && !r->bad) {
    snprintf(r->detail, sizeof r->detail, "unknown op \"%.60s\"", name ? name : "(null)");
    r_fail(r, r->detail);
    r->bad_at = at;
  }
  free(name);
  return op;
}

static void r_attr(ser_r *r, ts_attr *a) {
  a->axis = r_i32(r);
  a->n_dims = r_i32(r);
  r_ints(r, a->dims, TS_MAX_RANK);
  r_i64s(r, a->start, TS_MAX_RANK);
  r_i64s(r, a->limit, TS_MAX_RANK);
  r_i64s(r, a->stride, TS_MAX_RANK);
  a->value = r_f64(r);
  a->cmp = (ts_cmp)r_u32(r);
  a->reduce = (ts_reduce_kind)r_u32(r);
  a->key = r_u64(r);
  a->input_index = r_i32(r);
  a->dot.n_batch = r_i32(r);
  a->dot.n_contract = r_i32(r);
  r_ints(r, a->dot.lhs_batch, TS_MAX_RANK);
  r_ints(r, a->dot.rhs_batch, TS_MAX_RANK);
  r_ints(r, a->dot.lhs_contract, TS_MAX_RANK);
  r_ints(r, a->dot.rhs_contract, TS_MAX_RANK);
  r_ints(r, a->conv.stride, 2);
  r_ints(r, a->conv.pad_lo, 2);
  r_ints(r, a->conv.pad_hi, 2);
  r_ints(r, a->conv.dilation, 2);
  a->conv.groups = r_i32(r);
  r_ints(r, a->pool.kernel, 2);
  r_ints(r, a->pool.stride, 2);
  r_ints(r, a->pool.pad, 2);
  a->conv.layout = (ts_layout)r_i32(r);
  a->pool.layout = (ts_layout)r_i32(r);
  a->global = r_u32(r) != 0;
  r_i64s(r, a->goffset, TS_MAX_RANK);
  r_i64s(r, a->gshape, TS_MAX_RANK);
  if (a->n_dims < 0 || a->n_dims > TS_MAX_RANK) r_fail(r, "attr n_dims out of range");
  if (a->dot.n_batch < 0 || a->dot.n_batch > TS_MAX_RANK || a->dot.n_contract < 0 ||
      a->dot.n_contract > TS_MAX_RANK)
    r_fail(r, "dot dims count out of range");
  if ((unsigned)a->cmp > TS_CMP_GE || (unsigned)a->reduce > TS_REDUCE_MEAN) r_fail(r, "bad cmp or reduce kind");
}

static struct ts_sharding *r_sharding(ser_r *r) {
  if (r_u32(r) == 0) return NULL;
  int rank = r_i32(r);
  if (rank < 1 || rank > TS_MESH_MAX_RANK) {
    r_fail(r, "mesh rank out of range");
    return NULL;
  }
  int64_t shape[TS_MESH_MAX_RANK];
  r_i64s(r, shape, rank);
  bool named = r_u32(r) != 0, ok = true;
  char *names[TS_MESH_MAX_RANK] = {0};
  for (int i = 0; named && i < rank && ok; i++) names[i] = r_str(r, &ok);
  int64_t nd = r_i64(r);
  int *ids = NULL;
  ts_partition_spec spec = {0};
  struct ts_sharding *s = NULL;
  if (!ok || r->bad) goto done;
  if (nd < 1 || nd > (int64_t)((r->len - r->pos) / 4)) {
    r_fail(r, "mesh device count out of range");
    goto done;
  }
  ids = malloc((size_t)nd * sizeof *ids);
  if (!ids) {
    r_fail(r, "out of memory");
    goto done;
  }
  r_ints(r, ids, (int)nd);
  spec.rank = r_i32(r);
  r_ints(r, spec.naxes, TS_MAX_RANK);
  for (int d = 0; d < TS_MAX_RANK; d++) r_ints(r, spec.axes[d], TS_MESH_MAX_RANK);
  int srank = r_i32(r);
  if (r->bad) goto done;
  ts_mesh *m = ts_mesh_new(rank, shape, named ? (const char *const *)names : NULL, nd, ids);
  if (m) s = ts_sharding_new(m, &spec, srank);
  ts_mesh_free(m);
  if (!s) r_fail(r, "sharding annotation does not rebuild (mesh or spec invalid)");
done:
  for (int i = 0; i < rank; i++) free(names[i]);
  free(ids);
  return s;
}

/* Reads one node and appends it to g; false on error. */
static bool r_node(ser_r *r, ts_graph *g, int id) {
  ts_op op = r_op(r);
  uint32_t dt = r_u32(r);
  int rank = r_i32(r);
  if (r->bad) return false;
  if (dt >= TS_DTYPE_COUNT) return r_fail(r, "invalid dtype");
  if (rank < 0 || rank > TS_MAX_RANK) return r_fail(r, "rank out of range");
  int64_t shape[TS_MAX_RANK] = {0};
  r_i64s(r, shape, rank);
  for (int d = 0; d < rank; d++)
    if (shape[d] < 0) return r_fail(r, "negative dim");
  int n_in = r_i32(r);
  if (r->bad) return false;
  if (n_in < 0 || (size_t)n_in > (r->len - r->pos) / 4) return r_fail(r, "operand count out of range");
  int32_t *in = malloc((size_t)(n_in ? n_in : 1) * sizeof *in);
  if (!in) return r_fail(r, "out of memory");
  for (int k = 0; k < n_in; k++) {
    in[k] = r_i32(r);
    if (!r->bad && (in[k] < 0 || in[k] >= id)) {
      free(in);
      return r_fail(r, "operand is not an earlier node");
    }
  }
  ts_attr a;
  memset(&a, 0, sizeof a);
  r_attr(r, &a);
  int nf = r_i32(r);
  if (!r->bad && nf >= 0) {
    if ((size_t)nf > (r->len - r->pos) / 32) {
      free(in);
      return r_fail(r, "fused program length out of range");
    }
    a.fused = malloc(sizeof *a.fused);
    if (a.fused) a.fused->ins = calloc((size_t)(nf ? nf : 1), sizeof *a.fused->ins);
    if (!a.fused || !a.fused->ins) {
      free(a.fused);
      free(in);
      return r_fail(r, "out of memory");
    }
    a.fused->n = nf;
    for (int j = 0; j < nf; j++) {
      ts_fused_instr *f = &a.fused->ins[j];
      f->op = r_op(r);
      f->cmp = (ts_cmp)r_u32(r);
      f->dtype = (ts_dtype)r_u32(r);
      f->a = r_i32(r);
      f->b = r_i32(r);
      f->c = r_i32(r);
      f->value = r_f64(r);
      if (r->bad) break; /* f->op may be unknown: no arity to check against */
      if ((unsigned)f->dtype >= TS_DTYPE_COUNT || (unsigned)f->cmp > TS_CMP_GE) r_fail(r, "bad fused instruction");
      int nops = ir_op_arity(f->op);
      int32_t ops[3] = {f->a, f->b, f->c};
      for (int k = 0; k < nops; k++)
        if (ops[k] >= j || ops[k] < -n_in) r_fail(r, "fused operand out of range");
    }
  }
  int nc = r_i32(r);
  if (!r->bad && nc >= 0) {
    int nids = op == TS_OP_COLLECTIVE_PERMUTE ? 2 * nc : nc;
    if (nc > (1 << 24) || (size_t)nids > (r->len - r->pos) / 4) {
      r_fail(r, "collective group size out of range");
    } else {
      a.coll = malloc(sizeof *a.coll);
      if (a.coll) a.coll->ids = malloc((size_t)(nids ? nids : 1) * sizeof *a.coll->ids);
      if (!a.coll || !a.coll->ids) {
        if (a.coll) free(a.coll);
        a.coll = NULL;
        r_fail(r, "out of memory");
      } else {
        a.coll->n = nc;
        for (int i = 0; i < nids; i++) a.coll->ids[i] = r_i32(r);
      }
    }
  }
  int want_index = a.input_index;
  /* ir_append takes over a.fused / a.coll: after this the graph owns them */
  ts_tensor t = ir_append(g, op, (ts_dtype)dt, rank, shape, n_in, in, &a);
  free(in);
  if (t == TS_NONE) return r_fail(r, "out of memory");
  ts_node *n = &g->nodes[t];
  if (op == TS_OP_INPUT && n->attr.input_index != want_index) return r_fail(r, "input index out of order");
  bool ok = true;
  n->name = r_str(r, &ok);
  if (!ok) return false;
  if (r_u32(r)) {
    uint64_t bytes = r_u64(r);
    if (r->bad) return false;
    uint64_t want = (uint64_t)ts_shape_numel(rank, shape) * ts_dtype_size((ts_dtype)dt);
    if (bytes != want) return r_fail(r, "constant byte count does not match its shape");
    if (bytes > r->len - r->pos) return r_fail(r, "constant data runs past the end (truncated)");
    n->data = malloc(bytes ? (size_t)bytes : 1);
    if (!n->data) return r_fail(r, "out of memory");
    r_bytes(r, n->data, (size_t)bytes);
  }
  n->sharding = r_sharding(r);
  return !r->bad;
}

ts_graph *ir_deserialize(const unsigned char *data, size_t len, size_t *pos) {
  if (!data || !pos || *pos > len) {
    set_error("graph_deserialize: NULL buffer or position past the end");
    return NULL;
  }
  ser_r r = {.p = data, .len = len, .pos = *pos};
  unsigned char magic[4] = {0};
  r_bytes(&r, magic, 4);
  if (!r.bad && memcmp(magic, ser_magic, 4) != 0) r_fail(&r, "bad magic (not a serialized graph)");
  uint32_t version = r_u32(&r);
  if (!r.bad && version != TS_SERIALIZE_VERSION) r_fail(&r, "unsupported format version");
  int n_nodes = r_i32(&r);
  if (!r.bad && (n_nodes < 0 || (size_t)n_nodes > (r.len - r.pos) / 16)) r_fail(&r, "node count out of range");
  ts_graph *g = r.bad ? NULL : ts_graph_new();
  if (!r.bad && !g) r_fail(&r, "out of memory");
  for (int i = 0; g && i < n_nodes && !r.bad; i++) r_node(&r, g, i);
  int n_out = r_i32(&r);
  if (!r.bad && (n_out < 0 || (size_t)n_out > (r.len - r.pos) / 8)) r_fail(&r, "output count out of range");
  for (int o = 0; !r.bad && o < n_out; o++) {
    int32_t t = r_i32(&r), alias = r_i32(&r);
    if (r.bad) break;
    if (t < 0 || t >= g->n_nodes) {
      r_fail(&r, "output is not a node");
      break;
    }
    if (ts_graph_add_output(g, t) < 0) {
      r_fail(&r, "output rejected");
      break;
    }
    if (alias >= g->n_inputs) {
      r_fail(&r, "output alias is not an input");
      break;
    }
    if (alias >= 0 && ts_graph_alias_output(g, o, g->inputs[alias]) < 0) {
      r_fail(&r, "output alias rejected");
      break;
    }
  }
  if (r.bad) {
    set_error_code(strcmp(r.bad, "out of memory") ? TS_ERR_INVALID_ARGUMENT : TS_ERR_OUT_OF_MEMORY,
                      "graph_deserialize: %s at byte %zu", r.bad, r.bad_at);
    ts_graph_free(g);
    return NULL;
  }
  if (ts_graph_verify(g) < 0) {
    set_error_context("graph_deserialize: the graph read back does not verify");
    ts_graph_free(g);
    return NULL;
  }
  *pos = r.pos;
  return g;
}
