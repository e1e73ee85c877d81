/* mpi_inline.c — in-line starts between processes of one host (comm.h
 * comm_start_inline, comm_set_inline_bytes): one device per process, every
 * process on this machine. Run under mpirun with 2 and 3 processes
 * (tests/CMakeLists.txt).
 *
 *  - the default limits (TESSEL_COMM_INLINE_BYTES unset): a group of
 *    processes of one host runs a started collective of up to 8 MiB in line
 *    (the limit between hosts, 64 KiB, would hand a 1 MiB one to the worker),
 *    a larger one goes to the worker;
 *  - start-up: a peer 100 ms late at a device's first collective (process
 *    launch, first-use set-up) does not back off (COMM_WAIT_STARTUP);
 *  - the communicator learned that every process is on this host: with the
 *    three limits set apart, the host limit is the one that applies to the
 *    whole group, the shared-memory one to a group of this process alone;
 *  - a peer a little late once (5 ms, as the scheduler does on a quiet
 *    host): the others keep running 1 MiB in line (the rule before backed
 *    off after any 2 ms wait); up to 10 tries, as a loaded machine (the
 *    suite beside other jobs, load 14) stretched an 8 ms wait past the
 *    20 ms that counts as hurting in 3 tries out of 3;
 *  - a late peer, past start-up: when the last process reaches an all-reduce 100 ms after
 *    the others, they waited long in line, so their next large starts over
 *    this host go to the worker (64 KiB in line) for COMM_HOST_BACKOFF
 *    decisions, then up to 4 MiB again;
 *  - in line and on the worker give the same bits: a 3 MB all-reduce and a
 *    reduce-scatter made synchronously (what an in-line start runs) equal
 *    the started ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h> /* nanosleep */

#include "comm/comm.h"
#include "comm/comm_internal.h" /* COMM_HOST_BACKOFF, COMM_WAIT_STARTUP */
#include "comm/net.h"
#include "harness.h"
#include "mpi_world.h"
#include "util/config.h" /* TESSEL_COMM_INLINE_BYTES */

enum { MAXP = 8 };

static void fill(float *x, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 13 + seed * 71) % 997) * 0.0013f - (float)seed * 0.25f;
}

/* A synchronous all-reduce and reduce-scatter against started ones. */
static void same_bits(ts_comm *c, int me, const int *group, int P) {
  const int64_t n = (int64_t)3 << 18, chunk = n / P; /* 3 MB; the reduce-scatter's blocks */
  float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *ra = malloc((size_t)chunk * 4),
        *rb = malloc((size_t)chunk * 4), *in = malloc((size_t)(chunk * P) * 4);
  CHECK(a && b && ra && rb && in, "out of memory");
  if (!a || !b || !ra || !rb || !in) goto done;
  fill(a, n, me + 1);
  memcpy(b, a, (size_t)n * 4);
  fill(in, chunk * P, me + 5);
  CHECK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, a, a, n) == 0, "%s", ts_last_error());
  int64_t t = comm_all_reduce_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, b, n);
  CHECK(t >= 0 && comm_wait_ticket(c, me, t) == 0, "%s", ts_last_error());
  CHECK(!memcmp(a, b, (size_t)n * 4), "a started all-reduce differs from the synchronous one");
  CHECK(comm_reduce_scatter(c, me, group, P, TS_F32, TS_REDUCE_SUM, in, ra, 1, chunk) == 0, "%s", ts_last_error());
  t = comm_reduce_scatter_start(c, me, group, P, TS_F32, TS_REDUCE_SUM, in, rb, 1, chunk);
  CHECK(t >= 0 && comm_wait_ticket(c, me, t) == 0, "%s", ts_last_error());
  CHECK(!memcmp(ra, rb, (size_t)chunk * 4), "a started reduce-scatter differs from the synchronous one");
done:
  free(a), free(b), free(ra), free(rb), free(in);
}

/* Forgets the device's waits and back-off, and puts it past its start-up
 * (comm_internal.h comm_dev). */
static void forget_waits(ts_comm *c, int me) {
  c->dev[me].host_backoff = 0, c->dev[me].wait_t0 = 0, c->dev[me].waited = 0;
  c->dev[me].noted = COMM_WAIT_STARTUP;
}

/* No back-off after a long wait at the device's first collective: start-up
 * skew (comm_internal.h COMM_WAIT_STARTUP). Must run before any other
 * collective over this host's processes. */
