/* test_spmd_collectives.c — the collectives the partitioner inserts, counted:
 * a data-parallel MLP training step reduces exactly the parameter gradients
 * (plus the scalar loss), and a Megatron block (fc1 column-parallel, fc2
 * row-parallel) on data=2,model=4 all-reduces the activation once in the
 * forward pass and its gradient once in the backward pass, with the bytes
 * the shapes imply. Both steps also match the 1-device step numerically.
 * dot_partial_rules: a dot whose result dim is split over axes it contracts
 * part of reduce-scatters into that dim instead of gathering an operand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"
#include "ir/builders_internal.h" /* ir_conv_bwd_filter: the filter gradient alone */

enum { B = 16, D = 12, H0 = 16, H = 32, C = 10 };

typedef struct {
  ts_graph *g;
  ts_tensor x, y, p[6], loss; /* p: w0 b0 w1 b1 w2 b2 */
  ts_tensor fwd_act;          /* fc2's dot (B, C) */
} step;

static ts_tensor linear(ts_graph *g, ts_tensor x, ts_tensor w, ts_tensor b) { return ts_add(g, ts_matmul(g, x, w), b); }

/* x (B, D) -> fc0 (D, H0) relu -> fc1 (H0, H) relu -> fc2 (H, C) -> CE; SGD. */
static step build(void) {
  step s;
  ts_graph *g = s.g = ts_graph_new();
  s.x = ts_input(g, "x", TS_F32, 2, (int64_t[]){B, D});
  s.y = ts_input(g, "y", TS_I32, 1, (int64_t[]){B});
  int64_t shapes[6][2] = {{D, H0}, {H0, 0}, {H0, H}, {H, 0}, {H, C}, {C, 0}};
  const char *names[6] = {"w0", "b0", "w1", "b1", "w2", "b2"};
  for (int i = 0; i < 6; i++) s.p[i] = ts_input(g, names[i], TS_F32, i % 2 ? 1 : 2, shapes[i]);
  ts_tensor h0 = ts_relu(g, linear(g, s.x, s.p[0], s.p[1]));
  ts_tensor h1 = ts_relu(g, linear(g, h0, s.p[2], s.p[3]));
  s.fwd_act = ts_matmul(g, h1, s.p[4]);
  ts_tensor logits = ts_add(g, s.fwd_act, s.p[5]);
  s.loss = ts_cross_entropy(g, logits, s.y);
  ts_tensor grads[6];
  CHECK_OK(ts_grad(g, s.loss, 6, s.p, grads));
  ts_graph_add_output(g, s.loss);
  for (int i = 0; i < 6; i++) {
    ts_tensor nw = ts_sub(g, s.p[i], ts_mul(g, grads[i], ts_scalar(g, TS_F32, 0.1)));
    int o = ts_graph_add_output(g, nw);
    CHECK_OK(ts_graph_alias_output(g, o, s.p[i]));
  }
  return s;
}

static size_t param_bytes(const step *s) {
  size_t n = 0;
  for (int i = 0; i < 6; i++) n += (size_t)ts_tensor_numel(s->g, s->p[i]) * 4;
  return n;
}

static void mark(step *s, const ts_mesh *m, ts_tensor t, const char *spec) {
  ts_partition_spec ps;
  CHECK_OK(ts_partition_spec_parse(m, spec, &ps));
  ts_sharding *sh = ts_sharding_new(m, &ps, ts_tensor_rank(s->g, t));
  CHECK(sh != NULL, "%s", ts_last_error());
  CHECK_OK(ts_mark_sharding(s->g, t, sh));
  ts_sharding_free(sh);
}

