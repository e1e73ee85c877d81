/* calprobe.c — the calibration's timed programs and probes (calprobe.h). */
#include "calprobe.h"

#include <math.h> /* fmax */

#include "tessel/spmd.h" /* ts_replica_all_reduce: the busy probes' chain */

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

static double median3(double *v) {
  double a = v[0], b = v[1], c = v[2];
  return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* calprobe.h. CHAIN_ASYNC, CHAIN_TINY: the 20 elements summed after the last
 * matmul (no matmul waits for one: the compiler starts them on the collective
 * worker, which runs them one after another while the kernels take
 * microseconds); else the next matmul reads each. */
ts_graph *cal_matmul_chain(int mode, int64_t size) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  bool tiny = mode == CHAIN_ASYNC || mode == CHAIN_TINY; /* also: the sums read after the last matmul */
  bool lng = mode == CHAIN_LONG || mode == CHAIN_LONG_BLOCKING;
  int64_t n = size > 0 ? size : tiny ? 2 : lng ? 512 : 256;
  int64_t sh[2] = {n, n}, lo[2] = {0, 0}, hi[2] = {1, 1}, st[2] = {1, 1};
  int dims[2] = {0, 1};
  ts_tensor x = cal_in_f32(g, "x", 2, sh), w = cal_in_f32(g, "w", 2, sh), late[20];
  for (int i = 0; i < 20; i++) {
    x = ts_matmul(g, x, w);
    ts_tensor s = ts_slice(g, x, lo, hi, st);
    if (mode == CHAIN_BLOCKING || mode == CHAIN_ASYNC || mode == CHAIN_LONG_BLOCKING)
      s = ts_replica_all_reduce(g, s, TS_REDUCE_SUM);
    if (tiny) late[i] = s;
    else x = ts_add(g, x, ts_broadcast_in_dim(g, s, 2, sh, dims));
  }
  for (int i = 0; tiny && i < 20; i++) x = ts_add(g, x, ts_broadcast_in_dim(g, late[i], 2, sh, dims));
  ts_graph_add_output(g, x);
  return g;
}

/* calprobe.h. A collective waits for the last device to arrive; back to back
 * (allreduce.N.latency_s) every device is already there, between kernels one
 * may still be computing or not be scheduled (more devices than cores).
 * Medians, not the least times: the wait is what a typical step sees (a lucky
 * run's schedule hides it), as the measured steps are medians. CHAIN_ASYNC:
 * the tiny chain with its collectives started asynchronously, the worker's
 * time per collective when it is what the step waits for (devices sharing
 * the cores: every device's worker must be scheduled for each). per_coll,
 * with the client's devices sharing the cores: the compute each device does
 * between two collectives, as the prediction counts it. */
double cal_busy_collective(ts_client *c, int mode, int64_t size, double *per_coll) {
  int base = mode == CHAIN_ASYNC ? CHAIN_TINY : mode == CHAIN_LONG_BLOCKING ? CHAIN_LONG : CHAIN_NONE;
  ts_graph *g[2] = {cal_matmul_chain(base, size), cal_matmul_chain(mode, size)};
  double d[3] = {-1, -1, -1}, t[3] = {-1, -1, -1};
  /* without, with, alternated 3 times (a shared machine's load drifts): the median difference */
  for (int r = 0; r < 3 && g[0] && g[1]; r++) {
    double t0 = cal_graph_stat(c, g[0], true, 10, true), t1 = cal_graph_stat(c, g[1], true, 10, true);
    if (t0 <= 0 || t1 <= 0) break;
    d[r] = (t1 - t0) / 20, t[r] = t0;
  }
  ts_graph_free(g[0]), ts_graph_free(g[1]);
  if (t[0] < 0 || t[1] < 0 || t[2] < 0) return -1;
  if (per_coll) *per_coll = median3(t) / 20; /* the chain's time per collective without them */
  return fmax(median3(d), 0);
}
