/* cmd_ckpt.c — `tessel ckpt`: look at a checkpoint (inspect: training state,
 * mesh, files, tensors with their shardings, checksums verified) and export
 * one as a plain safetensors file that PyTorch loads with its own names
 * (export). Both take a checkpoint root (following `latest`), a step
 * directory, or (inspect) a .safetensors file. */
#include <stdio.h>
#include <string.h>

#include "args.h" // cli_flag, cli_error, exit codes
#include "tessel/ckpt.h"

int ts_cmd_ckpt(int argc, char **argv);

static const char *CMD = "ckpt";

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessel ckpt inspect DIR [--no-verify]\n"
          "       tessel ckpt export DIR --out FILE.safetensors [--with-optimizer]\n"
          "\n"
          "DIR is a checkpoint root (its `latest` is followed) or one step directory\n"
          "(ROOT/step-NNNNNNNN); inspect also takes a .safetensors file.\n"
          "\n"
          "  inspect           the training state (step, optimizer, schedule, seeds), the mesh it\n"
          "                    was saved on, the files and every tensor with its sharding; reads\n"
          "                    every file and checks its checksum unless --no-verify\n"
          "  export            one safetensors file of the whole tensors with PyTorch's state_dict\n"
          "                    names (load it with safetensors.torch.load_file + load_state_dict)\n"
          "  --out FILE        the file to write (atomically)\n"
          "  --with-optimizer  include the optimizer state (<param>.exp_avg, .exp_avg_sq,\n"
          "                    .momentum_buffer) [model tensors only]\n");
}

/* "f32[512,784]" into buf. */
static const char *shape_text(const ts_ckpt_tensor_info *t, char *buf, size_t n) {
  int o = snprintf(buf, n, "%s[", ts_dtype_name(t->dtype));
  for (int d = 0; d < t->rank && o > 0 && (size_t)o < n; d++)
    o += snprintf(buf + o, n - (size_t)o, d ? ",%lld" : "%lld", (long long)t->shape[d]);
  if (o > 0 && (size_t)o < n) snprintf(buf + o, n - (size_t)o, "]");
  return buf;
}

static int inspect(ts_ckpt *ck, bool verify) {
  const ts_ckpt_meta *m = ts_ckpt_get_meta(ck);
  printf("checkpoint %s\n", ts_ckpt_path(ck));
  if (m->tessel_version[0]) {
    printf("  step %lld (epoch %lld, next batch %lld of it), written by tessel %s\n", (long long)m->step,
           (long long)m->epoch, (long long)m->epoch_step, m->tessel_version);
    printf("  saved on %s%s: %d device%s in %d process%s\n",
           !strcmp(m->mesh, "ddp") ? "DDP replicas" : m->mesh[0] ? "mesh " : "one device or replicated",
           !strcmp(m->mesh, "ddp") ? "" : m->mesh, m->num_devices, m->num_devices == 1 ? "" : "s", m->process_count,
           m->process_count == 1 ? "" : "es");
    if (m->has_optim)
      printf("  optimizer %s: weight_decay %g momentum %g%s beta1 %g beta2 %g eps %g\n",
             m->optim.kind == TS_OPTIM_ADAMW ? "adamw" : "sgd", m->optim.weight_decay, m->optim.momentum,
             m->optim.nesterov ? " (nesterov)" : "", m->optim.beta1, m->optim.beta2, m->optim.eps);
    if (m->has_schedule)
      printf("  schedule %s: base lr %g, warm-up %lld, total %lld steps, min lr %g\n",
             m->schedule.kind == TS_LR_COSINE ? "cosine" : "constant", m->schedule.base_lr,
             (long long)m->schedule.warmup_steps, (long long)m->schedule.total_steps, m->schedule.min_lr);
    printf("  seed %llu, program hash %016llx, loader state %s\n", (unsigned long long)m->seed,
           (unsigned long long)m->program_hash, m->has_loader ? "saved" : "none");
    if (m->config[0]) printf("  config: %s\n", m->config);
  } else {
    printf("  a plain safetensors file (no training state, no checksums)\n");
  }
  int nf = ts_ckpt_num_files(ck), nt = ts_ckpt_num_tensors(ck);
  printf("files (%d):\n", nf);
  for (int i = 0; i < nf; i++) {
    const char *name;
    uint64_t bytes;
    ts_ckpt_file(ck, i, &name, &bytes);
    printf("  %-40s %12llu bytes\n", name, (unsigned long long)bytes);
  }
  int64_t values[3] = {0};
  printf("tensors (%d):\n", nt);
  for (int i = 0; i < nt; i++) {
    ts_ckpt_tensor_info t;
    ts_ckpt_tensor(ck, i, &t);
    char sh[160];
    printf("  %-28s %-9s %-18s %3d block%s  %-16s %s\n", t.name, ts_ckpt_kind_name(t.kind),
           shape_text(&t, sh, sizeof sh), t.num_blocks, t.num_blocks == 1 ? " " : "s",
           t.spec[0] ? t.spec : "replicated", t.sharding);
    values[t.kind] += ts_shape_numel(t.rank, t.shape);
  }
  printf("values: %lld parameters, %lld optimizer state, %lld other\n", (long long)values[TS_CKPT_PARAM],
         (long long)values[TS_CKPT_OPTIMIZER], (long long)values[TS_CKPT_BUFFER]);
  if (!verify) return CLI_EXIT_OK;
  if (ts_ckpt_verify(ck) < 0) {
    cli_error(CMD, "verify: %s", ts_last_error());
    return CLI_EXIT_FAIL;
  }
  printf("verified: every file's size and checksum, every header and block\n");
  return CLI_EXIT_OK;
}

