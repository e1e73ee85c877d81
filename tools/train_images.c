/* train_images.c — `tessel train --dataset imagefolder`: the train and val
 * folders as loader sources (decoded and augmented on the loader's worker
 * threads, tessel/imagefolder.h), the check that every process lists the
 * same files, evaluation through a second loader, and the report of files
 * skipped with --skip-bad-files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h" // cli_error
#include "tessel/imagefolder.h"
#include "train_run.h"

static int open_split(train_run *r, const char *split, bool train, ts_source **out) {
  const train_opts *o = &r->o;
  ts_imagefolder_options io = {.size = (int)o->image_size, .train = train, .skip_bad_files = o->skip_bad_files};
  if (!(*out = ts_imagefolder_open(o->data_dir, split, &io))) {
    cli_error(CMD, "--dataset imagefolder: %s", ts_last_error());
    return CLI_EXIT_FAIL;
  }
  /* every process must see the same files in the same order: the global
   * batch k is the same samples everywhere only then */
  char what[4200], text[96];
  snprintf(what, sizeof what, "the ImageFolder listing of %s/%s", o->data_dir, split);
  snprintf(text, sizeof text, "%lld files in %d classes, hash %016llx", (long long)(*out)->n, (*out)->num_classes,
           (unsigned long long)ts_imagefolder_hash(*out));
  if (ts_client_check_same(r->client, what, text) < 0) return train_lib_error();
  int64_t ignored = ts_imagefolder_ignored_files(*out);
  if (ignored)
    printf("imagefolder: %s/%s: %lld files without a .jpg, .jpeg or .png extension ignored\n", o->data_dir, split,
           (long long)ignored);
  return CLI_EXIT_OK;
}

int train_images_open(train_run *r) {
  int rc = open_split(r, "train", true, &r->train_src);
  if (rc == CLI_EXIT_OK) rc = open_split(r, "val", false, &r->test_src);
  if (rc != CLI_EXIT_OK) return rc;
  const ts_source *tr = r->train_src, *va = r->test_src;
  bool same = tr->num_classes == va->num_classes;
  for (int k = 0; same && k < tr->num_classes; k++)
    same = strcmp(ts_imagefolder_class(tr, k), ts_imagefolder_class(va, k)) == 0;
  if (!same) {
    int k = 0;
    while (k < tr->num_classes && k < va->num_classes &&
           strcmp(ts_imagefolder_class(tr, k), ts_imagefolder_class(va, k)) == 0)
      k++;
    cli_error(CMD, "--dataset imagefolder: %s/train has %d classes and %s/val %d; they differ at class %d ('%s' vs "
                   "'%s'): both splits need the same class folders",
              r->o.data_dir, tr->num_classes, r->o.data_dir, va->num_classes, k,
              k < tr->num_classes ? ts_imagefolder_class(tr, k) : "(none)",
              k < va->num_classes ? ts_imagefolder_class(va, k) : "(none)");
    return CLI_EXIT_FAIL;
  }
  /* the sizes and shape, as the in-memory datasets give them (no pixels) */
  r->train = (ts_dataset){.n = tr->n, .c = tr->c, .h = tr->h, .w = tr->w, .num_classes = tr->num_classes};
  r->test = (ts_dataset){.n = va->n, .c = va->c, .h = va->h, .w = va->w, .num_classes = va->num_classes};
  return CLI_EXIT_OK;
}

/* Index of the graph input bound to buffer b in pr (-1 if none). */
static int input_index(const program *pr, const ts_buffer *b) {
  for (int i = 0; i < pr->io.n_in; i++)
    if (pr->io.in[i] == b) return i;
  return -1;
}

/* The evaluation loader: per host (each process decodes only its devices'
 * rows of x; the labels of every row come from the listing) when training
 * loads per host over an SPMD mesh, else every process decodes everything.
 * Per host needs the listing's labels to be the samples' labels, so not
 * with --skip-bad-files (a skipped file's row holds the next file). */