/* Runs one step on client c; returns the loss and the updated params (host). */
static double run_step(ts_client *c, const step *s, float *params_out) {
  ts_executable *e = ts_compile(c, s->g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) return NAN;
  uint64_t r = 42;
  ts_buffer *in[8];
  for (int i = 0; i < 8; i++) {
    ts_tensor t = ts_graph_input(s->g, i);
    int64_t n = ts_tensor_numel(s->g, t);
    void *d = malloc((size_t)n * 4);
    for (int64_t k = 0; k < n; k++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      if (t == s->y) ((int32_t *)d)[k] = (int32_t)((r >> 33) % C);
      else ((float *)d)[k] = (float)((double)(r >> 11) * 0x1p-53 - 0.5);
    }
    in[i] = ts_buffer_from_host(c, ts_tensor_dtype(s->g, t), ts_tensor_rank(s->g, t), ts_tensor_shape(s->g, t), d);
    free(d);
  }
  ts_buffer *out[7] = {0};
  CHECK_OK(ts_execute(e, in, out));
  float loss = NAN;
  ts_buffer_read(out[0], &loss, 4);
  size_t off = 0;
  for (int i = 0; i < 6; i++) {
    size_t bytes = ts_buffer_bytes(in[2 + i]);
    ts_buffer_read(in[2 + i], (char *)params_out + off, bytes);
    off += bytes;
  }
  ts_buffer_free(out[0]);
  for (int i = 0; i < 8; i++) ts_buffer_free(in[i]);
  ts_executable_free(e);
  return loss;
}

static void compare(const float *a, const float *b, size_t n, const char *what) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
  CHECK(worst < 1e-5, "%s: params differ from 1 device by %g", what, worst);
}

static ts_executable *compile_on(ts_client *c, const step *s) {
  ts_executable *e = ts_compile(c, s->g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  return e;
}

/* Collectives of a forward program on client c (marks: (tensor, spec) pairs). */
static int count(ts_client *c, ts_graph *g, ts_collective_kind kind, uint32_t axes, size_t *bytes) {
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) return -1;
  int n = 0;
  *bytes = 0;
  for (int i = 0; i < ts_executable_num_collectives(e); i++) {
    ts_collective_info ci;
    ts_executable_collective(e, i, &ci);
    if (ci.kind == kind && ci.mesh_axes == axes) {
      n++;
      *bytes += ci.bytes;
    } else {
      n += 1000; /* anything else counts as wrong */
    }
  }
  ts_executable_free(e);
  return n;
}

/* A vocabulary-sharded embedding (table (V, E) split over "model") looks up
 * locally and all-reduces the (B, E) result once; a batch-sharded conv and
 * pool need no collective at all; a channel-sharded conv (input channels
 * split) all-reduces its partial sums once. */
