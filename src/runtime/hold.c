/* hold.c — ts_buffer_hold: a buffer's contents kept readable, without a
 * copy, while the buffer goes on being used (a checkpoint's background
 * writer reads the held memory while the next training steps run).
 *
 * A hold records the buffer's block memory. While it is held:
 * - ts_execute, about to update the buffer in place (a donated input),
 *   computes the new values into other memory and moves the buffer there
 *   (execute.c: rt_hold_out_memory / rt_hold_move); the held memory stays
 *   as it was. The memory left behind becomes the buffer's spare once the
 *   hold is released, and the next move takes it: in steady state (a save
 *   every N steps) nothing is allocated and the two memories alternate.
 * - writes from the host and resharding wait for the release (rt_hold_wait):
 *   they are rare and the holder releases after a bounded copy.
 * - ts_buffer_free hands the held memory to the hold (freed at release).
 *
 * The first such move of a buffer allocates that memory, and the step that
 * writes it takes its page faults (1.49 GB of state: 360k 4 KiB faults in the
 * one step beside the first save). On CPU devices a block of >= 2 MiB starts
 * on a huge-page boundary and is marked for transparent huge pages
 * (cpu_device.c; THP in its madvise mode): 512 times fewer faults, and the
 * copies of the next saves, which read it, miss the TLB less.
 *
 * The holder reads the held bytes copied out (ts_buffer_hold_read_range) or
 * visited in place (ts_buffer_hold_visit_range: host memory on CPU devices,
 * staged through a bounce buffer elsewhere); both walk the same runs
 * (hold_runs: one per row of the last dim in a padded block).
 *
 * Threads: the buffer's fields (b->hold, b->spare, b->shards) belong to the
 * thread using the buffer; the holder (any thread) touches only the hold's
 * fields, under its mutex. A hold object is freed by whichever of the two
 * lets go of it last (holder released and buffer unlinked). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt.h"
#include "util/error.h"

struct ts_buffer_hold {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool holder; /* not released yet */
  bool linked; /* the buffer points at it (b->hold, or b->spare once moved) */
  bool moved;  /* the memory is no longer the buffer's live memory: the hold's (freed with it) or a spare */
  ts_client *c;
  ts_dtype dtype;
  int rank, n_shards;
  void **shards;                 /* (n_shards) the held memory; NULL where not local */
  size_t shard_bytes;
  int64_t local_shape[TS_MAX_RANK];
  int64_t (*ext)[TS_MAX_RANK];   /* (n_shards) each block's valid extent */
};

static void hold_free_memory(ts_buffer_hold *h) {
  for (int i = 0; h->shards && i < h->n_shards; i++)
    if (h->shards[i]) h->c->devs[i].free(h->c->devs[i].ctx, h->shards[i]);
  free(h->shards);
  h->shards = NULL;
}

static void hold_destroy(ts_buffer_hold *h) {
  if (h->moved) hold_free_memory(h);
  free(h->shards);
  free(h->ext);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
}

/* The buffer lets go of h (b->hold or b->spare). keep_memory: the memory is
 * still the buffer's (not freed with the hold). */
static void hold_unlink(ts_buffer_hold *h, bool keep_memory) {
  pthread_mutex_lock(&h->mu);
  h->linked = false;
  bool last = !h->holder;
  if (keep_memory) { /* the buffer's live memory: the hold must not free it */
    free(h->shards);
    h->shards = NULL;
    h->moved = false;
  }
  pthread_mutex_unlock(&h->mu);
  if (last) hold_destroy(h);
}

