/* test_autodiff.c — the autodiff graph rewrite checked symbolically (no
 * execution): gradient dtypes and shapes for every differentiable op, zeros
 * for a wrt the loss does not depend on, which operands are cut off
 * (indices, predicates), second derivatives, and the errors for a non-scalar
 * or integer loss, an integer wrt, a bad cotangent and a fused node. The
 * values are checked against finite differences in test_gradcheck.c. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir.h" /* node internals: ops of gradient nodes, building a FUSED node */
#include "tessel/tessel.h"

static bool shape_is(const ts_graph *g, ts_tensor t, ts_dtype dt, int rank, const int64_t *shape) {
  if (t == TS_NONE || ts_tensor_dtype(g, t) != dt || ts_tensor_rank(g, t) != rank) return false;
  for (int d = 0; d < rank; d++)
    if (ts_tensor_shape(g, t)[d] != shape[d]) return false;
  return true;
}

static bool contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* loss = sum(out * c) with c an input shaped like out; d loss / d xs must have
 * xs' shapes and the graph must verify. */
static void check_grad_shapes(const char *what, ts_graph *g, ts_tensor out, int n, const ts_tensor *xs) {
  CHECK(out != TS_NONE, "%s: building the op failed: %s", what, ts_last_error());
  if (out == TS_NONE) return;
  ts_tensor c = ts_input(g, "cotangent", ts_tensor_dtype(g, out), ts_tensor_rank(g, out), ts_tensor_shape(g, out));
  ts_tensor loss = ts_sum_all(g, ts_mul(g, out, c));
  ts_tensor grads[4];
  int rc = ts_grad(g, loss, n, xs, grads);
  CHECK(rc == 0, "%s: ts_grad: %s", what, ts_last_error());
  if (rc) return;
  for (int i = 0; i < n; i++) {
    int64_t shape[TS_MAX_RANK];
    int rank = ts_tensor_rank(g, xs[i]);
    memcpy(shape, ts_tensor_shape(g, xs[i]), sizeof shape);
    CHECK(shape_is(g, grads[i], ts_tensor_dtype(g, xs[i]), rank, shape), "%s: gradient %d has the wrong shape", what,
          i);
  }
  CHECK(ts_graph_verify(g) == 0, "%s: graph does not verify after ts_grad: %s", what, ts_last_error());
}

