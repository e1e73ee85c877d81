/* train_setup.c — `tessel train` before the first step: joining the job
 * (client, rank, who prints), the data and the step counts, and compiling the
 * training, evaluation and tail programs. */
#include <errno.h>
#include <math.h> // NAN
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h> // stat: is the dataset missing or damaged?

#include "args.h"            // cli_error, exit codes
#include "devfile.h"         // --auto-shard: the solver's costs (calibration cache)
#include "tessel/imagefolder.h" // TS_IMAGENET_MEAN
#include "tessel/metrics.h"  // ts_trace_start
#include "train_mesh.h"      // --mesh: shardings of the programs
#include "train_run.h"
#include "train_text.h"      // train_text_load: token data
#include "util/prng.h"   // ts_splitmix64: synthetic images
#include "util/config.h"     // TESSEL_NUM_THREADS: a capped count is reported

/* Fashion-MNIST pixel statistics (of pixel/255 over the training set). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

int train_join(train_run *r) {
  train_opts *o = &r->o;
  if (o->mesh && (!(r->mesh = ts_mesh_from_text(o->mesh)) ||
                  train_mesh_check_axes(CMD, r->mesh, o->model == MODEL_MLP || o->model == MODEL_GPT, o->auto_shard) < 0)) {
    cli_error(CMD, "--mesh: %s", ts_last_error());
    ts_mesh_free(r->mesh);
    r->mesh = NULL;
    return CLI_EXIT_USAGE;
  }
  /* The client first: under mpirun it joins the job (and says which rank
   * this process is, which decides who prints and writes files). */
  r->ddp = o->parallel == PARALLEL_DDP;
  ts_client_options copts = {.num_threads = (int)o->threads,
                             .num_devices = r->ddp ? 1 : 0,
                             .total_devices = !r->ddp && r->mesh ? (int)ts_mesh_num_devices(r->mesh) : 0,
                             .collective_timeout_ms = o->timeout_s > 0 ? (int)(o->timeout_s * 1000 + 0.5) : 0,
                             .bind_cores = o->bind};
  if (!(r->client = ts_client_new(&copts))) {
    cli_error(CMD, "%s", ts_last_error());
    ts_mesh_free(r->mesh);
    r->mesh = NULL;
    return CLI_EXIT_FAIL;
  }
  r->nproc = ts_client_process_count(r->client), r->rank = ts_client_process_index(r->client);
  if (r->nproc > 1) {
    cli_set_rank(r->rank);
    if (r->rank != 0 && !o->all_ranks && !freopen("/dev/null", "w", stdout)) {
      cli_error(CMD, "cannot silence stdout: %s", strerror(errno));
      ts_client_abort(r->client, CLI_EXIT_FAIL);
    }
  }
  if (!r->ddp && !r->mesh && ts_client_num_devices(r->client) > 1) { /* under mpirun: data parallel by default */
    snprintf(r->mesh_text, sizeof r->mesh_text, "data=%d", ts_client_num_devices(r->client));
    o->mesh = r->mesh_text;
    if (!(r->mesh = ts_mesh_from_text(r->mesh_text))) {
      cli_error(CMD, "%s", ts_last_error());
      ts_client_free(r->client);
      r->client = NULL;
      return CLI_EXIT_FAIL;
    }
  }
  if (r->mesh && !o->auto_shard && r->rank == 0) train_mesh_check_batch(CMD, r->mesh, o->batch);
  /* every output path checked before the data is read; nothing is written yet */
  int rc = train_outputs_check(r);
  if (rc != CLI_EXIT_OK) {
    ts_mesh_free(r->mesh);
    r->mesh = NULL;
    if (r->nproc > 1) ts_client_abort(r->client, rc);
    ts_client_free(r->client);
    r->client = NULL;
    return rc;
  }
  return CLI_EXIT_OK;
}

/* The dataset is absent (not merely damaged): the directory, or the first
 * file the loader reads, does not exist. */
static bool data_missing(int dataset, const char *dir) {
  char a[4096], b[4200];
  struct stat st;
  if (stat(dir, &st) != 0) return errno == ENOENT;
  if (dataset == DATA_CIFAR10) {
    snprintf(a, sizeof a, "%s/data_batch_1.bin", dir);
    snprintf(b, sizeof b, "%s/cifar-10-batches-bin/data_batch_1.bin", dir);
  } else {
    snprintf(a, sizeof a, "%s/train-images-idx3-ubyte", dir);
    snprintf(b, sizeof b, "%s.gz", a);
  }
  return stat(a, &st) != 0 && errno == ENOENT && stat(b, &st) != 0 && errno == ENOENT;
}

