/* loader.c — the prefetching, sharding-aware data loader (see
 * tessel/loader.h for the contract; loader_internal.h for how its files share
 * the work): creation and teardown, the ring of batch slots and its consumer
 * side (ts_loader_next), statistics. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "loader_internal.h"
#include "util/error.h" /* set_error */

const char *const ld_in_names[N_IN] = {"x", "y", "mask"};

static void *ld_alloc(size_t bytes) {
  size_t sz = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, sz ? sz : 64);
  if (p) memset(p, 0, sz ? sz : 64);
  return p;
}

static int ld_alloc_slots(ts_loader *l) {
  l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
  if (!l->slots) return set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
  for (int s = 0; s < l->nslots; s++) {
    ts_loader_batch *b = &l->slots[s];
    b->l = l;
    b->index = calloc((size_t)l->B, sizeof *b->index);
    b->x = ld_alloc((size_t)(l->rows * l->sample) * sizeof(float)); /* f32 or i32: 4 bytes */
    b->y = ld_alloc((size_t)(l->rows * l->ylen) * sizeof(int32_t));
    b->mask = ld_alloc((size_t)l->rows * sizeof(float));
    if (!b->index || !b->x || !b->y || !b->mask)
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory for batches");
    void *base[N_IN] = {b->x, b->y, b->mask};
    for (int k = 0; k < N_IN; k++) {
      b->block[k] = calloc((size_t)l->nlocal, sizeof(void *));
      if (!b->block[k]) return set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
      for (int d = 0; d < l->nlocal; d++) {
        b->block[k][d] = l->in[k].alias[d] ? base[k] : ld_alloc(l->in[k].shard_bytes);
        if (!b->block[k][d]) return set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory for %s blocks", ld_in_names[k]);
      }
    }
  }
  return 0;
}

ts_loader *ts_loader_new(const ts_source *src, const ts_loader_options *opts) {
  if (!src || !opts || !(src->get || src->get_tokens)) {
    set_error("ts_loader_new: NULL source or options");
    return NULL;
  }
  if (opts->batch <= 0) {
    set_error("loader: batch %lld must be positive", (long long)opts->batch);
    return NULL;
  }
  bool tokens = src->seq > 0;
  if (tokens && (src->n <= 0 || src->vocab <= 0 || !src->get_tokens)) {
    set_error("loader: token source '%s' is empty, has vocab %d or no get_tokens", src->name ? src->name : "?",
              src->vocab);
    return NULL;
  }
  if (!tokens && (src->n <= 0 || src->c <= 0 || src->h <= 0 || src->w <= 0 || src->num_classes <= 0)) {
    set_error("loader: source '%s' is empty or has a bad shape", src->name ? src->name : "?");
    return NULL;
  }
  if (!tokens && src->c > TS_AUG_MAX_CHANNELS) {
    set_error("loader: source '%s' has %d channels; at most %d are supported", src->name, src->c,
                 TS_AUG_MAX_CHANNELS);
    return NULL;
  }
  ts_loader *l = calloc(1, sizeof *l);
  if (!l) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
    return NULL;
  }
  l->src = src;
  l->o = *opts;
  if (l->o.prefetch <= 0) l->o.prefetch = 2;
  if (l->o.workers <= 0) l->o.workers = 1;
  if (l->o.process_count <= 0) l->o.process_count = 1;
  l->B = opts->batch;
  l->n = src->n;
  l->tokens = tokens;
  l->sample = tokens ? src->seq : (int64_t)src->c * src->h * src->w;
  l->ylen = tokens ? src->seq : 1;
  l->spe = opts->last_batch == TS_LAST_BATCH_PAD ? (l->n + l->B - 1) / l->B : l->n / l->B;
  l->held = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv_work, NULL);
  pthread_cond_init(&l->cv_done, NULL);
  if (l->spe == 0) {
    set_error("loader: batch %lld is larger than %s (%lld samples) and the last partial batch is dropped; "
                 "use a smaller batch or TS_LAST_BATCH_PAD", (long long)l->B, src->name, (long long)l->n);
    goto fail;
  }
  if (tokens) {
    l->in[IN_X] = (ld_input){.dt = TS_I32, .rank = 2, .shape = {l->B, src->seq}};
    l->in[IN_Y] = (ld_input){.dt = TS_I32, .rank = 2, .shape = {l->B, src->seq}};
  } else {
    int64_t xs[4] = {l->B, src->c, src->h, src->w};
    l->in[IN_X] = (ld_input){.dt = TS_F32, .rank = 4};
    memcpy(l->in[IN_X].shape, xs, sizeof xs);
    l->in[IN_Y] = (ld_input){.dt = TS_I32, .rank = 1, .shape = {l->B}};
    aug_lut_init(&l->o.augment, src->c, &l->lut);
  }
  l->in[IN_MASK] = (ld_input){.dt = TS_F32, .rank = 1, .shape = {l->B}};
  if (ld_setup_shardings(l) < 0 || ld_setup_placement(l) < 0) goto fail;
  l->nslots = l->o.prefetch + 1;
  if (ld_alloc_slots(l) < 0) goto fail;
  l->norders = l->o.workers + 2;
  l->orders = calloc((size_t)l->norders, sizeof *l->orders);
  l->threads = calloc((size_t)l->o.workers, sizeof *l->threads);
  if (!l->orders || !l->threads) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
    goto fail;
  }
  for (int t = 0; t < l->o.workers; t++) {
    if (pthread_create(&l->threads[t], NULL, ld_worker, l) != 0) {
      set_error("loader: cannot start worker thread %d", t);
      goto fail;
    }
    l->nthreads++;
  }
  return l;
