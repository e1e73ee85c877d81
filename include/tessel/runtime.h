/* tessel/runtime.h — clients, device buffers, compiling and executing.
 *
 * The pipeline: a ts_graph is compiled once (simplify, CSE, DCE, elementwise
 * fusion, memory plan) into a ts_executable, which is executed every step
 * with device buffers. Buffers are owned by the caller; an executable never
 * keeps a buffer passed to it. Output aliasing (ts_graph_alias_output) makes
 * an execute update an input buffer in place. */
#ifndef TESSEL_RUNTIME_H
#define TESSEL_RUNTIME_H

#include "tessel/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_client ts_client;
typedef struct ts_buffer ts_buffer;
typedef struct ts_executable ts_executable;

typedef struct {
  /* Compute threads used by kernels; 0 = TESSEL_NUM_THREADS if set, else all
   * cores. Never more threads than cores are started across tessel and
   * oneDNN together. */
  int num_threads;
} ts_client_options;

/* opts may be NULL (defaults). */
ts_client *ts_client_new(const ts_client_options *opts);
void ts_client_free(ts_client *c);
int ts_client_num_threads(const ts_client *c);
const char *ts_client_platform(const ts_client *c); /* "cpu" */

/* ---- buffers (device memory; on the CPU backend, aligned host memory) ---- */
/* Zero-filled buffer. */
ts_buffer *ts_buffer_new(ts_client *c, ts_dtype dt, int rank, const int64_t *shape);
/* Buffer holding a copy of data (numel * dtype size bytes, row-major). */
ts_buffer *ts_buffer_from_host(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const void *data);
/* Copies host data in / out; bytes must equal the buffer's size. */
int ts_buffer_write(ts_buffer *b, const void *src, size_t bytes);
int ts_buffer_read(const ts_buffer *b, void *dst, size_t bytes);
void ts_buffer_free(ts_buffer *b);
ts_dtype ts_buffer_dtype(const ts_buffer *b);
int ts_buffer_rank(const ts_buffer *b);
const int64_t *ts_buffer_shape(const ts_buffer *b);
size_t ts_buffer_bytes(const ts_buffer *b);

/* ---- compile ---- */
typedef struct {
  bool no_simplify, no_cse, no_fusion; /* passes are on by default */
  bool verbose;                        /* print pass statistics to stderr */
} ts_compile_options;

/* Compiles g (which is not modified and may be freed afterwards). opts may be
 * NULL. */
ts_executable *ts_compile(ts_client *c, const ts_graph *g, const ts_compile_options *opts);
void ts_executable_free(ts_executable *e);
int ts_executable_num_inputs(const ts_executable *e);
int ts_executable_num_outputs(const ts_executable *e);
/* Peak bytes of the executable's temporary arena (memory plan), excluding
 * inputs and outputs. */
size_t ts_executable_peak_bytes(const ts_executable *e);
/* Text form of the optimized program with its memory plan (malloc'd). */
char *ts_executable_to_string(const ts_executable *e);

/* Runs the program. inputs: one buffer per graph input, in input order, with
 * the input's dtype and shape. outputs: one slot per graph output. For an
 * aliased output the slot is set to its input buffer (updated in place). For
 * others, a non-NULL slot of the right dtype/shape is written into; a NULL slot
 * receives a new buffer the caller frees. */
int ts_execute(ts_executable *e, ts_buffer *const *inputs, ts_buffer **outputs);

#ifdef __cplusplus
}
#endif
#endif
