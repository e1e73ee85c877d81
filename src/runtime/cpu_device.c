/* cpu_device.c — the CPU backend behind device.h: aligned host memory,
 * memcpy transfers, and a run loop calling kernel_run node by node; the
 * collectives the compiler marked async (all-reduces, all-gathers,
 * reduce-scatters) are started on the communicator's worker and awaited by
 * their first user, so they overlap with the nodes in between. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* madvise */

#include "comm/comm.h"      /* started all-reduces */
#include "kernels/kernels.h" /* kernel_run, ts_kstate */
#include "runtime/device.h"
#include "runtime/rt.h"       /* rt_carry: collectives left in flight by earlier runs */
#include "metrics/metrics_internal.h" /* kernel trace events, collective metrics */

enum { CPU_HUGE = 2u << 20 }; /* a transparent huge page */

/* Device memory: TS_DEVICE_ALIGN-aligned; a block of CPU_HUGE bytes or more
 * starts on a huge-page boundary and its whole huge pages are marked
 * MADV_HUGEPAGE (THP in its madvise mode; best effort), so a large buffer
 * (parameters, optimizer state, the arena) sits on 2 MiB pages from its
 * first byte, as the spare memory of a held buffer does (hold.c): a step
 * that reads one copy of the state and writes the other (beside a
 * checkpoint's save) walks two sets of pages, and 4 KiB ones missed the TLB
 * (bench_ckpt_io --hold-ab: the held GPT step's extra CPU). Every training
 * step gains too: 2-4% on the ResNets' steps, fp32 and bf16 (quiet A/B in
 * one run, 3 pairs, the README's "ResNet training step" rows). A page read
 * only through all-zero-mask vector loads never gets its accessed bit back
 * once cleared (a page walk on every load; one 2 MiB page per DAMON sample
 * here): the fused loops read such operands with plain loads first
 * (nan_touch, kernels/nan_order.h; tests/calib_probe_cold.sh). */
