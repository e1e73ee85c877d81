/* compile_spmd.c — compiling for several devices: propagate shardings over
 * the global graph, partition it into one program per device (inserting the
 * collectives), optimize and plan each; plus the queries of an SPMD
 * executable (shardings per node, the collectives inserted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "compile/cache.h" /* per-device programs through the compile cache */
#include "opt/opt.h"
#include "util/config.h" /* TESSEL_DEBUG_SPMD */

static ts_sharding *make_sharding(const ts_mesh *m, const ts_partition_spec *s) {
  return ts_sharding_new(m, s, s->rank);
}

ts_executable *compile_spmd(ts_client *c, const ts_graph *g, const ts_mesh *m, const ts_compile_options *opts) {
  if (ts_mesh_num_devices(m) != c->num_devices) {
    set_error("compile: the mesh has %lld devices but the client has %d (set ts_client_options.num_devices "
                 "or TESSEL_CPU_DEVICES)", (long long)ts_mesh_num_devices(m), c->num_devices);
    return NULL;
  }
  if (ts_graph_verify(g) < 0) return NULL;
  if (g->n_outputs == 0) {
    set_error("compile: the graph has no outputs (mark results with ts_graph_add_output)");
    return NULL;
  }
  ts_executable *e = calloc(1, sizeof *e);
  ts_partition_spec *specs = calloc((size_t)g->n_nodes + 1, sizeof *specs);
  ts_partition_spec *in_specs = calloc((size_t)g->n_inputs + 1, sizeof *in_specs);
  ts_partition_spec *out_specs = calloc((size_t)g->n_outputs + 1, sizeof *out_specs);
  if (!e || !specs || !in_specs || !out_specs) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto fail;
  }
  e->client = c;
  if (!(e->g = opt_rebuild(g, NULL, NULL, NULL))) goto fail;
  if (spmd_propagate(g, m, specs, NULL) < 0) goto fail;
  for (int i = 0; i < g->n_inputs; i++) in_specs[i] = specs[g->inputs[i]];
  for (int k = 0; k < g->n_outputs; k++) {
    int a = g->alias ? g->alias[k] : -1;
    /* a donated output is written into its input's blocks: same layout */
    out_specs[k] = a >= 0 ? in_specs[a] : specs[g->outputs[k]];
  }
  e->n_dev = c->num_devices;
  e->dev = calloc((size_t)e->n_dev, sizeof *e->dev);
  e->node_sh = calloc((size_t)g->n_nodes + 1, sizeof *e->node_sh);
  e->in_sh = calloc((size_t)g->n_inputs + 1, sizeof *e->in_sh);
  e->out_sh = calloc((size_t)g->n_outputs + 1, sizeof *e->out_sh);
  if (!e->dev || !e->node_sh || !e->in_sh || !e->out_sh) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto fail;
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (!(e->node_sh[i] = make_sharding(m, &specs[i]))) goto fail;
  for (int i = 0; i < g->n_inputs; i++)
    if (!(e->in_sh[i] = make_sharding(m, &in_specs[i]))) goto fail;
  for (int k = 0; k < g->n_outputs; k++)
    if (!(e->out_sh[k] = make_sharding(m, &out_specs[k]))) goto fail;
  /* one program per device of this process (the other processes compile
   * theirs: every process compiles the same global program) */
  for (int d = c->first_local; d < c->first_local + c->num_local; d++) {
    ts_graph *local = spmd_partition(g, m, specs, in_specs, out_specs, d, d == c->first_local ? &e->colls : NULL);
    if (!local) goto fail;
    ts_graph *opt = cache_compile_graph(local, opts); /* compile cache */
    if (!opt) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", ts_last_error());
      if (env_config()->debug_spmd) {
        char *t = ts_graph_to_string(local);
        fprintf(stderr, "%s\n", t ? t : "");
        free(t);
      }
      ts_graph_free(local);
      if (ts_last_error_code() == TS_ERR_OUT_OF_MEMORY)
        set_error_context("compile: the program of device %d", d);
      else
        set_error_code(TS_ERR_INTERNAL, "compile: the program of device %d is invalid (partitioner bug): %s", d,
                          msg);
      goto fail;
    }
    ts_graph_free(local);
    if (!(e->dev[d] = compile_local(c, d, opt, opts))) goto fail;
  }
  free(specs);
  free(in_specs);
  free(out_specs);
  return e;
