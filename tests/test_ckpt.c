/* test_ckpt.c — checkpoints in one process: save/load round trips are
 * bit-exact on 1 device and on meshes (data=2, data=2,model=2, fsdp=2,
 * model=3 with uneven blocks), every saved layout loads onto every other
 * (the resharding matrix), the training state round-trips, `latest` and
 * --keep pruning behave, a plain safetensors export reads back, and a
 * program/checkpoint mismatch is an error listing the differences. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_common.h"

static char tmp_root[256];

static ts_client *client_for(int devices) {
  return ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = devices});
}

static int count_dirs(const char *root, const char *prefix) {
  DIR *d = opendir(root);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
  if (d) closedir(d);
  return n;
}

/* Saves layout `from` (version v) to root, then loads it into layout `to`. */
static void check_pair(int from, int to, const char *root, uint64_t v) {
  const ck_layout *a = &CK_LAYOUTS[from], *b = &CK_LAYOUTS[to];
  ts_client *ca = client_for(ck_layout_devices(a));
  ts_buffer *src[CK_N] = {0}, *dst[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(ca, a, v, false, src));
  ck_entries(src, e);
  ts_ckpt_meta m = ck_meta(100 + from);
  CHECK(ts_ckpt_save(ca, root, &m, CK_N, e, 0) == 0, "save %s: %s", a->label, ts_last_error());
  ck_free_buffers(src);
  ts_client_free(ca);

  ts_client *cb = client_for(ck_layout_devices(b));
  CHECK_OK(ck_make_buffers(cb, b, 0, true, dst));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck != NULL, "open %s: %s", root, ts_last_error());
  for (int i = 0; ck && i < CK_N; i++) {
    CHECK(ts_ckpt_read(ck, cb, CK_TENSORS[i].name, dst[i]) == 0, "read %s (%s -> %s): %s", CK_TENSORS[i].name,
          a->label, b->label, ts_last_error());
    CHECK(ck_check_buffer(dst[i], i, v) == 0, "%s differs after %s -> %s", CK_TENSORS[i].name, a->label, b->label);
  }
  ts_ckpt_close(ck);
  ck_free_buffers(dst);
  ts_client_free(cb);
}

static void test_matrix(void) {
  for (int from = 0; from < CK_NLAYOUTS; from++) {
    char root[512];
    snprintf(root, sizeof root, "%s/matrix-%d", tmp_root, from);
    for (int to = 0; to < CK_NLAYOUTS; to++) check_pair(from, to, root, (uint64_t)(from * 10 + to + 1));
  }
}

