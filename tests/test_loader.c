/* test_loader.c — the prefetching loader: every device gets exactly its block
 * of the global batch (compared with slicing the batch of an unsharded
 * loader) on 1-D and 2-D meshes, with uneven and padded last batches and
 * simulated multi-process loading (even and uneven device splits, uploads of
 * each process's blocks); the global order is the same for every
 * mesh, process count, worker count and prefetch depth; a restored loader
 * replays the uninterrupted run bit for bit; errors for bad shardings;
 * metrics; prefetching reads ahead while the consumer holds a batch (counted,
 * no timing); the progress display. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h> /* test_overlap: a counting source */
#include <time.h>    /* clock_gettime: the hang guard of test_overlap */
#include <unistd.h> /* mkdtemp, unlink, rmdir */

#include "harness.h"
#include "ir/ir.h" /* set_error: a source reporting a failure */
#include "util/prng.h"
#include "tessel/loader.h"
#include "tessel/tessel.h"

#define C 3
#define H 8
#define W 6
#define SAMPLE (C * H * W)

static ts_dataset make_dataset(int64_t n, uint64_t seed) {
  ts_dataset d = {.n = n, .c = C, .h = H, .w = W, .num_classes = 10};
  d.images = malloc((size_t)n * SAMPLE);
  d.labels = malloc((size_t)n * sizeof *d.labels);
  ts_prng r;
  ts_prng_seed(&r, seed);
  for (int64_t i = 0; i < n * SAMPLE; i++) d.images[i] = (uint8_t)ts_prng_next(&r);
  for (int64_t i = 0; i < n; i++) d.labels[i] = (int32_t)(i % 10);
  return d;
}

static ts_loader_options base_opts(int64_t batch) {
  ts_loader_options o = {.batch = batch, .seed = 1234, .prefetch = 2, .workers = 2};
  o.augment = (ts_augment){.crop_pad = 2, .hflip = true, .mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f}};
  return o;
}

/* A copy of one global batch (B rows) from an unsharded loader. */
typedef struct {
  int64_t epoch, step, valid;
  int64_t *index; // (B)
  float *x;       // (B, C, H, W)
  int32_t *y;     // (B)
  float *mask;    // (B)
} gbatch;

static void gbatch_take(gbatch *g, const ts_loader_batch *b, int64_t B) {
  g->epoch = ts_batch_epoch(b);
  g->step = ts_batch_step(b);
  g->valid = ts_batch_valid(b);
  g->index = malloc((size_t)B * sizeof *g->index);
  g->x = malloc((size_t)B * SAMPLE * sizeof *g->x);
  g->y = malloc((size_t)B * sizeof *g->y);
  g->mask = malloc((size_t)B * sizeof *g->mask);
  const float *x, *mask;
  const int32_t *y;
  int64_t row0;
  int64_t rows = ts_batch_local_rows(b, &row0, &x, &y, &mask);
  CHECK(rows == B && row0 == 0, "unsharded loader holds rows [%lld, +%lld)", (long long)row0, (long long)rows);
  for (int64_t r = 0; r < B; r++) g->index[r] = ts_batch_sample_index(b, r);
  memcpy(g->x, x, (size_t)B * SAMPLE * sizeof *x);
  memcpy(g->y, y, (size_t)B * sizeof *y);
  memcpy(g->mask, mask, (size_t)B * sizeof *mask);
}

static void gbatch_free(gbatch *g) {
  free(g->index);
  free(g->x);
  free(g->y);
  free(g->mask);
}

