/* trace.c — the step trace: complete events ("ph":"X") recorded while
 * tracing is on and written as Chrome trace-event JSON, viewable in
 * chrome://tracing and ui.perfetto.dev. pid 0 "devices" has one track per
 * device (tid = device id: kernels, collectives); pid 1 "host" has compile,
 * transfers and data waits. TESSEL_TRACE=FILE traces the whole process and
 * writes FILE at exit. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "metrics/metrics_internal.h"
#include "util/config.h" /* TESSEL_TRACE */

#define TR_MAX_EVENTS (1 << 21) /* ~2M events (~150 MiB): later ones are counted as dropped */

typedef struct {
  char name[48];
  char cat[12];
  int device;
  int64_t t0, t1, bytes;
} tr_event;

/* Guards the event array: device threads append concurrently. Held for one
 * append (a copy of ~90 bytes), so contention stays far below kernel times. */
static pthread_mutex_t tr_lock = PTHREAD_MUTEX_INITIALIZER;
static tr_event *tr_events;
static int64_t tr_n, tr_cap, tr_dropped, tr_start_ns;
static char *tr_env_path; /* TESSEL_TRACE */
static bool tr_env_taken; /* a caller writes it (ts_trace_take_env_path), not the exit hook */

bool ts_trace_enabled(void) { return TS_TRACE_ON() != 0; }

int ts_trace_start(void) {
  pthread_mutex_lock(&tr_lock);
  tr_n = 0;
  tr_dropped = 0;
  tr_start_ns = ts_metrics_now_ns();
  pthread_mutex_unlock(&tr_lock);
  atomic_store_explicit(&trace_on_, 1, memory_order_relaxed);
  return 0;
}

void ts_trace_event(const char *name, const char *cat, int device, int64_t t0_ns, int64_t t1_ns,
                    int64_t bytes) {
  if (!TS_TRACE_ON()) return;
  pthread_mutex_lock(&tr_lock);
  if (tr_n == tr_cap) {
    int64_t cap = tr_cap ? tr_cap * 2 : 4096;
    tr_event *e = cap <= TR_MAX_EVENTS ? realloc(tr_events, (size_t)cap * sizeof *e) : NULL;
    if (!e) {
      tr_dropped++;
      pthread_mutex_unlock(&tr_lock);
      return;
    }
    tr_events = e;
    tr_cap = cap;
  }
  tr_event *e = &tr_events[tr_n++];
  snprintf(e->name, sizeof e->name, "%s", name ? name : "?");
  snprintf(e->cat, sizeof e->cat, "%s", cat ? cat : "host");
  e->device = device;
  e->t0 = t0_ns;
  e->t1 = t1_ns;
  e->bytes = bytes;
  pthread_mutex_unlock(&tr_lock);
}

/* Writes the events recorded so far (lock held by the caller). */
static char *tr_json(void) {
  ts_strbuf sb = {0};
  sb_printf(&sb, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tessel_version\":\"%s\",\"dropped_events\":%lld},\n"
                 "\"traceEvents\":[\n",
            TS_VERSION_STRING, (long long)tr_dropped);
  sb_printf(&sb, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"devices\"}},\n"
                 "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"host\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"host\"}}");
  /* one named track per device that has events */
  int max_dev = -1;
  for (int64_t i = 0; i < tr_n; i++)
    if (tr_events[i].device > max_dev) max_dev = tr_events[i].device;
  char *seen = calloc((size_t)max_dev + 2, 1);
  if (!seen) sb.oom = true;
  for (int64_t i = 0; seen && i < tr_n; i++)
    if (tr_events[i].device >= 0) seen[tr_events[i].device] = 1;
  for (int d = 0; seen && d <= max_dev; d++)
    if (seen[d])
      sb_printf(&sb,
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"device %d\"}}"
                ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                d, d, d, d);
  free(seen);
  for (int64_t i = 0; i < tr_n; i++) {
    const tr_event *e = &tr_events[i];
    bool host = e->device < 0;
    sb_printf(&sb, ",\n{\"name\":");
    mt_json_string(&sb, e->name);
    sb_printf(&sb, ",\"cat\":");
    mt_json_string(&sb, e->cat);
    sb_printf(&sb, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", host ? 1 : 0,
              host ? 0 : e->device, (double)(e->t0 - tr_start_ns) / 1e3, (double)(e->t1 - e->t0) / 1e3);
    if (e->bytes >= 0) sb_printf(&sb, ",\"args\":{\"bytes\":%lld}", (long long)e->bytes);
    sb_printf(&sb, "}");
  }
  sb_printf(&sb, "\n]}\n");
  return sb_finish(&sb, "trace");
}

int ts_trace_stop(const char *path) {
  atomic_store_explicit(&trace_on_, 0, memory_order_relaxed);
  if (!path) return set_error("trace_stop: path is NULL");
  pthread_mutex_lock(&tr_lock);
  char *j = tr_json();
  pthread_mutex_unlock(&tr_lock);
  if (!j) return -1;
  int rc = mt_write_file(path, j, strlen(j));
  free(j);
  return rc;
}

const char *ts_trace_take_env_path(void) {
  tr_env_taken = true;
  return tr_env_path;
}

static void tr_at_exit(void) {
  if (tr_env_path && !tr_env_taken && ts_trace_stop(tr_env_path) < 0)
    fprintf(stderr, "tessel: TESSEL_TRACE: %s\n", ts_last_error());
  free(tr_env_path);
  tr_env_path = NULL;
}

__attribute__((constructor)) static void tr_init_from_env(void) {
  const char *p = env_config()->trace_path;
  if (!p) return;
  tr_env_path = strdup(p);
  if (tr_env_path) {
    ts_trace_start();
    atexit(tr_at_exit);
  }
}
