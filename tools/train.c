/* train.c — `tessel train`: trains the MLP or the MNIST CNN on Fashion-MNIST.
 *
 * One training step (forward, loss, gradients, optimizer update) is one graph,
 * compiled once; parameters and optimizer state are aliased outputs, so every
 * execute updates them in place. Evaluation is a second graph (training off,
 * batch --eval-batch, plus one program for the last partial batch) bound to the
 * same parameter buffers; the argmax of its logits is taken on the host.
 * Training batches come from the prefetching loader (tessel/loader.h: worker
 * threads decode and augment the next batch while a step runs); an epoch
 * shows a progress bar on a terminal, periodic lines otherwise. */
#include "train.h"

#include <errno.h>
#include <signal.h> /* TESSEL_TEST_FAULT */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> // clock_gettime

#include "args.h"
#include "model_graph.h" /* the training and evaluation graphs */
#include "train_mesh.h" /* --mesh: shardings of the programs */
#include "tessel/loader.h" // CIFAR-10, the prefetching loader, progress
#include "tessel/tessel.h"
#include "tessel/metrics.h" /* --metrics, --trace */

#define CMD "train"

/* Fashion-MNIST pixel statistics (of pixel/255 over the training set). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

enum { MODEL_MLP, MODEL_CNN };
static const char *const model_names[] = {"mlp", "cnn", NULL};
enum { DATA_FASHION_MNIST, DATA_CIFAR10 };
static const char *const dataset_names[] = {"fashion-mnist", "cifar10", NULL};
static const char *const optim_names[] = {"sgd", "adamw", NULL};
static const char *const sched_names[] = {"constant", "cosine", NULL};
enum { PARALLEL_SPMD, PARALLEL_DDP };
static const char *const parallel_names[] = {"spmd", "ddp", NULL};

typedef struct {
  int model;           /* -1 until chosen: mlp for fashion-mnist, cnn for cifar10 */
  int dataset;
  int c, h, w;         /* image shape, from the dataset */
  const char *data_dir;
  int64_t epochs;      /* 0 = model default */
  int64_t batch;       /* 0 = model default */
  int64_t steps;       /* 0 = no limit */
  int64_t eval_batch;
  int64_t warmup;      /* -1 = default */
  int64_t threads;     /* 0 = TESSEL_NUM_THREADS or all cores */
  int optimizer;       /* index into optim_names */
  int schedule;        /* index into sched_names */
  double lr, weight_decay, momentum;
  uint64_t seed;
  const char *log_json;
  const char *metrics;  /* --metrics FILE: JSON at the end, short report on stdout */
  const char *trace;    /* --trace FILE: Chrome trace of the run */
  const char *mesh;     /* --mesh "data=4,model=2": SPMD on virtual devices; NULL = one device */
  int parallel;         /* index into parallel_names */
  bool all_ranks;       /* every process prints, not only rank 0 */
  double timeout_s;     /* --collective-timeout; 0 = the default */
  int64_t check_replicas; /* DDP: compare the replicas' parameters every N steps; 0 = never */
} train_opts;