/* How to get the dataset, when it is missing (a damaged one gets no hint:
 * installing the package would not repair it). */
static void data_hint(int dataset, const char *dir) {
  if (!data_missing(dataset, dir)) return;
  if (dataset == DATA_CIFAR10)
    fprintf(stderr,
            "hint: no CIFAR-10 in '%s': download the binary version "
            "(https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz), extract it and pass --data-dir\n", dir);
  else
    fprintf(stderr,
            "hint: no Fashion-MNIST in '%s': install the Debian package dataset-fashion-mnist "
            "(scripts/install-deps.sh) or pass --data-dir\n", dir);
}

/* Random images and labels of the model's natural input (3x32x32 and 10
 * classes; 3x224x224 and 1000 for resnet50), seeded: for benchmarks. */
static int synthetic(const train_opts *o, int64_t n, uint64_t seed, ts_dataset *d) {
  bool big = o->model == MODEL_RESNET50;
  *d = (ts_dataset){.n = n, .c = 3, .h = big ? 224 : 32, .w = big ? 224 : 32, .num_classes = big ? 1000 : 10};
  size_t bytes = (size_t)n * 3 * (size_t)d->h * (size_t)d->w;
  d->images = malloc(bytes);
  d->labels = malloc((size_t)n * sizeof *d->labels);
  if (!d->images || !d->labels) {
    ts_dataset_free(d);
    cli_error(CMD, "--dataset synthetic: out of memory for %lld images (%zu bytes)", (long long)n, bytes);
    return -1;
  }
  uint64_t s = seed;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t z = ts_splitmix64(&s);
    memcpy(d->images + i, &z, bytes - i < 8 ? bytes - i : 8);
  }
  for (int64_t i = 0; i < n; i++) d->labels[i] = (int32_t)((uint64_t)(i * 2654435761u + seed) % (uint64_t)d->num_classes);
  return 0;
}

/* The datasets of this run into r->train / r->test: 0 or an exit code. */
static int load_data(train_run *r) {
  train_opts *o = &r->o;
  int rc = 0;
  if (o->dataset == DATA_SYNTHETIC) {
    bool big = o->model == MODEL_RESNET50;
    /* a small test set: the labels are random, so accuracy means nothing here */
    if (synthetic(o, big ? 2048 : 50000, 1, &r->train) < 0 || synthetic(o, big ? 32 : 256, 2, &r->test) < 0)
      return CLI_EXIT_FAIL;
    return 0;
  }
  if (o->dataset == DATA_IMAGEFOLDER) return train_images_open(r); /* files decoded as the loader goes */
  bool cifar = o->dataset == DATA_CIFAR10;
  if (cifar) rc = ts_cifar10_load(o->data_dir, "train", &r->train) < 0 || ts_cifar10_load(o->data_dir, "test", &r->test) < 0;
  else rc = ts_mnist_load(o->data_dir, "train", &r->train) < 0 || ts_mnist_load(o->data_dir, "t10k", &r->test) < 0;
  if (rc) {
    cli_error(CMD, "%s", ts_last_error());
    data_hint(o->dataset, o->data_dir);
    return CLI_EXIT_FAIL;
  }
  return 0;
}

/* --holdout N: the training set's last N samples become r->val (a view into
 * the same arrays) and are not trained on; 0 or a usage exit code. */
static int holdout_split(train_run *r) {
  const train_opts *o = &r->o;
  ts_dataset *t = &r->train;
  if (o->holdout > t->n - o->batch) {
    cli_error(CMD, "--holdout %lld: the training set in '%s' has %lld samples; holding out more than %lld leaves "
                   "less than one --batch of %lld to train on", (long long)o->holdout, o->data_dir, (long long)t->n,
              (long long)(t->n - o->batch > 0 ? t->n - o->batch : 0), (long long)o->batch);
    return CLI_EXIT_USAGE;
  }
  int64_t keep = t->n - o->holdout, sample = (int64_t)t->c * t->h * t->w;
  r->val = (ts_dataset){.n = o->holdout, .c = t->c, .h = t->h, .w = t->w, .num_classes = t->num_classes,
                        .images = t->images + keep * sample, .labels = t->labels + keep};
  t->n = keep;
  return 0;
}

