/* progress.c — progress display for long loops (an epoch of training, a
 * benchmark): a bar redrawn in place on a terminal, plain periodic lines in
 * logs. Rates are measured from the first update, so setup time (compiles,
 * warm-up) does not distort samples/s or the ETA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>   /* clock_gettime */
#include <unistd.h> /* isatty, fileno */

#include "tessel/loader.h"
#include "util/config.h" /* mpi_launcher: is stdout forwarded by an MPI launcher? */
#include "util/error.h"  /* error_oom */

#define BAR_WIDTH 24
#define BAR_REDRAW_S 0.1 /* at most 10 redraws a second */

struct ts_progress {
  FILE *out;
  bool bar;
  char label[64];
  int64_t total, done;
  double interval, t_start, t_last;
  bool drawn;
};

static double pg_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 1234 -> "1234", 61234 -> "61.2k", 1234567 -> "1.23M" */
static const char *pg_count(double v, char *buf, size_t n) {
  if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
  else if (v >= 1e4) snprintf(buf, n, "%.1fk", v / 1e3);
  else snprintf(buf, n, "%.0f", v);
  return buf;
}

static const char *pg_duration(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0) snprintf(buf, n, "?");
  else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else snprintf(buf, n, "%.0fs", s);
  return buf;
}

ts_progress *ts_progress_new(FILE *out, ts_progress_mode mode, const char *label, int64_t total,
                             double interval_s) {
  ts_progress *p = calloc(1, sizeof *p);
  if (!p) {
    error_oom("ts_progress_new", sizeof *p);
    return NULL;
  }
  p->out = out ? out : stdout;
  /* A bar only on a real terminal. An MPI launcher (OpenMPI's mpirun) gives
   * every rank a pseudo-terminal as stdout and forwards it wherever its own
   * output goes, a file included: a rank cannot tell, so under a launcher
   * every rank prints plain lines. */
  int fd = fileno(p->out);
  p->bar = mode == TS_PROGRESS_BAR ||
           (mode == TS_PROGRESS_AUTO && fd >= 0 && isatty(fd) && !env_config()->mpi_launcher);
  snprintf(p->label, sizeof p->label, "%s", label ? label : "");
  p->total = total > 0 ? total : 0;
  p->interval = interval_s > 0 ? interval_s : 10.0;
  p->t_start = p->t_last = pg_now();
  return p;
}

static void pg_draw(ts_progress *p, double t, const char *extra, bool final) {
  double el = t - p->t_start;
  double rate = el > 0 ? (double)p->done / el : 0;
  char a[32], b[32], r[32], e[32], d[32];
  pg_count((double)p->done, a, sizeof a);
  pg_count((double)p->total, b, sizeof b);
  pg_count(rate, r, sizeof r);
  double eta = rate > 0 && p->total > 0 ? (double)(p->total - p->done) / rate : NAN;
  const char *sep = extra && *extra ? " | " : "";
  if (p->bar) {
    char bar[BAR_WIDTH + 1];
    int fill = p->total > 0 ? (int)((double)BAR_WIDTH * (double)p->done / (double)p->total) : 0;
    if (fill > BAR_WIDTH) fill = BAR_WIDTH;
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : ' ';
    bar[BAR_WIDTH] = 0;
    /* \r returns to the line start, \033[K clears what a longer line left. */
    fprintf(p->out, "\r%s [%s] %s/%s | %s samples/s | %s %s%s%s\033[K", p->label, bar, a, b, r,
            final ? "took" : "eta", final ? pg_duration(el, d, sizeof d) : pg_duration(eta, e, sizeof e), sep,
            extra ? extra : "");
    if (final) fputc('\n', p->out);
  } else {
    int pct = p->total > 0 ? (int)(100.0 * (double)p->done / (double)p->total) : 0;
    fprintf(p->out, "%s %s/%s (%d%%) | %s samples/s | %s %s%s%s\n", p->label, a, b, pct, r,
            final ? "took" : "eta", final ? pg_duration(el, d, sizeof d) : pg_duration(eta, e, sizeof e), sep,
            extra ? extra : "");
  }
  fflush(p->out);
  p->drawn = true;
}

void ts_progress_update(ts_progress *p, int64_t done, const char *extra) {
  if (!p) return;
  p->done = done;
  double t = pg_now();
  if (t - p->t_last < (p->bar ? BAR_REDRAW_S : p->interval)) return;
  p->t_last = t;
  pg_draw(p, t, extra, false);
}

void ts_progress_finish(ts_progress *p, const char *extra) {
  if (!p) return;
  pg_draw(p, pg_now(), extra, true);
  free(p);
}
