/* client.c — the client: picks the thread budget (options, then
 * $TESSEL_NUM_THREADS, then all cores) and the number of virtual devices
 * (options, then $TESSEL_CPU_DEVICES, then 1), creates the devices and, for
 * more than one, the communicator their threads share. Under an MPI launcher
 * the processes exchange their device counts and number every device
 * globally, process-major; each process sets up only its own devices. */
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* _exit, pause */

#include "comm/comm.h"
#include "comm/net.h"       /* processes: MPI */
#include "kernels/kernels.h" /* kernels_set_num_threads: the CPU backend's thread pool */
#include "util/hash.h"      /* util_hash64 */
#include "runtime/rt.h"
#include "util/config.h"  /* TESSEL_NUM_THREADS, TESSEL_CPU_DEVICES, TESSEL_COLLECTIVE_TIMEOUT */

/* A count from the environment (util/config.h): 0 with *out unchanged when
 * unset, -1 naming the variable and its value when invalid. */
static int env_count(const char *name, int value, const char *invalid, int max, int *out) {
  if (invalid) return set_error("client: %s='%s' is not a count in [1, %d]", name, invalid, max);
  if (value > 0) *out = value;
  return 0;
}

/* Collective timeout: the option, else $TESSEL_COLLECTIVE_TIMEOUT (seconds),
 * else 120 s alone and 20 s over several processes (a dead or hung peer must
 * end the job well within 30 s). */
static int timeout_ms(const ts_client_options *opts, bool several, int *out) {
  int ms = opts ? opts->collective_timeout_ms : 0;
  const ts_env_config *env = env_config();
  if (ms == 0 && env->collective_timeout_invalid)
    return set_error("client: TESSEL_COLLECTIVE_TIMEOUT='%s' is not seconds in [0, 86400] (0 = none)",
                        env->collective_timeout_invalid);
  if (ms == 0) ms = env->collective_timeout_ms;
  if (ms == 0) ms = several ? 20000 : 120000;
  *out = ms < 0 ? 0 : ms;
  return 0;
}

/* Process p's share of total devices: as even as possible, the first
 * processes taking one more. */
static int share(int total, int procs, int p) { return total / procs + (p < total % procs ? 1 : 0); }

/* Learns every process's local device count and numbers the devices
 * process-major. */
static int layout(ts_client *c, int nlocal) {
  int P = c->process_count, me = c->process_index;
  int *counts = calloc((size_t)P, sizeof *counts);
  if (!counts) return set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory");
  if (net_allgather(c->net, &nlocal, counts, sizeof nlocal, c->timeout_ms,
                    "client: exchanging device counts between processes") < 0) {
    free(counts);
    return -1;
  }
  long total = 0;
  for (int p = 0; p < P; p++) total += counts[p];
  if (total > TS_MAX_DEVICES) {
    free(counts);
    return set_error("client: %ld devices over %d processes (at most %d)", total, P, TS_MAX_DEVICES);
  }
  c->num_devices = (int)total;
  c->num_local = nlocal;
  c->device_process = calloc((size_t)total, sizeof *c->device_process);
  if (!c->device_process) {
    free(counts);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory");
  }
  for (int p = 0, d = 0; p < P; p++)
    for (int i = 0; i < counts[p]; i++, d++) {
      if (p == me && i == 0) c->first_local = d;
      c->device_process[d] = p;
    }
  free(counts);
  return 0;
}

