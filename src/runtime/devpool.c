/* devpool.c — the device threads of a client: one per local device beyond
 * the first, created once, at the client's first multi-device execute (so a
 * mesh too large for the machine is refused by the caller's checks before
 * any thread exists), and kept until the client is freed. Each
 * waits on a condition variable for the next run (a generation counter), runs
 * its device's program and reports back. Creating threads on every execute
 * would cost their start-up and, worse, a fresh OpenMP team per device on
 * every step (libgomp keeps a team per master thread, dropped on exit).
 *
 * Binding (ts_client_options.bind_cores, rt_pool_bind): device i is pinned to
 * its own cores of the process's CPU set — cpus_per_device of them, from
 * position offset + i * cpus_per_device (offset: the devices of the
 * processes before this one on a shared CPU set). Workers pin themselves
 * when they start, so the threads they create later (their OpenMP team,
 * their collective worker) inherit the same cores; device 0 runs on the
 * caller's thread, which is pinned for the run and given its own mask back
 * after it, so threads the caller creates later are not confined.
 *
 * Hand-offs spin before they sleep: a worker waits about 100 us for the next
 * generation (the host's work between two steps: the batch upload, the loss
 * read-back) and the caller about 50 us for the workers' end of a run (data
 * parallel devices end together, at their last collective), since waking a
 * sleeping thread costs tens of microseconds and, on a loaded machine, more
 * (measured on the MLP's 2 ms data=2 step: device 1 started 80-120 us after
 * device 0, and device 0 waited that long at the first collective). Only
 * when the device threads do not outnumber the cores: a spinning thread
 * would otherwise take the core of one that works. */
#define _GNU_SOURCE /* sched_getaffinity, pthread_setaffinity_np, CPU_* (--bind) */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h> /* sysconf: online cores */


#include "metrics/metrics_internal.h" /* DeviceThreadsCreated */
#include "runtime/rt.h"
#include "util/spin.h" /* SPIN_PAUSE, spin_pause_ns */

struct rt_pool {
  int want;                  /* workers to start (devices 1..want; device 0 runs on the caller) */
  int n;                     /* workers started */
  pthread_t *th;
  pthread_mutex_t lock;      /* guards everything below */
  pthread_cond_t go, done;   /* go: a new generation (or stop); done: a worker finished */
  _Atomic uint64_t gen;      /* bumped once per run (written under lock; read spinning too) */
  _Atomic int pending;       /* workers still running this generation (likewise) */
  int spin_go, spin_done;    /* pause iterations to spin before sleeping (0: none) */
  bool stop;
  rt_pool_fn fn;
  void *arg;
  pthread_mutex_t run_lock;  /* one run at a time: runs from several threads queue here */
  cpu_set_t *cpus;           /* (want + 1) per device when bound; NULL: not bound */
};

typedef struct {
  rt_pool *p;
  int index; /* 1..n */
} worker_arg;

static void *worker(void *arg) {
  worker_arg w = *(worker_arg *)arg;
  free(arg);
  rt_pool *p = w.p;
  if (p->cpus) pthread_setaffinity_np(pthread_self(), sizeof p->cpus[w.index], &p->cpus[w.index]);
  uint64_t seen = 0;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    if (!p->stop && atomic_load(&p->gen) == seen && p->spin_go) {
      pthread_mutex_unlock(&p->lock);
      for (int i = 0; i < p->spin_go && atomic_load_explicit(&p->gen, memory_order_acquire) == seen; i++)
        SPIN_PAUSE();
      pthread_mutex_lock(&p->lock);
    }
    while (!p->stop && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->go, &p->lock);
    if (p->stop) break;
    seen = p->gen;
    rt_pool_fn fn = p->fn;
    void *a = p->arg;
    pthread_mutex_unlock(&p->lock);
    fn(a, w.index);
    pthread_mutex_lock(&p->lock);
    if (atomic_fetch_sub(&p->pending, 1) == 1) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

rt_pool *rt_pool_new(int n_workers) {
  rt_pool *p = calloc(1, sizeof *p);
  if (!p || !(p->th = calloc((size_t)(n_workers > 0 ? n_workers : 1), sizeof *p->th))) {
    free(p);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory for %d device threads", n_workers);
    return NULL;
  }
  p->want = n_workers;
  /* the spins (the file comment), in pauses of the measured cost */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores >= n_workers + 1) {
    double ns = spin_pause_ns();
    p->spin_go = (int)(100000.0 / ns);
    p->spin_done = (int)(50000.0 / ns);
  }
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_init(&p->run_lock, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  return p;
}

/* Starts the workers (once; under run_lock). 0, or -1 with the error set
 * (the workers started so far stay, and the next run tries the rest). */
static int start_workers(rt_pool *p) {
  for (int i = p->n; i < p->want; i++) {
    worker_arg *a = malloc(sizeof *a);
    if (a) *a = (worker_arg){p, i + 1};
    if (!a || pthread_create(&p->th[i], NULL, worker, a) != 0) {
      free(a);
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: could not start the thread of local device %d "
                               "(of %d)", i + 1, p->want + 1);
    }
    p->n = i + 1;
    ts_metrics_add("DeviceThreadsCreated", TS_METRIC_COUNTER, 1);
  }
  return 0;
}

