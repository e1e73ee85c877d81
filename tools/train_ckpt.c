/* train_ckpt.c — checkpoints of `tessel train`: --save-dir/--save-every/--keep
 * write them (tessel/ckpt.h: sharded, atomic, collective under mpirun),
 * --resume continues a saved run exactly (parameters, optimizer state, step,
 * the loader's position; the learning rate and dropout seeds follow from the
 * step), --init-from starts a new run from saved model weights.
 *
 * A resumed run must be the same run: the configuration that decides the
 * numbers (model, data, batch, optimizer and its hyperparameters, schedule,
 * seed) is saved as "key=value" text and compared key by key; the mesh, the
 * process count and the parallel mode may change. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h> // strtod
#include <string.h>

#include "tessel/ckpt.h"
#include "util/error.h" // set_error: the messages train_lib_error prints
#include "train_run.h"

/* The shortest "%.Ng" that reads back as x (so 0.05, not 0.050000000000000003). */
static const char *fmt_exact(double x, char *buf, size_t n) {
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, x);
    if (strtod(buf, NULL) == x) break;
  }
  return buf;
}

/* What must not change between a run and its resumption. */
static void run_config(const train_run *r, char *buf, size_t n) {
  const train_opts *o = &r->o;
  char lr[32], wd[32], mom[32];
  snprintf(buf, n,
           "model=%s dataset=%s batch=%lld optimizer=%s lr=%s weight_decay=%s momentum=%s schedule=%s "
           "warmup=%lld total_steps=%lld seed=%llu holdout=%lld",
           train_model_names[o->model], train_dataset_names[o->dataset], (long long)o->batch,
           train_optim_names[o->optimizer], fmt_exact(o->lr, lr, sizeof lr), fmt_exact(o->weight_decay, wd, sizeof wd),
           fmt_exact(o->momentum, mom, sizeof mom), train_sched_names[o->schedule], (long long)r->warmup,
           (long long)r->total_steps, (unsigned long long)o->seed, (long long)o->holdout);
}

/* Keys run_config gained after checkpoints were written: a checkpoint
 * without one was saved with its default (a run before --holdout held
 * nothing out). */
static const char *later_key_default(const char *key) {
  return strcmp(key, "holdout") == 0 ? "0" : "(not saved)";
}

/* Appends to diff every key whose value differs between the saved text and
 * this run's ("batch 128 -> 64"); returns how many. */
static int config_diff(const char *saved, const char *now, char *diff, size_t n) {
  int count = 0;
  size_t len = 0;
  diff[0] = 0;
  const char *p = now;
  while (*p) {
    while (*p == ' ') p++;
    const char *eq = strchr(p, '='), *end = strchr(p, ' ');
    if (!end) end = p + strlen(p);
    if (!eq || eq > end) break;
    char key[64], mine[128], theirs[128];
    snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
    snprintf(theirs, sizeof theirs, "%s", later_key_default(key));
    snprintf(mine, sizeof mine, "%.*s", (int)(end - eq - 1), eq + 1);
    char pat[72];
    snprintf(pat, sizeof pat, "%s=", key);
    for (const char *q = saved; (q = strstr(q, pat)) != NULL; q++)
      if (q == saved || q[-1] == ' ') {
        const char *v = q + strlen(pat), *ve = strchr(v, ' ');
        snprintf(theirs, sizeof theirs, "%.*s", (int)(ve ? ve - v : (long)strlen(v)), v);
        break;
      }
    char *e1, *e2; /* numbers compare as numbers: "0.9" and "0.90000000000000002" are one value */
    double x1 = strtod(mine, &e1), x2 = strtod(theirs, &e2);
    bool same = strcmp(mine, theirs) == 0 || (e1 != mine && !*e1 && e2 != theirs && !*e2 && x1 == x2);
    if (!same && len < n) {
      len += (size_t)snprintf(diff + len, n - len, "%s%s %s (saved) -> %s (now)", count ? ", " : "", key, theirs, mine);
      count++;
    }
    p = end;
  }
  return count;
}

/* --save-dir: the background saver of the run (tessel/ckpt.h): a save
 * returns after the snapshot of the state, the files are written while the
 * next steps run; polled after every step, waited for at the end and on a
 * signal. At most one save in flight: the next one waits for it. */
static ts_ckpt_saver *saver;
static int reported;         /* saves completed and announced */
static int64_t last_started = -1; /* the step of the last save started */

/* Starts the save of the state after step `step` (returns after the snapshot). */
static int ckpt_start(train_run *r, int64_t step) {
  const train_opts *o = &r->o;
  ts_ckpt_meta m = {.step = step, .epoch = step / r->steps_per_epoch, .epoch_step = step % r->steps_per_epoch,
                    .has_optim = true, .optim = r->gs.optim, .has_schedule = true, .schedule = r->sched,
                    .seed = o->seed, .has_loader = true, .program_hash = r->program_hash};
  if (m.optim.kind == TS_OPTIM_ADAMW) { /* the values used, not ts_optim_config's 0 = default */
    if (m.optim.beta1 == 0) m.optim.beta1 = 0.9;
    if (m.optim.beta2 == 0) m.optim.beta2 = 0.999;
    if (m.optim.eps == 0) m.optim.eps = 1e-8;
  }
  run_config(r, m.config, sizeof m.config);
  snprintf(m.mesh, sizeof m.mesh, "%s", r->ddp ? "ddp" : o->mesh ? o->mesh : "");
  /* The position of the next batch: the loader's saved state replays from there. */
  if (ts_loader_save(r->loader, m.loader) < 0) return -1;
  if (!saver && !(saver = ts_ckpt_saver_new(r->client))) return -1;
  last_started = step;
  return ts_ckpt_saver_save_params(saver, o->save_dir, r->params, &m, (int)o->keep);
}

