/* async.c — started all-reduces (comm.h comm_all_reduce_start): one
 * worker thread per device, created at the first start, runs the device's
 * started collectives in order while the device thread computes; waits hand
 * back the results and errors. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "util/error.h"                /* set_error, ts_last_error */
#include "metrics/metrics_internal.h" /* collective metrics and trace */

enum { QUEUE = 64 }; /* started and not yet awaited, per device */

typedef struct {
  const int *group;
  int n;
  ts_dtype dt;
  ts_reduce_kind op;
  void *buf;
  int64_t count;
} job;

typedef struct comm_worker {
  ts_comm *c;
  int device;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;    /* new work, space, a job done, stop */
  job q[QUEUE];
  int64_t started, done; /* tickets: jobs [done, started) are queued or running */
  bool stop, failed;
  char err[1024];       /* the first failure */
  ts_status err_code;   /* its code, re-raised on the waiting thread */
} comm_worker;

static void *worker_main(void *arg) {
  comm_worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->stop && w->done == w->started) pthread_cond_wait(&w->cv, &w->mu);
    if (w->done == w->started) break; /* stop with nothing left */
    job j = w->q[w->done % QUEUE];
    bool skip = w->failed; /* after a failure the communicator is unusable */
    pthread_mutex_unlock(&w->mu);
    int rc = -1;
    if (!skip) {
      int64_t t0 = obs_now();
      rc = comm_all_reduce(w->c, w->device, j.group, j.n, j.dt, j.op, j.buf, j.buf, j.count);
      if (rc == 0 && t0)
        obs_collective("AllReduce", w->device, j.count * (int64_t)ts_dtype_size(j.dt), t0);
    }
    pthread_mutex_lock(&w->mu);
    if (rc < 0 && !w->failed) {
      w->failed = true;
      snprintf(w->err, sizeof w->err, "%s", ts_last_error());
      w->err_code = ts_last_error_code();
    }
    w->done++;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

void comm_worker_free(comm_dev *d) {
  comm_worker *w = d->worker;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->th, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
  d->worker = NULL;
}

static comm_worker *worker_of(ts_comm *c, int device) {
  comm_dev *d = &c->dev[device];
  if (d->worker) return d->worker;
  comm_worker *w = calloc(1, sizeof *w);
  if (!w) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "all_reduce_start: out of memory");
    return NULL;
  }
  w->c = c;
  w->device = device;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    set_error("all_reduce_start: could not start the collective thread of device %d", device);
    return NULL;
  }
  return d->worker = w;
}

int64_t comm_all_reduce_start(ts_comm *c, int device, const int *group, int n, ts_dtype dt, ts_reduce_kind op,
                                 void *buf, int64_t count) {
  if (!c || device < c->first || device >= c->first + c->n_local) {
    set_error("all_reduce_start: device %d is not a device of this process", device);
    return -1;
  }
  comm_worker *w = worker_of(c, device);
  if (!w) return -1;
  pthread_mutex_lock(&w->mu);
  while (w->started - w->done >= QUEUE) pthread_cond_wait(&w->cv, &w->mu);
  w->q[w->started % QUEUE] = (job){group, n, dt, op, buf, count};
  int64_t ticket = w->started++;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return ticket;
}

int comm_wait_ticket(ts_comm *c, int device, int64_t ticket) {
  if (!c || device < c->first || device >= c->first + c->n_local)
    return set_error("comm_wait: device %d is not a device of this process", device);
  comm_worker *w = c->dev[device].worker;
  if (!w) return ticket < 0 ? 0 : set_error("comm_wait: device %d started nothing", device);
  pthread_mutex_lock(&w->mu);
  while (w->done <= ticket && w->done < w->started) pthread_cond_wait(&w->cv, &w->mu);
  int rc = w->failed ? set_error_code(w->err_code, "%s", w->err) : 0;
  pthread_mutex_unlock(&w->mu);
  return rc;
}

int comm_wait_all(ts_comm *c, int device) {
  comm_worker *w = c && device >= c->first && device < c->first + c->n_local ? c->dev[device].worker : NULL;
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  int64_t last = w->started - 1;
  pthread_mutex_unlock(&w->mu);
  return comm_wait_ticket(c, device, last);
}
