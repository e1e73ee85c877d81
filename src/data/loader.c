/* loader.c — the prefetching, sharding-aware data loader (see
 * tessel/loader.h for the contract).
 *
 * Batches are numbered by a global counter g (epoch = g / steps_per_epoch,
 * step = g % steps_per_epoch). A ring of prefetch + 1 slots holds batch g in
 * slot g % nslots: worker threads claim the next unclaimed g whose slot is
 * free, fill it without holding the lock (read, decode, augment, cut the
 * per-device blocks) and mark it ready; ts_loader_next waits for its g, hands
 * it out, and frees it on the following call. What a batch contains depends
 * only on (seed, epoch, step), never on which worker made it or when. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> /* clock_gettime */

#include "data_internal.h"
#include "ir/ir.h"   /* ts_set_error */
#include "nn/prng.h" /* splitmix64 */

enum { IN_X, IN_Y, IN_MASK, N_IN };
static const char *const in_names[N_IN] = {"x", "y", "mask"};

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
  float *x;                // (rows, C, H, W)
  int32_t *y;              // (rows)
  float *mask;             // (rows)
  void **block[N_IN];      // [input][local device] padded staging blocks (or aliases)
  bool failed;
  char err[512];
  ts_status err_code;      // of err: carried from the worker to the consumer
};

typedef struct {
  int64_t epoch;
  int64_t *order; /* (n) */
  int refs;
  uint64_t used;
} ld_order;

struct ts_loader {
  const ts_source *src;
  ts_loader_options o;
  int64_t B, n, spe, sample; /* batch, samples, steps per epoch, pixels per sample */
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

static double ld_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t ld_hash(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull) ^ 0x6a09e667f3bcc909ull;
  return ts_splitmix64(&x);
}

/* Shuffle seed of an epoch, and the augmentation key of one sample. */
static uint64_t ld_epoch_seed(uint64_t seed, int64_t epoch) { return ld_hash(seed, (uint64_t)epoch); }
static uint64_t ld_sample_key(uint64_t seed, int64_t epoch, int64_t index) {
  return ld_hash(ld_hash(seed ^ 0xa5a5a5a5a5a5a5a5ull, (uint64_t)epoch), (uint64_t)index);
}

static void *ld_alloc(size_t bytes) {
  size_t sz = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, sz ? sz : 64);
  if (p) memset(p, 0, sz ? sz : 64);
  return p;
}

/* ---- setup: inputs, shardings, local devices ---- */

static int ld_set_sharding(ts_loader *l, int k, const ts_sharding *sh) {
  ld_input *in = &l->in[k];
  if (in->sh) return ts_set_error("loader: two shardings given for input '%s'", in_names[k]);
  if (ts_sharding_rank(sh) != in->rank)
    return ts_set_error("loader: the sharding for input '%s' has rank %d but %s %s is rank %d", in_names[k],
                        ts_sharding_rank(sh), in_names[k], k == IN_X ? "(B, C, H, W)" : "(B)", in->rank);
  if (ts_sharding_num_devices(sh) != ts_mesh_num_devices(l->o.mesh))
    return ts_set_error("loader: the sharding for input '%s' is over %lld devices but the mesh has %lld",
                        in_names[k], (long long)ts_sharding_num_devices(sh),
                        (long long)ts_mesh_num_devices(l->o.mesh));
  in->sh = sh;
  return 0;
}

/* A rank-1 sharding splitting dim 0 like dim 0 of `from`. */
static ts_sharding *ld_batch_sharding(const ts_sharding *from) {
  const ts_partition_spec *fs = ts_sharding_spec(from);
  ts_partition_spec s;
  ts_partition_spec_init(&s, 1);
  for (int a = 0; a < fs->naxes[0]; a++) ts_partition_spec_add_axis(&s, 0, fs->axes[0][a]);
  return ts_sharding_new(ts_sharding_mesh(from), &s, 1);
}

