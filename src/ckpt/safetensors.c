/* safetensors.c — the safetensors header: parse (strict, every offset and
 * length checked against the file) and build. The format: an 8-byte
 * little-endian header length N, N bytes of JSON mapping each tensor name to
 * {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets into
 * the data that follows the header; an optional "__metadata__" object of
 * strings), then the raw little-endian data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"

static const char *const st_codes[TS_DTYPE_COUNT] = {
    [TS_F32] = "F32", [TS_F64] = "F64", [TS_BF16] = "BF16", [TS_F16] = "F16",
    [TS_I32] = "I32", [TS_I64] = "I64", [TS_U8] = "U8",     [TS_BOOL] = "BOOL"};

const char *st_dtype_code(ts_dtype dt) { return (unsigned)dt < TS_DTYPE_COUNT ? st_codes[dt] : "?"; }

int st_dtype_from_code(const char *code, ts_dtype *out) {
  for (int d = 0; d < TS_DTYPE_COUNT; d++)
    if (strcmp(code, st_codes[d]) == 0) {
      *out = (ts_dtype)d;
      return 0;
    }
  return -1;
}

void st_header_free(st_header *h) {
  if (!h) return;
  for (int i = 0; i < h->n; i++) free(h->e[i].name);
  free(h->e);
  memset(h, 0, sizeof *h);
}

const st_entry *st_header_find(const st_header *h, const char *name) {
  for (int i = 0; i < h->n; i++)
    if (strcmp(h->e[i].name, name) == 0) return &h->e[i];
  return NULL;
}

static int st_by_begin(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* One entry {"dtype", "shape", "data_offsets"} named `name`. */
static int st_entry_parse(const json_val *v, const char *name, uint64_t data_bytes, const char *file, st_entry *e) {
  if (v->type != JSON_OBJECT)
    return set_error("%s: safetensors header: tensor '%s' is not an object", file, name);
  const json_val *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
  if (!dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY || !off || off->type != JSON_ARRAY ||
      v->n != 3)
    return set_error("%s: safetensors header: tensor '%s' needs exactly dtype, shape and data_offsets", file,
                        name);
  if (st_dtype_from_code(dt->str, &e->dt) < 0)
    return set_error("%s: safetensors header: tensor '%s' has unsupported dtype '%s'", file, name, dt->str);
  if (sh->n > TS_MAX_RANK)
    return set_error("%s: safetensors header: tensor '%s' has rank %d (at most %d)", file, name, sh->n,
                        TS_MAX_RANK);
  e->rank = sh->n;
  uint64_t numel = 1, nonzero = 1; /* nonzero: the product of the non-zero dims, bounded before each step */
  for (int d = 0; d < sh->n; d++) {
    const json_val *x = &sh->items[d];
    if (x->type != JSON_NUMBER || !x->is_int || x->i < 0 || x->i > ((int64_t)1 << 48))
      return set_error("%s: safetensors header: tensor '%s' has a bad shape entry %d", file, name, d);
    e->shape[d] = x->i;
    if (x->i > 0 && nonzero > (((uint64_t)1 << 48) / (uint64_t)x->i))
      return set_error("%s: safetensors header: tensor '%s' is too large", file, name);
    if (x->i > 0) nonzero *= (uint64_t)x->i;
    numel *= (uint64_t)x->i;
  }
  if (off->n != 2 || off->items[0].type != JSON_NUMBER || !off->items[0].is_int || off->items[0].i < 0 ||
      off->items[1].type != JSON_NUMBER || !off->items[1].is_int || off->items[1].i < 0)
    return set_error("%s: safetensors header: tensor '%s' needs data_offsets [begin, end] of two non-negative "
                        "integers", file, name);
  e->begin = (uint64_t)off->items[0].i;
  e->end = (uint64_t)off->items[1].i;
  if (e->begin > e->end || e->end > data_bytes)
    return set_error("%s: safetensors header: tensor '%s' has data_offsets [%llu, %llu] outside the %llu data "
                        "bytes of the file (truncated?)",
                        file, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                        (unsigned long long)data_bytes);
  if (e->end - e->begin != numel * ts_dtype_size(e->dt))
    return set_error("%s: safetensors header: tensor '%s' has %llu data bytes but its dtype and shape need %llu",
                        file, name, (unsigned long long)(e->end - e->begin),
                        (unsigned long long)(numel * ts_dtype_size(e->dt)));
  return 0;
}

