/* test_serialize.c — the binary graph form of the compile cache round-trips
 * exactly: every op kind (builders, autodiff's backward ops, the compiler's
 * fused programs, the partitioner's collectives), dense and splat constants
 * of every dtype (NaN, -0.0 bit patterns included), input names, outputs,
 * aliases and sharding annotations. Exact = equal text form, equal constant
 * bytes, and re-serializing gives the same bytes. Every truncation and
 * random bit flips of a serialized graph are rejected or still verify,
 * never crash. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h" /* compile_graph: fused nodes */
#include "harness.h"
#include "ir/serialize.h"
#include "tessel/tessel.h"

static bool seen[TS_OP_COUNT];

/* Round trip g; checks text, constants and bytes. */
static void roundtrip(const ts_graph *g, const char *what) {
  for (int i = 0; i < g->n_nodes; i++) seen[g->nodes[i].op] = true;
  unsigned char *buf = NULL;
  size_t len = 0, cap = 0;
  CHECK(ir_serialize(g, &buf, &len, &cap) == 0, "%s: %s", what, ts_last_error());
  size_t pos = 0;
  ts_graph *h = ir_deserialize(buf, len, &pos);
  CHECK(h != NULL, "%s: %s", what, ts_last_error());
  if (!h) {
    free(buf);
    return;
  }
  CHECK(pos == len, "%s: read %zu of %zu bytes", what, pos, len);
  char *a = ts_graph_to_string(g), *b = ts_graph_to_string(h);
  CHECK(a && b && strcmp(a, b) == 0, "%s: text differs after round trip:\n%s\nvs\n%s", what, a, b);
  free(a);
  free(b);
  for (int i = 0; i < g->n_nodes; i++) {
    const ts_node *x = &g->nodes[i], *y = &h->nodes[i];
    size_t bytes = (size_t)ts_shape_numel(x->rank, x->shape) * ts_dtype_size(x->dtype);
    CHECK(!x->data == !y->data && (!x->data || memcmp(x->data, y->data, bytes) == 0), "%s: constant %%%d bytes", what, i);
    CHECK(!x->sharding == !y->sharding, "%s: sharding of %%%d lost", what, i);
    if (x->sharding && y->sharding) CHECK(ts_sharding_equal(x->sharding, y->sharding), "%s: sharding of %%%d", what, i);
  }
  unsigned char *buf2 = NULL;
  size_t len2 = 0, cap2 = 0;
  CHECK(ir_serialize(h, &buf2, &len2, &cap2) == 0, "%s", ts_last_error());
  CHECK(len2 == len && memcmp(buf, buf2, len) == 0, "%s: re-serialized bytes differ (%zu vs %zu)", what, len2, len);
  free(buf2);
  ts_graph_free(h);
  free(buf);
}

