/* test_imagefolder.c — ImageFolder datasets (tessel/imagefolder.h) on
 * generated files (tests/imagefolder_ref.py writes them with PIL, and the
 * reference results):
 *   - class discovery and order (names that sort subtly, nested folders,
 *     a file without an image extension ignored) equal to torchvision's
 *     make_dataset order;
 *   - decoding (JPEG 4:2:0/4:4:4/progressive/grey, PNG RGB/RGBA/grey/palette
 *     with transparency/16-bit) equal to PIL's convert("RGB") (16-bit grey:
 *     the high byte, where PIL would clamp);
 *   - the validation transform (Resize + CenterCrop) and crop + resize of
 *     RandomResizedCrop boxes equal to PIL's bilinear resize;
 *   - RandomResizedCrop's boxes: deterministic per key, inside the image,
 *     area and aspect ratio in torchvision's ranges, the center-crop fallback;
 *   - bad files: truncated JPEG and PNG, a text file named .jpg, a PNG named
 *     .jpg (decodes), an empty file, an empty class folder; --skip-bad-files'
 *     replacement and count;
 *   - the loader over an ImageFolder: the same batches with 1 and 3 workers,
 *     a resume mid-epoch replays the same batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tessel/imagefolder.h"
#include "tessel/tessel.h"

static char tmp[256];
static const int S = 24, RESIZE = 27;

static const char *path(const char *fmt, const char *a) {
  static char buf[4][1024];
  static int k;
  k = (k + 1) % 4;
  char rel[512];
  snprintf(rel, sizeof rel, fmt, a);
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, rel);
  return buf[k];
}

static uint8_t *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static void spit(const char *p, const void *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(b, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", p);
    exit(2);
  }
  fclose(f);
}

static int run(const char *cmd) {
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
  return rc;
}

/* Max |a - b| over n bytes. */
static int maxdiff(const uint8_t *a, const uint8_t *b, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)a[i] - (int)b[i]);
    if (d > m) m = d;
  }
  return m;
}