int st_header_parse(const char *text, size_t len, uint64_t data_bytes, const char *file, st_header *out) {
  memset(out, 0, sizeof *out);
  out->header_len = len;
  char what[512];
  snprintf(what, sizeof what, "%s: safetensors header", file);
  json_val *root = json_parse(text, len, what);
  if (!root) return -1;
  int rc = 0;
  if (root->type != JSON_OBJECT) {
    rc = set_error("%s: safetensors header is not a JSON object", file);
    goto done;
  }
  if (!(out->e = calloc((size_t)root->n + 1, sizeof *out->e))) {
    rc = set_error("%s: out of memory", file);
    goto done;
  }
  for (int k = 0; k < root->n && rc == 0; k++) {
    const char *name = root->keys[k];
    const json_val *v = &root->items[k];
    if (strcmp(name, "__metadata__") == 0) {
      if (v->type != JSON_OBJECT) rc = set_error("%s: safetensors __metadata__ is not an object", file);
      for (int j = 0; rc == 0 && j < v->n; j++)
        if (v->items[j].type != JSON_STRING)
          rc = set_error("%s: safetensors __metadata__ value '%s' is not a string", file, v->keys[j]);
      continue;
    }
    st_entry *e = &out->e[out->n];
    if (!(e->name = strdup(name))) {
      rc = set_error("%s: out of memory", file);
      break;
    }
    out->n++;
    rc = st_entry_parse(v, name, data_bytes, file, e);
  }
  if (rc == 0 && out->n > 0) { /* no two tensors may share bytes */
    const st_entry **by = malloc((size_t)out->n * sizeof *by);
    if (!by) {
      rc = set_error("%s: out of memory", file);
      goto done;
    }
    for (int i = 0; i < out->n; i++) by[i] = &out->e[i];
    qsort(by, (size_t)out->n, sizeof *by, st_by_begin);
    for (int i = 1; i < out->n && rc == 0; i++)
      if (by[i]->begin < by[i - 1]->end)
        rc = set_error("%s: safetensors header: tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and "
                          "[%llu, %llu])",
                          file, by[i - 1]->name, by[i]->name, (unsigned long long)by[i - 1]->begin,
                          (unsigned long long)by[i - 1]->end, (unsigned long long)by[i]->begin,
                          (unsigned long long)by[i]->end);
    free(by);
  }
done:
  json_free(root);
  if (rc != 0) st_header_free(out);
  return rc;
}

char *st_header_build(int n, const st_entry *e, size_t *len) {
  ts_strbuf sb = {0};
  sb_printf(&sb, "{");
  for (int i = 0; i < n; i++) {
    if (i) sb_printf(&sb, ",");
    json_write_string(&sb, e[i].name);
    sb_printf(&sb, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_code(e[i].dt));
    for (int d = 0; d < e[i].rank; d++) sb_printf(&sb, d ? ",%lld" : "%lld", (long long)e[i].shape[d]);
    sb_printf(&sb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e[i].begin,
                 (unsigned long long)e[i].end);
  }
  sb_printf(&sb, "}");
  /* Pad with spaces: the data then starts 8-byte aligned, as safetensors writes it. */
  while (!sb.oom && (8 + sb.len) % 8) sb_printf(&sb, " ");
  char *s = sb_finish(&sb, "safetensors header");
  if (s) *len = strlen(s);
  return s;
}
