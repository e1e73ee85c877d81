/* mpi_netbytes.c — what the collectives across processes cost in bytes on
 * the network (src/comm/hier.c over net.c, counted by the metrics counters
 * NetBytesSent / NetBytesReceived / NetMessages). Run under mpirun with 2 or
 * more processes (ctest: -n 2, -n 3 and -n 4 --oversubscribe).
 *
 * One device per process (P devices), N = 2^20 floats:
 *  - all-reduce sends at most 2(P-1)/P * N * 4 bytes per process (the
 *    bandwidth term of a ring or of recursive halving/doubling: it does not
 *    grow with P) and receives as much, in 2(P-1) messages per segment (a
 *    direct reduce-scatter then all-gather: one step each, so small messages
 *    pay one latency, not P-1; pipelined in segments of HIER_SEGMENT_BYTES
 *    of each chunk, counted by CommHierSegments);
 *  - an all-reduce of at most 4 KiB (hier.c HIER_ONE_STEP_BYTES) goes in one
 *    step: every process sends its whole vector to every other, (P-1)
 *    sends and (P-1) receives;
 *  - all-gather and reduce-scatter of N floats in total: (P-1)/P * N * 4,
 *    sent from the input and received into the output, no copy between
 *    (counter CommHierCopyBytes); with outer 2 the leader packs / unpacks;
 *  - every result is checked against the known sum; segment sizes of the
 *    pipelined all-reduce give the same bits, a bad one fails naming it;
 *  - under Open MPI, net_world asked for the copy-in/copy-out shared-memory
 *    path (OMPI_MCA_btl_vader_single_copy_mechanism=none; net.c says why)
 *    since the test's launcher does not set it.
 * With two devices per process it prints what the hierarchical all-reduce
 * sends (each local device's raw contribution crosses, so that the sums are
 * bit-identical to one process: (k+1)(P-1)/P * N * 4 with k local devices). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_internal.h" /* HIER_SEGMENT_BYTES */
#include "comm/net.h"
#include "harness.h"
#include "util/config.h" /* env_config_reload */
#include "tessel/metrics.h"

enum { N = 1 << 20, MAXP = 8 };

typedef struct {
  ts_comm *c;
  int dev, n_dev;
  float *buf;
  int rc;
  char err[256];
} job;

static void *all_reduce_main(void *arg) {
  job *j = arg;
  int group[2 * MAXP];
  for (int i = 0; i < j->n_dev; i++) group[i] = i;
  j->rc = comm_all_reduce(j->c, j->dev, group, j->n_dev, TS_F32, TS_REDUCE_SUM, j->buf, j->buf, N);
  if (j->rc) snprintf(j->err, sizeof j->err, "%s", ts_last_error());
  return NULL;
}

static int64_t sent(void) { return ts_counter_value("NetBytesSent"); }
static int64_t received(void) { return ts_counter_value("NetBytesReceived"); }
static int64_t messages(void) { return ts_counter_value("NetMessages"); }
static int64_t copied(void) { return ts_counter_value("CommHierCopyBytes"); }

/* An all-reduce (op, in place) of count values that round differently in
 * every order, with TESSEL_HIER_SEGMENT_BYTES = seg (NULL: unset). */
static int reduce_with(ts_comm *c, int me, const int *group, int P, const char *seg, ts_reduce_kind op, float *x,
                       int64_t count) {
  if (seg) setenv("TESSEL_HIER_SEGMENT_BYTES", seg, 1);
  else unsetenv("TESSEL_HIER_SEGMENT_BYTES");
  env_config_reload();
  for (int64_t i = 0; i < count; i++) x[i] = (float)(me + 1) * 0.37f + (float)(i % 11) * 0.013f;
  return comm_all_reduce(c, me, group, P, TS_F32, op, x, x, count);
}

/* The pipelined all-reduce's segments only cut ranges: every segment size
 * (0: one segment; 1000: rounded up to whole 64-byte lines; an uneven last
 * segment) gives the bits of one segment, for SUM and MEAN of an odd
 * length; a value that is not bytes fails, naming it. */
