/* comm.c — in-process collectives between the device threads of one client
 * (contract: comm.h).
 *
 * Shared-memory design: no message copies through a channel. In every call
 * each device publishes a pointer to its input in its slot, the group meets
 * at a barrier, then every device reads its peers' buffers directly and
 * writes only its own output; a last barrier keeps the buffers alive until
 * every peer finished reading. All-reduce is a reduce-scatter (device of rank
 * r reduces chunk r of all members, in member order 0..n-1, into its own out)
 * followed by an all-gather of the reduced chunks from the peers' outputs:
 * every input byte is read once, every output byte written once plus one copy.
 *
 * Barriers: every device owns a monotonic arrival counter. Each call makes
 * the caller's counter take the values seq*PHASES + p (seq = calls made so
 * far, identical on all devices since every device makes every call; p = the
 * phase within the call), and a device waits for a peer by waiting until the
 * peer's counter reached the same value. No barrier state is shared by a
 * group, so the groups of one call (rows, columns, ...) and groups that
 * change from call to call need nothing but the counters, and a waiter may
 * wait for just the peers it reads (permute). A waiter spins briefly, then
 * blocks on the peer's condition variable: devices may outnumber cores.
 *
 * Memory order: the counter store is release (seq_cst) and the waiter's load
 * acquire, so everything a device wrote before arriving (its input data, its
 * published pointers, reduced chunks) is visible to a peer that saw it
 * arrive.
 *
 * After a timeout the counters of the group disagree: the communicator is
 * unusable (later calls may fail or mix phases); free it once every device
 * thread has returned, and make a new one. */
#include "comm/comm_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* sysconf: online cores, to size the spin; gethostname */

#include "comm/net.h"    /* permutes to other processes */
#include "comm/reduce.h" /* comm_reduce: the all-reduce / reduce-scatter arithmetic */
#include "metrics/metrics_internal.h" /* CommHostBackoff */
#include "util/config.h" /* TESSEL_COMM_INLINE_BYTES */
#include "util/clock.h" /* util_now_s: how long a collective waited */
#include "util/error.h"


/* c->host: per process, the lowest process index on its host (hostnames
 * exchanged once, at the communicator's creation: a collective call of
 * every process). One process: NULL. */
static int find_hosts(ts_comm *c) {
  if (!c->net) return 0;
  enum { NAME = 256 };
  int P = net_size(c->net);
  char *names = calloc((size_t)P + 1, NAME);
  if (!names || !(c->host = calloc((size_t)P, sizeof *c->host))) {
    free(names);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "comm_new: out of memory for %d processes", P);
  }
  char *mine = names + (size_t)P * NAME; /* scratch: this process's name, NUL-padded */
  if (gethostname(mine, NAME - 1) != 0) snprintf(mine, NAME, "?");
  /* the limit of the client's start-up exchanges over several processes (20 s) */
  int rc = net_allgather(c->net, mine, names, NAME, 20000, "comm_new: exchanging host names");
  for (int p = 0; rc == 0 && p < P; p++) {
    c->host[p] = p;
    for (int q = 0; q < p && c->host[p] == p; q++)
      if (!strncmp(names + (size_t)p * NAME, names + (size_t)q * NAME, NAME)) c->host[p] = c->host[q];
  }
  free(names);
  if (rc == 0) rc = net_set_hosts(c->net, c->host, 20000);
  return rc;
}

ts_comm *comm_new(int n_devices) { return comm_new_world(n_devices, NULL, 0, n_devices, NULL); }