/* The first nb global batches of an unsharded loader. */
static gbatch *reference(const ts_source *src, ts_loader_options o, int nb) {
  o.mesh = NULL;
  o.n_inputs = 0;
  o.inputs = NULL;
  o.process_index = 0;
  o.process_count = 1;
  o.mode = TS_LOAD_GLOBAL;
  ts_loader *l = ts_loader_new(src, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  gbatch *g = calloc((size_t)nb, sizeof *g);
  for (int i = 0; l && i < nb; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(b != NULL, "%s", ts_last_error());
    if (b) gbatch_take(&g[i], b, o.batch);
  }
  ts_loader_free(l);
  return g;
}

static void free_reference(gbatch *g, int nb) {
  for (int i = 0; i < nb; i++) gbatch_free(&g[i]);
  free(g);
}

/* Element at global index gi of input k of g, as raw 4 bytes. */
static uint32_t ref_elem(const gbatch *g, int k, const int64_t *gi) {
  uint32_t v;
  if (k == 0) memcpy(&v, &g->x[((gi[0] * C + gi[1]) * H + gi[2]) * W + gi[3]], 4);
  else if (k == 1) memcpy(&v, &g->y[gi[0]], 4);
  else memcpy(&v, &g->mask[gi[0]], 4);
  return v;
}

/* Every local device's block of every input equals the slice of ref given
 * by ts_sharding_shard_range (zeros past its limit). Returns the number of
 * mismatching elements. */
static int64_t check_blocks(const ts_loader *l, const ts_loader_batch *b, const gbatch *ref,
                            const ts_sharding *const sh[3], int64_t B, const char *what) {
  static const char *names[3] = {"x", "y", "mask"};
  const int *ids;
  int nd = ts_loader_local_devices(l, &ids);
  int64_t bad = 0;
  for (int k = 0; k < 3; k++) {
    int64_t gshape[4] = {B, C, H, W};
    int rank = k == 0 ? 4 : 1;
    for (int d = 0; d < nd; d++) {
      ts_shard_view v;
      CHECK_OK(ts_batch_shard(b, names[k], ids[d], &v));
      int64_t st[4] = {0}, lim[4] = {B, C, H, W}, pad[4] = {B, C, H, W};
      if (sh[k]) {
        CHECK_OK(ts_sharding_shard_range(sh[k], gshape, ids[d], st, lim));
        CHECK_OK(ts_sharding_shard_shape(sh[k], gshape, pad));
      }
      CHECK(v.rank == rank, "%s: %s rank %d", what, names[k], v.rank);
      for (int j = 0; j < rank; j++)
        CHECK(v.start[j] == st[j] && v.limit[j] == lim[j] && v.shape[j] == pad[j],
              "%s: %s device %d dim %d: block [%lld, %lld) of %lld, expected [%lld, %lld) of %lld", what,
              names[k], ids[d], j, (long long)v.start[j], (long long)v.limit[j], (long long)v.shape[j],
              (long long)st[j], (long long)lim[j], (long long)pad[j]);
      CHECK(((uintptr_t)v.data & 63) == 0, "%s: block not 64-byte aligned", what);
      int64_t numel = ts_shape_numel(rank, pad);
      CHECK(v.bytes == (size_t)numel * 4, "%s: bytes %zu", what, v.bytes);
      for (int64_t e = 0; e < numel; e++) {
        int64_t idx[4], rem = e, gi[4];
        bool inside = true;
        for (int j = rank - 1; j >= 0; j--) {
          idx[j] = rem % pad[j];
          rem /= pad[j];
          gi[j] = st[j] + idx[j];
          inside = inside && gi[j] < lim[j];
        }
        uint32_t got;
        memcpy(&got, (const char *)v.data + 4 * e, 4);
        uint32_t want = inside ? ref_elem(ref, k, gi) : 0;
        if (got != want) bad++;
      }
    }
  }
  CHECK(bad == 0, "%s: %lld elements differ from the slice of the global batch", what, (long long)bad);
  return bad;
}

/* Runs nb batches of a sharded loader and checks every block against ref. */
static void check_sharded_run(const ts_source *src, ts_loader_options o, const ts_sharding *const sh[3],
                              const gbatch *ref, int nb, const char *what) {
  ts_loader *l = ts_loader_new(src, &o);
  CHECK(l != NULL, "%s: %s", what, ts_last_error());
  if (!l) return;
  for (int i = 0; i < nb; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(b != NULL, "%s: %s", what, ts_last_error());
    if (!b) break;
    CHECK(ts_batch_epoch(b) == ref[i].epoch && ts_batch_step(b) == ref[i].step, "%s: batch %d position", what,
          i);
    for (int64_t r = 0; r < o.batch; r++)
      if (ts_batch_sample_index(b, r) != ref[i].index[r]) {
        CHECK(false, "%s: batch %d row %lld: sample %lld, reference %lld (global order differs)", what, i,
              (long long)r, (long long)ts_batch_sample_index(b, r), (long long)ref[i].index[r]);
        break;
      }
    char w[160];
    snprintf(w, sizeof w, "%s batch %d", what, i);
    check_blocks(l, b, &ref[i], sh, o.batch, w);
  }
  ts_loader_free(l);
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

/* Epoch coverage, determinism, padding and the augmentation itself. */
static void test_unsharded(const ts_dataset *d, const ts_source *src) {
  /* Drop: 100 samples, batch 16: 6 batches, 96 distinct samples, new order each epoch. */
  ts_loader_options o = base_opts(16);
  ts_loader *l = ts_loader_new(src, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  CHECK(ts_loader_steps_per_epoch(l) == 6, "steps per epoch %lld", (long long)ts_loader_steps_per_epoch(l));
  int seen[100] = {0};
  int64_t first_e0[16], first_e1[16];
  int64_t aug_bad = 0;
  for (int i = 0; i < 12; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(b != NULL, "%s", ts_last_error());
    if (!b) break;
    CHECK(ts_batch_epoch(b) == i / 6 && ts_batch_step(b) == i % 6, "batch %d at epoch %lld step %lld", i,
          (long long)ts_batch_epoch(b), (long long)ts_batch_step(b));
    const float *x, *mask;
    const int32_t *y;
    ts_batch_local_rows(b, NULL, &x, &y, &mask);
    for (int r = 0; r < 16; r++) {
      int64_t s = ts_batch_sample_index(b, r);
      if (i < 6) seen[s]++;
      if (i == 0) first_e0[r] = s;
      if (i == 6) first_e1[r] = s;
      CHECK(y[r] == d->labels[s] && mask[r] == 1.0f, "label/mask of row %d", r);
      float want[SAMPLE];
      ts_augment_apply(&o.augment, d->images + s * SAMPLE, C, H, W,
                       ts_loader_augment_key(o.seed, ts_batch_epoch(b), s), want);
      aug_bad += memcmp(want, x + r * SAMPLE, sizeof want) != 0;
    }
  }
  CHECK(aug_bad == 0, "%lld samples differ from ts_augment_apply with the documented key", (long long)aug_bad);
  int once = 0, never = 0;
  for (int i = 0; i < 100; i++) once += seen[i] == 1, never += seen[i] == 0;
  CHECK(once == 96 && never == 4, "an epoch covers %d samples once, %d never (expected 96, 4)", once, never);
  CHECK(memcmp(first_e0, first_e1, sizeof first_e0) != 0, "epochs 0 and 1 start with the same batch");
  ts_loader_stats st;
  ts_loader_get_stats(l, &st);
  CHECK(st.batches == 12 && st.samples == 192, "stats: %lld batches, %lld samples", (long long)st.batches,
        (long long)st.samples);
  CHECK(st.wait_s >= 0 && st.samples_per_s > 0 && st.produce_s > 0, "stats: wait %g rate %g produce %g",
        st.wait_s, st.samples_per_s, st.produce_s);
  ts_loader_free(l);

  /* Pad: 23 samples, batch 8: 3 batches, the last with 7 real rows and mask 0 on row 7. */
  ts_loader_options p = base_opts(8);
  p.last_batch = TS_LAST_BATCH_PAD;
  p.no_shuffle = true;
  ts_dataset d23 = *d;
  d23.n = 23;
  ts_source *s23 = ts_source_from_dataset(&d23, "d23");
  l = ts_loader_new(s23, &p);
  CHECK(l && ts_loader_steps_per_epoch(l) == 3, "pad: steps per epoch");
  for (int i = 0; l && i < 3; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    const float *x, *mask;
    const int32_t *y;
    ts_batch_local_rows(b, NULL, &x, &y, &mask);
    CHECK(ts_batch_valid(b) == (i < 2 ? 8 : 7), "pad: batch %d valid %lld", i, (long long)ts_batch_valid(b));
    for (int r = 0; r < 8; r++) {
      bool real = i * 8 + r < 23;
      CHECK(ts_batch_sample_index(b, r) == (real ? i * 8 + r : -1), "pad: no_shuffle order, row %d", r);
      CHECK(mask[r] == (real ? 1.0f : 0.0f), "pad: batch %d mask[%d] = %g", i, r, mask[r]);
      if (!real) {
        int nz = 0;
        for (int e = 0; e < SAMPLE; e++) nz += x[r * SAMPLE + e] != 0.0f;
        CHECK(nz == 0 && y[r] == 0, "pad: padding row is not zero");
      }
    }
  }
  ts_loader_free(l);
  /* Drop with a batch larger than the dataset: a clear error. */
  ts_loader_options big = base_opts(24);
  l = ts_loader_new(s23, &big);
  CHECK(l == NULL && strstr(ts_last_error(), "larger than d23"), "batch > n: '%s'", ts_last_error());
  ts_source_free(s23);
}

/* Same global batches for any worker count and prefetch depth. */
static void test_workers_invariance(const ts_source *src) {
  ts_loader_options a = base_opts(10), b = base_opts(10);
  a.workers = 1, a.prefetch = 1;
  b.workers = 4, b.prefetch = 5;
  gbatch *ra = reference(src, a, 25), *rb = reference(src, b, 25);
  int diff = 0;
  for (int i = 0; i < 25; i++)
    diff += memcmp(ra[i].x, rb[i].x, 10 * SAMPLE * sizeof(float)) != 0 ||
            memcmp(ra[i].index, rb[i].index, 10 * sizeof(int64_t)) != 0;
  CHECK(diff == 0, "%d batches differ between 1 worker/prefetch 1 and 4 workers/prefetch 5", diff);
  free_reference(ra, 25);
  free_reference(rb, 25);
}

/* Shardings on 1-D and 2-D meshes, one spec for x, uneven batches, padding. */
static void test_sharded(const ts_source *src) {
  const int NB = 14; /* 100 samples, batch 10 (pad) / 10 (drop): crosses an epoch */
  ts_mesh *m1 = ts_mesh_parse("4", "data", NULL);
  ts_mesh *m2 = ts_mesh_parse("2,2", "data,model", NULL);
  ts_mesh *m3 = ts_mesh_parse("3", "data", NULL);
  CHECK(m1 && m2 && m3, "%s", ts_last_error());
  for (int pad = 0; pad < 2; pad++) {
    for (int64_t B = 8; B <= 10; B += 2) { /* 8: even over 4 devices; 10: uneven (3,3,3,1) */
      ts_loader_options o = base_opts(B);
      o.last_batch = pad ? TS_LAST_BATCH_PAD : TS_LAST_BATCH_DROP;
      gbatch *ref = reference(src, o, NB);
      char what[96];

      /* 1-D mesh, named inputs (mask defaults to y's sharding). */
      ts_sharding *x1 = make_sharding(m1, "data,None,None,None", 4), *y1 = make_sharding(m1, "data", 1);
      ts_input_sharding in1[2] = {{"x", x1}, {"y", y1}};
      o.mesh = m1, o.n_inputs = 2, o.inputs = in1;
      const ts_sharding *sh1[3] = {x1, y1, y1};
      snprintf(what, sizeof what, "1-D mesh batch %lld pad %d", (long long)B, pad);
      check_sharded_run(src, o, sh1, ref, NB, what);

      /* 2-D mesh: batch over data, image rows over model; y, mask over data. */
      ts_sharding *x2 = make_sharding(m2, "data,None,model,None", 4), *y2 = make_sharding(m2, "data", 1);
      ts_sharding *m2r = make_sharding(m2, "None", 1);
      ts_input_sharding in2[3] = {{"x", x2}, {"y", y2}, {"mask", m2r}};
      o.mesh = m2, o.n_inputs = 3, o.inputs = in2;
      const ts_sharding *sh2[3] = {x2, y2, m2r};
      snprintf(what, sizeof what, "2-D mesh batch %lld pad %d", (long long)B, pad);
      check_sharded_run(src, o, sh2, ref, NB, what);

      /* 2-D mesh, batch over both axes (data+model), one spec for x. */
      ts_sharding *x3 = make_sharding(m2, "data+model,None,None,None", 4), *y3 = make_sharding(m2, "data+model", 1);
      ts_input_sharding in3[1] = {{NULL, x3}};
      o.mesh = m2, o.n_inputs = 1, o.inputs = in3;
      const ts_sharding *sh3[3] = {x3, y3, y3};
      snprintf(what, sizeof what, "2-D mesh data+model, one spec, batch %lld pad %d", (long long)B, pad);
      check_sharded_run(src, o, sh3, ref, NB, what);

      /* 3 devices: uneven for both batch sizes; channel dim split too. */
      ts_sharding *x4 = make_sharding(m3, "data,None,None,None", 4), *y4 = make_sharding(m3, "data", 1);
      ts_input_sharding in4[2] = {{"y", y4}, {"x", x4}};
      o.mesh = m3, o.n_inputs = 2, o.inputs = in4;
      const ts_sharding *sh4[3] = {x4, y4, y4};
      snprintf(what, sizeof what, "3 devices batch %lld pad %d", (long long)B, pad);
      check_sharded_run(src, o, sh4, ref, NB, what);

      ts_sharding *all[] = {x1, y1, x2, y2, m2r, x3, y3, x4, y4};
      for (size_t i = 0; i < sizeof all / sizeof *all; i++) ts_sharding_free(all[i]);
      free_reference(ref, NB);
    }
  }
  ts_mesh_free(m1);
  ts_mesh_free(m2);
  ts_mesh_free(m3);
}

/* Simulated processes of a 4-device mesh, in both load modes: two (2
 * devices each) and three (the runtime's uneven split: 2, 1, 1). Each
 * device's block matches the global batch; minibatch mode decodes only the
 * rows of the process's devices. */
static void test_multiprocess(const ts_source *src) {
  const int NB = 12;
  ts_mesh *m = ts_mesh_parse("4", "data", NULL);
  ts_mesh *m2 = ts_mesh_parse("2,2", "data,model", NULL);
  ts_sharding *x = make_sharding(m, "data,None,None,None", 4), *y = make_sharding(m, "data", 1);
  ts_input_sharding in[2] = {{"x", x}, {"y", y}};
  const ts_sharding *sh[3] = {x, y, y};
  for (int pad = 0; pad < 2; pad++) {
    ts_loader_options o = base_opts(12);
    o.last_batch = pad ? TS_LAST_BATCH_PAD : TS_LAST_BATCH_DROP;
    gbatch *ref = reference(src, o, NB);
    o.mesh = m, o.n_inputs = 2, o.inputs = in, o.process_count = 2;
    for (int mode = 0; mode < 2; mode++)
      for (int p = 0; p < 2; p++) {
        o.process_index = p;
        o.mode = mode ? TS_LOAD_MINIBATCH : TS_LOAD_GLOBAL;
        char what[96];
        snprintf(what, sizeof what, "process %d of 2, %s, pad %d", p, mode ? "minibatch" : "global", pad);
        check_sharded_run(src, o, sh, ref, NB, what);
        ts_loader *l = ts_loader_new(src, &o);
        const int *ids;
        CHECK(l && ts_loader_local_devices(l, &ids) == 2 && ids[0] == 2 * p && ids[1] == 2 * p + 1,
              "%s: local devices", what);
        const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
        int64_t row0 = -1, rows = b ? ts_batch_local_rows(b, &row0, NULL, NULL, NULL) : -1;
        CHECK(mode ? (rows == 6 && row0 == 6 * p) : (rows == 12 && row0 == 0),
              "%s: decodes rows [%lld, +%lld)", what, (long long)row0, (long long)rows);
        ts_loader_free(l);
      }
    /* Three processes: devices {0,1}, {2}, {3}. On the 1-D mesh the batch's
     * quarters go 2, 1, 1; on the 2-D mesh (batch over "data" only) process 0
     * holds data block 0 and processes 1 and 2 both hold data block 1. */
    ts_sharding *x2 = make_sharding(m2, "data,None,None,None", 4), *y2 = make_sharding(m2, "data", 1);
    ts_input_sharding in2[2] = {{"x", x2}, {"y", y2}};
    const ts_sharding *sh2[3] = {x2, y2, y2};
    static const int64_t first_dev[3] = {0, 2, 3}, n_dev[3] = {2, 1, 1};
    static const int64_t rows_1d[3][2] = {{0, 6}, {6, 3}, {9, 3}}, rows_2d[3][2] = {{0, 6}, {6, 6}, {6, 6}};
    o.process_count = 3;
    for (int mesh2 = 0; mesh2 < 2; mesh2++)
      for (int mode = 0; mode < 2; mode++)
        for (int p = 0; p < 3; p++) {
          o.mesh = mesh2 ? m2 : m, o.inputs = mesh2 ? in2 : in;
          o.process_index = p;
          o.mode = mode ? TS_LOAD_MINIBATCH : TS_LOAD_GLOBAL;
          char what[96];
          snprintf(what, sizeof what, "process %d of 3, %s mesh, %s, pad %d", p, mesh2 ? "2-D" : "1-D",
                   mode ? "minibatch" : "global", pad);
          check_sharded_run(src, o, mesh2 ? sh2 : sh, ref, NB, what);
          ts_loader *l = ts_loader_new(src, &o);
          const int *ids;
          int nd = l ? ts_loader_local_devices(l, &ids) : 0;
          CHECK(l && nd == n_dev[p] && ids[0] == first_dev[p] && ids[nd - 1] == first_dev[p] + nd - 1,
                "%s: local devices", what);
          const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
          int64_t row0 = -1, rows = b ? ts_batch_local_rows(b, &row0, NULL, NULL, NULL) : -1;
          const int64_t *want = mesh2 ? rows_2d[p] : rows_1d[p];
          CHECK(mode ? (row0 == want[0] && rows == want[1]) : (rows == 12 && row0 == 0),
                "%s: decodes rows [%lld, +%lld)", what, (long long)row0, (long long)rows);
          ts_loader_free(l);
        }
    ts_sharding_free(x2);
    ts_sharding_free(y2);
    free_reference(ref, NB);
  }
  /* Minibatch errors: batch not divisible by processes, nor by local devices. */
  ts_loader_options o = base_opts(13);
  o.mesh = m, o.n_inputs = 2, o.inputs = in, o.process_count = 2, o.mode = TS_LOAD_MINIBATCH;
  ts_loader *l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "global batch 13 does not divide over 2 processes"), "'%s'",
        ts_last_error());
  o.batch = 10; /* 5 per process over 2 local devices */
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "per-process batch 5") && strstr(ts_last_error(), "2 local devices"),
        "'%s'", ts_last_error());
  o.mode = TS_LOAD_GLOBAL; /* fine in global mode (uneven blocks) */
  l = ts_loader_new(src, &o);
  CHECK(l != NULL, "global mode with batch 10: %s", ts_last_error());
  ts_loader_free(l);
  /* A batch split over the model axis only: process 0's devices need all rows. */
  ts_sharding *xm = make_sharding(m2, "model,None,None,None", 4), *ym = make_sharding(m2, "model", 1);
  ts_input_sharding inm[2] = {{"x", xm}, {"y", ym}};
  o = base_opts(8);
  o.mesh = m2, o.n_inputs = 2, o.inputs = inm, o.process_count = 2, o.mode = TS_LOAD_MINIBATCH;
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "needs batch rows"), "'%s'", ts_last_error());
  /* 4 devices over 3 processes used to be an error; the split is now the
   * runtime's (2, 1, 1), and the model-only batch still needs all rows in
   * process 0 (and every process reports it, not only process 0). */
  o.batch = 12, o.process_count = 3, o.process_index = 2;
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "process 0 needs batch rows [0, 12) of input 'x'"), "'%s'", ts_last_error());
  o.batch = 8;
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "global batch 8 does not divide over 3 processes"), "'%s'", ts_last_error());
  o.batch = 9; /* 3 per process, but 9 rows do not split into the model axis's 2 blocks */
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "global batch 9 does not divide into the 2 batch blocks of input 'x'"),
        "'%s'", ts_last_error());
  o.mode = TS_LOAD_GLOBAL;
  l = ts_loader_new(src, &o);
  CHECK(l != NULL, "global mode over 3 processes: %s", ts_last_error());
  ts_loader_free(l);
  /* A replicated mask: every process would need the whole batch. */
  ts_sharding *mr = make_sharding(m, "None", 1);
  ts_input_sharding inr[3] = {{"x", x}, {"y", y}, {"mask", mr}};
  o = base_opts(8);
  o.mesh = m, o.n_inputs = 3, o.inputs = inr, o.process_count = 2, o.mode = TS_LOAD_MINIBATCH;
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "needs batch rows [0, 8) of input 'mask'"), "'%s'", ts_last_error());
  /* Fewer devices than processes. */
  o.n_inputs = 2, o.inputs = in, o.process_count = 5, o.batch = 10;
  l = ts_loader_new(src, &o);
  CHECK(!l && strstr(ts_last_error(), "4 devices are fewer than the 5 processes"), "'%s'", ts_last_error());
  ts_sharding_free(mr);
  ts_sharding_free(xm);
  ts_sharding_free(ym);
  ts_sharding_free(x);
  ts_sharding_free(y);
  ts_mesh_free(m);
  ts_mesh_free(m2);
}

