/* strategy.c — the cost model of auto-sharding: per node, its "loops" (the
 * splittable dims of its iteration space, each mapped to an output dim and to
 * operand dims, or contracted), the strategies (each mesh axis of size > 1
 * assigned to one loop or to none), their compute / communication cost and
 * per-device bytes; and the resharding cost between two layouts.
 *
 * A layout is one mesh-axis bit mask per tensor dim (axes major to minor in
 * ascending axis order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autoshard/as_internal.h"
#include "util/config.h" /* env_inline_bytes: which asynchronous collectives run in line */

typedef struct {
  int64_t size;
  int out;               /* output dim, or -1 (contracted: a partial result) */
  int in[AS_MAX_IN];     /* per operand: its dim, or -1 (the operand is replicated over it) */
} loop;

static int64_t numel(const ts_node *n) {
  int64_t e = 1;
  for (int d = 0; d < n->rank; d++) e *= n->shape[d];
  return e;
}

double as_bytes(const ts_node *n) { return (double)numel(n) * (double)ts_dtype_size(n->dtype); }

/* Devices a layout splits the tensor over. */
int64_t as_layout_tiles(const as_ctx *c, const uint8_t *lay, int rank) {
  int64_t t = 1;
  for (int d = 0; d < rank; d++)
    for (int a = 0; a < c->m->rank; a++)
      if (lay[d] & (1u << a)) t *= c->m->shape[a];
  return t;
}

