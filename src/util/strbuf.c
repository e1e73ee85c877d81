/* strbuf.c — the growable text buffer of strbuf.h. */
#include "util/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/error.h"

void sb_printf(ts_strbuf *sb, const char *fmt, ...) {
  if (sb->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sb->buf ? sb->buf + sb->len : NULL, sb->buf ? sb->cap - sb->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      sb->oom = true;
      return;
    }
    if (sb->buf && sb->len + (size_t)n < sb->cap) {
      sb->len += (size_t)n;
      return;
    }
    size_t cap = sb->cap * 2 + (size_t)n + 256;
    char *b = realloc(sb->buf, cap);
    if (!b) {
      sb->oom = true;
      return;
    }
    sb->buf = b;
    sb->cap = cap;
  }
}

char *sb_finish(ts_strbuf *sb, const char *who) {
  if (!sb->oom && !sb->buf) sb_printf(sb, "%s", ""); /* an empty text is "", not NULL */
  if (sb->oom) {
    free(sb->buf);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    return NULL;
  }
  return sb->buf;
}
