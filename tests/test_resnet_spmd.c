/* test_resnet_spmd.c — a partitioned ResNet-20 computes what one device
 * computes. The training step (batch-norm statistics of the global batch,
 * running statistics updated in place, SGD with momentum) runs in f64 for 5
 * steps on 1 device and on data=2, data=4, fsdp=2 (every parameter and its
 * optimizer state sharded on dim 0) and data=2,fsdp=2; losses and every
 * parameter and running statistic must agree to 1e-9 relative to each
 * tensor's largest value. In f32 the same run is chaotic (rounding grows
 * 10-1000x per step: tests/resnet_train.sh), so f64 is where the
 * partitioning is pinned down. The channels-last build (ts_nn.layout NHWC:
 * NHWC convolutions, pooling and batch norm) must agree with the NCHW one
 * to the same 1e-9, on 1 device and partitioned (data=2, fsdp=2); under bf16 autocast
 * with NCHW's bf16 losses to the bf16 noise bound (1 device and data=2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { B = 8, C = 1, H = 16, STEPS = 5 };

typedef struct {
  double loss[STEPS];
  int n;          /* parameters (model + optimizer state) */
  double **vals;  /* (n) final values */
  int64_t *numel; /* (n) */
} run_out;

static ts_sharding *spec_on(const ts_mesh *m, const char *text, int rank) {
  ts_partition_spec ps;
  return ts_partition_spec_parse(m, text, &ps) == 0 ? ts_sharding_new(m, &ps, rank) : NULL;
}

/* FSDP: dim 0 of every parameter of rank >= 1 on axis "fsdp". */
static void mark_fsdp(ts_graph *g, const ts_params *p, const ts_mesh *m) {
  for (int i = 0; i < ts_params_count(p); i++) {
    ts_tensor t = ts_graph_find_input(g, ts_params_name(p, i));
    int r = t == TS_NONE ? 0 : ts_tensor_rank(g, t);
    if (r < 1) continue;
    char spec[64] = "fsdp";
    for (int d = 1; d < r; d++) strcat(spec, ",None");
    ts_sharding *s = spec_on(m, spec, r);
    if (s) ts_mark_sharding(g, t, s);
    ts_sharding_free(s);
  }
}

