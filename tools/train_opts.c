/* train_opts.c — the flags of `tessel train`: usage text, parsing, checks
 * of flag combinations, model-dependent defaults, and the configuration text
 * every process of a job must agree on. */
#include "train_opts.h"

#include <stdio.h>
#include <string.h>

#include "args.h"            // cli_flag, cli_parse_*, cli_error
#include "tessel/loader.h"   // TS_FASHION_MNIST_DIR
#include "tessel/runtime.h"  // TS_MAX_THREADS
#include "model_graph.h"     // model_graph_layout
#include "train_fault.h"     // --testing-fault (test builds only)

#define CMD "train"

const char *const train_model_names[] = {"mlp", "cnn", "resnet20", "resnet18", "resnet50", "gpt", NULL};
const char *const train_dataset_names[] = {"fashion-mnist", "cifar10", "synthetic", "text", "imagefolder", NULL};
const char *const train_optim_names[] = {"sgd", "adamw", NULL};
const char *const train_sched_names[] = {"constant", "cosine", NULL};
const char *const train_parallel_names[] = {"spmd", "ddp", NULL};
const char *const train_load_names[] = {"auto", "global", "local", NULL};
const char *const train_amp_names[] = {"none", "bf16", "f16", NULL};
const char *const train_layout_names[] = {"nchw", "nhwc", NULL};

