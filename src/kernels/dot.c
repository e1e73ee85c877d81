/* dot.c — TS_OP_DOT (HLO dot_general).
 *
 * Every dot is viewed as a batched matmul (B, M, K) x (B, K, N) -> (B, M, N):
 * B = batch dims, M = lhs free dims, K = contracting dims (in attr order),
 * N = rhs free dims; the output (batch, lhs free, rhs free) is dense (B, M, N).
 * When an operand's dims of each group merge into one strided dim, oneDNN
 * reads it in place (x^T.dy and dy.W^T need no copy); otherwise the operand is
 * first transpose-copied into a dense (B, M, K) / (B, K, N) buffer.
 * f32 and bf16 run on a oneDNN matmul primitive created once per node and
 * kept in the node's ts_kstate; f64 and the other types run plain loops in
 * double (f64 never goes through f32). */
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h> /* matmul primitive */

#include "kernels/kernels_internal.h"
#include "kernels/matmul_prim.h" /* the primitive kept per node */

/* One operand viewed as 3 groups (batch, row, col) of its dims. */
typedef struct {
  int rank;
  int64_t shape[TS_MAX_RANK];
  int nd[3];
  int dims[3][TS_MAX_RANK]; /* operand dims of each group, in order */
  int64_t size[3];
  int64_t stride[3];        /* merged stride, valid when ok */
  bool ok;
} view_t;

static void make_view(const ts_node *x, int nb, const int *bd, int nr, const int *rd, int nc,
                      const int *cd, view_t *v) {
  int64_t st[TS_MAX_RANK];
  tk_row_strides(x->rank, x->shape, st);
  v->rank = x->rank;
  memcpy(v->shape, x->shape, sizeof v->shape);
  const int *lists[3] = {bd, rd, cd};
  int counts[3] = {nb, nr, nc};
  v->ok = true;
  for (int gi = 0; gi < 3; gi++) {
    v->nd[gi] = counts[gi];
    v->size[gi] = 1;
    int64_t stride = -1, prev = -1;
    for (int i = 0; i < counts[gi]; i++) {
      int d = lists[gi][i];
      v->dims[gi][i] = d;
      v->size[gi] *= x->shape[d];
      if (x->shape[d] == 1) continue;
      if (prev >= 0 && st[prev] != st[d] * x->shape[d]) v->ok = false;
      prev = d;
      stride = st[d];
    }
    v->stride[gi] = stride;
  }
  /* groups of size 1: any stride works; pick the dense one */
  if (v->stride[2] < 0) v->stride[2] = 1;
  if (v->stride[1] < 0) v->stride[1] = v->size[2] * v->stride[2];
  if (v->stride[0] < 0) v->stride[0] = v->size[1] * v->size[2];
}

/* Dense (B, R, C) copy of the view into dst (same dtype). */
static void densify(const view_t *v, size_t es, const void *src, void *dst, int nt) {
  int64_t st[TS_MAX_RANK], shape[TS_MAX_RANK], sst[TS_MAX_RANK], dst_st[TS_MAX_RANK];
  tk_row_strides(v->rank, v->shape, st);
  int r = 0;
  for (int gi = 0; gi < 3; gi++)
    for (int i = 0; i < v->nd[gi]; i++) {
      shape[r] = v->shape[v->dims[gi][i]];
      sst[r++] = st[v->dims[gi][i]];
    }
  tk_row_strides(r, shape, dst_st);
  tk_copy_strided(r, shape, es, src, sst, dst, dst_st, nt);
}

static void view_dense(view_t *v) {
  v->stride[2] = 1, v->stride[1] = v->size[2], v->stride[0] = v->size[1] * v->size[2];
}

typedef struct {
  ts_kstate base;
  tk_matmul mm;
  bool copy_a, copy_b;
  void *buf_a, *buf_b; /* dense copies when the strides can't express the view */
} dot_state;

static void dot_state_free(ts_kstate *s) {
  dot_state *d = (dot_state *)s;
  tk_matmul_free(&d->mm);
  free(d->buf_a);
  free(d->buf_b);
  free(d);
}

