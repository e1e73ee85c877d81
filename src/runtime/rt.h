/* rt.h — the runtime's internal structs: a client (its devices, thread
 * budget and communicator) and a buffer (device memory with dtype, global
 * shape and, on several devices, one block per device). */
#ifndef TS_RT_H
#define TS_RT_H

#include "runtime/device.h"
#include "tessel/runtime.h"

struct ts_comm;

/* carry.c: a local device's started collectives that a run left in flight
 * (they write only into the caller's buffers); the memory they write is
 * waited for by whatever touches it first. Thread-safe. */
typedef struct rt_carry rt_carry;
rt_carry *rt_carry_new(struct ts_comm *comm, int device);
void rt_carry_free(rt_carry *k); /* waits for what is left */
/* Leaves started collective `ticket` (writing [p, p + bytes)) in flight. */
int rt_carry_add(rt_carry *k, const void *p, size_t bytes, int64_t ticket);
/* Waits for the entries that write memory overlapping [p, p + bytes), each
 * alone (one started before them on the other lane may still run); 0 or -1
 * with the collective's error. */
int rt_carry_wait_range(rt_carry *k, const void *p, size_t bytes);
int rt_carry_wait_all(rt_carry *k);
bool rt_carry_pending(const rt_carry *k); /* entries left (k may be NULL) */
/* Forgets every entry: the caller waited for the device's whole queue. */
void rt_carry_ended(rt_carry *k);

/* devpool.c: the client's device threads, started once at the first run
 * and kept for the client's life. rt_pool_run calls fn(arg, i) for
 * i = 0..n_workers at once, i = 0 on the calling thread, and returns when
 * every call has returned (0), or -1 with the error set when the threads
 * could not be started (fn not called). Runs from several threads are
 * serialized. */
typedef struct rt_pool rt_pool;
typedef void (*rt_pool_fn)(void *arg, int i);
rt_pool *rt_pool_new(int n_workers);
int rt_pool_run(rt_pool *p, rt_pool_fn fn, void *arg);
void rt_pool_free(rt_pool *p);
/* Pins device i of the pool (0..n_workers) to cpus_per_device cores of the
 * process's CPU set of its own, from position offset + i * cpus_per_device
 * (modulo the set). 0, or -1 (error set: the counts) when the set has fewer
 * CPUs than devices x cpus_per_device or cannot be read. Before the first run. */
int rt_pool_bind(rt_pool *p, int cpus_per_device, int offset);
/* The CPUs device `device` is pinned to ("0,1") into buf: 1, or 0 when not bound. */
int rt_pool_cpus(const rt_pool *p, int device, char *buf, size_t n);

struct ts_client {
  ts_device dev;          /* the first local device (every single-device path uses it) */
  ts_device *devs;        /* (num_devices) by global id; only local ones are set up */
  int num_devices;        /* of every process together */
  int num_threads;        /* this process's whole budget */
  int threads_per_device; /* max(1, num_threads / num_local) */
  struct ts_comm *comm;   /* collectives between the device threads; NULL on one device */
  /* Processes (one alone): this one runs devices [first_local, first_local + num_local). */
  int process_index, process_count;
  int first_local, num_local;
  int *device_process;    /* (num_devices) the process of each device */
  struct ts_net *net;     /* NULL alone */
  int timeout_ms;         /* collectives and process exchanges; 0 = none */
  rt_pool *pool;          /* threads of local devices 1..num_local-1; NULL with one (unless bound) */
  rt_carry **carry;       /* (num_local) collectives left in flight by a run; NULL without a communicator */
};

static inline bool rt_is_local(const ts_client *c, int device) {
  return device >= c->first_local && device < c->first_local + c->num_local;
}

struct ts_buffer {
  ts_client *client;
  ts_dtype dtype;
  int rank;
  int64_t shape[TS_MAX_RANK];       /* global */
  size_t bytes;                     /* global: numel * dtype size */
  void *data;                       /* == shards[0] */
  int n_shards;                     /* client->num_devices */
  void **shards;                    /* (n_shards) device memory, each shard_bytes */
  int64_t local_shape[TS_MAX_RANK]; /* padded block shape (== shape when replicated) */
  size_t shard_bytes;
  ts_sharding *sharding;            /* owned; NULL = replicated */
  ts_buffer_hold *hold;             /* hold.c: the hold on the live memory (NULL: none) */
  ts_buffer_hold *spare;            /* hold.c: memory left behind by a move, reused once released */
};

/* "f32[512,784]" into buf. */
const char *rt_shape_str(ts_dtype dt, int rank, const int64_t *shape, char *buf, size_t len);

/* A buffer of the global type laid out with sharding s (NULL = replicated),
 * zero-filled. */
ts_buffer *rt_buffer_new_sharded(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const ts_sharding *s);
/* True when b is laid out as s says (NULL = replicated). */
bool rt_buffer_has_sharding(const ts_buffer *b, const ts_sharding *s);
/* carry.c: waits for the collectives left in flight that write b's blocks
 * (b NULL: all of them); 0 or -1 with their error. */
int rt_client_settle(ts_client *c, const ts_buffer *b);
/* client.c: whether the client's devices span several hosts (its processes
 * learned their hosts when the communicator was made): collectives then
 * cross a network link (compile.c: update chains). */
bool rt_client_spans_hosts(const ts_client *c);

/* hold.c (ts_buffer_hold): see there. */
bool rt_hold_active(ts_buffer *b);
void rt_hold_wait(ts_buffer *b, bool drop_spare);
void rt_hold_buffer_gone(ts_buffer *b);
void **rt_hold_out_memory(ts_buffer *b);
void rt_hold_free_memory(ts_buffer *b, void **mem);
void rt_hold_move(ts_buffer *b, void **mem);
extern long rt_hold_allocs; /* memory allocated for held buffers' new values, so far (tests) */

#endif
