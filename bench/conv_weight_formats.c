/* conv_weight_formats.c — can one reorder of a convolution's weights serve
 * more than one of its primitives in a training step? For ResNet shapes,
 * in f32 and bf16, the layouts oneDNN picks (format_tag any, as
 * kernels/conv.c asks) for the forward's weights, backward-data's weights
 * and backward-weights' filter gradient, and which implementation it gives
 *   - backward-data when handed the forward's weight layout (a shared copy),
 *   - all three when the weights stay plain OIHW (no weight reorder at all).
 * A weight is read by one forward and one backward-data convolution per
 * step and written once per step by the update, so a cache could only share
 * the copy between those two (kernels/conv.c reorders each use).
 *
 *   usage: bench_conv_weight_formats
 * Prints one line per shape and dtype: the three layouts (oneDNN's inner
 * blocks, e.g. 16b16a), whether backward-data's equals the forward's, and
 * the implementations in the two forced cases ("ref" = oneDNN's loops,
 * "gemm" = im2col + matrix product: both slower than the blocked kernels
 * plus reorders, bench_conv_layout / conv.c's notes). No timing. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

typedef struct {
  const char *name;
  int64_t N, C, H, O, K, s;
} shape_t;

static const shape_t shapes[] = {
    {"r20 16->16 28x28 3x3", 128, 16, 28, 16, 3, 1},   {"r20 32->32 14x14 3x3", 128, 32, 14, 32, 3, 1},
    {"r20 64->64 7x7 3x3", 128, 64, 7, 64, 3, 1},      {"r50 64->64 56x56 3x3", 8, 64, 56, 64, 3, 1},
    {"r50 256->256 14x14 3x3", 8, 256, 14, 256, 3, 1}, {"r50 1024->256 14x14 1x1", 8, 1024, 14, 256, 1, 1},
    {"r50 512->2048 7x7 1x1", 8, 512, 7, 2048, 1, 1},
};

static void md4(dnnl_memory_desc_t *m, int64_t a, int64_t b, int64_t c, int64_t d, dnnl_data_type_t t,
                dnnl_format_tag_t tag) {
  dnnl_dims_t dims = {a, b, c, d};
  dnnl_memory_desc_init_by_tag(m, 4, dims, t, tag);
}

static const char *impl(const_dnnl_primitive_desc_t pd) {
  const char *s = "none";
  if (pd) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
  return s;
}

/* oneDNN's inner blocks of md, e.g. "16b16a"; "plain" when none. */
static const char *blocks(const dnnl_memory_desc_t *md, char *buf) {
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  buf[0] = 0;
  for (int i = 0; i < b->inner_nblks; i++)
    sprintf(buf + strlen(buf), "%lld%c", (long long)b->inner_blks[i], (char)('a' + b->inner_idxs[i]));
  return b->inner_nblks ? buf : "plain";
}

int main(void) {
  dnnl_engine_t eng;
  if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 1;
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
    for (int bf = 0; bf < 2; bf++) {
      const shape_t *q = &shapes[k];
      dnnl_data_type_t t = bf ? dnnl_bf16 : dnnl_f32;
      int64_t p = q->K / 2, oh = (q->H + 2 * p - q->K) / q->s + 1;
      dnnl_dims_t st = {q->s, q->s}, pad = {p, p}, dil = {0, 0};
      const char *forced[2];
      char fb[32], bb[32], wb[32];
      const char *fw = "?", *bw = "?", *ww = "?";
      bool same = false;
      for (int plain = 0; plain < 2; plain++) {
        dnnl_memory_desc_t x, w, y, dw;
        md4(&x, q->N, q->C, q->H, q->H, t, dnnl_format_tag_any);
        md4(&y, q->N, q->O, oh, oh, t, dnnl_format_tag_any);
        md4(&w, q->O, q->C, q->K, q->K, t, plain ? dnnl_oihw : dnnl_format_tag_any);
        md4(&dw, q->O, q->C, q->K, q->K, dnnl_f32, plain ? dnnl_oihw : dnnl_format_tag_any);
        dnnl_convolution_desc_t fd, bd, wd, sd;
        dnnl_primitive_desc_t fpd = NULL, bpd = NULL, wpd = NULL, spd = NULL;
        dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &x, &w, NULL,
                                                   &y, st, dil, pad, pad);
        if (dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL) != dnnl_success) return 1;
        dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &x, &w, &y, st, dil, pad, pad);
        if (dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd) != dnnl_success) bpd = NULL;
        dnnl_dilated_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &x, &dw, NULL, &y, st, dil,
                                                            pad, pad);
        if (dnnl_primitive_desc_create(&wpd, &wd, NULL, eng, fpd) != dnnl_success) wpd = NULL;
        if (plain) {
          static char all[96];
          snprintf(all, sizeof all, "%s/%s/%s", impl(fpd), impl(bpd), impl(wpd));
          forced[1] = all;
        } else {
          const dnnl_memory_desc_t *f = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
          fw = blocks(f, fb);
          if (bpd) {
            const dnnl_memory_desc_t *b = dnnl_primitive_desc_query_md(bpd, dnnl_query_weights_md, 0);
            bw = blocks(b, bb), same = dnnl_memory_desc_equal(f, b);
          }
          if (wpd) ww = blocks(dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 0), wb);
          /* backward-data handed the forward's layouts (weights and activations) */
          dnnl_memory_desc_t fx = *dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0);
          dnnl_memory_desc_t fy = *dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0);
          dnnl_dilated_convolution_backward_data_desc_init(&sd, dnnl_convolution_direct, &fx, f, &fy, st, dil, pad,
                                                           pad);
          if (dnnl_primitive_desc_create(&spd, &sd, NULL, eng, fpd) != dnnl_success) spd = NULL;
          static char one[48];
          snprintf(one, sizeof one, "%s", impl(spd));
          forced[0] = one;
        }
        if (spd) dnnl_primitive_desc_destroy(spd);
        if (wpd) dnnl_primitive_desc_destroy(wpd);
        if (bpd) dnnl_primitive_desc_destroy(bpd);
        dnnl_primitive_desc_destroy(fpd);
      }
      printf("%-26s %-4s weights fwd %-8s bwd_data %-8s (same: %s) dW %-8s | bwd_data on fwd's layout: %s"
             " | plain OIHW fwd/bwd_data/bwd_w: %s\n",
             q->name, bf ? "bf16" : "f32", fw, bw, same ? "yes" : "no", ww, forced[0], forced[1]);
    }
  dnnl_engine_destroy(eng);
  return 0;
}
