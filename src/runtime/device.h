/* device.h — the boundary between the runtime and one device backend: a
 * struct of function pointers with a context. The CPU backend (cpu_device.c)
 * is the first; SPMD on one host will create N of them (virtual CPU devices,
 * each driven by its own thread), and other backends plug in the same way.
 * Every pointer a device hands out is device memory, 64-byte aligned. */
#ifndef TS_DEVICE_H
#define TS_DEVICE_H

#include <stddef.h>

#include "ir/ir.h"
#include "kernels/kernels.h" /* ts_kstate: per-node kernel caches */

#define TS_DEVICE_ALIGN 64

/* What a device runs: an optimized graph, its per-node kernel state and the
 * thread budget. values[i] is node i's memory (resolved by the executor from
 * the memory plan); the device computes every node except INPUT, CONSTANT and
 * RESHAPE (which only name memory that already holds their value). */
typedef struct {
  const ts_graph *g;
  ts_kstate **state; /* per node, starts NULL, kept across runs */
  int num_threads;
  int device;            /* the device's id (collectives name it) */
  struct ts_comm *comm;  /* collectives between device threads; NULL on one device */
  /* Per node (NULL: none): an all-reduce to start on the communicator's
   * worker and await before its first user runs (or before the next
   * collective, or at the end of the run). */
  const bool *async;
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
  /* Releases ctx (optional, may be NULL). */
  void (*destroy)(void *ctx);
} ts_device;

/* Fills d with the CPU backend (device id `id`). */
int ts_cpu_device_init(ts_device *d, int id);

#endif
