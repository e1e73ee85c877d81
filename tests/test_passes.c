/* test_passes.c — compiler passes and the memory plan: CSE merges duplicates,
 * DCE drops dead nodes, simplify removes identity ops, fusion turns an
 * elementwise chain into one FUSED node, every pass preserves the computed
 * values (random graphs, all passes on vs. off), fusion's ReLU-mask and
 * sum(neg) rewrites keep the bits, and the plan reuses memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "harness.h"
#include "opt/opt.h"
#include "tessel/tessel.h"

static int count_op(const ts_graph *g, ts_op op) {
  int c = 0;
  for (int i = 0; i < g->n_nodes; i++) c += g->nodes[i].op == op;
  return c;
}

static const ts_compile_options no_fusion = {.no_fusion = true};

static void test_cse(void) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {4, 5};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s);
  ts_tensor y = ts_input(g, "y", TS_F32, 2, s); /* same type as x: never merged */
  ts_tensor a = ts_exp(g, x), b = ts_exp(g, x);
  ts_tensor c = ts_add(g, ts_mul(g, a, y), ts_mul(g, b, y)); /* two equal muls after merging a, b */
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  ts_tensor r1 = ts_rng_uniform(g, seed, 1, TS_F32, 2, s), r2 = ts_rng_uniform(g, seed, 2, TS_F32, 2, s);
  ts_tensor d = ts_add(g, c, ts_add(g, r1, r2));
  int64_t k1 = 3, k2 = 3;
  ts_tensor e = ts_add(g, ts_full(g, TS_F32, 2, s, (double)k1), ts_full(g, TS_F32, 2, s, (double)k2));
  CHECK(ts_graph_add_output(g, ts_add(g, d, e)) == 0, "%s", ts_last_error());
  ts_graph *o = compile_graph(g, &no_fusion);
  CHECK(o != NULL, "%s", ts_last_error());
  if (o) {
    CHECK(count_op(o, TS_OP_EXP) == 1, "exp nodes after cse: %d", count_op(o, TS_OP_EXP));
    CHECK(count_op(o, TS_OP_MUL) == 1, "mul nodes after cse: %d", count_op(o, TS_OP_MUL));
    CHECK(count_op(o, TS_OP_RNG_UNIFORM) == 2, "rng with different keys merged");
    CHECK(count_op(o, TS_OP_CONSTANT) == 1, "equal constants: %d", count_op(o, TS_OP_CONSTANT));
    CHECK(o->n_inputs == 3, "inputs kept: %d", o->n_inputs);
    CHECK(ts_graph_verify(o) == 0, "%s", ts_last_error());
  }
  ts_graph_free(o);
  ts_graph_free(g);
}

static void test_dce(void) {
  ts_graph *g = ts_graph_new();
  int64_t s[1] = {16};
  ts_tensor x = ts_input(g, "x", TS_F32, 1, s);
  ts_input(g, "unused", TS_F32, 1, s);
  ts_tensor z = ts_input(g, "z", TS_F32, 1, s);
  ts_tensor dead = ts_log(g, ts_exp(g, x));
  (void)dead;
  ts_graph_add_output(g, ts_tanh(g, ts_add(g, x, z)));
  ts_graph *o = compile_graph(g, &no_fusion);
  CHECK(o != NULL, "%s", ts_last_error());
  if (o) {
    CHECK(count_op(o, TS_OP_LOG) == 0 && count_op(o, TS_OP_EXP) == 0, "dead nodes kept");
    CHECK(o->n_nodes == 5, "nodes after dce: %d (want 3 inputs + add + tanh)", o->n_nodes);
    CHECK(o->n_inputs == 3 && strcmp(o->nodes[o->inputs[1]].name, "unused") == 0 &&
              strcmp(o->nodes[o->inputs[2]].name, "z") == 0,
          "inputs keep order and names");
  }
  ts_graph_free(o);
  ts_graph_free(g);
}

