/* conv_impls.c — every oneDNN implementation of a channels-last (nhwc)
 * convolution forward (or backward-data, backward-weights), per ResNet-20 (b128, 32x32), ResNet-18 (b32, 32x32) and ResNet-50 (b8, 224x224)
 * layer shape: least CPU ms of the primitive alone and of the weight reorder
 * from OIHW into the layout that implementation picks (format_tag any), over
 * interleaved rounds. The guide for conv.c's forward implementation choice
 * (nhwc_fwd_impl): oneDNN 2.6 puts brgconv first for nxc activations.
 *
 *   usage: bench_conv_impls [threads (1)] [rounds (5)] [reps per timed block (3)] [net: 20|18|50|0 (0: all)]
 *                           [direction: 0 forward, 1 backward-data, 2 backward-weights (0)]
 *                           [blocked: activations nChw16c instead of nhwc, their reorders not timed]
 *   e.g.   OMP_WAIT_POLICY=passive nice build/bench_conv_impls 1 7 3
 * Prints per shape and implementation: least ms of the conv, of its weight
 * reorder, their sum, and the count-weighted step totals per implementation
 * family (the first-listed one against the best non-brgconv one). */
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

typedef struct {
  int64_t N, C, H, W, O, K, s, p;
  int count, net;
} shape_t;

static const shape_t shapes[] = {
    {128, 3, 32, 32, 16, 3, 1, 1, 1, 20},    {128, 16, 32, 32, 16, 3, 1, 1, 6, 20},
    {128, 16, 32, 32, 32, 3, 2, 1, 1, 20},   {128, 16, 32, 32, 32, 1, 2, 0, 1, 20},
    {128, 32, 16, 16, 32, 3, 1, 1, 5, 20},   {128, 32, 16, 16, 64, 3, 2, 1, 1, 20},
    {128, 32, 16, 16, 64, 1, 2, 0, 1, 20},   {128, 64, 8, 8, 64, 3, 1, 1, 5, 20},
    {32, 3, 32, 32, 64, 3, 1, 1, 1, 18},     {32, 64, 32, 32, 64, 3, 1, 1, 4, 18},
    {32, 64, 32, 32, 128, 3, 2, 1, 1, 18},   {32, 64, 32, 32, 128, 1, 2, 0, 1, 18},
    {32, 128, 16, 16, 128, 3, 1, 1, 3, 18},  {32, 128, 16, 16, 256, 3, 2, 1, 1, 18},
    {32, 128, 16, 16, 256, 1, 2, 0, 1, 18},  {32, 256, 8, 8, 256, 3, 1, 1, 3, 18},
    {32, 256, 8, 8, 512, 3, 2, 1, 1, 18},    {32, 256, 8, 8, 512, 1, 2, 0, 1, 18},
    {32, 512, 4, 4, 512, 3, 1, 1, 3, 18},
    /* ResNet-50 b8 224x224 (torchvision: stride on the 3x3) */
    {8, 3, 224, 224, 64, 7, 2, 3, 1, 50},    {8, 64, 56, 56, 64, 1, 1, 0, 1, 50},
    {8, 64, 56, 56, 64, 3, 1, 1, 3, 50},     {8, 64, 56, 56, 256, 1, 1, 0, 4, 50},
    {8, 256, 56, 56, 64, 1, 1, 0, 2, 50},    {8, 256, 56, 56, 128, 1, 1, 0, 1, 50},
    {8, 128, 56, 56, 128, 3, 2, 1, 1, 50},   {8, 128, 28, 28, 512, 1, 1, 0, 4, 50},
    {8, 256, 56, 56, 512, 1, 2, 0, 1, 50},   {8, 512, 28, 28, 128, 1, 1, 0, 3, 50},
    {8, 128, 28, 28, 128, 3, 1, 1, 3, 50},   {8, 512, 28, 28, 256, 1, 1, 0, 1, 50},
    {8, 256, 28, 28, 256, 3, 2, 1, 1, 50},   {8, 256, 14, 14, 1024, 1, 1, 0, 6, 50},
    {8, 512, 28, 28, 1024, 1, 2, 0, 1, 50},  {8, 1024, 14, 14, 256, 1, 1, 0, 5, 50},
    {8, 256, 14, 14, 256, 3, 1, 1, 5, 50},   {8, 1024, 14, 14, 512, 1, 1, 0, 1, 50},
    {8, 512, 14, 14, 512, 3, 2, 1, 1, 50},   {8, 512, 7, 7, 2048, 1, 1, 0, 3, 50},
    {8, 1024, 14, 14, 2048, 1, 2, 0, 1, 50}, {8, 2048, 7, 7, 512, 1, 1, 0, 2, 50},
    {8, 512, 7, 7, 512, 3, 1, 1, 2, 50},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])
