/* calibrate.c — `tessel plan --calibrate`: the measurement of this machine
 * that writes a calibration file (devfile.h's calibrate; the keys are
 * documented in devices/README.md, devfile.c reads them). Split out of
 * devfile.c (issue 16: it had grown to 825 lines); its kernel probes are in
 * calkernels.c (this file had grown to 912 lines). */
#include "devfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "calkernels.h" /* the kernel classes and the terms beside them */
#include "calprobe.h" /* cal_prog, cal_probe: graphs timed in rounds */
#include "util/config.h"  /* env_mpi_wanted: launched by mpirun */
#include "calrun.h"  /* cal_run, cal_least, cal_est: a probe's work time from its runs and rounds */
#include "util/clock.h"  /* util_now_s */

/* A step's fixed cost: one 1-element add run on every device of a client.
 * This and the fork-and-join below are medians per round, as the collective
 * wait is: they wake threads, and on a machine busy with other work a typical
 * wake-up waits for a core (measured at load average 15 on 2 cores: the fork
 * and join 4.8 us at best, 11 ms median); the rounds' medians then give the
 * least that another round confirms (calrun.h), the quietest typical value. */
static ts_graph *trivial_graph(void) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t one = 1;
  ts_tensor x = cal_in_f32(g, "x", 1, &one);
  ts_graph_add_output(g, ts_add(g, x, x));
  return g;
}

/* A kernel's fixed cost on every thread of a client: chains of 200 adds of n
 * (k = 0) and 2n (k = 1) elements (n: the size above which kernels fork, in
 * cache; a reshape between two adds keeps them apart, unfused), t(n) = o + n w:
 * o = 2 t(n) - t(2n). */
static ts_graph *par_overhead_graph(int k) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t a[2] = {128, 256 << k}, b[2] = {256 << k, 128};
  ts_tensor x = cal_in_f32(g, "x", 2, a), wa = cal_in_f32(g, "wa", 2, a), wb = cal_in_f32(g, "wb", 2, b);
  for (int i = 0; i < 200; i++) x = i % 2 ? ts_add(g, ts_reshape(g, x, 2, a), wa) : ts_add(g, ts_reshape(g, x, 2, b), wb);
  ts_graph_add_output(g, x);
  return g;
}

/* A chain of 200 2x2 matmuls: per kernel, its time / 200 (op_overhead_s, op_overhead.N_s). */
static ts_graph *overhead_graph(void) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t sh[2] = {2, 2};
  ts_tensor x = cal_in_f32(g, "x", 2, sh), w = cal_in_f32(g, "w", 2, sh);
  for (int k = 0; k < 200; k++) x = ts_matmul(g, x, w);
  ts_graph_add_output(g, x);
  return g;
}

void allreduce_terms(int D, double ts, double step, double busy, double *latency, double *busy_s) {
  /* ts is a whole step of one 1-element all-reduce: the step's own fixed cost
   * (step_overhead.D_s, charged once per step by the prediction) is not the
   * collective's. Without subtracting it alpha carried it into every
   * collective, and busy - ts went negative (clamped) whenever the step's
   * start-up was most of ts. File numbers are > 0: at least 1 ns. */
  double coll = fmax(ts - step, 1e-9);
  *latency = coll / (2 * log2((double)D));
  /* what a collective between kernels takes beyond that back-to-back time */
  *busy_s = fmax(busy - coll, 1e-9);
}


/* Everything calibrate measures: the values written and the estimates behind
 * them (their rounds and spread, for the report). */