static void segment_sizes(ts_comm *c, int me, const int *group, int P, float *x, float *ref) {
  enum { COUNT = 300001 };
  static const char *const segs[] = {NULL, "4096", "1000", "100000"};
  for (int op = 0; op < 2; op++) {
    ts_reduce_kind k = op ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
    CHECK_OK(reduce_with(c, me, group, P, "0", k, ref, COUNT));
    for (size_t s = 0; s < sizeof segs / sizeof *segs; s++) {
      int64_t g0 = ts_counter_value("CommHierSegments");
      CHECK_OK(reduce_with(c, me, group, P, segs[s], k, x, COUNT));
      CHECK(memcmp(x, ref, (size_t)COUNT * 4) == 0, "process %d: op %d, segments of %s bytes: other bits than one "
            "segment", me, op, segs[s] ? segs[s] : "(default)");
      if (segs[s] && !strcmp(segs[s], "4096")) { /* chunks of ceil(COUNT / P) rounded to 16 floats, 1024 a segment */
        int64_t want = (((COUNT + P - 1) / P + 15) / 16 * 16 + 1023) / 1024;
        CHECK(ts_counter_value("CommHierSegments") - g0 == want, "process %d: %lld segments of 4096 bytes, want %lld",
              me, (long long)(ts_counter_value("CommHierSegments") - g0), (long long)want);
      }
    }
  }
  CHECK(reduce_with(c, me, group, P, "12x", TS_REDUCE_SUM, x, COUNT) < 0 &&
            strstr(ts_last_error(), "TESSEL_HIER_SEGMENT_BYTES=12x"),
        "process %d: TESSEL_HIER_SEGMENT_BYTES=12x: %s", me, ts_last_error());
  unsetenv("TESSEL_HIER_SEGMENT_BYTES");
  /* a piece size that is not bytes fails every exchange, naming it (it
   * used to fall back to the default: 1 GiB, and eager pieces between hosts) */
  const char *piece = getenv("TESSEL_NET_PIECE_BYTES");
  char *keep = piece ? strdup(piece) : NULL;
  setenv("TESSEL_NET_PIECE_BYTES", "64K", 1);
  CHECK(reduce_with(c, me, group, P, NULL, TS_REDUCE_SUM, x, COUNT) < 0 &&
            strstr(ts_last_error(), "TESSEL_NET_PIECE_BYTES=64K"),
        "process %d: TESSEL_NET_PIECE_BYTES=64K: %s", me, ts_last_error());
  if (keep) setenv("TESSEL_NET_PIECE_BYTES", keep, 1);
  else unsetenv("TESSEL_NET_PIECE_BYTES");
  free(keep);
  /* so does a TESSEL_NET_EAGER that is not 0 or 1 (net.c: pieces between
   * hosts always, never, or by the link measured at the start) */
  setenv("TESSEL_NET_EAGER", "yes", 1);
  CHECK(reduce_with(c, me, group, P, NULL, TS_REDUCE_SUM, x, COUNT) < 0 &&
            strstr(ts_last_error(), "TESSEL_NET_EAGER=yes"),
        "process %d: TESSEL_NET_EAGER=yes: %s", me, ts_last_error());
  unsetenv("TESSEL_NET_EAGER");
  env_config_reload();
}

