/* calib_ew_probe.c — the calibration's elementwise probe (tools/devfile.c:
 * relu(x + r) and its gradient, zero-filled f32 inputs, 1 thread, 1 device)
 * alone in a program, at a chosen shape: each run's wall and CPU ms (issue 16:
 * inside `tessel plan --calibrate` the (4096,2048) probe took 76-80 ms of CPU
 * per run against 7 ms for (3072,2048); this program gave 9-17 ms for
 * (4096,2048), so the calibration's probes avoid powers of two).
 *
 *   usage: bench_calib_ew_probe ROWS COLS [RUNS (12)] [--cold K] [--fill]
 * Prints "wall/cpu" ms per run, the first (page faults of the outputs) too.
 *
 * --cold K: before run K (from 1), every private anonymous mapping of 2 MiB
 * or more gets MADV_COLD, which clears its pages' accessed bits ("|" marks
 * the point). That is what this host's DAMON does a page at a time (kdamond,
 * paddr operations: every 0.5 s it clears the accessed bit of one sampled page
 * per region, the whole 2 MiB of a transparent huge page). With zero-filled
 * inputs ReLU's gradient, select(x + r > 0, dy, 0), reads dy only through
 * AVX-512 loads whose mask is all zero (fused_mask.c: the compiler folds the
 * load into a masked vblendmps); such a load does not set the accessed bit,
 * so every one of them walks the page tables again, for the rest of the
 * process: the "slow mode" of the calibration's probe (stop 33: 10x on
 * huge-page blocks, where one sample clears 2 MiB). --fill writes nonzero
 * inputs (every mask lane set: plain accesses, which set the bit again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* madvise, MADV_COLD */

#include "bench_util.h" /* now_s */
#include "tessel/tessel.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* MADV_COLD over the process's private anonymous mappings of >= 2 MiB (the
 * device blocks): their accessed bits cleared. Returns the bytes advised. */
static size_t cold_all(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  size_t total = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perm[8] = {0}, path[256] = {0};
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perm, path) < 3) continue;
    if (strcmp(perm, "rw-p") != 0 || (path[0] && strcmp(path, "[heap]") != 0) || hi - lo < (2ul << 20)) continue;
    if (madvise((void *)lo, hi - lo, MADV_COLD) == 0) total += hi - lo;
  }
  if (f) fclose(f);
  return total;
}

/* Writes v + (i mod 7) into every element of f32 buffer b of n elements. */
static int fill(ts_buffer *b, size_t n, float v) {
  float *h = malloc(n * sizeof *h);
  if (!h) return -1;
  for (size_t i = 0; i < n; i++) h[i] = v + (float)(i % 7);
  int rc = ts_buffer_write(b, h, n * sizeof *h);
  free(h);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_calib_ew_probe ROWS COLS [RUNS] [--cold K] [--fill]\n");
    return 2;
  }
  int64_t sh[2] = {atoll(argv[1]), atoll(argv[2])};
  int runs = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : 12, cold = 0, nonzero = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--cold") && i + 1 < argc) cold = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fill")) nonzero = 1;
  }
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  ts_graph *g = ts_graph_new();
  if (!c || !g) return 1;
  ts_tensor x = ts_input(g, "x", TS_F32, 2, sh), r = ts_input(g, "r", TS_F32, 2, sh);
  ts_tensor dy = ts_input(g, "dy", TS_F32, 2, sh), y = ts_relu(g, ts_add(g, x, r)), gx = TS_NONE;
  if (ts_vjp(g, 1, &y, &dy, 1, &x, &gx) < 0) return 1;
  ts_graph_add_output(g, y), ts_graph_add_output(g, gx);
  ts_executable *e = ts_compile(c, g, &(ts_compile_options){0});
  ts_buffer *in[3] = {0}, *out[2] = {0};
  for (int i = 0; i < 3 && e; i++) in[i] = ts_buffer_new(c, TS_F32, 2, sh); /* zero-filled */
  if (!e || !in[0] || !in[1] || !in[2]) {
    fprintf(stderr, "bench_calib_ew_probe: %s\n", ts_last_error());
    return 1;
  }
  for (int i = 0; i < 3 && nonzero; i++)
    if (fill(in[i], (size_t)(sh[0] * sh[1]), 0.25f) < 0) return 1;
  for (int k = 0; k < runs; k++) {
    if (cold && k + 1 == cold) printf("| (%zu MiB cold) ", cold_all() >> 20);
    double w0 = now_s(), c0 = cpu_s();
    if (ts_execute(e, in, out) < 0) return 1;
    printf("%.2f/%.2f ", 1e3 * (now_s() - w0), 1e3 * (cpu_s() - c0));
  }
  printf("\n");
  for (int i = 0; i < 3; i++) ts_buffer_free(in[i]);
  for (int i = 0; i < 2; i++) ts_buffer_free(out[i]);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_client_free(c);
  return 0;
}
