/* test_calib_runs.c — tools/calrun.h's cal_least, the calibration's time of a
 * kernel class from its timed runs (issue 16: the same numbers twice on a
 * shared machine):
 *  1. 1 thread: the least CPU time, not the least wall time (a run preempted
 *     for a spell has a long wall time, its CPU time is the work's);
 *  2. T threads: the least wall time of the clean runs (CPU >= 0.9 T wall),
 *     a faster-looking run with a thread off its core left out;
 *  3. T threads, no clean run: the least CPU time / T;
 *  4. no runs: -1; cal_cpu_now advances with work;
 * and cal_confirmed / cal_settled, a key's value from its rounds:
 *  5. slow outlier rounds injected (a descheduled round, a loaded spell): the
 *     same estimate; a fast one (a 2-thread round's CPU-time fallback): the
 *     same; failed rounds (<= 0) left out;
 *  6. the spread check: no two rounds within CAL_AGREE -> unconfirmed, the
 *     least, its range; cal_settled asks for more rounds until the least is
 *     confirmed or CAL_ROUNDS_MAX rounds;
 *  7. cal_median_wall;
 *  8. runs with their waits for a core measured (schedstats): a run whose
 *     threads spun while one waited (CPU = 2 x wall, 40% of it waited) is not
 *     clean, one with no wait is; cal_clean_median takes the clean runs'
 *     median; cal_wait_now reads this process's threads;
 *  9. cal_median_rounds (wake-up keys: the median round): an outlier round
 *     at either end, or a bimodal key's minority mode, does not move it;
 *     cal_settled_as waits for its confirmation; cal_confirmed_or takes the
 *     fallback only when no round gave a value (no clean run in any). */
#include "../tools/calrun.h"

#include "harness.h"

static int near(double a, double b) { return a > b - 1e-12 && a < b + 1e-12; }

