/* cifar10.c — the CIFAR-10 binary format: files of 3073-byte records (1 label
 * byte 0..9, then 3072 pixel bytes: the R, G and B planes of a 32x32 image,
 * rows top to bottom), read into an in-memory ts_dataset (c = 3).
 *
 * The format has no header, so a file is checked by its size (a whole number
 * of records) and its label bytes. Every error names the file and the byte
 * offset where the problem is (64-bit offsets). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> /* stat: is the directory layout the nested one? */

#include "util/error.h"
#include "tessel/loader.h"

#define CIFAR_PIXELS 3072 /* (3, 32, 32) */
#define CIFAR_CLASSES 10
/* Largest file accepted (the official ones are 30,730,000 bytes). */
#define CIFAR_MAX_BYTES ((int64_t)1 << 34)

int ts_cifar10_read_file(const char *path, ts_dataset *out) {
  if (!path || !out) return set_error("ts_cifar10_read_file: NULL argument");
  if (out->n > 0 && (out->c != 3 || out->h != 32 || out->w != 32))
    return set_error("%s: cannot append CIFAR-10 records to a dataset of %dx%dx%d images", path, out->c,
                        out->h, out->w);
  FILE *f = fopen(path, "rb");
  if (!f) return set_error_code(TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  uint8_t *buf = NULL;
  int64_t size = -1;
  if (fseeko(f, 0, SEEK_END) == 0) size = (int64_t)ftello(f);
  if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return set_error_code(TS_ERR_IO, "%s: cannot determine the file size: %s", path, strerror(errno));
  }
  if (size == 0) {
    fclose(f);
    return set_error_code(TS_ERR_IO,
                             "%s: empty file (offset 0): expected records of %d bytes", path, TS_CIFAR10_RECORD);
  }
  if (size > CIFAR_MAX_BYTES) {
    fclose(f);
    return set_error_code(TS_ERR_IO, "%s: %lld bytes is too large for a CIFAR-10 batch file", path, (long long)size);
  }
  if (size % TS_CIFAR10_RECORD != 0) {
    int64_t last = size - size % TS_CIFAR10_RECORD;
    fclose(f);
    return set_error_code(TS_ERR_IO,
                             "%s: truncated: %lld bytes is not a whole number of %d-byte records; the record "
                             "at offset %lld has only %lld bytes",
                             path, (long long)size, TS_CIFAR10_RECORD, (long long)last, (long long)(size - last));
  }
  if (!(buf = malloc((size_t)size))) {
    fclose(f);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld bytes", path, (long long)size);
  }
  size_t got = fread(buf, 1, (size_t)size, f);
  int read_err = ferror(f);
  fclose(f);
  if (got != (size_t)size) {
    free(buf);
    return set_error_code(TS_ERR_IO, "%s: read error at offset %lld%s", path, (long long)got,
                             read_err ? " (I/O error)" : " (file shrank while reading)");
  }
  int64_t recs = size / TS_CIFAR10_RECORD;
  for (int64_t r = 0; r < recs; r++) {
    uint8_t lab = buf[r * TS_CIFAR10_RECORD];
    if (lab >= CIFAR_CLASSES) {
      free(buf);
      return set_error_code(TS_ERR_IO,
                               "%s: label %d of record %lld (byte offset %lld) is out of range [0, %d); is this "
                               "the CIFAR-10 binary version (not CIFAR-100)?",
                               path, lab, (long long)r, (long long)(r * TS_CIFAR10_RECORD), CIFAR_CLASSES);
    }
  }
  int64_t n0 = out->n;
  uint8_t *images = realloc(out->images, (size_t)(n0 + recs) * CIFAR_PIXELS);
  if (images) out->images = images;
  int32_t *labels = images ? realloc(out->labels, (size_t)(n0 + recs) * sizeof *labels) : NULL;
  if (labels) out->labels = labels;
  if (!images || !labels) {
    free(buf);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld images", path, (long long)(n0 + recs));
  }
  for (int64_t r = 0; r < recs; r++) {
    const uint8_t *rec = buf + r * TS_CIFAR10_RECORD;
    labels[n0 + r] = rec[0];
    memcpy(images + (n0 + r) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS); // (3, 32, 32)
  }
  free(buf);
  out->n = n0 + recs;
  out->c = 3;
  out->h = 32;
  out->w = 32;
  out->num_classes = CIFAR_CLASSES;
  return 0;
}

int ts_cifar10_load(const char *dir, const char *split, ts_dataset *out) {
  if (!dir || !split || !out) return set_error("ts_cifar10_load: NULL argument");
  memset(out, 0, sizeof *out);
  bool train = strcmp(split, "train") == 0;
  if (!train && strcmp(split, "test") != 0)
    return set_error("ts_cifar10_load: split '%s' is not \"train\" or \"test\"", split);
  /* The official archive unpacks to cifar-10-batches-bin/: accept both. */
  char base[4096], path[4200];
  snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
  struct stat st;
  if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(base, sizeof base, "%s", dir);
  int nfiles = train ? 5 : 1;
  for (int k = 0; k < nfiles; k++) {
    if (train) snprintf(path, sizeof path, "%s/data_batch_%d.bin", base, k + 1);
    else snprintf(path, sizeof path, "%s/test_batch.bin", base);
    if (stat(path, &st) != 0 && errno != ENOENT) { /* there but unusable: a symlink loop, no permission */
      int e = errno;
      ts_dataset_free(out);
      return set_error("%s: %s", path, strerror(e));
    }
    if (stat(path, &st) != 0) {
      ts_dataset_free(out);
      return set_error_code(TS_ERR_IO, "%s: no such file; CIFAR-10 (binary version) expects data_batch_1..5.bin and "
                               "test_batch.bin in %s", path, dir);
    }
    if (ts_cifar10_read_file(path, out) != 0) {
      ts_dataset_free(out);
      return -1;
    }
  }
  return 0;
}