static void test_reference(void) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/imagefolder_ref.py tree %s/tree", TS_SOURCE_DIR, tmp);
  if (run(cmd) != 0) {
    CHECK(0, "generating the tree failed");
    return;
  }
  ts_imagefolder_options o = {.size = S, .train = true};
  ts_source *s = ts_imagefolder_open(path("%s", "tree"), "train", &o);
  CHECK(s != NULL, "%s", ts_last_error());
  if (!s) return;
  CHECK(s->num_classes == 5 && s->c == 3 && s->h == S && s->w == S, "classes %d shape %d %d %d", s->num_classes, s->c,
        s->h, s->w);
  const char *want[] = {"A", "a", "a b", "a-b", "b"};
  for (int k = 0; k < 5 && k < s->num_classes; k++)
    CHECK(strcmp(ts_imagefolder_class(s, k), want[k]) == 0, "class %d is '%s', want '%s'", k,
          ts_imagefolder_class(s, k), want[k]);
  CHECK(ts_imagefolder_ignored_files(s) == 1, "ignored %lld files, want 1 (notes.txt)",
        (long long)ts_imagefolder_ignored_files(s));
  /* the boxes this C code draws, cropped and resized by PIL */
  FILE *bf = fopen(path("%s", "boxes.txt"), "w");
  for (int64_t i = 0; i < s->n; i++) {
    uint8_t *rgb;
    int h, w, box[4];
    char p[1024];
    snprintf(p, sizeof p, "%s/tree/train/%s", tmp, ts_imagefolder_path(s, i));
    if (ts_image_read(p, &rgb, &h, &w) < 0) {
      CHECK(0, "%s", ts_last_error());
      fprintf(bf, "0 0 1 1\n");
      continue;
    }
    ts_random_resized_crop_box(h, w, 1000 + (uint64_t)i, NULL, NULL, box);
    fprintf(bf, "%d %d %d %d\n", box[0], box[1], box[2], box[3]);
    free(rgb);
  }
  fclose(bf);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/imagefolder_ref.py ref %s/tree train %d %d %s/boxes.txt %s/ref",
           TS_SOURCE_DIR, tmp, S, RESIZE, tmp, tmp);
  if (run(cmd) != 0) {
    CHECK(0, "the reference failed");
    ts_source_free(s);
    return;
  }
  FILE *lf = fopen(path("%s", "ref/listing.txt"), "r");
  int64_t i = 0;
  char line[1024];
  ts_imagefolder_options vo = {.size = S, .resize = RESIZE};
  ts_source *val = ts_imagefolder_open(path("%s", "tree"), "train", &vo); /* the val transform on the same files */
  CHECK(val != NULL, "%s", ts_last_error());
  while (lf && val && fgets(line, sizeof line, lf)) {
    int k;
    char rel[900];
    line[strcspn(line, "\n")] = 0;
    if (sscanf(line, "%d %[^\n]", &k, rel) != 2) break;
    CHECK(i < s->n, "more files in the reference than in the listing");
    if (i >= s->n) break;
    CHECK(strcmp(ts_imagefolder_path(s, i), rel) == 0, "file %lld is '%s', want '%s'", (long long)i,
          ts_imagefolder_path(s, i), rel);
    uint8_t *rgb = NULL, *u8 = malloc((size_t)3 * S * S);
    int32_t label = -1;
    int h = 0, w = 0;
    char p[2048], nm[64];
    snprintf(p, sizeof p, "%s/tree/train/%s", tmp, rel);
    CHECK_OK(ts_image_read(p, &rgb, &h, &w));
    snprintf(nm, sizeof nm, "ref/dec_%lld.raw", (long long)i);
    size_t n = 0;
    uint8_t *ref = slurp(path("%s", nm), &n);
    CHECK(ref && rgb && n == (size_t)h * w * 3, "%s: decoded %dx%d, PIL %zu bytes", rel, w, h, n);
    if (ref && rgb && n == (size_t)h * w * 3)
      CHECK(maxdiff(ref, rgb, n) == 0, "%s: decode differs from PIL's by up to %d", rel, maxdiff(ref, rgb, n));
    free(ref);
    /* validation transform through the source */
    CHECK_OK(val->get(val, i, u8, &label));
    CHECK(label == k, "%s: label %d, want %d", rel, label, k);
    snprintf(nm, sizeof nm, "ref/val_%lld.raw", (long long)i);
    ref = slurp(path("%s", nm), &n);
    CHECK(ref && n == (size_t)3 * S * S, "%s: no val reference", rel);
    if (ref && n == (size_t)3 * S * S)
      CHECK(maxdiff(ref, u8, n) == 0, "%s: resize+center crop differs from PIL's by up to %d", rel,
            maxdiff(ref, u8, n));
    free(ref);
    /* crop + resize of the box */
    int box[4];
    ts_random_resized_crop_box(h, w, 1000 + (uint64_t)i, NULL, NULL, box);
    CHECK_OK(ts_image_resample(rgb, h, w, box[0], box[1], box[2], box[3], S, S, 0, 0, S, S, u8));
    snprintf(nm, sizeof nm, "ref/crop_%lld.raw", (long long)i);
    ref = slurp(path("%s", nm), &n);
    if (ref && n == (size_t)3 * S * S)
      CHECK(maxdiff(ref, u8, n) == 0, "%s: crop %d,%d %dx%d + resize differs from PIL's by up to %d", rel, box[0],
            box[1], box[2], box[3], maxdiff(ref, u8, n));
    else
      CHECK(0, "%s: no crop reference", rel);
    free(ref);
    /* the training sample: deterministic per key, and keys differ */
    uint8_t *a = malloc((size_t)3 * S * S), *b = malloc((size_t)3 * S * S);
    CHECK_OK(s->get_keyed(s, i, 77, a, &label));
    CHECK_OK(s->get_keyed(s, i, 77, b, &label));
    CHECK(memcmp(a, b, (size_t)3 * S * S) == 0, "%s: the same key gave different crops", rel);
    free(a), free(b), free(rgb), free(u8);
    i++;
  }
  CHECK(i == s->n, "reference lists %lld files, tessel %lld", (long long)i, (long long)s->n);
  if (lf) fclose(lf);
  /* hash: equal for an equal listing, different after a file changes */
  ts_source *again = ts_imagefolder_open(path("%s", "tree"), "train", &o);
  CHECK(again && ts_imagefolder_hash(again) == ts_imagefolder_hash(s), "the hash of the same tree differs");
  ts_source_free(again);
  spit(path("%s", "tree/train/b/z.jpg"), "x", 1);
  again = ts_imagefolder_open(path("%s", "tree"), "train", &o);
  CHECK(again && ts_imagefolder_hash(again) != ts_imagefolder_hash(s), "a changed file size kept the hash");
  ts_source_free(again);
  ts_source_free(val);
  ts_source_free(s);
}