static void test_op_shapes(void) {
  ts_dtype f = TS_F32;
  int64_t s34[] = {3, 4}, s4[] = {4}, s234[] = {2, 3, 4}, s245[] = {2, 4, 5};
  int dims01[] = {0, 1}, dim1[] = {1};

  /* every unary op */
  ts_tensor (*unary[])(ts_graph *, ts_tensor) = {ts_neg, ts_abs, ts_exp, ts_log, ts_log1p,
                                                 ts_tanh, ts_sqrt, ts_rsqrt, ts_sigmoid, ts_erf};
  for (size_t i = 0; i < sizeof unary / sizeof *unary; i++) {
    ts_graph *g = ts_graph_new();
    ts_tensor x = ts_input(g, "x", f, 2, s34);
    check_grad_shapes("unary", g, unary[i](g, x), 1, &x);
    ts_graph_free(g);
  }
  /* every binary op, with a broadcast operand */
  ts_tensor (*binary[])(ts_graph *, ts_tensor, ts_tensor) = {ts_add, ts_sub, ts_mul, ts_div, ts_max, ts_min, ts_pow};
  for (size_t i = 0; i < sizeof binary / sizeof *binary; i++) {
    ts_graph *g = ts_graph_new();
    ts_tensor x[2] = {ts_input(g, "a", f, 2, s34), ts_input(g, "b", f, 1, s4)};
    check_grad_shapes("binary", g, binary[i](g, x[0], x[1]), 2, x);
    ts_graph_free(g);
  }
  { /* convert f32 -> f64 and back */
    ts_graph *g = ts_graph_new();
    ts_tensor x = ts_input(g, "x", f, 2, s34);
    check_grad_shapes("convert", g, ts_convert(g, x, TS_F64), 1, &x);
    ts_graph_free(g);
  }
  { /* select: the predicate gets no gradient, both branches do */
    ts_graph *g = ts_graph_new();
    ts_tensor x[2] = {ts_input(g, "a", f, 2, s34), ts_input(g, "b", f, 2, s34)};
    ts_tensor p = ts_compare(g, x[0], x[1], TS_CMP_GT);
    check_grad_shapes("select", g, ts_select(g, p, x[0], x[1]), 2, x);
    ts_graph_free(g);
  }
  { /* shape ops */
    ts_graph *g = ts_graph_new();
    ts_tensor x = ts_input(g, "x", f, 3, s234);
    int perm[] = {2, 0, 1};
    int64_t st[] = {0, 1, 1}, lim[] = {2, 3, 4}, str[] = {1, 1, 2}, lo[] = {1, 0, 2}, hi[] = {0, 3, 1};
    int64_t r[] = {6, 4};
    ts_tensor parts[3] = {ts_transpose(g, x, perm), ts_reshape(g, ts_slice(g, x, st, lim, str), 1, (int64_t[]){8}),
                          ts_reshape(g, ts_pad(g, x, lo, hi, 0.0), 1, (int64_t[]){-1})};
    ts_tensor y = ts_add(g, ts_sum_all(g, parts[0]), ts_sum_all(g, parts[1]));
    y = ts_add(g, y, ts_sum_all(g, parts[2]));
    y = ts_add(g, ts_reshape(g, x, 2, r), y); /* rank-0 y broadcasts */
    check_grad_shapes("shape ops", g, y, 1, &x);
    ts_graph_free(g);
  }
  { /* concatenate of three, one of them not a wrt */
    ts_graph *g = ts_graph_new();
    ts_tensor x[3] = {ts_input(g, "a", f, 2, s34), ts_input(g, "b", f, 2, (int64_t[]){3, 2}),
                      ts_input(g, "c", f, 2, (int64_t[]){3, 1})};
    check_grad_shapes("concatenate", g, ts_concatenate(g, 3, x, 1), 2, x);
    ts_graph_free(g);
  }
  { /* dot_general with a batch dim and transposed contracting dims */
    ts_graph *g = ts_graph_new();
    ts_tensor x[2] = {ts_input(g, "a", f, 3, s234), ts_input(g, "b", f, 3, s245)};
    ts_dot_dims d = {.n_batch = 1, .n_contract = 1, .lhs_batch = {0}, .rhs_batch = {0}, .lhs_contract = {2},
                     .rhs_contract = {1}};
    check_grad_shapes("dot_general", g, ts_dot_general(g, x[0], x[1], &d), 2, x);
    ts_graph_free(g);
  }
  { /* conv, pooling */
    ts_graph *g = ts_graph_new();
    ts_tensor x[2] = {ts_input(g, "x", f, 4, (int64_t[]){2, 4, 7, 7}), ts_input(g, "w", f, 4, (int64_t[]){6, 2, 3, 3})};
    ts_conv_params p = {.stride = {2, 2}, .pad_lo = {1, 1}, .pad_hi = {1, 0}, .dilation = {1, 2}, .groups = 2};
    ts_pool_params pp = {.kernel = {2, 2}};
    ts_tensor y = ts_conv2d(g, x[0], x[1], &p);
    y = ts_add(g, ts_max_pool2d(g, y, &pp), ts_avg_pool2d(g, y, &pp));
    check_grad_shapes("conv+pool", g, y, 2, x);
    ts_graph_free(g);
  }
  { /* reductions over middle dims */
    ts_reduce_kind kinds[] = {TS_REDUCE_SUM, TS_REDUCE_MEAN, TS_REDUCE_MAX, TS_REDUCE_MIN};
    for (int k = 0; k < 4; k++) {
      ts_graph *g = ts_graph_new();
      ts_tensor x = ts_input(g, "x", f, 3, s234);
      check_grad_shapes("reduce", g, ts_reduce(g, x, kinds[k], 1, dim1, k == 1), 1, &x);
      ts_graph_free(g);
    }
    ts_graph *g = ts_graph_new();
    ts_tensor x = ts_input(g, "x", f, 3, s234);
    check_grad_shapes("reduce 2 dims", g, ts_reduce(g, x, TS_REDUCE_SUM, 2, dims01, false), 1, &x);
    ts_graph_free(g);
  }
  { /* gather and scatter_add: the indices are not differentiated */
    ts_graph *g = ts_graph_new();
    ts_tensor t = ts_input(g, "table", f, 2, (int64_t[]){5, 3});
    ts_tensor idx = ts_input(g, "idx", TS_I32, 2, (int64_t[]){2, 2});
    ts_tensor upd = ts_input(g, "upd", f, 3, (int64_t[]){2, 2, 3});
    ts_tensor x[2] = {t, upd};
    ts_tensor y = ts_add(g, ts_scatter_add(g, t, idx, upd), ts_reduce(g, ts_gather(g, t, idx), TS_REDUCE_SUM, 2,
                                                                        dims01, false));
    check_grad_shapes("gather/scatter_add", g, y, 2, x);
    ts_graph_free(g);
  }
}

