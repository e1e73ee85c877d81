/* loader_internal.h — the loader's state, shared by its files (not public):
 *   loader.c         creation and teardown, the consumer side of the ring
 *                    (ts_loader_next), statistics
 *   loader_order.c   the per-epoch permutation and per-sample keys
 *   loader_place.c   which devices and batch rows this process holds, and the
 *                    block of every input on each device
 *   loader_worker.c  the worker threads that fill the ring's slots
 *   loader_upload.c  a finished batch: its rows, its blocks, upload to buffers
 *   loader_state.c   seek, save and restore of the position
 *
 * Batches are numbered by a global counter g (epoch = g / steps_per_epoch,
 * step = g % steps_per_epoch). A ring of prefetch + 1 slots holds batch g in
 * slot g % nslots: worker threads claim the next unclaimed g whose slot is
 * free, fill it without holding the lock (read, decode, augment, cut the
 * per-device blocks) and mark it ready; ts_loader_next waits for its g, hands
 * it out, and frees it on the following call. What a batch contains depends
 * only on (seed, epoch, step), never on which worker made it or when. */
#ifndef TS_DATA_LOADER_INTERNAL_H
#define TS_DATA_LOADER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h> /* clock_gettime */

#include "data_internal.h" /* ts_aug_lut */
#include "tessel/loader.h"

enum { IN_X, IN_Y, IN_MASK, N_IN };
/* Input names, indexed by IN_*. */
extern const char *const ld_in_names[N_IN];

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY };

typedef struct {
  const ts_sharding *sh;  /* NULL: whole array on each device */
  ts_sharding *own;       /* derived shardings the loader made (freed with it) */
  ts_dtype dt;
  int rank;
  int64_t shape[TS_MAX_RANK];       /* global */
  int64_t shard_shape[TS_MAX_RANK]; /* padded block */
  size_t shard_bytes;
  int64_t (*start)[TS_MAX_RANK];    /* (nlocal) block ranges */
  int64_t (*limit)[TS_MAX_RANK];
  bool *alias;                      /* (nlocal) block == this process's rows: no copy */
} ld_input;

struct ts_loader_batch {
  ts_loader *l;
  int state;
  int64_t g, epoch, step, valid, local_valid;
  int64_t *index;          // (B) dataset index of each global row, -1 = padding
  void *x;                 // (rows, C, H, W) f32; a token source: (rows, T) i32
  int32_t *y;              // (rows); a token source: (rows, T)
  float *mask;             // (rows)
  void **block[N_IN];      // [input][local device] padded staging blocks (or aliases)
  bool failed;
  char err[512];
  ts_status err_code;      // of err: carried from the worker to the consumer
};

/* A cached permutation (loader_order.c). */
typedef struct {
  int64_t epoch;
  int64_t *order; /* (n) dataset index at each position; NULL: entry empty */
  int refs;       /* workers filling a batch from it (not evicted while > 0) */
  uint64_t used;  /* use_clock at the last use: least recently used goes first */
} ld_order;

struct ts_loader {
  const ts_source *src;
  ts_loader_options o;
  int64_t B, n, spe, sample; /* batch, samples, steps per epoch, pixels (tokens) per sample */
  bool tokens;               /* a token source: x, y (B, T) i32 */
  int64_t ylen;              /* y elements per row: 1, or T for tokens */
  ld_input in[N_IN];
  int nlocal;
  int *local_ids;            /* (nlocal) */
  int64_t row_start, rows;   /* this process's rows of the global batch */
  ts_aug_lut lut;

  int nslots;
  ts_loader_batch *slots;
  pthread_mutex_t mu;
  /* cv_work: a slot was freed or the loader is stopping (workers wait on it);
   * cv_done: a batch was finished (the consumer and restore wait on it). */
  pthread_cond_t cv_work, cv_done;
  int64_t next_claim, next_consume, held;
  int busy;
  bool paused, stop;
  int nthreads;
  pthread_t *threads;
  ld_order *orders;
  int norders;
  uint64_t use_clock;

  /* metrics (under mu) */
  int64_t st_batches, st_samples;
  double st_wait, st_first, st_last, st_produce;
};

static inline double ld_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* loader_order.c: a 64-bit mix of (a, b); the key of one sample's augmentation. */
uint64_t ld_hash(uint64_t a, uint64_t b);
uint64_t ld_sample_key(uint64_t seed, int64_t epoch, int64_t index);
/* loader_order.c: the permutation of epoch e (NULL: identity or out of
 * memory), referenced through *ref until the caller drops it (refs--). With mu held. */
const int64_t *ld_order_get(ts_loader *l, int64_t epoch, ld_order **ref);

/* loader_place.c: input shardings from the options, then local devices, the
 * block of every input on each and this process's rows. 0 or -1 (error set). */
int ld_setup_shardings(ts_loader *l);
int ld_setup_placement(ts_loader *l);

/* loader_place.c: the shape of input k as text ("(B, C, H, W)", "(B, T)", "(B)"). */
const char *ld_shape_text(const ts_loader *l, int k);

/* loader_worker.c: the body of a worker thread (arg: the loader). */
void *ld_worker(void *arg);

#endif
