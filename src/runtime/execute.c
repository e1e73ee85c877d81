/* execute.c — ts_execute: checks the caller's buffers against the program's
 * inputs and outputs, resolves every value's memory from the plan (a
 * started all-gather's operand may move into its own slot of the result:
 * gather_operands_in_slot), has the device run the program, then does the
 * plan's end-of-run copies. An SPMD
 * program runs its per-device programs at once, each on its device's thread
 * (devpool.c), on each buffer's block for that device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device.h"     /* TS_DEVICE_ALIGN */
#include "runtime/executable.h"
#include "metrics/metrics_internal.h" /* ExecuteTime, trace */

static bool same_type(const ts_buffer *b, const ts_node *n) {
  return b->dtype == n->dtype && b->rank == n->rank &&
         memcmp(b->shape, n->shape, (size_t)n->rank * sizeof *n->shape) == 0;
}

static int check_inputs(const ts_graph *g, ts_buffer *const *inputs) {
  if (g->n_inputs && !inputs) return set_error("execute: inputs is NULL but the program has %d inputs", g->n_inputs);
  for (int i = 0; i < g->n_inputs; i++) {
    const ts_node *n = &g->nodes[g->inputs[i]];
    if (!inputs[i]) return set_error("execute: input %d \"%s\" is NULL", i, n->name ? n->name : "");
    if (!same_type(inputs[i], n)) {
      char want[128], got[128];
      return set_error("execute: input %d \"%s\" expects %s but got %s", i, n->name ? n->name : "",
                          ir_shape_str(n, want, sizeof want),
                          rt_shape_str(inputs[i]->dtype, inputs[i]->rank, inputs[i]->shape, got, sizeof got));
    }
  }
  return 0;
}

/* Checks caller-provided output buffers and allocates the missing ones into
 * bufs (fresh[k] marks those we made). Donated outputs use the input buffer.
 * out_sh: the outputs' shardings (NULL on one device). */
static int prepare_outputs(ts_client *c, const ts_graph *g, ts_sharding *const *out_sh, ts_buffer *const *inputs,
                           ts_buffer **outputs, ts_buffer **bufs, bool *fresh) {
  for (int k = 0; k < g->n_outputs; k++) {
    const ts_node *n = &g->nodes[g->outputs[k]];
    const ts_sharding *sh = out_sh ? out_sh[k] : NULL;
    int a = g->alias ? g->alias[k] : -1;
    if (a >= 0) {
      bufs[k] = inputs[a];
      continue;
    }
    if (outputs[k]) {
      rt_hold_wait(outputs[k], false); /* written in place: not while a reader holds it (hold.c) */
      if (!same_type(outputs[k], n)) {
        char want[128], got[128];
        return set_error("execute: output %d expects %s but got %s", k, ir_shape_str(n, want, sizeof want),
                            rt_shape_str(outputs[k]->dtype, outputs[k]->rank, outputs[k]->shape, got, sizeof got));
      }
      if (!rt_buffer_has_sharding(outputs[k], sh) && ts_buffer_reshard(outputs[k], sh) < 0) return -1;
      bufs[k] = outputs[k];
      continue;
    }
    bufs[k] = rt_buffer_new_sharded(c, n->dtype, n->rank, n->shape, sh);
    if (!bufs[k]) return -1;
    fresh[k] = true;
  }
  return 0;
}

/* Donated inputs held by a reader (ts_buffer_hold) are not updated in
 * place: their outputs are computed into other memory (hold.c), described
 * by shadow[a], a copy of input a's buffer with that memory, and wr[a] =
 * &shadow[a] tells run_device. *wr stays NULL when no donated input is held. */
static int held_outputs(const ts_graph *g, ts_buffer *const *inputs, ts_buffer **bufs, ts_buffer ***wr,
                        ts_buffer **shadow) {
  for (int k = 0; k < g->n_outputs; k++) {
    int a = g->alias ? g->alias[k] : -1;
    if (a < 0 || !rt_hold_active(inputs[a])) continue;
    if (!*wr) {
      *wr = calloc((size_t)g->n_inputs + 1, sizeof **wr);
      *shadow = calloc((size_t)g->n_inputs + 1, sizeof **shadow);
      if (!*wr || !*shadow) return set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory");
    }
    ts_buffer *s = &(*shadow)[a];
    *s = *inputs[a];
    s->hold = s->spare = NULL;
    if (!(s->shards = rt_hold_out_memory(inputs[a]))) return -1;
    s->data = s->shards[s->client->first_local];
    (*wr)[a] = s;
    bufs[k] = s;
  }
  return 0;
}