static int ld_setup_shardings(ts_loader *l) {
  const ts_loader_options *o = &l->o;
  if (!o->mesh) {
    if (o->n_inputs > 0) return ts_set_error("loader: %d input sharding(s) given but no mesh", o->n_inputs);
    return 0;
  }
  if (o->n_inputs <= 0 || !o->inputs)
    return ts_set_error("loader: a mesh is given but no input shardings (give x and y, or one spec for x)");
  if (o->n_inputs == 1 && !o->inputs[0].name) {
    if (!o->inputs[0].sharding) return ts_set_error("loader: input sharding 0 is NULL");
    if (ld_set_sharding(l, IN_X, o->inputs[0].sharding) < 0) return -1;
    for (int k = IN_Y; k <= IN_MASK; k++) {
      if (!(l->in[k].own = ld_batch_sharding(o->inputs[0].sharding))) return -1;
      l->in[k].sh = l->in[k].own;
    }
    return 0;
  }
  for (int i = 0; i < o->n_inputs; i++) {
    const char *nm = o->inputs[i].name;
    int k = -1;
    for (int j = 0; j < N_IN && nm; j++)
      if (strcmp(nm, in_names[j]) == 0) k = j;
    if (k < 0)
      return ts_set_error("loader: input sharding %d is for '%s', which is not one of the loader's inputs "
                          "x, y, mask", i, nm ? nm : "(NULL name)");
    if (!o->inputs[i].sharding) return ts_set_error("loader: the sharding for input '%s' is NULL", nm);
    if (ld_set_sharding(l, k, o->inputs[i].sharding) < 0) return -1;
  }
  for (int k = IN_X; k <= IN_Y; k++)
    if (!l->in[k].sh)
      return ts_set_error("loader: no sharding for input '%s' (the loader's inputs are x (B, C, H, W), "
                          "y (B) and mask (B); give x and y, or one spec for x)", in_names[k]);
  if (!l->in[IN_MASK].sh) l->in[IN_MASK].sh = l->in[IN_Y].sh;
  return 0;
}

/* The devices the runtime gives process p of P when N devices are shared
 * out (ts_client_options.total_devices): as evenly as possible, the first
 * N % P processes taking one more, numbered process-major. */
static void ld_process_devices(int64_t N, int P, int p, int64_t *first, int64_t *count) {
  int64_t q = N / P, r = N % P;
  *first = p * q + (p < r ? p : r);
  *count = q + (p < r ? 1 : 0);
}

/* Batch rows [*lo, *hi) of input `in`'s block on device `dev`. */
static int ld_block_rows(const ld_input *in, int dev, int64_t *lo, int64_t *hi) {
  if (!in->sh) {
    *lo = 0, *hi = in->shape[0];
    return 0;
  }
  int64_t s[TS_MAX_RANK], e[TS_MAX_RANK];
  if (ts_sharding_shard_range(in->sh, in->shape, dev, s, e) < 0) return -1;
  *lo = s[0], *hi = e[0];
  return 0;
}

/* Minibatch mode: the batch divides over the processes and into full blocks,
 * and every process's rows are the span of its devices' batch blocks. The
 * spans of all processes are checked (not only this one's) so that every
 * process reaches the same verdict. */
