/* calkernels.c — the calibration's kernel probes (calkernels.h): one
 * core's rate per kernel class and the terms beside them, each a graph timed
 * in rounds (calprobe.h). Split out of calibrate.c (912 lines), which runs
 * them with the device, collective and process probes and writes the file. */
#include "calkernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calprobe.h" /* cal_graph_time, cal_in_f32 */

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
 * same graph alone in a program took 9-17 ms). cached: the elementwise and
 * optimizer probes on 512 KiB tensors instead, in the cache (measure_cached). */
static double measure_class(ts_client *c, int threads, int cls, int rounds, double *units, double *fallback,
                            bool cached) {
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
    ts_tensor a = cal_in_f32(g, "a", 2, sa), b = cal_in_f32(g, "b", 2, sb), dy = cal_in_f32(g, "dy", 2, sy);
    ts_tensor y = ts_matmul(g, a, b), wrt[2] = {a, b}, gr[2] = {TS_NONE, TS_NONE};
    if (ts_vjp(g, 1, &y, &dy, 2, wrt, gr) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gr[0]), ts_graph_add_output(g, gr[1]);
    *units = 6.0 * (double)(sa[0] * n * sb[1]);
    reps = big ? 3 : 30;
    break;
  }
  case TS_KERNEL_CONV:
  case TS_KERNEL_CONV_BWD_DATA:
  case TS_KERNEL_CONV_BWD_FILTER:
  case TS_KERNEL_CONV_NHWC:
  case TS_KERNEL_CONV_BWD_DATA_NHWC:
  case TS_KERNEL_CONV_BWD_FILTER_NHWC: { /* a ResNet-20 stage-1 conv: (64,16,32,32) * (16,16,3,3), pad 1 (out of
                                         * cache); NCHW (the CNN's: oneDNN reorders to its blocked layout and back
                                         * inside the kernel) or NHWC (the ResNets': none), 1.4-1.6x apart */
    bool nhwc = cls >= TS_KERNEL_CONV_NHWC;
    int kind = nhwc ? cls - TS_KERNEL_CONV_NHWC : cls - TS_KERNEL_CONV; /* 0 forward, 1 data, 2 filter gradient */
    int64_t xs[4] = {64, 16, 32, 32}, ws[4] = {16, 16, 3, 3};
    if (nhwc) xs[1] = 32, xs[3] = 16;
    ts_tensor x = cal_in_f32(g, "x", 4, xs), w = cal_in_f32(g, "w", 4, ws), dy = cal_in_f32(g, "dy", 4, xs);
    ts_conv_params p = {.pad_lo = {1, 1}, .pad_hi = {1, 1}, .layout = nhwc ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW};
    ts_tensor y = ts_conv2d(g, x, w, &p);
    *units = 2.0 * 64 * 16 * 32 * 32 * 16 * 9;
    if (kind == 0) {
      ts_graph_add_output(g, y);
    } else {
      ts_tensor wrt = kind == 1 ? x : w, grad = TS_NONE;
      if (ts_vjp(g, 1, &y, &dy, 1, &wrt, &grad) < 0) break;
      ts_graph_add_output(g, grad);
    }
    break;
  }
  case TS_KERNEL_ELEMENTWISE: { /* a residual add + ReLU and its gradient: compare, select (24 MiB tensors) */
    int64_t sh[2] = {cached ? 256 : 3072, cached ? 512 : 2048}; /* cached: 512 KiB tensors */
    ts_tensor x = cal_in_f32(g, "x", 2, sh), r = cal_in_f32(g, "r", 2, sh), dy = cal_in_f32(g, "dy", 2, sh);
    ts_tensor y = ts_relu(g, ts_add(g, x, r)), gx = TS_NONE;
    if (ts_vjp(g, 1, &y, &dy, 1, &x, &gx) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gx);
    *units = 5.0 * 4 * (double)(sh[0] * sh[1]);
    break;
  }
  case TS_KERNEL_BROADCAST: { /* a conv layer's bias add and ReLU: (96,64,32,32) + bias (64) */
    int64_t sh[4] = {96, 64, 32, 32}, bn = 64;
    int dim = 1;
    ts_tensor x = cal_in_f32(g, "x", 4, sh), b = cal_in_f32(g, "b", 1, &bn);
    ts_graph_add_output(g, ts_relu(g, ts_add(g, x, ts_broadcast_in_dim(g, b, 4, sh, &dim))));
    *units = 2.0 * 4 * (double)(96 * 64 * 32 * 32);
    break;
  }
  case TS_KERNEL_POOL: { /* 2x2 max pooling of (192,32,32,32) and its gradient */
    int64_t sh[4] = {192, 32, 32, 32}, ys[4] = {192, 32, 16, 16};
    ts_tensor x = cal_in_f32(g, "x", 4, sh), dy = cal_in_f32(g, "dy", 4, ys), gx = TS_NONE;
    ts_tensor y = ts_max_pool2d(g, x, &(ts_pool_params){.kernel = {2, 2}});
    if (ts_vjp(g, 1, &y, &dy, 1, &x, &gx) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gx);
    *units = 4.0 * (2 * 192 * 32 * 32 * 32 + 2 * 192 * 32 * 16 * 16);
    break;
  }
  case TS_KERNEL_ATTENTION: { /* a GPT layer's attention (batch 16, 4 heads, seq 128, head 64) and gradient */
    /* on the packed projection (B, T, 3, H, Dh), as the GPT runs it: the fused kernels alone */
    int64_t sh[5] = {16, 128, 3, 4, 64}, ys[4] = {16, 128, 4, 64};
    ts_tensor qkv = cal_in_f32(g, "qkv", 5, sh), dy = cal_in_f32(g, "dy", 4, ys), gr = TS_NONE;
    ts_tensor y = ts_causal_attention_qkv(g, qkv, 0.125);
    if (ts_vjp(g, 1, &y, &dy, 1, &qkv, &gr) < 0) break;
    ts_graph_add_output(g, y), ts_graph_add_output(g, gr);
    *units = 7.0 * 16 * 4 * 128 * 128 * 64;
    break;
  }
  case TS_KERNEL_BROADCAST_ROWS: { /* a linear layer's bias: (6144,1024) + bias (1024) along the last dim */
    int64_t sh[2] = {6144, 1024}, bn = 1024;
    int dim = 1;
    ts_tensor x = cal_in_f32(g, "x", 2, sh), b = cal_in_f32(g, "b", 1, &bn);
    ts_graph_add_output(g, ts_add(g, x, ts_broadcast_in_dim(g, b, 2, sh, &dim)));
    *units = 2.0 * 4 * (double)(6144 * 1024);
    break;
  }
  case TS_KERNEL_TRANSCENDENTAL: { /* a GPT MLP's GELU (erf) of (3072,2048) and its gradient */
    int64_t sh[2] = {3072, 2048};
    ts_tensor x = cal_in_f32(g, "x", 2, sh), dy = cal_in_f32(g, "dy", 2, sh), gx = TS_NONE;
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
    ts_tensor a = cal_in_f32(g, "a", 2, sh);
    ts_graph_add_output(g, ts_reduce(g, a, TS_REDUCE_SUM, 1, &d1, false));
    ts_graph_add_output(g, ts_reduce(g, a, TS_REDUCE_SUM, 1, &d0, false));
    *units = 4.0 * (2 * 6144 * 2048 + 6144 + 2048);
    break;
  }
  case TS_KERNEL_GATHER: { /* GPT-like embedding rows */
    int64_t ts[2] = {4096, 256}, is = 8192;
    ts_graph_add_output(g, ts_gather(g, cal_in_f32(g, "table", 2, ts), ts_input(g, "ix", TS_I32, 1, &is)));
    *units = 4.0 * (4096 * 256 + 8192 + 8192 * 256);
    break;
  }
  case TS_KERNEL_OPTIMIZER: { /* the library's AdamW update of a 1536x2048 weight (ts_optim_apply) */
    int64_t sh[2] = {cached ? 256 : 1536, cached ? 512 : 2048}; /* cached: 256x512 */
    pp = ts_params_new(1);
    ts_tensor w = pp ? ts_params_use(pp, g, "w", TS_F32, 2, sh, (ts_init){0}, true) : TS_NONE, gr = cal_in_f32(g, "g", 2, sh);
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
    t = cal_graph_time(c, g, false, (reps + rounds - 1) / rounds, false, CAL_CLASS_WINDOW_S / rounds, threads, fallback);
  /* the work in the cost model's own units: its prediction of the compiled
   * program with every rate 1 and no overhead (fusion as compiled) */
  int64_t one = 1;
  ts_mesh *m1 = ts_mesh_new(1, &one, NULL, 0, NULL);
  ts_auto_shard_options o = {.mesh = m1, .flops_per_s = 1, .bytes_per_s = 1};
  ts_auto_shard_info info;
  if (t >= 0 && m1 && ts_predict_program(g, &o, NULL, &info) == 0 && info.compute_s > 0) *units = info.compute_s;
  ts_mesh_free(m1);
  ts_graph_free(g);
  ts_params_free(pp);
  return t;
}