static void add_loop(loop *L, int *n, int64_t size, int out) {
  loop *l = &L[(*n)++];
  l->size = size;
  l->out = out;
  for (int k = 0; k < AS_MAX_IN; k++) l->in[k] = -1;
}

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* A reshape's dims in groups of equal element count (row-major: [16,128] ->
 * [2048], [256] -> [4,64]): the major dim of an output group splits as the
 * major dim of its input group, by a factor dividing both (the loop's size),
 * and the partitioner reshapes such a tile locally. Only an equal prefix
 * mapped before: a batch-merging or head-splitting reshape of a sharded
 * tensor was priced with an all-gather the compiled program has not (GPT on
 * data=2,model=2: 29 of the analytic 66 MB sent). */
static void reshape_groups(const ts_node *x, const ts_node *n, loop *L) {
  int i = 0, o = 0;
  while (i < x->rank && o < n->rank) {
    int i0 = i, o0 = o;
    int64_t pi = x->shape[i++], po = n->shape[o++];
    while (pi != po && pi > 0 && po > 0) {
      if (pi < po && i < x->rank) pi *= x->shape[i++];
      else if (po < pi && o < n->rank) po *= n->shape[o++];
      else break;
    }
    if (pi != po || pi <= 0) return;
    L[o0].in[0] = i0;
    L[o0].size = gcd64(x->shape[i0], n->shape[o0]);
  }
}

/* Loops of node n; *can_partial: contracted loops may be split (a sum). */
static int node_loops(const ts_graph *g, const ts_node *n, loop *L, bool *can_partial) {
  int nl = 0;
  *can_partial = false;
  int nin = n->n_in < AS_MAX_IN ? n->n_in : AS_MAX_IN;
  switch (n->op) {
  case TS_OP_DOT: {
    const ts_dot_dims *dd = &n->attr.dot;
    const ts_node *a = &g->nodes[n->in[0]], *b = &g->nodes[n->in[1]];
    bool used_a[TS_MAX_RANK] = {0}, used_b[TS_MAX_RANK] = {0};
    int o = 0;
    for (int k = 0; k < dd->n_batch; k++) {
      add_loop(L, &nl, a->shape[dd->lhs_batch[k]], o++);
      L[nl - 1].in[0] = dd->lhs_batch[k], L[nl - 1].in[1] = dd->rhs_batch[k];
      used_a[dd->lhs_batch[k]] = used_b[dd->rhs_batch[k]] = true;
    }
    for (int k = 0; k < dd->n_contract; k++) used_a[dd->lhs_contract[k]] = used_b[dd->rhs_contract[k]] = true;
    for (int d = 0; d < a->rank; d++)
      if (!used_a[d]) add_loop(L, &nl, a->shape[d], o++), L[nl - 1].in[0] = d;
    for (int d = 0; d < b->rank; d++)
      if (!used_b[d]) add_loop(L, &nl, b->shape[d], o++), L[nl - 1].in[1] = d;
    for (int k = 0; k < dd->n_contract; k++) {
      add_loop(L, &nl, a->shape[dd->lhs_contract[k]], -1);
      L[nl - 1].in[0] = dd->lhs_contract[k], L[nl - 1].in[1] = dd->rhs_contract[k];
    }
    *can_partial = true;
    return nl;
  }
  case TS_OP_CONV: { /* x (N,C,H,W), w (O,C/g,KH,KW) -> (N,O,OH,OW); channels at ca */
    int ca = ir_chan_dim(n->attr.conv.layout);
    add_loop(L, &nl, n->shape[0], 0), L[nl - 1].in[0] = 0;
    add_loop(L, &nl, n->shape[ca], ca), L[nl - 1].in[1] = 0;
    if (n->attr.conv.groups <= 1) {
      add_loop(L, &nl, g->nodes[n->in[0]].shape[ca], -1), L[nl - 1].in[0] = ca, L[nl - 1].in[1] = 1;
      *can_partial = true;
    }
    return nl;
  }
  case TS_OP_CONV_BWD_DATA: { /* dy (N,O,..), w (O,C,..) -> (N,C,H,W) */
    int ca = ir_chan_dim(n->attr.conv.layout);
    add_loop(L, &nl, n->shape[0], 0), L[nl - 1].in[0] = 0;
    if (n->attr.conv.groups <= 1) {
      add_loop(L, &nl, n->shape[ca], ca), L[nl - 1].in[1] = 1;
      add_loop(L, &nl, g->nodes[n->in[0]].shape[ca], -1), L[nl - 1].in[0] = ca, L[nl - 1].in[1] = 0;
      *can_partial = true;
    }
    return nl;
  }
  case TS_OP_CONV_BWD_FILTER: { /* x (N,C,..), dy (N,O,..) -> (O,C,KH,KW) */
    int ca = ir_chan_dim(n->attr.conv.layout);
    add_loop(L, &nl, n->shape[0], 0), L[nl - 1].in[1] = ca;
    if (n->attr.conv.groups <= 1) add_loop(L, &nl, n->shape[1], 1), L[nl - 1].in[0] = ca;
    add_loop(L, &nl, g->nodes[n->in[0]].shape[0], -1), L[nl - 1].in[0] = 0, L[nl - 1].in[1] = 0;
    *can_partial = true;
    return nl;
  }
  case TS_OP_MAXPOOL: case TS_OP_MAXPOOL_GRAD: case TS_OP_AVGPOOL: case TS_OP_AVGPOOL_GRAD: {
    int dims[2] = {0, ir_chan_dim(n->attr.pool.layout)};
    for (int i = 0; i < 2; i++) {
      int d = dims[i];
      add_loop(L, &nl, n->shape[d], d);
      for (int k = 0; k < nin; k++) L[nl - 1].in[k] = d;
    }
    return nl;
  }
  case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_GRAD: case TS_OP_LAYERNORM_DGAMMA: { /* rows split, D whole */
    const ts_node *x = &g->nodes[n->in[0]];
    bool dg = n->op == TS_OP_LAYERNORM_DGAMMA;
    int dy = n->op == TS_OP_LAYERNORM_GRAD ? 2 : 1; /* dy's operand index (layer_norm: none) */
    for (int d = 0; d + 1 < x->rank; d++) {
      add_loop(L, &nl, x->shape[d], dg ? -1 : d);
      L[nl - 1].in[0] = d;
      if (n->op != TS_OP_LAYERNORM) L[nl - 1].in[dy] = d;
    }
    *can_partial = dg;
    return nl;
  }
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: { /* B and H split; T, Dh whole */
    int h = n->op == TS_OP_ATTENTION ? 2 : 3; /* qkv/dqkv (B, T, 3, H, Dh), y/dy (B, T, H, Dh) */
    add_loop(L, &nl, n->shape[0], 0), L[nl - 1].in[0] = 0;
    if (nin > 1) L[nl - 1].in[1] = 0;
    add_loop(L, &nl, n->shape[h], h), L[nl - 1].in[0] = 3;
    if (nin > 1) L[nl - 1].in[1] = 2;
    return nl;
  }
  case TS_OP_REDUCE: {
    const ts_node *x = &g->nodes[n->in[0]];
    int o = 0;
    for (int d = 0; d < x->rank; d++) {
      bool red = false;
      for (int k = 0; k < n->attr.n_dims; k++) red = red || n->attr.dims[k] == d;
      add_loop(L, &nl, x->shape[d], red ? -1 : (o < n->rank ? o++ : -1));
      L[nl - 1].in[0] = d;
    }
    *can_partial = true;
    return nl;
  }
  case TS_OP_GATHER: { /* table (V, D..), indices (I..) -> (I.., D..) */
    const ts_node *t = &g->nodes[n->in[0]], *ix = &g->nodes[n->in[1]];
    for (int d = 0; d < ix->rank; d++) add_loop(L, &nl, ix->shape[d], d), L[nl - 1].in[1] = d;
    for (int d = 1; d < t->rank; d++) add_loop(L, &nl, t->shape[d], ix->rank + d - 1), L[nl - 1].in[0] = d;
    add_loop(L, &nl, t->shape[0], -1), L[nl - 1].in[0] = 0; /* vocabulary split: masked rows, summed */
    *can_partial = true;
    return nl;
  }
  case TS_OP_SCATTER_ADD: { /* base (V, D..), indices (I..), updates (I.., D..) */
    const ts_node *ix = &g->nodes[n->in[1]];
    add_loop(L, &nl, n->shape[0], 0), L[nl - 1].in[0] = 0;
    for (int d = 1; d < n->rank; d++)
      add_loop(L, &nl, n->shape[d], d), L[nl - 1].in[0] = d, L[nl - 1].in[2] = ix->rank + d - 1;
    for (int d = 0; d < ix->rank; d++) add_loop(L, &nl, ix->shape[d], -1), L[nl - 1].in[1] = d, L[nl - 1].in[2] = d;
    *can_partial = true;
    return nl;
  }
  case TS_OP_BROADCAST: {
    const ts_node *x = &g->nodes[n->in[0]];
    for (int d = 0; d < n->rank; d++) add_loop(L, &nl, n->shape[d], d);
    for (int i = 0; i < x->rank && i < n->attr.n_dims; i++)
      if (x->shape[i] == n->shape[n->attr.dims[i]]) L[n->attr.dims[i]].in[0] = i;
    return nl;
  }
  case TS_OP_TRANSPOSE:
    for (int d = 0; d < n->rank; d++) add_loop(L, &nl, n->shape[d], d), L[nl - 1].in[0] = n->attr.dims[d];
    return nl;
  case TS_OP_RESHAPE: {
    for (int d = 0; d < n->rank; d++) add_loop(L, &nl, n->shape[d], d);
    reshape_groups(&g->nodes[n->in[0]], n, L);
    return nl;
  }
  default: /* elementwise, slice, pad, concatenate, leaves, anything else: dims of equal size map */
    for (int d = 0; d < n->rank; d++) {
      add_loop(L, &nl, n->shape[d], d);
      for (int k = 0; k < nin; k++) {
        const ts_node *x = &g->nodes[n->in[k]];
        if (x->rank == n->rank && x->shape[d] == n->shape[d] &&
            !(n->op == TS_OP_CONCAT && d == n->attr.axis))
          L[nl - 1].in[k] = d;
      }
    }
    return nl;
  }
}

/* FLOPs of the whole (global) node. */
static double node_flops(const ts_graph *g, const ts_node *n) {
  double out = (double)numel(n);
  switch (n->op) {
  case TS_OP_DOT: {
    double k = 1;
    for (int i = 0; i < n->attr.dot.n_contract; i++) k *= (double)g->nodes[n->in[0]].shape[n->attr.dot.lhs_contract[i]];
    return 2 * out * k;
  }
  case TS_OP_CONV: { /* 2 * out * C/g * KH * KW */
    const ts_node *w = &g->nodes[n->in[1]];
    return 2 * out * (double)(w->shape[1] * w->shape[2] * w->shape[3]);
  }
  case TS_OP_CONV_BWD_DATA: {
    const ts_node *w = &g->nodes[n->in[1]];
    return 2 * out * (double)(w->shape[0] * w->shape[2] * w->shape[3]) / (n->attr.conv.groups > 1 ? n->attr.conv.groups : 1);
  }
  case TS_OP_CONV_BWD_FILTER: { /* 2 * dw * N * OH * OW; dy (N, O, OH, OW), or (N, OH, OW, O) in NHWC */
    const ts_node *dy = &g->nodes[n->in[1]];
    int cd = ir_chan_dim(n->attr.conv.layout);
    double rows = 1;
    for (int i = 0; i < dy->rank; i++)
      if (i != cd) rows *= (double)dy->shape[i];
    return 2 * out * rows;
  }
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: { /* causal: half of 2 (fwd) or 5 (bwd) T x T x Dh matmuls */
    const ts_node *x = &g->nodes[n->in[0]]; /* (B, T, 3, H, Dh) */
    double per = (double)x->shape[0] * (double)x->shape[3] * (double)x->shape[1] * (double)x->shape[1] *
                 (double)x->shape[4];
    return (n->op == TS_OP_ATTENTION ? 2.0 : 5.0) * per;
  }
  default:
    return 0;
  }
}

/* ---- the constants and the per-node work (shared with compile/predict.c) ---- */

/* A class whose units are FLOPs (contractions), not bytes. */
static bool flop_class(int c) {
  return c <= TS_KERNEL_CONV_BWD_FILTER || c == TS_KERNEL_ATTENTION || c >= TS_KERNEL_CONV_NHWC;
}

void autoshard_costs_from(const ts_auto_shard_options *o, autoshard_costs *k) {
  double flops = o->flops_per_s > 0 ? o->flops_per_s : 2e10, bw = o->bytes_per_s > 0 ? o->bytes_per_s : 1e10;
  for (int c = 0; c < TS_KERNEL_CLASSES; c++) {
    k->rate[c] = o->kernel_per_s[c] > 0 ? o->kernel_per_s[c] : flop_class(c) ? flops : bw;
  }
  k->overhead = o->op_overhead_s > 0 ? o->op_overhead_s : 0;
  k->step_overhead = o->step_overhead_s > 0 ? o->step_overhead_s : 0;
  k->coll_wait = o->collective_wait_s > 0 ? o->collective_wait_s : 0;
  k->coll_async = o->collective_async_s > 0 ? o->collective_async_s : 0;
  k->bcast_operand = o->broadcast_operand_s > 0 ? o->broadcast_operand_s : 0;
  k->dot_bw = o->matmul_bytes_per_s > 0 ? o->matmul_bytes_per_s : 0;
  for (int i = 0; i < 3; i++) k->conv_wbw[i] = o->conv_weight_bytes_per_s[i] > 0 ? o->conv_weight_bytes_per_s[i] : 0;
  k->cache_bytes = o->cache_bytes > 0 ? o->cache_bytes : 0;
  for (int c = 0; c < TS_KERNEL_CLASSES; c++)
    k->cached[c] = o->kernel_cached_per_s[c] > 0 ? o->kernel_cached_per_s[c] : 0;
  for (int c = TS_KERNEL_CONV_NHWC; c <= TS_KERNEL_CONV_BWD_FILTER_NHWC; c++) /* unset: the NCHW class's */
    if (!(o->kernel_per_s[c] > 0)) {
      k->rate[c] = k->rate[c - TS_KERNEL_CONV_NHWC + TS_KERNEL_CONV];
      k->cached[c] = k->cached[c - TS_KERNEL_CONV_NHWC + TS_KERNEL_CONV];
    }
  k->par_overhead = o->parallel_overhead_s > 0 ? o->parallel_overhead_s : k->overhead;
  for (int a = 0; a < TS_MESH_MAX_RANK; a++) {
    k->link_bw[a] = o->axis_bytes_per_s[a] > 0 ? o->axis_bytes_per_s[a] : o->link_bytes_per_s > 0 ? o->link_bytes_per_s : 5e9;
    k->latency[a] = o->axis_latency_s[a] > 0 ? o->axis_latency_s[a] : o->link_latency_s > 0 ? o->link_latency_s : 5e-6;
    k->remote[a] = o->axis_between_hosts[a];
    k->procs[a] = o->axis_between_processes[a];
  }
  k->coll_long = o->collective_wait_long_s > 0 && o->collective_wait_long_after_s > 0 ? o->collective_wait_long_s : 0;
  k->coll_long_after = k->coll_long > 0 ? o->collective_wait_long_after_s : 0;
  k->proc_wait = o->process_wait_s > 0 ? o->process_wait_s : 0;
  k->proc_after = o->process_wait_after_s > 0 ? o->process_wait_after_s : 0;
  k->proc_step_wait = o->process_step_wait_s > 0 ? o->process_step_wait_s : 0;
}

bool autoshard_runs_inline(const autoshard_costs *k, uint32_t axes, double bytes) {
  bool remote = false;
  for (int a = 0; a < TS_MESH_MAX_RANK; a++)
    if (axes & (1u << a)) remote |= k->remote[a];
  int64_t limit = env_inline_bytes(remote);
  return limit >= 0 && bytes <= (double)limit;
}

/* kernels/kernels_internal.h TK_PAR_MIN: the work above which a kernel forks */
#define AS_PAR_MIN 32768.0

double autoshard_kernel_overhead(const autoshard_costs *k, double elems) {
  return elems >= AS_PAR_MIN ? k->par_overhead : k->overhead;
}

bool autoshard_node_runs(const ts_node *n) {
  return n->op != TS_OP_INPUT && n->op != TS_OP_CONSTANT && n->op != TS_OP_RESHAPE;
}

/* Elementwise ops computed by a polynomial or libm call per element, not streamed. */
static bool transcendental(ts_op op) {
  return op == TS_OP_EXP || op == TS_OP_LOG || op == TS_OP_TANH || op == TS_OP_ERF || op == TS_OP_GELU;
}

/* The bytes node n reads (its operands whole) and writes. */
static double io_bytes(const ts_graph *g, const ts_node *n) {
  double b = as_bytes(n);
  for (int k = 0; k < n->n_in; k++) b += as_bytes(&g->nodes[n->in[k]]);
  return b;
}

ts_kernel_class autoshard_node_class(const ts_graph *g, const ts_node *n, double par, bool update, double *units) {
  /* bytes read + written; a slice reads only the elements it copies (the
   * collective combiner's slices of one all-reduced buffer each read their
   * part, not the buffer); a concatenate reads its operands whole */
  double bytes = n->op == TS_OP_SLICE ? 2 * as_bytes(n) : io_bytes(g, n);
  double f = node_flops(g, n) / par;
  bool nhwc = ir_op_attr_kind(n->op) == TS_ATTRS_CONV && n->attr.conv.layout == TS_LAYOUT_NHWC; /* the NHWC conv classes */
  *units = bytes / par;
  switch (n->op) {
  case TS_OP_DOT:
    *units = f;
    return f < (double)(1 << 24) ? TS_KERNEL_MATMUL_SMALL : TS_KERNEL_MATMUL;
  case TS_OP_CONV: *units = f; return nhwc ? TS_KERNEL_CONV_NHWC : TS_KERNEL_CONV;
  case TS_OP_CONV_BWD_DATA: *units = f; return nhwc ? TS_KERNEL_CONV_BWD_DATA_NHWC : TS_KERNEL_CONV_BWD_DATA;
  case TS_OP_CONV_BWD_FILTER: *units = f; return nhwc ? TS_KERNEL_CONV_BWD_FILTER_NHWC : TS_KERNEL_CONV_BWD_FILTER;
  case TS_OP_REDUCE: return TS_KERNEL_REDUCE;
  case TS_OP_RNG_UNIFORM: case TS_OP_RNG_NORMAL: return TS_KERNEL_TRANSCENDENTAL; /* computed per element */
  case TS_OP_EXP: case TS_OP_LOG: case TS_OP_TANH: case TS_OP_ERF: case TS_OP_GELU:
    return update ? TS_KERNEL_OPTIMIZER : TS_KERNEL_TRANSCENDENTAL;
  case TS_OP_GATHER: case TS_OP_SCATTER_ADD: return TS_KERNEL_GATHER;
  case TS_OP_MAXPOOL: case TS_OP_MAXPOOL_GRAD: case TS_OP_AVGPOOL: case TS_OP_AVGPOOL_GRAD: return TS_KERNEL_POOL;
  case TS_OP_BROADCAST: return TS_KERNEL_BROADCAST;
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: *units = f; return TS_KERNEL_ATTENTION;
  case TS_OP_FUSED: {
    if (update) return TS_KERNEL_OPTIMIZER;
    /* what makes a fused kernel slower than its bytes: transcendental functions
     * (computed, not streamed), a broadcast whose source element changes every
     * output element (a last-dim bias: read by index per element), any broadcast */
    bool trans = false, rows = false, bcast = false;
    for (int i = 0; n->attr.fused && i < n->attr.fused->n; i++) {
      const ts_fused_instr *I = &n->attr.fused->ins[i];
      trans |= transcendental(I->op);
      rows |= I->op == TS_OP_BROADCAST && I->value < 16;
      bcast |= I->op == TS_OP_BROADCAST;
    }
    return trans ? TS_KERNEL_TRANSCENDENTAL : rows ? TS_KERNEL_BROADCAST_ROWS : bcast ? TS_KERNEL_BROADCAST
                                                                                     : TS_KERNEL_ELEMENTWISE;
  }
  default: return update ? TS_KERNEL_OPTIMIZER : TS_KERNEL_ELEMENTWISE;
  }
}

double autoshard_work_s(const autoshard_costs *k, const ts_graph *g, const ts_node *n, double par,
                        ts_kernel_class *kc, double units) {
  if (n->op == TS_OP_DOT) {
    if (k->dot_bw > 0) {
      double bytes = io_bytes(g, n) / par;
      if (bytes > AS_DOT_STREAM_BYTES) {
        *kc = TS_KERNEL_MATMUL;
        return units / k->rate[TS_KERNEL_MATMUL] + bytes / k->dot_bw;
      }
    }
    return units / k->rate[*kc];
  }
  return units / (k->cached[*kc] > 0 && units <= k->cache_bytes ? k->cached[*kc] : k->rate[*kc]);
}

double autoshard_conv_weight_s(const autoshard_costs *k, const ts_graph *g, const ts_node *n) {
  int kind = n->op == TS_OP_CONV ? 0 : n->op == TS_OP_CONV_BWD_DATA ? 1 : n->op == TS_OP_CONV_BWD_FILTER ? 2 : -1;
  if (kind < 0 || !(k->conv_wbw[kind] > 0)) return 0;
  const ts_node *w = kind == 2 ? n : &g->nodes[n->in[1]];
  return as_bytes(w) / k->conv_wbw[kind];
}

int autoshard_broadcast_operands(const ts_node *n) {
  int b = 0;
  for (int i = 0; n->op == TS_OP_FUSED && n->attr.fused && i < n->attr.fused->n; i++)
    b += n->attr.fused->ins[i].op == TS_OP_BROADCAST;
  return b;
}

double autoshard_sync_steps(int n, int passes, bool remote) {
  /* within a host: measured (bench_collectives -m 1K -M 4K, 8 devices on 2
   * cores) a 1 KiB all-gather 0.209 ms and reduce-scatter 0.198 ms against
   * the all-reduce's 0.203 ms; priced at one pass they read half of it */
  return n <= 1 ? 0 : (remote ? passes : 2) * ceil(log2((double)n));
}

double autoshard_ring_s(double bw, double latency, int n, double bytes, int passes, bool remote, double *sent) {
  if (n <= 1) return 0;
  double b = passes * bytes * (n - 1) / n;
  if (sent) *sent += b;
  /* latency: autoshard_sync_steps; bandwidth: the ring's (n-1)/n */
  return autoshard_sync_steps(n, passes, remote) * latency + b / bw;
}

/* Seconds of an all-reduce (passes 2) / all-gather (1) over one mesh axis
 * moving `bytes` per device (the size of the full result). */
static double ring(const as_ctx *c, int axis, double bytes, int passes, double *sent) {
  return autoshard_ring_s(c->k.link_bw[axis], c->k.latency[axis], (int)c->m->shape[axis], bytes, passes,
                          c->k.remote[axis], sent);
}

/* A collective's wait for its group's last device beyond alpha-beta, as
 * ts_predict_program charges it: collective_async_s for the all-reduces,
 * all-gathers and reduce-scatters the compiler starts asynchronously (taken
 * as all of them: most are, and the wait is the same in line), else
 * collective_wait_s. Charged to resharding and partial sums alike: charged
 * on the partial sums only, the solver traded them for all-gathers the
 * program then paid it on too (ResNet-20 --auto-shard on 2x2, a loaded
 * machine's calibration: its plan's predicted step 104 ms against 73 ms). */
static double coll_wait(const as_ctx *c) {
  return env_config()->async_collectives && c->k.coll_async > 0 ? c->k.coll_async : c->k.coll_wait;
}

/* Whether a dim split over the axes `from` (a mask: major to minor in axis
 * order) re-split over `to` keeps its blocks in place: one is a prefix of
 * the other (a local slice, or a gather over the lost minor axes alone).
 * Else (a+b -> b, b -> a+b) the partitioner gathers the dim whole and
 * slices it (spmd/reshard.c): the axes it keeps move too. */
static bool nested(uint8_t from, uint8_t to) {
  uint8_t both = from & to, rest = (from | to) & (uint8_t)~both;
  if (both != from && both != to) return false;
  return !rest || !both || __builtin_ctz(rest) > 31 - __builtin_clz(both); /* rest all after both */
}

/* Dim d of layout `from` gathered whole over its axes that no other dim of
 * `to` takes (those move by all-to-all first), one collective, as
 * spmd/reshard.c does where the dim's axes are not nested; *done gets them. */
static double gather_whole(const as_ctx *c, const uint8_t *from, const uint8_t *to, int rank, int d,
                           double local_from, double *sent, uint32_t *done) {
  int g = 1;
  double bw = INFINITY, lat = 0;
  bool remote = false;
  for (int a = 0; a < c->m->rank; a++) {
    if (!(from[d] & (1u << a)) || c->m->shape[a] <= 1) continue;
    bool elsewhere = false;
    for (int e = 0; e < rank && !elsewhere; e++) elsewhere = e != d && (to[e] & (1u << a));
    if (elsewhere) continue;
    g *= (int)c->m->shape[a], *done |= 1u << a;
    bw = fmin(bw, c->k.link_bw[a]), lat = fmax(lat, c->k.latency[a]), remote |= c->k.remote[a];
  }
  return g <= 1 ? 0 : autoshard_ring_s(bw, lat, g, local_from * g, 1, remote, sent) + coll_wait(c);
}

/* Seconds of the pieces a collective over dim d of tensor n (layout lay,
 * `members` devices) or a local slice of it (members 1) moves beyond one per
 * member: comm/ and the slice kernel copy or reduce a block per index of the
 * dims before d (the runtime's `outer`: cpu_collective.c), so a dim after a
 * split-free leading one moves in outer x members pieces. Among plans the
 * rest of the model prices alike (a gradient reduce-scattered into either
 * dim of a weight: the GPT's optimizer state went to the columns), the
 * contiguous one. AS_PIECE_S per piece: the GPT's weight gradients and
 * updates on their last dim against their first, least traced times per
 * step on a loaded machine, cost 44 ns per extra piece (reduce-scatters, 2
 * devices) and 38 ns (slices, 8 devices); priced at 40 ns the solver moved
 * the MLP's 2-device plan to one with 5 more small collectives, measured
 * 1.8x slower (median step 12.9 vs 7.0 ms, 4 interleaved rounds), the rest of
 * the model being that coarse there; at 10 ns the MLP's plan stays and the
 * GPT's weights take their rows. */
#define AS_PIECE_S 1e-8
double as_pieces_s(const as_ctx *c, const uint8_t *lay, const ts_node *n, int d, int members) {
  double outer = 1;
  for (int e = 0; e < d && e < n->rank; e++) {
    int64_t t = 1;
    for (int a = 0; a < c->m->rank; a++)
      if (lay[e] & (1u << a)) t *= c->m->shape[a];
    outer *= (double)n->shape[e] / (double)t;
  }
  return outer > 1 ? outer * members * AS_PIECE_S : 0;
}

double as_reshard_cost(const as_ctx *c, const uint8_t *from, const uint8_t *to, const ts_node *n, double *sent) {
  double full = as_bytes(n), t = 0;
  double local_to = full / (double)as_layout_tiles(c, to, n->rank);
  double local_from = full / (double)as_layout_tiles(c, from, n->rank);
  uint32_t done = 0; /* axes of dims gathered whole */
  for (int d = 0; d < n->rank; d++)
    if (from[d] && !nested(from[d], to[d])) t += gather_whole(c, from, to, n->rank, d, local_from, sent, &done);
  for (int a = 0; a < c->m->rank; a++) {
    int sz = (int)c->m->shape[a];
    if (sz <= 1) continue;
    int df = -1, dt = -1;
    for (int d = 0; d < n->rank; d++) {
      if (from[d] & (1u << a)) df = d;
      if (to[d] & (1u << a)) dt = d;
    }
    if (df < 0 && dt >= 0) t += as_pieces_s(c, to, n, dt, 1); /* a local slice */
    if (df < 0 || df == dt || (done & (1u << a))) continue; /* same, a local slice, or gathered above */
    if (dt < 0) t += ring(c, a, local_to, 1, sent) + as_pieces_s(c, from, n, df, sz); /* all-gather */
    else t += ring(c, a, local_from / sz, 1, sent);             /* all-to-all */
    t += coll_wait(c); /* the wait for the group's last device (as ts_predict_program) */
  }
  /* a different axis order within one dim, same axes: a permutation of blocks */
  return t;
}

/* ---- fusion: what compile_graph's fuse pass (opt/fuse.c) makes of the global graph ----
 * An elementwise node whose users are all elementwise of its size (and that
 * is no graph output) joins its user's fused kernel: nothing is written, and
 * its readers in the kernel read nothing; a broadcast read by elementwise
 * users only is read by index (its source's bytes). So a chain of k
 * elementwise ops costs its external inputs and its result once, not k
 * times: the AdamW update is one pass over 7 tensors, not ~15 passes over
 * 3 each (which made the optimizer look several times as expensive as it
 * runs, and sharding weights to split it look worth its all-gathers). */

static bool fusible(const ts_node *n) { return ir_op_has(n->op, TS_OPF_FUSIBLE); }

/* c->bcast: per fused kernel (not a transcendental one: compute-bound), its
 * broadcast operands beyond the first x its elements (a batch norm's mean,
 * scale, shift; predict.c charges kernel.broadcast.operand_s for them) */
static void fusion_broadcasts(as_ctx *c, const bool *absorbed, const int *group, const bool *trans) {
  const ts_graph *g = c->g;
  int n = g->n_nodes;
  c->bcast = calloc((size_t)n + 1, sizeof *c->bcast);
  if (!c->bcast) return;
  for (int v = 0; v < n; v++) { /* the count first, in the root's entry; a constant's broadcast is a splat */
    const ts_node *nd = &g->nodes[v];
    if (nd->op == TS_OP_BROADCAST && absorbed[v] && g->nodes[nd->in[0]].op != TS_OP_CONSTANT) c->bcast[group[v]] += 1;
  }
  for (int v = 0; v < n; v++)
    c->bcast[v] = c->bcast[v] > 1 && !trans[v] ? (c->bcast[v] - 1) * (double)numel(&g->nodes[v]) : 0;
}

void as_fusion(as_ctx *c) {
  const ts_graph *g = c->g;
  int n = g->n_nodes;
  c->moved = malloc(((size_t)n + 1) * sizeof *c->moved);
  c->kernel = malloc(((size_t)n + 1) * sizeof *c->kernel);
  int *users = calloc((size_t)n + 1, sizeof *users);
  bool *absorbed = calloc((size_t)n + 1, sizeof *absorbed), *out = calloc((size_t)n + 1, sizeof *out);
  if (!c->moved || !c->kernel || !users || !absorbed || !out) { /* unfused costs */
    free(c->moved), free(c->kernel);
    c->moved = NULL, c->kernel = NULL;
    free(users), free(absorbed), free(out);
    return;
  }
  for (int k = 0; k < g->n_outputs; k++) out[g->outputs[k]] = true;
  /* absorbed[v]: every user is fusible (and, for a fusible v, of v's size) */
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    absorbed[v] = !out[v] && (fusible(nd) || nd->op == TS_OP_BROADCAST);
  }
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    for (int k = 0; k < nd->n_in; k++) {
      int u = nd->in[k];
      users[u]++;
      if (!absorbed[u]) continue;
      const ts_node *p = &g->nodes[u];
      bool same = ts_shape_numel(p->rank, p->shape) == ts_shape_numel(nd->rank, nd->shape);
      if (!fusible(nd) || (p->op != TS_OP_BROADCAST && !same)) absorbed[u] = false;
    }
  }
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    if (!users[v]) absorbed[v] = false;
    c->kernel[v] = autoshard_node_runs(nd) && !absorbed[v];
    c->moved[v] = -1;
  }
  /* each node's kernel (the root of its fused group): an absorbed node's is
   * its first user's */
  int *group = users; /* reused */
  for (int v = 0; v < n; v++) group[v] = v;
  for (int v = 0; v < n; v++)
    for (int k = 0; k < g->nodes[v].n_in; k++) {
      int u = g->nodes[v].in[k];
      if (absorbed[u] && group[u] == u) group[u] = v;
    }
  for (int v = n - 1; v >= 0; v--)
    if (group[v] != v) group[v] = group[group[v]];
  /* a fused kernel computing a transcendental function runs at that class's
   * rate on all its bytes (autoshard_node_class of a FUSED node) */
  bool *trans = out; /* reused */
  for (int v = 0; v < n; v++) trans[v] = false;
  for (int v = 0; v < n; v++)
    if (transcendental(g->nodes[v].op)) trans[group[v]] = true;
  c->trans = malloc(((size_t)n + 1) * sizeof *c->trans);
  for (int v = 0; c->trans && v < n; v++) c->trans[v] = fusible(&g->nodes[v]) && trans[group[v]];
  fusion_broadcasts(c, absorbed, group, trans);
  /* bytes: an external input once per kernel that reads it, the result once */
  int *read_by = malloc(((size_t)n + 1) * sizeof *read_by);
  for (int v = 0; read_by && v < n; v++) read_by[v] = -1;
  for (int v = 0; v < n; v++) {
    const ts_node *nd = &g->nodes[v];
    if (nd->op == TS_OP_BROADCAST) {
      c->moved[v] = absorbed[v] ? 0 : as_bytes(nd) + as_bytes(&g->nodes[nd->in[0]]);
      continue;
    }
    if (!fusible(nd)) continue;
    double b = absorbed[v] ? 0 : as_bytes(nd);
    for (int k = 0; k < nd->n_in; k++) {
      int u = nd->in[k];
      const ts_node *x = &g->nodes[u];
      if (x->op == TS_OP_CONSTANT || (absorbed[u] && x->op != TS_OP_BROADCAST)) continue; /* splats; fused */
      int src = x->op == TS_OP_BROADCAST && absorbed[u] ? x->in[0] : u; /* a broadcast: its source by index */
      if (read_by && read_by[src] == group[v]) continue;
      if (read_by) read_by[src] = group[v];
      b += as_bytes(&g->nodes[src]);
    }
    c->moved[v] = b;
  }
  free(read_by);
  free(users), free(absorbed), free(out);
}

