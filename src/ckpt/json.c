/* json.c — a strict, bounds-checked JSON parser (json.h) for checkpoint
 * headers and indexes, which come from files and so may be anything: every
 * byte is checked against the length, recursion is capped, and numbers are
 * parsed from a bounded copy. */
#include "ckpt/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

typedef struct {
  const char *s;
  size_t len, pos;
  const char *what;
  bool failed;
} json_parser;

static int json_fail(json_parser *p, const char *msg) {
  if (!p->failed) set_error("%s: JSON error at byte %zu: %s", p->what, p->pos, msg);
  p->failed = true;
  return -1;
}

static void json_skip_ws(json_parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int json_value(json_parser *p, json_val *v, int depth);

/* Four hex digits at p->pos. */
static int json_hex4(json_parser *p, unsigned *out) {
  if (p->len - p->pos < 4) return json_fail(p, "truncated \\u escape");
  unsigned u = 0;
  for (int k = 0; k < 4; k++) {
    char c = p->s[p->pos++];
    u <<= 4;
    if (c >= '0' && c <= '9') u |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') u |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') u |= (unsigned)(c - 'A' + 10);
    else return json_fail(p, "bad hex digit in \\u escape");
  }
  *out = u;
  return 0;
}

/* A string literal starting at the opening quote; decoded into *out (malloc'd). */
static int json_string(json_parser *p, char **out, size_t *out_len) {
  p->pos++; /* the quote */
  /* The decoded text is never longer than the literal. */
  size_t start = p->pos, end = start;
  while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->len) return json_fail(p, "unterminated string");
  char *buf = malloc(end - start + 1);
  if (!buf) return json_fail(p, "out of memory");
  size_t n = 0, full_len = p->len;
  p->len = end; /* escapes may not read past the closing quote */
  while (p->pos < end) {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c < 0x20) {
      p->len = full_len;
      free(buf);
      return json_fail(p, "control character in string");
    }
    if (c != '\\') {
      buf[n++] = (char)c;
      p->pos++;
      continue;
    }
    p->pos++;
    char e = p->s[p->pos++];
    switch (e) {
    case '"': buf[n++] = '"'; break;
    case '\\': buf[n++] = '\\'; break;
    case '/': buf[n++] = '/'; break;
    case 'b': buf[n++] = '\b'; break;
    case 'f': buf[n++] = '\f'; break;
    case 'n': buf[n++] = '\n'; break;
    case 'r': buf[n++] = '\r'; break;
    case 't': buf[n++] = '\t'; break;
    case 'u': {
      unsigned u, lo;
      if (json_hex4(p, &u) < 0) break;
      if (u >= 0xDC00 && u <= 0xDFFF) {
        json_fail(p, "unpaired low surrogate in \\u escape");
        break;
      }
      if (u >= 0xD800 && u <= 0xDBFF) {
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
          json_fail(p, "unpaired high surrogate in \\u escape");
          break;
        }
        p->pos += 2;
        if (json_hex4(p, &lo) < 0) break;
        if (lo < 0xDC00 || lo > 0xDFFF) {
          json_fail(p, "bad low surrogate in \\u escape");
          break;
        }
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (u == 0) {
        json_fail(p, "\\u0000 in string");
        break;
      }
      /* UTF-8: at most 4 bytes, never more than the 6 (or 12) escape bytes */
      if (u < 0x80) buf[n++] = (char)u;
      else if (u < 0x800) buf[n++] = (char)(0xC0 | (u >> 6)), buf[n++] = (char)(0x80 | (u & 0x3F));
      else if (u < 0x10000)
        buf[n++] = (char)(0xE0 | (u >> 12)), buf[n++] = (char)(0x80 | ((u >> 6) & 0x3F)),
        buf[n++] = (char)(0x80 | (u & 0x3F));
      else
        buf[n++] = (char)(0xF0 | (u >> 18)), buf[n++] = (char)(0x80 | ((u >> 12) & 0x3F)),
        buf[n++] = (char)(0x80 | ((u >> 6) & 0x3F)), buf[n++] = (char)(0x80 | (u & 0x3F));
      break;
    }
    default: json_fail(p, "bad escape in string"); break;
    }
    if (p->failed) {
      p->len = full_len;
      free(buf);
      return -1;
    }
  }
  p->len = full_len;
  p->pos = end + 1;
  buf[n] = 0;
  *out = buf;
  if (out_len) *out_len = n;
  return 0;
}

static int json_number(json_parser *p, json_val *v) {
  size_t st = p->pos;
  bool integral = true;
  if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
  if (p->pos >= p->len) return json_fail(p, "truncated number");
  if (p->s[p->pos] == '0') {
    p->pos++;
    if (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') return json_fail(p, "leading zero in number");
  } else if (p->s[p->pos] >= '1' && p->s[p->pos] <= '9') {
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
  } else {
    return json_fail(p, "bad number");
  }
  if (p->pos < p->len && p->s[p->pos] == '.') {
    integral = false;
    p->pos++;
    size_t d = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos == d) return json_fail(p, "no digits after the decimal point");
  }
  if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
    integral = false;
    p->pos++;
    if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
    size_t d = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos == d) return json_fail(p, "no digits in the exponent");
  }
  char tmp[64];
  size_t n = p->pos - st;
  if (n >= sizeof tmp) return json_fail(p, "number too long");
  memcpy(tmp, p->s + st, n);
  tmp[n] = 0;
  v->type = JSON_NUMBER;
  errno = 0;
  v->num = strtod(tmp, NULL);
  if (!isfinite(v->num)) return json_fail(p, "number out of range");
  if (integral) {
    errno = 0;
    long long i = strtoll(tmp, NULL, 10);
    if (errno == 0) v->is_int = true, v->i = i;
  }
  return 0;
}

