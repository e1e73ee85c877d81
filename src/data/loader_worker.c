/* loader_worker.c — the loader's worker threads: each claims the next batch
 * whose ring slot is free, fills it outside the lock (read, decode, augment,
 * cut the per-device blocks) and marks it ready for ts_loader_next. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_internal.h"
#include "util/error.h" /* set_error */

/* Copies block [start, limit) of the local array `src` (its dim 0 starts at
 * global row row_start) into the padded block dst (shard_shape), zero elsewhere. */
static void ld_copy_block(const ld_input *in, const void *src, int64_t row_start,
                          const int64_t *start, const int64_t *limit, void *dst) {
  size_t es = ts_dtype_size(in->dt);
  int r = in->rank;
  bool full = true;
  for (int j = 0; j < r; j++) full = full && limit[j] - start[j] == in->shard_shape[j];
  if (!full) memset(dst, 0, in->shard_bytes);
  for (int j = 0; j < r; j++)
    if (limit[j] <= start[j]) return;
  /* Strides of the local source array and the block, in elements. */
  int64_t sstr[TS_MAX_RANK], dstr[TS_MAX_RANK];
  sstr[r - 1] = dstr[r - 1] = 1;
  for (int j = r - 2; j >= 0; j--) {
    sstr[j] = sstr[j + 1] * in->shape[j + 1];
    dstr[j] = dstr[j + 1] * in->shard_shape[j + 1];
  }
  int64_t run = limit[r - 1] - start[r - 1];
  int64_t idx[TS_MAX_RANK] = {0}; /* position within the block, dims 0..r-2 */
  for (;;) {
    int64_t so = (start[r - 1]), dof = 0;
    for (int j = 0; j < r - 1; j++) {
      int64_t gj = start[j] + idx[j] - (j == 0 ? row_start : 0);
      so += gj * sstr[j];
      dof += idx[j] * dstr[j];
    }
    if (r == 1) so -= row_start;
    memcpy((char *)dst + dof * (int64_t)es, (const char *)src + so * (int64_t)es, (size_t)(run * (int64_t)es));
    int j = r - 2;
    while (j >= 0 && ++idx[j] == limit[j] - start[j]) idx[j--] = 0;
    if (j < 0) break;
  }
}

/* Row r of a token batch: sample idx's seq + 1 tokens (into tok), x = the
 * first seq, y = the last seq; padding (idx < 0) is zeros with mask 0. */
static int ld_fill_tokens(ts_loader *l, ts_loader_batch *b, int64_t r, int64_t idx, int32_t *tok) {
  const ts_source *s = l->src;
  int64_t T = s->seq;
  int32_t *x = (int32_t *)b->x + r * T, *y = b->y + r * T; // (T) each
  if (idx < 0) {
    memset(x, 0, (size_t)T * sizeof *x);
    memset(y, 0, (size_t)T * sizeof *y);
    b->mask[r] = 0.0f;
    return 0;
  }
  ts_clear_error(); /* a user source may fail without a message */
  if (s->get_tokens(s, idx, ld_sample_key(l->o.seed, b->epoch, idx), tok) < 0) {
    if (!*ts_last_error())
      set_error("%s: reading sample %lld failed", s->name ? s->name : "source", (long long)idx);
    return -1;
  }
  for (int64_t t = 0; t <= T; t++)
    if (tok[t] < 0 || tok[t] >= s->vocab)
      return set_error("%s: sample %lld has token %d at position %lld, outside the vocabulary [0, %d)",
                       s->name ? s->name : "source", (long long)idx, tok[t], (long long)t, s->vocab);
  memcpy(x, tok, (size_t)T * sizeof *x);
  memcpy(y, tok + 1, (size_t)T * sizeof *y);
  b->mask[r] = 1.0f;
  b->local_valid++;
  return 0;
}

