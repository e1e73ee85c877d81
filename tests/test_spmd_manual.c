/* test_spmd_manual.c — manual SPMD regions (ts_shard_map): a Megatron MLP
 * block written by hand on data=2,model=4 (local matmuls, one all-reduce
 * over "model") and all-gather / reduce-scatter bodies give what the global
 * program gives on one device; the manual collectives appear in the report. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { B = 8, D = 6, H = 16, C = 4 };

static ts_mesh *g_mesh;

static ts_sharding *sh(const char *spec, int rank) {
  ts_partition_spec ps;
  if (ts_partition_spec_parse(g_mesh, spec, &ps) < 0) return NULL;
  return ts_sharding_new(g_mesh, &ps, rank);
}

/* local: x (B/2, D), w1 (D, H/4), w2 (H/4, C) -> (B/2, C) summed over model */
static int megatron_body(ts_graph *g, const int32_t *in, int32_t *out, void *user) {
  (void)user;
  int model = 1;
  ts_tensor h = ts_relu(g, ts_matmul(g, in[0], in[1]));
  out[0] = ts_manual_all_reduce(g, ts_matmul(g, h, in[2]), TS_REDUCE_SUM, g_mesh, 1, &model);
  return out[0] == TS_NONE ? -1 : 0;
}

/* local x (B/2, D): gather the batch over data, then sum-scatter it back */
static int gather_body(ts_graph *g, const int32_t *in, int32_t *out, void *user) {
  (void)user;
  int data = 0;
  ts_tensor full = ts_manual_all_gather(g, in[0], 0, g_mesh, 1, &data); // (B, D)
  out[0] = ts_mul(g, full, ts_scalar(g, TS_F64, 2));
  out[1] = ts_manual_reduce_scatter(g, full, 0, g_mesh, 1, &data);       // (B/2, D): 2x the block
  return out[1] == TS_NONE ? -1 : 0;
}

static void fill(double *v, int n, uint64_t seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (double)(seed >> 11) * 0x1p-53 - 0.5;
  }
}

static void run(ts_client *c, ts_graph *g, double *const *data, double *const *res, const size_t *res_bytes) {
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) return;
  ts_buffer *in[8], *out[8] = {0};
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    in[i] = ts_buffer_from_host(c, TS_F64, ts_tensor_rank(g, t), ts_tensor_shape(g, t), data[i]);
  }
  CHECK_OK(ts_execute(e, in, out));
  for (int k = 0; k < ts_graph_num_outputs(g); k++) {
    CHECK_OK(ts_buffer_read(out[k], res[k], res_bytes[k]));
    ts_buffer_free(out[k]);
  }
  for (int i = 0; i < ts_graph_num_inputs(g); i++) ts_buffer_free(in[i]);
  char *rep = ts_executable_collectives_to_string(e);
  if (getenv("SHOW")) fprintf(stderr, "%s", rep ? rep : "");
  free(rep);
  ts_executable_free(e);
}

int main(void) {
  ts_test_init("spmd_manual", 1);
  g_mesh = ts_mesh_parse("2,4", "data,model", NULL);
  ts_client *c1 = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 1});
  ts_client *c8 = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 8});
  double x[B * D], w1[D * H], w2[H * C], ref[B * C], got[B * C];
  fill(x, B * D, 1);
  fill(w1, D * H, 2);
  fill(w2, H * C, 3);
  double *data[3] = {x, w1, w2};

  /* the global program on one device */
  ts_graph *g = ts_graph_new();
  ts_tensor gx = ts_input(g, "x", TS_F64, 2, (int64_t[]){B, D});
  ts_tensor g1 = ts_input(g, "w1", TS_F64, 2, (int64_t[]){D, H});
  ts_tensor g2 = ts_input(g, "w2", TS_F64, 2, (int64_t[]){H, C});
  ts_graph_add_output(g, ts_matmul(g, ts_relu(g, ts_matmul(g, gx, g1)), g2));
  run(c1, g, data, (double *[]){ref}, (size_t[]){sizeof ref});
  ts_graph_free(g);

  /* the same block written by hand */
  g = ts_graph_new();
  ts_tensor in[3] = {ts_input(g, "x", TS_F64, 2, (int64_t[]){B, D}), ts_input(g, "w1", TS_F64, 2, (int64_t[]){D, H}),
                     ts_input(g, "w2", TS_F64, 2, (int64_t[]){H, C})};
  ts_sharding *s_in[3] = {sh("data,None", 2), sh("None,model", 2), sh("model,None", 2)}, *s_out = sh("data,None", 2);
  ts_tensor y;
  CHECK_OK(ts_shard_map(g, 3, in, (const ts_sharding *const *)s_in, 1, (const ts_sharding *const *)&s_out,
                        megatron_body, NULL, &y));
  ts_graph_add_output(g, y);
  CHECK(ts_graph_verify(g) == 0, "%s", ts_last_error());
  memset(got, 0, sizeof got);
  run(c8, g, data, (double *[]){got}, (size_t[]){sizeof got});
  double worst = 0;
  for (int i = 0; i < B * C; i++) worst = fmax(worst, fabs(ref[i] - got[i]));
  CHECK(worst < 1e-12, "manual Megatron block differs from 1 device by %g", worst);
  ts_graph_free(g);

  /* all-gather and reduce-scatter */
  g = ts_graph_new();
  ts_tensor xi = ts_input(g, "x", TS_F64, 2, (int64_t[]){B, D});
  ts_sharding *rep = sh("None,None", 2), *outs[2] = {rep, s_in[0]};
  ts_tensor o[2];
  CHECK_OK(ts_shard_map(g, 1, &xi, (const ts_sharding *const *)s_in, 2, (const ts_sharding *const *)outs,
                        gather_body, NULL, o));
  ts_graph_add_output(g, o[0]);
  ts_graph_add_output(g, o[1]);
  double r0[B * D], r1[B * D];
  run(c8, g, data, (double *[]){r0, r1}, (size_t[]){sizeof r0, sizeof r1});
  worst = 0;
  for (int i = 0; i < B * D; i++) worst = fmax(worst, fabs(r0[i] - 2 * x[i]) + fabs(r1[i] - 2 * x[i]));
  CHECK(worst < 1e-15, "gather / scatter bodies differ by %g", worst);
  CHECK(ts_manual_all_reduce(g, xi, TS_REDUCE_SUM, g_mesh, 1, (int[]){0}) == TS_NONE, "a global tensor is refused");
  ts_graph_free(g);

  for (int i = 0; i < 3; i++) ts_sharding_free(s_in[i]);
  ts_sharding_free(s_out);
  ts_sharding_free(rep);
  ts_client_free(c1);
  ts_client_free(c8);
  ts_mesh_free(g_mesh);
  return ts_test_finish();
}
