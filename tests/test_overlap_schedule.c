/* test_overlap_schedule.c — where a data-parallel step's collectives start
 * (issue 17: communication hidden behind compute on slow links). A DDP step
 * of the MNIST CNN with the sharded update (ZeRO-1), compiled for 2 replicas
 * in one process; in each device's program:
 *  - every gradient reduction (bucket all-reduce, fc1's reduce-scatter)
 *    comes right after its last operand (opt/schedule.c: only inputs,
 *    constants and reshapes between), so fc1's reduce-scatter starts before
 *    the convolutions' backward, and it is started asynchronously; the
 *    weight gradient it reduces runs before fc1's input gradient (a
 *    reduction's operand as soon as its operands exist);
 *  - with the loss averaged in the last bucket (ts_ddp_average_gradients_
 *    logged) and the fc2/fc1-bias gradients in the conv bucket (the bucket
 *    stays open across fc1's weight), fc1's reduce-scatter is the program's
 *    first collective and one all-reduce follows: no small collective (in
 *    line between hosts, waiting for the peer) between forward and
 *    backward; the losses equal those of the loss's own all-reduce bit for
 *    bit;
 *  - the weight all-gathers of the update are started asynchronously and may
 *    end after the run (compile.c mark_async: defer), the program's last one
 *    too: it then runs under the next step's first layers (runtime/carry.c)
 *    instead of ending the step;
 *  - after the last gradient reduction starts, nodes run in the order of the
 *    collectives they wait for: fc1's update and all-gather before the
 *    convolutions' updates, whose bucket all-reduce started later;
 *  - 3 steps run with the carried gathers equal the replicated update bit
 *    for bit (the values the next step reads waited for their gather);
 *  - with every weight sharded (shard_update_min_bytes 1, as SPMD data=2
 *    shards them), the carried gathers start in the order the next step
 *    reads their weights (conv1's first, not fc1's, whose reduce-scatter
 *    ended first), and the result is still the replicated update's;
 *  - each weight all-gather's operand (the update's new block) is computed
 *    in the gather's own slot of the new weight, so starting it copies
 *    nothing (runtime/execute.c), with the same bits;
 *  - with update chains (TESSEL_UPDATE_CHAINS=all: on in one process too),
 *    every weight sharded: each device program hands fc1's block update and
 *    gather to the collective worker (the other gathers move < 1 MiB),
 *    right after fc1's input gradient (the last node that reads its
 *    weight); no value the plan keeps for a
 *    chain shares arena memory with a value live after its hand-off; the
 *    metrics count 1 hand-off per step and device; and the losses and
 *    parameters are the replicated update's bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "runtime/executable.h" /* per-device programs, async/defer marks, update chains */
#include "util/config.h"         /* env_config_reload: TESSEL_UPDATE_CHAINS */
#include "tessel/tessel.h"

enum { B = 4, STEPS = 3, PIX = 28 * 28 };

static ts_graph *step_graph(ts_params *p, bool logged) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, (int64_t[]){B, 1, 28, 28});
  ts_tensor y = ts_input(g, "y", TS_I32, 1, (int64_t[]){B});
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  ts_tensor loss = ts_cross_entropy(g, ts_model_mnist_cnn(&m, x), y);
  if (!logged) CHECK_OK(ts_graph_add_output(g, ts_replica_all_reduce(g, loss, TS_REDUCE_MEAN)));
  ts_tensor wrt[16], grads[16];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 16; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  CHECK_OK(ts_grad(g, loss, n, wrt, grads));
  CHECK((logged ? ts_ddp_average_gradients_logged(g, n, grads, 0, 1, &loss) : ts_ddp_average_gradients(g, n, grads, 0)) >= 1,
        "buckets: %s", ts_last_error());
  if (logged) CHECK_OK(ts_graph_add_output(g, loss));
  ts_optim_config adamw = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01};
  CHECK_OK(ts_optim_apply(&m, &adamw, lr, step, n, wrt, grads));
  CHECK_OK(ts_nn_finish(&m));
  return g;
}