static void test_sharding_errors(const ts_source *src) {
  ts_mesh *m = ts_mesh_parse("2", "data", NULL);
  ts_sharding *x = make_sharding(m, "data,None,None,None", 4), *y = make_sharding(m, "data", 1);
  ts_sharding *y2 = make_sharding(m, "data,None", 2);
  ts_loader_options o = base_opts(8);
  o.mesh = m;
  ts_input_sharding only_x[1] = {{"x", x}};
  o.n_inputs = 1, o.inputs = only_x;
  CHECK(!ts_loader_new(src, &o) && strstr(ts_last_error(), "no sharding for input 'y'"), "missing y: '%s'",
        ts_last_error());
  ts_input_sharding wrong_rank[2] = {{"x", x}, {"y", y2}};
  o.n_inputs = 2, o.inputs = wrong_rank;
  CHECK(!ts_loader_new(src, &o) && strstr(ts_last_error(), "sharding for input 'y' has rank 2") &&
            strstr(ts_last_error(), "is rank 1"),
        "wrong rank: '%s'", ts_last_error());
  ts_input_sharding x_rank1[1] = {{NULL, y}};
  o.n_inputs = 1, o.inputs = x_rank1;
  CHECK(!ts_loader_new(src, &o) && strstr(ts_last_error(), "input 'x' has rank 1"), "one spec of rank 1: '%s'",
        ts_last_error());
  ts_input_sharding unknown[3] = {{"x", x}, {"y", y}, {"labels", y}};
  o.n_inputs = 3, o.inputs = unknown;
  CHECK(!ts_loader_new(src, &o) && strstr(ts_last_error(), "'labels'"), "unknown name: '%s'", ts_last_error());
  o.n_inputs = 0, o.inputs = NULL;
  CHECK(!ts_loader_new(src, &o) && strstr(ts_last_error(), "no input shardings"), "none: '%s'", ts_last_error());
  ts_input_sharding ok[2] = {{"x", x}, {"y", y}};
  o.n_inputs = 2, o.inputs = ok;
  ts_loader *l = ts_loader_new(src, &o);
  const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
  ts_shard_view v;
  CHECK(b && ts_batch_shard(b, "x", 5, &v) == -1 && strstr(ts_last_error(), "device 5"), "foreign device: '%s'",
        ts_last_error());
  CHECK(b && ts_batch_shard(b, "z", 0, &v) == -1 && strstr(ts_last_error(), "'z'"), "unknown input: '%s'",
        ts_last_error());
  ts_loader_free(l);
  ts_sharding_free(x);
  ts_sharding_free(y);
  ts_sharding_free(y2);
  ts_mesh_free(m);
}

