/* calibrate.c — `tessel plan --calibrate`: the measurement of this machine
 * that writes a calibration file (devfile.h's calibrate; the keys are
 * documented in devices/README.md, devfile.c reads them). Split out of
 * devfile.c (issue 16: it had grown to 825 lines). */
#include "devfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "calrun.h"  /* cal_run, cal_least: a probe's work time from its runs */
#include "util/clock.h"  /* util_now_s */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The least (median: the median) time of at least `reps` runs and `window`
 * seconds of g (inputs zero-filled, i32 inputs too) on client c; *med_out
 * (when not NULL): the median of the same runs. work_threads > 0 (c's
 * threads): instead the time of the work alone from the runs' wall and CPU
 * times (calrun.h's cal_least: a loaded machine's waits for a core left out). */
static double time_graph_runs(ts_client *c, ts_graph *g, bool replicas, int reps, bool median, double window,
                              double *med_out, int work_threads) {
  ts_executable *e = ts_compile(c, g, &(ts_compile_options){.replicas = replicas});
  if (!e) return -1;
  int n_in = ts_graph_num_inputs(g);
  ts_buffer *in[8] = {0}, *out[8] = {0};
  double best = -1;
  for (int i = 0; i < n_in && i < 8; i++) {
    ts_tensor t = ts_graph_input(g, i);
    int r = ts_tensor_rank(g, t);
    const int64_t *sh = ts_tensor_shape(g, t);
    /* zero-filled (ts_buffer_new's contract): no host copy to write (the
     * memory-bound classes' 24 MiB inputs cost a calloc and a copy each) */
    if (!(in[i] = ts_buffer_new(c, ts_tensor_dtype(g, t), r, sh))) goto done;
  }
  /* the warm-up run allocates the outputs; the others write into them; the
   * least of at least `reps` runs and `window` s (a shared machine's quiet moments) */
  double t_end = util_now_s() + window, times[400];
  cal_run runs[400];
  int n = 0;
  for (int k = 0; k < reps + 1 || (util_now_s() < t_end && k < 400); k++) {
    double c0 = cal_cpu_now(), t0 = util_now_s();
    if (ts_execute(e, in, out) < 0) goto done;
    double t = util_now_s() - t0;
    if (k >= 1 && n < 400) runs[n] = (cal_run){t, cal_cpu_now() - c0}, times[n++] = t;
    if (k >= 1 && (best < 0 || t < best)) best = t;
  }
  if (work_threads > 0) best = cal_least(runs, n, work_threads, NULL);
  if (n > 0 && (median || med_out)) {
    qsort(times, (size_t)n, sizeof *times, cmp_double);
    if (med_out) *med_out = times[n / 2];
    if (median) best = times[n / 2];
  }
done:
  for (int o = 0; o < 8; o++) { /* an aliased output's slot is its input's buffer */
    bool alias = false;
    for (int i = 0; i < 8 && out[o]; i++) alias |= out[o] == in[i];
    if (!alias) ts_buffer_free(out[o]);
  }
  for (int i = 0; i < 8; i++) ts_buffer_free(in[i]);
  ts_executable_free(e);
  return best;
}

static double time_graph_window(ts_client *c, ts_graph *g, bool replicas, int reps, bool median, double window) {
  return time_graph_runs(c, g, replicas, reps, median, window, NULL, 0);
}

static double time_graph_stat(ts_client *c, ts_graph *g, bool replicas, int reps, bool median) {
  return time_graph_window(c, g, replicas, reps, median, 0.15);
}

static double time_graph(ts_client *c, ts_graph *g, bool replicas, int reps) {
  return time_graph_stat(c, g, replicas, reps, false);
}

static ts_tensor in_f32(ts_graph *g, const char *name, int rank, const int64_t *shape) {
  return ts_input(g, name, TS_F32, rank, shape);
}

/* Seconds a kernel class is timed for, over all of calibrate's rounds. */
#define CAL_CLASS_WINDOW_S 0.3

/* Seconds of one kernel class's graph (1 device, c of `threads` threads) in
 * one of `rounds` rounds: the work alone (calrun.h) of the runs over
 * CAL_CLASS_WINDOW_S / rounds (and at least the class's repetitions /
 * rounds); *units its work. The memory-bound classes (elementwise, reduce,
 * optimizer, broadcast, pool, broadcast_rows, transcendental) run on 48-144
 * MiB, well beyond the 32 MiB L3 cache: at 8-40 MiB (the L3's size) the
 * share of their bytes still in the cache, and so the rate, moved with what
 * the other processes on the machine did (elementwise 1.85e10 and 3.59e10 B/s
 * in two calibrations of one invocation, 115% between one's rounds). Not
 * powers of two: the elementwise graph on (4096,2048) took 76-80 ms of CPU
 * per run in the calibration against 7 ms on (3072,2048) (unexplained; the
 * same graph alone in a program took 9-17 ms). */