static void test_meta_and_files(void) {
  char root[512];
  snprintf(root, sizeof root, "%s/meta", tmp_root);
  const ck_layout *l = &CK_LAYOUTS[2]; /* data=2,model=2 */
  ts_client *c = client_for(4);
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, l, 7, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(42);
  CHECK_OK(ts_ckpt_save(c, root, &m, CK_N, e, 0));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck != NULL, "open: %s", ts_last_error());
  if (ck) {
    const ts_ckpt_meta *r = ts_ckpt_get_meta(ck);
    CHECK(r->step == 42 && r->epoch == 2 && r->epoch_step == 17, "step/epoch %lld %lld %lld", (long long)r->step,
          (long long)r->epoch, (long long)r->epoch_step);
    CHECK(r->has_optim && r->optim.kind == TS_OPTIM_ADAMW && r->optim.weight_decay == 0.01 && r->optim.eps == 1e-8 &&
              r->optim.beta2 == 0.999,
          "optimizer round trip");
    CHECK(r->has_schedule && r->schedule.kind == TS_LR_COSINE && r->schedule.base_lr == 1e-3 &&
              r->schedule.total_steps == 1000 && r->schedule.min_lr == 1e-5,
          "schedule round trip");
    CHECK(r->seed == m.seed && r->program_hash == m.program_hash, "seed/hash");
    CHECK(r->has_loader && memcmp(r->loader, m.loader, sizeof m.loader) == 0, "loader state");
    CHECK(strcmp(r->config, m.config) == 0, "config '%s'", r->config);
    CHECK(strcmp(r->mesh, "data=2,model=2") == 0 && r->num_devices == 4 && r->process_count == 1, "mesh '%s' %d",
          r->mesh, r->num_devices);
    CHECK(strcmp(r->tessel_version, TS_VERSION_STRING) == 0, "version");
    CHECK(ts_ckpt_num_tensors(ck) == CK_N && ts_ckpt_num_files(ck) == 1, "tensors %d files %d",
          ts_ckpt_num_tensors(ck), ts_ckpt_num_files(ck));
    ts_ckpt_tensor_info ti;
    CHECK_OK(ts_ckpt_tensor(ck, 0, &ti));
    /* fc1.weight "model,data" on 2x2: four distinct blocks, no replicas */
    CHECK(strcmp(ti.name, "fc1.weight") == 0 && ti.num_blocks == 4 && ti.kind == TS_CKPT_PARAM, "%s %d", ti.name,
          ti.num_blocks);
    CHECK(strcmp(ti.spec, "model,data") == 0 && strcmp(ti.sharding, "{devices=[2,2]0,2,1,3}") == 0,
          "spec '%s' sharding '%s' saved with", ti.spec, ti.sharding);
    CHECK_OK(ts_ckpt_tensor(ck, 1, &ti)); /* fc1.bias "model": 2 blocks, each replicated twice, written once */
    CHECK(ti.num_blocks == 2, "fc1.bias blocks %d", ti.num_blocks);
    CHECK_OK(ts_ckpt_verify(ck));
    /* read_host of everything */
    for (int i = 0; i < CK_N; i++) {
      void *want = ck_values(i, 7), *got = malloc(ck_bytes(i) + 1);
      CHECK(ts_ckpt_read_host(ck, CK_TENSORS[i].name, got, ck_bytes(i)) == 0 && memcmp(want, got, ck_bytes(i)) == 0,
            "read_host %s: %s", CK_TENSORS[i].name, ts_last_error());
      free(want);
      free(got);
    }
    /* export -> plain safetensors -> open -> same values, no optimizer state */
    char out[600];
    snprintf(out, sizeof out, "%s/export.safetensors", tmp_root);
    CHECK_OK(ts_ckpt_export(ck, out, false));
    ts_ckpt *px = ts_ckpt_open(out);
    CHECK(px != NULL, "open export: %s", ts_last_error());
    CHECK(px && ts_ckpt_num_tensors(px) == CK_N - 1 && ts_ckpt_find(px, "fc1.weight.exp_avg") < 0,
          "export without optimizer has %d tensors", px ? ts_ckpt_num_tensors(px) : -1);
    for (int i = 0; px && i < CK_N; i++) {
      if (CK_TENSORS[i].kind == TS_CKPT_OPTIMIZER) continue;
      void *want = ck_values(i, 7), *got = malloc(ck_bytes(i) + 1);
      CHECK(ts_ckpt_read_host(px, CK_TENSORS[i].name, got, ck_bytes(i)) == 0 && memcmp(want, got, ck_bytes(i)) == 0,
            "export %s: %s", CK_TENSORS[i].name, ts_last_error());
      free(want);
      free(got);
    }
    CHECK(px && ts_ckpt_verify(px) == 0, "verify export: %s", ts_last_error());
    ts_ckpt_close(px);
    CHECK_OK(ts_ckpt_export(ck, out, true));
    px = ts_ckpt_open(out);
    CHECK(px && ts_ckpt_num_tensors(px) == CK_N, "export with optimizer");
    ts_ckpt_close(px);
  }
  ts_ckpt_close(ck);
  ck_free_buffers(b);
  ts_client_free(c);
}

