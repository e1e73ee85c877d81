/* jsonl.c — a recursive-descent parser for one line of a JSON-lines log:
 * a flat object of scalars; nested values are validated (to depth 64) and
 * skipped. Strict JSON otherwise, plus NaN/Infinity/-Infinity, which Python's
 * json module writes for non-finite floats. */
#include "jsonl.h"

#include <math.h>   // NAN, INFINITY
#include <stdint.h> // uint32_t
#include <stdlib.h> // malloc, realloc, strtod
#include <string.h>

#define JSONL_MAX_DEPTH 64

typedef struct {
  const char *p, *end;
} cursor;

static int peek(const cursor *c) { return c->p < c->end ? (unsigned char)*c->p : -1; }

static void skip_ws(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) c->p++;
}

static bool eat(cursor *c, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return false;
  c->p += n;
  return true;
}

static int hex4(const char *s, uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char h = s[i];
    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + (uint32_t)d;
  }
  *out = v;
  return 0;
}

static char *put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xC0 | cp >> 6);
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xE0 | cp >> 12);
    *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *o++ = (char)(0xF0 | cp >> 18);
    *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
    *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  }
  return o;
}

/* One \uXXXX escape (a surrogate pair takes two) at s, after the backslash-u
 * was consumed up to s; writes UTF-8 to *o. Returns the bytes read or -1. */
