/* mpi_exec_lanes.c — the CPU executor waits per collective
 * (runtime/cpu_device.c await_node, finish; comm.h comm_wait_alone): a node
 * that reads a small collective started after a large one runs once the
 * small one ended on its own lane (comm/async.c; TESSEL_COMM_LANES=1 so that
 * processes of one host use it), not after the large one; and the run ends
 * with the large one still in flight when it is deferred (its result only
 * in the caller's buffers: the device's carry, runtime/carry.c), even though
 * the small one was started after it. Run under mpirun with 2 and 3
 * processes.
 *
 * Process 0 runs a hand-made program: all-reduce(big) started (deferred),
 * all-reduce(small) started, x = small + small (a kernel reading the small
 * one), and, in the second program, nothing reading the small one (only the
 * run's end waits for it). The others make the small all-reduce and start
 * the large one only after process 0's run returned (a token on the host
 * channel). With waits in start order, x (or the run's end) would wait for
 * the large one, which waits for the token: a timeout (20 s), which fails.
 * Results equal the synchronous calls' bits. No timing thresholds.
 *
 * A third program makes the small all-reduce a synchronous call of the
 * device (runtime/cpu_device.c, comm.h comm_wait_lane: the sync-bn
 * statistics of a DDP step): with the large one in flight it runs on the
 * small lane at once instead of waiting for every started collective (which
 * would wait for the token: a timeout).
 *
 * And the in-line decision (runtime/cpu_collective.c cpu_collective_inline):
 * a small all-reduce on the small lane (between hosts; here the lanes of
 * TESSEL_COMM_LANES=1) runs in line, unless a convolution runs between it
 * and its first user (a sync-bn statistic's round trip, with a weight
 * gradient placed there by opt/schedule.c): then it is started, so the
 * convolution hides the wait for the peer. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/net.h"
#include "harness.h"
#include "ir/ir.h"
#include "mpi_world.h"
#include "runtime/device.h"
#include "runtime/rt.h" /* rt_carry */

enum { MAXP = 8, BIG = 2 << 20, SMALL = 1024 };

static ts_tensor all_reduce(ts_graph *g, ts_tensor x, int P, int64_t n) {
  ts_attr a = {0};
  a.reduce = TS_REDUCE_SUM;
  a.coll = malloc(sizeof *a.coll);
  a.coll->n = P;
  a.coll->ids = malloc((size_t)P * sizeof *a.coll->ids);
  for (int i = 0; i < P; i++) a.coll->ids[i] = i;
  return ir_append(g, TS_OP_ALL_REDUCE, TS_F32, 1, &n, 1, &x, &a);
}

/* Process 0's program: big and small all-reduced (started: big deferred),
 * then, with `read`, x = small + small. Its nodes: 0 big, 1 small, 2
 * all-reduce(big), 3 all-reduce(small), 4 x. */
static ts_graph *program(int P, bool read) {
  ts_graph *g = ts_graph_new();
  int64_t nb = BIG, ns = SMALL;
  ts_tensor big = ts_input(g, "big", TS_F32, 1, &nb), small = ts_input(g, "small", TS_F32, 1, &ns);
  all_reduce(g, big, P, BIG);
  ts_tensor s = all_reduce(g, small, P, SMALL);
  if (read) ts_add(g, s, s);
  return g;
}

