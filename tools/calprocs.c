/* calprocs.c — `tessel plan --calibrate FILE` launched by mpirun with P >= 2
 * processes on this host: the links between processes (issue 16: the
 * 3-process rows of bench/run_autoshard.sh ran 0.74 of a prediction that
 * priced their collectives as in-process ones; device 0's trace spent 3.9 of
 * the MLP's 12.5 ms and 28 of the CNN's 102 ms in collectives against the
 * 0.1-1 ms predicted). Every process runs one device (its threads:
 * TESSEL_NUM_THREADS, as tessel train under mpirun); every probe runs a fixed
 * number of times on every process (no time windows: the processes must make
 * the same calls), and process 0's times are used. Process 0 merges the
 * keys (devices/README.md: allreduce.procsP.*, step_overhead.procsP_s) into
 * FILE: its other lines are kept, those of the same P replaced. The links'
 * beta twice: 16 MiB per process (out of the cache) and 1 MiB (in it:
 * cached_bytes_per_s, for the collectives moving at most cache_bytes). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "calprobe.h"
#include "devfile.h"
#include "util/clock.h" /* util_now_s */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median (least: the least) wall time of `reps` runs of g on every
 * device of c after one warm-up run (*min: the least, when not NULL).
 * Every process makes the same runs. */
static double procs_time2(ts_client *c, ts_graph *g, int reps, bool least, double *min) {
  cal_prog p;
  cal_run runs[64];
  if (!g || reps > 64 || cal_prog_open(&p, c, g, true) < 0) return -1;
  int n = cal_prog_time(&p, reps, 0, false, runs, reps);
  cal_prog_close(&p);
  if (n < 1) return -1;
  double w[64];
  for (int i = 0; i < n; i++) w[i] = runs[i].wall;
  qsort(w, (size_t)n, sizeof *w, cmp_d);
  if (min) *min = w[0];
  return least ? w[0] : w[n / 2];
}

static double procs_time(ts_client *c, ts_graph *g, int reps, bool least) {
  return procs_time2(c, g, reps, least, NULL);
}

/* A 1-element program: x + x (coll: all-reduced), or `count` f32 all-reduced. */
static ts_graph *procs_allreduce(int64_t count, bool coll) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  ts_tensor x = ts_input(g, "x", TS_F32, 1, &count);
  ts_graph_add_output(g, coll ? ts_replica_all_reduce(g, x, TS_REDUCE_SUM) : ts_add(g, x, x));
  return g;
}

/* 20 matmuls of n^3, each followed (coll) by a 1-element all-reduce of one
 * element of its result that the next matmul reads (calibrate.c's blocking
 * chain, with the compute between collectives as a parameter). */
static ts_graph *procs_chain(int64_t n, int segs, bool coll) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t sh[2] = {n, n}, lo[2] = {0, 0}, hi[2] = {1, 1}, st[2] = {1, 1};
  int dims[2] = {0, 1};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, sh), w = ts_input(g, "w", TS_F32, 2, sh);
  for (int i = 0; i < segs; i++) {
    x = ts_matmul(g, x, w);
    ts_tensor s = ts_slice(g, x, lo, hi, st);
    if (coll) s = ts_replica_all_reduce(g, s, TS_REDUCE_SUM);
    x = ts_add(g, x, ts_broadcast_in_dim(g, s, 2, sh, dims));
  }
  ts_graph_add_output(g, x);
  return g;
}

/* The busy probe's matmuls: 512^3, 1.4 ms each on one core of this
 * project's machine (the waits grow with the compute between two
 * collectives: at 256^3, 0.2 ms, 3 processes on 2 cores waited 0.3 ms each;
 * the models' steps compute milliseconds between their collectives) */
#define PROCS_CHAIN_N 512
/* The step probe's one matmul per run: 768^3, 5 ms on one core (a step's
 * first collective over processes waits for peers that went their own way
 * since the last run: 1 matmul of 512^3 and an all-reduce per run waited
 * 2-5 ms per all-reduce, 20 in one run 0-1.6 ms each, at load 3.5) */
