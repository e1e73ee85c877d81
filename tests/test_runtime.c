/* test_runtime.c — client, buffers and execute: host roundtrips, argument
 * errors, donation (in place across executes, swaps), outputs into provided
 * buffers, repeated outputs, and kernel state kept across executes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "harness.h"
#include "tessel/tessel.h"

static void test_client(void) {
  ts_client_options o = {.num_threads = 1};
  ts_client *c = ts_client_new(&o);
  CHECK(c && ts_client_num_threads(c) == 1, "explicit thread count");
  CHECK(c && strcmp(ts_client_platform(c), "cpu") == 0, "platform");
  ts_client_free(c);
  c = ts_client_new(NULL); /* ctest sets TESSEL_NUM_THREADS=2 */
  const char *env = getenv("TESSEL_NUM_THREADS");
  CHECK(c && ts_client_num_threads(c) >= 1, "default thread count");
  if (c && env && atoi(env) == 2) CHECK(ts_client_num_threads(c) <= 2, "env thread count");
  ts_client_free(c);
}

static void test_buffers(ts_client *c) {
  int64_t s[2] = {3, 5};
  float data[15], back[15];
  for (int i = 0; i < 15; i++) data[i] = (float)i * 0.5f;
  ts_buffer *b = ts_buffer_from_host(c, TS_F32, 2, s, data);
  CHECK(b != NULL, "%s", ts_last_error());
  CHECK(ts_buffer_bytes(b) == sizeof data && ts_buffer_rank(b) == 2 && ts_buffer_shape(b)[1] == 5 &&
            ts_buffer_dtype(b) == TS_F32,
        "buffer metadata");
  CHECK(((uintptr_t)b->data % 64) == 0, "64-byte aligned");
  CHECK_OK(ts_buffer_read(b, back, sizeof back));
  CHECK(memcmp(data, back, sizeof data) == 0, "roundtrip");
  CHECK(ts_buffer_write(b, data, 8) == -1, "short write rejected");
  CHECK(ts_buffer_read(b, back, 100) == -1 && strstr(ts_last_error(), "60") != NULL, "%s", ts_last_error());
  ts_buffer_free(b);
  ts_buffer *z = ts_buffer_new(c, TS_I64, 0, NULL);
  int64_t v = 7;
  CHECK(z && ts_buffer_bytes(z) == 8, "scalar buffer");
  CHECK_OK(ts_buffer_read(z, &v, 8));
  CHECK(v == 0, "zero-filled");
  ts_buffer_free(z);
}

static void test_errors(ts_client *c) {
  ts_graph *g = ts_graph_new();
  int64_t ws[2] = {512, 784}, xs[2] = {784, 8}, bad[2] = {784, 512};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, xs);
  ts_tensor b = ts_input(g, "fc1.bias", TS_F32, 2, xs);
  ts_tensor w = ts_input(g, "fc1.weight", TS_F32, 2, ws);
  ts_graph_add_output(g, ts_matmul(g, w, ts_add(g, x, b)));
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) {
    ts_graph_free(g);
    return;
  }
  ts_buffer *bx = ts_buffer_new(c, TS_F32, 2, xs), *bb = ts_buffer_new(c, TS_F32, 2, xs);
  ts_buffer *bw = ts_buffer_new(c, TS_F32, 2, bad), *bi = ts_buffer_new(c, TS_I32, 2, xs);
  ts_buffer *in[3] = {bx, bb, bw}, *out[1] = {NULL};
  CHECK(ts_execute(e, in, out) == -1, "wrong shape accepted");
  CHECK(strcmp(ts_last_error(), "execute: input 2 \"fc1.weight\" expects f32[512,784] but got f32[784,512]") == 0,
        "message: %s", ts_last_error());
  in[2] = NULL;
  CHECK(ts_execute(e, in, out) == -1 && strstr(ts_last_error(), "input 2") && strstr(ts_last_error(), "NULL"),
        "NULL input: %s", ts_last_error());
  in[1] = bi;
  CHECK(ts_execute(e, in, out) == -1 && strstr(ts_last_error(), "i32[784,8]"), "wrong dtype: %s", ts_last_error());
  CHECK(out[0] == NULL, "no output on error");
  /* a wrong output buffer */
  ts_buffer *bw2 = ts_buffer_new(c, TS_F32, 2, ws);
  in[1] = bb;
  in[2] = bw2;
  out[0] = bx; /* (784, 8) but the result is (512, 8) */
  CHECK(ts_execute(e, in, out) == -1 && strstr(ts_last_error(), "output 0 expects f32[512,8]"), "%s",
        ts_last_error());
  /* a graph that does not verify does not compile */
  ts_graph *g2 = ts_graph_new();
  ts_tensor y = ts_input(g2, "y", TS_F32, 2, xs);
  ts_graph_add_output(g2, ts_exp(g2, y));
  g2->nodes[1].rank = 1; /* corrupt it */
  CHECK(ts_compile(c, g2, NULL) == NULL && ts_last_error()[0], "broken graph compiled");
  ts_graph_free(g2);
  ts_buffer_free(bx);
  ts_buffer_free(bb);
  ts_buffer_free(bw);
  ts_buffer_free(bw2);
  ts_buffer_free(bi);
  ts_executable_free(e);
  ts_graph_free(g);
}

