/* compile.c — ts_compile: verify, run the graph passes, plan memory, build
 * the constant pool; plus the executable's queries and text form. An
 * executable is run by one thread at a time (it owns one arena). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "spmd/spmd_internal.h" /* replica_is_all */
#include "autoshard/autoshard.h" /* auto-sharding */
#include "compile/cache.h"             /* the compile cache */
#include "metrics/metrics_internal.h" /* compile metrics and trace */
#include "opt/opt.h"
#include "util/half.h" /* splat constants in bf16 / f16 */
#include "util/config.h" /* TESSEL_ASYNC_COLLECTIVES */

typedef ts_graph *(*pass_fn)(const ts_graph *, int *);

static ts_graph *run_pass(ts_graph *g, pass_fn fn, const char *name, bool verbose) {
  int changed = 0;
  ts_graph *out = fn(g, &changed);
  if (verbose && out)
    fprintf(stderr, "tessel compile: %-8s %5d -> %5d nodes (%d changed)\n", name, g->n_nodes, out->n_nodes,
            changed);
  ts_graph_free(g);
  return out;
}

#define COMBINE_DEFAULT_BYTES ((size_t)1 << 20)

/* opt_combine as a pass (it takes the bucket size). */
static ts_graph *run_combine(ts_graph *w, size_t bytes, bool verbose) {
  int changed = 0;
  ts_graph *r = opt_combine(w, bytes, &changed);
  if (verbose && r)
    fprintf(stderr, "tessel compile: %-8s %5d -> %5d nodes (%d all-reduces packed)\n", "combine", w->n_nodes,
            r->n_nodes, changed);
  ts_graph_free(w);
  return r;
}

ts_graph *compile_graph(const ts_graph *g, const ts_compile_options *opts) {
  ts_compile_options o = {0};
  if (opts) o = *opts;
  if (!g) {
    set_error("compile: graph is NULL");
    return NULL;
  }
  if (ts_graph_verify(g) < 0) return NULL;
  if (g->n_outputs == 0) {
    set_error("compile: the graph has no outputs (mark results with ts_graph_add_output)");
    return NULL;
  }
  if (o.autocast != TS_F32 && o.autocast != TS_BF16 && o.autocast != TS_F16) {
    set_error("compile: autocast dtype %s is not supported (bf16, f16, or f32 for off)",
              (unsigned)o.autocast < TS_DTYPE_COUNT ? ts_dtype_name(o.autocast) : "invalid");
    return NULL;
  }
  ts_graph *w = opt_rebuild(g, NULL, NULL, NULL);
  if (w && (o.autocast == TS_BF16 || o.autocast == TS_F16)) {
    int changed = 0;
    ts_graph *a = opt_autocast(w, o.autocast, &changed);
    if (o.verbose && a)
      fprintf(stderr, "tessel compile: %-8s %5d -> %5d nodes (%d ops in %s)\n", "autocast", w->n_nodes, a->n_nodes,
              changed, ts_dtype_name(o.autocast));
    ts_graph_free(w);
    w = a;
  }
  if (w && !o.no_simplify) w = run_pass(w, opt_simplify, "simplify", o.verbose);
  if (w && !o.no_cse) w = run_pass(w, opt_cse, "cse", o.verbose);
  if (w) w = run_pass(w, opt_dce, "dce", o.verbose);
  if (w && !o.no_fusion) {
    w = run_pass(w, opt_fuse, "fusion", o.verbose);
    if (w) w = run_pass(w, opt_dce, "dce", o.verbose);
  }
  if (w && !o.no_combine) w = run_combine(w, o.combine_bytes ? o.combine_bytes : COMBINE_DEFAULT_BYTES, o.verbose);
  if (w) w = run_pass(w, opt_schedule, "schedule", o.verbose); /* collectives early: overlap */
  return w;
}

