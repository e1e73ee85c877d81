/* mpi_loader.c — the data loader over several processes (mpirun -n 2 and
 * -n 3, tests/CMakeLists.txt). The client has 4 devices in all, shared out
 * by the runtime (2 + 2, or 2 + 1 + 1); the loader must own the same devices.
 *
 * For a 1-D mesh (data=4) and a 2-D mesh (data=2, model=2; the batch over
 * "data" only), in both load modes, every process uploads x, y and mask of
 * each batch (full batches, the padded last batch of epoch 0 (47 samples),
 * batches of epoch 1; batch 12, and batch 10 cut 3, 3, 3, 1) into
 * buffers of the loader's shardings and checks each of its own devices'
 * blocks (ts_buffer_read_shard) against the slice of the global batch
 * computed here from the sample indices, the dataset's known contents and an
 * independent implementation of crop, flip and normalization. The global
 * order must be the order of a one-process loader built in this process, and
 * a collective read of each buffer must give the whole global batch. Errors:
 * a minibatch batch not divisible by the process count, a minibatch upload
 * into a buffer of another sharding. Token batches of a text file: the
 * gathered global batches equal one process's (run_text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* mkdtemp, unlink, rmdir: the text file */

#include "harness.h"
#include "tessel/loader.h"
#include "tessel/tessel.h"

enum { G = 4, N = 47, C = 3, H = 4, W = 5, NCLS = 7, SAMPLE = C * H * W, NB = 7 };

static const ts_augment aug = {.crop_pad = 1, .hflip = true, .mean = {0.5f, 0.25f, 0.125f},
                               .std = {0.25f, 0.5f, 2.0f}};

/* The dataset: pixel e of sample i and its label, functions of (i, e). */
static uint8_t pixel(int64_t i, int64_t e) { return (uint8_t)((i * 37 + e * 11 + (i >> 2)) & 255); }
static int32_t label(int64_t i) { return (int32_t)((i * 5 + 3) % NCLS); }

static ts_dataset make_dataset(void) {
  ts_dataset d = {.n = N, .c = C, .h = H, .w = W, .num_classes = NCLS};
  d.images = malloc((size_t)N * SAMPLE);
  d.labels = malloc((size_t)N * sizeof *d.labels);
  for (int64_t i = 0; i < N; i++) {
    for (int64_t e = 0; e < SAMPLE; e++) d.images[i * SAMPLE + e] = pixel(i, e);
    d.labels[i] = label(i);
  }
  return d;
}

/* Element (ch, y, x) of the augmented sample s (-1: padding row, all 0):
 * RandomCrop(pad) then RandomHorizontalFlip then Normalize, written out. */
static float want_x(uint64_t seed, int64_t epoch, int64_t s, int ch, int y, int x) {
  if (s < 0) return 0.0f;
  int dy, dx;
  bool flip;
  ts_augment_draw(&aug, ts_loader_augment_key(seed, epoch, s), &dy, &dx, &flip);
  int sx = flip ? W - 1 - x : x, py = y + dy - aug.crop_pad, px = sx + dx - aug.crop_pad;
  int v = py >= 0 && py < H && px >= 0 && px < W ? pixel(s, ((int64_t)ch * H + py) * W + px) : 0;
  return ((float)v / 255.0f - aug.mean[ch]) / aug.std[ch];
}

/* Value of element gi (global index) of input k as 4 raw bytes. */
static uint32_t want_elem(uint64_t seed, int64_t epoch, const int64_t *index, int k, const int64_t *gi) {
  int64_t s = index[gi[0]];
  uint32_t v;
  if (k == 0) {
    float f = want_x(seed, epoch, s, (int)gi[1], (int)gi[2], (int)gi[3]);
    memcpy(&v, &f, 4);
  } else if (k == 1) {
    int32_t t = s < 0 ? 0 : label(s);
    memcpy(&v, &t, 4);
  } else {
    float f = s < 0 ? 0.0f : 1.0f;
    memcpy(&v, &f, 4);
  }
  return v;
}

