/* harness.h — minimal test runner: CHECK records a failure with file:line and
 * keeps going; ts_test_finish prints "N passed, N failed" and the exit code.
 * Randomized tests print their seed with every failure (TS_TEST_SEED). */
#ifndef TS_TEST_HARNESS_H
#define TS_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>

extern int ts_test_passed, ts_test_failed;
extern uint64_t ts_test_seed;

/* Seed from $TESSEL_TEST_SEED or the given default; printed once. */
uint64_t ts_test_init(const char *name, uint64_t default_seed);
int ts_test_finish(void);

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (cond) {                                                                 \
      ts_test_passed++;                                                         \
    } else {                                                                    \
      ts_test_failed++;                                                         \
      fprintf(stderr, "FAIL %s:%d (seed %llu): %s: ", __FILE__, __LINE__,       \
              (unsigned long long)ts_test_seed, #cond);                         \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                    \
    }                                                                           \
  } while (0)

/* Checks a tessel call returned 0 (or a non-NULL / non-TS_NONE value). */
#define CHECK_OK(expr) CHECK((expr) == 0, "%s", ts_last_error())

#endif