static void op_rules(ts_client *c8) {
  ts_mesh *m = ts_mesh_parse("2,4", "data,model", NULL);
  ts_graph *g = ts_graph_new();
  ts_tensor table = ts_input(g, "table", TS_F32, 2, (int64_t[]){16, 4});
  ts_tensor idx = ts_input(g, "idx", TS_I32, 1, (int64_t[]){8});
  ts_graph_add_output(g, ts_gather(g, table, idx));
  step s = {.g = g};
  mark(&s, m, table, "model,None");
  mark(&s, m, idx, "None");
  size_t bytes;
  CHECK(count(c8, g, TS_COLLECTIVE_ALL_REDUCE, 2u, &bytes) == 1 && bytes == 8 * 4 * 4,
        "vocab-sharded gather: one all-reduce of 128 bytes, got %zu bytes", bytes);
  ts_graph_free(g);

  g = ts_graph_new();
  s.g = g;
  ts_tensor x = ts_input(g, "x", TS_F32, 4, (int64_t[]){8, 4, 6, 6});
  ts_tensor w = ts_input(g, "w", TS_F32, 4, (int64_t[]){8, 4, 3, 3});
  ts_pool_params pp = {.kernel = {2, 2}};
  ts_graph_add_output(g, ts_max_pool2d(g, ts_conv2d(g, x, w, &(ts_conv_params){0}), &pp));
  mark(&s, m, x, "data,None,None,None");
  mark(&s, m, w, "model,None,None,None");
  CHECK(count(c8, g, TS_COLLECTIVE_ALL_REDUCE, 0, &bytes) == 0, "batch/out-channel conv + pool: no collectives");
  ts_clear_sharding(g, x);
  ts_clear_sharding(g, w);
  mark(&s, m, x, "data,model,None,None");
  mark(&s, m, w, "None,model,None,None");
  CHECK(count(c8, g, TS_COLLECTIVE_ALL_REDUCE, 2u, &bytes) == 1 && bytes == 4 * 8 * 4 * 4 * 4,
        "input-channel conv: one all-reduce of the (4, 8, 4, 4) block, got %zu bytes", bytes);
  ts_graph_free(g);

  /* A filter gradient whose x is replicated and dy batch-sharded (auto-sharding
   * leaves the CNN's input x replicated): x is sliced on N where it is, the
   * local gradients all-reduced once (8x4x3x3 f32); dy is never gathered. */
  g = ts_graph_new();
  s.g = g;
  x = ts_input(g, "x", TS_F32, 4, (int64_t[]){8, 4, 6, 6});
  ts_tensor dy = ts_input(g, "dy", TS_F32, 4, (int64_t[]){8, 8, 4, 4});
  ts_graph_add_output(g, ir_conv_bwd_filter(g, x, dy, &(ts_conv_params){0}, (int64_t[]){8, 4, 3, 3}));
  mark(&s, m, x, "None,None,None,None");
  mark(&s, m, dy, "data,None,None,None");
  CHECK(count(c8, g, TS_COLLECTIVE_ALL_REDUCE, 1u, &bytes) == 1 && bytes == 8 * 4 * 3 * 3 * 4,
        "filter gradient, x replicated, dy on data: one all-reduce of 1152 bytes, got %zu bytes", bytes);
  ts_graph_free(g);

  /* A dim split over data+model whose user wants it over data alone: each
   * device gathers its data block from its model group (2 x 4 rows of 4),
   * not the whole dim from all 8 devices and a slice of it. */
  g = ts_graph_new();
  s.g = g;
  x = ts_input(g, "x", TS_F32, 2, (int64_t[]){16, 4});
  ts_tensor y = ts_add(g, x, x);
  ts_graph_add_output(g, y);
  mark(&s, m, x, "data+model,None");
  mark(&s, m, y, "data,None");
  CHECK(count(c8, g, TS_COLLECTIVE_ALL_GATHER, 2u, &bytes) == 1 && bytes == 8 * 4 * 4,
        "data+model -> data: one all-gather over model of 128 bytes, got %zu bytes", bytes);
  ts_executable *e = ts_compile(c8, g, NULL); /* and the rows keep their order */
  CHECK(e != NULL, "%s", ts_last_error());
  if (e) {
    float xv[64], yv[64] = {0};
    for (int i = 0; i < 64; i++) xv[i] = (float)i;
    ts_buffer *in = ts_buffer_from_host(c8, TS_F32, 2, (int64_t[]){16, 4}, xv), *out = NULL;
    CHECK_OK(ts_execute(e, &in, &out));
    CHECK(out && ts_buffer_read(out, yv, sizeof yv) == 0, "reading y: %s", ts_last_error());
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += yv[i] != 2.f * (float)i;
    CHECK(bad == 0, "data+model -> data: %d of 64 values of x + x wrong (y[4] = %g)", bad, yv[4]);
    ts_buffer_free(out);
    ts_buffer_free(in);
    ts_executable_free(e);
  }
  ts_graph_free(g);
  ts_mesh_free(m);
}

/* The collectives of program e as "kind/axes/bytes " entries, in order. */
static void coll_string(ts_executable *e, char *buf, size_t len) {
  buf[0] = 0;
  for (int i = 0; i < ts_executable_num_collectives(e); i++) {
    ts_collective_info ci;
    ts_executable_collective(e, i, &ci);
    size_t at = strlen(buf);
    snprintf(buf + at, len - at, "%s/%u/%zu ", ts_collective_kind_name(ci.kind), ci.mesh_axes, ci.bytes);
  }
}

