/* mpi_comm.c — collectives across processes (src/comm hier.c + net.c) equal
 * the single-process ones, bit for bit. Run under mpirun with 2 or more
 * processes (tests/CMakeLists.txt: -n 2, and -n 3 --oversubscribe).
 *
 * The job has G = 4 devices, shared out as evenly as possible (2 processes:
 * 2 + 2; 3 processes: 2 + 1 + 1, an uneven layout). Every device thread runs
 * the same sequence of collectives: every kind (all-reduce, all-gather,
 * reduce-scatter, all-to-all, collective-permute, barrier), every dtype and
 * reduce kind, groups of every shape (all devices, pairs across processes,
 * pairs within a process, mixed, singletons), outer > 1 layouts, in place and
 * not, a large all-reduce. The reference is the same sequence run in this
 * process by G threads on an in-process communicator (comm.c): each process
 * compares its own devices' outputs with the reference's, byte for byte.
 * With TESSEL_NET_PIECE_BYTES small (set by ctest) every message larger than
 * that is split into pieces, the path messages over 1 GiB take.
 *
 * The last part checks the timeout: the last process skips a collective and
 * the others must fail with an error naming it, in time. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/net.h"
#include "comm_inputs.h"
#include "harness.h"
#include "util/half.h"

enum { G = 4 };

#define gen comm_test_gen /* comm_inputs.h: the inputs test_comm.c uses */

typedef enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_TO_ALL, K_PERMUTE, K_BARRIER } kind;

/* Group layouts of one call (each device's group; the groups partition the
 * devices): with 2 processes devices are {0,1} {2,3}; with 3, {0,1} {2} {3}. */
enum { L_ALL, L_ACROSS, L_WITHIN, L_MIXED, L_SINGLE, L_REVERSED, N_LAYOUTS };

static int group_of(int layout, int dev, int *g) {
  switch (layout) {
  case L_ALL: for (int i = 0; i < G; i++) g[i] = i; return G;
  case L_REVERSED: for (int i = 0; i < G; i++) g[i] = G - 1 - i; return G;
  case L_ACROSS: g[0] = dev % 2; g[1] = dev % 2 + 2; return 2;
  case L_WITHIN: g[0] = dev / 2 * 2; g[1] = dev / 2 * 2 + 1; return 2;
  case L_MIXED: g[0] = dev == 0 || dev == 3 ? 3 : 1; g[1] = dev == 0 || dev == 3 ? 0 : 2; return 2;
  default: g[0] = dev; return 1;
  }
}

typedef struct {
  kind k;
  int layout;
  ts_dtype dt;
  ts_reduce_kind op;
  int64_t count, outer; /* elements per block row, rows */
  bool in_place;
  int shift; /* permute: device d sends to (d + shift) % G; 0 = a swap 0<->3 only */
} test_case;

typedef struct {
  int n_cases;
  const test_case *cases;
  void **in, **out; /* [case * G + dev] */
  size_t *in_bytes, *out_bytes;
} plan;

static int n_members(const test_case *t) {
  int g[G];
  return group_of(t->layout, 0, g);
}

static void sizes(const test_case *t, size_t *in, size_t *out) {
  size_t es = ts_dtype_size(t->dt), n = (size_t)n_members(t), row = (size_t)t->count * es;
  switch (t->k) {
  case K_ALL_REDUCE: *in = *out = row * (size_t)t->outer; break;
  case K_ALL_GATHER: *in = row * (size_t)t->outer; *out = *in * n; break;
  case K_REDUCE_SCATTER: *in = row * (size_t)t->outer * n; *out = row * (size_t)t->outer; break;
  case K_ALL_TO_ALL: *in = *out = row * (size_t)t->outer * n; break;
  case K_PERMUTE: *in = *out = row; break;
  default: *in = *out = 0;
  }
}

static int run_one(ts_comm *c, const test_case *t, int dev, const void *in, void *out) {
  int g[G], n = group_of(t->layout, dev, g);
  size_t es = ts_dtype_size(t->dt);
  const void *src = t->in_place ? out : in;
  switch (t->k) {
  case K_ALL_REDUCE: return comm_all_reduce(c, dev, g, n, t->dt, t->op, src, out, t->count * t->outer);
  case K_ALL_GATHER: {
    /* in place: the input sits in its slot of out (outer 1 only) */
    int r = 0;
    while (g[r] != dev) r++;
    if (t->in_place) src = (char *)out + (size_t)r * (size_t)t->count * es;
    return comm_all_gather(c, dev, g, n, src, out, t->outer, (size_t)t->count * es);
  }
  case K_REDUCE_SCATTER: return comm_reduce_scatter(c, dev, g, n, t->dt, t->op, in, out, t->outer, t->count);
  case K_ALL_TO_ALL: return comm_all_to_all(c, dev, g, n, src, out, t->outer, (size_t)t->count * es);
  case K_PERMUTE: {
    int pairs[2 * G], np = 0;
    if (t->shift == 0) {
      pairs[0] = 0, pairs[1] = 3, np = 1; /* device 3 receives, others get zeros */
    } else {
      for (int d = 0; d < G; d++) pairs[2 * np] = d, pairs[2 * np + 1] = (d + t->shift) % G, np++;
    }
    return comm_permute(c, dev, pairs, np, src, out, (size_t)t->count * es);
  }
  default: return comm_barrier(c, dev, g, n);
  }
}

