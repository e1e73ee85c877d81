/* ew_kernels.c — the kernels the built-in models price elementwise (issue 16:
 * is kernel.elementwise, one add + ReLU and its gradient, their rate?), each
 * its own program of (128,16,28,28) f32 (a ResNet-20 stage-1 activation,
 * 6.4 MB): ReLU's gradient select(y > 0, dy, 0), of a sum of two gradients,
 * dropout's mask (u >= 0.25 to bool) and apply (select(mask, x * 4/3, 0)), a
 * residual add, and the calibration's forward add + ReLU. Zero-filled inputs,
 * as the calibration's; on 1 and 2 threads, alternated `rounds` times, each
 * the least of 30 runs (operands in the L3 cache after the first run: an
 * upper bound on what a step's kernels see).
 *
 *   usage: bench_ew_kernels [rounds (3)]
 * Prints per kernel: ms and bytes/s on 1 thread, ms on 2, their efficiency. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h" /* now_s */
#include "tessel/tessel.h"

static const int64_t SH[4] = {128, 16, 28, 28};
enum { RELU_GRAD, RELU_GRAD_SUM, DROPOUT_MASK, DROPOUT_APPLY, ADD, ADD_RELU, KERNELS };
static const char *const NAMES[KERNELS] = {"relu_grad", "relu_grad_sum", "dropout_mask", "dropout_apply", "add",
                                           "add_relu"};
/* f32 tensors read + written per element (a bool: 1/4) */
static const double TENSORS[KERNELS] = {3, 4, 1.25, 2.25, 3, 3};

static ts_graph *program(int k) {
  ts_graph *g = ts_graph_new();
  ts_tensor y = ts_input(g, "y", TS_F32, 4, SH), a = ts_input(g, "a", TS_F32, 4, SH);
  ts_tensor b = ts_input(g, "b", TS_F32, 4, SH), zero = ts_full(g, TS_F32, 4, SH, 0), out = TS_NONE;
  switch (k) {
  case RELU_GRAD: out = ts_select(g, ts_compare(g, y, zero, TS_CMP_GT), a, zero); break;
  case RELU_GRAD_SUM: out = ts_select(g, ts_compare(g, y, zero, TS_CMP_GT), ts_add(g, a, b), zero); break;
  case DROPOUT_MASK: out = ts_compare(g, y, ts_full(g, TS_F32, 4, SH, 0.25), TS_CMP_GE); break;
  case DROPOUT_APPLY: {
    ts_tensor m = ts_input(g, "m", TS_BOOL, 4, SH);
    out = ts_select(g, m, ts_mul(g, a, ts_full(g, TS_F32, 4, SH, 4.0 / 3)), zero);
    break;
  }
  case ADD: out = ts_add(g, a, y); break;
  case ADD_RELU: out = ts_relu(g, ts_add(g, a, y)); break;
  }
  ts_graph_add_output(g, out);
  return g;
}

/* The least of 30 runs of g on c (the first, allocating the output, apart). */
static double least(ts_client *c, ts_graph *g) {
  ts_executable *e = ts_compile(c, g, NULL);
  if (!e) {
    fprintf(stderr, "bench_ew_kernels: %s\n", ts_last_error());
    exit(1);
  }
  int n = ts_graph_num_inputs(g);
  ts_buffer *in[4] = {0}, *out[4] = {0};
  for (int i = 0; i < n; i++) {
    ts_dtype dt = ts_tensor_dtype(g, ts_graph_input(g, i));
    size_t nb = (size_t)ts_tensor_numel(g, ts_graph_input(g, i)) * ts_dtype_size(dt);
    void *z = calloc(nb, 1);
    in[i] = ts_buffer_new(c, dt, 4, SH);
    if (!z || !in[i] || ts_buffer_write(in[i], z, nb) < 0) exit(1);
    free(z);
  }
  double best = 1e9;
  for (int r = 0; r < 31; r++) {
    double t0 = now_s();
    if (ts_execute(e, in, out) < 0) exit(1);
    double t = now_s() - t0;
    if (r > 0 && t < best) best = t;
  }
  for (int i = 0; i < 4; i++) ts_buffer_free(out[i]), ts_buffer_free(in[i]);
  ts_executable_free(e);
  return best;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  ts_client *c1 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  ts_client *c2 = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 1});
  if (!c1 || !c2 || rounds < 1) return 1;
  double elems = (double)(SH[0] * SH[1] * SH[2] * SH[3]);
  for (int k = 0; k < KERNELS; k++) {
    ts_graph *g = program(k);
    double t1 = 1e9, t2 = 1e9;
    for (int q = 0; q < rounds; q++) {
      double a = least(c1, g), b = least(c2, g);
      t1 = a < t1 ? a : t1, t2 = b < t2 ? b : t2;
    }
    printf("ew_kernel %-14s 1 thread %.3f ms %.3g B/s  2 threads %.3f ms  efficiency %.2f\n", NAMES[k], 1e3 * t1,
           TENSORS[k] * 4 * elems / t1, 1e3 * t2, t1 / t2 / 2);
    ts_graph_free(g);
  }
  ts_client_free(c1), ts_client_free(c2);
  return 0;
}
