/* mpi_ddp_zero.c — DDP with the sharded update (ts_compile_options.shard_update,
 * PyTorch's ZeroRedundancyOptimizer semantics) equals DDP with the
 * replicated update bit for bit (under mpirun -n 2 and -n 3).
 *
 * Two replica setups, each trained twice from the same initial values (30
 * steps, every replica on its rows of a global batch of 6), once with every
 * replica updating every weight, once with the update sharded:
 *  - one replica per process (the job's client);
 *  - two replicas in one process (a process-local client of 2 devices, each
 *    device written its own rows with ts_buffer_write_shard).
 * Models: the MNIST CNN (no dropout) with AdamW (weight decay, gradient
 * clipping: a rank-0 coefficient from every gradient) and the MLP with SGD
 * (momentum, Nesterov, weight decay). Checked: the 30 losses are identical,
 * every parameter and optimizer state after the last step is identical
 * (bytes), the sharded program has all-gathers (the update really was split;
 * every weight, shard_update_min_bytes = 1; the default 512 KiB splits the
 * MLP's two large weights only), across processes every process holds the same parameters, and the MLP's
 * block updates ran as update chains on the collective worker (TESSEL_UPDATE_CHAINS=all; metrics UpdateChains). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "util/config.h" /* env_config_reload: TESSEL_UPDATE_CHAINS */
#include "tessel/tessel.h"

enum { GB = 6, STEPS = 30, PIX = 28 * 28 };

static ts_graph *step_graph(ts_params *p, int64_t b, bool cnn) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, (int64_t[]){b, 1, 28, 28});
  ts_tensor y = ts_input(g, "y", TS_I32, 1, (int64_t[]){b});
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE); /* no dropout: the replicas' masks would differ */
  ts_tensor loss = ts_cross_entropy(g, cnn ? ts_model_mnist_cnn(&m, x) : ts_model_mlp(&m, x), y);
  CHECK_OK(ts_graph_add_output(g, ts_replica_all_reduce(g, loss, TS_REDUCE_MEAN)));
  ts_tensor wrt[16], grads[16];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 16; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  CHECK_OK(ts_grad(g, loss, n, wrt, grads));
  CHECK(ts_ddp_average_gradients(g, n, grads, 256 << 10) >= 1, "buckets: %s", ts_last_error());
  ts_optim_config adamw = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01, .clip_norm = 1.0};
  ts_optim_config sgd = {.kind = TS_OPTIM_SGD, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-3};
  CHECK_OK(ts_optim_apply(&m, cnn ? &adamw : &sgd, lr, step, n, wrt, grads));
  CHECK_OK(ts_nn_finish(&m));
  return g;
}

static void batch(int s, float *x, int32_t *y) {
  uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);
  for (int i = 0; i < GB * PIX; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(r >> 40) * 0x1p-24f;
  }
  for (int i = 0; i < GB; i++) y[i] = (i * 7 + s) % 10;
}

/* STEPS steps of g on client c (R replicas: device d takes rows d*b..);
 * losses[s]; *gathers: the all-gathers in the program. */
static size_t min_bytes = 1; /* every weight split (the default, 512 KiB, would leave the convolutions whole) */

/* Of the last program train() compiled: the gradient bytes reduced (all-reduced
 * or reduce-scattered) and the reduce-scatters. */
static size_t coll_reduced;
static int coll_scatters;