/* A communicator's state, without the host exchange (comm_new_world). */
static ts_comm *comm_make(int n_devices, const int *proc_of, int first, int n_local, struct ts_net *net) {
  if (n_devices < 1) {
    set_error("comm_new: n_devices is %d, must be >= 1", n_devices);
    return NULL;
  }
  if (first < 0 || n_local < 1 || first + n_local > n_devices || (net && !proc_of)) {
    set_error("comm_new: bad layout: %d devices, local [%d, %d)", n_devices, first, first + n_local);
    return NULL;
  }
  ts_comm *c = calloc(1, sizeof *c);
  size_t bytes = (size_t)n_devices * sizeof(comm_dev); /* a multiple of 64 */
  if (!c || !(c->dev = aligned_alloc(64, bytes)) || !(c->proc = calloc((size_t)n_devices, sizeof *c->proc))) {
    if (c) free(c->dev);
    free(c);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "comm_new: out of memory for %d devices", n_devices);
    return NULL;
  }
  memset(c->dev, 0, bytes);
  c->n = n_devices;
  c->first = first;
  c->n_local = n_local;
  c->net = net;
  if (net) memcpy(c->proc, proc_of, (size_t)n_devices * sizeof *c->proc);
  /* hier.c tags: (call sequence mod tag_span) * n_devices + group id */
  int span = (net_tag_ub(net) - 1) / n_devices;
  c->tag_span = span > 1024 ? 1024 : span < 1 ? 1 : span;
  atomic_init(&c->timeout_ms, 0);
  /* Started collectives run in line when that costs nothing the worker would
   * save (async.c): in shared memory a collective is memory copies the cores
   * make anyway, so a worker only adds a hand-off, a staging copy and a
   * thread competing with the devices for the cores (`bench/run_dp.sh`'s
   * data2 against data2-worker rows, quiet but drifting host: CNN 23.8 vs
   * 30.5 ms, but MLP 2.83 vs 2.49 ms; a loaded A/B gave the MLP 2.0-2.2 vs
   * 2.7-2.9 ms: not settled for the MLP). Up to 8 MiB (every bucket, the MLP's and CNN's largest gradients):
   * a larger one is worth hiding when the machine has cores to spare (its
   * start's copy is then small beside the rest of it, which the worker
   * runs). Between processes only small ones (latency, not bandwidth): a
   * large one waits for a late peer, and the worker hides that wait behind
   * the device's computing (measured on a loaded 2-core machine: 2-process
   * DDP all in line 11-16 ms a step, on the worker 3-4 ms; between hosts the
   * wire also works while the device computes). Between processes of one
   * host up to 8 MiB (comm_set_inline_bytes, find_hosts): no wire there, the
   * receiving process's core makes the copy (MPI's shared-memory transport)
   * whichever thread asks, so a worker adds only the hand-off, the staging
   * copy and a thread that competes with the device for its core (measured
   * on 2 cores, 2 processes, bench/run_dp.sh's mpi-*-inl rows, quiet: MLP
   * SPMD/DDP/FSDP 2.60/2.57/2.71 ms all in line vs 2.92/2.97/3.16 on the
   * worker, ResNet-20 SPMD/FSDP 103.0/103.0 vs 106.5/104.7; but the CNN's
   * 4.7 MB gradient in DDP 30.1 vs 26.6 when CMA single copy was on). Since
   * Open MPI copies through its shared-memory queue (net.c MPI set-up), the
   * CNN's 4.7 MB gradient too is faster in line (quiet, 12 of 12
   * interleaved pairs, 4 vs 8 MiB: DDP 26.2-27.3 vs 24.8-25.2 ms): 8 MiB,
   * as in shared memory. But on a loaded machine (other jobs on the
   * cores) peers are late often, and a device that waits for them in line
   * loses its core share: MLP SPMD 35-68 ms a step against 3.7-4.2 ms with
   * the 64 KiB limit, load 16-18, interleaved. So a device whose collective
   * over this host's processes lost more than half of a 40 ms window to
   * waiting for late peers (host_note) goes back to 64 KiB for its next
   * COMM_HOST_BACKOFF decisions (async.c), once past its start-up
   * (COMM_WAIT_STARTUP collectives, whose waits are start-up skew). */
  comm_set_inline_bytes(c, env_inline_bytes(false), env_inline_bytes(false), env_inline_bytes(true));
  /* Spin about 20 us while the devices can all be running, about 1 us when
   * there are more devices than cores (a spinning waiter would steal the core
   * of the device it waits for); a pause costs 10..150 ns depending on the
   * CPU, so measure it.
   * A barrier between the device threads of one process that fit the cores
   * spins longer, about 500 us (barrier_spin): a waiter that sleeps costs the
   * step a wake-up (the last device to arrive signals, then the sleeper waits
   * for the scheduler: tens of microseconds, milliseconds on a busy machine),
   * and the devices of a data-parallel step reach their collectives tens of
   * microseconds apart (trace: 8-20 us medians on the MLP's data=2 step, far
   * more when other processes take the cores). Measured, MLP data=2 (2
   * devices x 1 thread, bench_train_step, 2-core machine shared with other
   * jobs, run at autogroup nice -20): 20 us 2.5-5.6 ms a step, 100 us 2.5-3.0
   * ms, level from 200 us to 2 ms; 1 device x 2 threads 2.4-2.8 ms in the
   * same rounds. Not over processes, whose threads (and collective workers)
   * this process cannot count, nor once a device has a collective worker
   * (comm_sync), nor for waits on a worker (async.c), which needs a core to
   * finish what the device waits for. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double pause_ns = spin_pause_ns();
  bool fit = cores >= n_local;
  c->spin = (int)((fit ? 20000.0 : 1000.0) / pause_ns);
  if (c->spin < 16) c->spin = 16;
  c->barrier_spin = fit && !net ? (int)(500000.0 / pause_ns) : c->spin;
  if (c->barrier_spin < c->spin) c->barrier_spin = c->spin;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  for (int i = 0; i < n_devices; i++) {
    comm_dev *d = &c->dev[i];
    atomic_init(&d->arrived, 0);
    atomic_init(&d->waiters, 0);
    atomic_init(&d->src, NULL);
    atomic_init(&d->dst, NULL);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, &ca);
    if (i < first || i >= first + n_local) continue; /* another process's device: never used here */
    d->srcs = calloc((size_t)n_devices, sizeof *d->srcs);
    d->peers = calloc((size_t)n_devices, sizeof *d->peers);
    d->dsts = calloc((size_t)n_devices, sizeof *d->dsts);
    if (!d->srcs || !d->peers || !d->dsts) {
      pthread_condattr_destroy(&ca);
      c->n = i + 1;
      comm_free(c);
      set_error_code(TS_ERR_OUT_OF_MEMORY, "comm_new: out of memory for %d devices", n_devices);
      return NULL;
    }
  }
  pthread_condattr_destroy(&ca);
  return c;
}