static void test_crop_boxes(void) {
  const int shapes[][2] = {{224, 224}, {375, 500}, {500, 333}, {64, 48}, {10, 300}, {300, 10}, {9, 9}};
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
    int h = shapes[k][0], w = shapes[k][1], fallback = 0;
    for (uint64_t key = 0; key < 2000; key++) {
      int b[4], c[4];
      int att = ts_random_resized_crop_box(h, w, key, NULL, NULL, b);
      ts_random_resized_crop_box(h, w, key, NULL, NULL, c);
      CHECK(memcmp(b, c, sizeof b) == 0, "key %llu: two different boxes", (unsigned long long)key);
      CHECK(b[0] >= 0 && b[1] >= 0 && b[2] >= 1 && b[3] >= 1 && b[0] + b[2] <= w && b[1] + b[3] <= h,
            "%dx%d: box %d,%d %dx%d outside", w, h, b[0], b[1], b[2], b[3]);
      if (att == 10) {
        fallback++;
        continue;
      }
      /* rounding of w and h to integers moves area and ratio a little */
      double area = (double)b[2] * b[3] / ((double)h * w), ratio = (double)b[2] / b[3];
      double tol_r = 1.0 / b[3] + 1.0 / b[2];
      CHECK(area >= 0.08 * (1 - 2 * tol_r) - 1e-9 && area <= 1.0 + 1e-9, "%dx%d: area fraction %g", w, h, area);
      CHECK(ratio >= 0.75 * (1 - tol_r) && ratio <= 4.0 / 3 * (1 + tol_r), "%dx%d: ratio %g (box %dx%d)", w, h, ratio,
            b[2], b[3]);
    }
    if (h == 10 && w == 300) { /* no 3/4..4/3 box of >= 8% fits: always the fallback, the 4/3 center crop */
      int b[4];
      CHECK(fallback == 2000, "10x300: %d fallbacks of 2000", fallback);
      ts_random_resized_crop_box(h, w, 1, NULL, NULL, b);
      CHECK(b[2] == 13 && b[3] == 10 && b[0] == (300 - 13) / 2 && b[1] == 0, "fallback box %d,%d %dx%d", b[0], b[1],
            b[2], b[3]);
    }
    if (h == 224 && w == 224) CHECK(fallback < 20, "224x224: %d fallbacks of 2000", fallback);
  }
}

/* A small tree written here with the library's own decoders' counterparts. */
static void make_small_tree(const char *root, int classes, int per_class) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/make_imagefolder.py %s --classes %d --train %d --val 2 "
                            "--size 20x16 --vary",
           TS_SOURCE_DIR, root, classes, per_class);
  CHECK(run(cmd) == 0, "make_imagefolder.py failed");
}

static void expect_error(const char *file, const char *what, const char *label) {
  uint8_t *rgb = NULL;
  int h, w;
  int rc = ts_image_read(file, &rgb, &h, &w);
  const char *e = ts_last_error();
  CHECK(rc == -1 && rgb == NULL, "%s: decoded", label);
  CHECK(strstr(e, file) != NULL && strstr(e, what) != NULL, "%s: message '%s' lacks the file or '%s'", label, e,
        what);
  CHECK(ts_last_error_code() == TS_ERR_IO, "%s: code %d", label, (int)ts_last_error_code());
  free(rgb);
}

