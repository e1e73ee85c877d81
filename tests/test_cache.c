/* test_cache.c — the compile cache: a program compiles once per process
 * (CachedCompile), a cleared in-memory cache loads from the cache directory
 * without compiling (PersistentCacheHit, UncachedCompile unchanged), the
 * loaded program is the compiled one (same text), and truncated, bit-flipped,
 * foreign and junk entries and entries naming an unknown op are detected
 * (PersistentCacheDiscarded),
 * recompiled and rewritten. Keys: equal for equal programs, different for
 * other options, meshes and shardings. Threads compiling at once are safe. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile/cache.h"
#include "util/hash.h" /* util_hash64: the entry checksum */
#include "harness.h"
#include "tessel/metrics.h"
#include "tessel/tessel.h"

static ts_graph *build(int64_t hidden) {
  ts_graph *g = ts_graph_new();
  int64_t xs[2] = {8, 16}, ws[2] = {16, hidden};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, xs);  // (8, 16)
  float w[16 * 64];
  for (int i = 0; i < 16 * hidden; i++) w[i] = (float)((i * 7919) % 101) / 101.0f - 0.5f;
  ts_tensor h = ts_matmul(g, x, ts_constant(g, TS_F32, 2, ws, w)); // (8, hidden)
  ts_tensor y = ts_tanh(g, ts_add(g, ts_mul(g, h, ts_full(g, TS_F32, 2, (int64_t[]){8, hidden}, 0.5)), h));
  ts_graph_add_output(g, ts_sum_all(g, y));
  return g;
}

static char *text_of(const ts_graph *g) { return g ? ts_graph_to_string(g) : strdup("(null)"); }

/* Compiles through the cache and checks the result's text is `want`. */
static void compile_expect(const ts_graph *g, const char *want, const char *what) {
  ts_graph *o = cache_compile_graph(g, NULL);
  CHECK(o != NULL, "%s: %s", what, ts_last_error());
  char *t = text_of(o);
  CHECK(strcmp(t, want) == 0, "%s: program differs from the first compile:\n%s", what, t);
  free(t);
  ts_graph_free(o);
}

static void counters_are(int64_t uncached, int64_t cached, int64_t hit, int64_t miss, int64_t discarded,
                         const char *what) {
  int64_t u = ts_counter_value("UncachedCompile"), c = ts_counter_value("CachedCompile"),
          h = ts_counter_value("PersistentCacheHit"), m = ts_counter_value("PersistentCacheMiss"),
          d = ts_counter_value("PersistentCacheDiscarded");
  CHECK(u == uncached && c == cached && h == hit && m == miss && d == discarded,
        "%s: UncachedCompile %lld (want %lld), CachedCompile %lld (%lld), PersistentCacheHit %lld (%lld), "
        "PersistentCacheMiss %lld (%lld), PersistentCacheDiscarded %lld (%lld)",
        what, (long long)u, (long long)uncached, (long long)c, (long long)cached, (long long)h, (long long)hit,
        (long long)m, (long long)miss, (long long)d, (long long)discarded);
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL, "open %s", path);
  if (!f) return;
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x10, f);
  fclose(f);
}

static void copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  CHECK(a && b, "copy %s -> %s", from, to);
  int c;
  while (a && b && (c = fgetc(a)) != EOF) fputc(c, b);
  if (a) fclose(a);
  if (b) fclose(b);
}

/* Renames op `from` to `to` (same length) in the entry at path and fixes its
 * checksum: an entry written by a build that knows an op this one lacks. */