/* Every builder op, constants of every dtype, names, outputs, aliases. */
static ts_graph *build_forward(void) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {4, 6}, s1[1] = {6};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s);    // (4, 6)
  ts_tensor y = ts_input(g, "y with spaces \"q\"", TS_F32, 2, s);
  ts_tensor idx = ts_input(g, "idx", TS_I32, 1, (int64_t[]){3});
  ts_tensor seed = ts_input(g, "seed", TS_I64, 0, NULL);
  ts_tensor acc = x;
  ts_tensor (*un[])(ts_graph *, ts_tensor) = {ts_neg, ts_abs, ts_exp, ts_log, ts_log1p, ts_tanh,
                                              ts_sqrt, ts_rsqrt, ts_sigmoid, ts_erf, ts_gelu};
  for (size_t k = 0; k < sizeof un / sizeof *un; k++) acc = ts_add(g, acc, un[k](g, y));
  ts_tensor (*bin[])(ts_graph *, ts_tensor, ts_tensor) = {ts_sub, ts_mul, ts_div, ts_max, ts_min, ts_pow};
  for (size_t k = 0; k < sizeof bin / sizeof *bin; k++) acc = bin[k](g, acc, y);
  acc = ts_select(g, ts_compare(g, acc, y, TS_CMP_LT), acc, ts_convert(g, ts_convert(g, y, TS_BF16), TS_F32));
  acc = ts_add(g, acc, ts_broadcast_to(g, ts_input(g, "b", TS_F32, 1, s1), 2, s));
  acc = ts_add(g, acc, ts_transpose(g, ts_reshape(g, acc, 2, (int64_t[]){6, 4}), (int[]){1, 0}));
  ts_tensor sl = ts_slice(g, acc, (int64_t[]){1, 0}, (int64_t[]){4, 6}, (int64_t[]){2, 3}); // (2, 2)
  ts_tensor pd = ts_pad(g, sl, (int64_t[]){1, 0}, (int64_t[]){1, 4}, -0.0);                  // (4, 6)
  acc = ts_concatenate(g, 2, (ts_tensor[]){acc, pd}, 0);                                     // (8, 6)
  ts_tensor w = ts_input(g, "w", TS_F32, 2, (int64_t[]){6, 5});
  ts_tensor d = ts_matmul(g, acc, w);                                                        // (8, 5)
  ts_tensor r = ts_reduce(g, d, TS_REDUCE_MAX, 1, (int[]){1}, false);                        // (8)
  ts_tensor gt = ts_gather(g, d, idx);                                                       // (3, 5)
  ts_tensor sc = ts_scatter_add(g, d, idx, gt);                                              // (8, 5)
  ts_tensor io = ts_iota(g, TS_F32, 2, (int64_t[]){8, 5}, 1);
  ts_tensor ru = ts_rng_uniform(g, seed, 7, TS_F32, 2, (int64_t[]){8, 5});
  ts_tensor rn = ts_rng_normal(g, seed, 0xffffffffffffull, TS_F32, 2, (int64_t[]){8, 5});
  float dense[40];
  for (int i = 0; i < 40; i++) dense[i] = (float)i * 0.37f - 3.0f;
  dense[3] = NAN;
  dense[4] = -0.0f;
  dense[5] = INFINITY;
  ts_tensor c = ts_constant(g, TS_F32, 2, (int64_t[]){8, 5}, dense);
  ts_tensor out = ts_add(g, ts_add(g, ts_add(g, sc, io), ts_add(g, ru, rn)), c);
  ts_graph_add_output(g, out);
  ts_graph_add_output(g, r);
  ts_graph_add_output(g, ts_scalar(g, TS_F32, 0.1));
  ts_graph_add_output(g, ts_add(g, x, ts_full(g, TS_F32, 2, s, NAN)));
  ts_graph_alias_output(g, 3, x); /* donation survives */
  /* small constants of every dtype */
  uint8_t raw[64];
  for (int i = 0; i < 64; i++) raw[i] = (uint8_t)(i * 37 + 1);
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++) {
    if (dt == TS_BOOL) for (int i = 0; i < 64; i++) raw[i] &= 1;
    ts_graph_add_output(g, ts_constant(g, (ts_dtype)dt, 1, (int64_t[]){3}, raw));
  }
  return g;
}

/* conv, pools, the fused causal attention, the fused layer norm and their
 * backward ops (autodiff). */
