/* test_datasets.c — the dataset side of the input pipeline: CIFAR-10 binary
 * files written to a temporary directory (round trip, both directory
 * layouts, each malformed-file error naming the file and the byte offset, a
 * seeded fuzz loop that must never crash), the IDX count check, the synthetic
 * ImageNet-shaped source (deterministic, learnable labels), and augmentation
 * against a step-by-step reference (pad, crop, flip, normalize). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> /* mkdir */
#include <unistd.h>   /* mkdtemp, unlink, rmdir */

#include "harness.h"
#include "util/prng.h"
#include "tessel/loader.h"
#include "tessel/tessel.h"

static char tmpdir[256];

static const char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_bytes(const char *path, const uint8_t *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(b, 1, n, f) != n)) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

/* nrec records: label (first_label + r) % 10, pixels from r. */
static uint8_t *cifar_records(int nrec, ts_prng *r, int first_label) {
  uint8_t *b = malloc((size_t)nrec * TS_CIFAR10_RECORD);
  for (int i = 0; i < nrec; i++) {
    b[i * TS_CIFAR10_RECORD] = (uint8_t)((first_label + i) % 10);
    for (int j = 1; j < TS_CIFAR10_RECORD; j++) b[i * TS_CIFAR10_RECORD + j] = (uint8_t)ts_prng_next(r);
  }
  return b;
}

static void check_fails(int rc, const char *path, const char *what, const char *label) {
  const char *e = ts_last_error();
  CHECK(rc == -1, "%s: expected an error", label);
  CHECK(strstr(e, path) != NULL, "%s: message does not name the file %s: '%s'", label, path, e);
  CHECK(strstr(e, what) != NULL, "%s: message lacks '%s': '%s'", label, what, e);
}

static void test_cifar_roundtrip(void) {
  ts_prng r;
  ts_prng_seed(&r, ts_test_seed);
  const int counts[5] = {3, 2, 1, 4, 2};
  uint8_t *all = malloc(12 * TS_CIFAR10_RECORD);
  int off = 0;
  /* Flat layout in tmpdir, nested layout in tmpdir/nested/cifar-10-batches-bin. */
  char nested[512], nested_bin[600];
  snprintf(nested, sizeof nested, "%s/nested", tmpdir);
  snprintf(nested_bin, sizeof nested_bin, "%s/cifar-10-batches-bin", nested);
  mkdir(nested, 0700);
  mkdir(nested_bin, 0700);
  for (int k = 0; k < 5; k++) {
    uint8_t *b = cifar_records(counts[k], &r, off);
    char name[64], p2[700];
    snprintf(name, sizeof name, "data_batch_%d.bin", k + 1);
    write_bytes(tpath(name), b, (size_t)counts[k] * TS_CIFAR10_RECORD);
    snprintf(p2, sizeof p2, "%s/%s", nested_bin, name);
    write_bytes(p2, b, (size_t)counts[k] * TS_CIFAR10_RECORD);
    memcpy(all + (size_t)off * TS_CIFAR10_RECORD, b, (size_t)counts[k] * TS_CIFAR10_RECORD);
    off += counts[k];
    free(b);
  }
  uint8_t *tb = cifar_records(3, &r, 7);
  write_bytes(tpath("test_batch.bin"), tb, 3 * TS_CIFAR10_RECORD);
  for (int layout = 0; layout < 2; layout++) {
    ts_dataset d;
    CHECK_OK(ts_cifar10_load(layout ? nested : tmpdir, "train", &d));
    CHECK(d.n == 12 && d.c == 3 && d.h == 32 && d.w == 32 && d.num_classes == 10, "train shape n=%lld %dx%dx%d",
          (long long)d.n, d.c, d.h, d.w);
    int bad = 0;
    for (int i = 0; i < 12 && d.n == 12; i++) {
      bad += d.labels[i] != all[i * TS_CIFAR10_RECORD];
      bad += memcmp(d.images + i * 3072, all + i * TS_CIFAR10_RECORD + 1, 3072) != 0;
    }
    CHECK(bad == 0, "layout %d: %d labels/images differ from the records written", layout, bad);
    ts_dataset_free(&d);
  }
  ts_dataset t;
  CHECK_OK(ts_cifar10_load(tmpdir, "test", &t));
  CHECK(t.n == 3 && t.labels[0] == 7 && t.labels[2] == 9 && memcmp(t.images + 3072, tb + TS_CIFAR10_RECORD + 1, 3072) == 0,
        "test split content");
  /* Through a source and the loader: the pixels arrive normalized per channel. */
  ts_source *s = ts_source_from_dataset(&t, "cifar10 test");
  ts_loader_options o = {.batch = 3, .no_shuffle = true, .augment = {.mean = TS_CIFAR10_MEAN, .std = TS_CIFAR10_STD}};
  ts_loader *l = ts_loader_new(s, &o);
  const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
  CHECK(b != NULL, "%s", ts_last_error());
  if (b) {
    const float *x;
    ts_batch_local_rows(b, NULL, &x, NULL, NULL);
    const float mean[3] = TS_CIFAR10_MEAN, std[3] = TS_CIFAR10_STD;
    int bad = 0;
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3072; j++) {
        int ch = j / 1024;
        float want = ((float)t.images[i * 3072 + j] / 255.0f - mean[ch]) / std[ch];
        bad += x[i * 3072 + j] != want;
      }
    CHECK(bad == 0, "%d normalized pixels differ", bad);
  }
  ts_loader_free(l);
  ts_source_free(s);
  ts_dataset_free(&t);
  free(tb);
  free(all);
  for (int k = 0; k < 5; k++) {
    char p2[700];
    snprintf(p2, sizeof p2, "%s/data_batch_%d.bin", nested_bin, k + 1);
    unlink(p2);
  }
  rmdir(nested_bin);
  rmdir(nested);
}

