/* train_run.h — the pieces of `tessel train` (train.c runs them in order):
 * joining the job, loading the data, compiling the programs, the epoch/step
 * loop with evaluation, and the DDP helpers. One train_run holds everything a
 * run owns, so the phases share it and train.c frees it in one place. */
#ifndef TESSEL_TOOLS_TRAIN_RUN_H
#define TESSEL_TOOLS_TRAIN_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> // FILE

#include "model_graph.h"    // model_io, model_graph_spec
#include "tessel/loader.h"  // ts_dataset, ts_augment, ts_loader, ts_progress
#include "tessel/tessel.h"
#include "train_opts.h"
#include "train_outputs.h"  // train_output: the files the run writes

#define CMD "train"

/* ---- a compiled program with its inputs bound by name (train_program.c) ---- */

typedef struct {
  ts_executable *exe;
  model_io io;          /* inputs bound by name (model_graph.h) */
  int n_out;
  ts_buffer **out;      /* (n_out) slots for ts_execute */
} program;

/* Compiles g and binds its inputs (model_io_bind); 0 or -1 (error set). */
int program_init(program *pr, ts_client *c, ts_params *p, const ts_graph *g, const ts_compile_options *co);
/* Executes once. Output 0 goes to pr->io.result; the other outputs are aliased to
 * parameters (updated in place) — any that is not gets freed. */
int program_run(program *pr);
void program_free(program *pr);

/* ---- one run ---- */

typedef struct train_run {
  train_opts o;
  ts_mesh *mesh;              /* NULL: one device (or DDP) */
  char mesh_text[64];         /* o.mesh when chosen by default under mpirun */
  ts_client *client;
  int nproc, rank;
  bool ddp;
  train_output out[OUT_COUNT]; /* the files this process writes (train_outputs.h) */
  FILE *log;                  /* --log-json, rank 0 only, opened at the first step */
  int64_t steps_done;         /* > 0: training started (outputs may be written) */
  int stop_signal;            /* SIGINT or SIGTERM: the run stopped early (train_stop.h) */
  ts_dataset train, test;
  /* --holdout N: the training set's last N samples, a view into train's arrays
   * (train.n excludes them; freed with train, never on its own); n = 0: none */
  ts_dataset val;
  ts_augment norm;            /* pixel normalization (evaluation) */
  ts_augment train_aug;       /* normalization + CIFAR-10's crop and flip */
  int64_t steps_per_epoch, total_steps, warmup, eval_b;
  ts_lr_schedule sched;
  ts_params *params;
  model_graph_spec gs;        /* gs.batch: this replica's share under DDP */
  ts_graph *g;                /* a graph being compiled */
  program step_pr, eval_pr, tail_pr; /* tail_pr: the last partial evaluation batch, if any */
  ts_source *train_src;       /* token data: made by train_text_load (train_text.h) */
  ts_loader *loader;
  ts_source *val_src;         /* token data: the validation windows */
  ts_loader *val_loader;      /* over val_src, no shuffle, made at the first validation batch */
  int64_t val_next;           /* the validation batch val_loader hands out next */
  /* --dataset imagefolder: the sources (train_src is the training one) and
   * the evaluation loader (train.n / test.n hold the sizes, no pixels) */
  ts_source *test_src;
  ts_loader *eval_loader;
  bool eval_local;            /* eval_loader decodes only this process's rows */
  int64_t bad_reported[2];    /* --skip-bad-files: bad train / val files reported so far */
  /* per-host loading (train_loader.c): DDP's mesh and batch sharding */
  ts_mesh *load_mesh;
  ts_sharding *load_sh[2];
  ts_progress *bar;           /* the current epoch's */
  uint64_t program_hash;      /* ts_graph_hash of the training step (saved in checkpoints) */
  double val_loss;            /* --model gpt: the last validation loss (NAN before the first) */
} train_run;

/* Each phase returns CLI_EXIT_OK or the exit code after printing why. */

/* train_setup.c: the mesh, the client (joins an MPI job: rank, who prints),
 * the default mesh under mpirun and the --log-json file. On failure it has
 * already released what it made (and ended the job where others would wait). */
int train_join(train_run *r);
/* train_setup.c: the datasets, augmentation, step counts and LR schedule; checks
 * that every process has the same configuration. */
int train_load(train_run *r);
/* train_setup.c: the rest of train_load once the training set's size is
 * known (n_train samples): step counts, warm-up, the LR schedule, the DDP
 * batch split and the check that every process has the same configuration. */