ts_buffer_hold *ts_buffer_hold_new(ts_buffer *b) {
  if (!b) {
    set_error("buffer_hold: buffer is NULL");
    return NULL;
  }
  /* collectives left in flight by the last execute may still be writing
   * the blocks (carry.c): the hold must see their final contents */
  if (rt_client_settle(b->client, b) < 0) return NULL;
  if (b->hold) {
    pthread_mutex_lock(&b->hold->mu);
    bool held = b->hold->holder;
    pthread_mutex_unlock(&b->hold->mu);
    if (held) {
      set_error("buffer_hold: the buffer is already held (one hold at a time)");
      return NULL;
    }
    hold_unlink(b->hold, true);
    b->hold = NULL;
  }
  ts_buffer_hold *h = calloc(1, sizeof *h);
  if (h) {
    h->shards = calloc((size_t)b->n_shards + 1, sizeof *h->shards);
    h->ext = calloc((size_t)b->n_shards + 1, sizeof *h->ext);
  }
  if (!h || !h->shards || !h->ext) {
    if (h) free(h->shards), free(h->ext);
    free(h);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_hold: out of memory");
    return NULL;
  }
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->holder = h->linked = true;
  h->c = b->client;
  h->dtype = b->dtype;
  h->rank = b->rank;
  h->n_shards = b->n_shards;
  h->shard_bytes = b->shard_bytes;
  memcpy(h->local_shape, b->local_shape, sizeof h->local_shape);
  memcpy(h->shards, b->shards, (size_t)b->n_shards * sizeof *h->shards);
  for (int i = 0; i < b->n_shards; i++) {
    int64_t start[TS_MAX_RANK] = {0}, limit[TS_MAX_RANK] = {0};
    ts_buffer_shard_range(b, i, start, limit);
    for (int d = 0; d < b->rank; d++) h->ext[i][d] = limit[d] - start[d];
  }
  b->hold = h;
  return h;
}

int ts_buffer_hold_read_shard(const ts_buffer_hold *h, int device, void *dst, size_t bytes) {
  if (!h) return set_error("buffer_hold_read_shard: hold is NULL");
  if (device < 0 || device >= h->n_shards || !h->shards[device])
    return set_error("buffer_hold_read_shard: device %d is not a local device of the held buffer", device);
  size_t want = (size_t)ts_shape_numel(h->rank, h->ext[device]) * ts_dtype_size(h->dtype);
  if (bytes != want)
    return set_error("buffer_hold_read_shard: %zu bytes given but device %d's block holds %zu", bytes, device, want);
  if (bytes && !dst) return set_error("buffer_hold_read_shard: host memory is NULL");
  return ts_buffer_hold_read_range(h, device, 0, dst, bytes); /* the whole block */
}

/* Checks [offset, offset + bytes) against device's held block: 0, or -1
 * (error set, naming the caller `fn`). */
static int hold_check_range(const ts_buffer_hold *h, const char *fn, int device, size_t offset, size_t bytes) {
  if (!h) return set_error("%s: hold is NULL", fn);
  if (device < 0 || device >= h->n_shards || !h->shards[device])
    return set_error("%s: device %d is not a local device of the held buffer", fn, device);
  size_t want = (size_t)ts_shape_numel(h->rank, h->ext[device]) * ts_dtype_size(h->dtype);
  if (offset > want || bytes > want - offset)
    return set_error("%s: bytes [%zu, %zu) are outside device %d's block of %zu bytes", fn, offset, offset + bytes,
                     device, want);
  return 0;
}

/* Calls run(ctx, p, n) on the contiguous runs of device memory that hold
 * bytes [offset, offset + bytes) of the block's row-major contents, in
 * order: one run for an unpadded block; in a padded block one per row of
 * the last dim (each at its place in the padded layout). Stops at the first
 * nonzero return and returns it. */
static int hold_runs(const ts_buffer_hold *h, int device, size_t offset, size_t bytes,
                     int (*run)(void *ctx, const char *p, size_t n), void *ctx) {
  size_t es = ts_dtype_size(h->dtype), want = (size_t)ts_shape_numel(h->rank, h->ext[device]) * es;
  const char *base = h->shards[device]; /* device memory is addressed by byte offset */
  if (want == h->shard_bytes) return run(ctx, base + offset, bytes);
  int r = h->rank;
  size_t row = (size_t)h->ext[device][r - 1] * es;
  while (bytes > 0) {
    size_t ri = offset / row, in = offset % row, src = 0, stride = (size_t)h->local_shape[r - 1] * es;
    for (int k = r - 2; k >= 0; k--) { /* row ri's multi-index in ext, its place in the padded block */
      src += (ri % (size_t)h->ext[device][k]) * stride;
      ri /= (size_t)h->ext[device][k];
      stride *= (size_t)h->local_shape[k];
    }
    size_t m = row - in < bytes ? row - in : bytes;
    int rc = run(ctx, base + src + in, m);
    if (rc != 0) return rc;
    offset += m, bytes -= m;
  }
  return 0;
}

