/* test_data.c — IDX reading (plain and gzip), MNIST-format loading, batches,
 * shuffling: round trips through small files written to a temporary
 * directory, one test per malformed-file error (each must name the file), a
 * seeded fuzz loop of truncations and byte flips that must never crash, and
 * the installed Fashion-MNIST when present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* mkdtemp, unlink, rmdir */
#include <zlib.h>   /* gzopen: writing gzipped fixtures */

#include "harness.h"
#include "util/prng.h"
#include "tessel/tessel.h"

static char tmpdir[256];

static const char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

/* Writes bytes to path, gzipped when gz. */
static void write_bytes(const char *path, const uint8_t *b, size_t n, bool gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f || (n && gzwrite(f, b, (unsigned)n) != (int)n)) {
      fprintf(stderr, "cannot write %s\n", path);
      exit(2);
    }
    gzclose(f);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
      fprintf(stderr, "cannot write %s\n", path);
      exit(2);
    }
    fclose(f);
  }
}

/* An IDX image in memory: header for dims + data (malloc'd; *len set). */
static uint8_t *make_idx(int nd, const uint32_t *dims, const uint8_t *data, size_t *len) {
  size_t numel = 1;
  for (int i = 0; i < nd; i++) numel *= dims[i];
  *len = 4 + 4 * (size_t)nd + numel;
  uint8_t *b = malloc(*len);
  b[0] = 0, b[1] = 0, b[2] = 8, b[3] = (uint8_t)nd;
  for (int i = 0; i < nd; i++) {
    b[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
    b[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
    b[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
    b[7 + 4 * i] = (uint8_t)dims[i];
  }
  memcpy(b + 4 + 4 * nd, data, numel);
  return b;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) exit(2);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*len ? *len : 1);
  if (fread(b, 1, *len, f) != *len) exit(2);
  fclose(f);
  return b;
}

/* An expected failure: status -1 and a message containing path and `what`. */
static void check_fails(int rc, const char *path, const char *what, const char *label) {
  const char *e = ts_last_error();
  CHECK(rc == -1, "%s: expected an error", label);
  CHECK(strstr(e, path) != NULL, "%s: message does not name the file %s: '%s'", label, path, e);
  CHECK(strstr(e, what) != NULL, "%s: message lacks '%s': '%s'", label, what, e);
}

/* 5 images of 4x3 with pixel = 10*i + j, labels i % 10 written in */
enum { NI = 5, IH = 4, IW = 3 };
static uint8_t pixels[NI * IH * IW];
static uint8_t labels[NI] = {3, 0, 9, 1, 7};

static void test_round_trip(void) {
  for (int i = 0; i < NI * IH * IW; i++) pixels[i] = (uint8_t)(i * 4 + 1);
  uint32_t idims[3] = {NI, IH, IW}, ldims[1] = {NI};
  size_t ilen, llen;
  uint8_t *img = make_idx(3, idims, pixels, &ilen);
  uint8_t *lab = make_idx(1, ldims, labels, &llen);
  for (int gz = 0; gz < 2; gz++) {
    const char *p = tpath(gz ? "rt.gz" : "rt");
    write_bytes(p, img, ilen, gz);
    int nd = 0;
    int64_t dims[3] = {0};
    uint8_t *data = NULL;
    CHECK_OK(ts_idx_read(p, &nd, dims, &data));
    CHECK(nd == 3 && dims[0] == NI && dims[1] == IH && dims[2] == IW, "dims (gz %d): %d %lld %lld %lld", gz, nd,
          (long long)dims[0], (long long)dims[1], (long long)dims[2]);
    CHECK(data && memcmp(data, pixels, sizeof pixels) == 0, "pixel data (gz %d)", gz);
    free(data);
    write_bytes(p, lab, llen, gz);
    CHECK_OK(ts_idx_read(p, &nd, dims, &data));
    CHECK(nd == 1 && dims[0] == NI && data && memcmp(data, labels, NI) == 0, "labels (gz %d)", gz);
    free(data);
    unlink(p);
  }

  /* a dataset from a gzipped image file and a plain label file */
  write_bytes(tpath("train-images-idx3-ubyte.gz"), img, ilen, true);
  write_bytes(tpath("train-labels-idx1-ubyte"), lab, llen, false);
  ts_dataset d;
  CHECK_OK(ts_mnist_load(tmpdir, "train", &d));
  CHECK(d.n == NI && d.c == 1 && d.h == IH && d.w == IW && d.num_classes == 10, "dataset shape");
  int64_t order[2] = {4, 1};
  float x[2 * IH * IW];
  int32_t y[2];
  const float mean = 0.2860f, std = 0.3530f;
  ts_dataset_batch(&d, order, 0, 2, mean, std, x, y);
  CHECK(y[0] == labels[4] && y[1] == labels[1], "batch labels %d %d", y[0], y[1]);
  bool ok = true;
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < IH * IW; j++) {
      float want = ((float)pixels[order[k] * IH * IW + j] / 255.0f - mean) / std;
      ok = ok && x[k * IH * IW + j] == want;
    }
  CHECK(ok, "batch pixels are (p/255 - mean)/std");
  ts_dataset_batch(&d, NULL, 2, 1, 0.0f, 1.0f, x, y);
  CHECK(y[0] == labels[2] && x[0] == (float)pixels[2 * IH * IW] / 255.0f, "identity order batch");
  ts_dataset_free(&d);
  CHECK(d.images == NULL && d.labels == NULL, "free clears");
  unlink(tpath("train-images-idx3-ubyte.gz"));
  unlink(tpath("train-labels-idx1-ubyte"));
  free(img);
  free(lab);
}

