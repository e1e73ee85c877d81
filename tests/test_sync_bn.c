/* test_sync_bn.c — batch norm under DDP (replica programs, 2 replicas on 2
 * devices of one process, each on its 4 rows of a global batch of 8),
 * ResNet-20 at 1x8x8 in f64, 3 SGD-momentum steps:
 *  - ts_nn.sync_bn (tessel train --parallel ddp --sync-bn, PyTorch's
 *    SyncBatchNorm): statistics of the global batch, in the forward and the
 *    backward pass, so the run equals one device on the whole batch: losses,
 *    every parameter, optimizer state and running statistic to 1e-9
 *    relative to each tensor's largest value (f64: only summation order
 *    differs);
 *  - without it (PyTorch DDP's default): each replica normalizes with its own
 *    batch's statistics, so the loss differs from one device already at step
 *    1, yet the replicas stay identical (averaged gradients, same update):
 *    every parameter bit-identical on both devices after every step. The
 *    running statistics are each replica's own (PyTorch's DDP broadcasts
 *    rank 0's buffers at the next forward; tessel keeps each replica's).
 * And the step's collectives: one per batch norm in the forward pass (mean
 * and variance from one all-reduce of both shifted moments), one in the
 * backward pass, and one replica count for the whole model
 * (ts_nn.sync_replicas), not one per layer: each collective between hosts is
 * a wait for the other replicas.
 * And each replica's program: the backward pass's statistics all-reduces
 * have a convolution's weight gradient between them and their first user
 * (opt/schedule.c holds it back for them), one per convolution but the
 * first layer's, so between hosts its work hides their round trip; and
 * the statistics all-reduces after the large gradient bucket starts come
 * before that bucket's first user (they do not order the tail:
 * opt/schedule.c tail_keys), so the first layers' backward runs while the
 * bucket crosses the link instead of after its updates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h" /* ir_op_is_collective: counting the forward's collectives */
#include "runtime/executable.h" /* the replicas' programs (check_hidden) */
#include "tessel/tessel.h"

enum { B = 8, R = 2, C = 1, H = 8, STEPS = 3 };

typedef struct {
  double loss[STEPS];
  int n;
  double **vals[R]; /* per device: (n) values after the last step */
  int64_t *numel;
  char (*names)[96];
} run_out;

/* Device d's program: the all-reduces with a convolution's weight gradient
 * between them and their first user, against the weight gradients. */
static void check_hidden(const ts_executable *e, int d) {
  const ts_graph *g = e->dev[d]->g;
  int dw = 0, hidden = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    dw += g->nodes[i].op == TS_OP_CONV_BWD_FILTER;
    if (g->nodes[i].op != TS_OP_ALL_REDUCE) continue;
    bool work = false, used = false;
    for (int j = i + 1; j < g->n_nodes && !used; j++) {
      for (int k = 0; k < g->nodes[j].n_in; k++) {
        int v = g->nodes[j].in[k];
        while (g->nodes[v].op == TS_OP_RESHAPE) v = g->nodes[v].in[0];
        used |= v == i && g->nodes[j].op != TS_OP_RESHAPE;
      }
      work |= !used && g->nodes[j].op == TS_OP_CONV_BWD_FILTER;
    }
    hidden += work;
  }
  CHECK(dw > 1 && hidden >= dw - 1, "device %d: %d all-reduces with a weight gradient before their first user, %d "
        "weight gradients (want all but the first layer's)", d, hidden, dw);
  if (d == 0)
    printf("sync-bn program: %d all-reduces with a weight gradient before their first user, %d weight gradients\n",
           hidden, dw);
}

/* Device d's program: no tiny all-reduce (<= 64 KiB) after the first user of
 * the last large one (a gradient bucket). */
static void check_tail(const ts_executable *e, int d) {
  const ts_graph *g = e->dev[d]->g;
  int last = -1, user = -1, late = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    if (n->op == TS_OP_ALL_REDUCE && ts_shape_numel(n->rank, n->shape) * 8 > (64 << 10)) last = i, user = -1;
    for (int k = 0; last >= 0 && user < 0 && k < n->n_in; k++)
      if (n->in[k] == last) user = i;
  }
  for (int i = user >= 0 ? user : g->n_nodes; i < g->n_nodes; i++) {
    const ts_node *n = &g->nodes[i];
    if (n->op == TS_OP_ALL_REDUCE && ts_shape_numel(n->rank, n->shape) * 8 <= (64 << 10) && late < 0) late = i;
  }
  CHECK(last >= 0 && user > last && late < 0, "device %d: the last large all-reduce %d, its first user %d, a tiny "
        "all-reduce after that user at %d (its layer's backward waits for the bucket)", d, last, user, late);
}

