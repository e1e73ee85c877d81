/* tessel/data.h — datasets.
 *
 * IDX files (MNIST, Fashion-MNIST), gzipped or not. Errors name the file and
 * what is wrong with it (wrong magic, truncated, counts that disagree). */
#ifndef TESSEL_DATA_H
#define TESSEL_DATA_H

#include "tessel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

/* Directory of Debian's dataset-fashion-mnist package. */
#define TS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* An image-classification dataset held in memory. */
typedef struct {
  int64_t n;               /* samples */
  int c, h, w;             /* image shape */
  int num_classes;
  uint8_t *images;         /* (n, c, h, w) */
  int32_t *labels;         /* (n) */
} ts_dataset;

/* Reads one IDX file (magic 0x0801 u8 vectors or 0x0803 u8 images; ".gz"
 * detected from the content). *dims gets the dims (up to 3), *data is
 * malloc'd (the caller frees it). File problems are TS_ERR_IO. */
int ts_idx_read(const char *path, int *ndim, int64_t dims[3], uint8_t **data);

/* Loads "<dir>/<split>-images-idx3-ubyte[.gz]" and "<dir>/<split>-labels-idx1-ubyte[.gz]"
 * where split is "train" or "t10k". *out's arrays are the caller's:
 * ts_dataset_free. A missing, unreadable or malformed file is TS_ERR_IO. */
int ts_mnist_load(const char *dir, const char *split, ts_dataset *out);
void ts_dataset_free(ts_dataset *d);

/* Fills x (count, c, h, w) f32 with (pixel/255 - mean)/std and y (count) with
 * labels, for samples order[first .. first+count). order NULL = identity. */
void ts_dataset_batch(const ts_dataset *d, const int64_t *order, int64_t first, int64_t count,
                      float mean, float std, float *x, int32_t *y);

/* Fisher-Yates permutation of 0..n-1 from seed (deterministic). */
void ts_shuffle(int64_t *order, int64_t n, uint64_t seed);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
