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
/* Weight-update sharding (ZeRO-1; XLA's cross-replica weight-update
 * sharding), part of train_mesh_mark: the optimizer state of every weight
 * (rank >= 2) that no other axis splits is split over "data" on its first
 * dim that divides evenly, the parameter itself stays replicated. The
 * partitioner then reduce-scatters the gradient instead of all-reducing it
 * (the same sums, in the same order), each device updates its slice only,
 * and the new weight is all-gathered: the same bytes as the all-reduce, but
 * the update's work (AdamW: ~half of the MLP's step on one device) is divided
 * over the devices instead of repeated on each, and so is the state's
 * memory. Bit for bit the same values as the replicated update.
 * train_mesh_mark_replicated_update: the same marks without it (the
 * replicated update, every device updating every weight: bench A/B). */
int train_mesh_mark_replicated_update(ts_graph *g, const ts_mesh *m, bool megatron);

/* The mesh's axes are ones the shardings above use: "data", "model" (the
 * MLP only: with !megatron a note on stderr says it only replicates),
 * "fsdp". Any other name (or an unnamed axis) would train fully replicated
 * on it without a word: -1 (error set: the axes understood) unless
 * `placed`, when the caller places tensors on it itself (inspect --spec).
 * cmd names the command in the note. */
int train_mesh_check_axes(const char *cmd, const ts_mesh *m, bool megatron, bool placed);
/* A note on stderr when the batch does not divide over the devices of the
 * axes that split it ("data" and "fsdp"): the partitioner gathers such an
 * unevenly split dim back whole (padded: tessel inspect shows the
 * all-gather), so every device computes every row and nothing is data
 * parallel. Returns whether it divides. */
bool train_mesh_check_batch(const char *cmd, const ts_mesh *m, int64_t batch);

/* Whether the mesh's devices in this process (local_devices of it) fit in
 * memory before anything is compiled for them: every device keeps its own
 * copy of each parameter, its gradient and `states` optimizer states
 * (AdamW 2, SGD with momentum 1), divided over the axes that shard them
 * ("model" with megatron, "fsdp"; the states over "data" too), plus about 6 MiB for its programs and
 * activations (the MLP measured 17.9 MB per device, 10.7 of them parameter
 * state). *estimate gets the total in bytes (a lower bound). Returns 0, or -1
 * (error set: the estimate, what it counts, and the memory available to this
 * process) when even the estimate exceeds that memory. */
int train_mesh_check_memory(const ts_mesh *m, int local_devices, int64_t params, int states, bool megatron,
                            double *estimate);

#endif
