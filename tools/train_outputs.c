/* train_outputs.c — the files `tessel train` writes (train_outputs.h has the
 * rules): checks before the run, the log opened at the first step and flushed
 * per record, metrics and traces at the end, write errors in the exit code. */
#include "train_outputs.h"

#include <errno.h>
#include <limits.h> // PATH_MAX
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> // access

#include "args.h"            // cli_error, exit codes
#include "tessel/metrics.h"  // ts_metrics_write_json, ts_trace_stop, ts_trace_take_env_path
#include "train_run.h"

/* What a path names, for the checks and the messages. */
typedef struct {
  bool exists;
  struct stat st;
  char canon[PATH_MAX + 256]; /* a path that does not exist yet: real directory + "/" + name */
} path_id;

/* The directory part of path ("." when none). */
static void dir_of(const char *path, char *dir, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, n, ".");
  else if (slash == path) snprintf(dir, n, "/");
  else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* Checks one output path; fills *id and out->special. The output is written
 * in place when it is a character device or FIFO, or an existing file that is
 * not `replaced` (the log: truncated and written); otherwise it is created,
 * or replaced by a rename (metrics, traces), so its directory must take new
 * files. */
static int check_path(train_output *out, bool replaced, path_id *id) {
  const char *p = out->path;
  memset(id, 0, sizeof *id);
  if (!*p) {
    cli_error(CMD, "%s: empty file name", out->flag);
    return -1;
  }
  if (stat(p, &id->st) == 0) {
    id->exists = true;
    if (S_ISDIR(id->st.st_mode)) {
      cli_error(CMD, "%s: '%s' is a directory; give a file name (e.g. '%s/%s')", out->flag, p, p,
                out->flag[0] == '-' ? out->flag + 2 : "trace");
      return -1;
    }
    if (S_ISCHR(id->st.st_mode)) out->special = "a character device";
    else if (S_ISFIFO(id->st.st_mode)) out->special = "a FIFO";
    else if (!S_ISREG(id->st.st_mode)) {
      cli_error(CMD, "%s: '%s' is %s; tessel writes regular files, character devices and FIFOs only", out->flag,
                p, S_ISBLK(id->st.st_mode) ? "a block device" : "a socket");
      return -1;
    }
    if (access(p, W_OK) != 0) {
      cli_error(CMD, "%s: cannot write '%s': %s", out->flag, p, strerror(errno));
      return -1;
    }
    if (out->special || !replaced) return 0; /* written in place: the directory is not touched */
  } else if (errno != ENOENT) {
    cli_error(CMD, "%s: cannot use '%s': %s", out->flag, p, strerror(errno));
    return -1;
  }
  /* a new file, or a regular one replaced by rename: the directory must exist and take files */
  char dir[PATH_MAX], real[PATH_MAX];
  dir_of(p, dir, sizeof dir);
  struct stat ds;
  if (stat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode)) {
    cli_error(CMD, "%s: cannot write '%s': directory '%s': %s", out->flag, p, dir,
              stat(dir, &ds) != 0 ? strerror(errno) : "is not a directory");
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    cli_error(CMD, "%s: cannot write '%s': directory '%s': %s", out->flag, p, dir, strerror(errno));
    return -1;
  }
  const char *slash = strrchr(p, '/');
  if (realpath(dir, real)) snprintf(id->canon, sizeof id->canon, "%s/%s", real, slash ? slash + 1 : p);
  return 0;
}

/* Two outputs name the same file (a character device such as /dev/null may
 * take several: nothing is read back from it). */
static bool same_file(const path_id *a, const path_id *b) {
  if (a->exists != b->exists) return false;
  if (a->exists)
    return a->st.st_dev == b->st.st_dev && a->st.st_ino == b->st.st_ino && !S_ISCHR(a->st.st_mode);
  return a->canon[0] && strcmp(a->canon, b->canon) == 0;
}

/* The dataset file that an existing output is, or NULL: writing there would
 * destroy the training data. The candidates are every name the loaders read. */
static const char *dataset_file(const train_opts *o, const path_id *id, const char *path, char *buf, size_t n) {
  if (!id->exists || !S_ISREG(id->st.st_mode)) return NULL;
  if (o->dataset == DATA_IMAGEFOLDER) { /* any file under DIR/train or DIR/val */
    char root[PATH_MAX], file[PATH_MAX];
    if (!realpath(o->data_dir, root) || !realpath(path, file)) return NULL;
    for (int v = 0; v < 2; v++) {
      snprintf(buf, n, "%s/%s/", root, v ? "val" : "train");
      if (strncmp(file, buf, strlen(buf)) == 0) return snprintf(buf, n, "%s", file), buf;
    }
    return NULL;
  }
  static const char *const mnist[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                      "t10k-labels-idx1-ubyte"};
  static const char *const cifar[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                                      "data_batch_5.bin", "test_batch.bin"};
  bool is_cifar = o->dataset == DATA_CIFAR10;
  const char *const *names = is_cifar ? cifar : mnist;
  int count = is_cifar ? 6 : 4;
  for (int k = 0; k < count; k++)
    for (int v = 0; v < 2; v++) { /* fashion-mnist: plain or .gz; cifar10: DIR or DIR/cifar-10-batches-bin */
      if (is_cifar) snprintf(buf, n, "%s%s/%s", o->data_dir, v ? "/cifar-10-batches-bin" : "", names[k]);
      else snprintf(buf, n, "%s/%s%s", o->data_dir, names[k], v ? ".gz" : "");
      struct stat st;
      if (stat(buf, &st) == 0 && st.st_dev == id->st.st_dev && st.st_ino == id->st.st_ino) return buf;
    }
  return NULL;
}

