/* cmd_plot.c — `tessel plot`: training curves from `tessel train --log-json`
 * logs as a PNG, SVG or PDF picture. Several runs overlay in one panel (a
 * colour each, a legend on top); several metrics get a panel each. Flags and
 * metrics are checked before anything is drawn; the picture is written to a
 * temporary file beside the output and renamed over it, and never over
 * something that is not a regular file (a FIFO, a device). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>  // PATH_MAX
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>  // strcasecmp
#include <sys/stat.h> // lstat, fchmod, umask
#include <unistd.h>   // fsync, unlink

#include "args.h" // cli_flag, cli_parse_*, exit codes
#include "plot.h"

int ts_cmd_plot(int argc, char **argv);

#define CMD "plot"
#define MAX_METRICS 16

static const char *const x_names[] = {"step", "time", "epoch", NULL};
static const char *const x_labels[] = {"step", "time (s)", "epoch"};

typedef struct {
  const char **files, **labels; // (nfiles), (nlabels <= nfiles)
  int nfiles, nlabels;
  char *metrics[MAX_METRICS];
  int nmetrics;
  plot_xmode x;
  int64_t smooth;
  bool log_y;
  int width, height; // 0: from the panel count
  const char *output;
  plot_format format;
} plot_options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessel plot RUN.jsonl [RUN2.jsonl ...] -o OUT.png|.svg|.pdf [flags]\n"
          "\n"
          "Draws training curves from 'tessel train --log-json' logs: every run in one\n"
          "panel per metric, a colour each (blue, orange, green, red, purple, ...).\n"
          "\n"
          "  -o, --output FILE  the picture; its extension picks the format (.png, .svg, .pdf)\n"
          "  --metric NAME      a numeric field of the logs: loss (default), test_accuracy,\n"
          "                     val_loss, step_ms, ...; repeat or join with commas for a\n"
          "                     panel each\n"
          "  --x step|time|epoch  x axis (default step): the step; the training time in s\n"
          "                     (running sum of step_ms); or the epoch (epoch lines only).\n"
          "                     Lines without a step (epoch lines) sit at the last step or\n"
          "                     time before them\n"
          "  --label NAME       legend entry of the next run (repeat; default: file name)\n"
          "  --smooth N         moving average over the last N points of every series\n"
          "                     (default 1: none)\n"
          "  --log-y            logarithmic y axis (values <= 0 left out)\n"
          "  --size WxH         picture size in pixels (PNG) or points (SVG, PDF);\n"
          "                     default 720x460 per panel\n");
}

/* Splits a --metric value at commas into o->metrics, skipping repeats. */
static int add_metrics(plot_options *o, const char *value) {
  const char *p = value;
  for (;;) {
    size_t n = strcspn(p, ",");
    if (n == 0) {
      cli_error(CMD, "--metric: empty metric name in '%s'", value);
      return -1;
    }
    bool dup = false;
    for (int m = 0; m < o->nmetrics && !dup; m++)
      dup = strlen(o->metrics[m]) == n && strncmp(o->metrics[m], p, n) == 0;
    if (!dup && o->nmetrics == MAX_METRICS) {
      cli_error(CMD, "--metric: at most %d metrics", MAX_METRICS);
      return -1;
    }
    if (!dup && !(o->metrics[o->nmetrics++] = strndup(p, n))) return -1;
    if (p[n] == '\0') return 0;
    p += n + 1;
  }
}

static int parse_size(plot_options *o, const char *s) {
  char *end;
  errno = 0;
  long w = strtol(s, &end, 10), h = 0;
  bool ok = end != s && (*end == 'x' || *end == 'X') && errno == 0;
  if (ok) {
    const char *hs = end + 1;
    h = strtol(hs, &end, 10);
    ok = end != hs && *end == '\0' && errno == 0 && *hs != '-' && *hs != '+';
  }
  if (!ok || s[0] == '-' || s[0] == '+' || w < 160 || w > 8192 || h < 120 || h > 8192) {
    cli_error(CMD, "--size: expected WIDTHxHEIGHT with width 160..8192 and height 120..8192 "
                   "(e.g. 800x500), got '%s'", s);
    return -1;
  }
  o->width = (int)w;
  o->height = (int)h;
  return 0;
}

static int parse_format(plot_options *o) {
  const char *slash = strrchr(o->output, '/'), *base = slash ? slash + 1 : o->output;
  const char *dot = strrchr(base, '.');
  static const char *const ext[] = {".png", ".svg", ".pdf"};
  for (int k = 0; dot && k < 3; k++) {
    if (strcasecmp(dot, ext[k]) == 0) {
      o->format = (plot_format)k;
      return 0;
    }
  }
  if (dot) cli_error(CMD, "-o: unknown extension '%s' in '%s' (valid: .png, .svg, .pdf)", dot, o->output);
  else cli_error(CMD, "-o: '%s' has no extension (valid: .png, .svg, .pdf)", o->output);
  return -1;
}

