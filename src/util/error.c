/* error.c — the per-thread error message and code behind ts_last_error(). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessel/core.h"
#include "util/error.h"

static _Thread_local char last_error[1024];
static _Thread_local ts_status last_code = TS_OK;

static int set_v(ts_status code, const char *fmt, va_list ap) {
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  last_code = code;
  return -1;
}

int set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_v(TS_ERR_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return -1;
}

int set_error_code(ts_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_v(code, fmt, ap);
  va_end(ap);
  return -1;
}

int error_oom(const char *what, size_t bytes) {
  return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes)", what, bytes);
}

int set_error_context(const char *fmt, ...) {
  char old[sizeof last_error];
  snprintf(old, sizeof old, "%s", last_error);
  ts_status code = last_code == TS_OK ? TS_ERR_INTERNAL : last_code;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  const char *cause = old[0] ? old : "failed without a message";
  size_t at = n < 0 ? 0 : (size_t)n, len = strlen(cause);
  if (at + 2 < sizeof last_error) { /* "<context>: <cause>", cut at the buffer's end */
    memcpy(last_error + at, ": ", 2);
    at += 2;
    if (len > sizeof last_error - 1 - at) len = sizeof last_error - 1 - at;
    memcpy(last_error + at, cause, len);
    last_error[at + len] = '\0';
  }
  last_code = code;
  return -1;
}

const char *ts_last_error(void) { return last_error; }

ts_status ts_last_error_code(void) { return last_code; }

const char *ts_status_name(ts_status code) {
  static const char *const names[TS_STATUS_COUNT] = {
      [TS_OK] = "ok", [TS_ERR_INVALID_ARGUMENT] = "invalid_argument", [TS_ERR_OUT_OF_MEMORY] = "out_of_memory",
      [TS_ERR_IO] = "io", [TS_ERR_TIMEOUT] = "timeout", [TS_ERR_MISMATCH] = "mismatch",
      [TS_ERR_INTERNAL] = "internal"};
  return (unsigned)code < TS_STATUS_COUNT ? names[code] : "unknown";
}

void ts_clear_error(void) {
  last_error[0] = '\0';
  last_code = TS_OK;
}
