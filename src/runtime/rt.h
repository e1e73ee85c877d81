/* rt.h — the runtime's internal structs: a client (its devices and thread
 * budget) and a buffer (device memory with dtype and shape). */
#ifndef TS_RT_H
#define TS_RT_H

#include "runtime/device.h"
#include "tessel/runtime.h"

struct ts_client {
  ts_device dev; /* one CPU device for now; SPMD adds more */
  int num_threads;
};

struct ts_buffer {
  ts_client *client;
  ts_dtype dtype;
  int rank;
  int64_t shape[TS_MAX_RANK];
  size_t bytes;
  void *data; /* device memory */
};

/* "f32[512,784]" into buf. */
const char *rt_shape_str(ts_dtype dt, int rank, const int64_t *shape, char *buf, size_t len);

#endif