static double measure_class(ts_client *c, int threads, int cls, int rounds, double *units) {
  ts_graph *g = ts_graph_new();
  if (!g) return -1;
  ts_params *pp = NULL;
  double t = -1;
  int reps = 5;
  switch (cls) {
  case TS_KERNEL_MATMUL_SMALL:
  case TS_KERNEL_MATMUL: {
    /* a layer's three products as training runs them: y = a b, da = dy b^T, db = a^T dy;
     * the large one at a real layer's size, out of cache (a GPT MLP: 2048 tokens, 256 -> 1024) */
    bool big = cls == TS_KERNEL_MATMUL;
    int64_t n = big ? 256 : 96, sa[2] = {big ? 2048 : n, n}, sb[2] = {n, big ? 1024 : n}, sy[2] = {sa[0], sb[1]};
    ts_tensor a = in_f32(g, "a", 2, sa), b = in_f32(g, "b", 2, sb), dy = in_f32(g, "dy", 2, sy);
    ts_tensor y = ts_matmul(g, a, b), wrt[2] = {a, b}, gr[2] = {TS_NONE, TS_NONE};
    if (ts_vjp(g, 1, &y, &dy, 2, wrt, gr) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gr[0]), ts_graph_add_output(g, gr[1]);
    *units = 6.0 * (double)(sa[0] * n * sb[1]);
    reps = big ? 3 : 30;
    break;
  }
  case TS_KERNEL_CONV:
  case TS_KERNEL_CONV_BWD_DATA:
  case TS_KERNEL_CONV_BWD_FILTER: { /* a ResNet-20 stage-1 conv: (64,16,32,32) * (16,16,3,3), pad 1 (out of cache) */
    int64_t xs[4] = {64, 16, 32, 32}, ws[4] = {16, 16, 3, 3};
    ts_tensor x = in_f32(g, "x", 4, xs), w = in_f32(g, "w", 4, ws), dy = in_f32(g, "dy", 4, xs);
    ts_conv_params p = {.pad_lo = {1, 1}, .pad_hi = {1, 1}};
    ts_tensor y = ts_conv2d(g, x, w, &p);
    *units = 2.0 * 64 * 16 * 32 * 32 * 16 * 9;
    if (cls == TS_KERNEL_CONV) {
      ts_graph_add_output(g, y);
    } else {
      ts_tensor wrt = cls == TS_KERNEL_CONV_BWD_DATA ? x : w, grad = TS_NONE;
      if (ts_vjp(g, 1, &y, &dy, 1, &wrt, &grad) < 0) break;
      ts_graph_add_output(g, grad);
    }
    break;
  }
  case TS_KERNEL_ELEMENTWISE: { /* a residual add + ReLU and its gradient: compare, select (24 MiB tensors) */
    int64_t sh[2] = {3072, 2048};
    ts_tensor x = in_f32(g, "x", 2, sh), r = in_f32(g, "r", 2, sh), dy = in_f32(g, "dy", 2, sh);
    ts_tensor y = ts_relu(g, ts_add(g, x, r)), gx = TS_NONE;
    if (ts_vjp(g, 1, &y, &dy, 1, &x, &gx) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gx);
    *units = 5.0 * 4 * (double)(sh[0] * sh[1]);
    break;
  }
  case TS_KERNEL_BROADCAST: { /* a conv layer's bias add and ReLU: (96,64,32,32) + bias (64) */
    int64_t sh[4] = {96, 64, 32, 32}, bn = 64;
    int dim = 1;
    ts_tensor x = in_f32(g, "x", 4, sh), b = in_f32(g, "b", 1, &bn);
    ts_graph_add_output(g, ts_relu(g, ts_add(g, x, ts_broadcast_in_dim(g, b, 4, sh, &dim))));
    *units = 2.0 * 4 * (double)(96 * 64 * 32 * 32);
    break;
  }
  case TS_KERNEL_POOL: { /* 2x2 max pooling of (192,32,32,32) and its gradient */
    int64_t sh[4] = {192, 32, 32, 32}, ys[4] = {192, 32, 16, 16};
    ts_tensor x = in_f32(g, "x", 4, sh), dy = in_f32(g, "dy", 4, ys), gx = TS_NONE;
    ts_tensor y = ts_max_pool2d(g, x, &(ts_pool_params){.kernel = {2, 2}});
    if (ts_vjp(g, 1, &y, &dy, 1, &x, &gx) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gx);
    *units = 4.0 * (2 * 192 * 32 * 32 * 32 + 2 * 192 * 32 * 16 * 16);
    break;
  }
  case TS_KERNEL_ATTENTION: { /* a GPT layer's attention (batch 16, 4 heads, seq 128, head 64) and gradient */
    /* on the packed projection (B, T, 3, H, Dh), as the GPT runs it: the fused kernels alone */
    int64_t sh[5] = {16, 128, 3, 4, 64}, ys[4] = {16, 128, 4, 64};
    ts_tensor qkv = in_f32(g, "qkv", 5, sh), dy = in_f32(g, "dy", 4, ys), gr = TS_NONE;
    ts_tensor y = ts_causal_attention_qkv(g, qkv, 0.125);
    if (ts_vjp(g, 1, &y, &dy, 1, &qkv, &gr) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gr);
    *units = 7.0 * 16 * 4 * 128 * 128 * 64;
    break;
  }
  case TS_KERNEL_BROADCAST_ROWS: { /* a linear layer's bias: (6144,1024) + bias (1024) along the last dim */
    int64_t sh[2] = {6144, 1024}, bn = 1024;
    int dim = 1;
    ts_tensor x = in_f32(g, "x", 2, sh), b = in_f32(g, "b", 1, &bn);
    ts_graph_add_output(g, ts_add(g, x, ts_broadcast_in_dim(g, b, 2, sh, &dim)));
    *units = 2.0 * 4 * (double)(6144 * 1024);
    break;
  }
  case TS_KERNEL_TRANSCENDENTAL: { /* a GPT MLP's GELU (erf) of (3072,2048) and its gradient */
    int64_t sh[2] = {3072, 2048};
    ts_tensor x = in_f32(g, "x", 2, sh), dy = in_f32(g, "dy", 2, sh), gx = TS_NONE;
    ts_tensor y = ts_gelu(g, x);
    if (ts_vjp(g, 1, &y, &dy, 1, &x, &gx) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gx);
    *units = 5.0 * 4 * (double)(sh[0] * sh[1]);
    break;
  }
  case TS_KERNEL_REDUCE: { /* training's two kinds on (6144,2048): a row sum (norms, softmax) and a
                            * column sum (a bias gradient) */
    int64_t sh[2] = {6144, 2048};
    int d1 = 1, d0 = 0;
    ts_tensor a = in_f32(g, "a", 2, sh);
    ts_graph_add_output(g, ts_reduce(g, a, TS_REDUCE_SUM, 1, &d1, false));
    ts_graph_add_output(g, ts_reduce(g, a, TS_REDUCE_SUM, 1, &d0, false));
    *units = 4.0 * (2 * 6144 * 2048 + 6144 + 2048);
    break;
  }
  case TS_KERNEL_GATHER: { /* GPT-like embedding rows */
    int64_t ts[2] = {4096, 256}, is = 8192;
    ts_graph_add_output(g, ts_gather(g, in_f32(g, "table", 2, ts), ts_input(g, "ix", TS_I32, 1, &is)));
    *units = 4.0 * (4096 * 256 + 8192 + 8192 * 256);
    break;
  }
  case TS_KERNEL_OPTIMIZER: { /* the library's AdamW update of a 1536x2048 weight (ts_optim_apply) */
    int64_t sh[2] = {1536, 2048};
    pp = ts_params_new(1);
    ts_tensor w = pp ? ts_params_use(pp, g, "w", TS_F32, 2, sh, (ts_init){0}, true) : TS_NONE, gr = in_f32(g, "g", 2, sh);
    ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
    ts_nn m;
    ts_nn_init(&m, g, pp, true, TS_NONE);
    if (w == TS_NONE ||
        ts_optim_apply(&m, &(ts_optim_config){.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}, lr, step, 1, &w, &gr) < 0)
      break;
    *units = 7.0 * 4 * (double)(sh[0] * sh[1]);
    break;
  }
  }
  if (ts_graph_num_outputs(g) > 0)
    t = time_graph_runs(c, g, false, (reps + rounds - 1) / rounds, false, CAL_CLASS_WINDOW_S / rounds, NULL, threads);
  /* the work in the cost model's own units: its prediction of the compiled
   * program with every rate 1 and no overhead (fusion as compiled) */
  int64_t one = 1;
  ts_mesh *m1 = ts_mesh_new(1, &one, NULL, 0, NULL);
  ts_auto_shard_options o = {.mesh = m1, .flops_per_s = 1, .bytes_per_s = 1};
  ts_auto_shard_info info;
  if (t > 0 && m1 && ts_predict_program(g, &o, NULL, &info) == 0 && info.compute_s > 0) *units = info.compute_s;
  ts_mesh_free(m1);
  ts_graph_free(g);
  ts_params_free(pp);
  return t;
}

