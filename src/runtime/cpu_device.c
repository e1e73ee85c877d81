/* cpu_device.c — the CPU backend behind device.h: aligned host memory,
 * memcpy transfers, and a run loop calling kernel_run node by node; the
 * collectives the compiler marked async (all-reduces, all-gathers,
 * reduce-scatters) are started on the communicator's worker and awaited by
 * their first user, so they overlap with the nodes in between. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"      /* started all-reduces */
#include "kernels/kernels.h" /* kernel_run, ts_kstate */
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

/* Started all-reduces of one run, in start order (tickets increase). */
typedef struct {
  int32_t *node;
  int64_t *ticket;
  int n, cap;
} pending;

/* The node whose memory t names (reshapes only rename it). */
static int32_t base_of(const ts_graph *g, int32_t t) {
  while (g->nodes[t].op == TS_OP_RESHAPE) t = g->nodes[t].in[0];
  return t;
}

/* Waits until node `id`'s started all-reduce (and every earlier one) is
 * done, if it is pending. */
static int await_node(pending *p, const ts_program *prog, int32_t id) {
  for (int i = 0; i < p->n; i++) {
    if (p->node[i] != id) continue;
    int rc = comm_wait_ticket(prog->comm, prog->device, p->ticket[i]);
    memmove(p->node, p->node + i + 1, (size_t)(p->n - i - 1) * sizeof *p->node);
    memmove(p->ticket, p->ticket + i + 1, (size_t)(p->n - i - 1) * sizeof *p->ticket);
    p->n -= i + 1;
    return rc;
  }
  return 0;
}

static int await_all(pending *p, const ts_program *prog) {
  if (!p->n) return 0;
  p->n = 0;
  return comm_wait_all(prog->comm, prog->device);
}

/* Starts the collective of node id on the communicator's worker
 * (cpu_collective_start copies the operand first: its memory may be reused
 * as soon as this returns). */
static int start(pending *p, const ts_program *prog, int32_t id, const void *in, void *out) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    int32_t *nodes = realloc(p->node, (size_t)cap * sizeof *nodes);
    if (nodes) p->node = nodes;
    int64_t *tickets = nodes ? realloc(p->ticket, (size_t)cap * sizeof *tickets) : NULL;
    if (!tickets) return set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory starting all-reduce %d", id);
    p->ticket = tickets;
    p->cap = cap;
  }
  int64_t t = cpu_collective_start(prog->g, id, in, out, prog->device, prog->comm, &prog->state[id]);
  if (t < 0) return -1;
  p->node[p->n] = id;
  p->ticket[p->n++] = t;
  return 0;
}

static int cpu_run(void *ctx, const ts_program *prog, void *const *values) {
  (void)ctx;
  const ts_graph *g = prog->g;
  ts_kctx kctx = {prog->num_threads > 0 ? prog->num_threads : 1, prog->device};
  const void *in_small[16];
  pending p = {0};
  int rc = 0;
  for (int id = 0; id < g->n_nodes && rc == 0; id++) {
    const ts_node *n = &g->nodes[id];
    if (n->op == TS_OP_INPUT || n->op == TS_OP_CONSTANT || n->op == TS_OP_RESHAPE) continue;
    /* a started all-reduce must be done before a user reads it and before
     * the device makes its next collective call */
    bool async = prog->async && prog->async[id];
    if (p.n && ir_op_is_collective(n->op) && !async) rc = await_all(&p, prog); /* started ones queue in order */
    for (int k = 0; p.n && k < n->n_in && rc == 0; k++) rc = await_node(&p, prog, base_of(g, n->in[k]));
    if (rc) break;
    const void **in = n->n_in <= 16 ? in_small : malloc((size_t)n->n_in * sizeof *in);
    if (!in) {
      rc = set_error_code(TS_ERR_OUT_OF_MEMORY,
                             "execute: out of memory calling node %d (%s)", id, ir_op_name(n->op));
      break;
    }
    for (int k = 0; k < n->n_in; k++) in[k] = values[n->in[k]];
    if (async) {
      int64_t t0 = obs_now();
      rc = start(&p, prog, id, in[0], values[id]);
      if (t0)
        obs_kernel(n->op == TS_OP_ALL_REDUCE   ? "all_reduce (start)"
                   : n->op == TS_OP_ALL_GATHER ? "all_gather (start)"
                                               : "reduce_scatter (start)",
                   prog->device, t0);
    } else {
      int64_t obs_t0 = obs_node_begin(n->op); /* 0 unless tracing (or a collective with metrics) */
      rc = ir_op_is_collective(n->op)
               ? cpu_collective(g, id, in, values[id], prog->device, prog->comm)
               : kernel_run(g, id, in, values[id], (ts_kstate **)&prog->state[id], &kctx);
      obs_node_end(g, id, prog->device, obs_t0);
    }
    if (in != in_small) free(in);
  }
  int wait_rc = await_all(&p, prog); /* also after an error: no worker may outlive the run's memory */
  free(p.node);
  free(p.ticket);
  return rc ? -1 : wait_rc;
}

static void cpu_release_state(void *ctx, void *state) {
  (void)ctx;
  ts_kstate *s = state;
  if (s && s->free) s->free(s);
}

int cpu_device_init(ts_device *d, int id) {
  memset(d, 0, sizeof *d);
  d->platform = "cpu";
  d->id = id;
  d->alloc = cpu_alloc;
  d->free = cpu_free;
  d->to_device = cpu_copy;
  d->to_host = cpu_copy;
  d->copy = cpu_copy;
  d->run = cpu_run;
  d->release_state = cpu_release_state;
  return 0;
}
