/* test_ckpt_copy.c — the save's filler copy (src/ckpt/copyhash.c) and the
 * in-place read of held buffers it runs on (ts_buffer_hold_visit_range):
 * - ckpt_copy_hash2 copies exactly the bytes memcpy would (nothing around
 *   the destination touched) and leaves both checksum states where
 *   ckpt_xxh64_update2 over the same bytes leaves them, for odd lengths
 *   (under a line, across slices), odd source and destination alignments and
 *   states already part-way into a stripe; with streamed stores (the CPU's
 *   own choice, AVX-512F or SSE2), forced on, SSE2's even on an AVX-512F
 *   CPU (ckpt_copy_nt 2), and plain (0);
 *   the digests are also checked against XXH64 of the whole byte string;
 * - ckpt_copy_stream equals memcpy the same way;
 * - ts_buffer_hold_visit_range visits, in order, exactly the bytes
 *   ts_buffer_hold_read_range copies, at any offset of unpadded and padded
 *   blocks (rows padded along the first and the last dim); it refuses a range
 *   outside the block, a non-local device, a NULL visitor, and stops at the
 *   visitor's first nonzero return, returning it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h" /* ckpt_copy_hash2, ckpt_copy_stream, ckpt_copy_nt, ckpt_xxh64_* */
#include "harness.h"
#include "tessel/tessel.h"

#define GUARD 64

static void fill_random(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t k = 0; k < n; k++) {
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    p[k] = (unsigned char)(x >> 24);
  }
}

/* One case: n bytes from src + so into dst + doff, with the states already
 * fed `pa` and `pb` bytes; against memcpy + ckpt_xxh64_update2 and XXH64 of
 * the whole strings. */
static void check_copy_hash(const unsigned char *pool, size_t n, size_t so, size_t doff, size_t pa, size_t pb) {
  size_t cap = n + 2 * GUARD + 128;
  unsigned char *got = malloc(cap), *want = malloc(cap);
  memset(got, 0xA5, cap), memset(want, 0xA5, cap);
  const unsigned char *src = pool + 64 + so;
  ckpt_xxh64_state s, t, rs, rt;
  ckpt_xxh64_init(&s), ckpt_xxh64_init(&t);
  ckpt_xxh64_update(&s, pool, pa), ckpt_xxh64_update(&t, pool + 7, pb);
  rs = s, rt = t;
  ckpt_copy_hash2(got + GUARD + doff, src, n, &s, &t);
  memcpy(want + GUARD + doff, src, n);
  ckpt_xxh64_update2(&rs, &rt, src, n);
  CHECK(memcmp(got, want, cap) == 0, "n %zu src+%zu dst+%zu nt %d: the copy differs from memcpy", n, so, doff,
        ckpt_copy_nt);
  CHECK(ckpt_xxh64_digest(&s) == ckpt_xxh64_digest(&rs) && ckpt_xxh64_digest(&t) == ckpt_xxh64_digest(&rt),
        "n %zu src+%zu dst+%zu pre %zu/%zu nt %d: checksums differ from ckpt_xxh64_update2", n, so, doff, pa, pb,
        ckpt_copy_nt);
  /* the whole strings, hashed in one go: what index.json holds */
  unsigned char *whole = malloc(pa + pb + n + 1);
  memcpy(whole, pool, pa), memcpy(whole + pa, src, n);
  CHECK(ckpt_xxh64_digest(&s) == ckpt_xxh64(whole, pa + n), "n %zu pre %zu: not XXH64 of the whole string", n, pa);
  memcpy(whole, pool + 7, pb), memcpy(whole + pb, src, n);
  CHECK(ckpt_xxh64_digest(&t) == ckpt_xxh64(whole, pb + n), "n %zu pre %zu: not XXH64 of the whole string", n, pb);
  free(whole);
  /* the copy alone */
  memset(got, 0x5A, cap), memset(want, 0x5A, cap);
  ckpt_copy_stream(got + GUARD + doff, src, n);
  memcpy(want + GUARD + doff, src, n);
  CHECK(memcmp(got, want, cap) == 0, "n %zu src+%zu dst+%zu nt %d: ckpt_copy_stream differs from memcpy", n, so,
        doff, ckpt_copy_nt);
  free(got);
  free(want);
}

static void test_copy_hash(void) {
  static const size_t lens[] = {0, 1, 7, 31, 32, 33, 63, 64, 65, 127, 200, 4095, 4096, 4097, 3 * 4096 + 17, 70001};
  static const size_t offs[] = {0, 1, 8, 13, 32, 63};
  static const size_t pre[][2] = {{0, 0}, {5, 0}, {0, 13}, {31, 17}, {40, 3}};
  size_t pool_n = 70001 + 256;
  unsigned char *pool = malloc(pool_n);
  fill_random(pool, pool_n, 7);
  static const int modes[] = {-1, 1, 2, 0}; /* the CPU's choice, forced, SSE2 forced, plain */
  for (int md = 0; md < 4; md++) {
    ckpt_copy_nt = modes[md];
    for (size_t a = 0; a < sizeof lens / sizeof *lens; a++)
      for (size_t so = 0; so < sizeof offs / sizeof *offs; so++)
        for (size_t d = 0; d < sizeof offs / sizeof *offs; d++)
          for (size_t q = 0; q < sizeof pre / sizeof *pre; q++)
            if (q == 0 || (so == 1 && d == 3)) /* partial states: at one odd alignment pair */
              check_copy_hash(pool, lens[a], offs[so], offs[d], pre[q][0], pre[q][1]);
  }
  ckpt_copy_nt = -1;
  free(pool);
}