static int ld_setup_minibatch(ts_loader *l) {
  const ts_loader_options *o = &l->o;
  int P = o->process_count, p = o->process_index;
  int64_t N = o->mesh ? ts_mesh_num_devices(o->mesh) : 1, B = l->B;
  if (B % P != 0)
    return ts_set_error("loader: minibatch mode: the global batch %lld does not divide over %d processes",
                        (long long)B, P);
  for (int k = 0; k < N_IN; k++) {
    const ld_input *in = &l->in[k];
    int64_t T = in->sh ? ts_sharding_num_tiles(in->sh, 0) : 1;
    if (B % T == 0) continue;
    if (N % P != 0)
      return ts_set_error("loader: minibatch mode: the global batch %lld does not divide into the %lld batch "
                          "blocks of input '%s' (every device's block of the batch must be full)",
                          (long long)B, (long long)T, in_names[k]);
    int64_t tiles = 0; /* distinct batch blocks among local devices */
    for (int d = 0; d < l->nlocal; d++) {
      bool seen = false;
      for (int e = 0; e < d && !seen; e++) seen = in->start[e][0] == in->start[d][0];
      tiles += !seen;
    }
    return ts_set_error("loader: minibatch mode: the per-process batch %lld (global %lld over %d processes) "
                        "does not divide by the %lld local devices splitting the batch of input '%s'",
                        (long long)(B / P), (long long)B, P, (long long)tiles, in_names[k]);
  }
  for (int q = 0; q < P; q++) {
    int64_t first, count, lo = B, hi = 0;
    ld_process_devices(N, P, q, &first, &count);
    for (int k = 0; k < N_IN; k++) {
      int64_t klo = B, khi = 0;
      for (int64_t dev = first; dev < first + count; dev++) {
        int64_t s, e;
        if (ld_block_rows(&l->in[k], (int)dev, &s, &e) < 0) return -1;
        if (e <= s) continue;
        klo = s < klo ? s : klo;
        khi = e > khi ? e : khi;
      }
      /* Every process decoding the whole batch is global mode in disguise:
       * most likely a batch dim left unsharded (a replicated mask) or sharded
       * over an axis within the processes. */
      if (P > 1 && klo == 0 && khi == B)
        return ts_set_error("loader: minibatch mode: process %d needs batch rows [0, %lld) of input '%s' (the "
                            "whole batch) for its devices %lld..%lld; shard the batch dim over the devices in "
                            "process order or use TS_LOAD_GLOBAL",
                            q, (long long)B, in_names[k], (long long)first, (long long)(first + count - 1));
      lo = klo < lo ? klo : lo;
      hi = khi > hi ? khi : hi;
    }
    if (P > 1 && lo == 0 && hi == B)
      return ts_set_error("loader: minibatch mode: process %d needs batch rows [0, %lld) of x, y and mask "
                          "together (the whole batch) for its devices %lld..%lld; shard the batch dim of every "
                          "input alike, or use TS_LOAD_GLOBAL",
                          q, (long long)B, (long long)first, (long long)(first + count - 1));
    if (q == p) {
      l->row_start = lo < hi ? lo : 0;
      l->rows = lo < hi ? hi - lo : 0;
    }
  }
  return 0;
}

/* Local devices, the block of every input on each, and this process's rows. */
static int ld_setup_placement(ts_loader *l) {
  const ts_loader_options *o = &l->o;
  int P = o->process_count, p = o->process_index;
  int64_t N = o->mesh ? ts_mesh_num_devices(o->mesh) : 1;
  if (P < 1 || p < 0 || p >= P)
    return ts_set_error("loader: process index %d of %d processes is not valid", p, P);
  if (N < P)
    return ts_set_error("loader: the mesh's %lld devices are fewer than the %d processes (every process needs "
                        "at least one)", (long long)N, P);
  int64_t first, count;
  ld_process_devices(N, P, p, &first, &count);
  l->nlocal = (int)count;
  l->local_ids = calloc((size_t)l->nlocal, sizeof *l->local_ids);
  if (!l->local_ids) return ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
  for (int d = 0; d < l->nlocal; d++) l->local_ids[d] = (int)(first + d);

  for (int k = 0; k < N_IN; k++) {
    ld_input *in = &l->in[k];
    in->start = calloc((size_t)l->nlocal, sizeof *in->start);
    in->limit = calloc((size_t)l->nlocal, sizeof *in->limit);
    in->alias = calloc((size_t)l->nlocal, sizeof *in->alias);
    if (!in->start || !in->limit || !in->alias) return ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
    for (int d = 0; d < l->nlocal; d++) {
      if (in->sh) {
        if (ts_sharding_shard_range(in->sh, in->shape, l->local_ids[d], in->start[d], in->limit[d]) < 0)
          return -1;
      } else {
        for (int j = 0; j < in->rank; j++) in->start[d][j] = 0, in->limit[d][j] = in->shape[j];
      }
    }
    if (in->sh) {
      if (ts_sharding_shard_shape(in->sh, in->shape, in->shard_shape) < 0) return -1;
    } else {
      memcpy(in->shard_shape, in->shape, sizeof in->shape);
    }
    in->shard_bytes = (size_t)ts_shape_numel(in->rank, in->shard_shape) * ts_dtype_size(in->dt);
  }

  if (o->mode == TS_LOAD_GLOBAL) {
    l->row_start = 0;
    l->rows = l->B;
  } else if (o->mode == TS_LOAD_MINIBATCH) {
    if (ld_setup_minibatch(l) < 0) return -1;
  } else {
    return ts_set_error("loader: unknown load mode %d", (int)o->mode);
  }
  /* A block that is exactly this process's rows is handed out without a copy. */
  for (int k = 0; k < N_IN; k++) {
    ld_input *in = &l->in[k];
    for (int d = 0; d < l->nlocal; d++) {
      bool whole = in->start[d][0] == l->row_start && in->limit[d][0] == l->row_start + l->rows &&
                   in->shard_shape[0] == l->rows;
      for (int j = 1; j < in->rank; j++)
        whole = whole && in->start[d][j] == 0 && in->limit[d][j] == in->shape[j] &&
                in->shard_shape[j] == in->shape[j];
      in->alias[d] = whole;
    }
  }
  return 0;
}

