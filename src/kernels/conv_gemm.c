/* conv_gemm.c — the filter gradient of a 1x1 NHWC f32 convolution (no
 * padding, no groups, no dilation) over few output positions, as one GEMM:
 *   dw (O, C) = dy (K, O)^T x_s (K, C),  K = N OH OW
 * with x_s the strided positions of x (x itself at stride 1, else a copy).
 * oneDNN's convolution runs these far below its GEMM: ResNet-50's last
 * stage at one image per device (7x7, K = 49), 2048 -> 512 channels, took
 * 3.96 ms on one thread against 0.57 ms for the GEMM; 1024 -> 2048 at
 * stride 2, 8.35 against 1.20; at 40x40 (K = 1600) 5.82 against 5.04
 * (bench/conv_filter_gemm.c times both paths). At 56x56 (K = 3136) the GEMM
 * was the slower, 0.63 against 0.59 ms (a one-off, the same product as a
 * dot_general): so K at most CONV_GEMM_MAX_K. The sums run in another order
 * than the convolution's: other bits, same values within rounding. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_internal.h"
#include "kernels/matmul_prim.h" /* the primitive kept per node */

#define CONV_GEMM_MAX_K 2048

typedef struct {
  ts_kstate base;
  tk_matmul mm;
  float *xs; /* the strided positions of x (stride > 1), K x C */
} cg_state;

static void cg_state_free(ts_kstate *b) {
  cg_state *s = (cg_state *)b;
  tk_matmul_free(&s->mm);
  free(s->xs);
  free(s);
}

bool tk_conv_gemm_state(const ts_kstate *s) { return s && s->free == cg_state_free; }

static bool g_gemm_1x1 = true; /* bench/conv_filter_gemm.c times both */
void tk_conv_set_gemm_1x1(bool on) { g_gemm_1x1 = on; }

bool tk_conv_gemm_fits(const ts_graph *g, const ts_node *n) {
  if (!g_gemm_1x1 || n->op != TS_OP_CONV_BWD_FILTER || n->dtype != TS_F32) return false;
  const ts_node *x = tk_operand(g, n, 0), *dy = tk_operand(g, n, 1);
  const ts_conv_params *p = &n->attr.conv;
  if (x->dtype != TS_F32 || dy->dtype != TS_F32 || p->layout != TS_LAYOUT_NHWC) return false;
  if (n->shape[2] != 1 || n->shape[3] != 1 || p->groups > 1) return false;
  for (int i = 0; i < 2; i++)
    if (p->pad_lo[i] || p->pad_hi[i] || p->dilation[i] > 1) return false;
  int64_t K = dy->shape[0] * dy->shape[1] * dy->shape[2];
  return K > 0 && K <= CONV_GEMM_MAX_K && n->shape[0] > 0 && n->shape[1] > 0;
}

/* dims (r, c) with strides (sr, sc) */
static void md2(dnnl_memory_desc_t *md, int64_t r, int64_t c, int64_t sr, int64_t sc) {
  dnnl_dims_t d = {r, c}, st = {sr, sc};
  dnnl_memory_desc_init_by_strides(md, 2, d, dnnl_f32, st);
}

/* dw (O, C) = dy^T (O, K) x_s (K, C): dy is (K, O) row-major */
static int cg_setup(cg_state *s, int64_t O, int64_t K, int64_t C) {
  dnnl_memory_desc_t amd, bmd, cmd;
  md2(&amd, O, K, 1, O);
  md2(&bmd, K, C, C, 1);
  md2(&cmd, O, C, C, 1);
  return tk_matmul_init(&s->mm, &amd, &bmd, &cmd, false);
}

/* x_s: x's positions (n, oh s0, ow s1) of x (N, H, W, C), K x C. */
static void gather_strided(const float *x, float *xs, int64_t N, int64_t H, int64_t W, int64_t C, int64_t OH,
                           int64_t OW, const int64_t *s, int nt) {
#pragma omp parallel for num_threads(nt) if (nt > 1 && N * OH * OW * C >= 32768)
  for (int64_t r = 0; r < N * OH; r++) {
    int64_t b = r / OH, oh = r % OH;
    for (int64_t ow = 0; ow < OW; ow++)
      memcpy(xs + (r * OW + ow) * C, x + ((b * H + oh * s[0]) * W + ow * s[1]) * C, (size_t)C * sizeof *xs);
  }
}

int tk_conv_gemm(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st, int nt) {
  const ts_node *x = tk_operand(g, n, 0), *dy = tk_operand(g, n, 1);
  int64_t N = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3];
  int64_t OH = dy->shape[1], OW = dy->shape[2], O = dy->shape[3], K = N * OH * OW;
  const ts_conv_params *p = &n->attr.conv;
  int64_t s[2] = {p->stride[0] > 0 ? p->stride[0] : 1, p->stride[1] > 0 ? p->stride[1] : 1};
  bool strided = s[0] > 1 || s[1] > 1;
  cg_state *cs = (cg_state *)*st;
  if (!cs) { /* kept in the node only once complete: a failed setup is tried again, not run half-made */
    cs = calloc(1, sizeof *cs);
    if (!cs) return set_error_code(TS_ERR_OUT_OF_MEMORY, "conv2d_bwd_filter: out of memory");
    cs->base.free = cg_state_free;
    if (strided && !(cs->xs = aligned_alloc(64, ((size_t)(K * C) * sizeof(float) + 63) / 64 * 64))) {
      cg_state_free(&cs->base);
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "conv2d_bwd_filter: out of memory for x's %lld strided positions",
                            (long long)(K * C));
    }
    if (cg_setup(cs, O, K, C)) {
      cg_state_free(&cs->base);
      return set_error_code(TS_ERR_INTERNAL, "conv2d_bwd_filter: no oneDNN matmul for (%lld x %lld x %lld)",
                            (long long)O, (long long)K, (long long)C);
    }
    *st = &cs->base;
  }
  const void *b = in[0];
  if (strided) gather_strided(in[0], cs->xs, N, H, W, C, OH, OW, s, nt), b = cs->xs;
  if (tk_matmul_run(&cs->mm, in[1], b, out))
    return set_error_code(TS_ERR_INTERNAL, "conv2d_bwd_filter: oneDNN matmul failed for (%lld x %lld x %lld)",
                          (long long)O, (long long)K, (long long)C);
  return 0;
}