/* Save after k batches, keep going; a fresh loader restored from the state
 * (blob and file) yields exactly the batches the first one went on to give. */
static void test_resume(const ts_source *src, const char *dir) {
  for (int pad = 0; pad < 2; pad++) {
    ts_loader_options o = base_opts(16);
    o.last_batch = pad ? TS_LAST_BATCH_PAD : TS_LAST_BATCH_DROP;
    o.workers = 3, o.prefetch = 3;
    ts_loader *a = ts_loader_new(src, &o);
    CHECK(a != NULL, "%s", ts_last_error());
    if (!a) return;
    const int K = 5, M = 9; /* 6-7 steps per epoch: M crosses an epoch boundary */
    for (int i = 0; i < K; i++) ts_loader_next(a);
    uint8_t st[TS_LOADER_STATE_BYTES];
    CHECK_OK(ts_loader_save(a, st));
    char path[512];
    snprintf(path, sizeof path, "%s/loader.state", dir);
    CHECK_OK(ts_loader_save_file(a, path));
    gbatch *cont = calloc(M, sizeof *cont);
    for (int i = 0; i < M; i++) gbatch_take(&cont[i], ts_loader_next(a), 16);

    for (int via_file = 0; via_file < 2; via_file++) {
      ts_loader_options o2 = o;
      o2.workers = 1, o2.prefetch = 2;
      ts_loader *r = ts_loader_new(src, &o2);
      ts_loader_next(r); /* some batches in flight that restore must drop */
      CHECK_OK(via_file ? ts_loader_restore_file(r, path) : ts_loader_restore(r, st));
      int diff = 0;
      for (int i = 0; i < M; i++) {
        const ts_loader_batch *b = ts_loader_next(r);
        const float *x, *mask;
        const int32_t *y;
        ts_batch_local_rows(b, NULL, &x, &y, &mask);
        diff += ts_batch_epoch(b) != cont[i].epoch || ts_batch_step(b) != cont[i].step ||
                memcmp(x, cont[i].x, 16 * SAMPLE * sizeof *x) != 0 || memcmp(y, cont[i].y, 16 * sizeof *y) != 0 ||
                memcmp(mask, cont[i].mask, 16 * sizeof *mask) != 0;
      }
      CHECK(diff == 0, "resume (%s, pad %d): %d of %d batches differ from the uninterrupted run",
            via_file ? "file" : "blob", pad, diff, M);
      ts_loader_free(r);
    }
    /* Same position saved twice: the second loader, restored twice, agrees. */
    uint8_t bad[TS_LOADER_STATE_BYTES];
    memcpy(bad, st, sizeof bad);
    bad[20] ^= 1;
    CHECK(ts_loader_restore(a, bad) == -1 && strstr(ts_last_error(), "checksum"), "corrupt state: '%s'",
          ts_last_error());
    ts_loader_options o3 = o;
    o3.batch = 8;
    ts_loader *c = ts_loader_new(src, &o3);
    CHECK(ts_loader_restore(c, st) == -1 && strstr(ts_last_error(), "batch 16"), "other batch: '%s'",
          ts_last_error());
    ts_loader_free(c);
    CHECK(ts_loader_restore_file(a, "/nonexistent/state") == -1 && strstr(ts_last_error(), "/nonexistent/state"),
          "missing file: '%s'", ts_last_error());
    for (int i = 0; i < M; i++) gbatch_free(&cont[i]);
    free(cont);
    unlink(path);
    ts_loader_free(a);
  }
}