/* p = p - 0.1 * grad, donated: p is updated in place, twice. */
static void test_alias(ts_client *c) {
  ts_graph *g = ts_graph_new();
  int64_t s[1] = {100};
  ts_tensor p = ts_input(g, "p", TS_F32, 1, s);
  ts_tensor gr = ts_input(g, "grad", TS_F32, 1, s);
  ts_tensor loss = ts_sum_all(g, ts_mul(g, p, p));
  ts_graph_add_output(g, ts_sub(g, p, ts_mul(g, ts_scalar(g, TS_F32, 0.1), gr)));
  ts_graph_add_output(g, loss);
  CHECK_OK(ts_graph_alias_output(g, 0, p));
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) {
    ts_graph_free(g);
    return;
  }
  CHECK(e->plan.n_inplace == 1, "update in place (n_inplace %d)", e->plan.n_inplace);
  float p0[100], g0[100], r[100];
  for (int i = 0; i < 100; i++) p0[i] = (float)i, g0[i] = (float)(i % 7);
  ts_buffer *bp = ts_buffer_from_host(c, TS_F32, 1, s, p0), *bg = ts_buffer_from_host(c, TS_F32, 1, s, g0);
  ts_buffer *in[2] = {bp, bg};
  for (int step = 0; step < 2; step++) {
    ts_buffer *out[2] = {NULL, NULL};
    CHECK_OK(ts_execute(e, in, out));
    CHECK(out[0] == bp, "aliased slot is the input buffer");
    float l = 0;
    if (out[1]) ts_buffer_read(out[1], &l, 4);
    float want = 0;
    for (int i = 0; i < 100; i++) {
      float q = p0[i] - 0.1f * g0[i] * (float)step;
      want += q * q;
    }
    CHECK(fabsf(l - want) <= 1e-4f * want, "loss at step %d: %g vs %g", step, l, want);
    ts_buffer_free(out[1]);
  }
  ts_buffer_read(bp, r, sizeof r);
  int bad = 0;
  for (int i = 0; i < 100; i++) bad += fabsf(r[i] - (p0[i] - 0.2f * g0[i])) > 1e-5f;
  CHECK(bad == 0, "%d elements wrong after two updates", bad);
  ts_buffer_free(bp);
  ts_buffer_free(bg);
  ts_executable_free(e);
  ts_graph_free(g);
}

/* A donated output that cannot be computed in place (a matmul reading its
 * own input) is computed into the arena and copied at the end. */
static void test_alias_copy(ts_client *c) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {3, 3};
  ts_tensor p = ts_input(g, "p", TS_F32, 2, s), q = ts_input(g, "q", TS_F32, 2, s);
  ts_graph_add_output(g, ts_matmul(g, p, q));
  CHECK_OK(ts_graph_alias_output(g, 0, p));
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e && e->plan.n_inplace == 0 && e->plan.n_copies == 1, "matmul result copied into p");
  float vp[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, vq[9] = {0, 0, 1, 0, 1, 0, 1, 0, 0}, r[9];
  ts_buffer *bp = ts_buffer_from_host(c, TS_F32, 2, s, vp), *bq = ts_buffer_from_host(c, TS_F32, 2, s, vq);
  ts_buffer *in[2] = {bp, bq}, *out[1] = {NULL};
  for (int step = 0; e && step < 2; step++) CHECK_OK(ts_execute(e, in, out)); /* two column flips */
  ts_buffer_read(bp, r, sizeof r);
  CHECK(memcmp(r, vp, sizeof r) == 0, "p flipped twice: %g %g %g", r[0], r[1], r[2]);
  ts_buffer_free(bp);
  ts_buffer_free(bq);
  ts_executable_free(e);
  ts_graph_free(g);
}

/* Outputs swap two donated inputs; an input is also an output; a node is two
 * outputs; an output goes into a provided buffer. */
