/* calrun.h — the calibration's estimate of a kernel's time from its timed
 * runs (tools/devfile.c; issue 16: a calibration that gives the same numbers
 * twice). Header-only so tests/test_calib_runs.c checks the same code.
 *
 * Each run has its wall time and the CPU time this process spent in it. On a
 * shared machine a run's wall time also holds the spells its threads waited
 * for a core: at load average 10-15 on 2 cores no run of a few milliseconds
 * went without one, and the least wall time of a class's rounds moved up to
 * 11x between rounds (kernel.pool 1107%, kernel.conv 910%). A preempted
 * thread's CPU time does not grow while it waits, so:
 *  - 1 thread: the least CPU time of the runs (the work alone);
 *  - T threads: the least wall time of the clean runs, those whose CPU time
 *    is at least CAL_CLEAN_SHARE x T x wall (every thread on a core all
 *    along); with none clean, the least CPU time / T (the work split evenly,
 *    the fork and join unseen: an estimate, the one a loaded machine allows).
 */
#ifndef TESSEL_TOOLS_CALRUN_H
#define TESSEL_TOOLS_CALRUN_H

#include <time.h>

/* A run of T threads is clean when its CPU time is at least this share of
 * T x its wall time. */
#define CAL_CLEAN_SHARE 0.9

typedef struct {
  double wall, cpu; /* seconds */
} cal_run;

/* This process's CPU seconds (every thread). */
static inline double cal_cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The time of the work alone from runs r[0..n) on `threads` threads (the
 * file comment); *clean (may be NULL): how many runs were clean (1 thread:
 * those with CPU >= CAL_CLEAN_SHARE x wall, for the report). -1 when n < 1. */
static inline double cal_least(const cal_run *r, int n, int threads, int *clean) {
  double best_wall = -1, best_cpu = -1;
  int nc = 0;
  if (threads < 1) threads = 1;
  for (int i = 0; i < n; i++) {
    if (r[i].cpu > 0 && (best_cpu < 0 || r[i].cpu < best_cpu)) best_cpu = r[i].cpu;
    if (r[i].wall > 0 && r[i].cpu >= CAL_CLEAN_SHARE * threads * r[i].wall) {
      nc++;
      if (best_wall < 0 || r[i].wall < best_wall) best_wall = r[i].wall;
    }
  }
  if (clean) *clean = nc;
  if (threads == 1) return best_cpu;
  return best_wall > 0 ? best_wall : best_cpu > 0 ? best_cpu / threads : -1;
}

#endif
