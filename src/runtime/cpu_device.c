/* cpu_device.c — the CPU backend behind device.h: aligned host memory,
 * memcpy transfers, and a run loop calling ts_kernel_run node by node. */
#include <stdlib.h>
#include <string.h>

#include "runtime/device.h"
#include "metrics/metrics_internal.h" /* kernel trace events, collective metrics */

static void *cpu_alloc(void *ctx, size_t bytes) {
  (void)ctx;
  size_t n = (bytes + TS_DEVICE_ALIGN - 1) / TS_DEVICE_ALIGN * TS_DEVICE_ALIGN;
  void *p = NULL;
  if (posix_memalign(&p, TS_DEVICE_ALIGN, n ? n : TS_DEVICE_ALIGN) != 0) return NULL;
  return p; /* uninitialized: an arena needs no zeros, and its pages fault in at first use */
}

static void cpu_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (bytes && dst != src) memmove(dst, src, bytes);
  return 0;
}

static int cpu_run(void *ctx, const ts_program *prog, void *const *values) {
  (void)ctx;
  const ts_graph *g = prog->g;
  ts_kctx kctx = {prog->num_threads > 0 ? prog->num_threads : 1, prog->device, prog->comm};
  const void *in_small[16];
  for (int id = 0; id < g->n_nodes; id++) {
    const ts_node *n = &g->nodes[id];
    if (n->op == TS_OP_INPUT || n->op == TS_OP_CONSTANT || n->op == TS_OP_RESHAPE) continue;
    const void **in = n->n_in <= 16 ? in_small : malloc((size_t)n->n_in * sizeof *in);
    if (!in) return ts_set_error("execute: out of memory calling node %d (%s)", id, ts_op_name(n->op));
    for (int k = 0; k < n->n_in; k++) in[k] = values[n->in[k]];
    int64_t obs_t0 = ts_obs_node_begin(n->op); /* 0 unless tracing (or a collective with metrics) */
    int rc = ts_kernel_run(g, id, in, values[id], &prog->state[id], &kctx);
    ts_obs_node_end(g, id, prog->device, obs_t0);
    if (in != in_small) free(in);
    if (rc != 0) return -1;
  }
  return 0;
}

int ts_cpu_device_init(ts_device *d, int id) {
  memset(d, 0, sizeof *d);
  d->platform = "cpu";
  d->id = id;
  d->alloc = cpu_alloc;
  d->free = cpu_free;
  d->to_device = cpu_copy;
  d->to_host = cpu_copy;
  d->copy = cpu_copy;
  d->run = cpu_run;
  return 0;
}
