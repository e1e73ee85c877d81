/* test_metrics.c — the metrics registry and the report points of the
 * pipeline: counters and samples are exact (also from 4 threads), the median
 * and percentiles come from the recent samples, off means nothing recorded;
 * the reports have PyTorch/XLA's form; a small program compiled twice and
 * executed three times reports exactly 1 CompileTime sample, 1
 * CachedCompile, 3 ExecuteTime samples and one transfer per buffer write /
 * read; a trace of it has complete events on the device track (tid 0);
 * on 2 devices every collective is counted per device with its bytes and
 * both device tracks appear in the trace. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tessel/metrics.h"
#include "tessel/tessel.h"

static void test_registry(void) {
  ts_metrics_clear();
  ts_metric *c = ts_metric_get("TestCounter", TS_METRIC_COUNTER);
  ts_metric *t = ts_metric_get("TestTime", TS_METRIC_TIME);
  CHECK(c && t, "%s", ts_last_error());
  CHECK(ts_metric_get("TestCounter", TS_METRIC_TIME) == NULL, "kind mismatch accepted");
  CHECK(strstr(ts_last_error(), "TestCounter") != NULL, "error names the metric: %s", ts_last_error());
  CHECK(ts_metric_get("TestCounter", TS_METRIC_COUNTER) == c, "same handle for the same name");
  ts_metric_add(c, 2);
  ts_metric_add(c, 3);
  CHECK(ts_counter_value("TestCounter") == 5, "counter %lld", (long long)ts_counter_value("TestCounter"));
  CHECK(ts_counter_value("NoSuchCounter") == 0, "missing counter");
  for (int v = 1; v <= 101; v++) ts_metric_add(t, v * 1000);
  ts_metric_data d;
  CHECK_OK(ts_metric_data_get("TestTime", &d));
  CHECK(d.count == 101 && d.total == 5151000 && d.min == 1000 && d.max == 101000 && d.median == 51000,
        "count %lld total %lld min %lld max %lld median %lld", (long long)d.count, (long long)d.total,
        (long long)d.min, (long long)d.max, (long long)d.median);
  CHECK(d.p10 == 11000 && d.p90 == 91000, "p10 %lld p90 %lld", (long long)d.p10, (long long)d.p90);
  /* past the reservoir: the median follows the recent samples, count stays exact */
  for (int i = 0; i < 3 * TS_METRIC_RESERVOIR; i++) ts_metric_add(t, 7);
  CHECK_OK(ts_metric_data_get("TestTime", &d));
  CHECK(d.count == 101 + 3 * TS_METRIC_RESERVOIR && d.median == 7 && d.min == 7 && d.max == 101000,
        "after many samples: count %lld median %lld", (long long)d.count, (long long)d.median);
  ts_metric *p = ts_metric_get("TestPeak", TS_METRIC_PEAK);
  ts_metric_add(p, 10);
  ts_metric_add(p, 30);
  ts_metric_add(p, 20);
  CHECK(ts_metric_data_get("TestPeak", &d) == 0 && d.max == 30, "peak %lld", (long long)d.max);
  /* off: nothing recorded */
  ts_metrics_set_enabled(false);
  CHECK(!ts_metrics_enabled(), "still enabled");
  ts_metric_add(c, 100);
  ts_metrics_add("TestOffCounter", TS_METRIC_COUNTER, 1);
  ts_metrics_set_enabled(true);
  CHECK(ts_counter_value("TestCounter") == 5 && ts_counter_value("TestOffCounter") == 0, "recorded while off");
  CHECK(ts_metric_data_get("NoSuchMetric", &d) < 0, "missing metric has data");
  ts_metrics_clear();
  CHECK(ts_counter_value("TestCounter") == 0, "clear");
  CHECK(ts_metric_get(NULL, TS_METRIC_COUNTER) == NULL, "NULL name");
  char longname[100];
  memset(longname, 'a', 99);
  longname[99] = 0;
  CHECK(ts_metric_get(longname, TS_METRIC_COUNTER) == NULL, "too long a name");
}

static void *adder(void *arg) {
  ts_metric *m = arg;
  for (int i = 0; i < 20000; i++) ts_metric_add(m, 3);
  ts_metrics_add("TestThreadsCounter", TS_METRIC_COUNTER, 1);
  return NULL;
}

static void test_threads(void) {
  ts_metric *m = ts_metric_get("TestThreads", TS_METRIC_BYTES);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, adder, m);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  ts_metric_data d;
  CHECK_OK(ts_metric_data_get("TestThreads", &d));
  CHECK(d.count == 80000 && d.total == 240000 && d.median == 3, "threads: count %lld total %lld",
        (long long)d.count, (long long)d.total);
  CHECK(ts_counter_value("TestThreadsCounter") == 4, "threads counter");
}