typedef struct {
  ts_comm *c;
  const plan *p;
  int dev;
  int rc;
  char msg[512];
} job;

static void *device_main(void *arg) {
  job *j = arg;
  for (int k = 0; k < j->p->n_cases && j->rc == 0; k++) {
    const test_case *t = &j->p->cases[k];
    size_t at = (size_t)k * G + (size_t)j->dev;
    if (t->in_place) memcpy(j->p->out[at], j->p->in[at], j->p->in_bytes[at] < j->p->out_bytes[at] ?
                                                         j->p->in_bytes[at] : j->p->out_bytes[at]);
    if (run_one(j->c, t, j->dev, j->p->in[at], j->p->out[at]) < 0) {
      j->rc = -1;
      snprintf(j->msg, sizeof j->msg, "case %d device %d: %s", k, j->dev, ts_last_error());
    }
  }
  return NULL;
}

/* Runs the plan for devices [first, first + n) of c, one thread each. */
static int run_devices(ts_comm *c, const plan *p, int first, int n, char *err, size_t len) {
  pthread_t th[G];
  job jobs[G];
  for (int i = 0; i < n; i++) {
    jobs[i] = (job){c, p, first + i, 0, ""};
    pthread_create(&th[i], NULL, device_main, &jobs[i]);
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    if (jobs[i].rc && !rc) {
      rc = -1;
      snprintf(err, len, "%s", jobs[i].msg);
    }
  }
  return rc;
}

static plan make_plan(const test_case *cases, int n_cases) {
  plan p = {n_cases, cases, calloc((size_t)n_cases * G, sizeof(void *)), calloc((size_t)n_cases * G, sizeof(void *)),
            calloc((size_t)n_cases * G, sizeof(size_t)), calloc((size_t)n_cases * G, sizeof(size_t))};
  for (int k = 0; k < n_cases; k++) {
    const test_case *t = &cases[k];
    size_t ib, ob;
    sizes(t, &ib, &ob);
    size_t es = ts_dtype_size(t->dt);
    for (int d = 0; d < G; d++) {
      size_t at = (size_t)k * G + (size_t)d;
      p.in[at] = malloc(ib + 1);
      p.out[at] = malloc(ob + 1);
      p.in_bytes[at] = ib;
      p.out_bytes[at] = ob;
      for (size_t i = 0; i < ib / (es ? es : 1); i++) gen(t->dt, (uint64_t)k, d, (int64_t)i, (char *)p.in[at] + i * es);
      memset(p.out[at], 0x5a, ob); /* garbage: every byte must be written */
    }
  }
  return p;
}

static void free_plan(plan *p) {
  for (int i = 0; i < p->n_cases * G; i++) {
    free(p->in[i]);
    free(p->out[i]);
  }
  free(p->in);
  free(p->out);
  free(p->in_bytes);
  free(p->out_bytes);
}

static int n_cases_built;
static test_case cases[4096];
static void add(test_case t) { cases[n_cases_built++] = t; }

static void build_cases(void) {
  static const ts_dtype dts[] = {TS_F32, TS_F64, TS_BF16, TS_F16, TS_I32, TS_I64, TS_U8};
  static const ts_reduce_kind ops[] = {TS_REDUCE_SUM, TS_REDUCE_MAX, TS_REDUCE_MIN, TS_REDUCE_MEAN};
  for (int l = 0; l < N_LAYOUTS; l++) {
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
      for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
        add((test_case){K_ALL_REDUCE, l, dts[d], ops[o], 37 + (int64_t)d, 1, false, 0});
        add((test_case){K_REDUCE_SCATTER, l, dts[d], ops[o], 5, 3, false, 0});
        add((test_case){K_REDUCE_SCATTER, l, dts[d], ops[o], 5 + (int64_t)o, 1, false, 0}); /* sent in place */
      }
    add((test_case){K_ALL_REDUCE, l, TS_BOOL, TS_REDUCE_MAX, 19, 1, false, 0});
    add((test_case){K_ALL_REDUCE, l, TS_BOOL, TS_REDUCE_MIN, 19, 1, true, 0});
    add((test_case){K_ALL_REDUCE, l, TS_F32, TS_REDUCE_SUM, 1000, 1, true, 0});
    add((test_case){K_ALL_REDUCE, l, TS_F32, TS_REDUCE_SUM, 0, 1, false, 0}); /* empty */
    add((test_case){K_ALL_REDUCE, l, TS_F32, TS_REDUCE_SUM, 3, 1, false, 0}); /* fewer than processes' chunks */
    add((test_case){K_ALL_GATHER, l, TS_F32, TS_REDUCE_SUM, 7, 1, false, 0});
    add((test_case){K_ALL_GATHER, l, TS_BF16, TS_REDUCE_SUM, 6, 4, false, 0});
    add((test_case){K_ALL_GATHER, l, TS_I64, TS_REDUCE_SUM, 9, 1, true, 0});
    add((test_case){K_ALL_TO_ALL, l, TS_F32, TS_REDUCE_SUM, 3, 2, false, 0});
    add((test_case){K_ALL_TO_ALL, l, TS_U8, TS_REDUCE_SUM, 5, 3, true, 0});
    add((test_case){K_ALL_TO_ALL, l, TS_F64, TS_REDUCE_SUM, 1, 1, false, 0});
    add((test_case){K_BARRIER, l, TS_F32, TS_REDUCE_SUM, 0, 1, false, 0});
  }
  for (int s = 0; s < G; s++) {
    add((test_case){K_PERMUTE, L_ALL, TS_F32, TS_REDUCE_SUM, 33, 1, false, s});
    add((test_case){K_PERMUTE, L_ALL, TS_I32, TS_REDUCE_SUM, 8, 1, true, s});
  }
  /* large: 3 MiB per device, split into many pieces with a small piece size */
  add((test_case){K_ALL_REDUCE, L_ALL, TS_F32, TS_REDUCE_SUM, 786433, 1, false, 0});
  add((test_case){K_ALL_REDUCE, L_ACROSS, TS_BF16, TS_REDUCE_MEAN, 300001, 1, true, 0});
}

