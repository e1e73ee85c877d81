/* train_text.c — `tessel train`'s token data (--model gpt): the training
 * source over a text file's first 90% (or synthetic tokens), and the
 * validation batches: --eval-batches batches of --batch windows at fixed
 * positions of the last 10% (seed TEXT_VALID_SEED, whatever --seed is, so
 * runs with different seeds are scored on the same text), handed out by a
 * second loader that never shuffles. */
#include "train_text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h> // stat: is the corpus missing?

#include "args.h"      // cli_error, exit codes
#include "train_run.h"
#include "util/error.h" // set_error: the validation batches' errors

/* The validation windows' positions: fixed, independent of --seed. */
#define TEXT_VALID_SEED 0
/* Synthetic tokens: training samples (an epoch) and the two sources' seeds. */
#define SYNTH_TOKEN_SAMPLES 65536
#define SYNTH_TRAIN_SEED 1
#define SYNTH_VALID_SEED 2

/* FNV-1a of the file's bytes (0 when unreadable: the sources have read it already). */
static uint64_t file_hash(const char *path) {
  uint64_t h = 0xcbf29ce484222325ull;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
  fclose(f);
  return h;
}

/* How to make the default corpus when it is missing. */
static void corpus_hint(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 || errno != ENOENT) return;
  if (strcmp(path, TS_KJV_TEXT) == 0)
    fprintf(stderr,
            "hint: the default corpus (the King James Bible) is missing: run scripts/install-deps.sh, which installs "
            "Debian's bible-kjv and writes " TS_KJV_TEXT ", or make it yourself:\n"
            "  bible -f \"Genesis 1:1-Revelation 22:21\" | sed 's/^[^ ]* //' > kjv.txt\n"
            "and pass --data-file kjv.txt (any text file works: --data-file F)\n");
  else
    fprintf(stderr, "hint: --data-file names the text file to train on (any file: its bytes are the tokens)\n");
}

int train_text_load(train_run *r) {
  train_opts *o = &r->o;
  if (o->seq <= 0) o->seq = 128;     /* the model's defaults, if its flags left them unset */
  if (o->vocab <= 0) o->vocab = 256;
  if (o->seq > INT32_MAX / 2 || o->vocab > INT32_MAX) {
    cli_error(CMD, "--seq %lld / --vocab %lld: too large", (long long)o->seq, (long long)o->vocab);
    return CLI_EXIT_USAGE;
  }
  int64_t nval = o->eval_batches * o->batch;
  if (o->dataset == DATA_TEXT) {
    if (o->vocab != 256) {
      cli_error(CMD, "--vocab %lld: --dataset text reads bytes, whose vocabulary is 256 (other sizes are for "
                     "--dataset synthetic)", (long long)o->vocab);
      return CLI_EXIT_USAGE;
    }
    ts_text_options to = {.path = o->data_file, .seq = (int)o->seq, .split = TS_TEXT_TRAIN};
    if (!(r->train_src = ts_source_text(&to))) {
      cli_error(CMD, "--dataset text: %s", ts_last_error());
      corpus_hint(o->data_file);
      return CLI_EXIT_FAIL;
    }
    to.split = TS_TEXT_VALID, to.windows = nval, to.seed = TEXT_VALID_SEED;
    if (!(r->val_src = ts_source_text(&to))) {
      cli_error(CMD, "--dataset text: %s", ts_last_error());
      return CLI_EXIT_FAIL;
    }
    struct stat st;
    int64_t bytes = stat(o->data_file, &st) == 0 ? (int64_t)st.st_size : 0, ntrain = ts_text_train_bytes(bytes);
    /* every process must read the same text (paths may differ between hosts) */
    char text[96];
    snprintf(text, sizeof text, "%lld bytes, FNV-1a %016llx", (long long)bytes, (unsigned long long)file_hash(o->data_file));
    if (ts_client_check_same(r->client, "the text corpus (--data-file)", text) < 0) return train_lib_error();
    printf("data: %s, %lld bytes: %lld for training (%lld windows of %lld+1 bytes per epoch), %lld for validation "
           "(%lld batches x %lld windows at fixed positions)\n",
           o->data_file, (long long)bytes, (long long)ntrain, (long long)r->train_src->n, (long long)o->seq,
           (long long)(bytes - ntrain), (long long)o->eval_batches, (long long)o->batch);
  } else {
    if (!(r->train_src = ts_source_synthetic_tokens(SYNTH_TOKEN_SAMPLES, (int)o->seq, (int)o->vocab, SYNTH_TRAIN_SEED)) ||
        !(r->val_src = ts_source_synthetic_tokens(nval, (int)o->seq, (int)o->vocab, SYNTH_VALID_SEED)))
      return train_lib_error();
  }
  return train_load_steps(r, r->train_src->n);
}

/* The loader's batch i of the validation set (sequential calls: no seek). */
static const ts_loader_batch *val_batch(train_run *r, int64_t i) {
  const train_opts *o = &r->o;
  if (!r->val_src) {
    set_error("validation batches: this run has no token data");
    return NULL;
  }
  if (i < 0 || i >= o->eval_batches) {
    set_error("validation batch %lld: there are %lld (--eval-batches)", (long long)i, (long long)o->eval_batches);
    return NULL;
  }
  if (!r->val_loader) {
    ts_loader_options lo = {.batch = o->batch, .prefetch = 2, .workers = 1, .no_shuffle = true};
    if (!(r->val_loader = ts_loader_new(r->val_src, &lo))) return NULL;
    r->val_next = 0;
  }
  if (i != r->val_next && ts_loader_seek(r->val_loader, 0, i) < 0) return NULL;
  const ts_loader_batch *b = ts_loader_next(r->val_loader);
  /* the epochs of a loader without shuffling are the same batches: the next
   * call's batch 0 follows the last one */
  r->val_next = b ? (i + 1) % o->eval_batches : -1;
  return b;
}

int train_text_val_batch(train_run *r, int64_t i, ts_buffer *x, ts_buffer *y) {
  const ts_loader_batch *b = val_batch(r, i);
  if (!b || ts_batch_upload(b, "x", x) < 0 || ts_batch_upload(b, "y", y) < 0) return -1;
  return 0;
}

int train_text_val_host(train_run *r, int64_t i, const int32_t **x, const int32_t **y) {
  const ts_loader_batch *b = val_batch(r, i);
  if (!b || ts_batch_local_tokens(b, NULL, x, y, NULL) < 0) return -1;
  return 0;
}

void train_text_free(train_run *r) {
  ts_loader_free(r->val_loader); // before its source
  r->val_loader = NULL;
  ts_source_free(r->val_src);
  r->val_src = NULL;
}
