/* mpi_async.c — started collectives across processes (src/comm async.c):
 * one device per process. Run under mpirun with 2 and 3 processes
 * (tests/CMakeLists.txt).
 *
 *  - progress without the device: an all-reduce (4 MB), an all-gather and a
 *    reduce-scatter are started, then the device thread only sleeps and
 *    polls comm_ticket_done (no call into comm/ or MPI) until the last one
 *    ended: the collective worker alone carries the messages between
 *    processes (this is what lets communication hide behind a device's
 *    compute). They end in start order, and their results equal the
 *    synchronous calls' byte for byte;
 *  - a started collective interleaved with synchronous ones (the device
 *    waits before its next synchronous call, as the executor does);
 *  - errors come back from the wait: a started all-reduce that the last
 *    process never makes times out, and the wait returns the timeout;
 *  - the pacer (net.h net_pacer, the collective worker's): process 0's
 *    exchange with peers 30 ms late naps between polls (NET_PATIENT_NAP_NS)
 *    while nothing is urgent, and naps no more once its result is urgent.
 * No timing thresholds but generous limits (60 s to end; the timeout test
 * 1.5 s): a loaded machine only makes it slower. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/net.h"
#include "harness.h"
#include "mpi_world.h"

enum { MAXP = 8 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fill(float *x, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7 + seed * 131) % 1000) * 0.001f + (float)seed;
}

static int naps;     /* test pacer: naps taken */
static long nap_ns;  /* the length asked */
static bool urgent;  /* set after the 5th nap */

static bool test_urgent(void *ctx) { return (void)ctx, urgent; }

static void test_nap(void *ctx, long ns) {
  (void)ctx;
  nap_ns = ns;
  if (++naps == 5) urgent = true;
  nanosleep(&(struct timespec){0, ns}, NULL);
}

/* Process 0 exchanges a token with every other process, which posts its
 * messages 30 ms late, under a pacer that turns urgent after 5 naps. */
static void check_pacer(ts_net *net, int P, int me) {
  int mine = 100 + me, got[MAXP] = {0};
  net_msg m[2 * MAXP];
  int k = 0;
  for (int p = 0; p < P; p++) {
    if (p == me || (me != 0 && p != 0)) continue;
    m[k++] = (net_msg){p, 7, true, &mine, sizeof mine};
    m[k++] = (net_msg){p, 7, false, &got[p], sizeof got[p]};
  }
  const net_pacer pacer = {test_urgent, test_nap, NULL, false};
  if (me == 0) net_set_pacer(&pacer);
  else nanosleep(&(struct timespec){0, 30000000}, NULL);
  CHECK_OK(net_exchange_ctl(net, m, k, 20000, "pacer test"));
  net_set_pacer(NULL);
  for (int p = 0; p < P; p++)
    CHECK(p == me || (me != 0 && p != 0) || got[p] == 100 + p, "process %d: token from %d is %d", me, p, got[p]);
  if (me == 0)
    CHECK(naps == 5 && nap_ns == NET_PATIENT_NAP_NS,
          "process 0: a paced exchange waiting 30 ms should nap exactly until urgent (5 naps of %ld ns), took %d "
          "of %ld ns", NET_PATIENT_NAP_NS, naps, nap_ns);
}

