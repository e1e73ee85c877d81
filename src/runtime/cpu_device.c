/* cpu_device.c — the CPU backend behind device.h: aligned host memory,
 * memcpy transfers, and a run loop calling kernel_run node by node; the
 * collectives the compiler marked async (all-reduces, all-gathers,
 * reduce-scatters) are started on the communicator's worker and awaited by
 * their first user, so they overlap with the nodes in between. */
#include <sched.h> /* sched_yield: a chain's kernels run by the other thread */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* madvise */

#include "comm/comm.h"      /* started all-reduces */
#include "kernels/kernels.h" /* kernel_run, ts_kstate */
#include "plan/plan.h"       /* plan_chain: an update chain's gather, hand-off node and reduction */
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

/* Appends node id's started job (ticket t) to the pending list. */
static int push(pending *p, int32_t id, int64_t t) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    int32_t *nodes = realloc(p->node, (size_t)cap * sizeof *nodes);
    if (nodes) p->node = nodes;
    int64_t *tickets = nodes ? realloc(p->ticket, (size_t)cap * sizeof *tickets) : NULL;
    if (!tickets) return set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory starting collective %d", id);
    p->ticket = tickets;
    p->cap = cap;
  }
  p->node[p->n] = id;
  p->ticket[p->n++] = t;
  return 0;
}

/* Starts the collective of node id on the communicator's worker
 * (cpu_collective_start copies the operand first: its memory may be reused
 * as soon as this returns; unless the plan keeps it until the wait, borrow). */
static int start(pending *p, const ts_program *prog, int32_t id, const void *in, void *out) {
  int64_t t = cpu_collective_start(prog->g, id, in, out, prog->device, prog->comm, &prog->state[id],
                                   prog->borrow && prog->borrow[id]);
  return t < 0 ? -1 : push(p, id, t);
}

/* ---- update chains (plan.h plan_async.chain_of) ----
 * A chain's nodes (a weight block's update) and its all-gather run on the
 * collective worker: handed off after the chain's hand-off node, they run as soon as
 * their reduction ended, not where the schedule put them after the rest of
 * the backward pass. The job keeps its own copy of the memory it touches
 * (values[] is rewritten by the next run); it lives in the gather's node
 * state (an all-gather of one block per member stages nothing). */
typedef struct {
  ts_kstate base;
  const ts_graph *g;
  void **state;
  int device;
  struct ts_comm *comm;
  int32_t *nodes;     /* (n) its kernels, in program order */
  int n;
  int *first;         /* (n + 1) node k's operands are ins[first[k], first[k + 1]) */
  const void **ins;
  void **outs;        /* (n) */
  const void *operand; /* the gather's operand, computed by the chain ... */
  void *slot;          /* ... and gathered from its block of the result */
  size_t bytes;
  int r;              /* the reduction it reads (a started one), or -1 */
  int64_t r_ticket;   /* its ticket, when it was in flight at the hand-off; else -1 */
  int64_t ticket;     /* the gather's, -1 before the first hand-off */
  /* Who runs the kernels: CHAIN_OPEN until the worker (when the reduction
   * ended) or the device (at the end of the run, chain_settle) takes them;
   * they end before the run does, as they use the run's arena. */
  _Atomic int claim;
} chain_job;

enum { CHAIN_OPEN, CHAIN_TAKEN, CHAIN_DONE, CHAIN_FAILED };

static void chain_free(ts_kstate *s) {
  chain_job *j = (chain_job *)s;
  free(j->nodes);
  free(j->first);
  free(j->ins);
  free(j->outs);
  free(j);
}

/* The job of chain c: its kernels (the nodes the plan gave its gather,
 * reshapes aside), in program order, and the reduction it reads. */
static chain_job *chain_new(const ts_program *prog, const plan_chain *c) {
  const ts_graph *g = prog->g;
  chain_job *j = calloc(1, sizeof *j);
  int ins = 0;
  if (!j || !(j->nodes = malloc(((size_t)g->n_nodes + 1) * sizeof *j->nodes))) goto oom;
  j->base.free = chain_free;
  for (int v = 0; v < g->n_nodes; v++)
    if (prog->chain_of[v] == c->gather && v != c->gather && g->nodes[v].op != TS_OP_RESHAPE)
      j->nodes[j->n++] = v, ins += g->nodes[v].n_in;
  if (!(j->first = malloc(((size_t)j->n + 1) * sizeof *j->first)) ||
      !(j->ins = malloc(((size_t)ins + 1) * sizeof *j->ins)) || !(j->outs = malloc(((size_t)j->n + 1) * sizeof *j->outs)))
    goto oom;
  j->first[0] = 0;
  for (int k = 0; k < j->n; k++) j->first[k + 1] = j->first[k] + g->nodes[j->nodes[k]].n_in;
  j->g = g;
  j->state = prog->state;
  j->device = prog->device;
  j->comm = prog->comm;
  j->r = c->reduction;
  j->ticket = -1;
  return j;
oom:
  if (j) chain_free(&j->base);
  set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory handing off update chain %d", c->gather);
  return NULL;
}

static int chain_kernels(chain_job *j, const ts_kctx *kctx) {
  for (int k = 0; k < j->n; k++) {
    int id = j->nodes[k];
    if (kernel_run(j->g, id, j->ins + j->first[k], j->outs[k], (ts_kstate **)&j->state[id], kctx) < 0) return -1;
  }
  if (j->slot != j->operand && j->bytes) memmove(j->slot, j->operand, j->bytes);
  return 0;
}

