/* mpi_imagefolder.c — per-host loading of an ImageFolder under mpirun -n 2
 * and -n 3 (tests/CMakeLists.txt): 4 devices shared out by the runtime
 * (2 + 2, or 2 + 1 + 1), a data=4 mesh. Each process writes the same small
 * tree of JPEG and PNG files (TurboJPEG / libpng, sizes varied) into its own
 * temporary folder; the listings must hash alike on every process
 * (ts_client_check_same). A TS_LOAD_MINIBATCH loader, which decodes and
 * augments (random resized crop, flip, normalize) only this process's rows,
 * must give every local device exactly the block of the global batch that a
 * one-process TS_LOAD_GLOBAL loader in the same process makes, batch after
 * batch across an epoch boundary, and again after a mid-epoch restore. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "harness.h"
#include "tessel/imagefolder.h"
#include "tessel/tessel.h"

enum { G = 4, CLASSES = 3, PER_CLASS = 9, SIZE = 12, B = 12 }; /* B: divides over 4 devices and 2 or 3 processes */

/* Image i of class k: (h, w, 3) from (k, i). */
static void make_pixels(int k, int i, int h, int w, uint8_t *rgb) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++)
        rgb[(y * w + x) * 3 + c] = (uint8_t)((k * 80 + c * 30 + ((k & 1 ? x : y) / 3 % 2) * 60 + i * 7 + x * y) & 255);
}

static int write_png(const char *p, const uint8_t *rgb, int h, int w) {
  png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w, .height = (png_uint_32)h,
                  .format = PNG_FORMAT_RGB};
  return png_image_write_to_file(&im, p, 0, rgb, 0, NULL) ? 0 : -1;
}

static int write_jpeg(const char *p, const uint8_t *rgb, int h, int w) {
  tjhandle tj = tjInitCompress();
  unsigned char *out = NULL;
  unsigned long n = 0;
  int rc = tj && tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &out, &n, TJSAMP_420, 90, 0) == 0 ? 0 : -1;
  FILE *f = rc == 0 ? fopen(p, "wb") : NULL;
  if (!f || fwrite(out, 1, n, f) != n) rc = -1;
  if (f) fclose(f);
  tjFree(out);
  if (tj) tjDestroy(tj);
  return rc;
}

static int make_tree(const char *root) {
  char p[512];
  snprintf(p, sizeof p, "%s/train", root);
  if (mkdir(p, 0755) != 0) return -1;
  for (int k = 0; k < CLASSES; k++) {
    snprintf(p, sizeof p, "%s/train/c%d", root, k);
    if (mkdir(p, 0755) != 0) return -1;
    for (int i = 0; i < PER_CLASS; i++) {
      int h = 10 + (i * 5 + k) % 13, w = 10 + (i * 3 + 2 * k) % 17;
      uint8_t *rgb = malloc((size_t)h * w * 3);
      make_pixels(k, i, h, w, rgb);
      snprintf(p, sizeof p, "%s/train/c%d/%02d.%s", root, k, i, i % 3 == 2 ? "png" : "jpg");
      int rc = i % 3 == 2 ? write_png(p, rgb, h, w) : write_jpeg(p, rgb, h, w);
      free(rgb);
      if (rc) return -1;
    }
  }
  return 0;
}

/* Each local device's x and y blocks of b equal the rows of the global batch g. */
static void check_batch(ts_loader *l, const ts_loader_batch *b, const ts_loader_batch *g, int me, int k) {
  CHECK(ts_batch_epoch(b) == ts_batch_epoch(g) && ts_batch_step(b) == ts_batch_step(g), "process %d batch %d: position",
        me, k);
  const float *gx;
  const int32_t *gy;
  int64_t gstart;
  ts_batch_local_rows(g, &gstart, &gx, &gy, NULL);
  const int *ids;
  int n = ts_loader_local_devices(l, &ids);
  const int64_t sample = 3 * SIZE * SIZE;
  for (int d = 0; d < n; d++) {
    ts_shard_view vx, vy;
    CHECK_OK(ts_batch_shard(b, "x", ids[d], &vx));
    CHECK_OK(ts_batch_shard(b, "y", ids[d], &vy));
    int64_t r0 = vx.start[0], r1 = vx.limit[0];
    CHECK(r0 == ids[d] * (B / G) && r1 == r0 + B / G, "process %d device %d: rows [%lld, %lld)", me, ids[d],
          (long long)r0, (long long)r1);
    CHECK(memcmp(vx.data, gx + r0 * sample, (size_t)((r1 - r0) * sample) * sizeof(float)) == 0,
          "process %d batch %d device %d: x block differs from the global batch's rows", me, k, ids[d]);
    CHECK(memcmp(vy.data, gy + r0, (size_t)(r1 - r0) * sizeof(int32_t)) == 0,
          "process %d batch %d device %d: y block differs", me, k, ids[d]);
  }
  /* only this process's rows were decoded */
  int64_t start, rows = ts_batch_local_rows(b, &start, NULL, NULL, NULL);
  CHECK(rows == (int64_t)n * (B / G) && start == ids[0] * (B / G), "process %d: decoded rows [%lld, +%lld)", me,
        (long long)start, (long long)rows);
}

