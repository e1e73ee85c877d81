/* test_comm.c — in-process collectives (src/comm) against a serial reference.
 *
 * N pthreads (N = 1, 2, 3, 4, 8) act as devices. For several group layouts
 * (all devices, reversed rank order, rows and columns of a 2x4 mesh, the
 * three axes of a 2x2x2 mesh, ...) every device thread runs the same
 * sequence of collectives over every dtype and reduce kind, odd counts and
 * outer > 1 layouts, in place and not. Inputs are a hash of (seed, case,
 * device, index), so each device recomputes its peers' inputs and checks its
 * own output bit for bit against a serial reduction in member order. Device
 * threads count failures locally (the harness counters are not thread-safe);
 * the main thread CHECKs them. Also: determinism under random timing,
 * permute (ring, a device that receives nothing), barriers, argument errors,
 * and the timeout path. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm_inputs.h"
#include "harness.h"
#include "util/half.h"

/* ---- inputs: comm_inputs.h ---- */

#define gen comm_test_gen
#define mix comm_test_mix

/* ---- serial reference: member order, f32 accumulation for bf16/f16 ---- */

static float fmaxn(float a, float b) { return (a > b || isnan(a)) ? a : b; }
static float fminn(float a, float b) { return (a < b || isnan(a)) ? a : b; }
static double dmaxn(double a, double b) { return (a > b || isnan(a)) ? a : b; }
static double dminn(double a, double b) { return (a < b || isnan(a)) ? a : b; }

/* The reduction over members of element i of case k (members = group). */
static void ref_elem(ts_dtype dt, ts_reduce_kind op, uint64_t k, const int *group, int n,
                     int64_t i, void *dst) {
  unsigned char raw[8];
  if (dt == TS_F32 || dt == TS_BF16 || dt == TS_F16) {
    float acc = 0;
    for (int m = 0; m < n; m++) {
      gen(dt, k, group[m], i, raw);
      float x;
      if (dt == TS_F32) memcpy(&x, raw, 4);
      else { uint16_t b; memcpy(&b, raw, 2); x = dt == TS_BF16 ? ts_bf16_to_f32(b) : ts_f16_to_f32(b); }
      acc = m == 0 ? x : op == TS_REDUCE_MAX ? fmaxn(acc, x) : op == TS_REDUCE_MIN ? fminn(acc, x) : acc + x;
    }
    if (op == TS_REDUCE_MEAN) acc /= (float)n;
    if (dt == TS_F32) memcpy(dst, &acc, 4);
    else { uint16_t b = dt == TS_BF16 ? ts_f32_to_bf16(acc) : ts_f32_to_f16(acc); memcpy(dst, &b, 2); }
  } else if (dt == TS_F64) {
    double acc = 0;
    for (int m = 0; m < n; m++) {
      double x;
      gen(dt, k, group[m], i, &x);
      acc = m == 0 ? x : op == TS_REDUCE_MAX ? dmaxn(acc, x) : op == TS_REDUCE_MIN ? dminn(acc, x) : acc + x;
    }
    if (op == TS_REDUCE_MEAN) acc /= n;
    memcpy(dst, &acc, 8);
  } else { /* integers: exact in 64 bits (i64 sums wrap), keep the low bits */
    int64_t acc = 0;
    for (int m = 0; m < n; m++) {
      int64_t x;
      gen(dt, k, group[m], i, raw);
      if (dt == TS_I32) { int32_t v; memcpy(&v, raw, 4); x = v; }
      else if (dt == TS_I64) memcpy(&x, raw, 8);
      else x = raw[0];
      acc = m == 0 ? x : op == TS_REDUCE_MAX ? (x > acc ? x : acc)
                 : op == TS_REDUCE_MIN ? (x < acc ? x : acc)
                 : (int64_t)((uint64_t)acc + (uint64_t)x);
    }
    if (op == TS_REDUCE_MEAN) acc /= n;
    if (dt == TS_I32) { int32_t v = (int32_t)(uint32_t)acc; memcpy(dst, &v, 4); }
    else if (dt == TS_I64) memcpy(dst, &acc, 8);
    else { uint8_t v = (uint8_t)acc; memcpy(dst, &v, 1); }
  }
}

/* ---- device threads ---- */