void cli_train_usage(FILE *f) {
  fprintf(f,
          "usage: tessel train [flags]\n"
          "\n"
          "Trains a classifier on Fashion-MNIST or CIFAR-10 and reports the test accuracy after each\n"
          "epoch.\n"
          "\n"
          "flags (defaults in brackets):\n"
          "  --model mlp|cnn|resnet20|resnet18|resnet50\n"
          "                             784-512-512-10 MLP, the PyTorch MNIST CNN (on cifar10 a 3-conv\n"
          "                             CIFAR CNN), or a ResNet with torchvision's names and init\n"
          "                             (resnet20/18: the CIFAR layouts; resnet50: torchvision v1.5,\n"
          "                             inputs of at least 32x32) [mlp; cifar10: cnn]\n"
          "  --dataset fashion-mnist|cifar10|synthetic|text|imagefolder\n"
          "                             synthetic: random images in the model's natural shape (3x32x32,\n"
          "                             10 classes; resnet50 3x224x224, 1000 classes), for benchmarks;\n"
          "                             imagefolder: JPEG/PNG files in DIR/train/<class>/ and\n"
          "                             DIR/val/<class>/ (ImageNet's layout), resnets only\n"
          "                             [fashion-mnist]\n"
          "  --data-dir DIR             fashion-mnist: IDX files (train-*, t10k-*)\n"
          "                             [" TS_FASHION_MNIST_DIR "];\n"
          "                             cifar10: data_batch_1..5.bin, test_batch.bin (required);\n"
          "                             imagefolder: the folder holding train/ and val/ (required)\n"
          "  --dataset text             --model gpt: bytes of --data-file as tokens (vocab 256); the\n"
          "                             first 90%% trains (windows of --seq + 1 bytes in a seeded,\n"
          "                             resumable order), the last 10%% validates [gpt: text];\n"
          "                             --dataset synthetic with gpt: random tokens of --vocab\n"
          "  --data-file F              the text corpus: any file, bytes are bytes [the King James\n"
          "                             Bible, " TS_KJV_TEXT ",\n"
          "                             made by scripts/install-deps.sh]\n"
          "  --eval-every N             gpt: validation loss every N steps and at the end [100]\n"
          "  --eval-batches N           gpt: validation batches of --batch windows at fixed seeded\n"
          "                             positions of the last 10%% [20]\n"
          "  --image-size S             imagefolder: train on random resized crops of SxS, evaluate on\n"
          "                             center crops of SxS after resizing the shorter side to S*256/224\n"
          "                             [224]\n"
          "  --skip-bad-files           imagefolder: a file that does not decode is counted, reported\n"
          "                             and replaced by the next readable one [an error naming it]\n"
          "  --loader-workers N         threads that read, decode and augment batches [imagefolder 4,\n"
          "                             else 1]\n"
          "  --load auto|global|local   global: every process prepares the whole global batch; local:\n"
          "                             each prepares only the rows of its own devices (per-host\n"
          "                             loading); auto: local when data parallel over processes\n"
          "                             [auto]\n"
          "  --epochs N                 passes over the training set [mlp 5, cnn 3, resnets 2]\n"
          "  --batch B                  training batch size [mlp 128, cnn 64, resnet20 128, resnet18 32,\n"
          "                             resnet50 8]\n"
          "  --optimizer sgd|adamw      [adamw]\n"
          "  --lr X                     peak learning rate [adamw 1e-3 (resnet20 2e-3: chosen on\n"
          "                             --holdout 10000, see README), sgd 0.05]\n"
          "  --lr-schedule constant|cosine  cosine decays to 0 at the last step [cosine]\n"
          "  --warmup N                 linear warm-up steps, at most the run's steps\n"
          "                             [100, at most 10%% of the run]\n"
          "  --weight-decay X           AdamW: decoupled; SGD: L2 [adamw 0.01, sgd 0]\n"
          "  --momentum X               SGD momentum [0.9]\n"
          "  --seed S                   initialization, shuffling and dropout [0]\n"
          "  --threads N                compute threads, at most 4096; more than the cores are capped\n"
          "                             to the cores (as for $TESSEL_NUM_THREADS)\n"
          "                             [$TESSEL_NUM_THREADS or all cores]\n"
          "  --steps N                  stop after N steps in total (for tests) [no limit]\n"
          "  --eval-batch N             evaluation batch size [1000]\n"
          "  --holdout N                fashion-mnist, cifar10: the training set's last N samples are\n"
          "                             not trained on; each epoch reports their accuracy and loss\n"
          "                             (val_accuracy, val_loss), to choose settings without the test\n"
          "                             set [0: none]\n"
          "  --mesh AXIS=N,...          SPMD over virtual CPU devices (e.g. data=4,model=2): the batch\n"
          "                             on axis 'data', the MLP's fc1/fc2 Megatron-split on 'model',\n"
          "                             weights and optimizer state sharded on 'fsdp' (FSDP);\n"
          "                             other axis names are errors; at most 4096 devices in all;\n"
          "                             under mpirun the devices are shared out over the processes\n"
          "                             [one device; under mpirun: data=<processes>]\n"
          "  --auto-shard               the shardings on --mesh chosen by the cost model and ILP\n"
          "                             (tessel inspect --auto-shard explains them); any axis names\n"
          "  --memory-limit BYTES       per-device peak the --auto-shard plan must fit [none]\n"
          "  --parallel spmd|ddp        spmd: the sharded program of --mesh; ddp: classic data\n"
          "                             parallel, one full replica per process, gradients averaged\n"
          "                             in buckets overlapped with the backward pass [spmd]\n"
          "  --amp none|bf16|f16        mixed precision (PyTorch's CPU autocast policy): convolutions\n"
          "                             and matmuls in bf16 or f16, f32 weights, accumulation, norms,\n"
          "                             softmax and loss; f16 adds a dynamic loss scaler (GradScaler)\n"
          "                             and is computed in f32 here (no f16 arithmetic on this CPU) [none]\n"
          "  --layout nchw|nhwc         the resnets' activations: nchw, or nhwc (channels last: oneDNN's\n"
          "                             convolutions read them with no reorders); the parameters are\n"
          "                             OIHW either way, so checkpoints load under both [nhwc for\n"
          "                             the resnets: faster, see README; nchw for the other models]\n"
          "  --sync-bn                  ddp: batch-norm statistics over the global batch (PyTorch's\n"
          "                             SyncBatchNorm); without it each replica uses its own [off]\n"
          "  --shard-update             ddp: gradients reduce-scattered, each replica updates 1/N of\n"
          "                             every weight with 1/N of the optimizer state, new weights\n"
          "                             all-gathered (ZeRO-1, PyTorch's ZeroRedundancyOptimizer);\n"
          "                             the same values as the replicated update [on]\n"
          "  --replicated-update        ddp: every replica updates every weight with all of the\n"
          "                             optimizer state (PyTorch's DDP); alias --no-shard-update [off]\n"
          "  --collective-timeout S     seconds a collective waits for a missing peer before the job\n"
          "                             ends with an error [$TESSEL_COLLECTIVE_TIMEOUT, else 120;\n"
          "                             20 over several processes]\n"
          "  --all-ranks                under mpirun every process prints (default: rank 0 only)\n"
          "  --check-replicas N         ddp: every N steps check that every process holds the same\n"
          "                             parameters (a hash of them); a difference is an error [never]\n"
          "  --log-json FILE            one JSON object per line: {\"step\":N,\"loss\":X,\"step_ms\":T} per step,\n"
          "                             {\"epoch\":E,\"test_accuracy\":A} per evaluation\n"
          "  --metrics FILE             write the metrics (CompileTime, ExecuteTime, ...) as JSON\n"
          "                             at the end and print a short report\n"
          "  --trace FILE               write a Chrome/Perfetto trace (chrome://tracing) of the run\n"
          "  --log-every N              read the loss back and write its step line every N steps\n"
          "                             only (steps N, 2N, ...; the progress bar and epoch loss use\n"
          "                             those steps and each epoch's last) [1]\n"
          "  --profile                  at the end, where a step went, per device: compute,\n"
          "                             communication (exposed / hidden behind compute), idle, and\n"
          "                             the host's loader wait, upload, read-back (ms per step)\n"
          "  --bind                     pin each device thread (and its kernel threads) to its own\n"
          "                             cores of this process's CPU set; under mpirun bind the ranks\n"
          "                             to disjoint cores too (--bind-to core --map-by slot:PE=N)\n"
          "  --save-dir D               write sharded checkpoints to D/step-NNNNNNNN (D/latest names the\n"
          "                             newest): parameters, optimizer state, step, loader position\n"
          "  --save-every N             a checkpoint every N steps and at the end [at the end only]\n"
          "  --keep K                   keep only the newest K checkpoints in --save-dir [all]\n"
          "  --resume D                 continue the run saved in D (its latest) or D/step-NNNNNNNN\n"
          "                             exactly: same losses as without the interruption; the mesh and\n"
          "                             process count may differ, the model, data and optimizer not\n"
          "  --init-from F              start from the model weights in F (a .safetensors file with\n"
          "                             PyTorch names, e.g. from 'tessel ckpt export', or a checkpoint)\n"
          "\n"
          "the GPT (--model gpt: a nanoGPT-style decoder trained on text; batch 16, AdamW lr 1e-3 with\n"
          "betas 0.9/0.95, weight decay 0.1 on matrices, 100 warm-up steps, cosine to 0.1x, gradient\n"
          "clipping at norm 1; one epoch unless --steps):\n"
          "  --layers N --d-model D --heads H --seq T --vocab V\n"
          "                             blocks, width, attention heads (dividing D), context length\n"
          "                             and vocabulary (above 256 only with --dataset synthetic)\n"
          "                             [6, 256, 4, 128, 256]\n"
          "  --sample N                 after training, print N generated bytes\n"
          "  --prompt TEXT              what the sample continues (at most --seq bytes) [a newline]\n"
          "  --temperature X            sampling temperature [0.8]\n"
          "  --top-k K                  sample among the K most likely bytes; 0: all [200]\n"
          "  --sequence-parallel        with --mesh ...,model=N: layer norms and residual adds split on\n"
          "                             the sequence over 'model' (activation all-reduces become\n"
          "                             reduce-scatter + all-gather pairs; seq must divide by N)\n"
          "  -h, --help                 this text\n"
          "\n"
          "With the defaults, 'tessel train --model mlp --epochs 5' reaches about 88%% test\n"
          "accuracy and 'tessel train --model cnn --epochs 3' about 91%%.\n");
}

