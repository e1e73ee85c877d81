/* image_resize.c — the geometric transforms of ImageFolder samples:
 * bilinear resampling as PIL's Image.resize(BILINEAR) computes it (the same
 * coefficients, antialiased when shrinking, and the same 22-bit fixed-point
 * arithmetic with a u8 rounding between the horizontal and the vertical
 * pass, so results equal PIL's bit for bit), and torchvision's
 * RandomResizedCrop box rules.
 *
 * Only the requested output window is computed: each output pixel depends
 * only on its own coefficients, so resizing to 256x341 and center-cropping
 * 224x224 costs a 224x224 resize. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"
#include "tessel/imagefolder.h"
#include "util/error.h"
#include "util/prng.h"

#define PRECISION_BITS (32 - 8 - 2) /* PIL's, for 8-bit images */

static double bilinear(double x) {
  if (x < 0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* Coefficients of output coords [o0, o0 + n) of an output of out_size over
 * input [in0, in0 + in_len) (clamped to it, as a crop then resize is):
 * bounds[2k] first input index, bounds[2k+1] count; kk[k * ksize + j] fixed
 * point. Returns ksize, or -1 (out of memory). */
static int coeffs(int in0, int in_len, int out_size, int o0, int n, int **bounds, int32_t **kk) {
  double scale = (double)in_len / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterscale;
  int ksize = (int)ceil(support) * 2 + 1;
  *bounds = malloc((size_t)n * 2 * sizeof **bounds);
  *kk = malloc((size_t)n * (size_t)ksize * sizeof **kk);
  double *pk = malloc((size_t)ksize * sizeof *pk);
  if (!*bounds || !*kk || !pk) {
    free(*bounds), free(*kk), free(pk);
    *bounds = NULL, *kk = NULL;
    return -1;
  }
  for (int k = 0; k < n; k++) {
    int xx = o0 + k;
    double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_len) xmax = in_len;
    xmax -= xmin;
    for (int x = 0; x < xmax; x++) {
      double wgt = bilinear((x + xmin - center + 0.5) * ss);
      pk[x] = wgt;
      ww += wgt;
    }
    int32_t *out = *kk + (size_t)k * ksize;
    for (int x = 0; x < ksize; x++) {
      double v = x < xmax && ww != 0.0 ? pk[x] / ww : 0.0;
      out[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
    }
    (*bounds)[2 * k] = in0 + xmin;
    (*bounds)[2 * k + 1] = xmax;
  }
  free(pk);
  return ksize;
}

static inline uint8_t clip8(int64_t ss) {
  int64_t v = ss >> PRECISION_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int ts_image_resample(const uint8_t *src, int h, int w, int x0, int y0, int bw, int bh, int out_w, int out_h,
                      int ox, int oy, int cw, int ch, uint8_t *dst) {
  if (!src || !dst || h <= 0 || w <= 0 || bw <= 0 || bh <= 0 || x0 < 0 || y0 < 0 || x0 + bw > w || y0 + bh > h ||
      out_w <= 0 || out_h <= 0 || cw <= 0 || ch <= 0 || ox < 0 || oy < 0 || ox + cw > out_w || oy + ch > out_h)
    return set_error("ts_image_resample: bad box %d,%d %dx%d of %dx%d or window %d,%d %dx%d of %dx%d", x0, y0, bw,
                     bh, w, h, ox, oy, cw, ch, out_w, out_h);
  int *bx = NULL, *by = NULL;
  int32_t *kx = NULL, *ky = NULL;
  uint8_t *tmp = NULL;
  int rc = -1;
  int ksx = coeffs(x0, bw, out_w, ox, cw, &bx, &kx);
  int ksy = ksx < 0 ? -1 : coeffs(y0, bh, out_h, oy, ch, &by, &ky);
  if (ksy < 0) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_image_resample: out of memory");
    goto done;
  }
  /* PIL (on the cropped box) skips a pass whose size is the box's: a copy. */
  bool need_h = out_w != bw, need_v = out_h != bh;
  /* Rows of src the vertical pass reads. */
  int r0 = by[0], r1 = by[2 * (ch - 1)] + by[2 * (ch - 1) + 1];
  int rows = r1 - r0;
  if (!(tmp = malloc((size_t)rows * (size_t)cw * 3))) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_image_resample: out of memory");
    goto done;
  }
  /* Horizontal pass: rows [r0, r1) of src to tmp (rows, cw, 3). */
  for (int y = 0; y < rows; y++) {
    const uint8_t *in = src + (size_t)(r0 + y) * w * 3;
    uint8_t *o = tmp + (size_t)y * cw * 3;
    if (!need_h) {
      memcpy(o, in + (size_t)(x0 + ox) * 3, (size_t)cw * 3);
      continue;
    }
    for (int k = 0; k < cw; k++) {
      const int32_t *kk = kx + (size_t)k * ksx;
      const uint8_t *p = in + (size_t)bx[2 * k] * 3;
      int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
      for (int j = 0; j < bx[2 * k + 1]; j++) {
        s0 += (int64_t)p[3 * j] * kk[j];
        s1 += (int64_t)p[3 * j + 1] * kk[j];
        s2 += (int64_t)p[3 * j + 2] * kk[j];
      }
      o[3 * k] = clip8(s0), o[3 * k + 1] = clip8(s1), o[3 * k + 2] = clip8(s2);
    }
  }
  /* Vertical pass: tmp to dst (3, ch, cw) planar. */
  size_t plane = (size_t)ch * cw;
  for (int k = 0; k < ch; k++) {
    int first = by[2 * k] - r0, cnt = by[2 * k + 1];
    const int32_t *kk = ky + (size_t)k * ksy;
    for (int x = 0; x < cw; x++) {
      uint8_t *d = dst + (size_t)k * cw + x;
      if (!need_v) {
        const uint8_t *p = tmp + ((size_t)(y0 + oy + k - r0) * cw + x) * 3;
        d[0] = p[0], d[plane] = p[1], d[2 * plane] = p[2];
        continue;
      }
      int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
      for (int j = 0; j < cnt; j++) {
        const uint8_t *p = tmp + ((size_t)(first + j) * cw + x) * 3;
        s0 += (int64_t)p[0] * kk[j];
        s1 += (int64_t)p[1] * kk[j];
        s2 += (int64_t)p[2] * kk[j];
      }
      d[0] = clip8(s0), d[plane] = clip8(s1), d[2 * plane] = clip8(s2);
    }
  }
  rc = 0;
done:
  free(bx), free(by), free(kx), free(ky), free(tmp);
  return rc;
}

int ts_random_resized_crop_box(int h, int w, uint64_t key, const double scale[2], const double ratio[2],
                               int box[4]) {
  static const double dscale[2] = {0.08, 1.0}, dratio[2] = {3.0 / 4.0, 4.0 / 3.0};
  if (!scale) scale = dscale;
  if (!ratio) ratio = dratio;
  ts_prng r;
  ts_prng_seed(&r, key);
  double area = (double)h * w, lr0 = log(ratio[0]), lr1 = log(ratio[1]);
  for (int attempt = 0; attempt < 10; attempt++) {
    double target = area * (scale[0] + (scale[1] - scale[0]) * ts_prng_uniform(&r));
    double aspect = exp(lr0 + (lr1 - lr0) * ts_prng_uniform(&r));
    int cw = (int)rint(sqrt(target * aspect)), chh = (int)rint(sqrt(target / aspect));
    if (cw > 0 && cw <= w && chh > 0 && chh <= h) {
      int i = (int)ts_prng_below(&r, (uint64_t)(h - chh + 1)), j = (int)ts_prng_below(&r, (uint64_t)(w - cw + 1));
      box[0] = j, box[1] = i, box[2] = cw, box[3] = chh;
      return attempt;
    }
  }
  /* the center crop of the closest allowed ratio */
  double in_ratio = (double)w / h, rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
  double rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
  int cw = w, chh = h;
  if (in_ratio < rmin) chh = (int)rint(w / rmin);
  else if (in_ratio > rmax) cw = (int)rint(h * rmax);
  if (chh > h) chh = h;
  if (cw > w) cw = w;
  box[0] = (w - cw) / 2, box[1] = (h - chh) / 2, box[2] = cw, box[3] = chh;
  return 10;
}

int img_center_offset(int len, int crop) {
  int d = len - crop; /* torchvision: int(round(d / 2.0)), Python's round: half to even */
  return (int)rint(d / 2.0);
}

int img_resize_shorter(int h, int w, int resize, int *out_h, int *out_w) {
  /* torchvision: new_short = resize, new_long = int(resize * long / short) */
  if (h <= w) {
    *out_h = resize;
    *out_w = (int)((double)resize * w / h);
  } else {
    *out_w = resize;
    *out_h = (int)((double)resize * h / w);
  }
  if (*out_w < 1) *out_w = 1;
  if (*out_h < 1) *out_h = 1;
  return 0;
}