typedef struct {
  char cpu[128];
  int threads, rounds;
  long cores;
  double units[TS_KERNEL_CLASSES], rate[TS_KERNEL_CLASSES], ceff[TS_KERNEL_CLASSES];
  cal_est cls[TS_KERNEL_CLASSES], cls_t[TS_KERNEL_CLASSES]; /* 1 thread; every thread */
  double overhead, bcast_op, step1, chain1, par_over, eff;
  double dot_bw; /* kernel.matmul.bytes_per_s (0: not separated) */
  double conv_wbw[3]; /* kernel.conv{,_bwd_data,_bwd_filter}.weight_bytes_per_s (0: none left beyond the FLOPs) */
  double cached[TS_KERNEL_CLASSES]; /* kernel.CLASS.cached (0: not measured) */
  cal_est e_overhead, e_step1, e_chain1, e_step_t, e_par[2];
  double arb[DEV_AR_SIZES], arl[DEV_AR_SIZES], step_over[DEV_AR_SIZES], ar_async[DEV_AR_SIZES];
  double ar_step[DEV_AR_SIZES], ar_between[DEV_AR_SIZES], ar_busy[DEV_AR_SIZES], shared_eff[DEV_AR_SIZES];
  double op_over[DEV_AR_SIZES];
  double ar_long[DEV_AR_SIZES], ar_long_after[DEV_AR_SIZES]; /* the wait between 512^3 matmuls; their time per collective */
  /* per D: the step, the 1-element all-reduce (least, median), 16 MiB, the overhead chain, the matmul chain */
  cal_est e_dev[DEV_AR_SIZES][6];
} cal_result;

enum { DEV_STEP, DEV_AR1, DEV_AR1_MED, DEV_ARBIG, DEV_OVER, DEV_CHAIN };

/* Rounds for the probes that are not kernel classes: at least this many (a
 * window of 0.15 s / this each, as the single 0.15 s window they replaced). */
#define CAL_PROBE_ROUNDS 3
#define CAL_PROBE_WINDOW_S (0.15 / CAL_PROBE_ROUNDS)

/* One device of 1 thread: the kernel classes, the per-kernel overhead, the
 * broadcast operands, a step and the matmul chain (shared_efficiency.N's
 * reference: the median of its clean runs, no wait for a core). */
static int measure_one_thread(cal_result *r) {
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  if (!c || measure_classes(c, 1, r->rounds, r->units, r->cls) < 0) return ts_client_free(c), -1;
  cal_probe p[3] = {{.g = overhead_graph(), .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_WORK, .work_threads = 1},
                    {.g = trivial_graph(), .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_MEDIAN},
                    {.g = cal_matmul_chain(CHAIN_NONE, 0), .replicas = true, .reps = 10, .window = CAL_PROBE_WINDOW_S,
                     .stat = PROBE_CLEAN, .work_threads = 1}};
  int rc = p[0].g && p[1].g && p[2].g ? probe_rounds(c, p, 3, CAL_PROBE_ROUNDS) : -1;
  r->e_overhead = probe_est(&p[0], false), r->e_step1 = probe_est(&p[1], false), r->e_chain1 = probe_est(&p[2], false);
  for (int i = 0; i < 3; i++) ts_graph_free(p[i].g);
  r->overhead = r->e_overhead.value / 200, r->step1 = r->e_step1.value, r->chain1 = r->e_chain1.value;
  r->bcast_op = rc == 0 ? measure_bcast_operands(c, r->rounds) : -1;
  double dot_rate = 0;
  if (rc == 0 && measure_dot_stream(c, r->rounds, r->overhead, &dot_rate, &r->dot_bw) < 0) rc = -1;
  if (rc == 0 && measure_cached(c, r->rounds, r->overhead, r->cached) < 0) rc = -1;
  if (rc < 0 || r->overhead <= 0 || r->step1 <= 0 || r->chain1 <= 0 || r->bcast_op <= 0) return ts_client_free(c), -1;
  /* each time above includes one kernel's overhead: the rate is of the work alone */
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) {
    r->rate[k] = rate_of_work(r->units[k], r->cls[k].value, r->overhead);
  }
  /* with the operands' streaming apart, kernel.matmul is the FLOP rate beside it */
  if (r->dot_bw > 0) r->rate[TS_KERNEL_MATMUL] = dot_rate;
  rc = measure_conv_weight(c, r->rounds, r->overhead, r->rate, r->conv_wbw);
  ts_client_free(c);
  return rc;
}