static ts_sharding *make_sharding(const ts_mesh *m, const char *spec, int rank) {
  ts_partition_spec ps;
  if (ts_partition_spec_parse(m, spec, &ps) != 0) {
    CHECK(false, "spec %s: %s", spec, ts_last_error());
    return NULL;
  }
  ts_sharding *s = ts_sharding_new(m, &ps, rank);
  CHECK(s != NULL, "sharding %s: %s", spec, ts_last_error());
  return s;
}

typedef struct {
  const char *what;
  bool mesh2;
  ts_load_mode mode;
  int64_t batch;
} config;

/* Rows [start, start + rows) process `me` of P decodes in minibatch mode,
 * derived from the device split (2+2 or 2+1+1) and the batch blocks. */
static void minibatch_rows(bool mesh2, int P, int me, int64_t B, int64_t *start, int64_t *rows) {
  static const int first[2][3] = {{0, 2, 0}, {0, 2, 3}}, count[2][3] = {{2, 2, 0}, {2, 1, 1}};
  int f = first[P - 2][me], n = count[P - 2][me];
  if (mesh2) { /* device d holds data block d / 2 of 2 */
    *start = f / 2 * (B / 2);
    *rows = ((f + n - 1) / 2 - f / 2 + 1) * (B / 2);
  } else { /* device d holds quarter d */
    *start = f * (B / 4);
    *rows = n * (B / 4);
  }
}

