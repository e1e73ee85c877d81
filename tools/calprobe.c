/* calprobe.c — the calibration's timed programs and probes (calprobe.h). */
#include "calprobe.h"

#include "util/clock.h" /* util_now_s */

int cal_prog_open(cal_prog *p, ts_client *c, ts_graph *g, bool replicas) {
  *p = (cal_prog){0};
  if (!(p->e = ts_compile(c, g, &(ts_compile_options){.replicas = replicas}))) return -1;
  int n_in = ts_graph_num_inputs(g);
  for (int i = 0; i < n_in && i < 8; i++) {
    ts_tensor t = ts_graph_input(g, i);
    /* zero-filled (ts_buffer_new's contract): no host copy to write (the
     * memory-bound classes' 24 MiB inputs cost a calloc and a copy each) */
    if (!(p->in[i] = ts_buffer_new(c, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t)))) {
      cal_prog_close(p);
      return -1;
    }
    /* a scalar f32 input (the AdamW probe's lr and step) is 1, not 0: step 0
     * makes the bias correction 0 and the step size lr / 0 = 0 / 0, a NaN
     * that sends the update's fused kernels down their NaN-ordered path
     * (kernels/fused_adam.c), which no training step takes */
    float one = 1.0f;
    if (ts_tensor_rank(g, t) == 0 && ts_tensor_dtype(g, t) == TS_F32 && ts_buffer_write(p->in[i], &one, sizeof one) < 0) {
      cal_prog_close(p);
      return -1;
    }
  }
  return 0;
}

int cal_prog_time(cal_prog *p, int reps, double window, bool sched, cal_run *runs, int max) {
  /* the first run of the program allocates the outputs, the others write into them */
  double t_end = util_now_s() + window;
  int n = 0;
  for (int k = 0; k < reps + 1 || (util_now_s() < t_end && n < max); k++) {
    double w0 = sched ? cal_wait_now() : -1, c0 = cal_cpu_now(), t0 = util_now_s();
    if (ts_execute(p->e, p->in, p->out) < 0) return -1;
    double t = util_now_s() - t0, c = cal_cpu_now() - c0, w1 = sched && w0 >= 0 ? cal_wait_now() : -1;
    if (k >= 1 && n < max) runs[n++] = (cal_run){t, c, w1 >= 0 ? w1 - w0 : 0, w1 >= 0 && w1 >= w0};
  }
  return n;
}

void cal_prog_close(cal_prog *p) {
  for (int o = 0; o < 8; o++) { /* an aliased output's slot is its input's buffer */
    bool alias = false;
    for (int i = 0; i < 8 && p->out[o]; i++) alias |= p->out[o] == p->in[i];
    if (!alias) ts_buffer_free(p->out[o]);
  }
  for (int i = 0; i < 8; i++) ts_buffer_free(p->in[i]);
  ts_executable_free(p->e);
  *p = (cal_prog){0};
}

/* One round of probe p: its value by p->stat and its median wall time. */
static int probe_round(cal_probe *p) {
  cal_run runs[400];
  /* queued: 4 devices on 2 cores at load 8 waited 0-2x the wall time for
   * their own turns; a run's CPU time tells whether the process had every
   * core (devpool.c: no hand-off spins when the devices outnumber the cores) */
  bool sched = (p->stat == PROBE_WORK || p->stat == PROBE_CLEAN) && p->work_threads > 0 && !p->queued;
  int n = cal_prog_time(&p->prog, p->reps, p->window, sched, runs, 400);
  if (n < 1) return -1;
  double least = -1;
  for (int i = 0; i < n; i++)
    if (least < 0 || runs[i].wall < least) least = runs[i].wall;
  int clean = 0;
  double work = p->stat == PROBE_WORK ? cal_least(runs, n, p->work_threads, &clean)
               : p->stat == PROBE_CLEAN ? cal_clean_median(runs, n, p->work_threads, &clean) : -1; /* reorders runs */
  if (p->work_threads > 1 && clean == 0 && (p->stat == PROBE_WORK || p->stat == PROBE_CLEAN)) {
    if (work > 0 && (p->fallback <= 0 || work < p->fallback)) p->fallback = work; /* a round without a value */
    work = 0;
  }
  double med = cal_median_wall(runs, n); /* reorders runs */
  p->v[p->n] = p->stat == PROBE_WORK || p->stat == PROBE_CLEAN ? work : p->stat == PROBE_MEDIAN ? med : least;
  p->med[p->n++] = med;
  return 0;
}

int probe_rounds(ts_client *c, cal_probe *p, int np, int min_rounds) {
  int rc = 0;
  for (int i = 0; i < np; i++) p[i].n = 0, p[i].fallback = 0, p[i].prog = (cal_prog){0};
  for (int i = 0; i < np && rc == 0; i++) rc = cal_prog_open(&p[i].prog, c, p[i].g, p[i].replicas);
  for (bool more = true; more && rc == 0;) {
    more = false;
    for (int i = 0; i < np && rc == 0; i++)
      if (!cal_settled_as(p[i].v, p[i].n, min_rounds, CAL_AGREE, p[i].stat == PROBE_MEDIAN))
        rc = probe_round(&p[i]), more = true;
  }
  for (int i = 0; i < np; i++) cal_prog_close(&p[i].prog);
  return rc;
}

cal_est probe_est(const cal_probe *p, bool median) {
  if (median) return cal_median_rounds(p->med, p->n, CAL_AGREE);
  if (p->stat == PROBE_MEDIAN) return cal_median_rounds(p->v, p->n, CAL_AGREE);
  return cal_confirmed_or(p->v, p->n, CAL_AGREE, p->fallback);
}

/* The least (median: the median) time of at least `reps` runs and `window`
 * seconds of g on client c (calprobe.h's cal_prog: inputs zero-filled).
 * work_threads > 0 (c's threads): instead the time of the work alone from the
 * runs' wall and CPU times (calrun.h's cal_least: a loaded machine's waits
 * for a core left out); with more than one and no clean run, 0 and the
 * least CPU time / threads into *fallback (when not NULL) if it is lower. */
double cal_graph_time(ts_client *c, ts_graph *g, bool replicas, int reps, bool median, double window,
                              int work_threads, double *fallback) {
  cal_prog p;
  if (cal_prog_open(&p, c, g, replicas) < 0) return -1;
  cal_run runs[400];
  int n = cal_prog_time(&p, reps, window, work_threads > 1, runs, 400);
  cal_prog_close(&p);
  if (n < 1) return -1;
  int clean = 0;
  double work = work_threads > 0 ? cal_least(runs, n, work_threads, &clean) : -1;
  if (work_threads > 1 && clean == 0 && fallback) { /* see measure_classes */
    if (work > 0 && (*fallback <= 0 || work < *fallback)) *fallback = work;
    return 0;
  }
  if (work_threads > 0) return work;
  double med = cal_median_wall(runs, n); /* sorts runs by wall */
  return median ? med : runs[0].wall;
}

double cal_graph_stat(ts_client *c, ts_graph *g, bool replicas, int reps, bool median) {
  return cal_graph_time(c, g, replicas, reps, median, 0.15, 0, NULL);
}
