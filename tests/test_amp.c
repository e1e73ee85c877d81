/* test_amp.c — mixed precision: the autocast pass (ts_compile_options.autocast)
 * and the f16 dynamic loss scaler (ts_loss_scaler_*), on ResNet-20
 * (1x16x16, batch 8).
 *
 *  1. bf16 vs f32, 3 SGD-momentum steps from the same weights and batches:
 *     the compiled step runs its convolutions and matmuls in bf16 (forward
 *     and both backward convolutions, the filter gradient written in f32;
 *     checked in the program text), the
 *     losses differ from f32 (the pass is on) by at most BF16_LOSS_TOL. Why
 *     that bound: bf16 keeps 8 significant bits, unit roundoff u = 2^-9 =
 *     1.95e-3. Each of the 21 contractions rounds its two operands and its
 *     result (3 roundings of relative size <= u, independent), so the
 *     logits carry a relative error of about sqrt(3 * 21) u = 1.6e-2 in the
 *     worst-aligned case and the cross-entropy (|d loss / d logit| <= 1 per
 *     sample, logits of size ~1 at initialization) moves by about that much
 *     in absolute terms; two more steps at lr 0.05 add the bf16 error of the
 *     updates. 0.05 absolute is that estimate with a 3x margin; measured:
 *     below 1e-3 (printed).
 *  2. The f16 loss scaler (AdamW, init scale 256 so that no natural
 *     overflow happens, growth interval 3, 8 steps): an inf injected into one
 *     sample's logits at step 3 (a test input multiplying the logits) makes
 *     every gradient NaN; that step leaves every parameter and optimizer
 *     state bit-identical (AdamW's step count included), the scale halves,
 *     AmpSkippedSteps-state counts 1; after 3 clean steps the scale doubles.
 *     The scale after every step equals a plain-C replay of PyTorch's
 *     GradScaler.update (torch._amp_update_scale_) fed with the same
 *     found-inf flags.
 *  3. The same runs on a data=2 mesh (the f16 inf in a sample only device 1
 *     holds): the AMP decisions (scale and skipped count after every step)
 *     are exactly those of one device, and the losses agree to the bf16 /
 *     f16 noise bound. Why not tighter: the mesh sums the f32 batch-norm
 *     statistics in another order (1e-7 relative, as in f32), which flips the
 *     bf16 rounding of a few of the next convolution's inputs; each flip moves
 *     an element by 2^-8 relative, and from there the two runs are two
 *     samples of bf16 noise (measured layer by layer: the first flip appears
 *     in layer1.0.conv2, and the f32 run on the same mesh stays at 1e-7).
 *     Bound: BF16_LOSS_TOL for bf16 (3 steps), and F16_LOSS_TOL for f16 (8
 *     steps): BF16_LOSS_TOL x the roundoff ratio 2^-11 / 2^-8 = 1/8, doubled
 *     for the longer run.
 *  4. The f16 run as DDP (2 replica programs on 2 devices, 4 rows each, the
 *     inf in replica 1's rows only): after every step both replicas hold the
 *     same parameters, optimizer and scaler state (bit for bit; batch-norm
 *     running statistics are each replica's own), and the scale / skipped /
 *     applied counts are one device's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { B = 8, C = 1, H = 16, MAXSTEPS = 8 };
#define BF16_LOSS_TOL 0.05
#define F16_LOSS_TOL (2 * BF16_LOSS_TOL / 8)

typedef struct {
  ts_dtype amp;          /* autocast */
  const char *mesh;      /* NULL: one device */
  bool scaler, adamw;
  int steps;
  int poison_step;       /* 1-based step whose batch has an inf in sample poison_sample; 0: none */
  int poison_sample;
  bool snapshots;        /* keep every parameter after every step */
  bool ddp;              /* 2 DDP replicas (replica program) on 2 devices, B/2 rows each */
} run_cfg;

typedef struct {
  double loss[MAXSTEPS];
  float scale[MAXSTEPS], skipped[MAXSTEPS], optim_step[MAXSTEPS];
  int n;                 /* parameters */
  char (*names)[96];     /* (n) */
  int64_t *numel;        /* (n) */
  float **snap;          /* (steps + 1) x all parameters concatenated (f32) */
  int64_t total;
  char *program;         /* text of the compiled step */
  bool replicas_differ;  /* ddp: the replicas' parameters or scaler state ever differed */
} run_out;