/* Compiles g (inputs x (M, K) and w, one output), checks its collectives
 * against `want` and its result against the host's product of dot dims dd. */
static void check_dot(ts_client *c8, ts_graph *g, const ts_dot_dims *dd, const int64_t *xs, const int64_t *ws,
                      const int64_t *os, const char *want, const char *what) {
  ts_executable *e = ts_compile(c8, g, NULL);
  CHECK(e != NULL, "%s: %s", what, ts_last_error());
  if (!e) return;
  char got[512];
  coll_string(e, got, sizeof got);
  CHECK(strcmp(got, want) == 0, "%s: collectives \"%s\", want \"%s\"", what, got, want);
  float xv[256], wv[256], ov[256], ref[256] = {0};
  for (int i = 0; i < xs[0] * xs[1]; i++) xv[i] = (float)((i * 7) % 13) - 6.f;
  for (int i = 0; i < ws[0] * ws[1]; i++) wv[i] = (float)((i * 5) % 11) - 5.f;
  /* out[i][j] = sum_k x[...] w[...]: x's free dim i, w's free dim j, contracting k */
  int xc = dd->lhs_contract[0], wc = dd->rhs_contract[0];
  for (int i = 0; i < os[0]; i++)
    for (int j = 0; j < os[1]; j++)
      for (int k = 0; k < xs[xc]; k++)
        ref[i * os[1] + j] += xv[xc ? i * xs[1] + k : k * xs[1] + i] * wv[wc ? j * ws[1] + k : k * ws[1] + j];
  ts_buffer *in[2] = {ts_buffer_from_host(c8, TS_F32, 2, xs, xv), ts_buffer_from_host(c8, TS_F32, 2, ws, wv)};
  ts_buffer *out = NULL;
  CHECK_OK(ts_execute(e, in, &out));
  CHECK(out && ts_buffer_read(out, ov, (size_t)(os[0] * os[1]) * 4) == 0, "%s: reading: %s", what, ts_last_error());
  int bad = 0;
  for (int i = 0; i < os[0] * os[1]; i++) bad += ov[i] != ref[i]; /* small integers: exact */
  CHECK(bad == 0, "%s: %d of %lld values wrong", what, bad, (long long)(os[0] * os[1]));
  ts_buffer_free(out);
  ts_buffer_free(in[0]);
  ts_buffer_free(in[1]);
  ts_executable_free(e);
}

/* A result dim split over data+model whose model the operands contract
 * (auto-sharding's plans for the GPT on 2x2): the dot runs split over data
 * on that dim and reduce-scatters its partial sum over model into it, with
 * no gather of the operand's data blocks (which doubled the FLOPs); a
 * weight gradient contracting data, its result dim split over model by dy
 * and wanted over data+model, reduce-scatters over data (giving model, data)
 * and permutes the blocks into data, model, no all-reduce, no dy gathered. */
