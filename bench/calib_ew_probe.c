/* calib_ew_probe.c — the calibration's elementwise probe (tools/devfile.c:
 * relu(x + r) and its gradient, zero-filled f32 inputs, 1 thread, 1 device)
 * alone in a program, at a chosen shape: each run's wall and CPU ms (issue 16:
 * inside `tessel plan --calibrate` the (4096,2048) probe took 76-80 ms of CPU
 * per run against 7 ms for (3072,2048); this program gave 9-17 ms for
 * (4096,2048), so the calibration's probes avoid powers of two; unexplained).
 *
 *   usage: bench_calib_ew_probe ROWS COLS [RUNS (12)]
 * Prints "wall/cpu" ms per run, the first (page faults of the outputs) too. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h" /* now_s */
#include "tessel/tessel.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_calib_ew_probe ROWS COLS [RUNS]\n");
    return 2;
  }
  int64_t sh[2] = {atoll(argv[1]), atoll(argv[2])};
  int runs = argc > 3 ? atoi(argv[3]) : 12;
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
  for (int k = 0; k < runs; k++) {
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
