/* text.c — token sources for language models (tessel/loader.h): byte-level
 * text from any file, split 90/10 into training and validation bytes, and
 * seeded random tokens for benchmarks.
 *
 * A text source holds its split's bytes in memory (the whole file is read
 * once; a 4 MB corpus costs 4 MB). Training sample i is one slot of seq
 * window starts, the start within the slot drawn from the loader's
 * per-sample key, so the loader's (seed, epoch) shuffle decides the order
 * and its resumable state replays the windows. Validation sample i sits at a
 * fixed position from (seed, i). Reading is lock-free (the bytes are never
 * written after creation). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessel/loader.h"
#include "util/error.h"
#include "util/prng.h" /* ts_splitmix64, xoshiro256** */

typedef struct {
  uint8_t *bytes; /* the split's L bytes */
  int64_t L;
  ts_text_split split;
  uint64_t seed;  /* valid: the positions' seed */
  char *name;
  ts_source src;
} text_src;

int64_t ts_text_train_bytes(int64_t file_bytes) { return file_bytes > 0 ? file_bytes * 9 / 10 : 0; }

int64_t ts_text_valid_start(uint64_t seed, int64_t i, int64_t L, int seq) {
  if (seq < 1 || L <= seq) return 0;
  uint64_t x = seed ^ ((uint64_t)i * 0xd1b54a32d192ed03ull);
  return (int64_t)(ts_splitmix64(&x) % (uint64_t)(L - seq));
}

/* Where sample i's window starts. */
static int64_t text_start(const text_src *t, int seq, int64_t i, uint64_t key) {
  if (t->split == TS_TEXT_VALID) return ts_text_valid_start(t->seed, i, t->L, seq);
  int64_t slot = i * seq, m = t->L - seq - slot; /* the slot's valid starts: min(seq, m) */
  if (m > seq) m = seq;
  return slot + (int64_t)(key % (uint64_t)m);
}

static int text_get(const ts_source *s, int64_t i, uint64_t key, int32_t *tokens) {
  const text_src *t = s->ctx;
  if (i < 0 || i >= s->n)
    return set_error("%s: sample %lld out of range [0, %lld)", s->name, (long long)i, (long long)s->n);
  const uint8_t *w = t->bytes + text_start(t, s->seq, i, key);
  for (int k = 0; k <= s->seq; k++) tokens[k] = w[k];
  return 0;
}

static void text_destroy(ts_source *s) {
  text_src *t = s->ctx;
  free(t->bytes);
  free(t->name);
  free(t);
}

/* The smallest file whose both splits hold a window of seq + 1 bytes. */
static int64_t text_min_bytes(int seq) {
  int64_t n = (int64_t)seq + 1;
  while (ts_text_train_bytes(n) < seq + 1 || n - ts_text_train_bytes(n) < seq + 1) n++;
  return n;
}

