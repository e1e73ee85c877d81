/* test_fsdp.c — FSDP holds 1/N of the model per device. The MLP training
 * step (784-512-512-10, AdamW) is compiled on the meshes fsdp=2, fsdp=4 and
 * data=2,fsdp=2 with the batch split over data and fsdp and every parameter
 * marked on the fsdp axis (the first dim it divides evenly, else dim 0 with
 * padding); the optimizer state is left to propagation (but for an uneven
 * split, see mark_fsdp). Checked:
 *  - every parameter and every optimizer-state input of the compiled program
 *    is cut into N = |fsdp| blocks, and each device's block is
 *    prod(ceil(dim / tiles)) elements: 1/N of the global bytes exactly where
 *    the dim divides, else at most one padded row/column more;
 *  - the parameter buffers keep that layout after training steps (the updates
 *    are aliased to them in place, not gathered), and each device holds at
 *    most (total bytes of parameters and state) / N + padding;
 *  - the program all-gathers weights and reduce-scatters their gradients
 *    over the fsdp axis (the FSDP schedule, not a replicated update);
 *  - its losses over 3 steps equal one device's within 1e-5 relative (f32). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

#define B 16
#define STEPS 3

/* The training step of the MLP on a (B, 1, 28, 28) batch. */
static ts_graph *train_step(ts_params *p) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, (int64_t[]){B, 1, 28, 28}); // (B, 1, 28, 28)
  ts_tensor y = ts_input(g, "y", TS_I32, 1, (int64_t[]){B});            // (B)
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  ts_tensor loss = ts_cross_entropy(g, ts_model_mlp(&m, x), y);
  CHECK_OK(ts_graph_add_output(g, loss));
  ts_tensor wrt[16], grads[16];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 16; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  CHECK_OK(ts_grad(g, loss, n, wrt, grads));
  ts_optim_config adamw = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01};
  CHECK_OK(ts_optim_apply(&m, &adamw, lr, step, n, wrt, grads));
  CHECK_OK(ts_nn_finish(&m));
  return g;
}

static bool is_data(const ts_graph *g, ts_tensor t) {
  const char *n = ts_input_name(g, t);
  return strcmp(n, "x") == 0 || strcmp(n, "y") == 0 || strcmp(n, "lr") == 0 || strcmp(n, "step") == 0;
}

/* Marks the batch over data+fsdp and every trainable parameter over fsdp. */
static void mark_fsdp(ts_graph *g, const ts_params *p, const ts_mesh *m) {
  int data = -1, fsdp = -1;
  for (int a = 0; a < ts_mesh_rank(m); a++) {
    if (strcmp(ts_mesh_axis_name(m, a), "data") == 0) data = a;
    if (strcmp(ts_mesh_axis_name(m, a), "fsdp") == 0) fsdp = a;
  }
  int64_t nf = ts_mesh_axis_size(m, fsdp);
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    int rank = ts_tensor_rank(g, t);
    ts_partition_spec s;
    ts_partition_spec_init(&s, rank);
    if (strcmp(name, "x") == 0 || strcmp(name, "y") == 0) {
      if (data >= 0) ts_partition_spec_add_axis(&s, 0, data);
      ts_partition_spec_add_axis(&s, 0, fsdp);
    } else if (ts_params_find(p, name) >= 0) {
      int d = 0;
      while (d < rank && ts_tensor_shape(g, t)[d] % nf != 0) d++;
      /* the optimizer state of an evenly split parameter is left to
       * propagation; propagation does not carry an uneven split (fc3.bias,
       * 10 over 4) to the state, so that state is marked like its parameter */
      if (!ts_params_trainable(p, ts_params_find(p, name)) && d < rank) continue;
      ts_partition_spec_add_axis(&s, d < rank ? d : 0, fsdp);
    } else {
      continue; /* lr, step */
    }
    ts_sharding *sh = ts_sharding_new(m, &s, rank);
    CHECK_OK(ts_mark_sharding(g, t, sh));
    ts_sharding_free(sh);
  }
}

static uint64_t g_rng;
static uint32_t rnd(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_rng >> 33);
}

/* Runs STEPS steps of g on client c (fresh parameters from seed 5, the same
 * batches for every call); losses[s] per step. Returns the input buffers
 * (caller frees) through *bufs when bufs is non-NULL. */