/* Seconds per result element per broadcast operand beyond the first of a
 * fused kernel (kernel.broadcast.operand_s), on client c (1 thread): a batch
 * norm and ReLU, relu((x - m) r g + b) with m, r, g, b per channel (4
 * broadcast operands, their arithmetic with them), against a bias add and
 * ReLU, relu(x + b), of the same (128,16,28,28) (a ResNet-20 layer's) and
 * bytes; each the least of `rounds` interleaved windows. The broadcast rate
 * alone priced the batch norm's kernels ~3x too fast (runs of 64..1024
 * elements cost the bias add within 12%: the operands, not the runs). */
double measure_bcast_operands(ts_client *c, int rounds) {
  int64_t sh[4] = {128, 16, 28, 28}, C = 16;
  int dim = 1;
  ts_graph *g[2] = {ts_graph_new(), ts_graph_new()};
  double best[2] = {-1, -1};
  for (int k = 0; k < 2 && g[0] && g[1]; k++) {
    ts_tensor x = cal_in_f32(g[k], "x", 4, sh), v[4];
    const char *nm[4] = {"m", "r", "g", "b"};
    for (int j = 0; j < 4; j++) v[j] = ts_broadcast_in_dim(g[k], cal_in_f32(g[k], nm[j], 1, &C), 4, sh, &dim);
    ts_tensor y = k == 0 ? x : ts_mul(g[k], ts_mul(g[k], ts_sub(g[k], x, v[0]), v[1]), v[2]); /* the bias add's x */
    y = ts_add(g[k], y, v[3]);
    ts_graph_add_output(g[k], ts_relu(g[k], y));
  }
  for (int r = 0; r < rounds && g[0] && g[1]; r++)
    for (int k = 0; k < 2; k++) {
      double t = cal_graph_time(c, g[k], false, 3, false, CAL_CLASS_WINDOW_S / rounds, 1, NULL);
      if (t > 0 && (best[k] < 0 || t < best[k])) best[k] = t;
    }
  ts_graph_free(g[0]), ts_graph_free(g[1]);
  if (best[0] <= 0 || best[1] <= 0) return -1;
  return fmax(1e-13, (best[1] - best[0]) / (3.0 * 128 * 16 * 28 * 28)); /* a file's numbers are > 0 */
}

