/* test_ckpt_fuzz.c — the checkpoint's parsers on hostile input: thousands of
 * deterministic mutations (bit flips, structural characters, deletions,
 * duplications, truncations, huge and negative numbers) of a real
 * safetensors header and a real index.json go through the JSON parser, the
 * safetensors header parser and the index parser, and a few hundred through
 * the whole load path from disk. Nothing may crash or leak (the ASan build
 * runs this too); a failure must leave an error message; a load that
 * succeeds must return exactly the saved values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt_common.h"
#include "util/prng.h"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  *n = fread(buf, 1, (size_t)len, f);
  buf[*n] = 0; /* the index is searched as a string */
  fclose(f);
  return buf;
}

static void spit(const char *path, const char *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f) fwrite(buf, 1, n, f), fclose(f);
}

/* A mutated copy of src[0..n) into a new buffer; *out_n its length. */
static char *mutate(ts_prng *r, const char *src, size_t n, size_t *out_n) {
  static const char *const tokens[] = {"\"", "{", "}", "[", "]", ",", ":", "\\", "\\u", "\\ud800", "-", "0", "1e999",
                                       "99999999999999999999", "-1", "null", "true", "1.5", "\x01", "\xff", " ",
                                       "18446744073709551615", "9223372036854775807", "\"\":", "[[[[[[[[[[[[[[[[[[[["
                                       "[[[[[[[[[[[[[[[[[["};
  size_t cap = 2 * n + 256;
  char *s = malloc(cap);
  memcpy(s, src, n);
  size_t len = n;
  int rounds = 1 + (int)(ts_prng_next(r) % 3);
  for (int k = 0; k < rounds; k++) {
    size_t at = len ? (size_t)(ts_prng_next(r) % len) : 0;
    switch (ts_prng_next(r) % 6) {
    case 0: /* flip a bit */
      if (len) s[at] ^= (char)(1u << (ts_prng_next(r) % 8));
      break;
    case 1: { /* insert a token */
      const char *t = tokens[ts_prng_next(r) % (sizeof tokens / sizeof tokens[0])];
      size_t tl = strlen(t);
      if (len + tl < cap) {
        memmove(s + at + tl, s + at, len - at);
        memcpy(s + at, t, tl);
        len += tl;
      }
      break;
    }
    case 2: { /* delete a range */
      size_t d = 1 + (size_t)(ts_prng_next(r) % 16);
      if (at + d > len) d = len - at;
      memmove(s + at, s + at + d, len - at - d);
      len -= d;
      break;
    }
    case 3: { /* duplicate a range */
      size_t d = 1 + (size_t)(ts_prng_next(r) % 64);
      if (at + d > len) d = len - at;
      if (len + d < cap) {
        memmove(s + at + d, s + at, len - at);
        len += d;
      }
      break;
    }
    case 4: /* truncate */
      len = at;
      break;
    default: /* change a digit */
      for (size_t j = at; j < len; j++)
        if (s[j] >= '0' && s[j] <= '9') {
          s[j] = (char)('0' + ts_prng_next(r) % 10);
          break;
        }
      break;
    }
  }
  *out_n = len;
  return s;
}

static int n_cases, n_rejected;

/* The three parsers on one text. */
static void parse_all(const char *text, size_t len, uint64_t data_bytes) {
  ts_clear_error();
  json_val *v = json_parse(text, len, "fuzz");
  CHECK(v || ts_last_error()[0], "json_parse failed without a message");
  json_free(v);
  st_header h;
  ts_clear_error();
  if (st_header_parse(text, len, data_bytes, "fuzz", &h) == 0) st_header_free(&h);
  else CHECK(ts_last_error()[0], "st_header_parse failed without a message");
  ts_ckpt ck = {0};
  ts_clear_error();
  int rc = ckpt_index_parse(&ck, text, len, "fuzz/index.json");
  if (rc < 0) {
    n_rejected++;
    CHECK(ts_last_error()[0], "ckpt_index_parse failed without a message");
  }
  ckpt_free_contents(&ck);
  n_cases++;
}

/* Loads every tensor of root; if it all works the values must be version v's. */
static void load_check(const char *root, uint64_t v, ts_client *c) {
  ts_ckpt *ck = ts_ckpt_open(root);
  if (!ck) {
    CHECK(ts_last_error()[0], "open failed without a message");
    return;
  }
  for (int i = 0; i < CK_N; i++) {
    size_t n = ck_bytes(i);
    void *got = malloc(n + 1), *want = ck_values(i, v);
    ts_buffer *b = ts_buffer_new(c, CK_TENSORS[i].dt, CK_TENSORS[i].rank, CK_TENSORS[i].shape);
    if (ts_ckpt_read(ck, c, CK_TENSORS[i].name, b) == 0) {
      CHECK(ts_buffer_read(b, got, n) == 0 && memcmp(got, want, n) == 0, "a load that succeeded returned other values for %s",
            CK_TENSORS[i].name);
    } else {
      CHECK(ts_last_error()[0], "read failed without a message");
    }
    ts_buffer_free(b);
    free(got);
    free(want);
  }
  ts_ckpt_close(ck);
}