static ts_graph *build_backward(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 4, (int64_t[]){2, 3, 8, 8});
  ts_tensor w = ts_input(g, "w", TS_F32, 4, (int64_t[]){4, 3, 3, 3});
  ts_conv_params cp = {.stride = {1, 2}, .pad_lo = {1, 0}, .pad_hi = {1, 2}, .dilation = {1, 1}, .groups = 1};
  ts_tensor c = ts_conv2d(g, x, w, &cp);
  ts_pool_params pp = {.kernel = {2, 2}, .stride = {2, 1}, .pad = {0, 1}};
  ts_tensor m = ts_max_pool2d(g, c, &pp);
  ts_tensor a = ts_avg_pool2d(g, m, &(ts_pool_params){.kernel = {2, 2}});
  /* channels last: the layout must survive the round trip (the text shows it) */
  cp.layout = TS_LAYOUT_NHWC;
  ts_tensor cl = ts_conv2d(g, ts_transpose(g, x, (const int[]){0, 2, 3, 1}), w, &cp); /* (2, 8, 4, 4) */
  cl = ts_max_pool2d(g, cl, &(ts_pool_params){.kernel = {2, 2}, .layout = TS_LAYOUT_NHWC});
  a = ts_add(g, ts_sum_all(g, a), ts_sum_all(g, cl));
  ts_tensor att = ts_causal_attention(g, x, x, x, 0.5); /* x as (B, H, T, Dh) */
  ts_tensor lg = ts_input(g, "lg", TS_F32, 1, (int64_t[]){8});
  ts_tensor ln = ts_layer_norm(g, x, lg, lg, 1e-5);
  ts_tensor loss = ts_add(g, ts_add(g, ts_sum_all(g, a), ts_sum_all(g, att)), ts_sum_all(g, ts_mul(g, ln, x)));
  ts_tensor wrt[3] = {x, w, lg}, grads[3];
  CHECK_OK(ts_grad(g, loss, 3, wrt, grads));
  ts_graph_add_output(g, loss);
  ts_graph_add_output(g, grads[0]);
  ts_graph_add_output(g, grads[1]);
  ts_graph_add_output(g, grads[2]);
  return g;
}

/* Collectives as the partitioner emits them (ir_append with attr.coll). */
static ts_graph *build_collectives(void) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {4, 8};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s);
  ts_op ops[5] = {TS_OP_ALL_REDUCE, TS_OP_ALL_GATHER, TS_OP_REDUCE_SCATTER, TS_OP_ALL_TO_ALL,
                  TS_OP_COLLECTIVE_PERMUTE};
  int64_t shapes[5][2] = {{4, 8}, {8, 8}, {2, 8}, {8, 4}, {4, 8}};
  ts_tensor prev = x;
  for (int k = 0; k < 5; k++) {
    ts_attr a;
    memset(&a, 0, sizeof a);
    a.reduce = TS_REDUCE_SUM;
    a.axis = k == 3 ? 1 : 0;
    a.dims[0] = 0;
    a.coll = malloc(sizeof *a.coll);
    int n = 2, nids = ops[k] == TS_OP_COLLECTIVE_PERMUTE ? 4 : 2;
    a.coll->n = n;
    a.coll->ids = malloc((size_t)nids * sizeof *a.coll->ids);
    for (int i = 0; i < nids; i++) a.coll->ids[i] = (i * 3 + k) % 4;
    ts_tensor t = ir_append(g, ops[k], TS_F32, 2, shapes[k], 1, &prev, &a);
    ts_graph_add_output(g, t);
  }
  return g;
}

static void test_sharding_annotation(void) {
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, (int64_t[]){4, 8});
  ts_graph_add_output(g, ts_exp(g, x));
  const char *names[2] = {"data", "model"};
  ts_mesh *m = ts_mesh_new(2, (int64_t[]){2, 2}, names, 4, (int[]){0, 2, 1, 3});
  ts_partition_spec spec;
  CHECK_OK(ts_partition_spec_parse(m, "model,None", &spec));
  ts_sharding *s = ts_sharding_new(m, &spec, 2);
  CHECK(s != NULL, "%s", ts_last_error());
  if (s) CHECK_OK(ts_mark_sharding(g, x, s));
  roundtrip(g, "sharding annotation");
  ts_sharding_free(s);
  ts_mesh_free(m);
  ts_graph_free(g);
}