/* A layout: the group of every device (groups partition the devices). */
typedef struct {
  const char *name;
  int n;            /* group size */
  int group[8][8];  /* group[d] = device d's group, in rank order */
} layout;

typedef struct {
  ts_comm *c;
  int N;
  const layout *L;
  int fails[8];
  char msg[8][256];
  _Atomic int counters[8]; /* barrier test: arrivals per group leader */
  unsigned jitter;         /* max random sleep in us before calls (0 = none) */
  uint64_t out_hash[8][2]; /* determinism test */
} ctx;

typedef struct {
  ctx *x;
  int dev;
  void (*fn)(ctx *, int);
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  a->fn(a->x, a->dev);
  return NULL;
}

static void run_devices(ctx *x, void (*fn)(ctx *, int)) {
  pthread_t t[8];
  thread_arg a[8];
  for (int d = 0; d < x->N; d++) {
    a[d] = (thread_arg){x, d, fn};
    pthread_create(&t[d], NULL, thread_main, &a[d]);
  }
  for (int d = 0; d < x->N; d++) pthread_join(t[d], NULL);
}

#define FAIL(x, dev, ...)                                                  \
  do {                                                                     \
    if ((x)->fails[dev]++ == 0) snprintf((x)->msg[dev], 256, __VA_ARGS__); \
  } while (0)

static const ts_dtype DTYPES[] = {TS_F32, TS_F64, TS_BF16, TS_F16, TS_I32, TS_I64, TS_U8, TS_BOOL};
static const ts_reduce_kind OPS[] = {TS_REDUCE_SUM, TS_REDUCE_MAX, TS_REDUCE_MIN, TS_REDUCE_MEAN};
static const char *OP_NAMES[] = {"sum", "max", "min", "mean"};

static bool op_ok(ts_dtype dt, ts_reduce_kind op) {
  return dt != TS_BOOL || op == TS_REDUCE_MAX || op == TS_REDUCE_MIN;
}

static void jitter(ctx *x, unsigned *state) {
  if (!x->jitter) return;
  *state = *state * 1103515245u + 12345u;
  usleep((*state >> 8) % x->jitter);
}

