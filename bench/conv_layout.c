/* conv_layout.c — go/no-go guide for channels-last ResNet activations: one
 * training step's oneDNN convolutions (forward, backward-data,
 * backward-weights) per layer shape, in two layouts, interleaved rounds:
 *   A (nchw): what kernels/conv.c does — plain NCHW activations, the
 *     primitive picks its layouts (format_tag any) and reorders move x, w,
 *     dy in and y, dx, dw out; a tensor reordered once is reused by the
 *     step's later convs (as conv.c's shared reorders); 1x1 convolutions
 *     without padding run plain (conv.c's plain_fits) when oneDNN has a
 *     non-reference kernel for them.
 *   B (nhwc): activations x, y, dy, dx in NHWC given to the primitive as
 *     they are; weights format_tag any, reordered from OIHW (and dw back)
 *     each step as now.
 * The shapes are ResNet-20's on 28x28 inputs (b128) and two ResNet-50 ones
 * (b8); the step total weights each shape by its count in the network.
 *
 *   usage: bench_conv_layout [threads (2)] [rounds (5)] [min CPU ms per timed block (150)]
 *   e.g.   OMP_WAIT_POLICY=passive build/bench_conv_layout 1 5 200
 * Prints per shape and dtype: median CPU ms per step of A and B over the rounds,
 * B/A, the implementations chosen, and the weighted ResNet-20 step totals. */
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

typedef struct {
  const char *name;
  int64_t N, C, H, W, O, K, s, p;
  int count;      /* convs of this shape in the network's step */
  bool bwd_data;  /* false for the stem (the input needs no gradient) */
  int net;        /* 20: ResNet-20, 50: ResNet-50 */
} shape_t;

