/* exec_util.h — what tests that compile one graph and execute it once
 * share: freeing what the run made. Not a test. */
#ifndef TS_TEST_EXEC_UTIL_H
#define TS_TEST_EXEC_UTIL_H
#include "tessel/tessel.h"

/* Frees the nin inputs, the nout outputs (NULL where the execute failed)
 * and the executable. */
static inline void exec_free(ts_buffer **in, int nin, ts_buffer **out, int nout, ts_executable *e) {
  for (int k = 0; k < nout; k++)
    if (out[k]) ts_buffer_free(out[k]);
  for (int k = 0; k < nin; k++) ts_buffer_free(in[k]);
  ts_executable_free(e);
}
#endif
