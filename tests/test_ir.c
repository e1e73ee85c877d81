/* test_ir.c — the graph IR front end: shape/dtype inference of every op,
 * error messages with the offending sizes, the verifier catching corrupted
 * nodes, the printer's exact text and hash stability. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/builders_internal.h"
#include "ir/infer.h"
#include "tessel/tessel.h"

/* t has dtype dt and the given shape. */
static int has_shape(const ts_graph *g, ts_tensor t, ts_dtype dt, int rank, const int64_t *shape) {
  if (t == TS_NONE) {
    fprintf(stderr, "  (TS_NONE: %s)\n", ts_last_error());
    return 0;
  }
  if (ts_tensor_dtype(g, t) != dt || ts_tensor_rank(g, t) != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (ts_tensor_shape(g, t)[i] != shape[i]) return 0;
  return 1;
}
#define SHAPE(t, dt, ...)                                                                     \
  do {                                                                                        \
    const int64_t want_[] = {__VA_ARGS__};                                                    \
    CHECK(has_shape(g, (t), (dt), (int)(sizeof want_ / sizeof want_[0]), want_), "shape of %s", #t); \
  } while (0)
#define SCALAR(t, dt) CHECK(has_shape(g, (t), (dt), 0, NULL), "scalar %s", #t)

/* t is TS_NONE and the message holds every given substring. */
static int failed_with(ts_tensor t, const char *const *subs) {
  if (t != TS_NONE) return 0;
  for (int i = 0; subs[i]; i++)
    if (!strstr(ts_last_error(), subs[i])) {
      fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", ts_last_error(), subs[i]);
      return 0;
    }
  return 1;
}
#define FAILS(expr, ...)                                          \
  do {                                                            \
    ts_clear_error();                                             \
    const char *subs_[] = {__VA_ARGS__, NULL};                    \
    ts_tensor r_ = (expr);                                        \
    CHECK(failed_with(r_, subs_), "%s: got %d, \"%s\"", #expr, r_, ts_last_error()); \
  } while (0)

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static void test_leaves(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, DIMS(2, 3));
  SHAPE(x, TS_F32, 2, 3);
  CHECK(ts_graph_num_inputs(g) == 1 && ts_graph_input(g, 0) == x, "input table");
  CHECK(strcmp(ts_input_name(g, x), "x") == 0, "input name");
  CHECK(ts_graph_find_input(g, "x") == x && ts_graph_find_input(g, "nope") == TS_NONE, "find_input");
  FAILS(ts_input(g, "x", TS_F32, 1, DIMS(4)), "\"x\"", "already used");
  FAILS(ts_input(g, "neg", TS_F32, 1, DIMS(-2)), "negative");
  SCALAR(ts_scalar(g, TS_F64, 2.5), TS_F64);
  SHAPE(ts_full(g, TS_I32, 3, DIMS(1, 2, 3), 7), TS_I32, 1, 2, 3);
  float data[6] = {1, 2, 3, 4, 5, 6};
  ts_tensor c = ts_constant(g, TS_F32, 2, DIMS(3, 2), data);
  SHAPE(c, TS_F32, 3, 2);
  data[0] = 100; /* the constant holds a copy */
  CHECK(((const float *)g->nodes[c].data)[0] == 1.0f, "constant copies its data");
  SHAPE(ts_iota(g, TS_I64, 2, DIMS(4, 5), 1), TS_I64, 4, 5);
  FAILS(ts_iota(g, TS_I64, 2, DIMS(4, 5), 2), "iota", "dim 2");
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  SHAPE(ts_rng_uniform(g, seed, 7, TS_F32, 2, DIMS(3, 4)), TS_F32, 3, 4);
  SHAPE(ts_rng_normal(g, seed, 7, TS_BF16, 1, DIMS(5)), TS_BF16, 5);
  FAILS(ts_rng_uniform(g, seed, 7, TS_I32, 1, DIMS(5)), "rng_uniform", "i32");
  FAILS(ts_rng_uniform(g, x, 7, TS_F32, 1, DIMS(5)), "seed", "f32[2,3]");
  ts_graph_free(g);
}

static void test_elementwise(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor a = ts_input(g, "a", TS_F32, 2, DIMS(2, 3));
  ts_tensor v = ts_input(g, "v", TS_F32, 1, DIMS(3));
  ts_tensor col = ts_input(g, "col", TS_F32, 2, DIMS(2, 1));
  ts_tensor i = ts_input(g, "i", TS_I32, 2, DIMS(2, 3));
  SHAPE(ts_exp(g, a), TS_F32, 2, 3);
  SHAPE(ts_neg(g, i), TS_I32, 2, 3);
  SHAPE(ts_abs(g, i), TS_I32, 2, 3);
  FAILS(ts_exp(g, i), "exp", "i32");
  FAILS(ts_sqrt(g, i), "sqrt", "i32");

  /* equal shapes: no broadcast node */
  int before = ts_graph_num_nodes(g);
  SHAPE(ts_add(g, a, a), TS_F32, 2, 3);
  CHECK(ts_graph_num_nodes(g) == before + 1, "no broadcast for equal shapes");
  /* (2,3) + (3): one broadcast node */
  before = ts_graph_num_nodes(g);
  ts_tensor s = ts_mul(g, a, v);
  SHAPE(s, TS_F32, 2, 3);
  CHECK(ts_graph_num_nodes(g) == before + 2, "one broadcast node inserted");
  CHECK(g->nodes[s - 1].op == TS_OP_BROADCAST && g->nodes[s - 1].attr.dims[0] == 1, "broadcast dims=[1]");
  /* (2,1) - (3) -> (2,3): both sides broadcast */
  SHAPE(ts_sub(g, col, v), TS_F32, 2, 3);
  SHAPE(ts_max(g, ts_scalar(g, TS_F32, 0), a), TS_F32, 2, 3);
  FAILS(ts_add(g, a, ts_input(g, "w", TS_F32, 1, DIMS(4))), "add", "f32[2,3]", "f32[4]", "3 vs 4");
  FAILS(ts_add(g, a, i), "add", "f32[2,3]", "i32[2,3]");
  FAILS(ts_pow(g, i, i), "pow", "i32");

  ts_tensor cmp = ts_compare(g, a, v, TS_CMP_LT);
  SHAPE(cmp, TS_BOOL, 2, 3);
  SHAPE(ts_select(g, cmp, a, ts_scalar(g, TS_F32, 0)), TS_F32, 2, 3);
  SHAPE(ts_select(g, ts_compare(g, v, v, TS_CMP_EQ), col, v), TS_F32, 2, 3);
  FAILS(ts_select(g, a, a, a), "select", "predicate", "bool");
  FAILS(ts_select(g, cmp, a, i), "select", "f32[2,3]", "i32[2,3]");

  before = ts_graph_num_nodes(g);
  SHAPE(ts_convert(g, a, TS_F32), TS_F32, 2, 3);
  CHECK(ts_graph_num_nodes(g) == before + 1, "convert to the same dtype records a node");
  SHAPE(ts_convert(g, a, TS_BF16), TS_BF16, 2, 3);
  SHAPE(ts_convert(g, cmp, TS_I64), TS_I64, 2, 3);

  /* TS_NONE propagates and keeps the first message */
  ts_clear_error();
  ts_tensor bad = ts_reshape(g, a, 1, DIMS(7));
  ts_tensor chain = ts_exp(g, ts_add(g, bad, a));
  CHECK(chain == TS_NONE && strstr(ts_last_error(), "reshape"), "first error kept: %s", ts_last_error());
  CHECK(ts_graph_verify(g) == 0, "verify: %s", ts_last_error());
  ts_graph_free(g);
}

static void test_shape_ops(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, DIMS(2, 3));
  SHAPE(ts_broadcast_in_dim(g, x, 3, DIMS(2, 4, 3), (const int[]){0, 2}), TS_F32, 2, 4, 3);
  SHAPE(ts_broadcast_in_dim(g, ts_input(g, "one", TS_F32, 1, DIMS(1)), 2, DIMS(5, 6), (const int[]){1}), TS_F32, 5, 6);
  FAILS(ts_broadcast_in_dim(g, x, 3, DIMS(2, 4, 3), (const int[]){2, 0}), "broadcast", "increasing");
  FAILS(ts_broadcast_in_dim(g, x, 3, DIMS(2, 4, 5), (const int[]){0, 2}), "broadcast", "size 3", "size 5");
  CHECK(ts_broadcast_to(g, x, 2, DIMS(2, 3)) == x, "broadcast_to the same shape is x");
  SHAPE(ts_broadcast_to(g, x, 3, DIMS(7, 2, 3)), TS_F32, 7, 2, 3);
  FAILS(ts_broadcast_to(g, x, 2, DIMS(2, 4)), "3", "4");

  SHAPE(ts_reshape(g, x, 3, DIMS(3, 1, 2)), TS_F32, 3, 1, 2);
  SHAPE(ts_reshape(g, x, 2, DIMS(-1, 2)), TS_F32, 3, 2);
  FAILS(ts_reshape(g, x, 2, DIMS(4, 2)), "reshape", "f32[2,3]", "6 elements", "[4,2]", "8 elements");
  FAILS(ts_reshape(g, x, 2, DIMS(-1, 4)), "reshape", "6 elements");

  ts_tensor x4 = ts_input(g, "x4", TS_F32, 4, DIMS(2, 3, 4, 5));
  SHAPE(ts_transpose(g, x4, (const int[]){3, 1, 0, 2}), TS_F32, 5, 3, 2, 4);
  FAILS(ts_transpose(g, x4, (const int[]){0, 1, 1, 2}), "transpose", "repeats dim 1");

  ts_tensor y = ts_input(g, "y", TS_F32, 2, DIMS(10, 6));
  SHAPE(ts_slice(g, y, DIMS(1, 0), DIMS(8, 6), DIMS(3, 2)), TS_F32, 3, 3);
  SHAPE(ts_slice(g, y, DIMS(2, 1), DIMS(5, 4), NULL), TS_F32, 3, 3);
  FAILS(ts_slice(g, y, DIMS(0, 0), DIMS(11, 6), NULL), "slice", "dim 0", "11", "10");
  FAILS(ts_slice(g, y, DIMS(0, 0), DIMS(10, 6), DIMS(0, 1)), "slice", "stride 0");

  SHAPE(ts_pad(g, y, DIMS(1, 0), DIMS(2, 3), 0.0), TS_F32, 13, 9);
  FAILS(ts_pad(g, y, DIMS(-1, 0), DIMS(0, 0), 0.0), "pad", "-1");

  ts_tensor parts[3] = {y, ts_input(g, "y2", TS_F32, 2, DIMS(4, 6)), y};
  SHAPE(ts_concatenate(g, 3, parts, 0), TS_F32, 24, 6);
  FAILS(ts_concatenate(g, 3, parts, 1), "concatenate", "f32[4,6]", "f32[10,6]", "dim 0");
  ts_tensor cols[2] = {y, ts_input(g, "y3", TS_F32, 2, DIMS(10, 2))};
  SHAPE(ts_concatenate(g, 2, cols, -1), TS_F32, 10, 8);
  CHECK(ts_graph_verify(g) == 0, "verify: %s", ts_last_error());
  ts_graph_free(g);
}

static void test_contractions(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor a = ts_input(g, "a", TS_F32, 2, DIMS(128, 784));
  ts_tensor b = ts_input(g, "b", TS_F32, 2, DIMS(512, 10));
  ts_tensor w = ts_input(g, "w", TS_F32, 2, DIMS(784, 512));
  SHAPE(ts_matmul(g, a, w), TS_F32, 128, 512);
  FAILS(ts_matmul(g, a, b), "matmul", "784", "512");
  ts_dot_dims d = {0};
  d.n_contract = 1;
  d.lhs_contract[0] = 1;
  d.rhs_contract[0] = 0;
  FAILS(ts_dot_general(g, a, b, &d), "dot_general: lhs contracting dim 1 has size 784 but rhs dim 0 has size 512");

  /* batch dims in unusual places: lhs (3,2,4) batch 1, rhs (4,2,5) batch 1 */
  ts_tensor l = ts_input(g, "l", TS_F32, 3, DIMS(3, 2, 4));
  ts_tensor r = ts_input(g, "r", TS_F32, 3, DIMS(4, 2, 5));
  ts_dot_dims bd = {0};
  bd.n_batch = 1;
  bd.lhs_batch[0] = 1;
  bd.rhs_batch[0] = 1;
  bd.n_contract = 1;
  bd.lhs_contract[0] = 2;
  bd.rhs_contract[0] = 0;
  SHAPE(ts_dot_general(g, l, r, &bd), TS_F32, 2, 3, 5);
  bd.rhs_batch[0] = 2;
  FAILS(ts_dot_general(g, l, r, &bd), "dot_general", "batch", "size 2", "size 5");

  ts_tensor ba = ts_input(g, "ba", TS_F32, 4, DIMS(2, 3, 6, 7));
  ts_tensor bb = ts_input(g, "bb", TS_F32, 4, DIMS(2, 3, 7, 8));
  SHAPE(ts_matmul(g, ba, bb), TS_F32, 2, 3, 6, 8);
  SHAPE(ts_matmul(g, ba, ts_input(g, "m", TS_F32, 2, DIMS(7, 9))), TS_F32, 2, 3, 6, 9);
  FAILS(ts_matmul(g, ba, ts_input(g, "bc", TS_F32, 4, DIMS(2, 4, 7, 8))), "matmul", "batch dim 1", "3", "4");
  FAILS(ts_matmul(g, ts_input(g, "ai", TS_I32, 2, DIMS(2, 2)), ts_input(g, "bi", TS_I32, 2, DIMS(2, 2))),
        "dot_general", "i32");

  /* conv: stride 2, pad 2 */
  ts_tensor x = ts_input(g, "x", TS_F32, 4, DIMS(2, 3, 32, 32));
  ts_tensor k = ts_input(g, "k", TS_F32, 4, DIMS(8, 3, 5, 5));
  ts_conv_params p = {.stride = {2, 2}, .pad_lo = {2, 2}, .pad_hi = {2, 2}};
  ts_tensor y = ts_conv2d(g, x, k, &p);
  SHAPE(y, TS_F32, 2, 8, 16, 16);
  CHECK(g->nodes[y].attr.conv.groups == 1 && g->nodes[y].attr.conv.dilation[1] == 1, "conv params normalized");
  /* dilation 2, asymmetric padding, stride 1 */
  ts_conv_params pd = {.pad_lo = {2, 1}, .pad_hi = {2, 0}, .dilation = {2, 2}};
  SHAPE(ts_conv2d(g, x, k, &pd), TS_F32, 2, 8, 28, 25);
  /* groups 2: x (1,4,8,8), w (6,2,3,3) */
  ts_tensor xg = ts_input(g, "xg", TS_F32, 4, DIMS(1, 4, 8, 8));
  ts_tensor wg = ts_input(g, "wg", TS_F32, 4, DIMS(6, 2, 3, 3));
  ts_conv_params pg = {.groups = 2};
  SHAPE(ts_conv2d(g, xg, wg, &pg), TS_F32, 1, 6, 6, 6);
  SHAPE(ts_conv2d(g, x, ts_input(g, "k1", TS_F32, 4, DIMS(6, 1, 3, 3)), &(ts_conv_params){.groups = 3}),
        TS_F32, 2, 6, 30, 30);
  FAILS(ts_conv2d(g, x, ts_input(g, "k2", TS_F32, 4, DIMS(8, 1, 3, 3)), NULL),
        "conv2d: input has 3 channels but weight expects 1 (groups 1)");
  FAILS(ts_conv2d(g, x, ts_input(g, "k3", TS_F32, 4, DIMS(8, 3, 40, 3)), NULL), "conv2d", "does not fit");
  FAILS(ts_conv2d(g, a, k, NULL), "conv2d", "rank 4", "f32[128,784]");

  /* conv backward ops */
  SHAPE(ir_conv_bwd_data(g, y, k, &p, 4, DIMS(2, 3, 32, 32)), TS_F32, 2, 3, 32, 32);
  SHAPE(ir_conv_bwd_data(g, y, k, &p, 4, DIMS(2, 3, 31, 31)), TS_F32, 2, 3, 31, 31); /* also maps to 16 */
  FAILS(ir_conv_bwd_data(g, y, k, &p, 4, DIMS(2, 3, 40, 32)), "conv2d_bwd_data", "dy");
  SHAPE(ir_conv_bwd_filter(g, x, y, &p, DIMS(8, 3, 5, 5)), TS_F32, 8, 3, 5, 5);
  FAILS(ir_conv_bwd_filter(g, x, y, &p, DIMS(8, 3, 3, 3)), "conv2d_bwd_filter", "dy");

  /* pooling */
  ts_pool_params pp = {.kernel = {2, 2}};
  ts_tensor mp = ts_max_pool2d(g, x, &pp);
  SHAPE(mp, TS_F32, 2, 3, 16, 16);
  CHECK(g->nodes[mp].attr.pool.stride[0] == 2, "pool stride defaults to kernel");
  ts_pool_params p3 = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}};
  ts_tensor ap = ts_avg_pool2d(g, x, &p3);
  SHAPE(ap, TS_F32, 2, 3, 16, 16);
  SHAPE(ir_maxpool_grad(g, x, mp, &pp), TS_F32, 2, 3, 32, 32);
  SHAPE(ir_avgpool_grad(g, ap, &p3, DIMS(2, 3, 32, 32)), TS_F32, 2, 3, 32, 32);
  FAILS(ir_maxpool_grad(g, x, y, &pp), "max_pool2d_grad", "dy", "[2,8,16,16]", "[2,3,16,16]");
  FAILS(ts_max_pool2d(g, ts_input(g, "tiny", TS_F32, 4, DIMS(1, 1, 1, 1)), &pp), "max_pool2d", "does not fit");
  CHECK(ts_graph_verify(g) == 0, "verify: %s", ts_last_error());
  ts_graph_free(g);
}

