/* dispatch.c — kernel_run: routes a node to its kernel family, sets the
 * OpenMP thread count, and owns the shared oneDNN engine and stream. */
#include <omp.h>
#include <pthread.h>

#include <oneapi/dnnl/dnnl.h> /* engine, stream */

#include "kernels/kernels_internal.h"


static dnnl_engine_t g_engine;
static int g_dnnl_status = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* One stream per calling thread (executors of several devices may run
 * kernels concurrently); destroyed when the thread exits. */
static pthread_key_t g_stream_key;

static void stream_destroy(void *s) { dnnl_stream_destroy((dnnl_stream_t)s); }

static void dnnl_init(void) {
  if (pthread_key_create(&g_stream_key, stream_destroy)) return;
  if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return;
  g_dnnl_status = 0;
}

int tk_dnnl_engine(struct dnnl_engine **eng, struct dnnl_stream **stream) {
  pthread_once(&g_once, dnnl_init);
  if (g_dnnl_status) return set_error("kernels: could not create the oneDNN CPU engine");
  dnnl_stream_t s = pthread_getspecific(g_stream_key);
  if (!s) {
    if (dnnl_stream_create(&s, g_engine, dnnl_stream_default_flags) != dnnl_success)
      return set_error("kernels: could not create a oneDNN stream");
    pthread_setspecific(g_stream_key, s);
  }
  *eng = g_engine;
  *stream = s;
  return 0;
}

void kernels_set_num_threads(int n) {
  if (n >= 1) omp_set_num_threads(n);
}

int kernel_run(const ts_graph *g, int id, const void *const *in, void *out, ts_kstate **state,
                  const ts_kctx *ctx) {
  const ts_node *n = &g->nodes[id];
  ts_kctx local = {ctx && ctx->num_threads > 0 ? ctx->num_threads : 1, ctx ? ctx->device : 0};
  /* oneDNN (OpenMP runtime) takes its thread count from this thread's ICV. */
  if (omp_get_max_threads() != local.num_threads) omp_set_num_threads(local.num_threads);
  /* Every op has a case and there is no default: a new op in ops.def fails
   * the build (-Werror=switch) until it has a kernel here. */
  switch (n->op) {
    case TS_OP_NEG: case TS_OP_ABS: case TS_OP_EXP: case TS_OP_LOG: case TS_OP_LOG1P: case TS_OP_TANH:
    case TS_OP_SQRT: case TS_OP_RSQRT: case TS_OP_SIGMOID: case TS_OP_ERF: case TS_OP_GELU: case TS_OP_CONVERT:
    case TS_OP_ADD: case TS_OP_SUB: case TS_OP_MUL: case TS_OP_DIV: case TS_OP_MAX: case TS_OP_MIN:
    case TS_OP_POW: case TS_OP_COMPARE: case TS_OP_SELECT:
      return tk_elementwise(g, n, in, out, &local); /* fused.c: one-instruction program */
    case TS_OP_INPUT: return set_error("kernels: node %d is an INPUT (the executor supplies it)", id);
    case TS_OP_CONSTANT: case TS_OP_IOTA: case TS_OP_BROADCAST: case TS_OP_RESHAPE:
    case TS_OP_TRANSPOSE: case TS_OP_SLICE: case TS_OP_PAD: case TS_OP_CONCAT:
      return tk_layout(g, n, in, out, &local);
    case TS_OP_RNG_UNIFORM: case TS_OP_RNG_NORMAL: return tk_rng(g, n, in, out, &local);
    case TS_OP_DOT: return tk_dot(g, n, in, out, state, &local);
    case TS_OP_CONV: case TS_OP_CONV_BWD_DATA: case TS_OP_CONV_BWD_FILTER:
      return tk_conv(g, n, in, out, state, &local);
    case TS_OP_MAXPOOL: case TS_OP_MAXPOOL_GRAD: case TS_OP_AVGPOOL: case TS_OP_AVGPOOL_GRAD:
      return tk_pool(g, n, in, out, &local);
    case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_GRAD: case TS_OP_LAYERNORM_DGAMMA:
      return tk_layernorm(g, n, in, out, &local);
    case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD: return tk_attention(g, n, in, out, &local);
    case TS_OP_REDUCE: return tk_reduce(g, n, in, out, &local);
    case TS_OP_GATHER: case TS_OP_SCATTER_ADD: return tk_index(g, n, in, out, &local);
    case TS_OP_FUSED: return tk_fused(g, n, in, out, state, &local);
    case TS_OP_ALL_REDUCE: case TS_OP_ALL_GATHER: case TS_OP_REDUCE_SCATTER: case TS_OP_ALL_TO_ALL:
    case TS_OP_COLLECTIVE_PERMUTE:
      return set_error("kernels: %s (node %d) is a collective: the device runs it, not a kernel",
                          ir_op_name(n->op), id);
    case TS_OP_COUNT: break;
  }
  return set_error("kernels: no CPU kernel for op %s (node %d)", ir_op_name(n->op), id);
}