static ts_sharding *spec_on(const ts_mesh *m, const char *text, int rank) {
  ts_partition_spec ps;
  return ts_partition_spec_parse(m, text, &ps) == 0 ? ts_sharding_new(m, &ps, rank) : NULL;
}

static void mark(ts_graph *g, ts_tensor t, const ts_mesh *m, const char *spec) {
  ts_sharding *s = spec_on(m, spec, ts_tensor_rank(g, t));
  if (s) ts_mark_sharding(g, t, s);
  ts_sharding_free(s);
}

static int read_param(ts_params *p, ts_client *c, const char *name, float *v) {
  int k = ts_params_find(p, name);
  return k < 0 ? -1 : ts_buffer_read_shard(ts_params_buffer(p, c, k), 0, v, sizeof *v); /* device 0's */
}

static int snapshot(ts_params *p, float *dst) {
  if (ts_params_sync_host(p) < 0) return -1;
  int64_t off = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    memcpy(dst + off, ts_params_host(p, i), (size_t)ts_params_numel(p, i) * sizeof(float));
    off += ts_params_numel(p, i);
  }
  return 0;
}

static int run(const run_cfg *rc, const float *xd, const int32_t *yd, run_out *o) {
  memset(o, 0, sizeof *o);
  ts_mesh *m = rc->mesh ? ts_mesh_from_text(rc->mesh) : NULL;
  int ndev = m ? (int)ts_mesh_num_devices(m) : rc->ddp ? 2 : 1;
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = ndev});
  ts_params *p = ts_params_new(11);
  ts_graph *g = ts_graph_new();
  int64_t bl = rc->ddp ? B / 2 : B; /* rows per replica */
  int64_t xs[4] = {bl, C, H, H}, nb = bl, ps[2] = {bl, 1};
  ts_tensor x = ts_input(g, "x", TS_F32, 4, xs), y = ts_input(g, "y", TS_I32, 1, &nb);
  ts_tensor poison = ts_input(g, "poison", TS_F32, 1, &nb); /* the test hook: 1, or inf for one sample */
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL), step = ts_input(g, "step", TS_F32, 0, NULL);
  ts_nn nn;
  ts_nn_init(&nn, g, p, true, TS_NONE);
  ts_tensor logits = ts_mul(g, ts_model_resnet(&nn, TS_RESNET20, x, 10), ts_reshape(g, poison, 2, ps));
  ts_tensor loss = ts_cross_entropy(g, logits, y);
  ts_graph_add_output(g, rc->ddp ? ts_replica_all_reduce(g, loss, TS_REDUCE_MEAN) : loss);
  ts_tensor wrt[128], grads[128];
  int n = 0;
  for (int i = 0; i < ts_params_count(p) && n < 128; i++)
    if (ts_params_trainable(p, i)) wrt[n++] = ts_graph_find_input(g, ts_params_name(p, i));
  ts_optim_config cfg = rc->adamw ? (ts_optim_config){.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01}
                                  : (ts_optim_config){.kind = TS_OPTIM_SGD, .momentum = 0.9};
  ts_loss_scaler sc;
  ts_loss_scaler_config scfg = {.init_scale = 256, .growth_interval = 3};
  ts_tensor obj = rc->scaler ? ts_loss_scaler_scale(&nn, &sc, &scfg, loss) : loss;
  int rc_ = obj == TS_NONE || ts_grad(g, obj, n, wrt, grads) < 0 ? -1 : 0;
  if (rc_ == 0 && rc->ddp && ts_ddp_average_gradients(g, n, grads, 0) < 0) rc_ = -1;
  if (rc_ == 0 && rc->scaler) rc_ = ts_loss_scaler_unscale(&nn, &sc, n, grads);
  if (rc_ == 0)
    rc_ = rc->scaler ? ts_optim_apply_masked(&nn, &cfg, lr, sc.optim_step, n, wrt, grads, sc.finite)
                     : ts_optim_apply(&nn, &cfg, lr, step, n, wrt, grads);
  if (rc_ == 0) rc_ = ts_nn_finish(&nn);
  if (rc_ == 0 && m) {
    mark(g, x, m, "data,None,None,None");
    mark(g, y, m, "data");
    mark(g, poison, m, "data");
  }
  ts_executable *e = NULL;
  if (rc_ == 0 && !(e = ts_compile(c, g, &(ts_compile_options){.mesh = m, .replicas = rc->ddp, .autocast = rc->amp}))) rc_ = -1;
  if (e && !m && !rc->ddp) o->program = ts_executable_to_string(e);
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer **in = calloc((size_t)n_in + 1, sizeof *in), **outs = calloc((size_t)n_out + 1, sizeof *outs);
  ts_buffer *xb = ts_buffer_new(c, TS_F32, 4, xs), *yb = ts_buffer_new(c, TS_I32, 1, &nb);
  ts_buffer *pb = ts_buffer_new(c, TS_F32, 1, &nb);
  ts_buffer *lrb = ts_buffer_new(c, TS_F32, 0, NULL), *sb = ts_buffer_new(c, TS_F32, 0, NULL);
  for (int i = 0; rc_ == 0 && i < n_in; i++) {
    const char *nm = ts_input_name(g, ts_graph_input(g, i));
    in[i] = !strcmp(nm, "x") ? xb : !strcmp(nm, "y") ? yb : !strcmp(nm, "poison") ? pb : !strcmp(nm, "lr") ? lrb
          : !strcmp(nm, "step") ? sb : ts_params_buffer(p, c, ts_params_find(p, nm));
  }
  o->n = ts_params_count(p);
  o->names = calloc((size_t)o->n + 1, sizeof *o->names);
  o->numel = calloc((size_t)o->n + 1, sizeof *o->numel);
  for (int i = 0; i < o->n && o->names && o->numel; i++) {
    snprintf(o->names[i], sizeof o->names[i], "%s", ts_params_name(p, i));
    o->total += o->numel[i] = ts_params_numel(p, i);
  }
  if (rc->snapshots) {
    o->snap = calloc((size_t)rc->steps + 1, sizeof *o->snap);
    for (int s = 0; s <= rc->steps && o->snap; s++) o->snap[s] = malloc((size_t)o->total * sizeof(float));
    if (rc_ == 0) rc_ = snapshot(p, o->snap[0]);
  }
  for (int s = 0; rc_ == 0 && s < rc->steps; s++) {
    float lrv = rc->adamw ? 1e-3f : 0.01f, sv = (float)(s + 1), pv[B];
    for (int k = 0; k < B; k++) pv[k] = s + 1 == rc->poison_step && k == rc->poison_sample ? INFINITY : 1.0f;
    for (int d = 0; rc->ddp && d < 2; d++) { /* replica d: rows [d*bl, (d+1)*bl) */
      ts_buffer_write_shard(xb, d, xd + (s * B + d * bl) * C * H * H, sizeof(float) * (size_t)(bl * C * H * H));
      ts_buffer_write_shard(yb, d, yd + s * B + d * bl, sizeof(int32_t) * (size_t)bl);
      ts_buffer_write_shard(pb, d, pv + d * bl, sizeof(float) * (size_t)bl);
    }
    if (!rc->ddp) { /* the global batch (a mesh uploads each device its block) */
      ts_buffer_write(xb, xd + s * B * C * H * H, sizeof(float) * B * C * H * H);
      ts_buffer_write(yb, yd + s * B, sizeof(int32_t) * B);
      ts_buffer_write(pb, pv, sizeof pv);
    }
    ts_buffer_write(lrb, &lrv, sizeof lrv);
    ts_buffer_write(sb, &sv, sizeof sv);
    memset(outs, 0, (size_t)n_out * sizeof *outs);
    rc_ = ts_execute(e, in, outs);
    float lf = 0;
    if (rc_ == 0) rc_ = ts_buffer_read_shard(outs[0], 0, &lf, sizeof lf);
    o->loss[s] = lf;
    if (outs[0]) ts_buffer_free(outs[0]);
    if (rc_ == 0 && rc->scaler)
      rc_ = read_param(p, c, "amp.loss_scale", &o->scale[s]) || read_param(p, c, "amp.skipped_steps", &o->skipped[s]) ||
            read_param(p, c, "amp.optim_step", &o->optim_step[s]) ? -1 : 0;
    if (rc_ == 0 && rc->snapshots) rc_ = snapshot(p, o->snap[s + 1]);
    for (int i = 0; rc_ == 0 && rc->ddp && i < o->n; i++) { /* DDP: the replicas hold the same values */
      if (strstr(o->names[i], "running_")) continue; /* each replica's own batch statistics */
      size_t bytes = (size_t)o->numel[i] * sizeof(float);
      float *v0 = malloc(bytes), *v1 = malloc(bytes);
      ts_buffer *bi = ts_params_buffer(p, c, i);
      if (!v0 || !v1 || ts_buffer_read_shard(bi, 0, v0, bytes) < 0 || ts_buffer_read_shard(bi, 1, v1, bytes) < 0)
        rc_ = -1;
      else if (memcmp(v0, v1, bytes) != 0)
        o->replicas_differ = true;
      free(v0), free(v1);
    }
  }
  if (rc_ < 0) fprintf(stderr, "%s: %s\n", rc->mesh ? rc->mesh : "1 device", ts_last_error());
  ts_buffer_free(xb), ts_buffer_free(yb), ts_buffer_free(pb), ts_buffer_free(lrb), ts_buffer_free(sb);
  free(in), free(outs);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  ts_mesh_free(m);
  return rc_;
}