static bool is_started(ts_op op) {
  return op == TS_OP_ALL_REDUCE || op == TS_OP_ALL_GATHER || op == TS_OP_REDUCE_SCATTER;
}

static bool passive(ts_op op) { return op == TS_OP_INPUT || op == TS_OP_CONSTANT || op == TS_OP_RESHAPE; }

static void check_program(const ts_executable *e, int d) {
  const ts_graph *g = e->g;
  int rs_fc1 = -1, bwd_conv = -1, gathers = 0, last = -1, first_coll = -1, reductions = 0, dx_fc1 = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    if (!passive(n->op)) last = i;
    if (n->op == TS_OP_CONV_BWD_DATA && bwd_conv < 0) bwd_conv = i;
    if (n->op == TS_OP_DOT && ts_shape_numel(n->rank, n->shape) == B * 9216) dx_fc1 = i;
    bool reduce = n->op == TS_OP_ALL_REDUCE || n->op == TS_OP_REDUCE_SCATTER;
    if (reduce && first_coll < 0) first_coll = i;
    reductions += reduce;
    if (reduce) {
      int lastop = -1;
      for (int k = 0; k < n->n_in; k++) lastop = n->in[k] > lastop ? n->in[k] : lastop;
      for (int j = lastop + 1; j < i; j++)
        CHECK(passive(g->nodes[j].op), "device %d: %s %d starts after node %d (%s), not right after its operand %d", d,
              ir_op_name(n->op), i, j, ir_op_name(g->nodes[j].op), lastop);
      CHECK(e->async && e->async[i], "device %d: %s %d is not started asynchronously", d, ir_op_name(n->op), i);
    }
    if (n->op == TS_OP_REDUCE_SCATTER && ts_shape_numel(n->rank, n->shape) == 64 * 9216) rs_fc1 = i;
    if (n->op == TS_OP_ALL_GATHER) {
      gathers++;
      CHECK(e->async && e->async[i] && e->defer && e->defer[i],
            "device %d: weight all-gather %d: async %d, may end after the run %d", d, i, e->async && e->async[i],
            e->defer && e->defer[i]);
    }
  }
  CHECK(gathers >= 1, "device %d: no weight all-gather (the update is not sharded)", d);
  CHECK(rs_fc1 >= 0 && bwd_conv >= 0 && rs_fc1 < bwd_conv,
        "device %d: fc1's gradient reduce-scatter (node %d) starts after the convolutions' backward (node %d)", d,
        rs_fc1, bwd_conv);
  CHECK(last >= 0, "device %d: an empty program", d);
  CHECK(dx_fc1 > rs_fc1 && rs_fc1 >= 0, "device %d: fc1's input gradient (node %d) runs before its weight gradient's "
        "reduce-scatter (node %d) starts", d, dx_fc1, rs_fc1);
  CHECK(first_coll == rs_fc1 && reductions == 2, "device %d: first collective %d (%s), fc1's reduce-scatter %d, %d "
        "reductions (expected 2: the loss and the small gradients in the last bucket)", d, first_coll,
        first_coll >= 0 ? ir_op_name(g->nodes[first_coll].op) : "", rs_fc1, reductions);
  /* after the last reduction starts, nodes run in the order of the
   * collectives they wait for (opt/schedule.c): fc1's update and all-gather
   * (its reduce-scatter started first) before the convolutions' updates
   * (their bucket's all-reduce started after it) */
  int32_t *key = malloc(((size_t)g->n_nodes + 1) * sizeof *key);
  int tail = 0, bad = -1;
  for (int i = 0; key && i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    key[i] = -1;
    for (int k = 0; k < n->n_in; k++) {
      int in = n->in[k];
      int32_t ki = is_started(g->nodes[in].op) ? in : key[in];
      if (ki > key[i]) key[i] = ki;
    }
    if (key[i] < 0 && is_started(n->op)) tail = i + 1;
  }
  int prev = -1; /* the last node of the tail that waits for a collective */
  for (int i = tail; key && i < g->n_nodes && bad < 0; i++) {
    if (key[i] < 0) continue; /* waits for nothing: anywhere */
    if (prev >= 0 && key[i] < key[prev]) bad = i;
    else prev = i;
  }
  CHECK(key && bad < 0, "device %d: node %d (%s) waits for collective %d but comes after node %d (%s), which waits for "
        "collective %d started later", d, bad, bad >= 0 ? ir_op_name(g->nodes[bad].op) : "", bad >= 0 ? key[bad] : 0,
        prev, prev >= 0 ? ir_op_name(g->nodes[prev].op) : "", prev >= 0 ? key[prev] : 0);
  int ag_fc1 = -1, conv_update = -1;
  for (int i = tail; key && i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    if (n->op == TS_OP_ALL_GATHER && ts_shape_numel(n->rank, n->shape) == 128 * 9216) ag_fc1 = i;
    if (conv_update < 0 && key[i] > rs_fc1 && n->rank == 4) conv_update = i;
  }
  CHECK(ag_fc1 >= 0 && conv_update >= 0 && ag_fc1 < conv_update,
        "device %d: fc1's all-gather (node %d) starts after a convolution's update (node %d)", d, ag_fc1, conv_update);
  free(key);
}