/* The small lane (async.c): a twin of c with its own sequence numbers,
 * scratch and tags (the upper half of c's tag range), for the collectives
 * comm_lane picks. TESSEL_COMM_LANES=0, one process, one host (unless
 * TESSEL_COMM_LANES=1) or too few tags: none. */
static int add_lane(ts_comm *c, const int *proc_of) {
  const ts_env_config *env = env_config();
  if (env->comm_lanes_invalid)
    return set_error("comm_new: TESSEL_COMM_LANES=%s: expected 0 or 1 (unset: between hosts)",
                     env->comm_lanes_invalid);
  if (!c->net || env->comm_lanes == 0 || c->tag_span < 2) return 0;
  int P = net_size(c->net);
  bool hosts = false; /* several: the default lane's groups can exist */
  for (int p = 0; p < P; p++) hosts |= c->host[p] != c->host[0];
  if (!hosts && env->comm_lanes != 1) return 0;
  ts_comm *l = comm_make(c->n, proc_of, c->first, c->n_local, c->net);
  if (!l || !(l->host = malloc((size_t)P * sizeof *l->host))) {
    comm_free(l);
    return -1;
  }
  memcpy(l->host, c->host, (size_t)P * sizeof *l->host);
  c->tag_span /= 2;
  l->tag_span = c->tag_span;
  l->tag_base = c->tag_span * c->n;
  l->lanes_all = c->lanes_all = env->comm_lanes == 1;
  c->lane = l;
  return 0;
}

ts_comm *comm_new_world(int n_devices, const int *proc_of, int first, int n_local, struct ts_net *net) {
  ts_comm *c = comm_make(n_devices, proc_of, first, n_local, net);
  if (c && (find_hosts(c) < 0 || add_lane(c, proc_of) < 0)) {
    comm_free(c);
    return NULL;
  }
  return c;
}

int comm_lanes(const ts_comm *c) { return c && c->lane ? 2 : 1; }

int comm_lane(const ts_comm *c, const int *group, int n, double bytes) {
  if (!c->lane || bytes > COMM_LANE_BYTES || !group || n < 1) return 0;
  for (int i = 0; i < n; i++)
    if (group[i] < 0 || group[i] >= c->n) return 0; /* the call names the bad id */
  if (comm_group_local(c, group, n)) return 0;
  return c->lanes_all || !comm_group_same_host(c, group, n);
}

bool comm_small_lane(const ts_comm *c, const int *group, int n, int64_t bytes) {
  return c && comm_lane(c, group, n, (double)bytes) == 1;
}

/* The communicator a collective of a group spanning processes runs on: the
 * small lane's (metrics counter CommLaneCollectives) or c. host_t0 and
 * host_note still take c: the back-off they keep is c's devices' state,
 * which the in-line decision (async.c) reads for either lane. */
static ts_comm *lane_for(ts_comm *c, const int *group, int n, double bytes) {
  if (!comm_lane(c, group, n, bytes)) return c;
  if (TS_METRICS_ON()) obs_count("CommLaneCollectives", 1);
  return c->lane;
}

