/* ckpt_io.c — benchmark: save and restore time of a training state
 * (parameters + AdamW moments, the running statistics) through
 * tessel/ckpt.h, against the disk's own sequential write and read bandwidth
 * measured in the same run on the same directory (bench/run_ckpt.sh runs dd
 * beside it). ResNet-50 (25.6 M parameters, 307 MB of state in f32) by
 * default; --model gpt: GPT-2 small's parameters (12 layers, d_model 768,
 * 12 heads, vocab 50257; 124 M parameters, 1.49 GB of state) with a
 * 64-token context (--gpt L,D,H,T,V for another; the step's cost grows with T).
 *
 *   bench_ckpt_io [--model resnet50|resnet20|mlp|gpt] [--gpt L,D,H,T,V] [--dir DIR] [--rounds N]
 *                 [--isolate nohash,nowrite,nocopy,buffered] [--hold-ab N]
 *
 * Each round runs two training steps of the model (AdamW, batch 2: the
 * program of tessel train, updating the state in place), saves the state
 * through a background saver (ts_ckpt_saver: the caller waits for the plan
 * and the holds of the device buffers only; a thread copies the held blocks
 * chunk by chunk into a small ring while two more write the chunks before
 * (O_DIRECT); fsync of every file and the directory, as a real save), runs
 * the next step at once while the save is in flight (its donated parameters
 * are held: it computes into their spare memory), waits for the save, then
 * opens the latest and loads every tensor back into the device buffers, cold:
 * the checkpoint's files are evicted from the page cache first
 * (posix_fadvise DONTNEED; run_ckpt.sh evicts dd's file the same way before
 * dd reads it; the load's O_DIRECT reads bypass the cache anyway). Prints
 *   RESULT ckpt <model> bytes=B tensors=N save_median_s=.. load_median_s=.. save_GBps=.. load_GBps=..
 *          cold_load=0|1 snapshot_median_s=.. copy_median_s=.. write_median_s=.. step_median_s=..
 *          step_during_save_median_s=.. step_wait_median_s=.. step_wait_fraction=..
 *          busy_save_s=.. busy_steps=.. busy_step_s=.. save_alone_median_s=.. save_alone_GBps=..
 *          load_alone_median_s=.. alone_fill_cpu_ms=.. alone_io_cpu_ms=..
 * (save: from the start of the save to the checkpoint in place; snapshot:
 * the caller's wait inside the save; copy: from the start of the files stage
 * to the last held byte copied, write: the files stage to the fsync — the
 * copy overlaps the write, so save ~ write + commit, not copy + write; step_wait = snapshot + how much longer
 * the step during the save took than the faster step before it (0 if not longer),
 * per round; step_wait_fraction = its median / the save's median, the issue's
 * target <= 0.10; busy_*: one more save with steps run back to back, polling,
 * until it is complete: its seconds, the steps and their mean; the saver's
 * threads run at TESSEL_CKPT_PRIORITY, low by default) and checks every
 * round that what was loaded equals what was saved, bit for bit (a hash of
 * every device value before the save; the step during the save changed
 * them, so the load is what brings them back); exit 1 otherwise. Each
 * round then also saves the same state STANDALONE (save_alone_*: the saver's
 * save waited for at once, nothing running beside it, as `tessel train`'s
 * final save: the same files, fsync and renames; like-for-like with dd,
 * which runs alone too), runs a step (the state changes) and loads that
 * checkpoint back, checked bit for bit the same way (load_alone_*; alone_*_cpu_ms:
 * its filler's and write threads' CPU ms).
 *
 * Each round's line on stderr also gives the per-stage costs of the save's
 * files stage (ckpt_last_stage_times: CPU ms of the filler thread, of it in
 * the copies and in the checksums, of the write threads; the fsync's wall
 * ms) and the process's CPU seconds over the step before the save and over
 * the save + the step run beside it: less load-sensitive than wall times.
 * RESULT adds fill_cpu_ms, copy_cpu_ms, hash_cpu_ms, io_cpu_ms, fsync_ms
 * (hash_cpu_ms 0 where the copy hashes in the same pass: format 2, no --isolate)
 * (medians). --isolate switches parts of the save off (ckpt_save_isolate;
 * buffered: no O_DIRECT) to see which one slows the step beside it; the
 * checkpoints are then not loadable, so the loads and their check are
 * skipped (load_median_s=0). */
