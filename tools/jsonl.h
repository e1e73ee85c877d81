/* jsonl.h — a tiny reader for JSON-lines logs of flat objects, such as
 * `tessel train --log-json`: one object per line whose values are numbers,
 * null, strings or booleans. Nested values (objects, arrays) are checked for
 * balance and skipped. Anything else makes the line malformed; the caller
 * decides what to say (it knows the file name and line number). */
#ifndef TESSEL_TOOLS_JSONL_H
#define TESSEL_TOOLS_JSONL_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
  JSONL_NUMBER, /* num; NaN/Infinity (Python's json writes them) are numbers too */
  JSONL_NULL,
  JSONL_STRING, /* str: decoded, NUL-terminated UTF-8 */
  JSONL_BOOL,   /* num: 0 or 1 */
} jsonl_kind;

typedef struct {
  char *key;
  jsonl_kind kind;
  double num;
  char *str;
} jsonl_field;

/* One parsed line: its scalar fields in order (nested values left out). */
typedef struct {
  jsonl_field *fields; // (n)
  int n, cap;
} jsonl_object;

/* Parses one line (len bytes, no newline needed; trailing '\r' and blanks are
 * fine) into o, replacing what o held. Returns 1 for an object, 0 for a blank
 * line, -1 for a malformed one (not one object, bad syntax, a NUL byte,
 * nesting deeper than 64, out of memory). */
int jsonl_parse(const char *line, size_t len, jsonl_object *o);

/* The last field named key (a repeated key's last value wins, as in Python),
 * or NULL. */
const jsonl_field *jsonl_get(const jsonl_object *o, const char *key);

/* Frees what o holds and empties it (o itself is the caller's). */
void jsonl_clear(jsonl_object *o);

#endif
