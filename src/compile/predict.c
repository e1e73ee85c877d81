/* predict.c — ts_predict_program: the cost model applied to the program a
 * device really runs. The graph's shardings are propagated and device 0's
 * program is partitioned, optimized and memory-planned by the same functions
 * ts_compile uses (spmd_propagate, spmd_partition, compile_graph,
 * plan_build), without a client or device memory, so any mesh size works
 * (the per-device programs of a mesh have one shape). Time: each kernel of
 * that program by its class (autoshard/'s calibrated throughput and per-op
 * overhead) and each collective by the alpha-beta model of the mesh axes its
 * group spans; all-reduces the compiler would start asynchronously
 * (plan/async.c plan_mark_async's rule) run on a collective worker beside the
 * compute until their first user waits for them. Every collective also waits
 * for the last device of its group (k->coll_wait: measured between kernels,
 * beyond the back-to-back alpha the ring model charges); an asynchronous one
 * waits k->coll_async on the worker instead when it was measured (the
 * worker's time per collective when it runs them one after another: with
 * devices sharing the cores each worker of the group must be scheduled).
 * One the device runs in line waits at least k->coll_long scaled by the
 * device's compute since its previous collective over k->coll_long_after
 * (at most 1): devices taking turns on the cores meet later the more each
 * computed in between (allreduce.N.busy_long_s).
 * As the runtime does (runtime/cpu_device.c, comm/async.c), a collective
 * marked asynchronous runs in line on the device thread, blocking, when the
 * worker is idle and it moves at most env_inline_bytes (8 MiB between devices
 * of one host, 64 KiB for a group spanning a mesh axis across hosts: the
 * options' axis_between_hosts, from the device description's
 * devices_per_host): in-process meshes start none of the MLP's, CNN's or
 * ResNet's on the worker, so none of them hides behind compute (it still
 * waits k->coll_async, measured on in-line ones too). Within a host the
 * prediction takes every group as one process's unless the options give
 * mesh axes spanning processes of the host (tessel inspect --processes): a
 * collective over one waits k->proc_wait for the group's last process (the
 * processes' measured wait between kernels), scaled down when the device
 * computed less than k->proc_after since its previous collective, the
 * step's first one k->proc_step_wait (the processes drift apart between
 * steps), with the links of those processes (allreduce.procsP.*,
 * devices/README.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autoshard/autoshard.h"
#include "compile/compile.h"
#include "mesh/mesh.h"
#include "plan/plan.h"
#include "spmd/partition.h"
#include "util/config.h" /* async collectives, as compile.c */
#include "util/error.h"

static double node_bytes(const ts_node *n) {
  double e = (double)ts_dtype_size(n->dtype);
  for (int d = 0; d < n->rank; d++) e *= (double)n->shape[d];
  return e;
}

/* The mesh axes (a bit mask) a device group spans. */
static uint32_t group_axes(const ts_mesh *m, const ts_collective *cl, bool pairs) {
  uint32_t axes = 0;
  int64_t c0[TS_MESH_MAX_RANK], ci[TS_MESH_MAX_RANK];
  int cnt = pairs ? 2 * cl->n : cl->n;
  for (int i = 0; i < cnt; i++) {
    int pos = -1;
    for (int64_t q = 0; q < m->ndevices && pos < 0; q++)
      if (m->device_ids[q] == cl->ids[i]) pos = (int)q;
    if (pos < 0) continue;
    int64_t r = pos;
    int64_t *c = i == 0 ? c0 : ci;
    for (int a = m->rank - 1; a >= 0; a--) c[a] = r % m->shape[a], r /= m->shape[a];
    if (i > 0)
      for (int a = 0; a < m->rank; a++)
        if (ci[a] != c0[a]) axes |= 1u << a;
  }
  return axes;
}

/* The slowest link and largest latency over the mesh axes a device group
 * spans; *remote: one of them spans hosts; *procs: one spans processes. */
