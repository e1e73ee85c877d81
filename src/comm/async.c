/* async.c — started collectives (comm.h comm_all_reduce_start,
 * comm_all_gather_start, comm_reduce_scatter_start): one worker per device,
 * created at the first start, runs the device's started collectives while
 * the device thread computes (with several processes it is the thread that
 * makes the MPI calls of those collectives, so their messages progress while
 * the device computes); waits hand back the results and errors.
 *
 * Lanes: a worker has one thread per lane of its communicator (comm.c
 * comm_lane: with a small lane, collectives between processes of at most
 * COMM_LANE_BYTES go on a communicator of their own, with its own sequence
 * numbers, tags and scratch). Each lane thread runs its lane's collectives
 * in start order, so every process makes each lane's calls in the same
 * order and the lanes never match each other's messages; a small
 * collective started after a large one runs beside it instead of after it
 * (on a slow link: the convolutions' 80 KB gradient bucket beside fc1's 4.7
 * MB). comm_wait_ticket waits in start order (that one and every earlier
 * one); comm_wait_alone waits for one job alone, and comm_ticket_ended tells
 * one that ended before earlier ones. */
#include <pthread.h>
#include <sched.h> /* sched_yield: hand_core */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> /* clock_gettime: worker_nap */

#include "comm/comm_internal.h"
#include "comm/net.h" /* net_set_pacer: the worker's exchanges nap while its device computes */
#include "util/config.h" /* env_config: TESSEL_COMM_YIELD */
#include "util/error.h"                /* set_error, ts_last_error */
#include "metrics/metrics_internal.h" /* collective metrics and trace */

enum { QUEUE = 64 }; /* started and not yet awaited, per device */

enum { JOB_ALL_REDUCE, JOB_ALL_GATHER, JOB_REDUCE_SCATTER };

typedef struct {
  int kind;
  const int *group;
  int n;
  ts_dtype dt;
  ts_reduce_kind op;
  const void *in;
  void *out;
  int64_t count;      /* all-reduce: elements; all-gather, reduce-scatter: outer */
  int64_t chunk;      /* reduce-scatter: elements per block row */
  size_t chunk_bytes; /* all-gather */
  int64_t bytes;      /* the operand's bytes (metrics) */
  int lane;           /* comm_lane: 1 the small lane */
  bool ended;         /* run (in [done, started): the slot's job) */
  comm_prologue pre;  /* run first (NULL: none): comm_all_gather_start_after */
  void *pre_ctx;
} job;

enum { LANES = 2 };

/* Runs one job on the worker (the calls the device thread would make). */
static int run_job(ts_comm *c, int device, const job *j) {
  if (j->pre && j->pre(j->pre_ctx) < 0) return -1;
  int64_t t0 = obs_now();
  int rc;
  const char *kind;
  switch (j->kind) {
  case JOB_ALL_GATHER:
    kind = "AllGather";
    rc = comm_all_gather(c, device, j->group, j->n, j->in, j->out, j->count, j->chunk_bytes);
    break;
  case JOB_REDUCE_SCATTER:
    kind = "ReduceScatter";
    rc = comm_reduce_scatter(c, device, j->group, j->n, j->dt, j->op, j->in, j->out, j->count, j->chunk);
    break;
  default:
    kind = "AllReduce";
    rc = comm_all_reduce(c, device, j->group, j->n, j->dt, j->op, j->in, j->out, j->count);
    break;
  }
  if (rc == 0 && t0) obs_collective(kind, device, j->bytes, t0);
  return rc;
}

struct comm_worker;
typedef struct { /* one lane's thread */
  struct comm_worker *w;
  int lane;
  pthread_t th;
  bool running;
  int64_t next; /* the first ticket it has not looked at */
  net_pacer pacer; /* the lane's (worker_urgent, worker_nap) */
  bool busy;       /* running a job (under w->mu) */
  _Atomic int64_t taken; /* 1 + the last ticket it took (hand_core) */
} lane_thread;

typedef struct comm_worker {
  ts_comm *c;
  int device;
  lane_thread lt[LANES];
  int n_lanes;
  pthread_mutex_t mu;
  pthread_cond_t cv;    /* new work, space, a job done, stop */
  job q[QUEUE];
  int64_t started, done; /* tickets: jobs [done, started) are queued, running or ended out of order */
  _Atomic int64_t done_pub; /* done, for waits that spin before they sleep */
  _Atomic int waiting;  /* device threads blocked in comm_wait_ticket: the worker's waits are urgent */
  bool stop, failed;
  char err[1024];       /* the first failure */
  ts_status err_code;   /* its code, re-raised on the waiting thread */
} comm_worker;

