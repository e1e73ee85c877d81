/* train_mesh.h — `tessel train --mesh`: the shardings of the training and
 * evaluation programs on a device mesh. */
#ifndef TESSEL_TOOLS_TRAIN_MESH_H
#define TESSEL_TOOLS_TRAIN_MESH_H

#include <stdbool.h>

#include "tessel/tessel.h"

/* Marks every input of g: the batch dim of "x" and "y" on mesh axes "data"
 * and "fsdp" (those the mesh has); with megatron (the MLP) on axis "model"
 * (if any) fc1 column-parallel (weight (out, in) split on out, bias split)
 * and fc2 row-parallel (weight split on in), their optimizer state alike;
 * on axis "fsdp" (if any) every weight (rank >= 2; biases stay whole) and
 * its optimizer state split on its first other dim that divides evenly (FSDP / ZeRO-3: the partitioner
 * gathers weights where they are used and reduce-scatters their gradients,
 * so each device updates only its shard); every other input replicated.
 * Returns 0 or -1 (error set). */
int train_mesh_mark(ts_graph *g, const ts_mesh *m, bool megatron);

#endif
