/* reduce.c — TS_OP_REDUCE (sum, max, min, mean) over any set of dims.
 *
 * The operand's dims are merged into alternating groups of kept / reduced
 * dims (size-1 dims dropped), so (B, N) -> (N) becomes [R, K] and
 * (B, T, C) -> (B, T) becomes [K, R]. Every innermost run is contiguous: a
 * reduced run is folded into one accumulator, a kept run is added into a row
 * of accumulators. Floats accumulate in double, integers in int64 (wrapping).
 * Sums that keep the innermost dim ([R, K], [O, R, K]) run in reduce_cols.c,
 * which defines their order (row order; [R, K] with K < 512 and R > 2048:
 * blocks of 2048 rows, then the blocks' sums in order). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce_src.h"

typedef struct {
  int ng;
  int64_t size[TS_MAX_RANK];
  bool red[TS_MAX_RANK];
  int64_t count; /* elements folded into each output */
} groups_t;

/* The groups of an operand of shape (rank, shape) reduced over n's attr.dims. */
static void make_groups(int rank, const int64_t *shape, const ts_node *n, groups_t *G) {
  bool red[TS_MAX_RANK] = {false};
  for (int i = 0; i < n->attr.n_dims; i++)
    if (n->attr.dims[i] >= 0 && n->attr.dims[i] < rank) red[n->attr.dims[i]] = true;
  memset(G, 0, sizeof *G); /* groups past ng are never read, but stay defined */
  G->ng = 0;
  G->count = 1;
  for (int d = 0; d < rank; d++) {
    if (red[d]) G->count *= shape[d];
    if (shape[d] == 1) continue;
    if (G->ng > 0 && G->red[G->ng - 1] == red[d]) {
      G->size[G->ng - 1] *= shape[d];
      continue;
    }
    G->size[G->ng] = shape[d];
    G->red[G->ng++] = red[d];
  }
  if (G->ng == 0) { /* every dim has size 1 (or rank 0): identity on one element */
    G->ng = 1, G->size[0] = 1, G->red[0] = true;
  }
}

#define FOLD(a, v, kind)                                                          \
  do {                                                                            \
    if ((kind) == TS_REDUCE_MAX) a = ((v) > (a) || (v) != (v)) ? (v) : (a);       \
    else if ((kind) == TS_REDUCE_MIN) a = ((v) < (a) || (v) != (v)) ? (v) : (a);  \
    else a += (v);                                                                \
  } while (0)

/* Vectorized max / min of a contiguous run (the cross-entropy's row max over
 * the vocab): 64-byte lanes keep a running max (min) per lane and a NaN flag.
 * The scalar FOLD's result depends on order only for NaN (the last NaN wins)
 * and for a zero result (the first of -0 / +0 wins); both fall back to the
 * scalar loop (return false), as does a NaN init. Otherwise the max value is
 * unique in bits, so this returns exactly what the scalar loop returns. */
#define MM_SEL(SUF, m, v, c) (m = (vec_##SUF)(((ivec_##SUF)(v) & (c)) | ((ivec_##SUF)(m) & ~(c))))
/* The lane loops of MINMAX_FAST for one comparison CMP (> for max, < for
 * min): four lane groups, their merge (in any order: the max is unique in
 * bits unless it is zero), then one lane group. */
#define MM_LOOPS(SUF, NL, CMP)                                                              \
  do {                                                                                      \
    for (; i + 4 * (NL) <= n; i += 4 * (NL)) {                                              \
      memcpy(&v, x + i, sizeof v), memcpy(&v1, x + i + (NL), sizeof v);                     \
      memcpy(&v2, x + i + 2 * (NL), sizeof v), memcpy(&v3, x + i + 3 * (NL), sizeof v);     \
      c = v CMP m, c1 = v1 CMP m1, c2 = v2 CMP m2, c3 = v3 CMP m3;                          \
      MM_SEL(SUF, m, v, c), MM_SEL(SUF, m1, v1, c1), MM_SEL(SUF, m2, v2, c2), MM_SEL(SUF, m3, v3, c3); \
      nanm |= (v != v) | (v1 != v1) | (v2 != v2) | (v3 != v3);                              \
    }                                                                                       \
    c = m1 CMP m, MM_SEL(SUF, m, m1, c);                                                    \
    c = m2 CMP m, MM_SEL(SUF, m, m2, c);                                                    \
    c = m3 CMP m, MM_SEL(SUF, m, m3, c);                                                    \
    for (; i + (NL) <= n; i += (NL)) {                                                      \
      memcpy(&v, x + i, sizeof v);                                                          \
      c = v CMP m, MM_SEL(SUF, m, v, c);                                                    \
      nanm |= v != v;                                                                       \
    }                                                                                       \
  } while (0)