/* A step's fixed cost: one 1-element add run on every device of c. This and
 * the fork-and-join below are medians, as the collective wait is: they wake
 * threads, and on a machine busy with other work a typical wake-up waits for a
 * core (measured at load average 15 on 2 cores: the fork and join 4.8 us at
 * best, 11 ms median); the kernels' throughputs stay the least times (the work
 * alone). */
static double trivial_step(ts_client *c, bool replicas) {
  ts_graph *g = ts_graph_new();
  if (!g) return -1;
  int64_t one = 1;
  ts_tensor x = in_f32(g, "x", 1, &one);
  ts_graph_add_output(g, ts_add(g, x, x));
  double t = time_graph_stat(c, g, replicas, 20, true);
  ts_graph_free(g);
  return t;
}

/* A kernel's fixed cost on every thread of c: chains of 200 adds of n and 2n
 * elements (n: the size above which kernels fork, in cache; a reshape between
 * two adds keeps them apart, unfused), t(n) = o + n w: o = 2 t(n) - t(2n). */
static double measure_par_overhead(ts_client *c) {
  double t[2] = {-1, -1};
  for (int k = 0; k < 2; k++) {
    ts_graph *g = ts_graph_new();
    if (!g) return -1;
    int64_t a[2] = {128, 256 << k}, b[2] = {256 << k, 128};
    ts_tensor x = in_f32(g, "x", 2, a), wa = in_f32(g, "wa", 2, a), wb = in_f32(g, "wb", 2, b);
    for (int i = 0; i < 200; i++) x = i % 2 ? ts_add(g, ts_reshape(g, x, 2, a), wa) : ts_add(g, ts_reshape(g, x, 2, b), wb);
    ts_graph_add_output(g, x);
    t[k] = time_graph_stat(c, g, false, 10, true) / 200;
    ts_graph_free(g);
  }
  return t[0] > 0 && t[1] > 0 ? 2 * t[0] - t[1] : -1;
}

