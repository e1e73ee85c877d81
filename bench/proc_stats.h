/* proc_stats.h — where a stretch of a run's time went, from /proc (Linux):
 * per-thread CPU (schedstat's run time; user and system, in ticks), page faults and run-queue delay (time a
 * runnable thread waited for a core: /proc/self/task/TID/schedstat), summed
 * over a fixed set of threads (those that existed at proc_threads_init: a
 * benchmark's training threads, before a save starts its own), and the
 * machine's steal and iowait time (/proc/stat). Header-only, for benchmarks. */
#ifndef TS_BENCH_PROC_STATS_H
#define TS_BENCH_PROC_STATS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PROC_MAX_THREADS = 256 };

typedef struct {
  double cpu_s, user_s, sys_s, delay_s; /* CPU (ns-exact), of it in user and kernel mode (ticks); waiting runnable */
  long minflt, majflt;
  double steal_s, iowait_s; /* the machine's (all CPUs) */
} proc_sample;

typedef struct {
  int n, tid[PROC_MAX_THREADS];
} proc_threads;

/* The process's threads now. */
static inline void proc_threads_init(proc_threads *t) {
  t->n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *de;
  while (d && (de = readdir(d)) && t->n < PROC_MAX_THREADS)
    if (de->d_name[0] != '.') t->tid[t->n++] = atoi(de->d_name);
  if (d) closedir(d);
}

/* Adds thread tid's counters to s (a thread gone since: nothing). */
static inline void proc_add_thread(proc_sample *s, int tid) {
  char p[64], buf[1024];
  long tck = sysconf(_SC_CLK_TCK);
  snprintf(p, sizeof p, "/proc/self/task/%d/stat", tid);
  FILE *f = fopen(p, "r");
  if (!f) return;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *r = strrchr(buf, ')'); /* after the name: state ppid ... (fields 3..) */
  unsigned long minflt = 0, majflt = 0, ut = 0, st = 0;
  if (!r || sscanf(r + 2, "%*c %*d %*d %*d %*d %*d %*u %lu %*u %lu %*u %lu %lu", &minflt, &majflt, &ut, &st) != 4)
    return;
  s->minflt += (long)minflt, s->majflt += (long)majflt;
  s->user_s += (double)ut / (double)tck, s->sys_s += (double)st / (double)tck;
  snprintf(p, sizeof p, "/proc/self/task/%d/schedstat", tid);
  unsigned long long run = 0, wait = 0;
  if ((f = fopen(p, "r"))) {
    if (fscanf(f, "%llu %llu", &run, &wait) == 2) s->cpu_s += (double)run * 1e-9, s->delay_s += (double)wait * 1e-9;
    fclose(f);
  }
}

/* The counters of t's threads and of the machine now. */
static inline proc_sample proc_sample_now(const proc_threads *t) {
  proc_sample s = {0};
  for (int i = 0; i < t->n; i++) proc_add_thread(&s, t->tid[i]);
  FILE *f = fopen("/proc/stat", "r");
  unsigned long long v[8] = {0};
  if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                  &v[7]) == 8) {
    double tck = (double)sysconf(_SC_CLK_TCK);
    s.iowait_s = (double)v[4] / tck, s.steal_s = (double)v[7] / tck;
  }
  if (f) fclose(f);
  return s;
}

/* b - a, field by field. */
static inline proc_sample proc_diff(proc_sample b, proc_sample a) {
  proc_sample d = b;
  d.cpu_s -= a.cpu_s, d.user_s -= a.user_s, d.sys_s -= a.sys_s, d.delay_s -= a.delay_s;
  d.minflt -= a.minflt, d.majflt -= a.majflt, d.steal_s -= a.steal_s, d.iowait_s -= a.iowait_s;
  return d;
}

#endif