static void test_outputs(ts_client *c) {
  ts_graph *g = ts_graph_new();
  int64_t s[1] = {4};
  ts_tensor a = ts_input(g, "a", TS_F32, 1, s), b = ts_input(g, "b", TS_F32, 1, s);
  ts_tensor e2 = ts_exp(g, a);
  ts_graph_add_output(g, b);  /* 0 -> a */
  ts_graph_add_output(g, a);  /* 1 -> b */
  ts_graph_add_output(g, a);  /* 2: copy of the old a */
  ts_graph_add_output(g, e2); /* 3 */
  ts_graph_add_output(g, e2); /* 4 */
  int64_t s2[2] = {2, 2};
  ts_graph_add_output(g, ts_reshape(g, e2, 2, s2));  /* 5: alias of output 3 */
  ts_graph_add_output(g, ts_full(g, TS_F32, 1, s, 1.5)); /* 6: from the constant pool */
  CHECK_OK(ts_graph_alias_output(g, 0, a));
  CHECK_OK(ts_graph_alias_output(g, 1, b));
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) {
    ts_graph_free(g);
    return;
  }
  float va[4] = {0, 1, 2, 3}, vb[4] = {10, 11, 12, 13}, r[4];
  ts_buffer *ba = ts_buffer_from_host(c, TS_F32, 1, s, va), *bb = ts_buffer_from_host(c, TS_F32, 1, s, vb);
  ts_buffer *given = ts_buffer_new(c, TS_F32, 1, s);
  ts_buffer *in[2] = {ba, bb}, *out[7] = {NULL, NULL, NULL, given, NULL, NULL, NULL};
  CHECK_OK(ts_execute(e, in, out));
  ts_buffer_read(ba, r, sizeof r);
  CHECK(r[0] == 10 && r[3] == 13, "a now holds b: %g %g", r[0], r[3]);
  ts_buffer_read(bb, r, sizeof r);
  CHECK(r[0] == 0 && r[3] == 3, "b now holds a: %g %g", r[0], r[3]);
  CHECK(out[2] && ts_buffer_read(out[2], r, sizeof r) == 0 && r[1] == 1, "input as output is a copy of the old value");
  CHECK(out[3] == given, "provided buffer kept");
  ts_buffer_read(given, r, sizeof r);
  CHECK(fabsf(r[1] - expf(1)) < 1e-6f, "exp into provided buffer: %g", r[1]);
  CHECK(out[4] && ts_buffer_read(out[4], r, sizeof r) == 0 && fabsf(r[2] - expf(2)) < 1e-6f, "repeated output");
  CHECK(out[5] && ts_buffer_rank(out[5]) == 2 && ts_buffer_read(out[5], r, sizeof r) == 0 &&
            fabsf(r[3] - expf(3)) < 1e-6f,
        "reshaped output");
  CHECK(out[6] && ts_buffer_read(out[6], r, sizeof r) == 0 && r[0] == 1.5f && r[3] == 1.5f, "constant output");
  for (int k = 2; k < 7; k++)
    if (k != 3) ts_buffer_free(out[k]);
  ts_buffer_free(given);
  ts_buffer_free(ba);
  ts_buffer_free(bb);
  ts_executable_free(e);
  ts_graph_free(g);
}

/* The matmul kernel's cached state survives between executes. */
static void test_kernel_state(ts_client *c) {
  ts_graph *g = ts_graph_new();
  int64_t s[2] = {32, 32};
  ts_tensor x = ts_input(g, "x", TS_F32, 2, s), w = ts_input(g, "w", TS_F32, 2, s);
  ts_graph_add_output(g, ts_matmul(g, x, w));
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "%s", ts_last_error());
  if (!e) {
    ts_graph_free(g);
    return;
  }
  ts_buffer *bx = ts_buffer_new(c, TS_F32, 2, s), *bw = ts_buffer_new(c, TS_F32, 2, s);
  ts_buffer *in[2] = {bx, bw}, *out[1] = {NULL};
  CHECK_OK(ts_execute(e, in, out));
  int dot = e->g->outputs[0];
  void *first = e->state[dot];
  ts_buffer *o1 = out[0];
  out[0] = o1; /* write into the same buffer again */
  CHECK_OK(ts_execute(e, in, out));
  CHECK(out[0] == o1, "provided output buffer reused");
  CHECK(first != NULL, "the f32 matmul kernel keeps a state");
  CHECK(e->state[dot] == first, "kernel state replaced between executes");
  ts_buffer_free(o1);
  ts_buffer_free(bx);
  ts_buffer_free(bw);
  ts_executable_free(e);
  ts_graph_free(g);
}

int main(void) {
  ts_test_init("test_runtime", 1);
  test_client();
  ts_client *c = ts_client_new(NULL);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return ts_test_finish();
  test_buffers(c);
  test_errors(c);
  test_alias(c);
  test_alias_copy(c);
  test_outputs(c);
  test_kernel_state(c);
  ts_client_free(c);
  return ts_test_finish();
}
