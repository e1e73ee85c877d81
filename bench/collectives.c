/* collectives.c — benchmark of the in-process collectives (src/comm): f32
 * all-reduce (SUM), all-gather and reduce-scatter for message sizes 1 KiB ..
 * 256 MiB on 2, 4 and 8 device threads, next to a 2-thread memcpy of the same
 * size measured in the same run. Not a test: it prints a table.
 *
 *   bench_collectives [-m MIN] [-M MAX] [-d 2,4,8] [-r REPS]
 *     sizes in bytes with an optional K/M/G suffix (powers of 4 from MIN);
 *     REPS caps the repetitions (median reported; fewer for large sizes).
 *
 * Size = the full tensor per device (nccl-tests convention): all-reduce in and
 * out S bytes; all-gather out S (in S/n); reduce-scatter in S (out S/n).
 * algbw = S / time; busbw = algbw * 2(n-1)/n (all-reduce) or (n-1)/n. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h" /* now_s, cmp_double, median */

#include "comm/comm.h"

enum { MAX_DEV = 8, N_OPS = 3 };

static double cpu_s(void) { /* this thread's CPU time */
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int reps_for(size_t bytes, int max_reps) {
  int r = (int)((size_t)1024 * 1024 * 1024 / (bytes + 1));
  if (r > max_reps) r = max_reps;
  return r < 5 ? 5 : r;
}

/* ---- the reference: 2 threads copying S/2 bytes each ---- */

typedef struct {
  pthread_barrier_t *bar;
  char *dst, *src;
  size_t bytes;
  int reps;
  double *times; /* (reps), written by thread 0 */
  int id;
} copy_arg;

static void *copy_main(void *p) {
  copy_arg *a = p;
  memset(a->dst, 1, a->bytes); /* fault the pages in before timing */
  memset(a->src, 2, a->bytes);
  for (int i = -1; i < a->reps; i++) {
    /* both threads start each repetition together */
    pthread_barrier_wait(a->bar);
    double t0 = now_s();
    memcpy(a->dst, a->src, a->bytes);
    /* the repetition ends when both finished */
    pthread_barrier_wait(a->bar);
    if (a->id == 0 && i >= 0) a->times[i] = now_s() - t0;
  }
  return NULL;
}

static double copy_time(size_t bytes, int reps) {
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  double *times = calloc((size_t)reps, sizeof *times);
  size_t half = bytes / 2 ? bytes / 2 : 1;
  copy_arg a[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    a[i] = (copy_arg){&bar, malloc(half), malloc(half), half, reps, times, i};
    pthread_create(&t[i], NULL, copy_main, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) free(a[i].dst), free(a[i].src);
  pthread_barrier_destroy(&bar);
  double m = median(times, reps);
  free(times);
  return m;
}

/* ---- device threads ---- */

typedef struct {
  ts_comm *c;
  int n;
  const size_t *sizes;
  int n_sizes, max_reps;
  float *in[MAX_DEV], *out[MAX_DEV]; /* (max size / 4) each */
  double times[N_OPS][64];            /* [op][size] median seconds, from device 0 */
  double cpu[N_OPS][64];              /* [op][size] median CPU seconds of device 0's thread */
  int failed;
} bench;

typedef struct {
  bench *b;
  int dev;
} dev_arg;

static int run_op(bench *b, int dev, const int *group, int op, size_t bytes) {
  int n = b->n;
  int64_t count = (int64_t)(bytes / 4);
  switch (op) {
  case 0:
    return comm_all_reduce(b->c, dev, group, n, TS_F32, TS_REDUCE_SUM, b->in[dev], b->out[dev],
                              count);
  case 1:
    return comm_all_gather(b->c, dev, group, n, b->in[dev], b->out[dev], 1,
                              (size_t)(count / n) * 4);
  default:
    return comm_reduce_scatter(b->c, dev, group, n, TS_F32, TS_REDUCE_SUM, b->in[dev],
                                  b->out[dev], 1, count / n);
  }
}

static void *dev_main(void *p) {
  dev_arg *a = p;
  bench *b = a->b;
  int group[MAX_DEV];
  for (int i = 0; i < b->n; i++) group[i] = i;
  double *times = malloc(sizeof(double) * (size_t)b->max_reps);
  double *cpu = malloc(sizeof(double) * (size_t)b->max_reps);
  for (int si = 0; si < b->n_sizes; si++) {
    for (int op = 0; op < N_OPS; op++) {
      int reps = reps_for(b->sizes[si], b->max_reps);
      for (int i = -1; i < reps; i++) { /* i = -1: warm-up */
        /* start every repetition together */
        if (comm_barrier(b->c, a->dev, group, b->n)) goto fail;
        double t0 = now_s(), c0 = cpu_s();
        if (run_op(b, a->dev, group, op, b->sizes[si])) goto fail;
        /* the repetition ends when the last device finished */
        if (comm_barrier(b->c, a->dev, group, b->n)) goto fail;
        if (i >= 0) times[i] = now_s() - t0, cpu[i] = cpu_s() - c0;
      }
      if (a->dev == 0) b->times[op][si] = median(times, reps), b->cpu[op][si] = median(cpu, reps);
    }
  }
  free(times);
  free(cpu);
  return NULL;
fail:
  fprintf(stderr, "device %d: %s\n", a->dev, ts_last_error());
  b->failed = 1;
  free(times);
  free(cpu);
  return NULL;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static void print_size(char *buf, size_t n, size_t bytes) {
  if (bytes >= ((size_t)1 << 20)) snprintf(buf, n, "%zu MiB", bytes >> 20);
  else snprintf(buf, n, "%zu KiB", bytes >> 10);
}

int main(int argc, char **argv) {
  size_t min_size = 1024, max_size = (size_t)256 << 20;
  int devices[MAX_DEV] = {2, 4, 8}, n_devices = 3, max_reps = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-m")) min_size = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-M")) max_size = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-r")) max_reps = atoi(argv[i + 1]) < 1 ? 1 : atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-d")) {
      n_devices = 0;
      for (char *s = argv[i + 1]; *s && n_devices < MAX_DEV; s++) {
        int d = (int)strtol(s, &s, 10);
        if (d >= 1 && d <= MAX_DEV) devices[n_devices++] = d;
        if (!*s) break;
      }
    } else {
      fprintf(stderr, "usage: %s [-m MIN] [-M MAX] [-d 2,4,8] [-r REPS]\n", argv[0]);
      return 2;
    }
  }
  if (argc % 2 == 0) {
    fprintf(stderr, "usage: %s [-m MIN] [-M MAX] [-d 2,4,8] [-r REPS]\n", argv[0]);
    return 2;
  }
  size_t sizes[64];
  int n_sizes = 0;
  for (size_t s = min_size; s <= max_size && n_sizes < 64; s *= 4) sizes[n_sizes++] = s;

  printf("collectives: f32, SUM; time = median over repetitions (ms); bw in GB/s (1e9 B/s)\n");
  printf("memcpy = 2 threads copying size/2 each (same run)\n\n");
  double copy_ms[64];
  for (int si = 0; si < n_sizes; si++)
    copy_ms[si] = 1e3 * copy_time(sizes[si], reps_for(sizes[si], max_reps));

  double ar64 = -1, ar64_cpu = -1;
  for (int di = 0; di < n_devices; di++) {
    int n = devices[di];
    bench *b = calloc(1, sizeof *b);
    b->c = comm_new(n);
    b->n = n;
    b->sizes = sizes;
    b->n_sizes = n_sizes;
    b->max_reps = max_reps;
    comm_set_timeout_ms(b->c, 600000);
    for (int d = 0; d < n; d++) {
      b->in[d] = malloc(max_size);
      b->out[d] = malloc(max_size);
      if (!b->in[d] || !b->out[d]) {
        fprintf(stderr, "out of memory for %d x 2 x %zu bytes\n", n, max_size);
        return 1;
      }
      for (size_t i = 0; i < max_size / 4; i++) b->in[d][i] = 1.0f + (float)(i % 7);
      memset(b->out[d], 0, max_size);
    }
    pthread_t t[MAX_DEV];
    dev_arg a[MAX_DEV];
    for (int d = 0; d < n; d++) {
      a[d] = (dev_arg){b, d};
      pthread_create(&t[d], NULL, dev_main, &a[d]);
    }
    for (int d = 0; d < n; d++) pthread_join(t[d], NULL);
    if (b->failed) return 1;

    printf("%d devices\n", n);
    printf("%9s | %-25s | %-25s | %-25s | %-16s\n", "size", "all-reduce ms algbw busbw",
           "all-gather ms algbw busbw", "reduce-scatter ms alg bus", "memcpy ms GB/s");
    for (int si = 0; si < n_sizes; si++) {
      char sz[32];
      print_size(sz, sizeof sz, sizes[si]);
      printf("%9s |", sz);
      for (int op = 0; op < N_OPS; op++) {
        double t = b->times[op][si], alg = (double)sizes[si] / t / 1e9;
        double bus = alg * (op == 0 ? 2.0 : 1.0) * (n - 1) / n;
        printf(" %9.3f %6.2f %6.2f    |", 1e3 * t, alg, bus);
        if (op == 0 && n == 2 && sizes[si] == ((size_t)64 << 20))
          ar64 = 1e3 * t, ar64_cpu = 1e3 * b->cpu[op][si];
      }
      printf(" %8.3f %6.2f\n", copy_ms[si], (double)sizes[si] / copy_ms[si] / 1e6);
    }
    printf("\n");
    for (int d = 0; d < n; d++) free(b->in[d]), free(b->out[d]);
    comm_free(b->c);
    free(b);
  }
  for (int si = 0; si < n_sizes; si++)
    if (sizes[si] == ((size_t)64 << 20) && ar64 >= 0)
      printf("64 MiB f32 all-reduce on 2 devices: %.2f ms (target <= 12 ms; 2-thread memcpy of "
             "64 MiB: %.2f ms, ratio %.2f); CPU time of a device thread: %.2f ms%s\n",
             ar64, copy_ms[si], ar64 / copy_ms[si], ar64_cpu,
             ar64 > 1.5 * ar64_cpu ? " (wall >> CPU: the device threads waited for a core; "
                                     "other load on the machine?)" : "");
  return 0;
}