static void test_errors(void) {
  uint32_t idims[3] = {NI, IH, IW}, ldims[1] = {NI};
  size_t ilen, llen;
  uint8_t *img = make_idx(3, idims, pixels, &ilen);
  uint8_t *lab = make_idx(1, ldims, labels, &llen);
  const char *p = tpath("bad-idx");
  int nd;
  int64_t dims[3];
  uint8_t *data = (uint8_t *)1;

  CHECK(ts_idx_read(tpath("no-such-file"), &nd, dims, &data) == -1, "missing file");
  CHECK(strstr(ts_last_error(), "no-such-file") != NULL, "missing file named: %s", ts_last_error());

  uint8_t *bad = malloc(ilen);
  memcpy(bad, img, ilen);
  bad[2] = 0x0d; /* f32 data type */
  write_bytes(p, bad, ilen, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "data type 0x0d", "non-u8 type");
  CHECK(data == NULL, "no data on error");
  memcpy(bad, "\x1f\x2e\x08\x03", 4);
  write_bytes(p, bad, ilen, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "bad magic 0x1f2e0803", "wrong magic");
  memcpy(bad, "\x00\x00\x08\x02", 4);
  write_bytes(p, bad, ilen, true);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "bad magic", "2-dim magic, gzipped");

  write_bytes(p, img, 2, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "truncated", "file shorter than the magic");
  write_bytes(p, img, 10, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "truncated header", "truncated header");
  write_bytes(p, img, 10, true);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "truncated header", "truncated header, gzipped");
  write_bytes(p, img, ilen - 7, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "truncated: expected 76 bytes (16-byte header + 60 bytes of "
              "pixel data), got 69", "truncated data");
  write_bytes(p, img, ilen - 7, true);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "truncated", "truncated data, gzipped");

  /* a gzip stream cut short (not a short payload: the compressed file is cut) */
  write_bytes(p, img, ilen, true);
  size_t glen;
  uint8_t *gzb = read_file(p, &glen);
  write_bytes(p, gzb, glen - 6, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "truncated", "gzip stream cut short");
  free(gzb);

  memcpy(bad, img, ilen);
  bad[7] = 0; /* dim 0 = 0 */
  bad[6] = 0;
  write_bytes(p, bad, ilen, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "dim 0 is 0", "zero dim");
  memcpy(bad, img, ilen);
  bad[4] = 0xff; /* dim 0 huge */
  write_bytes(p, bad, ilen, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "2^31", "huge dims");

  uint8_t *longer = malloc(ilen + 3);
  memcpy(longer, img, ilen);
  memset(longer + ilen, 0, 3);
  write_bytes(p, longer, ilen + 3, false);
  check_fails(ts_idx_read(p, &nd, dims, &data), p, "trailing bytes", "trailing bytes");
  free(longer);
  unlink(p);

  /* dataset-level: count mismatch, bad label, wrong kinds of file */
  const char *ip = tpath("t10k-images-idx3-ubyte"), *lp = tpath("t10k-labels-idx1-ubyte");
  ts_dataset d;
  write_bytes(ip, img, ilen, false);
  uint32_t l4[1] = {NI - 1};
  size_t l4len;
  uint8_t *lab4 = make_idx(1, l4, labels, &l4len);
  write_bytes(lp, lab4, l4len, false);
  check_fails(ts_mnist_load(tmpdir, "t10k", &d), lp, "has 5 images but", "count mismatch");
  CHECK(strstr(ts_last_error(), "has 4 labels") != NULL, "count mismatch says both: %s", ts_last_error());
  free(lab4);

  memcpy(bad, lab, llen);
  bad[8 + 3] = 10; /* label index 3 */
  write_bytes(lp, bad, llen, false);
  check_fails(ts_mnist_load(tmpdir, "t10k", &d), lp, "label 10 at index 3 (byte offset 11)", "label out of range");

  write_bytes(lp, img, ilen, false); /* an image file where labels belong */
  check_fails(ts_mnist_load(tmpdir, "t10k", &d), lp, "expected a label file", "images as labels");
  write_bytes(ip, lab, llen, false);
  check_fails(ts_mnist_load(tmpdir, "t10k", &d), ip, "expected an image file", "labels as images");
  unlink(ip);
  unlink(lp);
  CHECK(ts_mnist_load(tmpdir, "t10k", &d) == -1 && strstr(ts_last_error(), "t10k-images-idx3-ubyte"),
        "missing dataset named: %s", ts_last_error());
  free(bad);
  free(img);
  free(lab);
}

