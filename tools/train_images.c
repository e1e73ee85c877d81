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

int train_images_evaluate(train_run *r, program *full, double *acc) {
  if (!r->eval_loader) {
    ts_loader_options lo = {.batch = r->eval_b, .prefetch = 2, .workers = (int)r->o.loader_workers,
                            .no_shuffle = true, .last_batch = TS_LAST_BATCH_PAD, .augment = r->norm};
    if (!(r->eval_loader = ts_loader_new(r->test_src, &lo))) return -1;
  } else if (ts_loader_seek(r->eval_loader, 0, 0) < 0) {
    return -1;
  }
  const int K = r->test.num_classes;
  int64_t steps = ts_loader_steps_per_epoch(r->eval_loader), correct = 0;
  float *logits = malloc((size_t)(r->eval_b * K) * sizeof *logits);
  if (!logits) return -1;
  int rc = 0;
  for (int64_t s = 0; rc == 0 && s < steps; s++) {
    const ts_loader_batch *b = ts_loader_next(r->eval_loader);
    const float *x;
    const int32_t *y;
    int64_t start;
    if (!b) {
      rc = -1;
      break;
    }
    ts_batch_local_rows(b, &start, &x, &y, NULL);
    int64_t valid = ts_batch_valid(b), sample = (int64_t)r->test.c * r->test.h * r->test.w;
    rc = ts_buffer_write(full->io.x, x, (size_t)(r->eval_b * sample) * sizeof *x);
    if (rc == 0) rc = program_run(full);
    if (rc == 0) rc = ts_buffer_read(full->io.result, logits, (size_t)(r->eval_b * K) * sizeof *logits);
    for (int64_t i = 0; rc == 0 && i < valid; i++) { /* padding rows (past valid) are not samples */
      int best = 0;
      for (int k = 1; k < K; k++)
        if (logits[i * K + k] > logits[i * K + best]) best = k;
      correct += best == y[i];
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