int rt_pool_bind(rt_pool *p, int cpus_per_device, int offset) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0)
    return set_error("bind: cannot read this process's CPU set (sched_getaffinity failed)");
  int list[CPU_SETSIZE], n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &mine)) list[n++] = c;
  int devices = p->want + 1, need = devices * (cpus_per_device > 0 ? cpus_per_device : 1);
  if (need > n)
    return set_error("bind: %d device%s x %d thread%s need %d cores of their own but this process may run on "
                     "%d CPU%s (its affinity mask); use fewer devices or threads, or do not bind",
                     devices, devices == 1 ? "" : "s", need / devices, need / devices == 1 ? "" : "s", need, n,
                     n == 1 ? "" : "s");
  cpu_set_t *cpus = calloc((size_t)devices, sizeof *cpus);
  if (!cpus) return set_error_code(TS_ERR_OUT_OF_MEMORY, "bind: out of memory");
  for (int d = 0; d < devices; d++) {
    CPU_ZERO(&cpus[d]);
    for (int k = 0; k < need / devices; k++) CPU_SET(list[((offset > 0 ? offset : 0) + d * (need / devices) + k) % n], &cpus[d]);
  }
  free(p->cpus);
  p->cpus = cpus;
  return 0;
}

int rt_pool_cpus(const rt_pool *p, int device, char *buf, size_t n) {
  if (!p || !p->cpus || device < 0 || device > p->want || n == 0) return 0;
  size_t used = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && used < n; c++)
    if (CPU_ISSET(c, &p->cpus[device])) used += (size_t)snprintf(buf + used, n - used, used ? ",%d" : "%d", c);
  return 1;
}

/* Device 0 on the calling thread: pinned to its cores for the run. */
static void run_first(rt_pool *p, rt_pool_fn fn, void *arg) {
  cpu_set_t old;
  bool pinned = p && p->cpus && pthread_getaffinity_np(pthread_self(), sizeof old, &old) == 0 &&
                pthread_setaffinity_np(pthread_self(), sizeof p->cpus[0], &p->cpus[0]) == 0;
  fn(arg, 0);
  if (pinned) pthread_setaffinity_np(pthread_self(), sizeof old, &old);
}

int rt_pool_run(rt_pool *p, rt_pool_fn fn, void *arg) {
  if (!p || p->want == 0) {
    run_first(p, fn, arg);
    return 0;
  }
  pthread_mutex_lock(&p->run_lock);
  if (p->n < p->want && start_workers(p) < 0) {
    pthread_mutex_unlock(&p->run_lock);
    return -1;
  }
  pthread_mutex_lock(&p->lock);
  p->fn = fn;
  p->arg = arg;
  atomic_store(&p->pending, p->n);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->lock);
  run_first(p, fn, arg); /* device 0 on the calling thread, beside the workers */
  for (int i = 0; i < p->spin_done && atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++)
    SPIN_PAUSE();
  pthread_mutex_lock(&p->lock);
  while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->lock);
  pthread_mutex_unlock(&p->lock);
  pthread_mutex_unlock(&p->run_lock);
  return 0;
}

void rt_pool_free(rt_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->lock);
  for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->run_lock);
  free(p->th);
  free(p->cpus);
  free(p);
}
