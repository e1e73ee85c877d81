/* report.c — the metrics reports: PyTorch/XLA's metrics_report() text form
 * ("Metric: CompileTime / TotalSamples / Accumulator / Percentiles",
 * "Counter: CachedCompile / Value"), a one-line-per-metric short report, and
 * JSON; plus the JSON string escaping and atomic file write the metrics
 * files share. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> /* stat: regular or special file */
#include <unistd.h> /* fsync, getpid */

#include "util/error.h"
#include "metrics/metrics_internal.h"

void mt_json_string(ts_strbuf *sb, const char *s) {
  sb_printf(sb, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') sb_printf(sb, "\\%c", c);
    else if (c < 0x20) sb_printf(sb, "\\u%04x", c);
    else sb_printf(sb, "%c", c);
  }
  sb_printf(sb, "\"");
}

/* Writes all of data to fd; 0, or errno. */
static int write_all(int fd, const char *data, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    off += (size_t)w;
  }
  return 0;
}

/* A character device (/dev/null, a terminal) or a FIFO: written in place,
 * never replaced. Opened without O_CREAT or O_TRUNC: it exists. */
static int write_in_place(const char *path, const char *data, size_t len, const char *kind) {
  int fd = open(path, O_WRONLY | O_NOCTTY);
  if (fd < 0) return set_error_code(TS_ERR_IO, "write '%s' (%s, written in place): %s", path, kind, strerror(errno));
  int e = write_all(fd, data, len);
  if (close(fd) < 0 && !e) e = errno;
  return e ? set_error_code(TS_ERR_IO, "write '%s' (%s, written in place): %s", path, kind, strerror(e)) : 0;
}

int mt_write_file(const char *path, const char *data, size_t len) {
  /* What path names decides how it is written: a new or regular file is
   * replaced atomically; a special file is never renamed over (as root, a
   * rename over /dev/null would turn the device node into a regular file). */
  struct stat st;
  char *target = NULL; /* a symbolic link: its target is replaced, not the link */
  if (stat(path, &st) == 0) {
    if (S_ISCHR(st.st_mode)) return write_in_place(path, data, len, "a character device");
    if (S_ISFIFO(st.st_mode)) return write_in_place(path, data, len, "a FIFO");
    if (!S_ISREG(st.st_mode))
      return set_error_code(TS_ERR_IO, "write '%s': it is %s, not a regular file; refusing to write to it", path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device"
                                                                                      : "a socket or other special file");
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) && !(target = realpath(path, NULL)))
      return set_error_code(TS_ERR_IO, "write '%s': cannot resolve the symbolic link: %s", path, strerror(errno));
  }
  const char *dst = target ? target : path;
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid()) >= (int)sizeof tmp) {
    free(target);
    return set_error("write '%s': path too long", path);
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    int e = errno;
    free(target);
    return set_error_code(TS_ERR_IO, "write '%s': cannot create '%s': %s", path, tmp, strerror(e));
  }
  int e = write_all(fd, data, len);
  /* fsync before rename: a crash never leaves a renamed but half-written file */
  if (!e && fsync(fd) < 0) e = errno;
  if (close(fd) < 0 && !e) e = errno;
  if (!e && rename(tmp, dst) < 0) e = errno;
  if (e) {
    unlink(tmp);
    set_error_code(TS_ERR_IO, "write '%s': %s", path, strerror(e));
  }
  free(target);
  return e ? -1 : 0;
}