#define MINMAX_FAST(T, SUF, NL, IT)                                                         \
  typedef T vec_##SUF __attribute__((vector_size(64)));                                     \
  typedef IT ivec_##SUF __attribute__((vector_size(64)));                                   \
  static bool minmax_fast_##SUF(const T *x, int64_t n, bool is_max, double init, double *res) { \
    if (n < 4 * (NL) || init != init) return false;                                         \
    vec_##SUF m, v;                                                                         \
    ivec_##SUF nanm, c;                                                                     \
    memcpy(&m, x, sizeof m);                                                                \
    nanm = m != m;                                                                          \
    int64_t i = (NL);                                                                       \
    /* four independent lanes first (the select chain's latency), then one */              \
    vec_##SUF m1 = m, m2 = m, m3 = m, v1, v2, v3;                                           \
    ivec_##SUF c1, c2, c3;                                                                  \
    if (is_max)                                                                             \
      MM_LOOPS(SUF, NL, >);                                                                 \
    else                                                                                    \
      MM_LOOPS(SUF, NL, <);                                                                 \
    bool nan = false;                                                                       \
    T r = m[0];                                                                             \
    for (int l = 0; l < (NL); l++) {                                                        \
      nan |= nanm[l] != 0;                                                                  \
      r = is_max ? (m[l] > r ? m[l] : r) : (m[l] < r ? m[l] : r);                           \
    }                                                                                       \
    for (; i < n; i++) {                                                                    \
      nan |= x[i] != x[i];                                                                  \
      r = is_max ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);                           \
    }                                                                                       \
    if (nan) return false;                                                                  \
    double a = (double)r;                                                                   \
    a = is_max ? (a > init ? a : init) : (a < init ? a : init);                             \
    if (a == 0) return false;                                                               \
    *res = a;                                                                               \
    return true;                                                                            \
  }

MINMAX_FAST(float, f32, 16, int32_t)
MINMAX_FAST(double, f64, 8, int64_t)

/* The operand run [off, off + n): in memory, or computed by a fused
 * reduction's source S (f32 only) into the thread's state st. */
#define GET(T, ps, off, n) \
  (S ? S->range(st, (off), (n), (const float **)(void *)(ps)) : (void)((ps)[0] = x + (off)))

/* Elements a fused source computes per call when its runs are shorter: runs
 * that follow each other in memory are asked for together and folded one by
 * one (a call costs a pass of the program's setup; batch norm's statistics
 * over 8x8 images are runs of 64). Runs per call for runs of `inner`. */
#define SRC_BLOCK 4096
static int64_t runs_per_call(const tk_reduce_src *S, int64_t inner) {
  return S && inner > 0 && inner < SRC_BLOCK ? SRC_BLOCK / inner : 1;
}

/* Whether a threaded reduction of groups G takes split_*: a sum or mean of
 * shape [R, K, R] whose runs hold 16 elements or more and number at most
 * SPLIT_MAX_RUNS (the runs' sums, R x K doubles per result: at most an eighth
 * of the operand's f32 bytes, and 8 MiB; batch norm's N x C is far below). */
#define SPLIT_MAX_RUNS ((int64_t)1 << 20)
static bool split_fits(const groups_t *G, ts_reduce_kind k) {
  return (k == TS_REDUCE_SUM || k == TS_REDUCE_MEAN) && G->ng == 3 && G->red[0] && !G->red[1] && G->red[2] &&
         G->size[2] >= 16 && G->size[0] * G->size[1] <= SPLIT_MAX_RUNS;
}

/* Whether groups G of a sum or mean keep the innermost dim below one reduced
 * dim, [R, K] (*O = 1) or [O, R, K]: reduce_cols.c's shapes (*R the rows). */
static bool cols_shape(const groups_t *G, ts_reduce_kind k, int64_t *O, int64_t *R) {
  if ((k != TS_REDUCE_SUM && k != TS_REDUCE_MEAN) || G->red[G->ng - 1]) return false;
  if (G->ng == 2) return *O = 1, *R = G->size[0], true;
  if (G->ng == 3 && !G->red[0]) return *O = G->size[0], *R = G->size[1], true;
  return false;
}

/* Float kernels on storage type T with double accumulators. Each returns -1
 * when a thread's source state could not be made (out of memory). */
