/* error.h — the library's error state: a per-thread message and status code
 * behind ts_last_error() / ts_last_error_code(). Every layer reports failures
 * through these functions and returns -1 / NULL / TS_NONE; the library never
 * exits or aborts.
 *
 * Which to call:
 *   set_error          a bad argument or state (TS_ERR_INVALID_ARGUMENT)
 *   set_error_code     any other class: TS_ERR_IO for files,
 *                         TS_ERR_TIMEOUT for collectives and processes that
 *                         do not answer, TS_ERR_MISMATCH when processes
 *                         disagree, TS_ERR_INTERNAL for "cannot happen"
 *   error_oom                an allocation failed (TS_ERR_OUT_OF_MEMORY)
 *   set_error_context  a callee failed and already set the error: prefix
 *                         its message with context and keep its code. A
 *                         caller that instead calls set_error replaces the
 *                         code with TS_ERR_INVALID_ARGUMENT, so re-raising
 *                         sites use set_error_context.
 * A message handed from one thread to another (device threads, loader
 * workers, the async all-reduce worker) is stored with its code and re-raised
 * with set_error_code(code, "%s", msg). */
#ifndef TS_UTIL_ERROR_H
#define TS_UTIL_ERROR_H

#include <stddef.h>

#include "tessel/core.h" /* ts_status, ts_last_error, ts_clear_error */

/* Sets the calling thread's error message with TS_ERR_INVALID_ARGUMENT; returns -1. */
int set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sets the message with the given code; returns -1. */
int set_error_code(ts_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "<what>: out of memory (<bytes> bytes)" with TS_ERR_OUT_OF_MEMORY; returns -1. */
int error_oom(const char *what, size_t bytes);
/* Prefixes the current message with "<context>: " and keeps the current code
 * (TS_ERR_INTERNAL if no error was set: a callee failed without saying why);
 * returns -1. */
int set_error_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