/* --model gpt: its dataset and the checks of its flags, before any data is read. */
static int train_opts_gpt(train_opts *o) {
  if (o->vocab == 0) o->vocab = 256;
  if (o->d_model % o->heads) {
    cli_error(CMD, "--heads %lld does not divide --d-model %lld", (long long)o->heads, (long long)o->d_model);
    return -1;
  }
  if (o->prompt && (int64_t)strlen(o->prompt) > o->seq) {
    cli_error(CMD, "--prompt is %zu bytes, longer than --seq %lld (the model's context)", strlen(o->prompt),
              (long long)o->seq);
    return -1;
  }
  if (o->prompt && !o->prompt[0]) {
    cli_error(CMD, "--prompt is empty (give at least one byte, or leave it out for a newline)");
    return -1;
  }
  if (o->lr < 0) o->lr = 1e-3;
  if (o->optimizer != 1) {
    cli_error(CMD, "--model gpt trains with AdamW (--optimizer adamw)");
    return -1;
  }
  return 0;
}

/* --layout: model_graph_layout's default and check. */
_Static_assert((int)MODEL_RESNET20 == (int)MODEL_GRAPH_RESNET20 && (int)MODEL_RESNET18 == (int)MODEL_GRAPH_RESNET18 &&
                   (int)MODEL_RESNET50 == (int)MODEL_GRAPH_RESNET50 && (int)MODEL_GPT == (int)MODEL_GRAPH_GPT,
               "train's MODEL_* are model_graph's");