static void free_out(run_out *o, int steps) {
  for (int s = 0; o->snap && s <= steps; s++) free(o->snap[s]);
  free(o->snap);
  free(o->program);
  free(o->names);
  free(o->numel);
}

/* A program line "%N = op(...) ... : dt[...]" exists. */
static bool program_has(const char *prog, const char *op, const char *dt) {
  char pat[64];
  snprintf(pat, sizeof pat, " = %s(", op);
  for (const char *l = prog; l && (l = strstr(l, pat)); l++) {
    const char *eol = strchr(l, '\n'), *colon = strstr(l, " : ");
    if (colon && (!eol || colon < eol) && strncmp(colon + 3, dt, strlen(dt)) == 0 && colon[3 + strlen(dt)] == '[')
      return true;
  }
  return false;
}

/* PyTorch's GradScaler.update (torch._amp_update_scale_) in plain C. */
static void scaler_reference(const bool *found_inf, int steps, double init, double growth, double backoff,
                             int interval, float *scale_after) {
  double scale = init;
  int tracker = 0;
  for (int s = 0; s < steps; s++) {
    if (found_inf[s]) {
      scale *= backoff;
      tracker = 0;
    } else if (++tracker == interval) {
      scale *= growth;
      tracker = 0;
    }
    scale_after[s] = (float)scale;
  }
}