/* A visitor that appends what it sees; stops (returns `stop`) at call `stop_at`. */
typedef struct {
  unsigned char *out;
  size_t n;
  int calls, stop_at, stop;
} collect;
static int collect_run(void *ctx, const void *p, size_t n) {
  collect *c = ctx;
  if (++c->calls == c->stop_at) return c->stop;
  memcpy(c->out + c->n, p, n);
  c->n += n;
  return 0;
}

/* Device dev's block of h (`blk` bytes): visited in pieces of `piece` bytes
 * equals read_range's copy. */
static void check_visit(const ts_buffer_hold *h, int dev, size_t blk, size_t piece, const char *what) {
  unsigned char *ref = malloc(blk + 1), *got = malloc(blk + 1);
  CHECK(ts_buffer_hold_read_range(h, dev, 0, ref, blk) == 0, "%s: read_range: %s", what, ts_last_error());
  collect c = {.out = got};
  bool ok = true;
  for (size_t off = 0; off < blk && ok; off += piece)
    ok = ts_buffer_hold_visit_range(h, dev, off, blk - off < piece ? blk - off : piece, collect_run, &c) == 0;
  CHECK(ok && c.n == blk && memcmp(got, ref, blk) == 0, "%s, device %d, pieces of %zu: the visit differs: %s", what,
        dev, piece, ts_last_error());
  free(ref);
  free(got);
}

static ts_buffer *sharded(ts_client *cl, const ts_mesh *m, int64_t r, int64_t cols, const char *spec) {
  int64_t shape[2] = {r, cols};
  size_t n = (size_t)(r * cols) * 4;
  unsigned char *v = malloc(n);
  fill_random(v, n, (uint64_t)(r * 31 + cols));
  ts_partition_spec ps;
  ts_sharding *s = ts_partition_spec_parse(m, spec, &ps) == 0 ? ts_sharding_new(m, &ps, 2) : NULL;
  ts_buffer *b = s ? ts_buffer_from_host_sharded(cl, TS_F32, 2, shape, v, s) : NULL;
  CHECK(b != NULL, "buffer %lldx%lld %s: %s", (long long)r, (long long)cols, spec, ts_last_error());
  ts_sharding_free(s);
  free(v);
  return b;
}

static void test_visit(void) {
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 2});
  ts_mesh *m = ts_mesh_from_text("data=2");
  CHECK(cl && m, "client: %s", ts_last_error());
  if (!cl || !m) return;
  /* rows split 501 + 500 (device 1's block padded by a row), last dim 7 split 4 + 3 (padded in every row) */
  ts_buffer *rows = sharded(cl, m, 1001, 53, "data,None"), *cols = sharded(cl, m, 9, 7, "None,data");
  ts_buffer_hold *hr = rows ? ts_buffer_hold_new(rows) : NULL, *hc = cols ? ts_buffer_hold_new(cols) : NULL;
  CHECK(hr && hc, "hold: %s", ts_last_error());
  static const size_t pieces[] = {1, 13, 997, 1u << 20};
  for (size_t k = 0; hr && hc && k < sizeof pieces / sizeof *pieces; k++) {
    if (pieces[k] >= 13) check_visit(hr, 0, 501 * 53 * 4, pieces[k], "rows");
    if (pieces[k] >= 13) check_visit(hr, 1, 500 * 53 * 4, pieces[k], "rows");
    check_visit(hc, 0, 9 * 4 * 4, pieces[k], "cols");
    check_visit(hc, 1, 9 * 3 * 4, pieces[k], "cols");
  }
  if (hr && hc) {
    collect c = {.out = malloc(1 << 20), .stop_at = 2, .stop = 7};
    CHECK(ts_buffer_hold_visit_range(hc, 1, 0, 9 * 3 * 4, collect_run, &c) == 7 && c.calls == 2 && c.n == 12,
          "a visitor's nonzero return stops the visit and is returned (calls %d, bytes %zu)", c.calls, c.n);
    c.stop_at = 0, c.n = 0;
    CHECK(ts_buffer_hold_visit_range(hr, 1, 500 * 53 * 4 - 4, 8, collect_run, &c) < 0 &&
              strstr(ts_last_error(), "outside"),
          "a range past the block is refused: %s", ts_last_error());
    CHECK(ts_buffer_hold_visit_range(hr, 2, 0, 4, collect_run, &c) < 0 && strstr(ts_last_error(), "device 2"),
          "a device that is not local is refused: %s", ts_last_error());
    CHECK(ts_buffer_hold_visit_range(hr, 0, 0, 4, NULL, &c) < 0 && strstr(ts_last_error(), "NULL"),
          "a NULL visitor is refused: %s", ts_last_error());
    CHECK(ts_buffer_hold_visit_range(NULL, 0, 0, 4, collect_run, &c) < 0, "a NULL hold is refused");
    free(c.out);
  }
  ts_buffer_hold_release(hr);
  ts_buffer_hold_release(hc);
  ts_buffer_free(rows);
  ts_buffer_free(cols);
  ts_mesh_free(m);
  ts_client_free(cl);
}

int main(void) {
  ts_test_init("test_ckpt_copy", 1);
  test_copy_hash();
  test_visit();
  return ts_test_finish();
}