/* Reads the split [off, off + len) of path (size bytes) into *out. */
static int text_read(const char *path, int64_t off, int64_t len, uint8_t **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return set_error_code(TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  uint8_t *buf = malloc((size_t)len);
  if (!buf) {
    fclose(f);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld bytes", path, (long long)len);
  }
  bool ok = fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(buf, 1, (size_t)len, f) == (size_t)len;
  fclose(f);
  if (!ok) {
    free(buf);
    return set_error_code(TS_ERR_IO, "%s: cannot read bytes [%lld, %lld) (did the file change?)", path,
                          (long long)off, (long long)(off + len));
  }
  *out = buf;
  return 0;
}

ts_source *ts_source_text(const ts_text_options *o) {
  if (!o || !o->path) {
    set_error("ts_source_text: NULL options or path");
    return NULL;
  }
  const char *path = o->path;
  if (o->split != TS_TEXT_TRAIN && o->split != TS_TEXT_VALID) {
    set_error("ts_source_text: %s: unknown split %d", path, (int)o->split);
    return NULL;
  }
  if (o->seq < 1) {
    set_error("ts_source_text: %s: seq %d must be at least 1", path, o->seq);
    return NULL;
  }
  if (o->split == TS_TEXT_VALID && o->windows < 1) {
    set_error("ts_source_text: %s: %lld validation windows; at least 1 is needed", path, (long long)o->windows);
    return NULL;
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    set_error_code(TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    set_error_code(TS_ERR_IO, "%s: not a regular file", path);
    return NULL;
  }
  int64_t n = (int64_t)st.st_size, ntrain = ts_text_train_bytes(n);
  int64_t need = (int64_t)o->seq + 1;
  if (n == 0) {
    set_error("%s: the text file is empty (0 bytes); with seq %d it needs at least %lld bytes (both the "
              "training split, the first 90%%, and the validation split, the last 10%%, hold a window of seq + 1 "
              "= %lld bytes)", path, o->seq, (long long)text_min_bytes(o->seq), (long long)need);
    return NULL;
  }
  int64_t off = o->split == TS_TEXT_VALID ? ntrain : 0, L = o->split == TS_TEXT_VALID ? n - ntrain : ntrain;
  if (ntrain < need || n - ntrain < need) {
    bool valid_short = n - ntrain < need;
    set_error("%s: %lld bytes is too short: its %s split (%s, %lld bytes) is shorter than one sample of seq + "
              "1 = %lld bytes; with seq %d the file needs at least %lld bytes",
              path, (long long)n, valid_short ? "validation" : "training",
              valid_short ? "the last 10%" : "the first 90%", (long long)(valid_short ? n - ntrain : ntrain),
              (long long)need, o->seq, (long long)text_min_bytes(o->seq));
    return NULL;
  }
  text_src *t = calloc(1, sizeof *t);
  size_t nl = strlen(path) + 16;
  char *name = malloc(nl);
  if (!t || !name) {
    free(t);
    free(name);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_source_text: out of memory");
    return NULL;
  }
  snprintf(name, nl, "%s %s", path, o->split == TS_TEXT_VALID ? "valid" : "train");
  if (text_read(path, off, L, &t->bytes) < 0) {
    free(t);
    free(name);
    return NULL;
  }
  t->L = L;
  t->split = o->split;
  t->seed = o->seed;
  t->name = name;
  int64_t count = o->split == TS_TEXT_VALID ? o->windows : (L - 1) / o->seq;
  t->src = (ts_source){.name = name, .n = count, .seq = o->seq, .vocab = 256, .get_tokens = text_get,
                       .destroy = text_destroy, .ctx = t};
  return &t->src;
}

/* ---- synthetic tokens ---- */

typedef struct {
  uint64_t seed;
  ts_source src;
} synth_tok;

static int synth_tok_get(const ts_source *s, int64_t i, uint64_t key, int32_t *tokens) {
  (void)key;
  const synth_tok *st = s->ctx;
  if (i < 0 || i >= s->n)
    return set_error("%s: sample %lld out of range [0, %lld)", s->name, (long long)i, (long long)s->n);
  uint64_t x = st->seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
  ts_prng r;
  ts_prng_seed(&r, ts_splitmix64(&x));
  for (int k = 0; k <= s->seq; k++) tokens[k] = (int32_t)ts_prng_below(&r, (uint64_t)s->vocab);
  return 0;
}

static void synth_tok_destroy(ts_source *s) { free(s->ctx); }

ts_source *ts_source_synthetic_tokens(int64_t n, int seq, int vocab, uint64_t seed) {
  if (n <= 0 || seq <= 0 || vocab <= 0) {
    set_error("ts_source_synthetic_tokens: bad shape n=%lld seq=%d vocab=%d (each must be positive)",
              (long long)n, seq, vocab);
    return NULL;
  }
  synth_tok *st = calloc(1, sizeof *st);
  if (!st) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_source_synthetic_tokens: out of memory");
    return NULL;
  }
  st->seed = seed;
  st->src = (ts_source){.name = "synthetic tokens", .n = n, .seq = seq, .vocab = vocab,
                        .get_tokens = synth_tok_get, .destroy = synth_tok_destroy, .ctx = st};
  return &st->src;
}
