/* test_calprobe_inputs.c — the calibration's timed programs (tools/calprobe.c)
 * run the optimizer probe as training runs it (issue 16): their inputs are
 * zero-filled but a scalar f32 one is 1. With lr and step 0 the AdamW probe's
 * step size was lr / (1 - b1^0) = 0 / 0, a NaN that sent the update's fused
 * kernels down their NaN-ordered path (kernels/fused_adam.c), which no
 * training step takes: kernel.optimizer measured that path (stop 36: 1.0e10
 * B/s while training's update ran about 2x as fast) and the MLP rows were
 * predicted 1.26-1.45x their measured steps.
 *  1. cal_prog_open: a rank-0 f32 input reads 1, a tensor input 0;
 *  2. calibrate.c's AdamW probe (ts_optim_apply, weight decay 0.01) on those
 *     inputs: every output finite. */
#include <math.h>
#include <stdlib.h>

#include "../tools/calprobe.c"
#include "harness.h"

int main(void) {
  ts_test_init("test_calprobe_inputs", 1);
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  CHECK(c != NULL, "%s", ts_last_error());
  int64_t sh[2] = {64, 48};
  ts_graph *g = ts_graph_new();
  ts_params *pp = ts_params_new(1);
  ts_tensor w = ts_params_use(pp, g, "w", TS_F32, 2, sh, (ts_init){0}, true), gr = ts_input(g, "g", TS_F32, 2, sh);
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, pp, true, TS_NONE);
  CHECK_OK(ts_optim_apply(&m, &(ts_optim_config){.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}, lr, step, 1, &w, &gr));
  cal_prog p;
  CHECK_OK(cal_prog_open(&p, c, g, false));
  int n_in = ts_graph_num_inputs(g), scalars = 0;
  for (int i = 0; i < n_in && i < 8; i++) { /* 1. */
    ts_tensor t = ts_graph_input(g, i);
    float v[64 * 48];
    size_t bytes = ts_buffer_bytes(p.in[i]);
    CHECK(bytes <= sizeof v, "input %d: %zu bytes", i, bytes);
    if (bytes > sizeof v || ts_buffer_read(p.in[i], v, bytes) != 0) continue;
    bool scalar = ts_tensor_rank(g, t) == 0 && ts_tensor_dtype(g, t) == TS_F32;
    scalars += scalar;
    CHECK(v[0] == (scalar ? 1.0f : 0.0f), "input %d (rank %d): %g", i, ts_tensor_rank(g, t), v[0]);
  }
  CHECK(scalars == 2, "lr and step: %d scalar inputs", scalars);
  cal_run runs[4];
  CHECK(cal_prog_time(&p, 1, 0, false, runs, 4) >= 1, "%s", ts_last_error());
  int bad = 0, outs = 0;
  for (int o = 0; o < 8 && p.out[o]; o++, outs++) { /* 2. */
    size_t bytes = ts_buffer_bytes(p.out[o]);
    float *v = malloc(bytes);
    if (v && ts_buffer_read(p.out[o], v, bytes) == 0)
      for (size_t e = 0; e < bytes / sizeof *v; e++) bad += !isfinite(v[e]);
    free(v);
  }
  CHECK(outs == 3 && bad == 0, "%d outputs (weight, exp_avg, exp_avg_sq), %d elements not finite", outs, bad);
  cal_prog_close(&p);
  ts_graph_free(g);
  ts_params_free(pp);
  ts_client_free(c);
  return ts_test_finish();
}