int train_outputs_check(train_run *r) {
  train_opts *o = &r->o;
  /* TESSEL_TRACE: this command writes it like --trace (after the first step,
   * errors in the exit code) instead of the library at exit */
  const char *env_trace = ts_trace_take_env_path();
  if (r->rank != 0) { /* rank 0 writes the files */
    o->metrics = o->trace = NULL;
    return CLI_EXIT_OK;
  }
  r->out[OUT_LOG] = (train_output){.flag = "--log-json", .path = o->log_json};
  r->out[OUT_METRICS] = (train_output){.flag = "--metrics", .path = o->metrics};
  r->out[OUT_TRACE] = (train_output){.flag = "--trace", .path = o->trace};
  r->out[OUT_ENV_TRACE] = (train_output){.flag = "TESSEL_TRACE", .path = env_trace};
  path_id ids[OUT_COUNT];
  char buf[PATH_MAX + 64];
  for (int k = 0; k < OUT_COUNT; k++) {
    if (!r->out[k].path) continue;
    if (check_path(&r->out[k], k != OUT_LOG, &ids[k]) < 0) return CLI_EXIT_USAGE;
    const char *data = dataset_file(o, &ids[k], r->out[k].path, buf, sizeof buf);
    if (data) {
      bool same = strcmp(data, r->out[k].path) == 0;
      cli_error(CMD, "%s: '%s' is a file of the dataset%s%s%s; writing it would destroy the training data",
                r->out[k].flag, r->out[k].path, same ? "" : " ('", same ? "" : data, same ? "" : "')");
      return CLI_EXIT_USAGE;
    }
    for (int j = 0; j < k; j++) {
      if (!r->out[j].path || !same_file(&ids[j], &ids[k])) continue;
      if (k == OUT_ENV_TRACE && j == OUT_TRACE) { /* the same trace asked twice: written once */
        r->out[k].path = NULL;
        break;
      }
      cli_error(CMD, "%s and %s name the same file '%s'; give each output its own file", r->out[j].flag,
                r->out[k].flag, r->out[k].path);
      return CLI_EXIT_USAGE;
    }
  }
  return CLI_EXIT_OK;
}

int train_log_open(train_run *r) {
  train_output *out = &r->out[OUT_LOG];
  if (!out->path || r->log) return CLI_EXIT_OK;
  if (!(r->log = fopen(out->path, "w"))) {
    cli_error(CMD, "--log-json: cannot open '%s': %s", out->path, strerror(errno));
    return CLI_EXIT_FAIL;
  }
  out->written = true;
  return CLI_EXIT_OK;
}

int train_log_flush(train_run *r) {
  if (!r->log) return CLI_EXIT_OK;
  if (fflush(r->log) != 0 || ferror(r->log)) {
    cli_error(CMD, "--log-json: cannot write '%s': %s", r->out[OUT_LOG].path, strerror(errno));
    fclose(r->log); /* said once: nothing more goes there */
    r->log = NULL;
    return CLI_EXIT_FAIL;
  }
  return CLI_EXIT_OK;
}

/* Writes one metrics or trace output; false after printing why. */
static bool write_output(train_output *out, int k) {
  int rc = k == OUT_METRICS ? ts_metrics_write_json(out->path) : ts_trace_stop(out->path);
  if (rc < 0) {
    cli_error(CMD, "%s: %s", out->flag, ts_last_error());
    return false;
  }
  out->written = true;
  return true;
}

int train_outputs_finish(train_run *r, int rc) {
  bool ok = true;
  if (r->log) {
    ok = train_log_flush(r) == CLI_EXIT_OK;
    if (fclose(r->log) != 0 && ok) {
      cli_error(CMD, "--log-json: cannot write '%s': %s", r->out[OUT_LOG].path, strerror(errno));
      ok = false;
    }
    r->log = NULL;
  }
  if (r->steps_done > 0) { /* training started: the run's metrics and traces replace the old ones */
    if (r->out[OUT_METRICS].path) {
      char *rep = ts_metrics_short_report();
      if (rep) printf("metrics:\n%s", rep);
      free(rep);
    }
    for (int k = OUT_METRICS; k < OUT_COUNT; k++)
      if (r->out[k].path) ok = write_output(&r->out[k], k) && ok;
  }
  bool any = false;
  for (int k = 0; k < OUT_COUNT; k++) {
    const train_output *out = &r->out[k];
    if (!out->written) continue;
    printf("%s %s '%s'", any ? "," : "saved:", out->flag, out->path);
    if (k == OUT_LOG) printf(" (%lld steps)", (long long)r->steps_done);
    if (out->special) printf(" (%s: written in place)", out->special);
    any = true;
  }
  if (any) printf("\n");
  return rc == CLI_EXIT_OK && !ok ? CLI_EXIT_FAIL : rc;
}
