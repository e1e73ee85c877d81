/* tessel/autodiff.h — reverse-mode autodiff as a graph rewrite.
 *
 * ts_grad appends the gradient nodes of a scalar loss to the same graph: the
 * returned tensors are ordinary nodes that can be outputs, feed an optimizer
 * update, or be differentiated again. */
#ifndef TESSEL_AUTODIFF_H
#define TESSEL_AUTODIFF_H

#include "tessel/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

/* d loss / d wrt[i] into grads[i] (same dtype and shape as wrt[i]). loss must
 * be a float scalar. A wrt the loss does not depend on gets zeros. Errors name
 * the op without an adjoint or the non-scalar loss. */
int ts_grad(ts_graph *g, ts_tensor loss, int n, const ts_tensor *wrt, ts_tensor *grads);

/* Vector-Jacobian product: given cotangents (same shapes as outs), the
 * gradient of sum_k <cotangent_k, outs_k> with respect to wrt[i]. */
int ts_vjp(ts_graph *g, int n_out, const ts_tensor *outs, const ts_tensor *cotangents,
           int n, const ts_tensor *wrt, ts_tensor *grads);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