/* The worker's exchanges between processes (net.h net_pacer): while its
 * device computes, a poll per nap instead of a hard poll that takes the
 * device's core; the device's wait (comm_wait_ticket) ends the nap. */
static bool worker_urgent(void *ctx) {
  comm_worker *w = ctx;
  return atomic_load_explicit(&w->waiting, memory_order_acquire) > 0;
}

static void worker_nap(void *ctx, long ns) {
  comm_worker *w = ctx;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += ns;
  t.tv_sec += t.tv_nsec / 1000000000L;
  t.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&w->mu);
  if (!atomic_load_explicit(&w->waiting, memory_order_relaxed)) pthread_cond_timedwait(&w->cv, &w->mu, &t);
  pthread_mutex_unlock(&w->mu);
}

static _Thread_local bool t_on_worker;

/* The lane's next job at or after lt->next (lt->next moves past the other
 * lanes' jobs), or -1. Under w->mu. */
static int64_t lane_next(comm_worker *w, lane_thread *lt) {
  if (lt->next < w->done) lt->next = w->done;
  while (lt->next < w->started && w->q[lt->next % QUEUE].lane != lt->lane) lt->next++;
  return lt->next < w->started ? lt->next : -1;
}

static void *worker_main(void *arg) {
  lane_thread *lt = arg;
  comm_worker *w = lt->w;
  t_on_worker = true;
  net_set_pacer(&lt->pacer);
  pthread_mutex_lock(&w->mu);
  for (;;) {
    int64_t t;
    while ((t = lane_next(w, lt)) < 0 && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
    if (t < 0) break; /* stop with nothing left */
    lt->next = t + 1;
    lt->busy = true;
    atomic_store_explicit(&lt->taken, t + 1, memory_order_release);
    job j = w->q[t % QUEUE];
    bool skip = w->failed; /* after a failure the communicator is unusable */
    pthread_mutex_unlock(&w->mu);
    int rc = skip ? -1 : run_job(w->c, w->device, &j);
    pthread_mutex_lock(&w->mu);
    if (rc < 0 && !w->failed) {
      w->failed = true;
      snprintf(w->err, sizeof w->err, "%s", ts_last_error());
      w->err_code = ts_last_error_code();
    }
    w->q[t % QUEUE].ended = true;
    lt->busy = false;
    while (w->done < w->started && w->q[w->done % QUEUE].ended) w->done++;
    atomic_store_explicit(&w->done_pub, w->done, memory_order_release);
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
  for (int l = 0; l < w->n_lanes; l++) pthread_join(w->lt[l].th, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
  d->worker = NULL;
}

bool comm_on_worker(const comm_dev *d) { return (void)d, t_on_worker; }

static comm_worker *worker_of(ts_comm *c, int device) {
  comm_dev *d = &c->dev[device];
  if (d->worker) return d->worker;
  comm_worker *w = calloc(1, sizeof *w);
  if (!w) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "collective start: out of memory");
    return NULL;
  }
  w->c = c;
  w->device = device;
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* worker_nap's deadlines */
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  w->n_lanes = comm_lanes(c);
  for (int l = 0; l < w->n_lanes; l++) {
    /* the main lane's large sends are paced when a small lane runs beside it */
    w->lt[l] = (lane_thread){w, l, 0, false, 0, {worker_urgent, worker_nap, w, l == 0 && w->n_lanes > 1}, false, 0};
    if (pthread_create(&w->lt[l].th, NULL, worker_main, &w->lt[l]) != 0) break;
    w->lt[l].running = true;
  }
  if (!w->lt[w->n_lanes - 1].running) {
    w->n_lanes = 0;
    while (w->n_lanes < LANES && w->lt[w->n_lanes].running) w->n_lanes++;
    d->worker = w;
    comm_worker_free(d);
    set_error("collective start: could not start the collective threads of device %d", device);
    return NULL;
  }
  return d->worker = w;
}

/* Between hosts, the device that starts a collective its idle worker will
 * run yields its core until the worker took the job (at most
 * HAND_CORE_NS): woken on a machine whose cores all compute, the worker
 * otherwise waits for a time slice before its first send, and the link
 * idles meanwhile (2-host CNN DDP at 1 Gbit/s on 2 cores: a mean 1.1 ms,
 * up to 7 ms, from the reduce-scatter's start to its first byte;
 * bench/trace_link_gaps.py). The
 * worker posts its first pieces, then naps while the device computes.
 * Metrics counter CommWorkerHandoffs; TESSEL_COMM_YIELD=0 turns it off. */
enum { HAND_CORE_NS = 300000 };
static void hand_core(lane_thread *lt, int64_t ticket) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load_explicit(&lt->taken, memory_order_acquire) <= ticket) {
    sched_yield();
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > HAND_CORE_NS) break;
  }
  if (TS_METRICS_ON()) obs_count("CommWorkerHandoffs", 1);
}