void cli_train_usage(FILE *f) {
  fprintf(f,
          "usage: tessel train [flags]\n"
          "\n"
          "Trains a classifier on Fashion-MNIST or CIFAR-10 and reports the test accuracy after each\n"
          "epoch.\n"
          "\n"
          "flags (defaults in brackets):\n"
          "  --model mlp|cnn            784-512-512-10 MLP or the PyTorch MNIST CNN; on cifar10 cnn\n"
          "                             is a 3-conv CIFAR CNN (the only model there) [mlp; cifar10: cnn]\n"
          "  --dataset fashion-mnist|cifar10  [fashion-mnist]\n"
          "  --data-dir DIR             fashion-mnist: IDX files (train-*, t10k-*)\n"
          "                             [" TS_FASHION_MNIST_DIR "];\n"
          "                             cifar10: data_batch_1..5.bin, test_batch.bin (required)\n"
          "  --epochs N                 passes over the training set [mlp 5, cnn 3]\n"
          "  --batch B                  training batch size [mlp 128, cnn 64]\n"
          "  --optimizer sgd|adamw      [adamw]\n"
          "  --lr X                     peak learning rate [adamw 1e-3, sgd 0.05]\n"
          "  --lr-schedule constant|cosine  cosine decays to 0 at the last step [cosine]\n"
          "  --warmup N                 linear warm-up steps [100, at most 10%% of the run]\n"
          "  --weight-decay X           AdamW: decoupled; SGD: L2 [adamw 0.01, sgd 0]\n"
          "  --momentum X               SGD momentum [0.9]\n"
          "  --seed S                   initialization, shuffling and dropout [0]\n"
          "  --threads N                compute threads [$TESSEL_NUM_THREADS or all cores]\n"
          "  --steps N                  stop after N steps in total (for tests) [no limit]\n"
          "  --eval-batch N             evaluation batch size [1000]\n"
          "  --mesh AXIS=N,...          SPMD over virtual CPU devices (e.g. data=4,model=2): the batch\n"
          "                             on axis 'data', the MLP's fc1/fc2 Megatron-split on 'model',\n"
          "                             weights and optimizer state sharded on 'fsdp' (FSDP);\n"
          "                             under mpirun the devices are shared out over the processes\n"
          "                             [one device; under mpirun: data=<processes>]\n"
          "  --parallel spmd|ddp        spmd: the sharded program of --mesh; ddp: classic data\n"
          "                             parallel, one full replica per process, gradients averaged\n"
          "                             in buckets overlapped with the backward pass [spmd]\n"
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
          "  -h, --help                 this text\n"
          "\n"
          "With the defaults, 'tessel train --model mlp --epochs 5' reaches about 88%% test\n"
          "accuracy and 'tessel train --model cnn --epochs 3' about 91%%.\n");
}

