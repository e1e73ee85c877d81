/* mpi_ddp.c — DDP's numbers on the MNIST CNN (under mpirun -n 2 and -n 3).
 *
 * `tessel train --model cnn --parallel ddp` cannot be held against the
 * 1-device curve: each replica draws its own dropout masks (as PyTorch's DDP
 * does). This test takes dropout out (ts_nn_init without a seed) and checks
 * the rest of DDP on the CNN (convolutions, pooling, 4 parameter tensors in
 * several gradient buckets): every process runs the replica program
 * (ts_compile_options.replicas) on its rows of a global batch of 12, the
 * gradients averaged by ts_ddp_average_gradients in 64 KiB buckets, SGD with
 * momentum. Against the same training step on the whole batch on one device
 * (a process-local client, computed by every process):
 *  - the reported loss (ts_replica_all_reduce mean) follows the 1-device loss
 *    within 1e-4 relative at each of 4 steps;
 *  - every parameter after 4 steps equals the 1-device one within 1e-4 of
 *    its largest magnitude;
 *  - every process holds bit-identical parameters (ts_client_check_same on
 *    a hash of their bytes);
 *  - the loss averaged in the last gradient bucket
 *    (ts_ddp_average_gradients_logged, as tessel train's DDP step) equals
 *    its own ts_replica_all_reduce bit for bit at every step, and so do the
 *    parameters after 4 steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { GB = 12, STEPS = 4, PIX = 28 * 28 };

/* The CNN training step on a batch of b rows; replicas: the DDP program,
 * logged: its loss averaged with the last gradient bucket. */
static ts_graph *cnn_step(ts_params *p, int64_t b, bool replicas, bool logged) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, (int64_t[]){b, 1, 28, 28}); // (b, 1, 28, 28)
  ts_tensor y = ts_input(g, "y", TS_I32, 1, (int64_t[]){b});            // (b)
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE); /* no dropout: see the top of the file */
  ts_tensor loss = ts_cross_entropy(g, ts_model_mnist_cnn(&m, x), y);
  if (!logged) CHECK_OK(ts_graph_add_output(g, replicas ? ts_replica_all_reduce(g, loss, TS_REDUCE_MEAN) : loss));
  ts_tensor wrt[16], grads[16];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 16; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  CHECK_OK(ts_grad(g, loss, n, wrt, grads));
  if (replicas) {
    int buckets = logged ? ts_ddp_average_gradients_logged(g, n, grads, 64 << 10, 1, &loss)
                         : ts_ddp_average_gradients(g, n, grads, 64 << 10);
    CHECK(buckets >= 3, "%d gradient buckets (expected several: %s)", buckets, ts_last_error());
  }
  if (logged) CHECK_OK(ts_graph_add_output(g, loss)); /* output 0, as the other programs' */
  ts_optim_config sgd = {.kind = TS_OPTIM_SGD, .momentum = 0.9};
  CHECK_OK(ts_optim_apply(&m, &sgd, lr, step, n, wrt, grads));
  CHECK_OK(ts_nn_finish(&m));
  return g;
}

/* The global batch of step s (the same on every process). */
static void batch(int s, float *x, int32_t *y) {
  uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);
  for (int i = 0; i < GB * PIX; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(r >> 40) * 0x1p-24f;
  }
  for (int i = 0; i < GB; i++) y[i] = (i * 7 + s) % 10;
}

/* STEPS steps of g on client c with rows [row0, row0 + b) of each batch;
 * losses[s]. Parameters are p's buffers, updated in place. */
static int train(ts_client *c, const ts_graph *g, ts_params *p, bool replicas, int64_t row0, int64_t b,
                 float *losses) {
  ts_compile_options co = {.replicas = replicas};
  ts_executable *e = ts_compile(c, g, &co);
  if (!e) return -1;
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
  for (int s = 0; s < STEPS && rc == 0; s++) {
    batch(s, x, y);
    float lr = 0.05f, step = (float)(s + 1);
    rc = ts_buffer_write(data[0], x + row0 * PIX, (size_t)(b * PIX) * sizeof(float)) |
         ts_buffer_write(data[1], y + row0, (size_t)b * sizeof(int32_t)) | ts_buffer_write(data[2], &lr, sizeof lr) |
         ts_buffer_write(data[3], &step, sizeof step);
    out[0] = bloss;
    for (int k = 1; k < no; k++) out[k] = NULL; /* aliased: updated in place */
    if (rc == 0) rc = ts_execute(e, in, out);
    if (rc == 0) rc = ts_buffer_read(bloss, &losses[s], sizeof(float));
  }
  for (int k = 0; k < 4; k++) ts_buffer_free(data[k]);
  ts_buffer_free(bloss);
  free(in);
  free(out);
  ts_executable_free(e);
  return rc;
}