static void test_bad_files(void) {
  const char *root = path("%s", "bad");
  make_small_tree(root, 2, 4);
  char p[1024];
  size_t n;
  /* truncated JPEG and PNG, garbage named .jpg, a PNG named .jpg, empty */
  snprintf(p, sizeof p, "%s/train/class_00/img_0000.jpg", root);
  uint8_t *jpg = slurp(p, &n);
  snprintf(p, sizeof p, "%s/train/class_00/img_0001.jpg", root);
  spit(p, jpg, n * 2 / 3);
  expect_error(p, "truncated", "truncated JPEG");
  spit(path("%s", "cut.jpg"), jpg, n - 40); /* inside the entropy-coded data: libjpeg's warning */
  expect_error(path("%s", "cut.jpg"), "truncated or damaged", "JPEG cut in its pixels");
  snprintf(p, sizeof p, "%s/train/class_00/img_0003.png", root);
  uint8_t *png = slurp(p, &n);
  snprintf(p, sizeof p, "%s/train/class_01/img_0003.png", root);
  spit(p, png, n - 20);
  expect_error(p, "truncated", "truncated PNG");
  snprintf(p, sizeof p, "%s/train/class_01/img_0000.jpg", root);
  spit(p, "hello, not an image\n", 20);
  expect_error(p, "not a JPEG or PNG", "text named .jpg");
  snprintf(p, sizeof p, "%s/train/class_01/img_0001.jpg", root);
  spit(p, png, n);
  uint8_t *rgb = NULL;
  int h, w;
  CHECK(ts_image_read(p, &rgb, &h, &w) == 0 && h > 0, "a PNG named .jpg: %s", ts_last_error());
  free(rgb);
  snprintf(p, sizeof p, "%s/train/class_01/img_0002.jpg", root);
  spit(p, "", 0);
  expect_error(p, "empty", "empty file");
  free(jpg), free(png);

  /* strict: the loader's error names the file */
  ts_imagefolder_options o = {.size = 16, .train = true};
  ts_source *s = ts_imagefolder_open(root, "train", &o);
  CHECK(s && s->n == 8, "%s", ts_last_error());
  if (s) {
    ts_loader_options lo = {.batch = 8, .workers = 2, .no_shuffle = true};
    ts_loader *l = ts_loader_new(s, &lo);
    const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
    CHECK(!b && strstr(ts_last_error(), "class_00/img_0001.jpg") && strstr(ts_last_error(), "truncated"),
          "strict: '%s'", ts_last_error());
    CHECK(ts_last_error_code() == TS_ERR_IO, "strict: code %d", (int)ts_last_error_code());
    ts_loader_free(l);
    ts_source_free(s);
  }
  /* skip: each bad file replaced by the next readable one, counted once
   * (the validation transform: the same pixels whatever the key) */
  o.skip_bad_files = true;
  o.train = false;
  s = ts_imagefolder_open(root, "train", &o);
  if (s) {
    ts_loader_options lo = {.batch = 8, .workers = 2, .no_shuffle = true};
    ts_loader *l = ts_loader_new(s, &lo);
    for (int e = 0; e < 2 && l; e++) {
      const ts_loader_batch *b = ts_loader_next(l);
      CHECK(b != NULL, "skip: %s", ts_last_error());
      if (!b) break;
      const int32_t *y;
      const float *x;
      int64_t start;
      ts_batch_local_rows(b, &start, &x, &y, NULL);
      /* files: c0: 0 ok, 1 bad, 2 ok, 3 ok(png); c1: 0 bad, 1 ok (png as jpg), 2 bad (empty), 3 bad (cut png) */
      const int32_t want_y[8] = {0, 0, 0, 0, 1, 1, 0, 0};
      for (int r = 0; r < 8; r++) CHECK(y[r] == want_y[r], "skip: row %d label %d, want %d", r, y[r], want_y[r]);
      /* row 1 (bad) is row 2's image, row 4 row 5's; rows 6 and 7 wrap around to row 0's */
      const size_t sample = 3 * 16 * 16;
      const int same[4][2] = {{1, 2}, {4, 5}, {6, 0}, {7, 0}};
      for (int k = 0; k < 4; k++)
        CHECK(memcmp(x + same[k][0] * sample, x + same[k][1] * sample, sample * sizeof *x) == 0,
              "skip: row %d is not row %d's image", same[k][0], same[k][1]);
    }
    CHECK(ts_imagefolder_bad_files(s) == 4, "skip: %lld bad files counted, want 4",
          (long long)ts_imagefolder_bad_files(s));
    const char *m0 = ts_imagefolder_bad_file(s, 0);
    CHECK(m0 && strstr(m0, "/train/class_0"), "skip: first message '%s'", m0 ? m0 : "(null)");
    CHECK(ts_imagefolder_bad_file(s, 4) == NULL, "skip: a fifth message");
    ts_loader_free(l);
    ts_source_free(s);
  }
  /* an empty class folder; a missing split; no class folders */
  snprintf(p, sizeof p, "%s/train/class_99", root);
  mkdir(p, 0755);
  s = ts_imagefolder_open(root, "train", &o);
  CHECK(!s && strstr(ts_last_error(), "class_99") && strstr(ts_last_error(), "without"), "empty class: '%s'",
        ts_last_error());
  s = ts_imagefolder_open(root, "test", &o);
  CHECK(!s && strstr(ts_last_error(), "/test") && ts_last_error_code() == TS_ERR_IO, "missing split: '%s'",
        ts_last_error());
  snprintf(p, sizeof p, "%s/noclasses/train", root);
  mkdir(path("%s", "bad/noclasses"), 0755);
  mkdir(p, 0755);
  s = ts_imagefolder_open(path("%s", "bad/noclasses"), "train", &o);
  CHECK(!s && strstr(ts_last_error(), "no class folders"), "no classes: '%s'", ts_last_error());
}