/* sync_small: the small all-reduce is called by the device, not started. */
static void run_zero(ts_comm *c, ts_net *net, int P, bool read, bool sync_small, const float *ref_big,
                     const float *ref_small) {
  ts_graph *g = program(P, read);
  int n = g->n_nodes;
  float *v[5] = {0};
  int64_t len[5] = {BIG, SMALL, BIG, SMALL, SMALL};
  for (int i = 0; i < n; i++) v[i] = malloc((size_t)len[i] * sizeof(float));
  mpi_fill(v[0], BIG, 1);
  mpi_fill(v[1], SMALL, 5);
  bool async[5] = {false, false, true, !sync_small, false}, defer[5] = {false, false, true, false, false};
  void *state[5] = {0};
  rt_carry *carry = rt_carry_new(c, 0);
  ts_program prog = {g, state, 1, 0, c, async, defer, carry, NULL, NULL, NULL, 0};
  ts_device d;
  cpu_device_init(&d, 0);
  int rc = d.run(NULL, &prog, (void *const *)v);
  CHECK(rc == 0, "process 0 (%s%s): the run did not end while the large all-reduce waits for the others: %s",
        read ? "x reads the small all-reduce" : "nothing reads the small all-reduce",
        sync_small ? ", called synchronously" : "", ts_last_error());
  CHECK(rt_carry_pending(carry), "process 0: the large all-reduce is not in the carry");
  CHECK_OK(mpi_token(net, P, 0, 9, "mpi_exec_lanes token")); /* the others start the large one now */
  CHECK_OK(rt_carry_wait_all(carry));
  CHECK(!memcmp(v[2], ref_big, (size_t)BIG * sizeof(float)), "process 0: the large all-reduce: other bits");
  CHECK(!memcmp(v[3], ref_small, (size_t)SMALL * sizeof(float)), "process 0: the small all-reduce: other bits");
  for (int i = 0; read && i < SMALL; i++)
    if (v[4][i] != ref_small[i] + ref_small[i]) {
      CHECK(false, "process 0: x[%d] = %g, expected %g", i, v[4][i], ref_small[i] + ref_small[i]);
      break;
    }
  rt_carry_free(carry);
  for (int i = 0; i < n; i++) {
    if (state[i]) d.release_state(NULL, state[i]);
    free(v[i]);
  }
  ts_graph_free(g);
}

/* The others: the small all-reduce, then the large one after the token. */
static void run_other(ts_comm *c, ts_net *net, int P, int me, const int *group) {
  float *big = malloc((size_t)BIG * sizeof *big), small[SMALL];
  mpi_fill(big, BIG, me + 1);
  mpi_fill(small, SMALL, me + 5);
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, small, small, SMALL));
  CHECK_OK(mpi_token(net, P, me, 9, "mpi_exec_lanes token"));
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, big, big, BIG));
  free(big);
}

/* all-reduce(s) at node 1, with a 3x3 convolution before its user (conv_first)
 * or after it; cpu_collective_inline on it. */
static bool small_inline(ts_comm *c, int P, int me, bool conv_first) {
  ts_graph *g = ts_graph_new();
  int64_t ns = SMALL, xs[4] = {2, 4, 8, 8}, ws[4] = {4, 4, 3, 3};
  ts_tensor s = all_reduce(g, ts_input(g, "small", TS_F32, 1, &ns), P, SMALL);
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs), w = ts_input(g, "w", TS_F32, 4, ws);
  ts_conv_params cp = {.stride = {1, 1}, .pad_lo = {1, 1}, .pad_hi = {1, 1}};
  if (conv_first) ts_conv2d(g, x, w, &cp);
  ts_add(g, s, s);
  if (!conv_first) ts_conv2d(g, x, w, &cp);
  bool r = cpu_collective_inline(g, s, me, c);
  ts_graph_free(g);
  return r;
}

static void check_inline_decision(ts_comm *c, int P, int me) {
  comm_set_inline_bytes(c, 0, 64 << 10, 64 << 10); /* small ones in line (the default between hosts) */
  bool plain = small_inline(c, P, me, false), conv = small_inline(c, P, me, true);
  CHECK(plain && !conv, "process %d: a %d B all-reduce on the small lane in line: %d with its user first, %d with a "
        "convolution before its user (want 1, 0)", me, (int)(SMALL * sizeof(float)), plain, conv);
  comm_set_inline_bytes(c, 0, 0, 0);
}

int main(void) {
  ts_test_init("mpi_exec_lanes", 20261205);
  mpi_set_lanes("1");
  ts_net *net = NULL;
  int P = 0, me = 0, proc_of[MAXP], group[MAXP];
  ts_comm *c = mpi_world_comm(MAXP, &net, &P, &me, proc_of, group);
  if (!c) return ts_test_finish();
  comm_set_timeout_ms(c, 20000);
  check_inline_decision(c, P, me);
  comm_set_inline_bytes(c, 0, 0, 0); /* every started collective goes to the worker */
  float *ref_big = malloc((size_t)BIG * sizeof *ref_big), ref_small[SMALL];
  mpi_lane_sums(c, P, me, group, ref_big, BIG, ref_small, SMALL); /* the references */
  for (int k = 0; k < 3; k++) { /* x reads it, nothing reads it, x reads it called synchronously */
    if (me == 0) run_zero(c, net, P, k != 1, k == 2, ref_big, ref_small);
    else run_other(c, net, P, me, group);
  }
  free(ref_big);
  comm_free(c);
  mpi_set_lanes(NULL);
  return ts_test_finish();
}