#define FLOAT_REDUCE(T, SUF)                                                                 \
  static double run_##SUF(const T *x, int64_t n, ts_reduce_kind k, double init) {           \
    if (k == TS_REDUCE_SUM || k == TS_REDUCE_MEAN) {                                         \
      double s = 0; /* vector lanes: independent chains, speed and less rounding */          \
      _Pragma("omp simd reduction(+ : s)")                                                   \
      for (int64_t i = 0; i < n; i++) s += x[i];                                             \
      return init + s;                                                                       \
    }                                                                                        \
    double a = init;                                                                         \
    if (minmax_fast_##SUF(x, n, k == TS_REDUCE_MAX, init, &a)) return a;                     \
    a = init;                                                                                \
    for (int64_t i = 0; i < n; i++) FOLD(a, (double)x[i], k);                                \
    return a;                                                                                \
  }                                                                                          \
  static void row_##SUF(const T *x, int64_t n, ts_reduce_kind k, double *acc) {             \
    if (k == TS_REDUCE_SUM || k == TS_REDUCE_MEAN) {                                         \
      _Pragma("omp simd")                                                                    \
      for (int64_t i = 0; i < n; i++) acc[i] += x[i];                                        \
    } else                                                                                   \
      for (int64_t i = 0; i < n; i++) FOLD(acc[i], (double)x[i], k);                         \
  }                                                                                          \
  /* [R, K, R] sums on nt threads, split by runs: the R x K runs of in3 elements (in memory  \
   * order) are cut into nt equal ranges; each run's lane sum s = run_##SUF(run, -0.0) (exactly \
   * s) goes into part; then each output adds its runs' sums in row order, acc + s, the       \
   * operation run_##SUF ends with in the serial fold: same bits. A thread reads one          \
   * contiguous half of the operand (the half it wrote in an elementwise kernel before: its  \
   * cache), and the split does not depend on K. -1: out of memory (a source's state). */      \
  static int split_##SUF(const groups_t *G, const T *x, const tk_reduce_src *S, ts_reduce_kind k, \
                         double *acc, int64_t out_n, double init, int nt, double *part) {     \
    int nr = S && S->n_res > 1 ? S->n_res : 1, err = 0;                                      \
    int64_t R = G->size[0], K = G->size[1], in3 = G->size[2], RK = R * K;                     \
    int64_t nb = runs_per_call(S, in3);                                                      \
    _Pragma("omp parallel num_threads(nt) reduction(| : err)")                               \
    {                                                                                        \
      int nth = omp_get_num_threads(), me = omp_get_thread_num();                            \
      int64_t i0 = RK * me / nth, i1 = RK * (me + 1) / nth;                                  \
      void *st = S && i0 < i1 ? S->begin(S->user, nb * in3) : NULL;                          \
      err = S && i0 < i1 && !st;                                                             \
      for (int64_t i = i0; i < i1 && !err; i += nb) {                                        \
        int64_t cnt = i1 - i < nb ? i1 - i : nb;                                             \
        const T *ps[TK_SRC_MAX_RES];                                                         \
        GET(T, ps, i * in3, cnt * in3);                                                      \
        for (int q = 0; q < nr; q++)                                                         \
          for (int64_t j = 0; j < cnt; j++) part[q * RK + i + j] = run_##SUF(ps[q] + j * in3, in3, k, -0.0); \
      }                                                                                      \
      if (st) S->end(st);                                                                    \
      _Pragma("omp barrier")                                                                 \
      _Pragma("omp for schedule(static)")                                                    \
      for (int64_t o = 0; o < K; o++)                                                        \
        for (int q = 0; q < nr; q++) {                                                       \
          double a = init;                                                                   \
          for (int64_t r = 0; r < R; r++) a = a + part[q * RK + r * K + o];                  \
          acc[q * out_n + o] = a;                                                            \
        }                                                                                    \
    }                                                                                        \
    return err ? -1 : 0;                                                                     \
  }                                                                                          \
  static int reduce_##SUF(const groups_t *G, const T *x, const tk_reduce_src *S, ts_reduce_kind k, \
                          double *acc, int64_t out_n, double init, int nt) {                 \
    int last = G->ng - 1, err = 0, nr = S && S->n_res > 1 ? S->n_res : 1;                  \
    int64_t inner = G->size[last], cO, cR;                                                   \
    if (cols_shape(G, k, &cO, &cR) && tk_reduce_cols_fits(cO, cR, inner, S != NULL, nt))    \
      return tk_reduce_cols(cO, cR, inner, x, sizeof(T) == 8, S, acc, out_n, init, nt);      \
    if (nt > 1 && split_fits(G, k)) {                                                       \
      double *part = malloc((size_t)(nr * G->size[0] * G->size[1]) * sizeof *part);          \
      if (part) {                                                                            \
        int rc = split_##SUF(G, x, S, k, acc, out_n, init, nt, part);                        \
        free(part);                                                                          \
        return rc;                                                                           \
      }                                                                                      \
    }                                                                                        \
    if (G->ng == 2 && !G->red[0]) { /* [K, R]: independent rows */                           \
      _Pragma("omp parallel num_threads(nt) if (nt > 1) reduction(| : err)")                 \
      {                                                                                      \
        void *st = S ? S->begin(S->user, inner) : NULL;                                      \
        err = S && !st;                                                                      \
        _Pragma("omp for")                                                                   \
        for (int64_t o = 0; o < G->size[0]; o++) {                                           \
          const T *ps[TK_SRC_MAX_RES] = {NULL};                                              \
          if (!S || st) GET(T, ps, o * inner, inner);                                        \
          for (int q = 0; ps[0] && q < nr; q++) acc[q * out_n + o] = run_##SUF(ps[q], inner, k, init); \
        }                                                                                    \
        if (st) S->end(st);                                                                  \
      }                                                                                      \
      return err ? -1 : 0;                                                                   \
    }                                                                                        \
    /* [R, K, R] max / min (sums take split_ above, unless runs are short) and [R, K] (a     \
     * bias gradient's sum over the batch): threads split the kept dim; each output           \
     * folds its runs in the same order as the serial loop below (same bits). A thread      \
     * walks the rows in memory order, its channels of each (a source: nb runs a call);      \
     * channel by channel, ResNet-20's 32x32 planes were 4 KB runs 64 KB apart and two       \
     * threads took 3x the CPU of one. A source with runs of SRC_BLOCK or more: an omp for. */ \
    if (nt > 1 && G->ng >= 2 && G->ng <= 3 && G->red[0] && !G->red[1] &&                     \
        (G->ng == 2 || G->red[2])) {                                                         \
      int64_t R = G->size[0], K = G->size[1], in3 = G->ng == 3 ? inner : 1;                    \
      int64_t nb = G->ng == 3 ? runs_per_call(S, in3) : 1;                                    \
      _Pragma("omp parallel num_threads(nt) reduction(| : err)")                             \
      {                                                                                      \
        void *st = S ? S->begin(S->user, nb * inner) : NULL;                                 \
        err = S && !st;                                                                      \
        if (G->ng == 3 && (nb > 1 || !S)) { /* row by row, a thread's channels each */      \
          int nth = omp_get_num_threads(), me = omp_get_thread_num();                        \
          int64_t per = (K + nth - 1) / nth, k0 = me * per, k1 = k0 + per < K ? k0 + per : K; \
          for (int q = 0; q < nr; q++)                                                       \
            for (int64_t o = k0; o < k1; o++) acc[q * out_n + o] = init;                     \
          for (int64_t r = 0; r < R && (!S || st); r++)                                      \
            for (int64_t o = k0; o < k1; o += nb) {                                          \
              int64_t cnt = k1 - o < nb ? k1 - o : nb;                                       \
              const T *ps[TK_SRC_MAX_RES];                                                   \
              GET(T, ps, (r * K + o) * in3, cnt * in3);                                      \
              for (int q = 0; q < nr; q++) {                                                 \
                const T *bq = ps[q];                                                         \
                double *aq = acc + q * out_n;                                                \
                for (int64_t j = 0; j < cnt; j++) aq[o + j] = run_##SUF(bq + j * in3, in3, k, aq[o + j]); \
              }                                                                              \
            }                                                                                \
        } else if (G->ng == 3) {                                                             \
          _Pragma("omp for schedule(static)")                                                \
          for (int64_t o = 0; o < K; o++) {                                                  \
            for (int q = 0; q < nr; q++) acc[q * out_n + o] = init;                          \
            for (int64_t r = 0; r < R && (!S || st); r++) {                                  \
              const T *ps[TK_SRC_MAX_RES];                                                   \
              GET(T, ps, (r * K + o) * in3, in3);                                            \
              for (int q = 0; q < nr; q++)                                                   \
                acc[q * out_n + o] = run_##SUF(ps[q], in3, k, acc[q * out_n + o]);           \
            }                                                                                \
          }                                                                                  \
        } else {                                                                             \
          int nth = omp_get_num_threads(), me = omp_get_thread_num();                        \
          int64_t per = (K + nth - 1) / nth, k0 = me * per, k1 = k0 + per < K ? k0 + per : K; \
          for (int q = 0; q < nr; q++)                                                       \
            for (int64_t o = k0; o < k1; o++) acc[q * out_n + o] = init;                     \
          for (int64_t r = 0; r < R && k0 < k1 && (!S || st); r++) {                         \
            const T *ps[TK_SRC_MAX_RES];                                                     \
            GET(T, ps, r * K + k0, k1 - k0);                                                 \
            for (int q = 0; q < nr; q++) row_##SUF(ps[q], k1 - k0, k, acc + q * out_n + k0); \
          }                                                                                  \
        }                                                                                    \
        if (st) S->end(st);                                                                  \
      }                                                                                      \
      return err ? -1 : 0;                                                                   \
    }                                                                                        \
    int64_t nb = runs_per_call(S, inner);                                                    \
    void *st = S ? S->begin(S->user, nb * inner) : NULL;                                     \
    if (S && !st) return -1;                                                                 \
    for (int64_t o = 0; o < nr * out_n; o++) acc[o] = init;                                  \
    int64_t outer = 1;                                                                       \
    for (int gi = 0; gi < last; gi++) outer *= G->size[gi];                                  \
    int64_t idx[TS_MAX_RANK] = {0}, ost[TS_MAX_RANK], s = 1;                                 \
    for (int gi = G->ng - 1; gi >= 0; gi--)                                                  \
      if (!G->red[gi]) ost[gi] = s, s *= G->size[gi];                                        \
      else ost[gi] = 0;                                                                      \
    const T *bs[TK_SRC_MAX_RES] = {NULL}; /* runs [r0, r0 + nb) of the source, in order */    \
    int64_t blk_n = 0;                                                                       \
    for (int64_t r = 0; r < outer; r++) {                                                    \
      int64_t o = 0;                                                                         \
      for (int gi = 0; gi < last; gi++) o += idx[gi] * ost[gi];                              \
      if (r % nb == 0) {                                                                     \
        blk_n = (outer - r < nb ? outer - r : nb) * inner;                                   \
        GET(T, bs, r * inner, blk_n);                                                        \
      }                                                                                      \
      for (int q = 0; q < nr; q++) {                                                         \
        const T *run = bs[q] + r % nb * inner;                                               \
        double *aq = acc + q * out_n;                                                        \
        if (G->red[last]) aq[o] = run_##SUF(run, inner, k, aq[o]);                           \
        else row_##SUF(run, inner, k, aq + o);                                               \
      }                                                                                      \
      for (int gi = last - 1; gi >= 0; gi--) {                                               \
        if (++idx[gi] < G->size[gi]) break;                                                  \
        idx[gi] = 0;                                                                         \
      }                                                                                      \
    }                                                                                        \
    if (st) S->end(st);                                                                      \
    return 0;                                                                                \
  }