static void run_config(ts_client *c, const ts_source *src, const config *cf) {
  int P = ts_client_process_count(c), me = ts_client_process_index(c);
  int64_t B = cf->batch;
  ts_mesh *m = cf->mesh2 ? ts_mesh_parse("2,2", "data,model", NULL) : ts_mesh_parse("4", "data", NULL);
  ts_sharding *x = m ? make_sharding(m, "data,None,None,None", 4) : NULL;
  ts_sharding *y = m ? make_sharding(m, "data", 1) : NULL;
  ts_input_sharding in[2] = {{"x", x}, {"y", y}};
  ts_loader_options o = {.batch = B, .seed = 99, .workers = 2, .prefetch = 2, .augment = aug,
                         .last_batch = TS_LAST_BATCH_PAD};
  ts_loader_options r = o; /* the reference: one process, no mesh */
  o.mesh = m, o.n_inputs = 2, o.inputs = in;
  o.process_index = me, o.process_count = P, o.mode = cf->mode;
  ts_loader *l = x && y ? ts_loader_new(src, &o) : NULL;
  CHECK(l != NULL, "process %d, %s: %s", me, cf->what, ts_last_error());
  ts_loader *ref = ts_loader_new(src, &r);
  CHECK(ref != NULL, "%s", ts_last_error());

  int64_t xs[4] = {B, C, H, W}, ys[1] = {B};
  size_t xbytes = (size_t)B * SAMPLE * 4;
  uint8_t *junk = malloc(xbytes), *got = malloc(xbytes), *all = malloc(xbytes);
  memset(junk, 0xff, xbytes); /* every block must be overwritten */
  ts_buffer *buf[3] = {NULL, NULL, NULL};
  if (l) {
    buf[0] = ts_buffer_from_host_sharded(c, TS_F32, 4, xs, junk, x);
    buf[1] = ts_buffer_from_host_sharded(c, TS_I32, 1, ys, junk, y);
    buf[2] = ts_buffer_from_host_sharded(c, TS_F32, 1, ys, junk, y);
  }
  bool ok = l && ref && buf[0] && buf[1] && buf[2];
  /* The collective reads below need every process in the loop: agree first. */
  int same = ts_client_check_same(c, cf->what, ok ? "ready" : "failed");
  CHECK(same == 0, "process %d, %s: a process failed: %s", me, cf->what, ts_last_error());
  ok = ok && same == 0;
  if (ok && cf->mode == TS_LOAD_MINIBATCH) {
    const ts_loader_batch *b = ts_loader_next(l);
    int64_t start = -1, rows = b ? ts_batch_local_rows(b, &start, NULL, NULL, NULL) : -1, ws, wr;
    minibatch_rows(cf->mesh2, P, me, B, &ws, &wr);
    CHECK(start == ws && rows == wr, "process %d, %s: decodes rows [%lld, +%lld), expected [%lld, +%lld)", me,
          cf->what, (long long)start, (long long)rows, (long long)ws, (long long)wr);
    ts_loader_seek(l, 0, 0);
  }
  static const char *names[3] = {"x", "y", "mask"};
  int64_t order_bad = 0, block_bad = 0, gather_bad = 0, blocks = 0, padded_batches = 0;
  int64_t *index = malloc((size_t)B * sizeof *index);
  const int *ids;
  int nd = l ? ts_loader_local_devices(l, &ids) : 0;
  CHECK(nd == ts_client_num_local_devices(c) && (!nd || ids[0] == ts_client_first_local_device(c)),
        "process %d, %s: the loader owns %d devices from %d, the runtime %d from %d", me, cf->what, nd,
        nd ? ids[0] : -1, ts_client_num_local_devices(c), ts_client_first_local_device(c));
  for (int i = 0; ok && i < NB; i++) {
    const ts_loader_batch *b = ts_loader_next(l), *rb = ts_loader_next(ref);
    if (!b || !rb) {
      CHECK(false, "process %d, %s: batch %d: %s", me, cf->what, i, ts_last_error());
      break;
    }
    int64_t epoch = ts_batch_epoch(b);
    padded_batches += ts_batch_valid(b) < B;
    for (int64_t row = 0; row < B; row++) {
      index[row] = ts_batch_sample_index(b, row);
      order_bad += index[row] != ts_batch_sample_index(rb, row);
    }
    for (int k = 0; k < 3; k++) {
      CHECK_OK(ts_batch_upload(b, names[k], buf[k]));
      int rank = k == 0 ? 4 : 1;
      for (int d = 0; d < nd; d++) {
        int64_t st[4], lim[4], ext[4];
        CHECK_OK(ts_buffer_shard_range(buf[k], ids[d], st, lim));
        for (int j = 0; j < rank; j++) ext[j] = lim[j] - st[j];
        int64_t numel = ts_shape_numel(rank, ext);
        CHECK_OK(ts_buffer_read_shard(buf[k], ids[d], got, (size_t)numel * 4));
        blocks++;
        for (int64_t e = 0; e < numel; e++) {
          int64_t gi[4], rem = e;
          for (int j = rank - 1; j >= 0; j--) {
            gi[j] = st[j] + rem % ext[j];
            rem /= ext[j];
          }
          uint32_t v;
          memcpy(&v, got + 4 * e, 4);
          if (v != want_elem(o.seed, epoch, index, k, gi) && block_bad++ < 5)
            fprintf(stderr, "process %d, %s, batch %d: %s device %d element %lld differs\n", me, cf->what, i,
                    names[k], ids[d], (long long)e);
        }
      }
    }
    /* Collective: every process's blocks together are the reference batch. */
    const float *rx, *rm;
    const int32_t *ry;
    ts_batch_local_rows(rb, NULL, &rx, &ry, &rm);
    const void *rall[3] = {rx, ry, rm};
    for (int k = 0; k < 3; k++) {
      size_t bytes = k == 0 ? xbytes : (size_t)B * 4;
      CHECK_OK(ts_buffer_read(buf[k], all, bytes));
      gather_bad += memcmp(all, rall[k], bytes) != 0;
    }
  }
  if (ok) {
    CHECK(order_bad == 0, "process %d, %s: %lld rows differ from the one-process loader's order", me, cf->what,
          (long long)order_bad);
    CHECK(block_bad == 0 && blocks == (int64_t)NB * 3 * nd,
          "process %d, %s: %lld elements of its devices' blocks differ (%lld blocks checked)", me, cf->what,
          (long long)block_bad, (long long)blocks);
    CHECK(gather_bad == 0, "process %d, %s: %lld gathered inputs differ from the one-process batch", me, cf->what,
          (long long)gather_bad);
    CHECK(padded_batches == 1, "process %d, %s: %lld padded batches (expected the last of epoch 0)", me, cf->what,
          (long long)padded_batches);
  }
  /* Minibatch: a buffer of another sharding cannot be filled (no collective). */
  if (ok && cf->mode == TS_LOAD_MINIBATCH) {
    ts_buffer *rep = ts_buffer_from_host(c, TS_I32, 1, ys, junk);
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(rep && b && ts_batch_upload(b, "y", rep) == -1 && strstr(ts_last_error(), "buffer for 'y'") &&
              strstr(ts_last_error(), "cannot reshard"),
          "process %d, %s: upload into a replicated buffer: '%s'", me, cf->what, ts_last_error());
    if (rep) ts_buffer_free(rep);
  }
  free(index);
  for (int k = 0; k < 3; k++)
    if (buf[k]) ts_buffer_free(buf[k]);
  free(junk);
  free(got);
  free(all);
  ts_loader_free(l);
  ts_loader_free(ref);
  ts_sharding_free(x);
  ts_sharding_free(y);
  ts_mesh_free(m);
}