void as_windows(as_ctx *c) {
  const ts_graph *g = c->g;
  int n = g->n_nodes;
  double *pre = malloc(((size_t)n + 2) * sizeof *pre);
  int *first = malloc(((size_t)n + 1) * sizeof *first);
  c->window = malloc(((size_t)n + 1) * sizeof *c->window);
  if (!pre || !first || !c->window) {
    free(pre), free(first), free(c->window);
    c->window = NULL;
    return;
  }
  /* each node's compute as if evenly split over the devices (what the plan is
   * unknown yet), prefix-summed in program order */
  double ndev = (double)c->m->ndevices;
  pre[0] = 0;
  for (int v = 0; v < n; v++) pre[v + 1] = pre[v] + (autoshard_node_runs(&g->nodes[v]) ? as_node_compute(c, v, ndev) : 0);
  for (int v = 0; v < n; v++) first[v] = n;
  for (int v = n - 1; v >= 0; v--)
    for (int k = 0; k < g->nodes[v].n_in; k++) first[g->nodes[v].in[k]] = v;
  for (int v = 0; v < n; v++) {
    int f = first[v];
    /* a reshape runs nothing: its users wait as the reshaped node's would */
    while (f < n && g->nodes[f].op == TS_OP_RESHAPE && first[f] < n) f = first[f];
    c->window[v] = pre[f] - pre[v + 1];
  }
  free(pre), free(first);
}