FLOAT_REDUCE(float, f32)
FLOAT_REDUCE(double, f64)

static void reduce_int(const groups_t *G, const int64_t *x, ts_reduce_kind k, int64_t *acc, int64_t out_n) {
  int64_t init = k == TS_REDUCE_MAX ? INT64_MIN : k == TS_REDUCE_MIN ? INT64_MAX : 0;
  for (int64_t o = 0; o < out_n; o++) acc[o] = init;
  int64_t ost[TS_MAX_RANK], idx[TS_MAX_RANK] = {0}, s = 1, total = 1;
  for (int gi = G->ng - 1; gi >= 0; gi--) {
    ost[gi] = G->red[gi] ? 0 : s;
    if (!G->red[gi]) s *= G->size[gi];
    total *= G->size[gi];
  }
  for (int64_t i = 0; i < total; i++) {
    int64_t o = 0;
    for (int gi = 0; gi < G->ng; gi++) o += idx[gi] * ost[gi];
    if (k == TS_REDUCE_MAX) acc[o] = x[i] > acc[o] ? x[i] : acc[o];
    else if (k == TS_REDUCE_MIN) acc[o] = x[i] < acc[o] ? x[i] : acc[o];
    else acc[o] = (int64_t)((uint64_t)acc[o] + (uint64_t)x[i]);
    for (int gi = G->ng - 1; gi >= 0; gi--) {
      if (++idx[gi] < G->size[gi]) break;
      idx[gi] = 0;
    }
  }
}