static int train_opts_layout(train_opts *o) {
  int layout = model_graph_layout(o->model, train_model_names[o->model], o->layout);
  if (layout < 0) {
    cli_error(CMD, "%s", ts_last_error());
    return -1;
  }
  o->layout = layout;
  return 0;
}

int train_opts_parse(int argc, char **argv, train_opts *o) {
  *o = (train_opts){.model = -1, .dataset = -1, .data_dir = NULL, .eval_batch = 1000,
                    .warmup = -1, .optimizer = 1, .schedule = 1, .lr = -1,
                    .weight_decay = -1, .momentum = 0.9, .fault = {.rank = -1},
                    .layers = 6, .d_model = 256, .heads = 4, .seq = 128, .vocab = 0,
                    .layout = -1, .eval_every = 100, .eval_batches = 20, .temperature = 0.8, .top_k = 200};
  bool gpt_flag = false; /* a GPT-only flag was given */
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int64_t n = 0;
    int r;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
#define FLAG(name) ((r = cli_flag(CMD, argc, argv, &i, name, &v)) != 0)
#define INT_FLAG(name, min, what, dst)                                              \
  if (FLAG(name)) {                                                                 \
    if (r < 0 || cli_parse_int(CMD, name, v, min, INT32_MAX, what, &n) < 0) return -1; \
    dst = n;                                                                        \
    continue;                                                                       \
  }
#define DOUBLE_FLAG(name, min, max, what, dst)                                   \
  if (FLAG(name)) {                                                              \
    if (r < 0 || cli_parse_double(CMD, name, v, min, max, what, &dst) < 0) return -1; \
    continue;                                                                    \
  }
#define CHOICE_FLAG(name, kind, list, dst)                                        \
  if (FLAG(name)) {                                                               \
    if (r < 0 || cli_parse_choice(CMD, name, v, kind, list, &dst) < 0) return -1; \
    continue;                                                                     \
  }
    CHOICE_FLAG("--model", "model", train_model_names, o->model)
    CHOICE_FLAG("--dataset", "dataset", train_dataset_names, o->dataset)
    CHOICE_FLAG("--optimizer", "optimizer", train_optim_names, o->optimizer)
    CHOICE_FLAG("--lr-schedule", "schedule", train_sched_names, o->schedule)
    INT_FLAG("--epochs", 1, "a positive integer", o->epochs)
    INT_FLAG("--batch", 1, "a positive integer", o->batch)
    INT_FLAG("--steps", 1, "a positive integer", o->steps)
    INT_FLAG("--eval-batch", 1, "a positive integer", o->eval_batch)
    INT_FLAG("--holdout", 0, "a non-negative integer", o->holdout)
    INT_FLAG("--warmup", 0, "a non-negative integer", o->warmup)
    INT_FLAG("--eval-every", 1, "a positive integer", o->eval_every)
    INT_FLAG("--eval-batches", 1, "a positive integer", o->eval_batches)
    if (FLAG("--data-file")) {
      if (r < 0) return -1;
      o->data_file = v;
      continue;
    }
    if (FLAG("--threads")) { /* the rule of TESSEL_NUM_THREADS: [1, TS_MAX_THREADS], capped to the cores */
      if (r < 0 || cli_parse_int(CMD, "--threads", v, 1, TS_MAX_THREADS, "a positive integer", &n) < 0) return -1;
      o->threads = n;
      continue;
    }
    INT_FLAG("--check-replicas", 1, "a positive integer", o->check_replicas)
#define GPT_INT(name, min, max, what, dst)                                                  \
  if (FLAG(name)) {                                                                         \
    if (r < 0 || cli_parse_int(CMD, name, v, min, max, what, &n) < 0) return -1;            \
    dst = n;                                                                                \
    gpt_flag = true;                                                                        \
    continue;                                                                               \
  }
    GPT_INT("--layers", 1, 1024, "an integer in [1, 1024]", o->layers)
    GPT_INT("--d-model", 1, 65536, "an integer in [1, 65536]", o->d_model)
    GPT_INT("--heads", 1, 65536, "an integer in [1, 65536]", o->heads)
    GPT_INT("--seq", 1, 1 << 20, "an integer in [1, 1048576]", o->seq)
    GPT_INT("--vocab", 1, 1 << 24, "an integer in [1, 16777216]", o->vocab)
    GPT_INT("--sample", 0, 1 << 24, "an integer in [0, 16777216]", o->sample)
    GPT_INT("--top-k", 0, 1 << 24, "a non-negative integer", o->top_k)
#undef GPT_INT
    if (strcmp(argv[i], "--sequence-parallel") == 0) {
      o->sequence_parallel = true;
      gpt_flag = true;
      continue;
    }
    if (FLAG("--temperature")) {
      if (r < 0 || cli_parse_double(CMD, "--temperature", v, 1e-6, 1e6, "a positive number", &o->temperature) < 0)
        return -1;
      gpt_flag = true;
      continue;
    }
    if (FLAG("--prompt")) {
      if (r < 0) return -1;
      o->prompt = v;
      gpt_flag = true;
      continue;
    }
    DOUBLE_FLAG("--lr", 1e-30, 1e6, "a positive number", o->lr)
    DOUBLE_FLAG("--weight-decay", 0.0, 1e6, "a non-negative number", o->weight_decay)
    DOUBLE_FLAG("--momentum", 0.0, 1.0, "a number in [0, 1]", o->momentum)
    if (FLAG("--seed")) {
      if (r < 0 || cli_parse_int(CMD, "--seed", v, 0, INT64_MAX, "a non-negative integer", &n) < 0)
        return -1;
      o->seed = (uint64_t)n;
      continue;
    }
    if (FLAG("--data-dir")) {
      if (r < 0) return -1;
      o->data_dir = v;
      continue;
    }
    if (FLAG("--metrics")) {
      if (r < 0) return -1;
      o->metrics = v;
      continue;
    }
    if (FLAG("--trace")) {
      if (r < 0) return -1;
      o->trace = v;
      continue;
    }
    CHOICE_FLAG("--parallel", "mode", train_parallel_names, o->parallel)
    CHOICE_FLAG("--load", "mode", train_load_names, o->load)
    INT_FLAG("--image-size", 8, "an integer of at least 8", o->image_size)
    INT_FLAG("--loader-workers", 1, "a positive integer", o->loader_workers)
    if (strcmp(argv[i], "--skip-bad-files") == 0) {
      o->skip_bad_files = true;
      continue;
    }
    CHOICE_FLAG("--amp", "precision", train_amp_names, o->amp)
    CHOICE_FLAG("--layout", "layout", train_layout_names, o->layout)
    if (strcmp(argv[i], "--sync-bn") == 0) {
      o->sync_bn = true;
      continue;
    }
    if (strcmp(argv[i], "--shard-update") == 0) {
      o->shard_update = true;
      continue;
    }
    if (strcmp(argv[i], "--replicated-update") == 0 || strcmp(argv[i], "--no-shard-update") == 0) {
      o->replicated_update = true;
      continue;
    }
    DOUBLE_FLAG("--collective-timeout", 0.001, 86400, "seconds in (0, 86400]", o->timeout_s)
    if (strcmp(argv[i], "--all-ranks") == 0) {
      o->all_ranks = true;
      continue;
    }
    if (strcmp(argv[i], "--auto-shard") == 0) {
      o->auto_shard = true;
      continue;
    }
    DOUBLE_FLAG("--memory-limit", 1, 1e18, "bytes per device", o->memory_limit)
    if (FLAG("--mesh")) {
      if (r < 0) return -1;
      o->mesh = v;
      continue;
    }
    if (FLAG("--log-json")) {
      if (r < 0) return -1;
      o->log_json = v;
      continue;
    }
    INT_FLAG("--log-every", 1, "a positive integer", o->log_every)
    if (strcmp(argv[i], "--profile") == 0 || strcmp(argv[i], "--bind") == 0) {
      *(argv[i][2] == 'p' ? &o->profile : &o->bind) = true;
      continue;
    }
    INT_FLAG("--save-every", 1, "a positive integer", o->save_every)
    INT_FLAG("--keep", 1, "a positive integer", o->keep)
    {
      const char **paths[] = {&o->save_dir, &o->resume, &o->init_from};
      const char *names[] = {"--save-dir", "--resume", "--init-from"};
      int hit = 0;
      for (int k = 0; k < 3 && !hit; k++)
        if ((hit = cli_flag(CMD, argc, argv, &i, names[k], &v)) > 0) *paths[k] = v;
      if (hit < 0) return -1;
      if (hit) continue;
    }
#ifdef TESSEL_TESTING
    if (FLAG("--testing-fault")) { /* a testing hook, absent from shipping builds (train_fault.h) */
      if (r < 0 || train_fault_parse(v, &o->fault) < 0) return -1;
      continue;
    }
#endif
#undef FLAG
#undef INT_FLAG
#undef DOUBLE_FLAG
#undef CHOICE_FLAG
    if (argv[i][0] == '-')
      cli_error(CMD, "unknown flag '%s' (see 'tessel train --help')", argv[i]);
    else
      cli_error(CMD, "unexpected argument '%s' (see 'tessel train --help')", argv[i]);
    return -1;
  }
  /* Token data: --model gpt reads text (the KJV corpus unless --data-file) or
   * synthetic tokens; text is for gpt only. */
  if (o->model == MODEL_GPT && o->dataset < 0) o->dataset = DATA_TEXT;
  if (o->dataset < 0) o->dataset = DATA_FASHION_MNIST;
  if (o->dataset == DATA_TEXT && o->model >= 0 && o->model != MODEL_GPT) {
    cli_error(CMD, "--dataset text is token data for --model gpt, not --model %s", train_model_names[o->model]);
    return -1;
  }
  if (o->dataset == DATA_TEXT && o->model < 0) o->model = MODEL_GPT;
  if (o->model == MODEL_GPT && o->dataset != DATA_TEXT && o->dataset != DATA_SYNTHETIC) {
    cli_error(CMD, "--model gpt trains on --dataset text (a byte-level corpus) or synthetic (random tokens), not "
                   "%s", train_dataset_names[o->dataset]);
    return -1;
  }
  if (o->data_file && o->dataset != DATA_TEXT) {
    cli_error(CMD, "--data-file is the corpus of --dataset text (--dataset %s reads none)",
              train_dataset_names[o->dataset]);
    return -1;
  }
  if (o->dataset == DATA_TEXT && !o->data_file) o->data_file = TS_KJV_TEXT;
  if (o->dataset == DATA_TEXT && o->vocab > 256) {
    cli_error(CMD, "--vocab %lld: --dataset text is bytes (vocab 256 at most); a larger vocabulary is for "
                   "--dataset synthetic", (long long)o->vocab);
    return -1;
  }
  if (o->model == MODEL_GPT) {
    if (train_opts_gpt(o) < 0) return -1;
  } else if (gpt_flag) {
    cli_error(CMD, "--layers, --d-model, --heads, --seq, --vocab, --sample, --prompt, --temperature, --top-k and "
                   "--sequence-parallel are for --model gpt");
    return -1;
  }
  if (o->dataset == DATA_CIFAR10) {
    if (o->model == MODEL_MLP) {
      cli_error(CMD, "--model mlp takes 1x28x28 images; use --model cnn or a resnet with --dataset cifar10");
      return -1;
    }
    if (o->model < 0) o->model = MODEL_CNN;
    if (!o->data_dir) {
      cli_error(CMD, "--dataset cifar10 needs --data-dir DIR with data_batch_1..5.bin and test_batch.bin "
                     "(the CIFAR-10 binary version: https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz)");
      return -1;
    }
  }
  if (o->dataset == DATA_IMAGEFOLDER) {
    if (o->model >= 0 && o->model != MODEL_RESNET20 && o->model != MODEL_RESNET18 && o->model != MODEL_RESNET50) {
      cli_error(CMD, "--dataset imagefolder trains a resnet (resnet20, resnet18 or resnet50), not --model %s",
                train_model_names[o->model]);
      return -1;
    }
    if (o->model < 0) o->model = MODEL_RESNET50;
    if (!o->data_dir) {
      cli_error(CMD, "--dataset imagefolder needs --data-dir DIR with DIR/train/<class>/<images> and "
                     "DIR/val/<class>/<images>");
      return -1;
    }
    if (o->image_size == 0) o->image_size = 224;
    if (o->image_size > 4096) {
      cli_error(CMD, "--image-size: %lld is larger than 4096", (long long)o->image_size);
      return -1;
    }
  } else if (o->image_size || o->skip_bad_files) {
    cli_error(CMD, "%s is for --dataset imagefolder", o->image_size ? "--image-size" : "--skip-bad-files");
    return -1;
  }
  if (o->holdout && o->dataset != DATA_FASHION_MNIST && o->dataset != DATA_CIFAR10) {
    cli_error(CMD, "--holdout %lld: a hold-out split is for --dataset fashion-mnist and cifar10, not %s",
              (long long)o->holdout, train_dataset_names[o->dataset]);
    return -1;
  }
  if (o->loader_workers == 0) o->loader_workers = o->dataset == DATA_IMAGEFOLDER ? 4 : 1;
  if (o->check_replicas && o->parallel != PARALLEL_DDP) {
    cli_error(CMD, "--check-replicas compares the replicas of --parallel ddp; an SPMD run has none to compare");
    return -1;
  }
  if (o->shard_update && o->parallel != PARALLEL_DDP) {
    cli_error(CMD, "--shard-update is for --parallel ddp (SPMD's --mesh data=N already shards the update)");
    return -1;
  }
  if (o->replicated_update && o->parallel != PARALLEL_DDP) {
    cli_error(CMD, "--replicated-update is for --parallel ddp (the update of an SPMD run follows its mesh)");
    return -1;
  }
  if (o->replicated_update && o->shard_update) {
    cli_error(CMD, "--shard-update and --replicated-update exclude each other (ddp shards the update by default)");
    return -1;
  }
  if (o->sync_bn && o->parallel != PARALLEL_DDP) {
    cli_error(CMD, "--sync-bn is for --parallel ddp (an SPMD run's batch norm already uses the global batch)");
    return -1;
  }
  if (o->parallel == PARALLEL_DDP && o->mesh) {
    cli_error(CMD, "--parallel ddp runs one replica per process and takes no --mesh (use --parallel spmd)");
    return -1;
  }
  if ((o->save_every || o->keep) && !o->save_dir) {
    cli_error(CMD, "%s needs --save-dir D", o->save_every ? "--save-every" : "--keep");
    return -1;
  }
  if (o->resume && o->init_from) {
    cli_error(CMD, "--resume continues a run (weights, optimizer state, position); --init-from starts a new one "
                   "from weights: give one of them");
    return -1;
  }
  if (o->model < 0) o->model = MODEL_MLP;
  if (train_opts_layout(o) < 0) return -1;
  if (!o->data_dir) o->data_dir = TS_FASHION_MNIST_DIR;
  static const int64_t epochs[] = {5, 3, 2, 2, 2, 1}, batch[] = {128, 64, 128, 32, 8, 16};
  if (o->dataset == DATA_SYNTHETIC && o->model == MODEL_MLP) {
    cli_error(CMD, "--dataset synthetic is for the convolutional models (cnn, resnet20/18/50)");
    return -1;
  }
  if (o->epochs == 0) o->epochs = epochs[o->model];
  if (o->batch == 0) o->batch = batch[o->model];
  /* AdamW's peak per model: ResNet-20's 2e-3 won on a Fashion-MNIST hold-out (2 epochs, bf16,
   * seeds 0-2: README); the others keep 1e-3 (ResNet-18/50 were not swept) */
  static const double adamw_lr[] = {1e-3, 1e-3, 2e-3, 1e-3, 1e-3, 1e-3};
  if (o->lr < 0) o->lr = o->optimizer == 0 ? 0.05 : adamw_lr[o->model];
  if (o->weight_decay < 0) o->weight_decay = o->model == MODEL_GPT ? 0.1 : o->optimizer == 0 ? 0.0 : 0.01;
  return 0;
}