ts_client *ts_client_new(const ts_client_options *opts) {
  int n = opts ? opts->num_threads : 0;
  int ndev = opts ? opts->num_devices : 0, total = opts ? opts->total_devices : 0;
  if (n < 0 || n > TS_MAX_THREADS) {
    set_error("client: num_threads is %d (use 0 for the default, at most %d)", n, TS_MAX_THREADS);
    return NULL;
  }
  if (ndev < 0 || ndev > TS_MAX_DEVICES) {
    set_error("client: num_devices is %d (use 0 for the default, at most %d)", ndev, TS_MAX_DEVICES);
    return NULL;
  }
  if (total < 0 || total > TS_MAX_DEVICES || (total && ndev)) {
    set_error("client: total_devices is %d (0, or at most %d with num_devices 0)", total, TS_MAX_DEVICES);
    return NULL;
  }
  bool failed = false;
  struct ts_net *net = opts && opts->process_local ? NULL : net_world(&failed);
  if (failed) return NULL;
  if (net && net_size(net) == 1) net = NULL; /* a job of one process is a plain process */
  int P = net_size(net), me = net_rank(net);
  if (total && total < P) {
    set_error("client: total_devices %d is fewer than the %d processes", total, P);
    return NULL;
  }
  if (total) ndev = share(total, P, me);
  const ts_env_config *env = env_config();
  if (n == 0 && env_count("TESSEL_NUM_THREADS", env->num_threads, env->num_threads_invalid, TS_MAX_THREADS, &n) < 0)
    return NULL;
  if (ndev == 0 && env_count("TESSEL_CPU_DEVICES", env->cpu_devices, env->cpu_devices_invalid, TS_MAX_DEVICES, &ndev) < 0)
    return NULL;
  if (ndev == 0) ndev = 1;
  int cores = omp_get_num_procs();
  if (n == 0) n = cores;
  if (n > cores) n = cores; /* never more threads than cores */
  if (n < 1) n = 1;
  ts_client *c = calloc(1, sizeof *c);
  if (!c) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory");
    return NULL;
  }
  c->net = net;
  c->process_count = P;
  c->process_index = me;
  if (timeout_ms(opts, P > 1, &c->timeout_ms) < 0 || layout(c, ndev) < 0 ||
      !(c->devs = calloc((size_t)c->num_devices, sizeof *c->devs))) {
    if (!c->devs && c->device_process) set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory");
    ts_client_free(c);
    return NULL;
  }
  c->num_threads = n;
  c->threads_per_device = n / ndev > 1 ? n / ndev : 1;
  for (int i = c->first_local; i < c->first_local + ndev; i++)
    if (cpu_device_init(&c->devs[i], i) < 0) {
      ts_client_free(c);
      return NULL;
    }
  c->dev = c->devs[c->first_local];
  if (c->num_devices > 1 &&
      !(c->comm = comm_new_world(c->num_devices, c->device_process, c->first_local, ndev, net))) {
    ts_client_free(c);
    return NULL;
  }
  /* a device that failed (a kernel error) or a dead process never reaches
   * the next collective: its peers give up with an error instead of hanging */
  if (c->comm) comm_set_timeout_ms(c->comm, c->timeout_ms);
  if (c->comm) {
    if (!(c->carry = calloc((size_t)ndev, sizeof *c->carry))) {
      set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory");
      ts_client_free(c);
      return NULL;
    }
    for (int i = 0; i < ndev; i++)
      if (!(c->carry[i] = rt_carry_new(c->comm, c->first_local + i))) {
        ts_client_free(c);
        return NULL;
      }
  }
  bool bind = opts && opts->bind_cores;
  if ((ndev > 1 || bind) && !(c->pool = rt_pool_new(ndev - 1))) {
    ts_client_free(c);
    return NULL;
  }
  /* several processes sharing one CPU set (mpirun --bind-to none) take
   * consecutive cores: this one starts after the devices of the ones before */
  if (bind && rt_pool_bind(c->pool, c->threads_per_device, me * ndev * c->threads_per_device) < 0) {
    ts_client_free(c);
    return NULL;
  }
  kernels_set_num_threads(c->threads_per_device);
  return c;
}

void ts_client_free(ts_client *c) {
  if (!c) return;
  rt_pool_free(c->pool); /* no device runs any more: the communicator can go */
  for (int i = 0; c->carry && i < c->num_local; i++) rt_carry_free(c->carry[i]); /* what runs left in flight */
  free(c->carry);
  if (c->comm) comm_free(c->comm);
  for (int i = 0; c->devs && i < c->num_devices; i++)
    if (c->devs[i].destroy) c->devs[i].destroy(c->devs[i].ctx);
  free(c->devs);
  free(c->device_process);
  free(c);
}

int ts_client_process_index(const ts_client *c) { return c ? c->process_index : 0; }
int ts_client_process_count(const ts_client *c) { return c ? c->process_count : 1; }
int ts_client_num_local_devices(const ts_client *c) { return c ? c->num_local : 0; }
int ts_client_first_local_device(const ts_client *c) { return c ? c->first_local : 0; }
bool ts_client_is_local_device(const ts_client *c, int device) { return c && rt_is_local(c, device); }

/* What one process contributes to ts_client_check_same. */
typedef struct {
  uint64_t hash;
  uint32_t len;
  char head[244];
} same_rec;

int ts_client_check_same(ts_client *c, const char *what, const char *text) {
  if (!c || !what || !text) return set_error("client_check_same: client, what or text is NULL");
  if (c->process_count == 1) return 0;
  same_rec mine = {0};
  mine.len = (uint32_t)strlen(text);
  mine.hash = util_hash64(text, mine.len, 0);
  snprintf(mine.head, sizeof mine.head, "%s", text);
  same_rec *all = calloc((size_t)c->process_count, sizeof *all);
  if (!all) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  int rc = net_allgather(c->net, &mine, all, sizeof mine, c->timeout_ms, what);
  for (int p = 1; rc == 0 && p < c->process_count; p++)
    if (all[p].hash != all[0].hash || all[p].len != all[0].len)
      rc = set_error_code(TS_ERR_MISMATCH,
                             "%s differs between processes: rank 0 has \"%s\" (hash %016llx) but rank %d has \"%s\" "
                             "(hash %016llx); every process must run the same configuration",
                             what, all[0].head, (unsigned long long)all[0].hash, p, all[p].head,
                             (unsigned long long)all[p].hash);
  free(all);
  return rc;
}

int ts_client_max(ts_client *c, int64_t value, int64_t *max) {
  if (!c || !max) return set_error("client_max: client or max is NULL");
  *max = value;
  if (c->process_count == 1) return 0;
  int64_t *all = calloc((size_t)c->process_count, sizeof *all);
  if (!all) return error_oom("client_max", (size_t)c->process_count * sizeof *all);
  int rc = net_allgather(c->net, &value, all, sizeof value, c->timeout_ms, "client_max");
  for (int p = 0; rc == 0 && p < c->process_count; p++)
    if (all[p] > *max) *max = all[p];
  free(all);
  return rc;
}