static void test_simplify(void) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {6, 4}, flat[1] = {24}, s3[3] = {2, 3, 4};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s);
  ts_tensor t = ts_convert(g, x, TS_F32);
  t = ts_mul(g, t, ts_scalar(g, TS_F32, 1.0));
  t = ts_add(g, ts_full(g, TS_F32, 2, s, 0.0), t);
  t = ts_sub(g, t, ts_scalar(g, TS_F32, 0.0));
  t = ts_div(g, t, ts_scalar(g, TS_F32, 1.0));
  t = ts_reshape(g, ts_reshape(g, ts_reshape(g, t, 1, flat), 3, s3), 2, s);
  int perm[2] = {0, 1};
  t = ts_transpose(g, t, perm);
  int64_t st[2] = {0, 0};
  t = ts_slice(g, t, st, s, NULL);
  t = ts_neg(g, ts_neg(g, t));
  t = ts_broadcast_to(g, t, 2, s);
  CHECK(t != TS_NONE, "%s", ts_last_error());
  ts_graph_add_output(g, t);
  ts_graph *o = compile_graph(g, &no_fusion);
  CHECK(o != NULL, "%s", ts_last_error());
  if (o) {
    CHECK(o->n_nodes == 1 && o->outputs[0] == o->inputs[0], "identity chain left %d nodes", o->n_nodes);
  }
  ts_graph_free(o);
  /* a reshape of a reshape becomes one reshape */
  ts_graph *g2 = ts_graph_new();
  x = ts_input(g2, "x", TS_F32, 2, s);
  ts_graph_add_output(g2, ts_reshape(g2, ts_reshape(g2, ts_exp(g2, x), 1, flat), 3, s3));
  o = compile_graph(g2, &no_fusion);
  CHECK(o && count_op(o, TS_OP_RESHAPE) == 1 && o->n_nodes == 3, "reshape of reshape");
  ts_graph_free(o);
  ts_graph_free(g2);
  ts_graph_free(g);
}

static void test_fusion(void) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {32, 16}, row[1] = {16};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s);
  ts_tensor w = ts_input(g, "w", TS_F32, 2, s);
  ts_tensor b = ts_input(g, "b", TS_F32, 1, row);
  /* y = relu(x * w + b) * 2: mul, add (with a broadcast b: not fusible, it is
   * not a scalar), max with splat 0, mul with splat 2 */
  ts_tensor y = ts_mul(g, ts_relu(g, ts_add(g, ts_mul(g, x, w), b)), ts_scalar(g, TS_F32, 2.0));
  ts_graph_add_output(g, y);
  ts_graph *o = compile_graph(g, NULL);
  CHECK(o != NULL, "%s", ts_last_error());
  if (o) {
    CHECK(count_op(o, TS_OP_FUSED) == 1, "fused nodes: %d", count_op(o, TS_OP_FUSED));
    int n_other = 0;
    for (int i = 0; i < o->n_nodes; i++)
      n_other += ir_op_is_elementwise(o->nodes[i].op) || o->nodes[i].op == TS_OP_CONSTANT;
    CHECK(n_other == 0, "elementwise / constant nodes left: %d", n_other);
    const ts_node *f = &o->nodes[o->outputs[0]];
    CHECK(f->op == TS_OP_FUSED && f->attr.fused->n >= 4, "output is the fused node");
    CHECK(ts_graph_verify(o) == 0, "%s", ts_last_error());
  }
  ts_graph_free(o);
  /* a producer with a user outside the group stays a separate node */
  ts_graph *g2 = ts_graph_new();
  x = ts_input(g2, "x", TS_F32, 2, s);
  ts_tensor e = ts_exp(g2, x);
  ts_graph_add_output(g2, ts_tanh(g2, ts_neg(g2, e)));
  ts_graph_add_output(g2, e);
  o = compile_graph(g2, NULL);
  CHECK(o && count_op(o, TS_OP_EXP) == 1 && count_op(o, TS_OP_FUSED) == 1, "exp with two users kept apart");
  ts_graph_free(o);
  ts_graph_free(g2);
  ts_graph_free(g);
}

/* Fusion's rewrites before grouping (fuse.c): ReLU's backward mask y > 0
 * reads r = max(y, 0) and sum(neg(d)) becomes neg(sum(d)); both give the same
 * bits as the unfused graph, NaN, -0 and subnormals included, and y no longer
 * needs a node of its own. */
