/* comm_internal.h — the communicator's state and the shared-memory
 * primitives (comm.c) that the hierarchical collectives (hier.c) build on.
 * Internal to src/comm. */
#ifndef TS_COMM_INTERNAL_H
#define TS_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "comm/comm.h"

struct ts_net;

#include "util/spin.h" /* SPIN_PAUSE: the spins of the barriers and waits */

enum { PHASES = 4 }; /* counter values per call (phases 1..3 used) */

/* Outputs at least this large (per device) are written with non-temporal
 * stores by the reductions: they do not fit in cache and peers read them
 * from memory anyway. */
#define COMM_NT_BYTES ((size_t)1 << 20)

/* One device's slot. The counter and the slot data sit on separate cache
 * lines so that spinning peers do not bounce the published pointers. */
typedef struct {
  _Alignas(64) _Atomic uint32_t arrived; /* last phase value this device reached */
  _Atomic uint32_t waiters;              /* threads blocked on cv for this device */
  pthread_mutex_t mu;                    /* guards the cv sleep/wake handshake only */
  pthread_cond_t cv;
  _Alignas(64) _Atomic(const void *) src; /* published input (or a staged copy) */
  _Atomic(void *) dst;                    /* published output (all-reduce gather phase) */
  /* Owned by the device's thread. */
  uint32_t seq;         /* calls made */
  void *scratch;        /* staging for inputs that overlap the output; grown, kept */
  size_t scratch_cap;   /* bytes */
  const void **srcs;    /* (n_devices) reduction operands of one row */
  void **dsts;          /* (n_devices) all-reduce destinations: the members' outs */
  int *peers;           /* (n_devices) devices to wait for */
  void *net_buf;        /* hier.c: messages to and from other processes; grown, kept */
  struct comm_worker *worker; /* async.c: started all-reduces; NULL until the first */
  size_t net_cap;
  int host_backoff;     /* in-line decisions left that keep large ones between this host's processes on the
                         * worker: set when the device waited long in such collectives (comm.c host_note) */
  double wait_t0;       /* start of the current waiting window (s, util_now_s; 0: none yet) */
  double waited;        /* seconds waited for late peers in that window (host_note) */
  int noted;            /* collectives over this host's processes host_note saw, up to COMM_WAIT_STARTUP */
} comm_dev;

struct ts_comm {
  int n;                  /* devices, global ids 0..n-1 */
  _Atomic int timeout_ms; /* 0 = forever */
  int spin;               /* pause iterations before blocking (about 20 us) */
  int barrier_spin;       /* the same for barrier waits (comm_sync) of a device without a
                           * collective worker: about 500 us in one process (comm.c) */
  comm_dev *dev;          /* (n); only the local devices' entries are used */
  /* Several processes (NULL net: every device is local). */
  struct ts_net *net;
  int *proc;              /* (n) the process of each device */
  int *host;              /* (processes) per process: the lowest process index on its host (NULL: one process) */
  int first, n_local;     /* local devices: [first, first + n_local) */
  int tag_span;           /* tags per group id (hier.c) */
  int tag_base;           /* added to every tag: the small lane's tags are not the main one's */
  struct ts_comm *lane;   /* the small lane's twin (comm_lane); NULL: one lane */
  bool lanes_all;         /* TESSEL_COMM_LANES=1: the small lane for groups over one host's processes too */
  /* async.c: a started collective of at most this many bytes runs in line
   * on the device thread (-1: never); in shared memory, over processes of
   * this host, and over processes of several hosts. */
  int64_t inline_local, inline_host, inline_remote;
};


/* Arrives at phase `phase` of the caller's current call (seq), then waits
 * until each of the np devices in peers (the caller itself skipped) arrived
 * there too; -1 on timeout with a message naming the missing devices. */
int comm_sync(ts_comm *c, int device, const char *what, const int *peers, int np, int phase);
/* A copy of in (bytes) in the device's scratch (inputs that overlap the
 * caller's output); NULL when out of memory. */
