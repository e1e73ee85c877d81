/* harness.c — counters and the summary line for tests/harness.h. */
#include "harness.h"

#include <stdlib.h>

int ts_test_passed, ts_test_failed;
uint64_t ts_test_seed;

uint64_t ts_test_init(const char *name, uint64_t default_seed) {
  const char *s = getenv("TESSEL_TEST_SEED");
  ts_test_seed = s ? strtoull(s, NULL, 10) : default_seed;
  printf("%s: seed %llu (set TESSEL_TEST_SEED to replay)\n", name, (unsigned long long)ts_test_seed);
  return ts_test_seed;
}

int ts_test_finish(void) {
  printf("%d passed, %d failed\n", ts_test_passed, ts_test_failed);
  return ts_test_failed ? 1 : 0;
}