/* Parses argv into *o; returns -1 after printing an error, 1 for --help. */
static int parse_args(int argc, char **argv, train_opts *o) {
  *o = (train_opts){.model = -1, .data_dir = NULL, .eval_batch = 1000,
                    .warmup = -1, .optimizer = 1, .schedule = 1, .lr = -1,
                    .weight_decay = -1, .momentum = 0.9};
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
    CHOICE_FLAG("--model", "model", model_names, o->model)
    CHOICE_FLAG("--dataset", "dataset", dataset_names, o->dataset)
    CHOICE_FLAG("--optimizer", "optimizer", optim_names, o->optimizer)
    CHOICE_FLAG("--lr-schedule", "schedule", sched_names, o->schedule)
    INT_FLAG("--epochs", 1, "a positive integer", o->epochs)
    INT_FLAG("--batch", 1, "a positive integer", o->batch)
    INT_FLAG("--steps", 1, "a positive integer", o->steps)
    INT_FLAG("--eval-batch", 1, "a positive integer", o->eval_batch)
    INT_FLAG("--warmup", 0, "a non-negative integer", o->warmup)
    INT_FLAG("--threads", 1, "a positive integer", o->threads)
    INT_FLAG("--check-replicas", 1, "a positive integer", o->check_replicas)
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
    CHOICE_FLAG("--parallel", "mode", parallel_names, o->parallel)
    DOUBLE_FLAG("--collective-timeout", 0.001, 86400, "seconds in (0, 86400]", o->timeout_s)
    if (strcmp(argv[i], "--all-ranks") == 0) {
      o->all_ranks = true;
      continue;
    }
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
  if (o->dataset == DATA_CIFAR10) {
    if (o->model == MODEL_MLP) {
      cli_error(CMD, "--model mlp takes 1x28x28 images; use --model cnn with --dataset cifar10");
      return -1;
    }
    o->model = MODEL_CNN;
    if (!o->data_dir) {
      cli_error(CMD, "--dataset cifar10 needs --data-dir DIR with data_batch_1..5.bin and test_batch.bin "
                     "(the CIFAR-10 binary version: https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz)");
      return -1;
    }
  }
  if (o->parallel == PARALLEL_DDP && o->mesh) {
    cli_error(CMD, "--parallel ddp runs one replica per process and takes no --mesh (use --parallel spmd)");
    return -1;
  }
  if (o->model < 0) o->model = MODEL_MLP;
  if (!o->data_dir) o->data_dir = TS_FASHION_MNIST_DIR;
  if (o->epochs == 0) o->epochs = o->model == MODEL_MLP ? 5 : 3;
  if (o->batch == 0) o->batch = o->model == MODEL_MLP ? 128 : 64;
  if (o->lr < 0) o->lr = o->optimizer == 0 ? 0.05 : 1e-3;
  if (o->weight_decay < 0) o->weight_decay = o->optimizer == 0 ? 0.0 : 0.01;
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "1h02m", "3m05s", "12.3s" */
static const char *fmt_duration(double s, char *buf, size_t n) {
  if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else snprintf(buf, n, "%.1fs", s);
  return buf;
}

/* ---- a compiled program with its inputs bound by name ---- */

typedef struct {
  ts_executable *exe;
  model_io io;          /* inputs bound by name (model_graph.h) */
  int n_out;
  ts_buffer **out;      /* (n_out) slots for ts_execute */
} program;

static void program_free(program *pr) {
  if (pr->exe) ts_executable_free(pr->exe);
  model_io_free(&pr->io);
  free(pr->out);
  memset(pr, 0, sizeof *pr);
}

/* Compiles g and binds its inputs (model_io_bind). */
static int program_init(program *pr, ts_client *c, ts_params *p, const ts_graph *g, const ts_compile_options *co) {
  memset(pr, 0, sizeof *pr);
  if (ts_graph_verify(g) < 0) return -1;
  pr->exe = ts_compile(c, g, co);
  if (!pr->exe) return -1;
  pr->n_out = ts_graph_num_outputs(g);
  if (!(pr->out = calloc((size_t)pr->n_out, sizeof *pr->out))) {
    fprintf(stderr, "out of memory\n");
    return -1;
  }
  return model_io_bind(&pr->io, g, p, c);
}

/* Executes once. Output 0 goes to pr->io.result; the other outputs are aliased to
 * parameters (updated in place) — any that is not gets freed. */
static int program_run(program *pr) {
  pr->out[0] = pr->io.result;
  for (int k = 1; k < pr->n_out; k++) pr->out[k] = NULL;
  if (ts_execute(pr->exe, pr->io.in, pr->out) < 0) return -1;
  for (int k = 1; k < pr->n_out; k++) {
    bool aliased = false;
    for (int i = 0; i < pr->io.n_in && !aliased; i++) aliased = pr->out[k] == pr->io.in[i];
    if (!aliased) ts_buffer_free(pr->out[k]);
  }
  return 0;
}

/* The shared model builders (model_graph.h) for this run's options. */
static model_graph_spec graph_spec(const train_opts *o) {
  return (model_graph_spec){
      .model = o->model == MODEL_MLP ? MODEL_GRAPH_MLP : MODEL_GRAPH_CNN,
      .batch = o->batch, .c = o->c, .h = o->h, .w = o->w,
      .optim = {.kind = o->optimizer == 0 ? TS_OPTIM_SGD : TS_OPTIM_ADAMW,
                .momentum = o->momentum, .weight_decay = o->weight_decay}};
}

/* Test accuracy in [0, 1]; full batches with `full`, the rest with `tail`;
 * pixels normalized by `norm` (no crop or flip). */
static int evaluate(program *full, program *tail, const ts_dataset *test, int64_t e, const ts_augment *norm,
                    double *acc) {
  const int64_t sample = (int64_t)test->c * test->h * test->w;
  float *x = malloc((size_t)(e * sample) * sizeof *x);   // (E, C, H, W)
  int32_t *y = malloc((size_t)e * sizeof *y);           // (E)
  float *logits = malloc((size_t)e * 10 * sizeof *logits); // (E, 10)
  int64_t correct = 0;
  int rc = x && y && logits ? 0 : -1;
  for (int64_t first = 0; rc == 0 && first < test->n; first += e) {
    int64_t cnt = test->n - first < e ? test->n - first : e;
    program *pr = cnt == e ? full : tail;
    for (int64_t k = 0; k < cnt; k++) {
      ts_augment_apply(norm, test->images + (first + k) * sample, test->c, test->h, test->w, 0, x + k * sample);
      y[k] = test->labels[first + k];
    }
    rc = ts_buffer_write(pr->io.x, x, (size_t)(cnt * sample) * sizeof *x);
    if (rc == 0) rc = program_run(pr);
    if (rc == 0) rc = ts_buffer_read(pr->io.result, logits, (size_t)cnt * 10 * sizeof *logits);
    for (int64_t b = 0; rc == 0 && b < cnt; b++) {
      int best = 0;
      for (int k = 1; k < 10; k++)
        if (logits[b * 10 + k] > logits[b * 10 + best]) best = k;
      correct += best == y[b];
    }
  }
  free(x);
  free(y);
  free(logits);
  *acc = (double)correct / (double)test->n;
  return rc;
}

/* DDP: the replicas' parameters are the same (FNV-1a of every parameter's
 * bytes, compared across processes). */
static int check_replicas(ts_client *c, ts_params *p, int64_t step) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int k = 0; k < ts_params_count(p); k++) {
    ts_buffer *b = ts_params_buffer(p, c, k);
    size_t n = b ? ts_buffer_bytes(b) : 0;
    unsigned char *host = b ? malloc(n + 1) : NULL;
    if (!b || !host || ts_buffer_read(b, host, n) < 0) {
      if (b && !host) fprintf(stderr, "tessel train: --check-replicas: out of memory\n");
      free(host);
      return -1;
    }
    for (size_t i = 0; i < n; i++) h = (h ^ host[i]) * 0x100000001b3ull;
    free(host);
  }
  char what[64], text[32];
  snprintf(what, sizeof what, "the replicas' parameters after step %lld", (long long)step);
  snprintf(text, sizeof text, "%016llx", (unsigned long long)h);
  return ts_client_check_same(c, what, text);
}