void comm_free(ts_comm *c) {
  if (!c) return;
  comm_free(c->lane); /* no worker there: the device's runs both lanes (async.c) */
  for (int i = 0; i < c->n; i++) {
    comm_dev *d = &c->dev[i];
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d->scratch);
    comm_worker_free(d);
    free(d->net_buf);
    free(d->srcs);
    free(d->peers);
    free(d->dsts);
  }
  free(c->dev);
  free(c->proc);
  free(c->host);
  free(c);
}

bool comm_group_same_host(const ts_comm *c, const int *group, int n) {
  int me = c->host ? c->host[c->proc[c->first]] : 0;
  for (int i = 0; c->host && i < n; i++)
    if (c->host[c->proc[group[i]]] != me) return false;
  return true;
}

bool comm_spans_hosts(const ts_comm *c) {
  for (int i = 0; c && c->host && i < c->n; i++)
    if (c->host[c->proc[i]] != c->host[c->proc[c->first]]) return true;
  return false;
}

bool comm_group_local(const ts_comm *c, const int *group, int n) {
  for (int i = 0; c->net && i < n; i++)
    if (group[i] < c->first || group[i] >= c->first + c->n_local) return false;
  return true;
}

int comm_size(const ts_comm *c) { return c ? c->n : 0; }

/* The start of a device thread's collective over processes of this host
 * (0: another kind, or the worker's, whose waits hide behind the device). */
static double host_t0(const ts_comm *c, int device, const int *group, int n) {
  return c->host && comm_group_same_host(c, group, n) && !comm_on_worker(&c->dev[device]) ? util_now_s() : 0;
}

/* Ends what host_t0 started: the call's time beyond its own (bytes) was a
 * wait for late peers. A device that lost more than half of a window to such
 * waits sends its next large started collectives over this host's processes
 * to the worker (comm_internal.h COMM_WAIT_HURTS_NS); its first
 * COMM_WAIT_STARTUP ones are start-up and do not count. Returns rc. */
static int host_note(ts_comm *c, int device, double t0, size_t bytes, int rc) {
  if (t0 <= 0) return rc;
  comm_dev *d = &c->dev[device];
  if (d->noted < COMM_WAIT_STARTUP) { /* start-up skew (comm_internal.h) */
    d->noted++;
    return rc;
  }
  double now = util_now_s(), wait = now - t0 - 1e-9 * ((double)bytes / (1 << 20)) * COMM_SLOW_NS_PER_MB;
  if (d->wait_t0 <= 0 || (t0 - d->wait_t0) * 1e9 > COMM_WAIT_WINDOW_NS) d->wait_t0 = t0, d->waited = 0;
  if (wait > 0) d->waited += wait;
  if (d->waited * 1e9 > COMM_WAIT_HURTS_NS) {
    d->host_backoff = COMM_HOST_BACKOFF;
    d->wait_t0 = 0, d->waited = 0;
    obs_count("CommHostBackoff", 1);
  }
  return rc;
}

void comm_set_inline_bytes(ts_comm *c, int64_t local, int64_t host, int64_t remote) {
  if (!c) return;
  c->inline_local = local > 0 ? local : -1;
  c->inline_host = host > 0 ? host : -1;
  c->inline_remote = remote > 0 ? remote : -1;
}

void comm_set_timeout_ms(ts_comm *c, int ms) {
  if (c) atomic_store(&c->timeout_ms, ms < 0 ? 0 : ms);
  if (c && c->lane) comm_set_timeout_ms(c->lane, ms);
}

/* ---- barrier primitives ---- */

static bool reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

/* Marks `device` as having reached phase value t and wakes its sleepers. The
 * seq_cst store/load pair against the waiter's seq_cst increment/load of
 * `waiters` means either we see the sleeper or the sleeper sees t. */
static void comm_arrive(ts_comm *c, int device, uint32_t t) {
  comm_dev *d = &c->dev[device];
  atomic_store(&d->arrived, t);
  if (atomic_load(&d->waiters) > 0) {
    pthread_mutex_lock(&d->mu);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
  }
}

/* Blocks until peer's counter reaches t: spin (`spin` pauses), then sleep on
 * its cv. Returns 1 on timeout (deadline passed), 0 otherwise. */