#define _GNU_SOURCE /* posix_fadvise */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h> /* getrusage: the held step's faults */
#include <sys/stat.h>
#include <unistd.h>

#include <time.h> /* CLOCK_PROCESS_CPUTIME_ID */

#include "bench_util.h" /* now_s, cmp_double, median */
#include "proc_stats.h" /* the step threads' CPU, faults, run-queue delay */
#include "ckpt/ckpt_internal.h" /* ckpt_save_isolate, ckpt_save_direct, ckpt_last_stage_times */
#include "model_graph.h" /* the training step of tessel train: parameters + optimizer state */

#include "tessel/tessel.h"

static void die(const char *what) {
  fprintf(stderr, "bench_ckpt_io: %s: %s\n", what, ts_last_error());
  exit(1);
}

/* Evicts every file under dir from the page cache (posix_fadvise DONTNEED
 * after fdatasync: clean pages go; no root needed, nothing else on the
 * machine is touched): the load that follows reads the disk. 1 if every file
 * was evicted. bench/run_ckpt.sh evicts dd's file the same way. */
static int evict_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int ok = 1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat st;
    if (stat(p, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      ok &= evict_dir(p);
      continue;
    }
    int fd = open(p, O_RDONLY);
    if (fd < 0) {
      ok = 0;
      continue;
    }
    ok &= fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    close(fd);
  }
  closedir(d);
  return ok;
}

/* CPU seconds of the whole process. */
static double process_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* --isolate LIST: comma-separated nohash, nowrite, nocopy, buffered; -1 on a bad word. */
static int parse_isolate(const char *list) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *w = strtok(buf, ","); w; w = strtok(NULL, ",")) {
    if (!strcmp(w, "nohash")) ckpt_save_isolate |= CKPT_ISOLATE_NOHASH;
    else if (!strcmp(w, "nowrite")) ckpt_save_isolate |= CKPT_ISOLATE_NOWRITE;
    else if (!strcmp(w, "nocopy")) ckpt_save_isolate |= CKPT_ISOLATE_NOCOPY;
    else if (!strcmp(w, "buffered")) ckpt_save_direct = 0;
    else {
      fprintf(stderr, "bench_ckpt_io: --isolate: unknown part '%s' (valid: nohash, nowrite, nocopy, buffered)\n", w);
      return -1;
    }
  }
  return 0;
}

/* A hash of every entry's device values (to check a load bit for bit). */
static uint64_t state_hash(ts_params *p, ts_client *c) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < ts_params_count(p); i++) {
    ts_buffer *b = ts_params_buffer(p, c, i);
    size_t bytes = (size_t)ts_params_numel(p, i) * 4;
    unsigned char *v = malloc(bytes);
    if (!v || ts_buffer_read(b, v, bytes) < 0) die("reading a parameter");
    for (size_t k = 0; k < bytes; k++) h = (h ^ v[k]) * 1099511628211ull;
    free(v);
  }
  return h;
}

/* One training step (the state updated in place); its seconds. */
static double run_step(ts_executable *e, model_io *io, ts_buffer **out, int n_out) {
  double t0 = now_s();
  out[0] = io->result;
  for (int k = 1; k < n_out; k++) out[k] = NULL;
  if (ts_execute(e, io->in, out) < 0) die("step");
  double t = now_s() - t0;
  for (int k = 1; k < n_out; k++) { /* outputs that are not in-place updates (none expected) */
    bool aliased = false;
    for (int i = 0; i < io->n_in && !aliased; i++) aliased = out[k] == io->in[i];
    if (!aliased) ts_buffer_free(out[k]);
  }
  return t;
}

/* Evicts dir's files, loads the latest checkpoint under dir into the device
 * buffers and checks the state's hash against want (exit 1 otherwise); the
 * load's seconds. *cold &= whether every file was evicted. */
static double load_checked(const char *dir, ts_params *p, ts_client *c, uint64_t want, int *cold, const char *which) {
  *cold &= evict_dir(dir);
  double t0 = now_s();
  ts_ckpt *ck = ts_ckpt_open(dir);
  if (!ck || ts_ckpt_load_params(ck, c, p, false) < 0) die("load");
  double t = now_s() - t0;
  ts_ckpt_close(ck);
  if (state_hash(p, c) != want) {
    fprintf(stderr, "bench_ckpt_io: the loaded state differs from the saved one (%s save)\n", which);
    exit(1);
  }
  return t;
}