/* amp: ts_compile_options.autocast (TS_BF16 with dt TS_F32), else TS_F32. */
static int train(const char *mesh_text, ts_layout layout, ts_dtype dt, ts_dtype amp, const double *xd,
                 const int32_t *yd, run_out *o) {
  ts_mesh *m = mesh_text ? ts_mesh_from_text(mesh_text) : NULL;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = m ? (int)ts_mesh_num_devices(m) : 1});
  ts_params *p = ts_params_new(7);
  ts_graph *g = ts_graph_new();
  int64_t xs[4] = {B, C, H, H}, nb = B;
  ts_tensor x = ts_input(g, "x", dt, 4, xs), y = ts_input(g, "y", TS_I32, 1, &nb);
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn nn;
  ts_nn_init(&nn, g, p, true, TS_NONE);
  nn.layout = layout;
  ts_tensor loss = ts_cross_entropy(g, ts_model_resnet(&nn, TS_RESNET20, x, 10), y);
  ts_graph_add_output(g, loss);
  ts_tensor wrt[128], grads[128];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 128; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  ts_optim_config cfg = {.kind = TS_OPTIM_SGD, .momentum = 0.9};
  int rc = loss == TS_NONE || ts_grad(g, loss, n, wrt, grads) < 0 || ts_optim_apply(&nn, &cfg, lr, step, n, wrt, grads) < 0 ||
                   ts_nn_finish(&nn) < 0 ? -1 : 0;
  ts_executable *e = NULL;
  if (rc == 0 && m) {
    const char *axis = ts_mesh_axis_index(m, "data") >= 0 && ts_mesh_axis_index(m, "fsdp") >= 0 ? "data+fsdp,None,None,None"
                       : ts_mesh_axis_index(m, "data") >= 0                                      ? "data,None,None,None"
                                                                                                 : "fsdp,None,None,None";
    ts_sharding *sx = spec_on(m, axis, 4);
    if (sx) ts_mark_sharding(g, x, sx);
    ts_sharding_free(sx);
    if (ts_mesh_axis_index(m, "fsdp") >= 0) mark_fsdp(g, p, m);
  }
  if (rc == 0 && !(e = ts_compile(c, g, &(ts_compile_options){.mesh = m, .autocast = amp}))) rc = -1;
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in + 1, sizeof *in), **outs = calloc((size_t)n_out + 1, sizeof *outs);
  ts_buffer *xb = ts_buffer_new(c, dt, 4, xs), *yb = ts_buffer_new(c, TS_I32, 1, &nb);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *sb = ts_buffer_new(c, TS_F32, 0, NULL);
  for (int i = 0; rc == 0 && i < n_in; i++) {
    const char *nm = ts_input_name(g, ts_graph_input(g, i));
    in[i] = !strcmp(nm, "x") ? xb : !strcmp(nm, "y") ? yb : !strcmp(nm, "lr") ? lrb : !strcmp(nm, "step") ? sb
          : ts_params_buffer(p, c, ts_params_find(p, nm));
  }
  for (int s = 0; rc == 0 && s < STEPS; s++) {
    float lrv = 0.05f, sv = (float)(s + 1);
    float xf[B * C * H * H];
    for (int i = 0; dt == TS_F32 && i < B * C * H * H; i++) xf[i] = (float)xd[s * B * C * H * H + i];
    if (dt == TS_F32) ts_buffer_write(xb, xf, sizeof xf);
    else ts_buffer_write(xb, xd + s * B * C * H * H, sizeof(double) * B * C * H * H);
    ts_buffer_write(yb, yd + s * B, sizeof(int32_t) * B);
    ts_buffer_write(lrb, &lrv, sizeof lrv);
    ts_buffer_write(sb, &sv, sizeof sv);
    memset(outs, 0, (size_t)n_out * sizeof *outs);
    rc = ts_execute(e, in, outs);
    float lf = 0;
    if (rc == 0) rc = dt == TS_F32 ? ts_buffer_read(outs[0], &lf, sizeof lf) : ts_buffer_read(outs[0], &o->loss[s], sizeof(double));
    if (dt == TS_F32) o->loss[s] = lf;
    if (outs[0]) ts_buffer_free(outs[0]);
  }
  if (rc == 0) rc = ts_params_sync_host(p);
  o->n = ts_params_count(p);
  o->vals = calloc((size_t)o->n, sizeof *o->vals);
  o->numel = calloc((size_t)o->n, sizeof *o->numel);
  for (int i = 0; rc == 0 && i < o->n; i++) {
    o->numel[i] = ts_params_numel(p, i);
    o->vals[i] = malloc((size_t)o->numel[i] * sizeof(double));
    const void *h = ts_params_host(p, i);
    for (int64_t j = 0; j < o->numel[i]; j++) o->vals[i][j] = dt == TS_F32 ? ((const float *)h)[j] : ((const double *)h)[j];
  }
  if (rc < 0) fprintf(stderr, "%s: %s\n", mesh_text ? mesh_text : "1 device", ts_last_error());
  ts_buffer_free(xb), ts_buffer_free(yb), ts_buffer_free(lrb), ts_buffer_free(sb);
  free(in), free(outs);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  ts_mesh_free(m);
  return rc;
}

static void free_out(run_out *o) {
  for (int i = 0; o->vals && i < o->n; i++) free(o->vals[i]);
  free(o->vals);
  free(o->numel);
}

