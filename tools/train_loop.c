/* train_loop.c — `tessel train`'s epochs: batches from the prefetching loader,
 * one compiled step each, the JSON log and the progress bar, an evaluation
 * after every epoch and the closing summary. */
#include <math.h>
#include <signal.h> // SIGINT, SIGTERM
#include <stdio.h>
#include <sys/resource.h> // getrusage: peak RSS
#include <time.h> // clock_gettime

#include "args.h"            // cli_error, exit codes
#include "tessel/metrics.h"  // DataWaitTime, trace events
#include "train_run.h"
#include "train_stop.h"      // SIGINT/SIGTERM: stop after a step

double train_now_s(void) {
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

/* Across epochs. */
typedef struct {
  int64_t step;                /* steps done */
  int64_t first_step;          /* where this process started (a resumed run: the checkpoint's step) */
  double train_time, start;    /* seconds in steps; start of the first epoch */
  double acc;                  /* the last test accuracy */
  double window_loss;          /* the loss shown: mean of the last (up to) 100 steps */
  int64_t window_n;
  float loss_scale;            /* --amp f16: the scaler's scale after the last step */
  float skipped;               /* --amp f16: updates skipped so far (inf/NaN gradients) */
} loop_state;

/* --amp f16: the loss scaler's state after a step (two rank-0 reads of
 * replicated parameters: local, no collective), into the metrics
 * AmpLossScale (value) and AmpSkippedSteps (counter). */
static int read_amp(train_run *r, loop_state *st) {
  if (r->o.amp != AMP_F16) return 0;
  int ks = ts_params_find(r->params, "amp.loss_scale"), kk = ts_params_find(r->params, "amp.skipped_steps");
  if (ks < 0 || kk < 0) return 0;
  ts_buffer *bs = ts_params_buffer(r->params, r->client, ks), *bk = ts_params_buffer(r->params, r->client, kk);
  float scale = 0, skipped = 0;
  if (!bs || !bk || ts_buffer_read(bs, &scale, sizeof scale) < 0 || ts_buffer_read(bk, &skipped, sizeof skipped) < 0)
    return -1;
  ts_metrics_add("AmpLossScale", TS_METRIC_VALUE, (int64_t)scale);
  if (skipped > st->skipped) ts_metrics_add("AmpSkippedSteps", TS_METRIC_COUNTER, (int64_t)(skipped - st->skipped));
  st->loss_scale = scale;
  st->skipped = skipped;
  return 0;
}

/* One training step on batch: inputs written, the program run, *loss read
 * (loss NULL: not read back, --log-every); t gets the host's parts of it. */
static int run_step(train_run *r, const ts_loader_batch *batch, int64_t step, float *loss, train_step_times *t) {
  program *pr = &r->step_pr;
  float lr = (float)ts_lr_at(&r->sched, step);
  float step1 = (float)(step + 1); // 1-based (bias correction)
  int64_t seed = (int64_t)(r->o.seed * 1000003u + (uint64_t)step);
  if (r->ddp) seed ^= (int64_t)(0x9e3779b97f4a7c15ull * (uint64_t)(r->rank + 1)); /* each replica its own dropout */
  train_fault_maybe(&r->o.fault, r->rank, step);
  t->t0_ns = ts_metrics_now_ns();
  if ((r->ddp ? train_ddp_upload_rows(batch, pr, r->rank, r->gs.batch) < 0
              : ts_batch_upload(batch, "x", pr->io.x) < 0 || ts_batch_upload(batch, "y", pr->io.y) < 0) ||
      ts_buffer_write(pr->io.lr, &lr, sizeof lr) < 0 || ts_buffer_write(pr->io.step, &step1, sizeof step1) < 0 ||
      ts_buffer_write(pr->io.seed, &seed, sizeof seed) < 0)
    return -1;
  t->uploaded_ns = ts_metrics_now_ns();
  if (program_run(pr) < 0) return -1;
  t->executed_ns = ts_metrics_now_ns();
  if (loss && ts_buffer_read(pr->io.result, loss, sizeof *loss) < 0) return -1;
  t->read_ns = ts_metrics_now_ns();
  return 0;
}

/* The log contract: %.9g round-trips a float, so "exact" comparisons of logs
 * are exact. Opened at the first step, flushed per record (never ends
 * mid-record, even when the process is killed). */
static int log_step(train_run *r, const loop_state *st, int64_t step, float loss, double step_ms) {
  if (train_log_open(r) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
  if (!r->log) return CLI_EXIT_OK;
  char amp[64] = ""; /* --amp f16: the scale after this step and the skipped updates so far */
  if (r->o.amp == AMP_F16)
    snprintf(amp, sizeof amp, ",\"loss_scale\":%.9g,\"skipped_steps\":%.0f", st->loss_scale, st->skipped);
  if (isfinite(loss))
    fprintf(r->log, "{\"step\":%lld,\"loss\":%.9g,\"step_ms\":%.3f%s}\n", (long long)step, loss, step_ms, amp);
  else fprintf(r->log, "{\"step\":%lld,\"loss\":null,\"step_ms\":%.3f%s}\n", (long long)step, step_ms, amp);
  return train_log_flush(r);
}

/* The steps of one epoch (up to the run's total), under a progress bar. */
static int train_one_epoch(train_run *r, loop_state *st, int64_t epoch, double *epoch_loss, int64_t *epoch_n) {
  const train_opts *o = &r->o;
  int64_t s0 = st->step % r->steps_per_epoch; /* 0, or where a resumed run continues this epoch */
  int64_t epoch_steps = r->total_steps - st->step < r->steps_per_epoch - s0 ? r->total_steps - st->step
                                                                            : r->steps_per_epoch - s0;
  char label[64];
  snprintf(label, sizeof label, "epoch %lld/%lld", (long long)epoch, (long long)o->epochs);
  r->bar = ts_progress_new(stdout, TS_PROGRESS_AUTO, label, (s0 + epoch_steps) * o->batch, 10.0);
  double ts0 = train_now_s();
  for (int64_t s = s0; s < r->steps_per_epoch && st->step < r->total_steps; s++) {
    int64_t wait_t0 = ts_metrics_now_ns(); /* DataWaitTime: the step waiting for its batch */
    const ts_loader_batch *batch = ts_loader_next(r->loader);
    ts_metrics_add("DataWaitTime", TS_METRIC_TIME, ts_metrics_now_ns() - wait_t0);
    ts_trace_event("data wait", "data", -1, wait_t0, ts_metrics_now_ns(), -1);
    if (!batch) return train_lib_error();
    float loss = NAN;
    double step_t0 = train_now_s();
    /* --log-every N: the loss of steps N, 2N, ... and of each epoch's last */
    bool logged = !o->log_every || (st->step + 1) % o->log_every == 0;
    bool read = logged || s + 1 == r->steps_per_epoch || st->step + 1 == r->total_steps;
    train_step_times times = {.wait_t0_ns = wait_t0};
    if (run_step(r, batch, st->step, read ? &loss : NULL, &times) < 0) return train_lib_error();
    st->step++;
    r->steps_done = st->step;
    if (r->ddp && o->check_replicas && st->step % o->check_replicas == 0 &&
        train_ddp_check_replicas(r->client, r->params, st->step) < 0)
      return train_lib_error();
    double step_ms = 1e3 * (train_now_s() - step_t0);
    if (read_amp(r, st) < 0) return train_lib_error();
    if (logged && log_step(r, st, st->step, loss, step_ms) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (train_ckpt_maybe_save(r, st->step) < 0) return train_lib_error();
    if (read && isfinite(loss)) {
      st->window_loss += loss;
      st->window_n++;
      *epoch_loss += loss;
      (*epoch_n)++;
    } else if (read && o->amp != AMP_F16) { /* --amp f16: the scaler skipped this update; the run goes on */
      cli_error(CMD, "loss is %g at step %lld; try a smaller --lr", loss, (long long)st->step);
      return CLI_EXIT_FAIL;
    }
    char extra[48] = "";
    if (st->window_n) snprintf(extra, sizeof extra, "loss %.4f", st->window_loss / (double)st->window_n);
    ts_progress_update(r->bar, (s + 1) * o->batch, extra);
    if (o->profile) train_profile_step(&times, ts_metrics_now_ns());
    if (st->step % 100 == 0) { // the loss shown is the mean of the last 100 steps
      st->window_loss = 0;
      st->window_n = 0;
    }
    /* the GPT's validation loss every --eval-every steps (within the epoch; at
     * its end after the progress bar closes) */
    if (o->model == MODEL_GPT && st->step % o->eval_every == 0 && st->step < r->total_steps &&
        s + 1 < r->steps_per_epoch) {
      ts_progress_finish(r->bar, extra); /* the val loss line goes between progress lines */
      r->bar = ts_progress_new(stdout, TS_PROGRESS_AUTO, label, (s0 + epoch_steps) * o->batch, 10.0);
      int erc = train_gpt_evaluate(r, st->step);
      if (erc != CLI_EXIT_OK) return erc;
    }
    /* SIGINT/SIGTERM: agreed one step behind while a step of this epoch
     * follows, at once after its last (nothing left pending, no stop lost) */
    bool last = s + 1 == r->steps_per_epoch || st->step == r->total_steps;
    int sig = last ? train_stop_requested(r->client) : train_stop_after_step(r->client);
    if (sig < 0) return train_lib_error();
    if ((r->stop_signal = sig)) break; /* this step was the last */
  }
  st->train_time += train_now_s() - ts0;
  char extra[48] = "";
  if (*epoch_n) snprintf(extra, sizeof extra, "loss %.4f", *epoch_loss / (double)*epoch_n);
  ts_progress_finish(r->bar, extra);
  r->bar = NULL;
  if (o->model == MODEL_GPT && !r->stop_signal && (st->step % o->eval_every == 0 || st->step == r->total_steps))
    return train_gpt_evaluate(r, st->step);
  return CLI_EXIT_OK;
}

/* The test accuracy after an epoch: printed, and logged. */
static int evaluate_epoch(train_run *r, loop_state *st, int64_t epoch, double epoch_loss, int64_t epoch_n) {
  double te = train_now_s();
  if ((r->test_src ? train_images_evaluate(r, &r->eval_pr, &st->acc)
                   : train_evaluate(&r->eval_pr, &r->tail_pr, &r->test, r->eval_b, &r->norm, &st->acc, NULL)) < 0)
    return train_lib_error();
  double val_acc = 0, val_loss = 0; /* --holdout: its last batch padded through eval_pr */
  if (r->val.n && train_evaluate(&r->eval_pr, NULL, &r->val, r->eval_b, &r->norm, &val_acc, &val_loss) < 0)
    return train_lib_error();
  char val[80] = "";
  if (r->val.n) snprintf(val, sizeof val, " | val accuracy %.2f%% loss %.4f", 100 * val_acc, val_loss);
  train_images_report(r); /* --skip-bad-files: what this epoch skipped */
  double t = train_now_s();
  char e1[32], e2[32];
  double per_step = st->train_time / (double)(st->step - st->first_step);
  printf("epoch %lld done | train loss %.4f | test accuracy %.2f%%%s | eval %.1fs | elapsed %s | eta %s\n",
         (long long)epoch, epoch_loss / (double)epoch_n, 100 * st->acc, val, t - te,
         fmt_duration(t - st->start, e1, sizeof e1),
         fmt_duration(per_step * (double)(r->total_steps - st->step), e2, sizeof e2));
  fflush(stdout);
  st->window_loss = 0;
  st->window_n = 0;
  if (r->log) {
    if (r->val.n)
      fprintf(r->log, "{\"epoch\":%lld,\"test_accuracy\":%.6f,\"val_accuracy\":%.6f,\"val_loss\":%.6f}\n",
              (long long)epoch, st->acc, val_acc, val_loss);
    else
      fprintf(r->log, "{\"epoch\":%lld,\"test_accuracy\":%.6f}\n", (long long)epoch, st->acc);
    return train_log_flush(r);
  }
  return CLI_EXIT_OK;
}

/* The run stopped early on SIGINT/SIGTERM, after step st->step: says so;
 * train.c then writes the outputs. Exit code 128 + signal, as a shell reports
 * a process the signal ended. */
static int train_interrupted(train_run *r, const loop_state *st) {
  char e1[32];
  printf("interrupted by %s after step %lld of %lld (%s); no evaluation of this epoch\n",
         r->stop_signal == SIGINT ? "SIGINT" : r->stop_signal == SIGTERM ? "SIGTERM" : "a signal",
         (long long)st->step, (long long)r->total_steps, fmt_duration(train_now_s() - st->start, e1, sizeof e1));
  fflush(stdout); /* under mpirun a rank may be killed a few seconds after the signal: say it now */
  /* With --save-dir: the parameters, the optimizer state and the loader
   * position after step st->step, so that --resume continues exactly here.
   * Every rank reaches this point after the same step (train_stop.c), so the
   * collective save lines up. */
  if (r->o.save_dir && st->step > st->first_step && train_ckpt_save(r, st->step) < 0) return train_lib_error();
  return 128 + r->stop_signal;
}

/* What every finished run prints after its "done:" line, whatever the model:
 * the loader's wait, the --profile breakdown, the f16 loss scale, peak memory. */
static int report_tail(train_run *r, const loop_state *st) {
  const train_opts *o = &r->o;
  ts_loader_stats ls;
  ts_loader_get_stats(r->loader, &ls);
  printf("data: waited %.2fs for batches, %.2f%% of step time (loader busy %.2fs)\n", ls.wait_s,
         st->train_time > 0 ? 100.0 * ls.wait_s / st->train_time : 0.0, ls.produce_s);
  if (o->profile && train_profile_report(r) < 0) return CLI_EXIT_FAIL;
  if (o->amp == AMP_F16)
    printf("amp: f16 loss scale %g after %lld steps, %.0f updates skipped (inf/NaN gradients)\n", st->loss_scale,
           (long long)st->step, st->skipped);
  /* peak memory: the training step's memory plan (temporaries, largest device) and the process's RSS */
  size_t plan = 0;
  for (int d = 0; d < ts_executable_num_devices(r->step_pr.exe); d++) {
    ts_device_program_info info;
    if (ts_executable_device_program(r->step_pr.exe, d, &info) == 0 && info.arena_bytes > plan)
      plan = info.arena_bytes;
  }
  struct rusage ru;
  long rss_kb = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
  ts_metrics_add("PeakRSS", TS_METRIC_PEAK, (int64_t)rss_kb * 1024);
  printf("memory: step plan %.1f MiB of temporaries per device, peak RSS %.1f MiB\n", (double)plan / (1 << 20),
         (double)rss_kb / 1024);
  return CLI_EXIT_OK;
}

int train_epochs(train_run *r) {
  const train_opts *o = &r->o;
  /* Worker threads prepare the next batches (shuffled per (seed, epoch),
   * augmented per sample) while a step runs. */
  int lrc = train_loader_new(r);
  if (lrc != CLI_EXIT_OK) return lrc;

  loop_state st = {0};
  if ((o->resume || o->init_from) && train_ckpt_restore(r, &st.step) < 0) return train_lib_error();
  st.first_step = st.step;
  st.start = train_now_s();
  if (o->profile) train_profile_begin(); /* tracing on, if it is not: the device parts of a step */
  train_stop_install(r->rank == 0 || o->all_ranks, r->rank, r->nproc); /* from here on, Ctrl-C stops after a step */
  int64_t first_epoch = 1 + st.step / r->steps_per_epoch; /* a resumed run continues in its epoch */
  for (int64_t epoch = first_epoch; epoch <= o->epochs && st.step < r->total_steps; epoch++) {
    double epoch_loss = 0;
    int64_t epoch_n = 0;
    int rc = train_one_epoch(r, &st, epoch, &epoch_loss, &epoch_n);
    if (rc == CLI_EXIT_OK && !r->stop_signal && o->model != MODEL_GPT) /* the GPT: val loss every --eval-every */
      rc = evaluate_epoch(r, &st, epoch, epoch_loss, epoch_n);
    if (rc == CLI_EXIT_OK && !r->stop_signal && st.step < r->total_steps) { /* a signal during the evaluation */
      int sig = train_stop_requested(r->client);
      if (sig < 0) rc = train_lib_error();
      else r->stop_signal = sig;
    }
    if (rc != CLI_EXIT_OK) return rc;
    if (r->stop_signal) {
      train_images_report(r);
      return train_interrupted(r, &st);
    }
  }
  if (train_ckpt_finish(r) < 0) return train_lib_error(); /* the last checkpoint, written in the background */
  train_images_report(r);
  if (st.step == st.first_step && st.step > 0) { /* resumed at the end of the run */
    printf("done: the checkpoint is at step %lld of %lld; nothing left to train\n", (long long)st.step,
           (long long)r->total_steps);
    return CLI_EXIT_OK;
  }
  char e1[32];
  int64_t ran = st.step - st.first_step;
  if (o->model == MODEL_GPT)
    printf("done: %lld steps in %s (%.0f tokens/s training), final val loss %.4f\n", (long long)st.step,
           fmt_duration(train_now_s() - st.start, e1, sizeof e1),
           st.train_time > 0 ? (double)(ran * o->batch * o->seq) / st.train_time : 0.0, r->val_loss);
  else
    printf("done: %lld steps in %s (%.0f samples/s training), final test accuracy %.2f%%\n", (long long)st.step,
           fmt_duration(train_now_s() - st.start, e1, sizeof e1),
           st.train_time > 0 ? (double)(ran * o->batch) / st.train_time : 0.0, 100 * st.acc);
  if (report_tail(r, &st) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
  if (o->model == MODEL_GPT) {
    fflush(stdout);
    return train_gpt_sample(r); /* after the report: the samples are the run's last words */
  }
  return CLI_EXIT_OK;
}
