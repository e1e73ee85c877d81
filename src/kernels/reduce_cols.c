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
 * Threads never change the order. [O, R, K] with O > 1: threads split the
 * outputs' images (o). [R, K] in memory: threads split the columns. [R, K]
 * computed by a source: block by block, the threads split the block's rows
 * and compute them (each thread's part into one of its two source states,
 * alternating), meet at a barrier, then fold their own columns over every
 * part in row order; with two states a thread never overwrites a part that
 * another still folds (it computes block i + 2 only after the barrier of
 * block i + 1, which every thread reaches after folding block i), and frees
 * its states after a last barrier. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce_src.h"

/* Elements per block of rows (a source's call; a thread's state holds its part). */
#define COLS_BLOCK 16384

typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

static inline v8d ld8(const float *p) {
  v8f f;
  memcpy(&f, p, sizeof f);
  return __builtin_convertvector(f, v8d);
}
static inline v8d acc8(const double *p) {
  v8d a;
  memcpy(&a, p, sizeof a);
  return a;
}

/* acc[j] = acc[j] + x[r * ld + j], r = 0 .. nr - 1 in order, j < w; in double. */
static void fold(const float *x, int64_t ld, int64_t nr, int64_t w, double *acc) {
  int64_t j = 0;
  for (; j + 32 <= w; j += 32) {
    v8d a0 = acc8(acc + j), a1 = acc8(acc + j + 8), a2 = acc8(acc + j + 16), a3 = acc8(acc + j + 24);
    for (int64_t r = 0; r < nr; r++) {
      const float *p = x + r * ld + j;
      a0 = a0 + ld8(p), a1 = a1 + ld8(p + 8), a2 = a2 + ld8(p + 16), a3 = a3 + ld8(p + 24);
    }
    memcpy(acc + j, &a0, 64), memcpy(acc + j + 8, &a1, 64), memcpy(acc + j + 16, &a2, 64);
    memcpy(acc + j + 24, &a3, 64);
  }
  for (; j + 16 <= w; j += 16) {
    v8d a0 = acc8(acc + j), a1 = acc8(acc + j + 8);
    for (int64_t r = 0; r < nr; r++) a0 = a0 + ld8(x + r * ld + j), a1 = a1 + ld8(x + r * ld + j + 8);
    memcpy(acc + j, &a0, 64), memcpy(acc + j + 8, &a1, 64);
  }
  for (; j + 8 <= w; j += 8) {
    v8d a0 = acc8(acc + j);
    for (int64_t r = 0; r < nr; r++) a0 = a0 + ld8(x + r * ld + j);
    memcpy(acc + j, &a0, 64);
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

/* Rows per block of K columns. */
static int64_t block_rows(int64_t K) { return K < COLS_BLOCK ? COLS_BLOCK / K : 1; }

/* Thread me of nth's columns [*k0, *k1) of K: whole vectors of 8 where each gets more than 8. */
static void my_cols(int64_t K, int nth, int me, int64_t *k0, int64_t *k1) {
  int64_t per = (K + nth - 1) / nth;
  if (per > 8) per = (per + 7) & ~(int64_t)7;
  *k0 = me * per < K ? me * per : K;
  *k1 = *k0 + per < K ? *k0 + per : K;
}

/* The rows [0, R) of an [R, K] operand (x in memory, or S with state st: runs
 * from element base) folded into acc (nr blocks of out_n) on one thread. */
static void serial(int64_t R, int64_t K, const float *x, const tk_reduce_src *S, void *st, int64_t base, int nr,
                   double *acc, int64_t out_n) {
  int64_t B = block_rows(K);
  for (int64_t r0 = 0; r0 < R; r0 += B) {
    int64_t b = R - r0 < B ? R - r0 : B;
    const float *ps[TK_SRC_MAX_RES] = {x ? x + base + r0 * K : NULL};
    if (S) S->range(st, base + r0 * K, b * K, ps);
    for (int q = 0; q < nr; q++) fold(ps[q], K, b, K, acc + q * out_n);
  }
}

/* [R, K] from source S on nt > 1 threads (the file's comment). -1: out of memory. */
static int split_rows(int64_t R, int64_t K, const tk_reduce_src *S, int nr, double *acc, int64_t out_n, int nt) {
  int64_t B = block_rows(K), nblk = (R + B - 1) / B;
  const float *(*parts)[TK_SRC_MAX_RES] = malloc((size_t)(2 * nt) * sizeof *parts);
  if (!parts) return -1;
  int err = 0;
  _Pragma("omp parallel num_threads(nt)")
  {
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    int64_t per = (B + nth - 1) / nth, k0, k1;
    my_cols(K, nth, me, &k0, &k1);
    void *st[2] = {S->begin(S->user, per * K), S->begin(S->user, per * K)};
    if (!st[0] || !st[1]) {
      _Pragma("omp atomic write")
      err = 1;
    }
    _Pragma("omp barrier")
    int bad;
    _Pragma("omp atomic read")
    bad = err;
    for (int64_t i = 0; i < nblk && !bad; i++) {
      int64_t r0 = i * B, b = R - r0 < B ? R - r0 : B;
      int64_t a = r0 + b * me / nth, e = r0 + b * (me + 1) / nth; /* my rows of the block */
      if (a < e) S->range(st[i % 2], a * K, (e - a) * K, parts[(i % 2) * nth + me]);
      _Pragma("omp barrier")
      for (int t = 0; t < nth && k0 < k1; t++) {
        int64_t ta = r0 + b * t / nth, te = r0 + b * (t + 1) / nth;
        for (int q = 0; q < nr && ta < te; q++)
          fold(parts[(i % 2) * nth + t][q] + k0, K, te - ta, k1 - k0, acc + q * out_n + k0);
      }
    }
    _Pragma("omp barrier") /* every fold done before a state is freed */
    for (int s = 0; s < 2; s++)
      if (st[s]) S->end(st[s]);
  }
  free(parts);
  return err ? -1 : 0;
}

bool tk_reduce_cols_fits(int64_t K, bool src, int nt) { return !src || nt <= 1 || K < 512; }

int tk_reduce_cols(int64_t O, int64_t R, int64_t K, const float *x, const tk_reduce_src *S, double *acc,
                   int64_t out_n, double init, int nt) {
  int nr = S && S->n_res > 1 ? S->n_res : 1, err = 0;
  for (int64_t o = 0; o < nr * out_n; o++) acc[o] = init;
  if (nt > 1 && O == 1 && R > 1 && S) return split_rows(R, K, S, nr, acc, out_n, nt);
  if (nt > 1 && O == 1 && R > 1) { /* in memory: threads split the columns */
    _Pragma("omp parallel num_threads(nt)")
    {
      int64_t k0, k1, B = block_rows(K);
      my_cols(K, omp_get_num_threads(), omp_get_thread_num(), &k0, &k1);
      for (int64_t r0 = 0; r0 < R && k0 < k1; r0 += B)
        fold(x + r0 * K + k0, K, R - r0 < B ? R - r0 : B, k1 - k0, acc + k0);
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
      if (!err) serial(R, K, x, S, st, o * R * K, nr, acc + o * K, out_n);
    if (st) S->end(st);
  }
  return err ? -1 : 0;
}