/* One device of every thread: a step, a kernel's fork and join, and each
 * class's parallel efficiency (kernels do not all split as well as a large
 * matmul). */
static int measure_threads(cal_result *r) {
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = r->threads, .num_devices = 1});
  if (!c) return -1;
  cal_probe p[3] = {{.g = trivial_graph(), .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_MEDIAN},
                    {.g = par_overhead_graph(0), .reps = 10, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_MEDIAN},
                    {.g = par_overhead_graph(1), .reps = 10, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_MEDIAN}};
  int rc = p[0].g && p[1].g && p[2].g ? probe_rounds(c, p, 3, CAL_PROBE_ROUNDS) : -1;
  r->e_step_t = probe_est(&p[0], false), r->e_par[0] = probe_est(&p[1], false), r->e_par[1] = probe_est(&p[2], false);
  for (int i = 0; i < 3; i++) ts_graph_free(p[i].g);
  double units[TS_KERNEL_CLASSES];
  if (rc == 0) rc = measure_classes(c, r->threads, r->rounds, units, r->cls_t);
  ts_client_free(c);
  if (rc < 0 || r->e_par[0].value <= 0 || r->e_par[1].value <= 0) return -1;
  if (r->e_step_t.value > r->step1) r->step1 = r->e_step_t.value;
  r->par_over = fmax((2 * r->e_par[0].value - r->e_par[1].value) / 200, r->overhead);
  for (int k = 0; k < TS_KERNEL_CLASSES; k++)
    r->ceff[k] = fmin(1, fmax(0.05, r->cls[k].value / r->cls_t[k].value / r->threads));
  r->eff = r->ceff[TS_KERNEL_MATMUL];
  return 0;
}

/* In-process all-reduce on D = dev_ar_devices[q] devices: 1 element (latency)
 * and 4 Mi f32 (bandwidth: 16 MiB per device, out of cache as a step's
 * gradients are; 4 MiB ran in the L3 cache, 3-8x the bandwidth a step sees,
 * which made every resharding look cheap to the solver; 20 runs a round, the
 * least: on 2 and 4 devices sharing 2 cores its times are bimodal, rounds
 * 1.1-2.3x apart, and with 5 runs a round two slow rounds could settle it:
 * the 4 devices' bandwidth read 2.7e9 B/s in one calibration against 4.7-5.2e9
 * in others, the MLP on 4 devices then predicted 1.30x its unchanged step); the ring model:
 * t = 2 log2(D) alpha + 2 B (D-1)/D / beta. Also the step, the per-kernel
 * overhead and the matmul chain (shared_efficiency.D: the median of its clean
 * runs, cal_clean_median over the cores the D devices can use, against one
 * thread's) with D devices,
 * and the collective between kernels (busy, async: medians of 3 pairs). */