int main(void) {
  ts_test_init("mpi_netbytes", 20261203);
  bool failed = false;
  ts_net *net = net_world(&failed);
  CHECK(!failed && net && net_size(net) >= 2 && net_size(net) <= MAXP, "run under mpirun with 2..%d processes (%s)",
        MAXP, failed ? ts_last_error() : "no MPI");
  if (!net || net_size(net) < 2 || net_size(net) > MAXP) return ts_test_finish();
  int P = net_size(net), me = net_rank(net);
  ts_metrics_set_enabled(true);
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    const char *mech = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    CHECK(mech && !strcmp(mech, "none"), "process %d: Open MPI's single-copy mechanism is %s, expected none (net.c)",
          me, mech ? mech : "unset");
  }
  float *buf = malloc((size_t)N * sizeof *buf), *part = malloc((size_t)N * sizeof *part);
  CHECK(buf && part, "out of memory");
  if (!buf || !part) return ts_test_finish();
  double ideal = 2.0 * (P - 1) / P * N * 4, slack = 2.0 * (P - 1) * 64; /* chunks are aligned to 64 bytes */

  /* one device per process */
  int proc_of[2 * MAXP];
  for (int d = 0; d < P; d++) proc_of[d] = d;
  ts_comm *c = comm_new_world(P, proc_of, me, 1, net);
  CHECK(c != NULL, "%s", ts_last_error());
  comm_set_timeout_ms(c, 30000);
  int group[MAXP];
  for (int d = 0; d < P; d++) group[d] = d;
  for (int i = 0; i < N; i++) buf[i] = (float)(me + 1) + (float)(i % 7);
  int64_t s0 = sent(), r0 = received(), m0 = messages();
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, buf, buf, N));
  int64_t s = sent() - s0, r = received() - r0, m = messages() - m0;
  int bad = 0;
  for (int i = 0; i < N; i++)
    bad += buf[i] != (float)(P * (P + 1) / 2) + (float)P * (float)(i % 7);
  CHECK(bad == 0, "process %d: %d wrong sums", me, bad);
  printf("P=%d all-reduce of %d bytes: process %d sent %lld, received %lld bytes (2(P-1)/P*N = %.0f) in %lld "
         "messages\n", P, N * 4, me, (long long)s, (long long)r, ideal, (long long)m);
  CHECK(s >= ideal - slack && s <= ideal + slack, "process %d sent %lld bytes, expected 2(P-1)/P*N = %.0f", me,
        (long long)s, ideal);
  CHECK(r >= ideal - slack && r <= ideal + slack, "process %d received %lld bytes, expected %.0f", me,
        (long long)r, ideal);
  /* the phases go in segments of HIER_SEGMENT_BYTES of each chunk (hier.c: pipelined), each a message */
  int64_t chunk = ((N + P - 1) / P + 15) / 16 * 16 * 4, segs = (chunk + HIER_SEGMENT_BYTES - 1) / HIER_SEGMENT_BYTES;
  CHECK(segs > 1, "P=%d: a chunk of %lld bytes is one segment: the test needs several", P, (long long)chunk);
  CHECK(m == 4 * (P - 1) * segs && ts_counter_value("CommHierSegments") == segs,
        "process %d: %lld messages, %lld segments (expected 2 steps x (P-1) peers x send+receive x %lld segments "
        "= %lld)", me, (long long)m, (long long)ts_counter_value("CommHierSegments"), (long long)segs,
        (long long)(4 * (P - 1) * segs));

  CHECK(ts_counter_value("NetEagerPieces") == 0, "process %d: %lld eager pieces between processes of one host "
        "(net.c cuts only messages to other hosts)", me, (long long)ts_counter_value("NetEagerPieces"));

  /* a small all-reduce: one step, the whole vector to every peer */
  enum { SMALL = 1024 }; /* floats: 4 KiB */
  for (int i = 0; i < SMALL; i++) buf[i] = (float)(me + 1) * 0.1f + (float)(i % 3);
  s0 = sent(), m0 = messages();
  CHECK_OK(comm_all_reduce(c, me, group, P, TS_F32, TS_REDUCE_SUM, buf, buf, SMALL));
  s = sent() - s0, m = messages() - m0;
  bad = 0;
  for (int i = 0; i < SMALL; i++) { /* member order, as comm_reduce sums */
    float want = 0.1f + (float)(i % 3);
    for (int p = 1; p < P; p++) want += (float)(p + 1) * 0.1f + (float)(i % 3);
    bad += buf[i] != want;
  }
  CHECK(bad == 0, "process %d: small all-reduce: %d wrong sums", me, bad);
  CHECK(m == 2 * (P - 1) && s == (int64_t)(P - 1) * SMALL * 4, "process %d: small all-reduce in %lld messages, "
        "%lld bytes sent (expected one step: %d messages, %lld bytes)", me, (long long)m, (long long)s, 2 * (P - 1),
        (long long)(P - 1) * SMALL * 4);

  /* all-gather of N/P floats per member, reduce-scatter down to N/P */
  int64_t per = N / P;
  for (int i = 0; i < per; i++) part[i] = (float)(me * 1000 + i % 13);
  int64_t c0 = copied();
  s0 = sent();
  CHECK_OK(comm_all_gather(c, me, group, P, part, buf, 1, (size_t)per * 4));
  s = sent() - s0;
  bad = 0;
  for (int p = 0; p < P; p++)
    for (int i = 0; i < per; i++) bad += buf[p * per + i] != (float)(p * 1000 + i % 13);
  CHECK(bad == 0, "process %d: all-gather: %d wrong", me, bad);
  CHECK(s == (int64_t)(P - 1) * per * 4, "all-gather: process %d sent %lld bytes, expected (P-1)/P*N = %lld", me,
        (long long)s, (long long)(P - 1) * per * 4);
  for (int i = 0; i < per * P; i++) buf[i] = (float)(i % 5);
  s0 = sent();
  CHECK_OK(comm_reduce_scatter(c, me, group, P, TS_F32, TS_REDUCE_SUM, buf, part, 1, per));
  s = sent() - s0;
  bad = 0;
  for (int i = 0; i < per; i++) bad += part[i] != (float)P * (float)((me * per + i) % 5);
  CHECK(bad == 0, "process %d: reduce-scatter: %d wrong", me, bad);
  CHECK(s == (int64_t)(P - 1) * per * 4, "reduce-scatter: process %d sent %lld bytes, expected (P-1)/P*N = %lld",
        me, (long long)s, (long long)(P - 1) * per * 4);
  CHECK(copied() == c0, "process %d: outer 1 all-gather and reduce-scatter copied %lld bytes (CommHierCopyBytes): "
        "they send from the input and receive into the output", me, (long long)(copied() - c0));
  /* outer 2: the blocks for a peer lie in 2 pieces; the leader packs them
   * (reduce-scatter) and unpacks what it receives (all-gather) */
  int64_t row = per / 2, c1 = copied();
  CHECK_OK(comm_reduce_scatter(c, me, group, P, TS_F32, TS_REDUCE_SUM, buf, part, 2, row));
  CHECK(copied() - c1 == (int64_t)(P - 1) * 2 * row * 4, "process %d: outer 2 reduce-scatter packed %lld bytes, "
        "expected %lld", me, (long long)(copied() - c1), (long long)(P - 1) * 2 * row * 4);
  c1 = copied();
  CHECK_OK(comm_all_gather(c, me, group, P, part, buf, 2, (size_t)row * 4));
  CHECK(copied() - c1 == (int64_t)(P - 1) * 2 * row * 4, "process %d: outer 2 all-gather unpacked %lld bytes, "
        "expected %lld", me, (long long)(copied() - c1), (long long)(P - 1) * 2 * row * 4);
  segment_sizes(c, me, group, P, buf, part);
  comm_free(c);

  /* two devices per process: what the hierarchical all-reduce sends */
  for (int d = 0; d < 2 * P; d++) proc_of[d] = d / 2;
  c = comm_new_world(2 * P, proc_of, 2 * me, 2, net);
  CHECK(c != NULL, "%s", ts_last_error());
  comm_set_timeout_ms(c, 30000);
  float *buf2 = malloc((size_t)N * sizeof *buf2);
  CHECK(buf2 != NULL, "out of memory");
  if (c && buf2) {
    job j[2] = {{c, 2 * me, 2 * P, buf, 0, ""}, {c, 2 * me + 1, 2 * P, buf2, 0, ""}};
    for (int i = 0; i < N; i++) buf[i] = 1.0f, buf2[i] = 2.0f;
    pthread_t th;
    s0 = sent();
    pthread_create(&th, NULL, all_reduce_main, &j[1]);
    all_reduce_main(&j[0]);
    pthread_join(th, NULL);
    s = sent() - s0;
    CHECK(j[0].rc == 0 && j[1].rc == 0, "process %d: %s%s", me, j[0].err, j[1].err);
    bad = 0;
    for (int i = 0; i < N; i++) bad += buf[i] != 3.0f * (float)P || buf2[i] != 3.0f * (float)P;
    CHECK(bad == 0, "process %d: 2 devices: %d wrong sums", me, bad);
    printf("P=%d, 2 devices per process, all-reduce of %d bytes: process %d sent %lld bytes (%.2f x N; one device "
           "per process: %.2f x N)\n", P, N * 4, me, (long long)s, (double)s / (N * 4.0), ideal / (N * 4.0));
  }
  free(buf2);
  comm_free(c);
  free(buf);
  free(part);
  return ts_test_finish();
}