double as_node_compute(const as_ctx *c, int id, double par) {
  const ts_node *n = &c->g->nodes[id];
  double units;
  ts_kernel_class kc = autoshard_node_class(c->g, n, par, false, &units);
  if (c->moved && c->moved[id] >= 0 && !flop_class(kc)) units = c->moved[id] / par;
  if (c->trans && c->trans[id] && kc == TS_KERNEL_ELEMENTWISE) kc = TS_KERNEL_TRANSCENDENTAL;
  if (!autoshard_node_runs(n)) return 0; /* inputs, constants, reshapes: no kernel */
  bool runs = c->kernel ? c->kernel[id] : true;
  double bcast = c->bcast ? c->bcast[id] / par * c->k.bcast_operand : 0;
  double work = autoshard_work_s(&c->k, c->g, n, par, &kc, units);
  return work + bcast + (runs ? autoshard_kernel_overhead(&c->k, (double)numel(n) / par) : 0);
}

/* Appends strategy s to the node's list (grows it). */
static int push(as_node *an, const as_strat *s) {
  if (an->ns == an->cap) {
    int cap = an->cap ? 2 * an->cap : 8;
    as_strat *v = realloc(an->s, (size_t)cap * sizeof *v);
    if (!v) return -1;
    an->s = v, an->cap = cap;
  }
  an->s[an->ns++] = *s;
  return 0;
}

