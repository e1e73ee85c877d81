/* mpi_hier.c — the two-level all-reduce (TESSEL_HIER_ALLREDUCE=1, comm/
 * hier.c): 2 devices in each of P processes (mpirun -n 2 and -n 3). For
 * SUM and MEAN over every device, and over one device per process (a group
 * with 1 local member: the direct algorithm), odd lengths and in place:
 *  - every device gets the same bits, in every process, and a second run
 *    gives them again;
 *  - the result is the exact sum within f32 rounding (the order differs
 *    from one process's, so no bit-identity with it: 1e-6 relative);
 *  - a process sends 2(P-1)/P of the vector between processes per
 *    all-reduce (metrics NetBytesSent), not (k+1)(P-1)/P. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/net.h"
#include "harness.h"
#include "util/config.h" /* env_config_reload */
#include "tessel/metrics.h"

enum { K = 2, MAXP = 4 };

typedef struct {
  ts_comm *c;
  int dev, G, n;
  ts_reduce_kind op;
  int64_t count;
  bool in_place, per_process;
  float *in, *out;
  int rc;
} job;

static float value(int dev, int64_t i) { return (float)(((i * 37 + dev * 101) % 997) - 498) * 0.01f + 0.1f * (float)dev; }

static void *device_main(void *arg) {
  job *j = arg;
  int group[2 * MAXP], n = 0;
  for (int d = 0; d < j->G; d++)
    if (!j->per_process || d % K == j->dev % K) group[n++] = d;
  for (int64_t i = 0; i < j->count; i++) j->in[i] = value(j->dev, i);
  if (j->in_place) memcpy(j->out, j->in, (size_t)j->count * 4);
  j->rc = comm_all_reduce(j->c, j->dev, group, n, TS_F32, j->op, j->in_place ? j->out : j->in, j->out, j->count);
  j->n = n;
  return NULL;
}

static uint64_t fnv(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

int main(void) {
  setenv("TESSEL_HIER_ALLREDUCE", "1", 1);
  env_config_reload(); /* the library read the environment when it loaded */
  ts_test_init("mpi_hier", 20261203);
  bool failed = false;
  ts_net *net = net_world(&failed);
  CHECK(!failed && net && net_size(net) >= 2 && net_size(net) <= MAXP, "run under mpirun with 2..%d processes", MAXP);
  if (!net || net_size(net) < 2 || net_size(net) > MAXP) return ts_test_finish();
  int P = net_size(net), me = net_rank(net), G = K * P, proc_of[2 * MAXP];
  for (int d = 0; d < G; d++) proc_of[d] = d / K;
  ts_comm *c = comm_new_world(G, proc_of, me * K, K, net);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return ts_test_finish();
  comm_set_timeout_ms(c, 60000);
  static const int64_t counts[] = {1, 17, 1000, 65537, 300001};
  for (int ci = 0; ci < 5; ci++)
    for (int opi = 0; opi < 2; opi++)
      for (int mode = 0; mode < 3; mode++) { /* 0: every device; 1: in place; 2: one device per process */
        int64_t count = counts[ci];
        ts_reduce_kind op = opi ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
        uint64_t hash[2] = {0, 0};
        int64_t sent = 0;
        for (int rep = 0; rep < 2; rep++) {
          job j[K];
          pthread_t th[K];
          int64_t s0 = ts_counter_value("NetBytesSent");
          for (int l = 0; l < K; l++) {
            j[l] = (job){c, me * K + l, G, 0, op, count, mode == 1, mode == 2, malloc((size_t)count * 4),
                         malloc((size_t)count * 4), -1};
            pthread_create(&th[l], NULL, device_main, &j[l]);
          }
          for (int l = 0; l < K; l++) pthread_join(th[l], NULL);
          sent = ts_counter_value("NetBytesSent") - s0;
          bool same = true, close = true;
          for (int l = 0; l < K; l++) {
            CHECK(j[l].rc == 0, "device %d: %s", j[l].dev, ts_last_error());
            same &= mode == 2 || memcmp(j[l].out, j[0].out, (size_t)count * 4) == 0; /* mode 2: two groups */
            for (int64_t i = 0; i < count && close; i++) {
              double want = 0;
              for (int d = 0; d < G; d++)
                if (mode != 2 || d % K == j[l].dev % K) want += value(d, i);
              if (op == TS_REDUCE_MEAN) want /= j[l].n;
              close = fabs(j[l].out[i] - want) <= 1e-6 * (1 + fabs(want)) * j[l].n;
            }
          }
          CHECK(same && close, "count %lld op %d mode %d: devices %s, %s", (long long)count, (int)op, mode,
                same ? "agree" : "DIFFER", close ? "close to the exact sum" : "FAR from the exact sum");
          hash[rep] = fnv(j[0].out, (size_t)count * 4);
          for (int l = 0; l < K; l++) free(j[l].in), free(j[l].out);
        }
        CHECK(hash[0] == hash[1], "count %lld: a second run differs", (long long)count);
        uint64_t all[MAXP];
        CHECK(net_allgather(net, &hash[0], all, sizeof hash[0], 20000, "hash") == 0, "%s", ts_last_error());
        for (int p = 0; p < P; p++) CHECK(all[p] == hash[0], "process %d's result differs from process %d's", p, me);
        if (mode != 2 && count >= 65537) { /* bytes: 2(P-1)/P of the vector, not (K+1)(P-1)/P */
          double want = 2.0 * (P - 1) / P * (double)count * 4;
          CHECK(sent >= 0.99 * want && sent <= 1.02 * want + 4096, "count %lld: sent %lld bytes, want about %.0f",
                (long long)count, (long long)sent, want);
        }
      }
  comm_free(c);
  return ts_test_finish();
}
