/* kernels.h — the CPU kernel entry point: one call computes one node.
 *
 * The executor calls kernel_run for every node of the optimized program in
 * schedule order. Operand and result buffers are dense row-major arrays of the
 * nodes' dtypes and (global, on one device) shapes, 64-byte aligned, and the
 * result never overlaps an operand, with one exception: elementwise and FUSED
 * kernels accept out == in[i] (exactly the same pointer, same numel) so the
 * executor can update a donated buffer in place. Kernels use OpenMP for parallel loops
 * (the same runtime oneDNN uses, so the two never oversubscribe the cores). */
#ifndef TS_KERNELS_H
#define TS_KERNELS_H

#include "ir/ir.h"

/* Per-node cache a kernel may keep between executions (e.g. a oneDNN
 * primitive and its reordered weights). Kernels allocate a struct whose first
 * member is ts_kstate; the executor frees it through .free. */
typedef struct ts_kstate {
  void (*free)(struct ts_kstate *s);
} ts_kstate;

typedef struct {
  int num_threads;       /* threads this call may use (>= 1) */
  int device;            /* id of the device running the program (0 on one device) */
} ts_kctx;

/* Computes node `id` of g (any op but INPUT and the collectives, which the
 * device runs itself: runtime/cpu_collective.c). in[i] is operand i's data, out the result.
 * *state starts NULL and is kept by the executor for this node.
 * Returns 0, or -1 with set_error (e.g. gather index out of range). */
int kernel_run(const ts_graph *g, int id, const void *const *in, void *out,
                  ts_kstate **state, const ts_kctx *ctx);

/* Sets the OpenMP / oneDNN thread count for subsequent kernels. */
void kernels_set_num_threads(int n);

/* Convolution path controls for tests (conv.c): 1x1 convolutions without
 * padding, dilation or groups run on the plain NCHW layout with no reorders
 * (on by default; off: the blocked path every other convolution takes), and
 * whether the cached state of a conv node is that plain path. */
void tk_conv_set_plain_1x1(bool on);
bool tk_conv_state_is_plain(const ts_kstate *state);
bool tk_conv_gemm_state(const ts_kstate *state); /* a filter gradient run as one GEMM (conv_gemm.c) */
/* off: those filter gradients take oneDNN's convolution (benchmarks); a node
 * keeps the path of its first run, so set it before a program first runs and
 * keep it for that program's runs */
void tk_conv_set_gemm_1x1(bool on);
/* bf16 activations into / out of the blocked convolutions by blk16.c's
 * transposition (on by default) or, off, by oneDNN's reorder primitive. */
void tk_conv_set_blk16(bool on);
/* f32 channels-last forward convolutions with few input channels or a
 * narrow output take oneDNN's first non-brgconv kernel (on by default; off:
 * the one oneDNN lists first), and the implementation a conv node's cached
 * state runs (oneDNN's name; "" for none or the f64 loops). */
void tk_conv_set_nhwc_jit(bool on);
const char *tk_conv_state_impl(const ts_kstate *state);

/* Fused programs: fast paths (fused_fast.c) for the patterns they match
 * (on by default) or, off, every program in the tile interpreter (tests
 * compare the two bit for bit). */
void tk_fused_set_fast(bool on);

/* blk16.c: N images of C (a multiple of 16) channels of HW 16-bit values,
 * plain NCHW -> nChw16c (to_blocked) or back; a copy (the same bits as
 * oneDNN's reorder between those layouts), on nt threads. */
void tk_blk16_convert(const uint16_t *src, uint16_t *dst, int64_t N, int64_t C, int64_t HW, bool to_blocked, int nt);

#endif