/* ts_client_max_start's agreement in flight. */
struct ts_client_max_req {
  int64_t value; /* this process's */
  int64_t *all;  /* every process's (NULL alone) */
  int nproc, timeout_ms;
  net_pending *pending;
};

int ts_client_max_start(ts_client *c, int64_t value, ts_client_max_req **req) {
  if (req) *req = NULL;
  if (!c || !req) return set_error("client_max_start: client or req is NULL");
  ts_client_max_req *r = calloc(1, sizeof *r);
  if (!r) return error_oom("client_max_start", sizeof *r);
  *r = (ts_client_max_req){value, NULL, c->process_count, c->timeout_ms, NULL};
  if (c->process_count > 1) {
    r->all = calloc((size_t)c->process_count, sizeof *r->all);
    if (!r->all) {
      free(r);
      return error_oom("client_max_start", (size_t)c->process_count * sizeof(int64_t));
    }
    if (net_allgather_start(c->net, &r->value, r->all, sizeof r->value, "client_max_finish", &r->pending) < 0) {
      free(r->all);
      free(r);
      return -1;
    }
  }
  *req = r;
  return 0;
}

int ts_client_max_finish(ts_client_max_req *req, int64_t *max) {
  if (!req) return set_error("client_max_finish: req is NULL");
  int64_t m = req->value;
  /* waited for even without max: its receive must not land in freed memory */
  int rc = req->pending ? net_wait(req->pending, req->timeout_ms) : 0;
  for (int p = 0; rc == 0 && req->all && p < req->nproc; p++)
    if (req->all[p] > m) m = req->all[p];
  free(req->all);
  free(req);
  if (!max) return set_error("client_max_finish: max is NULL (the request is finished and freed)");
  *max = m;
  return rc;
}

/* Seconds MPI_Abort may take before the process ends by itself: the abort
 * travels through the launcher (the local daemon, mpirun, the other hosts'
 * daemons), and a partition or a lost host can stop it on the way. */
enum { ABORT_GRACE_S = 5 };

typedef struct {
  int code, rank;
} abort_watch;

static _Thread_local bool t_is_watchdog;
static _Atomic int g_aborting;

/* The watchdog of ts_client_abort: when MPI_Abort has not ended the process
 * after ABORT_GRACE_S, it says so and calls ts_client_abort again, which on
 * this thread ends the process at once. */
static void *abort_watchdog(void *arg) {
  abort_watch w = *(abort_watch *)arg;
  nanosleep(&(struct timespec){ABORT_GRACE_S, 0}, NULL);
  fprintf(stderr,
          "tessel: process %d: MPI_Abort has not ended this process within %d s (the launcher cannot reach "
          "every host: a network partition or a lost host?); exiting by itself with code %d\n",
          w.rank, ABORT_GRACE_S, w.code);
  t_is_watchdog = true;
  ts_client_abort(NULL, w.code);
  return NULL;
}

/* The only function of the library that ends the process (tests/no_exit.sh
 * checks that src/ calls exit and abort nowhere else). With several
 * processes it asks MPI to end the job and, so that the process does not
 * depend on that abort reaching it, starts a watchdog that ends it after
 * ABORT_GRACE_S. */
void ts_client_abort(ts_client *c, int code) {
  if (t_is_watchdog) { /* the watchdog: MPI_Abort did not finish */
    fflush(stdout);
    fflush(stderr);
    _exit(code ? code : 1);
  }
  if (atomic_exchange(&g_aborting, 1)) /* another thread is ending the process (its watchdog, if MPI hangs) */
    for (;;) pause();
  if (c && c->net) {
    static abort_watch w;
    pthread_t th;
    pthread_attr_t attr;
    w = (abort_watch){code ? code : 1, c->process_index};
    if (pthread_attr_init(&attr) == 0) {
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&th, &attr, abort_watchdog, &w) != 0)
        fprintf(stderr, "tessel: process %d: could not start the abort watchdog\n", c->process_index);
      pthread_attr_destroy(&attr);
    }
  }
  net_abort(c ? c->net : NULL, code); /* MPI_Abort: ends every process of the job */
  exit(code);                         /* alone */
}

int ts_client_num_threads(const ts_client *c) { return c ? c->num_threads : 0; }
int ts_client_num_devices(const ts_client *c) { return c ? c->num_devices : 0; }
int ts_client_threads_per_device(const ts_client *c) { return c ? c->threads_per_device : 0; }

int ts_client_device_cpus(const ts_client *c, int device, char *buf, size_t n) {
  if (!c || !buf || n == 0 || !rt_is_local(c, device)) return 0;
  return rt_pool_cpus(c->pool, device - c->first_local, buf, n);
}

const char *ts_client_platform(const ts_client *c) { return c ? c->dev.platform : "none"; }

bool rt_client_spans_hosts(const ts_client *c) { return c && c->comm && comm_spans_hosts(c->comm); }
