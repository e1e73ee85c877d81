/* reduce.h — element-wise reduction of n same-typed arrays, used by the
 * collectives in comm.c (internal to src/comm). */
#ifndef TS_COMM_REDUCE_H
#define TS_COMM_REDUCE_H

#include <stdbool.h>

#include "comm/comm.h"

/* 0 if (dt, op) can be reduced, else -1 with a message naming them. */
int comm_reduce_check(const char *what, ts_dtype dt, ts_reduce_kind op);

/* dsts[j][i] = op over m = 0..n-1 of srcs[m][i], for i < count and every j
 * < n_dst, combined in member order (so the result never depends on timing).
 * bf16/f16 accumulate in f32 and round once; MEAN divides the sum by n
 * (integers: truncating). A dst may alias any src element-for-element: each
 * tile is read from every src before it is written to any dst. nt: write with
 * non-temporal stores (large outputs that other threads will read from
 * memory); the stores are fenced before return. */
void comm_reduce(ts_dtype dt, ts_reduce_kind op, int n, const void *const *srcs, int n_dst,
                 void *const *dsts, int64_t count, bool nt);

#endif