/* Every collective over the device's group, checked against the reference. */
static void device_suite(ctx *x, int dev) {
  const int *g = x->L->group[dev];
  int n = x->L->n, r = 0;
  while (g[r] != dev) r++;
  uint64_t k = 0; /* case id: identical sequence on every device */
  unsigned char want[8];

  /* empty messages with NULL buffers are fine */
  if (comm_all_reduce(x->c, dev, g, n, TS_F32, TS_REDUCE_SUM, NULL, NULL, 0) ||
      comm_reduce_scatter(x->c, dev, g, n, TS_F32, TS_REDUCE_SUM, NULL, NULL, 3, 0) ||
      comm_all_gather(x->c, dev, g, n, NULL, NULL, 3, 0) ||
      comm_all_to_all(x->c, dev, g, n, NULL, NULL, 0, 8))
    FAIL(x, dev, "empty collective failed: %s", ts_last_error());

  /* all_reduce: every dtype/op, odd counts, in != out and in == out; one large
   * case takes the non-temporal path (>= 1 MiB per device chunk). */
  static const int64_t counts[] = {1, 7, 1037, 5 * 1024 + 3};
  for (size_t di = 0; di < sizeof DTYPES / sizeof *DTYPES; di++) {
    ts_dtype dt = DTYPES[di];
    size_t es = ts_dtype_size(dt);
    for (int oi = 0; oi < 4; oi++) {
      if (!op_ok(dt, OPS[oi])) continue;
      for (size_t ci = 0; ci < 5; ci++) {
        int64_t count = ci < 4 ? counts[ci] : (dt == TS_F32 && oi == 0 && x->N <= 4 && strcmp(x->L->name, "all") == 0)
                                                  ? (1 << 18) * x->N + 5 : 0;
        if (ci == 4 && count == 0) continue;
        for (int inplace = 0; inplace < 2; inplace++, k++) {
          unsigned char *in = malloc((size_t)count * es), *out = malloc((size_t)count * es);
          for (int64_t i = 0; i < count; i++) gen(dt, k, dev, i, in + i * es);
          void *dst = inplace ? in : out;
          if (comm_all_reduce(x->c, dev, g, n, dt, OPS[oi], in, dst, count)) {
            FAIL(x, dev, "all_reduce failed: %s", ts_last_error());
          } else {
            /* the large case checks a sample: every 61st element and both ends */
            int64_t step = count > 100000 ? 61 : 1;
            for (int64_t i = 0; i < count; i += (i < 4096 || i > count - 4096) ? 1 : step) {
              ref_elem(dt, OPS[oi], k, g, n, i, want);
              if (memcmp((unsigned char *)dst + i * es, want, es)) {
                FAIL(x, dev, "all_reduce %s %s count %lld inplace %d: element %lld differs",
                     ts_dtype_name(dt), OP_NAMES[oi], (long long)count, inplace, (long long)i);
                break;
              }
            }
          }
          free(in);
          free(out);
        }
      }
    }
  }

  /* reduce_scatter: (outer, n, chunk) -> (outer, chunk); also out = in. */
  static const int64_t chunks[] = {1, 37, 301};
  for (size_t di = 0; di < sizeof DTYPES / sizeof *DTYPES; di++) {
    ts_dtype dt = DTYPES[di];
    size_t es = ts_dtype_size(dt);
    for (int oi = 0; oi < 4; oi++) {
      if (!op_ok(dt, OPS[oi])) continue;
      for (int64_t outer = 1; outer <= 3; outer += 2)
        for (size_t ci = 0; ci < 3; ci++)
          for (int inplace = 0; inplace < (ci == 1 ? 2 : 1); inplace++, k++) {
            int64_t chunk = chunks[ci], total = outer * n * chunk;
            unsigned char *in = malloc((size_t)total * es), *out = malloc((size_t)(outer * chunk) * es);
            for (int64_t i = 0; i < total; i++) gen(dt, k, dev, i, in + i * es);
            unsigned char *dst = inplace ? in : out;
            if (comm_reduce_scatter(x->c, dev, g, n, dt, OPS[oi], in, dst, outer, chunk)) {
              FAIL(x, dev, "reduce_scatter failed: %s", ts_last_error());
            } else {
              for (int64_t o = 0; o < outer; o++)
                for (int64_t j = 0; j < chunk; j++) {
                  ref_elem(dt, OPS[oi], k, g, n, (o * n + r) * chunk + j, want);
                  if (memcmp(dst + (o * chunk + j) * es, want, es)) {
                    FAIL(x, dev, "reduce_scatter %s %s outer %lld chunk %lld inplace %d: (%lld, %lld) differs",
                         ts_dtype_name(dt), OP_NAMES[oi], (long long)outer, (long long)chunk,
                         inplace, (long long)o, (long long)j);
                    o = outer;
                    break;
                  }
                }
            }
            free(in);
            free(out);
          }
    }
  }

  /* all_gather: in (outer, cb) -> out (outer, n, cb); in place at out[0, r]. */
  static const size_t cbs[] = {1, 13, 4096};
  for (int64_t outer = 1; outer <= 3; outer += 2)
    for (size_t ci = 0; ci < 3; ci++)
      for (int inplace = 0; inplace < (outer == 1 ? 2 : 1); inplace++, k++) {
        size_t cb = cbs[ci];
        unsigned char *out = malloc((size_t)outer * n * cb), *own = malloc((size_t)outer * cb);
        unsigned char *in = inplace ? out + (size_t)r * cb : own;
        for (size_t i = 0; i < (size_t)outer * cb; i++) gen(TS_U8, k, dev, (int64_t)i, in + i);
        if (comm_all_gather(x->c, dev, g, n, in, out, outer, cb)) {
          FAIL(x, dev, "all_gather failed: %s", ts_last_error());
        } else {
          for (int64_t o = 0; o < outer; o++)
            for (int m = 0; m < n; m++)
              for (size_t j = 0; j < cb; j++) {
                gen(TS_U8, k, g[m], (int64_t)(o * (int64_t)cb + (int64_t)j), want);
                if (out[((size_t)o * n + m) * cb + j] != want[0]) {
                  FAIL(x, dev, "all_gather outer %lld cb %zu inplace %d: out[%lld, %d, %zu] differs",
                       (long long)outer, cb, inplace, (long long)o, m, j);
                  j = cb, m = n, o = outer;
                }
              }
        }
        free(out);
        free(own);
      }

  /* all_to_all: out[o, m, :] = in_m[o, r, :]; also in place. */
  for (int64_t outer = 1; outer <= 2; outer++)
    for (size_t cb = 3; cb <= 103; cb += 100)
      for (int inplace = 0; inplace < 2; inplace++, k++) {
        size_t bytes = (size_t)outer * n * cb;
        unsigned char *in = malloc(bytes), *out = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) gen(TS_U8, k, dev, (int64_t)i, in + i);
        unsigned char *dst = inplace ? in : out;
        if (comm_all_to_all(x->c, dev, g, n, in, dst, outer, cb)) {
          FAIL(x, dev, "all_to_all failed: %s", ts_last_error());
        } else {
          for (int64_t o = 0; o < outer; o++)
            for (int m = 0; m < n; m++)
              for (size_t j = 0; j < cb; j++) {
                gen(TS_U8, k, g[m], (int64_t)(((size_t)o * n + r) * cb + j), want);
                if (dst[((size_t)o * n + m) * cb + j] != want[0]) {
                  FAIL(x, dev, "all_to_all outer %lld cb %zu inplace %d: out[%lld, %d, %zu] differs",
                       (long long)outer, cb, inplace, (long long)o, m, j);
                  j = cb, m = n, o = outer;
                }
              }
        }
        free(in);
        free(out);
      }

  /* barrier: after round t every member has counted its arrival. */
  for (int t = 1; t <= 3; t++) {
    atomic_fetch_add(&x->counters[g[0]], 1);
    if (comm_barrier(x->c, dev, g, n)) FAIL(x, dev, "barrier failed: %s", ts_last_error());
    int seen = atomic_load(&x->counters[g[0]]);
    if (seen < t * n) FAIL(x, dev, "barrier round %d passed with %d of %d arrivals", t, seen, t * n);
    /* a second barrier so that nobody starts round t+1 while a peer still reads */
    if (comm_barrier(x->c, dev, g, n)) FAIL(x, dev, "barrier failed: %s", ts_last_error());
  }
}

