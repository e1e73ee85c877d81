/* calrun.h — the calibration's estimate of a kernel's time from its timed
 * runs (tools/calibrate.c; issue 16: a calibration that gives the same numbers
 * twice). Header-only so tests/test_calib_runs.c checks the same code.
 *
 * Each run has its wall time and the CPU time this process spent in it. On a
 * shared machine a run's wall time also holds the spells its threads waited
 * for a core: at load average 10-15 on 2 cores no run of a few milliseconds
 * went without one, and the least wall time of a class's rounds moved up to
 * 11x between rounds (kernel.pool 1107%, kernel.conv 910%). A preempted
 * thread's CPU time does not grow while it waits, so:
 *  - 1 thread: the least CPU time of the runs (the work alone);
 *  - T threads: the least wall time of the clean runs, those whose threads
 *    waited for a core at most CAL_WAIT_SHARE of the wall time (schedstats,
 *    cal_wait_now; where not measured: CPU time at least CAL_CLEAN_SHARE x T x
 *    wall); with none clean, the least CPU time / T (the work split evenly,
 *    the fork and join unseen: an estimate, the one a loaded machine allows).
 */
#ifndef TESSEL_TOOLS_CALRUN_H
#define TESSEL_TOOLS_CALRUN_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

/* A run of T threads is clean when its CPU time is at least this share of
 * T x its wall time (no wait measured), or ... */
#define CAL_CLEAN_SHARE 0.9
/* ... its threads waited for a core (runnable, not running) at most this
 * share of its wall time in all (wait measured). The CPU share alone let
 * spinning pass: an OpenMP thread spinning at a barrier for its partner,
 * descheduled, burns CPU; 2-thread rounds of one class came out 1-20x each
 * other's at load 4-12 (parallel_efficiency.conv_bwd_data "range 1929%"). */
#define CAL_WAIT_SHARE 0.05

typedef struct {
  double wall, cpu; /* seconds */
  double wait;      /* seconds this process's threads waited for a core in all (has_wait) */
  bool has_wait;
} cal_run;

/* This process's CPU seconds (every thread). */
static inline double cal_cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds this process's threads have waited for a core since they started
 * (Linux schedstats: the second field of /proc/self/task/N/schedstat, summed);
 * -1 where unreadable. Some 10-100 us: for runs of milliseconds. */
static inline double cal_wait_now(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  double sum = 0;
  bool any = false;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
    FILE *f = fopen(path, "r");
    unsigned long long run = 0, wait = 0;
    if (f && fscanf(f, "%llu %llu", &run, &wait) == 2) sum += 1e-9 * (double)wait, any = true;
    if (f) fclose(f);
  }
  closedir(d);
  return any ? sum : -1;
}

/* Whether run r of `threads` threads had every thread on a core all along. */
static inline bool cal_clean(const cal_run *r, int threads) {
  if (r->has_wait) return r->wait <= CAL_WAIT_SHARE * r->wall;
  return r->wall > 0 && r->cpu >= CAL_CLEAN_SHARE * threads * r->wall;
}

/* The time of the work alone from runs r[0..n) on `threads` threads (the
 * file comment); *clean (may be NULL): how many runs were clean (cal_clean).
 * -1 when n < 1. */
static inline double cal_least(const cal_run *r, int n, int threads, int *clean) {
  double best_wall = -1, best_cpu = -1;
  int nc = 0;
  if (threads < 1) threads = 1;
  for (int i = 0; i < n; i++) {
    if (r[i].cpu > 0 && (best_cpu < 0 || r[i].cpu < best_cpu)) best_cpu = r[i].cpu;
    if (r[i].wall > 0 && cal_clean(&r[i], threads)) {
      nc++;
      if (best_wall < 0 || r[i].wall < best_wall) best_wall = r[i].wall;
    }
  }
  if (clean) *clean = nc;
  if (threads == 1) return best_cpu;
  return best_wall > 0 ? best_wall : best_cpu > 0 ? best_cpu / threads : -1;
}

/* The median wall time of the clean runs of r[0..n) on `threads` threads (a
 * typical run of a quiet machine, as the steps it predicts are medians);
 * with none clean, cal_least's estimate (the least CPU time / threads). r is
 * reordered. -1 when n < 1. */
static inline double cal_clean_median(cal_run *r, int n, int threads, int *clean) {
  int m = 0;
  for (int i = 0; i < n; i++)
    if (r[i].wall > 0 && cal_clean(&r[i], threads)) {
      cal_run t = r[m];
      r[m++] = r[i], r[i] = t;
    }
  if (clean) *clean = m;
  if (m == 0) return n < 1 ? -1 : cal_least(r, n, threads, NULL);
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && r[j].wall < r[j - 1].wall; j--) {
      cal_run t = r[j];
      r[j] = r[j - 1], r[j - 1] = t;
    }
  return r[m / 2].wall;
}

/* ---- a key's value from its rounds ----
 * Every calibrated time is measured in rounds (a round: one window of runs,
 * reduced to one number by cal_least, a least or a median), the rounds of a
 * client's probes interleaved. A round that a loaded machine slowed (a
 * descheduled spell, a page-fault storm) is an outlier on the slow side; a
 * round can also come out too fast (a 2-thread round with no clean run falls
 * back to CPU time / threads). One round decides nothing: the estimate is the
 * least value another round confirms (within CAL_AGREE of it), and rounds are
 * added (up to CAL_ROUNDS_MAX) while the least is not confirmed. */

/* Two rounds agree when the larger is at most (1 + CAL_AGREE) x the smaller. */
#define CAL_AGREE 0.10
/* The most rounds a key is given before it is reported unconfirmed. */
#define CAL_ROUNDS_MAX 9