/* Every prefix and a few hundred random bit flips: an error or a valid graph. */
static void test_corruption(const ts_graph *g) {
  unsigned char *buf = NULL;
  size_t len = 0, cap = 0;
  CHECK_OK(ir_serialize(g, &buf, &len, &cap));
  int rejected = 0;
  for (size_t cut = 0; cut < len; cut += 1 + cut / 64) {
    size_t pos = 0;
    ts_graph *h = ir_deserialize(buf, cut, &pos);
    rejected += h == NULL;
    ts_graph_free(h);
  }
  CHECK(rejected > 0, "truncations were accepted");
  size_t pos = 0;
  ts_graph *h = ir_deserialize(buf, len, &pos);
  CHECK(h != NULL, "the whole buffer: %s", ts_last_error());
  ts_graph_free(h);
  uint64_t st = ts_test_seed | 1;
  for (int k = 0; k < 300; k++) {
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    size_t at = (size_t)(st % len);
    unsigned char bit = (unsigned char)(1u << (st >> 40) % 8);
    buf[at] ^= bit;
    pos = 0;
    h = ir_deserialize(buf, len, &pos); /* must not crash (ASan) */
    if (h) CHECK(ts_graph_verify(h) == 0, "a bit flip at %zu gave an unverified graph", at);
    ts_graph_free(h);
    buf[at] ^= bit;
  }
  unsigned char junk[16] = "not a graph....";
  pos = 0;
  CHECK(ir_deserialize(junk, sizeof junk, &pos) == NULL, "junk accepted");
  CHECK(strstr(ts_last_error(), "magic") != NULL, "message: %s", ts_last_error());
  free(buf);
}

/* A stream naming an op this build lacks (a newer build's graph, or a
 * renamed op) is an error that names it, never another op. */
static void test_unknown_op(const ts_graph *g) {
  unsigned char *buf = NULL;
  size_t len = 0, cap = 0, pos = 0;
  CHECK_OK(ir_serialize(g, &buf, &len, &cap));
  static const unsigned char pat[] = {4, 0, 0, 0, 't', 'a', 'n', 'h'}; /* u32 length, then the name */
  unsigned char *at = NULL;
  for (size_t i = 0; !at && i + sizeof pat <= len; i++)
    if (memcmp(buf + i, pat, sizeof pat) == 0) at = buf + i;
  CHECK(at != NULL, "no tanh op in the stream");
  if (at) {
    memcpy(at + 4, "tanx", 4);
    CHECK(ir_deserialize(buf, len, &pos) == NULL, "an unknown op was accepted");
    CHECK(strstr(ts_last_error(), "unknown op \"tanx\"") != NULL, "message: %s", ts_last_error());
  }
  free(buf);
}

int main(void) {
  ts_test_init("test_serialize", 7);
  ts_graph *f = build_forward(), *b = build_backward(), *c = build_collectives();
  CHECK(ts_graph_verify(f) == 0, "forward: %s", ts_last_error());
  CHECK(ts_graph_verify(b) == 0, "backward: %s", ts_last_error());
  CHECK(ts_graph_verify(c) == 0, "collectives: %s", ts_last_error());
  roundtrip(f, "forward");
  roundtrip(b, "backward");
  roundtrip(c, "collectives");
  ts_graph *fo = compile_graph(f, NULL), *bo = compile_graph(b, NULL);
  CHECK(fo && bo, "%s", ts_last_error());
  if (fo) roundtrip(fo, "forward optimized (fused)");
  if (bo) roundtrip(bo, "backward optimized");
  test_sharding_annotation();
  for (int op = 0; op < TS_OP_COUNT; op++) CHECK(seen[op], "op %s never round-tripped", ir_op_name((ts_op)op));
  test_corruption(fo ? fo : f);
  test_unknown_op(f);
  ts_graph_free(fo);
  ts_graph_free(bo);
  ts_graph_free(f);
  ts_graph_free(b);
  ts_graph_free(c);
  return ts_test_finish();
}