/* Fills batch b (its g set): order, samples, blocks. Returns 0 or -1. */
static int ld_fill(ts_loader *l, ts_loader_batch *b, const int64_t *order, uint8_t *pix) {
  b->epoch = b->g / l->spe;
  b->step = b->g % l->spe;
  int64_t first = b->step * l->B;
  b->valid = l->n - first < l->B ? l->n - first : l->B;
  for (int64_t r = 0; r < l->B; r++) {
    int64_t pos = first + r;
    b->index[r] = pos < l->n ? (order ? order[pos] : pos) : -1;
  }
  const ts_source *s = l->src;
  b->local_valid = 0;
  for (int64_t r = 0; r < l->rows; r++) {
    int64_t idx = b->index[l->row_start + r];
    if (l->tokens) {
      if (ld_fill_tokens(l, b, r, idx, (int32_t *)pix) < 0) return -1;
      continue;
    }
    float *x = (float *)b->x + r * l->sample; // (C, H, W)
    if (idx < 0) {
      memset(x, 0, (size_t)l->sample * sizeof *x);
      b->y[r] = 0;
      b->mask[r] = 0.0f;
      continue;
    }
    int32_t label = -1;
    ts_clear_error(); /* a user source may fail without a message */
    if (s->get(s, idx, pix, &label) < 0) {
      if (!*ts_last_error())
        set_error("%s: reading sample %lld failed", s->name ? s->name : "source", (long long)idx);
      return -1;
    }
    if (label < 0 || label >= s->num_classes)
      return set_error("%s: sample %lld has label %d, outside [0, %d)", s->name, (long long)idx, label,
                          s->num_classes);
    aug_apply_lut(&l->o.augment, &l->lut, pix, s->c, s->h, s->w, ld_sample_key(l->o.seed, b->epoch, idx),
                     x);
    b->y[r] = label;
    b->mask[r] = 1.0f;
    b->local_valid++;
  }
  const void *base[N_IN] = {b->x, b->y, b->mask};
  for (int k = 0; k < N_IN; k++)
    for (int d = 0; d < l->nlocal; d++)
      if (!l->in[k].alias[d])
        ld_copy_block(&l->in[k], base[k], l->row_start, l->in[k].start[d], l->in[k].limit[d],
                      b->block[k][d]);
  return 0;
}

static bool ld_can_claim(const ts_loader *l) {
  return !l->paused && l->next_claim < l->next_consume + l->o.prefetch &&
         l->slots[l->next_claim % l->nslots].state == SLOT_FREE;
}

void *ld_worker(void *arg) {
  ts_loader *l = arg;
  /* one sample: u8 pixels, or seq + 1 i32 tokens */
  uint8_t *pix = malloc(l->tokens ? (size_t)(l->sample + 1) * sizeof(int32_t) : (size_t)l->sample);
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && !ld_can_claim(l)) pthread_cond_wait(&l->cv_work, &l->mu);
    if (l->stop) break;
    int64_t g = l->next_claim++;
    ts_loader_batch *b = &l->slots[g % l->nslots];
    b->state = SLOT_FILLING;
    b->g = g;
    b->failed = false;
    l->busy++;
    ld_order *ref;
    const int64_t *order = ld_order_get(l, g / l->spe, &ref);
    bool oom = !l->o.no_shuffle && !order;
    pthread_mutex_unlock(&l->mu);

    double t0 = ld_now();
    int rc = oom || !pix ? set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory") : ld_fill(l, b, order, pix);
    if (rc < 0) {
      b->failed = true;
      snprintf(b->err, sizeof b->err, "%s", ts_last_error());
      b->err_code = ts_last_error_code();
    }
    double t1 = ld_now();

    pthread_mutex_lock(&l->mu);
    if (ref) ref->refs--;
    l->st_produce += t1 - t0;
    l->busy--;
    b->state = SLOT_READY;
    /* Wakes the consumer waiting for this g, and a restore waiting for busy == 0. */
    pthread_cond_broadcast(&l->cv_done);
  }
  pthread_mutex_unlock(&l->mu);
  free(pix);
  return NULL;
}
