/* clock.h — monotonic time in seconds, for durations (solver time limits,
 * checkpoint phases, calibration runs). */
#ifndef TS_UTIL_CLOCK_H
#define TS_UTIL_CLOCK_H

#include <time.h>

static inline double util_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