static void test_reduce_index(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 3, DIMS(2, 3, 4));
  SHAPE(ts_reduce(g, x, TS_REDUCE_SUM, 1, (const int[]){1}, false), TS_F32, 2, 4);
  ts_tensor r = ts_reduce(g, x, TS_REDUCE_MAX, 2, (const int[]){2, 0}, false);
  SHAPE(r, TS_F32, 3);
  CHECK(g->nodes[r].attr.dims[0] == 0 && g->nodes[r].attr.dims[1] == 2, "dims sorted");
  ts_tensor k = ts_reduce(g, x, TS_REDUCE_MEAN, 1, (const int[]){-1}, true);
  SHAPE(k, TS_F32, 2, 3, 1);
  CHECK(g->nodes[k].op == TS_OP_RESHAPE && g->nodes[k - 1].op == TS_OP_REDUCE, "keepdims adds a reshape");
  SCALAR(ts_sum_all(g, x), TS_F32);
  SCALAR(ts_mean_all(g, x), TS_F32);
  ts_tensor s = ts_scalar(g, TS_F32, 1);
  CHECK(ts_sum_all(g, s) == s, "sum_all of a scalar is itself");
  FAILS(ts_reduce(g, x, TS_REDUCE_SUM, 2, (const int[]){1, 1}, false), "reduce", "dim 1");
  FAILS(ts_reduce(g, x, TS_REDUCE_SUM, 1, (const int[]){3}, false), "reduce", "dim 3");
  FAILS(ts_reduce(g, ts_input(g, "i", TS_I32, 1, DIMS(4)), TS_REDUCE_MEAN, 1, (const int[]){0}, false), "reduce",
        "i32");

  ts_tensor table = ts_input(g, "table", TS_F32, 2, DIMS(10, 4));
  ts_tensor idx = ts_input(g, "idx", TS_I32, 2, DIMS(2, 3));
  ts_tensor gat = ts_gather(g, table, idx);
  SHAPE(gat, TS_F32, 2, 3, 4);
  SHAPE(ts_gather(g, table, ts_input(g, "idx64", TS_I64, 0, NULL)), TS_F32, 4);
  FAILS(ts_gather(g, table, x), "gather", "indices", "f32[2,3,4]");
  SHAPE(ts_scatter_add(g, table, idx, gat), TS_F32, 10, 4);
  FAILS(ts_scatter_add(g, table, idx, ts_input(g, "u", TS_F32, 3, DIMS(2, 3, 5))), "scatter_add", "f32[2,3,5]",
        "f32[2,3,4]");
  CHECK(ts_graph_verify(g) == 0, "verify: %s", ts_last_error());
  ts_graph_free(g);
}

