/* test_autoshard_update.c — auto-sharding of a parameter's update (issue 16):
 *  - a linear layer trained by AdamW (decoupled weight decay) on 4 devices,
 *    its weight marked whole (data parallel): the plan computes the new weight on each device's slice and gathers it
 *    (ZeRO-1, the CLI's data layout), not on the whole weight with the
 *    sharded optimizer step gathered into it (graph shrinking had tied
 *    w * (1 - lr wd) and w - step to w's variable: the GPT on 8 devices
 *    updated every parameter on every device, 1.08-1.11x the hand layout's
 *    measured step); and 2 steps of it in f64 equal 1 device;
 *  - the cost model prices a weight gradient reduce-scattered into its
 *    columns above the same one into its rows (a block per row moved: the
 *    runtime's strided pieces), so the solver takes the hand layout's rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"
#include "ir/ir.h" /* ts_node: the update node's sharding */

enum { N = 64, D = 512, STEPS = 2 };

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_tensor x, y, lr, step;
} model;

/* m: the weight marked whole on it (data parallel: the layout the GPT's
 * plans keep its weights in), the rest left to the solver. */
static int build(model *md, const ts_mesh *m) {
  memset(md, 0, sizeof *md);
  md->p = ts_params_new(5);
  md->g = ts_graph_new();
  ts_graph *g = md->g;
  int64_t xs[2] = {N, D}, ys = N;
  md->x = ts_input(g, "x", TS_F64, 2, xs);
  md->y = ts_input(g, "y", TS_I32, 1, &ys);
  md->lr = ts_input(g, "lr", TS_F32, 0, NULL);
  md->step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn nn;
  ts_nn_init(&nn, g, md->p, true, TS_NONE);
  ts_tensor logits = ts_nn_linear(&nn, "fc", md->x, D, D, false);
  ts_tensor loss = ts_cross_entropy(g, logits, md->y);
  ts_graph_add_output(g, loss);
  ts_tensor w = ts_graph_find_input(g, "fc.weight"), dw;
  if (m) {
    ts_partition_spec whole;
    ts_partition_spec_init(&whole, 2);
    ts_sharding *sh = ts_sharding_new(m, &whole, 2);
    int r = sh ? ts_mark_sharding(g, w, sh) : -1;
    ts_sharding_free(sh);
    if (r < 0) return -1;
  }
  ts_optim_config cfg = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.1};
  return loss == TS_NONE || ts_grad(g, loss, 1, &w, &dw) < 0 || ts_optim_apply(&nn, &cfg, md->lr, md->step, 1, &w, &dw) < 0 ||
                 ts_nn_finish(&nn) < 0
             ? -1
             : 0;
}

/* The node written into input `name` (its donated update). */
static const ts_node *update_of(const ts_graph *g, const char *name) {
  for (int k = 0; g->alias && k < g->n_outputs; k++) {
    int a = g->alias[k];
    if (a >= 0 && g->nodes[g->inputs[a]].name && !strcmp(g->nodes[g->inputs[a]].name, name))
      return &g->nodes[g->outputs[k]];
  }
  return NULL;
}

static void plan_checks(const ts_mesh *m) {
  model md;
  CHECK_OK(build(&md, m));
  ts_auto_shard_info info;
  CHECK_OK(ts_auto_shard(md.g, &(ts_auto_shard_options){.mesh = m, .time_limit_s = 5}, &info, NULL));
  const ts_node *w = &md.g->nodes[ts_graph_find_input(md.g, "fc.weight")];
  const ts_node *u = update_of(md.g, "fc.weight");
  bool w_whole = !w->sharding || ts_sharding_is_replicated(w->sharding);
  bool u_split = u && u->sharding && !ts_sharding_is_replicated(u->sharding);
  CHECK(w_whole && u_split, "AdamW on 4 devices: weight %s, its update %s (want the weight whole, the update on a slice)",
        w_whole ? "whole" : "split", u_split ? "split" : "whole");
  printf("plan: AdamW's update of a whole %dx%d weight computed on each device's slice, then gathered: %s\n", D, D,
         u_split && w_whole ? "yes" : "no");
  ts_graph_free(md.g);
  ts_params_free(md.p);
}