static int measure_devices(cal_result *r, int q) {
  int D = dev_ar_devices[q];
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = r->threads, .num_devices = D});
  if (!c) return -1;
  const int64_t one = 1, big = 4 << 20;
  ts_graph *ar[2] = {ts_graph_new(), ts_graph_new()};
  for (int k = 0; k < 2 && ar[k]; k++)
    ts_graph_add_output(ar[k], ts_replica_all_reduce(ar[k], ts_input(ar[k], "x", TS_F32, 1, k ? &big : &one), TS_REDUCE_SUM));
  int busy_threads = D < r->cores ? D : (int)r->cores;
  cal_probe p[5] = {{.g = trivial_graph(), .replicas = true, .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_MEDIAN},
                    {.g = ar[0], .replicas = true, .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_LEAST},
                    {.g = ar[1], .replicas = true, .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_LEAST},
                    {.g = overhead_graph(), .replicas = true, .reps = 20, .window = CAL_PROBE_WINDOW_S, .stat = PROBE_LEAST},
                    {.g = cal_matmul_chain(CHAIN_NONE, 0), .replicas = true, .reps = 10, .window = CAL_PROBE_WINDOW_S,
                     .stat = PROBE_CLEAN, .work_threads = busy_threads, .queued = D > busy_threads}};
  bool built = true;
  for (int i = 0; i < 5; i++) built &= p[i].g != NULL;
  int rc = built ? probe_rounds(c, p, 5, CAL_PROBE_ROUNDS) : -1;
  cal_est *e = r->e_dev[q];
  e[DEV_STEP] = probe_est(&p[0], false), e[DEV_AR1] = probe_est(&p[1], false);
  e[DEV_AR1_MED] = probe_est(&p[1], true), e[DEV_ARBIG] = probe_est(&p[2], false);
  e[DEV_OVER] = probe_est(&p[3], false), e[DEV_CHAIN] = probe_est(&p[4], false);
  for (int i = 0; i < 5; i++) ts_graph_free(p[i].g);
  double busy = rc == 0 ? cal_busy_collective(c, CHAIN_BLOCKING, 0, NULL) : -1;
  r->ar_async[q] = rc == 0 ? cal_busy_collective(c, CHAIN_ASYNC, 0, NULL) : -1;
  /* the same wait with more compute between the collectives: devices taking
   * turns on the cores meet later the longer each computes in between */
  r->ar_long[q] = rc == 0 ? cal_busy_collective(c, CHAIN_LONG_BLOCKING, 0, &r->ar_long_after[q]) : -1;
  ts_client_free(c);
  double ts = e[DEV_AR1].value, ts_med = e[DEV_AR1_MED].value, tb = e[DEV_ARBIG].value;
  r->step_over[q] = e[DEV_STEP].value, r->op_over[q] = e[DEV_OVER].value / 200;
  if (rc < 0 || r->step_over[q] <= 0 || ts <= 0 || ts_med <= 0 || tb <= 0 || busy < 0 || r->ar_async[q] < 0 ||
      r->ar_long[q] < 0 ||
      r->op_over[q] <= 0 || e[DEV_CHAIN].value <= 0)
    return -1;
  r->ar_async[q] = fmax(r->ar_async[q], 1e-9); /* a file's numbers are > 0 */
  r->ar_long[q] = fmax(r->ar_long[q], 1e-9);
  /* D devices of at most one core each (device_options' share): the chain's speed
   * against one core's, over that share; 0 (not written) above one core */
  int th = r->threads;
  double share = fmin(th / D > 1 ? th / D : 1, (double)r->cores / D);
  r->shared_eff[q] = share <= 1 ? fmin(1, fmax(0.05, r->chain1 / (e[DEV_CHAIN].value * share))) : 0;
  allreduce_terms(D, ts_med, r->step_over[q], busy, &r->arl[q], &r->ar_busy[q]);
  r->ar_step[q] = ts_med, r->ar_between[q] = busy;
  r->arb[q] = 2.0 * (double)big * 4 * (D - 1) / D / fmax(tb - ts, 1e-9);
  return 0;
}

/* "R rounds[ (C with a clean run)]: spread S%, range G%[, unconfirmed...]" for a key's comment. */
static const char *est_note(char *buf, size_t len, const cal_est *e) {
  char clean[48] = "";
  if (e->tried > e->rounds) snprintf(clean, sizeof clean, " (%d with a clean run)", e->rounds);
  snprintf(buf, len, "%d rounds%s: spread %.0f%%, range %.0f%%%s", e->tried, clean, 100 * e->spread, 100 * e->range,
           e->confirmed ? "" : e->rounds == 0 ? ", unconfirmed: no clean run, CPU time / threads" : ", unconfirmed");
  return buf;
}