static void test_composites(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, DIMS(8, 10));
  ts_tensor lab = ts_input(g, "labels", TS_I32, 1, DIMS(8));
  SHAPE(ts_relu(g, x), TS_F32, 8, 10);
  ts_tensor rl = ts_relu(g, x);
  CHECK(g->nodes[rl].op == TS_OP_MAX, "relu is max(x, 0)");
  SHAPE(ts_gelu(g, x), TS_F32, 8, 10);
  SHAPE(ts_softmax(g, x, 1), TS_F32, 8, 10);
  SHAPE(ts_softmax(g, x, 0), TS_F32, 8, 10);
  SHAPE(ts_log_softmax(g, x, -1), TS_F32, 8, 10);
  FAILS(ts_softmax(g, x, 2), "softmax", "dim 2");
  SCALAR(ts_cross_entropy(g, x, lab), TS_F32);
  SCALAR(ts_cross_entropy(g, x, ts_input(g, "l64", TS_I64, 1, DIMS(8))), TS_F32);
  FAILS(ts_cross_entropy(g, x, ts_input(g, "lf", TS_F32, 1, DIMS(8))), "cross_entropy", "labels", "f32[8]");
  FAILS(ts_cross_entropy(g, x, ts_input(g, "l4", TS_I32, 1, DIMS(4))), "cross_entropy", "f32[8,10]", "i32[4]");
  FAILS(ts_cross_entropy(g, lab, lab), "cross_entropy", "logits", "i32[8]");

  ts_tensor gam = ts_input(g, "gamma", TS_F32, 1, DIMS(10));
  ts_tensor bet = ts_input(g, "beta", TS_F32, 1, DIMS(10));
  SHAPE(ts_layer_norm(g, x, gam, bet, 1e-5), TS_F32, 8, 10);
  SHAPE(ts_layer_norm(g, x, TS_NONE, TS_NONE, 1e-5), TS_F32, 8, 10);
  FAILS(ts_layer_norm(g, x, lab, bet, 1e-5), "layer_norm", "gamma", "f32[10]", "i32[8]");

  ts_tensor img = ts_input(g, "img", TS_F32, 4, DIMS(4, 3, 5, 5));
  ts_tensor c3 = ts_input(g, "c3", TS_F32, 1, DIMS(3));
  ts_tensor mean = TS_NONE, var = TS_NONE;
  SHAPE(ts_batch_norm_train(g, img, c3, c3, 1e-5, &mean, &var), TS_F32, 4, 3, 5, 5);
  SHAPE(mean, TS_F32, 3);
  SHAPE(var, TS_F32, 3);
  SHAPE(ts_batch_norm_eval(g, img, c3, c3, mean, var, 1e-5), TS_F32, 4, 3, 5, 5);
  FAILS(ts_batch_norm_train(g, img, gam, c3, 1e-5, NULL, NULL), "batch_norm_train", "gamma", "f32[3]",
        "f32[10]");

  ts_tensor seed = ts_input(g, "seed", TS_I32, 0, NULL);
  CHECK(ts_dropout(g, x, 0.0, seed, 1) == x, "dropout p=0 is x");
  ts_tensor dr = ts_dropout(g, x, 0.25, seed, 1);
  SHAPE(dr, TS_F32, 8, 10);
  CHECK(g->nodes[dr].op == TS_OP_SELECT, "dropout ends in a select");
  FAILS(ts_dropout(g, x, 1.0, seed, 1), "dropout", "p = 1");
  FAILS(ts_dropout(g, x, -0.5, seed, 1), "dropout", "-0.5");
  CHECK(ts_graph_verify(g) == 0, "verify: %s", ts_last_error());
  ts_graph_free(g);
}

