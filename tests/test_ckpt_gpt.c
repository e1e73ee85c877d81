/* test_ckpt_gpt.c — the GPT's checkpoint export in PyTorch: a 2-layer GPT
 * (d_model 32, 4 heads, position table 16, vocab 64) with every parameter
 * drawn at random (biases and layer norms too, so a wrong layout shows), its
 * weights saved from a 2-device client with the Megatron layout's blocks
 * (c_attn split by heads, c_fc by rows, wte by vocabulary rows on "model"),
 * exported as one safetensors file; tests/ckpt_gpt_torch.py loads the file
 * into nanoGPT's model (tests/torch_gpt.py, load_state_dict(strict=True):
 * names and shapes are nanoGPT's) and compares its logits on the same tokens
 * with tessel's (1e-4 relative, as tests/test_gpt_reference.c). The export
 * read back into fresh parameters (ts_ckpt_load_params, as --init-from)
 * gives the same logits bit for bit. Needs /usr/bin/python3 with torch: the
 * test FAILS (never skips) without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "ref_util.h" /* splitmix64 */
#include "tessel/tessel.h"

#ifndef TS_SOURCE_DIR
#error "TS_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

enum { B = 2, T = 12 };
static const ts_gpt_config CFG = {.layers = 2, .d_model = 32, .heads = 4, .seq = 16, .vocab = 64};

/* Logits (B, T, vocab) of parameters p for tokens x. */
static int logits_of(ts_client *c, ts_executable *e, const ts_graph *g, ts_params *p, const int32_t *x, float *out) {
  ts_buffer *xb = ts_buffer_from_host(c, TS_I32, 2, (int64_t[]){B, T}, x), *res = NULL;
  int nin = ts_graph_num_inputs(g);
  ts_buffer **in = calloc((size_t)nin, sizeof *in);
  int rc = xb && in ? 0 : -1;
  for (int i = 0; rc == 0 && i < nin; i++) {
    const char *name = ts_input_name(g, ts_graph_input(g, i));
    in[i] = strcmp(name, "x") == 0 ? xb : ts_params_buffer(p, c, ts_params_find(p, name));
    if (!in[i]) rc = -1;
  }
  if (rc == 0) rc = ts_execute(e, in, &res);
  if (rc == 0) rc = ts_buffer_read(res, out, sizeof(float) * B * T * (size_t)CFG.vocab);
  ts_buffer_free(res);
  ts_buffer_free(xb);
  free(in);
  return rc;
}

static void reshard(ts_params *p, ts_client *c, const ts_mesh *m, const char *name, const char *spec) {
  ts_partition_spec ps;
  ts_buffer *b = ts_params_buffer(p, c, ts_params_find(p, name));
  ts_sharding *s = b && ts_partition_spec_parse(m, spec, &ps) == 0 ? ts_sharding_new(m, &ps, ts_buffer_rank(b)) : NULL;
  CHECK(s && ts_buffer_reshard(b, s) == 0, "reshard %s as %s: %s", name, spec, ts_last_error());
  ts_sharding_free(s);
}