/* `layers` layers' products as training runs them (y = a b, da = dy b^T,
 * db = a^T dy) of a (m, k), b (k, n), n = k when chained: x_{i+1} = x_i w_i,
 * each w_i its own (at most 6: the weights, 4 MiB each, and their gradients,
 * 48 MiB a run, out of the cache as a step's are when it comes back to them;
 * one layer's stayed in the cache and streamed 2.6x faster, 2.9e10 B/s, than
 * the MLP's did in its step, 1.1e10). */
static ts_graph *layer_products(int64_t m, int64_t k, int64_t n, int layers) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t sa[2] = {m, k}, sb[2] = {k, n}, sy[2] = {m, n};
  ts_tensor x = cal_in_f32(g, "a", 2, sa), wrt[7] = {x}, gr[7]; /* cal_prog: at most 8 inputs and outputs */
  if (layers > 6) layers = 6;
  for (int i = 0; i < layers; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "w%d", i);
    wrt[i + 1] = cal_in_f32(g, nm, 2, sb);
    x = ts_matmul(g, x, wrt[i + 1]);
  }
  ts_tensor dy = cal_in_f32(g, "dy", 2, sy);
  for (int i = 0; i <= layers; i++) gr[i] = TS_NONE;
  if (ts_vjp(g, 1, &x, &dy, layers + 1, wrt, gr) < 0) return ts_graph_free(g), NULL;
  ts_graph_add_output(g, x);
  for (int i = 0; i <= layers; i++) ts_graph_add_output(g, gr[i]);
  return g;
}