static void test_outputs(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor w = ts_input(g, "w", TS_F32, 1, DIMS(4));
  ts_tensor lr = ts_input(g, "lr", TS_F32, 0, NULL);
  ts_tensor w2 = ts_sub(g, w, lr);
  CHECK(ts_graph_add_output(g, ts_sum_all(g, w)) == 0, "output 0");
  CHECK(ts_graph_add_output(g, w2) == 1, "output 1");
  CHECK(ts_graph_num_outputs(g) == 2 && ts_graph_output(g, 1) == w2, "outputs");
  CHECK(ts_graph_alias_output(g, 0, w) == -1 && strstr(ts_last_error(), "f32[]"), "alias shape mismatch: %s",
        ts_last_error());
  CHECK(ts_graph_alias_output(g, 1, w2) == -1 && strstr(ts_last_error(), "not an input"), "alias non-input");
  CHECK_OK(ts_graph_alias_output(g, 1, w));
  CHECK(g->alias[1] == 0, "alias recorded");
  CHECK(ts_graph_verify(g) == 0, "verify: %s", ts_last_error());
  ts_graph_free(g);
}

static void test_verify(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor a = ts_input(g, "a", TS_F32, 2, DIMS(4, 5));
  ts_tensor b = ts_input(g, "b", TS_F32, 2, DIMS(5, 6));
  ts_tensor c = ts_matmul(g, a, b);
  ts_tensor e = ts_exp(g, c);
  ts_graph_add_output(g, e);
  CHECK_OK(ts_graph_verify(g));

  /* a corrupted shape */
  g->nodes[c].shape[1] = 7;
  CHECK(ts_graph_verify(g) == -1, "corrupt shape caught");
  char want[64];
  snprintf(want, sizeof want, "node %%%d (dot_general)", c);
  CHECK(strstr(ts_last_error(), want) && strstr(ts_last_error(), "f32[4,6]"), "message: %s", ts_last_error());
  g->nodes[c].shape[1] = 6;
  CHECK_OK(ts_graph_verify(g));

  /* a corrupted operand: the contraction sizes no longer match */
  g->nodes[c].in[1] = a;
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), "dot_general") &&
            strstr(ts_last_error(), "size 5") && strstr(ts_last_error(), "size 4"),
        "message: %s", ts_last_error());
  g->nodes[c].in[1] = b;
  /* an operand that is not an earlier node */
  g->nodes[c].in[0] = e;
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), "not an earlier node"), "message: %s",
        ts_last_error());
  g->nodes[c].in[0] = a;
  /* a dtype change */
  g->nodes[e].dtype = TS_F64;
  snprintf(want, sizeof want, "node %%%d (exp)", e);
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), want), "message: %s", ts_last_error());
  g->nodes[e].dtype = TS_F32;
  /* a bad alias */
  g->alias[0] = 1;
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), "alias"), "message: %s", ts_last_error());
  g->alias[0] = -1;
  CHECK_OK(ts_graph_verify(g));

  /* a fused node: exp(in0) * in1 with in1 a scalar */
  ts_tensor s = ts_scalar(g, TS_F32, 2);
  ts_fused *f = malloc(sizeof *f);
  f->n = 3;
  f->ins = calloc(3, sizeof *f->ins);
  f->ins[0] = (ts_fused_instr){.op = TS_OP_EXP, .dtype = TS_F32, .a = -1};
  f->ins[1] = (ts_fused_instr){.op = TS_OP_MUL, .dtype = TS_F32, .a = 0, .b = -2};
  f->ins[2] = (ts_fused_instr){.op = TS_OP_ADD, .dtype = TS_F32, .a = 1, .b = 0};
  ts_attr at = {0};
  at.fused = f;
  ts_tensor fin[2] = {c, s};
  ts_tensor fn = ir_append(g, TS_OP_FUSED, TS_F32, 2, DIMS(4, 6), 2, fin, &at);
  CHECK_OK(ts_graph_verify(g));
  char *txt = ts_graph_to_string(g);
  CHECK(strstr(txt, "i1 = mul(i0, in1) : f32"), "fused program printed:\n%s", txt);
  free(txt);
  f->ins[1].b = -3; /* external input 2 does not exist */
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), "fused") && strstr(ts_last_error(), "external input 2"),
        "message: %s", ts_last_error());
  f->ins[1].b = 2; /* not an earlier instruction */
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), "instruction 2"), "message: %s", ts_last_error());
  f->ins[1].b = -2;
  g->nodes[fn].in[1] = a; /* 20 elements, neither 24 nor 1 */
  CHECK(ts_graph_verify(g) == -1 && strstr(ts_last_error(), "20 elements"), "message: %s", ts_last_error());
  g->nodes[fn].in[1] = s;
  CHECK_OK(ts_graph_verify(g));
  ts_graph_free(g);
}