static bool rename_op(const char *path, const char *from, const char *to) {
  enum { HEADER = 64, SUM_AT = 52 }; /* cache.c: CACHE_HEADER, the checksum field */
  long size = file_size(path);
  FILE *f = fopen(path, "r+b");
  unsigned char *buf = size > HEADER ? malloc((size_t)size) : NULL;
  bool found = false;
  if (f && buf && fread(buf, 1, (size_t)size, f) == (size_t)size) {
    size_t n = strlen(from);
    unsigned char pat[64] = {(unsigned char)n}; /* u32 length, then the name */
    memcpy(pat + 4, from, n);
    for (long i = HEADER; !found && i + 4 + (long)n <= size; i++)
      if (memcmp(buf + i, pat, 4 + n) == 0) {
        memcpy(buf + i + 4, to, n);
        found = true;
      }
    uint64_t sum = util_hash64(buf + HEADER, (size_t)size - HEADER, 0);
    for (int b = 0; b < 8; b++) buf[SUM_AT + b] = (unsigned char)(sum >> (8 * b));
    rewind(f);
    found = found && fwrite(buf, 1, (size_t)size, f) == (size_t)size;
  }
  if (f) fclose(f);
  free(buf);
  return found;
}

static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[4096];
  while (d && (e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p) unlink(p);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static void test_persistent(void) {
  char dir[] = "/tmp/tessel_cache_test_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char sub[4096];
  snprintf(sub, sizeof sub, "%s/cache", dir); /* created by set_dir */
  CHECK_OK(ts_compile_cache_set_dir(sub));
  CHECK(ts_compile_cache_dir() && strcmp(ts_compile_cache_dir(), sub) == 0, "dir in use");
  ts_compile_cache_clear();
  ts_metrics_clear();

  ts_graph *g = build(64);
  ts_cache_key k;
  CHECK_OK(cache_key_make(g, NULL, NULL, &k));
  char path[4096];
  cache_entry_path(sub, &k, path, sizeof path);

  ts_graph *o = cache_compile_graph(g, NULL);
  char *want = text_of(o);
  ts_graph_free(o);
  counters_are(1, 0, 0, 1, 0, "first compile");
  ts_metric_data d;
  CHECK(ts_metric_data_get("CompileTime", &d) == 0 && d.count == 1 && d.total > 0, "CompileTime %lld samples",
        (long long)d.count);
  CHECK(file_size(path) > 64, "entry file %s written (size %ld)", path, file_size(path));

  compile_expect(g, want, "same process");
  counters_are(1, 1, 0, 1, 0, "second compile in memory");

  ts_compile_cache_clear(); /* as if a new process: only the disk remains */
  compile_expect(g, want, "from disk");
  counters_are(1, 1, 1, 1, 0, "load from disk");

  /* truncated entry */
  long size = file_size(path);
  CHECK(truncate(path, size / 2) == 0, "truncate");
  ts_compile_cache_clear();
  compile_expect(g, want, "after truncation");
  counters_are(2, 1, 1, 2, 1, "truncated entry recompiled");
  CHECK(file_size(path) == size, "entry rewritten after truncation (size %ld, was %ld)", file_size(path), size);
  ts_compile_cache_clear();
  compile_expect(g, want, "rewritten entry");
  counters_are(2, 1, 2, 2, 1, "rewritten entry loads");

  /* a flipped bit in the payload (constant data), then in the header */
  long spots[3] = {size - 5, size / 2, 9};
  for (int s = 0; s < 3; s++) {
    flip_byte(path, spots[s]);
    ts_compile_cache_clear();
    compile_expect(g, want, "after a bit flip");
    counters_are(3 + s, 1, 2, 3 + s, 2 + s, "bit flip detected and recompiled");
  }

  /* an op this build does not know (a newer build's entry, say): the
   * checksum holds, the op name does not; discarded and recompiled */
  CHECK(rename_op(path, "dot_general", "dot_generaX"), "no dot_general op in the entry");
  ts_compile_cache_clear();
  compile_expect(g, want, "unknown op");
  counters_are(6, 1, 2, 6, 5, "entry with an unknown op recompiled");
  ts_compile_cache_clear();
  compile_expect(g, want, "rewritten after the unknown op");
  counters_are(6, 1, 3, 6, 5, "rewritten entry loads");

  /* a foreign entry: another program's file under this key's name */
  ts_graph *g2 = build(32);
  ts_graph *o2 = cache_compile_graph(g2, NULL);
  ts_graph_free(o2);
  ts_cache_key k2;
  CHECK_OK(cache_key_make(g2, NULL, NULL, &k2));
  CHECK(k2.lo != k.lo || k2.hi != k.hi, "different programs, same key");
  char path2[4096];
  cache_entry_path(sub, &k2, path2, sizeof path2);
  copy_file(path2, path);
  ts_compile_cache_clear();
  ts_metrics_clear();
  compile_expect(g, want, "foreign entry");
  counters_are(1, 0, 0, 1, 1, "foreign entry rejected");

  /* junk */
  FILE *f = fopen(path, "wb");
  if (f) {
    fputs("junk", f);
    fclose(f);
  }
  ts_compile_cache_clear();
  compile_expect(g, want, "junk entry");
  counters_are(2, 0, 0, 2, 2, "junk entry rejected");

  /* off: no disk traffic */
  CHECK_OK(ts_compile_cache_set_dir(NULL));
  ts_compile_cache_clear();
  compile_expect(g, want, "no directory");
  counters_are(3, 0, 0, 2, 2, "no persistent cache");

  free(want);
  ts_graph_free(g);
  ts_graph_free(g2);
  rm_rf(sub);
  rmdir(dir);
}

static void test_keys(void) {
  ts_graph *a = build(64), *b = build(64);
  ts_cache_key ka, kb, kc, kd, ke;
  CHECK_OK(cache_key_make(a, NULL, NULL, &ka));
  CHECK_OK(cache_key_make(b, NULL, NULL, &kb));
  CHECK(ka.lo == kb.lo && ka.hi == kb.hi, "equal programs, different keys");
  ts_compile_options nf = {.no_fusion = true}, verbose = {.verbose = true};
  CHECK_OK(cache_key_make(a, &nf, NULL, &kc));
  CHECK(kc.lo != ka.lo, "no_fusion does not change the key");
  CHECK_OK(cache_key_make(a, &verbose, NULL, &kd));
  CHECK(kd.lo == ka.lo, "verbose changes the key");
  CHECK_OK(cache_key_make(a, NULL, "devices=4", &ke));
  CHECK(ke.lo != ka.lo, "extra text does not change the key");
  ts_mesh *m = ts_mesh_new(1, (int64_t[]){2}, (const char *[]){"data"}, 2, NULL);
  ts_compile_options om = {.mesh = m};
  ts_cache_key km, ks;
  CHECK_OK(cache_key_make(a, &om, NULL, &km));
  CHECK(km.lo != ka.lo, "the mesh does not change the key");
  ts_partition_spec spec;
  CHECK_OK(ts_partition_spec_parse(m, "data,None", &spec));
  ts_sharding *s = ts_sharding_new(m, &spec, 2);
  CHECK_OK(ts_mark_sharding(a, ts_graph_input(a, 0), s));
  CHECK_OK(cache_key_make(a, &om, NULL, &ks));
  CHECK(ks.lo != km.lo, "a sharding annotation does not change the key");
  ts_sharding_free(s);
  ts_mesh_free(m);
  ts_graph_free(a);
  ts_graph_free(b);
}

static void *compile_thread(void *arg) {
  const ts_graph *g = arg;
  for (int i = 0; i < 5; i++) ts_graph_free(cache_compile_graph(g, NULL));
  return NULL;
}

static void test_threads(void) {
  ts_compile_cache_clear();
  ts_metrics_clear();
  ts_graph *g = build(48);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, compile_thread, g);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  int64_t u = ts_counter_value("UncachedCompile"), c = ts_counter_value("CachedCompile");
  CHECK(u + c == 20 && u >= 1 && u <= 4, "threads: %lld uncached + %lld cached compiles", (long long)u, (long long)c);
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_cache", 1);
  test_keys();
  test_persistent();
  test_threads();
  ts_compile_cache_clear();
  return ts_test_finish();
}