static void group_links(const ts_mesh *m, const autoshard_costs *k, const ts_collective *cl, bool pairs, double *bw,
                        double *lat, bool *remote, bool *procs) {
  uint32_t axes = group_axes(m, cl, pairs);
  *bw = INFINITY, *lat = 0, *remote = false, *procs = false;
  for (int a = 0; a < m->rank; a++)
    if (axes & (1u << a)) {
      *bw = fmin(*bw, k->link_bw[a]), *lat = fmax(*lat, k->latency[a]);
      *remote |= k->remote[a], *procs |= k->procs[a];
    }
  if (*bw == INFINITY) *bw = k->link_bw[0], *lat = k->latency[0], *remote = k->remote[0], *procs = k->procs[0];
}

/* The options' terms for processes of one host that autoshard_costs lacks
 * (ts_auto_shard_options.process_cached_bytes_per_s, process_core_share) and
 * the step's state: the compute after its last collective over processes
 * (`tail`: the next step's first one waits for it as well). */
typedef struct {
  double cached_bw; /* over processes, collectives moving at most k->cache_bytes (0: none) */
  double turns;     /* the turns' excess per second of compute: ceil(1/share) share - 1 (0: none) */
  double tail;      /* seconds */
} proc_terms;

static proc_terms proc_terms_from(const ts_auto_shard_options *o) {
  proc_terms p = {.cached_bw = o->process_cached_bytes_per_s > 0 ? o->process_cached_bytes_per_s : 0};
  double s = o->process_core_share;
  if (s > 0 && s < 1) p.turns = fmax(ceil(1 / s - 1e-9) * s - 1, 0);
  return p;
}

/* A collective over processes of one host: its wait for the group's last
 * process. The step's first (*first, then cleared) k->proc_step_wait when
 * measured (the processes drifted apart since the previous step), at most
 * the turns' excess over the compute since the previous step's last
 * collective over processes (pt->tail + since: processes taking turns on
 * fewer cores finish a step's compute ceil(1/share) times their compute
 * alone apart, the MLP's 3.5 ms on 3 processes of 2 cores 4 ms apart in
 * every other step); else k->proc_wait, scaled down when the device
 * computed less than k->proc_after since its previous collective (`since`:
 * the processes drift apart by about the compute between two meetings). */
static double proc_wait_s(const autoshard_costs *k, const proc_terms *pt, double since, bool *first) {
  bool step = *first && k->proc_step_wait > 0;
  *first = false;
  if (step) return pt->turns > 0 ? fmin(k->proc_step_wait, pt->turns * (pt->tail + since)) : k->proc_step_wait;
  return k->proc_after > 0 && since < k->proc_after ? k->proc_wait * since / k->proc_after : k->proc_wait;
}

/* The alpha-beta part of coll_seconds over a group of gs with links bw / lat
 * (remote: across hosts; within one, autoshard_sync_steps' two group syncs). */
static double coll_link_seconds(const ts_node *n, const ts_node *x, int gs, double bw, double lat, bool remote,
                                double *sent) {
  switch (n->op) {
  case TS_OP_ALL_REDUCE: return autoshard_ring_s(bw, lat, gs, node_bytes(n), 2, remote, sent);
  case TS_OP_ALL_GATHER: return autoshard_ring_s(bw, lat, gs, node_bytes(n), 1, remote, sent);
  case TS_OP_REDUCE_SCATTER: return autoshard_ring_s(bw, lat, gs, node_bytes(x), 1, remote, sent);
  case TS_OP_ALL_TO_ALL: {
    if (gs <= 1) return 0;
    double b = node_bytes(n) * (gs - 1) / gs;
    *sent += b;
    return (remote ? gs - 1 : autoshard_sync_steps(gs, 1, false)) * lat + b / bw;
  }
  case TS_OP_COLLECTIVE_PERMUTE:
    *sent += node_bytes(n);
    return lat + node_bytes(n) / bw;
  default: return 0;
  }
}

