/* matmul_prim.c — matmul_prim.h: a oneDNN matmul primitive kept per node. */
#include "kernels/matmul_prim.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_internal.h" /* tk_dnnl_engine */

int tk_matmul_init(tk_matmul *m, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                   const dnnl_memory_desc_t *c, bool no_ref) {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  if (tk_dnnl_engine(&eng, &stream)) return -1;
  dnnl_matmul_desc_t md;
  if (dnnl_matmul_desc_init(&md, a, b, NULL, c) != dnnl_success) return -1;
  dnnl_primitive_attr_t attr;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return -1;
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success) return -1;
  const char *impl = NULL;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  if (no_ref && impl && strstr(impl, "ref")) {
    dnnl_primitive_desc_destroy(pd);
    return -1;
  }
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
  st = dnnl_primitive_create(&m->prim, pd);
  if (st == dnnl_success && sbytes) {
    m->scratch = aligned_alloc(64, (sbytes + 63) / 64 * 64);
    st = m->scratch ? dnnl_memory_create(&m->ms, smd, eng, m->scratch) : dnnl_out_of_memory;
  }
  if (st == dnnl_success) st = dnnl_memory_create(&m->ma, a, eng, DNNL_MEMORY_NONE);
  if (st == dnnl_success) st = dnnl_memory_create(&m->mb, b, eng, DNNL_MEMORY_NONE);
  if (st == dnnl_success) st = dnnl_memory_create(&m->mc, c, eng, DNNL_MEMORY_NONE);
  dnnl_primitive_desc_destroy(pd);
  return st == dnnl_success ? 0 : -1;
}

int tk_matmul_run(tk_matmul *m, const void *a, const void *b, void *c) {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  if (tk_dnnl_engine(&eng, &stream)) return -1;
  dnnl_memory_set_data_handle(m->ma, (void *)a);
  dnnl_memory_set_data_handle(m->mb, (void *)b);
  dnnl_memory_set_data_handle(m->mc, c);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m->ma}, {DNNL_ARG_WEIGHTS, m->mb}, {DNNL_ARG_DST, m->mc},
                             {DNNL_ARG_SCRATCHPAD, m->ms}};
  return dnnl_primitive_execute(m->prim, stream, m->ms ? 4 : 3, args) == dnnl_success &&
                 dnnl_stream_wait(stream) == dnnl_success
             ? 0
             : -1;
}

void tk_matmul_free(tk_matmul *m) {
  if (m->prim) dnnl_primitive_destroy(m->prim);
  if (m->ma) dnnl_memory_destroy(m->ma);
  if (m->mb) dnnl_memory_destroy(m->mb);
  if (m->mc) dnnl_memory_destroy(m->mc);
  if (m->ms) dnnl_memory_destroy(m->ms);
  free(m->scratch);
  memset(m, 0, sizeof *m);
}