static int ld_alloc_slots(ts_loader *l) {
  l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
  if (!l->slots) return ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
  for (int s = 0; s < l->nslots; s++) {
    ts_loader_batch *b = &l->slots[s];
    b->l = l;
    b->index = calloc((size_t)l->B, sizeof *b->index);
    b->x = ld_alloc((size_t)(l->rows * l->sample) * sizeof(float));
    b->y = ld_alloc((size_t)l->rows * sizeof(int32_t));
    b->mask = ld_alloc((size_t)l->rows * sizeof(float));
    if (!b->index || !b->x || !b->y || !b->mask) return ts_set_error_code(TS_ERR_OUT_OF_MEMORY,
                                                                          "loader: out of memory for batches");
    void *base[N_IN] = {b->x, b->y, b->mask};
    for (int k = 0; k < N_IN; k++) {
      b->block[k] = calloc((size_t)l->nlocal, sizeof(void *));
      if (!b->block[k]) return ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
      for (int d = 0; d < l->nlocal; d++) {
        b->block[k][d] = l->in[k].alias[d] ? base[k] : ld_alloc(l->in[k].shard_bytes);
        if (!b->block[k][d]) return ts_set_error_code(TS_ERR_OUT_OF_MEMORY,
                                                      "loader: out of memory for %s blocks", in_names[k]);
      }
    }
  }
  return 0;
}

/* ---- the worker side ---- */

/* The permutation of epoch e (NULL: identity), referenced (*ref) until the
 * worker drops it (refs--).
 * Called with mu held; a missing one is shuffled (under the lock: once per
 * epoch, O(n)) into an empty or the least recently used
 * free cache entry (there are more entries than workers, so one is free). */
