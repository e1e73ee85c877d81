/* cpu_collective.c — the CPU device's collective ops (all-reduce, all-gather,
 * reduce-scatter, all-to-all, collective-permute) that the SPMD partitioner
 * puts into per-device programs. They are the device's business, not a
 * kernel's: each one is a call into comm/ with this device's group, and every
 * device thread of the group makes the same call. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"        /* the communicator between device threads and processes */
#include "kernels/kernels.h"  /* ts_kstate: a started collective's staging buffer */
#include "runtime/device.h"   /* cpu_collective */

static int64_t numel(const ts_node *n) { return ts_shape_numel(n->rank, n->shape); }

/* Product of shape[lo..hi). */
static int64_t span(const int64_t *shape, int lo, int hi) {
  int64_t p = 1;
  for (int d = lo; d < hi; d++) p *= shape[d];
  return p;
}

/* dst viewed as (outer, n, chunk) bytes: copies src (outer, chunk) into block k. */
static void put_block(char *dst, const char *src, int64_t outer, int64_t n, int64_t k, size_t chunk) {
  for (int64_t o = 0; o < outer; o++) memcpy(dst + ((size_t)o * (size_t)n + (size_t)k) * chunk, src + (size_t)o * chunk, chunk);
}

/* src viewed as (outer, n, chunk) bytes: copies block k into dst (outer, chunk). */
static void get_block(char *dst, const char *src, int64_t outer, int64_t n, int64_t k, size_t chunk) {
  for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * chunk, src + ((size_t)o * (size_t)n + (size_t)k) * chunk, chunk);
}

/* in (.., S, ..) split into n blocks along s = attr.axis; block j goes to
 * member j; what member r sent lands in block r of out along c = attr.dims[0]. */
static int all_to_all(const ts_node *n, const ts_node *x, const void *in, void *out, int device, ts_comm *comm) {
  const ts_collective *k = n->attr.coll;
  int s = n->attr.axis, c = n->attr.dims[0], m = k->n;
  size_t es = ts_dtype_size(n->dtype);
  int64_t local[TS_MAX_RANK]; // in shape with dim s divided by m: one block
  memcpy(local, x->shape, sizeof local);
  local[s] /= m;
  size_t block = (size_t)span(local, 0, x->rank) * es;
  char *send = malloc(block * (size_t)m + 1), *recv = malloc(block * (size_t)m + 1);
  if (!send || !recv) {
    free(send);
    free(recv);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "all_to_all: out of memory (%zu bytes)", 2 * block * (size_t)m);
  }
  int64_t a = span(x->shape, 0, s);
  size_t sb = (size_t)span(local, s, x->rank) * es;
  for (int j = 0; j < m; j++) get_block(send + (size_t)j * block, in, a, m, j, sb);
  int rc = comm_all_to_all(comm, device, k->ids, m, send, recv, 1, block);
  if (rc == 0) {
    int64_t a2 = span(local, 0, c);
    size_t cb = (size_t)span(local, c, x->rank) * es;
    for (int r = 0; r < m; r++) put_block(out, recv + (size_t)r * block, a2, m, r, cb);
  }
  free(send);
  free(recv);
  return rc;
}

int cpu_collective(const ts_graph *g, int id, const void *const *in, void *out, int device, ts_comm *comm) {
  const ts_node *n = &g->nodes[id];
  const ts_collective *k = n->attr.coll;
  const ts_node *x = &g->nodes[n->in[0]];
  if (!k) return set_error("%s: node has no device group", ir_op_name(n->op));
  if (!comm) {
    /* a program run without a communicator: only groups of one are valid */
    if (n->op != TS_OP_COLLECTIVE_PERMUTE && k->n == 1) {
      memcpy(out, in[0], (size_t)numel(n) * ts_dtype_size(n->dtype));
      return 0;
    }
    return set_error("%s: no communicator (the program was compiled for several devices)", ir_op_name(n->op));
  }
  size_t es = ts_dtype_size(n->dtype);
  int d = n->attr.axis;
  switch (n->op) {
  case TS_OP_ALL_REDUCE:
    return comm_all_reduce(comm, device, k->ids, k->n, n->dtype, n->attr.reduce, in[0], out,
                              numel(n));
  case TS_OP_ALL_GATHER: // (outer, in[d] * rest) per member -> (outer, n, ...)
    return comm_all_gather(comm, device, k->ids, k->n, in[0], out, span(x->shape, 0, d),
                              (size_t)span(x->shape, d, x->rank) * es);
  case TS_OP_REDUCE_SCATTER: // (outer, n, out[d] * rest) -> (outer, out[d] * rest)
    return comm_reduce_scatter(comm, device, k->ids, k->n, n->dtype, n->attr.reduce, in[0], out,
                                  span(n->shape, 0, d), span(n->shape, d, n->rank));
  case TS_OP_ALL_TO_ALL:
    return all_to_all(n, x, in[0], out, device, comm);
  case TS_OP_COLLECTIVE_PERMUTE:
    return comm_permute(comm, device, k->ids, k->n, in[0], out, (size_t)numel(n) * es);
  default:
    return set_error("collective: %s is not a collective", ir_op_name(n->op));
  }
}

/* A node's staging buffer, kept across runs in the node's state (released
 * with the executable): what a started collective reads, so the operand's
 * memory may be reused as soon as the start returns. */
typedef struct {
  ts_kstate base;
  void *buf;
  size_t cap;
} stage_state;

static void stage_free(ts_kstate *s) {
  free(((stage_state *)s)->buf);
  free(s);
}

