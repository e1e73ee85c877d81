/* loader_state.c — the loader's position: seek to (epoch, step), and a
 * 64-byte checksummed state to save and restore it (in memory or a file),
 * so a resumed run sees exactly the batches it would have seen. */
#include <stdio.h>

#include "loader_internal.h"
#include "util/error.h" /* set_error */

int ts_loader_seek(ts_loader *l, int64_t epoch, int64_t step) {
  if (epoch < 0 || step < 0 || step >= l->spe)
    return set_error("loader: cannot seek to epoch %lld step %lld (an epoch has %lld steps)",
                        (long long)epoch, (long long)step, (long long)l->spe);
  pthread_mutex_lock(&l->mu);
  /* Stop new claims and wait for the batches in progress: their slots are
   * reset below and must not be written behind our back. */
  l->paused = true;
  while (l->busy > 0) pthread_cond_wait(&l->cv_done, &l->mu);
  for (int s = 0; s < l->nslots; s++) l->slots[s].state = SLOT_FREE;
  l->held = -1;
  l->next_claim = l->next_consume = epoch * l->spe + step;
  l->paused = false;
  pthread_cond_broadcast(&l->cv_work);
  pthread_mutex_unlock(&l->mu);
  return 0;
}

#define LD_MAGIC 0x3130524c44535454ull /* "TTSDLR01" little-endian */

static void ld_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t ld_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static uint64_t ld_checksum(const uint8_t *p, int n) {
  uint64_t h = 0x243f6a8885a308d3ull;
  for (int i = 0; i < n; i++) h = ld_hash(h, p[i]);
  return h;
}

/* Layout (little-endian u64): magic, seed, epoch, step, n, batch,
 * flags (last_batch | no_shuffle << 8), checksum of the first 56 bytes. */
int ts_loader_save(const ts_loader *l, uint8_t state[TS_LOADER_STATE_BYTES]) {
  pthread_mutex_lock((pthread_mutex_t *)&l->mu);
  int64_t g = l->next_consume;
  pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
  ld_put64(state, LD_MAGIC);
  ld_put64(state + 8, l->o.seed);
  ld_put64(state + 16, (uint64_t)(g / l->spe));
  ld_put64(state + 24, (uint64_t)(g % l->spe));
  ld_put64(state + 32, (uint64_t)l->n);
  ld_put64(state + 40, (uint64_t)l->B);
  ld_put64(state + 48, (uint64_t)l->o.last_batch | (uint64_t)l->o.no_shuffle << 8);
  ld_put64(state + 56, ld_checksum(state, 56));
  return 0;
}

int ts_loader_restore(ts_loader *l, const uint8_t state[TS_LOADER_STATE_BYTES]) {
  if (ld_get64(state) != LD_MAGIC) return set_error("loader state: bad magic (not a loader state blob)");
  if (ld_get64(state + 56) != ld_checksum(state, 56))
    return set_error("loader state: checksum mismatch (the state is corrupt)");
  uint64_t seed = ld_get64(state + 8), flags = ld_get64(state + 48);
  int64_t epoch = (int64_t)ld_get64(state + 16), step = (int64_t)ld_get64(state + 24);
  int64_t n = (int64_t)ld_get64(state + 32), B = (int64_t)ld_get64(state + 40);
  if (n != l->n)
    return set_error("loader state: saved for a dataset of %lld samples but this one has %lld",
                        (long long)n, (long long)l->n);
  if (B != l->B)
    return set_error("loader state: saved with batch %lld but this loader has batch %lld", (long long)B,
                        (long long)l->B);
  if (seed != l->o.seed)
    return set_error("loader state: saved with seed %llu but this loader has seed %llu",
                        (unsigned long long)seed, (unsigned long long)l->o.seed);
  if ((flags & 0xff) != (uint64_t)l->o.last_batch || ((flags >> 8) & 1) != (uint64_t)l->o.no_shuffle)
    return set_error("loader state: saved with another last-batch or shuffle mode");
  return ts_loader_seek(l, epoch, step);
}

int ts_loader_save_file(const ts_loader *l, const char *path) {
  uint8_t st[TS_LOADER_STATE_BYTES];
  ts_loader_save(l, st);
  FILE *f = fopen(path, "wb");
  if (!f) return set_error_code(TS_ERR_IO, "%s: cannot open for writing", path);
  size_t w = fwrite(st, 1, sizeof st, f);
  if (fclose(f) != 0 || w != sizeof st) return set_error_code(TS_ERR_IO, "%s: write failed", path);
  return 0;
}

int ts_loader_restore_file(ts_loader *l, const char *path) {
  uint8_t st[TS_LOADER_STATE_BYTES];
  FILE *f = fopen(path, "rb");
  if (!f) return set_error_code(TS_ERR_IO, "%s: cannot open", path);
  size_t r = fread(st, 1, sizeof st, f);
  fclose(f);
  if (r != sizeof st)
    return set_error_code(TS_ERR_IO, "%s: truncated loader state: %zu bytes, expected %d", path, r,
                             TS_LOADER_STATE_BYTES);
  if (ts_loader_restore(l, st) < 0) return set_error_context("%s", path);
  return 0;
}