/* A user-defined source (the interface is a struct of function pointers)
 * whose sample 13 cannot be read: the batch holding it fails with the
 * source's message, and the loader still shuts down cleanly. */
static int failing_get(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label) {
  (void)s;
  if (i == 13) return set_error("failing source: sample 13 is unreadable");
  memset(pixels, (int)i, SAMPLE);
  *label = (int32_t)(i % 4);
  return 0;
}

static void test_source_error(void) {
  ts_source s = {.name = "failing", .n = 40, .c = C, .h = H, .w = W, .num_classes = 4, .get = failing_get};
  ts_loader_options o = base_opts(8);
  o.no_shuffle = true;
  ts_loader *l = ts_loader_new(&s, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
  CHECK(b && ts_batch_sample_index(b, 7) == 7, "first batch of the failing source");
  b = l ? ts_loader_next(l) : NULL;
  CHECK(!b && strstr(ts_last_error(), "sample 13 is unreadable"), "failing batch: '%s'", ts_last_error());
  b = l ? ts_loader_next(l) : NULL;
  CHECK(!b, "the error is sticky");
  ts_loader_free(l);
}

/* Prefetching overlaps reading with the step, deterministically: while the
 * consumer holds batch i (its "step"), the workers read the samples of
 * batches i+1 .. i+prefetch without the consumer calling the loader, and no
 * further (the ring is bounded). The source counts the samples read under a
 * lock and signals a condition variable; after each ts_loader_next the test
 * waits, without touching the loader, until the count reaches the end of
 * batch i + prefetch, then checks it stays there. A loader that reads only
 * inside ts_loader_next never gets there: the wait gives up after 60 s and
 * fails (a guard against hanging, not a time measurement). No sample is read
 * on the consumer's thread. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t read;        /* samples read so far */
  int64_t on_consumer; /* of which on the consumer's thread */
  pthread_t consumer;
} g_reads = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static int counting_get(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label) {
  (void)s;
  memset(pixels, (int)i, SAMPLE);
  *label = 0;
  pthread_mutex_lock(&g_reads.mu);
  g_reads.read++;
  g_reads.on_consumer += pthread_equal(pthread_self(), g_reads.consumer) != 0;
  pthread_cond_broadcast(&g_reads.cv); /* wakes the consumer waiting for a count */
  pthread_mutex_unlock(&g_reads.mu);
  return 0;
}