#define PROCS_STEP_N 768

/* The in-cache all-reduce: 1 MiB per process (a data-parallel MLP's
 * gradients, 20 KB-1.6 MB each, are in the cache when all-reduced; at 2
 * processes 1 MiB ran 6.0e9 B/s against 16 MiB's 3.1e9, at 3 2.1e9 against
 * 1.3e9; stop 37, load 5) */
#define PROCS_CACHED_COUNT (256 << 10)

typedef struct {
  int P;
  double step, ar1, ar1_least, arbig, arcached, lat, bw, cached_bw, busy, chain, step_wait;
} procs_result;

/* Pairs of the chain without and with its collectives (each the median of 9
 * runs), alternated PROCS_PAIRS times: the median difference per collective
 * (*chain: the median chain without). A median, as allreduce.N.busy_s: the
 * wait a typical step sees. Not the least pair: under another job's load
 * the pairs' differences scatter by more than the wait (3 processes at load
 * 5: the least of 5 pairs 0 for both probes, the medians of 3 pairs 0.2-2.9
 * and 2.2-16 ms at load 2-9); calibrate on a quiet machine. */
#define PROCS_PAIRS 5
static double procs_busy(ts_client *c, int64_t n, int segs, double *chain) {
  ts_graph *g[2] = {procs_chain(n, segs, false), procs_chain(n, segs, true)};
  double d[PROCS_PAIRS], t0s[PROCS_PAIRS];
  int k = 0;
  for (; k < PROCS_PAIRS && g[0] && g[1]; k++) {
    double t0 = procs_time(c, g[0], 9, false), t1 = procs_time(c, g[1], 9, false);
    if (t0 <= 0 || t1 <= 0) break;
    d[k] = (t1 - t0) / segs, t0s[k] = t0;
  }
  ts_graph_free(g[0]), ts_graph_free(g[1]);
  if (k < PROCS_PAIRS) return -1;
  qsort(d, PROCS_PAIRS, sizeof *d, cmp_d);
  qsort(t0s, PROCS_PAIRS, sizeof *t0s, cmp_d);
  *chain = t0s[PROCS_PAIRS / 2];
  return fmax(d[PROCS_PAIRS / 2], 0); /* noise can make it negative: no wait */
}

static int measure_procs(ts_client *c, procs_result *r) {
  const int64_t one = 1, big = 4 << 20; /* 16 MiB per process, out of cache as calibrate.c's */
  ts_graph *g[4] = {procs_allreduce(one, false), procs_allreduce(one, true), procs_allreduce(big, true),
                    procs_allreduce(PROCS_CACHED_COUNT, true)};
  r->step = procs_time(c, g[0], 41, false);
  r->ar1 = procs_time2(c, g[1], 41, false, &r->ar1_least);
  r->arbig = procs_time(c, g[2], 7, true);
  r->arcached = procs_time(c, g[3], 21, true);
  for (int i = 0; i < 4; i++) ts_graph_free(g[i]);
  double busy = procs_busy(c, PROCS_CHAIN_N, 20, &r->chain), chain1 = 0;
  r->step_wait = procs_busy(c, PROCS_STEP_N, 1, &chain1);
  if (r->step <= 0 || r->ar1 <= 0 || r->arbig <= 0 || r->arcached <= 0 || busy < 0 || r->step_wait < 0) return -1;
  allreduce_terms(r->P, r->ar1, r->step, busy, &r->lat, &r->busy);
  r->step_wait = fmax(r->step_wait - (r->ar1 - r->step), 1e-9); /* beyond back to back, as busy */
  r->bw = 2.0 * (double)big * 4 * (r->P - 1) / r->P / fmax(r->arbig - r->ar1, 1e-9);
  /* least against least: 1 MiB's 0.2 ms is near a loaded machine's median 1-element step */
  r->cached_bw = 2.0 * PROCS_CACHED_COUNT * 4 * (r->P - 1) / r->P / fmax(r->arcached - r->ar1_least, 1e-9);
  return 0;
}

