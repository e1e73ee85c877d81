/* train_opts.h — the flags of `tessel train`, parsed and checked, with the
 * model-dependent defaults filled in. */
#ifndef TESSEL_TOOLS_TRAIN_OPTS_H
#define TESSEL_TOOLS_TRAIN_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> // FILE

#include "train_fault.h" // train_fault (the --testing-fault hook)

enum { MODEL_MLP, MODEL_CNN, MODEL_RESNET20, MODEL_RESNET18, MODEL_RESNET50, MODEL_GPT };
enum { DATA_FASHION_MNIST, DATA_CIFAR10, DATA_SYNTHETIC, DATA_TEXT, DATA_IMAGEFOLDER };
enum { LOAD_AUTO, LOAD_GLOBAL, LOAD_LOCAL }; /* --load */
enum { PARALLEL_SPMD, PARALLEL_DDP };
/* The flags' valid values, NULL-terminated, indexed by the enums above (optimizer:
 * 0 sgd, 1 adamw; schedule: 0 constant, 1 cosine). */
extern const char *const train_model_names[], *const train_dataset_names[], *const train_optim_names[],
    *const train_sched_names[], *const train_parallel_names[], *const train_load_names[],
    *const train_amp_names[], *const train_layout_names[];
enum { AMP_NONE, AMP_BF16, AMP_F16 };
enum { LAYOUT_NCHW, LAYOUT_NHWC }; /* --layout; the values of ts_layout */

typedef struct {
  int model;           /* -1 until chosen: mlp for fashion-mnist, cnn for cifar10 */
  int dataset;
  int c, h, w;         /* image shape, from the dataset */
  int classes;         /* from the dataset */
  const char *data_dir;
  int64_t epochs;      /* 0 = model default */
  int64_t batch;       /* 0 = model default */
  int64_t steps;       /* 0 = no limit */
  int64_t eval_batch;
  int64_t holdout;     /* --holdout N: the training set's last N samples validate, untrained [0 = none] */
  int64_t warmup;      /* -1 = default */
  int64_t threads;     /* 0 = TESSEL_NUM_THREADS or all cores */
  int optimizer;       /* index into train_optim_names */
  int schedule;        /* index into train_sched_names */
  double lr, weight_decay, momentum;
  uint64_t seed;
  const char *log_json;
  const char *metrics;  /* --metrics FILE: JSON at the end, short report on stdout */
  const char *trace;    /* --trace FILE: Chrome trace of the run */
  const char *mesh;     /* --mesh "data=4,model=2": SPMD on virtual devices; NULL = one device */
  bool auto_shard;      /* --auto-shard: the solver chooses the shardings on --mesh (any axis names) */
  double memory_limit;  /* --memory-limit BYTES per device for --auto-shard; 0 = none */
  int parallel;         /* index into train_parallel_names */
  bool all_ranks;       /* every process prints, not only rank 0 */
  double timeout_s;     /* --collective-timeout; 0 = the default */
  int64_t check_replicas; /* DDP: compare the replicas' parameters every N steps; 0 = never */
  train_fault fault;    /* --testing-fault (test builds); none by default */
  const char *save_dir; /* --save-dir D: checkpoints D/step-NNNNNNNN, D/latest */
  int64_t save_every;   /* --save-every N: a checkpoint every N steps (and at the end); 0 = at the end only */
  int64_t keep;         /* --keep K: the newest K checkpoints stay; 0 = all */
  const char *resume;   /* --resume D or D/step-NNNNNNNN: continue that run exactly */
  const char *init_from; /* --init-from F: model weights from a .safetensors file (or a checkpoint) */
  /* Token data (--model gpt): --seq and --vocab are parsed with the model's
   * flags (0 until set); the data flags below are parsed with the others. */
  int64_t seq, vocab;   /* tokens per sample; vocabulary (256 for bytes) */
  int64_t layers, d_model, heads; /* the GPT [6, 256, 4] */
  int64_t sample;        /* --sample N: generate N bytes after training [0] */
  const char *prompt;    /* --prompt TEXT: what the sample continues [a newline] */
  double temperature;    /* [0.8] */
  int64_t top_k;         /* 0 = all [200] */
  const char *data_file; /* --data-file F: the --dataset text corpus [TS_KJV_TEXT] */
  int64_t eval_every;   /* --eval-every N: validation loss every N steps (and at the end) [100] */
  int64_t eval_batches; /* --eval-batches N: validation batches of --batch windows [20] */
  int64_t log_every;    /* --log-every N: the loss read back and logged every N steps; 0 = every step */
  bool profile;         /* --profile: per-step breakdown (compute, communication, host, idle) at the end */
  bool bind;            /* --bind: device threads pinned to cores (ts_client_options.bind_cores) */
  int64_t image_size;   /* --image-size: imagefolder's (3, S, S) [224] */
  int64_t loader_workers; /* --loader-workers: decode/augment threads; 0 = the default */
  bool skip_bad_files;  /* --skip-bad-files: imagefolder files that do not decode are counted and skipped */
  int load;             /* --load: LOAD_* (auto: per-host when data parallel over processes) */
  int amp;              /* --amp none|bf16|f16: index into train_amp_names */
  int layout;           /* --layout nchw|nhwc: LAYOUT_* (the resnets' activations) [resnets nhwc, others nchw] */
  bool sync_bn;         /* --sync-bn: DDP batch norm over the global batch */
  bool shard_update;    /* --shard-update: DDP's weight update sharded over the replicas (the default) */
  bool replicated_update; /* --replicated-update / --no-shard-update: DDP's every replica updates everything */
  bool sequence_parallel; /* --sequence-parallel: the GPT's norms and residuals split on the sequence over "model" */
} train_opts;

/* The run trains on tokens (x, y (B, T) i32), not images. */
static inline bool train_opts_tokens(const train_opts *o) { return o->model == MODEL_GPT || o->dataset == DATA_TEXT; }

/* Parses argv (argv[0] is "train") into *o and fills in the defaults; returns
 * 0, 1 for --help, or -1 after printing an error (a usage error). */
int train_opts_parse(int argc, char **argv, train_opts *o);
void cli_train_usage(FILE *f);
/* What every process must agree on (paths and printing may differ). */
void train_opts_text(const train_opts *o, char *buf, size_t n);

#endif