fail:
  free(specs);
  free(in_specs);
  free(out_specs);
  ts_executable_free(e);
  return NULL;
}

int ts_executable_num_devices(const ts_executable *e) { return !e ? 0 : e->n_dev ? e->n_dev : 1; }

int ts_executable_device_program(const ts_executable *e, int device, ts_device_program_info *out) {
  int n = ts_executable_num_devices(e);
  if (!e || !out || device < 0 || device >= n)
    return set_error("executable_device_program: device %d is not one of the program's %d", device, n);
  const ts_executable *x = e->n_dev ? e->dev[device] : e;
  if (!x) return set_error("executable_device_program: device %d runs in another process", device);
  *out = (ts_device_program_info){x->plan.arena_bytes, x->plan.const_bytes, x->g->n_nodes};
  return 0;
}

const ts_sharding *ts_executable_sharding(const ts_executable *e, ts_tensor node) {
  if (!e || !e->node_sh || node < 0 || node >= e->g->n_nodes) {
    set_error("executable_sharding: node %d is not a node of an SPMD program", node);
    return NULL;
  }
  return e->node_sh[node];
}

const ts_sharding *ts_executable_input_sharding(const ts_executable *e, int input) {
  if (!e || !e->in_sh || input < 0 || input >= e->g->n_inputs) return NULL;
  return e->in_sh[input];
}

const ts_sharding *ts_executable_output_sharding(const ts_executable *e, int output) {
  if (!e || !e->out_sh || output < 0 || output >= e->g->n_outputs) return NULL;
  return e->out_sh[output];
}

char *ts_executable_shardings_to_string(const ts_executable *e) {
  if (!e || !e->node_sh) {
    set_error("executable_shardings_to_string: not an SPMD executable");
    return NULL;
  }
  spmd_str s = {0};
  for (int i = 0; i < e->g->n_nodes; i++) {
    const ts_node *n = &e->g->nodes[i];
    char sh[128];
    char *t = ts_sharding_to_string(e->node_sh[i]);
    spmd_str_printf(&s, "%%%d %s %s %s\n", i, ir_op_name(n->op), ir_shape_str(n, sh, sizeof sh), t ? t : "?");
    free(t);
  }
  return spmd_str_take(&s);
}

const char *ts_collective_kind_name(ts_collective_kind k) {
  static const char *const names[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                      "collective-permute"};
  return (unsigned)k <= TS_COLLECTIVE_PERMUTE ? names[k] : "invalid";
}

int ts_executable_num_collectives(const ts_executable *e) { return e ? e->colls.n : 0; }

int ts_executable_collective(const ts_executable *e, int i, ts_collective_info *out) {
  if (!e || i < 0 || i >= e->colls.n || !out)
    return set_error("executable_collective: %d is not a collective of the program (it has %d)", i,
                        e ? e->colls.n : 0);
  *out = e->colls.v[i];
  return 0;
}

char *ts_executable_collectives_to_string(const ts_executable *e) {
  if (!e) {
    set_error("executable_collectives_to_string: executable is NULL");
    return NULL;
  }
  spmd_str s = {0};
  spmd_str_printf(&s, "%s", ""); /* an empty list is "" rather than NULL */
  const ts_mesh *m = e->node_sh && e->g->n_nodes ? ts_sharding_mesh(e->node_sh[0]) : NULL;
  for (int i = 0; i < e->colls.n; i++) {
    const ts_collective_info *c = &e->colls.v[i];
    spmd_str_printf(&s, "%-18s axes=", ts_collective_kind_name(c->kind));
    bool first = true;
    for (int a = 0; m && a < ts_mesh_rank(m); a++)
      if (c->mesh_axes & (1u << a)) {
        const char *nm = ts_mesh_axis_name(m, a);
        if (nm) spmd_str_printf(&s, first ? "%s" : "+%s", nm);
        else spmd_str_printf(&s, first ? "%d" : "+%d", a);
        first = false;
      }
    spmd_str_printf(&s, " group=%d bytes=%zu cause=%%%d (%s)\n", c->group_size, c->bytes, c->cause, c->cause_op);
  }
  return spmd_str_take(&s);
}
