/* train_spmd.c — SPMD training with the tessel API: one global program,
 * a device mesh, a few sharding annotations, and the compiler does the rest
 * (propagation, per-device programs, collectives).
 *
 *   usage: example_train_spmd [mesh (default data=4,model=2)] [steps (default 100)]
 *
 * A 2-layer MLP learns a random linear teacher on synthetic data. The batch
 * is split on mesh axis "data"; on axis "model" the MLP uses the Megatron
 * layout: fc1 column-parallel (its output features split), fc2 row-parallel
 * (its input features split), so each block needs one all-reduce of the
 * activation. The program prints the collectives the partitioner inserted
 * and the loss, which matches a 1-device run. Uses the public API only.
 * The same binary runs as several processes, the mesh's devices shared out
 * over them: mpirun -n 2 example_train_spmd data=4,model=2 (rank 0 prints). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessel/tessel.h>

#define B 64  /* global batch */
#define D 32  /* input features */
#define H 64  /* hidden */
#define C 8   /* classes */

/* Aborts with tessel's message: fine in an example, never in library code. */
static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "%s failed: %s\n", what, ts_last_error());
    exit(1);
  }
}

/* Marks tensor t with the partition spec text ("data,None") on mesh m. */
static void mark(ts_graph *g, const ts_mesh *m, ts_tensor t, const char *spec) {
  ts_partition_spec ps;
  check(ts_partition_spec_parse(m, spec, &ps) == 0, spec);
  ts_sharding *s = ts_sharding_new(m, &ps, ts_tensor_rank(g, t));
  check(s != NULL, "sharding");
  check(ts_mark_sharding(g, t, s) == 0, "mark_sharding");
  ts_sharding_free(s);
}

static double urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) * 0x1p-53;
}