/* Seconds of summing a partial result over the axes in `partial` (local_out:
 * the per-device bytes before; rs: an axis reduce-scattered instead, or -1),
 * of which only the part the compute before its first user does not hide:
 * the runtime starts such collectives asynchronously (plan/async.c plan_mark_async),
 * so a weight gradient's reduction overlaps the rest of the backward pass;
 * its latency stays exposed (the start). But one of at most env_inline_bytes
 * (autoshard_runs_inline: 8 MiB within a host, 64 KiB across) runs in line,
 * blocking, as the runtime runs it when the worker is idle (taken as idle:
 * ts_predict_program follows the worker), and so does every one without
 * asynchronous collectives. Each also waits for the group's last device:
 * k.coll_async (asynchronous) or k.coll_wait, as ts_predict_program charges. */
static double partial_cost(const as_ctx *c, int id, uint8_t partial, int rs, double local_out, double *sent) {
  double t = 0, lat = 0, bytes = local_out;
  uint32_t axes = partial | (rs >= 0 ? 1u << rs : 0);
  if (!axes) return 0;
  bool async = env_config()->async_collectives;
  double wait = coll_wait(c);
  if (rs >= 0) {
    t += ring(c, rs, bytes, 1, sent);
    lat += autoshard_sync_steps((int)c->m->shape[rs], 1, c->k.remote[rs]) * c->k.latency[rs];
    bytes /= (double)c->m->shape[rs];
  }
  for (int a = 0; a < c->m->rank; a++)
    if ((partial & (1u << a)) && a != rs) {
      t += ring(c, a, bytes, 2, sent);
      lat += autoshard_sync_steps((int)c->m->shape[a], 2, c->k.remote[a]) * c->k.latency[a];
    }
  if (!async || autoshard_runs_inline(&c->k, axes, local_out)) return t + wait;
  t += wait;
  double window = c->window ? c->window[id] : 0;
  return t - lat > window ? t - window : lat;
}

