/* test_text.c — token sources and token batches (tessel/loader.h):
 * the 90/10 split of a text file and the window of every sample (all 256
 * byte values, not UTF-8: bytes are bytes); y is x shifted by one; the same
 * seed gives the same batches and another seed others; an epoch visits every
 * slot once; a loader restored mid-epoch continues with the same batches
 * (across the epoch boundary); validation windows sit at fixed positions,
 * at every epoch and after a seek; a token loader on a 2-device mesh cuts x
 * and y like slicing the global batch, also per process (minibatch);
 * synthetic tokens are seeded and in range; errors: empty, too short (either
 * split) and missing files name the file, its size and the need; image and
 * token accessors refuse the other kind; bench/text_data.py (for PyTorch
 * scripts) reproduces the training and validation batches exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* mkdtemp, unlink, rmdir */

#include "harness.h"
#include "tessel/loader.h"
#include "tessel/tessel.h"
#include "util/prng.h"

enum { T = 16, B = 4 };

static char dir[64], path[128];

/* A file of n bytes covering every byte value (0x00, 0xff, lone UTF-8
 * continuation bytes...), in a seeded order. */
static uint8_t *write_file(const char *p, int64_t n, uint64_t seed) {
  uint8_t *bytes = malloc((size_t)n + 1);
  ts_prng r;
  ts_prng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) bytes[i] = i < 256 ? (uint8_t)(255 - i) : (uint8_t)ts_prng_next(&r);
  FILE *f = fopen(p, "wb");
  CHECK(f && fwrite(bytes, 1, (size_t)n, f) == (size_t)n && fclose(f) == 0, "cannot write %s", p);
  return bytes;
}

static ts_source *text(const char *p, ts_text_split split, int seq, int64_t windows, uint64_t seed) {
  ts_text_options o = {.path = p, .seq = seq, .split = split, .windows = windows, .seed = seed};
  return ts_source_text(&o);
}

/* Copies of n batches' x and y (B * T each) and sample indices (B). */
typedef struct {
  int32_t x[B * T], y[B * T];
  int64_t index[B];
} tbatch;

static void take(ts_loader *l, tbatch *out, int n) {
  for (int i = 0; i < n; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    const int32_t *x = NULL, *y = NULL;
    int64_t row0 = -1, rows = b ? ts_batch_local_tokens(b, &row0, &x, &y, NULL) : -1;
    CHECK(rows == B && row0 == 0, "batch %d: rows %lld from %lld: %s", i, (long long)rows, (long long)row0,
          ts_last_error());
    if (rows != B) return;
    memcpy(out[i].x, x, sizeof out[i].x);
    memcpy(out[i].y, y, sizeof out[i].y);
    for (int r = 0; r < B; r++) out[i].index[r] = ts_batch_sample_index(b, r);
  }
}