/* 2-D when B == 1 (oneDNN's fastest kernels), else 3-D. */
static void md_of(dnnl_memory_desc_t *md, dnnl_data_type_t t, int64_t B, int64_t r, int64_t c,
                  int64_t sb, int64_t sr, int64_t sc) {
  dnnl_dims_t dims = {B, r, c}, st = {sb, sr, sc}, dims2 = {r, c}, st2 = {sr, sc};
  if (B == 1) dnnl_memory_desc_init_by_strides(md, 2, dims2, t, st2);
  else dnnl_memory_desc_init_by_strides(md, 3, dims, t, st);
}

/* Creates the primitive for views a (B,M,K), b (B,K,N); 0 or -1 (unsupported:
 * oneDNN's reference implementation is far slower than a dense copy + gemm). */
static int make_prim(dot_state *s, dnnl_data_type_t t, const view_t *a, const view_t *b, int64_t M,
                     int64_t N) {
  int64_t B = a->size[0], K = a->size[2];
  dnnl_memory_desc_t amd, bmd, cmd;
  md_of(&amd, t, B, M, K, a->stride[0], a->stride[1], a->stride[2]);
  md_of(&bmd, t, B, K, N, b->stride[0], b->stride[1], b->stride[2]);
  md_of(&cmd, t, B, M, N, M * N, N, 1);
  return tk_matmul_init(&s->mm, &amd, &bmd, &cmd, true);
}

static bool dnnl_friendly(const view_t *v) {
  /* one of the two matrix dims must be unit-stride for the gemm kernels */
  return v->ok && (v->stride[2] == 1 || v->size[2] == 1 || v->stride[1] == 1 || v->size[1] == 1);
}

/* Loops in double: out (B, M, N) = a (B, M, K) x b (B, K, N), both dense.
 * Returns false if a row buffer could not be allocated (out is incomplete). */
static bool loops(ts_dtype dt, const double *a, const double *b, int64_t B, int64_t M, int64_t K,
                  int64_t N, void *out, int nt) {
  int failed = 0;
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t bm = 0; bm < B * M; bm++) {
    int64_t bi = bm / M;
    double *row = malloc((size_t)(N ? N : 1) * sizeof *row);
    if (!row) {
#pragma omp atomic write
      failed = 1;
      continue;
    }
    for (int64_t n = 0; n < N; n++) row[n] = 0;
    const double *ar = a + bm * K, *bb = b + bi * K * N;
    for (int64_t k = 0; k < K; k++) {
      double av = ar[k];
      const double *br = bb + k * N;
      for (int64_t n = 0; n < N; n++) row[n] += av * br[n];
    }
    if (dt == TS_F64) memcpy((double *)out + bm * N, row, (size_t)N * sizeof *row);
    else
      for (int64_t n = 0; n < N; n++) tk_store_f64(dt, out, bm * N + n, row[n]);
    free(row);
  }
  return !failed;
}

static int dot_loops(const ts_node *n, const view_t *va, const view_t *vb, ts_dtype adt,
                     ts_dtype bdt, tk_in in, void *out, int64_t M, int64_t N, int nt) {
  int64_t B = va->size[0], K = va->size[2], an = B * M * K, bn = B * K * N;
  size_t ea = ts_dtype_size(adt), eb = ts_dtype_size(bdt);
  char *ta = malloc((size_t)(an ? an : 1) * ea), *tb = malloc((size_t)(bn ? bn : 1) * eb);
  double *da = malloc((size_t)(an ? an : 1) * 8), *db = malloc((size_t)(bn ? bn : 1) * 8);
  int rc = 0;
  if (!ta || !tb || !da || !db) {
    rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "dot_general: out of memory for operand copies (%lld + %lld elements)",
                           (long long)an, (long long)bn);
  } else {
    densify(va, ea, in[0], ta, nt);
    densify(vb, eb, in[1], tb, nt);
    for (int64_t i = 0; i < an; i++) da[i] = tk_load_f64(adt, ta, i);
    for (int64_t i = 0; i < bn; i++) db[i] = tk_load_f64(bdt, tb, i);
    if (!loops(n->dtype, da, db, B, M, K, N, out, nt))
      rc = error_oom("dot_general: a row of the result", (size_t)(N ? N : 1) * sizeof(double));
  }
  free(ta), free(tb), free(da), free(db);
  return rc;
}

