/* tessel/tessel.h — everything: include this one header.
 *
 *   core.h      errors, dtypes
 *   graph.h     building global programs (ops, composites, outputs)
 *   autodiff.h  gradients as a graph rewrite
 *   runtime.h   client, buffers, compile, execute
 *   spmd.h      device meshes, partition specs, shardings, mark_sharding, shard_map
 *   nn.h        layers, initialization, optimizers, schedules
 *   data.h      datasets (IDX / Fashion-MNIST)
 *   loader.h    prefetching, sharding-aware data loader; CIFAR-10, synthetic data
 *   metrics.h   counters and timers, reports, traces, the compile cache
 *   ckpt.h      sharded checkpoints: save, load onto any mesh, export safetensors
 */
#ifndef TESSEL_TESSEL_H
#define TESSEL_TESSEL_H

#include "tessel/core.h"
#include "tessel/graph.h"
#include "tessel/autodiff.h"
#include "tessel/runtime.h"
#include "tessel/spmd.h"
#include "tessel/nn.h"
#include "tessel/data.h"
#include "tessel/loader.h"
#include "tessel/imagefolder.h"
#include "tessel/metrics.h"
#include "tessel/ckpt.h"

#endif
