/* device.h — the boundary between the runtime and one device backend: a
 * struct of function pointers with a context. The CPU backend (cpu_device.c)
 * is the first; SPMD on one host will create N of them (virtual CPU devices,
 * each driven by its own thread), and other backends plug in the same way.
 * Every pointer a device hands out is device memory, 64-byte aligned. */
#ifndef TS_DEVICE_H
#define TS_DEVICE_H

#include <stddef.h>

#include "ir/ir.h"

#define TS_DEVICE_ALIGN 64

/* What a device runs: an optimized graph, its per-node kernel state and the
 * thread budget. values[i] is node i's memory (resolved by the executor from
 * the memory plan); the device computes every node except INPUT, CONSTANT and
 * RESHAPE (which only name memory that already holds their value). */
typedef struct {
  const ts_graph *g;
  void **state;      /* per node: the backend's cache (kernel state), starts NULL, kept
                        across runs, released with the device's release_state */
  int num_threads;
  int device;            /* the device's id (collectives name it) */
  struct ts_comm *comm;  /* collectives between device threads and processes; NULL on one device */
  /* Per node (NULL: none): a collective (all-reduce, all-gather,
   * reduce-scatter) to start on the communicator's worker and await before
   * its first user runs (or before the next synchronous collective, or at
   * the end of the run). */
  const bool *async;
  /* Per node (NULL: none): an async collective that writes only the
   * caller's buffers and may be left in flight at the end of the run, in
   * `carry` (the device's; runtime/rt.h), where later runs and buffer
   * accesses wait for it. */
  const bool *defer;
  struct rt_carry *carry;
  /* Per node (NULL: none): an async collective whose operand the memory
   * plan keeps unchanged until it is awaited: started without a staging
   * copy (plan/async.c plan_mark_async). */
  const bool *borrow;
  /* Per node (NULL: none): -1, or the all-gather of the update chain that
   * the collective worker runs this node in (plan.h plan_async.chain_of);
   * chains: each chain's gather, hand-off node and reduction, in hand-off
   * order. */
  const int32_t *chain_of;
  const struct plan_chain *chains;
  int n_chains;
} ts_program;

typedef struct ts_device {
  const char *platform; /* "cpu" */
  int id;               /* global device id */
  void *ctx;            /* backend data */
  /* Uninitialized memory of bytes (> 0 or not), 64-byte aligned; NULL on failure. */
  void *(*alloc)(void *ctx, size_t bytes);
  void (*free)(void *ctx, void *p);
  /* Copies host->device, device->host and device->device; 0 or -1. */
  int (*to_device)(void *ctx, void *dst, const void *src, size_t bytes);
  int (*to_host)(void *ctx, void *dst, const void *src, size_t bytes);
  int (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
  /* Runs every node of prog in order; 0 or -1 with the kernel's error. */
  int (*run)(void *ctx, const ts_program *prog, void *const *values);
  /* Releases one node's cached state from prog->state (optional, may be NULL
   * when run never sets any). */
  void (*release_state)(void *ctx, void *state);
  /* Releases ctx (optional, may be NULL). */
  void (*destroy)(void *ctx);
} ts_device;

/* Fills d with the CPU backend (device id `id`). */
int cpu_device_init(ts_device *d, int id);

struct ts_comm;
/* cpu_collective.c: runs collective node `id` of g on this device (its
 * group's every member makes the same call). comm NULL: groups of one only. */
int cpu_collective(const ts_graph *g, int id, const void *const *in, void *out, int device, struct ts_comm *comm);
/* Starts collective node `id` (an all-reduce, all-gather or reduce-scatter)
 * on the communicator's worker and returns its ticket (comm_wait_ticket), or
 * -1. The operand is copied first (into out, or a staging buffer kept in
 * *state, a ts_kstate), so its memory is free when this returns, unless
 * `borrow` (a reduce-scatter whose operand stays unchanged until the wait:
 * read in place); out is written until the wait. */
/* cpu_collective.c: true when the asynchronous collective node `id` may run
 * in line, synchronously by cpu_collective, instead of being started
 * (comm.h comm_start_inline: nothing in flight, small enough or in shared
 * memory), except a small one between hosts with heavy work (a convolution)
 * before its first user: started, that work hides its round trip; the same
 * bits either way. */
bool cpu_collective_inline(const ts_graph *g, int id, int device, struct ts_comm *comm);
/* cpu_collective.c: before collective node `id` runs synchronously: 1 when it
 * goes on the small lane between hosts and may run beside the main lane's
 * started collectives (comm.h comm_wait_lane waited for its own lane's),
 * 0 when every started one must end first, -1 on error. */
int cpu_collective_wait_lane(const ts_graph *g, int id, int device, struct ts_comm *comm);
int64_t cpu_collective_start(const ts_graph *g, int id, const void *in, void *out, int device, struct ts_comm *comm,
                             void **state, bool borrow);

#endif