static void test_cifar_errors(void) {
  ts_prng r;
  ts_prng_seed(&r, ts_test_seed + 1);
  uint8_t *b = cifar_records(3, &r, 0);
  ts_dataset d = {0};
  const char *p = tpath("bad.bin");

  write_bytes(p, b, 2 * TS_CIFAR10_RECORD + 100);
  check_fails(ts_cifar10_read_file(p, &d), p, "the record at offset 6146 has only 100 bytes", "truncated");
  CHECK(strstr(ts_last_error(), "truncated"), "truncated: '%s'", ts_last_error());
  write_bytes(p, b, 0);
  check_fails(ts_cifar10_read_file(p, &d), p, "empty file", "empty");
  b[TS_CIFAR10_RECORD] = 10;
  write_bytes(p, b, 3 * TS_CIFAR10_RECORD);
  check_fails(ts_cifar10_read_file(p, &d), p, "label 10 of record 1 (byte offset 3073) is out of range",
              "label out of range");
  CHECK(d.n == 0 && d.images == NULL, "a failed read leaves the dataset untouched");
  check_fails(ts_cifar10_read_file(tpath("missing.bin"), &d), tpath("missing.bin"), "cannot open", "missing");
  char empty_dir[600];
  snprintf(empty_dir, sizeof empty_dir, "%s/empty", tmpdir);
  mkdir(empty_dir, 0700);
  check_fails(ts_cifar10_load(empty_dir, "train", &d), "data_batch_1.bin", "no such file", "no data dir");
  CHECK(ts_cifar10_load(tmpdir, "validation", &d) == -1 && strstr(ts_last_error(), "'validation'"),
        "bad split: '%s'", ts_last_error());
  rmdir(empty_dir);
  unlink(p);
  free(b);
}

/* Truncations, byte flips, label corruption and appended bytes, thousands of
 * times: each read either succeeds with exactly the file's records or fails
 * naming the file. */
static void test_cifar_fuzz(void) {
  ts_prng r;
  ts_prng_seed(&r, ts_test_seed + 2);
  const int NREC = 2;
  uint8_t *good = cifar_records(NREC, &r, 3);
  size_t glen = (size_t)NREC * TS_CIFAR10_RECORD;
  uint8_t *buf = malloc(glen + 4 * TS_CIFAR10_RECORD);
  const char *p = tpath("fuzz.bin");
  int ok = 0, failed = 0, wrong = 0;
  for (int it = 0; it < 3000; it++) {
    size_t len = glen;
    memcpy(buf, good, glen);
    switch (ts_prng_below(&r, 4)) {
    case 0: len = (size_t)ts_prng_below(&r, glen + 1); break;
    case 1:
      for (int k = 0; k < 4; k++) buf[ts_prng_below(&r, glen)] ^= (uint8_t)(1u << ts_prng_below(&r, 8));
      break;
    case 2: buf[TS_CIFAR10_RECORD * ts_prng_below(&r, NREC)] = (uint8_t)ts_prng_below(&r, 256); break;
    default: {
      size_t extra = (size_t)ts_prng_below(&r, 3 * TS_CIFAR10_RECORD + 1);
      for (size_t k = 0; k < extra; k++) buf[glen + k] = (uint8_t)ts_prng_next(&r);
      len += extra;
    }
    }
    write_bytes(p, buf, len);
    ts_dataset d = {0};
    int rc = ts_cifar10_read_file(p, &d);
    if (rc == 0) {
      ok++;
      bool good_read = len % TS_CIFAR10_RECORD == 0 && d.n == (int64_t)(len / TS_CIFAR10_RECORD);
      for (int64_t i = 0; good_read && i < d.n; i++)
        good_read = d.labels[i] == buf[i * TS_CIFAR10_RECORD] && d.labels[i] < 10 &&
                    memcmp(d.images + i * 3072, buf + i * TS_CIFAR10_RECORD + 1, 3072) == 0;
      wrong += !good_read;
    } else {
      failed++;
      wrong += strstr(ts_last_error(), p) == NULL || strstr(ts_last_error(), "offset") == NULL;
    }
    ts_dataset_free(&d);
  }
  CHECK(wrong == 0, "fuzz: %d of 3000 reads returned wrong data or an error without file and offset", wrong);
  CHECK(ok > 100 && failed > 100, "fuzz: %d reads succeeded, %d failed (both kinds expected)", ok, failed);
  unlink(p);
  free(buf);
  free(good);
}

