/* data_internal.h — helpers shared by the data/ files (not public). */
#ifndef TS_DATA_INTERNAL_H
#define TS_DATA_INTERNAL_H

#include "tessel/loader.h"

/* Per-channel lookup tables: lut[ch][v] = (v/255 - mean[ch]) / std[ch],
 * computed as torchvision's ToTensor + Normalize do (f32). */
typedef struct {
  float lut[TS_AUG_MAX_CHANNELS][256];
} ts_aug_lut;

void aug_lut_init(const ts_augment *a, int c, ts_aug_lut *out);
/* ts_augment_apply with precomputed tables. */
void aug_apply_lut(const ts_augment *a, const ts_aug_lut *t, const uint8_t *src, int c, int h, int w,
                      uint64_t key, float *dst);

#endif
