/* test_ckpt_torch.c — PyTorch interop: the MLP's parameters, sharded on 2
 * devices, are saved as a checkpoint and exported as one safetensors file;
 * tests/ckpt_torch.py reads it with numpy, loads it into a torch 1.13 MLP
 * with load_state_dict(strict=True) (so names and layouts are PyTorch's) and
 * compares its logits on the same batch with tessel's (1e-5). Needs
 * /usr/bin/python3 with torch: the test FAILS (never skips) without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { B = 16 };

int main(void) {
  uint64_t seed = ts_test_init("test_ckpt_torch", 11);
  if (system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) {
    CHECK(0, "/usr/bin/python3 cannot import torch and numpy: run scripts/install-deps.sh");
    return ts_test_finish();
  }
  char dir[256], path[400], xp[400], lp[400], cmd[1600];
  snprintf(dir, sizeof dir, "/tmp/tessel_test_ckpt_torch_%d", (int)getpid());
  mkdir(dir, 0755);
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 2});
  ts_params *p = ts_params_new(seed);
  ts_graph *g = ts_graph_new();
  ts_nn m;
  ts_nn_init(&m, g, p, false, TS_NONE);
  ts_tensor x = ts_input(g, "x", TS_F32, 2, (int64_t[]){B, 784});
  ts_tensor logits = ts_model_mlp(&m, x); // (B, 10)
  ts_graph_add_output(g, logits);
  ts_mesh *mesh = ts_mesh_from_text("data=2");
  ts_partition_spec ps;
  ts_partition_spec_parse(mesh, "data,None", &ps);
  ts_sharding *rows = ts_sharding_new(mesh, &ps, 2);
  CHECK_OK(ts_mark_sharding(g, x, rows));
  ts_executable *exe = ts_compile(c, g, &(ts_compile_options){.mesh = mesh});
  CHECK(exe != NULL, "compile: %s", ts_last_error());

  float *xs = malloc(sizeof(float) * B * 784), out[B * 10];
  for (int i = 0; i < B * 784; i++) xs[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
  int nin = ts_graph_num_inputs(g);
  ts_buffer *in[8] = {0}, *xb = ts_buffer_from_host(c, TS_F32, 2, (int64_t[]){B, 784}, xs), *res = NULL;
  for (int i = 0; i < nin && i < 8; i++) {
    const char *name = ts_input_name(g, ts_graph_input(g, i));
    in[i] = strcmp(name, "x") == 0 ? xb : ts_params_buffer(p, c, ts_params_find(p, name));
  }
  CHECK(exe && ts_execute(exe, in, &res) == 0 && ts_buffer_read(res, out, sizeof out) == 0, "execute: %s",
        ts_last_error());
  /* Save sharded: fc1.weight split by rows over the 2 devices, the rest as the executable left them. */
  CHECK_OK(ts_buffer_reshard(ts_params_buffer(p, c, ts_params_find(p, "fc1.weight")), rows));
  ts_ckpt_meta meta = {.step = 1};
  snprintf(path, sizeof path, "%s/ckpt", dir);
  CHECK_OK(ts_ckpt_save_params(c, path, p, &meta, 0));
  ts_ckpt *ck = ts_ckpt_open(path);
  ts_ckpt_tensor_info ti;
  CHECK(ck && ts_ckpt_tensor(ck, ts_ckpt_find(ck, "fc1.weight"), &ti) == 0 && ti.num_blocks == 2 && ti.shape[0] == 512 &&
            ti.shape[1] == 784,
        "fc1.weight saved as 2 blocks of a (out, in) = (512, 784) tensor");
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ck && ts_ckpt_export(ck, path, false) == 0, "export: %s", ts_last_error());
  ts_ckpt_close(ck);
  snprintf(xp, sizeof xp, "%s/x.bin", dir);
  snprintf(lp, sizeof lp, "%s/logits.bin", dir);
  FILE *f = fopen(xp, "wb");
  fwrite(xs, sizeof(float), B * 784, f);
  fclose(f);
  f = fopen(lp, "wb");
  fwrite(out, sizeof(float), B * 10, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ckpt_torch.py %s %s %s %d", TS_SOURCE_DIR, path, xp, lp, B);
  int rc = system(cmd);
  CHECK(rc == 0, "torch logits differ from tessel's (or the script failed): %s", cmd);

  free(xs);
  ts_buffer_free(xb);
  ts_buffer_free(res);
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_sharding_free(rows);
  ts_mesh_free(mesh);
  ts_client_free(c);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (ts_test_failed == 0 && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  return ts_test_finish();
}