const void *comm_stage(ts_comm *c, int device, const char *what, const void *in, size_t bytes);
bool comm_overlaps(const void *a, size_t na, const void *b, size_t nb);
bool comm_mul_ok(int64_t a, int64_t b, size_t *out);
/* True when every device of the group lives in this process. */
bool comm_group_local(const ts_comm *c, const int *group, int n);
/* True when every device of the group lives on this process's host. */
bool comm_group_same_host(const ts_comm *c, const int *group, int n);

/* async.c: stops and joins the device's worker (comm_free). */
void comm_worker_free(comm_dev *d);
/* async.c: true on the device's collective worker thread. */
bool comm_on_worker(const comm_dev *d);
/* A device thread's collective over this host's processes waited for late
 * peers for as long as it took beyond its own time (COMM_SLOW_NS_PER_MB per
 * MiB it moved). When a device waited more than COMM_WAIT_HURTS_NS within a
 * window of COMM_WAIT_WINDOW_NS (more than half of it lost to waiting), it
 * keeps its large started ones on the worker for the next COMM_HOST_BACKOFF
 * in-line decisions (async.c comm_start_inline), where the wait hides behind
 * its computing (comm.c host_note; metrics counter CommHostBackoff). A single
 * late peer on a quiet host (a few ms, once) does not: on a 3 ms step the
 * worker would cost more over the next 256 decisions than the wait did. */
#define COMM_SLOW_NS_PER_MB ((int64_t)500000)
#define COMM_WAIT_WINDOW_NS ((int64_t)40000000)
#define COMM_WAIT_HURTS_NS (COMM_WAIT_WINDOW_NS / 2)
enum { COMM_HOST_BACKOFF = 256 };
/* A device's first COMM_WAIT_STARTUP such collectives do not count: their
 * waits are start-up skew (process launch, connection set-up, every
 * kernel's first-use work in the first steps), not a loaded machine. Each
 * process's first collective waited 20-150 ms for its peer on every
 * 2-process CNN run and so backed off for the whole run (quiet: 36 ms a
 * step against 27 ms without the back-off). */
enum { COMM_WAIT_STARTUP = 16 };

/* The small lane (async.c says why): collectives of a group that spans
 * processes (by default: hosts; TESSEL_COMM_LANES=1: processes of one host
 * too, =0: no lane) that move at most this many bytes (the larger of
 * operand and result) run on c->lane, a twin communicator with its own
 * sequence numbers, scratch and tags, on a worker thread of their own.
 * The same rule on every process, whether started or called (comm.c). */
#define COMM_LANE_BYTES (1 << 20)
/* 1 when the collective goes on the small lane, else 0. */
int comm_lane(const ts_comm *c, const int *group, int n, double bytes);
/* The lanes of c's workers: 2 with a small lane, else 1. */
int comm_lanes(const ts_comm *c);

/* hier.c: the tag of the messages of the caller's current call about
 * device or group `id` (the same in every process). */
int comm_tag(const ts_comm *c, int device, int id);
/* hier.c: the collectives of a group that spans processes (comm.c calls
 * them after validating the arguments; r = the caller's rank in group). */
int hier_barrier(ts_comm *c, int device, const int *group, int n);
/* hier.c: the all-reduce between processes pipelines its reduce-scatter and
 * all-gather in segments of this many bytes of each process's chunk (the
 * metrics counter CommHierSegments adds the segments per chunk). */
enum { HIER_SEGMENT_BYTES = 512 << 10 };
int hier_all_reduce(ts_comm *c, int device, const int *group, int n, int r, ts_dtype dt, ts_reduce_kind op,
                    const void *in, void *out, int64_t count);
int hier_all_gather(ts_comm *c, int device, const int *group, int n, int r, const void *in, void *out,
                    int64_t outer, size_t chunk_bytes);
int hier_reduce_scatter(ts_comm *c, int device, const int *group, int n, int r, ts_dtype dt, ts_reduce_kind op,
                        const void *in, void *out, int64_t outer, int64_t chunk);
int hier_all_to_all(ts_comm *c, int device, const int *group, int n, int r, const void *in, void *out,
                    int64_t outer, size_t chunk_bytes);

#endif