/* Waits until at least `want` samples were read (or 60 s passed); returns the count. */
static int64_t wait_reads(int64_t want) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 60;
  pthread_mutex_lock(&g_reads.mu);
  while (g_reads.read < want && pthread_cond_timedwait(&g_reads.cv, &g_reads.mu, &deadline) == 0) {
  }
  int64_t n = g_reads.read;
  pthread_mutex_unlock(&g_reads.mu);
  return n;
}

static void test_overlap(void) {
  enum { BATCH = 4, PREFETCH = 2, STEPS = 12 }; /* 64 samples: 16 batches, one epoch */
  ts_source s = {.name = "counting", .n = 64, .c = C, .h = H, .w = W, .num_classes = 1, .get = counting_get};
  ts_loader_options o = base_opts(BATCH);
  o.workers = 1, o.prefetch = PREFETCH;
  g_reads.consumer = pthread_self();
  ts_loader *l = ts_loader_new(&s, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  for (int i = 0; l && i < STEPS; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(b != NULL && ts_batch_step(b) == i, "batch %d: %s", i, ts_last_error());
    /* the step: batches i+1 .. i+PREFETCH are read meanwhile */
    int64_t want = (int64_t)(i + 1 + PREFETCH) * BATCH;
    int64_t got = wait_reads(want);
    CHECK(got >= want, "holding batch %d, the workers read %lld samples; batches up to %d (%lld samples) should "
          "be prefetched", i, (long long)got, i + PREFETCH, (long long)want);
    if (got < want) break;
    /* ...and no further than the ring allows, until the consumer moves on.
     * The worker, blocked on the claim window, cannot add to the count; a
     * loader that reads ahead without bound would have exceeded it here. */
    CHECK(got == want, "holding batch %d, %lld samples read: more than %d batches ahead", i, (long long)got,
          PREFETCH);
  }
  pthread_mutex_lock(&g_reads.mu);
  CHECK(g_reads.on_consumer == 0, "%lld samples were read on the consumer's thread", (long long)g_reads.on_consumer);
  pthread_mutex_unlock(&g_reads.mu);
  ts_loader_free(l);
}

/* Placement through the runtime: each device of a 4-device client holds
 * exactly the loader's block (uneven batch: 3, 3, 3, 1 rows). */
static void test_upload(const ts_source *src) {
  ts_client_options co = {.num_threads = 2, .num_devices = 4};
  ts_client *c = ts_client_new(&co);
  ts_mesh *m = ts_mesh_parse("4", "data", NULL);
  ts_sharding *x = make_sharding(m, "data,None,None,None", 4), *y = make_sharding(m, "data", 1);
  CHECK(c && ts_client_num_devices(c) == 4, "4-device client: %s", ts_last_error());
  ts_loader_options o = base_opts(10);
  ts_input_sharding in[2] = {{"x", x}, {"y", y}};
  o.mesh = m, o.n_inputs = 2, o.inputs = in;
  ts_loader *l = ts_loader_new(src, &o);
  int64_t xs[4] = {10, C, H, W}, ys[1] = {10};
  float *zeros = calloc(10 * SAMPLE, sizeof *zeros);
  ts_buffer *xb = c ? ts_buffer_from_host_sharded(c, TS_F32, 4, xs, zeros, x) : NULL;
  ts_buffer *yb = c ? ts_buffer_from_host_sharded(c, TS_I32, 1, ys, zeros, y) : NULL;
  CHECK(l && xb && yb, "%s", ts_last_error());
  for (int i = 0; l && xb && yb && i < 3; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK_OK(ts_batch_upload(b, "x", xb));
    CHECK_OK(ts_batch_upload(b, "y", yb));
    for (int d = 0; d < 4; d++) {
      ts_shard_view v;
      ts_batch_shard(b, "x", d, &v);
      int64_t rows = v.limit[0] - v.start[0];
      float *got = malloc((size_t)(rows ? rows : 1) * SAMPLE * sizeof *got);
      CHECK_OK(ts_buffer_read_shard(xb, d, got, (size_t)rows * SAMPLE * sizeof *got));
      CHECK(memcmp(got, v.data, (size_t)rows * SAMPLE * sizeof *got) == 0, "device %d: x block differs", d);
      ts_batch_shard(b, "y", d, &v);
      int32_t yg[3];
      CHECK_OK(ts_buffer_read_shard(yb, d, yg, (size_t)rows * sizeof *yg));
      CHECK(memcmp(yg, v.data, (size_t)rows * sizeof *yg) == 0, "device %d: y block differs", d);
      free(got);
    }
  }
  if (l && yb) {
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(ts_batch_upload(b, "x", yb) == -1 && strstr(ts_last_error(), "not f32 (B, C, H, W)"),
          "wrong buffer: '%s'", ts_last_error());
  }
  free(zeros);
  if (xb) ts_buffer_free(xb);
  if (yb) ts_buffer_free(yb);
  ts_loader_free(l);
  ts_sharding_free(x);
  ts_sharding_free(y);
  ts_mesh_free(m);
  if (c) ts_client_free(c);
}

/* Minibatch uploads, the processes simulated on one 4-device client (every
 * device is local, so each simulated process's loader writes its devices'
 * blocks into the same buffers): after all of them have uploaded a batch,
 * the buffers hold exactly the global batch of an unsharded loader. 2 and 3
 * processes (devices 2+2 and 2+1+1), a 1-D mesh and a 2-D mesh whose x also
 * splits the 3 channels over "model" (blocks of 2: the second is padded, so
 * the upload packs it); 10 batches of 12 over 100 samples, the 9th padded. */
static void test_upload_minibatch(const ts_source *src) {
  enum { B = 12, NB = 10 };
  ts_client_options co = {.num_threads = 2, .num_devices = 4};
  ts_client *c = ts_client_new(&co);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return;
  ts_mesh *m1 = ts_mesh_parse("4", "data", NULL), *m2 = ts_mesh_parse("2,2", "data,model", NULL);
  ts_loader_options base = base_opts(B);
  base.last_batch = TS_LAST_BATCH_PAD;
  gbatch *ref = reference(src, base, NB);
  int64_t xs[4] = {B, C, H, W}, ys[1] = {B};
  size_t xbytes = (size_t)B * SAMPLE * sizeof(float);
  uint8_t *junk = malloc(xbytes), *got = malloc(xbytes);
  memset(junk, 0xff, xbytes);
  for (int mesh2 = 0; mesh2 < 2; mesh2++)
    for (int P = 2; P <= 3; P++) {
      ts_mesh *m = mesh2 ? m2 : m1;
      ts_sharding *x = make_sharding(m, mesh2 ? "data,model,None,None" : "data,None,None,None", 4);
      ts_sharding *y = make_sharding(m, "data", 1);
      ts_input_sharding in[2] = {{"x", x}, {"y", y}};
      ts_buffer *xb = ts_buffer_from_host_sharded(c, TS_F32, 4, xs, junk, x);
      ts_buffer *yb = ts_buffer_from_host_sharded(c, TS_I32, 1, ys, junk, y);
      ts_buffer *mb = ts_buffer_from_host_sharded(c, TS_F32, 1, ys, junk, y);
      ts_loader *l[3] = {NULL, NULL, NULL};
      ts_loader_options o = base;
      o.mesh = m, o.n_inputs = 2, o.inputs = in, o.process_count = P, o.mode = TS_LOAD_MINIBATCH;
      bool ok = xb && yb && mb;
      for (int p = 0; p < P; p++) {
        o.process_index = p;
        ok = (l[p] = ts_loader_new(src, &o)) != NULL && ok;
      }
      char what[64];
      snprintf(what, sizeof what, "minibatch upload, %s mesh, %d processes", mesh2 ? "2-D" : "1-D", P);
      CHECK(ok, "%s: %s", what, ts_last_error());
      int64_t bad = 0;
      for (int i = 0; ok && i < NB; i++) {
        for (int p = 0; p < P; p++) {
          const ts_loader_batch *b = ts_loader_next(l[p]);
          CHECK(b != NULL, "%s: %s", what, ts_last_error());
          if (!b) break;
          CHECK_OK(ts_batch_upload(b, "x", xb));
          CHECK_OK(ts_batch_upload(b, "y", yb));
          CHECK_OK(ts_batch_upload(b, "mask", mb));
        }
        CHECK_OK(ts_buffer_read(xb, got, xbytes));
        bad += memcmp(got, ref[i].x, xbytes) != 0;
        CHECK_OK(ts_buffer_read(yb, got, B * sizeof(int32_t)));
        bad += memcmp(got, ref[i].y, B * sizeof(int32_t)) != 0;
        CHECK_OK(ts_buffer_read(mb, got, B * sizeof(float)));
        bad += memcmp(got, ref[i].mask, B * sizeof(float)) != 0;
      }
      CHECK(bad == 0, "%s: %lld of %d inputs differ from the unsharded loader's batch", what, (long long)bad,
            3 * NB);
      /* A buffer laid out otherwise: the loader cannot reshard rows it lacks. */
      if (ok) {
        ts_buffer *rep = ts_buffer_from_host(c, TS_I32, 1, ys, junk);
        const ts_loader_batch *b = ts_loader_next(l[0]);
        CHECK(b && ts_batch_upload(b, "y", rep) == -1 && strstr(ts_last_error(), "buffer for 'y' has sharding "
                                                                               "{replicated}") &&
                  strstr(ts_last_error(), "cannot reshard"),
              "%s: replicated buffer: '%s'", what, ts_last_error());
        if (rep) ts_buffer_free(rep);
      }
      for (int p = 0; p < P; p++) ts_loader_free(l[p]);
      if (xb) ts_buffer_free(xb);
      if (yb) ts_buffer_free(yb);
      if (mb) ts_buffer_free(mb);
      ts_sharding_free(x);
      ts_sharding_free(y);
    }
  free(junk);
  free(got);
  free_reference(ref, NB);
  ts_mesh_free(m1);
  ts_mesh_free(m2);
  ts_client_free(c);
}

static void test_progress(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/progress.txt", dir);
  for (int bar = 0; bar < 2; bar++) {
    FILE *f = fopen(path, "w+");
    ts_progress *p = ts_progress_new(f, bar ? TS_PROGRESS_BAR : TS_PROGRESS_LINES, "epoch 1", 1000, 1e-9);
    for (int i = 1; i <= 10; i++) ts_progress_update(p, i * 100, "loss 0.5");
    ts_progress_finish(p, "loss 0.25");
    fseek(f, 0, SEEK_SET);
    char text[8192] = {0};
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CHECK(n > 0 && strstr(text, "epoch 1") && strstr(text, "samples/s") && strstr(text, "loss 0.25"),
          "progress output: '%s'", text);
    if (bar) CHECK(strchr(text, '\r') && strstr(text, "[####"), "bar mode draws a bar in place: '%s'", text);
    else CHECK(!strchr(text, '\r') && strstr(text, "1000/1000 (100%)") && strstr(text, "eta"),
               "lines mode: '%s'", text);
  }
  unlink(path);
}

int main(void) {
  ts_test_init("loader", 7);
  char dir[] = "/tmp/tessel_loader_XXXXXX";
  if (!mkdtemp(dir)) return 2;
  ts_dataset d = make_dataset(100, ts_test_seed);
  ts_source *src = ts_source_from_dataset(&d, "test data");
  test_unsharded(&d, src);
  test_workers_invariance(src);
  test_sharded(src);
  test_multiprocess(src);
  test_sharding_errors(src);
  test_resume(src, dir);
  test_source_error();
  test_overlap();
  test_upload(src);
  test_upload_minibatch(src);
  test_progress(dir);
  ts_source_free(src);
  ts_dataset_free(&d);
  rmdir(dir);
  return ts_test_finish();
}