/* The standalone save: the saver's save, waited for at once with nothing
 * running beside it (what `tessel train` does for its final save: the same
 * files, fsync, renames); its seconds from the call to the checkpoint in place. */
static double save_alone(ts_ckpt_saver *sv, const char *dir, ts_params *p, int64_t step) {
  ts_ckpt_meta meta = {.step = step};
  double t0 = now_s();
  if (ts_ckpt_saver_save_params(sv, dir, p, &meta, 1) < 0 || ts_ckpt_saver_wait(sv) < 0) die("standalone save");
  return now_s() - t0;
}

/* --hold-ab N: what holding the state costs the step by itself, with no
 * saver running: N pairs of steps, one plain (the state updated in place),
 * one with every parameter buffer held (ts_buffer_hold_new; the step
 * computes into the spare memory, hold.c), released after it, interleaved
 * (plain, held, plain, held, ...) after one held warm-up step (it allocates
 * the spare). Prints the medians of wall seconds and process CPU seconds:
 *   RESULT hold_ab <model> plain_s=.. held_s=.. plain_cpu_s=.. held_cpu_s=.. pairs=N
 * The held step's extra is the out-of-place update's own cost (its stores
 * go to memory the step has not read: read for ownership), apart from the
 * saver's copy and writes beside it. */