/* One flag at argv[*i] (a value flag advances *i). 1: handled, 0: not a
 * flag of plot's, -1: bad value (printed). */
static int parse_flag(plot_options *o, int argc, char **argv, int *i) {
  const char *v = NULL;
  int hit, choice;
  if (strcmp(argv[*i], "--log-y") == 0) return o->log_y = true, 1;
  if ((hit = cli_flag(CMD, argc, argv, i, "-o", &v)) ||
      (hit = cli_flag(CMD, argc, argv, i, "--output", &v)))
    return hit < 0 ? -1 : (o->output = v, 1);
  if ((hit = cli_flag(CMD, argc, argv, i, "--metric", &v)))
    return hit < 0 || add_metrics(o, v) < 0 ? -1 : 1;
  if ((hit = cli_flag(CMD, argc, argv, i, "--label", &v)))
    return hit < 0 ? -1 : (o->labels[o->nlabels++] = v, 1);
  if ((hit = cli_flag(CMD, argc, argv, i, "--smooth", &v)))
    return hit < 0 || cli_parse_int(CMD, "--smooth", v, 1, 1000000, "an integer from 1 to 1000000",
                                    &o->smooth) < 0 ? -1 : 1;
  if ((hit = cli_flag(CMD, argc, argv, i, "--size", &v)))
    return hit < 0 || parse_size(o, v) < 0 ? -1 : 1;
  if ((hit = cli_flag(CMD, argc, argv, i, "--x", &v))) {
    if (hit < 0 || cli_parse_choice(CMD, "--x", v, "x axis", x_names, &choice) < 0) return -1;
    o->x = (plot_xmode)choice;
    return 1;
  }
  return 0;
}

/* Returns CLI_EXIT_OK to go on, else the exit code (--help: -1 then OK). */
static int parse_args(plot_options *o, int argc, char **argv) {
  o->smooth = 1;
  o->files = calloc((size_t)argc, sizeof *o->files);
  o->labels = calloc((size_t)argc, sizeof *o->labels);
  if (!o->files || !o->labels) return CLI_EXIT_FAIL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return -1;
    }
    if (argv[i][0] != '-' || strcmp(argv[i], "-") == 0) {
      o->files[o->nfiles++] = argv[i];
      continue;
    }
    int hit = parse_flag(o, argc, argv, &i);
    if (hit < 0) return CLI_EXIT_USAGE;
    if (hit == 0) {
      cli_error(CMD, "unknown flag '%s' (valid: -o, --metric, --x, --label, --smooth, --log-y, "
                     "--size, --help)", argv[i]);
      return CLI_EXIT_USAGE;
    }
  }
  if (o->nfiles == 0 || !o->output) {
    cli_error(CMD, "%s (see 'tessel plot --help')",
              o->nfiles == 0 ? "no log files given" : "-o OUT.png|.svg|.pdf is required");
    return CLI_EXIT_USAGE;
  }
  if (o->nlabels > o->nfiles) {
    cli_error(CMD, "--label given %d times for %d log file%s", o->nlabels, o->nfiles,
              o->nfiles > 1 ? "s" : "");
    return CLI_EXIT_USAGE;
  }
  if (o->nmetrics == 0 && add_metrics(o, "loss") < 0) return CLI_EXIT_FAIL;
  return parse_format(o) < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
}

static bool seen_before(const plot_run *runs, int r, int k) {
  const char *name = runs[r].numeric[k];
  for (int r2 = 0; r2 <= r; r2++)
    for (int k2 = 0; k2 < (r2 < r ? runs[r2].nnumeric : k); k2++)
      if (strcmp(runs[r2].numeric[k2], name) == 0) return true;
  return false;
}

/* A metric no log has at all is a typo: say which fields there are. */
static int check_metric_known(const plot_options *o, const plot_run *runs, int m) {
  for (int r = 0; r < o->nfiles; r++)
    if (runs[r].had[m]) return 0;
  char fields[512] = "";
  for (int r = 0; r < o->nfiles; r++) {
    for (int k = 0; k < runs[r].nnumeric; k++) {
      const char *name = runs[r].numeric[k];
      if (!seen_before(runs, r, k) && strlen(fields) + strlen(name) + 3 < sizeof fields) {
        if (fields[0]) strcat(fields, ", ");
        strcat(fields, name);
      }
    }
  }
  cli_error(CMD, "--metric: unknown metric '%s': no log has it (numeric fields: %s)",
            o->metrics[m], fields[0] ? fields : "none");
  return -1;
}

