/* metrics_internal.h — the report points the library's layers call
 * (compile, runtime, comm, data) and the pieces the metrics files share.
 *
 * Every ts_obs_* call is one relaxed atomic load and a branch when metrics
 * and tracing are both off; the ones that take a start time pair with
 * obs_now(), which returns 0 (and reads no clock) when both are off. */
#ifndef TS_METRICS_INTERNAL_H
#define TS_METRICS_INTERNAL_H

#include "util/strbuf.h" /* ts_strbuf: the reports' text */
#include <stdarg.h>
#include <stdatomic.h>

#include "ir/ir.h" /* ir_op_is_collective, nodes for obs_node_end */
#include "tessel/metrics.h"

extern _Atomic int metrics_on_; /* 1 = the registry records */
extern _Atomic int trace_on_;   /* 1 = trace events are recorded */

#define TS_METRICS_ON() atomic_load_explicit(&metrics_on_, memory_order_relaxed)
#define TS_TRACE_ON() atomic_load_explicit(&trace_on_, memory_order_relaxed)

/* Start time for a timed region: the clock when metrics or tracing is on, else 0. */
static inline int64_t obs_now(void) { return TS_METRICS_ON() || TS_TRACE_ON() ? ts_metrics_now_ns() : 0; }

/* A timed region [t0, now) ended: TIME sample `metric` (may be NULL), +1 on
 * COUNTER `counter` (may be NULL), and a trace event `name` / `cat` on the
 * track of `device` (-1 = host) carrying `bytes` (< 0: none). */
void obs_done(const char *metric, const char *counter, const char *name, const char *cat, int device,
                 int64_t t0, int64_t bytes);
/* A timed region to the end of the enclosing block, whatever return ends it:
 *   TS_OBS_SCOPE("TransferToDeviceTime", "to device", "transfer", -1, bytes);
 * records a TIME sample of `metric` and a trace event `name` / `cat` on the
 * track of `device` (-1 = host) with `bytes` (< 0: none). One per block. */
typedef struct {
  const char *metric, *name, *cat;
  int device;
  int64_t t0, bytes;
} ts_obs_scope;
static inline void ts_obs_scope_end(ts_obs_scope *s) {
  if (s->t0) obs_done(s->metric, NULL, s->name, s->cat, s->device, s->t0, s->bytes);
}
#define TS_OBS_SCOPE(metric, name, cat, device, bytes)                                        \
  __attribute__((cleanup(ts_obs_scope_end))) ts_obs_scope ts_obs_scope_ = {metric, name, cat, \
                                                                           device, obs_now(), (int64_t)(bytes)}

/* A kernel (node `id` of op `op_name`) ran on `device` since t0: trace only. */
void obs_kernel(const char *op_name, int device, int64_t t0);

/* Around one node run by a device (cpu_device.c):
 *   int64_t t0 = obs_node_begin(n->op);
 *   ... run the kernel ...
 *   obs_node_end(g, id, device, t0);
 * Tracing: a kernel event per node on the device's track. Metrics: the
 * collectives (count, bytes of the operand, time). Off: no clock read. */
static inline int64_t obs_node_begin(ts_op op) {
  return TS_TRACE_ON() || (TS_METRICS_ON() && ir_op_is_collective(op)) ? ts_metrics_now_ns() : 0;
}
void obs_node_end(const ts_graph *g, int id, int device, int64_t t0);
/* A collective of `kind` ("AllReduce", "AllGather", "ReduceScatter",
 * "AllToAll", "Permute") moved `bytes` on `device` since t0: counters
 * Collective<kind>, Collective<kind>Bytes, Collective<kind>Time and a trace event. */
void obs_collective(const char *kind, int device, int64_t bytes, int64_t t0);
/* Peak memory of `device` is at least `bytes` (PEAK PeakMemory.device<N>). */
void obs_peak_memory(int device, int64_t bytes);
/* A counter increment by name (no-op when metrics are off). */
void obs_count(const char *counter, int64_t delta);

/* ---- shared by the metrics files ---- */
/* Appends s as a JSON string literal (quotes included). */
void mt_json_string(ts_strbuf *sb, const char *s);

/* Snapshot of every metric for the reports: count of entries in *n. */
typedef struct {
  char name[64];
  ts_metric_data d;
  int64_t pct[9]; /* 1, 5, 10, 20, 50, 80, 90, 95, 99 % */
} mt_snapshot;
mt_snapshot *mt_snapshot_all(int *n);

/* Writes a metrics or trace file. A new or regular file (or a symbolic link
 * to one: its target) is replaced atomically: path.tmp.<pid> + fsync +
 * rename. A character device (/dev/null) or FIFO is written in place, never
 * renamed over; a directory, block device or socket is refused. */
int mt_write_file(const char *path, const char *data, size_t len);

#endif
