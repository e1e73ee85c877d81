/* devfile.h — device descriptions and the cost model's calibration for
 * `tessel plan` and `tessel inspect`: the file format (devices/README.md),
 * the calibration cache (TESSEL_CALIBRATION, else
 * $XDG_CACHE_HOME/tessel/calibration.txt), the measurement that writes it
 * (`tessel plan --calibrate`) and the cost-model options a mesh gets from it. */
#ifndef TS_TOOLS_DEVFILE_H
#define TS_TOOLS_DEVFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "tessel/tessel.h"

#define DEV_AR_SIZES 3 /* in-process all-reduce measured on 2, 4 and 8 devices */
#define DEV_PROC_MAX 8 /* allreduce.procsP.* keys: P = 2..DEV_PROC_MAX processes of one host */

/* The calibration file's kernel class keys ("kernel.matmul", ... by
 * ts_kernel_class) and the device counts of its in-process entries
 * (allreduce.N.*, step_overhead.N_s, ...): 2, 4, 8. Read-only. */
extern const char *const dev_kernel_keys[TS_KERNEL_CLASSES];
extern const int dev_ar_devices[DEV_AR_SIZES];

typedef struct {
  char name[128];
  double flops_f32, flops_bf16, bytes_per_s, memory_bytes;
  double host_bytes_per_s, host_latency_s; /* links between devices of one host */
  double net_bytes_per_s, net_latency_s;   /* links between hosts */
  int devices_per_host;
  /* calibration (0: not given): one core's throughput per kernel class, the
   * per-kernel overhead, the parallel efficiency of a kernel on all threads,
   * in-process all-reduce alpha/beta with 2, 4, 8 devices sharing the host */
  double kernel[TS_KERNEL_CLASSES];
  double op_overhead_s, parallel_efficiency;
  double bcast_operand_s; /* kernel.broadcast.operand_s: per element per broadcast operand beyond the first */
  double dot_bytes_per_s; /* kernel.matmul.bytes_per_s: a dot_general's operands and result streamed (0: none) */
  double conv_wbytes_per_s[3]; /* kernel.conv{,_bwd_data,_bwd_filter}.weight_bytes_per_s: a convolution's weight moved (0: none) */
  double kernel_cached[TS_KERNEL_CLASSES]; /* kernel.CLASS.cached: one core's in-cache rate (0: none) */
  double cache_bytes;     /* cache_bytes: kernels moving at most this use kernel_cached (0: none) */
  double par_overhead_s; /* a kernel's fixed cost on every thread (its fork and join) */
  double kernel_eff[TS_KERNEL_CLASSES]; /* per class: its own parallel efficiency (0: parallel_efficiency) */
  double ar_bw[DEV_AR_SIZES], ar_lat[DEV_AR_SIZES];
  double step1;                  /* step overhead of 1 device (a trivial program's execute) */
  double step_over[DEV_AR_SIZES]; /* the same with 2, 4, 8 devices */
  double ar_busy[DEV_AR_SIZES];   /* a 1-element all-reduce between kernels on 2, 4, 8 devices, less back to back */
  double ar_async[DEV_AR_SIZES];  /* the same started asynchronously: what each adds to the step (0: not measured) */
  /* the blocking one between kernels of more compute (allreduce.N.busy_long_s) and that compute per
   * collective (allreduce.N.busy_long_after_s; 0: not measured) */
  double ar_long[DEV_AR_SIZES], ar_long_after[DEV_AR_SIZES];
  double shared_eff[DEV_AR_SIZES]; /* 2, 4, 8 devices of at most a core each: speed / their share of the cores */
  double op_over[DEV_AR_SIZES];    /* per kernel of each of 2, 4, 8 devices in this process (0: not measured) */
  /* processes of this host under mpirun, per P (index P; 0: not measured):
   * allreduce.procsP.bytes_per_s, .latency_s, .busy_s, .busy_after_s, .step_wait_s, step_overhead.procsP_s,
   * .cached_bytes_per_s */
  double pr_bw[DEV_PROC_MAX + 1], pr_lat[DEV_PROC_MAX + 1], pr_busy[DEV_PROC_MAX + 1], pr_cbw[DEV_PROC_MAX + 1];
  double pr_after[DEV_PROC_MAX + 1], pr_step[DEV_PROC_MAX + 1], pr_swait[DEV_PROC_MAX + 1];
  /* not a file key: the mesh's devices spread over this many processes of this
   * host (tessel inspect/plan --processes; 0 or 1: one process), which
   * device_options prices with the pr_* entry of that count when measured */
  int processes;
  char cpu[128];     /* calibration key: the CPU model */
  int threads;       /* calibration key: the threads (TESSEL_NUM_THREADS or the cores) */
  int cores;         /* per_core: the host's cores the devices share */
  bool per_core;     /* kernel[] is one core's: a device's share of the host's cores scales it */
} device_desc;

