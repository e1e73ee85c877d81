/* error.h — the library's error state: a per-thread message behind
 * ts_last_error(). Every layer reports failures through ts_set_error and
 * returns -1 / NULL / TS_NONE; the library never exits. */
#ifndef TS_UTIL_ERROR_H
#define TS_UTIL_ERROR_H

#include "tessel/core.h" /* ts_last_error, ts_clear_error */

/* Sets the calling thread's error message; returns -1. */
int ts_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