/* replicas = 0: one device, the whole batch; else R replicas, sync_bn as given. */
static int train(int replicas, bool sync_bn, const double *xd, const int32_t *yd, run_out *o) {
  memset(o, 0, sizeof *o);
  int ndev = replicas ? R : 1;
  int64_t b = replicas ? B / R : B;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = ndev});
  ts_params *p = ts_params_new(5);
  ts_graph *g = ts_graph_new();
  int64_t xs[4] = {b, C, H, H};
  ts_tensor x = ts_input(g, "x", TS_F64, 4, xs), y = ts_input(g, "y", TS_I32, 1, &b);
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn nn;
  ts_nn_init(&nn, g, p, true, TS_NONE);
  nn.sync_bn = sync_bn;
  ts_tensor loss = ts_cross_entropy(g, ts_model_resnet(&nn, TS_RESNET20, x, 10), y);
  ts_graph_add_output(g, replicas ? ts_replica_all_reduce(g, loss, TS_REDUCE_MEAN) : loss);
  ts_tensor wrt[128], grads[128];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 128; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  /* sync-bn: one bucket of all but the first layers' last 32 KiB of
   * gradients, then a tiny one (ResNet-20's f32 step at 1 MiB: 1.05 MB and
   * 38 KB), so the first layers' backward runs after the large bucket
   * started (check_tail) */
  size_t bucket = 0;
  for (int i = 0; sync_bn && i < n; i++) bucket += (size_t)ts_tensor_numel(g, wrt[i]) * sizeof(double);
  if (bucket) bucket -= 32 << 10;
  ts_optim_config cfg = {.kind = TS_OPTIM_SGD, .momentum = 0.9};
  int rc = loss == TS_NONE || ts_grad(g, loss, n, wrt, grads) < 0 ||
                   (replicas && ts_ddp_average_gradients(g, n, grads, bucket) < 0) ||
                   ts_optim_apply(&nn, &cfg, lr, step, n, wrt, grads) < 0 || ts_nn_finish(&nn) < 0
               ? -1 : 0;
  ts_executable *e = NULL;
  if (rc == 0 && !(e = ts_compile(c, g, &(ts_compile_options){.replicas = replicas > 0}))) rc = -1;
  for (int d = 0; rc == 0 && replicas && sync_bn && d < R; d++) check_hidden(e, d), check_tail(e, d);
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in + 1, sizeof *in), **outs = calloc((size_t)n_out + 1, sizeof *outs);
  ts_buffer *xb = ts_buffer_new(c, TS_F64, 4, xs), *yb = ts_buffer_new(c, TS_I32, 1, &b);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *sb = ts_buffer_new(c, TS_F32, 0, NULL);
  for (int i = 0; rc == 0 && i < n_in; i++) {
    const char *nm = ts_input_name(g, ts_graph_input(g, i));
    in[i] = !strcmp(nm, "x") ? xb : !strcmp(nm, "y") ? yb : !strcmp(nm, "lr") ? lrb : !strcmp(nm, "step") ? sb
          : ts_params_buffer(p, c, ts_params_find(p, nm));
  }
  int64_t per = b * C * H * H;
  for (int s = 0; rc == 0 && s < STEPS; s++) {
    float lrv = 0.05f, sv = (float)(s + 1);
    for (int d = 0; d < ndev && rc == 0; d++) /* replica d: rows [d*b, (d+1)*b) of the global batch */
      rc = ts_buffer_write_shard(xb, d, xd + (s * B + d * b) * C * H * H, sizeof(double) * (size_t)per) ||
           ts_buffer_write_shard(yb, d, yd + s * B + d * b, sizeof(int32_t) * (size_t)b) ? -1 : 0;
    ts_buffer_write(lrb, &lrv, sizeof lrv);
    ts_buffer_write(sb, &sv, sizeof sv);
    memset(outs, 0, (size_t)n_out * sizeof *outs);
    if (rc == 0) rc = ts_execute(e, in, outs);
    if (rc == 0) rc = ts_buffer_read_shard(outs[0], 0, &o->loss[s], sizeof(double));
    if (outs[0]) ts_buffer_free(outs[0]);
  }
  o->n = ts_params_count(p);
  o->numel = calloc((size_t)o->n + 1, sizeof *o->numel);
  o->names = calloc((size_t)o->n + 1, sizeof *o->names);
  for (int d = 0; d < ndev; d++) o->vals[d] = calloc((size_t)o->n + 1, sizeof *o->vals[d]);
  for (int i = 0; rc == 0 && i < o->n; i++) {
    o->numel[i] = ts_params_numel(p, i);
    snprintf(o->names[i], sizeof o->names[i], "%s", ts_params_name(p, i));
    for (int d = 0; d < ndev && rc == 0; d++) {
      o->vals[d][i] = malloc((size_t)o->numel[i] * sizeof(double));
      rc = ts_buffer_read_shard(ts_params_buffer(p, c, i), d, o->vals[d][i], (size_t)o->numel[i] * sizeof(double));
    }
  }
  if (rc < 0) fprintf(stderr, "%s: %s\n", replicas ? (sync_bn ? "ddp sync-bn" : "ddp") : "1 device", ts_last_error());
  ts_buffer_free(xb), ts_buffer_free(yb), ts_buffer_free(lrb), ts_buffer_free(sb);
  free(in), free(outs);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return rc;
}

static void free_out(run_out *o) {
  for (int d = 0; d < R; d++) {
    for (int i = 0; o->vals[d] && i < o->n; i++) free(o->vals[d][i]);
    free(o->vals[d]);
  }
  free(o->numel);
  free(o->names);
}

