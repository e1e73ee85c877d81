/* layout.c — data movement: CONSTANT (dense copy or splat), IOTA, BROADCAST,
 * RESHAPE, TRANSPOSE, SLICE, PAD, CONCAT. All but IOTA go through one strided
 * copy (tk_copy_strided) that merges contiguous dims and copies the innermost
 * run with memcpy when both sides are dense. */
#include <stdlib.h>

#include "kernels/kernels_internal.h"

void tk_row_strides(int rank, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
}

void tk_fill(void *dst, int64_t n, size_t esize, const void *val) {
  switch (esize) {
    case 1: memset(dst, *(const uint8_t *)val, (size_t)n); break;
    case 2: { uint16_t v; memcpy(&v, val, 2); for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = v; break; }
    case 4: {
      uint32_t v, *d = dst;
      memcpy(&v, val, 4);
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
    default: {
      uint64_t v, *d = dst;
      memcpy(&v, val, 8);
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = v;
      break;
    }
  }
}

static void copy_run(size_t esize, const char *s, int64_t ss, char *d, int64_t ds, int64_t n) {
  if (ss == 1 && ds == 1) {
    memcpy(d, s, (size_t)n * esize);
    return;
  }
  if (ss == 0 && ds == 1) { /* broadcast along the run */
    tk_fill(d, n, esize, s);
    return;
  }
  switch (esize) {
    case 1: for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss]; break;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)d)[i * ds] = ((const uint16_t *)s)[i * ss]; break;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)d)[i * ds] = ((const uint32_t *)s)[i * ss]; break;
    default: for (int64_t i = 0; i < n; i++) ((uint64_t *)d)[i * ds] = ((const uint64_t *)s)[i * ss]; break;
  }
}

void tk_copy_strided(int rank, const int64_t *shape, size_t esize, const void *src,
                     const int64_t *src_strides, void *dst, const int64_t *dst_strides, int nthreads) {
  int64_t sh[TS_MAX_RANK], ss[TS_MAX_RANK], ds[TS_MAX_RANK];
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (r > 0 && ss[r - 1] == src_strides[d] * shape[d] && ds[r - 1] == dst_strides[d] * shape[d]) {
      sh[r - 1] *= shape[d];
      ss[r - 1] = src_strides[d];
      ds[r - 1] = dst_strides[d];
      continue;
    }
    sh[r] = shape[d], ss[r] = src_strides[d], ds[r] = dst_strides[d];
    r++;
  }
  if (r == 0) {
    memcpy(dst, src, esize);
    return;
  }
  /* A short innermost run (the channels of an NCHW -> NHWC transpose: 3 at a ResNet's stem)
   * would cost a row's overhead per few elements: an outer dim that reads the source with
   * unit stride and is longer becomes the run instead (written strided). Only the traversal
   * order changes, so the copy is the same (src and dst never overlap here). */
  if (r >= 2 && sh[r - 1] < 16 && src != dst)
    for (int d = r - 2; d >= 0; d--)
      if (ss[d] == 1 && sh[d] > sh[r - 1]) {
        int64_t t;
        t = sh[d], sh[d] = sh[r - 1], sh[r - 1] = t;
        t = ss[d], ss[d] = ss[r - 1], ss[r - 1] = t;
        t = ds[d], ds[d] = ds[r - 1], ds[r - 1] = t;
        break;
      }
  int64_t inner = sh[r - 1], rows = 1;
  for (int d = 0; d < r - 1; d++) rows *= sh[d];
  int nt = rows * inner >= TK_PAR_MIN ? nthreads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t row = 0; row < rows; row++) {
    int64_t so = 0, dof = 0, rem = row;
    for (int d = r - 2; d >= 0; d--) {
      int64_t idx = rem % sh[d];
      rem /= sh[d];
      so += idx * ss[d];
      dof += idx * ds[d];
    }
    copy_run(esize, (const char *)src + so * (int64_t)esize, ss[r - 1], (char *)dst + dof * (int64_t)esize,
             ds[r - 1], inner);
  }
}

