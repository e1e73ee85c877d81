/* test_combine.c — collective combining (ts_compile_options.no_combine /
 * combine_bytes): a training step of a small MLP (six parameters, so six
 * gradient all-reduces, or reduce-scatters under FSDP) on every mesh the
 * equivalence suite uses must give bit-identical parameters with and without
 * combining, over several steps, while making fewer collective calls
 * (counted by the metrics registry: one per bucket per device). And the
 * device threads a client runs its devices on are created once per client,
 * not once per execute (DeviceThreadsCreated). Also: a bucket size below
 * every gradient combines nothing, and a program without collectives is
 * unchanged. */
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { B = 12, D0 = 10, D1 = 8, D2 = 6, D3 = 4, NP = 6, STEPS = 3 };

static const int64_t shapes[NP][2] = {{D0, D1}, {1, D1}, {D1, D2}, {1, D2}, {D2, D3}, {1, D3}};

/* The step: x (B, D0) -> 3 tanh layers -> sum of squares; SGD update of
 * every parameter, written in place (aliased outputs). */
static ts_graph *step_graph(const ts_mesh *m, const char *spec, const char *pspec) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, (int64_t[]){B, D0});
  ts_tensor p[NP], grads[NP];
  char name[8];
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "p%d", i);
    p[i] = ts_input(g, name, TS_F32, 2, shapes[i]);
  }
  ts_tensor h = x;
  for (int l = 0; l < 3; l++) {
    int64_t out[2] = {B, shapes[2 * l][1]};
    h = ts_tanh(g, ts_add(g, ts_matmul(g, h, p[2 * l]), ts_broadcast_to(g, p[2 * l + 1], 2, out)));
  }
  ts_tensor loss = ts_sum_all(g, ts_mul(g, h, h));
  ts_graph_add_output(g, loss);
  ts_grad(g, loss, NP, p, grads);
  ts_tensor lr = ts_scalar(g, TS_F32, 0.05);
  for (int i = 0; i < NP; i++) {
    ts_tensor upd = ts_sub(g, p[i], ts_mul(g, ts_broadcast_to(g, lr, 2, shapes[i]), grads[i]));
    ts_graph_alias_output(g, ts_graph_add_output(g, upd), p[i]);
  }
  if (m && spec) {
    ts_partition_spec ps;
    ts_sharding *s = ts_partition_spec_parse(m, spec, &ps) == 0 ? ts_sharding_new(m, &ps, 2) : NULL;
    if (s) ts_mark_sharding(g, x, s);
    ts_sharding_free(s);
  }
  if (m && pspec) { /* FSDP: every parameter sharded on dim 0 */
    ts_partition_spec ps;
    ts_sharding *s = ts_partition_spec_parse(m, pspec, &ps) == 0 ? ts_sharding_new(m, &ps, 2) : NULL;
    for (int i = 0; s && i < NP; i++) ts_mark_sharding(g, p[i], s);
    ts_sharding_free(s);
  }
  return g;
}

/* Runs STEPS steps; params receives every parameter after them. Returns the
 * all-reduce calls counted (all devices) or -1. */