static size_t value_bytes(const ts_node *n) {
  return (size_t)ts_shape_numel(n->rank, n->shape) * ts_dtype_size(n->dtype);
}

static bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
  return a && b && (const char *)a < (const char *)b + nb && (const char *)b < (const char *)a + na;
}

/* Whether started all-gather a's operand p (a temporary that a alone reads:
 * readers[p] == 1, counting readers other than reshapes) may be computed in
 * a's own slot of its result, [slot, slot + bytes): neither p's operands
 * nor any node after p and before a reads or writes that memory. */
static bool slot_free(const ts_executable *e, const int32_t *readers, int p, int a, const char *slot,
                      size_t bytes) {
  const ts_graph *g = e->g;
  ts_op op = g->nodes[p].op;
  if (op == TS_OP_RESHAPE || op == TS_OP_INPUT || op == TS_OP_CONSTANT || readers[p] != 1 ||
      e->plan.values[p].kind != PLAN_ARENA || ((uintptr_t)slot % TS_DEVICE_ALIGN))
    return false;
  for (int k = 0; k < g->n_outputs; k++)
    if (ir_reshape_base(g, g->outputs[k]) == p) return false;
  for (int j = p; j < a; j++) {
    const ts_node *v = &g->nodes[j];
    if (v->op == TS_OP_RESHAPE || v->op == TS_OP_INPUT || v->op == TS_OP_CONSTANT) continue;
    for (int k = 0; k < v->n_in; k++) /* p's own operands too: its write could clobber what it reads */
      if (overlaps(e->values[v->in[k]], value_bytes(&g->nodes[v->in[k]]), slot, bytes)) return false;
    if (j > p && overlaps(e->values[j], value_bytes(v), slot, bytes)) return false;
  }
  return true;
}

/* Whether node a is an all-gather that gather_operands_in_slot may serve:
 * started, one block per member (outer 1), into memory the run owns
 * throughout (an aliased input or an output). */
static bool slot_gather(const ts_executable *e, int a) {
  const ts_node *n = &e->g->nodes[a];
  plan_kind kind = e->plan.values[a].kind;
  return n->op == TS_OP_ALL_GATHER && e->async && e->async[a] && n->attr.coll && n->n_in == 1 &&
         (kind == PLAN_INPUT || kind == PLAN_OUTPUT) && ts_shape_numel(n->attr.axis, e->g->nodes[n->in[0]].shape) == 1;
}

/* A started all-gather with one block per member (outer 1) whose operand is
 * a temporary computed for it alone (ZeRO-1's new weight block: the fused
 * update) has that operand computed straight into the gather's own slot of
 * its result (the caller's buffer: an aliased input or an output), so the
 * start (cpu_collective_start) copies nothing: comm sends the slot in place.
 * Between hosts that copy ran on the device between the update and the
 * gather's first byte on the link (the CNN's fc1 block, 2.36 MB: ~0.3 ms of
 * the critical cycle reduce-scatter, update, all-gather). Values are the
 * same; only where the operand lives changes. Its reshapes follow it. */
static void gather_operands_in_slot(ts_executable *e, int dev) {
  const ts_graph *g = e->g;
  int a0 = 0;
  while (a0 < g->n_nodes && !slot_gather(e, a0)) a0++;
  if (a0 == g->n_nodes) return;
  int32_t *readers = calloc((size_t)g->n_nodes + 1, sizeof *readers);
  if (!readers) return; /* the copy at the start stays */
  for (int j = 0; j < g->n_nodes; j++)
    if (g->nodes[j].op != TS_OP_RESHAPE)
      for (int k = 0; k < g->nodes[j].n_in; k++) readers[ir_reshape_base(g, g->nodes[j].in[k])]++;
  bool moved = false;
  for (int a = a0; a < g->n_nodes; a++) {
    if (!slot_gather(e, a)) continue;
    const ts_node *n = &g->nodes[a];
    int r = -1;
    for (int i = 0; i < n->attr.coll->n; i++)
      if (n->attr.coll->ids[i] == dev) r = i;
    int p = ir_reshape_base(g, n->in[0]);
    size_t bytes = value_bytes(&g->nodes[n->in[0]]);
    char *slot = r >= 0 && e->values[a] ? (char *)e->values[a] + (size_t)r * bytes : NULL;
    if (!slot || !bytes || !slot_free(e, readers, p, a, slot, bytes)) continue;
    e->values[p] = slot;
    moved = true;
  }
  free(readers);
  for (int i = 0; moved && i < e->plan.n; i++) /* the reshapes of a moved operand */
    if (e->plan.values[i].kind == PLAN_ALIAS) e->values[i] = e->values[e->plan.values[i].index];
}

