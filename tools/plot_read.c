/* plot_read.c — reads one training log (JSON lines, tools/jsonl.h) into the
 * series `tessel plot` draws: for each requested metric, (x, y) points with x
 * the step, the elapsed training time or the epoch. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> // fstat: refuse directories

#include "args.h"  // cli_error
#include "jsonl.h"
#include "plot.h"

#define CMD "plot"
#define MAX_WARNINGS 10  /* malformed lines reported one by one per file; the rest counted */
#define MAX_ABS 1e300    /* larger values are treated as unusable: the axis maths overflows */

static int push_point(plot_series *s, int *cap, double x, double y) {
  if (s->n == *cap) {
    if (*cap > (1 << 28)) return -1;
    int c = *cap ? 2 * *cap : 256;
    double *nx = realloc(s->x, (size_t)c * sizeof *nx);
    if (!nx) return -1;
    s->x = nx;
    double *ny = realloc(s->y, (size_t)c * sizeof *ny);
    if (!ny) return -1;
    s->y = ny;
    *cap = c;
  }
  s->x[s->n] = x;
  s->y[s->n++] = y;
  return 0;
}

static const double *number(const jsonl_object *o, const char *key) {
  const jsonl_field *f = jsonl_get(o, key);
  return f && f->kind == JSONL_NUMBER && isfinite(f->num) ? &f->num : NULL;
}

/* Remembers the numeric (or null) fields of a line, for "unknown metric". */
static int note_fields(plot_run *run, const jsonl_object *o) {
  for (int i = 0; i < o->n; i++) {
    const jsonl_field *f = &o->fields[i];
    if (f->kind != JSONL_NUMBER && f->kind != JSONL_NULL) continue;
    bool known = false;
    for (int k = 0; k < run->nnumeric && !known; k++) known = strcmp(run->numeric[k], f->key) == 0;
    if (known || run->nnumeric >= 64) continue; // a bound for hostile logs
    char **names = realloc(run->numeric, (size_t)(run->nnumeric + 1) * sizeof *names);
    if (!names) return -1;
    run->numeric = names;
    if (!(names[run->nnumeric] = strdup(f->key))) return -1;
    run->nnumeric++;
  }
  return 0;
}

typedef struct {
  double last_step, seconds; // the x of lines without their own step; sum of step_ms
  int *cap;                  // (nmetrics) capacities of the series
} position;

/* Adds the line's points; -1 when out of memory. */
static int add_line(plot_run *run, const jsonl_object *o, const char *const *metrics,
                    int nmetrics, plot_xmode xmode, position *pos) {
  const double *step = number(o, "step"), *ms = number(o, "step_ms"), *epoch = number(o, "epoch");
  if (step) pos->last_step = *step;
  if (ms) pos->seconds += *ms / 1e3;
  if (jsonl_get(o, "step_ms")) run->has_step_ms = true;
  double x = xmode == PLOT_X_STEP ? pos->last_step : xmode == PLOT_X_TIME ? pos->seconds
           : epoch ? *epoch : NAN;
  for (int m = 0; m < nmetrics; m++) {
    const jsonl_field *f = jsonl_get(o, metrics[m]);
    if (!f) continue;
    run->had[m]++;
    if (isnan(x)) {
      run->no_x[m]++;
      continue;
    }
    bool ok = (f->kind == JSONL_NUMBER || f->kind == JSONL_BOOL) && isfinite(f->num) &&
              fabs(f->num) <= MAX_ABS;
    if (ok) run->usable[m]++;
    if (push_point(&run->series[m], &pos->cap[m], x, ok ? f->num : NAN) < 0) return -1;
  }
  return note_fields(run, o);
}

static int alloc_run(plot_run *run, int nmetrics) {
  run->series = calloc((size_t)nmetrics, sizeof *run->series);
  run->had = calloc((size_t)nmetrics, sizeof *run->had);
  run->usable = calloc((size_t)nmetrics, sizeof *run->usable);
  run->no_x = calloc((size_t)nmetrics, sizeof *run->no_x);
  return run->series && run->had && run->usable && run->no_x ? 0 : -1;
}

static FILE *open_log(const char *path) {
  FILE *f = fopen(path, "r");
  struct stat st;
  if (!f) {
    cli_error(CMD, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    cli_error(CMD, "%s: is a directory, not a log", path);
    fclose(f);
    return NULL;
  }
  return f;
}

int plot_read_run(const char *path, const char *const *metrics, int nmetrics, plot_xmode xmode,
                  plot_run *run) {
  FILE *f = open_log(path);
  if (!f) return -1;
  int rc = -1;
  char *line = NULL;
  size_t linecap = 0;
  jsonl_object o = {0};
  position pos = {0, 0, calloc((size_t)nmetrics, sizeof(int))};
  if (alloc_run(run, nmetrics) < 0 || !pos.cap) goto oom;
  ssize_t len;
  for (long lineno = 1; (len = getline(&line, &linecap, f)) >= 0; lineno++) {
    int kind = jsonl_parse(line, (size_t)len, &o);
    if (kind < 0 && ++run->malformed <= MAX_WARNINGS)
      cli_error(CMD, "%s:%ld: malformed line skipped", path, lineno);
    if (kind > 0 && add_line(run, &o, metrics, nmetrics, xmode, &pos) < 0) goto oom;
  }
  if (ferror(f)) {
    cli_error(CMD, "%s: read error: %s", path, strerror(errno));
    goto done;
  }
  if (run->malformed > MAX_WARNINGS)
    cli_error(CMD, "%s: %d more malformed lines skipped", path, run->malformed - MAX_WARNINGS);
  rc = 0;
  goto done;
oom:
  cli_error(CMD, "%s: out of memory", path);
done:
  free(pos.cap);
  free(line);
  jsonl_clear(&o);
  fclose(f);
  return rc;
}

void plot_run_free(plot_run *run, int nmetrics) {
  for (int m = 0; run->series && m < nmetrics; m++) {
    free(run->series[m].x);
    free(run->series[m].y);
  }
  for (int k = 0; k < run->nnumeric; k++) free(run->numeric[k]);
  free(run->numeric);
  free(run->series);
  free(run->had);
  free(run->usable);
  free(run->no_x);
  memset(run, 0, sizeof *run);
}