/* The dot_generals' FLOPs (*f) and operand + result bytes (*e) of g's
 * compiled program, 1 device, as ts_predict_program counts them; its kernels. */
static int dot_work(ts_graph *g, double *f, double *e) {
  int64_t one = 1;
  ts_mesh *m1 = ts_mesh_new(1, &one, NULL, 0, NULL);
  ts_auto_shard_options o = {.mesh = m1, .flops_per_s = 1e30, .bytes_per_s = 1e30, .matmul_bytes_per_s = 1};
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) o.kernel_per_s[k] = 1e30;
  ts_auto_shard_info info;
  int rc = m1 ? ts_predict_program(g, &o, NULL, &info) : -1;
  *e = rc == 0 ? info.class_s[TS_KERNEL_MATMUL] : 0; /* every dot here moves more than AS_DOT_STREAM_BYTES */
  o.matmul_bytes_per_s = 0, o.kernel_per_s[TS_KERNEL_MATMUL] = o.kernel_per_s[TS_KERNEL_MATMUL_SMALL] = 1;
  if (rc == 0) rc = ts_predict_program(g, &o, NULL, &info);
  *f = rc == 0 ? info.class_s[TS_KERNEL_MATMUL] + info.class_s[TS_KERNEL_MATMUL_SMALL] : 0;
  ts_mesh_free(m1);
  return rc == 0 ? info.kernels : -1;
}

/* kernel.matmul.bytes_per_s (*bw) and kernel.matmul with it (*rate), on client
 * c (1 thread): a dot_general's time is t = F / R + E / B (F its FLOPs, E its
 * operands' and result's bytes, streamed and packed into the GEMM's blocks).
 * The large layer (2048 x 256 -> 1024, 93 FLOPs a byte) and 6 chained
 * 16-row ones (16 x 1024 -> 1024, 7.7 FLOPs a byte: a data-parallel MLP's
 * per-device batch on 8 devices; out of the cache), each
 * the least of `rounds` interleaved windows, less
 * `overhead` per kernel, solve for R and B. The large layer's rate alone
 * (kernel.matmul) priced the MLP's 16-64-row products at 1.77e11 FLOP/s; they
 * ran at 0.57e11 (16 rows), 0.95e11 (32), 1.16e11 (64) (traces, least of 100
 * steps). 0 (*bw): the two did not separate (no term). */
int measure_dot_stream(ts_client *c, int rounds, double overhead, double *rate, double *bw) {
  ts_graph *g[2] = {layer_products(2048, 256, 1024, 1), layer_products(16, 1024, 1024, 6)};
  double best[2] = {-1, -1}, f[2] = {0, 0}, e[2] = {0, 0};
  int kern[2] = {-1, -1};
  for (int k = 0; k < 2 && g[0] && g[1]; k++) kern[k] = dot_work(g[k], &f[k], &e[k]);
  for (int r = 0; r < rounds && kern[0] > 0 && kern[1] > 0; r++)
    for (int k = 0; k < 2; k++) {
      double t = cal_graph_time(c, g[k], false, 3, false, CAL_CLASS_WINDOW_S / rounds, 1, NULL);
      if (t > 0 && (best[k] < 0 || t < best[k])) best[k] = t;
    }
  ts_graph_free(g[0]), ts_graph_free(g[1]);
  *bw = 0;
  if (best[0] <= 0 || best[1] <= 0 || f[0] <= 0 || f[1] <= 0 || e[0] <= 0 || e[1] <= 0) return -1;
  double t0 = best[0] - kern[0] * overhead, t1 = best[1] - kern[1] * overhead;
  double det = f[0] * e[1] - f[1] * e[0];
  double inv_r = (t0 * e[1] - t1 * e[0]) / det, inv_b = (f[0] * t1 - f[1] * t0) / det;
  if (inv_r > 0 && inv_b > 0) *rate = 1 / inv_r, *bw = 1 / inv_b;
  return 0;
}