/* The matmul chain's collectives: none, blocking (the next matmul reads
 * each), asynchronous (read only after the last matmul). */
enum { CHAIN_NONE, CHAIN_BLOCKING, CHAIN_ASYNC, CHAIN_TINY };

/* 20 matmuls (256^3; CHAIN_TINY, CHAIN_ASYNC: 2^3), each followed by (mode
 * CHAIN_BLOCKING, CHAIN_ASYNC: a 1-element all-reduce of) one element of its
 * result; CHAIN_ASYNC, CHAIN_TINY: the 20 summed after the last matmul (no
 * matmul waits for one: the compiler starts them on the collective worker,
 * which runs them one after another while the kernels take microseconds),
 * else the next matmul reads it. */
static ts_graph *matmul_chain(int mode) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  bool tiny = mode == CHAIN_ASYNC || mode == CHAIN_TINY; /* also: the sums read after the last matmul */
  int64_t n = tiny ? 2 : 256;
  int64_t sh[2] = {n, n}, lo[2] = {0, 0}, hi[2] = {1, 1}, st[2] = {1, 1};
  int dims[2] = {0, 1};
  ts_tensor x = in_f32(g, "x", 2, sh), w = in_f32(g, "w", 2, sh), late[20];
  for (int i = 0; i < 20; i++) {
    x = ts_matmul(g, x, w);
    ts_tensor s = ts_slice(g, x, lo, hi, st);
    if (mode == CHAIN_BLOCKING || mode == CHAIN_ASYNC) s = ts_replica_all_reduce(g, s, TS_REDUCE_SUM);
    if (tiny) late[i] = s;
    else x = ts_add(g, x, ts_broadcast_in_dim(g, s, 2, sh, dims));
  }
  for (int i = 0; tiny && i < 20; i++) x = ts_add(g, x, ts_broadcast_in_dim(g, late[i], 2, sh, dims));
  ts_graph_add_output(g, x);
  return g;
}

/* The median time of the chain without collectives on every device of c. */
static double chain_median(ts_client *c) {
  ts_graph *g = matmul_chain(CHAIN_NONE);
  double t = g ? time_graph_stat(c, g, true, 10, true) : -1;
  ts_graph_free(g);
  return t;
}

/* A blocking collective between kernels, on every device of c: the matmul
 * chain with its all-reduces against the chain without them, seconds per
 * collective. A collective waits for the last device to arrive; back to back
 * (allreduce.N.latency_s) every device is already there, between kernels one
 * may still be computing or not be scheduled (more devices than cores).
 * Medians, not the least times: the wait is what a typical step sees (a lucky
 * run's schedule hides it), as the measured steps are medians. *compute: the
 * chain's median time without the collectives. mode CHAIN_ASYNC: the tiny
 * chain with its collectives started asynchronously against without, the
 * worker's time per collective when it is what the step waits for (devices
 * sharing the cores: every device's worker must be scheduled for each). */
