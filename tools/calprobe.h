/* calprobe.h — the calibration's timed programs and probes
 * (tools/calibrate.c; issue 16: a calibration whose numbers a loaded machine
 * or one descheduled round cannot move).
 *
 * A probe is one graph compiled once on one client and timed in rounds: a
 * round is a warm-up run and then at least `reps` runs and `window` seconds,
 * reduced to one value by the probe's statistic (calrun.h). probe_rounds
 * runs the rounds of several probes interleaved (a round of each in turn: a
 * shared machine's load drifts over seconds, so every probe gets runs in each
 * quieter spell) until each is settled (calrun.h's cal_settled_as: its least
 * round, PROBE_MEDIAN its median round, confirmed by another, or
 * CAL_ROUNDS_MAX rounds); probe_est gives the
 * estimate, its spread and whether it was confirmed.
 * Single-threaded: the caller's thread runs every probe. */
#ifndef TS_TOOLS_CALPROBE_H
#define TS_TOOLS_CALPROBE_H

#include <stdbool.h>

#include "calrun.h"
#include "tessel/tessel.h"

/* A round's statistic of its runs' wall and CPU times. */
enum {
  PROBE_LEAST,  /* the least wall time (a fixed cost at its quietest) */
  PROBE_MEDIAN, /* the median wall time (a wake-up or a wait: what a typical step sees) */
  PROBE_WORK,   /* calrun.h's cal_least on work_threads (the work alone: waits for a core left out) */
  PROBE_CLEAN   /* calrun.h's cal_clean_median on work_threads (a typical run with no wait for a core) */
};

/* A compiled graph with zero-filled inputs (a scalar f32 one is 1: the
 * AdamW probe's lr and step, cal_prog_open) and its outputs (allocated by the
 * first run, reused after). Owns the executable and buffers, not the graph. */
typedef struct {
  ts_executable *e;
  ts_buffer *in[8], *out[8];
} cal_prog;

/* Compiles g on c (replicas: on every device) and allocates its inputs. -1 on failure (p freed). */
int cal_prog_open(cal_prog *p, ts_client *c, ts_graph *g, bool replicas);
/* A warm-up run, then at least reps runs and `window` seconds (at most max):
 * their wall and CPU times into runs, and with sched their threads' waits
 * for a core (calrun.h's cal_wait_now: for runs of milliseconds). Returns the
 * runs' count, -1 on failure. */
int cal_prog_time(cal_prog *p, int reps, double window, bool sched, cal_run *runs, int max);
void cal_prog_close(cal_prog *p);

typedef struct {
  /* set by the caller (zero-initialize the rest) */
  ts_graph *g;      /* not owned */
  bool replicas;    /* run on every device of the client */
  int reps;         /* runs per round, at least */
  double window;    /* seconds per round, at least */
  int stat;         /* PROBE_LEAST, PROBE_MEDIAN, PROBE_WORK, PROBE_CLEAN */
  int work_threads; /* PROBE_WORK, PROBE_CLEAN: the threads the work is split over (their waits are read) */
  bool queued;      /* more threads than cores (devices taking turns): their waits for a core are
                     * their own, so a run is clean by its CPU time (calrun.h), not its waits */
  /* filled by probe_rounds */
  double v[CAL_ROUNDS_MAX];   /* each round's value by stat */
  double med[CAL_ROUNDS_MAX]; /* each round's median wall time */
  int n;                      /* rounds timed */
  double fallback;            /* PROBE_WORK, PROBE_CLEAN on threads: the least CPU time / threads of
                               * the rounds without a clean run (their v: 0, no value) */
  cal_prog prog;
} cal_probe;

/* Times probes p[0..np) on c in interleaved rounds: at least min_rounds
 * each, more (up to CAL_ROUNDS_MAX) for each not yet settled. -1 when a
 * compile or run failed. */
int probe_rounds(ts_client *c, cal_probe *p, int np, int min_rounds);
/* A probe's estimate: PROBE_MEDIAN's, and with median the rounds' medians,
 * cal_median_rounds (a typical value); else cal_confirmed_or of its rounds
 * and fallback (the least confirmed). */
cal_est probe_est(const cal_probe *p, bool median);

/* The least (median: the median) time of at least `reps` runs and `window`
 * seconds of g on client c (cal_prog: inputs zero-filled). work_threads > 0
 * (c's threads): instead the time of the work alone from the runs' wall and
 * CPU times (calrun.h's cal_least: a loaded machine's waits for a core left
 * out); with more than one and no clean run, 0 and the least CPU time /
 * threads into *fallback (when not NULL) if it is lower. -1 on failure. */
double cal_graph_time(ts_client *c, ts_graph *g, bool replicas, int reps, bool median, double window,
                      int work_threads, double *fallback);
/* cal_graph_time over a 0.15 s window, its least (median: median) wall time. */
double cal_graph_stat(ts_client *c, ts_graph *g, bool replicas, int reps, bool median);
/* The matmul chain's collectives: none, blocking (the next matmul reads
 * each), asynchronous (read only after the last matmul); CHAIN_LONG,
 * CHAIN_LONG_BLOCKING: none and blocking between 512^3 matmuls. */
enum { CHAIN_NONE, CHAIN_BLOCKING, CHAIN_ASYNC, CHAIN_TINY, CHAIN_LONG, CHAIN_LONG_BLOCKING };

/* The busy probes' chain (mode above): 20 matmuls of size^3 (size 0: the
 * mode's own, 256, 2 or 512), each followed by a 1-element all-reduce of one
 * element of its result where the mode has them. */
ts_graph *cal_matmul_chain(int mode, int64_t size);
/* The wait per blocking (or asynchronous) collective between the chain's
 * matmuls on every device of c, against the chain without them (medians of
 * 3 pairs; -1 on failure); per_coll: the chain's time per collective. */
double cal_busy_collective(ts_client *c, int mode, int64_t size, double *per_coll);
/* An f32 input of g (the probes' graphs). */
static inline ts_tensor cal_in_f32(ts_graph *g, const char *name, int rank, const int64_t *shape) {
  return ts_input(g, name, TS_F32, rank, shape);
}

#endif