static const shape_t shapes[] = {
    {"r20 stem 1->16 28x28 3x3", 128, 1, 28, 28, 16, 3, 1, 1, 1, false, 20},
    {"r20 16->16 28x28 3x3", 128, 16, 28, 28, 16, 3, 1, 1, 6, true, 20},
    {"r20 16->32 28->14 3x3/2", 128, 16, 28, 28, 32, 3, 2, 1, 1, true, 20},
    {"r20 16->32 28->14 1x1/2", 128, 16, 28, 28, 32, 1, 2, 0, 1, true, 20},
    {"r20 32->32 14x14 3x3", 128, 32, 14, 14, 32, 3, 1, 1, 5, true, 20},
    {"r20 32->64 14->7 3x3/2", 128, 32, 14, 14, 64, 3, 2, 1, 1, true, 20},
    {"r20 32->64 14->7 1x1/2", 128, 32, 14, 14, 64, 1, 2, 0, 1, true, 20},
    {"r20 64->64 7x7 3x3", 128, 64, 7, 7, 64, 3, 1, 1, 5, true, 20},
    {"r50 64->64 56x56 3x3", 8, 64, 56, 56, 64, 3, 1, 1, 1, true, 50},
    {"r50 512->128 28x28 1x1", 8, 512, 28, 28, 128, 1, 1, 0, 1, true, 50},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

#define CHECK(x)                                                          \
  do {                                                                    \
    if ((x) != dnnl_success) {                                            \
      fprintf(stderr, "bench_conv_layout: %s failed (line %d)\n", #x, __LINE__); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static dnnl_engine_t eng;
static dnnl_stream_t strm;

enum { X, W, Y, DY, DX, DW, NT };
typedef struct {
  dnnl_primitive_t p;
  int n;
  dnnl_exec_arg_t a[4];
} op_t;
typedef struct {
  op_t ops[16];
  int nops;
  dnnl_memory_t user[NT];           /* the caller's tensors */
  dnnl_memory_t cached[NT][4];      /* reordered copies (A's shared reorders) */
  int ncached[NT];
  dnnl_memory_t owned[32];
  int nowned;
  dnnl_primitive_t prims[32];
  int nprims;
  char impl[3][64];
} side_t;

static void md4(dnnl_memory_desc_t *md, dnnl_data_type_t t, int64_t a, int64_t b, int64_t c, int64_t d,
                dnnl_format_tag_t tag) {
  dnnl_dims_t dims = {a, b, c, d};
  CHECK(dnnl_memory_desc_init_by_tag(md, 4, dims, t, tag));
}

static dnnl_memory_t new_mem(side_t *s, const dnnl_memory_desc_t *md) {
  dnnl_memory_t m;
  CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  size_t n = dnnl_memory_desc_get_size(md);
  void *h;
  CHECK(dnnl_memory_get_data_handle(m, &h));
  memset(h, 0x3c, n); /* small finite values in f32 and bf16 */
  s->owned[s->nowned++] = m;
  return m;
}

static void push(side_t *s, dnnl_primitive_t p, int n, const dnnl_exec_arg_t *a) {
  op_t *o = &s->ops[s->nops++];
  o->p = p, o->n = n;
  memcpy(o->a, a, sizeof *a * (size_t)n);
}

static dnnl_primitive_t make_reorder(side_t *s, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  dnnl_primitive_desc_t rpd;
  dnnl_primitive_t r;
  CHECK(dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, NULL));
  CHECK(dnnl_primitive_create(&r, rpd));
  dnnl_primitive_desc_destroy(rpd);
  s->prims[s->nprims++] = r;
  return r;
}

/* The memory the primitive reads for tensor t in layout pmd: the user's
 * buffer, a copy reordered earlier in the step, or a new reorder (pushed). */
static dnnl_memory_t input(side_t *s, int t, const dnnl_memory_desc_t *pmd) {
  const dnnl_memory_desc_t *umd;
  CHECK(dnnl_memory_get_memory_desc(s->user[t], &umd));
  if (dnnl_memory_desc_equal(umd, pmd)) return s->user[t];
  for (int i = 0; i < s->ncached[t]; i++) {
    const dnnl_memory_desc_t *c;
    CHECK(dnnl_memory_get_memory_desc(s->cached[t][i], &c));
    if (dnnl_memory_desc_equal(c, pmd)) return s->cached[t][i];
  }
  dnnl_memory_t m = new_mem(s, pmd);
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, s->user[t]}, {DNNL_ARG_TO, m}};
  push(s, make_reorder(s, umd, pmd), 2, a);
  s->cached[t][s->ncached[t]++] = m;
  return m;
}

/* The memory the primitive writes tensor t to; *post gets the reorder back. */
static dnnl_memory_t output(side_t *s, int t, const dnnl_memory_desc_t *pmd, op_t *post) {
  const dnnl_memory_desc_t *umd;
  CHECK(dnnl_memory_get_memory_desc(s->user[t], &umd));
  post->p = NULL;
  if (dnnl_memory_desc_equal(umd, pmd)) return s->user[t];
  dnnl_memory_t m = new_mem(s, pmd);
  post->p = make_reorder(s, pmd, umd), post->n = 2;
  post->a[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, m};
  post->a[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, s->user[t]};
  return m;
}

static bool is_ref(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
         !strncmp(impl, "ref", 3);
}

/* One of the three primitive descriptors (k: 0 fwd, 1 bwd data, 2 bwd
 * weights) with activation tag `act` and weight tag `wt`; NULL if refused. */
static dnnl_primitive_desc_t conv_pd(const shape_t *q, dnnl_data_type_t t, int k, dnnl_format_tag_t act,
                                     dnnl_format_tag_t wt) {
  int64_t OH = (q->H + 2 * q->p - q->K) / q->s + 1, OW = (q->W + 2 * q->p - q->K) / q->s + 1;
  dnnl_memory_desc_t x, w, y;
  md4(&x, t, q->N, q->C, q->H, q->W, act);
  md4(&y, t, q->N, q->O, OH, OW, act);
  md4(&w, t, q->O, q->C, q->K, q->K, wt);
  dnnl_dims_t st = {q->s, q->s}, dil = {0, 0}, pad = {q->p, q->p};
  dnnl_convolution_desc_t fd, bd;
  dnnl_primitive_desc_t fpd, pd = NULL;
  CHECK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &x, &w,
                                                   NULL, &y, st, dil, pad, pad));
  if (dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL) != dnnl_success) return NULL;
  if (k == 0) return fpd;
  if (k == 1)
    CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &x, &w, &y, st, dil, pad, pad));
  else
    CHECK(dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &x, &w, NULL, &y, st,
                                                              dil, pad, pad));
  if (dnnl_primitive_desc_create(&pd, &bd, NULL, eng, fpd) != dnnl_success) pd = NULL;
  dnnl_primitive_desc_destroy(fpd);
  return pd;
}

