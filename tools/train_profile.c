/* train_profile.c — `tessel train --profile`: where a training step goes, per
 * step averaged over the run, and `--bind`'s report.
 *
 * Every step but the process's first (one-time costs: oneDNN's JIT, the first
 * touch of buffers). Host side, from the loop's own clock readings
 * (train_loop.c, every step):
 * loader wait (ts_loader_next), upload (batch and scalars into the device
 * buffers), execute (ts_execute), read-back (the loss), other (log, progress,
 * checkpoints): they add up to the step's whole loop iteration.
 *
 * Device side, from the trace (the same events --trace writes; --profile
 * turns tracing on at the first step when it is off): each step is a "step"
 * event on the host track, and per device inside it
 *   compute       the kernels (the device thread's own time);
 *   comm exposed  collectives while no kernel ran: synchronous collectives,
 *                 waits for started (asynchronous) all-reduces, and the
 *                 copy that starts one;
 *   comm hidden   the rest of the collectives' time: started all-reduces
 *                 running on the collective worker while the device computed;
 *   idle          the execute's time minus compute and exposed communication:
 *                 waking the device, the plan's copies, gaps between kernels.
 * compute + comm exposed + idle = execute, per device.
 *
 * The trace is read back from a temporary file (tools/ sees only the public
 * API, which writes traces but does not hand out events); a --trace file is
 * written as well, with the same events. Cost while on: one event per
 * kernel (a lock and a copy, about a microsecond). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> // mkstemp's unlink

#include "args.h"           // cli_error
#include "tessel/metrics.h" // ts_trace_*
#include "train_run.h"

enum { PROF_MAX_DEVICES = 64 }; /* devices of this process shown */

static struct {
  bool warm;     /* the process's first step was seen: it is left out (oneDNN JIT, first touch of memory) */
  int64_t steps;
  double wait, upload, execute, read, total; /* ns, summed */
} prof;

void train_profile_begin(void) {
  memset(&prof, 0, sizeof prof);
  if (!ts_trace_enabled()) ts_trace_start();
}

void train_profile_step(const train_step_times *t, int64_t end_ns) {
  if (!prof.warm) {
    prof.warm = true;
    return;
  }
  prof.steps++;
  prof.wait += (double)(t->t0_ns - t->wait_t0_ns);
  prof.upload += (double)(t->uploaded_ns - t->t0_ns);
  prof.execute += (double)(t->executed_ns - t->uploaded_ns);
  prof.read += (double)(t->read_ns - t->executed_ns);
  prof.total += (double)(end_ns - t->wait_t0_ns);
  ts_trace_event("step", "step", -1, t->t0_ns, t->read_ns, -1); /* the window the device events belong to */
}

typedef struct {
  double t0, t1; /* microseconds */
} span;

typedef struct {
  span *v;
  int64_t n, cap;
} spans;

static int spans_add(spans *s, double t0, double t1) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 256;
    span *v = realloc(s->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = (span){t0, t1};
  return 0;
}

static int by_start(const void *a, const void *b) {
  double x = ((const span *)a)->t0, y = ((const span *)b)->t0;
  return (x > y) - (x < y);
}

/* Sorts s and merges overlapping spans in place. */
static void spans_union(spans *s) {
  if (!s->n) return;
  qsort(s->v, (size_t)s->n, sizeof *s->v, by_start);
  int64_t k = 0;
  for (int64_t i = 1; i < s->n; i++) {
    if (s->v[i].t0 <= s->v[k].t1) {
      if (s->v[i].t1 > s->v[k].t1) s->v[k].t1 = s->v[i].t1;
    } else s->v[++k] = s->v[i];
  }
  s->n = k + 1;
}

static double spans_len(const spans *s) {
  double t = 0;
  for (int64_t i = 0; i < s->n; i++) t += s->v[i].t1 - s->v[i].t0;
  return t;
}