int tk_reduce(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  const ts_node *x = tk_operand(g, n, 0);
  ts_reduce_kind k = n->attr.reduce;
  groups_t G;
  make_groups(x->rank, x->shape, n, &G);
  int64_t xn = tk_numel(x), on = tk_numel(n);
  bool isint = !ts_dtype_is_float(x->dtype);
  void *acc = malloc((size_t)(on ? on : 1) * 8);
  void *tmp = NULL;
  if (!acc) return set_error_code(TS_ERR_OUT_OF_MEMORY, "reduce: out of memory for %lld outputs", (long long)on);
  int nt = tk_threads(ctx, xn);
  if (isint) {
    const int64_t *xi = in[0];
    if (x->dtype != TS_I64) {
      tmp = malloc((size_t)(xn ? xn : 1) * 8);
      if (!tmp) return free(acc), set_error_code(TS_ERR_OUT_OF_MEMORY,
                                                    "reduce: out of memory for %lld elements", (long long)xn);
      for (int64_t i = 0; i < xn; i++) ((int64_t *)tmp)[i] = tk_load_i64(x->dtype, in[0], i);
      xi = tmp;
    }
    reduce_int(&G, xi, k, acc, on);
    for (int64_t o = 0; o < on; o++) {
      int64_t v = ((int64_t *)acc)[o];
      if (k == TS_REDUCE_MEAN) v = G.count ? v / G.count : 0;
      tk_store_i64(n->dtype, out, o, v);
    }
  } else {
    double init = k == TS_REDUCE_MAX ? -INFINITY : k == TS_REDUCE_MIN ? INFINITY : 0.0;
    if (x->dtype == TS_F32) {
      reduce_f32(&G, in[0], NULL, k, acc, on, init, nt);
    } else if (x->dtype == TS_F64) {
      reduce_f64(&G, in[0], NULL, k, acc, on, init, nt);
    } else {
      tmp = malloc((size_t)(xn ? xn : 1) * 8);
      if (!tmp) return free(acc), set_error_code(TS_ERR_OUT_OF_MEMORY,
                                                    "reduce: out of memory for %lld elements", (long long)xn);
      for (int64_t i = 0; i < xn; i++) ((double *)tmp)[i] = tk_load_f64(x->dtype, in[0], i);
      reduce_f64(&G, tmp, NULL, k, acc, on, init, nt);
    }
    double inv = k == TS_REDUCE_MEAN ? 1.0 / (double)G.count : 1.0;
    if (n->dtype == TS_F32)
      for (int64_t o = 0; o < on; o++) ((float *)out)[o] = (float)(((double *)acc)[o] * inv);
    else
      for (int64_t o = 0; o < on; o++) tk_store_f64(n->dtype, out, o, ((double *)acc)[o] * inv);
  }
  free(tmp);
  free(acc);
  return 0;
}