/* Permute over all devices: a ring, a chain where device 0 receives nothing,
 * a self pair, and in == out. */
static void device_permute(ctx *x, int dev) {
  int N = x->N;
  int pairs[16];
  if (comm_permute(x->c, dev, NULL, 0, NULL, NULL, 0))
    FAIL(x, dev, "empty permute failed: %s", ts_last_error());
  size_t bytes = 1000 + 3;
  for (int variant = 0; variant < 4; variant++) {
    int np = 0, source = -1;
    for (int d = 0; d < N; d++) {
      int t = variant == 0 || variant == 3 ? (d + 1) % N : variant == 1 ? d + 1 : d;
      if (variant == 1 && t >= N) continue;
      pairs[2 * np] = d, pairs[2 * np + 1] = t, np++;
      if (t == dev) source = d;
    }
    unsigned char *in = malloc(bytes), *out = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) gen(TS_U8, 1000 + (uint64_t)variant, dev, (int64_t)i, in + i);
    unsigned char *dst = variant == 3 ? in : out;
    if (comm_permute(x->c, dev, pairs, np, in, dst, bytes)) {
      FAIL(x, dev, "permute failed: %s", ts_last_error());
    } else {
      for (size_t i = 0; i < bytes; i++) {
        unsigned char want = 0;
        if (source >= 0) gen(TS_U8, 1000 + (uint64_t)variant, source, (int64_t)i, &want);
        if (dst[i] != want) {
          FAIL(x, dev, "permute variant %d: byte %zu is %d, want %d (source %d)", variant, i,
               dst[i], want, source);
          break;
        }
      }
    }
    free(in);
    free(out);
  }
}

/* Determinism: two rounds of an f32 all-reduce with random delays before each
 * call; every member of every round must produce the same bits. */
static void device_determinism(ctx *x, int dev) {
  const int *g = x->L->group[dev];
  int n = x->L->n;
  int64_t count = 100003;
  float *in = malloc((size_t)count * 4), *out = malloc((size_t)count * 4);
  unsigned state = (unsigned)(dev * 7919 + 1);
  for (int round = 0; round < 2; round++) {
    for (int64_t i = 0; i < count; i++) gen(TS_F32, 2000, dev, i, in + i);
    jitter(x, &state);
    if (comm_all_reduce(x->c, dev, g, n, TS_F32, TS_REDUCE_SUM, in, out, count)) {
      FAIL(x, dev, "all_reduce failed: %s", ts_last_error());
      break;
    }
    uint64_t h = 0;
    for (int64_t i = 0; i < count; i++) {
      uint32_t u;
      memcpy(&u, out + i, 4);
      h = mix(h ^ u);
    }
    x->out_hash[dev][round] = h;
  }
  free(in);
  free(out);
}

