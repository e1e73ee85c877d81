/* json.h — the checkpoint's own small JSON: a strict parser into a tree
 * (json.c) and writing helpers over util/strbuf.h. Strict means RFC 8259
 * only: no comments, no trailing commas, no NaN, no leading zeros, control
 * characters escaped, \u escapes paired correctly; duplicate object keys and
 * nesting deeper than JSON_MAX_DEPTH are errors. Every read is bounded by the
 * length passed in: the text need not be NUL-terminated. */
#ifndef TS_CKPT_JSON_H
#define TS_CKPT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

#define JSON_MAX_DEPTH 32

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_val json_val;
struct json_val {
  json_type type;
  bool boolean;
  bool is_int;        /* a number written without fraction or exponent that fits int64 */
  int64_t i;          /* its value when is_int */
  double num;         /* every number */
  char *str;          /* JSON_STRING: decoded UTF-8, NUL-terminated (len bytes, may hold no NUL) */
  size_t len;
  int n;              /* JSON_ARRAY / JSON_OBJECT: number of items */
  json_val *items;    /* (n) */
  char **keys;        /* (n) JSON_OBJECT: key of items[k] */
};

/* Parses text[0..len) as one JSON value (surrounding whitespace allowed).
 * NULL with the error set ("what: JSON error at byte 17: ...") otherwise. */
json_val *json_parse(const char *text, size_t len, const char *what);
void json_free(json_val *v);

/* Member `key` of an object (NULL if v is no object or lacks it). */
const json_val *json_get(const json_val *v, const char *key);

/* Appends s as a JSON string literal (quotes, escapes). */
void json_write_string(ts_strbuf *sb, const char *s);

#endif