static void hold_ab(ts_executable *exe, model_io *io, ts_buffer **outs, int n_out, ts_params *p, ts_client *c,
                    const char *model, int pairs) {
  int n = ts_params_count(p);
  ts_buffer_hold **h = calloc((size_t)n + 1, sizeof *h);
  double *w[2], *u[2];
  for (int k = 0; k < 2; k++) w[k] = calloc((size_t)pairs + 1, sizeof **w), u[k] = calloc((size_t)pairs + 1, sizeof **u);
  if (!h || !w[0] || !w[1] || !u[0] || !u[1]) die("out of memory");
  for (int r = -1; r < pairs; r++) {
    for (int held = r < 0 ? 1 : 0; held < 2; held++) {
      for (int i = 0; held && i < n; i++) { /* entries may share a buffer (tied weights): one hold each */
        ts_buffer *b = ts_params_buffer(p, c, i);
        bool seen = false;
        for (int k = 0; k < i && !seen; k++) seen = h[k] && ts_params_buffer(p, c, k) == b;
        if (!seen && !(h[i] = ts_buffer_hold_new(b))) die("hold");
      }
      struct rusage ru0, ru1;
      getrusage(RUSAGE_SELF, &ru0);
      double cpu0 = process_cpu_s(), t = run_step(exe, io, outs, n_out), cpu = process_cpu_s() - cpu0;
      getrusage(RUSAGE_SELF, &ru1);
      for (int i = 0; i < n; i++) ts_buffer_hold_release(h[i]), h[i] = NULL;
      if (r >= 0) w[held][r] = t, u[held][r] = cpu;
      double sys = (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6;
      if (r >= 0)
        fprintf(stderr, "hold_ab pair %d %s: %.3f s, CPU %.3f s (system %.3f s), minor faults %ld\n", r + 1,
                held ? "held " : "plain", t, cpu, sys, ru1.ru_minflt - ru0.ru_minflt);
    }
  }
  printf("RESULT hold_ab %s plain_s=%.3f held_s=%.3f plain_cpu_s=%.3f held_cpu_s=%.3f pairs=%d\n", model,
         median(w[0], pairs), median(w[1], pairs), median(u[0], pairs), median(u[1], pairs), pairs);
  for (int k = 0; k < 2; k++) free(w[k]), free(u[k]);
  free(h);
}

/* The model's executable, graph, parameters and client, freed in reverse order of creation. */
static void free_model(model_io *io, ts_executable *exe, ts_graph *g, ts_params *p, ts_client *c) {
  model_io_free(io);
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
}

int main(int argc, char **argv) {
  const char *model = "resnet50", *dir = "/tmp/tessel_bench_ckpt";
  int rounds = 3, hold_pairs = 0;
  bool isolate = false;
  ts_gpt_config gpt = {.layers = 12, .d_model = 768, .heads = 12, .seq = 64, .vocab = 50257};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--hold-ab")) hold_pairs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--isolate")) {
      if (parse_isolate(argv[i + 1]) < 0) return 2;
      isolate = true;
    }
    else if (!strcmp(argv[i], "--gpt") &&
             sscanf(argv[i + 1], "%ld,%ld,%ld,%ld,%ld", &gpt.layers, &gpt.d_model, &gpt.heads, &gpt.seq,
                    &gpt.vocab) == 5) {
    } else {
      fprintf(stderr, "usage: bench_ckpt_io [--model resnet50|resnet20|mlp|gpt] [--gpt L,D,H,T,V] [--dir DIR] "
                      "[--rounds N] [--isolate nohash,nowrite,nocopy,buffered] [--hold-ab N]\n");
      return 2;
    }
  }
  bool r50 = !strcmp(model, "resnet50"), r20 = !strcmp(model, "resnet20"), is_gpt = !strcmp(model, "gpt");
  if (!r50 && !r20 && !is_gpt && strcmp(model, "mlp")) {
    fprintf(stderr, "bench_ckpt_io: --model: unknown model '%s' (valid: resnet50, resnet20, mlp, gpt)\n", model);
    return 2;
  }
  if (rounds < 1) rounds = 1;
  ts_client *c = ts_client_new(NULL);
  ts_params *p = ts_params_new(1);
  model_graph_spec spec = {.model = is_gpt ? MODEL_GRAPH_GPT : r50 ? MODEL_GRAPH_RESNET50 : r20 ? MODEL_GRAPH_RESNET20
                                                                                                 : MODEL_GRAPH_MLP,
                           .batch = 2, .c = r50 ? 3 : 1, .h = r50 ? 224 : 28, .w = r50 ? 224 : 28,
                           .classes = r50 ? 1000 : 10, .gpt = gpt,
                           .optim = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}};
  ts_graph *g = c && p ? model_train_graph(&spec, p) : NULL; /* declares the parameters and AdamW moments */
  if (!g) die("building the step");
  ts_executable *exe = ts_compile(c, g, NULL);
  model_io io = {0};
  if (!exe || model_io_bind(&io, g, p, c) < 0) die("compiling the step");
  int n_out = ts_graph_num_outputs(g);
  ts_buffer **outs = calloc((size_t)n_out + 1, sizeof *outs);
  float lr = 1e-5f, step1 = 1;
  int64_t seed = 1;
  if (!outs || ts_buffer_write(io.lr, &lr, sizeof lr) < 0 || ts_buffer_write(io.step, &step1, sizeof step1) < 0 ||
      (io.seed && ts_buffer_write(io.seed, &seed, sizeof seed) < 0))
    die("step inputs"); /* x, y: zeros (images; token 0) */
  size_t bytes = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    bytes += (size_t)ts_params_numel(p, i) * 4;
    if (!ts_params_buffer(p, c, i)) die("uploading");
  }
  if (hold_pairs > 0) { /* only the held-step comparison */
    hold_ab(exe, &io, outs, n_out, p, c, model, hold_pairs);
    free(outs);
    free_model(&io, exe, g, p, c);
    return 0;
  }
  double *stp = malloc((size_t)rounds * sizeof *stp), *during = malloc((size_t)rounds * sizeof *during);
  double *wait = malloc((size_t)rounds * sizeof *wait), *copy = malloc((size_t)rounds * sizeof *copy);
  double *save = malloc((size_t)rounds * sizeof *save), *load = malloc((size_t)rounds * sizeof *load);
  double *snap = malloc((size_t)rounds * sizeof *snap), *write = malloc((size_t)rounds * sizeof *write);
  /* per round: the stage costs (ms), the process's CPU over the step before and over save + step beside it */
  double *fill = malloc((size_t)rounds * sizeof *fill), *cpy = malloc((size_t)rounds * sizeof *cpy);
  double *hsh = malloc((size_t)rounds * sizeof *hsh), *ioc = malloc((size_t)rounds * sizeof *ioc);
  double *fsy = malloc((size_t)rounds * sizeof *fsy), *cpu_step = malloc((size_t)rounds * sizeof *cpu_step);
  double *cpu_during = malloc((size_t)rounds * sizeof *cpu_during);
  /* the standalone save per round: its seconds, its load's, its filler's and write threads' CPU ms */
  double *alone = calloc((size_t)rounds, sizeof *alone), *alone_load = calloc((size_t)rounds, sizeof *alone_load);
  double *alone_fill = calloc((size_t)rounds, sizeof *alone_fill), *alone_io = calloc((size_t)rounds, sizeof *alone_io);
  /* per round: the step threads' counters over the step before the save and over the one beside it */
  proc_sample *ps_step = calloc((size_t)rounds, sizeof *ps_step);
  proc_sample *ps_during = calloc((size_t)rounds, sizeof *ps_during);
  proc_threads steppers; /* the threads before any save: the caller, the device and OpenMP threads */
  int cold = 1;
  /* One saver for every round, as tessel train keeps one: the snapshot
   * memory is allocated by the first save and reused. */
  ts_ckpt_saver *sv = ts_ckpt_saver_new(c);
  if (!sv) die("saver");
  for (int r = 0; r < rounds; r++) {
    ts_ckpt_meta meta = {.step = 2 * r + 1}; /* the standalone save's: 2 * r + 2 */
    stp[r] = run_step(exe, &io, outs, n_out); /* the steps before the save: the faster one */
    if (r == 0) proc_threads_init(&steppers);
    double cpu0 = process_cpu_s();
    proc_sample q0 = proc_sample_now(&steppers);
    double t2 = run_step(exe, &io, outs, n_out);
    ps_step[r] = proc_diff(proc_sample_now(&steppers), q0);
    cpu_step[r] = process_cpu_s() - cpu0;
    if (t2 < stp[r]) stp[r] = t2;
    uint64_t want = state_hash(p, c);
    /* The background save: the caller waits for the snapshot only; then the
     * next step runs while the blocks are copied and written; then the save
     * is waited for (the write and the commit). */
    cpu0 = process_cpu_s();
    if (ts_ckpt_saver_save_params(sv, dir, p, &meta, 1) < 0) die("save");
    q0 = proc_sample_now(&steppers);
    during[r] = run_step(exe, &io, outs, n_out);
    ps_during[r] = proc_diff(proc_sample_now(&steppers), q0);
    cpu_during[r] = process_cpu_s() - cpu0;
    if (ts_ckpt_saver_wait(sv) < 0) die("save");
    const ckpt_stage_times *ct = &ckpt_last_stage_times;
    fill[r] = ct->fill_cpu_s * 1e3, cpy[r] = ct->copy_cpu_s * 1e3, hsh[r] = ct->hash_cpu_s * 1e3;
    ioc[r] = ct->io_cpu_s * 1e3, fsy[r] = ct->fsync_s * 1e3;
    ts_ckpt_save_stats st;
    ts_ckpt_saver_stats(sv, &st);
    save[r] = st.total_s, snap[r] = st.snapshot_s, write[r] = st.write_s, copy[r] = st.copy_s;
    wait[r] = st.snapshot_s + (during[r] > stp[r] ? during[r] - stp[r] : 0);
    if (state_hash(p, c) == want) {
      fprintf(stderr, "bench_ckpt_io: the step during the save did not change the state (the load check would prove nothing)\n");
      return 1;
    }
    if (isolate) { /* not a loadable checkpoint */
      load[r] = 0;
      continue;
    }
    load[r] = load_checked(dir, p, c, want, &cold, "background");
    /* The standalone save of the same state (nothing beside it), then a step
     * (the state changes), then its load brings the saved state back. */
    alone[r] = save_alone(sv, dir, p, 2 * r + 2);
    alone_fill[r] = ckpt_last_stage_times.fill_cpu_s * 1e3, alone_io[r] = ckpt_last_stage_times.io_cpu_s * 1e3;
    run_step(exe, &io, outs, n_out);
    alone_load[r] = load_checked(dir, p, c, want, &cold, "standalone");
  }
  /* A save under a busy step loop: steps run back to back (polling the saver
   * after each, as tessel train does) until the save is complete. With the
   * saver's threads at low priority (TESSEL_CKPT_PRIORITY, default low) the
   * save gets only the CPU the steps leave: this is how long it then takes. */
  double busy_save, busy_step = 0;
  int busy_steps = 0;
  {
    ts_ckpt_meta meta = {.step = 2 * rounds + 1};
    double t0 = now_s();
    if (ts_ckpt_saver_save_params(sv, dir, p, &meta, 1) < 0) die("save");
    int pr;
    do {
      busy_step += run_step(exe, &io, outs, n_out);
      busy_steps++;
    } while ((pr = ts_ckpt_saver_poll(sv)) == 1);
    if (pr < 0) die("save");
    busy_save = now_s() - t0;
    busy_step /= busy_steps;
  }
  ts_ckpt_saver_free(sv);
  for (int r = 0; r < rounds; r++)
    fprintf(stderr, "round %d: step %.3f s, step during the save %.3f s, snapshot %.4f s, copy %.3f s, write %.3f s, "
                    "save %.3f s, load %.3f s; CPU ms: fill %.1f (copy %.1f, hash %.1f), write threads %.1f; "
                    "fsync %.1f ms; process CPU: step %.3f s, save + step beside it %.3f s; standalone save %.3f s "
                    "(CPU ms: fill %.1f, write threads %.1f), its load %.3f s\n",
            r + 1, stp[r], during[r], snap[r], copy[r], write[r], save[r], load[r], fill[r], cpy[r], hsh[r], ioc[r],
            fsy[r], cpu_step[r], cpu_during[r], alone[r], alone_fill[r], alone_io[r], alone_load[r]);
  for (int r = 0; r < rounds; r++) {
    const proc_sample *a = &ps_step[r], *b = &ps_during[r];
    fprintf(stderr, "round %d step threads (before | beside the save): CPU %.3f | %.3f s, user %.3f | %.3f s, "
                    "sys %.3f | %.3f s, "
                    "run-queue delay %.3f | %.3f s, minflt %ld | %ld, majflt %ld | %ld; machine steal %.2f | %.2f s, "
                    "iowait %.2f | %.2f s\n",
            r + 1, a->cpu_s, b->cpu_s, a->user_s, b->user_s, a->sys_s, b->sys_s, a->delay_s, b->delay_s, a->minflt,
            b->minflt, a->majflt, b->majflt, a->steal_s, b->steal_s, a->iowait_s, b->iowait_s);
  }
  double ms = median(save, rounds), ml = median(load, rounds), msn = median(snap, rounds), mw = median(wait, rounds);
  printf("RESULT ckpt %s bytes=%zu tensors=%d save_median_s=%.3f load_median_s=%.3f save_GBps=%.3f load_GBps=%.3f "
         "cold_load=%d snapshot_median_s=%.4f copy_median_s=%.4f write_median_s=%.3f step_median_s=%.3f "
         "step_during_save_median_s=%.3f step_wait_median_s=%.4f step_wait_fraction=%.3f busy_save_s=%.3f "
         "busy_steps=%d busy_step_s=%.3f fill_cpu_ms=%.1f copy_cpu_ms=%.1f hash_cpu_ms=%.1f io_cpu_ms=%.1f "
         "fsync_ms=%.1f save_alone_median_s=%.3f save_alone_GBps=%.3f load_alone_median_s=%.3f "
         "alone_fill_cpu_ms=%.1f alone_io_cpu_ms=%.1f isolate=%d%s\n",
         model, bytes, ts_params_count(p), ms, ml, (double)bytes / ms / 1e9, (double)bytes / ml / 1e9, cold, msn,
         median(copy, rounds), median(write, rounds), median(stp, rounds), median(during, rounds), mw, mw / ms, busy_save,
         busy_steps, busy_step, median(fill, rounds), median(cpy, rounds), median(hsh, rounds), median(ioc, rounds),
         median(fsy, rounds), median(alone, rounds), isolate ? 0.0 : (double)bytes / median(alone, rounds) / 1e9,
         median(alone_load, rounds), median(alone_fill, rounds), median(alone_io, rounds), ckpt_save_isolate,
         ckpt_save_direct ? "" : ",buffered");
  free(ps_step), free(ps_during);
  free(alone), free(alone_load), free(alone_fill), free(alone_io);
  free(fill), free(cpy), free(hsh), free(ioc), free(fsy), free(cpu_step), free(cpu_during);
  free(save), free(load), free(snap), free(write), free(stp), free(during), free(wait), free(copy), free(outs);
  free_model(&io, exe, g, p, c);
  return 0;
}