/* Seconds and bytes sent of collective node n (operand x) of the local
 * program; blocking: it runs in line on the device thread (not marked
 * asynchronous, or so when its worker is idle); since: the device's compute since its previous collective;
 * *first: no collective over processes yet in the step (proc_wait_s). */
static double coll_seconds(const ts_mesh *m, const autoshard_costs *k, const proc_terms *pt, const ts_node *n,
                           const ts_node *x, bool async, bool blocking, double since, bool *first, double *sent) {
  if (!n->attr.coll || !m) return 0;
  int gs = n->attr.coll->n;
  double bw, lat;
  bool remote, procs;
  group_links(m, k, n->attr.coll, n->op == TS_OP_COLLECTIVE_PERMUTE, &bw, &lat, &remote, &procs);
  /* over processes, buffers in the cache: the in-cache bandwidth */
  if (procs && pt->cached_bw > 0 && k->cache_bytes > 0 && fmax(node_bytes(n), node_bytes(x)) <= k->cache_bytes)
    bw = pt->cached_bw;
  /* an asynchronous one (on the collective worker) waits k->coll_async when
   * measured; one over processes the processes' wait when measured */
  double wait = gs < 2 ? 0 : procs && k->proc_wait > 0 ? proc_wait_s(k, pt, since, first)
                : async && k->coll_async > 0 ? k->coll_async : k->coll_wait;
  /* a blocking one: devices taking turns on the cores meet later the more
   * each computed since they last met (k->coll_long) */
  if (gs >= 2 && !procs && blocking && k->coll_long > 0)
    wait = fmax(wait, k->coll_long * fmin(1, since / k->coll_long_after));
  return wait + coll_link_seconds(n, x, gs, bw, lat, remote, sent);
}

/* compile.c's mark_async rule: an all-reduce, all-gather or reduce-scatter
 * of a group of 2 or more whose first user is not the next node run.
 * first_use: per node (reshapes seen through). */
static bool is_async(const ts_graph *g, int i, const int *first_use, bool several) {
  const ts_node *n = &g->nodes[i];
  bool startable = n->op == TS_OP_ALL_REDUCE || n->op == TS_OP_ALL_GATHER || n->op == TS_OP_REDUCE_SCATTER;
  if (!several || !startable || !n->attr.coll || n->attr.coll->n < 2) return false;
  for (int j = i + 1; j < g->n_nodes && j < first_use[i]; j++)
    if (autoshard_node_runs(&g->nodes[j])) return true;
  return false;
}

/* Whether collective n (operand x), marked asynchronous, runs in line on the
 * device thread (cpu_collective_inline's rule): the worker idle and at most
 * env_inline_bytes moved (the larger of operand and result; the limit
 * between hosts when the group spans an axis across hosts). */
static bool runs_inline(const ts_mesh *m, const autoshard_costs *k, const ts_node *n, const ts_node *x,
                        bool worker_idle) {
  uint32_t axes = group_axes(m, n->attr.coll, n->op == TS_OP_COLLECTIVE_PERMUTE);
  return worker_idle && autoshard_runs_inline(k, axes, fmax(node_bytes(n), node_bytes(x)));
}

/* Adds a kernel of t seconds to info's entry for its op name. */
static void add_op(ts_auto_shard_info *info, const char *name, double t) {
  int i = 0;
  while (i < info->n_ops && strcmp(info->ops[i].name, name) != 0) i++;
  if (i == TS_PREDICT_MAX_OPS) { /* full: the last entry holds the rest */
    i = TS_PREDICT_MAX_OPS - 1;
    info->ops[i].name = "other";
  } else if (i == info->n_ops) {
    info->ops[info->n_ops++].name = name;
  }
  info->ops[i].s += t;
  info->ops[i].count++;
}

/* Seconds of kernel node nd of opt (update: it writes a donated output);
 * *kc: its class. */
