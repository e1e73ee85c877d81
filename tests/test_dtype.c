/* test_dtype.c — dtype sizes, names and parsing. */
#include "harness.h"
#include "tessel/tessel.h"

int main(void) {
  ts_test_init("test_dtype", 1);
  CHECK(ts_dtype_size(TS_BF16) == 2, "bf16 size");
  CHECK(ts_dtype_size(TS_I64) == 8, "i64 size");
  ts_dtype dt;
  CHECK(ts_dtype_parse("f16", &dt) == 0 && dt == TS_F16, "parse f16");
  CHECK(ts_dtype_parse("float", &dt) == -1, "unknown name rejected");
  return ts_test_finish();
}
