/* mpi_runtime.c — the runtime across processes (under mpirun -n 2 and -n 3).
 *
 * - Global device numbering: 4 devices shared out process-major (2+2, or
 *   2+1+1), the same layout seen by every process.
 * - SPMD programs (a 2-layer MLP step with gradients on meshes data=4,
 *   data=2 x model=2, and a reduce-scatter-producing layout) give exactly the
 *   results of the same program on a process-local client with 4 devices,
 *   read back with ts_buffer_read (collective when blocks live elsewhere).
 * - A replica program (ts_replica_all_reduce) averages per-process values.
 * - Shard I/O: write/read a local device's block; a remote device is a clear
 *   error naming its process.
 * - ts_compile of different programs on different processes fails on every
 *   process naming ranks and hashes (no hang); ts_client_check_same too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { G = 4 };

static double val(uint64_t i, int which) { return sin(0.37 * (double)i + which) * (1.0 + (double)(i % 5)); }

/* x (8, 6) -> h = tanh(x w1) (8, 12) -> y = h w2 (8, 4); loss = sum(y^2);
 * outputs: loss, y, dw1, dw2. */
static ts_graph *mlp(ts_tensor *x, ts_tensor *w1, ts_tensor *w2) {
  ts_graph *g = ts_graph_new();
  int64_t xs[2] = {8, 6}, w1s[2] = {6, 12}, w2s[2] = {12, 4};
  *x = ts_input(g, "x", TS_F32, 2, xs);
  *w1 = ts_input(g, "w1", TS_F32, 2, w1s);
  *w2 = ts_input(g, "w2", TS_F32, 2, w2s);
  ts_tensor h = ts_tanh(g, ts_matmul(g, *x, *w1));
  ts_tensor y = ts_matmul(g, h, *w2);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, y, y));
  ts_tensor wrt[2] = {*w1, *w2}, gr[2];
  ts_graph_add_output(g, loss);
  ts_graph_add_output(g, y);
  if (ts_grad(g, loss, 2, wrt, gr) == 0) {
    ts_graph_add_output(g, gr[0]);
    ts_graph_add_output(g, gr[1]);
  }
  return g;
}

static ts_sharding *spec(const ts_mesh *m, int rank, int dim, const char *axis) {
  ts_partition_spec s;
  ts_partition_spec_init(&s, rank);
  if (axis) ts_partition_spec_add_axis(&s, dim, ts_mesh_axis_index(m, axis));
  return ts_sharding_new(m, &s, rank);
}

/* Runs the MLP on client c with the mesh/specs; host copies of the outputs in out[k]. */
static int run_mlp(ts_client *c, const char *mesh_text, const char *w1_axis, float *out[4], size_t bytes[4]) {
  ts_tensor x, w1, w2;
  ts_graph *g = mlp(&x, &w1, &w2);
  ts_mesh *m = ts_mesh_from_text(mesh_text);
  ts_sharding *sx = spec(m, 2, 0, "data"), *s1 = spec(m, 2, 1, w1_axis), *s2 = spec(m, 2, 0, w1_axis);
  ts_mark_sharding(g, x, sx);
  ts_mark_sharding(g, w1, s1);
  ts_mark_sharding(g, w2, s2);
  int rc = -1;
  ts_executable *e = ts_compile(c, g, NULL);
  ts_buffer *in[3] = {0}, *o[4] = {0};
  if (e) {
    float hx[48], h1[72], h2[48];
    for (int i = 0; i < 48; i++) hx[i] = (float)val((uint64_t)i, 0), h2[i] = (float)val((uint64_t)i, 2) * 0.3f;
    for (int i = 0; i < 72; i++) h1[i] = (float)val((uint64_t)i, 1) * 0.3f;
    int64_t xs[2] = {8, 6}, w1s[2] = {6, 12}, w2s[2] = {12, 4};
    in[0] = ts_buffer_from_host_sharded(c, TS_F32, 2, xs, hx, sx);
    in[1] = ts_buffer_from_host_sharded(c, TS_F32, 2, w1s, h1, s1);
    in[2] = ts_buffer_from_host_sharded(c, TS_F32, 2, w2s, h2, s2);
    rc = in[0] && in[1] && in[2] ? ts_execute(e, in, o) : -1;
    for (int k = 0; k < 4 && rc == 0; k++) {
      bytes[k] = ts_buffer_bytes(o[k]);
      out[k] = malloc(bytes[k]);
      rc = ts_buffer_read(o[k], out[k], bytes[k]); /* collective where blocks live in other processes */
    }
  }
  for (int i = 0; i < 3; i++) ts_buffer_free(in[i]);
  for (int k = 0; k < 4; k++) ts_buffer_free(o[k]);
  ts_executable_free(e);
  ts_sharding_free(sx);
  ts_sharding_free(s1);
  ts_sharding_free(s2);
  ts_mesh_free(m);
  ts_graph_free(g);
  return rc;
}