/* 226ms137.620us, 09s969ms486.408us, 006.378us — PyTorch/XLA's time format. */
static void fmt_time(ts_strbuf *sb, int64_t ns) {
  if (ns < 0) {
    sb_printf(sb, "-");
    ns = -ns;
  }
  int64_t s = ns / 1000000000, ms = ns / 1000000 % 1000;
  double us = (double)(ns % 1000000) / 1000.0;
  if (s >= 60) sb_printf(sb, "%02lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else if (s) sb_printf(sb, "%02llds", (long long)s);
  if (s || ms) sb_printf(sb, "%03lldms", (long long)ms);
  sb_printf(sb, "%07.3fus", us);
}

static void fmt_bytes(ts_strbuf *sb, int64_t b) {
  static const char *const u[] = {"B", "KB", "MB", "GB", "TB"};
  double v = (double)b;
  int k = 0;
  while ((v >= 1024.0 || v <= -1024.0) && k < 4) {
    v /= 1024.0;
    k++;
  }
  sb_printf(sb, "%.2f%s", v, u[k]);
}

static void fmt_value(ts_strbuf *sb, ts_metric_kind kind, int64_t v) {
  if (kind == TS_METRIC_TIME) fmt_time(sb, v);
  else if (kind == TS_METRIC_BYTES || kind == TS_METRIC_PEAK) fmt_bytes(sb, v);
  else sb_printf(sb, "%.2f", (double)v);
}

char *ts_metrics_report(void) {
  int n = 0;
  mt_snapshot *s = mt_snapshot_all(&n);
  if (!s) return NULL;
  ts_strbuf sb = {0};
  sb_printf(&sb, "%s", ""); /* an empty registry still gives "" */
  static const char *const pn[9] = {"1", "5", "10", "20", "50", "80", "90", "95", "99"};
  for (int i = 0; i < n; i++) { /* metrics first, then counters, as PyTorch/XLA prints */
    const ts_metric_data *d = &s[i].d;
    if (d->kind == TS_METRIC_COUNTER || d->count == 0) continue;
    sb_printf(&sb, "Metric: %s\n  TotalSamples: %lld\n  Accumulator: ", s[i].name, (long long)d->count);
    fmt_value(&sb, d->kind, d->total);
    if (d->kind == TS_METRIC_PEAK) {
      sb_printf(&sb, "\n  Peak: ");
      fmt_value(&sb, d->kind, d->max);
      sb_printf(&sb, "\n");
      continue;
    }
    sb_printf(&sb, "\n  Percentiles: ");
    for (int k = 0; k < 9; k++) {
      sb_printf(&sb, "%s%s%%=", k ? "; " : "", pn[k]);
      fmt_value(&sb, d->kind, s[i].pct[k]);
    }
    sb_printf(&sb, "\n");
  }
  for (int i = 0; i < n; i++) {
    const ts_metric_data *d = &s[i].d;
    if (d->kind != TS_METRIC_COUNTER || d->count == 0) continue;
    sb_printf(&sb, "Counter: %s\n  Value: %lld\n", s[i].name, (long long)d->total);
  }
  free(s);
  return sb_finish(&sb, "metrics_report");
}

char *ts_metrics_short_report(void) {
  int n = 0;
  mt_snapshot *s = mt_snapshot_all(&n);
  if (!s) return NULL;
  ts_strbuf sb = {0};
  sb_printf(&sb, "%s", "");
  for (int i = 0; i < n; i++) {
    const ts_metric_data *d = &s[i].d;
    if (d->count == 0) continue;
    if (d->kind == TS_METRIC_COUNTER) {
      sb_printf(&sb, "%-32s %lld\n", s[i].name, (long long)d->total);
    } else if (d->kind == TS_METRIC_PEAK) {
      sb_printf(&sb, "%-32s peak ", s[i].name);
      fmt_value(&sb, d->kind, d->max);
      sb_printf(&sb, "\n");
    } else {
      sb_printf(&sb, "%-32s %lld samples, total ", s[i].name, (long long)d->count);
      fmt_value(&sb, d->kind, d->total);
      sb_printf(&sb, ", median ");
      fmt_value(&sb, d->kind, d->median);
      sb_printf(&sb, "\n");
    }
  }
  free(s);
  return sb_finish(&sb, "metrics_short_report");
}

char *ts_metrics_json(void) {
  int n = 0;
  mt_snapshot *s = mt_snapshot_all(&n);
  if (!s) return NULL;
  static const char *const kinds[] = {"counter", "time", "bytes", "value", "peak"};
  ts_strbuf sb = {0};
  sb_printf(&sb, "{\"metrics\":{");
  int first = 1;
  for (int i = 0; i < n; i++) {
    const ts_metric_data *d = &s[i].d;
    if (d->kind == TS_METRIC_COUNTER || d->count == 0) continue;
    sb_printf(&sb, first ? "\n" : ",\n");
    first = 0;
    mt_json_string(&sb, s[i].name);
    sb_printf(&sb,
              ":{\"kind\":\"%s\",\"count\":%lld,\"total\":%lld,\"min\":%lld,\"median\":%lld,\"max\":%lld,"
              "\"p10\":%lld,\"p90\":%lld,\"p99\":%lld}",
              kinds[d->kind], (long long)d->count, (long long)d->total, (long long)d->min,
              (long long)d->median, (long long)d->max, (long long)d->p10, (long long)d->p90, (long long)d->p99);
  }
  sb_printf(&sb, "},\n\"counters\":{");
  first = 1;
  for (int i = 0; i < n; i++) {
    const ts_metric_data *d = &s[i].d;
    if (d->kind != TS_METRIC_COUNTER || d->count == 0) continue;
    sb_printf(&sb, first ? "\n" : ",\n");
    first = 0;
    mt_json_string(&sb, s[i].name);
    sb_printf(&sb, ":%lld", (long long)d->total);
  }
  sb_printf(&sb, "},\n\"time_unit\":\"ns\"}\n");
  free(s);
  return sb_finish(&sb, "metrics_json");
}

int ts_metrics_write_json(const char *path) {
  if (!path) return set_error("metrics_write_json: path is NULL");
  char *j = ts_metrics_json();
  if (!j) return -1;
  int rc = mt_write_file(path, j, strlen(j));
  free(j);
  return rc;
}