int main(void) {
  uint64_t seed = ts_test_init("test_ckpt_fuzz", 20261203);
  ts_prng r;
  ts_prng_seed(&r, seed);
  char root[256], dir[300], p[400];
  snprintf(root, sizeof root, "/tmp/tessel_test_ckpt_fuzz_%d", (int)getpid());
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 2});
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, &CK_LAYOUTS[1], 5, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(1);
  CHECK_OK(ts_ckpt_save(c, root, &m, CK_N, e, 0));
  ck_free_buffers(b);
  snprintf(dir, sizeof dir, "%s/step-00000001", root);

  size_t ni, ns;
  snprintf(p, sizeof p, "%s/index.json", dir);
  char *index = slurp(p, &ni);
  snprintf(p, sizeof p, "%s/shard-00000-of-00001.safetensors", dir);
  char *shard = slurp(p, &ns);
  CHECK(index && shard && ns > 8, "checkpoint files");
  if (!index || !shard) return ts_test_finish();
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--) hlen = hlen << 8 | (uint8_t)shard[k];
  CHECK(hlen + 8 <= ns, "header length");
  const char *header = shard + 8;
  uint64_t data_bytes = ns - 8 - hlen;

  /* the originals parse */
  st_header h;
  CHECK(st_header_parse(header, hlen, data_bytes, "orig", &h) == 0, "original header: %s", ts_last_error());
  st_header_free(&h);
  ts_ckpt ck0 = {0};
  CHECK(ckpt_index_parse(&ck0, index, ni, "orig") == 0, "original index: %s", ts_last_error());
  ckpt_free_contents(&ck0);

  /* dims whose product overflows 64 bits (a zero dim last) are too large, not undefined behaviour */
  const char *huge = "{\"a\":{\"dtype\":\"F32\",\"shape\":[281474976710656,281474976710656,0],\"data_offsets\":[0,0]}}";
  CHECK(st_header_parse(huge, strlen(huge), 0, "huge", &h) < 0 && strstr(ts_last_error(), "too large"),
        "huge dims: %s", ts_last_error());
  char *hidx = malloc(ni + 64);
  {
    const char *at = strstr(index, "\"shape\":[13,7]");
    size_t pre = (size_t)(at - index);
    memcpy(hidx, index, pre);
    int w = sprintf(hidx + pre, "\"shape\":[281474976710656,281474976710656,0]");
    strcpy(hidx + pre + w, at + strlen("\"shape\":[13,7]"));
  }
  ts_ckpt ckh = {0};
  CHECK(ckpt_index_parse(&ckh, hidx, strlen(hidx), "huge") < 0 && strstr(ts_last_error(), "too large"),
        "huge index dims: %s", ts_last_error());
  ckpt_free_contents(&ckh);
  free(hidx);

  /* parsers: 3000 mutations of each text */
  for (int k = 0; k < 3000; k++) {
    size_t n;
    char *t = mutate(&r, header, hlen, &n);
    parse_all(t, n, data_bytes);
    free(t);
    t = mutate(&r, index, ni, &n);
    parse_all(t, n, data_bytes);
    free(t);
  }
  printf("parsers: %d mutated texts, %d rejected by the index parser\n", n_cases, n_rejected);
  CHECK(n_cases == 6000 && n_rejected > 3000, "most mutations are rejected (%d of %d)", n_rejected, n_cases);

  /* the whole load path: 300 mutated block files, 300 mutated indexes */
  char ip[400], sp[400];
  snprintf(ip, sizeof ip, "%s/index.json", dir);
  snprintf(sp, sizeof sp, "%s/shard-00000-of-00001.safetensors", dir);
  for (int k = 0; k < 600; k++) {
    size_t n;
    bool idx = k % 2;
    char *t = idx ? mutate(&r, index, ni, &n) : mutate(&r, shard, ns, &n);
    spit(idx ? ip : sp, t, n);
    load_check(root, 5, c);
    free(t);
    spit(idx ? ip : sp, idx ? index : shard, idx ? ni : ns);
  }
  load_check(root, 5, c); /* restored: loads */
  free(index);
  free(shard);
  ts_client_free(c);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  if (ts_test_failed == 0 && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
  return ts_test_finish();
}
