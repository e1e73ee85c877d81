/* kernel_ex.h — what the kernel tests (test_kernels.c, test_conv_kernels.c)
 * share: seeded random test data and a tiny executor that builds graphs with
 * ir_append and runs them node by node, one buffer per node. Not a test. */
#ifndef TS_TEST_KERNEL_EX_H
#define TS_TEST_KERNEL_EX_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "util/half.h"

/* ---- random numbers for test data (seeded by the harness) ---- */
static uint64_t rs;
static inline double urand(void) { /* splitmix64 -> [0, 1) */
  uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}
static inline double srand1(void) { return 2 * urand() - 1; }

/* ---- a tiny executor: buffers per node, inputs filled by the test ---- */
typedef struct {
  ts_graph *g;
  void *buf[256];
  ts_kstate *st[256];
} ex_t;

static inline int64_t numel_of(const ts_graph *g, ts_tensor t) { return ts_tensor_numel(g, t); }

static inline void *alloc_node(ex_t *e, ts_tensor t) {
  size_t bytes = (size_t)numel_of(e->g, t) * ts_dtype_size(ts_tensor_dtype(e->g, t));
  if (!e->buf[t]) e->buf[t] = aligned_alloc(64, (bytes + 64) / 64 * 64);
  return e->buf[t];
}

static inline ts_tensor input(ex_t *e, ts_dtype dt, int rank, const int64_t *shape) {
  ts_tensor t = ir_append(e->g, TS_OP_INPUT, dt, rank, shape, 0, NULL, NULL);
  alloc_node(e, t);
  return t;
}

/* Random input values in [-1, 1) (integers: [-5, 5]). */
static inline ts_tensor rinput(ex_t *e, ts_dtype dt, int rank, const int64_t *shape) {
  ts_tensor t = input(e, dt, rank, shape);
  int64_t n = numel_of(e->g, t);
  for (int64_t i = 0; i < n; i++) {
    double v = srand1();
    switch (dt) {
      case TS_F32: ((float *)e->buf[t])[i] = (float)v; break;
      case TS_F64: ((double *)e->buf[t])[i] = v; break;
      case TS_BF16: ((uint16_t *)e->buf[t])[i] = ts_f32_to_bf16((float)v); break;
      case TS_I32: ((int32_t *)e->buf[t])[i] = (int32_t)floor(v * 5.5); break;
      case TS_I64: ((int64_t *)e->buf[t])[i] = (int64_t)floor(v * 5.5); break;
      default: memset(e->buf[t], 0, (size_t)n * ts_dtype_size(dt));
    }
  }
  return t;
}

static inline ts_tensor node(ex_t *e, ts_op op, ts_dtype dt, int rank, const int64_t *shape, int n_in,
                      const int32_t *in, const ts_attr *attr) {
  return ir_append(e->g, op, dt, rank, shape, n_in, in, attr);
}

/* Runs every not-yet-computed node up to t; returns the kernel status of t. */
static inline int run(ex_t *e, ts_tensor t) {
  for (int i = 0; i <= t; i++) {
    const ts_node *n = ts_node_at(e->g, i);
    if (e->buf[i] && n->op == TS_OP_INPUT) continue;
    if (e->buf[i]) continue;
    const void *in[64];
    for (int k = 0; k < n->n_in; k++) in[k] = e->buf[n->in[k]];
    alloc_node(e, i);
    ts_kctx ctx = {.num_threads = 2};
    if (kernel_run(e->g, i, in, e->buf[i], &e->st[i], &ctx)) return -1;
  }
  return 0;
}

static inline void ex_init(ex_t *e) {
  memset(e, 0, sizeof *e);
  e->g = ts_graph_new();
}

static inline void ex_free(ex_t *e) {
  for (int i = 0; i < 256; i++) {
    free(e->buf[i]);
    if (e->st[i]) e->st[i]->free(e->st[i]);
  }
  ts_graph_free(e->g);
}

static inline double get(const ex_t *e, ts_tensor t, int64_t i) {
  const void *p = e->buf[t];
  switch (ts_tensor_dtype(e->g, t)) {
    case TS_F32: return ((const float *)p)[i];
    case TS_F64: return ((const double *)p)[i];
    case TS_BF16: return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    case TS_I32: return ((const int32_t *)p)[i];
    case TS_I64: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
  }
}

/* max |a - ref| / (1 + |ref|) over n elements */
static inline double max_err(const ex_t *e, ts_tensor t, const double *ref, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(get(e, t, i) - ref[i]) / (1 + fabs(ref[i]));
    if (!(d <= m)) m = d; /* NaN counts as an error */
  }
  return m;
}

static inline void strides(int rank, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) st[d] = s, s *= shape[d];
}

#endif
