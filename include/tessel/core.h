/* tessel/core.h — errors, dtypes and shapes shared by every layer of the API,
 * and the rules every header follows.
 *
 * Errors: functions that can fail return an int status (0 = ok, -1 = error)
 * or a handle/tensor (NULL / TS_NONE on error) and leave, per thread, a
 * readable message in ts_last_error() and its class in ts_last_error_code().
 * The library never exits and never aborts: the one exception is
 * ts_client_abort, whose purpose is to end the whole MPI job. Every failed
 * allocation is reported (TS_ERR_OUT_OF_MEMORY) and leaves the objects
 * involved as they were or safe to free.
 *
 * Ownership: what a function named *_new, *_from_*, ts_compile or
 * ts_source_synthetic returns belongs to the caller, who frees it with the
 * type's *_free (ts_executable_free, ts_buffer_free, ...); returned strings
 * (char *: *_to_string, *_report, ...) are malloc'd: free() them. Everything
 * else a function returns by pointer (const char *, const int64_t *, const
 * ts_sharding *, ts_params_buffer, ts_loader_next, ...) is borrowed from its
 * argument and valid while that lives (headers say when less). Pointer
 * arguments are only read during the call unless a header says they are
 * borrowed for an object's lifetime (a loader's source and input shardings).
 * Inputs are copied where they are kept: a sharding copies its mesh, an
 * executable its shardings, so meshes, shardings, graphs and options may be
 * freed as soon as the call returns.
 *
 * Teardown order: whatever holds device memory goes before its client:
 * executables, buffers (including the outputs ts_execute created) and
 * parameter sets that made buffers on it (ts_params_free) before
 * ts_client_free; a loader before its source; the rest in any order.
 *
 * Threads: the error state is per thread. Graphs, parameter sets, buffers,
 * executables, clients and loaders take no locks: use each (and a client
 * with everything made from it) from one thread at a time; distinct graphs
 * may be built on distinct threads. The metrics registry, traces and the
 * compile cache may be used from any thread. Threads tessel starts itself
 * (one per device, loader workers, the async all-reduce worker) are internal.
 *
 * Several processes (MPI): these calls are collective (every process makes
 * them, in the same order, or the others wait until the collective timeout):
 * ts_client_new under a launcher (unless process_local), ts_compile on a
 * client of several processes, ts_execute of a program spanning processes (an
 * SPMD mesh over them or a replica program), ts_buffer_read and
 * ts_buffer_reshard of a buffer with blocks in other processes, and
 * ts_client_check_same. runtime.h says more.
 *
 * Options structs (ts_client_options, ts_compile_options, ts_loader_options)
 * follow one rule that keeps the ABI stable: zero-initialize them (`= {0}` or
 * a compound literal) and set only the fields you need; every field's zero
 * value means its default; new fields are only ever appended at the end, so
 * a program compiled against an older header keeps working. A NULL options
 * pointer means all defaults (ts_client_new, ts_compile; ts_loader_new needs
 * options: its batch size has no default). */
#ifndef TESSEL_CORE_H
#define TESSEL_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

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

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