/* Random truncations and byte flips of a valid file, plain and gzipped: the
 * reader either succeeds (with sane dims) or fails with a message naming the
 * file; it never crashes (this suite also runs under ASan + UBSan). */
static void test_fuzz(uint64_t seed) {
  uint32_t idims[3] = {NI, IH, IW};
  size_t ilen, glen;
  uint8_t *img = make_idx(3, idims, pixels, &ilen);
  const char *p = tpath("fuzz");
  write_bytes(p, img, ilen, true);
  uint8_t *gzb = read_file(p, &glen);
  ts_prng r;
  ts_prng_seed(&r, seed);
  int ok = 0, failed = 0, unnamed = 0, insane = 0;
  uint8_t buf[512];
  for (int it = 0; it < 3000; it++) {
    bool gz = it & 1;
    const uint8_t *src = gz ? gzb : img;
    size_t n = gz ? glen : ilen;
    memcpy(buf, src, n);
    size_t len = n;
    int mode = (int)ts_prng_below(&r, 3);
    if (mode != 1) len = (size_t)ts_prng_below(&r, n + 1); /* truncate */
    if (mode != 0) {
      int flips = 1 + (int)ts_prng_below(&r, 4);
      for (int k = 0; k < flips && len; k++) buf[ts_prng_below(&r, len)] ^= (uint8_t)(1 + ts_prng_below(&r, 255));
    }
    write_bytes(p, buf, len, false);
    int nd = 0;
    int64_t dims[3] = {0};
    uint8_t *data = NULL;
    ts_clear_error();
    if (ts_idx_read(p, &nd, dims, &data) == 0) {
      ok++;
      int64_t numel = 1;
      for (int i = 0; i < nd; i++) numel *= dims[i];
      if (!data || (nd != 1 && nd != 3) || numel <= 0 || numel > (int64_t)len) insane++;
      free(data);
    } else {
      failed++;
      if (!strstr(ts_last_error(), p) || data) unnamed++;
    }
  }
  printf("fuzz: %d read, %d rejected\n", ok, failed);
  CHECK(failed > 1000, "most mutations are rejected (%d)", failed);
  CHECK(unnamed == 0, "%d errors did not name the file", unnamed);
  CHECK(insane == 0, "%d accepted files had impossible dims", insane);
  unlink(p);
  free(gzb);
  free(img);
}