/* Every float of every row of batches [0, nb) of two loaders equal. */
static void same_batches(ts_loader *a, ts_loader *b, int nb, int64_t sample, const char *what) {
  for (int k = 0; k < nb; k++) {
    const ts_loader_batch *ba = ts_loader_next(a);
    const float *xa, *xb;
    const int32_t *ya, *yb;
    int64_t s0, rows;
    if (!ba) {
      CHECK(0, "%s: %s", what, ts_last_error());
      return;
    }
    rows = ts_batch_local_rows(ba, &s0, &xa, &ya, NULL);
    float *copy = malloc((size_t)(rows * sample) * sizeof *copy);
    int32_t ycopy[64];
    memcpy(copy, xa, (size_t)(rows * sample) * sizeof *copy);
    memcpy(ycopy, ya, (size_t)rows * sizeof *ya);
    int64_t ea = ts_batch_epoch(ba), sa = ts_batch_step(ba);
    const ts_loader_batch *bb = ts_loader_next(b);
    if (!bb) {
      CHECK(0, "%s: %s", what, ts_last_error());
      free(copy);
      return;
    }
    ts_batch_local_rows(bb, &s0, &xb, &yb, NULL);
    CHECK(ea == ts_batch_epoch(bb) && sa == ts_batch_step(bb), "%s: batch %d positions differ", what, k);
    CHECK(memcmp(copy, xb, (size_t)(rows * sample) * sizeof *copy) == 0 &&
              memcmp(ycopy, yb, (size_t)rows * sizeof *yb) == 0,
          "%s: batch %d (epoch %lld step %lld) differs", what, k, (long long)ea, (long long)sa);
    free(copy);
  }
}

static void test_loader(void) {
  const char *root = path("%s", "good");
  make_small_tree(root, 3, 5); /* 15 training files of varied sizes */
  ts_imagefolder_options o = {.size = 16, .train = true};
  ts_source *s = ts_imagefolder_open(root, "train", &o);
  CHECK(s && s->n == 15 && s->num_classes == 3, "%s", ts_last_error());
  if (!s) return;
  ts_augment aug = {.hflip = true, .mean = TS_IMAGENET_MEAN, .std = TS_IMAGENET_STD};
  ts_loader_options one = {.batch = 4, .workers = 1, .seed = 9, .augment = aug}, three = one;
  three.workers = 3;
  ts_loader *a = ts_loader_new(s, &one), *b = ts_loader_new(s, &three);
  CHECK(a && b, "%s", ts_last_error());
  const int64_t sample = 3 * 16 * 16;
  if (a && b) same_batches(a, b, 7, sample, "1 vs 3 workers"); /* 3 per epoch: into epoch 2 */
  /* resume mid-epoch: state after 4 batches (epoch 1, step 1) */
  uint8_t st[TS_LOADER_STATE_BYTES];
  CHECK_OK(ts_loader_save(a, st));
  ts_loader *c = ts_loader_new(s, &three);
  CHECK(c && ts_loader_restore(c, st) == 0, "%s", ts_last_error());
  if (a && c) same_batches(a, c, 4, sample, "resumed");
  /* the crops change with the epoch: sample 0 of epochs 0 and 1 differs */
  uint8_t p0[3 * 16 * 16], p1[3 * 16 * 16];
  int32_t lab;
  CHECK_OK(s->get_keyed(s, 0, ts_loader_augment_key(9, 0, 0), p0, &lab));
  CHECK_OK(s->get_keyed(s, 0, ts_loader_augment_key(9, 1, 0), p1, &lab));
  CHECK(memcmp(p0, p1, sizeof p0) != 0, "epochs 0 and 1 crop sample 0 alike");
  ts_loader_free(a), ts_loader_free(b), ts_loader_free(c);
  ts_source_free(s);
}

int main(void) {
  ts_test_init("test_imagefolder", 1);
  snprintf(tmp, sizeof tmp, "/tmp/tessel_imgf_XXXXXX");
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 2;
  }
  test_crop_boxes();
  test_reference();
  test_bad_files();
  test_loader();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (ts_test_failed == 0 && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp);
  return ts_test_finish();
}