static int train(ts_client *c, const ts_graph *g, ts_params *p, bool shard, int64_t b, int steps, float *losses,
                 int *gathers) {
  ts_compile_options co = {.replicas = true, .shard_update = shard, .shard_update_min_bytes = min_bytes};
  ts_executable *e = ts_compile(c, g, &co);
  if (!e) return -1;
  *gathers = 0;
  coll_reduced = coll_scatters = 0;
  for (int i = 0; i < ts_executable_num_collectives(e); i++) {
    ts_collective_info ci;
    if (ts_executable_collective(e, i, &ci) == 0 && ci.kind == TS_COLLECTIVE_ALL_GATHER) ++*gathers;
    if (ts_executable_collective(e, i, &ci) == 0 && ci.kind == TS_COLLECTIVE_ALL_REDUCE) coll_reduced += ci.bytes;
    if (ts_executable_collective(e, i, &ci) == 0 && ci.kind == TS_COLLECTIVE_REDUCE_SCATTER)
      coll_reduced += ci.bytes, coll_scatters++; /* bytes: of the operand, the whole gradient */
  }
  int ni = ts_graph_num_inputs(g), no = ts_graph_num_outputs(g), rc = 0;
  ts_buffer **in = calloc((size_t)ni, sizeof *in), **out = calloc((size_t)no, sizeof *out);
  ts_buffer *data[4] = {0};
  static float x[GB * PIX];
  static int32_t y[GB];
  for (int i = 0; i < ni; i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    int k = strcmp(name, "x") == 0 ? 0 : strcmp(name, "y") == 0 ? 1 : strcmp(name, "lr") == 0 ? 2
          : strcmp(name, "step") == 0 ? 3 : -1;
    if (k >= 0) in[i] = data[k] = ts_buffer_new(c, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t));
    else in[i] = ts_params_buffer(p, c, ts_params_find(p, name));
    if (!in[i]) rc = -1;
  }
  ts_buffer *bloss = ts_buffer_new(c, TS_F32, 0, NULL);
  int first = ts_client_first_local_device(c), nl = ts_client_num_local_devices(c);
  for (int s = 0; s < steps && rc == 0; s++) {
    batch(s, x, y);
    float lr = 0.01f, step = (float)(s + 1);
    for (int d = first; d < first + nl && rc == 0; d++) /* each replica its own rows */
      rc = ts_buffer_write_shard(data[0], d, x + d * b * PIX, (size_t)(b * PIX) * sizeof(float)) |
           ts_buffer_write_shard(data[1], d, y + d * b, (size_t)b * sizeof(int32_t));
    rc |= ts_buffer_write(data[2], &lr, sizeof lr) | ts_buffer_write(data[3], &step, sizeof step);
    out[0] = bloss;
    for (int k = 1; k < no; k++) out[k] = NULL; /* aliased: updated in place */
    if (rc == 0) rc = ts_execute(e, in, out);
    if (rc == 0) rc = ts_buffer_read(bloss, &losses[s], sizeof(float));
  }
  if (rc == 0) rc = ts_params_sync_host(p);
  for (int k = 0; k < 4; k++) ts_buffer_free(data[k]);
  ts_buffer_free(bloss);
  free(in);
  free(out);
  ts_executable_free(e);
  return rc;
}

