/* loader_order.c — the loader's deterministic order: the permutation of
 * each epoch (from (seed, epoch)), kept in a small cache shared by the
 * workers, and the key of each sample's augmentation (from (seed, epoch,
 * index)), so a batch never depends on which worker made it. */
#include <stdlib.h>

#include "loader_internal.h"
#include "util/prng.h" /* splitmix64, ts_shuffle */

uint64_t ld_hash(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull) ^ 0x6a09e667f3bcc909ull;
  return ts_splitmix64(&x);
}

/* Shuffle seed of an epoch, and the augmentation key of one sample. */
static uint64_t ld_epoch_seed(uint64_t seed, int64_t epoch) { return ld_hash(seed, (uint64_t)epoch); }
uint64_t ld_sample_key(uint64_t seed, int64_t epoch, int64_t index) {
  return ld_hash(ld_hash(seed ^ 0xa5a5a5a5a5a5a5a5ull, (uint64_t)epoch), (uint64_t)index);
}

uint64_t ts_loader_augment_key(uint64_t seed, int64_t epoch, int64_t index) {
  return ld_sample_key(seed, epoch, index);
}

/* The permutation of epoch e (NULL: identity), referenced (*ref) until the
 * worker drops it (refs--).
 * Called with mu held; a missing one is shuffled (under the lock: once per
 * epoch, O(n)) into an empty or the least recently used
 * free cache entry (there are more entries than workers, so one is free). */
const int64_t *ld_order_get(ts_loader *l, int64_t epoch, ld_order **ref) {
  *ref = NULL;
  if (l->o.no_shuffle) return NULL;
  ld_order *best = NULL;
  for (int i = 0; i < l->norders && !best; i++)
    if (l->orders[i].order && l->orders[i].epoch == epoch) best = &l->orders[i];
  for (int i = 0; i < l->norders && !best; i++)
    if (!l->orders[i].order) best = &l->orders[i]; /* an empty entry */
  ld_order *lru = NULL; /* else the least recently used free one */
  for (int i = 0; i < l->norders && !best; i++)
    if (l->orders[i].refs == 0 && (!lru || l->orders[i].used < lru->used)) lru = &l->orders[i];
  if (!best) best = lru;
  if (!(best->order && best->epoch == epoch)) {
    if (!best->order) best->order = malloc((size_t)l->n * sizeof *best->order);
    if (!best->order) return NULL;
    ts_shuffle(best->order, l->n, ld_epoch_seed(l->o.seed, epoch));
    best->epoch = epoch;
  }
  best->refs++;
  best->used = ++l->use_clock;
  *ref = best;
  return best->order;
}