int main(void) {
  uint64_t seed = ts_test_init("test_resnet_spmd", 5);
  static double xd[STEPS * B * C * H * H];
  static int32_t yd[STEPS * B];
  uint64_t s = seed;
  for (size_t i = 0; i < sizeof xd / sizeof *xd; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xd[i] = (double)(s >> 11) * 0x1.0p-53 * 4.0 - 1.0;
  }
  for (int i = 0; i < STEPS * B; i++) yd[i] = (i * 7 + 3) % 10;
  run_out one = {0};
  CHECK_OK(train(NULL, TS_LAYOUT_NCHW, TS_F64, TS_F32, xd, yd, &one));
  const char *meshes[] = {"data=2", "data=4", "fsdp=2", "data=2,fsdp=2", NULL, "data=2", "fsdp=2"};
  for (size_t k = 0; k < sizeof meshes / sizeof *meshes; k++) {
    run_out o = {0};
    ts_layout layout = k >= 4 ? TS_LAYOUT_NHWC : TS_LAYOUT_NCHW; /* the last three: channels last */
    const char *what = k >= 4 ? (meshes[k] ? (k == 5 ? "nhwc data=2" : "nhwc fsdp=2") : "nhwc 1 device") : meshes[k];
    int ok = train(meshes[k], layout, TS_F64, TS_F32, xd, yd, &o) == 0 && o.n == one.n;
    CHECK(ok, "%s: %s", what, ts_last_error());
    double worst = 0;
    for (int st = 0; ok && st < STEPS; st++) worst = fmax(worst, fabs(o.loss[st] - one.loss[st]) / fabs(one.loss[st]));
    for (int i = 0; ok && i < one.n; i++) {
      double mx = 0, d = 0;
      for (int64_t j = 0; j < one.numel[i]; j++) {
        mx = fmax(mx, fabs(one.vals[i][j]));
        d = fmax(d, fabs(o.vals[i][j] - one.vals[i][j]));
      }
      worst = fmax(worst, mx > 0 ? d / mx : d);
    }
    CHECK(ok && worst <= 1e-9, "%s: ResNet-20 differs from 1 device by %.3g (losses, parameters, statistics)",
          what, worst);
    printf("%-14s %d steps: worst relative difference from 1 device %.3g (losses %.10g .. %.10g)\n", what, STEPS,
           worst, o.loss[0], o.loss[STEPS - 1]);
    free_out(&o);
  }
  free_out(&one);
  /* f32: channels last against NCHW (other convolution kernels, so other summation orders), the
   * losses of the first 2 steps within 1e-5 (relative; measured <= 2.1e-7 over seeds 1-8). Not
   * later steps: this small-batch configuration amplifies rounding ~1e3 per update (seed 6: steps
   * 0 and 1 within 1e-7, step 2 2e-4 apart: any rounding difference grows so); the f64 runs above are
   * the multi-step equality check (1e-9). */
  run_out a = {0}, b = {0};
  int ok = train(NULL, TS_LAYOUT_NCHW, TS_F32, TS_F32, xd, yd, &a) == 0 &&
           train(NULL, TS_LAYOUT_NHWC, TS_F32, TS_F32, xd, yd, &b) == 0;
  CHECK(ok, "f32: %s", ts_last_error());
  for (int st = 0; ok && st < 2; st++)
    CHECK(fabs(a.loss[st] - b.loss[st]) <= 1e-5 * fabs(a.loss[st]), "f32 step %d: nhwc loss %.9g, nchw %.9g", st,
          b.loss[st], a.loss[st]);
  if (ok) printf("f32 nhwc vs nchw losses: %.9g %.9g %.9g / %.9g %.9g %.9g\n", b.loss[0], b.loss[1], b.loss[2], a.loss[0],
                 a.loss[1], a.loss[2]);
  free_out(&a), free_out(&b);
  /* bf16 autocast: channels last against NCHW, both bf16 on the same mesh (1 device, data=2: a
   * mesh sums the batch-norm statistics in another order, which alone moves bf16 losses by up to
   * 0.09 over 3 steps, seeds 1-5). Bound: test_amp's for bf16 against f32 over 3 steps,
   * BF16_LOSS_TOL = 0.05 absolute; measured 0 (bit-identical losses, seeds 1-5: the bf16
   * roundings absorb the f32 differences of the other kernels). */
  const double bf16_tol = 0.05;
  for (int k = 0; k < 2; k++) {
    const char *mesh = k ? "data=2" : NULL;
    run_out c = {0}, d = {0};
    ok = train(mesh, TS_LAYOUT_NCHW, TS_F32, TS_BF16, xd, yd, &c) == 0 &&
         train(mesh, TS_LAYOUT_NHWC, TS_F32, TS_BF16, xd, yd, &d) == 0;
    CHECK(ok, "bf16 %s: %s", mesh ? mesh : "1 device", ts_last_error());
    double worst = 0;
    for (int st = 0; ok && st < 3; st++) worst = fmax(worst, fabs(d.loss[st] - c.loss[st]));
    CHECK(ok && worst <= bf16_tol, "bf16 %s: nhwc losses differ from nchw by %.3g > %g", mesh ? mesh : "1 device",
          worst, bf16_tol);
    if (ok) printf("bf16 %-8s nhwc vs nchw, 3 steps: worst loss difference %.3g (%.9g %.9g %.9g)\n",
                   mesh ? mesh : "1 device", worst, d.loss[0], d.loss[1], d.loss[2]);
    free_out(&c), free_out(&d);
  }
  return ts_test_finish();
}