static int64_t start(ts_comm *c, int device, const job *j) {
  if (!c || device < c->first || device >= c->first + c->n_local) {
    set_error("collective start: device %d is not a device of this process", device);
    return -1;
  }
  comm_worker *w = worker_of(c, device);
  if (!w) return -1;
  pthread_mutex_lock(&w->mu);
  while (w->started - w->done >= QUEUE) pthread_cond_wait(&w->cv, &w->mu);
  w->q[w->started % QUEUE] = *j;
  int lane = w->q[w->started % QUEUE].lane = w->n_lanes > 1 ? j->lane : 0;
  int64_t ticket = w->started++;
  bool idle = !w->lt[lane].busy && lane_next(w, &w->lt[lane]) == ticket; /* nothing of its lane before it */
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (idle && env_config()->comm_yield && comm_spans_hosts(c) && !comm_group_same_host(c, j->group, j->n))
    hand_core(&w->lt[lane], ticket);
  return ticket;
}

int64_t comm_all_reduce_start(ts_comm *c, int device, const int *group, int n, ts_dtype dt, ts_reduce_kind op,
                                 void *buf, int64_t count) {
  job j = {JOB_ALL_REDUCE, group, n, dt, op, buf, buf, count, 0, 0, count * (int64_t)ts_dtype_size(dt), 0, false, NULL, NULL};
  j.lane = c ? comm_lane(c, group, n, (double)j.bytes) : 0;
  return start(c, device, &j);
}

int64_t comm_all_gather_start_after(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                                    int64_t outer, size_t chunk_bytes, comm_prologue pre, void *pre_ctx) {
  job j = {JOB_ALL_GATHER, group, n, TS_F32, TS_REDUCE_SUM, in, out, outer, 0, chunk_bytes,
           outer * (int64_t)chunk_bytes, 0, false, pre, pre_ctx};
  j.lane = c ? comm_lane(c, group, n, (double)outer * n * (double)chunk_bytes) : 0;
  return start(c, device, &j);
}

int64_t comm_all_gather_start(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                              int64_t outer, size_t chunk_bytes) {
  return comm_all_gather_start_after(c, device, group, n, in, out, outer, chunk_bytes, NULL, NULL);
}

int64_t comm_reduce_scatter_start(ts_comm *c, int device, const int *group, int n, ts_dtype dt, ts_reduce_kind op,
                                  const void *in, void *out, int64_t outer, int64_t chunk) {
  job j = {JOB_REDUCE_SCATTER, group, n, dt, op, in, out, outer, chunk, 0,
           outer * n * chunk * (int64_t)ts_dtype_size(dt), 0, false, NULL, NULL};
  j.lane = c ? comm_lane(c, group, n, (double)outer * n * (double)chunk * (double)ts_dtype_size(dt)) : 0;
  return start(c, device, &j);
}

int comm_wait_ticket(ts_comm *c, int device, int64_t ticket) {
  if (!c || device < c->first || device >= c->first + c->n_local)
    return set_error("comm_wait: device %d is not a device of this process", device);
  comm_worker *w = c->dev[device].worker;
  if (!w) return ticket < 0 ? 0 : set_error("comm_wait: device %d started nothing", device);
  /* spin c->spin (comm.c: about 20 us while the devices fit the cores; the
   * barriers of a device without a worker spin longer, barrier_spin) before
   * sleeping: a collective that is about to end is awaited without a wake-up
   * (tens of microseconds) */
  for (int i = 0; i < c->spin && atomic_load_explicit(&w->done_pub, memory_order_acquire) <= ticket; i++)
    SPIN_PAUSE();
  pthread_mutex_lock(&w->mu);
  if (w->done <= ticket && w->done < w->started) {
    atomic_fetch_add_explicit(&w->waiting, 1, memory_order_release);
    pthread_cond_broadcast(&w->cv); /* wakes a napping worker: its exchange is urgent now */
    while (w->done <= ticket && w->done < w->started) pthread_cond_wait(&w->cv, &w->mu);
    atomic_fetch_sub_explicit(&w->waiting, 1, memory_order_relaxed);
  }
  int rc = w->failed ? set_error_code(w->err_code, "%s", w->err) : 0;
  pthread_mutex_unlock(&w->mu);
  return rc;
}