/* Whether line is one of P's keys (replaced by the new measurement). */
static bool own_key(const char *line, int P) {
  char a[32], s[40];
  snprintf(a, sizeof a, "allreduce.procs%d.", P);
  snprintf(s, sizeof s, "step_overhead.procs%d_s", P);
  return strncmp(line, a, strlen(a)) == 0 || strncmp(line, s, strlen(s)) == 0;
}

static int merge_write(const char *cmd, const char *path, const procs_result *r, int threads) {
  char *kept = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&kept, &len), *f = fopen(path, "r");
  char line[1024];
  while (mem && f && fgets(line, sizeof line, f))
    if (!own_key(line, r->P)) fputs(line, mem);
  if (f) fclose(f);
  if (!mem) return -1;
  fclose(mem);
  if (!(f = fopen(path, "w"))) {
    cli_error(cmd, "--calibrate %s: cannot write it: %s", path, strerror(errno));
    free(kept);
    return -1;
  }
  fputs(kept, f);
  free(kept);
  int P = r->P;
  fprintf(f,
          "allreduce.procs%d.latency_s = %.4g   # %d processes of this host (mpirun, %d thread(s) each): (a "
          "1-element all-reduce's step, %.4g s median, less step_overhead.procs%d_s) / (2 log2 %d)\n"
          "allreduce.procs%d.bytes_per_s = %.4g   # 16 MiB per process: the least of 7 steps, %.4g s\n"
          "allreduce.procs%d.cached_bytes_per_s = %.4g   # 1 MiB per process, in the cache (collectives moving at "
          "most cache_bytes): the least of 21 steps, %.4g s, less the least 1-element one\n"
          "step_overhead.procs%d_s = %.4g   # a 1-element add on every process, median of 41\n"
          "allreduce.procs%d.busy_s = %.4g   # per collective between kernels: 20 matmuls of %d^3 with a 1-element "
          "all-reduce after each less without (the median of 5 pairs of medians), less back to back\n"
          "allreduce.procs%d.busy_after_s = %.4g   # that chain's compute per collective: its median time without "
          "them / 20\n"
          "allreduce.procs%d.step_wait_s = %.4g   # a step's first collective: runs of one %d^3 matmul and a "
          "1-element all-reduce, less the matmul alone (the median of 5 pairs of medians), less back to back\n",
          P, r->lat, P, threads, r->ar1, P, P, P, r->bw, r->arbig, P, r->cached_bw, r->arcached, P, r->step, P, r->busy, PROCS_CHAIN_N, P,
          r->chain / 20, P, r->step_wait, PROCS_STEP_N);
  return fclose(f) == 0 ? 0 : -1;
}

int calibrate_procs(ts_client *c, const char *cmd, const char *path) {
  double t0 = util_now_s();
  procs_result r = {.P = ts_client_process_count(c)};
  if (ts_client_num_devices(c) != r.P) {
    cli_error(cmd, "--calibrate under mpirun: one device per process expected, %d devices over %d processes",
              ts_client_num_devices(c), r.P);
    return -1;
  }
  if (measure_procs(c, &r) < 0) {
    cli_error(cmd, "--calibrate (%d processes): a measurement failed: %s", r.P, ts_last_error());
    return -1;
  }
  if (ts_client_process_index(c) != 0) return 0;
  int rc = merge_write(cmd, path, &r, ts_client_threads_per_device(c));
  if (rc == 0)
    printf("calibrated %d processes in %.1f s: all-reduce %.3g s + %.3g B/s (in the cache %.3g B/s), between kernels +%.3g s, a step's first "
           "+%.3g s, step %.3g s -> %s\n", r.P, util_now_s() - t0, r.lat, r.bw, r.cached_bw, r.busy, r.step_wait, r.step, path);
  return rc;
}