static int check_points(const plot_options *o, const plot_run *run, const char *file, int m) {
  const char *metric = o->metrics[m];
  if (o->x == PLOT_X_TIME && !run->has_step_ms) {
    cli_error(CMD, "%s: no step_ms in any line: --x time needs step lines with step_ms", file);
    return -1;
  }
  if (run->usable[m] > 0) return 0;
  if (run->had[m] == 0)
    cli_error(CMD, "%s: no usable points for metric '%s': no line has it", file, metric);
  else if (run->no_x[m] == run->had[m])
    cli_error(CMD, "%s: no usable points for metric '%s': %d lines have it but none has an "
                   "\"epoch\" field (--x epoch plots epoch lines only)", file, metric, run->had[m]);
  else
    cli_error(CMD, "%s: no usable points for metric '%s': %d line%s %s it, but never as a "
                   "finite number", file, metric, run->had[m], run->had[m] > 1 ? "s" : "",
              run->had[m] > 1 ? "have" : "has");
  return -1;
}

/* Trailing moving average over the last n points (NaN points excluded);
 * a NaN point stays a gap. */
static int smooth_series(plot_series *s, int64_t n) {
  double *out = malloc((size_t)(s->n ? s->n : 1) * sizeof *out), sum = 0;
  if (!out) return -1;
  int64_t count = 0;
  for (int i = 0; i < s->n; i++) {
    if (isfinite(s->y[i])) sum += s->y[i], count++;
    if (i >= n && isfinite(s->y[i - n])) sum -= s->y[i - n], count--;
    out[i] = isfinite(s->y[i]) && count > 0 ? sum / (double)count : NAN;
  }
  free(s->y);
  s->y = out;
  return 0;
}

/* --log-y: values <= 0 cannot be drawn; returns how many were left out. */
static int drop_nonpositive(plot_series *s) {
  int dropped = 0;
  for (int i = 0; i < s->n; i++) {
    if (isfinite(s->y[i]) && s->y[i] <= 0) {
      s->y[i] = NAN;
      dropped++;
    }
  }
  return dropped;
}

/* Smoothing and the log scale's filter for run r's metric m; errors name both. */
static int prepare_series(const plot_options *o, plot_run *run, const char *file, int m) {
  plot_series *s = &run->series[m];
  if (o->smooth > 1 && smooth_series(s, o->smooth) < 0) return -1;
  if (!o->log_y) return 0;
  int dropped = drop_nonpositive(s);
  if (dropped == 0) return 0;
  if (dropped == run->usable[m]) {
    cli_error(CMD, "%s: no usable points for metric '%s' on --log-y: every value is <= 0", file,
              o->metrics[m]);
    return -1;
  }
  cli_error(CMD, "%s: %d values of '%s' <= 0 left out of the log scale", file, dropped, o->metrics[m]);
  return 0;
}

static const char *file_type(mode_t mode) {
  return S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
       : S_ISBLK(mode) ? "a block device" : S_ISDIR(mode) ? "a directory"
       : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

/* Where to write: `path` itself, or the file a symlink names. Refuses
 * anything but a regular file or nothing. *mode: the permissions to give. */
static int output_target(const char *path, char *target, size_t cap, mode_t *mode) {
  struct stat st;
  mode_t mask = umask(0);
  umask(mask);
  *mode = 0666 & ~mask;
  snprintf(target, cap, "%s", path);
  if (lstat(path, &st) < 0) {
    if (errno == ENOENT) return 0;
    cli_error(CMD, "-o: cannot use '%s': %s", path, strerror(errno));
    return -1;
  }
  if (S_ISLNK(st.st_mode)) { // replace the file it names, keep the link
    char resolved[PATH_MAX];
    if (!realpath(path, resolved) || stat(resolved, &st) < 0) {
      cli_error(CMD, "-o: '%s' is a symbolic link to nothing that exists", path);
      return -1;
    }
    snprintf(target, cap, "%s", resolved);
  }
  if (!S_ISREG(st.st_mode)) {
    cli_error(CMD, "-o: '%s' exists and is %s, not a regular file: refusing to replace it", path,
              file_type(st.st_mode));
    return -1;
  }
  *mode = st.st_mode & 07777;
  return 0;
}

/* Draws into a temporary file beside the output, then renames it over the
 * output: a reader never sees half a picture, and a failed run leaves the
 * old one. */
static int write_atomically(const plot_options *o, const plot_figure *fig) {
  char target[PATH_MAX + 1], tmp[PATH_MAX + 32], err[256] = "";
  mode_t mode;
  if (output_target(o->output, target, sizeof target, &mode) < 0) return -1;
  snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", target);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    cli_error(CMD, "-o: cannot create a temporary file beside '%s': %s", target, strerror(errno));
    return -1;
  }
  FILE *f = fdopen(fd, "wb");
  int rc = -1;
  if (!f) {
    snprintf(err, sizeof err, "%s", strerror(errno));
  } else if (plot_write(fig, o->format, f, err, sizeof err) == 0) {
    // on disk before the rename makes it visible
    if (fflush(f) == 0 && fsync(fd) == 0 && fchmod(fd, mode) == 0) rc = 0;
    else snprintf(err, sizeof err, "%s", strerror(errno));
  }
  if ((f ? fclose(f) : close(fd)) != 0 && rc == 0) {
    snprintf(err, sizeof err, "%s", strerror(errno));
    rc = -1;
  }
  if (rc == 0 && rename(tmp, target) != 0) {
    snprintf(err, sizeof err, "rename: %s", strerror(errno));
    rc = -1;
  }
  if (rc < 0) {
    unlink(tmp);
    cli_error(CMD, "-o: cannot write '%s': %s", o->output, err);
  }
  return rc;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash && slash[1] ? slash + 1 : path;
}

