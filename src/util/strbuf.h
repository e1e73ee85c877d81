/* strbuf.h — a growable text buffer for printers and reports (graph text,
 * metrics reports, traces, cache keys). Appends never fail loudly: an
 * allocation failure sets .oom and later appends do nothing; sb_finish
 * reports it once. Start from a zeroed struct. */
#ifndef TS_STRBUF_H
#define TS_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} ts_strbuf;

void sb_printf(ts_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns the text (caller frees; "" when nothing was appended) or NULL with
 * "<who>: out of memory" set. */
char *sb_finish(ts_strbuf *sb, const char *who);

#endif