/* Token batches of a text file (the same bytes written by every process):
 * on data=4 with x and y (B, T) sharded on the batch, in both load modes,
 * the global batches gathered from every process's devices are the batches
 * of a one-process loader, through the end of an epoch into the next. */
static void run_text(ts_client *c, ts_load_mode mode) {
  enum { TB = 12, TT = 8, TNB = 20 };
  int P = ts_client_process_count(c), me = ts_client_process_index(c);
  char dir[64] = "/tmp/tessel_mpi_text_XXXXXX", path[96];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(path, sizeof path, "%s/corpus.txt", dir);
  FILE *f = fopen(path, "wb");
  for (int i = 0; f && i < 2000; i++) fputc((i * 131 + (i >> 3)) & 255, f);
  CHECK(f && fclose(f) == 0, "writing %s", path);
  ts_text_options to = {.path = path, .seq = TT, .split = TS_TEXT_TRAIN};
  ts_source *src = ts_source_text(&to); /* 1800 bytes: 224 windows, 18 batches per epoch */
  ts_mesh *m = ts_mesh_parse("4", "data", NULL);
  ts_sharding *sx = m ? make_sharding(m, "data,None", 2) : NULL;
  ts_input_sharding in[2] = {{"x", sx}, {"y", sx}};
  ts_loader_options o = {.batch = TB, .seed = 77, .workers = 2}, r = o;
  o.mesh = m, o.n_inputs = 2, o.inputs = in, o.process_index = me, o.process_count = P, o.mode = mode;
  ts_loader *l = src && sx ? ts_loader_new(src, &o) : NULL, *ref = src ? ts_loader_new(src, &r) : NULL;
  int64_t shape[2] = {TB, TT};
  int32_t zero[TB * TT] = {0}, all[TB * TT];
  ts_buffer *bx = sx ? ts_buffer_from_host_sharded(c, TS_I32, 2, shape, zero, sx) : NULL;
  ts_buffer *by = sx ? ts_buffer_from_host_sharded(c, TS_I32, 2, shape, zero, sx) : NULL;
  bool ok = l && ref && bx && by;
  CHECK(ok, "process %d, text: %s", me, ts_last_error());
  int same = ts_client_check_same(c, "text loader", ok ? "ready" : "failed");
  int64_t bad = 0;
  for (int i = 0; ok && same == 0 && i < TNB; i++) {
    const ts_loader_batch *b = ts_loader_next(l), *rb = ts_loader_next(ref);
    const int32_t *rx, *ry;
    if (!b || !rb || ts_batch_local_tokens(rb, NULL, &rx, &ry, NULL) != TB) {
      CHECK(false, "process %d, text batch %d: %s", me, i, ts_last_error());
      break;
    }
    CHECK_OK(ts_batch_upload(b, "x", bx));
    CHECK_OK(ts_batch_upload(b, "y", by));
    CHECK_OK(ts_buffer_read(bx, all, sizeof all)); /* collective */
    bad += memcmp(all, rx, sizeof all) != 0;
    CHECK_OK(ts_buffer_read(by, all, sizeof all));
    bad += memcmp(all, ry, sizeof all) != 0;
  }
  CHECK(bad == 0, "process %d, text (%s): %lld gathered x/y batches differ from the one-process loader's", me,
        mode == TS_LOAD_MINIBATCH ? "minibatch" : "global", (long long)bad);
  if (bx) ts_buffer_free(bx);
  if (by) ts_buffer_free(by);
  ts_loader_free(l);
  ts_loader_free(ref);
  ts_sharding_free(sx);
  ts_mesh_free(m);
  ts_source_free(src);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  ts_test_init("mpi_loader", 20261205);
  ts_client_options co = {.total_devices = G};
  ts_client *c = ts_client_new(&co);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return ts_test_finish();
  int P = ts_client_process_count(c), me = ts_client_process_index(c);
  CHECK(P >= 2 && P <= 3 && ts_client_num_devices(c) == G, "run under mpirun with 2 or 3 processes (%d, %d devices)",
        P, ts_client_num_devices(c));
  if (P < 2 || P > 3) {
    ts_client_free(c);
    return ts_test_finish();
  }
  ts_dataset d = make_dataset();
  ts_source *src = ts_source_from_dataset(&d, "mpi test data");
  static const config cfs[] = {
      {"1-D mesh, global, batch 12", false, TS_LOAD_GLOBAL, 12},
      {"1-D mesh, minibatch, batch 12", false, TS_LOAD_MINIBATCH, 12},
      {"2-D mesh, global, batch 12", true, TS_LOAD_GLOBAL, 12},
      {"2-D mesh, minibatch, batch 12", true, TS_LOAD_MINIBATCH, 12},
      {"1-D mesh, global, batch 10 (uneven blocks)", false, TS_LOAD_GLOBAL, 10},
  };
  for (size_t i = 0; i < sizeof cfs / sizeof *cfs; i++) run_config(c, src, &cfs[i]);
  run_text(c, TS_LOAD_GLOBAL);
  run_text(c, TS_LOAD_MINIBATCH);

  /* Minibatch with a batch the processes do not divide: every process fails
   * with the same error. */
  ts_mesh *m = ts_mesh_parse("4", "data", NULL);
  ts_sharding *x = make_sharding(m, "data,None,None,None", 4), *y = make_sharding(m, "data", 1);
  ts_input_sharding in[2] = {{"x", x}, {"y", y}};
  int64_t B = 4 * P + 1;
  ts_loader_options o = {.batch = B, .mesh = m, .n_inputs = 2, .inputs = in, .process_index = me,
                         .process_count = P, .mode = TS_LOAD_MINIBATCH};
  ts_loader *l = ts_loader_new(src, &o);
  char want[96];
  snprintf(want, sizeof want, "global batch %lld does not divide over %d processes", (long long)B, P);
  CHECK(!l && strstr(ts_last_error(), want), "process %d: minibatch batch %lld: '%s'", me, (long long)B,
        l ? "no error" : ts_last_error());
  ts_loader_free(l);
  ts_sharding_free(x);
  ts_sharding_free(y);
  ts_mesh_free(m);

  ts_source_free(src);
  ts_dataset_free(&d);
  ts_client_free(c);
  return ts_test_finish();
}