/* The small graph used by the printer and hash tests. */
static ts_graph *small_graph(float c0) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, DIMS(2, 3));
  ts_tensor w = ts_input(g, "w", TS_F32, 2, DIMS(3, 4));
  float cdata[4] = {c0, -2.5f, 0.125f, 4};
  ts_tensor bias = ts_constant(g, TS_F32, 1, DIMS(4), cdata);
  ts_tensor y = ts_add(g, ts_matmul(g, x, w), bias);
  ts_tensor h = ts_relu(g, y);
  ts_tensor s = ts_reduce(g, h, TS_REDUCE_SUM, 1, (const int[]){1}, false);
  ts_graph_add_output(g, s);
  ts_tensor w2 = ts_sub(g, w, ts_full(g, TS_F32, 2, DIMS(3, 4), 0.1));
  int o = ts_graph_add_output(g, w2);
  ts_graph_alias_output(g, o, w);
  return g;
}

static void test_print_hash(void) {
  ts_graph *g = small_graph(1.0f);
  char *txt = ts_graph_to_string(g);
  const char *want =
      "%0 = input \"x\" #0 : f32[2,3]\n"
      "%1 = input \"w\" #1 : f32[3,4]\n"
      "%2 = constant dense fnv=HASH values=[1,-2.5,0.125,4] : f32[4]\n"
      "%3 = dot_general(%0, %1) lhs_contract=[1] rhs_contract=[0] : f32[2,4]\n"
      "%4 = broadcast(%2) dims=[1] : f32[2,4]\n"
      "%5 = add(%3, %4) : f32[2,4]\n"
      "%6 = constant splat=0 : f32[]\n"
      "%7 = broadcast(%6) dims=[] : f32[2,4]\n"
      "%8 = max(%5, %7) : f32[2,4]\n"
      "%9 = reduce(%8) kind=sum dims=[1] : f32[2]\n"
      "%10 = constant splat=0.10000000000000001 : f32[3,4]\n"
      "%11 = sub(%1, %10) : f32[3,4]\n"
      "outputs: %9, %11 (alias input #1)\n";
  /* the dense constant's hash: FNV-1a 64 of its bytes */
  float cdata[4] = {1.0f, -2.5f, 0.125f, 4};
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof cdata; i++) {
    h ^= ((const unsigned char *)cdata)[i];
    h *= 0x100000001b3ull;
  }
  char expect[2048], hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  const char *at = strstr(want, "HASH");
  snprintf(expect, sizeof expect, "%.*s%s%s", (int)(at - want), want, hex, at + 4);
  CHECK(txt && strcmp(txt, expect) == 0, "printer output:\n%s\nexpected:\n%s", txt, expect);

  ts_graph *g2 = small_graph(1.0f);
  ts_graph *g3 = small_graph(1.5f);
  CHECK(ts_graph_hash(g) == ts_graph_hash(g2), "same graph, same hash");
  CHECK(ts_graph_hash(g) == ts_graph_hash(g), "hash is stable");
  CHECK(ts_graph_hash(g) != ts_graph_hash(g3), "different constant, different hash");
  free(txt);
  ts_graph_free(g);
  ts_graph_free(g2);
  ts_graph_free(g3);
}