/* The carried all-gathers (defer) start in the order of the first reader of
 * the input their output is aliased to: the next step's use of that weight. */
static void check_carried_order(const ts_executable *e, int d) {
  const ts_graph *g = e->g;
  int n = g->n_nodes, gathers = 0, prev = -1, prev_node = -1;
  for (int i = 0; i < n; i++) {
    if (g->nodes[i].op != TS_OP_ALL_GATHER || !e->defer || !e->defer[i]) continue;
    int input = -1;
    for (int k = 0; k < g->n_outputs && input < 0; k++) {
      int v = g->outputs[k];
      while (g->nodes[v].op == TS_OP_RESHAPE) v = g->nodes[v].in[0];
      if (v == i && g->alias) input = g->alias[k];
    }
    CHECK(input >= 0, "device %d: carried all-gather %d is no aliased output", d, i);
    if (input < 0) continue;
    int node = g->inputs[input], first = n;
    for (int j = node + 1; j < n && first == n; j++)
      for (int k = 0; k < g->nodes[j].n_in; k++)
        if (g->nodes[j].in[k] == node) first = j;
    CHECK(first >= prev, "device %d: carried all-gather %d (weight read first at node %d) starts after gather %d "
          "(weight read at node %d): the next step waits for the later weight first", d, i, first, prev_node, prev);
    prev = first;
    prev_node = i;
    gathers++;
  }
  CHECK(gathers >= 3, "device %d: %d carried all-gathers with every weight sharded", d, gathers);
}

static void batch(int s, float *x, int32_t *y) {
  uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);
  for (int i = 0; i < 2 * B * PIX; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(r >> 40) * 0x1p-24f;
  }
  for (int i = 0; i < 2 * B; i++) y[i] = (i * 7 + s) % 10;
}

/* After a run: each started weight all-gather with one block per member
 * whose operand is a temporary read by it alone (the fused update's new
 * block) had that operand computed in the gather's own slot of its result
 * (runtime/execute.c gather_operands_in_slot): the start copies nothing.
 * Returns how many. */
static int gathers_in_slot(const ts_executable *e, int d) {
  const ts_graph *g = e->g;
  int in_slot = 0;
  for (int a = 0; a < g->n_nodes; a++) {
    const ts_node *n = &g->nodes[a];
    if (n->op != TS_OP_ALL_GATHER || !e->async || !e->async[a]) continue;
    const ts_node *x = &g->nodes[n->in[0]];
    size_t bytes = (size_t)ts_shape_numel(x->rank, x->shape) * ts_dtype_size(x->dtype);
    int r = -1;
    for (int i = 0; i < n->attr.coll->n; i++)
      if (n->attr.coll->ids[i] == d) r = i;
    int p = ir_reshape_base(g, n->in[0]);
    CHECK(r >= 0 && e->values[p] == (char *)e->values[a] + (size_t)r * bytes,
          "device %d: all-gather %d's operand %d (%s) is not computed in its slot %d of the result", d, a, p,
          ir_op_name(g->nodes[p].op), r);
    in_slot += r >= 0 && e->values[p] == (char *)e->values[a] + (size_t)r * bytes;
  }
  return in_slot;
}