#define MAXIMPL 8

#define CHECK(x)                                                                 \
  do {                                                                           \
    if ((x) != dnnl_success) {                                                   \
      fprintf(stderr, "bench_conv_impls: %s failed (line %d)\n", #x, __LINE__); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

typedef struct {
  dnnl_primitive_t conv, reo;
  dnnl_memory_t wb, pad;
  char name[64];
  double best_conv, best_reo;
} impl_t;

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static int g_dir; /* 0 forward, 1 backward-data, 2 backward-weights */
static bool g_any; /* activations format_tag any (blocked; their reorders not timed) */

static void fill(dnnl_memory_t m) {
  const dnnl_memory_desc_t *md;
  void *p;
  CHECK(dnnl_memory_get_memory_desc(m, &md));
  CHECK(dnnl_memory_get_data_handle(m, &p));
  size_t n = dnnl_memory_desc_get_size(md) / 4;
  for (size_t i = 0; i < n; i++) ((float *)p)[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
}

static int impls_of(const shape_t *q, impl_t *out, dnnl_memory_t *x, dnnl_memory_t *w, dnnl_memory_t *y) {
  dnnl_memory_desc_t xa, wa, ya, wu;
  int64_t OH = (q->H + 2 * q->p - q->K) / q->s + 1, OW = (q->W + 2 * q->p - q->K) / q->s + 1;
  dnnl_dims_t xd = {q->N, q->C, q->H, q->W}, yd = {q->N, q->O, OH, OW}, wd = {q->O, q->C, q->K, q->K};
  CHECK(dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_f32, g_any ? dnnl_nChw16c : dnnl_nhwc));
  CHECK(dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, g_any ? dnnl_nChw16c : dnnl_nhwc));
  CHECK(dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any));
  CHECK(dnnl_memory_desc_init_by_tag(&wu, 4, wd, dnnl_f32, dnnl_oihw));
  CHECK(dnnl_memory_create(x, &xa, eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_create(y, &ya, eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_create(w, &wu, eng, DNNL_MEMORY_ALLOCATE));
  fill(*x), fill(*w);
  dnnl_dims_t st = {q->s, q->s}, dil = {0, 0}, pad = {q->p, q->p};
  dnnl_convolution_desc_t cd;
  CHECK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &xa, &wa,
                                                   NULL, &ya, st, dil, pad, pad));
  dnnl_primitive_attr_t attr;
  CHECK(dnnl_primitive_attr_create(&attr));
  CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_primitive_desc_iterator_t it;
  dnnl_primitive_desc_t fpd = NULL;
  if (g_dir) {
    CHECK(dnnl_primitive_desc_create(&fpd, &cd, NULL, eng, NULL));
    if (g_dir == 1)
      CHECK(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &xa, &wa, &ya, st, dil,
                                                             pad, pad));
    else
      CHECK(dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &xa, &wa, NULL, &ya,
                                                                st, dil, pad, pad));
  }
  CHECK(dnnl_primitive_desc_iterator_create(&it, &cd, attr, eng, fpd));
  int n = 0;
  do {
    dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
    if (!pd) break;
    const char *name = NULL;
    CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name));
    if (strncmp(name, "ref", 3) && n < MAXIMPL) {
      impl_t *m = &out[n++];
      memset(m, 0, sizeof *m);
      snprintf(m->name, sizeof m->name, "%s", name);
      CHECK(dnnl_primitive_create(&m->conv, pd));
      const dnnl_memory_desc_t *pwd =
          dnnl_primitive_desc_query_md(pd, g_dir == 2 ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
      const dnnl_memory_desc_t *spd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
      CHECK(dnnl_memory_create(&m->wb, pwd, eng, DNNL_MEMORY_ALLOCATE));
      CHECK(dnnl_memory_create(&m->pad, spd, eng, DNNL_MEMORY_ALLOCATE));
      dnnl_primitive_desc_t rpd;
      if (g_dir == 2) CHECK(dnnl_reorder_primitive_desc_create(&rpd, pwd, eng, &wu, eng, NULL));
      else CHECK(dnnl_reorder_primitive_desc_create(&rpd, &wu, eng, pwd, eng, NULL));
      CHECK(dnnl_primitive_create(&m->reo, rpd));
      dnnl_primitive_desc_destroy(rpd);
      m->best_conv = m->best_reo = 1e30;
    }
    dnnl_primitive_desc_destroy(pd);
  } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  dnnl_primitive_attr_destroy(attr);
  return n;
}