/* ir_infer directly: results given for reshape, computed for transpose. */
static void test_infer_direct(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, DIMS(2, 3));
  ts_attr a = {0};
  a.n_dims = 2;
  a.dims[0] = 1;
  a.dims[1] = 0;
  ts_dtype dt = TS_F64;
  int rank = 0;
  int64_t shape[TS_MAX_RANK] = {0};
  CHECK(ir_infer(g, TS_OP_TRANSPOSE, 1, &x, &a, &dt, &rank, shape) == 0 && dt == TS_F32 && rank == 2 &&
            shape[0] == 3 && shape[1] == 2,
        "transpose inferred");
  CHECK(ir_infer(g, TS_OP_ADD, 1, &x, NULL, &dt, &rank, shape) == -1 && strstr(ts_last_error(), "expects 2"),
        "operand count: %s", ts_last_error());
  ts_tensor bad = 99;
  CHECK(ir_infer(g, TS_OP_EXP, 1, &bad, NULL, &dt, &rank, shape) == -1 && strstr(ts_last_error(), "99"),
        "bad id: %s", ts_last_error());
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_ir", 1);
  test_leaves();
  test_elementwise();
  test_shape_ops();
  test_contractions();
  test_reduce_index();
  test_composites();
  test_outputs();
  test_verify();
  test_print_hash();
  test_infer_direct();
  return ts_test_finish();
}