static void *stage(void **state, const void *in, size_t bytes) {
  stage_state *s = *state;
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) return NULL;
    s->base.free = stage_free;
    *state = s;
  }
  if (bytes > s->cap) {
    void *p = malloc(bytes);
    if (!p) return NULL;
    free(s->buf);
    s->buf = p;
    s->cap = bytes;
  }
  if (bytes) memcpy(s->buf, in, bytes);
  return s->buf ? s->buf : (void *)s;
}

/* The larger of operand and result: what the collective moves. */
static int64_t moved_bytes(const ts_graph *g, const ts_node *n) {
  int64_t in_bytes = numel(&g->nodes[n->in[0]]) * (int64_t)ts_dtype_size(g->nodes[n->in[0]].dtype);
  int64_t out_bytes = numel(n) * (int64_t)ts_dtype_size(n->dtype);
  return in_bytes > out_bytes ? in_bytes : out_bytes;
}

/* Work that takes milliseconds, not microseconds: a convolution (or its
 * gradients), causal attention, a matrix product of 4096 values or more. */
static bool heavy(const ts_node *n) {
  switch (n->op) {
  case TS_OP_CONV: case TS_OP_CONV_BWD_DATA: case TS_OP_CONV_BWD_FILTER:
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD:
    return true;
  case TS_OP_DOT:
    return ts_shape_numel(n->rank, n->shape) >= 4096;
  default:
    return false;
  }
}

/* Whether heavy work runs between collective `id` and its first user (the
 * schedule puts a convolution's weight gradient there: opt/schedule.c). */
static bool heavy_before_user(const ts_graph *g, int id) {
  bool work = false;
  for (int j = id + 1; j < g->n_nodes; j++) {
    const ts_node *v = &g->nodes[j];
    if (v->op == TS_OP_RESHAPE) continue;
    for (int k = 0; k < v->n_in; k++)
      if (ir_reshape_base(g, v->in[k]) == id) return work;
    work = work || heavy(v);
  }
  return work;
}

bool cpu_collective_inline(const ts_graph *g, int id, int device, ts_comm *comm) {
  const ts_node *n = &g->nodes[id];
  const ts_collective *k = n->attr.coll;
  if (!k || !comm) return false;
  int64_t bytes = moved_bytes(g, n);
  if (!comm_start_inline(comm, device, k->ids, k->n, bytes)) return false;
  /* between hosts a small call in line waits for the peer's answer, a round
   * trip (and the peer's lag) on the critical path: started instead, it
   * runs on the small lane while the heavy work before its user hides it */
  return !(comm_small_lane(comm, k->ids, k->n, bytes) && heavy_before_user(g, id));
}

int cpu_collective_wait_lane(const ts_graph *g, int id, int device, ts_comm *comm) {
  const ts_node *n = &g->nodes[id];
  const ts_collective *k = n->attr.coll;
  if (!k || !comm || n->n_in < 1) return 0;
  return comm_wait_lane(comm, device, k->ids, k->n, moved_bytes(g, n));
}

static int rank_in(const ts_collective *k, int device) {
  for (int i = 0; i < k->n; i++)
    if (k->ids[i] == device) return i;
  return -1;
}

int64_t cpu_collective_start(const ts_graph *g, int id, const void *in, void *out, int device, ts_comm *comm,
                             void **state, bool borrow) {
  const ts_node *n = &g->nodes[id];
  const ts_collective *k = n->attr.coll;
  const ts_node *x = &g->nodes[n->in[0]];
  size_t es = ts_dtype_size(n->dtype);
  int d = n->attr.axis;
  if (!k || !comm) {
    set_error("%s: an asynchronous collective needs a device group and a communicator", ir_op_name(n->op));
    return -1;
  }
  switch (n->op) {
  case TS_OP_ALL_REDUCE: { /* in place on out: a copy of the operand first */
    size_t bytes = (size_t)numel(n) * es;
    if (in != out && bytes) memmove(out, in, bytes);
    return comm_all_reduce_start(comm, device, k->ids, k->n, n->dtype, n->attr.reduce, out, numel(n));
  }
  case TS_OP_ALL_GATHER: {
    int64_t outer = span(x->shape, 0, d);
    size_t chunk = (size_t)span(x->shape, d, x->rank) * es;
    int r = rank_in(k, device);
    const void *src;
    if (outer == 1 && r >= 0) { /* in place: the operand at its own slot of out */
      char *slot = (char *)out + (size_t)r * chunk;
      if (slot != in && chunk) memmove(slot, in, chunk);
      src = slot;
    } else if (!(src = stage(state, in, (size_t)outer * chunk))) {
      set_error_code(TS_ERR_OUT_OF_MEMORY, "all_gather: out of memory staging %zu bytes", (size_t)outer * chunk);
      return -1;
    }
    return comm_all_gather_start(comm, device, k->ids, k->n, src, out, outer, chunk);
  }
  case TS_OP_REDUCE_SCATTER: {
    size_t bytes = (size_t)numel(x) * es;
    const void *src = borrow ? in : stage(state, in, bytes); /* borrow: the plan keeps it until the wait */
    if (!src) {
      set_error_code(TS_ERR_OUT_OF_MEMORY, "reduce_scatter: out of memory staging %zu bytes", bytes);
      return -1;
    }
    return comm_reduce_scatter_start(comm, device, k->ids, k->n, n->dtype, n->attr.reduce, src, out,
                                     span(n->shape, 0, d), span(n->shape, d, n->rank));
  }
  default:
    set_error("%s: cannot be started asynchronously", ir_op_name(n->op));
    return -1;
  }
}