static void *cpu_alloc(void *ctx, size_t bytes) {
  (void)ctx;
  size_t n = (bytes + TS_DEVICE_ALIGN - 1) / TS_DEVICE_ALIGN * TS_DEVICE_ALIGN;
  void *p = NULL;
  if (n >= CPU_HUGE) {
    if (posix_memalign(&p, CPU_HUGE, n) != 0) return NULL;
    (void)madvise(p, n & ~(size_t)(CPU_HUGE - 1), MADV_HUGEPAGE);
    return p;
  }
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

/* Waits until node `id`'s started collective is done, if it is pending:
 * that one alone (comm_wait_alone), not every one started before it. A small
 * collective between hosts runs on a lane of its own (comm/async.c) and may
 * end while a large one started earlier still runs; its users go on then
 * (the convolutions' bucket and updates under fc1's transfer). The ones
 * before it stay pending (their users, the run's end or the device's next
 * own collective call wait for them); the ones that ended with it leave the
 * list. */
static int await_node(pending *p, const ts_program *prog, int32_t id) {
  for (int i = 0; i < p->n; i++) {
    if (p->node[i] != id) continue;
    int rc = comm_wait_alone(prog->comm, prog->device, p->ticket[i]);
    int keep = 0; /* the earlier ones still running keep their order */
    for (int j = 0; j < i; j++)
      if (rc || !comm_ticket_done(prog->comm, prog->device, p->ticket[j]))
        p->node[keep] = p->node[j], p->ticket[keep++] = p->ticket[j];
    memmove(p->node + keep, p->node + i + 1, (size_t)(p->n - i - 1) * sizeof *p->node);
    memmove(p->ticket + keep, p->ticket + i + 1, (size_t)(p->n - i - 1) * sizeof *p->ticket);
    p->n -= i + 1 - keep;
    return rc;
  }
  return 0;
}

static int await_all(pending *p, const ts_program *prog) {
  if (!p->n && !rt_carry_pending(prog->carry)) return 0;
  p->n = 0;
  int rc = comm_wait_all(prog->comm, prog->device);
  rt_carry_ended(prog->carry); /* the whole queue ended */
  return rc;
}

static size_t node_bytes(const ts_node *n) {
  return (size_t)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(n->dtype);
}

/* Waits for the collectives earlier runs left in flight that write memory
 * node id reads or writes. */
static int await_carried(const ts_program *prog, void *const *values, int32_t id) {
  const ts_node *n = &prog->g->nodes[id];
  for (int k = 0; k < n->n_in; k++)
    if (rt_carry_wait_range(prog->carry, values[n->in[k]], node_bytes(&prog->g->nodes[n->in[k]])) < 0) return -1;
  return rt_carry_wait_range(prog->carry, values[id], node_bytes(n));
}

/* The end of a run: waits for its started collectives, except those that
 * may end later (prog->defer: results only in the caller's buffers), which
 * go to the device's carry. Each other one is awaited alone
 * (comm_wait_alone), so a deferred one started before a small one on the
 * other lane (fc1's new weight before the convolutions' bucket) stays in
 * flight. */
static int finish(pending *p, const ts_program *prog, void *const *values, bool ok) {
  if (!p->n) return 0; /* what earlier runs left stays in flight */
  int n_defer = 0;
  for (int i = 0; ok && prog->defer && prog->carry && i < p->n; i++) n_defer += prog->defer[p->node[i]];
  if (!n_defer) return await_all(p, prog);
  int rc = 0;
  for (int i = 0; i < p->n && rc == 0; i++)
    if (!prog->defer[p->node[i]]) rc = comm_wait_alone(prog->comm, prog->device, p->ticket[i]);
  const ts_graph *g = prog->g;
  for (int i = 0; i < p->n && rc == 0; i++) /* one that ended meanwhile needs no carry */
    if (prog->defer[p->node[i]] && !comm_ticket_ended(prog->comm, prog->device, p->ticket[i]))
      rc = rt_carry_add(prog->carry, values[p->node[i]], node_bytes(&g->nodes[p->node[i]]), p->ticket[i]);
  if (rc) {
    rt_carry_wait_all(prog->carry);
    comm_wait_all(prog->comm, prog->device);
  }
  p->n = 0;
  return rc;
}

/* Starts the collective of node id on the communicator's worker
 * (cpu_collective_start copies the operand first: its memory may be reused
 * as soon as this returns; unless the plan keeps it until the wait, borrow). */
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
  int64_t t = cpu_collective_start(prog->g, id, in, out, prog->device, prog->comm, &prog->state[id],
                                   prog->borrow && prog->borrow[id]);
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
    /* ... unless it runs in line (nothing in flight; shared memory or small): the
     * synchronous call, no hand-off to the worker, no staging copy */
    if (async && cpu_collective_inline(g, id, prog->device, prog->comm)) async = false;
    /* the worker runs the device's collectives: none may be in flight when
     * the device makes a call itself (started ones queue in order), unless
     * the call goes on the small lane between hosts, which only waits for
     * that lane's (comm.h comm_wait_lane: a sync-bn statistic need not wait
     * for the gradient bucket crossing the link) */
    if (ir_op_is_collective(n->op) && !async) {
      int lane = p.n ? cpu_collective_wait_lane(g, id, prog->device, prog->comm) : 0;
      rc = lane < 0 ? -1 : lane ? 0 : await_all(&p, prog);
    }
    if (rc == 0 && rt_carry_pending(prog->carry)) rc = await_carried(prog, values, id);
    for (int k = 0; p.n && k < n->n_in && rc == 0; k++) rc = await_node(&p, prog, ir_reshape_base(g, n->in[k]));
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
  int wait_rc = finish(&p, prog, values, rc == 0); /* also after an error: no worker may outlive the run's memory */
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