/* The collectives of ResNet-20's sync-bn step (ts_nn.sync_replicas): one
 * per batch norm in the forward pass (both statistics together) and one
 * replica count; with the backward pass one more per batch norm (the
 * adjoint of the statistics' all-reduce: both cotangents together), each a
 * wait for the other replicas between hosts (before: 2 and 4 per batch norm). */
static void check_collectives(void) {
  ts_params *p = ts_params_new(5);
  ts_graph *g = ts_graph_new();
  int64_t xs[4] = {B / R, C, H, H}, b = B / R;
  ts_nn nn;
  ts_nn_init(&nn, g, p, true, TS_NONE);
  nn.sync_bn = true;
  ts_tensor out = ts_model_resnet(&nn, TS_RESNET20, ts_input(g, "x", TS_F64, 4, xs), 10);
  int fwd = 0, all = 0, bn = 0, n = 0;
  for (int i = 0; i < ts_params_count(p); i++) bn += strstr(ts_params_name(p, i), "running_mean") != NULL;
  for (int i = 0; i < g->n_nodes; i++) fwd += ir_op_is_collective(g->nodes[i].op);
  ts_tensor loss = ts_cross_entropy(g, out, ts_input(g, "y", TS_I32, 1, &b)), wrt[128], grads[128];
  for (int i = 0; i < ts_params_count(p) && n < 128; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  CHECK_OK(ts_grad(g, loss, n, wrt, grads));
  for (int i = 0; i < g->n_nodes; i++) all += ir_op_is_collective(g->nodes[i].op);
  CHECK(out != TS_NONE && bn > 1 && fwd == bn + 1 && all == 2 * bn + 1,
        "sync-bn: %d forward and %d step collectives for %d batch norms, want %d and %d (1 each way per batch "
        "norm and one replica count)", fwd, all, bn, bn + 1, 2 * bn + 1);
  printf("sync-bn: %d forward and %d step collectives for %d batch norms\n", fwd, all, bn);
  ts_graph_free(g);
  ts_params_free(p);
}

int main(void) {
  uint64_t seed = ts_test_init("test_sync_bn", 3);
  static double xd[STEPS * B * C * H * H];
  static int32_t yd[STEPS * B];
  uint64_t s = seed;
  for (size_t i = 0; i < sizeof xd / sizeof *xd; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xd[i] = (double)(s >> 11) * 0x1.0p-53 * 4.0 - 1.0;
  }
  for (int i = 0; i < STEPS * B; i++) yd[i] = (i * 7 + 3) % 10;
  check_collectives();
  run_out one = {0}, sync = {0}, local = {0};
  CHECK_OK(train(0, false, xd, yd, &one));
  CHECK_OK(train(R, true, xd, yd, &sync));
  CHECK_OK(train(R, false, xd, yd, &local));

  /* sync-bn: one device's run */
  double worst = 0;
  for (int k = 0; k < STEPS; k++) worst = fmax(worst, fabs(sync.loss[k] - one.loss[k]) / fabs(one.loss[k]));
  for (int i = 0; i < one.n && i < sync.n; i++)
    for (int d = 0; d < R; d++) {
      double mx = 0, diff = 0;
      for (int64_t j = 0; j < one.numel[i]; j++) {
        mx = fmax(mx, fabs(one.vals[0][i][j]));
        diff = fmax(diff, fabs(sync.vals[d][i][j] - one.vals[0][i][j]));
      }
      double r = mx > 0 ? diff / mx : diff;
      if (r > 1e-9) fprintf(stderr, "  sync-bn replica %d: %s differs by %.3g\n", d, one.names[i], r);
      worst = fmax(worst, r);
    }
  CHECK(sync.n == one.n && worst <= 1e-9, "DDP --sync-bn differs from 1 device by %.3g", worst);
  printf("DDP sync-bn, %d replicas: worst relative difference from 1 device %.3g over %d steps "
         "(losses %.10g .. %.10g)\n", R, worst, STEPS, sync.loss[0], sync.loss[STEPS - 1]);

  /* local statistics: another first loss, replicas identical */
  double d1 = fabs(local.loss[0] - one.loss[0]) / fabs(one.loss[0]);
  CHECK(d1 > 1e-6, "DDP without sync-bn: first loss %.12g equals 1 device's %.12g: statistics not local?",
        local.loss[0], one.loss[0]);
  int64_t differ = 0;
  for (int i = 0; i < local.n; i++) {
    bool stat = strstr(local.names[i], "running_") != NULL;
    if (!stat && memcmp(local.vals[0][i], local.vals[1][i], (size_t)local.numel[i] * sizeof(double)) != 0) differ++;
  }
  CHECK(differ == 0, "DDP without sync-bn: %lld parameters differ between the replicas", (long long)differ);
  printf("DDP local BN: first loss %.10g vs 1 device %.10g (relative %.3g); replicas bit-identical: %s\n",
         local.loss[0], one.loss[0], d1, differ ? "NO" : "yes");
  free_out(&one), free_out(&sync), free_out(&local);
  return ts_test_finish();
}