static int64_t train(const char *mesh_text, const char *spec, const char *pspec, bool combine, size_t bytes,
                     float *params) {
  ts_mesh *m = mesh_text ? ts_mesh_from_text(mesh_text) : NULL;
  int ndev = m ? (int)ts_mesh_num_devices(m) : 1;
  ts_metrics_clear();
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = ndev});
  ts_graph *g = step_graph(m, spec, pspec);
  ts_compile_options o = {.mesh = m, .no_combine = !combine, .combine_bytes = bytes};
  ts_executable *e = c && g ? ts_compile(c, g, &o) : NULL;
  int64_t calls = -1;
  if (!e) {
    fprintf(stderr, "compile on %s: %s\n", mesh_text ? mesh_text : "1 device", ts_last_error());
    goto out;
  }
  float xs[B * D0];
  for (int i = 0; i < B * D0; i++) xs[i] = (float)((i * 37) % 19) / 19.0f - 0.5f;
  ts_buffer *in[1 + NP] = {ts_buffer_from_host(c, TS_F32, 2, (int64_t[]){B, D0}, xs)};
  for (int i = 0; i < NP; i++) {
    float w[D0 * D1];
    int64_t n = shapes[i][0] * shapes[i][1];
    for (int k = 0; k < n; k++) w[k] = (float)(((k + 7 * i) * 29) % 23) / 23.0f - 0.45f;
    in[1 + i] = ts_buffer_from_host(c, TS_F32, 2, shapes[i], w);
  }
  int ok = 1;
  for (int s = 0; s < STEPS && ok; s++) {
    ts_buffer *out[1 + NP] = {0};
    ok = ts_execute(e, in, out) == 0;
    if (ok) ts_buffer_free(out[0]);
  }
  int64_t threads = ts_counter_value("DeviceThreadsCreated"); /* at the first execute, then never again */
  CHECK(threads == ndev - 1, "%d devices, %d steps: %lld device threads created (want %d: one per device beyond "
        "the first, once per client)", ndev, STEPS, (long long)threads, ndev - 1);
  calls = ok ? ts_counter_value("CollectiveAllReduce") + ts_counter_value("CollectiveReduceScatter") : -1;
  size_t off = 0;
  for (int i = 0; ok && i < NP; i++) {
    size_t n = (size_t)(shapes[i][0] * shapes[i][1]);
    ok = ts_buffer_read(in[1 + i], params + off, n * sizeof *params) == 0;
    off += n;
  }
  if (!ok) calls = -1;
  for (int i = 0; i < 1 + NP; i++) ts_buffer_free(in[i]);
out:
  ts_executable_free(e);
  ts_graph_free(g);
  ts_client_free(c);
  ts_mesh_free(m);
  return calls;
}

int main(void) {
  ts_test_init("combine", 1);
  enum { NPARAM = D0 * D1 + D1 + D1 * D2 + D2 + D2 * D3 + D3 };
  static const struct {
    const char *mesh, *spec, *pspec;
  } cases[] = {{"data=2", "data,None", NULL},         {"data=4", "data,None", NULL},
               {"data=3", "data,None", NULL},         {"data=2,model=2", "data,None", NULL},
               {"data=2,model=2", "data,model", NULL}, {"a=2,b=2,c=2", "a+b,c", NULL},
               {"fsdp=2", "fsdp,None", "fsdp,None"},  {"data=2,fsdp=2", "data+fsdp,None", "fsdp,None"}};
  float one[NPARAM];
  CHECK(train(NULL, NULL, NULL, true, 0, one) >= 0, "1 device: %s", ts_last_error());
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    float with[NPARAM], without[NPARAM];
    int64_t n_with = train(cases[k].mesh, cases[k].spec, cases[k].pspec, true, 0, with);
    int64_t n_without = train(cases[k].mesh, cases[k].spec, cases[k].pspec, false, 0, without);
    CHECK(n_with >= 0 && n_without >= 0, "%s: %s", cases[k].mesh, ts_last_error());
    if (n_with < 0 || n_without < 0) continue;
    CHECK(memcmp(with, without, sizeof with) == 0, "%s spec %s: combined parameters differ from uncombined",
          cases[k].mesh, cases[k].spec);
    CHECK(n_with < n_without, "%s spec %s: %lld reducing calls combined, %lld without: nothing combined",
          cases[k].mesh, cases[k].spec, (long long)n_with, (long long)n_without);
    printf("%-16s %-14s all-reduce + reduce-scatter calls over %d steps: %lld combined, %lld uncombined\n", cases[k].mesh,
           cases[k].spec, STEPS, (long long)n_with, (long long)n_without);
  }
  /* a bucket size no gradient is below: every all-reduce stays alone */
  float a[NPARAM], b[NPARAM];
  int64_t tiny = train("data=2", "data,None", NULL, true, 4, a), none = train("data=2", "data,None", NULL, false, 0, b);
  CHECK(tiny >= 0 && tiny == none, "combine_bytes 4: %lld calls, uncombined %lld", (long long)tiny, (long long)none);
  CHECK(memcmp(a, b, sizeof a) == 0, "combine_bytes 4 changes the result");
  return ts_test_finish();
}
