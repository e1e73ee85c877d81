/* matmul_prim.h — one oneDNN matmul primitive with its memories and user
 * scratchpad, created once per node and kept in its ts_kstate: dot.c's
 * dot_general and conv_gemm.c's 1x1 filter gradient. */
#ifndef TS_KERNELS_MATMUL_PRIM_H
#define TS_KERNELS_MATMUL_PRIM_H

#include <stdbool.h>

#include <oneapi/dnnl/dnnl.h>

typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t ma, mb, mc, ms;
  void *scratch;
} tk_matmul;

/* c = a b for the descriptors given (their dims and strides; a zeroed m).
 * no_ref: refuse oneDNN's reference implementation. 0, or -1 (no primitive,
 * or out of memory; tk_matmul_free still frees what was made). */
int tk_matmul_init(tk_matmul *m, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                   const dnnl_memory_desc_t *c, bool no_ref);
/* Runs it on the calling thread's stream (kernels_internal.h tk_dnnl_engine)
 * with these buffers; 0 or -1. */
int tk_matmul_run(tk_matmul *m, const void *a, const void *b, void *c);
void tk_matmul_free(tk_matmul *m);

#endif