/* DDP: this replica's rows [rank*b, (rank+1)*b) of the global batch. */
static int upload_rows(const ts_loader_batch *batch, program *pr, int rank, int64_t b) {
  int64_t start;
  const float *x;
  const int32_t *y;
  ts_batch_local_rows(batch, &start, &x, &y, NULL);
  const int64_t *xs = ts_buffer_shape(pr->io.x);
  int64_t sample = xs[1] * xs[2] * xs[3], first = rank * b - start;
  if (ts_buffer_write(pr->io.x, x + first * sample, (size_t)(b * sample) * sizeof *x) < 0) return -1;
  return ts_buffer_write(pr->io.y, y + first, (size_t)b * sizeof *y);
}

static void data_hint(int dataset, const char *dir) {
  if (dataset == DATA_CIFAR10)
    fprintf(stderr,
            "hint: no CIFAR-10 in '%s': download the binary version "
            "(https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz), extract it and pass --data-dir\n", dir);
  else
    fprintf(stderr,
            "hint: no Fashion-MNIST in '%s': install the Debian package dataset-fashion-mnist "
            "(scripts/install-deps.sh) or pass --data-dir\n", dir);
}

/* A test hook: TESSEL_TEST_FAULT="rank=R,step=S,signal=KILL|STOP" makes
 * process R kill (or stop, i.e. hang) itself before step S, as a crashed or
 * hung host would (tests/mpi_train.sh checks the others end the job). */
static void inject_fault(int rank, int64_t step) {
  const char *f = getenv("TESSEL_TEST_FAULT");
  int r = -1;
  long long s = -1;
  char sig[8] = "";
  if (!f || sscanf(f, "rank=%d,step=%lld,signal=%7s", &r, &s, sig) != 3 || r != rank || s != step) return;
  fprintf(stderr, "tessel train: rank %d: TESSEL_TEST_FAULT: SIG%s at step %lld\n", rank, sig, s);
  fflush(stderr);
  raise(strcmp(sig, "STOP") == 0 ? SIGSTOP : SIGKILL);
}