int main(void) {
  ts_test_init("mpi_imagefolder", 7);
  ts_client_options co = {.total_devices = G};
  ts_client *c = ts_client_new(&co);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return ts_test_finish();
  int P = ts_client_process_count(c), me = ts_client_process_index(c);
  char root[64] = "/tmp/tessel_mpi_imgf_XXXXXX";
  bool made = mkdtemp(root) && make_tree(root) == 0;
  CHECK(made, "process %d: cannot write the tree in %s", me, root);
  ts_imagefolder_options io = {.size = SIZE, .train = true};
  ts_source *src = made ? ts_imagefolder_open(root, "train", &io) : NULL;
  CHECK(src && src->n == CLASSES * PER_CLASS, "%s", ts_last_error());
  char text[64];
  snprintf(text, sizeof text, "%016llx", (unsigned long long)(src ? ts_imagefolder_hash(src) : 0));
  CHECK(ts_client_check_same(c, "the listing", text) == 0, "process %d: %s", me, ts_last_error());

  ts_mesh *m = ts_mesh_parse("4", "data", NULL);
  ts_partition_spec sx, sy;
  ts_partition_spec_parse(m, "data,None,None,None", &sx);
  ts_partition_spec_parse(m, "data", &sy);
  ts_sharding *shx = ts_sharding_new(m, &sx, 4), *shy = ts_sharding_new(m, &sy, 1);
  ts_input_sharding in[2] = {{"x", shx}, {"y", shy}};
  ts_augment aug = {.hflip = true, .mean = TS_IMAGENET_MEAN, .std = TS_IMAGENET_STD};
  ts_loader_options go = {.batch = B, .seed = 5, .workers = 2, .augment = aug}, lo = go;
  lo.mesh = m, lo.n_inputs = 2, lo.inputs = in, lo.process_index = me, lo.process_count = P;
  lo.mode = TS_LOAD_MINIBATCH;
  ts_loader *l = src ? ts_loader_new(src, &lo) : NULL, *g = src ? ts_loader_new(src, &go) : NULL;
  CHECK(l && g, "process %d: %s", me, ts_last_error());
  uint8_t st[TS_LOADER_STATE_BYTES];
  for (int k = 0; l && g && k < 5; k++) { /* 2 batches per epoch: into epoch 2 */
    if (k == 3) CHECK_OK(ts_loader_save(l, st));
    const ts_loader_batch *b = ts_loader_next(l), *gb = ts_loader_next(g);
    CHECK(b && gb, "process %d: %s", me, ts_last_error());
    if (b && gb) check_batch(l, b, gb, me, k);
  }
  /* a restored minibatch loader continues mid-epoch with the same batches */
  ts_loader *r = l ? ts_loader_new(src, &lo) : NULL;
  CHECK(r && ts_loader_restore(r, st) == 0 && ts_loader_seek(g, 1, 1) == 0, "process %d: %s", me, ts_last_error());
  for (int k = 3; r && k < 5; k++) {
    const ts_loader_batch *b = ts_loader_next(r), *gb = ts_loader_next(g);
    CHECK(b && gb, "process %d: %s", me, ts_last_error());
    if (b && gb) check_batch(r, b, gb, me, k);
  }
  ts_loader_free(r), ts_loader_free(l), ts_loader_free(g);
  ts_sharding_free(shx), ts_sharding_free(shy);
  ts_mesh_free(m);
  ts_source_free(src);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  if (made && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
  ts_client_free(c);
  (void)P;
  return ts_test_finish();
}