static const char *const class_what[TS_KERNEL_CLASSES] = {
    "FLOP/s, 96^3 matmul and its two gradients", "FLOP/s, (2048,256)x(256,1024) matmul and its two gradients",
    "FLOP/s, 3x3 conv (64,16,32,32)", "FLOP/s, its data gradient", "FLOP/s, its filter gradient",
    "bytes/s, add + ReLU of 3072x2048 and its gradient", "bytes/s, row sum and column sum of 6144x2048",
    "bytes/s, gather of 8192 rows of 4096x256", "bytes/s, AdamW update of a 1536x2048 weight",
    "bytes/s, bias add + ReLU of (96,64,32,32)", "bytes/s, 2x2 max pooling of (192,32,32,32) and its gradient",
    "FLOP/s, causal attention of qkv (16,128,3,4,64) and its gradient", "bytes/s, last-dim bias add of (6144,1024)",
    "bytes/s, GELU (erf) of (3072,2048) and its gradient", "FLOP/s, the conv in NHWC (64,32,32,16)",
    "FLOP/s, its data gradient (NHWC)", "FLOP/s, its filter gradient (NHWC)"};

/* The kernel classes, overheads and efficiencies of r into f. */
static void write_kernels(FILE *f, const cal_result *r) {
  char n[128];
  for (int k = 0; k < TS_KERNEL_CLASSES; k++)
    fprintf(f, "%s = %.4g   # %s; %s\n", dev_kernel_keys[k], r->rate[k], class_what[k], est_note(n, sizeof n, &r->cls[k]));
  if (r->dot_bw > 0)
    fprintf(f, "kernel.matmul.bytes_per_s = %.4g   # a dot_general's operands and result streamed beside its FLOPs "
               "(kernel.matmul then the FLOP rate alone): (2048,256)x(256,1024) and 6 chained (16,1024)x(1024,1024) "
               "with their gradients, each the least of %d rounds\n", r->dot_bw, r->rounds);
  for (int k = 0; k < 3; k++)
    if (r->conv_wbw[k] > 0)
      fprintf(f, "%s.weight_bytes_per_s = %.4g   # its weight%s moved beside its FLOPs: (4,4,4,512) NHWC * "
                 "(512,512,3,3)%s, the least of %d rounds, less its FLOPs at the conv classes' rates\n",
              dev_kernel_keys[TS_KERNEL_CONV + k], r->conv_wbw[k], k == 2 ? " gradient" : "",
              k ? ", the forward and this gradient, less the forward's" : "", r->rounds);
  for (int k = 0; k < TS_KERNEL_CLASSES; k++)
    if (r->cached[k] > 0)
      fprintf(f, "%s.cached = %.4g   # bytes/s, the same probe on 512 KiB tensors, in the cache (kernels moving at most "
                 "cache_bytes); the least of %d rounds\n", dev_kernel_keys[k], r->cached[k], r->rounds);
  fprintf(f, "cache_bytes = %.0f   # per kernel: at most the in-cache probes' runs (2.5-3.5 MB), rounded up\n",
          CAL_CACHE_BYTES);
  fprintf(f, "kernel.broadcast.operand_s = %.4g   # per result element per broadcast operand beyond the first: a batch "
             "norm + ReLU of (128,16,28,28) against a bias add + ReLU; %d rounds\n", r->bcast_op, r->rounds);
  if (r->threads > 1)
    fprintf(f, "op_overhead.parallel_s = %.4g   # per kernel on %d threads: chains of 200 adds of 32768 (%s) and 65536 "
               "elements\n", r->par_over, r->threads, est_note(n, sizeof n, &r->e_par[0]));
  fprintf(f, "op_overhead_s = %.4g   # per kernel: a chain of 200 2x2 matmuls, CPU time; %s\n", r->overhead,
          est_note(n, sizeof n, &r->e_overhead));
  fprintf(f, "parallel_efficiency = %.3g   # the large matmul + gradients on %d threads / (%d x 1 thread)\n", r->eff,
          r->threads, r->threads);
  for (int k = 0; k < TS_KERNEL_CLASSES && r->threads > 1; k++)
    fprintf(f, "parallel_efficiency.%s = %.3g   # on %d threads: %s\n", dev_kernel_keys[k] + 7, r->ceff[k], r->threads,
            est_note(n, sizeof n, &r->cls_t[k]));
  fprintf(f, "step_overhead.1_s = %.4g   # per step: a 1-element add on 1 device (every thread); %s\n", r->step1,
          est_note(n, sizeof n, r->e_step_t.value > r->e_step1.value ? &r->e_step_t : &r->e_step1));
}

