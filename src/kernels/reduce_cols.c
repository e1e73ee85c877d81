/* reduce_cols.c — f32 sums that keep the innermost dim: [R, K] (batch norm's
 * statistics and gradient sums over N, H, W with the channels innermost,
 * NHWC; a bias gradient's sum over the batch) and [O, R, K] (NHWC's global
 * average pool over H, W), for reduce.c.
 *
 * The order is reduce.c's for these shapes: each output adds its rows in row
 * order to init, in double (acc = ((init + x0) + x1) + ...). Vectorizing
 * across the columns keeps it: a block of rows is folded into accumulators
 * held in registers, 8 columns a vector (reduce.c's row loop loaded and
 * stored each row's K accumulators), the rows read in blocks of COLS_BLOCK
 * elements (a fused source computes a block per call).
 *
 * [R, K] with K < COLS_WIDE and R > ORDER_ROWS (NHWC batch norm: R = N H W
 * in the thousands, K = C) has an order of its own, which does not depend on
 * the thread count either: the rows in blocks of ORDER_ROWS, each block's
 * rows in order from -0.0 into its sums, then each output init + its blocks'
 * sums in block order. Threads take whole blocks (a contiguous range each:
 * the rows a thread wrote in the elementwise kernel before, in its cache),
 * so a fused source computes each thread's own rows and nothing crosses
 * between the cores until the blocks' sums; in row order the columns would
 * have to be split (each thread reading every row, a source computing rows
 * for the other thread: 2 threads ran no faster than 1). Other shapes keep
 * row order: [O, R, K] with O > 1 threads split the images (o), [R, K] in
 * memory the columns; from a source on several threads reduce.c's loops
 * (tk_reduce_cols_fits). */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce_src.h"

/* Elements per block of rows (a source's call, a fold into registers). */
#define COLS_BLOCK 16384
/* The blocked order's rows per block and its widest K (above: row order). */
#define ORDER_ROWS 2048
#define COLS_WIDE 512

/* 8 doubles, and unaligned views of 8 floats / doubles in memory. Macros, not
 * functions: a 64-byte vector returned without -march=native (the sanitizer
 * build) changes the ABI (-Wpsabi, an error under -Werror). */
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef double v8d_u __attribute__((vector_size(64), aligned(8), may_alias));
#ifdef __AVX512F__ /* one vcvtps2pd ymm -> zmm (the generic form became two halves and an insert) */
#define ld8(p) ((v8d)_mm512_cvtps_pd(_mm256_loadu_ps(p))) /* floats p[0 .. 8) widened */
#else
#define ld8(p) __builtin_convertvector(*(const v8f_u *)(const void *)(p), v8d)
#endif
#define acc8(p) (*(const v8d_u *)(const void *)(p))
#define put8(p, v) (*(v8d_u *)(void *)(p) = (v))

/* acc[j] = acc[j] + x[r * ld + j], r = 0 .. nr - 1 in order, j < w; in double. */
static void fold(const float *x, int64_t ld, int64_t nr, int64_t w, double *acc) {
  int64_t j = 0;
  for (; j + 32 <= w; j += 32) {
    v8d a0 = acc8(acc + j), a1 = acc8(acc + j + 8), a2 = acc8(acc + j + 16), a3 = acc8(acc + j + 24);
    for (int64_t r = 0; r < nr; r++) {
      const float *p = x + r * ld + j;
      a0 = a0 + ld8(p), a1 = a1 + ld8(p + 8), a2 = a2 + ld8(p + 16), a3 = a3 + ld8(p + 24);
    }
    put8(acc + j, a0), put8(acc + j + 8, a1), put8(acc + j + 16, a2), put8(acc + j + 24, a3);
  }
  for (; j + 16 <= w; j += 16) {
    v8d a0 = acc8(acc + j), a1 = acc8(acc + j + 8);
    for (int64_t r = 0; r < nr; r++) a0 = a0 + ld8(x + r * ld + j), a1 = a1 + ld8(x + r * ld + j + 8);
    put8(acc + j, a0), put8(acc + j + 8, a1);
  }
  for (; j + 8 <= w; j += 8) {
    v8d a0 = acc8(acc + j);
    for (int64_t r = 0; r < nr; r++) a0 = a0 + ld8(x + r * ld + j);
    put8(acc + j, a0);
  }
  if (j < w) { /* fewer than 8 columns left: a row of them at a time */
    double t[8];
    int64_t wt = w - j;
    memcpy(t, acc + j, (size_t)wt * sizeof *t);
    for (int64_t r = 0; r < nr; r++)
      for (int64_t i = 0; i < wt; i++) t[i] = t[i] + (double)x[r * ld + j + i];
    memcpy(acc + j, t, (size_t)wt * sizeof *t);
  }
}

/* fold's loop for a double operand (reduce.c widens f64, bf16 and f16 operands to double). */
static void fold_f64(const double *x, int64_t ld, int64_t nr, int64_t w, double *acc) {
  for (int64_t r = 0; r < nr; r++) {
    const double *p = x + r * ld;
    _Pragma("omp simd") for (int64_t j = 0; j < w; j++) acc[j] = acc[j] + p[j];
  }
}

/* fold of the operand x (f32, or double: f64) from element off. */
static void fold_at(const void *x, bool f64, int64_t off, int64_t ld, int64_t nr, int64_t w, double *acc) {
  if (f64) fold_f64((const double *)x + off, ld, nr, w, acc);
  else fold((const float *)x + off, ld, nr, w, acc);
}