/* The cost model's own defaults (an estimate for one CPU core). */
void device_default(device_desc *d);
/* Reads a device or calibration file over d (keys it names replace d's).
 * Errors (printed with cmd) name the file, line and key. */
int device_read(const char *cmd, const char *path, device_desc *d);
/* The calibration cache's path (TESSEL_CALIBRATION, else the XDG cache);
 * NULL for TESSEL_CALIBRATION=none or without HOME. */
const char *calibration_path(char *buf, size_t len);
/* This machine's key: CPU model and threads. */
void calibration_key(char *cpu, size_t len, int *threads);
/* d = the defaults, then the calibration cache when it exists and its key is
 * this machine's. *note: what was used (for printing; static text or buf). */
void device_auto(device_desc *d, char *note, size_t len);
/* Measures this machine (a few seconds) into path (directories created;
 * tools/calibrate.c).
 * rounds (1..CAL_MAX_ROUNDS): the kernel classes are timed in that many
 * interleaved rounds, each class's time the least of its rounds'. */
#define CAL_MAX_ROUNDS 9
#define CAL_DEFAULT_ROUNDS 3
int calibrate(const char *cmd, const char *path, int rounds);
/* Under mpirun with P >= 2 processes (every process calls it with its
 * client of one device): the links between the processes of this host,
 * merged by process 0 into path (allreduce.procsP.*, step_overhead.procsP_s;
 * tools/calprocs.c). */
int calibrate_procs(ts_client *c, const char *cmd, const char *path);
/* The calibration's all-reduce terms on D devices from its measurements: ts,
 * a step of one 1-element all-reduce (back to back); step, a 1-element
 * step's fixed cost (step_overhead.D_s); busy, what one such all-reduce adds
 * between kernels. *latency: alpha of the ring model (ts - step over
 * 2 log2 D steps); *busy_s: busy beyond that back-to-back time. */
void allreduce_terms(int D, double ts, double step, double busy, double *latency, double *busy_s);
/* The processes' part of device_options (called by it): with d->processes
 * = P >= 2 and allreduce.procsP.* measured, the mesh axes spanning
 * processes (devices numbered process-major, ndev / P per process; P must
 * divide the mesh: the CLI checks) get the processes' links and wait
 * (ts_auto_shard_options.axis_between_processes, process_wait_s). Otherwise
 * nothing changes. */
void device_process_options(const device_desc *d, const ts_mesh *m, ts_auto_shard_options *ao);
/* --processes v (NULL: 1) for a mesh of ndev devices: a count 1..TS_MAX_DEVICES
 * that divides ndev into *processes; else -1 with an error naming the value. */
int device_parse_processes(const char *cmd, const char *v, int64_t ndev, int *processes);
/* allreduce.N.async_s (entry q, N = dev_ar_devices[q]) beyond the alpha of
 * the probe's own 1-element all-reduce, 2 log2 N allreduce.N.latency_s: what
 * ts_auto_shard_options.collective_async_s means (the prediction adds every
 * collective's alpha-beta itself). 0: not measured; else at least 1 ns. */
double async_beyond_alpha(const device_desc *d, int q);
/* The cost model's options for mesh m (per-axis links: inside a host when the
 * axis and the axes minor to it span at most devices_per_host); in_host per
 * axis may be NULL. */
void device_options(const device_desc *d, const ts_mesh *m, ts_auto_shard_options *ao, bool *in_host);

#endif