void train_opts_text(const train_opts *o, char *buf, size_t n) {
  snprintf(buf, n,
           "model=%s dataset=%s batch=%lld epochs=%lld steps=%lld optimizer=%s lr=%g schedule=%s warmup=%lld "
           "weight_decay=%g momentum=%g seed=%llu eval_batch=%lld mesh=%s parallel=%s eval_every=%lld "
           "eval_batches=%lld",
           train_model_names[o->model], train_dataset_names[o->dataset], (long long)o->batch, (long long)o->epochs,
           (long long)o->steps, train_optim_names[o->optimizer], o->lr, train_sched_names[o->schedule], (long long)o->warmup,
           o->weight_decay, o->momentum, (unsigned long long)o->seed, (long long)o->eval_batch,
           o->mesh ? o->mesh : "-", train_parallel_names[o->parallel], (long long)o->eval_every,
           (long long)o->eval_batches);
  size_t len = strlen(buf);
  if (o->dataset == DATA_IMAGEFOLDER && len < n) /* the same images on every process */
    snprintf(buf + len, n - len, " image_size=%lld skip_bad_files=%d", (long long)o->image_size, o->skip_bad_files);
  len = strlen(buf); /* appended only when set: texts of older runs stay valid */
  if (o->amp && len < n) snprintf(buf + len, n - len, " amp=%s", train_amp_names[o->amp]);
  len = strlen(buf);
  if (o->sync_bn && len < n) snprintf(buf + len, n - len, " sync_bn=1");
  len = strlen(buf);
  if (o->layout == LAYOUT_NHWC && len < n) snprintf(buf + len, n - len, " layout=nhwc");
  len = strlen(buf);
  if (o->holdout && len < n) snprintf(buf + len, n - len, " holdout=%lld", (long long)o->holdout);
  len = strlen(buf);
  if (o->model == MODEL_GPT && len < n)
    snprintf(buf + len, n - len, " layers=%lld d_model=%lld heads=%lld seq=%lld vocab=%lld%s", (long long)o->layers,
             (long long)o->d_model, (long long)o->heads, (long long)o->seq, (long long)o->vocab,
             o->sequence_parallel ? " sequence_parallel" : "");
}