static const int64_t *ld_order_get(ts_loader *l, int64_t epoch, ld_order **ref) {
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
    float *x = b->x + r * l->sample; // (C, H, W)
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
        ts_set_error("%s: reading sample %lld failed", s->name ? s->name : "source", (long long)idx);
      return -1;
    }
    if (label < 0 || label >= s->num_classes)
      return ts_set_error("%s: sample %lld has label %d, outside [0, %d)", s->name, (long long)idx, label,
                          s->num_classes);
    ts_aug_apply_lut(&l->o.augment, &l->lut, pix, s->c, s->h, s->w, ld_sample_key(l->o.seed, b->epoch, idx),
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

static void *ld_worker(void *arg) {
  ts_loader *l = arg;
  uint8_t *pix = malloc((size_t)l->sample);
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
    int rc = oom || !pix ? ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory") : ld_fill(l, b, order, pix);
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

/* ---- public ---- */

ts_loader *ts_loader_new(const ts_source *src, const ts_loader_options *opts) {
  if (!src || !opts || !src->get) {
    ts_set_error("ts_loader_new: NULL source or options");
    return NULL;
  }
  if (opts->batch <= 0) {
    ts_set_error("loader: batch %lld must be positive", (long long)opts->batch);
    return NULL;
  }
  if (src->n <= 0 || src->c <= 0 || src->h <= 0 || src->w <= 0 || src->num_classes <= 0) {
    ts_set_error("loader: source '%s' is empty or has a bad shape", src->name ? src->name : "?");
    return NULL;
  }
  if (src->c > TS_AUG_MAX_CHANNELS) {
    ts_set_error("loader: source '%s' has %d channels; at most %d are supported", src->name, src->c,
                 TS_AUG_MAX_CHANNELS);
    return NULL;
  }
  ts_loader *l = calloc(1, sizeof *l);
  if (!l) {
    ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
    return NULL;
  }
  l->src = src;
  l->o = *opts;
  if (l->o.prefetch <= 0) l->o.prefetch = 2;
  if (l->o.workers <= 0) l->o.workers = 1;
  if (l->o.process_count <= 0) l->o.process_count = 1;
  l->B = opts->batch;
  l->n = src->n;
  l->sample = (int64_t)src->c * src->h * src->w;
  l->spe = opts->last_batch == TS_LAST_BATCH_PAD ? (l->n + l->B - 1) / l->B : l->n / l->B;
  l->held = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv_work, NULL);
  pthread_cond_init(&l->cv_done, NULL);
  if (l->spe == 0) {
    ts_set_error("loader: batch %lld is larger than %s (%lld samples) and the last partial batch is dropped; "
                 "use a smaller batch or TS_LAST_BATCH_PAD", (long long)l->B, src->name, (long long)l->n);
    goto fail;
  }
  int64_t xs[4] = {l->B, src->c, src->h, src->w};
  l->in[IN_X] = (ld_input){.dt = TS_F32, .rank = 4};
  memcpy(l->in[IN_X].shape, xs, sizeof xs);
  l->in[IN_Y] = (ld_input){.dt = TS_I32, .rank = 1, .shape = {l->B}};
  l->in[IN_MASK] = (ld_input){.dt = TS_F32, .rank = 1, .shape = {l->B}};
  ts_aug_lut_init(&l->o.augment, src->c, &l->lut);
  if (ld_setup_shardings(l) < 0 || ld_setup_placement(l) < 0) goto fail;
  l->nslots = l->o.prefetch + 1;
  if (ld_alloc_slots(l) < 0) goto fail;
  l->norders = l->o.workers + 2;
  l->orders = calloc((size_t)l->norders, sizeof *l->orders);
  l->threads = calloc((size_t)l->o.workers, sizeof *l->threads);
  if (!l->orders || !l->threads) {
    ts_set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
    goto fail;
  }
  for (int t = 0; t < l->o.workers; t++) {
    if (pthread_create(&l->threads[t], NULL, ld_worker, l) != 0) {
      ts_set_error("loader: cannot start worker thread %d", t);
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

uint64_t ts_loader_augment_key(uint64_t seed, int64_t epoch, int64_t index) {
  return ld_sample_key(seed, epoch, index);
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
    ts_set_error_code(b->err_code, "%s", b->err);
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

int64_t ts_batch_epoch(const ts_loader_batch *b) { return b->epoch; }
int64_t ts_batch_step(const ts_loader_batch *b) { return b->step; }
int64_t ts_batch_valid(const ts_loader_batch *b) { return b->valid; }

int64_t ts_batch_sample_index(const ts_loader_batch *b, int64_t row) {
  return row >= 0 && row < b->l->B ? b->index[row] : -1;
}

int64_t ts_batch_local_rows(const ts_loader_batch *b, int64_t *row_start, const float **x, const int32_t **y,
                            const float **mask) {
  if (row_start) *row_start = b->l->row_start;
  if (x) *x = b->x;
  if (y) *y = b->y;
  if (mask) *mask = b->mask;
  return b->l->rows;
}

int ts_batch_shard(const ts_loader_batch *b, const char *name, int device, ts_shard_view *out) {
  const ts_loader *l = b->l;
  int k = -1;
  for (int j = 0; j < N_IN && name; j++)
    if (strcmp(name, in_names[j]) == 0) k = j;
  if (k < 0) return ts_set_error("ts_batch_shard: no input '%s' (the loader's inputs are x, y, mask)",
                                 name ? name : "(NULL)");
  int d = -1;
  for (int j = 0; j < l->nlocal; j++)
    if (l->local_ids[j] == device) d = j;
  if (d < 0)
    return ts_set_error("ts_batch_shard: device %d is not one of this process's devices [%d, %d]", device,
                        l->local_ids[0], l->local_ids[l->nlocal - 1]);
  const ld_input *in = &l->in[k];
  memset(out, 0, sizeof *out);
  out->data = b->block[k][d];
  out->dtype = in->dt;
  out->rank = in->rank;
  memcpy(out->shape, in->shard_shape, sizeof out->shape);
  memcpy(out->start, in->start[d], sizeof out->start);
  memcpy(out->limit, in->limit[d], sizeof out->limit);
  out->bytes = in->shard_bytes;
  return 0;
}

/* Packs the valid corner ext of a padded block (shape pad, rank r, es-byte
 * elements) densely into dst: the unpadded block ts_buffer_write_shard takes. */
static void ld_pack_block(const void *src, const int64_t *pad, const int64_t *ext, int r, size_t es, void *dst) {
  int64_t n = ts_shape_numel(r, ext);
  if (n == 0) return;
  int64_t run = ext[r - 1], pstr[TS_MAX_RANK], idx[TS_MAX_RANK] = {0};
  pstr[r - 1] = 1;
  for (int j = r - 2; j >= 0; j--) pstr[j] = pstr[j + 1] * pad[j + 1];
  for (int64_t i = 0; i < n / run; i++) {
    int64_t so = 0;
    for (int j = 0; j < r - 1; j++) so += idx[j] * pstr[j];
    memcpy((char *)dst + (size_t)(i * run) * es, (const char *)src + (size_t)so * es, (size_t)run * es);
    for (int j = r - 2; j >= 0 && ++idx[j] == ext[j]; j--) idx[j] = 0;
  }
}

int ts_batch_upload(const ts_loader_batch *b, const char *name, ts_buffer *dst) {
  const ts_loader *l = b->l;
  int k = -1;
  for (int j = 0; j < N_IN && name; j++)
    if (strcmp(name, in_names[j]) == 0) k = j;
  if (k < 0) return ts_set_error("ts_batch_upload: no input '%s' (the loader's inputs are x, y, mask)",
                                 name ? name : "(NULL)");
  const ld_input *in = &l->in[k];
  if (!dst) return ts_set_error("ts_batch_upload: buffer for '%s' is NULL", name);
  bool same = ts_buffer_dtype(dst) == in->dt && ts_buffer_rank(dst) == in->rank;
  for (int j = 0; same && j < in->rank; j++) same = ts_buffer_shape(dst)[j] == in->shape[j];
  if (!same)
    return ts_set_error("ts_batch_upload: the buffer for '%s' is not %s %s of the loader's batch %lld", name,
                        ts_dtype_name(in->dt), k == IN_X ? "(B, C, H, W)" : "(B)", (long long)l->B);
  if (l->rows == l->B) { /* the whole global batch is here: the runtime cuts any sharding */
    const void *src = k == IN_X ? (const void *)b->x : k == IN_Y ? (const void *)b->y : (const void *)b->mask;
    return ts_buffer_write(dst, src, (size_t)ts_shape_numel(in->rank, in->shape) * ts_dtype_size(in->dt));
  }
  /* Minibatch: only this process's rows were decoded, so the buffer must be
   * cut exactly as the loader cut them; each local device's block is written
   * on its own (the other processes write theirs). */
  const ts_sharding *ds = ts_buffer_sharding(dst);
  if (!ds || !in->sh || !ts_sharding_equal(ds, in->sh)) {
    char *want = ts_sharding_to_string(in->sh), *got = ds ? ts_sharding_to_string(ds) : NULL;
    ts_set_error("ts_batch_upload: the buffer for '%s' has sharding %s but the loader cuts '%s' as %s; in "
                 "minibatch mode process %d holds batch rows [%lld, %lld) only and cannot reshard: create the "
                 "buffer with the loader's sharding for '%s'",
                 name, ds ? (got ? got : "?") : "{replicated}", name, want ? want : "?", l->o.process_index,
                 (long long)l->row_start, (long long)(l->row_start + l->rows), name);
    free(want);
    free(got);
    return -1;
  }
  size_t es = ts_dtype_size(in->dt);
  for (int d = 0; d < l->nlocal; d++) {
    int64_t ext[TS_MAX_RANK];
    bool padded = false;
    for (int j = 0; j < in->rank; j++) {
      ext[j] = in->limit[d][j] - in->start[d][j];
      padded = padded || ext[j] != in->shard_shape[j];
    }
    size_t bytes = (size_t)ts_shape_numel(in->rank, ext) * es;
    void *packed = NULL;
    if (padded && !(packed = malloc(bytes + 1)))
      return ts_set_error_code(TS_ERR_OUT_OF_MEMORY,
                               "ts_batch_upload: out of memory packing '%s' for device %d", name, l->local_ids[d]);
    if (packed) ld_pack_block(b->block[k][d], in->shard_shape, ext, in->rank, es, packed);
    int rc = ts_buffer_write_shard(dst, l->local_ids[d], packed ? packed : b->block[k][d], bytes);
    free(packed);
    if (rc < 0) return ts_set_error_context("ts_batch_upload: input '%s', device %d", name, l->local_ids[d]);
  }
  return 0;
}

/* ---- position: seek, save, restore ---- */

int ts_loader_seek(ts_loader *l, int64_t epoch, int64_t step) {
  if (epoch < 0 || step < 0 || step >= l->spe)
    return ts_set_error("loader: cannot seek to epoch %lld step %lld (an epoch has %lld steps)",
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
  if (ld_get64(state) != LD_MAGIC) return ts_set_error("loader state: bad magic (not a loader state blob)");
  if (ld_get64(state + 56) != ld_checksum(state, 56))
    return ts_set_error("loader state: checksum mismatch (the state is corrupt)");
  uint64_t seed = ld_get64(state + 8), flags = ld_get64(state + 48);
  int64_t epoch = (int64_t)ld_get64(state + 16), step = (int64_t)ld_get64(state + 24);
  int64_t n = (int64_t)ld_get64(state + 32), B = (int64_t)ld_get64(state + 40);
  if (n != l->n)
    return ts_set_error("loader state: saved for a dataset of %lld samples but this one has %lld",
                        (long long)n, (long long)l->n);
  if (B != l->B)
    return ts_set_error("loader state: saved with batch %lld but this loader has batch %lld", (long long)B,
                        (long long)l->B);
  if (seed != l->o.seed)
    return ts_set_error("loader state: saved with seed %llu but this loader has seed %llu",
                        (unsigned long long)seed, (unsigned long long)l->o.seed);
  if ((flags & 0xff) != (uint64_t)l->o.last_batch || ((flags >> 8) & 1) != (uint64_t)l->o.no_shuffle)
    return ts_set_error("loader state: saved with another last-batch or shuffle mode");
  return ts_loader_seek(l, epoch, step);
}

int ts_loader_save_file(const ts_loader *l, const char *path) {
  uint8_t st[TS_LOADER_STATE_BYTES];
  ts_loader_save(l, st);
  FILE *f = fopen(path, "wb");
  if (!f) return ts_set_error_code(TS_ERR_IO, "%s: cannot open for writing", path);
  size_t w = fwrite(st, 1, sizeof st, f);
  if (fclose(f) != 0 || w != sizeof st) return ts_set_error_code(TS_ERR_IO, "%s: write failed", path);
  return 0;
}

int ts_loader_restore_file(ts_loader *l, const char *path) {
  uint8_t st[TS_LOADER_STATE_BYTES];
  FILE *f = fopen(path, "rb");
  if (!f) return ts_set_error_code(TS_ERR_IO, "%s: cannot open", path);
  size_t r = fread(st, 1, sizeof st, f);
  fclose(f);
  if (r != sizeof st)
    return ts_set_error_code(TS_ERR_IO,
                             "%s: truncated loader state: %zu bytes, expected %d", path, r, TS_LOADER_STATE_BYTES);
  if (ts_loader_restore(l, st) < 0) return ts_set_error_context("%s", path);
  return 0;
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
