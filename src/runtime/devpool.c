/* devpool.c — the device threads of a client: one per local device beyond
 * the first, created once, at the client's first multi-device execute (so a
 * mesh too large for the machine is refused by the caller's checks before
 * any thread exists), and kept until the client is freed. Each
 * waits on a condition variable for the next run (a generation counter), runs
 * its device's program and reports back. Creating threads on every execute
 * would cost their start-up and, worse, a fresh OpenMP team per device on
 * every step (libgomp keeps a team per master thread, dropped on exit). */
#include <pthread.h>
#include <stdlib.h>

#include "metrics/metrics_internal.h" /* DeviceThreadsCreated */
#include "runtime/rt.h"

struct rt_pool {
  int want;                  /* workers to start (devices 1..want; device 0 runs on the caller) */
  int n;                     /* workers started */
  pthread_t *th;
  pthread_mutex_t lock;      /* guards everything below */
  pthread_cond_t go, done;   /* go: a new generation (or stop); done: a worker finished */
  uint64_t gen;              /* bumped once per run */
  int pending;               /* workers still running this generation */
  bool stop;
  rt_pool_fn fn;
  void *arg;
  pthread_mutex_t run_lock;  /* one run at a time: runs from several threads queue here */
};

typedef struct {
  rt_pool *p;
  int index; /* 1..n */
} worker_arg;

static void *worker(void *arg) {
  worker_arg w = *(worker_arg *)arg;
  free(arg);
  rt_pool *p = w.p;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->stop && p->gen == seen) pthread_cond_wait(&p->go, &p->lock);
    if (p->stop) break;
    seen = p->gen;
    rt_pool_fn fn = p->fn;
    void *a = p->arg;
    pthread_mutex_unlock(&p->lock);
    fn(a, w.index);
    pthread_mutex_lock(&p->lock);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
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

int rt_pool_run(rt_pool *p, rt_pool_fn fn, void *arg) {
  if (!p || p->want == 0) {
    fn(arg, 0);
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
  p->pending = p->n;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->lock);
  fn(arg, 0); /* device 0 on the calling thread, beside the workers */
  pthread_mutex_lock(&p->lock);
  while (p->pending > 0) pthread_cond_wait(&p->done, &p->lock);
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
  free(p);
}
