/* mpi_lanes.c — the small lane of started collectives (src/comm/async.c,
 * comm_internal.h COMM_LANE_BYTES; TESSEL_COMM_LANES=1 so that processes of
 * one host use it too). Run under mpirun with 2 and 3 processes.
 *
 * Process 0 starts a large all-reduce (8 MiB) and then a small one (4 KiB);
 * the others start only the small one, and the large one only after
 * process 0 told them (a message on the host channel) that its small one
 * ended. So process 0's small all-reduce must end while its large one,
 * started first, cannot have: it ran on its own lane, beside the large one,
 * with its own sequence numbers and tags (one worker thread running both in
 * start order would wait for the large one forever: a timeout). The waits
 * stay in start order (comm_ticket_done of the large one is 0 while the
 * small one is ended), and both results equal the synchronous calls' bits.
 * A bad TESSEL_COMM_LANES fails comm_new_world naming it. No timing
 * thresholds: the limits (30 s) only bound a hang. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/net.h"
#include "harness.h"
#include "mpi_world.h"

enum { MAXP = 8, BIG = 2 << 20, SMALL = 1024 };

static void lanes(ts_comm *c, ts_net *net, int P, int me, const int *group) {
  float *big = malloc((size_t)BIG * sizeof *big), *ref = malloc((size_t)BIG * sizeof *ref);
  float small[SMALL], small_ref[SMALL];
  CHECK(big && ref, "out of memory");
  if (!big || !ref) goto out;
  mpi_fill(big, BIG, me + 1);
  mpi_fill(small, SMALL, me + 5);
  int64_t tb = -1, ts;
  if (me == 0) tb = comm_all_reduce_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, big, BIG);
  ts = comm_all_reduce_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, small, SMALL);
  CHECK(ts >= 0 && (me != 0 || tb >= 0), "process %d: start: %s", me, ts_last_error());
  if (me == 0) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
      nanosleep(&(struct timespec){0, 200000}, NULL);
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while (!comm_ticket_ended(c, me, ts) && t.tv_sec - t0.tv_sec < 30);
    CHECK(comm_ticket_ended(c, me, ts), "process 0: the small all-reduce started after a large one did not end "
          "within 30 s while the large one waits for the other processes (no small lane?)");
    CHECK(!comm_ticket_done(c, me, ts) && !comm_ticket_ended(c, me, tb),
          "process 0: the large all-reduce ended before the others started it");
  } else {
    CHECK_OK(comm_wait_ticket(c, me, ts));
  }
  CHECK_OK(mpi_token(net, P, me, 7, "mpi_lanes token"));
  if (me != 0) tb = comm_all_reduce_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, big, BIG);
  CHECK_OK(comm_wait_ticket(c, me, tb));
  CHECK(comm_ticket_done(c, me, ts), "process %d: waited the large one, the small one not done", me);
  /* the same sums, synchronously */
  mpi_lane_sums(c, P, me, group, ref, BIG, small_ref, SMALL);
  CHECK(!memcmp(big, ref, (size_t)BIG * sizeof *big), "process %d: the large all-reduce: other bits", me);
  CHECK(!memcmp(small, small_ref, sizeof small), "process %d: the small all-reduce: other bits", me);
out:
  free(big);
  free(ref);
}

int main(void) {
  ts_test_init("mpi_lanes", 20261205);
  mpi_set_lanes("1");
  ts_net *net = NULL;
  int P = 0, me = 0, proc_of[MAXP], group[MAXP];
  ts_comm *c = mpi_world_comm(MAXP, &net, &P, &me, proc_of, group);
  if (!c) return ts_test_finish();
  comm_set_timeout_ms(c, 30000);
  lanes(c, net, P, me, group);
  comm_free(c);
  mpi_set_lanes("2");
  ts_comm *bad = comm_new_world(P, proc_of, me, 1, net);
  CHECK(!bad && strstr(ts_last_error(), "TESSEL_COMM_LANES=2"), "TESSEL_COMM_LANES=2: %s",
        bad ? "accepted" : ts_last_error());
  comm_free(bad);
  mpi_set_lanes(NULL);
  return ts_test_finish();
}
