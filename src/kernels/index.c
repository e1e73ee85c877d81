/* index.c — GATHER and SCATTER_ADD along axis 0 with i32/i64 indices.
 *   gather:      table (V, R...) , idx (I...)            -> (I..., R...)
 *   scatter_add: base (V, R...), idx (I...), upd (I..., R...) -> base shape
 * An index outside [0, V) is an execute error naming the index and position. */
#include "kernels/kernels_internal.h"

static int check_index(const char *who, int64_t v, int64_t pos, int64_t V) {
  if (v < 0 || v >= V)
    return set_error("%s: index %lld at position %lld is out of range [0, %lld)", who, (long long)v,
                        (long long)pos, (long long)V);
  return 0;
}

static void add_row(ts_dtype dt, char *dst, const char *src, int64_t r) {
  switch (dt) {
    case TS_F32: for (int64_t j = 0; j < r; j++) ((float *)dst)[j] += ((const float *)src)[j]; break;
    case TS_F64: for (int64_t j = 0; j < r; j++) ((double *)dst)[j] += ((const double *)src)[j]; break;
    default:
      if (ts_dtype_is_float(dt))
        for (int64_t j = 0; j < r; j++)
          tk_store_f64(dt, dst, j, (double)(float)(tk_load_f64(dt, dst, j) + tk_load_f64(dt, src, j)));
      else
        for (int64_t j = 0; j < r; j++)
          tk_store_i64(dt, dst, j, (int64_t)((uint64_t)tk_load_i64(dt, dst, j) + (uint64_t)tk_load_i64(dt, src, j)));
  }
}

int tk_index(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  (void)ctx;
  const ts_node *table = tk_operand(g, n, 0), *idx = tk_operand(g, n, 1);
  if (table->rank < 1) return set_error("%s: table must have rank >= 1", ir_op_name(n->op));
  int64_t V = table->shape[0], R = 1, ni = tk_numel(idx); /* R: elements per row */
  for (int d = 1; d < table->rank; d++) R *= table->shape[d];
  size_t es = ts_dtype_size(n->dtype), row = (size_t)R * es;
  const char *who = n->op == TS_OP_GATHER ? "gather" : "scatter_add";
  if (idx->dtype != TS_I32 && idx->dtype != TS_I64)
    return set_error("%s: indices must be i32 or i64, got %s", who, ts_dtype_name(idx->dtype));
  for (int64_t i = 0; i < ni; i++)
    if (check_index(who, tk_load_i64(idx->dtype, in[1], i), i, V)) return -1;
  if (n->op == TS_OP_GATHER) {
    for (int64_t i = 0; i < ni; i++) {
      int64_t v = tk_load_i64(idx->dtype, in[1], i);
      memcpy((char *)out + (size_t)i * row, (const char *)in[0] + (size_t)v * row, row);
    }
    return 0;
  }
  memcpy(out, in[0], (size_t)V * row);
  for (int64_t i = 0; i < ni; i++) {
    int64_t v = tk_load_i64(idx->dtype, in[1], i);
    add_row(n->dtype, (char *)out + (size_t)v * row, (const char *)in[2] + (size_t)i * row, R);
  }
  return 0;
}