static bool overlap(const plan_value *a, const plan_value *b) {
  return a->bytes && b->bytes && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* The update chains of device d's program (TESSEL_UPDATE_CHAINS=all, every
 * weight sharded): fc1's alone (the other gathers move less than 1 MiB),
 * handed off after the node that reads fc1's weight last (its input
 * gradient, a dot_general), and every arena value of a chain disjoint from
 * each arena value live after that hand-off. */
static void check_chains(const ts_executable *e, int d) {
  const ts_graph *g = e->g;
  CHECK(e->n_chains == 1, "device %d: %d update chains, want 1 (fc1's 4.7 MB gather; the others move < 1 MiB)", d,
        e->n_chains);
  int fc1 = -1;
  for (int c = 0; c < e->n_chains; c++) {
    int G = e->chains[c].gather;
    CHECK(g->nodes[G].op == TS_OP_ALL_GATHER && e->defer && e->defer[G], "device %d: chain %d ends in node %d (%s)", d,
          c, G, ir_op_name(g->nodes[G].op));
    if (g->nodes[G].shape[0] == 128 && g->nodes[G].rank == 2 && g->nodes[G].shape[1] == 9216) fc1 = G;
  }
  CHECK(fc1 >= 0, "device %d: no chain gathers fc1's weight", d);
  if (fc1 >= 0) {
    int h = e->chains[0].gather == fc1 ? e->chains[0].hand_off : -1;
    CHECK(h >= 0 && g->nodes[h].op == TS_OP_DOT, "device %d: fc1's chain handed off after node %d (%s)", d, h,
          h >= 0 ? ir_op_name(g->nodes[h].op) : "-");
  }
  for (int v = 0; v < g->n_nodes; v++) {
    const plan_value *pv = &e->plan.values[v];
    if (e->chain_of[v] < 0 || pv->kind != PLAN_ARENA) continue;
    int h = e->chains[0].hand_off; /* the one chain's */
    CHECK(pv->def == h && pv->last == g->n_nodes, "device %d: chain value %d live [%d, %d], want [%d, end]", d, v,
          pv->def, pv->last, h);
    for (int w = 0; w < g->n_nodes; w++) {
      const plan_value *pw = &e->plan.values[w];
      if (w == v || pw->kind != PLAN_ARENA || pw->last < pv->def) continue;
      CHECK(!overlap(pv, pw), "device %d: chain value %d [%zu, +%zu) shares arena memory with %d (%s, live [%d, %d])",
            d, v, pv->offset, pv->bytes, w, ir_op_name(g->nodes[w].op), pw->def, pw->last);
    }
  }
}