/* Length of a minus b (both merged, sorted). */
static double spans_minus(const spans *a, const spans *b) {
  double t = 0;
  int64_t j = 0;
  for (int64_t i = 0; i < a->n; i++) {
    double x = a->v[i].t0, end = a->v[i].t1;
    while (j < b->n && b->v[j].t1 <= x) j++;
    for (int64_t k = j; k < b->n && b->v[k].t0 < end && x < end; k++) {
      if (b->v[k].t0 > x) t += b->v[k].t0 - x;
      if (b->v[k].t1 > x) x = b->v[k].t1;
    }
    if (x < end) t += end - x;
  }
  return t;
}

/* Index of the window holding time t (windows sorted, disjoint), or -1. */
static int64_t window_of(const spans *w, double t) {
  int64_t lo = 0, hi = w->n - 1;
  while (lo <= hi) {
    int64_t m = (lo + hi) / 2;
    if (t < w->v[m].t0) hi = m - 1;
    else if (t > w->v[m].t1) lo = m + 1;
    else return m;
  }
  return -1;
}

typedef struct {
  spans kernels, colls;
  double compute;     /* kernels without the all-reduce starts */
  bool seen;
} dev_prof;

static void free_all(spans *win, spans *exec, dev_prof *d) {
  free(win->v);
  free(exec->v);
  for (int i = 0; i < PROF_MAX_DEVICES; i++) free(d[i].kernels.v), free(d[i].colls.v);
}

/* Reads the trace file: step windows, executes, the device events. */
static int read_trace(const char *path, spans *win, spans *exec, dev_prof *d, int64_t *dropped) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  /* pass 1: the step windows (host events named "step") */
  char line[512], name[128], cat[64];
  int pid, tid;
  double ts, dur;
  int rc = 0;
  for (int pass = 0; pass < 2 && rc == 0; pass++) {
    rewind(f);
    while (rc == 0 && fgets(line, sizeof line, f)) {
      long long dr;
      if (sscanf(line, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tessel_version\":\"%*[^\"]\",\"dropped_events\":%lld",
                 &dr) == 1)
        *dropped = dr;
      const char *e = strstr(line, "{\"name\":\"");
      if (!e || sscanf(e, "{\"name\":\"%127[^\"]\",\"cat\":\"%63[^\"]\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%lf,\"dur\":%lf",
                       name, cat, &pid, &tid, &ts, &dur) != 6)
        continue;
      if (pass == 0) {
        if (pid == 1 && strcmp(cat, "step") == 0 && spans_add(win, ts, ts + dur) < 0) rc = -1;
        continue;
      }
      if (window_of(win, ts) < 0) continue;
      if (pid == 1) {
        if (strcmp(cat, "execute") == 0 && spans_add(exec, ts, ts + dur) < 0) rc = -1;
        continue;
      }
      if (tid < 0 || tid >= PROF_MAX_DEVICES) continue;
      dev_prof *p = &d[tid];
      p->seen = true;
      if (strcmp(cat, "kernel") == 0) {
        size_t nl = strlen(name); /* starting a collective (its staging copy) is not compute */
        if (nl < 8 || strcmp(name + nl - 8, " (start)") != 0) p->compute += dur;
        if (spans_add(&p->kernels, ts, ts + dur) < 0) rc = -1;
      } else if (strcmp(cat, "collective") == 0 && spans_add(&p->colls, ts, ts + dur) < 0) rc = -1;
    }
    if (pass == 0) qsort(win->v, (size_t)win->n, sizeof *win->v, by_start);
  }
  fclose(f);
  return rc;
}