/* FNV-1a of every parameter's bytes (host copies synced first). */
static uint64_t params_hash(ts_params *p) {
  CHECK_OK(ts_params_sync_host(p));
  uint64_t hash = 1469598103934665603ull;
  for (int i = 0; i < ts_params_count(p); i++) {
    const unsigned char *bytes = (const unsigned char *)ts_params_host(p, i);
    for (int64_t k = 0; bytes && k < ts_params_numel(p, i) * (int64_t)sizeof(float); k++)
      hash = (hash ^ bytes[k]) * 1099511628211ull;
  }
  return hash;
}

/* The DDP step with the loss averaged in the last bucket against the one
 * with its own all-reduce (losses `got`, parameters pd after STEPS steps):
 * bit for bit. */
static void logged_same(ts_client *c, ts_params *pd, int64_t row0, int64_t b, const float *got) {
  ts_params *pl = ts_params_new(3);
  ts_graph *gl = cnn_step(pl, b, true, true);
  float logged[STEPS] = {0};
  CHECK(train(c, gl, pl, true, row0, b, logged) == 0, "DDP, loss in the last bucket: %s", ts_last_error());
  for (int s = 0; s < STEPS; s++)
    CHECK(memcmp(&logged[s], &got[s], sizeof(float)) == 0, "step %d: loss in the last bucket %.9g, own all-reduce %.9g",
          s + 1, logged[s], got[s]);
  uint64_t a = params_hash(pl), d = params_hash(pd);
  CHECK(a == d, "parameters after %d steps: hash %016llx with the loss in the last bucket, %016llx without", STEPS,
        (unsigned long long)a, (unsigned long long)d);
  ts_graph_free(gl);
  ts_params_free(pl);
}

int main(void) {
  ts_test_init("mpi_ddp", 0);
  ts_client *c = ts_client_new(&(ts_client_options){.num_devices = 1}); /* one replica per process */
  ts_client *local = ts_client_new(&(ts_client_options){.num_devices = 1, .process_local = true});
  if (!c || !local) {
    CHECK(0, "clients: %s", ts_last_error());
    return ts_test_finish();
  }
  int rank = ts_client_process_index(c), np = ts_client_process_count(c);
  CHECK(np >= 2, "run under mpirun with 2 or more processes (%d)", np);
  CHECK(GB % np == 0, "global batch %d over %d processes", GB, np);
  int64_t b = GB / np;

  ts_params *pr = ts_params_new(3), *pd = ts_params_new(3); /* the same initial values */
  ts_graph *gr = cnn_step(pr, GB, false, false), *gd = cnn_step(pd, b, true, false);
  float ref[STEPS] = {0}, got[STEPS] = {0};
  int rc = train(local, gr, pr, false, 0, GB, ref);
  CHECK(rc == 0, "rank %d: 1 device: %s", rank, ts_last_error());
  rc = train(c, gd, pd, true, rank * b, b, got);
  CHECK(rc == 0, "rank %d: DDP: %s", rank, ts_last_error());
  for (int s = 0; s < STEPS; s++)
    CHECK(fabsf(got[s] - ref[s]) <= 1e-4f * fmaxf(1.0f, fabsf(ref[s])), "rank %d step %d: DDP loss %.9g, 1 device %.9g",
          rank, s + 1, got[s], ref[s]);
  if (rank == 0)
    printf("losses (DDP over %d processes / 1 device): %.9g/%.9g ... %.9g/%.9g\n", np, got[0], ref[0],
           got[STEPS - 1], ref[STEPS - 1]);

  CHECK_OK(ts_params_sync_host(pr));
  CHECK_OK(ts_params_sync_host(pd));
  double worst = 0;
  for (int i = 0; i < ts_params_count(pr); i++) {
    int j = ts_params_find(pd, ts_params_name(pr, i));
    CHECK(j >= 0, "parameter %s missing in the DDP set", ts_params_name(pr, i));
    if (j < 0) continue;
    int64_t n = ts_params_numel(pr, i);
    const float *a = ts_params_host(pr, i), *d = ts_params_host(pd, j);
    double scale = 1.0, diff = 0;
    for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(a[k]));
    for (int64_t k = 0; k < n; k++) diff = fmax(diff, fabs((double)a[k] - d[k]));
    worst = fmax(worst, diff / scale);
    CHECK(diff <= 1e-4 * scale, "rank %d: %s after %d steps differs from 1 device by %.3g (scale %.3g)", rank,
          ts_params_name(pr, i), STEPS, diff, scale);
  }
  char text[64];
  snprintf(text, sizeof text, "parameter hash %016llx", (unsigned long long)params_hash(pd));
  CHECK(ts_client_check_same(c, "DDP replicas' parameters", text) == 0, "%s", ts_last_error());
  if (rank == 0) printf("parameters after %d steps: worst relative difference from 1 device %.3g\n", STEPS, worst);
  logged_same(c, pd, rank * b, b, got);

  ts_graph_free(gr);
  ts_graph_free(gd);
  ts_params_free(pr);
  ts_params_free(pd);
  ts_client_free(local);
  ts_client_free(c);
  return ts_test_finish();
}