typedef struct {
  double value;   /* the estimate; -1: no round gave a value (> 0) */
  double spread;  /* confirmed: (the confirming round - value) / value; else (max - min) / min */
  double range;   /* (max - min) / min over every round, for the report */
  int rounds;     /* rounds with a value */
  int tried;      /* rounds timed (a multi-thread round without a clean run has no value) */
  bool confirmed; /* another round within CAL_AGREE of value */
} cal_est;

static inline void cal_sort(double *v, int n) { /* insertion sort: n <= CAL_ROUNDS_MAX */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
}

/* The rounds of v[0..n) that gave a value (> 0), at most CAL_ROUNDS_MAX, sorted
 * into s; returns their count. */
static inline int cal_valid_sorted(const double *v, int n, double *s) {
  int m = 0;
  for (int i = 0; i < n && m < CAL_ROUNDS_MAX; i++)
    if (v[i] > 0) s[m++] = v[i];
  cal_sort(s, m);
  return m;
}

/* The estimate from rounds v[0..n) (values <= 0 are failed rounds, left
 * out; at most CAL_ROUNDS_MAX used): the least value whose next larger one is
 * within `agree` of it (so an injected slow round, or one too fast to be
 * confirmed, does not move it); with no two rounds agreeing, the least
 * (unconfirmed: the caller reports it). */
static inline cal_est cal_confirmed(const double *v, int n, double agree) {
  double s[CAL_ROUNDS_MAX];
  int m = cal_valid_sorted(v, n, s);
  cal_est e = {.value = -1, .rounds = m, .tried = n};
  if (m == 0) return e;
  e.range = (s[m - 1] - s[0]) / s[0];
  for (int i = 0; i + 1 < m; i++)
    if (s[i + 1] <= s[i] * (1 + agree)) {
      e.value = s[i], e.spread = (s[i + 1] - s[i]) / s[i], e.confirmed = true;
      return e;
    }
  e.value = s[0], e.spread = e.range;
  return e;
}

/* cal_confirmed, and where no round gave a value (every round of a
 * multi-thread probe without a clean run) the fallback (> 0: e.g. the least
 * CPU time / threads), unconfirmed, over the n rounds tried. */
static inline cal_est cal_confirmed_or(const double *v, int n, double agree, double fallback) {
  cal_est e = cal_confirmed(v, n, agree);
  if (e.value < 0 && fallback > 0) e = (cal_est){.value = fallback, .tried = n};
  return e;
}

/* Whether rounds v[0..n) settle a key: at least min_rounds of them, and the
 * least confirmed by the next (no more rounds can lower the estimate but by
 * a new, faster pair), or CAL_ROUNDS_MAX rounds, or 2 x min_rounds rounds
 * none of which gave a value (a machine too loaded for a clean run: at load 9
 * on 2 cores 12 classes' 9 rounds on 2 threads had none, 69.5 s in all). */
static inline bool cal_settled(const double *v, int n, int min_rounds, double agree) {
  if (n >= CAL_ROUNDS_MAX) return true;
  if (n < min_rounds) return false;
  double s[CAL_ROUNDS_MAX];
  int m = cal_valid_sorted(v, n, s);
  if (m == 0 && n >= 2 * min_rounds) return true;
  return m >= 2 && s[1] <= s[0] * (1 + agree);
}

/* A typical value's estimate from rounds v[0..n) (each round a median of its
 * runs: a thread wake-up, a step's fixed cost): the median round (the lower
 * of the middle two), confirmed when a neighbouring round is within `agree`
 * of it; spread: that gap. One round at either extreme does not move it. The
 * least confirmed round is not used here: the hand-off of a step to 2 device
 * threads is bimodal (about 2 us when they still spin, 170 us when woken),
 * and it picked either mode (step_overhead.2_s 1.7e-6, 1.8e-6, 1.7e-4 in 3
 * calibrations at load 6-9; the single window's median: 1.6-1.7e-4). */
static inline cal_est cal_median_rounds(const double *v, int n, double agree) {
  double s[CAL_ROUNDS_MAX];
  int m = cal_valid_sorted(v, n, s);
  cal_est e = {.value = -1, .rounds = m, .tried = n};
  if (m == 0) return e;
  int h = (m - 1) / 2;
  e.value = s[h], e.range = (s[m - 1] - s[0]) / s[0], e.spread = e.range;
  double lo = h > 0 ? (s[h] - s[h - 1]) / s[h] : -1, hi = h + 1 < m ? (s[h + 1] - s[h]) / s[h] : -1;
  double gap = lo < 0 ? hi : hi < 0 ? lo : lo < hi ? lo : hi;
  if (gap >= 0) e.spread = gap, e.confirmed = gap <= agree;
  return e;
}

/* The median of r[0..n)'s wall times (-1 when n < 1); r is reordered. */
static inline double cal_median_wall(cal_run *r, int n) {
  if (n < 1) return -1;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && r[j].wall < r[j - 1].wall; j--) {
      cal_run t = r[j];
      r[j] = r[j - 1], r[j - 1] = t;
    }
  return r[n / 2].wall;
}

/* cal_settled, or with median cal_median_rounds's estimate confirmed (or CAL_ROUNDS_MAX rounds). */
static inline bool cal_settled_as(const double *v, int n, int min_rounds, double agree, bool median) {
  if (median) return n >= CAL_ROUNDS_MAX || (n >= min_rounds && cal_median_rounds(v, n, agree).confirmed);
  return cal_settled(v, n, min_rounds, agree);
}

#endif