static void test_relu_mask_rewrite(ts_client *c) {
  enum { R = 4, C = 8 };
  int64_t s[2] = {R, C};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s), w = ts_input(g, "w", TS_F32, 2, s);
  ts_tensor dy = ts_input(g, "dy", TS_F32, 2, s);
  ts_tensor y = ts_mul(g, x, w); /* w = 1 at run time: y = x bit for bit */
  ts_tensor r = ts_relu(g, y);
  ts_tensor d = ts_select(g, ts_compare(g, y, ts_full(g, TS_F32, 2, s, 0.0), TS_CMP_GT), dy,
                          ts_full(g, TS_F32, 2, s, 0.0));
  int dim0 = 0;
  ts_graph_add_output(g, r);
  ts_graph_add_output(g, d);
  ts_graph_add_output(g, ts_reduce(g, ts_neg(g, d), TS_REDUCE_SUM, 1, &dim0, false));
  ts_executable *on = ts_compile(c, g, NULL);
  ts_executable *off = ts_compile(c, g, &(ts_compile_options){.no_simplify = true, .no_cse = true, .no_fusion = true});
  CHECK(on && off, "%s", ts_last_error());
  if (on && off) {
    int full_neg = 0;
    for (int i = 0; i < on->g->n_nodes; i++)
      full_neg += on->g->nodes[i].op == TS_OP_NEG && ts_shape_numel(on->g->nodes[i].rank, on->g->nodes[i].shape) == R * C;
    CHECK(full_neg == 0, "sum(neg(d)): %d full-size NEG nodes left", full_neg);
    float xv[R * C], wv[R * C], dv[R * C];
    const float special[] = {NAN, -0.0f, 0.0f, 1e-45f, -1e-45f, 1e-40f, 3.0f, -2.5f};
    for (int i = 0; i < R * C; i++) {
      xv[i] = i < 8 ? special[i] : (float)((i * 37 % 17) - 8) / 4.0f;
      wv[i] = 1.0f;
      dv[i] = (float)(i % 5) + 0.5f;
    }
    float out[2][3][R * C];
    for (int k = 0; k < 2; k++) {
      ts_buffer *in[3] = {ts_buffer_from_host(c, TS_F32, 2, s, xv), ts_buffer_from_host(c, TS_F32, 2, s, wv),
                          ts_buffer_from_host(c, TS_F32, 2, s, dv)};
      ts_buffer *o[3] = {0};
      CHECK_OK(ts_execute(k ? off : on, in, o));
      for (int j = 0; j < 3; j++) {
        memset(out[k][j], 0, sizeof out[k][j]);
        if (o[j]) ts_buffer_read(o[j], out[k][j], j < 2 ? sizeof out[k][j] : C * sizeof(float));
        ts_buffer_free(o[j]);
      }
      for (int j = 0; j < 3; j++) ts_buffer_free(in[j]);
    }
    for (int j = 0; j < 3; j++)
      CHECK(!memcmp(out[0][j], out[1][j], sizeof out[0][j]), "output %d differs from the unfused graph", j);
  }
  ts_executable_free(on);
  ts_executable_free(off);
  ts_graph_free(g);
}

/* ---- random graphs: all passes on vs. all off ---- */
static uint64_t rng_state;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static int pick(int n) { return (int)(next_u64() % (uint64_t)n); }

#define RN 6 /* every value is (RN, RN) f32 */

static ts_graph *random_graph(int n_ops) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {RN, RN}, flat[1] = {RN * RN}, col[2] = {RN, 1};
  ts_tensor v[256];
  int n = 0;
  v[n++] = ts_input(g, "a", TS_F32, 2, s);
  v[n++] = ts_input(g, "b", TS_F32, 2, s);
  v[n++] = ts_input(g, "c", TS_F32, 2, s);
  for (int k = 0; k < n_ops && n < 250; k++) {
    ts_tensor x = v[pick(n)], y = v[pick(n)], r = TS_NONE;
    switch (pick(12)) {
    case 0: r = ts_tanh(g, x); break;
    case 1: r = ts_sigmoid(g, x); break;
    case 2: r = ts_neg(g, ts_neg(g, x)); break;
    case 3: r = ts_add(g, x, y); break;
    case 4: r = ts_mul(g, x, ts_tanh(g, y)); break;
    case 5: r = ts_sub(g, ts_max(g, x, y), ts_min(g, x, y)); break;
    case 6: r = ts_tanh(g, ts_matmul(g, x, y)); break;
    case 7: { int d = 1; r = ts_add(g, x, ts_reduce(g, y, TS_REDUCE_SUM, 1, &d, true)); (void)col; break; }
    case 8: r = ts_mul(g, ts_add(g, x, ts_scalar(g, TS_F32, 0.0)), ts_scalar(g, TS_F32, 0.5)); break;
    case 9: r = ts_reshape(g, ts_exp(g, ts_neg(g, ts_abs(g, ts_reshape(g, x, 1, flat)))), 2, s); break;
    case 10: r = ts_add(g, ts_tanh(g, x), ts_tanh(g, x)); break; /* CSE food */
    default: r = ts_select(g, ts_compare(g, x, y, TS_CMP_LT), x, ts_exp(g, ts_neg(g, ts_abs(g, y)))); break;
    }
    if (r == TS_NONE) break;
    v[n++] = r;
  }
  ts_graph_add_output(g, v[n - 1]);
  ts_graph_add_output(g, v[3 + pick(n - 3)]);
  ts_graph_add_output(g, v[pick(n)]);
  return g;
}

/* Runs e on fresh buffers holding in[3] and reads its 3 outputs into out
 * (a donated output is read back from its input buffer). */