/* What every process must agree on (paths and printing may differ). */
static void config_text(const train_opts *o, char *buf, size_t n) {
  snprintf(buf, n,
           "model=%s dataset=%s batch=%lld epochs=%lld steps=%lld optimizer=%s lr=%g schedule=%s warmup=%lld "
           "weight_decay=%g momentum=%g seed=%llu eval_batch=%lld mesh=%s parallel=%s",
           model_names[o->model], dataset_names[o->dataset], (long long)o->batch, (long long)o->epochs,
           (long long)o->steps, optim_names[o->optimizer], o->lr, sched_names[o->schedule], (long long)o->warmup,
           o->weight_decay, o->momentum, (unsigned long long)o->seed, (long long)o->eval_batch,
           o->mesh ? o->mesh : "-", parallel_names[o->parallel]);
}

int cli_train(int argc, char **argv) {
  train_opts o;
  int pr_rc = parse_args(argc, argv, &o);
  if (pr_rc == 1) {
    cli_train_usage(stdout);
    return CLI_EXIT_OK;
  }
  if (pr_rc < 0) return CLI_EXIT_USAGE;
  ts_mesh *mesh = NULL;
  if (o.mesh && !(mesh = ts_mesh_from_text(o.mesh))) {
    cli_error(CMD, "--mesh: %s", ts_last_error());
    return CLI_EXIT_USAGE;
  }

  /* The client first: under mpirun it joins the job (and says which rank
   * this process is, which decides who prints and writes files). */
  bool ddp = o.parallel == PARALLEL_DDP;
  ts_client_options copts = {.num_threads = (int)o.threads,
                             .num_devices = ddp ? 1 : 0,
                             .total_devices = !ddp && mesh ? (int)ts_mesh_num_devices(mesh) : 0,
                             .collective_timeout_ms = o.timeout_s > 0 ? (int)(o.timeout_s * 1000 + 0.5) : 0};
  ts_client *client = ts_client_new(&copts);
  if (!client) {
    cli_error(CMD, "%s", ts_last_error());
    ts_mesh_free(mesh);
    return CLI_EXIT_FAIL;
  }
  int nproc = ts_client_process_count(client), rank = ts_client_process_index(client);
  if (nproc > 1) {
    cli_set_rank(rank);
    if (rank != 0 && !o.all_ranks && !freopen("/dev/null", "w", stdout)) {
      cli_error(CMD, "cannot silence stdout: %s", strerror(errno));
      ts_client_abort(client, CLI_EXIT_FAIL);
    }
  }
  if (rank != 0) o.metrics = o.trace = NULL; /* rank 0 writes the files */
  char mesh_text[64];
  if (!ddp && !mesh && ts_client_num_devices(client) > 1) { /* under mpirun: data parallel by default */
    snprintf(mesh_text, sizeof mesh_text, "data=%d", ts_client_num_devices(client));
    o.mesh = mesh_text;
    if (!(mesh = ts_mesh_from_text(mesh_text))) {
      cli_error(CMD, "%s", ts_last_error());
      ts_client_free(client);
      return CLI_EXIT_FAIL;
    }
  }

  FILE *log = NULL;
  if (o.log_json && rank == 0 && !(log = fopen(o.log_json, "w"))) {
    cli_error(CMD, "--log-json: cannot open '%s': %s", o.log_json, strerror(errno));
    ts_mesh_free(mesh);
    if (nproc > 1) ts_client_abort(client, CLI_EXIT_USAGE);
    ts_client_free(client);
    return CLI_EXIT_USAGE;
  }

  int exit_code = CLI_EXIT_FAIL;
  ts_dataset train = {0}, test = {0};
  ts_params *params = NULL;
  ts_graph *g = NULL;
  program step_pr = {0}, eval_pr = {0}, tail_pr = {0};
  ts_source *train_src = NULL;
  ts_loader *loader = NULL;
  ts_progress *bar = NULL;
  bool cifar = o.dataset == DATA_CIFAR10;

  if (cifar ? ts_cifar10_load(o.data_dir, "train", &train) < 0 || ts_cifar10_load(o.data_dir, "test", &test) < 0
            : ts_mnist_load(o.data_dir, "train", &train) < 0 || ts_mnist_load(o.data_dir, "t10k", &test) < 0) {
    cli_error(CMD, "%s", ts_last_error());
    data_hint(o.dataset, o.data_dir);
    goto done;
  }
  int want_c = cifar ? 3 : 1, want_hw = cifar ? 32 : 28;
  if (train.c != want_c || train.h != want_hw || train.w != want_hw || test.c != want_c || test.h != want_hw ||
      test.w != want_hw) {
    cli_error(CMD, "expected %dx%dx%d images in '%s', got %dx%dx%d", want_c, want_hw, want_hw, o.data_dir,
              train.c, train.h, train.w);
    goto done;
  }
  o.c = train.c, o.h = train.h, o.w = train.w;
  /* Normalization by the training set's channel statistics; CIFAR-10 also
   * gets the standard augmentation (random crop with 4-pixel padding, flip). */
  ts_augment norm = {.mean = {FMNIST_MEAN}, .std = {FMNIST_STD}};
  if (cifar) norm = (ts_augment){.mean = TS_CIFAR10_MEAN, .std = TS_CIFAR10_STD};
  ts_augment train_aug = norm;
  if (cifar) train_aug.crop_pad = 4, train_aug.hflip = true;
  const int64_t steps_per_epoch = train.n / o.batch; // the last partial batch is dropped
  if (steps_per_epoch == 0) {
    cli_error(CMD, "--batch: %lld is larger than the training set (%lld samples)",
              (long long)o.batch, (long long)train.n);
    exit_code = CLI_EXIT_USAGE;
    goto done;
  }
  int64_t total_steps = steps_per_epoch * o.epochs;
  if (o.steps > 0 && o.steps < total_steps) total_steps = o.steps;
  int64_t warmup = o.warmup >= 0 ? o.warmup : (total_steps / 10 < 100 ? total_steps / 10 : 100);
  ts_lr_schedule sched = {.kind = o.schedule == 0 ? TS_LR_CONSTANT : TS_LR_COSINE, .base_lr = o.lr,
                          .warmup_steps = warmup, .total_steps = total_steps, .min_lr = 0.0};
  int64_t eval_b = o.eval_batch < test.n ? o.eval_batch : test.n;
  if (ddp && o.batch % nproc) {
    cli_error(CMD, "--parallel ddp: the global batch %lld does not divide over %d processes", (long long)o.batch,
              nproc);
    exit_code = CLI_EXIT_USAGE;
    goto done;
  }
  {
    char cfg[512];
    config_text(&o, cfg, sizeof cfg); /* every process must train the same thing */
    if (ts_client_check_same(client, "the configuration", cfg) < 0) goto lib_error;
  }
  params = ts_params_new(o.seed);
  if (!params) goto lib_error;

  if (o.trace) ts_trace_start(); /* before compiling: the trace shows the compile too */
  double t0 = now_s();
  bool megatron = o.model == MODEL_MLP;
  model_graph_spec gs = graph_spec(&o);
  /* DDP: each process's replica trains on its rows of the global batch and
   * evaluates alone (the replicas are identical) */
  ts_compile_options co = {.replicas = ddp};
  if (ddp) gs.ddp = true, gs.batch = o.batch / nproc;
  if (!(g = model_train_graph(&gs, params)) || (mesh && train_mesh_mark(g, mesh, megatron) < 0) ||
      program_init(&step_pr, client, params, g, &co) < 0)
    goto lib_error;
  ts_graph_free(g);
  gs.ddp = false;
  if (!(g = model_eval_graph(&gs, eval_b, params)) || (mesh && train_mesh_mark(g, mesh, megatron) < 0) ||
      program_init(&eval_pr, client, params, g, &co) < 0)
    goto lib_error;
  ts_graph_free(g);
  g = NULL;
  if (test.n % eval_b) {
    if (!(g = model_eval_graph(&gs, test.n % eval_b, params)) ||
        (mesh && train_mesh_mark(g, mesh, megatron) < 0) || program_init(&tail_pr, client, params, g, &co) < 0)
      goto lib_error;
    ts_graph_free(g);
    g = NULL;
  }
  printf("tessel train: %s on %s (%lld train, %lld test), %lld params, %s lr %g (%s, warm-up %lld) weight decay %g, "
         "batch %lld, %lld epochs x %lld steps, %d threads; compiled in %.2fs\n",
         model_names[o.model], dataset_names[o.dataset], (long long)train.n, (long long)test.n,
         (long long)ts_params_trainable_numel(params), optim_names[o.optimizer], o.lr,
         sched_names[o.schedule], (long long)warmup, o.weight_decay, (long long)o.batch, (long long)o.epochs,
         (long long)steps_per_epoch, ts_client_num_threads(client), now_s() - t0);
  if (mesh) /* say what SPMD does: the mesh and the collectives the partitioner inserted */
    printf("SPMD: mesh %s on %d virtual CPU devices in %d process%s; %d collectives per training step "
           "(tessel inspect shows them)\n",
           o.mesh, ts_client_num_devices(client), nproc, nproc > 1 ? "es" : "",
           ts_executable_num_collectives(step_pr.exe));
  if (ddp)
    printf("DDP: %d replicas (one per process), batch %lld each; gradients averaged in %d buckets\n", nproc,
           (long long)gs.batch, ts_executable_num_collectives(step_pr.exe) - 1);
  fflush(stdout);

  /* Worker threads prepare the next batches (shuffled per (seed, epoch),
   * augmented per sample) while a step runs. */
  ts_loader_options lopts = {.batch = o.batch, .seed = o.seed, .prefetch = 3, .workers = 1,
                             .augment = train_aug};
  if (!(train_src = ts_source_from_dataset(&train, dataset_names[o.dataset])) ||
      !(loader = ts_loader_new(train_src, &lopts)))
    goto lib_error;

  double train_time = 0, start = now_s(), acc = 0;
  double window_loss = 0, epoch_loss = 0;
  int64_t window_n = 0, epoch_n = 0, step = 0;
  for (int64_t epoch = 1; epoch <= o.epochs && step < total_steps; epoch++) {
    epoch_loss = 0;
    epoch_n = 0;
    int64_t epoch_steps = total_steps - step < steps_per_epoch ? total_steps - step : steps_per_epoch;
    char label[64];
    snprintf(label, sizeof label, "epoch %lld/%lld", (long long)epoch, (long long)o.epochs);
    bar = ts_progress_new(stdout, TS_PROGRESS_AUTO, label, epoch_steps * o.batch, 10.0);
    double ts0 = now_s();
    for (int64_t s = 0; s < steps_per_epoch && step < total_steps; s++) {
      int64_t wait_t0 = ts_metrics_now_ns(); /* DataWaitTime: the step waiting for its batch */
      const ts_loader_batch *batch = ts_loader_next(loader);
      ts_metrics_add("DataWaitTime", TS_METRIC_TIME, ts_metrics_now_ns() - wait_t0);
      ts_trace_event("data wait", "data", -1, wait_t0, ts_metrics_now_ns(), -1);
      if (!batch) goto lib_error;
      float lr = (float)ts_lr_at(&sched, step);
      float step1 = (float)(step + 1); // 1-based (bias correction)
      int64_t seed = (int64_t)(o.seed * 1000003u + (uint64_t)step);
      if (ddp) seed ^= (int64_t)(0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1)); /* each replica its own dropout */
      float loss = NAN;
      double step_t0 = now_s();
      inject_fault(rank, step);
      if ((ddp ? upload_rows(batch, &step_pr, rank, gs.batch) < 0
               : ts_batch_upload(batch, "x", step_pr.io.x) < 0 || ts_batch_upload(batch, "y", step_pr.io.y) < 0) ||
          ts_buffer_write(step_pr.io.lr, &lr, sizeof lr) < 0 ||
          ts_buffer_write(step_pr.io.step, &step1, sizeof step1) < 0 ||
          ts_buffer_write(step_pr.io.seed, &seed, sizeof seed) < 0 || program_run(&step_pr) < 0 ||
          ts_buffer_read(step_pr.io.result, &loss, sizeof loss) < 0)
        goto lib_error;
      step++;
      if (ddp && o.check_replicas && step % o.check_replicas == 0 && check_replicas(client, params, step) < 0)
        goto lib_error;
      if (log) {
        /* The log contract: %.9g round-trips a float, so "exact" comparisons of logs are exact. */
        double step_ms = 1e3 * (now_s() - step_t0);
        if (isfinite(loss)) fprintf(log, "{\"step\":%lld,\"loss\":%.9g,\"step_ms\":%.3f}\n", (long long)step, loss, step_ms);
        else fprintf(log, "{\"step\":%lld,\"loss\":null,\"step_ms\":%.3f}\n", (long long)step, step_ms);
      }
      window_loss += loss;
      window_n++;
      epoch_loss += loss;
      epoch_n++;
      if (!isfinite(loss)) {
        cli_error(CMD, "loss is %g at step %lld; try a smaller --lr", loss, (long long)step);
        goto done;
      }
      char extra[48];
      snprintf(extra, sizeof extra, "loss %.4f", window_loss / (double)window_n);
      ts_progress_update(bar, (s + 1) * o.batch, extra);
      if (step % 100 == 0) { // the loss shown is the mean of the last 100 steps
        window_loss = 0;
        window_n = 0;
      }
    }
    train_time += now_s() - ts0;
    {
      char extra[48];
      snprintf(extra, sizeof extra, "loss %.4f", epoch_loss / (double)epoch_n);
      ts_progress_finish(bar, extra);
      bar = NULL;
    }
    double te = now_s();
    if (evaluate(&eval_pr, &tail_pr, &test, eval_b, &norm, &acc) < 0) goto lib_error;
    double t = now_s();
    char e1[32], e2[32];
    double per_step = train_time / (double)step;
    printf("epoch %lld done | train loss %.4f | test accuracy %.2f%% | eval %.1fs | elapsed %s | eta %s\n",
           (long long)epoch, epoch_loss / (double)epoch_n, 100 * acc, t - te,
           fmt_duration(t - start, e1, sizeof e1),
           fmt_duration(per_step * (double)(total_steps - step), e2, sizeof e2));
    fflush(stdout);
    window_loss = 0;
    window_n = 0;
    if (log) {
      fprintf(log, "{\"epoch\":%lld,\"test_accuracy\":%.6f}\n", (long long)epoch, acc);
      fflush(log);
    }
  }
  {
    char e1[32];
    ts_loader_stats ls;
    ts_loader_get_stats(loader, &ls);
    printf("done: %lld steps in %s (%.0f samples/s training), final test accuracy %.2f%%\n",
           (long long)step, fmt_duration(now_s() - start, e1, sizeof e1),
           (double)(step * o.batch) / train_time, 100 * acc);
    printf("data: waited %.2fs for batches, %.2f%% of step time (loader busy %.2fs)\n", ls.wait_s,
           train_time > 0 ? 100.0 * ls.wait_s / train_time : 0.0, ls.produce_s);
  }
  exit_code = CLI_EXIT_OK;
  goto done;