fail:
  ts_loader_free(l);
  return NULL;
}

void ts_loader_free(ts_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_broadcast(&l->cv_work); /* every waiting worker sees stop */
  pthread_mutex_unlock(&l->mu);
  for (int t = 0; t < l->nthreads; t++) pthread_join(l->threads[t], NULL);
  free(l->threads);
  for (int s = 0; l->slots && s < l->nslots; s++) {
    ts_loader_batch *b = &l->slots[s];
    for (int k = 0; k < N_IN; k++) {
      for (int d = 0; b->block[k] && d < l->nlocal; d++)
        if (!l->in[k].alias[d]) free(b->block[k][d]);
      free(b->block[k]);
    }
    free(b->index);
    free(b->x);
    free(b->y);
    free(b->mask);
  }
  free(l->slots);
  for (int i = 0; l->orders && i < l->norders; i++) free(l->orders[i].order);
  free(l->orders);
  for (int k = 0; k < N_IN; k++) {
    if (l->in[k].own) ts_sharding_free(l->in[k].own);
    free(l->in[k].start);
    free(l->in[k].limit);
    free(l->in[k].alias);
  }
  free(l->local_ids);
  pthread_cond_destroy(&l->cv_work);
  pthread_cond_destroy(&l->cv_done);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

int64_t ts_loader_steps_per_epoch(const ts_loader *l) { return l->spe; }

int ts_loader_local_devices(const ts_loader *l, const int **ids) {
  if (ids) *ids = l->local_ids;
  return l->nlocal;
}

/* Hands out batch g once a worker has finished it. The previous batch is
 * released only after g is ready: the claim window (next_consume + prefetch)
 * never reaches the held slot, and the workers are woken after the wait is
 * timed, and only when at least half the ring can be refilled: a woken worker
 * then fills several batches in one go instead of preempting the step once
 * per batch. */
const ts_loader_batch *ts_loader_next(ts_loader *l) {
  double t0 = ld_now();
  pthread_mutex_lock(&l->mu);
  if (l->st_batches == 0 && l->st_first == 0) l->st_first = t0;
  int64_t g = l->next_consume;
  ts_loader_batch *b = &l->slots[g % l->nslots];
  /* Waits for the worker that claimed g (wakes on every finished batch). */
  while (!(b->state == SLOT_READY && b->g == g)) pthread_cond_wait(&l->cv_done, &l->mu);
  double t1 = ld_now();
  l->st_wait += t1 - t0;
  if (b->failed) {
    set_error_code(b->err_code, "%s", b->err);
    pthread_mutex_unlock(&l->mu);
    return NULL;
  }
  if (l->held >= 0) l->slots[l->held % l->nslots].state = SLOT_FREE;
  l->next_consume++;
  l->held = g;
  l->st_batches++;
  l->st_samples += b->local_valid;
  l->st_last = t1;
  int64_t claimable = l->next_consume + l->o.prefetch - l->next_claim;
  int64_t wake_at = l->o.prefetch / 2 > 1 ? l->o.prefetch / 2 : 1;
  if (claimable >= wake_at) pthread_cond_broadcast(&l->cv_work); /* the claim window moved forward */
  pthread_mutex_unlock(&l->mu);
  return b;
}

/* ---- metrics ---- */

void ts_loader_get_stats(const ts_loader *l, ts_loader_stats *out) {
  pthread_mutex_lock((pthread_mutex_t *)&l->mu);
  out->batches = l->st_batches;
  out->samples = l->st_samples;
  out->wait_s = l->st_wait;
  out->elapsed_s = l->st_batches ? l->st_last - l->st_first : 0;
  out->samples_per_s = out->elapsed_s > 0 ? (double)l->st_samples / out->elapsed_s : 0;
  out->produce_s = l->st_produce;
  pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
}

void ts_loader_reset_stats(ts_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->st_batches = l->st_samples = 0;
  l->st_wait = l->st_first = l->st_last = l->st_produce = 0;
  pthread_mutex_unlock(&l->mu);
}
