/* error.c — the per-thread error message behind ts_last_error(). */
#include <stdarg.h>
#include <stdio.h>

#include "tessel/core.h"
#include "util/error.h"

static _Thread_local char last_error[1024];

int ts_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return -1;
}

const char *ts_last_error(void) { return last_error; }

void ts_clear_error(void) { last_error[0] = '\0'; }