static int json_literal(json_parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return json_fail(p, "unexpected character");
  p->pos += n;
  return 0;
}

/* Appends a zeroed item to an array/object under construction. */
static json_val *json_push(json_parser *p, json_val *v, int *cap) {
  if (v->n == *cap) {
    int nc = *cap ? *cap * 2 : 4;
    json_val *ni = realloc(v->items, (size_t)nc * sizeof *ni);
    if (!ni) return json_fail(p, "out of memory"), NULL;
    v->items = ni;
    if (v->type == JSON_OBJECT) {
      char **nk = realloc(v->keys, (size_t)nc * sizeof *nk);
      if (!nk) return json_fail(p, "out of memory"), NULL;
      v->keys = nk;
    }
    *cap = nc;
  }
  json_val *it = &v->items[v->n];
  memset(it, 0, sizeof *it);
  if (v->type == JSON_OBJECT) v->keys[v->n] = NULL;
  v->n++;
  return it;
}

static int json_container(json_parser *p, json_val *v, int depth) {
  bool obj = p->s[p->pos] == '{';
  char close = obj ? '}' : ']';
  v->type = obj ? JSON_OBJECT : JSON_ARRAY;
  p->pos++;
  int cap = 0;
  json_skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
    return 0;
  }
  for (;;) {
    json_skip_ws(p);
    char *key = NULL;
    if (obj) {
      if (p->pos >= p->len || p->s[p->pos] != '"') return json_fail(p, "expected a string key");
      if (json_string(p, &key, NULL) < 0) return -1;
      for (int k = 0; k < v->n; k++)
        if (strcmp(v->keys[k], key) == 0) {
          free(key);
          return json_fail(p, "duplicate key in object");
        }
      json_skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') {
        free(key);
        return json_fail(p, "expected ':' after a key");
      }
      p->pos++;
    }
    json_val *it = json_push(p, v, &cap);
    if (!it) {
      free(key);
      return -1;
    }
    if (obj) v->keys[v->n - 1] = key;
    if (json_value(p, it, depth + 1) < 0) return -1;
    json_skip_ws(p);
    if (p->pos >= p->len) return json_fail(p, obj ? "unterminated object" : "unterminated array");
    char c = p->s[p->pos++];
    if (c == close) return 0;
    if (c != ',') return json_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int json_value(json_parser *p, json_val *v, int depth) {
  if (depth > JSON_MAX_DEPTH) return json_fail(p, "nesting too deep");
  json_skip_ws(p);
  if (p->pos >= p->len) return json_fail(p, "unexpected end of text");
  char c = p->s[p->pos];
  switch (c) {
  case '{':
  case '[': return json_container(p, v, depth);
  case '"':
    v->type = JSON_STRING;
    return json_string(p, &v->str, &v->len);
  case 't':
    v->type = JSON_BOOL, v->boolean = true;
    return json_literal(p, "true");
  case 'f':
    v->type = JSON_BOOL;
    return json_literal(p, "false");
  case 'n':
    v->type = JSON_NULL;
    return json_literal(p, "null");
  default:
    if (c == '-' || (c >= '0' && c <= '9')) return json_number(p, v);
    return json_fail(p, "unexpected character");
  }
}

static void json_clear(json_val *v) {
  free(v->str);
  for (int k = 0; k < v->n; k++) {
    json_clear(&v->items[k]);
    if (v->keys) free(v->keys[k]);
  }
  free(v->items);
  free(v->keys);
}

void json_free(json_val *v) {
  if (!v) return;
  json_clear(v);
  free(v);
}

json_val *json_parse(const char *text, size_t len, const char *what) {
  json_parser p = {.s = text, .len = len, .what = what ? what : "json"};
  json_val *v = calloc(1, sizeof *v);
  if (!v || !text) {
    free(v);
    set_error("%s: %s", p.what, text ? "out of memory" : "no text");
    return NULL;
  }
  if (json_value(&p, v, 0) == 0) {
    json_skip_ws(&p);
    if (p.pos != p.len) json_fail(&p, "trailing characters after the value");
  }
  if (p.failed) {
    json_free(v);
    return NULL;
  }
  return v;
}

const json_val *json_get(const json_val *v, const char *key) {
  if (!v || v->type != JSON_OBJECT) return NULL;
  for (int k = 0; k < v->n; k++)
    if (strcmp(v->keys[k], key) == 0) return &v->items[k];
  return NULL;
}

void json_write_string(ts_strbuf *sb, const char *s) {
  sb_printf(sb, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') sb_printf(sb, "\\%c", *c);
    else if (*c < 0x20) sb_printf(sb, "\\u%04x", *c);
    else sb_printf(sb, "%c", *c);
  }
  sb_printf(sb, "\"");
}