/* latest follows the newest save; keep prunes older steps, never the new one. */
static void test_latest_keep(void) {
  char root[512], p[700];
  snprintf(root, sizeof root, "%s/keep", tmp_root);
  ts_client *c = client_for(2);
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  for (int s = 1; s <= 5; s++) {
    CHECK_OK(ck_make_buffers(c, &CK_LAYOUTS[1], (uint64_t)s, false, b));
    ck_entries(b, e);
    ts_ckpt_meta m = ck_meta(s * 10);
    CHECK_OK(ts_ckpt_save(c, root, &m, CK_N, e, 2));
    ck_free_buffers(b);
    CHECK(count_dirs(root, "step-") == (s < 2 ? s : 2), "after save %d: %d step dirs", s, count_dirs(root, "step-"));
  }
  CHECK(count_dirs(root, ".tmp") == 0 && count_dirs(root, ".old") == 0, "no debris");
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck && ts_ckpt_get_meta(ck)->step == 50, "latest is step 50");
  ts_ckpt_close(ck);
  snprintf(p, sizeof p, "%s/step-00000040", root);
  ck = ts_ckpt_open(p);
  CHECK(ck && ts_ckpt_get_meta(ck)->step == 40, "step 40 kept: %s", ts_last_error());
  ts_ckpt_close(ck);
  snprintf(p, sizeof p, "%s/step-00000030", root);
  CHECK(ts_ckpt_open(p) == NULL, "step 30 pruned");
  /* Saving the same step again replaces it. */
  CHECK_OK(ck_make_buffers(c, &CK_LAYOUTS[1], 99, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(50);
  CHECK_OK(ts_ckpt_save(c, root, &m, CK_N, e, 2));
  ck_free_buffers(b);
  ck = ts_ckpt_open(root);
  void *got = malloc(ck_bytes(0)), *want = ck_values(0, 99);
  CHECK(ck && ts_ckpt_read_host(ck, "fc1.weight", got, ck_bytes(0)) == 0 && memcmp(got, want, ck_bytes(0)) == 0,
        "re-saved step 50 holds the new values");
  free(got);
  free(want);
  ts_ckpt_close(ck);
  ts_client_free(c);
}

/* ts_params: save, load onto another mesh's sharded buffers, mismatch errors. */
static void test_params(void) {
  char root[512];
  snprintf(root, sizeof root, "%s/params", tmp_root);
  ts_client *c1 = client_for(1);
  ts_params *p = ts_params_new(5);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, true, TS_NONE);
  ts_tensor x = ts_input(g, "x", TS_F32, 2, (int64_t[]){4, 784});
  CHECK(ts_model_mlp(&m, x) != TS_NONE, "mlp: %s", ts_last_error());
  ts_params_use(p, g, "fc1.weight.exp_avg", TS_F32, 2, (int64_t[]){512, 784}, (ts_init){TS_INIT_UNIFORM, 1, 0}, false);
  ts_ckpt_meta meta = ck_meta(3);
  CHECK_OK(ts_ckpt_save_params(c1, root, p, &meta, 0));
  /* A second set, other seed, on 2 devices with fc1.weight sharded: load must give p's values. */
  ts_client *c2 = client_for(2);
  ts_params *q = ts_params_new(6);
  ts_graph *g2 = ts_graph_new();
  ts_nn_init(&m, g2, q, true, TS_NONE);
  x = ts_input(g2, "x", TS_F32, 2, (int64_t[]){4, 784});
  ts_model_mlp(&m, x);
  ts_params_use(q, g2, "fc1.weight.exp_avg", TS_F32, 2, (int64_t[]){512, 784}, (ts_init){TS_INIT_ZEROS, 0, 0}, false);
  ts_mesh *mesh = ts_mesh_from_text("fsdp=2");
  ts_partition_spec ps;
  ts_partition_spec_parse(mesh, "fsdp,None", &ps);
  ts_sharding *s = ts_sharding_new(mesh, &ps, 2);
  CHECK_OK(ts_buffer_reshard(ts_params_buffer(q, c2, ts_params_find(q, "fc1.weight")), s));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck && ts_ckpt_load_params(ck, c2, q, false) == 0, "load params: %s", ts_last_error());
  CHECK_OK(ts_params_sync_host(p));
  CHECK_OK(ts_params_sync_host(q));
  for (int i = 0; i < ts_params_count(p); i++) {
    int k = ts_params_find(q, ts_params_name(p, i));
    size_t bytes = (size_t)ts_params_numel(p, i) * 4;
    CHECK(k >= 0 && memcmp(ts_params_host(p, i), ts_params_host(q, k), bytes) == 0, "param %s after load",
          ts_params_name(p, i));
  }
  /* Model-only into a set without optimizer state works; a different model is an error listing what differs. */
  ts_params *r = ts_params_new(7);
  ts_graph *g3 = ts_graph_new();
  ts_nn_init(&m, g3, r, true, TS_NONE);
  x = ts_input(g3, "x", TS_F32, 2, (int64_t[]){4, 784});
  ts_model_mlp(&m, x);
  CHECK(ts_ckpt_load_params(ck, c1, r, true) == 0, "model-only load: %s", ts_last_error());
  CHECK(ts_ckpt_load_params(ck, c1, r, false) < 0 && strstr(ts_last_error(), "fc1.weight.exp_avg") &&
            strstr(ts_last_error(), "not in the program"),
        "full load into a set without optimizer state: %s", ts_last_error());
  ts_params *w = ts_params_new(8);
  ts_graph *g4 = ts_graph_new();
  ts_nn_init(&m, g4, w, true, TS_NONE);
  ts_tensor xx = ts_input(g4, "x", TS_F32, 2, (int64_t[]){4, 784});
  ts_nn_linear(&m, "fc1", xx, 784, 256, true);
  ts_nn_linear(&m, "fc9", xx, 784, 10, false);
  CHECK(ts_ckpt_load_params(ck, c1, w, true) < 0 && strstr(ts_last_error(), "fc1.weight: checkpoint f32[512,784], program f32[256,784]") &&
            strstr(ts_last_error(), "fc9.weight: missing") && strstr(ts_last_error(), "fc2.bias: in the checkpoint"),
        "different model: %s", ts_last_error());
  ts_ckpt_close(ck);
  ts_graph_free(g);
  ts_graph_free(g2);
  ts_graph_free(g3);
  ts_graph_free(g4);
  ts_params_free(p);
  ts_params_free(q);
  ts_params_free(r);
  ts_params_free(w);
  ts_sharding_free(s);
  ts_mesh_free(mesh);
  ts_client_free(c1);
  ts_client_free(c2);
}

int main(void) {
  ts_test_init("test_ckpt", 1);
  snprintf(tmp_root, sizeof tmp_root, "/tmp/tessel_test_ckpt_%d", (int)getpid());
  mkdir(tmp_root, 0755);
  test_matrix();
  test_meta_and_files();
  test_latest_keep();
  test_params();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
  if (ts_test_failed == 0 && !getenv("TESSEL_TEST_KEEP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
  return ts_test_finish();
}
