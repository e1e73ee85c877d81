/* tessel/core.h — errors, dtypes and shapes shared by every layer of the API.
 *
 * Error convention: functions that can fail return an int status (0 = ok,
 * -1 = error) or a handle/tensor (NULL / TS_NONE on error) and leave, per
 * thread, a readable message in ts_last_error() and its class in
 * ts_last_error_code(). The library never exits and never aborts (the one
 * exception is the documented ts_client_abort, which ends the whole MPI job);
 * every allocation failure is reported as TS_ERR_OUT_OF_MEMORY.
 *
 * Ownership: a function named *_new, *_from_*, *_compile, *_load or
 * *_to_string returns an object the caller owns and frees with the matching
 * *_free (strings: free()); each header says when a return value is borrowed
 * instead. Objects are freed before the objects they were made from (an
 * executable or buffer before its client, a sharding before its mesh).
 *
 * Options structs (ts_client_options, ts_compile_options, ts_loader_options,
 * ...) follow one rule that keeps the ABI stable: zero-initialize them
 * (`= {0}` or a compound literal) and set only the fields you need; every
 * field's zero value means its default; a NULL options pointer means all
 * defaults; new fields are only ever appended at the end. */
#ifndef TESSEL_CORE_H
#define TESSEL_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_VERSION_STRING "0.1.0"
#define TS_MAX_RANK 8

typedef enum {
  TS_F32 = 0,
  TS_F64,
  TS_BF16,
  TS_F16,
  TS_I32,
  TS_I64,
  TS_U8,
  TS_BOOL,
  TS_DTYPE_COUNT
} ts_dtype;

/* Size in bytes of one element; "f32", "bf16", ...; parse the name back
 * (returns -1 and sets the error for an unknown name). */
size_t ts_dtype_size(ts_dtype dt);
const char *ts_dtype_name(ts_dtype dt);
int ts_dtype_parse(const char *name, ts_dtype *out);
bool ts_dtype_is_float(ts_dtype dt);

/* What kind of failure the last failed call on this thread had. */
typedef enum {
  TS_OK = 0,                /* no error recorded (after ts_clear_error) */
  TS_ERR_INVALID_ARGUMENT,  /* a bad argument, shape, name, spec or state */
  TS_ERR_OUT_OF_MEMORY,     /* an allocation failed */
  TS_ERR_IO,                /* a file could not be opened, read or written */
  TS_ERR_TIMEOUT,           /* a collective or another process did not answer in time */
  TS_ERR_MISMATCH,          /* processes disagree (program hash, mesh, configuration) */
  TS_ERR_INTERNAL,          /* a bug in tessel ("cannot happen") */
  TS_STATUS_COUNT
} ts_status;

/* The message of the last failed call on this thread ("" if none). A call
 * that succeeds leaves the message and code of an earlier failure in place,
 * so read them only after a call reported failure. When a failure passes up
 * through several layers the message gathers their context
 * ("ts_compile: ...: out of memory ...") and the code stays the innermost
 * cause's. */
const char *ts_last_error(void);
/* The class of that failure (TS_OK if none was recorded). */
ts_status ts_last_error_code(void);
/* "ok", "invalid_argument", "out_of_memory", "io", "timeout", "mismatch",
 * "internal" ("unknown" for other values). */
const char *ts_status_name(ts_status code);
/* Clears the message and sets the code to TS_OK. */
void ts_clear_error(void);

/* Product of dims (1 for rank 0). */
int64_t ts_shape_numel(int rank, const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
