/* attention.c — TS_OP_ATTENTION and TS_OP_ATTENTION_GRAD: fused causal
 * self-attention that never stores the (B, H, T, T) scores, on the packed
 * f32 qkv (B, T, 3, H, Dh) of a fused QKV projection (no slices, transposes
 * or pads around it): y and dy are (B, T, H, Dh), the gradient dqkv is
 * qkv's shape.
 *
 * Per (b, h) and block of BR query rows [i0, i1), the keys that block can see
 * are [0, i1), so its scores are a (BR, i1) scratch that stays in cache
 * (O(T) memory per thread, whatever T is):
 *   forward:  S = scale q_blk k^T; P = softmax over j <= i (f32, exact max and
 *             sum over the whole row: the block holds whole rows, so no
 *             online rescaling is needed); y_blk = P v.
 *   backward: S and P recomputed the same way (no saved statistics: the
 *             scratch holds whole rows, so the max and the sum are one pass
 *             over cached data); dP = dy_blk v^T; D = rowsum(P * dP);
 *             dS = P * (dP - D); dq_blk = scale dS k; dk += scale dS^T q_blk;
 *             dv += P^T dy_blk.
 * The matmuls are oneDNN's sgemm (row-major, single-threaded inside the
 * OpenMP loop over (b, h)). Masked entries (j > i) are exactly 0 in P, as in
 * the decomposed form (its -1e30 underflows exp to 0). */
#include <omp.h>
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h> /* dnnl_sgemm */

#include "kernels/kernels_internal.h"
#include "kernels/vexpf.h"

#define ATT_BR 64 /* query rows per block */


/* Rows r of S (br, ld), query i0 + r sees keys [0, i0 + r]: S becomes P
 * (softmax over those keys; 0 beyond). */
static void att_softmax(float *S, int64_t ld, int64_t br, int64_t i0) {
  for (int64_t r = 0; r < br; r++) {
    float *s = S + r * ld;
    int64_t n = i0 + r + 1;
    float m = s[0];
    for (int64_t j = 1; j < n; j++) m = s[j] > m ? s[j] : m;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
      float e = vexpf(s[j] - m);
      s[j] = e;
      sum += e;
    }
#pragma omp simd
    for (int64_t j = 0; j < n; j++) s[j] = s[j] / sum;
    for (int64_t j = n; j < ld; j++) s[j] = 0;
  }
}

/* Operands in the packed layout: qkv (B, T, 3, H, Dh) with row t of head h's
 * q at qkv + (b T + t) 3C + h Dh (C = H Dh; k at + C, v at + 2C), so each
 * head's q, k, v are (T, Dh) matrices with leading dimension 3C; y and dy
 * (B, T, H, Dh): leading dimension C. */
typedef struct {
  int64_t B, T, H, D, C;
} att_dims;

static int att_forward(const float *qkv, float *y, att_dims a, float scale, int nt) {
  int64_t T = a.T, D = a.D, C = a.C, ld = 3 * C, nb = (T + ATT_BR - 1) / ATT_BR, BH = a.B * a.H;
  float *scratch = malloc((size_t)nt * ATT_BR * (size_t)T * sizeof *scratch);
  if (!scratch) return error_oom("causal_attention: scratch", (size_t)nt * ATT_BR * (size_t)T * sizeof *scratch);
  int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) reduction(| : bad)
  for (int64_t t = 0; t < BH * nb; t++) {
    int64_t bh = t / nb, b = bh / a.H, h = bh % a.H, blk = t % nb, i0 = blk * ATT_BR;
    int64_t i1 = i0 + ATT_BR < T ? i0 + ATT_BR : T, br = i1 - i0;
    float *S = scratch + (size_t)omp_get_thread_num() * ATT_BR * (size_t)T;
    const float *qh = qkv + b * T * ld + h * D, *kh = qh + C, *vh = qh + 2 * C;
    /* S (br, i1) = scale q_blk k[0, i1)^T */
    bad |= dnnl_sgemm('N', 'T', br, i1, D, scale, qh + i0 * ld, ld, kh, ld, 0.f, S, i1) != dnnl_success;
    att_softmax(S, i1, br, i0);
    bad |= dnnl_sgemm('N', 'N', br, D, i1, 1.f, S, i1, vh, ld, 0.f, y + (b * T + i0) * C + h * D, C) != dnnl_success;
  }
  free(scratch);
  return bad ? set_error("causal_attention: oneDNN sgemm failed") : 0;
}