static void startup_wait(ts_comm *c, int me, const int *group, int P) {
  comm_set_inline_bytes(c, (int64_t)8 << 20, (int64_t)4 << 20, (int64_t)64 << 10);
  CHECK(c->dev[me].noted == 0, "the device saw %d collectives before the start-up check", c->dev[me].noted);
  float x[256] = {0};
  if (me == P - 1) nanosleep(&(struct timespec){0, 100000000}, NULL); /* 100 ms late */
  CHECK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, x, x, 256) == 0, "%s", ts_last_error());
  CHECK(c->dev[me].noted == 1, "the first collective was not noted (%d)", c->dev[me].noted);
  CHECK(comm_start_inline(c, me, group, P, (int64_t)1 << 20), 
        "after a 100 ms wait at start-up 1 MiB went to the worker");
  CHECK(c->dev[me].host_backoff == 0, "a 100 ms wait at start-up backed off (%d decisions)", c->dev[me].host_backoff);
  forget_waits(c, me);
}

/* No back-off after one short wait for a late peer (comm_internal.h COMM_WAIT_HURTS_NS). */
static void short_wait(ts_comm *c, int me, const int *group, int P) {
  comm_set_inline_bytes(c, (int64_t)8 << 20, (int64_t)4 << 20, (int64_t)64 << 10);
  const int64_t mib = (int64_t)1 << 20;
  float fired = 1;
  for (int try = 0; try < 10 && fired > 0; try++) {
    float x[256] = {0};
    CHECK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, x, x, 256) == 0, "%s", ts_last_error());
    forget_waits(c, me);
    if (me == P - 1) nanosleep(&(struct timespec){0, 5000000}, NULL); /* 5 ms late */
    CHECK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, x, x, 256) == 0, "%s", ts_last_error());
    fired = comm_start_inline(c, me, group, P, mib) ? 0.0f : 1.0f;
    CHECK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, &fired, &fired, 1) == 0, "%s", ts_last_error());
  }
  CHECK(fired == 0, "after a 5 ms wait for a late peer 1 MiB went to the worker in 10 tries out of 10");
  forget_waits(c, me);
}

/* The back-off after a long wait for a late peer (comm_internal.h). */
static void late_peer(ts_comm *c, int me, const int *group, int P) {
  comm_set_inline_bytes(c, (int64_t)8 << 20, (int64_t)4 << 20, (int64_t)64 << 10);
  const int64_t mib = (int64_t)1 << 20;
  CHECK(comm_start_inline(c, me, group, P, mib), "1 MiB before any wait: not in line");
  float x[256] = {0};
  if (me == P - 1) nanosleep(&(struct timespec){0, 100000000}, NULL); /* 100 ms late */
  CHECK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, x, x, 256) == 0, "%s", ts_last_error());
  if (me == P - 1) return; /* it did not wait */
  CHECK(comm_start_inline(c, me, group, P, (int64_t)64 << 10), "64 KiB after a long wait: not in line");
  int worker = 0;
  while (worker < COMM_HOST_BACKOFF + 8 && !comm_start_inline(c, me, group, P, mib)) worker++;
  CHECK(worker == COMM_HOST_BACKOFF, "after a long wait %d decisions sent 1 MiB to the worker, expected %d", worker,
        COMM_HOST_BACKOFF);
}

int main(void) {
  ts_test_init("mpi_inline", 20261204);
  ts_net *net = NULL;
  int P = 0, me = 0, proc_of[MAXP], group[MAXP];
  ts_comm *c = mpi_world_comm(MAXP, &net, &P, &me, proc_of, group);
  if (!c) return ts_test_finish();

  if (env_config()->comm_inline_bytes < 0) { /* the defaults */
    CHECK(comm_start_inline(c, me, group, P, (int64_t)1 << 20), "1 MiB between processes of one host: not in line");
    CHECK(comm_start_inline(c, me, group, P, (int64_t)8 << 20), "8 MiB between processes of one host: not in line");
    CHECK(!comm_start_inline(c, me, group, P, ((int64_t)8 << 20) + 1), "over 8 MiB between processes: in line");
  } else {
    fprintf(stderr, "mpi_inline: TESSEL_COMM_INLINE_BYTES is set: the default limits are not checked\n");
  }
  comm_set_inline_bytes(c, 100, 1000, 10); /* shared memory, this host, other hosts */
  CHECK(comm_start_inline(c, me, group, P, 1000) && !comm_start_inline(c, me, group, P, 1001),
        "the group of this host's processes does not get the host limit");
  CHECK(comm_start_inline(c, me, &me, 1, 100) && !comm_start_inline(c, me, &me, 1, 101),
        "a group of this process alone does not get the shared-memory limit");
  comm_set_inline_bytes(c, 0, 0, 0);
  CHECK(!comm_start_inline(c, me, group, P, 1), "limit 0: in line");

  startup_wait(c, me, group, P);
  short_wait(c, me, group, P);
  late_peer(c, me, group, P);
  same_bits(c, me, group, P);
  comm_free(c);
  return ts_test_finish();
}