static const char *kind_name(kind k) {
  static const char *n[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute", "barrier"};
  return n[k];
}

int main(void) {
  ts_test_init("mpi_comm", 20261202);
  bool failed = false;
  ts_net *net = net_world(&failed);
  CHECK(!failed && net && net_size(net) >= 2 && net_size(net) <= G,
        "run under mpirun with 2..%d processes (%s)", G, failed ? ts_last_error() : "no MPI");
  if (!net || net_size(net) < 2 || net_size(net) > G) return ts_test_finish();
  int P = net_size(net), me = net_rank(net);
  int proc_of[G], first = -1, n_local = 0;
  for (int d = 0, p = 0, used = 0; d < G; d++) { /* process p gets G/P (+1 for the first G%P) */
    int share = G / P + (p < G % P ? 1 : 0);
    proc_of[d] = p;
    if (p == me) {
      if (first < 0) first = d;
      n_local++;
    }
    if (++used == share) p++, used = 0;
  }
  ts_comm *world = comm_new_world(G, proc_of, first, n_local, net);
  ts_comm *ref = comm_new(G);
  CHECK(world && ref, "%s", ts_last_error());
  comm_set_timeout_ms(world, 20000);

  build_cases();
  plan pw = make_plan(cases, n_cases_built), pr = make_plan(cases, n_cases_built);
  char err[512] = "";
  int rc = run_devices(world, &pw, first, n_local, err, sizeof err);
  CHECK(rc == 0, "process %d: %s", me, err);
  rc = run_devices(ref, &pr, 0, G, err, sizeof err);
  CHECK(rc == 0, "reference: %s", err);
  int mismatches = 0;
  for (int k = 0; k < n_cases_built; k++)
    for (int d = first; d < first + n_local; d++) {
      size_t at = (size_t)k * G + (size_t)d;
      if (memcmp(pw.out[at], pr.out[at], pw.out_bytes[at]) != 0 && mismatches++ < 10)
        fprintf(stderr, "process %d: case %d (%s layout %d dtype %s op %d count %lld outer %lld%s) device %d "
                "differs from one process\n", me, k, kind_name(cases[k].k), cases[k].layout,
                ts_dtype_name(cases[k].dt), (int)cases[k].op, (long long)cases[k].count,
                (long long)cases[k].outer, cases[k].in_place ? " in place" : "", d);
    }
  CHECK(mismatches == 0, "process %d: %d of %d outputs differ from the single-process collectives", me, mismatches,
        n_cases_built * n_local);
  free_plan(&pw);
  free_plan(&pr);

  /* Timeout: the last process skips an all-reduce over every device; the
   * others must fail naming the wait, within the timeout. */
  if (rc == 0 && mismatches == 0) {
    ts_comm *t = comm_new_world(G, proc_of, first, n_local, net);
    comm_set_timeout_ms(t, 1500);
    static const test_case skip[] = {{K_ALL_REDUCE, L_ALL, TS_F32, TS_REDUCE_SUM, 16, 1, false, 0}};
    if (me != P - 1) {
      plan p = make_plan(skip, 1);
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      rc = run_devices(t, &p, first, n_local, err, sizeof err);
      clock_gettime(CLOCK_MONOTONIC, &b);
      double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
      CHECK(rc < 0 && (strstr(err, "timed out") != NULL), "process %d: a missing process must time out: %s", me,
            rc ? err : "it succeeded");
      CHECK(s < 10, "process %d: the timeout took %.1f s (limit 1.5 s)", me, s);
      free_plan(&p);
    }
    /* every process waits here until the others are done (the skipped
     * messages stay unmatched; t is not used again) */
    int token = me, all[G];
    CHECK(net_allgather(net, &token, all, sizeof token, 20000, "end of test") == 0, "%s", ts_last_error());
  }
  comm_free(ref);
  comm_free(world);
  return ts_test_finish();
}
