/* synthetic.c — an ImageNet-shaped dataset generated on the fly, for
 * benchmarks: no files, any size, identical on every machine.
 *
 * Sample i depends only on (seed, i): its label is a hash of both; its pixels
 * are the class's colour (per-channel means spread over [48, 208]) plus a
 * class-specific diagonal stripe pattern (period and direction from the
 * class) plus uniform noise in [-32, 31] from a per-sample xoshiro stream.
 * Colour and stripes make the labels learnable by a small CNN; generating a
 * 3x224x224 sample costs one pass of integer arithmetic. */
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/prng.h" /* splitmix64, xoshiro256** */
#include "tessel/loader.h"

typedef struct {
  uint64_t seed;
  ts_source src;
} synth;

static uint64_t synth_hash(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0xd1b54a32d192ed03ull);
  return ts_splitmix64(&x);
}

static int synth_get(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label) {
  const synth *sy = s->ctx;
  if (i < 0 || i >= s->n)
    return set_error("%s: sample %lld out of range [0, %lld)", s->name, (long long)i, (long long)s->n);
  int cls = (int)(synth_hash(sy->seed, (uint64_t)i) % (uint64_t)s->num_classes);
  *label = cls;
  uint64_t ch = synth_hash(sy->seed ^ 0x5bd1e995ull, (uint64_t)cls);
  int period = 8 + (int)(ch % 24);            /* stripe period 8..31 pixels */
  int dir = (int)((ch >> 8) % 3);             /* horizontal, vertical, diagonal */
  ts_prng r;
  ts_prng_seed(&r, synth_hash(sy->seed ^ 0x2545f4914f6cdd1dull, (uint64_t)i));
  /* The stripe value of t = y, x or x + y, tabulated once per sample. */
  int tmax = s->h + s->w;
  int8_t stack_pat[1024];
  int8_t *pat = tmax <= 1024 ? stack_pat : malloc((size_t)tmax);
  if (!pat) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", s->name);
  for (int t = 0; t < tmax; t++) pat[t] = (int8_t)((t % period) < period / 2 ? 24 : -24);
  for (int c = 0; c < s->c; c++) {
    int mean = 48 + (int)((ch >> (16 + 8 * (c % 5))) & 0xff) * 160 / 255;
    for (int y = 0; y < s->h; y++) {
      uint8_t *row = pixels + ((size_t)c * s->h + y) * s->w; // (w) of plane c
      const int8_t *p = dir == 0 ? NULL : dir == 1 ? pat : pat + y;
      int rowbase = mean + (dir == 0 ? pat[y] : 0);
      for (int x0 = 0; x0 < s->w; x0 += 8) {
        uint64_t bits = ts_prng_next(&r); /* 8 noise bytes */
        int xe = x0 + 8 < s->w ? x0 + 8 : s->w;
        for (int x = x0; x < xe; x++, bits >>= 8) {
          int v = rowbase + (p ? p[x] : 0) + (int)(bits & 63) - 32;
          row[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
      }
    }
  }
  if (pat != stack_pat) free(pat);
  return 0;
}

static void synth_destroy(ts_source *s) { free(s->ctx); }

ts_source *ts_source_synthetic(int64_t n, int c, int h, int w, int num_classes, uint64_t seed) {
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || num_classes <= 0 || c > 64 || h > 8192 || w > 8192) {
    set_error("ts_source_synthetic: bad shape n=%lld c=%d h=%d w=%d classes=%d", (long long)n, c, h, w,
                 num_classes);
    return NULL;
  }
  synth *sy = calloc(1, sizeof *sy);
  if (!sy) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_source_synthetic: out of memory");
    return NULL;
  }
  sy->seed = seed;
  sy->src = (ts_source){.name = "synthetic", .n = n, .c = c, .h = h, .w = w, .num_classes = num_classes,
                        .get = synth_get, .destroy = synth_destroy, .ctx = sy};
  return &sy->src;
}
