/* net_link.c — micro benchmark of the transport between two processes
 * (src/comm/net.c alone, no model, no devices): how much of a link one
 * exchange uses. Run by bench/run_netlink.sh over two namespace hosts with a
 * shaped link (issue 17); any 2-process MPI launch works.
 *
 *   mpirun -n 2 bench_net_link [-b BYTES] [-r REPS] [-m MODE] [-p] [-s] [-v]
 *
 * BYTES (4718592: the MNIST CNN's fc1 gradient, 9216 x 128 f32) is the
 * vector; MODE:
 *   allreduce  what hier.c does for a 2-process all-reduce of BYTES: two
 *              exchanges, each sending half the vector and receiving the
 *              other half at once (reduce-scatter, then all-gather)
 *   bidir      one such exchange (BYTES/2 each way at once)
 *   oneway     rank 0 sends BYTES to rank 1
 *   comm       comm_all_reduce of BYTES (f32, one device per process): the
 *              collective itself (src/comm/hier.c; its reduce-scatter and
 *              all-gather pipelined in segments, TESSEL_HIER_SEGMENT_BYTES)
 *   pass       the same all-reduce started on the collective worker, then,
 *              2 ms later, a small one (SMALL_BYTES, 80 KiB: the CNN's
 *              convolution bucket under DDP) on the small lane between
 *              hosts (comm/async.c): the time from the small one's start
 *              to its end (comm_ticket_ended; median_ms) against the large
 *              one's (large_ms). Whether the small one passes the large one
 *              on the link, or waits behind its bytes in the sockets.
 * -p waits as the collective worker does while its device computes (a pacer
 * that is never urgent: one poll per NET_PATIENT_NAP_NS nap) instead of
 * polling hard. -s adds a thread that spins through the whole run, as a
 * device thread computing on the core the exchanging thread shares. -v
 * prints every repetition (and its first exchange's time) on rank 0. Each repetition starts after a 1-byte handshake; rank 0
 * prints `RESULT net_link mode=... bytes=... median_ms=... min_ms=...
 * mbps=...` (mbps: megabits per second of the bytes one direction carries,
 * at the median). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h" /* now_s, median */

#include "comm/comm.h"
#include "comm/net.h"
#include "util/error.h"

static bool never_urgent(void *ctx) { return (void)ctx, false; }
static void nap(void *ctx, long ns) {
  (void)ctx;
  nanosleep(&(struct timespec){0, ns}, NULL);
}

static atomic_bool g_stop;

static void *spin(void *arg) { /* a computing device: busy until told to stop */
  volatile double x = 1.0;
  while (!atomic_load_explicit(&g_stop, memory_order_relaxed))
    for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
  return arg;
}

static int usage(const char *why) {
  fprintf(stderr, "bench_net_link: %s\nusage: bench_net_link [-b BYTES] [-r REPS] [-m allreduce|bidir|oneway|comm|pass] [-p] [-s] [-v]\n",
          why);
  return 2;
}

enum { SMALL_BYTES = 81920 };

static double g_first_ms; /* the last repetition's first exchange (-v) */
static double g_large_ms; /* -m pass: the large all-reduce's time */
static ts_comm *g_comm;   /* -m comm: one device per process */