int ts_cmd_ckpt(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
  }
  const char *sub = argv[1], *dir = NULL, *out = NULL;
  bool is_inspect = strcmp(sub, "inspect") == 0, is_export = strcmp(sub, "export") == 0;
  if (!is_inspect && !is_export) {
    cli_error(CMD, "unknown subcommand '%s' (valid: inspect, export)", sub);
    return CLI_EXIT_USAGE;
  }
  bool verify = true, with_optim = false;
  for (int i = 2; i < argc; i++) {
    int r;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
    if (is_inspect && strcmp(argv[i], "--no-verify") == 0) {
      verify = false;
      continue;
    }
    if (is_export && strcmp(argv[i], "--with-optimizer") == 0) {
      with_optim = true;
      continue;
    }
    if (is_export && (r = cli_flag(CMD, argc, argv, &i, "--out", &out)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      continue;
    }
    if (argv[i][0] == '-' || dir) {
      cli_error(CMD, "%s '%s' (see 'tessel ckpt --help')", argv[i][0] == '-' ? "unknown flag" : "unexpected argument",
                argv[i]);
      return CLI_EXIT_USAGE;
    }
    dir = argv[i];
  }
  if (!dir || (is_export && !out)) {
    cli_error(CMD, "%s is required (see 'tessel ckpt --help')", !dir ? "the checkpoint DIR" : "--out FILE");
    return CLI_EXIT_USAGE;
  }
  ts_ckpt *ck = ts_ckpt_open(dir);
  if (!ck) {
    cli_error(CMD, "%s", ts_last_error());
    return CLI_EXIT_FAIL;
  }
  int rc = CLI_EXIT_OK;
  if (is_inspect) {
    rc = inspect(ck, verify);
  } else if (ts_ckpt_export(ck, out, with_optim) < 0) {
    cli_error(CMD, "export: %s", ts_last_error());
    rc = CLI_EXIT_FAIL;
  } else {
    int n = 0;
    for (int i = 0; i < ts_ckpt_num_tensors(ck); i++) {
      ts_ckpt_tensor_info t;
      ts_ckpt_tensor(ck, i, &t);
      n += with_optim || t.kind != TS_CKPT_OPTIMIZER;
    }
    printf("wrote %s: %d tensors (step %lld of %s)%s\n", out, n, (long long)ts_ckpt_get_meta(ck)->step,
           ts_ckpt_path(ck), with_optim ? ", with optimizer state" : "");
  }
  ts_ckpt_close(ck);
  return rc;
}