int train_load(train_run *r) {
  train_opts *o = &r->o;
  if (train_opts_tokens(o)) return train_text_load(r); /* --model gpt: train_text.c */
  bool cifar = o->dataset == DATA_CIFAR10, synth = o->dataset == DATA_SYNTHETIC, folder = o->dataset == DATA_IMAGEFOLDER;
  int lrc = load_data(r);
  if (lrc) return lrc;
  const ts_dataset *train = &r->train, *test = &r->test;
  int want_c = cifar || synth || folder ? 3 : 1, want_hw = synth ? train->h : folder ? (int)o->image_size : cifar ? 32 : 28;
  for (int k = 0; k < 2; k++) { /* each set's own shape in the message */
    const ts_dataset *d = k ? test : train;
    if (d->c != want_c || d->h != want_hw || d->w != want_hw) {
      cli_error(CMD, "the %s set in '%s' has %dx%dx%d images; %s expects %dx%dx%d", k ? "test" : "training",
                o->data_dir, d->c, d->h, d->w, train_dataset_names[o->dataset], want_c, want_hw, want_hw);
      return CLI_EXIT_FAIL;
    }
  }
  if (o->holdout && (lrc = holdout_split(r)) != 0) return lrc;
  o->c = train->c, o->h = train->h, o->w = train->w, o->classes = train->num_classes ? train->num_classes : 10;
  r->eval_b = o->eval_batch < test->n ? o->eval_batch : test->n;
  /* Normalization by the training set's channel statistics; CIFAR-10 also
   * gets the standard augmentation (random crop with 4-pixel padding, flip). */
  r->norm = (ts_augment){.mean = {FMNIST_MEAN}, .std = {FMNIST_STD}};
  if (cifar) r->norm = (ts_augment){.mean = TS_CIFAR10_MEAN, .std = TS_CIFAR10_STD};
  if (synth) r->norm = (ts_augment){.mean = {0.5f, 0.5f, 0.5f}, .std = {0.29f, 0.29f, 0.29f}}; /* uniform bytes */
  if (folder) r->norm = (ts_augment){.mean = TS_IMAGENET_MEAN, .std = TS_IMAGENET_STD};
  r->train_aug = r->norm;
  if (cifar) r->train_aug.crop_pad = 4, r->train_aug.hflip = true;
  if (folder) r->train_aug.hflip = true; /* after the random resized crop the source made */
  return train_load_steps(r, train->n);
}

int train_load_steps(train_run *r, int64_t n_train) {
  train_opts *o = &r->o;
  r->steps_per_epoch = n_train / o->batch; // the last partial batch is dropped
  if (r->steps_per_epoch == 0) {
    cli_error(CMD, "--batch: %lld is larger than the training set (%lld samples)", (long long)o->batch,
              (long long)n_train);
    return CLI_EXIT_USAGE;
  }
  r->total_steps = r->steps_per_epoch * o->epochs;
  if (o->steps > 0 && o->steps < r->total_steps) r->total_steps = o->steps;
  if (o->warmup > r->total_steps) {
    cli_error(CMD, "--warmup: %lld steps is longer than the run (%lld steps): the learning rate would never "
                   "reach --lr; use at most %lld", (long long)o->warmup, (long long)r->total_steps,
              (long long)r->total_steps);
    return CLI_EXIT_USAGE;
  }
  bool gpt = o->model == MODEL_GPT; /* nanoGPT's schedule: 100 warm-up steps, cosine to 0.1x */
  int64_t warm = r->total_steps / 10 < 100 ? r->total_steps / 10 : 100; /* short runs: 10% */
  if (gpt && r->total_steps >= 200) warm = 100;
  r->warmup = o->warmup >= 0 ? o->warmup : warm;
  r->sched = (ts_lr_schedule){.kind = o->schedule == 0 ? TS_LR_CONSTANT : TS_LR_COSINE, .base_lr = o->lr,
                              .warmup_steps = r->warmup, .total_steps = r->total_steps,
                              .min_lr = gpt ? 0.1 * o->lr : 0.0};
  r->val_loss = NAN;
  if (r->ddp && o->batch % r->nproc) {
    cli_error(CMD, "--parallel ddp: the global batch %lld does not divide over %d processes", (long long)o->batch,
              r->nproc);
    return CLI_EXIT_USAGE;
  }
  char cfg[1024];
  train_opts_text(o, cfg, sizeof cfg); /* every process must train the same thing */
  if (ts_client_check_same(r->client, "the configuration", cfg) < 0) return train_lib_error();
  return CLI_EXIT_OK;
}

