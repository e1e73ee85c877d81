/* comm_inputs.h — the collective tests' inputs (test_comm.c, mpi_comm.c):
 * element i of device dev's input in case k, a hash of (seed, k, dev, i).
 * Floats spread over several binades so that the summation order shows in
 * the bits. */
#ifndef TS_TEST_COMM_INPUTS_H
#define TS_TEST_COMM_INPUTS_H

#include <string.h>

#include "harness.h"
#include "tessel/core.h"
#include "util/half.h"

static inline uint64_t comm_test_mix(uint64_t x) { /* splitmix64 finalizer */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Element i of device dev's input in case k, written as raw bytes. */
static inline void comm_test_gen(ts_dtype dt, uint64_t k, int dev, int64_t i, void *dst) {
  static const double scale[8] = {0.25, 0.5, 1, 2, 4, 8, 16, 32};
  uint64_t h = comm_test_mix(ts_test_seed ^ (k << 44) ^ ((uint64_t)dev << 36) ^ (uint64_t)i);
  double x = ((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0) * scale[h & 7];
  switch (dt) {
  case TS_F32: { float f = (float)x; memcpy(dst, &f, 4); break; }
  case TS_F64: memcpy(dst, &x, 8); break;
  case TS_BF16: { uint16_t b = ts_f32_to_bf16((float)x); memcpy(dst, &b, 2); break; }
  case TS_F16: { uint16_t b = ts_f32_to_f16((float)x); memcpy(dst, &b, 2); break; }
  case TS_I32: { int32_t v = (int32_t)(uint32_t)h; memcpy(dst, &v, 4); break; }
  case TS_I64: { int64_t v = (int64_t)h; memcpy(dst, &v, 8); break; }
  case TS_U8: { uint8_t v = (uint8_t)h; memcpy(dst, &v, 1); break; }
  case TS_BOOL: { uint8_t v = (uint8_t)(h & 1); memcpy(dst, &v, 1); break; }
  default: break;
  }
}

#endif
