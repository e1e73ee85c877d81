/* optim_rate.c — the AdamW update's speed by weight shape and data (issue 16:
 * the 1-device MLP's update kernels, traced, ran ~0.55-0.8 of the rate
 * tessel plan --calibrate measures for kernel.optimizer on a 1024x1024
 * weight, the largest part of its 0.72 pred/meas). The calibration times
 * ts_optim_apply (AdamW, weight decay 0.01) on zero-filled inputs; this times
 * it on the calibration's shape then (1024x1024) and now (1536x2048), the
 * MLP's fc1 (512x784) and fc2 (512x512) and 4096x4096 (64 MiB a tensor, out
 * of the L3 as ResNet-50's 100 MB of weights are in its step, stop 38), with
 * zeros and with gradient-like data (weights ~0.05, grads
 * ~1e-3, moments as after some steps), 1 thread, interleaved rounds, least
 * wall time: ns per element and the model's bytes per second (40 per element:
 * the two moment kernels 12 each, the update 16).
 *
 *   usage: bench_optim_rate [rounds (7)] [runs per round (5)]
 * Prints: optim_rate RxC data=zero|real ns_per_elem=.. model_GBps=.. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h" /* now_s */
#include "tessel/tessel.h"

typedef struct {
  ts_executable *e;
  ts_buffer *in[8];
  int n_in;
  int64_t elems;
} case_t;

static int build(ts_client *cl, int64_t r, int64_t c, bool real, case_t *k) {
  ts_graph *g = ts_graph_new();
  ts_params *pp = ts_params_new(1);
  int64_t sh[2] = {r, c};
  if (!g || !pp) return -1;
  ts_tensor w = ts_params_use(pp, g, "w", TS_F32, 2, sh, (ts_init){0}, true), gr = ts_input(g, "g", TS_F32, 2, sh);
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn m;
  ts_nn_init(&m, g, pp, true, TS_NONE);
  if (ts_optim_apply(&m, &(ts_optim_config){.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}, lr, step, 1, &w, &gr) < 0)
    return -1;
  k->e = ts_compile(cl, g, NULL);
  k->n_in = ts_graph_num_inputs(g);
  k->elems = r * c;
  for (int i = 0; i < k->n_in && i < 8 && k->e; i++) {
    ts_tensor t = ts_graph_input(g, i);
    int64_t n = ts_tensor_numel(g, t);
    const char *name = ts_input_name(g, t);
    float *h = malloc(sizeof *h * (size_t)(n ? n : 1));
    if (!h) return -1;
    for (int64_t j = 0; j < n; j++) {
      double u = (double)((uint64_t)(j + 1) * 2654435761u % 10007) / 10007.0 - 0.5; /* in [-0.5, 0.5) */
      float v = (float)u;
      if (name && strstr(name, "exp_avg_sq")) v = (float)(1e-7 * u * u);
      else if (name && strstr(name, "exp_avg")) v = (float)(1e-4 * u);
      else if (name && name[0] == 'g') v = (float)(2e-3 * u);
      else if (name && name[0] == 'w') v = (float)(0.1 * u);
      else if (name && strcmp(name, "lr") == 0) v = 1e-3f;
      else if (name && strcmp(name, "step") == 0) v = 10.f;
      h[j] = real ? v : (name && strcmp(name, "step") == 0 ? 1.f : 0.f);
    }
    k->in[i] = ts_buffer_from_host(cl, ts_tensor_dtype(g, t), ts_tensor_rank(g, t), ts_tensor_shape(g, t), h);
    free(h);
  }
  ts_graph_free(g);
  ts_params_free(pp);
  return k->e ? 0 : -1;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 7, runs = argc > 2 ? atoi(argv[2]) : 5;
  ts_client *cl = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  enum { S = 5, C = 2 * S };
  const int64_t shapes[S][2] = {{1024, 1024}, {512, 784}, {512, 512}, {1536, 2048}, {4096, 4096}};
  case_t k[C] = {0};
  if (!cl || rounds < 1 || runs < 1) {
    fprintf(stderr, "bench_optim_rate: %s\n", cl ? "rounds and runs must be >= 1" : ts_last_error());
    return 1;
  }
  for (int i = 0; i < C; i++)
    if (build(cl, shapes[i / 2][0], shapes[i / 2][1], i % 2, &k[i]) < 0) {
      fprintf(stderr, "bench_optim_rate: %s\n", ts_last_error());
      return 1;
    }
  double best[C];
  for (int i = 0; i < C; i++) best[i] = INFINITY;
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < C; i++)
      for (int q = 0; q < runs + (r == 0); q++) { /* round 0's first run allocates the outputs */
        ts_buffer *out[8] = {0};
        double t0 = now_s();
        if (ts_execute(k[i].e, k[i].in, out) < 0) {
          fprintf(stderr, "bench_optim_rate: %s\n", ts_last_error());
          return 1;
        }
        double t = now_s() - t0;
        for (int o = 0; o < 8; o++) {
          bool alias = false;
          for (int j = 0; j < k[i].n_in; j++) alias |= out[o] == k[i].in[j];
          if (out[o] && !alias) ts_buffer_free(out[o]);
        }
        if (!(r == 0 && q == 0) && t < best[i]) best[i] = t;
      }
  for (int i = 0; i < C; i++)
    printf("optim_rate %lldx%lld data=%s ns_per_elem=%.3f model_GBps=%.2f\n", (long long)shapes[i / 2][0],
           (long long)shapes[i / 2][1], i % 2 ? "real" : "zero", 1e9 * best[i] / (double)k[i].elems,
           40.0 * (double)k[i].elems / best[i] / 1e9);
  return 0;
}