static void test_reports(void) {
  ts_metrics_clear();
  ts_metrics_add("ReportTime", TS_METRIC_TIME, 226137620); /* 226ms137.620us */
  ts_metrics_add("ReportTime", TS_METRIC_TIME, 9969486408);
  ts_metrics_add("ReportCounter", TS_METRIC_COUNTER, 3);
  ts_metrics_add("ReportBytes", TS_METRIC_BYTES, 3 << 20);
  char *r = ts_metrics_report();
  CHECK(r != NULL, "%s", ts_last_error());
  if (r) {
    CHECK(strstr(r, "Metric: ReportTime\n  TotalSamples: 2\n  Accumulator: 10s195ms624.028us\n  Percentiles: 1%=226ms137.620us;"),
          "report:\n%s", r);
    CHECK(strstr(r, "Counter: ReportCounter\n  Value: 3\n"), "report:\n%s", r);
    CHECK(strstr(r, "Accumulator: 3.00MB"), "bytes:\n%s", r);
    CHECK(strstr(r, "Metric:") < strstr(r, "Counter:"), "metrics before counters");
  }
  free(r);
  char *s = ts_metrics_short_report();
  CHECK(s && strstr(s, "ReportCounter") && strstr(s, "ReportTime"), "short report:\n%s", s ? s : "");
  free(s);
  char *j = ts_metrics_json();
  CHECK(j && strstr(j, "\"ReportCounter\":3") && strstr(j, "\"ReportTime\":{\"kind\":\"time\",\"count\":2"),
        "json:\n%s", j ? j : "");
  free(j);
}

/* x (4, 8) -> exp(x) * 2 + sum: one compile, then executes and transfers. */
static void test_pipeline_counters(void) {
  ts_client *c = ts_client_new(NULL);
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {4, 8};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s);
  ts_graph_add_output(g, ts_add(g, ts_mul(g, ts_exp(g, x), ts_full(g, TS_F32, 2, s, 2.0)), x));
  ts_compile_cache_set_dir(NULL);
  ts_compile_cache_clear();
  ts_metrics_clear();
  ts_executable *e1 = ts_compile(c, g, NULL), *e2 = ts_compile(c, g, NULL);
  CHECK(e1 && e2, "%s", ts_last_error());
  ts_metric_data d = {0};
  CHECK(ts_metric_data_get("CompileTime", &d) == 0 && d.count == 1, "CompileTime samples %lld (want 1)",
        (long long)d.count);
  CHECK(ts_counter_value("CachedCompile") == 1, "CachedCompile %lld (want 1)", (long long)ts_counter_value("CachedCompile"));
  CHECK(ts_counter_value("UncachedCompile") == 1, "UncachedCompile %lld", (long long)ts_counter_value("UncachedCompile"));
  char *t1 = e1 ? ts_executable_to_string(e1) : NULL, *t2 = e2 ? ts_executable_to_string(e2) : NULL;
  CHECK(t1 && t2 && strcmp(t1, t2) == 0, "a cached compile gives another program");
  free(t1);
  free(t2);
  float host[32];
  for (int i = 0; i < 32; i++) host[i] = (float)i / 32.0f;
  ts_buffer *in = ts_buffer_from_host(c, TS_F32, 2, s, host); /* transfer 1 */
  ts_buffer *out = ts_buffer_new(c, TS_F32, 2, s);
  CHECK_OK(ts_buffer_write(in, host, sizeof host)); /* transfer 2 */
  for (int k = 0; k < 3 && e1; k++) {
    ts_buffer *outs[1] = {out};
    CHECK_OK(ts_execute(k == 2 ? e2 : e1, &in, outs));
  }
  CHECK_OK(ts_buffer_read(out, host, sizeof host));
  CHECK(ts_metric_data_get("ExecuteTime", &d) == 0 && d.count == 3, "ExecuteTime samples %lld (want 3)",
        (long long)d.count);
  CHECK(ts_metric_data_get("TransferToDeviceTime", &d) == 0 && d.count == 2,
        "TransferToDeviceTime samples %lld (want 2)", (long long)d.count);
  CHECK(ts_metric_data_get("TransferFromDeviceTime", &d) == 0 && d.count == 1,
        "TransferFromDeviceTime samples %lld (want 1)", (long long)d.count);
  CHECK(ts_metric_data_get("PeakMemory.device0", &d) == 0 && d.max >= 0, "PeakMemory.device0 missing");

  /* the same with metrics off: nothing */
  ts_metrics_clear();
  ts_metrics_set_enabled(false);
  ts_buffer *outs[1] = {out};
  CHECK_OK(ts_execute(e1, &in, outs));
  ts_metrics_set_enabled(true);
  CHECK(ts_metric_data_get("ExecuteTime", &d) == 0 && d.count == 0, "recorded while off");

  /* a trace of one execute: kernels on device 0, the execute on the host */
  char path[] = "/tmp/tessel_trace_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd >= 0) close(fd);
  CHECK(!ts_trace_enabled(), "tracing on by default");
  CHECK_OK(ts_trace_start());
  CHECK_OK(ts_execute(e1, &in, outs));
  CHECK_OK(ts_trace_stop(path));
  FILE *f = fopen(path, "r");
  char buf[1 << 16] = {0};
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  CHECK(n > 0 && strstr(buf, "\"traceEvents\""), "trace file:\n%s", buf);
  CHECK(strstr(buf, "\"ph\":\"X\",\"pid\":0,\"tid\":0"), "no event on device 0:\n%s", buf);
  CHECK(strstr(buf, "\"name\":\"device 0\""), "device track not named:\n%s", buf);
  unlink(path);

  ts_buffer_free(in);
  ts_buffer_free(out);
  ts_executable_free(e1);
  ts_executable_free(e2);
  ts_graph_free(g);
  ts_client_free(c);
}

