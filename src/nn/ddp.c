/* ddp.c — the gradient averaging of classic data parallel (DDP): gradients
 * packed into buckets, one replica all-reduce (mean) per bucket, unpacked.
 * Values only logged (the loss) ride in the bucket closed last. */
#include <stdlib.h>

#include "tessel/nn.h"
#include "tessel/spmd.h" /* ts_replica_all_reduce */
#include "util/error.h"

/* The bucket being filled: indices into v, in the order they joined. */
typedef struct {
  ts_tensor *v; /* gradients, then the logged values */
  int *idx, n;
  size_t bytes;
  ts_dtype dt;
} open_bucket;

static size_t value_bytes(ts_graph *g, ts_tensor t) {
  return (size_t)ts_tensor_numel(g, t) * ts_dtype_size(ts_tensor_dtype(g, t));
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Averages v[idx[0..k)] (same dtype) with one all-reduce: flattened,
 * concatenated in index order, reduced, sliced back. */
static int reduce_members(ts_graph *g, ts_tensor *v, int *idx, int k) {
  if (k <= 1) { /* one member (never none): reduced in place */
    ts_tensor r = ts_replica_all_reduce(g, v[idx[0]], TS_REDUCE_MEAN);
    if (r == TS_NONE) return -1;
    v[idx[0]] = r;
    return 0;
  }
  qsort(idx, (size_t)k, sizeof *idx, cmp_int);
  ts_tensor *flat = calloc((size_t)k, sizeof *flat);
  if (!flat) return set_error_code(TS_ERR_OUT_OF_MEMORY, "ddp: out of memory");
  int64_t total = 0;
  for (int i = 0; i < k; i++) {
    int64_t numel = ts_tensor_numel(g, v[idx[i]]);
    flat[i] = ts_reshape(g, v[idx[i]], 1, &numel);
    total += numel;
  }
  ts_tensor all = ts_replica_all_reduce(g, ts_concatenate(g, k, flat, 0), TS_REDUCE_MEAN);
  free(flat);
  if (all == TS_NONE) return -1;
  int64_t off = 0;
  for (int i = 0; i < k; i++) {
    ts_tensor t = v[idx[i]];
    int rank = ts_tensor_rank(g, t);
    int64_t shape[TS_MAX_RANK];
    for (int d = 0; d < rank; d++) shape[d] = ts_tensor_shape(g, t)[d];
    int64_t numel = ts_shape_numel(rank, shape), start = off, limit = off + numel, stride = 1;
    ts_tensor part = ts_reshape(g, ts_slice(g, all, &start, &limit, &stride), rank, shape);
    if (part == TS_NONE) return -1;
    v[idx[i]] = part;
    off += numel;
  }
  return total == off ? 0 : set_error("ddp: bucket of %lld elements unpacked as %lld", (long long)total,
                                         (long long)off);
}

static int close_bucket(ts_graph *g, open_bucket *b, int *buckets) {
  if (b->n == 0) return 0;
  if (reduce_members(g, b->v, b->idx, b->n) < 0) return -1;
  (*buckets)++;
  b->n = 0;
  b->bytes = 0;
  return 0;
}

static int check_values(ts_graph *g, int n, const ts_tensor *t, const char *what) {
  if (n < 0 || (n && !t)) return set_error("ddp_average_gradients: %d %s, or they are missing", n, what);
  for (int i = 0; i < n; i++)
    if (t[i] < 0 || t[i] >= ts_graph_num_nodes(g))
      return set_error("ddp_average_gradients: %s %d is tensor %d, not a node of the graph", what, i, t[i]);
  return 0;
}

/* From the last gradient back (the order the backward pass makes them): a
 * gradient of bucket_bytes or more is reduced alone (no packing copies) and
 * the bucket being filled stays open across it, so the small gradients on
 * either side (the CNN's fc2 and fc1 bias before fc1's weight) share one
 * all-reduce instead of each paying a round trip; a bucket closes at
 * bucket_bytes, at a change of dtype and after the first gradient, where
 * the logged values of its dtype join it (the others go alone after it). */
static int form_buckets(ts_graph *g, open_bucket *b, int n, int n_logged, size_t bucket_bytes) {
  int buckets = 0;
  for (int i = n - 1; i >= 0; i--) {
    ts_dtype dt = ts_tensor_dtype(g, b->v[i]);
    size_t bytes = value_bytes(g, b->v[i]);
    if (bytes >= bucket_bytes) { /* alone */
      if (reduce_members(g, b->v, &i, 1) < 0) return -1;
      buckets++;
      continue;
    }
    if (b->n && dt != b->dt && close_bucket(g, b, &buckets) < 0) return -1;
    b->dt = dt;
    b->idx[b->n++] = i;
    b->bytes += bytes;
    if (b->bytes >= bucket_bytes && close_bucket(g, b, &buckets) < 0) return -1;
  }
  if (b->n == 0 && n_logged) b->dt = ts_tensor_dtype(g, b->v[n]); /* no open bucket: the first logged value's */
  for (int i = n; i < n + n_logged; i++)
    if (ts_tensor_dtype(g, b->v[i]) == b->dt) b->idx[b->n++] = i;
  if (close_bucket(g, b, &buckets) < 0) return -1;
  for (int i = n; i < n + n_logged; i++) /* other dtypes: one all-reduce each */
    if (ts_tensor_dtype(g, b->v[i]) != b->dt) {
      if (reduce_members(g, b->v, &i, 1) < 0) return -1;
      buckets++;
    }
  return buckets;
}

int ts_ddp_average_gradients_logged(ts_graph *g, int n, ts_tensor *grads, size_t bucket_bytes, int n_logged,
                                    ts_tensor *logged) {
  if (!g) return set_error("ddp_average_gradients: graph missing");
  if (check_values(g, n, grads, "gradients") < 0 || check_values(g, n_logged, logged, "logged values") < 0)
    return -1;
  if (bucket_bytes == 0) bucket_bytes = (size_t)1 << 20;
  int total = n + n_logged;
  open_bucket b = {malloc(((size_t)total + 1) * sizeof *b.v), malloc(((size_t)total + 1) * sizeof *b.idx), 0, 0,
                   TS_F32};
  if (!b.v || !b.idx) {
    free(b.v);
    free(b.idx);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "ddp: out of memory");
  }
  for (int i = 0; i < n; i++) b.v[i] = grads[i];
  for (int i = 0; i < n_logged; i++) b.v[n + i] = logged[i];
  int buckets = form_buckets(g, &b, n, n_logged, bucket_bytes);
  if (buckets >= 0) {
    for (int i = 0; i < n; i++) grads[i] = b.v[i];
    for (int i = 0; i < n_logged; i++) logged[i] = b.v[n + i];
  }
  free(b.v);
  free(b.idx);
  return buckets;
}

int ts_ddp_average_gradients(ts_graph *g, int n, ts_tensor *grads, size_t bucket_bytes) {
  return ts_ddp_average_gradients_logged(g, n, grads, bucket_bytes, 0, NULL);
}