/* A class's rate: `units` over time t less one kernel's overhead (at most
 * half of t: a probe no longer than two overheads is not read as free). */
double rate_of_work(double units, double t, double overhead) {
  return units / (t > 2 * overhead ? t - overhead : t / 2);
}

/* The classes measured in the cache too (kernel.CLASS.cached): the
 * elementwise and optimizer probes on 512 KiB tensors (2.5-3.5 MB a run),
 * run after run on the same buffers, each the least of `rounds` windows, less
 * one kernel's overhead as the classes. The class probes run out of the cache
 * (48-144 MiB); the MLP's parameter updates, combiner slices and concatenate
 * (1-3.2 MB each) ran at 2.0-2.5x those rates (traces, least of 100 steps). */
int measure_cached(ts_client *c, int rounds, double overhead, double *cached) {
  static const int cls[2] = {TS_KERNEL_ELEMENTWISE, TS_KERNEL_OPTIMIZER};
  for (int i = 0; i < 2; i++) {
    double best = -1, units = 0;
    for (int r = 0; r < rounds; r++) {
      double t = measure_class(c, 1, cls[i], rounds, &units, NULL, true);
      if (t > 0 && (best < 0 || t < best)) best = t;
    }
    if (best <= 0 || units <= 0) return -1;
    cached[cls[i]] = rate_of_work(units, best, overhead);
  }
  return 0;
}

/* Every kernel class on client c in at least `rounds` rounds, each round
 * timing every class not yet settled once (a shared machine's load drifts over
 * seconds: interleaved, every class gets runs in each quieter spell); rounds
 * are added (calrun.h's cal_settled, up to CAL_ROUNDS_MAX) while a class's
 * least round is not confirmed by another within CAL_AGREE. Per class e[k]:
 * the least confirmed round (the work alone), its spread and rounds; units:
 * its work. The least, not the median: at load average 11-15 on 2 cores, over
 * 3 invocations each interleaved with the single 0.15 s window's, a class's
 * rate moved 1.76x (max / min, median over the classes) with the median of 3
 * rounds against the single window's 1.20x, and 1.10x with the least against
 * its 1.32x. Confirmed, not the least alone: a 2-thread round with no clean
 * run was CPU time / threads, which came out up to 670x another round's
 * (parallel_efficiency.matmul_small "spread 66842%" at load 12): an OpenMP
 * thread spinning at a barrier for its descheduled partner burns CPU (the
 * 2-thread conv: clean runs 1.3 ms, CPU = wall; the others 28 ms, 27 ms of
 * waits). So a round with no clean run gives no value (0, left out) and its
 * CPU time / threads is the estimate only when no round had one (unconfirmed). */
int measure_classes(ts_client *c, int threads, int rounds, double *units, cal_est *e) {
  double v[TS_KERNEL_CLASSES][CAL_ROUNDS_MAX], fb[TS_KERNEL_CLASSES] = {0};
  int n[TS_KERNEL_CLASSES] = {0};
  for (bool more = true; more;) {
    more = false;
    for (int k = 0; k < TS_KERNEL_CLASSES; k++) {
      if (cal_settled(v[k], n[k], rounds, CAL_AGREE)) continue;
      if ((v[k][n[k]++] = measure_class(c, threads, k, rounds, &units[k], &fb[k], false)) < 0) return -1;
      more = true;
    }
  }
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) e[k] = cal_confirmed_or(v[k], n[k], CAL_AGREE, fb[k]);
  return 0;
}

/* The weight probe's graph: a ResNet's last-stage conv at a small per-device
 * batch, (4,4,4,512) NHWC * (512,512,3,3), pad 1, its forward, with (kind 1)
 * the data gradient or (kind 2) the filter gradient beside it. */