static int iota(const ts_node *n, void *out) {
  int64_t st[TS_MAX_RANK], numel = tk_numel(n);
  if (n->rank == 0) return tk_store_i64(n->dtype, out, 0, 0), 0;
  int ax = n->attr.axis;
  if (ax < 0 || ax >= n->rank) return set_error("iota: axis %d out of range for rank %d", ax, n->rank);
  tk_row_strides(n->rank, n->shape, st);
  for (int64_t i = 0; i < numel; i++) tk_store_i64(n->dtype, out, i, (i / st[ax]) % n->shape[ax]);
  return 0;
}

int tk_layout(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  size_t es = ts_dtype_size(n->dtype);
  int64_t numel = tk_numel(n), ost[TS_MAX_RANK], ist[TS_MAX_RANK], s[TS_MAX_RANK];
  int nt = ctx->num_threads;
  tk_row_strides(n->rank, n->shape, ost);
  switch (n->op) {
    case TS_OP_CONSTANT: {
      if (n->data) {
        memcpy(out, n->data, (size_t)numel * es);
      } else {
        char v[8];
        tk_scalar_bytes(n->dtype, n->attr.value, v);
        tk_fill(out, numel, es, v);
      }
      return 0;
    }
    case TS_OP_IOTA: return iota(n, out);
    case TS_OP_RESHAPE: memcpy(out, in[0], (size_t)numel * es); return 0;
    case TS_OP_BROADCAST: {
      const ts_node *x = tk_operand(g, n, 0);
      tk_row_strides(x->rank, x->shape, ist);
      for (int d = 0; d < n->rank; d++) s[d] = 0;
      for (int i = 0; i < x->rank; i++) {
        int od = n->attr.dims[i];
        if (od < 0 || od >= n->rank) return set_error("broadcast: operand dim %d maps to dim %d of a rank-%d result", i, od, n->rank);
        if (x->shape[i] != 1) s[od] = ist[i];
      }
      tk_copy_strided(n->rank, n->shape, es, in[0], s, out, ost, nt);
      return 0;
    }
    case TS_OP_TRANSPOSE: {
      const ts_node *x = tk_operand(g, n, 0);
      tk_row_strides(x->rank, x->shape, ist);
      for (int d = 0; d < n->rank; d++) s[d] = ist[n->attr.dims[d]];
      tk_copy_strided(n->rank, n->shape, es, in[0], s, out, ost, nt);
      return 0;
    }
    case TS_OP_SLICE: {
      const ts_node *x = tk_operand(g, n, 0);
      tk_row_strides(x->rank, x->shape, ist);
      int64_t off = 0;
      for (int d = 0; d < n->rank; d++) {
        int64_t step = n->attr.stride[d] > 0 ? n->attr.stride[d] : 1;
        off += n->attr.start[d] * ist[d];
        s[d] = ist[d] * step;
      }
      tk_copy_strided(n->rank, n->shape, es, (const char *)in[0] + off * (int64_t)es, s, out, ost, nt);
      return 0;
    }
    case TS_OP_PAD: {
      const ts_node *x = tk_operand(g, n, 0);
      char v[8];
      tk_scalar_bytes(n->dtype, n->attr.value, v);
      tk_fill(out, numel, es, v);
      tk_row_strides(x->rank, x->shape, ist);
      int64_t off = 0;
      for (int d = 0; d < n->rank; d++) off += n->attr.start[d] * ost[d];
      tk_copy_strided(x->rank, x->shape, es, in[0], ist, (char *)out + off * (int64_t)es, ost, nt);
      return 0;
    }
    case TS_OP_CONCAT: {
      int ax = n->attr.axis;
      int64_t pos = 0;
      for (int k = 0; k < n->n_in; k++) {
        const ts_node *x = tk_operand(g, n, k);
        tk_row_strides(x->rank, x->shape, ist);
        tk_copy_strided(x->rank, x->shape, es, in[k], ist, (char *)out + pos * ost[ax] * (int64_t)es, ost, nt);
        pos += x->shape[ax];
      }
      return 0;
    }
    default: return set_error("layout: op %s is not a layout op", ir_op_name(n->op));
  }
}
