/* metrics.c — the metrics registry: up to MT_MAX named counters and sampled
 * metrics, created once and never freed, looked up through a small
 * open-addressing hash of their names. Reporting is lock-free (relaxed
 * atomics); only creating a metric takes the registry lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> /* clock_gettime */

#include "ir/ir.h" /* set_error, nodes */
#include "metrics/metrics_internal.h"
#include "util/config.h" /* TESSEL_METRICS */

#define MT_MAX 1024
#define MT_HASH 2048 /* power of two > MT_MAX: probes stay short */

struct ts_metric {
  char name[64];
  ts_metric_kind kind;
  _Atomic int64_t count, total, min, max;
  _Atomic int64_t *ring; /* TS_METRIC_RESERVOIR recent samples (not for COUNTER / PEAK) */
};

_Atomic int metrics_on_ = 1;
_Atomic int trace_on_ = 0;

static ts_metric mt_metrics[MT_MAX];
static _Atomic int mt_count;                 /* metrics published in mt_metrics */
static _Atomic(ts_metric *) mt_hash[MT_HASH]; /* name hash -> metric */
/* Serializes creation only: two threads creating the same name must get one metric. */
static pthread_mutex_t mt_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static ts_metric *find(const char *name, uint32_t h) {
  for (uint32_t i = 0; i < MT_HASH; i++) {
    ts_metric *m = atomic_load_explicit(&mt_hash[(h + i) & (MT_HASH - 1)], memory_order_acquire);
    if (!m) return NULL;
    if (strcmp(m->name, name) == 0) return m;
  }
  return NULL;
}

static void reset(ts_metric *m) {
  atomic_store_explicit(&m->count, 0, memory_order_relaxed);
  atomic_store_explicit(&m->total, 0, memory_order_relaxed);
  atomic_store_explicit(&m->min, INT64_MAX, memory_order_relaxed);
  atomic_store_explicit(&m->max, INT64_MIN, memory_order_relaxed);
}

ts_metric *ts_metric_get(const char *name, ts_metric_kind kind) {
  if (!name || !*name || strlen(name) >= sizeof mt_metrics[0].name) {
    set_error("metric_get: name '%s' is empty or longer than 63 bytes", name ? name : "(null)");
    return NULL;
  }
  if ((unsigned)kind > TS_METRIC_PEAK) {
    set_error("metric_get: invalid kind %d for metric '%s'", (int)kind, name);
    return NULL;
  }
  uint32_t h = name_hash(name);
  ts_metric *m = find(name, h);
  if (!m) {
    pthread_mutex_lock(&mt_lock);
    m = find(name, h); /* another thread may have created it meanwhile */
    int n = atomic_load_explicit(&mt_count, memory_order_relaxed);
    if (!m && n < MT_MAX) {
      m = &mt_metrics[n];
      snprintf(m->name, sizeof m->name, "%s", name);
      m->kind = kind;
      reset(m);
      if (kind != TS_METRIC_COUNTER && kind != TS_METRIC_PEAK)
        m->ring = calloc(TS_METRIC_RESERVOIR, sizeof *m->ring);
      uint32_t i = h & (MT_HASH - 1);
      while (atomic_load_explicit(&mt_hash[i], memory_order_relaxed)) i = (i + 1) & (MT_HASH - 1);
      /* release: readers that find the pointer see the initialized metric */
      atomic_store_explicit(&mt_count, n + 1, memory_order_release);
      atomic_store_explicit(&mt_hash[i], m, memory_order_release);
    }
    pthread_mutex_unlock(&mt_lock);
    if (!m) {
      set_error("metric_get: the registry is full (%d metrics); cannot add '%s'", MT_MAX, name);
      return NULL;
    }
  }
  if (m->kind != kind) {
    set_error("metric_get: metric '%s' exists with kind %d, asked for kind %d", name, (int)m->kind, (int)kind);
    return NULL;
  }
  return m;
}