static void write_elem(ts_dtype dt, void *p, double v) {
  switch (dt) {
  case TS_F32: { float x = (float)v; memcpy(p, &x, 4); break; }
  case TS_F64: memcpy(p, &v, 8); break;
  case TS_BF16: { uint16_t h = ts_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
  case TS_F16: { uint16_t h = ts_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
  case TS_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
  case TS_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
  case TS_U8: *(uint8_t *)p = (uint8_t)v; break;
  case TS_BOOL: *(uint8_t *)p = v != 0; break;
  default: break;
  }
}

/* Copies every constant into the pool (splats materialized once). */
static int fill_pool(ts_executable *e) {
  const ts_device *d = &e->client->devs[e->device];
  for (int i = 0; i < e->g->n_nodes; i++) {
    const ts_node *n = &e->g->nodes[i];
    if (n->op != TS_OP_CONSTANT) continue;
    const plan_value *v = &e->plan.values[i];
    char *dst = (char *)e->pool + v->offset;
    if (n->data) {
      if (d->to_device(d->ctx, dst, n->data, v->bytes) < 0) return -1;
      continue;
    }
    size_t es = ts_dtype_size(n->dtype);
    char *host = malloc(v->bytes ? v->bytes : 1);
    if (!host) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory materializing constant %d", i);
    for (size_t off = 0; off < v->bytes; off += es) write_elem(n->dtype, host + off, n->attr.value);
    int rc = d->to_device(d->ctx, dst, host, v->bytes);
    free(host);
    if (rc < 0) return -1;
  }
  return 0;
}

/* The collectives this device starts asynchronously (plan/async.c); with
 * fewer than 2 devices or TESSEL_ASYNC_COLLECTIVES=0 none. */
static int mark_async(ts_executable *e) {
  if (e->client->num_devices < 2 || !env_config()->async_collectives) return 0;
  plan_async m;
  int chains = env_config()->update_chains; /* by default where a gather crosses a network link */
  if (plan_mark_async(e->g, &e->plan, chains == 2 || (chains == 1 && rt_client_spans_hosts(e->client)), &m) < 0)
    return -1;
  e->async = m.async;
  e->defer = m.defer;
  e->borrow = m.borrow;
  e->chain_of = m.chain_of;
  e->chains = m.chains;
  e->n_chains = m.n_chains;
  return 0;
}

ts_executable *compile_local(ts_client *c, int device, ts_graph *opt, const ts_compile_options *opts) {
  ts_executable *e = calloc(1, sizeof *e);
  if (!e) {
    ts_graph_free(opt);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    return NULL;
  }
  e->client = c;
  e->device = device;
  e->g = opt;
  const ts_device *d = &c->devs[device];
  TS_OBS_SCOPE("ExecutableBuildTime", "build executable", "compile", -1, -1); /* to the return */
  if (plan_build(opt, &e->plan) < 0 || mark_async(e) < 0) goto fail; /* mark_async may plan again */
  obs_peak_memory(device, (int64_t)(e->plan.arena_bytes + e->plan.const_bytes));
  if (opts && opts->verbose)
    fprintf(stderr, "tessel compile: plan: arena %zu bytes, constants %zu bytes, %d in-place, %d copies\n",
            e->plan.arena_bytes, e->plan.const_bytes, e->plan.n_inplace, e->plan.n_copies);
  e->state = calloc((size_t)opt->n_nodes + 1, sizeof *e->state);
  e->values = calloc((size_t)opt->n_nodes + 1, sizeof *e->values);
  e->arena = d->alloc(d->ctx, e->plan.arena_bytes);
  e->pool = d->alloc(d->ctx, e->plan.const_bytes);
  if (!e->state || !e->values || !e->arena || !e->pool) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory (arena %zu bytes, constants %zu bytes)",
                      e->plan.arena_bytes, e->plan.const_bytes);
    goto fail;
  }
  if (fill_pool(e) < 0) goto fail;
  return e;
fail:
  ts_executable_free(e);
  return NULL;
}

/* The mesh a program runs on: the option, else the mesh of the first
 * annotation, else NULL (one device, or every device replicated). */
static const ts_mesh *program_mesh(const ts_graph *g, const ts_compile_options *opts) {
  if (opts && opts->mesh) return opts->mesh;
  for (int i = 0; g && i < g->n_nodes; i++)
    if (g->nodes[i].sharding) return ts_sharding_mesh(g->nodes[i].sharding);
  return NULL;
}

/* Several processes: every one must compile the same program on the same
 * mesh (else their collectives would not match and they would hang). */
static int same_program(ts_client *c, const ts_graph *g, const ts_mesh *m) {
  if (!g) return set_error("compile: graph is NULL");
  char text[256];
  int len = snprintf(text, sizeof text, "program %016llx on %d devices, mesh", (unsigned long long)ts_graph_hash(g),
                     c->num_devices);
  for (int a = 0; m && a < ts_mesh_rank(m) && len < (int)sizeof text - 32; a++)
    len += snprintf(text + len, sizeof text - len, " %s=%lld", ts_mesh_axis_name(m, a) ? ts_mesh_axis_name(m, a) : "?",
                    (long long)ts_mesh_axis_size(m, a));
  if (!m) snprintf(text + len, sizeof text - len, " none");
  return ts_client_check_same(c, "compile: the program", text);
}

/* Auto-sharding: a copy of g annotated by autoshard/, compiled on its mesh. */
static ts_executable *compile_auto(ts_client *c, const ts_graph *g, const ts_mesh *m, const ts_compile_options *opts) {
  if (!g) {
    set_error("compile: graph is NULL");
    return NULL;
  }
  ts_mesh *own = NULL;
  if (!m && env_config()->auto_spmd_mesh) {
    if (!(own = ts_mesh_parse(env_config()->auto_spmd_mesh, NULL, NULL))) {
      set_error_context("compile: TESSEL_AUTO_SPMD_MESH=%s", env_config()->auto_spmd_mesh);
      return NULL;
    }
  } else if (!m) {
    int64_t n = c->num_devices;
    if (!(own = ts_mesh_new(1, &n, NULL, 0, NULL))) return NULL;
  }
  ts_executable *e = NULL;
  ts_graph *copy = opt_rebuild(g, NULL, NULL, NULL);
  ts_auto_shard_options ao = {0};
  if (opts && opts->auto_shard_costs) ao = *opts->auto_shard_costs;
  ao.mesh = own ? own : m;
  if (opts) ao.time_limit_s = opts->auto_shard_time_limit_s, ao.memory_limit_bytes = opts->auto_shard_memory_limit;
  if (copy && autoshard_annotate(copy, &ao, NULL, NULL) == 0 &&
      /* a solve cut by its time limit may differ between processes: never run unequal programs */
      (c->process_count <= 1 || same_program(c, copy, ao.mesh) == 0))
    e = compile_spmd(c, copy, ao.mesh, opts);
  ts_graph_free(copy);
  ts_mesh_free(own);
  return e;
}