/* Trains STEPS steps (mesh NULL: 1 device); *loss and the weight out. */
static int train(const ts_mesh *m, const double *xd, const int32_t *yd, double *loss, double *wout) {
  model md;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = m ? (int)ts_mesh_num_devices(m) : 1});
  int rc = build(&md, m);
  ts_executable *e = NULL;
  if (rc == 0 && !(e = ts_compile(c, md.g, &(ts_compile_options){.mesh = m, .auto_shard = m != NULL})))
    rc = -1;
  ts_graph *g = md.g;
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in + 1, sizeof *in), **outs = calloc((size_t)n_out + 1, sizeof *outs);
  int64_t xs[2] = {N, D}, nb = N;
  ts_buffer *xb = ts_buffer_new(c, TS_F64, 2, xs), *yb = ts_buffer_new(c, TS_I32, 1, &nb);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *sb = ts_buffer_new(c, TS_F32, 0, NULL);
  for (int i = 0; rc == 0 && i < n_in; i++) {
    const char *nm = ts_input_name(g, ts_graph_input(g, i));
    in[i] = !strcmp(nm, "x") ? xb : !strcmp(nm, "y") ? yb : !strcmp(nm, "lr") ? lrb : !strcmp(nm, "step") ? sb
          : ts_params_buffer(md.p, c, ts_params_find(md.p, nm));
  }
  for (int s = 0; rc == 0 && s < STEPS; s++) {
    float lrv = 0.01f, sv = (float)(s + 1);
    ts_buffer_write(xb, xd + (size_t)s * N * D, sizeof(double) * N * D);
    ts_buffer_write(yb, yd + s * N, sizeof(int32_t) * N);
    ts_buffer_write(lrb, &lrv, sizeof lrv);
    ts_buffer_write(sb, &sv, sizeof sv);
    memset(outs, 0, (size_t)n_out * sizeof *outs);
    rc = ts_execute(e, in, outs);
    if (rc == 0) rc = ts_buffer_read(outs[0], &loss[s], sizeof(double));
    if (outs[0]) ts_buffer_free(outs[0]);
  }
  if (rc == 0) rc = ts_params_sync_host(md.p);
  if (rc == 0) memcpy(wout, ts_params_host(md.p, ts_params_find(md.p, "fc.weight")), sizeof(double) * D * D);
  if (rc < 0) fprintf(stderr, "train on %s: %s\n", m ? "a mesh" : "1 device", ts_last_error());
  ts_buffer_free(xb), ts_buffer_free(yb), ts_buffer_free(lrb), ts_buffer_free(sb);
  free(in), free(outs);
  ts_executable_free(e);
  ts_graph_free(md.g);
  ts_params_free(md.p);
  ts_client_free(c);
  return rc;
}

static void equal_checks(const ts_mesh *m, uint64_t seed) {
  static double xd[STEPS * N * D], w1[D * D], w4[D * D];
  static int32_t yd[STEPS * N];
  uint64_t s = seed;
  for (size_t i = 0; i < sizeof xd / sizeof *xd; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xd[i] = (double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  }
  for (int i = 0; i < STEPS * N; i++) yd[i] = (i * 37 + 5) % D;
  double l1[STEPS], l4[STEPS];
  CHECK_OK(train(NULL, xd, yd, l1, w1));
  CHECK_OK(train(m, xd, yd, l4, w4));
  double big = 0, diff = 0;
  for (int i = 0; i < D * D; i++) big = fmax(big, fabs(w1[i])), diff = fmax(diff, fabs(w1[i] - w4[i]));
  for (int k = 0; k < STEPS; k++) diff = fmax(diff, fabs(l1[k] - l4[k]) / fmax(fabs(l1[k]), 1e-300) * big);
  CHECK(diff <= 1e-9 * big, "AdamW auto-sharded on 4 devices differs from 1 device by %.3g (largest weight %.3g)",
        diff / big, big);
  printf("equal: AdamW, auto-sharded on 4 devices, %d steps f64: worst relative difference %.3g\n", STEPS, diff / big);
}

/* dW = x^T dy reduce-scattered into dW's rows against its columns: the
 * columns move a block per row (strided pieces), priced above the rows. */
static void pieces_checks(const ts_mesh *m) {
  double t[2];
  for (int d = 0; d < 2; d++) {
    ts_graph *g = ts_graph_new();
    int64_t xs[2] = {64, 256}, ys[2] = {64, 1024};
    ts_tensor x = ts_input(g, "x", TS_F32, 2, xs), dy = ts_input(g, "dy", TS_F32, 2, ys);
    ts_dot_dims dd = {.n_contract = 1, .lhs_contract = {0}, .rhs_contract = {0}};
    ts_tensor dw = ts_dot_general(g, x, dy, &dd); /* [256, 1024] */
    ts_graph_add_output(g, dw);
    ts_partition_spec batch, out;
    ts_partition_spec_init(&batch, 2), ts_partition_spec_init(&out, 2);
    ts_partition_spec_add_axis(&batch, 0, 0), ts_partition_spec_add_axis(&out, d, 0);
    ts_sharding *sb = ts_sharding_new(m, &batch, 2), *so = ts_sharding_new(m, &out, 2);
    CHECK_OK(ts_mark_sharding(g, x, sb));
    CHECK_OK(ts_mark_sharding(g, dy, sb));
    CHECK_OK(ts_mark_sharding(g, dw, so));
    ts_sharding_free(sb), ts_sharding_free(so);
    ts_auto_shard_info info;
    CHECK_OK(ts_shard_predict(g, &(ts_auto_shard_options){.mesh = m}, &info));
    t[d] = info.step_s;
    ts_graph_free(g);
  }
  CHECK(t[1] > t[0], "a weight gradient reduce-scattered into its columns %.6g s, into its rows %.6g s (want more)",
        t[1], t[0]);
  printf("cost model: a [256,1024] gradient reduce-scattered into its rows %.4f ms, into its columns %.4f ms\n",
         1e3 * t[0], 1e3 * t[1]);
}

int main(void) {
  uint64_t seed = ts_test_init("test_autoshard_update", 16);
  ts_mesh *m = ts_mesh_from_text("a=4");
  plan_checks(m);
  equal_checks(m, seed);
  pieces_checks(m);
  ts_mesh_free(m);
  return ts_test_finish();
}
