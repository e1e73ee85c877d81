/* tessel/metrics.h — observability: counters and timers every layer reports
 * to, reports in PyTorch/XLA's metrics_report() form and as JSON, a
 * Chrome/Perfetto trace of each step, and the compile-cache controls.
 *
 * Metrics. A metric is a named counter or a sampled value (a time in
 * nanoseconds, a byte count, a plain value, or a peak). Names follow
 * PyTorch/XLA where the concept is the same:
 *   CompileTime, ExecuteTime, TransferToDeviceTime, TransferFromDeviceTime
 *     (TIME metrics),
 *   CachedCompile, UncachedCompile, PersistentCacheHit, PersistentCacheMiss,
 *   PersistentCacheDiscarded, ExecuteCount, TransferToDeviceCount, ...
 *     (COUNTER metrics),
 * plus tessel's own: Collective<Kind> (COUNTER, e.g. CollectiveAllReduce),
 * Collective<Kind>Bytes (BYTES, the operand per device and call),
 * Collective<Kind>Time (TIME), PeakMemory.device<N> (PEAK: the largest
 * planned device memory, arena + constants, of a program compiled for device
 * N), ExecutableBuildTime (TIME: plan, device memory and constants of an
 * executable, cached or not), PersistentCacheLoadTime (TIME), DataWaitTime
 * (TIME: the training loop waiting for its next batch).
 * CompileTime is the graph passes of a program that was not in a cache (per
 * device program for SPMD); a cached compile records CachedCompile or
 * PersistentCacheHit instead.
 *
 * Every function here may be called from any thread.
 *
 * Cost: the registry is on by default (as in PyTorch/XLA). Off
 * (ts_metrics_set_enabled(false) or TESSEL_METRICS=0) every report point is
 * one predictable branch. On, a report is a few relaxed atomic adds: no lock.
 * Count, total, min and max are exact over all samples; the median and
 * percentiles are over the most recent TS_METRIC_RESERVOIR samples (a ring,
 * like PyTorch/XLA's circular sample buffer), so they describe recent steps.
 *
 * Tracing. Off by default; ts_trace_start begins recording (or TESSEL_TRACE
 * names a file written at exit); when off every trace point is one branch. The
 * trace is Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): pid 0
 * holds one track per device (tid = device id) with kernels and collectives;
 * pid 1 is the host (compile, data waits, transfers). */
#ifndef TESSEL_METRICS_H
#define TESSEL_METRICS_H

#include "tessel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

/* Samples kept per metric for the median and percentiles. */
#define TS_METRIC_RESERVOIR 1024

typedef enum {
  TS_METRIC_COUNTER, /* a running sum of deltas */
  TS_METRIC_TIME,    /* samples in nanoseconds */
  TS_METRIC_BYTES,   /* samples in bytes */
  TS_METRIC_VALUE,   /* plain numbers */
  TS_METRIC_PEAK,    /* the largest value ever reported (e.g. peak memory) */
} ts_metric_kind;

typedef struct ts_metric ts_metric;

/* The metric called `name` (at most 63 bytes), created on first use with
 * `kind`. Handles are never freed: cache them. NULL (error set) when the
 * name exists with another kind or the registry (1024 metrics) is full. */
ts_metric *ts_metric_get(const char *name, ts_metric_kind kind);
/* COUNTER: adds v. TIME/BYTES/VALUE: records one sample v. PEAK: max(v).
 * Does nothing when metrics are off or m is NULL. */
void ts_metric_add(ts_metric *m, int64_t v);
/* The same by name (a registry lookup per call; for cold paths). */
void ts_metrics_add(const char *name, ts_metric_kind kind, int64_t v);

bool ts_metrics_enabled(void);
void ts_metrics_set_enabled(bool on);
/* Monotonic clock in nanoseconds (for TIME samples and trace events). */
int64_t ts_metrics_now_ns(void);

typedef struct {
  ts_metric_kind kind;
  int64_t count;   /* samples (COUNTER: calls that added) */
  int64_t total;   /* sum of samples (COUNTER: its value) */
  int64_t min, max;
  int64_t median;  /* over the recent samples */
  int64_t p10, p90, p99;
} ts_metric_data;

/* A counter's value, 0 when it does not exist. */
int64_t ts_counter_value(const char *name);
/* Data of metric `name`; -1 (error set) when it does not exist. */
int ts_metric_data_get(const char *name, ts_metric_data *out);
/* Resets every metric to zero (handles stay valid). */
void ts_metrics_clear(void);

/* Reports (malloc'd; free() them). The full report is PyTorch/XLA's form:
 *   Metric: CompileTime
 *     TotalSamples: 2
 *     Accumulator: 226ms137.620us
 *     Percentiles: 1%=...; 5%=...; 10%=...; 20%=...; 50%=...; 80%=...; 90%=...; 95%=...; 99%=...
 *   Counter: CachedCompile
 *     Value: 1
 * The short report is one line per non-zero metric (count, total, median).
 * JSON: {"metrics":{"CompileTime":{"kind":"time","count":..,"total":..,
 * "min":..,"median":..,"max":..,"p10":..,"p90":..,"p99":..},...},
 * "counters":{"CachedCompile":1,...}}; times in nanoseconds. */
char *ts_metrics_report(void);
char *ts_metrics_short_report(void);
char *ts_metrics_json(void);
/* Writes ts_metrics_json() to path. A new or regular file is replaced
 * atomically (a temporary file beside it, fsync, rename): readers never see
 * half a file, and a failed write leaves the old one. A character device
 * (/dev/null) or FIFO is written in place, never renamed over; a directory,
 * block device or socket is refused. ts_trace_stop writes the same way. */
int ts_metrics_write_json(const char *path);

/* ---- tracing ---- */
/* Clears the trace buffer and starts recording. */
int ts_trace_start(void);
/* Stops recording and writes the events to path as Chrome trace JSON. */
int ts_trace_stop(const char *path);
/* The TESSEL_TRACE file (NULL when unset), and the caller now writes it
 * (ts_trace_stop) when and if it chooses: the library no longer writes it at
 * exit. tessel train uses this to leave the file untouched when a run fails
 * before its first step, and to report a failed write in its exit code. */
const char *ts_trace_take_env_path(void);
bool ts_trace_enabled(void);
/* One complete event [t0_ns, t1_ns) on the track of `device` (>= 0) or the
 * host (-1). cat: "kernel", "collective", "compile", "data", "transfer",
 * "execute". bytes < 0: none. name is copied. */
void ts_trace_event(const char *name, const char *cat, int device, int64_t t0_ns, int64_t t1_ns,
                    int64_t bytes);

/* ---- compile cache ---- */
/* ts_compile keeps every program it compiled in memory (key: the canonical
 * graph text, mesh, shardings, compile options and tessel version) and, when
 * a directory is set, on disk: a later process loads instead of compiling.
 * dir NULL turns the persistent cache off. The default is $TESSEL_CACHE_DIR.
 * The directory is created if missing. */
int ts_compile_cache_set_dir(const char *dir);
/* The directory in use (borrowed: valid until the next
 * ts_compile_cache_set_dir), or NULL. */
const char *ts_compile_cache_dir(void);
/* Empties the in-memory cache (the files on disk stay). */
void ts_compile_cache_clear(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