static void time_impl(impl_t *m, dnnl_memory_t x, dnnl_memory_t w, dnnl_memory_t y, int reps) {
  dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, w}, {DNNL_ARG_TO, m->wb}};
  if (g_dir == 2) ra[0].memory = m->wb, ra[1].memory = w;
  dnnl_exec_arg_t ca[4] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, m->wb}, {DNNL_ARG_DST, y},
                           {DNNL_ARG_SCRATCHPAD, m->pad}};
  if (g_dir == 1) ca[0].arg = DNNL_ARG_DIFF_SRC, ca[2].arg = DNNL_ARG_DIFF_DST;
  if (g_dir == 2) ca[1].arg = DNNL_ARG_DIFF_WEIGHTS, ca[2].arg = DNNL_ARG_DIFF_DST;
  for (int r = 0; r < reps; r++) {
    double t0 = cpu_ms();
    CHECK(dnnl_primitive_execute(m->reo, strm, 2, ra));
    CHECK(dnnl_stream_wait(strm));
    double t1 = cpu_ms();
    CHECK(dnnl_primitive_execute(m->conv, strm, 4, ca));
    CHECK(dnnl_stream_wait(strm));
    double t2 = cpu_ms();
    if (t1 - t0 < m->best_reo) m->best_reo = t1 - t0;
    if (t2 - t1 < m->best_conv) m->best_conv = t2 - t1;
  }
}

int main(int argc, char **argv) {
  int nt = argc > 1 ? atoi(argv[1]) : 1, rounds = argc > 2 ? atoi(argv[2]) : 5;
  int reps = argc > 3 ? atoi(argv[3]) : 3, net = argc > 4 ? atoi(argv[4]) : 0;
  g_dir = argc > 5 ? atoi(argv[5]) : 0;
  g_any = argc > 6 && !strcmp(argv[6], "blocked");
  if (nt < 1 || rounds < 1 || reps < 1) {
    fprintf(stderr, "bench_conv_impls: threads >= 1, rounds >= 1, reps >= 1\n");
    return 2;
  }
  omp_set_num_threads(nt);
  CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  double tot_first[3] = {0, 0, 0}, tot_best[3] = {0, 0, 0};
  for (int i = 0; i < NSHAPES; i++) {
    const shape_t *q = &shapes[i];
    if (net && q->net != net) continue;
    impl_t im[MAXIMPL];
    dnnl_memory_t x, w, y;
    int n = impls_of(q, im, &x, &w, &y);
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < n; k++) time_impl(&im[k], x, w, y, reps);
    int best = 0;
    for (int k = 0; k < n; k++) {
      printf("r%d N%lld %lld->%lld %lldx%lld k%lld/s%lld x%d  %-26s conv %7.3f reorder %6.3f sum %7.3f\n", q->net,
             (long long)q->N, (long long)q->C, (long long)q->O, (long long)q->H, (long long)q->W, (long long)q->K,
             (long long)q->s, q->count, im[k].name, im[k].best_conv, im[k].best_reo,
             im[k].best_conv + im[k].best_reo);
      if (im[k].best_conv + im[k].best_reo < im[best].best_conv + im[best].best_reo) best = k;
    }
    int t = q->net == 20 ? 0 : q->net == 18 ? 1 : 2;
    tot_first[t] += q->count * (im[0].best_conv + im[0].best_reo);
    tot_best[t] += q->count * (im[best].best_conv + im[best].best_reo);
    for (int k = 0; k < n; k++) {
      dnnl_primitive_destroy(im[k].conv), dnnl_primitive_destroy(im[k].reo);
      dnnl_memory_destroy(im[k].wb), dnnl_memory_destroy(im[k].pad);
    }
    dnnl_memory_destroy(x), dnnl_memory_destroy(w), dnnl_memory_destroy(y);
  }
  printf("direction %d per step, least ms (conv + weight reorder): resnet20 first-listed %.3f best %.3f; "
         "resnet18 first-listed %.3f best %.3f; resnet50 first-listed %.3f best %.3f\n", g_dir, tot_first[0],
         tot_best[0], tot_first[1], tot_best[1], tot_first[2], tot_best[2]);
  return 0;
}