/* The split, each training window in its slot of the training bytes, and y = x shifted. */
static void test_split_and_windows(void) {
  int64_t n = 10007, ntrain = n * 9 / 10;
  uint8_t *bytes = write_file(path, n, 7);
  CHECK(ts_text_train_bytes(n) == ntrain && ts_text_train_bytes(10) == 9 && ts_text_train_bytes(0) == 0,
        "train bytes of %lld: %lld", (long long)n, (long long)ts_text_train_bytes(n));
  ts_source *tr = text(path, TS_TEXT_TRAIN, T, 0, 0);
  ts_source *va = text(path, TS_TEXT_VALID, T, 10, 5);
  CHECK(tr && va, "%s", ts_last_error());
  if (!tr || !va) goto done;
  CHECK(tr->seq == T && tr->vocab == 256 && tr->n == (ntrain - 1) / T && va->n == 10 && va->seq == T,
        "train n %lld (want %lld), valid n %lld", (long long)tr->n, (long long)(ntrain - 1) / T, (long long)va->n);
  CHECK(strstr(tr->name, path) && strstr(tr->name, "train") && strstr(va->name, "valid"), "names '%s' '%s'",
        tr->name, va->name);
  /* every slot, several keys: the window is the file's bytes at a start in
   * the slot, inside the training split */
  int32_t tok[T + 1];
  int64_t bad = 0, max_start = 0;
  bool seen[256] = {false};
  for (int64_t i = 0; i < tr->n; i++)
    for (uint64_t key = 0; key < 40; key += 3) {
      CHECK_OK(tr->get_tokens(tr, i, key * 0x9e3779b97f4a7c15ull, tok));
      int64_t found = -1;
      for (int64_t s = i * T; s < i * T + T && s + T + 1 <= ntrain && found < 0; s++) {
        bool eq = true;
        for (int k = 0; k <= T && eq; k++) eq = tok[k] == bytes[s + k];
        if (eq) found = s;
      }
      bad += found < 0;
      if (found > max_start) max_start = found;
      for (int k = 0; k <= T; k++) seen[tok[k]] = true;
    }
  CHECK(bad == 0, "%lld training windows are not the file's bytes in their slot", (long long)bad);
  CHECK(max_start + T + 1 <= ntrain && max_start > ntrain - 3 * T, "last window start %lld of %lld bytes",
        (long long)max_start, (long long)ntrain);
  int nseen = 0;
  for (int v = 0; v < 256; v++) nseen += seen[v];
  CHECK(nseen == 256, "only %d of the 256 byte values came through", nseen);
  /* validation sample i: at ts_text_valid_start in the last 10% */
  bad = 0;
  for (int64_t i = 0; i < va->n; i++) {
    int64_t s = ts_text_valid_start(5, i, n - ntrain, T);
    CHECK_OK(va->get_tokens(va, i, (uint64_t)i * 77, tok));
    bad += s < 0 || s + T + 1 > n - ntrain;
    for (int k = 0; k <= T; k++) bad += tok[k] != bytes[ntrain + s + k];
  }
  CHECK(bad == 0, "%lld validation bytes differ from the file", (long long)bad);
  /* y is x shifted by one, through the loader */
  ts_loader_options o = {.batch = B, .seed = 3, .workers = 2, .prefetch = 2};
  ts_loader *l = ts_loader_new(tr, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  if (l) {
    tbatch tb[3];
    take(l, tb, 3);
    bad = 0;
    for (int i = 0; i < 3; i++)
      for (int r = 0; r < B; r++)
        for (int t = 0; t + 1 < T; t++) bad += tb[i].y[r * T + t] != tb[i].x[r * T + t + 1];
    CHECK(bad == 0, "%lld y tokens are not the next x token", (long long)bad);
    const float *fx = (const float *)1;
    const ts_loader_batch *b = ts_loader_next(l);
    CHECK(b && ts_batch_local_rows(b, NULL, &fx, NULL, NULL) == B && fx == NULL,
          "ts_batch_local_rows of a token batch gives x NULL");
    ts_loader_free(l);
  }
done:
  ts_source_free(tr);
  ts_source_free(va);
  free(bytes);
}

/* Same seed: the same batches; another: others; an epoch sees every slot once. */
static void test_determinism(void) {
  free(write_file(path, 4000, 11));
  ts_source *tr = text(path, TS_TEXT_TRAIN, T, 0, 0);
  CHECK(tr != NULL, "%s", ts_last_error());
  if (!tr) return;
  int64_t spe = tr->n / B; /* 3600 bytes: 224 slots, 56 batches */
  enum { NBT = 60 };
  static tbatch a[NBT], b[NBT], c[NBT];
  ts_loader_options o = {.batch = B, .seed = 42, .workers = 1, .prefetch = 1};
  ts_loader *l1 = ts_loader_new(tr, &o);
  o.workers = 3, o.prefetch = 4;
  ts_loader *l2 = ts_loader_new(tr, &o);
  o.seed = 43;
  ts_loader *l3 = ts_loader_new(tr, &o);
  CHECK(l1 && l2 && l3, "%s", ts_last_error());
  if (l1 && l2 && l3) {
    take(l1, a, NBT);
    take(l2, b, NBT);
    take(l3, c, NBT);
    CHECK(memcmp(a, b, sizeof a) == 0, "the same seed gave different batches (workers 1 vs 3)");
    CHECK(memcmp(a, c, sizeof a) != 0, "seeds 42 and 43 gave the same batches");
    bool *hit = calloc((size_t)tr->n, 1);
    int64_t dup = 0;
    for (int64_t i = 0; i < spe; i++)
      for (int r = 0; r < B; r++) {
        dup += hit[a[i].index[r]];
        hit[a[i].index[r]] = true;
      }
    CHECK(dup == 0 && spe * B <= tr->n, "%lld slots repeated within epoch 0", (long long)dup);
    /* epoch 1 visits the same slots in another order, at other offsets */
    CHECK(memcmp(a[spe].index, a[0].index, sizeof a[0].index) != 0 || memcmp(a[spe].x, a[0].x, sizeof a[0].x) != 0,
          "epoch 1 starts like epoch 0");
    free(hit);
  }
  ts_loader_free(l1);
  ts_loader_free(l2);
  ts_loader_free(l3);
  ts_source_free(tr);
}

/* A loader restored mid-epoch continues exactly (also from a file, and across the epoch boundary). */
static void test_resume(void) {
  free(write_file(path, 2000, 13));
  ts_source *tr = text(path, TS_TEXT_TRAIN, T, 0, 0); /* 1800 bytes: 112 slots, 28 batches */
  CHECK(tr != NULL, "%s", ts_last_error());
  if (!tr) return;
  enum { NBR = 40, CUT = 17 };
  static tbatch full[NBR], part[NBR];
  ts_loader_options o = {.batch = B, .seed = 5, .workers = 2, .prefetch = 3};
  ts_loader *l = ts_loader_new(tr, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  if (!l) goto done;
  take(l, full, NBR);
  ts_loader_free(l);
  l = ts_loader_new(tr, &o);
  take(l, part, CUT);
  char st[160];
  snprintf(st, sizeof st, "%s/loader.state", dir);
  CHECK_OK(ts_loader_save_file(l, st));
  ts_loader_free(l);
  l = ts_loader_new(tr, &o);
  take(l, part + CUT, 2); /* elsewhere first: the restore must move it back */
  CHECK_OK(ts_loader_restore_file(l, st));
  take(l, part + CUT, NBR - CUT);
  CHECK(memcmp(full, part, sizeof full) == 0, "the resumed loader's batches differ from the uninterrupted run");
  ts_loader_free(l);
  unlink(st);
done:
  ts_source_free(tr);
}

/* Validation batches are at fixed positions: every epoch, after a seek, and whatever the loader seed. */
static void test_validation_fixed(void) {
  free(write_file(path, 5000, 17));
  int64_t nb = 3;
  ts_source *va = text(path, TS_TEXT_VALID, T, nb * B, 0);
  CHECK(va != NULL, "%s", ts_last_error());
  if (!va) return;
  static tbatch a[9], b[3];
  ts_loader_options o = {.batch = B, .seed = 1, .no_shuffle = true, .workers = 2};
  ts_loader *l = ts_loader_new(va, &o);
  o.seed = 999;
  ts_loader *l2 = ts_loader_new(va, &o);
  CHECK(l && l2, "%s", ts_last_error());
  if (l && l2) {
    take(l, a, 9); /* three passes */
    CHECK(memcmp(a, a + 3, 3 * sizeof *a) == 0 && memcmp(a, a + 6, 3 * sizeof *a) == 0,
          "validation batches change between passes");
    CHECK_OK(ts_loader_seek(l2, 0, 1));
    take(l2, b, 2);
    CHECK(memcmp(b, a + 1, 2 * sizeof *a) == 0, "validation batches 1, 2 after a seek (other loader seed) differ");
    int64_t bad = 0;
    for (int r = 0; r < B; r++) bad += a[1].index[r] != B + r;
    CHECK(bad == 0, "validation batch 1 holds samples %lld.. (want %d..)", (long long)a[1].index[0], B);
  }
  ts_loader_free(l);
  ts_loader_free(l2);
  /* the same positions from a second source over the same file */
  ts_source *vb = text(path, TS_TEXT_VALID, T, nb * B, 0);
  int32_t t1[T + 1], t2[T + 1];
  CHECK(vb && va->get_tokens(va, 5, 1, t1) == 0 && vb->get_tokens(vb, 5, 12345, t2) == 0 &&
            memcmp(t1, t2, sizeof t1) == 0,
        "validation sample 5 differs between two sources (or keys)");
  ts_source_free(vb);
  ts_source_free(va);
}

static ts_sharding *sharding(const ts_mesh *m, const char *spec, int rank) {
  ts_partition_spec ps;
  if (ts_partition_spec_parse(m, spec, &ps) != 0) return NULL;
  return ts_sharding_new(m, &ps, rank);
}

/* On a data=2 mesh each device's x and y blocks are its half of the global
 * batch's rows; with 2 simulated processes (minibatch), process p decodes
 * only its half, the same as the global batch's. */
static void test_sharded(void) {
  free(write_file(path, 3000, 19));
  ts_source *tr = text(path, TS_TEXT_TRAIN, T, 0, 0);
  ts_mesh *m = ts_mesh_parse("2", "data", NULL);
  ts_sharding *sx = m ? sharding(m, "data,None", 2) : NULL;
  CHECK(tr && sx, "%s", ts_last_error());
  if (!tr || !sx) goto done;
  enum { NBS = 5 };
  static tbatch ref[NBS];
  ts_loader_options o = {.batch = B, .seed = 8, .workers = 2};
  ts_loader *l = ts_loader_new(tr, &o);
  take(l, ref, NBS);
  ts_loader_free(l);
  ts_input_sharding one = {NULL, sx};
  o.mesh = m, o.n_inputs = 1, o.inputs = &one;
  l = ts_loader_new(tr, &o);
  CHECK(l != NULL, "%s", ts_last_error());
  int64_t bad = 0;
  for (int i = 0; l && i < NBS; i++) {
    const ts_loader_batch *b = ts_loader_next(l);
    for (int d = 0; b && d < 2; d++)
      for (int k = 0; k < 2; k++) {
        ts_shard_view v;
        CHECK_OK(ts_batch_shard(b, k ? "y" : "x", d, &v));
        CHECK(v.dtype == TS_I32 && v.rank == 2 && v.shape[0] == B / 2 && v.shape[1] == T && v.start[0] == d * B / 2,
              "device %d %s block: rank %d shape (%lld, %lld) from %lld", d, k ? "y" : "x", v.rank,
              (long long)v.shape[0], (long long)v.shape[1], (long long)v.start[0]);
        const int32_t *want = (k ? ref[i].y : ref[i].x) + d * (B / 2) * T;
        bad += memcmp(v.data, want, (size_t)(B / 2) * T * sizeof(int32_t)) != 0;
      }
  }
  CHECK(bad == 0, "%lld device blocks differ from the global batch's rows", (long long)bad);
  ts_loader_free(l);
  /* two processes, one device each, each decoding only its rows */
  ts_input_sharding two[2] = {{"x", sx}, {"y", sx}};
  o.inputs = two, o.n_inputs = 2, o.process_count = 2, o.mode = TS_LOAD_MINIBATCH;
  bad = 0;
  for (int p = 0; p < 2; p++) {
    o.process_index = p;
    l = ts_loader_new(tr, &o);
    CHECK(l != NULL, "process %d: %s", p, ts_last_error());
    for (int i = 0; l && i < NBS; i++) {
      const ts_loader_batch *b = ts_loader_next(l);
      const int32_t *x, *y;
      int64_t row0 = -1, rows = b ? ts_batch_local_tokens(b, &row0, &x, &y, NULL) : -1;
      CHECK(rows == B / 2 && row0 == p * B / 2, "process %d rows [%lld, +%lld)", p, (long long)row0, (long long)rows);
      if (rows != B / 2) break;
      ts_shard_view mv;
      CHECK(ts_batch_shard(b, "mask", p, &mv) == 0 && mv.rank == 1 && mv.shape[0] == B / 2 && mv.start[0] == p * B / 2 &&
                ((const float *)mv.data)[0] == 1.0f,
            "process %d: the mask block (defaulting to y's batch dim) is rank %d, (%lld) from %lld", p, mv.rank,
            (long long)mv.shape[0], (long long)mv.start[0]);
      bad += memcmp(x, ref[i].x + row0 * T, (size_t)rows * T * 4) != 0;
      bad += memcmp(y, ref[i].y + row0 * T, (size_t)rows * T * 4) != 0;
    }
    ts_loader_free(l);
  }
  CHECK(bad == 0, "%lld minibatch row sets differ from the global batch", (long long)bad);
  /* a rank-1 sharding for x (B, T) is refused, naming the shapes */
  ts_sharding *s1 = sharding(m, "data", 1);
  ts_input_sharding bad_in[2] = {{"x", s1}, {"y", sx}};
  o = (ts_loader_options){.batch = B, .mesh = m, .n_inputs = 2, .inputs = bad_in};
  l = ts_loader_new(tr, &o);
  CHECK(!l && strstr(ts_last_error(), "(B, T)"), "rank-1 x sharding: '%s'", l ? "accepted" : ts_last_error());
  ts_loader_free(l);
  ts_sharding_free(s1);
done:
  ts_sharding_free(sx);
  ts_mesh_free(m);
  ts_source_free(tr);
}

/* Synthetic tokens: in [0, vocab), a function of (seed, i). */
static void test_synthetic(void) {
  ts_source *a = ts_source_synthetic_tokens(100, T, 8192, 1), *b = ts_source_synthetic_tokens(100, T, 8192, 1);
  ts_source *c = ts_source_synthetic_tokens(100, T, 8192, 2);
  CHECK(a && b && c && a->vocab == 8192 && a->seq == T && a->n == 100, "%s", ts_last_error());
  if (a && b && c) {
    int32_t ta[T + 1], tb[T + 1], tc[T + 1];
    int64_t bad = 0, same_c = 0, hi = 0;
    for (int64_t i = 0; i < 100; i++) {
      a->get_tokens(a, i, 0, ta);
      b->get_tokens(b, i, 999, tb);
      c->get_tokens(c, i, 0, tc);
      bad += memcmp(ta, tb, sizeof ta) != 0;
      same_c += memcmp(ta, tc, sizeof ta) == 0;
      for (int k = 0; k <= T; k++) {
        bad += ta[k] < 0 || ta[k] >= 8192;
        hi += ta[k] >= 4096;
      }
    }
    CHECK(bad == 0 && same_c == 0 && hi > 500 && hi < 1200, "synthetic tokens: %lld bad, %lld equal, %lld high",
          (long long)bad, (long long)same_c, (long long)hi);
    ts_loader_options o = {.batch = B, .seed = 1};
    ts_loader *l = ts_loader_new(a, &o);
    const ts_loader_batch *bt = l ? ts_loader_next(l) : NULL;
    const int32_t *x;
    CHECK(bt && ts_batch_local_tokens(bt, NULL, &x, NULL, NULL) == B, "synthetic token loader: %s", ts_last_error());
    ts_loader_free(l);
  }
  CHECK(!ts_source_synthetic_tokens(10, 0, 5, 1) && strstr(ts_last_error(), "seq=0"), "seq 0: '%s'",
        ts_last_error());
  ts_source_free(a);
  ts_source_free(b);
  ts_source_free(c);
}

/* Errors name the file, its size and what is needed. */
static void test_errors(void) {
  char p[160];
  snprintf(p, sizeof p, "%s/empty.txt", dir);
  free(write_file(p, 0, 1));
  ts_source *s = text(p, TS_TEXT_TRAIN, 128, 0, 0);
  CHECK(!s && strstr(ts_last_error(), p) && strstr(ts_last_error(), "empty (0 bytes)") &&
            strstr(ts_last_error(), "at least 1281 bytes"),
        "empty file: '%s'", ts_last_error());
  unlink(p);
  /* 1000 bytes, seq 128: validation split 100 bytes < 129 */
  snprintf(p, sizeof p, "%s/short.txt", dir);
  free(write_file(p, 1000, 1));
  s = text(p, TS_TEXT_VALID, 128, 5, 0);
  CHECK(!s && strstr(ts_last_error(), p) && strstr(ts_last_error(), "1000 bytes is too short") &&
            strstr(ts_last_error(), "validation split (the last 10%, 100 bytes)") &&
            strstr(ts_last_error(), "seq + 1 = 129") && strstr(ts_last_error(), "at least 1281 bytes"),
        "short file: '%s'", ts_last_error());
  s = text(p, TS_TEXT_TRAIN, 128, 0, 0); /* the train source checks both splits too */
  CHECK(!s && strstr(ts_last_error(), "validation split"), "short file (train source): '%s'", ts_last_error());
  /* the smallest file that works: both splits hold exactly one window */
  free(write_file(p, 1281, 1));
  ts_source *t1 = text(p, TS_TEXT_TRAIN, 128, 0, 0), *v1 = text(p, TS_TEXT_VALID, 128, 3, 0);
  CHECK(t1 && v1 && t1->n == 8, "1281 bytes, seq 128: %s", t1 || v1 ? "" : ts_last_error());
  if (v1) { /* the validation split is 129 bytes: every window is all of it */
    int32_t tok[129];
    CHECK(v1->get_tokens(v1, 2, 0, tok) == 0 && ts_text_valid_start(0, 2, 129, 128) == 0, "one validation window");
  }
  ts_source_free(t1);
  ts_source_free(v1);
  unlink(p);
  snprintf(p, sizeof p, "%s/missing.txt", dir);
  s = text(p, TS_TEXT_TRAIN, 8, 0, 0);
  CHECK(!s && strstr(ts_last_error(), p) && ts_last_error_code() == TS_ERR_IO, "missing file: '%s'", ts_last_error());
  s = text(dir, TS_TEXT_TRAIN, 8, 0, 0);
  CHECK(!s && strstr(ts_last_error(), "not a regular file"), "a directory: '%s'", ts_last_error());
  s = text(path, TS_TEXT_TRAIN, 0, 0, 0);
  CHECK(!s && strstr(ts_last_error(), "seq 0"), "seq 0: '%s'", ts_last_error());
  s = text(path, TS_TEXT_VALID, 8, 0, 0);
  CHECK(!s && strstr(ts_last_error(), "0 validation windows"), "0 windows: '%s'", ts_last_error());
  /* image accessors vs token accessors */
  ts_source *img = ts_source_synthetic(8, 1, 2, 2, 3, 1);
  ts_loader_options o = {.batch = 2};
  ts_loader *l = img ? ts_loader_new(img, &o) : NULL;
  const ts_loader_batch *b = l ? ts_loader_next(l) : NULL;
  const int32_t *x;
  CHECK(b && ts_batch_local_tokens(b, NULL, &x, NULL, NULL) == -1 && strstr(ts_last_error(), "image source"),
        "tokens of an image batch: '%s'", ts_last_error());
  ts_loader_free(l);
  ts_source_free(img);
}

/* bench/text_data.py (what PyTorch scripts use) gives the loader's training
 * batches (into epoch 1) and the validation batches, token for token. */
static void test_python_replica(void) {
  enum { PS = 50, PV = 3, SEED = 9 };
  free(write_file(path, 3000, 23)); /* 2700 training bytes: 168 slots, 42 batches per epoch */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/text_data.py %s %d %d %d %d %d", TS_SOURCE_DIR, path, T, B,
           SEED, PS, PV);
  FILE *pp = popen(cmd, "r");
  static int32_t py[(PS + PV) * B * T];
  size_t got = pp ? fread(py, sizeof *py, sizeof py / sizeof *py, pp) : 0;
  int st = pp ? pclose(pp) : -1;
  CHECK(st == 0 && got == sizeof py / sizeof *py, "%s: exit %d, %zu tokens", cmd, st, got);
  if (got != sizeof py / sizeof *py) return;
  ts_source *tr = text(path, TS_TEXT_TRAIN, T, 0, 0), *va = text(path, TS_TEXT_VALID, T, PV * B, 0);
  ts_loader_options o = {.batch = B, .seed = SEED, .workers = 2};
  ts_loader *l = tr ? ts_loader_new(tr, &o) : NULL;
  o.no_shuffle = true;
  ts_loader *lv = va ? ts_loader_new(va, &o) : NULL;
  CHECK(l && lv, "%s", ts_last_error());
  static tbatch tb[PS + PV];
  int64_t bad = 0;
  if (l && lv) {
    take(l, tb, PS);
    take(lv, tb + PS, PV);
    for (int i = 0; i < PS + PV; i++) bad += memcmp(tb[i].x, py + (size_t)i * B * T, sizeof tb[i].x) != 0;
  }
  CHECK(bad == 0, "%lld of %d batches differ between the loader and bench/text_data.py", (long long)bad, PS + PV);
  ts_loader_free(l);
  ts_loader_free(lv);
  ts_source_free(tr);
  ts_source_free(va);
}

int main(void) {
  ts_test_init("test_text", 1);
  snprintf(dir, sizeof dir, "/tmp/tessel_text_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/corpus.bin", dir);
  test_split_and_windows();
  test_determinism();
  test_resume();
  test_validation_fixed();
  test_sharded();
  test_synthetic();
  test_errors();
  test_python_replica();
  unlink(path);
  rmdir(dir);
  return ts_test_finish();
}