/* One setup: replicated vs sharded update on client c. */
static void compare(ts_client *c, const char *setup, bool cnn) {
  int R = ts_client_num_devices(c), rank = ts_client_process_index(c);
  int64_t b = GB / R;
  ts_params *pr = ts_params_new(7), *ps = ts_params_new(7);
  ts_graph *gr = step_graph(pr, b, cnn), *gs = step_graph(ps, b, cnn);
  float lr_[STEPS] = {0}, ls[STEPS] = {0};
  int g_rep = 0, g_sh = 0;
  CHECK(train(c, gr, pr, false, b, STEPS, lr_, &g_rep) == 0, "%s rank %d: replicated: %s", setup, rank, ts_last_error());
  size_t red_rep = coll_reduced;
  int64_t chains0 = ts_counter_value("UpdateChains");
  CHECK(train(c, gs, ps, true, b, STEPS, ls, &g_sh) == 0, "%s rank %d: sharded: %s", setup, rank, ts_last_error());
  /* the MLP's block updates (SGD: from the reduce-scatter alone) run on the
   * collective worker, update chains (runtime/cpu_device.c; forced here:
   * TESSEL_UPDATE_CHAINS=all); the CNN's clip coefficient reads every
   * gradient: its updates stay */
  int64_t chains = ts_counter_value("UpdateChains") - chains0;
  bool chained = !cnn && R % 2 == 0;
  CHECK(chained ? chains >= STEPS : chains == 0, "%s: %lld update chains in %d steps", setup, (long long)chains, STEPS);
  /* the sharded update reduces each gradient once: a reduce-scatter where
   * the full average is not needed (the MLP with SGD), else the all-reduce
   * (the CNN's clipping reads every gradient whole) */
  CHECK(coll_reduced == red_rep, "%s: %zu gradient bytes reduced by the sharded update, %zu by the replicated", setup,
        coll_reduced, red_rep);
  CHECK(cnn || R % 2 || coll_scatters >= 1, "%s: the MLP's sharded update has no reduce-scatter", setup);
  int scatters = coll_scatters;
  CHECK(g_rep == 0, "%s: the replicated update has %d all-gathers", setup, g_rep);
  /* MLP (784-512-512-10) over 3 replicas: no dim of a weight divides by 3, nothing to split */
  bool splits = cnn || R % 2 == 0;
  CHECK(splits ? g_sh >= 3 : g_sh == 0, "%s: %d all-gathers in the sharded update", setup, g_sh);
  for (int s = 0; s < STEPS; s++)
    CHECK(memcmp(&lr_[s], &ls[s], sizeof(float)) == 0, "%s rank %d step %d: loss %.9g sharded vs %.9g replicated",
          setup, rank, s + 1, ls[s], lr_[s]);
  uint64_t hash = 1469598103934665603ull;
  int differ = 0;
  for (int i = 0; i < ts_params_count(pr); i++) {
    int j = ts_params_find(ps, ts_params_name(pr, i));
    CHECK(j >= 0, "%s missing", ts_params_name(pr, i));
    if (j < 0) continue;
    size_t bytes = (size_t)ts_params_numel(pr, i) * sizeof(float);
    const unsigned char *a = ts_params_host(pr, i), *d = ts_params_host(ps, j);
    if (memcmp(a, d, bytes) != 0 && differ++ < 3)
      CHECK(0, "%s rank %d: %s differs after %d steps (sharded vs replicated update)", setup, rank,
            ts_params_name(pr, i), STEPS);
    for (size_t k = 0; k < bytes; k++) hash = (hash ^ d[k]) * 1099511628211ull;
  }
  CHECK(differ == 0, "%s rank %d: %d tensors differ", setup, rank, differ);
  if (ts_client_process_count(c) > 1) {
    char text[64];
    snprintf(text, sizeof text, "parameter hash %016llx", (unsigned long long)hash);
    CHECK(ts_client_check_same(c, "sharded-update replicas' parameters", text) == 0, "%s", ts_last_error());
  }
  if (rank == 0)
    printf("%s, %s: %d replicas, %d all-gathers, %d reduce-scatters, %lld update chains, losses %.9g .. %.9g "
           "identical, %d parameter/state tensors identical\n",
           setup, cnn ? "CNN AdamW" : "MLP SGD", R, g_sh, scatters, (long long)chains, ls[0], ls[STEPS - 1],
           ts_params_count(pr));
  ts_graph_free(gr);
  ts_graph_free(gs);
  ts_params_free(pr);
  ts_params_free(ps);
}

int main(void) {
  ts_test_init("mpi_ddp_zero", 0);
  setenv("TESSEL_UPDATE_CHAINS", "all", 1); /* on one host too: the sharded runs check update chains */
  env_config_reload();
  ts_client *c = ts_client_new(&(ts_client_options){.num_devices = 1, .num_threads = 1});
  ts_client *local = ts_client_new(&(ts_client_options){.num_devices = 2, .num_threads = 2, .process_local = true});
  if (!c || !local) {
    CHECK(0, "clients: %s", ts_last_error());
    return ts_test_finish();
  }
  int np = ts_client_process_count(c);
  CHECK(np >= 2 && GB % np == 0, "run under mpirun with 2 or 3 processes (%d)", np);
  /* the default threshold: the MLP's fc1 (1.6 MB) and fc2 (1 MB) split, fc3 (20 KB) not */
  min_bytes = 0;
  {
    ts_params *p = ts_params_new(7);
    ts_graph *g = step_graph(p, GB / np, false);
    float l[STEPS];
    int gathers = 0;
    CHECK(train(c, g, p, true, GB / np, 1, l, &gathers) == 0, "default threshold: %s", ts_last_error());
    CHECK(gathers == (np == 2 ? 2 : 0), "default threshold: %d all-gathers over %d replicas", gathers, np);
    ts_graph_free(g);
    ts_params_free(p);
  }
  min_bytes = 1;
  compare(c, "one replica per process", true);
  compare(c, "one replica per process", false);
  if (ts_client_process_index(c) == 0) { /* the in-process setup once (rank 0) */
    compare(local, "two replicas in one process", true);
    compare(local, "two replicas in one process", false);
  }
  ts_client_free(local);
  ts_client_free(c);
  return ts_test_finish();
}