/* IDX images and labels whose counts differ: the error names both files. */
static void test_idx_counts(void) {
  uint8_t img[4 + 12 + 3 * 4] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
  uint8_t lab[4 + 4 + 2] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 2};
  write_bytes(tpath("train-images-idx3-ubyte"), img, sizeof img);
  write_bytes(tpath("train-labels-idx1-ubyte"), lab, sizeof lab);
  ts_dataset d;
  int rc = ts_mnist_load(tmpdir, "train", &d);
  check_fails(rc, tpath("train-labels-idx1-ubyte"), "has 3 images", "image count != label count");
  CHECK(strstr(ts_last_error(), "2 labels"), "'%s'", ts_last_error());
  unlink(tpath("train-images-idx3-ubyte"));
  unlink(tpath("train-labels-idx1-ubyte"));
}

static void test_synthetic(void) {
  ts_source *a = ts_source_synthetic(400, 3, 16, 16, 10, 42), *b = ts_source_synthetic(400, 3, 16, 16, 10, 42);
  ts_source *c = ts_source_synthetic(400, 3, 16, 16, 10, 43);
  CHECK(a && b && c, "%s", ts_last_error());
  uint8_t pa[768], pb[768], pc[768];
  int32_t la, lb, lc;
  int same = 0, differ = 0, counts[10] = {0};
  double centroid[10][3] = {{0}};
  double feat[400][3];
  int32_t labels[400];
  for (int64_t i = 0; i < 400; i++) {
    CHECK_OK(a->get(a, i, pa, &la));
    b->get(b, i, pb, &lb);
    c->get(c, i, pc, &lc);
    same += la == lb && memcmp(pa, pb, sizeof pa) == 0;
    differ += memcmp(pa, pc, sizeof pa) != 0;
    CHECK(la >= 0 && la < 10, "label %d", la);
    labels[i] = la;
    for (int ch = 0; ch < 3; ch++) {
      double s = 0;
      for (int j = 0; j < 256; j++) s += pa[ch * 256 + j];
      feat[i][ch] = s / 256;
      if (i < 200) centroid[la][ch] += feat[i][ch];
    }
    if (i < 200) counts[la]++;
  }
  CHECK(same == 400 && differ == 400, "determinism: %d same with seed 42, %d differ with seed 43", same, differ);
  int classes = 0;
  for (int k = 0; k < 10; k++) classes += counts[k] > 0;
  CHECK(classes == 10, "only %d classes in 200 samples", classes);
  /* Learnable: nearest class-mean colour on held-out samples. */
  int correct = 0;
  for (int k = 0; k < 10; k++)
    for (int ch = 0; ch < 3; ch++) centroid[k][ch] /= counts[k] ? counts[k] : 1;
  for (int i = 200; i < 400; i++) {
    int best = 0;
    double bd = INFINITY;
    for (int k = 0; k < 10; k++) {
      double dd = 0;
      for (int ch = 0; ch < 3; ch++) dd += (feat[i][ch] - centroid[k][ch]) * (feat[i][ch] - centroid[k][ch]);
      if (counts[k] && dd < bd) bd = dd, best = k;
    }
    correct += best == labels[i];
  }
  CHECK(correct >= 180, "nearest class mean classifies %d of 200 held-out samples", correct);
  CHECK(a->get(a, 400, pa, &la) == -1 && strstr(ts_last_error(), "400"), "out of range: '%s'", ts_last_error());
  CHECK(ts_source_synthetic(0, 3, 224, 224, 1000, 1) == NULL, "n = 0 accepted");
  ts_source *big = ts_source_synthetic(1281167, 3, 224, 224, 1000, 1);
  uint8_t *pix = malloc(3 * 224 * 224);
  CHECK(big && big->get(big, 1281166, pix, &la) == 0 && la < 1000, "ImageNet-shaped sample");
  free(pix);
  ts_source_free(big);
  ts_source_free(a);
  ts_source_free(b);
  ts_source_free(c);
}