int main(void) {
  ts_test_init("mpi_runtime", 1);
  ts_client_options wo = {.num_threads = 1, .total_devices = G, .collective_timeout_ms = 20000};
  ts_client *c = ts_client_new(&wo);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return ts_test_finish();
  int P = ts_client_process_count(c), me = ts_client_process_index(c);
  CHECK(P >= 2, "run under mpirun with 2 or more processes (got %d)", P);
  CHECK(ts_client_num_devices(c) == G, "%d devices", ts_client_num_devices(c));
  /* process-major, first processes take one more */
  int want_first = 0, want_n = G / P + (me < G % P);
  for (int p = 0; p < me; p++) want_first += G / P + (p < G % P);
  CHECK(ts_client_first_local_device(c) == want_first && ts_client_num_local_devices(c) == want_n,
        "process %d: devices [%d, +%d), want [%d, +%d)", me, ts_client_first_local_device(c),
        ts_client_num_local_devices(c), want_first, want_n);
  for (int d = 0; d < G; d++)
    CHECK(ts_client_is_local_device(c, d) == (d >= want_first && d < want_first + want_n), "device %d", d);

  /* SPMD programs equal the same program on one process's 4 devices, bit for bit */
  ts_client_options lo = {.num_threads = 1, .num_devices = G, .process_local = true};
  ts_client *local = ts_client_new(&lo);
  CHECK(local && ts_client_process_count(local) == 1 && ts_client_num_devices(local) == G, "process-local client");
  static const char *cases[][2] = {{"data=4", NULL}, {"data=2,model=2", "model"}, {"data=1,model=4", "model"}};
  for (size_t k = 0; local && k < sizeof cases / sizeof *cases; k++) {
    float *a[4] = {0}, *b[4] = {0};
    size_t na[4] = {0}, nb[4] = {0};
    int ra = run_mlp(c, cases[k][0], cases[k][1], a, na);
    CHECK(ra == 0, "%s over processes: %s", cases[k][0], ts_last_error());
    int rb = run_mlp(local, cases[k][0], cases[k][1], b, nb);
    CHECK(rb == 0, "%s in one process: %s", cases[k][0], ts_last_error());
    for (int o = 0; o < 4 && ra == 0 && rb == 0; o++)
      CHECK(na[o] == nb[o] && memcmp(a[o], b[o], na[o]) == 0, "%s: output %d differs between %d processes and one",
            cases[k][0], o, P);
    for (int o = 0; o < 4; o++) free(a[o]), free(b[o]);
  }
  ts_client_free(local);

  /* replica program: mean over every device of a per-process value */
  {
    ts_graph *g = ts_graph_new();
    int64_t n = 5;
    ts_tensor x = ts_input(g, "x", TS_F64, 1, &n);
    ts_graph_add_output(g, ts_replica_all_reduce(g, x, TS_REDUCE_MEAN));
    ts_compile_options co = {.replicas = true};
    ts_executable *e = ts_compile(c, g, &co);
    CHECK(e != NULL, "replica compile: %s", ts_last_error());
    double hx[5], got[5];
    for (int i = 0; i < 5; i++) hx[i] = 10.0 * me + i; /* every local device of process p holds 10p + i */
    ts_buffer *in = ts_buffer_from_host(c, TS_F64, 1, &n, hx), *out = NULL;
    CHECK(e && in && ts_execute(e, &in, &out) == 0, "replica execute: %s", ts_last_error());
    if (out && ts_buffer_read(out, got, sizeof got) == 0) {
      double sum = 0;
      for (int p = 0; p < P; p++) sum += 10.0 * p * (G / P + (p < G % P)); /* devices of p hold 10p */
      for (int i = 0; i < 5; i++)
        CHECK(fabs(got[i] - (sum / G + i)) < 1e-12, "replica mean[%d] = %g, want %g", i, got[i], sum / G + i);
    }
    ts_buffer_free(in);
    ts_buffer_free(out);
    ts_executable_free(e);
    /* the same graph without `replicas` is refused */
    CHECK(ts_compile(c, g, NULL) == NULL && strstr(ts_last_error(), "ts_compile_options.replicas"),
          "replica all-reduce without replicas: %s", ts_last_error());
    ts_graph_free(g);
  }

  /* shard I/O: local blocks only */
  {
    ts_mesh *m = ts_mesh_from_text("data=4");
    ts_sharding *s = spec(m, 2, 0, "data");
    int64_t shape[2] = {8, 3};
    ts_buffer *b = ts_buffer_from_host_sharded(c, TS_I32, 2, shape, (int32_t[24]){0}, s);
    int first = ts_client_first_local_device(c);
    int32_t blk[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
    CHECK(b && ts_buffer_write_shard(b, first, blk, sizeof blk) == 0, "%s", ts_last_error());
    CHECK(ts_buffer_read_shard(b, first, back, sizeof back) == 0 && memcmp(blk, back, sizeof blk) == 0,
          "local block round trip");
    int remote = (first + ts_client_num_local_devices(c)) % G;
    CHECK(ts_buffer_read_shard(b, remote, back, sizeof back) < 0 && strstr(ts_last_error(), "belongs to process"),
          "remote read_shard: %s", ts_last_error());
    CHECK(ts_buffer_write_shard(b, remote, blk, sizeof blk) < 0 && strstr(ts_last_error(), "belongs to process"),
          "remote write_shard: %s", ts_last_error());
    /* the collective read sees every process's block */
    int32_t all[24];
    CHECK(ts_buffer_read(b, all, sizeof all) == 0, "%s", ts_last_error());
    for (int p = 0, d = 0; p < P; p++)
      for (int i = 0; i < G / P + (p < G % P); i++, d++)
        CHECK(all[d * 6] == (i == 0 ? 1 : 0), "row block of device %d (first of process %d: %d)", d, p, i == 0);
    ts_buffer_free(b);
    ts_sharding_free(s);
    ts_mesh_free(m);
  }

  /* different programs on different processes: an error everywhere, no hang */
  {
    ts_graph *g = ts_graph_new();
    int64_t n = 4 + (me == P - 1); /* the last process builds another shape */
    ts_tensor x = ts_input(g, "x", TS_F32, 1, &n);
    ts_graph_add_output(g, ts_neg(g, x));
    ts_executable *e = ts_compile(c, g, NULL);
    CHECK(e == NULL && strstr(ts_last_error(), "differs between processes") && strstr(ts_last_error(), "rank"),
          "mismatched programs: %s", e ? "compiled" : ts_last_error());
    ts_executable_free(e);
    ts_graph_free(g);
    CHECK(ts_client_check_same(c, "the text", me ? "b" : "a") < 0 && strstr(ts_last_error(), "rank 1 has \"b\""),
          "check_same: %s", ts_last_error());
    CHECK(ts_client_check_same(c, "the text", "same") == 0, "%s", ts_last_error());
  }
  ts_client_free(c);
  return ts_test_finish();
}
