/* train_ddp.c — `tessel train --parallel ddp`: each replica's rows of the
 * global batch, and the check that the replicas stay identical. */
#include <stdio.h>
#include <stdlib.h>

#include "train_run.h"

int train_ddp_upload_rows(const ts_loader_batch *batch, program *pr, int rank, int64_t b) {
  int64_t start;
  const int32_t *tx, *ty;
  if (ts_buffer_dtype(pr->io.x) == TS_I32) { /* tokens: x, y (b, T) i32 */
    if (ts_batch_local_tokens(batch, &start, &tx, &ty, NULL) < 0) return -1;
    int64_t T = ts_buffer_shape(pr->io.x)[1], first = rank * b - start;
    if (ts_buffer_write(pr->io.x, tx + first * T, (size_t)(b * T) * sizeof *tx) < 0) return -1;
    return ts_buffer_write(pr->io.y, ty + first * T, (size_t)(b * T) * sizeof *ty);
  }
  const float *x;
  const int32_t *y;
  ts_batch_local_rows(batch, &start, &x, &y, NULL);
  const int64_t *xs = ts_buffer_shape(pr->io.x);
  int64_t sample = xs[1] * xs[2] * xs[3], first = rank * b - start;
  if (ts_buffer_write(pr->io.x, x + first * sample, (size_t)(b * sample) * sizeof *x) < 0) return -1;
  return ts_buffer_write(pr->io.y, y + first, (size_t)b * sizeof *y);
}

/* FNV-1a of every parameter's bytes, compared across processes. */
int train_ddp_check_replicas(ts_client *c, ts_params *p, int64_t step) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int k = 0; k < ts_params_count(p); k++) {
    ts_buffer *b = ts_params_buffer(p, c, k);
    size_t n = b ? ts_buffer_bytes(b) : 0;
    unsigned char *host = b ? malloc(n + 1) : NULL;
    if (!b || !host || ts_buffer_read(b, host, n) < 0) {
      if (b && !host) fprintf(stderr, "tessel train: --check-replicas: out of memory\n");
      free(host);
      return -1;
    }
    for (size_t i = 0; i < n; i++) h = (h ^ host[i]) * 0x100000001b3ull;
    free(host);
  }
  char what[64], text[32];
  snprintf(what, sizeof what, "the replicas' parameters after step %lld", (long long)step);
  snprintf(text, sizeof text, "%016llx", (unsigned long long)h);
  return ts_client_check_same(c, what, text);
}
