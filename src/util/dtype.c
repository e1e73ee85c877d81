/* dtype.c — element types: sizes, names, parsing. */
#include <string.h>

#include "tessel/core.h"
#include "util/error.h"

static const struct {
  const char *name;
  size_t size;
  bool is_float;
} dtypes[TS_DTYPE_COUNT] = {
    [TS_F32] = {"f32", 4, true},  [TS_F64] = {"f64", 8, true}, [TS_BF16] = {"bf16", 2, true},
    [TS_F16] = {"f16", 2, true},  [TS_I32] = {"i32", 4, false}, [TS_I64] = {"i64", 8, false},
    [TS_U8] = {"u8", 1, false},   [TS_BOOL] = {"bool", 1, false},
};

static bool valid(ts_dtype dt) { return (unsigned)dt < TS_DTYPE_COUNT; }

size_t ts_dtype_size(ts_dtype dt) { return valid(dt) ? dtypes[dt].size : 0; }

const char *ts_dtype_name(ts_dtype dt) { return valid(dt) ? dtypes[dt].name : "invalid-dtype"; }

bool ts_dtype_is_float(ts_dtype dt) { return valid(dt) && dtypes[dt].is_float; }

int ts_dtype_parse(const char *name, ts_dtype *out) {
  for (int i = 0; i < TS_DTYPE_COUNT; i++)
    if (strcmp(name, dtypes[i].name) == 0) {
      *out = (ts_dtype)i;
      return 0;
    }
  return set_error("unknown dtype '%s' (expected f32, f64, bf16, f16, i32, i64, u8 or bool)", name);
}

int64_t ts_shape_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}
