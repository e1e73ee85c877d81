/* ddp.c — the gradient averaging of classic data parallel (DDP): gradients
 * packed into buckets, one replica all-reduce (mean) per bucket, unpacked. */
#include <stdlib.h>

#include "tessel/nn.h"
#include "tessel/spmd.h" /* ts_replica_all_reduce */
#include "util/error.h"

/* Averages grads[lo..hi) (same dtype) with one all-reduce: flattened,
 * concatenated, reduced, sliced back. */
static int bucket(ts_graph *g, ts_tensor *grads, int lo, int hi) {
  if (hi - lo == 1) {
    ts_tensor r = ts_replica_all_reduce(g, grads[lo], TS_REDUCE_MEAN);
    if (r == TS_NONE) return -1;
    grads[lo] = r;
    return 0;
  }
  int n = hi - lo;
  ts_tensor *flat = malloc((size_t)n * sizeof *flat);
  if (!flat) return set_error_code(TS_ERR_OUT_OF_MEMORY, "ddp: out of memory");
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    int64_t numel = ts_tensor_numel(g, grads[lo + i]);
    flat[i] = ts_reshape(g, grads[lo + i], 1, &numel);
    total += numel;
  }
  ts_tensor all = ts_replica_all_reduce(g, ts_concatenate(g, n, flat, 0), TS_REDUCE_MEAN);
  free(flat);
  if (all == TS_NONE) return -1;
  int64_t off = 0;
  for (int i = lo; i < hi; i++) {
    int rank = ts_tensor_rank(g, grads[i]);
    int64_t shape[TS_MAX_RANK];
    for (int d = 0; d < rank; d++) shape[d] = ts_tensor_shape(g, grads[i])[d];
    int64_t numel = ts_shape_numel(rank, shape), start = off, limit = off + numel, stride = 1;
    ts_tensor part = ts_reshape(g, ts_slice(g, all, &start, &limit, &stride), rank, shape);
    if (part == TS_NONE) return -1;
    grads[i] = part;
    off += numel;
  }
  return total == off ? 0 : set_error("ddp: bucket of %lld elements unpacked as %lld", (long long)total,
                                         (long long)off);
}

int ts_ddp_average_gradients(ts_graph *g, int n, ts_tensor *grads, size_t bucket_bytes) {
  if (!g || n < 0 || (n && !grads)) return set_error("ddp_average_gradients: graph or gradients missing");
  if (bucket_bytes == 0) bucket_bytes = (size_t)1 << 20;
  for (int i = 0; i < n; i++)
    if (grads[i] < 0 || grads[i] >= ts_graph_num_nodes(g))
      return set_error("ddp_average_gradients: gradient %d is tensor %d, not a node of the graph", i, grads[i]);
  int buckets = 0, hi = n;
  size_t bytes = 0;
  /* from the last gradient back: [i, hi) is the bucket being filled */
  for (int i = n - 1; i >= 0; i--) {
    ts_dtype dt = ts_tensor_dtype(g, grads[i]);
    size_t b = (size_t)ts_tensor_numel(g, grads[i]) * ts_dtype_size(dt);
    if (b >= bucket_bytes && hi > i + 1) { /* a large gradient goes alone: no packing copies */
      if (bucket(g, grads, i + 1, hi) < 0) return -1;
      buckets++;
      hi = i + 1;
      bytes = 0;
    }
    bytes += b;
    bool close = i == 0 || bytes >= bucket_bytes || ts_tensor_dtype(g, grads[i - 1]) != dt;
    if (!close) continue;
    if (bucket(g, grads, i, hi) < 0) return -1;
    buckets++;
    hi = i;
    bytes = 0;
  }
  return buckets;
}