static ts_graph *conv_weight_graph(int kind) {
  ts_graph *g = ts_graph_new();
  if (!g) return NULL;
  int64_t xs[4] = {4, 4, 4, 512}, ws[4] = {512, 512, 3, 3};
  ts_tensor x = cal_in_f32(g, "x", 4, xs), w = cal_in_f32(g, "w", 4, ws), dy = cal_in_f32(g, "dy", 4, xs);
  ts_conv_params cp = {.pad_lo = {1, 1}, .pad_hi = {1, 1}, .layout = TS_LAYOUT_NHWC};
  ts_tensor y = ts_conv2d(g, x, w, &cp), wrt = kind == 1 ? x : w, gr = TS_NONE;
  ts_graph_add_output(g, y);
  if (kind > 0 && ts_vjp(g, 1, &y, &dy, 1, &wrt, &gr) < 0) return ts_graph_free(g), NULL;
  if (kind > 0) ts_graph_add_output(g, gr);
  return g;
}

/* g's predicted time (1 device) with one core's class rates and `overhead`
 * per kernel, no weight term (*t0), and its convolutions' weight bytes (*w). */
static int conv_weight_model(ts_graph *g, const double *rate, double overhead, double *t0, double *w) {
  int64_t one = 1;
  ts_mesh *m1 = ts_mesh_new(1, &one, NULL, 0, NULL);
  ts_auto_shard_options o = {.mesh = m1, .op_overhead_s = overhead};
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) o.kernel_per_s[k] = rate[k];
  ts_auto_shard_info info;
  int rc = m1 ? ts_predict_program(g, &o, NULL, &info) : -1;
  if (rc == 0) *t0 = info.compute_s;
  memset(&o, 0, sizeof o); /* the weight bytes: every rate infinite but the term's, 1 byte/s */
  o.mesh = m1, o.flops_per_s = o.bytes_per_s = 1e30;
  for (int k = 0; k < 3; k++) o.conv_weight_bytes_per_s[k] = 1;
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) o.kernel_per_s[k] = 1e30;
  if (rc == 0) rc = ts_predict_program(g, &o, NULL, &info);
  if (rc == 0) *w = info.compute_s;
  ts_mesh_free(m1);
  return rc;
}

/* kernel.conv{,_bwd_data,_bwd_filter}.weight_bytes_per_s (bw[3]), on client
 * c (1 thread) after the classes (rate[], one core's; `overhead` per
 * kernel): conv_weight_graph's three graphs (9.4 MB of weight, 33 FLOPs per
 * weight byte), each the least of `rounds` interleaved windows, less the
 * model's time for it without the term (its FLOPs at the conv classes'
 * rates, the overheads): what is left is the weight's bytes moved, the
 * forward's alone and each gradient's beyond it (with the forward beside it,
 * as training runs them: the data gradient reads the weight the forward
 * reordered). The class probes' 16-channel weight is 9 KiB: their rates are
 * the FLOPs'. Measured in ResNet-18's step at batch 4 (traces, 2 threads): 3x3
 * convs of equal FLOPs took 0.89 ms at 64 channels and 2.2 ms at 512; 0.14 ms
 * per MB of weight forward and filter gradient, 0.07 the data gradient.
 * A kind with no time left beyond its FLOPs: 0 (no term). */
int measure_conv_weight(ts_client *c, int rounds, double overhead, const double *rate, double *bw) {
  ts_graph *g[3] = {conv_weight_graph(0), conv_weight_graph(1), conv_weight_graph(2)};
  double best[3] = {-1, -1, -1}, t0[3] = {0, 0, 0}, w[3] = {0, 0, 0};
  int rc = g[0] && g[1] && g[2] ? 0 : -1;
  for (int r = 0; r < rounds && rc == 0; r++)
    for (int k = 0; k < 3; k++) {
      double t = cal_graph_time(c, g[k], false, 3, false, CAL_CLASS_WINDOW_S / rounds, 1, NULL);
      if (t > 0 && (best[k] < 0 || t < best[k])) best[k] = t;
    }
  for (int k = 0; k < 3 && rc == 0; k++) rc = best[k] > 0 ? conv_weight_model(g[k], rate, overhead, &t0[k], &w[k]) : -1;
  for (int k = 0; k < 3; k++) ts_graph_free(g[k]);
  if (rc < 0) return -1;
  double left0 = best[0] - t0[0];
  for (int k = 0; k < 3; k++) {
    double left = k == 0 ? left0 : best[k] - t0[k] - fmax(left0, 0), bytes = k == 0 ? w[0] : w[k] - w[0];
    bw[k] = bytes > 0 && left > 0.02 * best[k] ? bytes / left : 0;
  }
  return 0;
}