/* ts_buffer_hold_read_range's run: to_host into the next bytes of dst. */
typedef struct {
  const ts_device *d;
  char *out;
} read_ctx;
static int read_run(void *ctx, const char *p, size_t n) {
  read_ctx *rc = ctx;
  int r = rc->d->to_host(rc->d->ctx, rc->out, p, n);
  rc->out += n;
  return r;
}

int ts_buffer_hold_read_range(const ts_buffer_hold *h, int device, size_t offset, void *dst, size_t bytes) {
  if (hold_check_range(h, "buffer_hold_read_range", device, offset, bytes) < 0) return -1;
  if (bytes == 0) return 0;
  if (!dst) return set_error("buffer_hold_read_range: host memory is NULL");
  read_ctx rc = {.d = &h->c->devs[device], .out = dst};
  return hold_runs(h, device, offset, bytes, read_run, &rc);
}

enum { HOLD_BOUNCE = 1u << 20 }; /* bytes staged at a time where device memory is not host memory */

/* ts_buffer_hold_visit_range's run: the device memory itself where it is
 * host memory (CPU devices), else staged through a bounce buffer. */
typedef struct {
  const ts_device *d;
  bool host;
  char *bounce;
  ts_hold_visit_fn fn;
  void *ctx;
} visit_ctx;
static int visit_run(void *ctx, const char *p, size_t n) {
  visit_ctx *v = ctx;
  if (v->host) return v->fn(v->ctx, p, n);
  for (size_t o = 0; o < n; o += HOLD_BOUNCE) {
    size_t m = n - o < HOLD_BOUNCE ? n - o : HOLD_BOUNCE;
    int rc = v->d->to_host(v->d->ctx, v->bounce, p + o, m);
    if (rc == 0) rc = v->fn(v->ctx, v->bounce, m);
    if (rc != 0) return rc;
  }
  return 0;
}

int ts_buffer_hold_visit_range(const ts_buffer_hold *h, int device, size_t offset, size_t bytes, ts_hold_visit_fn fn,
                               void *ctx) {
  if (hold_check_range(h, "buffer_hold_visit_range", device, offset, bytes) < 0) return -1;
  if (!fn) return set_error("buffer_hold_visit_range: visitor is NULL");
  if (bytes == 0) return 0;
  visit_ctx v = {.d = &h->c->devs[device], .fn = fn, .ctx = ctx};
  v.host = v.d->platform && strcmp(v.d->platform, "cpu") == 0;
  if (!v.host && !(v.bounce = malloc(HOLD_BOUNCE)))
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_hold_visit_range: out of memory");
  int rc = hold_runs(h, device, offset, bytes, visit_run, &v);
  free(v.bounce);
  return rc;
}

void ts_buffer_hold_release(ts_buffer_hold *h) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->holder = false;
  bool last = !h->linked;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  if (last) hold_destroy(h);
}

/* True while b's live memory is held (ts_execute must not update it in
 * place); a released hold is dropped here. */
bool rt_hold_active(ts_buffer *b) {
  if (!b->hold) return false;
  pthread_mutex_lock(&b->hold->mu);
  bool held = b->hold->holder;
  pthread_mutex_unlock(&b->hold->mu);
  if (!held) {
    hold_unlink(b->hold, true);
    b->hold = NULL;
  }
  return held;
}

/* Before b's memory is written in place from the host or re-laid out: waits
 * for the release of its hold, then drops it (and the spare when dropping_spare:
 * the blocks change size). */
void rt_hold_wait(ts_buffer *b, bool drop_spare) {
  if (b->hold) {
    ts_buffer_hold *h = b->hold;
    pthread_mutex_lock(&h->mu);
    while (h->holder) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    hold_unlink(h, true);
    b->hold = NULL;
  }
  if (drop_spare && b->spare) {
    hold_unlink(b->spare, false);
    b->spare = NULL;
  }
}