int train_profile_report(train_run *r) {
  if (!prof.steps) {
    printf("profile: no step after the first (which is left out)\n");
    return 0;
  }
  char path[] = "/tmp/tessel-profile-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    cli_error(CMD, "--profile: cannot create a temporary file for the trace");
    return -1;
  }
  close(fd);
  spans win = {0}, exec = {0};
  dev_prof dev[PROF_MAX_DEVICES];
  memset(dev, 0, sizeof dev);
  int64_t dropped = 0;
  int rc = ts_trace_stop(path) < 0 ? -1 : read_trace(path, &win, &exec, dev, &dropped);
  unlink(path);
  if (rc < 0 || !win.n) {
    cli_error(CMD, "--profile: %s", rc < 0 ? "could not read the trace back" : "the trace holds no step");
    free_all(&win, &exec, dev);
    return -1;
  }
  double n = (double)prof.steps, ms = 1e-6; /* host sums are ns */
  double exec_us = 0;
  for (int64_t i = 0; i < exec.n; i++) exec_us += exec.v[i].t1 - exec.v[i].t0;
  double w = (double)win.n; /* steps in the trace (fewer than steps if events were dropped) */
  double other = prof.total - prof.wait - prof.upload - prof.execute - prof.read;
  printf("profile: %lld steps, %.3f ms per step: loader wait %.3f, upload %.3f, execute %.3f, read-back %.3f, "
         "other host %.3f%s\n",
         (long long)prof.steps, prof.total / n * ms, prof.wait / n * ms, prof.upload / n * ms, prof.execute / n * ms,
         prof.read / n * ms, other / n * ms,
         dropped ? " (the trace dropped events: device parts over the steps it holds)" : "");
  char json[4096];
  size_t used = (size_t)snprintf(json, sizeof json,
                                 "{\"profile\":{\"steps\":%lld,\"step_ms\":%.4f,\"loader_wait_ms\":%.4f,\"upload_ms\":%.4f,"
                                 "\"execute_ms\":%.4f,\"readback_ms\":%.4f,\"other_ms\":%.4f,\"devices\":[",
                                 (long long)prof.steps, prof.total / n * ms, prof.wait / n * ms, prof.upload / n * ms,
                                 prof.execute / n * ms, prof.read / n * ms, other / n * ms);
  bool first = true;
  for (int d = 0; d < PROF_MAX_DEVICES; d++) {
    dev_prof *p = &dev[d];
    if (!p->seen) continue;
    spans_union(&p->kernels);
    spans_union(&p->colls);
    double comm = spans_len(&p->colls), exposed_coll = spans_minus(&p->colls, &p->kernels);
    double starts = spans_len(&p->kernels) - p->compute; /* the copies that start all-reduces */
    if (starts < 0) starts = 0;
    double exposed = exposed_coll + starts, hidden = comm - exposed_coll;
    double idle = exec_us - p->compute - exposed;
    if (idle < 0) idle = 0;
    double u = 1e-3 / w; /* us summed -> ms per step */
    printf("  device %d: compute %.3f, communication exposed %.3f, hidden %.3f, idle %.3f (ms of the execute's %.3f)\n",
           d, p->compute * u, exposed * u, hidden * u, idle * u, exec_us * u);
    if (used < sizeof json)
      used += (size_t)snprintf(json + used, sizeof json - used,
                               "%s{\"device\":%d,\"compute_ms\":%.4f,\"comm_exposed_ms\":%.4f,\"comm_hidden_ms\":%.4f,"
                               "\"idle_ms\":%.4f,\"execute_ms\":%.4f}",
                               first ? "" : ",", d, p->compute * u, exposed * u, hidden * u, idle * u, exec_us * u);
    first = false;
  }
  free_all(&win, &exec, dev);
  if (used < sizeof json) used += (size_t)snprintf(json + used, sizeof json - used, "]}}");
  fflush(stdout);
  if (used >= sizeof json || !r->log) return 0; /* the log: rank 0 with --log-json */
  fprintf(r->log, "%s\n", json);
  return train_log_flush(r) == CLI_EXIT_OK ? 0 : -1;
}

void train_print_binding(ts_client *c) {
  int first = ts_client_first_local_device(c), n = ts_client_num_local_devices(c);
  printf("bind:");
  for (int d = first; d < first + n; d++) {
    char cpus[256];
    if (ts_client_device_cpus(c, d, cpus, sizeof cpus)) printf("%s device %d on CPU %s", d > first ? "," : "", d, cpus);
  }
  printf("\n");
}