/* ---- layouts ---- */

static int make_layouts(int N, layout *L) {
  int nl = 0;
  L[nl] = (layout){.name = "all", .n = N};
  for (int d = 0; d < N; d++)
    for (int i = 0; i < N; i++) L[nl].group[d][i] = i;
  nl++;
  if (N >= 3) { /* rank order differs from device order */
    L[nl] = (layout){.name = "all reversed", .n = N};
    for (int d = 0; d < N; d++)
      for (int i = 0; i < N; i++) L[nl].group[d][i] = N - 1 - i;
    nl++;
  }
  if (N == 4 || N == 8) { /* a (2, N/2) mesh, ids row-major */
    int R = 2, C = N / 2;
    L[nl] = (layout){.name = "mesh rows", .n = C};
    L[nl + 1] = (layout){.name = "mesh columns", .n = R};
    for (int d = 0; d < N; d++) {
      for (int j = 0; j < C; j++) L[nl].group[d][j] = (d / C) * C + j;
      for (int i = 0; i < R; i++) L[nl + 1].group[d][i] = i * C + d % C;
    }
    nl += 2;
  }
  if (N == 8) { /* a (2, 2, 2) mesh: the group along axis a varies bit (2 - a) */
    static const char *names[] = {"2x2x2 axis 0", "2x2x2 axis 1", "2x2x2 axis 2"};
    for (int a = 0; a < 3; a++, nl++) {
      L[nl] = (layout){.name = names[a], .n = 2};
      int bit = 1 << (2 - a);
      for (int d = 0; d < N; d++) {
        L[nl].group[d][0] = d & ~bit;
        L[nl].group[d][1] = d | bit;
      }
    }
  }
  if (N >= 2) { /* singleton groups */
    L[nl] = (layout){.name = "singletons", .n = 1};
    for (int d = 0; d < N; d++) L[nl].group[d][0] = d;
    nl++;
  }
  return nl;
}

static void check_fails(ctx *x, const char *what) {
  for (int d = 0; d < x->N; d++)
    CHECK(x->fails[d] == 0, "%d devices, %s, layout %s, device %d: %d failures, first: %s", x->N,
          what, x->L->name, d, x->fails[d], x->msg[d]);
  memset(x->fails, 0, sizeof x->fails);
}

/* ---- timeout and errors ---- */

typedef struct {
  ts_comm *c;
  int dev;
  int rc;
  double seconds;
  char msg[512];
} timeout_arg;

static void *timeout_thread(void *p) {
  timeout_arg *a = p;
  int group[3] = {0, 1, 2};
  float buf[16] = {0};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  a->rc = comm_all_reduce(a->c, a->dev, group, 3, TS_F32, TS_REDUCE_SUM, buf, buf, 16);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  a->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  snprintf(a->msg, sizeof a->msg, "%s", ts_last_error());
  return NULL;
}

static void test_timeout(void) {
  ts_comm *c = comm_new(3);
  comm_set_timeout_ms(c, 100);
  pthread_t t[2];
  timeout_arg a[2];
  for (int d = 0; d < 2; d++) { /* device 2 never calls */
    a[d] = (timeout_arg){.c = c, .dev = d};
    pthread_create(&t[d], NULL, timeout_thread, &a[d]);
  }
  for (int d = 0; d < 2; d++) pthread_join(t[d], NULL);
  for (int d = 0; d < 2; d++) {
    CHECK(a[d].rc == -1, "device %d: all_reduce returned %d without device 2", d, a[d].rc);
    CHECK(a[d].seconds < 2.0, "device %d waited %.2f s with a 100 ms timeout", d, a[d].seconds);
    CHECK(strstr(a[d].msg, "all_reduce") && strstr(a[d].msg, "device(s) 2"),
          "device %d: message \"%s\" should name all_reduce and device 2", d, a[d].msg);
  }
  comm_free(c);
}