static void dot_partial_rules(ts_client *c8) {
  ts_mesh *m = ts_mesh_parse("2,4", "data,model", NULL);
  step s;
  ts_graph *g = s.g = ts_graph_new();
  int64_t xs[2] = {16, 8}, ws[2] = {8, 12}, os[2] = {16, 12};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, xs), w = ts_input(g, "w", TS_F32, 2, ws);
  ts_dot_dims dd = {.n_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  ts_tensor y = ts_dot_general(g, x, w, &dd);
  ts_graph_add_output(g, y);
  mark(&s, m, x, "data,model");
  mark(&s, m, w, "model,None");
  mark(&s, m, y, "data+model,None");
  /* the (8, 12) block reduce-scattered over model: 384 bytes */
  check_dot(c8, g, &dd, xs, ws, os, "reduce-scatter/2/384 ", "contracted model into data+model");
  ts_graph_free(g);

  g = s.g = ts_graph_new();
  int64_t hs[2] = {16, 4}, ds[2] = {16, 16}, gs[2] = {4, 16};
  x = ts_input(g, "h", TS_F32, 2, hs), w = ts_input(g, "dy", TS_F32, 2, ds);
  ts_dot_dims dw = {.n_contract = 1, .lhs_contract = {0}, .rhs_contract = {0}};
  y = ts_dot_general(g, x, w, &dw);
  ts_graph_add_output(g, y);
  mark(&s, m, x, "data+model,None");
  mark(&s, m, w, "data,model");
  mark(&s, m, y, "None,data+model");
  /* h gathered over model to its data block (8, 4); the (4, 4) partial sum
   * scattered over data; its (4, 2) block permuted */
  check_dot(c8, g, &dw, hs, ds, gs, "all-gather/2/128 reduce-scatter/1/64 collective-permute/3/32 ",
            "weight gradient into data+model");
  ts_graph_free(g);

  /* a chain of moves, data: dim 0 -> 1 while model: dim 2 -> 0 (the GPT's
   * attention output into its head-merging reshape on 4x2): an all-to-all
   * each, not both dims gathered */
  g = s.g = ts_graph_new();
  x = ts_input(g, "x", TS_F32, 3, (int64_t[]){8, 8, 8});
  y = ts_add(g, x, x);
  ts_graph_add_output(g, y);
  mark(&s, m, x, "data,None,model");
  mark(&s, m, y, "model,data,None");
  ts_executable *e = ts_compile(c8, g, NULL);
  CHECK(e != NULL, "chained all-to-alls: %s", ts_last_error());
  if (e) {
    char got[256];
    coll_string(e, got, sizeof got);
    CHECK(strcmp(got, "all-to-all/1/256 all-to-all/2/256 ") == 0, "chained moves: collectives \"%s\"", got);
    float xv[512], yv[512] = {0};
    for (int i = 0; i < 512; i++) xv[i] = (float)i;
    ts_buffer *in = ts_buffer_from_host(c8, TS_F32, 3, (int64_t[]){8, 8, 8}, xv), *out = NULL;
    CHECK_OK(ts_execute(e, &in, &out));
    CHECK(out && ts_buffer_read(out, yv, sizeof yv) == 0, "reading y: %s", ts_last_error());
    int bad = 0;
    for (int i = 0; i < 512; i++) bad += yv[i] != 2.f * (float)i;
    CHECK(bad == 0, "chained moves: %d of 512 values wrong", bad);
    ts_buffer_free(out);
    ts_buffer_free(in);
    ts_executable_free(e);
  }
  ts_graph_free(g);
  ts_mesh_free(m);
}