int main(int argc, char **argv) {
  const char *mesh_text = argc > 1 ? argv[1] : "data=4,model=2";
  int steps = argc > 2 ? atoi(argv[2]) : 100;
  if (steps < 1 || (argc > 1 && strcmp(argv[1], "--help") == 0)) {
    printf("usage: %s [mesh (default data=4,model=2)] [steps (default 100)]\n", argv[0]);
    return steps < 1;
  }

  /* 1. the mesh, and a client with one virtual device per mesh device (under
   * mpirun: shared out over the processes) */
  ts_mesh *mesh = ts_mesh_from_text(mesh_text);
  check(mesh != NULL, "mesh");
  ts_client_options co = {.total_devices = (int)ts_mesh_num_devices(mesh)};
  ts_client *client = ts_client_new(&co);
  check(client != NULL, "client");
  bool rank0 = ts_client_process_index(client) == 0;

  /* 2. the global training step: forward, loss, gradients, SGD update */
  ts_graph *g = ts_graph_new();
  ts_params *params = ts_params_new(1);
  ts_tensor x = ts_input(g, "x", TS_F32, 2, (int64_t[]){B, D}); // (B, D)
  ts_tensor y = ts_input(g, "y", TS_I32, 1, (int64_t[]){B});    // (B)
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn nn;
  ts_nn_init(&nn, g, params, true, TS_NONE);
  ts_tensor h = ts_relu(g, ts_nn_linear(&nn, "fc1", x, D, H, true)); // (B, H)
  ts_tensor logits = ts_nn_linear(&nn, "fc2", h, H, C, true);       // (B, C)
  ts_tensor loss = ts_cross_entropy(g, logits, y);
  check(ts_graph_add_output(g, loss) == 0, "loss output");
  int np = ts_params_count(params);
  ts_tensor wrt[8], grads[8];
  for (int i = 0; i < np; i++) wrt[i] = ts_graph_find_input(g, ts_params_name(params, i));
  check(ts_grad(g, loss, np, wrt, grads) == 0, "grad");
  ts_optim_config sgd = {.kind = TS_OPTIM_SGD, .momentum = 0.9};
  check(ts_optim_apply(&nn, &sgd, lr, step, np, wrt, grads) == 0, "optimizer");
  check(ts_nn_finish(&nn) == 0, "finish");

  /* 3. shardings: batch on "data", Megatron MLP on "model"; the rest of the
   * program (activations, gradients, optimizer state) is propagated */
  bool has_data = false, has_model = false;
  for (int a = 0; a < ts_mesh_rank(mesh); a++) {
    has_data |= strcmp(ts_mesh_axis_name(mesh, a), "data") == 0;
    has_model |= strcmp(ts_mesh_axis_name(mesh, a), "model") == 0;
  }
  if (has_data) {
    mark(g, mesh, x, "data,None");
    mark(g, mesh, y, "data");
  }
  if (has_model) {
    mark(g, mesh, ts_graph_find_input(g, "fc1.weight"), "model,None"); // (H, D): output features split
    mark(g, mesh, ts_graph_find_input(g, "fc1.bias"), "model");
    mark(g, mesh, ts_graph_find_input(g, "fc2.weight"), "None,model"); // (C, H): input features split
  }

  /* 4. compile once: the report lists every collective the partitioner added */
  ts_compile_options opts = {.mesh = mesh};
  ts_executable *exe = ts_compile(client, g, &opts);
  check(exe != NULL, "compile");
  char *report = ts_executable_collectives_to_string(exe);
  if (rank0)
    printf("mesh %s (%d devices, %d processes): %d collectives per step\n%s", mesh_text,
           ts_executable_num_devices(exe), ts_client_process_count(client), ts_executable_num_collectives(exe),
           report ? report : "");
  free(report);

  /* 5. buffers: inputs by name (parameters from the set); sharded layouts are
   * set up by the first execute and kept */
  int ni = ts_graph_num_inputs(g), no = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)ni, sizeof *in), **out = calloc((size_t)no, sizeof *out);
  ts_buffer *bx = ts_buffer_new(client, TS_F32, 2, (int64_t[]){B, D});
  ts_buffer *by = ts_buffer_new(client, TS_I32, 1, (int64_t[]){B});
  ts_buffer *blr = ts_buffer_new(client, TS_F32, 0, NULL), *bstep = ts_buffer_new(client, TS_F32, 0, NULL);
  ts_buffer *bloss = ts_buffer_new(client, TS_F32, 0, NULL);
  for (int i = 0; i < ni; i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    in[i] = t == x ? bx : t == y ? by : t == lr ? blr : t == step ? bstep
                                                                 : ts_params_buffer(params, client, ts_params_find(params, name));
    check(in[i] != NULL, name);
  }

  /* 6. the step loop on synthetic data: labels from a random linear teacher */
  uint64_t seed = 7;
  float teacher[D * C], xb[B * D], lrv = 0.05f;
  int32_t yb[B];
  for (int i = 0; i < D * C; i++) teacher[i] = (float)(urand(&seed) - 0.5);
  check(ts_buffer_write(blr, &lrv, sizeof lrv) == 0, "lr");
  for (int s = 1; s <= steps; s++) {
    for (int b = 0; b < B; b++) {
      float best = -1e30f;
      for (int d = 0; d < D; d++) xb[b * D + d] = (float)(2 * urand(&seed) - 1);
      for (int c = 0; c < C; c++) {
        float z = 0;
        for (int d = 0; d < D; d++) z += xb[b * D + d] * teacher[d * C + c];
        if (z > best) best = z, yb[b] = c;
      }
    }
    float sv = (float)s, lv = 0;
    check(ts_buffer_write(bx, xb, sizeof xb) == 0 && ts_buffer_write(by, yb, sizeof yb) == 0 &&
              ts_buffer_write(bstep, &sv, sizeof sv) == 0, "upload");
    out[0] = bloss;
    for (int k = 1; k < no; k++) out[k] = NULL; /* aliased: the parameters, updated in place */
    check(ts_execute(exe, in, out) == 0, "execute");
    check(ts_buffer_read(bloss, &lv, sizeof lv) == 0, "loss");
    if (rank0 && (s == 1 || s % 10 == 0)) printf("step %3d  loss %.5f\n", s, lv);
  }

  ts_buffer_free(bx);
  ts_buffer_free(by);
  ts_buffer_free(blr);
  ts_buffer_free(bstep);
  ts_buffer_free(bloss);
  free(in);
  free(out);
  ts_executable_free(exe);
  ts_params_free(params);
  ts_graph_free(g);
  ts_client_free(client);
  ts_mesh_free(mesh);
  return 0;
}
