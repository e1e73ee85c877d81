/* mpi_world.h — how the multi-process comm tests start (run under mpirun -n P):
 * the MPI world of 2..maxp processes (a failed check otherwise), proc_of and
 * group (arrays of maxp) set to 0..P-1 (one device per process), and a
 * communicator over them with a 60 s timeout. Returns NULL after a failed
 * check; the caller then ends with ts_test_finish(). */
#ifndef TESSEL_TESTS_MPI_WORLD_H
#define TESSEL_TESTS_MPI_WORLD_H

#include <stdlib.h>

#include "comm/comm.h"
#include "comm/net.h"
#include "harness.h"
#include "util/config.h" /* env_config_reload */

static inline ts_comm *mpi_world_comm(int maxp, ts_net **net_out, int *P, int *me, int *proc_of, int *group) {
  bool failed = false;
  ts_net *net = net_world(&failed);
  CHECK(!failed && net && net_size(net) >= 2 && net_size(net) <= maxp, "run under mpirun with 2..%d processes (%s)",
        maxp, failed ? ts_last_error() : "no MPI");
  if (!net || net_size(net) < 2 || net_size(net) > maxp) return NULL;
  *net_out = net, *P = net_size(net), *me = net_rank(net);
  for (int d = 0; d < *P; d++) proc_of[d] = group[d] = d;
  ts_comm *c = comm_new_world(*P, proc_of, *me, 1, net);
  CHECK(c != NULL, "%s", ts_last_error());
  if (c) comm_set_timeout_ms(c, 60000);
  return c;
}

/* x[i] for i < n: deterministic values that differ per seed (the lane tests' operands). */
static inline void mpi_fill(float *x, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7 + seed * 131) % 1000) * 0.00137f + (float)seed * 0.1f;
}

/* Process 0's token (tag) to every other process on the host channel: the
 * others block until process 0 sends it (what: the error's name). */
static inline int mpi_token(ts_net *net, int P, int me, int tag, const char *what) {
  net_msg m[16];
  char t[16] = {0};
  int k = 0;
  if (P > 16) return -1;
  for (int p = 1; p < P; p++)
    if (me == 0 || p == me) m[k++] = (net_msg){me == 0 ? p : 0, tag, me == 0, &t[p], 1};
  return net_exchange_ctl(net, m, k, 30000, what);
}

/* The lane tests' references: big (nb) and small (ns) filled for process me
 * (mpi_fill) and all-reduced synchronously over group. */
static inline void mpi_lane_sums(ts_comm *c, int P, int me, const int *group, float *big, int64_t nb, float *small,
                                 int64_t ns) {
  mpi_fill(big, nb, me + 1);
  mpi_fill(small, ns, me + 5);
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, big, big, nb));
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, small, small, ns));
}

/* TESSEL_COMM_LANES for the communicators created next (NULL: unset). */
static inline void mpi_set_lanes(const char *value) {
  if (value) setenv("TESSEL_COMM_LANES", value, 1);
  else unsetenv("TESSEL_COMM_LANES");
  env_config_reload();
}

#endif