static void test_zeros_and_cutoffs(void) {
  int64_t s3[] = {3}, s23[] = {2, 3};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 1, s3);
  ts_tensor u = ts_input(g, "unused", TS_F64, 2, s23);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, x, x));
  ts_tensor wrt[2] = {x, u}, grads[2];
  CHECK_OK(ts_grad(g, loss, 2, wrt, grads));
  CHECK(shape_is(g, grads[1], TS_F64, 2, s23), "unused wrt gets a gradient of its shape");
  CHECK(grads[1] != TS_NONE && ts_node_at(g, grads[1])->op == TS_OP_CONSTANT &&
            ts_node_at(g, grads[1])->data == NULL && ts_node_at(g, grads[1])->attr.value == 0.0,
        "unused wrt gets a zeros splat");
  ts_graph_free(g);

  /* x reaches the loss only through a comparison: the gradient is zero */
  g = ts_graph_new();
  x = ts_input(g, "x", TS_F32, 1, s3);
  ts_tensor y = ts_input(g, "y", TS_F32, 1, s3);
  ts_tensor sel = ts_select(g, ts_compare(g, x, ts_scalar(g, TS_F32, 0.0), TS_CMP_GT), y, ts_scalar(g, TS_F32, 0.0));
  loss = ts_sum_all(g, sel);
  CHECK_OK(ts_grad(g, loss, 1, &x, grads));
  CHECK(grads[0] != TS_NONE && ts_node_at(g, grads[0])->op == TS_OP_CONSTANT, "gradient through compare is zeros");
  ts_graph_free(g);

  /* a wrt that is the loss itself gets the seed 1 */
  g = ts_graph_new();
  x = ts_input(g, "x", TS_F32, 0, NULL);
  CHECK_OK(ts_grad(g, x, 1, &x, grads));
  CHECK(grads[0] != TS_NONE && ts_node_at(g, grads[0])->op == TS_OP_CONSTANT &&
            ts_node_at(g, grads[0])->attr.value == 1.0,
        "d x / d x = 1");
  ts_graph_free(g);
}

static void test_second_order(void) {
  /* d/dx sum(d/dx sum(x^3)) = d/dx sum(3 x^2) = 6x: builds and verifies */
  int64_t s3[] = {3};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F64, 1, s3);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, x, ts_mul(g, x, x)));
  ts_tensor g1, g2;
  CHECK_OK(ts_grad(g, loss, 1, &x, &g1));
  CHECK_OK(ts_grad(g, ts_sum_all(g, g1), 1, &x, &g2));
  CHECK(shape_is(g, g2, TS_F64, 1, s3), "second derivative shape");
  CHECK_OK(ts_graph_verify(g));
  ts_graph_free(g);
}

