/* fused_apply.h — between fused_fast.c and fused_apply.c (private to
 * src/kernels): the one-pass loops of the batch-norm apply (forward, with a
 * residual or second apply, ReLU, bf16 rounding) and of the batch-norm input
 * gradient, and fused_fast.c's chunked loop they fall back to. Both write
 * elements [lo, hi) of F's program into out (element lo at out's start), on
 * the calling thread; F is tk_fast_match's description, read only. */
#ifndef TESSEL_KERNELS_FUSED_APPLY_H
#define TESSEL_KERNELS_FUSED_APPLY_H

#include "kernels/kernels_internal.h"

/* fused_apply.c: a TK_FAST_FORWARD, TK_FAST_BN_GRAD or (f32) TK_FAST_SCALED
 * program, a channel run at a time in one pass; runs it cannot take (a NaN
 * per-channel scale or optimizer scale,
 * a storage combination without a loop, an output overlapping an input
 * other than element for element) go to tk_fast_chunks. */
void tk_fast_apply_run(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);

/* fused_apply.c: for a channel-innermost F (inner 1; TK_FAST_FORWARD or
 * TK_FAST_BN_GRAD) over elements from lo, each per-channel term as a vector
 * of nch + 256 floats, element i channel (lo + i) % nch's value, into v (in
 * fused_apply.c's order: m, a, g, b of t[0] then of t[1]; the gradient's
 * m, k, c, s; an absent term's: some valid vector): the buffer they are in
 * (the caller frees it), NULL without memory. NaN values are kept. */
float *tk_fast_cl_vectors(const tk_fast *F, tk_in in, int64_t lo, const float *v[8]);

/* fused_fast.c: any F but TK_FAST_MASK / TK_FAST_CENTERED in chunks of 256
 * with plain + and *, rerun with the NaN-ordered ones where a result is NaN. */
void tk_fast_chunks(const tk_fast *F, tk_in in, void *out, int64_t lo, int64_t hi);

/* fused_fast.c: whether F's output over elements [lo, hi) (out: element lo,
 * os bytes each) meets an input F reads there: a full-size one's elements
 * [lo, hi), a per-channel one's (all its channels) or the optimizer's scalar
 * scale. With same_ok a full-size input that starts at out with os-byte
 * elements does not count (each element read before it is written). */
bool tk_fast_out_meets(const tk_fast *F, tk_in in, const void *out, int64_t lo, int64_t hi, size_t os, bool same_ok);

#endif