static double kernel_seconds(const ts_graph *opt, const ts_node *nd, const autoshard_costs *k, bool update,
                             ts_kernel_class *kc) {
  double units;
  *kc = autoshard_node_class(opt, nd, 1, update, &units);
  double elems = node_bytes(nd) / (double)ts_dtype_size(nd->dtype);
  double t = autoshard_work_s(k, opt, nd, 1, kc, units) + autoshard_conv_weight_s(k, opt, nd) +
             autoshard_kernel_overhead(k, elems);
  int nb = *kc == TS_KERNEL_BROADCAST ? autoshard_broadcast_operands(nd) : 0;
  if (nb > 1) t += (nb - 1) * elems * k->bcast_operand; /* a batch norm's mean, scale, shift */
  return t;
}

/* Whether collective nd of the local program spans processes of the host. */
static bool over_procs(const ts_mesh *m, const autoshard_costs *k, const ts_node *nd) {
  double bw, lat;
  bool remote, procs = false;
  if (m && nd->attr.coll)
    group_links(m, k, nd->attr.coll, nd->op == TS_OP_COLLECTIVE_PERMUTE, &bw, &lat, &remote, &procs);
  return procs;
}

/* The compute after the step's last collective over processes (0: none). */
static double proc_tail_s(const ts_graph *opt, const ts_mesh *m, const autoshard_costs *k, const bool *update) {
  double tail = 0;
  bool seen = false;
  for (int i = 0; i < opt->n_nodes; i++) {
    const ts_node *nd = &opt->nodes[i];
    if (!autoshard_node_runs(nd)) continue;
    ts_kernel_class kc;
    if (ir_op_is_collective(nd->op)) {
      if (over_procs(m, k, nd)) tail = 0, seen = true;
    } else {
      tail += kernel_seconds(opt, nd, k, update[i], &kc);
    }
  }
  return seen ? tail : 0;
}

static int predict_local(const ts_graph *opt, const ts_mesh *m, const autoshard_costs *k, proc_terms *pt, int ndev,
                         ts_auto_shard_info *info) {
  int n = opt->n_nodes;
  int32_t *base = malloc(((size_t)n + 1) * sizeof *base), *first_use = malloc(((size_t)n + 1) * sizeof *first_use);
  bool *update = calloc((size_t)n + 1, sizeof *update);
  double *done = calloc((size_t)n + 1, sizeof *done);
  if (!base || !first_use || !update || !done) {
    free(base), free(first_use), free(update), free(done);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "predict: out of memory");
  }
  plan_first_uses(opt, base, first_use, n);
  /* the parameter update: kernels whose result is a donated output */
  for (int o = 0; o < opt->n_outputs; o++)
    if (opt->alias && opt->alias[o] >= 0) update[base[opt->outputs[o]]] = true;
  if (pt->turns > 0) pt->tail = proc_tail_s(opt, m, k, update);
  double now = k->step_overhead, worker = 0, comp = 0, comm = 0, exposed = 0, sent = 0;
  double since = 0; /* compute since the previous collective (a process wait's scale) */
  bool first = true; /* no collective over processes yet (the step's first waits k->proc_step_wait) */
  for (int i = 0; i < n; i++) {
    const ts_node *nd = &opt->nodes[i];
    for (int q = 0; q < nd->n_in; q++) { /* wait for asynchronous collectives it reads */
      double d = done[base[nd->in[q]]];
      if (d > now) exposed += d - now, now = d;
    }
    if (!autoshard_node_runs(nd)) continue;
    if (ir_op_is_collective(nd->op)) {
      const ts_node *x = nd->n_in ? &opt->nodes[nd->in[0]] : nd;
      bool async = is_async(opt, i, first_use, ndev > 1 && env_config()->async_collectives); /* as compile.c */
      bool inl = async && runs_inline(m, k, nd, x, worker <= now);
      double t = coll_seconds(m, k, pt, nd, x, async, !async || inl, since, &first, &sent);
      since = 0;
      comm += t;
      if (async && !inl) {
        double start = fmax(now, worker);
        worker = done[i] = start + t;
      } else {
        now += t, exposed += t;
      }
      continue;
    }
    ts_kernel_class kc;
    double t = kernel_seconds(opt, nd, k, update[i], &kc);
    info->class_s[kc] += t;
    add_op(info, ir_op_name(nd->op), t);
    info->kernels++;
    comp += t;
    since += t;
    now += t;
  }
  if (worker > now) exposed += worker - now, now = worker; /* the step ends when its collectives do */
  info->compute_s = comp;
  info->comm_s = exposed;
  info->step_s = now;
  info->comm_bytes_per_device = sent;
  (void)comm;
  free(base), free(first_use), free(update), free(done);
  return 0;
}

