/* plot_draw.c — draws a plot_figure with cairo: a legend strip across the
 * top (so it never covers data), then a grid of panels, each with a title,
 * grid lines at round tick values, axis labels and one line per run. The same
 * drawing code writes PNG (image surface), SVG and PDF (vector surfaces). */
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h> // FcFini: the font configuration cairo loaded
#include <math.h>
#include <stdint.h> // uint32_t
#include <stdlib.h>
#include <string.h>

#include "plot.h"

#define FONT "sans-serif"
#define TICK_FONT 11.0
#define LABEL_FONT 12.0
#define TITLE_FONT 13.0
#define MARKER_MAX_POINTS 40 /* sparser series (epoch metrics) get a dot per point */
#define MAX_AXIS_TICKS 64

typedef struct {
  double x, y, w, h;
} rect;

/* An axis: its range, the ticks on it and whether it is log10. */
typedef struct {
  double lo, hi;
  double ticks[MAX_AXIS_TICKS];
  int nticks;
  bool log;
} axis;

unsigned plot_color(int run) {
  static const unsigned palette[10] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                       0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  return palette[run % 10];
}

static void set_rgb(cairo_t *cr, unsigned rgb) {
  cairo_set_source_rgb(cr, (rgb >> 16 & 255) / 255.0, (rgb >> 8 & 255) / 255.0, (rgb & 255) / 255.0);
}

/* Length of the valid UTF-8 sequence at s (0 if invalid: overlong, surrogate,
 * beyond U+10FFFF, truncated). */
static int utf8_len(const unsigned char *s) {
  int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
        : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
  if (n <= 1) return n;
  uint32_t cp = s[0] & (0x7F >> n);
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
  return n;
}

/* A copy of s that cairo accepts: invalid UTF-8 and control characters
 * (file names may hold any byte) become '?'. Room for "…" at the end. */
static char *clean_text(const char *s) {
  size_t n = strlen(s);
  char *out = malloc(n + 4), *o = out;
  if (!out) return NULL;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    int len = utf8_len(p);
    if (len == 0 || *p < 0x20 || *p == 0x7F) {
      *o++ = '?';
      p++;
    } else {
      memcpy(o, p, (size_t)len);
      o += len;
      p += len;
    }
  }
  *o = '\0';
  return out;
}

static double text_width(cairo_t *cr, const char *s) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s, &e);
  return e.x_advance;
}

/* Shortens s (from clean_text) to at most maxw wide, ending it with "…". */
static void fit_text(cairo_t *cr, char *s, double maxw) {
  if (text_width(cr, s) <= maxw) return;
  size_t n = strlen(s);
  while (n > 0) {
    do n--; while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80); // back one character
    strcpy(s + n, "\xE2\x80\xA6");
    if (text_width(cr, s) <= maxw) return;
  }
}

/* Text with its left end (align 0), centre (0.5) or right end (1) at x and
 * its baseline at y. */
static void show_text(cairo_t *cr, const char *s, double x, double y, double align) {
  cairo_move_to(cr, x - align * text_width(cr, s), y);
  cairo_show_text(cr, s);
}