int main(void) {
  ts_test_init("mpi_async", 20261203);
  ts_net *net = NULL;
  int P = 0, me = 0, proc_of[MAXP], group[MAXP];
  ts_comm *c = mpi_world_comm(MAXP, &net, &P, &me, proc_of, group);
  if (!c) return ts_test_finish();

  const int64_t n_ar = (int64_t)1 << 20, chunk = (int64_t)1 << 16, outer = 3; /* 4 MB; gathers of 3 rows */
  float *ar = malloc((size_t)n_ar * 4), *ar_ref = malloc((size_t)n_ar * 4);
  float *ag_in = malloc((size_t)(outer * chunk) * 4), *ag = malloc((size_t)(outer * chunk * P) * 4),
        *ag_ref = malloc((size_t)(outer * chunk * P) * 4);
  float *rs_in = malloc((size_t)(outer * chunk * P) * 4), *rs = malloc((size_t)(outer * chunk) * 4),
        *rs_ref = malloc((size_t)(outer * chunk) * 4);
  CHECK(ar && ar_ref && ag_in && ag && ag_ref && rs_in && rs && rs_ref, "out of memory");
  fill(ar, n_ar, me + 1);
  fill(ag_in, outer * chunk, me + 2);
  fill(rs_in, outer * chunk * P, me + 3);
  memcpy(ar_ref, ar, (size_t)n_ar * 4);

  /* the reference: synchronous calls */
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, ar_ref, ar_ref, n_ar));
  CHECK_OK(comm_all_gather(c, me, group, P, ag_in, ag_ref, outer, (size_t)chunk * 4));
  CHECK_OK(comm_reduce_scatter(c, me, group, P, TS_F32, TS_REDUCE_SUM, rs_in, rs_ref, outer, chunk));

  /* started: the device thread makes no comm/MPI call until all ended */
  int64_t t[3];
  t[0] = comm_all_reduce_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, ar, n_ar);
  t[1] = comm_all_gather_start(c, me, group, P, ag_in, ag, outer, (size_t)chunk * 4);
  t[2] = comm_reduce_scatter_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, rs_in, rs, outer, chunk);
  CHECK(t[0] >= 0 && t[1] > t[0] && t[2] > t[1], "tickets %lld %lld %lld: %s", (long long)t[0], (long long)t[1],
        (long long)t[2], ts_last_error());
  double t0 = now_s();
  bool in_order = true;
  while (!comm_ticket_done(c, me, t[2]) && now_s() - t0 < 60) {
    in_order &= !comm_ticket_done(c, me, t[1]) || comm_ticket_done(c, me, t[0]);
    nanosleep(&(struct timespec){0, 1000000}, NULL); /* "computing" */
  }
  CHECK(comm_ticket_done(c, me, t[2]), "process %d: the started collectives did not end in 60 s without a wait", me);
  CHECK(comm_ticket_done(c, me, t[0]) && comm_ticket_done(c, me, t[1]) && in_order,
        "process %d: started collectives ended out of order", me);
  CHECK_OK(comm_wait_all(c, me));
  CHECK(memcmp(ar, ar_ref, (size_t)n_ar * 4) == 0, "process %d: started all-reduce differs from the synchronous one",
        me);
  CHECK(memcmp(ag, ag_ref, (size_t)(outer * chunk * P) * 4) == 0,
        "process %d: started all-gather differs from the synchronous one", me);
  CHECK(memcmp(rs, rs_ref, (size_t)(outer * chunk) * 4) == 0,
        "process %d: started reduce-scatter differs from the synchronous one", me);

  /* started and synchronous calls interleaved: wait, then the next call */
  for (int round = 0; round < 3; round++) {
    fill(ar, n_ar, me + 1);
    int64_t k = comm_all_reduce_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, ar, n_ar);
    CHECK_OK(comm_wait_ticket(c, me, k));
    CHECK_OK(comm_barrier(c, me, group, P));
    CHECK(memcmp(ar, ar_ref, (size_t)n_ar * 4) == 0, "process %d round %d: all-reduce differs", me, round);
  }

  /* an error comes back from the wait: the last process skips a started
   * all-reduce, the others time out */
  ts_comm *tc = comm_new_world(P, proc_of, me, 1, net);
  CHECK(tc != NULL, "%s", ts_last_error());
  if (tc) {
    comm_set_timeout_ms(tc, 1500);
    if (me != P - 1) {
      float x[16] = {0};
      int64_t k = comm_all_reduce_start(tc, me, group, P, TS_F32, TS_REDUCE_SUM, x, 16);
      int rc = comm_wait_ticket(tc, me, k);
      CHECK(rc < 0 && strstr(ts_last_error(), "timed out") && ts_last_error_code() == TS_ERR_TIMEOUT,
            "process %d: a started all-reduce with a missing process must time out at the wait: %s", me,
            rc ? ts_last_error() : "it succeeded");
      CHECK(comm_wait_all(tc, me) < 0, "process %d: the worker's failure must stick", me);
    }
    int token = me, all[MAXP];
    CHECK(net_allgather(net, &token, all, sizeof token, 20000, "end of test") == 0, "%s", ts_last_error());
  }
  comm_free(tc);
  check_pacer(net, P, me);
  comm_free(c);
  free(ar), free(ar_ref), free(ag_in), free(ag), free(ag_ref), free(rs_in), free(rs), free(rs_ref);
  return ts_test_finish();
}