static int comm_wait_one(ts_comm *c, int peer, uint32_t t, int spin, const struct timespec *deadline) {
  comm_dev *p = &c->dev[peer];
  for (int i = 0; i < spin; i++) {
    if (reached(atomic_load_explicit(&p->arrived, memory_order_acquire), t)) return 0;
    SPIN_PAUSE();
  }
  int timed_out = 0;
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->waiters, 1);
  while (!reached(atomic_load(&p->arrived), t)) {
    if (deadline) {
      if (pthread_cond_timedwait(&p->cv, &p->mu, deadline) != 0 &&
          !reached(atomic_load(&p->arrived), t)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > deadline->tv_sec ||
            (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec)) {
          timed_out = 1;
          break;
        }
      }
    } else {
      pthread_cond_wait(&p->cv, &p->mu);
    }
  }
  atomic_fetch_sub(&p->waiters, 1);
  pthread_mutex_unlock(&p->mu);
  return timed_out;
}

/* Arrives at phase `phase` of the current call, then waits until each of the
 * np devices in peers (the caller itself is skipped) arrived there too.
 * On timeout: -1 and a message naming the collective and the missing ones. */
int comm_sync(ts_comm *c, int device, const char *what, const int *peers, int np,
                     int phase) {
  uint32_t t = c->dev[device].seq * PHASES + (uint32_t)phase;
  comm_arrive(c, device, t);
  /* the long spin only while the device has no collective worker (async.c):
   * the workers' barriers run beside the computing devices, more threads
   * than cores (measured: the MLP's data2-worker row of bench/run_dp.sh,
   * every collective on the worker, 2.8-3.9 ms a step with 20 us, 10.4 ms
   * with 500 us). The device set its worker before handing it a job. */
  int spin = c->dev[device].worker ? c->spin : c->barrier_spin;
  int ms = atomic_load(&c->timeout_ms);
  struct timespec deadline;
  if (ms > 0) {
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
  }
  for (int i = 0; i < np; i++) {
    if (peers[i] == device) continue;
    if (!comm_wait_one(c, peers[i], t, spin, ms > 0 ? &deadline : NULL)) continue;
    char missing[512];
    size_t len = 0;
    missing[0] = '\0';
    for (int j = 0; j < np && len < sizeof missing - 16; j++) {
      if (peers[j] == device || reached(atomic_load(&c->dev[peers[j]].arrived), t)) continue;
      len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "",
                              peers[j]);
    }
    return set_error_code(TS_ERR_TIMEOUT, "%s: device %d timed out after %d ms (phase %d) waiting for device(s) %s "
                             "that never arrived; the communicator is unusable now",
                             what, device, ms, phase, missing);
  }
  return 0;
}

/* ---- argument checks and helpers ---- */

static int check_device(const ts_comm *c, const char *what, int device) {
  if (!c) return set_error("%s: communicator is NULL", what);
  if (device < 0 || device >= c->n)
    return set_error("%s: device %d out of range [0, %d)", what, device, c->n);
  if (device < c->first || device >= c->first + c->n_local)
    return set_error("%s: device %d is not a device of this process [%d, %d)", what, device, c->first,
                        c->first + c->n_local);
  return 0;
}

/* Validates the group and returns the caller's rank in it (-1 on error). */
static int group_rank(const ts_comm *c, const char *what, int device, const int *group, int n) {
  if (check_device(c, what, device)) return -1;
  if (!group || n < 1 || n > c->n)
    return set_error("%s: group size %d out of range [1, %d]", what, n, c->n);
  int rank = -1;
  for (int i = 0; i < n; i++) {
    if (group[i] < 0 || group[i] >= c->n)
      return set_error("%s: group[%d] = %d is not a device in [0, %d)", what, i, group[i], c->n);
    for (int j = 0; j < i; j++)
      if (group[j] == group[i])
        return set_error("%s: device %d appears twice in the group", what, group[i]);
    if (group[i] == device) rank = i;
  }
  if (rank < 0) return set_error("%s: calling device %d is not in its group", what, device);
  return rank;
}

bool comm_overlaps(const void *a, size_t na, const void *b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return na && nb && x < y + nb && y < x + na;
}

/* A copy of in (bytes) in the device's scratch, for inputs that overlap the
 * caller's output: peers must be able to read the input while the caller
 * writes its output. */
const void *comm_stage(ts_comm *c, int device, const char *what, const void *in, size_t bytes) {
  comm_dev *d = &c->dev[device];
  if (bytes > d->scratch_cap) {
    void *p = malloc(bytes);
    if (!p) {
      set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory staging %zu bytes on device %d", what, bytes, device);
      return NULL;
    }
    free(d->scratch);
    d->scratch = p;
    d->scratch_cap = bytes;
  }
  memcpy(d->scratch, in, bytes);
  return d->scratch;
}

bool comm_mul_ok(int64_t a, int64_t b, size_t *out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow((uint64_t)a, (uint64_t)b, out);
}

/* ---- collectives ---- */