/* The shared model builders (model_graph.h) for this run's options. */
static model_graph_spec graph_spec(const train_opts *o) {
  if (o->model == MODEL_GPT) /* nanoGPT's recipe: AdamW (0.9, 0.95), decay on matrices, clipping at 1 */
    return (model_graph_spec){
        .model = MODEL_GRAPH_GPT, .batch = o->batch,
        .gpt = {.layers = o->layers, .d_model = o->d_model, .heads = o->heads, .seq = o->seq, .vocab = o->vocab},
        .optim = {.kind = TS_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = o->weight_decay,
                  .clip_norm = 1.0, .decay_matrices_only = true},
        .amp = o->amp == AMP_BF16 ? TS_BF16 : o->amp == AMP_F16 ? TS_F16 : TS_F32};
  return (model_graph_spec){
      .model = o->model == MODEL_MLP ? MODEL_GRAPH_MLP
             : o->model == MODEL_CNN ? MODEL_GRAPH_CNN
             : o->model == MODEL_RESNET20 ? MODEL_GRAPH_RESNET20
             : o->model == MODEL_RESNET18 ? MODEL_GRAPH_RESNET18 : MODEL_GRAPH_RESNET50,
      .batch = o->batch, .c = o->c, .h = o->h, .w = o->w, .classes = o->classes,
      .optim = {.kind = o->optimizer == 0 ? TS_OPTIM_SGD : TS_OPTIM_ADAMW,
                .momentum = o->momentum, .weight_decay = o->weight_decay},
      .amp = o->amp == AMP_BF16 ? TS_BF16 : o->amp == AMP_F16 ? TS_F16 : TS_F32,
      .sync_bn = o->sync_bn, .layout = o->layout == LAYOUT_NHWC ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW};
}

/* Marks g's shardings on the mesh (if any) and compiles it into *pr; g (NULL
 * when building it failed) is freed on success, else by train.c. */
static int compile_graph(train_run *r, ts_graph *g, program *pr, const ts_compile_options *co) {
  bool megatron = r->o.model == MODEL_MLP || r->o.model == MODEL_GPT;
  r->g = g;
  ts_compile_options opts = *co;
  ts_auto_shard_options costs = {.mesh = r->mesh};
  if (r->mesh && r->o.auto_shard) { /* --auto-shard: the solver marks it inside ts_compile */
    opts.auto_shard = true, opts.auto_shard_memory_limit = r->o.memory_limit, opts.mesh = r->mesh;
    /* with the costs tessel inspect / plan use: the calibration cache when it is this machine's */
    device_desc dd;
    char note[1400];
    device_auto(&dd, note, sizeof note);
    device_options(&dd, r->mesh, &costs, NULL);
    opts.auto_shard_costs = &costs;
    if (pr == &r->step_pr) printf("auto-shard: the solver's costs: %s\n", note);
  }
  if (!g || (r->mesh && !r->o.auto_shard && train_mesh_mark(g, r->mesh, megatron) < 0) ||
      program_init(pr, r->client, r->params, g, &opts) < 0)
    return -1;
  ts_graph_free(g);
  r->g = NULL;
  return 0;
}