ts_executable *ts_compile(ts_client *c, const ts_graph *g, const ts_compile_options *opts) {
  if (!c) {
    set_error("compile: client is NULL");
    return NULL;
  }
  const ts_mesh *m = program_mesh(g, opts);
  if (c->process_count > 1 && same_program(c, g, m) < 0) return NULL;
  if (opts && opts->replicas) return compile_replicas(c, g, opts);
  for (int i = 0; g && i < g->n_nodes; i++)
    if (replica_is_all(&g->nodes[i])) {
      set_error("compile: node %d is a ts_replica_all_reduce: compile the program with "
                   "ts_compile_options.replicas", i);
      return NULL;
    }
  bool one = c->num_devices == 1 && (!m || ts_mesh_num_devices(m) == 1) && !env_config()->auto_spmd_mesh;
  if (((opts && opts->auto_shard) || env_config()->auto_spmd) && !one) /* one device: nothing to choose */
    return compile_auto(c, g, m, opts);
  bool manual = false; /* manual regions always go through the partitioner */
  for (int i = 0; g && i < g->n_nodes; i++) manual |= g->nodes[i].manual;
  if (c->num_devices > 1 || (m && ts_mesh_num_devices(m) > 1) || manual) {
    if (!g) {
      set_error("compile: graph is NULL");
      return NULL;
    }
    if (m) return compile_spmd(c, g, m, opts);
    int64_t n = c->num_devices;
    ts_mesh *all = ts_mesh_new(1, &n, NULL, 0, NULL);
    if (!all) return NULL;
    ts_executable *e = compile_spmd(c, g, all, opts);
    ts_mesh_free(all);
    return e;
  }
  ts_graph *opt = cache_compile_graph(g, opts); /* compile cache: memory, then disk, then the passes */
  if (!opt) return NULL;
  return compile_local(c, c->first_local, opt, opts);
}

void ts_executable_free(ts_executable *e) {
  if (!e) return;
  /* collectives a run left in flight read the nodes' staging buffers
   * (runtime/carry.c): they end before the state goes */
  if (e->client && e->defer) rt_client_settle(e->client, NULL);
  for (int i = 0; e->dev && i < e->n_dev; i++) ts_executable_free(e->dev[i]);
  free(e->dev);
  for (int i = 0; e->node_sh && e->g && i < e->g->n_nodes; i++) ts_sharding_free(e->node_sh[i]);
  free(e->node_sh);
  for (int i = 0; e->in_sh && e->g && i < e->g->n_inputs; i++) ts_sharding_free(e->in_sh[i]);
  free(e->in_sh);
  for (int i = 0; e->out_sh && e->g && i < e->g->n_outputs; i++) ts_sharding_free(e->out_sh[i]);
  free(e->out_sh);
  free(e->colls.v);
  const ts_device *d = &e->client->devs[e->device];
  if (e->state && d->release_state)
    for (int i = 0; i < e->g->n_nodes; i++)
      if (e->state[i]) d->release_state(d->ctx, e->state[i]);
  if (e->arena) d->free(d->ctx, e->arena);
  if (e->pool) d->free(d->ctx, e->pool);
  free(e->state);
  free(e->values);
  free(e->async);
  free(e->defer);
  free(e->borrow);
  free(e->chain_of);
  free(e->chains);
  plan_free(&e->plan);
  ts_graph_free(e->g);
  free(e);
}

int ts_executable_num_inputs(const ts_executable *e) { return e ? e->g->n_inputs : 0; }
int ts_executable_num_outputs(const ts_executable *e) { return e ? e->g->n_outputs : 0; }
size_t ts_executable_peak_bytes(const ts_executable *e) {
  if (!e) return 0;
  size_t peak = e->plan.arena_bytes;
  for (int i = 0; i < e->n_dev; i++)
    if (e->dev[i] && e->dev[i]->plan.arena_bytes > peak) peak = e->dev[i]->plan.arena_bytes;
  return peak;
}

char *ts_executable_to_string(const ts_executable *e) {
  if (!e) {
    set_error("executable_to_string: executable is NULL");
    return NULL;
  }
  if (e->n_dev) e = e->dev[e->client->first_local]; /* every device runs the same program but for offsets and groups */
  char *prog = ts_graph_to_string(e->g);
  if (!prog) return NULL;
  size_t len = strlen(prog), cap = len + 1;
  char *buf = prog;
  if (plan_print(&e->plan, e->g, &buf, &len, &cap) < 0) {
    free(buf);
    return NULL;
  }
  return buf;
}