int comm_barrier(ts_comm *c, int device, const int *group, int n) {
  const char *what = "comm_barrier";
  if (group_rank(c, what, device, group, n) < 0) return -1;
  if (!comm_group_local(c, group, n)) return hier_barrier(c, device, group, n);
  c->dev[device].seq++;
  /* The whole point: no member passes before every member arrived. */
  return comm_sync(c, device, what, group, n, 1);
}

int comm_all_reduce(ts_comm *c, int device, const int *group, int n, ts_dtype dt,
                       ts_reduce_kind op, const void *in, void *out, int64_t count) {
  const char *what = "all_reduce";
  int r = group_rank(c, what, device, group, n);
  if (r < 0 || comm_reduce_check(what, dt, op)) return -1;
  size_t es = ts_dtype_size(dt), bytes;
  if (count < 0 || !comm_mul_ok(count, (int64_t)es, &bytes))
    return set_error("%s: bad element count %lld", what, (long long)count);
  if (bytes && (!in || !out)) return set_error("%s: NULL buffer on device %d", what, device);
  if (!comm_group_local(c, group, n)) {
    ts_comm *l = lane_for(c, group, n, (double)bytes);
    double t0 = host_t0(c, device, group, n);
    return host_note(c, device, t0, bytes, hier_all_reduce(l, device, group, n, r, dt, op, in, out, count));
  }
  comm_dev *d = &c->dev[device];
  d->seq++;
  if (n == 1) { /* sum/max/min/mean of one member is the identity */
    if (in != out && bytes) memmove(out, in, bytes);
    return 0;
  }
  /* in == out works in place (chunk r of every member's buffer is read and
   * written by the device of rank r only); a partial overlap is staged. */
  const void *src = in;
  if (in != out && comm_overlaps(in, bytes, out, bytes) && !(src = comm_stage(c, device, what, in, bytes)))
    return -1;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  atomic_store_explicit(&d->dst, out, memory_order_relaxed);
  /* Phase 1: every member's input is ready and its pointers are published
   * (and the caller is done with out: peers write into it from now on). */
  if (comm_sync(c, device, what, group, n, 1)) return -1;

  /* Chunk r = [r*per, min((r+1)*per, count)); per is a multiple of 64 bytes
   * so chunks start on cache lines (the last chunks may be short or empty).
   * We reduce chunk r over the members, in member order, and write it into
   * every member's out: each input byte is read once and each output byte
   * written once. In place is safe: chunk r of any input is read only by us,
   * and each tile is read from every input before it is written anywhere. */
  int64_t align = (int64_t)(64 / es);
  int64_t per = ((count + n - 1) / n + align - 1) / align * align;
  int64_t lo = r * per < count ? r * per : count;
  int64_t hi = lo + per < count ? lo + per : count;
  if (hi > lo) {
    for (int m = 0; m < n; m++) {
      comm_dev *p = &c->dev[group[m]];
      d->srcs[m] = (const char *)atomic_load_explicit(&p->src, memory_order_relaxed) + (size_t)lo * es;
      d->dsts[m] = (char *)atomic_load_explicit(&p->dst, memory_order_relaxed) + (size_t)lo * es;
    }
    comm_reduce(dt, op, n, d->srcs, n, d->dsts, hi - lo, (size_t)(hi - lo) * es >= COMM_NT_BYTES);
  }
  /* Phase 2: every peer finished reading our input and writing its chunk
   * into our out, so out is complete and both buffers are the caller's again. */
  return comm_sync(c, device, what, group, n, 2);
}

