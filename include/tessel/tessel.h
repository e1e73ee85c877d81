/* tessel/tessel.h — everything: include this one header.
 *
 *   core.h      errors, dtypes
 *   graph.h     building global programs (ops, composites, outputs)
 *   autodiff.h  gradients as a graph rewrite
 *   runtime.h   client, buffers, compile, execute
 *   nn.h        layers, initialization, optimizers, schedules
 *   data.h      datasets (IDX / Fashion-MNIST)
 */
#ifndef TESSEL_TESSEL_H
#define TESSEL_TESSEL_H

#include "tessel/core.h"
#include "tessel/graph.h"
#include "tessel/autodiff.h"
#include "tessel/runtime.h"
#include "tessel/nn.h"
#include "tessel/data.h"

#endif