static void test_errors(void) {
  ts_comm *c = comm_new(2);
  float buf[4] = {0};
  int bad[2] = {0, 5}, dup[2] = {0, 0}, other[1] = {1};
  CHECK(comm_new(0) == NULL && strstr(ts_last_error(), "n_devices is 0"), "%s", ts_last_error());
  CHECK(comm_size(c) == 2, "size %d", comm_size(c));
  CHECK(comm_all_reduce(c, 0, bad, 2, TS_F32, TS_REDUCE_SUM, buf, buf, 4) == -1 &&
            strstr(ts_last_error(), "= 5"), "%s", ts_last_error());
  CHECK(comm_all_reduce(c, 0, dup, 2, TS_F32, TS_REDUCE_SUM, buf, buf, 4) == -1 &&
            strstr(ts_last_error(), "twice"), "%s", ts_last_error());
  CHECK(comm_all_reduce(c, 0, other, 1, TS_F32, TS_REDUCE_SUM, buf, buf, 4) == -1 &&
            strstr(ts_last_error(), "not in its group"), "%s", ts_last_error());
  CHECK(comm_all_reduce(c, 2, other, 1, TS_F32, TS_REDUCE_SUM, buf, buf, 4) == -1 &&
            strstr(ts_last_error(), "device 2 out of range"), "%s", ts_last_error());
  CHECK(comm_all_reduce(c, 1, other, 1, TS_BOOL, TS_REDUCE_SUM, buf, buf, 4) == -1 &&
            strstr(ts_last_error(), "bool"), "%s", ts_last_error());
  int pairs[4] = {0, 1, 1, 1};
  CHECK(comm_permute(c, 0, pairs, 2, buf, buf, 16) == -1 &&
            strstr(ts_last_error(), "target of two pairs"), "%s", ts_last_error());
  comm_free(c);
  comm_free(NULL);
}

/* NaN propagates through max and min (like jnp.max), in either member. */
static void device_nan(ctx *x, int dev) {
  int g[2] = {0, 1};
  float in[4] = {1, 2, 3, 4}, out[4];
  if (dev == 0) in[1] = NAN;
  if (dev == 1) in[2] = NAN;
  for (int oi = 1; oi <= 2; oi++) {
    if (comm_all_reduce(x->c, dev, g, 2, TS_F32, OPS[oi], in, out, 4)) {
      FAIL(x, dev, "all_reduce failed: %s", ts_last_error());
      continue;
    }
    if (!isnan(out[1]) || !isnan(out[2]) || isnan(out[0]) || isnan(out[3]))
      FAIL(x, dev, "%s with NaN: got %g %g %g %g", OP_NAMES[oi], out[0], out[1], out[2], out[3]);
  }
}

int main(void) {
  ts_test_init("test_comm", 20261202);
  static const int sizes[] = {1, 2, 3, 4, 8};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    int N = sizes[si];
    layout L[8];
    int nl = make_layouts(N, L);
    for (int li = 0; li < nl; li++) {
      ctx *x = calloc(1, sizeof *x);
      x->N = N;
      x->L = &L[li];
      x->c = comm_new(N);
      comm_set_timeout_ms(x->c, 60000); /* a hang fails the test instead of the CI */
      run_devices(x, device_suite);
      check_fails(x, "collectives");
      if (li == 0) {
        run_devices(x, device_permute);
        check_fails(x, "permute");
      }
      /* determinism, with random delays before each call */
      x->jitter = 300;
      run_devices(x, device_determinism);
      check_fails(x, "determinism");
      for (int d = 0; d < N; d++) {
        const int *g = L[li].group[d];
        CHECK(x->out_hash[d][0] == x->out_hash[d][1] && x->out_hash[d][0] == x->out_hash[g[0]][0],
              "%d devices, layout %s: device %d's all-reduce bits differ between rounds or from "
              "member %d", N, L[li].name, d, g[0]);
      }
      comm_free(x->c);
      free(x);
    }
  }
  {
    ctx *x = calloc(1, sizeof *x);
    layout L[8];
    make_layouts(2, L);
    x->N = 2;
    x->L = &L[0];
    x->c = comm_new(2);
    run_devices(x, device_nan);
    check_fails(x, "nan");
    comm_free(x->c);
    free(x);
  }
  test_errors();
  test_timeout();
  return ts_test_finish();
}