static int train(ts_client *c, const ts_graph *g, ts_params *p, const ts_compile_options *co, float *losses,
                 ts_executable **exe_out, ts_buffer ***bufs) {
  ts_executable *e = ts_compile(c, g, co);
  if (!e) return -1;
  int ni = ts_graph_num_inputs(g), no = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)ni, sizeof *in), **out = calloc((size_t)no, sizeof *out);
  static float x[B * 784];
  static int32_t y[B];
  int rc = 0;
  for (int i = 0; i < ni; i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    if (is_data(g, t)) in[i] = ts_buffer_new(c, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t));
    else in[i] = ts_params_buffer(p, c, ts_params_find(p, name));
    if (!in[i]) rc = -1;
  }
  ts_buffer *bloss = ts_buffer_new(c, TS_F32, 0, NULL);
  g_rng = 99;
  for (int s = 0; s < STEPS && rc == 0; s++) {
    for (int i = 0; i < B * 784; i++) x[i] = (float)(rnd() % 1000) / 1000.0f;
    for (int i = 0; i < B; i++) y[i] = (int32_t)(rnd() % 10);
    float lr = 1e-3f, step = (float)(s + 1);
    for (int i = 0; i < ni && rc == 0; i++) {
      const char *name = ts_input_name(g, ts_graph_input(g, i));
      if (strcmp(name, "x") == 0) rc = ts_buffer_write(in[i], x, sizeof x);
      if (strcmp(name, "y") == 0) rc = ts_buffer_write(in[i], y, sizeof y);
      if (strcmp(name, "lr") == 0) rc = ts_buffer_write(in[i], &lr, sizeof lr);
      if (strcmp(name, "step") == 0) rc = ts_buffer_write(in[i], &step, sizeof step);
    }
    out[0] = bloss;
    for (int k = 1; k < no; k++) out[k] = NULL; /* aliased: updated in place */
    if (rc == 0) rc = ts_execute(e, in, out);
    if (rc == 0) rc = ts_buffer_read(bloss, &losses[s], sizeof(float));
  }
  ts_buffer_free(bloss);
  for (int i = 0; i < ni; i++)
    if (is_data(g, ts_graph_input(g, i))) ts_buffer_free(in[i]), in[i] = NULL;
  free(out);
  if (bufs) *bufs = in;
  else free(in);
  *exe_out = e;
  return rc;
}

/* Bytes of one device's (padded) block of a tensor of `shape` under s. */
static int64_t block_bytes(const ts_sharding *s, int rank, const int64_t *shape, ts_dtype dt) {
  int64_t bs[TS_MAX_RANK], n = 1;
  if (ts_sharding_shard_shape(s, shape, bs) < 0) return -1;
  for (int d = 0; d < rank; d++) n *= bs[d];
  return n * (int64_t)ts_dtype_size(dt);
}

