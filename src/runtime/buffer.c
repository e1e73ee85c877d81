/* buffer.c — device buffers: dtype + shape + device memory owned by the
 * caller; host transfers go through the device's copy functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt.h"

const char *rt_shape_str(ts_dtype dt, int rank, const int64_t *shape, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "%s[", ts_dtype_name(dt));
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

ts_buffer *ts_buffer_new(ts_client *c, ts_dtype dt, int rank, const int64_t *shape) {
  if (!c) {
    ts_set_error("buffer: client is NULL");
    return NULL;
  }
  if ((unsigned)dt >= TS_DTYPE_COUNT) {
    ts_set_error("buffer: invalid dtype %d", (int)dt);
    return NULL;
  }
  if (rank < 0 || rank > TS_MAX_RANK || (rank && !shape)) {
    ts_set_error("buffer: rank %d is outside [0, %d] or shape is NULL", rank, TS_MAX_RANK);
    return NULL;
  }
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0) {
      ts_set_error("buffer: dim %d has negative size %lld", i, (long long)shape[i]);
      return NULL;
    }
  ts_buffer *b = calloc(1, sizeof *b);
  if (!b) {
    ts_set_error("buffer: out of memory");
    return NULL;
  }
  b->client = c;
  b->dtype = dt;
  b->rank = rank;
  if (rank) memcpy(b->shape, shape, (size_t)rank * sizeof *shape);
  b->bytes = (size_t)ts_shape_numel(rank, shape) * ts_dtype_size(dt);
  b->data = c->dev.alloc(c->dev.ctx, b->bytes);
  if (!b->data) {
    ts_set_error("buffer: out of memory allocating %zu bytes", b->bytes);
    free(b);
    return NULL;
  }
  return b;
}

ts_buffer *ts_buffer_from_host(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const void *data) {
  ts_buffer *b = ts_buffer_new(c, dt, rank, shape);
  if (b && ts_buffer_write(b, data, b->bytes) < 0) {
    ts_buffer_free(b);
    return NULL;
  }
  return b;
}

int ts_buffer_write(ts_buffer *b, const void *src, size_t bytes) {
  if (!b) return ts_set_error("buffer_write: buffer is NULL");
  if (bytes != b->bytes) return ts_set_error("buffer_write: got %zu bytes but the buffer holds %zu", bytes, b->bytes);
  if (bytes && !src) return ts_set_error("buffer_write: source is NULL");
  return b->client->dev.to_device(b->client->dev.ctx, b->data, src, bytes);
}

int ts_buffer_read(const ts_buffer *b, void *dst, size_t bytes) {
  if (!b) return ts_set_error("buffer_read: buffer is NULL");
  if (bytes != b->bytes) return ts_set_error("buffer_read: asked for %zu bytes but the buffer holds %zu", bytes, b->bytes);
  if (bytes && !dst) return ts_set_error("buffer_read: destination is NULL");
  return b->client->dev.to_host(b->client->dev.ctx, dst, b->data, bytes);
}

void ts_buffer_free(ts_buffer *b) {
  if (!b) return;
  b->client->dev.free(b->client->dev.ctx, b->data);
  free(b);
}

ts_dtype ts_buffer_dtype(const ts_buffer *b) { return b->dtype; }
int ts_buffer_rank(const ts_buffer *b) { return b->rank; }
const int64_t *ts_buffer_shape(const ts_buffer *b) { return b->shape; }
size_t ts_buffer_bytes(const ts_buffer *b) { return b->bytes; }