static void build(side_t *s, const shape_t *q, dnnl_data_type_t t, bool nhwc) {
  memset(s, 0, sizeof *s);
  int64_t OH = (q->H + 2 * q->p - q->K) / q->s + 1, OW = (q->W + 2 * q->p - q->K) / q->s + 1;
  dnnl_format_tag_t ut = nhwc ? dnnl_nhwc : dnnl_nchw;
  dnnl_memory_desc_t xm, ym, wm;
  md4(&xm, t, q->N, q->C, q->H, q->W, ut);
  md4(&ym, t, q->N, q->O, OH, OW, ut);
  md4(&wm, t, q->O, q->C, q->K, q->K, dnnl_oihw);
  s->user[X] = new_mem(s, &xm), s->user[DX] = new_mem(s, &xm);
  s->user[Y] = new_mem(s, &ym), s->user[DY] = new_mem(s, &ym);
  s->user[W] = new_mem(s, &wm), s->user[DW] = new_mem(s, &wm);
  bool plain1x1 = !nhwc && q->K == 1 && q->p == 0;
  static const dnnl_query_t qin[3][2] = {{dnnl_query_src_md, dnnl_query_weights_md},
                                         {dnnl_query_diff_dst_md, dnnl_query_weights_md},
                                         {dnnl_query_src_md, dnnl_query_diff_dst_md}};
  static const int tin[3][2] = {{X, W}, {DY, W}, {X, DY}}, tout[3] = {Y, DX, DW};
  static const int ain[3][2] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS},
                                {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS},
                                {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST}};
  static const int aout[3] = {DNNL_ARG_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_WEIGHTS};
  static const dnnl_query_t qout[3] = {dnnl_query_dst_md, dnnl_query_diff_src_md, dnnl_query_diff_weights_md};
  for (int k = 0; k < 3; k++) {
    if (k == 1 && !q->bwd_data) {
      strcpy(s->impl[k], "-");
      continue;
    }
    dnnl_primitive_desc_t pd = NULL;
    if (plain1x1) {
      pd = conv_pd(q, t, k, dnnl_nchw, dnnl_oihw);
      if (pd && is_ref(pd)) dnnl_primitive_desc_destroy(pd), pd = NULL;
    }
    if (!pd) pd = conv_pd(q, t, k, nhwc ? dnnl_nhwc : dnnl_format_tag_any, dnnl_format_tag_any);
    if (!pd) {
      fprintf(stderr, "bench_conv_layout: no primitive for %s\n", q->name);
      exit(1);
    }
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(s->impl[k], sizeof s->impl[k], "%s", impl ? impl : "?");
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    s->prims[s->nprims++] = p;
    dnnl_exec_arg_t a[3];
    for (int i = 0; i < 2; i++)
      a[i] = (dnnl_exec_arg_t){ain[k][i], input(s, tin[k][i], dnnl_primitive_desc_query_md(pd, qin[k][i], 0))};
    op_t post;
    a[2] = (dnnl_exec_arg_t){aout[k], output(s, tout[k], dnnl_primitive_desc_query_md(pd, qout[k], 0), &post)};
    push(s, p, 3, a);
    if (post.p) s->ops[s->nops++] = post;
    dnnl_primitive_desc_destroy(pd);
  }
}

static void step(const side_t *s) {
  for (int i = 0; i < s->nops; i++) CHECK(dnnl_primitive_execute(s->ops[i].p, strm, s->ops[i].n, s->ops[i].a));
  CHECK(dnnl_stream_wait(strm));
}

static void destroy(side_t *s) {
  for (int i = 0; i < s->nprims; i++) dnnl_primitive_destroy(s->prims[i]);
  for (int i = 0; i < s->nowned; i++) dnnl_memory_destroy(s->owned[i]);
}

/* Process CPU time: on a shared, loaded host wall time mostly measures the
 * other processes; with 1 thread (or OMP_WAIT_POLICY=passive) CPU time is
 * the work done. */
static double now_ms(void) { return (double)clock() / CLOCKS_PER_SEC * 1e3; }

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* CPU ms per step of one side: as many steps as fill min_ms of CPU time. */
static double timed(const side_t *s, double min_ms) {
  int it = 0;
  double t0 = now_ms(), t;
  do step(s), it++;
  while ((t = now_ms() - t0) < min_ms);
  return t / it;
}

int main(int argc, char **argv) {
  int nt = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
  double min_ms = argc > 3 ? atof(argv[3]) : 150;
  if (nt < 1 || rounds < 1 || rounds > 64 || min_ms <= 0) {
    fprintf(stderr, "bench_conv_layout: threads >= 1, 1 <= rounds <= 64, ms > 0\n");
    return 2;
  }
  omp_set_num_threads(nt);
  CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  static const dnnl_data_type_t types[2] = {dnnl_f32, dnnl_bf16};
  double tot[2][2] = {{0}};
  for (int ti = 0; ti < 2; ti++)
    for (int si = 0; si < NSHAPES; si++) {
      const shape_t *q = &shapes[si];
      side_t sd[2];
      build(&sd[0], q, types[ti], false), build(&sd[1], q, types[ti], true);
      step(&sd[0]), step(&sd[1]); /* warm-up */
      double v[2][64], med[2];
      for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) v[k][r] = timed(&sd[(k + r) % 2], min_ms);
      /* (k + r) % 2 alternates which side goes first; put the values back per side */
      double a[64], b[64];
      for (int r = 0; r < rounds; r++) a[r] = v[r % 2][r], b[r] = v[(r + 1) % 2][r];
      med[0] = median(a, rounds), med[1] = median(b, rounds);
      printf("%-4s %-26s x%d  nchw %8.3f ms  nhwc %8.3f ms  B/A %.2f  [A: %s | %s | %s] [B: %s | %s | %s]\n",
             ti ? "bf16" : "f32", q->name, q->count, med[0], med[1], med[1] / med[0], sd[0].impl[0], sd[0].impl[1],
             sd[0].impl[2], sd[1].impl[0], sd[1].impl[1], sd[1].impl[2]);
      fflush(stdout);
      if (q->net == 20)
        for (int k = 0; k < 2; k++) tot[ti][k] += q->count * med[k];
      destroy(&sd[0]), destroy(&sd[1]);
    }
  for (int ti = 0; ti < 2; ti++)
    printf("resnet20 conv step %s (weighted by count): nchw %.2f ms  nhwc %.2f ms  B/A %.2f\n", ti ? "bf16" : "f32",
           tot[ti][0], tot[ti][1], tot[ti][1] / tot[ti][0]);
  dnnl_stream_destroy(strm), dnnl_engine_destroy(eng);
  return 0;
}
