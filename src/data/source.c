/* source.c — ts_source over an in-memory ts_dataset (IDX, CIFAR-10): sample i
 * is a copy of row i; reading is lock-free (the dataset is never written). */
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "tessel/loader.h"

static int dataset_get(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label) {
  const ts_dataset *d = s->ctx;
  if (i < 0 || i >= d->n)
    return set_error("%s: sample %lld out of range [0, %lld)", s->name, (long long)i, (long long)d->n);
  size_t sample = (size_t)d->c * (size_t)d->h * (size_t)d->w;
  memcpy(pixels, d->images + (size_t)i * sample, sample);
  *label = d->labels[i];
  return 0;
}

static void dataset_destroy(ts_source *s) {
  free((char *)s->name);
  free(s);
}

ts_source *ts_source_from_dataset(const ts_dataset *d, const char *name) {
  if (!d || !d->images || !d->labels || d->n <= 0) {
    set_error("ts_source_from_dataset: empty or NULL dataset");
    return NULL;
  }
  if (d->c < 1 || d->h < 1 || d->w < 1) {
    set_error("ts_source_from_dataset: bad image shape %dx%dx%d", d->c, d->h, d->w);
    return NULL;
  }
  ts_source *s = calloc(1, sizeof *s);
  char *nm = strdup(name ? name : "dataset");
  if (!s || !nm) {
    free(s);
    free(nm);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_source_from_dataset: out of memory");
    return NULL;
  }
  *s = (ts_source){.name = nm, .n = d->n, .c = d->c, .h = d->h, .w = d->w,
                   .num_classes = d->num_classes, .get = dataset_get, .destroy = dataset_destroy,
                   .ctx = (void *)d};
  return s;
}

void ts_source_free(ts_source *s) {
  if (s && s->destroy) s->destroy(s);
}