static int att_backward(const float *qkv, const float *dy, float *dqkv, att_dims a, float scale, int nt) {
  int64_t T = a.T, D = a.D, C = a.C, ld = 3 * C, BH = a.B * a.H;
  size_t per = 2 * (size_t)ATT_BR * (size_t)T;
  float *scratch = malloc((size_t)nt * per * sizeof *scratch);
  if (!scratch) return error_oom("causal_attention_grad: scratch", (size_t)nt * per * sizeof *scratch);
  int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) reduction(| : bad)
  for (int64_t bh = 0; bh < BH; bh++) {
    int64_t b = bh / a.H, h = bh % a.H;
    float *P = scratch + (size_t)omp_get_thread_num() * per, *dP = P + (size_t)ATT_BR * (size_t)T;
    const float *qh = qkv + b * T * ld + h * D, *kh = qh + C, *vh = qh + 2 * C, *dyh = dy + b * T * C + h * D;
    float *dqh = dqkv + b * T * ld + h * D, *dkh = dqh + C, *dvh = dqh + 2 * C;
    for (int64_t t = 0; t < T; t++) { /* dk, dv accumulate over the query blocks */
      memset(dkh + t * ld, 0, (size_t)D * sizeof *dkh);
      memset(dvh + t * ld, 0, (size_t)D * sizeof *dvh);
    }
    for (int64_t i0 = 0; i0 < T; i0 += ATT_BR) {
      int64_t i1 = i0 + ATT_BR < T ? i0 + ATT_BR : T, br = i1 - i0;
      const float *qb = qh + i0 * ld, *dyb = dyh + i0 * C;
      bad |= dnnl_sgemm('N', 'T', br, i1, D, scale, qb, ld, kh, ld, 0.f, P, i1) != dnnl_success;
      att_softmax(P, i1, br, i0);
      /* dP (br, i1) = dy_blk v[0, i1)^T; dv[0, i1) += P^T dy_blk */
      bad |= dnnl_sgemm('N', 'T', br, i1, D, 1.f, dyb, C, vh, ld, 0.f, dP, i1) != dnnl_success;
      bad |= dnnl_sgemm('T', 'N', i1, D, br, 1.f, P, i1, dyb, C, 1.f, dvh, ld) != dnnl_success;
      for (int64_t r = 0; r < br; r++) { /* dS = P (dP - rowsum(P dP)), in dP */
        float *p = P + r * i1, *d = dP + r * i1, s = 0;
        int64_t n = i0 + r + 1;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < n; j++) s += p[j] * d[j];
#pragma omp simd
        for (int64_t j = 0; j < n; j++) d[j] = p[j] * (d[j] - s);
        for (int64_t j = n; j < i1; j++) d[j] = 0;
      }
      /* dq_blk = scale dS k[0, i1); dk[0, i1) += scale dS^T q_blk */
      bad |= dnnl_sgemm('N', 'N', br, D, i1, scale, dP, i1, kh, ld, 0.f, dqh + i0 * ld, ld) != dnnl_success;
      bad |= dnnl_sgemm('T', 'N', i1, D, br, scale, dP, i1, qb, ld, 1.f, dkh, ld) != dnnl_success;
    }
  }
  free(scratch);
  return bad ? set_error("causal_attention_grad: oneDNN sgemm failed") : 0;
}

int tk_attention(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  const ts_node *x = tk_operand(g, n, 0);
  if (x->dtype != TS_F32 || x->rank != 5 || x->shape[2] != 3)
    return set_error("%s: the fused kernel takes an f32 (B, T, 3, H, Dh) qkv", ir_op_name(n->op));
  att_dims a = {x->shape[0], x->shape[1], x->shape[3], x->shape[4], x->shape[3] * x->shape[4]};
  if (a.B * a.T * a.C == 0) return 0;
  int nt = tk_threads(ctx, a.B * a.H * a.T * a.T);
  float scale = (float)n->attr.value;
  if (n->op == TS_OP_ATTENTION) return att_forward(in[0], out, a, scale, nt);
  return att_backward(in[0], in[1], out, a, scale, nt);
}
