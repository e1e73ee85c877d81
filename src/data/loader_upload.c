/* loader_upload.c — a batch the loader handed out: its sample indices and
 * rows, each device's block of an input, and the upload of an input into a
 * (sharded) buffer, whole or block by block in minibatch mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_internal.h"
#include "util/error.h" /* set_error */

int64_t ts_batch_epoch(const ts_loader_batch *b) { return b->epoch; }
int64_t ts_batch_step(const ts_loader_batch *b) { return b->step; }
int64_t ts_batch_valid(const ts_loader_batch *b) { return b->valid; }

int64_t ts_batch_sample_index(const ts_loader_batch *b, int64_t row) {
  return row >= 0 && row < b->l->B ? b->index[row] : -1;
}

int64_t ts_batch_local_rows(const ts_loader_batch *b, int64_t *row_start, const float **x, const int32_t **y,
                            const float **mask) {
  if (row_start) *row_start = b->l->row_start;
  if (x) *x = b->l->tokens ? NULL : b->x;
  if (y) *y = b->y;
  if (mask) *mask = b->mask;
  return b->l->rows;
}

int64_t ts_batch_local_tokens(const ts_loader_batch *b, int64_t *row_start, const int32_t **x,
                              const int32_t **y, const float **mask) {
  if (!b->l->tokens)
    return set_error("ts_batch_local_tokens: the loader's source '%s' is an image source (use ts_batch_local_rows)",
                     b->l->src->name ? b->l->src->name : "?");
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
    if (strcmp(name, ld_in_names[j]) == 0) k = j;
  if (k < 0) return set_error("ts_batch_shard: no input '%s' (the loader's inputs are x, y, mask)",
                                 name ? name : "(NULL)");
  int d = -1;
  for (int j = 0; j < l->nlocal; j++)
    if (l->local_ids[j] == device) d = j;
  if (d < 0)
    return set_error("ts_batch_shard: device %d is not one of this process's devices [%d, %d]", device,
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
    if (strcmp(name, ld_in_names[j]) == 0) k = j;
  if (k < 0) return set_error("ts_batch_upload: no input '%s' (the loader's inputs are x, y, mask)",
                                 name ? name : "(NULL)");
  const ld_input *in = &l->in[k];
  if (!dst) return set_error("ts_batch_upload: buffer for '%s' is NULL", name);
  bool same = ts_buffer_dtype(dst) == in->dt && ts_buffer_rank(dst) == in->rank;
  for (int j = 0; same && j < in->rank; j++) same = ts_buffer_shape(dst)[j] == in->shape[j];
  if (!same)
    return set_error("ts_batch_upload: the buffer for '%s' is not %s %s of the loader's batch %lld", name,
                        ts_dtype_name(in->dt), ld_shape_text(l, k), (long long)l->B);
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
    set_error("ts_batch_upload: the buffer for '%s' has sharding %s but the loader cuts '%s' as %s; in "
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
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_batch_upload: out of memory packing '%s' for device %d", name, l->local_ids[d]);
    if (packed) ld_pack_block(b->block[k][d], in->shard_shape, ext, in->rank, es, packed);
    int rc = ts_buffer_write_shard(dst, l->local_ids[d], packed ? packed : b->block[k][d], bytes);
    free(packed);
    if (rc < 0) return set_error_context("ts_batch_upload: input '%s', device %d", name, l->local_ids[d]);
  }
  return 0;
}