int main(void) {
  uint64_t seed = ts_test_init("test_ckpt_gpt", 13);
  if (system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) {
    CHECK(0, "/usr/bin/python3 cannot import torch and numpy: run scripts/install-deps.sh");
    return ts_test_finish();
  }
  char dir[256], path[400], out_path[400], xp[400], lp[400], cmd[2000];
  snprintf(dir, sizeof dir, "/tmp/tessel_test_ckpt_gpt_%d", (int)getpid());
  mkdir(dir, 0755);
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 2});
  ts_mesh *mesh = ts_mesh_from_text("model=2");
  ts_params *p = ts_params_new(seed), *q = ts_params_new(seed + 1);
  ts_graph *g = ts_graph_new(), *g2 = ts_graph_new();
  ts_nn m, m2;
  ts_nn_init(&m, g, p, false, TS_NONE);
  ts_nn_init(&m2, g2, q, false, TS_NONE);
  ts_tensor lg = ts_model_gpt(&m, &CFG, ts_input(g, "x", TS_I32, 2, (int64_t[]){B, T}));
  ts_tensor lg2 = ts_model_gpt(&m2, &CFG, ts_input(g2, "x", TS_I32, 2, (int64_t[]){B, T}));
  CHECK(lg != TS_NONE && lg2 != TS_NONE, "gpt: %s", ts_last_error());
  ts_graph_add_output(g, lg);
  ts_graph_add_output(g2, lg2);
  ts_executable *e = ts_compile(c, g, &(ts_compile_options){.mesh = mesh});
  ts_executable *e2 = ts_compile(c, g2, &(ts_compile_options){.mesh = mesh});
  CHECK(e && e2, "compile: %s", ts_last_error());
  if (!e || !e2) return ts_test_finish();
  /* every parameter random in [-0.25, 0.25) */
  uint64_t s = seed ^ 0xC4E7ull;
  for (int i = 0; i < ts_params_count(p); i++) {
    int64_t n = ts_params_numel(p, i);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) v[k] = (float)((double)(splitmix64(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.5f;
    CHECK_OK(ts_buffer_write(ts_params_buffer(p, c, i), v, sizeof(float) * (size_t)n));
    free(v);
  }
  int32_t x[B * T];
  for (int i = 0; i < B * T; i++) x[i] = (int32_t)(splitmix64(&s) % (uint64_t)CFG.vocab);
  size_t nl = (size_t)B * T * (size_t)CFG.vocab;
  float *want = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
  CHECK(logits_of(c, e, g, p, x, want) == 0, "logits: %s", ts_last_error());

  /* saved from Megatron-style blocks on model=2 */
  reshard(p, c, mesh, "transformer.h.0.attn.c_attn.weight", "None,model,None");
  reshard(p, c, mesh, "transformer.h.1.attn.c_attn.bias", "None,model");
  reshard(p, c, mesh, "transformer.h.0.mlp.c_fc.weight", "model,None");
  reshard(p, c, mesh, "transformer.wte.weight", "model,None");
  ts_ckpt_meta meta = {.step = 1};
  snprintf(path, sizeof path, "%s/ckpt", dir);
  CHECK_OK(ts_ckpt_save_params(c, path, p, &meta, 0));
  ts_ckpt *ck = ts_ckpt_open(path);
  ts_ckpt_tensor_info ti;
  CHECK(ck && ts_ckpt_tensor(ck, ts_ckpt_find(ck, "transformer.h.0.attn.c_attn.weight"), &ti) == 0 &&
            ti.num_blocks == 2 && ti.rank == 3,
        "c_attn.weight saved as 2 blocks of (3, C, C)");
  snprintf(out_path, sizeof out_path, "%s/gpt.safetensors", dir);
  CHECK(ck && ts_ckpt_export(ck, out_path, false) == 0, "export: %s", ts_last_error());
  ts_ckpt_close(ck);

  /* PyTorch's logits from the export */
  snprintf(xp, sizeof xp, "%s/x.bin", dir);
  snprintf(lp, sizeof lp, "%s/logits.bin", dir);
  FILE *f = fopen(xp, "wb");
  fwrite(x, sizeof(int32_t), B * T, f);
  fclose(f);
  f = fopen(lp, "wb");
  fwrite(want, sizeof(float), nl, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ckpt_gpt_torch.py %s %s %s %d %d %lld %lld %lld %lld %lld",
           TS_SOURCE_DIR, out_path, xp, lp, B, T, (long long)CFG.layers, (long long)CFG.d_model,
           (long long)CFG.heads, (long long)CFG.seq, (long long)CFG.vocab);
  CHECK(system(cmd) == 0, "torch logits differ from tessel's (or the script failed): %s", cmd);

  /* the export back into other parameters (as --init-from): the same logits exactly */
  ck = ts_ckpt_open(out_path);
  CHECK(ck && ts_ckpt_load_params(ck, c, q, true) == 0, "load the export: %s", ts_last_error());
  ts_ckpt_close(ck);
  CHECK(logits_of(c, e2, g2, q, x, got) == 0 && memcmp(got, want, sizeof(float) * nl) == 0,
        "logits after loading the export differ");

  free(want);
  free(got);
  ts_executable_free(e);
  ts_executable_free(e2);
  ts_graph_free(g);
  ts_graph_free(g2);
  ts_params_free(p);
  ts_params_free(q);
  ts_mesh_free(mesh);
  ts_client_free(c);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (ts_test_failed == 0 && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  return ts_test_finish();
}
