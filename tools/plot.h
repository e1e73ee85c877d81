/* plot.h — what `tessel plot` hands its drawing code: a figure of panels (one
 * per metric), each with one series per run, drawn with cairo into PNG, SVG
 * or PDF (plot_draw.c). Reading the logs and the flags is cmd_plot.c. */
#ifndef TESSEL_TOOLS_PLOT_H
#define TESSEL_TOOLS_PLOT_H

#include <stdbool.h>
#include <stdio.h>

typedef struct {
  double *x, *y; // (n) points in log order; a NaN y breaks the line there
  int n;
} plot_series;

typedef struct {
  const char *title;   // e.g. "loss (moving average of 10)"
  const char *xlabel;  // "step", "time (s)", "epoch"
  const char *ylabel;  // the metric, e.g. "loss"
  bool log_y;          // log10 y axis (every finite y > 0)
  plot_series *series; // (runs) one per run, in legend order
} plot_panel;

typedef struct {
  double width, height; // pixels for PNG, points (1/72 in) for SVG and PDF
  const char *const *labels; // (runs) legend entries
  int runs;
  plot_panel *panels; // (npanels) laid out in a grid, row by row
  int npanels;
} plot_figure;

typedef enum { PLOT_PNG, PLOT_SVG, PLOT_PDF } plot_format;

/* Run i's colour as 0xRRGGBB: a fixed palette of 10 (Tableau's), repeating
 * with dashed lines after the tenth run. */
unsigned plot_color(int run);

/* Draws fig and writes it to f. Returns 0, or -1 with a message in err
 * (the figure too small for its panels, a cairo or write error). */
int plot_write(const plot_figure *fig, plot_format fmt, FILE *f, char *err, size_t errlen);

/* Axis ticks at "nice" values (1, 2 or 5 times a power of ten, or for a log
 * axis powers of ten and their 2x, 5x) covering [lo, hi] in at most about
 * `target` intervals. Stores up to cap ticks and the axis range they span
 * (the data range widened to the outer ticks) and returns the count. */
int plot_ticks(double lo, double hi, int target, bool log_axis, double *ticks, int cap,
               double *axis_lo, double *axis_hi);
/* The label of ticks[i] (of n): as many decimals as the tick step needs
 * ("0.5", "1.0", "250"), %g on log axes and for very large or small values. */
void plot_tick_label(const double *ticks, int n, int i, bool log_axis, char *buf, size_t len);

/* ---- reading logs (plot_read.c) ---- */

typedef enum { PLOT_X_STEP, PLOT_X_TIME, PLOT_X_EPOCH } plot_xmode;

/* One run's log read for the requested metrics. A metric's point is a line
 * that has it with x placed by the mode: step (lines without "step", such as
 * epoch lines, at the last step seen before them), time (the running sum of
 * step_ms, in seconds) or epoch (only lines with "epoch"). null and other
 * non-finite values become NaN points (a gap in the line). */
typedef struct {
  plot_series *series; // (nmetrics)
  int *had;            // (nmetrics) lines that carry the metric
  int *usable;         // (nmetrics) finite points among them
  int *no_x;           // (nmetrics) lines that had it but no x (--x epoch)
  bool has_step_ms;    // some line carried step_ms (else --x time is flat)
  int malformed;       // lines skipped
  char **numeric;      // (nnumeric) names of every numeric field seen, once each
  int nnumeric;
} plot_run;

/* Reads path into run (zeroed by the caller). Malformed lines are skipped
 * with a warning "tessel plot: FILE:LINE: malformed line skipped" (the first
 * 10; then a count). Returns 0, or -1 after printing why (cannot open or
 * read the file, out of memory). */
int plot_read_run(const char *path, const char *const *metrics, int nmetrics, plot_xmode xmode,
                  plot_run *run);
void plot_run_free(plot_run *run, int nmetrics);

#endif