int main(void) {
  ts_test_init("spmd_collectives", 1);
  ts_client_options o1 = {.num_threads = 2, .num_devices = 1}, o8 = {.num_threads = 2, .num_devices = 8};
  ts_client *c1 = ts_client_new(&o1), *c8 = ts_client_new(&o8);
  step s = build();
  size_t np = param_bytes(&s);
  float *ref = malloc(np), *got = malloc(np);
  double ref_loss = run_step(c1, &s, ref);

  /* data parallel on data=8 */
  ts_mesh *dp = ts_mesh_parse("8", "data", NULL);
  mark(&s, dp, s.x, "data,None");
  mark(&s, dp, s.y, "data");
  for (int i = 0; i < 6; i++) mark(&s, dp, s.p[i], i % 2 ? "None" : "None,None");
  ts_executable *e = compile_on(c8, &s);
  if (e) {
    size_t grad_bytes = 0;
    int n_scalar = 0;
    for (int i = 0; i < ts_executable_num_collectives(e); i++) {
      ts_collective_info ci;
      CHECK_OK(ts_executable_collective(e, i, &ci));
      CHECK(ci.kind == TS_COLLECTIVE_ALL_REDUCE, "data parallel: collective %d is a %s", i,
            ts_collective_kind_name(ci.kind));
      CHECK(ci.mesh_axes == 1u && ci.group_size == 8, "data parallel: collective %d is not over data", i);
      if (ci.bytes == 4) n_scalar++;
      else grad_bytes += ci.bytes;
    }
    CHECK(grad_bytes == np - 4 * (n_scalar - 1), "data parallel: all-reduced %zu gradient bytes, parameters have %zu",
          grad_bytes, np);
    CHECK(n_scalar >= 1 && n_scalar <= 2, "data parallel: %d scalar all-reduces (the loss)", n_scalar);
    char *rep = ts_executable_collectives_to_string(e);
    if (ts_test_failed || getenv("SHOW")) fprintf(stderr, "%s", rep);
    free(rep);
    ts_executable_free(e);
  }
  double loss = run_step(c8, &s, got);
  CHECK(fabs(loss - ref_loss) < 1e-5, "data parallel: loss %.9g vs 1 device %.9g", loss, ref_loss);
  compare(ref, got, np / 4, "data parallel");
  for (int i = 0; i < 8; i++) ts_clear_sharding(s.g, ts_graph_input(s.g, i));

  /* Megatron block on data=2,model=4: fc1 column-parallel, fc2 row-parallel */
  ts_mesh *mp = ts_mesh_parse("2,4", "data,model", NULL);
  mark(&s, mp, s.x, "data,None");
  mark(&s, mp, s.y, "data");
  mark(&s, mp, s.p[0], "None,None");
  mark(&s, mp, s.p[1], "None");
  mark(&s, mp, s.p[2], "None,model");
  mark(&s, mp, s.p[3], "model");
  mark(&s, mp, s.p[4], "model,None");
  mark(&s, mp, s.p[5], "None");
  e = compile_on(c8, &s);
  if (e) {
    int fwd = 0, bwd = 0, other = 0;
    size_t data_bytes = 0;
    for (int i = 0; i < ts_executable_num_collectives(e); i++) {
      ts_collective_info ci;
      ts_executable_collective(e, i, &ci);
      if (ci.kind != TS_COLLECTIVE_ALL_REDUCE) {
        other++;
        continue;
      }
      if (ci.mesh_axes == 2u) { /* over model: activations */
        if (ci.cause == s.fwd_act) {
          fwd++;
          CHECK(ci.bytes == (size_t)(B / 2) * C * 4, "megatron: forward all-reduce of %zu bytes", ci.bytes);
        } else {
          bwd++;
          CHECK(ci.bytes == (size_t)(B / 2) * H0 * 4, "megatron: backward all-reduce of %zu bytes", ci.bytes);
        }
      } else if (ci.mesh_axes == 1u) {
        if (ci.bytes != 4) data_bytes += ci.bytes;
      } else {
        other++;
      }
    }
    CHECK(fwd == 1 && bwd == 1, "megatron: %d forward and %d backward activation all-reduces (want 1 and 1)", fwd, bwd);
    CHECK(other == 0, "megatron: %d unexpected collectives", other);
    /* gradients over data: w0, b0, b2 whole; w1, b1, w2 a quarter each */
    size_t want = (size_t)(D * H0 + H0 + C) * 4 + (size_t)(H0 * H + H + H * C) * 4 / 4;
    CHECK(data_bytes == want, "megatron: %zu gradient bytes all-reduced over data, want %zu", data_bytes, want);
    char *rep = ts_executable_collectives_to_string(e);
    if (ts_test_failed || getenv("SHOW")) fprintf(stderr, "%s", rep);
    free(rep);
    ts_executable_free(e);
  }
  loss = run_step(c8, &s, got);
  CHECK(fabs(loss - ref_loss) < 1e-5, "megatron: loss %.9g vs 1 device %.9g", loss, ref_loss);
  compare(ref, got, np / 4, "megatron");

  op_rules(c8);
  dot_partial_rules(c8);
  ts_mesh_free(dp);
  ts_mesh_free(mp);
  free(ref);
  free(got);
  ts_graph_free(s.g);
  ts_client_free(c1);
  ts_client_free(c8);
  return ts_test_finish();
}