int comm_reduce_scatter(ts_comm *c, int device, const int *group, int n, ts_dtype dt,
                           ts_reduce_kind op, const void *in, void *out, int64_t outer,
                           int64_t chunk) {
  const char *what = "reduce_scatter";
  int r = group_rank(c, what, device, group, n);
  if (r < 0 || comm_reduce_check(what, dt, op)) return -1;
  size_t es = ts_dtype_size(dt), row, out_bytes, in_bytes;
  if (!comm_mul_ok(chunk, (int64_t)es, &row) || !comm_mul_ok(outer, (int64_t)row, &out_bytes) ||
      __builtin_mul_overflow(out_bytes, (size_t)n, &in_bytes))
    return set_error("%s: bad layout outer %lld x chunk %lld elements", what, (long long)outer,
                        (long long)chunk);
  if (out_bytes && (!in || !out)) return set_error("%s: NULL buffer on device %d", what, device);
  if (!comm_group_local(c, group, n)) {
    ts_comm *l = lane_for(c, group, n, (double)in_bytes);
    double t0 = host_t0(c, device, group, n);
    return host_note(c, device, t0, in_bytes,
                     hier_reduce_scatter(l, device, group, n, r, dt, op, in, out, outer, chunk));
  }
  comm_dev *d = &c->dev[device];
  d->seq++;
  if (n == 1) { /* (outer, 1, chunk) is (outer, chunk) */
    if (in != out && out_bytes) memmove(out, in, out_bytes);
    return 0;
  }
  const void *src = in;
  if (comm_overlaps(in, in_bytes, out, out_bytes) && !(src = comm_stage(c, device, what, in, in_bytes)))
    return -1;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  /* Phase 1: every member's input is ready and published. */
  if (comm_sync(c, device, what, group, n, 1)) return -1;

  bool nt = out_bytes >= COMM_NT_BYTES && row >= 4096;
  for (int64_t o = 0; o < outer && out_bytes; o++) {
    size_t off = ((size_t)o * (size_t)n + (size_t)r) * row; /* in[o, r, :] */
    for (int m = 0; m < n; m++)
      d->srcs[m] =
          (const char *)atomic_load_explicit(&c->dev[group[m]].src, memory_order_relaxed) + off;
    void *dst = (char *)out + (size_t)o * row;
    comm_reduce(dt, op, n, d->srcs, 1, &dst, chunk, nt);
  }
  /* Phase 2: every peer finished reading our input: the caller may reuse it. */
  return comm_sync(c, device, what, group, n, 2);
}

int comm_all_gather(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                       int64_t outer, size_t chunk_bytes) {
  const char *what = "all_gather";
  int r = group_rank(c, what, device, group, n);
  if (r < 0) return -1;
  size_t in_bytes, out_bytes;
  if (!comm_mul_ok(outer, (int64_t)chunk_bytes, &in_bytes) ||
      __builtin_mul_overflow(in_bytes, (size_t)n, &out_bytes))
    return set_error("%s: bad layout outer %lld x %zu bytes", what, (long long)outer,
                        chunk_bytes);
  if (in_bytes && (!in || !out)) return set_error("%s: NULL buffer on device %d", what, device);
  if (!comm_group_local(c, group, n)) {
    ts_comm *l = lane_for(c, group, n, (double)out_bytes);
    double t0 = host_t0(c, device, group, n);
    return host_note(c, device, t0, out_bytes, hier_all_gather(l, device, group, n, r, in, out, outer, chunk_bytes));
  }
  comm_dev *d = &c->dev[device];
  d->seq++;
  /* In place (in already at out[0, r, :] with outer == 1) needs no staging:
   * we write only the other slots. Any other overlap is staged. */
  bool in_place = outer == 1 && in == (const char *)out + (size_t)r * chunk_bytes;
  const void *src = in;
  if (!in_place && comm_overlaps(in, in_bytes, out, out_bytes) &&
      !(src = comm_stage(c, device, what, in, in_bytes)))
    return -1;
  if (n == 1) {
    if (src != out && in_bytes) memmove(out, src, in_bytes);
    return 0;
  }
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  /* Phase 1: every member's input is ready and published. */
  if (comm_sync(c, device, what, group, n, 1)) return -1;

  for (int m = 0; m < n; m++)
    d->srcs[m] = atomic_load_explicit(&c->dev[group[m]].src, memory_order_relaxed);
  for (int64_t o = 0; o < outer && in_bytes; o++) {
    for (int m = 0; m < n; m++) {
      char *dst = (char *)out + ((size_t)o * (size_t)n + (size_t)m) * chunk_bytes;
      const char *s = (const char *)d->srcs[m] + (size_t)o * chunk_bytes;
      if (dst != s) memcpy(dst, s, chunk_bytes);
    }
  }
  /* Phase 2: every peer finished reading our input: the caller may reuse it. */
  return comm_sync(c, device, what, group, n, 2);
}