int64_t tk_reduce_max_run(const ts_node *n, int rank, const int64_t *shape) {
  groups_t G;
  make_groups(rank, shape, n, &G);
  return G.size[G.ng - 1];
}

int tk_reduce_from(const ts_node *n, int rank, const int64_t *shape, const tk_reduce_src *src, void *out,
                   const ts_kctx *ctx) {
  ts_reduce_kind k = n->attr.reduce;
  if (n->dtype != TS_F32 || (k != TS_REDUCE_SUM && k != TS_REDUCE_MEAN))
    return set_error("reduce: a fused reduction must be an f32 sum or mean (got %s %s)", ts_dtype_name(n->dtype),
                     k == TS_REDUCE_MAX ? "max" : "min");
  groups_t G;
  make_groups(rank, shape, n, &G);
  int64_t on = tk_numel(n), nr = src->n_res > 1 ? src->n_res : 1;
  double *acc = malloc((size_t)(on ? on : 1) * 8);
  if (!acc) return set_error_code(TS_ERR_OUT_OF_MEMORY, "reduce: out of memory for %lld outputs", (long long)on);
  int nt = tk_threads(ctx, ts_shape_numel(rank, shape));
  if (reduce_f32(&G, NULL, src, k, acc, on / nr, 0.0, nt) < 0) {
    free(acc);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "reduce: out of memory for a fused reduction's runs of %lld",
                          (long long)G.size[G.ng - 1]);
  }
  double inv = k == TS_REDUCE_MEAN ? 1.0 / (double)G.count : 1.0;
  for (int64_t o = 0; o < on; o++) ((float *)out)[o] = (float)(acc[o] * inv);
  free(acc);
  return 0;
}