static double measure_busy_collective(ts_client *c, int mode, double *compute) {
  ts_graph *g[2] = {matmul_chain(mode == CHAIN_ASYNC ? CHAIN_TINY : CHAIN_NONE), matmul_chain(mode)};
  double d[3] = {-1, -1, -1}, t[3] = {-1, -1, -1};
  /* without, with, alternated 3 times (a shared machine's load drifts): the median difference */
  for (int r = 0; r < 3 && g[0] && g[1]; r++) {
    double t0 = time_graph_stat(c, g[0], true, 10, true), t1 = time_graph_stat(c, g[1], true, 10, true);
    if (t0 <= 0 || t1 <= 0) break;
    d[r] = (t1 - t0) / 20, t[r] = t0;
  }
  ts_graph_free(g[0]), ts_graph_free(g[1]);
  if (t[0] < 0 || t[1] < 0 || t[2] < 0) return -1;
  qsort(d, 3, sizeof *d, cmp_double);
  qsort(t, 3, sizeof *t, cmp_double);
  *compute = t[1];
  return fmax(d[1], 0);
}

/* Seconds per result element per broadcast operand beyond the first of a
 * fused kernel (kernel.broadcast.operand_s), on client c (1 thread): a batch
 * norm and ReLU, relu((x - m) r g + b) with m, r, g, b per channel (4
 * broadcast operands, their arithmetic with them), against a bias add and
 * ReLU, relu(x + b), of the same (128,16,28,28) (a ResNet-20 layer's) and
 * bytes; each the least of `rounds` interleaved windows. The broadcast rate
 * alone priced the batch norm's kernels ~3x too fast (runs of 64..1024
 * elements cost the bias add within 12%: the operands, not the runs). */
static double measure_bcast_operands(ts_client *c, int rounds) {
  int64_t sh[4] = {128, 16, 28, 28}, C = 16;
  int dim = 1;
  ts_graph *g[2] = {ts_graph_new(), ts_graph_new()};
  double best[2] = {-1, -1};
  for (int k = 0; k < 2 && g[0] && g[1]; k++) {
    ts_tensor x = in_f32(g[k], "x", 4, sh), v[4];
    const char *nm[4] = {"m", "r", "g", "b"};
    for (int j = 0; j < 4; j++) v[j] = ts_broadcast_in_dim(g[k], in_f32(g[k], nm[j], 1, &C), 4, sh, &dim);
    ts_tensor y = k == 0 ? x : ts_mul(g[k], ts_mul(g[k], ts_sub(g[k], x, v[0]), v[1]), v[2]); /* the bias add's x */
    y = ts_add(g[k], y, v[3]);
    ts_graph_add_output(g[k], ts_relu(g[k], y));
  }
  for (int r = 0; r < rounds && g[0] && g[1]; r++)
    for (int k = 0; k < 2; k++) {
      double t = time_graph_runs(c, g[k], false, 3, false, CAL_CLASS_WINDOW_S / rounds, NULL, 1);
      if (t > 0 && (best[k] < 0 || t < best[k])) best[k] = t;
    }
  ts_graph_free(g[0]), ts_graph_free(g[1]);
  if (best[0] <= 0 || best[1] <= 0) return -1;
  return fmax(1e-13, (best[1] - best[0]) / (3.0 * 128 * 16 * 28 * 28)); /* a file's numbers are > 0 */
}

/* Every kernel class on client c in `rounds` rounds, each round timing every
 * class once (a shared machine's load drifts over seconds: interleaved, every
 * class gets runs in each quieter spell): per class the least of its rounds'
 * times (t: the work alone, as one longer window's least time), its work
 * (units) and the spread of the rounds, (max - min) / min. The least, not
 * the median: at load average 11-15 on 2 cores, over 3 invocations each
 * interleaved with the single 0.15 s window's, a class's rate moved 1.76x
 * (max / min, median over the classes) with the median of 3 rounds against
 * the single window's 1.20x, and 1.10x with the least against its 1.32x. */
static int measure_classes(ts_client *c, int threads, int rounds, double *t, double *units, double *spread) {
  double r[CAL_MAX_ROUNDS][TS_KERNEL_CLASSES];
  for (int q = 0; q < rounds; q++)
    for (int k = 0; k < TS_KERNEL_CLASSES; k++)
      if ((r[q][k] = measure_class(c, threads, k, rounds, &units[k])) <= 0) return -1;
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) {
    double v[CAL_MAX_ROUNDS];
    for (int q = 0; q < rounds; q++) v[q] = r[q][k];
    qsort(v, (size_t)rounds, sizeof *v, cmp_double);
    t[k] = v[0];
    spread[k] = (v[rounds - 1] - v[0]) / t[k];
  }
  return 0;
}