int tk_dot(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st,
           const ts_kctx *ctx) {
  const ts_node *a = tk_operand(g, n, 0), *b = tk_operand(g, n, 1);
  const ts_dot_dims *dd = &n->attr.dot;
  bool used_a[TS_MAX_RANK] = {false}, used_b[TS_MAX_RANK] = {false};
  int fa[TS_MAX_RANK], fb[TS_MAX_RANK], nfa = 0, nfb = 0;
  for (int i = 0; i < dd->n_batch; i++) used_a[dd->lhs_batch[i]] = used_b[dd->rhs_batch[i]] = true;
  for (int i = 0; i < dd->n_contract; i++) used_a[dd->lhs_contract[i]] = used_b[dd->rhs_contract[i]] = true;
  for (int d = 0; d < a->rank; d++)
    if (!used_a[d]) fa[nfa++] = d;
  for (int d = 0; d < b->rank; d++)
    if (!used_b[d]) fb[nfb++] = d;
  view_t va, vb;
  make_view(a, dd->n_batch, dd->lhs_batch, nfa, fa, dd->n_contract, dd->lhs_contract, &va);
  /* rhs as (batch, contract, free) */
  make_view(b, dd->n_batch, dd->rhs_batch, dd->n_contract, dd->rhs_contract, nfb, fb, &vb);
  int64_t M = va.size[1], N = vb.size[2];
  int nt = ctx->num_threads;
  bool use_dnnl = (n->dtype == TS_F32 || n->dtype == TS_BF16) && a->dtype == n->dtype &&
                  b->dtype == n->dtype && M * N * va.size[2] > 0;
  if (!use_dnnl) return dot_loops(n, &va, &vb, a->dtype, b->dtype, in, out, M, N, nt);

  dot_state *s = (dot_state *)*st;
  size_t es = ts_dtype_size(n->dtype);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return set_error_code(TS_ERR_OUT_OF_MEMORY, "dot_general: out of memory");
    s->base.free = dot_state_free;
    *st = &s->base;
    dnnl_data_type_t t = n->dtype == TS_F32 ? dnnl_f32 : dnnl_bf16;
    view_t ca = va, cb = vb;
    s->copy_a = !dnnl_friendly(&va);
    s->copy_b = !dnnl_friendly(&vb);
    if (s->copy_a) view_dense(&ca);
    if (s->copy_b) view_dense(&cb);
    if (make_prim(s, t, &ca, &cb, M, N)) {
      /* retry with dense copies of both operands */
      dot_state_free(&s->base);
      s = calloc(1, sizeof *s);
      if (!s) return *st = NULL, set_error_code(TS_ERR_OUT_OF_MEMORY, "dot_general: out of memory");
      s->base.free = dot_state_free;
      *st = &s->base;
      s->copy_a = s->copy_b = true;
      view_dense(&ca), view_dense(&cb);
      if (make_prim(s, t, &ca, &cb, M, N)) {
        dot_state_free(&s->base);
        *st = NULL;
        return dot_loops(n, &va, &vb, a->dtype, b->dtype, in, out, M, N, nt);
      }
    }
    int64_t an = va.size[0] * M * va.size[2], bn = vb.size[0] * vb.size[1] * N;
    if (s->copy_a && !(s->buf_a = aligned_alloc(64, ((size_t)an * es + 63) / 64 * 64)))
      return set_error_code(TS_ERR_OUT_OF_MEMORY,
                               "dot_general: out of memory for a lhs copy of %lld elements", (long long)an);
    if (s->copy_b && !(s->buf_b = aligned_alloc(64, ((size_t)bn * es + 63) / 64 * 64)))
      return set_error_code(TS_ERR_OUT_OF_MEMORY,
                               "dot_general: out of memory for a rhs copy of %lld elements", (long long)bn);
  }
  const void *pa = in[0], *pb = in[1];
  if (s->copy_a) densify(&va, es, in[0], s->buf_a, nt), pa = s->buf_a;
  if (s->copy_b) densify(&vb, es, in[1], s->buf_b, nt), pb = s->buf_b;
  if (tk_matmul_run(&s->mm, pa, pb, out))
    return set_error_code(TS_ERR_INTERNAL, "dot_general: oneDNN matmul failed for (%lld x %lld x %lld)",
                             (long long)M, (long long)va.size[2], (long long)N);
  return 0;
}
