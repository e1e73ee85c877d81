/* tessel/core.h — errors, dtypes and shapes shared by every layer of the API.
 *
 * Error convention: functions that can fail return an int status (0 = ok,
 * -1 = error) or a handle/tensor (NULL / TS_NONE on error) and leave a
 * readable message in ts_last_error() (per thread). The library never exits. */
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

/* The message of the last failed call on this thread ("" if none). */
const char *ts_last_error(void);
/* Clears the message. */
void ts_clear_error(void);

/* Product of dims (1 for rank 0). */
int64_t ts_shape_numel(int rank, const int64_t *shape);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
