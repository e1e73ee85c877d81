/* execute.c — ts_execute: checks the caller's buffers against the program's
 * inputs and outputs, resolves every value's memory from the plan, has the
 * device run the program, then does the plan's end-of-run copies. */
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"

static bool same_type(const ts_buffer *b, const ts_node *n) {
  return b->dtype == n->dtype && b->rank == n->rank &&
         memcmp(b->shape, n->shape, (size_t)n->rank * sizeof *n->shape) == 0;
}

static int check_inputs(const ts_executable *e, ts_buffer *const *inputs) {
  const ts_graph *g = e->g;
  if (g->n_inputs && !inputs) return ts_set_error("execute: inputs is NULL but the program has %d inputs", g->n_inputs);
  for (int i = 0; i < g->n_inputs; i++) {
    const ts_node *n = &g->nodes[g->inputs[i]];
    if (!inputs[i]) return ts_set_error("execute: input %d \"%s\" is NULL", i, n->name ? n->name : "");
    if (!same_type(inputs[i], n)) {
      char want[128], got[128];
      return ts_set_error("execute: input %d \"%s\" expects %s but got %s", i, n->name ? n->name : "",
                          ir_shape_str(n, want, sizeof want),
                          rt_shape_str(inputs[i]->dtype, inputs[i]->rank, inputs[i]->shape, got, sizeof got));
    }
  }
  return 0;
}

/* Checks caller-provided output buffers and allocates the missing ones into
 * bufs (fresh[k] marks those we made). Donated outputs use the input buffer. */
static int prepare_outputs(ts_executable *e, ts_buffer *const *inputs, ts_buffer **outputs, ts_buffer **bufs,
                           bool *fresh) {
  const ts_graph *g = e->g;
  for (int k = 0; k < g->n_outputs; k++) {
    const ts_node *n = &g->nodes[g->outputs[k]];
    int a = g->alias ? g->alias[k] : -1;
    if (a >= 0) {
      bufs[k] = inputs[a];
      continue;
    }
    if (outputs[k]) {
      if (!same_type(outputs[k], n)) {
        char want[128], got[128];
        return ts_set_error("execute: output %d expects %s but got %s", k, ir_shape_str(n, want, sizeof want),
                            rt_shape_str(outputs[k]->dtype, outputs[k]->rank, outputs[k]->shape, got, sizeof got));
      }
      bufs[k] = outputs[k];
      continue;
    }
    bufs[k] = ts_buffer_new(e->client, n->dtype, n->rank, n->shape);
    if (!bufs[k]) return -1;
    fresh[k] = true;
  }
  return 0;
}

static void resolve_values(ts_executable *e, ts_buffer *const *inputs, ts_buffer **bufs) {
  const ts_plan *p = &e->plan;
  for (int i = 0; i < p->n; i++) {
    const plan_value *v = &p->values[i];
    void *ptr = NULL;
    switch (v->kind) {
    case PLAN_INPUT: ptr = inputs[v->index]->data; break;
    case PLAN_CONST: ptr = (char *)e->pool + v->offset; break;
    case PLAN_ARENA: ptr = (char *)e->arena + v->offset; break;
    case PLAN_OUTPUT: ptr = bufs[v->index]->data; break;
    case PLAN_ALIAS: ptr = e->values[v->index]; break;
    default: break;
    }
    e->values[i] = ptr;
  }
}

static int run_copies(ts_executable *e, ts_buffer **bufs) {
  const ts_device *d = &e->client->dev;
  for (int c = 0; c < e->plan.n_copies; c++) {
    const plan_copy *x = &e->plan.copies[c];
    const void *src = x->src_node >= 0 ? e->values[x->src_node] : (char *)e->arena + x->src_offset;
    void *dst = x->dst_output >= 0 ? bufs[x->dst_output]->data : (char *)e->arena + x->dst_offset;
    if (d->copy(d->ctx, dst, src, x->bytes) < 0) return -1;
  }
  return 0;
}

int ts_execute(ts_executable *e, ts_buffer *const *inputs, ts_buffer **outputs) {
  if (!e) return ts_set_error("execute: executable is NULL");
  const ts_graph *g = e->g;
  if (check_inputs(e, inputs) < 0) return -1;
  if (g->n_outputs && !outputs) return ts_set_error("execute: outputs is NULL but the program has %d outputs", g->n_outputs);
  ts_buffer **bufs = calloc((size_t)g->n_outputs + 1, sizeof *bufs);
  bool *fresh = calloc((size_t)g->n_outputs + 1, sizeof *fresh);
  int rc = -1;
  if (!bufs || !fresh) {
    ts_set_error("execute: out of memory");
    goto done;
  }
  if (prepare_outputs(e, inputs, outputs, bufs, fresh) < 0) goto done;
  resolve_values(e, inputs, bufs);
  ts_program prog = {g, e->state, e->client->num_threads};
  if (e->client->dev.run(e->client->dev.ctx, &prog, e->values) < 0) goto done;
  if (run_copies(e, bufs) < 0) goto done;
  for (int k = 0; k < g->n_outputs; k++) outputs[k] = bufs[k];
  rc = 0;
done:
  if (rc < 0 && bufs)
    for (int k = 0; k < g->n_outputs; k++)
      if (fresh[k]) ts_buffer_free(bufs[k]);
  free(bufs);
  free(fresh);
  return rc;
}