/* ts_buffer_free: the live memory goes to b's hold if it is still held (then
 * b->shards no longer owns it: freed here, the array only); the spare is freed. */
void rt_hold_buffer_gone(ts_buffer *b) {
  if (b->spare) {
    hold_unlink(b->spare, false);
    b->spare = NULL;
  }
  if (!b->hold) return;
  ts_buffer_hold *h = b->hold;
  b->hold = NULL;
  pthread_mutex_lock(&h->mu);
  bool held = h->holder;
  if (held) h->moved = true; /* the hold's now: freed at its release */
  h->linked = false;
  pthread_mutex_unlock(&h->mu);
  if (!held) {
    free(h->shards); /* the buffer's memory, freed by the buffer */
    h->shards = NULL;
    hold_destroy(h);
    return;
  }
  free(b->shards); /* the memory is the hold's */
  b->shards = NULL;
  b->data = NULL;
}

/* Counts the memory allocated for held buffers' new values (tests: none in
 * steady state). */
long rt_hold_allocs;

/* Memory for the new values of held buffer b (same block sizes): its spare
 * if released, else fresh. Where b's blocks are padded, the old block is
 * copied in first (the padding keeps its bytes, as in place). NULL: out of
 * memory (error set). */
void **rt_hold_out_memory(ts_buffer *b) {
  ts_client *c = b->client;
  void **mem = NULL;
  if (b->spare) {
    ts_buffer_hold *s = b->spare;
    pthread_mutex_lock(&s->mu);
    bool free_now = !s->holder && s->shard_bytes == b->shard_bytes && s->n_shards == b->n_shards;
    if (free_now) mem = s->shards, s->shards = NULL, s->moved = false; /* taken: nothing left to free */
    pthread_mutex_unlock(&s->mu);
    if (free_now) {
      hold_unlink(s, false);
      b->spare = NULL;
    }
  }
  if (!mem) {
    if (!(mem = calloc((size_t)b->n_shards + 1, sizeof *mem))) goto oom;
    for (int i = c->first_local; i < c->first_local + c->num_local; i++) {
      if (!(mem[i] = c->devs[i].alloc(c->devs[i].ctx, b->shard_bytes))) goto oom; /* huge pages: cpu_device.c */
    }
    __atomic_add_fetch(&rt_hold_allocs, 1, __ATOMIC_RELAXED);
  }
  for (int i = c->first_local; i < c->first_local + c->num_local; i++) {
    const ts_buffer_hold *h = b->hold;
    if ((size_t)ts_shape_numel(b->rank, h->ext[i]) * ts_dtype_size(b->dtype) != b->shard_bytes &&
        c->devs[i].copy(c->devs[i].ctx, mem[i], b->shards[i], b->shard_bytes) < 0) {
      rt_hold_free_memory(b, mem);
      return NULL;
    }
  }
  return mem;
oom:
  rt_hold_free_memory(b, mem);
  set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory for the new values of a held buffer (%zu bytes a block)",
                 b->shard_bytes);
  return NULL;
}

void rt_hold_free_memory(ts_buffer *b, void **mem) {
  ts_client *c = b->client;
  for (int i = 0; mem && i < b->n_shards; i++)
    if (mem[i]) c->devs[i].free(c->devs[i].ctx, mem[i]);
  free(mem);
}

/* After ts_execute computed b's new values into mem: b moves there; the held
 * memory becomes b's spare (taken back by the next move once released). */
void rt_hold_move(ts_buffer *b, void **mem) {
  ts_buffer_hold *h = b->hold;
  if (b->spare) { /* a spare still held elsewhere: let it go */
    hold_unlink(b->spare, false);
    b->spare = NULL;
  }
  pthread_mutex_lock(&h->mu);
  h->moved = true;
  pthread_mutex_unlock(&h->mu);
  free(b->shards); /* the array; the memory is h's */
  b->shards = mem;
  b->data = mem[b->client->first_local];
  b->hold = NULL;
  b->spare = h;
}
