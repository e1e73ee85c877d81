/* train_mesh.h — `tessel train --mesh`: the shardings of the training and
 * evaluation programs on a device mesh. */
#ifndef TESSEL_TOOLS_TRAIN_MESH_H
#define TESSEL_TOOLS_TRAIN_MESH_H

#include <stdbool.h>

#include "tessel/tessel.h"

/* Marks every input of g: the batch dim of "x" and "y" on mesh axis "data"
 * (if the mesh has one); with megatron (the MLP) on axis "model" (if any)
 * fc1 column-parallel (weight (out, in) split on out, bias split) and fc2
 * row-parallel (weight split on in), their optimizer state alike; every
 * other input replicated. Returns 0 or -1 (error set). */
int train_mesh_mark(ts_graph *g, const ts_mesh *m, bool megatron);

#endif