/* STEPS steps; the losses, then the parameters (ts_params_sync_host). */
static int train(ts_client *c, bool shard, size_t min_bytes, float *losses, ts_params *p, bool check) {
  ts_graph *g = step_graph(p, shard); /* the sharded runs: the loss in the last bucket */
  ts_compile_options co = {.replicas = true, .shard_update = shard, .shard_update_min_bytes = min_bytes};
  ts_executable *e = ts_compile(c, g, &co);
  if (!e) return -1;
  if (check) {
    CHECK(e->n_dev == 2, "2 device programs, got %d", e->n_dev);
    for (int d = 0; d < e->n_dev; d++)
      if (env_config()->update_chains == 2) check_chains(e->dev[d], d);
      else if (min_bytes) check_carried_order(e->dev[d], d);
      else check_program(e->dev[d], d);
  }
  int ni = ts_graph_num_inputs(g), no = ts_graph_num_outputs(g), rc = 0;
  ts_buffer **in = calloc((size_t)ni, sizeof *in), **out = calloc((size_t)no, sizeof *out);
  ts_buffer *data[4] = {0};
  static float x[2 * B * PIX];
  static int32_t y[2 * B];
  for (int i = 0; i < ni && in; i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    int k = strcmp(name, "x") == 0 ? 0 : strcmp(name, "y") == 0 ? 1 : strcmp(name, "lr") == 0 ? 2
          : strcmp(name, "step") == 0 ? 3 : -1;
    if (k >= 0) in[i] = data[k] = ts_buffer_new(c, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t));
    else in[i] = ts_params_buffer(p, c, ts_params_find(p, name));
    if (!in[i]) rc = -1;
  }
  ts_buffer *bloss = ts_buffer_new(c, TS_F32, 0, NULL);
  if (!in || !out || !bloss) rc = -1;
  for (int s = 0; s < STEPS && rc == 0; s++) {
    batch(s, x, y);
    float lr = 0.01f, step = (float)(s + 1);
    for (int d = 0; d < 2 && rc == 0; d++)
      rc = ts_buffer_write_shard(data[0], d, x + d * B * PIX, (size_t)(B * PIX) * sizeof(float)) |
           ts_buffer_write_shard(data[1], d, y + d * B, (size_t)B * sizeof(int32_t));
    rc |= ts_buffer_write(data[2], &lr, sizeof lr) | ts_buffer_write(data[3], &step, sizeof step);
    out[0] = bloss;
    for (int k = 1; k < no; k++) out[k] = NULL;
    if (rc == 0) rc = ts_execute(e, in, out);
    if (rc == 0) rc = ts_buffer_read(bloss, &losses[s], sizeof(float));
  }
  if (rc == 0 && check)
    for (int d = 0; d < e->n_dev; d++) CHECK(gathers_in_slot(e->dev[d], d) >= 1, "device %d: no gather in place", d);
  if (rc == 0) rc = ts_params_sync_host(p);
  for (int k = 0; k < 4; k++) ts_buffer_free(data[k]);
  ts_buffer_free(bloss);
  free(in);
  free(out);
  ts_executable_free(e);
  ts_graph_free(g);
  return rc;
}

int main(void) {
  ts_test_init("overlap_schedule", 0);
  ts_client *c = ts_client_new(&(ts_client_options){.num_devices = 2, .num_threads = 2, .process_local = true});
  if (!c) {
    CHECK(0, "client: %s", ts_last_error());
    return ts_test_finish();
  }
  ts_params *pr = ts_params_new(7);
  float lr_[STEPS] = {0};
  CHECK(train(c, false, 0, lr_, pr, false) == 0, "replicated update: %s", ts_last_error());
  for (int all = 0; all < 3; all++) { /* fc1 sharded (default threshold), every weight, every weight chained */
    ts_params *ps = ts_params_new(7);
    float ls[STEPS] = {0};
    if (all == 2) {
      setenv("TESSEL_UPDATE_CHAINS", "all", 1);
      env_config_reload();
    }
    int64_t chains0 = ts_counter_value("UpdateChains");
    CHECK(train(c, true, all ? 1 : 0, ls, ps, true) == 0, "sharded update: %s", ts_last_error());
    int64_t chains = ts_counter_value("UpdateChains") - chains0;
    CHECK(chains == (all == 2 ? 2 * STEPS : 0), "%lld update chains handed off (pass %d)", (long long)chains, all);
    CHECK(memcmp(lr_, ls, sizeof ls) == 0, "losses differ: %.9g %.9g %.9g vs %.9g %.9g %.9g", lr_[0], lr_[1],
          lr_[2], ls[0], ls[1], ls[2]);
    for (int i = 0; i < ts_params_count(pr); i++) {
      int j = ts_params_find(ps, ts_params_name(pr, i));
      CHECK(j >= 0 && memcmp(ts_params_host(pr, i), ts_params_host(ps, j),
                             (size_t)ts_params_numel(pr, i) * sizeof(float)) == 0,
            "%s differs after %d steps (sharded%s vs replicated update)", ts_params_name(pr, i), STEPS,
            all ? ", every weight" : "");
    }
    ts_params_free(ps);
  }
  ts_params_free(pr);
  ts_client_free(c);
  return ts_test_finish();
}