/* The in-process entries of r (2, 4, 8 devices) into f. */
static void write_devices(FILE *f, const cal_result *r) {
  char n[5][128];
  for (int q = 0; q < DEV_AR_SIZES; q++) {
    int D = dev_ar_devices[q];
    const cal_est *e = r->e_dev[q];
    fprintf(f, "allreduce.%d.bytes_per_s = %.4g   # 16 MiB per device: %s\n"
               "allreduce.%d.latency_s = %.4g   # (a 1-element all-reduce's step, %.4g s median, less "
               "step_overhead.%d_s) / (2 log2 %d); the median: %s\nstep_overhead.%d_s = %.4g   # %s\n"
               "allreduce.%d.busy_s = %.4g   # per collective between kernels (20 matmuls of 256^3): %.4g s, less "
               "back to back (alpha's 2 log2 %d steps)\n",
            D, r->arb[q], est_note(n[0], sizeof n[0], &e[DEV_ARBIG]), D, r->arl[q], r->ar_step[q], D, D,
            est_note(n[1], sizeof n[1], &e[DEV_AR1_MED]), D, r->step_over[q],
            est_note(n[2], sizeof n[2], &e[DEV_STEP]), D, r->ar_busy[q], r->ar_between[q], D);
  }
  for (int q = 0; q < DEV_AR_SIZES; q++)
    fprintf(f, "allreduce.%d.async_s = %.4g   # per collective started asynchronously after each of 20 2x2 matmuls, "
               "read after the last: the chain's median time with them less without (the worker's time each)\n",
            dev_ar_devices[q], r->ar_async[q]);
  for (int q = 0; q < DEV_AR_SIZES; q++)
    fprintf(f, "allreduce.%d.busy_long_s = %.4g   # per collective between kernels of more compute (20 matmuls of "
               "512^3), less none: the median of 3 pairs\nallreduce.%d.busy_long_after_s = %.4g   # that chain's "
               "time per collective without them (its compute per collective with %d devices)\n",
            dev_ar_devices[q], r->ar_long[q], dev_ar_devices[q], r->ar_long_after[q], dev_ar_devices[q]);
  for (int q = 0; q < DEV_AR_SIZES; q++)
    fprintf(f, "op_overhead.%d_s = %.4g   # per kernel with %d devices in this process: a chain of 200 2x2 matmuls "
               "on each; %s\n", dev_ar_devices[q], r->op_over[q], dev_ar_devices[q],
            est_note(n[0], sizeof n[0], &r->e_dev[q][DEV_OVER]));
  for (int q = 0; q < DEV_AR_SIZES; q++)
    if (r->shared_eff[q] > 0)
      fprintf(f, "shared_efficiency.%d = %.3g   # %d devices each running the 20 matmuls: speed / (1 thread's x "
                 "their share of the cores), the work alone of each (1 thread: %s; %d devices: %s)\n",
              dev_ar_devices[q], r->shared_eff[q], dev_ar_devices[q], est_note(n[0], sizeof n[0], &r->e_chain1),
              dev_ar_devices[q], est_note(n[1], sizeof n[1], &r->e_dev[q][DEV_CHAIN]));
}