/* Per-kernel overhead: a chain of 200 tiny matmuls. */
/* Seconds per kernel of a chain of 200 2x2 matmuls (replicas: on every device of c at once). */
static double measure_overhead(ts_client *c, bool replicas) {
  ts_graph *g = ts_graph_new();
  if (!g) return -1;
  int64_t sh[2] = {2, 2};
  ts_tensor x = in_f32(g, "x", 2, sh), w = in_f32(g, "w", 2, sh);
  for (int k = 0; k < 200; k++) x = ts_matmul(g, x, w);
  ts_graph_add_output(g, x);
  double t = time_graph(c, g, replicas, 20);
  ts_graph_free(g);
  return t / 200;
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

int calibrate(const char *cmd, const char *path, int rounds) {
  if (rounds < 1 || rounds > CAL_MAX_ROUNDS) {
    cli_error(cmd, "--rounds %d: not 1..%d", rounds, CAL_MAX_ROUNDS);
    return -1;
  }
  double t0 = util_now_s();
  char cpu[128];
  int threads;
  calibration_key(cpu, sizeof cpu, &threads);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double rate[TS_KERNEL_CLASSES] = {0}, overhead = -1, eff = 1, par_over = 0;
  double arb[DEV_AR_SIZES] = {0}, arl[DEV_AR_SIZES] = {0}, step_over[DEV_AR_SIZES] = {0}, step1 = -1;
  double ar_async[DEV_AR_SIZES] = {0}, ar_step[DEV_AR_SIZES] = {0}, ar_between[DEV_AR_SIZES] = {0};
  double ar_busy[DEV_AR_SIZES] = {0}, shared_eff[DEV_AR_SIZES] = {0}, op_over[DEV_AR_SIZES] = {0};
  ts_client *c1 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  if (!c1) goto fail;
  double tk[TS_KERNEL_CLASSES], uk[TS_KERNEL_CLASSES], sk[TS_KERNEL_CLASSES], st[TS_KERNEL_CLASSES] = {0};
  if (measure_classes(c1, 1, rounds, tk, uk, sk) < 0) goto fail;
  overhead = measure_overhead(c1, false);
  double bcast_op = measure_bcast_operands(c1, rounds);
  step1 = trivial_step(c1, false);
  double chain1 = chain_median(c1); /* the reference of shared_efficiency.N */
  ts_client_free(c1);
  c1 = NULL;
  if (overhead <= 0 || step1 <= 0 || chain1 <= 0 || bcast_op <= 0) goto fail;
  /* each time above includes one kernel's overhead: the rate is of the work alone */
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) rate[k] = uk[k] / (tk[k] > 2 * overhead ? tk[k] - overhead : tk[k] / 2);
  double ceff[TS_KERNEL_CLASSES] = {0};
  if (threads > 1) { /* each class's parallel efficiency on every thread (one device): kernels
                      * do not all split as well as a large matmul */
    ts_client *ct = ts_client_new(&(ts_client_options){.num_threads = threads, .num_devices = 1});
    /* a step and a kernel on every thread: waking the device's threads, fork and join */
    double s = ct ? trivial_step(ct, false) : -1, po = ct ? measure_par_overhead(ct) : -1;
    if (s > step1) step1 = s;
    par_over = fmax(po, overhead);
    double tt[TS_KERNEL_CLASSES], ut[TS_KERNEL_CLASSES];
    int mc = ct ? measure_classes(ct, threads, rounds, tt, ut, st) : -1;
    ts_client_free(ct);
    if (mc < 0) goto fail;
    for (int k = 0; k < TS_KERNEL_CLASSES; k++) ceff[k] = fmin(1, fmax(0.05, tk[k] / tt[k] / threads));
    eff = ceff[TS_KERNEL_MATMUL];
  }
  /* in-process all-reduce on D devices: 1 element (latency) and 4 Mi f32 (bandwidth: 16 MiB
   * per device, out of cache as a step's gradients are; 4 MiB ran in the L3 cache, 3-8x
   * the bandwidth a step sees, which made every resharding look cheap to the solver);
   * the ring model: t = 2 log2(D) alpha + 2 B (D-1)/D / beta */
  for (int q = 0; q < DEV_AR_SIZES; q++) {
    int D = dev_ar_devices[q];
    ts_client *c = ts_client_new(&(ts_client_options){.num_threads = threads, .num_devices = D});
    double ts = -1, tb = -1, ts_med = -1;
    if (c && (step_over[q] = trivial_step(c, true)) <= 0) goto fail;
    const int64_t big = 4 << 20;
    for (int k = 0; k < 2 && c; k++) {
      int64_t len = k == 0 ? 1 : big;
      ts_graph *g = ts_graph_new();
      if (!g) break;
      ts_graph_add_output(g, ts_replica_all_reduce(g, ts_input(g, "x", TS_F32, 1, &len), TS_REDUCE_SUM));
      /* 1 element: the least (set against the 16 MiB one's least) and, of the
       * same runs, the median, the statistic of step_overhead.D_s it is set
       * against (the least less a median went below 0 on a loaded machine) */
      *(k == 0 ? &ts : &tb) = time_graph_runs(c, g, true, k == 0 ? 20 : 5, false, 0.15, k == 0 ? &ts_med : NULL, 0);
      ts_graph_free(g);
    }
    double chain = -1, busy = c ? measure_busy_collective(c, CHAIN_BLOCKING, &chain) : -1, chain2;
    ar_async[q] = c ? measure_busy_collective(c, CHAIN_ASYNC, &chain2) : -1;
    op_over[q] = c ? measure_overhead(c, true) : -1;
    ts_client_free(c);
    if (ts <= 0 || ts_med <= 0 || tb <= 0 || busy < 0 || ar_async[q] < 0 || op_over[q] <= 0) goto fail;
    ar_async[q] = fmax(ar_async[q], 1e-9); /* a file's numbers are > 0 */
    /* D devices of at most one core each (device_options' share): the chain's speed
     * against one core's, over that share; 0 (not written) above one core */
    double share = fmin(threads / D > 1 ? threads / D : 1, (double)cores / D);
    shared_eff[q] = share <= 1 ? fmin(1, fmax(0.05, chain1 / (chain * share))) : 0;
    allreduce_terms(D, ts_med, step_over[q], busy, &arl[q], &ar_busy[q]);
    ar_step[q] = ts_med, ar_between[q] = busy;
    arb[q] = 2.0 * (double)big * 4 * (D - 1) / D / fmax(tb - ts, 1e-9);
  }
  /* directories of the path */
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
  double loadavg[1] = {0};
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf", &loadavg[0]) != 1) loadavg[0] = 0;
    fclose(la);
  }
  fprintf(f, "# tessel calibration: `tessel plan --calibrate` on this machine (devices/README.md).\n"
             "# Kernel throughput of one core (1 thread; per class the least CPU time of the runs of\n"
             "# interleaved rounds, and the spread of the rounds' least, (max - min) / min), the per-kernel\n"
             "# overhead, in-process all-reduce alpha/beta (16 MiB per device); load average %.2f when measured%s.\n"
             "name = CPU virtual devices (calibrated: %s)\n"
             "calibration.cpu = %s\n"
             "calibration.threads = %d\n"
             "cores = %ld\n"
             "flops_per_s.f32 = %.4g\n"
             "flops_per_s.bf16 = %.4g\n"
             "memory_bytes_per_s = %.4g\n"
             "memory_bytes = %.4g\n",
          loadavg[0], loadavg[0] > 0.5 * (double)cores ? " (a loaded machine: rerun when quiet)" : "", cpu, cpu,
          threads, cores, rate[TS_KERNEL_MATMUL], rate[TS_KERNEL_MATMUL], rate[TS_KERNEL_ELEMENTWISE],
          (double)pages * (double)psz);
  static const char *const what[TS_KERNEL_CLASSES] = {
      "FLOP/s, 96^3 matmul and its two gradients", "FLOP/s, (2048,256)x(256,1024) matmul and its two gradients", "FLOP/s, 3x3 conv (64,16,32,32)", "FLOP/s, its data gradient",
      "FLOP/s, its filter gradient", "bytes/s, add + ReLU of 3072x2048 and its gradient", "bytes/s, row sum and column sum of 6144x2048",
      "bytes/s, gather of 8192 rows of 4096x256", "bytes/s, AdamW update of a 1536x2048 weight",
      "bytes/s, bias add + ReLU of (96,64,32,32)", "bytes/s, 2x2 max pooling of (192,32,32,32) and its gradient",
      "FLOP/s, causal attention of qkv (16,128,3,4,64) and its gradient", "bytes/s, last-dim bias add of (6144,1024)",
      "bytes/s, GELU (erf) of (3072,2048) and its gradient"};
  for (int k = 0; k < TS_KERNEL_CLASSES; k++)
    fprintf(f, "%s = %.4g   # %s; %d rounds: spread %.0f%%\n", dev_kernel_keys[k], rate[k], what[k], rounds, 100 * sk[k]);
  fprintf(f, "kernel.broadcast.operand_s = %.4g   # per result element per broadcast operand beyond the first: a batch "
             "norm + ReLU of (128,16,28,28) against a bias add + ReLU; %d rounds\n", bcast_op, rounds);
  if (par_over > 0)
    fprintf(f, "op_overhead.parallel_s = %.4g   # per kernel on %d threads: chains of 200 adds of 32768 and 65536 "
               "elements\n", par_over, threads);
  fprintf(f, "op_overhead_s = %.4g   # per kernel: a chain of 200 2x2 matmuls\n"
             "parallel_efficiency = %.3g   # the large matmul + gradients on %d threads / (%d x 1 thread)\n",
          overhead, eff, threads, threads);
  for (int k = 0; k < TS_KERNEL_CLASSES && threads > 1; k++)
    fprintf(f, "parallel_efficiency.%s = %.3g   # %d rounds on %d threads: spread %.0f%%\n", dev_kernel_keys[k] + 7, ceff[k],
            rounds, threads, 100 * st[k]);
  fprintf(f, "step_overhead.1_s = %.4g   # per step: a 1-element add on 1 device (every thread)\n", step1);
  for (int q = 0; q < DEV_AR_SIZES; q++)
    fprintf(f, "allreduce.%d.bytes_per_s = %.4g\nallreduce.%d.latency_s = %.4g   # (a 1-element all-reduce's step, "
               "%.4g s median, less step_overhead.%d_s) / (2 log2 %d)\nstep_overhead.%d_s = %.4g\n"
               "allreduce.%d.busy_s = %.4g   # per collective between kernels (20 matmuls of 256^3): %.4g s, less "
               "back to back (alpha's 2 log2 %d steps)\n",
            dev_ar_devices[q], arb[q], dev_ar_devices[q], arl[q], ar_step[q], dev_ar_devices[q], dev_ar_devices[q], dev_ar_devices[q],
            step_over[q], dev_ar_devices[q], ar_busy[q], ar_between[q], dev_ar_devices[q]);
  for (int q = 0; q < DEV_AR_SIZES; q++)
    fprintf(f, "allreduce.%d.async_s = %.4g   # per collective started asynchronously after each of 20 2x2 matmuls, "
               "read after the last: the chain's median time with them less without (the worker's time each)\n",
            dev_ar_devices[q], ar_async[q]);
  for (int q = 0; q < DEV_AR_SIZES; q++)
    fprintf(f, "op_overhead.%d_s = %.4g   # per kernel with %d devices in this process: a chain of 200 2x2 matmuls "
               "on each\n", dev_ar_devices[q], op_over[q], dev_ar_devices[q]);
  for (int q = 0; q < DEV_AR_SIZES; q++)
    if (shared_eff[q] > 0)
      fprintf(f, "shared_efficiency.%d = %.3g   # %d devices each running the 20 matmuls: speed / (1 thread's x "
                 "their share of the cores)\n", dev_ar_devices[q], shared_eff[q], dev_ar_devices[q]);
  fprintf(f, "host_link_bytes_per_s = %.4g\nhost_link_latency_s = %.4g\n"
             "net_link_bytes_per_s = 1.25e9   # not measured: 10 Gb/s Ethernet\n"
             "net_link_latency_s = 2e-5   # not measured\n"
             "devices_per_host = 4096   # virtual devices: every one in this process\n",
          arb[0], arl[0]);
  fclose(f);
  printf("calibrated in %.1f s (%s, %d threads): matmul %.3g FLOP/s, conv %.3g FLOP/s, elementwise %.3g B/s, "
         "overhead %.3g s, all-reduce (2 devices) %.3g s + %.3g B/s -> %s\n",
         util_now_s() - t0, cpu, threads, rate[TS_KERNEL_MATMUL], rate[TS_KERNEL_CONV], rate[TS_KERNEL_ELEMENTWISE],
         overhead, arl[0], arb[0], path);
  int worst = 0;
  for (int k = 1; k < TS_KERNEL_CLASSES; k++) worst = sk[k] > sk[worst] ? k : worst;
  printf("kernel classes over %d rounds (1 thread): largest spread %.0f%% (%s), matmul %.0f%%, elementwise %.0f%%\n",
         rounds, 100 * sk[worst], dev_kernel_keys[worst], 100 * sk[TS_KERNEL_MATMUL], 100 * sk[TS_KERNEL_ELEMENTWISE]);
  return 0;
fail:
  ts_client_free(c1);
  cli_error(cmd, "--calibrate: a measurement failed: %s", ts_last_error());
  return -1;
}
