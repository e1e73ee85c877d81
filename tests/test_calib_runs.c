/* test_calib_runs.c — tools/calrun.h's cal_least, the calibration's time of a
 * kernel class from its timed runs (issue 16: the same numbers twice on a
 * shared machine):
 *  1. 1 thread: the least CPU time, not the least wall time (a run preempted
 *     for a spell has a long wall time, its CPU time is the work's);
 *  2. T threads: the least wall time of the clean runs (CPU >= 0.9 T wall),
 *     a faster-looking run with a thread off its core left out;
 *  3. T threads, no clean run: the least CPU time / T;
 *  4. no runs: -1; cal_cpu_now advances with work. */
#include "../tools/calrun.h"

#include "harness.h"

static int near(double a, double b) { return a > b - 1e-12 && a < b + 1e-12; }

int main(void) {
  ts_test_init("test_calib_runs", 1);
  int clean = -1;
  /* 1: each run preempted differently; the least wall (12 ms) is not the work (10 ms) */
  cal_run one[3] = {{0.030, 0.010}, {0.012, 0.011}, {0.050, 0.0105}};
  double t = cal_least(one, 3, 1, &clean);
  CHECK(near(t, 0.010), "1 thread: %g s, want the least CPU time 0.010", t);
  CHECK(clean == 1, "1 thread: %d clean runs, want 1 (12 ms wall, 11 ms CPU)", clean);
  /* 2: 2 threads; the 6.0 ms run had a thread off its core for a while (5 ms CPU) */
  cal_run two[3] = {{0.0060, 0.0050}, {0.0065, 0.0125}, {0.0070, 0.0139}};
  t = cal_least(two, 3, 2, &clean);
  CHECK(near(t, 0.0065), "2 threads: %g s, want the clean runs' least wall 0.0065", t);
  CHECK(clean == 2, "2 threads: %d clean runs, want 2", clean);
  /* 3: 2 threads, every run preempted */
  cal_run busy[2] = {{0.030, 0.012}, {0.020, 0.013}};
  t = cal_least(busy, 2, 2, &clean);
  CHECK(near(t, 0.006), "2 threads, none clean: %g s, want the least CPU / 2 = 0.006", t);
  CHECK(clean == 0, "2 threads, none clean: %d clean runs", clean);
  /* 4 */
  CHECK(cal_least(one, 0, 1, NULL) == -1, "no runs: want -1");
  double c0 = cal_cpu_now();
  volatile double x = 0;
  for (int i = 0; i < 20000000; i++) x += i * 1e-9;
  CHECK(cal_cpu_now() > c0, "cal_cpu_now did not advance over 2e7 additions (%g)", (double)x);
  return ts_test_finish();
}