lib_error:
  cli_error(CMD, "%s", ts_last_error());
done:
  if (exit_code != CLI_EXIT_OK && nproc > 1) { /* the other processes would wait for us in vain */
    if (log) fclose(log);
    fflush(stdout);
    ts_client_abort(client, exit_code);
  }
  if (log) fclose(log);
  if (o.metrics) {
    char *rep = ts_metrics_short_report();
    if (rep) printf("metrics:\n%s", rep);
    free(rep);
    if (ts_metrics_write_json(o.metrics) < 0) cli_error(CMD, "--metrics: %s", ts_last_error());
  }
  if (o.trace && ts_trace_stop(o.trace) < 0) cli_error(CMD, "--trace: %s", ts_last_error());
  if (bar) ts_progress_finish(bar, NULL);
  ts_loader_free(loader); // joins the workers before the dataset goes
  ts_source_free(train_src);
  program_free(&step_pr);
  program_free(&eval_pr);
  program_free(&tail_pr);
  if (g) ts_graph_free(g);
  if (params) ts_params_free(params);
  if (client) ts_client_free(client);
  ts_mesh_free(mesh);
  if (train.images || train.labels) ts_dataset_free(&train);
  if (test.images || test.labels) ts_dataset_free(&test);
  return exit_code;
}