int main(void) {
  ts_test_init("test_calib_runs", 1);
  int clean = -1;
  /* 1: each run preempted differently; the least wall (12 ms) is not the work (10 ms) */
  cal_run one[3] = {{0.030, 0.010, 0, false}, {0.012, 0.011, 0, false}, {0.050, 0.0105, 0, false}};
  double t = cal_least(one, 3, 1, &clean);
  CHECK(near(t, 0.010), "1 thread: %g s, want the least CPU time 0.010", t);
  CHECK(clean == 1, "1 thread: %d clean runs, want 1 (12 ms wall, 11 ms CPU)", clean);
  /* 2: 2 threads; the 6.0 ms run had a thread off its core for a while (5 ms CPU) */
  cal_run two[3] = {{0.0060, 0.0050, 0, false}, {0.0065, 0.0125, 0, false}, {0.0070, 0.0139, 0, false}};
  t = cal_least(two, 3, 2, &clean);
  CHECK(near(t, 0.0065), "2 threads: %g s, want the clean runs' least wall 0.0065", t);
  CHECK(clean == 2, "2 threads: %d clean runs, want 2", clean);
  /* 3: 2 threads, every run preempted */
  cal_run busy[2] = {{0.030, 0.012, 0, false}, {0.020, 0.013, 0, false}};
  t = cal_least(busy, 2, 2, &clean);
  CHECK(near(t, 0.006), "2 threads, none clean: %g s, want the least CPU / 2 = 0.006", t);
  CHECK(clean == 0, "2 threads, none clean: %d clean runs", clean);
  /* 4 */
  CHECK(cal_least(one, 0, 1, NULL) == -1, "no runs: want -1");
  double c0 = cal_cpu_now();
  volatile double x = 0;
  for (int i = 0; i < 20000000; i++) x += i * 1e-9;
  CHECK(cal_cpu_now() > c0, "cal_cpu_now did not advance over 2e7 additions (%g)", (double)x);
  /* 5: three clean rounds near 10 ms; then outliers injected around them */
  double base[3] = {0.0102, 0.0100, 0.0105};
  cal_est e = cal_confirmed(base, 3, CAL_AGREE);
  CHECK(e.confirmed && near(e.value, 0.0100), "3 rounds: %g (confirmed %d), want 0.0100 confirmed", e.value, e.confirmed);
  CHECK(e.spread > 0.019 && e.spread < 0.021, "3 rounds: spread %g, want 0.02 (10.2 ms confirms 10.0)", e.spread);
  double slow[6] = {0.0102, 0.110, 0.0100, 0.031, 0.0105, 0.0450}; /* 3 rounds 3-11x slower */
  e = cal_confirmed(slow, 6, CAL_AGREE);
  CHECK(e.confirmed && near(e.value, 0.0100), "slow rounds injected: %g, want 0.0100", e.value);
  CHECK(e.rounds == 6 && e.range > 9.9, "slow rounds injected: %d rounds, range %g", e.rounds, e.range);
  double fast[5] = {0.0102, 0.0001, 0.0100, 0.0105, -1}; /* a round 100x too fast and a failed one */
  e = cal_confirmed(fast, 5, CAL_AGREE);
  CHECK(e.confirmed && near(e.value, 0.0100), "a fast round injected: %g, want 0.0100", e.value);
  CHECK(e.rounds == 4 && e.tried == 5, "a failed round is left out: %d of %d rounds, want 4 of 5", e.rounds, e.tried);
  /* 6: the spread check */
  double apart[3] = {0.030, 0.010, 0.020};
  e = cal_confirmed(apart, 3, CAL_AGREE);
  CHECK(!e.confirmed && near(e.value, 0.010) && near(e.spread, 2.0) && near(e.range, 2.0),
        "no two within 10%%: confirmed %d, %g, spread %g, want unconfirmed 0.010 spread 2", e.confirmed, e.value, e.spread);
  CHECK(cal_confirmed(apart, 0, CAL_AGREE).value == -1, "no rounds: want -1");
  double seq[CAL_ROUNDS_MAX] = {0.030, 0.012, 0.020, 0.0115, 0.011};
  CHECK(!cal_settled(seq, 2, 3, CAL_AGREE), "2 of at least 3 rounds: not settled");
  CHECK(!cal_settled(seq, 3, 3, CAL_AGREE), "12, 20, 30 ms: the least (12) unconfirmed, want another round");
  CHECK(cal_settled(seq, 4, 3, CAL_AGREE), "11.5 ms confirmed by 12 ms: settled");
  CHECK(cal_settled(base, 3, 3, CAL_AGREE), "base rounds: settled at 3");
  double never[CAL_ROUNDS_MAX] = {0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56};
  CHECK(!cal_settled(never, CAL_ROUNDS_MAX - 1, 3, CAL_AGREE) && cal_settled(never, CAL_ROUNDS_MAX, 3, CAL_AGREE),
        "rounds that never agree: settled only at CAL_ROUNDS_MAX");
  e = cal_confirmed(never, CAL_ROUNDS_MAX, CAL_AGREE);
  CHECK(!e.confirmed && near(e.value, 0.01) && e.rounds == CAL_ROUNDS_MAX, "never: unconfirmed least 0.01");
  /* 7 */
  cal_run m[4] = {{0.4, 0, 0, false}, {0.1, 0, 0, false}, {0.3, 0, 0, false}, {0.2, 0, 0, false}};
  CHECK(near(cal_median_wall(m, 4), 0.3) && near(m[0].wall, 0.1), "median of 4 walls: %g, want the upper 0.3",
        cal_median_wall(m, 4));
  CHECK(cal_median_wall(m, 0) == -1, "median of none: want -1");
  /* 8: 2 threads; the 5 ms run spun (CPU 2 x wall) while a thread waited 2 ms */
  cal_run spin[4] = {{0.0050, 0.0100, 0.0020, true}, {0.0070, 0.0130, 0.0001, true}, {0.0060, 0.0115, 0, true},
                     {0.0300, 0.0140, 0.0200, true}};
  t = cal_least(spin, 4, 2, &clean);
  CHECK(near(t, 0.0060) && clean == 2, "2 threads, waits measured: %g s (%d clean), want 0.0060 (2 clean)", t, clean);
  t = cal_clean_median(spin, 4, 2, &clean);
  CHECK(near(t, 0.0070) && clean == 2, "clean median: %g s (%d clean), want the upper of 6 and 7 ms", t, clean);
  cal_run waited[2] = {{0.030, 0.012, 0.010, true}, {0.020, 0.013, 0.008, true}};
  t = cal_clean_median(waited, 2, 2, &clean);
  CHECK(near(t, 0.006) && clean == 0, "clean median, none clean: %g s, want the least CPU / 2 = 0.006", t);
  CHECK(cal_clean_median(waited, 0, 2, NULL) == -1, "clean median of none: want -1");
  double w0 = cal_wait_now();
  CHECK(w0 >= 0, "cal_wait_now: %g, want this process's waits (>= 0; /proc/self/task/N/schedstat)", w0);
  /* 9 */
  double wake[5] = {1.70e-4, 1.8e-6, 1.66e-4, 1.75e-4, 2e-2}; /* a spinning round, a descheduled one */
  e = cal_median_rounds(wake, 5, CAL_AGREE);
  CHECK(e.confirmed && near(e.value, 1.70e-4), "median rounds: %g (confirmed %d), want 1.70e-4", e.value, e.confirmed);
  double wake3[3] = {1.8e-6, 1.7e-4, 1.66e-4};
  e = cal_median_rounds(wake3, 3, CAL_AGREE);
  CHECK(e.confirmed && near(e.value, 1.66e-4), "median of 3 with a spinning round: %g, want 1.66e-4", e.value);
  CHECK(!cal_settled_as(wake3, 2, 3, CAL_AGREE, true) && cal_settled_as(wake3, 3, 3, CAL_AGREE, true),
        "median settled at 3 rounds, not 2");
  double split[3] = {1.0e-6, 5.0e-5, 1.7e-4};
  e = cal_median_rounds(split, 3, CAL_AGREE);
  CHECK(!e.confirmed && near(e.value, 5.0e-5) && !cal_settled_as(split, 3, 3, CAL_AGREE, true),
        "median with no neighbour within 10%%: unconfirmed (%g), not settled", e.value);
  double none6[6] = {0, 0, 0, 0, 0, 0};
  CHECK(!cal_settled(none6, 5, 3, CAL_AGREE) && cal_settled(none6, 6, 3, CAL_AGREE),
        "no round with a value: given up after 2 x 3 rounds, not before");
  double none[3] = {0, 0, 0};
  e = cal_confirmed_or(none, 3, CAL_AGREE, 0.014);
  CHECK(!e.confirmed && near(e.value, 0.014) && e.rounds == 0 && e.tried == 3,
        "no clean round: the fallback 0.014 unconfirmed, 0 of 3 rounds with a value");
  double one_clean[3] = {0, 0.0013, 0.00125};
  e = cal_confirmed_or(one_clean, 3, CAL_AGREE, 0.014);
  CHECK(e.confirmed && near(e.value, 0.00125), "clean rounds beat the fallback: %g, want 0.00125", e.value);
  return ts_test_finish();
}