static int unicode_escape(const char *s, const char *end, char **o) {
  uint32_t cp, lo;
  if (end - s < 4 || hex4(s, &cp) < 0) return -1;
  if (cp >= 0xD800 && cp < 0xDC00) { // high surrogate: a low one must follow
    if (end - s < 10 || s[4] != '\\' || s[5] != 'u' || hex4(s + 6, &lo) < 0 ||
        lo < 0xDC00 || lo >= 0xE000)
      return -1;
    *o = put_utf8(*o, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
    return 10;
  }
  if (cp >= 0xDC00 && cp < 0xE000) return -1; // a lone low surrogate
  *o = put_utf8(*o, cp);
  return 4;
}

/* A string at c (opening quote next). Stores the decoded text in *out
 * (malloc'd) unless out is NULL. Decoding never grows the text, so the
 * output buffer is the raw span's size. */
static int parse_string(cursor *c, char **out) {
  if (peek(c) != '"') return -1;
  const char *s = ++c->p;
  while (c->p < c->end && *c->p != '"') {
    if ((unsigned char)*c->p < 0x20) return -1; // raw control characters are not JSON
    c->p += *c->p == '\\' ? 2 : 1;
  }
  if (c->p >= c->end) return -1;
  const char *e = c->p++; // past the closing quote
  char *buf = malloc((size_t)(e - s) + 1), *o = buf;
  if (!buf) return -1;
  for (const char *q = s; q < e; q++) {
    if (*q != '\\') {
      *o++ = *q;
      continue;
    }
    q++;
    const char *simple = strchr("\"\\/bfnrt", *q);
    if (*q && simple) {
      *o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
    } else if (*q == 'u') {
      int used = unicode_escape(q + 1, e, &o);
      if (used < 0) {
        free(buf);
        return -1;
      }
      q += used;
    } else {
      free(buf);
      return -1;
    }
  }
  *o = '\0';
  if (out) *out = buf;
  else free(buf);
  return 0;
}

static size_t digits(cursor *c) {
  const char *s = c->p;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
  return (size_t)(c->p - s);
}

/* A number in JSON's grammar (or NaN, Infinity, -Infinity). */
static int parse_number(cursor *c, double *out) {
  const char *s = c->p;
  bool neg = peek(c) == '-';
  if (neg) c->p++;
  if (eat(c, "Infinity")) {
    *out = neg ? -INFINITY : INFINITY;
    return 0;
  }
  if (!neg && eat(c, "NaN")) {
    *out = NAN;
    return 0;
  }
  if (peek(c) == '0') c->p++;
  else if (digits(c) == 0) return -1;
  if (peek(c) == '.') {
    c->p++;
    if (digits(c) == 0) return -1;
  }
  if (peek(c) == 'e' || peek(c) == 'E') {
    c->p++;
    if (peek(c) == '+' || peek(c) == '-') c->p++;
    if (digits(c) == 0) return -1;
  }
  // strtod wants a terminated string; the span is validated, so copy it
  size_t n = (size_t)(c->p - s);
  char small[64], *text = n < sizeof small ? small : malloc(n + 1);
  if (!text) return -1;
  memcpy(text, s, n);
  text[n] = '\0';
  *out = strtod(text, NULL); // 1e999 becomes inf: a number, just not a usable one
  if (text != small) free(text);
  return 0;
}

/* Validates and skips any value, nested ones to JSONL_MAX_DEPTH. */
static int skip_value(cursor *c, int depth) {
  skip_ws(c);
  int open = peek(c);
  if (open != '{' && open != '[') {
    double unused;
    if (peek(c) == '"') return parse_string(c, NULL);
    if (eat(c, "true") || eat(c, "false") || eat(c, "null")) return 0;
    return parse_number(c, &unused);
  }
  if (depth >= JSONL_MAX_DEPTH) return -1;
  int close = open == '{' ? '}' : ']';
  c->p++;
  skip_ws(c);
  if (peek(c) == close) {
    c->p++;
    return 0;
  }
  for (;;) {
    if (open == '{') {
      skip_ws(c);
      if (parse_string(c, NULL) < 0) return -1;
      skip_ws(c);
      if (peek(c) != ':') return -1;
      c->p++;
    }
    if (skip_value(c, depth + 1) < 0) return -1;
    skip_ws(c);
    int next = peek(c);
    c->p++;
    if (next == close) return 0;
    if (next != ',') return -1;
  }
}

static jsonl_field *add_field(jsonl_object *o) {
  if (o->n == o->cap) {
    int cap = o->cap ? 2 * o->cap : 8;
    jsonl_field *f = realloc(o->fields, (size_t)cap * sizeof *f);
    if (!f) return NULL;
    o->fields = f;
    o->cap = cap;
  }
  jsonl_field *f = &o->fields[o->n++];
  memset(f, 0, sizeof *f);
  return f;
}

/* A scalar value into f; -2 when the value is nested (the caller skips it). */
static int parse_scalar(cursor *c, jsonl_field *f) {
  int ch = peek(c);
  if (ch == '{' || ch == '[') return -2;
  if (ch == '"') {
    f->kind = JSONL_STRING;
    return parse_string(c, &f->str);
  }
  if (eat(c, "null")) {
    f->kind = JSONL_NULL;
    return 0;
  }
  bool t = eat(c, "true");
  if (t || eat(c, "false")) {
    f->kind = JSONL_BOOL;
    f->num = t;
    return 0;
  }
  f->kind = JSONL_NUMBER;
  return parse_number(c, &f->num);
}

/* One "key": value member of the top-level object. */
static int parse_member(cursor *c, jsonl_object *o) {
  char *key = NULL;
  skip_ws(c);
  if (parse_string(c, &key) < 0) return -1;
  skip_ws(c);
  if (peek(c) != ':') {
    free(key);
    return -1;
  }
  c->p++;
  skip_ws(c);
  jsonl_field *f = add_field(o);
  if (!f) {
    free(key);
    return -1;
  }
  f->key = key;
  int rc = parse_scalar(c, f);
  if (rc == -2) { // nested: drop the field, skip the value
    free(key);
    o->n--;
    return skip_value(c, 1);
  }
  return rc;
}

static void free_fields(jsonl_object *o) {
  for (int i = 0; i < o->n; i++) {
    free(o->fields[i].key);
    free(o->fields[i].str);
  }
  o->n = 0;
}

int jsonl_parse(const char *line, size_t len, jsonl_object *o) {
  free_fields(o);
  if (memchr(line, '\0', len)) return -1;
  cursor c = {line, line + len};
  skip_ws(&c);
  if (c.p == c.end) return 0;
  if (peek(&c) != '{') return -1;
  c.p++;
  skip_ws(&c);
  if (peek(&c) == '}') {
    c.p++;
  } else {
    for (;;) {
      if (parse_member(&c, o) < 0) return -1;
      skip_ws(&c);
      int next = peek(&c);
      c.p++;
      if (next == '}') break;
      if (next != ',') return -1;
    }
  }
  skip_ws(&c);
  return c.p == c.end ? 1 : -1;
}

const jsonl_field *jsonl_get(const jsonl_object *o, const char *key) {
  for (int i = o->n - 1; i >= 0; i--)
    if (strcmp(o->fields[i].key, key) == 0) return &o->fields[i];
  return NULL;
}

void jsonl_clear(jsonl_object *o) {
  free_fields(o);
  free(o->fields);
  o->fields = NULL;
  o->cap = 0;
}
