/* augment.c — per-sample image augmentation: random crop with zero padding,
 * horizontal flip, per-channel normalization, fused into one pass from u8
 * (c, h, w) to f32 (c, h, w).
 *
 * The random choices come from a xoshiro256** stream seeded with the caller's
 * 64-bit key (the loader hashes (seed, epoch, sample index) into it), so the
 * same key gives the same crop and flip on any thread, in any order. */
#include "data_internal.h"
#include "util/prng.h" /* xoshiro256** */

void ts_augment_draw(const ts_augment *a, uint64_t key, int *dy, int *dx, bool *flip) {
  ts_prng r;
  ts_prng_seed(&r, key);
  int p = a->crop_pad > 0 ? a->crop_pad : 0;
  *dy = (int)ts_prng_below(&r, (uint64_t)(2 * p + 1));
  *dx = (int)ts_prng_below(&r, (uint64_t)(2 * p + 1));
  bool f = (ts_prng_next(&r) >> 63) != 0;
  *flip = a->hflip && f;
}

void aug_lut_init(const ts_augment *a, int c, ts_aug_lut *out) {
  for (int ch = 0; ch < c && ch < TS_AUG_MAX_CHANNELS; ch++) {
    float mean = a->mean[ch], std = a->std[ch] != 0.0f ? a->std[ch] : 1.0f;
    for (int v = 0; v < 256; v++) out->lut[ch][v] = ((float)v / 255.0f - mean) / std;
  }
}

void aug_apply_lut(const ts_augment *a, const ts_aug_lut *t, const uint8_t *src, int c, int h, int w,
                      uint64_t key, float *dst) {
  int dy, dx;
  bool flip;
  ts_augment_draw(a, key, &dy, &dx, &flip);
  int p = a->crop_pad > 0 ? a->crop_pad : 0;
  int oy = dy - p, ox = dx - p; /* output (y, x) of the crop reads input (y + oy, x + ox) */
  /* Output columns whose source column is inside the image: unflipped
   * x + ox in [0, w); flipped (w - 1 - x) + ox in [0, w). */
  int x0 = flip ? (ox > 0 ? ox : 0) : (ox < 0 ? -ox : 0);
  int x1 = flip ? (ox < 0 ? w + ox : w) : (ox > 0 ? w - ox : w);
  for (int ch = 0; ch < c; ch++) {
    const float *lut = t->lut[ch];
    const float zero = lut[0]; /* the padding: pixel value 0, normalized */
    for (int y = 0; y < h; y++) {
      float *out = dst + ((size_t)ch * h + y) * w; // (w)
      int sy = y + oy;
      if (sy < 0 || sy >= h || x0 >= x1) {
        for (int x = 0; x < w; x++) out[x] = zero;
        continue;
      }
      const uint8_t *in = src + ((size_t)ch * h + sy) * w; // (w)
      for (int x = 0; x < x0; x++) out[x] = zero;
      if (flip) {
        for (int x = x0; x < x1; x++) out[x] = lut[in[w - 1 - x + ox]];
      } else {
        for (int x = x0; x < x1; x++) out[x] = lut[in[x + ox]];
      }
      for (int x = x1; x < w; x++) out[x] = zero;
    }
  }
}

void ts_augment_apply(const ts_augment *a, const uint8_t *src, int c, int h, int w, uint64_t key,
                      float *dst) {
  ts_aug_lut t;
  if (c > TS_AUG_MAX_CHANNELS) c = TS_AUG_MAX_CHANNELS;
  aug_lut_init(a, c, &t);
  aug_apply_lut(a, &t, src, c, h, w, key, dst);
}