/* Step-by-step reference: pad with zeros, crop at (dy, dx), flip, normalize. */
static void augment_reference(const ts_augment *a, const uint8_t *src, int c, int h, int w, uint64_t key,
                              float *dst) {
  int dy, dx;
  bool flip;
  ts_augment_draw(a, key, &dy, &dx, &flip);
  int p = a->crop_pad, ph = h + 2 * p, pw = w + 2 * p;
  uint8_t *padded = calloc((size_t)c * ph * pw, 1), *crop = malloc((size_t)c * h * w);
  for (int ch = 0; ch < c; ch++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) padded[(ch * ph + y + p) * pw + x + p] = src[(ch * h + y) * w + x];
  for (int ch = 0; ch < c; ch++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) crop[(ch * h + y) * w + x] = padded[(ch * ph + y + dy) * pw + x + dx];
  for (int ch = 0; ch < c; ch++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        uint8_t v = crop[(ch * h + y) * w + (flip ? w - 1 - x : x)];
        float sd = a->std[ch] != 0.0f ? a->std[ch] : 1.0f;
        dst[(ch * h + y) * w + x] = ((float)v / 255.0f - a->mean[ch]) / sd;
      }
  free(padded);
  free(crop);
}

static void test_augment(void) {
  ts_prng r;
  ts_prng_seed(&r, ts_test_seed + 3);
  const int shapes[][4] = {{1, 28, 28, 4}, {3, 32, 32, 4}, {3, 5, 7, 6}, {2, 9, 4, 0}, {4, 6, 6, 1}};
  int bad = 0, offsets[13] = {0}, flips = 0, draws = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int c = shapes[s][0], h = shapes[s][1], w = shapes[s][2];
    ts_augment a = {.crop_pad = shapes[s][3], .hflip = true, .mean = {0.1f, 0.2f, 0.3f, 0.4f},
                    .std = {0.5f, 0.25f, 0.0f, 2.0f}};
    uint8_t *src = malloc((size_t)c * h * w);
    float *got = malloc((size_t)c * h * w * sizeof *got), *want = malloc((size_t)c * h * w * sizeof *want);
    for (int it = 0; it < 200; it++) {
      for (int j = 0; j < c * h * w; j++) src[j] = (uint8_t)ts_prng_next(&r);
      uint64_t key = ts_prng_next(&r);
      ts_augment_apply(&a, src, c, h, w, key, got);
      augment_reference(&a, src, c, h, w, key, want);
      bad += memcmp(got, want, (size_t)c * h * w * sizeof *got) != 0;
      if (a.crop_pad == 6) {
        int dy, dx;
        bool f;
        ts_augment_draw(&a, key, &dy, &dx, &f);
        offsets[dy]++, offsets[dx]++, flips += f, draws++;
      }
    }
    free(src);
    free(got);
    free(want);
  }
  CHECK(bad == 0, "%d augmented samples differ from pad + crop + flip + normalize", bad);
  int missing = 0;
  for (int k = 0; k < 13; k++) missing += offsets[k] == 0;
  CHECK(missing == 0, "%d crop offsets of 0..12 never drawn", missing);
  CHECK(flips > draws * 3 / 10 && flips < draws * 7 / 10, "%d flips in %d draws", flips, draws);
  ts_augment noflip = {.crop_pad = 0};
  int any = 0;
  for (uint64_t k = 0; k < 100; k++) {
    int dy, dx;
    bool f;
    ts_augment_draw(&noflip, k, &dy, &dx, &f);
    any += f || dy || dx;
  }
  CHECK(any == 0, "no crop, no flip: %d draws changed the image", any);
}

int main(void) {
  ts_test_init("datasets", 11);
  /* tmpfs when there is one: the fuzz loop writes 3000 files. */
  snprintf(tmpdir, sizeof tmpdir, "%s/tessel_datasets_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  if (!mkdtemp(tmpdir)) return 2;
  test_cifar_roundtrip();
  test_cifar_errors();
  test_cifar_fuzz();
  test_idx_counts();
  test_synthetic();
  test_augment();
  for (int k = 1; k <= 5; k++) {
    char name[64];
    snprintf(name, sizeof name, "data_batch_%d.bin", k);
    unlink(tpath(name));
  }
  unlink(tpath("test_batch.bin"));
  rmdir(tmpdir);
  return ts_test_finish();
}