/* Announces saves completed since the last call (rank 0). */
static void ckpt_report(const train_run *r) {
  ts_ckpt_save_stats st;
  if (!saver || ts_ckpt_saver_stats(saver, &st) < 0 || st.saves == reported) return;
  reported = st.saves;
  char mp[160] = ""; /* several processes: the commit (tessel/ckpt.h) */
  if (ts_client_process_count(r->client) > 1)
    snprintf(mp, sizeof mp, "; committed %.3fs after the last process's file, the steps waited %.3fs for its barriers",
             st.commit_lag_s, st.commit_wait_s);
  if (r->rank == 0)
    printf("checkpoint: step %lld saved to %s/step-%08lld in %.2fs (training waited %.3fs for the snapshot; "
           "%.1f MB written in the background in %.2fs%s)\n",
           (long long)st.step, r->o.save_dir, (long long)st.step, st.total_s, st.snapshot_s, (double)st.bytes / 1e6,
           st.write_s, mp);
  fflush(stdout);
}

int train_ckpt_maybe_save(train_run *r, int64_t step) {
  const train_opts *o = &r->o;
  if (!o->save_dir) return 0;
  /* The save in flight: done? (its error, if any, ends the run here) */
  if (saver && ts_ckpt_saver_poll(saver) < 0) return -1;
  ckpt_report(r);
  if (!(o->save_every && step % o->save_every == 0) && step != r->total_steps) return 0;
  int rc = ckpt_start(r, step);
  ckpt_report(r); /* the previous save, if this one had to wait for it */
  return rc;
}

int train_ckpt_save(train_run *r, int64_t step) {
  if (last_started != step) { /* (a save of this step may be in flight) */
    int rc = ckpt_start(r, step);
    ckpt_report(r); /* the previous save, if this one had to wait for it */
    if (rc < 0) return -1;
  }
  return train_ckpt_finish(r);
}

int train_ckpt_finish(train_run *r) {
  if (!saver) return 0;
  int rc = ts_ckpt_saver_wait(saver);
  ckpt_report(r);
  ts_ckpt_saver_free(saver); /* the run saves no more: its snapshot memory goes back now */
  saver = NULL;
  reported = 0;
  return rc;
}

int train_ckpt_restore(train_run *r, int64_t *step) {
  const train_opts *o = &r->o;
  const char *path = o->resume ? o->resume : o->init_from;
  *step = 0;
  ts_ckpt *ck = ts_ckpt_open(path);
  if (!ck) {
    char e[1024];
    snprintf(e, sizeof e, "%s", ts_last_error()); /* copied: set_error writes the same buffer */
    return set_error("%s: %s", o->resume ? "--resume" : "--init-from", e);
  }
  const ts_ckpt_meta *m = ts_ckpt_get_meta(ck);
  int rc = 0;
  char now[TS_CKPT_TEXT], diff[2048];
  if (o->init_from) {
    rc = ts_ckpt_load_params(ck, r->client, r->params, /*model_only=*/true);
    if (rc == 0 && r->rank == 0)
      printf("init: model weights from %s (%d tensors); optimizer state and step start fresh\n", ts_ckpt_path(ck),
             ts_ckpt_num_tensors(ck));
    ts_ckpt_close(ck);
    return rc;
  }
  run_config(r, now, sizeof now);
  if (!m->tessel_version[0])
    rc = set_error("--resume %s: a plain safetensors file holds no training state (use --init-from)", path);
  else if (config_diff(m->config, now, diff, sizeof diff) > 0)
    rc = set_error("--resume %s: this run differs from the saved one: %s (the mesh and the process count may "
                      "change; these may not)", ts_ckpt_path(ck), diff);
  else if (m->step > r->total_steps)
    rc = set_error("--resume %s: saved at step %lld, past this run's %lld steps", ts_ckpt_path(ck),
                      (long long)m->step, (long long)r->total_steps);
  else if (!m->has_loader)
    rc = set_error("--resume %s: no loader state saved", ts_ckpt_path(ck));
  if (rc < 0) {
    ts_ckpt_close(ck);
    return -1;
  }
  if (ts_ckpt_load_params(ck, r->client, r->params, /*model_only=*/false) < 0 ||
      ts_loader_restore(r->loader, m->loader) < 0) {
    ts_ckpt_close(ck);
    return -1;
  }
  *step = m->step;
  if (r->rank == 0)
    printf("resume: step %lld of %lld from %s (saved on %s%s in %d process%s)\n", (long long)m->step,
           (long long)r->total_steps, ts_ckpt_path(ck), m->mesh[0] ? "mesh " : "one device", m->mesh,
           m->process_count, m->process_count == 1 ? "" : "es");
  fflush(stdout);
  ts_ckpt_close(ck);
  return 0;
}