/* Data parallel on 2 devices: x (8, 16) split over the batch, sum of x W:
 * every inserted collective is counted once per device and execute, and
 * the trace has the kernels and collectives of both devices (tid 0, 1). */
static void test_collectives(void) {
  ts_client_options co = {.num_threads = 2, .num_devices = 2};
  ts_client *c = ts_client_new(&co);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return;
  ts_graph *g = ts_graph_new();
  int64_t xs[2] = {8, 16}, ws[2] = {16, 4};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, xs); // (8, 16)
  ts_tensor w = ts_input(g, "w", TS_F32, 2, ws); // (16, 4)
  ts_graph_add_output(g, ts_sum_all(g, ts_matmul(g, x, w)));
  ts_mesh *m = ts_mesh_new(1, (int64_t[]){2}, (const char *[]){"data"}, 2, NULL);
  ts_partition_spec spec;
  CHECK_OK(ts_partition_spec_parse(m, "data,None", &spec));
  ts_sharding *s = ts_sharding_new(m, &spec, 2);
  CHECK_OK(ts_mark_sharding(g, x, s));
  ts_compile_options opts = {.mesh = m};
  ts_executable *e = ts_compile(c, g, &opts);
  CHECK(e != NULL, "%s", ts_last_error());
  int nc = e ? ts_executable_num_collectives(e) : 0;
  CHECK(nc >= 1, "no collective inserted for a batch-split sum");
  float xh[128], wh[64];
  for (int i = 0; i < 128; i++) xh[i] = (float)(i % 7) - 3.0f;
  for (int i = 0; i < 64; i++) wh[i] = (float)(i % 5) * 0.25f;
  ts_buffer *in[2] = {ts_buffer_from_host(c, TS_F32, 2, xs, xh), ts_buffer_from_host(c, TS_F32, 2, ws, wh)};
  ts_buffer *out = ts_buffer_new(c, TS_F32, 0, NULL);
  ts_metrics_clear();
  char path[] = "/tmp/tessel_trace2_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  CHECK_OK(ts_trace_start());
  for (int k = 0; k < 3 && e; k++) {
    ts_buffer *outs[1] = {out};
    CHECK_OK(ts_execute(e, in, outs));
  }
  CHECK_OK(ts_trace_stop(path));
  static const char *const kinds[] = {"AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Permute"};
  int64_t calls = 0, bytes = 0;
  for (int k = 0; k < 5; k++) {
    char name[64];
    snprintf(name, sizeof name, "Collective%s", kinds[k]);
    calls += ts_counter_value(name);
    ts_metric_data d;
    snprintf(name, sizeof name, "Collective%sBytes", kinds[k]);
    if (ts_metric_data_get(name, &d) == 0) bytes += d.total;
  }
  CHECK(calls == (int64_t)nc * 2 * 3, "collective calls %lld, want %d collectives x 2 devices x 3 executes",
        (long long)calls, nc);
  size_t want_bytes = 0;
  for (int i = 0; i < nc; i++) {
    ts_collective_info ci;
    if (ts_executable_collective(e, i, &ci) == 0) want_bytes += ci.bytes;
  }
  CHECK(bytes == (int64_t)want_bytes * 2 * 3, "collective bytes %lld, want %zu x 2 x 3", (long long)bytes, want_bytes);
  FILE *f = fopen(path, "r");
  static char buf[1 << 20];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = 0;
  if (f) fclose(f);
  CHECK(strstr(buf, "\"ph\":\"X\",\"pid\":0,\"tid\":1"), "no event on device 1");
  CHECK(strstr(buf, "\"cat\":\"collective\""), "no collective in the trace");
  unlink(path);
  ts_buffer_free(in[0]);
  ts_buffer_free(in[1]);
  ts_buffer_free(out);
  ts_executable_free(e);
  ts_sharding_free(s);
  ts_mesh_free(m);
  ts_graph_free(g);
  ts_client_free(c);
}

int main(void) {
  ts_test_init("test_metrics", 1);
  test_registry();
  test_threads();
  test_reports();
  test_pipeline_counters();
  test_collectives();
  return ts_test_finish();
}