/* Runs one device's program (e: a single-device executable on client device
 * `dev`) with block `dev` of every buffer. wr (NULL: none): per input, the
 * buffer its in-place updates go to instead (a held input, hold.c). */
static int run_device(ts_executable *e, int dev, ts_buffer *const *inputs, ts_buffer **bufs, ts_buffer *const *wr) {
  const ts_plan *p = &e->plan;
  for (int i = 0; i < p->n; i++) {
    const plan_value *v = &p->values[i];
    void *ptr = NULL;
    switch (v->kind) {
    case PLAN_INPUT: /* the input itself, or an output computed in place of it */
      ptr = wr && wr[v->index] && i != e->g->inputs[v->index] ? wr[v->index]->shards[dev]
                                                              : inputs[v->index]->shards[dev];
      break;
    case PLAN_CONST: ptr = (char *)e->pool + v->offset; break;
    case PLAN_ARENA: ptr = (char *)e->arena + v->offset; break;
    case PLAN_OUTPUT: ptr = bufs[v->index]->shards[dev]; break;
    case PLAN_ALIAS: ptr = e->values[v->index]; break;
    default: break;
    }
    e->values[i] = ptr;
  }
  gather_operands_in_slot(e, dev);
  ts_client *c = e->client;
  const ts_device *d = &c->devs[dev];
  rt_carry *carry = c->carry ? c->carry[dev - c->first_local] : NULL;
  ts_program prog = {e->g,     e->state, c->num_devices > 1 ? c->threads_per_device : c->num_threads, dev, c->comm,
                     e->async, e->defer, carry, e->borrow, e->chain_of, e->chains, e->n_chains};
  if (d->run(d->ctx, &prog, e->values) < 0) return -1;
  for (int k = 0; k < e->plan.n_copies; k++) {
    const plan_copy *x = &e->plan.copies[k];
    const void *src = x->src_node >= 0 ? e->values[x->src_node] : (char *)e->arena + x->src_offset;
    void *dst = x->dst_output >= 0 ? bufs[x->dst_output]->shards[dev] : (char *)e->arena + x->dst_offset;
    if (rt_carry_wait_range(carry, src, x->bytes) < 0 || rt_carry_wait_range(carry, dst, x->bytes) < 0) return -1;
    if (d->copy(d->ctx, dst, src, x->bytes) < 0) return -1;
  }
  return 0;
}

typedef struct {
  ts_executable *e;
  int first;                /* first local device */
  ts_buffer *const *inputs;
  ts_buffer **bufs;
  ts_buffer *const *wr;
  int *rc;                  /* (num_local) */
  char (*msg)[512];         /* (num_local) */
  ts_status *code;          /* (num_local) of msg: carried to the calling thread */
} spmd_run;

/* Local device `first + i`, on its own device thread. */
static void run_local(void *arg, int i) {
  spmd_run *r = arg;
  int dev = r->first + i;
  r->rc[i] = run_device(r->e->dev[dev], dev, r->inputs, r->bufs, r->wr);
  if (r->rc[i]) {
    snprintf(r->msg[i], sizeof r->msg[i], "device %d: %s", dev, ts_last_error());
    r->code[i] = ts_last_error_code();
  }
}

/* Every device of this process at once, each on its device thread (the
 * client's, kept across runs); collectives inside the programs synchronize
 * them, and the devices of other processes. */