static int run_graph(ts_client *c, ts_executable *e, float in[3][RN * RN], float out[3][RN * RN]) {
  int64_t s[2] = {RN, RN};
  ts_buffer *bufs[3], *o[3] = {0};
  for (int i = 0; i < 3; i++) bufs[i] = ts_buffer_from_host(c, TS_F32, 2, s, in[i]);
  int rc = ts_execute(e, bufs, o);
  for (int k = 0; k < 3 && rc == 0; k++) {
    ts_buffer_read(o[k], out[k], sizeof out[k]);
    bool donated = false;
    for (int i = 0; i < 3; i++) donated = donated || o[k] == bufs[i];
    if (!donated) ts_buffer_free(o[k]);
  }
  for (int i = 0; i < 3; i++) ts_buffer_free(bufs[i]);
  return rc;
}

static void test_random_equivalence(ts_client *c) {
  const ts_compile_options off = {.no_simplify = true, .no_cse = true, .no_fusion = true};
  static float in[3][RN * RN], a[3][RN * RN], b[3][RN * RN];
  for (int trial = 0; trial < 40; trial++) {
    ts_graph *g = random_graph(4 + pick(20));
    if (trial % 3 == 1) CHECK_OK(ts_graph_alias_output(g, 0, ts_graph_input(g, 0))); /* donate "a" */
    CHECK(ts_graph_verify(g) == 0, "trial %d: %s", trial, ts_last_error());
    /* all passes, or all but one, against none */
    ts_compile_options on = {.no_simplify = trial % 4 == 1, .no_cse = trial % 4 == 2, .no_fusion = trial % 4 == 3};
    ts_executable *e_on = ts_compile(c, g, &on), *e_off = ts_compile(c, g, &off);
    CHECK(e_on && e_off, "trial %d: %s", trial, ts_last_error());
    if (!e_on || !e_off) {
      ts_executable_free(e_on);
      ts_executable_free(e_off);
      ts_graph_free(g);
      continue;
    }
    CHECK(ts_graph_verify(e_on->g) == 0, "trial %d: optimized graph: %s", trial, ts_last_error());
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < RN * RN; j++) in[i][j] = (float)((double)(next_u64() % 2001) / 1000.0 - 1.0);
    CHECK_OK(run_graph(c, e_on, in, a));
    CHECK_OK(run_graph(c, e_off, in, b));
    for (int k = 0; k < 3; k++) {
      double worst = 0;
      for (int j = 0; j < RN * RN; j++) {
        double d = fabs((double)a[k][j] - b[k][j]) / (1.0 + fabs((double)b[k][j]));
        if (!(d <= worst)) worst = d;
      }
      CHECK(worst < 1e-5, "trial %d output %d: passes changed values by %g", trial, k, worst);
    }
    if (trial == 0) {
      char *txt = ts_executable_to_string(e_on);
      CHECK(txt && strstr(txt, "memory plan") != NULL, "executable text has the plan");
      free(txt);
    }
    ts_executable_free(e_on);
    ts_executable_free(e_off);
    ts_graph_free(g);
  }
}

static void test_plan_reuse(ts_client *c) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {64, 64};
  ts_tensor t = ts_input(g, "x", TS_F32, 2, s);
  int n_inter = 12;
  for (int i = 0; i < n_inter; i++) t = i % 2 ? ts_tanh(g, t) : ts_exp(g, ts_neg(g, t));
  ts_graph_add_output(g, t);
  ts_executable *e = ts_compile(c, g, &no_fusion);
  CHECK(e != NULL, "%s", ts_last_error());
  if (e) {
    size_t sum = 0;
    for (int i = 0; i < e->g->n_nodes; i++)
      if (e->g->nodes[i].op != TS_OP_INPUT && i != e->g->outputs[0]) sum += 64 * 64 * 4;
    size_t peak = ts_executable_peak_bytes(e);
    CHECK(peak < sum, "peak %zu not below the sum of intermediates %zu", peak, sum);
    CHECK(peak <= 64 * 64 * 4, "an elementwise chain reuses one buffer in place, peak is %zu", peak);
    CHECK(e->plan.values[e->g->outputs[0]].kind == PLAN_OUTPUT, "output computed into the caller's buffer");
  }
  ts_executable_free(e);
  ts_graph_free(g);
}

int main(void) {
  rng_state = ts_test_init("test_passes", 12345) | 1;
  test_cse();
  test_dce();
  test_simplify();
  test_fusion();
  ts_client *c = ts_client_new(NULL);
  CHECK(c != NULL, "%s", ts_last_error());
  if (c) {
    test_plan_reuse(c);
    test_relu_mask_rewrite(c);
    test_random_equivalence(c);
  }
  ts_client_free(c);
  return ts_test_finish();
}