static int eval_loader(train_run *r, program *full, bool *local) {
  ts_loader_options lo = {.batch = r->eval_b, .prefetch = (int)r->o.loader_workers + 1, .workers = (int)r->o.loader_workers,
                          .no_shuffle = true, .last_batch = TS_LAST_BATCH_PAD, .augment = r->norm};
  *local = false;
  if (r->nproc > 1 && r->mesh && !r->ddp && r->o.load != LOAD_GLOBAL && !r->o.skip_bad_files) {
    int ix = input_index(full, full->io.x);
    const ts_sharding *sx = ix >= 0 ? ts_executable_input_sharding(full->exe, ix) : NULL;
    if (sx && ts_buffer_reshard(full->io.x, sx) == 0) {
      ts_input_sharding in = {NULL, ts_buffer_sharding(full->io.x)}; /* x's batch dim cuts y and mask alike */
      ts_loader_options ll = lo;
      ll.mesh = r->mesh, ll.n_inputs = 1, ll.inputs = &in;
      ll.process_index = r->rank, ll.process_count = r->nproc, ll.mode = TS_LOAD_MINIBATCH;
      if ((r->eval_loader = ts_loader_new(r->test_src, &ll))) {
        printf("data: per-host evaluation: each process decodes only its devices' rows of the val batches\n");
        *local = true;
        return 0;
      }
    }
    if (r->o.load == LOAD_LOCAL)
      printf("data: evaluation: every process decodes the whole val set (per-host loading does not fit: %s)\n",
             ts_last_error());
  }
  return (r->eval_loader = ts_loader_new(r->test_src, &lo)) ? 0 : -1;
}

int train_images_evaluate(train_run *r, program *full, double *acc) {
  if (!r->eval_loader) {
    if (eval_loader(r, full, &r->eval_local) < 0) return -1;
  } else if (ts_loader_seek(r->eval_loader, 0, 0) < 0) {
    return -1;
  }
  const int K = r->test.num_classes;
  int64_t steps = ts_loader_steps_per_epoch(r->eval_loader), correct = 0;
  float *logits = malloc((size_t)(r->eval_b * K) * sizeof *logits);
  if (!logits) return -1;
  int rc = 0;
  bool local = r->eval_local;
  for (int64_t s = 0; rc == 0 && s < steps; s++) {
    const ts_loader_batch *b = ts_loader_next(r->eval_loader);
    if (!b) {
      rc = -1;
      break;
    }
    const float *x;
    const int32_t *y;
    int64_t start, valid = ts_batch_valid(b), sample = (int64_t)r->test.c * r->test.h * r->test.w;
    ts_batch_local_rows(b, &start, &x, &y, NULL);
    rc = local ? ts_batch_upload(b, "x", full->io.x)
               : ts_buffer_write(full->io.x, x, (size_t)(r->eval_b * sample) * sizeof *x);
    if (rc == 0) rc = program_run(full);
    /* collective when the logits' blocks live in several processes: every process reads */
    if (rc == 0) rc = ts_buffer_read(full->io.result, logits, (size_t)(r->eval_b * K) * sizeof *logits);
    for (int64_t i = 0; rc == 0 && i < valid; i++) { /* padding rows (past valid) are not samples */
      int best = 0;
      for (int k = 1; k < K; k++)
        if (logits[i * K + k] > logits[i * K + best]) best = k;
      int32_t label = local ? ts_imagefolder_label(r->test_src, ts_batch_sample_index(b, i)) : y[i];
      correct += best == label;
    }
  }
  free(logits);
  *acc = (double)correct / (double)r->test.n;
  return rc;
}

void train_images_report(train_run *r) {
  if (!r->train_src || !r->o.skip_bad_files) return;
  for (int s = 0; s < 2; s++) {
    const ts_source *src = s ? r->test_src : r->train_src;
    int64_t n = src ? ts_imagefolder_bad_files(src) : 0, from = r->bad_reported[s];
    if (n <= from) continue;
    printf("imagefolder: %lld unreadable %s file%s skipped so far (--skip-bad-files)%s\n", (long long)n,
           s ? "val" : "train", n == 1 ? "" : "s", n > 64 ? "; the first 64 are named" : "");
    for (int64_t k = from; k < n && k < 64; k++) {
      const char *m = ts_imagefolder_bad_file(src, k);
      printf("  skipped: %s\n", m ? m : "(message lost: out of memory)");
    }
    r->bad_reported[s] = n;
  }
  fflush(stdout);
}