/* One repetition: the handshake, then the timed exchange(s). */
static double one_rep(ts_net *n, const char *mode, char *sbuf, char *rbuf, size_t bytes) {
  int me = net_rank(n), peer = 1 - me;
  char hs = 0, hr = 0;
  net_msg h[2] = {{peer, 7, true, &hs, 1}, {peer, 7, false, &hr, 1}};
  if (net_exchange(n, h, 2, 60000, "net_link handshake") < 0) return -1;
  double t0 = now_s();
  if (!strcmp(mode, "oneway")) { /* rank 0's clock stops at rank 1's 1-byte answer: all arrived */
    net_msg m = {peer, 8, me == 0, me == 0 ? sbuf : rbuf, bytes}, a = {peer, 6, me == 1, &hs, 1};
    if (net_exchange(n, &m, 1, 60000, "net_link oneway") < 0 || net_exchange(n, &a, 1, 60000, "net_link ack") < 0)
      return -1;
  } else if (!strcmp(mode, "pass")) { /* the small one's time; the large one's in g_large_ms */
    static int group[2] = {0, 1};
    static char small[SMALL_BYTES];
    int64_t tl = comm_all_reduce_start(g_comm, me, group, 2, TS_F32, TS_REDUCE_SUM, sbuf, (int64_t)(bytes / 4));
    nanosleep(&(struct timespec){0, 2000000}, NULL);
    double ts0 = now_s();
    int64_t tsm = comm_all_reduce_start(g_comm, me, group, 2, TS_F32, TS_REDUCE_SUM, small, SMALL_BYTES / 4);
    if (tl < 0 || tsm < 0) return -1;
    double small_ms = -1;
    while (small_ms < 0 || !comm_ticket_ended(g_comm, me, tl)) {
      if (small_ms < 0 && comm_ticket_ended(g_comm, me, tsm)) small_ms = (now_s() - ts0) * 1e3;
      nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    g_large_ms = (now_s() - t0) * 1e3;
    if (comm_wait_all(g_comm, me) < 0) return -1;
    return small_ms;
  } else if (!strcmp(mode, "comm")) {
    int group[2] = {0, 1};
    if (comm_all_reduce(g_comm, me, group, 2, TS_F32, TS_REDUCE_SUM, sbuf, rbuf, (int64_t)(bytes / 4)) < 0) return -1;
  } else {
    size_t half = bytes / 2;
    int rounds = !strcmp(mode, "allreduce") ? 2 : 1;
    for (int r = 0; r < rounds; r++) {
      net_msg m[2] = {{peer, 9 + r, true, sbuf, half}, {peer, 9 + r, false, rbuf, half}};
      if (net_exchange(n, m, 2, 60000, "net_link exchange") < 0) return -1;
      if (r == 0) g_first_ms = (now_s() - t0) * 1e3;
    }
  }
  return (now_s() - t0) * 1e3;
}

int main(int argc, char **argv) {
  size_t bytes = 4718592;
  int reps = 20;
  const char *mode = "allreduce";
  bool patient = false, spinning = false, verbose = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-p")) {
      patient = true;
    } else if (!strcmp(argv[i], "-v")) {
      verbose = true;
    } else if (!strcmp(argv[i], "-s")) {
      spinning = true;
    } else if (i + 1 < argc && !strcmp(argv[i], "-b")) {
      long long v = atoll(argv[++i]);
      if (v < 2 || v > (1ll << 30)) return usage("-b: BYTES must be 2 .. 1 GiB");
      bytes = (size_t)v;
    } else if (i + 1 < argc && !strcmp(argv[i], "-r")) {
      reps = atoi(argv[++i]);
      if (reps < 1 || reps > 10000) return usage("-r: REPS must be 1 .. 10000");
    } else if (i + 1 < argc && !strcmp(argv[i], "-m")) {
      mode = argv[++i];
      if (strcmp(mode, "allreduce") && strcmp(mode, "bidir") && strcmp(mode, "oneway") && strcmp(mode, "comm") &&
          strcmp(mode, "pass"))
        return usage("-m: MODE must be allreduce, bidir, oneway, comm or pass");
    } else {
      return usage(argv[i]);
    }
  }
  bool failed = false;
  ts_net *n = net_world(&failed);
  if (!n || net_size(n) != 2) {
    fprintf(stderr, "bench_net_link: needs exactly 2 MPI processes (%s)\n", failed ? ts_last_error() : "alone");
    return 2;
  }
  if (!strcmp(mode, "comm") || !strcmp(mode, "pass")) {
    int proc_of[2] = {0, 1};
    g_comm = comm_new_world(2, proc_of, net_rank(n), 1, n);
    if (!g_comm) return fprintf(stderr, "bench_net_link: %s\n", ts_last_error()), 1;
    comm_set_timeout_ms(g_comm, 60000);
  }
  char *sbuf = malloc(bytes), *rbuf = malloc(bytes);
  double *ms = malloc((size_t)reps * sizeof *ms), *large = malloc((size_t)reps * sizeof *large);
  if (!sbuf || !rbuf || !ms || !large) return fprintf(stderr, "bench_net_link: out of memory\n"), 1;
  memset(sbuf, 1 + net_rank(n), bytes);
  memset(rbuf, 0, bytes);
  net_pacer pacer = {never_urgent, nap, NULL, false};
  if (patient) net_set_pacer(&pacer);
  pthread_t spinner;
  if (spinning && pthread_create(&spinner, NULL, spin, NULL) != 0) spinning = false;
  for (int i = -2; i < reps; i++) { /* two warm-up repetitions (connections, pages) */
    double t = one_rep(n, mode, sbuf, rbuf, bytes);
    if (t < 0) return fprintf(stderr, "bench_net_link: %s\n", ts_last_error()), 1;
    if (i >= 0) ms[i] = t, large[i] = g_large_ms;
    if (i >= 0 && verbose && net_rank(n) == 0)
      printf("rep %d: %.2f ms (first exchange %.2f, large %.2f)\n", i, t, g_first_ms, g_large_ms);
  }
  atomic_store(&g_stop, true);
  if (spinning) pthread_join(spinner, NULL);
  double med = median(ms, reps); /* sorts ms */
  /* bytes one direction carries: all of them one way; half per exchange otherwise */
  double dir_bytes = !strcmp(mode, "bidir") ? bytes / 2.0 : (double)bytes; /* comm: as allreduce */
  if (net_rank(n) == 0)
    printf("RESULT net_link mode=%s bytes=%zu patient=%d spin=%d median_ms=%.2f min_ms=%.2f mbps=%.0f\n", mode, bytes,
           patient, spinning, med, ms[0], dir_bytes * 8 / (med * 1e3));
  if (net_rank(n) == 0 && !strcmp(mode, "pass")) /* mbps above: not of the small one's bytes */
    printf("RESULT net_link_pass small_bytes=%d large_bytes=%zu small_median_ms=%.2f large_median_ms=%.2f\n",
           SMALL_BYTES, bytes, med, median(large, reps));
  comm_free(g_comm);
  free(sbuf);
  free(rbuf);
  free(ms);
  free(large);
  return 0;
}
