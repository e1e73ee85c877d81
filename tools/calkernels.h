/* calkernels.h — the calibration's kernel probes (tools/calkernels.c; the
 * keys they give are documented in devices/README.md): on one client, one
 * core's rate per kernel class (ts_kernel_class) and the terms measured beside
 * them. Each probe is a graph timed in rounds (calprobe.h), the work alone
 * (calrun.h). Single-threaded: the caller's thread runs them. */
#ifndef TS_TOOLS_CALKERNELS_H
#define TS_TOOLS_CALKERNELS_H

#include "calrun.h" /* cal_est */
#include "tessel/tessel.h"

/* cache_bytes: kernels moving at most this run at kernel.CLASS.cached (at most
 * the in-cache probes' runs, 2.5-3.5 MB, rounded up) */
#define CAL_CACHE_BYTES (4.0 * 1024 * 1024)

/* Every kernel class on c (`threads` threads) in at least `rounds`
 * interleaved rounds, until each class's least round is confirmed: e[k] its
 * estimate (seconds per run), units[k] its work (FLOPs or bytes). -1 on failure. */
int measure_classes(ts_client *c, int threads, int rounds, double *units, cal_est *e);
/* A class's rate: units over t less one kernel's overhead (at most half of t). */
double rate_of_work(double units, double t, double overhead);
/* kernel.broadcast.operand_s: seconds per result element per broadcast
 * operand beyond the first (1 thread); -1 on failure. */
double measure_bcast_operands(ts_client *c, int rounds);
/* kernel.matmul.bytes_per_s (*bw; 0: not separated) and kernel.matmul beside
 * it (*rate), 1 thread. */
int measure_dot_stream(ts_client *c, int rounds, double overhead, double *rate, double *bw);
/* kernel.elementwise.cached and kernel.optimizer.cached into cached[], 1 thread. */
int measure_cached(ts_client *c, int rounds, double overhead, double *cached);
/* kernel.conv{,_bwd_data,_bwd_filter}.weight_bytes_per_s into bw[3] (0: no
 * time left beyond the FLOPs), 1 thread, after the classes (rate[]: one core's). */
int measure_conv_weight(ts_client *c, int rounds, double overhead, const double *rate, double *bw);

#endif
