/* buffer.c — device buffers: dtype + global shape + device memory owned by
 * the caller. On several devices a buffer holds one block per device (its
 * sharding; replicated = the whole tensor everywhere); uploads send each
 * device its block, reads gather the blocks. Host transfers go through the
 * devices' copy functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/net.h" /* reads of blocks held by other processes */
#include "runtime/rt.h"
#include "metrics/metrics_internal.h" /* transfer metrics */

const char *rt_shape_str(ts_dtype dt, int rank, const int64_t *shape, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "%s[", ts_dtype_name(dt));
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

/* Copies the block [start, limit) between a global row-major array (shape)
 * and a local one (lshape, the block at its origin): to_local picks the
 * direction. Rows of the last dim are contiguous in both. */
static void copy_block(char *local, const int64_t *lshape, char *global, const int64_t *shape, int rank,
                       const int64_t *start, const int64_t *limit, size_t es, bool to_local) {
  if (rank == 0) {
    if (to_local) memcpy(local, global, es);
    else memcpy(global, local, es);
    return;
  }
  for (int d = 0; d < rank; d++)
    if (limit[d] <= start[d]) return;
  int64_t idx[TS_MAX_RANK] = {0}; // position inside the block, last dim excluded
  size_t row = (size_t)(limit[rank - 1] - start[rank - 1]) * es;
  for (;;) {
    int64_t lo = 0, go = 0;
    for (int d = 0; d < rank; d++) {
      int64_t i = d == rank - 1 ? 0 : idx[d];
      lo = lo * lshape[d] + i;
      go = go * shape[d] + start[d] + i;
    }
    if (to_local) memcpy(local + (size_t)lo * es, global + (size_t)go * es, row);
    else memcpy(global + (size_t)go * es, local + (size_t)lo * es, row);
    int d = rank - 2;
    for (; d >= 0; d--) {
      if (++idx[d] < limit[d] - start[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

static void range_of(const ts_buffer *b, int device, int64_t *start, int64_t *limit) {
  if (b->sharding) {
    ts_sharding_shard_range(b->sharding, b->shape, device, start, limit);
    return;
  }
  for (int d = 0; d < b->rank; d++) {
    start[d] = 0;
    limit[d] = b->shape[d];
  }
}

static void free_shards(ts_buffer *b) {
  for (int i = 0; b->shards && i < b->n_shards; i++)
    if (b->shards[i]) b->client->devs[i].free(b->client->devs[i].ctx, b->shards[i]);
  free(b->shards);
  b->shards = NULL;
  b->data = NULL;
}

/* (Re)allocates zeroed shards for sharding s (already validated). */
static int alloc_shards(ts_buffer *b, const ts_sharding *s) {
  ts_client *c = b->client;
  if (s) ts_sharding_shard_shape(s, b->shape, b->local_shape);
  else memcpy(b->local_shape, b->shape, sizeof b->shape);
  b->shard_bytes = (size_t)ts_shape_numel(b->rank, b->local_shape) * ts_dtype_size(b->dtype);
  b->n_shards = c->num_devices;
  b->shards = calloc((size_t)c->num_devices, sizeof *b->shards);
  if (!b->shards) return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer: out of memory");
  for (int i = c->first_local; i < c->first_local + c->num_local; i++) /* other processes hold theirs */
    if (!(b->shards[i] = c->devs[i].alloc(c->devs[i].ctx, b->shard_bytes))) {
      free_shards(b);
      return set_error_code(TS_ERR_OUT_OF_MEMORY,
                               "buffer: out of memory allocating %zu bytes on device %d", b->shard_bytes, i);
    }
  for (int i = c->first_local; i < c->first_local + c->num_local; i++)
    memset(b->shards[i], 0, b->shard_bytes); /* API: zero-filled */
  b->data = b->shards[c->first_local];
  return 0;
}

static int check_sharding(const ts_client *c, const ts_sharding *s, int rank) {
  if (!s) return 0;
  if (ts_sharding_rank(s) != rank)
    return set_error("buffer: sharding is for rank %d but the buffer is rank %d", ts_sharding_rank(s), rank);
  if (ts_sharding_num_devices(s) != c->num_devices)
    return set_error("buffer: sharding's mesh has %lld devices but the client has %d (set num_devices or "
                        "TESSEL_CPU_DEVICES)", (long long)ts_sharding_num_devices(s), c->num_devices);
  return 0;
}

ts_buffer *rt_buffer_new_sharded(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const ts_sharding *s) {
  if (!c) {
    set_error("buffer: client is NULL");
    return NULL;
  }
  if ((unsigned)dt >= TS_DTYPE_COUNT) {
    set_error("buffer: invalid dtype %d", (int)dt);
    return NULL;
  }
  if (rank < 0 || rank > TS_MAX_RANK || (rank && !shape)) {
    set_error("buffer: rank %d is outside [0, %d] or shape is NULL", rank, TS_MAX_RANK);
    return NULL;
  }
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0) {
      set_error("buffer: dim %d has negative size %lld", i, (long long)shape[i]);
      return NULL;
    }
  if (check_sharding(c, s, rank) < 0) return NULL;
  ts_buffer *b = calloc(1, sizeof *b);
  if (!b) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer: out of memory");
    return NULL;
  }
  b->client = c;
  b->dtype = dt;
  b->rank = rank;
  if (rank) memcpy(b->shape, shape, (size_t)rank * sizeof *shape);
  b->bytes = (size_t)ts_shape_numel(rank, shape) * ts_dtype_size(dt);
  if (s && !ts_sharding_is_replicated(s) && !(b->sharding = ts_sharding_clone(s))) {
    free(b);
    return NULL;
  }
  if (alloc_shards(b, b->sharding) < 0) {
    ts_sharding_free(b->sharding);
    free(b);
    return NULL;
  }
  return b;
}

bool rt_buffer_has_sharding(const ts_buffer *b, const ts_sharding *s) {
  bool rep = !s || ts_sharding_is_replicated(s);
  if (!b->sharding) return rep;
  return !rep && ts_sharding_equal(b->sharding, s);
}

ts_buffer *ts_buffer_new(ts_client *c, ts_dtype dt, int rank, const int64_t *shape) {
  return rt_buffer_new_sharded(c, dt, rank, shape, NULL);
}

ts_buffer *ts_buffer_from_host_sharded(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const void *data,
                                       const ts_sharding *s) {
  ts_buffer *b = rt_buffer_new_sharded(c, dt, rank, shape, s);
  if (b && ts_buffer_write(b, data, b->bytes) < 0) {
    ts_buffer_free(b);
    return NULL;
  }
  return b;
}

ts_buffer *ts_buffer_from_host(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const void *data) {
  return ts_buffer_from_host_sharded(c, dt, rank, shape, data, NULL);
}

int ts_buffer_write(ts_buffer *b, const void *src, size_t bytes) {
  if (!b) return set_error("buffer_write: buffer is NULL");
  if (bytes != b->bytes) return set_error("buffer_write: got %zu bytes but the buffer holds %zu", bytes, b->bytes);
  if (bytes && !src) return set_error("buffer_write: source is NULL");
  if (rt_client_settle(b->client, b) < 0) return -1; /* collectives still writing it (carry.c) */
  rt_hold_wait(b, false); /* a held buffer: after the holder is done */
  TS_OBS_SCOPE("TransferToDeviceTime", "to device", "transfer", -1, bytes);
  ts_client *c = b->client;
  if (!b->sharding) {
    for (int i = c->first_local; i < c->first_local + c->num_local; i++)
      if (c->devs[i].to_device(c->devs[i].ctx, b->shards[i], src, bytes) < 0) return -1;
    return 0;
  }
  char *tmp = malloc(b->shard_bytes + 1);
  if (!tmp) return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_write: out of memory");
  size_t es = ts_dtype_size(b->dtype);
  int rc = 0;
  for (int i = c->first_local; i < c->first_local + c->num_local && rc == 0; i++) {
    int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
    range_of(b, i, start, limit);
    memset(tmp, 0, b->shard_bytes); /* padding of uneven blocks: zeros */
    copy_block(tmp, b->local_shape, (char *)src, b->shape, b->rank, start, limit, es, true);
    rc = c->devs[i].to_device(c->devs[i].ctx, b->shards[i], tmp, b->shard_bytes);
  }
  free(tmp);
  return rc;
}

/* owner[i]: the lowest device id whose block has device i's range (the one
 * read for that range). Ranges are computed once: O(N) ranges, O(N^2)
 * compares of rank-sized arrays. */
static int block_owners(const ts_buffer *b, int *owner) {
  int n = b->n_shards, r = b->rank;
  int64_t *lo = malloc(((size_t)n * (size_t)r + 1) * sizeof *lo), *hi = malloc(((size_t)n * (size_t)r + 1) * sizeof *hi);
  if (!lo || !hi) {
    free(lo);
    free(hi);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_read: out of memory");
  }
  for (int i = 0; i < n; i++) {
    range_of(b, i, lo + (size_t)i * (size_t)r, hi + (size_t)i * (size_t)r);
    owner[i] = i;
    for (int j = 0; j < i && owner[i] == i; j++)
      if (owner[j] == j && !memcmp(lo + (size_t)i * (size_t)r, lo + (size_t)j * (size_t)r, (size_t)r * sizeof *lo) &&
          !memcmp(hi + (size_t)i * (size_t)r, hi + (size_t)j * (size_t)r, (size_t)r * sizeof *hi))
        owner[i] = j;
  }
  free(lo);
  free(hi);
  return 0;
}

/* Every range that no device of this process holds comes from its owner in
 * another process: each process sends the blocks it owns to every process,
 * in device order. */
static int read_from_processes(const ts_buffer *b, void *dst, const int *owner) {
  const ts_client *c = b->client;
  int P = c->process_count, me = c->process_index;
  size_t sb = b->shard_bytes, es = ts_dtype_size(b->dtype);
  size_t *owned = calloc((size_t)P, sizeof *owned); /* blocks each process owns */
  for (int i = 0; owned && i < b->n_shards; i++)
    if (owner[i] == i) owned[c->device_process[i]]++;
  size_t total = 0;
  for (int p = 0; owned && p < P; p++) total += owned[p];
  char *all = owned ? malloc(total * sb + 1) : NULL; /* owned blocks, process-major = device order */
  net_msg *m = all ? malloc((size_t)2 * (size_t)P * sizeof *m) : NULL;
  if (!m) {
    free(owned);
    free(all);
    return set_error_code(TS_ERR_OUT_OF_MEMORY,
                             "buffer_read: out of memory gathering %zu bytes from other processes", b->bytes);
  }
  size_t off = 0, mine = 0;
  int rc = 0, k = 0;
  for (int p = 0; p < P; p++) {
    if (p == me) mine = off;
    off += owned[p] * sb;
  }
  char *w = all + mine;
  for (int i = c->first_local; i < c->first_local + c->num_local && rc == 0; i++)
    if (owner[i] == i) {
      rc = c->devs[i].to_host(c->devs[i].ctx, w, b->shards[i], sb);
      w += sb;
    }
  off = 0;
  for (int p = 0; p < P; p++) {
    if (p != me) {
      m[k++] = (net_msg){p, 2, true, all + mine, owned[me] * sb};
      m[k++] = (net_msg){p, 2, false, all + off, owned[p] * sb};
    }
    off += owned[p] * sb;
  }
  if (rc == 0) rc = net_exchange_ctl(c->net, m, k, c->timeout_ms, "buffer_read (a collective read of a buffer "
                                     "sharded over several processes: every process must read it)");
  char *r = all;
  for (int i = 0; i < b->n_shards && rc == 0; i++) {
    if (owner[i] != i) continue;
    int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
    range_of(b, i, start, limit);
    copy_block(r, b->local_shape, dst, b->shape, b->rank, start, limit, es, false);
    r += sb;
  }
  free(owned);
  free(all);
  free(m);
  return rc;
}

/* True when some process holds no block of some range: then the read is
 * collective (decided alike in every process: all of them exchange or none). */
static bool needs_processes(const ts_buffer *b, const int *owner, char *has) {
  const ts_client *c = b->client;
  for (int p = 0; p < c->process_count; p++) {
    memset(has, 0, (size_t)b->n_shards);
    for (int d = 0; d < b->n_shards; d++)
      if (c->device_process[d] == p) has[owner[d]] = 1;
    for (int i = 0; i < b->n_shards; i++)
      if (owner[i] == i && !has[i]) return true;
  }
  return false;
}

int ts_buffer_read(const ts_buffer *b, void *dst, size_t bytes) {
  if (!b) return set_error("buffer_read: buffer is NULL");
  if (bytes != b->bytes) return set_error("buffer_read: asked for %zu bytes but the buffer holds %zu", bytes, b->bytes);
  if (bytes && !dst) return set_error("buffer_read: destination is NULL");
  if (rt_client_settle(b->client, b) < 0) return -1; /* collectives still writing it (carry.c) */
  TS_OBS_SCOPE("TransferFromDeviceTime", "from device", "transfer", -1, bytes);
  const ts_client *c = b->client;
  int first = c->first_local, n = b->n_shards;
  if (!b->sharding) return c->devs[first].to_host(c->devs[first].ctx, dst, b->shards[first], bytes);
  int *owner = malloc(((size_t)n + 1) * sizeof *owner), *local = malloc(((size_t)n + 1) * sizeof *local);
  char *has = malloc((size_t)n + 1), *tmp = malloc(b->shard_bytes + 1);
  int rc = owner && local && has && tmp ? block_owners(b, owner) : set_error_code(TS_ERR_OUT_OF_MEMORY,
                                                                                     "buffer_read: out of memory");
  if (rc == 0 && needs_processes(b, owner, has)) {
    rc = read_from_processes(b, dst, owner);
  } else if (rc == 0) { /* each range once, from a local block holding it */
    for (int i = 0; i < n; i++) local[i] = -1;
    for (int d = first + c->num_local - 1; d >= first; d--) local[owner[d]] = d;
    size_t es = ts_dtype_size(b->dtype);
    for (int i = 0; i < n && rc == 0; i++) {
      if (owner[i] != i) continue;
      int h = local[i];
      int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
      range_of(b, i, start, limit);
      rc = c->devs[h].to_host(c->devs[h].ctx, tmp, b->shards[h], b->shard_bytes);
      if (rc == 0) copy_block(tmp, b->local_shape, dst, b->shape, b->rank, start, limit, es, false);
    }
  }
  free(owner);
  free(local);
  free(has);
  free(tmp);
  return rc;
}

const ts_sharding *ts_buffer_sharding(const ts_buffer *b) { return b ? b->sharding : NULL; }

int ts_buffer_shard_range(const ts_buffer *b, int device, int64_t *start, int64_t *limit) {
  if (!b) return set_error("buffer_shard_range: buffer is NULL");
  if (device < 0 || device >= b->n_shards)
    return set_error("buffer_shard_range: device %d is outside [0, %d)", device, b->n_shards);
  range_of(b, device, start, limit);
  return 0;
}

/* Checks a block transfer of device `device` (`what` names the call) and
 * gives the block's extent (its range, without padding). */
static int check_block(const ts_buffer *b, int device, const void *host, size_t bytes, const char *what,
                       int64_t *ext) {
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
  if (ts_buffer_shard_range(b, device, start, limit) < 0) return -1;
  for (int d = 0; d < b->rank; d++) ext[d] = limit[d] - start[d];
  size_t want = (size_t)ts_shape_numel(b->rank, ext) * ts_dtype_size(b->dtype);
  if (bytes != want) return set_error("%s: %zu bytes given but device %d's block holds %zu", what, bytes, device, want);
  if (bytes && !host) return set_error("%s: host memory is NULL", what);
  if (!rt_is_local(b->client, device))
    return set_error("%s: device %d belongs to process %d, not to this one (%d)", what, device,
                        b->client->device_process[device], b->client->process_index);
  return 0;
}

int ts_buffer_read_shard(const ts_buffer *b, int device, void *dst, size_t bytes) {
  int64_t ext[TS_MAX_RANK], zero[TS_MAX_RANK] = {0};
  if (check_block(b, device, dst, bytes, "buffer_read_shard", ext) < 0) return -1;
  if (rt_client_settle(b->client, b) < 0) return -1; /* collectives still writing it (carry.c) */
  const ts_device *d = &b->client->devs[device];
  if (bytes == b->shard_bytes) /* an unpadded block: the device's memory is the block (checkpoints: one copy) */
    return d->to_host(d->ctx, dst, b->shards[device], bytes);
  char *tmp = malloc(b->shard_bytes + 1);
  if (!tmp) return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_read_shard: out of memory");
  int rc = d->to_host(d->ctx, tmp, b->shards[device], b->shard_bytes);
  /* the block's valid part is the origin corner of the padded local block */
  if (rc == 0) copy_block(tmp, b->local_shape, dst, ext, b->rank, zero, ext, ts_dtype_size(b->dtype), false);
  free(tmp);
  return rc;
}

int ts_buffer_write_shard(ts_buffer *b, int device, const void *src, size_t bytes) {
  int64_t ext[TS_MAX_RANK], zero[TS_MAX_RANK] = {0};
  if (check_block(b, device, src, bytes, "buffer_write_shard", ext) < 0) return -1;
  if (rt_client_settle(b->client, b) < 0) return -1; /* collectives still writing it (carry.c) */
  rt_hold_wait(b, false); /* a held buffer: after the holder is done */
  TS_OBS_SCOPE("TransferToDeviceTime", "to device", "transfer", device, bytes);
  const ts_device *d = &b->client->devs[device];
  if (bytes == b->shard_bytes) /* an unpadded block: written as it is */
    return d->to_device(d->ctx, b->shards[device], src, bytes);
  char *tmp = calloc(1, b->shard_bytes + 1); /* padding of an uneven block: zeros */
  if (!tmp) return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_write_shard: out of memory");
  copy_block(tmp, b->local_shape, (char *)src, ext, b->rank, zero, ext, ts_dtype_size(b->dtype), true);
  int rc = d->to_device(d->ctx, b->shards[device], tmp, b->shard_bytes);
  free(tmp);
  return rc;
}

int ts_buffer_reshard(ts_buffer *b, const ts_sharding *s) {
  if (!b) return set_error("buffer_reshard: buffer is NULL");
  if (check_sharding(b->client, s, b->rank) < 0) return -1;
  if (rt_buffer_has_sharding(b, s)) return 0;
  if (rt_client_settle(b->client, b) < 0) return -1; /* collectives still writing it (carry.c) */
  rt_hold_wait(b, true); /* a held buffer: after the holder is done; new block sizes, no spare */
  /* through the host: rare (only when a caller passes a buffer laid out
   * differently from what a program expects) */
  void *host = malloc(b->bytes + 1);
  if (!host) return set_error_code(TS_ERR_OUT_OF_MEMORY, "buffer_reshard: out of memory");
  int rc = ts_buffer_read(b, host, b->bytes);
  ts_sharding *ns = NULL;
  if (rc == 0 && s && !ts_sharding_is_replicated(s) && !(ns = ts_sharding_clone(s))) rc = -1;
  if (rc == 0) {
    free_shards(b);
    ts_sharding_free(b->sharding);
    b->sharding = ns;
    rc = alloc_shards(b, ns);
    if (rc == 0) rc = ts_buffer_write(b, host, b->bytes);
  }
  free(host);
  return rc;
}

void ts_buffer_free(ts_buffer *b) {
  if (!b) return;
  rt_client_settle(b->client, b); /* no collective may write freed memory; its error surfaces elsewhere */
  rt_hold_buffer_gone(b); /* held memory: the hold's from now on */
  free_shards(b);
  ts_sharding_free(b->sharding);
  free(b);
}

ts_dtype ts_buffer_dtype(const ts_buffer *b) { return b->dtype; }
int ts_buffer_rank(const ts_buffer *b) { return b->rank; }
const int64_t *ts_buffer_shape(const ts_buffer *b) { return b->shape; }
size_t ts_buffer_bytes(const ts_buffer *b) { return b->bytes; }