static void test_shuffle(void) {
  enum { N = 1000 };
  int64_t a[N], b[N];
  ts_shuffle(a, N, 42);
  ts_shuffle(b, N, 42);
  CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same order");
  char seen[N] = {0};
  bool perm = true;
  for (int i = 0; i < N; i++) {
    if (a[i] < 0 || a[i] >= N || seen[a[i]]) perm = false;
    else seen[a[i]] = 1;
  }
  CHECK(perm, "shuffle is a permutation");
  ts_shuffle(b, N, 43);
  CHECK(memcmp(a, b, sizeof a) != 0, "another seed, another order");
  /* all 6 orders of 3 elements about equally often (expected 1000 each;
   * 6 sigma of a binomial(6000, 1/6) is about 175) */
  int count[6] = {0};
  for (uint64_t s = 0; s < 6000; s++) {
    int64_t o[3];
    ts_shuffle(o, 3, s * 7919 + 1);
    count[o[0] * 2 + (o[1] > o[2])]++;
  }
  for (int k = 0; k < 6; k++) CHECK(count[k] > 825 && count[k] < 1175, "order %d drawn %d times of 6000", k, count[k]);
  int64_t one[1] = {7};
  ts_shuffle(one, 1, 5);
  CHECK(one[0] == 0, "n = 1");
  ts_shuffle(NULL, 0, 5); /* n = 0 touches nothing */
}

static void test_fashion_mnist(void) {
  if (access(TS_FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz", F_OK) != 0 &&
      access(TS_FASHION_MNIST_DIR "/train-labels-idx1-ubyte", F_OK) != 0) {
    printf("note: %s not installed; skipping the Fashion-MNIST check\n", TS_FASHION_MNIST_DIR);
    return;
  }
  const char *splits[2] = {"train", "t10k"};
  const int64_t counts[2] = {60000, 10000};
  for (int s = 0; s < 2; s++) {
    ts_dataset d;
    if (ts_mnist_load(TS_FASHION_MNIST_DIR, splits[s], &d) != 0) {
      CHECK(0, "loading Fashion-MNIST %s: %s", splits[s], ts_last_error());
      continue;
    }
    CHECK(d.n == counts[s], "%s has %lld samples", splits[s], (long long)d.n);
    CHECK(d.c == 1 && d.h == 28 && d.w == 28 && d.num_classes == 10, "%s images are 1x28x28", splits[s]);
    /* Fashion-MNIST is balanced: n/10 samples per class */
    int64_t per[10] = {0};
    bool in_range = true;
    for (int64_t i = 0; i < d.n; i++) {
      if (d.labels[i] < 0 || d.labels[i] >= 10) in_range = false;
      else per[d.labels[i]]++;
    }
    CHECK(in_range, "%s labels in [0, 10)", splits[s]);
    for (int k = 0; k < 10; k++) CHECK(per[k] == d.n / 10, "%s class %d has %lld samples", splits[s], k, (long long)per[k]);
    uint64_t sum = 0;
    for (int64_t i = 0; i < d.n * 784; i++) sum += d.images[i];
    double mean = (double)sum / (double)(d.n * 784) / 255.0;
    CHECK(mean > 0.27 && mean < 0.30, "%s mean pixel %.4f (Fashion-MNIST's is about 0.286)", splits[s], mean);
    ts_dataset_free(&d);
  }
}

int main(void) {
  uint64_t seed = ts_test_init("test_data", 20261202);
  snprintf(tmpdir, sizeof tmpdir, "%s/tessel-test-data-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  test_round_trip();
  test_errors();
  test_fuzz(seed);
  test_shuffle();
  test_fashion_mnist();
  rmdir(tmpdir);
  return ts_test_finish();
}