static void test_vjp(void) {
  int64_t s23[] = {2, 3}, s3[] = {3};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s23);
  ts_tensor outs[2] = {ts_exp(g, x), ts_reduce(g, x, TS_REDUCE_SUM, 1, (int[]){0}, false)};
  ts_tensor cts[2] = {ts_input(g, "c0", TS_F32, 2, s23), ts_input(g, "c1", TS_F32, 1, s3)};
  ts_tensor grad;
  CHECK_OK(ts_vjp(g, 2, outs, cts, 1, &x, &grad));
  CHECK(shape_is(g, grad, TS_F32, 2, s23), "vjp gradient shape");
  /* a cotangent of the wrong shape is rejected, naming both shapes */
  ts_tensor bad[2] = {cts[1], cts[0]};
  CHECK(ts_vjp(g, 2, outs, bad, 1, &x, &grad) == -1 && grad == TS_NONE, "bad cotangent rejected");
  CHECK(contains(ts_last_error(), "f32[3]") && contains(ts_last_error(), "f32[2,3]"), "message: %s",
        ts_last_error());
  ts_graph_free(g);
}

static void test_errors(void) {
  int64_t s34[] = {3, 4}, s3[] = {3};
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s34);
  ts_tensor y = ts_exp(g, x), grad;
  CHECK(ts_grad(g, y, 1, &x, &grad) == -1, "non-scalar loss rejected");
  CHECK(contains(ts_last_error(), "f32[3,4]") && contains(ts_last_error(), "scalar"), "message: %s", ts_last_error());

  ts_tensor xi = ts_input(g, "xi", TS_I32, 0, NULL);
  CHECK(ts_grad(g, xi, 1, &x, &grad) == -1, "integer loss rejected");
  CHECK(contains(ts_last_error(), "i32[]"), "message: %s", ts_last_error());

  ts_tensor loss = ts_sum_all(g, y);
  CHECK(ts_grad(g, loss, 1, &xi, &grad) == -1, "integer wrt rejected");
  CHECK(contains(ts_last_error(), "i32") && contains(ts_last_error(), "wrt[0]"), "message: %s", ts_last_error());

  CHECK(ts_grad(g, TS_NONE, 1, &x, &grad) == -1, "TS_NONE loss rejected");
  ts_graph_free(g);

  /* a fused node (compiler-only) has no adjoint */
  g = ts_graph_new();
  x = ts_input(g, "x", TS_F32, 1, s3);
  ts_attr a = {0};
  a.fused = malloc(sizeof *a.fused);
  a.fused->n = 1;
  a.fused->ins = calloc(1, sizeof *a.fused->ins);
  a.fused->ins[0] = (ts_fused_instr){.op = TS_OP_EXP, .dtype = TS_F32, .a = -1};
  ts_tensor fz = ir_append(g, TS_OP_FUSED, TS_F32, 1, s3, 1, &x, &a);
  CHECK(ts_grad(g, ts_sum_all(g, fz), 1, &x, &grad) == -1, "fused node rejected");
  CHECK(contains(ts_last_error(), "fused"), "message: %s", ts_last_error());
  ts_graph_free(g);

  /* second derivative through max pooling is reported, not silently wrong */
  g = ts_graph_new();
  x = ts_input(g, "x", TS_F32, 4, (int64_t[]){1, 1, 4, 4});
  ts_pool_params pp = {.kernel = {2, 2}};
  ts_tensor g1;
  CHECK_OK(ts_grad(g, ts_sum_all(g, ts_max_pool2d(g, x, &pp)), 1, &x, &g1));
  ts_tensor c = ts_input(g, "c", TS_F32, 4, (int64_t[]){1, 1, 4, 4});
  ts_tensor c2 = ts_input(g, "c2", TS_F32, 4, (int64_t[]){1, 1, 2, 2});
  ts_tensor dy = ts_mul(g, ts_max_pool2d(g, x, &pp), c2);
  ts_tensor mg;
  CHECK_OK(ts_vjp(g, 1, &dy, &c2, 1, &x, &mg)); /* maxpool_grad(x, c2) built here */
  (void)c;
  CHECK(ts_grad(g, ts_sum_all(g, ts_mul(g, mg, c)), 1, &c2, &grad) == -1, "max_pool2d_grad w.r.t. dy rejected");
  CHECK(contains(ts_last_error(), "max_pool2d_grad"), "message: %s", ts_last_error());
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_autodiff", 1);
  test_op_shapes();
  test_zeros_and_cutoffs();
  test_second_order();
  test_vjp();
  test_errors();
  return ts_test_finish();
}