/* Figure: a panel per metric, a series per run in each. */
static int draw(const plot_options *o, plot_run *runs) {
  plot_panel panels[MAX_METRICS] = {0};
  char titles[MAX_METRICS][160];
  const char **labels = calloc((size_t)o->nfiles, sizeof *labels);
  int rc = labels ? 0 : -1;
  for (int m = 0; m < o->nmetrics && rc == 0; m++) {
    snprintf(titles[m], sizeof titles[m], o->smooth > 1 ? "%s (moving average of %lld)" : "%s",
             o->metrics[m], (long long)o->smooth);
    panels[m] = (plot_panel){titles[m], x_labels[o->x], o->metrics[m], o->log_y,
                             calloc((size_t)o->nfiles, sizeof(plot_series))};
    if (!panels[m].series) rc = -1;
    for (int r = 0; r < o->nfiles && rc == 0; r++) panels[m].series[r] = runs[r].series[m];
  }
  for (int r = 0; r < o->nfiles && rc == 0; r++)
    labels[r] = r < o->nlabels ? o->labels[r] : base_name(o->files[r]);
  int cols = (int)ceil(sqrt(o->nmetrics)), rows = (o->nmetrics + cols - 1) / cols;
  plot_figure fig = {o->width ? o->width : fmin(8192, 720 * cols),
                     o->height ? o->height : fmin(8192, 460 * rows), labels, o->nfiles, panels,
                     o->nmetrics};
  if (rc < 0) cli_error(CMD, "out of memory");
  else rc = write_atomically(o, &fig);
  for (int m = 0; m < o->nmetrics; m++) free(panels[m].series);
  free(labels);
  return rc;
}

static int read_and_check(plot_options *o, plot_run *runs) {
  const char *const *metrics = (const char *const *)o->metrics;
  for (int r = 0; r < o->nfiles; r++)
    if (plot_read_run(o->files[r], metrics, o->nmetrics, o->x, &runs[r]) < 0) return CLI_EXIT_FAIL;
  for (int m = 0; m < o->nmetrics; m++)
    if (check_metric_known(o, runs, m) < 0) return CLI_EXIT_USAGE;
  for (int m = 0; m < o->nmetrics; m++)
    for (int r = 0; r < o->nfiles; r++)
      if (check_points(o, &runs[r], o->files[r], m) < 0 ||
          prepare_series(o, &runs[r], o->files[r], m) < 0)
        return CLI_EXIT_FAIL;
  return CLI_EXIT_OK;
}

int ts_cmd_plot(int argc, char **argv) {
  plot_options o = {0};
  int rc = parse_args(&o, argc, argv);
  plot_run *runs = rc == CLI_EXIT_OK ? calloc((size_t)o.nfiles, sizeof *runs) : NULL;
  if (rc == CLI_EXIT_OK && !runs) rc = CLI_EXIT_FAIL;
  if (rc == CLI_EXIT_OK) rc = read_and_check(&o, runs);
  if (rc == CLI_EXIT_OK && draw(&o, runs) < 0) rc = CLI_EXIT_FAIL;
  for (int r = 0; runs && r < o.nfiles; r++) plot_run_free(&runs[r], o.nmetrics);
  for (int m = 0; m < o.nmetrics; m++) free(o.metrics[m]);
  free(runs);
  free(o.files);
  free(o.labels);
  return rc < 0 ? CLI_EXIT_OK : rc; // -1: --help
}