int as_node_strategies(as_ctx *c, int id) {
  const ts_graph *g = c->g;
  const ts_node *n = &g->nodes[id];
  as_node *an = &c->nodes[id];
  loop L[2 * TS_MAX_RANK + 2];
  bool can_partial;
  int nl = node_loops(g, n, L, &can_partial);
  int nin = n->n_in < AS_MAX_IN ? n->n_in : AS_MAX_IN;
  /* the mesh axes that matter */
  int ax[TS_MESH_MAX_RANK], na = 0;
  for (int a = 0; a < c->m->rank && na < AS_MAX_AXES; a++)
    if (c->m->shape[a] > 1) ax[na++] = a;
  int combos = 1;
  for (int k = 0; k < na; k++) combos *= nl + 1;
  for (int code = 0; code < combos; code++) {
    int pick[AS_MAX_AXES], x = code;
    for (int k = 0; k < na; k++) pick[k] = x % (nl + 1) - 1, x /= nl + 1; /* -1: axis unused */
    as_strat s;
    memset(&s, 0, sizeof s);
    bool ok = true;
    int64_t split[2 * TS_MAX_RANK + 2];
    for (int l = 0; l < nl; l++) split[l] = 1;
    int64_t par = 1;
    for (int k = 0; k < na && ok; k++) {
      int l = pick[k];
      if (l < 0) continue;
      int a = ax[k];
      split[l] *= c->m->shape[a];
      if (L[l].size % split[l] != 0) ok = false;
      if (L[l].out < 0 && !can_partial) ok = false;
      par *= c->m->shape[a];
      if (L[l].out >= 0) s.out[L[l].out] |= (uint8_t)(1u << a);
      else s.partial |= (uint8_t)(1u << a);
      for (int i = 0; i < nin; i++)
        if (L[l].in[i] >= 0) s.in[i][L[l].in[i]] |= (uint8_t)(1u << a);
    }
    if (!ok) continue;
    /* operands whose dims the loops do not name (scalars) stay replicated: s.in zero */
    s.compute = as_node_compute(c, id, (double)par);
    double local_out = as_bytes(n) / (double)as_layout_tiles(c, s.out, n->rank);
    s.cost = s.compute + partial_cost(c, id, s.partial, -1, local_out, &s.comm_bytes);
    s.mem = local_out;
    if (push(an, &s) < 0) return -1;
    /* the partial sum reduce-scattered over one of its axes into an output dim
     * (half an all-reduce's bytes: a gradient going to a sharded state) */
    /* (room kept for the combinations still to come: ns stays under AS_MAX_STRATS) */
    bool room = an->ns + (combos - code) + n->rank * c->m->rank < AS_MAX_STRATS;
    for (int a = 0; a < c->m->rank && s.partial && room; a++) {
      if (!(s.partial & (1u << a))) continue;
      for (int d = 0; d < n->rank; d++) {
        as_strat v = s;
        v.out[d] |= (uint8_t)(1u << a);
        int64_t t = 1;
        for (int b = 0; b < c->m->rank; b++)
          if (v.out[d] & (1u << b)) t *= c->m->shape[b];
        if (n->shape[d] % t != 0) continue;
        v.comm_bytes = 0;
        v.cost = v.compute + partial_cost(c, id, s.partial, a, local_out, &v.comm_bytes) +
                 as_pieces_s(c, v.out, n, d, (int)c->m->shape[a]);
        /* d already split over a later axis: the scattered blocks come in
         * that axis' order first (b, a), the layout is a then b: the
         * partitioner permutes them (ts_predict_program: one permute) */
        if (s.out[d] >> (a + 1)) {
          double blk = local_out / (double)c->m->shape[a];
          v.cost += coll_wait(c) + c->k.latency[a] + blk / c->k.link_bw[a];
          v.comm_bytes += blk;
        }
        v.partial &= (uint8_t)~(1u << a);
        v.mem = local_out / (double)c->m->shape[a];
        if (push(an, &v) < 0) return -1;
      }
    }
  }
  return 0;
}