int comm_all_to_all(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                       int64_t outer, size_t chunk_bytes) {
  const char *what = "all_to_all";
  int r = group_rank(c, what, device, group, n);
  if (r < 0) return -1;
  size_t row, bytes;
  if (!comm_mul_ok(outer, (int64_t)chunk_bytes, &row) ||
      __builtin_mul_overflow(row, (size_t)n, &bytes))
    return set_error("%s: bad layout outer %lld x %d x %zu bytes", what, (long long)outer, n,
                        chunk_bytes);
  if (bytes && (!in || !out)) return set_error("%s: NULL buffer on device %d", what, device);
  if (!comm_group_local(c, group, n)) return hier_all_to_all(c, device, group, n, r, in, out, outer, chunk_bytes);
  comm_dev *d = &c->dev[device];
  d->seq++;
  if (n == 1) {
    if (in != out && bytes) memmove(out, in, bytes);
    return 0;
  }
  const void *src = in;
  if (comm_overlaps(in, bytes, out, bytes) && !(src = comm_stage(c, device, what, in, bytes))) return -1;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  /* Phase 1: every member's input is ready and published. */
  if (comm_sync(c, device, what, group, n, 1)) return -1;

  for (int m = 0; m < n; m++)
    d->srcs[m] = atomic_load_explicit(&c->dev[group[m]].src, memory_order_relaxed);
  for (int64_t o = 0; o < outer && bytes; o++) {
    for (int m = 0; m < n; m++) { /* out[o, m, :] = in_m[o, r, :] */
      size_t src_off = ((size_t)o * (size_t)n + (size_t)r) * chunk_bytes;
      size_t dst_off = ((size_t)o * (size_t)n + (size_t)m) * chunk_bytes;
      memcpy((char *)out + dst_off, (const char *)d->srcs[m] + src_off, chunk_bytes);
    }
  }
  /* Phase 2: every peer finished reading our input: the caller may reuse it. */
  return comm_sync(c, device, what, group, n, 2);
}

int comm_permute(ts_comm *c, int device, const int *pairs, int n_pairs, const void *in, void *out,
                    size_t bytes) {
  const char *what = "collective_permute";
  if (check_device(c, what, device)) return -1;
  if (n_pairs < 0 || (n_pairs > 0 && !pairs))
    return set_error("%s: bad pair list (%d pairs)", what, n_pairs);
  if (bytes && (!in || !out)) return set_error("%s: NULL buffer on device %d", what, device);
  comm_dev *d = &c->dev[device];
  int source = -1, n_readers = 0; /* readers: the devices that copy our input */
  for (int i = 0; i < n_pairs; i++) {
    int s = pairs[2 * i], t = pairs[2 * i + 1];
    if (s < 0 || s >= c->n || t < 0 || t >= c->n)
      return set_error("%s: pair %d (%d -> %d) names a device outside [0, %d)", what, i, s, t,
                          c->n);
    for (int j = 0; j < i; j++)
      if (pairs[2 * j + 1] == t)
        return set_error("%s: device %d is the target of two pairs (%d and %d)", what, t, j, i);
    if (t == device) source = s;
    if (s == device) d->peers[n_readers++] = t;
  }
  d->seq++;
  /* Targets in other processes get a message; so does a source there. */
  int n_remote = 0;
  for (int i = 0; i < n_readers; i++)
    if (!comm_group_local(c, &d->peers[i], 1)) n_remote++;
  bool remote_source = source >= 0 && !comm_group_local(c, &source, 1);
  /* We write out (a copy or zeros) while our targets read our input: an
   * overlapping input is staged, unless we are our own source in place. */
  const void *src = in;
  if (n_readers && comm_overlaps(in, bytes, out, bytes) && !(source == device && in == out) &&
      !(src = comm_stage(c, device, what, in, bytes)))
    return -1;
  if (n_remote || remote_source) {
    net_msg *m = malloc((size_t)(n_remote + 1) * sizeof *m);
    if (!m) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    int k = 0;
    for (int i = 0; i < n_readers; i++) {
      int t = d->peers[i];
      if (comm_group_local(c, &t, 1)) continue;
      m[k++] = (net_msg){c->proc[t], comm_tag(c, device, t), true, (void *)src, bytes};
      d->peers[i--] = d->peers[--n_readers]; /* only local readers stay */
    }
    if (remote_source) m[k++] = (net_msg){c->proc[source], comm_tag(c, device, device), false, out, bytes};
    int rc = net_exchange(c->net, m, k, atomic_load(&c->timeout_ms), what);
    free(m);
    if (rc < 0) return -1;
  }
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  /* Phase 1: our input is published; wait only for a local source's. */
  bool local_source = source >= 0 && !remote_source;
  if (comm_sync(c, device, what, &source, local_source ? 1 : 0, 1)) return -1;
  if (source < 0) {
    if (bytes) memset(out, 0, bytes);
  } else if (local_source) {
    const void *s = atomic_load_explicit(&c->dev[source].src, memory_order_relaxed);
    if (s != out && bytes) memmove(out, s, bytes); /* memmove: s may be our own staged copy */
  }
  /* Phase 2: our local targets finished reading our input: the caller may
   * reuse it. */
  return comm_sync(c, device, what, d->peers, n_readers, 2);
}
