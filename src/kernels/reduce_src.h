/* reduce_src.h — a reduction whose f32 operand is computed on the fly
 * (a fused reduction: src/opt/fuse.c makes a FUSED node with attr.n_dims > 0
 * from a sum or mean and the elementwise group that produced its operand;
 * src/kernels/fused.c evaluates the program range by range, reduce.c folds
 * it exactly as it folds a materialized operand: same order, same bits). */
#ifndef TS_KERNELS_REDUCE_SRC_H
#define TS_KERNELS_REDUCE_SRC_H

#include "kernels/kernels_internal.h"

/* Results per element a source may give (a stacked fused reduction's k). */
#define TK_SRC_MAX_RES 4

typedef struct {
  /* per-thread state for ranges of at most max_run elements, NULL when out of memory */
  void *(*begin)(const void *user, int64_t max_run);
  /* elements [off, off + n) of the operand into res[0] (res[q]: result q of
   * a source of several), each valid until the next call */
  void (*range)(void *state, int64_t off, int64_t n, const float **res);
  void (*end)(void *state);
  const void *user;
  /* results per element (0 or 1: one; a stacked fused reduction of k
   * sibling sums: k <= TK_SRC_MAX_RES), each folded exactly as a single
   * result would be, into output block q (the node's outputs are k blocks) */
  int n_res;
} tk_reduce_src;

/* Longest contiguous run the reduction of shape (rank, shape) over n's
 * attr.dims asks of its source (the fusion pass keeps it bounded). */
int64_t tk_reduce_max_run(const ts_node *n, int rank, const int64_t *shape);

/* Reduce node n (attr.reduce sum or mean, attr.dims; f32 result) over an f32
 * operand of shape (rank, shape) produced by src (src->n_res results: the
 * node's numel is n_res times the reduced shape's). */
int tk_reduce_from(const ts_node *n, int rank, const int64_t *shape, const tk_reduce_src *src, void *out,
                   const ts_kctx *ctx);

/* reduce_cols.c: the f32 sum (mean: the caller scales) of an [O, R, K]
 * operand over R into acc[q * out_n + o * K + j] (O x K outputs, out_n of
 * them per result q of S's n_res), in double, in an order that does not
 * depend on the thread count: each output init + its rows in row order
 * (reduce.c's order for a kept innermost dim), except [R, K] (O = 1) with
 * K < 512 and R > 2048: the rows in blocks of 2048, each block's rows in
 * order from -0.0, then init + the blocks' sums in block order. x: the
 * operand in memory (f32, or double: f64), or NULL with S (a fused
 * reduction's source, f32). -1: out
 * of memory (a source's state). tk_reduce_cols_fits: whether it takes the
 * shape (a source or not, nt threads); if not, reduce.c's loops, whose
 * order (row order) is the same there. Threads: up to nt, inside. */
bool tk_reduce_cols_fits(int64_t O, int64_t R, int64_t K, bool src, int nt);
int tk_reduce_cols(int64_t O, int64_t R, int64_t K, const void *x, bool f64, const tk_reduce_src *S, double *acc,
                   int64_t out_n, double init, int nt);

#endif