int ts_predict_program(const ts_graph *g, const ts_auto_shard_options *o, const ts_compile_options *copts,
                       ts_auto_shard_info *info) {
  if (!g || !o || !o->mesh || !info) return set_error("predict_program: graph, options.mesh and info are required");
  memset(info, 0, sizeof *info);
  const ts_mesh *m = o->mesh;
  int n = g->n_nodes, rc = -1;
  ts_compile_options co = {0};
  if (copts) co = *copts;
  co.mesh = NULL, co.auto_shard = false;
  autoshard_costs k;
  autoshard_costs_from(o, &k);
  ts_partition_spec *specs = calloc((size_t)n + 1, sizeof *specs);
  ts_partition_spec *in_specs = calloc((size_t)g->n_inputs + 1, sizeof *in_specs);
  ts_partition_spec *out_specs = calloc((size_t)g->n_outputs + 1, sizeof *out_specs);
  ts_graph *local = NULL, *opt = NULL;
  ts_plan plan;
  bool planned = false;
  if (!specs || !in_specs || !out_specs) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "predict_program: out of memory");
    goto done;
  }
  if (m->ndevices > 1) { /* compile_spmd's steps for device 0 */
    if (ts_graph_verify(g) < 0 || spmd_propagate(g, m, specs, NULL) < 0) goto done;
    for (int i = 0; i < g->n_inputs; i++) in_specs[i] = specs[g->inputs[i]];
    for (int q = 0; q < g->n_outputs; q++) {
      int a = g->alias ? g->alias[q] : -1;
      out_specs[q] = a >= 0 ? in_specs[a] : specs[g->outputs[q]];
    }
    if (!(local = spmd_partition(g, m, specs, in_specs, out_specs, 0, NULL))) goto done;
  }
  if (!(opt = compile_graph(local ? local : g, &co))) goto done;
  if (plan_build(opt, &plan) < 0) goto done;
  planned = true;
  if (m->ndevices > 1 && env_config()->async_collectives) { /* as compile.c plans it */
    plan_async marks;
    bool spans = false; /* compile.c's update chains: where a gather crosses hosts */
    for (int a = 0; a < m->rank; a++) spans |= k.remote[a];
    int chains = env_config()->update_chains;
    if (plan_mark_async(opt, &plan, chains == 2 || (chains == 1 && spans), &marks) < 0) goto done;
    plan_async_free(&marks);
  }
  proc_terms pt = proc_terms_from(o);
  if (predict_local(opt, m->ndevices > 1 ? m : NULL, &k, &pt, (int)m->ndevices, info) < 0) goto done;
  double in_bytes = 0, out_bytes = 0;
  for (int i = 0; i < opt->n_inputs; i++) in_bytes += node_bytes(&opt->nodes[opt->inputs[i]]);
  for (int q = 0; q < opt->n_outputs; q++)
    if (!opt->alias || opt->alias[q] < 0) out_bytes += node_bytes(&opt->nodes[opt->outputs[q]]);
  info->arena_bytes = (double)plan.arena_bytes;
  info->input_bytes = in_bytes;
  info->peak_bytes_per_device = in_bytes + out_bytes + (double)plan.arena_bytes;
  info->objective_s = info->step_s;
  rc = 0;
done:
  if (planned) plan_free(&plan);
  ts_graph_free(opt);
  ts_graph_free(local);
  free(specs);
  free(in_specs);
  free(out_specs);
  return rc;
}