void ts_metric_add(ts_metric *m, int64_t v) {
  if (!m || !TS_METRICS_ON()) return;
  int64_t idx = atomic_fetch_add_explicit(&m->count, 1, memory_order_relaxed);
  if (m->kind == TS_METRIC_PEAK) {
    int64_t cur = atomic_load_explicit(&m->max, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(&m->max, &cur, v, memory_order_relaxed,
                                                              memory_order_relaxed)) {
    }
    atomic_store_explicit(&m->total, atomic_load_explicit(&m->max, memory_order_relaxed), memory_order_relaxed);
    return;
  }
  atomic_fetch_add_explicit(&m->total, v, memory_order_relaxed);
  if (m->kind == TS_METRIC_COUNTER) return;
  if (m->ring) atomic_store_explicit(&m->ring[idx % TS_METRIC_RESERVOIR], v, memory_order_relaxed);
  int64_t lo = atomic_load_explicit(&m->min, memory_order_relaxed);
  while (v < lo && !atomic_compare_exchange_weak_explicit(&m->min, &lo, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
  int64_t hi = atomic_load_explicit(&m->max, memory_order_relaxed);
  while (v > hi && !atomic_compare_exchange_weak_explicit(&m->max, &hi, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

void ts_metrics_add(const char *name, ts_metric_kind kind, int64_t v) {
  if (!TS_METRICS_ON()) return;
  ts_metric_add(ts_metric_get(name, kind), v);
}

bool ts_metrics_enabled(void) { return TS_METRICS_ON() != 0; }
void ts_metrics_set_enabled(bool on) { atomic_store_explicit(&metrics_on_, on ? 1 : 0, memory_order_relaxed); }

int64_t ts_metrics_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Percentile p (0..100) of sorted v[0..n): nearest rank. */
static int64_t pct(const int64_t *v, int64_t n, double p) {
  if (n <= 0) return 0;
  int64_t i = (int64_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void data_of(ts_metric *m, ts_metric_data *d, int64_t *pcts) {
  memset(d, 0, sizeof *d);
  d->kind = m->kind;
  d->count = atomic_load_explicit(&m->count, memory_order_relaxed);
  d->total = atomic_load_explicit(&m->total, memory_order_relaxed);
  if (d->count == 0) return;
  d->min = atomic_load_explicit(&m->min, memory_order_relaxed);
  d->max = atomic_load_explicit(&m->max, memory_order_relaxed);
  if (m->kind == TS_METRIC_COUNTER) {
    d->min = d->max = d->median = d->p10 = d->p90 = d->p99 = d->total;
    return;
  }
  if (m->kind == TS_METRIC_PEAK) {
    d->min = d->median = d->p10 = d->p90 = d->p99 = d->max;
    return;
  }
  int64_t n = d->count < TS_METRIC_RESERVOIR ? d->count : TS_METRIC_RESERVOIR;
  if (!m->ring) n = 0; /* its allocation failed: exact count/total/min/max only */
  int64_t s[TS_METRIC_RESERVOIR];
  for (int64_t i = 0; i < n; i++) s[i] = atomic_load_explicit(&m->ring[i], memory_order_relaxed);
  qsort(s, (size_t)n, sizeof *s, cmp_i64);
  d->median = pct(s, n, 50);
  d->p10 = pct(s, n, 10);
  d->p90 = pct(s, n, 90);
  d->p99 = pct(s, n, 99);
  if (pcts) {
    static const double ps[9] = {1, 5, 10, 20, 50, 80, 90, 95, 99};
    for (int k = 0; k < 9; k++) pcts[k] = pct(s, n, ps[k]);
  }
}

int64_t ts_counter_value(const char *name) {
  if (!name) return 0;
  ts_metric *m = find(name, name_hash(name));
  return m ? atomic_load_explicit(&m->total, memory_order_relaxed) : 0;
}

int ts_metric_data_get(const char *name, ts_metric_data *out) {
  ts_metric *m = name ? find(name, name_hash(name)) : NULL;
  if (!m) return set_error("metric_data: no metric named '%s'", name ? name : "(null)");
  data_of(m, out, NULL);
  return 0;
}

void ts_metrics_clear(void) {
  int n = atomic_load_explicit(&mt_count, memory_order_acquire);
  for (int i = 0; i < n; i++) reset(&mt_metrics[i]);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const mt_snapshot *)a)->name, ((const mt_snapshot *)b)->name);
}

mt_snapshot *mt_snapshot_all(int *n_out) {
  int n = atomic_load_explicit(&mt_count, memory_order_acquire);
  mt_snapshot *s = calloc((size_t)n + 1, sizeof *s);
  if (!s) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "metrics: out of memory taking a snapshot");
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    memcpy(s[i].name, mt_metrics[i].name, sizeof s[i].name); /* both 64 bytes, NUL-terminated */
    data_of(&mt_metrics[i], &s[i].d, s[i].pct);
  }
  qsort(s, (size_t)n, sizeof *s, cmp_name);
  *n_out = n;
  return s;
}

/* ---- report points ---- */

void obs_count(const char *counter, int64_t delta) {
  if (TS_METRICS_ON()) ts_metric_add(ts_metric_get(counter, TS_METRIC_COUNTER), delta);
}

void obs_done(const char *metric, const char *counter, const char *name, const char *cat, int device,
                 int64_t t0, int64_t bytes) {
  bool mon = TS_METRICS_ON(), ton = TS_TRACE_ON();
  if ((!mon && !ton) || t0 == 0) return; /* t0 == 0: the region began while both were off */
  int64_t t1 = ts_metrics_now_ns();
  if (mon && metric) ts_metric_add(ts_metric_get(metric, TS_METRIC_TIME), t1 - t0);
  if (mon && counter) ts_metric_add(ts_metric_get(counter, TS_METRIC_COUNTER), 1);
  if (ton && name) ts_trace_event(name, cat ? cat : "host", device, t0, t1, bytes);
}

void obs_kernel(const char *op_name, int device, int64_t t0) {
  if (!TS_TRACE_ON() || t0 == 0) return;
  ts_trace_event(op_name, "kernel", device, t0, ts_metrics_now_ns(), -1);
}

void obs_collective(const char *kind, int device, int64_t bytes, int64_t t0) {
  bool mon = TS_METRICS_ON(), ton = TS_TRACE_ON();
  if (!mon && !ton) return;
  int64_t t1 = ts_metrics_now_ns();
  if (mon) {
    char name[64];
    snprintf(name, sizeof name, "Collective%s", kind);
    ts_metrics_add(name, TS_METRIC_COUNTER, 1);
    snprintf(name, sizeof name, "Collective%sBytes", kind);
    ts_metrics_add(name, TS_METRIC_BYTES, bytes);
    if (t0) {
      snprintf(name, sizeof name, "Collective%sTime", kind);
      ts_metrics_add(name, TS_METRIC_TIME, t1 - t0);
    }
  }
  if (ton && t0) ts_trace_event(kind, "collective", device, t0, t1, bytes);
}

void obs_node_end(const ts_graph *g, int id, int device, int64_t t0) {
  if (t0 == 0) return;
  const ts_node *n = &g->nodes[id];
  if (!ir_op_is_collective(n->op)) {
    obs_kernel(ir_op_name(n->op), device, t0);
    return;
  }
  static const char *const kinds[] = {"AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Permute"};
  const ts_node *x = &g->nodes[n->in[0]];
  int64_t bytes = ts_shape_numel(x->rank, x->shape) * (int64_t)ts_dtype_size(x->dtype);
  int k = (int)n->op - (int)TS_OP_ALL_REDUCE;
  obs_collective(k >= 0 && k < 5 ? kinds[k] : "Other", device, bytes, t0);
}

void obs_peak_memory(int device, int64_t bytes) {
  if (!TS_METRICS_ON()) return;
  char name[64];
  snprintf(name, sizeof name, "PeakMemory.device%d", device);
  ts_metrics_add(name, TS_METRIC_PEAK, bytes);
}

/* TESSEL_METRICS=0 turns the registry off from the start. */
__attribute__((constructor)) static void mt_init_from_env(void) {
  if (!env_config()->metrics_enabled) ts_metrics_set_enabled(false);
}