int train_compile(train_run *r) {
  const train_opts *o = &r->o;
  if (!(r->params = ts_params_new(o->seed))) return train_lib_error();
  if (o->trace) ts_trace_start(); /* before compiling: the trace shows the compile too */
  double t0 = train_now_s();
  r->gs = graph_spec(o);
  if (o->model == MODEL_GPT) { /* tensor (and sequence) parallelism on the mesh's "model" axis */
    r->gs.gpt.mesh = r->mesh;
    r->gs.gpt.sequence_parallel = o->sequence_parallel;
  }
  /* DDP: each process's replica trains on its rows of the global batch and
   * evaluates alone (the replicas are identical) */
  ts_compile_options co = {.replicas = r->ddp, .shard_update = r->ddp && !o->replicated_update};
  co.autocast = r->gs.amp; /* --amp: the autocast pass, for training and evaluation */
  if (r->ddp) r->gs.ddp = true, r->gs.batch = o->batch / r->nproc;
  ts_graph *step = model_train_graph(&r->gs, r->params);
  if (step) r->program_hash = ts_graph_hash(step); /* before the mesh marks it: any mesh alike */
  if (step && r->mesh) { /* before compiling for every device: will they fit? */
    double need = 0;
    int states = o->optimizer == 1 ? 2 : o->momentum > 0 ? 1 : 0;
    if (train_mesh_check_memory(r->mesh, ts_client_num_local_devices(r->client), ts_params_trainable_numel(r->params),
                                states, o->model == MODEL_MLP || o->model == MODEL_GPT, &need) < 0) {
      r->g = step; /* freed by train.c */
      cli_error(CMD, "--mesh %s: %s", o->mesh, ts_last_error());
      return CLI_EXIT_FAIL;
    }
    if (need > 1024.0 * 1024 * 1024) {
      printf("SPMD: compiling for %d devices in this process (at least %.1f GiB)...\n",
             ts_client_num_local_devices(r->client), need / (1024.0 * 1024 * 1024));
      fflush(stdout);
    }
  }
  if (compile_graph(r, step, &r->step_pr, &co) < 0) return train_lib_error();
  r->gs.ddp = false;
  if (o->model == MODEL_GPT) r->eval_b = o->batch; /* validation batches are --batch windows, no tail */
  if (compile_graph(r, model_eval_graph(&r->gs, r->eval_b, r->params), &r->eval_pr, &co) < 0)
    return train_lib_error();
  if (o->model != MODEL_GPT && r->test.n % r->eval_b && !r->test_src && /* imagefolder: the last batch is padded */
      compile_graph(r, model_eval_graph(&r->gs, r->test.n % r->eval_b, r->params), &r->tail_pr, &co) < 0)
    return train_lib_error();
  /* more threads asked (--threads or TESSEL_NUM_THREADS) than cores: capped, and said so */
  int asked = o->threads ? (int)o->threads : env_config()->num_threads;
  char capped[64] = "";
  if (asked > ts_client_num_threads(r->client))
    snprintf(capped, sizeof capped, " (%d asked, capped to the cores)", asked);
  char held[48] = ""; /* --holdout */
  if (r->val.n) snprintf(held, sizeof held, ", %lld held out", (long long)r->val.n);
  if (o->model == MODEL_GPT)
    printf("tessel train: gpt (%lld layers, d_model %lld, %lld heads, seq %lld, vocab %lld) on %s (%lld training "
           "windows), %lld params, adamw lr %g (cosine to %g, warm-up %lld) weight decay %g, clip 1, batch %lld, "
           "%lld steps, %d threads%s; compiled in %.2fs\n",
           (long long)o->layers, (long long)o->d_model, (long long)o->heads, (long long)o->seq, (long long)o->vocab,
           o->dataset == DATA_TEXT ? o->data_file : "synthetic tokens", (long long)r->train_src->n,
           (long long)ts_params_trainable_numel(r->params), o->lr, 0.1 * o->lr, (long long)r->warmup,
           o->weight_decay, (long long)o->batch, (long long)r->total_steps, ts_client_num_threads(r->client), capped,
           train_now_s() - t0);
  else
    printf("tessel train: %s on %s (%lld train%s, %lld test), %lld params, %s lr %g (%s, warm-up %lld) weight decay %g, "
           "batch %lld, %lld epochs x %lld steps, %d threads%s; compiled in %.2fs\n",
           train_model_names[o->model], train_dataset_names[o->dataset], (long long)r->train.n, held, (long long)r->test.n,
           (long long)ts_params_trainable_numel(r->params), train_optim_names[o->optimizer], o->lr,
           train_sched_names[o->schedule], (long long)r->warmup, o->weight_decay, (long long)o->batch,
           (long long)o->epochs, (long long)r->steps_per_epoch, ts_client_num_threads(r->client), capped,
           train_now_s() - t0);
  if (r->mesh) /* say what SPMD does: the mesh and the collectives the partitioner inserted */
    printf("SPMD: mesh %s on %d virtual CPU devices in %d process%s; %d collectives per training step "
           "(tessel inspect shows them)\n",
           o->mesh, ts_client_num_devices(r->client), r->nproc, r->nproc > 1 ? "es" : "",
           ts_executable_num_collectives(r->step_pr.exe));
  if (o->bind) train_print_binding(r->client); /* train_profile.c */
  if (o->amp)
    printf("AMP: %s autocast: convolutions and matmuls in %s%s, f32 weights, norms, softmax and loss%s\n",
           train_amp_names[o->amp], train_amp_names[o->amp],
           o->amp == AMP_F16 ? " (stored as f16, computed in f32: no f16 arithmetic on this CPU)" : "",
           o->amp == AMP_F16 ? "; dynamic loss scaler (init 65536, x2 every 2000 clean steps, x0.5 on inf/NaN)" : "");
  if (o->layout == LAYOUT_NHWC)
    printf("layout: nhwc (channels last) activations; parameters OIHW as with nchw\n");
  if (r->ddp)
    printf("DDP: %d replicas (one per process), batch %lld each; gradients averaged in %d buckets\n", r->nproc,
           (long long)r->gs.batch, ts_executable_num_collectives(r->step_pr.exe) - 1);
  fflush(stdout);
  return CLI_EXIT_OK;
}
