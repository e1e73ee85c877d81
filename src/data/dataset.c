/* dataset.c — MNIST-format datasets in memory: loading an image/label file
 * pair, building normalized f32 batches, and the seeded shuffle used for
 * epoch order. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* access */

#include "util/error.h"
#include "util/prng.h" /* xoshiro256** for ts_shuffle */
#include "tessel/data.h"

#define MNIST_CLASSES 10

/* "<dir>/<split>-<kind>-idx<n>-ubyte.gz" if it exists, else the plain name. */
static void mnist_path(char *buf, size_t len, const char *dir, const char *split, const char *kind) {
  snprintf(buf, len, "%s/%s-%s.gz", dir, split, kind);
  if (access(buf, F_OK) == 0 || errno != ENOENT) return; /* there, or broken (a symlink loop): said on use */
  snprintf(buf, len, "%s/%s-%s", dir, split, kind);
}

int ts_mnist_load(const char *dir, const char *split, ts_dataset *out) {
  if (!dir || !split || !out) return set_error("ts_mnist_load: NULL argument");
  memset(out, 0, sizeof *out);
  char ipath[4096], lpath[4096];
  mnist_path(ipath, sizeof ipath, dir, split, "images-idx3-ubyte");
  mnist_path(lpath, sizeof lpath, dir, split, "labels-idx1-ubyte");
  if (access(ipath, F_OK) != 0 && errno != ENOENT) return set_error("%s: %s", ipath, strerror(errno));
  if (access(ipath, F_OK) != 0)
    return set_error_code(TS_ERR_IO, "%s: no such file (nor with .gz); is the dataset installed in %s? "
                             "(split is \"train\" or \"t10k\")", ipath, dir);

  int ind, lnd;
  int64_t idims[3], ldims[3];
  uint8_t *images = NULL, *labels = NULL;
  if (ts_idx_read(ipath, &ind, idims, &images) != 0) return -1;
  if (ind != 3) {
    free(images);
    return set_error_code(TS_ERR_IO,
                             "%s: expected an image file (3 dims: count, rows, cols) but it has %d dim(s)", ipath,
                             ind);
  }
  if (idims[1] > 1 << 15 || idims[2] > 1 << 15) {
    free(images);
    return set_error_code(TS_ERR_IO, "%s: image size %lldx%lld is not plausible", ipath, (long long)idims[1],
                             (long long)idims[2]);
  }
  if (ts_idx_read(lpath, &lnd, ldims, &labels) != 0) {
    free(images);
    return -1;
  }
  if (lnd != 1) {
    free(images);
    free(labels);
    return set_error_code(TS_ERR_IO, "%s: expected a label file (1 dim) but it has %d dims", lpath, lnd);
  }
  if (ldims[0] != idims[0]) {
    free(images);
    free(labels);
    return set_error_code(TS_ERR_IO, "%s has %lld images but %s has %lld labels", ipath, (long long)idims[0], lpath,
                             (long long)ldims[0]);
  }
  int32_t *lab = malloc((size_t)ldims[0] * sizeof *lab);
  if (!lab) {
    free(images);
    free(labels);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld labels", lpath, (long long)ldims[0]);
  }
  for (int64_t i = 0; i < ldims[0]; i++) {
    if (labels[i] >= MNIST_CLASSES) {
      set_error_code(TS_ERR_IO,
                        "%s: label %d at index %lld (byte offset %lld) is out of range [0, %d)", lpath, labels[i],
                        (long long)i, (long long)(8 + i), MNIST_CLASSES);
      free(images);
      free(labels);
      free(lab);
      return -1;
    }
    lab[i] = labels[i];
  }
  free(labels);
  out->n = idims[0];
  out->c = 1;
  out->h = (int)idims[1];
  out->w = (int)idims[2];
  out->num_classes = MNIST_CLASSES;
  out->images = images;
  out->labels = lab;
  return 0;
}

void ts_dataset_free(ts_dataset *d) {
  if (!d) return;
  free(d->images);
  free(d->labels);
  memset(d, 0, sizeof *d);
}

void ts_dataset_batch(const ts_dataset *d, const int64_t *order, int64_t first, int64_t count, float mean,
                      float std, float *x, int32_t *y) {
  int64_t sample = (int64_t)d->c * d->h * d->w;
  /* Evaluated exactly as torchvision's ToTensor + Normalize do (f32 divide by
   * 255, subtract, divide), once per byte value, so batches match PyTorch bit
   * for bit. */
  float lut[256];
  for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
  for (int64_t k = 0; k < count; k++) {
    int64_t s = order ? order[first + k] : first + k;
    const uint8_t *src = d->images + s * sample;
    if (x) {
      float *dst = x + k * sample; // (c, h, w) of sample k
      for (int64_t j = 0; j < sample; j++) dst[j] = lut[src[j]];
    }
    if (y) y[k] = d->labels[s];
  }
}

/* Fisher-Yates (Durstenfeld): for i = n-1 down to 1, swap order[i] with
 * order[j], j uniform in [0, i], drawn from xoshiro256** seeded by splitmix64
 * (util/prng.h) with rejection sampling, so every permutation is equally likely
 * and the result depends only on (n, seed). */
void ts_shuffle(int64_t *order, int64_t n, uint64_t seed) {
  ts_prng r;
  ts_prng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) order[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)ts_prng_below(&r, (uint64_t)i + 1);
    int64_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}