static int run_spmd(ts_executable *e, ts_buffer *const *inputs, ts_buffer **bufs, ts_buffer *const *wr) {
  int n = e->client->num_local;
  int *rc = calloc((size_t)n, sizeof *rc);
  char (*msg)[512] = calloc((size_t)n, sizeof *msg);
  ts_status *code = calloc((size_t)n, sizeof *code);
  if (!rc || !msg || !code) {
    free(rc);
    free(msg);
    free(code);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory running %d devices", n);
  }
  spmd_run r = {e, e->client->first_local, inputs, bufs, wr, rc, msg, code};
  int ret = rt_pool_run(e->client->pool, run_local, &r);
  for (int i = 0; i < n && !ret; i++)
    if (rc[i]) ret = set_error_code(code[i], "%s", msg[i]);
  free(rc);
  free(msg);
  free(code);
  return ret;
}

/* A single-device program on a client with one local device and a pool
 * (bind_cores): run through the pool, which pins the calling thread. */
typedef struct {
  ts_executable *e;
  ts_buffer *const *inputs;
  ts_buffer **bufs;
  ts_buffer *const *wr;
  int rc;
} one_run;

static void run_one(void *arg, int i) {
  one_run *o = arg;
  (void)i;
  o->rc = run_device(o->e, o->e->device, o->inputs, o->bufs, o->wr);
}

static int run_single(ts_executable *e, ts_buffer *const *inputs, ts_buffer **bufs, ts_buffer *const *wr) {
  if (!e->client->pool || e->client->num_local != 1) return run_device(e, e->device, inputs, bufs, wr);
  one_run o = {e, inputs, bufs, wr, 0};
  return rt_pool_run(e->client->pool, run_one, &o) < 0 ? -1 : o.rc;
}

int ts_execute(ts_executable *e, ts_buffer *const *inputs, ts_buffer **outputs) {
  if (!e) return set_error("execute: executable is NULL");
  const ts_graph *g = e->g;
  if (check_inputs(g, inputs) < 0) return -1;
  TS_OBS_SCOPE("ExecuteTime", "execute", "execute", -1, -1); /* metrics + trace, to the return */
  if (g->n_outputs && !outputs) return set_error("execute: outputs is NULL but the program has %d outputs", g->n_outputs);
  for (int i = 0; i < g->n_inputs; i++) {
    if (inputs[i]->client != e->client) return set_error("execute: input %d belongs to another client", i);
    /* a buffer laid out differently from what the program expects is
     * re-laid out once (it keeps the new layout for the next steps) */
    const ts_sharding *want = e->in_sh ? e->in_sh[i] : NULL;
    if (!rt_buffer_has_sharding(inputs[i], want) && ts_buffer_reshard(inputs[i], want) < 0) return -1;
  }
  for (int i = 0; e->in_sh && i < g->n_inputs; i++) /* one buffer passed twice, laid out two ways */
    if (!rt_buffer_has_sharding(inputs[i], e->in_sh[i]))
      return set_error("execute: the buffer of input %d is also passed as another input that needs a different "
                          "sharding; pass a copy", i);
  ts_buffer **bufs = calloc((size_t)g->n_outputs + 1, sizeof *bufs);
  ts_buffer **wr = NULL, *shadow = NULL;
  bool *fresh = calloc((size_t)g->n_outputs + 1, sizeof *fresh);
  int rc = -1;
  if (!bufs || !fresh) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory");
    goto done;
  }
  if (prepare_outputs(e->client, g, e->out_sh, inputs, outputs, bufs, fresh) < 0) goto done;
  if (held_outputs(g, inputs, bufs, &wr, &shadow) < 0) goto done;
  if (e->n_dev ? run_spmd(e, inputs, bufs, wr) < 0 : run_single(e, inputs, bufs, wr) < 0) goto done;
  for (int k = 0; k < g->n_outputs; k++) {
    int a = g->alias ? g->alias[k] : -1;
    if (wr && a >= 0 && wr[a]) { /* the held input moves to its new values */
      rt_hold_move(inputs[a], shadow[a].shards);
      shadow[a].shards = NULL;
      bufs[k] = inputs[a];
    }
    outputs[k] = bufs[k];
  }
  rc = 0;
done:
  for (int i = 0; wr && shadow && i < g->n_inputs; i++)
    if (wr[i] && shadow[i].shards) rt_hold_free_memory(inputs[i], shadow[i].shards);
  free(wr);
  free(shadow);
  if (rc < 0 && bufs)
    for (int k = 0; k < g->n_outputs; k++)
      if (fresh[k]) ts_buffer_free(bufs[k]);
  free(bufs);
  free(fresh);
  return rc;
}