static void check_mesh(const char *mesh_text, const float *ref) {
  ts_mesh *m = ts_mesh_from_text(mesh_text);
  int ndev = (int)ts_mesh_num_devices(m), nf = 0;
  for (int a = 0; a < ts_mesh_rank(m); a++)
    if (strcmp(ts_mesh_axis_name(m, a), "fsdp") == 0) nf = (int)ts_mesh_axis_size(m, a);
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = ndev});
  ts_params *p = ts_params_new(5);
  ts_graph *g = train_step(p);
  mark_fsdp(g, p, m);
  float losses[STEPS] = {0};
  ts_executable *e = NULL;
  ts_buffer **in = NULL;
  ts_compile_options co = {.mesh = m};
  int rc = train(c, g, p, &co, losses, &e, &in);
  CHECK(rc == 0, "%s: %s", mesh_text, ts_last_error());
  for (int s = 0; s < STEPS && rc == 0; s++)
    CHECK(fabsf(losses[s] - ref[s]) <= 1e-5f * fmaxf(1.0f, fabsf(ref[s])), "%s step %d: loss %.9g, 1 device %.9g",
          mesh_text, s + 1, losses[s], ref[s]);

  int64_t total = 0, per_device = 0, padding = 0;
  int n_state = 0;
  for (int i = 0; e && i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    if (is_data(g, t)) continue;
    const char *name = ts_input_name(g, t);
    int rank = ts_tensor_rank(g, t);
    const int64_t *shape = ts_tensor_shape(g, t);
    ts_dtype dt = ts_tensor_dtype(g, t);
    int64_t global = ts_tensor_numel(g, t) * (int64_t)ts_dtype_size(dt);
    n_state += strchr(name, '.') != strrchr(name, '.'); /* "fc1.weight.exp_avg" */
    const ts_sharding *s = ts_executable_input_sharding(e, i);
    int64_t blocks = s ? ts_sharding_num_devices(s) / ts_sharding_replication(s) : 1;
    int64_t bb = s ? block_bytes(s, rank, shape, dt) : global;
    /* the largest padding one device can carry: one row of the split dims */
    int64_t pad_max = 0;
    for (int d = 0; s && d < rank; d++)
      if (ts_sharding_num_tiles(s, d) > 1) pad_max += global / shape[d];
    CHECK(blocks == nf, "%s: %s is cut into %lld blocks, expected %d", mesh_text, name, (long long)blocks, nf);
    CHECK(bb * nf >= global && bb * nf <= global + pad_max * nf,
          "%s: %s: a device holds %lld of %lld bytes (1/%d: %lld + padding <= %lld)", mesh_text, name, (long long)bb,
          (long long)global, nf, (long long)(global / nf), (long long)pad_max);
    /* the weights divide evenly: exactly 1/N */
    if (rank > 1) CHECK(bb * nf == global, "%s: %s: %lld bytes per device, 1/%d is %lld", mesh_text, name,
                        (long long)bb, nf, (long long)(global / nf));
    /* after the steps the buffer (updated in place) still holds that layout */
    const ts_sharding *bs = in && in[i] ? ts_buffer_sharding(in[i]) : NULL;
    CHECK(bs && s && ts_sharding_equal(bs, s), "%s: %s's buffer after %d steps is %s", mesh_text, name, STEPS,
          bs ? "laid out differently from the program's input" : "replicated");
    total += global;
    per_device += bb;
    padding += bb * nf - global;
  }
  CHECK(n_state == 2 * 6, "%s: %d optimizer-state inputs, expected 12 (AdamW: 2 per parameter)", mesh_text,
        n_state);
  CHECK(per_device * nf == total + padding && padding * 100 < total,
        "%s: a device holds %lld bytes of parameters and state, %lld in all (1/%d + %lld padding)", mesh_text,
        (long long)per_device, (long long)total, nf, (long long)padding);
  printf("%s: each device holds %lld of %lld bytes of parameters and optimizer state (1/%d, %lld bytes padding)\n",
         mesh_text, (long long)per_device, (long long)total, nf, (long long)padding);

  /* FSDP's collectives: weights all-gathered, gradients reduce-scattered, over fsdp */
  int fsdp_axis = ts_mesh_axis_index(m, "fsdp"), gathers = 0, scatters = 0;
  for (int k = 0; e && k < ts_executable_num_collectives(e); k++) {
    ts_collective_info ci;
    if (ts_executable_collective(e, k, &ci) != 0 || !(ci.mesh_axes & (1u << fsdp_axis))) continue;
    gathers += ci.kind == TS_COLLECTIVE_ALL_GATHER;
    scatters += ci.kind == TS_COLLECTIVE_REDUCE_SCATTER;
  }
  CHECK(gathers >= 3 && scatters >= 3, "%s: %d all-gathers and %d reduce-scatters over fsdp (3 weights each)",
        mesh_text, gathers, scatters);

  free(in); /* the parameter buffers themselves belong to p */
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  ts_mesh_free(m);
}

int main(void) {
  ts_test_init("fsdp", 0);
  float ref[STEPS] = {0};
  {
    ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 1});
    ts_params *p = ts_params_new(5);
    ts_graph *g = train_step(p);
    ts_executable *e = NULL;
    CHECK(train(c, g, p, NULL, ref, &e, NULL) == 0, "1 device: %s", ts_last_error());
    ts_executable_free(e);
    ts_graph_free(g);
    ts_params_free(p);
    ts_client_free(c);
  }
  check_mesh("fsdp=2", ref);
  check_mesh("fsdp=4", ref);
  check_mesh("data=2,fsdp=2", ref);
  return ts_test_finish();
}
