/* test_spmd_runtime.c — the multi-device CPU client and sharded buffers:
 * device count from options and TESSEL_CPU_DEVICES, the per-device thread
 * budget, uploads that give each device its block (uneven dims padded on the
 * right), gathering reads, reading one device's block by its global index
 * range, resharding in place, sharding annotations (mark / clear / errors),
 * and the per-node sharding report of a compiled program. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"
#include "util/config.h" /* env_config_reload */

static ts_sharding *sharding(const ts_mesh *m, const char *spec, int rank) {
  ts_partition_spec ps;
  if (ts_partition_spec_parse(m, spec, &ps) < 0) return NULL;
  return ts_sharding_new(m, &ps, rank);
}

int main(void) {
  ts_test_init("spmd_runtime", 1);
  ts_client_options o = {.num_threads = 2, .num_devices = 4};
  ts_client *c = ts_client_new(&o);
  CHECK(c && ts_client_num_devices(c) == 4, "4 devices");
  CHECK(ts_client_threads_per_device(c) == 1, "2 threads over 4 devices: 1 each, got %d",
        ts_client_threads_per_device(c));
  setenv("TESSEL_CPU_DEVICES", "3", 1);
  env_config_reload(); /* the library reads the environment once (util/config.h) */
  ts_client *c3 = ts_client_new(&(ts_client_options){.num_threads = 2});
  CHECK(c3 && ts_client_num_devices(c3) == 3, "TESSEL_CPU_DEVICES=3");
  ts_client_free(c3);
  setenv("TESSEL_CPU_DEVICES", "zero", 1);
  env_config_reload();
  CHECK(ts_client_new(NULL) == NULL && strstr(ts_last_error(), "TESSEL_CPU_DEVICES"), "bad env: %s", ts_last_error());
  unsetenv("TESSEL_CPU_DEVICES");
  env_config_reload();
  ts_client *c1 = ts_client_new(NULL);
  CHECK(c1 && ts_client_num_devices(c1) == 1, "default: 1 device");

  /* a (5, 6) tensor on a 2x2 mesh, dim 0 split over "a" (uneven: 3 + 2) */
  ts_mesh *m = ts_mesh_parse("2,2", "a,b", NULL);
  int64_t shape[2] = {5, 6};
  double host[30], back[30];
  for (int i = 0; i < 30; i++) host[i] = i;
  ts_sharding *s = sharding(m, "a,b", 2);
  ts_buffer *b = ts_buffer_from_host_sharded(c, TS_F64, 2, shape, host, s);
  CHECK(b != NULL, "%s", ts_last_error());
  if (b) {
    CHECK_OK(ts_buffer_read(b, back, sizeof back));
    CHECK(memcmp(host, back, sizeof host) == 0, "gathered read equals the upload");
    int64_t st[2], lim[2];
    CHECK_OK(ts_buffer_shard_range(b, 3, st, lim));
    CHECK(st[0] == 3 && lim[0] == 5 && st[1] == 3 && lim[1] == 6, "device 3 holds [3,5)x[3,6), got [%lld,%lld)x[%lld,%lld)",
          (long long)st[0], (long long)lim[0], (long long)st[1], (long long)lim[1]);
    double blk[6];
    CHECK_OK(ts_buffer_read_shard(b, 3, blk, sizeof blk));
    CHECK(blk[0] == 21 && blk[2] == 23 && blk[3] == 27 && blk[5] == 29, "device 3's block values");
    CHECK(ts_buffer_read_shard(b, 3, blk, 8) < 0, "wrong byte count is an error");
    CHECK_OK(ts_buffer_reshard(b, NULL));
    CHECK(ts_buffer_sharding(b) == NULL, "replicated after reshard");
    memset(back, 0, sizeof back);
    CHECK_OK(ts_buffer_read(b, back, sizeof back));
    CHECK(memcmp(host, back, sizeof host) == 0, "reshard keeps the value");
    ts_buffer_free(b);
  }
  CHECK(ts_buffer_from_host_sharded(c1, TS_F64, 2, shape, host, s) == NULL, "a 4-device sharding on 1 device");

  /* annotations and the sharding report; padding never leaks into a sum */
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F64, 2, shape);
  ts_tensor y = ts_exp(g, x);
  ts_tensor r = ts_sum_all(g, y);
  ts_graph_add_output(g, r);
  ts_graph_add_output(g, y);
  CHECK_OK(ts_mark_sharding(g, x, s));
  CHECK_OK(ts_mark_sharding(g, x, s)); /* the same again: fine */
  ts_sharding *other = sharding(m, "b,a", 2);
  CHECK(ts_mark_sharding(g, x, other) < 0 && strstr(ts_last_error(), "already marked"), "remark: %s", ts_last_error());
  CHECK_OK(ts_clear_sharding(g, x));
  CHECK_OK(ts_mark_sharding(g, x, other));
  ts_sharding *bad = sharding(m, "a", 1);
  CHECK(ts_mark_sharding(g, y, bad) < 0, "rank mismatch is an error");
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (e) {
    const ts_sharding *sy = ts_executable_sharding(e, y);
    CHECK(sy && ts_sharding_num_tiles(sy, 0) == 1 && ts_sharding_num_tiles(sy, 1) == 2,
          "exp gets x's even part (dim 1 over a; dim 0 uneven over b stays whole)");
    char *txt = ts_executable_shardings_to_string(e);
    CHECK(txt && strstr(txt, "exp"), "report names the nodes");
    free(txt);
    ts_buffer *in = ts_buffer_from_host(c, TS_F64, 2, shape, host), *out[2] = {0};
    CHECK_OK(ts_execute(e, &in, out));
    double sum = 0, want = 0, ys[30];
    for (int i = 0; i < 30; i++) want += exp((double)i);
    ts_buffer_read(out[0], &sum, sizeof sum);
    CHECK(fabs(sum - want) <= 1e-12 * want, "sum %.17g want %.17g", sum, want);
    ts_buffer_read(out[1], ys, sizeof ys);
    CHECK(ys[29] == exp(29.0), "y gathered");
    ts_buffer_free(in);
    ts_buffer_free(out[0]);
    ts_buffer_free(out[1]);
    ts_executable_free(e);
  }
  ts_sharding_free(bad);
  ts_sharding_free(other);
  ts_sharding_free(s);
  ts_graph_free(g);
  ts_mesh_free(m);
  ts_client_free(c1);
  ts_client_free(c);
  return ts_test_finish();
}