int main(void) {
  uint64_t seed = ts_test_init("test_amp", 20);
  static float xd[MAXSTEPS * B * C * H * H];
  static int32_t yd[MAXSTEPS * B];
  uint64_t s = seed;
  for (size_t i = 0; i < sizeof xd / sizeof *xd; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xd[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 4.0 - 1.0);
  }
  for (int i = 0; i < MAXSTEPS * B; i++) yd[i] = (i * 7 + 3) % 10;

  /* 1. bf16 vs f32 */
  run_out f32 = {0}, bf = {0}, bf2 = {0};
  CHECK_OK(run(&(run_cfg){.amp = TS_F32, .steps = 3}, xd, yd, &f32));
  CHECK_OK(run(&(run_cfg){.amp = TS_BF16, .steps = 3}, xd, yd, &bf));
  double worst = 0;
  bool differs = false;
  for (int k = 0; k < 3; k++) {
    worst = fmax(worst, fabs(bf.loss[k] - f32.loss[k]));
    differs |= bf.loss[k] != f32.loss[k];
    printf("step %d loss f32 %.9g bf16 %.9g\n", k + 1, f32.loss[k], bf.loss[k]);
  }
  CHECK(worst <= BF16_LOSS_TOL, "bf16 losses differ from f32 by %.3g > %g", worst, BF16_LOSS_TOL);
  CHECK(differs, "bf16 losses are bit-identical to f32: the autocast pass did nothing");
  printf("bf16 vs f32: worst loss difference %.3g (bound %g)\n", worst, BF16_LOSS_TOL);
  /* the filter gradient reads bf16 and is written in f32 (test_amp_wgrad: its operands are bf16) */
  CHECK(bf.program && program_has(bf.program, "conv2d_bwd_filter", "f32") &&
            !program_has(bf.program, "conv2d_bwd_filter", "bf16"),
        "bf16 program: conv2d_bwd_filter does not give f32 (oneDNN's f32 diff_weights)");
  const char *bf_ops[] = {"conv2d", "conv2d_bwd_data", "dot_general"};
  for (size_t k = 0; k < sizeof bf_ops / sizeof *bf_ops; k++) {
    CHECK(bf.program && program_has(bf.program, bf_ops[k], "bf16"), "bf16 program has no bf16 %s", bf_ops[k]);
    CHECK(bf.program && !program_has(bf.program, bf_ops[k], "f32"), "bf16 program still has an f32 %s", bf_ops[k]);
    CHECK(f32.program && !program_has(f32.program, bf_ops[k], "bf16"), "f32 program has a bf16 %s", bf_ops[k]);
  }
  /* each weight is converted once per step (forward and backward-data share it) */
  int weights = 0, once = 0;
  for (const char *l = bf.program; l && (l = strstr(l, " = input \"")); l++) {
    int id = -1;
    char name[96] = "";
    const char *ls = l;
    while (ls > bf.program && ls[-1] != '\n') ls--;
    size_t len = sscanf(ls, "%%%d = input \"%95[^\"]\"", &id, name) == 2 ? strlen(name) : 0;
    if (len < 7 || strcmp(name + len - 7, ".weight") || (!strstr(name, "conv") && !strstr(name, "downsample.0")))
      continue; /* the convolutions' weights (not BN's, fc's or optimizer state) */
    char pat[48];
    snprintf(pat, sizeof pat, "= convert(%%%d) : bf16[", id);
    int n = 0;
    for (const char *q = bf.program; (q = strstr(q, pat)); q++) n++;
    weights++;
    once += n == 1;
    if (n != 1) fprintf(stderr, "  %s is converted to bf16 %d times\n", name, n);
  }
  CHECK(weights == 21 && once == weights, "%d of %d convolution weights converted exactly once", once, weights);
  printf("bf16: each of %d convolution weights converted once per step: %s\n", weights, once == weights ? "yes" : "NO");
  /* bf16 on a data=2 mesh */
  CHECK_OK(run(&(run_cfg){.amp = TS_BF16, .mesh = "data=2", .steps = 3}, xd, yd, &bf2));
  for (int k = 0; k < 3; k++) {
    double d = fabs(bf2.loss[k] - bf.loss[k]);
    CHECK(d <= BF16_LOSS_TOL, "bf16 data=2 step %d: loss %.9g vs 1 device %.9g (%.3g > %g)", k + 1, bf2.loss[k],
          bf.loss[k], d, BF16_LOSS_TOL);
    printf("bf16 data=2 step %d: loss %.9g (1 device %.9g, difference %.3g)\n", k + 1, bf2.loss[k], bf.loss[k], d);
  }
  free_out(&f32, 3), free_out(&bf, 3), free_out(&bf2, 3);

  /* 2. the f16 loss scaler, one device */
  enum { STEPS = 8, POISON = 3 };
  run_cfg sc = {.amp = TS_F16, .scaler = true, .adamw = true, .steps = STEPS, .poison_step = POISON,
                .poison_sample = B - 1, .snapshots = true};
  run_out a = {0}, mesh = {0};
  CHECK_OK(run(&sc, xd, yd, &a));
  bool found_inf[STEPS] = {0};
  found_inf[POISON - 1] = true;
  float want[STEPS];
  scaler_reference(found_inf, STEPS, 256, 2, 0.5, 3, want);
  for (int k = 0; k < STEPS; k++) {
    printf("f16 step %d loss %.9g scale %g skipped %g optim_step %g (reference scale %g)\n", k + 1, a.loss[k],
           a.scale[k], a.skipped[k], a.optim_step[k], want[k]);
    CHECK(a.scale[k] == want[k], "f16 step %d: scale %g, PyTorch's algorithm gives %g", k + 1, a.scale[k], want[k]);
    float skipped = k + 1 >= POISON ? 1.0f : 0.0f, applied = (float)(k + 1) - skipped;
    CHECK(a.skipped[k] == skipped && a.optim_step[k] == applied, "f16 step %d: skipped %g applied %g, want %g %g",
          k + 1, a.skipped[k], a.optim_step[k], skipped, applied);
  }
  CHECK(a.scale[POISON - 1] == a.scale[POISON - 2] / 2, "the poisoned step did not halve the scale");
  CHECK(!isfinite(a.loss[POISON - 1]), "the poisoned step's loss is finite (%g): the hook did nothing",
        a.loss[POISON - 1]);
  /* the skipped step changes no parameter and no optimizer state (bit for bit);
   * batch-norm running statistics do change (PyTorch's too: they are updated
   * in the forward pass, before GradScaler decides), and so does amp.* */
  int64_t changed = 0, off = 0;
  for (int i = 0; i < a.n; i++) {
    const char *nm = a.names[i];
    bool stat = strstr(nm, "running_") != NULL || strncmp(nm, "amp.", 4) == 0;
    if (!stat && memcmp(a.snap[POISON - 1] + off, a.snap[POISON] + off, (size_t)a.numel[i] * sizeof(float)) != 0 &&
        changed++ < 5)
      fprintf(stderr, "  %s changed in the skipped step\n", nm);
    off += a.numel[i];
  }
  CHECK(changed == 0, "%lld parameters or optimizer states changed in the skipped step", (long long)changed);
  printf("skipped step %d: parameters and optimizer state bit-identical (%s)\n", POISON, changed ? "NO" : "yes");

  /* 3. the same on data=2, the inf in a sample of device 1's half */
  sc.mesh = "data=2";
  sc.snapshots = false;
  CHECK_OK(run(&sc, xd, yd, &mesh));
  for (int k = 0; k < STEPS; k++) {
    CHECK(mesh.scale[k] == a.scale[k] && mesh.skipped[k] == a.skipped[k],
          "f16 data=2 step %d: scale %g skipped %g, 1 device %g %g", k + 1, mesh.scale[k], mesh.skipped[k], a.scale[k],
          a.skipped[k]);
    if (isfinite(a.loss[k]))
      CHECK(fabs(mesh.loss[k] - a.loss[k]) <= F16_LOSS_TOL, "f16 data=2 step %d: loss %.9g vs %.9g (bound %g)", k + 1,
            mesh.loss[k], a.loss[k], F16_LOSS_TOL);
    else
      CHECK(!isfinite(mesh.loss[k]), "f16 data=2 step %d: loss %g finite, 1 device %g", k + 1, mesh.loss[k], a.loss[k]);
  }
  double fw = 0;
  for (int k = 0; k < STEPS; k++)
    if (isfinite(a.loss[k])) fw = fmax(fw, fabs(mesh.loss[k] - a.loss[k]));
  printf("f16 data=2: the same scale and skip decisions as 1 device over %d steps; losses within %.3g (bound %g)\n",
         STEPS, fw, F16_LOSS_TOL);

  /* 4. DDP: 2 replicas, the inf in replica 1's rows only: one decision for both */
  run_out ddp = {0};
  sc.mesh = NULL;
  sc.ddp = true;
  CHECK_OK(run(&sc, xd, yd, &ddp));
  for (int k = 0; k < STEPS; k++)
    CHECK(ddp.scale[k] == a.scale[k] && ddp.skipped[k] == a.skipped[k] && ddp.optim_step[k] == a.optim_step[k],
          "f16 DDP step %d: scale %g skipped %g applied %g, 1 device %g %g %g", k + 1, ddp.scale[k], ddp.skipped[k],
          ddp.optim_step[k], a.scale[k], a.skipped[k], a.optim_step[k]);
  CHECK(!ddp.replicas_differ, "f16 DDP: the replicas' parameters or scaler state differ");
  printf("f16 DDP, 2 replicas, inf in replica 1 only at step %d: the same decisions as 1 device, replicas "
         "identical: %s\n", POISON, ddp.replicas_differ ? "NO" : "yes");
  free_out(&ddp, STEPS);
  free_out(&a, STEPS), free_out(&mesh, STEPS);
  return ts_test_finish();
}