/* Rows per block of K columns. */
static int64_t block_rows(int64_t K) { return K < COLS_BLOCK ? COLS_BLOCK / K : 1; }

/* Thread me of nth's columns [*k0, *k1) of K: whole vectors of 8 where each gets more than 8. */
static void my_cols(int64_t K, int nth, int me, int64_t *k0, int64_t *k1) {
  int64_t per = (K + nth - 1) / nth;
  if (per > 8) per = (per + 7) & ~(int64_t)7;
  *k0 = me * per < K ? me * per : K;
  *k1 = *k0 + per < K ? *k0 + per : K;
}

/* Rows [a, a + n) of K columns from element base of the operand (x in
 * memory, or S with state st) folded in order into dst (nr blocks of
 * dstride) on one thread. */
static void fold_rows(int64_t K, const void *x, bool f64, const tk_reduce_src *S, void *st, int64_t base, int64_t a,
                      int64_t n, int nr, double *dst, int64_t dstride) {
  int64_t B = block_rows(K);
  for (int64_t r0 = a; r0 < a + n; r0 += B) {
    int64_t b = a + n - r0 < B ? a + n - r0 : B, off = base + r0 * K;
    if (!S) {
      fold_at(x, f64, off, K, b, K, dst);
      continue;
    }
    const float *ps[TK_SRC_MAX_RES];
    S->range(st, off, b * K, ps);
    for (int q = 0; q < nr; q++) fold(ps[q], K, b, K, dst + q * dstride);
  }
}

/* [R, K] with K < COLS_WIDE and R > ORDER_ROWS in its order: blocks of
 * ORDER_ROWS rows (threads take whole blocks, contiguous ranges of them),
 * each block's rows in order from -0.0, then each output adds its blocks'
 * sums to init in block order. -1: out of memory. */
static int blocked(int64_t R, int64_t K, const void *x, bool f64, const tk_reduce_src *S, int nr, double *acc,
                   int64_t out_n, double init, int nt) {
  int64_t nb = (R + ORDER_ROWS - 1) / ORDER_ROWS;
  double *part = malloc((size_t)(nb * nr * K) * sizeof *part); /* block b's result q: part + (b * nr + q) * K */
  if (!part) return -1;
  int err = 0;
  _Pragma("omp parallel num_threads(nt) if (nt > 1) reduction(| : err)")
  {
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    int64_t b0 = nb * me / nth, b1 = nb * (me + 1) / nth;
    void *st = S && b0 < b1 ? S->begin(S->user, (ORDER_ROWS < block_rows(K) ? ORDER_ROWS : block_rows(K)) * K) : NULL;
    err = S && b0 < b1 && !st;
    for (int64_t b = b0; b < b1 && !err; b++) {
      double *pb = part + b * nr * K;
      for (int64_t i = 0; i < nr * K; i++) pb[i] = -0.0;
      int64_t a = b * ORDER_ROWS;
      fold_rows(K, x, f64, S, st, 0, a, R - a < ORDER_ROWS ? R - a : ORDER_ROWS, nr, pb, K);
    }
    if (st) S->end(st);
  }
  for (int q = 0; q < nr && !err; q++)
    for (int64_t j = 0; j < K; j++) {
      double s = init;
      for (int64_t b = 0; b < nb; b++) s = s + part[(b * nr + q) * K + j];
      acc[q * out_n + j] = s;
    }
  free(part);
  return err ? -1 : 0;
}

bool tk_reduce_cols_fits(int64_t O, int64_t R, int64_t K, bool src, int nt) {
  return !src || nt <= 1 || O > 1 || (K < COLS_WIDE && R > ORDER_ROWS);
}

int tk_reduce_cols(int64_t O, int64_t R, int64_t K, const void *x, bool f64, const tk_reduce_src *S, double *acc,
                   int64_t out_n, double init, int nt) {
  int nr = S && S->n_res > 1 ? S->n_res : 1, err = 0;
  if (O == 1 && K < COLS_WIDE && R > ORDER_ROWS) return blocked(R, K, x, f64, S, nr, acc, out_n, init, nt);
  for (int64_t o = 0; o < nr * out_n; o++) acc[o] = init;
  if (nt > 1 && O == 1 && !S) { /* in memory: threads split the columns */
    _Pragma("omp parallel num_threads(nt)")
    {
      int64_t k0, k1, B = block_rows(K);
      my_cols(K, omp_get_num_threads(), omp_get_thread_num(), &k0, &k1);
      for (int64_t r0 = 0; r0 < R && k0 < k1; r0 += B)
        fold_at(x, f64, r0 * K + k0, K, R - r0 < B ? R - r0 : B, k1 - k0, acc + k0);
    }
    return 0;
  }
  /* one thread, or threads taking whole images o (each output's rows in one thread) */
  _Pragma("omp parallel num_threads(nt) if (nt > 1 && O > 1) reduction(| : err)")
  {
    int64_t B = block_rows(K);
    void *st = S ? S->begin(S->user, (R < B ? R : B) * K) : NULL;
    err = S && !st;
    _Pragma("omp for schedule(static)")
    for (int64_t o = 0; o < O; o++)
      if (!err) fold_rows(K, x, f64, S, st, o * R * K, 0, R, nr, acc + o * K, out_n);
    if (st) S->end(st);
  }
  return err ? -1 : 0;
}