int train_load_steps(train_run *r, int64_t n_train);
/* train_setup.c: parameters and the compiled step, evaluation and tail
 * programs; prints the run's header. */
int train_compile(train_run *r);
/* train_loop.c: the loader and the epochs (steps, evaluation, logs), then the
 * summary. */
int train_epochs(train_run *r);

/* train_ckpt.c: --resume / --init-from, after the loader exists: the
 * parameters (and for --resume the optimizer state and the loader's position)
 * from the checkpoint; *step is set to the step to continue from (0 for
 * --init-from). A run that differs from the saved one in anything but the
 * mesh and the process count is an error listing the differences. */
int train_ckpt_restore(train_run *r, int64_t *step);
/* train_ckpt.c: after step `step` (steps done): a checkpoint into --save-dir if
 * --save-every or the end of the run asks for one, written in the background
 * (the error of an earlier one is returned here). Collective under mpirun. */
int train_ckpt_maybe_save(train_run *r, int64_t step);
/* train_ckpt.c: a checkpoint of the state after step `step` into --save-dir
 * now, complete when it returns (collective under MPI); 0 or -1 (error set). */
int train_ckpt_save(train_run *r, int64_t step);
/* train_ckpt.c: waits for the checkpoint being written in the background
 * (saves run on a thread while training goes on); 0 or -1 with its error. */
int train_ckpt_finish(train_run *r);

/* train_eval.c: accuracy in [0, 1] over `test`; full batches of e with `full`,
 * the rest with `tail` (NULL: the last batch is padded with zero images
 * through `full`; rows past the set are ignored); pixels normalized by `norm`
 * (no crop or flip). loss (NULL: not computed): the mean cross-entropy of the
 * logits, in double on the host. */
int train_evaluate(program *full, program *tail, const ts_dataset *test, int64_t e, const ts_augment *norm,
                   double *acc, double *loss);

/* train_images.c: --dataset imagefolder: the train and val sources (the
 * same classes; listings checked equal over the processes) into
 * r->train_src / r->test_src, sizes into r->train / r->test. */
int train_images_open(train_run *r);
/* train_images.c: test accuracy over r->test_src (full batches of r->eval_b
 * through `full`, the last one padded; per host when training loads per host
 * over an SPMD mesh and the evaluation batch divides alike). */
int train_images_evaluate(train_run *r, program *full, double *acc);
/* train_images.c: --skip-bad-files: prints the bad files found since the last call. */
void train_images_report(train_run *r);

/* train_loader.c: the training loader over r->train_src: --loader-workers,
 * and per-host loading (--load) over the step program's input shardings. */
int train_loader_new(train_run *r);

/* train_gpt.c: the validation loss (mean over --eval-batches batches at fixed
 * positions) into r->val_loss, printed and logged as {"step":N,"val_loss":X}. */
int train_gpt_evaluate(train_run *r, int64_t step);
/* train_gpt.c: --sample N: N bytes generated after --prompt, printed. */
int train_gpt_sample(train_run *r);

/* train_ddp.c: this replica's rows [rank*b, (rank+1)*b) of the global batch. */
int train_ddp_upload_rows(const ts_loader_batch *batch, program *pr, int rank, int64_t b);
/* train_ddp.c: the replicas' parameters are the same (a hash compared across processes). */
int train_ddp_check_replicas(ts_client *c, ts_params *p, int64_t step);

/* train_profile.c: --profile and --bind. The host's clock readings of one
 * step (ts_metrics_now_ns): waiting for the batch from wait_t0, upload from
 * t0, execute from uploaded, read-back from executed to read. */
typedef struct {
  int64_t wait_t0_ns, t0_ns, uploaded_ns, executed_ns, read_ns;
} train_step_times;
/* Before the first step: tracing on (unless it is already), the device
 * side of --profile comes from the trace's kernel and collective events. */
void train_profile_begin(void);
/* After a step; end_ns: the end of its loop iteration (logs, progress). */
void train_profile_step(const train_step_times *t, int64_t end_ns);
/* After the run: prints the breakdown per step (host parts; per device
 * compute, communication exposed and hidden, idle) and logs it as a
 * {"profile":{...}} record. 0, or -1 after printing why. */
int train_profile_report(train_run *r);
/* --bind: says which CPUs each local device is pinned to. */
void train_print_binding(ts_client *c);

/* train_loop.c: monotonic seconds. */
double train_now_s(void);
/* train.c: prints ts_last_error() and returns CLI_EXIT_FAIL. */
int train_lib_error(void);

#endif