static void font(cairo_t *cr, double size, bool bold) {
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

/* Run r's colour, dashes and line width. With up to 4 runs the earlier ones
 * are wider, so curves that coincide (the same training on another mesh)
 * show as nested bands, not as the last one drawn. */
static void run_style(cairo_t *cr, int run, int runs) {
  set_rgb(cr, plot_color(run));
  static const double dash[] = {6, 3};
  cairo_set_dash(cr, dash, run >= 10 ? 2 : 0, 0); // the palette's second round is dashed
  cairo_set_line_width(cr, runs <= 4 ? 1.5 + 1.25 * (runs - 1 - run) : 1.5);
}

/* The legend: a strip across the top, entries (a line in the run's colour,
 * then its label) in rows, each row centred. Returns its height. */
static double draw_legend(cairo_t *cr, const plot_figure *fig) {
  const double swatch = 24, gap = 6, spacing = 22, row_h = 18, pad = 10;
  font(cr, LABEL_FONT, false);
  double maxw = fig->width - 2 * pad - swatch - gap, x = 0, y = pad + 12;
  double row_w[64] = {0}; // entry widths summed per row (the first 64 rows)
  int rows = 1, *row_of = calloc((size_t)fig->runs, sizeof *row_of);
  char **text = calloc((size_t)fig->runs, sizeof *text);
  for (int r = 0; r < fig->runs && row_of && text; r++) { // pass 1: which row
    if (!(text[r] = clean_text(fig->labels[r]))) break;
    fit_text(cr, text[r], maxw);
    double w = swatch + gap + text_width(cr, text[r]);
    if (x > 0 && x + spacing + w > fig->width - 2 * pad) {
      rows++;
      x = 0;
    }
    x += (x > 0 ? spacing : 0) + w;
    row_of[r] = rows - 1;
    if (rows <= 64) row_w[rows - 1] = x;
  }
  x = -1;
  for (int r = 0; r < fig->runs && row_of && text && text[r]; r++) { // pass 2: draw
    int row = row_of[r];
    if (r == 0 || row != row_of[r - 1]) x = (fig->width - row_w[row < 64 ? row : 63]) / 2;
    double base = y + row * row_h;
    run_style(cr, r, fig->runs);
    cairo_move_to(cr, x, base - 4);
    cairo_line_to(cr, x + swatch, base - 4);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    set_rgb(cr, 0x222222);
    show_text(cr, text[r], x + swatch + gap, base, 0);
    x += swatch + gap + text_width(cr, text[r]) + spacing;
  }
  for (int r = 0; text && r < fig->runs; r++) free(text[r]);
  free(text);
  free(row_of);
  return pad + rows * row_h + 4;
}

/* The range of x (or y) over every finite point of the panel; false if none. */
static bool data_range(const plot_panel *p, int runs, bool want_y, double *lo, double *hi) {
  *lo = INFINITY;
  *hi = -INFINITY;
  for (int r = 0; r < runs; r++) {
    const plot_series *s = &p->series[r];
    for (int i = 0; i < s->n; i++) {
      if (!isfinite(s->y[i])) continue;
      double v = want_y ? s->y[i] : s->x[i];
      *lo = fmin(*lo, v);
      *hi = fmax(*hi, v);
    }
  }
  return *lo <= *hi;
}

/* Fraction of the way along the axis, 0 at lo and 1 at hi. */
static double axis_frac(const axis *a, double v) {
  if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
  return (v - a->lo) / (a->hi - a->lo);
}

static void make_axis(axis *a, double lo, double hi, double length, double per_tick, bool log) {
  int target = (int)fmin(10, fmax(2, length / per_tick));
  a->log = log;
  a->nticks = plot_ticks(lo, hi, target, log, a->ticks, MAX_AXIS_TICKS, &a->lo, &a->hi);
}

static double widest_tick_label(cairo_t *cr, const axis *a) {
  char buf[64];
  double w = 0;
  for (int i = 0; i < a->nticks; i++) {
    plot_tick_label(a->ticks, a->nticks, i, a->log, buf, sizeof buf);
    w = fmax(w, text_width(cr, buf));
  }
  return w;
}

/* Grid lines, the frame, tick marks and tick labels of both axes. */
static void draw_axes(cairo_t *cr, rect pa, const axis *ax, const axis *ay) {
  char buf[64];
  cairo_set_line_width(cr, 1);
  set_rgb(cr, 0xe4e4e4);
  for (int i = 0; i < ax->nticks; i++) {
    double x = round(pa.x + axis_frac(ax, ax->ticks[i]) * pa.w) + 0.5;
    cairo_move_to(cr, x, pa.y);
    cairo_line_to(cr, x, pa.y + pa.h);
  }
  for (int i = 0; i < ay->nticks; i++) {
    double y = round(pa.y + pa.h - axis_frac(ay, ay->ticks[i]) * pa.h) + 0.5;
    cairo_move_to(cr, pa.x, y);
    cairo_line_to(cr, pa.x + pa.w, y);
  }
  cairo_stroke(cr);
  set_rgb(cr, 0x555555);
  cairo_rectangle(cr, round(pa.x) + 0.5, round(pa.y) + 0.5, round(pa.w), round(pa.h));
  cairo_stroke(cr);
  font(cr, TICK_FONT, false);
  for (int i = 0; i < ax->nticks; i++) {
    double x = round(pa.x + axis_frac(ax, ax->ticks[i]) * pa.w) + 0.5;
    cairo_move_to(cr, x, pa.y + pa.h);
    cairo_line_to(cr, x, pa.y + pa.h + 4);
    plot_tick_label(ax->ticks, ax->nticks, i, ax->log, buf, sizeof buf);
    show_text(cr, buf, x, pa.y + pa.h + 6 + TICK_FONT, 0.5);
  }
  for (int i = 0; i < ay->nticks; i++) {
    double y = round(pa.y + pa.h - axis_frac(ay, ay->ticks[i]) * pa.h) + 0.5;
    cairo_move_to(cr, pa.x - 4, y);
    cairo_line_to(cr, pa.x, y);
    plot_tick_label(ay->ticks, ay->nticks, i, ay->log, buf, sizeof buf);
    show_text(cr, buf, pa.x - 7, y + TICK_FONT * 0.35, 1);
  }
  cairo_stroke(cr);
}

/* One run's line (broken at NaN), and a dot per point when there are few. */
static void draw_series(cairo_t *cr, rect pa, const axis *ax, const axis *ay,
                        const plot_series *s, int run, int runs) {
  int finite = 0;
  bool pen_down = false;
  run_style(cr, run, runs);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (int i = 0; i < s->n; i++) {
    if (!isfinite(s->y[i])) {
      pen_down = false;
      continue;
    }
    double x = pa.x + axis_frac(ax, s->x[i]) * pa.w, y = pa.y + pa.h - axis_frac(ay, s->y[i]) * pa.h;
    if (pen_down) cairo_line_to(cr, x, y);
    else cairo_move_to(cr, x, y);
    pen_down = true;
    finite++;
  }
  cairo_stroke(cr);
  cairo_set_dash(cr, NULL, 0, 0);
  if (finite > MARKER_MAX_POINTS) return;
  for (int i = 0; i < s->n; i++) {
    if (!isfinite(s->y[i])) continue;
    double x = pa.x + axis_frac(ax, s->x[i]) * pa.w, y = pa.y + pa.h - axis_frac(ay, s->y[i]) * pa.h;
    cairo_new_sub_path(cr);
    cairo_arc(cr, x, y, 3.5, 0, 2 * M_PI);
  }
  cairo_fill(cr);
}

/* The panel's title, axes, axis labels and lines inside `cell`. */
static int draw_panel(cairo_t *cr, const plot_figure *fig, const plot_panel *p, rect cell,
                      char *err, size_t errlen) {
  double xlo, xhi, ylo, yhi;
  if (!data_range(p, fig->runs, false, &xlo, &xhi) || !data_range(p, fig->runs, true, &ylo, &yhi)) {
    snprintf(err, errlen, "panel '%s' has no points", p->title);
    return -1;
  }
  rect pa = {0, cell.y + 34, 0, cell.h - 34 - 48}; // plot area: title above, ticks + label below
  axis ax, ay;
  make_axis(&ay, ylo, yhi, pa.h, 40, p->log_y);
  font(cr, TICK_FONT, false);
  double left = 10 + LABEL_FONT + 8 + widest_tick_label(cr, &ay) + 8;
  pa.x = cell.x + left;
  pa.w = cell.w - left - 24;
  if (pa.w < 60 || pa.h < 40) {
    snprintf(err, errlen, "the figure (%gx%g) is too small for %d panel%s: give a larger --size",
             fig->width, fig->height, fig->npanels, fig->npanels > 1 ? "s" : "");
    return -1;
  }
  make_axis(&ax, xlo, xhi, pa.w, 80, false);
  draw_axes(cr, pa, &ax, &ay);

  cairo_save(cr);
  cairo_rectangle(cr, pa.x - 5, pa.y - 5, pa.w + 10, pa.h + 10); // dots on the frame stay whole
  cairo_clip(cr);
  for (int r = 0; r < fig->runs; r++) draw_series(cr, pa, &ax, &ay, &p->series[r], r, fig->runs);
  cairo_restore(cr);

  set_rgb(cr, 0x222222);
  char *title = clean_text(p->title), *xlabel = clean_text(p->xlabel), *ylabel = clean_text(p->ylabel);
  if (!title || !xlabel || !ylabel) {
    free(title);
    free(xlabel);
    free(ylabel);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  font(cr, TITLE_FONT, true);
  fit_text(cr, title, pa.w);
  show_text(cr, title, pa.x + pa.w / 2, cell.y + 8 + TITLE_FONT, 0.5);
  font(cr, LABEL_FONT, false);
  fit_text(cr, xlabel, pa.w);
  show_text(cr, xlabel, pa.x + pa.w / 2, pa.y + pa.h + 22 + LABEL_FONT, 0.5);
  fit_text(cr, ylabel, pa.h);
  cairo_save(cr); // the y label reads bottom to top, left of the tick labels
  cairo_translate(cr, cell.x + 10 + LABEL_FONT, pa.y + pa.h / 2);
  cairo_rotate(cr, -M_PI / 2);
  show_text(cr, ylabel, 0, 0, 0.5);
  cairo_restore(cr);
  free(title);
  free(xlabel);
  free(ylabel);
  return 0;
}

static int draw_figure(cairo_t *cr, const plot_figure *fig, char *err, size_t errlen) {
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  double top = draw_legend(cr, fig);
  int cols = (int)ceil(sqrt((double)fig->npanels)), rows = (fig->npanels + cols - 1) / cols;
  double cw = fig->width / cols, ch = (fig->height - top) / rows;
  for (int i = 0; i < fig->npanels; i++) {
    rect cell = {(i % cols) * cw, top + (i / cols) * ch, cw, ch};
    if (draw_panel(cr, fig, &fig->panels[i], cell, err, errlen) < 0) return -1;
  }
  return 0;
}

static cairo_status_t write_to_file(void *closure, const unsigned char *data, unsigned int len) {
  return fwrite(data, 1, len, closure) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

int plot_write(const plot_figure *fig, plot_format fmt, FILE *f, char *err, size_t errlen) {
  cairo_surface_t *s =
      fmt == PLOT_PNG ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)fig->width, (int)fig->height)
      : fmt == PLOT_SVG ? cairo_svg_surface_create_for_stream(write_to_file, f, fig->width, fig->height)
      : cairo_pdf_surface_create_for_stream(write_to_file, f, fig->width, fig->height);
  cairo_t *cr = cairo_create(s);
  int rc = draw_figure(cr, fig, err, errlen);
  cairo_status_t st = cairo_status(cr);
  cairo_destroy(cr);
  if (rc == 0 && st == CAIRO_STATUS_SUCCESS) {
    if (fmt == PLOT_PNG) st = cairo_surface_write_to_png_stream(s, write_to_file, f);
    cairo_surface_finish(s); // SVG and PDF write their last bytes here
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(s);
  }
  cairo_surface_destroy(s);
  // the font caches cairo and fontconfig keep for the process: released (one
  // picture per process), so leak checkers (the sanitizer build's tests) see
  // only real leaks
  cairo_debug_reset_static_data();
  FcFini();
  if (rc == 0 && st != CAIRO_STATUS_SUCCESS) {
    snprintf(err, errlen, "cairo: %s", cairo_status_to_string(st));
    rc = -1;
  }
  return rc;
}