/* Whether ticket t ended (its own job; earlier ones may still run). Under w->mu. */
static bool ended_locked(const comm_worker *w, int64_t t) {
  return t < w->done || t >= w->started || w->q[t % QUEUE].ended;
}

int comm_wait_alone(ts_comm *c, int device, int64_t ticket) {
  if (!c || device < c->first || device >= c->first + c->n_local)
    return set_error("comm_wait: device %d is not a device of this process", device);
  comm_worker *w = c->dev[device].worker;
  if (!w) return ticket < 0 ? 0 : set_error("comm_wait: device %d started nothing", device);
  if (w->n_lanes < 2) return comm_wait_ticket(c, device, ticket); /* one lane: they end in start order */
  for (int i = 0; i < c->spin && atomic_load_explicit(&w->done_pub, memory_order_acquire) <= ticket; i++)
    SPIN_PAUSE();
  pthread_mutex_lock(&w->mu);
  if (!ended_locked(w, ticket)) {
    atomic_fetch_add_explicit(&w->waiting, 1, memory_order_release);
    pthread_cond_broadcast(&w->cv); /* wakes a napping worker: its exchange is urgent now */
    while (!ended_locked(w, ticket)) pthread_cond_wait(&w->cv, &w->mu);
    atomic_fetch_sub_explicit(&w->waiting, 1, memory_order_relaxed);
  }
  int rc = w->failed ? set_error_code(w->err_code, "%s", w->err) : 0;
  pthread_mutex_unlock(&w->mu);
  return rc;
}

int comm_wait_lane(ts_comm *c, int device, const int *group, int n, int64_t bytes) {
  if (!c || device < c->first || device >= c->first + c->n_local || !group || n < 1) return 0;
  if (comm_lane(c, group, n, (double)bytes) != 1) return 0;
  comm_worker *w = c->dev[device].worker;
  if (!w || w->n_lanes < 2) return w ? 0 : 1; /* no worker: nothing in flight */
  pthread_mutex_lock(&w->mu);
  int64_t last = -1; /* the small lane's latest started job; its lane ends them in order */
  for (int64_t t = w->started - 1; t >= w->done && last < 0; t--)
    if (w->q[t % QUEUE].lane == 1) last = t;
  bool failed = w->failed;
  pthread_mutex_unlock(&w->mu);
  if (failed) return comm_wait_all(c, device) < 0 ? -1 : 0;
  if (last >= 0 && comm_wait_alone(c, device, last) < 0) return -1;
  return 1;
}

int comm_wait_all(ts_comm *c, int device) {
  comm_worker *w = c && device >= c->first && device < c->first + c->n_local ? c->dev[device].worker : NULL;
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  int64_t last = w->started - 1;
  pthread_mutex_unlock(&w->mu);
  return comm_wait_ticket(c, device, last);
}

int comm_ticket_ended(ts_comm *c, int device, int64_t ticket) {
  comm_worker *w = c && device >= c->first && device < c->first + c->n_local ? c->dev[device].worker : NULL;
  if (!w) return 1;
  pthread_mutex_lock(&w->mu);
  int ended = ended_locked(w, ticket);
  pthread_mutex_unlock(&w->mu);
  return ended;
}

int comm_ticket_done(ts_comm *c, int device, int64_t ticket) {
  comm_worker *w = c && device >= c->first && device < c->first + c->n_local ? c->dev[device].worker : NULL;
  if (!w) return 1;
  pthread_mutex_lock(&w->mu);
  int done = w->done > ticket || w->done == w->started;
  pthread_mutex_unlock(&w->mu);
  return done;
}

bool comm_start_inline(ts_comm *c, int device, const int *group, int n, int64_t bytes) {
  if (!c || device < c->first || device >= c->first + c->n_local || !group || n < 1) return false;
  comm_dev *d = &c->dev[device];
  int64_t limit = c->inline_remote;
  if (comm_group_local(c, group, n)) {
    limit = c->inline_local;
  } else if (comm_group_same_host(c, group, n)) {
    limit = c->inline_host;
    /* peers were late lately (comm.c host_note): only what goes in line between hosts */
    if (d->host_backoff > 0 && bytes > c->inline_remote) {
      d->host_backoff--;
      limit = c->inline_remote;
    }
  }
  if (limit < 0 || bytes > limit) return false;
  comm_worker *w = d->worker;
  if (!w) return true;
  /* Only this device's thread starts collectives, so an idle worker stays
   * idle until the caller's next start; after a failure the error still
   * comes back from the waits. */
  pthread_mutex_lock(&w->mu);
  bool idle = w->done == w->started && !w->failed;
  pthread_mutex_unlock(&w->mu);
  return idle;
}