/* Writes r to path (directories created). */
static int write_calibration(const char *cmd, const char *path, const cal_result *r) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *s = dir + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(dir, 0755);
      *s = '/';
    }
  FILE *f = fopen(path, "w");
  if (!f) {
    cli_error(cmd, "--calibrate %s: cannot write it: %s", path, strerror(errno));
    return -1;
  }
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  double load = 0;
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf", &load) != 1) load = 0;
    fclose(la);
  }
  fprintf(f, "# tessel calibration: `tessel plan --calibrate` on this machine (devices/README.md).\n"
             "# Kernel throughput of one core (1 thread; per class the least CPU time of the runs of\n"
             "# interleaved rounds), the per-kernel overhead, in-process all-reduce alpha/beta (16 MiB per\n"
             "# device); load average %.2f when measured%s.\n"
             "# Every time is measured in rounds, rounds added until two agree within %.0f%% (at most %d):\n"
             "# the least confirmed round; spread: its gap to the confirming one; range: (max - min) / min.\n"
             "name = CPU virtual devices (calibrated: %s)\n"
             "calibration.cpu = %s\n"
             "calibration.threads = %d\n"
             "cores = %ld\n"
             "flops_per_s.f32 = %.4g\n"
             "flops_per_s.bf16 = %.4g\n"
             "memory_bytes_per_s = %.4g\n"
             "memory_bytes = %.4g\n",
          load, load > 0.5 * (double)r->cores ? " (a loaded machine: rerun when quiet)" : "", 100 * CAL_AGREE,
          CAL_ROUNDS_MAX, r->cpu, r->cpu, r->threads, r->cores, r->rate[TS_KERNEL_MATMUL], r->rate[TS_KERNEL_MATMUL],
          r->rate[TS_KERNEL_ELEMENTWISE], (double)pages * (double)psz);
  write_kernels(f, r);
  write_devices(f, r);
  fprintf(f, "host_link_bytes_per_s = %.4g\nhost_link_latency_s = %.4g\n"
             "net_link_bytes_per_s = 1.25e9   # not measured: 10 Gb/s Ethernet\n"
             "net_link_latency_s = 2e-5   # not measured\n"
             "devices_per_host = 4096   # virtual devices: every one in this process\n",
          r->arb[0], r->arl[0]);
  return fclose(f) == 0 ? 0 : -1;
}

/* Prints the calibration's rounds: the largest spreads and every unconfirmed
 * estimate (stderr: a key a loaded machine may have moved). */
static void report_spread(const cal_result *r) {
  const cal_est *all[2 * TS_KERNEL_CLASSES + 8 + 6 * DEV_AR_SIZES];
  char name[2 * TS_KERNEL_CLASSES + 8 + 6 * DEV_AR_SIZES][64];
  int n = 0;
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) {
    snprintf(name[n], sizeof name[n], "%s", dev_kernel_keys[k]), all[n++] = &r->cls[k];
    if (r->threads > 1) snprintf(name[n], sizeof name[n], "parallel_efficiency.%s", dev_kernel_keys[k] + 7), all[n++] = &r->cls_t[k];
  }
  snprintf(name[n], sizeof name[n], "op_overhead_s"), all[n++] = &r->e_overhead;
  snprintf(name[n], sizeof name[n], "step_overhead.1_s"), all[n++] = &r->e_step1;
  snprintf(name[n], sizeof name[n], "shared_efficiency (1 thread)"), all[n++] = &r->e_chain1;
  if (r->threads > 1) {
    snprintf(name[n], sizeof name[n], "step_overhead.1_s (%d threads)", r->threads), all[n++] = &r->e_step_t;
    snprintf(name[n], sizeof name[n], "op_overhead.parallel_s (n)"), all[n++] = &r->e_par[0];
    snprintf(name[n], sizeof name[n], "op_overhead.parallel_s (2n)"), all[n++] = &r->e_par[1];
  }
  static const char *const dev_what[6] = {"step_overhead.%d_s", "allreduce.%d (least)", "allreduce.%d.latency_s",
                                          "allreduce.%d.bytes_per_s", "op_overhead.%d_s", "shared_efficiency.%d"};
  for (int q = 0; q < DEV_AR_SIZES; q++)
    for (int i = 0; i < 6; i++) snprintf(name[n], sizeof name[n], dev_what[i], dev_ar_devices[q]), all[n++] = &r->e_dev[q][i];
  int worst = 0, unconfirmed = 0, rounds = 0;
  for (int i = 0; i < n; i++) {
    worst = all[i]->spread > all[worst]->spread ? i : worst;
    rounds += all[i]->tried;
    if (!all[i]->confirmed) {
      unconfirmed++;
      fprintf(stderr, "tessel plan --calibrate: %s unconfirmed after %d rounds (%d with a value; no two within %.0f%%; "
                      "range %.0f%%): a loaded machine, rerun when quiet\n", name[i], all[i]->tried, all[i]->rounds,
              100 * CAL_AGREE, 100 * all[i]->range);
    }
  }
  printf("rounds: %d estimates, %d rounds, %d confirmed within %.0f%%, %d unconfirmed; largest spread %.0f%% (%s)\n", n,
         rounds, n - unconfirmed, 100 * CAL_AGREE, unconfirmed, 100 * all[worst]->spread, name[worst]);
}