/* Runs the kernels if nobody took them (rc: the reduction's wait), else
 * waits until the one who did is done. */
static int chain_take(chain_job *j, int rc, const ts_kctx *kctx, bool *took) {
  int open = CHAIN_OPEN;
  *took = atomic_compare_exchange_strong_explicit(&j->claim, &open, CHAIN_TAKEN, memory_order_acq_rel,
                                                  memory_order_acquire);
  if (*took) {
    if (rc == 0) rc = chain_kernels(j, kctx);
    atomic_store_explicit(&j->claim, rc == 0 ? CHAIN_DONE : CHAIN_FAILED, memory_order_release);
    return rc;
  }
  int c;
  while ((c = atomic_load_explicit(&j->claim, memory_order_acquire)) == CHAIN_TAKEN) sched_yield();
  return c == CHAIN_DONE ? rc : set_error("update chain of node %d: its kernels failed", j->nodes[j->n - 1]);
}

/* On the worker, the gather's prologue: once the reduction ended, the
 * chain's kernels (one thread) and its operand into its slot. */
static int chain_run(void *ctx) {
  chain_job *j = ctx;
  int rc = j->r_ticket >= 0 ? comm_wait_alone(j->comm, j->device, j->r_ticket) : 0; /* it may run on another lane */
  ts_kctx kctx = {1, j->device};
  bool took;
  return chain_take(j, rc, &kctx, &took);
}

/* The end of the run: the kernels of each chain it handed off (the first
 * n of prog->chains) ran or run now on the device, whose arena they use
 * (metrics: UpdateChains counts hand-offs, UpdateChainsOnDevice the chains
 * whose kernels the device ran here because the worker had not begun them). */
static int chain_settle(const ts_program *prog, int n, const ts_kctx *kctx) {
  int rc = 0;
  for (int c = 0; c < n; c++) {
    chain_job *j = prog->state[prog->chains[c].gather];
    int r = j->r_ticket >= 0 && atomic_load_explicit(&j->claim, memory_order_acquire) == CHAIN_OPEN
                ? comm_wait_alone(prog->comm, prog->device, j->r_ticket)
                : 0;
    bool took;
    if (chain_take(j, r, kctx, &took) < 0 && rc == 0) rc = -1;
    if (took) obs_count("UpdateChainsOnDevice", 1); /* the worker had not started it: its reduction ended late */
  }
  return rc;
}

static int rank_of(const ts_collective *k, int device) {
  for (int i = 0; i < k->n; i++)
    if (k->ids[i] == device) return i;
  return -1;
}

/* Hands chain G to the worker: its gather's ticket goes to the pending
 * list for G (deferred: the gather may end after the run, its kernels not). */
static int hand_off(pending *p, const ts_program *prog, void *const *values, const plan_chain *c) {
  const ts_graph *g = prog->g;
  int G = c->gather;
  chain_job *j = prog->state[G];
  if (!j) {
    if (!(j = chain_new(prog, c))) return -1;
    prog->state[G] = j;
  }
  if (j->ticket >= 0 && comm_wait_alone(prog->comm, prog->device, j->ticket) < 0) return -1; /* the last run's */
  j->r_ticket = -1;
  atomic_store_explicit(&j->claim, CHAIN_OPEN, memory_order_relaxed); /* published by the start's lock */
  for (int i = 0; i < p->n; i++)
    if (p->node[i] == j->r) j->r_ticket = p->ticket[i];
  for (int k = 0; k < j->n; k++) {
    const ts_node *n = &g->nodes[j->nodes[k]];
    for (int i = 0; i < n->n_in; i++) j->ins[j->first[k] + i] = values[n->in[i]];
    j->outs[k] = values[j->nodes[k]];
  }
  const ts_node *n = &g->nodes[G];
  const ts_collective *coll = n->attr.coll;
  j->bytes = (size_t)ts_shape_numel(g->nodes[n->in[0]].rank, g->nodes[n->in[0]].shape) * ts_dtype_size(n->dtype);
  j->operand = values[n->in[0]];
  int rank = rank_of(coll, prog->device);
  if (rank < 0) return set_error("execute: device %d is not in the group of update chain %d", prog->device, G);
  j->slot = (char *)values[G] + (size_t)rank * j->bytes;
  int64_t t = comm_all_gather_start_after(prog->comm, prog->device, coll->ids, coll->n, j->slot, values[G], 1,
                                          j->bytes, chain_run, j);
  if (t < 0) return -1;
  j->ticket = t;
  obs_count("UpdateChains", 1);
  return push(p, G, t);
}

static int cpu_run(void *ctx, const ts_program *prog, void *const *values) {
  (void)ctx;
  const ts_graph *g = prog->g;
  ts_kctx kctx = {prog->num_threads > 0 ? prog->num_threads : 1, prog->device};
  const void *in_small[16];
  pending p = {0};
  int rc = 0, chain = 0;
  for (int id = 0; id < g->n_nodes && rc == 0; id++) {
    const ts_node *n = &g->nodes[id];
    while (rc == 0 && chain < prog->n_chains && prog->chains[chain].hand_off < id)
      rc = hand_off(&p, prog, values, &prog->chains[chain++]);
    if (rc) break;
    if (prog->chain_of && prog->chain_of[id] >= 0) continue; /* the worker runs it */
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
  while (rc == 0 && chain < prog->n_chains) rc = hand_off(&p, prog, values, &prog->chains[chain++]);
  if (rc == 0 && chain) rc = chain_settle(prog, chain, &kctx);
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