int calibrate(const char *cmd, const char *path, int rounds) {
  if (rounds < 1 || rounds > CAL_MAX_ROUNDS) {
    cli_error(cmd, "--rounds %d: not 1..%d", rounds, CAL_MAX_ROUNDS);
    return -1;
  }
  /* launched by mpirun with several processes: their links alone (calprocs.c) */
  if (env_mpi_wanted()) {
    ts_client *c = ts_client_new(&(ts_client_options){.num_devices = 1});
    if (!c) {
      cli_error(cmd, "--calibrate: %s", ts_last_error());
      return -1;
    }
    int rc = ts_client_process_count(c) > 1 ? calibrate_procs(c, cmd, path) : 1;
    ts_client_free(c);
    if (rc <= 0) return rc;
  }
  double t0 = util_now_s();
  cal_result *r = calloc(1, sizeof *r);
  if (!r) return -1;
  r->rounds = rounds;
  calibration_key(r->cpu, sizeof r->cpu, &r->threads);
  r->cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (measure_one_thread(r) < 0 || (r->threads > 1 && measure_threads(r) < 0)) goto fail;
  if (r->threads <= 1) r->eff = 1;
  for (int q = 0; q < DEV_AR_SIZES; q++)
    if (measure_devices(r, q) < 0) goto fail;
  if (write_calibration(cmd, path, r) < 0) {
    free(r);
    return -1;
  }
  printf("calibrated in %.1f s (%s, %d threads): matmul %.3g FLOP/s, conv %.3g FLOP/s, elementwise %.3g B/s, "
         "overhead %.3g s, all-reduce (2 devices) %.3g s + %.3g B/s -> %s\n",
         util_now_s() - t0, r->cpu, r->threads, r->rate[TS_KERNEL_MATMUL], r->rate[TS_KERNEL_CONV],
         r->rate[TS_KERNEL_ELEMENTWISE], r->overhead, r->arl[0], r->arb[0], path);
  int worst = 0;
  for (int k = 1; k < TS_KERNEL_CLASSES; k++) worst = r->cls[k].spread > r->cls[worst].spread ? k : worst;
  printf("kernel classes over %d+ rounds (1 thread): largest spread %.0f%% (%s), matmul %.0f%%, elementwise %.0f%%\n",
         rounds, 100 * r->cls[worst].spread, dev_kernel_keys[worst], 100 * r->cls[TS_KERNEL_MATMUL].spread,
         100 * r->cls[TS_KERNEL_ELEMENTWISE].spread);
  report_spread(r);
  free(r);
  return 0;
fail:
  free(r);
  cli_error(cmd, "--calibrate: a measurement failed: %s", ts_last_error());
  return -1;
}
